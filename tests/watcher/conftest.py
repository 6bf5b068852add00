"""The watcher runs against a stack like the e2e one (its fixtures imported, not copied).

Imported here, the fixtures start a stack of their own when both folders run in one
session, so it gets a queue and a worker metrics port of its own.
"""

import pytest

from tests.e2e.conftest import cluster, emulator, log_dir, sink_url, stack_environment, worker  # noqa: F401
from tests.services import free_port

QUEUE = "watcher"
WORKER_METRICS_PORT = free_port()


@pytest.fixture(scope="session")
def stack_env(redis_server, emulator) -> dict[str, str]:  # overrides the e2e stack's
    return stack_environment(redis_server, emulator, QUEUE, WORKER_METRICS_PORT)
