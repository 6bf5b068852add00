"""jobttl's own deletions, seen back through the event source, are not news.

Once jobttl deletes a job, the watch reports it twice more: an update (the object now has a
deletionTimestamp) and, once it is gone, a delete. Neither may add a `cancelled` entry to the
history, nor replace the job's latest decision ("delete-requested", then "deleted") with
"skipped, being-deleted". The stack is real: `jobttl watch` feeding the sink process, the
worker process deleting from the emulator; the operator reads it all with `jobttl`.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.fixtures import finished_status, tfjob
from tests.operate.conftest import metric
from tests.services import JobttlProcess, wait_for


@pytest.fixture
def watcher(cluster, stack_env, sink_url, log_dir):
    opened = cluster.emulator.store.open_watches
    process = JobttlProcess(["watch", "--sink", sink_url, "--port", "0"], stack_env, log_dir, "watch").start()
    wait_for(lambda: cluster.emulator.store.open_watches > opened, timeout=20, what="the watcher to watch")
    yield process
    process.stop()


def events_seen(cluster, action: str) -> float:
    """Events of this type the sink took that changed nothing, or left a running deletion alone."""
    url = f"{cluster.sink_url}/metrics"
    return sum(
        metric(url, "jobttl_sink_events_total", type=action, outcome=outcome) for outcome in ("ignored", "running")
    )


def events_of(cli, ns: str) -> list[str]:
    return [e["event"] for e in cli.json("history", "--namespace", ns)["items"]]


def latest_decision(cli, ns: str, name: str) -> str:
    [decision] = cli.json("show", f"{ns}/{name}")["decisions"]
    return decision["event"]


def test_the_echoes_of_jobttls_deletion_leave_no_trace(cluster, cli, watcher):
    ns = cluster.namespace
    manifest = tfjob("held", ns, ttl=0)
    manifest["metadata"]["finalizers"] = ["example.com/hold"]  # keeps it Terminating until the test lets go
    cluster.api.create_namespaced_custom_object("kubeflow.org", "v1", ns, "tfjobs", manifest)
    updates = events_seen(cluster, "update")
    cluster.set_status("held", finished_status(time.time() - 60))  # the watcher tells the sink: due now

    wait_for(lambda: "delete-requested" in events_of(cli, ns), timeout=15, what="jobttl to delete it")
    assert cluster.get("held")["metadata"]["deletionTimestamp"]
    wait_for(lambda: events_seen(cluster, "update") > updates, what="the sink to hear of the deletionTimestamp")
    assert latest_decision(cli, ns, "held") == "delete-requested"

    deletes = events_seen(cluster, "delete")
    cluster.patch("held", {"metadata": {"finalizers": None}})
    wait_for(lambda: "deleted" in events_of(cli, ns), timeout=15, what="the follower to see it gone")
    wait_for(lambda: events_seen(cluster, "delete") > deletes, what="the sink to hear of the removal")
    assert events_of(cli, ns) == ["deleted", "delete-requested", "scheduled"]
    assert latest_decision(cli, ns, "held") == "deleted"
    assert "being-deleted" not in cli.run("history", "--namespace", ns).stdout


def test_an_echo_that_overtakes_the_worker_leaves_its_deletion_alone(cluster, cli):
    """The race: the watch reports the deletion before the worker has recorded it."""
    ns = cluster.namespace
    obj = cluster.create_finished("racing", ttl=0, finished_at=time.time() - 60)
    # The API server holds the worker's re-read of this job until the echoes are in: its
    # deletion is running all that time, however long the machine takes to send them.
    answer = threading.Event()
    held = cluster.emulator.add_fault(
        verb="get", delay=4.0, count=1, gate=answer, path_contains=f"/namespaces/{ns}/tfjobs/racing"
    )
    try:
        assert cluster.event("update", obj).headers["X-Jobttl-Outcome"] == "scheduled"
        assert held.arrived.wait(60), "the worker to start the deletion and re-read the job"
        terminating = {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "2030-01-01T00:00:00Z"}}
        assert cluster.event("update", terminating).headers["X-Jobttl-Outcome"] == "running"
        assert cluster.event("delete", terminating).headers["X-Jobttl-Outcome"] == "running"
    finally:
        answer.set()  # within the worker's API timeout (5 s): the 4 s cap above

    cluster.wait_gone("racing", timeout=15)
    wait_for(lambda: "deleted" in events_of(cli, ns), timeout=15, what="the deletion to be recorded")
    assert events_of(cli, ns) == ["deleted", "delete-requested", "scheduled"]
