"""Whether due deletions still move: the worker's watch over RQ's scheduler process.

RQ's scheduler (a process of its own, see `jobttl.worker.runner`) moves each deletion from the
ScheduledJobRegistry onto the queue when it is due. RQ restarts it only once it has died; one
that hangs (blocked on a lock, a socket, a stopped process) looks alive, keeps its lock for as
long as it hangs if its worker holds it, and nothing is deleted. At every maintenance the worker
looks (`Observation`) and `SchedulerWatch.judge` says whether its scheduler stalled:

- ``dead``: the process this worker started has exited (RQ restarts it; this says so);
- ``stuck``: it is alive, but its heartbeat (written on every look, several a second) has not
  changed for `bound` seconds;
- ``overdue``: a deletion has been due for longer than `bound`, the queue's scheduler lock is
  this worker's or nobody's, and the oldest such deletion has not moved for `bound` seconds.

The worker restarts its scheduler for each stall, and exits (non-zero, so that Kubernetes
restarts the pod) after `max_restarts` within `window` seconds. Pure: the worker gathers the
observation and acts on the verdict; the clock is a monotonic reading passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEAD, STUCK, OVERDUE = "dead", "stuck", "overdue"
RESTART, EXIT = "restart", "exit"


@dataclass(frozen=True)
class Observation:
    started: bool  # this worker started a scheduler process (it held the lock then)
    alive: bool  # that process is running
    heartbeat: str | None  # its last heartbeat in Redis, None before its first
    lock_holder: str | None  # the scheduler named by the queue's scheduler lock, None if nobody
    name: str  # this worker's scheduler's name
    oldest_overdue: str | None  # the deletion due longest ago, if due longer than the bound ago


@dataclass(frozen=True)
class Verdict:
    reason: str  # dead, stuck, overdue
    action: str  # restart, exit
    detail: str


@dataclass
class SchedulerWatch:
    bound: float = 30.0  # seconds without progress that count as a stall
    max_restarts: int = 3  # stalls within `window` before the worker gives up and exits
    window: float = 600.0
    _heartbeat: str | None = None
    _heartbeat_since: float | None = None
    _overdue: str | None = None
    _overdue_since: float | None = None
    _stalls: list[float] = field(default_factory=list)

    def started(self, now: float) -> None:
        """A scheduler process was (re)started: its heartbeat and progress are measured from now."""
        self._heartbeat, self._heartbeat_since = None, now
        self._overdue, self._overdue_since = None, None

    def judge(self, seen: Observation, now: float) -> Verdict | None:
        reason, detail = self._stall(seen, now)
        if reason is None:
            return None
        self._stalls = [t for t in self._stalls if now - t < self.window] + [now]
        self.started(now)
        action = EXIT if len(self._stalls) > self.max_restarts else RESTART
        return Verdict(reason, action, detail)

    def _stall(self, seen: Observation, now: float) -> tuple[str | None, str]:
        if seen.started and not seen.alive:
            return DEAD, "the scheduler process exited"
        if seen.started and seen.alive:
            if seen.heartbeat != self._heartbeat or self._heartbeat_since is None:
                self._heartbeat, self._heartbeat_since = seen.heartbeat, now
            elif now - self._heartbeat_since > self.bound:
                return STUCK, (
                    f"the scheduler process is alive but has not beaten for {now - self._heartbeat_since:.0f} s"
                    f" (its heartbeat every fraction of a second)"
                )
        if seen.oldest_overdue is None or seen.lock_holder not in (None, seen.name):
            # Nothing overdue, or another worker's scheduler holds the queue: its own worker watches it,
            # and its lock expires within a minute if that worker is gone.
            self._overdue, self._overdue_since = None, None
            return None, ""
        if seen.oldest_overdue != self._overdue or self._overdue_since is None:
            self._overdue, self._overdue_since = seen.oldest_overdue, now
        elif now - self._overdue_since > self.bound:
            holder = "this worker's scheduler" if seen.lock_holder else "no scheduler"
            return OVERDUE, (
                f"a deletion due more than {self.bound:.0f} s ago has not moved for "
                f"{now - self._overdue_since:.0f} s; the queue's scheduler lock: {holder}"
            )
        return None, ""
