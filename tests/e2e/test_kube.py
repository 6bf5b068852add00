"""How the worker's API calls map API server answers to what it does next (worker/kube.py)."""

import time

import pytest
from kubernetes import client, config

from tests.e2e.conftest import Cluster
from tests.services import free_port
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.kube.client import Conflict, KubeClient, ObjectGone, PermanentApiError, TransientApiError


@pytest.fixture
def kube(emulator) -> KubeClient:
    return KubeClient(config.new_client_from_config(config_file=str(emulator.kubeconfig)), timeout=5)


def test_background_propagation_is_passed_through_and_the_object_goes_at_once(cluster: Cluster, kube):
    obj = cluster.create_finished("bg", ttl=0, finished_at=time.time())
    meta = obj["metadata"]
    kube.delete(TFJOB, cluster.namespace, "bg", meta["uid"], meta["resourceVersion"], "Background")
    [delete] = cluster.deletes()
    assert delete["body"]["propagationPolicy"] == "Background"
    assert cluster.get("bg") is None


def test_a_stale_uid_or_resource_version_is_a_conflict(cluster: Cluster, kube):
    obj = cluster.create_finished("cas", ttl=0, finished_at=time.time())
    meta = obj["metadata"]
    with pytest.raises(Conflict, match="UID in the precondition"):
        kube.delete(
            TFJOB,
            cluster.namespace,
            "cas",
            "00000000-0000-0000-0000-000000000000",
            meta["resourceVersion"],
            "Foreground",
        )
    cluster.patch("cas", {"metadata": {"labels": {"touched": "yes"}}})
    with pytest.raises(Conflict, match="ResourceVersion in the precondition"):
        kube.delete(TFJOB, cluster.namespace, "cas", meta["uid"], meta["resourceVersion"], "Foreground")
    assert cluster.get("cas") is not None


def test_missing_objects_are_gone(cluster: Cluster, kube):
    with pytest.raises(ObjectGone):
        kube.get(TFJOB, cluster.namespace, "never-was")


@pytest.mark.parametrize("status", [500, 503, 429])
def test_server_errors_and_throttling_are_transient(cluster: Cluster, kube, status):
    # urllib3 itself retries a 429 that carries Retry-After a few times; keep failing past that.
    cluster.fail_next("get", status, count=10)
    with pytest.raises(TransientApiError, match=str(status)):
        kube.get(TFJOB, cluster.namespace, "whatever")


def test_forbidden_is_permanent_and_names_what_to_grant(cluster: Cluster, kube):
    cluster.fail_next("delete", 403, count=1)
    with pytest.raises(
        PermanentApiError, match=f"needs 'delete' on tfjobs.kubeflow.org in namespace '{cluster.namespace}'"
    ):
        kube.delete(TFJOB, cluster.namespace, "x", "u", "1", "Foreground")


def test_an_unreachable_api_server_is_transient():
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{free_port()}"
    configuration.retries = 0
    with pytest.raises(TransientApiError, match="cannot reach the API server"):
        KubeClient(client.ApiClient(configuration), timeout=2).get(TFJOB, "default", "x")
