"""The processes' logging (jobttl.core.runtime.logs)."""

import io
import json
import logging
import sys

import pytest

from jobttl.core.runtime import logs


@pytest.fixture
def root_logging():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    root.handlers[:], root.level = handlers, level


def test_lines_go_to_the_standard_error_of_the_moment_not_one_closed_since(root_logging, monkeypatch):
    """A process configured while its stderr was one stream (a test's capture, closed at the
    test's end) writes later lines to the stderr it has then: no 'I/O operation on closed file'."""
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logs.configure("INFO")
    first.close()
    now = io.StringIO()
    monkeypatch.setattr(sys, "stderr", now)
    failures = []
    monkeypatch.setattr(logging.Handler, "handleError", lambda self, record: failures.append(sys.exc_info()[1]))
    logs.record(logging.getLogger("jobttl.test"), "later", detail="after the first stream closed")
    assert failures == []
    assert json.loads(now.getvalue())["event"] == "later"
