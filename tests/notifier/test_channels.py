"""The policy's channels as Apprise takes them (jobttl.notifier.channels): checked at start, and what a
failure may say."""

from __future__ import annotations

import pytest

from jobttl.core.domain.notices.digest import Message
from jobttl.core.domain.notices.notify import Channel
from jobttl.core.domain.rules.policy import parse_policy
from jobttl.core.runtime.config import ConfigError
from jobttl.notifier.channels import AppriseChannel, open_channels
from tests.notifier.receiver import Receiver
from tests.services import free_port

TOKEN = "t0ken0123456789abcdef"
MESSAGE = Message("jobttl: 1 job deleted in a", "1 deleted in namespace a: 1 TFJob", False, ("deleted",))


def channel(spec: dict):
    return parse_policy({"notify": [{"name": "c", "on": ["deleted"], **spec}]}, "policy.yaml").notify[0]


@pytest.mark.parametrize(
    "spec, env, problem",
    [
        ({"urlFromEnv": "CHAT"}, {}, "policy.yaml: notify[0].urlFromEnv: the environment variable CHAT is not set"),
        ({"urlFromEnv": "CHAT"}, {"CHAT": "  "}, "the environment variable CHAT is not set"),
        ({"urlFromEnv": "CHAT"}, {"CHAT": f"nosuch://host/{TOKEN}"}, "notify[0].urlFromEnv: Apprise takes no such URL"),
    ],
)
def test_a_channel_apprise_cannot_use_or_that_leaks_a_secret_is_refused_at_start(spec, env, problem):
    with pytest.raises(ConfigError) as raised:
        open_channels((channel(spec),), env)
    assert problem in str(raised.value) and str(raised.value).startswith("JOBTTL_POLICY: policy.yaml: notify[0]")
    assert TOKEN not in str(raised.value) and "hunter22" not in str(raised.value)


@pytest.mark.parametrize("url", [f"mmost://chat.example/{TOKEN}", "mailto://bob:hunter22@smtp.example?to=o@x.org"])
def test_a_url_apprise_hides_part_of_is_refused_even_past_the_policys_own_check(url):
    """The policy loader refuses a url with a credential slot (tests/core/test_notify.py); Apprise's
    privacy view is the notifier's second look, for a Channel made some other way."""
    with pytest.raises(ConfigError) as raised:
        open_channels((Channel("c", frozenset({"deleted"}), url=url, place="policy.yaml: notify[0].url"),), {})
    assert "policy.yaml: notify[0].url: this URL holds a secret" in str(raised.value)
    assert TOKEN not in str(raised.value) and "hunter22" not in str(raised.value)


def test_a_secret_from_the_environment_and_a_url_without_one_are_taken():
    [secret, plain] = open_channels(
        (channel({"urlFromEnv": "CHAT"}), channel({"url": "json://hooks.example/x"})),
        {"CHAT": f"mmost://chat.example/{TOKEN}"},
    )
    assert secret.url == f"mmost://chat.example/{TOKEN}" and plain.url == "json://hooks.example/x"


def test_a_message_goes_through_apprise_and_a_failure_says_why_without_the_secret():
    receiver = Receiver()
    try:
        ok = AppriseChannel(channel({"urlFromEnv": "X"}), f"json://127.0.0.1:{receiver.port}/{TOKEN}")
        assert ok.send(MESSAGE) is None
        [(path, body)] = receiver.got
        assert path == f"/{TOKEN}" and body["title"] == MESSAGE.title and body["message"] == MESSAGE.body
        assert body["type"] == "info"
    finally:
        receiver.stop()
    down = AppriseChannel(channel({"urlFromEnv": "X"}), f"json://127.0.0.1:{free_port()}/{TOKEN}")
    error = down.send(MESSAGE)
    assert "A Connection error occurred sending JSON notification to 127.0.0.1" in error and TOKEN not in error
