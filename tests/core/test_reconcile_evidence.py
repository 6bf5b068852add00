"""Pods stages, history limits and notices on the one reconcile path, against real Redis and RQ."""

import time
import uuid

import pytest

from jobttl.core import keys
from jobttl.core.audit import Audit
from jobttl.core.identity import JobRef
from jobttl.core.policy import parse_policy
from jobttl.core.reconcile import COLLECT, Reconciler
from jobttl.core.schedule import PODS_STAGE, Change, Schedule, member_for, notice_member
from tests.fixtures import finished_status, tfjob, with_server_fields


@pytest.fixture
def schedule(redis, queue_name):
    redis.delete(keys.notices(queue_name))
    return Schedule(redis, queue_name, retry_intervals=[])


def reconciler_for(schedule, policy) -> Reconciler:
    return Reconciler(schedule, Audit(schedule.redis), parse_policy(policy), burst_limit=100)


def finished(namespace, name, at, labels=None):
    obj = with_server_fields(tfjob(name, namespace))
    obj["status"] = finished_status(at)
    obj["metadata"]["labels"] = labels or {}
    return obj


def test_a_pods_stage_is_its_own_pending_entry_and_goes_with_the_job(schedule):
    reconciler = reconciler_for(schedule, {"ttl": "2h", "podTTL": "1h"})
    now = time.time()
    obj = finished(f"ns-{uuid.uuid4().hex[:6]}", "train", now)
    outcomes, _ = reconciler.reconcile_many([(obj, reconciler.policy.kinds[0])], "event")
    assert [(o.stage, o.change) for o in outcomes] == [("job", Change.SCHEDULED), ("pods", Change.SCHEDULED)]
    uid = obj["metadata"]["uid"]
    assert schedule.due_of(member_for(uid, PODS_STAGE)) == int(now) + 3600
    assert schedule.get(uid, PODS_STAGE).as_dict(now)["stage"] == "pods"
    # Each change is one notice in the outbox, written once however often it is reconciled.
    reconciler.reconcile(obj, reconciler.policy.kinds[0], "resync")
    assert set(schedule.redis.zrange(keys.notices(schedule.queue.name), 0, -1)) >= {
        notice_member(uid, int(now) + 7200).encode(), notice_member(f"pods:{uid}", int(now) + 3600).encode()}
    card = reconciler.audit.decisions(obj["metadata"]["namespace"], "train")[uid]
    assert card["event"] == "scheduled" and card["due"] == str(int(now) + 7200)  # the job's, not the pods'
    schedule.mark_done(uid, PODS_STAGE)  # the worker deleted the pods: no event books them again
    assert reconciler.reconcile(obj, reconciler.policy.kinds[0], "event").change is Change.UNCHANGED
    assert schedule.due_of(member_for(uid, PODS_STAGE)) is None
    reconciler.forget(JobRef.of(obj), "deleted", "event")
    assert schedule.due_of(uid) is None


def test_keep_last_deletes_exactly_the_oldest_beyond_the_limit_in_each_group(schedule):
    policy = {"ttl": "30d", "keepLast": {"succeeded": 2, "groupBy": "app"}}
    reconciler = reconciler_for(schedule, policy)
    kind = reconciler.policy.kinds[0]
    namespace = f"ns-{uuid.uuid4().hex[:6]}"
    start = time.time() - 3600
    a = [finished(namespace, f"a-{i}", start + i * 60, {"app": "a"}) for i in range(4)]
    b = [finished(namespace, f"b-{i}", start + i * 60, {"app": "b"}) for i in range(2)]
    for obj in a + b:  # one event each, as the jobs finish
        reconciler.reconcile(obj, kind, "event")
    due = {o["metadata"]["name"]: schedule.due_of(o["metadata"]["uid"]) for o in a + b}
    month = 30 * 86400
    assert due == {"a-0": int(start + 120), "a-1": int(start + 180), "a-2": int(start + 120 + month),
                   "a-3": int(start + 180 + month), "b-0": int(start + month), "b-1": int(start + 60 + month)}
    assert schedule.get(a[0]["metadata"]["uid"]).ttl_source == "keepLast of policy (2 succeeded)"
    # The same jobs again (a resync): nothing moves back to its TTL.
    outcomes, _ = reconciler.reconcile_many([(o, kind) for o in a + b], "resync", COLLECT)
    assert {o.change for o in outcomes} == {Change.UNCHANGED}
    # A deleted job leaves its group: the limit does not count it.
    reconciler.forget(JobRef.of(a[3]), "deleted", "event")
    assert a[3]["metadata"]["uid"] not in reconciler.history.group_members(
        next(m for _, m in reconciler.history.records() if m.uid == a[2]["metadata"]["uid"]).group)


def test_a_page_holding_a_whole_group_applies_the_limit_at_once(schedule):
    reconciler = reconciler_for(schedule, {"keepLast": {"succeeded": 1}})
    namespace = f"ns-{uuid.uuid4().hex[:6]}"
    start = time.time() - 600
    page = [finished(namespace, f"j-{i}", start + i * 10) for i in range(3)]  # oldest first on the page
    outcomes, _ = reconciler.reconcile_many([(o, reconciler.policy.kinds[0]) for o in page], "resync", COLLECT)
    assert [o.change for o in outcomes] == [Change.DUE_NOW, Change.DUE_NOW, Change.IGNORED]


def test_forgetting_a_job_drops_its_pods_stage_whatever_the_policy_says_now(schedule):
    """A pods stage booked before the podTTL was removed from the policy ends with its job."""
    obj = finished(f"ns-{uuid.uuid4().hex[:6]}", "train", time.time())
    booked = reconciler_for(schedule, {"ttl": "2h", "podTTL": "1h"})
    booked.reconcile(obj, booked.policy.kinds[0], "event")
    uid = obj["metadata"]["uid"]
    assert schedule.due_of(member_for(uid, PODS_STAGE)) is not None
    now = reconciler_for(schedule, {"ttl": "2h"})
    now.forget(JobRef.of(obj), "deleted", "event")
    assert schedule.due_of(uid) is None and schedule.due_of(member_for(uid, PODS_STAGE)) is None


def test_drop_stage_cancels_one_stage_and_keeps_the_other(schedule):
    obj = finished(f"ns-{uuid.uuid4().hex[:6]}", "train", time.time())
    reconciler = reconciler_for(schedule, {"ttl": "2h", "podTTL": "1h"})
    reconciler.reconcile(obj, reconciler.policy.kinds[0], "event")
    uid = obj["metadata"]["uid"]
    outcome = reconciler.drop_stage(JobRef.of(obj), PODS_STAGE, "stage-not-in-policy", "worker")
    assert outcome.change is Change.CANCELLED and outcome.stage == PODS_STAGE
    assert schedule.due_of(member_for(uid, PODS_STAGE)) is None and schedule.due_of(uid) is not None
