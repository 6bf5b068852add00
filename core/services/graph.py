"""The composition root: the one place the object graph every jobttl process shares is built.

The sink, the worker and the command each used to connect Redis and build a schedule, an
audit trail and a reconciler on it, three times alike; now each asks `build` and adds only
what is its own: the sink's and the worker's contexts are a `Graph` with their own parts
beside (the sink: its probe connection and sender check; the worker: its API client, clock,
rate limit and Events); the command uses the graph as it is. The graph:

    Redis (with the process's timeouts) ─┬─ Schedule (the queue, retries, the worker's task names)
                                         ├─ Audit
                                         └─ Reconciler (policy, guard, the store's write protocol)
    Metrics (when the process serves them, with the schedule's gauges), the enabled kinds.

What RQ jobs run is the worker's declaration (`jobttl.core.store.tasks`), read here from the
installed package: the sink books them without loading any worker code.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from redis import Redis

from jobttl.core.domain.kinds.registry import KindRegistry
from jobttl.core.runtime.config import Settings
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.services.operations import Operations
from jobttl.core.services.recent import Recent
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.store import gauges, redisconn
from jobttl.core.store.audit import Audit
from jobttl.core.store.schedule import Schedule
from jobttl.core.store.tasks import Tasks


@dataclass
class Graph:
    """The shared parts; a process's context extends it with its own (jobttl.sink.context, jobttl.core.services.worker_graph)."""

    settings: Settings
    redis: Redis
    schedule: Schedule
    audit: Audit
    reconciler: Reconciler
    kinds: KindRegistry
    metrics: Metrics | None  # None in the command, which serves no metrics

    def operations(self, *, read_only: bool = False) -> Operations:
        """What operators ask and do, on this graph. `read_only` (the sink's read API): without the
        reconciler, so that no route can write (a write raises)."""
        return Operations(
            self.redis, self.schedule, self.audit, None if read_only else self.reconciler, kinds=self.kinds.kinds
        )

    def parts(self) -> dict[str, Any]:
        """The shared parts by name, to build a process's context on (`SinkContext(**graph.parts(), ...)`)."""
        return {f.name: getattr(self, f.name) for f in fields(Graph)}


def build(
    settings: Settings,
    role: redisconn.Role,
    *,
    redis: Redis | None = None,
    min_replicas: int = 0,
    metrics: bool = True,
    recent: Recent | None = None,
    tasks: Tasks | None = None,
) -> Graph:
    """The shared graph for a process of `role` (redisconn.SINK, WORKER or CLI: its timeouts).

    `redis` replaces the connection the settings name (tests); `min_replicas`: replicas each
    write waits for (the sink's JOBTTL_SINK_MIN_REPLICAS); `metrics`: whether this process
    serves metrics (the schedule's gauges are read from Redis at each scrape); `recent`: the
    sink's memory of decisions just applied; `tasks`: the task names, when not the installed
    worker's (tests)."""
    if redis is None:
        redis = redisconn.connect(settings.redis_url, role, settings.redis_ca_file, min_replicas=min_replicas)
    served = Metrics() if metrics else None
    if served is not None:
        gauges.register(served.registry, redis, settings.queue_name)
    schedule = Schedule.from_settings(redis, settings, tasks)
    audit = Audit.from_settings(redis, settings, served)
    reconciler = Reconciler.from_settings(schedule, audit, settings, served, recent)
    return Graph(settings, redis, schedule, audit, reconciler, KindRegistry(settings.policy.kinds), served)
