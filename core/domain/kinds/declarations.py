"""A kind as data: declarations validated against ``kinds.schema.json``, compiled into `JobKind`s.

The built-in kinds (``kinds.yaml``) and the kinds an operator declares in the policy
(``kindDeclarations``) go through the same two steps, once, at load:

1. the JSON Schema (``kinds.schema.json``, shipped beside this file) checks the shape: a
   missing ``plural``, an unknown outcome, a path that does not start at ``metadata``,
   ``spec`` or ``status``;
2. `_Compiler` checks what a schema cannot (a finish time read from a condition when the
   kind is not finished by conditions, a TTL key for a state the kind never finishes in, two
   declarations of one kind, a CEL expression that does not parse) and builds the closures
   `JobKind` carries, so that reading an object is plain dict look-ups on precompiled paths.

Whether a path names a field the kind has is for the cluster to say: the worker checks each
enabled kind's paths against its CRD's schema at start (`jobttl.core.domain.kinds.crdcheck`), so every
`JobKind` keeps the declaration it was compiled from and where it was written.

Every error names the field (``kinds[3].finished.conditions[0].status: 'true' is not one of
['True', 'False']``). CEL (cel-python) is there for what paths cannot say (RayJob's DeleteSelf
rules); it costs milliseconds per evaluation, so it runs only when its ``celWhen`` path is set.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from jobttl.core.domain.kinds.model import (
    DeclarationFault,
    Finish,
    JobKind,
    OwnTTL,
    UnreadableField,
    get_path,
    no_hold,
    no_ttl_field,
    parse_time,
    read_path,
    read_text,
)

HERE = Path(__file__).resolve().parent
SCHEMA_FILE = HERE / "kinds.schema.json"
BUILTIN_FILE = HERE / "kinds.yaml"
CONDITION_PREFIX = "condition."
_SEGMENT = re.compile(r'\.([A-Za-z0-9_-]+)|\["([^"]+)"\]')


class KindError(ValueError):
    """A declaration jobttl refuses; the message names the field."""


def parse_path(text: str) -> tuple[str, ...]:
    """``metadata.labels["a.b/c"]`` → ``("metadata", "labels", "a.b/c")`` (the schema checked the syntax)."""
    head, _, _ = text.partition(".")
    head = head.split("[")[0]
    rest = text[len(head) :]
    return (head, *(m.group(1) or m.group(2) for m in _SEGMENT.finditer(rest)))


def describe(path: tuple[str, ...]) -> str:
    """How reasons name a field: ``label workflows.argoproj.io/...`` for labels and annotations."""
    if len(path) == 3 and path[0] == "metadata" and path[1] in ("labels", "annotations"):
        return f"{path[1][:-1]} {path[2]}"
    return ".".join(path)


@cache
def _validator() -> Any:
    # jsonschema is a runtime dependency for this: declarations are checked when a process starts.
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))


def _where(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(error: Any) -> tuple[str, str]:
    """(where, problem) for one jsonschema error, naming the field a reader must fix."""
    where = _where(error.absolute_path)
    if error.validator == "required":
        missing = next(r for r in error.validator_value if r not in error.instance)
        return f"{where}.{missing}" if where else missing, "required"
    if error.validator == "additionalProperties" and error.validator_value is False:
        known = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in known)
        return (f"{where}.{extra[0]}" if where else extra[0]), f"unknown field (known: {', '.join(sorted(known))})"
    if error.validator in ("minProperties", "maxProperties") and "conditions" in error.schema.get("properties", {}):
        return where, "set exactly one of conditions or state"
    if error.validator == "pattern":
        what = error.schema.get("description", f"a value matching {error.validator_value}")
        return where, f"{error.instance!r} is not {what[0].lower() + what[1:].rstrip('.')}"
    return where, error.message


def validate(document: Any, origin: str) -> None:
    """Raise KindError naming the first field (in document order) the schema refuses."""
    errors = sorted(
        _validator().iter_errors(document),
        key=lambda e: [(0, p, "") if isinstance(p, int) else (1, 0, p) for p in e.absolute_path],
    )
    if errors:
        where, problem = _message(_deepest(errors[0]))
        raise KindError(f"{origin}: {where}: {problem}")


def _deepest(error: Any) -> Any:
    """For a oneOf, the alternative's own complaint (an unknown outcome, say), not "not valid under any"."""
    while error.context:
        error = max(error.context, key=lambda e: len(e.absolute_path))
    return error


# --- compiling ------------------------------------------------------------------------------------


class _Compiler:
    def __init__(self, origin: str, eager_cel: bool = True, builtin: bool = False):
        self.origin = origin
        self.builtin = builtin
        # The built-in declarations' CEL (tested) is compiled on first use: every process would
        # otherwise import cel-python and its parser (~90 ms, ~9 MB) at start, RayJobs or not.
        self.eager_cel = eager_cel

    def fail(self, where: str, problem: str) -> KindError:
        return KindError(f"{self.origin}: {where}: {problem}")

    def kind(self, decl: dict[str, Any], where: str, opted_in: tuple[str, ...] = ()) -> JobKind:
        finished = decl["finished"]
        names = self.finish_names(finished)
        finish = self.finish(decl, where, opted_in)
        own_ttl, left_to, not_applied = self.ttl(decl.get("ttl"), f"{where}.ttl", names)
        managed = decl.get("managedBy")
        pods = decl.get("pods") or {}
        return JobKind(
            decl.get("group", ""),
            decl["version"],
            decl["kind"],
            decl["plural"],
            finish,
            own_ttl,
            builtin_ttl_controller=left_to is not None,
            ttl_controller=left_to or JobKind.ttl_controller,
            ttl_not_applied_for=not_applied,
            pod_label=pods.get("label"),
            managed_by=parse_path(managed["path"]) if managed else None,
            own_controllers=tuple(managed["own"]) if managed else (),
            suspend=parse_path(decl["suspend"]) if "suspend" in decl else None,
            hold=self.hold(decl.get("notYet") or []),
            pod_cleanup_safe=bool(pods.get("deleteBeforeJob")),
            opted_in=opted_in,
            declaration=decl,
            declared_in=f"{self.origin}: {where}",
            builtin=self.builtin,
        )

    @staticmethod
    def finish_names(finished: dict[str, Any]) -> set[str]:
        """What a Finish's reason can be: the condition types, or the state values."""
        if "conditions" in finished:
            return {c["type"] for c in finished["conditions"]}
        return set(finished["state"]["values"])

    def finish(self, decl: dict[str, Any], where: str, opted_in: tuple[str, ...]) -> Any:
        finished = decl["finished"]
        times = decl["finishedAt"]
        by_conditions = "conditions" in finished
        for i, path in enumerate(times):
            if path.startswith(CONDITION_PREFIX) and not by_conditions:
                raise self.fail(
                    f"{where}.finishedAt[{i}]",
                    f"{path!r} reads the finishing condition, but this kind is finished by a state, not by conditions",
                )
        # Precompiled: (path tuple, field name) for object paths, (None, condition key) for condition ones.
        readers = tuple(
            (None, p[len(CONDITION_PREFIX) :]) if p.startswith(CONDITION_PREFIX) else (parse_path(p), p) for p in times
        )
        if by_conditions:
            wanted = {(c["type"], c.get("status", "True")): c["outcome"] for c in finished["conditions"]}
            return _finished_by_conditions(wanted, readers)
        state = finished["state"]
        values = {}
        for value, outcome in state["values"].items():
            if isinstance(outcome, dict):
                if outcome.get("optIn") and value not in opted_in:
                    continue
                outcome = outcome["outcome"]
            values[value] = outcome
        return _finished_by_state(parse_path(state["path"]), values, readers)

    def ttl(self, ttl: dict[str, Any] | None, where: str, names: set[str]) -> tuple[Any, str | None, tuple[str, ...]]:
        if not ttl:
            return no_ttl_field, None, ()
        self.ttl_way(ttl, where)
        not_applied = self.ttl_states(ttl, where, names)
        return self.ttl_reader(ttl, where), ttl.get("appliedBy"), not_applied

    def ttl_way(self, ttl: dict[str, Any], where: str) -> None:
        """Exactly one way to read the TTL, and the fields that go with it only with it."""
        ways = [w for w in ("paths", "within", "cel") if w in ttl]
        if len(ways) != 1:
            raise self.fail(where, "set exactly one of paths, within (with keys) or cel")
        for key, needs in (("keys", "within"), ("celWhen", "cel"), ("celInputs", "cel"), ("field", "cel")):
            if key in ttl and needs not in ttl:
                raise self.fail(f"{where}.{key}", f"only with {needs}")
        if "within" in ttl and "keys" not in ttl:
            raise self.fail(f"{where}.keys", "required with within: which keys hold the TTL, for each finishing state")

    def ttl_states(self, ttl: dict[str, Any], where: str, names: set[str]) -> tuple[str, ...]:
        """The finishing states the TTL's keys and notAppliedFor name, each one this kind finishes in;
        notAppliedFor (returned) only with appliedBy."""
        for name in ttl.get("keys", {}):
            if name not in names:
                raise self.fail(
                    f"{where}.keys.{name}", f"names no state this kind finishes in ({', '.join(sorted(names))})"
                )
        not_applied = tuple(ttl.get("notAppliedFor", ()))
        if not_applied and "appliedBy" not in ttl:
            raise self.fail(f"{where}.notAppliedFor", "only with appliedBy")
        for i, name in enumerate(not_applied):
            if name not in names:
                raise self.fail(
                    f"{where}.notAppliedFor[{i}]",
                    f"{name!r} names no state this kind finishes in ({', '.join(sorted(names))})",
                )
        return not_applied

    def ttl_reader(self, ttl: dict[str, Any], where: str) -> Any:
        """The kind's own TTL reader, by the one way `ttl_way` found."""
        if "paths" in ttl:
            return _ttl_at(tuple((parse_path(p), p) for p in ttl["paths"]))
        if "within" in ttl:
            return _ttl_within(
                tuple((parse_path(p), p) for p in ttl["within"]), {k: tuple(v) for k, v in ttl["keys"].items()}
            )
        for key in ("celWhen", "celInputs"):
            if key not in ttl:
                raise self.fail(f"{where}.{key}", "required with cel")
        inputs = cel_inputs(ttl["celInputs"])
        return _ttl_cel(
            self.cel(ttl["cel"], f"{where}.cel", inputs),
            parse_path(ttl["celWhen"]),
            inputs,
            ttl.get("field", ttl["celWhen"]),
        )

    def cel(self, expression: str, where: str, inputs: tuple[Any, ...]) -> Any:
        if not self.eager_cel:
            return _LazyProgram(lambda: self.cel_program(expression, where, inputs))
        return self.cel_program(expression, where, inputs)

    def cel_program(self, expression: str, where: str, inputs: tuple[Any, ...]) -> Any:
        """The checked and costed expression (jobttl.core.domain.kinds.cel); a KindError naming the
        field, and the line and column in the expression, when it is refused."""
        from jobttl.core.domain.kinds.cel import CelCheckError, TtlExpression

        try:
            return TtlExpression(expression, inputs)
        except CelCheckError as exc:
            raise self.fail(where, str(exc)) from None

    @staticmethod
    def hold(rules: list[dict[str, Any]]) -> Any:
        if not rules:
            return no_hold
        compiled = tuple((parse_path(r["path"]), r["path"], frozenset(r["values"]), r["why"]) for r in rules)

        def hold(obj: dict[str, Any]) -> str | None:
            for path, text, values, why in compiled:
                value = read_text(obj, path, text)
                if value in values:
                    return f"{describe(path)} is {value}: {why}"
            return None

        return hold


class _LazyProgram:
    """A CEL expression compiled the first time it is evaluated, then kept. One refused then (a
    built-in one: they are tested) is the declaration's error, reported as such for each object."""

    def __init__(self, compile_: Any):
        self._compile = compile_
        self._program: Any = None

    def evaluate(self, values: list[Any]) -> Any:
        if self._program is None:
            try:
                self._program = self._compile()
            except KindError as exc:
                from jobttl.core.domain.kinds.cel import CelEvalError

                raise CelEvalError(str(exc)) from None
        return self._program.evaluate(values)


def _time_reader(readers: tuple[tuple[tuple[str, ...] | None, str], ...]) -> Any:
    """The finish time: the first of `readers` (an object path, or None and a key of the finishing
    condition) that holds a readable time, and the field it came from."""

    def read(
        obj: dict[str, Any], condition: dict[str, Any] | None, kind: str | None, index: int = 0
    ) -> tuple[int | None, str | None]:
        for path, name in readers:
            if path is None:
                value = condition.get(name) if condition is not None else None
                where, field = f"status.conditions[{kind}].{name}", f"status.conditions[{index}].{name}"
            else:
                value, where = read_path(obj, path), name
                field = where
            if value is not None and not isinstance(value, str):
                raise UnreadableField(field, "an RFC 3339 time (a string)", value)
            time = parse_time(value)
            if time is not None:
                return time, where
        return None, None

    return read


def _finished_by_conditions(wanted: dict[tuple[str, str], str], readers: tuple[Any, ...]) -> Any:
    """Finished when a condition has one of the declared (type, status) pairs; the object's
    first such condition decides. The reason is the type (``type=status`` when not True)."""
    read_time = _time_reader(readers)

    def finish(obj: dict[str, Any]) -> Finish | None:
        conditions = read_path(obj, ("status", "conditions"))
        if conditions is not None and not isinstance(conditions, list):
            raise UnreadableField("status.conditions", "a list of conditions", conditions)
        found = _first_wanted(conditions or [], wanted)
        if found is None:
            return None
        i, kind, status = found
        time, field = read_time(obj, conditions[i], kind, i)
        return Finish(wanted[(kind, status)], kind if status == "True" else f"{kind}={status}", time, field)

    return finish


def _first_wanted(conditions: list[Any], wanted: dict[tuple[str, str], str]) -> tuple[int, str, str] | None:
    """(index, type, status) of the first condition with a wanted (type, status) pair, or None."""
    # The list is read whole, every condition's type and status: one that is not a condition is
    # unreadable wherever it stands (never a traceback, never passed over as absent).
    found = None
    for i, condition in enumerate(conditions):
        kind, status = _condition_pair(condition, i)
        if found is None and (kind, status) in wanted:
            found = i, kind, status
    return found


def _condition_pair(condition: Any, i: int) -> tuple[Any, Any]:
    """(type, status) of the condition at index i, each a string or absent (None); else UnreadableField."""
    if not isinstance(condition, dict):
        raise UnreadableField(f"status.conditions[{i}]", "a condition (an object)", condition)
    kind, status = condition.get("type"), condition.get("status")
    if not (isinstance(kind, str) or kind is None) or not (isinstance(status, str) or status is None):
        name = "status" if isinstance(kind, str) or kind is None else "type"
        raise UnreadableField(f"status.conditions[{i}].{name}", "a string", condition[name])
    return kind, status


def _finished_by_state(path: tuple[str, ...], values: dict[str, str], readers: tuple[Any, ...]) -> Any:
    read_time = _time_reader(readers)

    def finish(obj: dict[str, Any]) -> Finish | None:
        state = read_text(obj, path)
        outcome = values.get(state) if state is not None else None
        if outcome is None:
            return None
        time, field = read_time(obj, None, None)
        return Finish(outcome, state, time, field)

    return finish


def _ttl_at(paths: tuple[tuple[tuple[str, ...], str], ...]) -> Any:
    """The object's TTL is at the first of `paths` that is set."""

    def own_ttl(obj: dict[str, Any], finish: Finish) -> OwnTTL | None:
        for path, name in paths:
            value = read_path(obj, path)  # a value of any type is the owner's to fix: an invalid TTL
            if value is not None:
                return OwnTTL(value, name)
        return None

    return own_ttl


def _ttl_within(objects: tuple[tuple[tuple[str, ...], str], ...], keys: dict[str, tuple[str, ...]]) -> Any:
    """A TTL object (Argo's ttlStrategy): the first of `objects` that is set, taken whole (never
    merged key by key), then the keys listed for the finishing state, in order."""

    def own_ttl(obj: dict[str, Any], finish: Finish) -> OwnTTL | None:
        found = next(((read_path(obj, p), name) for p, name in objects if read_path(obj, p) is not None), None)
        if found is None:
            return None
        strategy, where = found
        if not isinstance(strategy, dict):
            return OwnTTL(strategy, where)  # judged invalid, rather than read as "no TTL"
        for key in keys.get(finish.reason, ()):
            if strategy.get(key) is not None:
                return OwnTTL(strategy[key], f"{where}.{key}")
        return None

    return own_ttl


def cel_inputs(items: list[Any]) -> tuple[Any, ...]:
    """`celInputs`: each a path, or {path, maxItems} bounding the items (list) or entries (map) there."""
    from jobttl.core.domain.kinds.cel import CelInput

    return tuple(
        CelInput(parse_path(i), i)
        if isinstance(i, str)
        else CelInput(parse_path(i["path"]), i["path"], i.get("maxItems"))
        for i in items
    )


def _ttl_cel(program: Any, when: tuple[str, ...], inputs: tuple[Any, ...], field: str) -> Any:
    """A TTL computed by CEL over `self`, built from the `inputs` paths alone.

    A CEL evaluation takes milliseconds (cel-python interprets its parse tree), a decision
    tens of microseconds: it runs only when `when` is set, reads only the declared inputs, and
    its result is remembered by their values (objects from one template share them). Anything
    that goes wrong in it is the declaration's fault (DeclarationFault), never the object's."""
    from jobttl.core.domain.kinds.cel import CelEvalError

    def own_ttl(obj: dict[str, Any], finish: Finish) -> OwnTTL | None:
        if get_path(obj, when) is None:
            return None  # the common case: no CEL evaluation at all
        try:
            value = program.evaluate([get_path(obj, i.path) for i in inputs])
        except CelEvalError as exc:
            raise DeclarationFault(f"{field} (ttl.cel)", str(exc)) from None
        return None if value is None else OwnTTL(value, field)

    return own_ttl


# --- loading --------------------------------------------------------------------------------------


def compile_kinds(
    items: Any,
    origin: str,
    where: str = "kinds",
    opt_ins: dict[str, tuple[str, ...]] | None = None,
    eager_cel: bool = True,
    builtin: bool = False,
) -> tuple[JobKind, ...]:
    """Validate a list of declarations (`where` is how errors name it) and build their JobKinds.
    `opt_ins` maps ``apiVersion/Kind`` to the opt-in states the policy enables for it; without
    `eager_cel`, CEL expressions are compiled on first use (the built-in ones, tested); `builtin`:
    these are kinds.yaml's (their CRD check at start is lenient, see jobttl.core.domain.kinds.crdcheck)."""
    try:
        validate({"kinds": items}, origin)
    except KindError as exc:
        raise KindError(str(exc).replace(f"{origin}: kinds", f"{origin}: {where}", 1)) from None
    compiler = _Compiler(origin, eager_cel, builtin)
    kinds: list[JobKind] = []
    seen: dict[str, int] = {}
    for i, decl in enumerate(items):
        name = key(decl)
        if name in seen:
            raise compiler.fail(f"{where}[{i}]", f"{name} is already declared at {where}[{seen[name]}]")
        seen[name] = i
        kinds.append(compiler.kind(decl, f"{where}[{i}]", tuple((opt_ins or {}).get(name, ()))))
    return tuple(kinds)


def key(decl: dict[str, Any]) -> str:
    """``apiVersion/Kind`` of a declaration (``batch/v1/Job``, ``v1/Pod``)."""
    group = decl.get("group", "")
    return f"{group}/{decl['version']}/{decl['kind']}" if group else f"{decl['version']}/{decl['kind']}"


# --- replacing a built-in kind ---------------------------------------------------------------------
# What a built-in declaration guards with: its own TTL (a TFJob that asks for 20 days), whose
# objects another controller runs, which are suspended, which are not final yet. A declaration
# replacing a built-in kind inherits each it leaves out; only `null` drops one, and says so.
INHERITED = ("ttl", "managedBy", "suspend", "notYet")


@dataclass(frozen=True)
class Replacement:
    """A declaration as it is compiled: the operator's, plus what it inherits from the built-in one."""

    declaration: dict[str, Any]
    inherited: tuple[str, ...] = ()  # fields taken from the built-in declaration
    dropped: tuple[str, ...] = ()  # fields the built-in one has that the operator set to null
    replaces: tuple[str, ...] = ()  # the built-in kinds (apiVersion/Kind) of the same CRD it replaces
    conflicts: tuple[str, ...] = ()  # fields it leaves out that those built-in kinds set differently


def without_nulls(decl: Any) -> Any:
    """An operator's declaration with its `null` INHERITED fields removed (null: none, said on purpose)."""
    if not isinstance(decl, dict):
        return decl
    return {k: v for k, v in decl.items() if not (k in INHERITED and v is None)}


def same_crd(decl: dict[str, Any], builtins: dict[str, dict[str, Any]]) -> tuple[str, ...]:
    """The built-in kinds (apiVersion/Kind) on the CRD `decl` declares: its own apiVersion/Kind, and the
    same group's kind of that name or plural in any other version. Why: a CRD serves one object at every
    version it has, so a kubeflow.org/v2 TFJob next to the built-in v1 one would decide the same
    TFJob twice, the one without the built-in's guards deleting what the other keeps."""
    group, plural = decl.get("group", ""), decl.get("plural")
    return tuple(
        name
        for name, b in builtins.items()
        if name == key(decl)
        or (b.get("group", "") == group and (b.get("kind") == decl.get("kind") or b.get("plural") == plural))
    )


def replacing(decl: dict[str, Any], builtins: dict[str, dict[str, Any]]) -> Replacement:
    """`decl` as it replaces the built-in kinds of its CRD (`same_crd`; none: it replaces nothing): each
    INHERITED field it leaves out taken from the built-in one of its version (else from those of the
    CRD's other versions, when they agree: else a conflict, for the policy to refuse), each it sets to
    null dropped."""
    merged = without_nulls(decl)
    names = same_crd(decl, builtins)
    if not names:
        return Replacement(merged)
    sources = [builtins[key(decl)]] if key(decl) in names else [builtins[name] for name in names]
    inherited, conflicts = _inheritable(decl, sources)
    dropped = tuple(k for k in INHERITED if k in decl and decl[k] is None and any(k in s for s in sources))
    merged.update({k: copy.deepcopy(sources[0][k]) for k in inherited})
    return Replacement(merged, tuple(inherited), dropped, names, tuple(conflicts))


def _inheritable(decl: dict[str, Any], sources: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The INHERITED fields `decl` leaves out that its sources set: those they agree on (to take),
    and those they do not (conflicts)."""
    inherited: list[str] = []
    conflicts: list[str] = []
    for name in INHERITED:
        values = [source.get(name) for source in sources]
        if name in decl or all(v is None for v in values):
            continue
        (conflicts if any(v != values[0] for v in values) else inherited).append(name)
    return inherited, conflicts


def load_file(path: Path) -> tuple[list[dict[str, Any]], str]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise KindError(f"{path}: cannot read the kind declarations: {exc}") from None
    validate(data, str(path))
    return data["kinds"], str(path)


@cache
def builtin_declarations() -> dict[str, dict[str, Any]]:
    """The built-in declarations (kinds.yaml) by ``apiVersion/Kind``."""
    items, _ = load_file(BUILTIN_FILE)
    return {key(d): d for d in items}


def builtin_kinds() -> dict[str, JobKind]:
    """The built-in kinds by ``apiVersion/Kind``, in kinds.yaml's order."""
    items, origin = load_file(BUILTIN_FILE)
    return {f"{k.api_version}/{k.kind}": k for k in compile_kinds(items, origin, eager_cel=False, builtin=True)}
