"""The sink's own routes: receive a CloudEvent and reconcile; health, readiness and metrics.

Response codes follow Knative's delivery rules. ApiServerSource retries only 404, 413,
425, 429, 502, 503, 504 and transport errors (about 6 tries in 3 s), then drops the
event; a Broker also retries other 5xx, 408 and 409. So:

- accepted or deliberately ignored → 202 with an empty body (behind a Broker, a 2xx
  body that is not a CloudEvent is turned into a 502). The header ``X-Jobttl-Outcome``
  says what happened, for humans and tests.
- unreadable input → 400 / 413 / 415 with a JSON error naming the problem: retrying the
  same bytes cannot help. No sender token → 401; a sender not accepted → 403.
- Redis (or, in Reference mode, the API server) unreachable → 503, so the event is retried.

Nothing raised while handling a request escapes as a 500 without a JSON error and a log
line (`unexpected`), and nothing is written for input that was refused.
"""

from __future__ import annotations

import logging
import time

from flask import Blueprint, Response, current_app, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis.exceptions import RedisError
from werkzeug.exceptions import HTTPException

from jobttl.core.runtime import logs
from jobttl.core.domain.wire.apiserversource import PING_TYPE, ApiServerEvent, BadEvent, OtherEvent, parse
from jobttl.core.domain.kinds.cel import CelBusy
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.kube.client import NotServed, ObjectGone, PermanentApiError, TransientApiError, Undecodable
from jobttl.core.services.reconcile import UnreadableObject
from jobttl.core.store.capacity import Capacity, RedisFull, is_full_error
from jobttl.sink.auth import Forbidden, Unauthenticated, VerifierUnavailable
from jobttl.sink.context import SinkContext, Unavailable

log = logging.getLogger("jobttl.sink")
blueprint = Blueprint("receive", __name__)


def _context() -> SinkContext:
    return current_app.extensions["jobttl"]


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    response = jsonify({"error": message, "code": status})
    response.status_code = status
    response.headers.update(headers or {})
    return response


@blueprint.post("/")
def receive() -> Response:
    sink = _context()
    label = "invalid"
    try:
        claims = sink.senders.token(request.headers.get("Authorization"))
        try:
            body = request.get_data()
        except (ValueError, OSError) as exc:  # a broken chunked body, a client gone mid-body
            raise BadEvent(400, f"the request body could not be read: {exc}") from None
        event = parse(request.headers, body)
        sink.senders.source(event.source)
        if isinstance(event, OtherEvent):
            # Arbitrary senders choose `type`: keep it out of metric labels.
            label = "ping" if event.type == PING_TYPE else "other"
            outcome = _other(sink, event)
        else:
            label = event.action
            outcome = _handle(sink, event, claims.get("sub"))
    except BadEvent as exc:
        return _refused(sink, label, exc.status, exc.message)
    except Unauthenticated as exc:
        return _refused(sink, label, 401, str(exc), {"WWW-Authenticate": 'Bearer realm="jobttl-sink"'})
    except Forbidden as exc:
        return _refused(sink, label, 403, str(exc))
    except RedisError as exc:
        if is_full_error(exc):
            # Nothing of this event was booked: Knative delivers it again, and it is booked once
            # the worker's deletions (or an operator) have made room.
            return _unavailable(
                sink,
                label,
                "redis-full",
                str(exc) if isinstance(exc, RedisFull) else f"Redis is full and refuses writes ({exc}); retry later",
                retry_after=30,
            )
        return _unavailable(sink, label, "redis", f"Redis is unavailable, retry later: {exc}")
    except (Unavailable, VerifierUnavailable) as exc:
        return _unavailable(sink, label, "kubernetes", str(exc))
    except CelBusy as exc:  # costly CEL events may hold only some threads: the others stay free
        return _unavailable(sink, label, "cel", str(exc))
    sink.metrics.events.labels(label, outcome.split(":", 1)[0]).inc()
    return Response(status=202, headers={"X-Jobttl-Outcome": outcome})


def _refused(
    sink: SinkContext, label: str, status: int, message: str, headers: dict[str, str] | None = None
) -> Response:
    sink.metrics.events.labels(label, "rejected").inc()
    logs.record(log, "rejected", level=logging.WARNING, status=status, detail=message)
    return error(status, message, headers)


def _unavailable(sink: SinkContext, label: str, dependency: str, message: str, retry_after: int = 1) -> Response:
    sink.metrics.events.labels(label, "unavailable").inc()
    logs.record(log, "unavailable", level=logging.ERROR, dependency=dependency, detail=message)
    return error(503, message, {"Retry-After": str(retry_after)})


def _other(sink: SinkContext, event: OtherEvent) -> str:
    if event.type == PING_TYPE:
        # A Knative PingSource on a schedule: time for a resync (the workers run it).
        # At most one per JOBTTL_RESYNC_MIN_INTERVAL: one asked sooner is deferred, and a burst coalesced.
        return sink.schedule.request_resync_soon("ping").label
    return "ignored:other-event-type"


def _handle(sink: SinkContext, event: ApiServerEvent, sender: str | None) -> str:
    kind = sink.kinds.get(event.api_version, event.kind)
    if kind is None:
        return "ignored:kind-not-enabled"
    by = "event"
    if event.mode == "resource":
        if event.action == "delete":
            ref = JobRef(kind.api_version, kind.kind, event.namespace, event.name, event.uid)
            return sink.reconciler.forget(ref, "deleted", by).label
        return _reconcile(sink, event.object, kind, by)
    # Reference mode names the object but not its UID: the API server says what exists now
    # (for a delete event too: the name may already belong to a re-created object). Anything
    # else scheduled under that name belonged to an object that is gone.
    obj = _read(sink, kind, event)
    current = obj["metadata"].get("uid") if obj is not None else None
    outcome = "ignored:not-pending"
    for uid, decided in sink.audit.decisions(event.namespace, event.name).items():
        if uid != current and decided.get("kind", kind.kind) == kind.kind:
            ref = JobRef(kind.api_version, kind.kind, event.namespace, event.name, uid)
            forgotten = sink.reconciler.forget(ref, "deleted" if current is None else "recreated", by)
            outcome = forgotten.label if forgotten.label == "cancelled" else outcome
    if obj is None or event.action == "delete":
        return outcome
    return _reconcile(sink, obj, kind, by)


def _reconcile(sink: SinkContext, obj: dict, kind: JobKind, by: str) -> str:
    """The one reconcile path; an object whose fields its declaration cannot read (a condition's type
    that is an object, conditions that are a map) is refused, naming the field, and nothing is written."""
    try:
        return sink.reconciler.reconcile(obj, kind, by, refuse_unreadable=True).label
    except UnreadableObject as exc:
        raise BadEvent(422, f"the object cannot be decided, nothing was written: {exc}") from None


def _read(sink: SinkContext, kind: JobKind, event: ApiServerEvent) -> dict | None:
    try:
        return sink.kube.get(kind, event.namespace, event.name)
    except ObjectGone:
        return None
    except Undecodable as exc:
        raise BadEvent(422, f"the object the event names cannot be read: {exc}") from None
    except NotServed as exc:
        raise BadEvent(400, f"the API server does not serve what the event names: {exc}") from None
    except (TransientApiError, PermanentApiError) as exc:
        raise Unavailable(str(exc)) from exc


@blueprint.get("/healthz")
def healthz() -> Response:
    """Alive: checks nothing else, so a Redis outage never gets the sink restarted."""
    return jsonify(status="ok")


@blueprint.get("/readyz")
def readyz() -> Response:
    """Ready when Redis answers, and its clock agrees with ours: without Redis every event is a 503."""
    sink = _context()
    try:
        sent = time.time()
        seconds, micros = sink.probe.time()
    except RedisError as exc:
        return error(503, f"Redis is unavailable: {exc}")
    offset = seconds + micros / 1e6 - (sent + time.time()) / 2
    if abs(offset) > sink.settings.clock_skew_bound:
        return error(
            503, f"this host's clock is {-offset:+.1f}s off Redis's (bound {sink.settings.clock_skew_bound:g}s)"
        )
    # A full Redis: events would be answered 503 (jobttl.core.store.capacity), so take no traffic.
    try:
        capacity = Capacity.read(sink.probe)
    except RedisError as exc:
        return error(503, f"Redis is unavailable: {exc}")
    if capacity.full:
        return error(503, capacity.describe())
    return jsonify(status="ready", redisClockOffset=round(offset, 3))


@blueprint.get("/metrics")
def metrics() -> Response:
    return Response(generate_latest(_context().metrics.registry), content_type=CONTENT_TYPE_LATEST)


@blueprint.app_errorhandler(HTTPException)
def http_error(exc: HTTPException) -> Response:
    # 413 for oversized bodies, 404/405 for wrong paths: JSON like every other error, with
    # the exception's own headers (a 405's Allow, which RFC 9110 requires).
    response = error(exc.code or 500, exc.description or exc.name)
    response.headers.extend((k, v) for k, v in exc.get_headers() if k.lower() != "content-type")
    return response


def unexpected(exc: Exception) -> Response:
    """The one funnel for what nothing else handled: logged with its traceback, answered 500 JSON."""
    if isinstance(exc, HTTPException):
        return http_error(exc)
    if isinstance(exc, RedisError):
        return error(503, f"Redis is unavailable, retry later: {exc}", {"Retry-After": "1"})
    # Flask calls its error handlers inside its own `except`: the traceback is this exception's.
    log.exception(  # noqa: LOG004
        "unexpected error handling %s %s",
        request.method,
        request.path,
        extra={"event": "unexpected-error", "detail": str(exc)},
    )
    return error(500, "internal error; the sink's log has the details")
