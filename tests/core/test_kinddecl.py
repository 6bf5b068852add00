"""Kind declarations (jobttl.core.domain.kinds.declarations): the schema shipped with the package, the errors that
name the field, and the built-in kinds as the single source of truth."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from jsonschema import Draft202012Validator

from jobttl.core.domain.kinds import declarations as kinddecl
from jobttl.core.domain.decisions.decision import Verdict, decide
from jobttl.core.domain.kinds.declarations import KindError, compile_kinds, parse_path
from jobttl.core.domain.kinds.registry import ALL_KINDS, BUILTIN_KINDS, DEFAULT_KINDS, TFJOB, WORKFLOW
from jobttl.core.domain.rules.policy import parse_policy

WIDGET = {
    "group": "widgets.example.com",
    "version": "v1",
    "kind": "Widget",
    "plural": "widgets",
    "finished": {
        "conditions": [
            {"type": "Done", "status": "True", "outcome": "succeeded"},
            {"type": "Broken", "outcome": "failed"},
        ]
    },
    "finishedAt": ["status.finishedAt", "condition.lastTransitionTime"],
}


def widget(**change) -> dict:
    decl = copy.deepcopy(WIDGET)
    decl.update(change)
    return decl


def refused(items, where="kinds") -> str:
    with pytest.raises(KindError) as caught:
        compile_kinds(items, "kinds.yaml", where)
    return str(caught.value)


def test_the_schema_is_a_valid_json_schema_and_the_builtin_file_follows_it():
    schema = json.loads(kinddecl.SCHEMA_FILE.read_text())
    Draft202012Validator.check_schema(schema)
    assert not list(Draft202012Validator(schema).iter_errors(yaml.safe_load(kinddecl.BUILTIN_FILE.read_text())))


def test_every_builtin_kind_comes_from_the_shipped_declarations():
    declared = {kinddecl.key(d) for d in kinddecl.builtin_declarations().values()}
    assert declared == {f"{k.api_version}/{k.kind}" for k in BUILTIN_KINDS}
    assert set(ALL_KINDS) <= set(BUILTIN_KINDS)


@pytest.mark.parametrize(
    "items, message",
    [
        (
            [widget(), widget(), widget(), {k: v for k, v in WIDGET.items() if k != "plural"}],
            "kinds.yaml: kinds[3].plural: required",
        ),
        (
            [widget(finished={"conditions": [{"type": "Done", "status": "true", "outcome": "succeeded"}]})],
            "kinds.yaml: kinds[0].finished.conditions[0].status: 'true' is not one of ['True', 'False']",
        ),
        (
            [widget(finished={"conditions": [{"type": "Done", "outcome": "finished"}]})],
            "kinds.yaml: kinds[0].finished.conditions[0].outcome: 'finished' is not one of ['succeeded', 'failed']",
        ),
        (
            [widget(finished={"state": {"path": "status.phase", "values": {"Done": "success"}}})],
            "kinds.yaml: kinds[0].finished.state.values.Done: 'success' is not one of ['succeeded', 'failed']",
        ),
        (
            [widget(finishedAt=["finishedAt"])],
            "kinds.yaml: kinds[0].finishedAt[0]: 'finishedAt' is not a path to an RFC 3339 time",
        ),
        ([widget(suspend="spec..suspend")], "kinds.yaml: kinds[0].suspend: 'spec..suspend' is not a dotted path"),
        (
            [widget(ttl={"paths": ["ttlSeconds"]})],
            "kinds.yaml: kinds[0].ttl.paths[0]: 'ttlSeconds' is not a dotted path",
        ),
        ([widget(finshed=1)], "kinds.yaml: kinds[0].finshed: unknown field"),
        ([widget(finished={})], "kinds.yaml: kinds[0].finished: set exactly one of conditions or state"),
        (
            [
                widget(
                    finished={"state": {"path": "status.phase", "values": {"Done": "succeeded"}}},
                    finishedAt=["condition.lastTransitionTime"],
                )
            ],
            "kinds.yaml: kinds[0].finishedAt[0]: 'condition.lastTransitionTime' reads the finishing condition",
        ),
        (
            [widget(ttl={"within": ["spec.ttlStrategy"], "keys": {"Finished": ["seconds"]}})],
            "kinds.yaml: kinds[0].ttl.keys.Finished: names no state this kind finishes in (Broken, Done)",
        ),
        (
            [widget(ttl={"paths": ["spec.ttl"], "notAppliedFor": ["Done"]})],
            "kinds.yaml: kinds[0].ttl.notAppliedFor: only with appliedBy",
        ),
        (
            [widget(ttl={"paths": ["spec.ttl"], "within": ["spec.ttlStrategy"]})],
            "kinds.yaml: kinds[0].ttl: set exactly one of paths",
        ),
        (
            [widget(ttl={"cel": "self.spec.", "celWhen": "spec.x", "celInputs": ["spec.x"]})],
            "kinds.yaml: kinds[0].ttl.cel: line 1, column 10 of the expression: not a valid CEL expression: "
            "unexpected '.'",
        ),
        ([widget(ttl={"cel": "1", "celWhen": "spec.x"})], "kinds.yaml: kinds[0].ttl.celInputs: required with cel"),
        ([widget(), widget()], "kinds.yaml: kinds[1]: widgets.example.com/v1/Widget is already declared at kinds[0]"),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_field(items, message):
    assert refused(items).startswith(message)


def test_errors_name_the_policy_section_the_declaration_is_in():
    assert refused([widget(plural=None)], "kindDeclarations").startswith("kinds.yaml: kindDeclarations[0].plural:")


@pytest.mark.parametrize(
    "text, path",
    [
        ("status.completionTime", ("status", "completionTime")),
        (
            'metadata.labels["workflows.argoproj.io/workflow-archiving-status"]',
            ("metadata", "labels", "workflows.argoproj.io/workflow-archiving-status"),
        ),
        ('metadata.annotations["a.b/c"].x', ("metadata", "annotations", "a.b/c", "x")),
    ],
)
def test_paths_read_dotted_and_bracketed_keys(text, path):
    assert parse_path(text) == path


def test_a_declared_kind_reads_conditions_states_and_finish_times_in_order():
    (kind,) = compile_kinds([widget()], "t")
    done = {
        "apiVersion": "widgets.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "n"},
        "status": {
            "conditions": [{"type": "Done", "status": "True", "lastTransitionTime": "2030-01-01T00:00:10Z"}],
            "finishedAt": "2030-01-01T00:00:00Z",
        },
    }
    finish = kind.finish(done)
    assert (finish.outcome, finish.reason, finish.time, finish.field) == (
        "succeeded",
        "Done",
        1893456000,
        "status.finishedAt",
    )
    del done["status"]["finishedAt"]
    assert kind.finish(done).field == "status.conditions[Done].lastTransitionTime"
    done["status"]["conditions"][0]["status"] = "False"
    assert kind.finish(done) is None
    policy = parse_policy({"ttl": "1h"})
    done["status"]["conditions"] = [{"type": "Broken", "status": "True", "lastTransitionTime": "2030-01-01T00:00:00Z"}]
    decision = decide(done, kind, policy)
    assert (decision.verdict, decision.outcome, decision.expires_at) == (Verdict.EXPIRES, "failed", 1893456000 + 3600)


def test_a_condition_with_status_false_can_say_failed():
    (kind,) = compile_kinds(
        [
            widget(
                finished={
                    "conditions": [
                        {"type": "Succeeded", "status": "True", "outcome": "succeeded"},
                        {"type": "Succeeded", "status": "False", "outcome": "failed"},
                    ]
                }
            )
        ],
        "t",
    )
    obj = {
        "status": {
            "conditions": [
                {
                    "type": "Succeeded",
                    "status": "False",
                    "reason": "Cancelled",
                    "lastTransitionTime": "2030-01-01T00:00:00Z",
                }
            ],
            "finishedAt": None,
        }
    }
    assert (kind.finish(obj).outcome, kind.finish(obj).reason) == ("failed", "Succeeded=False")
    obj["status"]["conditions"][0]["status"] = "Unknown"
    assert kind.finish(obj) is None


def test_the_builtin_declarations_are_what_the_kinds_read():
    """One source of truth: editing kinds.yaml's TFJob TTL path changes what a TFJob reads."""
    decls = copy.deepcopy(list(kinddecl.builtin_declarations().values()))
    tfjob = next(d for d in decls if kinddecl.key(d) == "kubeflow.org/v1/TFJob")
    tfjob["ttl"] = {"paths": ["spec.someOtherTTL"]}
    edited = next(k for k in compile_kinds(decls, "t") if k.kind == "TFJob")
    obj = {"spec": {"runPolicy": {"ttlSecondsAfterFinished": 5}, "someOtherTTL": 9}}
    assert TFJOB.own_ttl(obj, None).value == 5
    assert edited.own_ttl(obj, None).value == 9


def test_argo_archiving_hold_names_the_label():
    wf = {"metadata": {"labels": {"workflows.argoproj.io/workflow-archiving-status": "Pending"}}}
    assert WORKFLOW.hold(wf).startswith("label workflows.argoproj.io/workflow-archiving-status is Pending: ")
    assert WORKFLOW.hold({"metadata": {"labels": {}}}) is None


# --- in the policy: kindDeclarations and optIn -----------------------------------------------------

from jobttl.core.domain.rules.policy import PolicyError  # noqa: E402


def policy_error(data) -> str:
    with pytest.raises(PolicyError) as caught:
        parse_policy(data, "policy.yaml")
    return str(caught.value)


def test_a_declared_kind_is_known_and_enabled_unless_kinds_says_otherwise():
    policy = parse_policy({"kindDeclarations": [WIDGET]})
    widget_kind = [k for k in policy.known_kinds if k.kind == "Widget"]
    assert widget_kind and widget_kind[0] in policy.kinds
    assert set(DEFAULT_KINDS) <= set(policy.kinds)
    chosen = parse_policy({"kindDeclarations": [WIDGET], "kinds": ["widgets.example.com/v1/Widget"]})
    assert [k.kind for k in chosen.kinds] == ["Widget"]
    assert policy_error({"kinds": ["Widget"]}).startswith("policy.yaml: kinds[0]: unknown kind 'Widget'")


def test_a_declaration_of_a_builtin_kind_replaces_it():
    tfjob = copy.deepcopy(kinddecl.builtin_declarations()["kubeflow.org/v1/TFJob"])
    tfjob["ttl"] = {"paths": ["spec.runPolicy.ttlSecondsAfterFinished"], "appliedBy": "our own TFJob reaper"}
    policy = parse_policy({"kindDeclarations": [tfjob]})
    (replaced,) = [k for k in policy.known_kinds if (k.api_version, k.kind) == ("kubeflow.org/v1", "TFJob")]
    assert replaced is not TFJOB and replaced in policy.kinds and TFJOB not in policy.kinds
    assert replaced.builtin_ttl_controller and replaced.ttl_controller == "our own TFJob reaper"


@pytest.mark.parametrize(
    "data, message",
    [
        ({"kindDeclarations": {"kind": "Widget"}}, "policy.yaml: kindDeclarations: expected a list"),
        ({"kindDeclarations": [widget(plural=None)]}, "policy.yaml: kindDeclarations[0].plural: None is not of type"),
        (
            {"kindDeclarations": [{k: v for k, v in WIDGET.items() if k != "finished"}]},
            "policy.yaml: kindDeclarations[0].finished: required",
        ),
        ({"optIn": ["Aborted"]}, "policy.yaml: optIn: expected a mapping"),
        ({"optIn": {"Job": ["Aborted"]}}, "policy.yaml: optIn.Job: names no known kind"),
        (
            {"optIn": {"batch.volcano.sh/v1alpha1/Job": ["Aborting"]}},
            "policy.yaml: optIn.batch.volcano.sh/v1alpha1/Job[0]: 'Aborting' is not an opt-in state of "
            "batch.volcano.sh/v1alpha1/Job (it has: Aborted)",
        ),
        (
            {"optIn": {"batch/v1/Job": ["Failed"]}},
            "policy.yaml: optIn.batch/v1/Job[0]: 'Failed' is not an opt-in state",
        ),
    ],
)
def test_a_bad_kind_section_of_the_policy_is_refused_naming_the_field(data, message):
    assert policy_error(data).startswith(message)


# --- every path of a built-in declaration names a field of its upstream CRD ------------------------

from pathlib import Path  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"
UPSTREAM_CRDS = {
    "kubeflow.org/v1/TFJob": "kubeflow/kubeflow.org_tfjobs.yaml",
    "kubeflow.org/v1/PyTorchJob": "kubeflow/kubeflow.org_pytorchjobs.yaml",
    "argoproj.io/v1alpha1/Workflow": "kubeflow/argoproj.io_workflows.yaml",
    "ray.io/v1/RayJob": "rayjob/ray.io_rayjobs.yaml",
    "jobset.x-k8s.io/v1alpha2/JobSet": "jobset/jobset.x-k8s.io_jobsets.yaml",
    "batch.volcano.sh/v1alpha1/Job": "volcano/batch.volcano.sh_jobs.yaml",
    "sparkoperator.k8s.io/v1beta2/SparkApplication": "spark/sparkoperator.k8s.io_sparkapplications.yaml",
    "tekton.dev/v1/PipelineRun": "tekton/300-pipelinerun.yaml",
    "tekton.dev/v1/TaskRun": "tekton/300-taskrun.yaml",
}


# Deliberately beyond the CRD: the pre-1.2 TTL older Kubeflow objects still carry (README, "Where
# jobttl differs from upstream").
BEYOND_THE_CRD = {("kubeflow.org", "spec.ttlSecondsAfterFinished")}


def declared_paths(decl: dict) -> list[tuple[str, str]]:
    """(where, path) of every object path a declaration reads (condition.X as status.conditions[].X)."""
    finished, ttl = decl["finished"], decl.get("ttl") or {}
    paths = (
        [("finished.state.path", finished["state"]["path"])]
        if "state" in finished
        else [("finished.conditions", "status.conditions")]
    )
    paths += [
        (f"finishedAt[{i}]", "status.conditions.*." + p[len("condition.") :] if p.startswith("condition.") else p)
        for i, p in enumerate(decl["finishedAt"])
    ]
    for key in ("paths", "within", "celInputs"):
        paths += [(f"ttl.{key}[{i}]", p if isinstance(p, str) else p["path"]) for i, p in enumerate(ttl.get(key, ()))]
    paths += [("managedBy.path", decl["managedBy"]["path"])] if "managedBy" in decl else []
    paths += [("suspend", decl["suspend"])] if "suspend" in decl else []
    return paths


def names_a_field(schema: dict, path: tuple[str, ...]) -> bool:
    for key in path:
        if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
            return True  # Argo's minimal CRD: spec and status hold anything
        if key == "*":
            schema = schema.get("items") or {}
        elif key in (schema.get("properties") or {}):
            schema = schema["properties"][key]
        elif isinstance(schema.get("additionalProperties"), dict):
            schema = schema["additionalProperties"]
        else:
            return False
    return True


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="the upstream CRDs (../shared/reference) are not here")
@pytest.mark.parametrize("name", sorted(UPSTREAM_CRDS))
def test_every_path_of_a_builtin_declaration_names_a_field_of_its_upstream_crd(name):
    decl = kinddecl.builtin_declarations()[name]
    # libyaml's safe loader, as the emulator reads CRDs: the same objects as yaml.safe_load, in a
    # fifth of the time or less (RayJob's CRD, 1.4 MB: 0.9 s, not 5).
    crd = yaml.load((REFERENCE / UPSTREAM_CRDS[name]).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == decl["version"]]
    schema = version["schema"]["openAPIV3Schema"]
    for where, text in declared_paths(decl):
        path = parse_path(text) if "*" not in text else tuple(text.split("."))
        if path[0] == "metadata" or (decl["group"], text) in BEYOND_THE_CRD:
            continue  # labels and annotations: any key
        assert names_a_field(schema, path), f"{name}: {where} {text!r} names no field of the CRD"


def test_the_builtin_cel_expressions_compile():
    """Built-in CEL is compiled on first use (no cel-python import at every start): compiled here."""
    decls = [d for d in kinddecl.builtin_declarations().values() if "cel" in (d.get("ttl") or {})]
    assert decls, "RayJob's DeleteSelf rules"
    compile_kinds(decls, "kinds.yaml")  # eager: a bad expression raises KindError naming ttl.cel


def test_the_kinds_added_since_are_enabled_only_when_asked_for():
    """An upgrade must not start deleting kinds it left alone (README: Job kinds)."""
    default = parse_policy({})
    assert set(default.kinds) == set(DEFAULT_KINDS) and not {"RayJob", "JobSet", "PipelineRun"} & {
        k.kind for k in default.kinds
    }
    named = parse_policy({"kinds": ["RayJob", "TFJob"]})
    assert {k.kind for k in named.kinds} == {"RayJob", "TFJob"}
    opted = parse_policy({"optIn": {"batch.volcano.sh/v1alpha1/Job": ["Aborted"]}})
    assert ("batch.volcano.sh/v1alpha1", "Job") in {(k.api_version, k.kind) for k in opted.kinds}
    assert set(DEFAULT_KINDS) <= set(opted.kinds)


def test_a_bare_kind_names_the_default_kind_first():
    """`kinds: [Job]` meant batch/v1 Jobs before Volcano's Job was built in, and still does."""
    assert [(k.api_version, k.kind) for k in parse_policy({"kinds": ["Job"]}).kinds] == [("batch/v1", "Job")]
    volcano = parse_policy({"kinds": ["batch.volcano.sh/v1alpha1/Job"]})
    assert [(k.api_version, k.kind) for k in volcano.kinds] == [("batch.volcano.sh/v1alpha1", "Job")]
    assert [k.kind for k in parse_policy({"kinds": ["RayJob"]}).kinds] == ["RayJob"]


def test_a_kind_declared_or_opted_into_but_left_out_of_kinds_is_refused():
    assert policy_error({"kinds": ["TFJob"], "kindDeclarations": [WIDGET]}) == (
        "policy.yaml: kindDeclarations[0]: widgets.example.com/v1/Widget is declared but not in `kinds`: add it "
        "there (or remove `kinds` to enable it)"
    )
    assert policy_error({"kinds": ["TFJob"], "optIn": {"batch.volcano.sh/v1alpha1/Job": ["Aborted"]}}) == (
        "policy.yaml: optIn.batch.volcano.sh/v1alpha1/Job: opted into, but not in `kinds`: add it there"
    )


# --- a declaration replacing a built-in kind inherits its safeguards ---------------------------------


def bare_tfjob() -> dict:
    """TFJob redeclared with its finishing conditions alone, as an operator reading only the README might."""
    decl = copy.deepcopy(kinddecl.builtin_declarations()["kubeflow.org/v1/TFJob"])
    for name in ("ttl", "managedBy", "suspend", "pods"):
        del decl[name]
    return decl


def finished_tfjob(**run_policy) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "train", "namespace": "research", "uid": "u1"},
        "spec": {"runPolicy": run_policy},
        "status": {
            "completionTime": "2030-01-01T00:00:00Z",
            "conditions": [{"type": "Succeeded", "status": "True", "lastTransitionTime": "2030-01-01T00:00:00Z"}],
        },
    }


def replaced_tfjob(policy):
    return next(k for k in policy.kinds if (k.api_version, k.kind) == ("kubeflow.org/v1", "TFJob"))


def test_a_tfjob_that_asked_for_20_days_keeps_them_when_a_replacement_leaves_out_ttl(caplog):
    """issue 26: before, the replacement was taken whole and the TFJob went after the policy's 1 day."""
    with caplog.at_level("INFO", logger="jobttl.policy"):
        policy = parse_policy({"ttl": "1d", "kindDeclarations": [bare_tfjob()]}, "policy.yaml")
    kind = replaced_tfjob(policy)
    decision = decide(finished_tfjob(ttlSecondsAfterFinished=20 * 86400), kind, policy)
    assert (decision.ttl, decision.ttl_source) == (20 * 86400, "spec.runPolicy.ttlSecondsAfterFinished")
    assert kind.inherited == ("ttl", "managedBy", "suspend")
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "kind-replaced"]
    assert (record.levelname, record.inherited, record.dropped) == ("INFO", ["ttl", "managedBy", "suspend"], [])
    assert "inherits ttl, managedBy, suspend from it" in record.getMessage()


@pytest.mark.parametrize(
    "run_policy, verdict",
    [
        ({"managedBy": "kueue.x-k8s.io/multikueue"}, Verdict.MANAGED_ELSEWHERE),
        ({"suspend": True}, Verdict.SUSPENDED),
    ],
)
def test_a_replacement_that_leaves_out_managed_by_or_suspend_still_leaves_those_jobs_alone(run_policy, verdict):
    policy = parse_policy({"ttl": "1d", "kindDeclarations": [bare_tfjob()]})
    assert decide(finished_tfjob(**run_policy), replaced_tfjob(policy), policy).verdict is verdict


def test_argo_redeclared_without_not_yet_still_waits_for_the_archive():
    decl = copy.deepcopy(kinddecl.builtin_declarations()["argoproj.io/v1alpha1/Workflow"])
    del decl["notYet"]
    policy = parse_policy({"ttl": "1d", "kindDeclarations": [decl]})
    kind = next(k for k in policy.kinds if k.kind == "Workflow")
    wf = {
        "metadata": {
            "name": "w",
            "namespace": "n",
            "labels": {"workflows.argoproj.io/workflow-archiving-status": "Pending"},
        },
        "status": {"phase": "Succeeded", "finishedAt": "2030-01-01T00:00:00Z"},
    }
    assert decide(wf, kind, policy).verdict is Verdict.ARCHIVING


def test_null_drops_a_safeguard_on_purpose_and_says_so(caplog):
    decl = {**bare_tfjob(), "ttl": None, "suspend": None}
    with caplog.at_level("INFO", logger="jobttl.policy"):
        policy = parse_policy({"ttl": "1d", "kindDeclarations": [decl]}, "policy.yaml")
    kind = replaced_tfjob(policy)
    assert (kind.inherited, kind.suspend) == (("managedBy",), None)
    assert decide(finished_tfjob(ttlSecondsAfterFinished=20 * 86400), kind, policy).ttl == 86400
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "kind-replaced"]
    assert record.levelname == "WARNING"
    assert record.dropped == [
        "ttl (the TTL objects ask for themselves: the policy's applies instead)",
        "suspend (suspended objects)",
    ]


def test_a_replacement_with_a_ttl_of_its_own_but_no_applied_by_says_so(caplog):
    job = copy.deepcopy(kinddecl.builtin_declarations()["batch/v1/Job"])
    job["ttl"] = {"paths": ["spec.ttlSecondsAfterFinished"]}
    with caplog.at_level("INFO", logger="jobttl.policy"):
        parse_policy({"kindDeclarations": [job]}, "policy.yaml")
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "kind-replaced"]
    assert record.dropped == ["ttl.appliedBy (objects whose own controller applies their TTL)"]


def test_the_same_declaration_as_the_builtin_one_replaces_it_quietly(caplog):
    with caplog.at_level("INFO", logger="jobttl.policy"):
        parse_policy({"kindDeclarations": [kinddecl.builtin_declarations()["kubeflow.org/v1/TFJob"]]})
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "kind-replaced"]
    assert (record.levelname, record.inherited, record.dropped) == ("INFO", [], [])


def test_an_inherited_field_that_no_longer_fits_is_refused_saying_what_to_write():
    """Argo's TTL keys name its phases: a replacement finished by conditions has other names."""
    decl = copy.deepcopy(kinddecl.builtin_declarations()["argoproj.io/v1alpha1/Workflow"])
    del decl["ttl"]
    decl["finished"] = {"conditions": [{"type": "Completed", "outcome": "succeeded"}]}
    message = policy_error({"kindDeclarations": [decl]})
    assert message.startswith("policy.yaml: kindDeclarations[0].ttl.keys.Succeeded: names no state")
    assert message.endswith(
        "(inherited from the built-in declaration of argoproj.io/v1alpha1/Workflow: write ttl in "
        "this declaration, or ttl: null to do without)"
    )


def test_null_means_none_in_a_new_kind_too():
    (kind,) = [
        k for k in parse_policy({"kindDeclarations": [widget(suspend=None, ttl=None)]}).kinds if k.kind == "Widget"
    ]
    assert kind.suspend is None and kind.inherited == ()


# --- a built-in kind declared in another version: the same CRD, one kind ------------------------------


def tfjob_at(version: str, kind: str = "TFJob", plural: str = "tfjobs") -> dict:
    """TFJob declared at another version with its finishing conditions alone (no ttl, suspend, managedBy)."""
    return {**bare_tfjob(), "version": version, "kind": kind, "plural": plural}


def tfjob_object(version: str, **run_policy) -> dict:
    return {**finished_tfjob(**run_policy), "apiVersion": f"kubeflow.org/{version}"}


@pytest.mark.parametrize(
    "run_policy, verdict",
    [
        pytest.param({"suspend": True, "ttlSecondsAfterFinished": 20 * 86400}, Verdict.SUSPENDED, id="suspended"),
        pytest.param({"managedBy": "kueue.x-k8s.io/multikueue"}, Verdict.MANAGED_ELSEWHERE, id="managed elsewhere"),
    ],
)
def test_a_builtin_kind_declared_in_another_version_replaces_it_and_inherits_its_guards(run_policy, verdict, caplog):
    """Before: kubeflow.org/v2 TFJob inherited nothing and v1 stayed enabled; on a suspended TFJob asking
    for 20 days v1 said SUSPENDED and v2 EXPIRES in 3600 s: the worker deleted it through v2."""
    with caplog.at_level("INFO", logger="jobttl.policy"):
        policy = parse_policy({"ttl": "1h", "kindDeclarations": [tfjob_at("v2")]}, "policy.yaml")
    tfjobs = [k for k in policy.kinds if (k.group, k.plural) == ("kubeflow.org", "tfjobs")]
    assert [k.api_version for k in tfjobs] == ["kubeflow.org/v2"]
    assert "kubeflow.org/v1/TFJob" not in {f"{k.api_version}/{k.kind}" for k in policy.known_kinds}
    assert tfjobs[0].inherited == ("ttl", "managedBy", "suspend")
    assert decide(tfjob_object("v2", **run_policy), tfjobs[0], policy).verdict is verdict
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "kind-replaced"]
    assert record.levelname == "WARNING"
    assert (
        "replaces the built-in kubeflow.org/v1/TFJob with kubeflow.org/v2/TFJob (the same CRD in another "
        "version" in record.getMessage()
    )


def test_a_builtin_kind_declared_in_another_version_keeps_the_ttl_the_object_asked_for():
    policy = parse_policy({"ttl": "1h", "kindDeclarations": [tfjob_at("v2")]})
    [kind] = [k for k in policy.kinds if k.plural == "tfjobs"]
    decision = decide(tfjob_object("v2", ttlSecondsAfterFinished=20 * 86400), kind, policy)
    assert decision.ttl == 20 * 86400


def test_the_same_crd_by_its_plural_under_another_kind_name_is_a_replacement_too():
    policy = parse_policy({"ttl": "1h", "kindDeclarations": [tfjob_at("v2", kind="TfJob")]})
    [kind] = [k for k in policy.kinds if k.plural == "tfjobs"]
    assert (kind.api_version, kind.kind, kind.suspend) == ("kubeflow.org/v2", "TfJob", ("spec", "runPolicy", "suspend"))


def test_mpijob_at_a_new_version_is_refused_where_its_two_builtin_versions_disagree():
    """MPIJob v1 (training-operator) and v2beta1 (mpi-operator) name different own controllers: no guess."""
    decl = {**bare_tfjob(), "version": "v2", "kind": "MPIJob", "plural": "mpijobs"}
    with pytest.raises(
        PolicyError,
        match=r"kindDeclarations\[0\]: replaces the built-in kubeflow.org/v1/MPIJob and "
        r"kubeflow.org/v2beta1/MPIJob .* differ in managedBy: write managedBy",
    ):
        parse_policy({"kindDeclarations": [decl]}, "policy.yaml")
    decl["managedBy"] = {"path": "spec.runPolicy.managedBy", "own": ["kubeflow.org/mpi-operator"]}
    policy = parse_policy({"kindDeclarations": [decl]}, "policy.yaml")
    assert [k.api_version for k in policy.kinds if k.plural == "mpijobs"] == ["kubeflow.org/v2"]


@pytest.mark.parametrize(
    "declarations, both",
    [
        pytest.param(
            [tfjob_at("v1"), tfjob_at("v2")],
            "kubeflow.org/v1/TFJob and kubeflow.org/v2/TFJob",
            id="a built-in kind declared at two versions",
        ),
        pytest.param(
            [
                {**tfjob_at("v1"), "group": "example.com", "kind": "Widget", "plural": "widgets"},
                {**tfjob_at("v2"), "group": "example.com", "kind": "Widget", "plural": "widgets"},
            ],
            "example.com/v1/Widget and example.com/v2/Widget",
            id="a new kind declared at two versions",
        ),
        pytest.param(
            [
                {**tfjob_at("v1"), "group": "example.com", "kind": "Widget", "plural": "widgets"},
                {**tfjob_at("v1"), "group": "example.com", "kind": "Gadget", "plural": "widgets"},
            ],
            "example.com/v1/Widget and example.com/v1/Gadget",
            id="two kinds of one plural",
        ),
    ],
)
def test_two_enabled_kinds_on_one_crd_are_refused_naming_both(declarations, both):
    with pytest.raises(
        PolicyError,
        match=rf"policy.yaml: kindDeclarations\[1\]: {both} are both enabled and are "
        r"one CRD",
    ):
        parse_policy({"ttl": "1h", "kindDeclarations": declarations}, "policy.yaml")


def test_the_builtin_mpijob_versions_stay_enabled_together_by_default():
    """Two operators' CRDs of one name (mpijobs.kubeflow.org) a cluster cannot install together."""
    assert [k.api_version for k in parse_policy({"ttl": "1h"}).kinds if k.plural == "mpijobs"] == [
        "kubeflow.org/v1",
        "kubeflow.org/v2beta1",
    ]
