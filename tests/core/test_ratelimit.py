"""The shared deletion rate limit (worker/ratelimit.py) against a real Redis."""

import threading
import time
import uuid

from jobttl.core.store.ratelimit import RateLimit


def test_callers_across_threads_are_spaced_at_the_rate(redis):
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
    # 20 calls at 20/s: the first is immediate, the last 19 intervals (0.95 s) later.
    assert stamps[-1] - stamps[0] >= 0.9
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert min(gaps) > 0.03, "no two deletions closer than about one interval"


def test_a_zero_rate_means_no_limit(redis):
    limit = RateLimit(redis, per_second=0, key=f"test:rate:{uuid.uuid4().hex}")
    assert [limit.wait() for _ in range(50)] == [0.0] * 50
