"""The emulated garbage collector and namespace controller.

They act as kube-controller-manager's do (``pkg/controller/garbagecollector``,
``pkg/controller/namespace``), on ``metadata.ownerReferences`` between any
served objects, found by the owner's uid:

* **Foreground**: an owner marked with the ``foregroundDeletion`` finalizer has
  its dependents deleted (Foreground themselves when they have dependents, else
  Background); the finalizer is removed, and so the owner, once no dependent
  with ``blockOwnerDeletion: true`` exists any more. A dependent held by its
  own finalizers keeps such an owner Terminating (kubernetes#77081).
* **Background**: the owner is gone at once; a dependent whose owners are all
  gone is deleted afterwards, one that still has an owner loses the references
  to the missing ones.
* **Orphan**: the ``orphan`` finalizer makes the collector remove the owner's
  references from its dependents, then the finalizer.
* **Namespaces**: a deleted namespace is ``Terminating`` while everything in it
  is deleted, and disappears once nothing is left in it.

An owner reference to a kind the emulator does not serve cannot be resolved, so
its dependent is left alone (the real collector keeps retrying); an owner in
another namespace counts as missing. Each step runs ``delay`` seconds after what
triggered it (a deletion, a new owner reference, a dependent's removal), on one
background thread holding the store's lock.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import threading
import time
from typing import Any, Protocol

from .resources import Resource


class StoreView(Protocol):
    """What the collector uses of the store (jobttl_emulator.store.Store, which imports this module:
    named here as a protocol, so that neither module imports the other twice over)."""

    _lock: Any
    _objects: dict[Resource, dict[str, dict]]

    def resource_for(self, api_version: str, kind: str) -> Resource | None: ...

    def namespace_object(self, name: str) -> dict | None: ...

    def delete(self, res: Resource, namespace: str, name: str, options: dict | None = None) -> tuple[int, dict]: ...

    def _commit(self, res: Resource, key: str, new: dict | None, prev: dict | None) -> dict: ...


FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
GC_FINALIZERS = (ORPHAN, FOREGROUND)


def owner_uids(obj: dict | None) -> set[str]:
    refs = (obj or {}).get("metadata", {}).get("ownerReferences") or []
    return {r["uid"] for r in refs if isinstance(r, dict) and isinstance(r.get("uid"), str)}


def _deleting(obj: dict) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


class GarbageCollector:
    """Work queue, uid indexes and the thread that processes them; every method runs under the store's lock."""

    def __init__(self, store: StoreView, delay: float) -> None:
        self.store = store
        self.delay = delay
        self._cond = threading.Condition(store._lock)
        self._queue: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._by_uid: dict[str, tuple[Resource, str]] = {}
        self._dependents: dict[str, set[str]] = {}

    # -- bookkeeping -------------------------------------------------------

    def observe(self, res: Resource, key: str, new: dict | None, prev: dict | None) -> None:
        """Index a committed write and queue the work it makes due."""
        obj = new if new is not None else prev
        assert obj is not None
        uid = obj["metadata"]["uid"]
        before, after = owner_uids(prev), owner_uids(new)
        for owner in before - after:
            self._dependents.get(owner, set()).discard(uid)
            self.schedule(owner)  # a Foreground owner may have been waiting for this dependent
        for owner in after - before:
            self._dependents.setdefault(owner, set()).add(uid)
        if new is None:
            self._by_uid.pop(uid, None)
            for dependent in self._dependents.get(uid, ()):
                self.schedule(dependent)  # it may be dangling now
            self._schedule_namespace(res, obj)
            return
        self._by_uid[uid] = (res, key)
        meta = new["metadata"]
        if _deleting(new) and (set(meta.get("finalizers") or ()) & set(GC_FINALIZERS) or res.kind == "Namespace"):
            self.schedule(uid)
        elif after - before:
            self.schedule(uid)  # a new owner reference: is that owner there?

    def _schedule_namespace(self, res: Resource, obj: dict) -> None:
        namespace = self.store.namespace_object(obj["metadata"].get("namespace") or "") if res.namespaced else None
        if namespace is not None and _deleting(namespace):
            self.schedule(namespace["metadata"]["uid"])

    def schedule(self, uid: str) -> None:
        heapq.heappush(self._queue, (time.monotonic() + self.delay, next(self._seq), uid))
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="emulator-gc", daemon=True)
            self._thread.start()
        self._cond.notify()

    def pending(self) -> int:
        """Work items not processed yet (0: the collector has done all it can for now)."""
        with self._cond:
            return len(self._queue)

    def reset(self) -> None:
        self._queue.clear()
        self._by_uid.clear()
        self._dependents.clear()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def lookup(self, uid: str) -> tuple[Resource, str, dict] | None:
        found = self._by_uid.get(uid)
        if found is None:
            return None
        res, key = found
        obj = self.store._objects[res].get(key)
        return (res, key, obj) if obj is not None and obj["metadata"]["uid"] == uid else None

    def _existing_dependents(self, uid: str) -> list[tuple[Resource, str, dict]]:
        return [found for d in sorted(self._dependents.get(uid, ())) if (found := self.lookup(d)) is not None]

    # -- the worker --------------------------------------------------------

    def _loop(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._queue:
                    self._cond.wait()
                    continue
                wait = self._queue[0][0] - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                _, _, uid = heapq.heappop(self._queue)
                self._process(uid)

    def _process(self, uid: str) -> None:
        found = self.lookup(uid)
        if found is None:
            return
        res, key, obj = found
        finalizers = obj["metadata"].get("finalizers") or []
        if _deleting(obj) and res.kind == "Namespace" and not res.group:
            self._finalize_namespace(res, key, obj)
        elif _deleting(obj) and FOREGROUND in finalizers:
            self._delete_dependents_first(res, key, obj)
        elif _deleting(obj) and ORPHAN in finalizers:
            self._orphan_dependents(res, key, obj)
        elif owner_uids(obj):
            self._check_owners(res, key, obj)

    def _delete(self, res: Resource, obj: dict, policy: str | None = None) -> None:
        """Delete as the collector does: with a uid precondition, and the policy its finalizers ask for."""
        finalizers = obj["metadata"].get("finalizers") or []
        if policy is None:
            policy = "Foreground" if FOREGROUND in finalizers else "Orphan" if ORPHAN in finalizers else "Background"
        meta = obj["metadata"]
        options = {"propagationPolicy": policy, "preconditions": {"uid": meta["uid"]}}
        self.store.delete(res, meta.get("namespace") or "", meta["name"], options)

    def _drop_finalizer(self, res: Resource, key: str, obj: dict, finalizer: str) -> None:
        new = copy.deepcopy(obj)
        new["metadata"]["finalizers"] = [f for f in obj["metadata"].get("finalizers") or [] if f != finalizer]
        self.store._commit(res, key, None if not new["metadata"]["finalizers"] else new, obj)

    def _delete_dependents_first(self, res: Resource, key: str, obj: dict) -> None:
        uid = obj["metadata"]["uid"]
        for dep_res, _, dep in self._existing_dependents(uid):
            if not _deleting(dep):
                self._delete(dep_res, dep, "Foreground" if self._existing_dependents(dep["metadata"]["uid"]) else None)
        blocking = [
            dep
            for _, _, dep in self._existing_dependents(uid)
            if any(
                r.get("uid") == uid and r.get("blockOwnerDeletion")
                for r in dep["metadata"].get("ownerReferences") or []
            )
        ]
        if not blocking:
            self._drop_finalizer(res, key, obj, FOREGROUND)

    def _orphan_dependents(self, res: Resource, key: str, obj: dict) -> None:
        uid = obj["metadata"]["uid"]
        for dep_res, dep_key, dep in self._existing_dependents(uid):
            self._remove_references(dep_res, dep_key, dep, {uid})
        self._drop_finalizer(res, key, obj, ORPHAN)

    def _remove_references(self, res: Resource, key: str, obj: dict, uids: set[str]) -> None:
        new = copy.deepcopy(obj)
        refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") not in uids]
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self.store._commit(res, key, new, obj)

    def _owner_state(self, obj: dict, ref: dict) -> str:
        """``solid``, ``dangling`` (gone, or in another namespace) or ``unknown`` (kind not served)."""
        if self.store.resource_for(ref.get("apiVersion", ""), ref.get("kind", "")) is None:
            return "unknown"
        found = self.lookup(ref["uid"])
        if found is None:
            return "dangling"
        owner_res, _, owner = found
        same_namespace = owner["metadata"].get("namespace") == obj["metadata"].get("namespace")
        return "solid" if not owner_res.namespaced or same_namespace else "dangling"

    def _check_owners(self, res: Resource, key: str, obj: dict) -> None:
        refs = [r for r in obj["metadata"].get("ownerReferences") or [] if isinstance(r, dict) and r.get("uid")]
        states = {r["uid"]: self._owner_state(obj, r) for r in refs}
        if "unknown" in states.values():
            return
        dangling = {uid for uid, state in states.items() if state == "dangling"}
        if dangling and dangling == set(states):
            if not _deleting(obj):
                self._delete(res, obj)
        elif dangling:
            self._remove_references(res, key, obj, dangling)

    def _namespace_content(self, name: str) -> list[tuple[Resource, dict]]:
        return [
            (res, obj)
            for res, objects in self.store._objects.items()
            if res.namespaced
            for key, obj in sorted(objects.items())
            if key.startswith(name + "/")
        ]

    def _finalize_namespace(self, res: Resource, key: str, namespace: dict) -> None:
        """The namespace controller: delete everything in the namespace, then the namespace once it is empty."""
        name = namespace["metadata"]["name"]
        for content_res, obj in self._namespace_content(name):
            if not _deleting(obj):
                self._delete(content_res, obj)
        if self._namespace_content(name):
            return  # what is left is held by finalizers; its removal brings us back here
        new = copy.deepcopy(namespace)
        new.setdefault("spec", {})["finalizers"] = []
        self.store._commit(res, key, None if not new["metadata"].get("finalizers") else new, namespace)
