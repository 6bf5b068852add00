"""Connecting to Redis (jobttl.core.store.redisconn): URLs, the placeholder password, checks at start,
Sentinel-managed connections that RQ can rebuild, and writes that wait for a replica.

URL reading is pure; everything else runs against real redis-server processes (and a real
Sentinel where one is named).
"""

from __future__ import annotations

import functools
import pickle
import re
import signal
import time

import pytest
import yaml
from redis import ConnectionPool
from rq.connections import parse_connection

from jobttl.cli import main
from jobttl.core.store import redisconn
from jobttl.core.runtime.config import PLACEHOLDER_REDIS_PASSWORD, ConfigError, Settings
from jobttl.core.store.redisconn import NotReplicated
from jobttl.core.runtime.redisurl import SentinelAddress
from tests.services import ROOT, RedisSentinels, RedisServer, free_port, wait_for


# --- reading URLs -------------------------------------------------------------------------------


def test_a_sentinel_url_names_its_sentinels_master_set_database_and_passwords():
    address = SentinelAddress.parse(
        "rediss+sentinel://app:p%40ss@s1:26380,s2,[fd00::1]:26381/jobttl/2?sentinel_password=s%2Bp"
    )
    assert address == SentinelAddress(
        (("s1", 26380), ("s2", 26379), ("fd00::1", 26381)),
        "jobttl",
        2,
        tls=True,
        username="app",
        password="p@ss",
        sentinel_password="s+p",
    )
    assert SentinelAddress.parse("redis+sentinel://s1/jobttl") == SentinelAddress(
        (("s1", 26379),), "jobttl", 0, tls=False
    )


@pytest.mark.parametrize(
    "url, complaint",
    [
        ("redis+sentinel://s1:26379", "name the master set"),
        ("redis+sentinel://s1:26379/jobttl/zero", "database must be a number"),
        ("redis+sentinel://s1:26379/jobttl/0/extra", "name the master set"),
        ("redis+sentinel://s1:port/jobttl", "is not HOST[:PORT]"),
        ("redis+sentinel://s1,,s2/jobttl", "is not HOST[:PORT]"),
        ("redis+sentinel://s1/jobttl?master=x", "unknown option master"),
    ],
)
def test_a_malformed_sentinel_url_stops_the_process_naming_the_setting(url, complaint):
    with pytest.raises(ConfigError, match=f"JOBTTL_REDIS_URL: .*{re.escape(complaint)}"):
        Settings.from_env({"JOBTTL_REDIS_URL": url})


def test_messages_never_show_a_password():
    assert redisconn.redacted("rediss://:hunter2@redis:6380/0") == "rediss://:***@redis:6380/0"
    assert (
        redisconn.redacted("redis+sentinel://app:hunter2@s1,s2/jobttl?sentinel_password=hunter3")
        == "redis+sentinel://app:***@s1,s2/jobttl?sentinel_password=***"
    )
    assert redisconn.redacted("redis://redis:6379/0") == "redis://redis:6379/0"


# --- the placeholder password and the CA file ---------------------------------------------------


def test_the_placeholder_is_the_password_the_manifests_ship():
    secret = next(
        doc for doc in yaml.safe_load_all((ROOT / "knative/base/redis.yaml").read_text()) if doc["kind"] == "Secret"
    )
    assert secret["stringData"]["password"] == PLACEHOLDER_REDIS_PASSWORD


@pytest.mark.parametrize("command", [["sink"], ["worker"], ["resync"], ["status"]])
@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{PLACEHOLDER_REDIS_PASSWORD}@jobttl-redis:6379/0",
        f"redis+sentinel://:{PLACEHOLDER_REDIS_PASSWORD}@jobttl-redis:26379/jobttl/0",
    ],
)
def test_every_process_refuses_the_shipped_placeholder_password(command, url, monkeypatch, capsys):
    monkeypatch.setenv("JOBTTL_REDIS_URL", url)
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "JOBTTL_REDIS_URL" in err and "placeholder password" in err and "set a real password" in err


def test_a_ca_file_must_be_a_readable_bundle_for_a_tls_url(tmp_path):
    with pytest.raises(ConfigError, match="JOBTTL_REDIS_CA_FILE: no such file"):
        Settings.from_env({"JOBTTL_REDIS_URL": "rediss://redis:6380/0", "JOBTTL_REDIS_CA_FILE": str(tmp_path / "x")})
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="JOBTTL_REDIS_CA_FILE: .* not a readable PEM CA bundle"):
        Settings.from_env(
            {"JOBTTL_REDIS_URL": "rediss://redis:6380/0", "JOBTTL_REDIS_CA_FILE": str(tmp_path / "junk.pem")}
        )


def test_a_ca_file_without_tls_is_refused_rather_than_silently_unused():
    import certifi

    with pytest.raises(ConfigError, match="JOBTTL_REDIS_CA_FILE is set but JOBTTL_REDIS_URL does not use TLS"):
        Settings.from_env({"JOBTTL_REDIS_URL": "redis://redis:6379/0", "JOBTTL_REDIS_CA_FILE": certifi.where()})


# --- checks at start ----------------------------------------------------------------------------


@pytest.fixture
def private_redis():
    """A redis-server of this test's own, to reconfigure freely."""
    server = RedisServer().start()
    yield server
    server.stop()


def test_a_refused_password_stops_the_process_at_start_naming_the_url(private_redis):
    private_redis.client().config_set("requirepass", "right")
    url = f"redis://:wrong@127.0.0.1:{private_redis.port}/0"
    with pytest.raises(ConfigError, match=r"JOBTTL_REDIS_URL \(redis://:\*\*\*@.*\): Redis refused the credentials"):
        redisconn.connect(url, redisconn.SINK)
    assert redisconn.connect(f"redis://:right@127.0.0.1:{private_redis.port}/0", redisconn.SINK).ping()


def test_an_unreachable_redis_is_an_outage_to_ride_out_not_a_configuration_error():
    started = time.monotonic()
    client = redisconn.connect(f"redis://127.0.0.1:{free_port()}/0", redisconn.SINK)
    assert time.monotonic() - started < 3
    assert client is not None


# --- Sentinel: connections RQ can rebuild, that follow the primary -------------------------------


def test_rqs_scheduler_child_rebuilds_a_client_that_finds_the_primary_through_the_sentinels():
    client = redisconn.client("redis+sentinel://:pw@s1:26380,s2/jobttl/3", redisconn.WORKER)
    redis_class, connection_class, kwargs = parse_connection(client)  # what RQ's scheduler keeps for its child
    plain = {k: v for k, v in kwargs.items() if k != "retry"}
    assert pickle.loads(pickle.dumps(plain)) == plain, "plain values only: no live pool, no Sentinel object"  # noqa: S301 - its own bytes
    rebuilt = redis_class(connection_pool=ConnectionPool(connection_class=connection_class, **kwargs))
    connection = rebuilt.connection_pool.make_connection()
    assert isinstance(connection, redisconn.SentinelPrimaryConnection)
    assert connection.primary.sentinel.sentinels[0].connection_pool.connection_kwargs["port"] == 26380
    assert (connection.primary.master_set, connection.db, connection.password) == ("jobttl", 3, "pw")


def forced_failover(sentinels: RedisSentinels) -> tuple[int, int]:
    """Have the Sentinel promote the replica while the primary stays up; return (old, new) ports."""
    old = sentinels.primary_port()
    sentinel = sentinels.client(sentinels.sentinel_ports[0])
    # NOGOODSLAVE until the Sentinel has pinged the replica it learnt of from the primary.
    wait_for(
        lambda: sentinel.execute_command("SENTINEL", "FAILOVER", sentinels.MASTER_SET),
        timeout=10,
        what="the Sentinel to accept a forced failover",
    )
    wait_for(lambda: sentinels.primary_port() != old, timeout=15, what="the forced failover")
    return old, sentinels.primary_port()


def test_a_former_primary_still_taking_writes_is_left_within_a_second(tmp_path):
    """The Sentinels demote the old primary only ~10 s later: writes it takes meanwhile are lost."""
    sentinels = RedisSentinels(tmp_path, replicas=1, sentinels=1).start()
    try:
        client = redisconn.connect(sentinels.url, redisconn.SINK)
        client.set("before", 1)  # a pooled connection to the primary
        old, new = forced_failover(sentinels)
        assert sentinels.client(old).info("replication")["role"] == "master", "not demoted yet"
        wait_for(
            lambda: client.incr("after") and sentinels.client(new).get("after"),
            timeout=redisconn.RECHECK_SECONDS + 3,
            what="writes to reach the new primary",
        )
        assert sentinels.client(old).info("replication")["role"] == "master", "left before the demotion"
    finally:
        sentinels.stop()


def test_a_demoted_primary_is_left_for_the_new_one_within_the_same_call(tmp_path):
    """A forced failover keeps the old primary alive as a replica: writes to it fail READONLY."""
    sentinels = RedisSentinels(tmp_path, replicas=1, sentinels=1).start()
    try:
        client = redisconn.connect(sentinels.url, redisconn.WORKER)
        client.set("before", 1)
        old, new = forced_failover(sentinels)
        # What the Sentinel does a few seconds later on its own: the old primary follows the new one.
        sentinels.client(old).replicaof("127.0.0.1", new)
        assert client.set("after", 1)  # on the connection to the old primary: READONLY, then the new one
        assert sentinels.client(new).get("after") == b"1"
    finally:
        sentinels.stop()


# --- writes that wait for a replica ---------------------------------------------------------------


@pytest.fixture
def primary_and_replica():
    primary, replica = RedisServer().start(), RedisServer().start()
    primary.client().config_set("repl-diskless-sync-delay", 0)  # sync at once, not after 5 s
    replica.client().replicaof("127.0.0.1", primary.port)
    wait_for(lambda: replica.client().info("replication")["master_link_status"] == "up", what="the replica")
    yield primary, replica
    for server in (replica, primary):
        if server.process is not None and server.process.poll() is None:
            server.process.send_signal(signal.SIGCONT)
        server.stop()


def test_a_write_returns_once_a_replica_has_it_and_fails_when_none_acknowledges(primary_and_replica):
    primary, replica = primary_and_replica
    client = redisconn.connect(primary.url, redisconn.SINK, min_replicas=1)
    client.set("k", "v")
    with client.pipeline() as pipe:
        pipe.multi()
        pipe.incr("n")
        pipe.execute()
    assert replica.client().get("k") == b"v" and replica.client().get("n") == b"1"

    replica.process.send_signal(signal.SIGSTOP)  # connected, but acknowledging nothing
    started = time.monotonic()
    with pytest.raises(NotReplicated, match="reached 0 of 1 Redis replicas"):
        client.set("k", "w")
    assert time.monotonic() - started < redisconn.REPLICA_WAIT_MS / 1000 + 1
    with pytest.raises(NotReplicated):
        client.pipeline(transaction=False).zadd("z", {"m": 1}).execute()
    assert client.get("k") == b"w", "reads do not wait (and the primary has the write: a retry is idempotent)"
    replica.process.send_signal(signal.SIGCONT)
    client.set("k", "x")


def test_without_min_replicas_the_sink_does_not_wait(redis_server):
    client = redisconn.connect(redis_server.url, redisconn.SINK)
    assert type(client).__name__ == "Redis"
    client.set("no-wait", 1)  # no replica, no NotReplicated


# --- the redis-py internals jobttl overrides ------------------------------------------------------


def test_the_redis_py_internals_that_replicated_writes_override_keep_their_shape():
    """ReplicatedRedis and ReplicatedPipeline hook private methods (redis-py has no public hook that
    gives the connection a command or a pipeline just ran on, and WAIT must run on that one):
    if redis-py renames them, changes their arguments or stops calling them, writes would
    silently stop waiting for replicas."""
    import redis
    from redis import Redis
    from redis.client import Pipeline

    from tests.internals import parameters, recheck, source

    where = "ReplicatedRedis and ReplicatedPipeline in core/store/redisconn.py"
    failed = functools.partial(recheck, "redis-py", redis.__version__, where=where)
    assert parameters(Redis, "_send_command_parse_response") == ["self", "conn", "command_name", "args", "options"], (
        failed("Redis._send_command_parse_response's arguments")
    )
    assert "self._send_command_parse_response(" in source(Redis, "_execute_command"), failed(
        "how Redis._execute_command sends a command"
    )
    for name in ("_execute_transaction", "_execute_pipeline"):
        assert parameters(Pipeline, name) == ["self", "connection", "commands", "raise_on_error"], failed(
            f"Pipeline.{name}'s arguments"
        )
        assert f"self.{name}" in source(Pipeline, "execute"), failed(f"whether Pipeline.execute calls {name}")
    assert "self.command_stack.append((args, options))" in source(Pipeline, "pipeline_execute_command"), failed(
        "the shape of a pipeline's queued commands"
    )
    assert parameters(Pipeline, "__init__") == [
        "self",
        "connection_pool",
        "response_callbacks",
        "transaction",
        "shard_hint",
    ], failed("Pipeline's constructor")


def test_the_redis_py_internals_that_sentinel_connections_override_keep_their_shape():
    """SentinelPrimaryConnection asks the Sentinels in connect_check_health, which every
    (re)connect goes through, and tests `_sock` for an open connection."""
    import redis
    from redis.connection import Connection

    from tests.internals import parameters, recheck, source

    failed = functools.partial(
        recheck, "redis-py", redis.__version__, where="SentinelPrimaryConnection in core/store/redisconn.py"
    )
    assert parameters(Connection, "connect_check_health") == ["self", "check_health", "retry_socket_connect"], failed(
        "Connection.connect_check_health's arguments"
    )
    for caller in ("connect", "send_packed_command"):
        assert "self.connect_check_health(" in source(Connection, caller), failed(
            f"whether Connection.{caller} connects through it"
        )
    assert "self._sock = None" in source(Connection, "__init__") + source(Connection, "disconnect"), failed(
        "how a connection records that it is closed (`_sock`)"
    )
    assert (parameters(Connection, "read_response") or [])[:2] == ["self", "disable_decoding"], failed(
        "Connection.read_response's arguments"
    )
