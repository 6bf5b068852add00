"""A file named on the command line (``-``: stdin), read for `explain` and `explain --crd` alike."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

import yaml

T = TypeVar("T")


def read_input(filename: str, parse: Callable[[str], T]) -> T | None:
    """`parse` of FILE's text (``-``: stdin), or None once stderr says why it could not be read."""
    try:
        text = sys.stdin.read() if filename == "-" else open(filename, encoding="utf-8").read()
        return parse(text)
    except OSError as exc:
        print(f"jobttl: cannot read {filename}: {exc.strerror}", file=sys.stderr)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        print(f"jobttl: {filename}: not valid YAML or JSON: {exc}", file=sys.stderr)
    return None
