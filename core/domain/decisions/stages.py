"""Staged cleanup: the pods first, the job at its own TTL; and what each stage's Event says.

Pure functions, like `jobttl.core.domain.decisions.decision`: the job's decision in, the pods stage's out. A
finished job's pods hold node disk and count against the API server's pods, while the job
object (``kubectl get tfjob``) is what people look at; the policy's ``podTTL`` (or
``podTTLAfterSuccess`` / ``podTTLAfterFailure``) deletes the pods that long after the finish
and keeps the job until its TTL. Only for kinds whose controller creates no pods for a
finished job (`JobKind.pod_cleanup_safe`); the worker then deletes only pods that carry the
kind's pod label *and* a controller ownerReference to this job's UID.

The pods stage is its own pending entry (member ``pods:<uid>``) on the one reconcile path,
so it is scheduled, moved, cancelled, guarded and audited like the job's own deletion.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from jobttl.core.domain.decisions.decision import KEEP_UNTIL_ANNOTATION, Decision, Verdict, keep_until
from jobttl.core.domain.wire.durations import format_duration
from jobttl.core.domain.decisions.keeplast import SOURCE_PREFIX
from jobttl.core.domain.kinds.model import JobKind, get_path, parse_time
from jobttl.core.domain.decisions.plan import PODS_STAGE
from jobttl.core.domain.rules.policy import Policy

# The job's verdicts under which its pods may go early: finished, in scope, not kept. A job
# with no TTL at all may still have a podTTL ("delete the pods after a day, keep the job").
_POD_STAGE_VERDICTS = (Verdict.EXPIRES, Verdict.NO_TTL)


@dataclass(frozen=True)
class PodStage:
    """The pods stage's decision, and the short reason the reconcile records when it is not due."""

    decision: Decision
    reason: str  # "expires", or why there is no pods stage: "no-pod-ttl", "pods-with-job", ...


def pod_stage(obj: dict[str, Any], kind: JobKind, policy: Policy, job: Decision) -> PodStage:
    """When this job's pods are deleted ahead of it, given the job's own decision `job`."""
    if job.verdict not in _POD_STAGE_VERDICTS:
        return PodStage(Decision(job.verdict, job.reason, outcome=job.outcome, rules=job.rules), job.verdict.value)
    chosen, source = _pod_ttl(obj, policy, job.outcome)
    done = dict(outcome=job.outcome, rules=job.rules, dry_run=job.dry_run)
    if chosen is None:
        return PodStage(Decision(Verdict.NO_TTL, "the policy sets no podTTL", **done), "no-pod-ttl")
    if not kind.pod_cleanup_safe or not kind.pod_label:
        return PodStage(
            Decision(
                Verdict.NO_TTL,
                f"{kind.kind}'s pods are not deleted ahead of it (its controller "
                "could re-create them, or they are not its own)",
                **done,
            ),
            "pods-unsafe",
        )
    finished = kind.finish(obj)
    if finished is None or finished.time is None:
        return PodStage(
            Decision(Verdict.NO_FINISH_TIME, "no finish time to count the podTTL from", **done),
            Verdict.NO_FINISH_TIME.value,
        )
    due, source = _kept_longer(obj, kind, policy, finished.time + chosen.value, source)
    if job.verdict is Verdict.EXPIRES and job.expires_at is not None and due >= job.expires_at:
        return PodStage(
            Decision(Verdict.NO_TTL, f"the pods go with the {kind.kind} (its TTL ends first)", **done), "pods-with-job"
        )
    return PodStage(
        Decision(
            Verdict.EXPIRES,
            f"pods of {kind.kind} {job.outcome}; podTTL {chosen.value}s from {source}",
            finished_at=finished.time,
            ttl=due - finished.time,
            ttl_source=source,
            expires_at=due,
            **done,
        ),
        "expires",
    )


def _pod_ttl(obj: dict[str, Any], policy: Policy, outcome: str | None) -> tuple[Any, str]:
    """The podTTL the policy sets for this job's outcome (podTTLAfterSuccess or podTTLAfterFailure
    before podTTL), and where it comes from; (None, "") when it sets none."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    cleanup = policy.cleanup_effective(meta.get("namespace", ""), labels)
    specific = cleanup.get("pod_ttl_after_success" if outcome == "succeeded" else "pod_ttl_after_failure")
    chosen = specific or cleanup.get("pod_ttl")
    if chosen is None:
        return None, ""
    name = ("podTTLAfterSuccess" if outcome == "succeeded" else "podTTLAfterFailure") if specific else "podTTL"
    return chosen, f"{name} of {chosen.source}"


def _kept_longer(obj: dict[str, Any], kind: JobKind, policy: Policy, due: float, source: str) -> tuple[float, str]:
    """The pods' due time and its source, postponed to the job's keep-until annotation when later."""
    kept = keep_until(obj, kind, policy)
    if kept is not None and kept > due:
        # The user keeps the job until then to debug it: its pods (and their logs) stay as long.
        return kept, f"{source}, postponed by annotation {KEEP_UNTIL_ANNOTATION}"
    return due, source


def owned_pods(
    pods: list[dict[str, Any]], kind: JobKind, name: str, uid: str, created_by: int | None = None
) -> list[dict[str, Any]]:
    """The pods the pods stage may delete: the kind's pod label naming this job, a controller
    ownerReference to this very job (its kind and UID), and (given `created_by`, the job's
    finish time) created no later than the job finished: a pod created after that belongs to a
    run that began since (``argo retry`` keeps the UID). Never anything else."""
    return [pod for pod in pods if _owned(pod, kind, name, uid, created_by)]


def _owned(pod: dict[str, Any], kind: JobKind, name: str, uid: str, created_by: int | None) -> bool:
    """Whether one pod passes every test `owned_pods` names: label, creation time, controller."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    if kind.pod_label is None or labels.get(kind.pod_label) != name or not meta.get("uid"):
        return False
    if created_by is not None:
        created = parse_time(meta.get("creationTimestamp"))
        if created is None or created > created_by:
            return False  # of a later run of the same job: not this run's to delete
    owners = meta.get("ownerReferences") if isinstance(meta.get("ownerReferences"), list) else []
    return any(
        isinstance(o, dict) and o.get("controller") is True and o.get("uid") == uid and o.get("kind") == kind.kind
        for o in owners
    )


def archived_pods(pods: list[dict[str, Any]], kind: JobKind, uid: str) -> list[dict[str, Any]]:
    """The pods whose logs belong in this job's archive: those the kind's pod label found, less
    those another job of this kind controls (an earlier job of the same name, say). Pods a
    controller of another kind owns stay: a TrainJob's pods belong to its JobSet's Jobs."""
    chosen = []
    for pod in pods:
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
        owners = meta.get("ownerReferences") if isinstance(meta.get("ownerReferences"), list) else []
        if not any(
            isinstance(o, dict) and o.get("controller") is True and o.get("kind") == kind.kind and o.get("uid") != uid
            for o in owners
        ):
            chosen.append(pod)
    return chosen


def restarted(pod: dict[str, Any], container: str) -> bool:
    """Whether a container ran before (its previous instance has a log worth keeping)."""
    for field in ("containerStatuses", "initContainerStatuses"):
        for status in get_path(pod, ("status", field)) or ():
            if isinstance(status, dict) and status.get("name") == container:
                return bool(status.get("restartCount")) or bool(get_path(status, ("lastState", "terminated")))
    return False


def containers(pod: dict[str, Any]) -> list[str]:
    """Every container of a pod, init containers first (their logs explain many failures)."""
    names = []
    for field in ("initContainers", "containers"):
        for container in get_path(pod, ("spec", field)) or ():
            if isinstance(container, dict) and isinstance(container.get("name"), str):
                names.append(container["name"])
    return names


# --- what the DeletionScheduled Event says ---------------------------------------------------------

SCHEDULED_REASON = "DeletionScheduled"


def scheduled_message(
    kind: str, stage: str, due: int, ttl: int | None, ttl_source: str | None, dry_run: bool = False
) -> str:
    """``jobttl will delete this TFJob at 2030-01-31T00:00:00Z (TTL 7d from ttl of rule research)``."""
    when = datetime.fromtimestamp(due, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # RFC 3339: TTLs count seconds
    what = f"the pods of this {kind}" if stage == PODS_STAGE else f"this {kind}"
    verb = "would delete (dry run)" if dry_run else "will delete"
    if ttl_source and ttl_source.startswith(SOURCE_PREFIX):
        why = ttl_source  # keepLast of rule research (3 succeeded)
    else:
        why = (
            f"TTL {format_duration(ttl, exact=True)} from {ttl_source}" if ttl is not None and ttl_source else "policy"
        )
    return f"jobttl {verb} {what} at {when} ({why})"
