"""Talking to the Kubernetes API server: read a job, delete a job, classify failures.

One `KubeClient` (and so one connection pool) per process. Failures are sorted into the
three ways the caller must react: the object is gone, retry later, or stop and tell a human.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from jobttl.config import ConfigError
from jobttl.metrics import Metrics
from worker.kinds import JobKind


class ObjectGone(Exception):
    """404: the object does not exist (any more)."""


class Conflict(Exception):
    """409: a precondition (UID or resourceVersion) no longer matches; re-read and decide again."""


class ListExpired(Exception):
    """410 on a paginated LIST: the continue token is too old; restart the list."""


class TransientApiError(Exception):
    """The API server is unreachable, overloaded or failing; worth retrying with backoff."""


class PermanentApiError(Exception):
    """Retrying will not help (no permission, invalid request); a human must act."""


def load_api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """The standard loaders: an explicit KUBECONFIG, else the in-cluster service account, else ~/.kube/config."""
    configuration = client.Configuration()
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)
            return client.ApiClient(configuration)
        except config.ConfigException:
            pass  # not in a pod: fall through to ~/.kube/config
    try:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    except (config.ConfigException, OSError, ValueError) as exc:
        where = kubeconfig or "~/.kube/config"
        raise ConfigError(f"KUBECONFIG: cannot load Kubernetes credentials from {where} "
                          f"(and not running in a pod): {exc}") from exc
    return client.ApiClient(configuration)


def _status_message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body).get("message") or exc.reason
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def _translate(exc: ApiException, verb: str, kind: JobKind, namespace: str) -> Exception:
    status = exc.status or 0
    message = _status_message(exc)
    if status == 404:
        return ObjectGone(message)
    if status == 409:
        return Conflict(message)
    if status in (401, 403):
        return PermanentApiError(
            f"{status} from the API server: jobttl needs '{verb}' on {kind.resource} "
            f"in namespace {namespace!r}; grant it to jobttl's service account ({message})"
        )
    if status == 429 or status >= 500:
        return TransientApiError(f"{status} from the API server on {verb} {kind.resource}: {message}")
    return PermanentApiError(f"{status} from the API server on {verb} {kind.resource}: {message}")


# The API verbs each jobttl component uses on every enabled job kind. KubeClient refuses
# any other verb, so this table is the truth the RBAC manifests in knative/ are tested against.
PERMISSIONS: dict[str, frozenset[str]] = {
    "sink": frozenset({"get"}),  # Reference-mode events: read the object named
    "worker": frozenset({"get", "list", "delete"}),  # re-read, resync, delete
    "watch": frozenset({"get", "list", "watch"}),  # the event source
}


class KubeClient:
    """Reads and deletes job objects for one component, within its declared permissions."""

    def __init__(self, api_client: client.ApiClient, timeout: int = 30, component: str = "worker",
                 metrics: Metrics | None = None):
        self.api = client.CustomObjectsApi(api_client)
        self.timeout = timeout
        self.verbs = PERMISSIONS[component]
        self.component = component
        self.metrics = metrics

    def _check(self, verb: str) -> contextlib.AbstractContextManager:
        """Refuse undeclared verbs; time the request that follows."""
        if verb not in self.verbs:
            raise AssertionError(f"the {self.component} does not declare '{verb}' in worker.kube.PERMISSIONS")
        if self.metrics is None:
            return contextlib.nullcontext()
        return self.metrics.api_latency.labels(verb).time()

    def get(self, kind: JobKind, namespace: str, name: str) -> dict[str, Any]:
        try:
            with self._check("get"):
                return self.api.get_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name, _request_timeout=self.timeout
                )
        except ApiException as exc:
            raise _translate(exc, "get", kind, namespace) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise TransientApiError(f"cannot reach the API server to get {kind.resource}: {exc}") from exc

    def list_page(self, kind: JobKind, limit: int, token: str | None = None,
                  namespace: str | None = None) -> dict[str, Any]:
        """One page of a paginated LIST, across all namespaces unless one is given."""
        kwargs: dict[str, Any] = {"limit": limit, "_request_timeout": self.timeout}
        if token:
            kwargs["_continue"] = token
        try:
            with self._check("list"):
                if namespace is None:
                    return self.api.list_cluster_custom_object(kind.group, kind.version, kind.plural, **kwargs)
                return self.api.list_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural,
                                                              **kwargs)
        except ApiException as exc:
            if exc.status == 410:
                raise ListExpired(_status_message(exc)) from exc
            raise _translate(exc, "list", kind, namespace or "(all)") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise TransientApiError(f"cannot reach the API server to list {kind.resource}: {exc}") from exc

    def delete(
        self, kind: JobKind, namespace: str, name: str, uid: str, resource_version: str, propagation_policy: str
    ) -> dict[str, Any]:
        """DELETE guarded by the UID and resourceVersion we decided on.

        The UID precondition makes the API server refuse if the name now belongs to a
        re-created object; the resourceVersion one refuses if the object changed (say, its
        TTL was extended) between our read and this delete.
        """
        body = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=uid, resource_version=resource_version),
            propagation_policy=propagation_policy,
        )
        try:
            with self._check("delete"):
                return self.api.delete_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name, body=body, _request_timeout=self.timeout
                )
        except ApiException as exc:
            raise _translate(exc, "delete", kind, namespace) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise TransientApiError(f"cannot reach the API server to delete {kind.resource}: {exc}") from exc
