"""The public JSON shapes of what jobttl keeps: typed values, and every time in RFC 3339 beside its epoch.

Redis keeps audit entries and history cards as flat strings (a stream entry holds nothing
else): ``"ttl": "20"``, ``"dryRun": "false"``, ``"rules": "[]"``. `typed` gives each field
its type back, from the one table `FIELDS`; fields it does not name are strings (the job's
identity, reasons, details, errors). `with_times` puts an RFC 3339 UTC string beside every
time given in Unix seconds (``"due": 1796121233`` gets ``"dueTime": "2026-12-01T10:33:53Z"``),
the suffix Kubernetes gives its own times (``completionTime``). The CLI's ``--json`` and the
sink's read API print exactly these shapes; `jobttl.sink.openapi` declares them from `FIELDS`
and `TIME_FIELDS`, so the document and the answers cannot drift apart.
"""

from __future__ import annotations

import builtins
import re
from datetime import datetime, timezone
from typing import Any

from jobttl.core.domain.wire import jsoncodec

# The JSON Schema type of every audit entry field that is not a string. One table: `typed`
# converts by it, the OpenAPI document declares it, so a field added to an entry with a
# type of its own is added here (else it stays the string Redis holds, and says so).
FIELDS: dict[str, str] = {
    # Times, in Unix seconds: whole for due times, fractional for measured moments.
    "due": "integer",
    "newDue": "integer",
    "previousDue": "integer",
    "finishedAt": "integer",
    "wouldDeleteAt": "integer",
    "started_at": "number",
    "saidAt": "integer",
    "until": "integer",  # of a `cancel-undone` / `postpone-undone` entry: what was taken back
    # Durations in seconds: whole for TTLs and waits, fractional for measurements.
    "ttl": "integer",
    "stuckFor": "integer",
    "retention": "integer",
    "lateness": "number",
    "goneAfter": "number",
    "duration": "number",
    # Counts and sizes.
    "retriesLeft": "integer",
    "bytes": "integer",
    "files": "integer",
    "count": "integer",
    "seen": "integer",
    "maxDeletions": "integer",
    "maxBytes": "integer",
    "maxShare": "number",
    # ... of a resync's report (the `resync` entry).
    "scheduled": "integer",
    "moved": "integer",
    "unchanged": "integer",
    "cancelled": "integer",
    "queued_now": "integer",
    "held": "integer",
    "rejected": "integer",
    "first_run_held": "integer",
    "firstRun": "integer",  # of a `deletions-held` entry: how many await the first-run review
    "dryRun": "boolean",
    "required": "boolean",
    "wasStuck": "boolean",
    # Lists of strings: policy rules, finalizers, pods, what was not archived, a resync's problems.
    "rules": "array",
    "finalizers": "array",
    "dependants": "array",
    "pods": "array",
    "unkept": "array",
    "rejections": "array",
    "missing_kinds": "array",
    "errors": "array",
    "install": "object",  # the install record a resync's first-run review went by
}

# Fields that hold a time in Unix seconds, wherever they appear (entries, pending deletions,
# tombstones, failures, workers): each gets `<field>Time` beside it.
TIME_FIELDS = (
    "at",
    "due",
    "newDue",
    "previousDue",
    "finishedAt",
    "wouldDeleteAt",
    "scheduledAt",
    "deletedAt",
    "requestedAt",
    "failedAt",
    "lastHeartbeat",
    "started_at",
    "saidAt",
    "until",
)
TIME_SUFFIX = "Time"
# Where a field holding a value of the wrong type goes (a 0.1 entry, a hand-written one):
# kept as written, never passed off as its declared type.
UNPARSED = "unparsed"

_INTEGER = re.compile(r"-?\d+")


def typed(fields: dict[str, str]) -> dict[str, Any]:
    """One stored entry (or history card decision) with its values typed by `FIELDS`."""
    out: dict[str, Any] = {}
    unparsed: dict[str, str] = {}
    for key, raw in fields.items():
        kind = FIELDS.get(key)
        if kind is None or not isinstance(raw, str):
            out[key] = raw
            continue
        value = _parse(kind, raw)
        if value is None:
            unparsed[key] = raw
        else:
            out[key] = value
    if unparsed:
        out[UNPARSED] = unparsed
    return out


def _parse(kind: str, raw: str) -> Any:
    """`raw` as a value of JSON Schema type `kind`, or None when it is not one."""
    if kind == "integer":
        return int(raw) if _INTEGER.fullmatch(raw.strip()) else _whole(raw)
    if kind == "number":
        try:
            number = float(raw)
        except ValueError:
            return None
        return number if number == number and abs(number) != float("inf") else None  # no NaN, no infinity in JSON
    if kind == "boolean":
        return {"true": True, "false": False, "1": True, "0": False}.get(raw.strip().lower())
    try:
        value = jsoncodec.loads(raw)
    except jsoncodec.DecodeError:
        return None
    if kind == "object":
        return value if isinstance(value, dict) else None
    if isinstance(value, dict) and not value:
        return []  # Lua's cjson writes an empty list as {}
    return [str(v) for v in value] if isinstance(value, list) else None


def _whole(raw: str) -> int | None:
    """`12.0` is the integer 12 (an older writer's float); `12.5` is not an integer."""
    try:
        number = float(raw)
    except ValueError:
        return None
    return int(number) if number.is_integer() else None


def rfc3339(epoch: float) -> str | None:
    """Unix seconds as RFC 3339 UTC: whole seconds as such, fractions to the millisecond; None
    for what no date can say (out of datetime's range)."""
    try:
        when = datetime.fromtimestamp(epoch, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    if float(epoch).is_integer():
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def with_times(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with `<field>Time`, RFC 3339 UTC, beside each time field holding a number; in order,
    each right after its epoch."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        out[key] = value
        if key in TIME_FIELDS and isinstance(value, (int, float)) and not isinstance(value, bool):
            text = rfc3339(value)
            if text is not None:
                out[key + TIME_SUFFIX] = text
    return out


def entry(fields: dict[str, str], **known: Any) -> dict[str, Any]:
    """The public shape of a stored entry: `known` (already typed: id, at) first, then its fields
    typed, then the times beside their epochs."""
    return with_times({**known, **typed(fields)})


# Errors, as operators read them: the message, not the Python class that carried it (the logs
# keep that, and the traceback). Only what is most likely a bug in jobttl (a KeyError, a
# TypeError, ...), whose message alone says little, says so in words: "unexpected key error: 'x'".
_BUGS = (LookupError, TypeError, AttributeError, NameError, AssertionError, ArithmeticError, RecursionError)
_BUG_NAMES = frozenset(
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, _BUGS)
)
_QUALIFIED = re.compile(r"^(?P<module>(?:[A-Za-z_]\w*\.)*)(?P<name>[A-Z]\w*)(?:: |$)")
_BUILTIN_ERROR = re.compile(r"\w*(Error|Exception|Exit|Interrupt|Warning)")


def describe(exc: BaseException) -> str:
    """`exc` as a message for operators."""
    kind = type(exc)
    bug = issubclass(kind, _BUGS) and not kind.__module__.startswith("jobttl.")
    return _message(bug, kind.__name__, str(exc))


def plain_error(line: str) -> str:
    """An exception as Python prints it last in a traceback (``jobttl.core.kube.client.PermanentApiError:
    403 from ...``, what RQ keeps of a failed job) as `describe` says it; other lines as they are."""
    line = line.strip()
    match = _QUALIFIED.match(line)
    if match is None:
        return line
    module, name = match.group("module"), match.group("name")
    if not module and not _BUILTIN_ERROR.fullmatch(name):
        return line  # "Forbidden: ..." is a message's own first word, not a class
    return _message(not module and name in _BUG_NAMES, name, line[match.end() :].strip())


def _message(bug: bool, name: str, text: str) -> str:
    if not bug:
        return text or _words(name)
    return f"unexpected {_words(name)}: {text}" if text else f"unexpected {_words(name)}"


def _words(name: str) -> str:
    """`PermanentApiError` as `permanent api error`: what the class says when the message is empty."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).lower()
