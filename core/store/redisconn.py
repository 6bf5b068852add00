"""Connecting to Redis, the same way in every jobttl process.

``JOBTTL_REDIS_URL`` names a single server (``redis://``, ``rediss://`` with TLS,
``unix://``) or a Sentinel-managed primary::

    redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_SET[/DB][?sentinel_password=...]

(``rediss+sentinel://`` when the Sentinels and the data nodes speak TLS; Sentinels listen on
26379 unless a port is given; the password is the data nodes', ``sentinel_password`` the
Sentinels' own when they have ``requirepass``). Each process asks for the client that suits
its role:

- the sink answers events: short timeouts, so a dead Redis becomes a fast 503 (which event
  sources retry) rather than a hung request;
- the worker rides through outages: its client retries refused connections for ~20 s
  (redis-py's retry, inherited by RQ's scheduler child), because RQ exits a worker whose
  Redis fails mid-job, and a restarted worker waits out RQ's 61 s scheduler lock;
- probes answer within a kubelet's timeout; the command line waits a little longer.

A Redis that can never work with these settings (a TLS certificate the CA file does not
vouch for, a refused password) stops the process at start with a `ConfigError` naming the
settings; an unreachable one does not, since every process rides out outages.
"""

from __future__ import annotations

import functools
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlparse

from redis import ConnectionPool, Redis
from redis.backoff import ConstantBackoff, NoBackoff
from redis.client import Pipeline
from redis.connection import Connection, SSLConnection
from redis.exceptions import ConnectionError, ReadOnlyError, RedisError
from redis.retry import Retry
from redis.sentinel import Sentinel

from jobttl.core.runtime.config import ConfigError
from jobttl.core.runtime.redisurl import SentinelAddress


@dataclass(frozen=True)
class Role:
    connect_timeout: float
    socket_timeout: float
    retries: int  # attempts after the first, one second apart


SINK = Role(connect_timeout=2, socket_timeout=5, retries=1)
WORKER = Role(connect_timeout=5, socket_timeout=15, retries=20)
PROBE = Role(connect_timeout=1, socket_timeout=1, retries=0)
CLI = Role(connect_timeout=5, socket_timeout=30, retries=2)

RECHECK_SECONDS = 1.0  # how stale a process's answer from the Sentinels may be when a connection is reused
REPLICA_WAIT_MS = 1000  # how long a write waits for its replicas (min_replicas) before it counts as failed


def connect(url: str, role: Role = CLI, ca_file: str | None = None, *, min_replicas: int = 0) -> Redis:
    """The client for `role`, after making sure these settings can work at all (see the module's doc).

    With `min_replicas`, every write returns only once that many replicas have it (Redis WAIT),
    and raises `NotReplicated` otherwise: see `ReplicatedRedis`.
    """
    check(url, ca_file)
    return client(url, role, ca_file, min_replicas=min_replicas)


def client(url: str, role: Role, ca_file: str | None = None, *, min_replicas: int = 0) -> Redis:
    """The client for `role`, unchecked: for a second client to a Redis already checked (the sink's probe)."""
    options = dict(
        socket_connect_timeout=role.connect_timeout,
        socket_timeout=role.socket_timeout,
        retry=Retry(ConstantBackoff(1), role.retries),
        health_check_interval=30,
    )
    scheme = urlparse(url).scheme
    if scheme.startswith("rediss") and ca_file:
        options.update(ssl_ca_certs=ca_file)
    if scheme.endswith("+sentinel"):
        pool = ConnectionPool(**pool_options(SentinelAddress.parse(url), role, ca_file), **options)
    else:
        pool = ConnectionPool.from_url(url, **options)
    if min_replicas:
        return ReplicatedRedis(connection_pool=pool, min_replicas=min_replicas)
    return Redis(connection_pool=pool)


# --- Sentinel -----------------------------------------------------------------------------------


def sentinel_options(address: SentinelAddress, role: Role, ca_file: str | None) -> dict:
    """How to talk to each Sentinel (a lookup is quick: the connect timeout bounds it all)."""
    options = dict(
        socket_connect_timeout=role.connect_timeout,
        socket_timeout=role.connect_timeout,
        password=address.sentinel_password,
    )
    if address.tls:
        options.update(ssl=True, ssl_ca_certs=ca_file)
    return options


def pool_options(address: SentinelAddress, role: Role, ca_file: str | None) -> dict:
    """ConnectionPool arguments: plain values only, so that a pool rebuilt from them (RQ's
    scheduler child does) reaches the same primary."""
    return dict(
        connection_class=SentinelPrimarySSLConnection if address.tls else SentinelPrimaryConnection,
        sentinels=address.sentinels,
        master_set=address.master_set,
        sentinel_options=tuple(sentinel_options(address, role, ca_file).items()),
        db=address.db,
        username=address.username,
        password=address.password,
    )


class _Primary:
    """The Sentinels of one master set, asked by each of a process's connections to it."""

    def __init__(self, sentinels: tuple[tuple[str, int], ...], master_set: str, options: tuple):
        # One attempt per Sentinel: an unreachable one is skipped for the next, not retried.
        self.sentinel = Sentinel(list(sentinels), sentinel_kwargs={**dict(options), "retry": Retry(NoBackoff(), 0)})
        self.master_set = master_set
        self.last: tuple[str, int] | None = None
        self.asked_at = 0.0

    def address(self) -> tuple[str, int]:
        """Where the Sentinels say the primary is now (MasterNotFoundError, a ConnectionError, if nowhere)."""
        self.asked_at = time.monotonic()
        self.last = self.sentinel.discover_master(self.master_set)
        return self.last

    def replaces(self, address: tuple[str, int]) -> bool:
        """Whether the Sentinels name another primary than `address` now (asked at most every RECHECK_SECONDS).

        A primary that lost the Sentinels' vote may still be up and taking writes until they
        demote it (seconds later, or never while it is cut off from them); whatever it
        acknowledges meanwhile is discarded when it resyncs from the new primary.
        """
        if time.monotonic() - self.asked_at >= RECHECK_SECONDS:
            try:
                self.address()
            except ConnectionError:
                pass  # no Sentinel answers: keep the connection that works
        return self.last is not None and self.last != address


@functools.lru_cache(maxsize=None)
def _primary(sentinels: tuple, master_set: str, options: tuple) -> _Primary:
    return _Primary(sentinels, master_set, options)


class SentinelPrimaryConnection(Connection):
    """A connection to whichever server the Sentinels name as the primary, asked at every (re)connect.

    Why not redis-py's `SentinelConnectionPool`: its connections find the primary through the
    pool object itself, which sits in the pool's kwargs; RQ's scheduler child rebuilds its
    client from those kwargs and the connection class (``rq.connections.parse_connection``),
    and so depends on a copy of the parent's pool. And when the primary dies mid-command
    (a worker's blocking dequeue), redis-py 8.1 reconnects every retry of that command to the
    dead address (``send_packed_command`` → ``connect_check_health`` skips the Sentinel
    lookup): measured, the command failed after 20 s of retries although a replica had been
    promoted after 3. This class takes plain values (the Sentinels' addresses, the master
    set), so any ConnectionPool built from them works, in any process, and it asks the
    Sentinels before each connection attempt. A connection taken from the pool is dropped if
    the Sentinels (asked at most once a second per process) now name another primary:
    SentinelConnectionPool notices only when a new connection happens to be made.
    """

    def __init__(self, *, sentinels: tuple, master_set: str, sentinel_options: tuple = (), **kwargs):
        self.primary = _primary(tuple(sentinels), master_set, tuple(sentinel_options))
        super().__init__(**kwargs)

    def connect(self):
        # Taken from the pool: a connection still open to a former primary is dropped.
        if self._sock is not None and self.primary.replaces((self.host, self.port)):
            self.disconnect()
        super().connect()

    def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True):
        if self._sock is not None:
            return

        def attempt():
            self.host, self.port = self.primary.address()
            super(SentinelPrimaryConnection, self).connect_check_health(check_health, retry_socket_connect=False)

        if retry_socket_connect:
            self.retry.call_with_retry(attempt, lambda error: self.disconnect())
        else:
            attempt()

    def read_response(self, *args, **kwargs):
        try:
            return super().read_response(*args, **kwargs)
        except ReadOnlyError:
            # The server was the primary and has been demoted: nothing was written; the retry
            # reconnects to the primary the Sentinels name now.
            self.disconnect()
            raise ConnectionError(
                f"{self.host}:{self.port} is no longer the primary of {self.primary.master_set!r}"
            ) from None


class SentinelPrimarySSLConnection(SentinelPrimaryConnection, SSLConnection):
    pass


# --- durability: writes acknowledged by replicas -------------------------------------------------


class NotReplicated(RedisError):
    """A write is on the primary but on fewer replicas than asked: answer 503, the sender retries."""


# Commands that never write; after any other command (or a pipeline holding one) the client waits.
READ_ONLY = frozenset(
    {
        "GET",
        "MGET",
        "STRLEN",
        "GETRANGE",
        "EXISTS",
        "TYPE",
        "TTL",
        "PTTL",
        "SCAN",
        "KEYS",
        "DBSIZE",
        "HGET",
        "HMGET",
        "HGETALL",
        "HEXISTS",
        "HLEN",
        "HKEYS",
        "HVALS",
        "HSCAN",
        "ZRANGE",
        "ZRANGEBYSCORE",
        "ZREVRANGE",
        "ZREVRANGEBYSCORE",
        "ZSCORE",
        "ZMSCORE",
        "ZCARD",
        "ZCOUNT",
        "ZRANK",
        "ZREVRANK",
        "ZSCAN",
        "LRANGE",
        "LLEN",
        "LINDEX",
        "LPOS",
        "SMEMBERS",
        "SISMEMBER",
        "SMISMEMBER",
        "SCARD",
        "SSCAN",
        "XRANGE",
        "XREVRANGE",
        "XLEN",
        "XINFO",
        "XREAD",
        "TIME",
        "PING",
        "ECHO",
        "INFO",
        "ROLE",
        "WAIT",
        "SCRIPT LOAD",
        "SCRIPT EXISTS",
        "EVALSHA_RO",
        "EVAL_RO",
        "CLIENT SETINFO",
        "CLIENT SETNAME",
        "SELECT",
        "AUTH",
        "HELLO",
        "WATCH",
        "UNWATCH",
        "COMMAND",
    }
)


def _writes(command_names) -> bool:
    return any(str(name).upper() not in READ_ONLY for name in command_names)


def _await_replicas(connection: Connection, wanted: int) -> None:
    """WAIT on the connection that wrote: replication offsets are per connection."""
    connection.send_command("WAIT", wanted, REPLICA_WAIT_MS)
    acknowledged = connection.read_response()
    if acknowledged < wanted:
        raise NotReplicated(
            f"the write reached {acknowledged} of {wanted} Redis replicas within "
            f"{REPLICA_WAIT_MS} ms (JOBTTL_SINK_MIN_REPLICAS)"
        )


class ReplicatedRedis(Redis):
    """A client whose writes return only once `min_replicas` replicas acknowledged them (Redis WAIT).

    Redis replicates asynchronously: a write the primary acknowledged just before it died may
    be missing from the replica the Sentinels promote. With this client the sink answers an
    event 2xx only once its writes are on a replica too, and 503 (the sender retries; the
    reconcile is idempotent) when they are not. It costs a round trip, and the replica's
    acknowledgement, per write. For the sink alone: RQ's scheduler child rebuilds a plain
    client from the pool (see `SentinelPrimaryConnection`).
    """

    def __init__(self, *args, min_replicas: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.min_replicas = min_replicas

    def _send_command_parse_response(self, conn, command_name, *args, **options):
        response = super()._send_command_parse_response(conn, command_name, *args, **options)
        if _writes([command_name]):
            _await_replicas(conn, self.min_replicas)
        return response

    def pipeline(self, transaction: bool = True, shard_hint=None) -> Pipeline:
        return ReplicatedPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint, min_replicas=self.min_replicas
        )


class ReplicatedPipeline(Pipeline):
    def __init__(self, *args, min_replicas: int):
        super().__init__(*args)
        self.min_replicas = min_replicas

    def _execute_transaction(self, connection, commands, raise_on_error):
        return self._awaited(connection, commands, super()._execute_transaction(connection, commands, raise_on_error))

    def _execute_pipeline(self, connection, commands, raise_on_error):
        return self._awaited(connection, commands, super()._execute_pipeline(connection, commands, raise_on_error))

    def _awaited(self, connection, commands, response):
        if _writes(args[0] for args, _ in commands):
            _await_replicas(connection, self.min_replicas)
        return response


# --- checks at start ----------------------------------------------------------------------------


def check(url: str, ca_file: str | None) -> None:
    """Raise ConfigError if this Redis can never be used with these settings; pass if merely unreachable.

    With Sentinel, each Sentinel is asked on its own first: redis-py's lookup reports only
    "no master found", without the reason each Sentinel failed.
    """
    probes = []
    if urlparse(url).scheme.endswith("+sentinel"):
        address = SentinelAddress.parse(url)
        options = {**sentinel_options(address, PROBE, ca_file), "retry": Retry(NoBackoff(), 0)}
        probes = [Redis(host, port, **options) for host, port in address.sentinels]
    for probe in [*probes, client(url, PROBE, ca_file)]:
        try:
            probe.ping()
        except RedisError as exc:
            _refuse_if_permanent(exc, url, ca_file)
        finally:
            probe.connection_pool.disconnect()


def _refuse_if_permanent(exc: RedisError, url: str, ca_file: str | None) -> None:
    problem = _permanent(exc)
    if problem == "certificate":
        raise ConfigError(
            f"JOBTTL_REDIS_URL ({redacted(url)}): the server's TLS certificate is not trusted "
            f"with JOBTTL_REDIS_CA_FILE={ca_file or '(unset: the system CAs)'}: {exc}"
        ) from None
    if problem == "password":
        raise ConfigError(f"JOBTTL_REDIS_URL ({redacted(url)}): Redis refused the credentials: {exc}") from None


def _permanent(exc: BaseException) -> str | None:
    """What no retry can fix in this failure: "certificate", "password", or None (an outage)."""
    chain, seen = [], exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(e) for e in chain)
    if any(isinstance(e, ssl.SSLCertVerificationError) for e in chain) or "certificate verify failed" in text:
        return "certificate"
    if any(
        marker in text
        for marker in (
            "WRONGPASS",
            "NOAUTH",
            "invalid password",
            "invalid username-password",
            "Authentication required",
            "without any password configured",
        )
    ):
        return "password"
    return None


def redacted(url: str) -> str:
    """The URL without its passwords, for messages and logs."""
    parsed = urlparse(url)
    netloc = parsed.netloc
    if "@" in netloc:
        credentials, _, hosts = netloc.rpartition("@")
        user = credentials.partition(":")[0]
        netloc = f"{user}:***@{hosts}" if ":" in credentials else f"***@{hosts}"
    query = "sentinel_password=***" if "sentinel_password" in parsed.query else parsed.query
    return parsed._replace(netloc=netloc, query=query).geturl()
