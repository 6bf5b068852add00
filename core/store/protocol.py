"""The schedule's write protocol: what a reconcile wants for each member in, Redis made to match.

Whoever asks (an event, a resync's page, the worker, an operator), `Store.apply` takes the
intents of one reconcile (jobttl.core.domain.decisions.plan) and makes the schedule match them in two round
trips at most:

1. the compare: one RECONCILE script per member (core/store/lua/reconcile.lua), in one pipeline. It
   compares the due time with what is pending, on Redis's clock, and writes itself what needs
   no RQ job: a cancellation, a hold, the history card. A booking it only answers ("schedule").
2. the bookings, in one MULTI: RQ's own write of each new RQ job, BOOKED (which tidies what an
   earlier run of the same id left), COMMIT (the index, the audit entry, the history card),
   and RETIRE of the RQ job it replaces. In that order: RETIRE leaves alone a job the index
   still names. A process that dies between the two round trips has written nothing for the
   booking, and the next event or resync plans it again.

A duplicate, a running job, a cancellation or a hold is one round trip; a new or moved
deletion two (three when Redis has lost its scripts since this process loaded them:
`jobttl.core.store.scripts.execute`).

The due time is `jobttl.core.domain.decisions.due.due_at`'s, from the decision and what an operator said. What
they said is in Redis, read by the compare itself so that a keep or a postpone cannot slip in
between; the store cannot know it before sending. So it sends the due time for the override
it believes in (none, at first), and the script checks that belief against what it reads: if
an operator has said something, the script writes nothing and answers what they said, and
those members go again, with the due time for it. An object nobody overrode costs nothing more;
a batch holding one kept or postponed costs one round trip more. Lua never applies the rule.

Jobs already due are enqueued for immediate execution rather than scheduled: RQ's scheduler
moves at most 1000 due jobs per queue per second, which would turn a backlog into a queue behind
the scheduler rather than behind the workers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from redis.client import Pipeline
from rq import Queue
from rq.job import Job, JobStatus
from rq.registry import DeferredJobRegistry, FailedJobRegistry, FinishedJobRegistry, ScheduledJobRegistry
from rq.results import Result
from rq.serializers import JSONSerializer

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.store import keys, scripts
from jobttl.core.store.audit import Audit, decision_fields, entry_fields
from jobttl.core.store.capacity import Gate
from jobttl.core.domain.decisions.due import KEPT_BY_OPERATOR, Due, Override, due_at
from jobttl.core.store.guard import HeldDeletion, burst_rule
from jobttl.core.domain.decisions.plan import (
    COLLECT,
    GUARDED,
    JOB_STAGE,
    PODS_STAGE,
    RELEASE,
    Applied,
    Change,
    Intent,
    split_member,
)
from jobttl.core.store.schedule import (
    FAILURE_TTL,
    OVERRIDE_SECONDS,
    RESULT_TTL,
    InvalidNotice,
    Pending,
    Schedule,
    job_id_for,
    job_id_prefix,
    notice_member,
    warning_id_for,
)

# Where RQ keeps a job that is not running (a queued job is on the queue itself), in the
# order RETIRE takes them.
_REGISTRIES = (ScheduledJobRegistry, FinishedJobRegistry, FailedJobRegistry, DeferredJobRegistry)
# The override a first compare assumes: none (the stored fields, as the script reads them).
_NOTHING_SAID = ("", "")
# Compares per member before giving up: each one after the first means an operator changed
# what they said between two round trips of this very reconcile.
_MAX_COMPARES = 4


class OverrideKeptChanging(RuntimeError):
    """An operator's override changed at every compare: the reconcile is left to the next event."""


class _BookedJob(Job):
    """An RQ job as booked: RQ's hash, less what a pending deletion need not hold.

    RQ writes eight fields as '' (the callbacks, started_at, ended_at, last_heartbeat,
    worker_name, group_id) and reads an absent field as unset; it zlib-compresses the call
    (`data`) even when, as here (a task name, a member and a due time, ~100 B), that makes
    it longer, and reads an uncompressed one as is; and it writes meta with JSON's spaces.
    Left out, uncompressed and compact, a pending deletion's hash is a quarter smaller, and
    RQ reads the same job back. The worker loads RQ's own Job class, which writes whole
    hashes from then on. Where a hash of the same id is still there (an earlier run's),
    `Store._book` deletes the fields left out, as RQ's '' would have overwritten them.
    """

    omitted: tuple[str, ...] = ()

    def to_dict(self, include_meta: bool = True, include_result: bool = True) -> dict:
        whole = super().to_dict(include_meta, include_result)
        self.omitted = tuple(k for k, v in whole.items() if v == "")
        fields = {k: v for k, v in whole.items() if v != ""}
        if len(self.data) <= len(fields["data"]):
            fields["data"] = self.data
        if include_meta and self.meta:
            fields["meta"] = json.dumps(self.meta, separators=(",", ":"))
        return fields


class Store:
    """The write protocol over one schedule (its queue, retries, announcements) and audit trail."""

    def __init__(self, schedule: Schedule, audit: Audit, burst_limit: int | None = None, gate: Gate | None = None):
        self.schedule = schedule
        # While Redis is full, bookings are refused (RedisFull) before anything is written: the
        # reserve past that point is the worker's, whose deletions free memory. None: no check.
        self.gate = gate
        self.redis = schedule.redis
        self.queue = schedule.queue
        # The same queue, making jobs that leave RQ's empty fields out of their first write.
        self._booking = Queue(self.queue.name, connection=self.redis, serializer=JSONSerializer, job_class=_BookedJob)
        # Where an earlier run of a booked id may still be listed (RQ's own key names).
        self._ended = (FinishedJobRegistry(queue=self.queue).key, FailedJobRegistry(queue=self.queue).key)
        self._registries = tuple(r(queue=self.queue).key for r in _REGISTRIES)
        self.outbox = keys.notices(
            self.queue.name
        )  # DeletionScheduled and InvalidTTL (jobttl.core.services.scheduled_events)
        self.audit_max = audit.max_entries
        self.card_ttl = audit.tombstone_seconds
        self.burst_limit = burst_limit  # events' per-minute limit on news (jobttl.core.store.guard)
        self._rules = {mode: burst_rule(mode, burst_limit) for mode in (GUARDED, COLLECT, RELEASE)}
        self._job_prefix = {stage: schedule.job_key_prefix + job_id_prefix(stage) for stage in (JOB_STAGE, PODS_STAGE)}

    # --- a reconcile ------------------------------------------------------------------------------
    def apply(self, intents: Sequence[Intent]) -> list[Applied]:
        """Make the schedule match `intents`; what became of each, in order."""
        return self.write(intents, self.compare(intents))

    def compare(self, intents: Sequence[Intent]) -> list[Applied]:
        """The first round trip (and one more per override met): what each intent changes, with
        what needs no RQ job written; a booking is answered `Change.SCHEDULE`, for `write`."""
        if not intents:
            return []
        said = [_NOTHING_SAID] * len(intents)
        dues: list[Due] = [Due(None)] * len(intents)
        replies: list[scripts.ReconcileReply | None] = [None] * len(intents)
        todo = list(range(len(intents)))
        for _ in range(_MAX_COMPARES):
            with self.redis.pipeline(transaction=False) as pipe:
                for i in todo:
                    dues[i] = due_at(intents[i].decision, Override.read(*said[i]))
                    self._compare(intents[i], dues[i], said[i]).queue(pipe)
                answers = scripts.execute(pipe)
            for i, reply in zip(todo, answers):
                replies[i] = reply
                if reply.said is not None:
                    said[i] = reply.said
            todo = [i for i in todo if replies[i].change == "override"]
            if not todo:
                break
        else:
            raise OverrideKeptChanging(f"what operators said about {intents[todo[0]].ref} changed at every compare")
        return [_applied(intent, due, reply) for intent, due, reply in zip(intents, dues, replies)]

    def _compare(self, intent: Intent, due: Due, said: tuple[str, str]) -> scripts.Reconcile:
        ref, decision, stage, member, expiring = (
            intent.ref,
            intent.decision,
            intent.stage,
            intent.member,
            intent.expiring,
        )
        kept = due.why == KEPT_BY_OPERATOR
        unbooked = _unbooked(intent, kept)
        rule = self._rules.get(intent.mode) or burst_rule(intent.mode, self.burst_limit)
        return scripts.Reconcile(
            ref=ref,
            outbox=self.outbox,
            member=member,
            uid=ref.uid,
            expiring=expiring,
            due=due.at,
            reason=due.why if kept else intent.reason,
            keep_seen=said[0],
            until_seen=said[1],
            keep_for=OVERRIDE_SECONDS if kept else None,
            collect=rule.collect,
            burst_limit=rule.limit,
            burst_window=rule.window,
            news_horizon=rule.horizon,
            job_prefix=self._job_prefix.get(stage) or self.schedule.job_key_prefix + job_id_prefix(stage),
            dry_run=decision is not None and decision.dry_run,
            unbooked=jsoncodec.dumps_str(unbooked) if unbooked is not None else None,
            # What the held set keeps should the guard hold it: only news faces the guard, and only
            # an expiring decision is news.
            held_entry=HeldDeletion(member, ref, decision, intent.by).as_json()
            if expiring and rule.limit is not None
            else "",
            audit_max=self.audit_max,
            card_ttl=self.card_ttl,
            echo=intent.echo,
            invalid=_invalid(intent),
            fields=_fields(intent),
        )

    def write(self, intents: Sequence[Intent], applied: list[Applied]) -> list[Applied]:
        """The second round trip: RQ's writes for what `compare` answered, in one MULTI (the new
        RQ jobs with their COMMITs, the retired jobs); what became of each intent."""
        todo = [i for i, a in enumerate(applied) if a.change in (Change.SCHEDULE, Change.CANCELLED)]
        if not todo:
            return applied
        if self.gate is not None and any(applied[i].change is Change.SCHEDULE for i in todo):
            self.gate.check()
        # Redis's clock, as the scripts judged "due now" by it: a host whose clock runs ahead must
        # not enqueue a future deletion for right away.
        now = applied[todo[0]].now or time.time()
        with self.redis.pipeline() as pipe:
            pipe.multi()  # RQ's enqueue expects a pipeline already in MULTI
            commits = {}  # intent index → where its COMMIT's reply will be
            for i in todo:
                intent, done = intents[i], applied[i]
                record = _record(intent, done, now)
                if record is not None:
                    self.book(record, now, pipeline=pipe)
                    commits[i] = len(pipe)
                    scripts.Commit(
                        ref=intent.ref,
                        member=intent.member,
                        uid=intent.ref.uid,
                        namespace=intent.ref.namespace,
                        due=record.due,
                        seen=done.previous_due,
                        audit_max=self.audit_max,
                        card_ttl=self.card_ttl,
                        dry_run=record.dry_run,
                        fields=_fields(intent),
                    ).queue(pipe)
                self.retire_replaced(done, record, pipeline=pipe)
            replies = scripts.execute(pipe)
        result = list(applied)
        for i, position in commits.items():
            reply = replies[position]
            result[i] = Applied(
                Change(reply.change),
                applied[i].member,
                reply.due,
                reply.previous_due,
                applied[i].previous_state,
                applied[i].now,
            )
        return result

    # --- RQ's jobs ---------------------------------------------------------------------------------
    def book(self, record: Pending, now: float, pipeline: Pipeline) -> None:
        """Write the RQ job of `record` (due now: queued; later: scheduled), and its announcement.
        In a MULTI (`pipeline`): the sweep books again a deletion whose RQ job ended unfinished."""
        status = JobStatus.QUEUED if record.due <= now else JobStatus.SCHEDULED
        tasks = self.schedule.tasks
        job = self._job(
            tasks.delete,
            (record.member, record.due),
            record.job_id,
            status,
            meta=record.meta(),
            result_ttl=-1 if record.dry_run else RESULT_TTL,
        )
        # The DeletionScheduled Event, posted by a worker (the sink has no API access) from an
        # outbox, off the deletions' queue (jobttl.core.services.scheduled_events); a change is one member.
        notice = notice_member(record.member, record.due) if record.notify and record.due > now else None
        self._book(job, None if record.due <= now else record.due, pipeline, notice, now)
        warn_before = self.schedule.warn_before
        if record.stage == JOB_STAGE and warn_before is not None and record.due - warn_before > now:
            warning = self._job(
                tasks.warn,
                (record.ref.uid, record.due),
                warning_id_for(record.ref.uid, record.due),
                JobStatus.SCHEDULED,
                result_ttl=RESULT_TTL,
            )
            self._book(warning, record.due - warn_before, pipeline)

    def rebook(self, records: Sequence[Pending], now: float) -> None:
        """Book again, in one MULTI, deletions whose RQ job ended without finishing them (the sweep)."""
        with self.redis.pipeline() as pipe:
            pipe.multi()  # RQ's enqueue expects a pipeline already in MULTI
            for record in records:
                self.book(record, now, pipeline=pipe)
            scripts.execute(pipe)

    def retire_replaced(self, applied: Applied, record: Pending | None, pipeline: Pipeline) -> None:
        """Retire the RQ job (and announcement) of what was pending before, unless it is the one
        just booked again, or a worker runs it: a running job re-reads the object and decides for
        itself, and deleting its hash under it would only lose its result."""
        previous, state = applied.previous_due, applied.previous_state
        if (
            previous is None
            or state in (None, JobStatus.STARTED.value)
            or (record is not None and previous == record.due)
        ):
            return
        uid, stage = split_member(applied.member)
        self.retire(applied.member, previous, job_id_for(uid, previous, stage), pipeline=pipeline)
        if stage == JOB_STAGE and self.schedule.warn_before is not None:
            self.retire(applied.member, previous, warning_id_for(uid, previous), pipeline=pipeline)

    def retire(self, member: str, due: int, job_id: str, pipeline: Pipeline) -> None:
        """Delete an RQ job a reconcile replaced or dropped, unless the index names it again
        (RETIRE): where RQ keeps it is asked of RQ's own classes."""
        job = Job(job_id, connection=self.redis, serializer=JSONSerializer)
        scripts.Retire(
            job_key=job.key,
            dependents=job.dependents_key,
            dependencies=job.dependencies_key,
            results=Result.get_key(job_id),
            queue_key=self.queue.key,
            registries=self._registries,
            member=member,
            due=due,
            job_id=job_id,
        ).queue(pipeline)

    def _book(
        self, job: _BookedJob, at: float | None, pipe: Pipeline, notice: str | None = None, now: float = 0.0
    ) -> None:
        """Queue `job` now (`at` None) or schedule it at `at`, over whatever an earlier run of
        the same id left (booked again at its due, or back at a due an earlier run had, say
        after a keep-until came and went): RQ's write would keep that hash's expiry and its
        listing as finished or failed, and the fields this write leaves out would keep the old
        run's values. RQ's write, then one script (BOOKED) in the same MULTI; `notice` goes to
        the notices outbox with it."""
        if at is None:
            self.queue.enqueue_job(job, pipeline=pipe)
        else:
            self.queue.schedule_job(job, _utc(at), pipeline=pipe)
        scripts.Booked(
            job_key=job.key,
            finished=self._ended[0],
            failed=self._ended[1],
            outbox=self.outbox,
            job_id=job.id,
            status=job.get_status(refresh=False).value,
            notice=notice,
            notice_at=now,
            omitted=job.omitted,
        ).queue(pipe)

    def _job(
        self,
        task: str,
        args: tuple,
        job_id: str,
        status: JobStatus,
        meta: dict | None = None,
        result_ttl: int = RESULT_TTL,
    ) -> Job:
        """An RQ job without a description: RQ would store the call string, and the record
        (meta) already says what it deletes. Jobs are a third of Redis's memory per deletion (`_BookedJob`)."""
        job = self._booking.create_job(
            task,
            args=args,
            job_id=job_id,
            status=status,
            timeout=self.schedule.job_timeout,
            retry=self.schedule.retry,
            meta=meta,
            result_ttl=result_ttl,
            failure_ttl=FAILURE_TTL,
        )
        job.description = None
        return job


def _unbooked(intent: Intent, kept: bool) -> dict[str, Any] | None:
    """The card entry for an intent that books nothing (kept by an operator, or not expiring), or None."""
    ref = intent.ref
    if kept:
        return {"event": "skipped", "reason": KEPT_BY_OPERATOR, "kind": ref.kind, "apiVersion": ref.api_version}
    if not intent.expiring and intent.stage == JOB_STAGE:
        # A pods stage that is not due says nothing on the job's card: the job's own decision does.
        return {
            "event": "skipped",
            "kind": ref.kind,
            "apiVersion": ref.api_version,
            "reason": intent.reason,
            **({"detail": intent.decision.reason} if intent.decision is not None else {}),
        }
    return None


def _invalid(intent: Intent) -> str | None:
    """The Warning (InvalidTTL, InvalidKeep, UnknownKey) for the owner of a job jobttl keeps for what
    they wrote, or None: in the same script call (RECONCILE posts it once per object and value)."""
    decision = intent.decision
    if decision is None or not decision.event_warning or intent.stage != JOB_STAGE:
        return None
    return InvalidNotice(
        intent.ref, decision.reason, decision.ttl_source, decision.event_warning, decision.verdict.value
    ).entry


def _applied(intent: Intent, due: Due, reply: scripts.ReconcileReply) -> Applied:
    change = Change(reply.change)
    if change is Change.IGNORED and due.why == KEPT_BY_OPERATOR and reply.reason is None:
        change = Change.KEPT  # nothing was pending, and an operator keeps it
    return Applied(change, intent.member, reply.due, reply.previous_due, reply.previous_state, reply.now, reply.reason)


def _record(intent: Intent, applied: Applied, now: float) -> Pending | None:
    """The record of a booking the compare answered "schedule" for (None for anything else)."""
    decision = intent.decision
    if decision is None or applied.due is None or applied.change is not Change.SCHEDULE:
        return None
    return Pending(
        intent.ref,
        applied.due,
        intent.stage,
        decision.finished_at,
        decision.ttl,
        decision.ttl_source,
        decision.rules,
        decision.dry_run,
        scheduled_at=int(now),
        notify=intent.notify,
    )


def _fields(intent: Intent) -> dict[str, Any]:
    """The audit entry's fields (the scripts add the event, due times and reason)."""
    stage = intent.stage if intent.stage != JOB_STAGE else None
    fields = entry_fields("", intent.ref, by=intent.by, stage=stage, **decision_fields(intent.decision))
    fields.pop("event")
    return fields


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)
