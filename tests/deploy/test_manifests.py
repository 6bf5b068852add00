"""The manifests follow the kinds: `jobttl manifests` from the policy's kinds, and knative/ checked.

A kind declared in the policy (or a built-in one enabled) without its RBAC or its
ApiServerSource resource is caught here (and by `jobttl manifests check`) before a user finds
it as 403s in the worker's log or events that never come.
"""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.deploy.manifests import KNATIVE, find, rendered
from tests.services import ROOT
from jobttl.core.kinds import DEFAULT_KINDS
from jobttl.core.manifests import cluster_roles, missing, source_resources, trigger_kinds
from jobttl.core.policy import parse_policy

WIDGET = {"group": "widgets.example.com", "version": "v1", "kind": "Widget", "plural": "widgets",
          "finished": {"conditions": [{"type": "Done", "outcome": "succeeded"}]}, "finishedAt": ["status.finishedAt"]}


def shipped_policy(**extra) -> dict:
    """The policy knative/base ships (it names its kinds: one MPIJob version), with `extra`."""
    [configmap] = [o for o in rendered(KNATIVE) if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "jobttl-policy"]
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
        "RBAC: service account jobttl-source may not get, list, watch widgets.widgets.example.com "
        "(widgets.example.com/v1 Widget)",
        "RBAC: service account jobttl-worker may not delete, get, list widgets.widgets.example.com "
        "(widgets.example.com/v1 Widget)",
        "RBAC: service account jobttl-worker may not get the customresourcedefinitions widgets.widgets.example.com "
        "(the worker checks its kinds' paths against them at start; without it, a warning and no check)",
        "source: ApiServerSource jobttl-jobs does not watch widgets.example.com/v1 Widget"]


def test_the_generated_manifests_are_what_knative_ships_for_the_job_kinds():
    objects = rendered(KNATIVE)
    policy = parse_policy(shipped_policy())
    for generated in cluster_roles(policy):
        role = find(objects, "ClusterRole", generated["metadata"]["name"])
        flat = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                for v in rule["verbs"]}
        made = {(g, r, v) for rule in generated["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                for v in rule["verbs"]}
        job_kinds = {(k.group, k.plural) for k in policy.kinds}
        assert {t for t in made if t[:2] in job_kinds} == {t for t in flat if t[:2] in job_kinds}
    source = find(objects, "ApiServerSource", "jobttl-jobs")
    assert source["spec"]["resources"] == source_resources(policy)
    trigger = find(objects, "Trigger", "jobttl-jobs")
    assert trigger["spec"]["filters"][1]["any"] == trigger_kinds(policy)


def test_the_generated_worker_role_reads_exactly_its_kinds_crds_by_name():
    policy = parse_policy(shipped_policy(kindDeclarations=[WIDGET]))
    worker = cluster_roles(policy)[1]
    rule, = [r for r in worker["rules"] if r["resources"] == ["customresourcedefinitions"]]
    assert rule == {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                    "resourceNames": ["tfjobs.kubeflow.org", "pytorchjobs.kubeflow.org", "mpijobs.kubeflow.org",
                                      "xgboostjobs.kubeflow.org", "paddlejobs.kubeflow.org", "jaxjobs.kubeflow.org",
                                      "trainjobs.trainer.kubeflow.org", "workflows.argoproj.io",
                                      "widgets.widgets.example.com"],  # not batch/v1's Job: it has no CRD
                    "verbs": ["get"]}
    # A policy with no custom kind: no rule at all (one naming nothing would grant every CRD).
    batch_only = parse_policy({"kinds": ["batch/v1/Job"]})
    assert not [r for r in cluster_roles(batch_only)[1]["rules"] if r["resources"] == ["customresourcedefinitions"]]


def test_generated_manifests_cover_a_declared_kind(tmp_path):
    policy = parse_policy(shipped_policy(kindDeclarations=[WIDGET]))
    objects = rendered(KNATIVE)
    for role in cluster_roles(policy):
        find(objects, "ClusterRole", role["metadata"]["name"])["rules"] = role["rules"]
    find(objects, "ApiServerSource", "jobttl-jobs")["spec"]["resources"] = source_resources(policy)
    assert missing(policy, objects) == []


def test_the_command_checks_rendered_manifests_and_exits_1_on_a_gap(tmp_path):
    manifests = tmp_path / "all.yaml"
    manifests.write_text(yaml.safe_dump_all(rendered(KNATIVE)))
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(shipped_policy(kindDeclarations=[WIDGET])))
    base = tmp_path / "base-policy.yaml"
    base.write_text(yaml.safe_dump(shipped_policy()))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "jobttl", "manifests", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)

    fine = run("check", "-f", str(manifests), "--policy", str(base))
    assert fine.returncode == 0 and f"every enabled kind ({len(DEFAULT_KINDS) - 1})" in fine.stdout, \
        fine.stdout + fine.stderr  # one MPIJob version of the two
    default = run("check", "-f", str(manifests))  # the built-in default enables both MPIJob versions
    assert default.returncode == 1 and "does not watch kubeflow.org/v2beta1 MPIJob" in default.stdout, default.stdout
    gap = run("check", "-f", str(manifests), "--policy", str(policy))
    assert gap.returncode == 1 and "does not watch widgets.example.com/v1 Widget" in gap.stdout, gap.stdout
    rbac = run("rbac", "--policy", str(policy))
    assert rbac.returncode == 0
    roles = list(yaml.safe_load_all(rbac.stdout))
    assert {"apiGroups": ["widgets.example.com"], "resources": ["widgets"], "verbs": ["delete", "get", "list"]} in \
        roles[1]["rules"]
    sources = yaml.safe_load(run("sources", "--policy", str(policy)).stdout)
    assert {"apiVersion": "widgets.example.com/v1", "kind": "Widget"} in sources["apiServerSource"]["spec"]["resources"]
