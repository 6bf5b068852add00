"""Serve the console with waitress, as the sink is served (jobttl.sink.server says why waitress)."""

from __future__ import annotations

import ipaddress
import logging

from waitress import serve as waitress_serve

from jobttl.core.runtime.config import ConfigError, Settings
from jobttl.console.app import create_app

log = logging.getLogger("jobttl.console")


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(settings: Settings, host: str, port: int, threads: int = 4) -> None:
    if settings.console_auth == "none" and not loopback(host):
        # Without sign-in anyone who reaches the port may keep, postpone and confirm deletions.
        raise ConfigError(
            f"JOBTTL_CONSOLE_AUTH=none signs nobody in: the console serves only a loopback address "
            f"then (--host 127.0.0.1), not {host}"
        )
    app = create_app(settings)
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    log.info(
        "console listening",
        extra={"event": "console-listening", "url": f"http://{host}:{port}/", "auth": settings.console_auth},
    )
    waitress_serve(
        app,
        host=host,
        port=port,
        threads=threads,
        connection_limit=200,
        channel_timeout=30,
        cleanup_interval=5,
        ident="jobttl-console",
        clear_untrusted_proxy_headers=True,
        asyncore_use_poll=True,
    )
