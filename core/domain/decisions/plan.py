"""What a reconcile asks of the schedule: one `Intent` per member, and what became of it. Pure.

`jobttl.core.services.reconcile` turns decisions into intents (the job's deletion and its pods stage,
the jobs its history limit pushed out); `jobttl.core.store.protocol` applies them. An intent says what
should be true of one member, not how to get there: whether that is a booking, a move, a
cancellation, a hold or nothing depends on what is pending, which only Redis knows at the
moment it is compared (the store's reconcile script).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from jobttl.core.domain.decisions.decision import Decision, Verdict
from jobttl.core.domain.wire.identity import JobRef

JOB_STAGE = "job"
PODS_STAGE = "pods"

GUARDED = "guarded"  # newly due deletions count towards the per-minute burst limit
COLLECT = "collect"  # newly due deletions are returned, not written (a resync judges them together)
RELEASE = "release"  # the guard has passed them (or an operator confirmed them)

# Reasons that say the object is going away: from anyone but the deletion's own RQ job (the
# worker), they may be the echo of jobttl's own deletion, and are not news (see reconcile.lua).
_GOING_AWAY = (Verdict.BEING_DELETED.value, "deleted")


class Change(enum.Enum):
    SCHEDULED = "scheduled"  # nothing was pending
    MOVED = "moved"  # something was pending, due at another time
    UNCHANGED = "unchanged"  # the same deletion is already pending
    RUNNING = "running"  # a worker is deleting it right now and decides for itself
    CANCELLED = "cancelled"  # a pending deletion no longer applies
    IGNORED = "ignored"  # nothing is, or should be, pending
    KEPT = "kept"  # an operator said keep
    HELD = "held"  # newly due, but held by the blast-radius guard
    DUE_NOW = "due-now"  # newly due: reported to the caller (a resync), nothing written
    SCHEDULE = "schedule"  # the reconcile script's answer: write the RQ job and commit it


def member_for(uid: str, stage: str = JOB_STAGE) -> str:
    return uid if stage == JOB_STAGE else f"{stage}:{uid}"


def split_member(member: str) -> tuple[str, str]:
    """(uid, stage) of an index member."""
    stage, _, uid = member.rpartition(":")
    return uid, stage or JOB_STAGE


@dataclass(frozen=True)
class Intent:
    """What should be true of one member: its decision (None: the object is gone), and why."""

    ref: JobRef
    decision: Decision | None
    reason: str  # the verdict, or why the object no longer counts ("gone", "recreated", ...)
    by: str  # event, resync, worker, operator
    mode: str  # how news faces the guard: GUARDED, COLLECT or RELEASE
    stage: str = JOB_STAGE
    notify: bool = False  # a DeletionScheduled Event when it is scheduled or moved

    @property
    def member(self) -> str:
        return member_for(self.ref.uid, self.stage)

    @property
    def expiring(self) -> bool:
        return self.decision is not None and self.decision.verdict is Verdict.EXPIRES

    @property
    def echo(self) -> bool:
        return self.reason in _GOING_AWAY and self.by != "worker"


@dataclass(frozen=True)
class Applied:
    """What the store did for one intent."""

    change: Change
    member: str
    due: int | None = None  # the due time now pending
    previous_due: int | None = None  # what was pending before, if anything
    previous_state: str | None = None  # the RQ job status of what was pending before
    now: float | None = None  # Redis's clock when the reconcile script ran
    reason: str | None = None  # why nothing is pending, when the store says so
