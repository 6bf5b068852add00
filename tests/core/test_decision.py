"""When is a job finished, and when does it expire? (worker/decision.py)"""

import pytest

from tests.fixtures import finished_status, finished_tfjob_sample, running_status, tfjob, with_server_fields
from jobttl.core.decision import Verdict, decide
from jobttl.core.kinds import parse_time
from jobttl.core.kinds import TFJOB


def job(ttl=None, status=None, **kw):
    obj = with_server_fields(tfjob("train", ttl=ttl, **kw))
    if status is not None:
        obj["status"] = status
    return obj


def test_the_finished_sample_from_the_kubeflow_docs_is_finished_but_has_no_ttl():
    decision = decide(finished_tfjob_sample(), TFJOB)
    assert decision.verdict is Verdict.NO_TTL
    assert decision.outcome == "succeeded"


def test_the_finished_sample_with_a_ttl_expires_at_completion_time_plus_ttl():
    obj = finished_tfjob_sample()
    obj["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": 600}
    decision = decide(obj, TFJOB)
    assert decision.verdict is Verdict.EXPIRES
    assert decision.finished_at == parse_time("2021-09-06T11:49:30Z")
    assert decision.expires_at == decision.finished_at + 600
    assert decision.ttl_source == "spec.runPolicy.ttlSecondsAfterFinished"


@pytest.mark.parametrize("outcome", ["Succeeded", "Failed"])
def test_succeeded_and_failed_jobs_are_finished(outcome):
    decision = decide(job(ttl=60, status=finished_status(1_700_000_000, outcome)), TFJOB)
    assert decision.verdict is Verdict.EXPIRES
    assert decision.outcome == outcome.lower()
    assert decision.expires_at == 1_700_000_060


def test_a_running_job_is_not_finished():
    assert decide(job(ttl=60, status=running_status(1_700_000_000)), TFJOB).verdict is Verdict.NOT_FINISHED


def test_a_new_job_without_status_is_not_finished():
    assert decide(job(ttl=60), TFJOB).verdict is Verdict.NOT_FINISHED


def test_a_false_succeeded_condition_does_not_count():
    status = finished_status(1_700_000_000)
    status["conditions"][-1]["status"] = "False"
    assert decide(job(ttl=60, status=status), TFJOB).verdict is Verdict.NOT_FINISHED


def test_the_pre_1_2_ttl_location_is_honoured():
    decision = decide(job(ttl=30, legacy_ttl=True, status=finished_status(1_700_000_000)), TFJOB)
    assert decision.verdict is Verdict.EXPIRES
    assert decision.ttl_source == "spec.ttlSecondsAfterFinished"
    assert decision.expires_at == 1_700_000_030


def test_run_policy_wins_over_the_legacy_location():
    obj = job(ttl=30, status=finished_status(1_700_000_000))
    obj["spec"]["ttlSecondsAfterFinished"] = 9999
    assert decide(obj, TFJOB).expires_at == 1_700_000_030


def test_without_completion_time_the_finishing_conditions_transition_time_is_used():
    # e.g. an evicted job: the training operator sets Failed but no completionTime.
    status = finished_status(1_700_000_000, "Failed", completion_time=False)
    decision = decide(job(ttl=10, status=status), TFJOB)
    assert decision.finished_at == 1_700_000_000
    assert decision.expires_at == 1_700_000_010


def test_ttl_zero_expires_at_the_finish_time():
    decision = decide(job(ttl=0, status=finished_status(1_700_000_000)), TFJOB)
    assert decision.verdict is Verdict.EXPIRES
    assert decision.expires_at == 1_700_000_000


@pytest.mark.parametrize("bad", [-1, 1.5, "60", True, [60]])
def test_negative_or_non_integer_ttls_are_invalid_and_never_expire(bad):
    obj = job(status=finished_status(1_700_000_000))
    obj["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": bad}
    decision = decide(obj, TFJOB)
    assert decision.verdict is Verdict.INVALID_TTL
    assert decision.expires_at is None
    assert "spec.runPolicy.ttlSecondsAfterFinished" in decision.reason


def test_an_object_being_deleted_is_left_alone():
    obj = job(ttl=0, status=finished_status(1_700_000_000))
    obj["metadata"]["deletionTimestamp"] = "2023-11-14T22:13:20Z"
    assert decide(obj, TFJOB).verdict is Verdict.BEING_DELETED


def test_a_finished_job_with_unreadable_times_is_not_scheduled():
    status = finished_status(1_700_000_000, completion_time=False)
    status["conditions"][-1]["lastTransitionTime"] = "yesterday"
    decision = decide(job(ttl=10, status=status), TFJOB)
    assert decision.verdict is Verdict.NO_FINISH_TIME
    assert decision.expires_at is None


def test_garbage_in_status_is_not_finished_rather_than_an_error():
    assert decide(job(ttl=10, status={"conditions": "nope"}), TFJOB).verdict is Verdict.NOT_FINISHED
    assert decide(job(ttl=10, status={"conditions": [None, 3]}), TFJOB).verdict is Verdict.NOT_FINISHED


def test_the_admins_cap_applies_before_absurd_values_are_judged():
    from jobttl.core.policy import parse_policy

    def finished(ttl, **annotations):
        obj = with_server_fields(tfjob("capped", "team", ttl=ttl))
        obj["status"] = finished_status(1_700_000_000)
        obj["metadata"]["annotations"] = annotations
        return obj

    capped = parse_policy({"maxTTL": "7d"})
    assert decide(finished(9_999_999_999), TFJOB, capped).ttl == 7 * 86400
    keep_until = decide(finished(60, **{"jobttl.io/keep-until": "2200-01-01T00:00:00Z"}), TFJOB, capped)
    assert keep_until.verdict is Verdict.EXPIRES and keep_until.ttl == 7 * 86400
