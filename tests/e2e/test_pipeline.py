"""Finished TFJobs are deleted after their TTL, and nothing else ever is.

Each test drives the real stack: CloudEvents over HTTP to the sink (a waitress process),
Redis and RQ, the worker process, and the real `kubernetes` client against the emulator.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import requests
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from tests.fixtures import finished_status
from tests.services import wait_for
from jobttl.core.domain.decisions.decision import decide
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.store.schedule import job_id_for


def due_of(obj: dict) -> int:
    return decide(obj, TFJOB).expires_at


def rq_job(cluster, uid: str, due: int) -> Job:
    return Job.fetch(job_id_for(uid, due), connection=cluster.schedule.redis, serializer=JSONSerializer)


def wait_until_not_pending(cluster, uid: str, timeout: float = 10.0) -> None:
    """The worker has reached a final outcome for this object."""
    wait_for(lambda: cluster.schedule.get(uid) is None, timeout=timeout, what=f"the pending deletion of {uid} to end")


def assert_accepted(response, outcome: str | None = None):
    assert response.status_code == 202, response.text
    assert response.content == b"", "a 2xx body that is not a CloudEvent becomes a 502 behind a Broker"
    if outcome is not None:
        assert response.headers["X-Jobttl-Outcome"] == outcome


LATE_BOUND = 10.0  # seconds after its due time a deletion still counts as on time here (see below)


@pytest.mark.parametrize("mode", ["resource", "ref"])
@pytest.mark.parametrize("structured", [False, True], ids=["binary", "structured"])
def test_a_finished_job_is_deleted_when_its_ttl_is_up(cluster, worker, mode, structured):
    finished_at = int(time.time())
    obj = cluster.create_finished("mnist", ttl=2, finished_at=finished_at)

    assert_accepted(cluster.event("update", obj, mode=mode, structured=structured), "scheduled")
    cluster.wait_gone("mnist", timeout=30)

    [delete] = cluster.deletes()
    # Never before finish + TTL; after it within LATE_BOUND, a failure bound that holds on a loaded
    # machine (the scheduler looks 5 times a second: lateness is measured in bench/, not here).
    assert finished_at + 2 <= delete["time"] < finished_at + 2 + LATE_BOUND, "deleted at finish + TTL, not before"
    assert delete["body"]["preconditions"] == {
        "uid": obj["metadata"]["uid"],
        "resourceVersion": obj["metadata"]["resourceVersion"],
    }
    assert delete["body"]["propagationPolicy"] == "Foreground"
    wait_until_not_pending(cluster, obj["metadata"]["uid"])
    identity = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "namespace": cluster.namespace,
        "name": "mnist",
        "uid": obj["metadata"]["uid"],
    }

    def logged(event: str) -> list[dict]:
        lines = [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
        return [e for e in lines if e.get("event") == event and e.get("object") == identity]

    # The DELETE is accepted (Foreground: the object waits for the garbage collector), then it is gone.
    [requested] = wait_for(lambda: logged("delete-requested"), what="the worker to log its DELETE")
    assert (
        requested["propagationPolicy"] == "Foreground"
        and 2 <= requested["ttl"]
        and 0 <= requested["lateness"] < LATE_BOUND
    )
    wait_for(lambda: logged("deleted"), what="the worker to log that the job is gone")
    # One line per outcome: RQ's own four per job ("Job OK", ...) are DEBUG lines.
    rq_lines = [json.loads(line) for line in worker.log().splitlines() if line.startswith('{"') and "rq.worker" in line]
    assert not [
        e for e in rq_lines if e.get("logger") == "rq.worker" and obj["metadata"]["uid"] in e.get("message", "")
    ]


def test_jobs_that_must_stay_are_answered_2xx_and_never_scheduled(cluster):
    now = int(time.time())
    running = cluster.create_running("running", ttl=0, started=now)
    no_ttl = cluster.create_finished("no-ttl", ttl=None, finished_at=now - 3600)
    other_kind = {**no_ttl, "apiVersion": "apps/v1", "kind": "Deployment"}

    assert_accepted(cluster.event("update", running), "ignored:not-finished")
    assert_accepted(cluster.event("update", no_ttl), "ignored:no-ttl")
    assert_accepted(cluster.event("update", other_kind), "ignored:kind-not-enabled")
    for obj in (running, no_ttl):
        assert cluster.schedule.get(obj["metadata"]["uid"]) is None
    # A canary, expired, sent after them: the worker takes deletions in the order they were
    # queued, so once the canary is gone, anything booked for the others would have run too.
    canary = cluster.create_finished("canary", ttl=0, finished_at=now - 3600)
    assert_accepted(cluster.event("update", canary), "scheduled")
    cluster.wait_gone("canary")
    assert [d["path"].rsplit("/", 1)[1] for d in cluster.deletes()] == ["canary"]
    assert cluster.get("running") is not None and cluster.get("no-ttl") is not None
    for obj in (running, no_ttl):
        events = [e.fields["event"] for e in cluster.audit.history(cluster.namespace, obj["metadata"]["name"])]
        assert "scheduled" not in events and "cancelled" not in events, events


def test_an_invalid_ttl_is_ignored_and_counted(cluster):
    obj = cluster.create_finished("bad-ttl", ttl=None, finished_at=time.time())
    obj = cluster.patch("bad-ttl", {"spec": {"runPolicy": {"ttlSecondsAfterFinished": -5}}})
    assert_accepted(cluster.event("update", obj), "ignored:invalid-ttl")
    metrics = requests.get(f"{cluster.sink_url}/metrics", timeout=5).text
    assert 'jobttl_invalid_ttl_total{group="kubeflow.org",kind="TFJob"}' in metrics


def test_a_forged_finished_event_for_a_running_job_deletes_nothing(cluster):
    running = cluster.create_running("training", ttl=0, started=time.time())
    forged = {**running, "status": finished_status(time.time() - 60)}

    assert_accepted(cluster.event("update", forged), "scheduled")  # the event alone looks expired
    wait_until_not_pending(cluster, running["metadata"]["uid"])
    assert cluster.get("training") is not None
    assert [d for d in cluster.deletes() if d["path"].endswith("/training")] == []


def test_twenty_duplicate_events_cause_exactly_one_delete(cluster):
    # Due in 3 s: all twenty are answered before it is due, even on a loaded machine (with
    # 1 s, a late one could find the deletion already queued or done).
    obj = cluster.create_finished("dup", ttl=3, finished_at=time.time())
    responses = []

    def send():
        responses.append(cluster.event("update", obj))

    threads = [threading.Thread(target=send) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r.status_code == 202 for r in responses)
    assert sorted(r.headers["X-Jobttl-Outcome"] for r in responses) == ["scheduled"] + ["unchanged"] * 19
    cluster.wait_gone("dup")
    wait_until_not_pending(cluster, obj["metadata"]["uid"])
    assert len(cluster.deletes()) == 1


def test_a_recreated_job_survives_the_old_jobs_schedule(cluster):
    old = cluster.create_finished("again", ttl=2, finished_at=time.time())
    assert_accepted(cluster.event("update", old), "scheduled")
    # Deleted and re-created under the same name, with no event for either change.
    cluster.delete_now("again")
    cluster.wait_gone("again")
    new = cluster.create_finished("again", ttl=3600, finished_at=time.time())

    wait_until_not_pending(cluster, old["metadata"]["uid"])
    # The run forgets the old entry before it returns: its result is written a moment later.
    job = rq_job(cluster, old["metadata"]["uid"], due_of(old))
    wait_for(lambda: job.return_value(refresh=True) is not None, timeout=10, what="the old job's run to end")
    assert job.return_value() == "skipped:recreated"
    assert cluster.get("again")["metadata"]["uid"] == new["metadata"]["uid"]
    assert len(cluster.deletes()) == 1, "only the test's own delete"


def test_a_ttl_extended_after_scheduling_moves_the_deletion(cluster):
    finished_at = int(time.time())
    obj = cluster.create_finished("extended", ttl=2, finished_at=finished_at)
    assert_accepted(cluster.event("update", obj), "scheduled")
    # The user extends the TTL; the event for that change never reaches us.
    cluster.patch("extended", {"spec": {"runPolicy": {"ttlSecondsAfterFinished": 5}}})

    wait_for(
        lambda: cluster.schedule.get(obj["metadata"]["uid"]).due == finished_at + 5,
        timeout=6,
        what="the worker to reschedule at the new expiry",
    )
    assert cluster.get("extended") is not None
    cluster.wait_gone("extended", timeout=10)
    [delete] = cluster.deletes()
    assert delete["time"] >= finished_at + 5


@pytest.mark.parametrize("mode", ["resource", "ref"])
def test_a_delete_event_removes_the_pending_deletion(cluster, mode):
    obj = cluster.create_finished("removed", ttl=3600, finished_at=time.time())
    assert_accepted(cluster.event("update", obj, mode=mode), "scheduled")
    uid = obj["metadata"]["uid"]
    assert cluster.schedule.get(uid) is not None

    cluster.delete_now("removed")
    cluster.wait_gone("removed")
    assert_accepted(cluster.event("delete", obj, mode=mode), "cancelled")
    assert cluster.schedule.get(uid) is None
    assert cluster.schedule.redis.zscore("jobttl:pending", uid) is None


def test_transient_api_errors_are_retried_until_the_job_is_deleted(cluster):
    obj = cluster.create_finished("flaky", ttl=0, finished_at=time.time() - 10)
    cluster.fail_next("get", 500, count=2)
    assert_accepted(cluster.event("update", obj), "scheduled")
    cluster.wait_gone("flaky", timeout=15)
    gets = [r for r in cluster.requests("GET") if r["path"].endswith("/flaky")]
    assert [g["status"] for g in gets[:3]] == [500, 500, 200]


def test_a_conflict_on_delete_is_resolved_by_reading_and_deciding_again(cluster):
    obj = cluster.create_finished("busy", ttl=0, finished_at=time.time() - 10)
    cluster.fail_next("delete", 409, count=1)
    assert_accepted(cluster.event("update", obj), "scheduled")
    cluster.wait_gone("busy")
    assert [d["status"] for d in cluster.deletes()] == [409, 200]
    gets = [r for r in cluster.requests("GET") if r["path"].endswith("/busy")]
    assert len(gets) >= 2, "the object was read again after the conflict"


def test_a_forbidden_delete_fails_at_once_with_the_missing_permission_named(cluster):
    obj = cluster.create_finished("locked", ttl=0, finished_at=time.time() - 10)
    cluster.fail_next("delete", 403, count=10)
    assert_accepted(cluster.event("update", obj), "scheduled")
    due = due_of(obj)

    job = wait_for(
        lambda: (j := rq_job(cluster, obj["metadata"]["uid"], due)).get_status() == JobStatus.FAILED and j,
        timeout=10,
        what="the deletion to fail",
    )
    assert "needs 'delete' on tfjobs.kubeflow.org" in job.latest_result().exc_string
    assert len(cluster.deletes()) == 1, "a 403 is not retried"
    assert cluster.get("locked") is not None


def test_each_deletion_and_each_failure_leaves_a_kubernetes_event(cluster):
    from kubernetes import client

    events_api = client.CoreV1Api(cluster.api.api_client)
    deleted = cluster.create_finished("noted", ttl=0, finished_at=time.time() - 10)
    failing = cluster.create_finished("refused", ttl=0, finished_at=time.time() - 10)
    cluster.fail_next("delete", 403, count=5)  # the first DELETE in this namespace is refused...
    assert_accepted(cluster.event("update", failing), "scheduled")
    wait_for(
        lambda: rq_job(cluster, failing["metadata"]["uid"], due_of(failing)).get_status() == JobStatus.FAILED,
        what="the refused deletion to fail",
    )
    requests.delete(f"{cluster.emulator.url}/_emulator/faults", timeout=5)
    assert_accepted(cluster.event("update", deleted), "scheduled")  # ...this one goes through
    cluster.wait_gone("noted")

    def events():
        items = events_api.list_namespaced_event(cluster.namespace).items
        return {(e.involved_object.name, e.reason, e.type): e for e in items}

    found = wait_for(lambda: len(events()) == 2 and events(), what="two Events")
    ok = found[("noted", "SuccessfulDeleteJob", "Normal")]
    assert ok.involved_object.uid == deleted["metadata"]["uid"] and ok.source.component == "jobttl"
    assert "TTL 0s" in ok.message and "spec.runPolicy.ttlSecondsAfterFinished" in ok.message
    warning = found[("refused", "FailedDeleteJob", "Warning")]
    assert "needs 'delete' on tfjobs.kubeflow.org" in warning.message


def test_a_deletion_is_announced_ahead_of_time_and_a_cancelled_one_is_not(cluster, announcements):
    finished_at = int(time.time())
    doomed = cluster.create_finished("announced", ttl=4, finished_at=finished_at)
    spared = cluster.create_finished("spared", ttl=4, finished_at=finished_at)
    assert_accepted(cluster.event("update", doomed), "scheduled")
    assert_accepted(cluster.event("update", spared), "scheduled")
    cluster.delete_now("spared")
    assert_accepted(cluster.event("delete", spared), "cancelled")

    cluster.wait_gone("announced", timeout=10)
    [delete] = [d for d in cluster.deletes() if d["path"].endswith("/announced")]
    mine = [e for e in announcements.events if e["data"]["namespace"] == cluster.namespace]
    assert [e["data"]["name"] for e in mine] == ["announced"], "the cancelled deletion stays quiet"
    [warning] = mine
    assert warning["type"] == "io.jobttl.deletion.upcoming"
    assert warning["headers"]["ce-subject"] == f"/apis/kubeflow.org/v1/namespaces/{cluster.namespace}/tfjobs/announced"
    assert warning["data"]["uid"] == doomed["metadata"]["uid"]
    assert warning["data"]["ttlSource"] == "spec.runPolicy.ttlSecondsAfterFinished"
    assert warning["received"] < delete["time"], "announced before the deletion"
