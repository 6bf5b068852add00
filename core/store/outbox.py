"""The notices outbox of a queue (``jobttl:notices:<queue>``, a sorted set of entries by when to post
them): written by the BOOKED and RECONCILE scripts (jobttl.core.store.scripts), drained by the workers'
Event threads (jobttl.core.services.scheduled_events)."""

from __future__ import annotations

from typing import cast

from redis import Redis

from jobttl.core.store import keys


class Outbox:
    def __init__(self, redis: Redis, queue_name: str):
        self.redis = redis
        self.key = keys.notices(queue_name)

    def claim(self, limit: int) -> list[tuple[str, float]]:
        """Take out (ZPOPMIN: each entry to one worker) the `limit` entries due first, with when they are due."""
        popped = cast("list[tuple[bytes, float]]", self.redis.zpopmin(self.key, limit))
        return [(raw.decode(), score) for raw, score in popped]

    def put_back(self, entries: dict[str, float]) -> None:
        """Put entries back, each to be posted at its time."""
        self.redis.zadd(self.key, entries)
