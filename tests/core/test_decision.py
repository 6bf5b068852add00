"""When is a job finished, and when does it expire? (jobttl.core.domain.decisions.decision)

The owned-object table has no upstream test to port: no upstream TTL controller looks at
ownerReferences (kubernetes/kubernetes pkg/controller/ttlafterfinished/
ttlafterfinished_controller.go @ 003e86297d18a8538c9da3619871393f9703bf70 deletes any Job that
asks for a TTL, owned or not). Its rows are code-derived from that and from who owns what
upstream: CronJob children (pkg/controller/cronjob), JobSet children such as Trainer's
initializer Jobs (kubeflow/trainer @ 8c0f5059 pkg/runtime/framework/plugins/jobset/jobset.go:425-445),
mpi-operator launchers (kubeflow/mpi-operator @ caa3c47f pkg/controller/mpi_job_controller.go:1563),
Argo CronWorkflow children.
"""

import copy
import re

import pytest

from tests.fixtures import finished_status, finished_tfjob_sample, job_object, running_status, tfjob, with_server_fields
from jobttl.core.domain.decisions.decision import Verdict, controller_owner, decide, invalid_ttl_message
from jobttl.core.domain.kinds.registry import BATCH_JOB, TFJOB, WORKFLOW
from jobttl.core.domain.kinds.model import UnreadableField, parse_time
from jobttl.core.domain.rules.policy import parse_policy


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


def test_garbage_in_status_is_unreadable_and_kept_rather_than_an_error():
    """issue 26 §9: not "not finished" (a field misread as absent), nor a traceback: kept, the field named."""
    for status, field in (
        ({"conditions": "nope"}, "status.conditions: expected a list of conditions, got a string"),
        ({"conditions": [None, 3]}, "status.conditions[0]: expected a condition (an object), got null"),
    ):
        decision = decide(job(ttl=10, status=status), TFJOB)
        assert decision.verdict is Verdict.UNREADABLE and decision.reason.startswith(field), decision.reason


def test_the_admins_cap_applies_before_absurd_values_are_judged():
    from jobttl.core.domain.rules.policy import parse_policy

    def finished(ttl, **annotations):
        obj = with_server_fields(tfjob("capped", "team", ttl=ttl))
        obj["status"] = finished_status(1_700_000_000)
        obj["metadata"]["annotations"] = annotations
        return obj

    capped = parse_policy({"maxTTL": "7d"})
    assert decide(finished(9_999_999_999), TFJOB, capped).ttl == 7 * 86400
    keep_until = decide(finished(60, **{"jobttl.io/keep-until": "2200-01-01T00:00:00Z"}), TFJOB, capped)
    assert keep_until.verdict is Verdict.EXPIRES and keep_until.ttl == 7 * 86400


# --- jobs someone else owns, suspends or runs -----------------------------------------------------

POLICY_TTL = parse_policy({"ttl": "1h"})


def owned(kind, owner_kind, owner_name, controller=True, ttl=None):
    obj = with_server_fields(job_object(kind, "child", "team", at=1_700_000_000, ttl=ttl))
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "x/v1",
            "kind": owner_kind,
            "name": owner_name,
            "uid": "0b7c3e1e-6b1a-4a57-9d7e-3f7a3f0e0c11",
            "controller": controller,
            "blockOwnerDeletion": True,
        }
    ]
    return obj


OWNED_CASES = [
    pytest.param(
        owned(BATCH_JOB, "CronJob", "nightly"),
        Verdict.OWNED,
        "owned-by CronJob/nightly",
        id="code-derived: CronJob child, policy TTL",
    ),
    pytest.param(
        owned(BATCH_JOB, "JobSet", "trainer-run"),
        Verdict.OWNED,
        "owned-by JobSet/trainer-run",
        id="code-derived: JobSet child (Trainer initializer), policy TTL",
    ),
    pytest.param(
        owned(BATCH_JOB, "MPIJob", "pi", ttl=10),
        Verdict.BUILTIN_TTL,
        "Kubernetes",
        id="code-derived: owned Job (e.g. mpi launcher) with its own TTL: the built-in controller's",
    ),
    pytest.param(
        owned(BATCH_JOB, "CronJob", "nightly", controller=False),
        Verdict.EXPIRES,
        "ttl of policy",
        id="code-derived: an ownerReference that is not the controller",
    ),
    pytest.param(
        owned(TFJOB, "PipelineRun", "p1", ttl=60),
        Verdict.OWNED,
        "owned-by PipelineRun/p1",
        id="code-derived: owned TFJob with its own TTL (differs: the training operator would delete it)",
    ),
    pytest.param(
        owned(WORKFLOW, "CronWorkflow", "hourly", ttl={"secondsAfterCompletion": 60}),
        Verdict.OWNED,
        "owned-by CronWorkflow/hourly",
        id="code-derived: CronWorkflow child (Argo's own GC still expires it)",
    ),
]


@pytest.mark.parametrize("obj, verdict, words", OWNED_CASES)
def test_owned_objects_are_their_owners(obj, verdict, words):
    decision = decide(obj, {"Job": BATCH_JOB, "TFJob": TFJOB, "Workflow": WORKFLOW}[obj["kind"]], POLICY_TTL)
    assert decision.verdict is verdict
    assert words in decision.reason
    if verdict is Verdict.OWNED:
        assert decision.reason.startswith(words) and "owned: delete" in decision.reason


@pytest.mark.parametrize(
    "references, owner",
    [
        (None, None),
        ([{"kind": "CronJob", "name": "a"}], None),
        (
            [{"kind": "ReplicaSet", "name": "x"}, {"kind": "CronJob", "name": "nightly", "controller": True}],
            "CronJob/nightly",
        ),
        ([{"controller": True}], "?/?"),
    ],
)
def test_only_a_controller_owner_reference_counts(references, owner):
    assert controller_owner({"ownerReferences": references}) == owner


@pytest.mark.parametrize(
    "references, field",
    [
        ("garbage", "metadata.ownerReferences: expected a list, got a string"),
        ({"controller": True}, "metadata.ownerReferences: expected a list, got an object"),
        (
            [None, {"kind": "CronJob", "name": "a", "controller": True}],
            "metadata.ownerReferences[0]: expected an owner reference (an object), got null",
        ),
        (
            [{"kind": "CronJob", "name": "a", "controller": "true"}],
            "metadata.ownerReferences[0].controller: expected true or false, got a string",
        ),
    ],
)
def test_owner_references_that_cannot_be_read_are_not_read_as_none(references, field):
    """Before issue 26 these read as "no owner": a CronJob's Job behind a map of references expired."""
    with pytest.raises(UnreadableField, match=re.escape(field)):
        controller_owner({"ownerReferences": references})


def test_what_is_someone_elses_is_said_in_a_fixed_order():
    """Being deleted, out of scope, run by another controller: before finished-ness (that one never
    changes); then the built-in TTL controller's, suspended, owned, kept, archiving, the TTL."""
    obj = owned(TFJOB, "CronJob", "nightly", ttl=0)
    obj["spec"]["runPolicy"].update(suspend=True, managedBy="kueue.x-k8s.io/multikueue")
    obj["metadata"]["annotations"] = {"jobttl.io/keep": "true"}
    order = [Verdict.MANAGED_ELSEWHERE, Verdict.SUSPENDED, Verdict.OWNED, Verdict.KEPT, Verdict.EXPIRES]
    seen = []
    for undo in (
        lambda: obj["spec"]["runPolicy"].pop("managedBy"),
        lambda: obj["spec"]["runPolicy"].pop("suspend"),
        lambda: obj["metadata"].pop("ownerReferences"),
        lambda: obj["metadata"].pop("annotations"),
        lambda: None,
    ):
        seen.append(decide(obj, TFJOB).verdict)
        undo()
    assert seen == order
    running = {**obj, "status": running_status(1_700_000_000), "spec": {"runPolicy": {"managedBy": "x"}}}
    assert decide(running, TFJOB).verdict is Verdict.MANAGED_ELSEWHERE
    running["metadata"] = {**running["metadata"], "deletionTimestamp": "2023-11-14T22:13:20Z"}
    assert decide(running, TFJOB).verdict is Verdict.BEING_DELETED


# --- what the InvalidTTL Event says (jobttl.core.services.scheduled_events posts it) -------------------------------


def test_an_unreadable_ttl_annotation_keeps_the_job_rather_than_fall_back_to_another_ttl():
    obj = job(ttl=60, status=finished_status(1_700_000_000))  # its own field would say 60 s
    obj["metadata"]["annotations"] = {"jobttl.io/ttl": "10 minutes"}
    decision = decide(obj, TFJOB, parse_policy({"ttl": "1h"}))  # and the policy 1 h
    assert decision.verdict is Verdict.INVALID_TTL and decision.expires_at is None
    assert decision.ttl_source == "annotation jobttl.io/ttl"


def test_the_invalid_ttl_message_names_the_value_the_accepted_forms_and_that_the_job_stays():
    obj = job(status=finished_status(1_700_000_000))
    obj["metadata"]["annotations"] = {"jobttl.io/ttl": "10 minutes"}
    decision = decide(obj, TFJOB)
    assert invalid_ttl_message("TFJob", decision.reason, decision.ttl_source) == (
        "annotation jobttl.io/ttl: expected a duration such as 90s, 36h, 7d, 2w, 1h30m (whole numbers with s, m, "
        "h, d or w, no spaces) or plain seconds (3600), got '10 minutes'; jobttl will not delete this TFJob until "
        "annotation jobttl.io/ttl is fixed or removed"
    )


def test_the_invalid_ttl_message_for_keep_until_and_for_the_jobs_own_field():
    obj = job(ttl=60, status=finished_status(1_700_000_000))
    obj["metadata"]["annotations"] = {"jobttl.io/keep-until": "next friday"}
    decision = decide(obj, TFJOB)
    assert invalid_ttl_message("TFJob", decision.reason, decision.ttl_source) == (
        "annotation jobttl.io/keep-until must be an RFC 3339 time such as 2030-01-31T00:00:00Z within 100 years, "
        "got 'next friday'; jobttl will not delete this TFJob until annotation jobttl.io/keep-until is fixed or "
        "removed"
    )
    obj = job(ttl=-5, status=finished_status(1_700_000_000))
    decision = decide(obj, TFJOB)
    assert invalid_ttl_message("TFJob", decision.reason, decision.ttl_source) == (
        "spec.runPolicy.ttlSecondsAfterFinished must be a non-negative integer, got -5; jobttl will not delete this "
        "TFJob until spec.runPolicy.ttlSecondsAfterFinished is fixed or removed"
    )


def test_a_huge_invalid_value_is_quoted_cut_short():
    obj = job(status=finished_status(1_700_000_000))
    obj["metadata"]["annotations"] = {"jobttl.io/ttl": "x" * 100_000}
    decision = decide(obj, TFJOB)
    assert decision.verdict is Verdict.INVALID_TTL
    assert "'xxxx" in decision.reason and len(decision.reason) < 300


# --- issue 26 §9: every field a declaration reads is type-checked where it is read ------------------


def _set(path: str, value):
    """A change setting the dotted `path` (list indexes as numbers) of an object to `value`."""

    def change(obj):
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node = obj
        for part in parents:
            node = node[part]
        node[last] = value

    return change


@pytest.mark.parametrize(
    "kind, change, field",
    [
        (
            TFJOB,
            _set("status.conditions.2.type", {"x": 1}),
            "status.conditions[2].type: expected a string, got an object",
        ),
        (
            TFJOB,
            _set("status.conditions.0.status", ["True"]),
            "status.conditions[0].status: expected a string, got a list",
        ),
        (
            TFJOB,
            _set("status.conditions", {"Succeeded": "True"}),
            "status.conditions: expected a list of conditions, got an object",
        ),
        (
            TFJOB,
            _set("status.conditions.1", "Running"),
            "status.conditions[1]: expected a condition (an object), got a string",
        ),
        (
            TFJOB,
            _set("status.completionTime", 1_700_000_000),
            "status.completionTime: expected an RFC 3339 time (a string), got a number",
        ),
        (TFJOB, _set("status", ["Succeeded"]), "status: expected an object, got a list"),
        (TFJOB, _set("spec.runPolicy", [1]), "spec.runPolicy: expected an object, got a list"),
        (TFJOB, _set("spec.runPolicy.managedBy", ["kueue"]), "spec.runPolicy.managedBy: expected a string, got a list"),
        (
            TFJOB,
            _set("metadata.annotations", ["jobttl.io/keep=true"]),
            "metadata.annotations: expected a map of strings, got a list",
        ),
        (TFJOB, _set("metadata.labels", "pin"), "metadata.labels: expected a map of strings, got a string"),
        (
            BATCH_JOB,
            _set("status.conditions.1.lastTransitionTime", {"t": 1}),
            "status.conditions[1].lastTransitionTime: expected an RFC 3339 time (a string), got an object",
        ),
        (
            BATCH_JOB,
            _set("metadata.ownerReferences", {"controller": True}),
            "metadata.ownerReferences: expected a list",
        ),
        (WORKFLOW, _set("status.phase", {"Succeeded": True}), "status.phase: expected a string, got an object"),
        (
            WORKFLOW,
            _set("status.finishedAt", 5),
            "status.finishedAt: expected an RFC 3339 time (a string), got a number",
        ),
        (
            WORKFLOW,
            _set("metadata.labels", {"workflows.argoproj.io/workflow-archiving-status": 5}),
            'metadata.labels["workflows.argoproj.io/workflow-archiving-status"]: expected a string, got a number',
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_unreadable_and_kept_naming_it(kind, change, field):
    obj = with_server_fields(job_object(kind, "odd", ttl=60 if kind is TFJOB else None))
    obj["metadata"].setdefault("labels", {})
    change(obj)
    decision = decide(obj, kind, parse_policy({"ttl": "1h"}))
    assert decision.verdict is Verdict.UNREADABLE, decision
    assert decision.reason.startswith(field), decision.reason
    assert decision.reason.endswith(
        f"(read as its built-in declaration says): jobttl keeps this {kind.kind} until the field is fixed"
    )


# --- issue 26 §3: jobttl.io/keep fails closed; a jobttl.io/ key jobttl does not know keeps ---------

SELECTING = parse_policy(
    {
        "ttl": "1h",
        "rules": [
            {"name": "release", "selector": {"matchLabels": {"jobttl.io/release": "true"}}, "ttl": "2h"},
            {
                "name": "grouped",
                "namespaces": ["grouped"],
                "keepLast": {"succeeded": 3, "groupBy": "jobttl.io/pipeline"},
            },
        ],
    }
)


def annotated(annotations=None, labels=None):
    obj = with_server_fields(job_object(TFJOB, "kept"))
    obj["metadata"]["annotations"] = annotations or {}
    obj["metadata"]["labels"] = labels or {}
    return obj


@pytest.mark.parametrize(
    "value, verdict, warning",
    [
        ("true", Verdict.KEPT, None),
        ("false", Verdict.EXPIRES, None),  # the one value that does not keep
        *[
            (value, Verdict.KEPT, "InvalidKeep")
            for value in ("yes", "1", "true ", "TRUE", "True", "False", "FALSE", "no", "0", "", " false", "off")
        ],
    ],
)
def test_anything_but_an_explicit_false_keeps(value, verdict, warning):
    decision = decide(annotated({"jobttl.io/keep": value}), TFJOB, SELECTING)
    assert (decision.verdict, decision.warning) == (verdict, warning)
    if warning:
        assert decision.reason.startswith(f'annotation jobttl.io/keep is {value!r}, neither "true" nor "false"')


@pytest.mark.parametrize(
    "annotations, labels, words",
    [
        (
            {"jobttl.io/kepp": "true"},
            {},
            "annotation jobttl.io/kepp is not a key jobttl knows (did you mean annotation jobttl.io/keep?)",
        ),
        ({"jobttl.io/ttl-seconds": "30"}, {}, "(did you mean annotation jobttl.io/ttl?)"),
        ({"jobttl.io/keepuntil": "2030-01-01T00:00:00Z"}, {}, "(did you mean annotation jobttl.io/keep-until?)"),
        (
            {},
            {"jobttl.io/keep": "true"},
            "label jobttl.io/keep is not a key jobttl knows (did you mean annotation jobttl.io/keep?)",
        ),
        ({}, {"jobttl.io/relase": "true"}, "(did you mean label jobttl.io/release?)"),
        ({"jobtll.io/keep": "true"}, {}, "annotation jobtll.io/keep is not a key"),
        ({"JobTTL.io/keep": "true"}, {}, "annotation JobTTL.io/keep is not a key"),
        (
            {"jobttl.io/owner": "ml-team"},
            {},
            "(jobttl reads the annotations jobttl.io/ttl, jobttl.io/keep, jobttl.io/keep-until, jobttl.io/notify)",
        ),
        ({"jobttl.io/keep": "false", "jobttl.io/tll": "1h"}, {}, "annotation jobttl.io/tll is not a key"),
        # The prefix misspelt (before: not ours, so the job expired).
        (
            {"jobttl/keep": "true"},
            {},
            "annotation jobttl/keep is not a key jobttl knows (did you mean annotation jobttl.io/keep?)",
        ),
        (
            {"jobttl.io.keep": "true"},
            {},
            "annotation jobttl.io.keep is not a key jobttl knows (did you mean annotation jobttl.io/keep?)",
        ),
        ({"jobttl.com/keep": "true"}, {}, "(did you mean annotation jobttl.io/keep?)"),
        ({"JOBTTL.COM/keep-until": "2030-01-01T00:00:00Z"}, {}, "(did you mean annotation jobttl.io/keep-until?)"),
        ({"jobtl.io/keep": "true"}, {}, "(did you mean annotation jobttl.io/keep?)"),
        ({"jbottl.io/ttl": "30d"}, {}, "(did you mean annotation jobttl.io/ttl?)"),
        ({"job-ttl/keep": "true"}, {}, "(did you mean annotation jobttl.io/keep?)"),
        (
            {},
            {"jobttl.keep": "true"},
            "label jobttl.keep is not a key jobttl knows (did you mean annotation jobttl.io/keep?)",
        ),
    ],
)
def test_a_jobttl_key_jobttl_does_not_know_keeps_the_job_naming_the_nearest(annotations, labels, words):
    decision = decide(annotated(annotations, labels), TFJOB, SELECTING)
    assert (decision.verdict, decision.warning) == (Verdict.KEPT, "UnknownKey")
    assert words in decision.reason and decision.reason.endswith("jobttl keeps this TFJob until it is fixed or removed")


def test_forged_unknown_keys_cost_one_nearest_lookup_and_no_memory_kept(monkeypatch):
    # A forged event may carry thousands of long jobttl.io/ keys: only the first is reported, so only
    # its nearest key is looked for; and `_ours` must not remember every whole key it was asked.
    from jobttl.core.domain.decisions import decision as module

    looked = []
    real = module._nearest
    monkeypatch.setattr(module, "_nearest", lambda key, known: looked.append(key) or real(key, known))
    remembered = getattr(module, "_ours_prefix", module._ours)  # what the prefix check remembers
    remembered.cache_clear()
    long = {f"jobttl.io/{i:04}-" + "x" * 2000: "1" for i in range(300)}
    decision = decide(annotated(long, {}), TFJOB, SELECTING)
    assert (decision.verdict, decision.warning) == (Verdict.KEPT, "UnknownKey")
    assert looked == ["jobttl.io/0000-" + "x" * 2000]
    assert "annotation jobttl.io/0000-xxx" in decision.reason and len(decision.reason) < 400
    assert remembered.cache_info().currsize == 1  # by the prefix alone, not 300 keys of 2 KB


@pytest.mark.parametrize(
    "annotations, labels",
    [
        ({}, {"jobttl.io/release": "true"}),  # a label the policy's selector names
        ({}, {"jobttl.io/pipeline": "nightly"}),  # a label keepLast groups by
        ({"example.com/keep": "true", "jobttl.example.com/x": "1"}, {}),  # other prefixes are not ours
        ({"jobttl.io/ttl": "2h", "jobttl.io/keep-until": "2000-01-01T00:00:00Z"}, {}),
        ({"jobttl.io/notify": "team-ml"}, {}),  # the owner asks for its messages (docs/notifications.md)
        ({"jobtitle/keep": "true", "batch.io/keep": "true", "jobs.io/keep": "1", "job/ttl": "1s"}, {}),  # not near
        ({"app.kubernetes.io/name": "x", "kubeflow.org/keep": "true", "jobttl.example.com/keep": "true"}, {}),
    ],
)
def test_the_keys_jobttl_reads_and_other_prefixes_expire_as_usual(annotations, labels):
    assert decide(annotated(annotations, labels), TFJOB, SELECTING).verdict is Verdict.EXPIRES


def test_the_rule_is_the_same_wherever_it_is_decided():
    """The sink, the resync and the worker all call decide(): one rule, in the pure domain."""
    obj = annotated({"jobttl.io/keep": "yes"})
    assert decide(obj, TFJOB, SELECTING) == decide(copy.deepcopy(obj), TFJOB, SELECTING)


def test_a_misspelt_prefix_is_found_reading_a_bounded_head_of_any_key():
    """The check reads only a key's first characters: a 100,000-character key costs what a short one does."""
    from jobttl.core.domain.decisions import decision as module

    assert module._after_prefix("jobttl.io." + "k" * 100_000) == "k" * 100_000
    assert module._after_prefix("x" * 100_000 + "/keep") is None
