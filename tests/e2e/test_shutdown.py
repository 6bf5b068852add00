"""A worker told to stop (SIGTERM, as Kubernetes does, or SIGINT) finishes the deletion it is doing."""

import json
import threading
import time

import pytest
from rq.job import JobStatus

from tests.e2e.conftest import Cluster
from tests.e2e.test_stop_on_time import SIGNALS, STOP_BOUND
from tests.services import JobttlProcess, wait_for
from jobttl.core.store.audit import Audit
from jobttl.core.domain.decisions.decision import decide
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.domain.rules.policy import Policy
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.store.schedule import Schedule, job_id_for


@pytest.mark.parametrize("how", SIGNALS)
def test_a_stop_signal_lets_the_current_deletion_finish_and_the_worker_exits_within_the_bound(
    cluster: Cluster, stack_env, log_dir, redis, how
):
    """SIGTERM to the process (as the kubelet sends it), or SIGINT to its group (Ctrl-C): the
    deletion under way is seen through, then the worker exits within 10 s (issue 27 §5)."""
    queue = f"shutdown-{how}"
    obj = cluster.create_finished("slow", ttl=0, finished_at=time.time() - 10)
    ref, decision = JobRef.of(obj), decide(obj, TFJOB)
    schedule = Schedule(redis, queue, retry_intervals=[])
    Reconciler(schedule, Audit(redis), Policy()).reconcile(obj, TFJOB, "test")
    # The DELETE takes 2 s: long enough to be in the middle of it when the SIGTERM comes.
    cluster.emulator.add_fault(verb="delete", delay=2.0, count=1, path_contains=f"/namespaces/{cluster.namespace}/")

    worker = JobttlProcess(
        ["worker"], {**stack_env, "JOBTTL_QUEUE": queue, "JOBTTL_WORKER_METRICS_PORT": "0"}, log_dir, "shutdown-worker"
    ).start()
    try:
        job = schedule.queue.fetch_job(job_id_for(ref.uid, decision.expires_at))
        wait_for(lambda: job.get_status(refresh=True) == JobStatus.STARTED, timeout=20, what="the deletion to start")
        sig, send = SIGNALS[how]
        send(worker.process.pid, sig)
        assert worker.process.wait(timeout=STOP_BOUND) == 0
    finally:
        worker.stop()
    # The worker itself saw its DELETE through: a worker killed mid-call would leave the RQ job
    # started, with no result and no record of its own, whatever the API server then did.
    assert job.get_status(refresh=True) == JobStatus.FINISHED
    assert job.return_value(refresh=True) in ("deleted", "delete-requested")
    assert [d["status"] for d in cluster.deletes()] == [200]
    recorded = [e.fields for e in Audit(redis).history(cluster.namespace, "slow")]
    assert [e["event"] for e in recorded if e["uid"] == ref.uid][:1] == [job.return_value()]
    # It says so, last: RQ's own shutdown lines are DEBUG lines (jobttl.worker.runner.rq_logging_level).
    said = [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
    assert said and said[-1].get("event") == "worker-stop", said[-3:]


@pytest.mark.parametrize("how", SIGNALS)
def test_a_deletion_that_cannot_finish_is_handed_back_and_the_worker_exits_within_the_bound(
    cluster: Cluster, stack_env, log_dir, redis, how
):
    """The API server does not answer the DELETE: the worker told to stop does not wait for it
    (up to JOBTTL_API_TIMEOUT, 30 s as shipped) but hands the deletion back, booked to run again."""
    queue = f"handback-{how}"
    obj = cluster.create_finished("unanswered", ttl=0, finished_at=time.time() - 10)
    ref, decision = JobRef.of(obj), decide(obj, TFJOB)
    schedule = Schedule(redis, queue, retry_intervals=[1])
    Reconciler(schedule, Audit(redis), Policy()).reconcile(obj, TFJOB, "test")
    answer = threading.Event()
    held = cluster.emulator.add_fault(
        verb="delete",
        delay=60.0,
        count=1,
        gate=answer,
        path_contains=f"/namespaces/{cluster.namespace}/tfjobs/unanswered",
    )
    worker = JobttlProcess(
        ["worker"],
        {**stack_env, "JOBTTL_QUEUE": queue, "JOBTTL_WORKER_METRICS_PORT": "0", "JOBTTL_API_TIMEOUT": "60"},
        log_dir,
        f"handback-worker-{how}",
    ).start()
    try:
        assert held.arrived.wait(120), "the worker to send its DELETE"
        sig, send = SIGNALS[how]
        send(worker.process.pid, sig)
        assert worker.process.wait(timeout=STOP_BOUND) == 0, worker.log()[-3000:]
    finally:
        answer.set()
        worker.stop()
    job = schedule.queue.fetch_job(job_id_for(ref.uid, decision.expires_at))
    assert job.get_status(refresh=True) == JobStatus.SCHEDULED, "booked to run again (RQ's retry)"
    assert "handed back" in worker.log()
    recorded = [e.fields["event"] for e in Audit(redis).history(cluster.namespace, "unanswered")]
    assert "retrying" in recorded, recorded
