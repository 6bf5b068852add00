"""DELETE: preconditions, propagation policies, finalizers and the emulated garbage collector."""

from __future__ import annotations

import json

from kubernetes import client

from .emulator_testlib import GROUP, NS, PLURAL, VERSION, api_error, wait_until


def test_background_delete_returns_a_success_status_with_uid(cluster):
    uid = cluster.create("a")["metadata"]["uid"]
    body = cluster.delete("a", body=client.V1DeleteOptions(propagation_policy="Background"))
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": "a", "group": "kubeflow.org", "kind": "tfjobs", "uid": uid},
    }
    assert not cluster.exists("a")


def test_delete_without_options_deletes_at_once(cluster):
    cluster.create("a")
    assert cluster.delete("a")["status"] == "Success"
    assert not cluster.exists("a")


def test_matching_preconditions_delete(cluster):
    created = cluster.create("a")
    options = client.V1DeleteOptions(
        preconditions=client.V1Preconditions(
            uid=created["metadata"]["uid"], resource_version=created["metadata"]["resourceVersion"]
        )
    )
    assert cluster.delete("a", body=options)["status"] == "Success"


def test_uid_precondition_mismatch_conflicts(cluster):
    uid = cluster.create("a")["metadata"]["uid"]
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="00000000-0000-0000-0000-000000000000"))
    exc, body = api_error(lambda: cluster.delete("a", body=options))
    assert exc.status == 409
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on TFJob.kubeflow.org "a": the UID in the precondition '
        f"(00000000-0000-0000-0000-000000000000) does not match the UID in record ({uid}). "
        "The object might have been deleted and then recreated"
    )
    assert body["details"] == {"name": "a", "group": "kubeflow.org", "kind": "TFJob"}
    assert cluster.exists("a")


def test_resource_version_precondition_mismatch_conflicts(cluster):
    created = cluster.create("a")
    current = cluster.set_status("a", {"phase": "Succeeded"})["metadata"]["resourceVersion"]
    stale = created["metadata"]["resourceVersion"]
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version=stale))
    exc, body = api_error(lambda: cluster.delete("a", body=options))
    assert exc.status == 409
    assert body["message"] == (
        'Operation cannot be fulfilled on TFJob.kubeflow.org "a": the ResourceVersion in the precondition '
        f"({stale}) does not match the ResourceVersion in record ({current}). The object might have been modified"
    )


def test_delete_missing_is_not_found(cluster):
    exc, body = api_error(lambda: cluster.delete("nope", body=client.V1DeleteOptions(propagation_policy="Background")))
    assert exc.status == 404
    assert body["details"] == {"name": "nope", "group": "kubeflow.org", "kind": "tfjobs"}
    assert body["message"] == 'tfjobs.kubeflow.org "nope" not found'


def test_invalid_delete_options_are_rejected_before_lookup(cluster):
    exc, body = api_error(lambda: cluster.delete("nope", body=client.V1DeleteOptions(propagation_policy="Bogus")))
    assert exc.status == 422
    assert body["reason"] == "Invalid"
    assert body["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Bogus": '
        'supported values: "Foreground", "Background", "Orphan", "nil"'
    )
    assert body["details"]["group"] == "meta.k8s.io" and body["details"]["kind"] == "DeleteOptions"

    cluster.create("a")
    both = client.V1DeleteOptions(propagation_policy="Background", orphan_dependents=False)
    exc, body = api_error(lambda: cluster.delete("a", body=both))
    assert exc.status == 422
    assert "orphanDependents and deletionPropagation cannot be both set" in body["message"]


def test_foreground_delete_marks_then_the_gc_removes(cluster, server, api):
    created = cluster.create("a")
    marked = cluster.delete("a", body=client.V1DeleteOptions(propagation_policy="Foreground"))
    meta = marked["metadata"]
    assert marked["kind"] == "TFJob"
    assert meta["deletionTimestamp"] and meta["deletionGracePeriodSeconds"] == 0
    assert meta["finalizers"] == ["foregroundDeletion"]
    assert meta["generation"] == 2
    assert cluster.get("a")["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]

    # Deleting again while it is being deleted returns it unchanged.
    again = cluster.delete("a", body=client.V1DeleteOptions(propagation_policy="Foreground"))
    assert again == marked

    wait_until(lambda: not cluster.exists("a"), timeout=5)

    # Watchers saw MODIFIED (marked) then DELETED carrying the last state.
    events = (
        api.list_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            watch=True,
            resource_version=created["metadata"]["resourceVersion"],
            timeout_seconds=1,
            _preload_content=False,
        )
        .read()
        .decode()
        .splitlines()
    )
    seen = [json.loads(line) for line in events]
    assert [e["type"] for e in seen] == ["MODIFIED", "DELETED"]
    assert seen[1]["object"]["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert int(seen[1]["object"]["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])


def test_propagation_policy_as_query_parameter(cluster):
    cluster.create("a")
    marked = cluster.delete("a", propagation_policy="Foreground")  # no body: taken from the query
    assert marked["metadata"]["finalizers"] == ["foregroundDeletion"]


def test_orphan_delete_adds_the_orphan_finalizer(cluster):
    cluster.create("a")
    marked = cluster.delete("a", body=client.V1DeleteOptions(propagation_policy="Orphan"))
    assert marked["metadata"]["finalizers"] == ["orphan"]
    wait_until(lambda: not cluster.exists("a"))


def test_other_finalizers_hold_the_object_until_removed(cluster, api):
    cluster.create("held", finalizers=["example.com/hold"])
    cluster.create("marker")
    marked = cluster.delete("held", body=client.V1DeleteOptions(propagation_policy="Background"))
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["finalizers"] == ["example.com/hold"]

    # Once the GC has had time to act on a later deletion, the held object is still there.
    cluster.delete("marker", body=client.V1DeleteOptions(propagation_policy="Foreground"))
    wait_until(lambda: not cluster.exists("marker"))
    assert cluster.exists("held")

    exc, body = api_error(
        lambda: api.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "held", {"metadata": {"finalizers": ["example.com/hold", "new"]}}
        )
    )
    assert exc.status == 422 and "no new finalizers can be added if the object is being deleted" in body["message"]

    released = api.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "held", {"metadata": {"finalizers": None}}
    )
    assert released["metadata"]["name"] == "held"
    assert not cluster.exists("held")


def test_foreground_with_other_finalizers_keeps_them_after_gc(cluster):
    cluster.create("a", finalizers=["example.com/hold"])
    marked = cluster.delete("a", body=client.V1DeleteOptions(propagation_policy="Foreground"))
    assert marked["metadata"]["finalizers"] == ["example.com/hold", "foregroundDeletion"]
    wait_until(lambda: cluster.get("a")["metadata"]["finalizers"] == ["example.com/hold"])


def test_dry_run_delete_keeps_the_object(cluster):
    cluster.create("a")
    assert cluster.delete("a", dry_run="All")["status"] == "Success"
    assert cluster.exists("a")


def test_delete_collection(cluster):
    cluster.create("a", labels={"done": "true"})
    cluster.create("b", labels={"done": "true"})
    cluster.create("c")
    code, _, body = cluster.raw(
        "DELETE",
        f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}?labelSelector=done%3Dtrue",
        {"propagationPolicy": "Background"},
    )
    assert code == 200 and body["kind"] == "TFJobList"
    assert [i["metadata"]["name"] for i in body["items"]] == ["a", "b"]
    assert [i["metadata"]["name"] for i in cluster.list()["items"]] == ["c"]
