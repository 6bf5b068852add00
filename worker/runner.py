"""Run the RQ worker that performs due deletions, with RQ's scheduler.

`SimpleWorker` runs each job in this process instead of forking one per job: a fork costs
~12 ms and throws away the Kubernetes client's connection pool, while a deletion is one GET
and one DELETE. The scheduler (which moves due deletions from the schedule onto the queue)
runs alongside in its own process; only one scheduler per queue holds the lock at a time.
"""

from __future__ import annotations

import logging

from prometheus_client import start_http_server
from rq import SimpleWorker
from rq.serializers import JSONSerializer

from jobttl import logs
from jobttl.config import Settings
from worker import resync, tasks

log = logging.getLogger("jobttl.worker")


def run(settings: Settings, burst: bool = False) -> None:
    ctx = tasks.configure(settings)  # fail fast: the Kubernetes config is loaded now
    redis = ctx.schedule.redis
    redis.ping()
    if settings.worker_metrics_port:
        start_http_server(settings.worker_metrics_port, registry=ctx.metrics.registry)
    worker = SimpleWorker([ctx.schedule.queue.name], connection=redis, serializer=JSONSerializer)
    logs.record(log, "worker-start", queue=settings.queue_name, burst=burst)
    if settings.resync_interval:
        # Events may have been missed while no worker ran: start from the cluster's truth.
        resync.request(ctx.schedule.queue)
    worker.work(burst=burst, with_scheduler=True, logging_level=settings.log_level)
