"""DeletionScheduled notices are paced (`jobttl.core.services.events.NOTICES_PER_SECOND`) and never starve
behind the deletions' own Events: the worker's EventRecorder and Notices in this process, real Redis,
the emulator over HTTP (tests.worker.bench)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.services import scheduled_events as notices_module
from jobttl.core.services.scheduled_events import Notices
from jobttl.core.services.events import NOTICES_PER_SECOND, EventRecorder
from jobttl_emulator import EVENT
from tests.fixtures import job_object, with_server_fields
from tests.services import wait_for
from tests.worker.bench import Bench, kube  # noqa: F401  (kube: the module's emulator)

COUNT = 35  # more than one batch of the outbox
PACE = 10  # DeletionScheduled Events a worker posts per second, at most (aef3578: "paced (10/s per worker)")


@pytest.fixture
def bench(kube, redis_server, tmp_path, queue_name):
    return Bench(kube, redis_server, tmp_path, "ttl: 1h\n", queue_name)


def posted(kube, namespace: str) -> list[dict]:
    return [e for e in kube.store.list(EVENT, namespace)["items"]]


def booked(bench: Bench) -> list[dict]:
    """COUNT jobs just finished, their deletions booked: COUNT notices in the outbox."""
    now = time.time()
    jobs = [with_server_fields(job_object(TFJOB, f"announced-{i}", bench.namespace, at=now)) for i in range(COUNT)]
    for obj in jobs:
        bench.book(obj)
    return jobs


def post_times(bench: Bench) -> list[float]:
    return sorted(r["time"] for r in bench.kube.requests("POST", path_contains=f"/namespaces/{bench.namespace}/events"))


def test_notices_are_paced_and_none_starves_behind_a_steady_stream_of_deletion_events(bench):
    assert COUNT > notices_module.BATCH
    jobs = booked(bench)
    busy = f"busy-{uuid.uuid4().hex[:6]}"  # the deletions' Events go to a namespace of their own
    recorder = EventRecorder(
        bench.ctx.kube, notices=Notices(bench.redis, bench.ctx.schedule, bench.ctx.audit, bench.ctx.kube)
    )
    stop, sent = threading.Event(), []

    def deletions():  # a deletion Event every 50 ms: the Event queue is never idle for a second
        while not stop.is_set():
            ref = JobRef(TFJOB.api_version, TFJOB.kind, busy, f"gone-{len(sent)}", str(uuid.uuid4()))
            recorder.record(ref, "SuccessfulDeleteJob", f"Deleted {ref.name}")
            sent.append(ref.name)
            stop.wait(0.05)

    stream = threading.Thread(target=deletions, daemon=True)
    stream.start()
    try:
        wait_for(
            lambda: len(posted(bench.kube, bench.namespace)) >= COUNT,
            timeout=30,
            interval=0.1,
            what="every DeletionScheduled notice, the deletion Events flowing all along",
        )
    finally:
        stop.set()
        stream.join(5)
        recorder.flush(10)
    scheduled = posted(bench.kube, bench.namespace)
    # None lost, none twice: one Event per job.
    assert sorted(e["involvedObject"]["uid"] for e in scheduled) == sorted(o["metadata"]["uid"] for o in jobs)
    assert {e["reason"] for e in scheduled} == {"DeletionScheduled"}
    # The deletions' Events all went too, the notices notwithstanding.
    wait_for(lambda: len(posted(bench.kube, busy)) == len(sent), timeout=10, what="every deletion Event")
    # Paced: a batch, then no more than NOTICES_PER_SECOND on average.
    times = post_times(bench)
    assert len(times) == COUNT
    assert NOTICES_PER_SECOND == PACE
    slowest_allowed = (COUNT - notices_module.BATCH) / PACE
    assert times[-1] - times[0] >= slowest_allowed * 0.9, f"{COUNT} notices in {times[-1] - times[0]:.2f}s"


def test_no_second_sees_more_notices_than_notices_per_second(bench):
    booked(bench)
    recorder = EventRecorder(
        bench.ctx.kube, notices=Notices(bench.redis, bench.ctx.schedule, bench.ctx.audit, bench.ctx.kube)
    )
    try:
        wait_for(lambda: len(post_times(bench)) >= COUNT, timeout=30, interval=0.1, what="every notice")
    finally:
        recorder.flush(10)
    times = post_times(bench)
    busiest = max(sum(1 for t in times if start <= t < start + 1.0) for start in times)
    assert busiest <= PACE, f"{busiest} notices within one second"
