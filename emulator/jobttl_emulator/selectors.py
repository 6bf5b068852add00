"""Label and field selectors, parsed the way k8s.io/apimachinery does.

Label selectors (``labels.Parse``): comma-separated requirements, all of which
must hold: ``key``, ``!key``, ``key=value`` / ``key==value``, ``key!=value``,
``key in (a,b)``, ``key notin (a,b)``, ``key>N`` / ``key<N``. As in Kubernetes,
``!=`` and ``notin`` also match objects that lack the label, and an empty
selector matches everything.

Field selectors (``fields.ParseSelector``): comma-separated ``field=value``,
``field==value`` or ``field!=value`` terms, with ``\\``, ``\\,`` and ``\\=``
escapes in values. Custom resources only support ``metadata.name`` and
``metadata.namespace``; anything else is rejected with the API server's
message.

Both raise :class:`SelectorError`; the server turns it into a 400 BadRequest.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


class SelectorError(ValueError):
    """A selector that the API server would reject with 400 BadRequest."""


def label_key_error(key: str) -> str | None:
    """Why ``key`` is not a valid label key (a qualified name), or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "prefix part must be non-empty"
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix)):
        return (
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
        )
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME_RE.match(name):
        return _NAME_MSG
    return None


def label_value_error(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _VALUE_RE.match(value):
        return _VALUE_MSG
    return None


# ---------------------------------------------------------------------------
# Label selectors

_SPECIAL = "=!(),<>"
_OPERATORS = ("!=", "==", "=", "!", "(", ")", ",", "<", ">")


def _tokenize(text: str) -> list[str]:
    """Split into identifiers and the special symbols of the labels lexer."""
    tokens: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in _SPECIAL:
            op = next(op for op in _OPERATORS if text.startswith(op, i))
            tokens.append(op)
            i += len(op)
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            tokens.append(text[i:j])
            i = j
    return tokens


def _is_identifier(token: str | None) -> bool:
    return token is not None and token[0] not in _SPECIAL


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # exists, !, =, !=, in, notin, gt, lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        try:
            actual = int(labels[self.key])
        except ValueError:
            return False
        bound = int(self.values[0])
        return actual > bound if self.op == "gt" else actual < bound


class LabelSelector:
    """A parsed label selector; ``matches(labels)`` applies it."""

    def __init__(self, text: str = "") -> None:
        self._requirements = _LabelParser(text).parse() if text.strip() else []

    @property
    def empty(self) -> bool:
        return not self._requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self._requirements)


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.pos = 0

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _next(self) -> str | None:
        token = self._peek()
        self.pos += 1
        return token

    @staticmethod
    def _fail(found: str | None, expected: str) -> SelectorError:
        return SelectorError(f"unable to parse requirement: found '{found or ''}', expected: {expected}")

    def parse(self) -> list[_Requirement]:
        requirements = [self._requirement()]
        while True:
            token = self._next()
            if token is None:
                return requirements
            if token != ",":
                raise self._fail(token, "',' or 'end of string'")
            requirements.append(self._requirement())

    def _requirement(self) -> _Requirement:
        negated = self._peek() == "!"
        if negated:
            self._next()
        key = self._next()
        if not _is_identifier(key):
            raise self._fail(key, "identifier")
        if (problem := label_key_error(key)) is not None:
            raise SelectorError(f"unable to parse requirement: key: Invalid value: {key!r}: {problem}")
        if negated or self._peek() in (None, ","):
            return _Requirement(key, "!" if negated else "exists")
        token = self._next()
        if token in ("=", "=="):
            op = "="
        elif token in ("!=", "in", "notin"):
            op = token
        elif token in (">", "<"):
            op = "gt" if token == ">" else "lt"
        else:
            raise self._fail(token, "in, notin, =, ==, !=, gt, lt")
        values = self._set() if op in ("in", "notin") else (self._exact_value(),)
        if op in ("gt", "lt") and not re.fullmatch(r"-?\d+", values[0]):
            raise SelectorError(
                f"unable to parse requirement: values[0]: Invalid value: {values[0]!r}: "
                "for 'Gt', 'Lt' operators, the value must be an integer"
            )
        for value in values:
            if op not in ("gt", "lt") and (problem := label_value_error(value)) is not None:
                raise SelectorError(
                    f"unable to parse requirement: values[0][{key}]: Invalid value: {value!r}: {problem}"
                )
        return _Requirement(key, op, values)

    def _exact_value(self) -> str:
        token = self._peek()
        if token is None or token == ",":
            return ""  # `key=` selects an empty value
        if not _is_identifier(token):
            raise self._fail(token, "identifier")
        self.pos += 1
        return token

    def _set(self) -> tuple[str, ...]:
        token = self._next()
        if token != "(":
            raise self._fail(token, "'('")
        values: list[str] = []
        expect_value = True
        while True:
            token = self._next()
            if token == ")":
                if expect_value and values:
                    values.append("")  # "(a,)" has an empty second value
                break
            if token == ",":
                if expect_value:
                    values.append("")
                expect_value = True
            elif _is_identifier(token) and expect_value:
                values.append(token)
                expect_value = False
            else:
                raise self._fail(token, "',', ')' or identifier")
        if not values:
            raise SelectorError("unable to parse requirement: for 'in', 'notin' operators, values set can't be empty")
        return tuple(values)


# ---------------------------------------------------------------------------
# Field selectors


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, i = [], [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if text[i] == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(text[i])
        i += 1
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence in {value!r}")
            out.append(value[i + 1])
            i += 2
            continue
        if ch in ",=":
            raise SelectorError(f"invalid field selector: unescaped {ch!r} in value {value!r}")
        out.append(ch)
        i += 1
    return "".join(out)


class FieldSelector:
    """A parsed field selector over a fixed set of supported fields."""

    def __init__(
        self,
        text: str = "",
        supported: Collection[str] = ("metadata.name", "metadata.namespace"),
        builtin: bool = False,
    ) -> None:
        """``builtin``: word unknown fields as built-in kinds' field label conversion does."""
        self._terms: list[tuple[str, str, str]] = []
        for term in _split_unescaped(text, ",") if text.strip() else []:
            self._terms.append(self._parse_term(term, supported, builtin))

    @staticmethod
    def _parse_term(term: str, supported: Collection[str], builtin: bool) -> tuple[str, str, str]:
        i = 0
        while i < len(term):
            if term[i] == "\\":
                i += 2
                continue
            for op in ("!=", "==", "="):
                if term.startswith(op, i):
                    field, value = term[:i].strip(), _unescape(term[i + len(op) :])
                    if field not in supported and builtin:
                        raise SelectorError(f"field label not supported: {field}")
                    if field not in supported:
                        quoted = ", ".join(f'"{f}"' for f in supported)
                        raise SelectorError(f'"{field}" is not a known field selector: only {quoted}')
                    return field, "!=" if op == "!=" else "=", value
            i += 1
        raise SelectorError(f"invalid selector: '{term}'; can't understand '{term}'")

    @property
    def empty(self) -> bool:
        return not self._terms

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all((fields.get(f, "") == v) == (op == "=") for f, op, v in self._terms)
