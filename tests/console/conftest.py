"""The console's fixtures: a Redis with a seeded schedule, the emulator answering TokenReview and
SubjectAccessReview for three users, and an archive with one job's manifest and log."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import yaml

from jobttl.core.domain.deploy import rights
from jobttl.core.domain.decisions.archive import INDEX, MANIFEST, folder, log_path
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.runtime.config import Settings
from jobttl.core.services import graph
from jobttl.core.store import redisconn
from jobttl_emulator import TFJOB as EMULATED_TFJOB
from tests.fixtures import finished_status, tfjob, with_server_fields
from tests.services import RedisServer, start_emulator

# alice operates, carol reads, bob may do nothing
TOKENS = {
    "alice-token": {"username": "alice", "groups": ["platform-team"]},
    "carol-token": {"username": "carol"},
    "bob-token": {"username": "bob"},
}
GRANTS = [
    {"groups": ["platform-team"], "rules": rights.cluster_role(rights.OPERATOR)["rules"]},
    {"users": ["carol"], "rules": rights.cluster_role(rights.READER)["rules"]},
]

GONE = JobRef("kubeflow.org/v1", "TFJob", "team-a", "resnet-old", "6f1d3c0e-0000-4000-8000-000000000001")
LOG_TEXT = "epoch 1 loss 0.9\nepoch 2 loss 0.4\ntraining done\n"


@pytest.fixture(scope="package")
def redis_server():
    """The console tests' own Redis: they flush it, and the due index is a Redis's, not a queue's."""
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kube(tmp_path_factory):
    server = start_emulator(tmp_path_factory.mktemp("kube"), (EMULATED_TFJOB,))
    server.set_identities(TOKENS, GRANTS)
    yield server
    server.stop()


@pytest.fixture
def archive_dir(tmp_path) -> Path:
    """One archived job, as the worker writes it: manifest, a log, and index.json last."""
    root = tmp_path / "archive"
    where = root / folder(GONE)
    (where / "logs").mkdir(parents=True)
    (where / MANIFEST).write_text(
        yaml.safe_dump(
            {
                "apiVersion": GONE.api_version,
                "kind": GONE.kind,
                "metadata": {"name": GONE.name, "namespace": GONE.namespace, "uid": GONE.uid},
            }
        )
    )
    path = log_path("resnet-old-worker-0", "tensorflow")
    (where / path).parent.mkdir(parents=True, exist_ok=True)
    (where / path).write_text(LOG_TEXT)
    (where / INDEX).write_text(
        json.dumps(
            {
                "format": 1,
                **GONE.as_dict(),
                "archivedAt": time.time(),
                "stage": "job",
                "logs": [
                    {
                        "pod": "resnet-old-worker-0",
                        "container": "tensorflow",
                        "previous": False,
                        "path": path,
                        "bytes": len(LOG_TEXT),
                    }
                ],
            }
        )
    )
    return root


@pytest.fixture
def settings_env(redis_server, kube, archive_dir, tmp_path) -> dict[str, str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"archive": {"store": str(archive_dir)}}))
    return {
        "JOBTTL_REDIS_URL": redis_server.url,
        "JOBTTL_QUEUE": f"test-{uuid.uuid4().hex[:12]}",
        "KUBECONFIG": str(kube.kubeconfig),
        "JOBTTL_POLICY": str(policy),
    }


def book(shared: graph.Graph, namespace: str, name: str, ttl: int, finished_ago: float = 0) -> dict:
    obj = with_server_fields(tfjob(name, namespace, ttl=ttl))
    obj["status"] = finished_status(time.time() - finished_ago)
    shared.reconciler.reconcile(obj, TFJOB, "event")
    return obj


@pytest.fixture
def seeded(settings_env):
    """Pending deletions in two namespaces, one deletion in the history, and the graph that booked them."""
    shared = graph.build(Settings.from_env(settings_env), redisconn.CLI, metrics=False)
    shared.redis.flushdb()  # the due index is the Redis's, not a queue's: this test's alone (a test process runs one test at a time)
    book(shared, "team-a", "mnist", ttl=2 * 3600)
    book(shared, "team-a", "bert", ttl=30 * 3600)
    book(shared, "team-b", "gpt-small", ttl=3 * 86400)
    shared.audit.record(
        "deleted", GONE, by="worker", ttl=3600, ttlSource="policy", rules=["training-jobs"], lateness=0.4
    )
    # An entry with neither TTL nor lateness (an operator's), as most of the trail is.
    shared.audit.record("retry", GONE, jobId="j-1", by="operator")
    return shared
