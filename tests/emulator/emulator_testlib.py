"""Helpers for the emulator tests: object builders, a Cluster facade and a watch collector."""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from jobttl_emulator import EmulatorServer

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"
NS = "ns"
# Reference data beside the checkout (never copied into the repository).
REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference"
TFJOB_CRD = REFERENCE / "kubeflow" / "kubeflow.org_tfjobs.yaml"


def pod(
    name: str,
    containers: tuple[str, ...] = ("main",),
    labels: dict | None = None,
    owners: list | None = None,
    finalizers: list | None = None,
) -> dict:
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = labels
    if owners:
        metadata["ownerReferences"] = owners
    if finalizers:
        metadata["finalizers"] = finalizers
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": c, "image": "busybox"} for c in containers]},
    }


def owner_ref(obj: dict, block: bool = True) -> dict:
    """An ownerReference to ``obj`` as a controller sets it."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": block,
    }


def tfjob(name: str, labels: dict | None = None, finalizers: list | None = None, **extra: Any) -> dict:
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = labels
    if finalizers:
        metadata["finalizers"] = finalizers
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TFJob",
        "metadata": metadata,
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}},
        **extra,
    }


def api_error(call: Callable[[], Any]) -> tuple[ApiException, dict]:
    """Run ``call``, which must fail, and return the exception and its parsed Status body."""
    with pytest.raises(ApiException) as info:
        call()
    return info.value, json.loads(info.value.body)


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        time.sleep(interval)


class Cluster:
    """Thin helpers over CustomObjectsApi and raw HTTP against one emulator."""

    def __init__(self, server: EmulatorServer, api: client.CustomObjectsApi) -> None:
        self.server = server
        self.api = api

    def create(self, name: str, ns: str = NS, **kwargs: Any) -> dict:
        return self.api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, tfjob(name, **kwargs))

    def get(self, name: str, ns: str = NS) -> dict:
        return self.api.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)

    def exists(self, name: str, ns: str = NS) -> bool:
        try:
            self.get(name, ns)
            return True
        except ApiException as exc:
            assert exc.status == 404
            return False

    def list(self, ns: str | None = NS, **kwargs: Any) -> dict:
        if ns is None:
            return self.api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)
        return self.api.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, **kwargs)

    def delete(self, name: str, ns: str = NS, **kwargs: Any) -> dict:
        return self.api.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, **kwargs)

    def set_status(self, name: str, status: dict, ns: str = NS) -> dict:
        return self.api.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, name, {"status": status})

    def raw(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json", accept: str = ""
    ) -> tuple[int, Any, Any]:
        """(status, headers, parsed JSON or text) of a plain HTTP request."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.server.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        if accept:
            req.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                code, headers, text = resp.status, resp.headers, resp.read().decode()
        except urllib.error.HTTPError as exc:
            code, headers, text = exc.code, exc.headers, exc.read().decode()
        try:
            return code, headers, json.loads(text)
        except ValueError:
            return code, headers, text


class WatchCollector:
    """Runs ``watch.Watch().stream`` in a thread and queues what it yields (or raises)."""

    def __init__(self, func: Callable, *args: Any, **kwargs: Any) -> None:
        self.watch = watch.Watch()
        self.events: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(func, args, kwargs), daemon=True)
        self._thread.start()

    def _run(self, func: Callable, args: tuple, kwargs: dict) -> None:
        try:
            for event in self.watch.stream(func, *args, **kwargs):
                self.events.put((event["type"], event["raw_object"]))
        except BaseException as exc:  # noqa: BLE001 - surfaced to the test through .error
            self.error = exc
        finally:
            self.events.put(None)

    def next(self, timeout: float = 5.0) -> tuple[str, dict] | None:
        return self.events.get(timeout=timeout)

    def next_of(self, *types: str, timeout: float = 5.0) -> tuple[str, dict]:
        """The next event of one of ``types``, skipping others (e.g. bookmarks)."""
        deadline = time.monotonic() + timeout
        while True:
            item = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            assert item is not None, f"watch ended early: {self.error!r}"
            if item[0] in types:
                return item

    def join(self, timeout: float = 5.0) -> list[tuple[str, dict]]:
        """Wait for the stream to end; return the remaining events."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "watch did not end"
        rest = []
        while (item := self.events.get_nowait()) is not None:
            rest.append(item)
        return rest

    def stop(self) -> None:
        self.watch.stop()
        self._thread.join(5)
