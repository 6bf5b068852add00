"""The NetworkPolicies in knative/ admit exactly the event sources and the scraper (issue: the
sink and the read API were open to any pod).

The policies are evaluated as Kubernetes evaluates ingress rules (a peer matches when its
namespace and pod labels match one `from` entry, on one of the listed ports), against the
workloads' own labels as rendered, so a relabelled workload is checked too.
"""

from __future__ import annotations

import pytest

from tests.deploy.manifests import KNATIVE, find, rendered, validate_core

VARIANTS = {"base": KNATIVE, "direct": KNATIVE / "overlays" / "direct"}
NAMESPACE = "jobttl"


def _matches(selector: dict | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return True
    expressions = selector.get("matchExpressions") or []
    assert all(e["operator"] == "In" for e in expressions), "only the operators the manifests use"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()) and all(
        labels.get(e["key"]) in e["values"] for e in expressions
    )


def admitted(
    policy: dict, namespace: str, namespace_labels: dict[str, str], pod_labels: dict[str, str], port: int
) -> bool:
    """Does `policy` let a pod with these labels, in this namespace, reach `port`?"""
    for rule in policy["spec"].get("ingress") or []:
        ports = [p["port"] for p in rule.get("ports") or []]
        if ports and port not in ports:
            continue
        for peer in rule.get("from") or [{}]:
            in_namespace = (
                _matches(peer["namespaceSelector"], namespace_labels)
                if "namespaceSelector" in peer
                else namespace == policy["metadata"]["namespace"]
            )
            if in_namespace and _matches(peer.get("podSelector"), pod_labels):
                return True
    return False


def selects(policy: dict, workload: dict) -> bool:
    labels = workload["spec"]["template"]["metadata"]["labels"]
    return _matches(policy["spec"]["podSelector"], labels)


def ns(name: str) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": name}


@pytest.fixture(params=sorted(VARIANTS))
def objects(request):
    return rendered(VARIANTS[request.param])


def test_the_policies_are_valid_network_policies(objects):
    for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
        assert validate_core(policy) == [], policy["metadata"]["name"]


def test_each_component_is_covered_by_its_policy(objects):
    assert selects(find(objects, "NetworkPolicy", "jobttl-sink"), find(objects, "Service", "jobttl-sink"))
    assert selects(find(objects, "NetworkPolicy", "jobttl-worker"), find(objects, "Deployment", "jobttl-worker"))
    assert selects(find(objects, "NetworkPolicy", "jobttl-redis"), find(objects, "StatefulSet", "jobttl-redis"))


@pytest.mark.parametrize(
    "who, namespace, labels, allowed",
    [
        ("the Broker's filter", "knative-eventing", {"eventing.knative.dev/brokerRole": "filter"}, True),
        ("Knative Serving's activator", "knative-serving", {"app": "activator"}, True),
        (
            "the ApiServerSource adapter",
            NAMESPACE,
            {"eventing.knative.dev/source": "apiserver-source-controller"},
            True,
        ),
        (
            "jobttl watch",
            NAMESPACE,
            {"app.kubernetes.io/part-of": "jobttl", "app.kubernetes.io/component": "watcher"},
            True,
        ),
        ("Prometheus", "monitoring", {"app.kubernetes.io/name": "prometheus"}, True),
        ("a user's pod", "team-a", {"app": "notebook"}, False),
        ("another pod of this namespace", NAMESPACE, {"app": "debug"}, False),
    ],
)
def test_the_sink_admits_event_sources_and_the_scraper_and_nobody_else(objects, who, namespace, labels, allowed):
    policy = find(objects, "NetworkPolicy", "jobttl-sink")
    assert admitted(policy, namespace, ns(namespace), labels, 8012) is allowed, who


def test_redis_admits_only_the_sink_and_the_worker(objects):
    policy = find(objects, "NetworkPolicy", "jobttl-redis")
    for name, kind in (("jobttl-sink", "Service"), ("jobttl-worker", "Deployment")):
        labels = find(objects, kind, name)["spec"]["template"]["metadata"]["labels"]
        assert admitted(policy, NAMESPACE, ns(NAMESPACE), labels, 6379), name
    watcher = {"app.kubernetes.io/part-of": "jobttl", "app.kubernetes.io/component": "watcher"}
    assert not admitted(policy, NAMESPACE, ns(NAMESPACE), watcher, 6379), "the watcher needs no Redis"
    assert not admitted(
        policy,
        "team-a",
        ns("team-a"),
        {"app.kubernetes.io/part-of": "jobttl", "app.kubernetes.io/component": "sink"},
        6379,
    )


def test_the_worker_admits_only_the_scraper_on_its_metrics_port(objects):
    policy = find(objects, "NetworkPolicy", "jobttl-worker")
    assert admitted(policy, "monitoring", ns("monitoring"), {}, 9090)
    assert not admitted(policy, "monitoring", ns("monitoring"), {}, 8080)
    assert not admitted(policy, "team-a", ns("team-a"), {}, 9090)


def test_the_evaluator_can_say_no():
    """A policy that admits everything from one namespace is caught admitting it, and only it."""
    policy = {
        "metadata": {"namespace": NAMESPACE},
        "spec": {
            "podSelector": {},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": ns("x")}}], "ports": [{"port": 1}]}],
        },
    }
    assert admitted(policy, "x", ns("x"), {}, 1)
    assert not admitted(policy, "x", ns("x"), {}, 2) and not admitted(policy, "y", ns("y"), {}, 1)
