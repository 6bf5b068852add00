"""The probe server the worker, the notifier and the watcher share: GET on a port, answered from
what the process says about itself (/metrics, /healthz, /readyz), on a daemon thread.

The standard library's `http.server` (the core serves no HTTP through a web framework: those are
the sink's and the console's). Each process routes the paths itself (`answer`); the server only
sends what `answer` returns, never logs a request (probes and scrapes are not news), and answers
each request on a thread of its own so a slow scrape never holds a probe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

JSON = "application/json"


class Answer(NamedTuple):
    status: int
    body: bytes
    content_type: str = JSON


OK = Answer(200, b'{"status": "ok"}')
NOT_FOUND = Answer(404, b'{"error": "not found", "code": 404}')


def metrics(registry: CollectorRegistry) -> Answer:
    """/metrics: the registry in Prometheus's text format."""
    return Answer(200, generate_latest(registry), CONTENT_TYPE_LATEST)


def serve(answer: Callable[[str], Answer], port: int, thread_name: str, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Serve GET on `host`:`port` (0: any free port, `server_address` says which), each answered by
    `answer(path)` (the request's path as sent, query included), from a daemon thread `thread_name`.
    A port taken raises OSError here, before any thread starts."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            status, body, content_type = answer(self.path)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:  # probes and scrapes are not news
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name=thread_name, daemon=True).start()
    return server
