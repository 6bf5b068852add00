"""Fixtures for the emulator tests: a live EmulatorServer and real kubernetes clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config

from jobttl_emulator import WELL_KNOWN, EmulatorServer

from .emulator_testlib import TFJOB_CRD, Cluster, WatchCollector


@pytest.fixture
def server() -> Iterator[EmulatorServer]:
    with EmulatorServer(gc_delay=0.5, history_size=200, bookmark_interval=0.3) as srv:
        yield srv


@pytest.fixture
def full_server() -> Iterator[EmulatorServer]:
    """What the emulator command serves, with TFJob from the reference CRD (schema, State column)."""
    if not TFJOB_CRD.exists():
        pytest.skip(f"reference CRD {TFJOB_CRD} is not beside the checkout")
    with EmulatorServer(resources=WELL_KNOWN, crds=[TFJOB_CRD], gc_delay=0.1) as srv:
        yield srv


@pytest.fixture
def full(full_server: EmulatorServer) -> Iterator[Cluster]:
    """A Cluster facade on ``full_server``."""
    with client.ApiClient(client.Configuration(host=full_server.url)) as api_client:
        yield Cluster(full_server, client.CustomObjectsApi(api_client))


@pytest.fixture
def api_client(server: EmulatorServer, tmp_path: Any) -> Iterator[client.ApiClient]:
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=server.write_kubeconfig(str(tmp_path / "kubeconfig")), client_configuration=configuration
    )
    with client.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture
def api(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def cluster(server: EmulatorServer, api: client.CustomObjectsApi) -> Cluster:
    return Cluster(server, api)


@pytest.fixture
def watches() -> Iterator[Callable[..., WatchCollector]]:
    """Factory for WatchCollectors that are stopped after the test."""
    started: list[WatchCollector] = []

    def start(func: Callable, *args: Any, **kwargs: Any) -> WatchCollector:
        collector = WatchCollector(func, *args, **kwargs)
        started.append(collector)
        return collector

    yield start
    for collector in started:
        collector.stop()
