"""The booking scripts' contracts (COMMIT, RETIRE, BOOKED: core/store/lua/*.lua through their wrappers in
`jobttl.core.store.scripts`), against a real redis-server: every branch, state in, writes and answer out."""

import json
import time


from jobttl.core.store import keys, scripts
from tests.core.own_redis import redis, ref, server  # noqa: F401 (fixtures)

REGISTRIES = ("rq:scheduled:q", "rq:finished:q", "rq:failed:q", "rq:deferred:q")


def commit(redis, ref, due, seen=None, dry_run=False, member=None):
    return scripts.Commit(
        ref=ref,
        member=member or ref.uid,
        uid=ref.uid,
        namespace=ref.namespace,
        due=due,
        seen=seen,
        audit_max=1000,
        card_ttl=600,
        dry_run=dry_run,
        fields={**ref.as_dict(), "by": "test"},
    ).run(redis)


def events(redis) -> list[dict[str, str]]:
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in redis.xrange(keys.AUDIT_STREAM)]


# --- COMMIT ------------------------------------------------------------------------------------------


def test_commit_of_a_new_deletion_writes_the_index_the_entry_and_the_card(redis, ref):
    due = int(time.time()) + 86400
    reply = commit(redis, ref, due)
    assert reply == ("scheduled", due, None)
    assert redis.zscore(keys.PENDING_INDEX, ref.uid) == due
    [entry] = events(redis)
    assert (entry["event"], entry["due"], entry["uid"], entry["by"]) == ("scheduled", str(due), ref.uid, "test")
    card = json.loads(redis.hget(keys.card(ref.namespace, ref.name), ref.uid))
    assert (card["event"], card["due"], card["kind"], card["apiVersion"]) == (
        "scheduled",
        str(due),
        "TFJob",
        "kubeflow.org/v1",
    ), "a Kind name is not an identity: its apiVersion too"
    assert redis.ttl(keys.card(ref.namespace, ref.name)) > 86400, "the card outlives the deletion it announces"


def test_commit_of_a_moved_deletion_says_where_from(redis, ref):
    redis.zadd(keys.PENDING_INDEX, {ref.uid: 1000})
    assert commit(redis, ref, 2000, seen=1000) == ("moved", 2000, 1000)
    [entry] = events(redis)
    assert (entry["event"], entry["due"], entry["previousDue"]) == ("moved", "2000", "1000")


def test_commit_of_what_a_concurrent_reconcile_committed_since_is_unchanged_and_recorded_once(redis, ref):
    """Superseded: two reconciles compared nothing pending and booked the same; the second finds it done."""
    assert commit(redis, ref, 2000).change == "scheduled"
    assert commit(redis, ref, 2000, seen=None) == ("unchanged", 2000, 2000)
    assert len(events(redis)) == 1


def test_commit_of_the_same_due_time_it_saw_pending_is_written_again(redis, ref):
    """The compare saw this very due time (its RQ job was gone, or booked otherwise): booked anew."""
    redis.zadd(keys.PENDING_INDEX, {ref.uid: 2000})
    assert commit(redis, ref, 2000, seen=2000).change == "scheduled"


def test_commit_after_an_operator_said_keep_writes_nothing(redis, ref):
    redis.hset(keys.override(ref.uid), "keep", "true")
    assert commit(redis, ref, 2000) == ("kept", 2000, None)
    assert redis.zscore(keys.PENDING_INDEX, ref.uid) is None and events(redis) == []


def test_commit_files_a_dry_run_booking_among_the_dry_run_records_and_a_real_one_out_of_them(redis, ref):
    """Filed by Kind.group (jobttl.core.domain.kinds.registry.group_kind): another group's TFJob would be another set."""
    commit(redis, ref, 2000, dry_run=True)
    assert redis.smembers(keys.DRY_RUN) == {b"TFJob.kubeflow.org"}
    assert redis.zscore(keys.dry_run("TFJob.kubeflow.org"), ref.uid) == 2000
    commit(redis, ref, 3000, seen=2000)
    assert redis.zscore(keys.dry_run("TFJob.kubeflow.org"), ref.uid) is None


# --- RETIRE ------------------------------------------------------------------------------------------


def booked_job(redis, job_id, status="scheduled"):
    key = f"rq:job:{job_id}"
    redis.hset(key, "status", status)
    for extra in (f"{key}:dependents", f"{key}:dependencies", f"rq:results:{job_id}"):
        redis.set(extra, "x")
    redis.zadd(REGISTRIES[0], {job_id: 1})
    redis.rpush("rq:queue:q", job_id)
    return key


def retire(redis, member, due, job_id):
    key = f"rq:job:{job_id}"
    return scripts.Retire(
        job_key=key,
        dependents=f"{key}:dependents",
        dependencies=f"{key}:dependencies",
        results=f"rq:results:{job_id}",
        queue_key="rq:queue:q",
        registries=REGISTRIES,
        member=member,
        due=due,
        job_id=job_id,
    ).run(redis)


def test_retire_removes_a_replaced_job_from_everywhere_rq_keeps_it(redis, ref):
    job_id = f"delete-{ref.uid}-1000"
    key = booked_job(redis, job_id)
    redis.zadd(keys.PENDING_INDEX, {ref.uid: 2000})  # moved on
    assert retire(redis, ref.uid, 1000, job_id) is True
    assert not redis.exists(key, f"{key}:dependents", f"{key}:dependencies", f"rq:results:{job_id}")
    assert redis.zscore(REGISTRIES[0], job_id) is None and redis.lrange("rq:queue:q", 0, -1) == []


def test_retire_leaves_a_job_the_index_names_again(redis, ref):
    job_id = f"delete-{ref.uid}-1000"
    key = booked_job(redis, job_id)
    redis.zadd(keys.PENDING_INDEX, {ref.uid: 1000})  # booked again meanwhile
    assert retire(redis, ref.uid, 1000, job_id) is False
    assert redis.exists(key)


def test_retire_leaves_a_job_a_worker_runs(redis, ref):
    job_id = f"delete-{ref.uid}-1000"
    key = booked_job(redis, job_id, status="started")
    assert retire(redis, ref.uid, 1000, job_id) is False
    assert redis.exists(key)


# --- BOOKED ------------------------------------------------------------------------------------------


def booked(redis, job_key, notice=None, at=0.0, omitted=("worker_name",)):
    return scripts.Booked(
        job_key=job_key,
        finished="rq:finished:q",
        failed="rq:failed:q",
        outbox="outbox",
        job_id="delete-x-1",
        status="scheduled",
        notice=notice,
        notice_at=at,
        omitted=omitted,
    ).run(redis)


def test_booked_tidies_what_an_earlier_run_of_the_same_id_left(redis):
    redis.hset("rq:job:delete-x-1", mapping={"status": "scheduled", "worker_name": "w", "ended_at": "t"})
    redis.expire("rq:job:delete-x-1", 60)
    redis.zadd("rq:finished:q", {"delete-x-1": 1})
    redis.zadd("rq:failed:q", {"delete-x-1": 1})
    booked(redis, "rq:job:delete-x-1", omitted=("worker_name", "ended_at"))
    assert redis.hgetall("rq:job:delete-x-1") == {b"status": b"scheduled"}
    assert redis.ttl("rq:job:delete-x-1") == -1, "kept until it runs"
    assert redis.zcard("rq:finished:q") == 0 and redis.zcard("rq:failed:q") == 0


def test_booked_posts_the_change_to_the_outbox_once(redis):
    redis.hset("rq:job:delete-x-1", "status", "scheduled")
    booked(redis, "rq:job:delete-x-1", notice="x|1000", at=5.0)
    booked(redis, "rq:job:delete-x-1", notice="x|1000", at=9.0)
    assert redis.zrange("outbox", 0, -1, withscores=True) == [(b"x|1000", 5.0)]
    booked(redis, "rq:job:delete-x-1")
    assert redis.zcard("outbox") == 1, "no notice, nothing posted"
