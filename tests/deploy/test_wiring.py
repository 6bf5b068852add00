"""How the objects in knative/ fit together, and with the code they run.

Schemas say each object is well-formed; these tests say the whole is coherent: every
reference resolves, the event path covers every kind and event type, the sink stays
cluster-local, the processes get arguments and settings the code accepts, Redis persists.
"""

from __future__ import annotations

import tomllib
from urllib.parse import urlparse

import pytest
import yaml

from jobttl.cli import build_parser
from jobttl.core.runtime.config import PLACEHOLDER_REDIS_PASSWORD, Settings
from tests.deploy.manifests import ENV_REFERENCE, KNATIVE, REPO, find, pod_spec, rendered, split_image
from jobttl.core.domain.kinds.registry import DEFAULT_KINDS, MPIJOB_V2BETA1

VARIANTS = {"base": KNATIVE, "direct": KNATIVE / "overlays" / "direct"}
NAMESPACE = "jobttl"
KSVC = "serving.knative.dev/v1"
RESOURCE_TYPES = tuple(f"dev.knative.apiserver.resource.{action}" for action in ("add", "update", "delete"))
IMAGE = "ghcr.io/jobttl/jobttl"


@pytest.fixture(params=sorted(VARIANTS))
def objects(request):
    return rendered(VARIANTS[request.param])


@pytest.fixture
def base():
    return rendered(KNATIVE)


def jobttl_containers(objects):
    for obj in objects:
        if "template" in obj.get("spec", {}):
            for container in pod_spec(obj).get("containers", []):
                if split_image(container["image"])[0] == IMAGE:
                    yield obj, container


# --- references -------------------------------------------------------------------------------


def _refs(node, path=""):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "ref" and isinstance(value, dict) and {"apiVersion", "kind", "name"} <= set(value):
                yield f"{path}.ref", value
            else:
                yield from _refs(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _refs(value, f"{path}[{i}]")


def test_every_sink_subscriber_and_dead_letter_ref_resolves(objects):
    ids = {(o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects}
    refs = [(o, path, ref) for o in objects for path, ref in _refs(o.get("spec", {}))]
    assert refs
    for obj, path, ref in refs:
        wanted = (ref["apiVersion"], ref["kind"], ref.get("namespace", obj["metadata"]["namespace"]), ref["name"])
        assert wanted in ids, f"{obj['kind']}/{obj['metadata']['name']} spec{path} -> {wanted}: no such object"


def test_trigger_names_the_broker(base):
    broker = find(base, "Broker", "jobttl")
    assert find(base, "Trigger", "jobttl-jobs")["spec"]["broker"] == broker["metadata"]["name"]


def test_namespaced_objects_are_in_the_jobttl_namespace(objects):
    find(objects, "Namespace", NAMESPACE)
    for obj in objects:
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"].get("namespace") == NAMESPACE, f"{obj['kind']}/{obj['metadata']['name']}"


def test_config_maps_and_secrets_used_by_pods_exist(objects):
    data = {}
    for obj in objects:
        if obj["kind"] in ("ConfigMap", "Secret"):
            data[(obj["kind"], obj["metadata"]["name"])] = {**obj.get("data", {}), **obj.get("stringData", {})}
    for obj in objects:
        if "template" not in obj.get("spec", {}):
            continue
        spec = pod_spec(obj)
        for container in spec["containers"]:
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in data[("Secret", ref["name"])], env
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in data


# --- the event path ---------------------------------------------------------------------------


def _matches(expression: dict, event: dict) -> bool:
    """One Subscriptions API filter expression (the dialects Knative implements, but CESQL)."""
    ((dialect, value),) = expression.items()
    if dialect == "exact":
        return all(event.get(k) == v for k, v in value.items())
    if dialect == "prefix":
        return all(k in event and event[k].startswith(v) for k, v in value.items())
    if dialect == "suffix":
        return all(k in event and event[k].endswith(v) for k, v in value.items())
    if dialect == "all":
        return all(_matches(e, event) for e in value)
    if dialect == "any":
        return any(_matches(e, event) for e in value)
    if dialect == "not":
        return not _matches(value, event)
    raise NotImplementedError(dialect)


def trigger_delivers(trigger: dict, event: dict) -> bool:
    spec = trigger["spec"]
    if spec.get("filters"):  # `filters` overrides `filter` when both are set
        return all(_matches(e, event) for e in spec["filters"])
    attributes = (spec.get("filter") or {}).get("attributes") or {}
    return all(event.get(k) == v for k, v in attributes.items())


def apiserver_event(kind, event_type: str) -> dict:
    """The attributes ApiServerSource (and `jobttl watch`) put on an event about a job."""
    return {
        "specversion": "1.0",
        "id": "1",
        "source": "https://10.96.0.1:443",
        "type": event_type,
        "subject": kind.path("team-a", "job-1"),
        "apiversion": kind.api_version,
        "kind": kind.kind,
        "name": "job-1",
        "namespace": "team-a",
    }


def test_apiserversource_watches_every_kind_in_resource_mode(objects):
    source = find(objects, "ApiServerSource", "jobttl-jobs")
    spec = source["spec"]
    listed = [(r["apiVersion"], r["kind"]) for r in spec["resources"]]
    assert len(listed) == len(set(listed))
    # One MPIJob version: no cluster serves training-operator's and mpi-operator's at once (issue 20).
    assert set(listed) == {(k.api_version, k.kind) for k in DEFAULT_KINDS if k is not MPIJOB_V2BETA1}
    assert spec["mode"] == "Resource"
    assert spec["namespaceSelector"] == {}  # every namespace
    assert all("selector" not in r for r in spec["resources"])


def test_the_base_sends_through_the_broker_and_the_direct_overlay_to_the_sink():
    base = find(rendered(KNATIVE), "ApiServerSource", "jobttl-jobs")["spec"]["sink"]["ref"]
    direct_objects = rendered(KNATIVE / "overlays" / "direct")
    direct = find(direct_objects, "ApiServerSource", "jobttl-jobs")["spec"]["sink"]["ref"]
    assert (base["kind"], base["name"]) == ("Broker", "jobttl")
    assert (direct["apiVersion"], direct["kind"], direct["name"]) == (KSVC, "Service", "jobttl-sink")
    assert not [o for o in direct_objects if o["kind"] in ("Broker", "Trigger")]


@pytest.mark.parametrize("event_type", RESOURCE_TYPES)
@pytest.mark.parametrize("kind", DEFAULT_KINDS, ids=lambda k: f"{k.api_version}/{k.kind}")
def test_the_trigger_delivers_every_kind_and_event_type(base, kind, event_type):
    assert trigger_delivers(find(base, "Trigger", "jobttl-jobs"), apiserver_event(kind, event_type))


@pytest.mark.parametrize("kind", DEFAULT_KINDS, ids=lambda k: f"{k.api_version}/{k.kind}")
def test_the_trigger_does_not_need_the_apiversion_extension(base, kind):
    """Recent ApiServerSources set `apiversion`; older ones only `kind`, `name` and `namespace`."""
    event = apiserver_event(kind, RESOURCE_TYPES[1])
    del event["apiversion"]
    assert trigger_delivers(find(base, "Trigger", "jobttl-jobs"), event)


@pytest.mark.parametrize(
    "change",
    [
        {"type": "dev.knative.apiserver.ref.update"},  # Reference mode: not what the source sends
        {"type": "dev.knative.sources.ping"},  # the resync goes to the sink directly
        {"apiversion": "v1", "kind": "Pod"},
        {"kind": "tfjob"},
        {"kind": None},
    ],
)
def test_the_trigger_drops_other_events(base, change):
    event = {
        k: v for k, v in {**apiserver_event(DEFAULT_KINDS[0], RESOURCE_TYPES[1]), **change}.items() if v is not None
    }
    assert not trigger_delivers(find(base, "Trigger", "jobttl-jobs"), event)


def test_an_overly_broad_trigger_would_be_noticed(base):
    trigger = find(base, "Trigger", "jobttl-jobs")
    trigger["spec"]["filters"] = [{"prefix": {"type": "dev.knative.apiserver."}}]
    assert trigger_delivers(
        trigger, {**apiserver_event(DEFAULT_KINDS[0], "x"), "type": "dev.knative.apiserver.ref.add"}
    )


@pytest.mark.parametrize("name", ["jobttl-jobs", "jobttl"])
def test_delivery_retries_with_exponential_backoff_into_a_dead_letter_sink(base, name):
    kind = "Trigger" if name == "jobttl-jobs" else "Broker"
    delivery = find(base, kind, name)["spec"]["delivery"]
    assert delivery["retry"] >= 5
    assert delivery["backoffPolicy"] == "exponential"
    assert delivery["backoffDelay"].startswith("PT")
    assert delivery["deadLetterSink"]["ref"]["name"] == "jobttl-dead-letters"


def test_resync_pings_the_sink_every_15_minutes(objects):
    ping = find(objects, "PingSource", "jobttl-resync")["spec"]
    assert ping["schedule"] == "*/15 * * * *"
    assert ping["sink"]["ref"] == {"apiVersion": KSVC, "kind": "Service", "name": "jobttl-sink"}


# --- the sink -----------------------------------------------------------------------------------


def test_knative_services_are_cluster_local(objects):
    services = [o for o in objects if o["apiVersion"] == KSVC]
    assert "jobttl-sink" in {s["metadata"]["name"] for s in services}
    for service in services:
        assert service["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"


def test_sink_scaling_keeps_one_pod_warm_and_caps_concurrency(objects):
    sink = find(objects, "Service", "jobttl-sink", KSVC)
    annotations = sink["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["autoscaling.knative.dev/min-scale"]) >= 1
    assert int(annotations["autoscaling.knative.dev/max-scale"]) >= 1
    spec = pod_spec(sink)
    args = build_parser().parse_args(spec["containers"][0]["args"])
    assert 0 < spec["containerConcurrency"] <= args.threads  # no request waits inside waitress


def test_sink_arguments_parse_and_it_serves_the_declared_port_with_probes(objects):
    container = pod_spec(find(objects, "Service", "jobttl-sink", KSVC))["containers"][0]
    args = build_parser().parse_args(container["args"])
    assert args.command == "sink"
    assert [p["containerPort"] for p in container["ports"]] == [args.port]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


# --- the worker ---------------------------------------------------------------------------------


def _max_conflicts() -> int:
    from jobttl.core.services.deletion import MAX_CONFLICTS

    return MAX_CONFLICTS


def _env(container) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_worker_grace_period_covers_a_whole_deletion(objects):
    worker = find(objects, "Deployment", "jobttl-worker")
    container = pod_spec(worker)["containers"][0]
    assert build_parser().parse_args(container["args"]).command == "worker"
    timeout = int(_env(container).get("JOBTTL_API_TIMEOUT") or Settings.api_timeout)
    worst_case = _max_conflicts() * 2 * timeout  # each round: GET, then DELETE
    assert pod_spec(worker)["terminationGracePeriodSeconds"] >= worst_case + 10


def test_worker_probes_run_the_same_heartbeat_check_as_compose(objects):
    container = pod_spec(find(objects, "Deployment", "jobttl-worker"))["containers"][0]
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    for probe in ("startupProbe", "livenessProbe"):
        command = container[probe]["exec"]["command"]
        assert command[:2] == ["python", "-c"]
        compile(command[2], probe, "exec")
        assert command[2] == compose["configs"]["worker-probe"]["content"]
        assert container[probe]["timeoutSeconds"] >= 5


def test_jobttl_containers_run_the_project_version_as_non_root_with_limits(objects):
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    found = list(jobttl_containers(objects))
    assert {obj["metadata"]["name"] for obj, _ in found} == {"jobttl-sink", "jobttl-worker"}
    for obj, container in found:
        assert container["image"] == f"{IMAGE}:{version}"
        context = {**pod_spec(obj).get("securityContext", {}), **container.get("securityContext", {})}
        assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
        assert context["allowPrivilegeEscalation"] is False
        assert container["resources"]["limits"]["memory"]


def test_env_references_are_defined_before_use(objects):
    for obj in objects:
        if "template" not in obj.get("spec", {}):
            continue
        for container in pod_spec(obj)["containers"]:
            defined: set[str] = set()
            texts = []
            for env in container.get("env", []):
                for name in ENV_REFERENCE.findall(env.get("value", "")):
                    assert name in defined, f"{container['name']}: {env['name']} uses $({name}) before it is set"
                defined.add(env["name"])
            texts += container.get("args", []) + container.get("command", [])
            for text in texts:
                for name in ENV_REFERENCE.findall(text):
                    assert name in defined, f"{container['name']}: $({name}) in args is never set"


def test_sink_and_worker_settings_are_accepted_by_the_code(objects, tmp_path):
    # With the password set, as step 1 of knative/README.md says (the shipped placeholder is refused).
    secrets = {
        o["metadata"]["name"]: {
            k: v.replace(PLACEHOLDER_REDIS_PASSWORD, "0123abcd") for k, v in o["stringData"].items()
        }
        for o in objects
        if o["kind"] == "Secret"
    }
    policy_map = find(objects, "ConfigMap", "jobttl-policy")
    for obj, container in jobttl_containers(objects):
        env: dict[str, str] = {}
        for item in container["env"]:
            if "valueFrom" in item:
                ref = item["valueFrom"]["secretKeyRef"]
                env[item["name"]] = secrets[ref["name"]][ref["key"]]
            else:
                env[item["name"]] = ENV_REFERENCE.sub(lambda m, env=env: env[m.group(1)], item["value"])
        # JOBTTL_POLICY points at a key of the mounted policy ConfigMap ...
        policy_path = env["JOBTTL_POLICY"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volume = next(
            v for v in pod_spec(obj)["volumes"] if v.get("configMap", {}).get("name") == policy_map["metadata"]["name"]
        )
        directory, _, key = policy_path.rpartition("/")
        assert mounts[volume["name"]] == directory and key in policy_map["data"]
        # ... and the code accepts every setting, the policy file included.
        (tmp_path / key).write_text(policy_map["data"][key])
        settings = Settings.from_env({**env, "JOBTTL_POLICY": str(tmp_path / key)})
        url = urlparse(settings.redis_url)
        assert (url.hostname, url.port) == ("jobttl-redis", 6379) and url.password


def test_the_policy_is_the_documented_example(objects):
    from jobttl.core.domain.rules.policy import parse_policy

    text = find(objects, "ConfigMap", "jobttl-policy")["data"]["policy.yaml"]
    data = yaml.safe_load(text)
    # The enabled kinds are the ones the event source watches (issue 20: said in both, kept equal).
    source = find(objects, "ApiServerSource", "jobttl-jobs")["spec"]["resources"]
    assert data.pop("kinds") == [f"{r['apiVersion']}/{r['kind']}" for r in source]
    assert data == {"ttl": "7d", "maxTTL": "30d", "ttlAfterFailure": "14d", "namespaces": {"exclude": ["kube-system"]}}
    parse_policy(data, "knative/base/policy.yaml")  # raises PolicyError if the code disagrees


# --- Redis ----------------------------------------------------------------------------------------


def test_redis_persists_with_aof_on_a_volume_claim_and_requires_a_password(objects):
    redis = find(objects, "StatefulSet", "jobttl-redis")
    container = pod_spec(redis)["containers"][0]
    args = container["args"]
    option = {args[i]: args[i + 1] for i in range(0, len(args) - 1, 2) if args[i].startswith("--")}
    assert option["--appendonly"] == "yes"
    assert option["--maxmemory-policy"] == "noeviction"
    assert option["--requirepass"] == "$(REDIS_PASSWORD)"
    password = next(e for e in container["env"] if e["name"] == "REDIS_PASSWORD")
    assert password["valueFrom"]["secretKeyRef"]["name"] == "jobttl-redis"
    claims = {t["metadata"]["name"] for t in redis["spec"]["volumeClaimTemplates"]}
    data_mount = next(m for m in container["volumeMounts"] if m["mountPath"] == option["--dir"])
    assert data_mount["name"] in claims
    service = find(objects, "Service", "jobttl-redis", "v1")
    assert redis["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["selector"].items() <= pod_spec_labels(redis).items()


def pod_spec_labels(obj):
    return obj["spec"]["template"]["metadata"]["labels"]


def test_only_the_sink_and_the_worker_may_reach_redis(objects):
    policy = find(objects, "NetworkPolicy", "jobttl-redis")
    selector = policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchExpressions"]
    allowed = next(e["values"] for e in selector if e["key"] == "app.kubernetes.io/component")
    labels = {o["metadata"]["name"]: pod_spec_labels(o) for o, _ in jobttl_containers(objects)}
    assert sorted(labels[name]["app.kubernetes.io/component"] for name in labels) == sorted(allowed)
