"""Row 10: `jobttl watch`'s resident memory over N running TFJobs, against a bare client watch.

One emulator process is seeded with N realistic running TFJobs (bench.objects, ~10.7 KB as
JSON: heavier than the issue's ~8 KB), N growing from size to size (10k, 50k, 100k by default).
For each size, each side is started afresh, once per round, interleaved:

- ``python -m jobttl watch`` (the product's command, default settings, every default kind: the
  others are served and empty), posting to the no-op sink (bench.noop_sink; a first LIST of
  running jobs announces none, the relist announces the one TFJob that changed);
- ``python -m bench.baseline_watch`` (the official client's paged LIST, then its watch, keeping
  nothing but the resourceVersion).

Each is measured when its LIST is done and its watch open (RSS, from /proc), and again after the
API server compacted and closed the watches, so the watch could not resume (410) and the LIST
was done again (RSS, and the peak RSS of the whole life, VmHWM). The target is jobttl's own:
<= 150 MB at 100k.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import requests

from bench.emulator_host import Emulator
from bench.harness import Line, RowResult, interleave, python, spawn, stop
from jobttl_emulator.localstack import free_port
from tests.services import wait_for

SIZES = (10_000, 50_000, 100_000)
TARGET_MB = 150
_LISTED = re.compile(r'"event":\s*"listed".*"kind":\s*"TFJob"|"kind":\s*"TFJob".*"event":\s*"listed"')


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def _listings(log: Path, side: str) -> int:
    if not log.exists():
        return 0
    text = log.read_text(errors="replace")
    if side == "jobttl":
        return sum(1 for line in text.splitlines() if _LISTED.search(line))
    return sum(1 for line in text.splitlines() if line.startswith('{"listed"'))


def _wait_listed(process, log: Path, side: str, count: int, timeout: float = 3600) -> None:
    deadline = time.monotonic() + timeout
    while _listings(log, side) < count:
        if process.poll() is not None:
            raise RuntimeError(f"{side} exited {process.returncode}: see {log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{side} did not list {count} time(s) in {timeout:.0f} s: see {log}")
        time.sleep(0.2)


def run(workdir: Path, rounds: int, sizes: tuple[int, ...] = SIZES) -> RowResult:
    result = RowResult(
        "watcher", f"`jobttl watch`'s resident memory over {', '.join(f'{n:,}' for n in sizes)} running TFJobs"
    )
    emulator = Emulator(str(workdir))
    sink_port = free_port()  # a no-op sink answering 202: the relist announces the TFJob that changed
    sink = spawn(python("-m", "bench.noop_sink", "--port", str(sink_port)), {}, workdir / "watch-noop-sink.log")
    wait_for(
        lambda: requests.post(f"http://127.0.0.1:{sink_port}/", timeout=1) is not None,
        timeout=30,
        what="the no-op sink",
    )
    env = {"KUBECONFIG": emulator.kubeconfig}
    argv = {
        "jobttl": python("-m", "jobttl", "watch", "--sink", f"http://127.0.0.1:{sink_port}/", "--port", "0"),
        "baseline": python("-m", "bench.baseline_watch"),
    }
    names = {"jobttl": "jobttl watch", "baseline": "bare client watch"}
    seeded = 0
    runs = iter(range(1, 1_000_000))
    try:
        for n in sizes:
            started = time.perf_counter()
            emulator.seed(n - seeded, f"run{n}", "running", time.time() - 600, 3600, namespaces=1000, namespace="team")
            seeded = n
            result.facts[f"{n:,}: seed seconds"] = round(time.perf_counter() - started, 1)
            result.facts[f"{n:,}: emulator peak RSS MB"] = round(emulator.counts()["maxrss_kb"] / 1024)

            def measure(side: str, n: int = n) -> None:
                log = workdir / f"watch-{side}-{n}-{next(runs)}.log"
                process = spawn(argv[side], env, log)
                try:
                    began = time.perf_counter()
                    _wait_listed(process, log, side, 1)
                    listed_after = time.perf_counter() - began
                    time.sleep(1)  # the watch opens right after the LIST
                    listed = _status_mb(process.pid, "VmRSS")
                    # The watches drop and cannot reopen for a moment; meanwhile a TFJob changes and the API
                    # server compacts past it: no watch can resume (410 Gone), each side lists again.
                    http = requests.Session()
                    http.post(
                        f"{emulator.url}/_emulator/faults",
                        json={"verb": "watch", "status": 503, "count": 1_000_000},
                        timeout=60,
                    )
                    http.post(f"{emulator.url}/_emulator/close-watches", timeout=60).raise_for_status()
                    emulator.seed(1, f"relist{next(runs)}", "running", time.time(), 3600, namespace="team")
                    http.post(f"{emulator.url}/_emulator/compact", timeout=60).raise_for_status()
                    http.delete(f"{emulator.url}/_emulator/faults", timeout=60).raise_for_status()
                    _wait_listed(process, log, side, 2)
                    time.sleep(1)
                    relisted, peak = _status_mb(process.pid, "VmRSS"), _status_mb(process.pid, "VmHWM")
                finally:
                    stop(process)
                name = f"{names[side]}, {n:,}"
                result.side(f"{name}: RSS listed", "MB", False).add(listed, list_seconds=listed_after)
                result.side(f"{name}: RSS after a relist", "MB", False).add(relisted)
                result.side(f"{name}: peak RSS", "MB", False).add(peak)

            interleave(
                rounds,
                [
                    (f"{names['jobttl']}, {n:,} objects", lambda: measure("jobttl")),
                    (f"{names['baseline']}, {n:,} objects", lambda: measure("baseline")),
                ],
            )
    finally:
        stop(sink)
        emulator.stop()
    for n in sizes:
        title = f"10. watcher memory, {n:,} running ~10.7 KB TFJobs"
        target = f"<= {TARGET_MB}" if n == max(sizes) else ""
        for what in ("RSS listed", "RSS after a relist", "peak RSS"):
            result.lines.append(
                Line(
                    f"{title}: {what}",
                    f"jobttl watch, {n:,}: {what}",
                    f"bare client watch, {n:,}: {what}",
                    target,
                    absolute=bool(target),
                )
            )
    result.facts["sizes"] = list(sizes)
    return result


if __name__ == "__main__":
    import argparse
    import tempfile

    from bench import harness

    parser = argparse.ArgumentParser(prog="python -m bench.watcher", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(str(n) for n in SIZES), help="object counts, growing")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", help="write the row's JSON here")
    args = parser.parse_args()
    row = run(
        Path(tempfile.mkdtemp(prefix="jobttl-bench-watch-")), args.rounds, tuple(int(s) for s in args.sizes.split(","))
    )
    print(harness.table([row]))
    if args.out:
        Path(args.out).write_text(json.dumps(row.as_dict(), indent=1, default=str) + "\n")
