"""jobttl's performance targets, measured: ``.venv/bin/python bench/run.py``.

Each benchmark starts what it needs (its own redis-server, the API emulator in-process),
runs a bounded workload on this machine's loopback, and prints the rate next to its target.
Targets are for the 2-core reference machine; the exit code is 1 if one is missed.
Benchmarks are not tests: run them by hand when a change could affect speed.

- sink: CloudEvents per second turned into pending deletions (new jobs), and duplicates
  per second (the common case: update events for jobs already scheduled);
- worker: deletions per second by one `jobttl worker --burst` (rate limit off);
- resync: seconds to resync 10,000 finished jobs into an empty Redis.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cloudevents.core.bindings.http import to_binary_event  # noqa: E402
from cloudevents.core.v1.event import CloudEvent  # noqa: E402

from jobttl_emulator import EmulatorServer, Resource, seed_object  # noqa: E402
from jobttl.core.config import Settings  # noqa: E402
from sink.app import create_app  # noqa: E402
from tests.fixtures import finished_status, job_object, tfjob, with_server_fields  # noqa: E402
from tests.services import RedisServer  # noqa: E402
from worker import tasks  # noqa: E402
from jobttl.core.kinds import TFJOB  # noqa: E402

TARGETS = {"sink new jobs/s": 300, "sink duplicates/s": 500, "worker deletions/s": 50, "resync 10k jobs (s)": 60}


def bench_sink(redis_url: str) -> dict[str, float]:
    app = create_app(Settings.from_env({"JOBTTL_REDIS_URL": redis_url, "JOBTTL_QUEUE": "bench-sink"}))
    client = app.test_client()
    messages = []
    for i in range(2000):
        obj = with_server_fields(tfjob(f"job-{i}", "bench", ttl=3600))
        obj["status"] = finished_status(time.time())
        event = CloudEvent(attributes={"specversion": "1.0", "id": str(uuid.uuid4()), "source": "bench",
                                       "type": "dev.knative.apiserver.resource.update"}, data=obj)
        messages.append(to_binary_event(event))
    results = {}
    for label in ("sink new jobs/s", "sink duplicates/s"):
        start = time.perf_counter()
        for message in messages:
            response = client.post("/", headers=dict(message.headers), data=message.body)
            assert response.status_code == 202, response.data
        results[label] = len(messages) / (time.perf_counter() - start)
    return results


def bench_worker_and_resync(redis_url: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, EmulatorServer(
            resources=(Resource("kubeflow.org", "v1", "TFJob", "tfjobs"),
                       Resource("", "v1", "Event", "events", status_subresource=False)),
            history_size=50_000) as cluster:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        cluster.write_kubeconfig(kubeconfig)
        env = {"JOBTTL_REDIS_URL": redis_url, "KUBECONFIG": kubeconfig, "JOBTTL_QUEUE": "bench-worker",
               "JOBTTL_DELETE_RATE": "0", "JOBTTL_RESYNC_INTERVAL": "0", "JOBTTL_WORKER_METRICS_PORT": "0",
               "JOBTTL_RESYNC_MAX_DELETIONS": "1000000", "JOBTTL_RESYNC_MAX_SHARE": "1",
               "JOBTTL_PROPAGATION_POLICY": "Background", "JOBTTL_LOG_LEVEL": "WARNING"}
        now = time.time()
        for i in range(10_000):
            seed_object(cluster.store, job_object(TFJOB, f"job-{i}", f"ns-{i % 20}", at=now, ttl=3600))
        for i in range(500):
            seed_object(cluster.store, job_object(TFJOB, f"old-{i}", "expired", at=now - 7200, ttl=60))
        ctx = tasks.WorkerContext.from_settings(Settings.from_env(env))
        start = time.perf_counter()
        report = tasks.run_resync(ctx)
        resync_seconds = time.perf_counter() - start
        assert report.scheduled == 10_000 and report.queued_now == 500, report
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "jobttl.cli", "worker", "--burst"], env={**os.environ, **env},
                       cwd=ROOT, check=True, capture_output=True)
        elapsed = time.perf_counter() - start  # includes the worker's start-up (~1 s)
        deleted = len(cluster.requests(method="DELETE"))
        assert deleted == 500, deleted
        return {"worker deletions/s": deleted / elapsed, "resync 10k jobs (s)": resync_seconds}


def main() -> int:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the emulator's access log
    redis = RedisServer().start()
    try:
        results = {**bench_sink(redis.url), **bench_worker_and_resync(redis.url)}
    finally:
        redis.stop()
    missed = 0
    for label, value in results.items():
        target = TARGETS[label]
        ok = value <= target if label.endswith("(s)") else value >= target
        missed += not ok
        print(f"{label:24} {value:10.1f}   target {'<=' if label.endswith('(s)') else '>='} {target}"
              f"   {'ok' if ok else 'MISSED'}")
    print(json.dumps({k: round(v, 1) for k, v in results.items()}))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
