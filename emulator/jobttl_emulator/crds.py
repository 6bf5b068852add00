"""Registrations from CustomResourceDefinition YAML, as kube-apiserver derives them.

Each served version of a CRD becomes one :class:`Resource`: group, version,
names (kind, plural, singular, listKind, shortNames, categories), scope, the
``status`` subresource, ``additionalPrinterColumns``, ``selectableFields`` and
the ``openAPIV3Schema``. Versions do not share storage here (there is no
conversion): an object created as ``v1`` is not visible as ``v2beta1``.

Each resource keeps the CRD it came from: the store serves those CRDs under
``apiextensions.k8s.io/v1`` (``served_crd``: as kube-apiserver answers for an
established CRD, its defaults filled in and its status set).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml  # a dependency of the kubernetes client

from .resources import Resource

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader reads a 600 KB CRD in 40 ms, not 400


class CRDError(ValueError):
    """A document that is not a usable apiextensions.k8s.io/v1 CustomResourceDefinition."""


def resources_from_crd(crd: dict) -> list[Resource]:
    """The resources one CRD object serves, one per ``served`` version."""
    if crd.get("kind") != "CustomResourceDefinition" or crd.get("apiVersion") != "apiextensions.k8s.io/v1":
        raise CRDError(
            f"not an apiextensions.k8s.io/v1 CustomResourceDefinition: {crd.get('apiVersion')} {crd.get('kind')}"
        )
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    try:
        group, kind, plural = spec["group"], names["kind"], names["plural"]
    except KeyError as exc:
        raise CRDError(f"CRD {crd.get('metadata', {}).get('name')!r} lacks spec.{exc.args[0]}") from None
    return [
        Resource(
            group,
            version["name"],
            kind,
            plural,
            singular=names.get("singular", ""),
            list_kind=names.get("listKind", ""),
            status_subresource="status" in (version.get("subresources") or {}),
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            selectable_fields=tuple(f["jsonPath"].lstrip(".") for f in version.get("selectableFields") or ()),
            schema=(version.get("schema") or {}).get("openAPIV3Schema"),
            printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            crd=crd,
        )
        for version in spec.get("versions") or ()
        if version.get("served", True)
    ]


def load_crds(paths: Iterable[str | Path]) -> list[Resource]:
    """Every served version of every CRD in these (multi-document) YAML files."""
    resources: list[Resource] = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            documents: list[Any] = [d for d in yaml.load_all(fh, Loader=_LOADER) if d]
        for doc in documents:
            for crd in doc.get("items", []) if doc.get("kind") == "List" else [doc]:
                try:
                    resources.extend(resources_from_crd(crd))
                except CRDError as exc:
                    raise CRDError(f"{path}: {exc}") from None
    return resources


def merge_resources(base: Iterable[Resource], extra: Iterable[Resource]) -> tuple[Resource, ...]:
    """``base`` with each of ``extra`` replacing the registration of the same group, version and kind."""
    extra = tuple(extra)
    replaced = {(r.group, r.version, r.kind) for r in extra}
    return (*(r for r in base if (r.group, r.version, r.kind) not in replaced), *extra)


def definitions(resources: Iterable[Resource]) -> list[dict]:
    """The CRDs the resources were read from, once each (by name), in order."""
    found: dict[str, dict] = {}
    for res in resources:
        if res.crd is not None:
            found.setdefault((res.crd.get("metadata") or {}).get("name", ""), res.crd)
    return list(found.values())


# The server-set metadata a CRD file may carry (`kubectl get -o yaml` output): dropped, then set anew.
_SERVER_SET = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "selfLink",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


def served_crd(crd: dict, now: str) -> tuple[dict, dict]:
    """(the CRD as created, its status) as kube-apiserver serves an established CRD: the defaults
    of apiextensions.k8s.io/v1 filled in (names.singular and listKind, conversion strategy None)
    and a status whose NamesAccepted and Established conditions are True since `now`."""
    crd = copy.deepcopy(crd)
    crd.pop("status", None)
    meta = crd.setdefault("metadata", {})
    for key in _SERVER_SET:
        meta.pop(key, None)
    spec = crd.setdefault("spec", {})
    names = spec.setdefault("names", {})
    names.setdefault("singular", str(names.get("kind", "")).lower())
    names.setdefault("listKind", f"{names.get('kind', '')}List")
    spec.setdefault("scope", "Namespaced")
    spec.setdefault("conversion", {"strategy": "None"})
    status = {
        "acceptedNames": copy.deepcopy(names),
        "conditions": [
            {
                "lastTransitionTime": now,
                "message": "no conflicts found",
                "reason": "NoConflicts",
                "status": "True",
                "type": "NamesAccepted",
            },
            {
                "lastTransitionTime": now,
                "message": "the initial names have been accepted",
                "reason": "InitialNamesAccepted",
                "status": "True",
                "type": "Established",
            },
        ],
        "storedVersions": [v["name"] for v in spec.get("versions") or () if v.get("storage")],
    }
    return crd, status
