"""The clocks' readings in Redis: Redis's own clock, and each worker's last reading of Redis's and the
API server's clocks (``jobttl:clocks``), published by the worker (jobttl.core.services.worker_graph) and
read by `jobttl status` (jobttl.core.services.operations)."""

from __future__ import annotations

from typing import Any, cast

from redis import Redis

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.store import keys

# How long a worker's published clock reading stays in `jobttl status`.
READING_TTL = 600


class ClockReadings:
    def __init__(self, redis: Redis):
        self.redis = redis

    def redis_time(self) -> tuple[int, int]:
        """Redis's clock: (seconds, microseconds)."""
        seconds, micros = self.redis.time()
        return seconds, micros

    def publish(self, name: str, reading: dict[str, Any], ttl: int = READING_TTL) -> None:
        """Publish worker `name`'s reading; the readings go `ttl` seconds after the last one published."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(keys.CLOCKS, name, jsoncodec.dumps_str(reading))
            pipe.expire(keys.CLOCKS, ttl)
            pipe.execute()

    def all(self) -> dict[str, Any]:
        """Every worker's last reading, by worker."""
        readings = cast("dict[bytes, bytes]", self.redis.hgetall(keys.CLOCKS))
        return {k.decode(): jsoncodec.loads(v) for k, v in readings.items()}
