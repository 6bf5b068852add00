"""The chart's console (charts/jobttl/templates/console.yaml), through Helm's own engine: its Deployment,
Service, Ingress and NetworkPolicy, the reviews its account may create, and the ClusterRoles users are
granted, equal to jobttl.core.domain.deploy.rights."""

from __future__ import annotations

import pytest

helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the test extras) is not installed")

from jobttl.core.domain.deploy import rights  # noqa: E402
from tests.deploy.chart import CHART, NAMESPACE, find, render  # noqa: E402
from tests.deploy.manifests import pod_spec  # noqa: E402
from tests.deploy.test_chart import problems  # noqa: E402

VALUES = {
    "intake": {"mode": "watch"},
    "console": {
        "enabled": True,
        "sessionKey": {"existingSecret": "console-key"},
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "host": "jobttl.example",
            "tls": [{"secretName": "jobttl-tls", "hosts": ["jobttl.example"]}],
        },
        "networkPolicy": {
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]
        },
    },
}


def test_the_console_lints_and_every_object_it_adds_is_valid():
    report = helm.lint(str(CHART), VALUES, strict=True, namespace=NAMESPACE)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []
    objects = render(VALUES)
    for kind in ("Deployment", "Service", "Ingress", "NetworkPolicy", "ClusterRole", "ClusterRoleBinding"):
        assert problems(find(objects, kind, "jobttl-console")) == []


def test_off_by_default():
    objects = render({"intake": {"mode": "watch"}})
    assert not [
        o for o in objects if "console" in o["metadata"]["name"] or o["metadata"]["name"].startswith("jobttl-reader")
    ]


def test_the_console_runs_with_kubernetes_sign_in_its_key_from_a_secret_and_reaches_redis():
    objects = render(VALUES)
    spec = pod_spec(find(objects, "Deployment", "jobttl-console"))
    assert spec["serviceAccountName"] == "jobttl-console"
    [container] = spec["containers"]
    assert container["args"] == ["console", "--host", "0.0.0.0", "--port", "8081"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["JOBTTL_CONSOLE_AUTH"] == "kubernetes"
    assert env["JOBTTL_CONSOLE_SESSION_KEY_FILE"] == "/etc/jobttl-console/session-key"
    assert {
        "name": "session-key",
        "secret": {"secretName": "console-key", "items": [{"key": "session-key", "path": "session-key"}]},
    } in spec["volumes"]
    [rule] = find(objects, "NetworkPolicy", "jobttl-redis")["spec"]["ingress"]
    assert "console" in rule["from"][0]["podSelector"]["matchExpressions"][2]["values"]
    ingress = find(objects, "Ingress", "jobttl-console")["spec"]
    assert ingress["rules"][0]["host"] == "jobttl.example" and ingress["ingressClassName"] == "nginx"
    assert ingress["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == "jobttl-console"
    policy = find(objects, "NetworkPolicy", "jobttl-console")["spec"]
    assert policy["ingress"][0]["from"] == VALUES["console"]["networkPolicy"]["from"]


def test_the_consoles_account_may_create_the_reviews_and_nothing_else():
    objects = render(VALUES)
    role = find(objects, "ClusterRole", "jobttl-console")
    assert sorted((r["apiGroups"][0], r["resources"][0], tuple(r["verbs"])) for r in role["rules"]) == [
        ("authentication.k8s.io", "tokenreviews", ("create",)),
        ("authorization.k8s.io", "subjectaccessreviews", ("create",)),
    ]
    binding = find(objects, "ClusterRoleBinding", "jobttl-console")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "jobttl-console", "namespace": NAMESPACE}]


@pytest.mark.parametrize("name", [rights.READER, rights.OPERATOR])
def test_the_cluster_roles_users_are_granted_are_jobttls_rights(name):
    role = find(render(VALUES), "ClusterRole", name)
    assert role["rules"] == rights.cluster_role(name)["rules"]


def test_a_second_release_can_leave_the_cluster_roles_to_the_first():
    objects = render({**VALUES, "console": {**VALUES["console"], "clusterRoles": False}})
    assert not [o for o in objects if o["metadata"]["name"] in (rights.READER, rights.OPERATOR)]


@pytest.mark.parametrize(
    "values, url",
    [
        ({"console": {"url": "https://jobttl.example.com"}}, "https://jobttl.example.com"),
        ({"notifications": {"consoleURL": "https://console.example"}}, "https://console.example"),
        ({}, "https://jobttl.example"),  # the Ingress's host, with TLS
        ({"console": {"ingress": {"enabled": False}}}, None),
    ],
)
def test_the_consoles_public_address_reaches_it_as_jobttl_console_url(values, url):
    merged = {**VALUES, **values, "console": {**VALUES["console"], **values.get("console", {})}}
    [container] = pod_spec(find(render(merged), "Deployment", "jobttl-console"))["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env.get("JOBTTL_CONSOLE_URL") == url
