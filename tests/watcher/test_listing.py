"""`jobttl watch` as a process: what its first LIST announces, its probes, paged LISTs whose continue
token expires, a watch too old to resume, and what it keeps per object (identity, never the body).

Each test has an API emulator of its own (the watcher lists every namespace), over HTTP, and a
recording receiver in place of the sink; the watcher is the real `jobttl watch` process.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
import requests
from kubernetes import client, config

from tests.fixtures import finished_status, running_status, tfjob
from tests.services import JobttlProcess, RecordingSink, free_port, start_emulator, wait_for
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.kube import client as kube_client
from jobttl.core.kube.client import KubeClient
from jobttl.watcher import watch
from jobttl_emulator import CONFIG_MAP, TFJOB as TFJOB_RESOURCE, seed_object

NS = "team-a"


@pytest.fixture
def api(tmp_path):
    server = start_emulator(tmp_path, (TFJOB_RESOURCE,), gc_delay=0.2)
    yield server
    server.stop()


@pytest.fixture
def receiver():
    sink = RecordingSink()
    yield sink
    sink.gate.set()
    sink.server.shutdown()


def seed(api, name: str, finished: bool, namespace: str = NS, padding: int = 0) -> dict:
    obj = tfjob(name, namespace)
    obj["status"] = finished_status(time.time() - 60) if finished else running_status(time.time() - 600)
    if padding:
        obj["metadata"]["annotations"] = {"example.com/padding": "x" * padding}
    return seed_object(api.store, obj)


def custom_objects(api) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(config.new_client_from_config(config_file=str(api.kubeconfig)))


class Watcher:
    """The `jobttl watch` process and its probes."""

    def __init__(self, api, sink_url: str, log_dir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = JobttlProcess(
            ["watch", "--sink", sink_url, "--host", "127.0.0.1", "--port", str(self.port)],
            {"KUBECONFIG": str(api.kubeconfig)},
            log_dir,
            f"watch-{self.port}",
        )

    def probe(self, path: str) -> int | None:
        try:
            return requests.get(f"{self.url}{path}", timeout=2).status_code
        except requests.RequestException:
            return None


@contextlib.contextmanager
def watcher(api, receiver, tmp_path):
    running = Watcher(api, receiver.url, tmp_path)
    running.process.start()
    try:
        yield running
    finally:
        receiver.gate.set()
        running.process.stop()


def sent(receiver, namespace: str = NS) -> list[tuple[str, str]]:
    return sorted((t, n) for t, n, _ in receiver.of(namespace))


def test_the_first_list_announces_the_finished_objects_and_readiness_waits_for_it(api, receiver, tmp_path):
    # Like ApiServerSource, whose informer reports what it finds at start: a job that finished while
    # the watcher was starting reaches the sink now, not at the next resync. Running ones wait for a change.
    done_a, done_b = seed(api, "done-a", finished=True), seed(api, "done-b", finished=True)
    seed(api, "running", finished=False)
    receiver.gate.clear()  # the first announcement is held: the watcher is mid-LIST
    with watcher(api, receiver, tmp_path) as running:
        wait_for(lambda: receiver.events, what="the first announcement")
        assert running.probe("/healthz") == 200
        assert running.probe("/readyz") == 503, "not ready before its first LIST is done"
        receiver.gate.set()
        wait_for(lambda: running.probe("/readyz") == 200, what="ready once listed")
        ready = requests.get(f"{running.url}/readyz", timeout=2).json()
        assert ready["kinds"]["kubeflow.org/v1/TFJob"] == "watching"
        # The policy's other kinds are not served by this API server: known, so not waited for.
        assert set(ready["kinds"].values()) == {"watching", "not-served"}
        assert sent(receiver) == [("add", "done-a"), ("add", "done-b")]
        assert {e["data"]["metadata"]["uid"] for e in receiver.events} == {
            done_a["metadata"]["uid"],
            done_b["metadata"]["uid"],
        }
        assert all(e["data"]["status"]["conditions"] for e in receiver.events), "the whole object is sent"

        custom_objects(api).patch_namespaced_custom_object_status(
            "kubeflow.org", "v1", NS, "tfjobs", "running", {"status": finished_status(time.time())}
        )
        wait_for(lambda: ("update", "running") in sent(receiver), what="the running job's change")
        assert sent(receiver) == [("add", "done-a"), ("add", "done-b"), ("update", "running")]


def test_a_continue_token_that_expires_mid_list_lists_again_and_misses_nothing(api, receiver, tmp_path):
    # 600 objects: two pages of 500. The first page's finished object is announced while the list is
    # under way; meanwhile one already listed is deleted, one on the second page finishes, and the
    # API server compacts past the list's snapshot: the second page's continue token gets 410 Expired.
    objects = {f"job-{i:03d}": seed(api, f"job-{i:03d}", finished=(i == 0)) for i in range(600)}
    receiver.gate.clear()
    with watcher(api, receiver, tmp_path) as running:
        wait_for(lambda: receiver.events, what="the first page's announcement")
        kube = custom_objects(api)
        kube.delete_namespaced_custom_object(
            "kubeflow.org", "v1", NS, "tfjobs", "job-001", body=client.V1DeleteOptions(propagation_policy="Background")
        )
        kube.patch_namespaced_custom_object_status(
            "kubeflow.org", "v1", NS, "tfjobs", "job-550", {"status": finished_status(time.time())}
        )
        wait_for(
            lambda: (
                custom_objects(api)
                .list_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs", limit=1000)["items"]
                .__len__()
                == 599
            ),
            what="job-001 gone",
        )
        api.compact()
        receiver.gate.set()
        wait_for(lambda: running.probe("/readyz") == 200, what="the watcher to finish its first LIST")

    expired = [r for r in api.requests("GET") if r["status"] == 410 and "continue" in r["query"]]
    assert expired, "the second page's continue token was refused with 410"
    assert sent(receiver) == [("add", "job-000"), ("add", "job-550"), ("delete", "job-001")], (
        "each finished object announced once, and the one deleted during the list reported gone"
    )
    [gone] = [e for e in receiver.events if e["type"].endswith(".delete")]
    assert gone["data"]["metadata"]["uid"] == objects["job-001"]["metadata"]["uid"]


def test_a_watch_too_old_to_resume_relists_and_reports_what_changed_meanwhile(api, receiver, tmp_path):
    kept, changed, gone = (seed(api, name, finished=False) for name in ("kept", "changed", "gone"))
    with watcher(api, receiver, tmp_path) as running:
        wait_for(lambda: running.probe("/readyz") == 200, what="the watcher to list")
        wait_for(lambda: api.store.open_watches >= 1, what="the watcher to watch")
        # The watch drops and cannot be opened again for a while: changes happen meanwhile, then
        # the API server compacts, so the watcher's resourceVersion is too old to resume from (410).
        api.hooks.add_fault(verb="watch", status=503, count=10_000)
        api.close_watches(abort=True)
        wait_for(lambda: any(r["status"] == 503 for r in api.requests("GET")), what="a refused watch")
        kube = custom_objects(api)
        kube.patch_namespaced_custom_object(
            "kubeflow.org", "v1", NS, "tfjobs", "changed", {"metadata": {"labels": {"changed": "yes"}}}
        )
        kube.delete_namespaced_custom_object(
            "kubeflow.org", "v1", NS, "tfjobs", "gone", body=client.V1DeleteOptions(propagation_policy="Background")
        )
        seed(api, "new", finished=False)
        wait_for(
            lambda: (
                custom_objects(api).list_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs")["items"].__len__()
                == 3
            ),
            what="'gone' gone",
        )
        api.compact()
        api.hooks.clear_faults()
        wait_for(lambda: len(receiver.of(NS)) >= 3, what="the changes made while nobody watched")
        wait_for(lambda: api.store.open_watches >= 1, what="the watcher to watch again")
        log = running.process.log()

    # The watch resumed from a compacted resourceVersion got a 410 ERROR event; the watcher listed again.
    assert "watch expired (410)" in log
    tfjob_lists = [
        r for r in api.requests("GET") if r["path"] == "/apis/kubeflow.org/v1/tfjobs" and "watch" not in r["query"]
    ]
    assert len(tfjob_lists) == 2, tfjob_lists
    assert sent(receiver) == [("add", "new"), ("delete", "gone"), ("update", "changed")]
    [delete] = [e for e in receiver.events if e["type"].endswith(".delete")]
    # The body is not kept: a delete names the object, as the sink's delete needs, and no more.
    assert delete["data"]["metadata"]["uid"] == gone["metadata"]["uid"]
    assert (delete["data"]["kind"], delete["data"]["metadata"]["name"]) == ("TFJob", "gone")
    assert "spec" not in delete["data"]
    assert kept["metadata"]["uid"] not in {e["data"]["metadata"]["uid"] for e in receiver.events}


def test_the_watcher_keeps_identities_not_bodies_and_one_index_across_relists(api):
    """What a LIST leaves behind, measured by Python's allocator (tracemalloc), counting only what
    the watcher and its client allocated: a few hundred bytes per object, whatever the object's
    size, and the same after a relist (the index is updated in place, not rebuilt beside)."""
    count, padding = 300, 20_000  # objects of ~22 KB
    for i in range(count):
        seed(api, f"big-{i:04d}", finished=False, padding=padding)
    kube = KubeClient(config.new_client_from_config(config_file=str(api.kubeconfig)), component="watch")
    stop = threading.Event()
    kind_watcher = watch.KindWatcher(
        kube, TFJOB, watch.EventPoster("http://127.0.0.1:9", kube.host, stop), stop, page_size=100
    )
    ours = [tracemalloc.Filter(True, module.__file__, all_frames=True) for module in (watch, kube_client)]

    def kept() -> int:
        return sum(stat.size for stat in tracemalloc.take_snapshot().filter_traces(ours).statistics("filename"))

    tracemalloc.start(8)
    try:
        before = kept()
        kind_watcher.relist()
        first = kept() - before
        kind_watcher.relist()
        second = kept() - before
    finally:
        tracemalloc.stop()
    assert len(kind_watcher.known) == count
    assert first / count < 1_000, f"{first / count:.0f} bytes kept per object of ~{padding // 1000} KB"
    assert second <= first * 1.1, f"a relist grew what is kept: {first} then {second} bytes"


def test_health_fails_when_a_kinds_loop_has_stopped_and_names_it(api):
    """A kind's loop that died would never watch again: /healthz says so (Kubernetes restarts the pod)."""
    kube = KubeClient(config.new_client_from_config(config_file=str(api.kubeconfig)), component="watch")
    stop = threading.Event()
    kind_watcher = watch.KindWatcher(kube, TFJOB, watch.EventPoster("http://127.0.0.1:9", kube.host, stop), stop)
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    server = watch.serve_probes(watch.Probes([kind_watcher], [dead]), "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        health = requests.get(f"{url}/healthz", timeout=5)
        assert (health.status_code, health.json()) == (
            503,
            {"status": "stopped", "kinds": {"kubeflow.org/v1/TFJob": "stopped"}},
        )
        assert requests.get(f"{url}/readyz", timeout=5).status_code == 503
        assert requests.get(f"{url}/metrics", timeout=5).status_code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_bookmarks_keep_a_quiet_kinds_watch_resumable_after_compaction(tmp_path, receiver):
    """Other resources change (the resourceVersion is cluster-wide) while no TFJob does; the
    API server's BOOKMARKs carry the watcher's resourceVersion forward, so once it compacts, a
    dropped watch still resumes from where it was, without a 410 and a LIST of everything again."""
    server = start_emulator(tmp_path, (TFJOB_RESOURCE, CONFIG_MAP), gc_delay=0.2, bookmark_interval=0.2)
    try:
        seed(server, "quiet", finished=False)
        kube = KubeClient(config.new_client_from_config(config_file=str(server.kubeconfig)), component="watch")
        stop = threading.Event()
        kind_watcher = watch.KindWatcher(kube, TFJOB, watch.EventPoster(receiver.url, kube.host, stop), stop)
        thread = threading.Thread(target=kind_watcher.run, daemon=True)
        thread.start()
        try:
            wait_for(lambda: kind_watcher.listed and server.store.open_watches >= 1, what="the watcher to watch")
            latest = 0
            for i in range(5):
                made = seed_object(
                    server.store,
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"other-{i}", "namespace": NS}},
                )
                latest = int(made["metadata"]["resourceVersion"])
            wait_for(lambda: int(kind_watcher.resource_version or 0) >= latest, what="a BOOKMARK past the changes")
            server.compact()
            server.close_watches()
            tfjob_watches = lambda: [  # noqa: E731
                r
                for r in server.requests("GET")
                if r["path"] == "/apis/kubeflow.org/v1/tfjobs" and r["query"].get("watch") == "true"
            ]
            wait_for(lambda: len(tfjob_watches()) >= 2, what="the watch to be opened again")
            seed(server, "after", finished=False)  # through the resumed watch (or, were it refused, a relist)
            wait_for(lambda: ("add", "after") in sent(receiver), what="the next TFJob's event")
        finally:
            stop.set()
            server.close_watches()
            thread.join(timeout=10)
        lists = [
            r
            for r in server.requests("GET")
            if r["path"] == "/apis/kubeflow.org/v1/tfjobs" and "watch" not in r["query"]
        ]
        assert len(lists) == 1, "resumed from the bookmark: no second LIST"
        assert int(tfjob_watches()[1]["query"]["resourceVersion"]) >= latest
    finally:
        server.stop()


def test_a_probe_port_already_taken_stops_the_watcher_at_start_naming_it(api):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "jobttl",
                "watch",
                "--sink",
                "http://127.0.0.1:9",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            env={**os.environ, "KUBECONFIG": str(api.kubeconfig)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert f"--port {port}: cannot serve the probes there" in done.stderr


@pytest.mark.parametrize(
    "status, announced",
    [
        (finished_status(1_700_000_000), True),
        (running_status(1_700_000_000), False),
        ({"conditions": {"type": "Succeeded"}}, True),  # unreadable: sent, for the sink to report (it deletes nothing)
    ],
)
def test_what_the_first_list_counts_as_finished(status, announced):
    assert watch.finished(TFJOB, {**tfjob("x"), "status": status}) is announced


def test_a_loop_not_started_yet_is_alive_for_healthz_and_not_ready():
    """The probes are served before the kinds' loops start: a kubelet asking then must not restart
    the watcher (a not-started thread is not a stopped one)."""
    from jobttl.core.domain.kinds.registry import BUILTIN_KINDS
    from jobttl.watcher.watch import Probes

    kind = BUILTIN_KINDS[0]
    loop = type("Loop", (), {"kind": kind, "not_served": False, "listed": False})()
    thread = threading.Thread(target=lambda: None)
    probes = Probes([loop], [thread])
    assert probes.healthz()[0] == 200 and probes.readyz()[0] == 503
    assert set(probes.kinds().values()) == {"starting"}
    thread.start()
    thread.join()
    assert probes.healthz()[0] == 503, "a loop that ended is stopped"
