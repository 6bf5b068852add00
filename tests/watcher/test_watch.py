"""`jobttl watch` sends the sink what ApiServerSource would, and misses nothing on reconnect."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time

import pytest
from kubernetes import config

from tests.e2e.conftest import Cluster
from tests.fixtures import finished_status
from tests.services import JobttlProcess, RecordingSink, wait_for
from jobttl.watcher import watch
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.kube.client import KubeClient


@contextlib.contextmanager
def watching(emulator):
    """`jobttl watch`'s loop in a thread, posting to a recording sink, once its watch is open."""
    sink = RecordingSink()
    stop = threading.Event()
    kube = KubeClient(config.new_client_from_config(config_file=str(emulator.kubeconfig)), component="watch")
    thread = threading.Thread(target=watch.run, args=(kube, (TFJOB,), sink.url, stop), daemon=True)
    opened = emulator.store.open_watches
    thread.start()
    try:
        wait_for(lambda: emulator.store.open_watches > opened, what="the watcher to watch")
        yield sink
    finally:
        stop.set()
        emulator.close_watches()
        sink.server.shutdown()
        thread.join(timeout=10)


@pytest.fixture
def watched(emulator):
    with watching(emulator) as sink:
        yield sink


def test_add_update_delete_arrive_as_apiserversource_events(cluster: Cluster, watched):
    obj = cluster.create("w1", ttl=60)
    finished = cluster.set_status("w1", finished_status(time.time()))
    cluster.delete_now("w1")
    wait_for(
        lambda: [t for t, *_ in watched.of(cluster.namespace)] == ["add", "update", "delete"],
        what="add, update and delete events",
    )

    add, update, delete = [e for e in watched.events if e["data"]["metadata"]["namespace"] == cluster.namespace]
    assert update["data"]["status"] == finished["status"]
    headers = add["headers"]
    assert headers["ce-type"] == "dev.knative.apiserver.resource.add"
    assert headers["ce-source"] == cluster.emulator.url
    assert headers["ce-subject"] == f"/apis/kubeflow.org/v1/namespaces/{cluster.namespace}/tfjobs/w1"
    assert (headers["ce-kind"], headers["ce-apiversion"], headers["ce-name"], headers["ce-namespace"]) == (
        "TFJob",
        "kubeflow.org/v1",
        "w1",
        cluster.namespace,
    )
    assert headers["content-type"] == "application/json"
    assert add["data"]["metadata"]["uid"] == obj["metadata"]["uid"] == delete["data"]["metadata"]["uid"]
    assert len({e["headers"]["ce-id"] for e in (add, update, delete)}) == 3


def test_running_objects_that_exist_at_start_are_not_announced_only_their_changes(cluster: Cluster, emulator):
    # The first LIST announces finished objects only (tests/watcher/test_listing.py): a running
    # one has nothing to decide until it changes.
    cluster.create("existing", ttl=0)
    with watching(emulator) as sink:
        cluster.patch("existing", {"metadata": {"labels": {"touched": "yes"}}})
        wait_for(lambda: sink.of(cluster.namespace), what="the update")
        assert [(t, n) for t, n, _ in sink.of(cluster.namespace)] == [("update", "existing")]


def test_a_dropped_watch_resumes_without_missing_or_replaying_changes(cluster: Cluster, watched):
    cluster.create("before", ttl=60)
    wait_for(lambda: len(watched.of(cluster.namespace)) == 1, what="the first event")
    wait_for(lambda: cluster.emulator.store.open_watches >= 1, what="the watch to be open")

    cluster.emulator.close_watches(abort=True)  # the connection drops mid-stream
    cluster.create("during", ttl=60)  # changes while the watcher reconnects
    cluster.patch("before", {"metadata": {"labels": {"changed": "yes"}}})
    cluster.create("after", ttl=60)

    wait_for(lambda: len(watched.of(cluster.namespace)) >= 4, what="the changes made across the reconnect")
    seen = watched.of(cluster.namespace)
    assert [(t, n) for t, n, _ in seen] == [
        ("add", "before"),
        ("add", "during"),
        ("update", "before"),
        ("add", "after"),
    ]
    assert len(set(seen)) == len(seen), "no change was delivered twice"


def test_a_watcher_process_feeds_the_real_sink(cluster: Cluster, stack_env, sink_url, log_dir, worker):
    opened = cluster.emulator.store.open_watches
    process = JobttlProcess(["watch", "--sink", sink_url, "--port", "0"], stack_env, log_dir, "watch").start()
    try:
        # Nothing finished exists in this namespace when it starts: what it sends is the change.
        wait_for(lambda: cluster.emulator.store.open_watches > opened, timeout=20, what="the watcher to watch")
        cluster.create_running("watched", ttl=1, started=time.time())
        finished_at = int(time.time())
        cluster.set_status("watched", finished_status(finished_at))
        cluster.wait_gone("watched", timeout=15)
        [delete] = cluster.deletes()
        assert delete["time"] >= finished_at + 1
    finally:
        process.stop()


def test_a_kind_the_cluster_does_not_serve_is_reported_once_not_in_a_loop(emulator, monkeypatch, caplog):
    """RayJob on a cluster without KubeRay: one warning, then a quiet look every NOT_SERVED_RECHECK."""
    from jobttl.core.domain.kinds.registry import BUILTIN_KINDS

    rayjob = next(k for k in BUILTIN_KINDS if k.kind == "RayJob")
    monkeypatch.setattr(watch, "NOT_SERVED_RECHECK", 0.05)
    kube = KubeClient(config.new_client_from_config(config_file=str(emulator.kubeconfig)), component="watch")
    stop = threading.Event()
    watcher = watch.KindWatcher(kube, rayjob, watch.EventPoster("http://127.0.0.1:9", kube.host, stop), stop)
    looks = []
    relist = watcher.relist
    monkeypatch.setattr(watcher, "relist", lambda: (looks.append(1), relist())[1])
    caplog.set_level("INFO", logger="jobttl.watch")
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(looks) >= 5, what="the watcher to look for the kind again")
    finally:
        stop.set()
        thread.join(timeout=10)
    events = [getattr(r, "event", r.getMessage()) for r in caplog.records if r.name == "jobttl.watch"]
    assert events.count("kind-not-served") == 1, events
    assert "watch-error" not in events


class _Answers(http.server.BaseHTTPRequestHandler):
    """A sink that answers each POST with the next status of the server's list (then 202)."""

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        statuses = self.server.statuses
        status = statuses.pop(0) if statuses else 202
        self.server.seen.append(status)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    "statuses, delivered",
    [
        ([401, 403], True),  # a token being rotated, a sink's auth being fixed: tried again, not dropped
        ([422], False),  # an event the sink can never take: said, and not sent again
    ],
)
def test_the_watcher_retries_what_the_sink_may_take_later_and_drops_only_what_it_never_will(statuses, delivered):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    server.statuses, server.seen = list(statuses), []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        stop = threading.Event()
        poster = watch.EventPoster(f"http://127.0.0.1:{server.server_address[1]}/", "https://kube", stop)
        obj = {"metadata": {"namespace": "ns", "name": "job", "uid": "u-1", "resourceVersion": "1"}}
        assert poster.post(TFJOB, "update", obj) is delivered
        assert server.seen == (statuses + [202] if delivered else statuses)
    finally:
        server.shutdown()
        server.server_close()
