"""What a resync holds, releases, and when the first-run review ends (jobttl.core.domain.decisions.review), table by
table (issue 29 §1). Each row is named after the behaviour it pins; the resync (jobttl.core.services.resync)
applies the rule with its reads and writes, and tests/worker/test_first_run_review.py,
tests/e2e/test_first_run.py, test_review_holds.py and test_resync.py run it whole."""

from __future__ import annotations

import pytest

from jobttl.core.domain.decisions import review
from jobttl.core.domain.decisions.review import Bookings, Due, Held
from jobttl.core.services.install import InstallRecord
from jobttl.core.store.guard import FIRST_RUN, Guard

TF, JOB = "kubeflow.org/v1/TFJob", "batch/v1/Job"
INSTALLED = 1_900_000_000
OVERDUE = INSTALLED - 86400 * 30  # finished a month before install
LATER = INSTALLED + 3600  # due after install: a job finishing from now on
OPEN = InstallRecord(INSTALLED)  # a first install, not reviewed
REVIEWED = OPEN.reviewed("operator", INSTALLED + 60)
JOBS_LEFT = OPEN.reviewed("operator", INSTALLED + 60, frozenset({JOB}))  # the confirmation could not list Jobs
LOOSE = Guard(max_deletions=100, max_share=1.0)
BURST = Guard(max_deletions=2, max_share=1.0)
SHARE = Guard(max_deletions=100, max_share=0.5)
NONE = frozenset()


def due(**members):
    return {m: Due(when, kind) for m, (when, kind) in members.items()}


def test_the_review_names_its_holds_as_the_held_set_does():
    assert review.HELD_FOR_REVIEW == FIRST_RUN


# --- what a resync holds ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "found, record, confirmed, guard, seen, hold, first_run, reason",
    [
        pytest.param(
            due(a=(OVERDUE, TF), b=(OVERDUE, JOB)),
            OPEN,
            NONE,
            LOOSE,
            2,
            {"a", "b"},
            {"a", "b"},
            review.FOR_REVIEW,
            id="a first install holds everything overdue",
        ),
        pytest.param(
            due(**{m: (OVERDUE, TF) for m in "abcdefgh"}),
            OPEN,
            NONE,
            BURST,
            8,
            set("abcdefgh"),
            set("abcdefgh"),
            review.FOR_REVIEW,
            id="the review holds whatever the thresholds",
        ),
        pytest.param(
            due(a=(INSTALLED, TF)),
            OPEN,
            NONE,
            LOOSE,
            1,
            {"a"},
            {"a"},
            review.FOR_REVIEW,
            id="due at the install second is overdue at install",
        ),
        pytest.param(
            due(a=(LATER, TF)),
            OPEN,
            NONE,
            LOOSE,
            1,
            set(),
            set(),
            None,
            id="what comes due after install is not the review's",
        ),
        pytest.param(
            due(a=(OVERDUE, TF), b=(LATER, TF)),
            OPEN,
            NONE,
            LOOSE,
            2,
            {"a"},
            {"a"},
            review.FOR_REVIEW,
            id="only what was overdue at install is held for the review",
        ),
        pytest.param(
            due(a=(OVERDUE, TF), b=(LATER, TF), c=(LATER, TF), d=(LATER, TF)),
            OPEN,
            NONE,
            BURST,
            4,
            {"a", "b", "c", "d"},
            {"a"},
            review.THRESHOLDS,
            id="the guard's burst limit holds all that is newly due, the review's with it",
        ),
        pytest.param(
            due(b=(LATER, TF), c=(LATER, TF)),
            REVIEWED,
            NONE,
            BURST,
            10,
            set(),
            set(),
            None,
            id="at the guard's burst limit nothing is held",
        ),
        pytest.param(
            due(b=(LATER, TF), c=(LATER, TF)),
            REVIEWED,
            NONE,
            SHARE,
            3,
            {"b", "c"},
            set(),
            review.THRESHOLDS,
            id="the guard's share limit holds all that is newly due",
        ),
        pytest.param(
            due(a=(OVERDUE, TF)),
            REVIEWED,
            NONE,
            LOOSE,
            1,
            set(),
            set(),
            None,
            id="once reviewed, what was overdue at install goes through the guard alone",
        ),
        pytest.param(
            due(a=(OVERDUE, TF), b=(OVERDUE, TF), c=(OVERDUE, TF)),
            REVIEWED,
            NONE,
            BURST,
            3,
            {"a", "b", "c"},
            set(),
            review.THRESHOLDS,
            id="once reviewed, too many at once are held by the thresholds",
        ),
        pytest.param(
            due(a=(OVERDUE, TF)),
            OPEN,
            {"a"},
            LOOSE,
            1,
            set(),
            set(),
            None,
            id="what the operator confirmed is not held again",
        ),
        pytest.param(
            due(a=(LATER, TF), b=(LATER, TF), c=(LATER, TF)),
            REVIEWED,
            {"a", "b", "c"},
            BURST,
            3,
            set(),
            set(),
            None,
            id="what the operator confirmed does not count against the guard",
        ),
        pytest.param(
            due(a=(OVERDUE, TF), b=(OVERDUE, JOB)),
            OPEN,
            {"a"},
            LOOSE,
            2,
            {"b"},
            {"b"},
            review.FOR_REVIEW,
            id="found since the operator looked: held, the confirmed one not",
        ),
        pytest.param(
            due(a=(OVERDUE, TF), b=(OVERDUE, JOB)),
            JOBS_LEFT,
            NONE,
            LOOSE,
            2,
            {"b"},
            {"b"},
            review.FOR_REVIEW,
            id="a kind the confirmation did not cover stays held for the review",
        ),
        pytest.param(
            due(a=(OVERDUE, TF)),
            None,
            NONE,
            LOOSE,
            1,
            set(),
            set(),
            None,
            id="with the review off nothing is the review's",
        ),
    ],
)
def test_what_a_resync_holds(found, record, confirmed, guard, seen, hold, first_run, reason):
    plan = review.plan_holds(found, record, confirmed, guard, seen)
    assert (plan.hold, plan.first_run, plan.reason) == (hold, first_run, reason)


# --- whether a confirmation ends the review --------------------------------------------------------
HELD_A = Held("a", "a", TF, FIRST_RUN)


@pytest.mark.parametrize(
    "record, confirming, first_run, readable, may_end",
    [
        pytest.param(OPEN, True, NONE, True, True, id="a confirmation may end an open review"),
        pytest.param(JOBS_LEFT, True, NONE, True, True, id="a confirmation may end what a partial one left open"),
        pytest.param(REVIEWED, True, NONE, True, False, id="an ended review is not ended again"),
        pytest.param(None, True, NONE, True, False, id="with the review off there is none to end"),
        pytest.param(OPEN, False, NONE, True, False, id="only a confirmation ends it"),
        pytest.param(OPEN, True, {"b"}, True, False, id="something newly held for the review keeps it open"),
        pytest.param(OPEN, True, NONE, False, False, id="without the install record the review stays open"),
    ],
)
def test_when_a_confirmation_may_end_the_review(record, confirming, first_run, readable, may_end):
    plan = review.HoldPlan(frozenset(first_run), frozenset(first_run), frozenset(first_run), None)
    assert review.confirmation_may_end_review(record, confirming, plan, readable) is may_end


@pytest.mark.parametrize(
    "record, bookings, held, confirmed, nothing_left",
    [
        pytest.param(OPEN, Bookings(0), [], NONE, True, id="nothing booked or held for the review: nothing left"),
        pytest.param(
            OPEN,
            Bookings(1, frozenset({"m"})),
            [],
            NONE,
            False,
            id="a booking due at install no worker has held yet keeps the review open",
        ),
        pytest.param(
            OPEN, Bookings(1, frozenset({"m"})), [], {"m"}, True, id="a booking the operator confirmed is seen"
        ),
        pytest.param(
            OPEN, Bookings(0), [HELD_A], NONE, False, id="held for the review and not confirmed keeps it open"
        ),
        pytest.param(OPEN, Bookings(0), [HELD_A], {"a"}, True, id="held for the review and confirmed: nothing left"),
        pytest.param(
            OPEN,
            Bookings(0),
            [Held("a", "a", TF, "resync")],
            NONE,
            True,
            id="held by the thresholds is no business of the review",
        ),
        pytest.param(OPEN, Bookings(0, dry_run=3), [], NONE, True, id="a dry-run record is no booking"),
        pytest.param(
            JOBS_LEFT,
            Bookings(1, frozenset({"m"}), {"m": TF}),
            [],
            NONE,
            True,
            id="a booking of a kind the confirmation covered is not the review's",
        ),
        pytest.param(
            JOBS_LEFT,
            Bookings(1, frozenset({"m"}), {"m": JOB}),
            [],
            NONE,
            False,
            id="a booking of a kind still under review keeps it open",
        ),
        pytest.param(
            JOBS_LEFT,
            Bookings(1, frozenset({"m"}), {"m": None}),
            [],
            NONE,
            False,
            id="a booking whose record names no kind keeps it open",
        ),
        pytest.param(
            JOBS_LEFT,
            Bookings(1, frozenset({"m"}), {}),
            [],
            NONE,
            False,
            id="a booking whose record was not found keeps it open",
        ),
        pytest.param(
            JOBS_LEFT,
            Bookings(1, frozenset({"m"}), None),
            [],
            NONE,
            False,
            id="a booking whose kind was not read keeps it open",
        ),
        pytest.param(
            JOBS_LEFT,
            Bookings(0),
            [HELD_A],
            NONE,
            True,
            id="held for the review of a kind since covered does not keep it open",
        ),
        pytest.param(
            JOBS_LEFT,
            Bookings(0),
            [Held("j", "j", JOB, FIRST_RUN)],
            NONE,
            False,
            id="held for the review of a kind still under review keeps it open",
        ),
    ],
)
def test_whether_anything_due_at_install_is_left_unseen(record, bookings, held, confirmed, nothing_left):
    assert review.nothing_left_to_review(record, bookings, held, confirmed) is nothing_left


# --- what a resync releases ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "found, before, after, confirmed, guard, held_before, seen, release, settled",
    [
        pytest.param(
            due(a=(LATER, TF)),
            OPEN,
            OPEN,
            NONE,
            LOOSE,
            [],
            {"a"},
            {"a"},
            set(),
            id="what comes due after install is released while the review is open",
        ),
        pytest.param(
            due(a=(OVERDUE, TF), b=(LATER, TF)),
            OPEN,
            OPEN,
            NONE,
            LOOSE,
            [],
            {"a", "b"},
            {"b"},
            set(),
            id="what the review holds is not released",
        ),
        pytest.param(
            due(a=(OVERDUE, TF)),
            OPEN,
            OPEN,
            {"a"},
            LOOSE,
            [],
            {"a"},
            set(),
            set(),
            id="confirmed, while the review stays open: still not released",
        ),
        pytest.param(
            due(a=(OVERDUE, TF)),
            OPEN,
            OPEN.reviewed("operator", INSTALLED + 60),
            {"a"},
            LOOSE,
            [],
            {"a"},
            {"a"},
            set(),
            id="a confirmation that ended the review releases what was confirmed",
        ),
        pytest.param(
            due(a=(OVERDUE, TF), j=(OVERDUE, JOB)),
            OPEN,
            JOBS_LEFT,
            {"a", "j"},
            LOOSE,
            [],
            {"a", "j"},
            {"a"},
            set(),
            id="a confirmation covers only the kinds listed completely",
        ),
        pytest.param(
            due(b=(LATER, TF), c=(LATER, TF), d=(LATER, TF)),
            REVIEWED,
            REVIEWED,
            NONE,
            BURST,
            [],
            {"b", "c", "d"},
            set(),
            set(),
            id="what the guard holds is not released",
        ),
        pytest.param(
            due(a=(OVERDUE, TF)),
            REVIEWED,
            REVIEWED,
            NONE,
            LOOSE,
            [],
            {"a"},
            {"a"},
            set(),
            id="once reviewed, overdue within the guard's limits is released",
        ),
        pytest.param(
            due(a=(OVERDUE, TF)),
            None,
            None,
            NONE,
            LOOSE,
            [],
            {"a"},
            {"a"},
            set(),
            id="with the review off, overdue within the guard's limits is released",
        ),
        pytest.param(
            {},
            OPEN,
            OPEN,
            NONE,
            LOOSE,
            [Held("pods:u", "u", TF, "resync")],
            {"u"},
            set(),
            {"pods:u"},
            id="held before and listed now without being due leaves the held set",
        ),
        pytest.param(
            {},
            OPEN,
            OPEN,
            NONE,
            LOOSE,
            [Held("u", "u", TF, "resync")],
            set(),
            set(),
            set(),
            id="held before and not listed is for the drop rule, not settled",
        ),
        pytest.param(
            due(u=(LATER, TF)),
            OPEN,
            OPEN,
            NONE,
            LOOSE,
            [Held("u", "u", TF, "resync")],
            {"u"},
            {"u"},
            set(),
            id="held before and due now is released, not settled",
        ),
    ],
)
def test_what_a_resync_releases(found, before, after, confirmed, guard, held_before, seen, release, settled):
    plan = review.plan_holds(found, before, confirmed, guard, len(found))
    released = review.plan_release(found, plan, after, held_before, seen)
    assert (released.release, released.settled) == (release, settled)


@pytest.mark.parametrize(
    "held, seen, listed, dropped",
    [
        pytest.param(
            [Held("u", "u", TF, FIRST_RUN)], set(), {TF}, {"u"}, id="held entries whose object is gone are dropped"
        ),
        pytest.param(
            [Held("u", "u", TF, FIRST_RUN)], set(), {JOB}, set(), id="held entries of a kind not listed completely stay"
        ),
    ],
)
def test_held_entries_whose_object_is_gone_are_dropped(held, seen, listed, dropped):
    assert review.dropped_from_held(held, seen, listed) == dropped


# --- whether a resync ends the review by itself ----------------------------------------------------
@pytest.mark.parametrize(
    "record, held_any, readable, listed, bookings, held, ends",
    [
        pytest.param(
            OPEN,
            False,
            True,
            {TF},
            Bookings(0),
            [],
            True,
            id="nothing left to review ends it at the first complete resync",
        ),
        pytest.param(
            OPEN,
            False,
            True,
            {TF},
            Bookings(0, dry_run=1),
            [],
            False,
            id="a dry-run install keeps the review open while dry run recorded a would-delete due at install",
        ),
        pytest.param(
            OPEN,
            False,
            True,
            {TF},
            Bookings(1, frozenset({"m"})),
            [],
            False,
            id="an unheld booking due at install keeps it open",
        ),
        pytest.param(
            OPEN, False, True, {TF}, Bookings(0), [HELD_A], False, id="something held for the review keeps it open"
        ),
        pytest.param(OPEN, True, True, {TF}, Bookings(0), [], False, id="a resync that held something leaves it open"),
        pytest.param(OPEN, False, False, {TF}, Bookings(0), [], False, id="without the install record it stays open"),
        pytest.param(
            OPEN,
            False,
            True,
            set(),
            Bookings(0),
            [],
            False,
            id="a resync that listed no kind completely leaves it open",
        ),
        pytest.param(None, False, True, {TF}, Bookings(0), [], False, id="with the review off there is none to end"),
        pytest.param(REVIEWED, False, True, {TF}, Bookings(0), [], False, id="an ended review is not ended again"),
    ],
)
def test_when_a_resync_ends_the_review_by_itself(record, held_any, readable, listed, bookings, held, ends):
    assert (
        review.review_may_end_quietly(record, held_any, readable, listed)
        and review.nothing_was_due_at_install(record, bookings, held)
    ) is ends
