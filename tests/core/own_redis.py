"""A Redis of a test module's own, emptied before each test: for modules whose keys are global
(the pending index, the dry-run sets, the guard's window and held set are one per Redis,
whatever the queue). A module takes them with `from tests.core.own_redis import redis, server`."""

from __future__ import annotations

import uuid

import pytest

from jobttl.core.domain.wire.identity import JobRef
from tests.services import RedisServer


@pytest.fixture(scope="module")
def server():
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def redis(server):
    client = server.client()
    client.flushall()
    return client


@pytest.fixture
def ref():
    """A TFJob of a namespace of its own."""
    return JobRef("kubeflow.org/v1", "TFJob", f"team-{uuid.uuid4().hex[:6]}", "train", str(uuid.uuid4()))
