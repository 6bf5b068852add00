"""The worker's judgement (`jobttl.core.domain.decisions.judgement`), table-tested as the upstream TTL-after-finished
controller tests needsCleanup / timeLeft / processTTL: one row per case, pure (no Redis, no API server).

Each row builds a real object (tests.fixtures), decides it with the real policy code (as the worker's
`Reading.decide` does from its re-read), and asks `admit`, `judge` or `confirm` what to do. Rows named
``upstream:`` are ttlafterfinished_controller.go's cases (TestTimeLeft, processTTL, processJob); the
others are jobttl's own branches. Every row would fail if the branch it names were removed or reordered
(a row expecting a Replan, Refuse or Hold gets Delete otherwise).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from jobttl.core.store import schedule
from jobttl.core.domain.decisions.decision import KEEP_ANNOTATION, Decision, Verdict, decide
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import BATCH_JOB, TFJOB
from jobttl.core.domain.rules.policy import parse_policy
from jobttl.core.domain.decisions.stages import pod_stage
from jobttl.core.domain.decisions.judgement import (
    ANOTHER_RUN,
    GONE,
    MAX_EARLY,
    PODS_STAGE,
    RECREATED,
    SUPERSEDED,
    Again,
    ApiTime,
    Current,
    Delete,
    DeletePods,
    Forget,
    HoldForReview,
    Recover,
    Refuse,
    Replan,
    Skip,
    Target,
    Wait,
    WouldDelete,
    admit,
    confirm,
    due_later,
    judge,
    to_decide,
    unchanged,
)
from tests.fixtures import job_object, rfc3339, with_server_fields

FINISHED = 1_700_000_000  # when the job finished (the upstream tests' `now` for "completed now")
UID = "0a6e9c1e-3b1f-4f7e-9d7a-1c2b3d4e5f60"
POLICY = parse_policy({})  # no default TTL: a job without its own TTL has none (upstream: needsCleanup false)
PODS_POLICY = parse_policy({"podTTL": "10s"})


def tfjob(state: str = "succeeded", ttl: int | None = 100, at: int = FINISHED, uid: str = UID, **meta: Any) -> dict:
    obj = with_server_fields(job_object(TFJOB, "mnist", "team-a", state=state, at=at, ttl=ttl), uid=uid)
    obj["metadata"].update(meta)
    return obj


def booked(due: int, stage: str = "job") -> Target:
    """The deletion as booked for the original TFJob (UID), whatever has become of it since."""
    ref = JobRef.of(tfjob())
    return Target(ref, ref.uid if stage == "job" else f"{stage}:{ref.uid}", due, stage)


def redis_says(
    due: int | None, keep: bool = False, until: int | None = None, intent: dict | None = None, busy: bool = False
) -> Current:
    return Current(due, (FINISHED, 0), keep, until, intent, busy)


def intent(obj: dict | None = None) -> dict:
    """What a run writes before its DELETE (jobttl.core.store.ledger): the UID and what the tombstone keeps."""
    kept = {"metadata": {"labels": {"team": "a"}}, "status": (obj or tfjob())["status"]}
    return {"uid": UID, "at": FINISHED + 100, "resourceVersion": "1", "object": kept}


@dataclass
class Row:
    """One judgement: the object as re-read (None: not found), what Redis said, the API server's time."""

    obj: dict | None
    due: int
    now: float
    current: Current | None = None
    stage: str = "job"
    policy: Any = POLICY
    kind: Any = TFJOB
    problem: str | None = None
    held_for_review: bool = False
    expected: Callable[[Decision | None, Row], Any] = field(default=lambda d, row: None)

    def target(self) -> Target:
        return booked(self.due, self.stage)

    def redis(self) -> Current:
        return self.current or redis_says(self.due)

    def decision(self) -> Decision | None:
        """This stage's decision from the object read, as `Reading.decide` makes it (without keepLast)."""
        if not to_decide(self.target(), self.redis(), self.obj):
            return None
        decision = decide(self.obj, self.kind, self.policy)
        return pod_stage(self.obj, self.kind, self.policy, decision).decision if self.stage == PODS_STAGE else decision

    def judged(self):
        return judge(
            self.target(),
            self.redis(),
            self.obj,
            self.decision(),
            ApiTime(self.now, self.problem),
            self.held_for_review,
        )


def replan(verdict: Verdict, because: str):
    return lambda decision, row: Replan(verdict, because)


def delete(decision, row):
    return Delete(decision)


DUE = FINISHED + 100  # a 100 s TTL
SKEW = "this host's clock is 2m off the API server's (bound 30s): deletions wait until the clocks agree"

JUDGE_ROWS = [
    # --- upstream: TestTimeLeft, needsCleanup, processTTL, processJob ---------------------------------------
    pytest.param(
        Row(tfjob(state="running"), DUE, DUE, expected=replan(Verdict.NOT_FINISHED, "no longer expires")),
        id="upstream: Job unfinished: not cleaned up, the reconcile cancels the booking",
    ),
    pytest.param(
        Row(tfjob(ttl=None), DUE, DUE, expected=replan(Verdict.NO_TTL, "no longer expires")),
        id="upstream: Job completed, no TTL: not cleaned up",
    ),
    pytest.param(
        Row(tfjob(state="failed", ttl=None), DUE, DUE, expected=replan(Verdict.NO_TTL, "no longer expires")),
        id="upstream: Job failed, no TTL: not cleaned up",
    ),
    pytest.param(
        Row(tfjob(ttl=0), FINISHED, FINISHED, expected=delete),
        id="upstream: Job completed now, 0s TTL: expired, deleted",
    ),
    pytest.param(
        Row(tfjob(state="failed", ttl=0), FINISHED, FINISHED, expected=delete),
        id="upstream: Job failed now, 0s TTL: expired, deleted",
    ),
    pytest.param(
        Row(tfjob(ttl=10), FINISHED + 10, FINISHED, expected=lambda d, row: Wait(10)),
        id="upstream: Job completed now, 10s TTL: 10s left, waited for in place",
    ),
    pytest.param(
        Row(tfjob(ttl=15, at=FINISHED - 10), FINISHED + 5, FINISHED, expected=lambda d, row: Wait(5)),
        id="upstream: Job completed 10s ago, 15s TTL: 5s left",
    ),
    pytest.param(
        Row(tfjob(state="failed", ttl=15, at=FINISHED - 10), FINISHED + 5, FINISHED, expected=lambda d, row: Wait(5)),
        id="upstream: Job failed 10s ago, 15s TTL: 5s left",
    ),
    pytest.param(
        Row(tfjob(), DUE, DUE + 3600, expected=delete), id="upstream: TTL expired long ago: deleted (overdue)"
    ),
    pytest.param(
        Row(
            tfjob(deletionTimestamp=rfc3339(DUE)), DUE, DUE, expected=replan(Verdict.BEING_DELETED, "no longer expires")
        ),
        id="upstream: Job being deleted (deletionTimestamp): not ours to delete",
    ),
    pytest.param(
        Row(None, DUE, DUE, expected=lambda d, row: Forget(GONE)),
        id="upstream: Job not found on the fresh read: forgotten",
    ),
    pytest.param(
        Row(
            tfjob(uid="5d1f7c2a-0000-4000-8000-000000000001"),
            DUE,
            DUE,
            expected=lambda d, row: Forget(RECREATED, successor=row.obj),
        ),
        id="upstream: re-created with a different UID: the booking forgotten, the new one decided anew",
    ),
    pytest.param(
        Row(tfjob(ttl=3600), DUE, DUE, expected=replan(Verdict.EXPIRES, "due later")),
        id="upstream: TTL modified since it was booked (the fresh read's sanity check): moved",
    ),
    pytest.param(
        Row(tfjob(at=DUE + 3600), DUE, DUE, expected=replan(Verdict.EXPIRES, "due later")),
        id="upstream: Job finished in the future of its booking (a re-run): moved",
    ),
    pytest.param(
        Row(tfjob(), DUE, DUE, problem=SKEW, expected=lambda d, row: Refuse("clock-skew", SKEW)),
        id="upstream: time skew in the cluster: deferred (refused until the clocks agree)",
    ),
    # --- jobttl: early by the API server's clock ---------------------------------------------------------
    pytest.param(
        Row(
            tfjob(),
            DUE,
            DUE - MAX_EARLY - 5,
            expected=lambda d, row: Refuse("early", "35s before its due time by the API server's clock"),
        ),
        id="early beyond MAX_EARLY by the API server's clock: refused, not waited for",
    ),
    pytest.param(
        Row(tfjob(), DUE, DUE - MAX_EARLY, expected=lambda d, row: Wait(MAX_EARLY)),
        id="early by exactly MAX_EARLY: waited for in place",
    ),
    # --- jobttl: what operators said (the override) -----------------------------------------------------
    pytest.param(
        Row(
            tfjob(),
            DUE,
            DUE,
            current=redis_says(DUE, keep=True),
            expected=replan(Verdict.EXPIRES, "kept by an operator"),
        ),
        id="kept by an operator (jobttl keep): replanned, not deleted",
    ),
    pytest.param(
        Row(tfjob(), DUE, DUE, current=redis_says(DUE, until=DUE + 600), expected=replan(Verdict.EXPIRES, "due later")),
        id="postponed by an operator (until later than the due time): moved",
    ),
    pytest.param(
        Row(tfjob(), DUE, DUE, current=redis_says(DUE, until=DUE - 600), expected=delete),
        id="an until earlier than the due time changes nothing: deleted",
    ),
    pytest.param(
        Row(tfjob(), DUE, DUE, current=redis_says(DUE, until=DUE), expected=delete),
        id="an until at the due time itself: deleted",
    ),
    pytest.param(
        Row(tfjob(annotations={KEEP_ANNOTATION: "true"}), DUE, DUE, expected=replan(Verdict.KEPT, "no longer expires")),
        id="kept by the job's owner (jobttl.io/keep annotation): cancelled",
    ),
    # --- jobttl: dry run and the first-run review -------------------------------------------------------
    pytest.param(
        Row(tfjob(), DUE, DUE, policy=parse_policy({"dryRun": True}), expected=lambda d, row: WouldDelete(d)),
        id="dry run: would-delete recorded, nothing deleted",
    ),
    pytest.param(
        Row(tfjob(), DUE, DUE, held_for_review=True, expected=lambda d, row: HoldForReview(d)),
        id="due before jobttl was installed, not yet reviewed: held for the first-run review",
    ),
    pytest.param(
        Row(
            tfjob(),
            DUE,
            DUE,
            held_for_review=True,
            policy=parse_policy({"dryRun": True}),
            expected=lambda d, row: WouldDelete(d),
        ),
        id="dry run under the first-run review: would-delete (a dry run deletes nothing to hold)",
    ),
    pytest.param(
        Row(
            tfjob(state="running"),
            DUE,
            DUE,
            held_for_review=True,
            expected=replan(Verdict.NOT_FINISHED, "no longer expires"),
        ),
        id="the first-run review holds only what is due: a running job is replanned",
    ),
    # --- jobttl: someone else's (the controller still governs, not ours) ---------------------------------
    pytest.param(
        Row(
            with_server_fields(job_object(BATCH_JOB, "pi", "team-a", ttl=100), uid=UID),
            DUE,
            DUE,
            kind=BATCH_JOB,
            expected=replan(Verdict.BUILTIN_TTL, "no longer expires"),
        ),
        id="a batch Job with its own TTL: Kubernetes' TTL controller governs it, not deleted",
    ),
    pytest.param(
        Row(
            tfjob(
                ownerReferences=[
                    {"apiVersion": "kubeflow.org/v1", "kind": "Pipeline", "name": "p", "uid": "1", "controller": True}
                ]
            ),
            DUE,
            DUE,
            expected=replan(Verdict.OWNED, "no longer expires"),
        ),
        id="owned by a controller: its owner's lifecycle governs it, not deleted",
    ),
    # --- jobttl: crash recovery (an intent an earlier run wrote before its DELETE) -----------------------
    pytest.param(
        Row(
            None,
            DUE,
            DUE,
            current=redis_says(DUE, intent=intent()),
            expected=lambda d, row: Recover(intent()["object"], {"kind": "Status"}),
        ),
        id="an earlier run's DELETE landed (gone, intent left): recorded as deleted from the intent",
    ),
    pytest.param(
        Row(
            tfjob(deletionTimestamp=rfc3339(DUE)),
            DUE,
            DUE,
            current=redis_says(DUE, intent=intent()),
            expected=lambda d, row: Recover(row.obj, row.obj),
        ),
        id="an earlier run's DELETE is held by finalizers: recorded as delete-requested",
    ),
    pytest.param(
        Row(
            tfjob(uid="5d1f7c2a-0000-4000-8000-000000000002"),
            DUE,
            DUE,
            current=redis_says(DUE, intent=intent()),
            expected=lambda d, row: Recover(intent()["object"], {"kind": "Status"}, successor=row.obj),
        ),
        id="an earlier run's DELETE, then re-created: recorded, and the new object decided anew",
    ),
    pytest.param(
        Row(tfjob(), DUE, DUE, current=redis_says(DUE, intent=intent()), expected=delete),
        id="a stale intent (its DELETE never landed: the object is as it was): judged as usual, deleted",
    ),
    pytest.param(
        Row(
            None,
            DUE,
            DUE,
            stage=PODS_STAGE,
            policy=PODS_POLICY,
            current=redis_says(DUE, intent=intent()),
            expected=lambda d, row: Forget(GONE),
        ),
        id="an intent of a pods stage is not recovered: its job gone, the stage forgotten",
    ),
    pytest.param(
        Row(None, DUE, DUE, expected=lambda d, row: Forget(GONE)),
        id="already deleted (by hand), no intent: forgotten, not recorded as jobttl's",
    ),
    # --- jobttl: the pods stage ---------------------------------------------------------------------------
    pytest.param(
        Row(
            tfjob(),
            FINISHED + 10,
            FINISHED + 10,
            stage=PODS_STAGE,
            policy=PODS_POLICY,
            expected=lambda d, row: DeletePods(d),
        ),
        id="pods stage due: its pods deleted, the job kept",
    ),
    pytest.param(
        Row(
            tfjob(state="running"),
            FINISHED + 10,
            FINISHED + 10,
            stage=PODS_STAGE,
            policy=PODS_POLICY,
            expected=replan(Verdict.NOT_FINISHED, "no longer expires"),
        ),
        id="pods stage of a job running again (argo retry keeps the UID): replanned, pods kept",
    ),
    pytest.param(
        Row(
            tfjob(ttl=5),
            FINISHED + 10,
            FINISHED + 10,
            stage=PODS_STAGE,
            policy=PODS_POLICY,
            expected=replan(Verdict.NO_TTL, "no longer expires"),
        ),
        id="pods stage whose job's TTL now ends first: the pods go with the job, the stage replanned",
    ),
    pytest.param(
        Row(
            tfjob(),
            FINISHED + 10,
            FINISHED + 10,
            stage=PODS_STAGE,
            policy=parse_policy({}),
            expected=replan(Verdict.NO_TTL, "no longer expires"),
        ),
        id="pods stage no longer in the policy (no podTTL): replanned (dropped)",
    ),
    pytest.param(
        Row(
            tfjob(),
            FINISHED + 10,
            FINISHED + 10,
            stage=PODS_STAGE,
            policy=parse_policy({"podTTL": "10s", "dryRun": True}),
            expected=lambda d, row: WouldDelete(d),
        ),
        id="pods stage under dry run: would-delete",
    ),
    pytest.param(
        Row(
            tfjob(),
            FINISHED + 10,
            FINISHED + 10,
            stage=PODS_STAGE,
            policy=PODS_POLICY,
            current=redis_says(FINISHED + 10, until=FINISHED + 600),
            expected=replan(Verdict.EXPIRES, "due later"),
        ),
        id="pods stage postponed by an operator's until: moved",
    ),
]


@pytest.mark.parametrize("row", JUDGE_ROWS)
def test_judge(row: Row):
    assert row.judged() == row.expected(row.decision(), row)


def test_judging_an_object_of_ours_without_its_decision_is_a_programming_error():
    """The executor must decide what `to_decide` names: judging without it could delete on no decision."""
    row = Row(tfjob(), DUE, DUE)
    with pytest.raises(ValueError, match="needs the decision"):
        judge(row.target(), row.redis(), row.obj, None, ApiTime(DUE))


# --- admit: before the object is read --------------------------------------------------------------------

ADMIT_ROWS = [
    pytest.param(redis_says(DUE), "job", True, None, None, id="still the pending deletion: read the object"),
    pytest.param(
        redis_says(DUE, busy=True),
        "job",
        True,
        None,
        Skip(ANOTHER_RUN),
        id="another run holds the claim (the RQ job enqueued twice): skipped",
    ),
    pytest.param(
        redis_says(DUE + 60),
        "job",
        True,
        None,
        Skip(SUPERSEDED),
        id="superseded booking (moved to a later time): skipped",
    ),
    pytest.param(
        redis_says(None), "job", True, None, Skip(SUPERSEDED), id="superseded booking (cancelled, or done): skipped"
    ),
    pytest.param(
        redis_says(DUE),
        "logs",
        True,
        None,
        Refuse("stage-not-supported", "this worker does not run logs stages"),
        id="a stage this worker does not run (a newer jobttl booked it): refused, kept",
    ),
    pytest.param(
        redis_says(DUE),
        "job",
        False,
        None,
        Refuse("kind-not-enabled", "TFJob is not enabled in this worker's policy"),
        id="a kind not enabled in this worker's policy (a rolling change): refused, kept",
    ),
    pytest.param(
        redis_says(DUE),
        "job",
        True,
        SKEW,
        Refuse("clock-skew", SKEW),
        id="clocks disagree before the read: refused, nothing read",
    ),
    pytest.param(
        redis_says(None, busy=True),
        "job",
        True,
        None,
        Skip(ANOTHER_RUN),
        id="another run at work comes before superseded",
    ),
]


@pytest.mark.parametrize(("current", "stage", "kind_enabled", "problem", "expected"), ADMIT_ROWS)
def test_admit(current, stage, kind_enabled, problem, expected):
    assert admit(booked(DUE, stage), current, kind_enabled, problem) == expected


# --- confirm: right before the DELETE --------------------------------------------------------------------

CONFIRM_ROWS = [
    pytest.param(redis_says(DUE), redis_says(DUE), None, id="nothing changed: delete"),
    pytest.param(redis_says(DUE), redis_says(DUE, intent=intent()), None, id="the intent just written: delete"),
    pytest.param(
        redis_says(DUE),
        redis_says(DUE + 60),
        Skip(SUPERSEDED),
        id="moved while archiving or waiting for a slot: skipped",
    ),
    pytest.param(redis_says(DUE), redis_says(None), Skip(SUPERSEDED), id="cancelled meanwhile: skipped"),
    pytest.param(
        redis_says(DUE),
        redis_says(DUE, busy=True),
        Skip(ANOTHER_RUN),
        id="the claim expired and another run took it: skipped",
    ),
    pytest.param(
        redis_says(DUE),
        redis_says(DUE, keep=True),
        Again("an operator spoke since it was judged"),
        id="an operator kept it meanwhile: judged again",
    ),
    pytest.param(
        redis_says(DUE),
        redis_says(DUE, until=DUE + 600),
        Again("an operator spoke since it was judged"),
        id="an operator postponed it meanwhile: judged again",
    ),
    pytest.param(
        redis_says(DUE, keep=True),
        redis_says(DUE),
        Again("an operator spoke since it was judged"),
        id="an operator released a keep meanwhile: judged again",
    ),
]


@pytest.mark.parametrize(("before", "after", "expected"), CONFIRM_ROWS)
def test_confirm(before, after, expected):
    assert confirm(booked(DUE), before, after) == expected


# --- the pods stage's re-read -----------------------------------------------------------------------------


def _changed(**meta: Any) -> dict:
    obj = copy.deepcopy(tfjob())
    obj["metadata"].update(meta)
    return obj


UNCHANGED_ROWS = [
    pytest.param(tfjob(), True, id="as judged: the pods go"),
    pytest.param(None, False, id="gone since: the pods stay"),
    pytest.param(_changed(resourceVersion="2"), False, id="changed since (a retry, a status update): the pods stay"),
    pytest.param(_changed(uid="5d1f7c2a-0000-4000-8000-000000000003"), False, id="re-created since: the pods stay"),
    pytest.param(_changed(deletionTimestamp=rfc3339(DUE)), False, id="being deleted since: the pods stay"),
]


@pytest.mark.parametrize(("latest", "expected"), UNCHANGED_ROWS)
def test_the_pods_stage_goes_on_only_with_the_job_as_judged(latest, expected):
    assert unchanged(latest, tfjob()) is expected


# --- the due time, in one place ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expires_at", "until", "later"),
    [
        pytest.param(DUE, None, False, id="due as booked"),
        pytest.param(DUE - 10, None, False, id="due before the booking (overdue): not later"),
        pytest.param(DUE + 1, None, True, id="expires after the booking: later"),
        pytest.param(DUE, DUE + 1, True, id="an operator's until after the booking: later"),
        pytest.param(DUE, DUE - 100, False, id="an until before the expiry changes nothing"),
    ],
)
def test_due_later_takes_the_later_of_the_expiry_and_an_operators_until(expires_at, until, later):
    decision = Decision(Verdict.EXPIRES, "test", expires_at=expires_at)
    assert due_later(booked(DUE), redis_says(DUE, until=until), decision) is later


def test_a_decision_that_no_longer_expires_is_later_whatever_the_override():
    assert due_later(booked(DUE), redis_says(DUE, until=DUE - 100), Decision(Verdict.KEPT, "kept"))


def test_the_stage_names_are_the_schedules():
    """The judgement may not import the schedule's module (it talks to Redis): both take the names
    from jobttl.core.domain.decisions.plan, and a copy written into the judgement again would have to stay equal."""
    from jobttl.core.domain.decisions import judgement

    assert (judgement.JOB_STAGE, judgement.PODS_STAGE) == (schedule.JOB_STAGE, schedule.PODS_STAGE)
