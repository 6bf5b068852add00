"""The worker's tasks, by the names the store books them under. The worker declares them.

RQ keeps, in every job it stores, the function to run as an import path ("module.function"):
what a pending deletion will run is a name in Redis, written by whichever process booked it
(the sink, a resync, the command) and read by the worker that runs it. The worker says which
of its functions does what as the `jobttl.tasks` entry points of the distribution
(pyproject.toml), and the store reads the names from the installed package's metadata: it
never imports the worker, nor spells its module. A process that books (the sink) needs no
worker code loaded for it.

Only jobttl's own distribution is read: another installed package declaring the same group
would otherwise choose what every booked deletion runs.

A name is part of what is stored: a deletion booked by one release is run by the next. A task
the worker renames keeps its old name in its own module, as an alias, for as long as a pending
job can hold it (RQ imports the stored name). Only 0.1's names need more (`EARLIER_NAMES`): their
module, the top-level `worker` package, no longer exists, so the worker's job class runs each as
today's task of its role (`Tasks.current`), which accepts 0.1's arguments too.
"""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass, fields

from jobttl.core.runtime.config import ConfigError

DISTRIBUTION = "jobttl"  # whose declaration counts
GROUP = "jobttl.tasks"  # the entry-point group the worker declares its tasks in
# The names 0.1 booked jobs under (a module that is gone) → the role each played. Every 0.2 release
# has booked under today's names (tests/worker/test_upgrade.py runs both).
EARLIER_NAMES = {
    "worker.tasks.delete_if_expired": "delete",
    "worker.tasks.warn_upcoming": "warn",
    "worker.tasks.resync": "resync",
}


class TasksNotDeclared(ConfigError):
    """jobttl's installed distribution declares no task for a role: it is not installed (or not whole)."""


@dataclass(frozen=True)
class Tasks:
    """What each kind of booked RQ job runs, as RQ stores it (an import path)."""

    delete: str  # a deletion stage that is due: args (member, due)
    warn: str  # the announcement ahead of a deletion: args (uid, due)
    resync: str  # a resync, asked for or periodic: no args

    @classmethod
    def from_entry_points(cls, entry_points: importlib.metadata.EntryPoints) -> Tasks:
        """From jobttl's entry points of `GROUP` ("module:function"), one per role; a role missing is an
        error, and so is one declared twice differently."""
        named: dict[str, importlib.metadata.EntryPoint] = {}
        for ep in entry_points:
            if ep.group != GROUP or ep.dist is None or _normalized(ep.dist.name) != DISTRIBUTION:
                continue
            if ep.name in named and named[ep.name].value != ep.value:
                raise TasksNotDeclared(
                    f"the {GROUP} entry point {ep.name} is declared twice: {named[ep.name].value!r} and {ep.value!r}"
                )
            named[ep.name] = ep
        missing = [f.name for f in fields(cls) if f.name not in named]
        if missing:
            raise TasksNotDeclared(
                f"no {GROUP} entry point for {', '.join(missing)}: the worker declares its tasks in jobttl's "
                "package metadata (pyproject.toml); install jobttl (pip install .) rather than run it from a copy "
                "of the source"
            )
        return cls(**{f.name: _import_path(named[f.name]) for f in fields(cls)})

    def role_of(self, name: str | None) -> str | None:
        """Which role a stored task name plays, today's name or an earlier release's (None: not
        one of the worker's tasks)."""
        return EARLIER_NAMES.get(name) or next((f.name for f in fields(self) if getattr(self, f.name) == name), None)

    def current(self, name: str) -> str:
        """What a stored task name runs today: an earlier release's name is today's task of its role."""
        role = EARLIER_NAMES.get(name)
        return getattr(self, role) if role else name


@functools.cache
def declared() -> Tasks:
    """The tasks the installed worker declares (read once per process)."""
    return Tasks.from_entry_points(importlib.metadata.entry_points(group=GROUP))


def _normalized(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _import_path(entry_point: importlib.metadata.EntryPoint) -> str:
    """RQ's form of an entry point's "module:attr": "module.attr" (RQ imports the module, then the attribute)."""
    if not entry_point.attr or entry_point.extras:
        raise TasksNotDeclared(
            f"the {GROUP} entry point {entry_point.name} = {entry_point.value!r} does not name "
            "a function (module:function)"
        )
    return f"{entry_point.module}.{entry_point.attr}"
