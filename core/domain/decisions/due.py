"""When a deletion is due: the decision's expiry, as an operator's override changes it. Pure.

The one rule, said once: the store books by it (jobttl.core.store.protocol, with the override the
reconcile script read, atomically), and the worker judges by it right before deleting (with
the override its BEGIN read). Lua never applies it: the reconcile script only checks that
the override it reads is the one the due time was decided with (jobttl.core.store.scripts.Reconcile).

- An operator's keep (``jobttl cancel``) wins: nothing is due, whatever the decision.
- An operator's until (``jobttl postpone``) postpones: never due before it.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import NamedTuple

from jobttl.core.domain.decisions.decision import Decision, Verdict

KEPT_BY_OPERATOR = "kept-by-operator"  # why nothing is due: an operator said keep
POSTPONED_BY_OPERATOR = "postponed-by-operator"  # why later than the decision: an operator said until


@dataclass(frozen=True)
class Override:
    """What an operator said about one UID (``jobttl:override:<uid>``): keep it, or not before a time."""

    keep: bool = False
    until: int | None = None

    @classmethod
    def read(cls, keep: bytes | str | None, until: bytes | str | None) -> Override:
        """From the stored fields ("true"; epoch seconds), absent as None or ""."""
        if not keep and not until:
            return NO_OVERRIDE  # what nearly every reconcile reads
        keep = keep.decode() if isinstance(keep, bytes) else keep
        until = until.decode() if isinstance(until, bytes) else until
        # Up, never down: a stored fraction (jobttl writes whole seconds) must not book a
        # postponed deletion before the time an operator said.
        return cls(keep == "true", math.ceil(float(until)) if until else None)


NO_OVERRIDE = Override()


class Due(NamedTuple):
    at: int | None  # when to delete; None: not to be deleted
    why: str | None = None  # when not the decision's own time: KEPT_BY_OPERATOR, POSTPONED_BY_OPERATOR


def due_at(decision: Decision | None, override: Override = NO_OVERRIDE) -> Due:
    """When the object the decision is about is to be deleted, given what an operator said.

    A decision that does not expire (or none: the object is gone) is never due, override or not.
    """
    if decision is None or decision.verdict is not Verdict.EXPIRES or decision.expires_at is None:
        return Due(None)
    if override.keep:
        return Due(None, KEPT_BY_OPERATOR)
    if override.until is not None and override.until > decision.expires_at:
        return Due(override.until, POSTPONED_BY_OPERATOR)
    return Due(decision.expires_at)
