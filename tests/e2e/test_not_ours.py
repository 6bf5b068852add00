"""Owned, suspended and managedBy jobs survive a policy with a default TTL, end to end.

Under `ttl: 1h`, every job here finished two hours ago and sets no TTL of its own (or, for
the Kubeflow ones, a TTL of 0): each would be overdue, were it jobttl's. A batch Job owned
by a CronJob, one owned by a JobSet (Trainer's initializer Jobs are such), a suspended TFJob,
and jobs whose managedBy names MultiKueue are their own controllers' to keep. The worker is
also handed a deletion for each of them, as a stale or forged event would book it (decided
under a policy that opts in, or from before the suspension), and must refuse on its own fresh read. A canary in the same
run, due after all of them, IS deleted: so nothing was deleted only because nothing ran.
"""

from __future__ import annotations

import copy
import time

import pytest

from jobttl.core.domain.decisions.decision import Verdict, decide
from jobttl.core.domain.kinds.registry import BATCH_JOB, TFJOB
from jobttl.core.domain.rules.policy import parse_policy
from tests.e2e.conftest import OwnStack
from tests.fixtures import job_object
from tests.services import wait_for

NAMESPACE = "team"
POLICY = "ttl: 1h\n"
# What a stale or forged event would have the sink book: everything opted in.
EVERYTHING = parse_policy({"ttl": "1h", "owned": "delete", "managedBy": "delete"})
FINISHED = time.time() - 2 * 3600


def owner(kind: str, name: str, api_version: str) -> list[dict]:
    return [
        {
            "apiVersion": api_version,
            "kind": kind,
            "name": name,
            "uid": "7a4a8b7e-2f0e-4a8e-9d43-0c1c1e7c5b21",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def batch_job(name: str, at: float = FINISHED, **spec) -> dict:
    obj = job_object(BATCH_JOB, name, NAMESPACE, at=at)
    obj["spec"].update(spec)
    return obj


def tfjob(name: str, **run_policy) -> dict:
    obj = job_object(TFJOB, name, NAMESPACE, at=FINISHED, ttl=0)
    obj["spec"]["runPolicy"].update(run_policy)
    return obj


def not_ours() -> dict[str, tuple[dict, Verdict]]:
    cron = batch_job("nightly-28391")
    cron["metadata"]["ownerReferences"] = owner("CronJob", "nightly", "batch/v1")
    initializer = batch_job("llm-finetune-dataset-initializer-0")
    initializer["metadata"]["ownerReferences"] = owner("JobSet", "llm-finetune", "jobset.x-k8s.io/v1alpha2")
    return {
        "nightly-28391": (cron, Verdict.OWNED),
        "llm-finetune-dataset-initializer-0": (initializer, Verdict.OWNED),
        "suspended": (tfjob("suspended", suspend=True), Verdict.SUSPENDED),
        "multikueue": (tfjob("multikueue", managedBy="kueue.x-k8s.io/multikueue"), Verdict.MANAGED_ELSEWHERE),
        "kueue-job": (batch_job("kueue-job", managedBy="kueue.x-k8s.io/multikueue"), Verdict.MANAGED_ELSEWHERE),
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = OwnStack(tmp_path_factory.mktemp("not-ours"), "not-ours", POLICY)
    yield stack
    stack.stop()


def kind_of(obj: dict):
    return BATCH_JOB if obj["kind"] == "Job" else TFJOB


def stale(obj: dict) -> dict:
    """The object as an old event may still show it: from before it was suspended."""
    old = copy.deepcopy(obj)
    old["spec"].get("runPolicy", {}).pop("suspend", None)
    return old


def test_owned_suspended_and_managed_by_jobs_survive_while_a_canary_is_deleted(stack):
    jobs = {name: (stack.seed(obj), verdict) for name, (obj, verdict) in not_ours().items()}
    # Due a few seconds after every forced deletion below (those are long overdue).
    canary = stack.seed(batch_job("canary", at=time.time() - 3600 + 3))

    # The sink's path: each event about them decides "not ours"; the canary is scheduled.
    for name, (obj, verdict) in jobs.items():
        outcome = stack.book(obj, kind_of(obj))
        assert (outcome.due, outcome.reason) == (None, verdict.value), name
    assert stack.book(canary, BATCH_JOB).due is not None

    # The worker's path: deletions booked anyway (as a stale event would), all due at once.
    for name, (obj, _) in jobs.items():
        assert decide(stale(obj), kind_of(obj), EVERYTHING).verdict is Verdict.EXPIRES
        assert stack.book(stale(obj), kind_of(obj), EVERYTHING).due < time.time(), name

    wait_for(
        lambda: any(d["path"].endswith("/jobs/canary") for d in stack.deletes(NAMESPACE)),
        timeout=30,
        what="the worker to delete the canary",
    )
    assert [d["path"].rsplit("/", 1)[1] for d in stack.deletes(NAMESPACE)] == ["canary"]
    for name, (obj, verdict) in jobs.items():
        assert (
            stack.emulator.store.get(
                stack.emulator.store.resource_for(obj["apiVersion"], obj["kind"]), NAMESPACE, name
            )["metadata"]["uid"]
            == obj["metadata"]["uid"]
        ), name
        events = [e["event"] for e in stack.history(NAMESPACE, name)]
        assert events == ["scheduled", "cancelled"], (name, events)
        cancelled = stack.history(NAMESPACE, name)[-1]
        assert (cancelled["by"], cancelled["reason"]) == ("worker", verdict.value), name
    assert stack.jobttl("pending")["items"] == []


def test_jobttl_show_says_whose_a_job_is(stack):
    shown = stack.jobttl("show", f"{NAMESPACE}/nightly-28391")
    [decision] = shown["decisions"]  # the worker's, which cancelled the deletion booked above
    assert (decision["event"], decision["reason"]) == ("cancelled", "owned")
    assert decision["detail"].startswith("owned-by CronJob/nightly")
    assert "owned: owned-by CronJob/nightly" in stack.jobttl("show", f"{NAMESPACE}/nightly-28391", as_json=False)
    suspended = stack.jobttl("show", f"{NAMESPACE}/suspended")["decisions"][0]
    assert (suspended["reason"], "spec.runPolicy.suspend" in suspended["detail"]) == ("suspended", True)
