"""A burst of events that each ask for a resync runs at most one resync per minimum interval
(JOBTTL_RESYNC_MIN_INTERVAL): the first at once, one deferred to the end of the interval for all the
others, none lost. Real processes: the sink receiving PingSource events, the worker running the
resyncs against the emulator, a redis-server of the module's own."""

from __future__ import annotations

import json

import pytest
import requests
from cloudevents.core.bindings.http import to_binary_event
from cloudevents.core.v1.event import CloudEvent
from rq import Queue
from rq.serializers import JSONSerializer

from jobttl_emulator import Resource
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.store import keys
from tests.services import JobttlProcess, RedisServer, start_emulator, start_sink, wait_for

QUEUE = "mininterval"
MIN_INTERVAL = 4  # seconds: short, so the deferred resync comes within the test


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    directory = tmp_path_factory.mktemp("min-interval")
    cluster = start_emulator(directory, [Resource(TFJOB.group, TFJOB.version, TFJOB.kind, TFJOB.plural)])
    redis_server = RedisServer().start()
    env = {
        "JOBTTL_REDIS_URL": redis_server.url,
        "KUBECONFIG": str(cluster.kubeconfig),
        "JOBTTL_QUEUE": QUEUE,
        "JOBTTL_RESYNC_INTERVAL": "0",
        "JOBTTL_RESYNC_MIN_INTERVAL": str(MIN_INTERVAL),
        "JOBTTL_WORKER_METRICS_PORT": "0",
        "JOBTTL_FIRST_RUN_REVIEW": "off",
    }
    processes = []
    try:
        sink, url = start_sink(env, directory)
        processes.append(sink)
        worker = JobttlProcess(["worker"], env, directory, "worker").start()
        processes.append(worker)
        wait_for(lambda: "worker-start" in worker.log(), timeout=60, what="the worker to start")
        yield url, sink, worker, redis_server.client()
    finally:
        for process in processes:
            process.stop()
        redis_server.stop()
        cluster.stop()


def ping(number: int):
    event = CloudEvent(
        attributes={
            "specversion": "1.0",
            "id": f"p{number}",
            "type": "dev.knative.sources.ping",
            "source": "/apis/v1/namespaces/jobttl/pingsources/jobttl-resync",
        },
        data={"reason": "resync"},
    )
    return to_binary_event(event)


def resyncs_run(redis) -> list[int]:
    """When each resync finished (ms, from its audit entry's id)."""
    return [
        int(entry_id.split(b"-")[0])
        for entry_id, fields in redis.xrange(keys.AUDIT_STREAM)
        if fields.get(b"event") == b"resync"
    ]


def resync_jobs(redis) -> list[str]:
    queue = Queue(QUEUE, connection=redis, serializer=JSONSerializer)
    return [
        *queue.get_job_ids(),
        *queue.scheduled_job_registry.get_job_ids(),
        *queue.started_job_registry.get_job_ids(),
    ]


def test_a_burst_of_pings_runs_one_resync_at_once_and_one_after_the_minimum_interval(stack):
    url, sink, worker, redis = stack
    started = int(redis.time()[0])
    outcomes = []
    for number in range(20):
        message = ping(number)
        response = requests.post(url, headers=dict(message.headers), data=message.body, timeout=10)
        assert response.status_code == 202
        outcomes.append(response.headers["X-Jobttl-Outcome"])
    assert outcomes == ["resync-requested", "resync-deferred"] + ["resync-coalesced"] * 18
    deferred = [
        json.loads(line) for line in sink.log().splitlines() if line.startswith("{") and '"resync-deferred"' in line
    ]
    assert deferred and deferred[0]["why"] == "ping" and deferred[0]["minInterval"] == MIN_INTERVAL
    assert any('"resync-coalesced"' in line for line in sink.log().splitlines())

    # The worker runs the first at once and the deferred one once the interval is over; then nothing
    # is left booked: eighteen more pings did not become eighteen more resyncs.
    wait_for(
        lambda: len(resyncs_run(redis)) == 2 and not resync_jobs(redis),
        timeout=60,
        what="the worker to run the two resyncs and nothing more",
    )
    first, second = resyncs_run(redis)
    assert second >= (started + MIN_INTERVAL) * 1000, "the deferred resync waited for the interval"

    # A ping once the interval is over runs at once again.
    wait_for(lambda: not redis.exists(keys.resync_next(QUEUE)), timeout=MIN_INTERVAL * 3, what="the interval to end")
    message = ping(99)
    response = requests.post(url, headers=dict(message.headers), data=message.body, timeout=10)
    assert response.headers["X-Jobttl-Outcome"] == "resync-requested"
    wait_for(lambda: len(resyncs_run(redis)) == 3, timeout=60, what="the third resync")
