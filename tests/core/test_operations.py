"""What operators ask and do, against real Redis (jobttl.core.services.operations)."""

import time
import uuid

import pytest

from jobttl.core.store import keys
from jobttl.core.store.audit import Audit
from jobttl.core.domain.wire.identity import InvalidIdentity
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.services.operations import NotFound, Operations, UnknownRedis
from jobttl.core.domain.rules.policy import Policy, parse_policy
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.store.schedule import PODS_STAGE, Change, Schedule, member_for
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


# --- the pods stage is the job's too ---------------------------------------------------------------------


def staged_ops(redis, queue_name, policy):
    schedule, audit = Schedule(redis, queue_name, []), Audit(redis)
    return Operations(redis, schedule, audit, Reconciler(schedule, audit, parse_policy(policy)))


def test_cancel_keeps_the_pods_of_a_job_that_has_only_a_pods_stage(redis, queue_name):
    ops = staged_ops(redis, queue_name, {"podTTL": "1h"})  # no TTL: the pods stage is all there is
    name = f"pods-only-{uuid.uuid4().hex[:6]}"
    obj = scheduled(ops, name, time.time(), ttl=None)
    uid = obj["metadata"]["uid"]
    assert ops.schedule.due_of(member_for(uid, PODS_STAGE)) is not None and ops.schedule.due_of(uid) is None
    ops.cancel("team", name)
    assert ops.schedule.due_of(member_for(uid, PODS_STAGE)) is None
    assert ops.reconciler.reconcile(obj, TFJOB, "resync").change is not Change.SCHEDULED
    assert ops.schedule.due_of(member_for(uid, PODS_STAGE)) is None, "no event or resync books it again"


def test_postpone_moves_every_stage_to_one_time_from_the_latest(redis, queue_name):
    ops = staged_ops(redis, queue_name, {"ttl": "2h", "podTTL": "1h"})
    name = f"later-{uuid.uuid4().hex[:6]}"
    finished = int(time.time())
    obj = scheduled(ops, name, finished, ttl=None)
    uid = obj["metadata"]["uid"]
    assert (ops.schedule.due_of(uid), ops.schedule.due_of(member_for(uid, PODS_STAGE))) == (
        finished + 7200,
        finished + 3600,
    )
    ops.postpone("team", name, 600)
    until = finished + 7200 + 600
    assert ops.schedule.override(uid)["until"] == str(until)
    assert ops.schedule.due_of(uid) == until and ops.schedule.due_of(member_for(uid, PODS_STAGE)) == until
    postponed = [e.fields for e in ops.audit.history("team", name) if e.fields["event"] == "postponed"]
    assert len(postponed) == 1 and postponed[0]["newDue"] == str(until) and postponed[0]["due"] == str(finished + 7200)
    outcomes, _ = ops.reconciler.reconcile_many([(obj, TFJOB)], "resync")  # events and resyncs keep the new time
    assert {o.change for o in outcomes} == {Change.UNCHANGED}
    assert ops.schedule.due_of(member_for(uid, PODS_STAGE)) == until


# --- taking an operator's word back ---------------------------------------------------------------


def test_undoing_a_cancel_takes_back_only_the_keep(ops):
    """A postpone said too, and a stage done for good, stand; the next reconcile books at the postponed time."""
    name = f"undo-{uuid.uuid4().hex[:6]}"
    obj = scheduled(ops, name, time.time(), ttl=600)
    uid = obj["metadata"]["uid"]
    until = ops.postpone("team", name, 3600).due
    ops.cancel("team", name)
    ops.schedule.mark_done(uid, PODS_STAGE)
    undone = ops.undo("team", name, "cancel")
    assert [r.uid for r in undone.refs] == [uid]
    said = ops.schedule.override(uid)
    assert "keep" not in said and said["until"] == str(until) and f"done:{PODS_STAGE}" in said
    assert ops.reconciler.reconcile(obj, TFJOB, "resync").change is Change.SCHEDULED
    assert ops.schedule.due_of(uid) == until
    [entry] = [e.fields for e in ops.audit.history("team", name) if e.fields["event"] == "cancel-undone"]
    assert entry["by"] == "operator" and entry["saidBy"] == "operator" and "until" not in entry

    ops.undo("team", name, "postpone")
    assert set(ops.schedule.override(uid)) == {f"done:{PODS_STAGE}"}, "by and at went with what they described"
    assert ops.reconciler.reconcile(obj, TFJOB, "resync").change is Change.MOVED
    with pytest.raises(NotFound):
        ops.undo("team", name, "postpone")


def test_an_undo_asks_the_workers_for_a_resync(ops):
    name = f"undo-{uuid.uuid4().hex[:6]}"
    scheduled(ops, name, time.time(), ttl=600)
    ops.cancel("team", name)
    time.sleep(1.01 - time.time() % 1)  # resyncs are asked for once a second: not one an earlier test asked for
    start = int(time.time())
    ops.undo("team", name, "cancel")
    asked = [f"resync-{slot}" for slot in range(start, int(time.time()) + 1)]
    assert set(asked) & set(ops.queue.job_ids), (asked, ops.queue.job_ids)


# --- a Kind name is not a kind: batch/v1's Job and Volcano's Job of one name are two jobs ------------


def test_a_batch_job_and_a_volcano_job_of_one_name_are_two_kinds_to_operators(redis, queue_name):
    from jobttl.core.domain.kinds.registry import BATCH_JOB, KindRegistry
    from jobttl.core.services.operations import Ambiguous
    from tests.fixtures import job_object, volcano_job

    policy = parse_policy({"kinds": ["Job", "batch.volcano.sh/v1alpha1/Job"], "ttl": "1h"})
    schedule, audit = Schedule(redis, queue_name, []), Audit(redis)
    ops = Operations(redis, schedule, audit, Reconciler(schedule, audit, policy))
    kinds, name = KindRegistry(policy.kinds), f"twin-{uuid.uuid4().hex[:6]}"
    batch, volcano = (
        with_server_fields(o)
        for o in (job_object(BATCH_JOB, name, "team", at=time.time()), volcano_job(name, "team", at=time.time()))
    )
    for obj in (batch, volcano):
        kind = kinds.get(obj["apiVersion"], obj["kind"])
        assert ops.reconciler.reconcile(obj, kind, "event").change is Change.SCHEDULED
    # Both are a `Job` by Kind: one name, two kinds, so operators must say which.
    with pytest.raises(Ambiguous, match=r"several kinds \(Job, Job\.batch\.volcano\.sh\)"):
        ops.cancel("team", name)
    with pytest.raises(Ambiguous, match=r"Job, Job\.batch\.volcano\.sh"):
        ops.find("team", name)
    found = ops.find("team", name, "Job.batch.volcano.sh")
    assert (found["kind"], found["apiVersion"]) == ("Job", "batch.volcano.sh/v1alpha1")
    assert [d["apiVersion"] for d in found["decisions"]] == ["batch.volcano.sh/v1alpha1"]
    kept = ops.cancel("team", name, "Job.batch.volcano.sh")
    assert kept.ref.uid == volcano["metadata"]["uid"] and str(kept.ref).startswith(f"Job.batch.volcano.sh team/{name}")
    assert schedule.get(volcano["metadata"]["uid"]) is None
    assert schedule.get(batch["metadata"]["uid"]) is not None, "the batch/v1 Job's deletion stays booked"
    assert ops.find("team", name, "Job")["apiVersion"] == "batch/v1"  # a bare Job is batch/v1's, as in `kinds`
    # Now only the batch Job is pending: a name alone finds it.
    assert ops.postpone("team", name, 600).ref.uid == batch["metadata"]["uid"]


def test_a_failed_job_not_of_jobttls_shape_is_left_out_of_the_failures_not_a_crash(ops, redis, caplog):
    """Review finding: Redis is not trusted, and a "delete" job written there by hand with other
    arguments made `jobttl failed` (and the console's page) raise instead of listing the rest."""
    from rq.job import Job
    from rq.registry import FailedJobRegistry
    from rq.serializers import JSONSerializer

    forged = Job.create(
        ops.schedule.tasks.delete, args=[], connection=redis, serializer=JSONSerializer, origin=ops.queue.name
    )
    forged.save()
    FailedJobRegistry(queue=ops.queue).add(forged, ttl=3600, exc_string="forged")
    with caplog.at_level("WARNING", logger="jobttl.operations"):
        assert ops.failed() == []
    assert [r.jobId for r in caplog.records if getattr(r, "event", None) == "foreign-job"] == [forged.id]
