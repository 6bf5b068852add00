"""The resyncs (jobttl.core.services.resync) in Redis: the lock that lets one run at a time, the last
report (``jobttl:resync:last``, read by `jobttl status`, the gauges and the next resync) and when the last
complete one finished (``jobttl:resync:last-success``, the gauges' staleness alert)."""

from __future__ import annotations

import time
from typing import Any

from redis import Redis
from redis.lock import Lock

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.store import keys


class Resyncs:
    def __init__(self, redis: Redis):
        self.redis = redis

    def lock(self, timeout: int) -> Lock:
        """The lock one resync holds while it runs (at most `timeout` seconds)."""
        return self.redis.lock(keys.RESYNC_LOCK, timeout=timeout)

    def record(self, report: dict[str, Any], complete: bool) -> None:
        """Keep `report` as the last one; when `complete`, the last success is now."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(keys.RESYNC_LAST, jsoncodec.dumps_str(report))
            if complete:
                pipe.set(keys.RESYNC_LAST_SUCCESS, str(time.time()))
            pipe.execute()

    def last(self) -> Any | None:
        """The last report; None when there is none (raises on one that does not decode)."""
        raw = self.redis.get(keys.RESYNC_LAST)
        return jsoncodec.loads(raw) if raw else None
