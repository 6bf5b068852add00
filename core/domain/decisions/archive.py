"""Keep the evidence, then delete: what an archive holds, where each file goes, and how long it stays.

Pure functions (the worker does the reading and writing, `jobttl.core.services.archiving`; the stores
are `jobttl.core.kube.archivestore`). One folder per job, ``<namespace>/<kind>/<name>-<uid>/``:

- ``manifest.yaml``: the object as the API server returned it to the worker's last read,
  right before the DELETE (or before the pods stage);
- ``events.yaml``: its Events (``involvedObject.uid`` = the job's);
- ``logs/<pod>/<container>.log`` (and ``<container>.previous.log`` for a container that
  restarted): the last N KiB of each container's log;
- ``index.json``, written last: what is there, how big, what could not be kept and why.

What is kept of a log longer than N KiB (K = N x 1024 bytes) is a suffix of it that starts at
the beginning of the line holding its K-th byte from the end: the last K bytes and the rest of
that line, so at least K bytes of whole lines. A line that began more than K bytes before that
point is cut instead: the kept part then starts exactly K bytes from the end (or up to 3 bytes
earlier, at the start of a UTF-8 character). Either way between K and 2K bytes, never fewer than
K; a log of K bytes or less is kept whole (`trim_tail`).

The API has no "last N bytes" of a log: ``tailLines`` selects the last lines, then ``limitBytes``
caps the bytes from the start of those (the kubelet's ``ReadLogs``). So the worker searches for a
number of lines whose bytes are at least K and below the cap (4K) (`next_log_request`): the first
request asks for K lines (no line is shorter than a byte, so an uncut answer shorter than K is the
whole log); each cut answer, or one too short, sizes the next from the bytes per line it showed,
within the bounds the earlier answers set. When no number of lines fits under the cap (a line
longer than it) or the estimates keep missing, one last request streams the smallest tail known
to be long enough, without a cap. Every answer is read as a stream of which only the last 2K+1
bytes are held (`LogTail`): memory stays bounded whatever the lines' length.

Objects may nest deeper than any encoder recurses (a list page read with ijson can hand the
worker a 1,500-deep object): subtrees deeper than `MAX_DEPTH` are replaced, iteratively, by a
note, and the index says how many were not kept, so encoding never fails the deletion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import yaml

from jobttl.core.domain.wire import jsoncodec, shapes
from jobttl.core.domain.wire.identity import JobRef, check_name
from jobttl.core.domain.rules.policy import DEFAULT_LOG_KIB, Policy

MAX_DEPTH = 100  # PyYAML's representer recurses: about 350 levels exhaust Python's stack
TRUNCATED = "<jobttl: not kept, nested deeper than {depth} levels>"
CAP_FACTOR = 4  # limitBytes = this many times what is kept, so one answer stays bounded
AIM_FACTOR = 2  # a sized request aims at this many times what is kept: halfway (geometrically) to the cap
MAX_LOG_TRIES = 4  # requests under the cap; then one streams the tail without it
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

    return ArchivePlan(
        value("archive_manifest", True),
        value("archive_events", True),
        value("archive_logs", True),
        value("archive_log_kib", DEFAULT_LOG_KIB),
        value("archive_required", True),
        enabled.source,
    )


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
    """One read of a log's tail: the last `tail_lines` lines, at most `limit_bytes` of them (None:
    no cap, the last resort), and what the answers before it showed: the last `more_than` lines
    hold fewer bytes than are kept, the last `fewer_than` lines more than the cap."""

    tail_lines: int
    limit_bytes: int | None
    more_than: int = 0
    fewer_than: int | None = None
    tries: int = 1


def first_log_request(keep_bytes: int) -> LogRequest:
    return LogRequest(keep_bytes, keep_bytes * CAP_FACTOR)


def next_log_request(previous: LogRequest, keep_bytes: int, answer_bytes: int, answer_lines: int) -> LogRequest | None:
    """The next read, or None when the answer to `previous` (its size and newlines) holds what is kept."""
    if previous.limit_bytes is None:
        return None  # not capped: all of the last `fewer_than` lines, at least the cap's worth
    cut = answer_bytes >= previous.limit_bytes
    # Fewer bytes than lines asked for is fewer lines than asked for: the whole log.
    if not cut and (answer_bytes >= keep_bytes or answer_bytes < previous.tail_lines):
        return None
    if cut:
        more_than, fewer_than = previous.more_than, previous.tail_lines
    else:
        more_than, fewer_than = previous.tail_lines, previous.fewer_than
    if fewer_than is not None and (fewer_than - more_than <= 1 or previous.tries >= MAX_LOG_TRIES):
        # No count of lines fits under the cap (the line after the last `more_than` is longer than
        # it), or the lines vary too much to estimate: stream the last `fewer_than` lines uncapped.
        return LogRequest(fewer_than, None, more_than, fewer_than, previous.tries + 1)
    # Bytes per line as this answer showed them (a cut answer of no whole line: its first line
    # alone is at least the cap), then as many lines as should make AIM_FACTOR x what is kept.
    per_line = answer_bytes / max(answer_lines, 1)
    lines = math.ceil(AIM_FACTOR * keep_bytes / per_line)
    if not (more_than < lines and (fewer_than is None or lines < fewer_than)):
        # The estimate contradicts what the answers showed: halve the interval instead.
        lines = more_than * 2 if fewer_than is None else (more_than + fewer_than) // 2
    return LogRequest(lines, previous.limit_bytes, more_than, fewer_than, previous.tries + 1)


def whole_log(request: LogRequest, answer_bytes: int, answer_lines: int) -> bool:
    """Whether the answer to `request` is the whole log (fewer lines than asked for): proven by
    fewer bytes than lines asked for; else its newlines tell, unless an answer before it came cut,
    which showed a log longer than this one (or, uncapped, the same tail: no count of its lines
    tells, since the runtime writes a line longer than 16 KiB as several entries of the file)."""
    if request.limit_bytes is not None and answer_bytes >= request.limit_bytes:
        return False
    return answer_bytes < request.tail_lines or (request.fewer_than is None and answer_lines < request.tail_lines)


class LogTail:
    """One answer read as a stream: its size, its newlines, and only its last `capacity` bytes."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.bytes = 0
        self.newlines = 0
        self._last = bytearray()

    @classmethod
    def for_keeping(cls, keep_bytes: int) -> LogTail:
        """Enough for `trim_tail`: what it keeps is at most 2K bytes, and it looks one byte before that."""
        return cls(2 * keep_bytes + 1)

    def feed(self, chunk: bytes) -> None:
        self.bytes += len(chunk)
        self.newlines += chunk.count(b"\n")
        self._last += chunk[-self.capacity :]
        if len(self._last) > self.capacity:
            del self._last[: len(self._last) - self.capacity]

    @property
    def last(self) -> bytes:
        return bytes(self._last)

    @property
    def complete(self) -> bool:
        """Whether `last` holds the whole answer (so it begins where a line begins)."""
        return len(self._last) == self.bytes

    @property
    def lines(self) -> int:
        """Lines in the answer: its newlines, and a last line without one."""
        return self.newlines + (1 if self._last and not self._last.endswith(b"\n") else 0)


def trim_tail(body: bytes, keep: int, starts_line: bool = True) -> bytes:
    """What is kept of a log that ends with `body` (`starts_line`: a line begins at `body[0]`, as
    at the start of a log): all of it up to `keep` bytes; else from the start of the line holding
    its `keep`-th byte from the end, unless that line began more than `keep` bytes earlier: then
    from exactly `keep` bytes before the end, moved back to the start of a UTF-8 character."""
    if len(body) <= keep:
        return body
    point = len(body) - keep
    line_start = body.rfind(b"\n", 0, point) + 1
    if (line_start > 0 or starts_line) and point - line_start <= keep:
        return body[line_start:]
    start = point
    while start > 0 and point - start < 3 and body[start] & 0xC0 == 0x80:  # inside a UTF-8 character
        start -= 1
    return body[start:]


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
        text = yaml.dump(
            pruned, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=4096
        )
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as exc:
        return f"# {what} could not be encoded\n".encode(), unkept + [
            f"{what}: could not be encoded ({shapes.describe(exc)})"
        ]
    return text.encode("utf-8", "replace"), unkept


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """The safe dumper (libyaml's when present): plain data only, never Python tags."""


def earlier_events(raw: bytes | None) -> list[dict[str, Any]]:
    """The Events an earlier stage's archive kept (none if unreadable)."""
    if not raw:
        return []
    try:
        events = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
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
        self.logs.append(
            {
                "pod": pod,
                "container": container,
                "previous": previous,
                "path": path,
                "bytes": len(body),
                "truncated": truncated,
            }
        )


def index(
    ref: JobRef,
    contents: Contents,
    archived_at: float,
    stage: str,
    plan: ArchivePlan,
    earlier: dict[str, Any] | None = None,
) -> bytes:
    """index.json: written last, so an archive with one is complete. An earlier index (the pods
    stage's) keeps its logs: their pods are gone by the time the job itself is archived."""
    earlier = earlier or {}
    files = _files(contents, earlier)
    document = {
        "format": FORMAT,
        **ref.as_dict(),
        "archivedAt": archived_at,
        "stage": stage,
        "logKiB": plan.log_kib,
        "files": files,
        "bytes": sum(files.values()),
        "logs": _logs(contents, earlier),
        "unkept": contents.unkept + [u for u in earlier.get("unkept") or [] if isinstance(u, str)],
        "archives": _other_stages(earlier, stage) + [{"stage": stage, "at": archived_at}],
    }
    return jsoncodec.dumps(document)


# An earlier index is read back from the archive store, which is not trusted: what is not shaped as
# jobttl writes it is dropped, never copied into the new index.


def _logs(contents: Contents, earlier: dict[str, Any]) -> list[dict[str, Any]]:
    """This run's log entries, then the earlier index's for files this run did not write again."""
    written = {entry["path"] for entry in contents.logs}
    return list(contents.logs) + [
        e for e in earlier.get("logs") or [] if isinstance(e, dict) and e.get("path") not in written
    ]


def _files(contents: Contents, earlier: dict[str, Any]) -> dict[str, int]:
    """Sizes by path: the earlier index's, overwritten by this run's."""
    files = {path: len(body) for path, body in contents.files.items()}
    return {**{k: v for k, v in (earlier.get("files") or {}).items() if isinstance(v, int)}, **files}


def _other_stages(earlier: dict[str, Any], stage: str) -> list[Any]:
    """The earlier index's archives of other stages: one entry per stage, so an archive written again
    (a retry, a changed object) replaces its own."""
    return [a for a in earlier.get("archives") or [] if not (isinstance(a, dict) and a.get("stage") == stage)]


def read_index(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = jsoncodec.loads(raw)
    except jsoncodec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


def choose_logs(
    document: dict[str, Any], pod: str | None = None, container: str | None = None, previous: bool = False
) -> list[dict[str, Any]]:
    """The archived logs matching the filters, in a stable order."""
    logs = [e for e in document.get("logs") or [] if isinstance(e, dict)]
    chosen = [
        e
        for e in logs
        if (pod is None or e.get("pod") == pod)
        and (container is None or e.get("container") == container)
        and bool(e.get("previous")) == previous
    ]
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
