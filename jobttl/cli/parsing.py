"""What every command group's parser shares: the help formatter, the subcommand parser, the value types.

A group adds its commands with `add_command` (a command with the settings that matter to it in
its epilog); the value types (`job`, `count`, `port`, `later`, `since`) turn a mistyped value into
argparse's usage error, naming what was expected.
"""

from __future__ import annotations

import argparse
import difflib
import re
import textwrap
import time
from collections.abc import Callable
from datetime import datetime

from jobttl.core.runtime import config


def environment_epilog(names: tuple[str, ...]) -> str:
    """The environment variables a command reads, with their defaults, from the one SETTINGS table."""
    described = {env: (default, meaning) for env, default, meaning in config.describe()}
    lines = ["environment (the ones that matter here; `jobttl --help` lists every setting):"]
    for env in names:
        default, meaning = described[env]
        lines.append(f"  {env} (default: {default})")
        lines += textwrap.wrap(meaning, 76, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def settings_epilog() -> str:
    """`jobttl --help`'s epilog: every setting, its default and its meaning."""
    lines = ["settings (environment variables, checked at start):"]
    lines += [f"  {env:<30} {default:<26} {meaning}" for env, default, meaning in config.describe()]
    return "\n".join(lines)


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Every flag says its default (or that it is required); epilogs are kept as written.

    Unlike argparse's ArgumentDefaultsHelpFormatter it never prints "(default: None)": a flag
    without a value of its own says in words what happens without it ("default: every
    namespace"), which `tests/operate/test_cli.py` checks for every command.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or "default" in text or action.default is argparse.SUPPRESS:
            return text
        if action.required:
            return f"{text} (required)"
        if isinstance(action, argparse._StoreTrueAction):
            return f"{text} (default: off)"
        if action.default is None:
            return text  # the help must say what happens without it
        return f"{text} (default: %(default)s)"


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: its own mistakes are reported with its own usage.

    argparse leaves an unknown option to the top-level parser, which prints `jobttl`'s usage:
    `jobttl pending --namespce x` would not show what `pending` takes. Values that look like a
    negative duration (`-5m`) are values, so that their check can say what is wrong with them.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\d+$|^-\d*\.\d+$|^-(\d+[smhdw])+$")

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            known = [option for action in self._actions for option in action.option_strings]
            guesses = [
                difflib.get_close_matches(extra.split("=")[0], known, n=1) for extra in extras if extra.startswith("-")
            ]
            hint = "; did you mean " + ", ".join(g[0] for g in guesses if g) + "?" if any(guesses) else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed, extras


def add_command(
    commands: argparse._SubParsersAction,
    name: str,
    run: Callable,
    help: str,
    environment: tuple[str, ...],
    quiet: bool = False,
    **parser_options,
) -> argparse.ArgumentParser:
    """A subcommand running `run(args, settings)`, its epilog the settings that matter to it.

    `quiet`: what the command prints is its output (a table, JSON, YAML, an archived log), so it
    logs warnings only: an operator command's audit records are kept in Redis, and logging them
    here too would only interleave JSON lines with its table.
    """
    parser = commands.add_parser(
        name,
        help=help,
        description=help,
        formatter_class=Formatter,
        epilog=environment_epilog(environment),
        **parser_options,
    )
    parser.set_defaults(run=run, quiet=quiet)
    return parser


def job(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    return namespace, name


def duration(text: str) -> int:
    from jobttl.core.domain.wire.durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def later(text: str) -> int:
    """How much later: a duration above zero (`-5m` reaches here as a value: see CommandParser)."""
    if text.startswith("-") or duration(text) == 0:
        raise argparse.ArgumentTypeError(
            f"a duration must be positive, got {text!r} (to take a postpone back: "
            "jobttl postpone --undo NAMESPACE/NAME)"
        )
    return duration(text)


def count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 0 to 65535, got {text!r}")
    return int(text)


def since(text: str) -> float:
    """A duration back from now (`2h`) or a point in time (RFC 3339), as Unix seconds."""
    try:
        return time.time() - duration(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration such as 2h or an RFC 3339 time, got {text!r}") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time zone (e.g. Z), got {text!r}")
    return when.timestamp()
