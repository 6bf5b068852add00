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
    running = {**running, "status": "True", "lastTransitionTime": rfc3339(started), "lastUpdateTime": rfc3339(started)}
    return {
        "conditions": [created, running],
        "replicaStatuses": {"Worker": {"active": 2}},
        "startTime": rfc3339(started),
    }


def finished_status(finished: float, outcome: str = "Succeeded", completion_time: bool = True) -> dict:
    """The docs' finished status, moved to `finished` and with the given outcome."""
    status = copy.deepcopy(finished_tfjob_sample()["status"])
    created, running, done = status["conditions"]
    done.update(
        type=outcome, reason=f"TFJob{outcome}", lastTransitionTime=rfc3339(finished), lastUpdateTime=rfc3339(finished)
    )
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
    obj["metadata"].update(
        uid=uid or str(uuid.uuid4()), resourceVersion="1", creationTimestamp="2021-09-06T11:48:09Z", generation=1
    )
    return obj


# --- every kind ---------------------------------------------------------------------------
# Shaped after each project's own examples and status types: training-operator v1
# (replica specs + runPolicy, Succeeded/Failed conditions), mpi-operator v2beta1, Kubeflow
# Trainer v1alpha1 TrainJob (Complete/Failed, no completionTime), batch/v1 Job, and Argo
# Workflow (status.phase, status.finishedAt, spec.ttlStrategy).

REPLICA_FIELD = {
    "TFJob": "tfReplicaSpecs",
    "PyTorchJob": "pytorchReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
}


def _container(name: str = "trainer") -> dict:
    return {
        "spec": {
            "containers": [
                {"name": name, "image": "docker.io/kubeflow/example:latest", "command": ["python", "/opt/train.py"]}
            ]
        }
    }


VOLCANO = REFERENCE / "volcano"


def volcano_job(
    name: str, namespace: str = "default", phase: str = "Completed", at: float = 1_700_000_000, ttl: int | None = None
) -> dict:
    """Volcano's example/job.yaml (batch.volcano.sh/v1alpha1 Job) in `phase` since `at`: a Job by
    Kind, as batch/v1's is."""
    obj = load_yaml(VOLCANO / "job.yaml")
    obj["metadata"] = {"name": name, "namespace": namespace}
    if ttl is not None:
        obj["spec"]["ttlSecondsAfterFinished"] = ttl
    obj["status"] = {"state": {"phase": phase, "lastTransitionTime": rfc3339(at)}}
    return obj


def job_object(
    kind, name: str, namespace: str = "default", state: str = "succeeded", at: float = 1_700_000_000, ttl=None
) -> dict:
    """A realistic object of `kind` (a jobttl.core.domain.kinds.model.JobKind) that is running, succeeded or failed at `at`.

    `ttl` goes where the kind keeps its own TTL (a dict {field: value} for Argo's ttlStrategy).
    """
    t = rfc3339(at)
    obj = {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": name, "namespace": namespace}}
    if kind.group == "kubeflow.org":
        obj["spec"] = {
            REPLICA_FIELD[kind.kind]: {
                "Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": _container()}
            }
        }
        if ttl is not None:
            obj["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": ttl}
        conditions = [
            {
                "type": "Created",
                "status": "True",
                "reason": f"{kind.kind}Created",
                "lastTransitionTime": t,
                "lastUpdateTime": t,
            },
            {
                "type": "Running",
                "status": "True" if state == "running" else "False",
                "reason": f"{kind.kind}Running",
                "lastTransitionTime": t,
                "lastUpdateTime": t,
            },
        ]
        status = {"conditions": conditions, "startTime": t, "replicaStatuses": {"Worker": {"active": 2}}}
        if state != "running":
            outcome = "Succeeded" if state == "succeeded" else "Failed"
            conditions.append(
                {
                    "type": outcome,
                    "status": "True",
                    "reason": f"{kind.kind}{outcome}",
                    "lastTransitionTime": t,
                    "lastUpdateTime": t,
                }
            )
            status.update(completionTime=t, replicaStatuses={"Worker": {outcome.lower(): 2}})
    elif kind.kind == "TrainJob":
        obj["spec"] = {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}
        status = {"conditions": []}
        if state != "running":
            kind_type = "Complete" if state == "succeeded" else "Failed"
            status["conditions"].append(
                {
                    "type": kind_type,
                    "status": "True",
                    "reason": "JobsCompleted" if state == "succeeded" else "TrainingRuntimeFailed",
                    "message": "",
                    "lastTransitionTime": t,
                }
            )
    elif kind.kind == "Job":
        obj["spec"] = {"backoffLimit": 1, "template": {**_container("job"), "restartPolicy": "Never"}}
        obj["spec"]["template"]["spec"]["restartPolicy"] = "Never"
        if ttl is not None:
            obj["spec"]["ttlSecondsAfterFinished"] = ttl
        status = {"startTime": t, "active": 1} if state == "running" else {"startTime": t}
        if state == "succeeded":
            status.update(
                succeeded=1,
                completionTime=t,
                conditions=[
                    {"type": "SuccessCriteriaMet", "status": "True", "lastProbeTime": t, "lastTransitionTime": t},
                    {"type": "Complete", "status": "True", "lastProbeTime": t, "lastTransitionTime": t},
                ],
            )
        elif state == "failed":
            status.update(
                failed=2,
                conditions=[
                    {
                        "type": "FailureTarget",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "lastTransitionTime": t,
                    },
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "lastProbeTime": t,
                        "lastTransitionTime": t,
                    },
                ],
            )
    else:  # Argo Workflow
        obj["spec"] = {
            "entrypoint": "main",
            "templates": [{"name": "main", "container": _container()["spec"]["containers"][0]}],
        }
        if ttl is not None:
            obj["spec"]["ttlStrategy"] = ttl
        phase = {"running": "Running", "succeeded": "Succeeded", "failed": "Failed", "error": "Error"}[state]
        status = {
            "phase": phase,
            "startedAt": t,
            "finishedAt": None if state == "running" else t,
            "progress": "1/1" if state == "succeeded" else "0/1",
        }
    obj["status"] = status
    return obj


def uniform_log(line_bytes: int, total: int) -> bytes:
    """Lines of exactly `line_bytes` bytes (newline included), numbered, about `total` bytes in all."""
    lines = [
        (b"step %d " % i).ljust(line_bytes - 1, b"x")[: line_bytes - 1] + b"\n" for i in range(-(-total // line_bytes))
    ]
    return b"".join(lines)


def expected_kept(line_bytes: int, keep: int) -> int:
    """By hand, for a long log of equal lines: the whole lines covering the last `keep` bytes, unless
    the first of them began more than `keep` bytes before them (then exactly `keep` bytes)."""
    covering = -(-keep // line_bytes) * line_bytes
    return covering if covering - keep <= keep else keep
