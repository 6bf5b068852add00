"""A Redis full of an earlier release's pending deletions keeps working after the upgrade.

An earlier release books deletions with its own code: its sources are taken from this
repository's history and run as they were, against a real Redis and the emulator. Then
today's command reads what it wrote, and today's worker runs every one of those deletions
at its due time. Two earlier layouts: jobttl 0.1 (the release before the jobttl.* namespace),
and the flat core (jobttl.core.schedule, ...) of the commit before the core's rooms (issue 21).
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
from rq import Queue
from rq.job import Job
from rq.serializers import JSONSerializer

from jobttl.core.store import keys
from jobttl_emulator import POD, TFJOB as TFJOB_RESOURCE, Resource
from tests.fixtures import finished_status, rfc3339, tfjob
from tests.services import JobttlProcess, RecordingSink, RedisServer, start_emulator, wait_for

REPO = Path(__file__).resolve().parents[2]
RELEASE_0_1 = "8dd0498"  # the last commit of jobttl 0.1.0
PREVIOUS_LAYOUT = "25b5d61"  # the last commit before the core's rooms (issue 21): jobttl.core.schedule, ...
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

# Run by the flat core's code (PREVIOUS_LAYOUT): books each object's deletion as its sink did (one
# reconcile), postpones some as `jobttl postpone` did (its Operations), and asks for a resync as a
# PingSource event did. Its own layout, its own Lua, its own RQ task names.
BOOK_WITH_FLAT_CORE = """
import json, sys
from redis import Redis
from jobttl.core import schedule as schedule_module, upgrade
from jobttl.core.audit import Audit
from jobttl.core.kinds import TFJOB
from jobttl.core.operations import Operations
from jobttl.core.policy import load_policy
from jobttl.core.reconcile import Reconciler
from jobttl.core.schedule import Schedule

url, queue, policy, warn_before = sys.argv[1:]
redis = Redis.from_url(url)
upgrade.ensure(redis)  # as its sink did at start: the Redis marked as of its layout
schedule, audit = Schedule(redis, queue, [1, 2], warn_before=int(warn_before)), Audit(redis)
reconciler = Reconciler(schedule, audit, load_policy(policy))
work = json.load(sys.stdin)
changes = [reconciler.reconcile(obj, TFJOB, "event").change.value for obj in work["objects"]]
operations = Operations(redis, schedule, audit, reconciler)
postponed = {name: operations.postpone(namespace, name, seconds).due for namespace, name, seconds in work["postpone"]}
print(json.dumps({"code": schedule_module.__file__, "changes": changes, "postponed": postponed,
                  "resync": schedule.request_resync(at=work["resyncAt"]), "pending": redis.zcard("jobttl:pending")}))
"""


def sources_of(commit: str, what: str, directory: Path) -> Path:
    """An earlier commit's tree, as that release shipped it, extracted into `directory`."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(
            f"{what}'s sources (commit {commit}) are not in this clone's history: {archive.stderr.decode().strip()}"
        )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(directory, filter="data")
    return directory


@pytest.fixture(scope="module")
def release_0_1(tmp_path_factory) -> Path:
    return sources_of(RELEASE_0_1, "jobttl 0.1", tmp_path_factory.mktemp("jobttl-0.1"))


@pytest.fixture(scope="module")
def previous_layout(tmp_path_factory) -> Path:
    return sources_of(PREVIOUS_LAYOUT, "the flat core", tmp_path_factory.mktemp("jobttl-flat-core"))


@pytest.fixture
def stack(tmp_path):
    redis = RedisServer().start()
    emulator = start_emulator(tmp_path, (TFJOB_RESOURCE, CORE_EVENTS), gc_delay=0.1)
    yield redis, emulator
    emulator.stop()
    redis.stop()


def run_old_code(sources: Path, script: str, args: list[str], stdin: object) -> dict:
    """`script` run by an earlier release's own code (its tree first on the path, nothing of today's)."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=sources,
        env={"PYTHONPATH": str(sources), "PATH": "/usr/bin:/bin"},
        input=json.dumps(stdin),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def command(env: dict[str, str], *args: str) -> dict:
    """Today's `jobttl <args>`, its JSON."""
    done = subprocess.run(
        [sys.executable, "-m", "jobttl", *args],
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def create_finished(api, namespace: str, name: str, ttl: int, finished_at: float) -> dict:
    api.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "tfjobs", tfjob(name, namespace, ttl=ttl))
    return api.patch_namespaced_custom_object_status(
        "kubeflow.org", "v1", namespace, "tfjobs", name, {"status": finished_status(finished_at)}
    )


def test_deletions_booked_by_0_1_run_on_time_under_0_2(release_0_1, stack, tmp_path):
    from kubernetes import client

    redis, emulator = stack
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=str(emulator.kubeconfig)))
    now = time.time()
    objects = [
        create_finished(api, "team", "soon", ttl=6, finished_at=now),
        create_finished(api, "team", "overdue", ttl=60, finished_at=now - 3600),
        create_finished(api, "team", "later", ttl=3600, finished_at=now),
    ]
    due = {
        o["metadata"]["name"]: int(now if o["metadata"]["name"] != "overdue" else now - 3600)
        + o["spec"]["runPolicy"]["ttlSecondsAfterFinished"]
        for o in objects
    }
    assert run_old_code(release_0_1, BOOK_WITH_0_1, [redis.url, "upgrade"], objects) == {"pending": 3}
    assert redis.client().exists(*(f"jobttl:pending:{o['metadata']['uid']}" for o in objects)) == 3, (
        "the 0.1 layout: a record hash per deletion"
    )

    # The 0.2 command reads what 0.1 wrote (its first run upgrades the records in place).
    env = {
        "JOBTTL_REDIS_URL": redis.url,
        "JOBTTL_QUEUE": "upgrade",
        "KUBECONFIG": str(emulator.kubeconfig),
        "JOBTTL_RESYNC_INTERVAL": "0",
        "JOBTTL_DELETE_RATE": "0",
        "JOBTTL_WORKER_METRICS_PORT": "0",
    }
    listed = {p["name"]: p for p in command(env, "pending", "--json")["items"]}
    assert {name: p["due"] for name, p in listed.items()} == due
    assert {p["ttlSource"] for p in listed.values()} == {"spec.runPolicy.ttlSecondsAfterFinished"}
    assert all(p["kind"] == "TFJob" and p["namespace"] == "team" for p in listed.values())

    worker = JobttlProcess(["worker"], env, tmp_path, "worker-0.2").start()
    try:
        # On time: within 3 s of its due time or, on a machine loaded enough that the worker came
        # up after it, of the worker being ready (its scheduler's first line; `ready` is after it).
        wait_for(
            lambda: "Scheduler for upgrade started" in worker.log(),
            timeout=120,
            what="the 0.2 worker and its scheduler to start",
        )
        ready = time.time()
        deleted = lambda name: [r for r in emulator.requests("DELETE") if r["path"].endswith(f"/tfjobs/{name}")]  # noqa: E731
        [overdue] = wait_for(lambda: deleted("overdue"), timeout=20, what="the overdue deletion")
        [soon] = wait_for(
            lambda: deleted("soon"), timeout=max(due["soon"] - time.time(), 0) + 20, what="the deletion due in 6 s"
        )
        assert due["soon"] <= soon["time"] < max(due["soon"], ready) + 3, "on time, as booked by 0.1"
        assert overdue["status"] == soon["status"] == 200
        assert deleted("later") == [], "not before its time"
        later = [o for o in objects if o["metadata"]["name"] == "later"][0]
        assert redis.client().zscore("jobttl:pending", later["metadata"]["uid"]) == due["later"]
    finally:
        worker.stop()


# The flat core's deletions, by stage: a job stage announced ahead (JOBTTL_WARN_BEFORE), a pods
# stage ahead of its job (podTTL in namespace "staged"; TFJob's pods may go first, kinds.yaml),
# and one an operator postponed. Seconds after the jobs finish.
WARN_BEFORE = 3
PLAIN_TTL, POD_TTL, STAGED_TTL, POSTPONED_TTL, POSTPONED_BY = 7, 6, 9, 5, 4
FLAT_CORE_POLICY = f"""\
kinds: [TFJob]
rules:
  - name: staged
    namespaces: [staged]
    podTTL: {POD_TTL}s
"""
RESYNC_AFTER = 4  # the resync asked for runs before any deletion: today's reconcile finds every record current
ON_TIME = 3  # seconds late a deletion may run and be on time (the scheduler's look, the worker's start)


def pod_of(job: dict, name: str) -> dict:
    """A pod of `job`, as training-operator labels and owns it."""
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {"training.kubeflow.org/job-name": meta["name"]},
            "ownerReferences": [
                {
                    "apiVersion": job["apiVersion"],
                    "kind": job["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "tensorflow", "image": "kubeflow/tf-mnist"}]},
    }


@pytest.fixture
def stack_with_pods(tmp_path):
    redis = RedisServer().start()
    emulator = start_emulator(tmp_path, (TFJOB_RESOURCE, POD, CORE_EVENTS), gc_delay=0.1)
    yield redis, emulator
    emulator.stop()
    redis.stop()


def test_deletions_booked_by_the_flat_core_run_on_time_under_the_rooms(previous_layout, stack_with_pods, tmp_path):
    """Issue 21 moved the core into rooms, the Lua into core/store/lua/ and the task names into the
    worker's entry points: what the flat core booked (records, overrides, RQ jobs, announcements,
    a resync) is read by today's command and run by today's worker, each at its time."""
    from kubernetes import client

    redis, emulator = stack_with_pods
    api_client = config.new_client_from_config(config_file=str(emulator.kubeconfig))
    jobs, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
    for namespace, name, ttl in (
        ("team", "plain", PLAIN_TTL),
        ("staged", "staged", STAGED_TTL),
        ("team", "postponed", POSTPONED_TTL),
    ):
        jobs.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "tfjobs", tfjob(name, namespace, ttl=ttl))
    staged = jobs.get_namespaced_custom_object("kubeflow.org", "v1", "staged", "tfjobs", "staged")
    pods = ["staged-worker-0", "staged-worker-1"]
    for pod in pods:  # its pods ran before it finished (a pod younger than the finish is never deleted)
        core.create_namespaced_pod("staged", pod_of(staged, pod))
    finished = int(time.time())
    objects = [
        jobs.patch_namespaced_custom_object_status(
            "kubeflow.org", "v1", namespace, "tfjobs", name, {"status": finished_status(finished)}
        )
        for namespace, name in (("team", "plain"), ("staged", "staged"), ("team", "postponed"))
    ]
    uid = {o["metadata"]["name"]: o["metadata"]["uid"] for o in objects}

    (tmp_path / "policy.yaml").write_text(FLAT_CORE_POLICY)
    booked = run_old_code(
        previous_layout,
        BOOK_WITH_FLAT_CORE,
        [redis.url, "upgrade", str(tmp_path / "policy.yaml"), str(WARN_BEFORE)],
        {"objects": objects, "postpone": [["team", "postponed", POSTPONED_BY]], "resyncAt": finished + RESYNC_AFTER},
    )
    assert booked["code"].startswith(str(previous_layout)), "the flat core's own code booked them"
    assert booked["changes"] == ["scheduled"] * 3 and booked["resync"] is True
    due = {
        ("plain", "job"): finished + PLAIN_TTL,
        ("staged", "pods"): finished + POD_TTL,
        ("staged", "job"): finished + STAGED_TTL,
        ("postponed", "job"): booked["postponed"]["postponed"],
    }
    assert due[("postponed", "job")] >= finished + POSTPONED_TTL + POSTPONED_BY
    assert booked["pending"] == len(due)
    r = redis.client()
    queue = Queue("upgrade", connection=r, serializer=JSONSerializer)
    scheduled = Job.fetch_many(queue.scheduled_job_registry.get_job_ids(), connection=r, serializer=JSONSerializer)
    assert {j.func_name for j in scheduled} == {
        "jobttl.worker.tasks.delete_if_expired",
        "jobttl.worker.tasks.warn_upcoming",
        "jobttl.worker.tasks.resync",
    }, "the task names the flat core booked, which today's worker must answer to"

    # Today's command reads what the flat core wrote.
    env = {
        "JOBTTL_REDIS_URL": redis.url,
        "JOBTTL_QUEUE": "upgrade",
        "KUBECONFIG": str(emulator.kubeconfig),
        "JOBTTL_POLICY": str(tmp_path / "policy.yaml"),
        "JOBTTL_RESYNC_INTERVAL": "0",
        "JOBTTL_DELETE_RATE": "0",
        "JOBTTL_WORKER_METRICS_PORT": "0",
    }
    listed = command(env, "pending", "--json")["items"]
    assert {(p["name"], p["stage"]): p["due"] for p in listed} == due
    assert {p["name"]: p["ttlSource"] for p in listed if p["stage"] == "job"} == {
        name: "spec.runPolicy.ttlSecondsAfterFinished" for name in uid
    }
    [pods_stage] = [p for p in listed if p["stage"] == "pods"]
    assert pods_stage["ttlSource"] == "podTTL of rule staged" and pods_stage["rules"] == ["staged"]

    announcements = RecordingSink()
    worker = JobttlProcess(
        ["worker"],
        {**env, "JOBTTL_WARN_URL": announcements.url, "JOBTTL_WARN_BEFORE": f"{WARN_BEFORE}s"},
        tmp_path,
        "worker-rooms",
    ).start()
    try:
        # On a loaded machine the worker (and its scheduler process) may come up after the first
        # due time: a deletion is on time if it runs within ON_TIME of its due time or, if later,
        # of the worker being ready (seen by its scheduler's first line; `ready` is after that).
        wait_for(
            lambda: "Scheduler for upgrade started" in worker.log(),
            timeout=120,
            what="today's worker and its scheduler to start",
        )
        ready = time.time()

        def deleted(namespace: str, what: str) -> list[dict]:
            return emulator.requests("DELETE", path_contains=f"/namespaces/{namespace}/{what}")

        def all_deleted() -> tuple | None:
            found = (
                deleted("team", "tfjobs/plain"),
                deleted("staged", "tfjobs/staged"),
                deleted("team", "tfjobs/postponed"),
                deleted("staged", "pods/"),
            )
            return found if all(found) else None

        ([plain], [staged_job], [postponed], pod_deletes) = wait_for(
            all_deleted, timeout=max(due.values()) - time.time() + 10, what="every deletion the flat core booked"
        )

        # "deleted" is said once the worker has seen the object gone (jobttl.core.services.follow: 2 s on).
        def history_when_all_deleted() -> list[dict] | None:
            items = command(env, "history", "--json", "--limit", "100")["items"]
            return items if {e.get("name") for e in items if e["event"] == "deleted"} == set(uid) else None

        history = wait_for(
            history_when_all_deleted, timeout=15, interval=0.2, what="the history to say every job deleted"
        )
    finally:
        worker.stop()
        announcements.server.shutdown()
    log = worker.log()

    def on_time(request: dict, stage: tuple[str, str]) -> bool:
        return due[stage] <= request["time"] < max(due[stage], ready) + ON_TIME and request["status"] == 200

    assert on_time(plain, ("plain", "job")), (plain, due, log)
    assert sorted(d["path"].rsplit("/", 1)[1] for d in pod_deletes) == pods
    assert all(on_time(d, ("staged", "pods")) for d in pod_deletes), (pod_deletes, due, log)
    assert on_time(staged_job, ("staged", "job")) and staged_job["time"] > max(d["time"] for d in pod_deletes)
    assert on_time(postponed, ("postponed", "job")), "at the time the operator said, not before"
    # Every job stage announced once, WARN_BEFORE ahead of its time (the postponed one of its new
    # time only: nothing is said of the time an operator replaced), and before it is deleted.
    announced = sorted((e["data"]["name"], e["data"]["deletionTime"]) for e in announcements.events)
    assert announced == sorted((name, rfc3339(due[(name, "job")])) for name in uid), announced
    job_deleted = {"plain": plain, "staged": staged_job, "postponed": postponed}
    assert all(
        due[(e["data"]["name"], "job")] - WARN_BEFORE <= e["received"] < job_deleted[e["data"]["name"]]["time"]
        for e in announcements.events
    ), (announcements.events, due, ready)
    late_start = ready > min(due.values()) - WARN_BEFORE
    assert late_start or all(e["received"] < due[(e["data"]["name"], "job")] for e in announcements.events), (
        "a worker up in time announces each ahead of its due time"
    )

    # The resync the flat core asked for ran as today's, and found every record as today's code
    # would write it: nothing moved, so the jobs that ran were the flat core's own.
    resync = Job.fetch(f"resync-{finished + RESYNC_AFTER}", connection=r, serializer=JSONSerializer)
    assert resync.get_status() == "finished", log
    report = resync.return_value()
    assert report["status"] == "done" and report["seen"] == len(uid) and report["unchanged"] == len(due), report
    assert report["scheduled"] == report["moved"] == report["cancelled"] == report["rejected"] == 0, report

    events = {(e.get("name"), e["event"]) for e in history}  # a resync's entry names no job
    assert {
        ("plain", "deleted"),
        ("staged", "pods-deleted"),
        ("staged", "deleted"),
        ("postponed", "postponed"),
        ("postponed", "deleted"),
    } <= events
    assert {n for n, e in events if e == "announced"} == set(uid)
    assert not [e for e in history if e["event"] in ("failed", "retrying")], history
    assert queue.failed_job_registry.count == 0 and r.zcard(keys.PENDING_INDEX) == 0
