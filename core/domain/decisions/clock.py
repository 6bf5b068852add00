"""One clock to judge expiry by: the API server's, as its answers tell it.

A job expires at its finish time plus its TTL, and the finish time is written by a
controller whose clock is the cluster's. A worker whose own clock runs 30 days ahead must
not see every job as 30 days older than it is, so "is it expired now?" is asked of the API
server's clock: every API response carries a ``Date`` header, and the offset between it and
the local clock is measured on every answer. Redis's clock (``TIME``) is measured the same
way, because the schedule's scripts and RQ's due times run on it.

When the local clock is off the API server's by more than the bound (default 30 s), or
Redis's is, a worker refuses to delete (and to schedule) until they agree again: it cannot
tell whose clock is wrong, and a deletion judged by a wrong clock is the worst kind.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

DEFAULT_BOUND = 30.0
# Readings of the API server's Date header are combined for this long, then started afresh
# (seconds, local clock). Between readings the combined bounds widen by the drift two
# free-running clocks may have (DRIFT, s/s), and a change of the local clock itself (a step
# or a slew: its time moved apart from the raw monotonic clock by more than STEP) starts
# afresh at once, so the bounds never hold an offset the clocks no longer have.
WINDOW = 600.0
DRIFT = 1e-4
STEP = 0.05
_RAW = getattr(time, "CLOCK_MONOTONIC_RAW", time.CLOCK_MONOTONIC)
# A reading whose round trip (by the local clock) is negative or longer than this spans a step
# of the local clock (NTP, or a test's libfaketime): it measures half the step, not the offset.
MAX_ROUND_TRIP = 60.0


@dataclass(frozen=True)
class Offset:
    """reference − local, in seconds, and when (local time) it was measured.

    `low`..`high` is what the readings allow it to be (a Date header says only the second);
    `seconds` is the middle of that, `since` when the readings combined began."""

    seconds: float
    measured_at: float
    low: float | None = None
    high: float | None = None
    since: float | None = None
    raw: float | None = None  # the raw monotonic clock when it was measured


class ReferenceClock:
    """Offsets of the local clock from the API server's and from Redis's."""

    def __init__(
        self,
        bound: float = DEFAULT_BOUND,
        local: Callable[[], float] = time.time,
        raw: Callable[[], float] = lambda: time.clock_gettime(_RAW),
    ):
        self.bound = bound
        self.local = local
        self.raw = raw
        self._lock = threading.Lock()
        self.api: Offset | None = None
        self.redis: Offset | None = None

    # --- measuring -----------------------------------------------------------------------------
    def observe_api(self, date_header: str | None, sent: float, received: float) -> None:
        """An API response's Date header (whole seconds) against the local time of the exchange."""
        if not date_header or not _plausible(sent, received):
            return
        try:
            server = parsedate_to_datetime(date_header).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return
        # The header truncates to the second: at some instant between `sent` and `received`
        # the server's time was in [server, server + 1), so the offset is in [low, high].
        # Readings taken at different fractions of a second narrow it down together (each one
        # alone is ±0.5 s); one that contradicts them means a clock was stepped: start afresh.
        low, high = server - received, server + 1 - sent
        raw = self.raw()
        with self._lock:
            previous, since = self.api, received
            if _combinable(previous, received, raw):
                widen = DRIFT * abs(received - previous.measured_at)
                if low <= previous.high + widen and high >= previous.low - widen:
                    low, high = max(low, previous.low - widen), min(high, previous.high + widen)
                    since = previous.since
            self.api = Offset((low + high) / 2, received, low, high, since, raw)

    def observe_redis(
        self, seconds: int | str | bytes, micros: int | str | bytes, sent: float, received: float
    ) -> None:
        if not _plausible(sent, received):
            return
        offset = int(seconds) + int(micros) / 1e6 - (sent + received) / 2
        with self._lock:
            self.redis = Offset(offset, received)

    # --- judging ---------------------------------------------------------------------------------
    def now(self) -> float:
        """The API server's time now, as best the readings tell (the local time until it has answered once)."""
        api = self.api
        return self.local() + (api.seconds if api is not None else 0.0)

    def earliest(self) -> float:
        """The earliest the API server's time can be now: what "is it due yet?" is asked of,
        so that an offset known only to within its readings never makes a deletion early."""
        api = self.api
        if api is None:
            return self.local()
        return self.local() + (api.low if api.low is not None else api.seconds)

    def problem(self) -> str | None:
        """Why deletions must wait, or None when the clocks agree within the bound."""
        api, redis = self.api, self.redis
        if api is not None and abs(api.seconds) > self.bound:
            return (
                f"this host's clock is {_signed(-api.seconds)} off the API server's (bound {self.bound:g}s): "
                "deletions wait until the clocks agree"
            )
        if api is not None and redis is not None and abs(redis.seconds - api.seconds) > self.bound:
            return (
                f"Redis's clock is {_signed(redis.seconds - api.seconds)} off the API server's "
                f"(bound {self.bound:g}s): deletions wait until the clocks agree"
            )
        if api is None and redis is not None and abs(redis.seconds) > self.bound:
            return (
                f"this host's clock is {_signed(-redis.seconds)} off Redis's (bound {self.bound:g}s): "
                "deletions wait until the clocks agree"
            )
        return None

    def as_dict(self) -> dict[str, Any]:
        api, redis = self.api, self.redis
        return {
            "apiServerOffset": None if api is None else round(api.seconds, 3),
            "apiServerOffsetUncertainty": None
            if api is None or api.low is None
            else round((api.high - api.low) / 2, 3),
            "redisOffset": None if redis is None else round(redis.seconds, 3),
            "bound": self.bound,
            "problem": self.problem(),
        }


def _combinable(previous: Offset | None, received: float, raw: float) -> bool:
    """Whether a reading at `received` may narrow `previous`'s bounds: recent, and the local
    clock neither stepped nor slewed since (it moved as the raw monotonic clock did)."""
    if previous is None or previous.low is None or previous.since is None or previous.raw is None:
        return False
    if not 0 <= received - previous.since < WINDOW:
        return False
    return abs((received - previous.measured_at) - (raw - previous.raw)) <= STEP


def _plausible(sent: float, received: float) -> bool:
    return 0 <= received - sent <= MAX_ROUND_TRIP


def _signed(seconds: float) -> str:
    return f"{'+' if seconds >= 0 else '-'}{abs(seconds):.1f}s"
