"""Pod logs, supplied by tests since there is no kubelet.

``GET /api/v1/namespaces/<ns>/pods/<name>/log`` is answered the way the
apiserver and kubelet answer it (``pkg/registry/core/pod`` ``LogLocation``,
kubelet ``GetKubeletContainerLogs``): the container must be named when the pod
has several, ``previous=true`` reads the previous instance's log (400
``previous terminated container "c" in pod "p" not found`` when there is none),
``tailLines`` keeps the last lines, ``limitBytes`` then caps the bytes from the
start of what is left, and ``timestamps=true`` prefixes each line with the
RFC 3339 time it was logged (here: when the test supplied it). ``follow`` and
``sinceSeconds``/``sinceTime`` are not emulated (follow returns what there is).
Logs go away with their pod.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone


def _now_nano() -> str:
    """RFC 3339 with nanoseconds, as the container runtime writes log timestamps."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond:06d}000Z"


class PodLogs:
    """Log lines by (namespace, pod) then (container, previous)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, str], dict[tuple[str, bool], list[tuple[str, str]]]] = {}

    def set(self, namespace: str, pod: str, container: str, text: str, previous: bool = False) -> None:
        """Replace a container instance's log with ``text``."""
        stamp = _now_nano()
        lines = [(stamp, line) for line in text.splitlines(keepends=True)]
        with self._lock:
            self._logs.setdefault((namespace, pod), {})[(container, previous)] = lines

    def get(self, namespace: str, pod: str, container: str, previous: bool) -> list[tuple[str, str]] | None:
        with self._lock:
            lines = self._logs.get((namespace, pod), {}).get((container, previous))
            return None if lines is None else list(lines)

    def forget(self, namespace: str, pod: str) -> None:
        with self._lock:
            self._logs.pop((namespace, pod), None)

    def clear(self) -> None:
        with self._lock:
            self._logs.clear()


def render(lines: list[tuple[str, str]], tail_lines: int | None, limit_bytes: int | None, timestamps: bool) -> bytes:
    """What the kubelet returns: the last ``tail_lines`` lines, then at most ``limit_bytes`` bytes."""
    if tail_lines is not None:
        lines = lines[-tail_lines:] if tail_lines else []
    body = "".join(f"{stamp} {line}" if timestamps else line for stamp, line in lines).encode()
    return body if limit_bytes is None else body[:limit_bytes]
