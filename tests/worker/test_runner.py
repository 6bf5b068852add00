"""The worker process's tuning of RQ (jobttl.worker.runner), on the real RQ and Redis."""

import datetime
import os
import signal

from rq.registry import ScheduledJobRegistry
from rq.serializers import JSONSerializer

from jobttl.worker import tasks
from jobttl.worker.runner import JobttlScheduler, JobttlWorker, rq_logging_level
from tests.services import wait_for
from tests.worker.bench import Bench, kube  # noqa: F401 - the module's emulator fixture


def test_the_worker_runs_jobttls_scheduler_and_it_moves_due_jobs(kube, redis_server, tmp_path,  # noqa: F811
                                                                 queue_name, monkeypatch):
    bench = Bench(kube, redis_server, tmp_path, "ttl: 1h\n", queue_name)
    monkeypatch.setattr(tasks, "_context", bench.ctx)  # the task runs in this process, on the bench's context
    worker = JobttlWorker([queue_name], connection=bench.redis, serializer=JSONSerializer, context=bench.ctx)
    queue = bench.ctx.schedule.queue
    # One of jobttl's tasks (the worker runs no other: tests/worker/test_foreign_jobs.py), with nothing to do.
    job = queue.enqueue_in(datetime.timedelta(seconds=-1), "jobttl.worker.tasks.warn_upcoming", "no-such-uid", 0)
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


# --- the RQ internals jobttl overrides or copies --------------------------------------------------

def test_the_rq_internals_the_worker_overrides_keep_their_shape():
    """JobttlWorker replaces RQ's private `_start_scheduler` and JobttlScheduler copies RQ's
    scheduler loop with a shorter sleep; both read RQ's private state. A release that changes
    these fails here, naming what to re-read, rather than changing how deletions are released."""
    import inspect
    from functools import partial

    import rq
    from rq.scheduler import RQScheduler
    from rq.worker import Worker

    from tests.internals import fingerprint, parameters, recheck, source

    failed = partial(recheck, "RQ", rq.__version__)
    # The copies: RQ's own code, as it was when jobttl's was written from it (rq 3.0.0).
    assert fingerprint(RQScheduler, "work") == "34b80e05ebc5bc8f", \
        failed("RQScheduler.work", where="JobttlScheduler.work in worker/runner.py, a copy of it")
    assert fingerprint(Worker, "_start_scheduler") == "a13b7b6ec099d91d", \
        failed("Worker._start_scheduler", where="JobttlWorker._start_scheduler in worker/runner.py, a copy of it")
    where = "JobttlWorker in worker/runner.py"
    assert parameters(Worker, "_start_scheduler") == ["self", "burst", "logging_level", "date_format", "log_format"], \
        failed("Worker._start_scheduler's arguments", where=where)
    assert "self._start_scheduler(burst, logging_level, date_format, log_format)" in source(Worker, "work"), \
        failed("how Worker.work starts its scheduler", where=where)
    assert parameters(Worker, "dequeue_job_and_maintain_ttl") == ["self", "timeout", "max_idle_time"], \
        failed("Worker.dequeue_job_and_maintain_ttl's arguments", where=where)
    assert isinstance(inspect.getattr_static(Worker, "should_run_maintenance_tasks"), property), \
        failed("Worker.should_run_maintenance_tasks (no longer a property)", where=where)
    assert "self.scheduler._process" in source(Worker, "run_maintenance_tasks"), \
        failed("how Worker.run_maintenance_tasks finds a dead scheduler", where=where)
    assert "self.last_cleaned_at = " in source(Worker, "clean_registries"), \
        failed("where the worker records its last maintenance (last_cleaned_at)", where=where)
    # The foreign-job guard (jobttl.core.store.foreign): the worker's perform_job checks a job first and
    # fails it through RQ's own failure path; CheckedJob replaces how a Job resolves what it names.
    assert parameters(Worker, "perform_job") == ["self", "job", "queue", "execution"], \
        failed("Worker.perform_job's arguments", where=where)
    assert parameters(Worker, "handle_job_failure") == ["self", "job", "queue", "started_job_registry", "exc_string",
                                                        "execution"], \
        failed("Worker.handle_job_failure's arguments", where=where)
    assert "self.perform_job(job, queue, execution)" in source(rq.worker.SimpleWorker, "execute_job"), \
        failed("how SimpleWorker runs a job", where=where)
    from rq.job import Job
    for name in ("func", "success_callback", "failure_callback", "stopped_callback"):
        assert isinstance(inspect.getattr_static(Job, name), property), \
            failed(f"Job.{name} (no longer a property)", where="CheckedJob in core/store/foreign.py")
    for name in ("_success_callback_name", "_failure_callback_name", "_stopped_callback_name", "webhooks"):
        assert name in source(Job, "__init__"), \
            failed(f"Job's {name}", where="refusal in core/store/foreign.py")
    for setting in ("exponential_backoff_factor", "max_connection_wait_time", "job_class"):
        assert hasattr(Worker, setting), failed(f"the worker setting {setting}", where=where)
