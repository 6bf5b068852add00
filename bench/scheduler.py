"""Row 7: N deletions coming due at one instant, moved onto the queue by RQ's scheduler.

jobttl books through its reconcile path (one delayed RQ job per deletion, JSON-serialized,
its record in the job's meta); the baseline books the same deletions with plain
`enqueue_at`. Both are booked due in an hour, then every score in RQ's scheduled registry
is set to one past instant (one ZUNIONSTORE ... WEIGHTS 0), so both come due at once
however long booking took. Then RQ's scheduler (`bench.scheduler_proc`) starts, and the
queue's length is sampled every 20 ms: the rate is from the first sample with anything
queued to the one with everything queued. RQ moves at most 1,000 jobs per queue per pass
and sleeps a second between passes: that is the ceiling, whoever booked them.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

from redis import Redis
from rq import Queue

from bench.harness import Line, RowResult, interleave, python, spawn, stop
from bench.objects import realistic_tfjobs
from bench.redis_side import RedisSide
from bench.worker import BASELINE_TASK, QUEUE, book_jobttl
from jobttl.core.services.reconcile import GUARDED

REGISTRY = f"rq:scheduled:{QUEUE}"
QUEUE_KEY = f"rq:queue:{QUEUE}"


def run(workdir: Path, rounds: int, n: int) -> RowResult:
    result = RowResult("scheduler", f"{n:,} deletions coming due at one instant")
    sides = {"jobttl": RedisSide().start(), "baseline": RedisSide().start()}
    tags = iter(range(1, 1000))

    def one(side: str) -> None:
        redis = sides[side]
        redis.flush()
        client = redis.client
        tag = next(tags)
        now = time.time()
        refs = [(f"team-{i % 50}", f"s{tag}-job-{i}", f"{tag:08x}-0000-4000-8000-{i:012x}") for i in range(n)]
        due = int(now + 3600)
        if side == "jobttl":
            book_jobttl(redis, realistic_tfjobs(refs, state="succeeded", at=due - 3600.0, ttl=3600), GUARDED)
        else:
            queue = Queue(QUEUE, connection=Redis.from_url(redis.url))
            when = datetime.fromtimestamp(due, tz=timezone.utc)
            for start in range(0, n, 1000):
                with client.pipeline() as pipe:
                    for ns, name, uid in refs[start : start + 1000]:
                        queue.enqueue_at(when, BASELINE_TASK, ns, name, uid, pipeline=pipe)
                    pipe.execute()
        assert client.zcard(REGISTRY) == n, client.zcard(REGISTRY)
        client.zunionstore(REGISTRY, {REGISTRY: 0})  # every score 0: all due, at one instant
        before, polls = redis.counters(), 0
        process = spawn(
            python(
                "-m",
                "bench.scheduler_proc",
                "--redis",
                redis.url,
                "--queue",
                QUEUE,
                "--as",
                "jobttl" if side == "jobttl" else "plain",
            ),
            {},
            workdir / f"scheduler-{side}.log",
        )
        first = None
        try:
            deadline = time.monotonic() + n / 500 + 60
            while time.monotonic() < deadline:
                queued, at = client.llen(QUEUE_KEY), time.time()
                polls += 1
                if queued and first is None:
                    first = (at, queued)
                if queued >= n:
                    break
                time.sleep(0.02)
        finally:
            stop(process)
        spent = redis.counters().minus(before)
        label = "jobttl (RQ's scheduler, jobttl's jobs)" if side == "jobttl" else "plain RQ enqueue_at"
        if first is None or queued < n:
            result.facts.setdefault("incomplete", []).append(f"{label}: {queued} of {n} queued")
            return
        result.side(label, "moved/s").add(
            (n - first[1]) / (at - first[0]),
            seconds=at - first[0],
            reply_writes=(spent.round_trips - polls) / n,  # not round trips here
            commands=(spent.commands - polls) / n,
        )

    try:
        interleave(rounds, [("jobttl", lambda: one("jobttl")), ("plain RQ", lambda: one("baseline"))])
    finally:
        for side in sides.values():
            side.stop()
    result.lines.append(
        Line(
            f"7. {n:,} deletions due at one instant: moved to the queue",
            "jobttl (RQ's scheduler, jobttl's jobs)",
            "plain RQ enqueue_at",
        )
    )
    return result
