"""The worker's sweep (jobttl.core.services.sweep) in Redis: its lock, so that one worker at a time
sweeps, and its cursor, how far into the overdue deletions the next sweep starts."""

from __future__ import annotations

from redis import Redis

from jobttl.core.store import keys

CURSOR_SECONDS = 3600  # a cursor left this long (no sweep since) starts again from the first


class SweepMarks:
    def __init__(self, redis: Redis):
        self.redis = redis

    def take_turn(self, interval: int) -> bool:
        """This worker's turn to sweep (for `interval` seconds), unless another's has not ended."""
        return bool(self.redis.set(keys.SWEEP_LOCK, "1", nx=True, ex=interval))

    def cursor(self) -> int:
        return int(self.redis.get(keys.SWEEP_CURSOR) or 0)

    def move_cursor(self, offset: int) -> None:
        self.redis.set(keys.SWEEP_CURSOR, offset, ex=CURSOR_SECONDS)
