"""A job whose fields its declaration cannot read (issue 26 §9), met by the worker's re-read and by the
resync's reconcile: kept, the field named, never a traceback or a DELETE. Real Redis, the emulator over
HTTP, the worker's own context in this process (tests.worker.bench)."""

from __future__ import annotations

import time

import pytest

from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.domain.decisions.plan import JOB_STAGE
from tests.worker.bench import Bench, kube  # noqa: F401  (kube: the module's emulator)

FIELD = "status.conditions[2].type: expected a string, got an object"


@pytest.fixture
def bench(kube, redis_server, tmp_path, queue_name):
    return Bench(kube, redis_server, tmp_path, "ttl: 0s\n", queue_name)


def break_condition(obj: dict) -> None:
    """What a forged write, or a CRD that keeps anything, can leave: the finishing condition's type an object."""
    obj["status"]["conditions"][-1]["type"] = {"Succeeded": True}


def test_a_due_deletion_whose_job_became_unreadable_is_cancelled_naming_the_field_not_run(bench):
    obj = bench.job("odd", time.time() - 60)
    bench.book(obj)
    target = bench.target(obj, JOB_STAGE)
    bench.update("odd", break_condition, status=True)
    outcome = bench.run(target)
    assert bench.job_deletes() == [], outcome
    assert bench.pending(obj, JOB_STAGE) is None
    cancelled = bench.history("odd")[-1]
    assert (cancelled["event"], cancelled["reason"]) == ("cancelled", "unreadable"), cancelled
    assert (
        cancelled["detail"].startswith(FIELD)
        and "jobttl keeps this TFJob until the field is fixed" in cancelled["detail"]
    )


def test_the_resyncs_reconcile_keeps_an_unreadable_job_and_says_why_on_its_card(bench):
    obj = bench.job("odd", time.time() - 60)
    broken = bench.update("odd", break_condition, status=True)
    outcomes, rejected = bench.ctx.reconciler.reconcile_many([(broken, TFJOB)], "resync")
    assert rejected == [] and [o.label for o in outcomes] == ["ignored:unreadable"]
    assert bench.pending(obj, JOB_STAGE) is None
    card = bench.ctx.audit.decisions(bench.namespace, "odd")[obj["metadata"]["uid"]]
    assert card["reason"] == "unreadable" and card["detail"].startswith(FIELD), card
