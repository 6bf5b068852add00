"""Run the whole jobttl stack on one machine: ``make run`` (or ``python -m jobttl_emulator.localstack``).

Starts its own redis-server, the Kubernetes API emulator seeded with example TFJobs
(``seeds/tfjobs.yaml`` beside this module), the sink, the worker and the watcher that feeds the sink
CloudEvents, then shows the finished jobs disappearing as their TTLs run out. Everything
runs with its built-in defaults; process logs (JSON) go to .run/logs/.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, config

EXAMPLES = Path(__file__).resolve().parent / "seeds" / "tfjobs.yaml"
EXPECTED_GONE = {"mnist-succeeded-ttl-10s", "mnist-failed-ttl-20s"}
EXPECTED_KEPT = {"mnist-running", "mnist-no-ttl"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_command(binary: str, port: int, directory: str) -> list[str]:
    """A throwaway redis-server on loopback that keeps nothing on disk."""
    return [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", directory]


def _until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:
            pass  # not up yet
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up within {timeout}s; see .run/logs/")


class Stack:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.processes: list[subprocess.Popen] = []

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")
        process = subprocess.Popen(argv, env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        self.processes.append(process)
        return process

    def jobttl(self, name: str, *args: str, env: dict[str, str]) -> subprocess.Popen:
        return self.spawn(name, [sys.executable, "-m", "jobttl", *args], env)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobttl_emulator.localstack", description=__doc__.splitlines()[0])
    parser.add_argument("--exit-when-done", action="store_true",
                        help="exit once the expected jobs are deleted (0) or the timeout passes (1)")
    parser.add_argument("--timeout", type=float, default=90)
    args = parser.parse_args(argv)

    redis_server = shutil.which("redis-server")
    if redis_server is None:
        print("redis-server is not installed: apt-get install -y redis-server", file=sys.stderr)
        return 2
    workdir = Path.cwd() / ".run"
    stack = Stack(workdir)
    ports = {name: free_port() for name in ("redis", "emulator", "sink", "metrics")}
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.unlink(missing_ok=True)
    env = {"JOBTTL_REDIS_URL": f"redis://127.0.0.1:{ports['redis']}/0", "KUBECONFIG": str(kubeconfig),
           "JOBTTL_WORKER_METRICS_PORT": str(ports["metrics"])}
    sink_url = f"http://127.0.0.1:{ports['sink']}"
    try:
        stack.spawn("redis", redis_command(redis_server, ports["redis"], tempfile.mkdtemp(prefix="jobttl-redis-")))
        stack.spawn("emulator", [sys.executable, "-m", "jobttl_emulator", "--port", str(ports["emulator"]),
                                 "--seed", str(EXAMPLES), "--write-kubeconfig", str(kubeconfig)], env)
        _until(kubeconfig.exists, 20, "the API emulator")
        api = client.CustomObjectsApi(config.new_client_from_config(config_file=str(kubeconfig)))
        stack.jobttl("sink", "sink", "--host", "127.0.0.1", "--port", str(ports["sink"]), env=env)
        stack.jobttl("worker", "worker", env=env)
        stack.jobttl("watch", "watch", "--sink", sink_url, env=env)
        _until(lambda: socket.create_connection(("127.0.0.1", ports["sink"]), timeout=1), 30, "the sink")

        start = time.monotonic()
        print(f"jobttl is running: sink {sink_url}, API emulator http://127.0.0.1:{ports['emulator']}, "
              f"Redis {env['JOBTTL_REDIS_URL']}, worker metrics http://127.0.0.1:{ports['metrics']}/metrics, "
              f"logs in {stack.logs}")
        print(f"  export KUBECONFIG={kubeconfig}   # to look with kubectl; Ctrl-C stops everything")
        remaining = None
        while True:
            items = api.list_cluster_custom_object("kubeflow.org", "v1", "tfjobs")["items"]
            names = {item["metadata"]["name"] for item in items}
            if remaining is None:
                print(f"  {len(names)} TFJobs: {', '.join(sorted(names))}")
            else:
                for name in sorted(remaining - names):
                    print(f"  {time.monotonic() - start:5.1f}s  deleted {name}")
            remaining = names
            if args.exit_when_done and not (EXPECTED_GONE & names) and EXPECTED_KEPT <= names:
                print(f"  done: finished jobs deleted after their TTL; kept: {', '.join(sorted(names))}")
                return 0
            if args.exit_when_done and time.monotonic() - start > args.timeout:
                print(f"  timed out; still present: {', '.join(sorted(names))}", file=sys.stderr)
                return 1
            time.sleep(1)
    except KeyboardInterrupt:
        return 0
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
