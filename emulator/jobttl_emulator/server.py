"""HTTP face of the Kubernetes API emulator.

Maps kube-apiserver's REST paths onto :class:`~jobttl_emulator.store.Store`, streams
watches, serves discovery, and adds test hooks under ``/_emulator/`` (request
log, fault injection, reset, closing watches) that are not part of the
Kubernetes API.

Paths served for every registered :class:`~jobttl_emulator.resources.Resource`
(prefix ``/apis/<group>/<version>``, or ``/api/v1`` for the core group)::

    GET     <prefix>/<plural>                               list / watch, all namespaces
    GET     <prefix>/namespaces/<ns>/<plural>               list / watch
    POST    <prefix>/namespaces/<ns>/<plural>               create
    DELETE  <prefix>/namespaces/<ns>/<plural>               deletecollection
    GET|PUT|PATCH|DELETE <prefix>/namespaces/<ns>/<plural>/<name>
    GET|PUT|PATCH        <prefix>/namespaces/<ns>/<plural>/<name>/status

Responses follow the wire format of a real server closely enough for the
``kubernetes`` Python client (typed and dynamic) not to notice: ``Status``
bodies for every error, unstructured objects with sorted keys, chunked
newline-delimited watch events, and ``Retry-After`` on 429.
"""

from __future__ import annotations

import base64
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
from dataclasses import asdict, dataclass
from typing import Any

from flask import Flask, Response, request
from werkzeug.serving import WSGIRequestHandler, make_server

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

log = logging.getLogger(__name__)

SERVER_VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0",
    "gitCommit": "0000000000000000000000000000000000000000",  # an emulator has no commit
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T07:28:49Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
# The verbs kube-apiserver advertises for a custom resource, in its order.
_VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
_PATCH_TYPES = {"application/merge-patch+json": "merge", "application/json-patch+json": "json"}
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
_TRUE = ("1", "t", "T", "true", "TRUE", "True")  # strconv.ParseBool
_REQUEST_LOG_SIZE = 20_000
_DISCONNECT_POLL = 1.0  # seconds between checks that a watching client is still there
DEFAULT_USER = "system:serviceaccount:jobttl:worker"
_SERVER_SET_FIELDS = (
    "uid", "resourceVersion", "creationTimestamp", "generation", "selfLink",
    "managedFields", "deletionTimestamp", "deletionGracePeriodSeconds",
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

    def matches(self, verb: str, path: str) -> bool:
        return self.count > 0 and self.verb in (None, verb) and (not self.path_contains or self.path_contains in path)


class Hooks:
    """Request log and pending faults, shared by all request threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: deque[dict] = deque(maxlen=_REQUEST_LOG_SIZE)
        self._faults: list[Fault] = []
        self._next_id = 1

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
    ) -> Fault:
        if verb is not None and verb not in _VERBS:
            raise ValueError(f"verb must be one of {_VERBS}, not {verb!r}")
        if status is None and not delay:
            raise ValueError("a fault needs a status, a delay, or both")
        if status is not None and not 400 <= int(status) <= 599:
            raise ValueError("status must be an HTTP error code (400-599)")
        if int(count) < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            fault = Fault(self._next_id, verb, None if status is None else int(status), int(count), float(delay), path_contains, user, message)
            self._next_id += 1
            self._faults.append(fault)
            return fault

    def faults(self) -> list[dict]:
        with self._lock:
            return [asdict(f) for f in self._faults if f.count > 0]

    def take_fault(self, verb: str, path: str) -> Fault | None:
        """Consume one use of the first pending fault matching the request."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(verb, path):
                    fault.count -= 1
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


def _resource_route(store: Store, segments: list[str]) -> _Route | None:
    if segments[:1] == ["apis"] and len(segments) >= 4:
        group, version, rest = segments[1], segments[2], segments[3:]
    elif segments[:1] == ["api"] and len(segments) >= 3:
        group, version, rest = "", segments[1], segments[2:]
    else:
        return None
    if len(rest) == 1:
        res = store.find(group, version, rest[0])
        return _Route(res, None) if res else None
    if rest[0] != "namespaces" or not 3 <= len(rest) <= 5:
        return None
    res = store.find(group, version, rest[2])
    if res is None:
        return None
    subresource = rest[4] if len(rest) == 5 else None
    if subresource is not None and (subresource != "status" or not res.status_subresource):
        return None
    return _Route(res, rest[1], rest[3] if len(rest) >= 4 else None, subresource)


def _verb(method: str, route: _Route | None, watch: bool) -> str:
    """The RBAC verb of a request (``request.RequestInfo``)."""
    collection = route is not None and route.name is None
    if method in ("GET", "HEAD"):
        return ("watch" if watch else "list") if collection else "get"
    if method == "DELETE":
        return "deletecollection" if collection else "delete"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "get")


def _storage_version_hash(res: Resource) -> str:
    digest = hashlib.sha256(f"{res.group}/{res.version}/{res.kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def _discovery(store: Store, segments: list[str], host: str) -> dict | None:
    """Legacy (unaggregated) discovery documents, as the dynamic client reads them."""
    by_group: dict[str, list[Resource]] = {}
    for res in store.resources:
        if res.group:
            by_group.setdefault(res.group, []).append(res)

    def group_versions(group: str) -> list[dict]:
        versions = dict.fromkeys(r.version for r in by_group[group])
        return [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]

    def api_group(group: str) -> dict:
        versions = group_versions(group)
        return {"name": group, "versions": versions, "preferredVersion": versions[0]}

    def resource_list(group: str, version: str) -> dict:
        resources = []
        for res in store.resources:
            if (res.group, res.version) != (group, version):
                continue
            resources.append({
                "name": res.plural,
                "singularName": res.singular,
                "namespaced": True,
                "kind": res.kind,
                "verbs": _VERBS,
                "storageVersionHash": _storage_version_hash(res),
            })
            if res.status_subresource:
                resources.append({
                    "name": f"{res.plural}/status",
                    "singularName": "",
                    "namespaced": True,
                    "kind": res.kind,
                    "verbs": ["get", "patch", "update"],
                })
        group_version = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}

    if segments == ["version"]:
        return SERVER_VERSION
    if segments == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
        }
    if segments == ["api", "v1"]:
        return resource_list("", "v1")
    if segments == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [api_group(g) for g in by_group]}
    if len(segments) == 2 and segments[0] == "apis" and segments[1] in by_group:
        return {"kind": "APIGroup", "apiVersion": "v1", **api_group(segments[1])}
    if len(segments) == 3 and segments[0] == "apis" and segments[1] in by_group:
        if any(v["version"] == segments[2] for v in group_versions(segments[1])):
            return resource_list(segments[1], segments[2])
    return None


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


def _json_body(raw: bytes, content_type: str) -> Any:
    if content_type not in ("", "application/json"):
        raise ApiError(failure(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json",
        ))
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
    return ApiError(failure(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {}))


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


def _watch_stream(store: Store, watch: Watch, timeout: int | None, sock: socket.socket | None) -> Iterator[bytes]:
    """Events of ``watch`` as newline-delimited JSON until timeout or close.

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
    """The WSGI application serving ``store``; ``hooks`` holds the request log and faults."""
    app = Flask(__name__)
    hooks = hooks or Hooks()
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
        return _json(asdict(fault), 201)

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
        }
        try:
            response = _serve(store, hooks, raw)
        except ApiError as exc:
            response = _status(exc)
        except Exception:  # a bug here must still look like an API server error to the client
            log.exception("emulator failed on %s %s", request.method, request.full_path)
            response = _status(internal_error("unexpected emulator error"))
        entry["status"] = response.status_code
        hooks.record(entry)
        return response

    return app


def _serve(store: Store, hooks: Hooks, raw: bytes) -> Response:
    method, path, args = request.method, request.path, request.args
    segments = [s for s in path.split("/") if s]
    route = _resource_route(store, segments)
    verb = _verb(method, route, args.get("watch") in _TRUE)
    fault = hooks.take_fault(verb, path)
    if fault is not None:
        if fault.delay:
            time.sleep(fault.delay)
        if fault.status is not None:
            raise _fault_error(fault, verb, route, path)
    if route is None:
        if method == "GET":
            if segments in (["healthz"], ["livez"], ["readyz"]):
                return Response("ok", mimetype="text/plain")
            document = _discovery(store, segments, request.host)
            if document is not None:
                return _json(document)
        raise _path_not_found()
    return _serve_resource(store, route, method, args, raw)


def _serve_resource(store: Store, route: _Route, method: str, args: Any, raw: bytes) -> Response:
    res, namespace, name, sub = route.resource, route.namespace, route.name, route.subresource
    content_type = request.mimetype
    if name is None:
        if method == "GET":
            options = _list_options(args)
            if _parse_bool(args, "watch"):
                return _serve_watch(store, route, args, options)
            return _object(store.list(res, namespace, **options))
        if namespace is not None and method == "POST":
            obj = store.create(res, namespace, _json_body(raw, content_type), _dry_run(args, "CreateOptions"))
            return _object(obj, 201)
        if namespace is not None and method == "DELETE":
            listed = store.delete_collection(res, namespace, _delete_options(raw, args), **_list_options(args))
            return _object(listed)
        raise _method_not_allowed()
    assert namespace is not None
    if method == "GET":
        return _object(store.get(res, namespace, name))
    if method == "PUT":
        body = _json_body(raw, content_type)
        return _object(store.replace(res, namespace, name, body, sub, _dry_run(args, "UpdateOptions")))
    if method == "PATCH":
        patch_type = _PATCH_TYPES.get(content_type)
        if patch_type is None:
            raise ApiError(failure(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(sorted(_PATCH_TYPES)),
            ))
        try:
            patch = json.loads(raw)
        except ValueError as exc:
            raise bad_request(f"error decoding patch: {exc}") from None
        obj = store.patch(res, namespace, name, patch_type, patch, sub, _dry_run(args, "PatchOptions"))
        return _object(obj)
    if method == "DELETE" and sub is None:
        code, body = store.delete(res, namespace, name, _delete_options(raw, args))
        return _object(body, code)
    raise _method_not_allowed()


def _serve_watch(store: Store, route: _Route, args: Any, options: dict) -> Response:
    try:
        watch = store.watch(
            route.resource,
            route.namespace,
            options["label_selector"],
            options["field_selector"],
            options["resource_version"],
            _parse_bool(args, "allowWatchBookmarks"),
        )
    except WatchError as exc:
        # Past admission, watch failures arrive as an ERROR event after HTTP 200.
        lines: Iterable[bytes] = iter([_event_line({"type": "ERROR", "object": exc.status})])
    else:
        sock = request.environ.get("werkzeug.socket")
        lines = _watch_stream(store, watch, _parse_int(args, "timeoutSeconds"), sock)
    return Response(lines, status=200, mimetype="application/json", headers=_headers(), direct_passthrough=True)


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
    ) -> None:
        self.host = host
        self.port = port
        self.token = token
        self.store = Store(tuple(resources), gc_delay=gc_delay, history_size=history_size, bookmark_interval=bookmark_interval)
        self.hooks = Hooks()
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
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace}}],
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
    ) -> Fault:
        return self.hooks.add_fault(verb, status, count, delay, path_contains, user, message)

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
    for field in _SERVER_SET_FIELDS:
        meta.pop(field, None)
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
) -> None:
    """Serve in the foreground until SIGTERM or SIGINT (call from the main thread)."""
    server = EmulatorServer(host, port, resources=tuple(resources), gc_delay=gc_delay)
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
