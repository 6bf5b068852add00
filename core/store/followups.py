"""The follow-ups of a deletion whose DELETE was accepted but whose object is still there
(jobttl.core.services.follow): when it is looked at next (``jobttl:terminating``, a sorted set by the
reference clock), what is known of it (``jobttl:terminating:info``), and the record of one that is stuck
(``jobttl:stuck``, read by `jobttl status` and `jobttl failed`). Members are claimed with a lease by the
CLAIM_FOLLOW_UPS script, and taken out once their object is gone by FINISH (jobttl.core.store.scripts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redis import Redis

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.store import keys
from jobttl.core.store.scripts import ClaimFollowUps, Finish


class FollowUps:
    def __init__(self, redis: Redis):
        self.redis = redis

    def claim(self, now: float, lease: int, batch: int) -> list[str]:
        """The members due a look by `now`, each leased for `lease` seconds to this caller (at most `batch`)."""
        return ClaimFollowUps(now=now, lease=lease, batch=batch).run(self.redis)

    def gone(self, ref: JobRef, member: str, entry: Mapping[str, str], max_entries: int, card_ttl: int) -> None:
        """The object is gone: FINISH records the `deleted` entry (the index and the follow-up end with
        it), then `member` is no longer stuck, if it was."""
        Finish.of(ref, member, 0, entry, forget=False, max_entries=max_entries, card_ttl=card_ttl).run(self.redis)
        self.unstuck(member)

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
