"""The schedule of pending deletions: one per job UID, held in Redis, run by RQ.

Why keyed by UID: update events for a finished job arrive many times, and a job deleted
and re-created under the same name is a different object with a different UID. Keying by
UID gives each object exactly one pending deletion and keeps an old schedule from ever
being applied to a new object (the worker also checks the UID before deleting).

Layout in Redis (all keys under ``jobttl:``):

- ``jobttl:pending:<uid>``: hash describing the pending deletion (identity, due time,
  finish time, TTL and where it came from, the RQ job id). This is the inspectable record.
- ``jobttl:pending``: sorted set of UIDs by due time, for listing in due order.
- ``jobttl:names:<apiVersion>:<kind>:<namespace>:<name>``: set of UIDs scheduled under a
  name, so that a Reference-mode delete event (which carries no UID) can find them.

The RQ job id is derived from (UID, due time). A duplicate event therefore maps onto the
existing job and changes nothing, while a changed TTL maps onto a new job id and the old
job is deleted. Reads and writes for one UID happen under a short Redis lock, so concurrent
sink processes and workers cannot leave two pending deletions for one object.

Jobs already due are enqueued for immediate execution instead of scheduled: RQ's scheduler
moves at most 1000 due jobs per queue per second, which would turn a backlog into a queue
behind the scheduler rather than behind the workers.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from datetime import datetime, timezone

from redis import Redis
from rq import Queue, Retry
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from worker.decision import Decision, JobRef

if TYPE_CHECKING:
    from jobttl.config import Settings

PENDING_INDEX = "jobttl:pending"
LOCK_TIMEOUT = 10
# Finished RQ jobs are kept briefly for debugging (history is the audit trail's job);
# failed ones long enough for an operator to see them.
RESULT_TTL = 3600
FAILURE_TTL = 7 * 24 * 3600

# The tasks the worker runs, named by import path so no code object is stored in Redis.
DELETE_TASK = "worker.tasks.delete_if_expired"
WARN_TASK = "worker.tasks.warn_upcoming"

# Job states in which the RQ job will still run (or is running) without our help.
# Set in a failed job's meta when retrying cannot help (see worker.tasks).
PERMANENT_FAILURE = "permanentFailure"

LIVE_STATES = {JobStatus.SCHEDULED, JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED}


class Change(enum.Enum):
    SCHEDULED = "scheduled"  # no pending deletion existed
    MOVED = "moved"  # a pending deletion existed with another due time
    UNCHANGED = "unchanged"  # the same deletion was already pending
    KEPT = "kept"  # an operator cancelled this job's deletion: nothing is scheduled


OVERRIDE_PREFIX = "jobttl:override:"
# Operator overrides outlive any sensible TTL but not forever: UIDs are never reused.
OVERRIDE_SECONDS = 400 * 86400


@dataclass(frozen=True)
class PendingDeletion:
    ref: JobRef
    due: int
    job_id: str
    finished_at: int | None
    ttl: int | None
    ttl_source: str | None
    scheduled_at: int
    rules: tuple[str, ...] = ()
    dry_run: bool = False
    would_delete_at: int | None = None  # dry-run: when the worker found it would have deleted it

    def as_hash(self) -> dict[str, str]:
        data = {
            **self.ref.as_dict(),
            "due": str(self.due),
            "jobId": self.job_id,
            "scheduledAt": str(self.scheduled_at),
            "rules": ",".join(self.rules),
            "dryRun": "true" if self.dry_run else "false",
        }
        if self.would_delete_at is not None:
            data["wouldDeleteAt"] = str(self.would_delete_at)
        if self.finished_at is not None:
            data["finishedAt"] = str(self.finished_at)
        if self.ttl is not None:
            data["ttl"] = str(self.ttl)
        if self.ttl_source:
            data["ttlSource"] = self.ttl_source
        return data

    @classmethod
    def from_hash(cls, data: dict[str, str]) -> PendingDeletion:
        return cls(
            ref=JobRef.from_dict(data),
            due=int(data["due"]),
            job_id=data["jobId"],
            finished_at=int(data["finishedAt"]) if "finishedAt" in data else None,
            ttl=int(data["ttl"]) if "ttl" in data else None,
            ttl_source=data.get("ttlSource"),
            scheduled_at=int(data["scheduledAt"]),
            rules=tuple(r for r in data.get("rules", "").split(",") if r),
            dry_run=data.get("dryRun") == "true",
            would_delete_at=int(data["wouldDeleteAt"]) if "wouldDeleteAt" in data else None,
        )


def job_id_for(uid: str, due: int) -> str:
    # UIDs are UUIDs (hex and '-'), which RQ accepts in job ids; anything else is refused
    # here rather than by RQ deep inside an enqueue.
    if not uid or not all(c.isalnum() or c == "-" for c in uid):
        raise ValueError(f"metadata.uid {uid!r} is not a valid Kubernetes UID")
    return f"delete-{uid}-{due}"


def warning_id_for(uid: str, due: int) -> str:
    return f"warn-{uid}-{due}"


def _decoded(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


def _pending_key(uid: str) -> str:
    return f"jobttl:pending:{uid}"


def _names_key(ref: JobRef) -> str:
    return f"jobttl:names:{ref.api_version}:{ref.kind}:{ref.namespace}:{ref.name}"


class Schedule:
    """Pending deletions, scheduled as delayed RQ jobs on one queue."""

    def __init__(self, redis: Redis, queue_name: str, retry_intervals: list[int], job_timeout: int = 300,
                 warn_before: int | None = None):
        # decode_responses must be off for RQ; we decode our own hashes.
        self.redis = redis
        self.queue = Queue(queue_name, connection=redis, serializer=JSONSerializer)
        self.retry = Retry(max=len(retry_intervals), interval=retry_intervals) if retry_intervals else None
        self.job_timeout = job_timeout
        # Seconds before each deletion to announce it (None: no announcements).
        self.warn_before = warn_before

    @classmethod
    def from_settings(cls, redis: Redis, settings: Settings) -> Schedule:
        """The schedule every jobttl process uses: same queue, retries and announcements."""
        return cls(redis, settings.queue_name, settings.retry_intervals, warn_before=settings.announce_before)

    def _lock(self, uid: str):
        return self.redis.lock(f"jobttl:lock:{uid}", timeout=LOCK_TIMEOUT, blocking_timeout=LOCK_TIMEOUT)

    def _fetch_job(self, job_id: str) -> Job | None:
        try:
            return Job.fetch(job_id, connection=self.redis, serializer=JSONSerializer)
        except NoSuchJobError:
            return None

    def get(self, uid: str) -> PendingDeletion | None:
        raw = self.redis.hgetall(_pending_key(uid))
        return PendingDeletion.from_hash(_decoded(raw)) if raw else None

    def get_many(self, uids: list[str]) -> list[PendingDeletion]:
        """The records of `uids` in one round trip, in order, skipping those gone meanwhile."""
        with self.redis.pipeline(transaction=False) as pipe:
            for uid in uids:
                pipe.hgetall(_pending_key(uid))
            raws = pipe.execute()
        return [PendingDeletion.from_hash(_decoded(raw)) for raw in raws if raw]

    def uids_named(self, api_version: str, kind: str, namespace: str, name: str) -> set[str]:
        ref = JobRef(api_version, kind, namespace, name, uid="")
        return {uid.decode() for uid in self.redis.smembers(_names_key(ref))}

    # --- operator overrides: keyed by UID, consulted by every plan and by the worker --------
    def override(self, uid: str) -> dict[str, str]:
        return _decoded(self.redis.hgetall(OVERRIDE_PREFIX + uid))

    def effective_due(self, uid: str, expires_at: int) -> int | None:
        """When the deletion is due once operators had their say; None if they said keep."""
        override = self.override(uid)
        if override.get("keep") == "true":
            return None
        return max(expires_at, int(override.get("until", 0)))

    def keep(self, uid: str, by: str) -> PendingDeletion | None:
        """An operator cancels this job's deletion for good; returns what was pending."""
        self._override(uid, {"keep": "true"}, by)
        return self.cancel(uid)

    def postpone(self, uid: str, until: int, by: str) -> None:
        """An operator moves this job's deletion to no earlier than `until`."""
        self._override(uid, {"until": str(until)}, by)

    def _override(self, uid: str, fields: dict[str, str], by: str) -> None:
        key = OVERRIDE_PREFIX + uid
        with self.redis.pipeline() as pipe:
            pipe.hset(key, mapping={**fields, "by": by, "at": str(int(time.time()))})
            pipe.expire(key, OVERRIDE_SECONDS)
            pipe.execute()

    def plan(self, ref: JobRef, decision: Decision, now: float | None = None) -> Change:
        """Make sure exactly one deletion of `ref` is pending, due at decision.expires_at
        (or later, if an operator postponed it); none if an operator said keep."""
        assert decision.expires_at is not None, "only an expiring decision can be scheduled"
        due = self.effective_due(ref.uid, decision.expires_at)
        if due is None:
            self.cancel(ref.uid)
            return Change.KEPT
        job_id = job_id_for(ref.uid, due)
        now = time.time() if now is None else now
        with self._lock(ref.uid):
            current = self.get(ref.uid)
            if current is not None and current.job_id == job_id and current.would_delete_at and decision.dry_run:
                return Change.UNCHANGED  # dry-run: said once what it would delete; no need to repeat it
            if current is not None:
                job = self._fetch_job(current.job_id)
                status = job.get_status() if job is not None else None
                # A deletion that failed for good (a 403, say) stays failed, with its error,
                # until an operator retries it: re-running it on every event or resync would
                # bury the error and repeat the 403. One that ran out of retries on a passing
                # outage is planned again.
                if current.job_id == job_id and (
                        status in LIVE_STATES or (status == JobStatus.FAILED and job.meta.get(PERMANENT_FAILURE))):
                    return Change.UNCHANGED
                self._retire(current, job)
            self._enqueue(ref, job_id, due, now)
            if self.warn_before is not None and due - self.warn_before > now:
                self.queue.enqueue_at(datetime.fromtimestamp(due - self.warn_before, tz=timezone.utc), WARN_TASK,
                                      ref.as_dict(), due, job_id=warning_id_for(ref.uid, due), retry=self.retry,
                                      description=f"announce the deletion of {ref} due at {due}",
                                      result_ttl=RESULT_TTL, failure_ttl=FAILURE_TTL)
            pending = PendingDeletion(
                ref=ref,
                due=due,
                job_id=job_id,
                finished_at=decision.finished_at,
                ttl=decision.ttl,
                ttl_source=decision.ttl_source,
                scheduled_at=int(now),
                rules=decision.rules,
                dry_run=decision.dry_run,
            )
            with self.redis.pipeline() as pipe:
                pipe.delete(_pending_key(ref.uid))
                pipe.hset(_pending_key(ref.uid), mapping=pending.as_hash())
                pipe.zadd(PENDING_INDEX, {ref.uid: due})
                pipe.sadd(_names_key(ref), ref.uid)
                pipe.execute()
        return Change.SCHEDULED if current is None else Change.MOVED

    def _enqueue(self, ref: JobRef, job_id: str, due: int, now: float) -> None:
        options = dict(
            job_id=job_id,
            retry=self.retry,
            job_timeout=self.job_timeout,
            description=f"delete {ref} when due at {due}",
            result_ttl=RESULT_TTL,
            failure_ttl=FAILURE_TTL,
        )
        args = (ref.as_dict(), due)
        if due <= now:
            self.queue.enqueue(DELETE_TASK, *args, **options)
        else:
            when = datetime.fromtimestamp(due, tz=timezone.utc)
            self.queue.enqueue_at(when, DELETE_TASK, *args, **options)

    def cancel(self, uid: str) -> PendingDeletion | None:
        """Remove the pending deletion of `uid` (its object is gone). Returns what was removed."""
        with self._lock(uid):
            current = self.get(uid)
            if current is None:
                return None
            self._retire(current, self._fetch_job(current.job_id))
            self._forget(current)
            return current

    def _retire(self, pending: PendingDeletion, job: Job | None) -> None:
        """Delete the RQ jobs (deletion and announcement) of a record being replaced or dropped.

        A job that is running right now re-reads the object and decides for itself;
        deleting its hash under it would only lose its result.
        """
        for rq_job in (job, self._fetch_job(warning_id_for(pending.ref.uid, pending.due))):
            if rq_job is not None and rq_job.get_status() != JobStatus.STARTED:
                rq_job.delete()

    def complete(self, ref: JobRef, job_id: str) -> None:
        """The RQ job `job_id` reached a final outcome: drop the record if it is still its own.

        If the record now names another job, the deletion was rescheduled meanwhile and that
        newer schedule must stay.
        """
        with self._lock(ref.uid):
            current = self.get(ref.uid)
            if current is not None and current.job_id == job_id:
                self._forget(current)

    def mark_would_delete(self, ref: JobRef, job_id: str, at: int) -> None:
        """Dry-run: the worker would have deleted it now. The record stays, so listings show
        what a real run would delete and later events and resyncs do not queue it again."""
        with self._lock(ref.uid):
            current = self.get(ref.uid)
            if current is not None and current.job_id == job_id:
                self.redis.hset(_pending_key(ref.uid), "wouldDeleteAt", str(at))

    def _forget(self, pending: PendingDeletion) -> None:
        with self.redis.pipeline() as pipe:
            pipe.delete(_pending_key(pending.ref.uid))
            pipe.zrem(PENDING_INDEX, pending.ref.uid)
            pipe.srem(_names_key(pending.ref), pending.ref.uid)
            pipe.execute()
