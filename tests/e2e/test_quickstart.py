"""The README's `make run` does what the README says it does."""

import subprocess
import sys

from tests.services import ROOT


def test_the_local_stack_deletes_the_finished_examples_and_keeps_the_others():
    result = subprocess.run([sys.executable, "-m", "jobttl_emulator.localstack", "--exit-when-done", "--timeout", "60"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "deleted mnist-succeeded-ttl-10s" in result.stdout
    assert "deleted mnist-failed-ttl-20s" in result.stdout
    assert "kept: mnist-no-ttl, mnist-running" in result.stdout
