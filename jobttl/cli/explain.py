"""`jobttl explain`: what the worker would decide for any object, and why, offline.

It reads objects (YAML or JSON, several documents, ``kind: List`` and ``kubectl get -o
yaml`` output included) and runs them through the same `decide()` the sink, the resync and
the worker use, under the policy given (or ``JOBTTL_POLICY``), as of ``--now``. No cluster
or Redis is needed, so admins can try a policy change on real objects before rolling it
out, and tests outside the code can check decisions.

The ``--json`` shape is stable (``apiVersion: jobttl.io/explain/v1``, documented in the
README); a change to it bumps the version. Each item has: ``apiVersion``, ``kind``,
``namespace``, ``name``, ``uid``, ``verdict``, ``reason``, ``outcome``, ``finishedAt``,
``finishedFrom``, ``ttl``, ``ttlSource``, ``expiresAt``, ``expired`` (due by ``--now``),
``dryRun`` and ``rules``; every key is always there (null when it does not apply).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from typing import Any

import yaml

from jobttl.cli.inputs import read_input
from jobttl.cli.parsing import add_command
from jobttl.core.domain.wire import shapes
from jobttl.core.runtime.config import Settings
from jobttl.core.domain.decisions.decision import Decision, Verdict, decide
from jobttl.core.domain.kinds.registry import BUILTIN_KINDS
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.domain.rules.policy import Policy, PolicyError, load_policy

API_VERSION = "jobttl.io/explain/v1"
UNKNOWN_KIND = "unknown-kind"
KIND_NOT_ENABLED = "kind-not-enabled"
UNREADABLE = "unreadable"
ENVIRONMENT = ("JOBTTL_POLICY",)


class _KubeLoader(yaml.SafeLoader):
    """YAML as Kubernetes reads it: an unquoted time stays a string (sigs.k8s.io/yaml), not a datetime."""


_KubeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _rfc3339(epoch: int | None) -> str | None:
    return None if epoch is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def objects(text: str) -> list[dict[str, Any]]:
    """Every object in YAML or JSON text, Lists unwrapped.

    A typed list straight from the API (``TFJobList``, ``JobList``) may leave out its items'
    apiVersion and kind; they are the list's.
    """
    found = []
    for document in yaml.load_all(text, Loader=_KubeLoader):
        if not isinstance(document, dict):
            continue
        list_kind = str(document.get("kind", ""))
        items = document.get("items") if list_kind.endswith("List") else None
        if not isinstance(items, list):
            found.append(document)
            continue
        implied = {"apiVersion": document.get("apiVersion"), "kind": list_kind[: -len("List")]}
        found += [{**implied, **item} if list_kind != "List" else item for item in items if isinstance(item, dict)]
    return found


def kind_of(obj: dict[str, Any], known: tuple[JobKind, ...] = BUILTIN_KINDS) -> JobKind | None:
    """The kind of `obj` among `known` (the policy's: built in, and declared in kindDeclarations)."""
    return next((k for k in known if (k.api_version, k.kind) == (obj.get("apiVersion"), obj.get("kind"))), None)


def explain(obj: dict[str, Any], policy: Policy, now: float) -> dict[str, Any]:
    """One item of the --json output: the object's identity and what decide() says of it."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    item = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }
    kind = kind_of(obj, policy.known_kinds)
    if kind is None:
        known = (
            f"jobttl does not know {obj.get('apiVersion')} {obj.get('kind')}"
            if obj.get("kind")
            else "not a Kubernetes object: it has no kind"
        )
        return {**item, **_not_decided(UNKNOWN_KIND, known)}
    if kind not in policy.kinds:
        return {**item, **_not_decided(KIND_NOT_ENABLED, f"{kind.kind} is known but not enabled by the policy's kinds")}
    try:
        decision = decide(obj, kind, policy)
    except Exception as exc:  # noqa: BLE001 - the resync rejects such an object the same way, and goes on
        return {**item, **_not_decided(UNREADABLE, shapes.describe(exc))}
    return {**item, **_decided(decision, now)}


def _decided(decision: Decision, now: float) -> dict[str, Any]:
    expired = decision.verdict is Verdict.EXPIRES and decision.expires_at is not None and decision.expires_at <= now
    return {
        "verdict": decision.verdict.value,
        "reason": decision.reason,
        "outcome": decision.outcome,
        "finishedAt": _rfc3339(decision.finished_at),
        "finishedFrom": decision.finished_from,
        "ttl": decision.ttl,
        "ttlSource": decision.ttl_source,
        "expiresAt": _rfc3339(decision.expires_at),
        "expired": expired,
        "dryRun": decision.dry_run,
        "rules": list(decision.rules),
    }


def _not_decided(verdict: str, reason: str) -> dict[str, Any]:
    """The same keys as a decision, for an object jobttl does not decide at all."""
    return {
        "verdict": verdict,
        "reason": reason,
        "outcome": None,
        "finishedAt": None,
        "finishedFrom": None,
        "ttl": None,
        "ttlSource": None,
        "expiresAt": None,
        "expired": False,
        "dryRun": False,
        "rules": [],
    }


def _now(text: str | None) -> float | str:
    """--now as epoch seconds, or the message saying what is wrong with it."""
    if not text:
        return time.time()
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return f"--now: expected an RFC 3339 time such as 2030-01-31T00:00:00Z, got {text!r}"
    if when.tzinfo is None:
        return f"--now: give the time zone (e.g. Z), got {text!r}"
    return when.timestamp()


def add_commands(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands,
        "explain",
        run,
        "what jobttl would decide for objects in a file, and why; or, "
        "with --crd, whether the kinds' declared paths are in their CRDs "
        "(offline: no cluster, no Redis)",
        ENVIRONMENT,
        quiet=True,
    )
    parser.add_argument(
        "-f",
        "--filename",
        metavar="FILE",
        help="YAML or JSON objects (`kubectl get -o yaml` output and List objects too); - for stdin "
        "(default: none; one of -f and --crd is required)",
    )
    parser.add_argument(
        "--crd",
        metavar="FILE",
        help="check the policy's kinds against the CustomResourceDefinitions in FILE (`kubectl get "
        "crd NAME -o yaml`, release manifests; - for stdin) as the worker does at start, instead "
        "of deciding objects (default: none)",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="the policy to decide with (default: JOBTTL_POLICY's, else the built-in defaults)",
    )
    parser.add_argument("--now", metavar="RFC3339", help="decide as of this time (default: now)")
    parser.add_argument("--json", action="store_true", help="print JSON (the documented, stable shape)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    if (args.filename is None) == (args.crd is None):
        print(
            "jobttl: explain needs -f FILE (objects to decide) or --crd FILE (CRDs to check the kinds against)",
            file=sys.stderr,
        )
        return 2
    try:
        # Another policy file, in the same installation: JOBTTL_DELETE_NAMESPACES confines it too.
        policy = load_policy(args.policy).confined_to(settings.delete_namespaces) if args.policy else settings.policy
    except PolicyError as exc:
        print(f"jobttl: {exc}", file=sys.stderr)
        return 2
    if args.crd is not None:
        from jobttl.cli import explain_crd

        return explain_crd.main(args, policy)
    now = _now(args.now)
    if isinstance(now, str):
        print(f"jobttl: {now}", file=sys.stderr)
        return 2
    found = read_input(args.filename, objects)
    if found is None:
        return 2
    items = [explain(obj, policy, now) for obj in found]
    if args.json:
        print(json.dumps({"apiVersion": API_VERSION, "now": _rfc3339(int(now)), "items": items}, indent=2))
    else:
        _print(items, now)
    return 0


def _print(items: list[dict[str, Any]], now: float) -> None:
    from jobttl.cli.tables import console
    from jobttl.core.domain.wire.durations import format_duration

    for item in items:
        where = "/".join(str(item[k] or "-") for k in ("namespace", "name"))
        console.print(f"{item['apiVersion'] or '-'} {item['kind'] or '-'} {where}: {item['verdict']}")
        console.print(f"  why: {item['reason']}")
        if item["finishedAt"]:
            console.print(f"  finished: {item['outcome']}, {item['finishedAt']} (from {item['finishedFrom']})")
        if item["ttl"] is not None:
            console.print(f"  TTL: {format_duration(item['ttl'], exact=True)} from {item['ttlSource']}")
        if item["expiresAt"]:
            expires = datetime.fromisoformat(item["expiresAt"].replace("Z", "+00:00")).timestamp()
            when = "now (expired)" if item["expired"] else f"in {format_duration(expires - now)}"
            console.print(
                f"  deleted: {item['expiresAt']}, {when}" + (" (dry run: only recorded)" if item["dryRun"] else "")
            )
        if item["rules"]:
            console.print(f"  policy rules: {', '.join(item['rules'])}")
    if not items:
        console.print("no objects found")
