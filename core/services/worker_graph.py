"""What a worker process shares between its tasks: the process's object graph (jobttl.core.services.graph)
with the worker's own parts, one API connection pool."""

from __future__ import annotations

import time
from dataclasses import dataclass

from jobttl.core.domain.decisions.clock import ReferenceClock
from jobttl.core.domain.deploy.permissions import permissions
from jobttl.core.kube.archivestore import open_store
from jobttl.core.kube.client import KubeClient, load_api_client
from jobttl.core.runtime.config import Settings
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.services import graph
from jobttl.core.services.install import InstallReview
from jobttl.core.store import redisconn
from jobttl.core.store.clocks import ClockReadings
from jobttl.core.store.ratelimit import RateLimit
from jobttl.core.services.archiving import Archiver
from jobttl.core.services.scheduled_events import Notices
from jobttl.core.services.events import EventRecorder


@dataclass(kw_only=True)
class WorkerGraph(graph.Graph):
    metrics: Metrics  # the worker serves its metrics
    clock: ReferenceClock
    kube: KubeClient
    rate_limit: RateLimit
    events: EventRecorder
    install: InstallReview  # the first-run review (jobttl.core.services.install)
    archiver: Archiver | None = None  # when the policy archives before deleting

    @classmethod
    def from_settings(cls, settings: Settings, notices: bool = False) -> WorkerGraph:
        """`notices`: this process posts the DeletionScheduled outbox (`jobttl worker` does)."""
        shared = graph.build(settings, redisconn.WORKER)
        redis, metrics = shared.redis, shared.metrics
        clock = ReferenceClock(settings.clock_skew_bound)
        metrics.watch_clock(clock)
        policy = settings.policy
        # Pods, logs and Events only when the policy archives; deleting pods only when it stages
        # cleanup: the client refuses the rest, as the RBAC of the base manifests does.
        kube = KubeClient(
            load_api_client(settings.kubeconfig),
            timeout=settings.api_timeout,
            metrics=metrics,
            clock=clock,
            granted=permissions("worker", archive=policy.archiving, pod_cleanup=policy.pod_stages),
        )
        archiver = Archiver(kube, open_store(policy.archive_store), metrics) if policy.archiving else None
        posts = Notices(redis, shared.schedule, shared.audit, kube, metrics) if notices else None
        return cls(
            **shared.parts(),
            clock=clock,
            kube=kube,
            rate_limit=RateLimit(redis, settings.delete_rate),
            events=EventRecorder(kube, metrics, notices=posts),
            install=InstallReview.from_settings(redis, kube, settings),
            archiver=archiver,
        )

    def measure_clocks(self, name: str | None = None) -> str | None:
        """Read Redis's and the API server's clocks now; publish the reading; return any problem."""
        sent = time.time()
        clocks = ClockReadings(self.redis)
        seconds, micros = clocks.redis_time()
        self.clock.observe_redis(seconds, micros, sent, time.time())
        try:
            self.kube.version()
        except Exception:  # noqa: BLE001 - an API outage is not a clock problem; the last reading stands
            pass
        if name is not None:
            # Stamped with Redis's clock too: `jobttl status` judges how fresh a reading is by
            # Redis's clock, not by the clock of a worker whose own clock may be the problem.
            reading = {**self.clock.as_dict(), "at": time.time(), "redisTime": int(seconds)}
            clocks.publish(name, reading)
        return self.clock.problem()
