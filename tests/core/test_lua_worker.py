"""The worker's scripts' contracts (BEGIN, FINISH, RELEASE, the follow-ups' claim, the rate limit's
slot: core/store/lua/*.lua through their wrappers in `jobttl.core.store.scripts`), against a real redis-server."""

import json
import time


from jobttl.core.store import keys, scripts
from jobttl.core.domain.decisions.due import Override
from tests.core.own_redis import redis, ref, server  # noqa: F401 (fixtures)


def begin(redis, ref, step="start", token="run-1", intent='{"uid": "x"}'):
    return scripts.Begin(
        uid=ref.uid, member=ref.uid, step=step, token=token, claim_seconds=60, intent_entry=intent
    ).run(redis)


# --- BEGIN -------------------------------------------------------------------------------------------


def test_begin_says_what_is_pending_on_redis_clock_and_takes_the_claim(redis, ref):
    redis.zadd(keys.PENDING_INDEX, {ref.uid: 1000})
    said = begin(redis, ref)
    assert (said.pending_due, said.override, said.intent, said.busy) == (1000, Override(), b"", False)
    assert abs(said.seconds + said.micros / 1e6 - time.time()) < 5
    assert redis.get(keys.claim(ref.uid)) == b"run-1" and 0 < redis.ttl(keys.claim(ref.uid)) <= 60


def test_begin_of_a_superseded_deletion_says_nothing_is_pending(redis, ref):
    assert begin(redis, ref).pending_due is None


def test_begin_tells_what_an_operator_said(redis, ref):
    redis.hset(keys.override(ref.uid), mapping={"keep": "true", "until": "1900000000"})
    assert begin(redis, ref).override == Override(keep=True, until=1_900_000_000)


def test_begin_finds_another_run_at_work_and_takes_nothing(redis, ref):
    redis.zadd(keys.PENDING_INDEX, {ref.uid: 1000})
    begin(redis, ref, token="run-1")
    said = begin(redis, ref, token="run-2")
    assert said.busy and redis.get(keys.claim(ref.uid)) == b"run-1"
    assert begin(redis, ref, step="delete", token="run-2").busy and not redis.exists(keys.intent(ref.uid))


def test_begin_before_the_delete_writes_the_intent_unless_kept_or_gone(redis, ref):
    redis.zadd(keys.PENDING_INDEX, {ref.uid: 1000})
    begin(redis, ref)
    assert begin(redis, ref, step="delete", intent='{"uid": "u"}').intent == b'{"uid": "u"}'
    assert 0 < redis.ttl(keys.intent(ref.uid)) <= 86400
    redis.delete(keys.intent(ref.uid))
    redis.hset(keys.override(ref.uid), "keep", "true")
    assert begin(redis, ref, step="delete").intent == b"", "kept: the worker decides again, deletes nothing"
    redis.delete(keys.override(ref.uid))
    redis.zrem(keys.PENDING_INDEX, ref.uid)
    assert begin(redis, ref, step="delete").intent == b"", "no longer pending"


# --- FINISH ------------------------------------------------------------------------------------------


def finish(redis, ref, member=None, due=1000, **given):
    call = dict(forget=True, max_entries=1000, card_ttl=600, override_ttl=60)
    return scripts.Finish.of(
        ref, member or ref.uid, due, {"event": "deleted", **ref.as_dict(), "by": "test"}, **{**call, **given}
    ).run(redis)


def test_finish_records_the_outcome_in_one_write_and_ends_the_claim_and_intent(redis, ref):
    redis.zadd(keys.PENDING_INDEX, {ref.uid: 1000})
    redis.set(keys.claim(ref.uid), "run-1")
    redis.set(keys.intent(ref.uid), "{}")
    entry_id = finish(redis, ref, tombstone='{"deletedAt": 1}', tombstone_ttl=600)
    assert redis.zscore(keys.PENDING_INDEX, ref.uid) is None
    [(found, fields)] = redis.xrange(keys.AUDIT_STREAM)
    assert found.decode() == entry_id and fields[b"event"] == b"deleted"
    card = json.loads(redis.hget(keys.card(ref.namespace, ref.name), ref.uid))
    assert card["event"] == "deleted" and card["log"] == [entry_id]
    assert redis.get(keys.tombstone(ref.namespace, ref.name, ref.uid)) == b'{"deletedAt": 1}'
    assert not redis.exists(keys.claim(ref.uid), keys.intent(ref.uid))


def test_finish_of_a_delete_requested_is_followed_until_gone_and_a_later_finish_stops_that(redis, ref):
    finish(redis, ref, follow=1234.5, info='{"checks": 0}')
    assert redis.zscore(keys.TERMINATING, ref.uid) == 1234.5
    assert redis.hget(keys.TERMINATING_INFO, ref.uid) == b'{"checks": 0}'
    finish(redis, ref, forget=False)  # gone (the follower's record)
    assert redis.zscore(keys.TERMINATING, ref.uid) is None and not redis.hexists(keys.TERMINATING_INFO, ref.uid)


def test_finish_of_a_run_for_a_time_since_moved_leaves_the_new_time(redis, ref):
    redis.zadd(keys.PENDING_INDEX, {ref.uid: 2000})
    finish(redis, ref, due=1000)
    assert redis.zscore(keys.PENDING_INDEX, ref.uid) == 2000


def test_finish_of_a_held_job_keeps_its_pods_stage(redis, ref):
    redis.zadd(keys.PENDING_INDEX, {ref.uid: 1000, f"pods:{ref.uid}": 500})
    finish(redis, ref, stages_too=False)
    assert redis.zscore(keys.PENDING_INDEX, f"pods:{ref.uid}") == 500


def test_finish_of_a_stage_done_for_good_marks_it_done(redis, ref):
    finish(redis, ref, member=f"pods:{ref.uid}", done="pods", override_ttl=60)
    assert redis.hget(keys.override(ref.uid), "done:pods") is not None
    assert 0 < redis.ttl(keys.override(ref.uid)) <= 60


# --- the follow-ups' claim and the rate limit's slot ------------------------------------------------


def test_follow_ups_due_are_claimed_for_a_lease_and_the_others_wait(redis):
    redis.zadd(keys.TERMINATING, {"a": 10, "b": 20, "later": 1000})
    assert scripts.ClaimFollowUps(now=100, lease=30, batch=1).run(redis) == ["a"]
    assert scripts.ClaimFollowUps(now=100, lease=30, batch=10).run(redis) == ["b"]
    assert redis.zscore(keys.TERMINATING, "a") == 130 and redis.zscore(keys.TERMINATING, "later") == 1000


def test_rate_slots_are_reserved_one_interval_apart_on_redis_clock(redis):
    first = scripts.ReserveSlot(key="slots", interval=1_000_000).run(redis)
    second = scripts.ReserveSlot(key="slots", interval=1_000_000).run(redis)
    assert first == 0 and 900_000 < second <= 1_000_000
    assert redis.pttl("slots") > 0, "the timeline expires on its own"


def test_a_script_that_runs_on_its_own_is_loaded_when_redis_does_not_know_it(redis):
    redis.script_flush()
    assert scripts.ClaimFollowUps(now=0, lease=1, batch=1).run(redis) == []
    assert redis.script_exists(scripts.ClaimFollowUps.sha) == [True]
    assert redis.script_exists(scripts.Reconcile.sha) == [False], "the others wait for their own first NOSCRIPT"
