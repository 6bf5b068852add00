"""The ``jobttl`` command: one entry point for every process jobttl runs."""

from __future__ import annotations

import argparse
import logging
import sys

from jobttl import logs
from jobttl.config import ConfigError, Settings

log = logging.getLogger("jobttl")


def _sink(args: argparse.Namespace, settings: Settings) -> None:
    from sink.server import serve

    serve(settings, host=args.host, port=args.port, threads=args.threads)


def _worker(args: argparse.Namespace, settings: Settings) -> None:
    from worker.runner import run

    run(settings, burst=args.burst)


def _emulator(args: argparse.Namespace, settings: Settings) -> None:
    from emulator import Resource
    from emulator.server import run

    # The emulator serves every enabled kind, as a cluster with their CRDs installed would.
    resources = [Resource(k.group, k.version, k.kind, k.plural) for k in settings.policy.kinds]
    resources.append(Resource("", "v1", "Event", "events", status_subresource=False))  # jobttl records Events
    run(args.host, args.port, seed_paths=args.seed, kubeconfig_path=args.write_kubeconfig, gc_delay=args.gc_delay,
        resources=resources)


def _resync(args: argparse.Namespace, settings: Settings) -> int:
    import json

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
            print("  run `jobttl resync --confirm` to delete them")
    return {"done": 0, "held": 3, "already-running": 4}.get(report.status, 1)


def _watch(args: argparse.Namespace, settings: Settings) -> None:
    from watcher.watch import run
    from worker.kinds import KindRegistry
    from worker.kube import load_api_client

    run(load_api_client(settings.kubeconfig), KindRegistry().kinds, args.sink)


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
    resync.add_argument("--confirm", action="store_true",
                        help="delete what the blast-radius guard would otherwise hold for confirmation")
    resync.add_argument("--json", action="store_true", help="print the report as JSON")
    resync.set_defaults(run=_resync)

    emulator = commands.add_parser("emulator", help="serve the Kubernetes API emulator (for tests and demos)")
    emulator.add_argument("--host", default="127.0.0.1")
    emulator.add_argument("--port", type=int, default=6443)
    emulator.add_argument("--seed", action="append", default=[], metavar="YAML",
                          help="create the objects in this file at start (repeatable)")
    emulator.add_argument("--write-kubeconfig", metavar="PATH", help="write a kubeconfig pointing at the emulator")
    emulator.add_argument("--gc-delay", type=float, default=0.5,
                          help="seconds before the emulated garbage collector removes a Foreground-deleted object")
    emulator.set_defaults(run=_emulator)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"jobttl: configuration error: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level)
    try:
        return args.run(args, settings) or 0
    except ConfigError as exc:
        print(f"jobttl: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
