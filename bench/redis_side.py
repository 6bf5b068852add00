"""A dedicated redis-server per side, run with the configuration the project ships, and
what Redis itself counts while a side runs.

The configuration is read, not copied: docker-compose.yml's ``redis`` command and the
``redis`` container's args in knative/base/redis.yaml, which must agree (less where the data
lives and the password); the memory row also measures Redis's default
``hash-max-listpack-value`` (64) against the shipped 512.

How round trips are counted (validated with redis-server 7.0, see bench/README.md):
``INFO stats``'s ``total_writes_processed`` grows by one per reply Redis writes to a client,
and a synchronous client (redis-py: a command, a pipeline, a MULTI/EXEC, an EVALSHA) whose
request arrives in one read (up to 16 KB) gets one reply write per request, however many
commands it held; so its delta is the round trips of every process using this Redis. A
larger request (a resync page's 500 scripts, RQ's scheduler moving 1,000 jobs) is read in
several chunks and answered in several writes: there the figure counts reply writes, more
than round trips, and the table takes round trips from the client-side count
(bench.counting) instead. ``total_commands_processed`` counts commands, including
MULTI/EXEC and every command a Lua script runs; ``INFO commandstats`` breaks those down by
command. Each snapshot costs one round trip and one command of its own, subtracted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis as redis_lib
import yaml

from jobttl_emulator.localstack import free_port
from tests.services import wait_for

ROOT = Path(__file__).resolve().parents[1]
# Where each deployment keeps its data, and its password: not performance settings.
_LOCAL_ONLY = {"--dir", "--requirepass"}


def _pairs(args: list[str]) -> dict[str, str]:
    settings, key = {}, None
    for arg in args:
        if arg.startswith("--"):
            key = arg
            settings[key] = ""
        elif key is not None:
            settings[key] = f"{settings[key]} {arg}".strip()
    return {k: v for k, v in settings.items() if k not in _LOCAL_ONLY}


def shipped_settings() -> dict[str, str]:
    """The redis-server flags both deployments set (they must agree)."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = compose["services"]["redis"]["command"]
    assert command[0] == "redis-server", command
    from_compose = _pairs(command[1:])
    from_manifest = None
    for doc in yaml.safe_load_all((ROOT / "knative" / "base" / "redis.yaml").read_text()):
        containers = (((doc or {}).get("spec") or {}).get("template") or {}).get("spec", {}).get("containers", [])
        for container in containers:
            if container.get("name") == "redis":
                from_manifest = _pairs(container.get("args") or [])
    assert from_manifest == from_compose, f"compose {from_compose} and the manifest {from_manifest} disagree"
    return from_compose


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) a process has used so far, from /proc; 0 if it is gone."""
    if pid is None:
        return 0.0
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Counters:
    at: float
    round_trips: int  # total_writes_processed
    commands: int  # total_commands_processed
    by_command: dict[str, int]
    redis_cpu: float = 0.0  # used_cpu_user + used_cpu_sys
    process_cpu: float = 0.0  # of the process watched, if any

    def minus(self, earlier: Counters, snapshots: int = 1) -> Counters:
        """What happened between two snapshots, less the `snapshots` INFO calls made in between."""
        by_command = {k: v - earlier.by_command.get(k, 0) for k, v in self.by_command.items()}
        by_command["info"] = by_command.get("info", 0) - snapshots
        return Counters(
            self.at - earlier.at,
            self.round_trips - earlier.round_trips - snapshots,
            self.commands - earlier.commands - snapshots,
            {k: v for k, v in by_command.items() if v},
            self.redis_cpu - earlier.redis_cpu,
            self.process_cpu - earlier.process_cpu,
        )


def _counters(client: redis_lib.Redis, pid: int | None = None) -> Counters:
    info = client.info("everything")
    by_command = {k[len("cmdstat_") :]: v["calls"] for k, v in info.items() if k.startswith("cmdstat_")}
    return Counters(
        time.time(),
        info["total_writes_processed"],
        info["total_commands_processed"],
        by_command,
        info["used_cpu_user"] + info["used_cpu_sys"],
        process_cpu(pid),
    )


class RedisSide:
    """One redis-server on a free port with the shipped flags (plus `extra`), for one side."""

    def __init__(self, extra: dict[str, str] | None = None):
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (make bench installs it)")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="jobttl-bench-redis-")
        flags = {**shipped_settings(), **(extra or {})}
        self.argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--dir", self.dir]
        for key, value in flags.items():
            self.argv += [key, *value.split(" ")]
        self.process: subprocess.Popen | None = None
        self._client: redis_lib.Redis | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def client(self) -> redis_lib.Redis:
        if self._client is None:
            self._client = redis_lib.Redis(port=self.port)
        return self._client

    def start(self) -> RedisSide:
        self.process = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL)
        wait_for(lambda: redis_lib.Redis(port=self.port).ping(), what=f"redis-server on {self.port}")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisSide:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def flush(self) -> None:
        self.client.flushall()
        self.client.config_resetstat()

    def counters(self, pid: int | None = None) -> Counters:
        """One snapshot (one round trip: INFO everything), and the CPU time of process `pid` so far."""
        return _counters(self.client, pid)

    def cpu_seconds(self) -> float:
        info = self.client.info("cpu")
        return info["used_cpu_user"] + info["used_cpu_sys"]


class CounterTrace:
    """Snapshots every `period` seconds in a thread, so counts can be read at any instant
    (interpolated), e.g. between the first and the last DELETE a worker made."""

    def __init__(self, side: RedisSide, period: float = 0.1):
        self.side = side
        self.pid: int | None = None  # a process whose CPU time is sampled too
        self.period = period
        self.samples: list[Counters] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._client = redis_lib.Redis(port=side.port)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(_counters(self._client, self.pid))
            self._stop.wait(self.period)

    def __enter__(self) -> CounterTrace:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> Counters | None:
        """Counts between two instants (nearest samples outside them), less this trace's own INFOs."""
        before = [s for s in self.samples if s.at <= start]
        after = [s for s in self.samples if s.at >= end]
        if not before or not after:
            return None
        first, last = before[-1], after[0]
        polls = sum(1 for s in self.samples if first.at < s.at <= last.at)
        return last.minus(first, polls)
