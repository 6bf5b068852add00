"""Prometheus metrics, one registry per process (the sink's, or a worker's).

Each process exposes its own: the sink at ``/metrics``, a worker on its metrics port.
Counters are incremented where things happen (the audit trail counts decisions, the API
client times requests); the pending-deletions gauge is read from Redis at scrape time, so
every process reports the same, true number.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from redis import Redis
from redis.exceptions import RedisError

LATENESS_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86400)


class _PendingCollector:
    def __init__(self, redis: Redis):
        self.redis = redis

    def collect(self):
        from worker.schedule import PENDING_INDEX  # worker imports metrics; avoid the cycle

        gauge = GaugeMetricFamily("jobttl_pending_deletions", "Deletions scheduled and not yet done")
        try:
            gauge.add_metric([], self.redis.zcard(PENDING_INDEX))
        except RedisError:
            return  # no sample is better than a wrong one; jobttl_up-style alerts use /readyz
        yield gauge


class Metrics:
    def __init__(self, redis: Redis | None = None):
        self.registry = CollectorRegistry()
        r = self.registry
        self.events = Counter("jobttl_sink_events", "CloudEvents received, by type and outcome",
                              ["type", "outcome"], registry=r)
        self.decisions = Counter("jobttl_decisions", "Decisions recorded in the audit trail, by event and reason",
                                 ["event", "reason"], registry=r)
        self.deletions = Counter("jobttl_deletions", "Jobs deleted, by kind and namespace", ["kind", "namespace"],
                                 registry=r)
        self.failures = Counter("jobttl_failures", "Failed deletion attempts, by reason", ["reason"], registry=r)
        self.invalid_ttls = Counter("jobttl_invalid_ttl", "Finished jobs whose TTL is negative or not an integer",
                                    ["kind"], registry=r)
        self.lateness = Histogram("jobttl_deletion_lateness_seconds", "Actual deletion time minus due time",
                                  buckets=LATENESS_BUCKETS, registry=r)
        self.api_latency = Histogram("jobttl_api_request_duration_seconds", "Kubernetes API request latency",
                                     ["verb"], registry=r)
        self.resync_duration = Histogram("jobttl_resync_duration_seconds", "How long resyncs take",
                                         buckets=(1, 5, 15, 60, 300, 900, 3600), registry=r)
        self.resync_objects = Counter("jobttl_resync_objects", "What resyncs did, by result", ["result"], registry=r)
        if redis is not None:
            self.registry.register(_PendingCollector(redis))
