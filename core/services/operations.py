"""What operators ask and do: the one implementation behind the CLI and the HTTP API.

Questions: what is scheduled to be deleted, when, and because of which rule (`pending`)?
What happened to one job, and why is it still here (`find`)? What was deleted, when and
how late (`history`)? What failed and why (`failed`)? Is everything running (`status`)?
Actions: `retry` a failed deletion, `cancel` a job's deletion for good (the job is kept),
`postpone` it. Actions are recorded in the audit trail like every other decision.

Everything is read with RQ's JSON serializer: never `rq info`, which rewrites JSON jobs'
metadata as pickle.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from redis import Redis
from rq import Queue, Worker
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job
from rq.registry import FailedJobRegistry
from rq.scheduler import RQScheduler
from rq.serializers import JSONSerializer

from jobttl.core.domain.wire import jsoncodec, shapes
from jobttl.core.store import keys
from jobttl.core.store.audit import Audit
from jobttl.core.store.clocks import ClockReadings
from jobttl.core.store.guard import HeldDeletion, HeldDeletions
from jobttl.core.domain.decisions.review import listed_by_api_server
from jobttl.core.store.policy_errors import PolicyErrors
from jobttl.core.store.resyncs import Resyncs
from jobttl.core.services.install import InstallRecord
from jobttl.core.domain.wire.identity import JobRef, check_name, check_namespace
from jobttl.core.domain.kinds.registry import (
    BUILTIN_KINDS,
    DEFAULT_KINDS,
    group_of,
    kind_named,
    kubectl_resource_named,
    shown_in_group,
    shown_kind,
    split_group_kind,
)
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.store.gauges import OVERDUE_AFTER
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.store.schedule import PERMANENT_FAILURE, Pending, Schedule, split_member

log = logging.getLogger("jobttl.operations")

# A worker publishes its clock reading every few seconds; older ones no longer describe it.
CLOCK_READING_FRESH = 60


@dataclass(frozen=True)
class _Known:
    """What `find` read of one job name."""

    history: list[dict[str, Any]]
    pending: list[Pending]
    tombstones: list[dict[str, Any]]
    decisions: dict[str, dict[str, Any]]

    def __bool__(self) -> bool:
        return bool(self.history or self.pending or self.tombstones or self.decisions)

    def kinds(self) -> set[tuple[str, str]]:
        """(apiVersion, Kind) of everything held, as operators name kinds: a batch/v1 Job and a
        Volcano Job of one name are two."""
        return (
            {(e.get("apiVersion") or "", e["kind"]) for e in self.history if "kind" in e}
            | {(p.ref.api_version, p.ref.kind) for p in self.pending}
            | {(t.get("apiVersion") or "", t["kind"]) for t in self.tombstones if "kind" in t}
            | {(d.get("apiVersion") or "", d["kind"]) for d in self.decisions.values() if "kind" in d}
        )


class NotFound(LookupError):
    """Nothing is known under that name (the message says what was looked for)."""


class Ambiguous(LookupError):
    """Several jobs of different kinds share that name; the message lists the kinds (as `--kind`
    takes them: ``Job`` and ``Job.batch.volcano.sh`` are two). Or a record of an earlier release
    names a Kind without its API group, and several enabled kinds have that Kind: which one it
    was cannot be told."""


class AlreadyKept(LookupError):
    """An operator already said keep: a second cancel has nothing to do."""


class UnknownRedis(LookupError):
    """This Redis holds no jobttl schedule: probably not the one meant (JOBTTL_REDIS_URL)."""


@dataclass(frozen=True)
class Failure:
    job_id: str
    ref: JobRef
    due: int
    failed_at: float | None
    error: str

    def as_dict(self) -> dict[str, Any]:
        return shapes.with_times(
            {
                "jobId": self.job_id,
                **self.ref.as_dict(),
                "due": self.due,
                "failedAt": self.failed_at,
                "error": self.error,
            }
        )


# What `--undo` takes back: the action, and the field of the override hash it wrote.
UNDOABLE = {"cancel": "keep", "postpone": "until"}


@dataclass(frozen=True)
class Kept:
    """What `cancel` did: the job it keeps, and the deletion that was pending (None: nothing was)."""

    ref: JobRef
    pending: Pending | None

    def as_dict(self, now: float) -> dict[str, Any]:
        if self.pending is not None:
            return {**self.pending.as_dict(now), "wasPending": True}
        return {**self.ref.as_dict(), "due": None, "wasPending": False}


@dataclass(frozen=True)
class Undone:
    """What `cancel --undo` or `postpone --undo` took back, and what is pending now."""

    action: str
    refs: list[JobRef]  # newest first
    said: dict[str, dict[str, str]]  # by UID: the override as it was (keep/until, by, at)
    pending: list[dict[str, Any]]  # what is still pending (a postponed deletion stays until decided again)

    def as_dict(self) -> dict[str, Any]:
        newest = self.refs[0]
        return {
            **newest.as_dict(),
            "undone": self.action,
            "uids": [
                {
                    "uid": r.uid,
                    "by": self.said[r.uid].get("by"),
                    "at": _number(self.said[r.uid].get("at")),
                    # the time a postpone said; a cancel leaves a postpone standing, and says nothing of it
                    "until": _number(self.said[r.uid].get("until")) if self.action == "postpone" else None,
                }
                for r in self.refs
            ],
            "pending": self.pending,
        }


class Operations:
    def __init__(
        self,
        redis: Redis,
        schedule: Schedule,
        audit: Audit,
        reconciler: Reconciler | None = None,
        kinds: tuple[JobKind, ...] | None = None,
    ):
        self.redis = redis
        self.schedule = schedule
        self.audit = audit
        self.reconciler = reconciler
        self.queue: Queue = schedule.queue
        # The enabled kinds (the policy's): they say which API group a record that kept only its
        # Kind (an earlier release's) can be of.
        self.kinds = (
            kinds if kinds is not None else reconciler.policy.kinds if reconciler is not None else DEFAULT_KINDS
        )

    # --- is this jobttl's Redis? --------------------------------------------------------------
    def check_redis(self) -> None:
        """Raise UnknownRedis unless this Redis has ever held a jobttl schedule."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.exists(keys.SCHEMA, keys.PENDING_INDEX, keys.AUDIT_STREAM)
            pipe.scard(f"rq:workers:{self.queue.name}")
            ours, workers = pipe.execute()
        if not ours and not workers:
            raise UnknownRedis(
                "this Redis holds no jobttl schedule (no jobttl keys, and no worker has ever "
                f"registered on queue {self.queue.name!r}): check JOBTTL_REDIS_URL and JOBTTL_QUEUE"
            )

    # --- questions ---------------------------------------------------------------------
    def pending(
        self, namespace: str | None = None, kind: str | None = None, offset: int = 0, limit: int | None = None
    ) -> tuple[list[Pending], int]:
        """Pending deletions in due order, filtered; and how many match in all.

        Unfiltered pages, and a namespace's, come straight from the due-ordered index (a namespace's
        from the namespace index beside it, `jobttl.core.store.schedule`); a kind filter reads the
        records in batches (two round trips per thousand), of the namespace's alone when one is given.
        """
        if not kind:
            return (
                self.schedule.records(self.schedule.members(offset, limit, namespace)),
                self.schedule.count(namespace),
            )
        # The namespace index says where each member is filed; the record is checked too (Redis is
        # no trusted input: a record that names another namespace is not listed under this one).
        matching = [
            p
            for batch in self.schedule.scan(namespace=namespace)
            for p in batch
            if (not namespace or p.ref.namespace == namespace) and self._named(kind, p.ref.api_version, p.ref.kind)
        ]
        end = None if limit is None else offset + limit
        return matching[offset:end], len(matching)

    def would_delete(self, namespace: str | None = None, kind: str | None = None) -> int:
        """Dry-run records due now (what dry run would have deleted by now), filtered as `pending`."""
        now = time.time()
        if namespace:
            return sum(
                1
                for batch in self.schedule.scan(namespace=namespace)
                for p in batch
                if p.dry_run
                and p.due <= now
                and p.ref.namespace == namespace
                and self._named(kind, p.ref.api_version, p.ref.kind)
            )
        due = self.schedule.due_counts(now)
        if not kind:
            return due.dry_run_total()
        return sum(
            counts[0]
            for name, counts in due.dry_run.items()
            if kind_named(kind, split_group_kind(name)[1], split_group_kind(name)[0])
        )

    def find(self, namespace: str, name: str, kind: str | None = None) -> dict[str, Any]:
        """Everything known about one job name: pending deletions, the latest decision per UID,
        its history and tombstones. Reads only that job's keys."""
        check_namespace(namespace, "namespace")
        check_name(name, "name")
        found = self._known_about(namespace, name)
        if kind is not None:
            found = self._of_kind(found, kind)
        kinds_of = found.kinds()
        if not found:
            raise NotFound(f"jobttl knows nothing about {kind + ' ' if kind else ''}{namespace}/{name}")
        self._one_kind(kinds_of, kind, namespace, name, "names jobs")
        known = max(kinds_of, default=("", kind), key=lambda k: bool(k[0]))  # one with its apiVersion, if any
        now = time.time()
        overrides = self._overrides(list(found.decisions))
        return {
            "namespace": namespace,
            "name": name,
            "kind": known[1] if kinds_of else kind,
            "apiVersion": known[0] or None,
            "pending": [p.as_dict(now) for p in found.pending],
            "overrides": [
                {
                    "uid": uid,
                    "keep": o.get("keep") == "true",
                    "until": _number(o.get("until")),
                    "by": o.get("by"),
                    "at": _number(o.get("at")),
                }
                for uid, o in overrides.items()
            ],
            "decisions": [
                {"uid": uid, **d} for uid, d in sorted(found.decisions.items(), key=lambda i: -(i[1]["at"] or 0))
            ],
            "history": found.history,
            "tombstones": found.tombstones,
        }

    def _known_about(self, namespace: str, name: str) -> _Known:
        """One job name's keys: its history, the latest decision per UID, and those UIDs' pending
        records and tombstones."""
        history = [e.as_dict() for e in self.audit.history(namespace, name)]
        decisions = self._with_api_versions(self.audit.decisions(namespace, name), history)
        uids = list(decisions)
        return _Known(history, self._pending_of(uids), self.audit.tombstones(namespace, name, uids), decisions)

    def _of_kind(self, found: _Known, kind: str) -> _Known:
        """What `found` holds of one kind; a decision of an earlier release, without its kind, stays."""
        return _Known(
            [e for e in found.history if self._named(kind, e.get("apiVersion"), e.get("kind"))],
            [p for p in found.pending if self._named(kind, p.ref.api_version, p.ref.kind)],
            [t for t in found.tombstones if self._named(kind, t.get("apiVersion"), t.get("kind"))],
            {
                u: d
                for u, d in found.decisions.items()
                if "kind" not in d or self._named(kind, d.get("apiVersion"), d["kind"])
            },
        )

    def _pending_of(self, uids: list[str]) -> list[Pending]:
        members = [m for uid in uids for m in (uid, f"pods:{uid}")]
        with self.redis.pipeline(transaction=False) as pipe:
            for member in members:
                pipe.zscore(keys.PENDING_INDEX, member)
            dues = pipe.execute()
        return self.schedule.records([(m, int(d)) for m, d in zip(members, dues) if d is not None])

    def history(
        self,
        since: float | None = None,
        limit: int | None = None,
        event: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> list[dict[str, Any]]:
        """The trail, newest first; with `name` (and `namespace`), one job's entries, from its card's index."""
        if name is not None:
            entries = (e.as_dict() for e in self.audit.history(namespace, name) if since is None or e.at >= since)
        else:
            entries = (e.as_dict() for e in self.audit.entries(since=since))
        selected = []
        for entry in entries:
            if (event is None or entry["event"] == event) and (
                namespace is None or entry.get("namespace") == namespace
            ):
                selected.append(entry)
                if limit is not None and len(selected) >= limit:
                    break
        return selected

    def failed(self) -> list[Failure]:
        registry = FailedJobRegistry(queue=self.queue)
        failures = []
        for job in Job.fetch_many(registry.get_job_ids(), connection=self.redis, serializer=JSONSerializer):
            if job is None or self.schedule.tasks.role_of(job.func_name) != "delete":
                continue
            try:  # Redis is not trusted: a job written there by hand may not have jobttl's shape
                ref, due = _ref_of(job), job.args[1]
            except (IndexError, KeyError, TypeError, ValueError, AttributeError):
                log.warning(
                    "a failed job %s on jobttl's queue is not one jobttl booked: left out of the list",
                    job.id,
                    extra={"event": "foreign-job", "jobId": job.id},
                )
                continue
            result = job.latest_result()
            failures.append(
                Failure(
                    job.id,
                    ref,
                    due,
                    job.ended_at.timestamp() if job.ended_at else None,
                    _error(result.exc_string if result else None),
                )
            )
        return sorted(failures, key=lambda f: f.failed_at or 0, reverse=True)

    def status(self) -> dict[str, Any]:
        """Counts and health; raises RedisError when Redis is down (nothing else can be known)."""
        now = time.time()
        workers = Worker.all(queue=self.queue)
        scheduler_lock = self.redis.get(RQScheduler.get_locking_key(self.queue.name))
        last_resync = Resyncs(self.redis).last()
        readings = ClockReadings(self.redis)
        clocks = {k: shapes.with_times(v) for k, v in readings.all().items()}
        redis_now = int(readings.redis_time()[0])
        # Dry run deletes nothing, so nothing of it is due or overdue: it is what dry run would delete.
        due = self.schedule.due_counts(now - OVERDUE_AFTER, now + 3600, now)
        return {
            "pending": self.schedule.count(),
            "dueWithinHour": due.due[1],
            "overdue": due.due[0],
            "dryRunWouldDelete": due.dry_run_total(2),
            "failed": FailedJobRegistry(queue=self.queue).count,
            "held": HeldDeletions(self.redis).count(),
            "stuck": self.redis.hlen(keys.STUCK),
            "deletedLast24h": self.audit.deleted_since(now - 86400),
            "queued": self.queue.count,
            "redis": "ok",  # reached, or RedisError would have been raised
            "workers": [
                shapes.with_times(
                    {
                        "name": w.name,
                        "state": w.get_state(),
                        "lastHeartbeat": w.last_heartbeat.timestamp() if w.last_heartbeat else None,
                        "clock": clocks.get(w.name),
                    }
                )
                for w in workers
            ],
            # A worker waiting for its clock has not joined RQ yet: fresh readings count, live or not.
            "clockProblems": {
                name: c["problem"]
                for name, c in clocks.items()
                if c.get("problem") and redis_now - c.get("redisTime", 0) <= CLOCK_READING_FRESH
            },
            "scheduler": scheduler_lock.decode() if scheduler_lock else None,
            "lastResync": shapes.with_times(last_resync) if last_resync is not None else None,
            "install": self.install(),
            "policyErrors": PolicyErrors(self.redis, self.audit).summary(),
        }

    def install(self) -> dict[str, Any] | None:
        """The install record (jobttl.core.services.install) as Redis mirrors it; None before any worker ran."""
        raw = self.redis.hgetall(keys.INSTALL)
        try:
            return InstallRecord.from_data(raw).as_dict() if raw else None
        except ValueError:
            return None

    def held(self) -> dict[str, Any]:
        """What the blast-radius guard (and the first-run review) holds, with the decision behind each,
        and the id that `jobttl resync --confirm` must name."""
        held = HeldDeletions(self.redis).all()
        items = []
        for h in held:
            _, stage = split_member(h.member)
            d = h.decision
            items.append(
                shapes.with_times(
                    {
                        **h.ref.as_dict(),
                        "member": h.member,
                        "stage": stage,
                        "heldBy": h.by,
                        # In the id (and confirmed) only once the API server returned it.
                        "listed": listed_by_api_server(h.by),
                        "due": d.expires_at,
                        "finishedAt": d.finished_at,
                        "outcome": d.outcome,
                        "ttl": d.ttl,
                        "ttlSource": d.ttl_source,
                        "rules": list(d.rules),
                        "reason": d.reason,
                    }
                )
            )
        items.sort(key=lambda i: (i["due"] or 0, i["namespace"], i["name"]))
        return {
            "heldId": HeldDeletions(self.redis).current_id() if held else None,
            "items": items,
            "install": self.install(),
        }

    def due_histogram(self, now: float, hours: int = 24, days: int = 7) -> dict[str, list[dict[str, Any]]]:
        """How many deletions are due in each of the next `hours` hours and `days` days (the first of each
        from now; overdue ones count in the first): one ZCOUNT per bucket of the due index, one round trip."""
        start = int(now)
        buckets = {
            "hours": [(start + 3600 * i, start + 3600 * (i + 1)) for i in range(hours)],
            "days": [(start + 86400 * i, start + 86400 * (i + 1)) for i in range(days)],
        }
        with self.redis.pipeline(transaction=False) as pipe:
            for spans in buckets.values():
                for i, (low, high) in enumerate(spans):
                    pipe.zcount(keys.PENDING_INDEX, "-inf" if i == 0 else low, f"({high}")
            counts = iter(pipe.execute())
        return {
            name: [{"from": low, "to": high, "count": next(counts)} for low, high in spans]
            for name, spans in buckets.items()
        }

    def counts(self, cap: int = 20_000) -> dict[str, Any]:
        """Pending deletions by kind and by namespace, from at most `cap` records (due first): `complete`
        says whether every one was counted."""
        by_kind: dict[str, int] = {}
        by_namespace: dict[str, int] = {}
        seen = 0
        for batch in self.schedule.scan():
            for p in batch:
                kind = shown_kind(p.ref.api_version, p.ref.kind)
                by_kind[kind] = by_kind.get(kind, 0) + 1
                by_namespace[p.ref.namespace] = by_namespace.get(p.ref.namespace, 0) + 1
                seen += 1
            if seen >= cap:
                break
        return {
            "byKind": dict(sorted(by_kind.items(), key=lambda i: -i[1])),
            "byNamespace": dict(sorted(by_namespace.items(), key=lambda i: -i[1])),
            "counted": seen,
            "complete": seen < cap or seen >= self.schedule.count(),
        }

    def confirm_held(self, held: str, by: str) -> str:
        """Release the held set `held` names (its id, as `jobttl held` shows it): the same as `jobttl resync
        --confirm HELD`, run by a worker. Raises NotFound when the held set is no longer that one (it
        changed since it was shown, or was released): nothing is confirmed. Returns the resync's RQ job id."""
        current = HeldDeletions(self.redis).current_id()
        if current is None or current != held:
            raise NotFound(
                f"the held set is no longer {held!r} (now: {current or 'nothing held'}): it changed since "
                "it was shown; review it again"
            )
        self.audit.record(
            "review-confirm-requested",
            None,
            heldId=held,
            by=by,
            detail=f"the same as `jobttl resync --confirm {held}`, run by a worker",
        )
        return self.schedule.request_confirmation(held)

    def resync_result(self, job_id: str) -> dict[str, Any] | None:
        """The report of a resync booked by `confirm_held` once a worker ran it; None until then."""
        try:
            job = Job.fetch(job_id, connection=self.redis, serializer=JSONSerializer)
        except NoSuchJobError:
            raise NotFound(f"no resync {job_id!r}") from None
        if job.is_failed:
            result = job.latest_result()
            return {"status": "failed", "errors": [_error(result.exc_string if result else None)]}
        value = job.return_value()
        return value if isinstance(value, dict) else None

    def stuck(self) -> list[dict[str, Any]]:
        return [
            shapes.with_times({"member": m.decode(), **jsoncodec.loads(v)})
            for m, v in self.redis.hgetall(keys.STUCK).items()
        ]

    # --- actions -------------------------------------------------------------------------
    def retry(self, job_id: str | None = None) -> list[str]:
        """Requeue one failed deletion (or all of them, with no id); returns the ids requeued.

        Only deletions: the failed registry also holds other jobs (a failed resync, say),
        which have no object to name and are not this command's business.
        """
        registry = FailedJobRegistry(queue=self.queue)
        ids = [job_id] if job_id else [f.job_id for f in self.failed()]
        requeued = []
        for jid in ids:
            try:
                job = Job.fetch(jid, connection=self.redis, serializer=JSONSerializer)
                if self.schedule.tasks.role_of(job.func_name) != "delete":
                    raise InvalidJobOperation
                if job.meta.pop(PERMANENT_FAILURE, None):  # a new attempt starts with a clean slate
                    job.save_meta()
                registry.requeue(job)
            except (NoSuchJobError, InvalidJobOperation):  # unknown, not a deletion, or not failed
                raise NotFound(f"no failed deletion with job id {jid!r}") from None
            self.audit.record("retry", _ref_of(job), jobId=jid, by="operator")
            requeued.append(jid)
        return requeued

    def _pending_named(self, namespace: str, name: str, kind: str | None) -> list[Pending]:
        """Every pending deletion under that name, its pods stages included, newest schedule first.

        More than one of a kind means the job was deleted and re-created and the older
        record is stale: operator actions apply to all of them, so the one that matters
        (whichever it is) is never left out. A pods stage is the job's too: keeping the job
        keeps its pods, and a job with only a podTTL has nothing else pending.
        """
        found = [
            p
            for p in self._pending_of(list(self.audit.decisions(namespace, name)))
            if self._named(kind, p.ref.api_version, p.ref.kind)
        ]
        if not found:
            raise NotFound(f"no pending deletion for {kind + ' ' if kind else ''}{namespace}/{name}")
        self._one_kind({(p.ref.api_version, p.ref.kind) for p in found}, kind, namespace, name, "has pending deletions")
        return sorted(found, key=lambda p: p.scheduled_at or 0, reverse=True)

    def cancel(self, namespace: str, name: str, kind: str | None = None, by: str = "operator") -> Kept:
        """Keep the job: its pending deletion is removed and no event or resync brings it back.

        With nothing pending (not finished yet, no TTL yet, a deletion already cancelled by the
        worker) the keep is recorded all the same, against the newest UID that had the name: it
        applies whenever a deletion would be booked. An unknown name has no UID to record it
        against: the error says so, and names the annotation that keeps a job whatever jobttl knows.
        """
        try:
            found = self._pending_named(namespace, name, kind)
        except NotFound as missing:
            held = self._held_named(namespace, name, kind)
            if held:
                # Held for review (the first-run review, the guard): not booked, so kept by its override,
                # which the resync that releases the held set honours.
                for h in held:
                    self.schedule.set_override(h.ref.uid, {"keep": "true"}, by)
                    self.audit.record(
                        "cancelled",
                        h.ref,
                        reason="kept-by-operator",
                        by=by,
                        detail="held for review: kept when the held set is confirmed",
                    )
                return Kept(held[0].ref, None)
            ref = self._newest(namespace, name, kind, missing)
            said = self.schedule.override(ref.uid)
            if said.get("keep") == "true":
                what = f"{shown_kind(ref.api_version, ref.kind)} " if ref.kind else ""
                raise AlreadyKept(
                    f"{what}{namespace}/{name} is already kept (jobttl cancel by {said.get('by', '?')}); "
                    f"`jobttl cancel --undo {namespace}/{name}` undoes it"
                ) from None
            self.schedule.set_override(ref.uid, {"keep": "true"}, by)
            self.audit.record(
                "cancelled",
                ref,
                reason="kept-by-operator",
                by=by,
                detail="nothing was pending: the keep applies when a deletion would be booked",
            )
            return Kept(ref, None)
        for pending in found:
            self.schedule.set_override(pending.ref.uid, {"keep": "true"}, by)
            self._reconciler().forget(pending.ref, "kept-by-operator", by)
        return Kept(found[0].ref, found[0])

    def undo(self, namespace: str, name: str, action: str, kind: str | None = None, by: str = "operator") -> Undone:
        """Take back an operator's `cancel` or `postpone` of every UID that had the name.

        Only the override goes: the deletion is then decided again from the object and the
        policy, which needs the cluster, so the workers are asked for a resync (which also
        judges what it books with the blast-radius guard); until it runs, the next event
        decides, and a postponed deletion still pending runs no later than it was postponed to,
        when the worker's fresh read decides too.
        """
        check_namespace(namespace, "namespace")
        check_name(name, "name")
        field = UNDOABLE[action]
        decisions = self._decided(namespace, name, kind)
        said = {uid: o for uid, o in self._overrides(list(decisions)).items() if field in o}
        if not said:
            raise NotFound(f"no {action} of {kind + ' ' if kind else ''}{namespace}/{name} to undo")
        self._one_kind(
            {(decisions[uid].get("apiVersion") or "", str(decisions[uid].get("kind"))) for uid in said},
            kind,
            namespace,
            name,
            f"has {action}s",
        )
        refs = []
        for uid, override in sorted(said.items(), key=lambda i: -(decisions[i[0]]["at"] or 0)):
            ref = JobRef(decisions[uid].get("apiVersion") or "", decisions[uid].get("kind") or "", namespace, name, uid)
            self.schedule.clear_override(uid, field)
            self.audit.record(
                f"{action}-undone",
                ref,
                by=by,
                saidBy=override.get("by"),
                saidAt=_number(override.get("at")),
                until=_number(override.get("until")) if field == "until" else None,
            )
            refs.append(ref)
        # The CLI cannot read the object; a worker can. A resync is the one path that decides from
        # the object and the policy and books through the guard (one per second however many undos).
        # An operator's command, not an event: JOBTTL_RESYNC_MIN_INTERVAL does not defer it, so the
        # undo takes effect within seconds, as the command says.
        self.schedule.request_resync()
        return Undone(
            action,
            refs,
            {r.uid: said[r.uid] for r in refs},
            [p.as_dict(time.time()) for p in self._pending_of([r.uid for r in refs])],
        )

    def _decided(self, namespace: str, name: str, kind: str | None) -> dict[str, dict[str, Any]]:
        """The latest decision about every UID that had the name (of `kind`, if given), each with its
        apiVersion where known."""
        decisions = self.audit.decisions(namespace, name)
        if any("apiVersion" not in d for d in decisions.values()):  # noted before cards kept it
            decisions = self._with_api_versions(decisions, [e.fields for e in self.audit.history(namespace, name)])
        return {
            uid: d
            for uid, d in decisions.items()
            if "kind" not in d or self._named(kind, d.get("apiVersion"), d["kind"])
        }

    @staticmethod
    def _with_api_versions(
        decisions: dict[str, dict[str, Any]], history: list[dict[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        """Each decision with its UID's apiVersion: the card's, else its audit entries' (a card
        noted by an earlier release keeps only the kind)."""
        versions = {e["uid"]: e["apiVersion"] for e in history if "uid" in e and "apiVersion" in e}
        return {
            uid: {**d, "apiVersion": versions[uid]} if "apiVersion" not in d and uid in versions else d
            for uid, d in decisions.items()
        }

    def _newest(self, namespace: str, name: str, kind: str | None, missing: NotFound) -> JobRef:
        """The newest UID that had the name, not deleted: what an operator means by it."""
        decisions = self._decided(namespace, name, kind)
        if not decisions:
            where = f"{kubectl_resource_named(kind) if kind else 'KIND'} -n {namespace} {name}"
            raise NotFound(
                f"{missing}, and jobttl knows nothing else about it: no UID to record a keep "
                f"against. To keep it whatever jobttl sees: kubectl annotate {where} jobttl.io/keep=true"
            )
        self._one_kind(
            {(d.get("apiVersion") or "", str(d.get("kind"))) for d in decisions.values()},
            kind,
            namespace,
            name,
            "names jobs",
        )
        uid, decided = max(decisions.items(), key=lambda i: i[1]["at"] or 0)
        if decided.get("event") in ("deleted", "delete-requested", "stuck"):
            raise NotFound(f"{missing}: jobttl has already deleted it ({decided.get('event')}, uid {uid})")
        return JobRef(decided.get("apiVersion") or "", decided.get("kind") or kind or "", namespace, name, uid)

    def _overrides(self, uids: list[str]) -> dict[str, dict[str, str]]:
        """What operators said about each UID (keep, until, by, at), for those they said anything about."""
        with self.redis.pipeline(transaction=False) as pipe:
            for uid in uids:
                pipe.hgetall(keys.override(uid))
            found = pipe.execute()
        return {
            uid: {k.decode(): v.decode() for k, v in raw.items()}
            for uid, raw in zip(uids, found)
            if raw and (b"keep" in raw or b"until" in raw)
        }

    def postpone(
        self, namespace: str, name: str, seconds: int, kind: str | None = None, by: str = "operator"
    ) -> Pending:
        """Move the pending deletion `seconds` later (from now, if it is already overdue);
        events and resyncs keep the new time."""
        try:
            found = self._pending_named(namespace, name, kind)
        except NotFound:
            held = self._held_named(namespace, name, kind)
            if not held:
                raise
            return self._postpone_held(held, seconds, by)
        by_uid: dict[str, list[Pending]] = {}
        for pending in found:
            by_uid.setdefault(pending.ref.uid, []).append(pending)
        # "From now" is Redis's now, the clock the scripts and due times run on: the CLI's host
        # clock may be minutes behind, and an overdue deletion postponed into the past goes at once.
        now = int(self.redis.time()[0])
        for stages in by_uid.values():
            # One time per job, from its latest stage: every stage (its pods too) waits until then.
            ref, latest = stages[0].ref, max(p.due for p in stages)
            until = max(latest, now) + seconds
            self.schedule.set_override(ref.uid, {"until": str(until)}, by)
            self.audit.record("postponed", ref, due=latest, newDue=until, by=by)
            self._reconciler().release([(p.ref, p.as_decision(), p.stage) for p in stages], by)
        first = found[0]
        return self.schedule.get(first.ref.uid) or self.schedule.get(first.ref.uid, first.stage) or first

    def _held_named(self, namespace: str, name: str, kind: str | None) -> list[HeldDeletion]:
        """The held deletions (the review's, the guard's) of that name (and kind, if given)."""
        check_namespace(namespace, "namespace")
        check_name(name, "name")
        found = [
            h
            for h in HeldDeletions(self.redis).all()
            if h.ref.namespace == namespace and h.ref.name == name and self._named(kind, h.ref.api_version, h.ref.kind)
        ]
        if found:
            self._one_kind({(h.ref.api_version, h.ref.kind) for h in found}, kind, namespace, name, "is held")
        return found

    def _postpone_held(self, held: list[HeldDeletion], seconds: int, by: str) -> Pending:
        """Postpone deletions held for review: their override says not before then, whenever the held
        set is confirmed (the resync that releases it books them by that time)."""
        now = int(self.redis.time()[0])
        until = now
        for h in held:
            until = max(h.decision.expires_at or now, now) + seconds
            self.schedule.set_override(h.ref.uid, {"until": str(until)}, by)
            self.audit.record(
                "postponed",
                h.ref,
                due=h.decision.expires_at,
                newDue=until,
                by=by,
                detail="held for review: postponed whenever the held set is confirmed",
            )
        first = held[0]
        return Pending(
            first.ref,
            until,
            split_member(first.member)[1],
            first.decision.finished_at,
            first.decision.ttl,
            first.decision.ttl_source,
            tuple(first.decision.rules),
            first.decision.dry_run,
        )

    # --- which kind: a Kind name is not an identity -------------------------------------------
    def _groups_of(self, kind: str) -> set[str]:
        """The API groups a Kind can be of: the enabled kinds' (the built-in ones', when none is enabled)."""
        return {k.group for k in self.kinds if k.kind == kind} or {k.group for k in BUILTIN_KINDS if k.kind == kind}

    def _identity(self, api_version: str | None, kind: str) -> tuple[str | None, str]:
        """(group, Kind) of a record: its apiVersion's group; a record that kept only its Kind (an
        earlier release's) is of the one group that Kind can be of, else of no known group (None)."""
        if api_version:
            return group_of(api_version), kind
        groups = self._groups_of(kind)
        return (next(iter(groups)) if len(groups) == 1 else None), kind

    def _named(self, wanted: str | None, api_version: str | None, of_kind: str | None) -> bool:
        """Whether `--kind` (None: any) names this record's kind; one of no known group is compared by
        its bare Kind (`_one_kind` then refuses to act on it where that Kind is several kinds')."""
        if not wanted:  # None, or "" (`?kind=`): any kind, as without a namespace
            return True
        return of_kind is not None and kind_named(wanted, self._identity(api_version, of_kind)[0], of_kind)

    def _one_kind(self, kinds: set[tuple[str, str]], wanted: str | None, namespace: str, name: str, what: str) -> None:
        """Raise Ambiguous unless these (apiVersion, Kind) records are of one kind, by group and Kind
        (two declared Widgets of different groups are two kinds however alike they are shown); and,
        when `--kind` was given, unless that kind is known: a record that kept only its Kind, where
        several enabled kinds have that Kind, may be any of them."""
        identities = {self._identity(api_version, kind) for api_version, kind in kinds}
        if len(identities) > 1:
            raise Ambiguous(
                f"{namespace}/{name} {what} of several kinds ({', '.join(_shown_kinds(identities))}); "
                "say which with --kind"
            )
        unknown = [kind for group, kind in identities if group is None and len(self._groups_of(kind)) > 1]
        if wanted is not None and unknown:
            kind = unknown[0]
            candidates = ", ".join(_shown_kinds({(g, kind) for g in self._groups_of(kind)}))
            annotate = f"kubectl annotate {kubectl_resource_named(wanted)} -n {namespace} {name} jobttl.io/keep=true"
            raise Ambiguous(
                f"{namespace}/{name}: jobttl's record of it (from an earlier release) says {kind} but not "
                f"its API group, and {kind} is the Kind of several enabled kinds ({candidates}): it cannot "
                f"tell whether that is the one --kind {wanted} names. `jobttl show {namespace}/{name}` "
                f"shows what it knows; `{annotate}` keeps the object whatever jobttl knows"
            )

    def _reconciler(self) -> Reconciler:
        if self.reconciler is None:
            raise RuntimeError("this Operations was built without a Reconciler; actions need one")
        return self.reconciler


def _ref_of(job: Job) -> JobRef:
    """The job a deletion's RQ job is about: its meta (jobttl 0.2) or its arguments (0.1)."""
    ref = job.meta.get("ref")
    if isinstance(ref, list) and len(ref) == 4:
        uid, _ = split_member(str(job.args[0]))
        return JobRef(*ref, uid)
    return JobRef.from_dict(job.args[0])


def _number(text: str | None) -> int | None:
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _error(exc_string: str | None) -> str:
    """What a failed deletion's error says, from the traceback RQ kept: its last line (the
    exception), without the Python class it names (the worker's log has the traceback)."""
    lines = [line for line in (exc_string or "").strip().splitlines() if line.strip()]
    return shapes.plain_error(lines[-1]) if lines else ""


def _shown_kinds(identities: set[tuple[str | None, str]]) -> list[str]:
    """(group, Kind) identities as `--kind` takes them, sorted: as each is shown, or as ``Kind.group``
    where two are shown alike (two declared Widgets of different groups); one of no known group
    says so."""

    def shown(group: str | None, kind: str) -> str:
        return f"{kind} (API group not recorded)" if group is None else shown_in_group(group, kind)

    names = [shown(*identity) for identity in identities]
    return sorted(
        {
            f"{kind}.{group}" if group and names.count(shown(group, kind)) > 1 else shown(group, kind)
            for group, kind in identities
        }
    )
