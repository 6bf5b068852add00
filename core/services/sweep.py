"""Booking again what should be running but is not: the worker's sweep, every maintenance.

A pending deletion whose RQ job ended without finishing it (refused while the clocks
disagreed, or arrived early) stays in the index. One worker at a time (a short Redis lock)
looks at deletions overdue by more than `GRACE` whose RQ job is no longer live, and books
them again at once. Failed deletions are left to RQ's retries and to operators, dry-run
records to dry-run, and records without an RQ job to the next event or resync (which has
the object to decide from).
"""

from __future__ import annotations

import logging

from rq.job import JobStatus

from jobttl.core.store import keys, scripts
from jobttl.core.runtime import logs
from jobttl.core.services.worker_graph import WorkerGraph

log = logging.getLogger("jobttl.sweep")

GRACE = 30  # seconds overdue before a deletion counts as stalled
BATCH = 200
LOCK = keys.SWEEP_LOCK


def sweep(ctx: WorkerGraph, interval: int = 5) -> int:
    """Book again the stalled deletions; returns how many. Cheap when there are none."""
    if not ctx.redis.set(LOCK, "1", nx=True, ex=interval):
        return 0
    now = ctx.clock.now()  # due times are the API server's
    # A batch at a time, further on each sweep: what is overdue and not stalled (dry-run records,
    # failed deletions left to operators) must not hide, for good, the stalled deletions behind it.
    offset = int(ctx.redis.get(keys.SWEEP_CURSOR) or 0)
    overdue = [(m.decode(), int(s)) for m, s in ctx.redis.zrangebyscore(keys.PENDING_INDEX, "-inf", now - GRACE,
                                                                          start=offset, num=BATCH, withscores=True)]
    ctx.redis.set(keys.SWEEP_CURSOR, offset + BATCH if len(overdue) == BATCH else 0, ex=3600)
    stalled = [p for p in ctx.schedule.records(overdue)
               if p.state == JobStatus.FINISHED.value and p.ref.kind and p.would_delete_at is None]
    if not stalled:
        return 0
    with ctx.redis.pipeline() as pipe:
        pipe.multi()  # RQ's enqueue expects a pipeline already in MULTI
        for pending in stalled:
            ctx.reconciler.store.book(pending, now, pipeline=pipe)
        scripts.execute(pipe)
    logs.record(log, "rebooked", count=len(stalled), detail="deletions whose RQ job ended without finishing them")
    return len(stalled)
