"""Rows 4 and 8: deleting expired jobs, and how late deletions are, against plain RQ.

Every run starts from an empty emulator and an empty Redis of its side, seeds the objects,
books their deletions (jobttl through its one reconcile path, `jobttl.core.services.reconcile`; the
baselines with plain RQ `enqueue`/`enqueue_at` of `bench.baseline_tasks.delete_job`), then
starts the workers. Figures come from the emulator's request log (the time each DELETE
arrived), so worker start-up is not in them; Redis's own counters, sampled every 0.1 s,
give the round trips between the first and the last DELETE.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

from redis import Redis
from rq import Queue

from bench.emulator_host import Emulator
from bench.harness import Line, RowResult, interleave, python, spawn, stop
from bench.objects import realistic_tfjobs
from bench.redis_side import CounterTrace, RedisSide
from jobttl.core.store import redisconn
from jobttl.core.store.audit import Audit
from jobttl.core.runtime.config import Settings
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.services.reconcile import GUARDED, RELEASE, Reconciler
from jobttl.core.store.schedule import Schedule
from tests.services import wait_for

QUEUE = "bench"
BASELINE_TASK = "bench.baseline_tasks.delete_job"
TTL = 300  # seconds; objects are seeded as finished TTL (+ a margin) ago


def jobttl_env(redis: RedisSide, emulator: Emulator, **extra: str) -> dict[str, str]:
    """A production worker, but for its Redis, API, queue, and no rate limit, resyncs or metrics port."""
    return {
        "JOBTTL_REDIS_URL": redis.url,
        "KUBECONFIG": emulator.kubeconfig,
        "JOBTTL_QUEUE": QUEUE,
        "JOBTTL_DELETE_RATE": "0",
        "JOBTTL_RESYNC_INTERVAL": "0",
        "JOBTTL_WORKER_METRICS_PORT": "0",
        # a cluster that has run jobttl before: the bench measures the steady state
        "JOBTTL_FIRST_RUN_REVIEW": "off",
        **extra,
    }


def book_jobttl(redis: RedisSide, objects: Iterable[dict], mode: str) -> float:
    """Book deletions through jobttl's real path, a resync page (500) at a time; returns the seconds it took."""
    settings = Settings.from_env(
        {"JOBTTL_REDIS_URL": redis.url, "JOBTTL_QUEUE": QUEUE, "JOBTTL_RESYNC_MAX_DELETIONS": "10000000"}
    )
    client = redisconn.connect(redis.url, redisconn.CLI)
    schedule = Schedule.from_settings(client, settings)
    reconciler = Reconciler.from_settings(schedule, Audit.from_settings(client, settings), settings)
    spent = 0.0
    objects = iter(objects)
    while batch := [(o, TFJOB) for o in itertools.islice(objects, 500)]:
        started = time.perf_counter()
        outcomes, rejected = reconciler.reconcile_many(batch, "bench", mode)
        spent += time.perf_counter() - started
        assert not rejected and all(o.change.value == "scheduled" for o in outcomes), (rejected, outcomes[:3])
    return spent


def book_baseline(redis: RedisSide, refs: list[list[str]], due: dict[str, int] | None = None) -> float:
    """Plain RQ: `enqueue` (already due) or `enqueue_at` its due time, RQ's defaults otherwise."""
    queue = Queue(QUEUE, connection=Redis.from_url(redis.url))
    started = time.perf_counter()
    for namespace, name, uid in refs:
        if due is None:
            queue.enqueue(BASELINE_TASK, namespace, name, uid)
        else:
            queue.enqueue_at(datetime.fromtimestamp(due[name], tz=timezone.utc), BASELINE_TASK, namespace, name, uid)
    return time.perf_counter() - started


def objects_of(refs: list[list[str]], at: float | dict[str, float]) -> Iterable[dict]:
    """The objects as seeded (the event or the listing would carry them), rebuilt from their identity."""
    return realistic_tfjobs(refs, state="succeeded", at=at, ttl=TTL)


def _window(deletes: list[tuple[float, str, int]]) -> tuple[float, float, int]:
    ok = sorted(t for t, _, status in deletes if status in (200, 202))
    return (ok[0], ok[-1], len(ok)) if ok else (0.0, 0.0, 0)


class WorkerRow:
    def __init__(self, workdir: Path, n: int):
        self.workdir = workdir
        self.n = n
        self.emulator = Emulator(str(workdir))
        self.redis = {"jobttl": RedisSide().start(), "baseline": RedisSide().start()}
        self.result = RowResult("worker", "One worker deleting expired jobs, rate limit off")
        self.runs = 0

    def close(self) -> None:
        self.emulator.stop()
        for side in self.redis.values():
            side.stop()

    def _prepare(self, count: int) -> list[list[str]]:
        self.runs += 1
        self.emulator.reset()
        seeded = self.emulator.seed(
            count,
            f"w{self.runs}",
            "succeeded",
            time.time() - TTL - 3600,
            TTL,
            namespaces=4,
            namespace=f"run{self.runs}",
            return_refs=True,
        )
        return seeded["refs"]

    def _measure(
        self,
        side_name: str,
        redis: RedisSide,
        argv: list[str],
        env: dict[str, str],
        count: int,
        timeout: float = 600,
        profile: Path | None = None,
    ) -> None:
        self.emulator.clear_requests()
        emulator_before = self.emulator.counts()
        with CounterTrace(redis or self.redis["baseline"]) as trace:
            process = spawn(argv, env, self.workdir / f"{side_name.replace(' ', '-')}.log")
            trace.pid = process.pid
            try:
                if profile is not None:
                    from bench.profile import profile_during

                    time.sleep(1.0)  # past the imports
                    profile_during(process.pid, profile, lambda: process.wait(timeout), subprocesses=True)
                else:
                    process.wait(timeout)
            finally:
                stop(process)
            time.sleep(0.25)
        first, last, deleted = _window(self.emulator.deletes())
        emulator_after = self.emulator.counts()
        if deleted < count:
            self.result.facts.setdefault("incomplete", []).append(f"{side_name}: {deleted} of {count} deleted")
        if deleted < 2:
            return
        rate = (deleted - 1) / (last - first)
        spent = trace.between(first, last) if redis is not None else None
        requests = {k: v - emulator_before["requests"].get(k, 0) for k, v in emulator_after["requests"].items()}
        self.result.side(side_name, "deletions/s").add(
            rate,
            round_trips=spent.round_trips / (deleted - 1) if spent else None,
            commands=spent.commands / (deleted - 1) if spent else None,
            api_requests=sum(requests.values()) / deleted,
            worker_cpu_ms=1000 * spent.process_cpu / (deleted - 1) if spent else None,
            redis_cpu_ms=1000 * spent.redis_cpu / (deleted - 1) if spent and redis is not None else None,
            emulator_cpu_ms=1000 * (emulator_after["cpu"] - emulator_before["cpu"]) / deleted,
        )
        if spent:
            self.result.facts[f"{side_name} commands"] = {
                k: round(v / (deleted - 1), 2) for k, v in sorted(spent.by_command.items())
            }
        self.result.facts[f"{side_name} api requests per deletion"] = {
            k: round(v / deleted, 2) for k, v in requests.items()
        }

    def jobttl(self, propagation: str, profile: Path | None = None) -> None:
        redis = self.redis["jobttl"]
        refs = self._prepare(self.n)
        redis.flush()
        book_jobttl(redis, objects_of(refs, time.time() - TTL - 3600.0), RELEASE)
        env = jobttl_env(redis, self.emulator, JOBTTL_PROPAGATION_POLICY=propagation)
        self._measure(
            f"jobttl {propagation}", redis, python("-m", "jobttl", "worker", "--burst"), env, self.n, profile=profile
        )

    def baseline(self, worker: str, count: int) -> None:
        redis = self.redis["baseline"]
        refs = self._prepare(count)
        redis.flush()
        book_baseline(redis, refs)
        argv = python(
            "-m", "bench.baseline_worker", "--redis", redis.url, "--queue", QUEUE, "--worker", worker, "--burst"
        )
        name = {"simple": "RQ SimpleWorker", "fork": "RQ Worker (fork)"}[worker]
        self._measure(name, redis, argv, {"KUBECONFIG": self.emulator.kubeconfig}, count)

    def ceiling(self, mode: str) -> None:
        refs = self._prepare(self.n)
        path = self.workdir / "ceiling-refs.json"
        path.write_text(json.dumps(refs))
        name = {"client": "emulator ceiling (official client loop)", "raw": "emulator ceiling (raw HTTP loop)"}[mode]
        self._measure(
            name,
            None,
            python("-m", "bench.ceiling", "--refs", str(path), "--mode", mode),
            {"KUBECONFIG": self.emulator.kubeconfig},
            self.n,
        )


def run(workdir: Path, rounds: int, n: int, profile_dir: Path | None = None) -> RowResult:
    row = WorkerRow(workdir, n)
    fork_n = max(50, n // 4)  # RQ's forking Worker is slow: fewer deletions for the same precision
    try:
        interleave(
            rounds,
            [
                ("jobttl worker, Foreground (default)", lambda: row.jobttl("Foreground")),
                ("RQ SimpleWorker", lambda: row.baseline("simple", n)),
                ("jobttl worker, Background", lambda: row.jobttl("Background")),
                ("RQ forking Worker", lambda: row.baseline("fork", fork_n)),
                ("emulator ceiling: official client loop", lambda: row.ceiling("client")),
                ("emulator ceiling: raw HTTP loop", lambda: row.ceiling("raw")),
            ],
        )
        if profile_dir is not None:
            row.jobttl("Foreground", profile=profile_dir / "worker-foreground")
            row.jobttl("Background", profile=profile_dir / "worker-background")
    finally:
        row.close()
    result = row.result
    title = "4. one worker, expired jobs, rate limit off"
    result.lines += [
        Line(
            title + " (jobttl default: Foreground)",
            "jobttl Foreground",
            "RQ SimpleWorker",
            ">= 0.9",
            "the baseline deletes with Background propagation",
        ),
        Line(
            title + " (JOBTTL_PROPAGATION_POLICY=Background, like the baseline)",
            "jobttl Background",
            "RQ SimpleWorker",
            ">= 0.9",
        ),
        Line(title + ": vs RQ's forking Worker", "jobttl Background", "RQ Worker (fork)", ">= 3.5"),
        Line(title + ": vs the emulator's ceiling", "jobttl Background", "emulator ceiling (official client loop)"),
        Line(
            title + ": plain RQ vs the emulator's ceiling", "RQ SimpleWorker", "emulator ceiling (official client loop)"
        ),
        Line(
            title + ": official client vs raw HTTP",
            "emulator ceiling (official client loop)",
            "emulator ceiling (raw HTTP loop)",
        ),
    ]
    return result


# --- row 8: lateness ---------------------------------------------------------------------------------


def lateness(workdir: Path, rounds: int, n: int, spread: int = 10, workers: int = 2) -> RowResult:
    result = RowResult("lateness", f"{n} deletions due over {spread} s, {workers} workers, rate limit off")
    emulator = Emulator(str(workdir))
    sides = {"jobttl": RedisSide().start(), "baseline": RedisSide().start()}
    runs = iter(range(1, 1000))

    def one(side_name: str) -> None:
        redis = sides[side_name]
        tag = next(runs)
        emulator.reset()
        redis.flush()
        start = int(time.time()) + 12 + n // 200  # after seeding, booking and the workers' start-up
        per_second = n // spread
        refs, due, finished = [], {}, {}
        for second in range(spread):
            batch = emulator.seed(
                per_second,
                f"l{tag}s{second}",
                "succeeded",
                float(start + second - TTL),
                TTL,
                namespaces=2,
                namespace=f"late{tag}",
                return_refs=True,
            )["refs"]
            for ref in batch:
                due[ref[1]] = start + second
                finished[ref[1]] = float(start + second - TTL)
            refs += batch
        if side_name == "jobttl":
            book_jobttl(redis, objects_of(refs, finished), GUARDED)
            argv = python("-m", "jobttl", "worker")
            env = jobttl_env(redis, emulator)
            label = "jobttl workers (Foreground)"
        else:
            book_baseline(redis, refs, due)
            argv = python(
                "-m",
                "bench.baseline_worker",
                "--redis",
                redis.url,
                "--queue",
                QUEUE,
                "--worker",
                "simple",
                "--scheduler",
            )
            env = {"KUBECONFIG": emulator.kubeconfig}
            label = "RQ SimpleWorkers"
        assert time.time() < start - 3, "booking took too long: the deletions came due before the workers started"
        emulator.clear_requests()
        processes = [spawn(argv, env, workdir / f"late-{side_name}-{i}.log") for i in range(workers)]
        try:
            wait_for(
                lambda: _window(emulator.deletes())[2] >= len(refs),
                timeout=spread + 120,
                interval=0.5,
                what=f"{side_name}'s deletions",
            )
        except AssertionError as exc:
            result.facts.setdefault("incomplete", []).append(f"{label}: {exc}")
        finally:
            for process in processes:
                stop(process)
        seen: dict[str, float] = {}
        for at, path, status in sorted(emulator.deletes()):
            name = path.rsplit("/", 1)[1]
            if status in (200, 202) and name not in seen:
                seen[name] = at - due[name]
        late = sorted(seen.values())
        if not late:
            return
        p = lambda q: late[min(len(late) - 1, int(q * len(late)))]  # noqa: E731
        result.side(label, "s late (p99)", higher_is_better=False).add(
            p(0.99), p50=p(0.5), max=late[-1], deleted=len(late)
        )

    try:
        interleave(rounds, [("jobttl", lambda: one("jobttl")), ("RQ SimpleWorkers", lambda: one("baseline"))])
    finally:
        emulator.stop()
        for side in sides.values():
            side.stop()
    for side in list(result.sides.values()):
        p50 = result.side(side.name.replace("(p99)", "") + " p50", "s late (p50)", higher_is_better=False)
        p50.values = list(side.extras.get("p50", []))
    title = f"8. lateness: {n} deletions due over {spread} s, {workers} workers"
    result.lines.append(Line(f"{title} (p50)", "jobttl workers (Foreground) p50", "RQ SimpleWorkers p50"))
    result.lines.append(
        Line(f"{title} (p99)", "jobttl workers (Foreground)", "RQ SimpleWorkers", "<= 1.0", absolute=True)
    )
    return result


def breakdown(workdir: Path, n: int) -> dict:
    """Round trips per deletion by call site (bench.counting), one run each, start-up included."""
    from bench import counting

    row = WorkerRow(workdir, n)
    found = {}
    try:
        for label, propagation in (
            ("jobttl Foreground", "Foreground"),
            ("jobttl Background", "Background"),
            ("RQ SimpleWorker", None),
        ):
            out = workdir / f"worker-counts-{label.replace(' ', '-')}"
            side = row.redis["baseline" if propagation is None else "jobttl"]
            refs = row._prepare(n)
            side.flush()
            if propagation is None:
                book_baseline(side, refs)
                argv = python(
                    "-m",
                    "bench.counting",
                    str(out),
                    "-m",
                    "bench.baseline_worker",
                    "--redis",
                    side.url,
                    "--queue",
                    QUEUE,
                    "--worker",
                    "simple",
                    "--burst",
                )
                env = {"KUBECONFIG": row.emulator.kubeconfig}
            else:
                book_jobttl(side, objects_of(refs, time.time() - TTL - 3600.0), RELEASE)
                argv = python("-m", "bench.counting", str(out), "-m", "jobttl", "worker", "--burst")
                env = jobttl_env(side, row.emulator, JOBTTL_PROPAGATION_POLICY=propagation)
            process = spawn(argv, env, workdir / f"count-{label.replace(' ', '-')}.log")
            process.wait(600)
            counts = counting.read(str(out))
            found[label] = {site: round(c / n, 3) for site, c in counts.most_common() if c / n >= 0.005}
            found[label]["(total per deletion, start-up included)"] = round(sum(counts.values()) / n, 2)
    finally:
        row.close()
    return found
