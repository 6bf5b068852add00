"""Deletions that never finish: followed until gone, or reported stuck (jobttl.core.services.follow).

With Foreground propagation the API server keeps a deleted job Terminating while a finalizer
holds it: here a finalizer on the job itself, which the emulator keeps until a client removes
it, and the garbage collector's own foregroundDeletion finalizer, which an emulator whose
collector never finishes (dependants that never go, as with a stuck pod) keeps for good. The
worker runs with JOBTTL_STUCK_AFTER=3s; each stack has its own emulator, Redis and worker.
"""

from __future__ import annotations

import time
import uuid

import pytest

from jobttl.core.store import keys
from jobttl.core.domain.kinds.registry import TFJOB
from tests.e2e.conftest import OwnStack
from tests.fixtures import job_object
from tests.services import wait_for

STUCK_AFTER = 3
HOLD = "example.com/hold"


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    stack = OwnStack(tmp_path_factory.mktemp("stuck"), "stuck", JOBTTL_STUCK_AFTER=f"{STUCK_AFTER}s")
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def fallback(tmp_path_factory):
    """A stack whose garbage collector never finishes, and whose policy falls back to Background."""
    stack = OwnStack(
        tmp_path_factory.mktemp("fallback"),
        "fallback",
        "stuckDeletion: {fallback: Background}\n",
        gc_delay=3600,
        JOBTTL_STUCK_AFTER=f"{STUCK_AFTER}s",
    )
    yield stack
    stack.stop()


def finished_tfjob(stack: OwnStack, finalizers: list[str] = ()) -> dict:
    namespace = f"s-{uuid.uuid4().hex[:8]}"
    obj = job_object(TFJOB, "held", namespace, at=time.time() - 60, ttl=0)
    obj["metadata"]["finalizers"] = list(finalizers)
    return stack.seed(obj)


def events_of(stack: OwnStack, namespace: str) -> list[str]:
    return [e["event"] for e in stack.history(namespace, "held")]


def get(stack: OwnStack, namespace: str) -> dict | None:
    from kubernetes.client import ApiException

    try:
        return stack.custom.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "tfjobs", "held")
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def stuck_rows(stack: OwnStack, namespace: str) -> list[dict]:
    return [s for s in stack.jobttl("failed")["stuck"] if s["ref"]["namespace"] == namespace]


def test_a_foreground_deletion_held_by_a_finalizer_is_reported_stuck_then_deleted_once_released(plain):
    obj = finished_tfjob(plain, [HOLD])
    namespace = obj["metadata"]["namespace"]
    assert plain.book(obj, TFJOB).due is not None

    wait_for(lambda: "delete-requested" in events_of(plain, namespace), timeout=15, what="the DELETE")
    [delete] = plain.deletes(namespace)
    assert delete["body"]["propagationPolicy"] == "Foreground"
    requested = delete["time"]
    terminating = get(plain, namespace)
    assert terminating["metadata"]["deletionTimestamp"] and HOLD in terminating["metadata"]["finalizers"]
    assert "deleted" not in events_of(plain, namespace), "deleted means gone, and it is not"

    # Reported stuck, everywhere an operator looks, within the configured time (plus one follow-up).
    wait_for(lambda: "stuck" in events_of(plain, namespace), timeout=STUCK_AFTER + 10, what="the stuck report")
    stuck = next(e for e in plain.history(namespace, "held") if e["event"] == "stuck")
    assert STUCK_AFTER <= float(stuck["at"]) - requested <= STUCK_AFTER + 5, "reported soon after STUCK_AFTER"
    assert HOLD in stuck["finalizers"]
    assert plain.jobttl("status")["stuck"] == 1
    [row] = stuck_rows(plain, namespace)
    assert (row["ref"]["uid"], row["finalizers"]) == (obj["metadata"]["uid"], [HOLD])
    assert plain.metric("jobttl_stuck_deletions") == 1.0
    warning = wait_for(lambda: [e for e in plain.events(namespace) if e.reason == "DeletionStuck"], what="the Event")
    assert warning[0].type == "Warning" and HOLD in warning[0].message
    assert warning[0].involved_object.uid == obj["metadata"]["uid"]
    assert len(plain.deletes(namespace)) == 1, "no fallback unless the policy asks for one"
    assert get(plain, namespace)["metadata"]["finalizers"] == [HOLD], "jobttl never strips finalizers"

    # Whoever owns the finalizer lets go: the job goes, and only now is it "deleted".
    plain.custom.patch_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "tfjobs", "held", {"metadata": {"finalizers": None}}
    )
    wait_for(lambda: get(plain, namespace) is None, what="the job to go")
    wait_for(lambda: "deleted" in events_of(plain, namespace), timeout=90, what="the deleted entry")
    assert events_of(plain, namespace) == ["scheduled", "delete-requested", "stuck", "deleted"]
    deleted = plain.history(namespace, "held")[-1]
    assert deleted["wasStuck"] is True and float(deleted["goneAfter"]) >= STUCK_AFTER
    assert stuck_rows(plain, namespace) == [] and plain.jobttl("status")["stuck"] == 0
    assert plain.metric("jobttl_stuck_deletions") == 0.0


def test_a_deletion_that_goes_at_once_is_deleted_without_being_followed(plain):
    obj = finished_tfjob(plain)
    namespace = obj["metadata"]["namespace"]
    plain.book(obj, TFJOB)
    wait_for(lambda: "deleted" in events_of(plain, namespace), timeout=15, what="the deletion")
    assert get(plain, namespace) is None
    assert events_of(plain, namespace) in (["scheduled", "deleted"], ["scheduled", "delete-requested", "deleted"])
    assert "stuck" not in events_of(plain, namespace)


def test_the_background_fallback_frees_a_deletion_the_garbage_collector_never_finishes(fallback):
    obj = finished_tfjob(fallback)
    namespace = obj["metadata"]["namespace"]
    fallback.book(obj, TFJOB)
    wait_for(lambda: "delete-requested" in events_of(fallback, namespace), timeout=15, what="the DELETE")
    assert get(fallback, namespace)["metadata"]["finalizers"] == ["foregroundDeletion"]

    wait_for(lambda: "deleted" in events_of(fallback, namespace), timeout=STUCK_AFTER + 30, what="the fallback")
    assert get(fallback, namespace) is None
    assert events_of(fallback, namespace) == ["scheduled", "delete-requested", "stuck", "delete-requested", "deleted"]
    retry = fallback.history(namespace, "held")[3]
    assert (retry["propagationPolicy"], retry["reason"]) == ("Background", "stuck-fallback")
    assert [d["body"]["propagationPolicy"] for d in fallback.deletes(namespace)] == ["Foreground", "Background"]
    assert fallback.jobttl("status")["stuck"] == 0


def test_the_fallback_is_tried_once_and_never_strips_a_finalizer(fallback):
    obj = finished_tfjob(fallback, [HOLD])
    namespace = obj["metadata"]["namespace"]
    fallback.book(obj, TFJOB)
    wait_for(lambda: len(fallback.deletes(namespace)) == 2, timeout=STUCK_AFTER + 15, what="the fallback DELETE")
    assert get(fallback, namespace)["metadata"]["finalizers"] == [HOLD], "Background drops only the GC's finalizer"
    assert [row["finalizers"] for row in stuck_rows(fallback, namespace)] == [[HOLD, "foregroundDeletion"]]
    assert fallback.redis.hget(keys.TERMINATING_INFO, obj["metadata"]["uid"]) is not None, "still followed"
    fallback.custom.patch_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "tfjobs", "held", {"metadata": {"finalizers": None}}
    )
    wait_for(lambda: "deleted" in events_of(fallback, namespace), timeout=90, what="the deleted entry")
    assert len(fallback.deletes(namespace)) == 2, "once"
