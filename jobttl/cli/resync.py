"""`jobttl resync`: make the schedule in Redis match the cluster, now, as a worker's resync does.

Exit 0 done, 3 held by the blast-radius guard, 4 another resync running, 5 a --confirm naming
a held set that is no longer the one held; 1 otherwise (incomplete: errors in the report; or a Redis
it cannot use).
"""

from __future__ import annotations

import argparse
import json

from jobttl.cli.connection import connect, redis_problem
from jobttl.cli.parsing import add_command
from jobttl.core.runtime.config import Settings
from jobttl.core.services import operations

ENVIRONMENT = (
    "JOBTTL_REDIS_URL",
    "JOBTTL_QUEUE",
    "KUBECONFIG",
    "JOBTTL_POLICY",
    "JOBTTL_RESYNC_MAX_DELETIONS",
    "JOBTTL_RESYNC_MAX_SHARE",
)
EXIT_CODES = {"done": 0, "held": 3, "already-running": 4, "stale-confirmation": 5}


def add_commands(commands: argparse._SubParsersAction) -> None:
    resync = add_command(commands, "resync", run, "make the schedule in Redis match the cluster, now", ENVIRONMENT)
    resync.add_argument(
        "--confirm",
        metavar="HELD_ID",
        help="delete the deletions held by the blast-radius guard (those still due); HELD_ID, from "
        "the report, makes sure they are the ones you reviewed (default: hold them again if "
        "there are too many)",
    )
    resync.add_argument("--json", action="store_true", help="print the report as JSON")
    resync.add_argument("--force", action="store_true", help="use this Redis even if it holds no jobttl schedule")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from redis.exceptions import RedisError

    from jobttl.core.store.guard import HeldDeletions
    from jobttl.core.services import resync
    from jobttl.worker import tasks

    try:
        connect(settings, args.force)  # a resync writes the schedule: never into a Redis that is not jobttl's
    except (operations.UnknownRedis, RedisError) as exc:
        return redis_problem(exc, settings)
    ctx = tasks.configure(settings, notices=False)
    report = resync.run(ctx, confirm=args.confirm)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        from jobttl.cli import tables

        tables.resync(report.as_dict(), [h.ref for h in HeldDeletions(ctx.redis).all()[:10]], settings)
    return EXIT_CODES.get(report.status, 1)
