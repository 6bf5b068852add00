"""Realistic job objects for tests, built from the upstream reference data.

`../shared/reference/kubeflow/` holds an upstream TFJob example and a finished TFJob as
the Kubeflow docs show it; tests start from those and vary only what they test.
"""

from __future__ import annotations

import copy
import uuid
from datetime import datetime, timezone
from pathlib import Path

import yaml

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
KUBEFLOW = REFERENCE / "kubeflow"


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(int(epoch), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def finished_tfjob_sample() -> dict:
    """The finished TFJob from the Kubeflow docs, unchanged."""
    return load_yaml(KUBEFLOW / "tfjob-succeeded-status-sample.yaml")


def tfjob_spec() -> dict:
    """The spec of training-operator's examples/tensorflow/simple.yaml."""
    return load_yaml(KUBEFLOW / "simple.yaml")["spec"]


def tfjob(name: str, namespace: str = "default", *, ttl: int | None = None, legacy_ttl: bool = False) -> dict:
    """A new TFJob manifest (no status) with an optional TTL, as a user would create it."""
    spec = tfjob_spec()
    if ttl is not None:
        if legacy_ttl:
            spec["ttlSecondsAfterFinished"] = ttl
        else:
            spec["runPolicy"] = {"ttlSecondsAfterFinished": ttl}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def running_status(started: float) -> dict:
    sample = finished_tfjob_sample()["status"]
    created, running, _ = sample["conditions"]
    running = {**running, "status": "True", "lastTransitionTime": rfc3339(started),
               "lastUpdateTime": rfc3339(started)}
    return {"conditions": [created, running], "replicaStatuses": {"Worker": {"active": 2}},
            "startTime": rfc3339(started)}


def finished_status(finished: float, outcome: str = "Succeeded", completion_time: bool = True) -> dict:
    """The docs' finished status, moved to `finished` and with the given outcome."""
    status = copy.deepcopy(finished_tfjob_sample()["status"])
    created, running, done = status["conditions"]
    done.update(type=outcome, reason=f"TFJob{outcome}", lastTransitionTime=rfc3339(finished),
                lastUpdateTime=rfc3339(finished))
    status["conditions"] = [created, running, done]
    if completion_time:
        status["completionTime"] = rfc3339(finished)
    else:
        del status["completionTime"]
    if outcome == "Failed":
        status["replicaStatuses"] = {"Worker": {"failed": 1, "succeeded": 1}}
    return status


def with_server_fields(manifest: dict, uid: str | None = None) -> dict:
    """What the API server adds on create, for pure tests that never reach one."""
    obj = copy.deepcopy(manifest)
    obj["metadata"].update(uid=uid or str(uuid.uuid4()), resourceVersion="1",
                           creationTimestamp="2021-09-06T11:48:09Z", generation=1)
    return obj
