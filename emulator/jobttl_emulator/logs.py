"""Pod logs, supplied by tests since there is no kubelet.

``GET /api/v1/namespaces/<ns>/pods/<name>/log`` is answered the way the
apiserver and kubelet answer it (``pkg/registry/core/pod`` ``LogLocation``,
kubelet ``GetKubeletContainerLogs``): the container must be named when the pod
has several, ``previous=true`` reads the previous instance's log (400
``previous terminated container "c" in pod "p" not found`` when there is none),
``tailLines`` keeps the last lines, ``limitBytes`` then caps the bytes from the
start of what is left (timestamps included), and ``timestamps=true`` prefixes each
line with the RFC 3339 time it was logged (here: when the test supplied it).
``follow`` and ``sinceSeconds``/``sinceTime`` are not emulated (follow returns what
there is). Logs go away with their pod.

The lines ``tailLines`` counts are the log file's entries: the container runtime
writes a line longer than its maximum (containerd's ``max_container_log_line_size``,
16 KiB by default) as several partial entries, so the last N "lines" of a log with
long lines hold less than its last N lines. Lines end at ``\n`` only.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone


def _now_nano() -> str:
    """RFC 3339 with nanoseconds, as the container runtime writes log timestamps."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond:06d}000Z"


MAX_LINE_BYTES = 16 * 1024  # containerd's max_container_log_line_size: longer lines are split

Entry = tuple[str, bytes, bool]  # (timestamp, bytes, whether a line begins there) per log file entry


def entries(text: str, stamp: str) -> list[Entry]:
    """The log file's entries for ``text``, as the runtime writes them."""
    data = text.encode()
    found: list[Entry] = []
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end + 1
        found += [
            (stamp, data[at : min(at + MAX_LINE_BYTES, end)], at == start) for at in range(start, end, MAX_LINE_BYTES)
        ]
        start = end
    return found


class PodLogs:
    """Log entries by (namespace, pod) then (container, previous)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, str], dict[tuple[str, bool], list[Entry]]] = {}

    def set(self, namespace: str, pod: str, container: str, text: str, previous: bool = False) -> None:
        """Replace a container instance's log with ``text``."""
        logged = entries(text, _now_nano())
        with self._lock:
            self._logs.setdefault((namespace, pod), {})[(container, previous)] = logged

    def get(self, namespace: str, pod: str, container: str, previous: bool) -> list[Entry] | None:
        with self._lock:
            lines = self._logs.get((namespace, pod), {}).get((container, previous))
            return None if lines is None else list(lines)

    def forget(self, namespace: str, pod: str) -> None:
        with self._lock:
            self._logs.pop((namespace, pod), None)

    def clear(self) -> None:
        with self._lock:
            self._logs.clear()


def render(logged: list[Entry], tail_lines: int | None, limit_bytes: int | None, timestamps: bool) -> bytes:
    """What the kubelet returns: the last ``tail_lines`` entries, then at most ``limit_bytes`` bytes
    (a line split in entries has one timestamp, at its start)."""
    if tail_lines is not None:
        logged = logged[-tail_lines:] if tail_lines else []
    body = b"".join(stamp.encode() + b" " + chunk if timestamps and first else chunk for stamp, chunk, first in logged)
    return body if limit_bytes is None else body[:limit_bytes]
