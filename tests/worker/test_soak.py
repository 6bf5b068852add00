"""Soak: several stacks started at once, round after round; every due deletion runs within its bound.

Issue 27's silent stall showed only now and then: a worker started, booked its notices, and then
deleted nothing, its scheduler process alive and blocked (see jobttl.worker.runner). Each round
here starts `STACKS` stacks together (a Redis and a worker each, the machine busy with all of
them starting), books deletions due a few seconds after every worker is up, and waits for them:
each must reach the API server within `LATENESS_BOUND` of its due time, and no worker's watchdog
may have had to restart a scheduler (a stall it recovered from is still a stall).

Marked slow (`make e2e`): rounds of real processes, a few minutes.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.services import wait_for
from tests.worker.stacks import Stack

pytestmark = pytest.mark.slow

ROUNDS = 4
STACKS = 4
DELETIONS = 5  # per stack and round
LEAD = 3  # seconds from booking to due
LATENESS_BOUND = 10.0  # seconds: the scheduler looks 5 times a second; a stall is minutes


def said(worker) -> list[dict]:
    return [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_every_due_deletion_runs_within_its_bound_in_stacks_started_together(emulator, tmp_path, round_):
    stacks = [Stack(f"soak{round_}-{n}", emulator, tmp_path) for n in range(STACKS)]
    try:
        workers = [stack.worker("w") for stack in stacks]
        for stack, worker in zip(stacks, workers):
            # Up: its scheduler process started (its own first line) and holds the queue.
            wait_for(
                lambda: any(f"Scheduler for {stack.queue} started" in line.get("message", "") for line in said(worker)),
                timeout=180,
                what=f"{stack.name}'s worker",
            )
        due = int(time.time()) + LEAD
        for stack in stacks:
            stack.book("job", DELETIONS, due)
        for stack in stacks:
            wait_for(
                lambda: len(stack.deleted("job")) == DELETIONS,
                timeout=max(due - time.time(), 0) + 120,
                interval=0.2,
                what=f"{stack.name}'s deletions",
            )
        late = {
            stack.name: [round(r["time"] - due, 1) for r in stack.deletes("job") if r["time"] - due > LATENESS_BOUND]
            for stack in stacks
        }
        assert not any(late.values()), f"deletions later than {LATENESS_BOUND} s after their due time: {late}"
        assert all(r["time"] >= due for stack in stacks for r in stack.deletes("job")), "none before its time"
        stalls = [
            (stack.name, line)
            for stack, worker in zip(stacks, workers)
            for line in said(worker)
            if line.get("event") == "scheduler-stalled"
        ]
        assert stalls == [], stalls
    finally:
        for stack in stacks:
            stack.stop()
