"""The sink's Flask app factory: wiring only (settings, the sink's services, blueprints)."""

from __future__ import annotations

from pathlib import Path

from flask import Flask
from redis import Redis

from jobttl.core.runtime.config import Settings
from jobttl.core.kube.client import KubeClient
from jobttl.sink import api, receive
from jobttl.sink.context import SinkContext


def create_app(
    settings: Settings | None = None, *, redis: Redis | None = None, kube: KubeClient | None = None
) -> Flask:
    """Dependencies may be passed in (tests); otherwise they come from `settings`."""
    settings = settings or Settings.from_env()
    # The instance folder named (never used): Flask looks for it through the package's namespace,
    # which from an editable install (jobttl.sink in sink/, not under jobttl/) it cannot find.
    app = Flask("jobttl.sink", instance_path=str(Path(__file__).resolve().parent / "instance"))
    app.config["MAX_CONTENT_LENGTH"] = settings.max_event_bytes
    app.extensions["jobttl"] = SinkContext.build(settings, redis=redis, kube=kube)
    app.register_blueprint(receive.blueprint)
    if settings.read_api == "on":
        app.register_blueprint(api.blueprint)
    app.register_error_handler(Exception, receive.unexpected)
    return app
