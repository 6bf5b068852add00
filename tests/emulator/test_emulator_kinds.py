"""Kinds from CRD files, built-in kinds, namespaces, field selectors and the Date header."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from email.utils import parsedate_to_datetime
from types import SimpleNamespace

import pytest
import yaml
from kubernetes import client

from jobttl_emulator import WELL_KNOWN, EmulatorServer, Resource
from jobttl_emulator.crds import CRDError, load_crds, resources_from_crd

from .emulator_testlib import REFERENCE, TFJOB_CRD, Cluster, pod, tfjob, wait_until

TFJOBS = "/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs"


def test_a_crd_gives_names_scope_subresources_columns_and_schema():
    (tfjobs,) = load_crds([TFJOB_CRD])
    assert (tfjobs.group, tfjobs.version, tfjobs.kind, tfjobs.plural, tfjobs.singular, tfjobs.list_kind) == (
        "kubeflow.org",
        "v1",
        "TFJob",
        "tfjobs",
        "tfjob",
        "TFJobList",
    )
    assert tfjobs.namespaced and tfjobs.status_subresource and not tfjobs.builtin
    assert [c["name"] for c in tfjobs.printer_columns] == ["State", "Age"]
    assert "runPolicy" in tfjobs.schema["properties"]["spec"]["properties"]
    (workflows,) = load_crds([REFERENCE / "kubeflow" / "argoproj.io_workflows.yaml"])
    assert workflows.short_names == ("wf",) and not workflows.status_subresource


@pytest.mark.parametrize(
    "crd", ["kubeflow.org_tfjobs.yaml", "kubeflow.org_pytorchjobs.yaml", "argoproj.io_workflows.yaml"]
)
def test_a_well_known_kind_is_registered_as_its_real_crd_declares_it(crd):
    """WELL_KNOWN writes out the names, scope, status subresource and printer columns of the real
    CRDs (so the command serves them without CRD files); they must not drift from the CRDs here."""
    for real in load_crds([REFERENCE / "kubeflow" / crd]):
        (ours,) = [r for r in WELL_KNOWN if (r.group, r.version, r.kind) == (real.group, real.version, real.kind)]
        assert ours == real  # every field but the schema and the printer columns
        assert ours.printer_columns == real.printer_columns


def test_crd_versions_scope_and_bad_documents():
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"kind": "Thing", "plural": "things"},
            "versions": [
                {"name": "v1", "served": True, "selectableFields": [{"jsonPath": ".spec.color"}]},
                {"name": "v0", "served": False},
            ],
        },
    }
    (thing,) = resources_from_crd(crd)
    assert thing.version == "v1" and not thing.namespaced and thing.selectable_fields == ("spec.color",)
    with pytest.raises(CRDError):
        resources_from_crd({"apiVersion": "v1", "kind": "ConfigMap"})


def test_crd_replaces_a_plain_registration_of_the_same_kind():
    plain = Resource("kubeflow.org", "v1", "TFJob", "tfjobs")
    with EmulatorServer(resources=(plain,), crds=[TFJOB_CRD]) as server:
        served, definitions = server.store.resources  # and the CRDs, served since one was loaded
        assert served.printer_columns and served is not plain
        assert definitions.plural == "customresourcedefinitions"


def test_system_namespaces_and_auto_provisioning(full):
    core = client.CoreV1Api(full.api.api_client)
    assert [n.metadata.name for n in core.list_namespace().items] == [
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
    ]
    full.create("a", ns="team-a")  # namespaces used by objects exist implicitly
    team = core.read_namespace("team-a")
    assert team.status.phase == "Active" and team.spec.finalizers == ["kubernetes"]
    assert team.metadata.labels == {"kubernetes.io/metadata.name": "team-a"}
    # A namespace that nothing uses does not exist, and reading in it is a plain NotFound for the object.
    code, _, body = full.raw("GET", TFJOBS.format(ns="missing") + "/x")
    assert code == 404 and body["message"] == 'tfjobs.kubeflow.org "x" not found'
    assert full.raw("GET", "/api/v1/namespaces/missing")[2]["message"] == 'namespaces "missing" not found'


def test_namespace_create_get_and_cluster_scope(full):
    code, _, created = full.raw(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "made", "namespace": "ignored"}},
    )
    assert code == 201 and "namespace" not in created["metadata"]
    code, _, body = full.raw(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "made"}}
    )
    assert code == 409 and body["message"] == 'namespaces "made" already exists'
    resources = {r["name"]: r for r in full.raw("GET", "/api/v1")[2]["resources"]}
    assert resources["namespaces"]["namespaced"] is False and resources["namespaces"]["shortNames"] == ["ns"]
    assert "deletecollection" not in resources["namespaces"]["verbs"]


def test_deleting_a_namespace_terminates_it_and_its_content(full):
    core = client.CoreV1Api(full.api.api_client)
    full.create("a", ns="doomed")
    full.create("held", ns="doomed", finalizers=["example.com/hold"])
    code, _, body = full.raw("DELETE", "/api/v1/namespaces/doomed")
    assert code == 200 and body["status"]["phase"] == "Terminating" and body["metadata"]["deletionTimestamp"]

    code, _, body = full.raw("POST", TFJOBS.format(ns="doomed"), tfjob("new"))
    assert code == 403 and body["reason"] == "Forbidden"
    assert body["message"] == (
        'tfjobs.kubeflow.org "new" is forbidden: unable to create new content in namespace doomed '
        "because it is being terminated"
    )
    assert body["details"]["causes"][0]["reason"] == "NamespaceTerminating"

    wait_until(lambda: not full.exists("a", ns="doomed"))
    assert full.get("held", ns="doomed")["metadata"][
        "deletionTimestamp"
    ]  # held by its finalizer, and so is the namespace
    assert core.read_namespace("doomed").status.phase == "Terminating"
    full.api.patch_namespaced_custom_object(
        "kubeflow.org", "v1", "doomed", "tfjobs", "held", {"metadata": {"finalizers": None}}
    )
    wait_until(lambda: full.raw("GET", "/api/v1/namespaces/doomed")[0] == 404)


def test_pods_are_namespaced_and_label_selected(full):
    core = client.CoreV1Api(full.api.api_client)
    for name, role in (("w0", "worker"), ("w1", "worker"), ("ps0", "ps")):
        core.create_namespaced_pod("ns", pod(name, labels={"role": role}))
    assert [p.metadata.name for p in core.list_namespaced_pod("ns", label_selector="role=worker").items] == ["w0", "w1"]
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces(label_selector="role!=worker").items] == ["ps0"]
    deleted = core.delete_namespaced_pod("w0", "ns")
    assert deleted.kind == "Pod" and deleted.metadata.name == "w0"  # the pod registry returns the deleted object


def test_built_in_field_selectors(full):
    core = client.CoreV1Api(full.api.api_client)
    running = pod("running")
    core.create_namespaced_pod("ns", running)
    core.create_namespaced_pod("ns", pod("pending"))
    core.patch_namespaced_pod_status("running", "ns", {"status": {"phase": "Running"}})
    assert [p.metadata.name for p in core.list_namespaced_pod("ns", field_selector="status.phase=Running").items] == [
        "running"
    ]
    code, _, body = full.raw("GET", "/api/v1/namespaces/ns/pods?fieldSelector=spec.bogus%3Dx")
    assert code == 400 and body["message"] == "field label not supported: spec.bogus"

    for name, kind in (("e1", "TFJob"), ("e2", "Pod")):
        core.create_namespaced_event(
            "ns",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name},
                "reason": "R",
                "involvedObject": {"kind": kind, "name": "x", "namespace": "ns"},
            },
        )
    selected = core.list_namespaced_event("ns", field_selector="involvedObject.kind=TFJob,involvedObject.name=x")
    assert [e.metadata.name for e in selected.items] == ["e1"]
    code, _, body = full.raw("GET", TFJOBS.format(ns="ns") + "?fieldSelector=spec.x%3D1")
    assert (
        code == 400
        and body["message"] == '"spec.x" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )


def test_deleting_a_batch_job_without_a_policy_orphans_its_pods(full):
    code, _, job = full.raw(
        "POST",
        "/apis/batch/v1/namespaces/ns/jobs",
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}},
    )
    assert code == 201
    code, _, body = full.raw("DELETE", "/apis/batch/v1/namespaces/ns/jobs/j")
    assert code == 200 and body["metadata"]["finalizers"] == ["orphan"]  # batch/v1 DefaultGarbageCollectionPolicy
    wait_until(lambda: full.raw("GET", "/apis/batch/v1/namespaces/ns/jobs/j")[0] == 404)


@pytest.mark.parametrize("path", ["/version", "/apis/kubeflow.org/v1/namespaces/ns/tfjobs/missing", "/openapi/v3"])
def test_responses_carry_a_date_header(full, path):
    code, headers, _ = full.raw("GET", path)
    sent = parsedate_to_datetime(headers["Date"])
    assert abs(sent.timestamp() - time.time()) < 5, headers["Date"]


def test_watch_streams_carry_a_date_header(full):
    code, headers, _ = full.raw("GET", TFJOBS.format(ns="ns") + "?watch=1&timeoutSeconds=1")
    assert code == 200 and parsedate_to_datetime(headers["Date"]).year >= 2024


def test_cluster_fixture_still_serves_only_tfjobs(cluster: Cluster):
    # Without a namespaces registration nothing is auto-provisioned.
    assert cluster.raw("GET", "/api/v1/namespaces")[0] == 404
    cluster.create("a", ns="anywhere")
    assert cluster.exists("a", ns="anywhere")


def test_the_command_serves_the_well_known_kinds_and_crd_files(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobttl_emulator",
            "--port",
            "0",
            "--crd",
            str(TFJOB_CRD),
            "--write-kubeconfig",
            str(kubeconfig),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: kubeconfig.exists() or proc.poll() is not None, timeout=20)
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        with client.ApiClient(client.Configuration(host=server)) as api_client:
            cluster = Cluster(SimpleNamespace(url=server), client.CustomObjectsApi(api_client))  # type: ignore[arg-type]
            core = {r["name"] for r in cluster.raw("GET", "/api/v1")[2]["resources"]}
            assert {"pods", "pods/log", "events", "namespaces"} <= core
            assert "jobs" in {r["name"] for r in cluster.raw("GET", "/apis/batch/v1")[2]["resources"]}
            cluster.create("a")
            table = cluster.raw("GET", TFJOBS.format(ns="ns"), accept="application/json;as=Table;v=v1;g=meta.k8s.io")[2]
            assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "State", "Age"]
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0
