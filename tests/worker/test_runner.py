"""The worker process's tuning of RQ (jobttl.worker.runner), on the real RQ and Redis."""

import datetime
import os
import signal

from rq.registry import ScheduledJobRegistry
from rq.serializers import JSONSerializer

from jobttl.worker.runner import JobttlScheduler, JobttlWorker, rq_logging_level
from tests.services import wait_for
from tests.worker.bench import Bench, kube  # noqa: F401 - the module's emulator fixture


def test_the_worker_runs_jobttls_scheduler_and_it_moves_due_jobs(kube, redis_server, tmp_path,  # noqa: F811
                                                                 queue_name):
    bench = Bench(kube, redis_server, tmp_path, "ttl: 1h\n", queue_name)
    worker = JobttlWorker([queue_name], connection=bench.redis, serializer=JSONSerializer, context=bench.ctx)
    queue = bench.ctx.schedule.queue
    job = queue.enqueue_in(datetime.timedelta(seconds=-1), "builtins.len", "x")
    assert job.id in ScheduledJobRegistry(queue=queue).get_job_ids()
    worker.work(burst=True, with_scheduler=True)  # RQ's own path: in burst, one look in this process
    assert isinstance(worker.scheduler, JobttlScheduler)
    assert job.get_status(refresh=True).value == "finished", "moved to the queue by the scheduler, then run"


def test_jobttls_scheduler_looks_several_times_a_second_and_stops_when_asked(redis_server, queue_name):
    """Each look is one heartbeat first: five within 3 s is faster than RQ's one a second."""
    redis = redis_server.client()
    scheduler = JobttlScheduler([queue_name], connection=redis, serializer=JSONSerializer)
    assert scheduler.acquire_locks()
    process = scheduler.start()  # RQ's own fork, as the worker starts it
    beats = set()

    def five_beats() -> bool:
        beat = redis.hget(scheduler.key, "last_heartbeat")
        if beat:
            beats.add(beat)
        return len(beats) >= 5

    try:
        wait_for(five_beats, timeout=3, interval=0.02, what="five heartbeats")
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.join(10)
    assert process.exitcode == 0


def test_rqs_own_per_job_lines_show_only_at_debug_and_its_warnings_always():
    assert rq_logging_level("INFO") == "WARNING"
    assert rq_logging_level("DEBUG") == "DEBUG"
    assert rq_logging_level("WARNING") == "WARNING"
    assert rq_logging_level("ERROR") == "ERROR"
