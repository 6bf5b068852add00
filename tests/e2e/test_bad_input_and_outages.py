"""Bad input gets a clear 4xx and changes nothing; an outage gets a 503 and loses nothing."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import requests

from tests.e2e.conftest import QUEUE
from tests.fixtures import finished_status, tfjob, with_server_fields
from tests.services import RedisServer, start_sink, wait_for
from jobttl.core.store.keys import PENDING_INDEX


def finished_object() -> dict:
    obj = with_server_fields(tfjob("bad", f"t-{uuid.uuid4().hex[:8]}", ttl=0))
    obj["status"] = finished_status(time.time())
    return obj


BINARY = {
    "ce-specversion": "1.0",
    "ce-id": "1",
    "ce-source": "https://10.96.0.1",
    "ce-type": "dev.knative.apiserver.resource.update",
    "content-type": "application/json",
}


@pytest.mark.parametrize(
    "headers, body, status, words",
    [
        (BINARY, b"{this is not json", 400, "JSON"),
        ({**BINARY, "ce-type": ""}, b"{}", 400, "type"),
        ({"content-type": "application/cloudevents+json"}, b'{"specversion": "1.0"', 400, "JSON"),
        (
            {"content-type": "application/cloudevents+json"},
            b'{"specversion": "1.0", "id": "1", "data": {}}',
            400,
            "source",
        ),
        ({"content-type": "text/plain"}, b"hello", 415, "CloudEvent"),
        (
            BINARY,
            b'{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "x"}}',
            400,
            "metadata.namespace",
        ),
    ],
    ids=["non-json-data", "empty-type", "truncated-structured", "missing-source", "not-a-cloudevent", "no-namespace"],
)
def test_malformed_events_are_rejected_with_the_problem_named(sink_url, redis, headers, body, status, words):
    before = redis.zcard(PENDING_INDEX)
    response = requests.post(sink_url, headers=headers, data=body, timeout=5)
    assert response.status_code == status
    assert words in response.json()["error"]
    assert redis.zcard(PENDING_INDEX) == before


def test_a_huge_body_is_a_413_and_schedules_nothing(sink_url, redis):
    obj = finished_object()
    obj["metadata"]["annotations"] = {"padding": "x" * (4 * 1024 * 1024)}
    response = requests.post(sink_url, headers=BINARY, data=json.dumps(obj).encode(), timeout=10)
    assert response.status_code == 413
    assert "error" in response.json()
    assert redis.zscore(PENDING_INDEX, obj["metadata"]["uid"]) is None


def test_wrong_paths_and_methods_get_json_errors(sink_url):
    assert requests.get(f"{sink_url}/nope", timeout=5).json()["code"] == 404
    assert requests.put(sink_url, timeout=5).json()["code"] == 405


def test_with_redis_down_the_sink_answers_503_and_the_resent_event_is_scheduled(emulator, log_dir):
    redis_server = RedisServer().start()
    sink, url = start_sink(
        {"JOBTTL_REDIS_URL": redis_server.url, "KUBECONFIG": str(emulator.kubeconfig), "JOBTTL_QUEUE": QUEUE}, log_dir
    )
    try:
        obj = finished_object()
        obj["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 3600
        body = json.dumps(obj).encode()
        redis_server.stop()
        response = requests.post(url, headers=BINARY, data=body, timeout=30)
        assert response.status_code == 503, "Knative retries a 503; it drops the event on most other errors"
        assert "Redis" in response.json()["error"]

        redis_server.start()
        # ApiServerSource re-sends; once Redis is back, the event is scheduled.
        wait_for(
            lambda: requests.post(url, headers=BINARY, data=body, timeout=10).status_code == 202,
            timeout=15,
            what="the sink to accept the event again",
        )
        assert redis_server.client().zscore(PENDING_INDEX, obj["metadata"]["uid"]) is not None
    finally:
        sink.stop()
        redis_server.stop()
