"""DeletionScheduled: a Normal Kubernetes Event on the object each time its deletion (or its pods
stage) is scheduled or moved, so ``kubectl describe`` says when and why without jobttl's CLI.

Who posts it: a worker. The sink has no API access (Resource-mode events carry the object,
and its service account gets no token), so the reconcile path only writes the change to an
outbox, ``jobttl:notices:<queue>`` (by the BOOKED script, in the same MULTI as the pending
deletion: `Schedule._book`), and each worker's Event thread (`jobttl.core.services.events.EventRecorder`)
drains it between the deletions' own Events, paced (`jobttl.core.services.events.NOTICES_PER_SECOND`).
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

InvalidTTL: a Warning Event on a finished job jobttl keeps because its TTL (``jobttl.io/ttl``, its
own TTL field) or ``jobttl.io/keep-until`` cannot be used, naming the value, the forms accepted
and what jobttl does instead (`jobttl.core.domain.decisions.decision.invalid_ttl_message`): without it a typo keeps
the job for good, and only those who can read jobttl's logs or Redis would know. So too InvalidKeep
(a ``jobttl.io/keep`` value that is neither "true" nor "false": kept) and UnknownKey (a ``jobttl.io/``
key jobttl does not know, with the nearest one it does: kept). The same outbox, the same pace:
RECONCILE writes the notice (`jobttl.core.store.schedule.InvalidNotice`) in the call that decides,
once per object and value (its memory is the job's history card), and the worker posts it unless
the job's latest decision is another by then.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from redis import Redis

from jobttl.core.runtime import logs
from jobttl.core.domain.decisions.decision import (
    INVALID_KEEP_REASON,
    INVALID_TTL_REASON,
    UNKNOWN_KEY_REASON,
    warning_message,
)
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.kube.client import KubeClient
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.store.audit import Audit
from jobttl.core.store.outbox import Outbox
from jobttl.core.store.schedule import InvalidNotice, Schedule, split_member
from jobttl.core.domain.decisions.stages import SCHEDULED_REASON, scheduled_message

log = logging.getLogger("jobttl.notify")

BATCH = 20  # notices claimed at a time
RETRY_AFTER = 30  # seconds before a notice whose POST failed is tried again
ATTEMPTS = 5
INVALID_TTL_LABEL = "invalid-ttl"  # jobttl_deletion_notices_total's stage label for InvalidTTL Warnings
# ... and for the other Warnings to an owner: by the Event's reason.
WARNING_LABELS = {
    INVALID_TTL_REASON: INVALID_TTL_LABEL,
    INVALID_KEEP_REASON: "invalid-keep",
    UNKNOWN_KEY_REASON: "unknown-key",
}


class Notices:
    """The outbox of schedule changes, and how a worker posts them."""

    def __init__(
        self, redis: Redis, schedule: Schedule, audit: Audit, kube: KubeClient, metrics: Metrics | None = None
    ):
        self.schedule = schedule
        self.cards = audit  # read only: the jobs' history cards
        self.kube = kube
        self.metrics = metrics
        self.outbox = Outbox(redis, schedule.queue.name)
        self._attempts: dict[str, int] = {}

    def drain(self, limit: int = BATCH) -> int:
        """Post the notices whose time has come (at most `limit`); how many were handled."""
        now = time.time()
        claimed = self.outbox.claim(limit)
        later = {}
        for entry, score in claimed:
            if score > now:
                later[entry] = score  # not yet (a retry): back it goes, untouched
                continue
            if not self.post(entry):
                later[entry] = now + RETRY_AFTER
        if later:
            self.outbox.put_back(later)
        return len(claimed) - len(later)

    def post(self, entry: str) -> bool:
        """Post one notice; False to try again later."""
        invalid = InvalidNotice.read(entry)
        if invalid is not None:
            return self._post_invalid(entry, invalid)
        member, _, due_text = entry.rpartition("|")
        uid, stage = split_member(member)
        due = int(due_text)
        pending = self.schedule.get(uid, stage)
        if pending is None or pending.due != due or not pending.ref.kind:
            return True  # superseded: the newer change has its own notice
        message = scheduled_message(pending.ref.kind, stage, due, pending.ttl, pending.ttl_source, pending.dry_run)
        return self._create(entry, pending.ref, SCHEDULED_REASON, message, "Schedule", stage, due=due)

    def _post_invalid(self, entry: str, notice: InvalidNotice) -> bool:
        """A Warning to the job's owner (InvalidTTL, InvalidKeep, UnknownKey), unless the job's latest
        decision is no longer this one (fixed, changed again, gone): like a superseded schedule change,
        it posts nothing."""
        latest = self.cards.latest_decision(notice.ref.namespace, notice.ref.name, notice.ref.uid)
        if (
            not isinstance(latest, dict)
            or latest.get("reason") != notice.verdict
            or latest.get("detail") != notice.detail
        ):
            return True
        message = warning_message(notice.reason, notice.ref.kind, notice.detail, notice.source)
        return self._create(
            entry,
            notice.ref,
            notice.reason,
            message,
            "Keep",
            WARNING_LABELS.get(notice.reason, INVALID_TTL_LABEL),
            warning=True,
        )

    def _create(
        self,
        entry: str,
        ref: JobRef,
        reason: str,
        message: str,
        action: str,
        label: str,
        warning: bool = False,
        **fields: Any,
    ) -> bool:
        try:
            self.kube.create_event(ref, reason, message, warning, action=action)
        except Exception as exc:  # noqa: BLE001 - best effort: an Event must never fail anything else
            attempts = self._attempts.get(entry, 0) + 1
            self._attempts[entry] = attempts
            logs.record(
                log,
                "notice-not-posted",
                ref.as_dict(),
                logging.WARNING,
                stage=label,
                reason=reason,
                attempts=attempts,
                detail=str(exc),
                **fields,
            )
            if attempts < ATTEMPTS:
                return False
            if self.metrics is not None:
                self.metrics.events_dropped.inc()
        else:
            if self.metrics is not None:
                self.metrics.notices.labels(label).inc()
            logs.record(log, "notice-posted", ref.as_dict(), stage=label, reason=reason, detail=message, **fields)
        self._attempts.pop(entry, None)
        return True
