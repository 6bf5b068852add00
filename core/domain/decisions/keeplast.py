"""keepLast: keep the last N finished jobs of a group, whatever their TTL: the rule, pure.

Like a CronJob's successfulJobsHistoryLimit / failedJobsHistoryLimit, for every kind. A group
is the finished jobs of one kind in one namespace under the same keepLast setting (the rule
that set it), of one outcome, and with ``groupBy`` the same value of that label. Once a group
holds more than the limit, the oldest beyond it are due, at the moment they fell beyond it:
the finish time of the job that pushed each one out (stable, so a later reconcile never moves
it). The TTL still applies to the rest, and to these too when it is earlier.

This module decides from objects (`membership`, `ranked`, `limit_decision`); the groups kept in
Redis, so that an event costs no list of the cluster, are `jobttl.core.store.keeplast_index`. The
worker never deletes on the index's word: before a keepLast deletion it lists the group from
the API server and ranks the real objects (`ranked`), repairing the index when it was wrong.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.domain.decisions.decision import KEEP_UNTIL_ANNOTATION, Decision, Verdict, keep_until
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.domain.rules.policy import Policy

# Verdicts of finished jobs that count in (and can be removed from) a group: not kept, not
# excluded, not left to Kubernetes' own TTL controller, and with a valid TTL or none at all.
COUNTED = (Verdict.EXPIRES, Verdict.NO_TTL)
# At most this many jobs pushed out are returned per reconcile; the rest follow at the next
# event in the group or the next resync (each job's own reconcile also finds it beyond).
MAX_PUSHED_OUT = 50
SOURCE_PREFIX = "keepLast of "


@dataclass(frozen=True)
class Member:
    """One finished job's place in a group."""

    group: str
    uid: str
    finished_at: int
    limit: int
    source: str  # the policy level that set keepLast ("rule research")
    ref: JobRef
    outcome: str
    rules: tuple[str, ...] = ()
    dry_run: bool = False
    notify: bool = True
    keep_until: int | None = None  # the user's jobttl.io/keep-until: never due before it

    def record(self) -> str:
        """What the index keeps about it, to decide about it without its object."""
        return jsoncodec.dumps_str(
            {
                "group": self.group,
                "ref": [self.ref.api_version, self.ref.kind, self.ref.namespace, self.ref.name],
                "finishedAt": self.finished_at,
                "limit": self.limit,
                "source": self.source,
                "outcome": self.outcome,
                "rules": list(self.rules),
                "dryRun": self.dry_run,
                "notify": self.notify,
                **({"keepUntil": self.keep_until} if self.keep_until is not None else {}),
            }
        )

    @classmethod
    def from_record(cls, uid: str, raw: bytes | str) -> Member:
        data = jsoncodec.loads(raw)
        return cls(
            data["group"],
            uid,
            int(data["finishedAt"]),
            int(data["limit"]),
            data["source"],
            JobRef(*data["ref"], uid),
            data["outcome"],
            tuple(data.get("rules") or ()),
            bool(data.get("dryRun")),
            bool(data.get("notify", True)),
            int(data["keepUntil"]) if isinstance(data.get("keepUntil"), int) else None,
        )


def group_key(source: str, kind: JobKind, namespace: str, group_by: str | None, value: str | None, outcome: str) -> str:
    label = f"{group_by}={value}" if group_by else ""
    return f"{source}|{kind.api_version}/{kind.kind}|{namespace}|{label}|{outcome}"


def membership(
    obj: dict[str, Any], kind: JobKind, policy: Policy, decision: Decision, notify: bool = True
) -> Member | None:
    """The group this job counts in, or None (no keepLast for it, not finished, kept, unlabelled)."""
    if decision.verdict not in COUNTED or decision.outcome is None:
        return None
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    setting = policy.cleanup_effective(meta.get("namespace", ""), labels).get("keep_last")
    if setting is None or setting.value.limit(decision.outcome) is None:
        return None
    group_by = setting.value.group_by
    if group_by is not None and not isinstance(labels.get(group_by), str):
        return None  # in no group: the limit never deletes a job it cannot place
    finished = kind.finish(obj)
    if finished is None or finished.time is None:
        return None
    namespace = meta.get("namespace", "")
    return Member(
        group_key(setting.source, kind, namespace, group_by, labels.get(group_by), decision.outcome),
        meta.get("uid", ""),
        finished.time,
        setting.value.limit(decision.outcome),
        setting.source,
        JobRef.of(obj),
        decision.outcome,
        decision.rules,
        decision.dry_run,
        notify,
        keep_until(obj, kind, policy),
    )


def ranked(members: Iterable[Member]) -> dict[str, tuple[int, int | None]]:
    """uid → (rank, when it fell beyond its group's limit, or None) for every member given.

    Newest first, ties broken by UID, exactly as Redis orders a sorted set in reverse: the
    worker's check over a listing and the index agree on every rank."""
    result: dict[str, tuple[int, int | None]] = {}
    by_group: dict[str, list[Member]] = {}
    for member in members:
        by_group.setdefault(member.group, []).append(member)
    for group in by_group.values():
        order = sorted(group, key=lambda m: (m.finished_at, m.uid), reverse=True)
        for rank, member in enumerate(order):
            beyond = order[rank - member.limit].finished_at if rank >= member.limit else None
            result[member.uid] = (rank, beyond)
    return result


def limit_decision(member: Member, rank: int, beyond_at: int, decision: Decision | None = None) -> Decision:
    """The decision for a job beyond its group's limit: due when it fell beyond, or at its TTL if earlier."""
    if (
        decision is not None
        and decision.verdict is Verdict.EXPIRES
        and decision.expires_at is not None
        and decision.expires_at <= beyond_at
    ):
        return decision
    due = max(beyond_at, member.finished_at)
    postponed = ""
    if member.keep_until is not None and member.keep_until > due:
        due, postponed = member.keep_until, f"; postponed by annotation {KEEP_UNTIL_ANNOTATION}"
    return Decision(
        Verdict.EXPIRES,
        f"{member.ref.kind} {member.outcome}; {rank} newer {member.outcome} ones in its "
        f"group, {member.source} keeps {member.limit}{postponed}",
        finished_at=member.finished_at,
        outcome=member.outcome,
        ttl=due - member.finished_at,
        ttl_source=f"{SOURCE_PREFIX}{member.source} ({member.limit} {member.outcome})",
        expires_at=due,
        dry_run=member.dry_run,
        rules=member.rules,
    )


def is_limit_decision(decision: Decision) -> bool:
    return bool(decision.ttl_source and decision.ttl_source.startswith(SOURCE_PREFIX))
