"""`jobttl explain --crd FILE`: the worker's start-up check of the kinds' paths against their CRDs, offline.

The worker reads each enabled kind's CustomResourceDefinition at start and checks every path its
declaration reads against the schema (`jobttl.worker.kindcheck`, `jobttl.core.domain.kinds.crdcheck`):
an operator's path naming nothing stops it. This runs the very same check against CRDs read from a
file (``kubectl get crd tfjobs.kubeflow.org -o yaml``, an operator's release manifest, several
documents or a ``List``), for every kind of the policy (built in, declared, enabled or not) that one
of them defines, so a declaration can be tried before it is rolled out. Each kind is:

- ``verified``: every path checked and found;
- ``unverified``: no path wrong, but some the schema cannot follow to their end (no schema,
  ``x-kubernetes-preserve-unknown-fields``, a map of anything): a misspelling there would pass;
- ``fields-absent``: a built-in declaration's paths (or those a replacing declaration inherited
  from it) that the CRD lacks: the worker warns, and those readings never match;
- ``refused``: the operator's own paths naming nothing: the worker would stop at start;
- ``not-served``: the CRD does not serve the declared version.

Exit 1 when a kind is refused (the worker would not start with this policy and CRD), 2 when the
file cannot be read, holds a CRD not shaped as the API server writes one (``spec.names: TFJob``:
the document and the field named), or holds no CRD of a known kind, else 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from jobttl.cli.inputs import read_input
from jobttl.core.domain.kinds.crdcheck import Problem, malformed
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.domain.rules.policy import Policy
from jobttl.worker import kindcheck

API_VERSION = "jobttl.io/explain-crd/v1"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # a CRD is large (RayJob's: 1.4 MB)


class MalformedCRD(ValueError):
    """A CustomResourceDefinition in the file not shaped as the API server writes one; names the document and field."""


def crds_in(text: str) -> dict[str, dict[str, Any]]:
    """The CustomResourceDefinitions in YAML or JSON text (Lists unwrapped), by name; MalformedCRD for one
    whose fields the check reads are not shaped as a CRD's (a traceback otherwise)."""
    found = {}
    for number, document in enumerate(yaml.load_all(text, Loader=_LOADER), 1):
        items = document.get("items") if isinstance(document, dict) and document.get("kind") == "List" else [document]
        for i, item in enumerate(items if isinstance(items, list) else ()):
            if isinstance(item, dict) and item.get("kind") == "CustomResourceDefinition":
                problem = malformed(item)
                if problem is not None:
                    where = f"document {number}" + (f", items[{i}]" if item is not document else "")
                    name = (item.get("metadata") or {}).get("name") if isinstance(item.get("metadata"), dict) else None
                    raise MalformedCRD(f"{where}{f' (CRD {name})' if isinstance(name, str) else ''}: {problem}")
                found[str(item["metadata"].get("name"))] = item
    return found


def check_kind(kind: JobKind, crd: dict[str, Any]) -> dict[str, Any]:
    """One kind against its CRD, as the worker checks it at start: the verdict and what it found."""
    report = kindcheck.check(lambda _kind, _timeout: crd, (kind,), pause=0)
    unverified = report.unverified.get(_name(kind), (kind, []))[1]
    absent = [p for _, problems in report.absent for p in problems]
    if report.not_served:
        verdict = "not-served"
    elif report.errors:
        verdict = "refused"
    elif absent:
        verdict = "fields-absent"
    elif unverified or report.unchecked:
        verdict = "unverified"
    else:
        verdict = "verified"
    served = [v for _, versions in report.not_served for v in versions]
    return {
        "kind": _name(kind),
        "crd": kind.crd,
        "declaredIn": kind.declared_in or "kinds.yaml",
        "builtin": kind.builtin,
        "verdict": verdict,
        "refused": report.errors,
        "absent": [_problem(p) for p in absent],
        "unverified": [_problem(p) for p in unverified],
        "servedVersions": served,
    }


def _name(kind: JobKind) -> str:
    return f"{kind.api_version}/{kind.kind}"


def _problem(problem: Problem) -> dict[str, Any]:
    return {"field": problem.field, "path": problem.text, "message": problem.message, "inherited": problem.inherited}


def main(args: argparse.Namespace, policy: Policy) -> int:
    try:
        crds = read_input(args.crd, crds_in)
    except MalformedCRD as exc:
        print(
            f"jobttl: {args.crd}: not a CustomResourceDefinition as the API server writes one: {exc}", file=sys.stderr
        )
        return 2
    if crds is None:
        return 2
    kinds = [k for k in policy.known_kinds if k.crd in crds and k.declaration is not None]
    if not kinds:
        print(
            f"jobttl: {args.crd} holds no CustomResourceDefinition of a kind the policy knows (it holds: "
            f"{', '.join(sorted(crds)) or 'none'})",
            file=sys.stderr,
        )
        return 2
    items = [{**check_kind(kind, crds[kind.crd]), "enabled": kind in policy.kinds} for kind in kinds]
    if args.json:
        print(json.dumps({"apiVersion": API_VERSION, "items": items}, indent=2))
    else:
        _print(items)
    return 1 if any(item["verdict"] == "refused" for item in items) else 0


def _print(items: list[dict[str, Any]]) -> None:
    from jobttl.cli.tables import console

    for item in items:
        whose = "built in" if item["builtin"] else item["declaredIn"]
        enabled = "enabled" if item["enabled"] else "not enabled by the policy's kinds"
        console.print(
            f"{item['kind']} ({whose}; {enabled}) against CRD {item['crd']}: {item['verdict']}",
            markup=False,
            highlight=False,
        )
        if item["verdict"] == "not-served":
            console.print(f"  the CRD serves {', '.join(item['servedVersions']) or 'no version'}", markup=False)
        for line in item["refused"]:
            console.print(f"  refused: {line}", markup=False, highlight=False)
        for what in ("absent", "unverified"):
            for problem in item[what]:
                inherited = " (inherited from the built-in declaration)" if problem["inherited"] else ""
                console.print(
                    f"  {what}{inherited}: {problem['field']}: {problem['message']}", markup=False, highlight=False
                )
