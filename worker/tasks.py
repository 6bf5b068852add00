"""The RQ tasks: delete one job when its TTL is up (if and only if it still should), and resync.

The deletion task gets only the job's identity and the due time it was scheduled for. It
re-reads the object and decides again from what the API server says now, as the upstream
TTL-after-finished controller does: the event that scheduled it may have been stale or
forged, the job may have been re-created under the same name, or its TTL extended.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from redis import Redis
from rq import get_current_job

from jobttl.config import Settings
from jobttl.metrics import Metrics
from worker.audit import Audit
from worker.decision import JobRef, Verdict, decide
from worker.kinds import KindRegistry
from worker.notify import EventRecorder, announce
from worker.kube import Conflict, KubeClient, ObjectGone, PermanentApiError, TransientApiError, load_api_client
from worker import resync as resync_module
from worker.ratelimit import RateLimit
from worker.schedule import PERMANENT_FAILURE, Schedule

log = logging.getLogger("jobttl.worker")

# A 409 means the object changed between our read and our delete; we re-read and decide
# again. More than a few in a row means something keeps rewriting it: let RQ retry later.
MAX_CONFLICTS = 3
# How early (clock skew between the scheduler and this worker) a job may be and still be
# waited for in place rather than retried later.
MAX_EARLY = 30


@dataclass
class WorkerContext:
    settings: Settings
    kube: KubeClient
    schedule: Schedule
    kinds: KindRegistry
    rate_limit: RateLimit
    audit: Audit
    metrics: Metrics
    events: EventRecorder

    @classmethod
    def from_settings(cls, settings: Settings) -> WorkerContext:
        redis = Redis.from_url(settings.redis_url)
        metrics = Metrics(redis)
        api_client = load_api_client(settings.kubeconfig)
        return cls(
            settings=settings,
            kube=KubeClient(api_client, timeout=settings.api_timeout, metrics=metrics),
            schedule=Schedule.from_settings(redis, settings),
            kinds=KindRegistry(settings.policy.kinds),
            rate_limit=RateLimit(redis, settings.delete_rate),
            audit=Audit.from_settings(redis, settings, metrics),
            metrics=metrics,
            events=EventRecorder(api_client, timeout=settings.api_timeout),
        )


_context: WorkerContext | None = None


def configure(settings: Settings) -> WorkerContext:
    """Build the process's one context (and so its one API connection pool)."""
    global _context
    _context = WorkerContext.from_settings(settings)
    return _context


def context() -> WorkerContext:
    """The process's context; a worker started without `jobttl worker` reads the environment."""
    return _context if _context is not None else configure(Settings.from_env())


def _outcome(ctx: WorkerContext, event: str, ref: JobRef, level: int = logging.INFO, **fields) -> str:
    """Log and audit one outcome; return it as "event" or "event:reason" (the RQ result)."""
    ctx.audit.record(event, ref, level, logger=log, **fields)
    return f"{event}:{fields['reason']}" if "reason" in fields else event


def delete_if_expired(ref_data: dict[str, str], due: int) -> str:
    """Entry point for RQ. Returns the outcome, which RQ stores as the job's result."""
    ctx = context()
    ref = JobRef.from_dict(ref_data)
    job = get_current_job()
    try:
        outcome = _delete_if_expired(ctx, ref, due)
    except PermanentApiError as exc:
        # Retrying a 403 only hides it: fail now, with the message saying what to grant.
        if job is not None:
            job.retries_left = 0
            job.meta[PERMANENT_FAILURE] = True  # plans leave it failed until an operator retries
            job.save_meta()
        _outcome(ctx, "failed", ref, logging.ERROR, due=due, error=str(exc), failure="permanent",
                 jobId=job.id if job else None)
        ctx.events.record(ref, "FailedDeleteJob", f"jobttl could not delete {ref.kind} {ref.name}: {exc}",
                          warning=True)
        raise
    except Exception as exc:
        retries_left = job.retries_left if job is not None else None
        event, level = ("retrying", logging.WARNING) if retries_left else ("failed", logging.ERROR)
        failure = {TransientApiError: "transient", Conflict: "conflict"}.get(type(exc), "error")
        _outcome(ctx, event, ref, level, due=due, error=str(exc), failure=failure, retriesLeft=retries_left or 0,
                 jobId=job.id if job else None)
        if not retries_left:
            ctx.events.record(ref, "FailedDeleteJob", f"jobttl gave up deleting {ref.kind} {ref.name} after "
                                                      f"retries: {exc}", warning=True)
        raise
    if job is not None and outcome == "would-delete":
        ctx.schedule.mark_would_delete(ref, job.id, int(time.time()))
    elif job is not None and outcome != "rescheduled":
        ctx.schedule.complete(ref, job.id)
    return outcome


def _delete_if_expired(ctx: WorkerContext, ref: JobRef, due: int) -> str:
    kind = ctx.kinds.get(ref.api_version, ref.kind)
    if kind is None:
        return _outcome(ctx, "skipped", ref, reason="kind-not-enabled", due=due)
    for _ in range(MAX_CONFLICTS):
        try:
            obj = ctx.kube.get(kind, ref.namespace, ref.name)
        except ObjectGone:
            return _outcome(ctx, "skipped", ref, reason="gone", due=due)
        meta = obj.get("metadata", {})
        if meta.get("uid") != ref.uid:
            return _outcome(ctx, "skipped", ref, reason="recreated", due=due, currentUid=meta.get("uid"))

        decision = decide(obj, kind, ctx.settings.policy)
        if decision.verdict is not Verdict.EXPIRES:
            return _outcome(ctx, "skipped", ref, reason=decision.verdict.value, due=due, detail=decision.reason)
        assert decision.expires_at is not None
        effective_due = ctx.schedule.effective_due(ref.uid, decision.expires_at)
        if effective_due is None:
            return _outcome(ctx, "skipped", ref, reason="kept-by-operator", due=due)
        now = time.time()
        if effective_due > now:
            if effective_due == due:
                # Due at the very time this job was booked for, yet early by our clock: the
                # scheduler's clock runs ahead of ours. Rebooking the same job id from inside
                # that job would be a no-op, so wait briefly, or let RQ retry it later.
                if effective_due - now > MAX_EARLY:
                    raise TransientApiError(f"{ref} is due at {due} but this worker's clock says "
                                            f"{now:.0f}: check the clocks")
                time.sleep(effective_due - now)
                continue
            # The TTL was extended or an operator postponed it: try again then.
            ctx.schedule.plan(ref, decision, now=now)
            return _outcome(ctx, "rescheduled", ref, due=due, newDue=effective_due, ttlSource=decision.ttl_source)
        details = dict(due=effective_due, finishedAt=decision.finished_at, ttl=decision.ttl,
                       ttlSource=decision.ttl_source, rules=list(decision.rules),
                       lateness=round(now - effective_due, 3))
        if decision.dry_run:
            return _outcome(ctx, "would-delete", ref, **details)

        ctx.rate_limit.wait()
        if ctx.schedule.effective_due(ref.uid, decision.expires_at) != effective_due:
            continue  # an operator cancelled or postponed it while we waited: decide again
        try:
            ctx.kube.delete(
                kind, ref.namespace, ref.name, ref.uid, meta["resourceVersion"], ctx.settings.propagation_policy
            )
        except ObjectGone:
            return _outcome(ctx, "skipped", ref, reason="gone", due=due)
        except Conflict as exc:
            _outcome(ctx, "conflict", ref, due=due, detail=str(exc))
            continue
        try:
            ctx.audit.bury(ref, obj, time.time())
        except Exception as exc:  # the deletion happened; losing its tombstone must not undo that
            log.warning("tombstone not kept", extra={"event": "tombstone-failed", "detail": str(exc)})
        ctx.events.record(ref, "SuccessfulDeleteJob",
                          f"Deleted {decision.outcome} {ref.kind} {ref.name}: TTL {decision.ttl}s after it finished "
                          f"(from {decision.ttl_source})")
        return _outcome(ctx, "deleted", ref, propagationPolicy=ctx.settings.propagation_policy, **details)
    raise Conflict(f"{ref} kept changing between read and delete ({MAX_CONFLICTS} conflicts in a row)")


def run_resync(ctx: WorkerContext, confirm: str | None = None) -> resync_module.ResyncReport:
    guard = resync_module.Guard(ctx.settings.resync_max_deletions, ctx.settings.resync_max_share)
    report = resync_module.resync(ctx.schedule.redis, ctx.kube, ctx.schedule, ctx.audit, ctx.settings.policy, guard,
                                  confirm=confirm)
    if report.status not in ("already-running", "stale-confirmation"):
        ctx.metrics.resync_duration.observe(report.duration)
        for result in ("seen", "scheduled", "moved", "unchanged", "cancelled", "queued_now", "held"):
            ctx.metrics.resync_objects.labels(result).inc(getattr(report, result))
    return report


def resync() -> dict:
    """Entry point for RQ: one resync, then the next one booked (if periodic resyncs are on)."""
    ctx = context()
    try:
        return run_resync(ctx).as_dict()
    finally:
        interval = ctx.settings.resync_interval
        if interval:
            # Aligned to the interval, so every worker books the same slot, and it runs once.
            resync_module.request(ctx.schedule.queue, at=(int(time.time()) // interval + 1) * interval)


def warn_upcoming(ref_data: dict[str, str], due: int) -> str:
    """Entry point for RQ: announce a deletion still pending at `due` (moved or cancelled ones stay quiet)."""
    ctx = context()
    ref = JobRef.from_dict(ref_data)
    pending = ctx.schedule.get(ref.uid)
    if pending is None or pending.due != due or ctx.settings.warn_url is None:
        return "skipped:not-pending"
    kind = ctx.kinds.get(ref.api_version, ref.kind)
    subject = kind.path(ref.namespace, ref.name) if kind else f"{ref.namespace}/{ref.name}"
    announce(ctx.settings.warn_url, ref, subject, due,
             {"ttl": pending.ttl, "ttlSource": pending.ttl_source, "rules": list(pending.rules),
              "dryRun": pending.dry_run})
    return _outcome(ctx, "announced", ref, due=due, url=ctx.settings.warn_url)
