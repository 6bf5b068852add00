"""`jobttl watch`: the Kubernetes watch API in, ApiServerSource-compatible CloudEvents out.

Many Kubeflow clusters do not run Knative. This watcher sends the sink the exact events an
ApiServerSource in Resource mode would (binary mode, ``dev.knative.apiserver.resource.*``
types, the same extensions and data, built by `jobttl.core.domain.wire.apiserversource`), so one sink
serves both setups. It talks to the API server only through the core's client, within the
``watch`` component's permissions.

It behaves like a client-go reflector: a paged LIST (``limit``/``continue``), then a watch from
the list's resourceVersion with bookmarks, resumed from the last resourceVersion seen; a 410 Gone
(a watch too old, or a continue token outlived by the API server's compaction) means list again.

What it remembers per object is what it needs to decide whether to send, never the body
(`Seen`: namespace, name, resourceVersion, finished or not, keyed by UID: ~300 bytes, where a
kept 8 KB object costs ~26 KB of Python), and a relist updates that one index in place (marked
with the listing's number, the unmarked swept at the end) rather than building a second one.

Like ApiServerSource, whose informer reports every object it finds at start as an ``add``, its
first LIST sends an ``add`` for every *finished* object it finds, so a job that finished while
the watcher was starting is not left to the next resync (the running ones are announced when
they change). Events go through the sink's blast-radius guard like any other. On a relist after
410 it reports what changed while it was not watching: objects with a new resourceVersion as
``update``, new ones as ``add``, vanished ones as ``delete`` (with their identity only: the body
is not kept, and the sink's delete needs no more).

`serve_probes` answers /healthz (every kind's loop is alive) and /readyz (every kind's first
LIST is done, or the kind is known not to be served).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from http.server import ThreadingHTTPServer
from typing import Any, NamedTuple

import requests

from jobttl.core.runtime import logs, probes as probeserver
from jobttl.core.runtime.config import ConfigError
from jobttl.core.domain.wire.apiserversource import resource_event
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.kube.client import KubeClient, ListExpired, NotServed, TransientApiError

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
            message = resource_event(
                action, obj, self.source, kind.path(meta.get("namespace", ""), meta.get("name", ""))
            )
        except (TypeError, ValueError) as exc:  # nested beyond what JSON encoders write
            logs.record(log, "unsendable", _who(kind, meta), logging.ERROR, detail=f"{exc}; the resync will see it")
            return False
        backoff = Backoff()
        while not self.stop.is_set():
            try:
                response = self.session.post(
                    self.sink_url, data=message.body, headers=message.headers, timeout=self.timeout
                )
                if response.ok:
                    return True
                if response.status_code < 500 and response.status_code not in RETRIED:
                    # The sink says this event can never be accepted; retrying won't change it.
                    logs.record(
                        log,
                        "rejected",
                        _who(kind, meta),
                        logging.ERROR,
                        status=response.status_code,
                        detail=response.text[:500],
                    )
                    return False
                detail = f"HTTP {response.status_code}"
            except requests.RequestException as exc:
                detail = str(exc)
            logs.record(
                log, "sink-unavailable", _who(kind, meta), logging.WARNING, detail=detail, retryIn=backoff.delay
            )
            backoff.wait(self.stop)
        return False


# What the sink may answer and later not: a timeout, a conflict, too early, too many; and 401/403,
# which a token being rotated or a sink's auth being fixed answers for a while (dropping the event
# would leave its job to the next resync).
RETRIED = frozenset({401, 403, 408, 409, 425, 429})


def _who(kind: JobKind, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }


class Seen(NamedTuple):
    """What the watcher keeps of one object (keyed by its UID): enough to say whether a listed
    object changed, to announce it as finished, and to name it in a delete event."""

    namespace: str
    name: str
    resource_version: str
    finished: bool
    listing: int  # the number of the last LIST that saw it (a relist sweeps the others)


LIST_RESTARTS = 5  # continue tokens expiring again and again: give up this listing, back off, retry


def finished(kind: JobKind, obj: dict[str, Any]) -> bool:
    """Whether `kind` counts `obj` as finished. An object whose finish cannot be read counts as
    finished: the event goes to the sink, which reports the problem (and deletes nothing)."""
    try:
        return kind.finish(obj) is not None
    except Exception:  # noqa: BLE001 - any unreadable field: let the sink judge and say why
        return True


class KindWatcher:
    """List-then-watch one kind across all namespaces, forwarding changes to the sink."""

    def __init__(
        self,
        kube: KubeClient,
        kind: JobKind,
        poster: EventPoster,
        stop: threading.Event,
        page_size: int = 500,
        watch_timeout: int = 300,
    ):
        self.kube = kube
        self.kind = kind
        self.poster = poster
        self.stop = stop
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.known: dict[str, Seen] = {}  # uid → what was last seen of it
        self.listing = 0  # the number of the LIST under way or last done
        self.resource_version: str | None = None
        self.listed = False  # a LIST has completed: the first one announces only finished objects
        self.not_served = False  # reported once that the cluster does not serve this kind

    def run(self) -> None:
        backoff = Backoff()
        while not self.stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                    if self.resource_version is None:
                        continue  # stopped mid-list
                self.watch_once()
                backoff.reset()
            except ListExpired:
                logs.record(
                    log, "relist", kind=self.kind.kind, apiVersion=self.kind.api_version, detail="watch expired (410)"
                )
                self.resource_version = None
            except NotServed as exc:
                # No CRD for this kind here (RayJob without KubeRay): said once, then looked for
                # quietly, and watched from the moment it is installed.
                if not self.not_served:
                    logs.record(
                        log,
                        "kind-not-served",
                        level=logging.WARNING,
                        kind=self.kind.kind,
                        apiVersion=self.kind.api_version,
                        detail=f"{exc}; looking again every {NOT_SERVED_RECHECK:.0f}s",
                    )
                self.not_served = True
                self.resource_version = None
                self.stop.wait(NOT_SERVED_RECHECK)
                continue
            except Exception as exc:  # noqa: BLE001 - connection reset, timeouts, 5xx: keep the resourceVersion, retry
                logs.record(
                    log,
                    "watch-error",
                    level=logging.WARNING,
                    kind=self.kind.kind,
                    apiVersion=self.kind.api_version,
                    detail=str(exc),
                )
                backoff.wait(self.stop)

    def relist(self) -> None:
        """List every object a page at a time, taking stock into the one index; after the first
        list, report what changed since the last one. Sets `resource_version` when complete."""
        first = not self.listed
        undecodable = 0
        restarts = 0
        self.listing += 1
        token: str | None = None
        list_rv: str | None = None
        while True:
            try:
                page = self.kube.list_page(self.kind, self.page_size, token)
            except ListExpired:
                if token is None:
                    raise
                restarts = self._list_again(restarts)
                token, undecodable = None, 0
                continue
            list_rv = page.resource_version  # every page of one list carries the first page's
            undecodable += page.undecodable
            token = page.continue_token
            staged = [self._take_stock(obj, first) for obj in page.items]
            # The page is dropped before the index takes its entries, as copies: a string kept from the
            # decoded page would pin its allocator arena, keeping the page's memory resident.
            page = None
            undecodable += self._remember_staged(staged)
            staged = None
            if not token:
                break
            if self.stop.is_set():
                return
        self._report_vanished(undecodable)
        self._listed(list_rv)

    def _list_again(self, restarts: int) -> int:
        """After a 410 Expired on a continue token: the restarts so far, one more (TransientApiError when
        it keeps expiring)."""
        if restarts >= LIST_RESTARTS:
            raise TransientApiError(
                f"listing {self.kind.resource}: the continue token expired {restarts + 1} times in a row"
            ) from None
        # The continue token outlived the API server's compaction (410 Expired): the pages
        # already read are of an older snapshot, so list again from the start, as a
        # reflector does. A new mark: what only the abandoned pages saw is not "present".
        logs.record(
            log,
            "relist",
            kind=self.kind.kind,
            apiVersion=self.kind.api_version,
            detail="continue token expired (410): listing from the start",
        )
        self.listing += 1
        return restarts + 1

    def _remember_staged(self, staged: list[tuple[Any, ...] | None]) -> int:
        """Remember what a page staged; the number of objects without an identity to remember."""
        undecodable = 0
        for entry in staged:
            if entry is None:
                undecodable += 1
            else:
                self._remember(*entry)
        return undecodable

    def _report_vanished(self, undecodable: int) -> None:
        """A delete event for each object known before and not in this list, unless some of the list
        could not be decoded."""
        vanished = [uid for uid, seen in self.known.items() if seen.listing != self.listing]
        if undecodable:
            # An object we could not read is not one that vanished: no delete events this time.
            logs.record(
                log,
                "undecodable",
                level=logging.ERROR,
                kind=self.kind.kind,
                count=undecodable,
                detail="objects in the list could not be decoded; vanished objects are not reported "
                "this time, the resync will see them",
            )
            return
        for uid in vanished:
            seen = self.known.pop(uid)
            self.poster.post(self.kind, "delete", _identity(uid, seen))

    def _listed(self, list_rv: str | None) -> None:
        """A complete list: the kind is served, and watched from `list_rv`."""
        if self.not_served:
            logs.record(log, "kind-served", kind=self.kind.kind, apiVersion=self.kind.api_version)
            self.not_served = False
        self.listed = True
        self.resource_version = list_rv
        logs.record(
            log,
            "listed",
            kind=self.kind.kind,
            apiVersion=self.kind.api_version,
            count=len(self.known),
            finished=sum(1 for seen in self.known.values() if seen.finished),
            resourceVersion=list_rv,
        )

    def _take_stock(self, obj: dict[str, Any], first: bool) -> tuple[Any, ...] | None:
        """Send what one listed object calls for: on the first list an ``add`` if it is finished,
        later an ``add`` if it is new and an ``update`` if it changed. Returns what to remember of
        it, or None if it has no identity to remember it by."""
        meta = obj.get("metadata")
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if not isinstance(uid, str):
            return None
        rv = str(meta.get("resourceVersion") or "")
        done = finished(self.kind, obj)
        before = self.known.get(uid)
        # A first list retried (its continue token expired) finds what it already announced unchanged.
        if before is None and (done or not first):
            self.poster.post(self.kind, "add", obj)
        elif before is not None and before.resource_version != rv:
            self.poster.post(self.kind, "update", obj)
        return uid, meta.get("namespace"), meta.get("name"), rv, done

    def _remember(self, uid: str, namespace: Any, name: Any, rv: str, done: bool) -> None:
        self.known[_fresh(uid)] = Seen(
            sys.intern(str(namespace or "")), _fresh(str(name or "")), _fresh(rv), done, self.listing
        )

    def watch_once(self) -> None:
        for event_type, obj in self.kube.watch(self.kind, self.resource_version, self.watch_timeout):
            if self.stop.is_set():
                return
            if obj is None:
                logs.record(
                    log,
                    "undecodable",
                    level=logging.ERROR,
                    kind=self.kind.kind,
                    detail="a watch event could not be decoded; the resync will see the object",
                )
                continue
            meta = obj.get("metadata") or {}
            rv = meta.get("resourceVersion")
            if event_type == "BOOKMARK":
                self.resource_version = rv
                continue
            action = ACTIONS.get(event_type)
            uid = meta.get("uid")
            if action is None or not isinstance(uid, str):
                continue
            self.poster.post(self.kind, action, obj)
            if action == "delete":
                self.known.pop(uid, None)
            else:
                self._remember(uid, meta.get("namespace"), meta.get("name"), str(rv or ""), finished(self.kind, obj))
            # Only advance once the sink has the event, so a crash replays rather than skips it.
            self.resource_version = rv


def _fresh(text: str) -> str:
    """`text` in an allocation of its own (a new object, not the decoded page's)."""
    return text.encode().decode()


def _identity(uid: str, seen: Seen) -> dict[str, Any]:
    """The object of a delete event for an object that vanished while nobody watched: its identity
    (the body is not kept; the sink's delete reads only the kind, namespace, name and UID)."""
    return {
        "metadata": {
            "namespace": seen.namespace,
            "name": seen.name,
            "uid": uid,
            "resourceVersion": seen.resource_version,
        }
    }


def run(
    kube: KubeClient,
    kinds: tuple[JobKind, ...],
    sink_url: str,
    stop: threading.Event | None = None,
    port: int | None = None,
    host: str = "0.0.0.0",
) -> None:
    """Watch `kinds` until `stop` (or every loop ended); with `port`, serve the probes there."""
    stop = stop or threading.Event()
    source = kube.host  # ApiServerSource puts the API server URL in `source`
    watchers = [KindWatcher(kube, kind, EventPoster(sink_url, source, stop), stop) for kind in kinds]
    threads = [threading.Thread(target=w.run, name=f"watch-{w.kind.kind}", daemon=True) for w in watchers]
    try:
        probes = serve_probes(Probes(watchers, threads), host, port) if port is not None else None
    except OSError as exc:  # the port taken, the address not this host's: said at start, by name
        raise ConfigError(f"jobttl watch --host {host} --port {port}: cannot serve the probes there: {exc}") from None
    for thread in threads:
        thread.start()
    logs.record(
        log,
        "watch-start",
        kinds=[k.kind for k in kinds],
        sink=sink_url,
        probes=f"{host}:{probes.server_address[1]}" if probes else None,
    )
    try:
        while not stop.is_set() and any(t.is_alive() for t in threads):
            stop.wait(1)
    finally:
        stop.set()
        if probes is not None:
            probes.shutdown()
            probes.server_close()


class Probes:
    """What /healthz and /readyz say, from the kinds' loops."""

    def __init__(self, watchers: list[KindWatcher], threads: list[threading.Thread]):
        self.watchers, self.threads = watchers, threads

    def kinds(self) -> dict[str, str]:
        # A loop not started yet (the probes are served first, so a taken port stops the watcher
        # before it watches) is starting, not stopped: alive for /healthz, not ready.
        return {
            f"{w.kind.api_version}/{w.kind.kind}": (
                "starting"
                if t.ident is None
                else "stopped"
                if not t.is_alive()
                else "not-served"
                if w.not_served
                else "watching"
                if w.listed
                else "listing"
            )
            for w, t in zip(self.watchers, self.threads)
        }

    def healthz(self) -> tuple[int, dict[str, Any]]:
        """Alive while every kind's loop runs (a loop that died would never watch again)."""
        kinds = self.kinds()
        alive = all(state != "stopped" for state in kinds.values())
        return (200 if alive else 503), {"status": "ok" if alive else "stopped", "kinds": kinds}

    def readyz(self) -> tuple[int, dict[str, Any]]:
        """Ready once every kind's first LIST is done (or the kind is known not to be served)."""
        kinds = self.kinds()
        ready = all(state in ("watching", "not-served") for state in kinds.values())
        return (200 if ready else 503), {"status": "ready" if ready else "not-ready", "kinds": kinds}


def serve_probes(probes: Probes, host: str, port: int) -> ThreadingHTTPServer:
    """/healthz and /readyz on `port` (0: any free port, `server_address` says which)."""

    def answer(path: str) -> probeserver.Answer:
        path = path.split("?", 1)[0]
        if path == "/healthz":
            status, body = probes.healthz()
        elif path == "/readyz":
            status, body = probes.readyz()
        else:
            status, body = 404, {"error": f"not found: {path} (the watcher serves /healthz and /readyz)", "code": 404}
        return probeserver.Answer(status, json.dumps(body).encode())

    return probeserver.serve(answer, port, "watch-probes", host)
