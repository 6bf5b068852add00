"""A worker whose clock is wrong deletes nothing early, says so, and resumes once it is right.

The fault: a worker whose clock ran 30 days ahead (libfaketime) deleted 50 of 50 jobs that
had 7 days left, because RQ's scheduler and the task both judged "due" by the local clock.
Here each worker runs under libfaketime (LD_PRELOAD in its process only, and so in RQ's
scheduler child it forks), while Redis and the API emulator keep the true clock. Each
scenario has its own Redis; those skewed from the start start at once, so their waits overlap.

- Skewed from the start (+30 days, +2 minutes, -2 minutes): alone, such a worker deletes
  nothing (50 jobs with a week left, and some due within seconds), and its skew shows in
  `jobttl status --json`, its /metrics and its /readyz (503). An honest worker started next
  to it then deletes what is due, on time, and nothing else.
- Skewed while running (the clock file switches to +30 days, then back, as when NTP steps a
  clock): the worker that held the scheduler lock stops its scheduler and deletes nothing
  while skewed; back on time, it schedules and deletes again, the due jobs it refused among
  them, and the week-long ones stay pending. Marked slow (`make e2e`, not `make test`).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.services import ROOT, JobttlProcess, wait_for
from tests.worker.stacks import Stack, faketime
from jobttl.core.store import keys

WEEK = 7 * 86400
DAYS_30 = 30 * 86400
SKEWS = {"ahead-30d": ("+30d", DAYS_30), "ahead-2m": ("+2m", 120), "behind-2m": ("-2m", -120)}
SOON = 20  # seconds after the start that the "soon" jobs are due


@dataclass
class Scenario:
    stack: Stack
    skew: float  # how far the worker's clock runs ahead (negative: behind)
    soon_due: int = 0
    clock_file: Path | None = None  # the offset a running worker reads on every call
    skewed: JobttlProcess | None = None
    honest: JobttlProcess | None = None


@pytest.fixture(scope="module")
def scenarios(emulator, tmp_path_factory):
    """Every scenario booked and its skewed worker started, before any test waits."""
    log_dir = tmp_path_factory.mktemp("clock-logs")
    started: dict[str, Scenario] = {}
    soon_due = int(time.time()) + SOON
    try:
        for name, (spec, skew) in SKEWS.items():
            scenario = started[name] = Scenario(Stack(name, emulator, log_dir), skew, soon_due)
            scenario.stack.book("week", 50, int(time.time()) + WEEK)
            scenario.stack.book("soon", 3, soon_due)
            scenario.skewed = scenario.stack.worker("skewed", **faketime(spec))
        yield started
    finally:
        for scenario in started.values():
            scenario.stack.stop()


@pytest.fixture(scope="module")
def jump(emulator, tmp_path_factory):
    """A worker on the true clock to begin with, its offset in a file the test rewrites."""
    log_dir = tmp_path_factory.mktemp("clock-jump-logs")
    scenario = Scenario(Stack("jump", emulator, log_dir), 0, clock_file=log_dir / "jump-clock")
    try:
        scenario.clock_file.write_text("+0\n")
        scenario.stack.book("warm", 1, int(time.time()) + 1)
        scenario.skewed = scenario.stack.worker("skewed", **faketime(file=scenario.clock_file))
        yield scenario
    finally:
        scenario.stack.stop()


def readings(stack: Stack) -> list[dict]:
    return [json.loads(v) for v in stack.redis.hvals(keys.CLOCKS)]


def measured_after(stack: Stack, redis_time: float) -> bool:
    """A worker published a clock reading taken (by Redis's clock) after `redis_time`."""
    return any(r.get("redisTime", 0) >= redis_time for r in readings(stack))


def stated_skew(problem: str) -> float:
    """How far off the problem says this host's clock is (+: ahead)."""
    found = re.search(r"this host's clock is ([+-][0-9.]+)s off the API server's", problem)
    assert found, problem
    return float(found.group(1))


# --- the tool itself ----------------------------------------------------------------------------

FORKED = """
import multiprocessing, time
from rq.utils import now
def child(queue):
    queue.put((time.time(), now().timestamp()))
queue = multiprocessing.get_context("fork").Queue()
process = multiprocessing.get_context("fork").Process(target=child, args=(queue,))
process.start()
print(time.time(), *queue.get(timeout=10))
"""


def test_libfaketime_shifts_the_wall_clock_of_a_process_and_of_what_it_forks():
    """As RQ forks its scheduler (multiprocessing's fork context), and as RQ reads the time."""
    done = subprocess.run(
        [sys.executable, "-c", FORKED],
        env={**faketime("+30d"), "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    parent, child, rq_now = (float(v) for v in done.stdout.split())
    true_now = time.time()
    for shifted in (parent, child, rq_now):
        assert abs(shifted - true_now - DAYS_30) < 10


# --- skewed while running: the clock jumps, and comes back ---------------------------------------


# Slow (`make e2e`): the worker must notice the jump, give up the scheduler, outlast the soon
# jobs' due time, notice the clock back and take the scheduler again, each at its own pace
# (about 50 s in all). The skews from the start, below, are in `make test`.
@pytest.mark.slow
def test_a_clock_that_jumps_30_days_ahead_stops_deletions_until_it_is_back(jump):
    stack, worker = jump.stack, jump.skewed
    lock = f"rq:scheduler-lock:{stack.queue}"
    wait_for(lambda: stack.deleted("warm") == {"warm-0"}, timeout=60, what="the worker to delete on time first")
    wait_for(lambda: stack.redis.get(lock), timeout=30, what="the worker to hold the scheduler lock")
    soon_due = int(time.time()) + 12
    stack.book("week", 50, int(time.time()) + WEEK)
    soon = stack.book("soon", 3, soon_due)

    jump.clock_file.write_text("+30d\n")
    # The first reading after the jump may be Redis's alone (an API request in flight across
    # the jump is not a reading): "Redis's clock is off", until the next API answer says whose.
    wait_for(
        lambda: stack.readyz(worker)[0] == 503 and "this host's clock" in stack.readyz(worker)[1]["problem"],
        timeout=20,
        what="/readyz to report this host's skew",
    )
    assert abs(stated_skew(stack.readyz(worker)[1]["problem"]) - DAYS_30) < 5
    wait_for(lambda: stack.redis.get(lock) is None, timeout=20, what="the skewed worker to give up the scheduler")
    wait_for(
        lambda: measured_after(stack, soon_due + 5), timeout=40, what="a clock reading after the soon jobs' due time"
    )
    assert stack.deleted("") == {"warm-0"}, "nothing is deleted while the clock is 30 days ahead"
    problems = stack.status()["clockProblems"]
    [problem] = problems.values()
    assert abs(stated_skew(problem) - DAYS_30) < 5

    back = time.time()
    jump.clock_file.write_text("+0\n")
    wait_for(lambda: stack.readyz(worker)[0] == 200, timeout=30, what="the worker to see its clock agree again")
    wait_for(lambda: stack.redis.get(lock), timeout=30, what="the worker to schedule again")
    wait_for(
        lambda: stack.deleted("soon") == {o["metadata"]["name"] for o in soon},
        timeout=60,
        what="the soon jobs (due while the clock was wrong) to be deleted once it is right",
    )
    late = max(r["time"] for r in stack.deletes("soon")) - soon_due
    print(f"jump: soon jobs deleted {late:.1f}s after due, {time.time() - back:.1f}s after the clock came back")
    assert stack.deleted("week") == set()
    # The last soon job's record goes in the worker's FINISH, just after its DELETE is answered.
    wait_for(lambda: stack.pending() == 50, timeout=10, what="the week-long deletions alone to stay booked")
    assert stack.status()["clockProblems"] == {}


# --- skewed from the start ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", SKEWS)
def test_a_skewed_worker_says_so_in_readyz_metrics_and_status(scenarios, name):
    scenario = scenarios[name]
    stack, worker = scenario.stack, scenario.skewed
    wait_for(lambda: stack.readyz(worker)[0] == 503, timeout=60, what="/readyz to report the skew")
    _, body = stack.readyz(worker)
    assert body["status"] == "clock-skew" and abs(body["apiServerOffset"] + scenario.skew) < 5, body
    # Each reference is measured on its own (NaN until it is): the API server's told /readyz, Redis's
    # may come a maintenance later on a loaded machine.
    redis_offset = ("jobttl_clock_offset_seconds", (("reference", "redis"),))

    def measured():
        metrics = stack.metrics(worker)
        return metrics if not math.isnan(metrics[redis_offset]) else None

    metrics = wait_for(measured, timeout=60, what="the worker to measure Redis's clock")
    assert metrics[("jobttl_clock_ok", ())] == 0
    assert abs(metrics[("jobttl_clock_offset_seconds", (("reference", "apiserver"),))] + scenario.skew) < 5
    assert abs(metrics[redis_offset] + scenario.skew) < 5
    problems = wait_for(lambda: stack.status()["clockProblems"], timeout=30, what="jobttl status to show the skew")
    [problem] = problems.values()
    assert abs(stated_skew(problem) - scenario.skew) < 5, problem


@pytest.mark.parametrize("name", SKEWS)
def test_a_skewed_worker_alone_deletes_nothing(scenarios, name):
    scenario = scenarios[name]
    stack = scenario.stack
    wait_for(
        lambda: measured_after(stack, scenario.soon_due + 5),
        timeout=60,
        what="the skewed worker to measure its clock after the soon jobs were due",
    )
    assert stack.deletes() == [], "a worker on a wrong clock deletes nothing, not even what is due"
    assert stack.pending() == 53


def test_an_honest_worker_next_to_the_skewed_ones_deletes_on_time(scenarios):
    """The bookings were good: a worker on the right clock deletes them, and only what is due."""
    starts = {name: scenarios[name] for name in SKEWS}
    for scenario in starts.values():
        scenario.honest = scenario.stack.worker("honest")
    on_time_due = int(time.time()) + 10
    for scenario in starts.values():
        scenario.stack.book("ontime", 2, on_time_due)
    for name, scenario in starts.items():
        stack = scenario.stack
        wait_for(
            lambda: stack.deleted("soon") == {"soon-0", "soon-1", "soon-2"},
            timeout=40,
            what=f"{name}: the honest worker to delete the overdue jobs",
        )
        wait_for(
            lambda: stack.deleted("ontime") == {"ontime-0", "ontime-1"},
            timeout=40,
            what=f"{name}: the honest worker to delete the jobs due now",
        )
        lateness = [r["time"] - on_time_due for r in stack.deletes("ontime")]
        print(f"{name}: on-time deletions {', '.join(f'{s:.2f}s' for s in lateness)} after due")
        assert all(-0.01 <= s < 3 for s in lateness), lateness
        assert stack.deleted("week") == set()
        assert stack.readyz(scenario.skewed)[0] == 503, "the skewed worker still waits"
