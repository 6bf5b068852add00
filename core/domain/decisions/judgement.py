"""What the worker does with one due deletion, judged before anything is done: pure, no I/O.

The upstream TTL-after-finished controller's processTTL → needsCleanup → timeLeft, as functions
of what the worker has read: the booked `Target`, what Redis said (`Current`: still pending at this
due time? what did operators say? did an earlier run get as far as its DELETE?), the object as the
API server has it now (or None), the decision made from it, and the API server's time
(`ApiTime`). Each returns an `Action`, a small closed set that `jobttl.core.services.deletion` performs;
this module imports no Redis, RQ or Kubernetes client (an import-linter contract holds it to that),
so every branch is table-tested directly (tests/core/test_judging_a_due_deletion.py).

Three points of judgement, in the order a run meets them:

1. `admit`, before the object is read: is this run still the deletion's, and can it run here?
2. `judge`, on the object just read (and read again after each wait or conflict): what to do.
3. `confirm`, right before the DELETE (after an archive and a rate-limit slot, which take time):
   has the schedule moved, another run taken over, or an operator spoken since?
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Union

from jobttl.core.domain.decisions.decision import Decision, Verdict
from jobttl.core.domain.decisions.due import Override, due_at
from jobttl.core.domain.wire.identity import JobRef

# The schedule's stage names, from the pure plan module (jobttl.core.store.schedule, which talks to
# Redis and which this module may not import, re-exports the same).
from jobttl.core.domain.decisions.plan import JOB_STAGE, PODS_STAGE

STAGES = (JOB_STAGE, PODS_STAGE)

# How early (by the API server's clock) a deletion may arrive and still be waited for in place.
MAX_EARLY = 30

# Skip and Forget reasons, as the run's outcome names them (``skipped:<reason>``).
SUPERSEDED = "superseded"
ANOTHER_RUN = "another-run-is-deleting-it"
GONE = "gone"
RECREATED = "recreated"
CLOCK_SKEW = "clock-skew"


# --- what the worker knows --------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The deletion this RQ job was booked for."""

    ref: JobRef
    member: str
    due: int
    stage: str

    @property
    def recorded_stage(self) -> str | None:
        """The stage as audit entries name it: only a stage other than the job's own."""
        return self.stage if self.stage != JOB_STAGE else None


@dataclass(frozen=True)
class Current:
    """What the BEGIN script said: still pending at this due time? what did operators say? did
    an earlier run get as far as its DELETE? is another run at work?"""

    pending_due: int | None
    redis_time: tuple[int, int]
    keep: bool
    until: int | None
    intent: dict[str, Any] | None
    busy: bool

    def superseded(self, target: Target) -> bool:
        return self.pending_due != target.due

    def said(self) -> tuple[bool, int | None]:
        return self.keep, self.until


@dataclass(frozen=True)
class ApiTime:
    """The API server's time as this worker reads it (jobttl.core.domain.decisions.clock.ReferenceClock): the earliest
    it can be now, and why deletions must wait (clocks disagreeing beyond the bound), if they must."""

    earliest: float
    problem: str | None = None


# --- what it may do (the closed set) ---------------------------------------------------------------


@dataclass(frozen=True)
class _Reasoned:
    """An action the run's outcome names by its reason: ``<said>:<reason>``."""

    reason: str
    said: ClassVar[str] = "skipped"

    @property
    def outcome(self) -> str:
        return f"{self.said}:{self.reason}"


@dataclass(frozen=True)
class Skip(_Reasoned):
    """Nothing of this run's to do, and nothing written: the schedule moved it (``superseded``), or
    another run of the same deletion is at work."""


@dataclass(frozen=True)
class Refuse(_Reasoned):
    """Not now: the pending deletion stays (audited ``refused``); the worker's sweep books it again."""

    detail: str
    said: ClassVar[str] = "refused"


@dataclass(frozen=True)
class Forget(_Reasoned):
    """The object it was booked for is not there: gone, or re-created under its name (`successor`,
    which gets its own decision). The pending deletion ends."""

    successor: dict[str, Any] | None = None


@dataclass(frozen=True)
class Recover:
    """An earlier run sent its DELETE and died before recording it: record it now. `obj` is what the
    tombstone keeps, `answer` what the API server would have answered (a Status: gone; the object with
    a deletionTimestamp: still held by finalizers); a `successor` re-created since gets its own decision."""

    obj: dict[str, Any]
    answer: dict[str, Any]
    successor: dict[str, Any] | None = None


@dataclass(frozen=True)
class Replan:
    """No longer due, or due later (`because`): the one reconcile path cancels or moves this stage."""

    verdict: Verdict
    because: str


@dataclass(frozen=True)
class Wait:
    """Due at the very time booked, yet early by the API server's clock (the scheduler's clock runs
    ahead): wait this long in place, then ask Redis and judge again."""

    seconds: float


@dataclass(frozen=True)
class _Decided:
    """An action carrying the decision it acts on (each subclass is its own action: equal only to its own kind)."""

    decision: Decision


class WouldDelete(_Decided):
    """Dry run: record what would have been deleted, delete nothing."""


class HoldForReview(_Decided):
    """Already due when jobttl was installed, and not yet reviewed: into the guard's held set."""


class Delete(_Decided):
    """The job itself: archive (as the policy says), a rate-limit slot, `confirm`, then DELETE with
    UID and resourceVersion preconditions and the configured propagation."""


class DeletePods(_Decided):
    """The pods stage: archive, a rate-limit slot, `confirm`, the job read once more, then its own pods."""


@dataclass(frozen=True)
class Again:
    """Read the object again and judge afresh (an operator spoke, or it changed, since it was judged)."""

    reason: str


Action = Union[Skip, Refuse, Forget, Recover, Replan, Wait, WouldDelete, HoldForReview, Delete, DeletePods, Again]


# --- the judgement -----------------------------------------------------------------------------------


def admit(target: Target, current: Current, kind_enabled: bool, clock_problem: str | None) -> Action | None:
    """Before the read: None when the run may go on to read the object."""
    if current.busy:
        return Skip(ANOTHER_RUN)  # the same RQ job enqueued twice; one run is enough
    if current.superseded(target):
        # Moved (another RQ job has the new time) or done: nothing of ours to do here.
        return Skip(SUPERSEDED)
    if target.stage not in STAGES:
        return Refuse("stage-not-supported", f"this worker does not run {target.stage} stages")
    if not kind_enabled:
        # Not enabled here (a rolling policy change?): leave it, do not forget it.
        return Refuse("kind-not-enabled", f"{target.ref.kind} is not enabled in this worker's policy")
    if clock_problem:
        return Refuse(CLOCK_SKEW, clock_problem)
    return None


def judge(
    target: Target,
    current: Current,
    obj: dict[str, Any] | None,
    decision: Decision | None,
    now: ApiTime,
    held_for_review: bool = False,
) -> Action:
    """On the object just read (None: not found). `decision` is this stage's, made from `obj`
    whenever `to_decide` says so (None otherwise); `held_for_review`: the first-run review holds
    deletions due at `target.due` (jobttl.core.services.install)."""
    if recovering(target, current, obj):
        return _recover(target, current, obj)
    if obj is None:
        return Forget(GONE)
    if obj["metadata"].get("uid") != target.ref.uid:
        return Forget(RECREATED, successor=obj)  # the new object gets its own decision
    if decision is None:
        raise ValueError(f"judging {target.ref} needs the decision made from the object just read")
    replan = _no_longer_due(target, current, decision)
    if replan is not None:
        return replan
    if now.problem:  # measured again by the read just made
        return Refuse(CLOCK_SKEW, now.problem)
    left = target.due - now.earliest  # at the earliest the API server's time can be: never early
    if left > 0:
        if left > MAX_EARLY:
            return Refuse("early", f"{left:.0f}s before its due time by the API server's clock")
        return Wait(left)
    if decision.dry_run:
        return WouldDelete(decision)
    if held_for_review:
        # An event for an old job (or a booking made before the first worker started) must not get
        # past the review that the resync's list is held for.
        return HoldForReview(decision)
    return DeletePods(decision) if target.stage == PODS_STAGE else Delete(decision)


def confirm(target: Target, before: Current, after: Current) -> Action | None:
    """Right before the DELETE, with what Redis says now (`after`, the intent just written): None to go on."""
    if after.superseded(target):
        return Skip(SUPERSEDED)
    if after.busy:
        return Skip(ANOTHER_RUN)  # our claim expired and another run took it
    if after.said() != before.said():
        return Again("an operator spoke since it was judged")  # decide again, with what they said
    return None


def to_decide(target: Target, current: Current, obj: dict[str, Any] | None) -> bool:
    """Whether `judge` needs a decision made from `obj`: it is there, it is ours, and it is not what
    an earlier run's DELETE left."""
    return obj is not None and obj["metadata"].get("uid") == target.ref.uid and not recovering(target, current, obj)


def recovering(target: Target, current: Current, obj: dict[str, Any] | None) -> bool:
    """An earlier run of this deletion sent its DELETE (its intent is in Redis) and died before
    recording it, and the object is as that DELETE leaves it. (A pods stage's run that died is
    simply run again: its pods are listed anew.)"""
    return current.intent is not None and target.stage == JOB_STAGE and already_deleted(obj, target.ref)


def due_later(target: Target, current: Current, decision: Decision) -> bool:
    """No longer expiring, or expiring after the time booked (an operator's `until` counts): the due
    time by `jobttl.core.domain.decisions.due.due_at`, the very rule the store booked it by. An operator's keep is
    judged apart, before this (`_no_longer_due`); the history-limit check asks this without it."""
    due = due_at(decision, Override(until=current.until))
    return due.at is None or due.at > target.due


def already_deleted(obj: dict[str, Any] | None, ref: JobRef) -> bool:
    """Gone, re-created, or on its way out: what an earlier run's DELETE leaves."""
    if obj is None:
        return True
    meta = obj.get("metadata") or {}
    return meta.get("uid") != ref.uid or bool(meta.get("deletionTimestamp"))


def unchanged(latest: dict[str, Any] | None, judged: dict[str, Any]) -> bool:
    """The object as it was when it was judged: same UID and resourceVersion, not being deleted."""
    if latest is None:
        return False
    meta, before = latest.get("metadata") or {}, judged.get("metadata") or {}
    return (
        meta.get("uid") == before.get("uid")
        and meta.get("resourceVersion") == before.get("resourceVersion")
        and not meta.get("deletionTimestamp")
    )


def _no_longer_due(target: Target, current: Current, decision: Decision) -> Replan | None:
    if decision.verdict is not Verdict.EXPIRES:
        return Replan(decision.verdict, "no longer expires")
    if current.keep:
        return Replan(decision.verdict, "kept by an operator")
    if due_later(target, current, decision):
        return Replan(decision.verdict, "due later")
    return None


def _recover(target: Target, current: Current, obj: dict[str, Any] | None) -> Recover:
    ours = obj if obj is not None and obj["metadata"].get("uid") == target.ref.uid else None
    intended = (current.intent or {}).get("object") or {}
    return Recover(ours or intended, ours or {"kind": "Status"}, successor=obj if ours is None else None)
