"""Notifications end to end (`jobttl notify`, jobttl.notifier): real processes all the way.

A stack of its own (emulator, Redis, worker) deletes jobs; `jobttl notify` reads the audit trail and
sends, through Apprise, to a local HTTP receiver (Apprise's generic ``json://`` webhook and its
Mattermost ``mmost://`` webhook, Slack's payload shape: Apprise's own ``slack://`` cannot be pointed
at a local host) and to a real SMTP server (aiosmtpd) for ``mailto://``. What each receiver got is
what Apprise sent over the wire.
"""

from __future__ import annotations

import email
import json
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from dataclasses import dataclass, field

import pytest
import requests
from aiosmtpd.controller import Controller
from flask import Flask, request
from werkzeug.serving import make_server

from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import PYTORCHJOB, TFJOB
from jobttl.core.store import keys
from tests.e2e.conftest import OwnStack
from tests.fixtures import job_object
from tests.services import ROOT, JobttlProcess, free_port, wait_for

CHAT_TOKEN = "chattoken0123456789"
CONSOLE = "https://jobttl.example"
HOUR = 3600


@dataclass
class Received:
    path: str
    body: dict
    at: float


@dataclass
class Receiver:
    """An HTTP endpoint that keeps what it is sent, by path; a path in `failing` answers 500."""

    got: list[Received] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)

    def start(self) -> Receiver:
        app = Flask("notify-receiver")

        @app.post("/<path:path>")
        def receive(path):
            path = "/" + path
            self.got.append(Received(path, json.loads(request.data), time.time()))
            return ("", 500) if path in self.failing else ("", 200)

        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def at(self, path: str, attempts: bool = False) -> list[Received]:
        """What `path` received (only what it answered 200 to, unless `attempts`)."""
        return [r for r in self.got if r.path == path and (attempts or not r.body.get("_failed"))]


class Mailbox:
    """aiosmtpd's handler: every message, as the SMTP server took it."""

    def __init__(self):
        self.messages: list[email.message.Message] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
        self.messages.append(email.message_from_bytes(envelope.content))
        return "250 OK"


def policy(port: int, smtp: int, closed: int) -> str:
    return textwrap.dedent(f"""\
        notify:
          - name: hooks
            url: json://127.0.0.1:{port}/hooks
            on: [deleted]
            namespaces: [digest, other]
            digest: 1h
          - name: steady
            url: json://127.0.0.1:{port}/steady
            on: [deleted]
            namespaces: [flaky]
            digest: 1h
          - name: alerts
            url: json://127.0.0.1:{port}/alerts
            on: [stuck]
            namespaces: [flaky]
            digest: 1h
          - name: chat
            urlFromEnv: TEST_CHAT_URL
            on: [deleted]
            namespaces: [digest]
            digest: 1h
          - name: mail
            url: mailto://127.0.0.1:{smtp}?from=jobttl@example.org&to=ops@example.org
            on: [deleted]
            namespaces: [digest]
            digest: 1h
          - name: flaky
            url: json://127.0.0.1:{port}/flaky
            on: [deleted]
            namespaces: [flaky]
            digest: 1h
          - name: down
            url: json://127.0.0.1:{closed}/down
            on: [deleted]
            namespaces: [flaky]
            digest: 1h
          - name: team
            url: json://127.0.0.1:{port}/team
            owners: true
            namespaces: [team]
            digest: 0s
        """)


class World:
    def __init__(self, directory):
        self.receiver = Receiver().start()
        self.mailbox = Mailbox()
        self.smtp = Controller(self.mailbox, hostname="127.0.0.1", port=free_port())
        self.smtp.start()
        self.stack = OwnStack(directory, "notify", policy(self.receiver.port, self.smtp.port, free_port()))
        self.metrics_port = free_port()
        self.env = {
            **self.stack.env,
            "TEST_CHAT_URL": f"mmost://127.0.0.1:{self.receiver.port}/{CHAT_TOKEN}",
            "JOBTTL_NOTIFY_GATHER": "1",
            "JOBTTL_NOTIFY_RETRY_BACKOFF": "1",
            "JOBTTL_NOTIFY_METRICS_PORT": str(self.metrics_port),
            "JOBTTL_CONSOLE_URL": CONSOLE,
        }
        self.notifier: JobttlProcess | None = None
        self.starts = 0

    def start_notifier(self) -> None:
        self.starts += 1
        self.notifier = JobttlProcess(["notify"], self.env, self.stack.directory, f"notify-{self.starts}").start()
        wait_for(
            lambda: requests.get(f"http://127.0.0.1:{self.metrics_port}/healthz", timeout=1).ok,
            timeout=20,
            what=f"the notifier\n{self.notifier.log()}",
        )

    def stop_notifier(self) -> None:
        self.notifier.stop()

    def stop(self) -> None:
        self.notifier.stop()
        self.stack.stop()
        self.smtp.stop()
        self.receiver.server.shutdown()

    def metric(self, channel: str, event: str, outcome: str) -> float:
        text = requests.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        line = f'jobttl_notifications_total{{channel="{channel}",event="{event}",outcome="{outcome}"}} '
        return sum(float(row[len(line) :]) for row in text.splitlines() if row.startswith(line))

    def finished(
        self, name: str, namespace: str, kind=TFJOB, ttl: int = 0, annotations: dict | None = None, ago: float = 60
    ) -> dict:
        """A job that finished `ago` seconds ago, booked as the sink books it."""
        obj = job_object(kind, name, namespace, at=time.time() - ago, ttl=ttl)
        if annotations:
            obj["metadata"]["annotations"] = annotations
        obj = self.stack.seed(obj)
        assert self.stack.book(obj, kind).due is not None
        return obj

    def deleted(self, namespace: str) -> list[str]:
        """The names the audit trail says were deleted in `namespace`."""
        return sorted(
            e.fields["name"]
            for e in self.stack.reconciler.audit.entries()
            if e.fields.get("event") == "deleted" and e.fields.get("namespace") == namespace
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    world = World(tmp_path_factory.mktemp("notify"))
    world.start_notifier()
    yield world
    world.stop()


def test_deletions_reach_the_webhook_the_chat_and_the_mailbox_as_one_digest_across_a_restart(world):
    # The notifier is down while the jobs go: the trail keeps what it has not read.
    world.stop_notifier()
    for name, kind in (("mnist", TFJOB), ("resnet", PYTORCHJOB), ("bert", TFJOB)):
        world.finished(name, "digest", kind)
    world.finished("elsewhere", "other")
    wait_for(
        lambda: world.deleted("digest") == ["bert", "mnist", "resnet"] and world.deleted("other"),
        timeout=30,
        what="four deletions",
    )
    world.start_notifier()

    # Two namespaces, one channel: one message, a part per namespace.
    [hook] = wait_for(lambda: world.receiver.at("/hooks"), timeout=20, what="the webhook's digest")
    assert hook.body["title"] == "jobttl: 4 jobs deleted in 2 namespaces"
    first, second = hook.body["message"].split("\n\n")
    assert second.splitlines() == [
        "1 deleted in namespace other: 1 TFJob",
        "- TFJob other/elsewhere, TTL 0s from spec.runPolicy.ttlSecondsAfterFinished",
        f"History: {CONSOLE}/history?namespace=other",
    ]
    lines = first.splitlines()
    assert lines[0] == "3 deleted in namespace digest: 2 TFJob, 1 PyTorchJob"
    assert sorted(lines[1:4]) == [
        "- PyTorchJob digest/resnet, TTL 0s from spec.runPolicy.ttlSecondsAfterFinished",
        "- TFJob digest/bert, TTL 0s from spec.runPolicy.ttlSecondsAfterFinished",
        "- TFJob digest/mnist, TTL 0s from spec.runPolicy.ttlSecondsAfterFinished",
    ]
    assert lines[4] == f"History: {CONSOLE}/history?namespace=digest"
    assert hook.body["type"] == "info"

    # Mattermost's incoming webhook (Slack's payload: {"text": ...}), its token from the environment.
    [chat] = wait_for(lambda: world.receiver.at(f"/hooks/{CHAT_TOKEN}"), timeout=20, what="the chat's digest")
    assert "3 deleted in namespace digest: 2 TFJob, 1 PyTorchJob" in chat.body["text"]

    [mail] = wait_for(lambda: world.mailbox.messages, timeout=20, what="the e-mail")
    assert mail["Subject"] == "jobttl: 3 jobs deleted in digest" and mail["To"] == "ops@example.org"
    text = (
        mail.get_payload(decode=True).decode()
        if not mail.is_multipart()
        else mail.get_payload(0).get_payload(decode=True).decode()
    )
    assert "3 deleted in namespace digest" in text and "digest/mnist" in text

    for channel in ("hooks", "chat", "mail"):
        assert world.metric(channel, "deleted", "sent") == 1

    # A fourth deletion within the hour: filed, due when the period is over, not sent now.
    world.finished("late", "digest")
    redis = world.stack.redis
    wait_for(lambda: redis.llen(keys.notify_buffer("hooks", "all")) == 1, timeout=30, what="the fourth deletion filed")
    last = float(redis.hget(keys.notify_state("hooks"), "all:last"))
    wait_for(
        lambda: redis.zscore(keys.notify_due("hooks"), "all") == last + HOUR,
        timeout=10,
        what="the digest held back for its period",
    )
    assert len(world.receiver.at("/hooks")) == 1 and len(world.mailbox.messages) == 1


def test_a_failing_channel_delays_no_deletion_and_no_other_channel_and_is_retried(world):
    world.receiver.failing.add("/flaky")
    world.finished("first", "flaky")
    wait_for(lambda: world.metric("flaky", "deleted", "failed") >= 2, timeout=30, what="the flaky channel failing")
    wait_for(lambda: world.metric("down", "deleted", "failed") >= 1, timeout=30, what="the channel that is down")
    # The other channel of the namespace has had its digest all along.
    [hook] = wait_for(lambda: world.receiver.at("/steady"), timeout=20, what="the other channel's digest")
    assert hook.body["title"] == "jobttl: 1 job deleted in flaky"

    # While the channel still fails, another job goes at its time: nothing in the deletion path waits on it.
    world.finished("second", "flaky")
    wait_for(lambda: world.deleted("flaky") == ["first", "second"], timeout=30, what="the second deletion")
    assert "/flaky" in world.receiver.failing
    failed_before = world.metric("flaky", "deleted", "failed")

    world.receiver.failing.discard("/flaky")
    delivered = wait_for(
        lambda: (
            [r for r in world.receiver.got if r.path == "/flaky"][-1:]
            if world.metric("flaky", "deleted", "sent") == 1
            else None
        ),
        timeout=30,
        what="the retry",
    )
    # The message retried is the digest as it stands: both deletions, in one message.
    assert delivered[0].body["title"] == "jobttl: 2 jobs deleted in flaky"
    assert world.metric("flaky", "deleted", "failed") == failed_before
    assert world.stack.redis.llen(keys.notify_buffer("flaky", "all")) == 0
    assert world.metric("down", "deleted", "sent") == 0


def test_a_job_owner_gets_their_jobs_messages_on_a_channel_that_takes_them_and_nowhere_else(world):
    evil = f"json://127.0.0.1:{world.receiver.port}/evil"
    world.finished("mine", "team", annotations={"jobttl.io/notify": "team"})
    world.finished("pushy", "team", annotations={"jobttl.io/notify": f"hooks, {evil}"})
    wait_for(lambda: world.deleted("team") == ["mine", "pushy"], timeout=30, what="the team's deletions")

    deleted = wait_for(
        lambda: [r for r in world.receiver.at("/team") if "deleted in team" in r.body["title"]],
        timeout=20,
        what="the owner's deleted message",
    )
    assert "1 job deleted in team" in deleted[0].body["title"] and "team/mine" in deleted[0].body["message"]
    upcoming = wait_for(
        lambda: [r for r in world.receiver.at("/team") if "upcoming" in r.body["title"]],
        timeout=20,
        what="the owner's upcoming message",
    )
    assert "team/mine at " in upcoming[0].body["message"] and "pushy" not in upcoming[0].body["message"]
    wait_for(lambda: world.metric("(unknown)", "deleted", "refused") >= 1, timeout=10, what="the URL refused")
    assert world.metric("hooks", "deleted", "refused") >= 1  # hooks takes no owner's requests
    assert world.receiver.at("/evil", attempts=True) == []  # an annotation never names where jobttl sends
    trail = [json.dumps(e.fields) for e in world.stack.reconciler.audit.entries()]
    assert any('"notify": "hooks,(unknown)"' in entry for entry in trail)
    assert not any("/evil" in entry for entry in trail), "nor is what it says kept"


@pytest.mark.parametrize(
    "channel, env, problem",
    [
        (
            "{name: chat, urlFromEnv: UNSET_CHAT_URL, on: [deleted]}",
            {},
            "notify[0].urlFromEnv: the environment variable UNSET_CHAT_URL is not set",
        ),
        (
            f"{{name: chat, url: 'mmost://127.0.0.1:8065/{CHAT_TOKEN}', on: [deleted]}}",
            {},
            "notify[0].url: url takes the schemes whose URL has no slot for a credential",
        ),
    ],
)
def test_a_bad_channel_stops_the_notifier_at_start_naming_file_and_field(tmp_path, channel, env, problem):
    """The process's answer (exit 2, the message); every other check: tests/notifier/test_channels.py."""
    path = tmp_path / "policy.yaml"
    path.write_text(f"notify:\n  - {channel}\n")
    result = subprocess.run(
        [sys.executable, "-m", "jobttl", "notify"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "JOBTTL_POLICY": str(path), "JOBTTL_REDIS_URL": "redis://127.0.0.1:1/0", **env},
    )
    assert result.returncode == 2, result.stderr
    assert f"jobttl: configuration error: JOBTTL_POLICY: {path}:2: {problem}" in result.stderr  # file, line, field
    assert CHAT_TOKEN not in result.stderr


def test_a_bad_audit_entry_is_skipped_and_the_next_one_still_reaches_the_channel(world):
    """Redis is not a trusted input: an entry that is not UTF-8, and one whose numbers are no numbers
    (inf), written by anything holding the password, are skipped or told as best they can be, and
    the notifier goes on: the valid entry after them is sent, and /healthz stays honest."""
    redis = world.stack.redis
    bad = redis.xadd(
        keys.AUDIT_STREAM,
        {"event": "stuck", "namespace": "flaky", "kind": "TFJob", "name": b"\xff\xfe-not-utf8", b"\xc3(": b"\x80"},
    ).decode()
    redis.xadd(
        keys.AUDIT_STREAM,
        {
            "event": "stuck",
            "namespace": "flaky",
            "kind": "TFJob",
            "name": "overflow",
            "stuckFor": "inf",
            "ttl": "1e400",
        },
    )
    ref = JobRef("kubeflow.org/v1", "TFJob", "flaky", "valid-after", str(uuid.uuid4()))
    world.stack.reconciler.audit.record("stuck", ref, stuckFor=120, finalizers="[example.com/keep]")
    [message] = wait_for(
        lambda: world.receiver.at("/alerts"),
        timeout=30,
        what=f"the stuck digest after the bad entry {bad}\n{world.notifier.log()}",
    )
    assert "TFJob flaky/valid-after: still present for 2m" in message.body["message"]
    assert "TFJob flaky/overflow: still present;" in message.body["message"]
    assert requests.get(f"http://127.0.0.1:{world.metrics_port}/healthz", timeout=5).status_code == 200
    assert "Traceback" not in world.notifier.log()
    assert f'"entry": "{bad}"' in world.notifier.log() and "notify-bad-entry" in world.notifier.log()
    assert (
        'jobttl_notify_bad_entries_total{stage="read"} 1.0'
        in requests.get(f"http://127.0.0.1:{world.metrics_port}/metrics", timeout=5).text
    )


@pytest.mark.parametrize("command", [["notify"], ["worker"], ["sink"]])
@pytest.mark.parametrize(
    "url",
    [
        f"json://127.0.0.1/p?+Authorization=Bearer%20{CHAT_TOKEN}",
        f"form://127.0.0.1/p?-token={CHAT_TOKEN}",
        f"slack://T000/B000/{CHAT_TOKEN}",
    ],
)
def test_every_process_refuses_a_policy_url_that_may_hold_a_secret(tmp_path, command, url):
    """Not only the notifier: the policy's ConfigMap is read by every process, notifications on or off."""
    path = tmp_path / "policy.yaml"
    path.write_text(f"ttl: 1h\nnotify:\n  - name: ops\n    on: [deleted]\n    url: '{url}'\n")
    result = subprocess.run(
        [sys.executable, "-m", "jobttl", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "JOBTTL_POLICY": str(path), "JOBTTL_REDIS_URL": "redis://127.0.0.1:1/0"},
    )
    assert result.returncode == 2, result.stderr
    assert f"jobttl: configuration error: JOBTTL_POLICY: {path}:5: notify[0].url: " in result.stderr
    assert "urlFromEnv" in result.stderr and CHAT_TOKEN not in result.stderr
