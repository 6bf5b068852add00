"""Decoding the few protobuf request bodies kubectl sends for built-in kinds.

kubectl's typed clients send ``Content-Type: application/vnd.kubernetes.protobuf``
(they accept JSON back): ``kubectl auth can-i`` creates a
SelfSubjectAccessReview, ``kubectl create namespace`` a Namespace; Helm stores its
releases in Secrets (or ConfigMaps) the same way. A real server decodes those; the
emulator decodes just these kinds (the
``runtime.Unknown`` envelope after the ``k8s\\x00`` magic, then the message by the
field numbers of ``k8s.io/api``'s ``generated.proto``) and answers in JSON.
Other protobuf bodies get 415.
"""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

# A schema maps field numbers to (name, kind); kind is "string", "int", "bool", "map" (map<string,string>),
# "bytesmap" (map<string,bytes>, base64 in JSON),
# a nested schema, or a one-element list [kind] for a repeated field.
_OWNER_REFERENCE = {
    1: ("kind", "string"),
    3: ("name", "string"),
    4: ("uid", "string"),
    5: ("apiVersion", "string"),
    6: ("controller", "bool"),
    7: ("blockOwnerDeletion", "bool"),
}
_OBJECT_META = {
    1: ("name", "string"),
    2: ("generateName", "string"),
    3: ("namespace", "string"),
    5: ("uid", "string"),
    6: ("resourceVersion", "string"),
    7: ("generation", "int"),
    11: ("labels", "map"),
    12: ("annotations", "map"),
    13: ("ownerReferences", [_OWNER_REFERENCE]),
    14: ("finalizers", ["string"]),
}
_RESOURCE_ATTRIBUTES = {
    1: ("namespace", "string"),
    2: ("verb", "string"),
    3: ("group", "string"),
    4: ("version", "string"),
    5: ("resource", "string"),
    6: ("subresource", "string"),
    7: ("name", "string"),
}
SCHEMAS = {
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): {
        1: ("metadata", _OBJECT_META),
        2: (
            "spec",
            {
                1: ("resourceAttributes", _RESOURCE_ATTRIBUTES),
                2: ("nonResourceAttributes", {1: ("path", "string"), 2: ("verb", "string")}),
            },
        ),
    },
    ("v1", "Namespace"): {1: ("metadata", _OBJECT_META), 2: ("spec", {1: ("finalizers", ["string"])})},
    # Helm's release storage (its default "secret" driver, or "configmap") writes with client-go's typed clients.
    ("v1", "Secret"): {
        1: ("metadata", _OBJECT_META),
        2: ("data", "bytesmap"),
        3: ("type", "string"),
        5: ("immutable", "bool"),
    },
    ("v1", "ConfigMap"): {
        1: ("metadata", _OBJECT_META),
        2: ("data", "map"),
        3: ("binaryData", "bytesmap"),
        4: ("immutable", "bool"),
    },
}
_UNKNOWN = {1: ("typeMeta", {1: ("apiVersion", "string"), 2: ("kind", "string")}), 2: ("raw", "bytes")}


class ProtobufError(ValueError):
    """A body that is not a protobuf message the emulator can decode."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def _wire_fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs: varints as ints, length-delimited fields as bytes."""
    fields, pos = [], 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            fields.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            fields.append((number, data[pos : pos + length]))
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return fields


def _value(kind: Any, raw: int | bytes) -> Any:
    if isinstance(kind, dict):
        return decode_message(_bytes(raw), kind)
    if kind == "int":
        return raw if isinstance(raw, int) else 0
    if kind == "bool":
        return bool(raw)
    if kind == "bytes":
        return _bytes(raw)
    return _bytes(raw).decode()


def _bytes(raw: int | bytes) -> bytes:
    if not isinstance(raw, bytes):
        raise ProtobufError("expected a length-delimited field")
    return raw


def decode_message(data: bytes, schema: dict) -> dict:
    message: dict[str, Any] = {}
    for number, raw in _wire_fields(data):
        if number not in schema:
            continue
        name, kind = schema[number]
        if kind == "map":
            entry = decode_message(_bytes(raw), {1: ("key", "string"), 2: ("value", "string")})
            message.setdefault(name, {})[entry.get("key", "")] = entry.get("value", "")
        elif kind == "bytesmap":  # map<string, bytes>: base64 in JSON, as []byte is
            entry = decode_message(_bytes(raw), {1: ("key", "string"), 2: ("value", "bytes")})
            message.setdefault(name, {})[entry.get("key", "")] = base64.b64encode(entry.get("value", b"")).decode()
        elif isinstance(kind, list):
            message.setdefault(name, []).append(_value(kind[0], raw))
        elif (value := _value(kind, raw)) not in ("", 0, b""):  # Go's JSON omits empty fields
            message[name] = value
    return message


def decode(body: bytes) -> dict:
    """The JSON form of a protobuf-encoded object of one of :data:`SCHEMAS`' kinds."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the protobuf body does not start with the k8s magic number")
    envelope = decode_message(body[len(MAGIC) :], _UNKNOWN)
    type_meta = envelope.get("typeMeta", {})
    api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
    schema = SCHEMAS.get((api_version, kind))
    if schema is None:
        raise ProtobufError(f"the emulator does not decode protobuf {api_version} {kind}")
    return {"apiVersion": api_version, "kind": kind, **decode_message(envelope.get("raw", b""), schema)}
