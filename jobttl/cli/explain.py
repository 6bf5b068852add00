"""`jobttl explain`: what the worker would decide for any object, and why, offline.

It reads objects (YAML or JSON, several documents, ``kind: List`` and ``kubectl get -o
yaml`` output included) and runs them through the same `decide()` the sink, the resync and
the worker use, under the policy given (or ``JOBTTL_POLICY``), as of ``--now``. No cluster
or Redis is needed, so admins can try a policy change on real objects before rolling it
out, and tests outside the code can check decisions.

The ``--json`` shape is stable (``apiVersion: jobttl.io/explain/v1``); a change to it bumps
the version. Each item has: ``kind``, ``namespace``, ``name``, ``uid``, ``verdict``,
``reason``, ``finishedAt``, ``ttl``, ``ttlSource``, ``expiresAt``, ``rules``, plus
``expired`` (due by ``--now``) and ``dryRun``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from typing import Any

import yaml

from jobttl.core.config import Settings
from jobttl.core.decision import Verdict, decide
from jobttl.core.kinds import ALL_KINDS, JobKind
from jobttl.core.policy import PolicyError, load_policy

API_VERSION = "jobttl.io/explain/v1"


def _rfc3339(epoch: int | None) -> str | None:
    return None if epoch is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def objects(text: str) -> list[dict[str, Any]]:
    """Every object in YAML or JSON text, Lists unwrapped."""
    found = []
    for document in yaml.safe_load_all(text):
        if not isinstance(document, dict):
            continue
        items = document.get("items") if str(document.get("kind", "")).endswith("List") else None
        found += [i for i in items if isinstance(i, dict)] if isinstance(items, list) else [document]
    return found


def kind_of(obj: dict[str, Any]) -> JobKind | None:
    return next((k for k in ALL_KINDS if (k.api_version, k.kind) == (obj.get("apiVersion"), obj.get("kind"))), None)


def explain(obj: dict[str, Any], policy, now: float) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    item = {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion"), "namespace": meta.get("namespace"),
            "name": meta.get("name"), "uid": meta.get("uid")}
    kind = kind_of(obj)
    if kind is None:
        return {**item, "verdict": "unknown-kind", "reason": f"jobttl does not know {obj.get('apiVersion')} "
                f"{obj.get('kind')}", "finishedAt": None, "ttl": None, "ttlSource": None, "expiresAt": None,
                "rules": [], "expired": False, "dryRun": False}
    if kind not in policy.kinds:
        reason = f"{kind.kind} is known but not enabled by the policy's kinds"
        return {**item, "verdict": "kind-not-enabled", "reason": reason, "finishedAt": None, "ttl": None,
                "ttlSource": None, "expiresAt": None, "rules": [], "expired": False, "dryRun": False}
    decision = decide(obj, kind, policy)
    expired = decision.verdict is Verdict.EXPIRES and decision.expires_at is not None and decision.expires_at <= now
    return {**item, "verdict": decision.verdict.value, "reason": decision.reason,
            "finishedAt": _rfc3339(decision.finished_at), "ttl": decision.ttl, "ttlSource": decision.ttl_source,
            "expiresAt": _rfc3339(decision.expires_at), "rules": list(decision.rules), "expired": expired,
            "dryRun": decision.dry_run}


def main(args: argparse.Namespace, settings: Settings) -> int:
    try:
        policy = load_policy(args.policy) if args.policy else settings.policy
    except PolicyError as exc:
        print(f"jobttl: {exc}", file=sys.stderr)
        return 2
    now = time.time()
    if args.now:
        try:
            when = datetime.fromisoformat(args.now.replace("Z", "+00:00"))
        except ValueError:
            print(f"jobttl: --now: expected an RFC 3339 time such as 2030-01-31T00:00:00Z, got {args.now!r}",
                  file=sys.stderr)
            return 2
        if when.tzinfo is None:
            print(f"jobttl: --now: give the time zone (e.g. Z), got {args.now!r}", file=sys.stderr)
            return 2
        now = when.timestamp()
    try:
        text = sys.stdin.read() if args.filename == "-" else open(args.filename, encoding="utf-8").read()
        found = objects(text)
    except OSError as exc:
        print(f"jobttl: cannot read {args.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    except yaml.YAMLError as exc:
        print(f"jobttl: {args.filename}: not valid YAML or JSON: {exc}", file=sys.stderr)
        return 2
    items = [explain(obj, policy, now) for obj in found]
    if args.json:
        print(json.dumps({"apiVersion": API_VERSION, "now": _rfc3339(int(now)), "items": items}, indent=2))
    else:
        _print(items, now)
    return 0


def _print(items: list[dict[str, Any]], now: float) -> None:
    from jobttl.cli.tables import console, human

    for item in items:
        console.print(f"{item['kind']} {item['namespace']}/{item['name']}: {item['verdict']}")
        console.print(f"  why: {item['reason']}")
        if item["finishedAt"]:
            console.print(f"  finished: {item['finishedAt']}")
        if item["ttl"] is not None:
            console.print(f"  TTL: {human(item['ttl'])} from {item['ttlSource']}")
        if item["expiresAt"]:
            expires = datetime.fromisoformat(item["expiresAt"].replace("Z", "+00:00")).timestamp()
            when = "now (expired)" if item["expired"] else f"in {human(expires - now)}"
            console.print(f"  deleted: {item['expiresAt']}, {when}" + (" (dry run: only recorded)" if item["dryRun"]
                                                                        else ""))
        if item["rules"]:
            console.print(f"  policy rules: {', '.join(item['rules'])}")
    if not items:
        console.print("no objects found")
