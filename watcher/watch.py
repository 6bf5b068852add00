"""`jobttl watch`: the Kubernetes watch API in, ApiServerSource-compatible CloudEvents out.

Many Kubeflow clusters do not run Knative. This watcher sends the sink the exact events an
ApiServerSource in Resource mode would (binary mode, ``dev.knative.apiserver.resource.*``
types, the same extensions and data, built by `jobttl.core.domain.apiserversource`), so one sink
serves both setups. It talks to the API server only through the core's client, within the
``watch`` component's permissions.

It behaves like a client-go informer: list, then watch from the list's resourceVersion,
resume from the last seen resourceVersion (bookmarks keep it fresh), relist on 410 Gone.
Like ApiServerSource, it sends nothing for the objects it finds at start: the backlog of a
newly watched cluster is the resync's job, which holds a mass deletion for confirmation
(the blast-radius guard), whereas events are acted on at once. On a relist after 410 it
reports what changed while it was not watching: objects with a new resourceVersion as
``update``, new ones as ``add``, vanished ones as ``delete``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import requests

from jobttl.core.runtime import logs
from jobttl.core.domain.apiserversource import resource_event
from jobttl.core.domain.kinds import JobKind
from jobttl.core.kube.client import KubeClient, ListExpired, NotServed

log = logging.getLogger("jobttl.watch")

ACTIONS = {"ADDED": "add", "MODIFIED": "update", "DELETED": "delete"}


NOT_SERVED_RECHECK = 300.0  # seconds between looks for a kind the cluster does not serve


class Backoff:
    """Exponential backoff with a cap, reset after a success."""

    def __init__(self, initial: float = 0.5, cap: float = 30.0):
        self.initial, self.cap, self.delay = initial, cap, initial

    def wait(self, stop: threading.Event) -> None:
        stop.wait(self.delay)
        self.delay = min(self.delay * 2, self.cap)

    def reset(self) -> None:
        self.delay = self.initial


class EventPoster:
    """Posts one object change to the sink, retrying until it is accepted.

    Knative gives up on an event after a few seconds; a watcher that gives up loses a
    deletion forever, so this retries with backoff, which also slows the watch down while
    the sink is unavailable (back-pressure instead of loss).
    """

    def __init__(self, sink_url: str, source: str, stop: threading.Event, timeout: float = 10.0):
        self.sink_url = sink_url
        self.source = source
        self.stop = stop
        self.timeout = timeout
        self.session = requests.Session()

    def post(self, kind: JobKind, action: str, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata", {})
        obj = {**obj, "apiVersion": kind.api_version, "kind": kind.kind}
        try:
            message = resource_event(action, obj, self.source, kind.path(meta.get("namespace", ""),
                                                                          meta.get("name", "")))
        except (TypeError, ValueError) as exc:  # nested beyond what JSON encoders write
            logs.record(log, "unsendable", _who(kind, meta), logging.ERROR, detail=f"{exc}; the resync will see it")
            return False
        backoff = Backoff()
        while not self.stop.is_set():
            try:
                response = self.session.post(self.sink_url, data=message.body, headers=message.headers,
                                             timeout=self.timeout)
                if response.ok:
                    return True
                if response.status_code < 500 and response.status_code not in (408, 409, 425, 429):
                    # The sink says this event can never be accepted; retrying won't change it.
                    logs.record(log, "rejected", _who(kind, meta), logging.ERROR, status=response.status_code,
                                detail=response.text[:500])
                    return False
                detail = f"HTTP {response.status_code}"
            except requests.RequestException as exc:
                detail = str(exc)
            logs.record(log, "sink-unavailable", _who(kind, meta), logging.WARNING, detail=detail,
                        retryIn=backoff.delay)
            backoff.wait(self.stop)
        return False


def _who(kind: JobKind, meta: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": kind.api_version, "kind": kind.kind, "namespace": meta.get("namespace"),
            "name": meta.get("name"), "uid": meta.get("uid")}


class KindWatcher:
    """List-then-watch one kind across all namespaces, forwarding changes to the sink."""

    def __init__(self, kube: KubeClient, kind: JobKind, poster: EventPoster, stop: threading.Event,
                 page_size: int = 500, watch_timeout: int = 300):
        self.kube = kube
        self.kind = kind
        self.poster = poster
        self.stop = stop
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.known: dict[str, str] = {}  # uid → last seen resourceVersion, to report changes on relist
        self.last: dict[str, dict[str, Any]] = {}  # uid → last seen object, to report deletions on relist
        self.resource_version: str | None = None
        self.listed = False  # the first list only takes stock
        self.not_served = False  # reported once that the cluster does not serve this kind

    def run(self) -> None:
        backoff = Backoff()
        while not self.stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self.watch_once()
                backoff.reset()
            except ListExpired:
                logs.record(log, "relist", kind=self.kind.kind, apiVersion=self.kind.api_version,
                            detail="watch expired (410)")
                self.resource_version = None
            except NotServed as exc:
                # No CRD for this kind here (RayJob without KubeRay): said once, then looked for
                # quietly, and watched from the moment it is installed.
                if not self.not_served:
                    logs.record(log, "kind-not-served", level=logging.WARNING, kind=self.kind.kind,
                                apiVersion=self.kind.api_version, detail=f"{exc}; looking again every "
                                                                          f"{NOT_SERVED_RECHECK:.0f}s")
                self.not_served = True
                self.resource_version = None
                self.stop.wait(NOT_SERVED_RECHECK)
                continue
            except Exception as exc:  # connection reset, timeouts, 5xx: keep the resourceVersion, retry
                logs.record(log, "watch-error", level=logging.WARNING, kind=self.kind.kind,
                            apiVersion=self.kind.api_version, detail=str(exc))
                backoff.wait(self.stop)

    def relist(self) -> None:
        """Remember what exists; after the first list, report what changed since the last one."""
        seen: dict[str, dict[str, Any]] = {}
        list_rv = None
        first = not self.listed
        for page in self.kube.pages(self.kind, self.page_size):  # a 410 restarts the whole list
            list_rv = page.resource_version
            for obj in page.items:
                uid = obj["metadata"]["uid"]
                seen[uid] = obj
                if not first and self.known.get(uid) != obj["metadata"].get("resourceVersion"):
                    self.poster.post(self.kind, "add" if uid not in self.known else "update", obj)
        for uid, obj in self.last.items():
            if uid not in seen:
                self.poster.post(self.kind, "delete", obj)
        if self.not_served:
            logs.record(log, "kind-served", kind=self.kind.kind, apiVersion=self.kind.api_version)
            self.not_served = False
        self.listed = True
        self.last = seen
        self.known = {uid: obj["metadata"].get("resourceVersion") for uid, obj in seen.items()}
        self.resource_version = list_rv
        logs.record(log, "listed", kind=self.kind.kind, apiVersion=self.kind.api_version, count=len(seen),
                    resourceVersion=list_rv)

    def watch_once(self) -> None:
        for event_type, obj in self.kube.watch(self.kind, self.resource_version, self.watch_timeout):
            if self.stop.is_set():
                return
            if obj is None:
                logs.record(log, "undecodable", level=logging.ERROR, kind=self.kind.kind,
                            detail="a watch event could not be decoded; the resync will see the object")
                continue
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if event_type == "BOOKMARK":
                self.resource_version = rv
                continue
            action = ACTIONS.get(event_type)
            if action is None:
                continue
            uid = obj["metadata"]["uid"]
            self.poster.post(self.kind, action, obj)
            if action == "delete":
                self.known.pop(uid, None)
                self.last.pop(uid, None)
            else:
                self.known[uid] = rv
                self.last[uid] = obj
            # Only advance once the sink has the event, so a crash replays rather than skips it.
            self.resource_version = rv


def run(kube: KubeClient, kinds: tuple[JobKind, ...], sink_url: str, stop: threading.Event | None = None) -> None:
    stop = stop or threading.Event()
    source = kube.host  # ApiServerSource puts the API server URL in `source`
    threads = [
        threading.Thread(target=KindWatcher(kube, kind, EventPoster(sink_url, source, stop), stop).run,
                         name=f"watch-{kind.kind}", daemon=True)
        for kind in kinds
    ]
    for thread in threads:
        thread.start()
    logs.record(log, "watch-start", kinds=[k.kind for k in kinds], sink=sink_url)
    try:
        while not stop.is_set() and any(t.is_alive() for t in threads):
            stop.wait(1)
    finally:
        stop.set()
