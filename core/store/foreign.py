"""Jobs in the worker's queue that jobttl did not book: refused before anything is imported.

RQ stores what a job runs as an import path, and imports it when the job runs (`Job.func`); so do
its callbacks (`on_success`, `on_failure`, `on_stopped`: import paths too) and, for a job with an
`instance`, a method of a value read from Redis. Webhooks make the worker send an HTTP request to
a URL stored with the job. Whoever can write to Redis could book an RQ job for
`subprocess.check_output` with RQ's own API, and the worker, which holds delete rights on every
job kind, would run it. The worker runs only what it declares instead: a job whose function is
one of the `jobttl.tasks` entry points (or an earlier release's name for one, `EARLIER_NAMES`),
with no instance, callback or webhook (jobttl books none) is jobttl's; anything else is
`foreign`, failed without importing anything, logged (`foreign-job`, with its id and function)
and counted (`jobttl_foreign_jobs_total`, alerted by `JobttlForeignJobs`).

Two guards, one rule (`refusal`): the worker checks each job before it performs it
(`jobttl.worker.runner`), and `CheckedJob`, the worker's RQ job class, refuses to resolve a
function, callback or webhook outside the rule wherever RQ asks for one (an abandoned job's
failure callback in RQ's registry cleanup, for one).
"""

from __future__ import annotations

import logging

from rq.job import Job
from rq.utils import import_attribute

from jobttl.core.runtime import logs
from jobttl.core.store.tasks import Tasks, declared

log = logging.getLogger("jobttl.foreign")

# How much of a stored function name goes into a log line or an error: it is whatever a Redis
# writer wrote, so it is cut and printed with repr(), never trusted as text.
NAME_LIMIT = 200
CALLBACKS = ("success", "failure", "stopped")


class ForeignJob(Exception):
    """A job that is not one of jobttl's tasks: it is not run, nor anything it names imported."""


def shown(value: object) -> str:
    """A value from Redis as a log line may show it: repr'd, and cut."""
    text = repr(value)
    return text if len(text) <= NAME_LIMIT else text[:NAME_LIMIT] + "..."


def refusal(job: Job, tasks: Tasks) -> str | None:
    """Why `job` is not one of jobttl's tasks, or None when it is. Reads the stored job (RQ decodes it
    with the JSON serializer: no code) and imports nothing."""
    try:
        name = job.func_name
        instance = job.instance
    except Exception as exc:  # noqa: BLE001 - undecodable data: not a job jobttl wrote
        return f"its data cannot be read ({type(exc).__name__})"
    if not isinstance(name, str) or tasks.role_of(name) is None:
        return f"its function {shown(name)} is not one of jobttl's tasks"
    if instance is not None:
        return f"it runs {shown(name)} as a method of a stored value"
    for which in CALLBACKS:
        callback = getattr(job, f"_{which}_callback_name", None)
        if callback:
            return f"it names an on_{which} callback, {shown(callback)}"
    if job.webhooks:
        return "it names webhooks"
    return None


def report(job: Job, reason: str, metrics=None) -> None:
    """Say that a foreign job was refused: the `foreign-job` log line and the counter."""
    try:
        name = job.func_name
    except Exception:  # noqa: BLE001
        name = None
    logs.record(
        log, "foreign-job", level=logging.ERROR, job_id=job.id, function=shown(name), detail=reason, origin=job.origin
    )
    if metrics is not None:
        metrics.foreign_jobs.inc()


class CheckedJob(Job):
    """RQ's Job, resolving only jobttl's tasks: today's names, and 0.1's as today's task of their
    role (upgrades keep every booked deletion). Anything else raises `ForeignJob` before any import."""

    def _refuse(self, what: str) -> ForeignJob:
        reason = refusal(self, declared()) or what
        return ForeignJob(f"job {self.id}: not run, {reason}")

    @property
    def func(self):
        name = self.func_name
        if name is None:
            return None
        if refusal(self, declared()) is not None:
            raise self._refuse("")
        return import_attribute(declared().current(name))

    @property
    def success_callback(self):
        return self._no_callback("success")

    @property
    def failure_callback(self):
        return self._no_callback("failure")

    @property
    def stopped_callback(self):
        return self._no_callback("stopped")

    def _no_callback(self, which: str):
        # jobttl books no callback: one in a stored job was written by someone else.
        name = getattr(self, f"_{which}_callback_name", None)
        if name:
            raise self._refuse(f"it names an on_{which} callback, {shown(name)}")
        return None

    def send_webhooks(self, *args, **kwargs) -> None:
        # jobttl books no webhook: one in a stored job would make the worker send a request of
        # someone else's choosing from inside the cluster.
        if self.webhooks:
            logs.record(
                log,
                "foreign-job",
                level=logging.ERROR,
                job_id=self.id,
                function=shown(self.func_name),
                detail="its webhooks are not sent",
            )
