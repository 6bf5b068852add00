"""The schedule of pending deletions in real Redis with the real RQ (worker/schedule.py)."""

import json
import time
import uuid
import zlib

import pytest
from rq.job import JobStatus
from rq.registry import ScheduledJobRegistry

from worker.decision import Decision, JobRef, Verdict
from worker.schedule import PENDING_INDEX, PERMANENT_FAILURE, Change, Schedule, job_id_for


@pytest.fixture
def schedule(redis, queue_name):
    return Schedule(redis, queue_name, retry_intervals=[1, 2])


def ref():
    # Names are unique per test too: tests share one Redis, and names are indexed.
    return JobRef("kubeflow.org/v1", "TFJob", "team", f"train-{uuid.uuid4().hex[:8]}", str(uuid.uuid4()))


def expiring(at):
    return Decision(Verdict.EXPIRES, "test", finished_at=at - 60, ttl=60, ttl_source="spec.runPolicy.ttlSecondsAfterFinished", expires_at=at)


def scheduled_ids(schedule):
    return ScheduledJobRegistry(queue=schedule.queue).get_job_ids()


def test_a_future_deletion_is_a_scheduled_rq_job_and_an_inspectable_record(schedule):
    job, due = ref(), int(time.time()) + 3600
    assert schedule.plan(job, expiring(due)) is Change.SCHEDULED
    assert scheduled_ids(schedule) == [job_id_for(job.uid, due)]
    pending = schedule.get(job.uid)
    assert (pending.ref, pending.due, pending.ttl, pending.ttl_source) == (job, due, 60, "spec.runPolicy.ttlSecondsAfterFinished")
    assert schedule.redis.zscore(PENDING_INDEX, job.uid) == due


def test_duplicate_plans_leave_exactly_one_pending_deletion(schedule):
    job, due = ref(), int(time.time()) + 3600
    changes = [schedule.plan(job, expiring(due)) for _ in range(20)]
    assert changes == [Change.SCHEDULED] + [Change.UNCHANGED] * 19
    assert scheduled_ids(schedule) == [job_id_for(job.uid, due)]


def test_a_new_expiry_moves_the_pending_deletion(schedule):
    job, due = ref(), int(time.time()) + 3600
    schedule.plan(job, expiring(due))
    assert schedule.plan(job, expiring(due + 600)) is Change.MOVED
    assert scheduled_ids(schedule) == [job_id_for(job.uid, due + 600)]
    assert not schedule.redis.exists(f"rq:job:{job_id_for(job.uid, due)}"), "the old RQ job hash must not leak"
    assert schedule.get(job.uid).due == due + 600


def test_a_recreated_job_has_its_own_schedule(schedule):
    old, due = ref(), int(time.time()) + 3600
    new = JobRef(old.api_version, old.kind, old.namespace, old.name, str(uuid.uuid4()))
    schedule.plan(old, expiring(due))
    schedule.plan(new, expiring(due + 10))
    assert sorted(scheduled_ids(schedule)) == sorted([job_id_for(old.uid, due), job_id_for(new.uid, due + 10)])
    assert schedule.uids_named(old.api_version, old.kind, old.namespace, old.name) == {old.uid, new.uid}


def test_an_already_expired_deletion_is_queued_for_now_not_scheduled(schedule):
    job = ref()
    schedule.plan(job, expiring(int(time.time()) - 5))
    assert scheduled_ids(schedule) == []
    assert schedule.queue.job_ids == [schedule.get(job.uid).job_id]


def test_cancel_removes_the_job_and_the_record(schedule):
    job, due = ref(), int(time.time()) + 3600
    schedule.plan(job, expiring(due))
    assert schedule.cancel(job.uid).due == due
    assert scheduled_ids(schedule) == []
    assert schedule.get(job.uid) is None
    assert schedule.redis.zscore(PENDING_INDEX, job.uid) is None
    assert schedule.uids_named(job.api_version, job.kind, job.namespace, job.name) == set()
    assert not schedule.redis.exists(f"rq:job:{job_id_for(job.uid, due)}")
    assert schedule.cancel(job.uid) is None


def test_complete_keeps_a_newer_schedule(schedule):
    job, due = ref(), int(time.time()) + 3600
    schedule.plan(job, expiring(due))
    schedule.complete(job, job_id_for(job.uid, due - 100))  # a stale job finishing
    assert schedule.get(job.uid) is not None
    schedule.complete(job, job_id_for(job.uid, due))
    assert schedule.get(job.uid) is None


def test_a_permanently_failed_deletion_stays_failed_until_retried_but_a_new_due_replaces_it(schedule):
    job, due = ref(), int(time.time()) - 1
    schedule.plan(job, expiring(due))
    rq_job = schedule.queue.fetch_job(job_id_for(job.uid, due))
    rq_job.set_status(JobStatus.FAILED)
    assert schedule.plan(job, expiring(due)) is Change.MOVED, "out of retries on a passing outage: try again"
    rq_job = schedule.queue.fetch_job(job_id_for(job.uid, due))
    rq_job.set_status(JobStatus.FAILED)
    rq_job.meta[PERMANENT_FAILURE] = True
    rq_job.save_meta()
    assert schedule.plan(job, expiring(due)) is Change.UNCHANGED
    assert schedule.queue.fetch_job(job_id_for(job.uid, due)).get_status() == JobStatus.FAILED
    assert schedule.plan(job, expiring(due + 3600)) is Change.MOVED
    assert schedule.queue.fetch_job(job_id_for(job.uid, due)) is None


def test_jobs_are_stored_as_json_never_pickle(schedule, redis):
    job, due = ref(), int(time.time()) + 60
    schedule.plan(job, expiring(due))
    # RQ zlib-compresses the serialized call; what is inside must be plain JSON.
    data = redis.hget(f"rq:job:{job_id_for(job.uid, due)}", "data")
    func, instance, args, kwargs = json.loads(zlib.decompress(data))
    assert func == "worker.tasks.delete_if_expired"
    assert args[0] == job.as_dict()


def test_uids_that_rq_would_refuse_are_refused_up_front():
    with pytest.raises(ValueError, match="metadata.uid"):
        job_id_for("../../etc", 1)
