"""Dry run is never due or overdue: the dry-run records beside the index, against real Redis.

What dry run decides stays pending past its due time, as a would-delete. The schedule's gauges
(`jobttl.core.metrics`) and `jobttl status` count it apart, from the sorted sets the scripts
keep beside the index (`jobttl:dry-run:<kind>`), by kind, and every way a member leaves the
index or changes mode keeps them true. A Redis from before those sets has them filed once
(`jobttl.core.upgrade`).
"""

import time
import uuid

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobttl.core import keys, upgrade
from jobttl.core.audit import Audit
from jobttl.core.kinds import PYTORCHJOB, TFJOB
from jobttl.core.metrics import Metrics
from jobttl.core.operations import Operations
from jobttl.core.policy import parse_policy
from jobttl.core.reconcile import Reconciler
from jobttl.core.schedule import Change, Schedule, file_dry_run
from tests.fixtures import job_object, with_server_fields
from tests.services import RedisServer

# A rule's dry run, global off: jobs labelled rehearsal=true are only rehearsed.
PER_RULE = {"kinds": ["TFJob", "PyTorchJob"], "rules": [
    {"name": "rehearsal", "selector": {"matchLabels": {"rehearsal": "true"}}, "dryRun": True}]}
HOUR = 3600


@pytest.fixture(scope="module")
def server():
    """A Redis of its own: the index and the dry-run sets are one per Redis, whatever the queue."""
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def redis(server):
    client = server.client()
    client.flushall()
    return client


@pytest.fixture
def schedule(redis):
    return Schedule(redis, "dry", retry_intervals=[])


def reconciler(schedule, policy=PER_RULE):
    return Reconciler(schedule, Audit(schedule.redis), parse_policy(policy))


def finished(kind=TFJOB, rehearsal=False, ago=HOUR, ttl=60):
    """Finished `ago` seconds ago with this TTL: due ago - ttl seconds ago."""
    obj = with_server_fields(job_object(kind, f"j-{uuid.uuid4().hex[:8]}", "ml", at=time.time() - ago, ttl=ttl))
    if rehearsal:
        obj["metadata"]["labels"] = {"rehearsal": "true"}
    return obj


def gauges(redis) -> dict[tuple[str, tuple], float]:
    text = generate_latest(Metrics(redis, "dry").registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def overdue(redis) -> float:
    return gauges(redis)[("jobttl_overdue_deletions", ())]


def would_delete(redis) -> dict[str, float]:
    return {dict(labels)["kind"]: value for (name, labels), value in gauges(redis).items()
            if name == "jobttl_dry_run_would_delete"}


def test_a_rules_dry_run_records_are_counted_by_kind_and_never_overdue(schedule, redis):
    r = reconciler(schedule)
    for obj, kind in [(finished(TFJOB, True), TFJOB), (finished(TFJOB, True), TFJOB),
                      (finished(PYTORCHJOB, True), PYTORCHJOB), (finished(TFJOB), TFJOB),
                      (finished(TFJOB, True, ago=60, ttl=HOUR), TFJOB)]:  # a rehearsal not due yet
        assert r.reconcile(obj, kind, "event").change is Change.SCHEDULED
    assert overdue(redis) == 1  # the one real deletion, due an hour ago
    assert would_delete(redis) == {"TFJob": 2, "PyTorchJob": 1}  # due now; the one due in an hour is not
    assert gauges(redis)[("jobttl_pending_deletions", ())] == 5
    status = Operations(redis, schedule, Audit(redis)).status()
    assert (status["overdue"], status["dueWithinHour"], status["dryRunWouldDelete"]) == (1, 1, 3)


def test_a_dry_run_record_leaves_the_counts_with_its_pending_entry(schedule, redis):
    r = reconciler(schedule)
    restarted, cancelled, kept, gone = (finished(rehearsal=True) for _ in range(4))
    for obj in (restarted, cancelled, kept, gone):
        r.reconcile(obj, TFJOB, "event")
    assert would_delete(redis) == {"TFJob": 4}
    # A job that is no longer finished (restarted) ...
    assert r.reconcile({**restarted, "status": {}}, TFJOB, "event").change is Change.CANCELLED
    # ... one `jobttl cancel` keeps ...
    Operations(redis, schedule, Audit(redis), r).cancel("ml", cancelled["metadata"]["name"])
    # ... one an operator's keep meets at its next event ...
    schedule.set_override(kept["metadata"]["uid"], {"keep": "true"}, "operator")
    assert r.reconcile(kept, TFJOB, "event").change is Change.CANCELLED
    # ... and one gone from the cluster.
    assert r.forget(schedule.get(gone["metadata"]["uid"]).ref, "gone", "worker").change is Change.CANCELLED
    assert redis.zcard(keys.PENDING_INDEX) == 0
    assert would_delete(redis) == {"TFJob": 0} and overdue(redis) == 0


def test_a_rule_turning_dry_run_off_makes_its_deletions_real_and_overdue_again(schedule, redis):
    obj = finished(rehearsal=True)
    reconciler(schedule).reconcile(obj, TFJOB, "event")
    assert (overdue(redis), would_delete(redis)) == (0, {"TFJob": 1})
    # The same rule, dry run off: the same due time, now a real deletion (held by no guard here).
    real = {**PER_RULE, "rules": [{**PER_RULE["rules"][0], "dryRun": False}]}
    outcome = reconciler(schedule, real).reconcile(obj, TFJOB, "event")
    assert outcome.change is Change.SCHEDULED and not schedule.get(obj["metadata"]["uid"]).dry_run
    assert (overdue(redis), would_delete(redis)) == (1, {"TFJob": 0})
    # And back: dry run again.
    reconciler(schedule).reconcile(obj, TFJOB, "event")
    assert (overdue(redis), would_delete(redis)) == (0, {"TFJob": 1})


def test_a_redis_from_before_the_dry_run_sets_has_them_filed_once_on_start(schedule, redis):
    r = reconciler(schedule)
    dry, real = finished(rehearsal=True), finished()
    r.reconcile(dry, TFJOB, "event")
    r.reconcile(real, TFJOB, "event")
    upgrade.ensure(redis)
    # As the previous release left it: the same index and records, no dry-run sets.
    redis.delete(keys.DRY_RUN, keys.dry_run("TFJob"), keys.DRY_RUN_INDEXED)
    assert overdue(redis) == 2  # what every dashboard showed before
    assert upgrade.ensure(redis) is True
    assert (overdue(redis), would_delete(redis)) == (1, {"TFJob": 1})
    assert upgrade.ensure(redis) is False  # marked: cheap from now on
    assert redis.get(keys.SCHEMA) == b"2"  # the layout an earlier 0.2 process reads is the same


def test_the_scrape_reads_a_bounded_number_of_keys_however_many_dry_run_records(schedule, redis):
    r = reconciler(schedule)
    for _ in range(200):
        r.reconcile(finished(rehearsal=True), TFJOB, "event")
    before = redis.info("commandstats")
    gauges(redis)
    after = redis.info("commandstats")
    calls = {name: after[name]["calls"] - before.get(name, {"calls": 0})["calls"] for name in after}
    # The record hashes are never read at scrape time: ZCOUNTs (a dry-run set per kind) instead.
    assert calls.get("cmdstat_hmget", 0) == calls.get("cmdstat_hget", 0) == calls.get("cmdstat_hgetall", 0) == 0
    assert calls.get("cmdstat_zcount", 0) <= 4
    assert would_delete(redis) == {"TFJob": 200}


def test_the_repair_files_what_was_written_without_the_dry_run_sets_and_drops_what_they_hold_alone(schedule, redis):
    """What the resync runs (jobttl.worker.resync): a process of the previous release, during a
    rollout, wrote the index but not the dry-run sets."""
    r = reconciler(schedule)
    rehearsal, other, real = finished(rehearsal=True), finished(rehearsal=True), finished()
    for obj in (rehearsal, other, real):
        r.reconcile(obj, TFJOB, "event")
    assert (overdue(redis), would_delete(redis)) == (1, {"TFJob": 2})
    # Booked without its dry-run entry: counted as overdue until repaired.
    redis.zrem(keys.dry_run("TFJob"), rehearsal["metadata"]["uid"])
    assert (overdue(redis), would_delete(redis)) == (2, {"TFJob": 1})
    assert file_dry_run(redis) == 2
    assert (overdue(redis), would_delete(redis)) == (1, {"TFJob": 2})
    # Cancelled without taking its dry-run entry out: it would hide the real overdue deletion.
    redis.zrem(keys.PENDING_INDEX, other["metadata"]["uid"])
    assert (overdue(redis), would_delete(redis)) == (0, {"TFJob": 2})
    assert file_dry_run(redis) == 1
    assert (overdue(redis), would_delete(redis)) == (1, {"TFJob": 1})
    assert redis.zrange(keys.dry_run("TFJob"), 0, -1) == [rehearsal["metadata"]["uid"].encode()]
