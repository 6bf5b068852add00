"""Misconfiguration stops the process at start with the setting named (jobttl.core.runtime.config)."""

import certifi
import pytest

from jobttl.cli import main
from jobttl.core.runtime.config import ConfigError, Settings


def test_defaults_need_no_environment():
    settings = Settings.from_env({})
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.propagation_policy == "Foreground"
    assert settings.retry_intervals == [10, 20, 40, 80, 160]


@pytest.mark.parametrize(
    "name, value",
    [
        ("JOBTTL_REDIS_URL", "http://localhost:6379"),
        ("JOBTTL_PROPAGATION_POLICY", "foreground"),
        ("JOBTTL_QUEUE", "jobs:ttl"),
        ("JOBTTL_RETRY_MAX", "five"),
        ("JOBTTL_RETRY_BACKOFF", "-1"),
        ("JOBTTL_MAX_EVENT_BYTES", "10"),
        ("JOBTTL_LOG_LEVEL", "LOUD"),
    ],
)
def test_each_invalid_setting_is_named(name, value):
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value})


def test_the_cli_exits_2_naming_the_setting(monkeypatch, capsys):
    monkeypatch.setenv("JOBTTL_PROPAGATION_POLICY", "Sideways")
    assert main(["worker"]) == 2
    assert "JOBTTL_PROPAGATION_POLICY" in capsys.readouterr().err


def test_an_unreadable_kubeconfig_stops_the_worker_naming_kubeconfig(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert main(["worker"]) == 2
    assert "KUBECONFIG" in capsys.readouterr().err


def test_an_invalid_policy_file_stops_the_process_naming_file_and_field(monkeypatch, capsys, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("maxTTL: 1d\nttlAfterFailure: 2d\n")
    monkeypatch.setenv("JOBTTL_POLICY", str(policy))
    assert main(["sink"]) == 2
    err = capsys.readouterr().err
    assert f"JOBTTL_POLICY: {policy}:2: ttlAfterFailure: is longer than maxTTL" in err


@pytest.mark.parametrize(
    "name, value",
    [
        ("JOBTTL_DELETE_RATE", "fast"),
        ("JOBTTL_RESYNC_MAX_SHARE", "1.5"),
        ("JOBTTL_RESYNC_INTERVAL", "-1"),
        ("JOBTTL_RESYNC_MIN_INTERVAL", "-5"),
        ("JOBTTL_RESYNC_MIN_INTERVAL", "5m"),
        ("JOBTTL_RESYNC_MIN_INTERVAL", "90000"),
    ],
)
def test_resync_and_rate_settings_are_validated(name, value):
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value})


@pytest.mark.parametrize(
    "name, value",
    [
        ("JOBTTL_RESYNC_MAX_SHARE", "nan"),
        ("JOBTTL_DELETE_RATE", "inf"),
        ("JOBTTL_TOMBSTONE_DAYS", "0"),
        ("JOBTTL_CLOCK_SKEW_BOUND", "0"),
        ("JOBTTL_REDIS_URL", "redis+cluster://x"),
        ("JOBTTL_STUCK_AFTER", "soon"),
    ],
)
def test_settings_that_would_silently_break_safety_are_refused(name, value):
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value})


def test_oidc_needs_both_its_audience_and_its_issuer():
    with pytest.raises(ConfigError, match="JOBTTL_SINK_OIDC_AUDIENCE and JOBTTL_SINK_OIDC_ISSUER"):
        Settings.from_env({"JOBTTL_SINK_OIDC_AUDIENCE": "jobttl-sink"})


CA = certifi.where()  # a PEM CA bundle TLS can load
OIDC = {"JOBTTL_SINK_OIDC_AUDIENCE": "jobttl-sink", "JOBTTL_SINK_OIDC_ISSUER": "https://issuer.example"}


@pytest.mark.parametrize(
    "env, refused",
    [
        ({"JOBTTL_REDIS_CA_FILE": CA}, "JOBTTL_REDIS_CA_FILE is set but JOBTTL_REDIS_URL does not use TLS"),
        ({"JOBTTL_REDIS_CA_FILE": CA, "JOBTTL_REDIS_URL": "redis://r:6379/0"}, "does not use TLS"),
        ({"JOBTTL_REDIS_CA_FILE": CA, "JOBTTL_REDIS_URL": "rediss://r:6379/0"}, None),
        ({"JOBTTL_REDIS_CA_FILE": "", "JOBTTL_REDIS_URL": "redis://r:6379/0"}, None),  # empty: unset
        ({"JOBTTL_SINK_OIDC_ISSUER": "https://issuer.example"}, "set both, or neither"),
        (OIDC, None),
        ({"JOBTTL_READ_API_AUTH": "oidc"}, "JOBTTL_READ_API_AUTH=oidc checks tokens as the sink's events are checked"),
        ({**OIDC, "JOBTTL_READ_API_AUTH": "oidc"}, None),
    ],
)
def test_settings_that_need_each_other_are_refused_alone(env, refused):
    if refused is None:
        Settings.from_env(env)
        return
    with pytest.raises(ConfigError) as raised:
        Settings.from_env(env)
    assert refused in str(raised.value)


@pytest.mark.parametrize(
    "env, auth",
    [
        ({}, "none"),
        (OIDC, "oidc"),
        ({**OIDC, "JOBTTL_READ_API_AUTH": "none"}, "none"),
        ({"JOBTTL_READ_API_AUTH": "kubernetes"}, "kubernetes"),
    ],
)
def test_the_read_api_checks_tokens_as_the_events_are_unless_told_otherwise(env, auth):
    assert Settings.from_env(env).read_api_auth == auth


def test_every_setting_is_described_once_for_help_and_readme():
    from jobttl.core.runtime.config import SETTINGS, describe

    assert len({s.env for s in SETTINGS}) == len(SETTINGS)
    assert [row[0] for row in describe()] == [s.env for s in SETTINGS]
