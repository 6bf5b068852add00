"""TLS to Redis: ``rediss://`` (and ``rediss+sentinel://``) verified with JOBTTL_REDIS_CA_FILE.

A real redis-server with only a TLS port, certificates made by the test (a CA of its own and
a server certificate for 127.0.0.1); the sink and the worker run as processes against it. A CA
that did not sign the server's certificate stops each process at start with exit 2 and a
message naming both settings, not a traceback and not a sink answering 503 for ever.
"""

from __future__ import annotations

import subprocess
import time
import sys

import pytest

from tests.e2e.conftest import Cluster, stack_environment
from tests.services import ROOT, JobttlProcess, RedisSentinels, TLSRedisServer, free_port, start_sink, tls_files
from jobttl.core.store import redisconn


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    return {"good": tls_files(directory / "good"), "other": tls_files(directory / "other", "another CA")}


@pytest.fixture(scope="module")
def tls_redis(certificates):
    server = TLSRedisServer(certificates["good"]).start()
    yield server
    server.stop()


def run_jobttl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobttl", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_sink_and_the_worker_work_over_tls(tls_redis, certificates, emulator, log_dir):
    env = stack_environment(tls_redis, emulator, "tls", free_port(), JOBTTL_REDIS_CA_FILE=certificates["good"]["ca"])
    sink, sink_url = start_sink(env, log_dir)
    worker = JobttlProcess(["worker"], env, log_dir, "worker-tls").start()
    try:
        redis = redisconn.connect(tls_redis.url, redisconn.CLI, env["JOBTTL_REDIS_CA_FILE"])
        cluster = Cluster(emulator, sink_url, redis)
        obj = cluster.create_finished("over-tls", ttl=1, finished_at=time.time())
        response = cluster.event("update", obj)
        assert response.status_code == 202, response.text
        cluster.wait_gone("over-tls", timeout=15)
        assert len(cluster.deletes()) == 1
    finally:
        worker.stop()
        sink.stop()
    assert "Traceback" not in worker.log()


def assert_refused_at_start(result: subprocess.CompletedProcess, *named: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    for text in named:
        assert text in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("command", [["sink", "--host", "127.0.0.1", "--port", "0"], ["worker"], ["status"]])
def test_a_ca_that_did_not_sign_the_certificate_stops_each_process_at_start(command, tls_redis, certificates, emulator):
    env = {**stack_environment(tls_redis, emulator, "tls", 0), "JOBTTL_REDIS_CA_FILE": certificates["other"]["ca"]}
    result = run_jobttl(env, *command)
    assert_refused_at_start(result, "JOBTTL_REDIS_URL", "JOBTTL_REDIS_CA_FILE", "certificate verify failed")


def test_sentinel_over_tls_finds_the_primary_and_refuses_a_wrong_ca(certificates, emulator, tmp_path):
    sentinels = RedisSentinels(tmp_path / "redis", replicas=0, sentinels=1, tls=certificates["good"]).start()
    try:
        env = stack_environment(sentinels, emulator, "tls-sentinel", 0, JOBTTL_REDIS_CA_FILE=certificates["good"]["ca"])
        assert sentinels.url.startswith("rediss+sentinel://")
        result = run_jobttl(env, "status", "--force", "--json")
        assert result.returncode == 0, result.stderr[-2000:]
        wrong = run_jobttl({**env, "JOBTTL_REDIS_CA_FILE": certificates["other"]["ca"]}, "status", "--force")
        assert_refused_at_start(wrong, "JOBTTL_REDIS_URL", "JOBTTL_REDIS_CA_FILE", "certificate verify failed")
    finally:
        sentinels.stop()
