"""Worker, sink and watcher, idle or busy, exit within 10 s of SIGTERM or SIGINT (issue 27 §5).

SIGTERM goes to the process alone, as the kubelet sends it to a container's first process;
SIGINT to the process group, as a terminal's Ctrl-C does. Each process is first seen ready by
what it does (a log line, an answered request), and the bound is the promise's 10 s: a failure
timeout on the process's exit, not a window the test measures.
"""

from __future__ import annotations

import json
import os
import signal
import uuid

import pytest
import requests

from jobttl_emulator import TFJOB
from tests.e2e.conftest import CORE_EVENTS
from tests.services import JobttlProcess, free_port, start_emulator, wait_for

STOP_BOUND = 10.0  # seconds: Kubernetes' grace period is 30 s; a rollout should not be the one to end it
SIGNALS = {"SIGTERM": (signal.SIGTERM, os.kill), "SIGINT": (signal.SIGINT, os.killpg)}


def said(process: JobttlProcess) -> list[dict]:
    return [json.loads(line) for line in process.log().splitlines() if line.startswith("{")]


def stops_in_time(process: JobttlProcess, how: str) -> int:
    sig, send = SIGNALS[how]
    send(process.process.pid, sig)
    try:
        return process.process.wait(timeout=STOP_BOUND)
    except Exception:  # noqa: BLE001 - a timeout, said with the process's log
        raise AssertionError(
            f"{process.args[0]} still running {STOP_BOUND:.0f} s after {how}:\n" + process.log()[-3000:]
        ) from None


@pytest.mark.parametrize("how", SIGNALS)
def test_an_idle_worker_stops_within_the_bound(stack_env, log_dir, how):
    queue = f"stop-{uuid.uuid4().hex[:8]}"
    worker = JobttlProcess(
        ["worker"],
        {**stack_env, "JOBTTL_QUEUE": queue, "JOBTTL_WORKER_METRICS_PORT": "0"},
        log_dir,
        f"stop-worker-{how}",
    ).start()
    try:
        # Up and idle: its scheduler process started and took the queue (the spawned process's own line).
        wait_for(
            lambda: any(f"Scheduler for {queue} started" in line.get("message", "") for line in said(worker)),
            timeout=120,
            what="the worker's scheduler to start",
        )
        status = stops_in_time(worker, how)
    finally:
        worker.stop()
    assert status in (0, 130), status  # a stop asked for, not a crash or a kill
    assert said(worker)[-1].get("event") == "worker-stop"


@pytest.mark.parametrize("how", SIGNALS)
def test_a_worker_stopped_while_its_scheduler_starts_stops_within_the_bound(stack_env, log_dir, how):
    queue = f"stop-{uuid.uuid4().hex[:8]}"
    worker = JobttlProcess(
        ["worker"],
        {**stack_env, "JOBTTL_QUEUE": queue, "JOBTTL_WORKER_METRICS_PORT": "0"},
        log_dir,
        f"stop-early-worker-{how}",
    ).start()
    try:
        wait_for(
            lambda: any(line.get("event") == "worker-start" for line in said(worker)),
            timeout=120,
            what="the worker to start",
        )
        stops_in_time(worker, how)
    finally:
        worker.stop()


@pytest.mark.parametrize("how", SIGNALS)
def test_a_sink_stops_within_the_bound(stack_env, log_dir, how):
    port = free_port()
    sink = JobttlProcess(
        ["sink", "--host", "127.0.0.1", "--port", str(port), "--threads", "4"], stack_env, log_dir, f"stop-sink-{how}"
    ).start()
    try:
        wait_for(
            lambda: requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).ok,
            timeout=120,
            what="the sink to answer",
        )
        stops_in_time(sink, how)
    finally:
        sink.stop()


@pytest.mark.parametrize("how", SIGNALS)
def test_a_watcher_stops_within_the_bound(stack_env, log_dir, sink_url, how):
    watcher = JobttlProcess(
        ["watch", "--sink", sink_url, "--port", "0"], stack_env, log_dir, f"stop-watch-{how}"
    ).start()
    try:
        wait_for(
            lambda: any(line.get("event") == "watch-start" for line in said(watcher)),
            timeout=120,
            what="the watcher to start",
        )
        stops_in_time(watcher, how)
    finally:
        watcher.stop()


@pytest.fixture(scope="module")
def slow_api(tmp_path_factory):
    """An API server of this module's own, whose answers it can slow down without slowing the package's."""
    server = start_emulator(tmp_path_factory.mktemp("slow-kube"), (TFJOB, CORE_EVENTS), gc_delay=0.2)
    yield server
    server.stop()


@pytest.mark.parametrize("how", SIGNALS)
def test_a_worker_signalled_while_it_measures_the_clocks_stops_within_the_bound(stack_env, log_dir, slow_api, how):
    """The worker's maintenance asks the API server its time (`/version`) every few seconds and
    waits out a failed answer: a signal that lands in that call must still stop the worker."""
    queue = f"stop-{uuid.uuid4().hex[:8]}"
    env = {
        **stack_env,
        "KUBECONFIG": str(slow_api.kubeconfig),
        "JOBTTL_QUEUE": queue,
        "JOBTTL_WORKER_METRICS_PORT": "0",
    }
    worker = JobttlProcess(["worker"], env, log_dir, f"stop-measuring-worker-{how}").start()
    try:
        wait_for(
            lambda: any(f"Scheduler for {queue} started" in line.get("message", "") for line in said(worker)),
            timeout=120,
            what="the worker's scheduler to start",
        )
        fault = slow_api.add_fault(verb="get", delay=4.0, path_contains="/version")
        wait_for(
            lambda: all(f["id"] != fault.id for f in slow_api.hooks.faults()),
            timeout=60,
            what="the worker's maintenance to ask the API server's time",
        )
        status = stops_in_time(worker, how)
    finally:
        worker.stop()
    assert status in (0, 130), status
