"""The notifier (jobttl.notifier.runner.Notifier) on a real Redis, sending through Apprise to a local
receiver: the events the other parts of jobttl write, as operators are told of them."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
import requests

from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.domain.rules.policy import Policy, parse_policy
from jobttl.core.runtime.config import Settings
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.store.audit import Audit
from jobttl.core.store.schedule import Schedule
from jobttl.notifier.channels import open_channels
from jobttl.notifier.runner import Notifier, serve_health
from tests.core.own_redis import redis, server  # noqa: F401 - fixtures
from tests.fixtures import job_object
from tests.notifier.receiver import Receiver
from tests.services import wait_for


@pytest.fixture(scope="module")
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.stop()


def notifier_for(redis, receiver, digest: str = "0s") -> Notifier:
    path = f"/{uuid.uuid4().hex[:8]}"
    policy = parse_policy(
        {
            "notify": [
                {
                    "name": "ops",
                    "url": f"json://127.0.0.1:{receiver.port}{path}",
                    "on": ["review-opened", "guard-tripped", "invalid-ttl", "kind-not-served", "policy-error"],
                    "digest": digest,
                }
            ]
        },
        "policy.yaml",
    )
    notifier = Notifier(
        redis,
        open_channels(policy.notify, {}),
        Metrics(),
        Settings(policy=policy, notify_gather=0, console_url="https://jobttl.example"),
    )
    notifier.prepare()
    notifier.path = path
    return notifier


def told(notifier: Notifier, receiver: Receiver) -> list[dict]:
    """What the channel has been sent, once the notifier has read and sent all there is."""
    while notifier.read_once(block_ms=10):
        pass
    notifier.send_due(notifier.channels[0])
    return receiver.at(notifier.path)


def test_a_held_set_is_told_once_however_often_a_resync_holds_it_again(redis, receiver):
    notifier = notifier_for(redis, receiver)
    audit = Audit(redis)
    for _ in range(3):  # a resync every 15 minutes while nobody confirms
        audit.record(
            "deletions-held",
            None,
            logging.WARNING,
            count=12,
            seen=40,
            heldId="abc123def456",
            reason="first-run-review",
            firstRun=12,
        )
    [message] = told(notifier, receiver)
    assert message["title"] == "jobttl: 12 held (first-run review)" and message["type"] == "warning"
    assert "jobttl resync --confirm abc123def456" in message["message"]
    assert "https://jobttl.example/held" in message["message"]
    audit.record(
        "deletions-held", None, logging.WARNING, count=30, seen=40, heldId="0123456789ab", maxDeletions=10, maxShare=0.5
    )  # the guard's thresholds, another set
    messages = told(notifier, receiver)
    assert len(messages) == 2 and messages[1]["title"] == "jobttl: 30 held (guard tripped)"
    assert (
        "- 30 held of 40 jobs seen (limits: 10 deletions or 0.5 of those seen), held id 0123456789ab"
        in messages[1]["message"]
    )


def test_the_burst_guards_holds_come_as_one_digest(redis, receiver):
    notifier = notifier_for(redis, receiver)
    audit = Audit(redis)
    for i in range(3):
        audit.record(
            "held",
            JobRef("kubeflow.org/v1", "TFJob", "burst", f"j{i}", str(uuid.uuid4())),
            reason="burst",
            due=int(time.time()),
        )
    [message] = told(notifier, receiver)
    assert message["title"] == "jobttl: 3 held (guard tripped)"
    assert message["message"].count("held by the burst limit") == 3


def test_a_ttl_jobttl_cannot_read_is_told_from_the_reconcile_that_found_it(redis, receiver):
    notifier = notifier_for(redis, receiver)
    obj = job_object(TFJOB, "typo", "team-a", at=time.time() - 60)
    obj["metadata"].update(uid=str(uuid.uuid4()), annotations={"jobttl.io/ttl": "10 minutes"})
    reconciler = Reconciler(Schedule(redis, "notify", retry_intervals=[]), Audit(redis), Policy())
    reconciler.reconcile(obj, TFJOB, "event")
    reconciler.reconcile(obj, TFJOB, "event")  # the same value again: told once
    [message] = told(notifier, receiver)
    assert message["title"] == "jobttl: 1 invalid-ttl"
    assert "- TFJob team-a/typo: annotation jobttl.io/ttl: expected a duration such as" in message["message"]


def test_kinds_not_served_and_policy_errors_are_told_with_their_detail(redis, receiver):
    notifier = notifier_for(redis, receiver)
    audit = Audit(redis)
    audit.record("kind-not-served", None, logging.WARNING, resource="ray.io/v1/RayJob", detail="no CRD")
    audit.record("policy-error", None, logging.ERROR, rule="gpu", detail="celWhen: no such field")
    [message] = told(notifier, receiver)
    assert message["title"] == "jobttl: 1 policy-error, 1 kind-not-served"
    assert "- gpu: celWhen: no such field" in message["message"] and "- ray.io/v1/RayJob: no CRD" in message["message"]


def test_a_digest_period_holds_the_next_message_back(redis, receiver):
    notifier = notifier_for(redis, receiver, digest="1h")
    audit = Audit(redis)
    audit.record("kind-not-served", None, logging.WARNING, resource="ray.io/v1/RayJob", detail="no CRD")
    assert len(told(notifier, receiver)) == 1
    audit.record("kind-not-served", None, logging.WARNING, resource="tekton.dev/v1/TaskRun", detail="no CRD")
    assert len(told(notifier, receiver)) == 1, "not again within the hour"
    assert notifier.metrics.notifications.labels("ops", "kind-not-served", "sent")._value.get() == 1
    wait_for(lambda: redis.zscore("jobttl:notify:due:ops", "all"), what="the next message due")
    assert redis.zscore("jobttl:notify:due:ops", "all") > time.time() + 3000


def test_entries_no_channel_hears_of_are_acknowledged_and_nothing_is_sent(redis, receiver):
    notifier = notifier_for(redis, receiver)
    audit = Audit(redis)
    ref = JobRef("kubeflow.org/v1", "TFJob", "quiet", "j", str(uuid.uuid4()))
    audit.record("scheduled", ref, due=int(time.time()) + 3600)  # the channel is not on upcoming
    audit.record("cancelled", ref, reason="gone")
    assert told(notifier, receiver) == []
    assert redis.xpending("jobttl:audit", "jobttl-notify")["pending"] == 0


def test_an_entry_that_is_not_utf8_is_skipped_counted_and_the_next_is_told(redis, receiver, caplog):
    """Redis is not a trusted input: anything with the password may XADD to the trail."""
    notifier = notifier_for(redis, receiver)
    bad = redis.xadd("jobttl:audit", {"event": "kind-not-served", "resource": b"\xff\xfe\xfa", b"\xc3(": b"\x80"})
    broken = redis.xadd("jobttl:audit", {"event": "policy-error", "rule": "r", "detail": "d", "at": "inf"})
    Audit(redis).record("kind-not-served", None, logging.WARNING, resource="ray.io/v1/RayJob", detail="no CRD")
    with caplog.at_level(logging.WARNING, logger="jobttl.notify"):
        messages = told(notifier, receiver)
    assert any("- ray.io/v1/RayJob: no CRD" in m["message"] for m in messages)
    assert redis.xpending("jobttl:audit", "jobttl-notify")["pending"] == 0, (bad, broken)
    [lossy] = [r for r in caplog.records if r.getMessage() == "notify-bad-entry"]
    assert lossy.entry == bad.decode() and "not UTF-8" in lossy.detail
    assert notifier.metrics.notify_bad_entries.labels("read")._value.get() == 1


def test_an_entry_the_notifier_cannot_file_is_logged_by_its_id_skipped_and_counted(redis, receiver, caplog):
    notifier = notifier_for(redis, receiver)
    # A heldId that makes the once-token unfit for Redis's SET is no failure of Redis: a `file` that
    # raises for any reason of the entry's must skip that entry only.
    original = notifier.file

    def file(entry):
        if entry.fields.get("resource") == "poison":
            raise ValueError("an entry like no other")
        return original(entry)

    notifier.file = file
    audit = Audit(redis)
    audit.record("kind-not-served", None, logging.WARNING, resource="poison", detail="x")
    audit.record("kind-not-served", None, logging.WARNING, resource="ray.io/v1/RayJob", detail="no CRD")
    with caplog.at_level(logging.ERROR, logger="jobttl.notify"):
        [message] = told(notifier, receiver)
    assert "ray.io/v1/RayJob" in message["message"] and "poison" not in message["message"]
    [bad] = [r for r in caplog.records if r.getMessage() == "notify-bad-entry"]
    assert bad.stage == "read" and bad.entry and "an entry like no other" in bad.detail
    assert notifier.metrics.notify_bad_entries.labels("read")._value.get() == 1
    assert redis.xpending("jobttl:audit", "jobttl-notify")["pending"] == 0


def test_a_buffer_that_cannot_be_told_is_dropped_counted_and_the_channel_goes_on(redis, receiver, caplog):
    notifier = notifier_for(redis, receiver)
    redis.rpush("jobttl:notify:buffer:ops:all", b"not json", b"[1, 2]")
    redis.hincrby("jobttl:notify:state:ops", "all:count", 2)
    redis.zadd("jobttl:notify:due:ops", {"all": 0})
    with caplog.at_level(logging.ERROR, logger="jobttl.notify"):
        assert told(notifier, receiver) == [], "junk alone tells nothing"
    assert redis.llen("jobttl:notify:buffer:ops:all") == 0, "the junk is settled, not retried forever"
    [bad] = [r for r in caplog.records if r.getMessage() == "notify-bad-entry"]
    assert bad.stage == "send" and bad.channel == "ops" and bad.group == "all"
    assert notifier.metrics.notify_bad_entries.labels("send")._value.get() == 1
    Audit(redis).record("kind-not-served", None, logging.WARNING, resource="ray.io/v1/RayJob", detail="no CRD")
    assert any("ray.io/v1/RayJob" in m["message"] for m in told(notifier, receiver))


def test_health_fails_once_a_worker_thread_has_ended(redis, receiver):
    notifier = notifier_for(redis, receiver)
    server = serve_health(notifier.metrics, 0, notifier.dead_threads)
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        ended = threading.Thread(target=lambda: None, name="notify-read")
        ended.start()
        ended.join()
        notifier.threads = [ended]
        for path in ("/healthz", "/readyz"):
            reply = requests.get(url + path, timeout=5)
            assert reply.status_code == 503 and reply.json()["threads"] == ["notify-read"]
        notifier.threads = [threading.current_thread()]
        assert requests.get(url + "/healthz", timeout=5).status_code == 200
    finally:
        server.shutdown()


def test_a_digest_count_that_is_no_number_is_mended_and_the_channel_goes_on(redis, receiver):
    notifier = notifier_for(redis, receiver)
    redis.hset("jobttl:notify:state:ops", "all:count", "inf")  # anything with the password may write it
    audit = Audit(redis)
    audit.record("kind-not-served", None, logging.WARNING, resource="ray.io/v1/RayJob", detail="no CRD")
    [first] = told(notifier, receiver)
    assert "ray.io/v1/RayJob" in first["message"]
    assert redis.hget("jobttl:notify:state:ops", "all:count") == b"0"
    audit.record("kind-not-served", None, logging.WARNING, resource="tekton.dev/v1/TaskRun", detail="no CRD")
    second = told(notifier, receiver)
    assert len(second) == 2 and "tekton.dev/v1/TaskRun" in second[1]["message"]
