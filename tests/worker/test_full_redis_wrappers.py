"""The worker's wrappers of RQ's writes (jobttl.worker.runner.JobttlWorker): a full Redis is waited
out, never fatal; any other Redis error is RQ's to see. RQ's own methods are stood in for here; the
real thing, a Redis refusing writes, is tests/e2e/test_redis_full.py."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError, OutOfMemoryError
from rq import SimpleWorker

from jobttl.worker.runner import JobttlWorker

OOM = "OOM command not allowed when used memory > 'maxmemory'."


def worker_refusing(monkeypatch, method: str, refusals: list[Exception]) -> tuple[JobttlWorker, list[str]]:
    """A JobttlWorker (not started) whose RQ `method` raises each of `refusals` in turn, then answers "done"."""
    worker = JobttlWorker.__new__(JobttlWorker)
    waited: list[str] = []
    worker._redis_full = lambda exc, during: waited.append(during)  # type: ignore[method-assign]

    def rq_method(self, *args, **kwargs):
        if refusals:
            raise refusals.pop(0)
        return "done"

    monkeypatch.setattr(SimpleWorker, method, rq_method)
    return worker, waited


def test_registering_waits_out_a_full_redis_until_it_is_done(monkeypatch):
    worker, waited = worker_refusing(monkeypatch, "register_birth", [OutOfMemoryError(OOM), OutOfMemoryError(OOM)])
    assert worker.register_birth() == "done"
    assert waited == ["start", "start"]


@pytest.mark.parametrize("method, during", [("set_state", "state"), ("heartbeat", "heartbeat")])
def test_a_state_or_heartbeat_a_full_redis_refuses_is_waited_out_once_and_not_tried_again(monkeypatch, method, during):
    worker, waited = worker_refusing(monkeypatch, method, [OutOfMemoryError(OOM)])
    assert getattr(worker, method)("busy") is None
    assert waited == [during]
    assert getattr(worker, method)("busy") == "done"


@pytest.mark.parametrize("method", ["register_birth", "set_state", "heartbeat"])
def test_any_other_redis_error_is_rqs_to_see(monkeypatch, method):
    worker, waited = worker_refusing(monkeypatch, method, [RedisConnectionError("gone")])
    with pytest.raises(RedisConnectionError):
        getattr(worker, method)()
    assert waited == []
