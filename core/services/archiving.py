"""Writing one job's archive before it (or its pods) is deleted: the worker's side of `jobttl.core.domain.decisions.archive`.

Reads the Events and each pod's log tails through the one Kubernetes client, encodes what it
got with the object the worker just re-read, and writes it all to the store, ``index.json``
last. What cannot be read because it is gone (a pod deleted meanwhile, a container that
never started) is listed in the index as not kept; what cannot be read or written for any
other reason fails the archive (`ArchiveFailed`), and the deletion waits for a retry unless
the policy says ``archive.required: false``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from jobttl.core.domain.decisions import archive
from jobttl.core.domain.decisions.archive import ArchivePlan, Contents, plan_for
from jobttl.core.kube.archivestore import ArchiveStoreError, Backend
from jobttl.core.store.audit import Audit
from jobttl.core.domain.wire import shapes
from jobttl.core.domain.decisions.clock import ReferenceClock
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.decisions.judgement import Target
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.kube.client import KubeClient, ObjectGone, PermanentApiError
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.domain.rules.policy import ArchiveStore, Policy
from jobttl.core.domain.decisions.stages import archived_pods, containers, restarted

log = logging.getLogger("jobttl.archive")
# The deletion run's channel: `Evidence` is one of its steps, and its entries log as the run's do.
run_log = logging.getLogger("jobttl.worker")


class ArchiveFailed(Exception):
    """The archive could not be written: the deletion waits (``archive-failed``) and is retried."""

    def __init__(self, message: str, permanent: bool = False):
        super().__init__(message)
        self.permanent = permanent  # retrying cannot help (a permission is missing)


@dataclass(frozen=True)
class Archived:
    location: str
    bytes: int
    files: int
    unkept: tuple[str, ...]
    resource_version: str | None = None  # of the object archived: a run archives each version once


class Archiver:
    def __init__(self, kube: KubeClient, store: Backend, metrics: Metrics | None = None):
        self.kube = kube
        self.store = store
        self.metrics = metrics

    def write(
        self, kind: JobKind, ref: JobRef, obj: dict[str, Any], plan: ArchivePlan, stage: str, now: float
    ) -> Archived:
        """Archive `obj` (as just re-read) and what belongs to it; raises ArchiveFailed."""
        try:
            where = archive.folder(ref)
            earlier = archive.read_index(self.store.read(where, archive.INDEX))
            # Events expire (an hour, by default): keep those an earlier stage archived.
            kept_events = self.store.read(where, archive.EVENTS) if earlier and plan.events else None
            contents = self.gather(kind, ref, obj, plan, archive.earlier_events(kept_events))
            contents.files[archive.INDEX] = archive.index(ref, contents, now, stage, plan, earlier)
            written = self.store.write(where, contents.files)
        except Exception as exc:
            if self.metrics is not None:
                self.metrics.archive_failures.inc()
            raise ArchiveFailed(
                f"archive-failed: {ref}: {exc}",
                permanent=isinstance(exc, PermanentApiError) and exc.status in (401, 403),
            ) from exc
        if self.metrics is not None:
            self.metrics.archive_bytes.inc(written)
        return Archived(
            self.store.location(where),
            written,
            len(contents.files),
            tuple(contents.unkept),
            (obj.get("metadata") or {}).get("resourceVersion"),
        )

    def gather(
        self,
        kind: JobKind,
        ref: JobRef,
        obj: dict[str, Any],
        plan: ArchivePlan,
        earlier_events: list[dict[str, Any]] = (),
    ) -> Contents:
        contents = Contents()
        if plan.manifest:
            contents.files[archive.MANIFEST], unkept = archive.to_yaml(obj, "manifest")
            contents.unkept += unkept
        if plan.events:
            events = archive.merge_events(earlier_events, self.kube.list_events(ref))
            contents.files[archive.EVENTS], unkept = archive.to_yaml(events, "events")
            contents.unkept += unkept
        if plan.logs and kind.pod_label:
            for pod in archived_pods(self.kube.list_pods(ref.namespace, f"{kind.pod_label}={ref.name}"), kind, ref.uid):
                self.pod_logs(ref, pod, plan, contents)
        return contents

    def pod_logs(self, ref: JobRef, pod: dict[str, Any], plan: ArchivePlan, contents: Contents) -> None:
        name = (pod.get("metadata") or {}).get("name")
        if not isinstance(name, str):
            return
        for container in containers(pod):
            for previous in (False, True) if restarted(pod, container) else (False,):
                try:
                    body, truncated = self.tail(ref.namespace, name, container, previous, plan.log_bytes)
                except ObjectGone:
                    contents.unkept.append(f"logs of {name}/{container}: the pod is gone")
                    continue
                except PermanentApiError as exc:
                    if exc.status in (401, 403):
                        raise
                    # 400: the container never started, or kept no previous instance.
                    contents.unkept.append(f"logs of {name}/{container}{' (previous)' if previous else ''}: {exc}")
                    continue
                contents.add_log(name, container, previous, body, truncated)

    def tail(self, namespace: str, pod: str, container: str, previous: bool, keep: int) -> tuple[bytes, bool]:
        """The last `keep` bytes of a container's log (`archive.trim_tail`), and whether it holds more.

        Bounded: at most MAX_LOG_TRIES + 1 requests, and of each answer only its last 2 x `keep`
        bytes are held (`archive.LogTail`), however long its lines."""
        request = archive.first_log_request(keep)
        for _ in range(archive.MAX_LOG_TRIES + 1):
            answer = archive.LogTail.for_keeping(keep)
            for chunk in self.kube.pod_log(
                namespace, pod, container, request.tail_lines, previous, limit_bytes=request.limit_bytes
            ):
                answer.feed(chunk)
            following = archive.next_log_request(request, keep, answer.bytes, answer.lines)
            if following is None:
                break
            request = following
        kept = archive.trim_tail(answer.last, keep, starts_line=answer.complete)
        return kept, len(kept) < answer.bytes or not archive.whole_log(request, answer.bytes, answer.lines)


class Evidence:
    """The archive step: keep the evidence before deleting, as the policy says. Needs the archiver,
    the policy, the audit trail and the clock."""

    def __init__(self, archiver: Archiver | None, policy: Policy, audit: Audit, clock: ReferenceClock):
        self.archiver = archiver
        self.policy = policy
        self.audit = audit
        self.clock = clock

    def keep(self, target: Target, kind: JobKind, obj: dict[str, Any]) -> Archived | None:
        """The archive written, or a failure that delays the deletion (``archive-failed``), or, with
        ``archive.required: false``, recorded and passed."""
        plan = plan_for(obj, self.policy) if self.archiver is not None else None
        if plan is None:
            return None
        try:
            archived = self.archiver.write(kind, target.ref, obj, plan, target.stage, self.clock.now())
        except ArchiveFailed as exc:
            self.audit.record(
                "archive-failed",
                target.ref,
                logging.WARNING if plan.required else logging.ERROR,
                logger=run_log,
                by="worker",
                due=target.due,
                stage=target.recorded_stage,
                failure="archive-failed",
                required=plan.required,
                error=shapes.describe(exc.__cause__ or exc),
            )
            if plan.required:
                raise
            return None
        self.audit.record(
            "archived",
            target.ref,
            logger=run_log,
            by="worker",
            due=target.due,
            stage=target.recorded_stage,
            archive=archived.location,
            bytes=archived.bytes,
            files=archived.files,
            unkept=list(archived.unkept) or None,
        )
        return archived


def prune(
    store: Backend, spec: ArchiveStore, audit: Audit, metrics: Metrics | None = None, now: float | None = None
) -> list[str]:
    """Apply the archive's retention (days, and the directory store's size cap); what was removed."""
    if spec.retention is None and spec.max_bytes is None:
        return []
    try:
        removed = archive.expired(
            list(store.stored()), time.time() if now is None else now, spec.retention, spec.max_bytes
        )
        for where in removed:
            store.remove(where)
    except ArchiveStoreError as exc:
        audit.record("archive-prune-failed", None, logging.WARNING, logger=log, error=str(exc))
        return []
    if removed:
        audit.record(
            "archives-pruned",
            None,
            logger=log,
            count=len(removed),
            store=store.url,
            retention=spec.retention,
            maxBytes=spec.max_bytes,
        )
        if metrics is not None:
            metrics.archive_pruned.inc(len(removed))
    return removed
