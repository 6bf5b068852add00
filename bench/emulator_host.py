"""The Kubernetes API emulator in a process of its own, as every row uses it, plus a few
bench-only routes under ``/_bench/`` (the emulator's own ``/_emulator/`` hooks stay as they are).

Its own process, so that its CPU is not the measured process's (they share two cores, as
an API server and jobttl would share a small cluster's control plane). Objects are seeded
straight into its store (like tests/e2e/test_resync.py's `seed_object`), since creating
50,000 objects through HTTP would take longer than the benchmark.

    python -m bench.emulator_host --port PORT --kubeconfig PATH [--gc-delay S]
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time

import requests
from flask import jsonify, request

from jobttl_emulator import WELL_KNOWN, EmulatorServer, seed_object
from jobttl_emulator.localstack import free_port

from bench.objects import realistic_tfjob
from tests.services import wait_for

# Watch history kept by the store: nothing watches here, and 50,000 kept events would double its memory.
HISTORY = 1000


def add_bench_routes(server: EmulatorServer) -> None:
    app = server.app

    @app.post("/_bench/seed")
    def seed():
        """Seed `count` realistic TFJobs: {count, prefix, namespaces, state, at, ttl}."""
        spec = request.get_json()
        started = time.perf_counter()
        template = realistic_tfjob("template", "template", state=spec["state"], at=spec["at"], ttl=spec.get("ttl"))
        namespaces = int(spec.get("namespaces", 1))
        created = []
        for i in range(int(spec["count"])):
            obj = copy.deepcopy(template)
            name = f"{spec['prefix']}-{i}"
            obj["metadata"].update(name=name, namespace=f"{spec.get('namespace', 'bench')}-{i % namespaces}")
            for replica in obj["status"]["replicaStatuses"].values():
                replica["selector"] = replica["selector"].replace("template", name, 1)
            obj = seed_object(server.store, obj)
            if spec.get("return_refs"):
                created.append([obj["metadata"]["namespace"], obj["metadata"]["name"], obj["metadata"]["uid"]])
        return jsonify(created=int(spec["count"]), seconds=time.perf_counter() - started, refs=created)

    @app.get("/_bench/deletes")
    def deletes():
        """[time, path, status] of every DELETE in the request log (compact: no bodies)."""
        return jsonify([[e["time"], e["path"], e["status"]] for e in server.hooks.requests("DELETE")])

    @app.get("/_bench/counts")
    def counts():
        """Requests in the log by method, and this process's CPU seconds so far."""
        by_method: dict[str, int] = {}
        for entry in server.hooks.requests():
            by_method[entry["method"]] = by_method.get(entry["method"], 0) + 1
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return jsonify(requests=by_method, cpu=usage.ru_utime + usage.ru_stime, maxrss_kb=usage.ru_maxrss)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--gc-delay", type=float, default=0.5)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # an access log line per request costs CPU
    server = EmulatorServer(port=args.port, resources=WELL_KNOWN, gc_delay=args.gc_delay, history_size=HISTORY)
    add_bench_routes(server)
    server.start()
    server.write_kubeconfig(args.kubeconfig)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop()


class Emulator:
    """The bench's handle on an emulator process."""

    def __init__(self, workdir: str, gc_delay: float = 0.5):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.kubeconfig = f"{workdir}/kubeconfig-{self.port}"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.emulator_host",
                "--port",
                str(self.port),
                "--kubeconfig",
                self.kubeconfig,
                "--gc-delay",
                str(gc_delay),
            ]
        )
        self.http = requests.Session()
        wait_for(lambda: self.http.get(f"{self.url}/healthz", timeout=1).ok, timeout=30, what="the emulator")
        wait_for(lambda: os.path.exists(self.kubeconfig), what="the emulator's kubeconfig")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a loaded machine, watches still draining: the results stand
            self.process.kill()
            self.process.wait(timeout=30)

    def reset(self) -> None:
        """No objects, no request log, no faults."""
        self.http.post(f"{self.url}/_emulator/reset").raise_for_status()

    def clear_requests(self) -> None:
        self.http.delete(f"{self.url}/_emulator/requests").raise_for_status()

    def seed(
        self,
        count: int,
        prefix: str,
        state: str,
        at: float,
        ttl: int | None,
        namespaces: int = 1,
        namespace: str = "bench",
        return_refs: bool = False,
    ) -> dict:
        answer = self.http.post(
            f"{self.url}/_bench/seed",
            json=dict(
                count=count,
                prefix=prefix,
                state=state,
                at=at,
                ttl=ttl,
                namespaces=namespaces,
                namespace=namespace,
                return_refs=return_refs,
            ),
            timeout=3600,
        )
        answer.raise_for_status()
        return answer.json()

    def deletes(self) -> list[tuple[float, str, int]]:
        return [tuple(d) for d in self.http.get(f"{self.url}/_bench/deletes", timeout=60).json()]

    def counts(self) -> dict:
        return self.http.get(f"{self.url}/_bench/counts", timeout=60).json()


if __name__ == "__main__":
    main()
