import os
import uuid

import pytest

from tests.services import RedisServer

# Every jobttl process a test starts (and `Settings.from_env()`) sees a cluster whose first-run
# review is done, as on any cluster that has run jobttl before: the tests of other behaviour
# delete old finished jobs at once. tests/e2e/test_first_run.py turns the review on, as shipped.
os.environ.setdefault("JOBTTL_FIRST_RUN_REVIEW", "off")


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


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """A test that runs `jobttl.cli.main` in this process configures the process's logging (the
    root logger's one JSON handler): undone after it, so that later tests' lines go where pytest
    puts them, and nothing of one test writes into another's captured output."""
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
