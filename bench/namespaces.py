"""Row 12: one namespace's page of pending deletions (the read API's ``?namespace=``, ``jobttl pending
--namespace``), from the namespace index beside the pending index, against the scan of every
record it replaced (the same answer computed as 0.3.0 did: every record read, filtered) and
against the unfiltered page of the same size (what a page costs when nothing is filtered).

N deletions are booked through jobttl's real path (a resync page at a time) into one Redis with
the shipped flags, spread over 100 namespaces; each round asks for the first page (50) of one of
them. The facts give the index's memory: ``MEMORY USAGE`` of its keys per pending deletion.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.harness import Line, RowResult, interleave
from bench.objects import realistic_tfjobs
from bench.redis_side import RedisSide
from bench.worker import QUEUE, book_jobttl
from jobttl.core.services.operations import Operations
from jobttl.core.services.reconcile import GUARDED
from jobttl.core.store import keys
from jobttl.core.store.audit import Audit
from jobttl.core.store.schedule import Schedule

TTL = 86400
NAMESPACES = 100
PAGE = 50
TARGET = "team-7"


def run(workdir: Path, rounds: int, n: int) -> RowResult:
    result = RowResult(
        "namespaces", f"one namespace's page of pending deletions ({n:,} pending, {NAMESPACES} namespaces, page {PAGE})"
    )
    redis = RedisSide().start()
    try:
        client = redis.client
        now = time.time()
        refs = [(f"team-{i % NAMESPACES}", f"ns-job-{i}", f"00000010-0000-4000-8000-{i:012x}") for i in range(n)]
        book_jobttl(redis, realistic_tfjobs(refs, state="succeeded", at=now - 60, ttl=TTL), GUARDED)
        schedule = Schedule(client, QUEUE, [])
        operations = Operations(client, schedule, Audit(client))
        expected = sorted(uid for ns, _, uid in refs if ns == TARGET)[:PAGE]

        index_bytes = client.memory_usage(keys.NAMESPACES, samples=0) or 0
        for key in client.scan_iter(match=keys.NAMESPACE_PREFIX + "*", count=1000):
            index_bytes += client.memory_usage(key, samples=0) or 0
        result.facts["namespace index bytes per pending deletion (MEMORY USAGE of its keys)"] = round(index_bytes / n)

        def timed(side: str, page) -> None:
            started = time.perf_counter()
            items = page()
            result.side(side, "ms", higher_is_better=False).add((time.perf_counter() - started) * 1000)
            assert len(items) == min(PAGE, len(expected) if side != "unfiltered page" else n), (side, len(items))

        def scan_all() -> list:
            """0.3.0's answer: every record read, a thousand at a time, then filtered."""
            matching = [p for batch in schedule.scan() for p in batch if p.ref.namespace == TARGET]
            return matching[:PAGE]

        interleave(
            rounds,
            [
                (
                    "namespace index",
                    lambda: timed("namespace index", lambda: operations.pending(TARGET, limit=PAGE)[0]),
                ),
                ("scan of every record", lambda: timed("scan of every record", scan_all)),
                ("unfiltered page", lambda: timed("unfiltered page", lambda: operations.pending(limit=PAGE)[0])),
            ],
        )
    finally:
        redis.stop()
    result.lines.append(
        Line(
            "12. one namespace's page: the namespace index vs the scan of every record",
            "namespace index",
            "scan of every record",
            "<= 0.1",
        )
    )
    result.lines.append(
        Line(
            "12. one namespace's page: the namespace index vs an unfiltered page",
            "namespace index",
            "unfiltered page",
            "<= 2",
        )
    )
    return result
