"""What each jobttl component may do in the API, by resource: the one table of verbs.

`jobttl.core.kube.client.KubeClient` refuses any verb a component does not declare here, and the RBAC
the chart, knative/ and `jobttl manifests rbac` grant is derived from (and tested against) it.
Pure data: the client and the manifests both read it.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobttl.core.domain.kinds.model import JobKind

JOBS = "jobs"  # the enabled job kinds' resources (tfjobs.kubeflow.org, jobs.batch, ...)
EVENTS = "events"
PODS = "pods"
POD_LOGS = "pods/log"
CONFIGMAPS = "configmaps"  # only jobttl's own install record (jobttl.core.services.install), in its own namespace
VERSION = "/version"  # a non-resource URL every authenticated client may read (system:public-info-viewer)
# The CustomResourceDefinitions of the enabled kinds, read at the worker's start to check the
# kinds' declared paths against their schemas (jobttl.core.domain.kinds.crdcheck). RBAC grants `get` on them
# by name (`resourceNames`: the enabled kinds' CRDs only, see `crd_names`).
CRDS = "customresourcedefinitions"
CRD_GROUP = "apiextensions.k8s.io"
# Someone else's token and rights, checked for the console and the read API (jobttl.core.kube.access):
# RBAC grants create on these (authentication.k8s.io and authorization.k8s.io), the rights of
# system:auth-delegator.
TOKEN_REVIEWS = "tokenreviews"
SUBJECT_ACCESS_REVIEWS = "subjectaccessreviews"

# The verbs each jobttl component uses, by resource. KubeClient refuses anything else, so this
# table is the truth the RBAC manifests in knative/ are tested against. The sink reads an
# object only for Reference-mode events; archiving (pods, logs, events) is granted only
# when the policy enables it (see `permissions`).
PERMISSIONS: dict[str, dict[str, frozenset[str]]] = {
    "sink": {},
    "sink-reference": {JOBS: frozenset({"get"})},
    "worker": {
        JOBS: frozenset({"get", "list", "delete"}),
        EVENTS: frozenset({"create"}),
        VERSION: frozenset({"get"}),
        CONFIGMAPS: frozenset({"get", "create", "update"}),
        CRDS: frozenset({"get"}),
    },
    "watch": {JOBS: frozenset({"get", "list", "watch"})},
    # The console's and the read API's checks of who is asking (jobttl.core.kube.access).
    "access": {TOKEN_REVIEWS: frozenset({"create"}), SUBJECT_ACCESS_REVIEWS: frozenset({"create"})},
}
ARCHIVE_PERMISSIONS: dict[str, frozenset[str]] = {
    PODS: frozenset({"get", "list"}),
    POD_LOGS: frozenset({"get"}),
    EVENTS: frozenset({"create", "list"}),
}
POD_CLEANUP_PERMISSIONS: dict[str, frozenset[str]] = {PODS: frozenset({"list", "delete"})}


def permissions(component: str, archive: bool = False, pod_cleanup: bool = False) -> dict[str, frozenset[str]]:
    """What `component` may do, given the features its policy enables."""
    granted = {resource: set(verbs) for resource, verbs in PERMISSIONS[component].items()}
    for enabled, extra in ((archive, ARCHIVE_PERMISSIONS), (pod_cleanup, POD_CLEANUP_PERMISSIONS)):
        if enabled and component == "worker":
            for resource, verbs in extra.items():
                granted.setdefault(resource, set()).update(verbs)
    return {resource: frozenset(verbs) for resource, verbs in granted.items()}


def crd_names(kinds: Iterable[JobKind]) -> list[str]:
    """The CustomResourceDefinitions defining `kinds`, in order, once each (MPIJob's two versions
    share one): what the worker's `get` on CRDs is limited to. Kubernetes' own groups (batch) have none."""
    return list(dict.fromkeys(kind.crd for kind in kinds if kind.crd))
