"""Redis URLs read, without a Redis client: a ``redis+sentinel://`` URL's parts.

Pure, so that settings (`jobttl.core.runtime.config`) can check a URL at start without importing the
client, and `jobttl.core.store.redisconn` connects with what it says. The URL forms are in
`jobttl.core.store.redisconn`'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlparse

SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelAddress:
    """A ``redis+sentinel://`` URL, read."""

    sentinels: tuple[tuple[str, int], ...]
    master_set: str
    db: int
    tls: bool
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None

    @classmethod
    def parse(cls, url: str) -> SentinelAddress:
        """Read the URL, or raise ValueError saying what is wrong with it (without its password)."""
        parsed = urlparse(url)
        usage = "expected redis+sentinel://[:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_SET[/DB]"
        sentinels = tuple(_host_port(part, usage) for part in parsed.netloc.rpartition("@")[2].split(","))
        path = [unquote(p) for p in parsed.path.split("/") if p]
        if not path or len(path) > 2:
            raise ValueError(f"{usage}: name the master set (and at most a database number)")
        if len(path) == 2 and not path[1].isdigit():
            raise ValueError(f"{usage}: the database must be a number, got {path[1]!r}")
        query = parse_qs(parsed.query)
        unknown = set(query) - {"sentinel_password"}
        if unknown:
            raise ValueError(f"{usage}: unknown option {', '.join(sorted(unknown))} (only sentinel_password)")
        return cls(
            sentinels,
            path[0],
            int(path[1]) if len(path) == 2 else 0,
            parsed.scheme == "rediss+sentinel",
            unquote(parsed.username) if parsed.username else None,
            unquote(parsed.password) if parsed.password else None,
            query.get("sentinel_password", [None])[-1],
        )


def _host_port(text: str, usage: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not colon:
        host, port = text, str(SENTINEL_PORT)
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{usage}: {text!r} is not HOST[:PORT]")
    return host, int(port)
