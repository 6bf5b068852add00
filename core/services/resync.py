"""Resync: the API server is the truth, Redis is a cache of intentions.

Events can be missed: Knative's ApiServerSource sends none for objects that exist when it
starts, and drops an event after ~6 failed deliveries; a cluster also holds thousands of
finished jobs on the day jobttl is installed. A resync lists every enabled kind (paginated,
so memory stays bounded whatever the cluster size) and makes Redis match, a page at a time
through the one reconcile path (one round trip of scripts per page, one of RQ writes):

- finished jobs get their pending deletion, at the right time;
- pending deletions of objects that should no longer be deleted, are gone, or were
  re-created under the same name are removed;
- jobs already past expiry are collected, and queued for deletion (paced by the workers'
  shared rate limit) unless there are too many: the blast-radius guard (`jobttl.core.store.guard`)
  holds them for an operator to confirm.

One object it cannot read or decide is reported (kind, namespace, name, why) and the rest
goes on; a kind it cannot list is reported and its pending deletions are left alone. Only
one resync runs at a time (a Redis lock).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from contextlib import closing
from dataclasses import asdict, dataclass, field

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.domain.decisions.decision import Decision
from jobttl.core.store.guard import FIRST_RUN, Guard, HeldDeletion, HeldDeletions, held_id
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.decisions import review
from jobttl.core.domain.decisions.review import (
    Bookings,
    Due,
    Held,
    dropped_from_held,
    kind_key,
    listed_by_api_server,
    still_under_review,
)
from jobttl.core.services.install import CONFIGMAP, InstallRecord, unreadable_record
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.domain.kinds.registry import shown_kind
from jobttl.core.kube.client import Conflict, NotServed, Page, PermanentApiError, TransientApiError, Undecodable
from jobttl.core.kube.prefetch import prefetched
from jobttl.core.services.reconcile import COLLECT, Outcome
from jobttl.core.store.resyncs import Resyncs
from jobttl.core.store.schedule import Change, file_dry_run, member_for, split_member
from jobttl.core.services.worker_graph import WorkerGraph

log = logging.getLogger("jobttl.resync")

PAGE_SIZE = 500
# Pending deletions scheduled less than this before a resync began may belong to objects
# created after its listing: they are left for the next resync rather than cancelled.
SCHEDULED_MARGIN = 60
LOCK_SECONDS = 3600
MAX_REPORTED = 100  # rejected objects listed in a report (all are counted)


# What a resync tallies: the objects it saw, and what became of them.
COUNTS = ("seen", "scheduled", "moved", "unchanged", "cancelled", "queued_now", "held", "rejected")
_COUNTED = {
    Change.SCHEDULED: "scheduled",
    Change.MOVED: "moved",
    Change.UNCHANGED: "unchanged",
    Change.RUNNING: "unchanged",
    Change.CANCELLED: "cancelled",
}


@dataclass
class ResyncReport:
    status: str = "done"  # done | held | incomplete | already-running | stale-confirmation
    started_at: float = field(default_factory=time.time)
    duration: float = 0.0
    # seen, scheduled, moved, unchanged, cancelled; queued_now: already expired, queued for
    # (paced) deletion; held: expired, but held by the blast-radius guard; rejected: objects
    # that could not be read or decided.
    counts: Counter = field(default_factory=Counter)
    held_id: str | None = None  # what `jobttl resync --confirm` must name to release them
    # Of `held`: those already due when jobttl was installed, held for the first-run review.
    first_run_held: int = 0
    install: dict | None = None  # the install record (jobttl.core.services.install), when a review applies
    rejections: list[str] = field(default_factory=list)  # the first MAX_REPORTED, with why
    missing_kinds: list[str] = field(default_factory=list)  # not served by this cluster
    errors: list[str] = field(default_factory=list)
    # Why the install record could not be read or written: all that was due is then held, none released.
    install_problem: str | None = None
    # Held deletions dropped: their object was not in the complete listing of their kind (gone, or a
    # forged event's: never there).
    held_dropped: int = 0

    def __getattr__(self, name: str) -> int:
        if name in COUNTS:
            return self.counts[name]
        raise AttributeError(name)

    def as_dict(self) -> dict:
        data = asdict(self)
        return {**{k: v for k, v in data.items() if k != "counts"}, **{k: self.counts[k] for k in COUNTS}}

    def count(self, outcome: Outcome) -> None:
        if outcome.change in _COUNTED:
            self.counts[_COUNTED[outcome.change]] += 1

    def reject(self, what: str) -> None:
        self.counts["rejected"] += 1
        if len(self.rejections) < MAX_REPORTED:
            self.rejections.append(what)


def run(ctx: WorkerGraph, confirm: str | None = None) -> ResyncReport:
    """One resync; `confirm` releases the held set an operator reviewed (its id)."""
    report = ResyncReport()
    lock = Resyncs(ctx.redis).lock(LOCK_SECONDS)
    if not lock.acquire(blocking=False):
        report.status = "already-running"
        return report
    try:
        _resync(ctx, confirm, lock, report)
    finally:
        lock.release()
        _record(ctx, report)
    return report


@dataclass
class _Listing:
    """What a resync's listing found: the UIDs it saw, the kinds it listed completely ((apiVersion, kind)),
    and the deletions due now (found due, or booked and due at install while the review is open)."""

    seen: set[str] = field(default_factory=set)
    listed: set[tuple[str, str]] = field(default_factory=set)
    due_now: dict[str, tuple[JobRef, Decision, str]] = field(default_factory=dict)
    dues: dict[str, int] = field(default_factory=dict)

    def due(self) -> dict[str, Due]:
        """What the release rule (jobttl.core.domain.decisions.review) needs of each deletion due now."""
        return {m: Due(self.dues[m], _kind_of(ref)) for m, (ref, _, _) in self.due_now.items()}


def _resync(ctx: WorkerGraph, confirm: str | None, lock, report: ResyncReport) -> None:
    held = HeldDeletions(ctx.redis)
    # One read of the held set: the id compared is the id of exactly what may be released, the
    # deletions of objects the API server returned (what events alone held is not confirmed).
    held_before = held.all()
    confirmed = _confirmed(held_before, confirm, report)
    if confirmed is None:
        return
    install, readable = _install_record(ctx, report)
    if not readable:
        confirmed = set()  # nobody can tell what the review holds: nothing is confirmed
    report.install = install.as_dict() if install is not None else None
    listing = _Listing()
    for kind in ctx.settings.policy.kinds:
        if _list_kind(ctx, kind, report, listing, lock, install):
            listing.listed.add((kind.api_version, kind.kind))
    _forget_vanished(
        ctx, listing.listed, listing.seen, report, complete=len(listing.listed) == len(ctx.settings.policy.kinds)
    )
    # The dry-run records the gauges count by, made to match the index again, should anything
    # have written it without them (a process of an earlier release during a rollout).
    file_dry_run(ctx.redis)
    _drop_vanished_from_keeplast(ctx, listing.listed, listing.seen)
    listed_kinds = {kind_key(*k) for k in listing.listed}
    # A confirmation, or nothing due, ends the review only for the kinds listed completely.
    not_listed = still_under_review(
        None, {kind_key(k.api_version, k.kind) for k in ctx.settings.policy.kinds}, listed_kinds
    )
    were_held = _as_held(held_before)
    _drop_unlisted_held(ctx, held, were_held, listing.seen, listed_kinds, report)
    _release_or_hold(ctx, held, were_held, listing, install, confirmed, bool(confirm), not_listed, report)
    quiet = report.status == "done"  # nothing held
    if report.errors:
        report.status = "incomplete"
    if review.review_may_end_quietly(
        install, not quiet, report.install_problem is None, listed_kinds
    ) and review.nothing_was_due_at_install(install, *_review_facts(ctx, held, install, set())):
        # Nothing was overdue at install (of the kinds listed completely): nothing to review, so
        # the review ends for them, and `jobttl status` does not ask for one.
        _mark_reviewed(ctx, "resync: nothing was due at install", report, not_listed)


def _confirmed(held_before: list[HeldDeletion], confirm: str | None, report: ResyncReport) -> set[str] | None:
    """What the operator's confirmation releases (nothing without one); None: it names a held set
    that changed since the operator looked (or was released), and the resync stops there."""
    listed_before = {h.member for h in held_before if listed_by_api_server(h.by)}
    if confirm is not None and confirm != held_id(sorted(listed_before)):
        report.status, report.held_id = "stale-confirmation", held_id(sorted(listed_before))
        return None
    return listed_before if confirm else set()


def _install_record(ctx: WorkerGraph, report: ResyncReport) -> tuple[InstallRecord | None, bool]:
    """The install record, and whether it could be read (and made, where there was none)."""
    try:
        # A resync before any worker (`jobttl resync` on a new cluster) starts the review as a
        # worker would: it must not book, unreviewed, what was overdue at install.
        return ctx.install.current() or ctx.install.establish(ctx.clock.now()), True
    except (TransientApiError, PermanentApiError, Conflict, ValueError) as exc:
        # Without the install record nobody can tell what the review holds: all that is due is
        # held (none released, nothing confirmed), and the report and the log say why.
        return (_install_unreadable(ctx, report, exc) if ctx.install.enabled else None), False


def _list_kind(
    ctx: WorkerGraph, kind: JobKind, report: ResyncReport, listing: _Listing, lock, install: InstallRecord | None
) -> bool:
    """Reconcile every object of `kind`; False if the kind could not be listed completely."""
    try:
        # The next page is listed while this one is reconciled (jobttl.core.kube.prefetch).
        with closing(prefetched(ctx.kube.pages(kind, PAGE_SIZE), name=f"resync-list-{kind.kind}")) as pages:
            for page in pages:
                _reconcile_page(ctx, kind, page, report, listing, install)
                lock.extend(LOCK_SECONDS, replace_ttl=True)
        return True
    except NotServed:
        report.missing_kinds.append(f"{kind.api_version}/{kind.kind}")
    except (TransientApiError, PermanentApiError, Undecodable) as exc:
        report.errors.append(f"{kind.api_version}/{kind.kind}: {exc}")
    return False


def _reconcile_page(
    ctx: WorkerGraph, kind: JobKind, page: Page, report: ResyncReport, listing: _Listing, install: InstallRecord | None
) -> None:
    items = [{**obj, "apiVersion": kind.api_version, "kind": kind.kind} for obj in page.items]
    for _ in range(page.undecodable):
        report.reject(f"{shown_kind(kind.api_version, kind.kind)}: an object the API server sent could not be decoded")
    outcomes, rejected = ctx.reconciler.reconcile_many([(obj, kind) for obj in items], "resync", COLLECT)
    for obj in items:
        uid = (obj.get("metadata") or {}).get("uid")
        if isinstance(uid, str):
            listing.seen.add(uid)  # rejected objects too: their pending deletions are not "vanished"
    for outcome in outcomes:
        report.count(outcome)
        if _due_for_resync(outcome, kind, install):
            member = member_for(outcome.ref.uid, outcome.stage)
            listing.due_now[member] = (outcome.ref, outcome.decision, outcome.stage)
            listing.dues[member] = outcome.due
    for rejection in rejected:
        report.reject(str(rejection))
    report.counts["seen"] += len(items)


def _due_for_resync(outcome: Outcome, kind: JobKind, install: InstallRecord | None) -> bool:
    """Found due now; or, while the first-run review is open, a deletion already booked (an event before
    the first worker started) that was due at install: the review's too, held with the rest."""
    booked_for_review = (
        outcome.change is Change.UNCHANGED
        and install is not None
        and outcome.due is not None
        and install.holds(outcome.due, kind_key(kind.api_version, kind.kind))
        and not (outcome.decision and outcome.decision.dry_run)
    )
    return outcome.change is Change.DUE_NOW or booked_for_review


def _forget_vanished(ctx: WorkerGraph, listed: set, seen: set[str], report: ResyncReport, complete: bool) -> None:
    """Drop pending deletions whose object was not in the listing: deleted, or re-created
    with a new UID. Entries scheduled after the resync began may be for objects created
    after the listing, so they stay; kinds that could not be listed are left alone. An index
    entry whose RQ job (and so its record) is gone is dropped only when every kind listed."""
    vanished, orphans = [], []
    for batch in ctx.schedule.scan():
        for pending in batch:
            if pending.ref.uid in seen:
                continue
            if not pending.ref.kind:
                if complete and pending.state is None:
                    orphans.append(pending.member)
                continue
            if (pending.ref.api_version, pending.ref.kind) not in listed:
                continue
            # A margin for clock skew between this process and whoever scheduled it.
            if (pending.scheduled_at or 0) < report.started_at - SCHEDULED_MARGIN:
                vanished.append(pending.ref)
    for ref in vanished:
        if ctx.reconciler.forget(ref, "not-in-cluster", "resync").change is Change.CANCELLED:
            report.counts["cancelled"] += 1
    for member in orphans:
        if ctx.schedule.drop_orphan(member):
            report.counts["cancelled"] += 1
            ctx.audit.record(
                "cancelled",
                None,
                logging.WARNING,
                logger=log,
                member=member,
                by="resync",
                reason="no-record",
                detail="an index entry without its RQ job, for an object no listing returned",
            )


def _drop_vanished_from_keeplast(ctx: WorkerGraph, listed: set, seen: set[str]) -> None:
    """Jobs no longer in the cluster leave their keepLast groups, so that they never count as
    newer than the jobs that are (the index only ever under-counts after this)."""
    if not ctx.settings.policy.history_limits:
        return
    ctx.reconciler.keeplast.drop(
        [
            uid
            for uid, member in ctx.reconciler.keeplast.records()
            if uid not in seen and (member.ref.api_version, member.ref.kind) in listed
        ]
    )


def _release_or_hold(
    ctx: WorkerGraph,
    held: HeldDeletions,
    held_before: list[Held],
    listing: _Listing,
    install: InstallRecord | None,
    confirmed: set[str],
    confirming: bool,
    not_listed: frozenset[str],
    report: ResyncReport,
) -> None:
    """Queue the deletions found due, or hold them, as the release rule says (jobttl.core.domain.decisions.review:
    what the review holds is held whatever the thresholds and never released while it is open; the
    rest goes through the guard as a set). A confirmation releases exactly what was held (and the
    operator reviewed), where still due, and ends the first-run review, but only for the kinds listed
    completely (`not_listed` stay under review) and when nothing due at install is left that the
    operator has not seen: else the review stays open and what it holds stays held. Only what this
    resync holds or releases changes in the held set: what events held meanwhile stays.
    """
    guard = Guard.from_settings(ctx.settings)
    due = listing.due()
    plan = review.plan_holds(due, install, confirmed, guard, report.seen)
    if plan.hold:
        _hold(ctx, held, listing, plan, guard, report)
    if review.confirmation_may_end_review(
        install, confirming, plan, report.install_problem is None
    ) and review.nothing_left_to_review(install, *_review_facts(ctx, held, install, confirmed), confirmed):
        # The operator has seen all that was due at install, and said go: the review ends before
        # the release, so that no worker holds what was just confirmed. A record that cannot be
        # written leaves the review open (None): the release below then keeps what it holds.
        install = (
            _mark_reviewed(ctx, f"operator: jobttl resync --confirm {held_id(sorted(confirmed))}", report, not_listed)
            or install
        )
    # Safety: the release is planned with the record as it now stands in the cluster, never as hoped.
    plan_out = review.plan_release(due, plan, install, held_before, listing.seen)
    held.release(set(plan_out.release) | plan_out.settled)
    by = "resync-confirmed" if confirming else "resync"
    released = [v for m, v in listing.due_now.items() if m in plan_out.release]
    for outcome in ctx.reconciler.release(released, by):
        if outcome.change in (Change.SCHEDULED, Change.MOVED):
            report.counts["queued_now"] += 1


def _hold(
    ctx: WorkerGraph, held: HeldDeletions, listing: _Listing, plan: review.HoldPlan, guard: Guard, report: ResyncReport
) -> None:
    """Hold what the plan holds (`by: first-run` what the review holds), and say why."""
    held.hold(
        [
            HeldDeletion(m, listing.due_now[m][0], listing.due_now[m][1], FIRST_RUN if m in plan.review else "resync")
            for m in sorted(plan.hold)
        ]
    )
    report.counts["held"], report.status = len(plan.hold), "held"
    report.first_run_held = len(plan.hold & plan.review)
    report.held_id = held.current_id()
    said = dict(count=len(plan.hold), seen=report.seen, heldId=report.held_id)
    confirm = f"review them with `jobttl held`, then run `jobttl resync --confirm {report.held_id}`"
    if plan.reason == review.THRESHOLDS:
        why = dict(
            maxDeletions=guard.max_deletions, maxShare=guard.max_share, firstRun=report.first_run_held, detail=confirm
        )
    else:
        why = dict(
            reason="first-run-review",
            firstRun=report.first_run_held,
            installedAt=(report.install or {}).get("installedAt"),
            detail=f"already due when jobttl was installed: {confirm}",
        )
    ctx.audit.record("deletions-held", None, logging.WARNING, logger=log, **said, **why)


def _review_facts(
    ctx: WorkerGraph, held: HeldDeletions, install: InstallRecord, confirmed: set[str]
) -> tuple[Bookings, list[Held]]:
    """What `nothing_left_to_review` reads: the schedule's bookings due by the install time, then the held
    set. In that order: a worker's hold writes the held set before it takes the booking out of the
    schedule, so a deletion on its way between the two is seen in one or the other."""
    counts = ctx.schedule.due_counts(install.installed_at)
    booked = counts.due[0]  # dry-run records apart
    bookings = Bookings(booked, dry_run=counts.dry_run_total())
    if booked:
        dues = dict(ctx.schedule.due_by(install.installed_at))
        unseen = set(dues) - confirmed
        kinds = None
        if install.reviewed_at is not None and unseen:
            # Their kinds matter only once the review has ended for some kinds: read then only.
            kinds = {
                p.member: _kind_of(p.ref) if p.ref.kind else None
                for p in ctx.schedule.records([(m, dues[m]) for m in sorted(unseen)])
            }
        bookings = Bookings(booked, frozenset(dues), kinds, counts.dry_run_total())
    return bookings, _as_held(held.all())


def _mark_reviewed(
    ctx: WorkerGraph, by: str, report: ResyncReport, still: frozenset[str] = frozenset()
) -> InstallRecord | None:
    """End the review (but for the kinds in `still`), in the cluster first. A record that cannot be written
    leaves the review open: None, and the report says why."""
    try:
        record = ctx.install.mark_reviewed(by, ctx.clock.now(), still)
    except (TransientApiError, PermanentApiError, Conflict, ValueError) as exc:
        _install_problem(ctx, report, f"the review could not be marked done in the install record: {exc}")
        return None
    report.install = record.as_dict() if record is not None else None
    return record


def _install_unreadable(ctx: WorkerGraph, report: ResyncReport, exc: Exception) -> InstallRecord:
    _install_problem(ctx, report, f"the install record could not be read or written: {exc}")
    return unreadable_record(ctx.clock.now())


def _install_problem(ctx: WorkerGraph, report: ResyncReport, problem: str) -> None:
    """The install record is out of reach: said in the report (so `jobttl status`), the audit trail and
    the log; the resync is incomplete and holds what the review would."""
    report.install_problem = problem
    report.errors.append(problem)
    ctx.audit.record(
        "install-record-unreadable",
        None,
        logging.ERROR,
        logger=log,
        detail=problem,
        configmap=f"{ctx.install.namespace}/{CONFIGMAP}",
        consequence="every deletion due now is held, none released, until a resync can read and "
        "write the record (check the worker's RBAC: get, create and update on that "
        "ConfigMap)",
    )


def _kind_of(ref: JobRef) -> str:
    return kind_key(ref.api_version, ref.kind)


def _as_held(held: list[HeldDeletion]) -> list[Held]:
    """What the review's rules need of held deletions."""
    return [Held(h.member, split_member(h.member)[0], _kind_of(h.ref), h.by) for h in held]


def _drop_unlisted_held(
    ctx: WorkerGraph,
    held: HeldDeletions,
    held_before: list[Held],
    seen: set[str],
    listed: set[str],
    report: ResyncReport,
) -> None:
    """Held deletions whose object the complete listing of its kind did not return are dropped: gone
    since, re-created, or named by a forged event (jobttl.core.domain.decisions.review.dropped_from_held)."""
    gone = dropped_from_held(held_before, seen, listed)
    if not gone:
        return
    held.release(gone)
    report.held_dropped = len(gone)
    ctx.audit.record(
        "held-dropped",
        None,
        logging.WARNING,
        logger=log,
        count=len(gone),
        reason="not-in-cluster",
        detail="held deletions whose object the API server did not list (deleted since, or named by "
        "events for objects that do not exist): dropped from the held set",
    )


def _record(ctx: WorkerGraph, report: ResyncReport) -> None:
    if report.status in ("already-running", "stale-confirmation"):
        return
    report.duration = round(time.time() - report.started_at, 3)
    _record_kinds_not_served(ctx, report)
    Resyncs(ctx.redis).record(report.as_dict(), complete=report.status in ("done", "held"))
    ctx.audit.record(
        "resync", None, logging.WARNING if report.status != "done" else logging.INFO, logger=log, **report.as_dict()
    )
    ctx.metrics.resync_duration.observe(report.duration)
    ctx.metrics.resync_runs.labels(report.status).inc()
    for result in COUNTS:
        ctx.metrics.resync_objects.labels(result).inc(report.counts[result])


def _record_kinds_not_served(ctx: WorkerGraph, report: ResyncReport) -> None:
    """A kind the cluster stopped serving (or never served) goes into the audit trail once, when a
    resync first finds it so, not at every resync: the last report (Resyncs.last) says what
    was already missing. The `jobttl_kind_not_served` gauge says it all along."""
    try:
        last = Resyncs(ctx.redis).last()
        before = set(last.get("missing_kinds") or ()) if last else set()
    except (jsoncodec.DecodeError, AttributeError, TypeError):
        before = set()
    for kind in report.missing_kinds:
        if kind not in before:
            ctx.audit.record(
                "kind-not-served",
                None,
                logging.WARNING,
                logger=log,
                resource=kind,
                detail=f"the API server does not serve {kind} (its CRD is not installed, or serves "
                "another version): nothing of this kind is found or deleted until it does",
            )
