"""The notifier's state in Redis: where it is in the audit trail, and the digests waiting to be told.

- The audit trail (``jobttl:audit``) is read through a consumer group (``jobttl-notify``): several
  notifiers share its entries, each entry goes to one of them, and an entry a notifier read but
  never filed (it died) is claimed by another once it has been idle `CLAIM_IDLE_MS` (XAUTOCLAIM).
  The group is made by the first notifier that starts, at the trail's end: what happened before
  notifications were set up is not told. An entry the capped trail dropped before any notifier
  read it is not told either (`jobttl_notifications_total` cannot count it; the trail's length,
  JOBTTL_AUDIT_MAX_ENTRIES, is the margin).
- Filing an entry (`file`) appends it to the digest buffer of each channel that hears of it,
  counts it, makes its group due unless it already is, and acknowledges it: one MULTI, so an
  entry is filed once or, after a crash, again from the start.
- Sending is one notifier at a time per channel and group (a lock): `take` what is due, then
  `sent` (the buffer loses what the message told) or `failed` (due again after a backoff, or
  dropped and counted once it has failed `jobttl.core.domain.notices.notify.ATTEMPTS` times).

Nothing here waits on a channel, and nothing in the deletion path waits on this.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.exceptions import ResponseError
from redis.lock import Lock

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.domain.notices.notify import GATHER, RETRY_FIRST, Delivery, first_due, gives_up, retry_delay, send_at
from jobttl.core.store import keys

log = logging.getLogger("jobttl.notify")

CLAIM_IDLE_MS = 60_000  # an entry read this long ago and not filed is another notifier's to file
BUFFER_MAX = 1000  # entries a digest group keeps to list; the rest are counted
LOCK_SECONDS = 120  # a send holds its group this long at most (Apprise's timeouts are seconds)
ONCE_SECONDS = 7 * 86400  # a held set is told once within this
CONSUMER_IDLE_MS = 86_400_000  # a consumer idle this long with nothing pending is forgotten


@dataclass(frozen=True)
class Entry:
    id: str
    fields: dict[str, str]
    lossy: bool = False  # held bytes that are not UTF-8 (read with U+FFFD): not written by jobttl


@dataclass
class Batch:
    """One group's message, taken to be sent: what it lists (`items`, the first `listed` of the
    buffer), how many entries it tells of (`total`), and the lock that makes it this notifier's."""

    channel: str
    group: str
    items: list[dict[str, Any]]
    total: int
    attempts: int
    lock: Lock
    listed: int = -1  # buffered raws this message covers (-1: len(items))

    def __post_init__(self) -> None:
        if self.listed < 0:
            self.listed = len(self.items)


def _text(value: bytes | str) -> str:
    """Redis is not a trusted input: bytes that are not UTF-8 (an XADD by anything with the password)
    are read with U+FFFD in their place, and the entry is judged as written, never a thread's end."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _entries(rows: list) -> list[Entry]:
    entries = []
    for entry_id, data in rows:
        if data:
            fields = {_text(k): _text(v) for k, v in data.items()}
            lossy = any("\ufffd" in text for pair in fields.items() for text in pair)
            entries.append(Entry(_text(entry_id), fields, lossy))
    return entries


def _item(raw: bytes) -> dict[str, Any] | None:
    """One buffered item as the digest lists it; None for what is not one (not JSON, not an object:
    written by something else than `file`)."""
    try:
        item = jsoncodec.loads(raw)
    except ValueError:
        return None
    return item if isinstance(item, dict) else None


def _number(value: bytes | str | None) -> float | None:
    """A number the notifier wrote in Redis, or None for what is not one (absent, garbage, inf, nan)."""
    try:
        number = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return number if number is not None and math.isfinite(number) else None


def _count(value: bytes | str | None) -> int:
    number = _number(value)
    return int(number) if number is not None else 0


class NotifyStore:
    """`gather`: seconds a quiet group waits for more; `retry_first`: the first retry's delay (doubling);
    `buffer_max`: entries a group keeps to list."""

    def __init__(
        self, redis: Redis, gather: float = GATHER, retry_first: float = RETRY_FIRST, buffer_max: int = BUFFER_MAX
    ):
        self.redis = redis
        self.gather = gather
        self.retry_first = retry_first
        self.buffer_max = buffer_max

    # --- reading the audit trail ------------------------------------------------------------------
    def join(self) -> None:
        """Make the consumer group, at the trail's end, unless it exists."""
        try:
            self.redis.xgroup_create(keys.AUDIT_STREAM, keys.NOTIFY_GROUP, id="$", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read(self, consumer: str, count: int = 100, block_ms: int = 1000) -> list[Entry]:
        """New entries for this consumer (waiting up to `block_ms` for one)."""
        reply = self.redis.xreadgroup(
            keys.NOTIFY_GROUP, consumer, {keys.AUDIT_STREAM: ">"}, count=count, block=block_ms
        )
        return _entries(reply[0][1]) if reply else []

    def reclaim(self, consumer: str, count: int = 100, idle_ms: int = CLAIM_IDLE_MS) -> list[Entry]:
        """Entries another notifier read and never filed (idle `idle_ms`). Those the capped trail has
        dropped meanwhile are acknowledged: nothing is left of them to tell."""
        _, claimed, deleted = self.redis.xautoclaim(
            keys.AUDIT_STREAM, keys.NOTIFY_GROUP, consumer, idle_ms, start_id="0-0", count=count
        )
        gone = [i for i in deleted] + [i for i, data in claimed if not data]
        if gone:
            self.redis.xack(keys.AUDIT_STREAM, keys.NOTIFY_GROUP, *gone)
        return _entries(claimed)

    def forget_idle_consumers(self) -> None:
        """Consumers of notifiers long gone, with nothing pending: out of XINFO's way."""
        for consumer in self.redis.xinfo_consumers(keys.AUDIT_STREAM, keys.NOTIFY_GROUP):
            if consumer["pending"] == 0 and consumer["idle"] > CONSUMER_IDLE_MS:
                self.redis.xgroup_delconsumer(keys.AUDIT_STREAM, keys.NOTIFY_GROUP, consumer["name"])

    def ack(self, entry_ids: list[str]) -> None:
        """Entries no channel hears of: nothing to file."""
        if entry_ids:
            self.redis.xack(keys.AUDIT_STREAM, keys.NOTIFY_GROUP, *entry_ids)

    def told(self, token: str) -> bool:
        """Whether a message `token` names (a held set) was filed already."""
        return bool(self.redis.exists(keys.notify_once(token)))

    def file(
        self,
        entry_id: str,
        deliveries: tuple[Delivery, ...],
        item: dict[str, Any],
        now: float,
        periods: dict[str, int],
        once: str | None = None,
    ) -> None:
        """File one entry for its deliveries (none: only acknowledged), in one MULTI."""
        raw = jsoncodec.dumps_str(item)
        counts: dict[int, Delivery] = {}  # the HINCRBYs' places in the reply
        with self.redis.pipeline(transaction=True) as pipe:
            for delivery in deliveries:
                buffer = keys.notify_buffer(delivery.channel, delivery.group)
                pipe.rpush(buffer, raw)
                pipe.ltrim(buffer, 0, self.buffer_max - 1)
                counts[len(pipe.command_stack)] = delivery
                pipe.hincrby(keys.notify_state(delivery.channel), f"{delivery.group}:count", 1)
                due = first_due(now, periods[delivery.channel], self.gather)
                pipe.zadd(keys.notify_due(delivery.channel), {delivery.group: due}, nx=True)
            if once is not None and deliveries:
                pipe.set(keys.notify_once(once), entry_id, ex=ONCE_SECONDS)
            pipe.xack(keys.AUDIT_STREAM, keys.NOTIFY_GROUP, entry_id)
            replies = pipe.execute(raise_on_error=False)
        for i, reply in enumerate(replies):
            if not isinstance(reply, Exception):
                continue
            if i not in counts:
                raise reply
            # A count that is no integer (written by something else): what the buffer holds is the count.
            delivery = counts[i]
            self.redis.hset(
                keys.notify_state(delivery.channel),
                f"{delivery.group}:count",
                self.redis.llen(keys.notify_buffer(delivery.channel, delivery.group)),
            )

    # --- sending --------------------------------------------------------------------------------
    def due_groups(self, channel: str, now: float, limit: int = 20) -> list[str]:
        return [g.decode() for g in self.redis.zrangebyscore(keys.notify_due(channel), "-inf", now, 0, limit)]

    def take(self, channel: str, group: str, period: int, now: float) -> Batch | None:
        """The group's message, if it is due and no other notifier is sending it; else None (and a
        group sent less than a period ago is due again when the period is over)."""
        lock = self.redis.lock(keys.notify_lock(channel, group), timeout=LOCK_SECONDS, blocking=False)
        if not lock.acquire(blocking=False):
            return None
        batch = self._read(channel, group, period, now, lock)
        if batch is None:
            lock.release()
        return batch

    def _read(self, channel: str, group: str, period: int, now: float, lock: Lock) -> Batch | None:
        state = keys.notify_state(channel)
        due, (count, last, attempts) = (
            self.redis.zscore(keys.notify_due(channel), group),
            self.redis.hmget(state, f"{group}:count", f"{group}:last", f"{group}:attempts"),
        )
        if due is None:
            return None  # sent by another notifier meanwhile
        when = send_at(due, _number(last), period)
        if when > now:
            self.redis.zadd(keys.notify_due(channel), {group: when}, xx=True)
            return None
        raws = self.redis.lrange(keys.notify_buffer(channel, group), 0, self.buffer_max - 1)
        total = max(_count(count), len(raws))
        if count is not None and not count.lstrip(b"-").isdigit():
            # Not a count (written by something else): HINCRBY would fail on it in `file` and `_settle`
            # for good. What the buffer holds is the count from now on.
            self.redis.hset(keys.notify_state(channel), f"{group}:count", total)
        if total == 0:
            self.redis.zrem(keys.notify_due(channel), group)
            return None
        items = [item for item in map(_item, raws) if item is not None]
        # `listed`: what the buffer loses once the message is settled: every raw read, kept or not.
        return Batch(channel, group, items, total, _count(attempts), lock, listed=len(raws))

    def sent(self, batch: Batch, now: float) -> None:
        """The message went: the buffer loses what it told; the group is due again (a period from
        now, `send_at` says at `take`) only if entries came meanwhile."""
        self._settle(batch, {f"{batch.group}:last": now})

    def failed(self, batch: Batch, now: float) -> tuple[int, bool]:
        """The message did not go: (its failed tries, whether it was dropped for good)."""
        attempts = batch.attempts + 1
        if gives_up(attempts):
            self._settle(batch, {})
            return attempts, True
        state = keys.notify_state(batch.channel)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(state, f"{batch.group}:attempts", attempts)
            pipe.zadd(keys.notify_due(batch.channel), {batch.group: now + retry_delay(attempts, self.retry_first)})
            pipe.execute()
        batch.lock.release()
        return attempts, False

    def _settle(self, batch: Batch, state_fields: dict[str, Any]) -> None:
        buffer, state, due = (
            keys.notify_buffer(batch.channel, batch.group),
            keys.notify_state(batch.channel),
            keys.notify_due(batch.channel),
        )
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.ltrim(buffer, batch.listed, -1)
            pipe.hincrby(state, f"{batch.group}:count", -batch.total)
            pipe.hdel(state, f"{batch.group}:attempts")
            if state_fields:
                pipe.hset(state, mapping=state_fields)
            pipe.zrem(due, batch.group)
            pipe.execute()
        # After the ZREM: an entry filed before it is in the buffer now; one filed after it made its
        # group due itself (ZADD NX). Either way the group is due when it has something to say: at
        # once, as far as this says (`take` holds it back until its period is over).
        left = _count(self.redis.hget(state, f"{batch.group}:count"))
        if left < 0:
            self.redis.hset(state, f"{batch.group}:count", 0)  # a count lost (Redis restored): lists count
        if self.redis.llen(buffer) or left > 0:
            self.redis.zadd(due, {batch.group: 0}, nx=True)
        batch.lock.release()
