"""Plain RQ workers for the baselines: RQ's SimpleWorker or its forking Worker, as shipped.

    python -m bench.baseline_worker --redis URL --queue NAME --worker simple|fork [--scheduler] [--burst]

The task module (and so the kubernetes client library) is imported before work starts, as a
deployment's worker image would have it; RQ itself is not changed.
"""

from __future__ import annotations

import argparse

from redis import Redis
from rq import Queue, SimpleWorker, Worker

import bench.baseline_tasks  # noqa: F401  (imported up front: a forked work horse inherits it)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--worker", choices=("simple", "fork"), required=True)
    parser.add_argument("--scheduler", action="store_true")
    parser.add_argument("--burst", action="store_true")
    args = parser.parse_args()
    connection = Redis.from_url(args.redis)
    worker_class = SimpleWorker if args.worker == "simple" else Worker
    worker = worker_class([Queue(args.queue, connection=connection)], connection=connection)
    worker.work(burst=args.burst, with_scheduler=args.scheduler, logging_level="WARNING")


if __name__ == "__main__":
    main()
