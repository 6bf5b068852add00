"""Serve the sink with gunicorn, configured from code rather than a config file.

One process with several threads: handling an event is a few Redis round trips, and a
single process keeps the Prometheus counters in one place.
"""

from __future__ import annotations

from gunicorn.app.base import BaseApplication

from jobttl.config import Settings
from sink.app import create_app


class _Gunicorn(BaseApplication):
    def __init__(self, app, options: dict):
        self.application = app
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self):
        return self.application


def serve(settings: Settings, host: str, port: int, threads: int = 8) -> None:
    app = create_app(settings)
    _Gunicorn(
        app,
        {
            "bind": f"{host}:{port}",
            "workers": 1,
            "worker_class": "gthread",
            "threads": threads,
            "timeout": 30,
            "graceful_timeout": 20,
            "accesslog": None,
            "loglevel": settings.log_level.lower(),
        },
    ).run()
