"""The cluster manifests that follow the kinds: RBAC and event sources from the policy's kinds.

The same declarations the sink and the worker read (`Policy.kinds`, built in and declared) give
what the cluster must grant and send for them: each component's ClusterRole rules on the job
kinds (the verbs of `jobttl.core.kube.PERMISSIONS`), the ApiServerSource's `resources` and the
Trigger's kind filter. `missing` checks rendered manifests (``kubectl kustomize knative/``)
against them, so a declared kind without its RBAC or its source is caught before a user finds it.
Pure: manifests in, dicts out.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from jobttl.core.kinds import JobKind
from jobttl.core.kube import CRD_GROUP, CRDS, JOBS, VERSION, crd_names, permissions
from jobttl.core.policy import Policy

RBAC = "rbac.authorization.k8s.io/v1"
SOURCE_VERBS = ("get", "list", "watch")  # what an ApiServerSource adapter does with each resource
LABELS = {"app.kubernetes.io/part-of": "jobttl"}


def kind_rules(kinds: tuple[JobKind, ...], verbs: frozenset[str] | tuple[str, ...]) -> list[dict[str, Any]]:
    """ClusterRole rules granting `verbs` on `kinds`, one rule per API group, in first-seen order."""
    by_group: dict[str, list[str]] = defaultdict(list)
    for kind in kinds:
        if kind.plural not in by_group[kind.group]:
            by_group[kind.group].append(kind.plural)
    return [{"apiGroups": [group], "resources": plurals, "verbs": sorted(verbs)} for group, plurals in by_group.items()]


def crd_rules(kinds: tuple[JobKind, ...], verbs: frozenset[str] | tuple[str, ...]) -> list[dict[str, Any]]:
    """The rule letting the worker read its kinds' own CustomResourceDefinitions, by name; none
    when no kind has one (a rule with no names would grant every CRD)."""
    names = crd_names(kinds)
    return [{"apiGroups": [CRD_GROUP], "resources": [CRDS], "resourceNames": names, "verbs": sorted(verbs)}] if names else []


def cluster_roles(policy: Policy) -> list[dict[str, Any]]:
    """The source's and the worker's ClusterRoles for this policy's kinds and features."""
    worker = permissions("worker", archive=policy.archiving, pod_cleanup=policy.pod_stages)
    other = [{"apiGroups": [""], "resources": [resource], "verbs": sorted(verbs)}
             for resource, verbs in sorted(worker.items()) if resource not in (JOBS, VERSION, CRDS)]
    return [_role("jobttl-source", "source", kind_rules(policy.kinds, SOURCE_VERBS)),
            _role("jobttl-worker", "worker", kind_rules(policy.kinds, worker[JOBS]) + other
                  + crd_rules(policy.kinds, worker[CRDS]))]


def _role(name: str, component: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": RBAC, "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {**LABELS, "app.kubernetes.io/component": component}},
            "rules": rules}


def source_resources(policy: Policy) -> list[dict[str, str]]:
    """The ApiServerSource's `spec.resources` for this policy's kinds."""
    return [{"apiVersion": k.api_version, "kind": k.kind} for k in policy.kinds]


def trigger_kinds(policy: Policy) -> list[dict[str, Any]]:
    """The Trigger's `filters` entry that lets exactly these kinds through (by the `kind` attribute)."""
    names = list(dict.fromkeys(k.kind for k in policy.kinds))
    return [{"exact": {"kind": name}} for name in names]


def missing(policy: Policy, objects: list[dict[str, Any]], source: str = "jobttl-jobs",
            accounts: dict[str, str] | None = None) -> list[str]:
    """What rendered manifests lack for this policy's kinds: RBAC for the source's and the worker's
    service accounts, and the ApiServerSource's resources. Empty when nothing is missing."""
    accounts = accounts or {"jobttl-source": "source", "jobttl-worker": "worker"}
    problems = []
    verbs = {"source": SOURCE_VERBS, "worker": tuple(permissions("worker")[JOBS])}
    for account, component in accounts.items():
        granted = _granted(objects, account)
        for kind in policy.kinds:
            lacking = sorted(v for v in verbs[component] if (kind.group, kind.plural, v) not in granted)
            if lacking:
                problems.append(f"RBAC: service account {account} may not {', '.join(lacking)} {kind.resource} "
                                f"({kind.api_version} {kind.kind})")
    for account, component in accounts.items():
        if component != "worker":
            continue
        readable = _granted(objects, account, names=True)
        unreadable = [name for name in crd_names(policy.kinds)
                      if not {(CRD_GROUP, CRDS, "get", name), (CRD_GROUP, CRDS, "get", "*")} & readable]
        if unreadable:
            problems.append(f"RBAC: service account {account} may not get the customresourcedefinitions "
                            f"{', '.join(unreadable)} (the worker checks its kinds' paths against them at start; "
                            "without it, a warning and no check)")
    sources = [o for o in objects if o.get("kind") == "ApiServerSource" and (o.get("metadata") or {}).get("name") == source]
    listed = {(r.get("apiVersion"), r.get("kind")) for o in sources for r in (o.get("spec") or {}).get("resources") or ()}
    for kind in policy.kinds:
        if (kind.api_version, kind.kind) not in listed:
            problems.append(f"source: ApiServerSource {source} does not watch {kind.api_version} {kind.kind}")
    return problems


def _granted(objects: list[dict[str, Any]], account: str, names: bool = False) -> set[tuple[str, ...]]:
    """(apiGroup, resource, verb) the ClusterRoles bound to `account` grant ("*" expanded loosely);
    with `names`, (apiGroup, resource, verb, name) for the rules limited by resourceNames."""
    roles = {(o.get("kind"), (o.get("metadata") or {}).get("name")): o for o in objects
             if o.get("apiVersion") == RBAC and o.get("kind") in ("ClusterRole", "Role")}
    granted: set[tuple[str, str, str]] = set()
    for binding in objects:
        if binding.get("apiVersion") != RBAC or binding.get("kind") not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == account for s in binding.get("subjects") or ()):
            continue
        ref = binding.get("roleRef") or {}
        role = roles.get((ref.get("kind"), ref.get("name"))) or {}
        for rule in role.get("rules") or ():
            if not names and "resourceNames" in rule:
                continue  # only the objects named: not the kind as a whole
            for group in rule.get("apiGroups") or ():
                for resource in rule.get("resources") or ():
                    for verb in rule.get("verbs") or ():
                        if names:  # a rule naming none grants every name
                            granted.update((group, resource, verb, name) for name in rule.get("resourceNames", ["*"]))
                        else:
                            granted.add((group, resource, verb))
    return granted
