"""Row 6: a resync of N realistic TFJobs (half finished) against the bare paged LIST.

Each is a process of its own, timed from start to exit with its own CPU time and peak RSS
(os.wait4): ``python -m jobttl resync --json`` (the product's command, which lists every
enabled kind: the kinds other than TFJob are served, empty) first into an empty Redis, then
again with nothing changed; ``python -m bench.baseline_list client`` (the official client's
paged LIST of the same objects, 500 a page); and the raw paged LIST (the emulator's ceiling).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from bench.emulator_host import Emulator
from bench.harness import Line, RowResult, interleave, python, run_measured
from bench.redis_side import RedisSide
from bench.worker import QUEUE


def run(workdir: Path, rounds: int, n: int, profile_dir: Path | None = None) -> RowResult:
    result = RowResult("resync", f"Resync of {n:,} realistic TFJobs, half finished")
    emulator = Emulator(str(workdir))
    redis = RedisSide().start()
    try:
        started = time.perf_counter()
        now = time.time()
        emulator.seed(n // 2, "done", "succeeded", now - 600, 3600, namespaces=50, namespace="team")
        emulator.seed(n - n // 2, "busy", "running", now - 600, 3600, namespaces=50, namespace="team")
        result.facts["seed_seconds"] = round(time.perf_counter() - started, 1)
        result.facts["emulator_rss_mb_after_seed"] = round(emulator.counts()["maxrss_kb"] / 1024)
        env = {
            "JOBTTL_REDIS_URL": redis.url,
            "KUBECONFIG": emulator.kubeconfig,
            "JOBTTL_QUEUE": QUEUE,
            "JOBTTL_RESYNC_MAX_DELETIONS": str(n),
            "JOBTTL_RESYNC_INTERVAL": "0",
            # a cluster that has run jobttl before: the bench measures the steady state
            "JOBTTL_FIRST_RUN_REVIEW": "off",
        }

        def measure(label: str, argv: list[str], check=None) -> None:
            before = redis.counters()
            emulator_before = emulator.counts()["cpu"]
            out = workdir / f"resync-{label.replace(' ', '-')}.out"
            out.write_text("")
            usage = run_measured(argv, env, workdir / "resync.log", stdout=out)
            after = redis.counters()
            emulator_cpu = emulator.counts()["cpu"] - emulator_before
            spent = after.minus(before)
            assert usage.returncode == 0, f"{label} exited {usage.returncode}: see {workdir / 'resync.log'}"
            if check is not None:
                check(
                    json.loads(
                        out.read_text().strip().splitlines()[-1] if "{" not in out.read_text()[:1] else out.read_text()
                    )
                )
            # Reply writes, not round trips, for pages this big (bench.redis_side): the table's round
            # trips come from the client-side count (`breakdown`, attached by bench.__main__).
            per = {"reply_writes": spent.round_trips / n, "commands": spent.commands / n} if spent.commands > 5 else {}
            result.side(f"{label} wall", "s", False).add(usage.wall, emulator_cpu=emulator_cpu, **per)
            result.side(f"{label} CPU", "s", False).add(usage.cpu)
            result.side(f"{label} peak RSS", "MB", False).add(usage.maxrss_mb)
            if per:
                result.facts[f"{label} commands per object"] = {
                    k: round(v / n, 3) for k, v in sorted(spent.by_command.items())
                }

        def expect(counts: dict[str, int]):
            def check(report: dict) -> None:
                found = {k: report.get(k) for k in counts}
                if found != counts:
                    result.facts.setdefault("unexpected reports", []).append(report)

            return check

        resync = python("-m", "jobttl", "resync", "--json")
        # An empty Redis is this run's starting point on purpose: --force past the guard
        # that refuses to resync into a Redis holding no jobttl schedule.
        resync_empty = python("-m", "jobttl", "resync", "--json", "--force")
        listing = python("-m", "bench.baseline_list", "client")

        def first() -> None:
            redis.flush()
            measure("jobttl resync, first run", resync_empty, expect({"seen": n, "scheduled": n // 2}))

        interleave(
            rounds,
            [
                ("jobttl resync, first run (empty Redis)", first),
                ("bare paged LIST (official client)", lambda: measure("bare paged LIST", listing)),
                (
                    "jobttl resync, nothing changed",
                    lambda: measure("jobttl resync, no change", resync, expect({"seen": n, "unchanged": n // 2})),
                ),
                (
                    "emulator ceiling: raw paged LIST",
                    lambda: measure("raw paged LIST (emulator ceiling)", python("-m", "bench.baseline_list", "raw")),
                ),
            ],
        )
        if profile_dir is not None:
            from bench.profile import profile_during
            from bench.harness import spawn

            for label in ("first", "no-change"):
                if label == "first":
                    redis.flush()
                process = spawn(resync_empty if label == "first" else resync, env, workdir / "resync-profile.log")
                profile_during(process.pid, profile_dir / f"resync-{label}", lambda: process.wait(3600))
    finally:
        emulator.stop()
        redis.stop()
    title = f"6. resync, {n:,} ~10 KB TFJobs, half finished"
    list_wall, list_cpu = "bare paged LIST wall", "bare paged LIST CPU"
    result.lines += [
        Line(f"{title}: first run, wall", "jobttl resync, first run wall", list_wall, "<= 1.3"),
        Line(f"{title}: nothing changed, wall", "jobttl resync, no change wall", list_wall, "<= 1.3"),
        Line(f"{title}: first run, CPU", "jobttl resync, first run CPU", list_cpu, "<= 2.0"),
        Line(f"{title}: nothing changed, CPU", "jobttl resync, no change CPU", list_cpu, "<= 2.0"),
        Line(
            f"{title}: first run, peak RSS",
            "jobttl resync, first run peak RSS",
            "bare paged LIST peak RSS",
            "<= 200",
            absolute=True,
        ),
        Line(
            f"{title}: nothing changed, peak RSS",
            "jobttl resync, no change peak RSS",
            "bare paged LIST peak RSS",
            "<= 200",
            absolute=True,
        ),
        Line(f"{title}: the bare LIST vs the emulator's ceiling", list_wall, "raw paged LIST (emulator ceiling) wall"),
    ]
    return result


def breakdown(workdir: Path, n: int) -> dict:
    """Round trips of a resync by call site (bench.counting): first run and no-change run, per 500-object page."""
    from bench import counting

    emulator = Emulator(str(workdir))
    redis = RedisSide().start()
    found = {}
    try:
        now = time.time()
        emulator.seed(n // 2, "done", "succeeded", now - 600, 3600, namespaces=50, namespace="team")
        emulator.seed(n - n // 2, "busy", "running", now - 600, 3600, namespaces=50, namespace="team")
        env = {
            "JOBTTL_REDIS_URL": redis.url,
            "KUBECONFIG": emulator.kubeconfig,
            "JOBTTL_QUEUE": QUEUE,
            "JOBTTL_RESYNC_MAX_DELETIONS": str(n),
            "JOBTTL_RESYNC_INTERVAL": "0",
            # a cluster that has run jobttl before: the bench measures the steady state
            "JOBTTL_FIRST_RUN_REVIEW": "off",
        }
        pages = max(1, n // 500)
        for label in ("first run", "no change"):
            out = workdir / f"resync-counts-{label.replace(' ', '-')}"
            force = ["--force"] if label == "first run" else []  # into an empty Redis (see run)
            run_measured(
                python("-m", "bench.counting", str(out), "-m", "jobttl", "resync", "--json", *force),
                env,
                workdir / "resync-count.log",
            )
            counts = counting.read(str(out))
            found[label] = {site: round(c / pages, 2) for site, c in counts.most_common()}
            found[label]["(total per page of 500)"] = round(sum(counts.values()) / pages, 2)
            found[label]["(total per object)"] = round(sum(counts.values()) / n, 4)
    finally:
        emulator.stop()
        redis.stop()
    return found


def attach_round_trips(result: RowResult, found: dict) -> None:
    """Put the client-side round trips per object (from `breakdown`) beside the timed sides."""
    for label, side in (("first run", "jobttl resync, first run wall"), ("no change", "jobttl resync, no change wall")):
        if label in found and side in result.sides:
            result.sides[side].extras["round_trips"] = [found[label]["(total per object)"]]
