"""The sink's answers to what it receives, in process with real Redis (jobttl.sink.receive).

What gets scheduled end to end is tested in tests/e2e; here each answer to odd input.
"""

import json
import time
import uuid

import pytest
from cloudevents.core.bindings.http import to_binary_event
from cloudevents.core.v1.event import CloudEvent

from jobttl.core.runtime.config import Settings
from jobttl.core.domain.decisions.decision import Verdict, decide
from jobttl.core.store.keys import PENDING_INDEX
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.sink.app import create_app
from tests.fixtures import finished_status, tfjob, with_server_fields
from tests.services import RedisServer


def finished(ttl=60, **meta):
    obj = with_server_fields(tfjob(f"j-{uuid.uuid4().hex[:8]}", "team", ttl=ttl))
    obj["status"] = finished_status(time.time())
    obj["metadata"].update(meta)
    return obj


def post(client, obj, **attributes):
    message = to_binary_event(
        CloudEvent(
            attributes={
                "specversion": "1.0",
                "id": "1",
                "source": "s",
                "type": "dev.knative.apiserver.resource.update",
                **attributes,
            },
            data=obj,
        )
    )
    return client.post("/", headers=dict(message.headers), data=message.body)


def structured(obj, **attributes):
    """A structured-mode event's envelope; an attribute given as DROP is left out."""
    envelope = {
        "specversion": "1.0",
        "id": "1",
        "source": "s",
        "type": "dev.knative.apiserver.resource.update",
        "datacontenttype": "application/json",
        **attributes,
        "data": obj,
    }
    return {k: v for k, v in envelope.items() if v is not DROP}


def post_structured(client, envelope, **headers):
    return client.post(
        "/", headers={"content-type": "application/cloudevents+json", **headers}, data=json.dumps(envelope)
    )


def binary_headers(**attributes):
    """A binary-mode event's headers; an attribute given as DROP is left out."""
    headers = {
        "ce-specversion": "1.0",
        "ce-id": "1",
        "ce-source": "s",
        "ce-type": "dev.knative.apiserver.resource.update",
        "content-type": "application/json",
        **{f"ce-{k}": v for k, v in attributes.items()},
    }
    return {k: v for k, v in headers.items() if v is not DROP}


DROP = object()
REQUIRED = ["specversion", "id", "source", "type"]


def writes(redis) -> int:
    """Redis's count of changes since its last save (the test server never saves): equal means nothing written."""
    return redis.info("persistence")["rdb_changes_since_last_save"]


def assert_refused_unwritten(redis, send, status, *words):
    """`send()` is refused with `status`, its JSON error names `words`, and Redis is left untouched."""
    before = writes(redis)
    response = send()
    assert response.status_code == status and response.is_json, (response.status_code, response.data)
    assert response.json["code"] == status and all(w in response.json["error"] for w in words), response.json
    assert writes(redis) == before, "nothing is written for a refused event"
    return response


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


@pytest.mark.parametrize(
    "where, value, words",
    [
        ("conditions", 5, "status.conditions: expected a list of conditions, got a number"),
        ("type", {"Succeeded": True}, "status.conditions[2].type: expected a string, got an object"),
        ("status", {"x": 1}, "status.conditions[2].status: expected a string, got an object"),
        (
            "completionTime",
            ["2030-01-01T00:00:00Z"],
            "status.completionTime: expected an RFC 3339 time (a string), got a list",
        ),
    ],
)
def test_a_field_the_declaration_reads_of_the_wrong_type_is_a_422_naming_it_and_writes_nothing(
    client, redis, where, value, words
):
    """issue 26 §9: a condition's type or status that is an object was a 500 ("unhashable type: 'dict'")."""
    obj = finished()
    if where in ("type", "status"):
        obj["status"]["conditions"][-1][where] = value
    else:
        obj["status"][where] = value
    assert_refused_unwritten(
        redis, lambda: post(client, obj), 422, "the object cannot be decided, nothing was written", words
    )


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
    response = client.post(
        "/",
        headers={
            "ce-specversion": "1.0",
            "ce-id": "1",
            "ce-source": "s",
            "ce-type": "dev.knative.apiserver.resource.update",
            "content-type": "application/json",
        },
        data=b"\xff\xfe",
    )
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


@pytest.mark.parametrize("attribute", REQUIRED)
@pytest.mark.parametrize("value", [DROP, "", None], ids=["missing", "empty", "null"])
def test_a_structured_event_without_a_required_attribute_is_a_400_naming_it_and_books_nothing(
    client, redis, attribute, value
):
    # The SDK fills a missing `id` (and `specversion`) in for senders; a receiver must refuse it.
    obj = finished()
    assert_refused_unwritten(
        redis, lambda: post_structured(client, structured(obj, **{attribute: value})), 400, attribute, "required"
    )
    assert redis.zscore(PENDING_INDEX, obj["metadata"]["uid"]) is None
    assert post_structured(client, structured(obj)).headers["X-Jobttl-Outcome"] == "scheduled", (
        "the same event with the attribute is booked"
    )


@pytest.mark.parametrize("attribute", REQUIRED)
@pytest.mark.parametrize("value", [DROP, ""], ids=["missing", "empty"])
def test_a_binary_event_without_a_required_attribute_is_a_400_naming_it_and_books_nothing(
    client, redis, attribute, value
):
    obj = finished()
    assert_refused_unwritten(
        redis,
        lambda: client.post("/", headers=binary_headers(**{attribute: value}), data=json.dumps(obj)),
        400,
        attribute,
        "required",
    )
    assert redis.zscore(PENDING_INDEX, obj["metadata"]["uid"]) is None
    assert client.post("/", headers=binary_headers(), data=json.dumps(obj)).headers["X-Jobttl-Outcome"] == "scheduled"


@pytest.mark.parametrize("attribute", REQUIRED)
@pytest.mark.parametrize("value", [5, True, ["1.0"], {"a": "b"}])
def test_a_structured_required_attribute_that_is_not_a_string_is_a_400_naming_it(client, redis, attribute, value):
    obj = finished()
    assert_refused_unwritten(
        redis,
        lambda: post_structured(client, structured(obj, **{attribute: value})),
        400,
        attribute,
        "must be strings",
        type(value).__name__,
    )
    assert redis.zscore(PENDING_INDEX, obj["metadata"]["uid"]) is None


@pytest.mark.parametrize("mode", ["binary", "structured"])
@pytest.mark.parametrize("version", ["0.3", "1", "1.0.2", "2.0"])
def test_a_specversion_other_than_1_0_is_a_400_in_both_modes(client, redis, mode, version):
    obj = finished()
    if mode == "binary":
        send = lambda: client.post("/", headers=binary_headers(specversion=version), data=json.dumps(obj))  # noqa: E731
    else:
        send = lambda: post_structured(client, structured(obj, specversion=version))  # noqa: E731
    assert_refused_unwritten(redis, send, 400, "specversion", repr(version), "'1.0'")
    assert redis.zscore(PENDING_INDEX, obj["metadata"]["uid"]) is None


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "application/octet-stream"])
def test_data_declared_not_json_is_a_415_in_both_modes(client, redis, content_type):
    obj = finished()
    assert_refused_unwritten(
        redis,
        lambda: client.post("/", headers=binary_headers() | {"content-type": content_type}, data=json.dumps(obj)),
        415,
        "Content-Type",
        content_type,
    )
    assert_refused_unwritten(
        redis,
        lambda: post_structured(client, structured(obj, datacontenttype=content_type)),
        415,
        "datacontenttype",
        content_type,
    )
    assert redis.zscore(PENDING_INDEX, obj["metadata"]["uid"]) is None


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "text/json", "application/merge+json"])
def test_data_declared_json_in_any_spelling_is_read(client, content_type):
    response = post_structured(client, structured(finished(), datacontenttype=content_type))
    assert response.status_code == 202 and response.headers["X-Jobttl-Outcome"] == "scheduled"


def test_null_optional_attributes_are_unset_as_the_json_format_says(client):
    # The spec's own example carries "subject": null; JSON null means "not set" for every attribute.
    envelope = structured(finished(), subject=None, time=None, dataschema=None)
    response = post_structured(client, envelope)
    assert response.status_code == 202 and response.headers["X-Jobttl-Outcome"] == "scheduled"


def test_a_structured_event_is_read_from_its_body_even_with_ce_headers(client):
    # The HTTP binding tells the modes apart by Content-Type; the headers here disagree with the body.
    obj = finished()
    response = post_structured(
        client,
        structured(obj),
        **{"ce-specversion": "1.0", "ce-id": "2", "ce-source": "s", "ce-type": "com.example.other"},
    )
    assert response.status_code == 202 and response.headers["X-Jobttl-Outcome"] == "scheduled"


@pytest.mark.parametrize("mode", ["binary", "structured"])
def test_a_time_that_is_not_a_timestamp_is_a_400_naming_time(client, redis, mode):
    obj = finished()
    if mode == "binary":
        send = lambda: client.post("/", headers=binary_headers(time="yesterday"), data=json.dumps(obj))  # noqa: E731
    else:
        send = lambda: post_structured(client, structured(obj, time="yesterday"))  # noqa: E731
    assert_refused_unwritten(redis, send, 400, "'time'", "RFC 3339")


@pytest.mark.parametrize(
    "content_type, words",
    [("application/cloudevents+avro", "event format"), ("application/cloudevents-batch+json", "batched")],
)
def test_other_event_formats_and_batches_are_a_415(client, redis, content_type, words):
    assert_refused_unwritten(
        redis,
        lambda: client.post("/", headers={"content-type": content_type}, data=json.dumps([structured(finished())])),
        415,
        words,
    )


WIDGETS = """\
ttl: 1d
kinds: [Widget]
kindDeclarations:
  - group: widgets.example.com
    version: v1
    kind: Widget
    plural: widgets
    finished: {state: {path: status.phase, values: {Done: succeeded}}}
    finishedAt: [status.doneAt]
    ttl: {celWhen: spec.x, celInputs: [spec.x], cel: "self.spec.x"}
"""


def test_a_cel_event_past_the_evaluation_slots_is_told_to_retry_and_nothing_is_written(
    redis_server, queue_name, redis, tmp_path
):
    # The sink keeps most threads free of CEL: with every slot taken, an event that needs one more
    # evaluation gets a 503 with Retry-After at once (its sender retries), never a queued thread.
    from jobttl.core.domain.kinds import cel as celexpr

    policy = tmp_path / "policy.yaml"
    policy.write_text(WIDGETS)
    client = app_with(redis_server, queue_name, JOBTTL_POLICY=str(policy)).test_client()
    widget = with_server_fields(
        {
            "apiVersion": "widgets.example.com/v1",
            "kind": "Widget",
            "metadata": {"name": f"w-{uuid.uuid4().hex[:8]}", "namespace": "team"},
            "spec": {"x": 7200},
            "status": {"phase": "Done", "doneAt": "2030-01-01T00:00:00Z"},
        }
    )
    celexpr.limit_evaluations(1)
    try:
        assert celexpr._SLOTS.acquire(blocking=False)  # a costly event in flight
        response = assert_refused_unwritten(redis, lambda: post(client, widget), 503, "CEL evaluations are running")
        assert response.headers["Retry-After"] == "1"
        celexpr._SLOTS.release()
        response = post(client, widget)
        assert response.status_code == 202, response.json
    finally:
        celexpr.limit_evaluations(None)
