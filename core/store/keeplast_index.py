"""keepLast's index: each group of finished jobs kept in Redis (the rule is `jobttl.core.domain.decisions.keeplast`).

- ``jobttl:keep:<group>``: sorted set, finished job UID → finish time;
- ``jobttl:keep:records``: hash, UID → its group and what a decision about it needs.

One script (core/store/lua/keeplast_file.lua, `jobttl.core.store.scripts.KeepLastFile`) per reconciled object, in one
pipelined round trip before the reconcile's own: it files the job in its group (moving it out
of another) and answers its rank and the others now beyond the limit that are not yet pending
by then. So an event costs one more round trip, plus a reconcile for each job it pushes out.
The worker repairs a group from the API server's listing before a keepLast deletion
(`KeepLastIndex.repair`); each resync drops members of jobs it no longer saw.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from redis import Redis
from redis.client import Pipeline

from jobttl.core.store import keys, scripts
from jobttl.core.domain.decisions.keeplast import MAX_PUSHED_OUT, Member
from jobttl.core.store.scripts import KeepLastFile, KeepLastFileReply


@dataclass(frozen=True)
class Filed:
    """What the index says after filing one job: its rank, and the jobs it pushed out."""

    rank: int | None  # None: in no group
    beyond_at: int | None  # when this job fell beyond its group's limit (None: within it)
    pushed_out: tuple[tuple[Member, int, int], ...] = ()  # (member, rank, beyond_at)


class KeepLastIndex:
    """The groups in Redis, maintained by the reconcile path (see the module docstring)."""

    def __init__(self, redis: Redis):
        self.redis = redis

    def file(self, member: Member | None, uid: str, pipe: Pipeline) -> None:
        """Queue the filing of one job (None: it counts in no group, or is gone)."""
        if member is None:
            call = KeepLastFile(
                prefix=keys.KEEPLAST_PREFIX, uid=uid, group=None, finished_at=0, limit=0, record="", most=MAX_PUSHED_OUT
            )
        else:
            call = KeepLastFile(
                prefix=keys.KEEPLAST_PREFIX,
                uid=uid,
                group=member.group,
                finished_at=member.finished_at,
                limit=member.limit,
                record=member.record(),
                most=MAX_PUSHED_OUT,
            )
        call.queue(pipe)

    @staticmethod
    def filed(reply: KeepLastFileReply) -> Filed:
        return Filed(
            reply.rank,
            reply.beyond_at,
            tuple((Member.from_record(uid, record), rank, at) for uid, record, rank, at in reply.pushed_out),
        )

    def drop(self, uids: Iterable[str]) -> None:
        """Take jobs out of their groups (deleted, gone)."""
        uids = list(uids)
        if not uids:
            return
        with self.redis.pipeline(transaction=False) as pipe:
            for uid in uids:
                self.file(None, uid, pipe)
            scripts.execute(pipe)

    def repair(self, group: str, listed: list[Member]) -> None:
        """Make one group what the cluster says (the worker's listing): members it does not list
        leave, and every listed job is filed, so that ranks in the index are the cluster's."""
        stale = set(self.group_members(group)) - {m.uid for m in listed}
        with self.redis.pipeline(transaction=False) as pipe:
            for uid in stale:
                self.file(None, uid, pipe)
            for member in listed:
                self.file(member, member.uid, pipe)
            scripts.execute(pipe)

    def group_members(self, group: str) -> list[str]:
        return [m.decode() for m in self.redis.zrange(keys.KEEPLAST_PREFIX + group, 0, -1)]

    def records(self) -> Iterable[tuple[str, Member]]:
        for uid, raw in self.redis.hscan_iter(keys.KEEPLAST_RECORDS, count=1000):
            try:
                yield uid.decode(), Member.from_record(uid.decode(), raw)
            except (ValueError, KeyError, TypeError):
                continue
