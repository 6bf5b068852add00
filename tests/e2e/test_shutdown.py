"""A worker told to stop (SIGTERM, as Kubernetes does) finishes the deletion it is doing."""

import os
import signal
import time

from rq.job import JobStatus

from tests.e2e.conftest import Cluster
from tests.services import JobttlProcess, wait_for
from worker.decision import JobRef, decide
from worker.kinds import TFJOB
from worker.schedule import Schedule, job_id_for


def test_sigterm_lets_the_current_deletion_finish(cluster: Cluster, stack_env, log_dir, redis):
    queue = "shutdown"
    obj = cluster.create_finished("slow", ttl=0, finished_at=time.time() - 10)
    ref, decision = JobRef.of(obj), decide(obj, TFJOB)
    schedule = Schedule(redis, queue, retry_intervals=[])
    schedule.plan(ref, decision)
    # The DELETE takes 2 s: long enough to be in the middle of it when the SIGTERM comes.
    cluster.emulator.add_fault(verb="delete", delay=2.0, count=1, path_contains=f"/namespaces/{cluster.namespace}/")

    worker = JobttlProcess(["worker"], {**stack_env, "JOBTTL_QUEUE": queue, "JOBTTL_WORKER_METRICS_PORT": "0"},
                           log_dir, "shutdown-worker").start()
    try:
        job = schedule.queue.fetch_job(job_id_for(ref.uid, decision.expires_at))
        wait_for(lambda: job.get_status(refresh=True) == JobStatus.STARTED, timeout=20, what="the deletion to start")
        os.killpg(worker.process.pid, signal.SIGTERM)
        assert worker.process.wait(timeout=30) == 0
    finally:
        worker.stop()
    assert job.get_status(refresh=True) == JobStatus.FINISHED
    assert [d["status"] for d in cluster.deletes()] == [200]
    assert cluster.get("slow") is None or cluster.get("slow")["metadata"].get("deletionTimestamp")
