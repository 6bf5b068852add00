"""InvalidTTL: the Warning Event a worker posts from the notices outbox for a job jobttl keeps because
its TTL cannot be read (jobttl.core.services.scheduled_events), and nothing once the value is fixed: the worker's
Notices in this process, real Redis, the emulator over HTTP (tests.worker.bench)."""

from __future__ import annotations

import time

import pytest

from jobttl.core.services.scheduled_events import Notices
from jobttl_emulator import EVENT
from tests.worker.bench import Bench, kube  # noqa: F401  (kube: the module's emulator)

TYPO = (
    "annotation jobttl.io/ttl: expected a duration such as 90s, 36h, 7d, 2w, 1h30m (whole numbers with s, m, h, "
    "d or w, no spaces) or plain seconds (3600), got '10 minutes'; jobttl will not delete this TFJob until "
    "annotation jobttl.io/ttl is fixed or removed"
)


@pytest.fixture
def bench(kube, redis_server, tmp_path, queue_name):
    return Bench(kube, redis_server, tmp_path, "ttl: 1h\n", queue_name)


@pytest.fixture
def notices(bench):
    return Notices(bench.redis, bench.ctx.schedule, bench.ctx.audit, bench.ctx.kube, bench.ctx.metrics)


def events(bench: Bench, obj: dict) -> list[dict]:
    return [
        e
        for e in bench.kube.store.list(EVENT, bench.namespace)["items"]
        if e["involvedObject"]["uid"] == obj["metadata"]["uid"]
    ]


def posted(notices: Notices) -> float:
    return notices.metrics.registry.get_sample_value("jobttl_deletion_notices_total", {"stage": "invalid-ttl"}) or 0


def test_an_invalid_ttl_is_posted_as_a_warning_naming_the_value_the_forms_and_what_jobttl_does(bench, notices):
    obj = bench.job("typo", time.time(), **{"jobttl.io/ttl": "10 minutes"})
    bench.book(obj)
    bench.book(obj)
    assert notices.drain() == 1
    [event] = events(bench, obj)
    assert (event["type"], event["reason"], event["message"]) == ("Warning", "InvalidTTL", TYPO)
    assert event["involvedObject"] == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "name": "typo",
        "namespace": bench.namespace,
        "uid": obj["metadata"]["uid"],
    }
    assert event["source"] == {"component": "jobttl"}
    assert posted(notices) == 1
    bench.book(obj)
    assert notices.drain() == 0 and len(events(bench, obj)) == 1


def test_a_value_fixed_before_the_warning_is_posted_posts_no_warning(bench, notices):
    obj = bench.job("typo", time.time(), **{"jobttl.io/ttl": "10 minutes"})
    bench.book(obj)
    bench.book(bench.annotate("typo", **{"jobttl.io/ttl": "10m"}))
    notices.drain()
    assert [e["reason"] for e in events(bench, obj)] == ["DeletionScheduled"]
    assert posted(notices) == 0


def test_a_value_changed_again_before_the_warning_is_posted_posts_only_the_latest(bench, notices):
    obj = bench.job("typo", time.time(), **{"jobttl.io/ttl": "10 minutes"})
    bench.book(obj)
    bench.book(bench.annotate("typo", **{"jobttl.io/ttl": "10 mins"}))
    notices.drain()
    [event] = events(bench, obj)
    assert "got '10 mins'" in event["message"]
