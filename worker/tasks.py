"""The RQ tasks, thin entry points: delete one job when due, announce a deletion, resync.

They are declared as the distribution's `jobttl.tasks` entry points (pyproject.toml): the store
books RQ jobs under those names (jobttl.core.store.tasks) without importing this module. A
booked job holds the name for as long as it is pending: a function renamed here keeps its old
name as an alias (RQ imports the name it stored), until no pending job can hold it.

Each builds nothing itself: the process's `WorkerGraph` (one API connection pool) comes
from `configure`, and the work from `jobttl.core.services.deletion` and `jobttl.core.services.resync`.
Every error a deletion raises ends in `_failed`, the one place that decides how RQ must
react (retry with backoff, or fail for good), and records it.
"""

from __future__ import annotations

import logging
import time

from rq import get_current_job
from rq.job import Job

from jobttl.core.domain.wire import shapes
from jobttl.core.runtime.config import Settings
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.kube.client import Conflict, PermanentApiError, TransientApiError, Undecodable
from jobttl.core.domain.decisions.plan import PODS_STAGE
from jobttl.core.services import archiving
from jobttl.core.services import resync as resync_run
from jobttl.core.services.archiving import ArchiveFailed
from jobttl.core.services.worker_graph import WorkerGraph
from jobttl.core.services.deletion import Deletion, Target, target_of
from jobttl.core.services.events import announce

log = logging.getLogger("jobttl.worker")

_context: WorkerGraph | None = None


def configure(settings: Settings, notices: bool = True) -> WorkerGraph:
    """Build the process's one context (and so its one API connection pool). `notices`: whether
    this process posts the DeletionScheduled outbox (a worker does; a one-off `jobttl resync`
    leaves it to the workers, as it may exit mid-POST)."""
    global _context
    _context = WorkerGraph.from_settings(settings, notices=notices)
    return _context


def context() -> WorkerGraph:
    """The process's context; a worker started without `jobttl worker` reads the environment."""
    return _context if _context is not None else configure(Settings.from_env())


def delete_if_expired(member: str | dict, due: int) -> str:
    """Entry point for RQ. Returns the outcome, which RQ stores as the job's result.

    `member` is the schedule's member (a UID, or ``pods:<uid>``); jobttl 0.1 booked its
    jobs with the job's identity as a dict instead, which is still accepted.
    """
    ctx = context()
    job = get_current_job()
    target = target_of(job, member, due)
    if target is None:
        return "skipped:no-record"  # an RQ job jobttl did not book (or whose record is gone)
    deletion = Deletion(ctx, job)
    try:
        return deletion.run(target)
    except Exception as exc:
        if ctx.clock.problem() and not isinstance(exc, (PermanentApiError, Undecodable)):
            # RQ would schedule the retry by this host's clock, which is wrong: weeks late, or
            # at once. Leave it pending instead; the sweep books it again on a sound clock.
            return deletion.refuse(target, "clock-skew", f"{ctx.clock.problem()} (after: {exc})")
        _failed(ctx, job, target, exc)
        raise


def _failed(ctx: WorkerGraph, job: Job | None, target: Target, exc: Exception) -> None:
    """The one handler: how RQ must react to `exc`, recorded, and a Warning Event when it gives up."""
    ref = target.ref
    if isinstance(exc, (PermanentApiError, Undecodable)) or getattr(exc, "permanent", False):
        # Retrying a 403 only hides it: fail now, with the message saying what to grant.
        # An object no parser can read will not become readable either.
        if job is not None:
            job.retries_left = 0
            ctx.schedule.mark_permanent_failure(job)  # reconciles leave it failed until an operator retries
        event, level, failure, retries_left = "failed", logging.ERROR, "permanent", 0
    else:
        retries_left = job.retries_left if job is not None else 0
        event, level = ("retrying", logging.WARNING) if retries_left else ("failed", logging.ERROR)
        failure = {TransientApiError: "transient", Conflict: "conflict", ArchiveFailed: "archive-failed"}.get(
            type(exc), "error"
        )
    pods = target.stage == PODS_STAGE
    ctx.audit.record(
        event,
        ref,
        level,
        logger=log,
        by="worker",
        due=target.due,
        stage=target.recorded_stage,
        error=shapes.describe(exc),
        failure=failure,
        retriesLeft=retries_left or 0,
        jobId=job.id if job else None,
    )
    if not retries_left:
        if pods:
            ctx.events.record(
                ref,
                "FailedDeletePods",
                f"jobttl could not delete the pods of {ref.kind} {ref.name}: {shapes.describe(exc)}",
                warning=True,
            )
        else:
            ctx.events.record(
                ref,
                "FailedDeleteJob",
                f"jobttl could not delete {ref.kind} {ref.name}: {shapes.describe(exc)}",
                warning=True,
            )


def warn_upcoming(uid: str | dict, due: int) -> str:
    """Entry point for RQ: announce a deletion still pending at `due` (moved or cancelled ones stay quiet)."""
    ctx = context()
    uid = uid["uid"] if isinstance(uid, dict) else uid  # 0.1 booked it with the ref dict
    pending = ctx.schedule.get(uid)
    if pending is None or pending.due != due or ctx.settings.warn_url is None:
        return "skipped:not-pending"
    ref: JobRef = pending.ref
    kind = ctx.kinds.get(ref.api_version, ref.kind)
    subject = kind.path(ref.namespace, ref.name) if kind else f"{ref.namespace}/{ref.name}"
    announce(
        ctx.settings.warn_url,
        ref,
        subject,
        due,
        {"ttl": pending.ttl, "ttlSource": pending.ttl_source, "rules": list(pending.rules), "dryRun": pending.dry_run},
    )
    ctx.audit.record("announced", ref, logger=log, due=due, url=ctx.settings.warn_url)
    return "announced"


class ResyncBusy(Exception):
    """A confirmed resync found another one running (RQ retries it)."""


def resync(confirm: str | None = None) -> dict:
    """Entry point for RQ: one resync, then the next one booked (if periodic resyncs are on); then
    the archive's retention, which needs no cluster and so runs as often. `confirm`: the held set's
    id an operator confirmed (the console books it: `Schedule.request_confirmation`)."""
    ctx = context()
    try:
        report = resync_run.run(ctx, confirm=confirm).as_dict()
        if confirm is not None and report["status"] == "already-running":
            # An operator's confirmation must not be lost to a periodic resync that holds the lock:
            # RQ tries it again (its booking's Retry), and the console waits for the outcome.
            raise ResyncBusy(f"another resync is running: the confirmation of {confirm} is tried again")
        if ctx.archiver is not None:
            archiving.prune(ctx.archiver.store, ctx.settings.policy.archive_store, ctx.audit, ctx.metrics)
        return report
    finally:
        interval = ctx.settings.resync_interval
        if interval:
            # Aligned to the interval, so every worker books the same slot, and it runs once.
            ctx.schedule.request_resync(at=(int(time.time()) // interval + 1) * interval)
