"""Every job kind, read as its own controller reads it (jobttl.core.kinds, through decide()).

The tables are the upstream projects' own test cases, each named as its upstream test names
it (table key, `name:`, `Entry`/`It` text, or the Go test function), ported to objects and to
jobttl's verdicts. A row named "code-derived: ..." has no upstream test: its outcome was worked
out from the upstream code cited in its table's comment. Where jobttl deliberately differs
from upstream, the row says so ("differs:") and the README's "Where jobttl differs from
upstream" says why.

Upstream snapshots (see /work/notes/upstream-cases.md for the full tables and quotes):
- argoproj/argo-workflows @ f016ad89eb269d282aec06dc491c29f396a38df4:
  workflow/gccontroller/gc_controller.go, gc_controller_test.go,
  pkg/apis/workflow/v1alpha1/workflow_types.go (+ _test.go), workflow/common/util.go (+ _test.go)
- kubernetes/kubernetes: pkg/controller/ttlafterfinished/ttlafterfinished_controller.go @
  003e86297d18a8538c9da3619871393f9703bf70 (test @ 4a0608cb77f6a53af41cb4a453af104a4d4a0610),
  pkg/controller/job/util/utils_test.go @ 4d7ca8687c66efcd2a4f01eac5a16465181c5f50,
  pkg/controller/job/job_controller_test.go (job_controller.go @ 6ae037f1db843e99547258d7dd292301a74ba0eb)
- kubeflow/trainer release-1.9 (the training operator) @ 3a3a1da8d5287f9f96e1b2d3be6a4b6ad756566d:
  pkg/controller.v1/common/job.go, pkg/controller.v1/tensorflow/job_test.go,
  pkg/controller.v1/common/job_test.go, pkg/common/util/util_test.go
- kubeflow/mpi-operator @ caa3c47fc42eb762635f78045ec0fcd1a89eb038:
  pkg/controller/mpi_job_controller.go, mpi_job_controller_test.go, test/e2e/mpi_job_test.go
- kubeflow/trainer master @ 8c0f5059bd51ec3ba6d6a6a7b2e1471de7bc13b3: pkg/util/trainjob/trainjob_test.go
"""

import copy

import pytest

from tests.fixtures import job_object, rfc3339, with_server_fields
from jobttl.core.decision import Verdict, decide
from jobttl.core.kinds import (ALL_KINDS, BATCH_JOB, FAILED, MPIJOB_V2BETA1, SUCCEEDED, TFJOB, TRAINJOB, WORKFLOW)
from jobttl.core.policy import parse_policy

AT = 1_700_000_000
NOW = AT  # the upstream tests' clock: "now-11s" is 11 s before it
WITH_OWN_TTL = [k for k in ALL_KINDS if k not in (TRAINJOB, WORKFLOW, BATCH_JOB)]
POLICY_TTL = parse_policy({"ttl": "1h"})
NO_POLICY = parse_policy(None)


def obj(kind, state="succeeded", ttl=None, **kw):
    return with_server_fields(job_object(kind, "j", "team", state=state, at=AT, ttl=ttl, **kw))


def at(when: str) -> str:
    """ "now", "now-11s", "now+4s", "now-1d" → an RFC 3339 time on the test clock."""
    offset = when[3:] or "+0s"
    unit = {"s": 1, "h": 3600, "d": 86400}[offset[-1]]
    return rfc3339(NOW + int(offset[:-1]) * unit)


def expires(offset: int):
    """Expected: deleted at NOW + offset (<= 0: the TTL is already up, "delete now")."""
    return ("expires", NOW + offset)


def check(decision, expected):
    if isinstance(expected, Verdict):
        assert decision.verdict is expected, decision.reason
    else:
        assert (decision.verdict, decision.expires_at) == (Verdict.EXPIRES, expected[1]), decision.reason


# --- every kind -----------------------------------------------------------------------------------

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


def test_v1_and_v2beta1_mpijobs_are_distinct_kinds():
    mpijobs = [k for k in ALL_KINDS if k.kind == "MPIJob"]
    assert sorted(k.api_version for k in mpijobs) == ["kubeflow.org/v1", "kubeflow.org/v2beta1"]


# --- Argo Workflows -------------------------------------------------------------------------------
# gc_controller.go:261-274 `ttl()`: Failed → secondsAfterFailure, Succeeded → secondsAfterSuccess,
# else (Succeeded, Failed, Error) secondsAfterCompletion; GetTTLStrategy (workflow_types.go:223-236):
# spec.ttlStrategy, else status.storedWorkflowTemplateSpec.ttlStrategy, whole.

def workflow(phase="Succeeded", finished="now-11s", ttl=None, stored=None, labels=None, template_ref=False):
    wf = obj(WORKFLOW, {"Succeeded": "succeeded", "Failed": "failed", "Error": "error"}[phase])
    wf["metadata"]["labels"] = {"workflows.argoproj.io/completed": "true", **(labels or {})}
    wf["status"]["finishedAt"] = at(finished) if finished else None
    if ttl is not None:
        wf["spec"]["ttlStrategy"] = ttl
    if stored is not None:
        wf["status"]["storedWorkflowTemplateSpec"] = {"entrypoint": "main", "ttlStrategy": stored}
    if template_ref:
        wf["spec"] = {"workflowTemplateRef": {"name": "workflow-template-submittable-2.9"},
                      **({"ttlStrategy": ttl} if ttl is not None else {})}
    return wf


ARGO_GC_CASES = [
    pytest.param(workflow(finished="now-1d"), Verdict.NO_TTL,
                 id="TestEnqueueWF (completedWf: no ttlStrategy)"),
    pytest.param(workflow(finished="now-5s", ttl={"secondsAfterSuccess": 10}), expires(5),
                 id="TestTTLStrategySucceeded/wf (5s ago)"),
    pytest.param(workflow(ttl={"secondsAfterSuccess": 10}), expires(-1), id="TestTTLStrategySucceeded/wf1 (11s ago)"),
    pytest.param(workflow(stored={"secondsAfterCompletion": 10}, template_ref=True), expires(-1),
                 id="TestTTLStrategySucceeded/wf2 = wftRefWithTTLinWFT"),
    pytest.param(workflow(ttl={"secondsAfterCompletion": 10}, stored={"secondsAfterCompletion": 60},
                          template_ref=True), expires(-1), id="TestTTLStrategySucceeded/wf3 = wftRefWithTTLinWF"),
    pytest.param(workflow("Failed", "now-5s", {"secondsAfterFailure": 10}), expires(5),
                 id="TestTTLStrategyFailed/wf (5s ago)"),
    pytest.param(workflow("Failed", ttl={"secondsAfterFailure": 10}), expires(-1), id="TestTTLStrategyFailed/wf1"),
    pytest.param(workflow("Failed", "now-5s"), Verdict.NO_TTL, id="TestNoTTLStrategyFailed/wf"),
    pytest.param(workflow("Failed"), Verdict.NO_TTL, id="TestNoTTLStrategyFailed/wf1"),
    pytest.param(workflow("Failed", "now-6s", {"secondsAfterSuccess": 5}), Verdict.NO_TTL,
                 id="TestTTLStrategyFromUnstructured (success-only TTL, Failed)"),
    pytest.param(workflow("Failed", ttl={"secondsAfterFailure": 10}), expires(-1), id="TestTTLlExpired/wf"),
    pytest.param(workflow("Failed", "now-5s", {"secondsAfterFailure": 10}), expires(5), id="TestTTLlExpired/wf1"),
    pytest.param(workflow("Failed", "now-5s", {"secondsAfterCompletion": 10}), expires(5),
                 id="TestTTLlExpired/wf3 (Failed falls back to secondsAfterCompletion)"),
    pytest.param(workflow("Failed", ttl={"secondsAfterCompletion": 10}), expires(-1), id="TestTTLlExpired/wf4"),
    pytest.param(workflow(finished="now-5s", ttl={"secondsAfterSuccess": 10}), expires(5), id="TestTTLlExpired/wf5"),
    pytest.param(workflow(ttl={"secondsAfterSuccess": 10}), expires(-1), id="TestTTLlExpired/wf6"),
    pytest.param(workflow(ttl={"secondsAfterCompletion": 10}), expires(-1), id="TestGetTTLStrategy/TTLFromWorkflow"),
    pytest.param(workflow(template_ref=True), Verdict.NO_TTL,
                 id="TestGetTTLStrategy/TTLInWfwithWorkflowTemplate (both nil)"),
    pytest.param(workflow(finished="now-30s", stored={"secondsAfterCompletion": 20}), expires(-10),
                 id="TestWfGetTTLStrategy (stored 20)"),
    pytest.param(workflow(finished="now-30s", ttl={"secondsAfterCompletion": 30}, stored={"secondsAfterCompletion": 20}),
                 expires(0), id="TestWfGetTTLStrategy (then spec 30 wins)"),
    # Error: Status.Failed() is false, so only secondsAfterCompletion (gc_controller.go:265,269).
    pytest.param(workflow("Error", ttl={"secondsAfterFailure": 10}), Verdict.NO_TTL,
                 id="code-derived: Error + failure TTL only"),
    pytest.param(workflow("Error", ttl={"secondsAfterFailure": 10, "secondsAfterCompletion": 30}), expires(19),
                 id="code-derived: Error + completion TTL"),
    pytest.param(workflow(ttl={"secondsAfterSuccess": 5, "secondsAfterCompletion": 30}), expires(-6),
                 id="code-derived: Succeeded, success+completion"),
    pytest.param(workflow(ttl={"secondsAfterFailure": 5, "secondsAfterCompletion": 30}), expires(19),
                 id="code-derived: Succeeded, failure+completion"),
    pytest.param(workflow("Failed", "now", {"secondsAfterFailure": 0}), expires(0), id="code-derived: TTL 0"),
    pytest.param(workflow(finished=None, ttl={"secondsAfterCompletion": 3600}), Verdict.NO_FINISH_TIME,
                 id="code-derived: finishedAt missing (differs: upstream deletes at once)"),
    # IsDone (util.go:352-356) holds GC while the archive has not taken the workflow.
    pytest.param(workflow(finished="now-1d", ttl={"secondsAfterCompletion": 10},
                          labels={"workflows.argoproj.io/workflow-archiving-status": "Pending"}), Verdict.ARCHIVING,
                 id="code-derived: archiving Pending"),
    pytest.param(workflow(ttl={"secondsAfterCompletion": 10},
                          labels={"workflows.argoproj.io/workflow-archiving-status": "Archived"}), expires(-1),
                 id="code-derived: archiving Archived/Persisted"),
    pytest.param(workflow("Failed", stored={"secondsAfterSuccess": 5, "secondsAfterFailure": 60},
                          ttl={"secondsAfterSuccess": 5}), Verdict.NO_TTL,
                 id="code-derived: templateRef + partial spec TTL (spec's strategy wins whole)"),
    pytest.param(dict(workflow(), spec={"entrypoint": "main", "podGC": {"strategy": "OnWorkflowCompletion"}}),
                 Verdict.NO_TTL, id="code-derived: podGC only"),
]


@pytest.mark.parametrize("wf, expected", ARGO_GC_CASES)
def test_argo_gc_controller_cases(wf, expected):
    check(decide(wf, WORKFLOW), expected)


def test_argo_is_done_cases():
    """workflow/common/util_test.go TestIsDone: an archiving Pending workflow is not done, whatever its TTL."""
    pending = workflow(ttl={"secondsAfterCompletion": 0},
                       labels={"workflows.argoproj.io/workflow-archiving-status": "Pending"})
    decision = decide(pending, WORKFLOW)
    assert decision.verdict is Verdict.ARCHIVING and "Pending" in decision.reason
    assert decide(pending, WORKFLOW, POLICY_TTL).verdict is Verdict.ARCHIVING, "a policy TTL waits too"
    pending["metadata"]["labels"]["workflows.argoproj.io/workflow-archiving-status"] = "Archived"
    assert decide(pending, WORKFLOW).verdict is Verdict.EXPIRES, "once archived, it is re-decided and goes"


@pytest.mark.parametrize("wf, source", [
    (workflow(stored={"secondsAfterCompletion": 10}, template_ref=True),
     "status.storedWorkflowTemplateSpec.ttlStrategy.secondsAfterCompletion"),
    (workflow(ttl={"secondsAfterCompletion": 10}, stored={"secondsAfterCompletion": 60}),
     "spec.ttlStrategy.secondsAfterCompletion"),
], ids=["wftRefWithTTLinWFT", "wftRefWithTTLinWF"])
def test_argo_template_ttls_say_where_they_came_from_and_beat_the_policy_default(wf, source):
    decision = decide(wf, WORKFLOW, POLICY_TTL)
    assert (decision.ttl, decision.ttl_source) == (10, source)


@pytest.mark.parametrize("phase, policy_source", [("Succeeded", "ttlAfterSuccess of policy"),
                                                  ("Failed", "ttlAfterFailure of policy"),
                                                  ("Error", "ttlAfterFailure of policy")])
def test_for_the_policy_an_argo_error_is_a_failure(phase, policy_source):
    """Argo gives an Error only secondsAfterCompletion; jobttl's policy speaks of outcomes, and an
    Error did not succeed, so it gets ttlAfterFailure (README: Where jobttl differs from upstream)."""
    policy = parse_policy({"ttl": "1h", "ttlAfterSuccess": "1d", "ttlAfterFailure": "7d"})
    decision = decide(workflow(phase), WORKFLOW, policy)
    assert (decision.ttl_source, decision.outcome) == (policy_source, SUCCEEDED if phase == "Succeeded" else FAILED)


def test_an_unreadable_argo_ttl_strategy_is_invalid_not_absent():
    decision = decide(workflow(ttl="1h"), WORKFLOW, POLICY_TTL)
    assert decision.verdict is Verdict.INVALID_TTL and "spec.ttlStrategy" in decision.reason


# --- Kubernetes batch/v1 Job ----------------------------------------------------------------------
# ttlafterfinished_controller_test.go TestTimeLeft: a Job with its own TTL is the built-in
# controller's (jobttl says builtin-ttl); the same arithmetic (first Complete/Failed condition's
# lastTransitionTime + TTL, inclusive) is what jobttl applies when the TTL comes from the policy.

def batch_job(conditions, ttl=None, **spec):
    job = obj(BATCH_JOB)
    job["status"] = {"startTime": at("now-1h"), "conditions": conditions}
    if ttl is not None:
        job["spec"]["ttlSecondsAfterFinished"] = ttl
    job["spec"].update(spec)
    return job


def condition(kind, when="now", status="True"):
    return {"type": kind, "status": status, **({"lastTransitionTime": at(when)} if when else {})}


TIME_LEFT_CASES = [
    pytest.param(batch_job([], 100), None, Verdict.NOT_FINISHED, id="Error case: Job unfinished"),
    pytest.param(batch_job([condition("Complete")]), None, Verdict.NO_TTL, id="Error case: Job completed now, no TTL"),
    pytest.param(batch_job([condition("Complete")], 0), "0s", expires(0), id="Job completed now, 0s TTL"),
    pytest.param(batch_job([condition("Complete")], 10), "10s", expires(10), id="Job completed now, 10s TTL"),
    pytest.param(batch_job([condition("Complete", "now-10s")], 15), "15s", expires(5),
                 id="Job completed 10s ago, 15s TTL"),
    pytest.param(batch_job([condition("Failed")]), None, Verdict.NO_TTL, id="Error case: Job failed now, no TTL"),
    pytest.param(batch_job([condition("Failed")], 0), "0s", expires(0), id="Job failed now, 0s TTL"),
    pytest.param(batch_job([condition("Failed")], 10), "10s", expires(10), id="Job failed now, 10s TTL"),
    pytest.param(batch_job([condition("Failed", "now-10s")], 15), "15s", expires(5),
                 id="Job failed 10s ago, 15s TTL"),
    pytest.param(batch_job([condition("Complete", None)], 10), "10s", Verdict.NO_FINISH_TIME,
                 id="code-derived: finished condition without lastTransitionTime"),
    pytest.param(batch_job([condition("SuccessCriteriaMet", "now-1h")], 0, ), "0s", Verdict.NOT_FINISHED,
                 id="code-derived: only FailureTarget/SuccessCriteriaMet conditions"),
    pytest.param(batch_job([condition("Failed", "now-1h"), condition("Complete")], 0), "0s", expires(-3600),
                 id="code-derived: both Complete and Failed True (first in list order wins)"),
]


@pytest.mark.parametrize("job, policy_ttl, expected", TIME_LEFT_CASES)
def test_kubernetes_time_left_cases(job, policy_ttl, expected):
    own = decide(job, BATCH_JOB)
    if job["spec"].get("ttlSecondsAfterFinished") is not None and expected is not Verdict.NOT_FINISHED:
        assert own.verdict is Verdict.BUILTIN_TTL, "a Job with its own TTL is the built-in controller's"
        del job["spec"]["ttlSecondsAfterFinished"]
    policy = parse_policy({"ttl": policy_ttl}) if policy_ttl else NO_POLICY
    check(decide(job, BATCH_JOB, policy), expected)


# pkg/controller/job/util/utils_test.go TestFinishedCondition
FINISHED_CONDITION_CASES = [
    pytest.param([], False, id="Job doesn't have any conditions"),
    pytest.param([condition("Complete")], True, id="Job is completed and condition is true"),
    pytest.param([condition("Complete", status="False")], False, id="Job is completed and condition is false"),
    pytest.param([condition("Complete", status="Unknown")], False, id="Job is completed and condition is unknown"),
    pytest.param([condition("Suspended", status="False"), condition("Complete"), condition("Failed", status="False")],
                 True, id="Job has multiple conditions, one of them being complete and condition true"),
    pytest.param([condition("Failed")], True, id="Job is failed and condition is true"),
    pytest.param([condition("Failed", status="False")], False, id="Job is failed and condition is false"),
    pytest.param([condition("Failed", status="Unknown")], False, id="Job is failed and condition is unknown"),
    pytest.param([condition(c, status="False") for c in ("Suspended", "Complete", "Failed")], False,
                 id="Job has multiple conditions, none of them has condition true"),
]


@pytest.mark.parametrize("conditions, finished", FINISHED_CONDITION_CASES)
def test_kubernetes_finished_condition_cases(conditions, finished):
    assert (decide(batch_job(conditions), BATCH_JOB, POLICY_TTL).verdict is not Verdict.NOT_FINISHED) is finished


# job_controller_test.go TestSyncJobWhenManagedBy (the Job controller's skip; KEP-4368). The
# TTL-after-finished controller itself ignores managedBy; jobttl leaves such Jobs alone
# (differs: README), and cannot see feature gates, so a custom value is always someone else's.
JOB_MANAGED_BY_CASES = [
    pytest.param("custom-managed-by", Verdict.MANAGED_ELSEWHERE,
                 id="job with custom value of managedBy; feature enabled; the status is unchanged"),
    pytest.param("kubernetes.io/job-controller", Verdict.EXPIRES,
                 id="job with well known value of the managedBy; feature enabled; the status is updated"),
    pytest.param("kueue.x-k8s.io/multikueue", Verdict.MANAGED_ELSEWHERE,
                 id="code-derived: custom managedBy (differs: the TTL controller would delete it)"),
    pytest.param(None, Verdict.EXPIRES, id="job without the managedBy; feature enabled; the status is updated"),
]


@pytest.mark.parametrize("managed_by, verdict", JOB_MANAGED_BY_CASES)
def test_kubernetes_job_managed_by_cases(managed_by, verdict):
    job = batch_job([condition("Complete", "now-1h")], **({"managedBy": managed_by} if managed_by else {}))
    decision = decide(job, BATCH_JOB, POLICY_TTL)
    assert decision.verdict is verdict
    if verdict is Verdict.MANAGED_ELSEWHERE:
        assert f"spec.managedBy is {managed_by!r}" in decision.reason


# --- Kubeflow training operator v1 ----------------------------------------------------------------
# pkg/controller.v1/tensorflow/job_test.go DescribeTable("TFJob is created and is cleaned up") →
# CleanupJob (common/job.go:420-453): no TTL or suspended → nothing; completionTime nil → error.

def tfjob(ttl=None, completion=None, condition_at="now-1d", suspend=None, managed_by=None, outcome="Succeeded",
          legacy_ttl=None):
    job = obj(TFJOB, outcome.lower())
    run_policy = {"ttlSecondsAfterFinished": ttl, "suspend": suspend, "managedBy": managed_by}
    job["spec"]["runPolicy"] = {k: v for k, v in run_policy.items() if v is not None}
    if legacy_ttl is not None:
        job["spec"]["ttlSecondsAfterFinished"] = legacy_ttl
    job["status"].pop("completionTime")
    if completion is not None:
        job["status"]["completionTime"] = at(completion)
    for c in job["status"]["conditions"]:
        c["lastTransitionTime"] = at(condition_at) if condition_at else None
    return job


CLEANUP_JOB_CASES = [
    pytest.param(tfjob(), Verdict.NO_TTL, id="TFJob shouldn't be removed since TTL is nil"),
    pytest.param(tfjob(suspend=True), Verdict.SUSPENDED, id="No error with completionTime is nil if suspended"),
    pytest.param(tfjob(10, suspend=True), Verdict.SUSPENDED,
                 id="No error with TTL is set and completionTime is nil, if suspended"),
    pytest.param(tfjob(10, condition_at=None), Verdict.NO_FINISH_TIME, id="Error is occurred since completionTime is nil"),
    pytest.param(tfjob(10, condition_at="now-1h"), expires(-3590),
                 id="code-derived: completionTime nil, condition has lastTransitionTime "
                    "(differs: upstream errors and never deletes)"),
    pytest.param(tfjob(180, "now-1d"), expires(-86400 + 180), id="TFJob is removed since exceeded TTL (TTL is 180s)"),
    pytest.param(tfjob(0, "now"), expires(0), id="TFJob is removed since (TTL is 0s)"),
    pytest.param(tfjob(0, "now-1d", suspend=True), Verdict.SUSPENDED, id="code-derived: finished + suspended"),
    pytest.param(tfjob(legacy_ttl=10, completion="now-1h"), expires(-3590),
                 id="code-derived: TTL at old spec level (differs: unknown to the v1.9 CRD)"),
]


@pytest.mark.parametrize("job, expected", CLEANUP_JOB_CASES)
def test_training_operator_cleanup_job_cases(job, expected):
    check(decide(job, TFJOB), expected)


def test_a_suspended_job_is_not_expired_by_the_policy_either():
    decision = decide(tfjob(completion="now-1d", suspend=True), TFJOB, POLICY_TTL)
    assert decision.verdict is Verdict.SUSPENDED and "spec.runPolicy.suspend is True" in decision.reason


# pkg/common/util/util_test.go TestDurationUntilExpireTime. Its comparator is lenient and its
# completion times lie in the future; the semantics ported: remaining = completionTime + ttl - now.
DURATION_UNTIL_EXPIRE_CASES = [
    pytest.param(obj(TFJOB, "running", ttl=5), Verdict.NOT_FINISHED, id="running job"),
    pytest.param(tfjob(5, "now+4s"), expires(9), id="succeeded job with remaining time 1s"),
    pytest.param(tfjob(5, "now+4s", outcome="Failed"), expires(9), id="failed job with remaining time 1s"),
    pytest.param(tfjob(None, "now+4s"), Verdict.NO_TTL, id="succeeded job with infinite TTL"),
    pytest.param(tfjob(5, "now-6s"), expires(-1), id="succeeded job without remaining time"),
    pytest.param(tfjob(5, condition_at=None), Verdict.NO_FINISH_TIME,
                 id="succeeded job with nil completion time error"),
]


@pytest.mark.parametrize("job, expected", DURATION_UNTIL_EXPIRE_CASES)
def test_training_operator_duration_until_expire_time_cases(job, expected):
    check(decide(job, TFJOB), expected)


# pkg/controller.v1/common/job_test.go TestManagedByExternalController (job.go:459-464): only
# nil or kubeflow.org/training-operator is the operator's own; "" is external.
TRAINING_OPERATOR_MANAGED_BY_CASES = [
    pytest.param(None, Verdict.EXPIRES, id="managedBy is nil"),
    pytest.param("", Verdict.MANAGED_ELSEWHERE, id="managedBy is empty"),
    pytest.param("kubeflow.org/training-operator", Verdict.EXPIRES, id="managedBy is training-operator controller"),
    pytest.param("kueue.x-k8s.io/multikueue", Verdict.MANAGED_ELSEWHERE,
                 id="managedBy is not the training-operator controller"),
    pytest.param("other-job-controller", Verdict.MANAGED_ELSEWHERE, id="managedBy is other value"),
]


@pytest.mark.parametrize("managed_by, verdict", TRAINING_OPERATOR_MANAGED_BY_CASES)
def test_training_operator_managed_by_external_controller_cases(managed_by, verdict):
    job = tfjob(10, "now-1h", managed_by=managed_by)
    job["spec"]["runPolicy"]["managedBy"] = managed_by  # "" too
    if managed_by is None:
        del job["spec"]["runPolicy"]["managedBy"]
    assert decide(job, TFJOB).verdict is verdict


# --- mpi-operator v2beta1 -------------------------------------------------------------------------
# mpi_job_controller.go:1839-1844 managedByExternalController; KubeflowJobController is
# kubeflow.org/mpi-operator (types.go:98), not the training operator's name.

def mpijob(managed_by=None):
    job = obj(MPIJOB_V2BETA1, ttl=10)
    if managed_by is not None:
        job["spec"]["runPolicy"]["managedBy"] = managed_by
    return job


MPI_OPERATOR_CASES = [
    pytest.param(mpijob("kueue.x-k8s.io/multikueue"), Verdict.MANAGED_ELSEWHERE,
                 id="TestDoNothingWithMPIJobManagedExternally"),
    pytest.param(mpijob("kubeflow.org/mpi-operator"), expires(10),
                 id="should succeed when explicitly managed by mpi-operator"),
    pytest.param(mpijob("kubeflow.org/training-operator"), Verdict.MANAGED_ELSEWHERE,
                 id="code-derived: the training operator's name is not mpi-operator's"),
    pytest.param(mpijob(), expires(10),
                 id="code-derived: finished MPIJob with TTL (differs: upstream only expires the launcher Job)"),
]


@pytest.mark.parametrize("job, expected", MPI_OPERATOR_CASES)
def test_mpi_operator_cases(job, expected):
    check(decide(job, MPIJOB_V2BETA1), expected)


# --- Kubeflow Trainer v2 TrainJob -----------------------------------------------------------------
# pkg/util/trainjob/trainjob_test.go TestIsManagedByExternalController and TestIsTrainJobFinished.

def trainjob(conditions=None, **spec):
    job = obj(TRAINJOB)
    job["spec"].update(spec)
    conditions = job["status"]["conditions"] if conditions is None else conditions
    job["status"] = {"conditions": [{**c, "lastTransitionTime": at("now-1h")} for c in conditions]}
    return job


TRAINJOB_CASES = [
    pytest.param(trainjob(), expires(0), id="TestIsManagedByExternalController/managedBy is unset"),
    pytest.param(trainjob(managedBy="trainer.kubeflow.org/trainjob-controller"), expires(0),
                 id="TestIsManagedByExternalController/managedBy is the built-in TrainJob controller"),
    pytest.param(trainjob(managedBy="kueue.x-k8s.io/multikueue"), Verdict.MANAGED_ELSEWHERE,
                 id="TestIsManagedByExternalController/managedBy is MultiKueue"),
    pytest.param(trainjob(managedBy="foo"), Verdict.MANAGED_ELSEWHERE,
                 id="TestIsManagedByExternalController/managedBy is an unrecognized controller"),
    pytest.param(trainjob([{"type": "Complete", "status": "True"}]), expires(0),
                 id="TestIsTrainJobFinished/completed TrainJob is finished"),
    pytest.param(trainjob([{"type": "Failed", "status": "True"}]), expires(0),
                 id="TestIsTrainJobFinished/failed TrainJob is finished"),
    pytest.param(trainjob([]), Verdict.NOT_FINISHED,
                 id="TestIsTrainJobFinished/running TrainJob with no conditions is not finished"),
    pytest.param(trainjob([{"type": "Complete", "status": "False"}]), Verdict.NOT_FINISHED,
                 id="TestIsTrainJobFinished/TrainJob with Complete=False is not finished"),
    pytest.param(trainjob([{"type": "Failed", "status": "False"}]), Verdict.NOT_FINISHED,
                 id="TestIsTrainJobFinished/TrainJob with Failed=False is not finished"),
    pytest.param(trainjob([{"type": "Complete", "status": "True"}, {"type": "Failed", "status": "True"}]), expires(0),
                 id="TestIsTrainJobFinished/TrainJob with both Complete and Failed true is finished"),
    pytest.param(trainjob(suspend=True), Verdict.SUSPENDED, id="code-derived: suspended TrainJob (spec.suspend)"),
]


@pytest.mark.parametrize("job, expected", TRAINJOB_CASES)
def test_trainer_trainjob_cases(job, expected):
    """No TTL field upstream (kubeflow/trainer#4052): the policy's TTL (1h) stands in for one."""
    check(decide(job, TRAINJOB, POLICY_TTL), expected)


def test_trainjobs_have_no_ttl_field_so_without_policy_nothing_expires():
    assert decide(obj(TRAINJOB), TRAINJOB).verdict is Verdict.NO_TTL


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: f"{k.api_version}/{k.kind}")
def test_each_kind_declares_where_its_controller_is_named(kind):
    """Every kind but Argo's names its controller; a kind's own name for it is "ours"."""
    job = obj(kind)
    if kind.managed_by is None:
        assert kind is WORKFLOW
        return
    parent = job
    for key in kind.managed_by[:-1]:
        parent = parent.setdefault(key, {})
    parent[kind.managed_by[-1]] = kind.own_controllers[0]
    assert decide(job, kind, POLICY_TTL).verdict is Verdict.EXPIRES
    parent[kind.managed_by[-1]] = "kueue.x-k8s.io/multikueue"
    assert decide(copy.deepcopy(job), kind, POLICY_TTL).verdict is Verdict.MANAGED_ELSEWHERE
