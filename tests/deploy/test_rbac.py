"""The RBAC in knative/ grants each component exactly the verbs its code uses, nothing more.

The truth is `jobttl.core.domain.deploy.permissions.PERMISSIONS` (KubeClient refuses any verb not declared there) and
`jobttl.core.domain.kinds.registry.DEFAULT_KINDS` (core/domain/kinds/kinds.yaml). Service accounts are found from the workloads themselves (the
sink's Knative Service, the worker's Deployment, the ApiServerSource), so a workload moved
to another account is checked too.
"""

from __future__ import annotations

import itertools

import pytest

from tests.deploy.manifests import KNATIVE, find, load_yaml_documents, pod_spec, rendered
from jobttl.core.services.install import CONFIGMAP
from jobttl.core.domain.kinds.registry import DEFAULT_KINDS
from jobttl.core.domain.deploy.permissions import CRDS, CRD_GROUP, JOBS, VERSION, crd_names, permissions

VARIANTS = {"base": KNATIVE, "direct": KNATIVE / "overlays" / "direct"}
NAMESPACE = "jobttl"
RBAC = "rbac.authorization.k8s.io/v1"

# What an ApiServerSource adapter does with each resource it is given: list, then watch
# (and get). Knative documents exactly these three for the source's service account.
SOURCE_VERBS = {"get", "list", "watch"}


def on_job_kinds(verbs):
    return {(kind.group, kind.plural, verb) for kind in DEFAULT_KINDS for verb in verbs}


def named(resource: str, name: str) -> str:
    """How a grant limited to one object by `resourceNames` is written here: ``resource[name]``."""
    return f"{resource}[{name}]"


def on_crds(kinds, verbs) -> set[tuple[str, str, str]]:
    """The kinds' own CustomResourceDefinitions, by name (the only ones the worker may read)."""
    return {(CRD_GROUP, named(CRDS, name), verb) for name in crd_names(kinds) for verb in verbs}


def declared(component: str, **features) -> set[tuple[str, str, str]]:
    """What `jobttl.core.domain.deploy.permissions.permissions` lets the component do, as RBAC (apiGroup, resource, verb)."""
    granted = set()
    for resource, verbs in permissions(component, **features).items():
        if resource == JOBS:
            granted |= on_job_kinds(verbs)
        elif resource == CRDS:
            granted |= on_crds(DEFAULT_KINDS, verbs)
        elif resource != VERSION:  # a non-resource URL every authenticated client may read
            granted |= {("", resource, verb) for verb in verbs}  # core: events, pods, pods/log
    return granted


class Violation(AssertionError):
    pass


def grants(objects, account: str, namespace: str = NAMESPACE) -> set[tuple[str, str, str]]:
    """Every (apiGroup, resource, verb) bound to a service account, refusing anything wider. A rule
    limited by `resourceNames` grants ``resource[name]`` for each name (`named`): only the install
    record's (a Role) and the worker's CRDs' (in a ClusterRole: CRDs have no namespace) may be."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["apiVersion"] == RBAC and o["kind"] in ("ClusterRole", "Role")
    }
    granted = set()
    for binding in objects:
        if binding["apiVersion"] != RBAC or binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        subjects = binding.get("subjects") or []
        if not any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == account
            and s.get("namespace", binding["metadata"].get("namespace")) == namespace
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        role_namespace = None if ref["kind"] == "ClusterRole" else binding["metadata"]["namespace"]
        role = roles.get((ref["kind"], role_namespace, ref["name"]))
        if role is None:
            raise Violation(f"{binding['metadata']['name']} binds a role not in the manifests: {ref}")
        if "aggregationRule" in role:
            raise Violation(f"{ref['name']}: aggregated roles grant whatever matches their selector")
        for rule in role.get("rules") or []:
            name = f"{ref['name']}: {rule}"
            if "nonResourceURLs" in rule:
                raise Violation(f"{name}: only resource rules are expected")
            crd_rule = rule.get("apiGroups") == [CRD_GROUP] and rule.get("resources") == [CRDS]
            if (
                "resourceNames" in rule
                and not crd_rule
                and (
                    ref["kind"] != "Role"
                    or rule.get("resources") != ["configmaps"]
                    or rule["resourceNames"] != [CONFIGMAP]
                )
            ):
                raise Violation(
                    f"{name}: resource names only for jobttl's own install record, in a Role, and the job kinds' CRDs"
                )
            fields = (rule.get("apiGroups") or [], rule.get("resources") or [], rule.get("verbs") or [])
            if any("*" in value for field in fields for value in field + rule.get("resourceNames", [])):
                raise Violation(f"{name}: wildcard")
            if crd_rule and "resourceNames" in rule:
                if not rule["resourceNames"]:
                    raise Violation(f"{name}: empty resourceNames grant every name")
                fields = (fields[0], [named(CRDS, n) for n in rule["resourceNames"]], fields[2])
            granted |= set(itertools.product(*fields))
    return granted


def accounts(objects) -> dict[str, str]:
    """component -> the service account it runs as, read from the workloads."""
    return {
        "sink": pod_spec(find(objects, "Service", "jobttl-sink", "serving.knative.dev/v1"))["serviceAccountName"],
        "worker": pod_spec(find(objects, "Deployment", "jobttl-worker"))["serviceAccountName"],
        "source": find(objects, "ApiServerSource", "jobttl-jobs")["spec"]["serviceAccountName"],
    }


@pytest.fixture(params=sorted(VARIANTS))
def objects(request):
    return rendered(VARIANTS[request.param])


def test_the_sink_gets_exactly_its_declared_verbs_none_in_resource_mode(objects):
    assert grants(objects, accounts(objects)["sink"]) == declared("sink") == set()


def test_the_worker_gets_exactly_its_declared_verbs_and_events(objects):
    assert grants(objects, accounts(objects)["worker"]) == declared("worker")
    assert ("", "events", "create") in declared("worker")


EVIDENCE = KNATIVE / "overlays" / "evidence"


@pytest.mark.parametrize(
    "roles, features",
    [
        (("jobttl-worker-archive",), {"archive": True}),
        (("jobttl-worker-pod-cleanup",), {"pod_cleanup": True}),
        (("jobttl-worker-archive", "jobttl-worker-pod-cleanup"), {"archive": True, "pod_cleanup": True}),
    ],
)
def test_the_evidence_roles_grant_exactly_what_archiving_and_pod_cleanup_declare(roles, features):
    """Each ClusterRole of the evidence overlay (and its binding), on its own, over the base."""
    objects = rendered(KNATIVE) + [
        o for o in load_yaml_documents(EVIDENCE / "rbac.yaml") if o["metadata"]["name"] in roles
    ]
    assert grants(objects, accounts(objects)["worker"]) == declared("worker", **features)
    assert declared("worker", **features) > declared("worker")  # the base stays least-privilege


def test_the_evidence_overlay_is_the_base_plus_both_roles():
    objects = rendered(EVIDENCE)
    assert grants(objects, accounts(objects)["worker"]) == declared("worker", archive=True, pod_cleanup=True)
    assert grants(objects, accounts(objects)["sink"]) == set()


def test_the_apiserversource_gets_exactly_get_list_watch(objects):
    assert grants(objects, accounts(objects)["source"]) == on_job_kinds(SOURCE_VERBS)


def test_components_have_accounts_of_their_own(objects):
    names = accounts(objects)
    assert len(set(names.values())) == len(names), names
    existing = {
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "ServiceAccount" and o["metadata"]["namespace"] == NAMESPACE
    }
    assert set(names.values()) <= existing


def test_nothing_else_is_bound_and_pods_without_grants_get_no_token(objects):
    names = set(accounts(objects).values())
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["name"] in names, binding["metadata"]["name"]
            assert subject["namespace"] == NAMESPACE
    for workload in (
        o for o in objects if o["kind"] in ("Deployment", "StatefulSet", "Service") and "template" in o.get("spec", {})
    ):
        spec = pod_spec(workload)
        account = spec.get("serviceAccountName", "default")
        if not grants(objects, account):
            assert spec.get("automountServiceAccountToken") is False, workload["metadata"]["name"]


# --- the check itself can fail -------------------------------------------------------------


def test_an_extra_verb_or_resource_is_caught():
    objects = rendered(KNATIVE)
    role = find(objects, "ClusterRole", "jobttl-worker")
    role["rules"][0]["verbs"].append("watch")
    role["rules"].append({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})
    granted = grants(objects, accounts(objects)["worker"])
    assert granted != declared("worker")
    assert ("kubeflow.org", "tfjobs", "watch") in granted and ("", "pods", "get") in granted


def test_a_missing_kind_is_caught():
    objects = rendered(KNATIVE)
    find(objects, "ClusterRole", "jobttl-worker")["rules"][0]["resources"].remove("jaxjobs")
    assert grants(objects, accounts(objects)["worker"]) != declared("worker")


@pytest.mark.parametrize("field", ["apiGroups", "resources", "verbs"])
def test_a_wildcard_is_refused(field):
    objects = rendered(KNATIVE)
    find(objects, "ClusterRole", "jobttl-worker")["rules"][0][field] = ["*"]
    with pytest.raises(Violation, match="wildcard"):
        grants(objects, accounts(objects)["worker"])


def test_a_binding_to_an_unknown_role_is_refused():
    objects = rendered(KNATIVE)
    find(objects, "ClusterRoleBinding", "jobttl-worker")["roleRef"]["name"] = "cluster-admin"
    with pytest.raises(Violation, match="not in the manifests"):
        grants(objects, accounts(objects)["worker"])


def test_the_worker_reads_only_its_kinds_crds_by_name():
    objects = rendered(KNATIVE)
    worker = grants(objects, accounts(objects)["worker"])
    assert {r for _, r, _ in worker if r.startswith(CRDS)} == {named(CRDS, n) for n in crd_names(DEFAULT_KINDS)}
    assert (CRD_GROUP, CRDS, "get") not in worker  # never every CRD
    assert "jobs.batch" not in crd_names(DEFAULT_KINDS) and "mpijobs.kubeflow.org" in crd_names(DEFAULT_KINDS)


@pytest.mark.parametrize("change", ["unnamed", "empty", "another"])
def test_a_wider_crd_rule_is_caught(change):
    objects = rendered(KNATIVE)
    rule = next(r for r in find(objects, "ClusterRole", "jobttl-worker")["rules"] if r["resources"] == [CRDS])
    if change == "unnamed":
        del rule["resourceNames"]
    elif change == "another":
        rule["resourceNames"].append("secrets.example.com")
    else:
        rule["resourceNames"] = []
        with pytest.raises(Violation, match="empty resourceNames"):
            grants(objects, accounts(objects)["worker"])
        return
    assert grants(objects, accounts(objects)["worker"]) != declared("worker")


def test_resource_names_are_refused_beyond_the_install_record():
    objects = rendered(KNATIVE)
    find(objects, "Role", "jobttl-worker-install")["rules"][0]["resourceNames"] = ["kube-root-ca.crt"]
    with pytest.raises(Violation, match="install record"):
        grants(objects, accounts(objects)["worker"])
