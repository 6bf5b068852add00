"""Errors of the policy's kind declarations, reported against the policy, not the objects.

When a declaration cannot read an object (its CEL TTL erred, ran over its cost, or gave no TTL:
`jobttl.core.domain.decisions.decision.Verdict.POLICY_ERROR`), the object is kept and the error is the
operator's to fix. Every such decision counts in ``jobttl_policy_errors_total{declaration}``
(the `JobttlPolicyErrors` alert reads it); the first time an object meets an error, and again
once `REPEAT_AFTER` has passed, it also gets a ``policy-error`` log line and audit entry (issue
28's notifications send those), so a hot object does not flood the trail. `jobttl status` shows,
per declaration, how many objects it could not read and the latest error (`summary`).

Redis holds, per declaration, the latest report (``jobttl:policy-errors``) and the count of
reports (``jobttl:policy-errors:count``); each object's last report is a key that expires
(``jobttl:policy-error:seen:<digest>``).
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

from redis import Redis

from jobttl.core.domain.wire import jsoncodec, shapes
from jobttl.core.domain.decisions.decision import Decision
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.store import keys
from jobttl.core.store.audit import Audit

REPEAT_AFTER = 3600  # seconds before the same error on the same object is reported again
EVENT = "policy-error"

log = logging.getLogger("jobttl.policy")


def declaration_of(kind: JobKind) -> str:
    """The declaration's name in metrics and reports: its ``apiVersion/Kind`` (one declaration a kind)."""
    return f"{kind.api_version}/{kind.kind}"


def seen_key(declaration: str, ref: JobRef, error: str) -> str:
    """The key that says this error was reported for this object within `REPEAT_AFTER`."""
    return keys.policy_error_seen(hashlib.sha256(f"{declaration}\0{ref.uid}\0{error}".encode()).hexdigest()[:32])


class PolicyErrors:
    def __init__(self, redis: Redis, audit: Audit):
        self.redis = redis
        self.audit = audit

    def report(self, kind: JobKind, ref: JobRef, decision: Decision, by: str) -> bool:
        """Record a policy error met on `ref`, unless the same one was reported for it lately.
        Returns whether it was reported (a log line and an audit entry written)."""
        declaration = declaration_of(kind)
        if not self.redis.set(seen_key(declaration, ref, decision.reason), "1", nx=True, ex=REPEAT_AFTER):
            return False
        latest = {
            "declaration": declaration,
            "declaredIn": kind.declared_in,
            "error": decision.reason,
            "field": decision.ttl_source,
            "object": ref.as_dict(),
            "at": time.time(),
        }
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.POLICY_ERRORS, declaration, jsoncodec.dumps_str(latest))
            pipe.hincrby(keys.POLICY_ERRORS_COUNT, declaration, 1)
            self.audit.record(
                EVENT,
                ref,
                logging.ERROR,
                logger=log,
                pipeline=pipe,
                by=by,
                declaration=declaration,
                declaredIn=kind.declared_in,
                field=decision.ttl_source,
                detail=decision.reason,
            )
            pipe.execute()
        return True

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per declaration: the reports so far and the latest one (`jobttl status`)."""
        counts = {k.decode(): int(v) for k, v in self.redis.hgetall(keys.POLICY_ERRORS_COUNT).items()}
        out = {}
        for name, raw in self.redis.hgetall(keys.POLICY_ERRORS).items():
            try:
                latest = jsoncodec.loads(raw)
            except ValueError:
                continue  # Redis is not trusted: a garbled report is left out, not shown as truth
            if isinstance(latest, dict):
                out[name.decode()] = shapes.with_times({**latest, "reports": counts.get(name.decode(), 0)})
        return out
