"""The pods stage, once judged due (`jobttl.core.domain.decisions.judgement.DeletePods`) and confirmed: delete the
finished job's own pods (label and controller reference, none younger than its finish), keep the job.

Pods have no precondition that says "only if the job is still as we judged it": the job is read once
more right before their DELETEs, so that a retried (restarted) or changed job keeps its pods.
Needs the Kubernetes client, the rate limit, the ledger, the Event recorder and the clock.
"""

from __future__ import annotations

from typing import Any

from jobttl.core.domain.decisions.clock import ReferenceClock
from jobttl.core.domain.decisions.decision import Decision
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.kube.client import Conflict, KubeClient, ObjectGone
from jobttl.core.store.ratelimit import RateLimit
from jobttl.core.domain.decisions.stages import owned_pods
from jobttl.core.services.archiving import Archived
from jobttl.core.domain.decisions.judgement import Target, unchanged
from jobttl.core.domain.decisions.plan import PODS_STAGE
from jobttl.core.store.ledger import Ledger, details
from jobttl.core.services.events import EventRecorder
from jobttl.core.services.reading import reread

PODS_DELETED = "pods-deleted"


class PodsStage:
    def __init__(
        self, kube: KubeClient, rate_limit: RateLimit, ledger: Ledger, events: EventRecorder, clock: ReferenceClock
    ):
        self.kube = kube
        self.rate_limit = rate_limit
        self.ledger = ledger
        self.events = events
        self.clock = clock

    def run(
        self, target: Target, kind: JobKind, obj: dict[str, Any], decision: Decision, archived: Archived | None
    ) -> str | None:
        """``pods-deleted``; None when the job changed since `obj` was judged (judge it again)."""
        if not unchanged(reread(self.kube, kind, target.ref), obj):
            return None
        deleted = self.delete(target, kind, decision)
        now = self.clock.now()
        # Done for good, in the same write as the record: later events and resyncs never book it again.
        self.ledger.record(
            PODS_DELETED,
            target,
            forget=True,
            done=PODS_STAGE,
            pods=deleted,
            archive=archived.location if archived else None,
            **details(target, decision, now),
        )
        ref = target.ref
        self.events.record(
            ref,
            "SuccessfulDeletePods",
            f"Deleted {len(deleted)} pods of {decision.outcome} {ref.kind} {ref.name}: podTTL "
            f"{decision.ttl}s after it finished (from {decision.ttl_source}); the {ref.kind} is kept",
        )
        return PODS_DELETED

    def delete(self, target: Target, kind: JobKind, decision: Decision) -> list[str]:
        """The job's own pods, one rate-limit slot each; the names of those this run deleted."""
        ref = target.ref
        pods = owned_pods(
            self.kube.list_pods(ref.namespace, f"{kind.pod_label}={ref.name}"),
            kind,
            ref.name,
            ref.uid,
            created_by=decision.finished_at,
        )
        deleted = []
        for i, pod in enumerate(pods):
            meta = pod["metadata"]
            if i:
                self.rate_limit.wait()  # each pod is a DELETE too: one slot each (the first took the judged slot)
            try:
                self.kube.delete_pod(ref.namespace, meta["name"], meta["uid"])
                deleted.append(meta["name"])
            except (ObjectGone, Conflict):
                continue  # gone already, or the name now belongs to another pod: not ours
        return deleted
