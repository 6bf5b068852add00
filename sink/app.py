"""The sink: a Flask app that turns ApiServerSource CloudEvents into pending deletions.

Response codes follow Knative's delivery rules. ApiServerSource retries only 404, 413,
425, 429, 502, 503, 504 and transport errors (about 6 tries in 3 s), then drops the
event; a Broker also retries other 5xx, 408 and 409. So:

- accepted or deliberately ignored → 202 with an empty body (behind a Broker, a 2xx
  body that is not a CloudEvent is turned into a 502). The header ``X-Jobttl-Outcome``
  says what happened, for humans and tests.
- unreadable input → 400 / 413 / 415 with a JSON error naming the problem: retrying the
  same bytes cannot help.
- Redis (or, in Reference mode, the API server) unreachable → 503, so the event is retried.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis import Redis
from redis.exceptions import LockError, RedisError
from werkzeug.exceptions import HTTPException

from jobttl import logs
from jobttl.config import Settings
from jobttl.metrics import Metrics
from sink import api
from sink.events import ApiServerEvent, BadEvent, OtherEvent, parse
from worker.decision import JobRef, Verdict, decide
from worker.kinds import JobKind, KindRegistry
from worker.kube import KubeClient, ObjectGone, PermanentApiError, TransientApiError, load_api_client
from worker import resync
from worker.audit import Audit
from worker.schedule import Change, Schedule

log = logging.getLogger("jobttl.sink")


# What a Knative PingSource sends; the sink treats it as "resync now".
PING_EVENT_TYPE = "dev.knative.sources.ping"


class Unavailable(Exception):
    """A dependency (Redis, the API server) is down: answer 503 so the sender retries."""


class Sink:
    """What the routes need: the schedule, the enabled kinds, and API access for Reference mode."""

    def __init__(self, settings: Settings, redis: Redis, kinds: KindRegistry, kube: KubeClient | None):
        self.settings = settings
        self.schedule = Schedule.from_settings(redis, settings)
        self.kinds = kinds
        self._kube = kube
        self.metrics = Metrics(redis)
        self.audit = Audit.from_settings(redis, settings, self.metrics)

    @property
    def kube(self) -> KubeClient:
        # Resource mode never needs the API, so the client is only loaded once needed.
        if self._kube is None:
            try:
                self._kube = KubeClient(load_api_client(self.settings.kubeconfig), self.settings.api_timeout,
                                        component="sink", metrics=self.metrics)
            except Exception as exc:  # any loader failure: no kubeconfig, no service account
                raise Unavailable(f"cannot load Kubernetes credentials for a Reference-mode event: {exc}") from exc
        return self._kube

    def handle_other(self, event: OtherEvent) -> str:
        if event.type == PING_EVENT_TYPE:
            # A Knative PingSource on a schedule: time for a resync (the workers run it).
            resync.request(self.schedule.queue)
            return "resync-requested"
        return "ignored:other-event-type"

    def handle(self, event: ApiServerEvent) -> str:
        kind = self.kinds.get(event.api_version, event.kind)
        if kind is None:
            return "ignored:kind-not-enabled"
        if event.mode == "resource":
            if event.action == "delete":
                return self._cancel(kind, event, {event.object["metadata"]["uid"]})
            return self._plan(kind, event.object)
        # Reference mode names the object but not its UID: the API server says what exists
        # now. Anything else scheduled under that name belonged to an object that is gone.
        obj = self._read(kind, event)
        named = self.schedule.uids_named(kind.api_version, kind.kind, event.namespace, event.name)
        current_uid = obj["metadata"]["uid"] if obj is not None else None
        outcome = self._cancel(kind, event, named - {current_uid})
        if obj is None or event.action == "delete":
            return outcome
        return self._plan(kind, obj)

    def _read(self, kind: JobKind, event: ApiServerEvent) -> dict[str, Any] | None:
        try:
            return self.kube.get(kind, event.namespace, event.name)
        except ObjectGone:
            return None
        except (TransientApiError, PermanentApiError) as exc:
            raise Unavailable(str(exc)) from exc

    def _cancel(self, kind: JobKind, event: ApiServerEvent, uids: set[str]) -> str:
        """Drop the pending deletions of objects that no longer exist."""
        cancelled = [uid for uid in uids if self.schedule.cancel(uid) is not None]
        for uid in cancelled:
            ref = JobRef(kind.api_version, kind.kind, event.namespace, event.name, uid)
            self.audit.record("cancelled", ref, logger=log, reason="deleted", by="event")
        return "cancelled" if cancelled else "ignored:not-pending"

    def _plan(self, kind: JobKind, obj: dict[str, Any]) -> str:
        ref = JobRef.of(obj)
        decision = decide(obj, kind, self.settings.policy)
        if decision.verdict is Verdict.EXPIRES:
            change = self.schedule.plan(ref, decision)
            if change is not Change.UNCHANGED:  # duplicates are the norm, not news
                self.audit.record(change.value, ref, logger=log, due=decision.expires_at, ttl=decision.ttl,
                                  ttlSource=decision.ttl_source, finishedAt=decision.finished_at,
                                  rules=list(decision.rules), dryRun=decision.dry_run, by="event")
            return change.value
        if decision.verdict is Verdict.INVALID_TTL:
            self.metrics.invalid_ttls.labels(kind.kind).inc()
            self.audit.record("skipped", ref, logging.WARNING, logger=log, reason="invalid-ttl", detail=decision.reason)
        # The object as it is now should not be deleted (its TTL was removed, say): an
        # earlier pending deletion no longer applies. The worker would skip it anyway.
        if self.schedule.cancel(ref.uid) is not None:
            self.audit.record("cancelled", ref, logger=log, reason=decision.verdict.value, detail=decision.reason,
                              by="event")
        return f"ignored:{decision.verdict.value}"


def _error(status: int, message: str) -> Response:
    response = jsonify({"error": message, "code": status})
    response.status_code = status
    return response


def create_app(settings: Settings | None = None, *, redis: Redis | None = None,
               kinds: KindRegistry | None = None, kube: KubeClient | None = None) -> Flask:
    """Application factory. Dependencies may be passed in; otherwise they come from `settings`."""
    settings = settings or Settings.from_env()
    probe = redis  # an injected client is probed as it is
    if redis is None:
        # Short timeouts: a sink stuck on a dead Redis should say 503 fast, not hang Knative.
        redis = Redis.from_url(settings.redis_url, socket_connect_timeout=2, socket_timeout=5)
        # Shorter still for /readyz, which must answer within the kubelet's probe timeout.
        probe = Redis.from_url(settings.redis_url, socket_connect_timeout=1, socket_timeout=1)
    sink = Sink(settings, redis, kinds or KindRegistry(settings.policy.kinds), kube)

    app = Flask("jobttl.sink")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_event_bytes
    app.extensions["jobttl"] = sink
    app.register_blueprint(api.blueprint)

    @app.post("/")
    def receive() -> Response:
        label = "invalid"
        try:
            event = parse(request.headers, request.get_data())
            if isinstance(event, OtherEvent):
                # Arbitrary senders choose `type`: keep it out of metric labels.
                label = "ping" if event.type == PING_EVENT_TYPE else "other"
                outcome = sink.handle_other(event)
            else:
                label = event.action
                outcome = sink.handle(event)
        except BadEvent as exc:
            sink.metrics.events.labels(label, "rejected").inc()
            logs.record(log, "rejected", level=logging.WARNING, status=exc.status, detail=exc.message)
            return _error(exc.status, exc.message)
        except (RedisError, LockError) as exc:
            sink.metrics.events.labels(label, "unavailable").inc()
            logs.record(log, "unavailable", level=logging.ERROR, dependency="redis", detail=str(exc))
            return _error(503, f"Redis is unavailable, retry later: {exc}")
        except Unavailable as exc:
            sink.metrics.events.labels(label, "unavailable").inc()
            logs.record(log, "unavailable", level=logging.ERROR, dependency="kubernetes", detail=str(exc))
            return _error(503, str(exc))
        sink.metrics.events.labels(label, outcome.split(":", 1)[0]).inc()
        return Response(status=202, headers={"X-Jobttl-Outcome": outcome})

    @app.get("/healthz")
    def healthz() -> Response:
        """Alive: checks nothing else, so a Redis outage never gets the sink restarted."""
        return jsonify(status="ok")

    @app.get("/readyz")
    def readyz() -> Response:
        """Ready when Redis answers: without it every event would be answered 503."""
        try:
            probe.ping()
        except RedisError as exc:
            return _error(503, f"Redis is unavailable: {exc}")
        return jsonify(status="ready")

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(sink.metrics.registry), content_type=CONTENT_TYPE_LATEST)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        # 413 for oversized bodies, 404/405 for wrong paths: JSON like every other error,
        # with the exception's own headers (a 405's Allow, which RFC 9110 requires).
        response = _error(exc.code or 500, exc.description or exc.name)
        response.headers.extend((k, v) for k, v in exc.get_headers() if k.lower() != "content-type")
        return response

    return app
