"""Resource registrations: which kinds the emulated API server serves.

A kind is served by registering one :class:`Resource`; routing, discovery,
storage and error messages are all derived from it, the way kube-apiserver
derives them from a CustomResourceDefinition (group, version, names, scope and
the ``status`` subresource). Everything served is namespaced, like the
Kubeflow, Argo and batch kinds jobttl cleans up.

The core group (``group=""``) is served under ``/api/v1``, every other group
under ``/apis/<group>/<version>``, so e.g. core ``events`` later is
``Resource("", "v1", "Event", "events", status_subresource=False)``.

Every kind gets custom-resource semantics (see ``store.py``). Built-in kinds
such as batch/v1 Job differ from that in ways not emulated: their decoder
defaults a missing ``kind``, they accept strategic merge patches, and Jobs
default to orphaning their pods on delete.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    singular: str = ""
    list_kind: str = ""
    # The Kubeflow CRDs declare `subresources: {status: {}}`; Argo's Workflow
    # CRD does not (status is then written through the main resource).
    status_subresource: bool = True

    def __post_init__(self) -> None:
        if not self.singular:
            object.__setattr__(self, "singular", self.kind.lower())
        if not self.list_kind:
            object.__setattr__(self, "list_kind", self.kind + "List")

    @property
    def api_version(self) -> str:
        """The objects' ``apiVersion``: ``group/version``, or just ``v1`` for core."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """GroupResource.String(): ``tfjobs.kubeflow.org``, or just ``events`` for core."""
        return qualify(self.plural, self.group)


def qualify(name: str, group: str) -> str:
    """``name.group`` as kube-apiserver prints GroupResource/GroupKind in messages."""
    return f"{name}.{group}" if group else name


TFJOB = Resource("kubeflow.org", "v1", "TFJob", "tfjobs")

DEFAULT_RESOURCES: tuple[Resource, ...] = (TFJOB,)


def _kubeflow(kind: str, version: str = "v1") -> Resource:
    return Resource("kubeflow.org", version, kind, kind.lower() + "s")


# What a cluster running jobttl typically serves: the job kinds' CRDs installed (Kubeflow's
# training operator and mpi-operator, Trainer, Argo), batch Jobs, and core Events. The
# emulator's command serves these unless told otherwise.
WELL_KNOWN: tuple[Resource, ...] = (
    *(_kubeflow(k) for k in ("TFJob", "PyTorchJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")),
    _kubeflow("MPIJob", "v2beta1"),
    Resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"),
    Resource("batch", "v1", "Job", "jobs"),
    Resource("argoproj.io", "v1alpha1", "Workflow", "workflows", status_subresource=False),
    Resource("", "v1", "Event", "events", status_subresource=False),
)
