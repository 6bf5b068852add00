"""What kubectl relies on, over plain HTTP: OpenAPI, Tables, server-side apply, strategic merge, access reviews."""

from __future__ import annotations

import base64
import json
import urllib.request

import requests
from kubernetes import client
from openapi_spec_validator import validate

from jobttl_emulator import protobuf

from .emulator_testlib import pod, tfjob, wait_until

TABLE = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)
TFJOBS = "/apis/kubeflow.org/v1/namespaces/ns/tfjobs"
PROTO_V2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


def test_openapi_v3_index_and_documents(full):
    index = full.raw("GET", "/openapi/v3")[2]["paths"]
    assert {"api/v1", "apis/batch/v1", "apis/kubeflow.org/v1"} <= set(index)
    url = index["apis/kubeflow.org/v1"]["serverRelativeURL"]
    code, headers, doc = full.raw("GET", url)
    assert code == 200 and headers["Cache-Control"] == "public, immutable"
    tfjob_schema = doc["components"]["schemas"]["org.kubeflow.v1.TFJob"]
    assert tfjob_schema["x-kubernetes-group-version-kind"] == [
        {"group": "kubeflow.org", "kind": "TFJob", "version": "v1"}
    ]
    assert "runPolicy" in tfjob_schema["properties"]["spec"]["properties"]
    patch = doc["paths"]["/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs/{name}"]["patch"]
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    core = full.raw("GET", index["api/v1"]["serverRelativeURL"])[2]
    pod_patch = core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]["requestBody"]["content"]
    assert "application/strategic-merge-patch+json" in pod_patch
    assert "/api/v1/namespaces/{namespace}/pods/{name}/log" in core["paths"]
    assert "io.k8s.api.core.v1.Pod" in core["components"]["schemas"]


def test_openapi_documents_are_valid_openapi(full):
    for entry in full.raw("GET", "/openapi/v3")[2]["paths"].values():
        validate(full.raw("GET", entry["serverRelativeURL"])[2])
    validate(full.raw("GET", "/openapi/v2")[2])  # Swagger 2.0: the CRD schemas without anyOf and the like


def test_openapi_v3_stale_hash_redirects(full):
    response = requests.get(
        full.server.url + "/openapi/v3/apis/kubeflow.org/v1?hash=stale", allow_redirects=False, timeout=5
    )
    assert (
        response.status_code == 301
        and "hash=" in response.headers["Location"]
        and "stale" not in response.headers["Location"]
    )
    assert full.raw("GET", "/openapi/v3/apis/nope/v1")[0] == 404


def test_openapi_v2_is_json_and_refuses_protobuf(full):
    code, headers, doc = full.raw("GET", "/openapi/v2", accept="application/json")
    assert code == 200 and doc["swagger"] == "2.0"
    assert "org.kubeflow.v1.TFJob" in doc["definitions"] and "/api/v1/namespaces/{namespace}/pods" in doc["paths"]
    code, _, _ = full.raw("GET", "/openapi/v2", accept=PROTO_V2)
    assert code == 406  # as kube-openapi answers a type it does not offer; kubectl 1.32 then goes without v2


def test_table_columns_from_the_crd(full):
    full.create("done")
    full.set_status(
        "done", {"conditions": [{"type": "Created", "status": "True"}, {"type": "Succeeded", "status": "True"}]}
    )
    full.create("new")
    code, _, table = full.raw("GET", TFJOBS, accept=TABLE)
    assert code == 200 and table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "State", "Age"]
    assert [row["cells"][:2] for row in table["rows"]] == [["done", "Succeeded"], ["new", None]]
    assert table["rows"][0]["cells"][2] in ("0s", "1s", "2s")
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    full_rows = full.raw("GET", TFJOBS + "?includeObject=Object", accept=TABLE)[2]["rows"]
    assert full_rows[0]["object"]["spec"] == tfjob("x")["spec"]
    assert full.raw("GET", TFJOBS + "?includeObject=Bogus", accept=TABLE)[0] == 400
    one = full.raw("GET", TFJOBS + "/new", accept=TABLE)[2]
    assert [r["cells"][0] for r in one["rows"]] == ["new"]
    page = full.raw("GET", TFJOBS + "?limit=1", accept=TABLE)[2]
    assert len(page["rows"]) == 1 and page["metadata"]["continue"]


def test_default_columns_without_a_crd(cluster):
    cluster.create("a")
    table = cluster.raw("GET", "/apis/kubeflow.org/v1/namespaces/ns/tfjobs", accept=TABLE)[2]
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]


def test_built_in_columns(full):
    core = client.CoreV1Api(full.api.api_client)
    core.create_namespaced_pod("ns", pod("p", containers=("a", "b")))
    core.patch_namespaced_pod_status(
        "p",
        "ns",
        {
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "a",
                        "ready": True,
                        "restartCount": 2,
                        "state": {"running": {}},
                        "image": "x",
                        "imageID": "",
                    },
                    {
                        "name": "b",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "image": "x",
                        "imageID": "",
                    },
                ],
            }
        },
    )
    pods = full.raw("GET", "/api/v1/namespaces/ns/pods", accept=TABLE)[2]
    assert [c["name"] for c in pods["columnDefinitions"] if not c["priority"]] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert pods["rows"][0]["cells"][:4] == ["p", "1/2", "CrashLoopBackOff", "2"]

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"completions": 3}}
    full.raw("POST", "/apis/batch/v1/namespaces/ns/jobs", job)
    full.raw(
        "PATCH",
        "/apis/batch/v1/namespaces/ns/jobs/j/status",
        {
            "status": {
                "succeeded": 3,
                "startTime": "2024-01-01T00:00:00Z",
                "completionTime": "2024-01-01T00:02:05Z",
                "conditions": [{"type": "Complete", "status": "True"}],
            }
        },
        "application/merge-patch+json",
    )
    jobs = full.raw("GET", "/apis/batch/v1/namespaces/ns/jobs", accept=TABLE)[2]
    assert [c["name"] for c in jobs["columnDefinitions"] if not c["priority"]] == [
        "Name",
        "Status",
        "Completions",
        "Duration",
        "Age",
    ]
    assert jobs["rows"][0]["cells"][:4] == ["j", "Complete", "3/3", "2m5s"]

    core.create_namespaced_event(
        "ns",
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "e"},
            "type": "Normal",
            "reason": "SuccessfulDelete",
            "message": "deleted ",
            "lastTimestamp": "2024-01-01T00:00:00Z",
            "involvedObject": {"kind": "TFJob", "name": "x", "namespace": "ns"},
        },
    )
    events = full.raw("GET", "/api/v1/namespaces/ns/events", accept=TABLE)[2]
    assert [c["name"] for c in events["columnDefinitions"] if not c["priority"]] == [
        "Last Seen",
        "Type",
        "Reason",
        "Object",
        "Message",
    ]
    cells = events["rows"][0]["cells"]
    assert cells[1:4] + [cells[6]] == ["Normal", "SuccessfulDelete", "tfjob/x", "deleted"] and cells[0].endswith(
        ("d", "y")
    )


def test_watch_as_table(full):
    full.create("a")
    request = urllib.request.Request(full.server.url + TFJOBS + "?watch=1&timeoutSeconds=2", headers={"Accept": TABLE})
    with urllib.request.urlopen(request, timeout=10) as response:
        first = json.loads(response.readline())
        full.delete("a")
        second = json.loads(response.readline())
    assert first["type"] == "ADDED" and first["object"]["kind"] == "Table" and first["object"]["columnDefinitions"]
    assert second["type"] == "DELETED" and second["object"]["columnDefinitions"] == []
    assert second["object"]["rows"][0]["cells"][0] == "a"


def test_server_side_apply_creates_merges_and_prunes(full):
    apply = "application/apply-patch+yaml"
    config = "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: a\n  labels: {team: x}\nspec:\n  runPolicy: {ttlSecondsAfterFinished: 60}\n"
    code, _, created = full.raw("PATCH", TFJOBS + "/a?fieldManager=ci", config.encode(), apply)
    assert code == 201 and created["spec"]["runPolicy"] == {"ttlSecondsAfterFinished": 60}
    (entry,) = created["metadata"]["managedFields"]
    assert entry["manager"] == "ci" and entry["operation"] == "Apply"
    assert entry["fieldsV1"] == {
        "f:metadata": {"f:labels": {"f:team": {}}},
        "f:spec": {"f:runPolicy": {"f:ttlSecondsAfterFinished": {}}},
    }

    full.api.patch_namespaced_custom_object(
        "kubeflow.org", "v1", "ns", "tfjobs", "a", {"spec": {"enableDynamicWorker": True}}
    )
    smaller = config.replace("  runPolicy: {ttlSecondsAfterFinished: 60}\n", "  runPolicy: {backoffLimit: 3}\n")
    code, _, applied = full.raw("PATCH", TFJOBS + "/a?fieldManager=ci", smaller.encode(), apply)
    assert code == 200 and applied["spec"] == {
        "runPolicy": {"backoffLimit": 3},
        "enableDynamicWorker": True,
    }  # its old field went, others stay

    rival = smaller.replace("team: x", "team: y").replace("backoffLimit: 3", "backoffLimit: 5")
    code, _, body = full.raw("PATCH", TFJOBS + "/a?fieldManager=other", rival.encode(), apply)
    assert code == 409 and body["reason"] == "Conflict"
    assert body["message"].startswith('Apply failed with 2 conflicts: conflicts with "ci":')
    assert {c["field"] for c in body["details"]["causes"]} == {".metadata.labels.team", ".spec.runPolicy.backoffLimit"}
    code, _, forced = full.raw("PATCH", TFJOBS + "/a?fieldManager=other&force=true", rival.encode(), apply)
    assert code == 200 and forced["metadata"]["labels"] == {"team": "y"}
    assert [e["manager"] for e in forced["metadata"]["managedFields"]] == ["other"]

    code, _, body = full.raw("PATCH", TFJOBS + "/a", config.encode(), apply)
    assert code == 422 and "fieldManager: Required value: is required for apply patch" in body["message"]


def test_strategic_merge_patch_for_built_ins_only(full):
    core = client.CoreV1Api(full.api.api_client)
    core.create_namespaced_pod(
        "ns", pod("p", containers=("a", "b")) | {"metadata": {"name": "p", "finalizers": ["x/one"]}}
    )
    patched = core.patch_namespaced_pod(
        "p", "ns", {"metadata": {"finalizers": ["x/two"]}, "spec": {"containers": [{"name": "b", "image": "alpine"}]}}
    )
    assert [(c.name, c.image) for c in patched.spec.containers] == [("a", "busybox"), ("b", "alpine")]  # merged by name
    assert patched.metadata.finalizers == ["x/one", "x/two"]  # a merge list of primitives
    code, _, body = full.raw(
        "PATCH",
        "/api/v1/namespaces/ns/pods/p",
        {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}},
        "application/strategic-merge-patch+json",
    )
    assert code == 200 and [c["name"] for c in body["spec"]["containers"]] == ["b"]

    full.create("t")
    code, _, body = full.raw("PATCH", TFJOBS + "/t", {"spec": {}}, "application/strategic-merge-patch+json")
    assert code == 415 and body["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


def test_self_subject_access_review(full):
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {"namespace": "ns", "verb": "delete", "group": "kubeflow.org", "resource": "tfjobs"}
        },
    }
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    code, _, body = full.raw("POST", path, review)
    assert code == 201 and body["status"]["allowed"] is True
    full.server.set_access_rules([{"verbs": ["get", "list"], "apiGroups": ["kubeflow.org"], "resources": ["*"]}])
    assert full.raw("POST", path, review)[2]["status"] == {"allowed": False}
    review["spec"]["resourceAttributes"]["verb"] = "list"
    assert full.raw("POST", path, review)[2]["status"]["allowed"] is True
    assert full.raw("POST", path, {**review, "spec": {}})[0] == 422

    # kubectl auth can-i sends it as protobuf.
    spec = _proto_field(1, _proto_field(2, b"delete") + _proto_field(5, b"tfjobs"))
    message = _proto_field(2, spec)
    envelope = _proto_field(
        1, _proto_field(1, b"authorization.k8s.io/v1") + _proto_field(2, b"SelfSubjectAccessReview")
    ) + _proto_field(2, message)
    code, _, body = full.raw("POST", path, protobuf.MAGIC + envelope, protobuf.CONTENT_TYPE)
    assert code == 201 and body["spec"]["resourceAttributes"] == {"verb": "delete", "resource": "tfjobs"}
    assert body["status"] == {"allowed": False}
    assert requests.put(f"{full.server.url}/_emulator/access-rules", json=None, timeout=5).status_code == 200
    wait_until(lambda: full.raw("POST", path, review)[2]["status"]["allowed"])


def _proto_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (short payloads only)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_unknown_fields_are_pruned_or_refused(full):
    body = tfjob("a")
    body["spec"]["tfReplicaSpecs"]["Worker"]["template"] = {"spec": {"containers": [{"name": "c", "imag": "typo"}]}}
    body["spec"]["colour"] = "blue"
    body["metadata"]["bogus"] = 1
    code, _, refused = full.raw("POST", TFJOBS + "?fieldValidation=Strict", body)
    assert code == 400 and refused["reason"] == "BadRequest"
    assert refused["message"] == (
        'TFJob in version "v1" cannot be handled as a TFJob: strict decoding error: unknown field "metadata.bogus", '
        'unknown field "spec.colour", unknown field "spec.tfReplicaSpecs.Worker.template.spec.containers[0].imag"'
    )
    code, _, created = full.raw("POST", TFJOBS, body)  # Warn (the default) and Ignore drop them
    assert code == 201 and "colour" not in created["spec"] and "bogus" not in created["metadata"]
    assert created["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] == [{"name": "c"}]
    code, _, body = full.raw(
        "PATCH", TFJOBS + "/a?fieldValidation=Strict", {"spec": {"colour": "red"}}, "application/merge-patch+json"
    )
    assert code == 400 and 'unknown field "spec.colour"' in body["message"]


def test_kinds_without_a_crd_schema_keep_unknown_fields(cluster):
    created = cluster.api.create_namespaced_custom_object(
        "kubeflow.org", "v1", "ns", "tfjobs", {**tfjob("a"), "extra": {"x": 1}}
    )
    assert created["extra"] == {"x": 1}


def test_apply_without_owned_metadata_keeps_others_metadata(full):
    apply = "application/apply-patch+yaml"
    bare = "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {enableDynamicWorker: true}\n"
    code, _, created = full.raw("PATCH", TFJOBS + "/a?fieldManager=ci", bare.encode(), apply)
    assert code == 201 and created["metadata"]["managedFields"][0]["fieldsV1"] == {
        "f:spec": {"f:enableDynamicWorker": {}}
    }
    full.api.patch_namespaced_custom_object(
        "kubeflow.org", "v1", "ns", "tfjobs", "a", {"metadata": {"annotations": {"k": "v"}}}
    )
    labelled = bare.replace("{name: a}", "{name: a, labels: {team: x}}")
    code, _, applied = full.raw("PATCH", TFJOBS + "/a?fieldManager=ci", labelled.encode(), apply)
    assert (
        code == 200
        and applied["metadata"]["annotations"] == {"k": "v"}
        and applied["metadata"]["labels"] == {"team": "x"}
    )
    assert applied["metadata"]["uid"] == created["metadata"]["uid"]


def test_protobuf_configmaps_and_secrets_decode_as_helm_writes_its_release_records(full):
    """Helm's release storage writes Secrets (or ConfigMaps) with client-go's typed clients, in protobuf."""
    labels = _proto_field(11, _proto_field(1, b"owner") + _proto_field(2, b"helm"))
    meta = _proto_field(1, _proto_field(1, b"sh.helm.release.v1.r.v1") + labels)

    def envelope(kind: bytes, message: bytes) -> bytes:
        return (
            protobuf.MAGIC + _proto_field(1, _proto_field(1, b"v1") + _proto_field(2, kind)) + _proto_field(2, message)
        )

    secret = protobuf.decode(
        envelope(
            b"Secret",
            meta
            + _proto_field(2, _proto_field(1, b"release") + _proto_field(2, b"\x00\xffgz"))
            + _proto_field(3, b"helm.sh/release.v1"),
        )
    )
    assert secret == {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {"name": "sh.helm.release.v1.r.v1", "labels": {"owner": "helm"}},
        "data": {"release": base64.b64encode(b"\x00\xffgz").decode()},
    }
    path = "/api/v1/namespaces/ns/configmaps"
    body = envelope(b"ConfigMap", meta + _proto_field(2, _proto_field(1, b"release") + _proto_field(2, b"H4sI")))
    code, _, created = full.raw("POST", path, body, protobuf.CONTENT_TYPE)
    assert code == 201 and created["data"] == {"release": "H4sI"} and created["metadata"]["labels"] == {"owner": "helm"}


def test_a_built_in_kind_takes_an_update_without_a_resource_version(full):
    """AllowUnconditionalUpdate: true for built-in kinds (Helm updates its release records so); custom
    resources still need one (test_put_needs_a_resource_version_and_an_existing_object)."""
    path = "/api/v1/namespaces/ns/configmaps"
    code, _, created = full.raw(
        "POST", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    )
    assert code == 201
    code, _, updated = full.raw(
        "PUT", f"{path}/c", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "2"}}
    )
    assert code == 200 and updated["data"] == {"a": "2"}
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
