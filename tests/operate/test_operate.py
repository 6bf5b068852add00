"""Operators inspect and steer a running stack with `jobttl ...` and the sink's HTTP API.

The stack is real: CloudEvents to the sink process, the worker process deleting from the
emulator. The CLI runs as its own process, as an operator would run it; waits poll.
"""

from __future__ import annotations

import re
import time

import requests
from rq.job import Job
from rq.serializers import JSONSerializer

from tests.fixtures import finished_status
from tests.operate.conftest import TOMBSTONE_DAYS, metric
from tests.services import wait_for
from jobttl.core.store import keys
from jobttl.core.domain.wire.shapes import rfc3339
from jobttl.core.domain.wire.identity import JobRef

TTL_FIELD = "spec.runPolicy.ttlSecondsAfterFinished"
DOTTED_CLASS = re.compile(
    r"\b[a-z_]\w*(\.\w+)+\.[A-Z]\w*(Error|Exception)?\b"
)  # jobttl.core.kube.client.PermanentApiError


def schedule(cluster, name: str, ttl: int, finished_at: float) -> dict:
    obj = cluster.create_finished(name, ttl=ttl, finished_at=finished_at)
    response = cluster.event("update", obj)
    assert response.headers["X-Jobttl-Outcome"] == "scheduled", response.text
    return obj


def api(cluster, path: str, **params) -> requests.Response:
    return requests.get(f"{cluster.sink_url}{path}", params=params, timeout=5)


def failures_in(ops, namespace: str) -> list:
    return [f for f in ops.failed() if f.ref.namespace == namespace]


def test_listings_of_pending_deleted_skipped_and_failed_jobs(cluster, cli, ops):
    ns, now = cluster.namespace, int(time.time())
    for name, ttl in (("later-a", 3000), ("later-b", 1000), ("later-c", 2000)):
        schedule(cluster, name, ttl, now)
    schedule(cluster, "done", 0, now - 60)
    cluster.wait_gone("done")
    running = cluster.create_running("running", ttl=0, started=now)
    cluster.event("update", {**running, "status": finished_status(now)})  # forged: it is still running
    wait_for(lambda: ops.history(event="cancelled", namespace=ns), what="the forged event's deletion to be cancelled")
    cluster.fail_next("delete", 403, 1)
    broken = schedule(cluster, "broken", 0, now - 30)
    wait_for(lambda: failures_in(ops, ns), what="the deletion of 'broken' to fail")

    # Pending: in due order (the failed deletion is still to be done, and overdue), with its TTL's source.
    pending = cli.json("pending", "--namespace", ns)
    assert [p["name"] for p in pending["items"]] == ["broken", "later-b", "later-c", "later-a"]
    assert pending["total"] == 4
    later_b = pending["items"][1]
    assert later_b | {"due": now + 1000, "ttl": 1000, "ttlSource": TTL_FIELD, "dryRun": False, "rules": []} == later_b
    assert pending["items"][0]["dueIn"] < 0 < later_b["dueIn"] <= 1000
    limited = cli.json("pending", "--namespace", ns, "--limit", "1")
    assert ([p["name"] for p in limited["items"]], limited["total"]) == (["broken"], 4)
    human = cli.run("pending", "--namespace", ns).stdout
    assert human.index("later-b") < human.index("later-c") < human.index("later-a")

    # ... the same over HTTP, a page at a time.
    first = api(cluster, "/api/v1/deletions", namespace=ns, limit=2).json()
    second = api(cluster, "/api/v1/deletions", namespace=ns, limit=2, offset=2).json()
    assert (first["total"], first["offset"], first["limit"], second["offset"]) == (4, 0, 2, 2)
    assert [p["name"] for p in first["items"] + second["items"]] == ["broken", "later-b", "later-c", "later-a"]
    assert api(cluster, "/api/v1/deletions", namespace=ns, kind="PyTorchJob").json()["total"] == 0

    # History: newest first; the deletion says how late it was, the cancellation why, the failure the API's error.
    wait_for(lambda: ops.history(event="deleted", namespace=ns), what="'done' to be gone for good")
    history = cli.json("history", "--namespace", ns)["items"]
    assert [e["at"] for e in history] == sorted((e["at"] for e in history), reverse=True)
    [requested] = [e for e in history if e["event"] == "delete-requested"]
    assert requested["name"] == "done" and 59 <= float(requested["lateness"]) < 90
    [deleted] = [e for e in history if e["event"] == "deleted"]
    assert deleted["name"] == "done" and float(deleted["goneAfter"]) >= 0
    [cancelled] = [e for e in history if e["event"] == "cancelled"]
    assert (cancelled["name"], cancelled["reason"], cancelled["by"]) == ("running", "not-finished", "worker")
    [failed] = [e for e in history if e["event"] == "failed"]
    assert failed["name"] == "broken" and "403" in failed["error"]
    assert [e["name"] for e in cli.json("history", "--namespace", ns, "--event", "deleted")["items"]] == ["done"]
    assert cli.json("history", "--namespace", ns, "--since", "1s", "--event", "scheduled")["items"] == []
    assert len(cli.json("history", "--namespace", ns, "--limit", "2")["items"]) == 2

    # Failed: the RQ job id to retry, and the error.
    [failure] = [f for f in cli.json("failed")["items"] if f["namespace"] == ns]
    assert failure["name"] == "broken" and failure["uid"] == broken["metadata"]["uid"]
    assert failure["jobId"].startswith("delete-") and "forbidden" in failure["error"].lower()
    assert not DOTTED_CLASS.search(failure["error"]), failure["error"]
    assert failure["error"].startswith("403 from the API server"), "RQ's traceback names the class first"
    assert failure["failedAtTime"] == rfc3339(failure["failedAt"])
    kept = Job.fetch(failure["jobId"], connection=ops.redis, serializer=JSONSerializer).latest_result().exc_string
    assert DOTTED_CLASS.search(kept), "RQ keeps the traceback, naming the class"

    # Typed, as recorded: numbers, booleans, lists; every time also in RFC 3339, beside its epoch.
    [booked] = [e for e in history if e["event"] == "scheduled" and e["name"] == "later-b"]
    assert (
        booked
        | {
            "due": now + 1000,
            "ttl": 1000,
            "dryRun": False,
            "rules": [],
            "finishedAt": now,
            "dueTime": rfc3339(now + 1000),
            "finishedAtTime": rfc3339(now),
        }
        == booked
    )
    assert isinstance(requested["lateness"], float) and isinstance(deleted["goneAfter"], float)
    assert (failed["retriesLeft"], failed["failure"]) == (0, "permanent")
    assert all(e["atTime"] == rfc3339(e["at"]) for e in history)
    assert later_b["dueTime"] == rfc3339(now + 1000)
    # ... and the messages say what went wrong, not which Python class carried it.
    assert not DOTTED_CLASS.search(failed["error"]) and "403" in failed["error"]

    # Show: one job's whole story, also over HTTP.
    done = cli.json("show", f"{ns}/done")
    assert done["pending"] == [] and [e["event"] for e in done["history"]][:1] == ["deleted"]
    [tombstone] = done["tombstones"]
    assert [c["type"] for c in tombstone["status"]["conditions"]][-1] == "Succeeded"
    assert api(cluster, f"/api/v1/deletions/{ns}/done").json()["tombstones"] == [tombstone]
    assert cli.run("show", f"{ns}/done").returncode == 0  # and the tables print
    over_http = api(cluster, f"/api/v1/deletions/{ns}/done").json()
    assert over_http["history"] == done["history"] and over_http["decisions"] == done["decisions"]
    assert [d["event"] for d in done["decisions"]] == ["deleted"] and isinstance(done["decisions"][0]["at"], float)

    # Status: the counts, and a worker holding the scheduler lock.
    status = cli.json("status")
    assert status["pending"] >= 4 and status["failed"] >= 1 and status["deletedLast24h"] >= 1
    assert status["redis"] == "ok" and status["scheduler"] and len(status["workers"]) == 1
    assert status["workers"][0]["lastHeartbeatTime"] == rfc3339(status["workers"][0]["lastHeartbeat"])
    assert cli.run("status").returncode == 0


def test_unknown_and_ambiguous_names_are_exit_1_and_404_or_409(cluster, cli, ops):
    ns = cluster.namespace
    missing = cli.run("show", f"{ns}/nothing")
    assert missing.returncode == 1 and f"{ns}/nothing" in missing.stderr and missing.stdout == ""
    assert api(cluster, f"/api/v1/deletions/{ns}/nothing").status_code == 404
    assert cli.run("cancel", f"{ns}/nothing").returncode == 1
    assert cli.run("retry", "delete-no-such-job").returncode == 1
    # The same name for two kinds: the audit trail knows a TFJob and a PyTorchJob called "twin".
    schedule(cluster, "twin", 3600, time.time())
    ops.audit.record(
        "scheduled", JobRef("kubeflow.org/v1", "PyTorchJob", ns, "twin", "7c1e5c8e-0f1b-4c35-9d1a-5f0d1c1e2a3b")
    )
    ambiguous = cli.run("show", f"{ns}/twin")
    assert ambiguous.returncode == 1 and "--kind" in ambiguous.stderr
    assert api(cluster, f"/api/v1/deletions/{ns}/twin").status_code == 409
    assert cli.json("show", f"{ns}/twin", "--kind", "TFJob")["kind"] == "TFJob"
    assert cli.run("show", "no-slash").returncode == 2  # a usage error, from argparse


def test_retry_deletes_a_failed_job_once_the_api_recovers(cluster, cli, ops, worker_metrics):
    ns = cluster.namespace
    refused = metric(worker_metrics, "jobttl_failures_total", reason="permanent")
    late = metric(worker_metrics, "jobttl_deletion_lateness_seconds_count")
    cluster.fail_next("delete", 403, 2)
    for name in ("first", "second"):
        schedule(cluster, name, 0, time.time())
    wait_for(lambda: len(failures_in(ops, ns)) == 2, what="both deletions to fail")
    assert metric(worker_metrics, "jobttl_failures_total", reason="permanent") == refused + 2
    assert cluster.get("first") is not None and cluster.get("second") is not None
    requests.delete(f"{cluster.emulator.url}/_emulator/faults", timeout=5).raise_for_status()

    def deleted() -> float:
        return metric(worker_metrics, "jobttl_deletions_total", kind="TFJob", group="kubeflow.org", namespace=ns)

    ids = {f.ref.name: f.job_id for f in failures_in(ops, ns)}
    assert cli.json("retry", ids["first"]) == {"requeued": [ids["first"]]}
    cluster.wait_gone("first")
    wait_for(lambda: deleted() == 1, what="the deletion to be counted")
    wait_for(
        lambda: metric(worker_metrics, "jobttl_deletion_lateness_seconds_count") == late + 1,
        what="its lateness to be observed",
    )
    assert cluster.get("second") is not None, "only the one retried"

    # Every failed deletion in the queue (other tests' too, so only ours are checked).
    assert ids["second"] in cli.json("retry", "--all-failed")["requeued"]
    cluster.wait_gone("second")
    wait_for(lambda: deleted() == 2, what="the second deletion to be counted")
    assert failures_in(ops, ns) == []
    events = [(e["event"], e["name"]) for e in cli.json("history", "--namespace", ns, "--event", "retry")["items"]]
    assert sorted(events) == [("retry", "first"), ("retry", "second")]
    assert cli.run("retry", ids["first"]).returncode == 1, "no longer failed"


def test_a_cancelled_deletion_stays_cancelled(cluster, cli, redis):
    ns = cluster.namespace
    obj = schedule(cluster, "keep-me", 3600, time.time())
    kept = metric(f"{cluster.sink_url}/metrics", "jobttl_sink_events_total", type="update", outcome="kept")
    pending = redis.zcard(keys.PENDING_INDEX)

    cancelled = cli.json("cancel", f"{ns}/keep-me")
    assert cancelled["uid"] == obj["metadata"]["uid"]
    assert metric(f"{cluster.sink_url}/metrics", "jobttl_pending_deletions") == pending - 1
    assert api(cluster, "/api/v1/deletions", namespace=ns).json()["total"] == 0

    # The training operator touches the job again: the sink keeps it kept.
    response = cluster.event("update", cluster.patch("keep-me", {"metadata": {"labels": {"touched": "yes"}}}))
    assert response.headers["X-Jobttl-Outcome"] == "kept"
    assert cli.json("pending", "--namespace", ns)["items"] == []
    assert metric(f"{cluster.sink_url}/metrics", "jobttl_sink_events_total", type="update", outcome="kept") == kept + 1
    [cancel] = cli.json("history", "--namespace", ns, "--event", "cancelled")["items"]
    assert (cancel["by"], cancel["reason"]) == ("operator", "kept-by-operator")
    assert cli.run("cancel", f"{ns}/keep-me").returncode == 1, "nothing left to cancel"


def test_a_postponed_deletion_stays_postponed(cluster, cli):
    ns, now = cluster.namespace, int(time.time())
    obj = schedule(cluster, "later", 3600, now)
    unchanged = metric(f"{cluster.sink_url}/metrics", "jobttl_sink_events_total", type="update", outcome="unchanged")

    assert cli.json("postpone", f"{ns}/later", "2h")["due"] == now + 3600 + 7200
    assert api(cluster, f"/api/v1/deletions/{ns}/later").json()["pending"][0]["due"] == now + 3600 + 7200

    # An event computes the original due time again; the operator's later one stands.
    assert cluster.event("update", obj).headers["X-Jobttl-Outcome"] == "unchanged"
    [pending] = cli.json("pending", "--namespace", ns)["items"]
    assert pending["due"] == now + 3600 + 7200
    assert (
        metric(f"{cluster.sink_url}/metrics", "jobttl_sink_events_total", type="update", outcome="unchanged")
        == unchanged + 1
    )
    [postponed] = cli.json("history", "--namespace", ns, "--event", "postponed")["items"]
    assert (int(postponed["due"]), int(postponed["newDue"])) == (now + 3600, now + 3600 + 7200)
    assert cli.run("postpone", f"{ns}/later", "soon").returncode == 2


def test_tombstones_expire(cluster, cli, ops, redis, worker_metrics):
    ns = cluster.namespace
    obj = schedule(cluster, "short-lived", 0, time.time())
    cluster.wait_gone("short-lived")
    key = keys.tombstone(ns, "short-lived", obj["metadata"]["uid"])
    wait_for(lambda: redis.exists(key), what="the tombstone")
    assert TOMBSTONE_DAYS * 86400 - 60 < redis.ttl(key) <= TOMBSTONE_DAYS * 86400
    assert len(cli.json("show", f"{ns}/short-lived")["tombstones"]) == 1
    wait_for(
        lambda: metric(worker_metrics, "jobttl_deletions_total", kind="TFJob", group="kubeflow.org", namespace=ns) == 1,
        what="the deletion to be counted once the object is gone",
    )

    redis.expire(key, 1)  # as if the days had passed
    wait_for(lambda: ops.audit.tombstones(ns, "short-lived") == [], what="the tombstone to expire")
    shown = cli.json("show", f"{ns}/short-lived")
    assert shown["tombstones"] == [] and "deleted" in [e["event"] for e in shown["history"]], "history stays"
