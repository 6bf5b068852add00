"""The fault tests' emulator: in this process, with the true clock, shared by a module's scenarios."""

import pytest

from tests.services import start_emulator
from tests.worker.stacks import RESOURCES


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    server = start_emulator(tmp_path_factory.mktemp("kube"), RESOURCES, gc_delay=0.1)
    yield server
    server.stop()
