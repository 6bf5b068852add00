"""What this sink reconciled a moment ago: the same decision again is not sent to Redis.

Most events say nothing new. Knative redelivers an event it could not confirm, and a
finished job's object keeps changing in ways no decision reads (its pods' status, the
training operator's own bookkeeping): each such event decides exactly what the last one
did. Within `seconds`, a decision about an object that equals, for every stage, one this
process reconciled successfully is answered from memory, with no round trip.

Skipping can only postpone a repair, never cause a deletion: the decision is the one already
applied, and anything else that changed the schedule meanwhile (an operator, a worker's
fresh read, another sink replica) was written by the one reconcile path, which the skipped
event would only have confirmed. A lost RQ job (Redis restored from a backup, say) is then
re-booked by the next event after the window, or by the resync. The sink's own `forget` (a
delete event) drops the object's entries first.

The price is that the sink stops noticing, for the window, what changed behind its back: a
Redis that lost its data (FLUSHALL, a restore) is not re-booked by a redelivery in the
window, and with several sink replicas a decision can go A (here), B (another replica), A
(here, skipped) and leave B booked until the worker's re-read or the next event corrects it.
Neither deletes anything early (the worker re-reads the object and decides again before it
deletes), but both are later corrections, so it is off unless asked for: only the sink uses
it (``JOBTTL_SINK_DEDUPE_SECONDS``), and the resync and the worker, which exist to re-check,
always go to Redis.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Hashable

SIZE = 20_000  # members remembered at most (the oldest are forgotten first): ~850 B each, ~17 MB


class Recent:
    def __init__(self, seconds: float, size: int = SIZE, clock=time.monotonic):
        self.seconds = seconds
        self.size = size
        self.clock = clock
        self._entries: OrderedDict[str, tuple[Hashable, float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, member: str, decision: Hashable) -> Any | None:
        """What reconciling `decision` for `member` came to, if it was that decision a moment ago."""
        with self._lock:
            found = self._entries.get(member)
        if found is None:
            return None
        key, at, outcome = found
        if key != decision or self.clock() - at > self.seconds:
            return None
        return outcome

    def put(self, member: str, decision: Hashable, outcome: Any) -> None:
        with self._lock:
            self._entries[member] = (decision, self.clock(), outcome)
            self._entries.move_to_end(member)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def drop(self, *members: str) -> None:
        with self._lock:
            for member in members:
                self._entries.pop(member, None)
