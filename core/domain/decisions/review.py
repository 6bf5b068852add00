"""The rules of the first-run review and of the guard's held set that decide what an operator's
confirmation covers (issue 26 §2), and what a resync holds and releases (issue 29 §1). Pure: names
and sets in, a decision out; the install record (jobttl.core.services.install) and the resync
(jobttl.core.services.resync) apply them.

- A kind is named as the API server serves it, ``apiVersion/Kind`` (`kind_key`).
- A confirmation ends the review only for the kinds that resync listed completely; a kind it could
  not list (a 404 while its CRD is reinstalled, a 403, a 500) stays under review
  (`still_under_review`), and what was overdue at install of it stays held until a complete
  listing and a confirmation that covers it.
- The held set's id, and what a confirmation releases, cover only deletions of objects the API
  server returned (`listed_by_api_server`): one a resync listed, or a worker re-read. The sink
  holds what a burst of events names without reading it; such an entry waits for the next resync,
  which lists it (and holds it as its own) or drops it (`dropped_from_held`): forged events for
  objects that do not exist change neither the id nor what is confirmed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

# HeldDeletion.by of a hold made from an event alone (the sink's burst guard): nothing was read.
HELD_FROM_EVENTS = "event"


def kind_key(api_version: str, kind: str) -> str:
    """A kind as the review and `jobttl status` name it."""
    return f"{api_version}/{kind}"


def listed_by_api_server(held_by: str) -> bool:
    """Whether a held deletion is of an object the API server returned: held by a resync's listing or a
    worker's re-read, not by the sink from an event's word alone."""
    return held_by != HELD_FROM_EVENTS


def still_under_review(before: frozenset[str] | None, enabled: Iterable[str], listed: Iterable[str]) -> frozenset[str]:
    """The kinds a confirmation leaves under review: of those under review `before` (None: the review
    has not ended for any kind, so every enabled one), each this resync did not list completely."""
    open_ = frozenset(enabled) if before is None else before
    return open_ - frozenset(listed)


@dataclass(frozen=True)
class Held:
    """What the rule needs of a held deletion."""

    member: str
    uid: str
    kind: str  # kind_key
    by: str


def dropped_from_held(held: Iterable[Held], seen: set[str], listed: set[str]) -> set[str]:
    """The held deletions a resync drops: their object was not in the complete listing of their kind
    (gone, re-created, or never there). A kind not listed completely says nothing of its objects."""
    return {h.member for h in held if h.kind in listed and h.uid not in seen}


# --- What a resync holds, releases, and whether the review ends ---------------------------------
#
# The resync (jobttl.core.services.resync) applies the rule in the order its reads and writes must happen:
#   1. `plan_holds`: what it holds, and why;                      -> it writes the held set
#   2. `confirmation_may_end_review`, then, reading the schedule and the held set,
#      `nothing_left_to_review`: whether the confirmation ends the review;  -> it writes the record
#   3. `plan_release`, with the record as now written: what it releases;  -> it books them
#   4. `review_may_end_quietly`, then, reading again, `nothing_was_due_at_install`.

# HeldDeletion.by of a hold for the first-run review: the value jobttl.core.store.guard.FIRST_RUN
# names it by in the held set (tests/core/test_release_rule.py pins the two equal).
HELD_FOR_REVIEW = "first-run"

# Why a resync holds (HoldPlan.reason).
THRESHOLDS = "thresholds"  # too many newly due for the guard: all of them are held
FOR_REVIEW = "first-run"  # only what the first-run review holds


class ReviewRecord(Protocol):
    """What the rule reads of the install record (jobttl.core.services.install.InstallRecord)."""

    installed_at: int
    reviewed_at: int | None
    kinds_under_review: frozenset[str]

    @property
    def reviewing(self) -> bool: ...

    def holds(self, due: int, kind: str | None = None) -> bool: ...


class Limits(Protocol):
    """The guard's thresholds (jobttl.core.store.guard.Guard)."""

    def exceeded(self, due: int, seen: int) -> bool: ...


@dataclass(frozen=True)
class Due:
    """A deletion a resync found due now (newly, or booked and due at install): when, and its kind."""

    due: int
    kind: str  # kind_key


@dataclass(frozen=True)
class HoldPlan:
    review: frozenset[str]  # of the due: those the review holds (due at install, their kind under review)
    first_run: frozenset[str]  # of `review`, those not confirmed: held whatever the thresholds
    hold: frozenset[str]  # what the resync holds now
    reason: str | None  # THRESHOLDS, FOR_REVIEW, or None: nothing held


@dataclass(frozen=True)
class Bookings:
    """What the schedule holds due by the install time, as read for the rule."""

    count: int  # bookings due by then (dry-run records apart)
    members: frozenset[str] = frozenset()  # the index's members due by then (read when `count`)
    # Of `members` outside the confirmation, each one's kind (kind_key; None: its record names none),
    # read only once the review has ended for some kinds (None: not read).
    kinds: Mapping[str, str | None] | None = None
    dry_run: int = 0  # dry-run records (would-deletes) due by then


def plan_holds(
    due: Mapping[str, Due], record: ReviewRecord | None, confirmed: AbstractSet[str], guard: Limits, seen: int
) -> HoldPlan:
    """What a resync holds of what it found due (members of `due`).

    What the review holds (due at install, its kind not reviewed) is held whatever the thresholds, and
    never released while the review is open; the rest goes through the guard as a set, and when it is
    too many, everything newly due is held with it. What the operator confirmed (`confirmed`) is not
    held again.
    """
    review = frozenset(m for m, d in due.items() if record is not None and record.holds(d.due, d.kind))
    fresh = frozenset(due) - frozenset(confirmed)
    first_run = fresh & review
    others = fresh - review
    if others and guard.exceeded(len(others), seen):
        # The guard judges the set: past its limits nothing newly due goes, of the review's or not.
        return HoldPlan(review, first_run, fresh, THRESHOLDS)
    if first_run:
        return HoldPlan(review, first_run, first_run, FOR_REVIEW)
    return HoldPlan(review, first_run, frozenset(), None)


def confirmation_may_end_review(
    record: ReviewRecord | None, confirming: bool, plan: HoldPlan, record_readable: bool
) -> bool:
    """Whether an operator's confirmation may end the review, if `nothing_left_to_review` agrees: only
    while one is open, when this resync holds nothing new for it, and with the install record in reach."""
    return record is not None and record.reviewing and confirming and not plan.first_run and record_readable


def nothing_left_to_review(
    record: ReviewRecord, bookings: Bookings, held: Iterable[Held], confirmed: AbstractSet[str]
) -> bool:
    """Whether all that was due at install is in `confirmed`: no booking is due by the install time (one
    no worker has held yet; dry-run records delete nothing and do not count) that the operator has not
    seen, and nothing held for the review is outside `confirmed`. `bookings` must be read before `held`:
    a worker's hold writes the held set before it takes the booking out of the schedule."""
    if bookings.count:
        # Each a booking due at install: fine only if the operator has seen it (held, and confirmed;
        # what the review holds is never a dry-run record), or its kind's review has ended (what an
        # earlier confirmation released, of the kinds it covered).
        unseen = bookings.members - frozenset(confirmed)
        if record.reviewed_at is not None and unseen:
            # Unclear means unseen: a member whose kind was not read, or whose record is gone since the
            # index was read, keeps the review open (the next resync reads it again).
            kinds = bookings.kinds or {}
            unseen = frozenset(m for m in unseen if kinds.get(m) is None or kinds[m] in record.kinds_under_review)
        if unseen and bookings.count > len(bookings.members & frozenset(confirmed)):
            return False
    return all(
        h.member in confirmed for h in held if h.by == HELD_FOR_REVIEW and record.holds(record.installed_at, h.kind)
    )


@dataclass(frozen=True)
class ReleasePlan:
    release: frozenset[str]  # due now, and queued for (paced) deletion
    settled: frozenset[str]  # held before, listed now without being due: out of the held set


def plan_release(
    due: Mapping[str, Due],
    plan: HoldPlan,
    record: ReviewRecord | None,
    held_before: Iterable[Held],
    seen: AbstractSet[str],
) -> ReleasePlan:
    """What a resync releases, with the install record as it stands after any confirmation ended the
    review (`record`): all that is due and not held, but what the review still holds while it is open."""
    reviewing = record is not None and record.reviewing
    # Safety: what was due at install of a kind still under review is never released, confirmed or not.
    still = {m for m in plan.review if record is not None and record.holds(due[m].due, due[m].kind)}
    release = frozenset(m for m in due if m not in plan.hold and not (reviewing and m in still))
    settled = frozenset(h.member for h in held_before if h.uid in seen and h.member not in due)
    return ReleasePlan(release, settled)


def review_may_end_quietly(
    record: ReviewRecord | None, held_any: bool, record_readable: bool, listed: AbstractSet[str]
) -> bool:
    """Whether a resync may end the review by itself, if `nothing_was_due_at_install` agrees: one is open,
    this resync held nothing, the install record is in reach, and it listed some kind completely (the
    review ends for those only)."""
    return record is not None and record.reviewing and not held_any and record_readable and bool(listed)


def nothing_was_due_at_install(record: ReviewRecord, bookings: Bookings, held: Iterable[Held]) -> bool:
    """Nothing due at install waits for a review: `nothing_left_to_review` with nothing confirmed, and no
    would-delete dry run recorded due by then. Such a job deletes nothing now, but comes back due at once
    when dry run is turned off: the review stays open for it, and it is held then."""
    return bookings.dry_run == 0 and nothing_left_to_review(record, bookings, held, frozenset())
