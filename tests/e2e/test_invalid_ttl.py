"""A TTL jobttl cannot read is told to the job's owner: an InvalidTTL Warning Event on the object, once
per object and value, posted by the worker process from the notices outbox the sink process (or a
`jobttl resync` process) wrote (CloudEvents over HTTP, real Redis, the emulator read with the
kubernetes client)."""

from __future__ import annotations

import time

import pytest
import requests
from kubernetes import client, config

from jobttl.core.domain.kinds.registry import TFJOB
from tests.e2e.conftest import WORKER_METRICS_PORT, Cluster, OwnStack
from tests.fixtures import job_object
from tests.services import wait_for

FORMS = "90s, 36h, 7d, 2w, 1h30m (whole numbers with s, m, h, d or w, no spaces) or plain seconds (3600)"


def events(cluster: Cluster, obj: dict, reason: str) -> list:
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.emulator.kubeconfig)))
    found = core.list_namespaced_event(cluster.namespace).items
    return sorted(
        (e for e in found if e.involved_object.uid == obj["metadata"]["uid"] and e.reason == reason),
        key=lambda e: e.metadata.creation_timestamp,
    )


def annotate(cluster: Cluster, name: str, key: str, value: str) -> dict:
    return cluster.patch(name, {"metadata": {"annotations": {f"jobttl.io/{key}": value}}})


def sent(cluster: Cluster, obj: dict, outcome: str, mode: str = "resource") -> None:
    response = cluster.event("update", obj, mode=mode)
    assert response.status_code == 202 and response.headers["X-Jobttl-Outcome"] == outcome, response.text


def posted_warnings() -> float:
    """The worker's count of InvalidTTL Warnings posted (once it serves its metrics)."""
    url = f"http://127.0.0.1:{WORKER_METRICS_PORT}"
    wait_for(lambda: requests.get(f"{url}/readyz", timeout=1).ok, timeout=30, what="the worker")
    text = requests.get(f"{url}/metrics", timeout=5).text
    prefix = 'jobttl_deletion_notices_total{stage="invalid-ttl"} '
    return sum(float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix))


def settled(cluster: Cluster, name: str, timeout: float = 15) -> None:
    """Everything this test wrote to the outbox so far has been posted: the outbox goes oldest
    first, so once a notice written after it is posted, theirs were too (or were nothing)."""
    marker = cluster.create_finished(name, ttl=None, finished_at=time.time())
    marker = annotate(cluster, name, "ttl", "soon")
    sent(cluster, marker, "ignored:invalid-ttl")
    wait_for(lambda: events(cluster, marker, "InvalidTTL"), timeout=timeout, what="the marker's InvalidTTL Event")


def test_a_bad_ttl_annotation_is_warned_once_per_value_and_not_once_fixed(cluster, worker):
    before = posted_warnings()
    cluster.create_finished("typo", ttl=None, finished_at=time.time())
    obj = annotate(cluster, "typo", "ttl", "10 minutes")
    sent(cluster, obj, "ignored:invalid-ttl")
    sent(cluster, obj, "ignored:invalid-ttl")
    [warning] = wait_for(lambda: events(cluster, obj, "InvalidTTL"), timeout=15, what="an InvalidTTL Event")
    assert warning.type == "Warning"
    assert warning.message == (
        f"annotation jobttl.io/ttl: expected a duration such as {FORMS}, got '10 minutes'; "
        "jobttl will not delete this TFJob until annotation jobttl.io/ttl is fixed or removed"
    )
    # The same value again, after the Event: nothing more.
    sent(cluster, obj, "ignored:invalid-ttl")
    sent(cluster, obj, "ignored:invalid-ttl", mode="ref")
    settled(cluster, "marker-1")
    assert len(events(cluster, obj, "InvalidTTL")) == 1
    assert cluster.get("typo") is not None, "kept"

    # Another bad value: told again, once, however many events say it.
    obj = annotate(cluster, "typo", "ttl", "1 hour")
    sent(cluster, obj, "ignored:invalid-ttl")
    wait_for(lambda: len(events(cluster, obj, "InvalidTTL")) == 2, timeout=15, what="the changed value's Event")
    sent(cluster, obj, "ignored:invalid-ttl")
    settled(cluster, "marker-2")
    messages = [e.message for e in events(cluster, obj, "InvalidTTL")]  # in the API server's order, not time's
    assert len(messages) == 2 and [
        sum(f"got '{value}'" in m for m in messages) for value in ("10 minutes", "1 hour")
    ] == [1, 1], messages

    # Fixed: scheduled as usual, and no more warnings.
    obj = annotate(cluster, "typo", "ttl", "1h")
    sent(cluster, obj, "scheduled")
    sent(cluster, obj, "unchanged")
    wait_for(lambda: events(cluster, obj, "DeletionScheduled"), timeout=15, what="the DeletionScheduled Event")
    settled(cluster, "marker-3")
    assert len(events(cluster, obj, "InvalidTTL")) == 2
    assert posted_warnings() - before >= 5  # the two values, the three markers


def test_a_bad_keep_until_cancels_the_pending_deletion_and_is_warned_once(cluster, worker):
    obj = cluster.create_finished("postponed", ttl=3600, finished_at=time.time())
    sent(cluster, obj, "scheduled")
    obj = annotate(cluster, "postponed", "keep-until", "next friday")
    sent(cluster, obj, "cancelled")
    sent(cluster, obj, "ignored:invalid-ttl")
    [warning] = wait_for(lambda: events(cluster, obj, "InvalidTTL"), timeout=15, what="an InvalidTTL Event")
    assert warning.type == "Warning"
    assert warning.message == (
        "annotation jobttl.io/keep-until must be an RFC 3339 time such as "
        "2030-01-31T00:00:00Z within 100 years, got 'next friday'; jobttl will not delete this "
        "TFJob until annotation jobttl.io/keep-until is fixed or removed"
    )
    settled(cluster, "marker")
    assert len(events(cluster, obj, "InvalidTTL")) == 1


# --- resyncs: their own stack, since a resync reconciles every job of every test's namespace ---------


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    stack = OwnStack(tmp_path_factory.mktemp("invalid-ttl"), "invalid-ttl")
    yield stack
    stack.stop()


def test_resyncs_that_find_the_same_bad_value_warn_once(own):
    def seeded(name: str) -> dict:
        obj = job_object(TFJOB, name, "team", at=time.time())
        obj["metadata"]["annotations"] = {"jobttl.io/ttl": "1 day"}
        return own.seed(obj)

    def warnings(obj: dict) -> list[str]:
        return [
            e.message
            for e in own.events("team")
            if e.involved_object.uid == obj["metadata"]["uid"] and e.reason == "InvalidTTL"
        ]

    typo = seeded("typo")
    own.jobttl("resync")
    [message] = wait_for(lambda: warnings(typo), timeout=15, what="the InvalidTTL Event")
    assert "got '1 day'" in message
    own.jobttl("resync")
    marker = seeded("marker")  # told after anything the second resync would have told
    own.jobttl("resync")
    wait_for(lambda: warnings(marker), timeout=15, what="the marker's InvalidTTL Event")
    assert warnings(typo) == [message]
