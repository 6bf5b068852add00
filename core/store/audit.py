"""What happened, kept in Redis for operators: the audit trail, each job's history, tombstones.

- The **audit trail** is a capped Redis stream (``jobttl:audit``): one entry per decision
  that changed something (scheduled, moved, cancelled, held, rescheduled, delete-requested,
  deleted, stuck, would-delete, skipped and why, failed with the API error, operators'
  cancel/postpone/retry), with the job's identity and the decision's details. Every entry
  is also logged as structured JSON, so logs and the trail never disagree.
- Each job name has a **history card** (``jobttl:job:<namespace>/<name>``): the latest
  decision about every UID that had the name, including "kept, and why" for jobs that are
  never deleted, and the ids of its audit entries (``...:log``). ``jobttl show`` and the read
  API read these, so answering for one job costs O(its entries), not a scan of the trail.
- A **tombstone** keeps a deleted job's final status (conditions, replicaStatuses, start and
  completion time) and labels for a configurable number of days. Annotation values are kept
  only for the keys configured (they may hold secrets).

Writes take an optional ``pipeline`` so a caller can make them atomic with its own; the
reconcile and deletion scripts (`jobttl.core.store.scripts`) write the same entries inside Redis.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.client import Pipeline

from jobttl.core.domain.wire import jsoncodec, shapes
from jobttl.core.store import keys
from jobttl.core.runtime import logs
from jobttl.core.domain.decisions.decision import Decision, Verdict
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import group_of
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.store.scripts import Record

# Fields of a job's status worth keeping once the object is gone.
STATUS_FIELDS = (
    "conditions",
    "replicaStatuses",
    "startTime",
    "completionTime",
    "phase",
    "startedAt",
    "finishedAt",
    "message",
    "succeeded",
    "failed",
)
TOMBSTONE_LIMIT = 64 * 1024  # bytes of JSON; a larger status is recorded as not kept

log = logging.getLogger("jobttl.audit")


@dataclass(frozen=True)
class AuditEntry:
    id: str  # the stream id; its first part is the time in milliseconds
    fields: dict[str, str]

    @property
    def at(self) -> float:
        return int(self.id.split("-")[0]) / 1000

    def as_dict(self) -> dict[str, Any]:
        """The public shape (`jobttl history --json`, the read API): typed, times in RFC 3339 beside."""
        return shapes.entry(self.fields, id=self.id, at=self.at)


# What a worker's DELETE leaves in the trail. Such an entry is the only evidence that jobttl "ran
# before" on a cluster without an install record (jobttl.core.services.install): an upgrade from 0.2,
# which kept none. Every release that keeps the record marks its own deletions (`INSTALL_RECORDED`),
# so that a deletion made after a Redis flush, while a review was open, never passes for 0.2's.
DELETION_EVENTS = frozenset({"deleted", "delete-requested", "pods-deleted"})
INSTALL_RECORDED = "installRecord"  # the field; its value is "kept"


def entry_fields(event: str, ref: JobRef | None, **fields: Any) -> dict[str, str]:
    """The one shape of an audit entry: flat strings, None left out, structures as JSON."""
    entry = {"event": event, **(ref.as_dict() if ref else {})}
    for key, value in fields.items():
        if value is not None:
            entry[key] = value if isinstance(value, str) else jsoncodec.dumps_str(value)
    if event in DELETION_EVENTS:
        entry[INSTALL_RECORDED] = "kept"
    return entry


def decision_fields(decision: Decision | None) -> dict[str, Any]:
    """What every audit entry of a reconcile says about the decision behind it."""
    if decision is None:
        return {}
    if decision.verdict is not Verdict.EXPIRES:
        return {"detail": decision.reason, "ttlSource": decision.ttl_source}
    return {
        "finishedAt": decision.finished_at,
        "ttl": decision.ttl,
        "ttlSource": decision.ttl_source,
        "rules": list(decision.rules),
        "dryRun": decision.dry_run,
        "notify": decision.notify,
    }


def _decoded(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


class Audit:
    def __init__(
        self,
        redis: Redis,
        max_entries: int = 100_000,
        tombstone_days: int = 7,
        metrics: Metrics | None = None,
        tombstone_annotations: tuple[str, ...] = (),
    ):
        self.redis = redis
        self.metrics = metrics
        self.max_entries = max_entries
        self.tombstone_seconds = tombstone_days * 86400
        self.tombstone_annotations = tombstone_annotations

    @classmethod
    def from_settings(cls, redis: Redis, settings: Any, metrics: Metrics | None = None) -> Audit:
        return cls(redis, settings.audit_max_entries, settings.tombstone_days, metrics, settings.tombstone_annotations)

    # --- writing ---------------------------------------------------------------------------
    def record(
        self,
        event: str,
        ref: JobRef | None,
        level: int = logging.INFO,
        logger: logging.Logger = log,
        pipeline: Pipeline | None = None,
        **fields: Any,
    ) -> None:
        """Log `event`, append it to the trail and to the job's history. Fields that are None are left out."""
        Record(
            ref=ref,
            audit_max=self.max_entries,
            card_ttl=self.tombstone_seconds,
            uid=ref.uid if ref else None,
            entry=entry_fields(event, ref, **fields),
        ).run(pipeline if pipeline is not None else self.redis)
        self.observed(event, ref, level, logger, **fields)

    def observed(
        self, event: str, ref: JobRef | None, level: int = logging.INFO, logger: logging.Logger = log, **fields: Any
    ) -> None:
        """Log and count an entry already written (by a script inside Redis)."""
        logs.record(logger, event, ref.as_dict() if ref else None, level, **fields)
        if self.metrics is not None:
            self._count(event, ref, fields)

    def _count(self, event: str, ref: JobRef | None, fields: dict[str, Any]) -> None:
        self.metrics.decisions.labels(event, fields.get("reason") or "").inc()
        if event == "deleted" and ref is not None:
            self.metrics.deletions.labels(ref.kind, group_of(ref.api_version), ref.namespace).inc()
        if event == "would-delete" and ref is not None:
            self.metrics.would_delete.labels(ref.kind, group_of(ref.api_version)).inc()
        if event in ("deleted", "delete-requested") and fields.get("lateness") is not None:
            # When jobttl acted (its DELETE), however long finalizers then take.
            self.metrics.lateness.observe(max(0.0, float(fields["lateness"])))
        if event in ("failed", "retrying", "refused"):
            self.metrics.failures.labels(fields.get("failure") or "error").inc()

    def tombstone(self, ref: JobRef, obj: dict[str, Any], deleted_at: float, **links: Any) -> str:
        """The tombstone's JSON: final status and labels; annotations only for the configured keys."""
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        annotations = meta.get("annotations") or {}
        tombstone = {
            **ref.as_dict(),
            "deletedAt": deleted_at,
            "labels": meta.get("labels") or {},
            "annotations": {k: annotations[k] for k in self.tombstone_annotations if k in annotations},
            "creationTimestamp": meta.get("creationTimestamp"),
            "status": {k: status[k] for k in STATUS_FIELDS if isinstance(status, dict) and k in status},
            **{k: v for k, v in links.items() if v is not None},
        }
        kept = jsoncodec.dumps_kept(tombstone, TOMBSTONE_LIMIT)
        if kept.startswith('{"unkept":'):
            # Too large or too deep: still a tombstone (who, when, and why nothing more is kept),
            # in the shape the read API declares.
            unkept = jsoncodec.loads(kept)["unkept"]
            kept = jsoncodec.dumps_str(
                {
                    **ref.as_dict(),
                    "deletedAt": deleted_at,
                    "labels": {},
                    "annotations": {},
                    "creationTimestamp": None,
                    "status": {},
                    "unkept": unkept,
                }
            )
        return kept

    # --- reading ---------------------------------------------------------------------------
    def entries(self, since: float | None = None, limit: int | None = None) -> Iterator[AuditEntry]:
        """The whole trail, newest first."""
        start = f"{int(since * 1000)}-0" if since is not None else "-"
        for entry_id, data in self.redis.xrevrange(keys.AUDIT_STREAM, max="+", min=start, count=limit):
            yield AuditEntry(entry_id.decode(), _decoded(data))

    def history(self, namespace: str, name: str) -> list[AuditEntry]:
        """The audit entries of one job name, newest first (those still in the capped trail)."""
        ids = sorted(
            {i for card in self._card(namespace, name).values() for i in _log(card)}, key=_stream_order, reverse=True
        )
        with self.redis.pipeline(transaction=False) as pipe:
            for entry_id in ids:
                pipe.xrange(keys.AUDIT_STREAM, min=entry_id, max=entry_id)
            found = pipe.execute()
        return [AuditEntry(rows[0][0].decode(), _decoded(rows[0][1])) for rows in found if rows]

    def decisions(self, namespace: str, name: str) -> dict[str, dict[str, Any]]:
        """The latest decision about every UID that had this name, by UID, in the public shape of an entry."""
        return {
            uid: shapes.entry({k: v for k, v in card.items() if k not in ("log", "at")}, at=_at(card.get("at")))
            for uid, card in self._card(namespace, name).items()
        }

    def latest_decision(self, namespace: str, name: str, uid: str) -> Any | None:
        """The latest decision about `uid` as its job's history card keeps it; None when there is none
        (raises on one that does not decode)."""
        raw = self.redis.hget(keys.card(namespace, name), uid)
        return jsoncodec.loads(raw) if raw else None

    def _card(self, namespace: str, name: str) -> dict[str, dict[str, Any]]:
        found = {}
        for uid, raw in self.redis.hgetall(keys.card(namespace, name)).items():
            try:
                value = jsoncodec.loads(raw)
            except jsoncodec.DecodeError:
                continue
            if isinstance(value, dict):
                found[uid.decode()] = value
        return found

    def tombstones(self, namespace: str, name: str, uids: list[str] | None = None) -> list[dict[str, Any]]:
        """Tombstones of one job name, newest first."""
        uids = list(self.decisions(namespace, name)) if uids is None else uids
        raws = self.redis.mget([keys.tombstone(namespace, name, uid) for uid in uids]) if uids else []
        found = [shapes.with_times(jsoncodec.loads(raw)) for raw in raws if raw is not None]
        return sorted(found, key=lambda t: t.get("deletedAt") or 0, reverse=True)

    def deleted_since(self, since: float) -> int:
        return sum(1 for e in self.entries(since=since) if e.fields.get("event") == "deleted")


def _log(card: dict[str, Any]) -> list[str]:
    log = card.get("log")
    return [i for i in log if isinstance(i, str)] if isinstance(log, list) else []  # Lua writes {} for []


def _stream_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _at(entry_id: str | None) -> float | None:
    return int(entry_id.split("-")[0]) / 1000 if entry_id else None
