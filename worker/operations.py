"""What operators ask and do: the one implementation behind the CLI and the HTTP API.

Questions: what is scheduled to be deleted, when, and because of which rule (`pending`)?
What happened to one job (`show`)? What was deleted, when and how late (`history`)? What
failed and why (`failed`)? Is everything running (`status`)?
Actions: `retry` a failed deletion, `cancel` a job's deletion for good (the job is kept),
`postpone` it. Actions are recorded in the audit trail like every other decision.

Everything is read with RQ's JSON serializer: never `rq info`, which rewrites JSON jobs'
metadata as pickle.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from redis import Redis
from rq import Queue, Worker
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.registry import FailedJobRegistry
from rq.scheduler import RQScheduler
from rq.serializers import JSONSerializer

from worker.audit import Audit
from worker.decision import Decision, JobRef, Verdict
from worker.schedule import PENDING_INDEX, PendingDeletion, Schedule

log = logging.getLogger("jobttl.operations")


class NotFound(LookupError):
    """Nothing is known under that name (the message says what was looked for)."""


class Ambiguous(LookupError):
    """Several jobs of different kinds share that name; the message lists the kinds."""


@dataclass(frozen=True)
class Failure:
    job_id: str
    ref: JobRef
    due: int
    failed_at: float | None
    error: str

    def as_dict(self) -> dict[str, Any]:
        return {"jobId": self.job_id, **self.ref.as_dict(), "due": self.due, "failedAt": self.failed_at,
                "error": self.error}


def pending_as_dict(pending: PendingDeletion, now: float) -> dict[str, Any]:
    return {**pending.ref.as_dict(), "due": pending.due, "dueIn": round(pending.due - now, 1),
            "jobId": pending.job_id, "finishedAt": pending.finished_at, "ttl": pending.ttl,
            "ttlSource": pending.ttl_source, "rules": list(pending.rules), "dryRun": pending.dry_run,
            "scheduledAt": pending.scheduled_at}


class Operations:
    def __init__(self, redis: Redis, schedule: Schedule, audit: Audit):
        self.redis = redis
        self.schedule = schedule
        self.audit = audit
        self.queue: Queue = schedule.queue

    # --- questions ---------------------------------------------------------------------
    def pending(self, namespace: str | None = None, kind: str | None = None, offset: int = 0,
                limit: int | None = None) -> tuple[list[PendingDeletion], int]:
        """Pending deletions in due order, filtered; and how many match in all."""
        matching = []
        for uid, _ in self.redis.zscan_iter(PENDING_INDEX, count=1000):
            pending = self.schedule.get(uid.decode())
            if pending is None:
                continue
            if (namespace and pending.ref.namespace != namespace) or (kind and pending.ref.kind != kind):
                continue
            matching.append(pending)
        matching.sort(key=lambda p: (p.due, p.ref.namespace, p.ref.name))
        end = None if limit is None else offset + limit
        return matching[offset:end], len(matching)

    def find(self, namespace: str, name: str, kind: str | None = None) -> dict[str, Any]:
        """Everything known about one job: pending deletion, history, tombstone."""
        history = [e.as_dict() for e in self.audit.entries()
                   if e.fields.get("namespace") == namespace and e.fields.get("name") == name
                   and (kind is None or e.fields.get("kind") == kind)]
        pending = [p for p in self.pending(namespace=namespace, kind=kind)[0] if p.ref.name == name]
        tombstones = [t for t in self.audit.tombstones(namespace, name) if kind is None or t["kind"] == kind]
        kinds = {e["kind"] for e in history} | {p.ref.kind for p in pending} | {t["kind"] for t in tombstones}
        if not kinds:
            raise NotFound(f"jobttl knows nothing about {kind + ' ' if kind else ''}{namespace}/{name}")
        if len(kinds) > 1:
            raise Ambiguous(f"{namespace}/{name} names jobs of several kinds ({', '.join(sorted(kinds))}); "
                            "say which with --kind")
        now = time.time()
        return {"namespace": namespace, "name": name, "kind": kinds.pop(),
                "pending": [pending_as_dict(p, now) for p in pending],
                "history": history, "tombstones": tombstones}

    def history(self, since: float | None = None, limit: int | None = None, event: str | None = None,
                namespace: str | None = None) -> list[dict[str, Any]]:
        entries = (e.as_dict() for e in self.audit.entries(since=since))
        selected = [e for e in entries if (event is None or e["event"] == event)
                    and (namespace is None or e.get("namespace") == namespace)]
        return selected[:limit] if limit is not None else selected

    def failed(self) -> list[Failure]:
        registry = FailedJobRegistry(queue=self.queue)
        failures = []
        for job in Job.fetch_many(registry.get_job_ids(), connection=self.redis, serializer=JSONSerializer):
            if job is None or job.func_name != "worker.tasks.delete_if_expired":
                continue
            result = job.latest_result()
            failures.append(Failure(job.id, JobRef.from_dict(job.args[0]), job.args[1],
                                    job.ended_at.timestamp() if job.ended_at else None,
                                    _last_line(result.exc_string) if result and result.exc_string else ""))
        return sorted(failures, key=lambda f: f.failed_at or 0, reverse=True)

    def status(self) -> dict[str, Any]:
        now = time.time()
        workers = Worker.all(queue=self.queue)
        scheduler_lock = self.redis.get(RQScheduler.get_locking_key(self.queue.name))
        deleted = sum(1 for e in self.audit.entries(since=now - 86400) if e.fields["event"] == "deleted")
        return {
            "pending": self.redis.zcard(PENDING_INDEX),
            "dueWithinHour": self.redis.zcount(PENDING_INDEX, "-inf", now + 3600),
            "failed": FailedJobRegistry(queue=self.queue).count,
            "deletedLast24h": deleted,
            "queued": self.queue.count,
            "redis": "ok" if self.redis.ping() else "down",
            "workers": [{"name": w.name, "state": w.get_state(),
                         "lastHeartbeat": w.last_heartbeat.timestamp() if w.last_heartbeat else None}
                        for w in workers],
            "scheduler": scheduler_lock.decode() if scheduler_lock else None,
        }

    # --- actions -------------------------------------------------------------------------
    def retry(self, job_id: str | None = None) -> list[str]:
        """Requeue one failed deletion (or all of them, with no id); returns the ids requeued."""
        registry = FailedJobRegistry(queue=self.queue)
        ids = [job_id] if job_id else registry.get_job_ids()
        requeued = []
        for jid in ids:
            try:
                job = registry.requeue(jid)
            except (NoSuchJobError, ValueError):  # rq raises ValueError-like errors for unknown ids
                raise NotFound(f"no failed deletion with job id {jid!r}") from None
            ref = JobRef.from_dict(job.args[0])
            self.audit.record("retry", ref, logger=log, jobId=jid, by="operator")
            requeued.append(jid)
        return requeued

    def _the_pending(self, namespace: str, name: str, kind: str | None) -> PendingDeletion:
        found = [p for p in self.pending(namespace=namespace, kind=kind)[0] if p.ref.name == name]
        if not found:
            raise NotFound(f"no pending deletion for {kind + ' ' if kind else ''}{namespace}/{name}")
        if len({p.ref.kind for p in found}) > 1:
            raise Ambiguous(f"{namespace}/{name} has pending deletions of several kinds "
                            f"({', '.join(sorted({p.ref.kind for p in found}))}); say which with --kind")
        return found[0]

    def cancel(self, namespace: str, name: str, kind: str | None = None, by: str = "operator") -> PendingDeletion:
        """Keep the job: its pending deletion is removed and no event or resync brings it back."""
        pending = self._the_pending(namespace, name, kind)
        self.schedule.keep(pending.ref.uid, by)
        self.audit.record("cancelled", pending.ref, logger=log, reason="kept-by-operator", by=by, due=pending.due)
        return pending

    def postpone(self, namespace: str, name: str, seconds: int, kind: str | None = None,
                 by: str = "operator") -> PendingDeletion:
        """Move the pending deletion `seconds` later; events and resyncs keep the new time."""
        pending = self._the_pending(namespace, name, kind)
        until = pending.due + seconds
        self.schedule.postpone(pending.ref.uid, until, by)
        self.schedule.plan(pending.ref, Decision(Verdict.EXPIRES, "postponed", finished_at=pending.finished_at,
                                                 ttl=pending.ttl, ttl_source=pending.ttl_source,
                                                 expires_at=pending.due, rules=pending.rules,
                                                 dry_run=pending.dry_run))
        self.audit.record("postponed", pending.ref, logger=log, due=pending.due, newDue=until, by=by)
        return self.schedule.get(pending.ref.uid)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
