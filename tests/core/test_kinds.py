"""Every job kind, read as its own controller reads it (jobttl.core.domain.kinds, through decide()).

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
from jobttl.core.domain.decisions.decision import Verdict, decide
from jobttl.core.domain.kinds.registry import ALL_KINDS, BATCH_JOB, MPIJOB_V2BETA1, TFJOB, TRAINJOB, WORKFLOW
from jobttl.core.domain.kinds.model import FAILED, SUCCEEDED
from jobttl.core.domain.rules.policy import parse_policy

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
    assert (decision.verdict, decision.expires_at, decision.ttl_source) == (Verdict.EXPIRES, AT + 3600, "ttl of policy")


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
        wf["spec"] = {
            "workflowTemplateRef": {"name": "workflow-template-submittable-2.9"},
            **({"ttlStrategy": ttl} if ttl is not None else {}),
        }
    return wf


ARGO_GC_CASES = [
    pytest.param(workflow(finished="now-1d"), Verdict.NO_TTL, id="TestEnqueueWF (completedWf: no ttlStrategy)"),
    pytest.param(
        workflow(finished="now-5s", ttl={"secondsAfterSuccess": 10}),
        expires(5),
        id="TestTTLStrategySucceeded/wf (5s ago)",
    ),
    pytest.param(workflow(ttl={"secondsAfterSuccess": 10}), expires(-1), id="TestTTLStrategySucceeded/wf1 (11s ago)"),
    pytest.param(
        workflow(stored={"secondsAfterCompletion": 10}, template_ref=True),
        expires(-1),
        id="TestTTLStrategySucceeded/wf2 = wftRefWithTTLinWFT",
    ),
    pytest.param(
        workflow(ttl={"secondsAfterCompletion": 10}, stored={"secondsAfterCompletion": 60}, template_ref=True),
        expires(-1),
        id="TestTTLStrategySucceeded/wf3 = wftRefWithTTLinWF",
    ),
    pytest.param(
        workflow("Failed", "now-5s", {"secondsAfterFailure": 10}), expires(5), id="TestTTLStrategyFailed/wf (5s ago)"
    ),
    pytest.param(workflow("Failed", ttl={"secondsAfterFailure": 10}), expires(-1), id="TestTTLStrategyFailed/wf1"),
    pytest.param(workflow("Failed", "now-5s"), Verdict.NO_TTL, id="TestNoTTLStrategyFailed/wf"),
    pytest.param(workflow("Failed"), Verdict.NO_TTL, id="TestNoTTLStrategyFailed/wf1"),
    pytest.param(
        workflow("Failed", "now-6s", {"secondsAfterSuccess": 5}),
        Verdict.NO_TTL,
        id="TestTTLStrategyFromUnstructured (success-only TTL, Failed)",
    ),
    pytest.param(workflow("Failed", ttl={"secondsAfterFailure": 10}), expires(-1), id="TestTTLlExpired/wf"),
    pytest.param(workflow("Failed", "now-5s", {"secondsAfterFailure": 10}), expires(5), id="TestTTLlExpired/wf1"),
    pytest.param(
        workflow("Failed", "now-5s", {"secondsAfterCompletion": 10}),
        expires(5),
        id="TestTTLlExpired/wf3 (Failed falls back to secondsAfterCompletion)",
    ),
    pytest.param(workflow("Failed", ttl={"secondsAfterCompletion": 10}), expires(-1), id="TestTTLlExpired/wf4"),
    pytest.param(workflow(finished="now-5s", ttl={"secondsAfterSuccess": 10}), expires(5), id="TestTTLlExpired/wf5"),
    pytest.param(workflow(ttl={"secondsAfterSuccess": 10}), expires(-1), id="TestTTLlExpired/wf6"),
    pytest.param(workflow(ttl={"secondsAfterCompletion": 10}), expires(-1), id="TestGetTTLStrategy/TTLFromWorkflow"),
    pytest.param(
        workflow(template_ref=True), Verdict.NO_TTL, id="TestGetTTLStrategy/TTLInWfwithWorkflowTemplate (both nil)"
    ),
    pytest.param(
        workflow(finished="now-30s", stored={"secondsAfterCompletion": 20}),
        expires(-10),
        id="TestWfGetTTLStrategy (stored 20)",
    ),
    pytest.param(
        workflow(finished="now-30s", ttl={"secondsAfterCompletion": 30}, stored={"secondsAfterCompletion": 20}),
        expires(0),
        id="TestWfGetTTLStrategy (then spec 30 wins)",
    ),
    # Error: Status.Failed() is false, so only secondsAfterCompletion (gc_controller.go:265,269).
    pytest.param(
        workflow("Error", ttl={"secondsAfterFailure": 10}), Verdict.NO_TTL, id="code-derived: Error + failure TTL only"
    ),
    pytest.param(
        workflow("Error", ttl={"secondsAfterFailure": 10, "secondsAfterCompletion": 30}),
        expires(19),
        id="code-derived: Error + completion TTL",
    ),
    pytest.param(
        workflow(ttl={"secondsAfterSuccess": 5, "secondsAfterCompletion": 30}),
        expires(-6),
        id="code-derived: Succeeded, success+completion",
    ),
    pytest.param(
        workflow(ttl={"secondsAfterFailure": 5, "secondsAfterCompletion": 30}),
        expires(19),
        id="code-derived: Succeeded, failure+completion",
    ),
    pytest.param(workflow("Failed", "now", {"secondsAfterFailure": 0}), expires(0), id="code-derived: TTL 0"),
    pytest.param(
        workflow(finished=None, ttl={"secondsAfterCompletion": 3600}),
        Verdict.NO_FINISH_TIME,
        id="code-derived: finishedAt missing (differs: upstream deletes at once)",
    ),
    # IsDone (util.go:352-356) holds GC while the archive has not taken the workflow.
    pytest.param(
        workflow(
            finished="now-1d",
            ttl={"secondsAfterCompletion": 10},
            labels={"workflows.argoproj.io/workflow-archiving-status": "Pending"},
        ),
        Verdict.ARCHIVING,
        id="code-derived: archiving Pending",
    ),
    pytest.param(
        workflow(
            ttl={"secondsAfterCompletion": 10}, labels={"workflows.argoproj.io/workflow-archiving-status": "Archived"}
        ),
        expires(-1),
        id="code-derived: archiving Archived/Persisted",
    ),
    pytest.param(
        workflow(
            "Failed", stored={"secondsAfterSuccess": 5, "secondsAfterFailure": 60}, ttl={"secondsAfterSuccess": 5}
        ),
        Verdict.NO_TTL,
        id="code-derived: templateRef + partial spec TTL (spec's strategy wins whole)",
    ),
    pytest.param(
        dict(workflow(), spec={"entrypoint": "main", "podGC": {"strategy": "OnWorkflowCompletion"}}),
        Verdict.NO_TTL,
        id="code-derived: podGC only",
    ),
]


@pytest.mark.parametrize("wf, expected", ARGO_GC_CASES)
def test_argo_gc_controller_cases(wf, expected):
    check(decide(wf, WORKFLOW), expected)


def test_argo_is_done_cases():
    """workflow/common/util_test.go TestIsDone: an archiving Pending workflow is not done, whatever its TTL."""
    pending = workflow(
        ttl={"secondsAfterCompletion": 0}, labels={"workflows.argoproj.io/workflow-archiving-status": "Pending"}
    )
    decision = decide(pending, WORKFLOW)
    assert decision.verdict is Verdict.ARCHIVING and "Pending" in decision.reason
    assert decide(pending, WORKFLOW, POLICY_TTL).verdict is Verdict.ARCHIVING, "a policy TTL waits too"
    pending["metadata"]["labels"]["workflows.argoproj.io/workflow-archiving-status"] = "Archived"
    assert decide(pending, WORKFLOW).verdict is Verdict.EXPIRES, "once archived, it is re-decided and goes"


@pytest.mark.parametrize(
    "wf, source",
    [
        (
            workflow(stored={"secondsAfterCompletion": 10}, template_ref=True),
            "status.storedWorkflowTemplateSpec.ttlStrategy.secondsAfterCompletion",
        ),
        (
            workflow(ttl={"secondsAfterCompletion": 10}, stored={"secondsAfterCompletion": 60}),
            "spec.ttlStrategy.secondsAfterCompletion",
        ),
    ],
    ids=["wftRefWithTTLinWFT", "wftRefWithTTLinWF"],
)
def test_argo_template_ttls_say_where_they_came_from_and_beat_the_policy_default(wf, source):
    decision = decide(wf, WORKFLOW, POLICY_TTL)
    assert (decision.ttl, decision.ttl_source) == (10, source)


@pytest.mark.parametrize(
    "phase, policy_source",
    [
        ("Succeeded", "ttlAfterSuccess of policy"),
        ("Failed", "ttlAfterFailure of policy"),
        ("Error", "ttlAfterFailure of policy"),
    ],
)
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
    pytest.param(
        batch_job([condition("Complete", "now-10s")], 15), "15s", expires(5), id="Job completed 10s ago, 15s TTL"
    ),
    pytest.param(batch_job([condition("Failed")]), None, Verdict.NO_TTL, id="Error case: Job failed now, no TTL"),
    pytest.param(batch_job([condition("Failed")], 0), "0s", expires(0), id="Job failed now, 0s TTL"),
    pytest.param(batch_job([condition("Failed")], 10), "10s", expires(10), id="Job failed now, 10s TTL"),
    pytest.param(batch_job([condition("Failed", "now-10s")], 15), "15s", expires(5), id="Job failed 10s ago, 15s TTL"),
    pytest.param(
        batch_job([condition("Complete", None)], 10),
        "10s",
        Verdict.NO_FINISH_TIME,
        id="code-derived: finished condition without lastTransitionTime",
    ),
    pytest.param(
        batch_job(
            [condition("SuccessCriteriaMet", "now-1h")],
            0,
        ),
        "0s",
        Verdict.NOT_FINISHED,
        id="code-derived: only FailureTarget/SuccessCriteriaMet conditions",
    ),
    pytest.param(
        batch_job([condition("Failed", "now-1h"), condition("Complete")], 0),
        "0s",
        expires(-3600),
        id="code-derived: both Complete and Failed True (first in list order wins)",
    ),
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
    pytest.param(
        [condition("Suspended", status="False"), condition("Complete"), condition("Failed", status="False")],
        True,
        id="Job has multiple conditions, one of them being complete and condition true",
    ),
    pytest.param([condition("Failed")], True, id="Job is failed and condition is true"),
    pytest.param([condition("Failed", status="False")], False, id="Job is failed and condition is false"),
    pytest.param([condition("Failed", status="Unknown")], False, id="Job is failed and condition is unknown"),
    pytest.param(
        [condition(c, status="False") for c in ("Suspended", "Complete", "Failed")],
        False,
        id="Job has multiple conditions, none of them has condition true",
    ),
]


@pytest.mark.parametrize("conditions, finished", FINISHED_CONDITION_CASES)
def test_kubernetes_finished_condition_cases(conditions, finished):
    assert (decide(batch_job(conditions), BATCH_JOB, POLICY_TTL).verdict is not Verdict.NOT_FINISHED) is finished


# job_controller_test.go TestSyncJobWhenManagedBy (the Job controller's skip; KEP-4368). The
# TTL-after-finished controller itself ignores managedBy; jobttl leaves such Jobs alone
# (differs: README), and cannot see feature gates, so a custom value is always someone else's.
JOB_MANAGED_BY_CASES = [
    pytest.param(
        "custom-managed-by",
        Verdict.MANAGED_ELSEWHERE,
        id="job with custom value of managedBy; feature enabled; the status is unchanged",
    ),
    pytest.param(
        "kubernetes.io/job-controller",
        Verdict.EXPIRES,
        id="job with well known value of the managedBy; feature enabled; the status is updated",
    ),
    pytest.param(
        "kueue.x-k8s.io/multikueue",
        Verdict.MANAGED_ELSEWHERE,
        id="code-derived: custom managedBy (differs: the TTL controller would delete it)",
    ),
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


def tfjob(
    ttl=None,
    completion=None,
    condition_at="now-1d",
    suspend=None,
    managed_by=None,
    outcome="Succeeded",
    legacy_ttl=None,
):
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
    pytest.param(
        tfjob(10, suspend=True),
        Verdict.SUSPENDED,
        id="No error with TTL is set and completionTime is nil, if suspended",
    ),
    pytest.param(
        tfjob(10, condition_at=None), Verdict.NO_FINISH_TIME, id="Error is occurred since completionTime is nil"
    ),
    pytest.param(
        tfjob(10, condition_at="now-1h"),
        expires(-3590),
        id="code-derived: completionTime nil, condition has lastTransitionTime "
        "(differs: upstream errors and never deletes)",
    ),
    pytest.param(tfjob(180, "now-1d"), expires(-86400 + 180), id="TFJob is removed since exceeded TTL (TTL is 180s)"),
    pytest.param(tfjob(0, "now"), expires(0), id="TFJob is removed since (TTL is 0s)"),
    pytest.param(tfjob(0, "now-1d", suspend=True), Verdict.SUSPENDED, id="code-derived: finished + suspended"),
    pytest.param(
        tfjob(legacy_ttl=10, completion="now-1h"),
        expires(-3590),
        id="code-derived: TTL at old spec level (differs: unknown to the v1.9 CRD)",
    ),
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
    pytest.param(
        tfjob(5, condition_at=None), Verdict.NO_FINISH_TIME, id="succeeded job with nil completion time error"
    ),
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
    pytest.param(
        "kueue.x-k8s.io/multikueue", Verdict.MANAGED_ELSEWHERE, id="managedBy is not the training-operator controller"
    ),
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
    pytest.param(
        mpijob("kueue.x-k8s.io/multikueue"), Verdict.MANAGED_ELSEWHERE, id="TestDoNothingWithMPIJobManagedExternally"
    ),
    pytest.param(
        mpijob("kubeflow.org/mpi-operator"), expires(10), id="should succeed when explicitly managed by mpi-operator"
    ),
    pytest.param(
        mpijob("kubeflow.org/training-operator"),
        Verdict.MANAGED_ELSEWHERE,
        id="code-derived: the training operator's name is not mpi-operator's",
    ),
    pytest.param(
        mpijob(),
        expires(10),
        id="code-derived: finished MPIJob with TTL (differs: upstream only expires the launcher Job)",
    ),
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
    pytest.param(
        trainjob(managedBy="trainer.kubeflow.org/trainjob-controller"),
        expires(0),
        id="TestIsManagedByExternalController/managedBy is the built-in TrainJob controller",
    ),
    pytest.param(
        trainjob(managedBy="kueue.x-k8s.io/multikueue"),
        Verdict.MANAGED_ELSEWHERE,
        id="TestIsManagedByExternalController/managedBy is MultiKueue",
    ),
    pytest.param(
        trainjob(managedBy="foo"),
        Verdict.MANAGED_ELSEWHERE,
        id="TestIsManagedByExternalController/managedBy is an unrecognized controller",
    ),
    pytest.param(
        trainjob([{"type": "Complete", "status": "True"}]),
        expires(0),
        id="TestIsTrainJobFinished/completed TrainJob is finished",
    ),
    pytest.param(
        trainjob([{"type": "Failed", "status": "True"}]),
        expires(0),
        id="TestIsTrainJobFinished/failed TrainJob is finished",
    ),
    pytest.param(
        trainjob([]),
        Verdict.NOT_FINISHED,
        id="TestIsTrainJobFinished/running TrainJob with no conditions is not finished",
    ),
    pytest.param(
        trainjob([{"type": "Complete", "status": "False"}]),
        Verdict.NOT_FINISHED,
        id="TestIsTrainJobFinished/TrainJob with Complete=False is not finished",
    ),
    pytest.param(
        trainjob([{"type": "Failed", "status": "False"}]),
        Verdict.NOT_FINISHED,
        id="TestIsTrainJobFinished/TrainJob with Failed=False is not finished",
    ),
    pytest.param(
        trainjob([{"type": "Complete", "status": "True"}, {"type": "Failed", "status": "True"}]),
        expires(0),
        id="TestIsTrainJobFinished/TrainJob with both Complete and Failed true is finished",
    ),
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


# --- the kinds declared since (core/domain/kinds/kinds.yaml) --------------------------------------------------------
# Upstream snapshots (each kind's README in ../shared/reference/ gives file:line for the rules):
# - ray-project/kuberay @ feeaf72facab4881ba2b179248bb67315634e229:
#   ray-operator/controllers/ray/rayjob_controller.go, rayjob_controller_test.go,
#   ray-operator/test/e2erayjob/rayjob_deletion_strategy_test.go
# - kubernetes-sigs/jobset @ 08dfbdfd682714a9ab929633eca8dc95315187e7:
#   pkg/controllers/ttl_after_finished.go, ttl_after_finished_test.go
# - volcano-sh/volcano @ ed72c7c815a9fd547a787134676f73d42e9d049c:
#   pkg/controllers/garbagecollector/garbagecollector.go, garbagecollector_test.go
# - kubeflow/spark-operator @ 38082f3318e9d33f3e4a940c7cf165df6e40b422:
#   pkg/util/sparkapplication.go, pkg/util/sparkapplication_test.go,
#   internal/controller/sparkapplication/controller_test.go
# - tektoncd/pipeline @ 3ee1745ae5b2d9175b11917d7c1935eaad44910c: pkg/apis/pipeline/v1/*_types_test.go;
#   tektoncd/pruner @ ed6a2c6aafbbb44f77f3903bdaec14f477eed679: pkg/reconciler/{pipelinerun,taskrun}/*_test.go

from jobttl.core.domain.kinds.registry import BUILTIN_KINDS  # noqa: E402

KINDS = {f"{k.api_version}/{k.kind}": k for k in BUILTIN_KINDS}
RAYJOB = KINDS["ray.io/v1/RayJob"]
JOBSET = KINDS["jobset.x-k8s.io/v1alpha2/JobSet"]
VOLCANO_JOB = KINDS["batch.volcano.sh/v1alpha1/Job"]
SPARK_APP = KINDS["sparkoperator.k8s.io/v1beta2/SparkApplication"]
PIPELINERUN = KINDS["tekton.dev/v1/PipelineRun"]
TASKRUN = KINDS["tekton.dev/v1/TaskRun"]


def new_kind_obj(kind, spec=None, status=None, **meta):
    return with_server_fields(
        {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {"name": "j", "namespace": "team", **meta},
            "spec": spec or {},
            "status": status or {},
        }
    )


def own_ttl_left_then_policy(job, kind, ttl_path, expected):
    """For a kind whose own controller applies its TTL: jobttl leaves such objects to it
    (builtin-ttl, like batch Jobs); the same arithmetic is what it applies to a policy TTL."""
    parent = job
    for key in ttl_path[:-1]:
        parent = parent[key]
    ttl = parent.get(ttl_path[-1])
    if ttl is not None and expected is not Verdict.NOT_FINISHED:
        assert decide(job, kind).verdict is Verdict.BUILTIN_TTL, "its own controller applies its own TTL"
        del parent[ttl_path[-1]]
    policy = parse_policy({"ttl": f"{ttl}s"}) if ttl is not None else NO_POLICY
    check(decide(job, kind, policy), expected)


# KubeRay: finished by status.jobDeploymentStatus, finish time status.endTime; its TTL deletes the
# RayCluster (not the RayJob) unless a DeleteSelf policy applies; then the operator deletes the RayJob.
def rayjob(deployment="Complete", job_status="SUCCEEDED", end="now", shutdown=None, ttl=None, strategy=None, **spec):
    status = {"jobDeploymentStatus": deployment, "jobStatus": job_status, "rayClusterName": "j-raycluster-x"}
    if end:
        status["endTime"] = at(end)
    spec = {"entrypoint": "python /home/ray/samples/sample_code.py", **spec}
    for key, value in (
        ("shutdownAfterJobFinishes", shutdown),
        ("ttlSecondsAfterFinished", ttl),
        ("deletionStrategy", strategy),
    ):
        if value is not None:
            spec[key] = value
    return new_kind_obj(RAYJOB, spec, status)


def rule(policy, ttl=0, job_status=None, deployment=None):
    condition = {
        "ttlSeconds": ttl,
        **({"jobStatus": job_status} if job_status else {}),
        **({"jobDeploymentStatus": deployment} if deployment else {}),
    }
    return {"policy": policy, "condition": condition}


RAYJOB_CASES = [
    # rayjob_controller_test.go
    pytest.param(
        rayjob(shutdown=True, ttl=0),
        expires(3600),
        id="If shutdownAfterJobFinishes is true, RayCluster should be deleted but not the submitter Job. "
        "(the RayJob stays: the policy's TTL applies)",
    ),
    pytest.param(
        rayjob(strategy={"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteCluster"}}),
        expires(3600),
        id="Delete cluster on success (the RayJob stays: the policy's TTL applies)",
    ),
    pytest.param(
        rayjob(strategy={"onSuccess": {"policy": "DeleteWorkers"}, "onFailure": {"policy": "DeleteCluster"}}),
        expires(3600),
        id="Delete workers on success",
    ),
    pytest.param(
        rayjob(ttl=0, strategy={"onSuccess": {"policy": "DeleteSelf"}, "onFailure": {"policy": "DeleteNone"}}),
        Verdict.BUILTIN_TTL,
        id="Delete self on success",
    ),
    pytest.param(
        rayjob(
            "Failed",
            "FAILED",
            ttl=0,
            strategy={"onSuccess": {"policy": "DeleteNone"}, "onFailure": {"policy": "DeleteSelf"}},
        ),
        Verdict.BUILTIN_TTL,
        id="Delete self on failure",
    ),
    pytest.param(
        rayjob(strategy={"onSuccess": {"policy": "DeleteNone"}, "onFailure": {"policy": "DeleteNone"}}),
        expires(3600),
        id="Delete none on success",
    ),
    pytest.param(
        rayjob(strategy={"deletionRules": [rule("DeleteSelf", 0, job_status="SUCCEEDED")]}),
        Verdict.BUILTIN_TTL,
        id="Should delete self on success when a single 'DeleteSelf' rule is set",
    ),
    pytest.param(
        rayjob("Failed", "FAILED", strategy={"deletionRules": [rule("DeleteSelf", 0, job_status="FAILED")]}),
        Verdict.BUILTIN_TTL,
        id="Should delete self on failure when a single 'DeleteSelf' rule is set",
    ),
    pytest.param(
        rayjob(strategy={"deletionRules": [rule("DeleteCluster", 0, job_status="SUCCEEDED")]}),
        expires(3600),
        id="Should delete cluster on success when a single 'DeleteCluster' rule is set",
    ),
    pytest.param(
        rayjob(strategy={"deletionRules": [rule("DeleteNone", 0, job_status="SUCCEEDED")]}),
        expires(3600),
        id="Should delete none on success when a single 'DeleteNone' rule is set",
    ),
    pytest.param(
        rayjob(
            strategy={
                "deletionRules": [
                    rule("DeleteWorkers", 0, job_status="SUCCEEDED"),
                    rule("DeleteCluster", 10, job_status="SUCCEEDED"),
                    rule("DeleteSelf", 20, job_status="SUCCEEDED"),
                ]
            }
        ),
        Verdict.BUILTIN_TTL,
        id="Should process multi-stage deletions in order on success: Workers, then Cluster, then Self",
    ),
    pytest.param(
        rayjob(strategy={"deletionRules": [rule("DeleteSelf", 0, job_status="FAILED")]}),
        expires(3600),
        id="code-derived: isDeletionRuleMatched, a DeleteSelf rule for another jobStatus",
    ),
    # rayjob_deletion_strategy_test.go
    pytest.param(
        rayjob("Failed", "", strategy={"deletionRules": [rule("DeleteSelf", 0, deployment="Failed")]}),
        Verdict.BUILTIN_TTL,
        id="DeletionRules with JobDeploymentStatus Failed and DeleteSelf policy should delete RayJob and cluster",
    ),
    pytest.param(
        rayjob(
            strategy={"deletionRules": [rule("DeleteSelf", 0, job_status="SUCCEEDED")]},
            clusterSelector={"ray.io/cluster": "shared"},
        ),
        expires(3600),
        id="code-derived: with clusterSelector nothing is deleted (C:429-432)",
    ),
    pytest.param(
        rayjob(
            "Complete",
            "STOPPED",
            strategy={"onSuccess": {"policy": "DeleteSelf"}, "onFailure": {"policy": "DeleteSelf"}},
        ),
        expires(3600),
        id="code-derived: a STOPPED job matches neither legacy policy (C:1475-1484)",
    ),
    pytest.param(
        rayjob("ValidationFailed", ""),
        Verdict.NOT_FINISHED,
        id="code-derived: ValidationFailed is not terminal (T:63-64)",
    ),
    pytest.param(
        rayjob("Running", "SUCCEEDED"),
        Verdict.NOT_FINISHED,
        id="code-derived: jobStatus terminal but the submitter not done (C:336-340)",
    ),
    pytest.param(rayjob("Retrying", "FAILED"), Verdict.NOT_FINISHED, id="code-derived: Retrying is not finished"),
    pytest.param(rayjob(end="now-10s"), expires(3590), id="code-derived: the finish time is status.endTime"),
    pytest.param(rayjob(end=None), Verdict.NO_FINISH_TIME, id="code-derived: no endTime"),
]


@pytest.mark.parametrize("job, expected", RAYJOB_CASES)
def test_kuberay_rayjob_cases(job, expected):
    check(decide(job, RAYJOB, POLICY_TTL), expected)


def test_a_rayjob_left_to_kuberay_says_which_policy_deletes_it():
    job = rayjob(strategy={"deletionRules": [rule("DeleteSelf", 30, job_status="SUCCEEDED")]})
    decision = decide(job, RAYJOB, POLICY_TTL)
    assert decision.reason == "spec.deletionStrategy (DeleteSelf) is set: the KubeRay operator deletes it"


def test_a_rayjob_with_more_deletion_rules_than_kuberay_accepts_is_kept_as_the_policys_error():
    # 20,000 rules (a 1.7 MB object): refused by their number before anything is converted or
    # evaluated. Before, its evaluation took minutes of CPU; with appliedBy, an error became
    # "the KubeRay operator deletes it" and the RayJob stayed for ever, unreported.
    rules = [rule("DeleteWorkers", i, job_status="FAILED") for i in range(20_000)]
    job = rayjob(strategy={"deletionRules": rules + [rule("DeleteSelf", 30, job_status="SUCCEEDED")]})
    decision = decide(job, RAYJOB, POLICY_TTL)
    assert decision.verdict is Verdict.POLICY_ERROR
    assert decision.reason == (
        "spec.deletionStrategy (DeleteSelf) (ttl.cel): spec.deletionStrategy.deletionRules has 20,001 items, more "
        "than the 12 its celInputs entry allows (maxItems); this is an error of jobttl's built-in declaration of "
        "ray.io/v1/RayJob, not of the object: jobttl keeps this RayJob until the declaration is fixed"
    )
    assert decision.expires_at is None


def widget(cel: str, applied_by: str | None = None):
    from jobttl.core.domain.kinds.declarations import compile_kinds

    ttl = {
        "cel": cel,
        "celWhen": "spec.x",
        "celInputs": ["spec.x"],
        **({"appliedBy": applied_by} if applied_by else {}),
    }
    decl = {
        "group": "widgets.example.com",
        "version": "v1",
        "kind": "Widget",
        "plural": "widgets",
        "finished": {"state": {"path": "status.phase", "values": {"Done": "succeeded"}}},
        "finishedAt": ["status.doneAt"],
        "ttl": ttl,
    }
    [kind] = compile_kinds([decl], "policy.yaml", "kindDeclarations")
    return kind


def widget_obj(kind, x):
    return new_kind_obj(kind, {"x": x}, {"phase": "Done", "doneAt": at("now")})


@pytest.mark.parametrize("x", [True, False])
def test_a_cel_ttl_that_yields_a_bool_is_the_policys_error_not_0_or_1_seconds(x):
    kind = widget("self.spec.x")
    decision = decide(widget_obj(kind, x), kind, POLICY_TTL)
    assert decision.verdict is Verdict.POLICY_ERROR
    assert f"gave the bool {str(x).lower()}, not a TTL" in decision.reason
    assert "policy.yaml: kindDeclarations[0]" in decision.reason


def test_a_cel_ttl_that_yields_seconds_or_a_duration_expires_by_it():
    assert decide(widget_obj(widget("self.spec.x"), 90), widget("self.spec.x"), POLICY_TTL).expires_at == NOW + 90
    kind = widget("duration(self.spec.x)")
    assert decide(widget_obj(kind, "2m"), kind, POLICY_TTL).expires_at == NOW + 120


def test_a_cel_error_with_applied_by_is_kept_as_the_policys_error_not_left_to_the_controller():
    kind = widget("self.spec.x / 0", applied_by="the Widget controller")
    decision = decide(widget_obj(kind, 5), kind, POLICY_TTL)
    assert decision.verdict is Verdict.POLICY_ERROR  # before: builtin-ttl, "the Widget controller deletes it"
    assert decision.ttl_source == "spec.x (ttl.cel)"


@pytest.mark.parametrize(
    "managed_by, verdict",
    [
        pytest.param("ray.io/kuberay-operator", Verdict.EXPIRES, id="code-derived: its own name (C:107-110)"),
        pytest.param("kueue.x-k8s.io/multikueue", Verdict.MANAGED_ELSEWHERE, id="code-derived: MultiKueue (T:238-239)"),
    ],
)
def test_kuberay_rayjob_managed_by(managed_by, verdict):
    assert decide(rayjob(managedBy=managed_by), RAYJOB, POLICY_TTL).verdict is verdict


# JobSet: ttl_after_finished_test.go. Its controller applies spec.ttlSecondsAfterFinished itself
# (builtin-ttl); the same arithmetic (the Completed/Failed condition's time + TTL) under a policy TTL.
def jobset(conditions=(), ttl=None, **spec):
    return new_kind_obj(
        JOBSET,
        {"replicatedJobs": [], **({"ttlSecondsAfterFinished": ttl} if ttl is not None else {}), **spec},
        {"conditions": list(conditions)},
    )


JOBSET_CASES = [
    pytest.param(jobset(), Verdict.NOT_FINISHED, id="TestTimeLeft/jobset not finished"),
    pytest.param(jobset([condition("Completed")], 0), expires(0), id="TestTimeLeft/jobset completed now, 0s TTL"),
    pytest.param(jobset([condition("Completed")], 10), expires(10), id="TestTimeLeft/jobset completed now, 10s TTL"),
    pytest.param(
        jobset([condition("Completed", "now-10s")], 15), expires(5), id="TestTimeLeft/jobset completed 10s ago, 15s TTL"
    ),
    pytest.param(jobset([condition("Failed")], 0), expires(0), id="TestTimeLeft/jobset failed now, 0s TTL"),
    pytest.param(jobset([condition("Failed")], 10), expires(10), id="TestTimeLeft/jobset failed now, 10s TTL"),
    pytest.param(
        jobset([condition("Failed", "now-10s")], 15), expires(5), id="TestTimeLeft/jobset failed 10s ago, 15s TTL"
    ),
    pytest.param(
        jobset([condition("Completed")]), Verdict.NO_TTL, id="TestCheckIfTTLExpired/jobset completed, TTL not set"
    ),
    pytest.param(jobset([], 10), Verdict.NOT_FINISHED, id="TestCheckIfTTLExpired/jobset running, TTL set"),
    pytest.param(
        jobset([condition("Completed", None)], 10),
        Verdict.NO_FINISH_TIME,
        id="TestCheckIfTTLExpired/invalid jobset completion time",
    ),
    pytest.param(
        jobset([condition("Completed", "now-10s")], 5),
        expires(-5),
        id="TestExecuteTTLAfterFinishedPolicy/jobset completed 10s ago, TTL 5s",
    ),
    pytest.param(
        jobset([condition("Completed", "now-2s")], 5),
        expires(3),
        id="TestExecuteTTLAfterFinishedPolicy/jobset completed 2s ago, TTL 5s",
    ),
    pytest.param(
        jobset([condition("Suspended"), condition("Completed", status="False")]),
        Verdict.NOT_FINISHED,
        id="code-derived: Completed False is not finished (C:1129-1136)",
    ),
]


@pytest.mark.parametrize("job, expected", JOBSET_CASES)
def test_jobset_ttl_after_finished_cases(job, expected):
    own_ttl_left_then_policy(job, JOBSET, ("spec", "ttlSecondsAfterFinished"), expected)


def test_jobset_being_deleted_is_left_alone():
    """TestCheckIfTTLExpired/jobset completed, deletion in progress."""
    job = jobset([condition("Completed")], 10)
    job["metadata"]["deletionTimestamp"] = at("now")
    assert decide(job, JOBSET, POLICY_TTL).verdict is Verdict.BEING_DELETED


@pytest.mark.parametrize(
    "spec, verdict",
    [
        pytest.param(
            {"managedBy": "jobset.sigs.k8s.io/jobset-controller"}, Verdict.EXPIRES, id="code-derived: own name"
        ),
        pytest.param(
            {"managedBy": "kueue.x-k8s.io/multikueue"},
            Verdict.MANAGED_ELSEWHERE,
            id="code-derived: another controller: the whole reconcile is skipped (C:144-147)",
        ),
        pytest.param({"suspend": True}, Verdict.SUSPENDED, id="code-derived: spec.suspend"),
    ],
)
def test_jobset_someone_elses(spec, verdict):
    assert decide(jobset([condition("Completed", "now-1d")], **spec), JOBSET, POLICY_TTL).verdict is verdict


# Volcano: garbagecollector_test.go. The gc-controller applies spec.ttlSecondsAfterFinished to
# Completed/Failed/Terminated jobs (builtin-ttl); from status.state.lastTransitionTime.
def vcjob(phase="Completed", when="now", ttl=None):
    state = {"phase": phase, **({"lastTransitionTime": at(when)} if when else {})}
    return new_kind_obj(
        VOLCANO_JOB,
        {"minAvailable": 1, "tasks": [], **({"ttlSecondsAfterFinished": ttl} if ttl is not None else {})},
        {"state": state},
    )


VOLCANO_CASES = [
    pytest.param(vcjob("Completed", "now", 3), expires(3), id="TestGarbageCollector_ProcessTTL/False Case"),
    pytest.param(vcjob("Completed", "now", 0), expires(0), id="TestGarbageCollector_ProcessTTL/True Case"),
    pytest.param(vcjob("Completed", "now", 3), expires(3), id="TestGarbageCollector_NeedsCleanup/Success Case"),
    pytest.param(vcjob("Running", "now", 3), Verdict.NOT_FINISHED, id="TestGarbageCollector_NeedsCleanup/Failure Case"),
    pytest.param(vcjob("Running", "now"), Verdict.NOT_FINISHED, id="TestGarbageCollector_IsJobFinished/False Case"),
    pytest.param(vcjob("Completed", "now-1d"), Verdict.NO_TTL, id="TestGarbageCollector_IsJobFinished/True Case"),
    pytest.param(
        vcjob("Completed", "now-10s", 3), expires(-7), id="TestGarbageCollector_GetFinishAndExpireTime/Success case"
    ),
    pytest.param(
        vcjob("Completed", None, 3), Verdict.NO_FINISH_TIME, id="TestGarbageCollector_JobFinishTime/Failure Case"
    ),
    pytest.param(vcjob("Failed", "now", 3), expires(3), id="code-derived: Failed is finished (G:271-275)"),
    pytest.param(vcjob("Terminated", "now", 3), expires(3), id="code-derived: Terminated is finished (G:271-275)"),
    pytest.param(
        vcjob("Aborted", "now-1d", 3),
        Verdict.NOT_FINISHED,
        id="code-derived: Aborted is never collected (G:271-275; resumable, S/aborted.go:31-33)",
    ),
    pytest.param(vcjob("Completing", "now", 3), Verdict.NOT_FINISHED, id="code-derived: Completing is transient"),
]


@pytest.mark.parametrize("job, expected", VOLCANO_CASES)
def test_volcano_garbage_collector_cases(job, expected):
    own_ttl_left_then_policy(job, VOLCANO_JOB, ("spec", "ttlSecondsAfterFinished"), expected)


def test_volcano_terminated_is_a_failure_for_the_policy():
    decision = decide(
        vcjob("Terminated", "now-10s"), VOLCANO_JOB, parse_policy({"ttlAfterSuccess": "1h", "ttlAfterFailure": "2h"})
    )
    assert (decision.outcome, decision.expires_at) == (FAILED, NOW - 10 + 7200)


def test_volcano_aborted_counts_only_where_the_policy_opts_in_and_then_its_own_ttl_is_jobttls():
    policy = parse_policy({"ttl": "1h", "optIn": {"batch.volcano.sh/v1alpha1/Job": ["Aborted"]}})
    kind = next(k for k in policy.kinds if k.group == "batch.volcano.sh")
    assert decide(vcjob("Aborted", "now-10s"), VOLCANO_JOB, policy).verdict is Verdict.NOT_FINISHED
    decision = decide(vcjob("Aborted", "now-10s"), kind, policy)
    assert (decision.verdict, decision.outcome, decision.expires_at) == (Verdict.EXPIRES, FAILED, NOW - 10 + 3600)
    # Volcano's gc-controller never collects Aborted jobs: their own TTL is applied by jobttl.
    decision = decide(vcjob("Aborted", "now-10s", ttl=30), kind, policy)
    assert (decision.verdict, decision.expires_at, decision.ttl_source) == (
        Verdict.EXPIRES,
        NOW + 20,
        "spec.ttlSecondsAfterFinished",
    )
    assert decide(vcjob("Completed", "now-10s", ttl=30), kind, policy).verdict is Verdict.BUILTIN_TTL


# Spark operator: pkg/util/sparkapplication_test.go IsExpired / EffectiveTimeToLiveSeconds and
# controller_test.go. The operator applies spec.timeToLiveSeconds itself (builtin-ttl). Its boundary
# is strict (now - terminationTime > ttl); jobttl's is finish + TTL, one rule for every kind (README).
def spark_app(state="COMPLETED", terminated="now", ttl=None):
    status = {"applicationState": {"state": state}, **({"terminationTime": at(terminated)} if terminated else {})}
    return new_kind_obj(
        SPARK_APP,
        {
            "type": "Scala",
            "mode": "cluster",
            "mainClass": "org.apache.spark.examples.SparkPi",
            **({"timeToLiveSeconds": ttl} if ttl is not None else {}),
        },
        status,
    )


SPARK_CASES = [
    pytest.param(spark_app(terminated="now-60s"), Verdict.NO_TTL, id="IsExpired/with a nil TTL/never expires"),
    pytest.param(
        spark_app(terminated="now-30s", ttl=60),
        expires(30),
        id="IsExpired/with a positive TTL/returns false before the TTL elapses",
    ),
    pytest.param(
        spark_app(terminated="now-120s", ttl=60),
        expires(-60),
        id="IsExpired/with a positive TTL/returns true after the TTL elapses",
    ),
    pytest.param(
        spark_app(terminated="now-1s", ttl=0),
        expires(-1),
        id="IsExpired/with a non-positive TTL on a terminated app/expires immediately for a zero TTL",
    ),
    pytest.param(
        spark_app(terminated=None, ttl=0),
        Verdict.NO_FINISH_TIME,
        id="IsExpired/with no termination time/does not expire even for a zero TTL",
    ),
    pytest.param(
        spark_app("FAILED", "now-120s", ttl=60),
        expires(-60),
        id="controller_test: Set TimeToLiveSeconds and make the SparkApplication expired (failed)",
    ),
    pytest.param(
        spark_app("SUCCEEDING", "now-120s", ttl=60),
        Verdict.NOT_FINISHED,
        id="code-derived: SUCCEEDING is not terminated (IsTerminated, U:58-61)",
    ),
    pytest.param(
        spark_app("SUBMISSION_FAILED", "now-120s", ttl=60),
        Verdict.NOT_FINISHED,
        id="code-derived: SUBMISSION_FAILED is retried (C:447-500)",
    ),
    pytest.param(
        spark_app("INVALIDATING", None, ttl=60),
        Verdict.NOT_FINISHED,
        id="code-derived: a spec edit re-runs a terminal app (event_filter.go:186-230)",
    ),
]


@pytest.mark.parametrize("job, expected", SPARK_CASES)
def test_spark_operator_ttl_cases(job, expected):
    own_ttl_left_then_policy(job, SPARK_APP, ("spec", "timeToLiveSeconds"), expected)


def test_a_negative_spark_ttl_is_the_operators_not_an_invalid_one():
    """IsExpired/... expires immediately for a negative TTL: the operator's to apply, so not judged here."""
    assert decide(spark_app(ttl=-5), SPARK_APP, POLICY_TTL).verdict is Verdict.BUILTIN_TTL


# Tekton: pipeline's IsDone (Succeeded not Unknown) and the pruner's completion time; the pruner's
# TTL annotation means the pruner deletes the run (builtin-ttl).
def tekton_run(kind, status="True", reason="Succeeded", completion="now", condition_at="now-5s", annotations=None):
    cond = {"type": "Succeeded", "status": status, "reason": reason, "lastTransitionTime": at(condition_at)}
    fields = {
        "startTime": at("now-1h"),
        "conditions": [cond] if status else [],
        **({"completionTime": at(completion)} if completion else {}),
    }
    return new_kind_obj(
        kind,
        {"pipelineRef": {"name": "p"}} if kind is PIPELINERUN else {"taskRef": {"name": "t"}},
        fields,
        **({"annotations": annotations} if annotations else {}),
    )


TEKTON_CASES = [
    pytest.param(tekton_run(PIPELINERUN), expires(3600), id="TestPipelineRunIsDone (Succeeded True)"),
    pytest.param(
        tekton_run(PIPELINERUN, "False", "Failed"),
        ("expires", NOW + 3600),
        id="TestPipelineRunIsDone (Succeeded False: failed)",
    ),
    pytest.param(
        tekton_run(PIPELINERUN, "False", "Cancelled"),
        expires(3600),
        id="TestPipelineRunIsCancelled (done: Succeeded False)",
    ),
    pytest.param(
        tekton_run(PIPELINERUN, "Unknown", "Running", completion=None),
        Verdict.NOT_FINISHED,
        id="TestPrFuncs_IsCompleted/Not completed - pending",
    ),
    pytest.param(
        tekton_run(PIPELINERUN, None, completion=None),
        Verdict.NOT_FINISHED,
        id="TestPrFuncs_IsCompleted/Not completed - no start time",
    ),
    pytest.param(
        tekton_run(PIPELINERUN, completion=None),
        expires(3595),
        id="TestGetCompletionTime/PipelineRun without completion time (the condition's time)",
    ),
    pytest.param(tekton_run(TASKRUN), expires(3600), id="TestTaskRunIsDone (Succeeded True)"),
    pytest.param(tekton_run(TASKRUN, "False", "TaskRunTimeout"), expires(3600), id="TestTaskRunIsDone (timeout)"),
    pytest.param(
        tekton_run(TASKRUN, "Unknown", "ToBeRetried", completion=None),
        Verdict.NOT_FINISHED,
        id="code-derived: a retried TaskRun is Unknown/ToBeRetried (TR:1402-1412)",
    ),
    pytest.param(
        tekton_run(TASKRUN, annotations={"pruner.tekton.dev/ttlSecondsAfterFinished": "600"}),
        Verdict.BUILTIN_TTL,
        id="code-derived: the pruner's TTL annotation: the pruner deletes it",
    ),
]


@pytest.mark.parametrize("job, expected", TEKTON_CASES)
def test_tekton_run_cases(job, expected):
    check(decide(job, KINDS[f"{job['apiVersion']}/{job['kind']}"], POLICY_TTL), expected)


def test_a_failed_tekton_run_is_a_failure_for_the_policy():
    decision = decide(
        tekton_run(PIPELINERUN, "False", "Failed"),
        PIPELINERUN,
        parse_policy({"ttlAfterSuccess": "1h", "ttlAfterFailure": "2h"}),
    )
    assert (decision.outcome, decision.expires_at, decision.finished_from) == (
        FAILED,
        NOW + 7200,
        "status.completionTime",
    )


def test_a_taskrun_of_a_pipelinerun_is_its_owners():
    run = tekton_run(TASKRUN)
    run["metadata"]["ownerReferences"] = [
        {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": "p", "uid": "u", "controller": True}
    ]
    assert decide(run, TASKRUN, POLICY_TTL).verdict is Verdict.OWNED
