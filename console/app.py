"""The console's Flask app factory: wiring only (settings, the context, the page blueprint, safety headers)."""

from __future__ import annotations

import datetime
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, Response, render_template, request
from redis import Redis
from werkzeug.exceptions import HTTPException

from jobttl.core.domain.wire.durations import format_duration
from jobttl.core.domain.kinds.registry import shown_kind
from jobttl.core.kube.access import Access
from jobttl.core.runtime.config import ConfigError, Settings
from jobttl.console import views
from jobttl.console.context import ConsoleContext

SESSION_HOURS = 8
# Nothing from elsewhere: the page's own script and style only, never in a frame, forms to itself.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)


def session_key(settings: Settings) -> bytes:
    """The key that signs session cookies: the file's (shared by replicas), else random per process."""
    path = settings.console_session_key_file
    if not path:
        return secrets.token_bytes(32)
    try:
        key = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"JOBTTL_CONSOLE_SESSION_KEY_FILE: cannot read {path}: {exc.strerror}") from None
    if len(key) < 32:
        raise ConfigError(
            f"JOBTTL_CONSOLE_SESSION_KEY_FILE: {path} holds {len(key)} bytes; a signing key needs at "
            "least 32 (e.g. `head -c 48 /dev/urandom | base64`)"
        )
    return key


def create_app(settings: Settings | None = None, *, redis: Redis | None = None, access: Access | None = None) -> Flask:
    """Dependencies may be passed in (tests); otherwise they come from `settings`."""
    settings = settings or Settings.from_env()
    # The instance folder named (never used), as the sink's is (jobttl.sink.app: Flask cannot find it
    # through the namespace from an editable install).
    here = Path(__file__).resolve().parent
    app = Flask(
        "jobttl.console",
        template_folder=str(here / "templates"),
        static_folder=str(here / "static"),
        instance_path=str(here / "instance"),
    )
    app.config.update(
        SECRET_KEY=session_key(settings),
        SESSION_COOKIE_NAME="jobttl-console",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        PERMANENT_SESSION_LIFETIME=datetime.timedelta(hours=SESSION_HOURS),
        MAX_CONTENT_LENGTH=64 * 1024,
    )
    if settings.console_url:
        # The address operators reach the console at: its origin is the pages' own (CSRF's Origin
        # check), and an https one keeps the session cookie off plain HTTP (Secure).
        public = urlsplit(settings.console_url)
        app.config.update(
            JOBTTL_PUBLIC_ORIGIN=f"{public.scheme}://{public.netloc}", SESSION_COOKIE_SECURE=public.scheme == "https"
        )
    app.extensions["jobttl"] = ConsoleContext.build(settings, redis=redis, access=access)
    app.register_blueprint(views.blueprint)
    app.jinja_env.filters.update(utc=_utc, when=_when, left=_left, duration=_duration, kind=_kind)
    app.jinja_env.autoescape = True

    @app.after_request
    def safety_headers(response: Response) -> Response:
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("X-Frame-Options", "DENY")
        if request.endpoint != "static":
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        if "text/html" not in request.headers.get("Accept", ""):
            response = Response(f"{exc.description}\n", status=exc.code or 500, mimetype="text/plain")
        else:
            response = Response(
                render_template("error.html", who=None, code=exc.code, name=exc.name, message=exc.description),
                status=exc.code or 500,
            )
        response.headers.extend((k, v) for k, v in exc.get_headers() if k.lower() != "content-type")
        return response

    return app


def _when(epoch: Any) -> str:
    if not isinstance(epoch, (int, float)) or isinstance(epoch, bool):
        return "-"
    return datetime.datetime.fromtimestamp(float(epoch), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _utc(epoch: float, fmt: str) -> str:
    return datetime.datetime.fromtimestamp(float(epoch), datetime.timezone.utc).strftime(fmt)


def _left(due: Any, now: float) -> str:
    if not isinstance(due, (int, float)) or isinstance(due, bool):
        return "-"
    seconds = float(due) - now
    if seconds < 0:
        return f"overdue {format_duration(-seconds)}"
    return f"in {format_duration(seconds)}"


def _duration(seconds: Any) -> str:
    ok = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
    return format_duration(seconds, exact=True) if ok else "-"


def _kind(item: dict) -> str:
    return shown_kind(item.get("apiVersion") or "", item.get("kind") or "") if item.get("kind") else "-"
