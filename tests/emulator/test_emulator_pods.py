"""Pod logs: the /log subresource, its options and errors, and the hooks that supply them."""

from __future__ import annotations

import re

import pytest
import requests
from kubernetes import client

from .emulator_testlib import api_error, pod

LOG = "/api/v1/namespaces/ns/pods/{name}/log"
TEXT = "line 1\nline 2\nline 3\n"


@pytest.fixture
def core(full):
    return client.CoreV1Api(full.api.api_client)


def test_log_of_the_only_container(full_server, core):
    core.create_namespaced_pod("ns", pod("p"))
    full_server.set_log("ns", "p", "main", TEXT)
    assert core.read_namespaced_pod_log("p", "ns") == TEXT
    assert core.read_namespaced_pod_log("p", "ns", tail_lines=2) == "line 2\nline 3\n"
    assert core.read_namespaced_pod_log("p", "ns", tail_lines=0) == ""
    # limitBytes caps from the start of what would be returned, after tailLines.
    assert core.read_namespaced_pod_log("p", "ns", tail_lines=2, limit_bytes=8) == "line 2\nl"
    stamped = core.read_namespaced_pod_log("p", "ns", timestamps=True).splitlines()
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z line \d", line) for line in stamped), stamped


def test_tail_lines_counts_the_runtimes_entries_and_a_long_line_is_several(full_server, core):
    """containerd writes a line longer than 16 KiB as entries of 16 KiB; the kubelet's tailLines
    counts the log file's entries (pkg/util/tail FindTailLineStartIndex), so the last "line" of a
    40,000-byte line is its last 7,233 bytes. A line split so keeps one timestamp."""
    core.create_namespaced_pod("ns", pod("p"))
    long_line = "".join(f"{i:09d}," for i in range(4000)) + "\n"  # 40,001 bytes
    full_server.set_log("ns", "p", "main", "short\r\n" + long_line)
    assert core.read_namespaced_pod_log("p", "ns", tail_lines=1) == long_line[2 * 16384 :]
    assert core.read_namespaced_pod_log("p", "ns", tail_lines=3) == long_line
    assert core.read_namespaced_pod_log("p", "ns", tail_lines=4) == "short\r\n" + long_line  # \r ends no line
    stamped = core.read_namespaced_pod_log("p", "ns", tail_lines=3, timestamps=True)
    assert re.fullmatch(r"\S+Z " + long_line, stamped)
    assert core.read_namespaced_pod_log("p", "ns", tail_lines=2, limit_bytes=16385) == long_line[16384:32769]


def test_log_response_is_plain_text(full, core):
    core.create_namespaced_pod("ns", pod("p"))
    full.server.set_log("ns", "p", "main", TEXT)
    code, headers, body = full.raw("GET", LOG.format(name="p"))
    assert code == 200 and headers["Content-Type"].startswith("text/plain") and body == TEXT


def test_several_containers_need_a_name(full_server, core):
    core.create_namespaced_pod("ns", pod("p", containers=("tensorflow", "sidecar")))
    full_server.set_log("ns", "p", "sidecar", "side\n")
    exc, body = api_error(lambda: core.read_namespaced_pod_log("p", "ns"))
    assert exc.status == 400 and body["reason"] == "BadRequest"
    assert body["message"] == "a container name must be specified for pod p, choose one of: [tensorflow sidecar]"
    exc, body = api_error(lambda: core.read_namespaced_pod_log("p", "ns", container="nope"))
    assert body["message"] == "container nope is not valid for pod p"
    assert core.read_namespaced_pod_log("p", "ns", container="sidecar") == "side\n"
    assert core.read_namespaced_pod_log("p", "ns", container="tensorflow") == ""  # nothing logged yet


def test_previous_instance(full_server, core):
    core.create_namespaced_pod("ns", pod("p"))
    exc, body = api_error(lambda: core.read_namespaced_pod_log("p", "ns", previous=True))
    assert exc.status == 400 and body["message"] == 'previous terminated container "main" in pod "p" not found'
    full_server.set_log("ns", "p", "main", "before the restart\n", previous=True)
    full_server.set_log("ns", "p", "main", "after\n")
    assert core.read_namespaced_pod_log("p", "ns", previous=True) == "before the restart\n"
    assert core.read_namespaced_pod_log("p", "ns") == "after\n"


def test_invalid_options_and_missing_pods(full, core):
    core.create_namespaced_pod("ns", pod("p"))
    code, _, body = full.raw("GET", LOG.format(name="p") + "?tailLines=-1&limitBytes=0")
    assert code == 422 and body["message"] == (
        'PodLogOptions "p" is invalid: [tailLines: Invalid value: -1: must be greater than or equal to 0, '
        "limitBytes: Invalid value: 0: must be greater than 0]"
    )
    exc, body = api_error(lambda: core.read_namespaced_pod_log("gone", "ns"))
    assert exc.status == 404 and body["message"] == 'pods "gone" not found'
    assert full.raw("GET", "/apis/kubeflow.org/v1/namespaces/ns/tfjobs/x/log")[0] == 404  # only pods have logs


def test_logs_hook_over_http_and_logs_go_with_their_pod(full, core):
    core.create_namespaced_pod("ns", pod("p"))
    spec = {"namespace": "ns", "pod": "p", "container": "main", "text": "hello\n"}
    assert requests.post(f"{full.server.url}/_emulator/logs", json=spec, timeout=5).status_code == 201
    assert requests.post(f"{full.server.url}/_emulator/logs", json={"pod": "p"}, timeout=5).status_code == 400
    assert core.read_namespaced_pod_log("p", "ns") == "hello\n"
    core.delete_namespaced_pod("p", "ns")
    core.create_namespaced_pod("ns", pod("p"))
    assert core.read_namespaced_pod_log("p", "ns") == ""


def test_discovery_lists_pods_log(full):
    resources = {r["name"]: r for r in full.raw("GET", "/api/v1")[2]["resources"]}
    assert resources["pods/log"] == {
        "name": "pods/log",
        "singularName": "",
        "namespaced": True,
        "kind": "Pod",
        "verbs": ["get"],
    }
    assert resources["pods"]["shortNames"] == ["po"] and "pods/status" in resources
