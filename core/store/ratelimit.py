"""A deletions-per-second cap shared by every worker, kept in Redis.

A backlog (say 50,000 jobs found expired by the first resync after install) must not turn
into 50,000 DELETEs in a burst against the control plane. Each deletion reserves the next
free slot on a shared timeline (the generic cell rate algorithm: one key holding the
"theoretical arrival time") and waits for it. Redis's clock is used, not the workers', so
clock skew between worker pods cannot loosen the cap. Reserving one slot per deletion
means a worker waits at most (number of workers) × interval.
"""

from __future__ import annotations

import time

from redis import Redis

from jobttl.core.store import keys
from jobttl.core.store.scripts import ReserveSlot


class RateLimit:
    def __init__(self, redis: Redis, per_second: float, key: str = keys.RATE_LIMIT):
        self.per_second = per_second
        self.key = key
        self.redis = redis

    def wait(self) -> float:
        """Block until this caller may proceed; returns the seconds waited."""
        if self.per_second <= 0:
            return 0.0
        interval_us = int(1_000_000 / self.per_second)
        delay = ReserveSlot(key=self.key, interval=interval_us).run(self.redis) / 1_000_000
        if delay > 0:
            time.sleep(delay)
        return delay
