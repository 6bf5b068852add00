"""The record-keeping scripts' contracts (RECORD, HISTORY, DRY_RUN_FILE, DUE_COUNTS: core/store/lua/*.lua
through their wrappers in `jobttl.core.store.scripts`), against a real redis-server."""

import json
import uuid

import pytest

from jobttl.core.store import keys, scripts
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import group_kind
from tests.core.own_redis import redis, server  # noqa: F401 - fixtures: a Redis of this module's own


def a_ref(name="train"):
    return JobRef("kubeflow.org/v1", "TFJob", "team", name, str(uuid.uuid4()))


# --- RECORD ------------------------------------------------------------------------------------------


def test_record_about_a_job_goes_to_the_trail_and_its_card(redis):
    ref = a_ref()
    entry_id = scripts.Record(
        ref=ref,
        audit_max=1000,
        card_ttl=600,
        uid=ref.uid,
        entry={"event": "postponed", **ref.as_dict(), "by": "operator"},
    ).run(redis)
    [(found, fields)] = redis.xrange(keys.AUDIT_STREAM)
    assert found.decode() == entry_id and fields[b"event"] == b"postponed"
    card = json.loads(redis.hget(keys.card("team", "train"), ref.uid))
    assert card["event"] == "postponed" and card["log"] == [entry_id] and card["kind"] == "TFJob"
    assert card["apiVersion"] == "kubeflow.org/v1", "a Kind name is not an identity: its apiVersion too"


def test_record_about_no_job_goes_to_the_trail_only(redis):
    scripts.Record(ref=None, audit_max=1000, card_ttl=600, uid=None, entry={"event": "resync"}).run(redis)
    assert redis.xlen(keys.AUDIT_STREAM) == 1 and redis.keys(keys.CARD_PREFIX + "*") == []


def test_a_card_keeps_the_latest_uids_that_had_the_name(redis):
    for _ in range(21):
        ref = a_ref("daily")
        scripts.Record(ref=ref, audit_max=1000, card_ttl=600, uid=ref.uid, entry={"event": "x", **ref.as_dict()}).run(
            redis
        )
    assert redis.hlen(keys.card("team", "daily")) == 20
    assert redis.hexists(keys.card("team", "daily"), ref.uid), "the oldest went, not the newest"


# --- HISTORY -----------------------------------------------------------------------------------------


def file(redis, uid, group, finished_at, limit=2):
    return scripts.KeepLastFile(
        prefix=keys.KEEPLAST_PREFIX,
        uid=uid,
        group=group,
        finished_at=finished_at,
        limit=limit,
        record=json.dumps({"group": group, "uid": uid}),
        most=50,
    ).run(redis)


def test_history_ranks_a_job_within_its_group_and_answers_those_it_pushed_beyond(redis):
    assert file(redis, "a", "g", 100) == (0, None, ())
    assert file(redis, "b", "g", 200).rank == 0
    filed = file(redis, "c", "g", 300)
    assert (filed.rank, filed.beyond_at) == (0, None)
    [(uid, record, rank, at)] = filed.pushed_out
    assert (uid, json.loads(record)["uid"], rank, at) == ("a", "a", 2, 300), "a fell beyond when c finished"


def test_history_of_an_older_job_says_when_it_fell_beyond(redis):
    file(redis, "b", "g", 200)
    file(redis, "c", "g", 300)
    assert file(redis, "a", "g", 100)[:2] == (2, 300)


def test_history_leaves_out_a_job_beyond_that_is_pending_by_then(redis):
    redis.zadd(keys.PENDING_INDEX, {"a": 250})
    file(redis, "a", "g", 100)
    file(redis, "b", "g", 200)
    assert file(redis, "c", "g", 300).pushed_out == ()


def test_history_moves_a_job_to_its_new_group_and_takes_it_out_of_any(redis):
    file(redis, "a", "g", 100)
    file(redis, "a", "h", 100)
    assert redis.zrange(keys.KEEPLAST_PREFIX + "g", 0, -1) == [] and redis.zrange(
        keys.KEEPLAST_PREFIX + "h", 0, -1
    ) == [b"a"]
    assert file(redis, "a", None, 0) == (None, None, ())
    assert redis.zcard(keys.KEEPLAST_PREFIX + "h") == 0 and not redis.hexists(keys.KEEPLAST_RECORDS, "a")


# --- DRY_RUN_FILE and DUE_COUNTS ---------------------------------------------------------------------


def booked(redis, uid, due, dry_run):
    redis.zadd(keys.PENDING_INDEX, {uid: due})
    redis.hset(
        f"rq:job:delete-{uid}-{due}",
        "meta",
        json.dumps({"ref": ["kubeflow.org/v1", "TFJob", "team", "x"], "dryRun": dry_run}),
    )


def test_dry_run_file_files_a_dry_run_booking_by_its_kind_and_group_and_takes_a_real_one_out(redis):
    booked(redis, "u", 1000, True)
    assert scripts.DryRunFile(member="u", job_prefix="rq:job:delete-u-").run(redis) is True
    assert redis.zscore(keys.dry_run("TFJob.kubeflow.org"), "u") == 1000
    assert redis.smembers(keys.DRY_RUN) == {b"TFJob.kubeflow.org"}
    booked(redis, "u", 1000, False)
    assert scripts.DryRunFile(member="u", job_prefix="rq:job:delete-u-").run(redis) is False
    assert redis.zscore(keys.dry_run("TFJob.kubeflow.org"), "u") is None


def test_dry_run_file_of_a_member_no_longer_pending_takes_it_out(redis):
    redis.sadd(keys.DRY_RUN, "TFJob.kubeflow.org")
    redis.zadd(keys.dry_run("TFJob.kubeflow.org"), {"gone": 5})
    assert scripts.DryRunFile(member="gone", job_prefix="rq:job:delete-gone-").run(redis) is False
    assert redis.zcard(keys.dry_run("TFJob.kubeflow.org")) == 0


@pytest.mark.parametrize(
    "api_version, kind",
    [("batch/v1", "Job"), ("batch.volcano.sh/v1alpha1", "Job"), ("kubeflow.org/v2beta1", "MPIJob"), ("v1", "Pod")],
)
def test_dry_run_file_names_a_kind_as_python_does(redis, api_version, kind):
    """The script's group_kind (prelude.lua) and jobttl.core.domain.kinds.registry.group_kind, through one table:
    the gauges split what the script filed with the Python one."""
    redis.zadd(keys.PENDING_INDEX, {"u": 1000})
    redis.hset("rq:job:delete-u-1000", "meta", json.dumps({"ref": [api_version, kind, "team", "x"], "dryRun": True}))
    assert scripts.DryRunFile(member="u", job_prefix="rq:job:delete-u-").run(redis) is True
    assert redis.smembers(keys.DRY_RUN) == {group_kind(api_version, kind).encode()}
    assert redis.zscore(keys.dry_run(group_kind(api_version, kind)), "u") == 1000


def test_due_counts_count_deletions_and_dry_run_records_apart_by_time(redis):
    for uid, due, dry in (("a", 100, False), ("b", 200, True), ("c", 300, False)):
        booked(redis, uid, due, dry)
        scripts.DryRunFile(member=uid, job_prefix=f"rq:job:delete-{uid}-").run(redis)
    count = scripts.CountDue(times=(150, 1000))
    counts = count.counts(count.run(redis))
    assert counts.due == (1, 2) and counts.dry_run == {"TFJob.kubeflow.org": (0, 1)} and counts.dry_run_total(1) == 1
