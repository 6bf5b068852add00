"""One object nested 1,500 levels deep disables nothing: the resync, the worker and the sink go on.

The fault: a Workflow nested 1,500 levels deep (the API server accepts far deeper, and
Argo's CRD preserves unknown fields) made `jobttl resync` exit 1 with a RecursionError
from JSON decoding, without a report, dropping what it had gathered: an expired TFJob in
the same run was never queued. The sink answered the same object with a 500.

Here the emulator (in this process) serves such a Workflow next to an expired TFJob. The
emulator decodes and encodes with the standard library, which recurses: this module raises
the interpreter's recursion limit while it runs, so that the API side can hold what a real
API server holds. jobttl's own processes run with the default limit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import requests

from jobttl_emulator import Resource, seed_object
from jobttl.core.store.keys import PENDING_INDEX
from jobttl.core.domain.kinds.registry import TFJOB, WORKFLOW
from tests.fixtures import job_object
from tests.services import ROOT, JobttlProcess, RedisServer, start_emulator, start_sink, wait_for

DEPTH = 1500
CORE_EVENTS = Resource("", "v1", "Event", "events", status_subresource=False)


def nested(depth: int) -> dict:
    value: dict = {"bottom": True}
    for level in range(depth):
        value = {"level": level, "inner": value} if level % 2 else {"items": [value]}
    return value


def deep_workflow(name: str, namespace: str, finished: float) -> dict:
    obj = job_object(WORKFLOW, name, namespace, at=finished, ttl={"secondsAfterCompletion": 60})
    obj["spec"]["arguments"] = {"parameters": [], "x-deep": nested(DEPTH)}  # preserved unknown fields
    return obj


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)
    redis_server = RedisServer().start()
    emulator = start_emulator(
        tmp_path_factory.mktemp("deep"),
        [Resource(k.group, k.version, k.kind, k.plural) for k in (TFJOB, WORKFLOW)] + [CORE_EVENTS],
    )
    an_hour_ago = time.time() - 3600
    objects = {
        "deep": seed_object(emulator.store, deep_workflow("deep", "argo", an_hour_ago)),
        "tfjob": seed_object(emulator.store, job_object(TFJOB, "expired", "ml", at=an_hour_ago, ttl=60)),
        "later": seed_object(emulator.store, job_object(TFJOB, "later", "ml", at=time.time(), ttl=3600)),
    }
    env = {
        "JOBTTL_REDIS_URL": redis_server.url,
        "KUBECONFIG": str(emulator.kubeconfig),
        "JOBTTL_QUEUE": "deep",
        "JOBTTL_FIRST_RUN_REVIEW": "off",
        "JOBTTL_RESYNC_INTERVAL": "0",
        "JOBTTL_DELETE_RATE": "0",
        "JOBTTL_WORKER_METRICS_PORT": "0",
        "JOBTTL_RESYNC_MAX_SHARE": "1",
    }  # two of three objects are due: not a blast here
    try:
        yield emulator, redis_server, env, objects, tmp_path_factory.mktemp("deep-logs")
    finally:
        emulator.stop()
        redis_server.stop()
        sys.setrecursionlimit(limit)


def run(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobttl", *args],
        env={**env, "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_emulator_really_serves_the_deep_workflow(cluster):
    emulator, *_ = cluster
    response = requests.get(f"{emulator.url}/apis/argoproj.io/v1alpha1/namespaces/argo/workflows/deep", timeout=10)
    assert response.status_code == 200 and response.content.count(b'"inner"') == DEPTH // 2


def test_a_resync_decides_the_deep_object_and_still_queues_the_expired_tfjob(cluster):
    emulator, redis_server, env, objects, _ = cluster
    done = run(env, "resync", "--json", "--force")  # a fresh Redis: no worker has marked it yet
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert "RecursionError" not in done.stderr
    assert report["status"] == "done" and report["seen"] == 3, report
    pending = {m.decode(): int(s) for m, s in redis_server.client().zrange(PENDING_INDEX, 0, -1, withscores=True)}
    assert objects["tfjob"]["metadata"]["uid"] in pending, "the expired TFJob is queued in the same run"
    assert objects["later"]["metadata"]["uid"] in pending
    # The deep Workflow is read (item by item) and decided like any other: it expired, so it is queued too.
    assert objects["deep"]["metadata"]["uid"] in pending and report["rejected"] == 0, report
    assert report["queued_now"] == 2


def test_a_worker_deletes_the_deep_workflow_and_the_tfjob(cluster):
    emulator, redis_server, env, objects, log_dir = cluster
    worker = JobttlProcess(["worker"], env, log_dir, "deep-worker").start()
    try:
        wait_for(
            lambda: (
                {r["path"].rsplit("/", 1)[1] for r in emulator.requests("DELETE") if r["status"] == 200}
                >= {"deep", "expired"}
            ),
            timeout=30,
            what="both expired objects to be deleted",
        )
    finally:
        worker.stop()
    assert "RecursionError" not in worker.log()
    assert "later" not in {r["path"].rsplit("/", 1)[1] for r in emulator.requests("DELETE")}


@pytest.fixture(scope="module")
def sink_url(cluster):
    _, _, env, _, log_dir = cluster
    sink, url = start_sink(env, log_dir)
    yield url
    sink.stop()


@pytest.mark.parametrize("structured", [False, True], ids=["binary", "structured"])
def test_the_sink_answers_the_deep_object_400(cluster, sink_url, structured):
    redis = cluster[1].client()
    data = json.dumps(deep_workflow("deep-event", "argo", time.time() - 3600)).encode()
    attributes = {
        "specversion": "1.0",
        "id": "1",
        "source": "https://10.96.0.1",
        "type": "dev.knative.apiserver.resource.update",
    }
    if structured:
        headers = {"content-type": "application/cloudevents+json"}
        body = (
            json.dumps({**attributes, "datacontenttype": "application/json", "data": "DATA"})
            .encode()
            .replace(b'"DATA"', data)
        )
    else:
        headers = {**{f"ce-{k}": v for k, v in attributes.items()}, "content-type": "application/json"}
        body = data
    before = redis.zcard(PENDING_INDEX)
    response = requests.post(sink_url, headers=headers, data=body, timeout=10)
    assert response.status_code == 400 and "depth limit" in response.json()["error"], response.text
    assert redis.zcard(PENDING_INDEX) == before
