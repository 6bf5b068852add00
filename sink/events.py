"""Reading Knative ApiServerSource CloudEvents into what jobttl needs to know.

ApiServerSource (knative/eventing pkg/adapter/apiserver) sends, per watched object change:

- Resource mode: type ``dev.knative.apiserver.resource.{add,update,delete}``, data = the
  whole object (its new state for updates, its last state for deletes);
- Reference mode: type ``dev.knative.apiserver.ref.{add,update,delete}``, data =
  ``{"apiVersion", "kind", "namespace", "name"}`` only.

Both binary mode (``ce-*`` headers, JSON body) and structured mode
(``application/cloudevents+json``) are accepted. Anything we cannot read raises `BadEvent`
carrying the HTTP status and a message that names the problem; parsing never reaches
Redis or the API server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudevents.core.bindings.http import HTTPMessage, from_http_event
from cloudevents.core.exceptions import BaseCloudEventException

TYPE_PREFIX = "dev.knative.apiserver."
MODES = {"resource": "resource", "ref": "reference"}
ACTIONS = ("add", "update", "delete")
REQUIRED_ATTRIBUTES = ("specversion", "id", "source", "type")
# API servers assign RFC 4122 UUIDs; anything else cannot name a real object.
UID = re.compile(r"[0-9a-fA-F-]{1,64}")


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


@dataclass(frozen=True)
class OtherEvent:
    """A well-formed CloudEvent that is not an ApiServerSource event; we ignore it."""

    type: str


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or media_type.endswith("+json")


def parse(headers: Mapping[str, str], body: bytes) -> ApiServerEvent | OtherEvent:
    headers = {k.lower(): v for k, v in headers.items()}
    media_type = _media_type(headers.get("content-type"))
    binary = "ce-specversion" in headers
    if binary:
        if media_type and not _is_json(media_type):
            raise BadEvent(415, f"binary-mode event data must be JSON, got Content-Type {media_type!r}")
        missing = [a for a in REQUIRED_ATTRIBUTES if not headers.get(f"ce-{a}")]
    elif media_type == "application/cloudevents+json":
        try:
            envelope = json.loads(body)
        except ValueError as exc:
            raise BadEvent(400, f"structured-mode body is not valid JSON: {exc}") from None
        if not isinstance(envelope, dict):
            raise BadEvent(400, "structured-mode body must be a JSON object")
        missing = [a for a in REQUIRED_ATTRIBUTES if not envelope.get(a)]
    elif media_type == "application/cloudevents-batch+json":
        raise BadEvent(415, "batched CloudEvents are not supported; send one event per request")
    else:
        raise BadEvent(
            415,
            f"expected a CloudEvent: ce-* headers with a JSON body, or Content-Type "
            f"application/cloudevents+json; got Content-Type {media_type or '(none)'!r}",
        )
    if missing:
        raise BadEvent(400, f"missing required CloudEvents attribute(s): {', '.join(missing)}")

    try:
        event = from_http_event(HTTPMessage(headers=headers, body=body))
    except ValueError as exc:  # includes JSONDecodeError
        raise BadEvent(400, f"event data is not valid JSON: {exc}") from None
    except BaseCloudEventException as exc:
        raise BadEvent(400, f"invalid CloudEvent: {exc}") from None

    event_type = event.get_type()
    if not event_type.startswith(TYPE_PREFIX):
        return OtherEvent(event_type)
    mode_word, _, action = event_type[len(TYPE_PREFIX):].partition(".")
    if mode_word not in MODES or action not in ACTIONS:
        return OtherEvent(event_type)

    data = event.get_data()
    if isinstance(data, (str, bytes)):
        # The SDK passes through data it could not decode as JSON.
        raise BadEvent(400, "event data is not valid JSON")
    if not isinstance(data, dict):
        raise BadEvent(400, f"event data must be a JSON object, got {type(data).__name__}")
    if MODES[mode_word] == "resource":
        return _resource_event(action, data)
    return _reference_event(action, data)


def _require_str(data: Mapping[str, Any], field: str, where: str) -> str:
    value = data.get(field.rsplit(".", 1)[-1])
    if not isinstance(value, str) or not value:
        raise BadEvent(400, f"{where}: required field {field!r} is missing or not a non-empty string")
    return value


def _resource_event(action: str, obj: dict[str, Any]) -> ApiServerEvent:
    where = "Resource-mode event data (a Kubernetes object)"
    api_version = _require_str(obj, "apiVersion", where)
    kind = _require_str(obj, "kind", where)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise BadEvent(400, f"{where}: required field 'metadata' is missing or not an object")
    name = _require_str(meta, "metadata.name", where)
    namespace = _require_str(meta, "metadata.namespace", where)
    uid = _require_str(meta, "metadata.uid", where)
    if not UID.fullmatch(uid):
        raise BadEvent(400, f"{where}: metadata.uid {uid[:64]!r} is not a Kubernetes UID")
    for field in ("labels", "annotations"):
        if not isinstance(meta.get(field) or {}, dict):
            raise BadEvent(400, f"{where}: metadata.{field} must be an object")
    return ApiServerEvent(action, "resource", api_version, kind, namespace, name, obj)


def _reference_event(action: str, ref: dict[str, Any]) -> ApiServerEvent:
    where = "Reference-mode event data"
    return ApiServerEvent(
        action,
        "reference",
        _require_str(ref, "apiVersion", where),
        _require_str(ref, "kind", where),
        _require_str(ref, "namespace", where),
        _require_str(ref, "name", where),
        None,
    )
