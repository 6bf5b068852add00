"""The rules of the first-run review and of the guard's held set that decide what an operator's
confirmation covers (issue 26 §2). Pure: names and sets in, a decision out; the install record
(jobttl.core.services.install) and the resync (jobttl.worker.resync) apply them.

- A kind is named as the API server serves it, ``apiVersion/Kind`` (`kind_key`).
- A confirmation ends the review only for the kinds that resync listed completely; a kind it could
  not list (a 404 while its CRD is reinstalled, a 403, a 500) stays under review
  (`still_under_review`), and what was overdue at install of it stays held until a complete
  listing and a confirmation that covers it.
- The held set's id, and what a confirmation releases, cover only deletions of objects the API
  server returned (`listed_by_api_server`): one a resync listed, or a worker re-read. The sink
  holds what a burst of events names without reading it; such an entry waits for the next resync,
  which lists it (and holds it as its own) or drops it (`dropped_from_held`): forged events for
  objects that do not exist change neither the id nor what is confirmed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# HeldDeletion.by of a hold made from an event alone (the sink's burst guard): nothing was read.
HELD_FROM_EVENTS = "event"


def kind_key(api_version: str, kind: str) -> str:
    """A kind as the review and `jobttl status` name it."""
    return f"{api_version}/{kind}"


def listed_by_api_server(held_by: str) -> bool:
    """Whether a held deletion is of an object the API server returned: held by a resync's listing or a
    worker's re-read, not by the sink from an event's word alone."""
    return held_by != HELD_FROM_EVENTS


def still_under_review(before: frozenset[str] | None, enabled: Iterable[str], listed: Iterable[str]) -> frozenset[str]:
    """The kinds a confirmation leaves under review: of those under review `before` (None: the review
    has not ended for any kind, so every enabled one), each this resync did not list completely."""
    open_ = frozenset(enabled) if before is None else before
    return open_ - frozenset(listed)


@dataclass(frozen=True)
class Held:
    """What the rule needs of a held deletion."""

    member: str
    uid: str
    kind: str  # kind_key
    by: str


def dropped_from_held(held: Iterable[Held], seen: set[str], listed: set[str]) -> set[str]:
    """The held deletions a resync drops: their object was not in the complete listing of their kind
    (gone, re-created, or never there). A kind not listed completely says nothing of its objects."""
    return {h.member for h in held if h.kind in listed and h.uid not in seen}
