import uuid

import pytest

from tests.services import RedisServer


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def redis(redis_server):
    return redis_server.client()


@pytest.fixture
def queue_name():
    """A queue of its own per test, so tests sharing one Redis never see each other's jobs."""
    return f"test-{uuid.uuid4().hex[:12]}"
