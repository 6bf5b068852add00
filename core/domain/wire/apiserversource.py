"""The ApiServerSource CloudEvent format, said once: read by the sink, written by `jobttl watch`.

Knative's ApiServerSource (knative/eventing pkg/adapter/apiserver) sends, per watched object
change:

- Resource mode: type ``dev.knative.apiserver.resource.{add,update,delete}``, data = the
  whole object (its new state for updates, its last state for deletes);
- Reference mode: type ``dev.knative.apiserver.ref.{add,update,delete}``, data =
  ``{"apiVersion", "kind", "namespace", "name"}`` only.

Both binary mode (``ce-*`` headers, JSON body) and structured mode
(``application/cloudevents+json``) are read, told apart by Content-Type as the HTTP binding
says. Anything we cannot read raises `BadEvent` with the HTTP status to answer and a message
that names the problem; reading never reaches Redis or the API server, and identity fields
are checked as the API server checks them (`jobttl.core.domain.wire.identity`) before anything
downstream sees them. The spec's REQUIRED attributes are checked once, for both modes, in
`_event`: the SDK's constructor is written for senders and fills in a missing ``id``.

JSON goes through orjson (`jobttl.core.domain.wire.jsoncodec`) rather than the SDK's standard-library
format: it is faster on 10 KB objects and refuses nesting deeper than 1024 levels with a
ValueError instead of a RecursionError.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cloudevents.core.base import BaseCloudEvent, EventFactory
from cloudevents.core.bindings.http import HTTPMessage, from_binary, from_structured, to_binary
from cloudevents.core.exceptions import BaseCloudEventException, CloudEventValidationError
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.domain.wire.identity import InvalidIdentity, check_name, check_namespace, check_uid

TYPE_PREFIX = "dev.knative.apiserver."
MODES = {"resource": "resource", "ref": "reference"}
ACTIONS = ("add", "update", "delete")
REQUIRED_ATTRIBUTES = ("specversion", "id", "source", "type")
SPECVERSION = "1.0"  # the only one read
# What a Knative PingSource sends; the sink treats it as "resync now".
PING_TYPE = "dev.knative.sources.ping"
# The CloudEvent jobttl sends ahead of a deletion, under a prefix jobttl owns.
UPCOMING_TYPE = "io.jobttl.deletion.upcoming"


class BadEvent(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ApiServerEvent:
    """One change to one Kubernetes object, as ApiServerSource reported it."""

    action: str  # add | update | delete
    mode: str  # resource | reference
    api_version: str
    kind: str
    namespace: str
    name: str
    object: dict[str, Any] | None  # the object itself, in Resource mode
    source: str = ""

    @property
    def uid(self) -> str | None:
        return self.object["metadata"]["uid"] if self.object is not None else None


@dataclass(frozen=True)
class OtherEvent:
    """A well-formed CloudEvent that is not an ApiServerSource event; we ignore it."""

    type: str
    source: str = ""


class FastJSONFormat(JSONFormat):
    """The SDK's JSON event format with orjson for the data: fast, and clean failures."""

    def read(self, event_factory: EventFactory | None, data: str | bytes) -> BaseCloudEvent:
        envelope = jsoncodec.loads(data)
        if not isinstance(envelope, dict):
            raise BadEvent(400, f"a structured-mode event must be a JSON object, got {type(envelope).__name__}")
        if None in envelope.values():
            # JSON null is an unset attribute (JSON event format, 2.2): a null `id` is a missing
            # one, a null `subject` is no subject. A null `data` is a payload, kept.
            envelope = {k: v for k, v in envelope.items() if v is not None or k == "data"}
        content_type = envelope.get("datacontenttype")
        if isinstance(content_type, str) and content_type:
            _require_json_data(_media_type(content_type), "datacontenttype")
        if "time" in envelope:
            envelope["time"] = _timestamp(envelope["time"])
        event_data = envelope.pop("data", None)
        if event_data is None and "data_base64" in envelope:
            try:
                event_data = base64.b64decode(envelope.pop("data_base64"), validate=True)
            except (ValueError, TypeError):
                raise BadEvent(400, "CloudEvents member 'data_base64' is not Base64") from None
        return (event_factory or CloudEvent)(envelope, event_data)

    def read_data(self, body: bytes, datacontenttype: str | None) -> Any:
        return jsoncodec.loads(body) if body else None

    def write_data(self, data: Any, datacontenttype: str | None) -> bytes:
        return jsoncodec.dumps(data) if isinstance(data, dict) else super().write_data(data, datacontenttype)


FORMAT = FastJSONFormat()


def _event(attributes: dict[str, Any], data: Any) -> CloudEvent:
    """The event factory for both modes: the spec's REQUIRED attributes, then the SDK's checks.

    REQUIRED means present and a non-empty string (and we read CloudEvents 1.0 only, what
    ApiServerSource, PingSource and `jobttl watch` send). The SDK's constructor would fill a
    missing `id` or `specversion` in, so this must come first.
    """
    missing = [a for a in REQUIRED_ATTRIBUTES if attributes.get(a) in (None, "")]
    if missing:
        raise BadEvent(400, f"missing or empty required CloudEvents attribute(s): {', '.join(missing)}")
    not_text = [
        f"{a} ({type(attributes[a]).__name__})" for a in REQUIRED_ATTRIBUTES if not isinstance(attributes[a], str)
    ]
    if not_text:
        raise BadEvent(400, f"required CloudEvents attribute(s) must be strings: {', '.join(not_text)}")
    if attributes["specversion"] != SPECVERSION:
        raise BadEvent(
            400,
            f"unsupported CloudEvents specversion {attributes['specversion'][:20]!r}; this sink reads {SPECVERSION!r}",
        )
    return CloudEvent(attributes, data)


def _timestamp(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    raise BadEvent(400, f"CloudEvents attribute 'time' must be an RFC 3339 timestamp, got {str(value)[:40]!r}")


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _require_json_data(media_type: str, named: str) -> None:
    # JSON is */json or */*+json (JSON event format, 3.1.1); the sink reads nothing else.
    if not (media_type.endswith("/json") or media_type.endswith("+json")):
        raise BadEvent(415, f"event data must be JSON, got {named} {media_type[:100]!r}")


def parse(headers: Mapping[str, str], body: bytes) -> ApiServerEvent | OtherEvent:
    """Read one HTTP request as an ApiServerSource event (or another CloudEvent)."""
    headers = {k.lower(): v for k, v in headers.items()}
    structured = _structured(headers)
    event = _cloud_event(headers, body, structured)
    event_type, source = str(event.get_type()), str(event.get_source())
    if not event_type.startswith(TYPE_PREFIX):
        return OtherEvent(event_type, source)
    mode_word, _, action = event_type[len(TYPE_PREFIX) :].partition(".")
    if mode_word not in MODES or action not in ACTIONS:
        return OtherEvent(event_type, source)
    data = event.get_data()
    if not isinstance(data, dict):
        raise BadEvent(400, f"event data must be a JSON object, got {type(data).__name__}")
    try:
        if MODES[mode_word] == "resource":
            return _resource_event(action, data, source)
        return _reference_event(action, data, source)
    except InvalidIdentity as exc:
        raise BadEvent(400, str(exc)) from None


def _structured(headers: dict[str, str]) -> bool:
    """Whether the request (its headers lower-cased) is a structured-mode event, else a binary-mode one;
    BadEvent (415) when it is neither, or a batch, or in an event format this sink does not read."""
    media_type = _media_type(headers.get("content-type"))
    # The HTTP binding (section 3) tells the modes apart by Content-Type alone: a structured
    # event may carry ce-* headers too, and its body is what counts.
    if media_type.startswith("application/cloudevents-batch"):
        raise BadEvent(415, "batched CloudEvents are not supported; send one event per request")
    structured = media_type.startswith("application/cloudevents")
    if structured and media_type != FORMAT.CONTENT_TYPE:
        raise BadEvent(
            415, f"unsupported CloudEvents event format {media_type[:100]!r}; send {FORMAT.CONTENT_TYPE} or binary mode"
        )
    if not structured:
        if not any(name.startswith("ce-") for name in headers):
            raise BadEvent(
                415,
                "expected a CloudEvent: ce-* headers with a JSON body, or Content-Type "
                f"application/cloudevents+json; got Content-Type {media_type[:100] or '(none)'!r}",
            )
        if media_type:
            _require_json_data(media_type, "Content-Type")
    return structured


def _cloud_event(headers: dict[str, str], body: bytes, structured: bool) -> Any:
    """The CloudEvent the SDK reads; whatever it refuses, a BadEvent (400) saying why."""
    message = HTTPMessage(headers=headers, body=body)
    try:
        return (from_structured if structured else from_binary)(message, FORMAT, _event)
    except jsoncodec.DecodeError as exc:  # invalid JSON, nesting too deep, a lone surrogate
        raise BadEvent(400, f"event is not valid JSON: {exc}") from None
    except (ValueError, OverflowError) as exc:
        # Structured mode names what it refuses; in binary mode, this is the SDK reading ce-time.
        what = "invalid CloudEvent"
        if "ce-time" in headers:
            what = "CloudEvents attribute 'time' must be an RFC 3339 timestamp"
        raise BadEvent(400, f"{what}: {exc}") from None
    except CloudEventValidationError as exc:
        problems = "; ".join(str(e) for errors in exc.errors.values() for e in errors)
        raise BadEvent(400, f"invalid CloudEvent: {problems}") from None
    except (BaseCloudEventException, TypeError, KeyError) as exc:
        raise BadEvent(400, f"invalid CloudEvent: {exc}") from None


def _require_str(data: Mapping[str, Any], field: str, where: str) -> str:
    value = data.get(field.rsplit(".", 1)[-1])
    if not isinstance(value, str) or not value:
        raise BadEvent(400, f"{where}: required field {field!r} is missing or not a non-empty string")
    return value


def _resource_event(action: str, obj: dict[str, Any], source: str) -> ApiServerEvent:
    where = "Resource-mode event data (a Kubernetes object)"
    api_version = _require_str(obj, "apiVersion", where)
    kind = _require_str(obj, "kind", where)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise BadEvent(400, f"{where}: required field 'metadata' is missing or not an object")
    name = check_name(_require_str(meta, "metadata.name", where))
    namespace = check_namespace(_require_str(meta, "metadata.namespace", where))
    check_uid(_require_str(meta, "metadata.uid", where))
    for field in ("labels", "annotations"):
        values = meta.get(field) or {}
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise BadEvent(400, f"{where}: metadata.{field} must be an object of strings")
    return ApiServerEvent(action, "resource", api_version, kind, namespace, name, obj, source)


def _reference_event(action: str, ref: dict[str, Any], source: str) -> ApiServerEvent:
    where = "Reference-mode event data"
    return ApiServerEvent(
        action,
        "reference",
        _require_str(ref, "apiVersion", where),
        _require_str(ref, "kind", where),
        check_namespace(_require_str(ref, "namespace", where)),
        check_name(_require_str(ref, "name", where)),
        None,
        source,
    )


# --- writing: what `jobttl watch` and the announcements send --------------------------------


def event_type(action: str, mode: str = "resource") -> str:
    word = next(w for w, m in MODES.items() if m == mode)
    return f"{TYPE_PREFIX}{word}.{action}"


def resource_event(action: str, obj: dict[str, Any], source: str, subject: str) -> HTTPMessage:
    """The binary-mode HTTP message an ApiServerSource in Resource mode sends for `obj`.

    The extensions (kind, apiversion, name, namespace) are the ones the adapter sets, so
    Triggers filtering on them work the same for both event sources.
    """
    meta = obj.get("metadata", {})
    attributes = {
        "specversion": SPECVERSION,
        "id": str(uuid.uuid4()),
        "source": source,
        "type": event_type(action),
        "subject": subject,
        "datacontenttype": "application/json",
        "kind": obj.get("kind", ""),
        "apiversion": obj.get("apiVersion", ""),
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", ""),
    }
    return to_binary(CloudEvent(attributes=attributes, data=obj), FORMAT)


def cloudevent(event_type_: str, source: str, subject: str, data: dict[str, Any]) -> HTTPMessage:
    """A binary-mode CloudEvent of jobttl's own (the deletion announcement)."""
    attributes = {
        "specversion": SPECVERSION,
        "id": str(uuid.uuid4()),
        "source": source,
        "type": event_type_,
        "subject": subject,
        "datacontenttype": "application/json",
    }
    return to_binary(CloudEvent(attributes=attributes, data=data), FORMAT)
