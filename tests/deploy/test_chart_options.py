"""The chart's options operators expect of a chart (issue 27), rendered by Helm's own engine.

Each option does what values.yaml says, for every pod it names and no other: disruption budgets
where a component runs more than one pod, labels on every object and never in a selector, pod
annotations and labels, scheduling and resources per component over the top level's defaults,
environment from Secrets, pull secrets, global.imageRegistry for every image, the watcher's
probes, the dead letters pinned and hardened, delete rights confined to listed namespaces, egress
policies, and the helm test pod. The ci/ values files exercising them are linted, validated and
installed by test_chart.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("helm_python", reason="helm-python-sdk (the test extras) is not installed")

from jobttl.core.domain.deploy.permissions import permissions
from tests.deploy.chart import CHART, chart, ci_values, find, render
from tests.deploy.manifests import pod_spec
from tests.deploy.test_chart import declared
from tests.deploy.test_rbac import grants

OPERATORS = ci_values(CHART / "ci" / "watch-operators-values.yaml")
WATCH = {"intake": {"mode": "watch"}}
HELM_LABELS = {"app.kubernetes.io/part-of", "app.kubernetes.io/instance", "app.kubernetes.io/component"}


def pods(objects) -> dict[str, dict[str, Any]]:
    """component -> its pod spec, for every pod the chart runs (hooks and the helm test too)."""
    found = {}
    for obj in objects:
        if obj["kind"] in ("Deployment", "StatefulSet", "Job", "Pod") or (
            obj["kind"] == "Service" and obj["apiVersion"] == "serving.knative.dev/v1"
        ):
            template = obj if obj["kind"] == "Pod" else obj["spec"]["template"]
            found[template["metadata"]["labels"]["app.kubernetes.io/component"]] = obj
    return found


# --- PodDisruptionBudgets -----------------------------------------------------------------------


def budgets(values) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"] for o in render(values) if o["kind"] == "PodDisruptionBudget"}


def test_a_budget_for_each_component_running_more_than_one_pod():
    assert budgets({}) == {}  # one of each: a budget would only block drains
    assert budgets({**WATCH, "sink": {"replicas": 2}, "worker": {"replicas": 3}}) == {
        "jobttl-worker": {
            "maxUnavailable": 1,
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/part-of": "jobttl",
                    "app.kubernetes.io/instance": "jobttl",
                    "app.kubernetes.io/component": "worker",
                }
            },
        },
        "jobttl-sink": {
            "maxUnavailable": 1,
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/part-of": "jobttl",
                    "app.kubernetes.io/instance": "jobttl",
                    "app.kubernetes.io/component": "sink",
                }
            },
        },
    }
    # Knative manages the sink's pods in broker and direct modes; a budget can be switched off.
    assert list(budgets({"sink": {"replicas": 2}, "worker": {"replicas": 2}})) == ["jobttl-worker"]
    assert budgets({"worker": {"replicas": 2, "podDisruptionBudget": {"enabled": False}}}) == {}
    assert budgets(OPERATORS)["jobttl-worker"]["maxUnavailable"] == 2


def test_each_budget_selects_exactly_its_components_pods():
    objects = render(OPERATORS)
    for budget in (o for o in objects if o["kind"] == "PodDisruptionBudget"):
        selected = [
            c
            for c, w in pods(objects).items()
            if w["kind"] == "Deployment"
            and all(
                w["spec"]["template"]["metadata"]["labels"].get(k) == v
                for k, v in budget["spec"]["selector"]["matchLabels"].items()
            )
        ]
        assert selected == [budget["metadata"]["name"].removeprefix("jobttl-")]


# --- labels and annotations ---------------------------------------------------------------------


def selectors(node: Any) -> list[dict[str, str]]:
    if isinstance(node, list):
        return [s for item in node for s in selectors(item)]
    if not isinstance(node, dict):
        return []
    own = [
        v
        for k, v in node.items()
        if k in ("matchLabels", "selector") and isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
    ]
    return own + [s for v in node.values() for s in selectors(v)]


def test_common_labels_are_on_every_object_and_in_no_selector():
    objects = render(OPERATORS)
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert (labels["team"], labels["cost-center"]) == ("ml-platform", "4711"), obj["metadata"]["name"]
    assert not [s for o in objects for s in selectors(o["spec"] if "spec" in o else {}) if "team" in s]


@pytest.mark.parametrize("key", ["app.kubernetes.io/component", "app.kubernetes.io/instance", "helm.sh/chart"])
def test_common_labels_cannot_replace_the_charts_own(key):
    """They would move objects out of their selectors and the release's bookkeeping."""
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError, match=f"invalid propertyName '{key}'"):
        chart().render({"commonLabels": {key: "x"}}, name="jobttl", namespace="jobttl")


def test_pod_labels_and_annotations_are_the_top_levels_and_the_components_own():
    objects = render(OPERATORS)
    workloads = pods(objects)
    sink = workloads["sink"]["spec"]["template"]["metadata"]
    assert sink["labels"]["example.com/tier"] == "platform"
    assert sink["annotations"]["example.com/scrape"] == "true"
    assert sink["annotations"]["example.com/component"] == "sink"
    assert "checksum/policy" in sink["annotations"]  # the chart's own stay
    watcher = workloads["watcher"]["spec"]["template"]["metadata"]
    assert (watcher["labels"]["example.com/component"], watcher["labels"]["example.com/tier"]) == (
        "watcher",
        "platform",
    )
    assert "example.com/component" not in workloads["worker"]["spec"]["template"]["metadata"].get("annotations", {})
    # A pod label can never move a pod out of its own selector.
    clash = render({**WATCH, "podLabels": {"app.kubernetes.io/component": "x"}})
    assert pods(clash)["worker"]["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"


# --- scheduling, resources, images, pull secrets ----------------------------------------------------


def test_each_pod_is_scheduled_by_its_own_values_else_the_top_levels():
    workloads = pods(render(OPERATORS))
    assert set(workloads) == {"sink", "worker", "watcher", "redis", "redis-init", "test"}
    for component, workload in workloads.items():
        spec = pod_spec(workload)
        own = {"worker": OPERATORS["worker"], "redis": OPERATORS["redis"]["bundled"]}.get(component, {})
        assert spec["priorityClassName"] == own.get("priorityClassName", "platform-critical"), component
        assert spec["nodeSelector"] == own.get("nodeSelector", {"kubernetes.io/os": "linux"}), component
        assert spec["tolerations"] == own.get("tolerations", OPERATORS["tolerations"]), component
        assert spec.get("affinity") == own.get("affinity"), component
        [spread] = spec["topologySpreadConstraints"]
        # No labelSelector given: the component's own pods are spread.
        assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
        assert spread["topologyKey"] == "topology.kubernetes.io/zone"


def test_each_component_has_its_own_resources():
    workloads = pods(render(OPERATORS))
    expected = {
        "sink": OPERATORS["sink"]["resources"],
        "redis": OPERATORS["redis"]["bundled"]["resources"],
        "test": {**chart().values["tests"]["resources"], **OPERATORS["tests"]["resources"]},
        "worker": chart().values["worker"]["resources"],
        "watcher": chart().values["watcher"]["resources"],
        "redis-init": chart().values["redis"]["bundled"]["passwordJobResources"],
    }
    for component, workload in workloads.items():
        assert pod_spec(workload)["containers"][0]["resources"] == expected[component], component
    dead_letters = pods(render(ci_values(CHART / "ci" / "broker-bundled-values.yaml")))["dead-letters"]
    assert pod_spec(dead_letters)["containers"][0]["resources"] == {
        "requests": {"cpu": "5m", "memory": "16Mi"},
        "limits": {"memory": "32Mi"},
    }


@pytest.mark.parametrize("mode", ["broker", "watch"])
def test_global_image_registry_is_every_images_registry(mode):
    images = [
        c["image"]
        for w in pods(render({**OPERATORS, "intake": {"mode": mode}})).values()
        for c in pod_spec(w)["containers"]
    ]
    assert len(images) == 6
    assert all(i.startswith("registry.example.com/mirror/") for i in images), images
    assert "registry.example.com/mirror/library/redis:7.4-alpine@sha256:" in " ".join(images)


def test_every_pod_and_account_gets_the_pull_secrets_global_first():
    objects = render(OPERATORS)
    expected = [{"name": "mirror-pull"}, {"name": "registry-example"}]
    for component, workload in pods(objects).items():
        assert pod_spec(workload)["imagePullSecrets"] == expected, component
    for account in (o for o in objects if o["kind"] == "ServiceAccount"):
        assert account["imagePullSecrets"] == expected, account["metadata"]["name"]


# --- environment ----------------------------------------------------------------------------------


def test_extra_env_and_env_from_reach_the_container_after_the_charts_own():
    worker = pod_spec(pods(render(OPERATORS))["worker"])["containers"][0]
    names = [e["name"] for e in worker["env"]]
    assert names[-3:] == ["AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
    assert {
        "name": "AWS_ACCESS_KEY_ID",
        "valueFrom": {"secretKeyRef": {"name": "jobttl-s3", "key": "access-key-id"}},
    } in worker["env"]
    assert worker["envFrom"] == [{"configMapRef": {"name": "jobttl-s3-endpoint"}}]
    # The sink and the watcher get the top level's only (none here).
    for component in ("sink", "watcher"):
        container = pod_spec(pods(render(OPERATORS))[component])["containers"][0]
        assert "envFrom" not in container and "AWS_REGION" not in [e["name"] for e in container["env"]]
    every = render(
        {
            **WATCH,
            "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
            "envFrom": [{"secretRef": {"name": "proxy"}}],
        }
    )
    for component in ("sink", "worker", "watcher", "test"):
        container = pod_spec(pods(every)[component])["containers"][0]
        assert {"name": "HTTPS_PROXY", "value": "http://proxy:3128"} in container["env"], component
        assert container["envFrom"] == [{"secretRef": {"name": "proxy"}}], component


@pytest.mark.parametrize(
    "values",
    [
        {"extraEnv": [{"name": "JOBTTL_FIRST_RUN_REVIEW", "value": "off"}]},
        {"worker": {"extraEnv": [{"name": "JOBTTL_DELETE_NAMESPACES", "value": ""}]}},
        {"sink": {"extraEnv": [{"name": "JOBTTL_REDIS_URL", "value": "redis://elsewhere:6379/0"}]}},
        {"watcher": {"extraEnv": [{"name": "JOBTTL_POLICY", "value": "/tmp/other.yaml"}]}},
    ],
    ids=["top", "worker", "sink", "watcher"],
)
def test_extra_env_cannot_override_what_the_chart_sets_itself(values):
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError, match="values don't meet the specifications"):
        chart().render(values, name="jobttl", namespace="jobttl")


# --- the watcher, the dead letters, the helm test -----------------------------------------------


def test_the_watcher_is_probed_on_its_port():
    for port, args in ((8081, []), (9091, ["--port", "9091"])):
        [container] = pod_spec(pods(render({**WATCH, "watcher": {"port": port}}))["watcher"])["containers"]
        assert container["args"] == ["watch", "--sink", "http://jobttl-sink.jobttl.svc", *args]
        assert container["ports"] == [{"name": "health", "containerPort": port}]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}


def test_the_dead_letters_are_pinned_by_digest_and_run_as_jobttls_pods_do():
    dead_letters = pods(render())["dead-letters"]
    spec = pod_spec(dead_letters)
    [container] = spec["containers"]
    assert "@sha256:" in container["image"] and container["image"].startswith("gcr.io/knative-releases/")
    assert spec["automountServiceAccountToken"] is False
    context = container["securityContext"]
    assert context["runAsNonRoot"] and context["readOnlyRootFilesystem"] and not context["allowPrivilegeEscalation"]
    assert context["capabilities"] == {"drop": ["ALL"]} and context["seccompProfile"] == {"type": "RuntimeDefault"}


def test_the_helm_test_pod_reads_redis_as_the_worker_does_and_nothing_else():
    objects = render()
    test = find(objects, "Pod", "jobttl-test-status")
    assert test["metadata"]["annotations"]["helm.sh/hook"] == "test"
    [container] = test["spec"]["containers"]
    assert container["args"] == ["status"]
    assert test["spec"]["automountServiceAccountToken"] is False
    worker_env = pod_spec(find(objects, "Deployment", "jobttl-worker"))["containers"][0]["env"]
    redis_env = [e for e in worker_env if e["name"] in ("REDIS_PASSWORD", "JOBTTL_REDIS_URL")]
    assert [e for e in container["env"] if e["name"] in ("REDIS_PASSWORD", "JOBTTL_REDIS_URL")] == redis_env
    # Redis's NetworkPolicy admits it, as it admits the sink and the worker.
    [rule] = find(objects, "NetworkPolicy", "jobttl-redis")["spec"]["ingress"]
    [expression] = [
        e for e in rule["from"][0]["podSelector"]["matchExpressions"] if e["key"] == "app.kubernetes.io/component"
    ]
    assert expression["values"] == ["sink", "worker", "test"]
    assert not [o for o in render({"tests": {"enabled": False}}) if o["kind"] == "Pod"]


# --- delete rights in listed namespaces only ------------------------------------------------------


def scoped(objects, namespace: str | None) -> list[dict[str, Any]]:
    """The RBAC objects of one scope: cluster-wide (None), or one namespace's Roles and bindings."""
    if namespace is None:
        return [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    return [o for o in objects if o["kind"] in ("Role", "RoleBinding") and o["metadata"].get("namespace") == namespace]


def test_with_rbac_namespaces_the_worker_deletes_only_there_and_keeps_what_is_elsewhere():
    values = {
        **WATCH,
        "rbac": {"namespaces": ["team-a", "team-b"]},
        "policy": {"ttl": "7d", "archive": {"store": "/archive"}, "podTTL": "1d"},
    }
    objects = render(values)
    kinds = chart().values["kinds"]
    everything = declared("worker", kinds, archive=True, pod_cleanup=True)
    install_record = {g for g in everything if g[1] == "configmaps"}  # its own namespace's Role, as ever
    reads = {
        g for g in everything - install_record if g[2] in ("get", "list") and g[1] not in ("pods", "pods/log", "events")
    }
    assert grants(scoped(objects, None), "jobttl-worker") == reads
    for namespace in ("team-a", "team-b"):
        assert grants(scoped(objects, namespace), "jobttl-worker") == everything - reads - install_record, namespace
    assert grants(scoped(objects, "jobttl"), "jobttl-worker") == install_record
    assert grants(objects, "jobttl-worker") == everything  # together: exactly what the code declares
    assert not [g for g in grants(scoped(objects, None), "jobttl-worker") if g[2] in ("delete", "create")]
    for component in ("sink", "worker"):
        env = {e["name"]: e.get("value") for e in pod_spec(pods(objects)[component])["containers"][0]["env"]}
        assert env["JOBTTL_DELETE_NAMESPACES"] == "team-a,team-b", component
    assert "JOBTTL_DELETE_NAMESPACES" not in str(render(WATCH))
    assert permissions("worker", archive=True, pod_cleanup=True)  # the table the RBAC is compared with


# --- egress -------------------------------------------------------------------------------------------


def egress(objects, component: str) -> list[dict[str, Any]]:
    policy = find(objects, "NetworkPolicy", f"jobttl-{component}")
    assert "Egress" in policy["spec"]["policyTypes"]
    return policy["spec"]["egress"]


def destinations(rules) -> set[str]:
    found = set()
    for rule in rules:
        for peer in rule["to"]:
            if "ipBlock" in peer:
                found.add(f"{peer['ipBlock']['cidr']}:{','.join(str(p['port']) for p in rule['ports'])}")
            elif "namespaceSelector" in peer:
                found.add("dns")
            else:
                found.add(peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"])
    return found


def test_egress_policies_let_each_pod_reach_only_what_it_talks_to():
    objects = render(OPERATORS)
    api, s3 = "10.0.0.1/32:443", "52.95.0.0/16:443"
    assert destinations(egress(objects, "sink")) == {"dns", "redis", s3}
    assert destinations(egress(objects, "worker")) == {"dns", "redis", api, s3}
    assert destinations(egress(objects, "watcher")) == {"dns", api, "sink"}
    assert destinations(egress(objects, "redis-init")) == {"dns", api}
    assert destinations(egress(objects, "test")) == {"dns", "redis"}
    assert egress(objects, "redis") == []
    assert egress(render({**OPERATORS, "intake": {"mode": "broker"}}), "dead-letters") == []
    assert not [o for o in render() if o["kind"] == "NetworkPolicy" and "Egress" in o["spec"]["policyTypes"]]


def test_egress_to_a_redis_outside_the_release_needs_its_address():
    import helm_python as helm

    sentinel = {"mode": "sentinel", "sentinel": {"hosts": ["s:26379"]}}
    with pytest.raises(
        helm.HelmRenderError,
        match="networkPolicy.egress.redis: with egress policies on and redis.mode sentinel, list where the Redis is",
    ):
        chart().render(
            {"redis": sentinel, "networkPolicy": {"egress": {"enabled": True}}}, name="jobttl", namespace="jobttl"
        )
    objects = render(
        {
            "redis": sentinel,
            "networkPolicy": {"egress": {"enabled": True, "redis": [{"cidr": "10.20.0.0/16", "ports": [6379, 26379]}]}},
        }
    )
    assert "10.20.0.0/16:6379,26379" in destinations(egress(objects, "worker"))


def test_the_ci_values_exercise_every_option_here():
    """So that test_chart.py lints, validates and installs each of them."""
    every = [ci_values(p) for p in sorted(Path(CHART / "ci").glob("*-values.yaml"))]
    text = yaml.safe_dump(every)
    for option in (
        "commonLabels",
        "podDisruptionBudget",
        "priorityClassName",
        "topologySpreadConstraints",
        "extraEnv",
        "envFrom",
        "imageRegistry",
        "namespaces",
        "egress",
        "deadLetters",
    ):
        assert option in text, option
