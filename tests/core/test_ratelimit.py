"""The shared deletion rate limit (jobttl.core.store.ratelimit) against a real Redis."""

import threading
import time
import uuid

from jobttl.core.store.ratelimit import RateLimit
from jobttl.core.store.scripts import ReserveSlot


def test_slots_reserved_across_callers_are_one_interval_apart(redis):
    """Each reservation runs in one transaction with Redis's TIME, so its slot (Redis's time then plus
    the wait it was given) is exact whatever the machine's load: 20 slots from 4 callers at once, at
    20/s, are each at least one interval (50 ms) after the one before."""
    key = f"test:rate:{uuid.uuid4().hex}"
    ReserveSlot(key=f"{key}:load", interval=1).run(redis)  # loads the script: a transaction cannot
    slots = []
    lock = threading.Lock()

    def caller():
        for _ in range(5):
            pipe = redis.pipeline(transaction=True)
            pipe.time()
            ReserveSlot(key=key, interval=50_000).run(pipe)
            (seconds, micros), delay_us = pipe.execute()
            with lock:
                slots.append(seconds * 1_000_000 + micros + int(delay_us))

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    slots.sort()
    gaps = [b - a for a, b in zip(slots, slots[1:])]
    # TIME and the script run back to back in the transaction: a few microseconds apart at most.
    assert min(gaps) >= 50_000 - 1_000, gaps


def test_callers_across_threads_wait_for_their_slots(redis):
    key = f"test:rate:{uuid.uuid4().hex}"
    stamps = []
    lock = threading.Lock()

    def worker():
        limit = RateLimit(redis, per_second=20, key=key)  # one per worker, as in separate processes
        for _ in range(5):
            limit.wait()
            with lock:
                stamps.append(time.monotonic())

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stamps.sort()
    # 20 calls at 20/s: the first is immediate, the last 19 intervals (0.95 s) later at the earliest
    # (a loaded machine only wakes a caller later, never sooner).
    assert stamps[-1] - stamps[0] >= 0.9


def test_a_zero_rate_means_no_limit(redis):
    limit = RateLimit(redis, per_second=0, key=f"test:rate:{uuid.uuid4().hex}")
    assert [limit.wait() for _ in range(50)] == [0.0] * 50
