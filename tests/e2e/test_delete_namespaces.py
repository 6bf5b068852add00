"""JOBTTL_DELETE_NAMESPACES (the chart's rbac.namespaces), end to end: jobttl deletes only in the
namespaces its RBAC lets it, and keeps, saying why, every job elsewhere, rather than fail on a 403.

The emulator answers a DELETE in the other namespace with 403, as the API server would under the
chart's Roles. Every job here is overdue under `ttl: 1h`. The worker is handed a deletion of one
elsewhere, as a booking made before the setting (or a forged event) would leave it, and must drop
it on its own decision, sending no DELETE; a resync books nothing elsewhere. A canary in the
allowed namespace, due after the forced deletion, IS deleted: so nothing was kept only because
nothing ran.
"""

from __future__ import annotations

import time

import pytest

from jobttl.core.domain.decisions.decision import Verdict
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.domain.rules.policy import parse_policy
from tests.e2e.conftest import OwnStack
from tests.fixtures import job_object
from tests.services import wait_for

ALLOWED, ELSEWHERE = "allowed", "elsewhere"
POLICY = "ttl: 1h\n"
FINISHED = time.time() - 2 * 3600
REASON = f"namespace {ELSEWHERE!r} is not one jobttl may delete in (JOBTTL_DELETE_NAMESPACES: {ALLOWED})"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = OwnStack(
        tmp_path_factory.mktemp("delete-namespaces"), "delete-namespaces", POLICY, JOBTTL_DELETE_NAMESPACES=ALLOWED
    )
    # What the Roles of rbac.namespaces answer anywhere else.
    stack.emulator.add_fault(verb="delete", status=403, count=1000, path_contains=f"/namespaces/{ELSEWHERE}/")
    yield stack
    stack.stop()


def test_a_deletion_booked_elsewhere_is_kept_by_the_worker_without_a_delete(stack):
    old = stack.seed(job_object(TFJOB, "old", ELSEWHERE, at=FINISHED))
    canary = stack.seed(job_object(TFJOB, "canary", ALLOWED, at=time.time() - 3600 + 3))
    confined = stack.policy.confined_to((ALLOWED,))
    # The sink's path, under the processes' own policy: nothing booked elsewhere.
    outcome = stack.book(old, TFJOB, confined)
    assert (outcome.due, outcome.reason) == (None, Verdict.EXCLUDED.value)
    assert stack.book(canary, TFJOB, confined).due is not None
    # The worker's path: booked anyway, long overdue, as a policy without the setting would.
    assert stack.book(old, TFJOB, parse_policy({"ttl": "1h"})).due < time.time()

    wait_for(lambda: stack.deletes(ALLOWED), timeout=30, what="the worker to delete the canary")
    wait_for(
        lambda: [e["event"] for e in stack.history(ELSEWHERE, "old")] == ["scheduled", "cancelled"],
        timeout=30,
        what=f"the worker to cancel {ELSEWHERE}/old",
    )
    assert stack.deletes(ELSEWHERE) == [], "a DELETE went where the RBAC refuses it"
    cancelled = stack.history(ELSEWHERE, "old")[-1]
    assert (cancelled["by"], cancelled["reason"]) == ("worker", Verdict.EXCLUDED.value)
    [decision] = stack.jobttl("show", f"{ELSEWHERE}/old")["decisions"]
    assert decision["detail"] == REASON
    assert stack.jobttl("failed")["items"] == []  # kept, not failed with a 403


def test_a_resync_books_nothing_elsewhere(stack):
    stack.seed(job_object(TFJOB, "older", ELSEWHERE, at=FINISHED - 3600))
    stack.seed(job_object(TFJOB, "later", ALLOWED, at=time.time()))  # due in an hour: stays pending
    stack.jobttl("resync")
    pending = {(p["namespace"], p["name"]) for p in stack.jobttl("pending")["items"]}
    assert (ALLOWED, "later") in pending and not [p for p in pending if p[0] == ELSEWHERE]
    assert stack.deletes(ELSEWHERE) == []
