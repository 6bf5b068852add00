"""The chart's notifier (charts/jobttl/templates/notify.yaml), through Helm's own engine: its Deployment,
where its secrets come from, and what it refuses to render."""

from __future__ import annotations

import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the test extras) is not installed")

from jobttl.core.domain.rules.policy import parse_policy  # noqa: E402
from jobttl.core.runtime.config import Settings  # noqa: E402
from jobttl.notifier.channels import open_channels  # noqa: E402
from tests.deploy.chart import CHART, NAMESPACE, chart, find, render  # noqa: E402
from tests.deploy.manifests import pod_spec  # noqa: E402
from tests.deploy.test_chart import problems  # noqa: E402

SLACK = "mmost://chat.example/s3cr3ttoken0123"
VALUES = {
    "intake": {"mode": "watch"},
    "monitoring": {"enabled": True},
    "policy": {
        "ttl": "7d",
        "notify": [
            {"name": "ops", "urlFromEnv": "JOBTTL_NOTIFY_CHAT", "on": ["deleted", "stuck"], "digest": "1h"},
            {"name": "hooks", "url": "json://hooks.example/jobttl", "on": ["guard-tripped"]},
        ],
    },
    "notifications": {
        "enabled": True,
        "consoleURL": "https://jobttl.example",
        "secretEnv": [{"name": "JOBTTL_NOTIFY_CHAT", "secretName": "chat", "key": "url"}],
    },
}


def test_the_notifier_lints_and_every_object_it_adds_is_valid():
    report = helm.lint(str(CHART), VALUES, strict=True, namespace=NAMESPACE)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []
    objects = render(VALUES)
    for kind in ("Deployment", "NetworkPolicy", "PodMonitor"):
        assert problems(find(objects, kind, "jobttl-notify")) == []


def test_the_notifier_has_its_secrets_from_secrets_and_no_kubernetes_token():
    objects = render(VALUES)
    spec = pod_spec(find(objects, "Deployment", "jobttl-notify"))
    assert spec["serviceAccountName"] == "jobttl-no-api" and spec["automountServiceAccountToken"] is False
    [container] = spec["containers"]
    assert container["args"] == ["notify"]
    env = {e["name"]: e for e in container["env"]}
    assert env["JOBTTL_NOTIFY_CHAT"]["valueFrom"] == {"secretKeyRef": {"name": "chat", "key": "url"}}
    assert env["JOBTTL_CONSOLE_URL"]["value"] == "https://jobttl.example"
    policy = find(objects, "ConfigMap", "jobttl-policy")["data"]["policy.yaml"]
    assert "chat.example" not in policy
    # The rendered policy and environment are what the notifier accepts at start.
    settings = Settings.from_env({"JOBTTL_POLICY": "", "JOBTTL_CONSOLE_URL": env["JOBTTL_CONSOLE_URL"]["value"]})
    channels = parse_policy(yaml.safe_load(policy), "the chart's policy").notify
    assert [c.name for c in open_channels(channels, {"JOBTTL_NOTIFY_CHAT": SLACK})] == ["ops", "hooks"]
    assert settings.console_url == "https://jobttl.example"
    # Redis lets the notifier in; nothing but Prometheus reaches it.
    [rule] = find(objects, "NetworkPolicy", "jobttl-redis")["spec"]["ingress"]
    assert {"sink", "worker", "notify"} <= set(rule["from"][0]["podSelector"]["matchExpressions"][2]["values"])


def test_on_written_unquoted_in_a_values_file_reaches_the_notifier_as_on():
    """Helm reads an unquoted `on:` (YAML 1.1) as "true", and the rendered policy says "true": jobttl reads it as on."""
    values = yaml.safe_load("policy:\n  notify:\n    - {name: ops, url: 'json://h/x', on: [stuck]}\n")
    rendered = {**values["policy"]["notify"][0]}
    rendered["true"] = rendered.pop(True)  # what sigs.k8s.io/yaml makes of the key
    objects = render({"policy": {"notify": [rendered]}, "notifications": {"enabled": True}})
    policy = yaml.safe_load(find(objects, "ConfigMap", "jobttl-policy")["data"]["policy.yaml"])
    assert parse_policy(policy, "the chart's policy").notify[0].on == {"stuck"}


@pytest.mark.parametrize(
    "values, message",
    [
        ({"notifications": {"enabled": True}}, "notifications.enabled: the policy names no channels"),
        (
            {
                "notifications": {"enabled": True},
                "policy": {"notify": [{"name": "ops", "urlFromEnv": "X", "on": ["stuck"]}]},
            },
            "policy.notify[0].urlFromEnv: X is not set by notifications.secretEnv",
        ),
        (
            {
                "notifications": {"enabled": True, "secretEnv": [{"name": "X", "secretName": "s"}]},
                "policy": {"notify": [{"name": "ops", "urlFromEnv": "X", "on": ["stuck"]}]},
            },
            "key",
        ),
    ],
)
def test_a_notifier_without_channels_or_without_a_channels_secret_is_refused(values, message):
    with pytest.raises(Exception) as raised:
        chart().render(values, name="jobttl", namespace=NAMESPACE, is_install=True)
    assert message in str(raised.value)


def test_without_notifications_nothing_of_the_notifier_is_rendered():
    objects = render({})
    assert not [o for o in objects if o["metadata"]["name"] == "jobttl-notify"]
    [rule] = find(objects, "NetworkPolicy", "jobttl-redis")["spec"]["ingress"]
    admitted = rule["from"][0]["podSelector"]["matchExpressions"][2]["values"]
    assert "notify" not in admitted and {"sink", "worker"} <= set(admitted)


@pytest.mark.parametrize(
    "url",
    [
        "slack://T000/B000/XXXXSECRET",
        "json://h/p?+Authorization=Bearer%20S3CRETTOKEN",
        "form://h/p?-token=S3CRETTOKEN",
        "json://h/p?token=S3CRETTOKEN",
        "mailto://smtp.example?to=ops@example.org&pass=S3CRETTOKEN",
        "mailtos://bob:S3CRETTOKEN@smtp.example",
    ],
)
@pytest.mark.parametrize("enabled", [True, False])
def test_a_url_that_may_hold_a_secret_is_never_rendered_into_the_policy(url, enabled):
    """Helm's engine refuses it (the values schema's pattern, or the chart's fail), notifications on or
    off: else it would sit in the policy's ConfigMap."""
    values = {
        "policy": {"notify": [{"name": "ops", "url": url, "on": ["deleted"]}]},
        "notifications": {"enabled": enabled},
    }
    with pytest.raises(Exception) as raised:
        chart().render(values, name="jobttl", namespace=NAMESPACE, is_install=True)
    error = str(raised.value)
    assert "at '/policy/notify/0/url': " in error or error.count("policy.notify[0].url: ") == 1, error
    if "policy.notify[0].url" in error:  # the chart's own fail never quotes the URL (Helm's schema error does)
        assert "S3CRETTOKEN" not in error and "urlFromEnv" in error


def test_a_url_without_a_credential_slot_renders():
    objects = render(
        {
            "policy": {
                "notify": [
                    {
                        "name": "ops",
                        "url": "mailto://smtp.example:25?from=j@example.org&to=ops@example.org",
                        "on": ["deleted"],
                    }
                ]
            }
        }
    )
    assert "mailto://smtp.example:25" in find(objects, "ConfigMap", "jobttl-policy")["data"]["policy.yaml"]


def notify_egress(values: dict) -> tuple[list, list]:
    policy = find(render(values), "NetworkPolicy", "jobttl-notify")
    assert problems(policy) == []
    return policy["spec"]["policyTypes"], policy["spec"].get("egress")


def test_with_egress_policies_the_notifier_reaches_dns_redis_and_the_channels_ports_only():
    types, rules = notify_egress({**VALUES, "networkPolicy": {"egress": {"enabled": True}}})
    assert types == ["Ingress", "Egress"]
    dns, redis, *channels = rules
    assert {p["port"] for p in dns["ports"]} == {53}
    assert redis["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "redis"
    assert redis["ports"] == [{"protocol": "TCP", "port": 6379}]
    assert [c["to"] for c in channels] == [[{"ipBlock": {"cidr": "0.0.0.0/0"}}], [{"ipBlock": {"cidr": "::/0"}}]]
    assert all(sorted(p["port"] for p in c["ports"]) == [25, 443, 465, 587] for c in channels)
    assert not any(p["port"] in (6443, 8080) for rule in rules for p in rule["ports"]), "no API server, no sink"


def test_the_notifiers_destinations_are_what_notifications_egress_lists_and_an_external_redis_its_own():
    values = {
        **VALUES,
        "redis": {"mode": "external", "external": {"existingSecret": "redis-url"}},
        "networkPolicy": {"egress": {"enabled": True, "redis": [{"cidr": "10.1.0.0/16", "ports": [6379]}]}},
        "notifications": {
            **VALUES["notifications"],
            "egress": [{"cidr": "203.0.113.0/24", "ports": [443]}, {"cidr": "2001:db8::/32", "ports": [8080]}],
        },
    }
    _, rules = notify_egress(values)
    assert [r["to"] for r in rules[1:]] == [
        [{"ipBlock": {"cidr": "10.1.0.0/16"}}],
        [{"ipBlock": {"cidr": "203.0.113.0/24"}}],
        [{"ipBlock": {"cidr": "2001:db8::/32"}}],
    ]
    assert rules[3]["ports"] == [{"protocol": "TCP", "port": 8080}]


def test_without_egress_policies_the_notifier_has_an_ingress_policy_only():
    types, rules = notify_egress(VALUES)
    assert types == ["Ingress"] and rules is None
