"""A declaration's error is the policy's: reported against it, never on the object, which is kept
(issue 26 §5). Real Redis and RQ, the one reconcile path (jobttl.core.services.reconcile)."""

from __future__ import annotations

import time
import uuid

import pytest

from jobttl.core.domain.decisions.decision import Verdict
from jobttl.core.domain.rules.policy import parse_policy
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.services.operations import Operations
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.store import keys
from jobttl.core.store.audit import Audit
from jobttl.core.store.policy_errors import REPEAT_AFTER, PolicyErrors, seen_key
from jobttl.core.store.schedule import Change, InvalidNotice, Schedule
from jobttl.cli.tables import policy_error_line
from tests.fixtures import rfc3339, with_server_fields


def declaration(group: str) -> dict:
    # The TTL is spec.ttl over 60, by CEL: 0 makes it a division by zero (the expression's error).
    return {
        "group": group,
        "version": "v1",
        "kind": "Widget",
        "plural": "widgets",
        "finished": {"state": {"path": "status.phase", "values": {"Done": "succeeded"}}},
        "finishedAt": ["status.doneAt"],
        "ttl": {"cel": "3600 / self.spec.ttl", "celWhen": "spec.ttl", "celInputs": ["spec.ttl"]},
    }


@pytest.fixture
def group():
    """A declaration of its own per test: the reports are kept by declaration, in a Redis tests share."""
    return f"widgets-{uuid.uuid4().hex[:8]}.example.com"


@pytest.fixture
def metrics():
    return Metrics()


@pytest.fixture
def reconciler(redis, queue_name, group, metrics):
    policy = parse_policy({"kindDeclarations": [declaration(group)], "kinds": [f"{group}/v1/Widget"]})
    return Reconciler(Schedule(redis, queue_name, retry_intervals=[1]), Audit(redis), policy, metrics)


def widget(group: str, ttl: int, uid: str | None = None) -> dict:
    obj = with_server_fields(
        {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": f"w-{uuid.uuid4().hex[:6]}", "namespace": "team"},
            "spec": {"ttl": ttl},
            "status": {"phase": "Done", "doneAt": rfc3339(time.time())},
        }
    )
    if uid:
        obj["metadata"]["uid"] = uid
    return obj


def reported(metrics, group) -> float:
    return metrics.registry.get_sample_value("jobttl_policy_errors_total", {"declaration": f"{group}/v1/Widget"})


def policy_error_entries(audit: Audit, obj: dict) -> list[dict[str, str]]:
    return [
        e.fields
        for e in audit.history(obj["metadata"]["namespace"], obj["metadata"]["name"])
        if e.fields["event"] == "policy-error"
    ]


def test_a_cel_error_keeps_the_object_and_is_reported_against_the_policy_not_the_object(
    reconciler, redis, group, metrics, queue_name
):
    kind = reconciler.policy.kinds[0]
    assert reported(metrics, group) == 0  # exported from the start: the alert's increase() sees the first
    good = widget(group, ttl=60)
    assert reconciler.reconcile(good, kind, "event").change is Change.SCHEDULED  # 3600 / 60 = 60 s
    broken = {**good, "spec": {"ttl": 0}}  # the same object, now one the expression cannot read
    outcome = reconciler.reconcile(broken, kind, "event")
    assert outcome.change is Change.CANCELLED and outcome.decision.verdict is Verdict.POLICY_ERROR
    assert reconciler.schedule.get(good["metadata"]["uid"]) is None, "kept: its pending deletion is cancelled"
    assert (
        "this is an error of policy: kindDeclarations[0], not of the object: jobttl keeps this Widget until the declaration is fixed"
        in outcome.decision.reason
    )
    # No InvalidTTL Warning for the object's owner, who wrote nothing wrong.
    notices = [InvalidNotice.read(e.decode()) for e in redis.zrange(keys.notices(queue_name), 0, -1)]
    assert [n for n in notices if n is not None] == []
    assert reported(metrics, group) == 1
    [entry] = policy_error_entries(reconciler.audit, good)
    assert (entry["declaration"], entry["field"], entry["by"]) == (f"{group}/v1/Widget", "spec.ttl (ttl.cel)", "event")
    assert "division by zero" in entry["detail"] or "divide" in entry["detail"].lower()


def test_a_hot_object_is_counted_each_time_but_reported_once_per_error(reconciler, group, metrics):
    kind = reconciler.policy.kinds[0]
    broken = widget(group, ttl=0)
    for by in ("event", "event", "resync", "worker", "event"):
        assert reconciler.reconcile(broken, kind, by).decision.verdict is Verdict.POLICY_ERROR
    assert reported(metrics, group) == 5
    assert len(policy_error_entries(reconciler.audit, broken)) == 1, "deduplicated: the trail is not flooded"
    other = widget(group, ttl=0)  # another object: reported too
    reconciler.reconcile(other, kind, "event")
    assert len(policy_error_entries(reconciler.audit, other)) == 1


def test_the_same_error_is_reported_again_after_an_hour(reconciler, redis, group):
    kind = reconciler.policy.kinds[0]
    broken = widget(group, ttl=0)
    outcome = reconciler.reconcile(broken, kind, "event")
    seen = seen_key(f"{group}/v1/Widget", outcome.ref, outcome.decision.reason)
    assert 0 < redis.ttl(seen) <= REPEAT_AFTER
    reconciler.reconcile(broken, kind, "event")
    assert len(policy_error_entries(reconciler.audit, broken)) == 1
    redis.delete(seen)  # as if REPEAT_AFTER had passed
    reconciler.reconcile(broken, kind, "event")
    assert len(policy_error_entries(reconciler.audit, broken)) == 2


def test_jobttl_status_names_the_declaration_and_its_latest_error(reconciler, redis, group):
    kind = reconciler.policy.kinds[0]
    for _ in range(2):
        reconciler.reconcile(widget(group, ttl=0), kind, "event")
    status = Operations(redis, reconciler.schedule, reconciler.audit, reconciler).status()
    report = status["policyErrors"][f"{group}/v1/Widget"]
    assert report["reports"] == 2 and report["field"] == "spec.ttl (ttl.cel)"
    assert report["declaredIn"] == "policy: kindDeclarations[0]"
    line = policy_error_line(f"{group}/v1/Widget", report)
    assert line.startswith(f"Policy error: {group}/v1/Widget (policy: kindDeclarations[0]): spec.ttl (ttl.cel): ")
    assert "2 reports" in line


def test_a_garbled_report_in_redis_is_left_out_of_the_status(redis, group):
    redis.hset(keys.POLICY_ERRORS, f"{group}/v1/Widget", b"{not json")
    assert f"{group}/v1/Widget" not in PolicyErrors(redis, Audit(redis)).summary()
