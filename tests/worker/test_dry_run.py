"""Dry run as an operator sees it: a real worker (in dry run, globally or by a rule) against the
emulator and a Redis of its own, its /metrics, and `jobttl status` / `jobttl pending` run as
commands. Nothing it decides is due or overdue: it is what dry run would delete.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from jobttl_emulator import seed_object
from jobttl.core.domain.kinds.registry import TFJOB
from tests.fixtures import job_object
from tests.services import ROOT, wait_for
from tests.worker.stacks import Stack

HOUR = 3600


@pytest.fixture
def stacks(emulator, tmp_path):
    """Stacks of a test's own, each with its policy file; stopped whatever happens."""
    started = []

    def stack(name: str, policy: str) -> Stack:
        path = tmp_path / f"{name}-policy.yaml"
        path.write_text(policy)
        started.append(Stack(name, emulator, tmp_path, JOBTTL_POLICY=str(path)))
        return started[-1]

    yield stack
    for s in started:
        s.stop()


def seed(stack: Stack, name: str, rehearsal: bool = False, ago: float = HOUR, ttl: int = 60) -> dict:
    """A TFJob that finished `ago` seconds ago, booked as the sink books it (due ago - ttl seconds ago)."""
    obj = job_object(TFJOB, name, stack.namespace, at=time.time() - ago, ttl=ttl)
    if rehearsal:
        obj["metadata"]["labels"] = {"rehearsal": "true"}
    obj = seed_object(stack.emulator.store, obj)
    stack.reconciler.reconcile(obj, TFJOB, "test")
    return obj


def jobttl(stack: Stack, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "jobttl", *args],
        env={**stack.env, "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def would_deletes(stack: Stack) -> int:
    return sum(1 for batch in stack.schedule.scan() for p in batch if p.would_delete_at is not None)


def test_a_worker_in_dry_run_reports_what_it_would_delete_by_kind_and_nothing_overdue(stacks):
    stack = stacks("dry", "dryRun: true\n")
    for i in range(3):
        seed(stack, f"old-{i}")  # due 59 minutes ago
    seed(stack, "later", ago=60, ttl=HOUR)  # due in 59 minutes
    worker = stack.worker("w")
    wait_for(lambda: would_deletes(stack) == 3, timeout=30, what="the worker to record 3 would-deletes")
    assert stack.deletes() == []  # dry run: not one DELETE reached the API server

    metrics = stack.metrics(worker)
    assert metrics[("jobttl_overdue_deletions", ())] == 0
    assert metrics[("jobttl_dry_run_would_delete", (("group", "kubeflow.org"), ("kind", "TFJob")))] == 3
    assert metrics[("jobttl_would_delete_total", (("group", "kubeflow.org"), ("kind", "TFJob")))] == 3
    assert metrics[("jobttl_pending_deletions", ())] == 4  # the records stay listed
    assert metrics[("jobttl_decisions_total", (("event", "deleted"), ("reason", "")))] == 0

    status = stack.status()
    assert (status["overdue"], status["dueWithinHour"], status["dryRunWouldDelete"]) == (0, 0, 3)
    assert "dry run: would delete 3" in jobttl(stack, "status")

    pending = json.loads(jobttl(stack, "pending", "--json"))
    assert pending["dryRunWouldDelete"] == 3 and pending["total"] == 4
    table = jobttl(stack, "pending")
    rows = [line for line in table.splitlines() if f"TFJob {stack.namespace}/" in line]
    assert len(rows) == 4
    assert sum("dry run: would delete" in row for row in rows) == 3  # the due ones, not the later one
    assert not any("overdue" in row for row in rows)
    assert "4 of 4 pending deletions; dry run: would delete 3" in table


def test_a_rules_dry_run_is_never_overdue_beside_real_deletions(stacks):
    stack = stacks(
        "rule", 'rules:\n- name: rehearsal\n  selector: {matchLabels: {rehearsal: "true"}}\n  dryRun: true\n'
    )
    seed(stack, "rehearsed-0", rehearsal=True)
    seed(stack, "rehearsed-1", rehearsal=True)
    seed(stack, "real")
    # Before any worker runs: the real deletion is overdue, the rehearsals are not.
    status = stack.status()
    assert (status["overdue"], status["dryRunWouldDelete"]) == (1, 2)

    worker = stack.worker("w")
    wait_for(
        lambda: stack.deleted("real") == {"real"} and would_deletes(stack) == 2,
        timeout=30,
        what="the real deletion and the 2 would-deletes",
    )
    wait_for(
        lambda: stack.metrics(worker)[("jobttl_overdue_deletions", ())] == 0,
        timeout=10,
        what="the real deletion to leave the overdue gauge",
    )
    metrics = stack.metrics(worker)
    assert metrics[("jobttl_dry_run_would_delete", (("group", "kubeflow.org"), ("kind", "TFJob")))] == 2
    assert metrics[("jobttl_would_delete_total", (("group", "kubeflow.org"), ("kind", "TFJob")))] == 2
    assert stack.deleted("rehearsed") == set()
    assert "dry run: would delete 2" in jobttl(stack, "status")
