"""The worker process's tuning of RQ (jobttl.worker.runner), on the real RQ and Redis."""

import datetime
import os
import signal
import threading

from rq.registry import ScheduledJobRegistry
from rq.serializers import JSONSerializer
from rq.utils import utcparse

from jobttl.worker import tasks
from jobttl.worker import watchdog
from jobttl.worker.runner import JobttlScheduler, JobttlWorker, rq_logging_level
from tests.services import wait_for
from tests.worker.bench import Bench, kube  # noqa: F401 - the module's emulator fixture


def test_the_worker_runs_jobttls_scheduler_and_it_moves_due_jobs(kube, redis_server, tmp_path, queue_name, monkeypatch):
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
    """Each look is one heartbeat first: two heartbeats stamped less than a second apart are
    faster than RQ's one a second (the stamps are the scheduler's own, whatever the load)."""
    redis = redis_server.client()
    scheduler = JobttlScheduler([queue_name], connection=redis, serializer=JSONSerializer)
    assert scheduler.acquire_locks()
    process = scheduler.start()  # as the worker starts it: a spawned process
    beats = set()

    def five_beats() -> bool:
        beat = redis.hget(scheduler.key, "last_heartbeat")
        if beat:
            beats.add(utcparse(beat.decode()))
        return len(beats) >= 5

    try:
        wait_for(five_beats, timeout=60, interval=0.02, what="five heartbeats")
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.join(30)
    assert process.exitcode == 0
    stamps = sorted(beats)
    assert min(b - a for a, b in zip(stamps, stamps[1:])) < datetime.timedelta(seconds=0.9), stamps


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
    assert fingerprint(RQScheduler, "work") == "34b80e05ebc5bc8f", failed(
        "RQScheduler.work", where="JobttlScheduler.work in worker/runner.py, a copy of it"
    )
    assert fingerprint(Worker, "_start_scheduler") == "a13b7b6ec099d91d", failed(
        "Worker._start_scheduler", where="JobttlWorker._start_scheduler in worker/runner.py, a copy of it"
    )
    where = "JobttlWorker in worker/runner.py"
    assert parameters(Worker, "_start_scheduler") == ["self", "burst", "logging_level", "date_format", "log_format"], (
        failed("Worker._start_scheduler's arguments", where=where)
    )
    assert "self._start_scheduler(burst, logging_level, date_format, log_format)" in source(Worker, "work"), failed(
        "how Worker.work starts its scheduler", where=where
    )
    assert parameters(Worker, "dequeue_job_and_maintain_ttl") == ["self", "timeout", "max_idle_time"], failed(
        "Worker.dequeue_job_and_maintain_ttl's arguments", where=where
    )
    assert isinstance(inspect.getattr_static(Worker, "should_run_maintenance_tasks"), property), failed(
        "Worker.should_run_maintenance_tasks (no longer a property)", where=where
    )
    assert "self.scheduler._process" in source(Worker, "run_maintenance_tasks"), failed(
        "how Worker.run_maintenance_tasks finds a dead scheduler", where=where
    )
    assert "self.last_cleaned_at = " in source(Worker, "clean_registries"), failed(
        "where the worker records its last maintenance (last_cleaned_at)", where=where
    )
    # The foreign-job guard (jobttl.core.store.foreign): the worker's perform_job checks a job first and
    # fails it through RQ's own failure path; CheckedJob replaces how a Job resolves what it names.
    assert parameters(Worker, "perform_job") == ["self", "job", "queue", "execution"], failed(
        "Worker.perform_job's arguments", where=where
    )
    assert parameters(Worker, "handle_job_failure") == [
        "self",
        "job",
        "queue",
        "started_job_registry",
        "exc_string",
        "execution",
    ], failed("Worker.handle_job_failure's arguments", where=where)
    assert "self.perform_job(job, queue, execution)" in source(rq.worker.SimpleWorker, "execute_job"), failed(
        "how SimpleWorker runs a job", where=where
    )
    from rq.job import Job

    for name in ("func", "success_callback", "failure_callback", "stopped_callback"):
        assert isinstance(inspect.getattr_static(Job, name), property), failed(
            f"Job.{name} (no longer a property)", where="CheckedJob in core/store/foreign.py"
        )
    for name in ("_success_callback_name", "_failure_callback_name", "_stopped_callback_name", "webhooks"):
        assert name in source(Job, "__init__"), failed(f"Job's {name}", where="refusal in core/store/foreign.py")
    # The spawned scheduler: RQ's `run(scheduler)` is its body, `start` its only way to a process,
    # and the worker stops it through `stop_scheduler` (JobttlScheduler.start, JobttlWorker.stop_scheduler).
    import rq.scheduler

    assert list(inspect.signature(rq.scheduler.run).parameters) == ["scheduler"], failed(
        "rq.scheduler.run's arguments", where="_run_spawned_scheduler in worker/runner.py"
    )
    assert "ForkProcess(target=run, args=(self,)" in source(RQScheduler, "start"), failed(
        "how RQScheduler.start makes its process", where="JobttlScheduler.start in worker/runner.py"
    )
    assert "self.stop_scheduler()" in source(Worker, "teardown"), failed(
        "how the worker stops its scheduler at shutdown", where="JobttlWorker.stop_scheduler in worker/runner.py"
    )
    for setting in ("exponential_backoff_factor", "max_connection_wait_time", "job_class"):
        assert hasattr(Worker, setting), failed(f"the worker setting {setting}", where=where)


# --- the scheduler process: spawned, and watched ------------------------------------------------


def _due_job(queue):
    return queue.enqueue_in(datetime.timedelta(seconds=-1), "builtins.len", "x")


def test_a_lock_held_in_the_worker_when_its_scheduler_starts_does_not_stall_the_scheduler(
    kube, redis_server, tmp_path, queue_name
):
    """Issue 27's silent stall. The worker runs threads (the follower, the health server, the
    Events' sender); RQ forked its scheduler from it, and a fork copies every lock another thread
    holds at that instant into a child with no thread to release it. RQ's scheduler takes
    `datetime.strptime`'s cache lock for every due job it reads (rq.utils.utcparse): with a thread
    inside strptime at the fork, it blocked there for ever, alive, moving nothing. Spawned, it
    starts with no lock held."""
    import _strptime

    bench = Bench(kube, redis_server, tmp_path, "ttl: 1h\n", queue_name)
    worker = JobttlWorker([queue_name], connection=bench.redis, serializer=JSONSerializer, context=bench.ctx)
    queue = bench.ctx.schedule.queue
    job = _due_job(queue)
    held, release = threading.Event(), threading.Event()

    def parse_dates_meanwhile():
        with _strptime._cache_lock:  # where a thread parsing a date is, most of its time
            held.set()
            release.wait()

    thread = threading.Thread(target=parse_dates_meanwhile)
    thread.start()
    held.wait()
    try:
        worker._start_scheduler()
    finally:
        release.set()
        thread.join()
    try:
        wait_for(lambda: job.id in queue.get_job_ids(), timeout=60, what="the scheduler to move the due job")
    finally:
        worker.stop_scheduler()


def _stalled_lines(caplog) -> list[dict]:
    return [vars(r) for r in caplog.records if getattr(r, "event", None) == "scheduler-stalled"]


def test_a_scheduler_that_hangs_is_found_and_restarted_and_due_deletions_move_again(
    kube, redis_server, tmp_path, queue_name, caplog
):
    bench = Bench(kube, redis_server, tmp_path, "ttl: 1h\n", queue_name)
    worker = JobttlWorker(
        [queue_name],
        connection=bench.redis,
        serializer=JSONSerializer,
        context=bench.ctx,
        watch=watchdog.SchedulerWatch(bound=1.0),
    )
    queue = bench.ctx.schedule.queue
    worker._start_scheduler()
    hung = worker.scheduler._process
    try:
        wait_for(
            lambda: bench.redis.hget(worker.scheduler.key, "last_heartbeat"),
            timeout=60,
            what="the scheduler's first heartbeat",
        )
        os.kill(hung.pid, signal.SIGSTOP)  # alive, holding the lock, moving nothing: the stall's look
        job = _due_job(queue)
        verdict = wait_for(worker.watch_scheduler, timeout=60, what="the watchdog to find the stall")
        assert (verdict.reason, verdict.action) == (watchdog.STUCK, watchdog.RESTART)
        assert not hung.is_alive(), "the hung scheduler is gone (killed when SIGTERM could not stop it)"
        assert worker.scheduler._process is not hung and worker.scheduler._process.is_alive()
        wait_for(lambda: job.id in queue.get_job_ids(), timeout=60, what="the new scheduler to move the due job")
    finally:
        if hung.is_alive():
            os.kill(hung.pid, signal.SIGCONT)
        worker.stop_scheduler()
    assert bench.ctx.metrics.scheduler_stalls.labels("stuck", "restart")._value.get() == 1
    [line] = _stalled_lines(caplog)
    assert (line["reason"], line["action"], line["pid"]) == ("stuck", "restart", hung.pid)


def test_a_dead_scheduler_is_said_and_restarted_and_repeated_stalls_stop_the_worker(
    kube, redis_server, tmp_path, queue_name, caplog
):
    bench = Bench(kube, redis_server, tmp_path, "ttl: 1h\n", queue_name)
    worker = JobttlWorker(
        [queue_name],
        connection=bench.redis,
        serializer=JSONSerializer,
        context=bench.ctx,
        watch=watchdog.SchedulerWatch(bound=1.0, max_restarts=1),
    )
    worker._start_scheduler()
    try:
        for action in (watchdog.RESTART, watchdog.EXIT):
            process = worker.scheduler._process
            worker.watch_scheduler()  # the watch takes note of the new process
            process.kill()
            process.join(30)
            verdict = wait_for(worker.watch_scheduler, timeout=60, what="the watchdog to find the dead scheduler")
            assert (verdict.reason, verdict.action) == (watchdog.DEAD, action)
    finally:
        worker.stop_scheduler()
    assert worker.gave_up is not None and worker._stop_requested, "the worker stops, and `run` exits non-zero"
    assert not worker.scheduler._process.is_alive()
    assert bench.redis.get(worker.scheduler.get_locking_key(queue_name)) is None, "its lock is left to others"
    assert [(line["reason"], line["action"]) for line in _stalled_lines(caplog)] == [
        ("dead", "restart"),
        ("dead", "exit"),
    ]
