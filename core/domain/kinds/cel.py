"""CEL TTL expressions in kind declarations: checked and costed at load, bounded when evaluated.

A declaration's ``ttl.cel`` runs on objects jobttl is handed by anyone who can create a job, so
it must never stall the service nor be misread. As Kubernetes does for CRD validation rules:

1. at load, `TtlExpression` parses the expression (cel-python's parser) and walks its tree
   once: every name is ``self`` or a macro's variable, every field read from ``self`` lies within
   the declaration's ``celInputs``, every function is one cel-python implements (but
   ``matches``: Python's regex engine can backtrack for ever), and the result can only be seconds
   (an int), a duration or null. The same walk estimates the worst cost, in evaluation steps,
   from the inputs' declared sizes (``maxItems``); an expression that can exceed `COST_LIMIT`
   is refused. Each problem is a `CelCheckError` with its line and column in the expression;
2. per object, `TtlExpression.evaluate` checks the inputs against their declared sizes and
   `MAX_INPUT_BYTES` before converting anything, then evaluates with a step counter
   (`_BoundedEvaluator`) that stops at `COST_LIMIT`, and checks the result's type. Whatever goes
   wrong is a `CelEvalError`: the expression's (the policy's) error, never the object's.

A step is one node of the parse tree evaluated, what cel-python's interpreter does per call
(about 10-40 µs on the machines jobttl was measured on), plus one per `ADD_UNIT` items or
characters a ``+`` builds, plus, for a comparison (``==``, ``<``...), ``in``, ``contains()``,
``startsWith()`` or ``endsWith()``, one per `COMPARE_UNIT` of its operands' weight (`_weight`:
their items, nested too, and their characters), charged before the work, as Kubernetes' CEL
cost model charges list equality per item. The static estimate counts the costlier branch of
each conditional, a comprehension's body once per item its list can hold, and each operand's
weight at its bound (`MAX_WEIGHT` for what is read from the inputs; a comparison of a macro's
item is charged once for the whole list, which outweighs all its items), so it bounds what any
evaluation counts. A CPU-time backstop (`CPU_DEADLINE`) stops what the model misjudges, and
`limit_evaluations` bounds the evaluations at once (the sink keeps threads free for /healthz).
Results are remembered by the inputs' values in a cache bounded in bytes (`ResultCache`); an
error is remembered as its message, raised anew each time.
"""

from __future__ import annotations

import json
import math
import resource
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

# Steps one evaluation may take: the built-in RayJob expression is estimated at 3,920 (its
# comparisons of a rule's fields with the status charged at the 64 KiB the inputs may hold) and
# takes ~1,400 at most on valid objects (12 deletion rules); at the interpreter's ~20 µs a step,
# the limit is ~0.2-0.4 s of CPU at worst (bench/: the cel row).
COST_LIMIT = 10_000
MAX_INPUT_BYTES = 64 * 1024  # the celInputs' values of one object, as compact JSON
MAX_EXPRESSION_CHARS = 10_000
# Levels of cel-python's parse tree (a pair of parentheses is ~10, a `+` one): the walk and the
# evaluator recurse once or more per level, and Python's stack is 1,000 frames.
MAX_DEPTH = 150
ADD_UNIT = 256  # a `+` costs a step per this many characters or items it builds
# Comparing or searching a value costs a step per `COMPARE_UNIT` of its weight (`_weight`: one per
# value it holds, nested ones too, and one per `STRING_UNIT` characters): cel-python compares lists
# and maps item by item in Python (~1 µs an item), strings at C's speed. As Kubernetes' CEL cost
# model charges list equality per item and string operations per byte.
COMPARE_UNIT = 16
STRING_UNIT = 256
# The most a value read from the inputs can weigh: their JSON (at most MAX_INPUT_BYTES) spends at
# least two bytes on each value (`0,` `[]` `""`), and a string one per character.
MAX_WEIGHT = MAX_INPUT_BYTES // 2 + 1
# A backstop to the step count, in the evaluating thread's CPU time: a step the cost model
# misjudged still cannot hold a thread for long. A safety stop, never the expected outcome.
CPU_DEADLINE = 1.0
CACHE_BYTES = 1024 * 1024
MAX_MESSAGE = 400  # of an error the cache remembers (cel-python's may quote a 64 KiB value)  # per expression: keys (the inputs' JSON) and results
# What the result may be: seconds (int, uint), a duration, or null. `dyn` (a field's value,
# unknown until run) is checked when evaluated.
RESULT_TYPES = frozenset({"int", "uint", "duration", "null"})
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
# cel-python's functions but `matches` (Python's re backtracks: one string could stall a
# thread), and the type names a conversion or a `type(x) == int` comparison uses.
FUNCTIONS = frozenset(
    {
        "size",
        "contains",
        "endsWith",
        "startsWith",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getFullYear",
        "getMonth",
        "getHours",
        "getMilliseconds",
        "getMinutes",
        "getSeconds",
        "bool",
        "bytes",
        "double",
        "duration",
        "int",
        "string",
        "timestamp",
        "uint",
        "type",
        "dyn",
    }
)
TYPE_NAMES = frozenset(
    {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type", "duration", "timestamp"}
)
_RETURNS = {
    "size": "int",
    "int": "int",
    "uint": "uint",
    "double": "double",
    "string": "string",
    "bytes": "bytes",
    "bool": "bool",
    "duration": "duration",
    "timestamp": "timestamp",
    "type": "type",
    "contains": "bool",
    "endsWith": "bool",
    "startsWith": "bool",
    "has": "bool",
    "all": "bool",
    "exists": "bool",
    "exists_one": "bool",
    "map": "list",
    "filter": "list",
}
_LITERALS = {
    "INT_LIT": "int",
    "UINT_LIT": "uint",
    "FLOAT_LIT": "double",
    "STRING_LIT": "string",
    "MLSTRING_LIT": "string",
    "BYTES_LIT": "bytes",
    "BOOL_LIT": "bool",
    "NULL_LIT": "null",
}
DYN = frozenset({"dyn"})
NUMBER_CONVERSIONS = frozenset({"int", "uint", "double"})  # of a bool: an error, as in CEL


class CelCheckError(ValueError):
    """An expression refused at load; `line` and `column` (1-based) point into the expression."""

    def __init__(self, message: str, line: int = 1, column: int = 1):
        super().__init__(message)
        self.line, self.column = line, column

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column} of the expression: {self.args[0]}"


class CelEvalError(Exception):
    """The expression could not give a TTL for this object: the declaration's error, not the object's."""


class CelBusy(Exception):
    """Every evaluation slot (`limit_evaluations`) is taken: try again later. Nobody's error; the
    sink answers 503 and the sender retries, while its other threads serve health and events."""


class _OverBudget(BaseException):
    # A BaseException: cel-python turns Exceptions into CEL error values that `||`, `&&` and
    # `exists` may swallow; running out of steps must stop the whole evaluation.
    pass


class _OverDeadline(BaseException):
    pass


_METER = threading.local()  # .evaluator: the BoundedEvaluator evaluating in this thread, for `_charged`


@dataclass(frozen=True)
class CelInput:
    """One of `celInputs`: a path `self` holds, and the most items (list) or entries (map) it may have."""

    path: tuple[str, ...]
    text: str
    max_items: int | None = None


# --- the static walk --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Info:
    """What the walk knows of a sub-expression: its possible types, the most items or characters it
    can hold, its worst cost in steps, and, for a read of `self`, the path read.

    `weight` bounds what comparing or searching the value costs (`_weight`: one per value it
    holds, nested ones too, and one per `STRING_UNIT` characters). `var` names the macro variable
    the value is read from, if any: an item of a list weighs no more than the list, so across all
    the items, the comparisons of one item cost at most the list's weight (`per_item` counts them,
    by variable, for the macro that binds it to charge once)."""

    types: frozenset[str]
    size: int = MAX_INPUT_BYTES
    cost: int = 1
    path: tuple[str, ...] | None = None
    weight: int = MAX_WEIGHT
    var: str | None = None
    per_item: dict[str, int] = field(default_factory=dict, compare=False)


SCALARS = frozenset({"int", "uint", "double", "bool", "null", "duration", "timestamp", "type"})


def _scalar_weight(types: frozenset[str], otherwise: int = MAX_WEIGHT) -> int:
    return 1 if types and types <= SCALARS else otherwise


def _per_item(*infos: _Info, times: int = 1) -> dict[str, int]:
    merged: dict[str, int] = {}
    for info in infos:
        for var, count in info.per_item.items():
            merged[var] = merged.get(var, 0) + count * times
    return merged


def _where(node: Any) -> tuple[int, int]:
    """(line, column) of a tree (its meta) or a token; 1, 1 when the parser kept none."""
    meta = getattr(node, "meta", None)
    if meta is not None and not getattr(meta, "empty", True):
        return getattr(meta, "line", None) or 1, getattr(meta, "column", None) or 1
    return getattr(node, "line", None) or 1, getattr(node, "column", None) or 1


# The relations and functions whose work grows with their operands, and which operands count:
# `==` and the orderings stop at the smaller one; `in` and `contains()` search the container.
_COMPARES = frozenset({"relation_eq", "relation_ne", "relation_lt", "relation_le", "relation_gt", "relation_ge"})
_SEARCHES = frozenset({"relation_in", "contains", "startsWith", "endsWith"})


class _Checker:
    """One walk of the parse tree: types, fields read, functions, and the worst cost."""

    def __init__(self, inputs: tuple[CelInput, ...], limit: int = COST_LIMIT):
        self.inputs = inputs
        self.limit = limit
        self.scopes: list[dict[str, _Info]] = []
        self.costliest: tuple[Any, str] | None = None  # the first comprehension over the limit, and why
        self.depth = 0

    def fail(self, node: Any, message: str) -> CelCheckError:
        return CelCheckError(message, *_where(node))

    def walk(self, node: Any) -> _Info:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:  # before Python's recursion limit, here or in the evaluator
                raise self.fail(
                    node,
                    f"nested too deeply: its parse tree is over {MAX_DEPTH} levels deep "
                    "(parentheses, lists, or a long chain of operators)",
                )
            return self._walk(node)
        finally:
            self.depth -= 1

    def _walk(self, node: Any) -> _Info:
        method = getattr(self, f"n_{node.data}", None)
        if method is not None:
            return method(node)
        infos = [self.value(c) for c in node.children if hasattr(c, "data")]
        if len(infos) == 1:  # a wrapper rule (expr, member, primary...) around one child
            return replace(infos[0], cost=infos[0].cost + 1)
        raise self.fail(node, f"{node.data} is not supported")  # pragma: no cover - every rule is handled

    def value(self, node: Any) -> _Info:
        """A sub-expression used as a value: a read of `self` must lie within an input."""
        info = self.walk(node)
        if info.path is not None and self.input_at(info.path) is None:
            raise self.fail(
                node,
                f"reads {_shown(info.path)}, which no celInputs entry holds whole "
                f"(celInputs: {', '.join(i.text for i in self.inputs)})",
            )
        return info

    def input_at(self, path: tuple[str, ...]) -> CelInput | None:
        """The input holding `path` (at it or above it)."""
        return next((i for i in self.inputs if path[: len(i.path)] == i.path), None)

    def charge(self, operands: list[_Info], smallest: bool) -> tuple[int, dict[str, int]]:
        """The worst steps comparing or searching `operands` costs (`_charge`): at once when a bound
        makes it cheap, else against the innermost macro variable one of them is read from (charged
        once per list by its macro), else by the largest bound."""
        weights = [o.weight for o in operands]
        fixed = _charge(min(weights) if smallest else sum(weights))
        if fixed == 0:
            return 0, {}
        held = [o.var for o in operands if o.var is not None]
        if held and (smallest or len(operands) == 1):
            innermost = max(held, key=lambda v: max(i for i, s in enumerate(self.scopes) if v in s))
            return 0, {innermost: 1}
        return fixed, {}

    # --- operators
    def n_expr(self, node: Any) -> _Info:
        kids = [self.value(c) for c in node.children]
        if len(kids) == 1:
            return replace(kids[0], cost=kids[0].cost + 1, path=None)
        cond, yes, no = kids  # only one branch is evaluated
        per_item = _per_item(cond)
        for var in set(yes.per_item) | set(no.per_item):
            per_item[var] = per_item.get(var, 0) + max(yes.per_item.get(var, 0), no.per_item.get(var, 0))
        return _Info(
            yes.types | no.types,
            max(yes.size, no.size),
            1 + cond.cost + max(yes.cost, no.cost),
            weight=max(yes.weight, no.weight),
            per_item=per_item,
        )

    def _binary(self, node: Any, result: frozenset[str] | None) -> _Info:
        kids = [self.value(c) for c in node.children]
        cost = 1 + sum(k.cost for k in kids)
        if len(kids) == 1:
            return replace(kids[0], cost=cost, path=None)
        types = result if result is not None else _arith(kids)
        return _Info(types, MAX_INPUT_BYTES, cost, weight=_scalar_weight(types), per_item=_per_item(*kids))

    def n_conditionalor(self, node: Any) -> _Info:
        return self._binary(node, frozenset({"bool"}))

    n_conditionaland = n_conditionalor

    def n_relation(self, node: Any) -> _Info:
        if len(node.children) != 2:
            return self._binary(node, frozenset({"bool"}))
        op = node.children[0].data
        left, right = self.value(node.children[0]), self.value(node.children[1])
        if op in _COMPARES:
            steps, charged = self.charge([left, right], smallest=True)
        else:  # in: the container is searched
            steps, charged = self.charge([right], smallest=False)
        return _Info(
            frozenset({"bool"}),
            MAX_INPUT_BYTES,
            1 + left.cost + right.cost + steps,
            weight=1,
            per_item=_per_item(left, right, _Info(DYN, per_item=charged)),
        )

    def n_multiplication(self, node: Any) -> _Info:
        return self._binary(node, None)

    def n_addition(self, node: Any) -> _Info:
        kids = [self.value(c) for c in node.children]
        cost = 1 + sum(k.cost for k in kids)
        if len(kids) == 1:
            return replace(kids[0], cost=cost, path=None)
        size = sum(k.size for k in kids)  # a `+` of strings or lists: it builds as much as both hold
        types = _arith(kids)
        weight = _scalar_weight(types, 1 + sum(k.weight for k in kids))
        return _Info(types, size, cost + size // ADD_UNIT, weight=weight, per_item=_per_item(*kids))

    def n_unary(self, node: Any) -> _Info:
        kids = [c for c in node.children if hasattr(c, "data")]
        info = self.value(kids[-1])
        if len(kids) == 1:
            return replace(info, cost=info.cost + 1, path=None)
        op = kids[0].data
        types = frozenset({"bool"}) if op == "unary_not" else info.types
        return _Info(types, info.size, info.cost + 2, weight=_scalar_weight(types, info.weight), per_item=info.per_item)

    # --- names, fields, literals
    def n_ident(self, node: Any) -> _Info:
        name = node.children[0].value
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name == "self":
            return _Info(DYN, path=())
        if name in TYPE_NAMES:
            return _Info(frozenset({"type"}), weight=1)
        raise self.fail(node, f"unknown name {name!r}: the object is `self`")

    def n_member(self, node: Any) -> _Info:
        # A wrapper, but a read of `self` passes through it unchecked: only its final use is.
        info = self.walk(node.children[0])
        return replace(info, cost=info.cost + 1)

    n_primary = n_member

    def n_member_dot(self, node: Any) -> _Info:
        target = self.walk(node.children[0])
        name = node.children[1]
        return self._field(name, target, name.value)  # an error points at the field's name

    def _field(self, node: Any, target: _Info, name: str) -> _Info:
        if target.path is None:  # a field of a value (a macro's item): no heavier than it
            return _Info(DYN, cost=target.cost + 1, weight=target.weight, var=target.var, per_item=target.per_item)
        path = target.path + (name,)
        held = self.input_at(path)
        if held is None and not any(i.path[: len(path)] == path for i in self.inputs):
            raise self.fail(
                node, f"reads {_shown(path)}, which is not among celInputs ({', '.join(i.text for i in self.inputs)})"
            )
        size = (
            held.max_items if held is not None and held.path == path and held.max_items is not None else MAX_INPUT_BYTES
        )
        return _Info(DYN, size, target.cost + 1, path)

    def n_member_index(self, node: Any) -> _Info:
        target = self.walk(node.children[0])
        index = self.value(node.children[1])
        literal = _string_literal(node.children[1])
        if target.path is not None and literal is not None:
            info = self._field(node.children[1], target, literal)
            return replace(info, cost=info.cost + index.cost, per_item=_per_item(info, index))
        if target.path is not None:
            self.value(node.children[0])  # an index computed at run time: the whole value must be an input
        return _Info(
            DYN,
            cost=target.cost + index.cost + 1,
            weight=target.weight,
            var=target.var,
            per_item=_per_item(target, index),
        )

    def n_member_object(self, node: Any) -> _Info:
        raise self.fail(node, "message construction is not supported")

    n_dot_ident = n_dot_ident_arg = n_member_object

    def n_literal(self, node: Any) -> _Info:
        token = node.children[0]
        kind = _LITERALS.get(token.type, "dyn")
        return _Info(frozenset({kind}), len(token.value), 1, weight=1 + len(token.value) // STRING_UNIT)

    def n_list_lit(self, node: Any) -> _Info:
        items = [self.value(c) for c in node.children[0].children] if node.children else []
        return _Info(
            frozenset({"list"}),
            len(items),
            2 + sum(i.cost for i in items),
            weight=1 + sum(i.weight for i in items),
            per_item=_per_item(*items),
        )

    def n_map_lit(self, node: Any) -> _Info:
        items = [self.value(c) for c in node.children[0].children] if node.children else []
        return _Info(
            frozenset({"map"}),
            len(items) // 2,
            2 + sum(i.cost for i in items),
            weight=1 + sum(i.weight for i in items),
            per_item=_per_item(*items),
        )

    # --- calls
    def n_ident_arg(self, node: Any) -> _Info:
        name = node.children[0].value
        args = list(node.children[1].children) if len(node.children) > 1 else []
        if name == "has":
            return self._has(node, args)
        if name not in FUNCTIONS:
            raise self.fail(node, _unknown_function(name))
        infos = [self.value(a) for a in args]
        return self._call(name, infos, 2 + sum(i.cost for i in infos))

    def _call(self, name: str, operands: list[_Info], cost: int) -> _Info:
        types = frozenset({_RETURNS.get(name, "dyn")})
        steps, charged = self.charge(operands, smallest=False) if name in _SEARCHES and operands else (0, {})
        # dyn(x) is x, string(x) no heavier: what is not a scalar weighs as much as its heaviest operand
        weight = _scalar_weight(types, max([MAX_WEIGHT, *(o.weight for o in operands)]))
        return _Info(
            types,
            MAX_INPUT_BYTES,
            cost + steps,
            weight=weight,
            per_item=_per_item(*operands, _Info(DYN, per_item=charged)),
        )

    def _has(self, node: Any, args: list[Any]) -> _Info:
        if len(args) != 1:
            raise self.fail(node, "has() takes one field, as has(self.spec.x)")
        info = self.walk(args[0])  # a presence test: a path on the way to an input is fine
        return _Info(frozenset({"bool"}), cost=info.cost + 2, weight=1, per_item=info.per_item)

    def n_member_dot_arg(self, node: Any) -> _Info:
        name = node.children[1].value
        args = list(node.children[2].children) if len(node.children) > 2 else []
        if name in MACROS:
            return self._macro(node, name, args)
        if name not in FUNCTIONS:
            raise self.fail(node, _unknown_function(name))
        target = self.value(node.children[0])
        infos = [self.value(a) for a in args]
        return self._call(name, [target, *infos], 2 + target.cost + sum(i.cost for i in infos))

    def _macro(self, node: Any, name: str, args: list[Any]) -> _Info:
        if len(args) != 2:
            raise self.fail(node, f"{name}() takes a variable and an expression, as {name}(x, x > 0)")
        variable = _macro_variable(args[0])
        if variable is None:
            raise self.fail(args[0], f"the first argument of {name}() must be a variable name")
        target = self.value(node.children[0])
        self.scopes.append({variable: _Info(DYN, weight=target.weight, var=variable)})
        try:
            body = self.value(args[1])
        finally:
            self.scopes.pop()
        if name in ("all", "exists", "exists_one", "filter") and not body.types & {"bool", "dyn"}:
            raise self.fail(args[1], f"{name}() needs a condition, and this is a {_types(body.types)}")
        # Each item: the body, plus binding the variable; the list itself, once; and the body's
        # comparisons of the item, at most the list's weight over all the items.
        per_item = dict(body.per_item)
        own = per_item.pop(variable, 0) * _charge(target.weight)
        cost = 2 + target.cost + target.size * (body.cost + 2) + own
        if cost > self.limit and self.costliest is None:  # the innermost one: where the cost comes from
            bound = (
                "no maxItems bounds its list"
                if target.size == MAX_INPUT_BYTES
                else f"its list holds up to {target.size:,} items"
            )
            self.costliest = (
                node.children[1],
                f"{name}() here runs its body ({body.cost + own:,} steps) once per item, and {bound}",
            )
        weight = {"map": 1 + target.size * body.weight, "filter": target.weight}.get(name, 1)
        # An outer variable's comparisons in the body happen once per item of this list.
        outer = _per_item(target)
        for var, count in per_item.items():
            outer[var] = outer.get(var, 0) + count * target.size
        return _Info(frozenset({_RETURNS[name]}), target.size, cost, weight=weight, per_item=outer)


def _charge(weight: int) -> int:
    return weight // COMPARE_UNIT


def _weight(value: Any, cap: int) -> int:
    """What comparing or searching `value` costs at most (see `COMPARE_UNIT`), counted until past `cap`:
    measuring costs no more than the steps it charges."""
    total, stack = 0, [value]
    while stack and total <= cap:
        item = stack.pop()
        total += 1
        if isinstance(item, (str, bytes)):
            total += len(item) // STRING_UNIT
        elif isinstance(item, dict):
            if len(item) * 2 > cap - total:
                return cap + 1
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            if len(item) > cap - total:
                return cap + 1
            stack.extend(item)
    return total


def _arith(kids: list[_Info]) -> frozenset[str]:
    types = frozenset().union(*(k.types for k in kids))
    return types if len(types) == 1 else DYN


def _types(types: frozenset[str]) -> str:
    return " or ".join(sorted(types))


def _shown(path: tuple[str, ...]) -> str:
    return "self" + "".join(f".{p}" for p in path)


def _unknown_function(name: str) -> str:
    if name == "matches":
        return "matches() is not available: Python's regular expressions can backtrack for ever on one string"
    return f"unknown function {name}() (known: {', '.join(sorted(FUNCTIONS | MACROS | {'has'}))})"


def _string_literal(node: Any) -> str | None:
    """The string of an index that is a plain string literal (``self.metadata.labels["a/b"]``)."""
    while hasattr(node, "data") and len(node.children) == 1 and node.data != "literal":
        node = node.children[0]
    if getattr(node, "data", None) == "literal" and node.children[0].type == "STRING_LIT":
        text = node.children[0].value
        if text[:1] not in "rR" and "\\" not in text:
            return text[1:-1]
    return None


def _macro_variable(node: Any) -> str | None:
    while hasattr(node, "data") and len(node.children) == 1 and node.data != "ident":
        node = node.children[0]
    return node.children[0].value if getattr(node, "data", None) == "ident" else None


# --- evaluating -------------------------------------------------------------------------------------


def _bounded_evaluator() -> Any:
    """cel-python's Evaluator, counting the nodes it evaluates (and `+`'s output), across its
    macros' sub-evaluators, raising _OverBudget past the limit. Built on first use: the import
    of cel-python is paid only by kinds that use CEL."""
    import celpy
    from celpy.evaluation import CELEvalError, Evaluator

    class BoundedEvaluator(Evaluator):
        def __init__(
            self,
            ast: Any,
            activation: Any,
            counter: list[int] | None = None,
            limit: int = COST_LIMIT,
            deadline: float | None = None,
        ):
            super().__init__(ast, activation)
            self.counter = counter if counter is not None else [0]
            self.limit = limit
            self.deadline = deadline if deadline is not None else _thread_cpu() + CPU_DEADLINE

        def sub_evaluator(self, ast: Any) -> Any:
            return BoundedEvaluator(ast, self.activation, self.counter, self.limit, self.deadline)

        def charge(self, steps: int) -> None:
            self.counter[0] += steps
            if self.counter[0] > self.limit:
                raise _OverBudget()
            if (steps > 1 or self.counter[0] % 32 == 1) and _thread_cpu() > self.deadline:  # ~1 µs a look
                raise _OverDeadline()

        def remaining(self) -> int:
            """The most weight a comparison may still measure (`_weight`'s cap)."""
            return (self.limit - self.counter[0] + 1) * COMPARE_UNIT

        def function_eval(self, name_token: Any, exprlist: Any = None) -> Any:
            # The names are also types (`type(x) == int`): refused here rather than replaced.
            if name_token.value in NUMBER_CONVERSIONS and any(_is_bool(a) for a in exprlist or ()):
                return CELEvalError(f"no such overload: {name_token.value}(bool)", TypeError, (), token=name_token)
            return super().function_eval(name_token, exprlist)

        def _visit_tree(self, tree: Any) -> Any:
            self.charge(1)
            result = super()._visit_tree(tree)
            if tree.data == "addition" and len(tree.children) > 1 and isinstance(result, (str, bytes, list)):
                self.counter[0] += len(result) // ADD_UNIT
            return result

    return BoundedEvaluator, celpy


_SLOTS: threading.BoundedSemaphore | None = None
_SLOTS_TOTAL = 0


def limit_evaluations(slots: int | None) -> None:
    """At most `slots` evaluations at once in this process (None: no limit); one more raises
    `CelBusy` at once rather than waiting. The sink sets it below its thread count, so that
    however many costly events arrive, some threads stay free for /healthz and other events."""
    global _SLOTS, _SLOTS_TOTAL
    _SLOTS, _SLOTS_TOTAL = (threading.BoundedSemaphore(slots), slots) if slots else (None, 0)


class TtlExpression:
    """A checked CEL TTL expression (`CelCheckError` if refused), evaluated within `COST_LIMIT`."""

    def __init__(self, text: str, inputs: tuple[CelInput, ...], limit: int = COST_LIMIT):
        self.text = text
        self.inputs = inputs
        self.limit = limit
        self.tree = _parse(text)
        checker = _Checker(inputs, limit)
        try:
            info = checker.value(self.tree)
        except RecursionError:  # MAX_DEPTH is meant to come first; never a traceback at start
            raise CelCheckError("nested too deeply") from None
        bad = info.types - RESULT_TYPES - DYN
        if bad:
            raise CelCheckError(
                f"the result can be a {_types(bad)}: a TTL is seconds (an int), a duration, or null for none",
                *_where(self.tree),
            )
        if info.cost > limit:
            node, why = checker.costliest or (self.tree, "")
            raise CelCheckError(
                f"its cost can reach {info.cost:,} steps, over the limit of {limit:,} per evaluation"
                + (f": {why}" if why else "")
                + "; bound the list with maxItems in celInputs, "
                "or iterate less",
                *_where(node),
            )
        self.estimate = info.cost
        self.cache = ResultCache(CACHE_BYTES)
        self._evaluator: Any = None
        self.last_steps = 0

    def inputs_key(self, values: list[Any]) -> str:
        """The inputs as compact JSON (the cache's key), after checking their declared sizes."""
        for spec, value in zip(self.inputs, values):
            if spec.max_items is not None and isinstance(value, (list, dict)) and len(value) > spec.max_items:
                raise CelEvalError(
                    f"{spec.text} has {len(value):,} items, more than the {spec.max_items} its "
                    "celInputs entry allows (maxItems)"
                )
        key = json.dumps(values, sort_keys=True, separators=(",", ":"))
        if len(key) > MAX_INPUT_BYTES:
            raise CelEvalError(f"the celInputs hold {len(key):,} bytes, more than {MAX_INPUT_BYTES:,}")
        return key

    def evaluate(self, values: list[Any]) -> int | None:
        """The TTL in whole seconds (a duration rounded up), or None; CelEvalError otherwise."""
        key = self.inputs_key(values)
        found = self.cache.get(key)
        if found is None:
            slots = _SLOTS
            if slots is not None and not slots.acquire(blocking=False):
                raise CelBusy(f"{_SLOTS_TOTAL} CEL evaluations are running, the most at once; retry later")
            try:
                found = self._run(values)
            finally:
                if slots is not None:
                    slots.release()
            self.cache.put(key, found)
        if isinstance(found, str):
            # A fresh error each time: re-raising one cached instance would chain every caller's
            # frames (and the objects they hold) onto its traceback, for as long as it is cached.
            raise CelEvalError(found)
        return found[0]

    def _run(self, values: list[Any]) -> tuple[int | None] | str:
        """One evaluation's outcome, the result or the error's message, kept alike: both depend on the
        inputs alone."""
        try:
            return (self._result(self._evaluate(values)),)
        except CelEvalError as exc:
            message = str(exc)
            return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."

    def _evaluate(self, values: list[Any]) -> Any:
        if self._evaluator is None:
            evaluator_class, celpy = _bounded_evaluator()
            # The base activation (cel-python's functions) is made once; each evaluation clones it.
            runner = celpy.InterpretedRunner(_environment(), self.tree, functions=_strict_functions())
            self._evaluator = evaluator_class, celpy, runner.new_activation()
        evaluator_class, celpy, activation = self._evaluator
        evaluator = evaluator_class(self.tree, activation, limit=self.limit)
        _METER.evaluator = evaluator
        try:
            return evaluator.evaluate({"self": celpy.json_to_cel(_scope(self.inputs, values))})
        except _OverBudget:
            raise CelEvalError(f"stopped after {self.limit:,} steps (the limit per evaluation)") from None
        except _OverDeadline:
            raise CelEvalError(f"stopped after {CPU_DEADLINE:g} s of CPU (the limit per evaluation)") from None
        except RecursionError:
            raise CelEvalError("nested too deeply to evaluate") from None
        except Exception as exc:  # noqa: BLE001 - cel-python raises its own and Python's errors
            raise CelEvalError(f"evaluation failed: {_first_line(exc)}") from None
        finally:
            _METER.evaluator = None
            self.last_steps = evaluator.counter[0]  # what tests and bench/ compare with the estimate

    @staticmethod
    def _result(value: Any) -> int | None:
        """Seconds from what the expression gave: an int, a duration (rounded up) or null, nothing else."""
        if value is None:
            return None
        if isinstance(value, bool) or type(value).__name__ == "BoolType":  # before int: CEL's bool is an int
            raise CelEvalError(
                f"gave the bool {str(value).lower()}, not a TTL (seconds as an int, a duration, or null)"
            )
        if isinstance(value, timedelta):
            seconds = math.ceil(value.total_seconds())
        elif isinstance(value, int):
            seconds = int(value)
        else:
            raise CelEvalError(
                f"gave a {_cel_type(value)} ({_first_line(value)[:80]}), not a TTL "
                "(seconds as an int, a duration, or null)"
            )
        if seconds < 0:
            raise CelEvalError(f"gave {seconds} s: a TTL is not negative")
        return seconds


_STRICT: dict[str, Any] | None = None


def _strict_functions() -> dict[str, Any]:
    """cel-python's arithmetic and numeric conversions, refusing a bool as CEL (and cel-go) do.

    cel-python's BoolType subclasses int, so without this `self.spec.x * 60`, `self.spec.x + 0`,
    `int(self.spec.x)` or `uint(self.spec.x)` turn false into a TTL of 0 s (deleted at once) and
    true into 1 s. CEL has no such overloads: each is an error, so the object is kept and the
    error is the policy's. A TypeError is what cel-python turns into "no such overload"."""
    global _STRICT
    if _STRICT is None:
        from celpy.evaluation import base_functions

        def strict(name: str, function: Any) -> Any:
            def no_bool(*args: Any) -> Any:
                if any(_is_bool(a) for a in args):
                    raise TypeError(f"no such overload: {name} of a bool")
                return function(*args)

            no_bool.__name__ = getattr(function, "__name__", name)
            return no_bool

        names = ("_+_", "_-_", "_*_", "_/_", "_%_", "-_")  # int(), uint(), double(): BoundedEvaluator
        _STRICT = {name: strict(name, base_functions[name]) for name in names}
        for name in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"):
            _STRICT[name] = _charged(base_functions[name], smallest=True)
        for name in ("_in_", "contains", "startsWith", "endsWith"):
            _STRICT[name] = _charged(base_functions[name], smallest=False, container=name == "_in_")
    return _STRICT


def _thread_cpu() -> float:
    """CPU seconds this thread has used: a meter of work done, not a clock (nothing is decided by
    the time of day, and it does not run while the thread waits), for `CPU_DEADLINE` alone."""
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "BoolType"


def _charged(function: Any, smallest: bool, container: bool = False) -> Any:
    """`function`, first charging the steps its operands' weight costs (as the static walk does:
    `_Checker.charge`), so that a comparison of two 30,000-item lists is not one step."""

    def run(*args: Any) -> Any:
        evaluator = getattr(_METER, "evaluator", None)
        if evaluator is not None:
            cap = evaluator.remaining()
            operands = args[1:] if container else args
            if smallest:
                weight = cap + 1
                for operand in operands:
                    weight = min(weight, _weight(operand, min(weight, cap)))
            else:
                weight = 0
                for operand in operands:
                    if weight > cap:
                        break
                    weight += _weight(operand, cap - weight)
            evaluator.charge(_charge(weight))
        return function(*args)

    run.__name__ = getattr(function, "__name__", "charged")
    return run


def _cel_type(value: Any) -> str:
    name = type(value).__name__
    return {
        "DoubleType": "double",
        "StringType": "string",
        "BytesType": "bytes",
        "ListType": "list",
        "MapType": "map",
        "TimestampType": "timestamp",
    }.get(name, name)


def _scope(inputs: tuple[CelInput, ...], values: list[Any]) -> dict[str, Any]:
    """`self`: the inputs alone, at their paths (an absent one is absent, so `has()` says false)."""
    scope: dict[str, Any] = {}
    for spec, value in zip(inputs, values):
        if value is None:
            continue
        node = scope
        for part in spec.path[:-1]:
            node = node.setdefault(part, {})
        node[spec.path[-1]] = value
    return scope


def _first_line(value: Any) -> str:
    text = str(value).strip()
    return text.splitlines()[0] if text else type(value).__name__


_ENVIRONMENT: Any = None


def _environment() -> Any:
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        import celpy  # only kinds that use CEL pay for its import and its parser (~0.3-0.9 s)

        _ENVIRONMENT = celpy.Environment()
    return _ENVIRONMENT


def _parse(text: str) -> Any:
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CelCheckError(f"{len(text):,} characters, more than {MAX_EXPRESSION_CHARS:,}")
    try:
        return _environment().compile(text)
    except RecursionError:
        raise CelCheckError("nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - celpy's CELParseError, with its position when it knows it
        line, column = getattr(exc, "line", None) or 1, getattr(exc, "column", None) or 1
        raise CelCheckError(f"not a valid CEL expression: {_unexpected(text, line, column)}", line, column) from None


def _unexpected(text: str, line: int, column: int) -> str:
    """What the parser stopped at (its error is only the text with a caret)."""
    lines = text.splitlines() or [""]
    row = lines[line - 1] if 0 < line <= len(lines) else ""
    if 0 < column <= len(row):
        return (
            f"unexpected {row[column - 1 : column + 9].split()[0]!r}"
            if row[column - 1 :].strip()
            else "unexpected space"
        )
    return "unexpected end of the expression"


# --- the result cache ---------------------------------------------------------------------------------


@dataclass
class ResultCache:
    """Least recently used results, by the inputs' JSON, within `limit` bytes (keys plus a fixed
    cost per entry). Shared by the sink's threads: one lock."""

    limit: int
    entries: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    used: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    ENTRY_BYTES = 200  # the entry, its result and the dict's slot, roughly

    def get(self, key: str) -> Any:
        with self.lock:
            found = self.entries.get(key)
            if found is not None:
                self.entries.move_to_end(key)
            return found

    def put(self, key: str, value: Any) -> None:
        size = self.size(key, value)
        if size > self.limit:
            return
        with self.lock:
            if key in self.entries:
                return
            self.entries[key] = value
            self.used += size
            while self.used > self.limit:
                self.used -= self.size(*self.entries.popitem(last=False))

    @classmethod
    def size(cls, key: str, value: Any) -> int:
        """An entry's bytes: its key, an error's message, and the fixed cost."""
        return len(key) + cls.ENTRY_BYTES + (len(value) if isinstance(value, str) else 0)
