"""The composition root: the sink, the worker and the command share one way of building their graph."""

from __future__ import annotations

import ast
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.runtime.config import Settings
from jobttl.core.services import graph
from jobttl.core.store import redisconn, tasks
from jobttl.core.store.tasks import Tasks
from jobttl.sink.context import SinkContext
from tests.fixtures import finished_status, tfjob, with_server_fields

ROOT = Path(graph.__file__).resolve().parents[2]
# Where the shared parts may be made: the composition root, and what they are made of.
MADE_IN = {"core/services/graph.py"}
SHARED = {"Schedule", "Audit", "Reconciler"}


def settings_for(redis, queue_name, **env) -> Settings:
    port = redis.connection_pool.connection_kwargs["port"]
    return Settings.from_env(
        {
            "JOBTTL_REDIS_URL": f"redis://127.0.0.1:{port}/0",
            "JOBTTL_QUEUE": queue_name,
            "JOBTTL_FIRST_RUN_REVIEW": "off",
            **env,
        }
    )


def test_the_graph_wires_one_redis_under_the_schedule_the_audit_and_the_reconciler(redis, queue_name):
    built = graph.build(settings_for(redis, queue_name), redisconn.CLI, metrics=False)
    assert built.schedule.redis is built.redis and built.audit.redis is built.redis
    assert built.reconciler.schedule is built.schedule and built.reconciler.audit is built.audit
    assert built.schedule.queue.name == queue_name and built.metrics is None
    assert built.schedule.tasks == tasks.declared()  # what the worker declared, read from the package
    assert built.operations().schedule is built.schedule


def test_a_process_serving_metrics_gets_the_schedules_gauges_read_from_its_redis(redis, queue_name):
    built = graph.build(settings_for(redis, queue_name), redisconn.WORKER, redis=redis)
    text = generate_latest(built.metrics.registry).decode()
    assert "jobttl_pending_deletions" in text and built.audit.metrics is built.metrics


def test_the_sinks_context_is_the_shared_graph_with_the_sinks_own_parts(redis, queue_name):
    sink = SinkContext.build(settings_for(redis, queue_name), redis=redis)
    assert isinstance(sink, graph.Graph) and sink.redis is redis and sink.probe is redis
    assert sink.reconciler.schedule is sink.schedule and sink.metrics is not None


def test_tasks_given_to_the_graph_are_what_it_books(redis, queue_name):
    own = Tasks(
        delete="tests.core.test_graph.delete", warn="tests.core.test_graph.warn", resync="tests.core.test_graph.resync"
    )
    built = graph.build(settings_for(redis, queue_name), redisconn.CLI, redis=redis, metrics=False, tasks=own)
    assert built.schedule.request_resync()
    assert built.schedule.queue.jobs[0].func_name == own.resync


def test_no_process_builds_the_shared_parts_but_the_composition_root():
    """A Schedule, Audit or Reconciler made anywhere else in the shipped code is a second wiring
    that drifts (different timeouts, no metrics, another queue)."""
    made = []
    for folder in ("core", "sink", "worker", "watcher", "jobttl/cli"):
        for path in (ROOT / folder).rglob("*.py"):
            where = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call):
                    func = node.func
                    name = (
                        func.value.id
                        if isinstance(func, ast.Attribute)
                        and isinstance(func.value, ast.Name)
                        and func.attr == "from_settings"
                        else func.id
                        if isinstance(func, ast.Name)
                        else None
                    )
                    if name in SHARED and where not in MADE_IN:
                        made.append(f"{where}:{node.lineno}: {name}")
    assert made == []


def test_the_sinks_read_api_gets_operations_that_cannot_write(redis, queue_name):
    sink = SinkContext.build(settings_for(redis, queue_name), redis=redis)
    obj = with_server_fields(tfjob(f"train-{uuid.uuid4().hex[:6]}", "team", ttl=600))
    obj["status"] = finished_status(time.time())
    sink.reconciler.reconcile(obj, TFJOB, "event")
    name = obj["metadata"]["name"]
    assert sink.operations().find("team", name)  # it can read what is pending
    with pytest.raises(RuntimeError, match="without a Reconciler"):
        sink.operations().postpone("team", name, 60)
    assert (
        graph.build(settings_for(redis, queue_name), redisconn.CLI, redis=redis, metrics=False).operations().reconciler
        is not None
    )  # the command's can


def test_the_sinks_own_connection_has_the_sinks_timeouts_and_waits_for_replicas(redis, queue_name):
    """Built from the settings (no Redis given): the sink's role and JOBTTL_SINK_MIN_REPLICAS, and
    a probe connection with the probe's shorter timeouts."""
    sink = SinkContext.build(settings_for(redis, queue_name, JOBTTL_SINK_MIN_REPLICAS="1"))
    options = sink.redis.connection_pool.connection_kwargs
    assert (options["socket_connect_timeout"], options["socket_timeout"]) == (
        redisconn.SINK.connect_timeout,
        redisconn.SINK.socket_timeout,
    )
    assert isinstance(sink.redis, redisconn.ReplicatedRedis) and sink.redis.min_replicas == 1
    probe = sink.probe.connection_pool.connection_kwargs
    assert (probe["socket_connect_timeout"], probe["socket_timeout"]) == (
        redisconn.PROBE.connect_timeout,
        redisconn.PROBE.socket_timeout,
    )
    assert not isinstance(sink.probe, redisconn.ReplicatedRedis)
