"""Two kinds of one name are two kinds: batch/v1 Job and Volcano's batch.volcano.sh Job, both `Job`.

A real worker deletes (and, by a rule's dry run, would delete) both against the emulator serving
both resources; its /metrics keep them apart by the `group` label beside `kind`, and the
operator's commands name Volcano's as `Job.batch.volcano.sh` (a bare `Job` is batch/v1's, as in
the policy's `kinds`).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml

from jobttl_emulator import EVENT, JOB, seed_object
from jobttl_emulator.resources import NEW_KINDS
from jobttl.core.domain.kinds.registry import BATCH_JOB, KindRegistry
from jobttl.core.domain.rules.policy import parse_policy
from tests.fixtures import job_object, volcano_job
from tests.services import ROOT, start_emulator, wait_for
from tests.worker.stacks import Stack

VOLCANO = next(r for r in NEW_KINDS if r.group == "batch.volcano.sh")
POLICY = """\
kinds: [Job, batch.volcano.sh/v1alpha1/Job]
ttl: 1m
rules:
  - name: rehearsal
    selector: {matchLabels: {rehearsal: "true"}}
    dryRun: true
"""
HOUR = 3600


@pytest.fixture
def stack(tmp_path):
    emulator = start_emulator(tmp_path, (JOB, VOLCANO, EVENT), gc_delay=0.1)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    stack = Stack("kinds", emulator, tmp_path, JOBTTL_POLICY=str(policy))
    yield stack
    stack.stop()
    emulator.stop()


def seed(stack: Stack, obj: dict, rehearsal: bool = False) -> dict:
    """Finished an hour ago, a minute's TTL: due; booked as the sink books it."""
    if rehearsal:
        obj["metadata"]["labels"] = {"rehearsal": "true"}
    obj = seed_object(stack.emulator.store, obj)
    kinds = KindRegistry(parse_policy(yaml.safe_load(POLICY)).kinds)
    stack.reconciler.reconcile(obj, kinds.get(obj["apiVersion"], obj["kind"]), "test")
    return obj


def test_batch_and_volcano_jobs_are_counted_apart_and_named_apart(stack):
    ns, ago = stack.namespace, time.time() - HOUR
    seed(stack, job_object(BATCH_JOB, "batch", ns, at=ago))
    seed(stack, volcano_job("volcano", ns, at=ago))
    seed(stack, job_object(BATCH_JOB, "batch-rehearsal", ns, at=ago), rehearsal=True)
    for i in range(2):
        seed(stack, volcano_job(f"volcano-rehearsal-{i}", ns, at=ago), rehearsal=True)
    worker = stack.worker("w")

    def deleted() -> set[str]:
        return {r["path"] for r in stack.emulator.requests("DELETE", f"/namespaces/{ns}/") if r["status"] == 200}

    wait_for(
        lambda: (
            deleted()
            == {
                f"/apis/batch/v1/namespaces/{ns}/jobs/batch",
                f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/volcano",
            }
        ),
        timeout=30,
        what="both real deletions, each of its own resource",
    )
    wait_for(
        lambda: (
            stack.metrics(worker).get(("jobttl_would_delete_total", (("group", "batch.volcano.sh"), ("kind", "Job"))))
            == 2
        ),
        timeout=30,
        what="the worker to record Volcano's 2 would-deletes",
    )
    # Deleted when the object is gone (Foreground: the DELETE only asks for it).
    wait_for(
        lambda: sum(v for (name, _), v in stack.metrics(worker).items() if name == "jobttl_deletions_total") == 2,
        timeout=30,
        what="both deletions to be recorded",
    )
    metrics = stack.metrics(worker)
    assert {labels: value for (name, labels), value in metrics.items() if name == "jobttl_deletions_total"} == {
        (("group", "batch"), ("kind", "Job"), ("namespace", ns)): 1,
        (("group", "batch.volcano.sh"), ("kind", "Job"), ("namespace", ns)): 1,
    }
    assert {labels: value for (name, labels), value in metrics.items() if name == "jobttl_would_delete_total"} == {
        (("group", "batch"), ("kind", "Job")): 1,
        (("group", "batch.volcano.sh"), ("kind", "Job")): 2,
    }
    assert {labels: value for (name, labels), value in metrics.items() if name == "jobttl_dry_run_would_delete"} == {
        (("group", "batch"), ("kind", "Job")): 1,
        (("group", "batch.volcano.sh"), ("kind", "Job")): 2,
    }

    def jobttl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "jobttl", *args],
            env={**stack.env, "PATH": "/usr/bin:/bin"},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    table = jobttl("pending").stdout
    assert f"Job.batch.volcano.sh {ns}/volcano-rehearsal-0" in table and f"Job {ns}/batch-rehearsal" in table
    assert "3 of 3 pending deletions; dry run: would delete 3" in table
    assert "1 of 1" in jobttl("pending", "--kind", "Job").stdout
    assert "2 of 2" in jobttl("pending", "--kind", "Job.batch.volcano.sh").stdout
