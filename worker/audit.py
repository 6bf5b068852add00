"""What happened, kept in Redis for operators: the audit trail and the tombstones.

- The **audit trail** is a capped Redis stream (``jobttl:audit``): one entry per decision
  (scheduled, moved, cancelled, rescheduled, deleted, would-delete, skipped and why, failed
  with the API error, and operators' cancel/postpone/retry), with the job's identity, its
  finish time, TTL and where the TTL came from, the due time, the actual time and lateness.
  Every entry is also logged as structured JSON, so logs and the trail never disagree.
- A **tombstone** keeps a deleted job's final status (conditions, replicaStatuses, start and
  completion time) and its labels and annotations for a configurable number of days: the
  object is gone from etcd, but why it failed is not lost.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from redis import Redis

from jobttl import logs
from jobttl.config import Settings
from jobttl.metrics import Metrics
from worker.decision import JobRef

STREAM = "jobttl:audit"
TOMBSTONE_PREFIX = "jobttl:tombstone:"
# Fields of a job's status worth keeping once the object is gone.
STATUS_FIELDS = ("conditions", "replicaStatuses", "startTime", "completionTime", "phase", "startedAt", "finishedAt",
                 "message", "succeeded", "failed")

log = logging.getLogger("jobttl.audit")


@dataclass(frozen=True)
class AuditEntry:
    id: str  # the stream id; its first part is the time in milliseconds
    fields: dict[str, str]

    @property
    def at(self) -> float:
        return int(self.id.split("-")[0]) / 1000

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "at": self.at, **self.fields}


class Audit:
    def __init__(self, redis: Redis, max_entries: int = 100_000, tombstone_days: int = 7,
                 metrics: Metrics | None = None):
        self.redis = redis
        self.metrics = metrics
        self.max_entries = max_entries
        self.tombstone_seconds = tombstone_days * 86400

    @classmethod
    def from_settings(cls, redis: Redis, settings: Settings, metrics: Metrics | None = None) -> Audit:
        return cls(redis, settings.audit_max_entries, settings.tombstone_days, metrics)

    def record(self, event: str, ref: JobRef | None, level: int = logging.INFO, logger: logging.Logger = log,
               **fields: Any) -> None:
        """Log `event` and append it to the trail. Fields that are None are left out."""
        logs.record(logger, event, ref.as_dict() if ref else None, level, **fields)
        entry = {"event": event, **(ref.as_dict() if ref else {})}
        for key, value in fields.items():
            if value is None:
                continue
            entry[key] = value if isinstance(value, str) else json.dumps(value)
        # Approximate trimming (~) keeps XADD O(1); the stream stays near max_entries.
        self.redis.xadd(STREAM, entry, maxlen=self.max_entries, approximate=True)
        if self.metrics is not None:
            self._count(event, ref, fields)

    def _count(self, event: str, ref: JobRef | None, fields: dict[str, Any]) -> None:
        self.metrics.decisions.labels(event, fields.get("reason") or "").inc()
        if event == "deleted" and ref is not None:
            self.metrics.deletions.labels(ref.kind, ref.namespace).inc()
            if fields.get("lateness") is not None:
                self.metrics.lateness.observe(max(0.0, float(fields["lateness"])))
        if event in ("failed", "retrying"):
            self.metrics.failures.labels(fields.get("failure") or "error").inc()

    def entries(self, since: float | None = None, limit: int | None = None) -> Iterator[AuditEntry]:
        """Newest first."""
        start = f"{int(since * 1000)}-0" if since is not None else "-"
        for entry_id, data in self.redis.xrevrange(STREAM, max="+", min=start, count=limit):
            yield AuditEntry(entry_id.decode(), {k.decode(): v.decode() for k, v in data.items()})

    # --- tombstones ----------------------------------------------------------------------
    def bury(self, ref: JobRef, obj: dict[str, Any], deleted_at: float) -> None:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        tombstone = {
            **ref.as_dict(),
            "deletedAt": deleted_at,
            "labels": meta.get("labels") or {},
            "annotations": {k: v for k, v in (meta.get("annotations") or {}).items()
                            if k != "kubectl.kubernetes.io/last-applied-configuration"},
            "creationTimestamp": meta.get("creationTimestamp"),
            "status": {k: status[k] for k in STATUS_FIELDS if k in status},
        }
        self.redis.set(self._tombstone_key(ref), json.dumps(tombstone), ex=self.tombstone_seconds)

    def tombstones(self, namespace: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
        """Tombstones, newest first: all, or of one namespace, or of one namespace/name."""
        pattern = f"{TOMBSTONE_PREFIX}{_glob_literal(namespace) if namespace else '*'}:" \
                  f"{_glob_literal(name) if name else '*'}:*"
        found = []
        for key in self.redis.scan_iter(pattern, count=1000):
            raw = self.redis.get(key)
            if raw is not None:  # it may expire between SCAN and GET
                found.append(json.loads(raw))
        return sorted(found, key=lambda t: t["deletedAt"], reverse=True)

    @staticmethod
    def _tombstone_key(ref: JobRef) -> str:
        return f"{TOMBSTONE_PREFIX}{ref.namespace}:{ref.name}:{ref.uid}"


def _glob_literal(text: str) -> str:
    """`text` matched literally in a Redis SCAN pattern (names come from users and URLs)."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)
