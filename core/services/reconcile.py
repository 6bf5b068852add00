"""The one reconcile path: an object (or a vanished identity) in; the schedule made to match.

The sink (for each event), the resync (for each listed page) and the worker (when its fresh
read says a deletion no longer applies, or applies later) all come here, so a decision is
applied, and recorded, the same way wherever it was made:

1. `decide()` says what should happen to the object (pure, no I/O), for the job and for its
   pods stage, with its history limit (keepLast) applied;
2. each becomes an `Intent` (jobttl.core.domain.decisions.plan: pure data);
3. the store (jobttl.core.store.protocol) makes the schedule match them: one Lua compare per member,
   atomic, writes the index, the audit entry and the job's history card (one round trip: all a
   duplicate event or a running job costs); if something is to be booked, RQ's own code
   enqueues the new RQ job and retires the old one, in one MULTI.

Every change yields exactly one audit entry with the same fields, whoever asked (``by``:
event, resync, worker, operator): the decision's TTL, where it came from, the finish time,
the rules that matched, dry-run, and why. A decision that changes nothing is kept once on
the job's history card (so "why is my job still here?" has an answer) and not appended to
the trail. Newly due deletions go through the blast-radius guard: the resync collects them
to judge as a set; events are held once more than the guard's limit come due in a minute.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jobttl.core.store import scripts
from jobttl.core.domain.wire import shapes
from jobttl.core.domain.kinds.cel import CelBusy
from jobttl.core.store.audit import Audit, decision_fields
from jobttl.core.domain.decisions.decision import Decision, Verdict, decide
from jobttl.core.domain.decisions.keeplast import limit_decision, membership
from jobttl.core.store.keeplast_index import KeepLastIndex
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.domain.kinds.registry import shown_kind
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.domain.decisions.plan import COLLECT, GUARDED, JOB_STAGE, PODS_STAGE, RELEASE, Applied, Change, Intent  # noqa: F401
from jobttl.core.domain.rules.policy import Policy
from jobttl.core.services.recent import Recent
from jobttl.core.store.schedule import Schedule
from jobttl.core.domain.decisions.stages import pod_stage
from jobttl.core.store.protocol import Store
from jobttl.core.store.capacity import Gate
from jobttl.core.store.policy_errors import PolicyErrors, declaration_of

log = logging.getLogger("jobttl.reconcile")

# Decisions that mean "this object will not be deleted", and should say so loudly.
_WARN = (Verdict.INVALID_TTL, Verdict.UNREADABLE)


class UnreadableObject(ValueError):
    """An object whose fields its declaration cannot read (Verdict.UNREADABLE), refused where the
    caller asked (the sink: a 422 naming the field, and nothing written)."""


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
    unreadable: bool = False  # decide() could not read a field (Verdict.UNREADABLE): the object's fault

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}: {self.reason}"


class Reconciler:
    def __init__(
        self,
        schedule: Schedule,
        audit: Audit,
        policy: Policy,
        metrics: Metrics | None = None,
        burst_limit: int | None = None,
        recent: Recent | None = None,
        gate: Gate | None = None,
    ):
        self.schedule = schedule
        self.audit = audit
        self.policy = policy
        self.metrics = metrics
        self.burst_limit = burst_limit
        self.recent = recent  # the sink's memory of decisions just applied (jobttl.core.services.recent)
        self.store = Store(schedule, audit, burst_limit, gate)
        self.keeplast = KeepLastIndex(schedule.redis)
        self.policy_errors = PolicyErrors(schedule.redis, audit)
        if metrics is not None:
            # Exported at 0 from the start, so that the alert's increase() sees the first error.
            for kind in policy.kinds:
                metrics.policy_errors.labels(declaration_of(kind))

    @classmethod
    def from_settings(
        cls,
        schedule: Schedule,
        audit: Audit,
        settings: Any,
        metrics: Metrics | None = None,
        recent: Recent | None = None,
    ) -> Reconciler:
        # Bookings stop while Redis is full (jobttl.core.store.capacity): the rest is the worker's.
        return cls(
            schedule,
            audit,
            settings.policy,
            metrics,
            burst_limit=settings.resync_max_deletions,
            recent=recent,
            gate=Gate(schedule.redis),
        )

    # --- the entry points ---------------------------------------------------------------------
    def reconcile(
        self, obj: dict[str, Any], kind: JobKind, by: str, mode: str = GUARDED, refuse_unreadable: bool = False
    ) -> Outcome:
        """Make the schedule match what `decide()` says of this object now (its identity is valid).
        With `refuse_unreadable`, an object decide() cannot read raises UnreadableObject, and nothing
        is written (the sink refuses the event); without, it is kept like any object not expiring."""
        outcomes, rejected = self.reconcile_many([(obj, kind)], by, mode, refuse_unreadable=refuse_unreadable)
        if rejected:
            raise (UnreadableObject if rejected[0].unreadable else ValueError)(str(rejected[0]))
        return outcomes[0]

    def forget(self, ref: JobRef, reason: str, by: str) -> Outcome:
        """The object is gone (deleted, or re-created under another UID): nothing stays pending for it,
        neither its deletion nor its pods stage, and it leaves its history group."""
        # Its pods stage too, whatever the policy says now: one booked under an earlier policy
        # must not outlive its job (a pending entry for nothing costs a script call, no more).
        intents = [Intent(ref, None, reason, by, GUARDED), Intent(ref, None, reason, by, GUARDED, PODS_STAGE)]
        if self.recent is not None:
            self.recent.drop(*(r.member for r in intents))
        if self.policy.history_limits:
            self.keeplast.drop([ref.uid])
        return self._run(intents)[0]

    def drop_stage(self, ref: JobRef, stage: str, reason: str, by: str) -> Outcome:
        """Cancel one stage the policy no longer has (a podTTL removed since it was booked)."""
        return self._run([Intent(ref, None, reason, by, GUARDED, stage)])[0]

    def release(self, held: Iterable[tuple], by: str) -> list[Outcome]:
        """Schedule decisions the guard passed (or an operator confirmed), without the guard.

        Each item is (ref, decision) or (ref, decision, stage)."""
        intents = []
        for ref, decision, *stage in held:
            intents.append(Intent(ref, decision, decision.verdict.value, by, RELEASE, *stage))
        return self._run(intents)

    def reconcile_many(
        self,
        objects: Iterable[tuple[dict[str, Any], JobKind]],
        by: str,
        mode: str = GUARDED,
        stage: str | None = None,
        refuse_unreadable: bool = False,
    ) -> tuple[list[Outcome], list[Rejected]]:
        """Reconcile a batch (a resync's page): one round trip for the scripts, one for RQ's writes
        (and, when the policy keeps only the last N, one before them to file the jobs in their groups).

        An object that cannot be read or decided is rejected, with why; the others go on. The
        outcomes are the jobs' own first, in order, then their pods stages and the jobs pushed
        out of their groups. With `stage`, only that stage is reconciled (a worker replanning
        the stage it runs leaves the other to its own run).
        """
        decided, rejected = self._decide_each(objects, by, refuse_unreadable)
        notify = [self._notify(obj) for obj, *_ in decided]
        decisions, pushed = self._keep_last([d for d in decided], notify, by, mode)
        jobs = [
            Intent(ref, decision, decision.verdict.value, by, mode, notify=n)
            for (_, _, ref, _), decision, n in zip(decided, decisions, notify)
        ]
        pods = self._pod_stages(decided, decisions, notify, by, mode)
        if stage == PODS_STAGE:
            jobs, pushed = [], []
        elif stage == JOB_STAGE:
            pods = []
        # The pods stages go first, so that each job's history card ends on its own deletion.
        outcomes = self._remembered(pods + jobs + pushed, by, mode)
        return outcomes[len(pods) : len(pods) + len(jobs)] + outcomes[: len(pods)] + outcomes[
            len(pods) + len(jobs) :
        ], rejected

    def _decide_each(
        self, objects: Iterable[tuple[dict[str, Any], JobKind]], by: str, refuse_unreadable: bool
    ) -> tuple[list[tuple[dict[str, Any], JobKind, JobRef, Decision]], list[Rejected]]:
        """Each object's decision, or why it has none (one odd object must not stop the others)."""
        decided, rejected = [], []
        for obj, kind in objects:
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
            try:
                decided.append((obj, kind, JobRef.of(obj), decide(obj, kind, self.policy)))
            except CelBusy:
                raise  # not the object's fault: its sender retries (the sink answers 503)
            except Exception as exc:  # noqa: BLE001 - one odd object must not stop the others
                rejected.append(
                    Rejected(
                        shown_kind(kind.api_version, kind.kind),
                        meta.get("namespace"),
                        meta.get("name"),
                        shapes.describe(exc),
                    )
                )
                continue
            if refuse_unreadable and decided[-1][3].verdict is Verdict.UNREADABLE:
                rejected.append(
                    Rejected(
                        shown_kind(kind.api_version, kind.kind),
                        meta.get("namespace"),
                        meta.get("name"),
                        decided.pop()[3].reason,
                        unreadable=True,
                    )
                )
                continue
            if decided[-1][3].verdict is Verdict.INVALID_TTL and self.metrics is not None:
                self.metrics.invalid_ttls.labels(kind.kind, kind.group).inc()
            if decided[-1][3].verdict is Verdict.POLICY_ERROR:
                self._policy_error(kind, decided[-1][2], decided[-1][3], by)
        return decided, rejected

    def _remembered(self, intents: list[Intent], by: str, mode: str) -> list[Outcome]:
        """`_run`, unless the sink reconciled exactly these decisions a moment ago (jobttl.core.services.recent)."""
        if self.recent is None or by != "event" or mode != GUARDED or self.policy.history_limits:
            return self._run(intents)
        keys_ = [_memo(r) for r in intents]
        known = [self.recent.get(r.member, k) for r, k in zip(intents, keys_)]
        if intents and all(o is not None for o in known):
            return known
        outcomes = self._run(intents)
        for intent, key, outcome in zip(intents, keys_, outcomes):
            if outcome.change in _SETTLED:
                self.recent.put(intent.member, key, _as_repeated(outcome))
        return outcomes

    def _policy_error(self, kind: JobKind, ref: JobRef, decision: Decision, by: str) -> None:
        """The declaration could not read this object: counted and reported against the policy
        (jobttl.core.store.policy_errors), never as an InvalidTTL Warning on the object, which stays."""
        if self.metrics is not None:
            self.metrics.policy_errors.labels(declaration_of(kind)).inc()
        self.policy_errors.report(kind, ref, decision, by)

    # --- keeping the evidence: notices, pods stages, history limits ---------------------------
    def _notify(self, obj: dict[str, Any]) -> bool:
        """Whether a schedule change for this object posts a DeletionScheduled Event (the default)."""
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
        setting = self.policy.cleanup_effective(meta.get("namespace", ""), labels).get("scheduled_events")
        return setting is None or bool(setting.value)

    def _pod_stages(
        self, decided: list, decisions: list[Decision], notify: list[bool], by: str, mode: str
    ) -> list[Intent]:
        if not self.policy.pod_stages:
            return []
        intents = []
        for (obj, kind, ref, _), decision, n in zip(decided, decisions, notify):
            stage = pod_stage(obj, kind, self.policy, decision)
            intents.append(Intent(ref, stage.decision, stage.reason, by, mode, PODS_STAGE, notify=n))
        return intents

    def _keep_last(self, decided: list, notify: list[bool], by: str, mode: str) -> tuple[list[Decision], list[Intent]]:
        """File each job in its keepLast group (one round trip); the decisions with the limits
        applied, and reconciles for the jobs pushed out of their groups."""
        decisions = [decision for *_, decision in decided]
        if not self.policy.history_limits or not decided:
            return decisions, []
        members = [
            membership(obj, kind, self.policy, decision, n) for (obj, kind, _, decision), n in zip(decided, notify)
        ]
        with self.schedule.redis.pipeline(transaction=False) as pipe:
            for (_, _, ref, _), member in zip(decided, members):
                self.keeplast.file(member, ref.uid, pipe)
            replies = scripts.execute(pipe)
        pushed: dict[str, Intent] = {}
        own = {ref.uid: i for i, (_, _, ref, _) in enumerate(decided)}
        for i, (member, reply) in enumerate(zip(members, replies)):
            filed = KeepLastIndex.filed(reply)
            if member is not None and filed.rank is not None and filed.beyond_at is not None:
                decisions[i] = limit_decision(member, filed.rank, filed.beyond_at, decisions[i])
            for other, rank, at in filed.pushed_out:
                if other.uid in own:  # filed earlier in this batch, before the job that pushed it out
                    j = own[other.uid]
                    if members[j] is not None:
                        decisions[j] = limit_decision(members[j], rank, at, decisions[j])
                    continue
                decision = limit_decision(other, rank, at)
                pushed[other.uid] = Intent(other.ref, decision, decision.verdict.value, by, mode, notify=other.notify)
        return decisions, list(pushed.values())

    # --- the steps ------------------------------------------------------------------------------
    def _run(self, intents: list[Intent]) -> list[Outcome]:
        applied = self.store.apply(intents)
        return [self._report(intent, done) for intent, done in zip(intents, applied)]

    def _report(self, intent: Intent, applied: Applied) -> Outcome:
        reason = applied.reason or (None if applied.change in (Change.SCHEDULED, Change.MOVED) else intent.reason)
        outcome = Outcome(
            applied.change, intent.ref, intent.decision, applied.due, applied.previous_due, intent.stage, reason
        )
        if applied.change in (Change.SCHEDULED, Change.MOVED, Change.CANCELLED, Change.HELD):
            reason = "burst" if applied.change is Change.HELD else outcome.reason
            self.audit.observed(
                applied.change.value,
                intent.ref,
                logging.WARNING if applied.change is Change.HELD else logging.INFO,
                logger=log,
                by=intent.by,
                due=applied.due,
                stage=intent.stage if intent.stage != JOB_STAGE else None,
                previousDue=applied.previous_due,
                reason=reason,
                **decision_fields(intent.decision),
            )
        elif intent.decision is not None and (intent.decision.verdict in _WARN or intent.decision.warning):
            log.warning(
                "%s will not be deleted: %s",
                intent.ref,
                intent.decision.reason,
                extra={
                    "event": "skipped",
                    "object": intent.ref.as_dict(),
                    "reason": intent.reason,
                    "detail": intent.decision.reason,
                },
            )
        return outcome


# Outcomes after which the same decision again changes nothing (a worker at work, a hold by
# the guard, and errors are not remembered: the next event goes to Redis).
_SETTLED = (Change.SCHEDULED, Change.MOVED, Change.UNCHANGED, Change.CANCELLED, Change.IGNORED, Change.KEPT)


def _memo(intent: Intent) -> tuple:
    """What makes two reconciles of one member the same: the decision as the script sees it."""
    return intent.ref, intent.reason, intent.decision, intent.notify  # all frozen: compared field by field


def _as_repeated(outcome: Outcome) -> Outcome:
    """The outcome the same decision has the next time: what was written is now in place."""
    if outcome.change in (Change.SCHEDULED, Change.MOVED):
        return Outcome(Change.UNCHANGED, outcome.ref, outcome.decision, outcome.due, None, outcome.stage)
    if outcome.change is Change.CANCELLED:
        return Outcome(Change.IGNORED, outcome.ref, outcome.decision, None, None, outcome.stage, outcome.reason)
    return outcome
