"""The blast-radius guard: deletions that would happen at once, in numbers, wait for a human.

A mis-set policy (``maxTTL: 1h`` instead of ``1d``), a wrong clock or a restored old Redis
can make thousands of finished jobs due at the same moment. Deleting them all would be
correct only if the cause were intended, so instead they are held, listed, and released
only when an operator confirms that very set:

- a resync holds the deletions it would newly make now when they exceed
  `max_deletions`, or `max_share` of the jobs it saw;
- events hold a newly due deletion once more than `max_deletions` came due within a
  minute (`burst_rule`; the reconcile script counts them on Redis's clock).

- on a first install, until an operator has reviewed them, deletions that were already due at
  install are held whatever the thresholds (`jobttl.core.services.install`; held ``by: first-run``).

What counts, for either, is news (`is_news`): a deletion that comes due now and was not
already due, or is pulled in to within the hour from further away (a mistyped maxTTL).

All add to one held set (``jobttl:held``). Its id is a digest of the held members, so a
confirmation (``jobttl resync --confirm ID``) never releases a set the operator did not
review: if anything was added since, the id no longer matches.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from redis import Redis

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.store import keys
from jobttl.core.domain.decisions.decision import Decision
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.decisions.plan import COLLECT, GUARDED
from jobttl.core.domain.decisions.review import listed_by_api_server


FIRST_RUN = "first-run"  # HeldDeletion.by: held for the first-run review (jobttl.core.services.install)
NEWS_HORIZON = 3600  # a deletion pulled in to within this of now is news too
BURST_WINDOW = 60  # events' burst limit counts what came due within this many seconds


def is_news(
    due: int, pending: int | None, booked: bool, now: float, dry_run: bool = False, horizon: int = NEWS_HORIZON
) -> bool:
    """Whether booking `due` makes a deletion happen now that was not going to: the guard's rule.

    `pending` is what the schedule holds for the member (None: nothing), `booked` whether it is
    a deletion on its way (its RQ job there, not a dry-run record), `now` Redis's clock. A
    dry-run deletion deletes nothing. The reconcile script makes this comparison on the values it
    reads atomically (core/store/lua/reconcile.lua); this is its specification, and one table runs
    through both (tests/core/test_lua_reconcile.py).
    """
    already = pending is not None and pending <= now and booked
    newly = due <= now and not already
    pulled = pending is not None and due < pending and due <= now + horizon and pending > now + horizon
    return (newly or pulled) and not dry_run


@dataclass(frozen=True)
class BurstRule:
    """How one reconcile treats news: reported and not written (a resync judges its news as a
    set), or counted against the per-minute limit (events), or neither (released)."""

    collect: bool = False
    limit: int | None = None  # hold news once this many came due within `window` (None: no limit)
    window: int = BURST_WINDOW
    horizon: int = NEWS_HORIZON


def burst_rule(mode: str, max_deletions: int | None) -> BurstRule:
    """The rule for a reconcile's mode (jobttl.core.domain.decisions.plan: GUARDED, COLLECT, RELEASE)."""
    return BurstRule(collect=mode == COLLECT, limit=max_deletions if mode == GUARDED else None)


@dataclass(frozen=True)
class Guard:
    max_deletions: int
    max_share: float

    @classmethod
    def from_settings(cls, settings) -> Guard:
        return cls(settings.resync_max_deletions, settings.resync_max_share)

    def exceeded(self, due: int, seen: int) -> bool:
        return due > self.max_deletions or (seen > 0 and due / seen > self.max_share)


@dataclass(frozen=True)
class HeldDeletion:
    member: str
    ref: JobRef
    decision: Decision
    by: str

    def as_json(self) -> str:
        return jsoncodec.dumps_str({"ref": self.ref.as_dict(), "decision": self.decision.as_dict(), "by": self.by})

    @classmethod
    def from_json(cls, member: str, raw: bytes | str) -> HeldDeletion:
        data = jsoncodec.loads(raw)
        return cls(member, JobRef.from_dict(data["ref"]), Decision.from_dict(data["decision"]), data.get("by", ""))


def held_id(members: list[str]) -> str | None:
    """The digest an operator confirms: it changes whenever the held set does."""
    if not members:
        return None
    return hashlib.sha256("\n".join(sorted(members)).encode()).hexdigest()[:12]


class HeldDeletions:
    """The held set in Redis."""

    def __init__(self, redis: Redis):
        self.redis = redis

    def all(self) -> list[HeldDeletion]:
        return sorted(
            (HeldDeletion.from_json(m.decode(), raw) for m, raw in self.redis.hscan_iter(keys.HELD, count=500)),
            key=lambda h: h.member,
        )

    def members(self) -> list[str]:
        return [m.decode() for m in self.redis.hkeys(keys.HELD)]

    def current_id(self) -> str | None:
        """The id an operator confirms: of the held deletions of objects the API server returned
        (jobttl.core.domain.decisions.review.listed_by_api_server); what events alone held is not in it."""
        return held_id(self.listed_members())

    def listed_members(self) -> list[str]:
        return [h.member for h in self.all() if listed_by_api_server(h.by)]

    def count(self) -> int:
        return self.redis.hlen(keys.HELD)

    def hold(self, held: list[HeldDeletion]) -> None:
        """Add these to the held set (what events held meanwhile stays)."""
        if held:
            self.redis.hset(keys.HELD, mapping={h.member: h.as_json() for h in held})

    def release(self, members: list[str] | set[str]) -> None:
        """Take these out of the held set (released, or no longer due); nothing else."""
        if members:
            self.redis.hdel(keys.HELD, *members)
