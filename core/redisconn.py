"""Connecting to Redis, the same way in every jobttl process.

``JOBTTL_REDIS_URL`` names a single server (``redis://``, ``rediss://`` with TLS,
``unix://``) or a Sentinel-managed primary (``redis+sentinel://`` or ``rediss+sentinel://``
``[:password@]host:port[,host:port...]/MASTER_SET[/DB]``). Each process asks for the
client that suits its role:

- the sink answers events: short timeouts, so a dead Redis becomes a fast 503 (which event
  sources retry) rather than a hung request;
- the worker rides through outages: its client retries refused connections for ~20 s
  (redis-py's retry, inherited by RQ's scheduler child), because RQ exits a worker whose
  Redis fails mid-job, and a restarted worker waits out RQ's 61 s scheduler lock;
- probes answer within a kubelet's timeout; the command line waits a little longer.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from redis import Redis
from redis.backoff import ConstantBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel


@dataclass(frozen=True)
class Role:
    connect_timeout: float
    socket_timeout: float
    retries: int  # attempts after the first, one second apart


SINK = Role(connect_timeout=2, socket_timeout=5, retries=1)
WORKER = Role(connect_timeout=5, socket_timeout=15, retries=20)
PROBE = Role(connect_timeout=1, socket_timeout=1, retries=0)
CLI = Role(connect_timeout=5, socket_timeout=30, retries=2)


def connect(url: str, role: Role = CLI, ca_file: str | None = None) -> Redis:
    options = dict(socket_connect_timeout=role.connect_timeout, socket_timeout=role.socket_timeout,
                   retry=Retry(ConstantBackoff(1), role.retries), health_check_interval=30)
    parsed = urlparse(url)
    tls = parsed.scheme.startswith("rediss")
    if tls and ca_file:
        options.update(ssl_ca_certs=ca_file)
    if parsed.scheme.endswith("+sentinel"):
        return _sentinel_primary(parsed, tls, options)
    return Redis.from_url(url, **options)


def _sentinel_primary(parsed, tls: bool, options: dict) -> Redis:
    hosts = []
    for part in parsed.netloc.rpartition("@")[2].split(","):
        host, _, port = part.rpartition(":")
        hosts.append((host or part, int(port or 26379)))
    path = [p for p in parsed.path.split("/") if p]
    if not path:
        raise ValueError("a redis+sentinel:// URL names the master set: redis+sentinel://HOST:PORT/MASTER_SET[/DB]")
    master, db = path[0], int(path[1]) if len(path) > 1 else 0
    password = unquote(parsed.password) if parsed.password else None
    connection = {**options, "ssl": True} if tls else options
    sentinel = Sentinel(hosts, sentinel_kwargs={k: v for k, v in connection.items() if k != "retry"},
                        password=password, db=db, **connection)
    return sentinel.master_for(master)
