"""What the sink's routes share: one object graph per process, built from settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from redis import Redis

from jobttl.core.store import gauges, redisconn, scripts, upgrade
from jobttl.core.store.audit import Audit
from jobttl.core.runtime.config import Settings
from jobttl.core.domain.kinds import KindRegistry
from jobttl.core.kube.client import KubeClient, load_api_client
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.services.operations import Operations
from jobttl.core.services.recent import Recent
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.store.schedule import Schedule
from jobttl.sink.auth import SenderCheck


class Unavailable(Exception):
    """A dependency (Redis, the API server) is down: answer 503 so the sender retries."""


@dataclass
class SinkContext:
    settings: Settings
    redis: Redis
    probe: Redis  # shorter timeouts, for /readyz
    schedule: Schedule
    audit: Audit
    reconciler: Reconciler
    kinds: KindRegistry
    metrics: Metrics
    senders: SenderCheck
    _kube: KubeClient | None = field(default=None, repr=False)

    @classmethod
    def build(cls, settings: Settings, redis: Redis | None = None, kube: KubeClient | None = None) -> SinkContext:
        probe = redis
        if redis is None:
            # Short timeouts: a sink stuck on a dead Redis should say 503 fast, not hang Knative.
            redis = redisconn.connect(settings.redis_url, redisconn.SINK, settings.redis_ca_file,
                                      min_replicas=settings.sink_min_replicas)
            probe = redisconn.client(settings.redis_url, redisconn.PROBE, settings.redis_ca_file)
        metrics = Metrics()
        gauges.register(metrics.registry, redis, settings.queue_name)
        schedule = Schedule.from_settings(redis, settings)
        audit = Audit.from_settings(redis, settings, metrics)
        recent = Recent(settings.sink_dedupe_seconds) if settings.sink_dedupe_seconds else None
        context = cls(settings, redis, probe, schedule, audit, Reconciler.from_settings(schedule, audit, settings,
                                                                                      metrics, recent),
                      KindRegistry(settings.policy.kinds), metrics, SenderCheck.from_settings(settings), kube)
        try:
            upgrade.ensure(redis, audit.tombstone_seconds)
            scripts.load(redis)
        except Exception:  # noqa: BLE001 - Redis may be down at start; every request retries it
            pass
        return context

    @property
    def kube(self) -> KubeClient:
        # Resource mode never needs the API, so the client is only loaded once needed.
        if self._kube is None:
            try:
                self._kube = KubeClient(load_api_client(self.settings.kubeconfig), self.settings.api_timeout,
                                        component="sink-reference", metrics=self.metrics)
            except Exception as exc:  # any loader failure: no kubeconfig, no service account
                raise Unavailable(f"cannot load Kubernetes credentials for a Reference-mode event: {exc}") from exc
        return self._kube

    def operations(self) -> Operations:
        return Operations(self.redis, self.schedule, self.audit, kinds=self.kinds.kinds)
