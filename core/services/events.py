"""Telling people: a Kubernetes Event for each deletion and each failure, a DeletionScheduled
Event for each schedule change (`jobttl.core.services.scheduled_events`), and an optional CloudEvent announcing
each deletion ahead of time.

Users look for their job with ``kubectl get events``; once jobttl has deleted it, the
Event (reason ``SuccessfulDeleteJob``, like the training operator's own) says who deleted
it and why, and a ``FailedDeleteJob`` warning says why a job that should be gone is not.

Events are best effort and off the deletion's critical path: they are handed to a bounded
queue that one background thread posts from, so a slow API server costs the deletion
nothing, and a full queue drops (and counts) an Event rather than delaying deletions.
Failing to record one never fails or repeats a deletion.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

import requests

from jobttl.core.runtime import logs
from jobttl.core.domain.wire.apiserversource import UPCOMING_TYPE, cloudevent
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.kube.client import KubeClient
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.services.scheduled_events import Notices

log = logging.getLogger("jobttl.notify")

QUEUE_SIZE = 1000
NOTICE_PERIOD = 1.0  # seconds between looks at an empty DeletionScheduled outbox
# DeletionScheduled Events each worker posts at most, per second: a resync that schedules
# 10,000 jobs must not spend the API server's patience (its priority-and-fairness share is
# the deletions' too) on announcements. The outbox waits; nothing is lost.
NOTICES_PER_SECOND = 10.0


@dataclass(frozen=True)
class _Event:
    ref: JobRef
    reason: str
    message: str
    warning: bool


class EventRecorder:
    """With `notices` (jobttl.core.services.scheduled_events), the thread also posts the DeletionScheduled outbox,
    paced (`NOTICES_PER_SECOND`), between the deletions' own Events: those go first, but a steady
    stream of them never keeps the notices waiting. It then runs from the start, not on first use."""

    def __init__(
        self, kube: KubeClient, metrics: Metrics | None = None, size: int = QUEUE_SIZE, notices: Notices | None = None
    ):
        self.kube = kube
        self.metrics = metrics
        self.notices = notices
        self._queue: queue.Queue[_Event | None] = queue.Queue(maxsize=size)
        self._next_notices = 0.0  # time.monotonic() when the outbox is next looked at
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        if notices is not None:
            self._start()

    def record(self, ref: JobRef, reason: str, message: str, warning: bool = False) -> None:
        """Queue an Event for `ref`; never blocks."""
        self._start()
        try:
            self._queue.put_nowait(_Event(ref, reason, message, warning))
        except queue.Full:
            self._dropped(ref, reason, "the Event queue is full")

    def flush(self, timeout: float = 5.0) -> None:
        """Post what is queued (at shutdown), waiting at most `timeout` seconds."""
        if self._thread is None:
            return
        self._queue.put(None)
        self._thread.join(timeout)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._post_forever, name="kubernetes-events", daemon=True)
                self._thread.start()

    def _post_forever(self) -> None:
        while True:
            if self.notices is not None and time.monotonic() >= self._next_notices:
                self._drain_notices()
            try:
                event = (
                    self._queue.get(timeout=max(0.0, self._next_notices - time.monotonic()))
                    if self.notices is not None
                    else self._queue.get()
                )
            except queue.Empty:
                continue
            if event is None:
                return
            try:
                self.kube.create_event(event.ref, event.reason, event.message, event.warning)
            except Exception as exc:  # noqa: BLE001 - best effort: an Event must never fail a deletion
                self._dropped(event.ref, event.reason, str(exc))

    def _drain_notices(self) -> None:
        """One notice of the outbox; the next look comes when the pace allows another.

        One at a time: a batch posted back to back would break the pace within each second,
        and the deletions' own Events, waiting in the queue, would wait behind all of it."""
        assert self.notices is not None
        handled = 0
        try:
            handled = self.notices.drain(1)
        except Exception as exc:  # noqa: BLE001 - Redis or the API down: the outbox waits for the next period
            logs.record(log, "notices-not-drained", level=logging.WARNING, detail=str(exc))
        self._next_notices = time.monotonic() + (handled / NOTICES_PER_SECOND if handled else NOTICE_PERIOD)

    def _dropped(self, ref: JobRef, reason: str, detail: str) -> None:
        if self.metrics is not None:
            self.metrics.events_dropped.inc()
        logs.record(log, "event-not-recorded", ref.as_dict(), logging.WARNING, reason=reason, detail=detail)


def announce(url: str, ref: JobRef, subject: str, due: int, details: dict, timeout: float = 10) -> None:
    """POST a binary-mode CloudEvent saying `ref` will be deleted at `due`.

    Teams point this at a Knative Broker (or any HTTP endpoint) to archive logs or to
    postpone the deletion in time. A failure raises, so RQ retries it.
    """
    due_time = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(due))
    message = cloudevent(
        UPCOMING_TYPE, f"/jobttl/{ref.namespace}", subject, {**ref.as_dict(), "deletionTime": due_time, **details}
    )
    response = requests.post(url, headers=message.headers, data=message.body, timeout=timeout)
    response.raise_for_status()
