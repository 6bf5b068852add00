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

from jobttl.core import keys



# KEYS[1]: the timeline key. ARGV[1]: interval in microseconds.
# Returns how many microseconds the caller must wait before its slot.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
redis.call('SET', KEYS[1], tat + interval, 'PX', math.ceil((tat - now + interval) / 1000) + 1000)
return tat - now
"""


class RateLimit:
    def __init__(self, redis: Redis, per_second: float, key: str = keys.RATE_LIMIT):
        self.per_second = per_second
        self.key = key
        self._reserve = redis.register_script(_RESERVE)

    def wait(self) -> float:
        """Block until this caller may proceed; returns the seconds waited."""
        if self.per_second <= 0:
            return 0.0
        interval_us = int(1_000_000 / self.per_second)
        delay = int(self._reserve(keys=[self.key], args=[interval_us])) / 1_000_000
        if delay > 0:
            time.sleep(delay)
        return delay
