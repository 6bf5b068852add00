"""The first-run review's risky branches, with the resync itself (in this process), a real Redis and
the emulator over HTTP: a resync before any worker, a confirmation over an incomplete listing, a
booking an event made before the first worker, and the pods stage of a held job.

The whole first run with real processes is tests/e2e/test_first_run.py.
"""

from __future__ import annotations

import time
import uuid

import pytest

from jobttl_emulator import CONFIG_MAP, JOB as JOB_RESOURCE, TFJOB as TFJOB_RESOURCE, seed_object
from jobttl.core.store import keys
from jobttl.core.runtime.config import Settings
from jobttl.core.domain.decisions.decision import decide
from jobttl.core.store.guard import FIRST_RUN, HeldDeletions
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.services.install import CONFIGMAP
from jobttl.core.domain.kinds.registry import BATCH_JOB, TFJOB
from jobttl.core.services.reconcile import GUARDED
from jobttl.core.services import resync
from jobttl.core.services.worker_graph import WorkerGraph
from tests.e2e.conftest import CORE_EVENTS
from tests.fixtures import job_object
from tests.services import start_emulator

MONTH = 30 * 86400


@pytest.fixture
def cluster(tmp_path):
    """A cluster of each test's own: a resync lists all of it."""
    emulator = start_emulator(tmp_path, (TFJOB_RESOURCE, JOB_RESOURCE, CORE_EVENTS, CONFIG_MAP))
    yield emulator
    emulator.stop()


@pytest.fixture
def ctx(cluster, redis_server, redis, tmp_path):
    """A context as `jobttl resync` builds it, with the shipped default: the review on. A namespace of
    its own for the install record, a flushed Redis, and jobs of this test's own namespaces."""
    redis.flushdb()
    policy = tmp_path / "policy.yaml"
    policy.write_text("ttl: 7d\nkinds: [TFJob, Job]\n")
    settings = Settings.from_env(
        {
            "JOBTTL_REDIS_URL": redis_server.url,
            "KUBECONFIG": str(cluster.kubeconfig),
            "JOBTTL_QUEUE": f"review-{uuid.uuid4().hex[:6]}",
            "JOBTTL_POLICY": str(policy),
            "JOBTTL_FIRST_RUN_REVIEW": "on",
            "JOBTTL_NAMESPACE": f"jobttl-{uuid.uuid4().hex[:6]}",
            "JOBTTL_RESYNC_INTERVAL": "0",
        }
    )
    return WorkerGraph.from_settings(settings)


def old_jobs(cluster, kind, count: int, prefix: str) -> list[dict]:
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    return [
        seed_object(cluster.store, job_object(kind, f"{prefix}-{i}", namespace, at=time.time() - MONTH))
        for i in range(count)
    ]


def test_a_resync_before_any_worker_starts_the_review_and_books_nothing_overdue(ctx, cluster):
    old = old_jobs(cluster, TFJOB, 3, "old")
    report = resync.run(ctx)
    assert report.status == "held" and report.first_run_held == 3 and report.queued_now == 0
    assert ctx.redis.zcard(keys.PENDING_INDEX) == 0, "nothing booked"
    data = cluster.store.get(CONFIG_MAP, ctx.install.namespace, CONFIGMAP)["data"]
    assert data["origin"] == "first-install" and "reviewedAt" not in data
    assert {h.ref.name for h in HeldDeletions(ctx.redis).all()} == {o["metadata"]["name"] for o in old}


@pytest.mark.parametrize("status", [503, 404, 403])
def test_a_confirmation_covers_only_the_kinds_its_resync_listed_completely(ctx, cluster, status):
    """Issue 26 §2: a kind that answered 404 (or 403, 503) while the operator confirmed stays under
    review: its overdue jobs stay held, `jobttl status` names it, until a complete listing and a
    confirmation that covers it. Before: a 404 counted as listed, and once served again its overdue
    jobs were deleted unreviewed."""
    old_jobs(cluster, TFJOB, 2, "tf")
    old_jobs(cluster, BATCH_JOB, 2, "batch")
    first = resync.run(ctx)
    assert first.first_run_held == 4
    cluster.add_fault(verb="list", status=status, count=10, path_contains="/apis/batch/v1/jobs")
    try:
        confirming = resync.run(ctx, confirm=first.held_id)
    finally:
        cluster.clear_faults()
    assert confirming.queued_now == 2, confirming  # the TFJobs: listed completely, and confirmed
    assert {h.ref.kind for h in HeldDeletions(ctx.redis).all()} == {"Job"}
    # Served again: the next resync holds the Jobs still (was: deleted unreviewed after a 404).
    again = resync.run(ctx)
    assert again.status == "held" and again.first_run_held == 2 and again.queued_now == 0, again
    install = ctx.install.current()
    assert install.reviewing and install.kinds_under_review == {"batch/v1/Job"}
    data = cluster.store.get(CONFIG_MAP, ctx.install.namespace, CONFIGMAP)["data"]
    assert data["kindsUnderReview"] == "batch/v1/Job" and "reviewedAt" in data  # in the cluster first
    assert ctx.install.holds(int(time.time()) - MONTH, "batch/v1/Job"), "a worker reaching one holds it"
    assert not ctx.install.holds(int(time.time()) - MONTH, "kubeflow.org/v1/TFJob")
    said = status_text(ctx)
    assert "First-run review: reviewed" in said and "but for batch/v1/Job" in said, said
    # The old id no longer matches what is held.
    assert resync.run(ctx, confirm=first.held_id).status == "stale-confirmation"
    done = resync.run(ctx, confirm=again.held_id)  # listed completely now, and confirmed: go
    assert done.status == "done" and done.queued_now == 2, done
    assert not ctx.install.current().reviewing


def status_text(ctx) -> str:
    """`jobttl status` as the operator runs it, on this context's Redis and queue."""
    import subprocess
    import sys

    from tests.services import ROOT

    env = {
        "JOBTTL_REDIS_URL": ctx.settings.redis_url,
        "JOBTTL_QUEUE": ctx.settings.queue_name,
        "PATH": "/usr/bin:/bin",
        "COLUMNS": "400",
    }
    done = subprocess.run(
        [sys.executable, "-m", "jobttl", "status"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    return done.stdout + done.stderr


def test_a_booking_an_event_made_before_any_worker_is_held_with_the_rest(ctx, cluster):
    [early] = old_jobs(cluster, TFJOB, 1, "early")
    # The sink booked it before any worker or resync ran: there was no install record yet.
    assert ctx.reconciler.reconcile(early, TFJOB, "event", GUARDED).change.value == "scheduled"
    old_jobs(cluster, TFJOB, 2, "old")
    first = resync.run(ctx)
    assert first.first_run_held == 3, first
    held = {h.ref.name: h.by for h in HeldDeletions(ctx.redis).all()}
    assert held == {"early-0": FIRST_RUN, "old-0": FIRST_RUN, "old-1": FIRST_RUN}
    assert ctx.install.holds(int(time.time()) - MONTH), "a worker reaching the booking holds it too"

    # Another event books one more before the operator confirms what they saw: nothing goes, they look again.
    [late] = old_jobs(cluster, TFJOB, 1, "late")
    ctx.reconciler.reconcile(late, TFJOB, "event", GUARDED)
    again = resync.run(ctx, confirm=first.held_id)
    assert again.status == "held" and again.queued_now == 0 and again.held_id != first.held_id
    assert ctx.install.current().under_review
    done = resync.run(ctx, confirm=again.held_id)
    assert done.status == "done" and not ctx.install.current().under_review
    assert HeldDeletions(ctx.redis).count() == 0


def test_nothing_overdue_at_install_ends_the_review_but_an_unheld_booking_keeps_it_open(ctx, cluster):
    namespace = f"new-{uuid.uuid4().hex[:6]}"
    seed_object(cluster.store, job_object(TFJOB, "fresh", namespace, at=time.time()))  # due in 7 days
    ctx.install.establish(ctx.clock.now())
    # A booking due at install that the listing cannot see as the review's (its object is of a kind
    # this resync does not list): the review must not end while it waits in the schedule.
    hidden = job_object(TFJOB, "hidden", namespace, at=time.time() - MONTH)
    hidden["metadata"]["uid"] = str(uuid.uuid4())
    decision = decide(hidden, TFJOB, ctx.settings.policy)
    ctx.reconciler.release([(JobRef.of(hidden), decision)], "event")
    report = resync.run(ctx)
    assert report.status == "done" and ctx.install.current().under_review
    ctx.redis.delete(keys.PENDING_INDEX)
    report = resync.run(ctx)
    assert not ctx.install.current().under_review
    assert ctx.install.current().reviewed_by == "resync: nothing was due at install"


def test_a_dry_run_install_keeps_the_review_open_and_holds_the_overdue_jobs_when_dry_run_ends(
    cluster, redis_server, redis, tmp_path
):
    """Found in review: with dry run on, overdue jobs became dry-run records, the resync held nothing,
    and the review ended by itself ("nothing was due at install"); turning dry run off then deleted
    them, unreviewed."""
    redis.flushdb()
    old = old_jobs(cluster, TFJOB, 2, "dry")
    policy = tmp_path / "policy.yaml"
    env = {
        "JOBTTL_REDIS_URL": redis_server.url,
        "KUBECONFIG": str(cluster.kubeconfig),
        "JOBTTL_QUEUE": f"review-{uuid.uuid4().hex[:6]}",
        "JOBTTL_POLICY": str(policy),
        "JOBTTL_FIRST_RUN_REVIEW": "on",
        "JOBTTL_NAMESPACE": f"jobttl-{uuid.uuid4().hex[:6]}",
        "JOBTTL_RESYNC_INTERVAL": "0",
    }
    policy.write_text("ttl: 7d\nkinds: [TFJob, Job]\ndryRun: true\n")
    dry = WorkerGraph.from_settings(Settings.from_env(env))
    report = resync.run(dry)
    assert report.queued_now == 0 and dry.install.current().under_review, "the review stays open"
    policy.write_text("ttl: 7d\nkinds: [TFJob, Job]\n")
    live = WorkerGraph.from_settings(Settings.from_env(env))
    report = resync.run(live)
    assert report.queued_now == 0 and report.first_run_held == 2, report
    assert {h.ref.name for h in HeldDeletions(live.redis).all() if h.by == FIRST_RUN} == {
        o["metadata"]["name"] for o in old
    }


def test_a_worker_facing_a_broken_install_record_stops_at_start_naming_it(cluster, redis_server, tmp_path):
    """A record edited by hand into nonsense: the worker refuses to start (exit 2), deleting nothing."""
    import subprocess
    import sys

    from jobttl.core.kube.client import KubeClient, load_api_client
    from tests.services import ROOT

    KubeClient(load_api_client(str(cluster.kubeconfig))).create_configmap(
        "jobttl", CONFIGMAP, {"installedAt": "last tuesday"}
    )
    env = {
        "JOBTTL_REDIS_URL": redis_server.url,
        "KUBECONFIG": str(cluster.kubeconfig),
        "JOBTTL_NAMESPACE": "jobttl",
        "JOBTTL_FIRST_RUN_REVIEW": "on",
        "JOBTTL_WORKER_METRICS_PORT": "0",
        "JOBTTL_QUEUE": "broken-record",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-m", "jobttl", "worker", "--burst"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert (
        "configuration error: the install record (ConfigMap jobttl/jobttl-install, JOBTTL_NAMESPACE): "
        "ConfigMap jobttl/jobttl-install: data.installedAt: not an RFC 3339 time: 'last tuesday'" in done.stderr
    )


def test_a_confirmation_that_cannot_write_the_install_record_releases_nothing_and_says_why(ctx, cluster):
    """The review ends in the cluster first: a 403 (or 500) on updating the ConfigMap keeps it open,
    what it holds held, and the report says why."""
    old_jobs(cluster, TFJOB, 2, "tf")
    first = resync.run(ctx)
    assert first.first_run_held == 2
    cluster.add_fault(verb="update", status=403, count=10, path_contains=f"/configmaps/{CONFIGMAP}")
    try:
        confirming = resync.run(ctx, confirm=first.held_id)
    finally:
        cluster.clear_faults()
    assert confirming.queued_now == 0 and confirming.status == "incomplete", confirming
    assert "could not be marked done" in confirming.install_problem and "403" in confirming.install_problem
    assert HeldDeletions(ctx.redis).count() == 2 and ctx.redis.zcard(keys.PENDING_INDEX) == 0
    assert ctx.install.current().under_review
    done = resync.run(ctx, confirm=first.held_id)  # the record writable again: go
    assert done.status == "done" and done.queued_now == 2 and not ctx.install.current().reviewing
