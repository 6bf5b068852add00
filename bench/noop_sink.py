"""The sink rows' baseline: a Flask app that answers every event 202 and does nothing else,
served exactly as the jobttl sink is served.

It calls jobttl's own `jobttl.sink.server.serve` (the same waitress call, with the same
connection limit, channel timeout, body cap, poll loop and thread count as `jobttl sink`'s
default) with jobttl's app swapped for this one: a benchmark may do that, the product's
settings are then used as they are rather than copied.

    python -m bench.noop_sink --port PORT
"""

from __future__ import annotations

import argparse

from flask import Flask, Response, request

from jobttl.cli import build_parser
from jobttl.core.runtime.config import Settings
from jobttl.sink import server


def noop_app() -> Flask:
    app = Flask("noop-sink")

    @app.post("/")
    def receive() -> Response:
        request.get_data()  # what any sink must do with the event
        return Response(status=202)

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    threads = build_parser().parse_args(["sink"]).threads  # `jobttl sink`'s default
    app = noop_app()
    server.create_app = lambda settings: app
    server.serve(Settings(), host="127.0.0.1", port=args.port, threads=threads)


if __name__ == "__main__":
    main()
