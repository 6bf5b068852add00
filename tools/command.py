"""What the tools' commands share: a generator's `--check` or write, and a tool's own error
reported as `program: message` with the tool's exit status."""

from __future__ import annotations

import sys
from collections.abc import Callable


def check_or_write(
    files: dict[str, str],
    *,
    check: bool,
    differences: Callable[[dict[str, str]], list[str]],
    write: Callable[[dict[str, str]], list[str]],
    up_to_date: str,
    command: str,
) -> int:
    """With `check`, name each file that differs from `files` and write nothing (exit 1 if any);
    else write them, naming each one written (or saying that none needed it)."""
    if check:
        problems = differences(files)
        for problem in problems:
            print(f"{problem}: run {command}", file=sys.stderr)
        return 1 if problems else 0
    for line in write(files) or [up_to_date]:
        print(line)
    return 0


def exit_status(run: Callable[[], int], *, program: str, errors: type[Exception], status: int) -> int:
    """run()'s exit status; or, when it raises one of `errors`, `status` with the error on stderr."""
    try:
        return run()
    except errors as exc:
        print(f"{program}: {exc}", file=sys.stderr)
        return status
