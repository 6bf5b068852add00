"""A kind's declared paths checked against its CustomResourceDefinition, as the API server reads them.

The JSON Schema (``kinds.schema.json``) checks a path's syntax; only the cluster knows whether
``spec.suspnd`` names anything. A path naming no field never matches: a kind that never reads as
finished deletes nothing, but a ``managedBy`` or ``suspend`` path that reads nothing deletes what
it should have left alone. So the worker reads each enabled custom kind's CRD at start and checks
every path its declaration reads against the ``openAPIV3Schema`` of the version jobttl uses,
following the structural-schema rules the API server prunes objects by (an object can only hold
what its schema keeps):

- ``properties`` name the fields; ``additionalProperties`` (a map) takes any key, read by its
  schema; ``x-kubernetes-preserve-unknown-fields: true`` keeps anything below that is not declared;
- ``metadata`` is ObjectMeta whatever the CRD says (a CRD may only restrict ``name`` and
  ``generateName``): labels and annotations take any key; ``apiVersion``, ``kind`` and ``metadata``
  are always there at the top and in ``x-kubernetes-embedded-resource`` objects;
- ``allOf``/``anyOf``/``oneOf`` branches add what they declare;
- a node that declares no ``type`` and nothing below it (no ``properties``, ``additionalProperties``
  or ``items``) says nothing of what is there: a legacy (non-structural) schema's, open. A CRD
  whose ``spec.preserveUnknownFields`` is true (created under apiextensions v1beta1, read through
  v1) prunes nothing at all, and its schemas are often partial: no path is refused there;
- jobttl's paths read mappings only (`jobttl.core.domain.kinds.model.get_path`): one that goes through a list
  (``type: array``) never reads anything. The finishing condition is the one way into a list:
  ``finished.conditions`` reads ``status.conditions[].type``/``.status``, ``condition.X`` reads the
  ``X`` of that condition.

A path must also name what its reader takes: a value (a state, a time, a TTL, a controller's
name, a suspend flag) rather than an object or a list, and a TTL object (``ttl.within``) an object.

A path the schema cannot follow to its end (below preserved unknown fields, a map of anything, an
open node; or a CRD with no schema for the version, or one that prunes nothing) is not refused but
``unverified`` (`CrdCheck.unverified`, with why and a declared name close to it): never counted
as verified, since a misspelt ``suspend`` or ``managedBy`` would pass there.
Pure: declarations and CRD objects in, problems out (the worker fetches; `jobttl.worker.kindcheck`;
``jobttl explain --crd`` reads them from a file).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from jobttl.core.domain.kinds.declarations import CONDITION_PREFIX, parse_path
from jobttl.core.domain.kinds.declarations import key as decl_key

ITEMS = "[]"  # a path segment: into a list's items (only the finishing condition's)
CONDITIONS = ("status", "conditions", ITEMS)

# What a path must name for its reader.
VALUE = "value"  # a scalar: a state, a time, a TTL, a name, a flag
OBJECT = "object"  # a TTL object (ttl.within)
ANY = "any"  # CEL's inputs and celWhen: whatever is there

_STRING = {"type": "string"}
_STRINGS = {"type": "object", "additionalProperties": _STRING}
# ObjectMeta (k8s.io/apimachinery meta/v1), as far as paths can read it: the API server keeps
# these fields in every object's metadata whatever its CRD's schema says of metadata.
OBJECT_META: dict[str, Any] = {
    "type": "object",
    "properties": {
        **{
            name: _STRING
            for name in (
                "name",
                "generateName",
                "namespace",
                "selfLink",
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
            )
        },
        "generation": {"type": "integer"},
        "deletionGracePeriodSeconds": {"type": "integer"},
        "labels": _STRINGS,
        "annotations": _STRINGS,
        "ownerReferences": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    **{name: _STRING for name in ("apiVersion", "kind", "name", "uid")},
                    "controller": {"type": "boolean"},
                    "blockOwnerDeletion": {"type": "boolean"},
                },
            },
        },
        "finalizers": {"type": "array", "items": _STRING},
        "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    },
}
_RESOURCE_FIELDS = {"apiVersion": _STRING, "kind": _STRING, "metadata": OBJECT_META}
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class PathUse:
    """One path a declaration reads: where (``ttl.paths[1]``), as written, parsed, and what it must name.
    Uses sharing an `alternatives` key are fallbacks for one another (read in order)."""

    field: str
    text: str
    path: tuple[str, ...]
    wants: str = VALUE
    alternatives: str | None = None


@dataclass(frozen=True)
class Problem:
    field: str  # in the declaration, e.g. "suspend"
    text: str  # the path as written
    message: str  # what is wrong, with the nearest names
    inherited: bool = False  # in a field a replacing declaration took from the built-in one


@dataclass(frozen=True)
class CrdCheck:
    """What the CRD says of one declaration: `served` False when it does not serve the version
    (then nothing was checked); `problems` the paths naming nothing (or the wrong thing)."""

    crd: str
    served: bool = True
    served_versions: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()
    checked: int = 0  # paths checked
    unchecked: str | None = None  # why the paths were not checked against the schema, when they were not
    unverified: tuple[Problem, ...] = ()  # paths the schema could not follow to their end, and why

    @property
    def verified(self) -> bool:
        """Every path checked and found: nothing wrong, nothing the schema could not tell."""
        return self.served and not self.problems and self.unchecked is None and not self.unverified


def uses(decl: dict[str, Any]) -> list[PathUse]:
    """Every path a (schema-valid) declaration reads, with the field it is written in."""
    ttl = decl.get("ttl") or {}
    return [*_finished_uses(decl), *_ttl_uses(ttl), *_within_uses(ttl), *_cel_uses(ttl), *_guard_uses(decl)]


def _finished_uses(decl: dict[str, Any]) -> list[PathUse]:
    """The paths that tell a job finished (its conditions, or a state), and when (finishedAt)."""
    found: list[PathUse] = []
    finished = decl.get("finished") or {}
    if "conditions" in finished:
        for key in ("type", "status"):
            found.append(PathUse("finished.conditions", f"status.conditions[].{key}", (*CONDITIONS, key)))
    if "state" in finished:
        found.append(PathUse("finished.state.path", finished["state"]["path"], parse_path(finished["state"]["path"])))
    for i, text in enumerate(decl.get("finishedAt") or ()):
        path = (*CONDITIONS, text[len(CONDITION_PREFIX) :]) if text.startswith(CONDITION_PREFIX) else parse_path(text)
        found.append(PathUse(f"finishedAt[{i}]", text, path, VALUE, "finishedAt"))
    return found


def _ttl_uses(ttl: dict[str, Any]) -> list[PathUse]:
    return [
        PathUse(f"ttl.paths[{i}]", text, parse_path(text), VALUE, "ttl.paths")
        for i, text in enumerate(ttl.get("paths") or ())
    ]


def _within_uses(ttl: dict[str, Any]) -> list[PathUse]:
    """Each `within` object, then the path of each of its keys."""
    found: list[PathUse] = []
    for i, text in enumerate(ttl.get("within") or ()):
        found.append(PathUse(f"ttl.within[{i}]", text, parse_path(text), OBJECT, "ttl.within"))
        for state, keys in (ttl.get("keys") or {}).items():
            for j, key in enumerate(keys):
                found.append(
                    PathUse(
                        f"ttl.keys.{state}[{j}]",
                        f"{text}.{key}",
                        (*parse_path(text), key),
                        VALUE,
                        f"ttl.keys.{state}[{j}]",
                    )
                )
    return found


def _cel_uses(ttl: dict[str, Any]) -> list[PathUse]:
    found: list[PathUse] = []
    if "celWhen" in ttl:
        found.append(PathUse("ttl.celWhen", ttl["celWhen"], parse_path(ttl["celWhen"]), ANY))
    for i, item in enumerate(ttl.get("celInputs") or ()):
        text = item if isinstance(item, str) else item["path"]  # a path, or {path, maxItems}
        found.append(PathUse(f"ttl.celInputs[{i}]", text, parse_path(text), ANY))
    return found


def _guard_uses(decl: dict[str, Any]) -> list[PathUse]:
    """The paths that hold a finished job back: managedBy, suspend, notYet."""
    found: list[PathUse] = []
    if decl.get("managedBy"):
        found.append(PathUse("managedBy.path", decl["managedBy"]["path"], parse_path(decl["managedBy"]["path"])))
    if "suspend" in decl:
        found.append(PathUse("suspend", decl["suspend"], parse_path(decl["suspend"])))
    for i, rule in enumerate(decl.get("notYet") or ()):
        found.append(PathUse(f"notYet[{i}].path", rule["path"], parse_path(rule["path"])))
    return found


# --- the walk ---------------------------------------------------------------------------------------

_OPEN = object()  # anything may be below: preserved unknown fields, or a map of anything


def _branches(node: Any) -> Iterator[dict[str, Any]]:
    """A schema node and its allOf/anyOf/oneOf branches, recursively."""
    if not isinstance(node, dict):
        return
    yield node
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in node.get(key) or ():
            yield from _branches(branch)


@dataclass
class _Level:
    """The schema nodes a path has reached (a field may be declared in several branches)."""

    nodes: list[dict[str, Any]]
    resource: bool = False  # the top, or an embedded resource: apiVersion, kind, metadata are there
    expanded: list[dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.expanded = [b for n in self.nodes for b in _branches(n)]

    def types(self) -> set[str]:
        kinds = set()
        for node in self.expanded:
            if node.get("x-kubernetes-int-or-string"):
                kinds.add("scalar")
            elif isinstance(node.get("type"), str):
                kinds.add(node["type"])
        return kinds

    def open(self) -> bool:
        """Whether anything may be below: unknown fields preserved, a map of anything, or a node
        saying nothing of what is there (no type, nothing declared below: a legacy schema's)."""
        return self.why_open() is not None

    def why_open(self) -> str | None:
        """Why the schema does not say what is below this level (then a path below cannot be checked)."""
        if any(n.get("x-kubernetes-preserve-unknown-fields") is True for n in self.expanded):
            return "keeps unknown fields (x-kubernetes-preserve-unknown-fields)"
        if any(n.get("additionalProperties") is True for n in self.expanded):
            return "is a map of anything (additionalProperties: true)"
        if not any(_says_what(n) for n in self.expanded):
            return "declares nothing (no type, no properties: a legacy schema's)"
        return None

    def names(self) -> list[str]:
        names = dict.fromkeys(k for n in self.expanded for k in (n.get("properties") or {}))
        if self.resource:
            names.update(dict.fromkeys(_RESOURCE_FIELDS))
        return list(names)

    def child(self, key: str) -> _Level | object | None:
        """The level `key` leads to; _OPEN if anything may be there; None if nothing is."""
        if self.resource and key in _RESOURCE_FIELDS:
            return _Level([_RESOURCE_FIELDS[key]])
        found = [n["properties"][key] for n in self.expanded if key in (n.get("properties") or {})]
        found += [
            n["additionalProperties"]
            for n in self.expanded
            if isinstance(n.get("additionalProperties"), dict) and key not in (n.get("properties") or {})
        ]
        if found:
            embedded = any(b.get("x-kubernetes-embedded-resource") for f in found for b in _branches(f))
            return _Level(found, resource=embedded)
        return _OPEN if self.open() else None

    def items(self) -> _Level | object | None:
        found = [n["items"] for n in self.expanded if isinstance(n.get("items"), dict)]
        if found:
            return _Level(
                found, resource=any(b.get("x-kubernetes-embedded-resource") for f in found for b in _branches(f))
            )
        return _OPEN if self.open() or not self.types() else None


def _says_what(node: dict[str, Any]) -> bool:
    """Whether a schema node says what may be there: a type, or what is below it."""
    return any(
        key in node for key in ("type", "properties", "additionalProperties", "items", "x-kubernetes-int-or-string")
    )


def show(path: tuple[str, ...] | list[str], conditions_as: str | None = None) -> str:
    """A parsed path as a declaration writes it: ``metadata.labels["a.b/c"]``, ``status.conditions[].type``
    (``condition.type`` when `conditions_as` is given, for a path read from the finishing condition)."""
    if conditions_as is not None and tuple(path[:3]) == CONDITIONS and len(path) > 3:
        return conditions_as + show(path[3:])
    out = ""
    for part in path:
        if part == ITEMS:
            out += "[]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f'["{part}"]'
    return out


def _fields_below(level: _Level, prefix: tuple[str, ...], depth: int, seen: set[int]) -> Iterator[tuple[str, ...]]:
    """Every field path reachable from `level` through mappings (what a path could name), bounded."""
    if depth == 0:
        return
    for name in level.names():
        if prefix == () and name in ("apiVersion", "kind", "metadata"):
            continue  # metadata's fields are ObjectMeta's: suggested only where metadata was written
        child = level.child(name)
        yield (*prefix, name)
        if isinstance(child, _Level) and not any(id(n) in seen for n in child.expanded):
            yield from _fields_below(child, (*prefix, name), depth - 1, seen | {id(n) for n in child.expanded})


def _nearest(
    key: str, level: _Level, prefix: tuple[str, ...], root: _Level, shown: Callable[[tuple[str, ...]], str]
) -> str:
    """ "did you mean ...": close names at the level the path broke, else a close name elsewhere."""
    here = [shown((*prefix, name)) for name in difflib.get_close_matches(key, level.names(), n=3, cutoff=0.6)]
    elsewhere: list[str] = []
    if not here and prefix[:1] != ("metadata",):  # the name elsewhere: `spec.suspend` for `spec.runPolicy.suspend`
        candidates: dict[str, list[tuple[str, ...]]] = {}
        for path in _fields_below(root, (), 8, set()):
            candidates.setdefault(path[-1], []).append(path)
        for name in difflib.get_close_matches(key, list(candidates), n=3, cutoff=0.8):
            # Not the path's own ancestors (`status` for `status.stat`): the path already went there.
            elsewhere += [shown(p) for p in candidates[name] if shown(p) not in here and p != prefix[: len(p)]]
    suggestions = list(dict.fromkeys(here + elsewhere))[:4]
    if suggestions:
        return f"; did you mean {' or '.join(suggestions)}?"
    names = sorted(level.names())
    listed = ", ".join(names[:15]) + (", ..." if len(names) > 15 else "")
    return f" (it has: {listed})" if names else " (it declares no fields)"


@dataclass(frozen=True)
class Reach:
    """How far the schema follows a path: `problem` when it names nothing (or the wrong thing), `open`
    (why) when the schema stops saying what is there before the path ends: then it cannot be checked."""

    problem: str | None = None
    open: str | None = None


def walk(schema: dict[str, Any], use: PathUse) -> str | None:
    """What is wrong with `use` under `schema` (a CRD version's openAPIV3Schema), or None: "is not
    in" and why (a field missing, a list in the way), or "does not fit" and why (the wrong type).
    None also where the schema cannot tell (`reach` says so)."""
    return reach(schema, use).problem


def reach(schema: dict[str, Any], use: PathUse) -> Reach:
    """`walk`, and whether the path could be checked to its end."""
    root = _Level([schema], resource=True)
    conditions_as = CONDITION_PREFIX if use.text.startswith(CONDITION_PREFIX) else None

    def shown(path: tuple[str, ...]) -> str:
        return show(path, conditions_as)

    level: _Level | object = root
    for i, key in enumerate(use.path):
        assert isinstance(level, _Level)
        prefix = use.path[:i]
        nxt = _step(level, key, prefix, root, shown)
        if isinstance(nxt, str):
            return Reach(problem=nxt)
        if nxt is _OPEN:
            # Preserved unknown fields, a map of anything, a legacy node: whatever is below may be there.
            return Reach(open=_open_reason(level, key, prefix, shown))
        level = nxt
    assert isinstance(level, _Level)
    return Reach(problem=_fits(level, use, shown))


def _step(
    level: _Level, key: str, prefix: tuple[str, ...], root: _Level, shown: Callable[[tuple[str, ...]], str]
) -> _Level | object | str:
    """The level `key` leads to from `level`, _OPEN, or what is wrong ("is not in: ...")."""
    where = show(prefix) if prefix else "the object"
    if key == ITEMS:
        nxt = level.items()
        return nxt if nxt is not None else f"is not in: {where} is not a list (it is {_a(level.types())})"
    if "array" in level.types() and not level.child(key):
        return f"is not in: {where} is a list: a path cannot read into a list's items" + (
            ""
            if tuple(prefix) != CONDITIONS[:2]
            else " (the finishing condition's fields are condition.FIELD, in finishedAt)"
        )
    nxt = level.child(key)
    if nxt is None and level.types() and not level.types() & {"object", "array"}:
        return f"is not in: {where} is {_a(level.types())}, with no fields below it"
    if nxt is None:
        return f"is not in: {where} has no field {key!r}{_nearest(key, level, prefix, root, shown)}"
    return nxt


def _open_reason(level: _Level, key: str, prefix: tuple[str, ...], shown: Callable[[tuple[str, ...]], str]) -> str:
    """Why a path cannot be checked past `prefix`, and a declared name close to `key` there, if any
    (under preserved unknown fields `spec.suspnd` may be there, but `spec.suspend` is declared)."""
    where = show(prefix) if prefix else "the object"
    if key == ITEMS:
        return f"{where} says nothing of its items"
    close = difflib.get_close_matches(key, level.names(), n=1, cutoff=0.8)
    hint = f"; it declares {close[0]}: did you mean {shown((*prefix, close[0]))}?" if close and close[0] != key else ""
    return f"{where} {level.why_open() or 'says nothing of its fields'}{hint}"


def _fits(level: _Level, use: PathUse, shown: Callable[[tuple[str, ...]], str]) -> str | None:
    """Whether the field the path ends at is what its reader takes: a value, or an object."""
    types = level.types()
    if use.wants == VALUE and types and types <= {"object", "array"}:
        below = sorted(level.names())
        hint = (
            f": did you mean one of its fields ({', '.join(shown((*use.path, n)) for n in below[:6])})?"
            if below
            else ""
        )
        return f"does not fit: the field is {_a(types)}, not a value{hint}"
    if use.wants == OBJECT and types and "object" not in types:
        return f"does not fit: the field is {_a(types)}, not an object"
    return None


def _a(types: set[str]) -> str:
    if not types:
        return "untyped"
    words = {"object": "an object", "array": "a list", "integer": "an integer", "scalar": "an int-or-string"}
    return " or ".join(words.get(t, f"a {t}") for t in sorted(types))


# --- a declaration against its CRD ------------------------------------------------------------------


class _Shape:
    """What `verify` reads of a CRD object, checked before it reads it: the first field not shaped as the
    API server writes it (a CRD from a file, or from an API that is not quite one), as (field, problem)."""

    @staticmethod
    def first(crd: Any) -> tuple[str, str] | None:
        if not isinstance(crd, dict):
            return "(the object)", f"expected a mapping, got {_typename(crd)}"
        # In this order: each step reads only what the ones before found shaped.
        for step in (_Shape.parts, _Shape.fields, _Shape.versions):
            found = step(crd)
            if found is not None:
                return found
        return None

    @staticmethod
    def parts(crd: dict[str, Any]) -> tuple[str, str] | None:
        """metadata and spec, both required mappings."""
        for name in ("metadata", "spec"):
            if not isinstance(crd.get(name), dict):
                return name, f"expected a mapping, got {_typename(crd.get(name))}"
        return None

    @staticmethod
    def fields(crd: dict[str, Any]) -> tuple[str, str] | None:
        """The fields of metadata and spec `verify` reads, each optional but typed."""
        metadata, spec = crd["metadata"], crd["spec"]
        for name, value, kind in (
            ("metadata.name", metadata.get("name"), str),
            ("spec.names", spec.get("names"), dict),
            ("spec.scope", spec.get("scope"), str),
            ("spec.preserveUnknownFields", spec.get("preserveUnknownFields"), bool),
            ("spec.versions", spec.get("versions"), list),
        ):
            if value is not None and not isinstance(value, kind):
                return name, f"expected {_A[kind]}, got {_typename(value)}"
        for key in ("kind", "plural"):
            value = (spec.get("names") or {}).get(key)
            if value is not None and not isinstance(value, str):
                return f"spec.names.{key}", f"expected a string, got {_typename(value)}"
        return None

    @staticmethod
    def versions(crd: dict[str, Any]) -> tuple[str, str] | None:
        for i, version in enumerate(crd["spec"].get("versions") or ()):
            problem = _Shape.version(version, f"spec.versions[{i}]")
            if problem is not None:
                return problem
        return None

    @staticmethod
    def version(version: Any, where: str) -> tuple[str, str] | None:
        if not isinstance(version, dict):
            return where, f"expected a mapping, got {_typename(version)}"
        for key, kind in (("name", str), ("served", bool), ("schema", dict)):
            value = version.get(key)
            if (value is not None or key == "name") and not isinstance(value, kind):
                return f"{where}.{key}", f"expected {_A[kind]}, got {_typename(value)}"
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            return None
        return _Shape.schema(schema, f"{where}.schema.openAPIV3Schema")

    @staticmethod
    def schema(root: Any, where: str) -> tuple[str, str] | None:
        """Every node below `root` where the walk reads it: properties a mapping of schemas, items and
        additionalProperties a schema (or a boolean), allOf/anyOf/oneOf lists of schemas, type a string."""
        stack = [(root, where)]
        while stack:
            node, at = stack.pop()
            problem = _Shape.node(node, at)
            if problem is not None:
                return problem
            stack += _Shape.below(node, at)
        return None

    @staticmethod
    def node(node: Any, at: str) -> tuple[str, str] | None:
        """The first problem of one schema node itself, before any node below it is read."""
        if not isinstance(node, dict):
            return at, f"expected a schema (a mapping), got {_typename(node)}"
        if "type" in node and not isinstance(node["type"], str):
            return f"{at}.type", f"expected a string, got {_typename(node['type'])}"
        properties = node.get("properties")
        if properties is not None and not isinstance(properties, dict):
            return f"{at}.properties", f"expected a mapping, got {_typename(properties)}"
        for key in ("allOf", "anyOf", "oneOf"):
            branches = node.get(key)
            if branches is not None and not isinstance(branches, list):
                return f"{at}.{key}", f"expected a list, got {_typename(branches)}"
        return None

    @staticmethod
    def below(node: dict[str, Any], at: str) -> list[tuple[Any, str]]:
        """The schemas right below a node that `node` found well shaped, each with where it is."""
        found = [(v, f"{at}.properties.{k}") for k, v in (node.get("properties") or {}).items()]
        found += [
            (node[key], f"{at}.{key}")
            for key in ("items", "additionalProperties")
            if node.get(key) is not None and not isinstance(node[key], bool)
        ]
        for key in ("allOf", "anyOf", "oneOf"):
            found += [(b, f"{at}.{key}[{i}]") for i, b in enumerate(node.get(key) or ())]
        return found


_A = {dict: "a mapping", list: "a list", str: "a string", bool: "true or false"}


def _typename(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", type(None): "nothing (null)"}.get(
        type(value), f"a {type(value).__name__}"
    ) + (f" {value!r}"[:60] if isinstance(value, (str, int, float)) else "")


def malformed(crd: Any) -> str | None:
    """Why `crd` is not a CRD object `verify` can read (``FIELD: PROBLEM``), or None."""
    found = _Shape.first(crd)
    return None if found is None else f"{found[0]}: {found[1]}"


def verify(
    decl: dict[str, Any], crd: dict[str, Any], lenient: bool = False, inherited: tuple[str, ...] = ()
) -> CrdCheck:
    """Check one declaration against its CRD object (as the API server answers a GET).

    `lenient` (the built-in declarations): a path among alternatives may be missing as long as
    one of them is there, since they are fallbacks for other versions of the CRD (the Kubeflow
    jobs' pre-1.2 ``spec.ttlSecondsAfterFinished``). An operator's own declaration is held to
    every path: it was written for this cluster; but the fields it `inherited` from a built-in
    declaration (`jobttl.core.domain.kinds.declarations.replacing`) are held as built-in ones are, and their
    problems say so (`Problem.inherited`). A path the schema cannot follow to its end (preserved
    unknown fields, a map of anything, no schema at all) is `unverified`, never verified."""
    shape = malformed(crd)
    if shape is not None:
        # A CRD not shaped as the API server writes one: nothing in it can be read, so nothing is checked.
        return _malformed_check(decl, crd, shape, inherited)
    spec = crd.get("spec") or {}
    name = (crd.get("metadata") or {}).get("name", "")
    served, version = _served(spec, decl["version"])
    if version is None:
        return CrdCheck(name, served=False, served_versions=served)
    problems = _names_and_scope(decl, spec, name)
    schema = (version.get("schema") or {}).get("openAPIV3Schema")
    found = uses(decl)
    unchecked = _unchecked(decl, spec, schema, name)
    if unchecked is not None:
        return CrdCheck(
            name,
            True,
            served,
            tuple(problems),
            0,
            unchecked=unchecked,
            unverified=_all_unverified(found, unchecked, inherited),
        )
    return _schema_check(decl, name, served, problems, schema, found, lenient, inherited)


def _served(spec: dict[str, Any], wanted: str) -> tuple[tuple[str, ...], dict[str, Any] | None]:
    """The names of the versions the CRD serves, and the `wanted` one if it serves it."""
    versions = [v for v in spec.get("versions") or () if isinstance(v, dict)]
    served = tuple(str(v.get("name")) for v in versions if v.get("served", True))
    version = next((v for v in versions if v.get("name") == wanted), None)
    return served, version if version is not None and version.get("served", True) else None


def _schema_check(
    decl: dict[str, Any],
    name: str,
    served: tuple[str, ...],
    problems: list[Problem],
    schema: dict[str, Any],
    found: list[PathUse],
    lenient: bool,
    inherited: tuple[str, ...],
) -> CrdCheck:
    """Every path followed through the schema: the ones it lacks are problems, the ones it cannot
    follow to their end unverified."""
    reached = {use: reach(schema, use) for use in found}
    problems += _path_problems(decl, name, reached, lenient, inherited)
    unverified = tuple(
        Problem(
            use.field,
            use.text,
            f"{use.text!r} cannot be checked against the schema of {decl_key(decl)} (CRD {name}): {r.open}",
            _inherits(use, inherited),
        )
        for use, r in reached.items()
        if r.open is not None
    )
    return CrdCheck(name, True, served, tuple(problems), len(found), unverified=unverified)


def _malformed_check(decl: dict[str, Any], crd: Any, shape: str, inherited: tuple[str, ...]) -> CrdCheck:
    """The check of a CRD `malformed` says why it cannot be read: every path unverified."""
    name = (
        crd.get("metadata", {}).get("name") if isinstance(crd, dict) and isinstance(crd.get("metadata"), dict) else None
    )
    name = name if isinstance(name, str) else "(unnamed)"
    unchecked = f"the CRD {name} is malformed ({shape}): its schema cannot be read"
    return CrdCheck(
        name, True, (), (), 0, unchecked=unchecked, unverified=_all_unverified(uses(decl), unchecked, inherited)
    )


def _unchecked(decl: dict[str, Any], spec: dict[str, Any], schema: Any, name: str) -> str | None:
    """Why no path of the served version can be checked against its schema, or None when they can."""
    if spec.get("preserveUnknownFields") is True:
        # A CRD created under apiextensions v1beta1 may still say so through v1: the API server then
        # prunes nothing, whatever the schema (often partial) declares. Any path may be there.
        return (
            f"the CRD {name} keeps unknown fields (spec.preserveUnknownFields: true, a CRD from "
            "apiextensions v1beta1): any path may name a field"
        )
    if not isinstance(schema, dict):
        return f"the CRD {name} gives {decl['version']} no schema (openAPIV3Schema): any path may name a field"
    return None


def _all_unverified(found: list[PathUse], unchecked: str, inherited: tuple[str, ...]) -> tuple[Problem, ...]:
    """Every path unverified, for one reason: the schema cannot be read or does not bind."""
    return tuple(
        Problem(use.field, use.text, f"{use.text!r} cannot be checked: {unchecked}", _inherits(use, inherited))
        for use in found
    )


def _names_and_scope(decl: dict[str, Any], spec: dict[str, Any], name: str) -> list[Problem]:
    """What the CRD says of the kind itself: its name and that it is namespaced."""
    problems = []
    names = spec.get("names") or {}
    if names.get("kind") and names["kind"] != decl["kind"]:
        problems.append(
            Problem("kind", decl["kind"], f"the CRD {name} names its kind {names['kind']!r}, not {decl['kind']!r}")
        )
    if spec.get("scope") == "Cluster":
        problems.append(
            Problem("plural", decl["plural"], f"the CRD {name} is cluster-scoped: jobttl handles namespaced kinds only")
        )
    return problems


def _inherits(use: PathUse, inherited: tuple[str, ...]) -> bool:
    """Whether `use` is in a field the declaration inherited (``ttl.paths[1]`` is in ``ttl``)."""
    return re.split(r"[.\[]", use.field, maxsplit=1)[0] in inherited


def _path_problems(
    decl: dict[str, Any], name: str, reached: dict[PathUse, Reach], lenient: bool, inherited: tuple[str, ...]
) -> list[Problem]:
    """The paths naming nothing (or the wrong thing): one line per cause."""
    fine = {use.alternatives for use, r in reached.items() if r.problem is None and use.alternatives}
    problems: list[Problem] = []
    failed: list[tuple[str, ...]] = []
    said: set[tuple[str, str]] = set()
    for use, r in reached.items():
        held_as_builtin = lenient or _inherits(use, inherited)
        if r.problem is None or (held_as_builtin and use.alternatives in fine):
            continue
        verb, _, detail = r.problem.partition(": ")
        # One line per cause: not again for a path below one already refused (a TTL key below its
        # ttl.within), nor the same cause in the same field (conditions' type and status).
        if any(use.path[: len(p)] == p for p in failed) or (use.field, detail) in said:
            continue
        failed.append(use.path)
        said.add((use.field, detail))
        problems.append(
            Problem(
                use.field,
                use.text,
                f"{use.text!r} {verb} the schema of {decl_key(decl)} (CRD {name}): {detail}",
                _inherits(use, inherited),
            )
        )
    return problems


def describe(where: str, problem: Problem) -> str:
    """One problem as a configuration error line: the declaration's field, the path, the kind, the nearest names."""
    return f"{where}.{problem.field}: {problem.message}"
