"""Operators take back a cancel or a postpone, and cancel a job that has nothing pending yet.

A module's own stack (emulator, Redis, worker process): an undo asks the workers for a resync,
which decides from the object and the policy again, and a resync here sees only these jobs.
The CLI runs as its own process, as an operator runs it.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import OwnStack
from tests.fixtures import job_object, rfc3339
from tests.operate.test_cli import EPOCH, JOB_ID
from tests.services import ROOT, wait_for
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.store.schedule import Change

NS = "undo"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = OwnStack(tmp_path_factory.mktemp("undo"), "undo")
    yield stack
    stack.stop()


def run(stack: OwnStack, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobttl", *args],
        env=stack.worker.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def booked(stack: OwnStack, name: str, ttl: int, finished_at: float) -> dict:
    obj = stack.seed(job_object(TFJOB, name, NS, at=finished_at, ttl=ttl))
    assert stack.book(obj, TFJOB).change is Change.SCHEDULED
    return obj


def due_of(stack: OwnStack, obj: dict) -> int | None:
    return stack.reconciler.schedule.due_of(obj["metadata"]["uid"])


def events(stack: OwnStack, name: str) -> list[tuple[str, str]]:
    return [(e["event"], e.get("by", "")) for e in stack.history(NS, name)]


def test_undoing_a_cancel_books_the_deletion_again_at_finish_plus_ttl(stack):
    finished = int(time.time()) - 60
    obj = booked(stack, "cancelled", 3600, finished)
    assert run(stack, "cancel", f"{NS}/cancelled").returncode == 0
    assert due_of(stack, obj) is None

    done = run(stack, "cancel", "--undo", f"{NS}/cancelled")
    assert done.returncode == 0, done.stderr
    assert "took back the cancel" in done.stdout and "resync" in done.stdout, done.stdout
    # Nothing in the CLI books it: the worker's resync reads the object and decides from it.
    wait_for(lambda: due_of(stack, obj) == finished + 3600, timeout=30, what="the resync to book it again")
    assert events(stack, "cancelled")[-3:] == [
        ("cancelled", "operator"),
        ("cancel-undone", "operator"),
        ("scheduled", "resync"),
    ]
    assert stack.reconciler.schedule.override(obj["metadata"]["uid"]) == {}, "the keep is gone, not just hidden"
    again = run(stack, "cancel", "--undo", f"{NS}/cancelled")
    assert again.returncode == 1 and "no cancel of" in again.stderr, "nothing left to undo"


def test_undoing_a_postpone_moves_the_deletion_back_to_finish_plus_ttl(stack):
    finished = int(time.time()) - 60
    obj = booked(stack, "postponed", 3600, finished)
    assert run(stack, "postpone", f"{NS}/postponed", "2h").returncode == 0
    assert due_of(stack, obj) == finished + 3600 + 7200

    shown = run(stack, "show", f"{NS}/postponed")
    until = rfc3339(finished + 3600 + 7200)
    assert "postponed by operator" in shown.stdout and f"not deleted before {until}" in shown.stdout, shown.stdout
    [said] = [o for o in run_json(stack, "show", f"{NS}/postponed")["overrides"]]
    assert (said["keep"], said["until"], said["by"]) == (False, finished + 3600 + 7200, "operator")

    done = run(stack, "postpone", "--undo", f"{NS}/postponed")
    assert done.returncode == 0, done.stderr
    assert f"still pending: due {until}" in done.stdout, done.stdout
    wait_for(lambda: due_of(stack, obj) == finished + 3600, timeout=30, what="the resync to move it back")
    assert ("postpone-undone", "operator") in events(stack, "postponed")
    history = run(stack, "history", f"{NS}/postponed").stdout
    assert "postpone-undone" in history and f"until={until}" in history, history
    assert not EPOCH.search(JOB_ID.sub("<job id>", history)), history
    assert run_json(stack, "show", f"{NS}/postponed")["overrides"] == []


def test_a_cancel_with_nothing_pending_keeps_the_job_once_it_finishes(stack):
    started = time.time() - 600
    obj = stack.seed(job_object(TFJOB, "running", NS, state="running", at=started, ttl=60))
    assert stack.book(obj, TFJOB).change is Change.IGNORED  # not finished: nothing to book

    done = run(stack, "cancel", f"{NS}/running")
    assert done.returncode == 0, done.stderr
    assert "nothing was pending" in done.stdout and "recorded the keep anyway" in done.stdout, done.stdout
    assert f"kubectl annotate tfjob -n {NS} running jobttl.io/keep=true" in done.stdout, "the alternative, named"
    assert "kept (jobttl cancel) by operator" in run(stack, "show", f"{NS}/running").stdout
    again = run(stack, "cancel", f"{NS}/running")
    assert again.returncode == 1 and "already kept" in again.stderr

    # The job finishes, long past its TTL (the event the sink gets): the keep stands where a
    # deletion would be booked.
    finished = {**obj, "status": job_object(TFJOB, "running", NS, at=time.time() - 3600, ttl=60)["status"]}
    assert stack.book(finished, TFJOB).change is Change.KEPT
    assert due_of(stack, obj) is None
    assert stack.deletes(NS) == []


# What the stack's worker writes on its own at each maintenance (a lock that lives 5 s, its clock
# readings): present or not whatever the command under test does.
WORKER_MAINTENANCE = {b"jobttl:sweep:lock", b"jobttl:clocks"}


def test_cancel_of_a_job_jobttl_never_saw_names_the_annotation_and_writes_nothing(stack):
    def jobttl_keys() -> list[bytes]:
        return sorted(set(stack.redis.keys("jobttl:*")) - WORKER_MAINTENANCE)

    before = jobttl_keys()
    done = run(stack, "cancel", f"{NS}/never-seen")
    assert done.returncode == 1 and done.stdout == ""
    assert "no pending deletion" in done.stderr and "jobttl.io/keep=true" in done.stderr, done.stderr
    assert jobttl_keys() == before


def run_json(stack: OwnStack, *args: str) -> dict:
    import json

    done = run(stack, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
