"""The one reconcile path: an object (or a vanished identity) in; the schedule made to match.

The sink (for each event), the resync (for each listed page) and the worker (when its fresh
read says a deletion no longer applies, or applies later) all come here, so a decision is
applied, and recorded, the same way wherever it was made:

1. `decide()` says what should happen to the object (pure, no I/O);
2. one Lua script compares that with what is pending and writes the index, the audit entry
   and the job's history card atomically (one round trip: all a duplicate event or a
   running job costs);
3. if something changed, RQ's own code enqueues the new RQ job and retires the old one.

Every change yields exactly one audit entry with the same fields, whoever asked (``by``:
event, resync, worker, operator): the decision's TTL, where it came from, the finish time,
the rules that matched, dry-run, and why. A decision that changes nothing is kept once on
the job's history card (so "why is my job still here?" has an answer) and not appended to
the trail. Newly due deletions go through the blast-radius guard: the resync collects them
to judge as a set; events are held once more than the guard's limit come due in a minute.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis.client import Pipeline

from jobttl.core import jsoncodec, keys, scripts, shapes
from jobttl.core.audit import Audit, entry_fields
from jobttl.core.decision import Decision, Verdict, decide
from jobttl.core.history import HistoryIndex, limit_decision, membership
from jobttl.core.identity import JobRef
from jobttl.core.kinds import JobKind, shown_kind
from jobttl.core.metrics import Metrics
from jobttl.core.policy import Policy
from jobttl.core.recent import Recent
from jobttl.core.schedule import (JOB_STAGE, PODS_STAGE, Change, InvalidNotice, Pending, Planned, Schedule,
                                  job_id_prefix, member_for)
from jobttl.core.stages import pod_stage

log = logging.getLogger("jobttl.reconcile")

GUARDED = "guarded"  # newly due deletions count towards the per-minute burst limit
COLLECT = "collect"  # newly due deletions are returned, not written (a resync judges them together)
RELEASE = "release"  # the guard has passed them (or an operator confirmed them)

# Decisions that mean "this object will not be deleted", and should say so loudly.
_WARN = (Verdict.INVALID_TTL,)
# Reasons that say the object is going away: from anyone but the deletion's own RQ job (the
# worker), they may be the echo of jobttl's own deletion, and are not news (see RECONCILE).
_GOING_AWAY = (Verdict.BEING_DELETED.value, "deleted")


@dataclass(frozen=True)
class Outcome:
    """What one reconcile did."""

    change: Change
    ref: JobRef
    decision: Decision | None = None
    due: int | None = None
    previous_due: int | None = None
    stage: str = JOB_STAGE
    reason: str | None = None  # why nothing is pending (a verdict or "gone", "recreated", ...)

    @property
    def label(self) -> str:
        """Short form for the sink's X-Jobttl-Outcome header, metrics and RQ results."""
        if self.change is Change.IGNORED and self.reason:
            return f"{self.change.value}:{self.reason}"
        return self.change.value


@dataclass(frozen=True)
class Rejected:
    """An object a batch could not reconcile: it is reported, and the batch goes on."""

    kind: str
    namespace: Any
    name: Any
    reason: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}: {self.reason}"


@dataclass(frozen=True)
class _Request:
    """One reconcile to send: who, what was decided, and how to treat it if newly due."""

    ref: JobRef
    decision: Decision | None  # None: the object is gone
    reason: str  # the verdict, or why the object no longer counts
    by: str
    mode: str
    stage: str = JOB_STAGE
    notify: bool = False  # a DeletionScheduled Event when it is scheduled or moved

    @property
    def member(self) -> str:
        return member_for(self.ref.uid, self.stage)

    @property
    def echo(self) -> bool:
        return self.reason in _GOING_AWAY and self.by != "worker"


class Reconciler:
    def __init__(self, schedule: Schedule, audit: Audit, policy: Policy, metrics: Metrics | None = None,
                 burst_limit: int | None = None, recent: Recent | None = None):
        self.schedule = schedule
        self.audit = audit
        self.policy = policy
        self.metrics = metrics
        self.burst_limit = burst_limit
        self.recent = recent  # the sink's memory of decisions just applied (jobttl.core.recent)
        self.scripts = schedule.scripts  # the same Redis: one set of scripts
        self.outbox = keys.notices(schedule.queue.name)  # DeletionScheduled and InvalidTTL (jobttl.worker.notices)
        self.history = HistoryIndex(schedule.redis)

    @classmethod
    def from_settings(cls, schedule: Schedule, audit: Audit, settings: Any, metrics: Metrics | None = None,
                      recent: Recent | None = None) -> Reconciler:
        return cls(schedule, audit, settings.policy, metrics, burst_limit=settings.resync_max_deletions, recent=recent)

    # --- the entry points ---------------------------------------------------------------------
    def reconcile(self, obj: dict[str, Any], kind: JobKind, by: str, mode: str = GUARDED) -> Outcome:
        """Make the schedule match what `decide()` says of this object now (its identity is valid)."""
        outcomes, rejected = self.reconcile_many([(obj, kind)], by, mode)
        if rejected:
            raise ValueError(str(rejected[0]))
        return outcomes[0]

    def forget(self, ref: JobRef, reason: str, by: str) -> Outcome:
        """The object is gone (deleted, or re-created under another UID): nothing stays pending for it,
        neither its deletion nor its pods stage, and it leaves its history group."""
        # Its pods stage too, whatever the policy says now: one booked under an earlier policy
        # must not outlive its job (a pending entry for nothing costs a script call, no more).
        requests = [_Request(ref, None, reason, by, GUARDED), _Request(ref, None, reason, by, GUARDED, PODS_STAGE)]
        if self.recent is not None:
            self.recent.drop(*(r.member for r in requests))
        if self.policy.history_limits:
            self.history.drop([ref.uid])
        return self._run(requests)[0]

    def drop_stage(self, ref: JobRef, stage: str, reason: str, by: str) -> Outcome:
        """Cancel one stage the policy no longer has (a podTTL removed since it was booked)."""
        return self._run([_Request(ref, None, reason, by, GUARDED, stage)])[0]

    def release(self, held: Iterable[tuple], by: str) -> list[Outcome]:
        """Schedule decisions the guard passed (or an operator confirmed), without the guard.

        Each item is (ref, decision) or (ref, decision, stage)."""
        requests = []
        for ref, decision, *stage in held:
            requests.append(_Request(ref, decision, decision.verdict.value, by, RELEASE, *stage))
        return self._run(requests)

    def reconcile_many(self, objects: Iterable[tuple[dict[str, Any], JobKind]], by: str,
                       mode: str = GUARDED, stage: str | None = None) -> tuple[list[Outcome], list[Rejected]]:
        """Reconcile a batch (a resync's page): one round trip for the scripts, one for RQ's writes
        (and, when the policy keeps only the last N, one before them to file the jobs in their groups).

        An object that cannot be read or decided is rejected, with why; the others go on. The
        outcomes are the jobs' own first, in order, then their pods stages and the jobs pushed
        out of their groups. With `stage`, only that stage is reconciled (a worker replanning
        the stage it runs leaves the other to its own run).
        """
        decided, rejected = [], []
        for obj, kind in objects:
            try:
                decided.append((obj, kind, JobRef.of(obj), decide(obj, kind, self.policy)))
            except Exception as exc:  # one odd object must not stop the others
                meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
                rejected.append(Rejected(shown_kind(kind.api_version, kind.kind), meta.get("namespace"),
                                         meta.get("name"),
                                         shapes.describe(exc)))
                continue
            if decided[-1][3].verdict is Verdict.INVALID_TTL and self.metrics is not None:
                self.metrics.invalid_ttls.labels(kind.kind, kind.group).inc()
        notify = [self._notify(obj) for obj, *_ in decided]
        decisions, pushed = self._history([d for d in decided], notify, by, mode)
        jobs = [_Request(ref, decision, decision.verdict.value, by, mode, notify=n)
                for (_, _, ref, _), decision, n in zip(decided, decisions, notify)]
        pods = self._pod_stages(decided, decisions, notify, by, mode)
        if stage == PODS_STAGE:
            jobs, pushed = [], []
        elif stage == JOB_STAGE:
            pods = []
        # The pods stages go first, so that each job's history card ends on its own deletion.
        outcomes = self._remembered(pods + jobs + pushed, by, mode)
        return outcomes[len(pods):len(pods) + len(jobs)] + outcomes[:len(pods)] + outcomes[len(pods) + len(jobs):], \
            rejected

    def _remembered(self, requests: list[_Request], by: str, mode: str) -> list[Outcome]:
        """`_run`, unless the sink reconciled exactly these decisions a moment ago (jobttl.core.recent)."""
        if self.recent is None or by != "event" or mode != GUARDED or self.policy.history_limits:
            return self._run(requests)
        keys_ = [_memo(r) for r in requests]
        known = [self.recent.get(r.member, k) for r, k in zip(requests, keys_)]
        if requests and all(o is not None for o in known):
            return known
        outcomes = self._run(requests)
        for request, key, outcome in zip(requests, keys_, outcomes):
            if outcome.change in _SETTLED:
                self.recent.put(request.member, key, _as_repeated(outcome))
        return outcomes

    # --- keeping the evidence: notices, pods stages, history limits ---------------------------
    def _notify(self, obj: dict[str, Any]) -> bool:
        """Whether a schedule change for this object posts a DeletionScheduled Event (the default)."""
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
        setting = self.policy.cleanup_effective(meta.get("namespace", ""), labels).get("scheduled_events")
        return setting is None or bool(setting.value)

    def _pod_stages(self, decided: list, decisions: list[Decision], notify: list[bool], by: str,
                    mode: str) -> list[_Request]:
        if not self.policy.pod_stages:
            return []
        requests = []
        for (obj, kind, ref, _), decision, n in zip(decided, decisions, notify):
            stage = pod_stage(obj, kind, self.policy, decision)
            requests.append(_Request(ref, stage.decision, stage.reason, by, mode, PODS_STAGE, notify=n))
        return requests

    def _history(self, decided: list, notify: list[bool], by: str, mode: str
                 ) -> tuple[list[Decision], list[_Request]]:
        """File each job in its history group (one round trip); the decisions with the limits
        applied, and reconciles for the jobs pushed out of their groups."""
        decisions = [decision for *_, decision in decided]
        if not self.policy.history_limits or not decided:
            return decisions, []
        members = [membership(obj, kind, self.policy, decision, n)
                   for (obj, kind, _, decision), n in zip(decided, notify)]
        with self.schedule.redis.pipeline(transaction=False) as pipe:
            for (_, _, ref, _), member in zip(decided, members):
                self.history.file(member, ref.uid, pipe)
            replies = scripts.execute(pipe)
        pushed: dict[str, _Request] = {}
        own = {ref.uid: i for i, (_, _, ref, _) in enumerate(decided)}
        for i, (member, reply) in enumerate(zip(members, replies)):
            filed = HistoryIndex.filed(reply)
            if member is not None and filed.rank is not None and filed.beyond_at is not None:
                decisions[i] = limit_decision(member, filed.rank, filed.beyond_at, decisions[i])
            for other, rank, at in filed.pushed_out:
                if other.uid in own:  # filed earlier in this batch, before the job that pushed it out
                    j = own[other.uid]
                    if members[j] is not None:
                        decisions[j] = limit_decision(members[j], rank, at, decisions[j])
                    continue
                decision = limit_decision(other, rank, at)
                pushed[other.uid] = _Request(other.ref, decision, decision.verdict.value, by, mode, notify=other.notify)
        return decisions, list(pushed.values())

    # --- the steps ------------------------------------------------------------------------------
    def _run(self, requests: list[_Request]) -> list[Outcome]:
        if not requests:
            return []
        with self.schedule.redis.pipeline(transaction=False) as pipe:
            for request in requests:
                self._send(request, pipe)
            replies = scripts.execute(pipe)
        planned = [self._planned(request, reply) for request, reply in zip(requests, replies)]
        planned = self._apply(requests, planned)
        return [self._report(request, p) for request, p in zip(requests, planned)]

    def _send(self, request: _Request, pipe: Pipeline) -> None:
        ref, decision = request.ref, request.decision
        expiring = decision is not None and decision.verdict is Verdict.EXPIRES
        held = jsoncodec.dumps_str({"ref": ref.as_dict(), "decision": decision.as_dict(), "by": request.by}) \
            if expiring else ""
        # A pods stage that is not due says nothing on the job's card: the job's own decision does.
        card_decision = "" if expiring or request.stage != JOB_STAGE else jsoncodec.dumps_str(
            {"event": "skipped", "kind": ref.kind, "apiVersion": ref.api_version, "reason": request.reason,
             **({"detail": decision.reason} if decision is not None else {})})
        args = [request.member, ref.uid, "expires" if expiring else request.reason,
                decision.expires_at if expiring else "", request.mode,
                -1 if self.burst_limit is None or request.mode != GUARDED else self.burst_limit,
                self.schedule.job_key_prefix + job_id_prefix(request.stage),
                "1" if decision is not None and decision.dry_run else "0", card_decision, held,
                self.audit.max_entries, self.audit.tombstone_seconds, "1" if request.echo else "0",
                self._invalid_notice(request), *self._fields(request)]
        self.scripts.reconcile(keys=[keys.PENDING_INDEX, keys.override(ref.uid), keys.AUDIT_STREAM,
                                     keys.card(ref.namespace, ref.name), keys.HELD, keys.RECENT_DUE,
                                     keys.tombstone(ref.namespace, ref.name, ref.uid), self.outbox,
                                     keys.DRY_RUN],
                               args=args, client=pipe)

    @staticmethod
    def _invalid_notice(request: _Request) -> str:
        """The InvalidTTL Warning for the notices outbox, or "": the owner of a job jobttl keeps for
        a value it cannot read is told, in the same script call (RECONCILE posts it once per value)."""
        decision = request.decision
        if decision is None or decision.verdict is not Verdict.INVALID_TTL or request.stage != JOB_STAGE:
            return ""
        return InvalidNotice(request.ref, decision.reason, decision.ttl_source).entry

    @staticmethod
    def _fields(request: _Request) -> list[str]:
        """The audit entry's fields, flat (the script adds the event, due times and reason)."""
        stage = request.stage if request.stage != JOB_STAGE else None
        fields = entry_fields("", request.ref, by=request.by, stage=stage, **_details(request.decision))
        fields.pop("event")
        return [part for item in fields.items() for part in item]

    @staticmethod
    def _planned(request: _Request, reply: list[bytes]) -> Planned:
        change, due, previous, state, now, reason = (part.decode() for part in reply)
        return Planned(Change(change), request.member, int(due) if due else None,
                       int(previous) if previous else None, state or None, float(now), reason or None)

    def _apply(self, requests: list[_Request], planned: list[Planned]) -> list[Planned]:
        """RQ's writes for every change, in one MULTI: the new RQ jobs with their COMMITs, the retired jobs."""
        todo = [i for i, p in enumerate(planned) if p.change in (Change.SCHEDULE, Change.CANCELLED)]
        if not todo:
            return planned
        # Redis's clock, as the scripts judged "due now" by it: a host whose clock runs ahead must
        # not enqueue a future deletion for right away.
        now = planned[todo[0]].now or time.time()
        with self.schedule.redis.pipeline() as pipe:
            pipe.multi()  # RQ's enqueue expects a pipeline already in MULTI
            commits = {}  # request index → where its COMMIT's reply will be
            for i in todo:
                request, p = requests[i], planned[i]

                def commit(pipe, request=request, p=p, i=i):
                    if p.change is Change.SCHEDULE:
                        commits[i] = len(pipe)
                        self._commit(request, p, pipe)

                self.schedule.apply(p, self._record(request, p, now), now, pipeline=pipe, commit=commit)
            replies = scripts.execute(pipe)
        result = list(planned)
        for i, position in commits.items():
            change, due, previous = (part.decode() for part in replies[position])
            result[i] = Planned(Change(change), planned[i].member, int(due), int(previous) if previous else None,
                                planned[i].previous_state, planned[i].now)
        return result

    def _commit(self, request: _Request, planned: Planned, pipe: Pipeline) -> None:
        ref = request.ref
        seen = "" if planned.previous_due is None else str(planned.previous_due)
        self.scripts.commit(keys=[keys.PENDING_INDEX, keys.AUDIT_STREAM, keys.card(ref.namespace, ref.name),
                                  keys.override(ref.uid), keys.DRY_RUN],
                            args=[request.member, ref.uid, planned.due, seen, self.audit.max_entries,
                                  self.audit.tombstone_seconds, "1" if request.decision.dry_run else "0",
                                  *self._fields(request)], client=pipe)

    @staticmethod
    def _record(request: _Request, planned: Planned, now: float) -> Pending | None:
        decision = request.decision
        if decision is None or planned.due is None or planned.change is not Change.SCHEDULE:
            return None
        return Pending(request.ref, planned.due, request.stage, decision.finished_at, decision.ttl,
                       decision.ttl_source, decision.rules, decision.dry_run, scheduled_at=int(now),
                       notify=request.notify)

    def _report(self, request: _Request, planned: Planned) -> Outcome:
        reason = planned.reason or (None if planned.change in (Change.SCHEDULED, Change.MOVED) else request.reason)
        outcome = Outcome(planned.change, request.ref, request.decision, planned.due, planned.previous_due,
                          request.stage, reason)
        if planned.change in (Change.SCHEDULED, Change.MOVED, Change.CANCELLED, Change.HELD):
            reason = "burst" if planned.change is Change.HELD else outcome.reason
            self.audit.observed(planned.change.value, request.ref, logging.WARNING if planned.change is Change.HELD
                                else logging.INFO, logger=log, by=request.by, due=planned.due,
                                stage=request.stage if request.stage != JOB_STAGE else None,
                                previousDue=planned.previous_due, reason=reason, **_details(request.decision))
        elif request.decision is not None and request.decision.verdict in _WARN:
            log.warning("%s will not be deleted: %s", request.ref, request.decision.reason,
                        extra={"event": "skipped", "object": request.ref.as_dict(), "reason": request.reason,
                               "detail": request.decision.reason})
        return outcome


# Outcomes after which the same decision again changes nothing (a worker at work, a hold by
# the guard, and errors are not remembered: the next event goes to Redis).
_SETTLED = (Change.SCHEDULED, Change.MOVED, Change.UNCHANGED, Change.CANCELLED, Change.IGNORED, Change.KEPT)


def _memo(request: _Request) -> tuple:
    """What makes two reconciles of one member the same: the decision as the script sees it."""
    return request.ref, request.reason, request.decision, request.notify  # all frozen: compared field by field


def _as_repeated(outcome: Outcome) -> Outcome:
    """The outcome the same decision has the next time: what was written is now in place."""
    if outcome.change in (Change.SCHEDULED, Change.MOVED):
        return Outcome(Change.UNCHANGED, outcome.ref, outcome.decision, outcome.due, None, outcome.stage)
    if outcome.change is Change.CANCELLED:
        return Outcome(Change.IGNORED, outcome.ref, outcome.decision, None, None, outcome.stage, outcome.reason)
    return outcome


def _details(decision: Decision | None) -> dict[str, Any]:
    """What every audit entry says about the decision behind it."""
    if decision is None:
        return {}
    if decision.verdict is not Verdict.EXPIRES:
        return {"detail": decision.reason, "ttlSource": decision.ttl_source}
    return {"finishedAt": decision.finished_at, "ttl": decision.ttl, "ttlSource": decision.ttl_source,
            "rules": list(decision.rules), "dryRun": decision.dry_run}
