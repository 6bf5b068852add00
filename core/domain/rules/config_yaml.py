"""YAML an operator writes (the policy file), read strictly: what it says, or an error naming the line.

PyYAML's ``safe_load`` reads YAML 1.1 and forgives: ``ttl: 1:30`` is 90 (sexagesimal), ``on``,
``yes`` and ``no`` are booleans, ``0755`` is octal, a second ``namespaces:`` key silently
replaces the first, and a 2 KB file of nested aliases (``&a [*b, *b, ...]``) expands to a
billion nodes for whatever walks it next. A policy decides what is deleted, so here:

- values are read as **YAML 1.2** (its core schema, the one every current YAML library
  defaults to): ``true``/``false`` are the only booleans, integers are decimal (``0o``, ``0x``
  prefixed otherwise), there are no sexagesimal numbers and no timestamps; anything else is a
  string, which the policy's reader then refuses where it wants another type
  (``dryRun: yes``: "expected true or false, got 'yes'");
- a key written twice in one mapping is refused, naming both lines;
- a merge key (``<<``) is refused: YAML 1.2 has none, and PyYAML's reading of two of them (or of
  ``<<: [*a, *b]``) lets the later map win, so ``{<<: {exclude: [production]}, <<: {exclude: []}}``
  silently dropped an exclude; the keys are written out instead (plain aliases still work);
- a file over `MAX_BYTES`, nesting past `MAX_DEPTH` (aliases counted where they are used),
  aliases that add more than `ALIAS_BUDGET` nodes, a second document, a key that is not a
  plain value, a tag outside the core schema's: refused, naming the line and the field.

All of it is checked on the parser's event stream (libyaml's, when PyYAML has it), before
anything is built, so a refusal takes milliseconds whatever the file holds. `Document.lines`
gives the line of every field, spelled as the policy's errors spell them (``rules[0].ttl``),
so that errors found later can name the line too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

MAX_BYTES = 256 * 1024  # a policy is kilobytes; a ConfigMap holds at most 1 MiB
MAX_DEPTH = 32  # the policy's deepest field (a kind declaration's state values) is 7 levels down
ALIAS_BUDGET = 10_000  # nodes aliases may add beyond those written (merging declarations adds hundreds)

_CORE = "tag:yaml.org,2002:"
_ALLOWED_TAGS = {"!"} | {_CORE + name for name in ("str", "int", "float", "bool", "null", "map", "seq")}
_MERGE = "<<"
_Parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ConfigYAMLError(ValueError):
    """The file is not YAML jobttl reads; the message names the file, the line and the field."""


@dataclass
class Document:
    data: Any
    lines: dict[str, int] = field(default_factory=dict)  # field (``rules[0].ttl``) → line, from 1

    def line(self, where: str) -> int | None:
        """The line of `where`, or of the nearest field above it that is written (a missing key's mapping)."""
        while where:
            if where in self.lines:
                return self.lines[where]
            where = _parent(where)
        return None


# --- YAML 1.2's core schema on PyYAML (https://yaml.org/spec/1.2.2/#103-core-schema) -----------------


class _Core12Loader(_Parser):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader (libyaml's parser when there) with YAML 1.2's core schema resolvers."""


_Core12Loader.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in (
    ("null", r"~|null|Null|NULL|", "~nN"),
    ("bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
    (
        "float",
        r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)",
        "-+.0123456789",
    ),
):
    _Core12Loader.add_implicit_resolver(
        _CORE + _tag, re.compile(rf"^(?:{_pattern})$"), list(_first) + ([""] if _tag == "null" else [])
    )


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    sign, digits = (-1, text[1:]) if text.startswith("-") else (1, text.lstrip("+"))
    try:
        if digits.startswith(("0o", "0x")):
            return sign * int(digits[2:], 8 if digits[1] == "o" else 16)
        return sign * int(digits, 10)  # 0755 is 755: YAML 1.2 has no leading-zero octal
    except ValueError:
        raise yaml.constructor.ConstructorError(None, None, f"{text!r} is not an integer", node.start_mark) from None


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    text = loader.construct_scalar(node).lower()
    try:
        return float(text.replace(".inf", "inf").replace(".nan", "nan"))
    except ValueError:
        raise yaml.constructor.ConstructorError(None, None, f"{text!r} is not a number", node.start_mark) from None


def _construct_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool:
    text = loader.construct_scalar(node)
    if text.lower() not in ("true", "false"):  # !!bool yes: YAML 1.1's, not 1.2's
        raise yaml.constructor.ConstructorError(None, None, f"{text!r} is not true or false", node.start_mark)
    return text.lower() == "true"


_Core12Loader.add_constructor(_CORE + "bool", _construct_bool)
# No "merge" resolver: `<<` is the text it is (YAML 1.2), and the checker refuses it as a key.
_Core12Loader.add_constructor(_CORE + "int", _construct_int)
_Core12Loader.add_constructor(_CORE + "float", _construct_float)


# --- the checks, on the event stream --------------------------------------------------------------


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _parent(where: str) -> str:
    """``rules[0].ttl`` → ``rules[0]`` → ``rules`` → ""."""
    cut = max(where.rfind("."), where.rfind("["))
    return where[:cut] if cut > 0 else ""


@dataclass
class _Frame:
    """A mapping or sequence being read: where, what it has seen, how big it is with aliases expanded."""

    path: str
    mapping: bool
    anchor: str | None
    index: int = 0
    key: str | None = None  # a mapping's key read, its value not yet
    keys: dict[str, int] = field(default_factory=dict)  # key → line
    size: int = 1
    height: int = 1


class _Checker:
    def __init__(self, origin: str):
        self.origin = origin
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[int, int]] = {}  # anchor → (size, height)
        self.open_anchors: set[str] = set()
        self.lines: dict[str, int] = {}
        self.added = 0  # nodes the aliases added
        self.documents = 0
        self.resolver = _Core12Loader("")  # what type a plain key is read as

    def fail(self, line: int, where: str, problem: str) -> ConfigYAMLError:
        return ConfigYAMLError(f"{self.origin}:{line}: {where or '(top level)'}: {problem}")

    def run(self, text: str) -> None:
        for event in yaml.parse(text, Loader=_Parser):
            if isinstance(event, yaml.DocumentStartEvent):
                self.documents += 1
                if self.documents > 1:
                    raise self.fail(
                        event.start_mark.line + 1, "", "a second YAML document (---): the file holds one policy"
                    )
            elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
                self.node(event)
            elif isinstance(event, yaml.CollectionEndEvent):
                self.end()

    def node(self, event: Any) -> None:
        line = event.start_mark.line + 1
        where = self.place(event, line)
        if where is None:
            return  # a mapping's key: read, and checked for duplicates
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in _ALLOWED_TAGS:
            raise self.fail(
                line,
                where,
                f"the tag {tag} is not one a policy may use (YAML 1.2's core schema: "
                "!!str, !!int, !!float, !!bool, !!null, !!map, !!seq)",
            )
        size, height = self.alias(event, line, where) if isinstance(event, yaml.AliasEvent) else (1, 1)
        if isinstance(event, yaml.CollectionStartEvent):
            if len(self.stack) + 1 > MAX_DEPTH:
                raise self.fail(line, where, f"nests deeper than {MAX_DEPTH} levels")
            self.stack.append(_Frame(where, isinstance(event, yaml.MappingStartEvent), event.anchor))
            if event.anchor:
                self.open_anchors.add(event.anchor)
            return
        if getattr(event, "anchor", None) and isinstance(event, yaml.ScalarEvent):
            self.anchors[event.anchor] = (1, 1)
        self.grow(size, height)

    def place(self, event: Any, line: int) -> str | None:
        """The field this node is (recording its line), or None for a mapping's key."""
        if not self.stack:
            return ""
        frame = self.stack[-1]
        if not frame.mapping:
            where = f"{frame.path}[{frame.index}]"
            frame.index += 1
            self.lines.setdefault(where, line)
            return where
        if frame.key is not None:
            where, frame.key = _child(frame.path, frame.key), None
            return where
        if not isinstance(event, yaml.ScalarEvent):
            raise self.fail(line, frame.path, "a key must be a plain value, not a list, a mapping or an alias")
        key = event.value
        if event.tag is not None and event.tag not in _ALLOWED_TAGS:  # `!!merge <<` included
            raise self.fail(
                line,
                _child(frame.path, key),
                f"the tag {event.tag} is not one a policy may use (YAML 1.2's core schema)",
            )
        if key == _MERGE and event.implicit[0]:  # plain and untagged: a merge key to YAML 1.1 readers
            # Why refused, not merged: PyYAML lets the later of two `<<` (or of `<<: [*a, *b]`) win,
            # the opposite of the merge spec, so a second map silently undid the first one's exclude.
            raise self.fail(
                line,
                _child(frame.path, key),
                "a merge key (<<): YAML 1.2 has no merge keys, and "
                "which map wins is not what it seems; write the "
                "keys out (an alias *name may still stand for a "
                "whole value)",
            )
        if self.resolver.resolve(yaml.ScalarNode, key, event.implicit) != _CORE + "str":
            raise self.fail(
                line,
                _child(frame.path, key),
                f'a key must be a string: YAML reads {key} as another type; quote it ("{key}")',
            )
        if key in frame.keys:
            raise self.fail(
                line,
                _child(frame.path, key),
                f"written twice in one mapping (lines "
                f"{frame.keys[key]} and {line}): YAML keeps only "
                "the last; say it once",
            )
        frame.keys.setdefault(key, line)
        frame.key = key
        frame.size += 1
        self.lines.setdefault(_child(frame.path, key), line)
        return None

    def alias(self, event: yaml.AliasEvent, line: int, where: str) -> tuple[int, int]:
        if event.anchor in self.open_anchors:
            raise self.fail(line, where, f"the alias *{event.anchor} is used inside its own anchor")
        size, height = self.anchors.get(event.anchor, (1, 1))
        if len(self.stack) + height > MAX_DEPTH:
            raise self.fail(line, where, f"the alias *{event.anchor} nests deeper than {MAX_DEPTH} levels here")
        self.added += size - 1
        if self.added > ALIAS_BUDGET:
            raise self.fail(
                line,
                where,
                f"aliases expand to more than {ALIAS_BUDGET} nodes beyond those written "
                f"(*{event.anchor} alone is {size}): write the values out, or share less",
            )
        return size, height

    def grow(self, size: int, height: int) -> None:
        if self.stack:
            frame = self.stack[-1]
            frame.size += size
            frame.height = max(frame.height, height + 1)

    def end(self) -> None:
        frame = self.stack.pop()
        if frame.anchor:
            self.open_anchors.discard(frame.anchor)
            self.anchors[frame.anchor] = (frame.size, frame.height)
        self.grow(frame.size, frame.height)


# --- reading ----------------------------------------------------------------------------------------


def _decoded(raw: bytes, origin: str) -> str:
    if len(raw) > MAX_BYTES:
        raise ConfigYAMLError(f"{origin}: larger than the {MAX_BYTES // 1024} KiB a policy file may hold")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigYAMLError(f"{origin}:{line}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def loads(raw: bytes | str, origin: str) -> Document:
    """The one YAML document in `raw`, checked as the module says; ConfigYAMLError otherwise."""
    text = _decoded(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw, origin)
    checker = _Checker(origin)
    try:
        checker.run(text)
        data = yaml.load(text, Loader=_Core12Loader)  # noqa: S506 - a safe loader (SafeConstructor's)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"{origin}:{mark.line + 1}" if mark is not None else origin
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise ConfigYAMLError(f"{at}: not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigYAMLError(f"{origin}: not valid YAML: {exc}") from None
    return Document(data, checker.lines)
