"""Where a process's time goes: py-spy samples it while a row's load runs (``--profile``).

py-spy (bench/requirements.txt) samples the process from outside, without changing it,
non-blocking. The raw stacks are summed per function: *self* (the function was on top of
the stack) and *inclusive* (it was anywhere on the stack), as shares of all samples, and
written to PREFIX.txt beside the raw stacks (PREFIX.raw).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>.*?)(?::\d+)?\)$")


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _short(path: str) -> str:
    for marker in ("/site-packages/", "/wt-bench/", "/lib/python3."):
        if marker in path:
            tail = path.rsplit(marker, 1)[1]
            return tail.split("/", 1)[1] if marker == "/lib/python3." else tail
    return path


def summarize(raw: Path, top: int = 30) -> str:
    self_time: Counter = Counter()
    inclusive: Counter = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = []
        for frame in stack.split(";"):
            match = _FRAME.match(frame)
            frames.append(f"{_short(match['path'])}:{match['function']}" if match else frame)
        self_time[frames[-1]] += n
        for name in set(frames):
            inclusive[name] += n
    if not total:
        return "no samples\n"
    lines = [f"{total} samples", "", f"top {top} by self time (on top of the stack):"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in self_time.most_common(top)]
    lines += ["", f"top {top * 2} by inclusive time (anywhere on the stack):"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in inclusive.most_common(top * 2)]
    return "\n".join(lines) + "\n"


def profile_during(pid: int, prefix: Path, load, subprocesses: bool = False):
    """Sample `pid` (and its children) while `load()` runs; write PREFIX.raw and PREFIX.txt."""
    binary = _py_spy()
    if binary is None:
        print("    (py-spy not installed: no profile)", flush=True)
        return load()
    raw = prefix.with_suffix(".raw")
    argv = [binary, "record", "--pid", str(pid), "--format", "raw", "--output", str(raw), "--rate", "250",
            "--nonblocking"] + (["--subprocesses"] if subprocesses else [])
    sampler = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        result = load()
    finally:
        sampler.send_signal(2)  # SIGINT: py-spy writes what it has and exits
        sampler.wait(timeout=60)
    if raw.exists():
        prefix.with_suffix(".txt").write_text(summarize(raw))
    return result
