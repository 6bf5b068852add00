"""The first-run review holds whatever happens before or during it (issue 26 §2).

Real processes as an operator meets them: redis-server, the API emulator over HTTP (its faults
answering the install ConfigMap's requests with 500 or 403), `jobttl worker`, the sink under
waitress, and `jobttl resync`, `status` and `held` as the operator runs them, with the review on
as shipped. A cluster holds jobs that finished last month, few enough that the guard's thresholds
alone would let them go: only the review stands between them and a DELETE.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
import requests
from cloudevents.core.bindings.http import to_binary_event
from cloudevents.core.v1.event import CloudEvent

from jobttl_emulator import CONFIG_MAP, JOB as JOB_RESOURCE, TFJOB as TFJOB_RESOURCE, seed_object
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.services.install import CONFIGMAP
from tests.e2e.conftest import CORE_EVENTS
from tests.fixtures import job_object
from tests.services import ROOT, JobttlProcess, RedisServer, start_emulator, start_sink, wait_for

MONTH = 30 * 86400
OLD, RUNNING = 5, 20  # 5 of 25 overdue: under both thresholds (500, 0.5)


@pytest.fixture
def stack(tmp_path):
    emulator = start_emulator(tmp_path, (TFJOB_RESOURCE, JOB_RESOURCE, CORE_EVENTS, CONFIG_MAP), gc_delay=0.1)
    redis_server = RedisServer().start()
    env = {
        "JOBTTL_REDIS_URL": redis_server.url,
        "KUBECONFIG": str(emulator.kubeconfig),
        "JOBTTL_QUEUE": f"review-{uuid.uuid4().hex[:6]}",
        "JOBTTL_NAMESPACE": "jobttl",
        "JOBTTL_FIRST_RUN_REVIEW": "on",
        "JOBTTL_RESYNC_INTERVAL": "3600",
        "JOBTTL_DELETE_RATE": "0",
        "JOBTTL_WORKER_METRICS_PORT": "0",
        "JOBTTL_RESYNC_MAX_DELETIONS": "5",
        "JOBTTL_POLICY": str(_policy(tmp_path)),
    }
    processes: list[JobttlProcess] = []
    yield emulator, env, redis_server, tmp_path, processes
    for process in processes:
        process.stop()
    redis_server.stop()
    emulator.stop()


def _policy(directory):
    path = directory / "policy.yaml"
    path.write_text("ttl: 7d\nkinds: [TFJob, Job]\n")
    return path


def seed(emulator) -> list[dict]:
    namespace = f"ml-{uuid.uuid4().hex[:6]}"
    old = [
        seed_object(emulator.store, job_object(TFJOB, f"old-{i}", namespace, at=time.time() - MONTH + i))
        for i in range(OLD)
    ]
    for i in range(RUNNING):
        seed_object(emulator.store, job_object(TFJOB, f"running-{i}", namespace, state="running", at=time.time()))
    return old


def jobttl(env: dict, *args: str, json_out: bool = True) -> tuple[int, dict | str]:
    done = subprocess.run(
        [sys.executable, "-m", "jobttl", *args, *(["--json"] if json_out else [])],
        env={**env, "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if not json_out:
        return done.returncode, done.stdout
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def deleted(emulator) -> set[str]:
    return {r["path"].rsplit("/", 1)[1] for r in emulator.requests("DELETE") if "/tfjobs/" in r["path"]}


def worker_resynced(env: dict, after: float):
    def check():
        last = jobttl(env, "status")[1].get("lastResync") or {}
        return last if last.get("started_at", 0) > after else None

    return check


@pytest.mark.parametrize("status", [500, 403])
def test_a_resync_that_cannot_read_the_install_record_holds_what_is_due_and_says_why(stack, status):
    """Before: the resync wrote its audit entry and nothing else; the first worker took that entry for
    a worker having run before, recorded the cluster as reviewed, and deleted the month-old jobs."""
    emulator, env, redis_server, directory, processes = stack
    old = seed(emulator)
    emulator.add_fault(verb="get", status=status, count=1000, path_contains=f"/configmaps/{CONFIGMAP}")
    code, report = jobttl(env, "resync", "--force")
    assert report["held"] == report["first_run_held"] == OLD and report["queued_now"] == 0, report
    assert code == 1 and report["status"] == "incomplete", report
    assert "install record could not be read or written" in report["install_problem"]
    code, text = jobttl(env, "status", json_out=False)
    assert "install record could not be read or written" in text, text
    code, held = jobttl(env, "held")
    assert {h["name"] for h in held["items"]} == {o["metadata"]["name"] for o in old}
    history = [
        e for e in jobttl(env, "history", "--limit", "50")[1]["items"] if e["event"] == "install-record-unreadable"
    ]
    assert history and str(status) in history[0]["detail"]

    emulator.clear_faults()
    started = time.time()
    processes.append(JobttlProcess(["worker"], env, directory, "review-worker").start())
    last = wait_for(worker_resynced(env, started), timeout=60, what="the first worker's resync")
    install = jobttl(env, "status")[1]["install"]
    assert install["origin"] == "first-install" and install["underReview"], install
    assert last["status"] == "held" and last["first_run_held"] == OLD, last
    assert deleted(emulator) == set(), "nothing overdue at install was deleted"
    assert emulator.store.get(CONFIG_MAP, "jobttl", CONFIGMAP)["data"]["origin"] == "first-install"


def post(url: str, obj: dict) -> requests.Response:
    meta = obj["metadata"]
    event = CloudEvent(
        attributes={
            "specversion": "1.0",
            "id": str(uuid.uuid4()),
            "source": "https://10.96.0.1",
            "type": "dev.knative.apiserver.resource.update",
            "kind": TFJOB.kind,
            "apiversion": TFJOB.api_version,
            "name": meta["name"],
            "namespace": meta["namespace"],
        },
        data=obj,
    )
    message = to_binary_event(event)
    return requests.post(url, headers=message.headers, data=message.body, timeout=10)


def test_losing_both_the_configmap_and_redis_during_the_review_starts_it_again(stack):
    """Before: a deletion the worker made after the flush (a job finishing now, not the review's) was
    taken for a worker having run before: the next resync recorded the cluster as reviewed and
    deleted the month-old jobs."""
    emulator, env, redis_server, directory, processes = stack
    old = seed(emulator)
    sink, url = start_sink(env, directory)
    processes.append(sink)
    started = time.time()
    processes.append(JobttlProcess(["worker"], env, directory, "review-worker").start())
    first = wait_for(worker_resynced(env, started), timeout=60, what="the first worker's resync")
    assert first["status"] == "held" and first["first_run_held"] == OLD

    # The review is open. Someone deletes the ConfigMap, and Redis loses its data.
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(config_file=str(emulator.kubeconfig)))
    core.delete_namespaced_config_map(CONFIGMAP, "jobttl")
    redis_server.client().flushall()
    # A job finishing now, with a TTL of its own: booked by its event, deleted by the running worker.
    fresh = seed_object(
        emulator.store, job_object(TFJOB, "fresh", old[0]["metadata"]["namespace"], at=time.time(), ttl=1)
    )
    assert post(url, fresh).status_code == 202
    wait_for(lambda: "fresh" in deleted(emulator), timeout=30, what="the job that finished now")

    code, report = jobttl(env, "resync", "--force")
    assert report["status"] == "held" and report["queued_now"] == 0, report
    assert report["first_run_held"] == OLD and report["install"]["underReview"], report
    assert deleted(emulator) == {"fresh"}, "nothing overdue at install was deleted"
    data = emulator.store.get(CONFIG_MAP, "jobttl", CONFIGMAP)["data"]
    assert data["origin"] == "first-install" and "reviewedAt" not in data


def test_forged_events_neither_stay_held_nor_change_what_the_operator_confirms(stack):
    """Before: events for objects that do not exist, past the burst limit, were held; every resync
    kept them, and each changed the held id, so the operator's confirmation failed again and again."""
    emulator, env, redis_server, directory, processes = stack
    old = seed(emulator)
    sink, url = start_sink(env, directory)
    processes.append(sink)
    started = time.time()
    processes.append(JobttlProcess(["worker"], env, directory, "review-worker").start())
    first = wait_for(worker_resynced(env, started), timeout=60, what="the first worker's resync")
    held_id = first["held_id"]
    assert jobttl(env, "held")[1]["heldId"] == held_id

    # Events for month-old jobs that were never in the cluster: past the burst limit (5), held by the sink.
    forged = [job_object(TFJOB, f"forged-{i}", "ml-forged", at=time.time() - MONTH) for i in range(12)]
    for obj in forged:
        obj["metadata"]["uid"] = str(uuid.uuid4())
    outcomes = [post(url, obj).headers.get("X-Jobttl-Outcome") for obj in forged]
    assert "held" in outcomes, outcomes
    code, held = jobttl(env, "held")
    assert held["heldId"] == held_id, "what events alone held is not in the id the operator confirms"
    assert {h["name"] for h in held["items"] if not h["listed"]} <= {o["metadata"]["name"] for o in forged}
    assert any(not h["listed"] for h in held["items"])

    code, report = jobttl(env, "resync", "--force", "--confirm", held_id)
    assert code == 0 and report["status"] == "done", report
    assert report["held_dropped"] == outcomes.count("held"), report
    assert jobttl(env, "held")[1]["items"] == []
    wait_for(
        lambda: {o["metadata"]["name"] for o in old} <= deleted(emulator), timeout=60, what="the confirmed deletions"
    )
    assert not {o["metadata"]["name"] for o in forged} & deleted(emulator)
    assert not jobttl(env, "status")[1]["install"]["underReview"]
