"""Discovery, kubeconfig, resource registration, seeding and the foreground runner."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml
from kubernetes import client, config
from kubernetes.dynamic import DynamicClient

from jobttl_emulator import TFJOB, EmulatorServer, Resource

from .emulator_testlib import Cluster, api_error, tfjob, wait_until

SAMPLE = Path("/work/shared/reference/kubeflow/tfjob-succeeded-status-sample.yaml")


def test_kubeconfig_is_loadable(server, tmp_path):
    path = server.write_kubeconfig(str(tmp_path / "kubeconfig"))
    configuration = client.Configuration()
    config.load_kube_config(config_file=path, client_configuration=configuration)
    assert configuration.host == server.url
    assert "Bearer emulator-token" in configuration.api_key.values()
    contexts, current = config.list_kube_config_contexts(config_file=path)
    assert current["name"] == "emulator" and current["context"]["namespace"] == "default"


def test_version_and_discovery_documents(cluster, server):
    assert cluster.raw("GET", "/version")[2]["gitVersion"] == "v1.32.0"
    assert cluster.raw("GET", "/api")[2]["versions"] == ["v1"]
    groups = cluster.raw("GET", "/apis")[2]
    assert groups["kind"] == "APIGroupList"
    assert groups["groups"][0] == {
        "name": "kubeflow.org",
        "versions": [{"groupVersion": "kubeflow.org/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "kubeflow.org/v1", "version": "v1"},
    }
    # kubectl auth can-i creates SelfSubjectAccessReviews, which every server offers.
    assert [g["name"] for g in groups["groups"]] == ["kubeflow.org", "authorization.k8s.io", "authentication.k8s.io"]
    assert cluster.raw("GET", "/apis/kubeflow.org")[2]["kind"] == "APIGroup"
    resources = cluster.raw("GET", "/apis/kubeflow.org/v1")[2]
    assert resources["kind"] == "APIResourceList" and resources["groupVersion"] == "kubeflow.org/v1"
    main, status = resources["resources"]
    assert {k: main[k] for k in ("name", "singularName", "namespaced", "kind")} == {
        "name": "tfjobs",
        "singularName": "tfjob",
        "namespaced": True,
        "kind": "TFJob",
    }
    assert sorted(main["verbs"]) == ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    assert status["name"] == "tfjobs/status" and sorted(status["verbs"]) == ["get", "patch", "update"]
    assert client.VersionApi(cluster.api.api_client).get_code().git_version == "v1.32.0"


def test_dynamic_client_discovers_and_uses_tfjobs(api_client, tmp_path):
    dyn = DynamicClient(api_client, cache_file=str(tmp_path / "discovery.json"))
    tfjobs = dyn.resources.get(api_version="kubeflow.org/v1", kind="TFJob")
    assert tfjobs.namespaced and tfjobs.name == "tfjobs" and "status" in tfjobs.subresources

    created = tfjobs.create(body=tfjob("dyn"), namespace="ns")
    assert created.metadata.uid
    tfjobs.status.patch(
        body={"metadata": {"name": "dyn"}, "status": {"phase": "Succeeded"}},
        namespace="ns",
        content_type="application/merge-patch+json",
    )
    listed = tfjobs.get(namespace="ns", label_selector="")
    assert [i.metadata.name for i in listed.items] == ["dyn"]
    assert listed.items[0].status.phase == "Succeeded"
    deleted = tfjobs.delete(name="dyn", namespace="ns", body={"propagationPolicy": "Background"})
    assert deleted.status == "Success" and deleted.details.uid == created.metadata.uid


def test_more_kinds_are_one_registration_each(tmp_path):
    resources = (
        TFJOB,
        Resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
        Resource("batch", "v1", "Job", "jobs"),
        Resource("argoproj.io", "v1alpha1", "Workflow", "workflows", status_subresource=False),
        Resource("", "v1", "Event", "events", status_subresource=False),
    )
    with EmulatorServer(resources=resources) as server:
        with client.ApiClient(client.Configuration(host=server.url)) as api_client:
            cluster = Cluster(server, client.CustomObjectsApi(api_client))
            assert [g["name"] for g in cluster.raw("GET", "/apis")[2]["groups"]] == [
                "kubeflow.org",
                "batch",
                "argoproj.io",
                "authorization.k8s.io",
                "authentication.k8s.io",
            ]
            assert [r["name"] for r in cluster.raw("GET", "/api/v1")[2]["resources"]] == ["events"]

            custom = client.CustomObjectsApi(api_client)
            job = custom.create_namespaced_custom_object(
                "batch", "v1", "ns", "jobs", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}
            )
            assert job["metadata"]["generation"] == 1
            # Argo's CRD has no status subresource: status is written with the object.
            wf = custom.create_namespaced_custom_object(
                "argoproj.io",
                "v1alpha1",
                "ns",
                "workflows",
                {
                    "apiVersion": "argoproj.io/v1alpha1",
                    "kind": "Workflow",
                    "metadata": {"name": "w"},
                    "status": {"phase": "Succeeded"},
                },
            )
            assert wf["status"] == {"phase": "Succeeded"}
            assert cluster.raw("GET", "/apis/argoproj.io/v1alpha1/namespaces/ns/workflows/w/status")[0] == 404

            code, _, event = cluster.raw(
                "POST",
                "/api/v1/namespaces/ns/events",
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": "e1"},
                    "reason": "Deleted",
                    "involvedObject": {"kind": "TFJob", "name": "a", "namespace": "ns"},
                },
            )
            assert code == 201 and event["metadata"]["namespace"] == "ns"
            events = client.CoreV1Api(api_client).list_namespaced_event("ns")
            assert [e.reason for e in events.items] == ["Deleted"]
            exc, body = api_error(lambda: client.CoreV1Api(api_client).read_namespaced_event("nope", "ns"))
            assert body["message"] == 'events "nope" not found' and body["details"] == {
                "name": "nope",
                "kind": "events",
            }


def test_seeds_apply_status_through_the_status_path(server, cluster, tmp_path):
    seed = tmp_path / "seed.yaml"
    seed.write_text(
        textwrap.dedent("""\
        apiVersion: kubeflow.org/v1
        kind: TFJob
        metadata:
          name: finished-now
          namespace: team-a
        spec: {}
        status:
          completionTime: $NOW
          conditions:
          - type: Succeeded
            status: "True"
            lastTransitionTime: $NOW
        ---
        """)
        + SAMPLE.read_text()
    )
    created = server.seed(str(seed))
    assert [o["metadata"]["name"] for o in created] == ["finished-now", "tfjob-simple"]

    now_job = cluster.get("finished-now", ns="team-a")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", now_job["status"]["completionTime"])
    assert now_job["status"]["conditions"][0]["lastTransitionTime"] == now_job["status"]["completionTime"]

    sample = cluster.get("tfjob-simple", ns="kubeflow")
    original = yaml.safe_load(SAMPLE.read_text())
    assert sample["status"] == original["status"]
    assert sample["metadata"]["uid"] != original["metadata"]["uid"]  # server-set fields are fresh
    assert sample["metadata"]["generation"] == 1


def test_run_serves_seeds_and_stops_on_sigterm(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    seed = tmp_path / "seed.yaml"
    seed.write_text(SAMPLE.read_text())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobttl_emulator",
            "--port",
            "0",
            "--seed",
            str(seed),
            "--write-kubeconfig",
            str(kubeconfig),
            "--gc-delay",
            "0.1",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: kubeconfig.exists() or proc.poll() is not None, timeout=20)
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        with client.ApiClient(configuration) as api_client:
            job = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
                "kubeflow.org", "v1", "kubeflow", "tfjobs", "tfjob-simple"
            )
        assert job["status"]["completionTime"] == "2021-09-06T11:49:30Z"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, output
    assert "Kubernetes API emulator serving http://127.0.0.1:" in output
    assert "stopping the Kubernetes API emulator" in output
