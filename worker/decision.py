"""Is a job finished, and when does it expire? Pure functions: object in, decision out.

This is the one place that reads a job object and decides its fate. The sink uses it to
schedule from an event; the worker uses it again on a fresh read from the API server just
before deleting, because an event is only a hint: it may be stale, duplicated or forged.

Like the Kubernetes TTL-after-finished controller, expiry is finish time + TTL, where the
finish time comes from the object's status (written by the training operator), never from
when we happened to see an event. Times are whole seconds since the epoch: Kubernetes
timestamps have second precision and RQ's scheduler keys on whole seconds, so a fractional
due time would make a job fire up to a second before it expires.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from worker.kinds import JobKind


class Verdict(enum.Enum):
    EXPIRES = "expires"  # finished with a valid TTL: delete at `expires_at`
    NOT_FINISHED = "not-finished"
    NO_TTL = "no-ttl"
    INVALID_TTL = "invalid-ttl"
    BEING_DELETED = "being-deleted"  # has a deletionTimestamp: already going away
    NO_FINISH_TIME = "no-finish-time"  # finished, but no timestamp to count the TTL from


@dataclass(frozen=True)
class JobRef:
    """Who a job is. The UID tells apart two objects that had the same name."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    def as_dict(self) -> dict[str, str]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> JobRef:
        return cls(data["apiVersion"], data["kind"], data["namespace"], data["name"], data["uid"])

    @classmethod
    def of(cls, obj: dict[str, Any]) -> JobRef:
        meta = obj["metadata"]
        return cls(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"], meta["uid"])

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} ({self.uid})"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    finished_at: int | None = None
    outcome: str | None = None  # the finishing condition type, e.g. "Succeeded"
    ttl: int | None = None
    ttl_source: str | None = None
    expires_at: int | None = None


def parse_time(value: str) -> int:
    """RFC 3339 (as the API server writes it) to whole epoch seconds."""
    return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())


def _get(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def finishing_condition(obj: dict[str, Any], kind: JobKind) -> dict[str, Any] | None:
    """The true condition that marks the job finished, if any."""
    for condition in _get(obj, ("status", "conditions")) or ():
        if (
            isinstance(condition, dict)
            and condition.get("type") in kind.finished_conditions
            and condition.get("status") == "True"
        ):
            return condition
    return None


def finish_time(obj: dict[str, Any], kind: JobKind, condition: dict[str, Any]) -> int | None:
    """completionTime when set; otherwise when the finishing condition became true.

    completionTime can be missing (the training operator does not set it when a job is
    evicted or fails before starting); the condition's lastTransitionTime is the time
    the job became finished either way.
    """
    for value in (_get(obj, kind.completion_time_path) if kind.completion_time_path else None,
                  condition.get("lastTransitionTime")):
        if isinstance(value, str):
            try:
                return parse_time(value)
            except ValueError:
                continue
    return None


def own_ttl(obj: dict[str, Any], kind: JobKind) -> tuple[Any, str | None]:
    """The TTL the object asks for and the field it came from, or (None, None)."""
    for path in kind.ttl_paths:
        value = _get(obj, path)
        if value is not None:
            return value, ".".join(path)
    return None, None


def decide(obj: dict[str, Any], kind: JobKind) -> Decision:
    """What should happen to this job object, independent of the current time."""
    if _get(obj, ("metadata", "deletionTimestamp")):
        return Decision(Verdict.BEING_DELETED, "the object already has a deletionTimestamp")

    condition = finishing_condition(obj, kind)
    if condition is None:
        return Decision(Verdict.NOT_FINISHED, f"no {' or '.join(kind.finished_conditions)} condition is True")
    outcome = condition["type"]

    ttl, source = own_ttl(obj, kind)
    if ttl is None:
        return Decision(Verdict.NO_TTL, "no ttlSecondsAfterFinished is set", outcome=outcome)
    # bool is an int in Python; JSON true is not a TTL.
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
        return Decision(
            Verdict.INVALID_TTL,
            f"{source} must be a non-negative integer, got {ttl!r}",
            outcome=outcome,
            ttl_source=source,
        )

    finished_at = finish_time(obj, kind, condition)
    if finished_at is None:
        return Decision(
            Verdict.NO_FINISH_TIME,
            f"neither completionTime nor the {outcome} condition's lastTransitionTime is a valid time",
            outcome=outcome,
        )
    return Decision(
        Verdict.EXPIRES,
        f"finished ({outcome}) with a TTL of {ttl}s from {source}",
        finished_at=finished_at,
        outcome=outcome,
        ttl=ttl,
        ttl_source=source,
        expires_at=finished_at + ttl,
    )
