"""Regression tests for safety and robustness findings of the code review."""

import time
import uuid

import pytest
from cloudevents.core.bindings.http import to_binary_event
from cloudevents.core.v1.event import CloudEvent

from jobttl.config import ConfigError, Settings
from sink.app import create_app
from tests.fixtures import finished_status, tfjob, with_server_fields
from worker.audit import Audit
from worker.decision import Decision, JobRef, Verdict, decide
from worker.kinds import TFJOB
from worker.operations import Operations
from worker.schedule import Schedule


def finished(ttl=60, **meta):
    obj = with_server_fields(tfjob(f"j-{uuid.uuid4().hex[:8]}", "team", ttl=ttl))
    obj["status"] = finished_status(time.time())
    obj["metadata"].update(meta)
    return obj


def post(client, obj):
    message = to_binary_event(CloudEvent(attributes={"specversion": "1.0", "id": "1", "source": "s",
                                                     "type": "dev.knative.apiserver.resource.update"}, data=obj))
    return client.post("/", headers=dict(message.headers), data=message.body)


@pytest.fixture
def client(redis_server, queue_name):
    return create_app(Settings.from_env({"JOBTTL_REDIS_URL": redis_server.url, "JOBTTL_QUEUE": queue_name})).test_client()


@pytest.mark.parametrize("ttl", [10**30, 200 * 365 * 86400])
def test_absurd_ttls_are_invalid_not_crashes(client, ttl):
    obj = finished(ttl=ttl)
    assert decide(obj, TFJOB).verdict is Verdict.INVALID_TTL
    response = post(client, obj)
    assert response.status_code == 202 and response.headers["X-Jobttl-Outcome"] == "ignored:invalid-ttl"


def test_absurd_annotations_are_invalid_not_crashes(client):
    obj = finished(annotations={"jobttl.io/ttl": "9999999999d"})
    assert post(client, obj).headers["X-Jobttl-Outcome"] == "ignored:invalid-ttl"
    obj = finished(annotations={"jobttl.io/keep-until": "9999-12-31T23:59:59Z"})
    assert post(client, obj).headers["X-Jobttl-Outcome"] == "ignored:invalid-ttl"


@pytest.mark.parametrize("meta, words", [({"uid": "a:b"}, "metadata.uid"), ({"uid": "é" * 8}, "metadata.uid"),
                                         ({"annotations": ["x"]}, "metadata.annotations"),
                                         ({"labels": "x"}, "metadata.labels")])
def test_malformed_metadata_is_a_400(client, meta, words):
    response = post(client, finished(**meta))
    assert response.status_code == 400 and words in response.json["error"]


def test_garbage_conditions_are_not_finished(client):
    obj = finished()
    obj["status"]["conditions"] = 5
    assert post(client, obj).headers["X-Jobttl-Outcome"] == "ignored:not-finished"


def ops(redis, queue_name):
    return Operations(redis, Schedule(redis, queue_name, []), Audit(redis))


def plan(schedule, name, due, uid=None):
    ref = JobRef("kubeflow.org/v1", "TFJob", "team", name, uid or str(uuid.uuid4()))
    schedule.plan(ref, Decision(Verdict.EXPIRES, "t", finished_at=due - 60, ttl=60, expires_at=due))
    return ref


def test_postponing_an_overdue_deletion_counts_from_now(redis, queue_name):
    operations = ops(redis, queue_name)
    name = f"late-{uuid.uuid4().hex[:6]}"
    plan(operations.schedule, name, int(time.time()) - 86400)
    postponed = operations.postpone("team", name, 7200)
    assert postponed.due >= time.time() + 7200 - 5


def test_operator_actions_apply_to_every_object_that_had_the_name(redis, queue_name):
    operations = ops(redis, queue_name)
    name = f"twice-{uuid.uuid4().hex[:6]}"
    old = plan(operations.schedule, name, int(time.time()) + 600)
    new = plan(operations.schedule, name, int(time.time()) + 900)
    operations.cancel("team", name)
    assert operations.schedule.effective_due(old.uid, 0) is None
    assert operations.schedule.effective_due(new.uid, 0) is None


def test_tombstone_lookups_take_names_literally(redis):
    audit = Audit(redis)
    ns = f"ns-{uuid.uuid4().hex[:6]}"
    audit.bury(JobRef("kubeflow.org/v1", "TFJob", ns, "secret", str(uuid.uuid4())), {"metadata": {}}, time.time())
    assert audit.tombstones(ns, "*") == []
    assert len(audit.tombstones(ns, "secret")) == 1


@pytest.mark.parametrize("name, value", [("JOBTTL_RESYNC_MAX_SHARE", "nan"), ("JOBTTL_DELETE_RATE", "inf"),
                                         ("JOBTTL_TOMBSTONE_DAYS", "0")])
def test_settings_that_would_silently_break_safety_are_refused(name, value):
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value})


def test_the_admins_cap_applies_before_absurd_values_are_judged():
    from worker.policy import parse_policy

    capped = parse_policy({"maxTTL": "7d"})
    assert decide(finished(ttl=9_999_999_999), TFJOB, capped).ttl == 7 * 86400
    keep_until = decide(finished(ttl=60, annotations={"jobttl.io/keep-until": "2200-01-01T00:00:00Z"}), TFJOB, capped)
    assert keep_until.verdict is Verdict.EXPIRES and keep_until.ttl == 7 * 86400
