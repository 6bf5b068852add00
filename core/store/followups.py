"""The follow-ups of a deletion whose DELETE was accepted but whose object is still there
(jobttl.core.services.follow): when it is looked at next (``jobttl:terminating``, a sorted set by the
reference clock), what is known of it (``jobttl:terminating:info``), and the record of one that is stuck
(``jobttl:stuck``, read by `jobttl status` and `jobttl failed`). Claiming members (a lease) is the
CLAIM_FOLLOW_UPS script's, and taking a member out once its object is gone is FINISH's
(jobttl.core.store.scripts).
"""

from __future__ import annotations

from typing import Any

from redis import Redis

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.store import keys


class FollowUps:
    def __init__(self, redis: Redis):
        self.redis = redis

    def info(self, member: str) -> Any | None:
        """What is known of a followed deletion; None when there is nothing (raises on a record that does not
        decode)."""
        raw = self.redis.hget(keys.TERMINATING_INFO, member)
        return None if raw is None else jsoncodec.loads(raw)

    def drop(self, member: str) -> None:
        """No longer follow `member` (it has nothing to follow it by)."""
        self.redis.zrem(keys.TERMINATING, member)

    def check_again(self, member: str, info: dict[str, Any], at: float) -> None:
        """Keep what is known of `member` (`info`) and look at it again at `at`."""
        self.redis.hset(keys.TERMINATING_INFO, member, jsoncodec.dumps_str(info))
        self.redis.zadd(keys.TERMINATING, {member: at})

    def stuck(self, member: str, record: dict[str, Any]) -> None:
        """Record `member` as stuck (what blocks it, since when)."""
        self.redis.hset(keys.STUCK, member, jsoncodec.dumps_str(record))

    def unstuck(self, member: str) -> None:
        """`member` is gone: no longer stuck, if it was."""
        self.redis.hdel(keys.STUCK, member)
