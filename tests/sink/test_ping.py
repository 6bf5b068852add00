"""A Knative PingSource event asks the workers for a resync, coalesced (jobttl.sink.receive)."""

from cloudevents.core.bindings.http import to_binary_event
from cloudevents.core.v1.event import CloudEvent
from rq import Queue
from rq.serializers import JSONSerializer

from jobttl.core.store import keys
from jobttl.core.runtime.config import Settings
from jobttl.sink.app import create_app


def ping():
    event = CloudEvent(
        attributes={
            "specversion": "1.0",
            "id": "p1",
            "type": "dev.knative.sources.ping",
            "source": "/apis/v1/namespaces/jobttl/pingsources/jobttl-resync",
        },
        data={"reason": "resync"},
    )
    return to_binary_event(event)


def test_thirty_pings_in_a_burst_ask_for_one_resync_now_and_one_after_the_minimum_interval(redis_server, queue_name):
    redis_server.client().delete(keys.resync_next(queue_name))
    app = create_app(
        Settings.from_env(
            {"JOBTTL_REDIS_URL": redis_server.url, "JOBTTL_QUEUE": queue_name, "JOBTTL_RESYNC_MIN_INTERVAL": "600"}
        )
    )
    client = app.test_client()
    message = ping()
    responses = [client.post("/", headers=dict(message.headers), data=message.body) for _ in range(30)]
    assert all(r.status_code == 202 and r.data == b"" for r in responses)
    outcomes = [r.headers["X-Jobttl-Outcome"] for r in responses]
    assert outcomes == ["resync-requested", "resync-deferred"] + ["resync-coalesced"] * 28
    queue = Queue(queue_name, connection=redis_server.client(), serializer=JSONSerializer)
    assert [job.func_name for job in queue.get_jobs()] == ["jobttl.worker.tasks.resync"]
    [deferred] = queue.scheduled_job_registry.get_job_ids()
    ran = int(queue.get_job_ids()[0].split("-")[1])
    assert deferred == f"resync-{ran + 600}", "the deferred one runs when the interval after the first is over"
    redis_server.client().delete(keys.resync_next(queue_name))


def test_with_no_minimum_interval_each_ping_asks_for_a_resync_now(redis_server, queue_name):
    redis_server.client().delete(keys.resync_next(queue_name))
    app = create_app(
        Settings.from_env(
            {"JOBTTL_REDIS_URL": redis_server.url, "JOBTTL_QUEUE": queue_name, "JOBTTL_RESYNC_MIN_INTERVAL": "0"}
        )
    )
    message = ping()
    response = app.test_client().post("/", headers=dict(message.headers), data=message.body)
    assert response.headers["X-Jobttl-Outcome"] == "resync-requested"
    assert not redis_server.client().exists(keys.resync_next(queue_name))


def test_other_unknown_event_types_are_ignored_and_do_not_become_metric_labels(redis_server, queue_name):
    app = create_app(Settings.from_env({"JOBTTL_REDIS_URL": redis_server.url, "JOBTTL_QUEUE": queue_name}))
    client = app.test_client()
    event = CloudEvent(
        attributes={"specversion": "1.0", "id": "x", "type": "com.example.attacker.chose.this", "source": "s"}, data={}
    )
    message = to_binary_event(event)
    response = client.post("/", headers=dict(message.headers), data=message.body)
    assert response.status_code == 202 and response.headers["X-Jobttl-Outcome"] == "ignored:other-event-type"
    metrics = client.get("/metrics").text
    assert "attacker" not in metrics
    assert 'jobttl_sink_events_total{outcome="ignored",type="other"} 1.0' in metrics
