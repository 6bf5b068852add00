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

from jobttl_emulator.localstack import free_port, redis_command

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
        except Exception as exc:  # noqa: BLE001 - the thing polled may not be up yet
            last_error = exc
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_error})" if last_error else "")
    )


class RedisServer:
    """Our own redis-server. `persistent`: an append-only file fsynced on every write, so a
    stop and a start on the same port and directory (an outage) keeps the data."""

    def __init__(self, persistent: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed; `make test` installs it (apt-get install -y redis-server)"
            )
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
            [sys.executable, "-m", "jobttl", *self.args],
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=log,
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
    sink = JobttlProcess(
        ["sink", "--host", "127.0.0.1", "--port", str(port), "--threads", "4"], env, log_dir, f"sink-{port}"
    ).start()
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: requests.get(f"{url}/metrics", timeout=1).ok, timeout=20, what="the sink")
    return sink, url


class RecordingSink:
    """An HTTP endpoint that keeps every CloudEvent it receives (binary mode)."""

    def __init__(self):
        self.events: list[dict] = []
        # Cleared: each event is kept, and its answer waits until it is set again (a sender held mid-work).
        self.gate = threading.Event()
        self.gate.set()
        app = Flask("recording-sink")

        @app.post("/")
        def receive():
            headers = {k.lower(): v for k, v in request.headers.items()}
            self.events.append(
                {
                    "type": headers["ce-type"],
                    "headers": headers,
                    "data": json.loads(request.data),
                    "received": time.time(),
                }
            )
            self.gate.wait()
            return "", 202

        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, namespace: str) -> list[tuple[str, str, str]]:
        return [
            (e["type"].rsplit(".", 1)[1], e["data"]["metadata"]["name"], e["data"]["metadata"]["resourceVersion"])
            for e in self.events
            if e["data"]["metadata"]["namespace"] == namespace
        ]


def start_emulator(directory: Path, resources, **options):
    """The API emulator in this process, with a kubeconfig for it at `server.kubeconfig`."""
    from jobttl_emulator import EmulatorServer

    server = EmulatorServer(resources=tuple(resources), **options).start()
    server.kubeconfig = directory / "kubeconfig"
    server.write_kubeconfig(str(server.kubeconfig))
    return server


class RedisSentinels:
    """Redis as run for high availability: a primary, replicas and Sentinels, all on loopback.

    Each node is its own redis-server process (Sentinels are ``redis-server CONF --sentinel``,
    which rewrites its config file, so each gets a writable one), so a test can SIGKILL the
    primary and watch the Sentinels promote a replica. Failure detection is shortened
    (``down_after_ms``) so a failover takes seconds; initial syncs start at once
    (``repl-diskless-sync-delay 0``). Not below 2 s: Sentinels ping every second, and at 1 s
    a newly promoted primary whose first ping answer came late was itself failed over (seen
    on a loaded machine).
    """

    MASTER_SET = "jobttl"

    def __init__(
        self,
        directory: Path,
        replicas: int = 2,
        sentinels: int = 3,
        down_after_ms: int = 2000,
        failover_timeout_ms: int = 5000,
        tls: dict[str, str] | None = None,
    ):
        self.binary = RedisServer().binary
        self.directory = directory
        self.replicas, self.down_after_ms, self.failover_timeout_ms = replicas, down_after_ms, failover_timeout_ms
        self.tls = tls  # {"cert": ..., "key": ..., "ca": ...}: every node and Sentinel speaks TLS only
        self.node_ports = [free_port() for _ in range(1 + replicas)]
        self.sentinel_ports = [free_port() for _ in range(sentinels)]
        self.processes: dict[int, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        scheme = "rediss+sentinel" if self.tls else "redis+sentinel"
        return f"{scheme}://" + ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports) + f"/{self.MASTER_SET}/0"

    def _tls_lines(self) -> list[str]:
        if not self.tls:
            return []
        return [
            f"tls-cert-file {self.tls['cert']}",
            f"tls-key-file {self.tls['key']}",
            f"tls-ca-cert-file {self.tls['ca']}",
            "tls-auth-clients no",
            "tls-replication yes",
        ]

    def _port_line(self, port: int) -> str:
        return f"port 0\ntls-port {port}" if self.tls else f"port {port}"

    def _spawn(self, port: int, lines: list[str], sentinel: bool = False) -> None:
        node_dir = self.directory / str(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        conf = node_dir / "redis.conf"
        conf.write_text(
            "\n".join([self._port_line(port), "bind 127.0.0.1", f"dir {node_dir}", *self._tls_lines(), *lines]) + "\n"
        )
        argv = [self.binary, str(conf)] + (["--sentinel"] if sentinel else [])
        log = open(node_dir / "log", "ab")
        self.processes[port] = subprocess.Popen(argv, stdout=log, stderr=log)

    def client(self, port: int, **options) -> redis_lib.Redis:
        options = {"socket_timeout": 2, "socket_connect_timeout": 2, **options}
        if self.tls:
            options.update(ssl=True, ssl_ca_certs=self.tls["ca"])
        return redis_lib.Redis(host="127.0.0.1", port=port, **options)

    def start(self, timeout: float = 20) -> RedisSentinels:
        primary, *replicas = self.node_ports
        data = ['save ""', "appendonly no", "repl-diskless-sync yes", "repl-diskless-sync-delay 0"]
        self._spawn(primary, data)
        for port in replicas:
            self._spawn(port, [*data, f"replicaof 127.0.0.1 {primary}"])
        # Sentinels learn of replicas from the primary's INFO, refreshed every 10 s: start them
        # once every replica is connected, so that the first INFO lists them all.
        wait_for(self._replicas_in_sync, timeout=timeout, interval=0.05, what="the replicas to sync")
        quorum = len(self.sentinel_ports) // 2 + 1
        for port in self.sentinel_ports:
            self._spawn(
                port,
                [
                    f"sentinel monitor {self.MASTER_SET} 127.0.0.1 {primary} {quorum}",
                    f"sentinel down-after-milliseconds {self.MASTER_SET} {self.down_after_ms}",
                    f"sentinel failover-timeout {self.MASTER_SET} {self.failover_timeout_ms}",
                    f"sentinel parallel-syncs {self.MASTER_SET} {max(1, self.replicas)}",
                ],
                sentinel=True,
            )
        wait_for(self.ready, timeout=timeout, interval=0.1, what="the Sentinels to see every replica and each other")
        return self

    def _replicas_in_sync(self) -> bool:
        return all(
            self.client(port).info("replication").get("master_link_status") == "up" for port in self.node_ports[1:]
        )

    def ready(self) -> bool:
        """Every replica in sync, and every Sentinel knows every replica and every other Sentinel."""
        if not self._replicas_in_sync():
            return False
        for port in self.sentinel_ports:
            state = self.client(port).sentinel_master(self.MASTER_SET)
            if state["num-slaves"] < self.replicas or state["num-other-sentinels"] < len(self.sentinel_ports) - 1:
                return False
        return True

    def primary_port(self) -> int | None:
        """The primary's port as the Sentinels (a majority of those answering) name it now."""
        named = []
        for port in self.sentinel_ports:
            try:
                named.append(
                    int(self.client(port, socket_timeout=0.5).sentinel_get_master_addr_by_name(self.MASTER_SET)[1])
                )
            except redis_lib.RedisError:
                continue
        return max(set(named), key=named.count) if named else None

    def kill_primary(self) -> int:
        """SIGKILL the current primary (no shutdown, no last write); return its port."""
        port = self.primary_port()
        self.processes[port].kill()
        self.processes[port].wait()
        return port

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def tls_files(directory: Path, common_name: str = "jobttl test CA") -> dict[str, str]:
    """A CA of our own and a server certificate it signed for 127.0.0.1: {"ca", "cert", "key"} file paths."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def certificate(subject, public_key, extensions):
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(ca_key, hashes.SHA256())

    ca = certificate(
        ca_name,
        ca_key.public_key(),
        [
            (x509.BasicConstraints(ca=True, path_length=None), True),
            (x509.KeyUsage(False, False, False, False, False, True, True, False, False), True),
        ],
    )
    server = certificate(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]),
        key.public_key(),
        [
            (x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), False),
        ],
    )
    files = {"ca": directory / "ca.pem", "cert": directory / "server.pem", "key": directory / "server-key.pem"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return {name: str(path) for name, path in files.items()}


class TLSRedisServer(RedisServer):
    """redis-server that speaks only TLS (no plaintext port), with a certificate from `tls_files`."""

    def __init__(self, tls: dict[str, str]):
        super().__init__()
        self.tls = tls

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def client(self) -> redis_lib.Redis:
        return redis_lib.Redis(host="127.0.0.1", port=self.port, ssl=True, ssl_ca_certs=self.tls["ca"])

    def start(self) -> TLSRedisServer:
        argv = redis_command(self.binary, 0, self.dir) + [
            "--tls-port",
            str(self.port),
            "--tls-cert-file",
            self.tls["cert"],
            "--tls-key-file",
            self.tls["key"],
            "--tls-ca-cert-file",
            self.tls["ca"],
            "--tls-auth-clients",
            "no",
        ]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        wait_for(lambda: self.client().ping(), what=f"redis-server (TLS) on port {self.port}")
        return self
