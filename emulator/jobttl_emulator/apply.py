"""Server-side apply with simplified field management.

What is kept from kube-apiserver's apply (``k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager``
and structured-merge-diff):

* Each ``Apply`` manager owns the fields of its last applied configuration,
  recorded in ``metadata.managedFields`` (``operation: Apply``, ``fieldsType:
  FieldsV1``, ``f:<field>`` keys).
* Applying merges the configuration into the object; fields the manager
  applied before and no longer applies are removed, unless another manager
  owns them too.
* Applying a field another ``Apply`` manager owns, with a different value, is a
  409 conflict (``Apply failed with 1 conflict: conflict with "m": .spec.x``)
  unless ``force=true``, which takes the field over.
* Applying to a missing object creates it.

Simplified: lists are atomic (one field, replaced whole; the real server merges
associative lists such as ``containers`` by key), and updates other than apply
(PUT, JSON/merge/strategic patches) neither record managers nor take fields
over, so they never cause conflicts. ``apiVersion``, ``kind``,
``metadata.name``/``namespace`` and server-set metadata are not owned; only
labels, annotations, finalizers and ownerReferences of ``metadata`` are.
"""

from __future__ import annotations

import copy
from typing import Any

Path = tuple[str, ...]
_OWNED_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")


class ApplyConflict(Exception):
    """Fields another manager owns, as (manager, path) pairs."""

    def __init__(self, conflicts: list[tuple[str, Path]]) -> None:
        super().__init__(conflict_message(conflicts))
        self.conflicts = conflicts


def field_path(path: Path) -> str:
    """fieldpath.Path.String(): ``.spec.runPolicy.ttlSecondsAfterFinished``."""
    return "".join(f".{p}" for p in path)


def conflict_message(conflicts: list[tuple[str, Path]]) -> str:
    """``getConflictMessage`` of the apiserver's field manager."""
    if len(conflicts) == 1:
        manager, path = conflicts[0]
        return f'Apply failed with 1 conflict: conflict with "{manager}": {field_path(path)}'
    lines = []
    for manager in sorted({m for m, _ in conflicts}):
        lines.append(f'conflicts with "{manager}":')
        lines.extend(f"- {field_path(p)}" for m, p in conflicts if m == manager)
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


def leaf_paths(obj: dict, skip_status: bool) -> set[Path]:
    """The fields an applied configuration sets: maps recurse, everything else is one field."""
    paths: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind") or (key == "status" and skip_status):
            continue
        if key == "metadata" and isinstance(value, dict):
            owned = {k: v for k, v in value.items() if k in _OWNED_METADATA}
            paths |= {("metadata", *p) for p in _leaves(owned)} if owned else set()  # never metadata itself
        else:
            paths |= {(key, *p) for p in _leaves(value)}
    return paths


def _leaves(value: Any) -> set[Path]:
    if not isinstance(value, dict) or not value:
        return {()}
    return {(key, *rest) for key, child in value.items() for rest in _leaves(child)}


def encode_fields(paths: set[Path]) -> dict:
    """FieldsV1: ``{"f:spec": {"f:replicas": {}}}``."""
    root: dict = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return root


def decode_fields(fields: Any) -> set[Path]:
    """Inverse of :func:`encode_fields` (``.`` markers and ``k:``/``v:`` keys are ignored)."""
    if not isinstance(fields, dict):
        return set()
    paths: set[Path] = set()
    for key, child in fields.items():
        if not key.startswith("f:"):
            continue
        below = decode_fields(child)
        paths |= {(key[2:], *p) for p in below} if below else {(key[2:],)}
    return paths


def _get(obj: Any, path: Path) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _remove(obj: dict, path: Path) -> None:
    parent = _get(obj, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


def _merge(target: dict, applied: dict) -> None:
    for key, value in applied.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


_MISSING = object()


def apply(
    current: dict, applied: dict, manager: str, force: bool, api_version: str, now: str, skip_status: bool
) -> dict:
    """The object after ``manager`` applies ``applied`` to ``current`` (``{}`` when creating)."""
    managed = [dict(e) for e in current.get("metadata", {}).get("managedFields") or [] if isinstance(e, dict)]
    mine = next((e for e in managed if e.get("manager") == manager and e.get("operation") == "Apply"), None)
    before = decode_fields(mine.get("fieldsV1")) if mine else set()
    wanted = leaf_paths(applied, skip_status)
    others = {id(e): decode_fields(e.get("fieldsV1")) for e in managed if e is not mine}
    conflicts = [
        (e.get("manager", ""), path)
        for e in managed
        if e is not mine
        for path in sorted(wanted & others[id(e)])
        if _get(current, path) != _get(applied, path)
    ]
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    result = copy.deepcopy(current)
    owned_elsewhere = set().union(*others.values()) if others else set()
    for path in before - wanted - owned_elsewhere:
        _remove(result, path)
    _merge(result, applied)
    entries = []
    for entry in managed:
        if entry is mine:
            continue
        remaining = others[id(entry)] - (wanted if force else set())
        if remaining:
            entries.append({**entry, "fieldsV1": encode_fields(remaining)} if force else entry)
    entries.append(
        {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": api_version,
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": encode_fields(wanted),
        }
    )
    result.setdefault("metadata", {})["managedFields"] = entries
    return result
