"""Real services for tests: our own redis-server, and jobttl's own processes.

Each is started on a free port and waited for by polling with a deadline, never by a
fixed sleep. Redis is our own process (not the machine's) so fault tests can stop and
restart it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis as redis_lib
import requests
from flask import Flask, request
from werkzeug.serving import make_server

from jobttl_emulator.localstack import free_port, redis_command  # noqa: F401  (free_port: re-exported for tests)

ROOT = Path(__file__).resolve().parents[1]


def wait_for(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except Exception as exc:  # the thing polled may not be up yet
            last_error = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


class RedisServer:
    """Our own redis-server. `persistent`: an append-only file fsynced on every write, so a
    stop and a start on the same port and directory (an outage) keeps the data."""

    def __init__(self, persistent: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; `make test` installs it (apt-get install -y redis-server)")
        self.binary = binary
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="jobttl-redis-")
        self.persistent = persistent
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis_lib.Redis:
        return redis_lib.Redis.from_url(self.url)

    def start(self) -> RedisServer:
        command = redis_command(self.binary, self.port, self.dir)
        if self.persistent:  # later options override earlier ones
            command += ["--appendonly", "yes", "--appendfsync", "always"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        wait_for(lambda: self.client().ping(), what=f"redis-server on port {self.port}")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


class JobttlProcess:
    """`jobttl <command>` as a child process, its output kept in a log file for failures."""

    def __init__(self, args: list[str], env: dict[str, str], log_dir: Path, name: str):
        self.args = args
        self.env = {**os.environ, **env}
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> JobttlProcess:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jobttl", *self.args], env=self.env, cwd=ROOT, stdout=log, stderr=log,
            start_new_session=True,
        )
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def start_sink(env: dict[str, str], log_dir: Path) -> tuple[JobttlProcess, str]:
    port = free_port()
    sink = JobttlProcess(["sink", "--host", "127.0.0.1", "--port", str(port), "--threads", "4"], env, log_dir,
                         f"sink-{port}").start()
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: requests.get(f"{url}/metrics", timeout=1).ok, timeout=20, what="the sink")
    return sink, url


class RecordingSink:
    """An HTTP endpoint that keeps every CloudEvent it receives (binary mode)."""

    def __init__(self):
        self.events: list[dict] = []
        app = Flask("recording-sink")

        @app.post("/")
        def receive():
            headers = {k.lower(): v for k, v in request.headers.items()}
            self.events.append({"type": headers["ce-type"], "headers": headers, "data": json.loads(request.data),
                                "received": time.time()})
            return "", 202

        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, namespace: str) -> list[tuple[str, str, str]]:
        return [(e["type"].rsplit(".", 1)[1], e["data"]["metadata"]["name"], e["data"]["metadata"]["resourceVersion"])
                for e in self.events if e["data"]["metadata"]["namespace"] == namespace]


def start_emulator(directory: Path, resources, **options):
    """The API emulator in this process, with a kubeconfig for it at `server.kubeconfig`."""
    from jobttl_emulator import EmulatorServer

    server = EmulatorServer(resources=tuple(resources), **options).start()
    server.kubeconfig = directory / "kubeconfig"
    server.write_kubeconfig(str(server.kubeconfig))
    return server
