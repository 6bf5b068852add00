"""RQ's scheduler on its own, as a worker started `with_scheduler` runs it, for row 7.

    python -m bench.scheduler_proc --redis URL --queue NAME --as jobttl|plain

``jobttl``: the Redis client of jobttl's worker role (`jobttl.core.store.redisconn.WORKER`) and
RQ's JSON serializer, what `jobttl worker` hands RQ's scheduler; ``plain``: a default Redis
client and RQ's default serializer. Either way RQ's own `RQScheduler` does the moving.
"""

from __future__ import annotations

import argparse

from redis import Redis
from rq import Queue
from rq.scheduler import RQScheduler
from rq.serializers import JSONSerializer

from jobttl.core.store import redisconn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--as", dest="side", choices=("jobttl", "plain"), required=True)
    args = parser.parse_args()
    if args.side == "jobttl":
        connection, serializer = redisconn.connect(args.redis, redisconn.WORKER), JSONSerializer
    else:
        connection, serializer = Redis.from_url(args.redis), None
    queue = Queue(args.queue, connection=connection, serializer=serializer)
    scheduler = RQScheduler([queue], connection=connection, serializer=serializer)
    assert scheduler.acquire_locks(), "another scheduler holds the lock"
    scheduler.work()


if __name__ == "__main__":
    main()
