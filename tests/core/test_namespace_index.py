"""The namespace index beside the pending index (jobttl.core.store.keys.NAMESPACES): kept by the very
scripts that book, move and remove a pending deletion, so it never drifts from the index; filed at
upgrade and repaired by the resync; what a namespace's page of pending deletions is read from.
Against a real redis-server, through the real write protocol and RQ."""

from __future__ import annotations

import time
import uuid

import pytest

from jobttl.core.domain.decisions.decision import Decision, Verdict
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.decisions.plan import GUARDED, PODS_STAGE, Change, Intent
from jobttl.core.services.operations import Operations
from jobttl.core.store import keys, scripts, upgrade
from jobttl.core.store.audit import Audit
from jobttl.core.store.protocol import Store
from jobttl.core.store.schedule import Schedule, file_dry_run
from tests.core.own_redis import redis, server  # noqa: F401 (fixtures)


@pytest.fixture
def store(redis):
    return Store(Schedule(redis, "nsindex", retry_intervals=[]), Audit(redis), burst_limit=None)


def a_ref(namespace: str) -> JobRef:
    return JobRef("kubeflow.org/v1", "TFJob", namespace, f"train-{uuid.uuid4().hex[:6]}", str(uuid.uuid4()))


def expiring(ref: JobRef, due: int, stage: str | None = None) -> Intent:
    decision = Decision(Verdict.EXPIRES, "ttl", finished_at=due - 60, ttl=60, ttl_source="policy", expires_at=due)
    return Intent(ref, decision, "expires", "event", GUARDED, **({"stage": stage} if stage else {}))


def gone(ref: JobRef) -> Intent:
    return Intent(ref, None, "gone", "event", GUARDED)


def by_namespace_from_the_index(redis) -> dict[str, list[tuple[str, int]]]:
    """What the namespace index must hold: every index member with a record, by its record's namespace."""
    schedule = Schedule(redis, "nsindex", retry_intervals=[])
    wanted: dict[str, list[tuple[str, int]]] = {}
    for pending in schedule.records(schedule.members()):
        if pending.ref.namespace:
            wanted.setdefault(pending.ref.namespace, []).append((pending.member, pending.due))
    return wanted


def by_namespace_as_filed(redis) -> dict[str, list[tuple[str, int]]]:
    filed: dict[str, list[tuple[str, int]]] = {}
    for key in redis.scan_iter(match=keys.NAMESPACE_PREFIX + "*"):
        namespace = key.decode()[len(keys.NAMESPACE_PREFIX) :]
        filed[namespace] = [(m.decode(), int(s)) for m, s in redis.zrange(key, 0, -1, withscores=True)]
    where = {m.decode(): ns.decode() for m, ns in redis.hgetall(keys.NAMESPACES).items()}
    assert where == {m: ns for ns, members in filed.items() for m, _ in members}, (
        "the hash says where each member is filed, and nothing else"
    )
    return {ns: members for ns, members in filed.items() if members}


def assert_in_step(redis):
    assert by_namespace_as_filed(redis) == by_namespace_from_the_index(redis)


def test_every_write_of_the_index_keeps_the_namespace_index_in_step(store, redis):
    now = int(time.time())
    a1, a2, b1 = a_ref("team-a"), a_ref("team-a"), a_ref("team-b")
    store.apply(
        [
            expiring(a1, now + 3600),
            expiring(a2, now + 60),
            expiring(b1, now + 600),
            expiring(a1, now + 3600, PODS_STAGE),
        ]
    )
    assert_in_step(redis)
    assert [m for m, _ in by_namespace_as_filed(redis)["team-a"]] == [a2.uid, a1.uid, f"pods:{a1.uid}"] or [
        m for m, _ in by_namespace_as_filed(redis)["team-a"]
    ] == [a2.uid, *sorted([a1.uid, f"pods:{a1.uid}"])]

    [moved] = store.apply([expiring(a1, now + 7200)])  # a changed TTL moves it
    assert moved.change is Change.MOVED
    assert redis.zscore(keys.namespace_index("team-a"), a1.uid) == now + 7200
    assert_in_step(redis)

    [cancelled] = store.apply([gone(b1)])  # the object is gone
    assert cancelled.change is Change.CANCELLED
    assert not redis.exists(keys.namespace_index("team-b")) and not redis.hexists(keys.NAMESPACES, b1.uid)
    assert_in_step(redis)

    # The worker's outcome: the job deleted, its pods stage goes with it (FINISH).
    scripts.Finish.of(
        a1,
        a1.uid,
        now + 7200,
        {"event": "deleted", **a1.as_dict(), "by": "test"},
        forget=True,
        stages_too=True,
        max_entries=1000,
        card_ttl=600,
        override_ttl=60,
    ).run(redis)
    assert_in_step(redis)
    assert by_namespace_as_filed(redis) == {"team-a": [(a2.uid, now + 60)]}

    # An index entry whose RQ job is gone, dropped by the sweep.
    redis.delete(f"rq:job:delete-{a2.uid}-{now + 60}")
    assert store.schedule.drop_orphan(a2.uid)
    assert by_namespace_as_filed(redis) == {} and redis.zcard(keys.PENDING_INDEX) == 0


def test_a_reconcile_that_names_another_namespace_for_a_uid_takes_it_out_where_it_was_filed(store, redis):
    """Redis is no trusted input, nor is an event: the hash, not the caller, says where a member is."""
    now = int(time.time())
    real = a_ref("team-a")
    store.apply([expiring(real, now + 3600)])
    forged = JobRef(real.api_version, real.kind, "elsewhere", real.name, real.uid)
    assert store.apply([gone(forged)])[0].change is Change.CANCELLED
    assert by_namespace_as_filed(redis) == {}


def test_a_namespaces_page_is_read_from_its_index_without_reading_other_namespaces_records(store, redis):
    now = int(time.time())
    mine = [a_ref("mine") for _ in range(3)]
    store.apply([expiring(ref, now + 600 + i) for i, ref in enumerate(mine)])
    store.apply([expiring(a_ref("others"), now + 60 + i) for i in range(200)])
    operations = Operations(redis, store.schedule, Audit(redis))
    hmgets = lambda: redis.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0)  # noqa: E731
    before = hmgets()
    page, total = operations.pending("mine", offset=1, limit=5)
    assert [p.ref.uid for p in page] == [mine[1].uid, mine[2].uid] and total == 3
    assert hmgets() - before == 2, "only the page's own records are read, not the 203 of every namespace"
    assert operations.pending("nobody") == ([], 0)
    # A kind filter within a namespace reads that namespace's records only.
    before = hmgets()
    assert [p.ref.uid for p in operations.pending("mine", "TFJob")[0]] == [r.uid for r in mine]
    assert hmgets() - before == 3


def test_an_older_schedule_has_its_namespace_index_filed_at_upgrade(store, redis):
    now = int(time.time())
    refs = [a_ref("team-a"), a_ref("team-b"), a_ref("team-a")]
    store.apply([expiring(ref, now + 600 + i) for i, ref in enumerate(refs)])
    redis.zadd(keys.PENDING_INDEX, {"no-record": now})  # an index entry whose RQ job is gone
    # As an earlier release left it: the index and its records, no namespace index.
    redis.delete(keys.NAMESPACES, *redis.scan_iter(match=keys.NAMESPACE_PREFIX + "*"))
    redis.set(keys.DRY_RUN_INDEXED, "2")
    redis.set(keys.SCHEMA, upgrade.SCHEMA_VERSION)
    assert Operations(redis, store.schedule, Audit(redis)).pending("team-a") == ([], 0)
    upgrade.ensure(redis)
    assert redis.get(keys.DRY_RUN_INDEXED) == keys.DRY_RUN_LAYOUT.encode()
    assert_in_step(redis)
    page, total = Operations(redis, store.schedule, Audit(redis)).pending("team-a")
    assert [p.ref.uid for p in page] == [refs[0].uid, refs[2].uid] and total == 2


def test_the_resyncs_repair_takes_out_what_the_index_no_longer_holds_and_refiles_a_misfiled_member(store, redis):
    now = int(time.time())
    kept, misfiled = a_ref("team-a"), a_ref("team-b")
    store.apply([expiring(kept, now + 600), expiring(misfiled, now + 700)])
    # A hand edit, or an older process: a stray member, and one filed under the wrong namespace.
    redis.zadd(keys.namespace_index("team-a"), {"stray": now})
    redis.hset(keys.NAMESPACES, "stray", "team-a")
    redis.zadd(keys.namespace_index("team-c"), {misfiled.uid: now + 700})
    redis.zadd(keys.namespace_index("team-d"), {"unlisted": now})
    file_dry_run(redis)
    assert by_namespace_as_filed(redis) == {"team-a": [(kept.uid, now + 600)], "team-b": [(misfiled.uid, now + 700)]}
    assert_in_step(redis)
