"""The operator commands: `status`, `pending`, `show`, `history`, `held`, `failed`, `retry`, `cancel`, `postpone`.

Redis only, never the cluster. Each command's function here returns what it prints with --json;
jobttl/cli/tables.py has the same-named function that prints it for humans. Exit 0 done, 1
nothing (or several things) by that name, or no Redis.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from jobttl.cli.connection import connect, redis_problem
from jobttl.cli.parsing import add_command, count, job, later, since
from jobttl.core.runtime.config import Settings
from jobttl.core.services import operations

ENVIRONMENT = ("JOBTTL_REDIS_URL", "JOBTTL_QUEUE", "JOBTTL_REDIS_CA_FILE")


def add_commands(commands: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_argument("--force", action="store_true", help="use this Redis even if it holds no jobttl schedule")

    def command(name: str, operation, help: str) -> argparse.ArgumentParser:
        parser = add_command(commands, name, run, help, ENVIRONMENT, quiet=True, parents=[common])
        parser.set_defaults(operation=operation)
        return parser

    _add_reading_commands(command)
    _add_acting_commands(command)


def _add_reading_commands(command) -> None:
    """The commands that only read: status, pending, show, history, held, failed."""
    command(
        "status",
        status,
        "counts of pending, due, failed, held and deleted jobs; health of Redis, workers, the scheduler and the clocks",
    )

    pending_parser = command(
        "pending", pending, "pending deletions in due order, with their TTL and where it came from"
    )
    pending_parser.add_argument("--namespace", help="only this namespace (default: every namespace)")
    pending_parser.add_argument(
        "--kind", help="only this kind, e.g. TFJob, Job (batch/v1's), Job.batch.volcano.sh (default: every kind)"
    )
    pending_parser.add_argument("--limit", type=count, default=100, help="at most this many")

    _job_arguments(
        command(
            "show",
            show,
            "everything known about one job: pending deletion, the latest decision "
            "about every UID it had (why it is kept, too), history, tombstone",
        )
    )

    history_parser = command("history", history, "the audit trail, newest first")
    history_parser.add_argument(
        "job",
        nargs="?",
        type=job,
        metavar="NAMESPACE/NAME",
        help="only this job's entries, every UID that had the name (default: every job)",
    )
    history_parser.add_argument(
        "--since",
        type=since,
        metavar="DURATION_OR_TIME",
        help="only entries since then: a duration back from now (2h) or an RFC 3339 time "
        "(2030-01-31T00:00:00Z) (default: the whole trail)",
    )
    history_parser.add_argument(
        "--event",
        help="only this event, e.g. deleted, delete-requested, cancelled, failed, stuck (default: every event)",
    )
    history_parser.add_argument("--namespace", help="only this namespace (default: every namespace)")
    history_parser.add_argument("--limit", type=count, default=50, help="at most this many")

    command(
        "held",
        held,
        "deletions the blast-radius guard holds for confirmation (on a first install: those "
        "already due at install), with the policy rule behind each and the id to confirm",
    )

    command("failed", failed, "failed deletions, with their RQ job id and the error, and stuck ones")


def _add_acting_commands(command) -> None:
    """The commands that change what happens: retry, cancel, postpone (and their --undo)."""
    retry_parser = command("retry", retry, "run a failed deletion again")
    which = retry_parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "job_id", nargs="?", metavar="JOB_ID", help="the RQ job id, from `jobttl failed` (or --all-failed)"
    )
    which.add_argument("--all-failed", action="store_true", help="every failed deletion")

    cancel_parser = command(
        "cancel",
        cancel,
        "never delete this job (recorded in history); with nothing pending, "
        "the keep is recorded for when a deletion would be booked",
    )
    _job_arguments(cancel_parser)
    cancel_parser.add_argument(
        "--undo",
        action="store_true",
        help="take a cancel back: the deletion is decided again from the job and the policy "
        "(the workers are asked for a resync)",
    )

    postpone_parser = command("postpone", postpone, "delete this job later than planned")
    _job_arguments(postpone_parser)
    postpone_parser.add_argument(
        "duration",
        type=later,
        nargs="?",
        metavar="DURATION",
        help="how much later, e.g. 2h or 3d (required, unless --undo)",
    )
    postpone_parser.add_argument(
        "--undo",
        action="store_true",
        help="take a postpone back: the deletion is decided again from the job and the "
        "policy (the workers are asked for a resync)",
    )


def _job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", type=job, metavar="NAMESPACE/NAME", help="the job")
    parser.add_argument(
        "--kind",
        help="e.g. TFJob, or Job.batch.volcano.sh where a Kind names several (Job: "
        "batch/v1's); needed only when jobs of several kinds share the name "
        "(default: any kind)",
    )


def check_postpone(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`postpone` takes DURATION or --undo, not both: said with its usage (argparse cannot say it)."""
    if args.command == "postpone" and (args.duration is None) != args.undo:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices["postpone"].error("give DURATION, or --undo" if not args.undo else "--undo takes no DURATION")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run an operator command: 0 done, 1 nothing (or several things) by that name or no Redis."""
    from redis.exceptions import RedisError

    from jobttl.cli import tables
    from jobttl.core.domain.wire.identity import InvalidIdentity

    try:
        data = args.operation(args, connect(settings, args.force))
    except (operations.UnknownRedis, RedisError) as exc:
        return redis_problem(exc, settings)
    except (operations.NotFound, operations.Ambiguous, operations.AlreadyKept, InvalidIdentity) as exc:
        print(f"jobttl: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        getattr(tables, args.command)(data)
    return 0


# --- what each command prints with --json ----------------------------------------------------------


def status(args, ops) -> dict:
    return ops.status()


def held(args, ops) -> dict:
    return ops.held()


def pending(args, ops) -> dict:
    items, total = ops.pending(args.namespace, args.kind, limit=args.limit)
    now = time.time()
    return {
        "items": [p.as_dict(now) for p in items],
        "total": total,
        "dryRunWouldDelete": ops.would_delete(args.namespace, args.kind),
    }


def show(args, ops) -> dict:
    return ops.find(*args.job, args.kind)


def history(args, ops) -> dict:
    namespace, name = args.job if args.job else (args.namespace, None)
    return {"items": ops.history(args.since, args.limit, args.event, namespace, name)}


def failed(args, ops) -> dict:
    return {"items": [f.as_dict() for f in ops.failed()], "stuck": ops.stuck()}


def retry(args, ops) -> dict:
    return {"requeued": ops.retry(args.job_id)}


def cancel(args, ops) -> dict:
    if args.undo:
        return ops.undo(*args.job, "cancel", args.kind).as_dict()
    return ops.cancel(*args.job, args.kind).as_dict(time.time())


def postpone(args, ops) -> dict:
    if args.undo:
        return ops.undo(*args.job, "postpone", args.kind).as_dict()
    return ops.postpone(*args.job, args.duration, args.kind).as_dict(time.time())
