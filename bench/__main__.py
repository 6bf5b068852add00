"""jobttl's benchmark: ``make bench`` (``.venv/bin/python -m bench [options]``).

Every row runs jobttl against a real baseline program written for it, interleaved round by
round, and prints one table (bench/results/latest.md) and JSON (bench/results/latest.json):

1-3. sink: binary CloudEvents (~10 KB TFJobs) from wrk at `python -m jobttl sink` vs a
     no-op Flask app under the same waitress settings (bench.sink);
4.   one worker deleting expired jobs vs plain RQ SimpleWorker / forking Worker running a
     minimal GET+DELETE task, and the emulator's own ceiling (bench.worker);
5.   Redis memory per pending deletion vs plain `enqueue_at` (bench.memory);
6.   resync of 50,000 TFJobs vs the bare paged LIST (bench.resync);
7.   100,000 deletions due at one instant, through RQ's scheduler (bench.scheduler);
8.   lateness of 1,000 deletions due over 10 s with 2 workers (bench.worker.lateness);
9.   CEL: decide() on 1.7 MB RayJobs vs the same rule in plain Python, and the sink's ordinary
     event and /healthz while six costly RayJob events are in flight vs the event alone (bench.cel);
10.  `jobttl watch`'s resident memory over 10k, 50k and 100k running TFJobs vs a bare client watch
     that keeps nothing (bench.watcher; --watcher-sizes);
11.  100k finished TFJobs in 1,000 namespaces booked from events through the sink: rate and Redis
     memory per pending deletion vs plain RQ `enqueue_at`, and the resync over them vs the bare
     paged LIST (bench.booking; --booking-n);
12.  one namespace's page of pending deletions from the namespace index vs the scan of every record
     it replaced, and vs an unfiltered page (bench.namespaces);
13.  the sink's p50 and p99 latency under a steady ~200 events/s of new finished jobs vs the no-op
     app (bench.sink.steady).

Then, unless --no-breakdown, short extra runs count every Redis round trip by call site
(bench.counting); with --profile, py-spy samples jobttl's processes (bench.profile).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import harness

RESULTS = Path(__file__).resolve().parent / "results"
ROWS = (
    "sink",
    "worker",
    "memory",
    "resync",
    "scheduler",
    "lateness",
    "cel",
    "watcher",
    "booking",
    "namespaces",
    "steady",
)
FULL = {
    "sink_seconds": 10,
    "worker_n": 1000,
    "memory_n": 20_000,
    "resync_n": 50_000,
    "scheduler_n": 100_000,
    "lateness_n": 1000,
    "lateness_spread": 10,
    "rounds": 3,
    "watcher_sizes": (10_000, 50_000, 100_000),
    "booking_n": 100_000,
    "namespaces_n": 20_000,
    "steady_seconds": 20,
}
QUICK = {
    "sink_seconds": 1,
    "worker_n": 100,
    "memory_n": 1000,
    "resync_n": 1000,
    "scheduler_n": 2000,
    "lateness_n": 100,
    "lateness_spread": 3,
    "rounds": 1,
    "watcher_sizes": (200, 1000),
    "booking_n": 1000,
    "namespaces_n": 1000,
    "steady_seconds": 3,
}


def machine() -> dict:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory = next(
        (
            int(line.split()[1]) // 1024
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        None,
    )
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
    wrk = shutil.which("wrk")
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_mb": memory,
        "python": platform.python_version(),
        "os": platform.platform(),
        "redis": next((w[2:] for w in redis if w.startswith("v=")), "?"),
        "wrk": bool(wrk),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round: checks the harness works")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    parser.add_argument("--rounds", type=int, help="rounds per row (default 3; --quick: 1)")
    parser.add_argument("--profile", action="store_true", help="also sample jobttl's processes with py-spy")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the round-trip-by-call-site runs")
    parser.add_argument("--out", default=str(RESULTS / "latest.json"), help="where the JSON goes")
    parser.add_argument(
        "--watcher-sizes", help="row 10's object counts, growing, e.g. 10000,50000 (default 10000,50000,100000)"
    )
    parser.add_argument("--booking-n", type=int, help="row 11's finished jobs (default 100000)")
    parser.add_argument("--namespaces-n", type=int, help="row 12's pending deletions (default 20000)")
    args = parser.parse_args(argv)
    sizes = dict(QUICK if args.quick else FULL)
    if args.rounds:
        sizes["rounds"] = args.rounds
    if args.watcher_sizes:
        sizes["watcher_sizes"] = tuple(int(n) for n in args.watcher_sizes.split(","))
    if args.booking_n:
        sizes["booking_n"] = args.booking_n
    if args.namespaces_n:
        sizes["namespaces_n"] = args.namespaces_n
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = set(rows) - set(ROWS)
    if unknown:
        parser.error(f"unknown rows: {', '.join(sorted(unknown))}")
    if shutil.which("wrk") is None and {"sink", "steady"} & set(rows):
        parser.error("wrk is not installed: `make bench` installs it (apt-get install -y wrk)")
    workdir = Path(tempfile.mkdtemp(prefix="jobttl-bench-"))
    profile_dir = None
    if args.profile:
        profile_dir = Path(args.out).parent / "profiles"
        profile_dir.mkdir(parents=True, exist_ok=True)
    print(f"jobttl benchmark: rows {', '.join(rows)}; sizes {sizes}; logs in {workdir}", flush=True)
    started = time.time()
    rounds = sizes["rounds"]
    results, breakdown = [], {}

    from bench import booking, cel, memory, namespaces, resync, scheduler, sink, watcher, worker

    runners = {
        "sink": lambda: sink.run(workdir, rounds, sizes["sink_seconds"], profile_dir),
        "worker": lambda: worker.run(workdir, rounds, sizes["worker_n"], profile_dir),
        "memory": lambda: memory.run(workdir, rounds, sizes["memory_n"]),
        "resync": lambda: resync.run(workdir, rounds, sizes["resync_n"], profile_dir),
        "scheduler": lambda: scheduler.run(workdir, rounds, sizes["scheduler_n"]),
        "lateness": lambda: worker.lateness(workdir, rounds, sizes["lateness_n"], sizes["lateness_spread"]),
        "cel": lambda: cel.run(workdir, rounds),
        "watcher": lambda: watcher.run(workdir, rounds, sizes["watcher_sizes"]),
        "booking": lambda: booking.run(workdir, rounds, sizes["booking_n"]),
        "namespaces": lambda: namespaces.run(workdir, rounds, sizes["namespaces_n"]),
        "steady": lambda: sink.steady(workdir, rounds, sizes["steady_seconds"]),
    }
    breakdowns = {
        "sink": lambda: sink.breakdown(workdir, max(1, sizes["sink_seconds"] // 2)),
        "worker": lambda: worker.breakdown(workdir, min(sizes["worker_n"], 500)),
        "resync": lambda: resync.breakdown(workdir, min(sizes["resync_n"], 10_000)),
    }
    for row in rows:
        print(f"\n== {row}", flush=True)
        row_started, load_before = time.time(), os.getloadavg()[0]
        results.append(runners[row]())
        results[-1].facts["row_seconds"] = round(time.time() - row_started)
        # Other work on the machine: the 1-minute load average before and after the row (2 cores).
        results[-1].facts["load_average"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
        if not args.no_breakdown and row in breakdowns:
            print(f"  round trips by call site ({row})", flush=True)
            breakdown[row] = breakdowns[row]()
            if row == "resync":
                resync.attach_round_trips(results[-1], breakdown[row])

    results.sort(key=lambda r: ROWS.index(r.key if r.key in ROWS else "sink"))
    text = harness.table(results)
    loads = ", ".join(f"{r.key} {r.facts['load_average'][0]}–{r.facts['load_average'][1]}" for r in results)
    command = "make bench" if not argv and len(sys.argv) == 1 else "python -m bench " + " ".join(argv or sys.argv[1:])
    info = machine()
    header = (
        f"{info['cores']} cores ({info['cpu']}), {info['memory_mb']:,} MB, Python {info['python']}, "
        f"redis-server {info['redis']}; {rounds} round(s), medians; `{command}`, "
        f"{time.strftime('%Y-%m-%d', time.gmtime(started))}, {round(time.time() - started)} s; "
        f"1-minute load average before–after each row (other work on the machine): {loads}"
    )
    print(f"\n{header}\n\n{text}\n")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": info,
                "command": command,
                "sizes": sizes,
                "started": started,
                "seconds": round(time.time() - started),
                "table": text,
                "rows": [r.as_dict() for r in results],
                "round_trips_by_call_site": breakdown,
            },
            indent=1,
            default=str,
        )
        + "\n"
    )
    out.with_suffix(".md").write_text(f"{header}\n\n{text}\n")
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
