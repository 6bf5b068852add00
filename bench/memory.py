"""Row 5: Redis memory per pending deletion, jobttl's real booking path against plain RQ.

Each side books N deletions due in a day into its own empty Redis, run with the shipped
configuration; the figure is the growth of ``used_memory`` (everything Redis holds for
them, allocator overhead included) divided by N, less jobttl's capped audit stream, which is
reported per entry instead. A per-key breakdown (``MEMORY USAGE ... SAMPLES 0``, exact) says
where it goes. The shipped configuration sets ``hash-max-listpack-value 512`` (so RQ's job
hashes keep Redis's compact encoding); the row is measured with it and with Redis's default
(64), for a Redis that is not jobttl's own.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from redis import Redis
from rq import Queue

from bench.harness import Line, RowResult, interleave
from bench.objects import realistic_tfjobs
from bench.redis_side import RedisSide
from bench.worker import BASELINE_TASK, QUEUE, book_jobttl
from jobttl.core.store import keys
from jobttl.core.services.reconcile import GUARDED

TTL = 86400
CONFIGS = {"shipped (512)": None, "Redis default (64)": "64"}  # None: the shipped flags as they are


def _group(key: str) -> str:
    if key.startswith("rq:job:"):
        return "RQ job hash (rq:job:*)"
    if key.startswith("rq:scheduled:"):
        return "RQ scheduled registry (zset entry)"
    if key == keys.PENDING_INDEX:
        return "jobttl:pending (zset entry)"
    if key == keys.NAMESPACES or key.startswith(keys.NAMESPACE_PREFIX):
        return "namespace index (hash entry, zset entry)"
    if key == keys.AUDIT_STREAM:
        return "audit stream"
    if key.startswith(keys.CARD_PREFIX) and key.endswith(":log"):
        return "history card log (list)"
    if key.startswith(keys.CARD_PREFIX):
        return "history card (hash)"
    return "other"


def usage_by_group(client: Redis) -> tuple[Counter, Counter]:
    sizes, counts = Counter(), Counter()
    batch = []
    for key in client.scan_iter(count=1000):
        batch.append(key)
        if len(batch) == 1000:
            _measure(client, batch, sizes, counts)
            batch = []
    _measure(client, batch, sizes, counts)
    return sizes, counts


def _measure(client: Redis, batch: list[bytes], sizes: Counter, counts: Counter) -> None:
    with client.pipeline(transaction=False) as pipe:
        for key in batch:
            pipe.memory_usage(key, samples=0)
        for key, size in zip(batch, pipe.execute()):
            group = _group(key.decode())
            sizes[group] += size or 0
            counts[group] += 1


def _encodings(client: Redis) -> dict[str, str]:
    found = {}
    for pattern in ("rq:job:*", f"{keys.CARD_PREFIX}*"):
        for key in client.scan_iter(match=pattern, count=1000):
            found[_group(key.decode())] = client.object("encoding", key).decode()
            break
    return found


def run(workdir: Path, rounds: int, n: int) -> RowResult:
    result = RowResult("memory", f"Redis memory per pending deletion ({n:,} booked)")
    servers = {
        (config, side): RedisSide({"--hash-max-listpack-value": value} if value else None).start()
        for config, value in CONFIGS.items()
        for side in ("jobttl", "baseline")
    }
    namespace_count = 50
    tag = iter(range(1, 1000))

    def book(config: str, side: str) -> None:
        redis = servers[(config, side)]
        redis.flush()
        client = redis.client
        client.execute_command("MEMORY", "PURGE")
        before = client.info("memory")["used_memory"]
        t = next(tag)
        now = time.time()
        refs = [(f"team-{i % namespace_count}", f"m{t}-job-{i}", f"{t:08x}-0000-4000-8000-{i:012x}") for i in range(n)]
        if side == "jobttl":
            objects = realistic_tfjobs(refs, state="succeeded", at=now - 60, ttl=TTL)
            book_jobttl(redis, objects, GUARDED)
        else:
            queue = Queue(QUEUE, connection=Redis.from_url(redis.url))
            when = datetime.fromtimestamp(int(now - 60 + TTL), tz=timezone.utc)
            with client.pipeline() as pipe:
                for ns, name, uid in refs:
                    queue.enqueue_at(when, BASELINE_TASK, ns, name, uid, pipeline=pipe)
                pipe.execute()
        after = client.info("memory")["used_memory"]
        sizes, counts = usage_by_group(client)
        audit = sizes.pop("audit stream", 0)
        entries = client.xlen(keys.AUDIT_STREAM) if audit else 0
        per = (after - before - audit) / n
        label = f"{'jobttl' if side == 'jobttl' else 'plain RQ enqueue_at'}, listpack-value {config}"
        result.side(label, "B/pending", higher_is_better=False).add(
            per, audit_bytes_per_entry=audit / entries if entries else None
        )
        result.facts[f"{label}: bytes per pending deletion by key"] = {g: round(s / n) for g, s in sizes.items()}
        result.facts[f"{label}: keys per pending deletion"] = {g: round(c / n, 3) for g, c in counts.items()}
        result.facts[f"{label}: encodings"] = _encodings(client)
        if entries:
            result.facts["audit stream bytes per entry"] = round(audit / entries)
        client.flushall()

    try:
        steps = []
        for config in CONFIGS:
            steps += [
                (f"jobttl, listpack-value {config}", lambda c=config: book(c, "jobttl")),
                (f"plain RQ, listpack-value {config}", lambda c=config: book(c, "baseline")),
            ]
        interleave(rounds, steps)
    finally:
        for server in servers.values():
            server.stop()
    for config in CONFIGS:
        result.lines.append(
            Line(
                f"5. Redis memory per pending deletion (hash-max-listpack-value {config})",
                f"jobttl, listpack-value {config}",
                f"plain RQ enqueue_at, listpack-value {config}",
                "<= 1.2",
            )
        )
    return result
