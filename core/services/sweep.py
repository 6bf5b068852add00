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

from jobttl.core.runtime import logs
from jobttl.core.store.sweeping import SweepMarks
from jobttl.core.services.worker_graph import WorkerGraph

log = logging.getLogger("jobttl.sweep")

GRACE = 30  # seconds overdue before a deletion counts as stalled
BATCH = 200


def sweep(ctx: WorkerGraph, interval: int = 5) -> int:
    """Book again the stalled deletions; returns how many. Cheap when there are none."""
    marks = SweepMarks(ctx.redis)
    if not marks.take_turn(interval):
        return 0
    now = ctx.clock.now()  # due times are the API server's
    # A batch at a time, further on each sweep: what is overdue and not stalled (dry-run records,
    # failed deletions left to operators) must not hide, for good, the stalled deletions behind it.
    offset = marks.cursor()
    overdue = ctx.schedule.due_by(now - GRACE, offset, BATCH)
    marks.move_cursor(offset + BATCH if len(overdue) == BATCH else 0)
    stalled = [
        p
        for p in ctx.schedule.records(overdue)
        if p.state == JobStatus.FINISHED.value and p.ref.kind and p.would_delete_at is None
    ]
    if not stalled:
        return 0
    ctx.reconciler.store.rebook(stalled, now)
    logs.record(log, "rebooked", count=len(stalled), detail="deletions whose RQ job ended without finishing them")
    return len(stalled)
