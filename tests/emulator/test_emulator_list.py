"""Lists: pagination with consistent snapshots, expiry, selectors, ordering."""

from __future__ import annotations

import pytest
from kubernetes import client

from jobttl_emulator import EmulatorServer

from .emulator_testlib import GROUP, PLURAL, VERSION, Cluster, api_error


def names(listing: dict) -> list[str]:
    return [item["metadata"]["name"] for item in listing["items"]]


def test_list_shape(cluster):
    cluster.create("a")
    listing = cluster.list()
    assert listing["apiVersion"] == "kubeflow.org/v1"
    assert listing["kind"] == "TFJobList"
    assert set(listing["metadata"]) == {"resourceVersion"}
    assert listing["items"][0]["kind"] == "TFJob" and listing["items"][0]["apiVersion"] == "kubeflow.org/v1"


def test_three_pages_share_one_snapshot(cluster):
    for i in range(7):
        cluster.create(f"job-{i}")
    first = cluster.list(limit=3)
    rv = first["metadata"]["resourceVersion"]
    assert names(first) == ["job-0", "job-1", "job-2"]
    assert first["metadata"]["remainingItemCount"] == 4

    # Writes between pages must not show up in the rest of this list.
    cluster.create("job-3a")
    cluster.delete("job-5")
    cluster.set_status("job-4", {"phase": "Succeeded"})

    second = cluster.list(limit=3, _continue=first["metadata"]["continue"])
    assert names(second) == ["job-3", "job-4", "job-5"]
    assert "status" not in second["items"][1]
    assert second["metadata"]["resourceVersion"] == rv
    assert second["metadata"]["remainingItemCount"] == 1

    third = cluster.list(limit=3, _continue=second["metadata"]["continue"])
    assert names(third) == ["job-6"]
    assert third["metadata"] == {"resourceVersion": rv}

    assert names(cluster.list()) == ["job-0", "job-1", "job-2", "job-3", "job-3a", "job-4", "job-6"]


def test_exact_page_boundary_has_no_continue(cluster):
    for i in range(3):
        cluster.create(f"job-{i}")
    assert set(cluster.list(limit=3)["metadata"]) == {"resourceVersion"}


def test_selected_pages_have_no_remaining_count(cluster):
    for i in range(5):
        cluster.create(f"job-{i}", labels={"app": "x"})
    page = cluster.list(limit=2, label_selector="app=x")
    assert page["metadata"]["continue"] and "remainingItemCount" not in page["metadata"]


def test_continue_token_expires_after_compaction(cluster, server):
    for i in range(4):
        cluster.create(f"job-{i}")
    first = cluster.list(limit=2)
    cluster.create("job-9")
    server.compact()  # like etcd: the snapshot of the first page is gone, the latest state is not
    exc, body = api_error(lambda: cluster.list(limit=2, _continue=first["metadata"]["continue"]))
    assert exc.status == 410
    assert body["reason"] == "Expired"
    assert body["message"].startswith("The provided continue parameter is too old to display a consistent list result.")
    # Like the real server, the 410 carries a token to continue at the latest state.
    rest = cluster.list(limit=2, _continue=body["metadata"]["continue"])
    assert names(rest) == ["job-2", "job-3"]
    assert rest["metadata"]["continue"]  # job-9 was created after the first page: an inconsistent list


def test_continue_token_expires_when_history_is_exceeded(tmp_path):
    with EmulatorServer(history_size=3) as server:
        configuration = client.Configuration(host=server.url)
        with client.ApiClient(configuration) as api_client:
            cluster = Cluster(server, client.CustomObjectsApi(api_client))
            for i in range(3):
                cluster.create(f"job-{i}")
            first = cluster.list(limit=1)
            for i in range(3):  # three events fit the window: the snapshot is still readable
                cluster.set_status(f"job-{i}", {"phase": "Running"})
            assert names(cluster.list(limit=1, _continue=first["metadata"]["continue"])) == ["job-1"]
            cluster.set_status("job-0", {"phase": "Succeeded"})  # a fourth one pushes it out
            exc, _ = api_error(lambda: cluster.list(limit=1, _continue=first["metadata"]["continue"]))
            assert exc.status == 410


def test_bad_continue_token_and_continue_with_resource_version(cluster):
    cluster.create("a")
    cluster.create("b")
    exc, body = api_error(lambda: cluster.list(limit=1, _continue="not-a-token"))
    assert exc.status == 400 and body["reason"] == "BadRequest"
    assert body["message"].startswith("invalid continue token")

    token = cluster.list(limit=1)["metadata"]["continue"]
    exc, body = api_error(lambda: cluster.list(limit=1, _continue=token, resource_version="1"))
    assert exc.status == 400
    assert body["message"] == "specifying resource version is not allowed when using continue"


def test_exact_resource_version_reads_an_old_snapshot(cluster):
    cluster.create("a")
    rv = cluster.list()["metadata"]["resourceVersion"]
    cluster.create("b")
    assert names(cluster.list(resource_version=rv, resource_version_match="Exact")) == ["a"]
    assert names(cluster.list(resource_version=rv)) == ["a", "b"]  # NotOlderThan: latest is fine


def test_all_namespaces_ordered_like_etcd_keys(cluster):
    cluster.create("z", ns="a")
    cluster.create("b", ns="b")
    cluster.create("a", ns="b")
    listing = cluster.list(ns=None)
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listing["items"]] == [
        ("a", "z"),
        ("b", "a"),
        ("b", "b"),
    ]
    assert names(cluster.list(ns="b")) == ["a", "b"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=train", ["a", "b"]),
        ("app==train", ["a", "b"]),
        ("app!=train", ["c", "d"]),  # also matches objects without the label
        ("app in (train, serve)", ["a", "b", "c"]),
        ("app notin (train)", ["c", "d"]),
        ("app", ["a", "b", "c"]),
        ("!app", ["d"]),
        ("app=train,tier=gpu", ["b"]),
        ("app in (train),!tier", ["a"]),
        ("jobttl.io/ttl", ["c"]),
        ("", ["a", "b", "c", "d"]),
    ],
)
def test_label_selectors(cluster, selector, expected):
    cluster.create("a", labels={"app": "train"})
    cluster.create("b", labels={"app": "train", "tier": "gpu"})
    cluster.create("c", labels={"app": "serve", "jobttl.io/ttl": "60"})
    cluster.create("d")
    assert names(cluster.list(label_selector=selector)) == expected


def test_field_selectors(cluster):
    cluster.create("a", ns="one")
    cluster.create("b", ns="one")
    cluster.create("a", ns="two")
    assert names(cluster.list(ns="one", field_selector="metadata.name=b")) == ["b"]
    listing = cluster.list(ns=None, field_selector="metadata.namespace!=one,metadata.name==a")
    assert [i["metadata"]["namespace"] for i in listing["items"]] == ["two"]


def test_invalid_selectors_are_bad_requests(cluster):
    exc, body = api_error(lambda: cluster.list(label_selector="app in train"))
    assert exc.status == 400 and body["reason"] == "BadRequest"
    exc, body = api_error(lambda: cluster.list(field_selector="spec.x=1"))
    assert exc.status == 400
    assert body["message"] == '"spec.x" is not a known field selector: only "metadata.name", "metadata.namespace"'


def test_list_is_served_for_raw_http_with_plain_query(cluster):
    cluster.create("a")
    code, headers, body = cluster.raw("GET", f"/apis/{GROUP}/{VERSION}/namespaces/ns/{PLURAL}?limit=1")
    assert code == 200 and headers["Content-Type"] == "application/json"
    assert body["kind"] == "TFJobList"
