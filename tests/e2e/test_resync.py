"""Resync end to end: the emulator holds thousands of jobs, Redis is made to match.

This module runs its own emulator (serving every kind), Redis and worker, so a resync's
view of "the whole cluster" is exactly what these tests put there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from jobttl_emulator import Resource, seed_object
from jobttl.core.runtime.config import Settings
from tests.fixtures import job_object
from tests.services import ROOT, JobttlProcess, RedisServer, start_emulator, wait_for
from jobttl.core.services import resync as resync_run
from jobttl.core.services.worker_graph import WorkerGraph
from jobttl.core.domain.kinds.registry import PYTORCHJOB, TFJOB, TRAINJOB, WORKFLOW, ALL_KINDS
from jobttl.core.store.keys import HELD as HELD_KEY
from jobttl.core.store import keys
from jobttl.core.store.keys import PENDING_INDEX

QUEUE = "resync"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    server = start_emulator(
        tmp_path_factory.mktemp("resync"),
        (Resource(k.group, k.version, k.kind, k.plural) for k in ALL_KINDS),
        gc_delay=0.1,
        history_size=20000,
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def redis_server():
    server = RedisServer().start()
    yield server
    server.stop()


def env(cluster, redis_server, **overrides) -> dict[str, str]:
    values = {
        "JOBTTL_REDIS_URL": redis_server.url,
        "KUBECONFIG": str(cluster.kubeconfig),
        "JOBTTL_QUEUE": QUEUE,
        "JOBTTL_RESYNC_INTERVAL": "0",
        "JOBTTL_POLICY": str(ROOT / "tests" / "e2e" / "resync-policy.yaml"),
        "JOBTTL_RESYNC_MAX_DELETIONS": "100000",
        "JOBTTL_RESYNC_MAX_SHARE": "1",
        "JOBTTL_WORKER_METRICS_PORT": "0",
        "JOBTTL_FIRST_RUN_REVIEW": "off",
    }
    return {**values, **{k: str(v) for k, v in overrides.items()}}


def context(cluster, redis_server, **overrides) -> WorkerGraph:
    return WorkerGraph.from_settings(Settings.from_env(env(cluster, redis_server, **overrides)))


def seed(cluster, kind, namespace, count, at, state="succeeded", ttl=None, prefix="job"):
    return [
        seed_object(cluster.store, job_object(kind, f"{prefix}-{i}", namespace, state=state, at=at, ttl=ttl))
        for i in range(count)
    ]


def canary(cluster, redis_server, name: str) -> None:
    """Queue one deletion past the guard and wait for the worker to make it.

    The worker takes deletions in the order they were queued, so once the canary's DELETE
    is seen, any deletion queued before it (say, by a resync that should have held it)
    would have been made too: "nothing else was deleted" then means something.
    """
    from jobttl.core.domain.decisions.decision import decide
    from jobttl.core.domain.wire.identity import JobRef

    [obj] = seed(cluster, TFJOB, f"canary-{name}", 1, time.time() - 3600, ttl=60, prefix="canary")
    ctx = context(cluster, redis_server)
    ctx.reconciler.release([(JobRef.of(obj), decide(obj, TFJOB, ctx.settings.policy))], "test")
    wait_for(
        lambda: any(r["path"].endswith(f"/canary-{name}/tfjobs/canary-0") for r in cluster.requests("DELETE")),
        timeout=20,
        what="the worker to delete the canary",
    )


def deletes_but_canaries(cluster) -> list[dict]:
    return [r for r in cluster.requests(method="DELETE") if "/canary-" not in r["path"]]


def pending(redis) -> dict[str, int]:
    return {uid.decode(): int(due) for uid, due in redis.zrange(PENDING_INDEX, 0, -1, withscores=True)}


@pytest.fixture(scope="module")
def big_cluster(cluster):
    """About 3,000 jobs in 12 namespaces, of four kinds, in every state that matters."""
    at = int(time.time()) - 60
    expected: dict[str, int] = {}
    for n in range(10):
        ns = f"team-{n}"
        for obj in seed(cluster, TFJOB, ns, 120, at, ttl=3600):
            expected[obj["metadata"]["uid"]] = at + 3600
        for obj in seed(cluster, PYTORCHJOB, ns, 60, at, state="failed", ttl=7200):
            expected[obj["metadata"]["uid"]] = at + 7200
        # No TTL of their own: the policy's ttlAfterSuccess (2h) applies.
        for obj in seed(cluster, WORKFLOW, ns, 50, at):
            expected[obj["metadata"]["uid"]] = at + 7200
        for obj in seed(cluster, TRAINJOB, ns, 40, at, state="failed"):  # ttlAfterFailure: 1d
            expected[obj["metadata"]["uid"]] = at + 86400
        seed(cluster, TFJOB, ns, 30, at, state="running", ttl=0, prefix="running")
    seed(cluster, TFJOB, "kube-system", 20, at, ttl=0, prefix="system")  # excluded by the policy
    seed(cluster, TFJOB, "pinned", 20, at, ttl=0, prefix="kept")  # a keep rule
    return expected


def test_a_resync_schedules_every_finished_job_with_the_right_time(cluster, redis_server, big_cluster):
    cluster.clear_requests()
    report = resync_run.run(context(cluster, redis_server))
    assert (report.status, report.seen, report.scheduled, report.queued_now) == ("done", 3040, len(big_cluster), 0)
    assert pending(redis_server.client()) == big_cluster
    lists = [r for r in cluster.requests(method="GET") if r["path"].endswith("/tfjobs")]
    assert all(r["query"].get("limit") == "500" for r in lists)
    assert sum(1 for r in lists if "continue" in r["query"]) >= 3, "the listing was paginated"


def test_after_redis_is_flushed_a_resync_restores_every_pending_deletion(cluster, redis_server, big_cluster):
    redis = redis_server.client()
    redis.flushdb()
    assert pending(redis) == {}
    report = resync_run.run(context(cluster, redis_server))
    assert report.scheduled == len(big_cluster)
    assert pending(redis) == big_cluster


def test_a_second_resync_changes_nothing(cluster, redis_server, big_cluster):
    report = resync_run.run(context(cluster, redis_server))
    assert (report.scheduled, report.moved, report.cancelled, report.unchanged) == (0, 0, 0, len(big_cluster))


def test_vanished_and_recreated_jobs_lose_their_old_pending_deletion(cluster, redis_server, big_cluster):
    tfjobs = cluster.store.find("kubeflow.org", "v1", "tfjobs")
    gone = cluster.store.get(tfjobs, "team-3", "job-1")
    cluster.store.delete(tfjobs, "team-3", "job-1", {"propagationPolicy": "Background"})
    old = cluster.store.get(tfjobs, "team-4", "job-2")
    cluster.store.delete(tfjobs, "team-4", "job-2", {"propagationPolicy": "Background"})
    now = int(time.time())
    new = seed_object(cluster.store, job_object(TFJOB, "job-2", "team-4", at=now, ttl=600))
    # As in real life, those deletions were scheduled well before this resync (entries from
    # its last minute are left alone: they may be for objects created after its listing).
    ctx = context(cluster, redis_server)
    for obj in (gone, old):
        job = ctx.schedule.queue.fetch_job(ctx.schedule.get(obj["metadata"]["uid"]).job_id)
        job.meta["scheduledAt"] = now - 3600
        job.save_meta()

    report = resync_run.run(context(cluster, redis_server))
    now_pending = pending(redis_server.client())
    assert gone["metadata"]["uid"] not in now_pending
    assert old["metadata"]["uid"] not in now_pending
    assert now_pending[new["metadata"]["uid"]] == now + 600
    assert report.cancelled == 2 and report.scheduled == 1


def test_a_list_whose_continue_token_expires_is_restarted(cluster, redis_server, big_cluster):
    everything = resync_run.run(context(cluster, redis_server)).seen
    cluster.clear_requests()
    cluster.add_fault(verb="list", status=410, count=1, path_contains="/tfjobs")
    report = resync_run.run(context(cluster, redis_server))
    assert report.status == "done" and report.seen == everything
    statuses = [r["status"] for r in cluster.requests(method="GET") if r["path"].endswith("/tfjobs")]
    assert statuses[0] == 410 and statuses.count(410) == 1


def test_kinds_the_cluster_does_not_serve_are_reported_not_fatal_and_recorded_once(redis_server, tmp_path):
    from jobttl.core.store import keys
    from jobttl.core.store.audit import Audit

    redis = redis_server.client()
    redis.delete(keys.RESYNC_LAST)  # as before the first resync
    started = time.time() - 1
    small = start_emulator(tmp_path, [Resource("kubeflow.org", "v1", "TFJob", "tfjobs")])
    try:
        report = resync_run.run(context(small, redis_server, JOBTTL_QUEUE="small"))
        again = resync_run.run(context(small, redis_server, JOBTTL_QUEUE="small"))
    finally:
        small.stop()
    assert report.status == again.status == "done"
    assert "kubeflow.org/v1/PyTorchJob" in report.missing_kinds and "kubeflow.org/v1/TFJob" not in report.missing_kinds
    # In the audit trail (what notifications read) once, when first found, not at every resync.
    recorded = [
        e.fields["resource"] for e in Audit(redis).entries(since=started) if e.fields.get("event") == "kind-not-served"
    ]
    assert sorted(recorded) == sorted(report.missing_kinds) == sorted(again.missing_kinds)


def test_kinds_the_cluster_does_not_serve_show_in_status_and_the_metrics(redis_server, tmp_path):
    """PyTorchJob (enabled by default) on a cluster without the training operator's PyTorchJob CRD,
    RayJob (enabled by the policy) without KubeRay: `jobttl status` and jobttl_kind_not_served say so."""
    from jobttl.core.store.gauges import _ScheduleCollector

    small = start_emulator(tmp_path, [Resource("kubeflow.org", "v1", "TFJob", "tfjobs")])
    try:
        policy = tmp_path / "policy.yaml"
        policy.write_text("kinds: [TFJob, PyTorchJob, RayJob, TaskRun]\n")
        resync_run.run(context(small, redis_server, JOBTTL_QUEUE="small", JOBTTL_POLICY=policy))
        status = subprocess.run(
            [sys.executable, "-m", "jobttl", "status"],
            env=env(small, redis_server, JOBTTL_QUEUE="small"),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        small.stop()
    assert "Kind not served by this cluster (skipped; no CRD?): ray.io/v1/RayJob" in status.stdout, status.stdout
    assert "kubeflow.org/v1/TFJob" not in status.stdout.split("Kind not served", 1)[1]
    (family,) = [
        f for f in _ScheduleCollector(redis_server.client(), "small").collect() if f.name == "jobttl_kind_not_served"
    ]
    kinds = {(sample.labels["group"], sample.labels["version"], sample.labels["kind"]) for sample in family.samples}
    assert {("ray.io", "v1", "RayJob"), ("tekton.dev", "v1", "TaskRun"), ("kubeflow.org", "v1", "PyTorchJob")} <= kinds
    assert ("kubeflow.org", "v1", "TFJob") not in kinds


@pytest.fixture
def worker(cluster, redis_server, tmp_path):
    process = JobttlProcess(
        ["worker"], env(cluster, redis_server, JOBTTL_DELETE_RATE=20), tmp_path, "resync-worker"
    ).start()
    yield process
    process.stop()


def test_the_blast_radius_guard_holds_deletions_until_confirmed(cluster, redis_server, big_cluster, worker):
    expired = seed(cluster, TFJOB, "backlog", 40, time.time() - 3600, ttl=60, prefix="old")
    run = [sys.executable, "-m", "jobttl", "resync", "--json"]
    guarded = env(cluster, redis_server, JOBTTL_RESYNC_MAX_DELETIONS=10)
    cluster.clear_requests()

    held = subprocess.run(run, env={**guarded, "PATH": "/usr/bin:/bin"}, cwd=ROOT, capture_output=True, text=True)
    assert held.returncode == 3, held.stderr
    held_report = json.loads(held.stdout)
    assert held_report["held"] == 40 and held_report["held_id"]
    assert redis_server.client().hlen(HELD_KEY) == 40
    canary(cluster, redis_server, "held")
    assert deletes_but_canaries(cluster) == [], "nothing is deleted while held"

    # More expire after the operator reviewed the held ones: --confirm releases what was
    # reviewed, and the newcomers face the guard on their own.
    newcomers = seed(cluster, TFJOB, "backlog-2", 15, time.time() - 3600, ttl=60, prefix="new")
    wrong = subprocess.run(
        run + ["--confirm", "not-the-one"],
        env={**guarded, "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert wrong.returncode == 5 and json.loads(wrong.stdout)["queued_now"] == 0, "a stale id confirms nothing"
    confirmed = subprocess.run(
        run + ["--confirm", held_report["held_id"]],
        env={**guarded, "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert confirmed.returncode == 3, confirmed.stderr
    report = json.loads(confirmed.stdout)
    assert (report["queued_now"], report["held"]) == (40, 15)
    assert {uid.decode() for uid in redis_server.client().hkeys(HELD_KEY)} == {o["metadata"]["uid"] for o in newcomers}

    wait_for(lambda: len(deletes_but_canaries(cluster)) >= 40, timeout=30, what="40 deletions")
    deletes = sorted(r["time"] for r in deletes_but_canaries(cluster))
    assert {r["path"].rsplit("/", 1)[1] for r in deletes_but_canaries(cluster)} == {
        o["metadata"]["name"] for o in expired
    }
    # JOBTTL_DELETE_RATE=20: 40 deletions take at least 39 intervals of 50 ms. (Single gaps vary
    # with how soon after its slot each DELETE goes out; the rate holds over the run.)
    assert deletes[-1] - deletes[0] >= 39 * 0.05 * 0.9


def test_each_resync_books_the_next_one_on_a_slot_all_workers_share(cluster, redis_server, big_cluster):
    from rq import Queue
    from rq.registry import ScheduledJobRegistry

    from jobttl.worker import tasks

    tasks.configure(
        Settings.from_env(env(cluster, redis_server, JOBTTL_RESYNC_INTERVAL=600, JOBTTL_QUEUE="periodic")),
        notices=False,
    )
    try:
        first, second = tasks.resync(), tasks.resync()
    finally:
        tasks._context = None
    assert first["status"] == second["status"] == "done"
    queue = Queue("periodic", connection=redis_server.client())
    [booked] = [i for i in ScheduledJobRegistry(queue=queue).get_job_ids() if i.startswith("resync-")]
    slot = int(booked.removeprefix("resync-"))
    assert slot % 600 == 0 and 0 < slot - time.time() <= 600


def test_only_one_resync_runs_at_a_time(cluster, redis_server, big_cluster):
    from jobttl.core.store.keys import RESYNC_LOCK as LOCK_KEY

    lock = redis_server.client().lock(LOCK_KEY, timeout=60)
    assert lock.acquire(blocking=False)
    try:
        assert resync_run.run(context(cluster, redis_server)).status == "already-running"
    finally:
        lock.release()
    assert resync_run.run(context(cluster, redis_server)).status == "done"


def test_a_policy_that_suddenly_makes_everything_due_is_held_by_the_guard(cluster, redis_server, big_cluster, tmp_path):
    """Every job already has a pending deletion hours away; a typo (maxTTL 1m, not 1d) would
    pull them all to now. The guard must count moved deletions, not only unknown ones.

    The typo is deployed everywhere, the worker too: a worker with the right policy would
    decide again and move each deletion back, hiding whether the guard held anything."""
    before = pending(redis_server.client())
    typo = tmp_path / "policy.yaml"
    teams = ", ".join(f"team-{n}" for n in range(10))
    typo.write_text(
        f"ttlAfterSuccess: 2h\nttlAfterFailure: 1d\nrules:\n  - {{name: typo, namespaces: [{teams}], maxTTL: 1m}}\n"
    )
    worker = JobttlProcess(
        ["worker"], env(cluster, redis_server, JOBTTL_DELETE_RATE=20, JOBTTL_POLICY=typo), tmp_path, "typo-worker"
    ).start()
    cluster.clear_requests()
    report = resync_run.run(context(cluster, redis_server, JOBTTL_POLICY=typo, JOBTTL_RESYNC_MAX_DELETIONS=100))
    assert report.status == "held" and report.held >= len(big_cluster) - 5
    assert report.queued_now == 0
    after = pending(redis_server.client())
    assert {u: after.get(u) for u in big_cluster if u in before} == {
        u: before[u] for u in big_cluster if u in before
    }, "held deletions keep their old due times"
    try:
        canary(cluster, redis_server, "typo")
    finally:
        worker.stop()
    assert deletes_but_canaries(cluster) == [], "a worker is running, and deletes nothing of what was held"
    resync_run.run(context(cluster, redis_server))  # the typo fixed: nothing held any more
    assert redis_server.client().hlen(HELD_KEY) == 0


def test_a_dry_run_job_is_reported_once_and_never_deleted(cluster, redis_server, big_cluster, worker, tmp_path):
    [obj] = seed(cluster, TFJOB, "rehearsal", 1, time.time() - 3600, ttl=60, prefix="dry")
    uid = obj["metadata"]["uid"]
    cluster.clear_requests()
    resync_run.run(context(cluster, redis_server))
    ctx = context(cluster, redis_server)
    wait_for(
        lambda: (p := ctx.schedule.get(uid)) is not None and p.would_delete_at,
        timeout=20,
        what="the worker to find it would delete it",
    )
    resync_run.run(ctx)  # a later resync (or event) does not queue it again
    would = [e for e in ctx.audit.entries() if e.fields.get("uid") == uid and e.fields["event"] == "would-delete"]
    assert len(would) == 1
    canary(cluster, redis_server, "dry")
    assert deletes_but_canaries(cluster) == []
    assert ctx.schedule.get(uid).dry_run

    # Dry-run switched off: what it would have deleted now faces the blast-radius guard.
    real = tmp_path / "policy.yaml"
    real.write_text("ttlAfterSuccess: 2h\nttlAfterFailure: 1d\n")
    report = resync_run.run(context(cluster, redis_server, JOBTTL_POLICY=real, JOBTTL_RESYNC_MAX_DELETIONS=0))
    assert report.status == "held" and uid.encode() in redis_server.client().hkeys(HELD_KEY)
    canary(cluster, redis_server, "dry-off")
    assert deletes_but_canaries(cluster) == []


def test_a_resync_makes_the_dry_run_records_match_the_index_again(cluster, redis_server):
    """The gauges count dry run by the sets beside the index; whatever wrote the index without
    them (a process of the previous release, during a rollout) is repaired by the next resync."""
    [obj] = seed(cluster, TFJOB, "rehearsal", 1, time.time() - 3600, ttl=60, prefix="repaired")
    uid, redis, ctx = obj["metadata"]["uid"], redis_server.client(), context(cluster, redis_server)
    resync_run.run(ctx)
    assert redis.zscore(keys.dry_run("TFJob.kubeflow.org"), uid) == redis.zscore(PENDING_INDEX, uid) is not None
    redis.zrem(keys.dry_run("TFJob.kubeflow.org"), uid)  # booked without its entry
    redis.zadd(keys.dry_run("TFJob.kubeflow.org"), {"a-uid-long-gone": 1})  # an entry for nothing pending
    resync_run.run(ctx)
    assert redis.zscore(keys.dry_run("TFJob.kubeflow.org"), uid) == redis.zscore(PENDING_INDEX, uid) is not None
    assert redis.zscore(keys.dry_run("TFJob.kubeflow.org"), "a-uid-long-gone") is None
