"""What operators ask and do, against real Redis (jobttl.core.operations)."""

import time
import uuid

import pytest

from jobttl.core import keys
from jobttl.core.audit import Audit
from jobttl.core.identity import InvalidIdentity
from jobttl.core.kinds import TFJOB
from jobttl.core.operations import NotFound, Operations, UnknownRedis
from jobttl.core.policy import Policy
from jobttl.core.reconcile import Reconciler
from jobttl.core.schedule import Schedule
from tests.fixtures import finished_status, tfjob, with_server_fields


@pytest.fixture
def ops(redis, queue_name):
    schedule, audit = Schedule(redis, queue_name, []), Audit(redis)
    return Operations(redis, schedule, audit, Reconciler(schedule, audit, Policy()))


def scheduled(ops, name, finished_at, ttl=60, uid=None):
    obj = with_server_fields(tfjob(name, "team", ttl=ttl), uid=uid)
    obj["status"] = finished_status(finished_at)
    ops.reconciler.reconcile(obj, TFJOB, "event")
    return obj


def test_postponing_an_overdue_deletion_counts_from_now(ops):
    name = f"late-{uuid.uuid4().hex[:6]}"
    scheduled(ops, name, time.time() - 86400)
    postponed = ops.postpone("team", name, 7200)
    assert postponed.due >= time.time() + 7200 - 5


def test_operator_actions_apply_to_every_object_that_had_the_name(ops):
    name = f"twice-{uuid.uuid4().hex[:6]}"
    old = scheduled(ops, name, time.time() + 600)
    new = scheduled(ops, name, time.time() + 900)
    ops.cancel("team", name)
    for obj in (old, new):
        assert ops.schedule.override(obj["metadata"]["uid"])["keep"] == "true"
        assert ops.schedule.get(obj["metadata"]["uid"]) is None


@pytest.mark.parametrize("name", ["*", "a?", "[x]", "../secret", ""])
def test_lookups_take_only_valid_names(ops, name):
    with pytest.raises(InvalidIdentity):
        ops.find("team", name)


def test_a_lookup_reads_only_that_jobs_keys(ops, redis):
    name = f"one-{uuid.uuid4().hex[:6]}"
    scheduled(ops, name, time.time())
    for _ in range(50):  # noise the lookup must not scan
        ops.audit.record("scheduled", None)
    found = ops.find("team", name)
    assert [e["event"] for e in found["history"]] == ["scheduled"] and len(found["pending"]) == 1
    with pytest.raises(NotFound):
        ops.find("team", f"none-{uuid.uuid4().hex[:6]}")


def test_a_redis_that_never_held_a_jobttl_schedule_is_recognised(redis_server, queue_name):
    import redis as redis_lib

    empty = redis_lib.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/9")  # a database nobody used
    empty.flushdb()
    fresh = Operations(empty, Schedule(empty, queue_name, []), Audit(empty))
    with pytest.raises(UnknownRedis, match="JOBTTL_REDIS_URL"):
        fresh.check_redis()
    empty.set(keys.SCHEMA, "2")
    fresh.check_redis()
