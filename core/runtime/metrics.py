"""Prometheus metrics, one registry per process (the sink's, or a worker's).

Each process exposes its own: the sink at ``/metrics``, a worker on its metrics port.
Counters are incremented where things happen (the audit trail counts decisions, the API
client times requests). The schedule's gauges, read from Redis at scrape time, are
`jobttl.core.store.gauges`, registered by the processes that have a Redis.

A series about a kind carries its API ``group`` beside ``kind`` (kube-state-metrics' custom
resource metrics and the API server's own do the same): batch/v1 Job (``group="batch"``) and
Volcano's Job (``group="batch.volcano.sh"``) are two series, and ``sum by (kind)`` still adds
them up. The core group is "" (as the API server reports it), which Prometheus shows as no label.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENESS_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86400)


# Label sets the alerts (knative/monitoring/) read with increase(): a series that is born at
# 1 has no earlier sample to increase from, so the first failure would go unseen. They are
# exported at 0 from the start instead.
ALERTED_DECISIONS = (("failed", ""), ("deleted", ""), ("delete-requested", ""))


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self._define_decisions(self.registry)
        self._define_resyncs_and_archives(self.registry)
        self._define_notices_and_processes(self.registry)
        for reason in ("dead", "stuck", "overdue"):  # at 0 from the start: the alert reads the series
            for action in ("restart", "exit"):
                self.scheduler_stalls.labels(reason, action)
        for event, reason in ALERTED_DECISIONS:
            self.decisions.labels(event, reason)

    def _define_decisions(self, r: CollectorRegistry) -> None:
        """What the sink received and decided, what the worker deleted, and how the API answered."""
        self.events = Counter(
            "jobttl_sink_events", "CloudEvents received, by type and outcome", ["type", "outcome"], registry=r
        )
        self.decisions = Counter(
            "jobttl_decisions",
            "Decisions recorded in the audit trail, by event and reason",
            ["event", "reason"],
            registry=r,
        )
        self.deletions = Counter(
            "jobttl_deletions", "Jobs deleted, by kind and namespace", ["kind", "group", "namespace"], registry=r
        )
        self.would_delete = Counter(
            "jobttl_would_delete",
            "What dry run would have deleted (recorded, not deleted), by kind",
            ["kind", "group"],
            registry=r,
        )
        self.failures = Counter(
            "jobttl_failures", "Failed or refused deletion attempts, by reason", ["reason"], registry=r
        )
        self.invalid_ttls = Counter(
            "jobttl_invalid_ttl", "Finished jobs whose TTL is negative or not an integer", ["kind", "group"], registry=r
        )
        self.policy_errors = Counter(
            "jobttl_policy_errors",
            "Decisions a kind declaration could not make (its CEL "
            "TTL erred, ran over its cost or gave no TTL): the object is kept, and the error "
            "is the policy's, by declaration (apiVersion/Kind)",
            ["declaration"],
            registry=r,
        )
        self.lateness = Histogram(
            "jobttl_deletion_lateness_seconds",
            "Actual deletion time minus due time",
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.api_latency = Histogram(
            "jobttl_api_request_duration_seconds", "Kubernetes API request latency", ["verb"], registry=r
        )

    def _define_resyncs_and_archives(self, r: CollectorRegistry) -> None:
        self.resync_duration = Histogram(
            "jobttl_resync_duration_seconds",
            "How long resyncs take",
            buckets=(1, 5, 15, 60, 300, 900, 3600),
            registry=r,
        )
        self.resync_objects = Counter("jobttl_resync_objects", "What resyncs did, by result", ["result"], registry=r)
        self.resync_runs = Counter(
            "jobttl_resync_runs", "Resyncs run, by status (done, held, incomplete)", ["status"], registry=r
        )
        self.archive_bytes = Counter("jobttl_archive_bytes", "Bytes written to the archive", registry=r)
        self.archive_failures = Counter("jobttl_archive_failures", "Archives that could not be written", registry=r)
        self.archive_pruned = Counter("jobttl_archive_pruned", "Archives removed by the retention", registry=r)

    def _define_notices_and_processes(self, r: CollectorRegistry) -> None:
        """Notices and notifications, and what the worker's own process watches (foreign jobs, Events
        dropped, its scheduler)."""
        self.notices = Counter(
            "jobttl_deletion_notices",
            "Notices posted as Events: DeletionScheduled by stage (job, pods), InvalidTTL Warnings as invalid-ttl",
            ["stage"],
            registry=r,
        )
        self.notifications = Counter(
            "jobttl_notifications",
            "Notification messages by channel (the policy's name "
            "for it, never its URL), event and outcome: sent, failed (tried again later), "
            "dropped (given up), refused (a job asked for a channel that does not take its "
            "messages)",
            ["channel", "event", "outcome"],
            registry=r,
        )
        self.notify_bad_entries = Counter(
            "jobttl_notify_bad_entries",
            "What the notifier could not read and skipped "
            "(logged as notify-bad-entry): an audit entry (stage read) or a digest's "
            "buffer (stage send) that is not what jobttl writes",
            ["stage"],
            registry=r,
        )
        self.foreign_jobs = Counter(
            "jobttl_foreign_jobs",
            "RQ jobs in the worker's queue that jobttl did not book "
            "(a function that is not one of its tasks, a callback, a webhook): failed "
            "without importing anything",
            registry=r,
        )
        self.events_dropped = Counter(
            "jobttl_kubernetes_events_dropped", "Kubernetes Events not recorded (queue full or API error)", registry=r
        )
        # The worker's watchdog over RQ's scheduler process (jobttl.worker.watchdog): due deletions
        # that stop moving onto the queue, by why (dead, stuck, overdue) and what it did (restart, exit).
        self.scheduler_stalls = Counter(
            "jobttl_scheduler_stalled",
            "Times the worker found its scheduler "
            "process no longer moving due deletions onto the queue, by reason (dead, "
            "stuck: no heartbeat, overdue: due deletions not moving) and action "
            "(restart, exit)",
            ["reason", "action"],
            registry=r,
        )

    def watch_clock(self, clock) -> None:
        """Export a ReferenceClock's offsets at scrape time: only processes that measure one
        (the workers) report a clock, so a sink never says its unmeasured clock is wrong."""
        r = self.registry
        self.clock_offset = Gauge(
            "jobttl_clock_offset_seconds",
            "Reference clock minus this host's clock, by reference (apiserver, redis)",
            ["reference"],
            registry=r,
        )
        self.clock_ok = Gauge(
            "jobttl_clock_ok", "1 when the clocks agree within JOBTTL_CLOCK_SKEW_BOUND, else 0", registry=r
        )

        def offset(pick: Callable) -> Callable[[], float]:
            def read() -> float:
                value = pick(clock)
                return value.seconds if value is not None else float("nan")

            return read

        self.clock_offset.labels("apiserver").set_function(offset(lambda c: c.api))
        self.clock_offset.labels("redis").set_function(offset(lambda c: c.redis))
        self.clock_ok.set_function(lambda: 0.0 if clock.problem() else 1.0)
