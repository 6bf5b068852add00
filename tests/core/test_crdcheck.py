"""A kind declaration's paths against its CRD's schema (jobttl.core.domain.kinds.crdcheck): the structural-schema
rules case by case, and every built-in declaration against its upstream CRD (../shared/reference),
so that a typo in core/domain/kinds/kinds.yaml fails here."""

from __future__ import annotations

import copy
import functools

import pytest
import yaml

from jobttl.core.domain.kinds import crdcheck, declarations as kinddecl
from jobttl.core.domain.kinds.crdcheck import ANY, OBJECT, VALUE, PathUse, uses, verify, walk
from tests.fixtures import REFERENCE

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# The upstream CRD of each built-in kind that ../shared/reference holds (each README names its commit).
UPSTREAM = {
    "tfjobs.kubeflow.org": "kubeflow/kubeflow.org_tfjobs.yaml",
    "pytorchjobs.kubeflow.org": "kubeflow/kubeflow.org_pytorchjobs.yaml",
    "workflows.argoproj.io": "kubeflow/argoproj.io_workflows.yaml",
    "rayjobs.ray.io": "rayjob/ray.io_rayjobs.yaml",
    "jobsets.jobset.x-k8s.io": "jobset/jobset.x-k8s.io_jobsets.yaml",
    "jobs.batch.volcano.sh": "volcano/batch.volcano.sh_jobs.yaml",
    "sparkapplications.sparkoperator.k8s.io": "spark/sparkoperator.k8s.io_sparkapplications.yaml",
    "pipelineruns.tekton.dev": "tekton/300-pipelinerun.yaml",
    "taskruns.tekton.dev": "tekton/300-taskrun.yaml",
}
# What a built-in declaration reads that its upstream CRD does not have, on purpose: the Kubeflow
# jobs' pre-1.2 TTL (docs/kinds.md: objects from older CRDs still carry it), a fallback after
# runPolicy's. Anything else absent is a typo in kinds.yaml.
EXPECTED_ABSENT = {
    "kubeflow.org/v1/TFJob": {("ttl.paths[1]", "spec.ttlSecondsAfterFinished")},
    "kubeflow.org/v1/PyTorchJob": {("ttl.paths[1]", "spec.ttlSecondsAfterFinished")},
}
needs_reference = pytest.mark.skipif(
    not REFERENCE.is_dir(), reason="the upstream CRDs (../shared/reference) are not here"
)


def crd_of(
    schema: dict | None,
    version: str = "v1",
    kind: str = "Widget",
    served: bool = True,
    scope: str = "Namespaced",
    more_versions: tuple[dict, ...] = (),
) -> dict:
    entry = {"name": version, "served": served, "storage": True}
    if schema is not None:
        entry["schema"] = {"openAPIV3Schema": schema}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.widgets.example.com"},
        "spec": {
            "group": "widgets.example.com",
            "scope": scope,
            "names": {"kind": kind, "plural": "widgets"},
            "versions": [entry, *more_versions],
        },
    }


def obj(**properties) -> dict:
    return {"type": "object", "properties": properties}


STRING, INTEGER, BOOLEAN = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
CONDITIONS = {"type": "array", "items": obj(type=STRING, status=STRING, lastTransitionTime=STRING, reason=STRING)}
# A Widget CRD with something of every rule in it.
SCHEMA = obj(
    apiVersion=STRING,
    kind=STRING,
    metadata={
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 63}},
    },  # only name may be restricted
    spec=obj(
        suspend=BOOLEAN,
        managedBy=STRING,
        runPolicy=obj(ttlSecondsAfterFinished=INTEGER, suspend=BOOLEAN),
        ttlStrategy=obj(secondsAfterSuccess=INTEGER, secondsAfterCompletion=INTEGER),
        budget={"x-kubernetes-int-or-string": True},
        labelsByTeam={"type": "object", "additionalProperties": obj(owner=STRING)},  # a map of objects
        anything={"type": "object", "additionalProperties": True},
        loose={"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"strict": obj(a=STRING)}},
        template={"type": "object", "x-kubernetes-embedded-resource": True, "properties": {"spec": obj(size=INTEGER)}},
        tasks={"type": "array", "items": obj(name=STRING)},
        branchy={
            "type": "object",
            "properties": {"a": STRING},
            "anyOf": [{"properties": {"b": STRING}}, {"allOf": [{"properties": {"c": STRING}}]}],
            "oneOf": [{"properties": {"d": STRING}}],
        },
    ),
    status=obj(phase=STRING, finishedAt=STRING, conditions=CONDITIONS, state=obj(phase=STRING, since=STRING)),
)
WIDGET = {
    "group": "widgets.example.com",
    "version": "v1",
    "kind": "Widget",
    "plural": "widgets",
    "finished": {"conditions": [{"type": "Done", "status": "True", "outcome": "succeeded"}]},
    "finishedAt": ["status.finishedAt", "condition.lastTransitionTime"],
}


def use(text: str, wants: str = VALUE) -> PathUse:
    path = (
        (*crdcheck.CONDITIONS, text[len("condition.") :])
        if text.startswith("condition.")
        else kinddecl.parse_path(text)
    )
    return PathUse("suspend", text, path, wants)


@pytest.mark.parametrize(
    "text, wants",
    [
        ("spec.suspend", VALUE),
        ("spec.runPolicy.ttlSecondsAfterFinished", VALUE),
        ("spec.budget", VALUE),  # int-or-string is a value
        ("spec.labelsByTeam.ml.owner", VALUE),  # additionalProperties: any key, then its schema
        ('spec.labelsByTeam["team.example.com/ml"].owner', VALUE),
        ("spec.anything.at.all", VALUE),  # additionalProperties: true
        ("spec.loose.undeclared.deeper", VALUE),  # x-kubernetes-preserve-unknown-fields
        ("spec.loose.strict.a", VALUE),  # a declared field below it is still read by its schema
        ("spec.template.apiVersion", VALUE),  # an embedded resource has apiVersion, kind, metadata
        ('spec.template.metadata.labels["app"]', VALUE),
        ("spec.template.spec.size", VALUE),
        ("spec.branchy.a", VALUE),
        ("spec.branchy.b", VALUE),
        ("spec.branchy.c", VALUE),
        ("spec.branchy.d", VALUE),
        ("spec.ttlStrategy", OBJECT),
        ("spec.tasks", ANY),
        ("status.state.phase", VALUE),
        ("condition.lastTransitionTime", VALUE),
        # metadata is ObjectMeta whatever the CRD restricts
        ('metadata.labels["workflows.argoproj.io/archiving"]', VALUE),
        ('metadata.annotations["pruner.tekton.dev/ttlSecondsAfterFinished"]', VALUE),
        ("metadata.creationTimestamp", VALUE),
        ("metadata.deletionTimestamp", VALUE),
        ("metadata.generation", VALUE),
        ("metadata.ownerReferences", ANY),
        ("metadata.name", VALUE),
        ("metadata.namespace", VALUE),
    ],
)
def test_a_path_to_a_field_the_schema_keeps_is_found(text, wants):
    assert walk(SCHEMA, use(text, wants)) is None


@pytest.mark.parametrize(
    "text, wants, expected",
    [
        ("spec.suspnd", VALUE, "is not in: spec has no field 'suspnd'; did you mean spec.suspend?"),
        ("spec.runPolicy.suspnd", VALUE, "spec.runPolicy has no field 'suspnd'; did you mean spec.runPolicy.suspend?"),
        # the same name elsewhere in the schema
        ("spec.ttlSecondsAfterFinished", VALUE, "did you mean spec.runPolicy.ttlSecondsAfterFinished?"),
        ("stat.phase", VALUE, "the object has no field 'stat'; did you mean status?"),
        (
            "spec.labelsByTeam.ml.ownr",
            VALUE,
            "spec.labelsByTeam.ml has no field 'ownr'; did you mean spec.labelsByTeam.ml.owner?",
        ),
        ("spec.loose.strict.b", VALUE, "spec.loose.strict has no field 'b'"),
        ("spec.template.metadata.labelz", VALUE, "did you mean spec.template.metadata.labels?"),
        ("spec.template.spec.colour", VALUE, "spec.template.spec has no field 'colour' (it has: size)"),
        ("spec.branchy.e", VALUE, "spec.branchy has no field 'e'"),
        ("metadata.lables", VALUE, "metadata has no field 'lables'; did you mean metadata.labels?"),
        ('metadata.labels["a.b/c"].d', VALUE, 'metadata.labels["a.b/c"] is a string, with no fields below it'),
        ("metadata.finalizers.x", VALUE, "metadata.finalizers is a list: a path cannot read into a list's items"),
        ("spec.tasks.name", VALUE, "spec.tasks is a list: a path cannot read into a list's items"),
        (
            "status.conditions.type",
            VALUE,
            "status.conditions is a list: a path cannot read into a list's items "
            "(the finishing condition's fields are condition.FIELD, in finishedAt)",
        ),
        ("condition.lastTransitionTme", VALUE, "did you mean condition.lastTransitionTime?"),
        (
            "status.state",
            VALUE,
            "does not fit: the field is an object, not a value: did you mean one of its fields "
            "(status.state.phase, status.state.since)?",
        ),
        ("spec.tasks", VALUE, "does not fit: the field is a list, not a value"),
        ("spec.suspend", OBJECT, "does not fit: the field is a boolean, not an object"),
    ],
)
def test_a_path_naming_nothing_is_refused_with_the_nearest_names(text, wants, expected):
    problem = walk(SCHEMA, use(text, wants))
    assert problem is not None and expected in problem, problem


def test_every_path_of_a_declaration_is_checked_with_the_field_it_is_written_in():
    decl = {
        **WIDGET,
        "finished": {"state": {"path": "status.phase", "values": {"Done": "succeeded"}}},
        "finishedAt": ["status.finishedAt"],
        "ttl": {"within": ["spec.ttlStrategy"], "keys": {"Done": ["secondsAfterSuccess", "secondsAfterCompletion"]}},
        "managedBy": {"path": "spec.managedBy", "own": ["x"]},
        "suspend": "spec.suspend",
        "notYet": [{"path": 'metadata.labels["a.b/c"]', "values": ["Pending"], "why": "not yet"}],
    }
    assert [(u.field, u.text) for u in uses(decl)] == [
        ("finished.state.path", "status.phase"),
        ("finishedAt[0]", "status.finishedAt"),
        ("ttl.within[0]", "spec.ttlStrategy"),
        ("ttl.keys.Done[0]", "spec.ttlStrategy.secondsAfterSuccess"),
        ("ttl.keys.Done[1]", "spec.ttlStrategy.secondsAfterCompletion"),
        ("managedBy.path", "spec.managedBy"),
        ("suspend", "spec.suspend"),
        ("notYet[0].path", 'metadata.labels["a.b/c"]'),
    ]
    assert verify(decl, crd_of(SCHEMA)).problems == ()
    broken = {
        **decl,
        "ttl": {"within": ["spec.ttlStrategy"], "keys": {"Done": ["secondsAfterSucess"]}},
        "managedBy": {"path": "spec.managedby", "own": ["x"]},
    }
    problems = verify(broken, crd_of(SCHEMA)).problems
    assert [(p.field, p.text) for p in problems] == [
        ("ttl.keys.Done[0]", "spec.ttlStrategy.secondsAfterSucess"),
        ("managedBy.path", "spec.managedby"),
    ]
    assert problems[1].message == (
        "'spec.managedby' is not in the schema of widgets.example.com/v1/Widget "
        "(CRD widgets.widgets.example.com): spec has no field 'managedby'; "
        "did you mean spec.managedBy?"
    )
    assert crdcheck.describe("policy.yaml: kindDeclarations[0]", problems[1]).startswith(
        "policy.yaml: kindDeclarations[0].managedBy.path: 'spec.managedby' is not in the schema of widgets"
    )


def test_a_ttl_object_naming_nothing_is_said_once_not_again_for_each_of_its_keys():
    decl = {
        **WIDGET,
        "ttl": {"within": ["spec.ttlStrategi"], "keys": {"Done": ["secondsAfterSuccess", "secondsAfterCompletion"]}},
    }
    problems = verify(decl, crd_of(SCHEMA)).problems
    assert [(p.field, p.text) for p in problems] == [("ttl.within[0]", "spec.ttlStrategi")]
    assert "did you mean spec.ttlStrategy?" in problems[0].message


def test_cel_inputs_are_checked_but_may_name_anything_there():
    decl = {
        **WIDGET,
        "ttl": {"cel": "self.spec.tasks.size()", "celWhen": "spec.tasks", "celInputs": ["spec.tasks", "spec.taks"]},
    }
    problems = verify(decl, crd_of(SCHEMA)).problems
    assert [(p.field, p.text) for p in problems] == [("ttl.celInputs[1]", "spec.taks")]


def test_finishing_by_conditions_needs_status_conditions_with_type_and_status():
    assert verify(WIDGET, crd_of(SCHEMA)).problems == ()
    without = copy.deepcopy(SCHEMA)
    del without["properties"]["status"]["properties"]["conditions"]
    problems = verify(WIDGET, crd_of(without)).problems
    assert [(p.field, p.text) for p in problems] == [  # said once for the conditions' type and status
        ("finished.conditions", "status.conditions[].type"),
        ("finishedAt[1]", "condition.lastTransitionTime"),
    ]
    assert "status has no field 'conditions'" in problems[0].message


def test_a_version_the_crd_does_not_serve_is_said_so_with_the_versions_it_serves():
    verdict = verify(WIDGET, crd_of(SCHEMA, version="v1beta1", more_versions=({"name": "v1", "served": False},)))
    assert (verdict.served, verdict.served_versions, verdict.problems) == (False, ("v1beta1",), ())
    assert not verify(WIDGET, crd_of(SCHEMA, version="v2")).served


def test_another_kind_name_and_a_cluster_scoped_crd_are_refused():
    problems = verify(WIDGET, crd_of(SCHEMA, kind="Gadget", scope="Cluster")).problems
    assert [(p.field, p.message) for p in problems] == [
        ("kind", "the CRD widgets.widgets.example.com names its kind 'Gadget', not 'Widget'"),
        ("plural", "the CRD widgets.widgets.example.com is cluster-scoped: jobttl handles namespaced kinds only"),
    ]


def test_a_version_without_a_schema_checks_nothing_and_verifies_nothing():
    """Before issue 26 this counted as verified: a misspelt suspend path passed."""
    verdict = verify({**WIDGET, "suspend": "spec.suspnd"}, crd_of(None))
    assert verdict.served and verdict.problems == () and verdict.checked == 0 and not verdict.verified
    assert "gives v1 no schema (openAPIV3Schema)" in verdict.unchecked
    assert [p.text for p in verdict.unverified] == [
        "status.conditions[].type",
        "status.conditions[].status",
        "status.finishedAt",
        "condition.lastTransitionTime",
        "spec.suspnd",
    ]


@pytest.mark.parametrize(
    "text, reason",
    [
        ("spec.anything.suspend", "spec.anything is a map of anything (additionalProperties: true)"),
        ("spec.loose.suspnd", "spec.loose keeps unknown fields (x-kubernetes-preserve-unknown-fields)"),
        (
            "spec.loose.strct",
            "spec.loose keeps unknown fields (x-kubernetes-preserve-unknown-fields); it declares strict: "
            "did you mean spec.loose.strict?",
        ),
    ],
)
def test_a_path_the_schema_cannot_follow_is_unverified_not_verified(text, reason):
    for field in ("suspend", "managedBy"):
        decl = (
            {**WIDGET, "suspend": text} if field == "suspend" else {**WIDGET, "managedBy": {"path": text, "own": ["x"]}}
        )
        verdict = verify(decl, crd_of(SCHEMA))
        assert verdict.problems == () and not verdict.verified
        (unverified,) = verdict.unverified
        assert unverified.text == text and unverified.message.endswith(reason), unverified.message


def test_a_schema_that_follows_every_path_verifies_it():
    verdict = verify(
        {**WIDGET, "suspend": "spec.suspend", "managedBy": {"path": "spec.managedBy", "own": ["x"]}}, crd_of(SCHEMA)
    )
    assert verdict.verified and verdict.unverified == () and verdict.checked == 6


@needs_reference
def test_argo_s_upstream_crd_keeps_unknown_fields_so_a_misspelt_suspend_is_unverified():
    """The upstream Workflow CRD declares spec and status as objects keeping anything: no path below them
    can be checked, and a declaration reading `spec.suspnd` must not pass as verified."""
    decl = {**copy.deepcopy(kinddecl.builtin_declarations()["argoproj.io/v1alpha1/Workflow"]), "suspend": "spec.suspnd"}
    verdict = verify(decl, upstream("workflows.argoproj.io"))
    assert verdict.problems == () and not verdict.verified
    assert {p.text: p.message.split(": ", 1)[1] for p in verdict.unverified}["spec.suspnd"] == (
        "spec keeps unknown fields (x-kubernetes-preserve-unknown-fields)"
    )
    # The archiving label is ObjectMeta's: any label key is there, checked.
    assert 'metadata.labels["workflows.argoproj.io/workflow-archiving-status"]' not in {
        p.text for p in verdict.unverified
    }


def test_an_inherited_path_is_held_as_a_builtin_one():
    """A replacement inherits the Kubeflow TTL's fallbacks: the pre-1.2 one may be absent, and what is
    absent is said as the built-in's (Problem.inherited), not the operator's."""
    decl = {
        **WIDGET,
        "ttl": {"paths": ["spec.runPolicy.ttlSecondsAfterFinished", "spec.ttlSecondsAfterFinished"]},
        "suspend": "spec.runPolicy.suspnd",
    }
    assert [(p.field, p.inherited) for p in verify(decl, crd_of(SCHEMA)).problems] == [
        ("ttl.paths[1]", False),
        ("suspend", False),
    ]
    problems = verify(decl, crd_of(SCHEMA), inherited=("ttl", "suspend")).problems
    assert [(p.field, p.inherited) for p in problems] == [("suspend", True)]


def test_a_crd_that_prunes_nothing_refuses_no_path_but_says_it_did_not_check():
    """A CRD from apiextensions v1beta1 read through v1 may keep `preserveUnknownFields: true`: the
    API server prunes nothing, and its schema (often partial) does not say what is there."""
    partial = obj(spec=obj(size=INTEGER))  # no status at all
    decl = {**WIDGET, "suspend": "spec.paused"}
    assert verify(decl, crd_of(partial)).problems  # a structural CRD would prune status: refused
    legacy = crd_of(partial)
    legacy["spec"]["preserveUnknownFields"] = True
    verdict = verify(decl, legacy)
    assert verdict.served and verdict.problems == () and verdict.checked == 0
    assert "spec.preserveUnknownFields: true" in verdict.unchecked
    # What is not a path is still the CRD's to say: its kind and scope.
    legacy["spec"]["names"]["kind"] = "Gadget"
    assert [p.field for p in verify(decl, legacy).problems] == ["kind"]


@pytest.mark.parametrize("node", [{}, {"description": "a legacy schema's: no type, nothing declared"}])
def test_a_node_with_no_type_and_nothing_declared_below_it_is_open(node):
    schema = obj(spec=obj(size=INTEGER), status=node)
    assert walk(schema, use("status.phase")) is None
    assert walk(schema, use("status.state.since")) is None
    assert walk(schema, use("spec.colour")) is not None  # a typed level still refuses what it lacks


def test_a_typed_object_with_no_fields_declared_is_not_open():
    """`type: object` alone is an empty object to the pruning API server: nothing is kept below."""
    problem = walk(obj(status={"type": "object"}), use("status.phase"))
    assert problem is not None and "status has no field 'phase'" in problem


def test_lenient_allows_a_missing_alternative_only_when_another_is_there():
    decl = {**WIDGET, "ttl": {"paths": ["spec.runPolicy.ttlSecondsAfterFinished", "spec.ttlSecondsAfterFinished"]}}
    strict = verify(decl, crd_of(SCHEMA)).problems
    assert [(p.field, p.text) for p in strict] == [("ttl.paths[1]", "spec.ttlSecondsAfterFinished")]
    assert verify(decl, crd_of(SCHEMA), lenient=True).problems == ()
    none_there = {
        **WIDGET,
        "ttl": {"paths": ["spec.ttlSecondsAfterFinished", "spec.ttlAfter"]},
        "suspend": "spec.suspended",
    }
    lenient = verify(none_there, crd_of(SCHEMA), lenient=True).problems
    assert [p.field for p in lenient] == ["ttl.paths[0]", "ttl.paths[1]", "suspend"]


def test_show_writes_paths_as_declarations_do():
    assert crdcheck.show(("metadata", "labels", "a.b/c")) == 'metadata.labels["a.b/c"]'
    assert crdcheck.show(("status", "conditions", "[]", "type")) == "status.conditions[].type"
    assert crdcheck.show(("status", "conditions", "[]", "reason"), "condition.") == "condition.reason"


# --- the built-in declarations against their upstream CRDs ----------------------------------------


@functools.cache
def upstream(name: str) -> dict:
    return yaml.load((REFERENCE / UPSTREAM[name]).read_text(), Loader=LOADER)  # noqa: S506 - a safe loader


def builtin_with_upstream() -> list[tuple[str, dict]]:
    return [
        (key, decl)
        for key, decl in kinddecl.builtin_declarations().items()
        if f"{decl['plural']}.{decl.get('group', '')}" in UPSTREAM
    ]


@needs_reference
@pytest.mark.parametrize("key, decl", builtin_with_upstream(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_builtin_declaration_reads_only_fields_its_upstream_crd_has(key, decl):
    """A typo in core/domain/kinds/kinds.yaml (or an upstream rename) fails here, naming the path."""
    verdict = verify(decl, upstream(f"{decl['plural']}.{decl['group']}"))
    assert verdict.served and verdict.checked == len(uses(decl))
    assert {(p.field, p.text) for p in verdict.problems} == EXPECTED_ABSENT.get(key, set()), [
        p.message for p in verdict.problems
    ]
    assert verify(decl, upstream(f"{decl['plural']}.{decl['group']}"), lenient=True).problems == ()


def test_the_builtin_kinds_with_an_upstream_crd_here_are_the_ones_expected():
    assert {key for key, _ in builtin_with_upstream()} == {
        "kubeflow.org/v1/TFJob",
        "kubeflow.org/v1/PyTorchJob",
        "argoproj.io/v1alpha1/Workflow",
        "ray.io/v1/RayJob",
        "jobset.x-k8s.io/v1alpha2/JobSet",
        "batch.volcano.sh/v1alpha1/Job",
        "sparkoperator.k8s.io/v1beta2/SparkApplication",
        "tekton.dev/v1/PipelineRun",
        "tekton.dev/v1/TaskRun",
    }


@needs_reference
@pytest.mark.parametrize("key, decl", builtin_with_upstream(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_typo_in_any_path_of_a_builtin_declaration_would_be_caught(key, decl):
    """Each path of each built-in kind, misspelt, is refused against the upstream CRD, unless it
    lies where the CRD keeps any field (Argo's preserved spec and status, a label's any key)."""
    crd = upstream(f"{decl['plural']}.{decl['group']}")
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == decl["version"])["schema"]["openAPIV3Schema"]
    caught = undetectable = 0
    for found in uses(decl):
        misspelt = PathUse(found.field, found.text + "x", (*found.path[:-1], found.path[-1] + "x"), found.wants)
        if walk(schema, misspelt) is not None:
            caught += 1
        else:
            # Only where anything may be: the parent keeps unknown fields, or is a map.
            assert walk(schema, PathUse("", "", (*found.path[:-1], "any-name-at-all"), crdcheck.ANY)) is None
            undetectable += 1
    assert caught > 0 or key == "argoproj.io/v1alpha1/Workflow"


# --- a CRD not shaped as the API server writes one: unverified, never a crash -------------------------


def malformed(change) -> dict:
    crd = crd_of(obj(spec=obj(size={"type": "integer"}), status=obj(finishedAt={"type": "string"})))
    change(crd)
    return crd


MALFORMED = [
    pytest.param(
        lambda c: c["spec"].update(names="Widget"),
        "spec.names: expected a mapping, got a string 'Widget'",
        id="spec.names a string (was AttributeError)",
    ),
    pytest.param(lambda c: c.update(spec=["x"]), "spec: expected a mapping, got a list", id="spec a list"),
    pytest.param(
        lambda c: c["spec"].update(versions="v1"),
        "spec.versions: expected a list, got a string",
        id="versions a string",
    ),
    pytest.param(
        lambda c: c["spec"]["versions"].append("v2"), "spec.versions[1]: expected a mapping", id="a version a string"
    ),
    pytest.param(
        lambda c: c["spec"]["versions"][0].update(name=1),
        "spec.versions[0].name: expected a string",
        id="a version's name a number",
    ),
    pytest.param(
        lambda c: c["spec"]["versions"][0].update(schema="x"),
        "spec.versions[0].schema: expected a mapping",
        id="schema a string",
    ),
    pytest.param(
        lambda c: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"].update(properties=["spec"]),
        "spec.versions[0].schema.openAPIV3Schema.properties: expected a mapping, got a list",
        id="properties a list",
    ),
    pytest.param(
        lambda c: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"].update(spec="object"),
        "spec.versions[0].schema.openAPIV3Schema.properties.spec: expected a schema (a mapping)",
        id="a property's schema a string",
    ),
    pytest.param(
        lambda c: c["spec"]["names"].update(kind=["Widget"]),
        "spec.names.kind: expected a string",
        id="names.kind a list",
    ),
    pytest.param(lambda c: c.update(metadata="widgets"), "metadata: expected a mapping", id="metadata a string"),
]


@pytest.mark.parametrize("change, words", MALFORMED)
def test_a_malformed_crd_checks_nothing_and_says_which_field(change, words):
    verdict = verify({**WIDGET, "suspend": "spec.suspnd"}, malformed(change))
    assert not verdict.verified and verdict.checked == 0
    assert words in verdict.unchecked and "is malformed" in verdict.unchecked
    assert "spec.suspnd" in [p.text for p in verdict.unverified]
    assert crdcheck.malformed(malformed(change)).startswith(words.split(":")[0])


def test_a_well_formed_crd_is_not_malformed():
    assert crdcheck.malformed(malformed(lambda c: None)) is None


@pytest.mark.parametrize("change, words", MALFORMED[:3])
def test_the_worker_s_start_check_of_a_malformed_crd_warns_unverified_and_goes_on(change, words, caplog):
    """What the API answers is read through `get_crd` (the client's, in the worker): no crash, a warning."""
    from jobttl.core.domain.rules.policy import parse_policy
    from jobttl.worker import kindcheck

    declared = parse_policy({"kindDeclarations": [{**WIDGET, "suspend": "spec.size"}]}, "policy.yaml").kinds
    widget = tuple(k for k in declared if k.kind == "Widget")
    with caplog.at_level("WARNING"):
        report = kindcheck.verify_kinds(lambda _kind, _timeout: malformed(change), widget, pause=0)
    assert report.errors == [] and report.verified == []
    assert "widgets.example.com/v1/Widget" in report.unverified
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "kind-unverified"]
    assert record.levelname == "WARNING" and words in record.detail and "spec.size" in record.detail
