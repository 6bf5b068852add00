"""Where a process's time goes: py-spy samples it while a row's load runs (``--profile``).

py-spy (bench/requirements.txt) samples the process from outside, without changing it,
every thread, idle or not. The raw stacks (PREFIX.raw) are summed into PREFIX.txt: first
where the threads were (waiting for Redis, for the API server, idle, or computing), then,
of the samples that were computing, each function's *self* share (on top of the stack) and
*inclusive* share (anywhere on the stack).

    python -m bench.profile PREFIX.raw     (summarize again)
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

RATE = 100  # samples per second
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>.*?)(?::\d+)?\)$")


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


# A checkout's folders as the installed package names them (pyproject.toml's package-dir):
# worker/runner.py runs as jobttl/worker/runner.py, so profiles read the same from either.
_PACKAGE_FOLDERS = frozenset({"core", "sink", "worker", "watcher", "notifier", "console"})


def _short(path: str) -> str:
    for marker in ("/site-packages/", "/wt-bench/", "/lib/python3."):
        if marker in path:
            tail = path.rsplit(marker, 1)[1]
            if marker == "/lib/python3.":
                return tail.split("/", 1)[1]
            if marker == "/wt-bench/" and tail.split("/", 1)[0] in _PACKAGE_FOLDERS:
                return f"jobttl/{tail}"
            return tail
    return path


# Leaves that mean "waiting", not computing: py-spy samples every thread, busy or not.
WAITING = {
    "redis/_parsers/socket.py:SocketBuffer._read_from_socket": "waiting for a Redis reply",
    # hiredis: a blocking recv() for a reply, and a PubSub thread's wait for a message
    "redis/_parsers/hiredis.py:_HiredisParser.read_from_socket": "waiting for a Redis reply",
    "redis/_parsers/hiredis.py:_socket_can_read": "idle (a Redis PubSub thread waiting for a message)",
    "socket.py:SocketIO.readinto": "waiting for an HTTP answer (API server)",
    "threading.py:Condition.wait": "idle (threads waiting for work)",
    "waitress/wasyncore.py:poll2": "idle (waitress's event loop)",
    "waitress/trigger.py:trigger._physical_pull": "idle (waitress's event loop)",
    "threading.py:Event.wait": "idle (threads waiting for work)",
    "threading.py:Thread._wait_for_tstate_lock": "idle (threads waiting for work)",
    "queue.py:Queue.get": "idle (threads waiting for work)",
    "selectors.py:PollSelector.select": "idle (an event loop)",
    "selectors.py:EpollSelector.select": "idle (an event loop)",
    "socketserver.py:BaseServer.serve_forever": "idle (an event loop)",
    "rq/worker/base.py:BaseWorker.dequeue_job_and_maintain_ttl": "idle (RQ waiting for a job)",
    "rq/queue.py:Queue.dequeue_any": "idle (RQ waiting for a job)",
    "time.sleep": "idle (sleeping)",
    "rq/scheduler.py:RQScheduler.work": "idle (RQ's scheduler child, sleeping between passes)",
    "jobttl/worker/runner.py:JobttlScheduler.work": "idle (RQ's scheduler child, sleeping between passes)",
    "multiprocessing/popen_fork.py:Popen.poll": "idle (waiting for RQ's scheduler child)",
}


def _stacks(raw: Path):
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for frame in stack.split(";"):
            if frame.startswith("process "):  # --subprocesses: the process is the root frame
                continue
            match = _FRAME.match(frame)
            frames.append(f"{_short(match['path'])}:{match['function']}" if match else frame)
        if frames:
            yield frames, int(count)


def _top(title: str, counts: Counter, total: int, top: int) -> list[str]:
    return ["", title] + [f"  {100 * n / total:5.1f}%  {name}" for name, n in counts.most_common(top)]


def summarize(raw: Path, top: int = 30) -> str:
    """Shares of all samples (every thread, waiting or not), then of the samples that were computing."""
    leaves: Counter = Counter()
    self_time: Counter = Counter()
    inclusive: Counter = Counter()
    total = busy = 0
    for frames, n in _stacks(raw):
        total += n
        leaves[WAITING.get(frames[-1], "computing (or in a system call)")] += n
        if frames[-1] in WAITING:
            continue
        busy += n
        self_time[frames[-1]] += n
        for name in set(frames):
            inclusive[name] += n
    if not total:
        return "no samples\n"
    lines = [f"{total} samples of every thread (py-spy, {RATE} Hz, --idle)"]
    lines += _top("where the threads were:", leaves, total, top)
    lines += ["", f"{busy} samples computing; shares of those:"]
    lines += _top(f"top {top} by self time (on top of the stack):", self_time, busy, top)
    lines += _top(f"top {top * 2} by inclusive time (anywhere on the stack):", inclusive, busy, top * 2)
    return "\n".join(lines) + "\n"


def profile_during(pid: int, prefix: Path, load, subprocesses: bool = False):
    """Sample `pid` (and its children) while `load()` runs; write PREFIX.raw and PREFIX.txt."""
    binary = _py_spy()
    if binary is None:
        print("    (py-spy not installed: no profile)", flush=True)
        return load()
    raw = prefix.with_suffix(".raw")
    # Blocking (py-spy pauses the process for each sample): non-blocking reads of a running
    # interpreter drop most samples of fast-changing pure-Python stacks, and so overstate the
    # ones waiting in system calls. This run is not timed. --idle: waiting threads count too.
    argv = [
        binary,
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--output",
        str(raw),
        "--rate",
        str(RATE),
        "--idle",
    ] + (["--subprocesses"] if subprocesses else [])
    sampler = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        result = load()
    finally:
        sampler.send_signal(2)  # SIGINT: py-spy writes what it has and exits
        sampler.wait(timeout=60)
    if raw.exists():
        prefix.with_suffix(".txt").write_text(summarize(raw))
    return result


if __name__ == "__main__":
    print(summarize(Path(sys.argv[1])), end="")
