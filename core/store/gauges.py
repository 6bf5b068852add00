"""The schedule's gauges, read from Redis at scrape time, for a process's metrics registry.

Pending, overdue, what dry run would delete, held, stuck, workers, the scheduler lock, the last
resync, the kinds not served: read in one round trip when Prometheus scrapes, so every process
reports the same, true numbers and alerts can use any one of them. A Redis that does not answer
gives no sample rather than a wrong one (the alerts on absent() catch it).
"""

from __future__ import annotations

import json
import time

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from redis import Redis
from redis.exceptions import RedisError
from rq.utils import utcparse

from jobttl.core.store import keys, scripts
from jobttl.core.store.capacity import RESERVE, Capacity
from jobttl.core.domain.kinds.registry import group_of, split_group_kind

# An overdue deletion: due more than this long ago and still pending (a dry-run record never is:
# dry run deletes nothing, so nothing of it is late; it is counted as what dry run would delete).
OVERDUE_AFTER = 60


def register(registry: CollectorRegistry, redis: Redis, queue_name: str) -> None:
    """Add the schedule's gauges and the workers' heartbeat to `registry`."""
    registry.register(_ScheduleCollector(redis, queue_name))
    registry.register(_HeartbeatCollector(redis, queue_name))
    registry.register(_CapacityCollector(redis))


class _ScheduleCollector:
    """The schedule's gauges, read from Redis at scrape time."""

    def __init__(self, redis: Redis, queue_name: str):
        self.redis = redis
        self.queue_name = queue_name

    def collect(self):
        now = time.time()
        try:
            with self.redis.pipeline(transaction=False) as pipe:
                pipe.zcard(keys.PENDING_INDEX)
                # Overdue, and dry-run records due now, from the index and the dry-run sets
                # beside it: a handful of ZCOUNTs, however many records there are.
                count_due = scripts.CountDue(times=(now - OVERDUE_AFTER, now))
                count_due.queue(pipe)
                pipe.hlen(keys.HELD)
                pipe.zcard(keys.TERMINATING)
                pipe.hlen(keys.STUCK)
                pipe.scard(f"rq:workers:{self.queue_name}")
                pipe.exists(f"rq:scheduler-lock:{self.queue_name}")
                pipe.get(keys.RESYNC_LAST_SUCCESS)
                pipe.get(keys.RESYNC_LAST)
                pending, due, held, terminating, stuck, workers, scheduler, last, report = scripts.execute(pipe)
        except RedisError:
            return  # no sample is better than a wrong one; alerts on absent() catch it
        counts = count_due.counts(due)
        overdue = counts.due[0]
        for name, help_, value in (
            ("jobttl_pending_deletions", "Deletions scheduled and not yet done", pending),
            (
                "jobttl_overdue_deletions",
                f"Pending deletions due more than {OVERDUE_AFTER}s ago (dry-run records not counted)",
                overdue,
            ),
            ("jobttl_held_deletions", "Deletions held by the blast-radius guard until confirmed", held),
            ("jobttl_terminating_deletions", "Deleted jobs still present (finalizers running)", terminating),
            ("jobttl_stuck_deletions", "Deleted jobs still present after JOBTTL_STUCK_AFTER", stuck),
            ("jobttl_workers", "RQ workers registered on the queue", workers),
            ("jobttl_scheduler_active", "1 when a worker holds RQ's scheduler lock", scheduler),
            (
                "jobttl_resync_last_success_timestamp_seconds",
                "When the last complete resync finished",
                float(last) if last else 0.0,
            ),
        ):
            gauge = GaugeMetricFamily(name, help_)
            gauge.add_metric([], value)
            yield gauge
        yield _would_delete(counts)
        yield _kinds_not_served(report)


def _would_delete(counts: scripts.DueCounts) -> GaugeMetricFamily:
    would_delete = GaugeMetricFamily(
        "jobttl_dry_run_would_delete",
        "Dry-run records due now: what dry run would have deleted by now, by kind",
        labels=["kind", "group"],
    )
    for group_kind, (_, due_now) in sorted(counts.dry_run.items()):
        would_delete.add_metric(list(split_group_kind(group_kind)), due_now)
    return would_delete


def _kinds_not_served(report: bytes | None) -> GaugeMetricFamily:
    # The kinds the last resync found the cluster does not serve (no CRD): 1 each. The report
    # names them apiVersion/Kind: the version is a label too (MPIJob is served as v1 or v2beta1).
    gauge = GaugeMetricFamily(
        "jobttl_kind_not_served",
        "1 for each enabled kind the last resync found the cluster does not serve (no CRD installed)",
        labels=["kind", "group", "version"],
    )
    try:
        missing = json.loads(report).get("missing_kinds") or [] if report else []
    except ValueError:
        missing = []
    for name in missing:
        api_version, _, kind = str(name).rpartition("/")
        gauge.add_metric([kind, group_of(api_version), api_version.rpartition("/")[2]], 1.0)
    return gauge


class _HeartbeatCollector:
    """The newest RQ heartbeat among the queue's workers, read from Redis at scrape time.

    ``jobttl_workers`` counts registrations, and a worker killed without a goodbye stays
    registered until a live worker's maintenance cleans up; with every worker dead, nobody
    does, so it never drops to 0. A heartbeat's age tells instead: RQ refreshes it every few
    seconds while a worker idles and when it starts each job, and its registration (the hash
    holding it) expires after worker_ttl + 60 s. 0 when no registered worker has one.
    """

    def __init__(self, redis: Redis, queue_name: str):
        self.redis = redis
        self.queue_name = queue_name

    def collect(self):
        try:
            workers = self.redis.smembers(f"rq:workers:{self.queue_name}")
            with self.redis.pipeline(transaction=False) as pipe:
                for worker_key in workers:
                    pipe.hget(worker_key, "last_heartbeat")
                beats = pipe.execute() if workers else []
        except RedisError:
            return  # as for the schedule's gauges: no sample rather than a wrong one
        newest = max((_timestamp(b) for b in beats if b), default=0.0)
        gauge = GaugeMetricFamily(
            "jobttl_worker_last_heartbeat_timestamp_seconds",
            "The newest RQ heartbeat of a worker registered on the queue (0: none)",
        )
        gauge.add_metric([], newest)
        yield gauge


class _CapacityCollector:
    """How full Redis is (jobttl.core.store.capacity), read from INFO memory at scrape time."""

    def __init__(self, redis: Redis):
        self.redis = redis

    def collect(self):
        try:
            capacity = Capacity.read(self.redis)
        except RedisError:
            return  # as for the schedule's gauges: no sample rather than a wrong one
        for name, help_, value in (
            (
                "jobttl_redis_full",
                f"1 while Redis is full: past {1 - RESERVE:.0%} of its maxmemory, where the sink "
                "books nothing more (events get 503) and the worker deletes from its reserve, "
                "or past maxmemory, where Redis refuses writes",
                float(capacity.full),
            ),
            (
                "jobttl_redis_refusing_writes",
                "1 while Redis is past its maxmemory and refuses writes (noeviction)",
                float(capacity.refusing),
            ),
            ("jobttl_redis_used_memory_bytes", "Memory Redis counts against its maxmemory", capacity.used),
            ("jobttl_redis_maxmemory_bytes", "Redis's maxmemory (0: none)", capacity.maxmemory),
        ):
            gauge = GaugeMetricFamily(name, help_)
            gauge.add_metric([], value)
            yield gauge


def _timestamp(rq_time: bytes) -> float:
    try:
        return utcparse(rq_time.decode()).timestamp()
    except ValueError:
        return 0.0
