"""The ``jobttl`` command: one entry point for every process jobttl runs, and the operator's tools.

One module per command group, each adding its commands' parsers (`add_commands`) and running
them (`run(args, settings)`, set as the parser's default):
`processes` (sink, worker, watch, console, notify), `resync`, `explain` (with `explain_crd`),
`logs`, `manifests` and `operate` (status, pending, show, history, held, failed, retry, cancel,
postpone; printed for humans by `tables`). What their parsers share is `parsing`; the Redis of
the commands that use one, `connection`.

Layers: this command imports the processes (`jobttl.sink`, `jobttl.worker`,
`jobttl.watcher`, `jobttl.notifier`) and the core; nothing imports it.
"""

from __future__ import annotations

import argparse
import sys

from jobttl.cli import explain, logs, manifests, operate, processes, resync
from jobttl.cli.parsing import CommandParser, Formatter, settings_epilog
from jobttl.core.runtime import logs as process_logs
from jobttl.core.runtime.config import ConfigError, Settings

# In the order `jobttl --help` lists their commands.
COMMAND_GROUPS = (processes, resync, explain, logs, manifests, operate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobttl",
        formatter_class=Formatter,
        description="Delete finished Kubernetes training jobs a time-to-live after they finish.",
        epilog=settings_epilog(),
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=CommandParser)
    for group in COMMAND_GROUPS:
        group.add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    operate.check_postpone(parser, args)
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"jobttl: configuration error: {exc}", file=sys.stderr)
        return 2
    process_logs.configure("WARNING" if args.quiet else settings.log_level)
    try:
        return args.run(args, settings) or 0
    except ConfigError as exc:
        print(f"jobttl: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
