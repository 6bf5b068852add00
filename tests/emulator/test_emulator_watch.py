"""Watches through kubernetes.watch.Watch: order, resume, expiry, bookmarks, forced closes."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from .emulator_testlib import GROUP, NS, PLURAL, VERSION, wait_until


def test_added_modified_deleted_in_order(cluster, api, watches):
    rv = cluster.list()["metadata"]["resourceVersion"]
    w = watches(api.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, resource_version=rv)
    cluster.create("a")
    cluster.set_status("a", {"phase": "Succeeded"})
    cluster.create("other", ns="elsewhere")  # another namespace: not seen
    cluster.delete("a")
    events = [w.next() for _ in range(3)]
    assert [t for t, _ in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[1][1]["status"] == {"phase": "Succeeded"}
    assert events[2][1]["status"] == {"phase": "Succeeded"}  # DELETED carries the last state
    rvs = [int(o["metadata"]["resourceVersion"]) for _, o in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3


def test_watch_without_resource_version_starts_with_current_objects(cluster, api, watches):
    cluster.create("a")
    cluster.create("b")
    w = watches(api.list_cluster_custom_object, GROUP, VERSION, PLURAL)
    assert [w.next() for _ in range(2)] == [("ADDED", cluster.get("a")), ("ADDED", cluster.get("b"))]


def test_resume_from_a_resource_version_replays_later_events(cluster, api):
    rv = cluster.create("a")["metadata"]["resourceVersion"]
    cluster.create("b")
    cluster.set_status("a", {"phase": "Running"})
    stream = client.CustomObjectsApi(api.api_client).list_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, watch=True, resource_version=rv, timeout_seconds=1, _preload_content=False
    )
    assert stream.status == 200 and stream.headers["Content-Type"] == "application/json"
    assert stream.headers.get("Transfer-Encoding") == "chunked"
    events = [json.loads(line) for line in stream.read().decode().splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b"), ("MODIFIED", "a")]


def test_too_old_resource_version_is_an_error_event(cluster, server, api):
    old = cluster.create("a")["metadata"]["resourceVersion"]
    cluster.create("b")
    current = server.compact()
    stream = api.list_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, watch=True, resource_version=old, _preload_content=False
    )
    assert stream.status == 200
    assert [json.loads(line) for line in stream.read().decode().splitlines()] == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {old} ({current})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]


def test_watch_helper_raises_410_for_too_old_resource_version(cluster, server, api, watches):
    old = cluster.create("a")["metadata"]["resourceVersion"]
    cluster.create("b")
    server.compact()
    w = watches(api.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, resource_version=old, timeout_seconds=5)
    assert w.join() == []
    assert isinstance(w.error, ApiException) and w.error.status == 410


def test_bookmarks(cluster, api, watches):
    rv = cluster.create("a")["metadata"]["resourceVersion"]
    w = watches(
        api.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, resource_version=rv, allow_watch_bookmarks=True
    )
    kind, obj = w.next_of("BOOKMARK")
    assert obj == {"kind": "TFJob", "apiVersion": "kubeflow.org/v1", "metadata": {"resourceVersion": rv}}
    newer = cluster.create("b", ns="elsewhere")["metadata"]["resourceVersion"]  # not watched, still advances bookmarks
    wait_until(lambda: w.next_of("BOOKMARK")[1]["metadata"]["resourceVersion"] == newer)
    assert w.watch.resource_version == newer  # the client resumes from bookmarks


def test_no_bookmarks_unless_asked(cluster, api):
    rv = cluster.create("a")["metadata"]["resourceVersion"]
    stream = api.list_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, watch=True, resource_version=rv, timeout_seconds=1, _preload_content=False
    )
    assert stream.read() == b""


def test_timeout_seconds_ends_the_stream(cluster, api, watches):
    w = watches(api.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, timeout_seconds=1)
    assert w.join(timeout=5) == [] and w.error is None


def test_selector_transitions_become_added_and_deleted(cluster, api, watches):
    rv = cluster.create("a", labels={"app": "other"})["metadata"]["resourceVersion"]
    w = watches(
        api.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, resource_version=rv, label_selector="app=train"
    )
    api.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", {"metadata": {"labels": {"app": "train"}}})
    api.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", {"spec": {"x": 1}})
    api.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "a", {"metadata": {"labels": {"app": "other"}}})
    events = [w.next() for _ in range(3)]
    assert [t for t, _ in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[2][1]["metadata"]["labels"] == {"app": "train"}  # the last state that matched


def test_closed_watch_is_resumed_by_the_client(cluster, server, api, watches):
    rv = cluster.create("a")["metadata"]["resourceVersion"]
    w = watches(api.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, resource_version=rv)
    cluster.create("b")
    assert w.next()[0] == "ADDED"
    last = cluster.get("b")["metadata"]["resourceVersion"]

    assert server.close_watches() == 1
    cluster.create("c")
    kind, obj = w.next()
    assert (kind, obj["metadata"]["name"]) == ("ADDED", "c")  # nothing lost, nothing repeated

    watch_requests = [r for r in server.requests("GET") if r["query"].get("watch") == "true"]
    assert [r["query"]["resourceVersion"] for r in watch_requests] == [rv, last]


def test_aborted_watch_surfaces_as_a_connection_error(cluster, server, api, watches):
    w = watches(api.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL)
    cluster.create("a")
    assert w.next()[0] == "ADDED"
    wait_until(lambda: server.close_watches(abort=True) == 1)
    w.join()
    assert w.error is not None and not isinstance(w.error, ApiException)


def test_close_watches_admin_endpoint(cluster, api, watches):
    w = watches(api.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL, timeout_seconds=30)
    cluster.create("a")
    assert w.next()[0] == "ADDED"
    code, _, body = cluster.raw("POST", "/_emulator/close-watches")
    assert (code, body) == (200, {"closed": 1})
    assert w.join() == [] and w.error is None  # with timeout_seconds the client does not resume


@pytest.mark.parametrize("rv", ["abc", "-1"])
def test_invalid_resource_version_is_a_bad_request(api, rv):
    with pytest.raises(ApiException) as info:
        api.list_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, watch=True, resource_version=rv, _preload_content=False
        )
    assert info.value.status == 400


def test_client_stop_ends_the_watch_on_both_sides(cluster, server, api, watches):
    w = watches(api.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL)
    cluster.create("a")
    assert w.next()[0] == "ADDED"
    assert server.store.open_watches == 1
    w.watch.stop()  # with keep-alive connections this shuts the socket at once, as with a real server
    w.join(timeout=2)
    wait_until(lambda: server.store.open_watches == 0, timeout=3)


def stream_list(server, **params) -> tuple[int, list[dict]]:
    """A raw watch request, as client-go's reflectors send a streaming list."""
    import requests

    query = {"watch": "true", "timeoutSeconds": "1", **params}
    response = requests.get(f"{server.url}/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}", params=query, timeout=10)
    return response.status_code, [json.loads(line) for line in response.text.splitlines() if line]


def test_a_streaming_list_sends_the_objects_then_the_bookmark_that_ends_them(cluster, server):
    """sendInitialEvents=true (client-go's WatchList, on by default since 1.35; Helm 4 waits on
    hooks with it): every object as ADDED, then a BOOKMARK annotated k8s.io/initial-events-end at
    the current resourceVersion, then what changes after."""
    cluster.create("a")
    rv = cluster.create("b")["metadata"]["resourceVersion"]
    status, events = stream_list(
        server, sendInitialEvents="true", resourceVersionMatch="NotOlderThan", allowWatchBookmarks="true"
    )
    assert status == 200
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events[:2]] == [("ADDED", "a"), ("ADDED", "b")]
    assert events[2] == {
        "type": "BOOKMARK",
        "object": {
            "kind": "TFJob",
            "apiVersion": "kubeflow.org/v1",
            "metadata": {"resourceVersion": rv, "annotations": {"k8s.io/initial-events-end": "true"}},
        },
    }
    # From an older resourceVersion too: the state is never older than the one asked for.
    _, again = stream_list(
        server,
        sendInitialEvents="true",
        resourceVersionMatch="NotOlderThan",
        allowWatchBookmarks="true",
        resourceVersion="1",
    )
    assert [e["type"] for e in again[:3]] == ["ADDED", "ADDED", "BOOKMARK"]


@pytest.mark.parametrize(
    "params, field",
    [
        ({"sendInitialEvents": "true", "allowWatchBookmarks": "true"}, "resourceVersionMatch"),
        ({"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}, "allowWatchBookmarks"),
    ],
)
def test_a_streaming_list_needs_not_older_than_and_bookmarks(cluster, server, params, field):
    status, events = stream_list(server, **params)
    assert status == 422 and field in json.dumps(events)
