"""What the sink's routes share: the process's object graph (jobttl.core.services.graph) and the sink's own parts."""

from __future__ import annotations

from dataclasses import dataclass, field

from redis import Redis

from jobttl.core.kube.client import KubeClient, load_api_client
from jobttl.core.runtime.config import Settings
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.services import graph
from jobttl.core.services.operations import Operations
from jobttl.core.services.recent import Recent
from jobttl.core.store import redisconn, scripts, upgrade
from jobttl.sink.auth import ReaderCheck, SenderCheck


class Unavailable(Exception):
    """A dependency (Redis, the API server) is down: answer 503 so the sender retries."""


@dataclass(kw_only=True)
class SinkContext(graph.Graph):
    metrics: Metrics  # the sink serves its metrics (/metrics)
    probe: Redis  # shorter timeouts, for /readyz
    senders: SenderCheck
    readers: ReaderCheck
    _kube: KubeClient | None = field(default=None, repr=False)

    @classmethod
    def build(cls, settings: Settings, redis: Redis | None = None, kube: KubeClient | None = None) -> SinkContext:
        """`redis` and `kube` replace what the settings name (tests)."""
        recent = Recent(settings.sink_dedupe_seconds) if settings.sink_dedupe_seconds else None
        # Short timeouts (redisconn.SINK): a sink stuck on a dead Redis should say 503 fast, not hang
        # Knative. Its writes may wait for replicas: an event is acknowledged once its booking
        # would survive a failover.
        shared = graph.build(
            settings, redisconn.SINK, redis=redis, min_replicas=settings.sink_min_replicas, recent=recent
        )
        probe = (
            redis
            if redis is not None
            else redisconn.client(settings.redis_url, redisconn.PROBE, settings.redis_ca_file)
        )
        context = cls(
            **shared.parts(),
            probe=probe,
            senders=SenderCheck.from_settings(settings),
            readers=ReaderCheck.from_settings(settings),
            _kube=kube,
        )
        try:
            upgrade.ensure(context.redis, context.audit.tombstone_seconds)
            scripts.load(context.redis)
        except Exception:  # noqa: BLE001 - Redis may be down at start; every request retries it
            pass
        return context

    def operations(self, *, read_only: bool = True) -> Operations:
        """The read API's: questions only (`jobttl.sink.api` serves no write), unless asked otherwise."""
        return super().operations(read_only=read_only)

    @property
    def kube(self) -> KubeClient:
        # Resource mode never needs the API, so the client is only loaded once needed.
        if self._kube is None:
            try:
                self._kube = KubeClient(
                    load_api_client(self.settings.kubeconfig),
                    self.settings.api_timeout,
                    component="sink-reference",
                    metrics=self.metrics,
                )
            except Exception as exc:  # any loader failure: no kubeconfig, no service account
                raise Unavailable(f"cannot load Kubernetes credentials for a Reference-mode event: {exc}") from exc
        return self._kube
