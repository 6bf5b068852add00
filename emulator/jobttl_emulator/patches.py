"""Patch formats the emulator accepts: JSON merge, JSON patch, strategic merge.

``merge_patch`` is RFC 7386 and ``json_patch`` RFC 6902, both as custom
resources take them. ``strategic_merge_patch`` follows
``k8s.io/apimachinery/pkg/util/strategicpatch`` for the built-in kinds, driven
by the ``x-kubernetes-patch-strategy`` / ``x-kubernetes-patch-merge-key``
extensions of their schemas (``builtin_schemas.py``): lists with a merge key
merge element by element, ``merge`` lists of primitives become unions, other
lists are replaced; the ``$patch`` (``replace``/``delete``), ``$retainKeys``,
``$setElementOrder/<list>`` and ``$deleteFromPrimitiveList/<list>`` directives
are understood. Not emulated: ``$patch: merge`` on lists and keeping the
server-only elements' relative positions under ``$setElementOrder`` (they go
last).
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(Exception):
    """A patch that does not apply to the document (the server answers 422)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must be empty or start with a '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, tokens: list[str], path: str) -> Any:
    for token in tokens:
        if isinstance(doc, dict) and token in doc:
            doc = doc[token]
        elif isinstance(doc, list) and token.isdigit() and int(token) < len(doc):
            doc = doc[int(token)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return doc


def _index(container: list, token: str, path: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or int(token) > len(container) - (0 if allow_end else 1):
        raise PatchError(f"invalid array index {token!r} in path {path!r}")
    return int(token)


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _resolve(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, allow_end=True), value)
    else:
        raise PatchError(f"doc is missing path: {path!r}")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _resolve(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, path, allow_end=False))
    raise PatchError(f"doc is missing path: {path!r}")


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch; raises ``PatchError`` when an operation does not apply."""
    if not isinstance(operations, list):
        raise ValueError("a JSON patch must be a list of operations")
    for op in operations:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise ValueError(f"invalid JSON patch operation: {op!r}")
        kind, path = op.get("op"), op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise ValueError(f"{kind} operation is missing 'value': {op!r}")
        if kind in ("move", "copy") and not isinstance(op.get("from"), str):
            raise ValueError(f"{kind} operation is missing 'from': {op!r}")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _resolve(doc, _pointer(path), path)
            doc, _ = _remove(doc, path) if path else (doc, None)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "move":
            doc, value = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_resolve(doc, _pointer(op["from"]), op["from"])))
        elif kind == "test":
            if _resolve(doc, _pointer(path), path) != op["value"]:
                raise PatchError(f"testing value {path!r} failed: test failed")
        else:
            raise ValueError(f"unexpected JSON patch op {kind!r}")
    return doc


_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVES = "$deleteFromPrimitiveList/"


def _child(schema: dict | None, key: str) -> dict | None:
    """The schema of ``key`` inside an object schema (a property or additionalProperties)."""
    if not schema:
        return None
    if key in (schema.get("properties") or {}):
        return schema["properties"][key]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def _strategy(schema: dict | None) -> tuple[set[str], str]:
    """(patch strategies, merge key) of a list schema."""
    if not schema:
        return set(), ""
    strategies = set(filter(None, str(schema.get("x-kubernetes-patch-strategy", "")).split(",")))
    return strategies, schema.get("x-kubernetes-patch-merge-key", "")


def strategic_merge_patch(original: dict, patch: Any, schema: dict | None) -> dict:
    """Apply a strategic merge patch to ``original`` (not modified) using ``schema``'s extensions."""
    if not isinstance(patch, dict):
        raise ValueError("a strategic merge patch must be a JSON object")
    merged = _merge_map(copy.deepcopy(original), copy.deepcopy(patch), schema)
    return {} if merged is None else merged


def _merge_map(original: Any, patch: dict, schema: dict | None) -> dict | None:
    """Merge ``patch`` into the map ``original``; None when the patch deletes the map."""
    directive = patch.pop("$patch", None)
    if directive == "delete":
        return None
    if directive == "replace":
        return _without_directives(patch)
    if directive not in (None, "merge"):
        raise PatchError(f"Unknown patch type: {directive}")
    result = dict(original) if isinstance(original, dict) else {}
    retain = patch.pop("$retainKeys", None)
    orders = {k[len(_SET_ORDER) :]: patch.pop(k) for k in [k for k in patch if k.startswith(_SET_ORDER)]}
    for key in [k for k in patch if k.startswith(_DELETE_PRIMITIVES)]:
        field, doomed = key[len(_DELETE_PRIMITIVES) :], patch.pop(key)
        if isinstance(result.get(field), list):
            result[field] = [v for v in result[field] if v not in doomed]
    for key, value in patch.items():
        _merge_key(result, key, value, _child(schema, key))
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            result[field] = _ordered(result[field], order, _strategy(_child(schema, field))[1])
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_key(result: dict, key: str, value: Any, schema: dict | None) -> None:
    if value is None:
        result.pop(key, None)
    elif isinstance(value, dict):
        merged = _merge_map(result.get(key), value, schema)
        if merged is None:
            result.pop(key, None)
        else:
            result[key] = merged
    elif isinstance(value, list):
        result[key] = _merge_list(result.get(key), value, schema)
    else:
        result[key] = value


def _merge_list(original: Any, patch: list, schema: dict | None) -> list:
    strategies, merge_key = _strategy(schema)
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [_without_directives(p) for p in patch if not (isinstance(p, dict) and p.get("$patch") == "replace")]
    if "merge" not in strategies:
        return _without_directives(patch)
    current = list(original) if isinstance(original, list) else []
    if not merge_key:
        return current + [v for v in patch if v not in current]
    items = (schema or {}).get("items")
    for element in patch:
        if not isinstance(element, dict) or merge_key not in element:
            raise PatchError(f"map: {element} does not contain declared merge key: {merge_key}")
        index = next(
            (i for i, c in enumerate(current) if isinstance(c, dict) and c.get(merge_key) == element[merge_key]), None
        )
        if element.get("$patch") == "delete":
            current = [c for c in current if not (isinstance(c, dict) and c.get(merge_key) == element[merge_key])]
        elif index is None:
            current.append(_merge_map({}, element, items))
        else:
            current[index] = _merge_map(current[index], element, items)
    return current


def _ordered(values: list, order: list, merge_key: str) -> list:
    """``values`` in the order of ``$setElementOrder``; elements it does not name go last."""
    keys = [o.get(merge_key) if merge_key and isinstance(o, dict) else o for o in order]

    def rank(value: Any) -> int:
        key = value.get(merge_key) if merge_key and isinstance(value, dict) else value
        return keys.index(key) if key in keys else len(keys)

    return sorted(values, key=rank)


def _without_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_without_directives(v) for v in value]
    return value
