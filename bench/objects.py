"""Realistic ~10 KB TFJobs, and the binary CloudEvents an ApiServerSource sends for them.

Built from the upstream reference data the tests use (tests/fixtures.py: training-operator's
examples/tensorflow/simple.yaml and the finished TFJob from the Kubeflow docs), then filled
in the way a real cluster's objects are: Chief and Worker replica specs with env, resources,
volume mounts and volumes; labels and annotations (kubectl's last-applied-configuration);
the managedFields the API server keeps for kubectl and the training operator; and a status
with conditions, replicaStatuses (with label selectors), start and completion times.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import orjson

from jobttl.core.domain.wire.apiserversource import resource_event
from tests.fixtures import finished_status, rfc3339, running_status, tfjob_spec

TARGET_BYTES = (9_000, 11_500)  # what "~10 KB" means here; `realistic_tfjob` checks it


def _container(role: str, index: int) -> dict[str, Any]:
    base = tfjob_spec()["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    env = [
        {"name": name, "value": value}
        for name, value in (
            ("TF_CPP_MIN_LOG_LEVEL", "2"),
            ("NCCL_DEBUG", "WARN"),
            ("DATASET_PATH", "/data/imagenet/train"),
            ("CHECKPOINT_DIR", "/checkpoints/resnet50-run-2024-11-07"),
            ("WANDB_PROJECT", "vision-resnet"),
        )
    ]
    env += [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb-credentials", "key": "api-key"}}},
    ]
    return {
        **base,
        "image": f"registry.example.com/ml/{base['image'].rsplit('/', 1)[-1]}",
        "args": ["--model=resnet50", f"--role={role.lower()}", f"--replica-index={index}", "--mixed-precision"],
        "env": env,
        "ports": [{"containerPort": 2222, "name": "tfjob-port", "protocol": "TCP"}],
        "resources": {
            "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
            "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
        },
        "volumeMounts": [
            {"mountPath": "/data", "name": "dataset", "readOnly": True},
            {"mountPath": "/checkpoints", "name": "checkpoints"},
            {"mountPath": "/dev/shm", "name": "dshm"},
        ],
        "imagePullPolicy": "IfNotPresent",
    }


def _replica(role: str, replicas: int, index: int) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "restartPolicy": "OnFailure",
        "template": {
            "metadata": {
                "labels": {"app": "resnet50-training", "team": "vision"},
                "annotations": {"sidecar.istio.io/inject": "false"},
            },
            "spec": {
                "containers": [_container(role, index)],
                "volumes": [
                    {"name": "dataset", "persistentVolumeClaim": {"claimName": "imagenet-ro"}},
                    {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "vision-checkpoints"}},
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                ],
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "serviceAccountName": "training-jobs",
            },
        },
    }


def _managed_fields(at: str, finished: bool) -> list[dict[str, Any]]:
    spec_fields = {
        f"f:{role}": {
            ".": {},
            "f:replicas": {},
            "f:restartPolicy": {},
            "f:template": {
                ".": {},
                "f:metadata": {".": {}, "f:annotations": {}, "f:labels": {}},
                "f:spec": {
                    ".": {},
                    "f:containers": {},
                    "f:nodeSelector": {},
                    "f:serviceAccountName": {},
                    "f:tolerations": {},
                    "f:volumes": {},
                },
            },
        }
        for role in ("Chief", "Worker")
    }
    fields = [
        {
            "apiVersion": "kubeflow.org/v1",
            "fieldsType": "FieldsV1",
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "time": at,
            "fieldsV1": {
                "f:metadata": {
                    "f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}},
                    "f:labels": {".": {}, "f:app": {}, "f:team": {}, "f:experiment": {}},
                },
                "f:spec": {
                    ".": {},
                    "f:runPolicy": {".": {}, "f:cleanPodPolicy": {}, "f:ttlSecondsAfterFinished": {}},
                    "f:tfReplicaSpecs": {".": {}, **spec_fields},
                },
            },
        }
    ]
    status = {
        "f:conditions": {},
        "f:replicaStatuses": {".": {}, "f:Chief": {}, "f:Worker": {}},
        "f:startTime": {},
        "f:lastReconcileTime": {},
    }
    if finished:
        status["f:completionTime"] = {}
    fields.append(
        {
            "apiVersion": "kubeflow.org/v1",
            "fieldsType": "FieldsV1",
            "manager": "tf-operator",
            "operation": "Update",
            "subresource": "status",
            "time": at,
            "fieldsV1": {"f:status": status},
        }
    )
    return fields


def realistic_tfjob(
    name: str, namespace: str, *, state: str, at: float, ttl: int | None = 3600, uid: str | None = None
) -> dict[str, Any]:
    """A TFJob as a cluster holds it: `state` running or succeeded (at `at`), ~10 KB as JSON.

    Without `uid` it is a manifest for the emulator (which adds uid/resourceVersion); with one,
    it carries the server fields, as an event's object does.
    """
    t = rfc3339(at)
    spec = {
        "tfReplicaSpecs": {"Chief": _replica("Chief", 1, 0), "Worker": _replica("Worker", 4, 0)},
        "runPolicy": {"cleanPodPolicy": "None"},
    }
    if ttl is not None:
        spec["runPolicy"]["ttlSecondsAfterFinished"] = ttl
    labels = {"app": "resnet50-training", "team": "vision", "experiment": "lr-sweep-7"}
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }
    applied = json.dumps(manifest, separators=(",", ":"))
    obj = copy.deepcopy(manifest)
    obj["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": applied + "\n"}
    obj["metadata"]["managedFields"] = _managed_fields(t, state != "running")
    if state == "running":
        status = running_status(at)
        status["replicaStatuses"] = {"Chief": {"active": 1}, "Worker": {"active": 4}}
    else:
        status = finished_status(at)
        status["replicaStatuses"] = {"Chief": {"succeeded": 1}, "Worker": {"succeeded": 4}}
    for role, replica in status["replicaStatuses"].items():
        replica["selector"] = (
            f"training.kubeflow.org/job-name={name},training.kubeflow.org/operator-name=tfjob-"
            f"controller,training.kubeflow.org/replica-type={role.lower()}"
        )
    status["lastReconcileTime"] = t
    obj["status"] = status
    if uid is not None:
        obj["metadata"].update(uid=uid, resourceVersion="48151623", generation=1, creationTimestamp=rfc3339(at - 3600))
    size = len(json.dumps(obj, separators=(",", ":")))
    assert TARGET_BYTES[0] <= size <= TARGET_BYTES[1], f"a 'realistic' TFJob should be ~10 KB, this one is {size} B"
    return obj


def realistic_tfjobs(refs, *, state: str, at: float | dict[str, float], ttl: int | None = 3600):
    """`realistic_tfjob` for many (namespace, name, uid), fast: one template, filled in as JSON text.

    `at` may map a name to its own finish time (then one template per distinct time).
    """
    templates: dict[float, str] = {}
    for namespace, name, uid in refs:
        when = at[name] if isinstance(at, dict) else at
        if when not in templates:
            obj = realistic_tfjob(_NAME, _NAMESPACE, state=state, at=when, ttl=ttl, uid=_UID)
            templates[when] = orjson.dumps(obj).decode()
        yield orjson.loads(templates[when].replace(_NAME, name).replace(_NAMESPACE, namespace).replace(_UID, uid))


_NAME, _NAMESPACE, _UID = "benchname-placeholder", "benchns-placeholder", "00000000-0000-4000-8000-0000deadbeef"


def binary_event(obj: dict[str, Any], action: str = "update") -> tuple[dict[str, str], bytes]:
    """The (headers, body) of the binary-mode CloudEvent an ApiServerSource sends for `obj`."""
    meta = obj["metadata"]
    subject = f"/apis/{obj['apiVersion']}/namespaces/{meta['namespace']}/tfjobs/{meta['name']}"
    message = resource_event(action, obj, "https://10.96.0.1:443", subject)
    return dict(message.headers), message.body


def event_template(state: str, at: float, ttl: int | None = 3600) -> tuple[dict[str, str], bytes, str, str]:
    """An event whose name and UID are placeholders, for a load generator to fill in per request."""
    name, uid = _NAME, _UID
    headers, body = binary_event(realistic_tfjob(name, "bench", state=state, at=at, ttl=ttl, uid=uid))
    return headers, body, name, uid


def fresh_uid() -> str:
    return str(uuid.uuid4())
