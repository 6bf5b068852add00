"""What the console's routes share: the process's object graph, who may do what, the archive store."""

from __future__ import annotations

from dataclasses import dataclass, field

from redis import Redis

from jobttl.core.kube.access import Access
from jobttl.core.kube.archivestore import Backend, open_store
from jobttl.core.kube.client import KubeClient, load_api_client
from jobttl.core.runtime.config import Settings
from jobttl.core.services import graph
from jobttl.core.services.operations import Operations
from jobttl.core.store import redisconn


@dataclass(kw_only=True)
class ConsoleContext(graph.Graph):
    access: Access | None  # None: JOBTTL_CONSOLE_AUTH=none (loopback only, `make run`)
    _archive: list[Backend] = field(default_factory=list, repr=False)

    @classmethod
    def build(cls, settings: Settings, redis: Redis | None = None, access: Access | None = None) -> ConsoleContext:
        """`redis` and `access` replace what the settings name (tests)."""
        shared = graph.build(settings, redisconn.SINK, redis=redis, metrics=False)
        if access is None and settings.console_auth == "kubernetes":
            kube = KubeClient(load_api_client(settings.kubeconfig), min(settings.api_timeout, 10), component="access")
            access = Access(kube)
        return cls(**shared.parts(), access=access)

    def operations(self, *, read_only: bool = False) -> Operations:
        return super().operations(read_only=read_only)

    @property
    def archive(self) -> Backend | None:
        """The policy's archive store (None: the policy archives nothing)."""
        spec = self.settings.policy.archive_store
        if spec is None:
            return None
        if not self._archive:
            self._archive.append(open_store(spec))
        return self._archive[0]
