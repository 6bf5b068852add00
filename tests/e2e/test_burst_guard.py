"""A burst of events for jobs already past their TTL is held by the blast-radius guard, not deleted.

Deletions that come due without the schedule having predicted them (events for jobs long
expired: a restored backup, a controller rewriting finish times, a wrong clock upstream)
count against the guard: past `JOBTTL_RESYNC_MAX_DELETIONS` in a minute (by Redis's
clock), the sink holds the rest (``X-Jobttl-Outcome: held``) for an operator, exactly as a
resync holds its own. Real processes: the sink under waitress, a worker, Redis, the
emulator; `jobttl status` and `jobttl resync --confirm` as an operator runs them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
import requests
from cloudevents.core.bindings.http import to_binary_event
from cloudevents.core.v1.event import CloudEvent

from jobttl_emulator import TFJOB as TFJOB_RESOURCE, seed_object
from jobttl.core.store.audit import Audit
from jobttl.core.runtime.config import Settings
from jobttl.core.domain.decisions.decision import decide
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.store.schedule import Schedule
from tests.fixtures import job_object
from tests.e2e.conftest import CORE_EVENTS
from tests.services import ROOT, JobttlProcess, RedisServer, start_emulator, start_sink, wait_for

LIMIT = 5
BURST = 12


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    # An emulator of its own: the operator's resync lists the whole cluster, and must see only this test's jobs.
    emulator = start_emulator(tmp_path_factory.mktemp("burst"), (TFJOB_RESOURCE, CORE_EVENTS), gc_delay=0.1)
    redis_server = RedisServer().start()
    env = {
        "JOBTTL_REDIS_URL": redis_server.url,
        "KUBECONFIG": str(emulator.kubeconfig),
        "JOBTTL_QUEUE": "burst",
        "JOBTTL_RESYNC_INTERVAL": "0",
        "JOBTTL_DELETE_RATE": "0",
        "JOBTTL_WORKER_METRICS_PORT": "0",
        "JOBTTL_RESYNC_MAX_DELETIONS": str(LIMIT),
        "JOBTTL_RESYNC_MAX_SHARE": "1",
        "JOBTTL_FIRST_RUN_REVIEW": "off",
    }
    log_dir = tmp_path_factory.mktemp("burst-logs")
    sink, url = start_sink(env, log_dir)
    worker = JobttlProcess(["worker"], env, log_dir, "burst-worker").start()
    yield emulator, env, url, redis_server
    worker.stop()
    sink.stop()
    redis_server.stop()
    emulator.stop()


def post(url: str, obj: dict) -> requests.Response:
    meta = obj["metadata"]
    event = CloudEvent(
        attributes={
            "specversion": "1.0",
            "id": str(uuid.uuid4()),
            "source": "https://10.96.0.1",
            "type": "dev.knative.apiserver.resource.update",
            "kind": "TFJob",
            "apiversion": "kubeflow.org/v1",
            "name": meta["name"],
            "namespace": meta["namespace"],
        },
        data=obj,
    )
    message = to_binary_event(event)
    return requests.post(url, headers=message.headers, data=message.body, timeout=10)


def jobttl(env: dict, *args: str) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "jobttl", *args, "--json"],
        env={**env, "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, json.loads(done.stdout)


def test_a_burst_of_expired_jobs_from_events_is_held_until_an_operator_confirms(stack):
    emulator, env, url, redis_server = stack
    namespace = f"burst-{uuid.uuid4().hex[:6]}"
    expired = [
        seed_object(emulator.store, job_object(TFJOB, f"old-{i}", namespace, at=time.time() - 86400, ttl=60))
        for i in range(BURST)
    ]
    outcomes = [post(url, obj).headers["X-Jobttl-Outcome"] for obj in expired]
    assert outcomes == ["scheduled"] * LIMIT + ["held"] * (BURST - LIMIT)

    def deleted() -> set[str]:
        return {r["path"].rsplit("/", 1)[1] for r in emulator.requests("DELETE", f"/namespaces/{namespace}/")}

    # A canary past the guard, queued after the burst: once it is deleted, anything the worker
    # would have taken from the burst has been taken too.
    [canary] = [seed_object(emulator.store, job_object(TFJOB, "canary", namespace, at=time.time() - 86400, ttl=60))]
    settings = Settings.from_env(env)
    schedule = Schedule.from_settings(redis_server.client(), settings)
    Reconciler.from_settings(schedule, Audit.from_settings(schedule.redis, settings), settings).release(
        [(JobRef.of(canary), decide(canary, TFJOB, settings.policy))], "test"
    )
    wait_for(lambda: "canary" in deleted(), timeout=30, what="the worker to delete the canary")
    assert deleted() == {f"old-{i}" for i in range(LIMIT)} | {"canary"}, "the held ones stay"
    assert jobttl(env, "status")[1]["held"] == BURST - LIMIT

    code, report = jobttl(env, "resync")  # the operator reviews what is held...
    assert code == 3 and report["held"] == BURST - LIMIT
    code, report = jobttl(env, "resync", "--confirm", report["held_id"])  # ...and confirms that very set
    assert code == 0 and report["queued_now"] == BURST - LIMIT, report
    wait_for(
        lambda: deleted() == {o["metadata"]["name"] for o in expired} | {"canary"},
        timeout=30,
        what="the confirmed deletions",
    )
