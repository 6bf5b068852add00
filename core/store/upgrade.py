"""Upgrading a Redis written by jobttl 0.1 in place, without losing a scheduled deletion.

Deletions are booked up to ``maxTTL`` ahead, so a Redis full of pending deletions outlives
any release. jobttl 0.1 kept each pending deletion's record in a hash of its own
(``jobttl:pending:<uid>``) plus a set per name, and its RQ jobs name their task by the 0.1
import path (``worker.tasks.delete_if_expired``) with the job's identity as arguments.

The first 0.2 process to reach such a Redis (`ensure`, called by every process at start,
the command line included) moves each record into its RQ job's meta, converts the held set,
files old tombstones and audit entries on each job's history card, and marks the layout
as version 2. The index (``jobttl:pending``), the overrides, the audit stream and the
tombstones keep their keys. The RQ jobs themselves are left as they are: the worker's job
class (`jobttl.core.store.tasks.Tasks.current`) runs a 0.1 task name as its 0.2 task, which accepts 0.1 arguments,
so every pending deletion still runs at its due time.

A Redis written before the dry-run records were kept beside the index (`jobttl.core.store.schedule`),
or while they were kept by bare Kind (``jobttl:dry-run:<Kind>``, which counted batch/v1 Jobs and
Volcano's Jobs as one), has them filed once by Kind.group (``jobttl:dry-run:kinds:<Kind.group>``),
from each pending deletion's RQ job meta; the bare-Kind sets are dropped, and the Redis is marked
(``jobttl:schema:dry-run`` = ``2``). The layout version stays 2: a process of an earlier 0.2
release reads the same layout, and only the gauges count by those records.

A Redis written before the namespace index was kept beside the index (``jobttl:namespaces``,
``jobttl:namespaces:<namespace>``: what ``?namespace=`` and ``jobttl pending --namespace`` read)
has it filed the same way, in the same pass (`file_dry_run` files both), and is marked
``jobttl:schema:dry-run`` = ``3``. Until a process of this release has filed it, a namespace
filter would list nothing: every process files it at start (`ensure`), the command line too,
before it reads. A process of an earlier release still running beside (a rolling upgrade)
books without filing; the next resync files what it booked.
"""

from __future__ import annotations

import logging

from redis import Redis
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.serializers import JSONSerializer

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.store import keys
from jobttl.core.runtime import logs
from jobttl.core.domain.decisions.decision import Decision, Verdict
from jobttl.core.store.guard import HeldDeletion
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.store.schedule import Pending, file_dry_run

log = logging.getLogger("jobttl.upgrade")

SCHEMA_VERSION = "2"
LOCK = keys.UPGRADE_LOCK
LEGACY_RECORD_PREFIX = "jobttl:pending:"
LEGACY_NAMES_PREFIX = "jobttl:names:"
LEGACY_HELD_ID = "jobttl:held:id"
LOG_LENGTH = 20  # audit ids a history card keeps per UID (the scripts' LOG_LENGTH)


def ensure(redis: Redis, card_ttl: int = 7 * 86400, mark: bool = True) -> bool:
    """Upgrade a 0.1 layout if there is one; True if this call did. Cheap when already current.

    `mark` records the layout version even in an empty Redis (the sink and worker do, so the
    command line recognises the Redis as jobttl's); the command line itself never marks one.
    """
    if _current(redis) == (True, True):
        return False
    if not mark and not redis.exists(keys.PENDING_INDEX, keys.AUDIT_STREAM, keys.HELD):
        return False
    lock = redis.lock(LOCK, timeout=600, blocking_timeout=600)
    with lock:
        layout, filed = _current(redis)
        if layout and filed:
            return False  # another process did it while we waited
        counts = {}
        if not layout:
            counts = {
                "records": _records(redis, card_ttl),
                "held": _held(redis),
                "tombstones": _tombstones(redis, card_ttl),
                "audit": _audit(redis, card_ttl),
            }
            redis.set(keys.SCHEMA, SCHEMA_VERSION)
        # After the 0.1 records are in their RQ jobs' meta: the dry-run records are filed from it
        # (and the bare-Kind sets of an earlier 0.2 dropped).
        counts["dryRunRecords"] = file_dry_run(redis)
        redis.set(keys.DRY_RUN_INDEXED, keys.DRY_RUN_LAYOUT)
    if any(counts.values()):
        logs.record(
            log,
            "upgraded",
            level=logging.WARNING,
            fromVersion=SCHEMA_VERSION if layout else "0.1",
            toVersion=SCHEMA_VERSION,
            **counts,
        )
    return any(counts.values())


def _current(redis: Redis) -> tuple[bool, bool]:
    """(the layout is version 2, its dry-run records are filed), in one round trip."""
    schema, filed = redis.mget(keys.SCHEMA, keys.DRY_RUN_INDEXED)
    return (schema or b"").decode() == SCHEMA_VERSION, (filed or b"").decode() == keys.DRY_RUN_LAYOUT


def _legacy_record(data: dict[str, str]) -> Pending:
    return Pending(
        JobRef.from_dict(data),
        int(data["due"]),
        finished_at=_int(data.get("finishedAt")),
        ttl=_int(data.get("ttl")),
        ttl_source=data.get("ttlSource"),
        rules=tuple(r for r in data.get("rules", "").split(",") if r),
        dry_run=data.get("dryRun") == "true",
        scheduled_at=_int(data.get("scheduledAt")),
        would_delete_at=_int(data.get("wouldDeleteAt")),
    )


def _records(redis: Redis, card_ttl: int) -> int:
    moved = 0
    for key in redis.scan_iter(f"{LEGACY_RECORD_PREFIX}*", count=1000):
        data = {k.decode(): v.decode() for k, v in redis.hgetall(key).items()}
        try:
            record = _legacy_record(data)
        except (KeyError, ValueError):
            logs.record(
                log,
                "upgrade-skipped",
                level=logging.WARNING,
                key=key.decode(),
                detail="not a jobttl 0.1 pending record; left as it is",
            )
            continue
        try:
            job = Job.fetch(data["jobId"], connection=redis, serializer=JSONSerializer)
            job.meta.update(record.meta())
            job.save_meta()
        except NoSuchJobError:
            pass  # the index still holds it: the next reconcile enqueues it again
        ref = record.ref
        card = keys.card(ref.namespace, ref.name)
        with redis.pipeline() as pipe:
            if not redis.hexists(card, ref.uid):  # the audit trail's own entries are filed below
                pipe.hset(
                    card,
                    ref.uid,
                    jsoncodec.dumps_str({"event": "scheduled", "due": str(record.due), "kind": ref.kind, "log": []}),
                )
                pipe.expire(card, card_ttl)
            pipe.delete(key, f"{LEGACY_NAMES_PREFIX}{ref.api_version}:{ref.kind}:{ref.namespace}:{ref.name}")
            pipe.execute()
        moved += 1
    return moved


def _held(redis: Redis) -> int:
    converted = 0
    for member, raw in list(redis.hscan_iter(keys.HELD, count=500)):
        data = jsoncodec.loads(raw)
        if "decision" in data:
            continue  # already 0.2's shape
        decision = Decision(
            Verdict.EXPIRES,
            "held by 0.1",
            finished_at=data.get("finishedAt"),
            outcome=data.get("outcome"),
            ttl=data.get("ttl"),
            ttl_source=data.get("ttlSource"),
            expires_at=data.get("expiresAt"),
            dry_run=bool(data.get("dryRun")),
            rules=tuple(data.get("rules") or ()),
        )
        held = HeldDeletion(member.decode(), JobRef.from_dict(data["ref"]), decision, "resync")
        redis.hset(keys.HELD, held.member, held.as_json())
        converted += 1
    redis.delete(LEGACY_HELD_ID)
    return converted


def _tombstones(redis: Redis, card_ttl: int) -> int:
    filed = 0
    for key in redis.scan_iter(f"{keys.TOMBSTONE_PREFIX}*", count=1000):
        namespace, name, uid = key.decode()[len(keys.TOMBSTONE_PREFIX) :].split(":")
        card = keys.card(namespace, name)
        if redis.hsetnx(card, uid, jsoncodec.dumps_str({"event": "deleted", "log": []})):
            redis.expire(card, card_ttl)
            filed += 1
    return filed


def _audit(redis: Redis, card_ttl: int, batch: int = 1000) -> int:
    """File the 0.1 trail's entries on their jobs' cards: each UID's latest decision and its ids."""
    cards: dict[tuple[str, str, str], dict] = {}
    start = "-"
    while True:
        rows = redis.xrange(keys.AUDIT_STREAM, min=start, max="+", count=batch)
        if not rows:
            break
        for entry_id, fields in rows:
            fields = {k.decode(): v.decode() for k, v in fields.items()}
            if not {"namespace", "name", "uid"} <= fields.keys():
                continue
            card = cards.setdefault((fields["namespace"], fields["name"], fields["uid"]), {"log": []})
            card.update({k: fields[k] for k in ("event", "reason", "detail", "due", "kind") if k in fields})
            card["at"] = entry_id.decode()
            card["log"] = [entry_id.decode(), *card["log"]][:LOG_LENGTH]
        start = "(" + rows[-1][0].decode()  # exclusive: after the last one read
    with redis.pipeline(transaction=False) as pipe:
        for (namespace, name, uid), card in cards.items():
            pipe.hset(keys.card(namespace, name), uid, jsoncodec.dumps_str(card))
            pipe.expire(keys.card(namespace, name), card_ttl)
        pipe.execute()
    return len(cards)


def _int(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None
