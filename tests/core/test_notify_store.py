"""The notifier's state in a real Redis (jobttl.core.store.notifications): the audit trail read as a
consumer group, digests filed once, sent once per period, retried, dropped, and shared between notifiers."""

from __future__ import annotations

import logging

from jobttl.core.domain.notices.notify import ALL_GROUP, ATTEMPTS, Delivery
from jobttl.core.store import keys
from jobttl.core.store.audit import Audit
from jobttl.core.store.notifications import NotifyStore
from tests.core.own_redis import ref, redis, server  # noqa: F401 - fixtures

HOURLY = {"ops": 3600}
DELETED = Delivery("ops", "deleted/team-a")


def record(redis, ref, event="deleted", **fields):
    Audit(redis).record(event, ref, logging.INFO, **fields)


def test_the_group_starts_at_the_trails_end_and_each_entry_goes_to_one_notifier(redis, ref):
    record(redis, ref, "scheduled")  # before any notifier: not told
    store = NotifyStore(redis)
    store.join()
    store.join()  # a second notifier's start changes nothing
    record(redis, ref)
    record(redis, ref, "stuck")
    first = store.read("a", count=1, block_ms=10)
    second = store.read("b", block_ms=10)
    assert [e.fields["event"] for e in first + second] == ["deleted", "stuck"]
    assert store.read("a", block_ms=10) == []


def test_an_entry_a_dead_notifier_never_filed_is_claimed_by_another(redis, ref):
    store = NotifyStore(redis)
    store.join()
    record(redis, ref)
    [read] = store.read("dead", block_ms=10)
    assert store.reclaim("alive", idle_ms=60_000) == []  # not idle long enough: its reader may still file it
    [claimed] = store.reclaim("alive", idle_ms=0)
    assert claimed == read
    store.file(claimed.id, (DELETED,), {"event": "deleted"}, 1000.0, HOURLY)
    assert store.reclaim("alive", idle_ms=0) == []  # filed: acknowledged
    assert redis.llen(keys.notify_buffer("ops", "deleted/team-a")) == 1


def test_an_entry_the_trail_dropped_before_it_was_filed_is_acknowledged(redis, ref):
    store = NotifyStore(redis)
    store.join()
    record(redis, ref)
    [read] = store.read("dead", block_ms=10)
    redis.xdel(keys.AUDIT_STREAM, read.id)  # the capped trail moved past it
    assert store.reclaim("alive", idle_ms=0) == []
    assert redis.xpending(keys.AUDIT_STREAM, keys.NOTIFY_GROUP)["pending"] == 0


def file(store, n, delivery=DELETED, now=1000.0):
    store.redis.xadd(keys.AUDIT_STREAM, {"event": "deleted"})
    for i in range(n):
        entry_id = store.redis.xadd(keys.AUDIT_STREAM, {"event": "deleted"}).decode()
        store.file(entry_id, (delivery,), {"event": "deleted", "name": f"j{i}"}, now, HOURLY)


def test_a_digest_gathers_then_goes_at_most_once_a_period(redis):
    store = NotifyStore(redis, gather=30)
    store.join()
    file(store, 3, now=1000.0)
    assert store.due_groups("ops", 1029.0) == []  # gathering
    assert store.due_groups("ops", 1030.0) == ["deleted/team-a"]
    batch = store.take("ops", "deleted/team-a", 3600, 1030.0)
    assert [i["name"] for i in batch.items] == ["j0", "j1", "j2"] and batch.total == 3
    file(store, 1, now=1031.0)  # while it is being sent: kept for the next message
    store.sent(batch, 1031.0)
    assert redis.llen(keys.notify_buffer("ops", "deleted/team-a")) == 1
    # Due at once as far as the buffer says; held back until the period is over when taken.
    assert store.take("ops", "deleted/team-a", 3600, 1032.0) is None
    assert redis.zscore(keys.notify_due("ops"), "deleted/team-a") == 1031.0 + 3600
    batch = store.take("ops", "deleted/team-a", 3600, 1031.0 + 3600)
    assert [i["name"] for i in batch.items] == ["j0"] and batch.total == 1
    store.sent(batch, 4700.0)
    assert store.due_groups("ops", 10**10) == []


def test_one_notifier_at_a_time_sends_a_group(redis):
    store, other = NotifyStore(redis, gather=0), NotifyStore(redis, gather=0)
    file(store, 1)
    batch = store.take("ops", "deleted/team-a", 3600, 1000.0)
    assert batch is not None and other.take("ops", "deleted/team-a", 3600, 1000.0) is None
    store.sent(batch, 1000.0)
    assert other.take("ops", "deleted/team-a", 3600, 1000.0) is None  # nothing left to say


def test_a_failed_message_is_due_again_after_a_backoff_and_dropped_after_its_last_try(redis):
    store = NotifyStore(redis, gather=0, retry_first=10)
    file(store, 2)
    now = 1000.0
    for attempt in range(1, ATTEMPTS):
        batch = store.take("ops", "deleted/team-a", 3600, now)
        assert batch.attempts == attempt - 1
        assert store.failed(batch, now) == (attempt, False)
        due = redis.zscore(keys.notify_due("ops"), "deleted/team-a")
        assert due == now + min(10 * 2 ** (attempt - 1), 900)
        assert store.take("ops", "deleted/team-a", 3600, due - 1) is None
        now = due
    batch = store.take("ops", "deleted/team-a", 3600, now)
    assert store.failed(batch, now) == (ATTEMPTS, True)
    assert redis.llen(keys.notify_buffer("ops", "deleted/team-a")) == 0 and store.due_groups("ops", 10**10) == []
    file(store, 1, now=now)  # what comes next starts afresh
    assert store.take("ops", "deleted/team-a", 3600, now).attempts == 0


def test_a_full_digest_lists_what_it_kept_and_counts_the_rest(redis):
    store = NotifyStore(redis, gather=0, buffer_max=5)
    file(store, 8)
    batch = store.take("ops", "deleted/team-a", 3600, 1000.0)
    assert len(batch.items) == 5 and batch.total == 8
    store.sent(batch, 1000.0)
    assert store.due_groups("ops", 10**10) == []
    assert int(redis.hget(keys.notify_state("ops"), "deleted/team-a:count")) == 0


def test_a_held_set_is_told_once(redis):
    store = NotifyStore(redis, gather=0)
    entry_id = redis.xadd(keys.AUDIT_STREAM, {"event": "deletions-held"}).decode()
    assert not store.told("review-opened:abc")
    store.file(
        entry_id, (Delivery("ops", ALL_GROUP),), {"event": "review-opened"}, 1000.0, HOURLY, once="review-opened:abc"
    )
    assert store.told("review-opened:abc")
