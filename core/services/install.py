"""The first-run review: what was already overdue when jobttl arrived waits until an operator has looked.

On the day jobttl is installed a cluster holds finished jobs that, by the policy just written,
expired weeks ago. Deleting them within seconds of the first resync would be correct only if
the policy said what its author meant; nobody has seen the list yet. So, on a first install:

- the install time is recorded, by the API server's clock, in the cluster itself (a ConfigMap,
  `jobttl-install`, in jobttl's namespace) and mirrored into Redis (``jobttl:install``);
- until the review is done, a deletion due at or before the install time is held by the
  blast-radius guard (``by: first-run``), whatever its thresholds: the resync holds the ones it
  finds, the worker holds any that reach it otherwise (an event for an old job);
- `jobttl held` lists them with the rule that decided each; `jobttl resync --confirm HELD_ID`
  releases them and marks the review done (in the ConfigMap and in Redis).

Deletions due after the install time (jobs finishing from now on) are never held by this.

A Redis that lost its data is not a first install: the ConfigMap says when jobttl was installed
and whether the review is done, and the guard's thresholds govern what a resync finds overdue,
as they always did. Where there is no ConfigMap, a worker's deletion in the audit trail made by a
release that kept no record says that jobttl ran before (an upgrade from 0.2): no review is asked
for. Nothing else does: not a resync's entry (a `jobttl resync` that could not read the record
writes one too), not a dry run's, not a deletion of this release (made under a record since lost:
the ConfigMap deleted and Redis flushed while the review was open). Only a cluster where neither
the record nor such a deletion exists is a first install: with both the ConfigMap and Redis's
mirror gone, the next start holds what is overdue again, never taking it as reviewed.

The rule (`InstallRecord.holds`) is pure; `InstallReview` reads and writes the record.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from redis import Redis

from jobttl.core.store import keys
from jobttl.core.store.audit import DELETION_EVENTS, INSTALL_RECORDED
from jobttl.core.runtime import logs
from jobttl.core.kube.client import Conflict, KubeClient, ObjectGone, PermanentApiError

log = logging.getLogger("jobttl.install")

CONFIGMAP = "jobttl-install"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_NAMESPACE = "jobttl"

FIRST_INSTALL = "first-install"  # nothing said jobttl ran here before: the review applies
RAN_BEFORE = "ran-before"  # an audit trail of a worker without a record (0.2): nothing to review
UNREADABLE = "unreadable"  # a resync that could not read or write the record: it holds all that is due

# "Ran before" needs a worker's deletion made by a release that kept no install record (0.2): a
# resync's entry, a dry run's, a refusal or the sink's prove nothing was ever reviewed, and a
# deletion of this release (marked `INSTALL_RECORDED`) was made under a record that is now lost.
_DELETIONS = {event.encode() for event in DELETION_EVENTS}
_AUDIT_LOOKBACK = 10_000


@dataclass(frozen=True)
class InstallRecord:
    installed_at: int  # epoch seconds, the API server's clock
    origin: str = FIRST_INSTALL
    reviewed_at: int | None = None
    reviewed_by: str | None = None
    # Once reviewed: the kinds (apiVersion/Kind) the confirmation did not cover, because its resync
    # could not list them completely. They stay under review (jobttl.core.domain.decisions.review).
    kinds_under_review: frozenset[str] = frozenset()

    @property
    def under_review(self) -> bool:
        """The review of the install is open: no confirmation (or nothing-was-due) has ended it yet."""
        return self.reviewed_at is None

    @property
    def reviewing(self) -> bool:
        """Anything is still under review: the install's, or kinds its confirmation did not cover."""
        return self.reviewed_at is None or bool(self.kinds_under_review)

    def holds(self, due: int, kind: str | None = None) -> bool:
        """The rule: a deletion that was already due when jobttl was installed waits for the review of its
        kind (`kind_key`; None: any kind still under review). `<=`: due at the install second is overdue at
        install, as `decide` counts expiry."""
        if due > self.installed_at:
            return False
        if self.reviewed_at is None:
            return True
        return bool(self.kinds_under_review) if kind is None else kind in self.kinds_under_review

    def reviewed(self, by: str, at: int, still: frozenset[str] = frozenset()) -> InstallRecord:
        """Reviewed by `by`, but for the kinds in `still` (of those this record still had under review)."""
        left = still if self.reviewed_at is None else self.kinds_under_review & still
        return InstallRecord(self.installed_at, self.origin, at, by, frozenset(left))

    def as_data(self) -> dict[str, str]:
        """The ConfigMap's data (and the Redis hash): RFC 3339 times, readable with kubectl."""
        data = {"installedAt": _rfc3339(self.installed_at), "origin": self.origin}
        if self.reviewed_at is not None:
            data["reviewedAt"] = _rfc3339(self.reviewed_at)
            data["reviewedBy"] = self.reviewed_by or ""
        if self.kinds_under_review:
            data["kindsUnderReview"] = ",".join(sorted(self.kinds_under_review))
        return data

    @classmethod
    def from_data(cls, data: dict) -> InstallRecord:
        """From a ConfigMap's data or the Redis hash; ValueError names what is wrong."""
        data = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in data.items()
        }
        if "installedAt" not in data:
            raise ValueError("installedAt: missing")
        reviewed = data.get("reviewedAt")
        kinds = frozenset(k.strip() for k in (data.get("kindsUnderReview") or "").split(",") if k.strip())
        return cls(
            _epoch(data["installedAt"], "installedAt"),
            data.get("origin") or FIRST_INSTALL,
            _epoch(reviewed, "reviewedAt") if reviewed else None,
            data.get("reviewedBy") or None,
            kinds,
        )

    def as_dict(self) -> dict:
        """For `jobttl status` and reports."""
        return {
            "installedAt": _rfc3339(self.installed_at),
            "origin": self.origin,
            "underReview": self.under_review,
            "reviewedAt": _rfc3339(self.reviewed_at) if self.reviewed_at is not None else None,
            "reviewedBy": self.reviewed_by,
            "kindsUnderReview": sorted(self.kinds_under_review),
        }


def unreadable_record(now: float) -> InstallRecord:
    """What a resync goes by when it cannot read or write the install record: a review open at `now`,
    so that everything due by then is held, none of it released, and nothing is written."""
    return InstallRecord(int(now), UNREADABLE)


def namespace_from_env(configured: str | None) -> str:
    """jobttl's own namespace: the setting, else the service account's (in a pod), else `jobttl`."""
    if configured:
        return configured
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            return f.read().strip() or DEFAULT_NAMESPACE
    except OSError:
        return DEFAULT_NAMESPACE


class InstallReview:
    """The install record: the cluster's ConfigMap is the truth, Redis's hash its mirror.

    `kube` is None where the process has no API access (the sink, the operator's read-only
    commands): it then reads Redis's mirror only. `enabled` False (``JOBTTL_FIRST_RUN_REVIEW=off``):
    nothing is recorded and nothing held.
    """

    def __init__(self, redis: Redis, kube: KubeClient | None, namespace: str, enabled: bool = True):
        self.redis = redis
        self.kube = kube
        self.namespace = namespace
        self.enabled = enabled
        self._established: InstallRecord | None = None

    @classmethod
    def from_settings(cls, redis: Redis, kube: KubeClient | None, settings) -> InstallReview:
        return cls(redis, kube, namespace_from_env(settings.namespace), settings.first_run_review == "on")

    # --- reading ------------------------------------------------------------------------------------
    def current(self) -> InstallRecord | None:
        """The record as Redis mirrors it; re-mirrored from the cluster when Redis lost it (a process
        that established it, and so can read the ConfigMap). None: no review applies."""
        if not self.enabled:
            return None
        raw = self.redis.hgetall(keys.INSTALL)
        if raw:
            try:
                return InstallRecord.from_data(raw)
            except ValueError as exc:
                logs.record(log, "install-record-invalid", level=logging.ERROR, detail=f"{keys.INSTALL}: {exc}")
        if self._established is not None and self.kube is not None:
            return self.establish(self._established.installed_at)
        return None

    def holds(self, due: int, kind: str | None = None) -> bool:
        """Whether the first-run review holds a deletion of `kind` (`kind_key`) due then. Redis's mirror is
        read every time (one HGETALL): a record made again after the ConfigMap and Redis's data were
        lost starts a new review, later than the one this process knew."""
        record = self.current()
        return record is not None and record.holds(due, kind)

    # --- writing ------------------------------------------------------------------------------------
    def establish(self, now: float) -> InstallRecord | None:
        """At a worker's start (and a resync's, when Redis has no record): the record from the cluster,
        or made now.

        The ConfigMap wins; without one, Redis's mirror (re-written to the cluster), else the audit
        trail decides between "ran before" and a first install at `now` (the API server's clock).
        """
        if not self.enabled or self.kube is None:
            return None
        found = self.kube.get_configmap(self.namespace, CONFIGMAP)
        if found is not None:
            record = self._from_configmap(found)
        else:
            mirrored = self.redis.hgetall(keys.INSTALL)
            if mirrored:
                record = InstallRecord.from_data(mirrored)
            elif self._worker_ran_before():
                record = InstallRecord(
                    int(now), RAN_BEFORE, int(now), "ran-before: the audit trail shows an earlier worker"
                )
            else:
                record = InstallRecord(int(now))
            record = self._create(record)
            if record.origin == FIRST_INSTALL and record.under_review:
                logs.record(
                    log,
                    "first-install",
                    level=logging.WARNING,
                    installedAt=_rfc3339(record.installed_at),
                    detail="deletions that were already due at install are held until an operator reviews "
                    "them: `jobttl held`, then `jobttl resync --confirm HELD_ID`",
                )
        self._mirror(record)
        self._established = record
        return record

    def mark_reviewed(self, by: str, now: float, still: frozenset[str] = frozenset()) -> InstallRecord | None:
        """The operator confirmed what was held: the review is done, in the cluster first, but for the kinds
        in `still` (not listed completely by the resync that confirmed)."""
        record = self.current() or self._established
        if record is None or self.kube is None or not _covers_more(record, still):
            return record
        for _ in range(5):
            found = self.kube.get_configmap(self.namespace, CONFIGMAP)
            if found is None:
                record = self._create(record.reviewed(by, int(now), still))
                break
            current = self._from_configmap(found)
            if not _covers_more(current, still):
                record = current  # nothing newly covered: the record stays as it is
                break
            try:
                self.kube.replace_configmap(found, current.reviewed(by, int(now), still).as_data())
            except Conflict:
                continue  # someone else wrote it meanwhile: read again
            record = current.reviewed(by, int(now), still)
            break
        else:
            raise Conflict(f"ConfigMap {self.namespace}/{CONFIGMAP} kept changing: the review is not marked done")
        self._mirror(record)
        self._established = record
        logs.record(log, "first-run-reviewed", by=record.reviewed_by, installedAt=_rfc3339(record.installed_at))
        return record

    # --- the parts ----------------------------------------------------------------------------------
    def _from_configmap(self, found: dict) -> InstallRecord:
        try:
            return InstallRecord.from_data(found.get("data") or {})
        except ValueError as exc:
            # Fail closed, and say where: a hand-edited record must not silently start deleting.
            raise ValueError(f"ConfigMap {self.namespace}/{CONFIGMAP}: data.{exc}") from None

    def _create(self, record: InstallRecord) -> InstallRecord:
        try:
            self.kube.create_configmap(
                self.namespace,
                CONFIGMAP,
                record.as_data(),
                labels={"app.kubernetes.io/name": "jobttl", "app.kubernetes.io/component": "install-record"},
            )
            return record
        except ObjectGone as exc:
            # A real API server refuses objects in a namespace that does not exist (NamespaceLifecycle).
            raise PermanentApiError(
                f"cannot create ConfigMap {self.namespace}/{CONFIGMAP}: {exc}; set "
                "JOBTTL_NAMESPACE to jobttl's own namespace"
            ) from None
        except Conflict:
            # Another worker created it first (AlreadyExists): its record is the record.
            found = self.kube.get_configmap(self.namespace, CONFIGMAP)
            if found is None:
                raise
            return self._from_configmap(found)

    def _mirror(self, record: InstallRecord) -> None:
        with self.redis.pipeline() as pipe:
            pipe.delete(keys.INSTALL)
            pipe.hset(keys.INSTALL, mapping=record.as_data())
            pipe.execute()

    def _worker_ran_before(self) -> bool:
        """Whether the audit trail holds a deletion by a worker of a release without install records."""
        marker = INSTALL_RECORDED.encode()
        for _, entry in self.redis.xrevrange(keys.AUDIT_STREAM, count=_AUDIT_LOOKBACK):
            if entry.get(b"event") in _DELETIONS and marker not in entry:
                return True
        return False


def _covers_more(record: InstallRecord, still: frozenset[str]) -> bool:
    """Whether a confirmation leaving `still` under review ends any review `record` has open."""
    return record.under_review or bool(record.kinds_under_review - still)


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _epoch(value: str, name: str) -> int:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name}: not an RFC 3339 time: {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return int(parsed.timestamp())
