"""The one reconcile path against real Redis and the real RQ (jobttl.core.services.reconcile, .schedule, .scripts)."""

import json
import time
import uuid
import zlib

import pytest
from redis import Redis
from rq.job import Job, JobStatus
from rq.registry import ScheduledJobRegistry
from rq.serializers import JSONSerializer

from jobttl.core.store import keys, scripts
from jobttl.core.store.audit import Audit
from jobttl.core.domain.decisions.decision import decide
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.rules.policy import parse_policy
from jobttl.core.services.recent import Recent
from jobttl.core.services.reconcile import COLLECT, RELEASE, Reconciler
from jobttl.core.store.schedule import Change, InvalidNotice, Schedule, job_id_for, notice_member, warning_id_for
from tests.fixtures import finished_status, running_status, tfjob, with_server_fields
from tests.services import RedisServer


@pytest.fixture
def schedule(redis, queue_name):
    return Schedule(redis, queue_name, retry_intervals=[1, 2])


@pytest.fixture
def audit(redis):
    return Audit(redis)


@pytest.fixture
def reconciler(schedule, audit):
    return Reconciler(schedule, audit, parse_policy(None), burst_limit=3)


def finished(ttl=3600, at=None, name=None, **meta):
    # Names are unique per test: tests share one Redis, and each name has a history card.
    obj = with_server_fields(tfjob(name or f"train-{uuid.uuid4().hex[:8]}", f"team-{uuid.uuid4().hex[:6]}", ttl=ttl))
    obj["status"] = finished_status(time.time() if at is None else at)
    obj["metadata"].update(meta)
    return obj


def running(obj):
    return {**obj, "status": running_status(time.time())}


def uid(obj):
    return obj["metadata"]["uid"]


def due(obj):
    return decide(obj, TFJOB).expires_at


def scheduled_ids(schedule):
    return ScheduledJobRegistry(queue=schedule.queue).get_job_ids()


def trail(audit, obj):
    return [e.fields for e in audit.history(obj["metadata"]["namespace"], obj["metadata"]["name"])]


def test_a_future_deletion_is_one_scheduled_rq_job_with_an_inspectable_record(reconciler, schedule):
    obj = finished()
    outcome = reconciler.reconcile(obj, TFJOB, "event")
    assert outcome.change is Change.SCHEDULED and outcome.due == due(obj)
    assert scheduled_ids(schedule) == [job_id_for(uid(obj), due(obj))]
    pending = schedule.get(uid(obj))
    assert (pending.ref.name, pending.due, pending.ttl, pending.ttl_source, pending.state) == (
        obj["metadata"]["name"],
        due(obj),
        3600,
        "spec.runPolicy.ttlSecondsAfterFinished",
        "scheduled",
    )
    assert schedule.redis.zscore(keys.PENDING_INDEX, uid(obj)) == due(obj)


def test_duplicates_change_nothing_and_add_nothing_to_the_trail(reconciler, schedule, audit):
    obj = finished()
    changes = [reconciler.reconcile(obj, TFJOB, "event").change for _ in range(20)]
    assert changes == [Change.SCHEDULED] + [Change.UNCHANGED] * 19
    assert scheduled_ids(schedule) == [job_id_for(uid(obj), due(obj))]
    assert [e["event"] for e in trail(audit, obj)] == ["scheduled"]


def test_a_new_expiry_moves_the_deletion_and_retires_the_old_rq_job(reconciler, schedule, redis):
    obj = finished(ttl=3600)
    reconciler.reconcile(obj, TFJOB, "event")
    longer = {**obj, "spec": {**obj["spec"], "runPolicy": {"ttlSecondsAfterFinished": 7200}}}
    outcome = reconciler.reconcile(longer, TFJOB, "event")
    assert outcome.change is Change.MOVED and outcome.previous_due == due(obj)
    assert scheduled_ids(schedule) == [job_id_for(uid(obj), due(longer))]
    assert not redis.exists(f"rq:job:{job_id_for(uid(obj), due(obj))}"), "the old RQ job hash must not leak"


def test_an_object_that_no_longer_expires_is_cancelled_once(reconciler, schedule, audit):
    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    assert reconciler.reconcile(running(obj), TFJOB, "event").change is Change.CANCELLED
    assert reconciler.reconcile(running(obj), TFJOB, "event").label == "ignored:not-finished"
    assert schedule.get(uid(obj)) is None and scheduled_ids(schedule) == []
    assert [e["event"] for e in trail(audit, obj)] == ["cancelled", "scheduled"]
    assert trail(audit, obj)[0]["reason"] == "not-finished"


def test_why_a_job_is_kept_is_on_its_history_card(reconciler, audit):
    obj = running(finished())
    reconciler.reconcile(obj, TFJOB, "event")
    [decision] = audit.decisions(obj["metadata"]["namespace"], obj["metadata"]["name"]).values()
    assert decision["reason"] == "not-finished" and decision["detail"] == "TFJob has not finished"
    assert trail(audit, obj) == [], "a decision that changes nothing is not news for the trail"


def test_a_recreated_job_has_its_own_schedule(reconciler, schedule):
    old = finished()
    new = {**old, "metadata": {**old["metadata"], "uid": str(uuid.uuid4())}}
    reconciler.reconcile(old, TFJOB, "event")
    reconciler.reconcile(new, TFJOB, "event")
    assert sorted(scheduled_ids(schedule)) == sorted([job_id_for(uid(old), due(old)), job_id_for(uid(new), due(new))])


def test_an_already_expired_deletion_is_queued_for_now_not_scheduled(reconciler, schedule):
    obj = finished(ttl=60, at=time.time() - 3600)
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.SCHEDULED
    assert scheduled_ids(schedule) == []
    assert schedule.queue.job_ids == [job_id_for(uid(obj), due(obj))]


def test_forget_removes_the_rq_job_and_the_index_entry(reconciler, schedule, redis):
    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    from jobttl.core.domain.wire.identity import JobRef

    assert reconciler.forget(JobRef.of(obj), "deleted", "event").change is Change.CANCELLED
    assert scheduled_ids(schedule) == [] and schedule.get(uid(obj)) is None
    assert not redis.exists(f"rq:job:{job_id_for(uid(obj), due(obj))}")
    assert reconciler.forget(JobRef.of(obj), "deleted", "event").label == "ignored:deleted"


def test_a_deletion_whose_rq_job_was_lost_is_enqueued_again(reconciler, schedule, redis):
    """A process that died between the script and RQ's write left the index naming no RQ job."""
    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    Job.fetch(job_id_for(uid(obj), due(obj)), connection=redis, serializer=JSONSerializer).delete()
    assert reconciler.reconcile(obj, TFJOB, "resync").change is Change.SCHEDULED
    assert scheduled_ids(schedule) == [job_id_for(uid(obj), due(obj))]


def test_a_permanently_failed_deletion_stays_failed_until_retried_but_a_new_due_replaces_it(reconciler, schedule):
    obj = finished(ttl=60, at=time.time() - 3600)
    reconciler.reconcile(obj, TFJOB, "event")
    job = schedule.queue.fetch_job(job_id_for(uid(obj), due(obj)))
    job.set_status(JobStatus.FAILED)
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.SCHEDULED, "out of retries on an outage: again"
    job = schedule.queue.fetch_job(job_id_for(uid(obj), due(obj)))
    job.set_status(JobStatus.FAILED)
    schedule.mark_permanent_failure(job)
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.UNCHANGED
    longer = {**obj, "spec": {**obj["spec"], "runPolicy": {"ttlSecondsAfterFinished": 7200}}}
    assert reconciler.reconcile(longer, TFJOB, "event").change is Change.MOVED


def test_rq_jobs_are_json_never_pickle_and_carry_only_the_member_and_due(reconciler, redis):
    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    raw = redis.hgetall(f"rq:job:{job_id_for(uid(obj), due(obj))}")
    # JSON, zlib-compressed or not, whichever is shorter (RQ reads both)
    data = raw[b"data"]
    func, _instance, args, _kwargs = json.loads(zlib.decompress(data) if data[:1] == b"\x78" else data)
    # The worker's declared delete task, by the name every earlier 0.2 booked: pending jobs hold it.
    assert func == "jobttl.worker.tasks.delete_if_expired" and args == [uid(obj), due(obj)]
    assert json.loads(raw[b"meta"])["ref"] == [
        "kubeflow.org/v1",
        "TFJob",
        obj["metadata"]["namespace"],
        obj["metadata"]["name"],
    ]


def test_a_booked_rq_job_holds_no_empty_fields_and_rq_reads_it_back_whole(reconciler, schedule, redis):
    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    job_id = job_id_for(uid(obj), due(obj))
    raw = redis.hgetall(f"rq:job:{job_id}")
    assert b"" not in raw.values() and b"description" not in raw
    job = Job.fetch(job_id, connection=redis, serializer=JSONSerializer)
    assert (job.func_name, job.args, job.get_status(), job.retries_left, job.retry_intervals, job.timeout) == (
        "jobttl.worker.tasks.delete_if_expired",
        [uid(obj), due(obj)],
        JobStatus.SCHEDULED,
        2,
        [1, 2],
        schedule.job_timeout,
    )
    assert (job.started_at, job.worker_name, job.meta["ttl"]) == (None, None, 3600)


def test_a_job_booked_again_under_its_id_is_written_whole_clearing_its_last_run(reconciler, schedule, redis):
    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    job = schedule.queue.fetch_job(job_id_for(uid(obj), due(obj)))
    job.started_at, job.ended_at, job.worker_name = job.created_at, job.created_at, "w1"  # a run that failed
    job.save()
    job.set_status(JobStatus.FAILED)
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.SCHEDULED
    again = schedule.queue.fetch_job(job_id_for(uid(obj), due(obj)))
    assert (again.get_status(), again.started_at, again.ended_at, again.worker_name) == (
        JobStatus.SCHEDULED,
        None,
        None,
        None,
    )


def leave_an_earlier_run(redis, schedule, job_id, status="finished", **fields):
    """What a run of `job_id` leaves: its hash (expiring, as RQ sets a finished job's), listed
    as finished. A later booking of the same id must leave nothing of it."""
    key = Job.key_for(job_id)
    redis.hset(key, mapping={"status": status, **fields})
    redis.expire(key, 3600)
    redis.zadd(schedule.queue.finished_job_registry.key, {job_id: time.time() + 3600})
    return key


def test_a_due_booked_again_over_an_earlier_runs_hash_leaves_nothing_of_that_run(reconciler, schedule, redis):
    """Moved to D2 while D1 ran (a keep-until came and went), then back to D1: the D1 hash that
    run left (finished, expiring in an hour, listed as finished) must become a plain booking."""
    obj = finished(ttl=3600)
    longer = {**obj, "spec": {**obj["spec"], "runPolicy": {"ttlSecondsAfterFinished": 7200}}}
    reconciler.reconcile(obj, TFJOB, "event")
    assert reconciler.reconcile(longer, TFJOB, "event").change is Change.MOVED
    first = job_id_for(uid(obj), due(obj))
    key = leave_an_earlier_run(
        redis,
        schedule,
        first,
        started_at="2026-01-01T00:00:00.000000Z",
        ended_at="2026-01-01T00:00:01.000000Z",
        worker_name="w1",
        data="[]",
    )
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.MOVED
    job = schedule.queue.fetch_job(first)
    assert (job.get_status(), job.started_at, job.ended_at, job.worker_name) == (JobStatus.SCHEDULED, None, None, None)
    assert redis.ttl(key) == -1, "no expiry left from the finished run"
    assert first not in schedule.queue.finished_job_registry.get_job_ids()
    assert first in scheduled_ids(schedule)


def test_an_announcement_booked_again_over_an_earlier_runs_hash_leaves_nothing_of_that_run(redis, queue_name, audit):
    """The same for the announcement job of JOBTTL_ANNOUNCE_BEFORE, booked by the same path."""
    schedule = Schedule(redis, queue_name, retry_intervals=[], warn_before=60)
    reconciler = Reconciler(schedule, audit, parse_policy(None), burst_limit=None)  # the guard is not this test's
    obj = finished(ttl=3600)
    longer = {**obj, "spec": {**obj["spec"], "runPolicy": {"ttlSecondsAfterFinished": 7200}}}
    reconciler.reconcile(obj, TFJOB, "event")
    assert reconciler.reconcile(longer, TFJOB, "event").change is Change.MOVED
    first = warning_id_for(uid(obj), due(obj))
    key = leave_an_earlier_run(redis, schedule, first, started_at="2026-01-01T00:00:00.000000Z", data="[]")
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.MOVED
    job = schedule.queue.fetch_job(first)
    assert (job.get_status(), job.started_at) == (JobStatus.SCHEDULED, None)
    assert redis.ttl(key) == -1 and first not in schedule.queue.finished_job_registry.get_job_ids()


def test_events_that_make_too_many_deletions_due_at_once_are_held(reconciler, schedule, redis):
    redis.delete(keys.RECENT_DUE)  # what other tests made due in the last minute
    outcomes = [reconciler.reconcile(finished(ttl=0, at=time.time() - 60), TFJOB, "event").change for _ in range(5)]
    assert outcomes == [Change.SCHEDULED] * 3 + [Change.HELD] * 2, "the limit is 3 per minute"
    assert redis.hlen(keys.HELD) >= 2


def test_a_resync_collects_newly_due_deletions_instead_of_queueing_them(reconciler, schedule):
    obj = finished(ttl=0, at=time.time() - 60)
    outcome = reconciler.reconcile(obj, TFJOB, "resync", mode=COLLECT)
    assert outcome.change is Change.DUE_NOW and schedule.get(uid(obj)) is None
    [released] = reconciler.release([(outcome.ref, outcome.decision)], "resync")
    assert released.change is Change.SCHEDULED and schedule.get(uid(obj)).due == due(obj)


def test_every_path_records_the_same_fields(reconciler, audit):
    fields = []
    for by, mode in (("event", "guarded"), ("resync", COLLECT), ("worker", RELEASE)):
        obj = finished()
        reconciler.reconcile(obj, TFJOB, by, mode=mode)
        [entry] = trail(audit, obj)
        fields.append(set(entry) - {"by"})
    assert fields[0] == fields[1] == fields[2]
    assert {"ttl", "ttlSource", "finishedAt", "rules", "dryRun", "due"} <= fields[0]


def test_an_operator_keep_cancels_and_holds_against_later_events(reconciler, schedule):
    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    schedule.set_override(uid(obj), {"keep": "true"}, "operator")
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.CANCELLED
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.KEPT


def test_an_operator_postpone_moves_the_deletion_no_earlier_than_asked(reconciler, schedule):
    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    schedule.set_override(uid(obj), {"until": str(due(obj) + 86400)}, "operator")
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.MOVED
    assert schedule.get(uid(obj)).due == due(obj) + 86400


def test_a_batch_rejects_one_odd_object_and_reconciles_the_rest(reconciler):
    good, odd = finished(), finished()
    odd["metadata"]["name"] = "Not_A_Name"
    outcomes, rejected = reconciler.reconcile_many([(good, TFJOB), (odd, TFJOB)], "resync")
    assert [o.change for o in outcomes] == [Change.SCHEDULED]
    assert len(rejected) == 1 and "metadata.name" in rejected[0].reason


@pytest.mark.parametrize(
    "hold, release",
    [
        ({"spec": {"runPolicy": {"ttlSecondsAfterFinished": 3600, "suspend": True}}}, "suspended"),
        (
            {"spec": {"runPolicy": {"ttlSecondsAfterFinished": 3600, "managedBy": "kueue.x-k8s.io/multikueue"}}},
            "managed-elsewhere",
        ),
        (
            {"metadata": {"ownerReferences": [{"kind": "PipelineRun", "name": "p", "uid": "u", "controller": True}]}},
            "owned",
        ),
    ],
)
def test_someone_elses_job_is_cancelled_and_picked_up_again_once_it_is_ours(reconciler, schedule, audit, hold, release):
    """A skip is a decision like any other: the next event or resync decides again."""
    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    held = {
        **obj,
        "spec": {**obj["spec"], **hold.get("spec", {})},
        "metadata": {**obj["metadata"], **hold.get("metadata", {})},
    }
    assert reconciler.reconcile(held, TFJOB, "event").change is Change.CANCELLED
    assert reconciler.reconcile(held, TFJOB, "resync").label == f"ignored:{release}"
    assert audit.decisions(obj["metadata"]["namespace"], obj["metadata"]["name"])[uid(obj)]["reason"] == release
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.SCHEDULED
    assert scheduled_ids(schedule) == [job_id_for(uid(obj), due(obj))]


def test_a_deletion_pending_for_weeks_keeps_its_history_card_until_then(reconciler, redis):
    obj = finished(ttl=30 * 86400)
    reconciler.reconcile(obj, TFJOB, "event")
    assert redis.ttl(keys.card(obj["metadata"]["namespace"], obj["metadata"]["name"])) > 30 * 86400, (
        "jobttl cancel and show must still find it on day 29"
    )


def test_an_operators_keep_lasts_as_long_as_it_is_needed(reconciler, schedule, redis):
    obj = finished()
    schedule.set_override(uid(obj), {"keep": "true"}, "operator")
    redis.expire(keys.override(uid(obj)), 60)  # as if 400 days had nearly passed
    assert reconciler.reconcile(obj, TFJOB, "resync").change is Change.KEPT
    assert redis.ttl(keys.override(uid(obj))) > 300 * 86400


def test_an_index_entry_whose_rq_job_is_gone_faces_the_guard_again(schedule, audit, redis):
    """A 0.1 dry-run record, or a lost RQ job, is not a deletion already on its way."""
    guarded = Reconciler(schedule, audit, parse_policy(None), burst_limit=0)
    obj = finished(ttl=0, at=time.time() - 60)
    redis.zadd(keys.PENDING_INDEX, {uid(obj): due(obj)})  # the index alone
    assert guarded.reconcile(obj, TFJOB, "event").change is Change.HELD


def test_a_deletion_pulled_in_from_days_to_minutes_faces_the_guard(schedule, audit):
    """maxTTL: 1h where 1d was meant pulls recent deletions in without making them due yet."""
    obj = finished(ttl=2 * 86400)
    Reconciler(schedule, audit, parse_policy(None)).reconcile(obj, TFJOB, "event")
    typo = Reconciler(schedule, audit, parse_policy({"maxTTL": "10m"}), burst_limit=0)
    assert typo.reconcile(obj, TFJOB, "event").change is Change.HELD
    assert typo.reconcile(obj, TFJOB, "resync", mode=COLLECT).change is Change.DUE_NOW


def test_a_cancel_racing_a_schedule_leaves_the_new_rq_job_alone(reconciler, schedule, redis):
    """The cancel's cleanup comes after another process booked the same deletion again."""
    from jobttl.core.domain.wire.identity import JobRef
    from jobttl.core.domain.decisions.plan import Intent

    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    cancel = Intent(JobRef.of(obj), None, "deleted", "event", "guarded")
    [planned] = reconciler.store.compare([cancel])  # the cancel's first round trip only
    assert planned.change is Change.CANCELLED
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.SCHEDULED  # booked again meanwhile
    reconciler.store.write([cancel], [planned])  # the cancel's cleanup, late
    assert scheduled_ids(schedule) == [job_id_for(uid(obj), due(obj))], "the new booking's RQ job survives"


@pytest.fixture
def own_redis():
    """A Redis no one else talks to: its own counters are this test's round trips."""
    server = RedisServer().start()
    yield server.client()
    server.stop()


def round_trips(redis, action) -> int:
    """Replies Redis wrote while `action` ran: one per round trip (a command, a pipeline, a
    MULTI/EXEC), less the INFO that reads the counter."""
    before = redis.info("stats")["total_writes_processed"]
    action()
    return redis.info("stats")["total_writes_processed"] - before - 1


def test_a_new_deletion_costs_two_round_trips_and_a_duplicate_one(own_redis):
    reconciler = Reconciler(
        Schedule(own_redis, "trips", retry_intervals=[]), Audit(own_redis), parse_policy(None), burst_limit=3
    )
    obj = finished()
    reconciler.reconcile(finished(), TFJOB, "event")  # the scripts are loaded once per Redis
    assert round_trips(own_redis, lambda: reconciler.reconcile(obj, TFJOB, "event")) == 2
    assert round_trips(own_redis, lambda: reconciler.reconcile(obj, TFJOB, "event")) == 1
    assert round_trips(own_redis, lambda: reconciler.reconcile(running(finished()), TFJOB, "event")) == 1


def test_scripts_redis_lost_are_loaded_again_and_nothing_runs_twice(own_redis):
    """After a restart or a failover Redis knows no script: the batch still runs, each once."""
    reconciler = Reconciler(
        Schedule(own_redis, "flushed", retry_intervals=[]), Audit(own_redis), parse_policy(None), burst_limit=None
    )
    page = [(finished(), TFJOB) for _ in range(5)]
    own_redis.script_flush()
    outcomes, _ = reconciler.reconcile_many(page, "resync")
    assert [o.change for o in outcomes] == [Change.SCHEDULED] * 5
    own_redis.script_flush()
    outcomes, _ = reconciler.reconcile_many(page, "resync")
    assert [o.change for o in outcomes] == [Change.UNCHANGED] * 5
    assert own_redis.xlen(keys.AUDIT_STREAM) == 5, "one 'scheduled' each, nothing recorded twice"
    assert own_redis.zcard(keys.PENDING_INDEX) == 5


@pytest.mark.parametrize(
    "known", [["Reconcile"], ["Reconcile", "Commit"]], ids=["lost-before-the-multi", "a-new-script-after-an-upgrade"]
)
def test_a_booking_whose_scripts_redis_lost_between_its_two_round_trips_is_still_whole(own_redis, known):
    """The compare ran, then Redis lost its scripts before the MULTI (a failover), or knows all
    but a script this version added: RQ's writes in that MULTI went through and the unknown
    scripts did not, so they run after them, once each."""
    schedule = Schedule(own_redis, "lost", retry_intervals=[])
    reconciler = Reconciler(schedule, Audit(own_redis), parse_policy(None), burst_limit=None)
    obj = finished()
    job_id = job_id_for(uid(obj), due(obj))
    finished_registry = schedule.queue.finished_job_registry.key
    # What an earlier run of the same id left (booked again at the same due): BOOKED's to tidy.
    job_key = leave_an_earlier_run(own_redis, schedule, job_id, worker_name="an-earlier-run")
    own_redis.script_flush()
    for name in known:
        own_redis.script_load(getattr(scripts, name).source)
    outcome = reconciler.reconcile(obj, TFJOB, "event")
    assert outcome.change is Change.SCHEDULED
    assert own_redis.zscore(keys.PENDING_INDEX, uid(obj)) == due(obj)
    assert own_redis.hget(job_key, "status") == b"scheduled"
    assert own_redis.zscore(ScheduledJobRegistry("lost", connection=own_redis).key, job_id) == due(obj)
    assert own_redis.ttl(job_key) == -1, "kept until it runs (BOOKED's PERSIST ran)"
    assert own_redis.hget(job_key, "worker_name") is None, "the earlier run's field is gone (BOOKED's HDEL ran)"
    assert own_redis.zscore(finished_registry, job_id) is None, "no longer listed as finished"
    assert own_redis.zcard(keys.notices("lost")) == 1, "the change is in the notices outbox once"
    assert [e[1][b"event"] for e in own_redis.xrange(keys.AUDIT_STREAM)] == [b"scheduled"]
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.UNCHANGED


def test_booked_leaves_alone_a_job_that_ran_since_rqs_write(own_redis):
    """BOOKED runs apart from RQ's write only after Redis lost its scripts; a job a worker ran in
    between keeps its registry and its expiry (tidied, its finished hash would never expire)."""
    schedule = Schedule(own_redis, "ran", retry_intervals=[])
    finished_registry = schedule.queue.finished_job_registry.key
    failed_registry = schedule.queue.failed_job_registry.key
    for status, tidied in (("finished", False), ("scheduled", True)):
        job_key = leave_an_earlier_run(own_redis, schedule, f"delete-{status}", status, worker_name="a-run")
        scripts.Booked(
            job_key=job_key,
            finished=finished_registry,
            failed=failed_registry,
            outbox=keys.notices("ran"),
            job_id=f"delete-{status}",
            status="scheduled",
            notice=None,
            notice_at=0,
            omitted=("worker_name",),
        ).run(own_redis)
        assert (own_redis.ttl(job_key) == -1) is tidied
        assert (own_redis.hget(job_key, "worker_name") is None) is tidied
        assert (own_redis.zscore(finished_registry, f"delete-{status}") is None) is tidied


def _known(redis) -> list[bool]:
    """Whether Redis knows each script a process loads (`scripts.ALL`)."""
    used = [script.sha for script in scripts.ALL]
    assert len(used) == 11
    return redis.script_exists(*used)


def test_loading_the_scripts_at_start_loads_every_one_and_a_redis_that_refuses_is_only_a_warning(own_redis, caplog):
    own_redis.script_flush()
    assert scripts.load(own_redis) is True
    assert _known(own_redis) == [True] * 11
    assert scripts.load(Redis(port=1, socket_connect_timeout=0.2, retry=None)) is False
    assert "scripts-not-loaded" in caplog.text


def test_after_a_noscript_every_script_is_loaded_not_only_the_missing_one(own_redis):
    """A Redis that lost its scripts (a restart) meets the next reconcile's first round trip:
    that one loads them all, so the booking's MULTI that follows finds every script."""
    reconciler = Reconciler(
        Schedule(own_redis, "reload", retry_intervals=[]), Audit(own_redis), parse_policy(None), burst_limit=None
    )
    own_redis.script_flush()
    loads = lambda: own_redis.info("commandstats").get("cmdstat_script|load", {}).get("calls", 0)  # noqa: E731
    before = loads()
    assert reconciler.reconcile(finished(), TFJOB, "event").change is Change.SCHEDULED
    assert loads() - before == 11, "one load of all eleven, before the MULTI: the MULTI met no NOSCRIPT"
    assert _known(own_redis) == [True] * 11


# --- the sink's memory of decisions just applied (jobttl.core.services.recent) ------------------------
class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def remembering(own_redis):
    clock = FakeClock()
    reconciler = Reconciler(
        Schedule(own_redis, "recent", retry_intervals=[]),
        Audit(own_redis),
        parse_policy(None),
        burst_limit=3,
        recent=Recent(10, clock=clock),
    )
    reconciler.reconcile(finished(), TFJOB, "event")  # the scripts are loaded once per Redis
    return reconciler, clock


def test_an_event_deciding_what_the_last_one_did_is_answered_without_redis(remembering, own_redis):
    reconciler, _ = remembering
    obj = finished()
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.SCHEDULED
    status_update = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "999999"}}
    outcomes = []
    assert round_trips(own_redis, lambda: outcomes.append(reconciler.reconcile(status_update, TFJOB, "event"))) == 0
    assert outcomes[0].change is Change.UNCHANGED and outcomes[0].due == due(obj)


def test_a_changed_decision_goes_to_redis_at_once(remembering, own_redis):
    reconciler, _ = remembering
    obj = finished(ttl=3600)
    reconciler.reconcile(obj, TFJOB, "event")
    extended = {**obj, "spec": {**obj["spec"], "runPolicy": {"ttlSecondsAfterFinished": 7200}}}
    assert reconciler.reconcile(extended, TFJOB, "event").change is Change.MOVED
    assert reconciler.schedule.get(uid(obj)).due == due(extended)
    assert reconciler.reconcile(running(obj), TFJOB, "event").change is Change.CANCELLED
    assert reconciler.schedule.get(uid(obj)) is None


def test_a_delete_event_forgets_what_was_remembered(remembering):
    reconciler, _ = remembering
    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    reconciler.forget(JobRef.of(obj), "gone", "event")
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.SCHEDULED, "not answered from memory"


def test_after_the_window_a_lost_booking_is_made_again(remembering, own_redis):
    reconciler, clock = remembering
    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    own_redis.flushall()  # Redis lost its data
    clock.now += 9
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.UNCHANGED, "inside the window: memory"
    clock.now += 2
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.SCHEDULED
    assert reconciler.schedule.get(uid(obj)).due == due(obj)


def test_the_resync_and_the_worker_always_go_to_redis(remembering, own_redis):
    reconciler, _ = remembering
    obj = finished()
    reconciler.reconcile(obj, TFJOB, "event")
    assert round_trips(own_redis, lambda: reconciler.reconcile(obj, TFJOB, "resync")) >= 1
    assert round_trips(own_redis, lambda: reconciler.reconcile(obj, TFJOB, "worker")) >= 1


def test_a_deletion_the_guard_held_is_not_remembered(own_redis):
    reconciler = Reconciler(
        Schedule(own_redis, "held", retry_intervals=[]),
        Audit(own_redis),
        parse_policy(None),
        burst_limit=0,
        recent=Recent(10),
    )
    obj = finished(at=time.time() - 7200)  # already expired: newly due, and the guard allows none
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.HELD
    assert round_trips(own_redis, lambda: reconciler.reconcile(obj, TFJOB, "event")) >= 1


def test_memory_is_bounded_and_forgets_the_oldest_first():
    recent = Recent(10, size=2)
    for member in ("a", "b", "c"):
        recent.put(member, ("k",), member.upper())
    assert [recent.get(m, ("k",)) for m in ("a", "b", "c")] == [None, "B", "C"]
    assert recent.get("c", ("other",)) is None, "another decision is not the remembered one"


# --- an invalid TTL is told to the job's owner: the InvalidTTL notice (jobttl.core.services.scheduled_events) ---------


def invalid_notices(redis, schedule, obj) -> list[InvalidNotice]:
    """The InvalidTTL notices waiting in the outbox for this object, oldest first."""
    entries = (InvalidNotice.read(e.decode()) for e in redis.zrange(keys.notices(schedule.queue.name), 0, -1))
    return [n for n in entries if n is not None and n.ref.uid == uid(obj)]


def annotated(obj, **annotations):
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}


def test_an_invalid_ttl_is_noticed_once_per_value_whoever_reconciles_it(reconciler, schedule, redis):
    obj = finished(ttl=None)
    bad = annotated(obj, **{"jobttl.io/ttl": "10 minutes"})
    assert reconciler.reconcile(bad, TFJOB, "event").label == "ignored:invalid-ttl"
    [notice] = invalid_notices(redis, schedule, obj)
    assert notice == InvalidNotice(JobRef.of(obj), decide(bad, TFJOB).reason, "annotation jobttl.io/ttl")
    assert "'10 minutes'" in notice.detail
    redis.delete(keys.notices(schedule.queue.name))  # a worker has drained the outbox
    for by in ("event", "resync", "worker"):
        assert reconciler.reconcile(bad, TFJOB, by).label == "ignored:invalid-ttl"
    assert invalid_notices(redis, schedule, obj) == []
    other = annotated(obj, **{"jobttl.io/ttl": "ten minutes"})
    reconciler.reconcile(other, TFJOB, "event")
    reconciler.reconcile(other, TFJOB, "event")
    assert [n.detail for n in invalid_notices(redis, schedule, obj)] == [decide(other, TFJOB).reason]


def test_a_fixed_ttl_is_not_noticed_and_a_ttl_gone_bad_again_is(reconciler, schedule, redis):
    obj = finished(ttl=None)
    bad = annotated(obj, **{"jobttl.io/ttl": "10 minutes"})
    reconciler.reconcile(bad, TFJOB, "event")
    assert len(invalid_notices(redis, schedule, obj)) == 1
    redis.delete(keys.notices(schedule.queue.name))  # a worker has drained the outbox
    assert reconciler.reconcile(annotated(obj, **{"jobttl.io/ttl": "10m"}), TFJOB, "event").change is Change.SCHEDULED
    assert invalid_notices(redis, schedule, obj) == []
    assert reconciler.reconcile(bad, TFJOB, "event").change is Change.CANCELLED
    assert len(invalid_notices(redis, schedule, obj)) == 1, "broken again after a fix: told again"


def test_a_pending_deletion_cancelled_by_an_invalid_keep_until_is_noticed_once(reconciler, schedule, redis):
    obj = finished(ttl=3600)
    assert reconciler.reconcile(obj, TFJOB, "event").change is Change.SCHEDULED
    bad = annotated(obj, **{"jobttl.io/keep-until": "next friday"})
    assert reconciler.reconcile(bad, TFJOB, "event").change is Change.CANCELLED
    [notice] = invalid_notices(redis, schedule, obj)
    assert notice.source == "annotation jobttl.io/keep-until" and "'next friday'" in notice.detail
    redis.delete(keys.notices(schedule.queue.name))  # a worker has drained the outbox
    assert reconciler.reconcile(bad, TFJOB, "event").label == "ignored:invalid-ttl"
    assert invalid_notices(redis, schedule, obj) == [], "the cancellation on the card says it was told"


def test_other_verdicts_notice_nothing(reconciler, schedule, redis):
    for obj in (
        finished(ttl=None),
        running(finished()),
        finished(ttl=60),
        annotated(finished(), **{"jobttl.io/keep": "true"}),
    ):
        reconciler.reconcile(obj, TFJOB, "event")
        assert invalid_notices(redis, schedule, obj) == []


def test_an_invalid_ttl_costs_one_round_trip_like_any_decision_that_books_nothing(own_redis):
    schedule = Schedule(own_redis, "invalid", retry_intervals=[])
    reconciler = Reconciler(schedule, Audit(own_redis), parse_policy(None))
    reconciler.reconcile(running(finished()), TFJOB, "event")  # the scripts are loaded once per Redis
    bad = annotated(finished(ttl=None), **{"jobttl.io/ttl": "10 minutes"})
    assert round_trips(own_redis, lambda: reconciler.reconcile(bad, TFJOB, "event")) == 1
    assert len(invalid_notices(own_redis, schedule, bad)) == 1


def test_an_outbox_entry_is_either_a_schedule_change_or_an_invalid_ttl_notice():
    ref = JobRef("kubeflow.org/v1", "TFJob", "ml", "mnist", str(uuid.uuid4()))
    notice = InvalidNotice(ref, "annotation jobttl.io/ttl: ... got 'a|b'", "annotation jobttl.io/ttl")
    assert InvalidNotice.read(notice.entry) == notice
    assert InvalidNotice.read(notice_member(ref.uid, 1_900_000_000)) is None
    assert InvalidNotice.read(notice_member(f"pods:{ref.uid}", 1_900_000_000)) is None


def test_the_sweep_books_again_a_deletion_whose_rq_job_ended_without_finishing_it(schedule, audit):
    """`Store.rebook`, the sweep's write: a pending deletion whose RQ job finished without finishing it
    (refused while the clocks disagreed) is queued again, in the one MULTI, with its record as it was."""
    # A guard of its own: the module's Redis holds the other tests' bookings, past the fixture's burst limit.
    reconciler = Reconciler(schedule, audit, parse_policy(None), burst_limit=1000)
    obj = finished(ttl=60, at=time.time() - 3600)  # due long ago: booked onto the queue at once
    reconciler.reconcile(obj, TFJOB, "event")
    job = schedule.queue.fetch_job(job_id_for(uid(obj), due(obj)))
    assert job is not None, "booked"
    schedule.queue.remove(job)  # taken off the queue and run, as a worker would, and refused:
    job.set_status(JobStatus.FINISHED)
    [record] = [r for r in schedule.records(schedule.due_by(time.time())) if r.member == uid(obj)]
    assert record.state == JobStatus.FINISHED.value

    reconciler.store.rebook([record], time.time())

    again = schedule.queue.fetch_job(job.id)
    assert again.get_status() == JobStatus.QUEUED
    assert job.id in schedule.queue.get_job_ids()
    assert again.meta["ref"] == job.meta["ref"], "booked again for the same object"
    assert [r.due for r in schedule.records([(uid(obj), due(obj))])] == [due(obj)]
