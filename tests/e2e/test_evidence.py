"""Keep the evidence, then delete, end to end: the real sink and worker, the emulator serving TFJobs,
pods, their logs and Events, an archive directory and a real S3-compatible server (moto's).

One stack for this module, its policy choosing a feature per job label (`evidence: ...`), so
that each test needs only its own objects; the S3 store has a worker of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from jobttl.core.store.audit import Audit
from jobttl.core.domain.kinds.registry import TFJOB as TFJOB_KIND
from jobttl.core.domain.rules.policy import load_policy
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.store.schedule import Schedule
from jobttl_emulator import EVENT, POD, TFJOB
from tests.e2e.conftest import Cluster, stack_environment
from tests.fixtures import finished_status, tfjob
from tests.services import ROOT, JobttlProcess, free_port, start_emulator, start_sink, wait_for

QUEUE = "evidence"
LOG_KIB = 1
POLICY = {
    "archive": {"logKiB": LOG_KIB, "enabled": False},
    "rules": [
        {"name": "archived", "selector": {"matchLabels": {"evidence": "archive"}}, "archive": True, "ttl": "2s"},
        {
            "name": "best-effort",
            "selector": {"matchLabels": {"evidence": "best-effort"}},
            "archive": {"required": False},
            "ttl": "2s",
        },
        {
            "name": "staged",
            "selector": {"matchLabels": {"evidence": "staged"}},
            "podTTL": "3s",
            "ttl": "7s",
            "archive": True,
        },
        {
            "name": "history",
            "selector": {"matchLabels": {"evidence": "history"}},
            "ttl": "1h",
            "keepLast": {"succeeded": 2, "groupBy": "app"},
        },
        {"name": "announced", "selector": {"matchLabels": {"evidence": "announced"}}, "ttl": "1h"},
        {"name": "quiet", "selector": {"matchLabels": {"evidence": "quiet"}}, "ttl": "1h", "scheduledEvents": False},
    ],
}


def write_policy(path: Path, store: str) -> Path:
    path.write_text(yaml.safe_dump({**POLICY, "archive": {**POLICY["archive"], "store": store}}))
    return path


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    server = start_emulator(tmp_path_factory.mktemp("evidence-kube"), (TFJOB, POD, EVENT), gc_delay=0.1)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def archive_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("archive")


@pytest.fixture(scope="module")
def env(redis_server, kube, archive_dir, tmp_path_factory):
    policy = write_policy(tmp_path_factory.mktemp("policy") / "policy.yaml", str(archive_dir))
    return stack_environment(
        redis_server,
        kube,
        QUEUE,
        free_port(),
        JOBTTL_POLICY=str(policy),
        JOBTTL_RETRY_MAX="1",
        JOBTTL_PROPAGATION_POLICY="Background",
    )


@pytest.fixture(scope="module")
def stack(env, tmp_path_factory):
    logs = tmp_path_factory.mktemp("evidence-logs")
    worker = JobttlProcess(["worker"], env, logs, "worker").start()
    sink, url = start_sink(env, logs)
    yield url
    sink.stop()
    worker.stop()


class Lab(Cluster):
    """A namespace of the evidence stack: TFJobs with labels, their pods and logs."""

    def __init__(self, emulator, sink_url, redis):
        super().__init__(emulator, sink_url, redis)
        api_client = config.new_client_from_config(config_file=str(emulator.kubeconfig))
        self.core = client.CoreV1Api(api_client)

    def job(self, name: str, feature: str, finished_at: float, ttl: int | None = None, **labels: str) -> dict:
        manifest = tfjob(name, self.namespace, ttl=ttl)
        manifest["metadata"]["labels"] = {"evidence": feature, **labels}
        self.api.create_namespaced_custom_object("kubeflow.org", "v1", self.namespace, "tfjobs", manifest)
        return self.set_status(name, finished_status(finished_at))

    def pod(self, name: str, owner: dict, log: str = "", previous: str | None = None, label: str | None = None) -> None:
        meta = owner["metadata"]
        self.core.create_namespaced_pod(
            self.namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "labels": {TFJOB_POD_LABEL: label or meta["name"]},
                    "ownerReferences": [
                        {
                            "apiVersion": "kubeflow.org/v1",
                            "kind": "TFJob",
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {"containers": [{"name": "tensorflow", "image": "kubeflow/tf-mnist"}]},
            },
        )
        self.core.patch_namespaced_pod_status(
            name,
            self.namespace,
            {
                "status": {
                    "phase": "Succeeded",
                    "containerStatuses": [
                        {
                            "name": "tensorflow",
                            "image": "kubeflow/tf-mnist",
                            "imageID": "",
                            "ready": False,
                            "restartCount": 1 if previous else 0,
                            "state": {"terminated": {"exitCode": 0}},
                        }
                    ],
                }
            },
        )
        self.emulator.set_log(self.namespace, name, "tensorflow", log)
        if previous is not None:
            self.emulator.set_log(self.namespace, name, "tensorflow", previous, previous=True)

    def pods(self) -> list[str]:
        return sorted(p.metadata.name for p in self.core.list_namespaced_pod(self.namespace).items)

    def events(self, uid: str, reason: str) -> list[str]:
        found = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.uid={uid}").items
        return [e.message for e in found if e.reason == reason]


TFJOB_POD_LABEL = "training.kubeflow.org/job-name"


@pytest.fixture
def lab(kube, stack, redis):
    yield Lab(kube, stack, redis)


def jobttl(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobttl", *args],
        env={**env, "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def training_log(lines: int, prefix: str) -> str:
    return "".join(f"{prefix} step {i:05d} loss {1 / (i + 1):.6f}\n" for i in range(lines))


def test_a_finished_tfjob_is_archived_then_deleted_and_its_logs_outlive_it(lab, env, archive_dir):
    obj = lab.job("mnist", "archive", time.time() - 1)
    lab.pod("mnist-worker-0", obj, training_log(500, "w0"))
    lab.pod("mnist-worker-1", obj, training_log(20, "w1"), previous=training_log(5, "before-restart"))
    lab.core.create_namespaced_event(
        lab.namespace,
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": "mnist."},
            "reason": "SuccessfulCreatePod",
            "message": "Created pod mnist-worker-0",
            "type": "Normal",
            "involvedObject": {
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "name": "mnist",
                "namespace": lab.namespace,
                "uid": obj["metadata"]["uid"],
            },
        },
    )
    lab.event("update", obj)
    lab.wait_gone("mnist")

    folder = archive_dir / lab.namespace / "TFJob" / f"mnist-{obj['metadata']['uid']}"
    manifest = yaml.safe_load((folder / "manifest.yaml").read_text())
    assert manifest["metadata"]["uid"] == obj["metadata"]["uid"] and manifest["status"]["conditions"]
    assert "SuccessfulCreatePod" in [e["reason"] for e in yaml.safe_load((folder / "events.yaml").read_text())]
    kept = (folder / "logs" / "mnist-worker-0" / "tensorflow.log").read_text()
    # At least the last N KiB, in whole lines (28 bytes each): at most one line more.
    line = len(training_log(1, "w0"))
    assert training_log(500, "w0").endswith(kept) and LOG_KIB * 1024 <= len(kept) < LOG_KIB * 1024 + line
    assert kept.startswith("w0 step")
    assert (folder / "logs" / "mnist-worker-1" / "tensorflow.log").read_text() == training_log(20, "w1")
    assert (folder / "logs" / "mnist-worker-1" / "tensorflow.previous.log").read_text() == training_log(
        5, "before-restart"
    )
    index = json.loads((folder / "index.json").read_text())
    assert {(e["pod"], e["previous"], e["truncated"]) for e in index["logs"]} == {
        ("mnist-worker-0", False, True),
        ("mnist-worker-1", False, False),
        ("mnist-worker-1", True, False),
    }
    # Written before the DELETE: every read for the archive precedes it.
    requests = lab.requests()
    delete = next(r["time"] for r in requests if r["method"] == "DELETE" and r["path"].endswith("/tfjobs/mnist"))
    assert max(r["time"] for r in requests if r["path"].endswith("/log")) < delete

    shown = json.loads(jobttl(env, "show", f"{lab.namespace}/mnist", "--json").stdout)
    assert shown["tombstones"][0]["archive"] == f"{folder}/"
    assert any(e["event"] == "archived" for e in shown["history"])
    printed = jobttl(env, "logs", f"{lab.namespace}/mnist", "--pod", "mnist-worker-1", "--previous")
    assert printed.returncode == 0 and printed.stdout == training_log(5, "before-restart")
    listed = jobttl(env, "logs", f"{lab.namespace}/mnist", "--list")
    assert "mnist-worker-0" in listed.stdout and "1 KiB" in listed.stdout


def test_an_archive_failure_delays_the_deletion_until_it_can_be_written(lab, env, archive_dir):
    (archive_dir / lab.namespace).write_text("a file where the namespace's folder goes: every write fails")
    required = lab.job("required", "archive", time.time() - 1)
    best_effort = lab.job("best-effort", "best-effort", time.time() - 1)
    lab.event("update", required)
    lab.event("update", best_effort)
    lab.wait_gone("best-effort")  # archive.required: false deletes anyway

    def failed():
        return json.loads(jobttl(env, "failed", "--json").stdout)["items"]

    [failure] = wait_for(
        lambda: [f for f in failed() if f["namespace"] == lab.namespace],
        timeout=20,
        what="the failed deletion in `jobttl failed`",
    )
    assert failure["name"] == "required" and "archive-failed" in failure["error"]
    assert lab.get("required") is not None and not [r for r in lab.deletes() if r["path"].endswith("/required")]
    history = json.loads(jobttl(env, "history", "--namespace", lab.namespace, "--json").stdout)["items"]
    assert {(e["name"], e["event"]) for e in history} >= {
        ("required", "archive-failed"),
        ("best-effort", "archive-failed"),
        ("best-effort", "deleted"),
    }

    (archive_dir / lab.namespace).unlink()
    assert jobttl(env, "retry", failure["jobId"]).returncode == 0
    lab.wait_gone("required")
    assert (archive_dir / lab.namespace / "TFJob" / f"required-{required['metadata']['uid']}" / "index.json").exists()


def test_pods_go_at_their_ttl_and_the_job_at_its_own(lab, env, archive_dir):
    obj = lab.job("staged", "staged", time.time())
    lab.pod("staged-worker-0", obj, "w0\n")
    lab.pod("staged-worker-1", obj, "w1\n")
    lab.pod(
        "lookalike", lab.job("other", "quiet", time.time()), "not ours\n", label="staged"
    )  # the label, not the owner
    # The job finishes after its pods were created, as it does in a cluster: a pod created after
    # the finish belongs to a later run, and the pods stage leaves it (the emulator stamps pods
    # with the second they are created).
    finished = time.time()
    obj = lab.set_status("staged", finished_status(finished))
    lab.event("update", obj)
    pending = json.loads(jobttl(env, "pending", "--namespace", lab.namespace, "--json").stdout)["items"]
    stages = {(p["stage"], p["due"]) for p in pending if p["name"] == "staged"}
    # On a loaded machine the command may answer after the pods stage (3 s) already ran: then the
    # audit trail says so, and the checks below hold it to its time.
    ran = lambda: [  # noqa: E731
        e
        for e in json.loads(jobttl(env, "history", "--namespace", lab.namespace, "--json").stdout)["items"]
        if e["name"] == "staged" and e["event"] == "pods-deleted"
    ]
    assert ("job", int(finished) + 7) in stages and (("pods", int(finished) + 3) in stages or ran()), stages

    wait_for(lambda: lab.pods() == ["lookalike"], timeout=15, what="the pods stage")
    assert time.time() >= finished + 3 - 1 and lab.get("staged") is not None  # T1: the pods, the job stays
    lab.event("update", lab.get("staged"))  # a later event does not book the pods stage again
    lab.wait_gone("staged", timeout=15)
    assert time.time() >= finished + 7 - 1  # T2
    assert lab.pods() == ["lookalike"]
    events = [
        e
        for e in json.loads(jobttl(env, "history", "--namespace", lab.namespace, "--json").stdout)["items"]
        if e["name"] == "staged"
    ]
    assert [e["event"] for e in events].count("pods-deleted") == 1
    # Archived before the pods went; the job's own archive keeps their logs.
    index = json.loads(
        (archive_dir / lab.namespace / "TFJob" / f"staged-{obj['metadata']['uid']}" / "index.json").read_text()
    )
    assert [a["stage"] for a in index["archives"]] == ["pods", "job"]
    assert sorted(e["pod"] for e in index["logs"]) == ["staged-worker-0", "staged-worker-1"]  # not the lookalike


def test_keep_last_deletes_exactly_the_oldest_beyond_the_limit_in_each_group(lab):
    start = time.time() - 600
    jobs = [
        lab.job(f"{app}-{i}", "history", start + i * 10, app=app) for app, n in (("a", 4), ("b", 3)) for i in range(n)
    ]
    for obj in jobs:
        lab.event("update", obj)
    wait_for(
        lambda: lab.get("a-0") is None and lab.get("a-1") is None and lab.get("b-0") is None,
        timeout=15,
        what="the jobs beyond each group's limit to go",
    )
    assert sorted(o["metadata"]["name"] for o in jobs if lab.get(o["metadata"]["name"])) == ["a-2", "a-3", "b-1", "b-2"]
    assert {r["path"].rsplit("/", 1)[1] for r in lab.deletes()} == {"a-0", "a-1", "b-0"}


def test_deletion_scheduled_events_appear_once_per_schedule_change(lab):
    finished = time.time()
    obj = lab.job("announced", "announced", finished)
    quiet = lab.job("quiet", "quiet", finished)
    uid = obj["metadata"]["uid"]
    lab.event("update", obj)
    lab.event("update", quiet)
    lab.event("update", obj)  # the same decision again: no change, no Event
    [first] = wait_for(lambda: lab.events(uid, "DeletionScheduled"), timeout=10, what="a DeletionScheduled Event")
    due = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(finished) + 3600))
    assert first == f"jobttl will delete this TFJob at {due} (TTL 1h from ttl of rule announced)"
    moved = lab.patch("announced", {"metadata": {"annotations": {"jobttl.io/ttl": "2h"}}})
    lab.event("update", moved)
    wait_for(lambda: len(lab.events(uid, "DeletionScheduled")) == 2, timeout=10, what="the Event for the move")
    # The outbox is posted oldest first: once a change made after all of these has its Event,
    # anything the duplicate or the quiet job would have posted has been posted too.
    marker = lab.job("marker", "announced", finished)
    lab.event("update", marker)
    wait_for(
        lambda: lab.events(marker["metadata"]["uid"], "DeletionScheduled"),
        timeout=10,
        what="the Event for a later change",
    )
    assert len(lab.events(uid, "DeletionScheduled")) == 2
    assert lab.events(quiet["metadata"]["uid"], "DeletionScheduled") == []


# --- the S3-compatible store ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def test_an_archive_goes_to_an_s3_compatible_store(kube, redis_server, redis, s3, tmp_path_factory):
    import boto3

    credentials = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": s3,
    }
    bucket = boto3.client(
        "s3", endpoint_url=s3, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    bucket.create_bucket(Bucket="evidence")
    policy = write_policy(tmp_path_factory.mktemp("s3-policy") / "policy.yaml", "s3://evidence/archives")
    env = stack_environment(redis_server, kube, "evidence-s3", 0, JOBTTL_POLICY=str(policy), **credentials)
    worker = JobttlProcess(["worker"], env, tmp_path_factory.mktemp("s3-logs"), "worker").start()
    try:
        lab = Lab(kube, "http://unused", redis)
        obj = lab.job("resnet", "archive", time.time() - 1)
        lab.pod("resnet-worker-0", obj, training_log(3, "r0"))
        lab.pod("resnet-worker-1", obj, training_log(3, "r1"))
        schedule = Schedule(redis, "evidence-s3", retry_intervals=[])
        Reconciler(schedule, Audit(redis), load_policy(policy)).reconcile(obj, TFJOB_KIND, "event")
        lab.wait_gone("resnet", timeout=20)
        prefix = f"archives/{lab.namespace}/TFJob/resnet-{obj['metadata']['uid']}/"
        keys = {o["Key"][len(prefix) :] for o in bucket.list_objects_v2(Bucket="evidence", Prefix=prefix)["Contents"]}
        assert keys == {
            "manifest.yaml",
            "events.yaml",
            "index.json",
            "logs/resnet-worker-0/tensorflow.log",
            "logs/resnet-worker-1/tensorflow.log",
        }
        printed = jobttl(env, "logs", f"{lab.namespace}/resnet", "--pod", "resnet-worker-1")
        assert printed.returncode == 0 and printed.stdout == training_log(3, "r1")
        both = jobttl(env, "logs", f"{lab.namespace}/resnet").stdout
        assert "==> resnet-worker-0/tensorflow <==" in both and training_log(3, "r0") in both
    finally:
        worker.stop()
