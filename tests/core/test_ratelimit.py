"""The shared deletion rate limit (jobttl.core.store.ratelimit) against a real Redis."""

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from jobttl.core.store.ratelimit import RateLimit
from jobttl.core.store.scripts import ReserveSlot


def at_once(caller, callers: int = 4) -> list:
    """What `callers` threads running `caller` at once returned, together (a thread's error is raised)."""
    with ThreadPoolExecutor(max_workers=callers) as pool:
        futures = [pool.submit(caller) for _ in range(callers)]
        return [item for future in futures for item in future.result()]


def test_slots_reserved_across_callers_are_one_interval_apart(redis):
    """Each reservation runs in one transaction with Redis's TIME, so its slot (Redis's time then plus
    the wait it was given) is exact whatever the machine's load: 20 slots from 4 callers at once, at
    20/s, are each at least one interval (50 ms) after the one before."""
    key = f"test:rate:{uuid.uuid4().hex}"
    ReserveSlot(key=f"{key}:load", interval=1).run(redis)  # loads the script: a transaction cannot

    def caller():
        slots = []
        for _ in range(5):
            pipe = redis.pipeline(transaction=True)
            pipe.time()
            ReserveSlot(key=key, interval=50_000).run(pipe)
            (seconds, micros), delay_us = pipe.execute()
            slots.append(seconds * 1_000_000 + micros + int(delay_us))
        return slots

    slots = sorted(at_once(caller))
    assert len(slots) == 20
    gaps = [b - a for a, b in zip(slots, slots[1:])]
    # TIME and the script run back to back in the transaction: a few microseconds apart at most.
    assert min(gaps) >= 50_000 - 1_000, gaps


def test_callers_across_threads_wait_for_their_slots(redis):
    key = f"test:rate:{uuid.uuid4().hex}"

    def worker():
        limit = RateLimit(redis, per_second=20, key=key)  # one per worker, as in separate processes
        stamps = []
        for _ in range(5):
            before = time.monotonic()
            delay = limit.wait()
            stamps.append(time.monotonic())
            assert stamps[-1] - before >= delay, "a caller went before its slot"
        return stamps

    stamps = sorted(at_once(worker))
    # 20 calls at 20/s: the first is immediate, the last 19 intervals (0.95 s) later at the earliest
    # (a loaded machine only wakes a caller later, never sooner).
    assert stamps[-1] - stamps[0] >= 0.9


def test_a_zero_rate_means_no_limit(redis):
    limit = RateLimit(redis, per_second=0, key=f"test:rate:{uuid.uuid4().hex}")
    assert [limit.wait() for _ in range(50)] == [0.0] * 50
