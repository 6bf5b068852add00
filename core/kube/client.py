"""The one Kubernetes client: every request jobttl makes to the API server goes through here.

Only this module imports ``kubernetes.client`` (an import-linter contract checks it, as kopf
checks "only the clients are allowed to talk to the Kubernetes API"). It uses the official
client's configuration, authentication and HTTP machinery, and:

- refuses any verb on any resource its component does not declare in
  `jobttl.core.domain.deploy.permissions.PERMISSIONS`, the table the RBAC manifests are tested against;
- decodes answers with orjson, and those that nest deeper than orjson reads with ijson's
  parse events (iterative), so one deep object neither disables a resync nor escapes deletion;
- feeds each answer's ``Date`` header to the reference clock (`jobttl.core.domain.decisions.clock`);
- sorts failures into the ways a caller must react: the object is gone, it changed
  (conflict), the list expired (restart it), retry later, or stop and tell a human.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import io
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import ijson
import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.domain.decisions.clock import ReferenceClock
from jobttl.core.runtime.config import ConfigError
from jobttl.core.domain.wire.identity import JobRef, check_name, check_namespace
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.domain.deploy.permissions import (
    CONFIGMAPS,
    CRD_GROUP,
    CRDS,
    EVENTS,
    JOBS,
    POD_LOGS,
    PODS,
    SUBJECT_ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    VERSION,
    permissions,
)


class ObjectGone(Exception):
    """404: the object does not exist (any more)."""


class Conflict(Exception):
    """409: a precondition (UID or resourceVersion) no longer matches; re-read and decide again."""


class NotServed(Exception):
    """404 for the resource itself, not an object: the API server does not serve this kind
    (its CRD is not installed, or not at this version). Nothing can be said about the object."""


class ListExpired(Exception):
    """410 on a paginated LIST or a watch: the token or resourceVersion is too old; list again."""


class TransientApiError(Exception):
    """The API server is unreachable, overloaded or failing; worth retrying with backoff."""


class PermanentApiError(Exception):
    """Retrying will not help (no permission, invalid request); a human must act."""

    status: int | None = None  # the HTTP status, when the API server answered one


class Undecodable(Exception):
    """The API server's answer is not JSON jobttl can read (nesting beyond any parser's reach, ...)."""


def load_api_client(kubeconfig: str | None = None, pool_size: int | None = None) -> client.ApiClient:
    """The standard loaders: an explicit KUBECONFIG, else the in-cluster service account, else ~/.kube/config.
    `pool_size`: connections kept open (one per thread that holds one, e.g. a watch per kind)."""
    configuration = client.Configuration()
    if pool_size is not None:
        configuration.connection_pool_maxsize = max(pool_size, configuration.connection_pool_maxsize)
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)
            return client.ApiClient(configuration)
        except config.ConfigException:
            pass  # not in a pod: fall through to ~/.kube/config
    try:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    except (config.ConfigException, OSError, ValueError) as exc:
        where = kubeconfig or "~/.kube/config"
        raise ConfigError(
            f"KUBECONFIG: cannot load Kubernetes credentials from {where} (and not running in a pod): {exc}"
        ) from exc
    return client.ApiClient(configuration)


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    continue_token: str | None
    resource_version: str | None
    undecodable: int = 0  # items that could not be read at all


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def _names_an_object(body: bytes) -> bool:
    try:
        details = jsoncodec.loads(body).get("details") or {}
    except (ValueError, AttributeError):
        return False
    return isinstance(details, dict) and bool(details.get("name"))


def _status_message(body: bytes, fallback: str) -> str:
    try:
        return str(jsoncodec.loads(body).get("message") or fallback)
    except (ValueError, AttributeError):
        return fallback


class KubeClient:
    """The API requests of one component, within its declared permissions."""

    def __init__(
        self,
        api_client: client.ApiClient,
        timeout: float = 30,
        component: str = "worker",
        metrics: Metrics | None = None,
        clock: ReferenceClock | None = None,
        granted: dict[str, frozenset[str]] | None = None,
    ):
        self.api_client = api_client
        self.timeout = timeout
        self.component = component
        self.granted = granted if granted is not None else permissions(component)
        self.metrics = metrics
        self.clock = clock or ReferenceClock()

    @property
    def host(self) -> str:
        return self.api_client.configuration.host

    @contextlib.contextmanager
    def single_tries(self) -> Iterator[KubeClient]:
        """This client's twin whose requests are each tried once: urllib3 (the client's transport)
        otherwise tries a GET that timed out three more times, so that a hanging API server costs
        four times the timeout. For reads that must give up within a bound (the start-up check of
        the kinds' CRDs); its connections are closed on leaving."""
        configuration = copy.deepcopy(self.api_client.configuration)
        configuration.retries = urllib3.Retry(total=None, connect=1, read=0, redirect=0, status=0, other=0)
        api_client = client.ApiClient(configuration)
        try:
            yield KubeClient(api_client, self.timeout, self.component, self.metrics, self.clock, self.granted)
        finally:
            api_client.close()

    # --- the one door ----------------------------------------------------------------------------
    def _request(
        self,
        verb: str,
        resource: str,
        method: str,
        path: str,
        what: str,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        stream: bool = False,
        timeout: float | None = None,
    ) -> Answer | Any:
        if verb not in self.granted.get(resource, ()):
            raise AssertionError(
                f"the {self.component} does not declare '{verb}' on {resource} in "
                "jobttl.core.domain.deploy.permissions.PERMISSIONS"
            )
        headers = {"Accept": "application/json", "Content-Type": content_type}
        request = self.api_client.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        sent = time.time()
        started = time.perf_counter()
        try:
            response = self.api_client.call_api(*request, _request_timeout=timeout or self.timeout)
            if stream:
                self._observe(response.getheaders(), sent)
                if not 200 <= response.status <= 299:
                    response.read()
                    raise self._error(response.status, response.data or b"", verb, what)
                return response.response
            response.read()
        except ApiException as exc:  # the client's own transport failures (SSL, ...)
            raise TransientApiError(f"cannot reach the API server to {verb} {what}: {exc.reason}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise TransientApiError(f"cannot reach the API server to {verb} {what}: {exc}") from exc
        finally:
            if self.metrics is not None:
                self.metrics.api_latency.labels(verb).observe(time.perf_counter() - started)
        headers = dict(response.getheaders())
        self._observe(headers, sent)
        data = response.data or b""
        if not 200 <= response.status <= 299:
            raise self._error(response.status, data, verb, what)
        return Answer(response.status, headers, data)

    def _observe(self, headers: Any, sent: float) -> None:
        self.clock.observe_api(dict(headers).get("Date") or dict(headers).get("date"), sent, time.time())

    def _error(self, status: int, body: bytes, verb: str, what: str) -> Exception:
        message = _status_message(body, f"HTTP {status}")
        if status == 404:
            # An object's NotFound names it (details.name); a resource the server does not serve
            # does not ("the server could not find the requested resource").
            return ObjectGone(message) if _names_an_object(body) else NotServed(f"{what}: {message}")
        if status == 409:
            return Conflict(message)
        if status == 410:
            return ListExpired(message)
        if status == 401:
            # Bound service-account tokens rotate: a 401 is usually a token being refreshed.
            return TransientApiError(f"401 from the API server on {verb} {what}: {message}")
        if status == 429 or status >= 500:
            return TransientApiError(f"{status} from the API server on {verb} {what}: {message}")
        if status == 403:
            error = PermanentApiError(
                f"{status} from the API server: jobttl's {self.component} needs '{verb}' on "
                f"{what}: grant it to its service account ({message})"
            )
        else:
            error = PermanentApiError(f"{status} from the API server on {verb} {what}: {message}")
        error.status = status
        return error

    def _json(self, answer: Answer, what: str) -> dict[str, Any]:
        try:
            value = _decode(answer.body)
        except ValueError as exc:
            raise Undecodable(f"{what}: {exc}") from None
        if not isinstance(value, dict):
            raise Undecodable(f"{what}: expected a JSON object, got {type(value).__name__}")
        return value

    # --- job objects -------------------------------------------------------------------------------
    @staticmethod
    def _collection(kind: JobKind, namespace: str | None) -> str:
        prefix = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
        if namespace is None:
            return f"{prefix}/{kind.plural}"
        return f"{prefix}/namespaces/{quote(check_namespace(namespace), safe='')}/{kind.plural}"

    def _object_path(self, kind: JobKind, namespace: str, name: str) -> str:
        return f"{self._collection(kind, namespace)}/{quote(check_name(name), safe='')}"

    @staticmethod
    def _in(kind: JobKind, namespace: str | None) -> str:
        return f"{kind.resource} in namespace {namespace!r}" if namespace else f"{kind.resource} in all namespaces"

    def get(self, kind: JobKind, namespace: str, name: str) -> dict[str, Any]:
        answer = self._request("get", JOBS, "GET", self._object_path(kind, namespace, name), self._in(kind, namespace))
        obj = self._json(answer, f"{kind.kind} {namespace}/{name}")
        if obj.get("kind") not in (kind.kind, None) or not isinstance(obj.get("metadata"), dict):
            raise Undecodable(
                f"{kind.kind} {namespace}/{name}: the API server answered a {obj.get('kind')!r}, not the object"
            )
        return obj

    def list_page(
        self,
        kind: JobKind,
        limit: int,
        token: str | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> Page:
        """One page of a paginated LIST, across all namespaces unless one is given."""
        query: list[tuple[str, Any]] = [("limit", limit)]
        if token:
            query.append(("continue", token))
        if label_selector:
            query.append(("labelSelector", label_selector))
        answer = self._request("list", JOBS, "GET", self._collection(kind, namespace), self._in(kind, namespace), query)
        return _page(answer.body)

    def pages(self, kind: JobKind, page_size: int = 500, restarts: int = 5, **options: Any) -> Iterator[Page]:
        """Every object of `kind`, a page at a time; the list restarts if its token expires (410).

        A restart yields the first page again: callers must treat items idempotently.
        """
        for _ in range(restarts):
            token = None
            try:
                while True:
                    page = self.list_page(kind, page_size, token, **options)
                    yield page
                    token = page.continue_token
                    if not token:
                        return
            except ListExpired:
                continue
        raise TransientApiError(f"listing {kind.resource} kept expiring ({restarts} restarts)")

    def watch(
        self, kind: JobKind, resource_version: str | None, timeout_seconds: int = 300
    ) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """Watch events (type, object) from `resource_version`; object None if undecodable.

        A 410 (as an HTTP status or an ERROR event) raises ListExpired: list again.
        """
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_seconds),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        response = self._request(
            "watch",
            JOBS,
            "GET",
            self._collection(kind, None),
            self._in(kind, None),
            query,
            stream=True,
            timeout=timeout_seconds + 30,
        )
        try:
            for line in _lines(response):
                event = _decode_line(line)
                if event is None:
                    yield "UNDECODABLE", None
                    continue
                kind_of_event, obj = event.get("type"), event.get("object")
                if kind_of_event == "ERROR":
                    code = (obj or {}).get("code")
                    message = (obj or {}).get("message", "watch error")
                    if code == 410:
                        raise ListExpired(message)
                    raise TransientApiError(f"watch of {kind.resource} ended with an error: {message}")
                yield kind_of_event, obj
        except urllib3.exceptions.HTTPError as exc:
            raise TransientApiError(f"the watch of {kind.resource} broke: {exc}") from exc
        finally:
            response.release_conn()

    def delete(
        self, kind: JobKind, namespace: str, name: str, uid: str, resource_version: str, propagation_policy: str
    ) -> dict[str, Any]:
        """DELETE guarded by the UID and resourceVersion we decided on; returns the API's answer.

        The UID precondition makes the API server refuse if the name now belongs to a
        re-created object; the resourceVersion one refuses if the object changed (say, its
        TTL was extended) between our read and this delete. The answer is a `Status` when
        the object is gone at once, or the object itself (with a deletionTimestamp) while
        finalizers (Foreground's, or others') hold it.
        """
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": propagation_policy,
            "preconditions": {"uid": uid, "resourceVersion": resource_version},
        }
        answer = self._request(
            "delete", JOBS, "DELETE", self._object_path(kind, namespace, name), self._in(kind, namespace), body=body
        )
        try:
            return jsoncodec.loads(answer.body) if answer.body else {}
        except jsoncodec.DecodeError:
            return {}

    def get_crd(self, kind: JobKind, timeout: float | None = None) -> dict[str, Any] | None:
        """The CustomResourceDefinition defining `kind`, or None when there is none (404): not
        installed, or served some other way (an aggregated API). Only the enabled kinds' CRDs are
        asked for (RBAC grants them by name). `timeout`: this read's, else the client's."""
        name = kind.crd
        if name is None:
            return None
        path = f"/apis/{CRD_GROUP}/v1/{CRDS}/{quote(check_name(name), safe='')}"
        try:
            answer = self._request("get", CRDS, "GET", path, f"{CRDS}.{CRD_GROUP} {name!r}", timeout=timeout)
        except (ObjectGone, NotServed):
            return None
        return self._json(answer, f"CustomResourceDefinition {name}")

    def version(self) -> dict[str, Any]:
        """GET /version: cheap, always allowed; its Date header measures the API server's clock."""
        return self._json(self._request("get", VERSION, "GET", "/version", "/version"), "/version")

    # --- someone else's identity and rights (jobttl.core.kube.access) -----------------------------------
    def token_review(self, token: str, audiences: tuple[str, ...] = ()) -> dict[str, Any]:
        """POST a TokenReview (authentication.k8s.io/v1); its `status` (authenticated, user, error)."""
        spec: dict[str, Any] = {"token": token}
        if audiences:
            spec["audiences"] = list(audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        answer = self._request(
            "create",
            TOKEN_REVIEWS,
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            "tokenreviews.authentication.k8s.io",
            body=body,
        )
        return self._json(answer, "TokenReview").get("status") or {}

    def subject_access_review(
        self, user: str, groups: list[str], uid: str | None, extra: dict[str, Any], attributes: dict[str, str]
    ) -> dict[str, Any]:
        """POST a SubjectAccessReview (authorization.k8s.io/v1) of `attributes` (resourceAttributes)
        for that user; its `status` (allowed, denied, reason)."""
        spec: dict[str, Any] = {"user": user, "groups": groups, "resourceAttributes": attributes}
        if uid:
            spec["uid"] = uid
        if extra:
            spec["extra"] = extra
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        answer = self._request(
            "create",
            SUBJECT_ACCESS_REVIEWS,
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            "subjectaccessreviews.authorization.k8s.io",
            body=body,
        )
        return self._json(answer, "SubjectAccessReview").get("status") or {}

    # --- core: Events, pods, logs ---------------------------------------------------------------------
    def create_event(
        self, ref: JobRef, reason: str, message: str, warning: bool = False, action: str = "Delete"
    ) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock.now()))
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{ref.name[:200]}.", "namespace": ref.namespace},
            "involvedObject": {
                "apiVersion": ref.api_version,
                "kind": ref.kind,
                "name": ref.name,
                "namespace": ref.namespace,
                "uid": ref.uid,
            },
            "reason": reason,
            "message": message[:1024],  # the API server rejects very long messages
            "type": "Warning" if warning else "Normal",
            "action": action,
            "source": {"component": "jobttl"},
            "reportingComponent": "jobttl",
            "reportingInstance": "jobttl",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        path = f"/api/v1/namespaces/{quote(check_namespace(ref.namespace), safe='')}/events"
        self._request("create", EVENTS, "POST", path, "events", body=event)

    def list_events(self, ref: JobRef) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{quote(check_namespace(ref.namespace), safe='')}/events"
        selector = f"involvedObject.uid={ref.uid}"
        answer = self._request("list", EVENTS, "GET", path, "events", [("fieldSelector", selector)])
        return _page(answer.body).items

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{quote(check_namespace(namespace), safe='')}/pods"
        answer = self._request("list", PODS, "GET", path, "pods", [("labelSelector", label_selector)])
        return _page(answer.body).items

    def pod_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        tail_lines: int,
        previous: bool = False,
        limit_bytes: int | None = None,
    ) -> Iterator[bytes]:
        """A container's log as it arrives, in chunks: the caller decides how much of it to hold."""
        path = (
            f"/api/v1/namespaces/{quote(check_namespace(namespace), safe='')}/pods/"
            f"{quote(check_name(pod), safe='')}/log"
        )
        query: list[tuple[str, Any]] = [("container", container), ("tailLines", tail_lines)]
        if previous:
            query.append(("previous", "true"))
        if limit_bytes is not None:
            query.append(("limitBytes", limit_bytes))
        response = self._request("get", POD_LOGS, "GET", path, "pods/log", query, stream=True)
        try:
            yield from response.stream(64 * 1024, decode_content=True)
        except urllib3.exceptions.HTTPError as exc:
            raise TransientApiError(f"reading the log of {pod}/{container} broke: {exc}") from exc
        finally:
            response.release_conn()

    # --- jobttl's own install record (jobttl.core.services.install) ---------------------------------------------
    def _configmaps(self, namespace: str) -> str:
        return f"/api/v1/namespaces/{quote(check_namespace(namespace), safe='')}/configmaps"

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap, or None when there is none."""
        path = f"{self._configmaps(namespace)}/{quote(check_name(name), safe='')}"
        try:
            return self._json(self._request("get", CONFIGMAPS, "GET", path, "configmaps"), "configmaps")
        except ObjectGone:
            return None

    def create_configmap(
        self, namespace: str, name: str, data: dict[str, str], labels: dict[str, str] | None = None
    ) -> None:
        """Create it; Conflict (409 AlreadyExists) when it exists."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "data": data,
        }
        self._request("create", CONFIGMAPS, "POST", self._configmaps(namespace), "configmaps", body=body)

    def replace_configmap(self, found: dict[str, Any], data: dict[str, str]) -> None:
        """Replace the data of a ConfigMap as read (`found`), if it is still at the resourceVersion read
        (the API server checks it); Conflict otherwise."""
        meta = found["metadata"]
        body = {**found, "data": data}
        path = f"{self._configmaps(meta['namespace'])}/{quote(check_name(meta['name']), safe='')}"
        self._request("update", CONFIGMAPS, "PUT", path, "configmaps", body=body)

    def delete_pod(self, namespace: str, pod: str, uid: str) -> None:
        path = f"/api/v1/namespaces/{quote(check_namespace(namespace), safe='')}/pods/{quote(check_name(pod), safe='')}"
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        self._request("delete", PODS, "DELETE", path, "pods", body=body)


def _page(body: bytes) -> Page:
    """A list page, however deep its objects nest (see `_decode`)."""
    try:
        with _collector_paused():
            data = _decode(body)
    except ValueError as exc:
        raise Undecodable(f"a list page is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Undecodable(f"a list page must be a JSON object, got {type(data).__name__}")
    meta = data.get("metadata") or {}
    items = data.get("items") or []
    objects = [i for i in items if isinstance(i, dict)]
    return Page(
        objects,
        meta.get("continue") or None,
        meta.get("resourceVersion"),
        undecodable=len(items) - len(objects) if isinstance(items, list) else 0,
    )


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic collector off while a list page is decoded.

    A 500-object page is a few million new containers, none of them garbage, and every 700
    allocations start a collection that walks the young ones again (and every so often all
    of them): three quarters of a page's decode time went to collections that found nothing.
    Decoding makes no cycles, so nothing is lost by leaving them to the first collection after
    it. The collector is process-wide: while it is off, other threads' garbage cycles (a resync
    reconciling the page before, jobttl.core.kube.prefetch) wait for that collection too; it is back
    on when the last overlapping decode is done, and stays off if someone else had turned it off.
    """
    global _pausing, _resume
    with _pause_lock:
        if _pausing == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pausing += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pausing -= 1
            if _pausing == 0 and _resume:
                gc.enable()


_pause_lock = threading.Lock()
_pausing = 0  # decodes under way with the collector paused
_resume = False  # whether it was on before the first of them


def _collector_after_fork() -> None:
    """A child forked during a decode (RQ forks its scheduler while the follower may be
    listing pods) has no decode under way: its collector is back on, its lock free."""
    global _pause_lock, _pausing
    _pause_lock = threading.Lock()
    if _pausing:
        _pausing = 0
        if _resume:
            gc.enable()


os.register_at_fork(after_in_child=_collector_after_fork)


def _decode(body: bytes) -> Any:
    """orjson; an answer nested deeper than orjson reads is read again from ijson's parse events.

    The API server accepts objects far deeper than 1,024 levels (Argo's CRD preserves unknown
    fields), and such an object must still be decided and deleted like any other. ijson's
    events, built into objects here, neither recurse nor (unlike its prefixed `items`, whose
    path strings grow with the depth) take quadratic time. Raises ValueError if neither can.
    """
    try:
        return jsoncodec.loads(body)
    except jsoncodec.DecodeError as exc:
        builder = ijson.ObjectBuilder()
        try:
            for event, value in ijson.basic_parse(io.BytesIO(body), use_float=True):
                builder.event(event, value)
        except ijson.JSONError:
            raise exc from None
        if not hasattr(builder, "value"):
            raise exc from None
        return builder.value


def _decode_line(line: bytes) -> dict[str, Any] | None:
    try:
        event = _decode(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _lines(response: Any) -> Iterator[bytes]:
    """Newline-delimited watch events from a streaming HTTP response."""
    pending = b""
    for chunk in response.stream(64 * 1024, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())
    if pending.strip():
        yield pending
