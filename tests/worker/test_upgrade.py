"""A Redis full of jobttl 0.1's pending deletions keeps working after the upgrade to 0.2.

jobttl 0.1 (the release before the jobttl.* namespace) books deletions with its own code:
its sources are taken from this repository's history and run as they were, against a real
Redis and the emulator. Then the 0.2 command reads what 0.1 wrote, and the 0.2 worker runs
every one of those deletions at its due time.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from kubernetes import config

from jobttl_emulator import TFJOB as TFJOB_RESOURCE, Resource
from tests.fixtures import finished_status, tfjob
from tests.services import JobttlProcess, RedisServer, start_emulator, wait_for

REPO = Path(__file__).resolve().parents[2]
RELEASE_0_1 = "8dd0498"  # the last commit of jobttl 0.1.0
CORE_EVENTS = Resource("", "v1", "Event", "events", status_subresource=False)

# Run by 0.1's code: books each object's deletion as 0.1's sink did (decide, then plan).
BOOK_WITH_0_1 = """
import json, sys
from redis import Redis
from worker.decision import JobRef, decide
from worker.kinds import TFJOB
from worker.schedule import Schedule
from worker.audit import Audit

redis = Redis.from_url(sys.argv[1])
schedule, audit = Schedule(redis, sys.argv[2], [1, 2]), Audit(redis)
for obj in json.load(sys.stdin):
    ref, decision = JobRef.of(obj), decide(obj, TFJOB)
    change = schedule.plan(ref, decision)
    audit.record(change.value, ref, due=decision.expires_at, ttl=decision.ttl, ttlSource=decision.ttl_source, by="event")
print(json.dumps({"pending": redis.zcard("jobttl:pending")}))
"""


@pytest.fixture(scope="module")
def release_0_1(tmp_path_factory) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", RELEASE_0_1], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"jobttl 0.1's sources (commit {RELEASE_0_1}) are not in this clone's history: "
                    f"{archive.stderr.decode().strip()}")
    target = tmp_path_factory.mktemp("jobttl-0.1")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target


@pytest.fixture
def stack(tmp_path):
    redis = RedisServer().start()
    emulator = start_emulator(tmp_path, (TFJOB_RESOURCE, CORE_EVENTS), gc_delay=0.1)
    yield redis, emulator
    emulator.stop()
    redis.stop()


def create_finished(api, namespace: str, name: str, ttl: int, finished_at: float) -> dict:
    api.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "tfjobs", tfjob(name, namespace, ttl=ttl))
    return api.patch_namespaced_custom_object_status("kubeflow.org", "v1", namespace, "tfjobs", name,
                                                     {"status": finished_status(finished_at)})


def test_deletions_booked_by_0_1_run_on_time_under_0_2(release_0_1, stack, tmp_path):
    from kubernetes import client

    redis, emulator = stack
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=str(emulator.kubeconfig)))
    now = time.time()
    objects = [create_finished(api, "team", "soon", ttl=6, finished_at=now),
               create_finished(api, "team", "overdue", ttl=60, finished_at=now - 3600),
               create_finished(api, "team", "later", ttl=3600, finished_at=now)]
    due = {o["metadata"]["name"]: int(now if o["metadata"]["name"] != "overdue" else now - 3600)
           + o["spec"]["runPolicy"]["ttlSecondsAfterFinished"] for o in objects}
    booked = subprocess.run([sys.executable, "-c", BOOK_WITH_0_1, redis.url, "upgrade"], cwd=release_0_1,
                            env={"PYTHONPATH": str(release_0_1), "PATH": "/usr/bin:/bin"}, input=json.dumps(objects),
                            capture_output=True, text=True, timeout=60)
    assert booked.returncode == 0, booked.stderr
    assert json.loads(booked.stdout) == {"pending": 3}
    assert redis.client().exists(*(f"jobttl:pending:{o['metadata']['uid']}" for o in objects)) == 3, \
        "the 0.1 layout: a record hash per deletion"

    # The 0.2 command reads what 0.1 wrote (its first run upgrades the records in place).
    env = {"JOBTTL_REDIS_URL": redis.url, "JOBTTL_QUEUE": "upgrade", "KUBECONFIG": str(emulator.kubeconfig),
           "JOBTTL_RESYNC_INTERVAL": "0", "JOBTTL_DELETE_RATE": "0", "JOBTTL_WORKER_METRICS_PORT": "0"}
    shown = subprocess.run([sys.executable, "-m", "jobttl", "pending", "--json"], env={**env, "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    listed = {p["name"]: p for p in json.loads(shown.stdout)["items"]}
    assert {name: p["due"] for name, p in listed.items()} == due
    assert {p["ttlSource"] for p in listed.values()} == {"spec.runPolicy.ttlSecondsAfterFinished"}
    assert all(p["kind"] == "TFJob" and p["namespace"] == "team" for p in listed.values())

    worker = JobttlProcess(["worker"], env, tmp_path, "worker-0.2").start()
    try:
        deleted = lambda name: [r for r in emulator.requests("DELETE") if r["path"].endswith(f"/tfjobs/{name}")]  # noqa: E731
        [overdue] = wait_for(lambda: deleted("overdue"), timeout=20, what="the overdue deletion")
        [soon] = wait_for(lambda: deleted("soon"), timeout=20, what="the deletion due in 6 s")
        assert due["soon"] <= soon["time"] < due["soon"] + 3, "on time, as booked by 0.1"
        assert overdue["status"] == soon["status"] == 200
        assert deleted("later") == [], "not before its time"
        later = [o for o in objects if o["metadata"]["name"] == "later"][0]
        assert redis.client().zscore("jobttl:pending", later["metadata"]["uid"]) == due["later"]
    finally:
        worker.stop()
