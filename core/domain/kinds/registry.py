"""The built-in kinds (``kinds.yaml``, compiled by `jobttl.core.domain.kinds.declarations`), and how a kind
is named: in keys and metric labels, to people, to kubectl, in an operator's ``--kind``.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobttl.core.domain.kinds.declarations import builtin_kinds
from jobttl.core.domain.kinds.model import JobKind

# --- the built-in kinds: kinds.yaml ----------------------------------------------------------------

_BUILTIN = builtin_kinds()

TFJOB = _BUILTIN["kubeflow.org/v1/TFJob"]
PYTORCHJOB = _BUILTIN["kubeflow.org/v1/PyTorchJob"]
MPIJOB = _BUILTIN["kubeflow.org/v1/MPIJob"]
XGBOOSTJOB = _BUILTIN["kubeflow.org/v1/XGBoostJob"]
PADDLEJOB = _BUILTIN["kubeflow.org/v1/PaddleJob"]
JAXJOB = _BUILTIN["kubeflow.org/v1/JAXJob"]
MPIJOB_V2BETA1 = _BUILTIN["kubeflow.org/v2beta1/MPIJob"]
TRAINJOB = _BUILTIN["trainer.kubeflow.org/v1alpha1/TrainJob"]
BATCH_JOB = _BUILTIN["batch/v1/Job"]
WORKFLOW = _BUILTIN["argoproj.io/v1alpha1/Workflow"]

# The kinds jobttl was first written for (Kubeflow, Argo, batch/v1): what a policy enables unless
# its `kinds` says otherwise (with the kinds it declares or opts into).
ALL_KINDS: tuple[JobKind, ...] = (
    TFJOB,
    PYTORCHJOB,
    MPIJOB,
    XGBOOSTJOB,
    PADDLEJOB,
    JAXJOB,
    MPIJOB_V2BETA1,
    TRAINJOB,
    BATCH_JOB,
    WORKFLOW,
)
# Why not every built-in kind by default: an upgrade must not start deleting kinds it left alone
# before (finished Tekton runs, RayJobs... under an existing policy `ttl:`), and a cluster's event
# source should watch only kinds it serves. The others are a `kinds:` entry away.
DEFAULT_KINDS = ALL_KINDS
# Every built-in kind, in kinds.yaml's order: what a policy's `kinds` may name.
BUILTIN_KINDS: tuple[JobKind, ...] = tuple(_BUILTIN.values())
_DEFAULT_NAMES = frozenset((k.api_version, k.kind) for k in DEFAULT_KINDS)


def bare_kind(name: str, known: Iterable[JobKind]) -> list[JobKind]:
    """The kinds a bare Kind name (``Job``, ``MPIJob``) names among `known`: those of that name
    enabled by default (``Job`` is batch/v1's, as it was before Volcano's Job was built in), else
    every one of that name. The one reading of a bare Kind: the policy's `kinds` enables these, and
    a kind is shown by its Kind alone only where the Kind names it (`shown_kind`). By apiVersion/Kind:
    an operator's declaration replacing a default kind is that default kind."""
    named = [k for k in known if k.kind == name]
    return [k for k in named if (k.api_version, k.kind) in _DEFAULT_NAMES] or named


# The groups a bare Kind names among the built-in kinds (`bare_kind`): one, for every Kind today.
_BARE: dict[str, frozenset[str]] = {
    name: frozenset(k.group for k in bare_kind(name, BUILTIN_KINDS))
    for name in dict.fromkeys(k.kind for k in BUILTIN_KINDS)
}


# --- naming a kind: what keys, metric labels and operators' words use -------------------------------
# A Kind name alone is not an identity: batch/v1 Job and Volcano's batch.volcano.sh Job are both
# `Job`, and an operator may declare a kind reusing any name. Keys and metric labels use the group
# too; what people read names the group only where the Kind alone would mislead.


def group_of(api_version: str) -> str:
    """The API group of an apiVersion: ``batch`` of ``batch/v1``, "" (the core group) of ``v1``."""
    return api_version.rpartition("/")[0]


def group_kind(api_version: str, kind: str) -> str:
    """``Kind.group`` (``Job.batch.volcano.sh``; ``Job`` alone in the core group): Kubernetes'
    GroupKind spelling, one per kind whatever the version. A Kind has no dot, so it splits back."""
    group = group_of(api_version)
    return f"{kind}.{group}" if group else kind


def split_group_kind(text: str) -> tuple[str, str]:
    """(kind, group) of a `group_kind`."""
    kind, _, group = text.partition(".")
    return kind, group


def shown_kind(api_version: str, kind: str) -> str:
    """How a kind is named to people: its Kind, or ``Kind.group`` when a bare Kind names another kind
    (the policy's reading of a bare Kind: the default kinds first, e.g. ``Job`` is batch/v1's, so
    Volcano's is ``Job.batch.volcano.sh``). Without an apiVersion: the Kind as it is."""
    return shown_in_group(group_of(api_version), kind) if api_version else kind


def shown_in_group(group: str, kind: str) -> str:
    """`shown_kind` of the kind `kind` of API group `group`."""
    meant = _BARE.get(kind)
    # The Kind alone where it names this group's kind and no other group's (`bare_kind`).
    return kind if meant is None or meant == {group} else f"{kind}.{group}" if group else kind


def parse_named(wanted: str) -> tuple[str | None, str]:
    """(group, Kind) of an operator's ``--kind``: ``apiVersion/Kind`` (any version), ``Kind.group``,
    or a bare Kind (group None: the Kind names what it names, `bare_kind`)."""
    if "/" in wanted:
        api_version, _, kind = wanted.rpartition("/")
        return group_of(api_version), kind
    if "." in wanted:
        kind, group = split_group_kind(wanted)
        return group, kind
    return None, wanted


def kubectl_resource(api_version: str, kind: str) -> str:
    """What kubectl takes to name the kind, as it is shown: ``tfjob``, ``job`` (batch/v1's, as for
    kubectl) and ``job.batch.volcano.sh``; a kind not built in always with its group
    (``widget.widgets.example.com``): kubectl would pick one of several CRDs of that Kind by itself.
    Without an apiVersion: the Kind."""
    return _kubectl(group_of(api_version) if api_version else None, kind)


def kubectl_resource_named(wanted: str) -> str:
    """What kubectl takes for an operator's ``--kind`` (`parse_named`): ``Job.batch.volcano.sh`` is
    ``job.batch.volcano.sh``, ``kubeflow.org/v1/TFJob`` ``tfjob``, a bare Kind the Kind."""
    return _kubectl(*parse_named(wanted))


def _kubectl(group: str | None, kind: str) -> str:
    if group is None:
        return kind.lower()
    if kind not in _BARE and group:
        return f"{kind}.{group}".lower()
    return shown_in_group(group, kind).lower()


def kind_named(wanted: str, group: str | None, kind: str) -> bool:
    """Whether an operator's ``--kind`` names the kind `kind` of API group `group`: as it is shown
    (``Job`` is batch/v1's, ``Job.batch.volcano.sh``), as ``Kind.group``, or as ``apiVersion/Kind``
    (any version: a cluster serves one). With no group known (None: not recorded) only a bare
    Kind can match."""
    if group is None:
        return wanted == kind
    wanted_group, wanted_kind = parse_named(wanted)
    if wanted_kind != kind:
        return False
    return shown_in_group(group, kind) == kind if wanted_group is None else wanted_group == group


class KindRegistry:
    """The enabled kinds, looked up the ways events and tasks name them."""

    def __init__(self, kinds: tuple[JobKind, ...] | None = None):
        kinds = BUILTIN_KINDS if kinds is None else kinds
        self.kinds = kinds
        self._by_api_kind = {(k.api_version, k.kind): k for k in kinds}

    def get(self, api_version: str, kind: str) -> JobKind | None:
        return self._by_api_kind.get((api_version, kind))
