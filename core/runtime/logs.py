"""Structured logging: one JSON object per line, ready for any log pipeline.

Outcomes are logged with ``extra={...}`` fields (event, namespace, name, uid, ...) so
that "what happened to job X" is a query, not a grep.
"""

from __future__ import annotations

import logging
import sys

from pythonjsonlogger.json import JsonFormatter


class StderrHandler(logging.StreamHandler):
    """A StreamHandler on the process's standard error as it is when each line is written.

    logging's own StreamHandler keeps the stream it was given: a process whose `sys.stderr`
    is replaced later (a test's captured output, which is closed at the test's end) would go on
    writing to the old one, each line a "ValueError: I/O operation on closed file" traceback.
    """

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass  # always sys.stderr


def configure(level: str = "INFO") -> None:
    handler = StderrHandler()
    handler.setFormatter(
        JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def record(
    logger: logging.Logger, event: str, obj: dict[str, str] | None = None, level: int = logging.INFO, **fields
) -> None:
    """Log one thing that happened, as ``{"event": ..., "object": {kind, namespace, name, uid}, ...}``.

    The object's identity is nested under "object" (like a Kubernetes Event's
    involvedObject) because "name" is reserved on a LogRecord.
    """
    extra = {"event": event, **{(f"{k}_" if k in _RESERVED else k): v for k, v in fields.items()}}
    if obj is not None:
        extra["object"] = obj
    logger.log(level, event, extra=extra)


# LogRecord's own attributes: an extra field by one of these names would make logging raise.
_RESERVED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
