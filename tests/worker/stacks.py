"""Small stacks for the worker's fault tests: their own Redis, a namespace in a shared emulator.

Each fault test breaks something for good (a worker's clock, a SIGKILL, a Redis outage), so
each scenario gets a Redis of its own; the emulator (in this process, with the right clock)
is shared and scenarios keep apart by namespace. Deletions are booked from this process
through the one reconcile path, as the sink would book them, and observed in the emulator's
request log (when the DELETE reached the API server).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import libfaketime
import requests
from prometheus_client.parser import text_string_to_metric_families

from jobttl_emulator import Resource, seed_object
from jobttl.core.store.audit import Audit
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.runtime.config import Settings
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.store.schedule import Schedule
from tests.fixtures import job_object
from tests.services import ROOT, JobttlProcess, RedisServer, free_port

CORE_EVENTS = Resource("", "v1", "Event", "events", status_subresource=False)
RESOURCES = (Resource(TFJOB.group, TFJOB.version, TFJOB.kind, TFJOB.plural), CORE_EVENTS)


def faketime(spec: str | None = None, file: Path | None = None) -> dict[str, str]:
    """Environment that runs a process (and what it forks) on a shifted clock, via libfaketime.

    `spec` is a fixed offset ("+30d", "-2m"); `file` holds one that the test may rewrite
    while the process runs (read on every call). Monotonic clocks stay true: timeouts and
    sleeps must not be shifted, only the wall clock.
    """
    _, additions = libfaketime.get_reload_information()
    env = {**additions, "DONT_FAKE_MONOTONIC": "1", "FAKETIME_NO_CACHE": "1"}
    if spec is not None:
        env["FAKETIME"] = spec
    if file is not None:
        env["FAKETIME_TIMESTAMP_FILE"] = str(file)
    return env


class Stack:
    """One Redis, one queue, one namespace; workers as `python -m jobttl worker` processes."""

    def __init__(self, name: str, emulator, log_dir: Path, persistent: bool = False, **settings: str):
        self.name = name
        self.emulator = emulator
        self.log_dir = log_dir
        self.redis_server = RedisServer(persistent=persistent).start()
        self.redis = self.redis_server.client()
        self.queue = f"q-{name}"
        self.namespace = f"{name}-{uuid.uuid4().hex[:6]}"
        self.env = {
            "JOBTTL_REDIS_URL": self.redis_server.url,
            "KUBECONFIG": str(emulator.kubeconfig),
            "JOBTTL_QUEUE": self.queue,
            "JOBTTL_RESYNC_INTERVAL": "0",
            "JOBTTL_DELETE_RATE": "0",
            "JOBTTL_API_TIMEOUT": "30",
            **settings,
        }
        # Booked as the sink books them: the same retries and job timeout.
        settings = Settings.from_env(self.env)
        self.schedule = Schedule.from_settings(self.redis, settings)
        self.reconciler = Reconciler.from_settings(self.schedule, Audit.from_settings(self.redis, settings), settings)
        self.workers: list[JobttlProcess] = []
        self.ports: dict[JobttlProcess, int] = {}

    # --- jobs ----------------------------------------------------------------------------------
    def book(self, prefix: str, count: int, due: int) -> list[dict]:
        """`count` TFJobs that finished a minute ago, their deletions booked for `due` (whole seconds)."""
        finished = int(time.time()) - 60
        objects = [
            seed_object(
                self.emulator.store, job_object(TFJOB, f"{prefix}-{i}", self.namespace, at=finished, ttl=due - finished)
            )
            for i in range(count)
        ]
        for obj in objects:
            assert self.reconciler.reconcile(obj, TFJOB, "test").due == due
        return objects

    def deletes(self, prefix: str = "") -> list[dict]:
        """DELETEs of this namespace's jobs the API server answered, oldest first."""
        return [r for r in self.emulator.requests("DELETE", f"/namespaces/{self.namespace}/tfjobs/{prefix}")]

    def deleted(self, prefix: str) -> set[str]:
        return {r["path"].rsplit("/", 1)[1] for r in self.deletes(prefix) if r["status"] == 200}

    def pending(self) -> int:
        return self.redis.zcard("jobttl:pending")

    # --- processes -----------------------------------------------------------------------------
    def worker(self, label: str, **env: str) -> JobttlProcess:
        port = free_port()
        process = JobttlProcess(
            ["worker"],
            {**self.env, "JOBTTL_WORKER_METRICS_PORT": str(port), **env},
            self.log_dir,
            f"{self.name}-{label}",
        ).start()
        self.workers.append(process)
        self.ports[process] = port
        return process

    def readyz(self, worker: JobttlProcess) -> tuple[int, dict]:
        response = requests.get(f"http://127.0.0.1:{self.ports[worker]}/readyz", timeout=2)
        return response.status_code, response.json()

    def metrics(self, worker: JobttlProcess) -> dict[tuple[str, tuple], float]:
        text = requests.get(f"http://127.0.0.1:{self.ports[worker]}/metrics", timeout=2).text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def status(self) -> dict:
        """`jobttl status --json`, as an operator runs it (with the right clock)."""
        done = subprocess.run(
            [sys.executable, "-m", "jobttl", "status", "--json"],
            env={**self.env, "PATH": "/usr/bin:/bin"},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode in (0, 1), done.stderr
        return json.loads(done.stdout)

    def redis_now(self) -> float:
        seconds, micros = self.redis.time()
        return seconds + micros / 1e6

    def stop(self) -> None:
        for process in self.workers:
            process.stop()
        self.redis_server.stop()
