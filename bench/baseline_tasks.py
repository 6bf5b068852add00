"""The worker rows' baseline task: what a minimal plain-RQ TTL deleter would run.

One GET (is it still the same object, and finished?) and one DELETE guarded by the UID and
resourceVersion just read, with the official kubernetes client, one client per process
(created on first use: a forking RQ Worker therefore builds one per job, as it would).
Background propagation: the custom-resource default, and what a minimal deleter gets when
it sets none. Booked with plain `enqueue` / `enqueue_at` and RQ's default serializer.
"""

from __future__ import annotations

import os

from kubernetes import client, config

_api: client.CustomObjectsApi | None = None
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"


def api() -> client.CustomObjectsApi:
    global _api
    if _api is None:
        _api = client.CustomObjectsApi(config.new_client_from_config(config_file=os.environ["KUBECONFIG"]))
    return _api


def delete_job(namespace: str, name: str, uid: str) -> str:
    try:
        obj = api().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except client.ApiException as exc:
        if exc.status == 404:
            return "gone"
        raise
    if obj["metadata"]["uid"] != uid:
        return "recreated"
    conditions = (obj.get("status") or {}).get("conditions") or []
    if not any(c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True" for c in conditions):
        return "not-finished"
    body = {
        "propagationPolicy": "Background",
        "preconditions": {"uid": uid, "resourceVersion": obj["metadata"]["resourceVersion"]},
    }
    api().delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body=body)
    return "deleted"
