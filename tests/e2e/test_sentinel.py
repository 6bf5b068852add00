"""Redis that survives a node: the primary is SIGKILLed, the Sentinels promote a replica, nothing is lost.

Real processes throughout: a primary, two replicas and three Sentinels (`redis-server
--sentinel`), the sink and the worker (with RQ's scheduler child) configured with the
``redis+sentinel://`` URL, and the in-process API emulator whose request log says what was
deleted and when. Events keep arriving during the failover; the sink waits for a replica to
hold each accepted event (``JOBTTL_SINK_MIN_REPLICAS=1``), so that "accepted" survives the
loss of the primary, whatever was still in flight to the replicas.

Why two replicas: with one, the promoted replica has none left, and a sink that requires one
could accept nothing until the old primary returned.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
import requests

from tests.e2e.conftest import Cluster, stack_environment
from tests.services import ROOT, JobttlProcess, RedisSentinels, free_port, start_sink, wait_for
from jobttl.core.store import redisconn
from jobttl.core.domain.decisions.decision import decide
from jobttl.core.domain.kinds.registry import TFJOB

PENDING_TTL = 8  # booked before the kill, due after the failover
STREAM_TTL = 2  # the jobs whose events arrive during the failover
SETTLE = 3.0  # after the promotion: the remaining replica follows the new primary, 503s end
RESUME_BOUND = 6.0  # every deletion runs within this long of max(its due time, the promotion)
SENDERS = 3  # concurrent event streams (the sink has 4 threads)


@pytest.fixture
def sentinels(tmp_path):
    cluster = RedisSentinels(tmp_path / "redis", replicas=2).start()
    yield cluster
    cluster.stop()


class Sender(threading.Thread):
    """Creates finished jobs and sends their events to the sink, one after another, recording each answer."""

    def __init__(self, cluster: Cluster, name: str, answers: list, stop: threading.Event):
        super().__init__(daemon=True)
        self.cluster, self.prefix = cluster, name
        self.answers, self.stop = answers, stop
        self.refusals: list[str] = []  # why each 503: Redis unreachable, or no replica acknowledged

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            obj = self.cluster.create_finished(f"{self.prefix}-{n}", ttl=STREAM_TTL, finished_at=time.time())
            try:
                response = self.cluster.event("update", obj)
                status: int | str = response.status_code
                self.refusals += ["replica" if "replicas" in response.text else "unreachable"] if status == 503 else []
            except requests.RequestException as exc:
                status = type(exc).__name__
            self.answers.append((time.time(), status, obj))
            n += 1
            time.sleep(0.02)


class Promotion(threading.Thread):
    """Notes when the Sentinels name another primary."""

    def __init__(self, sentinels: RedisSentinels, old_port: int):
        super().__init__(daemon=True)
        self.sentinels, self.old_port, self.at = sentinels, old_port, None

    def run(self) -> None:
        deadline = time.time() + 30
        while self.at is None and time.time() < deadline:
            if self.sentinels.primary_port() not in (None, self.old_port):
                self.at = time.time()
            time.sleep(0.05)


def test_a_failover_loses_no_accepted_deletion_and_the_sink_says_503_only_meanwhile(sentinels, emulator, log_dir):
    env = stack_environment(sentinels, emulator, "sentinel", metrics_port := free_port(), JOBTTL_SINK_MIN_REPLICAS="1")
    sink, sink_url = start_sink(env, log_dir)
    worker = JobttlProcess(["worker"], env, log_dir, "worker-sentinel").start()
    cli = redisconn.connect(sentinels.url, redisconn.CLI)
    try:
        wait_for(
            lambda: requests.get(f"http://127.0.0.1:{metrics_port}/readyz", timeout=1).ok, timeout=20, what="the worker"
        )
        cluster = Cluster(emulator, sink_url, cli)
        pending = [cluster.create_finished(f"pending-{i}", ttl=PENDING_TTL, finished_at=time.time()) for i in range(10)]
        assert [cluster.event("update", obj).status_code for obj in pending] == [202] * 10

        answers: list[tuple[float, int | str, dict]] = []  # (answered at, status or error, object)
        stop = threading.Event()
        senders = [Sender(cluster, f"stream{i}", answers, stop) for i in range(SENDERS)]
        for sender in senders:
            sender.start()
        wait_for(lambda: len(answers) >= 10, what="events before the kill")
        old_port = sentinels.primary_port()
        promotion = Promotion(sentinels, old_port)
        t0 = time.time()
        sentinels.kill_primary()
        promotion.start()
        promotion.join()
        assert promotion.at is not None, "the Sentinels promoted no replica within 30 s"
        wait_for(
            lambda: any(s == 202 and t > promotion.at + SETTLE for t, s, _ in answers),
            timeout=20,
            what="the sink to accept events again after the promotion",
        )
        stop.set()
        for sender in senders:
            sender.join()

        accepted = pending + [obj for _, status, obj in answers if status == 202]
        deleted = wait_for(
            lambda: _deleted_all(cluster, accepted), timeout=PENDING_TTL + 20, what="every accepted job to be deleted"
        )
        refusals = [why for sender in senders for why in sender.refusals]
        timeline = _timeline(t0, promotion.at, answers, deleted, refusals)
        (log_dir / "sentinel-failover.txt").write_text(timeline + "\n")
        print("\n" + timeline)

        statuses = {status for _, status, _ in answers}
        assert statuses <= {202, 503}, f"only 202, or 503 during the failover: {statuses}\n{timeline}"
        refused = [t for t, status, _ in answers if status == 503]
        assert all(t0 <= t <= promotion.at + SETTLE for t in refused), f"a 503 outside the failover\n{timeline}"
        for obj in accepted:
            due = decide(obj, TFJOB).expires_at
            late = deleted[obj["metadata"]["name"]] - max(due, promotion.at)
            assert late < RESUME_BOUND, f"{obj['metadata']['name']} deleted {late:.1f}s late\n{timeline}"

        # The command line finds the new primary through the Sentinels too.
        status = subprocess.run(
            [sys.executable, "-m", "jobttl", "status", "--json"],
            cwd=ROOT,
            timeout=30,
            env={**worker.env},
            capture_output=True,
            text=True,
        )
        assert status.returncode == 0, status.stderr
    finally:
        worker.stop()
        sink.stop()


def _deleted_all(cluster: Cluster, accepted: list[dict]) -> dict[str, float] | None:
    """When each accepted job was deleted, once every one of them was; None before."""
    deleted = {}
    for entry in cluster.deletes():
        deleted.setdefault(entry["path"].rsplit("/", 1)[1], entry["time"])
    return deleted if all(obj["metadata"]["name"] in deleted for obj in accepted) else None


def _timeline(t0: float, promoted: float, answers: list, deleted: dict[str, float], refusals: list[str]) -> str:
    refused = [t for t, status, _ in answers if status == 503]
    resumed = min((t for t in deleted.values() if t > t0), default=None)

    def at(t):
        return f"t0{t - t0:+.2f}s" if t is not None else "never"

    return (
        f"failover: primary SIGKILLed at t0; first 503 at {at(min(refused, default=None))}, last 503 at "
        f"{at(max(refused, default=None))} ({len(refused)} of {len(answers)} events refused: {refusals.count('unreachable')} Redis unreachable, "
        f"{refusals.count('replica')} no replica acknowledged); replica promoted at "
        f"{at(promoted)}; first deletion after the kill at {at(resumed)}; {len(deleted)} jobs deleted, none lost"
    )
