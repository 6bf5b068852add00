"""The real kubectl (1.32) against the emulator serving the reference TFJob CRD, as a person would use it."""

from __future__ import annotations

import json
import re
import os
import shutil
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from jobttl_emulator import WELL_KNOWN, EmulatorServer
from jobttl_emulator.localstack import EXAMPLES as MAKE_RUN_SEEDS

from .emulator_testlib import REFERENCE, TFJOB_CRD, pod, wait_until

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
EXAMPLES = REFERENCE / "kubeflow"
NS = "kubeflow"


class Kubectl:
    """Runs kubectl with its own kubeconfig, HOME and discovery cache, so nothing leaks between tests."""

    def __init__(self, kubeconfig: str, home: Path) -> None:
        self.env = {**os.environ, "HOME": str(home), "KUBECONFIG": kubeconfig}
        self.cache = str(home / "cache")

    def __call__(self, *args: str, stdin: str | None = None, ok: bool = True) -> subprocess.CompletedProcess:
        assert KUBECTL is not None
        done = subprocess.run(
            [KUBECTL, f"--cache-dir={self.cache}", *args],
            input=stdin,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done

    def out(self, *args: str, stdin: str | None = None) -> str:
        return self(*args, stdin=stdin).stdout

    def watch(self, *args: str, output: Path) -> subprocess.Popen:
        assert KUBECTL is not None
        return subprocess.Popen(
            [KUBECTL, f"--cache-dir={self.cache}", *args],
            env=self.env,
            stdout=output.open("w"),
            stderr=subprocess.STDOUT,
            text=True,
        )


@pytest.fixture
def emulator():
    if not TFJOB_CRD.exists():
        pytest.skip(f"reference CRD {TFJOB_CRD} is not beside the checkout")
    with EmulatorServer(resources=WELL_KNOWN, crds=[TFJOB_CRD], gc_delay=0.1) as server:
        yield server


@pytest.fixture
def kubectl(emulator, tmp_path):
    return Kubectl(emulator.write_kubeconfig(str(tmp_path / "kubeconfig")), tmp_path)


@pytest.fixture
def api(emulator):
    with client.ApiClient(client.Configuration(host=emulator.url)) as api_client:
        yield api_client


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_the_dispatcher_runs_kubectl_1_32(kubectl, emulator):
    version = json.loads(kubectl.out("version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"] == "v1.32.0"
    agents = {e["userAgent"] for e in emulator.requests(path_contains="/version")}
    assert any(a.startswith(("kubectl.1.32/", "kubectl/v1.32")) for a in agents), agents


def test_a_tfjob_session(kubectl, emulator, api, tmp_path):
    # Client-side apply creates, then patches (a JSON merge patch for a custom resource).
    assert (
        kubectl.out("apply", "-f", str(EXAMPLES / "simple.yaml")).strip() == "tfjob.kubeflow.org/tfjob-simple created"
    )
    typo = (EXAMPLES / "simple.yaml").read_text().replace("restartPolicy:", "restartPolicyy:")
    refused = kubectl("apply", "-f", "-", stdin=typo, ok=False)  # kubectl asks for fieldValidation=Strict
    assert 'strict decoding error: unknown field "spec.tfReplicaSpecs.Worker.restartPolicyy"' in refused.stderr
    three = (EXAMPLES / "simple.yaml").read_text().replace("replicas: 2", "replicas: 3")
    assert kubectl.out("apply", "-f", "-", stdin=three).strip() == "tfjob.kubeflow.org/tfjob-simple configured"
    assert (
        kubectl.out("get", "tfjob", "tfjob-simple", "-n", NS, "-o", "jsonpath={.spec.tfReplicaSpecs.Worker.replicas}")
        == "3"
    )
    # Server-side apply.
    mnist = (EXAMPLES / "tf_job_mnist.yaml").read_text()
    assert "serverside-applied" in kubectl.out("apply", "--server-side", "-n", NS, "-f", "-", stdin=mnist)
    managers = json.loads(
        kubectl.out("get", "tfjob", "dist-mnist-for-e2e-test", "-n", NS, "-o", "json", "--show-managed-fields")
    )
    assert [m["manager"] for m in managers["metadata"]["managedFields"]] == ["kubectl"]

    # Columns: the CRD's State and Age.
    kubectl(
        "patch",
        "tfjob",
        "tfjob-simple",
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"conditions":[{"type":"Created","status":"True"},{"type":"Succeeded","status":"True"}]}}',
    )
    rows = _rows(kubectl.out("get", "tfjobs", "-n", NS))
    assert rows[0] == ["NAME", "STATE", "AGE"]
    assert len(rows[1]) == 2 and rows[1][0] == "dist-mnist-for-e2e-test"  # no conditions: an empty State
    assert rows[2][:2] == ["tfjob-simple", "Succeeded"]

    # Output formats.
    as_yaml = yaml.safe_load(kubectl.out("get", "tfjob", "tfjob-simple", "-n", NS, "-o", "yaml"))
    assert as_yaml["kind"] == "TFJob" and as_yaml["status"]["conditions"][-1]["type"] == "Succeeded"
    as_json = json.loads(kubectl.out("get", "tfjobs", "-n", NS, "-o", "json"))
    assert [i["metadata"]["name"] for i in as_json["items"]] == ["dist-mnist-for-e2e-test", "tfjob-simple"]

    # Patches: merge, JSON, and the real server's refusal of strategic merge for a custom resource.
    kubectl(
        "patch",
        "tfjob",
        "tfjob-simple",
        "-n",
        NS,
        "--type=merge",
        "-p",
        '{"spec":{"runPolicy":{"ttlSecondsAfterFinished":600}}}',
    )
    kubectl(
        "patch",
        "tfjob",
        "tfjob-simple",
        "-n",
        NS,
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/tfReplicaSpecs/Worker/replicas","value":1}]',
    )
    refused = kubectl("patch", "tfjob", "tfjob-simple", "-n", NS, "-p", '{"spec":{}}', ok=False)
    assert (
        refused.returncode != 0
        and "application/strategic-merge-patch+json is not supported by kubeflow.org/v1, Kind=TFJob" in refused.stderr
    )
    spec = json.loads(kubectl.out("get", "tfjob", "tfjob-simple", "-n", NS, "-o", "jsonpath={.spec}"))
    assert spec["runPolicy"] == {"ttlSecondsAfterFinished": 600} and spec["tfReplicaSpecs"]["Worker"]["replicas"] == 1

    # Labels, annotations, selectors, chunked lists.
    kubectl("label", "tfjob", "tfjob-simple", "-n", NS, "team=vision")
    kubectl("annotate", "tfjob", "tfjob-simple", "-n", NS, "jobttl.io/ttl=1h")
    assert [r[0] for r in _rows(kubectl.out("get", "tfjobs", "-n", NS, "-l", "team=vision"))[1:]] == ["tfjob-simple"]
    assert (
        kubectl.out("get", "tfjob", "tfjob-simple", "-n", NS, "-o", "jsonpath={.metadata.annotations.jobttl\\.io/ttl}")
        == "1h"
    )
    emulator.clear_requests()
    chunked = _rows(kubectl.out("get", "tfjobs", "-A", "--chunk-size=1"))
    assert [r[1] for r in chunked[1:]] == ["dist-mnist-for-e2e-test", "tfjob-simple"]
    pages = [e["query"] for e in emulator.requests("GET", "/apis/kubeflow.org/v1/tfjobs")]
    assert [p.get("limit") for p in pages] == ["1", "1"] and "continue" in pages[1]

    # explain walks the CRD's schema.
    explained = kubectl.out("explain", "tfjobs.spec.runPolicy")
    assert (
        "KIND:       TFJob" in explained
        and "FIELD: runPolicy <Object>" in explained
        and "ttlSecondsAfterFinished" in explained
    )

    # describe, with the object's events; get events.
    uid = as_yaml["metadata"]["uid"]
    client.CoreV1Api(api).create_namespaced_event(
        NS,
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "tfjob-simple.1"},
            "type": "Normal",
            "reason": "SuccessfulDeleteJob",
            "message": "deleted after its TTL",
            "lastTimestamp": as_yaml["metadata"]["creationTimestamp"],
            "count": 1,
            "involvedObject": {
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "name": "tfjob-simple",
                "namespace": NS,
                "uid": uid,
            },
        },
    )
    described = kubectl.out("describe", "tfjob", "tfjob-simple", "-n", NS)
    assert "Name:         tfjob-simple" in described and "SuccessfulDeleteJob" in described
    events = _rows(kubectl.out("get", "events", "-n", NS))
    assert events[0] == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert events[1][1:4] == ["Normal", "SuccessfulDeleteJob", "tfjob/tfjob-simple"]

    # get -w sees a deletion another client makes.
    watched = tmp_path / "watch.out"
    watcher = kubectl.watch("get", "tfjobs", "-n", NS, "-w", "--output-watch-events", output=watched)
    try:
        wait_until(lambda: "tfjob-simple" in watched.read_text(), timeout=20, interval=0.1)
        client.CustomObjectsApi(api).delete_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs", "tfjob-simple")
        wait_until(
            lambda: any(line.startswith("DELETED") for line in watched.read_text().splitlines()),
            timeout=20,
            interval=0.1,
        )
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)
    assert [line.split()[:2] for line in watched.read_text().splitlines() if line.startswith("DELETED")] == [
        ["DELETED", "tfjob-simple"]
    ]

    assert (
        kubectl.out("delete", "tfjob", "dist-mnist-for-e2e-test", "-n", NS).strip()
        == 'tfjob.kubeflow.org "dist-mnist-for-e2e-test" deleted'
    )
    assert "No resources found in kubeflow namespace." in kubectl("get", "tfjobs", "-n", NS).stderr
    # The server answers `tfjobs.kubeflow.org "x" not found`; kubectl 1.32 then looks the namespace up and reports that.
    missing = kubectl("get", "tfjob", "x", "-n", "missing", ok=False)
    assert missing.stderr.strip() == 'Error from server (NotFound): namespaces "missing" not found'
    assert kubectl("get", "tfjob", "x", "-n", "default", ok=False).stderr.strip() == (
        'Error from server (NotFound): tfjobs.kubeflow.org "x" not found'
    )


def test_jobs_pods_logs_namespaces_and_can_i(kubectl, emulator, api, tmp_path):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pi", "namespace": "default"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "pi", "image": "perl"}, {"name": "side", "image": "busybox"}],
                }
            }
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(job))
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "perl:5"
    assert kubectl.out("apply", "-f", "-", stdin=json.dumps(job)).strip() == "job.batch/pi configured"
    kubectl(
        "patch", "job", "pi", "-p", '{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"alpine"}]}}}}'
    )
    images = kubectl.out("get", "job", "pi", "-o", "jsonpath={.spec.template.spec.containers[*].image}")
    assert images == "perl:5 alpine"  # strategic merge: containers merged by name
    assert _rows(kubectl.out("get", "jobs"))[0] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]

    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", pod("pi-abcde", containers=("pi", "side"), labels={"job-name": "pi"}))
    emulator.set_log("default", "pi-abcde", "pi", "3.14\n2.71\n")
    assert _rows(kubectl.out("get", "pods", "-l", "job-name=pi"))[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert kubectl.out("logs", "pi-abcde", "-c", "pi", "--tail=1") == "2.71\n"
    defaulted = kubectl("logs", "pi-abcde")  # kubectl names the first container itself, and says so
    assert defaulted.stdout == "3.14\n2.71\n" and 'Defaulted container "pi" out of: pi, side' in defaulted.stderr
    assert "previous terminated container" in kubectl("logs", "pi-abcde", "-c", "pi", "--previous", ok=False).stderr

    assert kubectl.out("create", "namespace", "team-x").strip() == "namespace/team-x created"
    assert ["team-x", "Active"] == next(r[:2] for r in _rows(kubectl.out("get", "ns")) if r[0] == "team-x")
    kubectl("delete", "namespace", "team-x")
    assert kubectl("get", "ns", "team-x", ok=False).returncode != 0

    assert kubectl.out("auth", "can-i", "delete", "tfjobs", "-n", NS).strip() == "yes"
    emulator.set_access_rules([{"verbs": ["get", "list", "watch"], "apiGroups": ["*"], "resources": ["*"]}])
    denied = kubectl("auth", "can-i", "delete", "tfjobs", "-n", NS, ok=False)
    assert denied.returncode == 1 and denied.stdout.strip() == "no"
    assert kubectl.out("auth", "can-i", "list", "pods").strip() == "yes"


def test_a_kind_registered_without_a_crd(kubectl):
    """PyTorchJob is served without its CRD: a schema that takes anything, and its CRD's columns."""
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "namespace": "default"},
        "spec": {"anything": {"goes": True}},
    }
    assert kubectl.out("apply", "-f", "-", stdin=json.dumps(job)).strip() == "pytorchjob.kubeflow.org/pt created"
    assert _rows(kubectl.out("get", "pytorchjobs"))[0] == ["NAME", "STATE", "AGE"]
    assert "KIND:       PyTorchJob" in kubectl.out("explain", "pytorchjobs")
    assert "serverside-applied" in kubectl.out("apply", "--server-side", "-f", "-", stdin=json.dumps(job))


def test_make_runs_emulator_shows_each_tfjobs_state(tmp_path):
    """`make run` starts the emulator command with its seeds and no --crd; `kubectl get tfjobs -A`
    shows the State column a cluster with the training operator shows: the last condition's type."""
    kubeconfig = tmp_path / "kubeconfig"
    emulator = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobttl_emulator",
            "--port",
            "0",
            "--seed",
            str(MAKE_RUN_SEEDS),
            "--write-kubeconfig",
            str(kubeconfig),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: kubeconfig.exists() or emulator.poll() is not None, timeout=20)
        rows = _rows(Kubectl(str(kubeconfig), tmp_path).out("get", "tfjobs", "-A"))
    finally:
        emulator.send_signal(signal.SIGTERM)
        emulator.wait(timeout=10)
    assert rows[0] == ["NAMESPACE", "NAME", "STATE", "AGE"]
    assert [row[:3] for row in rows[1:]] == [
        ["kubeflow", "mnist-failed-ttl-20s", "Failed"],
        ["kubeflow", "mnist-no-ttl", "Succeeded"],
        ["kubeflow", "mnist-running", "Running"],
        ["kubeflow", "mnist-succeeded-ttl-10s", "Succeeded"],
    ]


# What `kubectl get` prints for each job kind the emulator's command serves, as on a cluster with the
# kind's real CRD installed (the CRDs are cited in jobttl_emulator/resources.py); AGE is any age.
STATE_AGE = (["NAME", "STATE", "AGE"], ["j", "Succeeded", "AGE"])
COLUMNS = {
    ("kubeflow.org/v1", "TFJob"): STATE_AGE,
    ("kubeflow.org/v1", "PyTorchJob"): STATE_AGE,
    ("kubeflow.org/v1", "MPIJob"): (["NAME", "AGE", "STATE"], ["j", "AGE", "Succeeded"]),
    ("kubeflow.org/v1", "XGBoostJob"): STATE_AGE,
    ("kubeflow.org/v1", "PaddleJob"): STATE_AGE,
    ("kubeflow.org/v1", "JAXJob"): STATE_AGE,
    ("kubeflow.org/v2beta1", "MPIJob"): (["NAME", "AGE"], ["j", "AGE"]),  # mpi-operator's CRD declares no columns
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): STATE_AGE,
    # Argo's Age is the time the workflow started, not the object's.
    ("argoproj.io/v1alpha1", "Workflow"): (["NAME", "STATUS", "AGE", "MESSAGE"], ["j", "Failed", "2d", "OOMKilled"]),
}


@pytest.fixture
def well_known_kubectl(tmp_path):
    """kubectl against the emulator as its command serves it: the well-known kinds, no CRD file."""
    with EmulatorServer(resources=WELL_KNOWN, gc_delay=0.1) as server:
        yield Kubectl(server.write_kubeconfig(str(tmp_path / "kubeconfig")), tmp_path)


# The kinds built in since: their headers (the cells are their controllers' own status fields).
HEADERS = {
    ("ray.io/v1", "RayJob"): [
        "NAME",
        "JOB STATUS",
        "DEPLOYMENT STATUS",
        "RAY CLUSTER NAME",
        "START TIME",
        "END TIME",
        "AGE",
    ],
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): ["NAME", "TERMINALSTATE", "RESTARTS", "COMPLETED", "SUSPENDED", "AGE"],
    ("batch.volcano.sh/v1alpha1", "Job"): ["NAME", "STATUS", "MINAVAILABLE", "RUNNINGS", "AGE"],
    ("sparkoperator.k8s.io/v1beta2", "SparkApplication"): [
        "NAME",
        "SUSPEND",
        "STATUS",
        "ATTEMPTS",
        "START",
        "FINISH",
        "AGE",
    ],
    ("tekton.dev/v1", "PipelineRun"): ["NAME", "SUCCEEDED", "REASON", "STARTTIME", "COMPLETIONTIME"],
    ("tekton.dev/v1", "TaskRun"): ["NAME", "SUCCEEDED", "REASON", "STARTTIME", "COMPLETIONTIME"],
}


def test_the_kinds_built_in_since_print_their_crds_headers(well_known_kubectl):
    served = {(r.api_version, r.kind): r for r in WELL_KNOWN if not r.builtin}
    for (api_version, kind), header in HEADERS.items():
        res = served[api_version, kind]
        job = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "j", "namespace": "default"}}
        well_known_kubectl("apply", "-f", "-", stdin=json.dumps(job))
        out = well_known_kubectl.out("get", f"{res.plural}.{res.version}.{res.group}")
        assert re.split(r"\s{2,}", out.splitlines()[0].strip()) == header, (api_version, kind, out)


def test_every_job_kind_is_served_with_its_crds_columns(well_known_kubectl):
    served = {(r.api_version, r.kind): r for r in WELL_KNOWN if not r.builtin}
    assert set(served) == set(COLUMNS) | set(HEADERS)
    started = (datetime.now(timezone.utc) - timedelta(days=2, minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "conditions": [{"type": "Created", "status": "True"}, {"type": "Succeeded", "status": "True"}],
        "phase": "Failed",
        "startedAt": started,
        "message": "OOMKilled",
    }
    for (api_version, kind), (header, expected) in COLUMNS.items():
        res = served[api_version, kind]
        resource = f"{res.plural}.{res.version}.{res.group}"  # MPIJob has two versions
        job = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": "j", "namespace": "default"},
            "status": status,
        }
        well_known_kubectl("apply", "-f", "-", stdin=json.dumps(job))
        if res.status_subresource:  # a create drops the status it carries; the controller writes it
            well_known_kubectl(
                "patch", resource, "j", "--subresource=status", "--type=merge", "-p", json.dumps({"status": status})
            )
        rows = _rows(well_known_kubectl.out("get", resource))
        assert rows[0] == header, (api_version, kind)
        assert len(rows[1]) == len(expected), (api_version, kind, rows[1])
        assert [cell for cell, want in zip(rows[1], expected) if want != "AGE"] == [
            want for want in expected if want != "AGE"
        ], (api_version, kind, rows[1])
