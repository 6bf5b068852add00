"""The emulator serves the CustomResourceDefinitions it loaded, as kube-apiserver does.

jobttl's worker reads its kinds' CRDs at start (GET by name) to check the declared paths against
their schemas; the emulator answers from the CRD files it was given (``--crd``, or `load_crds`),
in apiextensions.k8s.io/v1's wire format: read here with the kubernetes client's typed
ApiextensionsV1Api, which deserialises every field, and with kubectl. The upstream CRDs come from
../shared/reference at run time (never copied into the repository).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import requests
import yaml
from kubernetes import client

from jobttl_emulator import WELL_KNOWN, EmulatorServer
from jobttl_emulator.crds import load_crds

from .emulator_testlib import REFERENCE, TFJOB_CRD, api_error

WIDGET_CRD = Path(__file__).resolve().parents[1] / "e2e" / "widget-crd.yaml"
UPSTREAM = [
    "rayjob/ray.io_rayjobs.yaml",
    "jobset/jobset.x-k8s.io_jobsets.yaml",
    "volcano/batch.volcano.sh_jobs.yaml",
    "spark/sparkoperator.k8s.io_sparkapplications.yaml",
    "tekton/300-pipelinerun.yaml",
    "tekton/300-taskrun.yaml",
    "kubeflow/kubeflow.org_tfjobs.yaml",
    "kubeflow/argoproj.io_workflows.yaml",
]
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
needs_reference = pytest.mark.skipif(
    not REFERENCE.is_dir(), reason="the upstream CRDs (../shared/reference) are not here"
)


def upstream_files() -> list[Path]:
    return [REFERENCE / f for f in UPSTREAM]


@pytest.fixture(scope="module")
def served():
    files = [WIDGET_CRD, *(upstream_files() if REFERENCE.is_dir() else ())]
    with EmulatorServer(resources=WELL_KNOWN, crds=files, gc_delay=0.1) as server:
        with client.ApiClient(client.Configuration(host=server.url)) as api_client:
            yield server, client.ApiextensionsV1Api(api_client)


def test_a_loaded_crd_is_read_by_name_established_with_its_schema(served):
    _, api = served
    crd = api.read_custom_resource_definition("widgets.widgets.example.com")
    assert crd.kind == "CustomResourceDefinition" and crd.api_version == "apiextensions.k8s.io/v1"
    assert crd.metadata.uid and crd.metadata.resource_version and crd.metadata.generation == 1
    assert (crd.spec.group, crd.spec.names.kind, crd.spec.names.plural, crd.spec.scope) == (
        "widgets.example.com",
        "Widget",
        "widgets",
        "Namespaced",
    )
    assert crd.spec.conversion.strategy == "None"  # apiextensions/v1's default
    (version,) = crd.spec.versions
    assert version.name == "v1" and version.served and version.storage
    assert set(version.schema.open_apiv3_schema.properties["status"].properties) == {"finishedAt", "conditions"}
    conditions = {c.type: c.status for c in crd.status.conditions}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert crd.status.accepted_names.kind == "Widget" and crd.status.stored_versions == ["v1"]


def test_an_unknown_crd_is_the_real_not_found_status(served):
    _, api = served
    error, body = api_error(lambda: api.read_custom_resource_definition("gadgets.example.com"))
    assert error.status == 404
    assert body["reason"] == "NotFound"
    assert body["message"] == 'customresourcedefinitions.apiextensions.k8s.io "gadgets.example.com" not found'
    assert body["details"] == {
        "name": "gadgets.example.com",
        "group": "apiextensions.k8s.io",
        "kind": "customresourcedefinitions",
    }


@needs_reference
def test_the_upstream_crds_are_listed_and_served_as_written(served):
    server, api = served
    # Raw JSON: the typed models take tens of seconds over these 3 MB (JobSet's CRD alone is 800 KB).
    listed = json.loads(api.list_custom_resource_definition(_preload_content=False).data)
    assert listed["kind"] == "CustomResourceDefinitionList" and listed["metadata"]["resourceVersion"]
    by_name = {item["metadata"]["name"]: item for item in listed["items"]}
    expected = {"widgets.widgets.example.com"}
    for path in upstream_files():
        for doc in yaml.load_all(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            name = doc["metadata"]["name"]
            expected.add(name)
            served_doc = json.loads(api.read_custom_resource_definition(name, _preload_content=False).data)
            assert served_doc == by_name[name]
            # The spec as written; the API server fills in only what the file leaves to its defaults.
            spec, written = dict(served_doc["spec"]), dict(doc["spec"])
            assert spec.pop("names").items() >= written.pop("names").items(), path
            assert spec.pop("conversion") == written.pop("conversion", {"strategy": "None"}), path
            assert spec == written, path
            storage = [v["name"] for v in doc["spec"]["versions"] if v.get("storage")]
            assert served_doc["status"]["storedVersions"] == storage
    assert sorted(by_name) == sorted(expected)


def test_a_crd_survives_a_reset_and_cannot_be_written(served):
    server, api = served
    server.reset()
    assert api.read_custom_resource_definition("widgets.widgets.example.com").metadata.name
    error, body = api_error(lambda: api.delete_custom_resource_definition("widgets.widgets.example.com"))
    assert error.status == 405 and body["reason"] == "MethodNotAllowed"


def test_discovery_lists_the_crds_only_where_some_were_loaded(served):
    server, _ = served
    resources = requests.get(f"{server.url}/apis/apiextensions.k8s.io/v1", timeout=10).json()["resources"]
    main, status = resources
    assert (main["name"], main["kind"], main["namespaced"], main["shortNames"]) == (
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        ["crd", "crds"],
    )
    assert status["name"] == "customresourcedefinitions/status"
    with EmulatorServer(resources=WELL_KNOWN) as plain:  # no CRD files: no apiextensions group at all
        with client.ApiClient(client.Configuration(host=plain.url)) as api_client:
            error, body = api_error(
                lambda: client.ApiextensionsV1Api(api_client).read_custom_resource_definition("tfjobs.kubeflow.org")
            )
    assert error.status == 404 and "name" not in body["details"]


def test_a_forbidden_fault_on_a_crd_reads_as_rbac_refusing_it(served):
    server, api = served
    server.add_fault(verb="get", status=403, path_contains="/customresourcedefinitions/")
    error, body = api_error(lambda: api.read_custom_resource_definition("widgets.widgets.example.com"))
    assert error.status == 403
    assert body["message"] == (
        'customresourcedefinitions.apiextensions.k8s.io "widgets.widgets.example.com" is '
        'forbidden: User "system:serviceaccount:jobttl:worker" cannot get resource '
        '"customresourcedefinitions" in API group "apiextensions.k8s.io" at the cluster scope'
    )
    assert body["details"] == {
        "name": "widgets.widgets.example.com",
        "group": "apiextensions.k8s.io",
        "kind": "customresourcedefinitions",
    }


def test_load_crds_keeps_the_crd_each_kind_came_from():
    (widget,) = load_crds([WIDGET_CRD])
    assert widget.crd["metadata"]["name"] == "widgets.widgets.example.com"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_kubectl_gets_the_crds(served, tmp_path):
    server, _ = served
    kubeconfig = server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    env = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": kubeconfig}
    run = subprocess.run(
        ["kubectl", f"--cache-dir={tmp_path / 'cache'}", "get", "crd", "widgets.widgets.example.com"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    header, row = run.stdout.splitlines()
    assert header.split() == ["NAME", "CREATED", "AT"] and row.split()[0] == "widgets.widgets.example.com"
    jsonpath = subprocess.run(
        [
            "kubectl",
            f"--cache-dir={tmp_path / 'cache'}",
            "get",
            "crd",
            "widgets.widgets.example.com",
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Established')].status}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert jsonpath.stdout == "True", jsonpath.stderr


def test_the_tfjob_crd_is_served_when_given_on_its_own():
    if not TFJOB_CRD.exists():
        pytest.skip("the reference TFJob CRD is not here")
    with EmulatorServer(resources=WELL_KNOWN, crds=[TFJOB_CRD]) as server:
        with client.ApiClient(client.Configuration(host=server.url)) as api_client:
            crd = client.ApiextensionsV1Api(api_client).read_custom_resource_definition("tfjobs.kubeflow.org")
    assert "runPolicy" in crd.spec.versions[0].schema.open_apiv3_schema.properties["spec"].properties
