"""The schedule of pending deletions: one per job UID (and stage), held in Redis, run by RQ.

Why keyed by UID: update events for a finished job arrive many times, and a job deleted and
re-created under the same name is a different object with a different UID. Keying by UID
gives each object exactly one pending deletion and keeps an old schedule from ever being
applied to a new object (the worker also checks the UID before deleting).

Layout in Redis:

- ``jobttl:pending``: sorted set, member → due time. The member is the job's UID, or
  ``pods:<uid>`` for the stage that deletes its pods first. This is the schedule's one
  index: what is pending, in due order, and how many.
- one delayed RQ job per member, id ``delete-<uid>-<due>`` (``pods-<uid>-<due>``), whose
  ``meta`` is the inspectable record: the job's identity, finish time, TTL and where it came
  from, the policy rules that matched. Nothing else is stored per pending deletion; the job
  id and the due time are derived from the member and its score.
- ``jobttl:override:<uid>``: what an operator said (keep, or not before a time).
- ``jobttl:dry-run:<kind>``: sorted sets beside the index, its dry-run members at the same due
  time (``jobttl:dry-run`` lists the kinds). Nothing that decides a deletion reads them: they
  tell what dry run would delete from what is overdue without reading a record (`due_counts`).
  The scripts that write the index keep them, in the same atomic step; every resync repairs
  what anything else wrote (`file_dry_run`).
- ``jobttl:namespaces:<namespace>``: sorted sets beside the index, each namespace's members at the
  same due time, and ``jobttl:namespaces``, a hash saying where each member is filed. Kept by the
  same scripts in the same atomic step, repaired by the same resync: what ``?namespace=`` and
  ``jobttl pending --namespace`` read, a page of one namespace at the cost of a page of all.

How a reconcile writes here (a Lua compare, then RQ's write of the job with its record in
one MULTI) is `jobttl.core.store.protocol`'s; this module names the parts and reads them.

The RQ job id is derived from (member, due): a changed TTL maps onto a new job id and the
old job is deleted, so an RQ job is never rewritten while a worker runs it.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from redis import Redis
from redis.client import Pipeline
from rq import Queue, Retry
from rq.exceptions import DuplicateJobError
from rq.job import Job
from rq.serializers import JSONSerializer

from jobttl.core.domain.wire import jsoncodec, shapes
from jobttl.core.runtime import logs
from jobttl.core.store import keys, scripts, tasks
from jobttl.core.domain.decisions.decision import INVALID_TTL_REASON, Decision, Verdict
from jobttl.core.domain.wire.identity import JobRef

# The members and what a reconcile did to them are the plan's (pure); named here too, where they live.
from jobttl.core.domain.decisions.plan import JOB_STAGE, PODS_STAGE, Change, member_for, split_member  # noqa: F401
from jobttl.core.store.scripts import CountDue, DryRunFile, DueCounts

if TYPE_CHECKING:
    from jobttl.core.runtime.config import Settings

log = logging.getLogger("jobttl.schedule")

# Operator overrides outlive any sensible TTL but not forever: UIDs are never reused.
OVERRIDE_SECONDS = 400 * 86400
# Finished RQ jobs are kept briefly for debugging (history is the audit trail's job);
# failed ones long enough for an operator to see them.
RESULT_TTL = 3600
FAILURE_TTL = 7 * 24 * 3600

# Set in a failed job's meta when retrying cannot help (a 403): plans leave it failed.
PERMANENT_FAILURE = "permanentFailure"

_STAGE_PREFIX = {JOB_STAGE: "delete", PODS_STAGE: "pods"}


def job_id_prefix(stage: str = JOB_STAGE) -> str:
    return f"{_STAGE_PREFIX[stage]}-"


def job_id_for(uid: str, due: int, stage: str = JOB_STAGE) -> str:
    return f"{job_id_prefix(stage)}{uid}-{due}"


def warning_id_for(uid: str, due: int) -> str:
    return f"warn-{uid}-{due}"


def notice_member(member: str, due: int) -> str:
    """One schedule change in the notices outbox: the pending member and its new due time."""
    return f"{member}|{due}"


@dataclass(frozen=True)
class InvalidNotice:
    """A Warning in the notices outbox for the owner of a job jobttl keeps because of what they wrote
    (`Decision.event_warning`): whom, the decision's reason (which names the value; the job's history
    card holds it too, so the worker can tell whether it still stands), where the TTL came from, the
    Event's reason (InvalidTTL, InvalidKeep, UnknownKey) and the verdict the card must still say. The
    same notice is the same entry: written twice, it is there once (an InvalidTTL one is written as
    before these had a reason, so a notice booked by an earlier release is the same entry too)."""

    ref: JobRef
    detail: str
    source: str | None
    reason: str = INVALID_TTL_REASON
    verdict: str = Verdict.INVALID_TTL.value

    @property
    def entry(self) -> str:
        data = {"invalid": self.detail, "source": self.source, "ref": self.ref.as_dict()}
        if self.reason != INVALID_TTL_REASON:
            data.update(reason=self.reason, verdict=self.verdict)
        return jsoncodec.dumps_str(data)

    @classmethod
    def read(cls, entry: str) -> InvalidNotice | None:
        """The notice an outbox entry holds; None for a schedule change (`notice_member`, never JSON)."""
        if not entry.startswith("{"):
            return None
        data = jsoncodec.loads(entry)
        return cls(
            JobRef.from_dict(data["ref"]),
            data["invalid"],
            data.get("source"),
            data.get("reason", INVALID_TTL_REASON),
            data.get("verdict", Verdict.INVALID_TTL.value),
        )


@dataclass(frozen=True)
class Pending:
    """One pending deletion: the record kept in its RQ job's meta, plus the index's due time."""

    ref: JobRef
    due: int
    stage: str = JOB_STAGE
    finished_at: int | None = None
    ttl: int | None = None
    ttl_source: str | None = None
    rules: tuple[str, ...] = ()
    dry_run: bool = False
    scheduled_at: int | None = None
    would_delete_at: int | None = None  # dry-run: when the worker found it would have deleted it
    state: str | None = None  # the RQ job's status; None when the RQ job is missing
    extra: dict[str, Any] = field(default_factory=dict)  # stage details (e.g. how many pods)
    notify: bool = (
        False  # booking only, not kept: post a DeletionScheduled Event (jobttl.core.services.scheduled_events)
    )

    @property
    def member(self) -> str:
        return member_for(self.ref.uid, self.stage)

    @property
    def job_id(self) -> str:
        return job_id_for(self.ref.uid, self.due, self.stage)

    def meta(self) -> dict[str, Any]:
        """What the RQ job's meta holds: what neither the index (member, due) nor RQ (when the
        job was created: scheduledAt) already says, defaults left out."""
        meta: dict[str, Any] = {
            "ref": [self.ref.api_version, self.ref.kind, self.ref.namespace, self.ref.name],
            "finishedAt": self.finished_at,
            "ttl": self.ttl,
            "ttlSource": self.ttl_source,
        }
        optional = {
            "rules": list(self.rules),
            "dryRun": self.dry_run,
            "stage": self.stage if self.stage != JOB_STAGE else None,
            "wouldDeleteAt": self.would_delete_at,
        }
        meta.update({k: v for k, v in optional.items() if v})
        return {**meta, **self.extra} if self.extra else meta

    @classmethod
    def from_meta(
        cls, member: str, due: int, meta: dict[str, Any], state: str | None, created_at: int | None = None
    ) -> Pending:
        uid, stage = split_member(member)
        api_version, kind, namespace, name = meta["ref"]
        known = {
            "ref",
            "finishedAt",
            "ttl",
            "ttlSource",
            "rules",
            "dryRun",
            "scheduledAt",
            "stage",
            "wouldDeleteAt",
            PERMANENT_FAILURE,
        }
        return cls(
            JobRef(api_version, kind, namespace, name, uid),
            due,
            stage,
            meta.get("finishedAt"),
            meta.get("ttl"),
            meta.get("ttlSource"),
            tuple(meta.get("rules") or ()),
            bool(meta.get("dryRun")),
            meta.get("scheduledAt", created_at),
            meta.get("wouldDeleteAt"),
            state,
            {k: v for k, v in meta.items() if k not in known},
        )

    def as_decision(self) -> Decision:
        """The expiring decision this record stands for, its due time as the expiry: what an
        operator's postpone plans again, so the override alone decides the new time."""
        return Decision(
            Verdict.EXPIRES,
            "as pending",
            finished_at=self.finished_at,
            ttl=self.ttl,
            ttl_source=self.ttl_source,
            expires_at=self.due,
            dry_run=self.dry_run,
            rules=self.rules,
        )

    def as_dict(self, now: float) -> dict[str, Any]:
        """The one public shape of a pending deletion: `jobttl pending --json` and the read API."""
        return shapes.with_times(
            {
                **self.ref.as_dict(),
                "stage": self.stage,
                "due": self.due,
                "dueIn": round(self.due - now, 1),
                "jobId": self.job_id,
                "state": self.state,
                "finishedAt": self.finished_at,
                "ttl": self.ttl,
                "ttlSource": self.ttl_source,
                "rules": list(self.rules),
                "dryRun": self.dry_run,
                "scheduledAt": self.scheduled_at,
                "wouldDeleteAt": self.would_delete_at,
                **self.extra,
            }
        )


@dataclass(frozen=True)
class ResyncAsked:
    """What became of a request for a resync (`Schedule.request_resync_soon`)."""

    outcome: str  # "now", "deferred" (booked for `at`) or "coalesced" (into the one booked for `at`)
    at: int  # when the resync that serves it runs (epoch seconds)
    booked: bool  # this request booked an RQ job (False: one of that slot was there)

    @property
    def label(self) -> str:
        return {"now": "resync-requested"}.get(self.outcome, f"resync-{self.outcome}")


# How a confirmation booked while another resync runs is tried again (seconds; the last repeats).
CONFIRM_RETRIES = 130
CONFIRM_RETRY_INTERVALS = (1, 2, 5, 10, 30)


class Schedule:
    """Pending deletions, scheduled as delayed RQ jobs on one queue."""

    def __init__(
        self,
        redis: Redis,
        queue_name: str,
        retry_intervals: list[int],
        job_timeout: int = 120,
        warn_before: int | None = None,
        task_names: tasks.Tasks | None = None,
        resync_min_interval: int = 300,
    ):
        # decode_responses must be off for RQ; we decode our own values.
        self.redis = redis
        # What the booked RQ jobs run: the worker's declared tasks (jobttl.core.store.tasks).
        self.tasks = task_names if task_names is not None else tasks.declared()
        self.queue = Queue(queue_name, connection=redis, serializer=JSONSerializer)
        self.retry = Retry(max=len(retry_intervals), interval=retry_intervals) if retry_intervals else None
        self.job_timeout = job_timeout
        # Seconds before each deletion to announce it (None: no announcements).
        self.warn_before = warn_before
        # Resyncs events ask for run at most once per this many seconds (`request_resync_soon`).
        self.resync_min_interval = resync_min_interval

    @classmethod
    def from_settings(cls, redis: Redis, settings: Settings, task_names: tasks.Tasks | None = None) -> Schedule:
        """The schedule every jobttl process uses: same queue, retries, timeouts and announcements."""
        return cls(
            redis,
            settings.queue_name,
            settings.retry_intervals,
            job_timeout=settings.job_timeout,
            warn_before=settings.announce_before,
            task_names=task_names,
            resync_min_interval=settings.resync_min_interval,
        )

    @property
    def job_key_prefix(self) -> str:
        return Job.redis_job_namespace_prefix

    # --- reading -------------------------------------------------------------------------------
    def due_of(self, member: str) -> int | None:
        score = self.redis.zscore(keys.PENDING_INDEX, member)
        return int(score) if score is not None else None

    def get(self, uid: str, stage: str = JOB_STAGE) -> Pending | None:
        member = member_for(uid, stage)
        due = self.due_of(member)
        if due is None:
            return None
        found = self.records([(member, due)])
        return found[0] if found else None

    def records(self, members: Iterable[tuple[str, int]]) -> list[Pending]:
        """The records of (member, due) pairs in one round trip, in order.

        A member whose RQ job is gone (a deletion that failed long ago, or whose enqueue was
        interrupted) is still pending: it is returned with what the index knows and state None.
        """
        members = list(members)
        with self.redis.pipeline(transaction=False) as pipe:
            for member, due in members:
                uid, stage = split_member(member)
                pipe.hmget(self.job_key_prefix + job_id_for(uid, due, stage), "meta", "status", "created_at")
            rows = pipe.execute()
        found = []
        for (member, due), (meta, status, created) in zip(members, rows):
            state = status.decode() if status else None
            try:
                record = Pending.from_meta(member, due, jsoncodec.loads(meta), state, _epoch(created)) if meta else None
            except (ValueError, KeyError, TypeError):
                record = None  # not a record jobttl wrote; shown with what the index knows
            if record is None:
                uid, stage = split_member(member)
                record = Pending(JobRef("", "", "", "", uid), due, stage, state=state)
            found.append(record)
        return found

    def members(self, offset: int = 0, limit: int | None = None, namespace: str | None = None) -> list[tuple[str, int]]:
        """(member, due) pairs in due order; of one namespace's from the namespace index."""
        end = -1 if limit is None else offset + limit - 1
        key = keys.namespace_index(namespace) if namespace else keys.PENDING_INDEX
        return [(m.decode(), int(s)) for m, s in self.redis.zrange(key, offset, end, withscores=True)]

    def due_by(self, at: float, offset: int = 0, limit: int | None = None) -> list[tuple[str, int]]:
        """(member, due) pairs due by `at`, in due order, from the index (dry-run records among them);
        `limit` of them from `offset` on."""
        if limit is None:
            found = self.redis.zrangebyscore(keys.PENDING_INDEX, "-inf", at, withscores=True)
        else:
            found = self.redis.zrangebyscore(keys.PENDING_INDEX, "-inf", at, start=offset, num=limit, withscores=True)
        return [(m.decode(), int(s)) for m, s in found]

    def scan(self, batch: int = 1000, namespace: str | None = None) -> Iterator[list[Pending]]:
        """Every pending deletion (of `namespace`: from its index), a batch at a time (one round trip
        for the index page, one for records)."""
        offset = 0
        while True:
            page = self.members(offset, batch, namespace)
            if not page:
                return
            yield self.records(page)
            offset += len(page)

    def count(self, namespace: str | None = None) -> int:
        return self.redis.zcard(keys.namespace_index(namespace) if namespace else keys.PENDING_INDEX)

    def due_counts(self, *times: float) -> DueCounts:
        """How many are due by each of `times`, dry-run records apart, in one read."""
        count_due = CountDue(times=times)
        return count_due.counts(count_due.run(self.redis))

    def drop_orphan(self, member: str) -> bool:
        """Take out an index entry whose RQ job (and record) is gone; True if it was there."""
        kinds = [k.decode() for k in self.redis.smembers(keys.DRY_RUN)]
        # A UID's namespace never changes: where it is filed, read first, is where it stays.
        namespace = self.redis.hget(keys.NAMESPACES, member)
        with self.redis.pipeline() as pipe:
            pipe.zrem(keys.PENDING_INDEX, member)
            for kind in kinds:
                pipe.zrem(keys.dry_run(kind), member)
            if namespace is not None:
                pipe.zrem(keys.namespace_index(namespace.decode()), member)
                pipe.hdel(keys.NAMESPACES, member)
            return bool(pipe.execute()[0])

    # --- operator overrides: keyed by UID, consulted by every reconcile and by the worker -------
    def override(self, uid: str) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.redis.hgetall(keys.override(uid)).items()}

    def set_override(self, uid: str, fields: dict[str, str], by: str, pipeline: Pipeline | None = None) -> None:
        pipe = pipeline if pipeline is not None else self.redis.pipeline()
        key = keys.override(uid)
        pipe.hset(key, mapping={**fields, "by": by, "at": str(int(time.time()))})
        pipe.expire(key, OVERRIDE_SECONDS)
        if pipeline is None:
            pipe.execute()

    def clear_override(self, uid: str, field: str) -> None:
        """Take back what an operator said (`keep` or `until`); a stage done for good stays done.

        `by` and `at` go with the last thing said: they describe it and nothing else.
        """
        key = keys.override(uid)
        with self.redis.pipeline() as pipe:
            pipe.hdel(key, field)
            pipe.hmget(key, "keep", "until")
            left = pipe.execute()[1]
        if left == [None, None]:
            self.redis.hdel(key, "by", "at")

    def mark_done(self, uid: str, stage: str) -> None:
        """A stage that ran for good (the pods are gone): the reconcile script never books it again."""
        key = keys.override(uid)
        with self.redis.pipeline() as pipe:
            pipe.hset(key, f"done:{stage}", str(int(time.time())))
            pipe.expire(key, OVERRIDE_SECONDS)
            pipe.execute()

    # --- resync requests ---------------------------------------------------------------------------
    def request_resync_soon(self, why: str, min_interval: int | None = None) -> ResyncAsked:
        """A resync something happening asked for (a PingSource event, a worker starting): now, unless one such ran less than the minimum interval ago
        (``JOBTTL_RESYNC_MIN_INTERVAL``); then one is booked for when the interval is over, and
        every request until it runs is coalesced into it. However many arrive, at most one resync
        per interval runs for them, and the last of a burst is never lost: the deferred one runs
        after it. Each deferral or coalescing is logged (``resync-deferred``, ``resync-coalesced``),
        with why it was asked and when it runs. The periodic resyncs (`request_resync(at=...)`) keep
        their own slots."""
        interval = self.resync_min_interval if min_interval is None else min_interval
        outcome, at = scripts.ResyncSlot(queue=self.queue.name, min_interval=interval).run(self.redis)
        booked = self.request_resync(at=None if outcome == "now" else at)
        if outcome != "now":
            logs.record(
                log,
                f"resync-{outcome}",
                why=why,
                at=at,
                minInterval=interval,
                detail=f"a resync ran or is booked less than {interval} s before; "
                f"this request is served by the one at {_utc(at).isoformat()}",
            )
        return ResyncAsked(outcome, at, booked)

    def request_resync(self, at: float | None = None) -> bool:
        """Book a resync now, or at `at` (epoch seconds); True if this booked it.

        The job id names the second it is due, so workers booking the same periodic slot
        book it once. Requests an event makes go through `request_resync_soon`, which bounds
        how often they run.
        """
        slot = int(time.time() if at is None else at)
        options = dict(job_id=f"resync-{slot}", job_timeout=3600, result_ttl=86400, unique=True)
        try:
            if at is None:
                self.queue.enqueue(self.tasks.resync, **options)
            else:
                self.queue.enqueue_at(_utc(slot), self.tasks.resync, **options)
        except DuplicateJobError:
            return False
        return True

    def request_confirmation(self, held: str) -> str:
        """Ask the workers for the resync that releases the held set named `held` (what `jobttl resync
        --confirm HELD` does, run by a worker: the console cannot read the cluster); its RQ job id."""
        job_id = f"resync-confirm-{held[:32]}-{int(time.time() * 1000)}"
        # Retried while another resync holds the lock (the task raises then), never lost to it: for
        # an hour (a resync of a large cluster takes minutes).
        self.queue.enqueue(
            self.tasks.resync,
            kwargs={"confirm": held},
            job_id=job_id,
            job_timeout=3600,
            result_ttl=86400,
            retry=Retry(max=CONFIRM_RETRIES, interval=list(CONFIRM_RETRY_INTERVALS)),
        )
        return job_id

    def mark_would_delete(self, job: Job, at: int) -> None:
        """Dry-run: the worker would have deleted it now. The record stays, so listings show
        what a real run would delete and later events and resyncs do not queue it again."""
        job.meta["wouldDeleteAt"] = at
        job.save_meta()

    def mark_permanent_failure(self, job: Job) -> None:
        job.meta[PERMANENT_FAILURE] = True
        job.save_meta()


def file_dry_run(redis: Redis, batch: int = 1000) -> int:
    """File every index member among the dry-run records and in the namespace index as its RQ job's
    meta says, and take out whatever they hold that the index does not (DRY_RUN_FILE, atomic per
    member): the upgrade from a layout without those records, and the resync's repair after
    anything wrote the index without them (a process of an earlier release, a hand edit). How many
    dry-run records there are.

    Then the sets an earlier 0.2 kept by bare Kind (keys.LEGACY_DRY_RUN) are dropped: what they
    held is in the index, filed here by Kind.group; only a process of that release reads them."""
    filed = 0
    kinds = [k.decode() for k in redis.smembers(keys.DRY_RUN)]

    namespace_sets = [k.decode() for k in redis.scan_iter(match=keys.NAMESPACE_PREFIX + "*", count=batch)]

    def members() -> Iterator[tuple[str, bool, str | None]]:
        """(member, in the index?, the namespace set it was found in): the index's, then the
        dry-run sets', the namespace index's. ZSCAN: members moved or added meanwhile are filed by
        the scripts that write them; one in several is filed several times, alike."""
        for key in (keys.PENDING_INDEX, *map(keys.dry_run, kinds), *namespace_sets):
            seen_in = key[len(keys.NAMESPACE_PREFIX) :] if key in namespace_sets else None
            for member, _ in redis.zscan_iter(key, count=batch):
                yield member.decode(), key == keys.PENDING_INDEX, seen_in
        for member, _ in redis.hscan_iter(keys.NAMESPACES, count=batch):
            yield member.decode(), False, None

    scanned = members()
    while page := list(itertools.islice(scanned, batch)):
        with redis.pipeline(transaction=False) as pipe:
            for member, _, seen_in in page:
                uid, stage = split_member(member)
                DryRunFile(
                    member=member,
                    job_prefix=f"{Job.redis_job_namespace_prefix}{job_id_prefix(stage)}{uid}-",
                    seen_in=seen_in,
                ).queue(pipe)
            filed += sum(dry for (_, indexed, _), dry in zip(page, scripts.execute(pipe)) if indexed)
    legacy = [k.decode() for k in redis.smembers(keys.LEGACY_DRY_RUN)]
    redis.delete(
        keys.LEGACY_DRY_RUN,
        *(f"{keys.LEGACY_DRY_RUN}:{kind}" for kind in legacy if f"{keys.LEGACY_DRY_RUN}:{kind}" != keys.DRY_RUN),
    )
    return filed


def _utc(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _epoch(rq_time: bytes | None) -> int | None:
    """RQ's stored times (ISO 8601, UTC, 'Z') as epoch seconds."""
    if not rq_time:
        return None
    try:
        return int(datetime.fromisoformat(rq_time.decode().replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None
