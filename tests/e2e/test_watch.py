"""`jobttl watch` feeds the sink the events ApiServerSource would, end to end."""

import time

import pytest

from tests.e2e.conftest import Cluster
from tests.services import JobttlProcess


@pytest.fixture(scope="module")
def watcher(stack_env, sink_url, log_dir):
    process = JobttlProcess(["watch", "--sink", sink_url], stack_env, log_dir, "watch").start()
    yield process
    process.stop()


def test_a_job_that_finishes_while_watched_is_deleted_after_its_ttl(cluster: Cluster, watcher, worker):
    cluster.create_running("watched", ttl=1, started=time.time())
    finished_at = int(time.time())
    from tests.fixtures import finished_status

    cluster.set_status("watched", finished_status(finished_at))
    cluster.wait_gone("watched", timeout=15)
    [delete] = cluster.deletes()
    assert delete["time"] >= finished_at + 1
