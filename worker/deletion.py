"""Deleting one job whose TTL is up, if and only if it still should be: the worker's algorithm.

In named steps, as the upstream TTL-after-finished controller's processJob → processTTL →
needsCleanup → timeLeft:

1. `current`: is this RQ job still the pending deletion? The schedule may have moved it
   (a later TTL) or dropped it (the object went) since it was booked.
2. `reread`: the object as the API server has it now. The event that scheduled the
   deletion was only a hint: stale, duplicated or forged; the job may have been re-created
   under the same name, or its TTL extended.
3. `decide` again; a decision that no longer expires, or expires later, goes back through
   the one reconcile path, which cancels or moves the deletion.
4. `time_left`, by the API server's clock (measured on the read just made). When the
   clocks disagree beyond the bound nothing is deleted: it waits until they agree.
5. `delete` with UID and resourceVersion preconditions and the configured propagation; a
   409 means the object changed between read and delete, so back to step 2.
6. `finish`: gone at once (``deleted``) or still held by finalizers (``delete-requested``,
   followed until it is gone, or reported ``stuck``); one audit entry, a tombstone, an Event.

Errors are not handled here: they propagate to the task's one handler (`jobttl.worker.tasks`).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from rq.job import Job

from jobttl.core import jsoncodec, keys, shapes
from jobttl.core.archive import plan_for
from jobttl.core.audit import entry_fields
from jobttl.core.decision import Decision, Verdict, decide
from jobttl.core.guard import FIRST_RUN, HeldDeletion, HeldDeletions
from jobttl.core.history import Member, limit_decision, membership, ranked
from jobttl.core.identity import JobRef
from jobttl.core.kinds import JobKind
from jobttl.core.kube import Conflict, ObjectGone
from jobttl.core.reconcile import Outcome
from jobttl.core.schedule import JOB_STAGE, OVERRIDE_SECONDS, PODS_STAGE, Change, split_member
from jobttl.core.scripts import Begin, Finish, Release
from jobttl.core.stages import owned_pods, pod_stage
from jobttl.worker.archiving import ArchiveFailed, Archived
from jobttl.worker.context import WorkerContext

log = logging.getLogger("jobttl.worker")

# A 409 means the object changed between our read and our delete; we re-read and decide
# again. More than a few in a row means something keeps rewriting it: let RQ retry later.
MAX_CONFLICTS = 3
# How early (by the API server's clock) a deletion may arrive and still be waited for in place.
MAX_EARLY = 30
# When a deletion whose DELETE was accepted is first looked at again.
FIRST_FOLLOW_UP = 2


@dataclass(frozen=True)
class Target:
    """The deletion this RQ job was booked for."""

    ref: JobRef
    member: str
    due: int
    stage: str

    @property
    def recorded_stage(self) -> str | None:
        """The stage as audit entries name it: only a stage other than the job's own."""
        return self.stage if self.stage != JOB_STAGE else None


@dataclass(frozen=True)
class Current:
    """What the BEGIN script said: still pending at this due time? what did operators say? did
    an earlier run get as far as its DELETE? is another run at work?"""

    pending_due: int | None
    redis_time: tuple[int, int]
    keep: bool
    until: int | None
    intent: dict[str, Any] | None
    busy: bool

    def superseded(self, target: Target) -> bool:
        return self.pending_due != target.due

    def said(self) -> tuple[bool, int | None]:
        return self.keep, self.until


class Deletion:
    def __init__(self, ctx: WorkerContext, job: Job | None):
        self.ctx = ctx
        self.job = job
        self.token = f"{job.id if job else 'run'}:{uuid.uuid4().hex[:12]}"
        # Whether this run sent a DELETE that may have been applied: until it has, an intent it
        # wrote says nothing true, and must not outlive the run (a later run would record the
        # user's own deletion, or a re-creation, as jobttl's).
        self.sent = False

    # --- the algorithm ---------------------------------------------------------------------------
    def run(self, target: Target) -> str:
        ctx = self.ctx
        current = self.current(target, "start")
        if current.busy:
            return "skipped:another-run-is-deleting-it"  # the same RQ job enqueued twice; one run is enough
        try:
            outcome = self._run(target, current)
        except BaseException:
            self.release(target)
            raise
        if not outcome.startswith(("deleted", "delete-requested", "would-delete")):
            self.release(target)  # FINISH releases the claim of a deletion it records
        return outcome

    def _run(self, target: Target, current: Current) -> str:
        ctx = self.ctx
        if current.superseded(target):
            # Moved (another RQ job has the new time) or done: nothing of ours to do here.
            return "skipped:superseded"
        if target.stage not in (JOB_STAGE, PODS_STAGE):
            return self.refuse(target, "stage-not-supported", f"this worker does not run {target.stage} stages")
        kind = ctx.kinds.get(target.ref.api_version, target.ref.kind)
        if kind is None:
            # Not enabled here (a rolling policy change?): leave it, do not forget it.
            return self.refuse(target, "kind-not-enabled", f"{target.ref.kind} is not enabled in this worker's policy")
        problem = ctx.clock.problem()
        if problem:
            return self.refuse(target, "clock-skew", problem)
        archived: Archived | None = None
        for _ in range(MAX_CONFLICTS):
            obj = self.reread(kind, target.ref)
            if current.intent is not None and target.stage == JOB_STAGE and _already_deleted(obj, target.ref):
                # An earlier run of this deletion sent its DELETE and died before recording it.
                # (A pods stage's run that died is simply run again: its pods are listed anew.)
                ours = obj if obj is not None and obj["metadata"].get("uid") == target.ref.uid else None
                outcome = self.finish(target, kind, ours or current.intent.get("object") or {}, None,
                                      ours or {"kind": "Status"})
                if obj is not None and ours is None:
                    ctx.reconciler.reconcile(obj, kind, "worker")  # re-created since: it gets its own decision
                return outcome
            if obj is None:
                return self._forget(target, "gone")
            uid = obj["metadata"].get("uid")
            if uid != target.ref.uid:
                ctx.reconciler.forget(target.ref, "recreated", "worker")
                ctx.reconciler.reconcile(obj, kind, "worker")  # the new object gets its own decision
                return "skipped:recreated"
            decision = self.decide(target, kind, obj, current)
            if decision.verdict is not Verdict.EXPIRES or current.keep or _expires(decision, current) > target.due:
                # No longer, or later: the one reconcile path cancels or moves the deletion.
                outcome = self.replan(target, kind, obj)
                if outcome.change is Change.MOVED:
                    return "rescheduled"
                return f"skipped:{outcome.reason or decision.verdict.value}"
            problem = ctx.clock.problem()  # measured again by the read just made
            if problem:
                return self.refuse(target, "clock-skew", problem)
            left = self.time_left(target.due)
            if left > 0:
                # Due at the very time this job was booked for, yet early by the API server's clock:
                # the scheduler's clock runs ahead. Wait briefly, or leave it to come due.
                if left > MAX_EARLY:
                    return self.refuse(target, "early", f"{left:.0f}s before its due time by the API server's clock")
                time.sleep(left)
                current = self.current(target, "start")
                if current.superseded(target):
                    return "skipped:superseded"
                continue
            if decision.dry_run:
                return self.would_delete(target, decision)
            if ctx.install.holds(target.due):
                # Overdue already when jobttl was installed, and nobody has reviewed those yet: an
                # event for an old job (or a booking made before the first worker started) must not
                # get past the review that the resync's list is held for (jobttl.core.install).
                return self.hold_for_review(target, decision)
            if archived is None or archived.resource_version != obj["metadata"].get("resourceVersion"):
                archived = self.archive(target, kind, obj)  # before any DELETE: raises ArchiveFailed to wait
            ctx.rate_limit.wait()
            # Right before the DELETE: has an operator acted, or the schedule moved, since we looked
            # (an archive and a rate-limit slot both take time)?
            before, current = current, self.current(target, "delete", obj)
            if current.superseded(target):
                return "skipped:superseded"
            if current.busy:
                return "skipped:another-run-is-deleting-it"  # our claim expired and another run took it
            if current.said() != before.said():
                continue  # decide again, with what they said
            if target.stage == PODS_STAGE:
                # Pods have no precondition that says "only if the job is still as we judged it":
                # read the job once more, so that a retried (restarted) or changed job keeps its pods.
                latest = self.reread(kind, target.ref)
                if not _unchanged(latest, obj):
                    continue
                return self.delete_pods(target, kind, obj, decision, archived)
            try:
                self.sent = True
                answer = ctx.kube.delete(kind, target.ref.namespace, target.ref.name, target.ref.uid,
                                         obj["metadata"]["resourceVersion"], ctx.settings.propagation_policy)
            except ObjectGone:
                return self._forget(target, "gone")
            except Conflict as exc:
                self.sent = False  # a 409 deleted nothing
                ctx.audit.record("conflict", target.ref, by="worker", due=target.due, detail=str(exc))
                continue
            return self.finish(target, kind, obj, decision, answer, archived)
        raise Conflict(f"{target.ref} kept changing between read and delete ({MAX_CONFLICTS} conflicts in a row)")

    # --- the steps -------------------------------------------------------------------------------
    def current(self, target: Target, step: str, obj: dict[str, Any] | None = None) -> Current:
        """BEGIN: at the start (the claim taken), or right before the DELETE (the intent written)."""
        intent = _intent_of(target, obj) if step == "delete" else ""
        sent = time.time()
        said = Begin(uid=target.ref.uid, member=target.member, step=step, token=self.token,
                     claim_seconds=self.ctx.settings.job_timeout + 60, intent_entry=intent).run(self.ctx.redis)
        self.ctx.clock.observe_redis(said.seconds, said.micros, sent, time.time())
        return Current(said.pending_due, (said.seconds, said.micros), said.override.keep, said.override.until,
                       _intent(said.intent, target.ref.uid), said.busy)

    def release(self, target: Target) -> None:
        """Give the claim back, and the intent with it unless a DELETE may have been applied."""
        try:
            Release(member=target.member, token=self.token, clear_intent=not self.sent).run(self.ctx.redis)
        except Exception:  # noqa: BLE001 - the claim expires on its own
            pass

    def decide(self, target: Target, kind: JobKind, obj: dict[str, Any], current: Current) -> Decision:
        """The decision for this stage, from the object just read: the job's own (with its history
        limit checked against the cluster when the TTL alone would not delete it now), or its pods'."""
        policy = self.ctx.settings.policy
        decision = decide(obj, kind, policy)
        if target.stage == JOB_STAGE and policy.history_limits and (
                decision.verdict is not Verdict.EXPIRES or _expires(decision, current) > target.due):
            decision = check_limit(self.ctx, kind, obj, decision)
        if target.stage == PODS_STAGE:
            return pod_stage(obj, kind, policy, decision).decision
        return decision

    def replan(self, target: Target, kind: JobKind, obj: dict[str, Any]) -> Outcome:
        """The one reconcile path, for this stage only (another stage may be running right now,
        and is its own run's to decide); what it did."""
        outcomes, rejected = self.ctx.reconciler.reconcile_many([(obj, kind)], "worker", stage=target.stage)
        if rejected:
            raise ValueError(str(rejected[0]))
        mine = next((o for o in outcomes if o.stage == target.stage and o.ref.uid == target.ref.uid), None)
        if mine is None and target.stage != JOB_STAGE:
            # A stage the policy no longer has: nothing else would ever cancel it.
            mine = self.ctx.reconciler.drop_stage(target.ref, target.stage, "stage-not-in-policy", "worker")
        if mine is None:
            raise RuntimeError(f"the reconcile of {target.ref} said nothing of its {target.stage} stage")
        return mine

    def archive(self, target: Target, kind: JobKind, obj: dict[str, Any]) -> Archived | None:
        """Keep the evidence before deleting, as the policy says: the archive written, or a failure that
        delays the deletion (``archive-failed``), or, with ``archive.required: false``, recorded and passed."""
        ctx = self.ctx
        plan = plan_for(obj, ctx.settings.policy) if ctx.archiver is not None else None
        if plan is None:
            return None
        try:
            archived = ctx.archiver.write(kind, target.ref, obj, plan, target.stage, ctx.clock.now())
        except ArchiveFailed as exc:
            ctx.audit.record("archive-failed", target.ref, logging.WARNING if plan.required else logging.ERROR,
                             logger=log, by="worker", due=target.due, stage=target.recorded_stage,
                             failure="archive-failed", required=plan.required, error=shapes.describe(exc.__cause__ or exc))
            if plan.required:
                raise
            return None
        ctx.audit.record("archived", target.ref, logger=log, by="worker", due=target.due, stage=target.recorded_stage,
                         archive=archived.location, bytes=archived.bytes, files=archived.files,
                         unkept=list(archived.unkept) or None)
        return archived

    def delete_pods(self, target: Target, kind: JobKind, obj: dict[str, Any], decision: Decision,
                    archived: Archived | None) -> str:
        """The pods stage: delete this finished job's own pods (label and controller reference), keep the job."""
        ctx, ref = self.ctx, target.ref
        pods = owned_pods(ctx.kube.list_pods(ref.namespace, f"{kind.pod_label}={ref.name}"), kind, ref.name, ref.uid,
                          created_by=decision.finished_at)
        deleted = []
        for i, pod in enumerate(pods):
            meta = pod["metadata"]
            if i:
                ctx.rate_limit.wait()  # each pod is a DELETE too: one slot each
            try:
                ctx.kube.delete_pod(ref.namespace, meta["name"], meta["uid"])
                deleted.append(meta["name"])
            except (ObjectGone, Conflict):
                continue  # gone already, or the name now belongs to another pod: not ours
        now = ctx.clock.now()
        # Done for good, in the same write as the record: later events and resyncs never book it again.
        self._finish("pods-deleted", target, forget=True, done=PODS_STAGE, pods=deleted,
                     archive=archived.location if archived else None, **_details(target, decision, now))
        ctx.events.record(ref, "SuccessfulDeletePods",
                          f"Deleted {len(deleted)} pods of {decision.outcome} {ref.kind} {ref.name}: podTTL "
                          f"{decision.ttl}s after it finished (from {decision.ttl_source}); the {ref.kind} is kept")
        return "pods-deleted"

    def reread(self, kind: JobKind, ref: JobRef) -> dict[str, Any] | None:
        try:
            return self.ctx.kube.get(kind, ref.namespace, ref.name)
        except ObjectGone:
            return None

    def time_left(self, due: int) -> float:
        """Seconds until `due` at the earliest the API server's time can be (never early)."""
        return due - self.ctx.clock.earliest()

    def refuse(self, target: Target, reason: str, detail: str) -> str:
        """Not now: the pending deletion stays; the worker's sweep books it again once it can run.

        The RQ job's record is kept (no expiry), so the sweep finds it however long that is.
        """
        if self.job is not None:
            self.job.result_ttl = -1
        self.ctx.audit.record("refused", target.ref, logging.WARNING, logger=log, by="worker", due=target.due,
                              stage=target.recorded_stage, reason=reason, failure=reason, detail=detail)
        return f"refused:{reason}"

    def would_delete(self, target: Target, decision: Decision) -> str:
        now = self.ctx.clock.now()
        if self.job is not None:
            self.ctx.schedule.mark_would_delete(self.job, int(now))
        self._finish("would-delete", target, forget=False, **_details(target, decision, now))
        return "would-delete"

    def hold_for_review(self, target: Target, decision: Decision) -> str:
        """Into the guard's held set, out of the schedule: `jobttl resync --confirm HELD_ID` releases it."""
        HeldDeletions(self.ctx.redis).hold([HeldDeletion(target.member, target.ref, decision, FIRST_RUN)])
        self._finish("held", target, forget=True, stages_too=False, reason="first-run-review",
                     detail="already due when jobttl was installed: held until an operator reviews it "
                            "(`jobttl held`, then `jobttl resync --confirm HELD_ID`)",
                     **_details(target, decision, self.ctx.clock.now()))
        return "held:first-run-review"

    def finish(self, target: Target, kind: JobKind, obj: dict[str, Any], decision: Decision | None,
               answer: dict[str, Any], archived: Archived | None = None) -> str:
        ctx = self.ctx
        now = ctx.clock.now()
        details = _details(target, decision, now) if decision is not None else {"due": target.due,
                                                                                "detail": "recorded by a later run"}
        # A Status means gone at once; the object itself (with a deletionTimestamp) means
        # finalizers still run (Foreground's, or others'): follow it until it is gone.
        gone = answer.get("kind") in ("Status", None)
        event = "deleted" if gone else "delete-requested"
        link = archived.location if archived else None
        tombstone = ctx.audit.tombstone(target.ref, obj, now, archive=link) if obj else None
        # Follow-ups and "gone after" are the API server's clock, as the follower that takes them reads it.
        follow = None if gone else now + FIRST_FOLLOW_UP
        info = jsoncodec.dumps_str({"ref": target.ref.as_dict(), "requestedAt": now, "checks": 0}) \
            if follow is not None else None
        self._finish(event, target, forget=True, tombstone=tombstone, follow=follow, info=info,
                     propagationPolicy=ctx.settings.propagation_policy, archive=link, **details)
        if ctx.settings.policy.history_limits:
            ctx.reconciler.history.drop([target.ref.uid])
        if decision is not None:
            ctx.events.record(target.ref, "SuccessfulDeleteJob",
                              f"Deleted {decision.outcome} {target.ref.kind} {target.ref.name}: TTL {decision.ttl}s "
                              f"after it finished (from {decision.ttl_source})")
        return event

    def _finish(self, event: str, target: Target, forget: bool, tombstone: str | None = None,
                follow: float | None = None, info: str | None = None, done: str | None = None,
                stages_too: bool = True, **fields: Any) -> None:
        """The one write of an outcome: the index, the audit entry, the history card, the tombstone,
        the follow-up, a stage done for good; the claim and the intent end with it."""
        ctx = self.ctx
        entry = entry_fields(event, target.ref, by="worker", stage=target.recorded_stage, **fields)
        Finish.of(target.ref, target.member, target.due, entry, forget=forget, max_entries=ctx.audit.max_entries,
                  card_ttl=ctx.audit.tombstone_seconds, tombstone=tombstone, tombstone_ttl=ctx.audit.tombstone_seconds,
                  follow=follow, info=info, done=done, override_ttl=OVERRIDE_SECONDS,
                  stages_too=stages_too).run(ctx.redis)
        ctx.audit.observed(event, target.ref, logger=log, by="worker", stage=target.recorded_stage, **fields)

    def _forget(self, target: Target, reason: str) -> str:
        self.ctx.reconciler.forget(target.ref, reason, "worker")
        return f"skipped:{reason}"


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


def _unchanged(latest: dict[str, Any] | None, judged: dict[str, Any]) -> bool:
    """The object as it was when it was judged: same UID and resourceVersion, not being deleted."""
    if latest is None:
        return False
    meta, before = latest.get("metadata") or {}, judged.get("metadata") or {}
    return (meta.get("uid") == before.get("uid") and meta.get("resourceVersion") == before.get("resourceVersion")
            and not meta.get("deletionTimestamp"))


def _already_deleted(obj: dict[str, Any] | None, ref: JobRef) -> bool:
    """Gone, re-created, or on its way out: what an earlier run's DELETE leaves."""
    if obj is None:
        return True
    meta = obj.get("metadata") or {}
    return meta.get("uid") != ref.uid or bool(meta.get("deletionTimestamp"))


def _intent(raw: bytes | str, uid: str) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        intent = jsoncodec.loads(raw)
    except jsoncodec.DecodeError:
        return None
    return intent if isinstance(intent, dict) and intent.get("uid") == uid else None


def _intent_of(target: Target, obj: dict[str, Any] | None) -> str:
    """What a run writes before its DELETE: enough for a later run to record the deletion (and
    its tombstone) should this one die before it can."""
    meta = (obj or {}).get("metadata") or {}
    intent = {"uid": target.ref.uid, "at": time.time(), "resourceVersion": meta.get("resourceVersion")}
    kept = {"metadata": {k: meta[k] for k in ("labels", "creationTimestamp") if k in meta},
            "status": (obj or {}).get("status") if isinstance((obj or {}).get("status"), dict) else {}}
    try:
        return jsoncodec.dumps_str({**intent, "object": kept})
    except TypeError:  # a status nested beyond what JSON encoders write: the tombstone says less
        return jsoncodec.dumps_str(intent)


def check_limit(ctx: WorkerContext, kind: JobKind, obj: dict[str, Any], decision: Decision) -> Decision:
    """Whether this job is beyond its group's keepLast limit, by the cluster's word, not the index's:
    the group is listed from the API server and ranked (`jobttl.core.history.ranked`). When the
    index said otherwise, its members the listing does not have are dropped."""
    policy = ctx.settings.policy
    member = membership(obj, kind, policy, decision)
    if member is None:
        return decision
    group_by = policy.cleanup_effective(member.ref.namespace, (obj["metadata"].get("labels") or {})).get("keep_last")
    label = group_by.value.group_by if group_by is not None else None
    selector = f"{label}={obj['metadata']['labels'][label]}" if label else None
    listed: dict[str, Member] = {}  # by UID: a list restarted after a 410 yields its first page again
    for page in ctx.kube.pages(kind, namespace=member.ref.namespace, label_selector=selector):
        for item in page.items:
            item = {**item, "apiVersion": kind.api_version, "kind": kind.kind}
            other = membership(item, kind, policy, decide(item, kind, policy))
            if other is not None and other.group == member.group:
                listed[other.uid] = other
    listed.setdefault(member.uid, member)  # the object just read counts, whatever the listing missed
    # The index is a hint: make it what the cluster says, so that the reconcile that follows
    # (which ranks by the index) reaches the same decision as this one.
    ctx.reconciler.history.repair(member.group, list(listed.values()))
    rank, beyond_at = ranked(listed.values()).get(member.uid, (0, None))
    if beyond_at is not None:
        return limit_decision(member, rank, beyond_at, decision)
    return decision


def _expires(decision: Decision, current: Current) -> int:
    assert decision.expires_at is not None
    return max(decision.expires_at, current.until or 0)


def _details(target: Target, decision: Decision, now: float) -> dict[str, Any]:
    return {"due": target.due, "finishedAt": decision.finished_at, "ttl": decision.ttl,
            "ttlSource": decision.ttl_source, "rules": list(decision.rules), "dryRun": decision.dry_run,
            "lateness": round(now - target.due, 3)}
