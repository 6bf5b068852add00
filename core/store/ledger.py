"""One deletion run's reads and writes of the schedule, through the typed wrappers of its scripts
(jobttl.core.store.scripts, over core/store/lua/begin.lua, release.lua, finish.lua): BEGIN (the claim at the
start; the intent right before the DELETE), RELEASE, and FINISH (the one write of an outcome).
The only place a deletion run (jobttl.core.services.deletion) calls those scripts. Its inputs are the
domain's (`jobttl.core.domain.decisions.judgement.Target`, a `Decision`); it answers with one (`Current`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from redis import Redis

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.store.audit import Audit, entry_fields
from jobttl.core.domain.decisions.clock import ReferenceClock
from jobttl.core.domain.decisions.decision import Decision
from jobttl.core.domain.decisions.judgement import Current, Target
from jobttl.core.store.schedule import OVERRIDE_SECONDS
from jobttl.core.store.scripts import Begin, Finish, Release

log = logging.getLogger("jobttl.worker")


class Ledger:
    def __init__(self, redis: Redis, clock: ReferenceClock, audit: Audit, claim_seconds: int, token: str):
        self.redis = redis
        self.clock = clock
        self.audit = audit
        self.claim_seconds = claim_seconds
        self.token = token

    def begin(self, target: Target, step: str, obj: dict[str, Any] | None = None) -> Current:
        """BEGIN: at the start (the claim taken), or right before the DELETE (the intent written)."""
        intent = _intent_of(target, obj) if step == "delete" else ""
        sent = time.time()
        said = Begin(
            uid=target.ref.uid,
            member=target.member,
            step=step,
            token=self.token,
            claim_seconds=self.claim_seconds,
            intent_entry=intent,
        ).run(self.redis)
        self.clock.observe_redis(said.seconds, said.micros, sent, time.time())
        return Current(
            said.pending_due,
            (said.seconds, said.micros),
            said.override.keep,
            said.override.until,
            _intent(said.intent, target.ref.uid),
            said.busy,
        )

    def release(self, target: Target, sent: bool) -> None:
        """Give the claim back, and the intent with it unless a DELETE this run `sent` may have been applied."""
        try:
            Release(member=target.member, token=self.token, clear_intent=not sent).run(self.redis)
        except Exception:  # noqa: BLE001 - the claim expires on its own
            pass

    def record(
        self,
        event: str,
        target: Target,
        forget: bool,
        tombstone: str | None = None,
        follow: float | None = None,
        info: str | None = None,
        done: str | None = None,
        stages_too: bool = True,
        **fields: Any,
    ) -> None:
        """FINISH, the one write of an outcome: the index, the audit entry, the history card, the tombstone,
        the follow-up, a stage done for good; the claim and the intent end with it."""
        audit = self.audit
        entry = entry_fields(event, target.ref, by="worker", stage=target.recorded_stage, **fields)
        Finish.of(
            target.ref,
            target.member,
            target.due,
            entry,
            forget=forget,
            max_entries=audit.max_entries,
            card_ttl=audit.tombstone_seconds,
            tombstone=tombstone,
            tombstone_ttl=audit.tombstone_seconds,
            follow=follow,
            info=info,
            done=done,
            override_ttl=OVERRIDE_SECONDS,
            stages_too=stages_too,
        ).run(self.redis)
        audit.observed(event, target.ref, logger=log, by="worker", stage=target.recorded_stage, **fields)


def details(target: Target, decision: Decision, now: float) -> dict[str, Any]:
    """An outcome's audit fields from the decision it carried out."""
    return {
        "due": target.due,
        "finishedAt": decision.finished_at,
        "ttl": decision.ttl,
        "ttlSource": decision.ttl_source,
        "rules": list(decision.rules),
        "dryRun": decision.dry_run,
        "lateness": round(now - target.due, 3),
        "notify": decision.notify,
    }


def _intent(raw: bytes | str, uid: str) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        intent = jsoncodec.loads(raw)
    except jsoncodec.DecodeError:
        return None
    return intent if isinstance(intent, dict) and intent.get("uid") == uid else None


def _intent_of(target: Target, obj: dict[str, Any] | None) -> str:
    """What a run writes before its DELETE: enough for a later run to record the deletion (and
    its tombstone) should this one die before it can."""
    meta = (obj or {}).get("metadata") or {}
    intent = {"uid": target.ref.uid, "at": time.time(), "resourceVersion": meta.get("resourceVersion")}
    kept = {
        "metadata": {k: meta[k] for k in ("labels", "creationTimestamp") if k in meta},
        "status": (obj or {}).get("status") if isinstance((obj or {}).get("status"), dict) else {},
    }
    try:
        return jsoncodec.dumps_str({**intent, "object": kept})
    except TypeError:  # a status nested beyond what JSON encoders write: the tombstone says less
        return jsoncodec.dumps_str(intent)
