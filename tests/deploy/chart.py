"""Rendering charts/jobttl/ with Helm's own engine (helm-python-sdk: Helm 4's Go SDK), for the tests."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.manifests import REPO

CHART = REPO / "charts" / "jobttl"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE = NAMESPACE = "jobttl"


@functools.cache
def chart() -> Any:
    import helm_python  # the test extras; test modules importorskip it first

    return helm_python.Chart.load(str(CHART))


def ci_values(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


@functools.cache
def _render(values_json: str, name: str, namespace: str) -> tuple[dict[str, Any], ...]:
    manifests = chart().render(json.loads(values_json), name=name, namespace=namespace, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if not path.endswith(".txt"):
            objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return tuple(objects)


def render(
    values: dict[str, Any] | None = None, name: str = RELEASE, namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    """The objects `helm template` would print (cached; a deep copy, so a test may change them)."""
    return copy.deepcopy(list(_render(json.dumps(values or {}, sort_keys=True), name, namespace)))


def find(objects, kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def notes(values: dict[str, Any] | None = None) -> str:
    manifests = chart().render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


class HookJobs:
    """The Job controller and kubelet for the chart's hook Jobs in the API emulator, which runs no
    pods: each Job created there has its container's command run here, with its environment and a
    kubeconfig for the emulator in place of the service account's token (the chart's scripts fall
    back to KUBECONFIG outside a pod), its `python` being this interpreter (jobttl installed, as
    in the image). Its status is then written as the Job controller writes it, so Helm, waiting
    for the hook, sees it complete or fail. `runs` keeps what each run printed."""

    def __init__(self, emulator, interval: float = 0.1):
        import threading

        self.emulator = emulator
        self.interval = interval
        self.runs: list[tuple[str, int, str]] = []  # (namespace/name, exit status, output)
        self._done: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> HookJobs:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        import requests

        while not self._stop.wait(self.interval):
            jobs = requests.get(f"{self.emulator.url}/apis/batch/v1/jobs", timeout=10).json().get("items", [])
            for job in jobs:
                uid = job["metadata"]["uid"]
                if uid not in self._done:
                    self._done.add(uid)
                    self.complete(job, self.run(job))

    def run(self, job: dict[str, Any]):
        import os
        import subprocess
        import sys

        [container] = job["spec"]["template"]["spec"]["containers"]
        command = [*container.get("command", []), *container.get("args", [])]
        assert command[0] == "python", command  # the image's interpreter; here this one
        env = {
            **os.environ,
            **{e["name"]: e["value"] for e in container.get("env", []) if "value" in e},
            "KUBECONFIG": str(self.emulator.kubeconfig),
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        done = subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True, text=True, timeout=60)
        name = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
        self.runs.append((name, done.returncode, done.stdout + done.stderr))
        return done

    def complete(self, job: dict[str, Any], done) -> None:
        import datetime

        import requests

        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        ok = done.returncode == 0
        conditions = (
            [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
                {"type": "Complete", "status": "True", "lastTransitionTime": now},
            ]
            if ok
            else [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "lastTransitionTime": now,
                    "reason": "BackoffLimitExceeded",
                },
                {"type": "Failed", "status": "True", "lastTransitionTime": now, "reason": "BackoffLimitExceeded"},
            ]
        )
        status = {
            "startTime": now,
            "conditions": conditions,
            **({"succeeded": 1, "completionTime": now} if ok else {"failed": 1}),
        }
        meta = job["metadata"]
        requests.patch(
            f"{self.emulator.url}/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}/status",
            json={"status": status},
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=10,
        ).raise_for_status()
