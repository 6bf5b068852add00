"""Every job kind: finished, running and edge objects → the right decision (worker/kinds.py)."""

import pytest

from tests.fixtures import job_object, with_server_fields
from jobttl.core.decision import Verdict, decide
from jobttl.core.kinds import (ALL_KINDS, BATCH_JOB, FAILED, SUCCEEDED, TRAINJOB, WORKFLOW)
from jobttl.core.policy import parse_policy

AT = 1_700_000_000
WITH_OWN_TTL = [k for k in ALL_KINDS if k not in (TRAINJOB, WORKFLOW, BATCH_JOB)]
POLICY_TTL = parse_policy({"ttl": "1h"})


def obj(kind, state="succeeded", ttl=None, **kw):
    return with_server_fields(job_object(kind, "j", "team", state=state, at=AT, ttl=ttl, **kw))


@pytest.mark.parametrize("kind", WITH_OWN_TTL, ids=lambda k: f"{k.api_version}/{k.kind}")
@pytest.mark.parametrize("state, outcome", [("succeeded", SUCCEEDED), ("failed", FAILED)])
def test_training_operator_kinds_expire_on_their_run_policy_ttl(kind, state, outcome):
    decision = decide(obj(kind, state, ttl=30), kind)
    assert (decision.verdict, decision.outcome, decision.expires_at) == (Verdict.EXPIRES, outcome, AT + 30)
    assert decision.ttl_source == "spec.runPolicy.ttlSecondsAfterFinished"


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: f"{k.api_version}/{k.kind}")
def test_no_kind_is_finished_while_running(kind):
    assert decide(obj(kind, "running"), kind, POLICY_TTL).verdict is Verdict.NOT_FINISHED


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: f"{k.api_version}/{k.kind}")
def test_every_kind_without_its_own_ttl_follows_the_policy(kind):
    decision = decide(obj(kind), kind, POLICY_TTL)
    assert (decision.verdict, decision.expires_at, decision.ttl_source) == (Verdict.EXPIRES, AT + 3600,
                                                                            "ttl of policy")


@pytest.mark.parametrize("state, outcome, condition", [("succeeded", SUCCEEDED, "Complete"),
                                                       ("failed", FAILED, "Failed")])
def test_trainjobs_finish_by_condition_and_count_from_its_transition(state, outcome, condition):
    decision = decide(obj(TRAINJOB, state), TRAINJOB, POLICY_TTL)
    assert (decision.outcome, decision.finished_at) == (outcome, AT)
    assert condition in decision.reason


def test_trainjobs_have_no_ttl_field_so_without_policy_nothing_expires():
    assert decide(obj(TRAINJOB), TRAINJOB).verdict is Verdict.NO_TTL


@pytest.mark.parametrize("state, outcome", [("succeeded", SUCCEEDED), ("failed", FAILED)])
def test_batch_jobs_without_their_own_ttl_follow_policy(state, outcome):
    decision = decide(obj(BATCH_JOB, state), BATCH_JOB, POLICY_TTL)
    assert (decision.verdict, decision.outcome, decision.finished_at) == (Verdict.EXPIRES, outcome, AT)


def test_batch_jobs_with_their_own_ttl_are_left_to_kubernetes():
    decision = decide(obj(BATCH_JOB, ttl=100), BATCH_JOB, POLICY_TTL)
    assert decision.verdict is Verdict.BUILTIN_TTL


@pytest.mark.parametrize("state, outcome", [("succeeded", SUCCEEDED), ("failed", FAILED), ("error", FAILED)])
def test_argo_workflows_finish_by_phase(state, outcome):
    decision = decide(obj(WORKFLOW, state, ttl={"secondsAfterCompletion": 60}), WORKFLOW)
    assert (decision.verdict, decision.outcome, decision.expires_at) == (Verdict.EXPIRES, outcome, AT + 60)


@pytest.mark.parametrize("state, expected, source", [
    ("succeeded", 10, "spec.ttlStrategy.secondsAfterSuccess"),
    ("failed", 20, "spec.ttlStrategy.secondsAfterFailure"),
    ("error", 20, "spec.ttlStrategy.secondsAfterFailure"),
])
def test_argo_outcome_specific_ttls_take_precedence_over_completion(state, expected, source):
    strategy = {"secondsAfterSuccess": 10, "secondsAfterFailure": 20, "secondsAfterCompletion": 30}
    decision = decide(obj(WORKFLOW, state, ttl=strategy), WORKFLOW)
    assert (decision.ttl, decision.ttl_source) == (expected, source)


def test_argo_falls_back_to_seconds_after_completion():
    decision = decide(obj(WORKFLOW, "failed", ttl={"secondsAfterSuccess": 10, "secondsAfterCompletion": 30}), WORKFLOW)
    assert (decision.ttl, decision.ttl_source) == (30, "spec.ttlStrategy.secondsAfterCompletion")


def test_an_argo_workflow_without_finished_at_has_no_finish_time():
    workflow = obj(WORKFLOW, ttl={"secondsAfterCompletion": 30})
    workflow["status"]["finishedAt"] = None
    assert decide(workflow, WORKFLOW).verdict is Verdict.NO_FINISH_TIME


def test_v1_and_v2beta1_mpijobs_are_distinct_kinds():
    mpijobs = [k for k in ALL_KINDS if k.kind == "MPIJob"]
    assert sorted(k.api_version for k in mpijobs) == ["kubeflow.org/v1", "kubeflow.org/v2beta1"]
