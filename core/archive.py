"""Keep the evidence, then delete: what an archive holds, where each file goes, and how long it stays.

Pure functions (the worker does the reading and writing, `jobttl.worker.archiving`; the stores
are `jobttl.core.archivestore`). One folder per job, ``<namespace>/<kind>/<name>-<uid>/``:

- ``manifest.yaml``: the object as the API server returned it to the worker's last read,
  right before the DELETE (or before the pods stage);
- ``events.yaml``: its Events (``involvedObject.uid`` = the job's);
- ``logs/<pod>/<container>.log`` (and ``<container>.previous.log`` for a container that
  restarted): the last N KiB of each container's log;
- ``index.json``, written last: what is there, how big, what could not be kept and why.

The API has no "last N bytes" of a log (``limitBytes`` caps from the start), so the worker asks
for a bounded number of tail lines, capped with ``limitBytes`` at a few times N KiB, and trims
to the last N KiB at a line boundary; an answer cut by the cap means the lines are long, so it
asks again for fewer (`next_log_request`).

Objects may nest deeper than any encoder recurses (a list page read with ijson can hand the
worker a 1,500-deep object): subtrees deeper than `MAX_DEPTH` are replaced, iteratively, by a
note, and the index says how many were not kept, so encoding never fails the deletion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from jobttl.core import jsoncodec, shapes
from jobttl.core.identity import JobRef, check_name
from jobttl.core.policy import DEFAULT_LOG_KIB, Policy

MAX_DEPTH = 100  # PyYAML's representer recurses: about 350 levels exhaust Python's stack
TRUNCATED = "<jobttl: not kept, nested deeper than {depth} levels>"
LINES_PER_KIB = 64  # tail lines asked per KiB kept: enough for lines of 16 bytes on average
CAP_FACTOR = 4  # limitBytes = this many times what is kept, so one answer stays bounded
MAX_LOG_TRIES = 4
INDEX = "index.json"
MANIFEST = "manifest.yaml"
EVENTS = "events.yaml"
FORMAT = 1  # index.json's layout version


@dataclass(frozen=True)
class ArchivePlan:
    """What to keep of one job (the policy's effective `archive` values)."""

    manifest: bool = True
    events: bool = True
    logs: bool = True
    log_kib: int = DEFAULT_LOG_KIB
    required: bool = True
    source: str = "policy"  # which level enabled it, for the audit entry

    @property
    def log_bytes(self) -> int:
        return self.log_kib * 1024


def plan_for(obj: dict[str, Any], policy: Policy) -> ArchivePlan | None:
    """What to archive of this object, or None when the policy archives nothing of it."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    effective = policy.cleanup_effective(meta.get("namespace", ""), labels)
    enabled = effective.get("archive")
    if enabled is None or not enabled.value:
        return None

    def value(name: str, default: Any) -> Any:
        setting = effective.get(name)
        return default if setting is None else setting.value

    return ArchivePlan(value("archive_manifest", True), value("archive_events", True), value("archive_logs", True),
                       value("archive_log_kib", DEFAULT_LOG_KIB), value("archive_required", True), enabled.source)


# --- where things go -----------------------------------------------------------------------------

def folder(ref: JobRef) -> str:
    return f"{ref.namespace}/{ref.kind}/{ref.name}-{ref.uid}/"


def log_path(pod: str, container: str, previous: bool = False) -> str:
    check_name(pod, "pod name")
    check_name(container, "container name")
    return f"logs/{pod}/{container}{'.previous' if previous else ''}.log"


def split_folder(name: str) -> tuple[str, str] | None:
    """``<name>-<uid>`` → (name, uid); None if it is not one (a UID is 36 characters)."""
    if len(name) < 38 or name[-37] != "-":
        return None
    return name[:-37], name[-36:]


# --- logs ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LogRequest:
    tail_lines: int
    limit_bytes: int


def first_log_request(keep_bytes: int) -> LogRequest:
    return LogRequest(max(1, keep_bytes // 1024 * LINES_PER_KIB), keep_bytes * CAP_FACTOR)


def next_log_request(previous: LogRequest, answer_bytes: int) -> LogRequest | None:
    """None when the answer is complete; else fewer lines (the cap cut the answer: long lines)."""
    if answer_bytes < previous.limit_bytes or previous.tail_lines == 1:
        return None
    return LogRequest(max(1, previous.tail_lines // 8), previous.limit_bytes)


def trim_tail(body: bytes, keep: int) -> tuple[bytes, bool]:
    """The last `keep` bytes of a log, starting at a line (or at least a character) boundary."""
    if len(body) <= keep:
        return body, False
    tail = body[-keep:]
    newline = tail.find(b"\n")
    if 0 <= newline < len(tail) - 1:
        return tail[newline + 1:], True
    start = 0
    while start < len(tail) and tail[start] & 0xC0 == 0x80:  # not inside a UTF-8 character
        start += 1
    return tail[start:], True


# --- encoding what is kept -------------------------------------------------------------------------

def prune(value: Any, max_depth: int = MAX_DEPTH) -> tuple[Any, int]:
    """A copy of `value` with subtrees deeper than `max_depth` replaced by a note; how many were.

    Iterative, so that no depth of input can exhaust the stack."""
    note = TRUNCATED.format(depth=max_depth)
    replaced = 0

    def shallow(item: Any, depth: int) -> Any:
        nonlocal replaced
        if isinstance(item, (dict, list)) and depth >= max_depth:
            replaced += 1
            return note
        if isinstance(item, dict):
            copy: Any = {}
        elif isinstance(item, list):
            copy = []
        else:
            return item
        stack.append((item, copy, depth))
        return copy

    stack: list[tuple[Any, Any, int]] = []
    root = shallow(value, 0)
    while stack:
        source, target, depth = stack.pop()
        if isinstance(source, dict):
            for key, item in source.items():
                target[str(key)] = shallow(item, depth + 1)
        else:
            for item in source:
                target.append(shallow(item, depth + 1))
    return root, replaced


def to_yaml(value: Any, what: str) -> tuple[bytes, list[str]]:
    """YAML for a kept object, and what could not be kept of it (never raises)."""
    pruned, replaced = prune(value)
    unkept = [f"{what}: {replaced} parts nested deeper than {MAX_DEPTH} levels were not kept"] if replaced else []
    try:
        text = yaml.dump(pruned, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False,
                         width=4096)
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as exc:
        return f"# {what} could not be encoded\n".encode(), \
            unkept + [f"{what}: could not be encoded ({shapes.describe(exc)})"]
    return text.encode("utf-8", "replace"), unkept


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """The safe dumper (libyaml's when present): plain data only, never Python tags."""


def earlier_events(raw: bytes | None) -> list[dict[str, Any]]:
    """The Events an earlier stage's archive kept (none if unreadable)."""
    if not raw:
        return []
    try:
        events = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError):
        return []
    return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []


def merge_events(earlier: list[dict[str, Any]], current: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every Event once (by UID), oldest first: the earlier ones, then those not seen before."""
    uids = {(e.get("metadata") or {}).get("uid") for e in current if isinstance(e.get("metadata"), dict)}
    kept = [e for e in earlier if (e.get("metadata") or {}).get("uid") not in uids]
    return kept + list(current)


# --- the index ---------------------------------------------------------------------------------------

@dataclass
class Contents:
    """What one archive run gathered: files by path, log entries, and what was not kept."""

    files: dict[str, bytes] = field(default_factory=dict)
    logs: list[dict[str, Any]] = field(default_factory=list)
    unkept: list[str] = field(default_factory=list)

    def add_log(self, pod: str, container: str, previous: bool, body: bytes, truncated: bool) -> None:
        path = log_path(pod, container, previous)
        self.files[path] = body
        self.logs.append({"pod": pod, "container": container, "previous": previous, "path": path,
                          "bytes": len(body), "truncated": truncated})


def index(ref: JobRef, contents: Contents, archived_at: float, stage: str, plan: ArchivePlan,
          earlier: dict[str, Any] | None = None) -> bytes:
    """index.json: written last, so an archive with one is complete. An earlier index (the pods
    stage's) keeps its logs: their pods are gone by the time the job itself is archived."""
    logs = list(contents.logs)
    written = {entry["path"] for entry in logs}
    if earlier:
        logs += [e for e in earlier.get("logs") or [] if isinstance(e, dict) and e.get("path") not in written]
    files = {path: len(body) for path, body in contents.files.items()}
    if earlier:
        files = {**{k: v for k, v in (earlier.get("files") or {}).items() if isinstance(v, int)}, **files}
    document = {"format": FORMAT, **ref.as_dict(), "archivedAt": archived_at, "stage": stage,
                "logKiB": plan.log_kib, "files": files, "bytes": sum(files.values()), "logs": logs,
                "unkept": contents.unkept + ([u for u in earlier.get("unkept") or [] if isinstance(u, str)]
                                             if earlier else []),
                # One entry per stage: an archive written again (a retry, a changed object) replaces its own.
                "archives": [a for a in (earlier.get("archives") or [] if earlier else [])
                             if not (isinstance(a, dict) and a.get("stage") == stage)] + [{"stage": stage, "at": archived_at}]}
    return jsoncodec.dumps(document)


def read_index(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = jsoncodec.loads(raw)
    except jsoncodec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


def choose_logs(document: dict[str, Any], pod: str | None = None, container: str | None = None,
                previous: bool = False) -> list[dict[str, Any]]:
    """The archived logs matching the filters, in a stable order."""
    logs = [e for e in document.get("logs") or [] if isinstance(e, dict)]
    chosen = [e for e in logs if (pod is None or e.get("pod") == pod) and (container is None or e.get("container") ==
                                                                             container) and bool(e.get("previous")) == previous]
    return sorted(chosen, key=lambda e: (str(e.get("pod")), str(e.get("container"))))


# --- retention ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stored:
    """One archive in a store, as retention sees it."""

    folder: str
    archived_at: float
    bytes: int


def expired(stored: list[Stored], now: float, retention: int | None, max_bytes: int | None) -> list[str]:
    """The folders to remove: older than the retention, then the oldest until the total fits."""
    keep = sorted(stored, key=lambda s: s.archived_at)
    remove = []
    if retention is not None:
        remove = [s for s in keep if s.archived_at < now - retention]
        keep = [s for s in keep if s.archived_at >= now - retention]
    if max_bytes is not None:
        total = sum(s.bytes for s in keep)
        while keep and total > max_bytes:
            oldest = keep.pop(0)
            total -= oldest.bytes
            remove.append(oldest)
    return [s.folder for s in remove]
