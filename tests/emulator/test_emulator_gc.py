"""The garbage collector follows ownerReferences between any served objects, as kube-controller-manager's does."""

from __future__ import annotations

import pytest
from kubernetes import client

from .emulator_testlib import GROUP, PLURAL, VERSION, owner_ref, pod, wait_until

NS = "ns"


@pytest.fixture
def core(full):
    return client.CoreV1Api(full.api.api_client)


def _pod_exists(core: client.CoreV1Api, name: str) -> bool:
    return name in {p.metadata.name for p in core.list_namespaced_pod(NS).items}


def _pods(core, owner: dict, *names: str, block: bool = True, finalizers: list | None = None) -> None:
    for name in names:
        core.create_namespaced_pod(NS, pod(name, owners=[owner_ref(owner, block)], finalizers=finalizers))


def test_foreground_deletes_dependents_first(full, core):
    job = full.create("job")
    _pods(core, job, "w0", "w1")
    marked = full.delete("job", body=client.V1DeleteOptions(propagation_policy="Foreground"))
    assert marked["metadata"]["finalizers"] == ["foregroundDeletion"]
    wait_until(lambda: not full.exists("job"))
    assert not _pod_exists(core, "w0") and not _pod_exists(core, "w1")


def test_a_stuck_dependent_keeps_a_foreground_owner_terminating(full, core):
    """kubernetes#77081: a blocking dependent held by a finalizer holds its owner too."""
    job = full.create("job")
    _pods(core, job, "stuck", finalizers=["example.com/hold"])
    full.delete("job", body=client.V1DeleteOptions(propagation_policy="Foreground"))
    wait_until(lambda: core.read_namespaced_pod("stuck", NS).metadata.deletion_timestamp)  # the GC asked it to go
    wait_until(lambda: full.server.store.gc.pending() == 0)
    assert full.get("job")["metadata"]["deletionTimestamp"]  # still Terminating
    core.patch_namespaced_pod("stuck", NS, {"metadata": {"finalizers": None}})
    wait_until(lambda: not full.exists("job"))


def test_non_blocking_dependents_do_not_hold_the_owner(full, core):
    job = full.create("job")
    _pods(core, job, "free", block=False, finalizers=["example.com/hold"])
    full.delete("job", body=client.V1DeleteOptions(propagation_policy="Foreground"))
    wait_until(lambda: not full.exists("job"))
    assert core.read_namespaced_pod("free", NS).metadata.deletion_timestamp


def test_background_deletes_the_owner_at_once_and_dependents_afterwards(full, core):
    job = full.create("job")
    _pods(core, job, "w0")
    assert full.delete("job", body=client.V1DeleteOptions(propagation_policy="Background"))["status"] == "Success"
    assert not full.exists("job") and _pod_exists(core, "w0")
    wait_until(lambda: not _pod_exists(core, "w0"))


def test_orphan_removes_the_references(full, core):
    job = full.create("job")
    other = full.create("other")
    core.create_namespaced_pod(NS, pod("w0", owners=[owner_ref(job), owner_ref(other, block=False)]))
    full.delete("job", body=client.V1DeleteOptions(propagation_policy="Orphan"))
    wait_until(lambda: not full.exists("job"))
    refs = core.read_namespaced_pod("w0", NS).metadata.owner_references
    assert [r.name for r in refs] == ["other"]


def test_a_dependent_with_another_owner_only_loses_the_dangling_reference(full, core):
    job, other = full.create("job"), full.create("other")
    core.create_namespaced_pod(NS, pod("shared", owners=[owner_ref(job), owner_ref(other)]))
    full.delete("job")
    wait_until(lambda: [r.name for r in core.read_namespaced_pod("shared", NS).metadata.owner_references] == ["other"])
    assert core.read_namespaced_pod("shared", NS).metadata.deletion_timestamp is None


def test_owners_of_other_kinds_and_missing_owners(full, core):
    """A batch Job owned by a TFJob; a pod whose owner never existed is collected; unknown kinds are left alone."""
    owner = full.create("cron-like")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "run-1", "ownerReferences": [owner_ref(owner)]},
    }
    code, _, run = full.raw("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", job)
    assert code == 201
    _pods(core, run, "run-1-pod")
    ghost = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "ghost", "uid": "00000000-0000-0000-0000-000000000000"},
    }
    _pods(core, ghost, "orphaned")
    unknown = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "uid": "11111111-1111-1111-1111-111111111111"},
    }
    _pods(core, unknown, "unresolvable")

    full.delete("cron-like", body=client.V1DeleteOptions(propagation_policy="Foreground"))
    wait_until(lambda: not full.exists("cron-like"))
    assert not _pod_exists(core, "run-1-pod") and not _pod_exists(core, "orphaned")
    assert full.raw("GET", f"/apis/batch/v1/namespaces/{NS}/jobs")[2]["items"] == []
    assert _pod_exists(core, "unresolvable")


def test_owner_in_another_namespace_counts_as_missing(full, core):
    elsewhere = full.api.create_namespaced_custom_object(
        GROUP,
        VERSION,
        "elsewhere",
        PLURAL,
        {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "owner"}, "spec": {}},
    )
    _pods(core, elsewhere, "cross")
    wait_until(lambda: not _pod_exists(core, "cross"))
