"""The manifests follow the kinds: `jobttl manifests` from the policy's kinds; knative/ and the
Helm chart (as a release of another name, in every intake mode) checked.

A kind declared in the policy (or a built-in one enabled) without its RBAC or its
ApiServerSource resource is caught here (and by `jobttl manifests check`) before a user finds
it as 403s in the worker's log or events that never come. The check finds the worker, the sink
and the event source by what they run, whatever the release calls them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.deploy.manifests import KNATIVE, find, rendered
from tests.services import ROOT
from jobttl.core.domain.kinds.registry import DEFAULT_KINDS
from jobttl.core.domain.deploy.manifests import (
    Workload,
    cluster_roles,
    jobttl_command,
    missing,
    mounted_policy,
    source_resources,
    trigger_kinds,
)
from jobttl.core.domain.rules.policy import parse_policy

WIDGET = {
    "group": "widgets.example.com",
    "version": "v1",
    "kind": "Widget",
    "plural": "widgets",
    "finished": {"conditions": [{"type": "Done", "outcome": "succeeded"}]},
    "finishedAt": ["status.finishedAt"],
}


def shipped_policy(**extra) -> dict:
    """The policy knative/base ships (it names its kinds: one MPIJob version), with `extra`."""
    [configmap] = [
        o for o in rendered(KNATIVE) if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "jobttl-policy"
    ]
    data = yaml.safe_load(configmap["data"]["policy.yaml"])
    if "kindDeclarations" in extra:
        data["kinds"] = data["kinds"] + [f"{d['group']}/{d['version']}/{d['kind']}" for d in extra["kindDeclarations"]]
    return {**data, **extra}


def test_knative_grants_and_watches_every_kind_its_policy_enables():
    assert missing(parse_policy(shipped_policy()), rendered(KNATIVE)) == []
    assert missing(parse_policy(shipped_policy()), rendered(KNATIVE / "overlays" / "direct")) == []


def test_a_declared_kind_without_its_rbac_or_its_source_is_caught():
    problems = missing(parse_policy(shipped_policy(kindDeclarations=[WIDGET])), rendered(KNATIVE))
    assert problems == [
        "RBAC: service account jobttl-worker (the worker: Deployment jobttl/jobttl-worker) may not delete, get, list "
        "widgets.widgets.example.com (widgets.example.com/v1 Widget)",
        "RBAC: service account jobttl-worker (the worker: Deployment jobttl/jobttl-worker) may not get the "
        "customresourcedefinitions widgets.widgets.example.com (the worker checks its kinds' paths against them "
        "at start; without it, a warning and no check)",
        "RBAC: service account jobttl-source (the source: ApiServerSource jobttl-jobs) may not get, list, watch "
        "widgets.widgets.example.com (widgets.example.com/v1 Widget)",
        "source: ApiServerSource jobttl-jobs does not watch widgets.example.com/v1 Widget",
        "source: Trigger jobttl-jobs does not let widgets.example.com/v1 Widget through (its kind filter)",
    ]


def test_the_generated_manifests_are_what_knative_ships_for_the_job_kinds():
    objects = rendered(KNATIVE)
    policy = parse_policy(shipped_policy())
    for generated in cluster_roles(policy):
        role = find(objects, "ClusterRole", generated["metadata"]["name"])
        flat = {
            (g, r, v)
            for rule in role["rules"]
            for g in rule["apiGroups"]
            for r in rule["resources"]
            for v in rule["verbs"]
        }
        made = {
            (g, r, v)
            for rule in generated["rules"]
            for g in rule["apiGroups"]
            for r in rule["resources"]
            for v in rule["verbs"]
        }
        job_kinds = {(k.group, k.plural) for k in policy.kinds}
        assert {t for t in made if t[:2] in job_kinds} == {t for t in flat if t[:2] in job_kinds}
    source = find(objects, "ApiServerSource", "jobttl-jobs")
    assert source["spec"]["resources"] == source_resources(policy)
    trigger = find(objects, "Trigger", "jobttl-jobs")
    assert trigger["spec"]["filters"][1]["any"] == trigger_kinds(policy)


def test_the_generated_worker_role_reads_exactly_its_kinds_crds_by_name():
    policy = parse_policy(shipped_policy(kindDeclarations=[WIDGET]))
    worker = cluster_roles(policy)[1]
    (rule,) = [r for r in worker["rules"] if r["resources"] == ["customresourcedefinitions"]]
    assert rule == {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "resourceNames": [
            "tfjobs.kubeflow.org",
            "pytorchjobs.kubeflow.org",
            "mpijobs.kubeflow.org",
            "xgboostjobs.kubeflow.org",
            "paddlejobs.kubeflow.org",
            "jaxjobs.kubeflow.org",
            "trainjobs.trainer.kubeflow.org",
            "workflows.argoproj.io",
            "widgets.widgets.example.com",
        ],  # not batch/v1's Job: it has no CRD
        "verbs": ["get"],
    }
    # A policy with no custom kind: no rule at all (one naming nothing would grant every CRD).
    batch_only = parse_policy({"kinds": ["batch/v1/Job"]})
    assert not [r for r in cluster_roles(batch_only)[1]["rules"] if r["resources"] == ["customresourcedefinitions"]]


def test_generated_manifests_cover_a_declared_kind(tmp_path):
    policy = parse_policy(shipped_policy(kindDeclarations=[WIDGET]))
    objects = rendered(KNATIVE)
    for role in cluster_roles(policy):
        find(objects, "ClusterRole", role["metadata"]["name"])["rules"] = role["rules"]
    find(objects, "ApiServerSource", "jobttl-jobs")["spec"]["resources"] = source_resources(policy)
    find(objects, "Trigger", "jobttl-jobs")["spec"]["filters"][1]["any"] = trigger_kinds(policy)
    assert missing(policy, objects) == []


def test_the_command_checks_rendered_manifests_and_exits_1_on_a_gap(tmp_path):
    manifests = tmp_path / "all.yaml"
    manifests.write_text(yaml.safe_dump_all(rendered(KNATIVE)))
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(shipped_policy(kindDeclarations=[WIDGET])))
    base = tmp_path / "base-policy.yaml"
    base.write_text(yaml.safe_dump(shipped_policy()))

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "jobttl", "manifests", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
        )

    fine = run("check", "-f", str(manifests), "--policy", str(base))
    assert fine.returncode == 0 and f"every enabled kind ({len(DEFAULT_KINDS) - 1})" in fine.stdout, (
        fine.stdout + fine.stderr
    )  # one MPIJob version of the two
    # Without --policy: the one the manifests give the worker (knative's: one MPIJob version).
    default = run("check", "-f", str(manifests))
    assert default.returncode == 0, default.stdout + default.stderr
    assert default.stdout.startswith(
        "policy: ConfigMap jobttl-policy, key policy.yaml (Deployment jobttl/jobttl-worker's JOBTTL_POLICY)\n"
    ), default.stdout
    # The built-in default enables both MPIJob versions: knative watches one.
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    builtin = run("check", "-f", str(manifests), "--policy", str(empty))
    assert builtin.returncode == 1 and "does not watch kubeflow.org/v2beta1 MPIJob" in builtin.stdout, builtin.stdout
    gap = run("check", "-f", str(manifests), "--policy", str(policy))
    assert gap.returncode == 1 and "does not watch widgets.example.com/v1 Widget" in gap.stdout, gap.stdout
    rbac = run("rbac", "--policy", str(policy))
    assert rbac.returncode == 0
    roles = list(yaml.safe_load_all(rbac.stdout))
    assert {
        "apiGroups": ["widgets.example.com"],
        "resources": ["widgets"],
        "verbs": ["delete", "get", "list"],
    } in roles[1]["rules"]
    sources = yaml.safe_load(run("sources", "--policy", str(policy)).stdout)
    assert {"apiVersion": "widgets.example.com/v1", "kind": "Widget"} in sources["apiServerSource"]["spec"]["resources"]


# --- found by what they run: the chart as a release of another name, in every intake mode ---------
RELEASE, NAMESPACE = "nightly", "ops"  # not the defaults: the chart names things nightly-jobttl-...
FULL = f"{RELEASE}-jobttl"


def release(values: str) -> list[dict]:
    """`helm template nightly charts/jobttl -n ops -f charts/jobttl/ci/<values>-values.yaml`."""
    pytest.importorskip("helm_python", reason="helm-python-sdk (the test extras) is not installed")
    from tests.deploy.chart import CHART, ci_values, render

    return render(ci_values(CHART / "ci" / f"{values}-values.yaml"), name=RELEASE, namespace=NAMESPACE)


def its_policy(objects: list[dict]):
    [configmap] = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-policy")]
    return parse_policy(yaml.safe_load(configmap["data"]["policy.yaml"]))


def check(objects: list[dict], *args: str) -> subprocess.CompletedProcess:
    """`... | jobttl manifests check -f -`, with no JOBTTL_POLICY of its own."""
    return subprocess.run(
        [sys.executable, "-m", "jobttl", "manifests", "check", "-f", "-", *args],
        cwd=ROOT,
        input=yaml.safe_dump_all(objects),
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "values, kinds",
    [("broker-bundled", 9), ("direct-sentinel", 2), ("watch-bundled-evidence", 9), ("watch-external-tls", 9)],
)
def test_the_chart_as_a_release_of_another_name_passes_in_every_intake_mode(values, kinds):
    done = check(release(values))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == (
        f"policy: ConfigMap {FULL}-policy, key policy.yaml (Deployment {NAMESPACE}/{FULL}-worker's "
        f"JOBTTL_POLICY)\nevery enabled kind ({kinds}) has its RBAC and its source\n"
    )


def test_a_worker_rule_without_one_kind_is_named_exactly():
    objects = release("broker-bundled")
    [rule] = [r for r in find(objects, "ClusterRole", f"{FULL}-worker")["rules"] if "tfjobs" in r["resources"]]
    rule["resources"].remove("tfjobs")
    assert missing(its_policy(objects), objects) == [
        f"RBAC: service account {FULL}-worker (the worker: Deployment {NAMESPACE}/{FULL}-worker) may not delete, "
        "get, list tfjobs.kubeflow.org (kubeflow.org/v1 TFJob)"
    ]
    done = check(objects)
    assert done.returncode == 1 and "may not delete, get, list tfjobs.kubeflow.org" in done.stdout, done.stdout


def test_a_source_without_one_resource_is_named_exactly():
    objects = release("direct-sentinel")  # no Broker: the ApiServerSource posts to the sink
    source = find(objects, "ApiServerSource", f"{FULL}-jobs")["spec"]
    source["resources"] = [r for r in source["resources"] if r["kind"] != "Job"]
    assert missing(its_policy(objects), objects) == [f"source: ApiServerSource {FULL}-jobs does not watch batch/v1 Job"]


def test_a_watcher_without_the_watch_verb_is_named_exactly():
    objects = release("watch-external-tls")
    for rule in find(objects, "ClusterRole", f"{FULL}-watcher")["rules"]:
        rule["verbs"].remove("watch")
    policy = its_policy(objects)
    assert missing(policy, objects) == [
        f"RBAC: service account {FULL}-watcher (the watcher: Deployment {NAMESPACE}/{FULL}-watcher) may not watch "
        f"{kind.resource} ({kind.api_version} {kind.kind})"
        for kind in policy.kinds
    ]


def test_archiving_without_the_workers_archive_role_is_named():
    objects = [
        o
        for o in release("watch-bundled-evidence")  # its policy archives and stages pods
        if not (o["kind"] == "ClusterRole" and o["metadata"]["name"] == f"{FULL}-worker-archive")
    ]
    worker = f"service account {FULL}-worker (the worker: Deployment {NAMESPACE}/{FULL}-worker)"
    assert missing(its_policy(objects), objects) == [
        f"RBAC: {worker} may not list events",
        f"RBAC: {worker} may not get pods",
        f"RBAC: {worker} may not get pods/log",
    ]


def test_a_trigger_that_filters_a_kind_out_is_named():
    objects = release("broker-bundled")
    filters = find(objects, "Trigger", f"{FULL}-jobs")["spec"]["filters"]
    filters[1]["any"] = [f for f in filters[1]["any"] if f["exact"]["kind"] != "Workflow"]
    assert missing(its_policy(objects), objects) == [
        f"source: Trigger {FULL}-jobs does not let argoproj.io/v1alpha1 Workflow through (its kind filter)"
    ]


def test_a_source_sending_references_needs_the_sinks_rbac():
    objects = release("broker-bundled")
    find(objects, "ApiServerSource", f"{FULL}-jobs")["spec"]["mode"] = "Reference"  # the sink must GET each job
    assert missing(its_policy(objects), objects) == [
        f"RBAC: no ClusterRoleBinding in these manifests grants service account {FULL}-sink (the sink: Knative "
        f"Service {NAMESPACE}/{FULL}-sink; ApiServerSource {FULL}-jobs sends references) anything; it needs get "
        "on 9 kinds"
    ]


def test_accounts_managed_elsewhere_are_named_once_each():
    done = check(release("broker-no-rbac"))  # rbac.create false: a platform team's GitOps grants it
    assert done.returncode == 1
    assert done.stdout.splitlines()[1:] == [
        "RBAC: no ClusterRoleBinding in these manifests grants service account platform-jobttl-worker (the worker: "
        f"Deployment {NAMESPACE}/cleanup-worker) anything; it needs delete, get, list on 9 kinds, create events",
        "RBAC: no ClusterRoleBinding in these manifests grants service account platform-jobttl-source (the source: "
        "ApiServerSource cleanup-jobs) anything; it needs get, list, watch on 9 kinds",
    ]


@pytest.mark.parametrize(
    "values, kind, name, problem",
    [
        (
            "broker-bundled",
            "Deployment",
            "worker",
            "worker: no Deployment (or other workload) runs `jobttl worker`: nothing deletes",
        ),
        (
            "broker-bundled",
            "Service",
            "sink",
            "sink: no Deployment or Knative Service runs `jobttl sink`: no event is decided",
        ),
        (
            "watch-external-tls",
            "Deployment",
            "watcher",
            "source: no ApiServerSource and no workload runs `jobttl watch`: no event reaches the sink",
        ),
    ],
)
def test_a_part_that_cannot_be_found_is_named(values, kind, name, problem):
    objects = release(values)
    policy = its_policy(objects)
    objects.remove(find(objects, kind, f"{FULL}-{name}"))
    assert missing(policy, objects) == [problem]


def test_without_the_workers_policy_in_the_manifests_the_check_says_which_policy_it_used():
    objects = [o for o in release("direct-sentinel") if o["kind"] != "ConfigMap"]
    done = check(objects)
    assert done.stdout.splitlines()[0] == (
        f"policy: the built-in defaults: Deployment {NAMESPACE}/{FULL}-worker reads JOBTTL_POLICY "
        f"/etc/jobttl/policy.yaml from ConfigMap {FULL}-policy, which these manifests do not hold; give --policy "
        "FILE to check against that one"
    )
    assert done.returncode == 1 and "does not watch kubeflow.org/v1 TFJob" in done.stdout  # the defaults' kinds


@pytest.mark.parametrize("text, message", [("", "stdin holds no Kubernetes objects"), ("a: [b\n", "cannot read stdin")])
def test_a_stream_that_is_not_manifests_is_refused_with_exit_2(text, message):
    done = subprocess.run(
        [sys.executable, "-m", "jobttl", "manifests", "check", "-f", "-"],
        cwd=ROOT,
        input=text,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "container, command",
    [
        ({"args": ["worker"]}, "worker"),  # the image's entrypoint is jobttl
        ({"command": ["jobttl"], "args": ["sink", "--port", "8080"]}, "sink"),
        ({"command": ["/usr/local/bin/jobttl", "watch", "--sink", "http://x"]}, "watch"),
        ({"command": ["python", "-m", "jobttl", "worker", "--burst"]}, "worker"),
        ({"command": ["sh", "-c", "exec jobttl worker"]}, "worker"),
        ({"command": ["rq-dashboard"], "args": ["worker"]}, None),  # another program's argument
        ({"image": "redis"}, None),
    ],
)
def test_what_a_container_runs_is_read_from_its_command_and_args(container, command):
    assert jobttl_command(container) == command


def _policy_map(name: str = "policy", namespace: str | None = "jobttl", **data: str) -> dict:
    return {
        "kind": "ConfigMap",
        "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
        "data": data,
    }


def _reading(path: str | None, mounts: list[dict], volumes: list[dict], env: list[dict] | None = None) -> Workload:
    """A worker whose container reads JOBTTL_POLICY at `path` (None: sets no JOBTTL_POLICY)."""
    env = env if env is not None else [] if path is None else [{"name": "JOBTTL_POLICY", "value": path}]
    return Workload(
        "Deployment", "jobttl", "jobttl-worker", "jobttl", {"env": env, "volumeMounts": mounts}, {"volumes": volumes}
    )


CONFIGMAP_VOLUME = [{"name": "policy", "configMap": {"name": "policy"}}]
WORKER = "Deployment jobttl/jobttl-worker"


@pytest.mark.parametrize(
    "workload, objects, found",
    [
        # No JOBTTL_POLICY: the built-in defaults, read from nowhere.
        (_reading(None, [], []), [], ("", f"the built-in defaults ({WORKER} sets no JOBTTL_POLICY)")),
        (
            _reading(None, [], [], env=[{"name": "JOBTTL_POLICY", "valueFrom": {"configMapKeyRef": {}}}]),
            [],
            (None, f"{WORKER} sets JOBTTL_POLICY from elsewhere than a value"),
        ),
        (_reading("policy.yaml", [], []), [], (None, f"{WORKER} sets JOBTTL_POLICY from elsewhere than a value")),
        # A directory mount: the path below it is the key.
        (
            _reading("/etc/jobttl/policy.yaml", [{"name": "policy", "mountPath": "/etc/jobttl"}], CONFIGMAP_VOLUME),
            [_policy_map(**{"policy.yaml": "rules: []"})],
            ("rules: []", f"ConfigMap policy, key policy.yaml ({WORKER}'s JOBTTL_POLICY)"),
        ),
        # A subPath mount is the file itself: its subPath is the key, whatever the file is called.
        (
            _reading(
                "/etc/jobttl.yaml",
                [{"name": "policy", "mountPath": "/etc/jobttl.yaml", "subPath": "p"}],
                CONFIGMAP_VOLUME,
            ),
            [_policy_map(p="ttl: 1h")],
            ("ttl: 1h", f"ConfigMap policy, key p ({WORKER}'s JOBTTL_POLICY)"),
        ),
        # The volume's items map a file to another key.
        (
            _reading(
                "/etc/jobttl/policy.yaml",
                [{"name": "policy", "mountPath": "/etc/jobttl/"}],
                [{"name": "policy", "configMap": {"name": "policy", "items": [{"key": "k", "path": "policy.yaml"}]}}],
            ),
            [_policy_map(k="ttl: 2h")],
            ("ttl: 2h", f"ConfigMap policy, key k ({WORKER}'s JOBTTL_POLICY)"),
        ),
        # A ConfigMap of another namespace is not the one mounted; one without a namespace may be.
        (
            _reading("/etc/jobttl/policy.yaml", [{"name": "policy", "mountPath": "/etc/jobttl"}], CONFIGMAP_VOLUME),
            [_policy_map(namespace="other", **{"policy.yaml": "x"})],
            (
                None,
                f"{WORKER} reads JOBTTL_POLICY /etc/jobttl/policy.yaml from ConfigMap policy, which these manifests "
                "do not hold",
            ),
        ),
        (
            _reading("/etc/jobttl/policy.yaml", [{"name": "policy", "mountPath": "/etc/jobttl"}], CONFIGMAP_VOLUME),
            [_policy_map(namespace=None, **{"policy.yaml": "y"})],
            ("y", f"ConfigMap policy, key policy.yaml ({WORKER}'s JOBTTL_POLICY)"),
        ),
        # The first ConfigMap mount holding the path decides, found or not.
        (
            _reading(
                "/etc/jobttl/policy.yaml",
                [{"name": "policy", "mountPath": "/etc/jobttl"}, {"name": "other", "mountPath": "/etc"}],
                CONFIGMAP_VOLUME + [{"name": "other", "configMap": {"name": "other"}}],
            ),
            [_policy_map(name="other", **{"jobttl/policy.yaml": "z"})],
            (
                None,
                f"{WORKER} reads JOBTTL_POLICY /etc/jobttl/policy.yaml from ConfigMap policy, which these manifests "
                "do not hold",
            ),
        ),
        # Mounts that do not hold the path, or that are not ConfigMaps, are passed over.
        (
            _reading(
                "/etc/jobttl/policy.yaml",
                [{"name": "policy", "mountPath": "/var"}, {"name": "empty", "mountPath": "/etc/jobttl"}],
                CONFIGMAP_VOLUME + [{"name": "empty", "emptyDir": {}}],
            ),
            [_policy_map(**{"policy.yaml": "x"})],
            (None, f"{WORKER} reads JOBTTL_POLICY /etc/jobttl/policy.yaml from no ConfigMap volume"),
        ),
        (
            _reading(
                "/etc/jobttl/policy.yaml",
                [{"name": "policy", "mountPath": "/etc/jobttl.yaml", "subPath": "p"}],
                CONFIGMAP_VOLUME,
            ),
            [_policy_map(p="x")],
            (None, f"{WORKER} reads JOBTTL_POLICY /etc/jobttl/policy.yaml from no ConfigMap volume"),
        ),
    ],
)
def test_the_policy_a_workload_reads_is_found_through_its_mounts(workload, objects, found):
    assert mounted_policy(objects, workload) == found


def _worker_container(objects: list[dict]) -> dict:
    return find(objects, "Deployment", "jobttl-worker")["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    "spoil, problem",
    [
        (
            lambda o: _worker_container(o).update(volumeMounts=["x"]),
            "malformed: Deployment jobttl/jobttl-worker: spec.template.spec.containers[0].volumeMounts[0]: expected a "
            "mapping, got 'x': not read",
        ),
        (
            lambda o: _worker_container(o).update(command=5),
            "malformed: Deployment jobttl/jobttl-worker: spec.template.spec.containers[0].command: expected a list, "
            "got 5: not read",
        ),
        (
            lambda o: find(o, "Deployment", "jobttl-worker").update(metadata=[1]),
            "malformed: Deployment (object {index} of the manifests, its name unreadable): metadata: expected a mapping, "
            "got [1]: not read",
        ),
        (
            lambda o: find(o, "ClusterRole", "jobttl-worker")["rules"][0].update(verbs="get"),
            "malformed: ClusterRole jobttl-worker: rules[0].verbs: expected a list, got 'get': not read",
        ),
        (
            lambda o: find(o, "ApiServerSource", "jobttl-jobs")["spec"].update(resources=[["batch/v1", "Job"]]),
            "malformed: ApiServerSource jobttl/jobttl-jobs: spec.resources[0]: expected a mapping, got ['batch/v1', 'Job']: "
            "not read",
        ),
    ],
)
def test_a_malformed_object_is_a_problem_naming_it_never_a_traceback(tmp_path, spoil, problem):
    objects = rendered(KNATIVE)
    index = objects.index(find(objects, "Deployment", "jobttl-worker")) + 1
    spoil(objects)
    problem = problem.format(index=index)
    assert problem in missing(parse_policy(shipped_policy()), objects)
    done = subprocess.run(
        [sys.executable, "-m", "jobttl", "manifests", "check", "-f", "-"],
        cwd=ROOT,
        input=yaml.safe_dump_all(objects),
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert problem in done.stdout.splitlines(), done.stdout
