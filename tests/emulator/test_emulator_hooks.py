"""Test hooks under /_emulator/: request log and fault injection."""

from __future__ import annotations

import time

from kubernetes import client

from .emulator_testlib import GROUP, NS, PLURAL, VERSION, api_error

OBJECTS = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}"


def test_500_twice_then_success(cluster, server):
    cluster.create("a")
    server.add_fault(verb="get", status=500, count=2)
    for _ in range(2):
        exc, body = api_error(lambda: cluster.get("a"))
        assert exc.status == 500
        assert body["reason"] == "InternalError"
        assert body["message"] == "Internal error occurred: injected fault"
    assert cluster.get("a")["metadata"]["name"] == "a"


def test_429_carries_retry_after(cluster, server):
    server.add_fault(verb="create", status=429)
    exc, body = api_error(lambda: cluster.create("a"))
    assert exc.status == 429
    assert exc.headers["Retry-After"] == "1"
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Too many requests, please try again later.",
        "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": 1},
        "code": 429,
    }
    assert cluster.create("a")["metadata"]["name"] == "a"


def test_urllib3_retries_idempotent_requests_after_429(cluster, server):
    """As against a real server: urllib3's default Retry honours Retry-After for GET/PUT/DELETE."""
    server.add_fault(verb="list", status=429)
    assert cluster.list()["items"] == []
    assert [e["status"] for e in server.requests("GET")] == [429, 200]


def test_403_reads_like_rbac(cluster, server):
    cluster.create("x")
    server.add_fault(verb="delete", status=403)
    exc, body = api_error(lambda: cluster.delete("x"))
    assert exc.status == 403
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'tfjobs.kubeflow.org "x" is forbidden: User "system:serviceaccount:jobttl:worker" cannot delete '
        'resource "tfjobs" in API group "kubeflow.org" in the namespace "ns"'
    )
    assert body["details"] == {"name": "x", "group": "kubeflow.org", "kind": "tfjobs"}
    assert cluster.exists("x")

    server.add_fault(verb="list", status=403, user="someone")
    _, body = api_error(lambda: cluster.list(ns=None))
    assert body["message"] == (
        'tfjobs.kubeflow.org is forbidden: User "someone" cannot list resource "tfjobs" in API group '
        '"kubeflow.org" at the cluster scope'
    )


def test_faults_match_verb_and_path(cluster, server, api):
    cluster.create("a")
    cluster.create("b")
    server.add_fault(verb="update", status=503, path_contains="/b/status")
    cluster.set_status("a", {"phase": "Running"})  # patch, not update: unaffected
    job = cluster.get("b")
    job["status"] = {"phase": "Running"}
    exc, body = api_error(lambda: api.replace_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "b", job))
    assert exc.status == 503 and body["reason"] == "ServiceUnavailable"


def test_watch_fault_fails_before_streaming(cluster, server, api):
    server.add_fault(verb="watch", status=500)
    exc, _ = api_error(
        lambda: api.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, watch=True, _preload_content=False)
    )
    assert exc.status == 500
    assert cluster.list()["items"] == []  # plain lists were not affected


def test_delay_only_fault(cluster, server):
    cluster.create("a")
    server.add_fault(verb="get", delay=0.3)
    started = time.monotonic()
    assert cluster.get("a")["metadata"]["name"] == "a"
    assert time.monotonic() - started >= 0.3


def test_fault_admin_endpoints(cluster):
    code, _, fault = cluster.raw("POST", "/_emulator/faults", {"verb": "create", "status": 500, "count": 2})
    assert code == 201 and fault["count"] == 2 and fault["verb"] == "create"
    code, _, faults = cluster.raw("GET", "/_emulator/faults")
    assert [f["id"] for f in faults] == [fault["id"]]
    assert api_error(lambda: cluster.create("a"))[0].status == 500
    assert cluster.raw("GET", "/_emulator/faults")[2][0]["count"] == 1
    assert cluster.raw("DELETE", "/_emulator/faults")[2] == {"cleared": 1}
    assert cluster.create("a")["metadata"]["name"] == "a"

    code, _, body = cluster.raw("POST", "/_emulator/faults", {"verb": "explode", "status": 500})
    assert code == 400 and "verb" in body["error"]


def test_request_log_records_delete_options(cluster, server):
    uid = cluster.create("a")["metadata"]["uid"]
    server.clear_requests()
    cluster.delete(
        "a", body=client.V1DeleteOptions(propagation_policy="Background", preconditions=client.V1Preconditions(uid=uid))
    )
    [entry] = server.requests(method="DELETE")
    assert entry["method"] == "DELETE"
    assert entry["path"] == f"{OBJECTS}/a"
    assert entry["query"] == {}
    assert entry["body"] == {"preconditions": {"uid": uid}, "propagationPolicy": "Background"}
    assert entry["status"] == 200
    assert abs(entry["time"] - time.time()) < 10

    code, _, logged = cluster.raw("GET", "/_emulator/requests?method=DELETE")
    assert code == 200 and logged == [entry]


def test_request_log_over_http_and_clearing(cluster):
    cluster.list(label_selector="app=x", limit=5)
    code, _, logged = cluster.raw("GET", "/_emulator/requests")
    assert code == 200
    assert [(e["method"], e["path"], e["query"], e["body"], e["status"]) for e in logged] == [
        ("GET", OBJECTS, {"labelSelector": "app=x", "limit": "5"}, None, 200)
    ]  # admin requests are not logged
    assert cluster.raw("DELETE", "/_emulator/requests")[2] == {"cleared": 1}
    assert cluster.raw("GET", "/_emulator/requests")[2] == []


def test_failed_requests_are_logged_with_their_status(cluster, server):
    server.add_fault(verb="create", status=429)
    api_error(lambda: cluster.create("a"))
    [entry] = server.requests("POST")
    assert entry["status"] == 429 and entry["body"]["metadata"] == {"name": "a"}


def test_reset(cluster, server):
    cluster.create("a")
    old_rv = cluster.list()["metadata"]["resourceVersion"]
    server.add_fault(verb="get", status=500)
    code, _, body = cluster.raw("POST", "/_emulator/reset")
    assert code == 200 and int(body["resourceVersion"]) >= int(old_rv)
    assert cluster.list()["items"] == []
    assert server.hooks.faults() == []
    assert not cluster.exists("a")  # no fault left to fail this get
