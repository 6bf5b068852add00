"""Resync: the API server is the truth, Redis is a cache of intentions.

Events can be missed: Knative's ApiServerSource sends none for objects that exist when it
starts, and drops an event after ~6 failed deliveries; a cluster also holds thousands of
finished jobs on the day jobttl is installed. A resync lists every enabled kind (paginated,
so memory stays bounded whatever the cluster size) and makes Redis match:

- finished jobs get their pending deletion, at the right time (plan() is idempotent);
- pending deletions of objects that should no longer be deleted, are gone, or were
  re-created under the same name are removed;
- jobs already past expiry are queued for deletion, paced by the workers' shared rate limit.

The blast-radius guard: if a resync would newly delete more than a configured number or
share of the objects it saw, those deletions are held and reported instead, until an
operator confirms that very set (``jobttl resync --confirm HELD_ID``; the id is a digest of
the held UIDs, so a confirmation never releases a set the operator did not review). A mis-set
policy or a wrong clock should cost a confirmation prompt, not a cluster's worth of jobs.

Only one resync runs at a time (a Redis lock); UIDs seen and deletions found due are kept in
Redis during the run rather than in memory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from redis import Redis
from rq import Queue
from rq.exceptions import DuplicateJobError

from jobttl import logs
from worker.audit import Audit
from worker.decision import Decision, JobRef, Verdict, decide
from worker.kinds import JobKind
from worker.kube import KubeClient, ListExpired, ObjectGone, PermanentApiError, TransientApiError
from worker.policy import Policy
from worker.schedule import PENDING_INDEX, Change, Schedule

log = logging.getLogger("jobttl.resync")

LOCK_KEY = "jobttl:resync:lock"
HELD_KEY = "jobttl:held"  # uid → JSON of a deletion held by the blast-radius guard
HELD_ID_KEY = "jobttl:held:id"  # digest of the held UIDs, which a confirmation must name
LAST_REPORT_KEY = "jobttl:resync:last"
RESYNC_TASK = "worker.tasks.resync"
PAGE_SIZE = 500
# Pending deletions scheduled less than this before a resync began may belong to objects
# created after its listing: they are left for the next resync rather than cancelled.
SCHEDULED_MARGIN = 60
# The per-run keys outlive a resync killed midway by no more than this.
RUN_KEYS_TTL = 6 * 3600
MAX_LIST_RESTARTS = 5


@dataclass
class ResyncReport:
    status: str = "done"  # done | held | incomplete | already-running | stale-confirmation
    started_at: float = field(default_factory=time.time)
    duration: float = 0.0
    seen: int = 0
    scheduled: int = 0
    moved: int = 0
    unchanged: int = 0
    cancelled: int = 0
    queued_now: int = 0  # already expired, queued for (paced) deletion
    held: int = 0  # expired, but held by the blast-radius guard
    held_id: str | None = None  # what `jobttl resync --confirm` must name to release them
    missing_kinds: list[str] = field(default_factory=list)  # not served by this cluster
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Guard:
    max_deletions: int
    max_share: float

    def exceeded(self, due: int, seen: int) -> bool:
        return due > self.max_deletions or (seen > 0 and due / seen > self.max_share)


def _objects(kube: KubeClient, kind: JobKind) -> Iterator[list[dict]]:
    """Every object of `kind`, a page at a time; the list restarts if its token expires (410)."""
    for _ in range(MAX_LIST_RESTARTS):
        token = None
        try:
            while True:
                page = kube.list_page(kind, PAGE_SIZE, token)
                yield page.get("items", [])
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    return
        except ListExpired:
            logs.record(log, "list-restart", kind=kind.kind, detail="continue token expired (410)")
    raise TransientApiError(f"listing {kind.resource} kept expiring ({MAX_LIST_RESTARTS} restarts)")


def _decision_json(ref: JobRef, decision: Decision) -> str:
    return json.dumps({"ref": ref.as_dict(), "expiresAt": decision.expires_at, "finishedAt": decision.finished_at,
                       "ttl": decision.ttl, "ttlSource": decision.ttl_source, "rules": list(decision.rules),
                       "dryRun": decision.dry_run, "outcome": decision.outcome})


def _from_json(raw: bytes) -> tuple[JobRef, Decision]:
    data = json.loads(raw)
    decision = Decision(Verdict.EXPIRES, "found expired by resync", finished_at=data["finishedAt"],
                        outcome=data["outcome"], ttl=data["ttl"], ttl_source=data["ttlSource"],
                        expires_at=data["expiresAt"], dry_run=data["dryRun"], rules=tuple(data["rules"]))
    return JobRef.from_dict(data["ref"]), decision


def resync(redis: Redis, kube: KubeClient, schedule: Schedule, audit: Audit, policy: Policy, guard: Guard,
           confirm: str | None = None, now: float | None = None) -> ResyncReport:
    report = ResyncReport(started_at=time.time() if now is None else now)
    lock = redis.lock(LOCK_KEY, timeout=3600)
    if not lock.acquire(blocking=False):
        report.status = "already-running"
        return report
    if confirm is not None and confirm != (redis.get(HELD_ID_KEY) or b"").decode():
        # The held set changed since the operator looked (or was released): nothing is confirmed.
        lock.release()
        report.status = "stale-confirmation"
        report.held_id = (redis.get(HELD_ID_KEY) or b"").decode() or None
        return report
    run = uuid.uuid4().hex
    seen_key, due_key = f"jobttl:resync:{run}:seen", f"jobttl:resync:{run}:due"
    try:
        listed = set()
        for kind in policy.kinds:
            try:
                for items in _objects(kube, kind):
                    _process_page(redis, schedule, audit, policy, kind, items, report, seen_key, due_key)
                    lock.extend(3600, replace_ttl=True)
                listed.add((kind.api_version, kind.kind))
            except ObjectGone:
                report.missing_kinds.append(f"{kind.api_version}/{kind.kind}")
            except (TransientApiError, PermanentApiError) as exc:
                report.errors.append(f"{kind.api_version}/{kind.kind}: {exc}")
        _forget_vanished(redis, schedule, audit, listed, seen_key, report)
        _release_or_hold(redis, schedule, audit, guard, due_key, confirm, report)
        if report.errors:
            report.status = "incomplete"
    finally:
        redis.delete(seen_key, due_key)
        lock.release()
    report.duration = round(time.time() - report.started_at, 3)
    redis.set(LAST_REPORT_KEY, json.dumps(report.as_dict()))
    audit.record("resync", None, logging.WARNING if report.status != "done" else logging.INFO, logger=log,
                 **report.as_dict())
    return report


def _process_page(redis: Redis, schedule: Schedule, audit: Audit, policy: Policy, kind: JobKind, items: list[dict],
                  report: ResyncReport, seen_key: str, due_key: str) -> None:
    now = time.time()
    uids = []
    for obj in items:
        obj = {**obj, "apiVersion": kind.api_version, "kind": kind.kind}
        try:
            ref = JobRef.of(obj)
            uids.append(ref.uid)
            _reconcile(redis, schedule, audit, policy, kind, obj, ref, report, due_key, now)
        except Exception as exc:  # one odd object must not stop the resync of all the others
            report.errors.append(f"{kind.kind} {(obj.get('metadata') or {}).get('namespace')}/"
                                 f"{(obj.get('metadata') or {}).get('name')}: {exc}")
    if uids:
        redis.sadd(seen_key, *uids)
        redis.expire(seen_key, RUN_KEYS_TTL)
    report.seen += len(items)


def _reconcile(redis: Redis, schedule: Schedule, audit: Audit, policy: Policy, kind: JobKind, obj: dict,
               ref: JobRef, report: ResyncReport, due_key: str, now: float) -> None:
    decision = decide(obj, kind, policy)
    if decision.verdict is not Verdict.EXPIRES:
        if schedule.cancel(ref.uid) is not None:
            report.cancelled += 1
            audit.record("cancelled", ref, logger=log, reason=decision.verdict.value, detail=decision.reason,
                         by="resync")
        return
    pending = schedule.get(ref.uid)
    due = schedule.effective_due(ref.uid, decision.expires_at)
    # A dry-run record is not a deletion on its way: once dry-run is off, it faces the guard.
    already_due = pending is not None and pending.due <= now and not pending.dry_run
    if due is not None and due <= now and not already_due and not decision.dry_run:
        # A deletion that would happen now and was not already due in Redis (unknown until
        # now, or pulled in by a changed policy or clock): it goes through the guard.
        redis.hset(due_key, ref.uid, _decision_json(ref, decision))
        redis.expire(due_key, RUN_KEYS_TTL)
        return
    change = schedule.plan(ref, decision, now=now)
    if change is Change.SCHEDULED:
        report.scheduled += 1
    elif change is Change.MOVED:
        report.moved += 1
    else:
        report.unchanged += 1
    if change in (Change.SCHEDULED, Change.MOVED):
        audit.record(change.value, ref, logger=log, due=decision.expires_at, finishedAt=decision.finished_at,
                     ttl=decision.ttl, ttlSource=decision.ttl_source, by="resync")


def _forget_vanished(redis: Redis, schedule: Schedule, audit: Audit, listed: set, seen_key: str,
                     report: ResyncReport) -> None:
    """Drop pending deletions whose object was not in the listing: deleted, or re-created
    with a new UID. Entries scheduled after the resync began may be for objects created
    after the listing, so they stay; kinds that could not be listed are left alone."""
    for uid, _ in redis.zscan_iter(PENDING_INDEX, count=500):
        uid = uid.decode()
        if redis.sismember(seen_key, uid):
            continue
        pending = schedule.get(uid)
        if pending is None or (pending.ref.api_version, pending.ref.kind) not in listed:
            continue
        # A margin for clock skew between this process and whoever scheduled it.
        if pending.scheduled_at < report.started_at - SCHEDULED_MARGIN and schedule.cancel(uid) is not None:
            report.cancelled += 1
            audit.record("cancelled", pending.ref, logger=log, reason="not-in-cluster", by="resync")


def _release_or_hold(redis: Redis, schedule: Schedule, audit: Audit, guard: Guard, due_key: str,
                     confirm: str | None, report: ResyncReport) -> None:
    """Queue the deletions found due, or hold them all if there are too many.

    A confirmation releases exactly what the previous resync held (and the operator
    reviewed), where still due; anything newly due goes through the guard like any other.
    """
    confirmed = set(redis.hkeys(HELD_KEY)) if confirm else set()
    fresh = sorted(uid for uid in redis.hkeys(due_key) if uid not in confirmed)
    if fresh and guard.exceeded(len(fresh), report.seen):
        held_id = hashlib.sha256(b"\n".join(fresh)).hexdigest()[:12]
        with redis.pipeline() as pipe:
            pipe.delete(HELD_KEY)
            for uid in fresh:
                pipe.hset(HELD_KEY, uid, redis.hget(due_key, uid))
            pipe.set(HELD_ID_KEY, held_id)
            pipe.execute()
        report.held, report.held_id, report.status = len(fresh), held_id, "held"
        audit.record("deletions-held", None, logging.WARNING, logger=log, count=len(fresh), seen=report.seen,
                     heldId=held_id, maxDeletions=guard.max_deletions, maxShare=guard.max_share,
                     detail=f"review them with `jobttl resync`, then run `jobttl resync --confirm {held_id}`")
        release = [uid for uid in redis.hkeys(due_key) if uid in confirmed]
    else:
        release = redis.hkeys(due_key)
        redis.delete(HELD_KEY, HELD_ID_KEY)
    for uid in release:
        ref, decision = _from_json(redis.hget(due_key, uid))
        if schedule.plan(ref, decision) is not Change.KEPT:  # due: queued for immediate, rate-limited deletion
            report.queued_now += 1
            audit.record("scheduled", ref, logger=log, due=decision.expires_at, finishedAt=decision.finished_at,
                         ttl=decision.ttl, ttlSource=decision.ttl_source, by="resync-confirmed" if confirm else "resync")


def held(redis: Redis) -> list[tuple[JobRef, Decision]]:
    """The deletions the last resync held for confirmation."""
    return [_from_json(raw) for _, raw in sorted(redis.hscan_iter(HELD_KEY, count=500))]


def request(queue: Queue, at: float | None = None) -> None:
    """Ask the workers for a resync now, or at `at` (epoch seconds).

    The job id names the second it is due, so workers (and PingSource retries) asking for
    the same slot ask once.
    """
    slot = int(time.time() if at is None else at)
    try:
        if at is None:
            queue.enqueue(RESYNC_TASK, job_id=f"resync-{slot}", job_timeout=3600, result_ttl=86400, unique=True)
        else:
            queue.enqueue_at(datetime.fromtimestamp(slot, tz=timezone.utc), RESYNC_TASK, job_id=f"resync-{slot}",
                             job_timeout=3600, result_ttl=86400, unique=True)
    except DuplicateJobError:
        pass
