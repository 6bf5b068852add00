"""Following a deletion until the object is really gone, and saying so when it never goes.

With ``Foreground`` propagation (the default, like the upstream controller) the API server
keeps the job, ``Terminating``, until the garbage collector has removed every dependant;
a pod with a stuck finalizer keeps it forever (kubernetes#77081, #61175). So "deleted" in
the audit trail means gone: the worker records ``delete-requested`` when its DELETE is
accepted, and this follower (a thread in each worker) looks at the object again, backing
off from 2 s to a minute, until it is gone (``deleted``) or ``JOBTTL_STUCK_AFTER`` has
passed (``stuck``: the blocking finalizers and dependants recorded, a Warning Event, the
``jobttl_stuck_deletions`` gauge, a row in ``jobttl status`` and ``jobttl failed``). If the
policy says so (``stuckDeletion: {fallback: Background}``), it deletes it once more with
Background propagation. It never strips finalizers: they are someone else's promise.

Members are claimed with a lease (one Lua script), so several workers share the work and a
worker that dies mid-check leaves its members to the others.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from jobttl.core.domain.wire import shapes
from jobttl.core.runtime import logs
from jobttl.core.store.audit import entry_fields
from jobttl.core.store.followups import FollowUps
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import KindRegistry
from jobttl.core.kube.client import ObjectGone
from jobttl.core.services.worker_graph import WorkerGraph

log = logging.getLogger("jobttl.follow")

LEASE = 30  # seconds a claimed member is left alone by the other workers
BATCH = 50
MAX_BACKOFF = 60


class Follower:
    def __init__(self, ctx: WorkerGraph, period: float = 1.0):
        self.ctx = ctx
        self.period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="follow-deletions", daemon=True)
        # A deletion is followed whatever the policy enables now: a kind dropped from `kinds` since
        # the DELETE does not make its object gone. Every kind known: built in, or declared.
        self.every_kind = KindRegistry(ctx.settings.policy.known_kinds)
        self.followups = FollowUps(ctx.redis)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.follow_once()
            except Exception as exc:  # noqa: BLE001 - Redis or the API down: try again next period
                logs.record(log, "follow-error", level=logging.WARNING, detail=str(exc))

    def follow_once(self) -> int:
        if self.ctx.clock.problem():
            return 0  # "stuck" is judged by the clock too
        now = self.ctx.clock.now()  # requestedAt and the follow-up times are the reference clock's
        members = self.followups.claim(now, lease=LEASE, batch=BATCH)
        for member in members:
            try:
                info = self.followups.info(member)
                if info is None:
                    self.followups.drop(member)
                    continue
                self.check(member, info)
            except Exception as exc:  # noqa: BLE001 - this one waits out its lease; the others go on
                logs.record(log, "follow-error", level=logging.WARNING, member=member, detail=str(exc))
        return len(members)

    def check(self, member: str, info: dict[str, Any]) -> None:
        ctx = self.ctx
        ref = JobRef.from_dict(info["ref"])
        kind = self.every_kind.get(ref.api_version, ref.kind)
        if kind is None:  # written by another version of jobttl: no way to look, so never "deleted"
            raise ValueError(f"cannot follow {ref}: this jobttl does not know {ref.api_version} {ref.kind}")
        try:
            obj = ctx.kube.get(kind, ref.namespace, ref.name)
        except ObjectGone:
            obj = None
        if obj is None or obj["metadata"].get("uid") != ref.uid:
            return self.gone(member, ref, info)
        now = self.ctx.clock.now()
        waited = now - info["requestedAt"]
        if waited >= ctx.settings.stuck_after and not info.get("stuck"):
            info = self.stuck(member, ref, obj, info, waited)
        checks = info.get("checks", 0) + 1
        self.followups.check_again(member, {**info, "checks": checks}, now + min(2**checks, MAX_BACKOFF))

    def gone(self, member: str, ref: JobRef, info: dict[str, Any]) -> None:
        ctx = self.ctx
        gone_after = round(ctx.clock.now() - info["requestedAt"], 3)
        fields = dict(
            by="worker",
            goneAfter=gone_after,
            wasStuck=bool(info.get("stuck")) or None,
            ttl=info.get("ttl"),
            ttlSource=info.get("ttlSource"),
            notify=info.get("notify"),
        )
        self.followups.gone(
            ref,
            member,
            entry_fields("deleted", ref, **fields),
            max_entries=ctx.audit.max_entries,
            card_ttl=ctx.audit.tombstone_seconds,
        )
        ctx.audit.observed("deleted", ref, logger=log, **fields)

    def stuck(
        self, member: str, ref: JobRef, obj: dict[str, Any], info: dict[str, Any], waited: float
    ) -> dict[str, Any]:
        ctx = self.ctx
        meta = obj.get("metadata") or {}
        blocking = {"finalizers": list(meta.get("finalizers") or []), "dependants": self._dependants(ref)}
        record = {"ref": ref.as_dict(), "requestedAt": info["requestedAt"], "stuckFor": round(waited), **blocking}
        self.followups.stuck(member, record)
        ctx.audit.record(
            "stuck",
            ref,
            logging.WARNING,
            logger=log,
            by="worker",
            stuckFor=round(waited),
            finalizers=blocking["finalizers"],
            dependants=blocking["dependants"],
            detail="the DELETE was accepted but the object is still there; jobttl never removes finalizers",
        )
        ctx.events.record(
            ref,
            "DeletionStuck",
            f"jobttl deleted {ref.kind} {ref.name} {round(waited)}s ago but it is still present; "
            f"blocked by finalizers {blocking['finalizers'] or 'none'} "
            f"and dependants {blocking['dependants'] or 'unknown'}",
            warning=True,
        )
        fallback = ctx.settings.policy.stuck_fallback
        if fallback and not info.get("fellBack"):
            kind = self.every_kind.get(ref.api_version, ref.kind)
            try:
                ctx.kube.delete(kind, ref.namespace, ref.name, ref.uid, meta.get("resourceVersion", ""), fallback)
                ctx.audit.record(
                    "delete-requested",
                    ref,
                    logger=log,
                    by="worker",
                    propagationPolicy=fallback,
                    reason="stuck-fallback",
                )
            except Exception as exc:  # noqa: BLE001 - a failed fallback leaves it stuck, and says so
                ctx.audit.record(
                    "failed",
                    ref,
                    logging.ERROR,
                    logger=log,
                    by="worker",
                    reason="stuck-fallback",
                    error=shapes.describe(exc),
                    failure="stuck",
                )
            info = {**info, "fellBack": True}
        return {**info, "stuck": True}

    def _dependants(self, ref: JobRef) -> list[str]:
        """Pods still owned by the job (when the worker may list pods), with their finalizers."""
        ctx = self.ctx
        kind = self.every_kind.get(ref.api_version, ref.kind)
        if kind is None or not kind.pod_label or "list" not in ctx.kube.granted.get("pods", ()):
            return []
        try:
            pods = ctx.kube.list_pods(ref.namespace, f"{kind.pod_label}={ref.name}")
        except Exception:  # noqa: BLE001 - best effort: the report says finalizers at least
            return []
        owned = []
        for pod in pods:
            meta = pod.get("metadata") or {}
            if any(o.get("uid") == ref.uid for o in meta.get("ownerReferences") or []):
                owned.append(
                    f"Pod {meta.get('name')} (finalizers: {', '.join(meta.get('finalizers') or []) or 'none'})"
                )
        return owned
