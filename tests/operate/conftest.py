"""The e2e stack (emulator, sink and worker processes) for the operator tests, plus the CLI.

The stack's fixtures are imported from tests/e2e rather than copied. Imported here, they
start a second stack when both folders run in one session, so it gets a queue and a
worker metrics port of its own: neither worker ever takes the other's jobs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import cluster, emulator, log_dir, sink_url, stack_environment, worker  # noqa: F401
from tests.services import ROOT, RedisServer, free_port, wait_for
from jobttl.core.store.audit import Audit
from jobttl.core.services.operations import Operations
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.domain.rules.policy import Policy
from jobttl.core.store.schedule import Schedule

QUEUE = "operate"
WORKER_METRICS_PORT = free_port()
TOMBSTONE_DAYS = 2


@pytest.fixture(scope="session")
def redis_server():
    """A Redis of this stack's own (overrides the session's): what workers share there is not only
    the queue, and the e2e stack's worker, still running, would otherwise follow (and count) this
    stack's deletions."""
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def stack_env(redis_server, emulator) -> dict[str, str]:  # overrides the e2e stack's
    return stack_environment(
        redis_server, emulator, QUEUE, WORKER_METRICS_PORT, JOBTTL_TOMBSTONE_DAYS=str(TOMBSTONE_DAYS)
    )


class Cli:
    """`jobttl ...` as an operator runs it: a process of its own, configured by the environment."""

    def __init__(self, env: dict[str, str]):
        self.env = env

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "jobttl", *args], env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=30
        )

    def json(self, *args: str):
        done = self.run(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.fixture(scope="session")
def cli(stack_env) -> Cli:
    return Cli({**os.environ, "JOBTTL_REDIS_URL": stack_env["JOBTTL_REDIS_URL"], "JOBTTL_QUEUE": QUEUE})


def metric(url: str, name: str, **labels: str) -> float:
    """The value of one sample at a Prometheus endpoint; 0 when it has not been recorded yet."""
    text = requests.get(url, timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


@pytest.fixture(scope="package")
def worker_metrics(worker) -> str:
    url = f"http://127.0.0.1:{WORKER_METRICS_PORT}/metrics"
    wait_for(lambda: requests.get(url, timeout=1).ok, timeout=20, what="the worker's metrics")
    return url


@pytest.fixture
def ops(redis) -> Operations:
    """What the CLI uses, in this process: for waiting on the stack without a process per poll."""
    schedule, audit = Schedule(redis, QUEUE, retry_intervals=[]), Audit(redis)
    return Operations(redis, schedule, audit, Reconciler(schedule, audit, Policy()))
