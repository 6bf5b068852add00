"""Create, get, update, patch and the status subresource, through the real client."""

from __future__ import annotations

import re
import uuid

from .emulator_testlib import GROUP, NS, PLURAL, VERSION, api_error, tfjob


def test_create_sets_server_fields_and_drops_status(cluster, api):
    created = cluster.create("a", status={"conditions": [{"type": "Succeeded", "status": "True"}]})
    meta = created["metadata"]
    assert created["apiVersion"] == "kubeflow.org/v1" and created["kind"] == "TFJob"
    assert meta["namespace"] == NS and meta["generation"] == 1
    uuid.UUID(meta["uid"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert meta["resourceVersion"].isdigit()
    # The status subresource is enabled: create cannot set status.
    assert "status" not in created
    assert cluster.get("a") == created


def test_every_write_bumps_one_global_resource_version(cluster):
    first = int(cluster.create("a")["metadata"]["resourceVersion"])
    second = int(cluster.create("b", ns="other")["metadata"]["resourceVersion"])
    assert second > first
    assert int(cluster.list()["metadata"]["resourceVersion"]) >= second


def test_get_missing_is_a_not_found_status(cluster):
    exc, body = api_error(lambda: cluster.get("nope"))
    assert exc.status == 404
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'tfjobs.kubeflow.org "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "group": "kubeflow.org", "kind": "tfjobs"},
        "code": 404,
    }


def test_create_existing_name_conflicts(cluster):
    cluster.create("a")
    exc, body = api_error(lambda: cluster.create("a"))
    assert exc.status == 409
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'tfjobs.kubeflow.org "a" already exists'
    assert body["details"] == {"name": "a", "group": "kubeflow.org", "kind": "tfjobs"}


def test_create_validation(cluster, api):
    def create(body, ns=NS):
        return api_error(lambda: api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body))

    nameless = tfjob("x")
    del nameless["metadata"]["name"]
    exc, body = create(nameless)
    assert exc.status == 422 and body["reason"] == "Invalid"
    assert (
        body["message"]
        == 'TFJob.kubeflow.org "" is invalid: metadata.name: Required value: name or generateName is required'
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value: name or generateName is required",
            "field": "metadata.name",
        }
    ]

    exc, body = create(tfjob("Not_A_Name"))
    assert exc.status == 422 and body["details"]["causes"][0]["field"] == "metadata.name"

    other_ns = tfjob("x")
    other_ns["metadata"]["namespace"] = "elsewhere"
    exc, body = create(other_ns)
    assert exc.status == 400 and body["reason"] == "BadRequest"
    assert body["message"] == "the namespace of the provided object does not match the namespace sent on the request"

    kindless = tfjob("x")
    del kindless["kind"]
    exc, body = create(kindless)
    assert exc.status == 400 and body["message"].startswith("Object 'Kind' is missing in ")

    exc, body = create({**tfjob("x"), "kind": "PyTorchJob"})
    assert (
        exc.status == 422
        and body["message"] == 'TFJob.kubeflow.org "x" is invalid: kind: Invalid value: "PyTorchJob": must be TFJob'
    )

    stale = tfjob("x")
    stale["metadata"]["resourceVersion"] = "42"
    exc, body = create(stale)
    assert (
        exc.status == 500
        and body["message"] == "Internal error occurred: resourceVersion should not be set on objects to be created"
    )

    exc, body = create(tfjob("bad-label", labels={"app": "has space"}))
    assert exc.status == 422 and body["details"]["causes"][0]["field"] == "metadata.labels"


def test_generate_name(cluster, api):
    body = tfjob("")
    body["metadata"] = {"generateName": "job-"}
    created = api.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    assert re.fullmatch(r"job-[bcdfghjklmnpqrstvwxz2456789]{5}", created["metadata"]["name"])


def test_api_version_defaults_from_the_url(api):
    body = tfjob("a")
    del body["apiVersion"]
    assert api.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)["apiVersion"] == "kubeflow.org/v1"


def test_invalid_json_and_unknown_paths(cluster):
    code, _, body = cluster.raw("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}", b"{not json")
    assert code == 400 and body["reason"] == "BadRequest"
    assert body["message"].startswith("couldn't get version/kind; json parse error")

    for path in ("/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs", "/apis/nope.io/v1", "/whatever"):
        code, _, body = cluster.raw("GET", path)
        assert code == 404, path
        assert body == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "the server could not find the requested resource",
            "reason": "NotFound",
            "details": {},
            "code": 404,
        }
    code, _, body = cluster.raw("POST", f"/apis/{GROUP}/{VERSION}/{PLURAL}", tfjob("a"))
    assert code == 405 and body["reason"] == "MethodNotAllowed"


def test_main_resource_writes_ignore_status(cluster, api):
    cluster.create("a")
    cluster.set_status("a", {"phase": "Running"})
    job = cluster.get("a")
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3
    job["status"] = {"phase": "Hacked"}
    updated = api.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", job)
    assert updated["status"] == {"phase": "Running"}
    assert updated["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 3
    assert updated["metadata"]["generation"] == 2

    patched = api.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", {"status": {"phase": "Hacked"}})
    assert patched["status"] == {"phase": "Running"}
    # Nothing changed, so nothing was written: same resourceVersion.
    assert patched["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]


def test_status_writes_change_only_status(cluster, api):
    created = cluster.create("a", labels={"app": "x"})
    job = dict(created, status={"phase": "Succeeded"}, spec={"changed": True})
    job["metadata"] = dict(created["metadata"], labels={"app": "changed"})
    updated = api.replace_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "a", job)
    assert updated["status"] == {"phase": "Succeeded"}
    assert updated["spec"] == created["spec"]
    assert updated["metadata"]["labels"] == {"app": "x"}
    assert updated["metadata"]["generation"] == 1
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])

    patched = api.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "a", {"spec": {"x": 1}, "status": {"completionTime": "2024-01-01T00:00:00Z"}}
    )
    assert patched["status"] == {"phase": "Succeeded", "completionTime": "2024-01-01T00:00:00Z"}
    assert patched["spec"] == created["spec"]


def test_generation_bumps_only_on_non_metadata_changes(cluster, api):
    cluster.create("a")
    labelled = api.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", {"metadata": {"labels": {"k": "v"}}})
    assert labelled["metadata"]["generation"] == 1
    respec = api.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "a", {"spec": {"runPolicy": {"ttlSecondsAfterFinished": 60}}}
    )
    assert respec["metadata"]["generation"] == 2
    assert respec["spec"]["tfReplicaSpecs"] == {"Worker": {"replicas": 1}}  # merge patch kept the rest


def test_json_patch(cluster, api):
    cluster.create("a")
    patched = api.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        PLURAL,
        "a",
        [
            {"op": "replace", "path": "/spec/tfReplicaSpecs/Worker/replicas", "value": 4},
            {"op": "add", "path": "/metadata/labels", "value": {"ttl": "done"}},
        ],
        _content_type="application/json-patch+json",
    )
    assert patched["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 4
    assert patched["metadata"]["labels"] == {"ttl": "done"}

    exc, body = api_error(
        lambda: api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            "a",
            [{"op": "test", "path": "/spec/tfReplicaSpecs/Worker/replicas", "value": 1}],
            _content_type="application/json-patch+json",
        )
    )
    assert exc.status == 422 and body["reason"] == "Invalid"


def test_strategic_merge_patch_is_unsupported_for_custom_resources(cluster, api):
    cluster.create("a")
    exc, body = api_error(
        lambda: api.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "a", {"spec": {}}, _content_type="application/strategic-merge-patch+json"
        )
    )
    assert exc.status == 415 and body["reason"] == "UnsupportedMediaType"


def test_put_with_stale_resource_version_conflicts(cluster, api):
    stale = cluster.create("a")
    api.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", {"spec": {"x": 1}})
    exc, body = api_error(lambda: api.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", stale))
    assert exc.status == 409
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on tfjobs.kubeflow.org "a": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert body["details"] == {"name": "a", "group": "kubeflow.org", "kind": "tfjobs"}

    # So does a merge patch that carries a stale resourceVersion as a precondition.
    exc, _ = api_error(
        lambda: api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            NS,
            PLURAL,
            "a",
            {"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"]}, "spec": {"x": 2}},
        )
    )
    assert exc.status == 409


def test_put_needs_a_resource_version_and_an_existing_object(cluster, api):
    job = cluster.create("a")
    del job["metadata"]["resourceVersion"]
    exc, body = api_error(lambda: api.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", job))
    assert exc.status == 422
    assert (
        body["message"]
        == 'tfjobs.kubeflow.org "a" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update'
    )

    exc, _ = api_error(
        lambda: api.replace_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "b", dict(tfjob("b"), metadata={"name": "b", "resourceVersion": "1"})
        )
    )
    assert exc.status == 404

    exc, body = api_error(lambda: api.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "other", job))
    assert exc.status == 400
    assert body["message"] == "the name of the object (a) does not match the name on the URL (other)"


def test_dry_run_create_persists_nothing(cluster, api):
    created = api.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, tfjob("a"), dry_run="All")
    assert created["metadata"]["name"] == "a"
    assert not cluster.exists("a")


def test_a_secrets_string_data_is_written_into_its_data_and_never_returned(tmp_path):
    """Convert_v1_Secret_To_core_Secret: stringData overwrites data's keys, base64-encoded."""
    import base64

    from kubernetes import client as kube

    from jobttl_emulator import EmulatorServer, Resource

    secrets = Resource("", "v1", "Secret", "secrets", status_subresource=False, builtin=True)
    with EmulatorServer(resources=(secrets,)) as server:
        api = kube.CoreV1Api(kube.ApiClient(kube.Configuration(host=server.url)))
        body = kube.V1Secret(
            api_version="v1",
            kind="Secret",
            metadata=kube.V1ObjectMeta(name="s"),
            data={"a": base64.b64encode(b"old").decode(), "b": base64.b64encode(b"kept").decode()},
            string_data={"a": "new", "c": "plain"},
        )
        created = api.create_namespaced_secret(NS, body)
        read = api.read_namespaced_secret("s", NS)
        for secret in (created, read):
            assert {k: base64.b64decode(v).decode() for k, v in secret.data.items()} == {
                "a": "new",
                "b": "kept",
                "c": "plain",
            }
            assert secret.string_data is None
