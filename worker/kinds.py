"""The job kinds jobttl knows, each declared once.

A kind says where its objects live in the API (group, version, plural) and how to read
them: which conditions mean "finished", where the finish time is, and where the object
carries its own time-to-live. Everything else in jobttl works from these declarations,
so supporting a new kind is one new `JobKind`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobKind:
    group: str
    version: str
    kind: str
    plural: str
    # Condition types that, with status "True", mean the job will not run again.
    finished_conditions: tuple[str, ...]
    # Paths (tuples of keys) to the object's own TTL in seconds, first match wins.
    ttl_paths: tuple[tuple[str, ...], ...]
    # Path to an explicit finish time; when absent, the finishing condition's
    # lastTransitionTime is used instead.
    completion_time_path: tuple[str, ...] | None = ("status", "completionTime")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """The name RBAC and API errors use, e.g. ``tfjobs.kubeflow.org``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str, name: str) -> str:
        """The object's API path, as Knative puts it in an event's ``subject``."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{prefix}/namespaces/{namespace}/{self.plural}/{name}"


# Kubeflow training-operator v1 (pkg/util/status.go: IsFinished = Succeeded or Failed true).
# The TTL moved into runPolicy in v1.2; older objects still carry it at spec level.
TFJOB = JobKind(
    group="kubeflow.org",
    version="v1",
    kind="TFJob",
    plural="tfjobs",
    finished_conditions=("Succeeded", "Failed"),
    ttl_paths=(("spec", "runPolicy", "ttlSecondsAfterFinished"), ("spec", "ttlSecondsAfterFinished")),
)

ALL_KINDS: tuple[JobKind, ...] = (TFJOB,)


class KindRegistry:
    """The enabled kinds, looked up the ways events and tasks name them."""

    def __init__(self, kinds: tuple[JobKind, ...] = ALL_KINDS):
        self.kinds = kinds
        self._by_api_kind = {(k.api_version, k.kind): k for k in kinds}

    def get(self, api_version: str, kind: str) -> JobKind | None:
        return self._by_api_kind.get((api_version, kind))
