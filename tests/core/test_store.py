"""The write protocol (jobttl.core.store.protocol) against a real redis-server and the real RQ: intents in,
the schedule made to match, and what an operator said applied by `due_at`, never by the Lua."""

import time
import uuid

import pytest

from jobttl.core.store import keys
from jobttl.core.store.audit import Audit
from jobttl.core.domain.decisions.decision import Decision, Verdict
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.decisions.plan import GUARDED, Change, Intent
from jobttl.core.store.schedule import Schedule, job_id_for
from jobttl.core.store.protocol import Store
from tests.core.own_redis import redis, server  # noqa: F401 (fixtures)


@pytest.fixture
def store(redis):
    return Store(Schedule(redis, "store", retry_intervals=[]), Audit(redis), burst_limit=None)


def intent(due: int, ref: JobRef | None = None) -> Intent:
    ref = ref or JobRef("kubeflow.org/v1", "TFJob", "team", f"train-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))
    decision = Decision(Verdict.EXPIRES, "ttl", finished_at=due - 60, ttl=60, ttl_source="policy", expires_at=due)
    return Intent(ref, decision, "expires", "event", GUARDED)


def round_trips(redis, action):
    before = redis.info("stats")["total_writes_processed"]
    result = action()
    return redis.info("stats")["total_writes_processed"] - before - 1, result


def test_a_booking_nobody_overrode_is_two_round_trips_and_at_the_decisions_time(store, redis):
    wanted = intent(int(time.time()) + 3600)
    store.apply([intent(int(time.time()) + 60)])  # the scripts are loaded once per Redis
    trips, [done] = round_trips(redis, lambda: store.apply([wanted]))
    assert trips == 2 and (done.change, done.due) == (Change.SCHEDULED, wanted.decision.expires_at)
    assert redis.zscore(keys.PENDING_INDEX, wanted.member) == wanted.decision.expires_at


def test_a_postponed_deletion_is_booked_at_the_operators_time_for_one_round_trip_more(store, redis):
    wanted = intent(int(time.time()) + 3600)
    store.apply([intent(int(time.time()) + 60)])
    until = int(time.time()) + 7200
    redis.hset(keys.override(wanted.ref.uid), mapping={"until": str(until), "by": "someone"})
    trips, [done] = round_trips(redis, lambda: store.apply([wanted]))
    assert trips == 3, "the compare met the override, then compared again with it, then the booking"
    assert (done.change, done.due) == (Change.SCHEDULED, until)
    assert job_id_for(wanted.ref.uid, until) in store.queue.scheduled_job_registry.get_job_ids()
    assert store.apply([wanted])[0].change is Change.UNCHANGED


def test_a_kept_object_books_nothing_and_a_pending_deletion_of_it_is_cancelled_as_kept(store, redis):
    wanted = intent(int(time.time()) + 3600)
    store.apply([wanted])
    redis.hset(keys.override(wanted.ref.uid), "keep", "true")
    [done] = store.apply([wanted])
    assert (done.change, done.reason) == (Change.CANCELLED, "kept-by-operator")
    assert redis.zscore(keys.PENDING_INDEX, wanted.member) is None
    assert store.queue.scheduled_job_registry.get_job_ids() == [], "its RQ job retired"
    assert store.apply([wanted])[0].change is Change.KEPT


def test_only_the_members_an_operator_spoke_of_are_compared_again(store, redis):
    plain, postponed = intent(int(time.time()) + 3600), intent(int(time.time()) + 3600)
    redis.hset(keys.override(postponed.ref.uid), "until", str(int(time.time()) + 7200))
    store.apply([intent(int(time.time()) + 60)])
    calls = lambda: redis.info("commandstats")["cmdstat_evalsha"]["calls"]  # noqa: E731
    before = calls()
    done = store.apply([plain, postponed])
    assert [d.change for d in done] == [Change.SCHEDULED, Change.SCHEDULED]
    assert calls() - before == 3 + 2 * 2, "RECONCILE for both, once more for the postponed; BOOKED and COMMIT each"
