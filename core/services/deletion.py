"""Deleting one job whose TTL is up, if and only if it still should be: the worker's algorithm.

The upstream TTL-after-finished controller's processJob, in two halves: what to do is judged by pure
functions (`jobttl.core.domain.decisions.judgement`: `admit`, `judge`, `confirm`), and `Deletion` only performs the
`Action` judged, each step with the collaborators it needs:

1. BEGIN (`jobttl.core.store.ledger`): is this RQ job still the pending deletion? The schedule may have
   moved it (a later TTL) or dropped it (the object went) since it was booked. `admit`.
2. `reread` and `decide` (`jobttl.core.services.reading`): the object as the API server has it now, and
   this stage's decision from it. The event that scheduled the deletion was only a hint.
3. `judge`: gone or re-created (forget), an earlier run's DELETE (record it), no longer or later
   (the one reconcile path cancels or moves it), clock trouble or early by the API server's clock
   (refuse, or wait briefly), dry run, the first-run review, else delete.
4. archive (`jobttl.core.services.archiving.Evidence`), a rate-limit slot, then BEGIN again (the intent written) and `confirm`.
5. DELETE with UID and resourceVersion preconditions and the configured propagation (a 409 means
   the object changed between read and delete, so back to step 2), or the pods stage
   (`jobttl.core.services.pods_stage`).
6. FINISH: gone at once (``deleted``) or still held by finalizers (``delete-requested``, followed
   until it is gone, or reported ``stuck``); one audit entry, a tombstone, an Event.

Errors are not handled here: they propagate to the task's one handler (`jobttl.worker.tasks`).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from rq.job import Job

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.domain.decisions.decision import Decision, Verdict
from jobttl.core.store.guard import FIRST_RUN, HeldDeletion, HeldDeletions
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.decisions.review import kind_key
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.kube.client import Conflict, ObjectGone
from jobttl.core.store.schedule import JOB_STAGE, Change, split_member
from jobttl.core.services.archiving import Archived, Evidence
from jobttl.core.services.worker_graph import WorkerGraph
from jobttl.core.domain.decisions.judgement import (
    ANOTHER_RUN,
    GONE,
    SUPERSEDED,
    Action,
    Again,
    ApiTime,
    Current,
    Delete,
    DeletePods,
    Forget,
    HoldForReview,
    Recover,
    Refuse,
    Replan,
    Skip,
    Target,
    Wait,
    WouldDelete,
    admit,
    confirm,
    judge,
    to_decide,
)
from jobttl.core.store.ledger import Ledger, details
from jobttl.core.services.pods_stage import PodsStage
from jobttl.core.services.reading import Reading

__all__ = ["MAX_CONFLICTS", "Current", "Deletion", "Target", "target_of"]

log = logging.getLogger("jobttl.worker")

# A 409 means the object changed between our read and our delete; we re-read and decide
# again. More than a few in a row means something keeps rewriting it: let RQ retry later.
MAX_CONFLICTS = 3
# When a deletion whose DELETE was accepted is first looked at again.
FIRST_FOLLOW_UP = 2
# Outcomes that FINISH recorded: it ended the claim (and the intent) itself.
RECORDED = ("deleted", "delete-requested", "would-delete")


@dataclass
class Progress:
    """How far this run has got."""

    # Whether this run sent a DELETE that may have been applied: until it has, an intent it
    # wrote says nothing true, and must not outlive the run (a later run would record the
    # user's own deletion, or a re-creation, as jobttl's).
    sent: bool = False
    current: Current | None = None  # what Redis said last (BEGIN)
    archived: Archived | None = None  # the archive this run wrote (one per version of the object)


class Deletion:
    """One run of one due deletion: the executor of what `jobttl.core.domain.decisions.judgement` decides."""

    def __init__(self, graph: WorkerGraph, job: Job | None):
        self.job = job
        self.graph = graph  # the worker's collaborators, shared by its runs: API client, clock, audit, Events, ...
        token = f"{job.id if job else 'run'}:{uuid.uuid4().hex[:12]}"
        # This run's own steps, each with only what it needs.
        self.ledger = Ledger(graph.redis, graph.clock, graph.audit, graph.settings.job_timeout + 60, token)
        self.reading = Reading(graph.kube, graph.settings.policy, graph.reconciler.keeplast)
        self.evidence = Evidence(graph.archiver, graph.settings.policy, graph.audit, graph.clock)
        self.pods = PodsStage(graph.kube, graph.rate_limit, self.ledger, graph.events, graph.clock)
        self.held = HeldDeletions(graph.redis)
        self.progress = Progress()

    # --- the algorithm ---------------------------------------------------------------------------
    def run(self, target: Target) -> str:
        self.progress.current = self.ledger.begin(target, "start")
        try:
            outcome = self._run(target)
        except BaseException:
            self.ledger.release(target, self.progress.sent)
            raise
        # FINISH releases the claim of a deletion it records; a claim another run holds is not ours.
        if not outcome.startswith(RECORDED) and outcome != Skip(ANOTHER_RUN).outcome:
            self.ledger.release(target, self.progress.sent)
        return outcome

    def _run(self, target: Target) -> str:
        kind = self.graph.kinds.get(target.ref.api_version, target.ref.kind)
        action = admit(target, self.progress.current, kind is not None, self.graph.clock.problem())
        if action is not None:
            return self.perform(target, kind, None, action)
        for _ in range(MAX_CONFLICTS):
            obj = self.reading.reread(kind, target.ref)
            outcome = self.perform(target, kind, obj, self.judgement_of(target, kind, obj))
            if outcome is not None:
                return outcome
        raise Conflict(f"{target.ref} kept changing between read and delete ({MAX_CONFLICTS} conflicts in a row)")

    def judgement_of(self, target: Target, kind: JobKind, obj: dict[str, Any] | None) -> Action:
        """What to do with the object just read: the facts gathered (I/O), then the pure judgement."""
        current = self.progress.current
        decision = self.reading.decide(target, kind, obj, current) if to_decide(target, current, obj) else None
        # Asked whenever there is a decision to judge: one read of Redis's mirror of the install record
        # (jobttl.core.services.install.InstallReview.holds), for the review of this kind.
        held = decision is not None and self.graph.install.holds(target.due, kind_key(kind.api_version, kind.kind))
        clock = self.graph.clock
        return judge(target, current, obj, decision, ApiTime(clock.earliest(), clock.problem()), held)

    def perform(self, target: Target, kind: JobKind | None, obj: dict[str, Any] | None, action: Action) -> str | None:
        """Carry out an `Action`: the run's outcome, or None to read the object again and judge afresh."""
        match action:
            case Skip():
                return action.outcome
            case Refuse(reason, detail):
                return self.refuse(target, reason, detail)
            case Forget(reason, successor):
                return self.forget(target, kind, reason, successor)
            case Recover(recorded, answer, successor):
                outcome = self.finish(target, recorded, None, answer)
                if successor is not None:
                    self.graph.reconciler.reconcile(
                        successor, kind, "worker"
                    )  # re-created since: it gets its own decision
                return outcome
            case Replan(verdict):
                return self.replan(target, kind, obj, verdict)
            case Wait(seconds):
                return self.wait(target, seconds)
            case WouldDelete(decision):
                return self.would_delete(target, decision)
            case HoldForReview(decision):
                return self.hold_for_review(target, decision)
            case Delete() | DeletePods():
                return self.delete(target, kind, obj, action)
            case Again():
                return None
        raise TypeError(f"not an action: {action!r}")

    # --- the steps -------------------------------------------------------------------------------
    def wait(self, target: Target, seconds: float) -> str | None:
        """Early by the API server's clock, briefly: wait, then ask Redis again (has it moved meanwhile?)."""
        time.sleep(seconds)
        self.progress.current = self.ledger.begin(target, "start")
        return Skip(SUPERSEDED).outcome if self.progress.current.superseded(target) else None

    def delete(self, target: Target, kind: JobKind, obj: dict[str, Any], action: Delete | DeletePods) -> str | None:
        """Archive, a rate-limit slot, `confirm` with what Redis says now, then the DELETE (or the pods')."""
        if self.progress.archived is None or self.progress.archived.resource_version != obj["metadata"].get(
            "resourceVersion"
        ):
            self.progress.archived = self.evidence.keep(
                target, kind, obj
            )  # before any DELETE: raises ArchiveFailed to wait
        self.graph.rate_limit.wait()
        # Right before the DELETE: has an operator acted, or the schedule moved, since we looked
        # (an archive and a rate-limit slot both take time)?
        before, self.progress.current = self.progress.current, self.ledger.begin(target, "delete", obj)
        halt = confirm(target, before, self.progress.current)
        if halt is not None:
            return self.perform(target, kind, obj, halt)
        if isinstance(action, DeletePods):
            return self.pods.run(target, kind, obj, action.decision, self.progress.archived)
        try:
            self.progress.sent = True
            answer = self.graph.kube.delete(
                kind,
                target.ref.namespace,
                target.ref.name,
                target.ref.uid,
                obj["metadata"]["resourceVersion"],
                self.graph.settings.propagation_policy,
            )
        except ObjectGone:
            return self.forget(target, kind, GONE)
        except Conflict as exc:
            self.progress.sent = False  # a 409 deleted nothing
            self.graph.audit.record("conflict", target.ref, by="worker", due=target.due, detail=str(exc))
            return None
        return self.finish(target, obj, action.decision, answer, self.progress.archived)

    def forget(self, target: Target, kind: JobKind, reason: str, successor: dict[str, Any] | None = None) -> str:
        self.graph.reconciler.forget(target.ref, reason, "worker")
        if successor is not None:
            self.graph.reconciler.reconcile(successor, kind, "worker")  # the new object gets its own decision
        return Forget(reason).outcome

    def replan(self, target: Target, kind: JobKind, obj: dict[str, Any], verdict: Verdict) -> str:
        """The one reconcile path, for this stage only (another stage may be running right now,
        and is its own run's to decide): ``rescheduled``, or skipped with the reason it gave."""
        outcomes, rejected = self.graph.reconciler.reconcile_many([(obj, kind)], "worker", stage=target.stage)
        if rejected:
            raise ValueError(str(rejected[0]))
        mine = next((o for o in outcomes if o.stage == target.stage and o.ref.uid == target.ref.uid), None)
        if mine is None and target.stage != JOB_STAGE:
            # A stage the policy no longer has: nothing else would ever cancel it.
            mine = self.graph.reconciler.drop_stage(target.ref, target.stage, "stage-not-in-policy", "worker")
        if mine is None:
            raise RuntimeError(f"the reconcile of {target.ref} said nothing of its {target.stage} stage")
        if mine.change is Change.MOVED:
            return "rescheduled"
        return f"skipped:{mine.reason or verdict.value}"

    def refuse(self, target: Target, reason: str, detail: str) -> str:
        """Not now: the pending deletion stays; the worker's sweep books it again once it can run.

        The RQ job's record is kept (no expiry), so the sweep finds it however long that is.
        """
        if self.job is not None:
            self.job.result_ttl = -1
        self.graph.audit.record(
            "refused",
            target.ref,
            logging.WARNING,
            logger=log,
            by="worker",
            due=target.due,
            stage=target.recorded_stage,
            reason=reason,
            failure=reason,
            detail=detail,
        )
        return Refuse(reason, detail).outcome

    def would_delete(self, target: Target, decision: Decision) -> str:
        now = self.graph.clock.now()
        if self.job is not None:
            self.graph.schedule.mark_would_delete(self.job, int(now))
        self.ledger.record("would-delete", target, forget=False, **details(target, decision, now))
        return "would-delete"

    def hold_for_review(self, target: Target, decision: Decision) -> str:
        """Into the guard's held set, out of the schedule: `jobttl resync --confirm HELD_ID` releases it."""
        self.held.hold([HeldDeletion(target.member, target.ref, decision, FIRST_RUN)])
        self.ledger.record(
            "held",
            target,
            forget=True,
            stages_too=False,
            reason="first-run-review",
            detail="already due when jobttl was installed: held until an operator reviews it "
            "(`jobttl held`, then `jobttl resync --confirm HELD_ID`)",
            **details(target, decision, self.graph.clock.now()),
        )
        return "held:first-run-review"

    def finish(
        self,
        target: Target,
        obj: dict[str, Any],
        decision: Decision | None,
        answer: dict[str, Any],
        archived: Archived | None = None,
    ) -> str:
        now = self.graph.clock.now()
        fields = (
            details(target, decision, now)
            if decision is not None
            else {"due": target.due, "detail": "recorded by a later run"}
        )
        # A Status means gone at once; the object itself (with a deletionTimestamp) means
        # finalizers still run (Foreground's, or others'): follow it until it is gone.
        gone = answer.get("kind") in ("Status", None)
        event = "deleted" if gone else "delete-requested"
        link = archived.location if archived else None
        tombstone = self.graph.audit.tombstone(target.ref, obj, now, archive=link) if obj else None
        # Follow-ups and "gone after" are the API server's clock, as the follower that takes them reads it.
        follow = None if gone else now + FIRST_FOLLOW_UP
        # The TTL and the owner's jobttl.io/notify go along: the follower's `deleted` entry says them again.
        said = (
            {"ttl": decision.ttl, "ttlSource": decision.ttl_source, "notify": decision.notify}
            if decision is not None
            else {}
        )
        info = (
            jsoncodec.dumps_str({"ref": target.ref.as_dict(), "requestedAt": now, "checks": 0, **said})
            if follow is not None
            else None
        )
        self.ledger.record(
            event,
            target,
            forget=True,
            tombstone=tombstone,
            follow=follow,
            info=info,
            propagationPolicy=self.graph.settings.propagation_policy,
            archive=link,
            **fields,
        )
        if self.graph.settings.policy.history_limits:
            self.graph.reconciler.keeplast.drop([target.ref.uid])
        if decision is not None:
            self.graph.events.record(
                target.ref,
                "SuccessfulDeleteJob",
                f"Deleted {decision.outcome} {target.ref.kind} {target.ref.name}: TTL {decision.ttl}s "
                f"after it finished (from {decision.ttl_source})",
            )
        return event


def target_of(job: Job | None, member: Any, due: int) -> Target | None:
    """The deletion an RQ job was booked for: its meta (0.2), or its arguments (0.1's ref dict)."""
    if isinstance(member, dict):  # a 0.1 job: (ref dict, due)
        ref = JobRef.from_dict(member)
        return Target(ref, ref.uid, int(due), JOB_STAGE)
    uid, stage = split_member(str(member))
    meta = job.meta if job is not None else {}
    identity = meta.get("ref")
    if not (isinstance(identity, list) and len(identity) == 4):
        return None
    return Target(JobRef(*identity, uid), str(member), int(due), stage)
