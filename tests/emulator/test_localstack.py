"""`make run`'s waits (jobttl_emulator.localstack)."""

import subprocess
import sys
import time

import pytest

from jobttl_emulator.localstack import _until


def test_a_process_that_exits_before_it_comes_up_fails_the_wait_at_once():
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the worker exited with status 3 before it came up"):
        _until(lambda: False, 30, "the worker", process)
    assert time.monotonic() - started < 15, "not the whole timeout"
