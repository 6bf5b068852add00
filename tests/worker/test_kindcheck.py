"""The worker's start-up check of its kinds' paths against their CRDs (jobttl.worker.kindcheck), with
the real client over HTTP against the emulator serving the CRDs it loaded (its `get` by name, a 404
Status for a CRD it does not have, injected 403s and 503s as the API server sends them)."""

from __future__ import annotations

import copy
import logging
import time
from pathlib import Path

import pytest
import yaml

from jobttl.core.runtime.config import ConfigError
from jobttl.core.domain.kinds import declarations as kinddecl
from jobttl.core.domain.kinds.registry import TFJOB, WORKFLOW
from jobttl.core.kube.client import KubeClient, load_api_client
from jobttl.core.domain.deploy.permissions import permissions
from jobttl.core.domain.kinds.declarations import key as kinddecl_key
from jobttl.core.domain.deploy.manifests import cluster_roles
from jobttl.core.domain.rules.policy import parse_policy
from jobttl.worker import kindcheck
from jobttl_emulator import EVENT, JOB, POD, Resource
from jobttl_emulator.crds import load_crds
from tests.fixtures import REFERENCE
from tests.services import start_emulator

WIDGET_CRD = Path(__file__).resolve().parents[1] / "e2e" / "widget-crd.yaml"
TFJOB_CRD = REFERENCE / "kubeflow" / "kubeflow.org_tfjobs.yaml"
ARGO_CRD = REFERENCE / "kubeflow" / "argoproj.io_workflows.yaml"  # spec and status keep unknown fields
WIDGET = {
    "group": "widgets.example.com",
    "version": "v1",
    "kind": "Widget",
    "plural": "widgets",
    "finished": {"conditions": [{"type": "Done", "status": "True", "outcome": "succeeded"}]},
    "finishedAt": ["status.finishedAt", "condition.lastTransitionTime"],
    "suspend": "spec.size",
}
GADGET = {**WIDGET, "group": "gadgets.example.com", "kind": "Gadget", "plural": "gadgets"}
GIZMO = {**WIDGET, "group": "legacy.example.com", "kind": "Gizmo", "plural": "gizmos", "suspend": "spec.paused"}
# A CRD created under apiextensions v1beta1, read through v1: it still prunes nothing, and its
# schema declares only part of what its objects hold (no status at all).
LEGACY_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gizmos.legacy.example.com"},
    "spec": {
        "group": "legacy.example.com",
        "scope": "Namespaced",
        "preserveUnknownFields": True,
        "names": {"kind": "Gizmo", "plural": "gizmos"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    """Widgets from their CRD; TFJob from a copy of its upstream CRD without runPolicy.suspend (an
    older training operator's, say); Gadgets served without a CRD (an aggregated API, say)."""
    if not TFJOB_CRD.exists():
        pytest.skip("the upstream TFJob CRD (../shared/reference) is not here")
    directory = tmp_path_factory.mktemp("kindcheck")
    crd = yaml.load(TFJOB_CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    run_policy = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "runPolicy"
    ]
    del run_policy["properties"]["suspend"]
    (directory / "older-tfjobs.yaml").write_text(yaml.safe_dump(crd))
    (directory / "legacy-gizmos.yaml").write_text(yaml.safe_dump(LEGACY_CRD))
    gadgets = Resource("gadgets.example.com", "v1", "Gadget", "gadgets")
    served = (
        *load_crds([WIDGET_CRD, directory / "older-tfjobs.yaml", directory / "legacy-gizmos.yaml", ARGO_CRD]),
        gadgets,
        JOB,
        POD,
        EVENT,
    )
    server = start_emulator(directory, served, gc_delay=0.1)
    yield server
    server.stop()


@pytest.fixture
def client(kube):
    kube.reset()
    return KubeClient(load_api_client(str(kube.kubeconfig)), timeout=5, granted=permissions("worker"))


def kinds(*declarations: dict, enabled: tuple[str, ...] = ()) -> tuple:
    names = [f"{d['group']}/{d['version']}/{d['kind']}" for d in declarations]
    return parse_policy(
        {"kindDeclarations": [copy.deepcopy(d) for d in declarations], "kinds": [*enabled, *names]}, "policy.yaml"
    ).kinds


def crd_gets(kube) -> list[str]:
    return [r["path"].rsplit("/", 1)[1] for r in kube.requests("GET", "/customresourcedefinitions")]


def test_a_declared_path_naming_nothing_stops_the_worker_naming_field_path_kind_and_the_nearest(client, kube):
    with pytest.raises(ConfigError) as refused:
        kindcheck.verify_kinds(client.get_crd, kinds({**WIDGET, "suspend": "spec.sise"}), pause=0)
    message = str(refused.value)
    assert (
        "policy.yaml: kindDeclarations[0].suspend: 'spec.sise' is not in the schema of widgets.example.com/v1/"
        "Widget (CRD widgets.widgets.example.com): spec has no field 'sise'; did you mean spec.size?"
    ) in message
    assert crd_gets(kube) == ["widgets.widgets.example.com"]


def test_every_problem_is_named_at_once(client):
    broken = {**WIDGET, "finishedAt": ["status.finishedAT"], "managedBy": {"path": "spec.managedBy", "own": ["x"]}}
    with pytest.raises(ConfigError) as refused:
        kindcheck.verify_kinds(client.get_crd, kinds(broken), pause=0)
    lines = str(refused.value).splitlines()[1:]
    assert [line.split(": ")[1] for line in lines] == [
        "kindDeclarations[0].finishedAt[0]",
        "kindDeclarations[0].managedBy.path",
    ]
    assert "did you mean status.finishedAt?" in lines[0]


def test_a_correct_declaration_is_verified_and_each_crd_read_once_only_for_custom_kinds(client, kube, caplog):
    caplog.set_level(logging.INFO, "jobttl.worker")
    enabled = ("batch/v1/Job", "kubeflow.org/v1/TFJob", "kubeflow.org/v2beta1/MPIJob", "kubeflow.org/v1/MPIJob")
    report = kindcheck.verify_kinds(client.get_crd, kinds(WIDGET, enabled=enabled), pause=0)
    assert "widgets.example.com/v1/Widget" in report.verified
    # batch/v1 Job has no CRD to read; the MPIJobs' one CRD (not installed here) is asked for once.
    assert sorted(crd_gets(kube)) == ["mpijobs.kubeflow.org", "tfjobs.kubeflow.org", "widgets.widgets.example.com"]
    assert sorted(report.no_crd) == ["kubeflow.org/v1/MPIJob", "kubeflow.org/v2beta1/MPIJob"]
    (checked,) = [r for r in caplog.records if getattr(r, "event", "") == "kinds-checked"]
    assert checked.no_crd == report.no_crd


def test_a_kind_served_without_a_crd_is_not_checked_and_does_not_stop_the_worker(client, kube):
    report = kindcheck.verify_kinds(client.get_crd, kinds({**GADGET, "suspend": "spec.whatever"}), pause=0)
    assert report.no_crd == ["gadgets.example.com/v1/Gadget"] and not report.errors
    assert crd_gets(kube) == ["gadgets.gadgets.example.com"]  # a 404 Status naming it


def test_a_builtin_declaration_reading_what_the_installed_crd_lacks_is_a_warning(client, caplog):
    caplog.set_level(logging.WARNING, "jobttl.worker")
    report = kindcheck.verify_kinds(client.get_crd, (TFJOB,), pause=0)
    ((kind, problems),) = report.absent
    assert kind is TFJOB and [(p.field, p.text) for p in problems] == [("suspend", "spec.runPolicy.suspend")]
    (warning,) = [r for r in caplog.records if getattr(r, "event", "") == "kind-fields-absent"]
    assert warning.fields == ["suspend: spec.runPolicy.suspend"] and "kindDeclarations" in warning.detail


def test_rbac_refusing_the_read_is_one_warning_naming_the_rule_to_grant_and_the_worker_goes_on(client, kube, caplog):
    caplog.set_level(logging.WARNING, "jobttl.worker")
    kube.add_fault(verb="get", status=403, count=10, path_contains="/customresourcedefinitions/")
    declared = kinds({**WIDGET, "suspend": "spec.sise"}, enabled=("kubeflow.org/v1/TFJob",))
    report = kindcheck.verify_kinds(client.get_crd, declared, pause=0)  # the typo goes unseen: not checked
    assert report.forbidden == ["tfjobs.kubeflow.org", "widgets.widgets.example.com"] and not report.errors
    (warning,) = [r for r in caplog.records if getattr(r, "event", "") == "kind-unverified"]
    assert warning.reason == "forbidden"
    assert (
        "{apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions], resourceNames: "
        "[tfjobs.kubeflow.org, widgets.widgets.example.com], verbs: [get]}"
    ) in warning.detail


def test_the_rule_to_grant_is_the_one_jobttl_manifests_rbac_prints():
    policy = parse_policy({"kindDeclarations": [WIDGET], "kinds": ["TFJob", "batch/v1/Job", kinddecl_key(WIDGET)]})
    (printed,) = [r for r in cluster_roles(policy)[1]["rules"] if r["resources"] == ["customresourcedefinitions"]]
    assert yaml.safe_load(kindcheck.grant_rule(policy.kinds)) == printed


def test_an_api_server_not_answering_is_retried_then_a_warning_and_the_others_are_not_waited_for(client, kube, caplog):
    caplog.set_level(logging.WARNING, "jobttl.worker")
    kube.add_fault(verb="get", status=503, count=100, path_contains="/customresourcedefinitions/")
    declared = kinds(WIDGET, enabled=("kubeflow.org/v1/TFJob",))
    report = kindcheck.verify_kinds(client.get_crd, declared, pause=0)
    assert sorted(report.unreadable) == ["tfjobs.kubeflow.org", "widgets.widgets.example.com"]
    assert len(crd_gets(kube)) == kindcheck.ATTEMPTS  # the first CRD, three times; then no more
    (warning,) = [r for r in caplog.records if getattr(r, "event", "") == "kind-unverified"]
    assert warning.reason == "unreadable" and "503" in warning.detail


def test_a_declared_version_its_crd_does_not_serve_is_a_warning_naming_what_it_serves(client, caplog):
    caplog.set_level(logging.WARNING, "jobttl.worker")
    report = kindcheck.verify_kinds(client.get_crd, kinds({**WIDGET, "version": "v2"}), pause=0)
    assert [(k.version, served) for k, served in report.not_served] == [("v2", ("v1",))]
    (warning,) = [r for r in caplog.records if getattr(r, "event", "") == "kind-version-not-served"]
    assert "does not serve v2 (it serves v1)" in warning.detail


def test_a_crd_that_prunes_nothing_does_not_stop_the_worker_and_is_named_unchecked(client, kube, caplog):
    """A correct declaration of a kind whose CRD keeps unknown fields (a v1beta1 CRD's
    preserveUnknownFields) reads fields its partial schema does not declare: not refused."""
    caplog.set_level(logging.INFO, "jobttl.worker")
    report = kindcheck.verify_kinds(client.get_crd, kinds(GIZMO), pause=0)
    assert not report.errors and list(report.unchecked) == ["legacy.example.com/v1/Gizmo"]
    assert crd_gets(kube) == ["gizmos.legacy.example.com"]
    (checked,) = [r for r in caplog.records if getattr(r, "event", "") == "kinds-checked"]
    assert checked.unchecked == ["legacy.example.com/v1/Gizmo"] and "preserveUnknownFields" in checked.detail


def test_a_hanging_api_server_is_given_up_on_within_the_bound_not_after_retries_of_the_api_timeout(kube, caplog):
    """The API server takes every CRD read and never answers in time: the worker's start must not
    wait for JOBTTL_API_TIMEOUT (30 s), each tried four times by urllib3, three times (6 min)."""
    caplog.set_level(logging.WARNING, "jobttl.worker")
    kube.reset()
    client = KubeClient(load_api_client(str(kube.kubeconfig)), timeout=30, granted=permissions("worker"))
    kube.add_fault(verb="get", delay=kindcheck.READ_TIMEOUT + 15, count=20, path_contains="/customresourcedefinitions/")
    started = time.monotonic()
    report = kindcheck.verify_at_start(client, kinds(WIDGET, enabled=("kubeflow.org/v1/TFJob",)))
    took = time.monotonic() - started
    # ATTEMPTS reads of READ_TIMEOUT, PAUSE apart (11 s); generous for a loaded machine, far below 90.
    assert took < kindcheck.BUDGET + 10, took
    assert sorted(report.unreadable) == ["tfjobs.kubeflow.org", "widgets.widgets.example.com"]
    (warning,) = [r for r in caplog.records if getattr(r, "event", "") == "kind-unverified"]
    assert warning.reason == "unreadable" and "timed out" in warning.detail.lower(), warning.detail


def test_the_whole_check_stops_reading_when_its_budget_is_spent(client, kube):
    """Each read answers, slowly (0.6 s): three CRDs would take 1.8 s; the check stops at its budget
    (a read then gets only the time left), and what it did not read is named not checked."""
    kube.add_fault(verb="get", delay=0.6, count=20, path_contains="/customresourcedefinitions/")
    declared = kinds(WIDGET, enabled=("kubeflow.org/v1/TFJob", "kubeflow.org/v1/PyTorchJob"))
    started = time.monotonic()
    with client.single_tries() as bounded:
        report = kindcheck.verify_kinds(bounded.get_crd, declared, pause=0, timeout=5, budget=1.0)
    assert time.monotonic() - started < 2.5
    assert "tfjobs.kubeflow.org" not in report.unreadable  # the first read was in time
    assert "widgets.widgets.example.com" in report.unreadable and not report.verified, report


def test_a_crd_that_cannot_check_a_declared_path_says_unverified_and_warns_naming_it(client, caplog):
    """issue 26: a CRD without a schema for the declared paths was reported verified, so a misspelt
    suspend or managedBy path passed. Argo's upstream CRD keeps anything under spec and status."""
    caplog.set_level(logging.INFO, "jobttl.worker")
    workflow = copy.deepcopy(kinddecl.builtin_declarations()["argoproj.io/v1alpha1/Workflow"])
    workflow["suspend"] = "spec.suspnd"
    workflow["managedBy"] = {"path": "spec.managedBy", "own": ["argo"]}
    report = kindcheck.verify_kinds(client.get_crd, kinds(workflow), pause=0)
    assert not report.errors and "argoproj.io/v1alpha1/Workflow" not in report.verified
    _, problems = report.unverified["argoproj.io/v1alpha1/Workflow"]
    assert {"spec.suspnd", "spec.managedBy", "status.phase"} <= {p.text for p in problems}
    (warning,) = [r for r in caplog.records if getattr(r, "event", "") == "kind-unverified"]
    assert (warning.levelname, warning.reason, warning.kind) == ("WARNING", "schema", "argoproj.io/v1alpha1/Workflow")
    assert "suspend: spec.suspnd" in warning.fields and "managedBy.path: spec.managedBy" in warning.fields
    assert (
        "'spec.suspnd' cannot be checked against the schema of argoproj.io/v1alpha1/Workflow (CRD "
        "workflows.argoproj.io): spec keeps unknown fields (x-kubernetes-preserve-unknown-fields)" in warning.detail
    )
    (checked,) = [r for r in caplog.records if getattr(r, "event", "") == "kinds-checked"]
    assert "spec.suspnd" in checked.unverified["argoproj.io/v1alpha1/Workflow"]


def test_a_builtin_kind_its_crd_cannot_check_is_unverified_in_the_checked_line_without_a_warning(client, caplog):
    caplog.set_level(logging.INFO, "jobttl.worker")
    report = kindcheck.verify_kinds(client.get_crd, (WORKFLOW,), pause=0)
    assert report.verified == [] and "argoproj.io/v1alpha1/Workflow" in report.unverified
    assert not [r for r in caplog.records if getattr(r, "event", "") == "kind-unverified"]
    (checked,) = [r for r in caplog.records if getattr(r, "event", "") == "kinds-checked"]
    assert "status.phase" in checked.unverified["argoproj.io/v1alpha1/Workflow"]


def test_a_path_a_replacement_inherited_is_held_as_the_builtin_one_a_warning_not_a_stop(client, caplog):
    """TFJob redeclared without ttl and suspend inherits spec.runPolicy.suspend, which the older CRD here
    lacks: the worker says so (the operator did not write it) and goes on, as for the built-in
    declaration; and the inherited TTL's pre-1.2 fallback may be absent, as the built-in's may."""
    caplog.set_level(logging.WARNING, "jobttl.worker")
    tfjob = copy.deepcopy(kinddecl.builtin_declarations()["kubeflow.org/v1/TFJob"])
    del tfjob["suspend"], tfjob["ttl"]
    report = kindcheck.verify_kinds(client.get_crd, kinds(tfjob), pause=0)
    ((kind, problems),) = report.absent
    assert not report.errors and kind.inherited == ("ttl", "suspend")
    assert [(p.field, p.text, p.inherited) for p in problems] == [("suspend", "spec.runPolicy.suspend", True)]
    (warning,) = [r for r in caplog.records if getattr(r, "event", "") == "kind-fields-absent"]
    assert (
        "policy.yaml: kindDeclarations[0] inherits from the built-in declaration of kubeflow.org/v1/TFJob"
        in warning.detail
    )
