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


def render(values: dict[str, Any] | None = None, name: str = RELEASE, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The objects `helm template` would print (cached; a deep copy, so a test may change them)."""
    return copy.deepcopy(list(_render(json.dumps(values or {}, sort_keys=True), name, namespace)))


def find(objects, kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def notes(values: dict[str, Any] | None = None) -> str:
    manifests = chart().render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))
