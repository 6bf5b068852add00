"""The sink's read-only JSON API: what is scheduled to be deleted, and what is known about one job.

The answers are those of `jobttl pending` and `jobttl show`, from the same code
(`jobttl.core.services.operations`), for dashboards and scripts that cannot reach Redis. Errors
are raised as HTTP exceptions so that the app's one error handler renders them as the
sink's usual JSON error (``{"error": ..., "code": ...}``). Described by `jobttl.sink.openapi`,
which ``GET /`` and ``GET /api/v1`` point at. Off with ``JOBTTL_READ_API=off``.
"""

from __future__ import annotations

import time

from flask import Blueprint, Response, current_app, jsonify, request
from redis.exceptions import RedisError
from werkzeug.datastructures import WWWAuthenticate
from werkzeug.exceptions import BadRequest, Conflict, Forbidden, NotFound, ServiceUnavailable, Unauthorized

from jobttl.core.services import operations
from jobttl.core.domain.wire.identity import InvalidIdentity
from jobttl.sink import auth
from jobttl.sink.openapi import DEFAULT_LIMIT, DOCUMENT, MAX_LIMIT, MAX_OFFSET

blueprint = Blueprint("api", __name__)


def _operations() -> operations.Operations:
    return current_app.extensions["jobttl"].operations()


def _whole_number(name: str, default: int, minimum: int, maximum: int | None = None) -> int:
    """Query parameter `name` as an integer, or a 400 naming it (never a 500 for bad input)."""
    raw = request.args.get(name)
    if raw is None:
        return default
    # str.isdigit alone would accept other scripts' digits; int() would accept "1_000" and " 1".
    try:
        value = int(raw) if raw.isascii() and raw.isdigit() else None
    except ValueError:  # more digits than int() converts
        value = None
    if value is None or value < minimum or (maximum is not None and value > maximum):
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
        raise BadRequest(f"query parameter {name}: expected a whole number {bounds}, got {raw!r}")
    return value


def _reader(verb: str, namespace: str | None = None, name: str | None = None) -> None:
    """The same right as writes (JOBTTL_READ_API_AUTH): 401 without a valid token, 403 without the right."""
    try:
        current_app.extensions["jobttl"].readers.check(request.headers.get("Authorization"), verb, namespace, name)
    except auth.Unauthenticated as exc:
        raise Unauthorized(str(exc), www_authenticate=WWWAuthenticate("Bearer", {"realm": "jobttl-read-api"})) from None
    except auth.Forbidden as exc:
        raise Forbidden(str(exc)) from None
    except auth.VerifierUnavailable as exc:
        raise ServiceUnavailable(str(exc)) from None


@blueprint.get("/api/v1/deletions")
def list_deletions() -> Response:
    _reader("list", request.args.get("namespace") or None)
    limit = _whole_number("limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    offset = _whole_number("offset", 0, 0, MAX_OFFSET)
    # An empty parameter (`?kind=`, as forms and scripts send it) filters nothing.
    items, total = _operations().pending(
        request.args.get("namespace") or None, request.args.get("kind") or None, offset, limit
    )
    now = time.time()
    return jsonify(items=[p.as_dict(now) for p in items], total=total, offset=offset, limit=limit)


@blueprint.get("/api/v1/deletions/<namespace>/<name>")
def get_deletion(namespace: str, name: str) -> Response:
    _reader("get", namespace, name)
    try:
        return jsonify(_operations().find(namespace, name, request.args.get("kind") or None))
    except operations.NotFound as exc:
        raise NotFound(str(exc)) from None
    except operations.Ambiguous as exc:
        raise Conflict(str(exc)) from None
    except InvalidIdentity as exc:
        raise BadRequest(str(exc)) from None


@blueprint.get("/")
@blueprint.get("/api/v1", strict_slashes=False)
def index() -> Response:
    """Where to look: a browser or `curl` pointed at the sink finds the document, not a 405."""
    return jsonify(
        name="jobttl",
        openapi="/openapi.json",
        paths=list(DOCUMENT["paths"]),
        events="POST / (CloudEvents)",
        metrics="/metrics",
    )


@blueprint.get("/openapi.json")
def openapi() -> Response:
    return jsonify(DOCUMENT)


@blueprint.errorhandler(RedisError)
def redis_unavailable(exc: RedisError) -> Response:
    return current_app.handle_http_exception(ServiceUnavailable(f"Redis is unavailable, retry later: {exc}"))
