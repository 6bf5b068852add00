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
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job
from rq.registry import FailedJobRegistry
from rq.scheduler import RQScheduler
from rq.serializers import JSONSerializer

from worker.audit import Audit
from worker.decision import Decision, JobRef, Verdict
from worker.schedule import DELETE_TASK, PENDING_INDEX, PendingDeletion, Schedule

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
            "scheduledAt": pending.scheduled_at, "wouldDeleteAt": pending.would_delete_at}


class Operations:
    def __init__(self, redis: Redis, schedule: Schedule, audit: Audit):
        self.redis = redis
        self.schedule = schedule
        self.audit = audit
        self.queue: Queue = schedule.queue

    # --- questions ---------------------------------------------------------------------
    def pending(self, namespace: str | None = None, kind: str | None = None, offset: int = 0,
                limit: int | None = None) -> tuple[list[PendingDeletion], int]:
        """Pending deletions in due order, filtered; and how many match in all.

        Unfiltered pages come straight from the due-ordered index; filters read the records
        in pipelined batches (one round trip per thousand).
        """
        end = None if limit is None else offset + limit
        if not namespace and not kind:
            uids = self.redis.zrange(PENDING_INDEX, offset, -1 if end is None else end - 1)
            return self.schedule.get_many([u.decode() for u in uids]), self.redis.zcard(PENDING_INDEX)
        matching = []
        batch: list[str] = []
        for uid, _ in self.redis.zscan_iter(PENDING_INDEX, count=1000):
            batch.append(uid.decode())
            if len(batch) == 1000:
                matching += self.schedule.get_many(batch)
                batch = []
        matching += self.schedule.get_many(batch)
        matching = [p for p in matching if (not namespace or p.ref.namespace == namespace)
                    and (not kind or p.ref.kind == kind)]
        matching.sort(key=lambda p: (p.due, p.ref.uid))  # the index's own order
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
            if job is None or job.func_name != DELETE_TASK:
                continue
            result = job.latest_result()
            failures.append(Failure(job.id, JobRef.from_dict(job.args[0]), job.args[1],
                                    job.ended_at.timestamp() if job.ended_at else None,
                                    _last_line(result.exc_string) if result and result.exc_string else ""))
        return sorted(failures, key=lambda f: f.failed_at or 0, reverse=True)

    def status(self) -> dict[str, Any]:
        """Counts and health; raises RedisError when Redis is down (nothing else can be known)."""
        now = time.time()
        self.redis.ping()
        workers = Worker.all(queue=self.queue)
        scheduler_lock = self.redis.get(RQScheduler.get_locking_key(self.queue.name))
        deleted = sum(1 for e in self.audit.entries(since=now - 86400) if e.fields["event"] == "deleted")
        return {
            "pending": self.redis.zcard(PENDING_INDEX),
            "dueWithinHour": self.redis.zcount(PENDING_INDEX, "-inf", now + 3600),
            "failed": FailedJobRegistry(queue=self.queue).count,
            "deletedLast24h": deleted,
            "queued": self.queue.count,
            "redis": "ok",  # reached: ping() above raises otherwise
            "workers": [{"name": w.name, "state": w.get_state(),
                         "lastHeartbeat": w.last_heartbeat.timestamp() if w.last_heartbeat else None}
                        for w in workers],
            "scheduler": scheduler_lock.decode() if scheduler_lock else None,
        }

    # --- actions -------------------------------------------------------------------------
    def retry(self, job_id: str | None = None) -> list[str]:
        """Requeue one failed deletion (or all of them, with no id); returns the ids requeued.

        Only deletions: the failed registry also holds other jobs (a failed resync, say),
        which have no object to name and are not this command's business.
        """
        registry = FailedJobRegistry(queue=self.queue)
        ids = [job_id] if job_id else [f.job_id for f in self.failed()]
        requeued = []
        for jid in ids:
            try:
                job = Job.fetch(jid, connection=self.redis, serializer=JSONSerializer)
                if job.func_name != DELETE_TASK:
                    raise InvalidJobOperation
                registry.requeue(job)
            except (NoSuchJobError, InvalidJobOperation):  # unknown, not a deletion, or not failed
                raise NotFound(f"no failed deletion with job id {jid!r}") from None
            self.audit.record("retry", JobRef.from_dict(job.args[0]), logger=log, jobId=jid, by="operator")
            requeued.append(jid)
        return requeued

    def _pending_named(self, namespace: str, name: str, kind: str | None) -> list[PendingDeletion]:
        """Every pending deletion under that name, newest schedule first.

        More than one of a kind means the job was deleted and re-created and the older
        record is stale: operator actions apply to all of them, so the one that matters
        (whichever it is) is never left out.
        """
        found = [p for p in self.pending(namespace=namespace, kind=kind)[0] if p.ref.name == name]
        if not found:
            raise NotFound(f"no pending deletion for {kind + ' ' if kind else ''}{namespace}/{name}")
        if len({p.ref.kind for p in found}) > 1:
            raise Ambiguous(f"{namespace}/{name} has pending deletions of several kinds "
                            f"({', '.join(sorted({p.ref.kind for p in found}))}); say which with --kind")
        return sorted(found, key=lambda p: p.scheduled_at, reverse=True)

    def cancel(self, namespace: str, name: str, kind: str | None = None, by: str = "operator") -> PendingDeletion:
        """Keep the job: its pending deletion is removed and no event or resync brings it back."""
        found = self._pending_named(namespace, name, kind)
        for pending in found:
            self.schedule.keep(pending.ref.uid, by)
            self.audit.record("cancelled", pending.ref, logger=log, reason="kept-by-operator", by=by,
                              due=pending.due)
        return found[0]

    def postpone(self, namespace: str, name: str, seconds: int, kind: str | None = None,
                 by: str = "operator") -> PendingDeletion:
        """Move the pending deletion `seconds` later (from now, if it is already overdue);
        events and resyncs keep the new time."""
        found = self._pending_named(namespace, name, kind)
        for pending in found:
            until = max(pending.due, int(time.time())) + seconds
            self.schedule.postpone(pending.ref.uid, until, by)
            self.schedule.plan(pending.ref, Decision(Verdict.EXPIRES, "postponed", finished_at=pending.finished_at,
                                                     ttl=pending.ttl, ttl_source=pending.ttl_source,
                                                     expires_at=pending.due, rules=pending.rules,
                                                     dry_run=pending.dry_run))
            self.audit.record("postponed", pending.ref, logger=log, due=pending.due, newDue=until, by=by)
        return self.schedule.get(found[0].ref.uid)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
