"""The README's `make run` does what the README says it does, and leaves nothing behind.

The local stack runs as `make run` runs it (`python -m jobttl_emulator.localstack`), as a
process of its own with its output piped (so plain lines, not the live countdown), in a
work folder of the test's own instead of `.run/`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests
import yaml

from tests.services import ROOT, wait_for

DELETION = re.compile(r"^\s+([\d.]+)s  jobttl deleted TFJob kubeflow/(\S+) ")


class LocalStack:
    """`make run` in a process of its own; its output collected as it comes."""

    def __init__(self, workdir: Path, *args: str, env: dict[str, str] | None = None):
        self.workdir = workdir
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jobttl_emulator.localstack", "--workdir", str(workdir), *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    @property
    def env_file(self) -> Path:
        return self.workdir / "env"

    def wait_up(self) -> None:
        wait_for(
            lambda: any(line.startswith("or, without changing your shell") for line in self.lines),
            timeout=60,
            what=f"the local stack to start; it said:\n{self.output}",
        )

    def finish(self, timeout: float = 60) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()  # it failed to stop: the test fails, and leaves nothing running
        self.reader.join(timeout=10)
        return code


# --- what it started, from /proc ---------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def descendants(root: int) -> dict[int, str]:
    """Every live process below `root`, by pid, with its start time (so a reused pid is not it)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        fields = _stat(pid)
        if fields is not None:
            found[pid] = fields[19]
            todo += children.get(pid, [])
    return found


def survivors(processes: dict[int, str]) -> list[str]:
    left = []
    for pid, started in processes.items():
        fields = _stat(pid)
        if fields is not None and fields[19] == started and fields[0] != "Z":
            left.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return left


def redis_dir(processes: dict[int, str]) -> Path:
    """The temporary folder the stack made for its redis-server (its --dir, and so its working folder)."""
    for pid in processes:
        if Path(f"/proc/{pid}/comm").read_text().strip() == "redis-server":
            return Path(os.readlink(f"/proc/{pid}/cwd"))
    raise AssertionError("no redis-server among the stack's processes")


def started_by(stack: LocalStack) -> tuple[dict[int, str], Path]:
    processes = wait_for(
        lambda: (found := descendants(stack.process.pid)) and len(found) >= 6 and found, what="the stack's processes"
    )
    return processes, redis_dir(processes)


# --- the tests ---------------------------------------------------------------------------------------


def a_fresh_shell() -> dict[str, str]:
    """A user's other terminal: no venv on PATH, and JOBTTL_REDIS_URL pointing at some other Redis."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "JOBTTL_REDIS_URL": "redis://127.0.0.1:1/0",
    }


@pytest.fixture
def local_stack(tmp_path):
    """Start `make run`; whatever happens in the test, it is stopped afterwards."""
    started = []

    def start(*args: str, env: dict[str, str] | None = None) -> LocalStack:
        started.append(LocalStack(tmp_path / "run", *args, env=env))
        return started[-1]

    yield start
    stop_all(started)


def stop_all(stacks: list[LocalStack]) -> None:
    for stack in stacks:
        if stack.process.poll() is None:
            stack.process.terminate()
            stack.finish(timeout=30)


@pytest.fixture(scope="module")
def waiting_stacks(tmp_path_factory):
    """`make run --all-kinds` and `make run` in dry run, started together by the first test that
    asks: each waits 15-20 s for its examples to come due, and those waits overlap each other's
    (and the stop-signal tests, which run between the two tests, run during the dry run's)."""
    folder = tmp_path_factory.mktemp("quickstart")
    policy = folder / "dry-run.yaml"
    policy.write_text("dryRun: true\n")
    stacks = {
        "all-kinds": LocalStack(folder / "all-kinds", "--all-kinds", "--exit-when-done", "--timeout", "60"),
        "dry-run": LocalStack(folder / "dry-run", env={"JOBTTL_POLICY": str(policy)}),
    }
    yield stacks
    stop_all(list(stacks.values()))


def test_the_local_stack_deletes_the_finished_examples_and_keeps_the_others(local_stack):
    stack = local_stack("--exit-when-done", "--timeout", "60")
    stack.wait_up()
    processes, redis_folder = started_by(stack)

    # The console's URL comes first; it serves this machine only, without sign-in, the examples counting down.
    console = re.search(r"^  console (http://127\.0\.0\.1:\d+/) ", stack.output, re.M)
    assert console, stack.output
    page = requests.get(f"{console.group(1)}pending", headers={"Accept": "text/html"}, timeout=10)
    assert page.status_code == 200 and 'class="countdown"' in page.text
    listed = set(re.findall(r'data-job="kubeflow/([^"]+)"', page.text))
    assert listed and listed <= {"mnist-succeeded-ttl-10s", "mnist-failed-ttl-20s"}, page.text
    redis_url = re.search(r"export JOBTTL_REDIS_URL=(\S+)", stack.output).group(1)
    assert redis_folder.is_dir()

    # Another terminal sources .run/env: `jobttl` is on its PATH and talks to this stack's Redis.
    sourced = subprocess.run(
        ["sh", "-c", f". {stack.env_file} && command -v jobttl && jobttl status --json"],
        env=a_fresh_shell(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert sourced.returncode == 0, sourced.stderr
    where, _, status = sourced.stdout.partition("\n")
    assert Path(where) == stack.workdir / "bin" / "jobttl"
    assert len(json.loads(status)["workers"]) == 1, "this stack's worker, in this stack's Redis"
    wrapped = subprocess.run(
        [str(stack.workdir / "bin" / "jobttl"), "pending", "--json"],
        env=a_fresh_shell(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert wrapped.returncode == 0, wrapped.stderr
    assert {p["name"] for p in json.loads(wrapped.stdout)["items"]} <= {
        "mnist-succeeded-ttl-10s",
        "mnist-failed-ttl-20s",
    }
    assert f"JOBTTL_REDIS_URL={redis_url}" in stack.env_file.read_text().replace("'", "")

    # Someone deletes a job by hand: it disappears, but it is not jobttl's deletion.
    kubeconfig = yaml.safe_load(Path(re.search(r"export KUBECONFIG=(\S+)", stack.output).group(1)).read_text())
    server = kubeconfig["clusters"][0]["cluster"]["server"]
    requests.delete(
        f"{server}/apis/kubeflow.org/v1/namespaces/kubeflow/tfjobs/mnist-running", timeout=5
    ).raise_for_status()

    assert stack.finish(timeout=90) == 0, stack.output
    deleted = {m.group(2): float(m.group(1)) for line in stack.lines if (m := DELETION.match(line))}
    assert set(deleted) == {"mnist-succeeded-ttl-10s", "mnist-failed-ttl-20s"}, stack.output
    assert 8.5 <= deleted["mnist-succeeded-ttl-10s"] <= 14, stack.output
    assert 18.5 <= deleted["mnist-failed-ttl-20s"] <= 24, stack.output
    assert "mnist-running" not in "\n".join(line for line in stack.lines if "deleted" in line)
    assert "kept: mnist-no-ttl\n" in stack.output + "\n", stack.output
    summary = stack.output.split("Summary after", 1)[1]
    assert "jobttl deleted 2:" in summary and "still pending: nothing" in summary

    assert survivors(processes) == []
    assert not redis_folder.exists() and not stack.env_file.exists()


ANY_DELETION = re.compile(r"^\s+([\d.]+)s  jobttl deleted (\S+) (\S+)/(\S+) ")


def test_make_run_all_kinds_deletes_a_finished_object_of_each_kind_built_in_since(waiting_stacks):
    """`make run RUN_ARGS=--all-kinds`: one RayJob, JobSet, Volcano Job, SparkApplication,
    PipelineRun and TaskRun, each deleted through sink, worker and the deletion's follow-up."""
    stack = waiting_stacks["all-kinds"]
    stack.wait_up()
    assert stack.finish(timeout=90) == 0, stack.output
    deleted = {(m.group(2), m.group(4)): float(m.group(1)) for line in stack.lines if (m := ANY_DELETION.match(line))}
    assert {
        ("RayJob", "rayjob-sample-ttl-15s"),
        ("JobSet", "jobset-ttl-15s"),
        ("Job", "volcano-job-ttl-15s"),
        ("SparkApplication", "spark-pi-ttl-15s"),
        ("PipelineRun", "pipelinerun-failed-ttl-15s"),
        ("TaskRun", "taskrun-ttl-15s"),
    } <= set(deleted), stack.output
    assert all(13.5 <= after <= 21 for (kind, _), after in deleted.items() if kind != "TFJob"), stack.output


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_stops_every_process_and_removes_its_files(local_stack, stop):
    stack = local_stack()
    stack.wait_up()
    processes, redis_folder = started_by(stack)
    assert {"redis-server", "jobttl_emulator", "sink", "worker", "watch"} <= {
        word for cmd in survivors(processes) for word in re.split(r"[ /]", cmd)
    }
    stack.process.send_signal(stop)
    assert stack.finish(timeout=30) == 0, stack.output
    assert survivors(processes) == [], stack.output
    assert not redis_folder.exists() and not stack.env_file.exists()
    assert f"stopping ({stop.name})" in stack.output and "still pending:" in stack.output


def test_in_dry_run_the_local_stack_says_what_dry_run_would_delete_and_deletes_nothing(waiting_stacks):
    """`JOBTTL_POLICY=dry-run.yaml make run`: the finished examples come due and stay; the live view
    and the summary say what dry run would delete, never that it is due or overdue."""
    stack = waiting_stacks["dry-run"]
    stack.wait_up()
    expected = ("mnist-succeeded-ttl-10s", "mnist-failed-ttl-20s")
    wait_for(
        lambda: any(
            all(f"kubeflow/{name} dry run: would delete" in line for name in expected)
            for line in stack.lines
            if line.startswith("  pending:")
        ),
        timeout=60,
        what=f"both examples to be dry run's would-deletes; it said:\n{stack.output}",
    )
    stack.process.send_signal(signal.SIGTERM)
    assert stack.finish(timeout=30) == 0, stack.output
    summary = stack.output.split("Summary after", 1)[1]
    assert "jobttl deleted nothing" in summary and "dry run: would delete 2:" in summary, summary
    assert all(f"(due, kept: dry run)  TFJob kubeflow/{name}" in summary for name in expected), summary
    assert "due now" not in summary and "still pending: nothing" in summary, summary
    assert not any(DELETION.match(line) for line in stack.lines), stack.output
