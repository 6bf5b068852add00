"""Whoever can write to Redis cannot run code in the worker (issue 26 §1).

A real `jobttl worker` process, a real redis-server, the API emulator; jobs put on the worker's
queue with RQ's own API, as anyone holding Redis's password could. Each names something that,
run or even imported, leaves a marker file: none appears, each job ends failed (never retried),
the worker logs `foreign-job` with its id and function and counts it in
`jobttl_foreign_jobs_total`, and jobttl's own tasks still run beside them.
"""

from __future__ import annotations

import json

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from rq import Callback, Queue, Retry
from rq.job import Job
from rq.serializers import JSONSerializer

from tests.services import JobttlProcess, free_port, wait_for

# A module that leaves a marker when it is imported: a stored name pointing into it proves an import.
PLANTED = """\
import pathlib
pathlib.Path({marker!r}).write_text("imported")

def run(*args, **kwargs):
    pathlib.Path({marker!r}).write_text("ran")
"""


@pytest.fixture
def worker(emulator, redis_server, tmp_path, queue_name):
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "jobttl_planted.py").write_text(PLANTED.format(marker=str(tmp_path / "imported")))
    port = free_port()
    env = {
        "JOBTTL_REDIS_URL": redis_server.url,
        "KUBECONFIG": str(emulator.kubeconfig),
        "JOBTTL_QUEUE": queue_name,
        "JOBTTL_RESYNC_INTERVAL": "0",
        "JOBTTL_DELETE_RATE": "0",
        "JOBTTL_WORKER_METRICS_PORT": str(port),
        # The planted module is importable by the worker: only jobttl's refusal keeps it out.
        "PYTHONPATH": str(planted),
    }
    process = JobttlProcess(["worker"], env, tmp_path, "worker").start()
    yield process, f"http://127.0.0.1:{port}/metrics"
    process.stop()


def foreign_jobs(metrics_url: str) -> float | None:
    try:
        text = requests.get(metrics_url, timeout=2).text
    except requests.ConnectionError:
        return None
    return next(
        (
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "jobttl_foreign_jobs_total"
        ),
        None,
    )


def ended(job: Job) -> str | None:
    status = job.get_status(refresh=True)
    return status.value if status is not None and status.value in ("finished", "failed") else None


def test_a_job_jobttl_did_not_book_is_failed_without_importing_anything(worker, redis_server, tmp_path, queue_name):
    process, metrics_url = worker
    wait_for(lambda: foreign_jobs(metrics_url) is not None, timeout=60, what="the worker's metrics")
    assert foreign_jobs(metrics_url) == 0, "exported at 0 from the start, so the alert sees the first one"
    queue = Queue(queue_name, connection=redis_server.client(), serializer=JSONSerializer)
    touched = tmp_path / "touched"
    imported = tmp_path / "imported"
    forged = [
        # The case: a shell command run as the worker, asking RQ to retry it.
        queue.enqueue("subprocess.check_output", ["touch", str(touched)], retry=Retry(max=3)),
        queue.enqueue("os.system", f"touch {touched}"),
        # A module outside jobttl: importing it is already running it.
        queue.enqueue("jobttl_planted.run"),
        # jobttl's own task, with someone else's code as its callbacks.
        queue.enqueue(
            "jobttl.worker.tasks.warn_upcoming",
            "no-such-uid",
            0,
            on_failure=Callback("jobttl_planted.run"),
            on_success=Callback("jobttl_planted.run"),
        ),
    ]
    ours = queue.enqueue("jobttl.worker.tasks.warn_upcoming", "no-such-uid", 0)
    for job in [*forged, ours]:
        wait_for(lambda job=job: ended(job), timeout=60, what=f"job {job.id} ({job.func_name}) to end")

    assert not touched.exists() and not imported.exists(), "nothing a forged job names ran or was imported"
    assert [ended(job) for job in forged] == ["failed"] * len(forged)
    assert all("ForeignJob" in (job.latest_result().exc_string or "") for job in forged)
    assert ended(ours) == "finished" and ours.return_value() == "skipped:not-pending", "jobttl's tasks still run"

    lines = [json.loads(line) for line in process.log().splitlines() if line.startswith("{")]
    refusals = [line for line in lines if line.get("event") == "foreign-job"]
    refused = {line["job_id"]: line for line in refusals}
    # One refusal each: the first job's Retry(max=3) was the forger's, and is not honoured (a retried
    # job is failed only after its last try, so each try would have been refused and logged).
    assert sorted(line["job_id"] for line in refusals) == sorted(job.id for job in forged)
    assert "subprocess.check_output" in refused[forged[0].id]["function"]
    assert "on_" in refused[forged[3].id]["detail"] and "jobttl_planted.run" in refused[forged[3].id]["detail"]
    assert wait_for(lambda: foreign_jobs(metrics_url) == len(forged), timeout=10, what="the counter")


def test_the_worker_s_job_class_resolves_nothing_outside_jobttl_s_tasks(
    redis_server, tmp_path, monkeypatch, queue_name
):
    """The second guard, wherever RQ resolves a stored name without performing the job: an abandoned
    job's failure callback in RQ's registry cleanup, a function asked for directly."""
    import sys
    import uuid

    from rq.registry import StartedJobRegistry, clean_registries

    from jobttl.core.store.foreign import CheckedJob, ForeignJob

    planted = f"jobttl_planted_{uuid.uuid4().hex[:8]}"  # not imported by an earlier test in this process
    (tmp_path / f"{planted}.py").write_text(PLANTED.format(marker=str(tmp_path / "imported")))
    monkeypatch.syspath_prepend(str(tmp_path))
    redis = redis_server.client()
    queue = Queue(queue_name, connection=redis, serializer=JSONSerializer, job_class=CheckedJob)
    stored = queue.enqueue(f"{planted}.run")
    with pytest.raises(ForeignJob, match=f"'{planted}.run' is not one of jobttl's tasks"):
        CheckedJob.fetch(stored.id, connection=redis, serializer=JSONSerializer).func  # noqa: B018 - reading it refuses
    ours = CheckedJob.fetch(
        queue.enqueue("jobttl.worker.tasks.warn_upcoming", "x", 0).id, connection=redis, serializer=JSONSerializer
    )
    assert ours.func.__name__ == "warn_upcoming"
    # 0.1's name is today's task of its role.
    earlier = CheckedJob.fetch(
        queue.enqueue("worker.tasks.warn_upcoming", "x", 0).id, connection=redis, serializer=JSONSerializer
    )
    assert earlier.func.__name__ == "warn_upcoming"

    # An abandoned job (STARTED, its heartbeat long gone) naming a failure callback: RQ's cleanup
    # asks the queue's job class (the worker's: CheckedJob) for the callback, which refuses; RQ logs
    # that and fails the job. The worker's maintenance runs the same `clean_registries`.
    abandoned = queue.enqueue("jobttl.worker.tasks.warn_upcoming", "x", 0, on_failure=Callback(f"{planted}.run"))
    registry = StartedJobRegistry(queue=queue)
    with redis.pipeline() as pipe:
        abandoned.set_status("started", pipeline=pipe)
        pipe.zadd(registry.key, {f"{abandoned.id}:exec": 1})
        pipe.execute()
    clean_registries(queue)
    assert abandoned.id in queue.failed_job_registry.get_job_ids()
    assert planted not in sys.modules and not (tmp_path / "imported").exists()
