"""A worker's own context in this process, against real Redis and the emulator over HTTP (pods,
Events and TFJobs), for tests that run `jobttl.core.services.deletion.Deletion` step by step.

Nothing is monkeypatched: a window between the worker's reads is opened with a rate-limit slot
taken in Redis beforehand (`Bench.run_and_change`), and the test acts in it as a user would.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from jobttl.core.store import keys
from jobttl.core.runtime.config import Settings
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.store.ratelimit import RateLimit
from jobttl.core.store.schedule import member_for
from jobttl.core.services.worker_graph import WorkerGraph
from jobttl.core.services.deletion import Deletion, Target
from jobttl_emulator import EVENT, POD, TFJOB as TFJOB_RESOURCE, seed_object
from tests.fixtures import job_object
from tests.services import start_emulator, wait_for

POD_LABEL = TFJOB.pod_label
WINDOW = 4.0  # seconds the worker waits for its rate-limit slot: the test acts in between


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    server = start_emulator(tmp_path_factory.mktemp("pods-kube"), (TFJOB_RESOURCE, POD, EVENT), gc_delay=0.1)
    yield server
    server.stop()


class Bench:
    """A worker's context (the one `jobttl worker` builds) under a policy of the test's own."""

    def __init__(self, kube, redis_server, directory, policy: str, queue: str, rate: float = 0.0):
        (directory / "policy.yaml").write_text(policy)
        self.kube = kube
        self.namespace = f"pods-{uuid.uuid4().hex[:8]}"
        self.rate_key = f"test:rate:{uuid.uuid4().hex[:8]}"
        settings = Settings.from_env(
            {
                "JOBTTL_REDIS_URL": redis_server.url,
                "KUBECONFIG": str(kube.kubeconfig),
                "JOBTTL_QUEUE": queue,
                "JOBTTL_POLICY": str(directory / "policy.yaml"),
                "JOBTTL_DELETE_RATE": "0",
                "JOBTTL_RESYNC_INTERVAL": "0",
                "JOBTTL_API_TIMEOUT": "10",
                # Not the review's tests (tests/worker/test_first_run_review.py): its
                # record is read from Redis, which an earlier test of this process
                # may have left there, holding this bench's overdue stages.
                "JOBTTL_FIRST_RUN_REVIEW": "off",
            }
        )
        self.ctx = WorkerGraph.from_settings(settings)
        self.ctx.rate_limit = RateLimit(self.ctx.redis, rate, key=self.rate_key)
        self.redis = self.ctx.redis

    # --- the cluster -------------------------------------------------------------------------------
    def job(self, name: str, finished_at: float, **annotations: str) -> dict:
        obj = job_object(TFJOB, name, self.namespace, at=finished_at)
        if annotations:
            obj["metadata"]["annotations"] = annotations
        return seed_object(self.kube.store, obj)

    def pod(self, name: str, owner: dict) -> dict:
        meta = owner["metadata"]
        return seed_object(
            self.kube.store,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": {POD_LABEL: meta["name"]},
                    "ownerReferences": [
                        {
                            "apiVersion": owner["apiVersion"],
                            "kind": owner["kind"],
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {"containers": [{"name": "tensorflow", "image": "kubeflow/tf-mnist"}]},
                "status": {"phase": "Succeeded"},
            },
        )

    def pods(self) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.kube.store.list(POD, self.namespace)["items"])

    def pod_deletes(self) -> list[str]:
        return [
            r["path"].rsplit("/", 1)[1]
            for r in self.kube.requests("DELETE", path_contains=f"/namespaces/{self.namespace}/pods/")
        ]

    def job_deletes(self) -> list[str]:
        return [
            r["path"].rsplit("/", 1)[1]
            for r in self.kube.requests("DELETE", path_contains=f"/namespaces/{self.namespace}/tfjobs/")
        ]

    def job_gets(self, name: str) -> int:
        path = f"/namespaces/{self.namespace}/tfjobs/{name}"
        return len([r for r in self.kube.requests("GET", path_contains=path) if r["path"].endswith(path)])

    def get(self, name: str) -> dict:
        return self.ctx.kube.get(TFJOB, self.namespace, name)

    def update(self, name: str, change, status: bool = False) -> dict:
        """Change the job in the store, as its controller (`status`) or a user would."""
        obj = self.kube.store.get(_tfjobs(self.kube), self.namespace, name)
        change(obj)
        return self.kube.store.replace(
            _tfjobs(self.kube), self.namespace, name, obj, subresource="status" if status else None
        )

    def annotate(self, name: str, **annotations: str) -> dict:
        return self.update(name, lambda o: o["metadata"].setdefault("annotations", {}).update(annotations))

    # --- jobttl ------------------------------------------------------------------------------------
    def book(self, obj: dict):
        outcomes, rejected = self.ctx.reconciler.reconcile_many([(obj, TFJOB)], "test")
        assert not rejected
        return outcomes

    def target(self, obj: dict, stage: str) -> Target:
        member = member_for(obj["metadata"]["uid"], stage)
        due = self.redis.zscore(keys.PENDING_INDEX, member)
        assert due is not None, f"no {stage} stage pending for {obj['metadata']['name']}"
        return Target(JobRef.of(obj), member, int(due), stage)

    def run(self, target: Target) -> str:
        return Deletion(self.ctx, None).run(target)

    def open_window(self) -> None:
        """The next rate-limit slot is WINDOW seconds away: the worker waits that long after its read."""
        seconds, micros = self.redis.time()
        self.redis.set(self.rate_key, int((seconds + WINDOW) * 1_000_000 + micros), px=int(WINDOW * 1000) + 5000)

    def run_and_change(self, target: Target, name: str, change) -> str:
        """Run the deletion; once the worker has read the job and waits for its slot, `change()`."""
        self.open_window()
        before = self.job_gets(name)
        result: dict = {}
        thread = threading.Thread(target=lambda: result.setdefault("outcome", self.run(target)), daemon=True)
        thread.start()
        wait_for(lambda: self.job_gets(name) > before, timeout=WINDOW, interval=0.02, what="the worker's first read")
        change()
        thread.join(timeout=60)
        assert not thread.is_alive()
        return result["outcome"]

    def history(self, name: str) -> list[dict]:
        return [e.as_dict() for e in reversed(self.ctx.audit.history(self.namespace, name))]

    def pending(self, obj: dict, stage: str) -> float | None:
        return self.redis.zscore(keys.PENDING_INDEX, member_for(obj["metadata"]["uid"], stage))


def _tfjobs(kube):
    return kube.store.resource_for(TFJOB.api_version, TFJOB.kind)
