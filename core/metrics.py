"""Prometheus metrics, one registry per process (the sink's, or a worker's).

Each process exposes its own: the sink at ``/metrics``, a worker on its metrics port.
Counters are incremented where things happen (the audit trail counts decisions, the API
client times requests). The schedule's gauges (pending, overdue, what dry run would delete,
held, stuck, workers, the scheduler lock, the last resync) are read from Redis at scrape time
in one round trip, so every process reports the same, true numbers; alerts can use any one of them.

A series about a kind carries its API ``group`` beside ``kind`` (kube-state-metrics' custom
resource metrics and the API server's own do the same): batch/v1 Job (``group="batch"``) and
Volcano's Job (``group="batch.volcano.sh"``) are two series, and ``sum by (kind)`` still adds
them up. The core group is "" (as the API server reports it), which Prometheus shows as no label.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from redis import Redis
from redis.exceptions import RedisError
from rq.utils import utcparse

from jobttl.core import keys, scripts
from jobttl.core.kinds import group_of, split_group_kind

LATENESS_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86400)
# An overdue deletion: due more than this long ago and still pending (a dry-run record never is:
# dry run deletes nothing, so nothing of it is late; it is counted as what dry run would delete).
OVERDUE_AFTER = 60


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
                ("jobttl_overdue_deletions",
                 f"Pending deletions due more than {OVERDUE_AFTER}s ago (dry-run records not counted)", overdue),
                ("jobttl_held_deletions", "Deletions held by the blast-radius guard until confirmed", held),
                ("jobttl_terminating_deletions", "Deleted jobs still present (finalizers running)", terminating),
                ("jobttl_stuck_deletions", "Deleted jobs still present after JOBTTL_STUCK_AFTER", stuck),
                ("jobttl_workers", "RQ workers registered on the queue", workers),
                ("jobttl_scheduler_active", "1 when a worker holds RQ's scheduler lock", scheduler),
                ("jobttl_resync_last_success_timestamp_seconds", "When the last complete resync finished",
                 float(last) if last else 0.0)):
            gauge = GaugeMetricFamily(name, help_)
            gauge.add_metric([], value)
            yield gauge
        would_delete = GaugeMetricFamily("jobttl_dry_run_would_delete",
                                         "Dry-run records due now: what dry run would have deleted by now, by kind",
                                         labels=["kind", "group"])
        for group_kind, (_, due_now) in sorted(counts.dry_run.items()):
            would_delete.add_metric(list(split_group_kind(group_kind)), due_now)
        yield would_delete
        # The kinds the last resync found the cluster does not serve (no CRD): 1 each. The report
        # names them apiVersion/Kind: the version is a label too (MPIJob is served as v1 or v2beta1).
        gauge = GaugeMetricFamily("jobttl_kind_not_served", "1 for each enabled kind the last resync found the "
                                                            "cluster does not serve (no CRD installed)",
                                  labels=["kind", "group", "version"])
        try:
            missing = json.loads(report).get("missing_kinds") or [] if report else []
        except ValueError:
            missing = []
        for name in missing:
            api_version, _, kind = str(name).rpartition("/")
            gauge.add_metric([kind, group_of(api_version), api_version.rpartition("/")[2]], 1.0)
        yield gauge


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
        gauge = GaugeMetricFamily("jobttl_worker_last_heartbeat_timestamp_seconds",
                                  "The newest RQ heartbeat of a worker registered on the queue (0: none)")
        gauge.add_metric([], newest)
        yield gauge


def _timestamp(rq_time: bytes) -> float:
    try:
        return utcparse(rq_time.decode()).timestamp()
    except ValueError:
        return 0.0


# Label sets the alerts (knative/monitoring/) read with increase(): a series that is born at
# 1 has no earlier sample to increase from, so the first failure would go unseen. They are
# exported at 0 from the start instead.
ALERTED_DECISIONS = (("failed", ""), ("deleted", ""), ("delete-requested", ""))


class Metrics:
    def __init__(self, redis: Redis | None = None, queue_name: str = "jobttl"):
        self.registry = CollectorRegistry()
        r = self.registry
        self.events = Counter("jobttl_sink_events", "CloudEvents received, by type and outcome",
                              ["type", "outcome"], registry=r)
        self.decisions = Counter("jobttl_decisions", "Decisions recorded in the audit trail, by event and reason",
                                 ["event", "reason"], registry=r)
        self.deletions = Counter("jobttl_deletions", "Jobs deleted, by kind and namespace",
                                 ["kind", "group", "namespace"], registry=r)
        self.would_delete = Counter("jobttl_would_delete", "What dry run would have deleted (recorded, not deleted), "
                                    "by kind", ["kind", "group"], registry=r)
        self.failures = Counter("jobttl_failures", "Failed or refused deletion attempts, by reason", ["reason"],
                                registry=r)
        self.invalid_ttls = Counter("jobttl_invalid_ttl", "Finished jobs whose TTL is negative or not an integer",
                                    ["kind", "group"], registry=r)
        self.lateness = Histogram("jobttl_deletion_lateness_seconds", "Actual deletion time minus due time",
                                  buckets=LATENESS_BUCKETS, registry=r)
        self.api_latency = Histogram("jobttl_api_request_duration_seconds", "Kubernetes API request latency",
                                     ["verb"], registry=r)
        self.resync_duration = Histogram("jobttl_resync_duration_seconds", "How long resyncs take",
                                         buckets=(1, 5, 15, 60, 300, 900, 3600), registry=r)
        self.resync_objects = Counter("jobttl_resync_objects", "What resyncs did, by result", ["result"], registry=r)
        self.resync_runs = Counter("jobttl_resync_runs", "Resyncs run, by status (done, held, incomplete)",
                                   ["status"], registry=r)
        self.archive_bytes = Counter("jobttl_archive_bytes", "Bytes written to the archive", registry=r)
        self.archive_failures = Counter("jobttl_archive_failures", "Archives that could not be written", registry=r)
        self.archive_pruned = Counter("jobttl_archive_pruned", "Archives removed by the retention", registry=r)
        self.notices = Counter("jobttl_deletion_notices", "Notices posted as Events: DeletionScheduled by stage "
                               "(job, pods), InvalidTTL Warnings as invalid-ttl", ["stage"], registry=r)
        self.events_dropped = Counter("jobttl_kubernetes_events_dropped",
                                      "Kubernetes Events not recorded (queue full or API error)", registry=r)
        for event, reason in ALERTED_DECISIONS:
            self.decisions.labels(event, reason)
        if redis is not None:
            self.registry.register(_ScheduleCollector(redis, queue_name))
            self.registry.register(_HeartbeatCollector(redis, queue_name))

    def watch_clock(self, clock) -> None:
        """Export a ReferenceClock's offsets at scrape time: only processes that measure one
        (the workers) report a clock, so a sink never says its unmeasured clock is wrong."""
        r = self.registry
        self.clock_offset = Gauge("jobttl_clock_offset_seconds",
                                  "Reference clock minus this host's clock, by reference (apiserver, redis)",
                                  ["reference"], registry=r)
        self.clock_ok = Gauge("jobttl_clock_ok", "1 when the clocks agree within JOBTTL_CLOCK_SKEW_BOUND, else 0",
                              registry=r)

        def offset(pick: Callable) -> Callable[[], float]:
            def read() -> float:
                value = pick(clock)
                return value.seconds if value is not None else float("nan")
            return read
        self.clock_offset.labels("apiserver").set_function(offset(lambda c: c.api))
        self.clock_offset.labels("redis").set_function(offset(lambda c: c.redis))
        self.clock_ok.set_function(lambda: 0.0 if clock.problem() else 1.0)
