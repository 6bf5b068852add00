"""The deletion holds when things happen at the same time: operators acting mid-deletion, the
same RQ job run twice, a run that dies after its DELETE. A real worker process, Redis and the
emulator (tests.e2e.conftest.OwnStack).
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.store import keys
from jobttl.core.domain.decisions.decision import decide
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.domain.rules.policy import parse_policy
from jobttl.core.store.schedule import PODS_STAGE, job_id_for, member_for
from jobttl_emulator import POD, seed_object
from tests.e2e.conftest import OwnStack
from tests.fixtures import job_object
from tests.services import wait_for


# The longest the API server holds a request a test holds (it answers once the test has done its
# part): within the worker's API timeout here, so the held request is answered, not abandoned.
HELD = 30.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = OwnStack(
        tmp_path_factory.mktemp("races"),
        "races",
        gc_delay=0.1,
        resources=(POD,),
        JOBTTL_API_TIMEOUT=str(int(HELD) + 15),
    )
    yield stack
    stack.stop()


def finished(stack, namespace: str, name: str, ttl: int, at: float) -> dict:
    return stack.seed(job_object(TFJOB, name, namespace, state="succeeded", at=at, ttl=ttl))


def events(stack, namespace: str, name: str) -> list[str]:
    return [e["event"] for e in stack.history(namespace, name)]


def test_an_operator_cancel_during_the_deletion_is_heeded(stack):
    """The worker is reading the object (its GET held by the API server) when the operator says
    keep: no DELETE follows. The GET is answered once the cancel is done, however long that takes."""
    ns = f"cancel-{uuid.uuid4().hex[:6]}"
    obj = finished(stack, ns, "precious", ttl=60, at=time.time() - 3600)
    answer = threading.Event()
    held = stack.emulator.add_fault(
        verb="get", delay=HELD, count=1, gate=answer, path_contains=f"/namespaces/{ns}/tfjobs/precious"
    )
    stack.book(obj, TFJOB)
    try:
        # The run has begun (its claim taken) and is reading the object.
        assert held.arrived.wait(60), "the worker to start the deletion and read the object"
        assert stack.redis.get(keys.claim(obj["metadata"]["uid"]))
        stack.jobttl("cancel", f"{ns}/precious")
    finally:
        answer.set()
    wait_for(
        lambda: (
            "kept-by-operator" in str(stack.history(ns, "precious")[-1:])
            and stack.redis.get(keys.claim(obj["metadata"]["uid"])) is None
        ),
        timeout=60,
        what="the worker to finish with the operator's word",
    )
    assert stack.deletes(ns) == [], "kept by the operator"
    assert "delete-requested" not in events(stack, ns, "precious")


def test_the_same_rq_job_enqueued_twice_deletes_once_and_records_once(stack):
    ns = f"twice-{uuid.uuid4().hex[:6]}"
    obj = finished(stack, ns, "doubled", ttl=60, at=time.time() - 3600)
    # A slow GET keeps the first run busy while the second copy of the job is taken.
    stack.emulator.add_fault(verb="get", delay=2.0, count=1, path_contains=f"/namespaces/{ns}/tfjobs/doubled")
    stack.book(obj, TFJOB)
    job_id = job_id_for(obj["metadata"]["uid"], decide(obj, TFJOB).expires_at)
    stack.redis.rpush(f"rq:queue:{stack.name}", job_id)  # what two racing enqueues of one id leave
    wait_for(lambda: "deleted" in events(stack, ns, "doubled"), timeout=30, what="the deletion")
    assert len(stack.deletes(ns)) == 1
    wait_for(lambda: stack.redis.llen(f"rq:queue:{stack.name}") == 0, timeout=10, what="both copies to run")
    assert [e for e in events(stack, ns, "doubled") if e in ("cancelled", "delete-requested", "deleted")] == [
        "delete-requested",
        "deleted",
    ], "the second run changes nothing and records nothing"


def test_a_run_that_died_after_its_delete_is_recorded_as_a_deletion_by_the_next(stack):
    """The intent written before the DELETE tells the next run what happened."""
    ns = f"intent-{uuid.uuid4().hex[:6]}"
    obj = finished(stack, ns, "orphaned", ttl=60, at=time.time() - 3600)
    ref = JobRef.of(obj)
    # As a dead run leaves it: its intent written, its DELETE made, nothing recorded.
    stack.redis.set(
        keys.intent(ref.uid),
        jsoncodec.dumps_str(
            {
                "uid": ref.uid,
                "at": time.time(),
                "resourceVersion": obj["metadata"]["resourceVersion"],
                "object": {"metadata": {}, "status": obj["status"]},
            }
        ),
    )
    stack.custom.delete_namespaced_custom_object(
        "kubeflow.org", "v1", ns, "tfjobs", "orphaned", body={"propagationPolicy": "Background"}
    )
    stack.book(obj, TFJOB)
    wait_for(lambda: "deleted" in events(stack, ns, "orphaned"), timeout=20, what="the deletion to be recorded")
    assert "cancelled" not in events(stack, ns, "orphaned")
    assert stack.redis.exists(keys.tombstone(ns, "orphaned", ref.uid)), "its tombstone is kept too"
    assert stack.redis.zscore(keys.PENDING_INDEX, ref.uid) is None


def test_a_job_jobttl_deleted_is_never_booked_again_by_a_late_event(stack):
    ns = f"late-{uuid.uuid4().hex[:6]}"
    obj = finished(stack, ns, "gone", ttl=0, at=time.time() - 60)
    stack.book(obj, TFJOB)
    wait_for(lambda: "deleted" in events(stack, ns, "gone"), timeout=20, what="the deletion")
    again = stack.book(obj, TFJOB)  # the event from before the deletion, delivered late
    assert again.label == "ignored:already-deleted"
    assert events(stack, ns, "gone")[-1] == "deleted", "the history still ends in 'deleted'"
    assert stack.jobttl("show", f"{ns}/gone")["decisions"][0]["event"] == "deleted"


def test_refused_deletions_keep_their_record_for_the_sweep(stack):
    """A deletion refused (here: its kind disabled in this worker's policy) stays pending, with its record."""
    ns = f"refused-{uuid.uuid4().hex[:6]}"
    obj = finished(stack, ns, "stays", ttl=4, at=time.time())
    ref = JobRef.of(obj)
    outcome = stack.book(obj, TFJOB)
    job = stack.reconciler.schedule.queue.fetch_job(job_id_for(ref.uid, outcome.due))
    job.meta["ref"][1] = "NoSuchKind"  # a kind this worker does not enable
    job.save_meta()
    wait_for(lambda: "refused" in events(stack, ns, "stays"), timeout=20, what="the refusal")
    assert stack.redis.zscore(keys.PENDING_INDEX, ref.uid) is not None
    assert stack.redis.ttl(f"rq:job:{job.id}") == -1, "kept for the sweep, however long it takes"
    assert stack.deletes(ns) == []


def test_a_pods_stage_the_policy_no_longer_has_is_cancelled_not_run(stack):
    """Booked under a policy with a podTTL, run by a worker whose policy has none (a rolled-back
    change): its pods are left alone and the stage is cancelled, not left pending for good."""
    ns = f"podttl-{uuid.uuid4().hex[:6]}"
    obj = finished(stack, ns, "staged", ttl=3600, at=time.time() - 60)
    ref = JobRef.of(obj)
    pods = [
        seed_object(
            stack.emulator.store,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"staged-worker-{i}",
                    "namespace": ns,
                    "labels": {TFJOB.pod_label: "staged"},
                    "ownerReferences": [
                        {
                            "apiVersion": "kubeflow.org/v1",
                            "kind": "TFJob",
                            "name": "staged",
                            "uid": ref.uid,
                            "controller": True,
                        }
                    ],
                },
                "spec": {"containers": [{"name": "tensorflow", "image": "kubeflow/tf-mnist"}]},
            },
        )
        for i in range(2)
    ]
    stack.book(obj, TFJOB, policy=parse_policy({"podTTL": "1s"}))
    # Due at once: the worker may cancel it before this test looks, so the history says it was booked.
    wait_for(
        lambda: any(e["event"] == "cancelled" for e in stack.history(ns, "staged")),
        timeout=20,
        what="the worker to cancel the stage",
    )
    history = stack.history(ns, "staged")
    assert ("scheduled", "pods") in [(e["event"], e.get("stage")) for e in history], history
    assert stack.redis.zscore(keys.PENDING_INDEX, member_for(ref.uid, PODS_STAGE)) is None
    cancelled = [e for e in history if e["event"] == "cancelled"]
    assert [(e.get("stage"), e.get("reason")) for e in cancelled] == [("pods", "stage-not-in-policy")]
    assert stack.redis.zscore(keys.PENDING_INDEX, ref.uid) is not None, "the job's own deletion stays"
    assert stack.deletes(ns) == []
    left = stack.core.list_namespaced_pod(ns).items
    assert sorted((p.metadata.name, p.metadata.uid) for p in left) == sorted(
        (p["metadata"]["name"], p["metadata"]["uid"]) for p in pods
    ), "its pods are left alone"
