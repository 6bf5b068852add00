"""HTTP face of the Kubernetes API emulator.

Maps kube-apiserver's REST paths onto :class:`~jobttl_emulator.store.Store`, streams
watches, serves discovery and OpenAPI, and adds test hooks under ``/_emulator/``
(request log, fault injection, reset, closing watches, pod logs, access rules)
that are not part of the Kubernetes API.

Paths served for every registered :class:`~jobttl_emulator.resources.Resource`
(prefix ``/apis/<group>/<version>``, or ``/api/v1`` for the core group)::

    GET     <prefix>/<plural>                               list / watch, all namespaces
    GET     <prefix>/namespaces/<ns>/<plural>               list / watch
    POST    <prefix>/namespaces/<ns>/<plural>               create
    DELETE  <prefix>/namespaces/<ns>/<plural>               deletecollection
    GET|PUT|PATCH|DELETE <prefix>/namespaces/<ns>/<plural>/<name>
    GET|PUT|PATCH        <prefix>/namespaces/<ns>/<plural>/<name>/status
    GET                  <prefix>/namespaces/<ns>/pods/<name>/log

Cluster-scoped kinds (namespaces) drop the ``namespaces/<ns>`` part. Also:
``/version``, discovery, ``/openapi/v2``, ``/openapi/v3[/<group-version>]`` and
``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews``, and ``TokenReview`` and
``SubjectAccessReview`` (``POST /apis/authentication.k8s.io/v1/tokenreviews``,
``/apis/authorization.k8s.io/v1/subjectaccessreviews``) answered from the tokens and grants
``PUT /_emulator/identities`` gives (authn.py).

Responses follow the wire format of a real server closely enough for the
``kubernetes`` Python client (typed and dynamic) and kubectl not to notice:
``Status`` bodies for every error, unstructured objects with sorted keys,
``Table`` bodies when asked for, chunked newline-delimited watch events, a
``Date`` header (from ``http.server``, in the IMF-fixdate form Go writes), and
``Retry-After`` on 429.
"""

from __future__ import annotations

import copy
import hashlib
import http
import json
import logging
import os
import select
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from flask import Flask, Response, request
from werkzeug.serving import WSGIRequestHandler, make_server

from . import authn, authz, logs, protobuf
from .crds import load_crds, merge_resources
from .discovery import AUTHENTICATION_GROUP, AUTHORIZATION_GROUP, SERVER_VERSION, VERBS, discovery
from .openapi import OpenAPI
from .resources import DEFAULT_RESOURCES, Resource
from .store import (
    OPTIMISTIC_LOCK_MSG,
    ApiError,
    FieldError,
    Store,
    Watch,
    WatchError,
    bad_request,
    conflict,
    failure,
    internal_error,
    invalid,
    not_found,
    now_rfc3339,
    status_details,
)
from .tables import INCLUDE_OBJECT, to_table

log = logging.getLogger(__name__)

_PATCH_TYPES = {"application/merge-patch+json": "merge", "application/json-patch+json": "json"}
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
_TRUE = ("1", "t", "T", "true", "TRUE", "True")  # strconv.ParseBool
_REQUEST_LOG_SIZE = 20_000
_DISCONNECT_POLL = 1.0  # seconds between checks that a watching client is still there
DEFAULT_USER = "system:serviceaccount:jobttl:worker"
_SERVER_SET_FIELDS = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "selfLink",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


# ---------------------------------------------------------------------------
# Test hooks: request log and fault injection


@dataclass
class Fault:
    """Make the next ``count`` matching requests wait ``delay`` s and/or fail with ``status``."""

    id: int
    verb: str | None = None  # get, list, watch, create, update, patch, delete, deletecollection; None: any
    status: int | None = None  # None: only delay, then answer normally
    count: int = 1
    delay: float = 0.0
    path_contains: str | None = None
    user: str = DEFAULT_USER  # who the 403 message says was refused
    message: str | None = None  # overrides the Status message
    # In-process only: the request waits until the gate is set (at most `delay` s), not a fixed
    # `delay`, so a test makes something happen while a request is held, however loaded the machine.
    gate: threading.Event | None = field(default=None, compare=False, repr=False)
    arrived: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(replace(self, gate=None, arrived=None)).items() if k not in ("gate", "arrived")}

    def matches(self, verb: str, path: str) -> bool:
        return self.count > 0 and self.verb in (None, verb) and (not self.path_contains or self.path_contains in path)


class Hooks:
    """Request log and pending faults, shared by all request threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: deque[dict] = deque(maxlen=_REQUEST_LOG_SIZE)
        self._faults: list[Fault] = []
        self._next_id = 1
        # SelfSubjectAccessReview rules (see authz.py); None: everything is allowed.
        self.access_rules: list[dict] | None = None
        # TokenReview's tokens and SubjectAccessReview's grants (see authn.py); empty: nobody.
        self.identities = authn.Identities()

    def record(self, entry: dict) -> None:
        with self._lock:
            self._requests.append(entry)

    def requests(self, method: str | None = None, path_contains: str | None = None) -> list[dict]:
        with self._lock:
            entries = list(self._requests)
        return [
            copy.deepcopy(e)
            for e in entries
            if (method is None or e["method"] == method.upper()) and (not path_contains or path_contains in e["path"])
        ]

    def clear_requests(self) -> int:
        with self._lock:
            cleared = len(self._requests)
            self._requests.clear()
            return cleared

    def add_fault(
        self,
        verb: str | None = None,
        status: int | None = None,
        count: int = 1,
        delay: float = 0.0,
        path_contains: str | None = None,
        user: str = DEFAULT_USER,
        message: str | None = None,
        gate: threading.Event | None = None,
    ) -> Fault:
        if verb is not None and verb not in VERBS:
            raise ValueError(f"verb must be one of {VERBS}, not {verb!r}")
        if status is None and not delay:
            raise ValueError("a fault needs a status, a delay, or both")
        if status is not None and not 400 <= int(status) <= 599:
            raise ValueError("status must be an HTTP error code (400-599)")
        if int(count) < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            fault = Fault(
                self._next_id,
                verb,
                None if status is None else int(status),
                int(count),
                float(delay),
                path_contains,
                user,
                message,
                gate=gate,
            )
            self._next_id += 1
            self._faults.append(fault)
            return fault

    def faults(self) -> list[dict]:
        with self._lock:
            return [f.as_dict() for f in self._faults if f.count > 0]

    def take_fault(self, verb: str, path: str) -> Fault | None:
        """Consume one use of the first pending fault matching the request."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(verb, path):
                    fault.count -= 1
                    fault.arrived.set()
                    taken = copy.copy(fault)
                    self._faults = [f for f in self._faults if f.count > 0]
                    return taken
        return None

    def clear_faults(self) -> int:
        with self._lock:
            cleared = len(self._faults)
            self._faults.clear()
            return cleared


# ---------------------------------------------------------------------------
# Routing


@dataclass(frozen=True)
class _Route:
    resource: Resource
    namespace: str | None  # None: all namespaces
    name: str | None = None
    subresource: str | None = None


def _subresource_ok(res: Resource, subresource: str | None) -> bool:
    return (
        subresource is None
        or (subresource == "status" and res.status_subresource)
        or (subresource == "log" and res.log_subresource)
    )


def _resource_route(store: Store, segments: list[str]) -> _Route | None:
    """The resource a path names. Cluster-scoped objects have namespace ``""``; None: all namespaces."""
    if segments[:1] == ["apis"] and len(segments) >= 4:
        group, version, rest = segments[1], segments[2], segments[3:]
    elif segments[:1] == ["api"] and len(segments) >= 3:
        group, version, rest = "", segments[1], segments[2:]
    else:
        return None
    if rest[0] == "namespaces" and 3 <= len(rest) <= 5:
        res = store.find(group, version, rest[2])
        if res is not None and res.namespaced:
            subresource = rest[4] if len(rest) == 5 else None
            if not _subresource_ok(res, subresource):
                return None
            return _Route(res, rest[1], rest[3] if len(rest) >= 4 else None, subresource)
    res = store.find(group, version, rest[0])
    if res is None or len(rest) > 3 or (res.namespaced and len(rest) > 1):
        return None
    subresource = rest[2] if len(rest) == 3 else None
    if not _subresource_ok(res, subresource):
        return None
    return _Route(res, None if res.namespaced else "", rest[1] if len(rest) >= 2 else None, subresource)


def _verb(method: str, route: _Route | None, watch: bool) -> str:
    """The RBAC verb of a request (``request.RequestInfo``)."""
    collection = route is not None and route.name is None
    if method in ("GET", "HEAD"):
        return ("watch" if watch else "list") if collection else "get"
    if method == "DELETE":
        return "deletecollection" if collection else "delete"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "get")


# ---------------------------------------------------------------------------
# Request decoding


def _parse_bool(args: Any, name: str) -> bool:
    """strconv.ParseBool, as query parameters are decoded."""
    value = args.get(name)
    if value is None or value == "":
        return False
    if value in _TRUE:
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise bad_request(f'strconv.ParseBool: parsing "{value}": invalid syntax')


def _parse_int(args: Any, name: str) -> int | None:
    value = args.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax') from None


def _list_options(args: Any) -> dict:
    return {
        "label_selector": args.get("labelSelector", ""),
        "field_selector": args.get("fieldSelector", ""),
        "limit": max(0, _parse_int(args, "limit") or 0),
        "continue_token": args.get("continue", ""),
        "resource_version": args.get("resourceVersion", ""),
        "resource_version_match": args.get("resourceVersionMatch", ""),
    }


def _dry_run(args: Any, options_kind: str) -> bool:
    values = args.getlist("dryRun")
    if values and values != ["All"]:
        raise invalid(options_kind, "meta.k8s.io", "", [FieldError("NotSupported", "dryRun", '"All"', values)])
    return bool(values)


def _strict(args: Any) -> bool:
    """``fieldValidation=Strict``: unknown fields fail the request (the other directives drop them)."""
    return args.get("fieldValidation") == "Strict"


def _json_body(raw: bytes, content_type: str) -> Any:
    """The request body as JSON; protobuf only for the kinds ``protobuf.py`` decodes (kubectl's typed clients)."""
    if content_type == protobuf.CONTENT_TYPE:
        try:
            return protobuf.decode(raw)
        except protobuf.ProtobufError as exc:
            log.warning("refusing a protobuf body: %s", exc)
    if content_type not in ("", "application/json"):
        raise ApiError(
            failure(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/json",
            )
        )
    try:
        return json.loads(raw or b"null")
    except ValueError as exc:
        raise bad_request(f"couldn't get version/kind; json parse error: {exc}") from None


def _delete_options(raw: bytes, args: Any) -> dict:
    """DeleteOptions from the body if there is one, else from the query (handlers/delete.go)."""
    if raw.strip():
        try:
            options = json.loads(raw)
        except ValueError as exc:
            raise bad_request(f"error decoding DeleteOptions: {exc}") from None
        if not isinstance(options, dict):
            raise bad_request("decoded object cannot be converted to DeleteOptions")
        return options
    options: dict[str, Any] = {}
    if "propagationPolicy" in args:
        options["propagationPolicy"] = args["propagationPolicy"]
    if "orphanDependents" in args:
        options["orphanDependents"] = _parse_bool(args, "orphanDependents")
    if (grace := _parse_int(args, "gracePeriodSeconds")) is not None:
        options["gracePeriodSeconds"] = grace
    if args.getlist("dryRun"):
        options["dryRun"] = args.getlist("dryRun")
    return options


def _query_dict(args: Any) -> dict:
    return {k: (v[0] if len(v) == 1 else v) for k, v in args.lists()}


# ---------------------------------------------------------------------------
# Responses


def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    headers = {"Audit-Id": str(uuid.uuid4()), "Cache-Control": "no-cache, private"}
    headers.update(extra or {})
    return headers


def _json(body: Any, code: int = 200, sort: bool = False, headers: dict[str, str] | None = None) -> Response:
    text = json.dumps(body, sort_keys=sort, separators=(",", ":")) + "\n"
    return Response(text, status=code, mimetype="application/json", headers=_headers(headers))


def _object(body: dict, code: int = 200) -> Response:
    # Custom resources are unstructured objects: Go marshals their maps with sorted keys.
    return _json(body, code, sort=body.get("kind") != "Status")


def _status(exc: ApiError) -> Response:
    return _json(exc.status, exc.code, headers=exc.headers)


def _event_line(event: dict) -> bytes:
    obj = json.dumps(event["object"], sort_keys=event["type"] != "ERROR", separators=(",", ":"))
    return f'{{"type":"{event["type"]}","object":{obj}}}\n'.encode()


def _path_not_found() -> ApiError:
    return ApiError(failure(404, "NotFound", "the server could not find the requested resource", {}))


def _method_not_allowed() -> ApiError:
    return ApiError(
        failure(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})
    )


def _fault_error(fault: Fault, verb: str, route: _Route | None, path: str) -> ApiError:
    """The Status a real server sends for the injected code, worded for this request."""
    code = fault.status
    assert code is not None
    res = route.resource if route else None
    name = route.name if route else None
    headers: dict[str, str] = {}
    if code == 403:
        if res is None:
            text = f'forbidden: User "{fault.user}" cannot {verb} path "{path}"'
            status = failure(403, "Forbidden", text, {})
        else:
            what = f'{res.qualified} "{name}"' if name else res.qualified
            resource = f"{res.plural}/{route.subresource}" if route.subresource else res.plural
            scope = f'in the namespace "{route.namespace}"' if route.namespace else "at the cluster scope"
            text = (
                f'{what} is forbidden: User "{fault.user}" cannot {verb} resource "{resource}" '
                f'in API group "{res.group}" {scope}'
            )
            status = failure(403, "Forbidden", text, status_details(name or "", res.group, res.plural))
    elif code == 404 and res is not None and name:
        status = not_found(res, name).status
    elif code == 409 and res is not None and name:
        status = conflict(res.plural, res.group, name, OPTIMISTIC_LOCK_MSG).status
    elif code == 429:
        status = failure(429, "TooManyRequests", "Too many requests, please try again later.", {"retryAfterSeconds": 1})
        headers["Retry-After"] = "1"
    elif code == 500:
        status = internal_error("injected fault").status
    else:
        reason, message = {
            401: ("Unauthorized", "Unauthorized"),
            404: ("NotFound", "the server could not find the requested resource"),
            410: ("Expired", "The resourceVersion for the provided list is too old."),
            503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
            504: ("Timeout", "Timeout: request did not complete within requested timeout - context deadline exceeded"),
        }.get(code, ("", _phrase(code)))
        status = failure(code, reason, message)
    if fault.message:
        status["message"] = fault.message
    return ApiError(status, headers)


def _phrase(code: int) -> str:
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return "injected fault"


def _client_gone(sock: socket.socket) -> bool:
    """Whether the client closed its end: readable, yet nothing to read.

    The apiserver notices a watcher going away through the request context;
    without this an idle watch would only notice on its next write.
    """
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _watch_stream(
    store: Store, watch: Watch, timeout: int | None, sock: socket.socket | None, transform: Any = None
) -> Iterator[bytes]:
    """Events of ``watch`` as newline-delimited JSON until timeout or close; ``transform`` converts their objects.

    Bookmarks follow the cacher: every ``bookmark_interval`` seconds, and
    at the latest 2 s before the watch's timeout, so a client can resume.
    """
    deadline = time.monotonic() + timeout if timeout else None

    def next_bookmark(now: float) -> float | None:
        if not watch.bookmarks:
            return None
        due = now + store.bookmark_interval
        if deadline is not None:
            due = min(due, deadline - 2)
        return due if due >= now else None

    bookmark_at = next_bookmark(time.monotonic())
    try:
        yield b""  # send the headers now, as the apiserver flushes them when a watch starts
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return
            if bookmark_at is not None and now >= bookmark_at:
                bookmark = store.bookmark(watch)
                if bookmark is not None:
                    yield _event_line(bookmark)
                    bookmark_at = next_bookmark(now)
                    continue
            waits = [t - now for t in (deadline, bookmark_at) if t is not None and t > now]
            event = watch.next(min([*waits, _DISCONNECT_POLL]))
            if event is not None:
                if transform is not None and event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    event = {"type": event["type"], "object": transform(event["object"])}
                yield _event_line(event)
            elif watch.closed:
                if watch.aborted and sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)  # the client sees the connection drop mid-stream
                return
            elif sock is not None and _client_gone(sock):
                return
    finally:
        store.stop_watch(watch)


# ---------------------------------------------------------------------------
# The application


def create_app(store: Store, hooks: Hooks | None = None) -> Flask:
    """The WSGI application serving ``store``; ``hooks`` holds the request log, faults and access rules."""
    app = Flask(__name__)
    hooks = hooks or Hooks()
    documents = OpenAPI(store.resources, SERVER_VERSION["gitVersion"])
    app.extensions["emulator"] = {"store": store, "hooks": hooks}

    @app.before_request
    def read_body() -> None:
        # Connections are kept alive: unread body bytes would corrupt the next request.
        request.get_data(cache=True)

    @app.get("/_emulator/requests")
    def get_requests() -> Response:
        return _json(hooks.requests(request.args.get("method"), request.args.get("path_contains")))

    @app.delete("/_emulator/requests")
    def delete_requests() -> Response:
        return _json({"cleared": hooks.clear_requests()})

    @app.get("/_emulator/faults")
    def get_faults() -> Response:
        return _json(hooks.faults())

    @app.post("/_emulator/faults")
    def post_fault() -> Response:
        spec = request.get_json(silent=True)
        if not isinstance(spec, dict):
            return _json({"error": "expected a JSON object"}, 400)
        try:
            fault = hooks.add_fault(**spec)
        except (TypeError, ValueError) as exc:
            return _json({"error": str(exc)}, 400)
        return _json(fault.as_dict(), 201)

    @app.delete("/_emulator/faults")
    def delete_faults() -> Response:
        return _json({"cleared": hooks.clear_faults()})

    @app.post("/_emulator/reset")
    def reset() -> Response:
        hooks.clear_faults()
        hooks.clear_requests()
        return _json({"resourceVersion": store.reset()})

    @app.post("/_emulator/close-watches")
    def close_watches() -> Response:
        spec = request.get_json(silent=True) or {}
        return _json({"closed": store.close_watches(abort=bool(spec.get("abort")))})

    @app.post("/_emulator/compact")
    def compact() -> Response:
        return _json({"resourceVersion": store.compact()})

    @app.post("/_emulator/logs")
    def post_log() -> Response:
        spec = request.get_json(silent=True)
        fields = ("namespace", "pod", "container", "text")
        if not isinstance(spec, dict) or not all(isinstance(spec.get(f), str) for f in fields):
            return _json(
                {"error": f"expected a JSON object with string fields {', '.join(fields)} (and optional previous)"}, 400
            )
        store.logs.set(*(spec[f] for f in fields), previous=bool(spec.get("previous")))
        return _json({"set": True}, 201)

    @app.put("/_emulator/access-rules")
    def put_access_rules() -> Response:
        rules = request.get_json(silent=True)
        if rules is not None and not (isinstance(rules, list) and all(isinstance(r, dict) for r in rules)):
            return _json({"error": "expected a list of rule objects, or null to allow everything"}, 400)
        hooks.access_rules = rules
        return _json({"rules": rules})

    @app.put("/_emulator/identities")
    def put_identities() -> Response:
        checked = authn.Identities.check(request.get_json(silent=True))
        if isinstance(checked, str):
            return _json({"error": checked}, 400)
        hooks.identities.set(*checked)
        return _json({"tokens": len(checked[0]), "grants": len(checked[1])})

    @app.route("/", defaults={"path": ""}, methods=_METHODS)
    @app.route("/<path:path>", methods=_METHODS)
    def api(path: str) -> Response:
        raw = request.get_data(cache=True)
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            body = None
        entry = {
            "time": time.time(),
            "method": request.method,
            "path": request.path,
            "query": _query_dict(request.args),
            "body": body,
            "userAgent": request.headers.get("User-Agent", ""),
        }
        try:
            response = _serve(store, hooks, documents, raw)
        except ApiError as exc:
            response = _status(exc)
        except Exception:  # a bug here must still look like an API server error to the client
            log.exception("emulator failed on %s %s", request.method, request.full_path)
            response = _status(internal_error("unexpected emulator error"))
        entry["status"] = response.status_code
        hooks.record(entry)
        return response

    return app


def _serve(store: Store, hooks: Hooks, documents: OpenAPI, raw: bytes) -> Response:
    method, path, args = request.method, request.path, request.args
    segments = [s for s in path.split("/") if s]
    route = _resource_route(store, segments)
    verb = _verb(method, route, args.get("watch") in _TRUE)
    fault = hooks.take_fault(verb, path)
    if fault is not None:
        if fault.gate is not None:
            fault.gate.wait(fault.delay or None)
        elif fault.delay:
            time.sleep(fault.delay)
        if fault.status is not None:
            raise _fault_error(fault, verb, route, path)
    if route is not None:
        return _serve_resource(store, route, method, args, raw)
    if segments == ["apis", AUTHORIZATION_GROUP, "v1", "selfsubjectaccessreviews"]:
        if method != "POST":
            raise _method_not_allowed()
        return _json(authz.review(_json_body(raw, request.mimetype), hooks.access_rules), 201)
    if segments == ["apis", AUTHORIZATION_GROUP, "v1", "subjectaccessreviews"]:
        if method != "POST":
            raise _method_not_allowed()
        return _json(hooks.identities.access_review(_json_body(raw, request.mimetype)), 201)
    if segments == ["apis", AUTHENTICATION_GROUP, "v1", "tokenreviews"]:
        if method != "POST":
            raise _method_not_allowed()
        return _json(hooks.identities.token_review(_json_body(raw, request.mimetype)), 201)
    if method == "GET":
        if segments in (["healthz"], ["livez"], ["readyz"]):
            return Response("ok", mimetype="text/plain")
        if segments[:1] == ["openapi"]:
            return _serve_openapi(documents, segments[1:], args)
        document = discovery(store.resources, segments, request.host)
        if document is not None:
            return _json(document)
    raise _path_not_found()


def _serve_resource(store: Store, route: _Route, method: str, args: Any, raw: bytes) -> Response:
    res, namespace, name, sub = route.resource, route.namespace, route.name, route.subresource
    if res.read_only and method not in ("GET", "HEAD"):
        raise _method_not_allowed()
    content_type = request.mimetype
    if name is None:
        if method == "GET":
            options = _list_options(args)
            if _parse_bool(args, "watch"):
                return _serve_watch(store, route, args, options)
            return _read_response(res, store.list(res, namespace, **options), args)
        if namespace is not None and method == "POST":
            obj = store.create(
                res, namespace, _json_body(raw, content_type), _dry_run(args, "CreateOptions"), _strict(args)
            )
            return _object(obj, 201)
        if namespace is not None and method == "DELETE":
            listed = store.delete_collection(res, namespace, _delete_options(raw, args), **_list_options(args))
            return _object(listed)
        raise _method_not_allowed()
    assert namespace is not None
    if sub == "log":
        if method != "GET":
            raise _method_not_allowed()
        return _serve_log(store, route, args)
    if method == "GET":
        return _read_response(res, store.get(res, namespace, name), args)
    if method == "PUT":
        body = _json_body(raw, content_type)
        return _object(store.replace(res, namespace, name, body, sub, _dry_run(args, "UpdateOptions"), _strict(args)))
    if method == "PATCH":
        return _serve_patch(store, route, args, raw, content_type)
    if method == "DELETE" and sub is None:
        code, body = store.delete(res, namespace, name, _delete_options(raw, args))
        return _object(body, code)
    raise _method_not_allowed()


def _patch_types(res: Resource) -> list[str]:
    """The PATCH content types the real server accepts, in its order: strategic merge only for built-in kinds."""
    strategic = ["application/strategic-merge-patch+json"] if res.builtin else []
    return ["application/json-patch+json", "application/merge-patch+json", *strategic, "application/apply-patch+yaml"]


def _serve_patch(store: Store, route: _Route, args: Any, raw: bytes, content_type: str) -> Response:
    res, namespace, name, sub = route.resource, route.namespace, route.name, route.subresource
    assert namespace is not None and name is not None
    accepted = _patch_types(res)
    if content_type not in accepted:
        raise ApiError(
            failure(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(accepted),
            )
        )
    dry_run = _dry_run(args, "PatchOptions")
    force = _parse_bool(args, "force")
    if content_type == "application/apply-patch+yaml":
        code, obj = store.apply(
            res, namespace, name, _yaml_body(raw), args.get("fieldManager", ""), force, sub, dry_run, _strict(args)
        )
        return _object(obj, code)
    if "force" in args:
        raise invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            [FieldError("Forbidden", "force", "may not be specified for non-apply patch")],
        )
    try:
        patch = json.loads(raw)
    except ValueError as exc:
        raise bad_request(f"error decoding patch: {exc}") from None
    kind = {"application/json-patch+json": "json", "application/merge-patch+json": "merge"}.get(
        content_type, "strategic"
    )
    return _object(store.patch(res, namespace, name, kind, patch, sub, dry_run, _strict(args)))


def _yaml_body(raw: bytes) -> Any:
    import yaml  # a dependency of the kubernetes client

    try:
        return yaml.safe_load(raw.decode() or "null")
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise bad_request(f"error decoding YAML: {exc}") from None


def _table_version(accept: str) -> str | None:
    """``meta.k8s.io/<v>`` when the first acceptable Accept clause asks for a Table, else None (plain JSON)."""
    for clause in accept.split(","):
        mime, *params = [p.strip() for p in clause.split(";")]
        if mime not in ("application/json", "application/*", "*/*"):
            continue
        options = dict(p.split("=", 1) for p in params if "=" in p)
        if "as" not in options:
            return None
        if options["as"] == "Table" and options.get("g") == "meta.k8s.io" and options.get("v") in ("v1", "v1beta1"):
            return f"meta.k8s.io/{options['v']}"
    return None


def _table_options(args: Any) -> str:
    include = args.get("includeObject", "")
    if include not in INCLUDE_OBJECT:
        raise bad_request(f'unrecognized includeObject value: "{include}"')
    return include


def _read_response(res: Resource, body: dict, args: Any) -> Response:
    """An object or list, as a Table when the client asks for one (kubectl get)."""
    version = _table_version(request.headers.get("Accept", ""))
    if version is None:
        return _object(body)
    return _json(to_table(res, body, _table_options(args), version))


def _serve_log(store: Store, route: _Route, args: Any) -> Response:
    assert route.namespace is not None and route.name is not None
    tail, limit = _parse_int(args, "tailLines"), _parse_int(args, "limitBytes")
    errors = []
    if tail is not None and tail < 0:
        errors.append(FieldError("Invalid", "tailLines", "must be greater than or equal to 0", tail))
    if limit is not None and limit < 1:
        errors.append(FieldError("Invalid", "limitBytes", "must be greater than 0", limit))
    if errors:
        raise invalid("PodLogOptions", "", route.name, errors)
    lines = store.pod_log(
        route.resource, route.namespace, route.name, args.get("container", ""), _parse_bool(args, "previous")
    )
    body = logs.render(lines, tail, limit, _parse_bool(args, "timestamps"))
    return Response(body, mimetype="text/plain", headers=_headers())


def _accepts_json(accept: str) -> bool:
    """Whether an Accept header takes JSON (kube-openapi's negotiation; no header means JSON)."""
    if not accept.strip():
        return True
    return any(c.split(";")[0].strip() in ("application/json", "application/*", "*/*") for c in accept.split(","))


def _serve_openapi(documents: OpenAPI, segments: list[str], args: Any) -> Response:
    accept = request.headers.get("Accept", "")
    if segments == ["v2"]:
        if not _accepts_json(accept):
            return Response(status=406, headers={"Vary": "Accept"})
        body = documents.v2()
        etag = '"' + hashlib.sha512(body).hexdigest().upper() + '"'
        return Response(body, mimetype="application/json", headers={"Etag": etag, "Vary": "Accept"})
    if segments == ["v3"]:
        return _json(documents.v3_index())
    key = "/".join(segments[1:])
    if segments[:1] != ["v3"] or key not in documents.v3():
        raise _path_not_found()
    if not _accepts_json(accept):
        return Response(status=406, headers={"Vary": "Accept"})
    body, digest = documents.v3()[key]
    headers = {"Etag": f'"{digest}"', "Vary": "Accept"}
    if args.get("hash"):
        if args["hash"] != digest:
            return Response(status=301, headers={"Location": f"/openapi/v3/{key}?hash={digest}"})
        expires = (datetime.now(timezone.utc) + timedelta(days=365)).strftime("%a, %d %b %Y %H:%M:%S GMT")
        headers.update({"Cache-Control": "public, immutable", "Expires": expires})
    return Response(body, mimetype="application/json", headers=headers)


def _serve_watch(store: Store, route: _Route, args: Any, options: dict) -> Response:
    table_version = _table_version(request.headers.get("Accept", ""))
    include = _table_options(args) if table_version else ""
    initial_events = _initial_events(args, options)
    try:
        watch = store.watch(
            route.resource,
            route.namespace,
            options["label_selector"],
            options["field_selector"],
            options["resource_version"],
            _parse_bool(args, "allowWatchBookmarks"),
            initial_events,
        )
    except WatchError as exc:
        # Past admission, watch failures arrive as an ERROR event after HTTP 200.
        lines: Iterable[bytes] = iter([_event_line({"type": "ERROR", "object": exc.status})])
    else:
        sock = request.environ.get("werkzeug.socket")
        transform = None
        if table_version:
            transform = _table_transform(route.resource, include, table_version)
        lines = _watch_stream(store, watch, _parse_int(args, "timeoutSeconds"), sock, transform)
    return Response(lines, status=200, mimetype="application/json", headers=_headers(), direct_passthrough=True)


def _initial_events(args: Any, options: dict) -> bool:
    """``sendInitialEvents``, as the API server validates it (ValidateListOptions): only with
    ``resourceVersionMatch=NotOlderThan`` and ``allowWatchBookmarks=true``."""
    if not _parse_bool(args, "sendInitialEvents"):
        return False
    errors = []
    if options["resource_version_match"] != "NotOlderThan":
        errors.append(
            FieldError(
                "Forbidden",
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                None,
            )
        )
    if not _parse_bool(args, "allowWatchBookmarks"):
        errors.append(
            FieldError(
                "Forbidden",
                "allowWatchBookmarks",
                "sendInitialEvents requires setting allowWatchBookmarks to true",
                None,
            )
        )
    if errors:
        raise invalid("ListOptions", "meta.k8s.io", "", errors)
    return True


def _table_transform(res: Resource, include: str, version: str) -> Any:
    """Watch events as Tables of one row; only the first carries the column definitions (watchEmbeddedEncoder)."""
    first = [True]

    def transform(obj: dict) -> dict:
        table = to_table(res, obj, include, version, headers=first[0])
        first[0] = False
        return table

    return transform


# ---------------------------------------------------------------------------
# Running it


class _KeepAliveHandler(WSGIRequestHandler):
    """werkzeug's request handler, but with HTTP/1.1 keep-alive, as kube-apiserver has.

    werkzeug sends ``Connection: close`` on every response. Besides costing a
    connection per request, that changes client behaviour: ``http.client``
    then detaches the socket from the connection, so ``kubernetes.watch.Watch.stop()``
    cannot shut down a running watch and blocks until the next event. Keeping
    connections open is safe here because the app always reads request
    bodies completely (see ``create_app``).
    """

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Like Go's net/http: without it, header and body writes meet delayed ACKs (40 ms a request).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.emulator_connections.add(self.connection)

    def finish(self) -> None:
        self.server.emulator_connections.discard(self.connection)
        super().finish()

    def run_wsgi(self) -> None:
        if self.headers.get("Expect", "").lower().strip() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits for this before large bodies
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True  # we cannot tell where a chunked body ends
        self.environ = environ = self.make_environ()
        response: list = []  # [status, headers] once start_response is called
        headers_sent = chunked = False

        def start_response(status: str, headers: list, exc_info: Any = None) -> Any:
            response[:] = [status, headers]
            return write

        def write(data: bytes) -> None:
            nonlocal headers_sent, chunked
            if not headers_sent:
                code, _, message = response[0].partition(" ")
                self.send_response(int(code), message)
                names = set()
                for key, value in response[1]:
                    self.send_header(key, value)
                    names.add(key.lower())
                if (
                    "content-length" not in names
                    and int(code) not in (204, 304)
                    and environ["REQUEST_METHOD"] != "HEAD"
                    and self.request_version == "HTTP/1.1"  # HTTP/1.0 bodies end when the connection closes
                ):
                    chunked = True
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                headers_sent = True
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            self.wfile.flush()

        try:
            body = self.server.app(environ, start_response)
            try:
                for data in body:
                    write(data)
                if not headers_sent:
                    write(b"")
                if chunked:
                    self.wfile.write(b"0\r\n\r\n")
            finally:
                if hasattr(body, "close"):
                    body.close()
        except OSError:
            self.close_connection = True  # the client went away (or the watch was aborted)
        except Exception:
            log.exception("error serving %s %s", self.command, self.path)
            self.close_connection = True


class EmulatorServer:
    """The emulator on a threaded werkzeug server in a daemon thread.

    >>> with EmulatorServer(gc_delay=0.1) as server:
    ...     server.write_kubeconfig("kubeconfig.yaml")
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        resources: Iterable[Resource] = DEFAULT_RESOURCES,
        gc_delay: float = 0.5,
        history_size: int = 1000,
        bookmark_interval: float = 60.0,
        token: str = "emulator-token",
        crds: Iterable[str | os.PathLike] = (),
        access_rules: list[dict] | None = None,
    ) -> None:
        """``crds``: CRD YAML files whose kinds are served too (replacing a registration of the same kind);
        ``access_rules``: what ``SelfSubjectAccessReview`` allows (see ``authz.py``; None: everything)."""
        self.host = host
        self.port = port
        self.token = token
        served = merge_resources(resources, load_crds(crds))
        self.store = Store(served, gc_delay=gc_delay, history_size=history_size, bookmark_interval=bookmark_interval)
        self.hooks = Hooks()
        self.hooks.access_rules = access_rules
        self.app = create_app(self.store, self.hooks)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> EmulatorServer:
        self._server = make_server(self.host, self.port, self.app, threaded=True, request_handler=_KeepAliveHandler)
        self._server.emulator_connections = set()
        self.port = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="k8s-api-emulator", daemon=True
        )
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        self.store.close_watches()
        if self._server is not None:
            self._server.shutdown()
            assert self._thread is not None
            self._thread.join(timeout=5)
            for connection in list(self._server.emulator_connections):
                try:
                    connection.shutdown(socket.SHUT_RDWR)  # idle keep-alive connections end with the server
                except OSError:
                    pass
            self._server = None
        self.store.close()

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: str, namespace: str = "default") -> str:
        """Write a kubeconfig for this server (plain HTTP, bearer token) and return its path."""
        import yaml  # a dependency of the kubernetes client

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "emulator", "user": {"token": self.token}}],
            "contexts": [
                {"name": "emulator", "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace}}
            ],
            "current-context": "emulator",
            "preferences": {},
        }
        partial = f"{path}.tmp"
        with open(partial, "w", encoding="utf-8") as fh:
            yaml.safe_dump(config, fh, sort_keys=False)
        os.replace(partial, path)  # readers never see a half-written file
        return path

    # Test hooks, the same as the /_emulator/ endpoints.

    def requests(self, method: str | None = None, path_contains: str | None = None) -> list[dict]:
        return self.hooks.requests(method, path_contains)

    def clear_requests(self) -> int:
        return self.hooks.clear_requests()

    def add_fault(
        self,
        verb: str | None = None,
        status: int | None = None,
        count: int = 1,
        delay: float = 0.0,
        path_contains: str | None = None,
        user: str = DEFAULT_USER,
        message: str | None = None,
        gate: threading.Event | None = None,
    ) -> Fault:
        return self.hooks.add_fault(verb, status, count, delay, path_contains, user, message, gate)

    def clear_faults(self) -> int:
        return self.hooks.clear_faults()

    def reset(self) -> str:
        self.hooks.clear_faults()
        self.hooks.clear_requests()
        return self.store.reset()

    def close_watches(self, abort: bool = False) -> int:
        return self.store.close_watches(abort)

    def compact(self) -> str:
        return self.store.compact()

    def seed(self, *paths: str) -> list[dict]:
        return load_seeds(self.store, paths)

    def set_log(self, namespace: str, pod: str, container: str, text: str, previous: bool = False) -> None:
        """What ``pods/<pod>/log`` returns for ``container`` (``previous``: its previous instance's log)."""
        self.store.logs.set(namespace, pod, container, text, previous)

    def set_identities(self, tokens: dict[str, dict] | None = None, grants: list[dict] | None = None) -> None:
        """The tokens ``TokenReview`` knows (token → ``{"username", "groups", "uid"}``) and what
        ``SubjectAccessReview`` allows (``[{"users": [...], "groups": [...], "rules": [PolicyRule...]}]``)."""
        self.hooks.identities.set(tokens, grants)

    def set_access_rules(self, rules: list[dict] | None) -> None:
        """Rules ``SelfSubjectAccessReview`` answers by (see ``authz.py``); None allows everything."""
        self.hooks.access_rules = rules


def _fill_now(value: Any, now: str) -> Any:
    if value == "$NOW":
        return now
    if isinstance(value, dict):
        return {k: _fill_now(v, now) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_now(v, now) for v in value]
    return value


def load_seeds(store: Store, paths: Iterable[str]) -> list[dict]:
    """Create the objects of multi-document YAML files (``kind: List`` too).

    Server-set metadata is dropped so that ``kubectl get -o yaml`` output can be
    seeded. ``status`` goes through the status path, as a controller would
    write it, with every ``"$NOW"`` string replaced by the current time.
    """
    import yaml  # a dependency of the kubernetes client

    created = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            documents = [d for d in yaml.safe_load_all(fh) if d]
        before = len(created)
        for doc in documents:
            for obj in doc.get("items", []) if doc.get("kind") == "List" else [doc]:
                try:
                    created.append(seed_object(store, obj))
                except ApiError as exc:
                    raise ValueError(f"{path}: {exc.status['message']}") from None
        log.info("seeded %d object(s) from %s", len(created) - before, path)
    return created


def seed_object(store: Store, obj: dict) -> dict:
    """Create one object as a controller would leave it: status written through `/status`."""
    res = store.resource_for(obj.get("apiVersion", ""), obj.get("kind", ""))
    if res is None:
        raise ValueError(f"no registered resource serves {obj.get('apiVersion')} {obj.get('kind')}")
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    for server_set in _SERVER_SET_FIELDS:
        meta.pop(server_set, None)
    namespace = meta.get("namespace") or "default"
    status = _fill_now(obj.pop("status", None), now_rfc3339())
    if status is not None and not res.status_subresource:
        obj["status"] = status
    created = store.create(res, namespace, obj)
    if status is not None and res.status_subresource:
        created["status"] = status
        created = store.replace(res, namespace, created["metadata"]["name"], created, subresource="status")
    return created


def run(
    host: str,
    port: int,
    seed_paths: Iterable[str] = (),
    kubeconfig_path: str | None = None,
    gc_delay: float = 0.5,
    resources: Iterable[Resource] = DEFAULT_RESOURCES,
    crds: Iterable[str] = (),
) -> None:
    """Serve in the foreground until SIGTERM or SIGINT (call from the main thread)."""
    server = EmulatorServer(host, port, resources=tuple(resources), gc_delay=gc_delay, crds=crds)
    server.seed(*seed_paths)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    server.start()
    try:
        if kubeconfig_path:
            server.write_kubeconfig(kubeconfig_path)
            log.info("wrote kubeconfig %s", kubeconfig_path)
        log.info("Kubernetes API emulator serving %s", server.url)
        while not stop.wait(0.5):
            pass
        log.info("stopping the Kubernetes API emulator")
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
