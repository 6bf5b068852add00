"""keepLast as the worker checks it: by the cluster's listing, not the index's word, and the index
repaired from that listing (`jobttl.core.services.reading.Reading.check_limit`, `jobttl.core.store.keeplast_index.KeepLastIndex.repair`).
The worker's own Deletion in this process, real Redis, the emulator over HTTP (tests.worker.bench).
"""

from __future__ import annotations

import time

import pytest

from jobttl.core.domain.decisions.keeplast import membership
from jobttl.core.domain.decisions.decision import decide
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.store.schedule import JOB_STAGE
from tests.fixtures import job_object, rfc3339, with_server_fields
from tests.worker.bench import Bench, kube  # noqa: F401  (kube: the module's emulator)

MONTH = 30 * 86400


@pytest.fixture
def bench(kube, redis_server, tmp_path, queue_name):
    return Bench(kube, redis_server, tmp_path, "ttl: 30d\nkeepLast:\n  succeeded: 2\n", queue_name)


def group_of(bench: Bench, obj: dict) -> str:
    member = membership(obj, TFJOB, bench.ctx.settings.policy, decide(obj, TFJOB, bench.ctx.settings.policy))
    return member.group


def test_a_stale_index_pushing_a_job_out_deletes_nothing_and_is_repaired_from_the_cluster(bench):
    """The index holds two newer jobs the cluster no longer has (deleted while no event came) and
    lacks one it has: it ranks `oldest` beyond keepLast 2. The worker ranks by the listing
    (`oldest`, `newer`: within the limit), deletes nothing, and the index becomes the listing."""
    now = time.time()
    oldest = bench.job("oldest", now - 600)
    newer = bench.job("newer", now - 300)  # in the cluster, never filed (its event was lost)
    ghosts = [with_server_fields(job_object(TFJOB, f"ghost-{i}", bench.namespace, at=now - 100 + i)) for i in range(2)]
    for obj in (*ghosts, oldest):
        bench.book(obj)
    group = group_of(bench, oldest)
    uid = oldest["metadata"]["uid"]
    assert set(bench.ctx.reconciler.keeplast.group_members(group)) == {uid, *(g["metadata"]["uid"] for g in ghosts)}
    due = bench.pending(oldest, JOB_STAGE)
    assert due is not None and due <= now, "the index says: beyond the limit, due now"

    assert bench.run(bench.target(oldest, JOB_STAGE)) == "rescheduled"
    assert bench.job_deletes() == [] and bench.get("oldest") is not None
    assert bench.pending(oldest, JOB_STAGE) == int(now - 600) + MONTH, "back to its own TTL"
    assert set(bench.ctx.reconciler.keeplast.group_members(group)) == {uid, newer["metadata"]["uid"]}
    records = dict(bench.ctx.reconciler.keeplast.records())
    assert all(g["metadata"]["uid"] not in records for g in ghosts)
    assert records[newer["metadata"]["uid"]].ref.name == "newer"


def test_a_job_recreated_under_a_new_uid_counts_once_in_its_group(bench):
    """The index still files `twin` under the UID it had before it was re-created: two entries for
    one job push `oldest` out. The cluster has one `twin`: nothing is deleted, the old UID leaves."""
    now = time.time()
    oldest = bench.job("oldest", now - 600)
    before = with_server_fields(job_object(TFJOB, "twin", bench.namespace, at=now - 200))
    twin = bench.job("twin", now - 100)  # the same name, re-created: a new UID
    for obj in (before, twin, oldest):
        bench.book(obj)
    group = group_of(bench, oldest)
    assert bench.pending(oldest, JOB_STAGE) <= now, "the index says: beyond the limit, due now"

    assert bench.run(bench.target(oldest, JOB_STAGE)) == "rescheduled"
    assert bench.job_deletes() == []
    assert set(bench.ctx.reconciler.keeplast.group_members(group)) == {
        oldest["metadata"]["uid"],
        twin["metadata"]["uid"],
    }


def test_a_job_pushed_out_of_its_group_waits_for_keep_until_annotated_since(bench):
    now = time.time()
    jobs = [bench.job(f"run-{i}", now - 600 + i * 100) for i in range(3)]
    for obj in jobs:
        bench.book(obj)
    oldest = jobs[0]
    target = bench.target(oldest, JOB_STAGE)
    assert target.due <= now, "beyond keepLast 2: due now"
    keep_until = int(now) + 3600
    bench.annotate("run-0", **{"jobttl.io/keep-until": rfc3339(keep_until)})
    assert bench.run(target) == "rescheduled"
    assert bench.job_deletes() == []
    assert bench.pending(oldest, JOB_STAGE) == keep_until
