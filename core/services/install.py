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
as they always did. Where there is no ConfigMap, an audit trail written by a worker (a resync,
a deletion) also says that jobttl ran before (an upgrade from 0.2): no review is asked for.
Only a cluster where neither exists is a first install.

The rule (`InstallRecord.holds`) is pure; `InstallReview` reads and writes the record.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from redis import Redis

from jobttl.core.store import keys
from jobttl.core.runtime import logs
from jobttl.core.kube.client import Conflict, KubeClient, ObjectGone, PermanentApiError

log = logging.getLogger("jobttl.install")

CONFIGMAP = "jobttl-install"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_NAMESPACE = "jobttl"

FIRST_INSTALL = "first-install"  # nothing said jobttl ran here before: the review applies
RAN_BEFORE = "ran-before"  # an audit trail of a worker without a record (0.2): nothing to review

# Audit events only a worker (or a resync) writes: the sink alone never proves a worker ran.
_WORKER_EVENTS = {b"deleted", b"delete-requested", b"would-delete", b"resync", b"refused", b"pods-deleted"}
_AUDIT_LOOKBACK = 1000


@dataclass(frozen=True)
class InstallRecord:
    installed_at: int  # epoch seconds, the API server's clock
    origin: str = FIRST_INSTALL
    reviewed_at: int | None = None
    reviewed_by: str | None = None

    @property
    def under_review(self) -> bool:
        return self.reviewed_at is None

    def holds(self, due: int) -> bool:
        """The rule: a deletion that was already due when jobttl was installed waits for the review.
        `<=`: due at the install second is overdue at install, as `decide` counts expiry."""
        return self.under_review and due <= self.installed_at

    def reviewed(self, by: str, at: int) -> InstallRecord:
        return InstallRecord(self.installed_at, self.origin, at, by)

    def as_data(self) -> dict[str, str]:
        """The ConfigMap's data (and the Redis hash): RFC 3339 times, readable with kubectl."""
        data = {"installedAt": _rfc3339(self.installed_at), "origin": self.origin}
        if self.reviewed_at is not None:
            data["reviewedAt"] = _rfc3339(self.reviewed_at)
            data["reviewedBy"] = self.reviewed_by or ""
        return data

    @classmethod
    def from_data(cls, data: dict) -> InstallRecord:
        """From a ConfigMap's data or the Redis hash; ValueError names what is wrong."""
        data = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in data.items()}
        if "installedAt" not in data:
            raise ValueError("installedAt: missing")
        reviewed = data.get("reviewedAt")
        return cls(_epoch(data["installedAt"], "installedAt"), data.get("origin") or FIRST_INSTALL,
                   _epoch(reviewed, "reviewedAt") if reviewed else None, data.get("reviewedBy") or None)

    def as_dict(self) -> dict:
        """For `jobttl status` and reports."""
        return {"installedAt": _rfc3339(self.installed_at), "origin": self.origin, "underReview": self.under_review,
                "reviewedAt": _rfc3339(self.reviewed_at) if self.reviewed_at is not None else None,
                "reviewedBy": self.reviewed_by}


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

    def holds(self, due: int) -> bool:
        """Whether the first-run review holds a deletion due then. Cheap when it cannot: Redis is read
        only for deletions due before the install time this process knows."""
        known = self._established
        if known is not None and not known.holds(due):
            return False
        record = self.current()
        return record is not None and record.holds(due)

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
                record = InstallRecord(int(now), RAN_BEFORE, int(now), "ran-before: the audit trail shows an "
                                                                          "earlier worker")
            else:
                record = InstallRecord(int(now))
            record = self._create(record)
            if record.origin == FIRST_INSTALL and record.under_review:
                logs.record(log, "first-install", level=logging.WARNING, installedAt=_rfc3339(record.installed_at),
                            detail="deletions that were already due at install are held until an operator reviews "
                                   "them: `jobttl held`, then `jobttl resync --confirm HELD_ID`")
        self._mirror(record)
        self._established = record
        return record

    def mark_reviewed(self, by: str, now: float) -> InstallRecord | None:
        """The operator confirmed what was held: the review is done, in the cluster first."""
        record = self.current() if self._established is None else self._established
        if record is None or not record.under_review or self.kube is None:
            return record
        for _ in range(5):
            found = self.kube.get_configmap(self.namespace, CONFIGMAP)
            if found is None:
                record = self._create(record.reviewed(by, int(now)))
                break
            current = self._from_configmap(found)
            if not current.under_review:
                record = current
                break
            try:
                self.kube.replace_configmap(found, current.reviewed(by, int(now)).as_data())
            except Conflict:
                continue  # someone else wrote it meanwhile: read again
            record = current.reviewed(by, int(now))
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
            self.kube.create_configmap(self.namespace, CONFIGMAP, record.as_data(),
                                       labels={"app.kubernetes.io/name": "jobttl",
                                               "app.kubernetes.io/component": "install-record"})
            return record
        except ObjectGone as exc:
            # A real API server refuses objects in a namespace that does not exist (NamespaceLifecycle).
            raise PermanentApiError(f"cannot create ConfigMap {self.namespace}/{CONFIGMAP}: {exc}; set "
                                    "JOBTTL_NAMESPACE to jobttl's own namespace") from None
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
        if self.redis.exists(keys.RESYNC_LAST_SUCCESS):
            return True
        for _, entry in self.redis.xrevrange(keys.AUDIT_STREAM, count=_AUDIT_LOOKBACK):
            if entry.get(b"event") in _WORKER_EVENTS:
                return True
        return False


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

