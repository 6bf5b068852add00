"""The pods stage and the job stage's last steps, run by the worker's own algorithm in this process
(`jobttl.core.services.deletion.Deletion`, its pods stage `jobttl.core.services.pods_stage.PodsStage`) against real
Redis and the emulator over HTTP: the job read again right before its pods go, pods younger than the
finish kept, keep-until, dry run, the pods stage dropped with its job, and the intent a run leaves (or
does not) when it ends.

Nothing is monkeypatched (tests.worker.bench): a window between the worker's reads is opened with a
rate-limit slot taken in Redis beforehand (the worker waits for it after its first read, before the
re-read), and the test changes the job in that window, as a user or a controller would.
"""

from __future__ import annotations

import time

import pytest

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.store import keys
from jobttl.core.kube.client import Conflict, TransientApiError
from jobttl.core.store.schedule import JOB_STAGE, PODS_STAGE, member_for
from jobttl_emulator import EVENT
from tests.fixtures import rfc3339, running_status
from tests.services import wait_for
from tests.worker.bench import Bench, kube  # noqa: F401  (kube: the module's emulator)

PODS_POLICY = "ttl: 1h\npodTTL: 1s\n"


@pytest.fixture
def bench(kube, redis_server, tmp_path, queue_name):
    return Bench(kube, redis_server, tmp_path, PODS_POLICY, queue_name, rate=1.0)


def finished_with_pods(bench: Bench, name: str, pods: int = 2, **annotations: str) -> dict:
    """A job whose pods ran and which then finished; its pods stage booked, and due by now."""
    obj = bench.job(name, time.time() - 60, **annotations)
    for i in range(pods):
        bench.pod(f"{name}-worker-{i}", obj)
    # The emulator stamps a pod with the time it is created: the job finishes after its pods began.
    finished = int(time.time())
    obj = bench.update(name, lambda o: o["status"].update(completionTime=rfc3339(finished)), status=True)
    bench.book(obj)
    due = bench.pending(obj, PODS_STAGE)
    assert due == finished + 1, "podTTL 1s"
    wait_for(lambda: time.time() >= due + 0.1, timeout=5, what="the pods stage to come due")
    return obj


# --- 1. the job read again right before its pods go ------------------------------------------------------


def test_the_pods_stage_deletes_the_pods_when_the_job_is_unchanged(bench):
    """The baseline the race tests below depart from: same window, nothing changes, the pods go."""
    obj = finished_with_pods(bench, "steady")
    assert bench.pods() == ["steady-worker-0", "steady-worker-1"]
    outcome = bench.run_and_change(bench.target(obj, PODS_STAGE), "steady", lambda: None)
    assert outcome == "pods-deleted"
    assert sorted(bench.pod_deletes()) == ["steady-worker-0", "steady-worker-1"] and bench.pods() == []
    # Each pod is a DELETE too: one rate-limit slot each (1/s here).
    first, second = sorted(r["time"] for r in bench.kube.requests("DELETE", path_contains=f"/{bench.namespace}/pods/"))
    assert second - first >= 0.9


def test_the_pods_stage_keeps_the_pods_of_a_job_running_again_since_it_was_read(bench):
    """`argo retry` (or a controller restarting a job) keeps the UID: only the re-read right
    before the DELETEs sees it, and the pods of the new run stay."""
    obj = finished_with_pods(bench, "retried")
    outcome = bench.run_and_change(
        bench.target(obj, PODS_STAGE),
        "retried",
        lambda: bench.update("retried", lambda o: o.update(status=running_status(time.time())), status=True),
    )
    assert outcome == "skipped:not-finished"
    assert bench.pod_deletes() == [] and bench.pods() == ["retried-worker-0", "retried-worker-1"]
    assert bench.pending(obj, PODS_STAGE) is None, "a running job has no pods stage"
    assert not bench.redis.exists(keys.intent(member_for(obj["metadata"]["uid"], PODS_STAGE))), (
        "a run that sent no DELETE leaves no intent"
    )


def test_the_pods_stage_keeps_the_pods_of_a_job_kept_longer_since_it_was_read(bench):
    """The user annotates jobttl.io/keep-until while the worker waits for its slot: no pod goes,
    and the stage moves to that time."""
    obj = finished_with_pods(bench, "extended")
    keep_until = int(time.time()) + 1800
    outcome = bench.run_and_change(
        bench.target(obj, PODS_STAGE),
        "extended",
        lambda: bench.annotate("extended", **{"jobttl.io/keep-until": rfc3339(keep_until)}),
    )
    assert outcome == "rescheduled"
    assert bench.pod_deletes() == [] and bench.pods() == ["extended-worker-0", "extended-worker-1"]
    assert bench.pending(obj, PODS_STAGE) == keep_until


# --- 2. never a pod younger than the finish ---------------------------------------------------------------


def test_a_pod_created_after_the_job_finished_survives_the_pods_stage(bench):
    obj = finished_with_pods(bench, "rerun")
    finished = int(bench.pending(obj, PODS_STAGE)) - 1
    wait_for(lambda: int(time.time()) > finished, timeout=5, what="a second after the finish")
    late = bench.pod("rerun-worker-late", obj)  # a run begun since (its UID kept, as `argo retry` does)
    assert late["metadata"]["creationTimestamp"] > rfc3339(finished)
    assert bench.run(bench.target(obj, PODS_STAGE)) == "pods-deleted"
    assert sorted(bench.pod_deletes()) == ["rerun-worker-0", "rerun-worker-1"]
    assert bench.pods() == ["rerun-worker-late"]
    [entry] = [e for e in bench.history("rerun") if e["event"] == "pods-deleted"]
    pods = entry["pods"] if isinstance(entry["pods"], list) else jsoncodec.loads(entry["pods"])
    assert sorted(pods) == ["rerun-worker-0", "rerun-worker-1"] and entry["stage"] == "pods"


# --- 3. keep-until, in the worker --------------------------------------------------------------------------


def test_the_pods_stage_waits_for_keep_until_annotated_after_it_was_booked(bench):
    obj = finished_with_pods(bench, "debugged")
    target = bench.target(obj, PODS_STAGE)
    keep_until = int(time.time()) + 3000  # within the job's TTL (1h): the pods stage still comes first
    bench.annotate("debugged", **{"jobttl.io/keep-until": rfc3339(keep_until)})
    assert bench.run(target) == "rescheduled"
    assert bench.pod_deletes() == [] and bench.pods() == ["debugged-worker-0", "debugged-worker-1"]
    assert bench.pending(obj, PODS_STAGE) == keep_until


# --- 6. dry run --------------------------------------------------------------------------------------------


def test_a_pods_stage_in_dry_run_deletes_no_pod_and_records_what_it_would_do(kube, redis_server, tmp_path, queue_name):
    bench = Bench(kube, redis_server, tmp_path, PODS_POLICY + "dryRun: true\n", queue_name)
    obj = finished_with_pods(bench, "rehearsed")
    target = bench.target(obj, PODS_STAGE)
    assert bench.run(target) == "would-delete"
    assert bench.pod_deletes() == [] and bench.pods() == ["rehearsed-worker-0", "rehearsed-worker-1"]
    [entry] = [e for e in bench.history("rehearsed") if e["event"] == "would-delete"]
    assert entry["stage"] == "pods" and entry["dryRun"] in (True, "true", "1") and int(entry["due"]) == target.due
    assert "pods-deleted" not in [e["event"] for e in bench.history("rehearsed")]
    assert bench.get("rehearsed") is not None


# --- 7. the job's FINISH drops its pods stage --------------------------------------------------------------


@pytest.fixture
def due_bench(kube, redis_server, tmp_path, queue_name):
    """Both stages due at once: the job 2s after it finished, its pods 1s after."""
    return Bench(kube, redis_server, tmp_path, "ttl: 2s\npodTTL: 1s\n", queue_name)


def test_deleting_the_job_drops_its_pending_pods_stage_in_the_same_write(due_bench):
    obj = due_bench.job("whole", time.time() - 60)
    due_bench.book(obj)
    assert due_bench.pending(obj, PODS_STAGE) is not None and due_bench.pending(obj, JOB_STAGE) is not None
    assert due_bench.run(due_bench.target(obj, JOB_STAGE)) in ("deleted", "delete-requested")
    assert due_bench.job_deletes() == ["whole"]
    assert due_bench.pending(obj, JOB_STAGE) is None
    assert due_bench.pending(obj, PODS_STAGE) is None, "the pods stage goes with its job"


# --- 8. a run that ends without FINISH: its intent ---------------------------------------------------------


def test_a_run_whose_deletes_all_conflicted_leaves_no_intent(due_bench):
    """Three 409s deleted nothing: the intent written before them must not outlive the run (a
    later run would take the user's own deletion of the job for jobttl's)."""
    obj = due_bench.job("contested", time.time() - 60)
    due_bench.book(obj)
    uid = obj["metadata"]["uid"]
    due_bench.kube.add_fault(verb="delete", status=409, count=3, path_contains=f"/{due_bench.namespace}/tfjobs/")
    with pytest.raises(Conflict):
        due_bench.run(due_bench.target(obj, JOB_STAGE))
    assert len(due_bench.job_deletes()) == 3
    assert not due_bench.redis.exists(keys.intent(uid)) and not due_bench.redis.exists(keys.claim(uid))
    assert due_bench.pending(obj, JOB_STAGE) is not None, "still pending, for RQ's retry"


def test_a_run_whose_delete_may_have_been_applied_keeps_its_intent(due_bench):
    """A DELETE that failed with a 500 may have been applied: the intent stays for the next run."""
    obj = due_bench.job("uncertain", time.time() - 60)
    due_bench.book(obj)
    uid = obj["metadata"]["uid"]
    due_bench.kube.add_fault(verb="delete", status=500, count=20, path_contains=f"/{due_bench.namespace}/tfjobs/")
    try:
        with pytest.raises(TransientApiError):
            due_bench.run(due_bench.target(obj, JOB_STAGE))
    finally:
        due_bench.kube.clear_faults()
    intent = jsoncodec.loads(due_bench.redis.get(keys.intent(uid)))
    assert intent["uid"] == uid and intent["resourceVersion"] == obj["metadata"]["resourceVersion"]
    assert not due_bench.redis.exists(keys.claim(uid)), "the claim is given back all the same"


# --- the job stage: a claim taken by another run, a job re-created after a run that died ------------------


def test_a_run_whose_claim_another_run_took_meanwhile_sends_no_delete(kube, redis_server, tmp_path, queue_name):
    """Its claim expired while it waited (here: taken over in the window): the other run deletes, not this one."""
    bench = Bench(kube, redis_server, tmp_path, "ttl: 2s\n", queue_name, rate=1.0)
    obj = bench.job("claimed", time.time() - 60)
    bench.book(obj)
    target = bench.target(obj, JOB_STAGE)
    uid = obj["metadata"]["uid"]
    outcome = bench.run_and_change(target, "claimed", lambda: bench.redis.set(keys.claim(uid), "another-run"))
    assert outcome == "skipped:another-run-is-deleting-it"
    assert bench.job_deletes() == [] and bench.get("claimed") is not None
    assert bench.redis.get(keys.claim(uid)) == b"another-run", "the other run's claim is not this run's to end"
    assert bench.pending(obj, JOB_STAGE) == target.due


def test_a_run_that_finds_its_job_recreated_after_a_dead_runs_delete_records_it_and_books_the_new_one(due_bench):
    obj = due_bench.job("phoenix", time.time() - 60)
    due_bench.book(obj)
    target = due_bench.target(obj, JOB_STAGE)
    uid = obj["metadata"]["uid"]
    # As a run that died after its DELETE leaves it: the intent, the job gone; then the user re-creates it.
    due_bench.redis.set(
        keys.intent(uid),
        jsoncodec.dumps_str(
            {
                "uid": uid,
                "at": time.time(),
                "resourceVersion": obj["metadata"]["resourceVersion"],
                "object": {"metadata": {}, "status": obj["status"]},
            }
        ),
    )
    due_bench.kube.store.delete(
        due_bench.kube.store.resource_for(obj["apiVersion"], obj["kind"]),
        due_bench.namespace,
        "phoenix",
        {"propagationPolicy": "Background"},
    )
    wait_for(
        lambda: (
            not due_bench.kube.store.list(
                due_bench.kube.store.resource_for(obj["apiVersion"], obj["kind"]), due_bench.namespace
            )["items"]
        ),
        timeout=5,
        what="the job gone",
    )
    again = due_bench.job("phoenix", time.time() - 30)
    assert again["metadata"]["uid"] != uid
    assert due_bench.run(target) == "deleted"
    assert due_bench.job_deletes() == [], "this run sent none: it records the dead run's"
    assert due_bench.pending(obj, JOB_STAGE) is None
    assert due_bench.pending(again, JOB_STAGE) is not None, "the new job gets its own decision"
    assert due_bench.get("phoenix")["metadata"]["uid"] == again["metadata"]["uid"]


def test_the_pods_stage_deletes_no_pod_of_a_job_recreated_since_it_was_read(bench):
    """The user deletes the job, leaving its pods (orphan), and creates it again under the same name:
    the re-read sees another UID. No pod is deleted, no "pods-deleted" is recorded for a job that
    is gone, and the new job gets its own decision."""
    obj = finished_with_pods(bench, "reborn")
    res = bench.kube.store.resource_for(obj["apiVersion"], obj["kind"])
    created: dict = {}

    def recreate():
        bench.kube.store.delete(res, bench.namespace, "reborn", {"propagationPolicy": "Orphan"})
        wait_for(
            lambda: not bench.kube.store.list(res, bench.namespace)["items"],
            timeout=2,
            interval=0.02,
            what="the orphaning deletion",
        )
        created["new"] = bench.job("reborn", time.time() - 60)

    outcome = bench.run_and_change(bench.target(obj, PODS_STAGE), "reborn", recreate)
    assert outcome == "skipped:recreated"
    assert bench.pod_deletes() == [] and bench.pods() == ["reborn-worker-0", "reborn-worker-1"]
    assert "pods-deleted" not in [e["event"] for e in bench.history("reborn")]
    assert bench.pending(obj, PODS_STAGE) is None and bench.pending(obj, JOB_STAGE) is None
    assert bench.pending(created["new"], JOB_STAGE) is not None, "the new job gets its own decision"


def test_a_pods_stage_run_replans_only_its_own_stage(bench):
    """Kept (keep-until) past the job's TTL since the pods stage was booked: the pods now go with
    the job, so the pods stage is cancelled; the job's own stage is its own run's to move."""
    obj = finished_with_pods(bench, "both")
    job_due = bench.pending(obj, JOB_STAGE)
    bench.annotate("both", **{"jobttl.io/keep-until": rfc3339(job_due + 1800)})
    assert bench.run(bench.target(obj, PODS_STAGE)) == "skipped:pods-with-job"
    assert bench.pod_deletes() == [] and bench.pending(obj, PODS_STAGE) is None
    assert bench.pending(obj, JOB_STAGE) == job_due, "the job stage is left to its own run"


def test_a_pods_stage_that_gives_up_says_so_as_failed_delete_pods(bench):
    """The pods' DELETEs fail for good: the Warning Event and the audit entry name the pods stage,
    not the job (which is still there, and still due at its own TTL)."""
    from jobttl.worker.tasks import _failed  # the task's one handler, as RQ's last try reaches it

    obj = finished_with_pods(bench, "stubborn", pods=1)
    target = bench.target(obj, PODS_STAGE)
    bench.kube.add_fault(verb="delete", status=500, count=20, path_contains=f"/{bench.namespace}/pods/")
    try:
        with pytest.raises(TransientApiError) as raised:
            bench.run(target)
    finally:
        bench.kube.clear_faults()
    _failed(bench.ctx, None, target, raised.value)
    [failed] = [e for e in bench.history("stubborn") if e["event"] == "failed"]
    assert failed["stage"] == "pods" and failed["failure"] == "transient"
    events = wait_for(
        lambda: [e for e in bench.kube.store.list(EVENT, bench.namespace)["items"] if e["type"] == "Warning"],
        timeout=10,
        what="the Warning Event",
    )
    assert [(e["reason"], e["involvedObject"]["uid"]) for e in events] == [("FailedDeletePods", target.ref.uid)]
    assert events[0]["message"].startswith("jobttl could not delete the pods of TFJob stubborn: ")
