"""The ``jobttl`` command: one entry point for every process jobttl runs."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from datetime import datetime

from jobttl import logs
from jobttl.config import ConfigError, Settings
from worker import operations

log = logging.getLogger("jobttl")


def _sink(args: argparse.Namespace, settings: Settings) -> None:
    from sink.server import serve

    serve(settings, host=args.host, port=args.port, threads=args.threads)


def _worker(args: argparse.Namespace, settings: Settings) -> None:
    from worker.runner import run

    run(settings, burst=args.burst)


def _resync(args: argparse.Namespace, settings: Settings) -> int:
    from worker import resync, tasks

    ctx = tasks.configure(settings)
    report = tasks.run_resync(ctx, confirm=args.confirm)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(f"resync {report.status} in {report.duration}s: saw {report.seen} jobs; "
              f"{report.scheduled} scheduled, {report.moved} moved, {report.unchanged} unchanged, "
              f"{report.cancelled} cancelled, {report.queued_now} queued for deletion now, {report.held} held")
        for kind in report.missing_kinds:
            print(f"  not served by this cluster (skipped): {kind}")
        for error in report.errors:
            print(f"  error: {error}")
        if report.held:
            print(f"  {report.held} deletions held by the blast-radius guard "
                  f"(JOBTTL_RESYNC_MAX_DELETIONS={settings.resync_max_deletions}, "
                  f"JOBTTL_RESYNC_MAX_SHARE={settings.resync_max_share}); for example:")
            for ref, decision in resync.held(ctx.schedule.redis)[:10]:
                print(f"    {ref}  expired at {decision.expires_at} ({decision.ttl_source})")
            print(f"  run `jobttl resync --confirm {report.held_id}` to delete them")
        if report.status == "stale-confirmation":
            print(f"  not confirmed: the held deletions are not the set you named (now: {report.held_id or 'none'}); "
                  "run `jobttl resync` to see them", file=sys.stderr)
    return {"done": 0, "held": 3, "already-running": 4, "stale-confirmation": 5}.get(report.status, 1)


def _watch(args: argparse.Namespace, settings: Settings) -> None:
    from watcher.watch import run
    from worker.kinds import KindRegistry
    from worker.kube import load_api_client

    run(load_api_client(settings.kubeconfig), KindRegistry().kinds, args.sink)


# --- operator commands: Redis only, never the cluster -----------------------------------------
# Each returns what it prints with --json; jobttl/tables.py has the same-named function
# that prints it for humans.

def _connect(settings: Settings) -> operations.Operations:
    from redis import Redis

    from worker.audit import Audit
    from worker.schedule import Schedule

    redis = Redis.from_url(settings.redis_url, socket_connect_timeout=5, socket_timeout=30)
    return operations.Operations(redis, Schedule.from_settings(redis, settings), Audit.from_settings(redis, settings))


def _status(args, ops) -> dict:
    return ops.status()


def _pending(args, ops) -> dict:
    items, total = ops.pending(args.namespace, args.kind, limit=args.limit)
    now = time.time()
    return {"items": [operations.pending_as_dict(p, now) for p in items], "total": total}


def _show(args, ops) -> dict:
    return ops.find(*args.job, args.kind)


def _history(args, ops) -> dict:
    return {"items": ops.history(args.since, args.limit, args.event, args.namespace)}


def _failed(args, ops) -> dict:
    return {"items": [f.as_dict() for f in ops.failed()]}


def _retry(args, ops) -> dict:
    return {"requeued": ops.retry(args.job_id)}


def _cancel(args, ops) -> dict:
    return operations.pending_as_dict(ops.cancel(*args.job, args.kind), time.time())


def _postpone(args, ops) -> dict:
    return operations.pending_as_dict(ops.postpone(*args.job, args.duration, args.kind), time.time())


def _operate(args: argparse.Namespace, settings: Settings) -> int:
    """Run an operator command: 0 done, 1 nothing (or several things) by that name or no Redis."""
    from redis.exceptions import RedisError

    from jobttl import tables

    try:
        data = args.operation(args, _connect(settings))
    except (operations.NotFound, operations.Ambiguous) as exc:
        print(f"jobttl: {exc}", file=sys.stderr)
        return 1
    except RedisError as exc:
        print(f"jobttl: cannot use Redis (JOBTTL_REDIS_URL): {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        getattr(tables, args.command)(data)
    return 0


def _job(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    return namespace, name


def _duration(text: str) -> int:
    from worker.durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def _since(text: str) -> float:
    """A duration back from now (`2h`) or a point in time (RFC 3339), as Unix seconds."""
    try:
        return time.time() - _duration(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration such as 2h or an RFC 3339 time, got {text!r}") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time zone (e.g. Z), got {text!r}")
    return when.timestamp()


def _add_operator_commands(commands) -> None:
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def command(name: str, operation, help: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help, parents=[as_json])
        parser.set_defaults(run=_operate, operation=operation)
        return parser

    def job_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("job", type=_job, metavar="NAMESPACE/NAME")
        parser.add_argument("--kind", help="e.g. TFJob; needed only when jobs of several kinds share the name")

    command("status", _status, "counts of pending, due, failed and deleted jobs; health of Redis, workers, scheduler")

    pending = command("pending", _pending, "pending deletions in due order, with their TTL and where it came from")
    pending.add_argument("--namespace")
    pending.add_argument("--kind")
    pending.add_argument("--limit", type=_count, default=100, help="at most this many (default: 100)")

    job_arguments(command("show", _show, "everything known about one job: pending deletion, history, tombstone"))

    history = command("history", _history, "the audit trail, newest first")
    history.add_argument("--since", type=_since, metavar="DURATION_OR_TIME", help="e.g. 2h, or 2030-01-31T00:00:00Z")
    history.add_argument("--event", help="e.g. deleted, skipped, failed, cancelled")
    history.add_argument("--namespace")
    history.add_argument("--limit", type=_count, default=50, help="at most this many (default: 50)")

    command("failed", _failed, "failed deletions, with their RQ job id and the error")

    retry = command("retry", _retry, "run a failed deletion again")
    which = retry.add_mutually_exclusive_group(required=True)
    which.add_argument("job_id", nargs="?", metavar="JOB_ID", help="from `jobttl failed`")
    which.add_argument("--all-failed", action="store_true", help="every failed deletion")

    job_arguments(command("cancel", _cancel, "never delete this job (recorded in history)"))

    postpone = command("postpone", _postpone, "delete this job later than planned")
    job_arguments(postpone)
    postpone.add_argument("duration", type=_duration, metavar="DURATION", help="how much later, e.g. 2h or 3d")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobttl",
        description="Delete finished Kubernetes training jobs a time-to-live after they finish.",
        epilog="Settings come from JOBTTL_* environment variables; see the README.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sink = commands.add_parser("sink", help="serve the CloudEvents sink (gunicorn)")
    sink.add_argument("--host", default="0.0.0.0")
    sink.add_argument("--port", type=int, default=8080)
    sink.add_argument("--threads", type=int, default=8, help="request threads (default: 8)")
    sink.set_defaults(run=_sink)

    worker = commands.add_parser("worker", help="run the deleting RQ worker with its scheduler")
    worker.add_argument("--burst", action="store_true", help="run the jobs due now, then exit")
    worker.set_defaults(run=_worker)

    watch = commands.add_parser("watch", help="watch job kinds and post ApiServerSource-style CloudEvents to a sink")
    watch.add_argument("--sink", required=True, metavar="URL", help="where to POST events, e.g. http://jobttl-sink")
    watch.set_defaults(run=_watch)

    resync = commands.add_parser("resync", help="make the schedule in Redis match the cluster, now")
    resync.add_argument("--confirm", metavar="HELD_ID",
                        help="delete the deletions the last resync held (those still due); HELD_ID, from its "
                             "report, makes sure they are the ones you reviewed")
    resync.add_argument("--json", action="store_true", help="print the report as JSON")
    resync.set_defaults(run=_resync)

    _add_operator_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"jobttl: configuration error: {exc}", file=sys.stderr)
        return 2
    # An operator command's output is its table; its audit records are kept in Redis, and
    # logging them here too would only interleave JSON lines with it.
    logs.configure("WARNING" if args.run is _operate else settings.log_level)
    try:
        return args.run(args, settings) or 0
    except ConfigError as exc:
        print(f"jobttl: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
