"""Run the whole jobttl stack on one machine: ``make run`` (or ``python -m jobttl_emulator.localstack``).

Starts its own redis-server, the Kubernetes API emulator seeded with example TFJobs
(``seeds/tfjobs.yaml`` beside this module), the sink, the worker, the watcher that feeds the
sink CloudEvents and the web console (``jobttl console`` on 127.0.0.1, without sign-in: its URL is
printed first), all with their built-in defaults. It writes the environment it started to
``.run/env`` (``. .run/env``, then ``jobttl status`` or ``kubectl get tfjobs -A`` reach this
stack), with ``.run/bin/jobttl`` for use without sourcing anything, and shows what jobttl has
pending with a live countdown, each deletion as jobttl records it, and a summary on exit.

What it reports comes from jobttl itself, never from diffing the cluster: pending deletions from
the sink's read API (``/api/v1/deletions``), deletions from the audit trail (``jobttl history
--event deleted``, read whenever the worker's ``jobttl_deletions_total`` moves), so a job
someone else deletes is not reported as jobttl's. Ctrl-C, SIGTERM or SIGHUP stops every process
it started and removes its temporary files; process logs (JSON) go to ``.run/logs/``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parent / "seeds" / "tfjobs.yaml"
EXPECTED_GONE = {"mnist-succeeded-ttl-10s", "mnist-failed-ttl-20s"}
# The policy `--all-kinds` runs with (unless JOBTTL_POLICY names one): the built-in default, with
# every built-in kind enabled (the first ten, and those the seeds below add).
ALL_KINDS_POLICY = """\
kinds: [TFJob, PyTorchJob, kubeflow.org/v1/MPIJob, kubeflow.org/v2beta1/MPIJob, XGBoostJob, PaddleJob, JAXJob,
        TrainJob, batch/v1/Job, Workflow, RayJob, JobSet, batch.volcano.sh/v1alpha1/Job, SparkApplication,
        PipelineRun, TaskRun]
"""
# `--all-kinds`: one finished object of each kind built in since (KubeRay, JobSet, Volcano, Spark,
# Tekton), each asking a 15 s TTL (seeds/kinds.yaml); the emulator serves all of them regardless.
ALL_KINDS_EXAMPLES = EXAMPLES.with_name("kinds.yaml")
ALL_KINDS_GONE = {
    "rayjob-sample-ttl-15s",
    "jobset-ttl-15s",
    "volcano-job-ttl-15s",
    "spark-pi-ttl-15s",
    "pipelinerun-failed-ttl-15s",
    "taskrun-ttl-15s",
}
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_GRACE = 10.0  # seconds each process gets to stop after SIGTERM, before SIGKILL
QUEUE = "jobttl"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_command(binary: str, port: int, directory: str) -> list[str]:
    """A throwaway redis-server on loopback that keeps nothing on disk."""
    return [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", directory]


def _until(check: Callable[[], Any], timeout: float, what: str, process: subprocess.Popen | None = None) -> None:
    """Poll `check` until it holds; fail at once if `process` (what is awaited) has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode} before it came up; see .run/logs/")
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up within {timeout}s; see .run/logs/")


class Stopped(Exception):
    """A stop signal arrived: unwind, so that `finally` stops everything that was started."""


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise Stopped (once), so the stack always stops cleanly.

    Without this, SIGTERM (`kill`, `timeout`) or SIGHUP (a closed terminal) ends this process
    at once and leaves every child running: they are in sessions of their own, so that a
    Ctrl-C reaches them only through the orderly stop below.
    """

    def stop(signum, frame):
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)  # the stop under way is not interrupted by a second one
        raise Stopped(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _group_members(groups: set[int]) -> list[int]:
    """Live processes in these process groups (Linux /proc); a live member keeps its group id ours."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] != "Z" and int(fields[2]) in groups:
            members.append(int(stat.parent.name))
    return members


class Stack:
    """The processes of the local stack, each in a process group of its own, and its files."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.processes: list[subprocess.Popen] = []
        self.temporary: list[Path] = []

    def temp_dir(self, prefix: str) -> str:
        path = tempfile.mkdtemp(prefix=prefix)
        self.temporary.append(Path(path))
        return path

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        with open(self.logs / f"{name}.log", "wb") as log:
            process = subprocess.Popen(
                argv,
                env={**os.environ, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    def jobttl(self, name: str, *args: str, env: dict[str, str]) -> subprocess.Popen:
        return self.spawn(name, [sys.executable, "-m", "jobttl", *args], env)

    def stop(self) -> None:
        """Each process in turn, last started first: jobttl's before the Redis and the API they use
        (a worker whose Redis is gone cannot finish its warm shutdown). Then the files."""
        for process in reversed(self.processes):
            stop_process_group(process)
        for path in self.temporary:
            shutil.rmtree(path, ignore_errors=True)


def stop_process_group(process: subprocess.Popen, grace: float = STOP_GRACE) -> None:
    """SIGTERM to the process's group (it was started in a session of its own); SIGKILL to
    what is left of it after `grace` seconds."""
    deadline = time.monotonic() + grace
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    # A group can outlive its leader (RQ's scheduler is a child of the worker).
    while (left := _group_members({process.pid})) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- the environment it started, for the user's other shells ----------------------------------------

WRAPPER = """#!/bin/sh
# jobttl against the stack `make run` started in this checkout (written by it).
env_file="$(dirname "$0")/../env"
if [ ! -f "$env_file" ]; then
  echo "jobttl: make run is not running here ($env_file is missing)" >&2
  exit 1
fi
. "$env_file"
exec {python} -m jobttl "$@"
"""


def write_environment(workdir: Path, env: dict[str, str]) -> Path:
    """`.run/env` (sourceable) and `.run/bin/jobttl` (a wrapper that sources it)."""
    bin_dir = workdir / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "jobttl"
    wrapper.write_text(WRAPPER.format(python=shlex.quote(sys.executable)))
    wrapper.chmod(0o755)
    path = workdir / "env"
    lines = [f"# The environment of `make run` (pid {os.getpid()}): `. {_shown(path)}`, then `jobttl status`."]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    # Names this file: after a restart of `make run`, `jobttl` tells a shell that sourced it to again.
    lines.append(f"export JOBTTL_RUN_ENV={shlex.quote(str(path.resolve()))}")
    # The venv's bin (for jobttl and jobttl-emulator) after the wrapper's folder.
    lines.append(f'export PATH={shlex.quote(f"{bin_dir.resolve()}:{Path(sys.executable).parent}")}:"$PATH"')
    path.write_text("\n".join(lines) + "\n")
    return path


def _running_elsewhere(workdir: Path) -> int | None:
    """The pid of another live `make run` that owns this .run/, if any."""
    try:
        first = (workdir / "env").read_text().splitlines()[0]
        pid = int(first.split("(pid ", 1)[1].split(")", 1)[0])
        os.kill(pid, 0)
    except (OSError, IndexError, ValueError):
        return None
    return pid if pid != os.getpid() else None


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the current folder where it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# --- what jobttl says ---------------------------------------------------------------------------


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def countdown(seconds: float) -> str:
    # jobttl's one duration format (`in 1h59m`, `in 1m30s`): make run runs jobttl, so it is installed.
    from jobttl.core.domain.wire.durations import format_duration

    if seconds <= 0:
        return "due now"
    return f"in {format_duration(int(seconds + 0.999))}"


def _object(item: dict[str, Any]) -> str:
    return f"{item.get('kind')} {item.get('namespace')}/{item.get('name')}"


def would_delete(item: dict[str, Any], now: float) -> bool:
    """A dry-run record past its due time: what dry run would have deleted by now (and kept)."""
    return bool(item.get("dryRun")) and item["due"] <= now


def time_left(item: dict[str, Any], now: float) -> str:
    return "dry run: would delete" if would_delete(item, now) else countdown(item["due"] - now)


class Jobttl:
    """The stack as jobttl itself reports it: its read API, its metrics, its audit trail."""

    def __init__(self, sink_url: str, metrics_url: str, emulator_url: str, env: dict[str, str]):
        self.sink_url = sink_url
        self.metrics_url = metrics_url
        self.emulator_url = emulator_url
        self.env = {**os.environ, **env}

    def pending(self) -> list[dict[str, Any]]:
        return json.loads(_get(f"{self.sink_url}/api/v1/deletions?limit=1000"))["items"]

    def deletions_counted(self) -> float:
        """The worker's jobttl_deletions_total, summed: it moves when jobttl records a deletion."""
        text = _get(self.metrics_url).decode()
        return sum(
            float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("jobttl_deletions_total{")
        )

    def deleted(self) -> list[dict[str, Any]]:
        """jobttl's deletions, oldest first, from its audit trail (`jobttl history`)."""
        done = subprocess.run(
            [sys.executable, "-m", "jobttl", "history", "--json", "--event", "deleted", "--limit", "1000"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            start_new_session=True,
        )  # a Ctrl-C meant for us must not cut it short
        if done.returncode != 0:
            raise RuntimeError(f"jobttl history failed: {done.stderr.strip()}")
        return list(reversed(json.loads(done.stdout)["items"]))

    def in_cluster(self) -> list[str]:
        """The TFJobs the cluster has now (only to say what was kept, never what was deleted)."""
        items = json.loads(_get(f"{self.emulator_url}/apis/kubeflow.org/v1/tfjobs"))["items"]
        return sorted(item["metadata"]["name"] for item in items)


class Screen:
    """Lines that stay, and below them the pending deletions: counting down live in a terminal,
    as plain lines (when they change) otherwise."""

    def __init__(self, out=sys.stdout):
        self.out = out
        self.live = out.isatty()
        self.drawn = 0  # lines of the live block on screen now
        self.last: list[str] | None = None

    def say(self, line: str) -> None:
        self._erase()
        print(line, file=self.out, flush=True)

    def pending(self, items: list[dict[str, Any]], now: float) -> None:
        if self.live:
            width = shutil.get_terminal_size().columns - 1
            lines = [f"  pending ({len(items)}):" if items else "  nothing pending"]
            lines += [f"    {time_left(p, now):<10} {_object(p)}  due {rfc3339(p['due'])}" for p in items]
            self._erase()
            print("\n".join(line[:width] for line in lines), file=self.out, flush=True)
            self.drawn = len(lines)
            return
        members = [(p["jobId"], would_delete(p, now)) for p in items]
        if members != self.last:
            self.last = members
            shown = ", ".join(f"{_object(p)} {time_left(p, now)} ({rfc3339(p['due'])})" for p in items)
            print(f"  pending: {shown or 'nothing'}", file=self.out, flush=True)

    def _erase(self) -> None:
        if self.drawn:
            self.out.write(f"\x1b[{self.drawn}F\x1b[J")  # up to the block's first line, clear below
            self.drawn = 0


def deletion_line(entry: dict[str, Any], start: float, dues: dict[str, int]) -> str:
    """One deletion jobttl recorded: when its DELETE went out, when it was due, how long it took to go."""
    gone_after = float(entry.get("goneAfter") or 0)
    requested = entry["at"] - gone_after
    due = dues.get(entry.get("uid", ""))
    due_text = f"due at {due - start:.1f}s; " if due else ""
    return (
        f"  {requested - start:5.1f}s  jobttl deleted {_object(entry)} ({due_text}gone {gone_after:.1f}s "
        f"after its DELETE, at {rfc3339(entry['at'])})"
    )


def summary(jobttl: Jobttl, start: float, dues: dict[str, int]) -> list[str]:
    now = time.time()
    deleted = jobttl.deleted()
    lines = [f"Summary after {now - start:.0f}s: jobttl deleted {len(deleted) or 'nothing'}" + (":" if deleted else "")]
    lines += [deletion_line(e, start, dues) for e in deleted]
    pending = jobttl.pending()
    # Dry run deletes nothing: what it decided is not pending, it is what it would have deleted.
    dry = [p for p in pending if would_delete(p, now)]
    pending = [p for p in pending if not would_delete(p, now)]
    if dry:
        lines.append(f"  dry run: would delete {len(dry)}:")
        lines += [f"    {rfc3339(p['due'])} (due, kept: dry run)  {_object(p)}" for p in dry]
    lines.append(f"  still pending: {len(pending) or 'nothing'}" + (":" if pending else ""))
    lines += [f"    {rfc3339(p['due'])} ({countdown(p['due'] - now)})  {_object(p)}" for p in pending]
    return lines


# --- the whole run -------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m jobttl_emulator.localstack", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--exit-when-done",
        action="store_true",
        help="exit once jobttl has deleted the expected jobs and nothing is pending (0), or when --timeout passes (1)",
    )
    parser.add_argument("--timeout", type=float, default=90, help="seconds, with --exit-when-done (default: 90)")
    parser.add_argument(
        "--all-kinds",
        action="store_true",
        help="also seed one finished RayJob, JobSet, Volcano Job, SparkApplication, PipelineRun and "
        "TaskRun (seeds/kinds.yaml), each deleted 15 s after it finished",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(".run"),
        help="where the logs, kubeconfig, env file and wrapper go (default: .run)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    sys.stdout.reconfigure(line_buffering=True)
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        print("redis-server is not installed: apt-get install -y redis-server", file=sys.stderr)
        return 2
    workdir = args.workdir.resolve()
    other = _running_elsewhere(workdir)
    if other is not None:
        print(f"make run is already running here (pid {other}); stop it first", file=sys.stderr)
        return 2
    with stop_signals():
        stack = Stack(workdir)
        try:
            return _run(stack, redis_server, args)
        except Stopped as stop:  # while starting
            print(f"stopping ({stop})", flush=True)
            return 0
        finally:
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)  # nothing may cut the stop short
            for name in ("env", "kubeconfig"):
                (workdir / name).unlink(missing_ok=True)
            stack.stop()


def _run(stack: Stack, redis_server: str, args: argparse.Namespace) -> int:
    ports = {name: free_port() for name in ("redis", "emulator", "sink", "metrics", "console")}
    kubeconfig = stack.workdir / "kubeconfig"
    kubeconfig.unlink(missing_ok=True)
    queue = os.environ.get("JOBTTL_QUEUE") or QUEUE
    shared = {
        "JOBTTL_REDIS_URL": f"redis://127.0.0.1:{ports['redis']}/0",
        "JOBTTL_QUEUE": queue,
        "KUBECONFIG": str(kubeconfig),
    }
    env = {**shared, "JOBTTL_WORKER_METRICS_PORT": str(ports["metrics"])}
    if args.all_kinds and not os.environ.get("JOBTTL_POLICY"):
        # The kinds built in since the first ten are enabled only when a policy names them.
        policy = stack.workdir / "all-kinds-policy.yaml"
        policy.write_text(ALL_KINDS_POLICY)
        env["JOBTTL_POLICY"] = str(policy)
    sink_url, emulator_url = f"http://127.0.0.1:{ports['sink']}", f"http://127.0.0.1:{ports['emulator']}"
    metrics_url = f"http://127.0.0.1:{ports['metrics']}/metrics"

    stack.spawn("redis", redis_command(redis_server, ports["redis"], stack.temp_dir("jobttl-redis-")))
    seeds = ["--seed", str(EXAMPLES)] + (["--seed", str(ALL_KINDS_EXAMPLES)] if args.all_kinds else [])
    emulator = stack.spawn(
        "emulator",
        [
            sys.executable,
            "-m",
            "jobttl_emulator",
            "--port",
            str(ports["emulator"]),
            *seeds,
            "--write-kubeconfig",
            str(kubeconfig),
        ],
        env,
    )
    _until(kubeconfig.exists, 20, "the API emulator", emulator)
    start = time.time()  # the seeded jobs finished as the emulator started
    notifier = _start_notifier(stack, env)
    sink = stack.jobttl("sink", "sink", "--host", "127.0.0.1", "--port", str(ports["sink"]), env=env)
    worker = stack.jobttl("worker", "worker", env=env)
    stack.jobttl("watch", "watch", "--sink", sink_url, "--host", "127.0.0.1", "--port", "0", env=env)
    # The console without sign-in: on this machine's loopback only (jobttl console refuses it elsewhere).
    console_url = f"http://127.0.0.1:{ports['console']}/"
    console = stack.jobttl(
        "console",
        "console",
        "--host",
        "127.0.0.1",
        "--port",
        str(ports["console"]),
        env={**env, "JOBTTL_CONSOLE_AUTH": "none"},
    )
    jobttl = Jobttl(sink_url, metrics_url, emulator_url, shared)
    _until(lambda: jobttl.pending() is not None, 30, "the sink", sink)
    _until(lambda: jobttl.deletions_counted() is not None, 30, "the worker", worker)
    if notifier is not None:
        _until(lambda: _get(notifier[1]), 30, "the notifier (jobttl notify)", notifier[0])
    _until(lambda: _get(f"{console_url}healthz"), 30, "the console (jobttl console)", console)
    env_file = write_environment(stack.workdir, shared)
    _banner(stack, shared, env_file, sink_url, emulator_url, metrics_url, console_url)
    dues: dict[str, int] = {}
    try:
        return _follow(jobttl, Screen(), start, dues, args)
    except Stopped as stop:
        print(f"\nstopping ({stop})", flush=True)
        return 0
    finally:
        try:
            for line in summary(jobttl, start, dues):
                print(line, flush=True)
        except Exception as exc:  # noqa: BLE001 - a summary must never keep the stack running
            print(f"(no summary: {exc})", file=sys.stderr)


def _start_notifier(stack: Stack, env: dict[str, str]) -> tuple[subprocess.Popen, str] | None:
    """When the policy names notification channels, `jobttl notify` to send them (docs/notifications.md),
    and its health URL. Started before the sink, as it hears of what comes after it joins; not waited
    for here, so that the examples' countdown does not wait on it either."""
    if not policy_notifies(env.get("JOBTTL_POLICY") or os.environ.get("JOBTTL_POLICY")):
        return None
    port = free_port()
    process = stack.jobttl("notify", "notify", env={**env, "JOBTTL_NOTIFY_METRICS_PORT": str(port)})
    return process, f"http://127.0.0.1:{port}/healthz"


def policy_notifies(path: str | None) -> bool:
    """Whether the policy at `path` names notification channels (what is wrong with it, the processes say)."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) if path else None
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and bool(data.get("notify"))


def _banner(
    stack: Stack,
    env: dict[str, str],
    env_file: Path,
    sink_url: str,
    emulator_url: str,
    metrics_url: str,
    console_url: str,
) -> None:
    print("jobttl is running (Ctrl-C stops everything):")
    print(f"  console {console_url} (open it in a browser: no sign-in, this machine only)")
    print(f"  sink {sink_url} (read API: {sink_url}/api/v1/deletions), API emulator {emulator_url},")
    print(f"  Redis {env['JOBTTL_REDIS_URL']}, worker metrics {metrics_url}, logs in {_shown(stack.logs)}/")
    print(
        f"In another shell, `. {_shown(env_file)}` (or paste these lines), then `jobttl status` or "
        "`kubectl get tfjobs -A`:"
    )
    for line in env_file.read_text().splitlines()[1:]:
        print(f"  {line}")
    print(f"or, without changing your shell: {_shown(stack.workdir / 'bin' / 'jobttl')} status")


def _follow(jobttl: Jobttl, screen: Screen, start: float, dues: dict[str, int], args: argparse.Namespace) -> int:
    """Show the countdown and each deletion jobttl records, until stopped (or done)."""
    counted, reported = 0.0, {}
    parent = os.getppid()
    while True:
        if os.getppid() != parent:  # `make run` itself was stopped (`kill -HUP` of make's pid, say)
            raise Stopped("make run's parent went away")
        now = time.time()
        pending = jobttl.pending()
        dues.update({p["uid"]: p["due"] for p in pending})
        if (total := jobttl.deletions_counted()) != counted:
            counted = total
            for entry in jobttl.deleted():
                if entry["id"] not in reported:
                    reported[entry["id"]] = entry["name"]
                    screen.say(deletion_line(entry, start, dues))
        screen.pending(pending, now)
        if args.exit_when_done:
            expected = EXPECTED_GONE | (ALL_KINDS_GONE if args.all_kinds else set())
            if expected <= set(reported.values()) and not pending:
                screen.say(
                    f"  done: jobttl deleted the finished jobs after their TTL; kept: {', '.join(jobttl.in_cluster())}"
                )
                return 0
            if now - start > args.timeout:
                screen.say(
                    f"  timed out after {args.timeout:.0f}s; still in the cluster: {', '.join(jobttl.in_cluster())}"
                )
                return 1
        time.sleep(1 - (time.time() - now) % 1)


if __name__ == "__main__":
    sys.exit(main())
