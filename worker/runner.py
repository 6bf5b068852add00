"""The worker process: RQ's SimpleWorker with RQ's scheduler, tuned to recover in seconds.

`SimpleWorker` runs each job in this process instead of forking one per job: a fork costs
~12 ms and throws away the Kubernetes client's connection pool, while a deletion is one GET
and one DELETE. RQ's scheduler (which moves due deletions onto the queue) runs in a child
process; one scheduler per queue holds the lock at a time.

RQ's own recovery paths, with its defaults, take minutes: a dead scheduler is restarted,
and a killed worker's scheduler lock taken over, only by the worker's maintenance, which
runs every 600 s between blocking dequeues of 405 s; an abandoned deletion is found
``job_timeout`` + 60 s after it started, at the next maintenance. `JobttlWorker` keeps RQ's
mechanisms and sets them so that (measured in the fault tests):

- another worker schedules within ~70 s of the scheduler's worker being killed (RQ's lock
  lasts 61 s; maintenance runs every `MAINTENANCE_INTERVAL`);
- a deletion abandoned by a killed worker runs again within ~2.5 min (``job_timeout`` 60 s
  + 60 s, then RQ's Retry);
- after a Redis outage the worker reconnects every second (its Redis client retries for
  ~20 s, see `jobttl.core.store.redisconn`), and a scheduler that died in the outage is restarted
  at the next maintenance.

It also refuses to work while its clock disagrees with the API server's or Redis's
(`jobttl.core.domain.decisions.clock`): it stops its scheduler and takes no deletions until they agree.

The scheduler process is *spawned* (a fresh interpreter), not forked as RQ does: the worker
already runs threads (the follower, the health server, the Events' sender, the Kubernetes
client's), and a fork copies every lock one of them holds at that instant into a child that has
no thread to release it. The child then blocks forever at the first such lock it takes:
`datetime.strptime`'s cache lock, which RQ's scheduler takes for every due job it reads
(`rq.utils.utcparse`), deadlocked one fork in five in a reproduction with one thread parsing
dates. Such a scheduler looks alive and moves nothing. Whatever the cause, the watchdog
(`jobttl.worker.watchdog`) looks at every maintenance whether due deletions still move, and
restarts the scheduler, or exits, saying so.

A Redis past its maxmemory refuses writes (OOM; `jobttl.core.store.capacity`), RQ's own among
them, and RQ's loop quits on any error but a timeout: `JobttlWorker` waits it out instead, at
start and at work (`redis-full`, `redis-still-full`, `redis-has-room`), and deletes what is booked
once Redis takes writes again.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer

from redis import Redis
from redis.exceptions import RedisError
from rq import SimpleWorker
from rq.defaults import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT
from rq.exceptions import StopRequested
from rq.timeouts import JobTimeoutException
from rq.worker import WorkerStatus
from rq.registry import ScheduledJobRegistry
from rq.scheduler import RQScheduler, run as run_rq_scheduler
from rq.scripts import release_lock
from rq.serializers import JSONSerializer
from rq.utils import now as utcnow

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.runtime import logs, probes
from jobttl.core.store import foreign, scripts, upgrade
from jobttl.core.store.capacity import Capacity, is_full_error
from jobttl.core.store.foreign import CheckedJob
from jobttl.core.runtime.config import ConfigError, Settings
from jobttl.core.services.install import CONFIGMAP
from jobttl.core.store.tasks import declared as declared_tasks
from jobttl.core.kube.client import PermanentApiError, TransientApiError
from jobttl.worker import kindcheck, tasks, watchdog
from jobttl.core.services.worker_graph import WorkerGraph
from jobttl.core.services.follow import Follower
from jobttl.core.services.sweep import sweep

log = logging.getLogger("jobttl.worker")

WORKER_TTL = 20  # RQ: its dequeue timeout is worker_ttl - 15 = 5 s, so maintenance checks come often
MAINTENANCE_INTERVAL = 5  # RQ: scheduler restart and takeover, abandoned-job cleanup
# RQ: its scheduler looks for due jobs every second, so a deletion waited up to a second for
# it before any worker could start. Five looks a second cost five ZRANGEBYSCOREs and
# heartbeats a second, and take most of that wait away.
SCHEDULER_INTERVAL = 0.2
SPAWN = multiprocessing.get_context("spawn")
SCHEDULER_STOP_GRACE = 2.0  # seconds a scheduler told to stop has before it is killed (it stops in 0.2 s)
EXIT_SCHEDULER_STALLED = 3  # the worker's exit status when its watchdog gave up on the scheduler
# A full Redis (OOM on a write): the worker waits this long, doubling up to the max, and tries again.
FULL_BACKOFF_FIRST = 1.0
FULL_BACKOFF_MAX = 30.0


HAND_BACK_AFTER = 4  # seconds a deletion under way has to finish once the worker is told to stop


class DeletionHandedBack(JobTimeoutException):
    """The worker is stopping: the deletion it was running is handed back, to run again (RQ's retry)."""


def _hand_back(signum, frame) -> None:
    raise DeletionHandedBack(
        f"the worker is stopping: this deletion did not finish within {HAND_BACK_AFTER} s "
        "and is handed back, to run again"
    )


def _run_spawned_scheduler(scheduler: JobttlScheduler, level: int, scheduler_level: int) -> None:
    """The scheduler process's body: the worker's logging, then RQ's own `run` (its start and stop lines)."""
    logs.configure(logging.getLevelName(level))
    scheduler.log.setLevel(scheduler_level)
    run_rq_scheduler(scheduler)


class JobttlScheduler(RQScheduler):
    """RQ's scheduler, looking for due deletions every `SCHEDULER_INTERVAL` seconds.

    RQ sleeps its `interval` (1 s) between looks, and also makes it the whole seconds its
    locks live beyond a minute, so it cannot be a fraction: this loop is RQ's own with a
    shorter sleep, and `interval` stays RQ's.
    """

    def start(self) -> multiprocessing.process.BaseProcess:
        # RQ forks here (`ForkProcess`); see the module's docstring for why jobttl spawns. The
        # child gets this object pickled (queue names, the connection's class and plain kwargs,
        # its name) and builds its own Redis connection and logging.
        self._status = self.Status.STARTED
        self._connection = None  # RQ: a connection cannot cross to the child
        self._process = None
        process = SPAWN.Process(
            target=_run_spawned_scheduler,
            name="Scheduler",
            args=(self, logging.getLogger().level, self.log.getEffectiveLevel()),
        )
        process.start()
        self._process = process
        return process

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_process": None, "_connection": None}

    def work(self) -> None:
        self._install_signal_handlers()
        self.register_birth()
        full = False
        while not self._stop_requested:
            try:
                if self.should_reacquire_locks:
                    self.acquire_locks()
                self.heartbeat()
                self.enqueue_scheduled_jobs()
            except RedisError as exc:
                # A full Redis refuses the move of a due job onto the queue: the job stays
                # scheduled, and is moved once Redis takes writes again (never dropped).
                if not is_full_error(exc):
                    raise
                if not full:
                    logs.record(log, "redis-full", level=logging.ERROR, during="scheduler", detail=str(exc))
                full = True
                time.sleep(FULL_BACKOFF_FIRST)
                continue
            full = False
            time.sleep(SCHEDULER_INTERVAL)
        self.stop()


class JobttlWorker(SimpleWorker):
    """SimpleWorker whose recovery paths run within seconds, and that waits out a wrong clock."""

    exponential_backoff_factor = 1.0  # RQ: reconnect to Redis every second...
    max_connection_wait_time = 1.0  # ...not after up to 60 s
    job_class = CheckedJob  # resolves jobttl's tasks only (jobttl.core.store.foreign)

    def __init__(self, *args, context: WorkerGraph, watch: watchdog.SchedulerWatch | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.context = context
        self.clock_problem: str | None = None
        self._maintained_at: float | None = None
        self.watch = watch or watchdog.SchedulerWatch()
        self._watched_process: object | None = None
        self.gave_up: watchdog.Verdict | None = None  # set when the watchdog stops the worker
        self._full_since: float | None = None  # Redis refused a write for want of memory (RedisFullBackoff)
        self._full_backoff = FULL_BACKOFF_FIRST

    # --- a full Redis: back off, never exit (jobttl.core.store.capacity) ---------------------------
    # RQ's loop quits on any error but a timeout; Redis past its maxmemory answers RQ's own writes
    # (the dequeue's LMOVE, the heartbeat, a job's status) with OOM. The worker waits instead,
    # longer each time up to FULL_BACKOFF_MAX, and goes on once Redis takes writes again: what is
    # booked is deleted, and each deletion frees memory.
    def _redis_full(self, exc: Exception, during: str) -> None:
        if self._full_since is None:
            self._full_since = time.monotonic()
            logs.record(
                log, "redis-full", level=logging.ERROR, during=during, detail=_full_detail(self.connection, exc)
            )
        else:
            logs.record(
                log,
                "redis-still-full",
                level=logging.WARNING,
                during=during,
                seconds=round(time.monotonic() - self._full_since),
                retryIn=self._full_backoff,
            )
        deadline = time.monotonic() + self._full_backoff
        while not self._stop_requested and time.monotonic() < deadline:
            time.sleep(0.2)
        self._full_backoff = min(self._full_backoff * 2, FULL_BACKOFF_MAX)

    def _redis_took_writes(self) -> None:
        if self._full_since is not None:
            logs.record(
                log,
                "redis-has-room",
                seconds=round(time.monotonic() - self._full_since),
                detail="Redis takes writes again: deletions go on",
            )
            self._full_since, self._full_backoff = None, FULL_BACKOFF_FIRST

    @contextmanager
    def _waiting_out_full_redis(self, during: str) -> Iterator[None]:
        """The rule for RQ's writes, said once: a full Redis refusing one ends the block, is waited
        out (`_redis_full`) and the code after the block goes on (a method whose `return` it
        stopped returns None; a loop around the block tries again); any other error is raised."""
        try:
            yield
        except RedisError as exc:
            if not is_full_error(exc):
                raise
            self._redis_full(exc, during)

    def dequeue_job_and_maintain_ttl(self, timeout, max_idle_time=None):
        while True:
            with self._waiting_out_full_redis("dequeue"):
                result = self._dequeue_when_clocks_agree(timeout, max_idle_time)
                break
            if self._stop_requested:
                raise StopRequested()
        self._redis_took_writes()
        return result

    def execute_job(self, job, queue):
        # On a full Redis the job stays where RQ left it (its started registry or its queue): RQ's
        # cleanup finds it abandoned and runs it again, as after a killed worker.
        with self._waiting_out_full_redis(f"job {job.id}"):
            return super().execute_job(job, queue)

    def register_birth(self, *args, **kwargs):
        # RQ registers the worker (a write) before its loop: a full Redis is waited out here too.
        while True:
            with self._waiting_out_full_redis("start"):
                return super().register_birth(*args, **kwargs)

    def set_state(self, *args, **kwargs):
        with self._waiting_out_full_redis("state"):
            return super().set_state(*args, **kwargs)

    def heartbeat(self, *args, **kwargs):
        with self._waiting_out_full_redis("heartbeat"):
            return super().heartbeat(*args, **kwargs)

    def _start_scheduler(
        self,
        burst: bool = False,
        logging_level: str | None = "INFO",
        date_format: str = DEFAULT_LOGGING_DATE_FORMAT,
        log_format: str = DEFAULT_LOGGING_FORMAT,
    ) -> None:
        # RQ's own, with jobttl's scheduler class (RQ has no setting for it). RQ's maintenance
        # restarts a dead scheduler through this object, so the class holds from then on. Its
        # few lines (which worker holds the lock) at jobttl's level, not RQ's (`rq_logging_level`).
        self.scheduler = JobttlScheduler(
            self.queues,
            connection=self.connection,
            serializer=self.serializer,
            logging_level=self.context.settings.log_level,
            date_format=date_format,
            log_format=log_format,
        )
        with self._waiting_out_full_redis("scheduler"):
            self.scheduler.acquire_locks()
        if not self.scheduler.acquired_locks:
            # Another worker's scheduler holds the queue, or a full Redis refused the lock (this new
            # scheduler then holds none: RQ sets its locks once it has asked for them all).
            # Maintenance asks again.
            return
        if not burst:
            self.scheduler.start()
            return
        try:
            self.scheduler.register_birth()
            self.scheduler.enqueue_scheduled_jobs()
        finally:
            self.scheduler.release_locks()
            self.scheduler.register_death()

    def perform_job(self, job, queue, execution) -> bool:
        # Before RQ resolves anything the job names: a job jobttl did not book (a Redis writer's
        # `subprocess.check_output`) is failed here, never imported nor retried.
        reason = foreign.refusal(job, declared_tasks())
        if reason is None:
            return super().perform_job(job, queue, execution)
        foreign.report(job, reason, self.context.metrics)
        job.retries_left = None  # its retries are the forger's too
        self.prepare_job_execution(job, remove_from_intermediate_queue=len(self.queues) == 1)
        job.ended_at = utcnow()
        self.handle_job_failure(
            job,
            queue,
            started_job_registry=queue.started_job_registry,
            exc_string=f"ForeignJob: not run, {reason}",
            execution=execution,
        )
        return False

    def _shutdown(self) -> None:
        # RQ, asked to stop while idle, raises StopRequested from the signal handler, wherever the
        # main thread is, and sets no flag. Maintenance calls the API server and Redis under
        # `except Exception` (a clock measure that fails is waited out, not fatal): a signal
        # landing there was swallowed and the worker ran on, deaf to that SIGINT or SIGTERM. The
        # flag keeps the request whatever catches the exception; RQ's loop reads it each turn.
        self._stop_requested = True
        if self.get_state() == WorkerStatus.BUSY:
            self._hand_back_later()
        super()._shutdown()

    def _hand_back_later(self) -> None:
        """A deletion under way has `HAND_BACK_AFTER` seconds to finish; then it is interrupted as
        a job timeout is, and handed back: the run releases its claim (an interrupted DELETE is
        recovered by the next run from its intent), RQ books its retry, nothing is lost."""
        armed = signal.alarm(0)  # RQ's job timeout, SIGALRM (the job runs in this process)
        if not armed:
            return  # no job timer: RQ's handler is not there to raise for us either
        signal.signal(signal.SIGALRM, _hand_back)
        signal.alarm(min(armed, HAND_BACK_AFTER))

    @property
    def should_run_maintenance_tasks(self) -> bool:
        # RQ compares wall-clock times here. Once a clock that ran ahead is stepped back (as NTP
        # does), "now - last run" stays negative for as long as it ran ahead, and maintenance,
        # which re-measures the clocks, restarts the scheduler and finds abandoned jobs, would
        # not run again until then. A monotonic clock cannot step.
        return self._maintained_at is None or time.monotonic() - self._maintained_at > self.maintenance_interval

    def run_maintenance_tasks(self) -> None:
        with self._waiting_out_full_redis("maintenance"):
            self._maintain()

    def _maintain(self) -> None:
        self._maintained_at = time.monotonic()
        self.clock_problem = self._measure_clocks()
        if self.clock_problem:
            # A scheduler on a wrong clock releases deletions early (or never): hand the lock over.
            # RQ's registry cleanup judges "abandoned" and books retries by this clock too, so
            # it waits as well; the other workers do it.
            if (
                self.scheduler is not None
                and self.scheduler._process is not None
                and self.scheduler._process.is_alive()
            ):
                self.stop_scheduler()
                logs.record(log, "scheduler-stopped", level=logging.WARNING, detail=self.clock_problem)
            self.last_cleaned_at = utcnow()  # RQ: maintenance was "done", so it is not retried at once
            return
        if not self._stop_requested:
            self.watch_scheduler()
        if not self._stop_requested:
            super().run_maintenance_tasks()
            sweep(self.context)
        if self._stop_requested:
            # RQ's idle loop (`dequeue_job_and_maintain_ttl`) reads no flag: it ends on this
            # exception only, which a signal during maintenance raised and something swallowed.
            raise StopRequested()

    def watch_scheduler(self) -> watchdog.Verdict | None:
        """Are due deletions still moving? If not: restart the scheduler, or stop this worker
        (it then exits non-zero, `run`), saying so in a log line and a metric."""
        if self.scheduler is None:
            return None  # burst, or no scheduler asked for
        now = time.monotonic()
        if self.scheduler._process is not self._watched_process:  # started since the last look (RQ or us)
            self._watched_process = self.scheduler._process
            self.watch.started(now)
        try:
            if Capacity.read(self.connection).refusing:
                # A full Redis refuses the scheduler's writes (its heartbeat, the move of a due job):
                # no stall of its own, and restarting it (or exiting) would not help. Watched anew after.
                self.watch.started(now)
                return None
            seen = self._observe_scheduler()
        except RedisError:
            return None  # Redis is down: RQ's loop waits for it, and the watch looks again after
        verdict = self.watch.judge(seen, now)
        if verdict is None:
            return None
        process = self.scheduler._process
        self.context.metrics.scheduler_stalls.labels(verdict.reason, verdict.action).inc()
        logs.record(
            log,
            "scheduler-stalled",
            level=logging.ERROR,
            reason=verdict.reason,
            action=verdict.action,
            detail=verdict.detail,
            scheduler=self.scheduler.name,
            pid=process.pid if process is not None else None,
        )
        self.stop_scheduler()
        release_lock(self.connection, self.scheduler.get_locking_key(self.queue_names()[0]), self.scheduler.name)
        if verdict.action == watchdog.EXIT:
            self.gave_up = verdict
            self._stop_requested = True
        else:
            self.scheduler.acquire_locks(auto_start=True)
        return verdict

    def _observe_scheduler(self) -> watchdog.Observation:
        process = self.scheduler._process
        queue = self.queue_names()[0]
        registry = ScheduledJobRegistry(queue, connection=self.connection, serializer=self.serializer)
        seconds, micros = self.connection.time()
        overdue = self.connection.zrangebyscore(
            registry.key, "-inf", seconds + micros / 1e6 - self.watch.bound, start=0, num=1
        )
        holder = self.connection.get(self.scheduler.get_locking_key(queue))
        heartbeat = self.connection.hget(self.scheduler.key, "last_heartbeat")
        return watchdog.Observation(
            started=process is not None,
            alive=process is not None and process.is_alive(),
            heartbeat=heartbeat.decode() if heartbeat else None,
            lock_holder=holder.decode() if holder else None,
            name=self.scheduler.name,
            oldest_overdue=overdue[0].decode() if overdue else None,
        )

    def stop_scheduler(self) -> None:
        # RQ's sends SIGTERM and joins without a bound: a scheduler that hangs would hold this
        # worker's shutdown (and the pod's, until SIGKILL). It has `SCHEDULER_STOP_GRACE`, then is killed.
        process = self.scheduler._process if self.scheduler is not None else None
        if process is None or process.pid is None:
            return
        if process.is_alive():
            process.terminate()
        process.join(SCHEDULER_STOP_GRACE)
        if process.is_alive():
            logs.record(
                log,
                "scheduler-killed",
                level=logging.WARNING,
                pid=process.pid,
                detail=f"the scheduler process did not stop within {SCHEDULER_STOP_GRACE:.0f} s of SIGTERM",
            )
            process.kill()
            process.join()

    def _dequeue_when_clocks_agree(self, timeout, max_idle_time=None):
        while self.clock_problem and not self._stop_requested:
            # Take no deletions while the clocks disagree; keep the worker registered and measuring.
            self.heartbeat()
            time.sleep(1)
            if self.should_run_maintenance_tasks:
                self.run_maintenance_tasks()
        if self._stop_requested:
            raise StopRequested()  # RQ's work loop ends on it
        return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)

    def _measure_clocks(self) -> str | None:
        try:
            problem = self.context.measure_clocks(self.name)
        except Exception as exc:  # noqa: BLE001 - Redis down: RQ's own loop handles that
            logs.record(log, "clock-unmeasured", level=logging.WARNING, detail=str(exc))
            return self.clock_problem
        if problem and problem != self.clock_problem:
            logs.record(log, "clock-skew", level=logging.ERROR, detail=problem)
        elif self.clock_problem and not problem:
            logs.record(log, "clock-agrees", detail="the clocks agree again: deletions resume")
        return problem


def run(settings: Settings, burst: bool = False) -> None:
    ctx = tasks.configure(settings)  # fail fast: the Kubernetes config is loaded now
    # The kinds' declared paths against their CRDs: a declaration naming a field its CRD does not
    # have stops the worker here, before it deletes anything (jobttl.worker.kindcheck).
    kindcheck.verify_at_start(ctx.kube, ctx.kinds.kinds)
    ctx.redis.ping()
    health = serve_health(ctx, settings.worker_metrics_port) if settings.worker_metrics_port else None
    # A full Redis at start is waited out, as at work: the worker never exits on it.
    _while_redis_is_full(lambda: upgrade.ensure(ctx.redis, ctx.audit.tombstone_seconds), "start")
    scripts.load(ctx.redis)
    worker = JobttlWorker(
        [ctx.schedule.queue.name],
        connection=ctx.redis,
        serializer=JSONSerializer,
        worker_ttl=WORKER_TTL,
        maintenance_interval=MAINTENANCE_INTERVAL,
        log_job_description=False,
        context=ctx,
    )
    if not _while_redis_is_full(lambda: _wait_for_agreeing_clocks(ctx, worker.name, burst), "start"):
        return
    if not _while_redis_is_full(lambda: _establish_install(ctx, burst), "start"):
        return
    follower = Follower(ctx)
    follower.start()
    logs.record(log, "worker-start", queue=settings.queue_name, burst=burst, worker=worker.name)
    if settings.resync_interval:
        # Events may have been missed while no worker ran: start from the cluster's truth.
        # Several workers starting at once (a rollout) ask for one (JOBTTL_RESYNC_MIN_INTERVAL).
        _while_redis_is_full(lambda: ctx.schedule.request_resync_soon("worker-start"), "start")
    try:
        worker.work(burst=burst, with_scheduler=True, logging_level=rq_logging_level(settings.log_level))
    finally:
        # Within the 10 s jobttl promises from SIGTERM to exit: the scheduler's stop
        # (`SCHEDULER_STOP_GRACE`), a deletion's (`HAND_BACK_AFTER`), then these. A follow-up the
        # follower is making is made again by the next worker (it only re-reads).
        follower.stop(timeout=1.0)
        ctx.events.flush(timeout=2.0)
        if health is not None:
            health.shutdown()
        logs.record(
            log,
            "worker-stop",
            queue=settings.queue_name,
            worker=worker.name,
            **({"reason": f"scheduler-{worker.gave_up.reason}"} if worker.gave_up else {}),
        )
    if worker.gave_up:
        # Restarting the scheduler did not help: a new process (Kubernetes restarts the pod) might.
        raise SystemExit(EXIT_SCHEDULER_STALLED)


def _while_redis_is_full(step, during: str):
    """Run `step`, waiting while Redis refuses its writes for want of memory (logged as at work)."""
    wait, since = FULL_BACKOFF_FIRST, None
    while True:
        try:
            return step()
        except RedisError as exc:
            if not is_full_error(exc):
                raise
            if since is None:
                since = time.monotonic()
                logs.record(log, "redis-full", level=logging.ERROR, during=during, detail=str(exc))
            else:
                logs.record(
                    log,
                    "redis-still-full",
                    level=logging.WARNING,
                    during=during,
                    seconds=round(time.monotonic() - since),
                    retryIn=wait,
                )
            time.sleep(wait)
            wait = min(wait * 2, FULL_BACKOFF_MAX)


def _full_detail(redis: Redis, exc: Exception) -> str:
    try:
        return f"{Capacity.read(redis).describe()} ({exc})"
    except RedisError:
        return str(exc)


def rq_logging_level(level: str) -> str:
    """RQ's level, given jobttl's: RQ's worker writes four INFO lines for every job (its id
    dequeued, "Job OK", "Result is kept for N seconds", "Successfully completed"), saying again
    what jobttl's own outcome line says once, with less. They, and RQ's lifecycle lines
    ("Listening on", "cleaning registries" every few seconds, "warm shut down requested"), show
    at DEBUG; jobttl logs its own worker-start and worker-stop. RQ's warnings and errors (a job
    that raised, with its traceback) always show."""
    return level if logging.getLevelNamesMapping()[level] >= logging.WARNING or level == "DEBUG" else "WARNING"


def _wait_for_agreeing_clocks(ctx: WorkerGraph, name: str, burst: bool) -> bool:
    """Before joining (and maybe holding the scheduler lock), make sure this host's clock is right."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stop.is_set():
            problem = ctx.measure_clocks(name)
            if not problem:
                return True
            logs.record(log, "clock-skew", level=logging.ERROR, detail=problem)
            if burst:
                return False
            stop.wait(5)
        return False
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _establish_install(ctx: WorkerGraph, burst: bool) -> bool:
    """Read (or, on a first install, write) the install record before any deletion runs: the
    first-run review must be in force before the first due deletion reaches this worker. An API
    server that does not answer is waited for; one that refuses (RBAC) stops the worker."""
    for attempt in range(1, 31):
        try:
            ctx.install.establish(ctx.clock.now())
            return True
        except (PermanentApiError, ValueError) as exc:
            # RBAC refused, no such namespace, a record edited into nonsense: a human must act, and
            # nothing may be deleted on a guess meanwhile.
            raise ConfigError(
                f"the install record (ConfigMap {ctx.install.namespace}/{CONFIGMAP}, JOBTTL_NAMESPACE): {exc}"
            ) from None
        except TransientApiError as exc:
            logs.record(log, "install-record-unavailable", level=logging.WARNING, attempt=attempt, detail=str(exc))
            if burst:
                return False
            time.sleep(2)
    raise TransientApiError("the install record (ConfigMap jobttl-install) could not be read for a minute")


def serve_health(ctx: WorkerGraph, port: int) -> ThreadingHTTPServer:
    """/metrics, /healthz and /readyz (not ready while the clocks disagree) on the worker's port."""

    def answer(path: str) -> probes.Answer:
        if path.startswith("/metrics"):
            return probes.metrics(ctx.metrics.registry)
        if path.startswith("/healthz"):
            return probes.OK
        if path.startswith("/readyz"):
            problem = ctx.clock.problem()
            body = {"status": "ready" if not problem else "clock-skew", **ctx.clock.as_dict()}
            return probes.Answer(503 if problem else 200, jsoncodec.dumps(body))
        return probes.NOT_FOUND

    return probes.serve(answer, port, "worker-health")
