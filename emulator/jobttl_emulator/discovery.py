"""``/version`` and legacy (unaggregated) discovery documents, as the dynamic client and kubectl read them.

kubectl 1.32 asks for aggregated discovery first and falls back to these when
the answer is not one (``Content-Type`` without ``as=APIGroupDiscoveryList``).
Each resource is listed with its scope, verbs, short names, categories and
subresources (``<plural>/status``, ``pods/log``); ``authorization.k8s.io/v1``
offers ``selfsubjectaccessreviews`` for ``kubectl auth can-i``.
"""

from __future__ import annotations

import base64
import hashlib

from .resources import Resource

# Server version 1.32: the gcloud kubectl dispatcher on PATH picks the kubectl release matching the server.
SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "0000000000000000000000000000000000000000",  # an emulator has no commit
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T17:58:23Z",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}
# The verbs kube-apiserver advertises for a custom resource, in its order.
VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
_NAMESPACE_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
_READ_VERBS = ["get", "list", "watch"]  # what a read-only registration (CRDs) serves
AUTHORIZATION_GROUP = "authorization.k8s.io"
AUTHENTICATION_GROUP = "authentication.k8s.io"
_ACCESS_REVIEW = {
    "name": "selfsubjectaccessreviews",
    "singularName": "selfsubjectaccessreview",
    "namespaced": False,
    "kind": "SelfSubjectAccessReview",
    "verbs": ["create"],
}
_SUBJECT_ACCESS_REVIEW = {
    "name": "subjectaccessreviews",
    "singularName": "subjectaccessreview",
    "namespaced": False,
    "kind": "SubjectAccessReview",
    "verbs": ["create"],
}
_TOKEN_REVIEW = {
    "name": "tokenreviews",
    "singularName": "tokenreview",
    "namespaced": False,
    "kind": "TokenReview",
    "verbs": ["create"],
}


def storage_version_hash(res: Resource) -> str:
    digest = hashlib.sha256(f"{res.group}/{res.version}/{res.kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def _entries(res: Resource) -> list[dict]:
    """A resource's APIResource entries: itself, then its subresources."""
    main = {
        "name": res.plural,
        "singularName": res.singular,
        "namespaced": res.namespaced,
        "kind": res.kind,
        "verbs": _READ_VERBS
        if res.read_only
        else VERBS
        if res.namespaced or res.kind != "Namespace"
        else _NAMESPACE_VERBS,
    }
    if res.short_names:
        main["shortNames"] = list(res.short_names)
    if res.categories:
        main["categories"] = list(res.categories)
    main["storageVersionHash"] = storage_version_hash(res)
    entries = [main]
    if res.status_subresource:
        entries.append(
            {
                "name": f"{res.plural}/status",
                "singularName": "",
                "namespaced": res.namespaced,
                "kind": res.kind,
                "verbs": ["get"] if res.read_only else ["get", "patch", "update"],
            }
        )
    if res.log_subresource:
        entries.append(
            {
                "name": f"{res.plural}/log",
                "singularName": "",
                "namespaced": res.namespaced,
                "kind": res.kind,
                "verbs": ["get"],
            }
        )
    return entries


def _resource_list(resources: tuple[Resource, ...], group: str, version: str) -> dict:
    entries = [e for res in resources if (res.group, res.version) == (group, version) for e in _entries(res)]
    if (group, version) == (AUTHORIZATION_GROUP, "v1"):
        entries += [_ACCESS_REVIEW, _SUBJECT_ACCESS_REVIEW]
    if (group, version) == (AUTHENTICATION_GROUP, "v1"):
        entries.append(_TOKEN_REVIEW)
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": entries}


def _group_versions(resources: tuple[Resource, ...]) -> dict[str, list[str]]:
    versions: dict[str, list[str]] = {}
    for res in resources:
        if res.group and res.version not in versions.setdefault(res.group, []):
            versions[res.group].append(res.version)
    versions.setdefault(AUTHORIZATION_GROUP, ["v1"])
    versions.setdefault(AUTHENTICATION_GROUP, ["v1"])
    return versions


def _api_group(group: str, versions: list[str]) -> dict:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def discovery(resources: tuple[Resource, ...], segments: list[str], host: str) -> dict | None:
    """The document at ``/<segments>``, or None when there is none."""
    by_group = _group_versions(resources)
    if segments == ["version"]:
        return SERVER_VERSION
    if segments == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
        }
    if segments == ["api", "v1"]:
        return _resource_list(resources, "", "v1")
    if segments == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_api_group(g, v) for g, v in by_group.items()]}
    if len(segments) in (2, 3) and segments[0] == "apis" and segments[1] in by_group:
        versions = by_group[segments[1]]
        if len(segments) == 2:
            return {"kind": "APIGroup", "apiVersion": "v1", **_api_group(segments[1], versions)}
        if segments[2] in versions:
            return _resource_list(resources, segments[1], segments[2])
    return None
