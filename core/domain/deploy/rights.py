"""Who may read and act: jobttl's virtual API, answered by Kubernetes RBAC through SubjectAccessReview.

jobttl serves no Kubernetes resource; its console and read API ask the API server whether a
user may use a verb on a resource of the `jobttl.io` group that exists only in RBAC, as
kube-rbac-proxy and the metrics-server do. A cluster admin grants it like any other right:

    deletions.jobttl.io   get, list (read what is pending, held and deleted);
                          keep, postpone, cancel (the actions on one job)
    reviews.jobttl.io     get, list (the first-run review and the guard's held set); confirm

The ClusterRoles below are those the chart ships (`jobttl-reader`, `jobttl-console-operator`),
and `jobttl manifests rbac` prints; pure data, tested against both.
"""

from __future__ import annotations

from typing import Any

GROUP = "jobttl.io"
DELETIONS = "deletions"
REVIEWS = "reviews"

READ = ("get", "list")
# The actions, each the verb the console asks SubjectAccessReview about, and the CLI command it is.
KEEP, POSTPONE, CANCEL, CONFIRM = "keep", "postpone", "cancel", "confirm"
VERBS: dict[str, tuple[str, ...]] = {DELETIONS: (*READ, KEEP, POSTPONE, CANCEL), REVIEWS: (*READ, CONFIRM)}

READER = "jobttl-reader"
OPERATOR = "jobttl-console-operator"
ROLES: dict[str, dict[str, tuple[str, ...]]] = {
    READER: {DELETIONS: READ, REVIEWS: READ},
    OPERATOR: VERBS,
}


def cluster_role(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The ClusterRole `name` of ROLES, as a manifest."""
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata,
        "rules": [
            {"apiGroups": [GROUP], "resources": [resource], "verbs": list(verbs)}
            for resource, verbs in ROLES[name].items()
        ],
    }
