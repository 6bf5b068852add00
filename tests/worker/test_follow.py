"""The follower's own rules, in process (jobttl.core.services.follow): real Redis, the emulator over HTTP.

The end-to-end story (stuck, the Event, the gauge, the fallback) is tests/e2e/test_stuck_deletions.py;
these are the cases a running stack cannot easily reach: the policy changing between the DELETE
and the follow-up, and one follow-up failing among many.
"""

from __future__ import annotations

import time
import uuid

import pytest

from jobttl_emulator import seed_object
from jobttl.core.store import keys
from jobttl.core.runtime.config import Settings
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.services.deletion import Deletion, Target
from jobttl.core.services.worker_graph import WorkerGraph
from jobttl.core.services.follow import Follower
from tests.e2e.conftest import EVERY_KIND
from tests.fixtures import job_object
from tests.services import RedisServer, start_emulator

HOLD = "example.com/hold"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    directory = tmp_path_factory.mktemp("follow")
    emulator = start_emulator(directory, EVERY_KIND, gc_delay=0.1)
    redis_server = RedisServer().start()
    (directory / "pytorch-only.yaml").write_text("kinds: [PyTorchJob]\n")
    yield emulator, redis_server, directory
    redis_server.stop()
    emulator.stop()


def context(stack, **settings) -> WorkerGraph:
    emulator, redis_server, _ = stack
    env = {
        "JOBTTL_REDIS_URL": redis_server.url,
        "KUBECONFIG": str(emulator.kubeconfig),
        "JOBTTL_QUEUE": "follow",
        "JOBTTL_DELETE_RATE": "0",
        "JOBTTL_STUCK_AFTER": "1h",
        **settings,
    }
    return WorkerGraph.from_settings(Settings.from_env(env))


def deleted_but_held(stack, ctx: WorkerGraph) -> JobRef:
    """A finished TFJob the worker's own algorithm deleted, still Terminating on a finalizer."""
    emulator, _, _ = stack
    obj = job_object(TFJOB, "held", f"f-{uuid.uuid4().hex[:8]}", at=time.time() - 60, ttl=0)
    obj["metadata"]["finalizers"] = [HOLD]
    obj = seed_object(emulator.store, obj)
    outcome = ctx.reconciler.reconcile(obj, TFJOB, "test")
    ref = JobRef.of(obj)
    assert Deletion(ctx, None).run(Target(ref, ref.uid, outcome.due, outcome.stage)) == "delete-requested"
    ctx.redis.zadd(keys.TERMINATING, {ref.uid: 0})  # look now, not after the first follow-up delay
    return ref


def events(ctx: WorkerGraph, ref: JobRef) -> list[str]:
    return [e.as_dict()["event"] for e in reversed(ctx.audit.history(ref.namespace, ref.name))]


def test_a_kind_the_policy_no_longer_enables_is_still_followed_never_called_deleted(stack):
    ref = deleted_but_held(stack, context(stack))
    _, _, directory = stack
    narrowed = context(stack, JOBTTL_POLICY=str(directory / "pytorch-only.yaml"))
    assert narrowed.kinds.get("kubeflow.org/v1", "TFJob") is None
    Follower(narrowed).follow_once()
    assert events(narrowed, ref) == ["scheduled", "delete-requested"], "still there, so not deleted"
    assert narrowed.redis.zscore(keys.TERMINATING, ref.uid) > time.time(), "and looked at again later"


def test_one_follow_up_that_fails_does_not_hold_up_the_others(stack):
    ctx = context(stack)
    emulator, _, _ = stack
    first, second = deleted_but_held(stack, ctx), deleted_but_held(stack, ctx)
    emulator.add_fault("get", 500, count=1, path_contains=f"/namespaces/{first.namespace}/")
    ctx.redis.zadd(keys.TERMINATING, {first.uid: 0, second.uid: 1})  # the failing one first
    before = ctx.redis.hget(keys.TERMINATING_INFO, second.uid)
    assert Follower(ctx).follow_once() >= 2
    assert ctx.redis.hget(keys.TERMINATING_INFO, second.uid) != before, "the second was checked"
    assert ctx.redis.zscore(keys.TERMINATING, first.uid) > time.time() + 20, "the first waits out its lease"
    assert "deleted" not in events(ctx, first)
