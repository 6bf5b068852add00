"""The whole pipeline over HTTP: emulator ← worker ← Redis ← sink ← CloudEvents.

The emulator runs in this process (its own HTTP server thread); Redis, the sink and the
worker are real separate processes started with the `jobttl` command, exactly as
deployed. Tests isolate themselves by namespace rather than by restarting anything.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
from cloudevents.core.bindings.http import to_binary_event, to_structured_event
from cloudevents.core.v1.event import CloudEvent
from kubernetes import client, config

from jobttl_emulator import TFJOB, EmulatorServer, Resource, seed_object
from tests.fixtures import finished_status, running_status, tfjob
from tests.services import (
    ROOT,
    JobttlProcess,
    RecordingSink,
    RedisServer,
    free_port,
    start_emulator,
    start_sink,
    wait_for,
)
from jobttl.core.store.schedule import Schedule
from jobttl.core.store.audit import Audit
from jobttl.core.domain.kinds.registry import ALL_KINDS, WORKFLOW
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.domain.rules.policy import Policy, load_policy
from jobttl.core.services.reconcile import Reconciler

QUEUE = "e2e"
CORE_EVENTS = Resource("", "v1", "Event", "events", status_subresource=False)
# Every job kind as its CRD (or batch/v1) serves it, and core Events.
EVERY_KIND = (
    *(Resource(k.group, k.version, k.kind, k.plural, status_subresource=k is not WORKFLOW) for k in ALL_KINDS),
    CORE_EVENTS,
)
WORKER_METRICS_PORT = free_port()


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def emulator(tmp_path_factory):
    server = start_emulator(tmp_path_factory.mktemp("kube"), (TFJOB, CORE_EVENTS), gc_delay=0.2)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def announcements():
    """Where the stack announces upcoming deletions (JOBTTL_WARN_URL)."""
    sink = RecordingSink()
    yield sink
    sink.server.shutdown()


def stack_environment(redis_server, emulator, queue: str, metrics_port: int, **extra: str) -> dict[str, str]:
    """The settings of a test stack: fast retries, no resyncs or rate limit unless asked."""
    return {
        "JOBTTL_REDIS_URL": redis_server.url,
        "KUBECONFIG": str(emulator.kubeconfig),
        "JOBTTL_QUEUE": queue,
        "JOBTTL_RETRY_MAX": "3",
        "JOBTTL_RETRY_BACKOFF": "1",
        "JOBTTL_API_TIMEOUT": "5",
        # Resyncs are tested on their own; here they would race the tests' own events.
        "JOBTTL_RESYNC_INTERVAL": "0",
        "JOBTTL_DELETE_RATE": "0",
        "JOBTTL_WORKER_METRICS_PORT": str(metrics_port),
        "JOBTTL_FIRST_RUN_REVIEW": "off",  # tested in test_first_run.py
        **extra,
    }


@pytest.fixture(scope="session")
def stack_env(redis_server, emulator, announcements) -> dict[str, str]:
    return stack_environment(
        redis_server, emulator, QUEUE, WORKER_METRICS_PORT, JOBTTL_WARN_URL=announcements.url, JOBTTL_WARN_BEFORE="2s"
    )


# Package scope: each package that imports these (e2e, operate, watcher) gets its own stack, and a
# package's worker is gone before the next package's tests run. The schedule's follow-ups
# (jobttl:terminating) are one set per Redis, so a worker left running would follow, and count,
# another stack's deletions against its own emulator.
@pytest.fixture(scope="package")
def worker(stack_env, log_dir):
    process = JobttlProcess(["worker"], stack_env, log_dir, "worker").start()
    yield process
    process.stop()


@pytest.fixture(scope="package")
def sink_url(stack_env, log_dir):
    process, url = start_sink(stack_env, log_dir)
    yield url
    process.stop()


class Cluster:
    """A test's view of the stack: its own namespace in the emulator, events to the sink."""

    def __init__(self, emulator: EmulatorServer, sink_url: str, redis):
        self.emulator = emulator
        self.sink_url = sink_url
        self.namespace = f"t-{uuid.uuid4().hex[:10]}"
        api_client = config.new_client_from_config(config_file=str(emulator.kubeconfig))
        self.api = client.CustomObjectsApi(api_client)
        self.schedule = Schedule(redis, QUEUE, retry_intervals=[])
        self.audit = Audit(redis)
        self.reconciler = Reconciler(self.schedule, self.audit, Policy())

    # --- the cluster side --------------------------------------------------------------
    def create(self, name: str, ttl: int | None = None, status: dict | None = None, **kw) -> dict:
        obj = self.api.create_namespaced_custom_object(
            "kubeflow.org", "v1", self.namespace, "tfjobs", tfjob(name, self.namespace, ttl=ttl, **kw)
        )
        if status is not None:
            obj = self.set_status(name, status)
        return obj

    def create_finished(self, name: str, ttl: int | None, finished_at: float, outcome="Succeeded") -> dict:
        return self.create(name, ttl=ttl, status=finished_status(finished_at, outcome))

    def create_running(self, name: str, ttl: int | None, started: float) -> dict:
        return self.create(name, ttl=ttl, status=running_status(started))

    def set_status(self, name: str, status: dict) -> dict:
        return self.api.patch_namespaced_custom_object_status(
            "kubeflow.org", "v1", self.namespace, "tfjobs", name, {"status": status}
        )

    def patch(self, name: str, patch: dict) -> dict:
        return self.api.patch_namespaced_custom_object("kubeflow.org", "v1", self.namespace, "tfjobs", name, patch)

    def get(self, name: str) -> dict | None:
        try:
            return self.api.get_namespaced_custom_object("kubeflow.org", "v1", self.namespace, "tfjobs", name)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def delete_now(self, name: str) -> None:
        self.api.delete_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            self.namespace,
            "tfjobs",
            name,
            body=client.V1DeleteOptions(propagation_policy="Background"),
        )

    def requests(self, method: str | None = None) -> list[dict]:
        """API requests jobttl (or this test) made for objects in this test's namespace."""
        params = {"method": method} if method else {}
        log = requests.get(f"{self.emulator.url}/_emulator/requests", params=params, timeout=5).json()
        return [r for r in log if f"/namespaces/{self.namespace}/" in r["path"]]

    def deletes(self) -> list[dict]:
        return self.requests("DELETE")

    def fail_next(self, verb: str, status: int, count: int) -> None:
        response = requests.post(
            f"{self.emulator.url}/_emulator/faults",
            timeout=5,
            json={"verb": verb, "status": status, "count": count, "path_contains": f"/namespaces/{self.namespace}/"},
        )
        response.raise_for_status()

    # --- the event side ----------------------------------------------------------------
    def event(self, action: str, obj: dict, mode: str = "resource", structured: bool = False):
        meta = obj["metadata"]
        data = (
            obj
            if mode == "resource"
            else {
                "apiVersion": obj["apiVersion"],
                "kind": obj["kind"],
                "namespace": meta["namespace"],
                "name": meta["name"],
            }
        )
        event = CloudEvent(
            attributes={
                "specversion": "1.0",
                "id": str(uuid.uuid4()),
                "source": self.emulator.url,
                "type": f"dev.knative.apiserver.{mode}.{action}",
                "subject": f"/apis/kubeflow.org/v1/namespaces/{meta['namespace']}/tfjobs/{meta['name']}",
                "kind": obj["kind"],
                "apiversion": obj["apiVersion"],
                "name": meta["name"],
                "namespace": meta["namespace"],
            },
            data=data,
        )
        message = (to_structured_event if structured else to_binary_event)(event)
        return requests.post(self.sink_url, headers=message.headers, data=message.body, timeout=10)

    def wait_gone(self, name: str, timeout: float = 10.0) -> None:
        wait_for(lambda: self.get(name) is None, timeout=timeout, what=f"{self.namespace}/{name} to be deleted")


@pytest.fixture
def cluster(emulator, sink_url, worker, redis):
    yield Cluster(emulator, sink_url, redis)
    requests.delete(f"{emulator.url}/_emulator/faults", timeout=5).raise_for_status()


class OwnStack:
    """A module's own emulator (every kind), Redis and worker, for settings or a policy of its own.

    Deletions are booked the way the sink books them (the one reconcile path, from the object
    as the API server has it); the worker process then does the rest.
    """

    def __init__(
        self,
        directory: Path,
        name: str,
        policy: str | None = None,
        gc_delay: float = 0.2,
        resources: tuple[Resource, ...] = (),
        **settings: str,
    ):
        """`resources`: served besides every job kind and Events (pods, say)."""
        self.directory, self.name = directory, name
        self.emulator = start_emulator(directory, (*EVERY_KIND, *resources), gc_delay=gc_delay)
        self.redis_server = RedisServer().start()
        self.redis = self.redis_server.client()
        self.metrics_port = free_port()
        extra, self.policy = dict(settings), Policy()
        if policy is not None:
            (directory / "policy.yaml").write_text(policy)
            extra["JOBTTL_POLICY"] = str(directory / "policy.yaml")
            self.policy = load_policy(directory / "policy.yaml")  # the sink's, and the worker's
        self.env = stack_environment(self.redis_server, self.emulator, name, self.metrics_port, **extra)
        self.worker = JobttlProcess(["worker"], self.env, directory, f"{name}-worker").start()
        wait_for(
            lambda: requests.get(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1).ok,
            timeout=20,
            what=f"the {name} worker",
        )
        self.reconciler = Reconciler(Schedule(self.redis, name, retry_intervals=[]), Audit(self.redis), self.policy)
        api_client = config.new_client_from_config(config_file=str(self.emulator.kubeconfig))
        self.custom, self.core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)

    def stop(self) -> None:
        self.worker.stop()
        self.redis_server.stop()
        self.emulator.stop()

    def seed(self, obj: dict) -> dict:
        """Create the object as its controller would leave it (status written through /status)."""
        return seed_object(self.emulator.store, obj)

    def book(self, obj: dict, kind: JobKind, policy: Policy | None = None):
        """Reconcile the object, as the sink does for an event about it (under `policy` if given)."""
        reconciler = (
            self.reconciler if policy is None else Reconciler(self.reconciler.schedule, self.reconciler.audit, policy)
        )
        return reconciler.reconcile(obj, kind, "test")

    def jobttl(self, *args: str, as_json: bool = True) -> Any:
        """An operator command's --json answer (or its text), run as a user runs it."""
        result = subprocess.run(
            [sys.executable, "-m", "jobttl", *args, *(["--json"] if as_json else [])],
            env={**self.worker.env},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout) if as_json else result.stdout

    def history(self, namespace: str, name: str) -> list[dict]:
        """The job's audit entries, oldest first."""
        return [e.as_dict() for e in reversed(self.reconciler.audit.history(namespace, name))]

    def metric(self, name: str) -> float | None:
        text = requests.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def deletes(self, namespace: str) -> list[dict]:
        return self.emulator.requests("DELETE", path_contains=f"/namespaces/{namespace}/")

    def events(self, namespace: str) -> list:
        return self.core.list_namespaced_event(namespace).items
