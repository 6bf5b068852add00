"""How full Redis is: what the sink, the worker and the gauges ask before Redis refuses writes.

jobttl's Redis runs with ``maxmemory`` and ``noeviction`` (the chart's bundled one does): past
``maxmemory`` it refuses every command that may grow memory ("OOM command not allowed when used
memory > 'maxmemory'") and evicts nothing, so no booked deletion is silently dropped. Two limits,
read from ``INFO memory``:

- **full** (`Capacity.full`): used memory past ``1 - RESERVE`` of ``maxmemory``. New bookings stop
  there (`Gate`): the sink answers events 503 (Knative redelivers them), and its ``/readyz``
  says not ready. The reserve is the worker's: a deletion writes a little (its claim, RQ's status,
  the audit entry) before it frees a pending deletion's ~1.9 KB, so the worker keeps deleting what
  is booked, and deleting is what frees memory.
- **refusing** (`Capacity.refusing`): past ``maxmemory`` itself (something else filled it, or a
  resync booked into the reserve). Redis answers writes with OOM (`is_full_error`); the sink
  answers 503, the worker backs off and tries again (it never exits on it).

A Redis without ``maxmemory`` is never full here (the chart's bundled one always has one).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from redis import Redis
from redis.exceptions import OutOfMemoryError, RedisError, ResponseError

# The share of maxmemory left to the worker's own writes: bookings stop past 1 - RESERVE of it.
RESERVE = 0.1
# How long the sink trusts one reading of INFO memory (an event is not worth a round trip more).
GATE_SECONDS = 1.0


class RedisFull(RedisError):
    """Redis is past the point where jobttl books more: the message says how full, and what to do."""


@dataclass(frozen=True)
class Capacity:
    used: int  # bytes Redis counts against maxmemory
    maxmemory: int  # 0: no limit
    policy: str  # maxmemory-policy

    @classmethod
    def read(cls, redis: Redis) -> Capacity:
        info = redis.info("memory")
        # What Redis compares with maxmemory: used memory less replication and AOF buffers.
        used = int(info.get("used_memory", 0)) - int(info.get("mem_not_counted_for_evict", 0))
        return cls(used, int(info.get("maxmemory", 0)), str(info.get("maxmemory_policy", "")))

    @property
    def limited(self) -> bool:
        return self.maxmemory > 0

    @property
    def refusing(self) -> bool:
        """Redis refuses writes now (noeviction), or soon evicts (any other policy)."""
        return self.limited and self.used >= self.maxmemory

    @property
    def full(self) -> bool:
        """No more bookings: the rest is the worker's reserve."""
        return self.limited and self.used >= self.maxmemory * (1 - RESERVE)

    def describe(self) -> str:
        mib = 1024 * 1024
        state = (
            "it refuses writes"
            if self.refusing
            else f"bookings stop at {1 - RESERVE:.0%} of it, the rest is kept for the worker's deletions"
        )
        return (
            f"Redis is full: it holds {self.used / mib:.1f} MiB of its maxmemory {self.maxmemory / mib:.1f} MiB "
            f"({self.maxmemory_policy_text}); {state}. Deletions free memory as they run; raise maxmemory "
            f"(the chart's redis.bundled.maxmemory and its memory limit) if pending deletions need more "
            f'(docs/operations.md: "Redis full")'
        )

    @property
    def maxmemory_policy_text(self) -> str:
        return f"maxmemory-policy {self.policy}" if self.policy else "maxmemory-policy unknown"


def is_full_error(exc: BaseException) -> bool:
    """Redis refused a write for want of memory (a command, a script, a MULTI it aborted)."""
    # redis-py raises OutOfMemoryError for "OOM command not allowed when used memory > 'maxmemory'"
    # (its message without the "OOM"); a script's refused write comes back as a ResponseError
    # that quotes it, and a MULTI that met one raises that first error.
    return isinstance(exc, (RedisFull, OutOfMemoryError)) or (
        isinstance(exc, ResponseError) and "used memory > 'maxmemory'" in str(exc)
    )


class Gate:
    """Bookings stop while Redis is full: one INFO memory per `GATE_SECONDS`, shared by a process's
    threads. `check` raises RedisFull while full; `state` is the last reading (None before one)."""

    def __init__(self, redis: Redis, seconds: float = GATE_SECONDS):
        self.redis = redis
        self.seconds = seconds
        self._lock = threading.Lock()
        self._read_at = 0.0
        self.state: Capacity | None = None

    def current(self) -> Capacity:
        with self._lock:
            if self.state is None or time.monotonic() - self._read_at >= self.seconds:
                self.state = Capacity.read(self.redis)
                self._read_at = time.monotonic()
            return self.state

    def check(self) -> None:
        capacity = self.current()
        if capacity.full:
            raise RedisFull(capacity.describe())
