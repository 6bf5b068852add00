"""The sink's answers to what it receives, in process with real Redis (jobttl.sink.receive).

What gets scheduled end to end is tested in tests/e2e; here each answer to odd input.
"""

import time
import uuid

import pytest
from cloudevents.core.bindings.http import to_binary_event
from cloudevents.core.v1.event import CloudEvent

from jobttl.core.config import Settings
from jobttl.core.decision import Verdict, decide
from jobttl.core.kinds import TFJOB
from jobttl.sink.app import create_app
from tests.fixtures import finished_status, tfjob, with_server_fields
from tests.services import RedisServer


def finished(ttl=60, **meta):
    obj = with_server_fields(tfjob(f"j-{uuid.uuid4().hex[:8]}", "team", ttl=ttl))
    obj["status"] = finished_status(time.time())
    obj["metadata"].update(meta)
    return obj


def post(client, obj, **attributes):
    message = to_binary_event(CloudEvent(attributes={"specversion": "1.0", "id": "1", "source": "s",
                                                     "type": "dev.knative.apiserver.resource.update", **attributes},
                                         data=obj))
    return client.post("/", headers=dict(message.headers), data=message.body)


def app_with(redis_server, queue_name, **env):
    return create_app(Settings.from_env({"JOBTTL_REDIS_URL": redis_server.url, "JOBTTL_QUEUE": queue_name, **env}))


@pytest.fixture
def client(redis_server, queue_name):
    return app_with(redis_server, queue_name).test_client()


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


def test_garbage_conditions_are_not_finished(client):
    obj = finished()
    obj["status"]["conditions"] = 5
    assert post(client, obj).headers["X-Jobttl-Outcome"] == "ignored:not-finished"


def test_a_finished_job_is_scheduled_and_its_duplicate_changes_nothing(client):
    obj = finished()
    assert post(client, obj).headers["X-Jobttl-Outcome"] == "scheduled"
    assert post(client, obj).headers["X-Jobttl-Outcome"] == "unchanged"


def test_events_from_sources_not_on_the_allowlist_are_refused_403(redis_server, queue_name):
    client = app_with(redis_server, queue_name, JOBTTL_SINK_SOURCES="https://10.96.0.1:443").test_client()
    refused = post(client, finished(), source="https://attacker.example")
    assert refused.status_code == 403 and "JOBTTL_SINK_SOURCES" in refused.json["error"]
    assert post(client, finished(), source="https://10.96.0.1:443").status_code == 202


def test_nothing_unexpected_escapes_as_a_bare_500(client):
    # A body that cannot be read (a broken chunked upload) is the client's problem, not ours.
    response = client.post("/", headers={"ce-specversion": "1.0", "ce-id": "1", "ce-source": "s",
                                         "ce-type": "dev.knative.apiserver.resource.update",
                                         "content-type": "application/json"}, data=b"\xff\xfe")
    assert response.status_code == 400 and response.is_json


def test_with_dedupe_a_repeated_decision_is_answered_from_memory_and_a_new_one_from_redis(queue_name):
    """JOBTTL_SINK_DEDUPE_SECONDS: Redis is stopped, and the redelivery is still answered."""
    server = RedisServer().start()
    try:
        client = app_with(server, queue_name, JOBTTL_SINK_DEDUPE_SECONDS="30").test_client()
        obj = finished()
        assert post(client, obj).headers["X-Jobttl-Outcome"] == "scheduled"
        server.stop()
        again = post(client, obj)
        assert again.status_code == 202 and again.headers["X-Jobttl-Outcome"] == "unchanged"
        assert post(client, finished()).status_code == 503, "a new decision needs Redis"
    finally:
        server.stop()
