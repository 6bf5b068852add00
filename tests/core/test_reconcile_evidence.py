"""Pods stages, history limits and notices on the one reconcile path, against real Redis and RQ."""

import time
import uuid

import pytest

from jobttl.core.store import keys
from jobttl.core.store.audit import Audit, entry_fields
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.rules.policy import parse_policy
from jobttl.core.services.reconcile import COLLECT, Reconciler
from jobttl.core.store.schedule import PODS_STAGE, Change, Schedule, member_for, notice_member
from jobttl.core.store.scripts import Finish, Release
from tests.fixtures import finished_status, rfc3339, tfjob, with_server_fields


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
    outbox = schedule.redis.zrange(keys.notices(schedule.queue.name), 0, -1)
    assert sorted(outbox) == sorted(
        [notice_member(uid, int(now) + 7200).encode(), notice_member(f"pods:{uid}", int(now) + 3600).encode()]
    )
    card = reconciler.audit.decisions(obj["metadata"]["namespace"], "train")[uid]
    assert card["event"] == "scheduled" and card["due"] == int(now) + 7200  # the job's, not the pods'
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
    assert due == {
        "a-0": int(start + 120),
        "a-1": int(start + 180),
        "a-2": int(start + 120 + month),
        "a-3": int(start + 180 + month),
        "b-0": int(start + month),
        "b-1": int(start + 60 + month),
    }
    assert schedule.get(a[0]["metadata"]["uid"]).ttl_source == "keepLast of policy (2 succeeded)"
    # The same jobs again (a resync): nothing moves back to its TTL.
    outcomes, _ = reconciler.reconcile_many([(o, kind) for o in a + b], "resync", COLLECT)
    assert {o.change for o in outcomes} == {Change.UNCHANGED}
    # A deleted job leaves its group: the limit does not count it.
    reconciler.forget(JobRef.of(a[3]), "deleted", "event")
    assert a[3]["metadata"]["uid"] not in reconciler.keeplast.group_members(
        next(m for _, m in reconciler.keeplast.records() if m.uid == a[2]["metadata"]["uid"]).group
    )


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


def test_keep_last_waits_for_keep_until_when_a_newer_job_pushes_one_out(schedule):
    """The older job is filed first (with its keep-until in the index's record), then pushed out
    by a newer one: the deletion waits until the time the user asked for, not now."""
    reconciler = reconciler_for(schedule, {"ttl": "30d", "keepLast": {"succeeded": 1}})
    kind = reconciler.policy.kinds[0]
    namespace = f"ns-{uuid.uuid4().hex[:6]}"
    now = time.time()
    keep_until = int(now) + 3600
    older = finished(namespace, "debugged", now - 600)
    older["metadata"]["annotations"] = {"jobttl.io/keep-until": rfc3339(keep_until)}
    plain = finished(namespace, "plain", now - 500)
    newer = finished(namespace, "newest", now - 300)
    for obj in (older, plain, newer):
        reconciler.reconcile(obj, kind, "event")
    assert schedule.due_of(older["metadata"]["uid"]) == keep_until
    assert schedule.due_of(plain["metadata"]["uid"]) == int(now - 300), "due when it fell beyond the limit"
    assert schedule.get(older["metadata"]["uid"]).ttl_source == "keepLast of policy (1 succeeded)"


def test_a_pods_stage_waits_for_keep_until(schedule):
    reconciler = reconciler_for(schedule, {"ttl": "1d", "podTTL": "1h"})
    now = time.time()
    obj = finished(f"ns-{uuid.uuid4().hex[:6]}", "train", now)
    obj["metadata"]["annotations"] = {"jobttl.io/keep-until": rfc3339(now + 5 * 3600)}
    reconciler.reconcile(obj, reconciler.policy.kinds[0], "event")
    uid = obj["metadata"]["uid"]
    assert schedule.due_of(member_for(uid, PODS_STAGE)) == int(now + 5 * 3600)
    assert schedule.due_of(uid) == int(now) + 86400


# --- the worker's last writes: FINISH and RELEASE ---------------------------------------------------------


def outcome_of(redis, ref: JobRef, member: str, due: int, forget: bool = True, done: str | None = None):
    return Finish.of(
        ref,
        member,
        due,
        entry_fields("deleted", ref, by="test"),
        forget=forget,
        max_entries=1000,
        card_ttl=60,
        done=done,
        override_ttl=60,
    ).run(redis)


def booked_both_stages(redis):
    ref = JobRef("kubeflow.org/v1", "TFJob", f"ns-{uuid.uuid4().hex[:6]}", "train", str(uuid.uuid4()))
    redis.zadd(keys.PENDING_INDEX, {ref.uid: 200, member_for(ref.uid, PODS_STAGE): 100})
    return ref


def test_finish_of_the_job_stage_drops_its_pods_stage_and_a_pods_finish_keeps_the_job(redis):
    ref = booked_both_stages(redis)
    outcome_of(redis, ref, member_for(ref.uid, PODS_STAGE), 100, done=PODS_STAGE)
    assert redis.zscore(keys.PENDING_INDEX, member_for(ref.uid, PODS_STAGE)) is None
    assert redis.zscore(keys.PENDING_INDEX, ref.uid) == 200, "the pods' FINISH leaves the job's deletion"
    assert redis.hget(keys.override(ref.uid), "done:pods") is not None, "done for good, in the same write"

    ref = booked_both_stages(redis)
    outcome_of(redis, ref, member_for(ref.uid, PODS_STAGE), 90)  # a run for a time since moved (to 100)
    assert redis.zscore(keys.PENDING_INDEX, member_for(ref.uid, PODS_STAGE)) == 100, "the moved stage stays"

    ref = booked_both_stages(redis)
    outcome_of(redis, ref, ref.uid, 200)
    assert redis.zscore(keys.PENDING_INDEX, ref.uid) is None
    assert redis.zscore(keys.PENDING_INDEX, member_for(ref.uid, PODS_STAGE)) is None, "the pods go with the job"

    ref = booked_both_stages(redis)
    outcome_of(redis, ref, ref.uid, 200, forget=False)  # would-delete: nothing leaves the schedule
    assert redis.zscore(keys.PENDING_INDEX, member_for(ref.uid, PODS_STAGE)) == 100
    assert redis.zscore(keys.PENDING_INDEX, ref.uid) == 200


@pytest.mark.parametrize("clear, intent_left", [("1", False), ("0", True)])
def test_release_gives_the_claim_back_and_the_intent_unless_a_delete_was_sent(redis, clear, intent_left):
    member = str(uuid.uuid4())
    redis.set(keys.claim(member), "run-1")
    redis.set(keys.intent(member), '{"uid": "x"}')
    assert Release(member=member, token="run-2", clear_intent=clear == "1").run(redis) == 0
    assert redis.get(keys.claim(member)) == b"run-1" and redis.exists(keys.intent(member)), (
        "another run's claim and intent are not this run's to end"
    )
    assert Release(member=member, token="run-1", clear_intent=clear == "1").run(redis) == 1
    assert not redis.exists(keys.claim(member))
    assert bool(redis.exists(keys.intent(member))) is intent_left
