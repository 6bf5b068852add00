"""DeletionScheduled: a Normal Kubernetes Event on the object each time its deletion (or its pods
stage) is scheduled or moved, so ``kubectl describe`` says when and why without jobttl's CLI.

Who posts it: a worker. The sink has no API access (Resource-mode events carry the object,
and its service account gets no token), so the reconcile path only writes the change to an
outbox, ``jobttl:notices:<queue>`` (by the BOOKED script, in the same MULTI as the pending
deletion: `Schedule._book`), and each worker's Event thread (`jobttl.worker.notify.EventRecorder`)
drains it between the deletions' own Events, paced (`jobttl.worker.notify.NOTICES_PER_SECOND`).
The worker's role already has ``create`` on Events: no component gains a permission, and the
sink keeps none.

Why an outbox and not an RQ job per change: a resync that schedules 10,000 jobs would queue
10,000 notices ahead of the deletions that come due; the outbox is drained beside the
deletions, never in front of them. Once per change: a change is one member of the outbox
(``<member>|<due>``, so a change written twice is there once), a member is claimed by one
worker (ZPOPMIN), and a change already superseded when it is drained (moved again, cancelled,
done) posts nothing: the newer change has its own. Best effort, like every Event: a worker
killed between the claim and the POST loses that one notice; a failed POST is tried again
later, up to `ATTEMPTS` times.
"""

from __future__ import annotations

import logging
import time

from redis import Redis

from jobttl.core import keys, logs
from jobttl.core.kube import KubeClient
from jobttl.core.metrics import Metrics
from jobttl.core.schedule import Schedule, split_member
from jobttl.core.stages import SCHEDULED_REASON, scheduled_message

log = logging.getLogger("jobttl.notify")

BATCH = 20  # notices claimed at a time
RETRY_AFTER = 30  # seconds before a notice whose POST failed is tried again
ATTEMPTS = 5


class Notices:
    """The outbox of schedule changes, and how a worker posts them."""

    def __init__(self, redis: Redis, schedule: Schedule, kube: KubeClient, metrics: Metrics | None = None):
        self.redis = redis
        self.schedule = schedule
        self.kube = kube
        self.metrics = metrics
        self.outbox = keys.notices(schedule.queue.name)
        self._attempts: dict[str, int] = {}

    def drain(self, limit: int = BATCH) -> int:
        """Post the notices whose time has come (at most `limit`); how many were handled."""
        now = time.time()
        claimed = self.redis.zpopmin(self.outbox, limit)
        later = {}
        for raw, score in claimed:
            entry = raw.decode()
            if score > now:
                later[entry] = score  # not yet (a retry): back it goes, untouched
                continue
            if not self.post(entry):
                later[entry] = now + RETRY_AFTER
        if later:
            self.redis.zadd(self.outbox, later)
        return len(claimed) - len(later)

    def post(self, entry: str) -> bool:
        """Post one notice; False to try again later."""
        member, _, due_text = entry.rpartition("|")
        uid, stage = split_member(member)
        due = int(due_text)
        pending = self.schedule.get(uid, stage)
        if pending is None or pending.due != due or not pending.ref.kind:
            return True  # superseded: the newer change has its own notice
        message = scheduled_message(pending.ref.kind, stage, due, pending.ttl, pending.ttl_source, pending.dry_run)
        try:
            self.kube.create_event(pending.ref, SCHEDULED_REASON, message, action="Schedule")
        except Exception as exc:  # noqa: BLE001 - best effort: an Event must never fail anything else
            attempts = self._attempts.get(entry, 0) + 1
            self._attempts[entry] = attempts
            logs.record(log, "notice-not-posted", pending.ref.as_dict(), logging.WARNING, stage=stage, due=due,
                        attempts=attempts, detail=str(exc))
            if attempts < ATTEMPTS:
                return False
            if self.metrics is not None:
                self.metrics.events_dropped.inc()
        else:
            if self.metrics is not None:
                self.metrics.notices.labels(stage).inc()
            logs.record(log, "notice-posted", pending.ref.as_dict(), stage=stage, due=due, detail=message)
        self._attempts.pop(entry, None)
        return True
