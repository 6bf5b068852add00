"""The Helm chart (charts/jobttl/), through Helm's own engine: helm-python-sdk binds Helm 4's Go
SDK, so lint, the values schema, rendering (`lookup` included) and install/upgrade are Helm's
code, not an imitation.

- lint, and render the defaults and every file in ci/ (chart-testing's convention), each object
  validated: built-in kinds strictly against Kubernetes' schemas, Knative kinds against the
  reference CRDs, prometheus-operator kinds against the hand-written CRD subsets of
  tests/deploy/monitoring.py, the alerts with promtool;
- the values schema refuses bad values with a message naming them;
- the RBAC equals what jobttl.core.domain.deploy.permissions.permissions() declares, for each intake mode and each
  feature the policy can enable;
- a real `helm install` of every rendering against the API emulator (Knative's kinds served from
  their CRDs), release records in Secrets as Helm keeps them;
- the bundled Redis password: never rendered (two renders are the same, for Argo CD and Flux),
  made in the cluster by the chart's pre-install hook Job (run here by tests/deploy/chart.py's
  HookJobs), kept by a real `helm upgrade`, and kept on an upgrade from 0.2, which rendered it;
- the chart is self-contained: a copy of it, packaged by Helm's SDK, renders as the chart does,
  refuses a policy typo, and installs.

The rendered configuration running for real is test_chart_run.py. knative/ is generated from
the chart (tools/knative.py): test_knative.py.
"""

from __future__ import annotations

import base64
import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the test extras) is not installed")


from jobttl.core.services.install import CONFIGMAP  # noqa: E402
from jobttl.core.domain.kinds.registry import ALL_KINDS, MPIJOB_V2BETA1  # noqa: E402
from jobttl.core.domain.deploy.permissions import CRDS, CRD_GROUP, JOBS, VERSION, permissions  # noqa: E402
from jobttl.core.domain.rules.policy import parse_policy  # noqa: E402
from tests.deploy.chart import (  # noqa: E402
    CHART,
    CI_VALUES,
    NAMESPACE,
    RELEASE,
    HookJobs,
    chart,
    ci_values,
    find,
    notes,
    render,
)
from tests.deploy.manifests import KNATIVE, KNATIVE_CRDS, REPO, object_id, pod_spec, validate  # noqa: E402
from tests.deploy.monitoring import SCHEMAS as MONITORING_SCHEMAS  # noqa: E402
from tests.deploy.monitoring import alerts as knative_alerts  # noqa: E402
from tests.deploy.monitoring import prometheus_binary  # noqa: E402
from tests.deploy.test_rbac import Violation, grants  # noqa: E402

DEFAULT_KINDS = tuple(k for k in ALL_KINDS if k is not MPIJOB_V2BETA1)


RENDERINGS = [pytest.param({}, id="defaults")] + [pytest.param(ci_values(p), id=p.name) for p in CI_VALUES]


# --- lint and schemas --------------------------------------------------------------------------


@pytest.mark.parametrize("values", RENDERINGS)
def test_the_chart_lints_without_warnings(values):
    report = helm.lint(str(CHART), values, strict=True, namespace=NAMESPACE)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_ci_values_cover_every_intake_mode_and_redis_mode():
    modes = {
        (v.get("intake", {}).get("mode", "broker"), v.get("redis", {}).get("mode", "bundled"))
        for v in map(ci_values, CI_VALUES)
    }
    assert {intake for intake, _ in modes} == {"broker", "direct", "watch"}
    assert {redis for _, redis in modes} == {"bundled", "sentinel", "external"}


def problems(obj: dict[str, Any]) -> list[str]:
    """What the real schema of its kind finds wrong with a rendered object."""
    if obj["apiVersion"].startswith("monitoring.coreos.com/"):
        schema = MONITORING_SCHEMAS.get(obj["kind"])
        if schema is None:
            return [f"no schema for {obj['kind']}"]
        return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(obj)]
    return validate(obj)


def _objects_of_every_rendering():
    return [
        pytest.param(values, obj, id=f"{rendering.id}:{obj['kind']}/{obj['metadata']['name']}")
        for rendering in RENDERINGS
        for values in rendering.values
        for obj in render(values)
    ]


@pytest.mark.parametrize("values, obj", _objects_of_every_rendering())
def test_every_rendered_object_is_valid_against_its_schema(values, obj):
    assert problems(obj) == []


def test_the_validators_catch_a_broken_rendered_object():
    objects = render({"intake": {"mode": "watch"}, "monitoring": {"enabled": True}})
    worker = find(objects, "Deployment", "jobttl-worker")
    pod_spec(worker)["containers"][0]["imagepullPolicy"] = "Always"
    monitor = find(objects, "PodMonitor", "jobttl-worker")
    monitor["spec"]["podMetricsEndpoints"][0]["interval"] = "30 seconds"
    assert problems(worker) and problems(monitor)


@pytest.mark.parametrize("values", RENDERINGS)
def test_the_rendered_policy_is_one_jobttl_accepts_with_the_configured_kinds(values):
    objects = render(values)
    text = find(
        objects,
        "ConfigMap",
        "jobttl-policy" if "fullnameOverride" not in values else f"{values['fullnameOverride']}-policy",
    )["data"]["policy.yaml"]
    policy = parse_policy(yaml.safe_load(text), "the chart's policy")
    kinds = values.get("kinds") or chart().values["kinds"]
    assert {(k.api_version, k.kind) for k in policy.kinds} == {(k["apiVersion"], k["kind"]) for k in kinds}


# What a Secret of the operator's holds, for the renderings that name one.
SECRET_VALUES = {"url": "rediss://:0123abcd@redis.example.internal:6380/0"}


@pytest.mark.parametrize("values", RENDERINGS)
def test_every_process_accepts_the_rendered_settings(values, tmp_path):
    """Each jobttl container's environment, as Kubernetes would resolve it, passes jobttl's own
    checks at start (jobttl.core.runtime.config), the policy file and the Redis CA included."""
    from jobttl.core.runtime.config import Settings
    from tests.deploy.manifests import ENV_REFERENCE
    from tests.services import tls_files

    objects = render(values)
    secrets = {
        o["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in o["data"].items()}
        for o in objects
        if o["kind"] == "Secret"
    }
    ca = tls_files(tmp_path / "tls")["ca"]
    workloads = [
        o
        for o in objects
        if o["kind"] == "Deployment"
        or (
            o["kind"] == "Service"
            and o["apiVersion"] == "serving.knative.dev/v1"
            and o["metadata"]["name"].endswith("-sink")
        )
    ]
    assert len(workloads) == (3 if values.get("intake", {}).get("mode") == "watch" else 2)
    for workload in workloads:
        [container] = pod_spec(workload)["containers"]
        env: dict[str, str] = {}
        for item in container.get("env", []):
            if "valueFrom" in item:
                ref = item["valueFrom"]["secretKeyRef"]
                env[item["name"]] = secrets.get(ref["name"], SECRET_VALUES).get(ref["key"], "0123abcd")
            else:
                env[item["name"]] = ENV_REFERENCE.sub(lambda m, env=env: env[m.group(1)], item["value"])
        policy = find(objects, "ConfigMap", pod_spec(workload)["volumes"][0]["configMap"]["name"])["data"][
            "policy.yaml"
        ]
        (tmp_path / "policy.yaml").write_text(policy)
        assert env["JOBTTL_POLICY"] == "/etc/jobttl/policy.yaml"
        env["JOBTTL_POLICY"] = str(tmp_path / "policy.yaml")
        if "JOBTTL_REDIS_CA_FILE" in env:
            assert env["JOBTTL_REDIS_CA_FILE"].startswith("/etc/jobttl-redis-ca/")
            env["JOBTTL_REDIS_CA_FILE"] = ca
        settings = Settings.from_env(env)  # raises ConfigError naming the variable
        assert settings.redis_url.startswith(("redis", "rediss")) or container["args"][0] == "watch"


def test_the_default_kinds_are_jobttls_kinds_with_one_mpijob_version():
    assert [(k["apiVersion"], k["kind"], k["plural"]) for k in chart().values["kinds"]] == [
        (k.api_version, k.kind, k.plural) for k in DEFAULT_KINDS
    ]


def test_the_default_policy_has_the_first_run_review_on():
    worker = find(render(), "Deployment", "jobttl-worker")
    env = {e["name"]: e.get("value") for e in pod_spec(worker)["containers"][0]["env"]}
    assert env["JOBTTL_FIRST_RUN_REVIEW"] == "on"
    assert "jobttl resync --confirm HELD_ID" in notes() and "jobttl held" in notes()
    off = find(render({"firstRunReview": False}), "Deployment", "jobttl-worker")
    assert {e["name"]: e.get("value") for e in pod_spec(off)["containers"][0]["env"]}[
        "JOBTTL_FIRST_RUN_REVIEW"
    ] == "off"


def test_the_alerts_are_the_monitoring_kits_and_pass_promtool(tmp_path):
    rule = find(render({"monitoring": {"enabled": True}}), "PrometheusRule", "jobttl")
    assert [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r] == knative_alerts()
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    result = subprocess.run(
        [prometheus_binary("promtool"), "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    dashboard = find(render({"monitoring": {"enabled": True}}), "ConfigMap", "jobttl-dashboard")
    assert json.loads(dashboard["data"]["jobttl.json"]) == json.loads(
        (KNATIVE / "monitoring" / "dashboard.json").read_text()
    )


# --- bad values --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, message",
    [
        ({"intake": {"mode": "knative"}}, "/intake/mode"),
        ({"redis": {"mode": "external"}}, "/redis/external/existingSecret"),
        ({"redis": {"mode": "sentinel"}}, "/redis/sentinel/hosts"),
        ({"worker": {"replicas": "2"}}, "/worker/replicas"),
        ({"sink": {"replicas": 0}}, "/sink/replicas"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"image": {"digest": "latest"}}, "/image/digest"),
        ({"kinds": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob"}]}, "plural"),
        ({"policy": {"kinds": ["TFJob"]}}, "/policy/kinds"),
        # The policy's own schema (core/domain/rules/policy.schema.json): a typo stops the install, not the pods.
        ({"policy": {"tll": "7d"}}, "additional properties 'tll' not allowed"),
        ({"policy": {"ttl": "7 days"}}, "/policy/ttl"),
        ({"policy": {"dryRun": "yes"}}, "/policy/dryRun"),
        ({"policy": {"rules": [{"name": "sandbox", "ttl": "1h"}]}}, "/policy/rules/0"),
        (
            {"policy": {"rules": [{"name": "gpu", "selector": {"matchLabels": {"gpu": True}}}]}},
            "/policy/rules/0/selector",
        ),
        ({"policy": {"archive": {"store": "/a", "logKiB": 0}}}, "/policy/archive"),
        ({"policy": {"namespaces": {"exclude": "kube-system"}}}, "/policy/namespaces/exclude"),
        ({"policy": {"keepLast": {"succeded": 3}}}, "/policy/keepLast"),
        ({"redis": {"tls": {"caSecret": "a", "caConfigMap": "b"}}}, "/redis/tls"),
        ({"monitoring": {"enabled": "yes"}}, "/monitoring/enabled"),
        ({"replicas": 2}, "'replicas'"),
        # What the chart sets from its own values cannot be overridden behind them (firstRunReview: true).
        ({"env": {"JOBTTL_FIRST_RUN_REVIEW": "off"}}, "invalid propertyName 'JOBTTL_FIRST_RUN_REVIEW'"),
        ({"env": {"JOBTTL_REDIS_URL": "redis://elsewhere:6379/0"}}, "invalid propertyName 'JOBTTL_REDIS_URL'"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else None,
)
def test_a_bad_value_is_refused_with_a_message_naming_it(values, message):
    with pytest.raises(helm.HelmValuesError, match="values don't meet the specifications") as refused:
        chart().render(values, name=RELEASE, namespace=NAMESPACE)
    assert message in str(refused.value)


def test_a_ca_for_a_redis_without_tls_is_refused():
    """jobttl refuses JOBTTL_REDIS_CA_FILE with a redis:// URL at start: the chart says so at install."""
    for redis in (
        {"tls": {"caSecret": "ca"}},
        {"mode": "sentinel", "sentinel": {"hosts": ["s:26379"]}, "tls": {"caConfigMap": "ca"}},
    ):
        with pytest.raises(helm.HelmValuesError, match="/redis/tls/ca"):
            chart().render({"redis": redis}, name=RELEASE, namespace=NAMESPACE)


def test_two_versions_of_one_kind_are_refused_naming_both():
    kinds = [
        {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "plural": "mpijobs"},
        {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "plural": "mpijobs"},
    ]
    with pytest.raises(helm.HelmRenderError, match="MPIJob is listed twice .kubeflow.org/v1 and kubeflow.org/v2beta1"):
        chart().render({"kinds": kinds}, name=RELEASE, namespace=NAMESPACE)


# --- RBAC --------------------------------------------------------------------------------------


def on_kinds(kinds, verbs) -> set[tuple[str, str, str]]:
    return {(k["apiVersion"].rpartition("/")[0], k["plural"], verb) for k in kinds for verb in verbs}


def declared(component: str, kinds, **features) -> set[tuple[str, str, str]]:
    granted = set()
    for resource, verbs in permissions(component, **features).items():
        if resource == JOBS:
            granted |= on_kinds(kinds, verbs)
        elif resource == CRDS:  # the kinds' own CRDs, by name (tests/deploy/test_rbac.py: `named`)
            granted |= {(CRD_GROUP, f"{CRDS}[{name}]", verb) for name in kind_crds(kinds) for verb in verbs}
        elif resource != VERSION:  # a non-resource URL every authenticated client may read
            granted |= {("", resource, verb) for verb in verbs}
    return granted


def kind_crds(kinds) -> list[str]:
    """The CRDs of the chart's `kinds` value: plural.group where the group has a dot (not batch/v1)."""
    names = [
        f"{k['plural']}.{k['apiVersion'].rpartition('/')[0]}"
        for k in kinds
        if "." in k["apiVersion"].rpartition("/")[0]
    ]
    return list(dict.fromkeys(names))


def accounts(objects, mode: str) -> dict[str, str]:
    sink = find(objects, "Service" if mode != "watch" else "Deployment", "jobttl-sink")
    reader = (
        find(objects, "ApiServerSource", "jobttl-jobs")["spec"]["serviceAccountName"]
        if mode != "watch"
        else pod_spec(find(objects, "Deployment", "jobttl-watcher"))["serviceAccountName"]
    )
    return {
        "sink": pod_spec(sink)["serviceAccountName"],
        "worker": pod_spec(find(objects, "Deployment", "jobttl-worker"))["serviceAccountName"],
        "watch": reader,
    }


FEATURES = {
    "base": {},
    "archive": {"archive": {"store": "s3://evidence/jobttl"}},
    "archive-in-a-rule": {
        "archive": {"store": "/archive", "enabled": False},
        "rules": [{"name": "keep", "namespaces": ["ml"], "archive": True}],
    },
    "archive-off": {"archive": {"store": "/archive", "enabled": False}},
    "pod-stage": {"rules": [{"name": "pods", "namespaces": ["ml"], "podTTLAfterFailure": "3d"}]},
    "both": {"archive": {"store": "/archive"}, "podTTL": "1d"},
    "pod-stage-at-once": {"podTTL": "0s"},  # a pods stage all the same (jobttl.core.domain.decisions.stages)
}
MPI_OPERATOR_KINDS = [
    {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "plural": "mpijobs"},
    {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "plural": "workflows"},
]


BATCH_ONLY = [{"apiVersion": "batch/v1", "kind": "Job", "plural": "jobs"}]  # no CRD: no CRD rule (none would be all)


@pytest.mark.parametrize(
    "kinds", [None, MPI_OPERATOR_KINDS, BATCH_ONLY], ids=["default-kinds", "two-kinds", "batch-only"]
)
@pytest.mark.parametrize("feature", sorted(FEATURES))
@pytest.mark.parametrize("mode", ["broker", "direct", "watch"])
def test_each_account_gets_exactly_what_permissions_declares_for_the_kinds_and_policy(mode, feature, kinds):
    values = {"intake": {"mode": mode}, "policy": {"ttl": "7d", **FEATURES[feature]}}
    if kinds:
        values["kinds"] = kinds
    objects = render(values)
    policy = parse_policy(yaml.safe_load(find(objects, "ConfigMap", "jobttl-policy")["data"]["policy.yaml"]))
    features = {"archive": policy.archiving, "pod_cleanup": policy.pod_stages}
    kinds = kinds or chart().values["kinds"]
    names = accounts(objects, mode)
    assert len(set(names.values())) == 3
    for component, account in names.items():
        assert grants(objects, account) == declared(component, kinds, **features), component
    if feature in ("archive", "archive-in-a-rule", "both"):
        assert policy.archiving and ("", "pods/log", "get") in grants(objects, names["worker"])
    if feature in ("pod-stage", "both"):
        assert policy.pod_stages and ("", "pods", "delete") in grants(objects, names["worker"])
    if feature in ("base", "archive-off"):
        assert not any(resource.startswith("pods") for _, resource, _ in grants(objects, names["worker"]))


def test_the_install_record_role_is_the_only_one_naming_a_resource():
    role = find(render(), "Role", "jobttl-worker-install")
    assert role["rules"][0]["resourceNames"] == [CONFIGMAP]


def test_no_rbac_and_no_accounts_when_switched_off():
    objects = render({"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "mine"}})
    assert not [
        o
        for o in objects
        if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    ]
    assert pod_spec(find(objects, "Deployment", "jobttl-worker"))["serviceAccountName"] == "mine-worker"


def test_a_wider_rendered_role_would_be_caught():
    objects = render()
    find(objects, "ClusterRole", "jobttl-worker")["rules"][0]["verbs"].append("watch")
    assert grants(objects, "jobttl-worker") != declared("worker", chart().values["kinds"])
    find(objects, "ClusterRole", "jobttl-worker")["rules"][0]["verbs"] = ["*"]
    with pytest.raises(Violation, match="wildcard"):
        grants(objects, "jobttl-worker")


# --- the bundled Redis password ---------------------------------------------------------------


def test_two_renders_are_the_same_and_hold_no_password():
    """`helm template` (Argo CD, Flux, --dry-run) renders the same objects every time, install or
    upgrade: the password is made in the cluster by the chart's Job, never rendered."""
    first = chart().render({}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    assert chart().render({}, name=RELEASE, namespace=NAMESPACE, is_install=True) == first
    assert chart().render({}, name=RELEASE, namespace=NAMESPACE, is_upgrade=True, is_install=False) == first
    objects = render()
    assert [o for o in objects if o["kind"] == "Secret"] == []
    assert "change-me" not in json.dumps(objects)


def password_job(objects) -> dict[str, Any]:
    job = find(objects, "Job", "jobttl-redis-init")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    return job


def test_the_password_job_makes_the_secret_the_pods_and_redis_read_and_may_touch_nothing_else():
    objects = render()
    [container] = pod_spec(password_job(objects))["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (env["SECRET_NAME"], env["SECRET_KEY"], env["SECRET_NAMESPACE"]) == ("jobttl-redis", "password", NAMESPACE)
    for workload in (find(objects, "Deployment", "jobttl-worker"), find(objects, "StatefulSet", "jobttl-redis")):
        refs = [e["valueFrom"]["secretKeyRef"] for e in pod_spec(workload)["containers"][0]["env"] if "valueFrom" in e]
        assert {"name": "jobttl-redis", "key": "password"} in refs
    role = find(objects, "Role", "jobttl-redis-init")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["jobttl-redis"], "verbs": ["get", "patch"]},
    ]
    # Made before the Job, removed after it: hooks all three, by weight.
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        hooked = find(objects, kind, "jobttl-redis-init")["metadata"]["annotations"]
        assert int(hooked["helm.sh/hook-weight"]) < int(
            password_job(objects)["metadata"]["annotations"]["helm.sh/hook-weight"]
        )


def test_an_existing_secret_is_used_and_no_password_job_rendered():
    objects = render({"redis": {"auth": {"existingSecret": "mine", "existingSecretKey": "pw"}}})
    assert not [o for o in objects if o["kind"] in ("Secret", "Job") or o["metadata"]["name"].endswith("redis-init")]
    env = pod_spec(find(objects, "Deployment", "jobttl-worker"))["containers"][0]["env"]
    assert env[0] == {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "mine", "key": "pw"}}}


def test_a_generated_password_is_kept_under_the_key_the_pods_read():
    """`existingSecretKey` without `existingSecret`: the Job writes the key the pods reference."""
    objects = render({"redis": {"auth": {"existingSecretKey": "pw"}}})
    [container] = pod_spec(password_job(objects))["containers"]
    assert {e["name"]: e["value"] for e in container["env"]}["SECRET_KEY"] == "pw"
    env = pod_spec(find(objects, "Deployment", "jobttl-worker"))["containers"][0]["env"]
    assert env[0]["valueFrom"]["secretKeyRef"] == {"name": "jobttl-redis", "key": "pw"}


# --- a real helm install and upgrade, against the API emulator ---------------------------------


@functools.cache
def _helm_resources():
    """Every kind the chart creates in any mode: Knative's from the reference CRDs, the others
    registered without a schema (the schemas are checked above, offline)."""
    from jobttl_emulator import CONFIG_MAP, JOB, Resource
    from jobttl_emulator.crds import load_crds

    def kind(group, kind, plural, namespaced=True):
        return Resource(group, "v1", kind, plural, namespaced=namespaced, status_subresource=False, builtin=True)

    return (
        CONFIG_MAP,
        JOB,
        kind("", "Secret", "secrets"),
        kind("", "ServiceAccount", "serviceaccounts"),
        kind("", "Service", "services"),
        kind("apps", "Deployment", "deployments"),
        kind("apps", "StatefulSet", "statefulsets"),
        kind("rbac.authorization.k8s.io", "ClusterRole", "clusterroles", False),
        kind("rbac.authorization.k8s.io", "ClusterRoleBinding", "clusterrolebindings", False),
        kind("rbac.authorization.k8s.io", "Role", "roles"),
        kind("rbac.authorization.k8s.io", "RoleBinding", "rolebindings"),
        kind("networking.k8s.io", "NetworkPolicy", "networkpolicies"),
        kind("policy", "PodDisruptionBudget", "poddisruptionbudgets"),
        Resource("monitoring.coreos.com", "v1", "PodMonitor", "podmonitors", status_subresource=False),
        Resource("monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrules", status_subresource=False),
        *load_crds(sorted(KNATIVE_CRDS.glob("*.yaml"))),
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from kubernetes import client, config as kube_config

    from tests.services import start_emulator

    emulator = start_emulator(tmp_path_factory.mktemp("helm"), _helm_resources())
    api_client = kube_config.new_client_from_config(str(emulator.kubeconfig))
    with HookJobs(emulator):  # Helm waits for the password Job, a hook: it runs, here
        yield emulator, client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    emulator.stop()


def helm_config(emulator, namespace: str):
    """Helm's default release storage: a Secret per revision (sh.helm.release.v1.NAME.vN)."""
    return helm.Config(kubeconfig_path=str(emulator.kubeconfig), namespace=namespace)


@pytest.mark.parametrize(
    "index, values", [(i, p.values[0]) for i, p in enumerate(RENDERINGS)], ids=[p.id for p in RENDERINGS]
)
def test_helm_installs_every_rendering(cluster, index, values):
    emulator, core, _ = cluster
    namespace, name = f"install-{index}", f"jobttl{index}"
    with helm_config(emulator, namespace) as config:
        release = config.install(str(CHART), name, values, namespace=namespace, timeout=60)
        assert release["status"] == "deployed"
        created = [d for d in yaml.safe_load_all(release["manifest"]) if d]
        assert created and {o["kind"] for o in created} >= {"Deployment", "ConfigMap"}
        # Every object is there: Helm found each kind through discovery, namespaced or not.
        for obj in created:
            assert emulator_get(emulator, obj) == 200, object_id(obj)


def emulator_get(emulator, obj) -> int:
    import requests

    group, _, version = obj["apiVersion"].rpartition("/")
    plural = next(r.plural for r in _helm_resources() if (r.group, r.version, r.kind) == (group, version, obj["kind"]))
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    namespace = obj["metadata"].get("namespace")
    path = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
    return requests.get(f"{emulator.url}{path}/{obj['metadata']['name']}", timeout=10).status_code


def secret_password(core, namespace: str = NAMESPACE, name: str = "jobttl-redis", key: str = "password") -> str:
    return base64.b64decode(core.read_namespaced_secret(name, namespace).data[key]).decode()


def test_a_helm_upgrade_keeps_the_password_the_install_made(cluster):
    emulator, core, apps = cluster
    with helm_config(emulator, NAMESPACE) as config:
        values = {"intake": {"mode": "watch"}}
        config.install(str(CHART), RELEASE, values, namespace=NAMESPACE, timeout=60)
        installed = secret_password(core)
        config.upgrade(str(CHART), RELEASE, {**values, "worker": {"replicas": 2}}, namespace=NAMESPACE, timeout=60)
        assert apps.read_namespaced_deployment("jobttl-worker", NAMESPACE).spec.replicas == 2  # the upgrade applied
        assert len(installed) == 64 and secret_password(core) == installed
        assert [r["status"] for r in config.history(RELEASE)] == ["superseded", "deployed"]
        assert {s.metadata.name for s in core.list_namespaced_secret(NAMESPACE, label_selector="owner=helm").items} == {
            "sh.helm.release.v1.jobttl.v1",
            "sh.helm.release.v1.jobttl.v2",
        }
        # Nowhere in Helm's own record of the release, hooks included.
        assert installed not in json.dumps(config.get_all(RELEASE))


def chart_of_0_2(directory: Path) -> Path:
    """charts/jobttl/ as jobttl 0.2 shipped it (from Git: the parent of the commit that set 0.3.0),
    with knative/monitoring/, which its files/ linked into."""
    found = subprocess.run(
        ["git", "log", "-1", "--format=%H", "-S", "version: 0.2.0", "--", "charts/jobttl/Chart.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if found.returncode != 0 or not found.stdout.strip():
        pytest.skip("no Git history here to take jobttl 0.2's chart from")
    archive = subprocess.run(
        ["git", "archive", f"{found.stdout.strip()}^", "charts/jobttl", "knative/monitoring"],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive.stdout, check=True)
    assert yaml.safe_load((directory / "charts/jobttl/Chart.yaml").read_text())["version"] == "0.2.0"
    return directory / "charts" / "jobttl"


def test_an_upgrade_from_0_2_keeps_the_password_0_2_rendered(cluster, tmp_path):
    """0.2 rendered its Secret as one of the release's objects; 0.3 no longer does, and Helm deletes
    what a release stops rendering. The password Job marks it helm.sh/resource-policy: keep first."""
    emulator, core, _ = cluster
    namespace, name, secret = "from-0-2", "old", "old-jobttl-redis"
    with helm_config(emulator, namespace) as config:
        config.install(str(chart_of_0_2(tmp_path)), name, {}, namespace=namespace, timeout=60)
        before = secret_password(core, namespace, secret)
        assert len(before) == 40  # 0.2's randAlphaNum 40
        config.upgrade(str(CHART), name, {}, namespace=namespace, timeout=60)
        assert secret_password(core, namespace, secret) == before
        assert core.read_namespaced_secret(secret, namespace).metadata.annotations["helm.sh/resource-policy"] == "keep"
        # No longer one of the release's objects, and marked keep: `helm uninstall` leaves it (README,
        # Uninstalling), as it leaves the install record and Redis's claim.
        assert "kind: Secret" not in config.status(name)["manifest"]


def run_password_job(cluster, namespace: str, **values) -> tuple[int, str]:
    """The rendered Job's script, run against the emulator as HookJobs runs it."""
    emulator, _, _ = cluster
    job = password_job(render(values, namespace=namespace))
    done = HookJobs(emulator).run(job)
    return done.returncode, done.stdout + done.stderr


def test_the_password_job_creates_the_secret_once_then_leaves_it_alone(cluster):
    _, core, _ = cluster
    namespace = "password-job"
    code, output = run_password_job(cluster, namespace)
    assert code == 0 and "created Secret password-job/jobttl-redis" in output
    made = secret_password(core, namespace)
    assert len(made) == 64 and all(c in "0123456789abcdef" for c in made)  # URL-safe: it goes into the URL
    assert core.read_namespaced_secret("jobttl-redis", namespace).metadata.annotations == {
        "helm.sh/resource-policy": "keep"
    }
    code, output = run_password_job(cluster, namespace)
    assert code == 0 and "its password stays" in output and secret_password(core, namespace) == made


def test_the_password_job_refuses_a_secret_without_the_key_the_pods_read(cluster):
    namespace = "password-job-key"
    assert run_password_job(cluster, namespace)[0] == 0
    code, output = run_password_job(cluster, namespace, redis={"auth": {"existingSecretKey": "redis-password"}})
    assert code != 0 and "has no key 'redis-password'" in output and "redis.auth.existingSecretKey" in output


def test_the_chart_holds_no_links():
    """A link resolves to nothing once the chart is copied or packaged elsewhere: files/ are copies."""
    assert [p for p in CHART.rglob("*") if p.is_symlink()] == []


@pytest.fixture(scope="module")
def packaged_copy(tmp_path_factory) -> Path:
    """The chart copied out of the checkout as it is (a link would stay a link), then packaged
    from that copy by Helm's SDK, as `make chart` packages it."""
    from tools.chart import package

    copy = tmp_path_factory.mktemp("copy") / "jobttl"
    shutil.copytree(CHART, copy, symlinks=True)
    archive = package(tmp_path_factory.mktemp("dist"), copy)
    assert archive.name == f"jobttl-{chart().version}.tgz"
    return archive


def test_the_packaged_copy_renders_as_the_chart_does(packaged_copy):
    packaged = helm.Chart.load_archive(packaged_copy.read_bytes())
    for values in ({}, {"monitoring": {"enabled": True}, "intake": {"mode": "watch"}}):
        manifests = packaged.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        objects = [
            d
            for path, text in sorted(manifests.items())
            if not path.endswith(".txt")
            for d in yaml.safe_load_all(text)
            if d
        ]
        assert objects == render(values)
    rule = next(o for o in objects if o["kind"] == "PrometheusRule")
    assert [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r] == knative_alerts()


def test_the_packaged_copy_refuses_a_policy_typo(packaged_copy):
    packaged = helm.Chart.load_archive(packaged_copy.read_bytes())
    with pytest.raises(helm.HelmValuesError, match="values don't meet the specifications") as refused:
        packaged.render({"policy": {"tll": "7d"}}, name=RELEASE, namespace=NAMESPACE)
    assert "/policy" in str(refused.value) and "tll" in str(refused.value)


def test_the_packaged_copy_installs(cluster, packaged_copy):
    emulator, core, apps = cluster
    namespace, name = "from-archive", "archived"
    with helm_config(emulator, namespace) as config:
        release = config.install(
            str(packaged_copy), name, {"intake": {"mode": "watch"}}, namespace=namespace, timeout=60
        )
        assert release["status"] == "deployed"
        assert apps.read_namespaced_deployment("archived-jobttl-worker", namespace).spec.replicas == 1
        assert len(secret_password(core, namespace, "archived-jobttl-redis")) == 64


# --- the bundled Redis fills without harm (issue 26 §7) ------------------------------------------


def _redis_args(values: dict[str, Any]) -> dict[str, str]:
    statefulset = find(render(values), "StatefulSet", f"{RELEASE}-redis")
    args = statefulset["spec"]["template"]["spec"]["containers"][0]["args"]
    return {args[i]: args[i + 1] for i in range(0, len(args) - 1) if args[i].startswith("--")}


def test_the_bundled_redis_refuses_writes_below_its_memory_limit_rather_than_being_killed():
    args = _redis_args({})
    assert args["--maxmemory-policy"] == "noeviction"
    assert int(args["--maxmemory"]) == 384 * 1024**2, "three quarters of the shipped 512Mi limit"
    assert (
        int(_redis_args({"redis": {"bundled": {"resources": {"limits": {"memory": "2Gi"}}}}})["--maxmemory"])
        == 1536 * 1024**2
    )
    assert int(_redis_args({"redis": {"bundled": {"maxmemory": "400Mi"}}})["--maxmemory"]) == 400 * 1024**2


@pytest.mark.parametrize(
    "bundled, refused",
    [
        ({"maxmemory": "512Mi"}, "redis.bundled.maxmemory: 512Mi is not below Redis's memory limit"),
        ({"maxmemory": "1G"}, "redis.bundled.maxmemory: 1G is not below"),
        (
            {"resources": {"limits": {"memory": "0.5Gi"}}},
            'redis.bundled.resources.limits.memory: "0.5Gi" is not a memory',
        ),
        (
            {"resources": {"limits": {"memory": None}}},
            "redis.bundled.maxmemory: set it, or redis.bundled.resources.limits.memory",
        ),
    ],
)
def test_a_maxmemory_the_pod_would_be_killed_before_is_refused_at_render(bundled, refused):
    with pytest.raises(helm.HelmRenderError, match=refused.replace(".", r"\.").replace("(", r"\(")):
        chart().render({"redis": {"bundled": bundled}}, name=RELEASE, namespace=NAMESPACE)


def test_a_maxmemory_that_is_no_quantity_is_refused_by_the_values_schema():
    with pytest.raises(helm.HelmValuesError, match="maxmemory"):
        chart().render({"redis": {"bundled": {"maxmemory": "384mb"}}}, name=RELEASE, namespace=NAMESPACE)
