"""Unknown fields of custom resources: pruned, or refused with ``fieldValidation=Strict``.

apiextensions-apiserver decodes custom resources against the CRD's structural
schema: fields the schema does not declare are dropped ("pruning") unless an
``x-kubernetes-preserve-unknown-fields`` schema keeps them, and with
``fieldValidation=Strict`` (what kubectl sends) the request fails instead:
400 ``TFJob in version "v1" cannot be handled as a TFJob: strict decoding
error: unknown field "spec.foo"``. ``apiVersion``, ``kind`` and ``metadata`` are
always known at the root and in ``x-kubernetes-embedded-resource`` objects;
``metadata`` holds ObjectMeta's fields only.

Only kinds with a CRD schema are checked; built-in kinds and kinds registered
without a CRD keep whatever they are sent. With ``Warn`` (the server's default)
fields are dropped as with ``Ignore``; the ``Warning`` header is not sent.
"""

from __future__ import annotations

from typing import Any

OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
_RESOURCE_FIELDS = ("apiVersion", "kind", "metadata")


def prune(obj: dict, schema: dict) -> tuple[dict, list[str]]:
    """``obj`` without the fields ``schema`` does not declare, and those fields' paths, sorted."""
    unknown: list[str] = []
    pruned = _resource(obj, schema, "", unknown)
    return pruned, sorted(unknown)


def _resource(obj: dict, schema: dict, path: str, unknown: list[str]) -> dict:
    """An object with apiVersion/kind/metadata (the root, or an embedded resource)."""
    pruned = _walk({k: v for k, v in obj.items() if k not in _RESOURCE_FIELDS}, schema, path, unknown)
    for key in _RESOURCE_FIELDS:
        if key in obj:
            pruned[key] = obj[key]
    if isinstance(obj.get("metadata"), dict):
        meta = obj["metadata"]
        unknown.extend(_join(_join(path, "metadata"), k) for k in meta if k not in OBJECT_META_FIELDS)
        pruned["metadata"] = {k: v for k, v in meta.items() if k in OBJECT_META_FIELDS}
    return pruned


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(value: Any, schema: Any, path: str, unknown: list[str]) -> Any:
    if not isinstance(schema, dict):
        return value
    if isinstance(value, list):
        return [_walk(v, schema.get("items"), f"{path}[{i}]", unknown) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if schema.get("x-kubernetes-embedded-resource") and path:
        return _resource(value, {**schema, "x-kubernetes-embedded-resource": False}, path, unknown)
    properties = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
    result = {}
    for key, child in value.items():
        if key in properties:
            result[key] = _walk(child, properties[key], _join(path, key), unknown)
        elif isinstance(extra, dict):
            result[key] = _walk(child, extra, _join(path, key), unknown)
        elif keep_unknown:
            result[key] = child
        else:
            unknown.append(_join(path, key))
    return result


def strict_message(kind: str, version: str, unknown: list[str]) -> str:
    fields = ", ".join(f'unknown field "{p}"' for p in unknown)
    return f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: {fields}'
