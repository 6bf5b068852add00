"""Redis fills without harm (issue 26 §7): a redis-server with a maxmemory and noeviction, the real
sink and worker processes, the emulator.

- Past 90% of maxmemory (`jobttl.core.store.capacity`): the sink books nothing more (503, saying
  Redis is full, retryable: Knative redelivers), its /readyz says not ready and why, and the worker
  goes on deleting what was booked, from the reserve left to it. Room again: ready, and the
  redelivered event is booked.
- Past maxmemory itself, where Redis refuses writes: the sink answers 503, never a 500; the worker
  does not exit, says so, and deletes what was booked once Redis takes writes again.

"Full" is made by lowering maxmemory to just above (or below) what Redis holds, as an operator's
Redis fills: the same INFO memory and the same OOM errors as a Redis filled by bookings.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
import requests
from redis.exceptions import OutOfMemoryError

from jobttl_emulator import Resource, seed_object
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.store import keys
from tests.fixtures import job_object
from tests.services import JobttlProcess, RedisServer, free_port, start_emulator, start_sink, wait_for

QUEUE = "full"
BINARY = {
    "ce-specversion": "1.0",
    "ce-source": "https://10.96.0.1",
    "ce-type": "dev.knative.apiserver.resource.update",
    "content-type": "application/json",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    directory = tmp_path_factory.mktemp("redis-full")
    cluster = start_emulator(directory, [Resource(TFJOB.group, TFJOB.version, TFJOB.kind, TFJOB.plural)])
    redis_server = RedisServer().start()
    redis = redis_server.client()
    redis.config_set("maxmemory-policy", "noeviction")
    metrics_port = free_port()
    env = {
        "JOBTTL_REDIS_URL": redis_server.url,
        "KUBECONFIG": str(cluster.kubeconfig),
        "JOBTTL_QUEUE": QUEUE,
        "JOBTTL_RESYNC_INTERVAL": "0",
        "JOBTTL_DELETE_RATE": "0",
        "JOBTTL_FIRST_RUN_REVIEW": "off",
        "JOBTTL_WORKER_METRICS_PORT": str(metrics_port),
    }
    processes = []
    try:
        sink, url = start_sink(env, directory)
        processes.append(sink)
        worker = JobttlProcess(["worker"], env, directory, "worker").start()
        processes.append(worker)
        wait_for(lambda: "worker-start" in worker.log(), timeout=60, what="the worker to start")
        stack = Stack(cluster, redis, url, sink, worker, f"http://127.0.0.1:{metrics_port}")
        stack.started = processes
        yield stack
    finally:
        for process in processes:
            process.stop()
        redis_server.stop()
        cluster.stop()


class Stack:
    def __init__(self, cluster, redis, url, sink, worker, worker_url):
        self.cluster, self.redis, self.url, self.sink, self.worker, self.worker_url = (
            cluster,
            redis,
            url,
            sink,
            worker,
            worker_url,
        )

    def job(self, namespace: str, name: str, finished_ago: float, ttl: int) -> dict:
        """A finished TFJob in the cluster, its TTL `ttl` seconds from its finish."""
        return seed_object(
            self.cluster.store,
            job_object(TFJOB, name, namespace, state="succeeded", at=time.time() - finished_ago, ttl=ttl),
        )

    def send(self, obj: dict) -> requests.Response:
        return requests.post(
            self.url, headers={**BINARY, "ce-id": uuid.uuid4().hex}, data=json.dumps(obj).encode(), timeout=10
        )

    def pending(self, obj: dict) -> bool:
        return self.redis.zscore(keys.PENDING_INDEX, obj["metadata"]["uid"]) is not None

    def deleted(self, obj: dict) -> bool:
        meta = obj["metadata"]
        return any(
            r["path"].endswith(f"/namespaces/{meta['namespace']}/tfjobs/{meta['name']}")
            for r in self.cluster.requests("DELETE")
        )

    def used(self) -> int:
        info = self.redis.info("memory")
        return int(info["used_memory"]) - int(info.get("mem_not_counted_for_evict", 0))

    def readyz(self) -> requests.Response:
        return requests.get(f"{self.url}/readyz", timeout=5)

    def metric(self, base: str, name: str) -> float | None:
        for line in requests.get(f"{base}/metrics", timeout=5).text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None


def test_past_the_reserve_the_sink_books_nothing_more_and_the_worker_deletes_what_was_booked(stack):
    namespace = f"reserve-{uuid.uuid4().hex[:6]}"
    booked = [stack.job(namespace, f"booked-{i}", finished_ago=0, ttl=6) for i in range(4)]
    for obj in booked:
        response = stack.send(obj)
        assert response.status_code == 202 and stack.pending(obj)
    assert stack.readyz().status_code == 200

    # Redis fills: 32 MiB of what a full Redis holds (pending deletions, elsewhere), and maxmemory
    # such that this is 92% of it, past the 90% where bookings stop: the reserve left (8%, ~2.7 MiB)
    # is the worker's, as 10% of the shipped 384 MiB is in production.
    stack.redis.setrange("test:filler", 32 * 1024 * 1024 - 1, "x")  # made by Redis: no 32 MiB request buffer
    stack.redis.config_set("maxmemory", int(stack.used() / 0.92))
    said = wait_for(
        lambda: (r := stack.readyz()).status_code == 503 and r.json(), timeout=10, what="/readyz to say full"
    )  # a Response of a 503 is falsy: its body is returned
    assert "Redis is full" in said["error"] and "maxmemory" in said["error"]

    # An event now gets a retryable 503 naming the cause, never a 500, and nothing of it is booked.
    # (The sink reads INFO memory at most once a second: an event within that second may still be booked.)
    def refused() -> tuple[dict, requests.Response] | None:
        late = stack.job(namespace, f"late-{uuid.uuid4().hex[:6]}", finished_ago=0, ttl=6)
        response = stack.send(late)
        return (late, response) if response.status_code != 202 else None

    obj, response = wait_for(refused, timeout=10, interval=0.2, what="an event refused while Redis is full")
    assert response.status_code == 503 and response.headers["Retry-After"] == "30"
    assert "Redis is full" in response.json()["error"]
    assert not stack.pending(obj)
    assert stack.metric(stack.url, "jobttl_redis_full") == 1.0

    # The worker deletes what was booked, from the reserve: Redis never refuses it a write.
    wait_for(
        lambda: all(stack.deleted(o) and not stack.pending(o) for o in booked),
        timeout=60,
        what="the worker to delete the booked jobs while Redis is full",
    )
    assert stack.worker.process.poll() is None
    assert '"redis-full"' not in stack.worker.log()

    # Room again (an operator raises maxmemory): ready, and the event Knative delivers again is booked.
    stack.redis.config_set("maxmemory", 0)
    stack.redis.delete("test:filler")
    wait_for(lambda: stack.readyz().status_code == 200, timeout=10, what="/readyz to be ready again")
    assert wait_for(lambda: stack.send(obj).status_code == 202, timeout=10, what="the redelivered event")
    assert stack.pending(obj)
    assert stack.metric(stack.url, "jobttl_redis_full") == 0.0


def test_a_redis_that_refuses_writes_gets_503s_and_the_worker_waits_then_deletes_what_was_booked(stack):
    namespace = f"refusing-{uuid.uuid4().hex[:6]}"
    booked = [stack.job(namespace, f"booked-{i}", finished_ago=0, ttl=5) for i in range(3)]
    for obj in booked:
        assert stack.send(obj).status_code == 202
    # Past maxmemory: Redis refuses every write that may grow memory (OOM), RQ's own included.
    stack.redis.config_set("maxmemory", stack.used() - 256 * 1024)
    try:
        with pytest.raises(OutOfMemoryError, match="maxmemory"):
            stack.redis.set("probe", "x")
        wait_for(lambda: '"redis-full"' in stack.worker.log(), timeout=30, what="the worker to say Redis is full")
        ready = stack.readyz()
        assert ready.status_code == 503 and "refuses writes" in ready.json()["error"]
        response = stack.send(stack.job(namespace, "late", finished_ago=0, ttl=5))
        assert response.status_code == 503 and "Redis is full" in response.json()["error"]
        assert stack.metric(stack.worker_url, "jobttl_redis_refusing_writes") == 1.0
        # The deletions come due while Redis refuses writes: the worker waits, and stays.
        wait_for(lambda: '"redis-still-full"' in stack.worker.log(), timeout=60, what="the worker to back off")
        assert stack.worker.process.poll() is None, "the worker never exits on a full Redis"
        # A worker starting now (a rollout, a crash) waits too, rather than exit at start.
        second = JobttlProcess(
            ["worker"],
            {**stack.worker.env, "JOBTTL_WORKER_METRICS_PORT": "0"},
            stack.worker.log_path.parent,
            "second-worker",
        ).start()
        stack.started.append(second)
        wait_for(lambda: '"redis-full"' in second.log(), timeout=60, what="the second worker to say Redis is full")
        wait_for(lambda: '"redis-still-full"' in second.log(), timeout=60, what="the second worker to back off")
        assert second.process.poll() is None
    finally:
        stack.redis.config_set("maxmemory", 0)
    wait_for(lambda: '"worker-start"' in second.log(), timeout=60, what="the second worker to start once there is room")
    assert second.process.poll() is None
    wait_for(
        lambda: all(stack.deleted(o) and not stack.pending(o) for o in booked),
        timeout=90,
        what="the worker to delete what was booked once Redis takes writes",
    )
    assert stack.worker.process.poll() is None, "the first worker, which waited it out, runs on"
    assert stack.readyz().status_code == 200
