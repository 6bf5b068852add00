"""The probe server the worker, the notifier and the watcher share (jobttl.core.runtime.probes)."""

from __future__ import annotations

import threading

import requests
from prometheus_client import CollectorRegistry, Counter

from jobttl.core.runtime import probes


def test_each_get_is_answered_from_the_path_as_sent_with_its_length_and_type():
    asked: list[str] = []

    def answer(path: str) -> probes.Answer:
        asked.append(path)
        return probes.OK if path.startswith("/healthz") else probes.NOT_FOUND

    server = probes.serve(answer, 0, "test-probes", "127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        ok = requests.get(f"{url}/healthz?verbose=1", timeout=5)
        assert (ok.status_code, ok.headers["Content-Type"], ok.json()) == (200, "application/json", {"status": "ok"})
        assert ok.headers["Content-Length"] == str(len(probes.OK.body))
        missing = requests.get(f"{url}/nothing", timeout=5)
        assert (missing.status_code, missing.json()) == (404, {"error": "not found", "code": 404})
        assert requests.post(f"{url}/healthz", timeout=5).status_code == 501, "GET only"
        assert asked == ["/healthz?verbose=1", "/nothing"]
        [thread] = [t for t in threading.enumerate() if t.name == "test-probes"]
        assert thread.daemon and server.daemon_threads, "a probe server never holds the process open"
    finally:
        server.shutdown()
        server.server_close()


def test_metrics_are_the_registry_in_prometheus_text_format():
    registry = CollectorRegistry()
    Counter("jobttl_test_things", "things", registry=registry).inc(3)
    server = probes.serve(lambda path: probes.metrics(registry), 0, "test-metrics", "127.0.0.1")
    try:
        reply = requests.get(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=5)
        assert reply.status_code == 200 and reply.headers["Content-Type"].startswith("text/plain")
        assert "jobttl_test_things_total 3.0" in reply.text
    finally:
        server.shutdown()
        server.server_close()
