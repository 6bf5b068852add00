"""In-memory object store with kube-apiserver semantics (no HTTP here).

What is reproduced, and from where (kubernetes/apiserver unless noted):

* One global, monotonically increasing ``resourceVersion`` (etcd's revision),
  bumped by every write and carried as a string. Writes that change nothing
  are not persisted and keep the old resourceVersion (``GuaranteedUpdate``).
* Custom-resource strategy (apiextensions-apiserver ``customresource``): with
  the ``status`` subresource, **create drops ``status``**, main-resource
  updates keep the stored status, and ``/status`` updates change only status.
  ``generation`` starts at 1 and is bumped whenever anything outside
  ``metadata`` changes. Updates must carry the current ``resourceVersion``
  (``AllowUnconditionalUpdate`` is false for custom resources; built-in kinds
  allow an update without one) and cannot
  create (``AllowCreateOnUpdate`` is false). So tests that want a finished
  job create it first and then write its status through ``/status``.
* Deletion (``registry/generic/registry/store.go``): DeleteOptions
  validation, uid/resourceVersion preconditions, the garbage collector's
  ``orphan`` / ``foregroundDeletion`` finalizers derived from the propagation
  policy, "marked as deleting" objects (``deletionTimestamp``,
  ``deletionGracePeriodSeconds: 0``, generation bump) and the
  ``Status`` Success body returned for custom resources deleted at once.
  (pods: the deleted object itself, as their registry returns it).
  An update that removes the last finalizer of a deleting object deletes it.
  The garbage collector and namespace controller are emulated in ``gc.py``.
* Namespaces, when served: the four a new cluster has exist from the start,
  and a namespace is created on first use (the ``NamespaceAutoProvision``
  admission plugin); creating in a terminating namespace is forbidden
  (``NamespaceLifecycle``). Deleting a namespace makes it ``Terminating``
  until what it contains is gone.
* Server-side apply (``apply.py``) and strategic merge patch (``patches.py``).
* Lists read a consistent snapshot: ``limit``/``continue`` pages all carry the
  resourceVersion of the first page (etcd reads at a fixed revision). The
  store keeps the last ``history_size`` events; they replay watches and
  rebuild older snapshots. Anything older is "compacted": continue tokens
  then fail with 410 Expired (with a fresh token to continue inconsistently,
  as ``storage/etcd3`` does) and watches get a 410 ERROR event.
* Watches filter by namespace and selectors like the watch cache does: an
  object that stops matching is sent as DELETED, one that starts matching as
  ADDED.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import copy
import json
import random
import re
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from . import apply as ssa
from .gc import FOREGROUND, GC_FINALIZERS, ORPHAN, GarbageCollector
from .logs import Entry, PodLogs
from .patches import PatchError, json_patch, merge_patch, strategic_merge_patch
from .crds import definitions, served_crd
from .resources import CUSTOM_RESOURCE_DEFINITION, DEFAULT_RESOURCES, Resource, qualify
from .selectors import FieldSelector, LabelSelector, SelectorError, label_key_error, label_value_error
from .validation import prune, strict_message

__all__ = ["FOREGROUND", "GC_FINALIZERS", "ORPHAN", "ApiError", "Store", "merge_patch", "json_patch"]
# The namespaces a new cluster has.
SYSTEM_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")

_DNS1123_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
OPTIMISTIC_LOCK_MSG = "the object has been modified; please apply your changes to the latest version and try again"
_INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - "
    "objects that were created, modified, or deleted between the time the first chunk was returned and "
    "now may show up in the list."
)
# Characters of names.SimpleNameGenerator (no vowels, no confusable digits).
_GENERATE_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
# A watcher that falls this far behind is dropped, as the watch cache drops
# unresponsive watchers instead of buffering without bound.
_MAX_WATCH_BACKLOG = 100_000


# ---------------------------------------------------------------------------
# Status bodies (k8s.io/apimachinery/pkg/api/errors)


class ApiError(Exception):
    """An API failure carrying the ``Status`` body the server sends."""

    def __init__(self, status: dict, headers: dict[str, str] | None = None) -> None:
        super().__init__(status.get("message", ""))
        self.status = status
        self.code: int = status["code"]
        self.headers = headers or {}


def _merge_string_data(secret: dict) -> None:
    """A Secret's write-only ``stringData`` into its ``data``, base64-encoded, over any key there
    (Convert_v1_Secret_To_core_Secret): it is never stored or returned."""
    string_data = secret.pop("stringData")
    if not isinstance(string_data, dict) or not all(isinstance(v, str) for v in string_data.values()):
        raise bad_request("stringData must be a map of strings")
    data = secret.get("data") if isinstance(secret.get("data"), dict) else {}
    secret["data"] = {**data, **{k: base64.b64encode(v.encode()).decode() for k, v in string_data.items()}}


# The annotation of the BOOKMARK that ends a streaming list's initial events (metav1.InitialEventsAnnotationKey).
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class WatchError(ApiError):
    """A failure reported inside an established watch as an ERROR event."""


def failure(code: int, reason: str, message: str, details: dict | None = None, **metadata: Any) -> dict:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": metadata,
        "status": "Failure",
        "message": message,
    }
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def status_details(name: str, group: str, kind: str, **extra: Any) -> dict:
    """``StatusDetails``; empty name and group are omitted, as Go's omitempty does."""
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = kind
    details.update(extra)
    return details


def bad_request(message: str) -> ApiError:
    return ApiError(failure(400, "BadRequest", message))


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(
        failure(404, "NotFound", f'{res.qualified} "{name}" not found', status_details(name, res.group, res.plural))
    )


def conflict(res_name: str, group: str, name: str, reason: str) -> ApiError:
    """``errors.NewConflict``: ``res_name`` is the resource (or, for delete preconditions, the kind)."""
    message = f'Operation cannot be fulfilled on {qualify(res_name, group)} "{name}": {reason}'
    return ApiError(failure(409, "Conflict", message, status_details(name, group, res_name)))


def expired(message: str, continue_token: str = "") -> ApiError:
    metadata = {"continue": continue_token} if continue_token else {}
    return ApiError(failure(410, "Expired", message, **metadata))


def internal_error(message: str) -> ApiError:
    return ApiError(
        failure(500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]})
    )


def too_large_resource_version(requested: int, current: int) -> dict:
    """The watch cache's answer to a resourceVersion it has not reached (504)."""
    return failure(
        504,
        "Timeout",
        f"Too large resource version: {requested}, current: {current}",
        {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
    )


@dataclass(frozen=True)
class FieldError:
    """One ``field.Error``: ``kind`` is Invalid, Required, Forbidden or NotSupported."""

    kind: str
    field: str
    detail: str
    value: Any = None

    def body(self) -> str:
        if self.kind == "Required":
            return f"Required value: {self.detail}"
        if self.kind == "Forbidden":
            return f"Forbidden: {self.detail}"
        if self.kind == "NotSupported":
            return f"Unsupported value: {_go_value(self.value)}: supported values: {self.detail}"
        return f"Invalid value: {_go_value(self.value)}: {self.detail}"


class _Literal(str):
    """A value Go's ``%#v`` prints unquoted, e.g. the uint64 resourceVersion ``0x0``."""


def _go_value(value: Any) -> str:
    if isinstance(value, _Literal):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[]string{" + ", ".join(json.dumps(v) for v in value) + "}"
    return str(value)


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """``errors.NewInvalid`` (422) for the GroupKind ``kind.group``."""
    parts = [f"{e.field}: {e.body()}" for e in errors]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    causes = [{"reason": f"FieldValue{e.kind}", "message": e.body(), "field": e.field} for e in errors]
    message = f'{qualify(kind, group)} "{name}" is invalid: {summary}'
    return ApiError(failure(422, "Invalid", message, status_details(name, group, kind, causes=causes)))


def success(res: Resource, obj: dict) -> dict:
    """What ``finalizeDelete`` returns for custom resources: no object, just who was deleted."""
    meta = obj["metadata"]
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": status_details(meta["name"], res.group, res.plural, uid=meta["uid"]),
    }


# ---------------------------------------------------------------------------
# Helpers


def now_rfc3339() -> str:
    """metav1.Time on the wire: RFC 3339, whole seconds, UTC ``Z``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_rv(value: str) -> int:
    try:
        rv = int(value)
    except ValueError:
        rv = -1
    if rv < 0:
        raise bad_request(f'invalid resource version: strconv.ParseUint: parsing "{value}": invalid syntax')
    return rv


def _encode_continue(start: str, rv: int) -> str:
    token = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[str, int]:
    """Inverse of :func:`_encode_continue`, with ``storage.DecodeContinue``'s messages."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise bad_request(f"invalid continue token: continue key is not valid: {exc}") from None
    if (
        not isinstance(data, dict)
        or data.get("v") != "meta.k8s.io/v1"
        or not isinstance(data.get("rv"), int)
        or data["rv"] == 0
    ):
        raise bad_request(
            "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        )
    start = data.get("start")
    if not isinstance(start, str) or not start:
        raise bad_request("invalid continue token: continue key is not valid: encoded start key empty")
    return start, data["rv"]


def _key(namespace: str, name: str) -> str:
    """The object's etcd key below the resource prefix; lists are ordered by it."""
    return f"{namespace}/{name}"


def _selector(cls: type, text: str, res: Resource | None = None) -> Any:
    try:
        if res is None:
            return cls(text)
        return cls(text, ("metadata.name", "metadata.namespace", *res.selectable_fields), builtin=res.builtin)
    except SelectorError as exc:
        raise bad_request(str(exc)) from None


# Built-in field selectors whose value is not at the path they are named after.
_FIELD_ALIASES = {
    ("Job", "status.successful"): "status.succeeded",
    ("Event", "source"): "source.component",
    ("Event", "reportingComponent"): "reportingController",
}


def _field_value(obj: dict, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _fields(res: Resource, obj: dict) -> dict[str, str]:
    """The values field selectors compare (``ToSelectableFields``)."""
    meta = obj["metadata"]
    fields = {"metadata.name": meta["name"], "metadata.namespace": meta.get("namespace", "")}
    for name in res.selectable_fields:
        fields[name] = _field_value(obj, _FIELD_ALIASES.get((res.kind, name), name))
    return fields


def _gc_finalizers(current: list[str], options: dict, default: str = "Background") -> list[str]:
    """Finalizers after applying a DeleteOptions' propagation choice.

    Mirrors ``shouldOrphanDependents`` / ``shouldDeleteDependents``: an
    explicit option wins, else a GC finalizer already on the object, else the
    kind's default policy (background for custom resources, orphan for
    batch/v1 Jobs).
    """
    policy, orphan_opt = options.get("propagationPolicy"), options.get("orphanDependents")
    existing = [f for f in current if f in GC_FINALIZERS]
    if orphan_opt is not None:
        orphan, foreground = orphan_opt, False
    elif policy is not None:
        orphan, foreground = policy == "Orphan", policy == "Foreground"
    else:
        orphan = existing[0] == ORPHAN if existing else default == "Orphan"
        foreground = FOREGROUND in current and not orphan
    wanted = [f for f in current if f not in GC_FINALIZERS]
    wanted += [ORPHAN] * orphan + [FOREGROUND] * foreground
    return current if set(wanted) == set(current) else wanted


def _patched(current: dict, patch_type: str, patch: Any, schema: dict | None) -> Any:
    """``current`` with ``patch`` applied; ValueError for a malformed patch, PatchError when it does not apply."""
    if patch_type == "json":
        return json_patch(current, patch)
    if not isinstance(patch, dict):
        raise ValueError(f"a {patch_type} merge patch must be a JSON object")
    if patch_type == "strategic":
        return strategic_merge_patch(current, patch, schema)
    return merge_patch(current, patch)


def _log_container(pod: dict, container: str) -> str:
    """``validateContainer`` of the pod log REST: the container to read, or a 400."""
    spec, name = pod.get("spec") or {}, pod["metadata"]["name"]
    groups = {
        key: [c.get("name", "") for c in spec.get(key) or []]
        for key in ("containers", "initContainers", "ephemeralContainers")
    }
    if container:
        if not any(container in names for names in groups.values()):
            raise bad_request(f"container {container} is not valid for pod {name}")
        return container
    if len(groups["containers"]) == 1:
        return groups["containers"][0]
    if not groups["containers"]:
        raise bad_request(f"a container name must be specified for pod {name}")
    message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(groups['containers'])}]"
    for key, what in (("initContainers", "init"), ("ephemeralContainers", "ephemeral")):
        if groups[key]:
            message += f" or one of the {what} containers: [{' '.join(groups[key])}]"
    raise bad_request(message)


# ---------------------------------------------------------------------------
# Events and watches


@dataclass
class _Event:
    rv: int
    resource: Resource
    type: str  # ADDED, MODIFIED, DELETED
    key: str
    obj: dict  # what watchers see (for DELETED: the last state, at the deletion's resourceVersion)
    prev: dict | None  # the stored state before the event (None for ADDED)


class Watch:
    """One open watch: a queue the store fills, in resourceVersion order, under its lock."""

    def __init__(
        self, res: Resource, namespace: str | None, labels: LabelSelector, fields: FieldSelector, bookmarks: bool
    ) -> None:
        self.resource = res
        self.namespace = namespace
        self.bookmarks = bookmarks
        self._labels = labels
        self._fields = fields
        self._queue: deque[dict] = deque()
        self._cond = threading.Condition()
        self.closed = False
        self.aborted = False  # closed by dropping the connection instead of ending the response

    def matches(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if self.namespace is not None and (meta.get("namespace") or "") != self.namespace:
            return False
        return self._labels.matches(meta.get("labels")) and self._fields.matches(_fields(self.resource, obj))

    def _push(self, event_type: str, obj: dict) -> None:
        with self._cond:
            self._queue.append({"type": event_type, "object": obj})
            self._cond.notify()

    def _offer(self, event: _Event) -> None:
        """Translate a store event for this watcher's filter (cacheWatcher.convertToWatchEvent)."""
        if event.resource is not self.resource:
            return
        if event.type == "MODIFIED":
            now, before = self.matches(event.obj), self.matches(event.prev)
            if now:
                self._push("MODIFIED" if before else "ADDED", event.obj)
            elif before:
                deleted = copy.deepcopy(event.prev)
                deleted["metadata"]["resourceVersion"] = str(event.rv)
                self._push("DELETED", deleted)
        elif self.matches(event.obj):
            self._push(event.type, event.obj)
        if len(self._queue) > _MAX_WATCH_BACKLOG:
            self.close(abort=True)

    def next(self, timeout: float | None) -> dict | None:
        """The next event, or None on timeout or once closed."""
        with self._cond:
            if not self._queue and not self.closed:
                self._cond.wait(timeout)
            if self.closed or not self._queue:
                return None
            return self._queue.popleft()

    def idle(self) -> bool:
        with self._cond:
            return not self._queue

    def close(self, abort: bool = False) -> None:
        with self._cond:
            self.closed = True
            self.aborted = self.aborted or abort
            self._cond.notify_all()


# ---------------------------------------------------------------------------
# The store


class Store:
    """Thread-safe state of the emulated API server.

    Methods take already-decoded JSON and return JSON-ready dicts (copies the
    caller may keep); failures raise :class:`ApiError` with the ``Status``
    body kube-apiserver would send.
    """

    def __init__(
        self,
        resources: tuple[Resource, ...] | list[Resource] = DEFAULT_RESOURCES,
        gc_delay: float = 0.5,
        history_size: int = 1000,
        bookmark_interval: float = 60.0,
    ) -> None:
        self.resources = tuple(resources)
        # The CRDs the kinds came from, served under apiextensions.k8s.io/v1 as the real server does.
        self._definitions = definitions(self.resources)
        if self._definitions and self.find("apiextensions.k8s.io", "v1", "customresourcedefinitions") is None:
            self.resources += (CUSTOM_RESOURCE_DEFINITION,)
        self.gc_delay = gc_delay
        self.history_size = max(1, history_size)
        self.bookmark_interval = bookmark_interval
        self._lock = threading.RLock()
        self._rv = 1
        self._floor = 1  # compaction point: resourceVersions older than this are gone
        self._objects: dict[Resource, dict[str, dict]] = {r: {} for r in self.resources}
        self._events: deque[_Event] = deque()
        self._watches: set[Watch] = set()
        self.gc = GarbageCollector(self, gc_delay)
        self.logs = PodLogs()
        self._namespaces = self.find("", "v1", "namespaces")
        self._create_system_namespaces()
        self._create_definitions()

    # -- lookup ------------------------------------------------------------

    def find(self, group: str, version: str, plural: str) -> Resource | None:
        return next((r for r in self.resources if (r.group, r.version, r.plural) == (group, version, plural)), None)

    def resource_for(self, api_version: str, kind: str) -> Resource | None:
        return next((r for r in self.resources if (r.api_version, r.kind) == (api_version, kind)), None)

    def namespace_object(self, name: str) -> dict | None:
        """The stored Namespace ``name``, when namespaces are served."""
        if self._namespaces is None or not name:
            return None
        return self._objects[self._namespaces].get(_key("", name))

    # -- namespaces --------------------------------------------------------

    def _create_system_namespaces(self) -> None:
        with self._lock:
            for name in SYSTEM_NAMESPACES:
                self._provision_namespace(name)

    def _create_definitions(self) -> None:
        """The CRDs of the kinds served from CRD files, established (they are there from the start, and after a reset)."""
        res = self.find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        if res is None:
            return
        with self._lock:
            for crd in self._definitions:
                body, status = served_crd(crd, now_rfc3339())
                created = self._create(res, "", body, dry_run=False)
                self._update(res, "", created["metadata"]["name"], {**created, "status": status}, "status", False)

    def _provision_namespace(self, name: str) -> None:
        """Create the Namespace ``name`` if namespaces are served and it does not exist; lock held."""
        if self._namespaces is None or self.namespace_object(name) is not None:
            return
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self._create(self._namespaces, "", namespace, dry_run=False)

    def _admit_namespace(self, res: Resource, namespace: str, name: str) -> None:
        """NamespaceAutoProvision, then NamespaceLifecycle: no new content in a terminating namespace."""
        if not res.namespaced or self._namespaces is None:
            return
        self._provision_namespace(namespace)
        stored = self.namespace_object(namespace)
        if stored is not None and stored["metadata"].get("deletionTimestamp"):
            cause = {
                "reason": "NamespaceTerminating",
                "message": f"namespace {namespace} is being terminated",
                "field": "metadata.namespace",
            }
            message = f'{res.qualified} "{name}" is forbidden: unable to create new content in namespace {namespace} because it is being terminated'
            raise ApiError(
                failure(403, "Forbidden", message, status_details(name, res.group, res.plural, causes=[cause]))
            )

    # -- reads -------------------------------------------------------------

    def get(self, res: Resource, namespace: str, name: str) -> dict:
        with self._lock:
            return copy.deepcopy(self._existing(res, namespace, name))

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
        resource_version_match: str = "",
    ) -> dict:
        labels = _selector(LabelSelector, label_selector)
        fields = _selector(FieldSelector, field_selector, res)
        start = ""
        with self._lock:
            if continue_token:
                start, token_rv = _decode_continue(continue_token)
                if resource_version not in ("", "0"):
                    raise bad_request("specifying resource version is not allowed when using continue")
                snapshot_rv = token_rv if token_rv > 0 else self._rv  # rv -1: continue at the latest state
                if snapshot_rv < self._floor:
                    raise expired(_INCONSISTENT_CONTINUE, _encode_continue(start, -1))
            else:
                snapshot_rv = self._list_rv(resource_version, resource_version_match)
            objects = self._snapshot(res, snapshot_rv)
            prefix = "" if namespace is None else namespace + "/"
            keys = sorted(k[len(prefix) :] for k in objects if k.startswith(prefix))
            items: list[dict] = []
            next_token, remaining, last = "", None, ""
            for position in range(bisect.bisect_left(keys, start), len(keys)):
                if limit and len(items) >= limit:
                    # Like storage/etcd3: continue after the last key examined.
                    next_token = _encode_continue(last + "\x00", snapshot_rv)
                    if labels.empty and fields.empty:
                        remaining = len(keys) - position
                    break
                last = keys[position]
                obj = objects[prefix + last]
                if labels.matches(obj["metadata"].get("labels")) and fields.matches(_fields(res, obj)):
                    items.append(obj)
            metadata: dict[str, Any] = {"resourceVersion": str(snapshot_rv)}
            if next_token:
                metadata["continue"] = next_token
            if remaining is not None:
                metadata["remainingItemCount"] = remaining
            return {
                "apiVersion": res.api_version,
                "kind": res.list_kind,
                "metadata": metadata,
                "items": copy.deepcopy(items),
            }

    def _list_rv(self, resource_version: str, match: str) -> int:
        """The snapshot a list without continue reads (API concepts: "Semantics for get and list")."""
        if match not in ("", "Exact", "NotOlderThan"):
            raise invalid(
                "ListOptions",
                "meta.k8s.io",
                "",
                [FieldError("NotSupported", "resourceVersionMatch", '"Exact", "NotOlderThan", ""', match)],
            )
        if match and not resource_version:
            raise invalid(
                "ListOptions",
                "meta.k8s.io",
                "",
                [
                    FieldError(
                        "Forbidden",
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    )
                ],
            )
        if resource_version in ("", "0"):
            return self._rv
        requested = _parse_rv(resource_version)
        if requested > self._rv:
            raise ApiError(too_large_resource_version(requested, self._rv))
        if match != "Exact":
            return self._rv  # "not older than": the latest state satisfies it
        if requested < self._floor:
            raise expired("The resourceVersion for the provided list is too old.")
        return requested

    def _snapshot(self, res: Resource, rv: int) -> dict[str, dict]:
        """Objects of ``res`` as of ``rv`` (>= the compaction point), undoing newer events."""
        objects = self._objects[res]
        if rv >= self._rv:
            return objects
        objects = dict(objects)
        for event in reversed(self._events):
            if event.rv <= rv:
                break
            if event.resource is res:
                if event.prev is None:
                    objects.pop(event.key, None)
                else:
                    objects[event.key] = event.prev
        return objects

    # -- writes ------------------------------------------------------------

    def create(self, res: Resource, namespace: str, body: Any, dry_run: bool = False, strict: bool = False) -> dict:
        """POST; ``strict``: unknown fields are an error rather than dropped (``fieldValidation=Strict``)."""
        with self._lock:
            return self._create(res, namespace, self._typed_body(res, body, namespace, strict), dry_run)

    def _create(
        self, res: Resource, namespace: str, body: Any, dry_run: bool, managed_fields: list | None = None
    ) -> dict:
        """``Store.Create`` with the resource's create strategy; lock held."""
        obj = self._typed_body(res, body, namespace)
        meta = obj["metadata"]
        if not meta.get("name") and isinstance(meta.get("generateName"), str) and meta["generateName"]:
            meta["name"] = self._generate_name(res, namespace, meta["generateName"])
        name = meta.get("name") or ""
        self._check_create(res, namespace, meta)
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "managedFields"):
            meta.pop(field, None)
        if managed_fields:
            meta["managedFields"] = managed_fields
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
        if res.status_subresource:
            obj.pop("status", None)
        if res is self._namespaces:
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = name
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
        if dry_run:
            return copy.deepcopy(obj)
        self._admit_namespace(res, namespace, name)
        return copy.deepcopy(self._commit(res, _key(namespace, name), obj, None))

    def _check_create(self, res: Resource, namespace: str, meta: dict) -> None:
        name = meta.get("name") or ""
        errors = self._validate_meta(meta)
        if errors:
            raise invalid(res.kind, res.group, name, errors)
        if meta.get("resourceVersion"):
            raise internal_error("resourceVersion should not be set on objects to be created")
        existing = self._objects[res].get(_key(namespace, name))
        if existing is not None:
            message = f'{res.qualified} "{name}" already exists'
            if existing["metadata"].get("deletionTimestamp"):
                message = "object is being deleted: " + message
            raise ApiError(failure(409, "AlreadyExists", message, status_details(name, res.group, res.plural)))

    def replace(
        self,
        res: Resource,
        namespace: str,
        name: str,
        body: Any,
        subresource: str | None = None,
        dry_run: bool = False,
        strict: bool = False,
    ) -> dict:
        """PUT on the object or on its ``status`` subresource."""
        obj = self._typed_body(res, body, namespace, strict)
        with self._lock:
            return copy.deepcopy(self._update(res, namespace, name, obj, subresource, dry_run))

    def patch(
        self,
        res: Resource,
        namespace: str,
        name: str,
        patch_type: str,
        patch: Any,
        subresource: str | None = None,
        dry_run: bool = False,
        strict: bool = False,
    ) -> dict:
        """PATCH with ``merge`` (RFC 7386), ``json`` (RFC 6902) or ``strategic`` semantics."""
        with self._lock:
            current = copy.deepcopy(self._existing(res, namespace, name))
            try:
                patched = _patched(current, patch_type, patch, res.schema)
            except ValueError as exc:
                raise bad_request(str(exc)) from None
            except PatchError as exc:
                # The apiserver's patcher reports patch application failures this way.
                raise ApiError(
                    failure(
                        422,
                        "Invalid",
                        "the server rejected our request due to an error in our request",
                        {"causes": [{"reason": "UnexpectedServerResponse", "message": str(exc)}]},
                    )
                ) from None
            obj = self._typed_body(res, patched, namespace, strict)
            return copy.deepcopy(self._update(res, namespace, name, obj, subresource, dry_run))

    def apply(
        self,
        res: Resource,
        namespace: str,
        name: str,
        body: Any,
        manager: str,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
        strict: bool = False,
    ) -> tuple[int, dict]:
        """Server-side apply (see ``apply.py``); returns 201 and the object when it had to create it."""
        if not manager:
            raise invalid(
                "PatchOptions",
                "meta.k8s.io",
                "",
                [FieldError("Required", "fieldManager", "is required for apply patch")],
            )
        if not isinstance(body, dict):
            raise bad_request("error decoding YAML: the apply patch must be an object")
        with self._lock:
            applied = self._typed_body(res, body, namespace, strict)
            if applied["metadata"].get("name") != name:
                raise bad_request(
                    f"the name of the object ({applied['metadata'].get('name', '')}) does not match the name on the URL ({name})"
                )
            current = self._objects[res].get(_key(namespace, name))
            if current is None and subresource:
                raise not_found(res, name)
            skip_status = res.status_subresource and subresource != "status"
            try:
                merged = ssa.apply(current or {}, applied, manager, force, res.api_version, now_rfc3339(), skip_status)
            except ssa.ApplyConflict as exc:
                causes = [
                    {"reason": "FieldManagerConflict", "message": f'conflict with "{m}"', "field": ssa.field_path(p)}
                    for m, p in exc.conflicts
                ]
                raise ApiError(failure(409, "Conflict", str(exc), {"causes": causes})) from None
            managed = merged["metadata"].pop("managedFields")
            if current is None:
                return 201, self._create(res, namespace, merged, dry_run, managed_fields=managed)
            merged["metadata"].setdefault("resourceVersion", current["metadata"]["resourceVersion"])
            obj = self._typed_body(res, merged, namespace)
            return 200, copy.deepcopy(self._update(res, namespace, name, obj, subresource, dry_run, managed))

    def delete(self, res: Resource, namespace: str, name: str, options: dict | None = None) -> tuple[int, dict]:
        """DELETE; returns the HTTP code and body (the object, or a Success ``Status``)."""
        options = options or {}
        self._validate_delete_options(options)
        dry_run = options.get("dryRun") == ["All"]
        with self._lock:
            obj = self._existing(res, namespace, name)
            self._check_preconditions(res, name, obj["metadata"], options.get("preconditions") or {})
            marked = self._marked_for_deletion(res, obj, options)
            if marked is not None:
                if marked != obj and not dry_run:
                    marked = self._commit(res, _key(namespace, name), marked, obj)
                # 202 only when the caller explicitly asked for cascading via orphanDependents=false.
                return (202 if options.get("orphanDependents") is False else 200), copy.deepcopy(marked)
            if not dry_run:
                self._commit(res, _key(namespace, name), None, obj)
            return 200, copy.deepcopy(obj) if res.return_deleted else success(res, obj)

    @staticmethod
    def _check_preconditions(res: Resource, name: str, meta: dict, preconditions: dict) -> None:
        for field, label, suffix in (
            ("uid", "UID", "deleted and then recreated"),
            ("resourceVersion", "ResourceVersion", "modified"),
        ):
            wanted = preconditions.get(field)
            if wanted is not None and wanted != meta[field]:
                reason = (
                    f"the {label} in the precondition ({wanted}) does not match the {label} in record "
                    f"({meta[field]}). The object might have been {suffix}"
                )
                raise conflict(res.kind, res.group, name, reason)

    def _marked_for_deletion(self, res: Resource, obj: dict, options: dict) -> dict | None:
        """The object as "being deleted" when finalizers hold it, or None when it goes at once.

        A namespace is held by its ``spec.finalizers`` (the namespace controller's
        ``kubernetes``) and turns ``Terminating``.
        """
        wanted = _gc_finalizers(obj["metadata"].get("finalizers") or [], options, res.default_propagation)
        namespace_held = res is self._namespaces and bool((obj.get("spec") or {}).get("finalizers"))
        if not wanted and not namespace_held:
            return None
        marked = copy.deepcopy(obj)
        if wanted:
            marked["metadata"]["finalizers"] = wanted
        self._mark_deleting(marked)
        if namespace_held:
            marked.setdefault("status", {})["phase"] = "Terminating"
        return marked

    def delete_collection(
        self, res: Resource, namespace: str, options: dict | None = None, **list_options: Any
    ) -> dict:
        """DELETE on a collection: deletes what the list selects, returns that list."""
        options = options or {}
        self._validate_delete_options(options)
        with self._lock:
            listed = self.list(res, namespace, **list_options)
            for item in listed["items"]:
                try:
                    self.delete(res, namespace, item["metadata"]["name"], options)
                except ApiError as exc:
                    if exc.code != 404:
                        raise
            return listed

    # -- pod logs ----------------------------------------------------------

    def pod_log(
        self, res: Resource, namespace: str, name: str, container: str = "", previous: bool = False
    ) -> list[Entry]:
        """The entries of a pod container's log file (see ``logs.py``)."""
        with self._lock:
            pod = copy.deepcopy(self._existing(res, namespace, name))
        container = _log_container(pod, container)
        lines = self.logs.get(namespace, name, container, previous)
        if lines is None and previous:
            raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        return lines or []

    # -- watches -----------------------------------------------------------

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        resource_version: str = "",
        allow_bookmarks: bool = False,
        send_initial_events: bool = False,
    ) -> Watch:
        """Open a watch. Unset or "0" resourceVersion starts with synthetic ADDED events
        for the current objects; otherwise retained events after it are replayed.

        ``send_initial_events`` (a streaming list, ``sendInitialEvents=true`` with
        ``resourceVersionMatch=NotOlderThan``, which client-go's reflectors send since 1.35): the
        current objects as synthetic ADDED events whatever the resourceVersion (this state is never
        older than one asked for), then a BOOKMARK annotated ``k8s.io/initial-events-end: "true"``
        at the current resourceVersion, then the changes after it.

        Raises :class:`WatchError` (410 too old, 504 too new) for errors the
        server must send as an ERROR event after HTTP 200.
        """
        watch = Watch(
            res,
            namespace,
            _selector(LabelSelector, label_selector),
            _selector(FieldSelector, field_selector, res),
            allow_bookmarks,
        )
        with self._lock:
            if send_initial_events:
                if resource_version not in ("", "0") and _parse_rv(resource_version) > self._rv:
                    raise WatchError(too_large_resource_version(_parse_rv(resource_version), self._rv))
                for key in sorted(self._objects[res]):
                    obj = self._objects[res][key]
                    if watch.matches(obj):
                        watch._push("ADDED", obj)
                watch._push(
                    "BOOKMARK",
                    {
                        "kind": res.kind,
                        "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": str(self._rv), "annotations": {INITIAL_EVENTS_END: "true"}},
                    },
                )
            elif resource_version in ("", "0"):
                for key in sorted(self._objects[res]):
                    obj = self._objects[res][key]
                    if watch.matches(obj):
                        watch._push("ADDED", obj)
            else:
                requested = _parse_rv(resource_version)
                if requested < self._floor:
                    raise WatchError(failure(410, "Expired", f"too old resource version: {requested} ({self._floor})"))
                if requested > self._rv:
                    raise WatchError(too_large_resource_version(requested, self._rv))
                for event in self._events:
                    if event.rv > requested:
                        watch._offer(event)
            self._watches.add(watch)
        return watch

    def bookmark(self, watch: Watch) -> dict | None:
        """A BOOKMARK at the current resourceVersion, if nothing is pending for ``watch``.

        Taken under the store lock, so no event at or below that resourceVersion
        can still be on its way to the watcher.
        """
        with self._lock:
            if not watch.idle():
                return None
            res = watch.resource
            return {
                "type": "BOOKMARK",
                "object": {
                    "kind": res.kind,
                    "apiVersion": res.api_version,
                    "metadata": {"resourceVersion": str(self._rv)},
                },
            }

    @property
    def open_watches(self) -> int:
        with self._lock:
            return len(self._watches)

    def stop_watch(self, watch: Watch) -> None:
        watch.close()
        with self._lock:
            self._watches.discard(watch)

    def close_watches(self, abort: bool = False) -> int:
        """End every open watch (``abort``: drop the connections mid-stream)."""
        with self._lock:
            watches, self._watches = self._watches, set()
        for watch in watches:
            watch.close(abort)
        return len(watches)

    # -- admin -------------------------------------------------------------

    def compact(self) -> str:
        """Forget all history, like an etcd compaction at the current revision.

        Older resourceVersions then expire (410) for continue tokens and
        watches; the current one stays readable, as in etcd.
        """
        with self._lock:
            self._events.clear()
            self._floor = self._rv
            return str(self._rv)

    def reset(self) -> str:
        """Drop every object silently, compact, and end open watches (clients must relist).

        resourceVersions keep increasing so that clients' old ones stay "too old".
        """
        with self._lock:
            for objects in self._objects.values():
                objects.clear()
            self.gc.reset()
            self.logs.clear()
            self._create_system_namespaces()
            self._create_definitions()
            rv = self.compact()
        self.close_watches()
        return rv

    def close(self) -> None:
        """Stop the garbage-collector thread and end open watches."""
        self.gc.close()
        self.close_watches()

    # -- internals ---------------------------------------------------------

    def _existing(self, res: Resource, namespace: str, name: str) -> dict:
        obj = self._objects[res].get(_key(namespace, name))
        if obj is None:
            raise not_found(res, name)
        return obj

    def _typed_body(self, res: Resource, body: Any, namespace: str, strict: bool = False) -> dict:
        """Decode checks of the create/update handlers, ``ValidateTypeMeta`` and pruning of custom resources."""
        if not isinstance(body, dict) or not body.get("kind"):
            raise bad_request(f"Object 'Kind' is missing in '{json.dumps(body, separators=(',', ':'))}'")
        obj = copy.deepcopy(body)
        api_version = obj.setdefault("apiVersion", res.api_version)  # defaulted from the URL
        if api_version != res.api_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version ({res.api_version})"
            )
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if obj["kind"] != res.kind:
            raise invalid(
                res.kind,
                res.group,
                meta.get("name", ""),
                [FieldError("Invalid", "kind", f"must be {res.kind}", obj["kind"])],
            )
        if res.group == "" and res.kind == "Secret" and "stringData" in obj:
            _merge_string_data(obj)
        if res.schema is not None and not res.builtin:
            obj, unknown = prune(obj, res.schema)
            if unknown and strict:
                raise bad_request(strict_message(res.kind, res.version, unknown))
            meta = obj["metadata"]
        if not res.namespaced:
            meta.pop("namespace", None)  # cluster-scoped objects have none, whatever the body says
            return obj
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        meta["namespace"] = namespace
        return obj

    def _validate_meta(self, meta: dict, old: dict | None = None) -> list[FieldError]:
        """The parts of ``ValidateObjectMeta(Update)`` that matter for our clients."""
        errors: list[FieldError] = []
        name = meta.get("name") or ""
        if not name:
            errors.append(FieldError("Required", "metadata.name", "name or generateName is required"))
        elif len(name) > 253 or not re.fullmatch(_DNS1123_SUBDOMAIN, name):
            errors.append(
                FieldError(
                    "Invalid",
                    "metadata.name",
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                    f"validation is '{_DNS1123_SUBDOMAIN}')",
                    name,
                )
            )
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict):
            errors.append(FieldError("Invalid", "metadata.labels", "must be an object", str(labels)))
            labels = {}
        for key, value in labels.items():
            if (problem := label_key_error(key)) is not None:
                errors.append(FieldError("Invalid", "metadata.labels", problem, key))
            if not isinstance(value, str) or (problem := label_value_error(value)) is not None:
                errors.append(FieldError("Invalid", "metadata.labels", problem or "must be a string", str(value)))
        if old is not None and old["metadata"].get("deletionTimestamp"):
            added = [f for f in meta.get("finalizers") or [] if f not in (old["metadata"].get("finalizers") or [])]
            if added:
                errors.append(
                    FieldError(
                        "Forbidden",
                        "metadata.finalizers",
                        f"no new finalizers can be added if the object is being deleted, found new finalizers {_go_value(added)}",
                    )
                )
        return errors

    def _generate_name(self, res: Resource, namespace: str, prefix: str) -> str:
        prefix = prefix[:58]  # names.SimpleNameGenerator keeps generated names within 63 characters
        while True:
            name = prefix + "".join(random.choice(_GENERATE_NAME_CHARS) for _ in range(5))
            if _key(namespace, name) not in self._objects[res]:
                return name

    def _update(
        self,
        res: Resource,
        namespace: str,
        name: str,
        obj: dict,
        subresource: str | None,
        dry_run: bool,
        managed_fields: list | None = None,
    ) -> dict:
        """``Store.Update`` with the custom-resource (or status) strategy; lock held.

        ``managed_fields`` is what server-side apply recorded; other updates keep the stored ones.
        """
        meta = obj["metadata"]
        if meta.get("name") != name:
            raise bad_request(
                f"the name of the object ({meta.get('name', '')}) does not match the name on the URL ({name})"
            )
        old = self._existing(res, namespace, name)
        old_meta = old["metadata"]
        rv = str(meta.get("resourceVersion") or "")
        if not rv and res.builtin:
            # Built-in kinds' strategies allow an unconditional update (AllowUnconditionalUpdate):
            # no resourceVersion, no optimistic lock. Helm updates its release Secrets so.
            rv = old_meta["resourceVersion"]
        if not rv:
            raise invalid(
                res.plural,
                res.group,
                name,
                [FieldError("Invalid", "metadata.resourceVersion", "must be specified for an update", _Literal("0x0"))],
            )
        if rv != old_meta["resourceVersion"]:
            raise conflict(res.plural, res.group, name, OPTIMISTIC_LOCK_MSG)
        new = self._status_update(old, obj) if subresource == "status" else self._main_update(res, name, obj, old)
        if managed_fields is not None:
            new["metadata"]["managedFields"] = managed_fields
        key = _key(namespace, name)
        if old_meta.get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            # ShouldDeleteDuringUpdate: the last finalizer is gone, so the object goes.
            if not dry_run:
                self._commit(res, key, None, old)
            return new
        if new == old or dry_run:
            return new
        return self._commit(res, key, new, old)

    @staticmethod
    def _status_update(old: dict, obj: dict) -> dict:
        """``/status`` writes change only status."""
        new = copy.deepcopy(old)
        if "status" in obj:
            new["status"] = obj["status"]
        else:
            new.pop("status", None)
        return new

    def _main_update(self, res: Resource, name: str, new: dict, old: dict) -> dict:
        """Writes to the main resource keep status (with the subresource) and server-set metadata."""
        meta, old_meta = new["metadata"], old["metadata"]
        if res.status_subresource:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise invalid(
                res.kind, res.group, name, [FieldError("Invalid", "metadata.uid", "field is immutable", meta["uid"])]
            )
        for field in (
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
        ):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        meta.pop("selfLink", None)
        if {k: v for k, v in new.items() if k != "metadata"} != {k: v for k, v in old.items() if k != "metadata"}:
            meta["generation"] = old_meta.get("generation", 0) + 1
        errors = self._validate_meta(meta, old)
        if errors:
            raise invalid(res.kind, res.group, name, errors)
        return new

    @staticmethod
    def _mark_deleting(obj: dict) -> None:
        """``markAsDeleting``: deletionTimestamp once (bumping generation), grace period 0."""
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp"):
            if meta.get("generation", 0) > 0:
                meta["generation"] += 1
            meta["deletionTimestamp"] = now_rfc3339()
        meta["deletionGracePeriodSeconds"] = 0

    @staticmethod
    def _validate_delete_options(options: dict) -> None:
        """``ValidateDeleteOptions``, which the handler runs before looking the object up."""
        errors = []
        policy = options.get("propagationPolicy")
        if options.get("orphanDependents") is not None and policy is not None:
            errors.append(
                FieldError(
                    "Invalid",
                    "propagationPolicy",
                    "orphanDependents and deletionPropagation cannot be both set",
                    policy,
                )
            )
        if policy is not None and policy not in ("Foreground", "Background", "Orphan"):
            errors.append(
                FieldError("NotSupported", "propagationPolicy", '"Foreground", "Background", "Orphan", "nil"', policy)
            )
        dry_run = options.get("dryRun")
        if dry_run and dry_run != ["All"]:
            errors.append(FieldError("NotSupported", "dryRun", '"All"', dry_run))
        if errors:
            raise invalid("DeleteOptions", "meta.k8s.io", "", errors)

    def _commit(self, res: Resource, key: str, new: dict | None, prev: dict | None) -> dict:
        """Persist a write at the next resourceVersion and fan it out; lock held."""
        self._rv += 1
        if new is None:
            assert prev is not None
            del self._objects[res][key]
            visible = copy.deepcopy(prev)
            visible["metadata"]["resourceVersion"] = str(self._rv)
            event = _Event(self._rv, res, "DELETED", key, visible, prev)
        else:
            new["metadata"]["resourceVersion"] = str(self._rv)
            self._objects[res][key] = new
            visible = new
            event = _Event(self._rv, res, "MODIFIED" if prev else "ADDED", key, new, prev)
        if new is None and res.log_subresource:
            self.logs.forget(*key.split("/", 1))
        self.gc.observe(res, key, new, prev)
        if len(self._events) >= self.history_size:
            self._floor = self._events.popleft().rv
        self._events.append(event)
        for watch in list(self._watches):
            watch._offer(event)
            if watch.closed:
                self._watches.discard(watch)
        return visible
