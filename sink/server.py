"""Serve the sink with waitress, configured from code.

Why waitress: it reads each request completely on its event loop (its channels buffer the
headers and body) before handing it to an application thread, so a slow client that
trickles its body costs a socket, not a thread. Under gunicorn's gthread workers eight such
clients held every thread and no legitimate event was answered. A connection that stops
sending is dropped `CHANNEL_TIMEOUT` to `CHANNEL_TIMEOUT + CLEANUP_INTERVAL` seconds after its
last byte (waitress looks for idle connections every `CLEANUP_INTERVAL`; its default, 30 s,
doubled the bound). One that keeps trickling holds its socket, up to `CONNECTION_LIMIT` of them.
One process with several threads: handling an event is one to three Redis round trips, and
one process keeps the Prometheus counters in one place.
"""

from __future__ import annotations

import logging

from waitress import serve as waitress_serve

from jobttl.core.domain.kinds import cel as celexpr
from jobttl.core.runtime.config import Settings
from jobttl.sink.app import create_app

CONNECTION_LIMIT = 1000  # sockets, including slow ones; each costs a few KB, not a thread
CHANNEL_TIMEOUT = 30  # seconds a connection may stay silent before it is closed
CLEANUP_INTERVAL = 5  # how often waitress looks for such connections


def serve(settings: Settings, host: str, port: int, threads: int = 8) -> None:
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth" is noise here
    # CEL evaluations take at most a quarter of the threads (each up to ~0.4 s of CPU): however many
    # costly events arrive, the other threads answer /healthz, /readyz and ordinary events.
    celexpr.limit_evaluations(max(1, threads // 4))
    waitress_serve(
        create_app(settings),
        host=host,
        port=port,
        threads=threads,
        connection_limit=CONNECTION_LIMIT,
        channel_timeout=CHANNEL_TIMEOUT,
        cleanup_interval=CLEANUP_INTERVAL,
        # Waitress's own cap sits well above the app's, so an oversized body gets the sink's JSON
        # 413; only a body over twice the limit is cut off by waitress itself (a plain-text 413).
        max_request_body_size=2 * settings.max_event_bytes,
        ident="jobttl-sink",
        clear_untrusted_proxy_headers=True,
        asyncore_use_poll=True,
    )
