"""Reading ApiServerSource CloudEvents (jobttl.core.domain.wire.apiserversource), without any server."""

import json

import pytest
from cloudevents.core.bindings.http import to_binary_event, to_structured_event
from cloudevents.core.v1.event import CloudEvent

from jobttl.core.domain.wire.apiserversource import ApiServerEvent, BadEvent, OtherEvent, parse, resource_event
from tests.fixtures import finished_status, tfjob, with_server_fields


def apiserver_event(event_type, data, **extensions):
    attributes = {
        "type": event_type,
        "source": "https://10.96.0.1:443",
        "id": "6f8a",
        "specversion": "1.0",
        "subject": "/apis/kubeflow.org/v1/namespaces/team/tfjobs/train",
        "kind": "TFJob",
        "apiversion": "kubeflow.org/v1",
        "name": "train",
        "namespace": "team",
        **extensions,
    }
    return CloudEvent(attributes=attributes, data=data)


def finished_job():
    obj = with_server_fields(tfjob("train", "team", ttl=60))
    obj["status"] = finished_status(1_700_000_000)
    return obj


@pytest.mark.parametrize("encode", [to_binary_event, to_structured_event])
def test_resource_mode_events_carry_the_whole_object(encode):
    obj = finished_job()
    message = encode(apiserver_event("dev.knative.apiserver.resource.update", obj))
    event = parse(message.headers, message.body)
    assert isinstance(event, ApiServerEvent)
    assert (event.action, event.mode, event.namespace, event.name) == ("update", "resource", "team", "train")
    assert event.object == obj


@pytest.mark.parametrize("encode", [to_binary_event, to_structured_event])
def test_reference_mode_events_carry_only_the_reference(encode):
    ref = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "namespace": "team", "name": "train"}
    message = encode(apiserver_event("dev.knative.apiserver.ref.delete", ref))
    event = parse(message.headers, message.body)
    assert (event.action, event.mode, event.kind, event.object) == ("delete", "reference", "TFJob", None)


def test_other_event_types_are_recognised_and_not_errors():
    message = to_binary_event(apiserver_event("dev.knative.sources.ping", {"hello": 1}))
    assert parse(message.headers, message.body) == OtherEvent("dev.knative.sources.ping", "https://10.96.0.1:443")


def binary_headers(**overrides):
    headers = {
        "ce-specversion": "1.0",
        "ce-id": "1",
        "ce-source": "s",
        "ce-type": "dev.knative.apiserver.resource.update",
        "content-type": "application/json",
    }
    headers.update(overrides)
    return {k: v for k, v in headers.items() if v is not None}


def rejected(headers, body):
    with pytest.raises(BadEvent) as info:
        parse(headers, body)
    return info.value


def test_non_json_data_is_a_400_that_says_so():
    error = rejected(binary_headers(), b"{not json")
    assert error.status == 400 and "JSON" in error.message


@pytest.mark.parametrize("missing", ["ce-id", "ce-source", "ce-type"])
def test_missing_required_attributes_are_named(missing):
    error = rejected(binary_headers(**{missing: None}), json.dumps(finished_job()).encode())
    assert error.status == 400 and missing[3:] in error.message


def test_structured_mode_missing_attributes_are_named():
    body = json.dumps({"specversion": "1.0", "id": "1", "data": {}}).encode()
    error = rejected({"content-type": "application/cloudevents+json"}, body)
    assert error.status == 400 and "source" in error.message and "type" in error.message


def test_unsupported_spec_version_is_a_400():
    error = rejected(binary_headers(**{"ce-specversion": "0.1"}), b"{}")
    assert error.status == 400 and "specversion" in error.message


@pytest.mark.parametrize("content_type", ["text/plain", None, "application/xml"])
def test_something_that_is_not_a_cloudevent_is_a_415(content_type):
    error = rejected({"content-type": content_type} if content_type else {}, b"hello")
    assert error.status == 415


def test_binary_mode_with_non_json_content_type_is_a_415():
    assert rejected(binary_headers(**{"content-type": "text/plain"}), b"{}").status == 415


def test_batches_are_refused_with_a_415():
    assert rejected({"content-type": "application/cloudevents-batch+json"}, b"[]").status == 415


@pytest.mark.parametrize("data", [[1, 2], "a string", 42])
def test_data_that_is_not_an_object_is_a_400(data):
    error = rejected(binary_headers(), json.dumps(data).encode())
    assert error.status == 400


@pytest.mark.parametrize("field", ["apiVersion", "kind", "metadata"])
def test_resource_data_missing_fields_is_a_400_naming_the_field(field):
    obj = finished_job()
    del obj[field]
    error = rejected(binary_headers(), json.dumps(obj).encode())
    assert error.status == 400 and field in error.message


@pytest.mark.parametrize("field", ["name", "namespace", "uid"])
def test_resource_data_missing_metadata_fields_is_a_400_naming_the_field(field):
    obj = finished_job()
    del obj["metadata"][field]
    error = rejected(binary_headers(), json.dumps(obj).encode())
    assert error.status == 400 and f"metadata.{field}" in error.message


def test_reference_data_missing_the_name_is_a_400():
    body = json.dumps({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "namespace": "team"}).encode()
    error = rejected(binary_headers(**{"ce-type": "dev.knative.apiserver.ref.add"}), body)
    assert error.status == 400 and "'name'" in error.message


def test_what_the_watcher_writes_the_sink_reads_back_unchanged():
    obj = finished_job()
    message = resource_event(
        "update", obj, "https://10.96.0.1:443", "/apis/kubeflow.org/v1/namespaces/team/tfjobs/train"
    )
    event = parse(message.headers, message.body)
    assert (event.action, event.mode, event.source, event.object) == (
        "update",
        "resource",
        "https://10.96.0.1:443",
        obj,
    )
    assert {message.headers[h] for h in ("ce-kind", "ce-name", "ce-namespace")} == {"TFJob", "train", "team"}


DEEP = b'{"a":' * 1500 + b"1" + b"}" * 1500


def test_binary_data_nested_beyond_any_sensible_depth_is_a_400_not_a_crash():
    error = rejected(binary_headers(), b'{"apiVersion": "kubeflow.org/v1", "spec": ' + DEEP + b"}")
    assert error.status == 400 and "depth" in error.message


def test_a_structured_envelope_nested_beyond_any_sensible_depth_is_a_400_not_a_crash():
    body = (
        b'{"specversion": "1.0", "id": "1", "source": "s", "type": "dev.knative.apiserver.resource.update", '
        b'"data": ' + DEEP + b"}"
    )
    error = rejected({"content-type": "application/cloudevents+json"}, body)
    assert error.status == 400 and "depth" in error.message


@pytest.mark.parametrize(
    "field, value",
    [
        ("namespace", ".."),
        ("name", "."),
        ("name", "UPPER"),
        ("name", "a" * 254),
        ("namespace", "a" * 64),
        ("name", "caf\u00e9"),
        ("uid", "a:b"),
        ("uid", "../../etc"),
        ("uid", "not-a-uuid"),
    ],
)
def test_identities_no_api_server_would_produce_are_a_400_naming_the_field(field, value):
    obj = finished_job()
    obj["metadata"][field] = "PLACEHOLDER"
    body = json.dumps(obj).replace('"PLACEHOLDER"', f'"{value}"').encode()
    error = rejected(binary_headers(), body)
    assert error.status == 400 and f"metadata.{field}" in error.message


def test_a_lone_surrogate_is_a_400_before_it_reaches_redis_or_a_url():
    obj = finished_job()
    obj["metadata"]["name"] = "PLACEHOLDER"
    error = rejected(binary_headers(), json.dumps(obj).replace('"PLACEHOLDER"', '"x\\ud800"').encode())
    assert error.status == 400 and "surrogate" in error.message


@pytest.mark.parametrize(
    "meta, words",
    [
        ({"annotations": ["x"]}, "metadata.annotations"),
        ({"labels": "x"}, "metadata.labels"),
        ({"labels": {"a": 1}}, "metadata.labels"),
    ],
)
def test_malformed_labels_and_annotations_are_a_400(meta, words):
    obj = finished_job()
    obj["metadata"].update(meta)
    error = rejected(binary_headers(), json.dumps(obj).encode())
    assert error.status == 400 and words in error.message
