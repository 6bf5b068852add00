"""The job kinds jobttl knows, each declared once.

A kind says where its objects live in the API (group, version, plural) and how to read
them: how to tell it is finished and how it ended (succeeded or failed), when it finished,
where the object carries its own time-to-live, if anywhere, and what makes it someone
else's for now or for good (another controller named in managedBy, suspension, Argo's
archiving), read the way that kind's own controller reads it. Everything else in jobttl
works from these declarations, so supporting a new kind is one new `JobKind`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

SUCCEEDED = "succeeded"
FAILED = "failed"


@dataclass(frozen=True)
class Finish:
    """How and when a job ended. `time` is None when the object gives no readable time."""

    outcome: str  # SUCCEEDED or FAILED
    reason: str  # what said so: the condition type or phase, e.g. "Complete", "Error"
    time: int | None
    field: str | None = None  # where `time` was read, e.g. "status.completionTime"


@dataclass(frozen=True)
class OwnTTL:
    """A TTL the object itself asks for, and the field it was read from."""

    value: Any  # unvalidated: users write all sorts of things
    field: str


def get_path(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def parse_time(value: Any) -> int | None:
    """RFC 3339 (as the API server writes it) to whole epoch seconds; None if unreadable.

    Whole seconds because Kubernetes timestamps have second precision and RQ's scheduler
    keys on whole seconds: a fractional due time would fire up to a second early.
    """
    if not isinstance(value, str):
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


def finished_by_conditions(succeeded: tuple[str, ...], failed: tuple[str, ...],
                           completion_time: tuple[str, ...] | None = None) -> Callable[[dict], Finish | None]:
    """Finished when one of the given condition types is "True".

    The finish time is `completion_time` when set, else that condition's lastTransitionTime
    (completionTime can be missing, e.g. when a training job is evicted or fails early).
    """
    def finish(obj: dict) -> Finish | None:
        conditions = get_path(obj, ("status", "conditions"))
        for condition in conditions if isinstance(conditions, list) else ():
            if not isinstance(condition, dict) or condition.get("status") != "True":
                continue
            kind = condition.get("type")
            if kind in succeeded or kind in failed:
                time = parse_time(get_path(obj, completion_time)) if completion_time else None
                field = ".".join(completion_time) if time is not None else None
                if time is None:
                    time = parse_time(condition.get("lastTransitionTime"))
                    field = f"status.conditions[{kind}].lastTransitionTime" if time is not None else None
                return Finish(SUCCEEDED if kind in succeeded else FAILED, kind, time, field)
        return None
    return finish


def finished_by_phase(succeeded: tuple[str, ...], failed: tuple[str, ...],
                      finished_at: tuple[str, ...]) -> Callable[[dict], Finish | None]:
    """Finished when status.phase is one of the given phases (Argo Workflows)."""
    def finish(obj: dict) -> Finish | None:
        phase = get_path(obj, ("status", "phase"))
        if phase in succeeded or phase in failed:
            time = parse_time(get_path(obj, finished_at))
            return Finish(SUCCEEDED if phase in succeeded else FAILED, phase, time,
                          ".".join(finished_at) if time is not None else None)
        return None
    return finish


def ttl_at(*paths: tuple[str, ...]) -> Callable[[dict, Finish], OwnTTL | None]:
    """The object's TTL is at the first of `paths` that is set."""
    def own_ttl(obj: dict, finish: Finish) -> OwnTTL | None:
        for path in paths:
            value = get_path(obj, path)
            if value is not None:
                return OwnTTL(value, ".".join(path))
        return None
    return own_ttl


def no_ttl_field(obj: dict, finish: Finish) -> None:
    return None


# Argo's TTL for each phase it has one for: `Status.Successful()` is phase Succeeded and
# `Status.Failed()` is phase Failed only (pkg/apis/workflow/v1alpha1/workflow_types.go), so an
# Error workflow gets neither: only secondsAfterCompletion.
ARGO_OUTCOME_TTL = {"Succeeded": "secondsAfterSuccess", "Failed": "secondsAfterFailure"}
ARGO_TTL_STRATEGIES = (("spec", "ttlStrategy"), ("status", "storedWorkflowTemplateSpec", "ttlStrategy"))
ARGO_ARCHIVING_LABEL = "workflows.argoproj.io/workflow-archiving-status"


def argo_ttl_strategy(obj: dict, finish: Finish) -> OwnTTL | None:
    """Argo's own choice, exactly (workflow/gccontroller/gc_controller.go `ttl`, workflow_types.go
    `GetTTLStrategy`): the workflow's spec.ttlStrategy if it has one, else the one the controller
    stored from its WorkflowTemplate (whole: a strategy is never merged field by field here); then
    the phase's own TTL, else secondsAfterCompletion."""
    path = next((p for p in ARGO_TTL_STRATEGIES if get_path(obj, p) is not None), None)
    if path is None:
        return None
    strategy, where = get_path(obj, path), ".".join(path)
    if not isinstance(strategy, dict):
        return OwnTTL(strategy, where)  # judged invalid, rather than read as "no TTL"
    for key in (ARGO_OUTCOME_TTL.get(finish.reason), "secondsAfterCompletion"):
        if key and strategy.get(key) is not None:
            return OwnTTL(strategy[key], f"{where}.{key}")
    return None


def no_hold(obj: dict) -> None:
    return None


def argo_archiving(obj: dict) -> str | None:
    """Argo's GC waits while the archive has not taken the workflow (workflow/common/util.go `IsDone`)."""
    labels = get_path(obj, ("metadata", "labels"))
    if isinstance(labels, dict) and labels.get(ARGO_ARCHIVING_LABEL) == "Pending":
        return f"label {ARGO_ARCHIVING_LABEL} is Pending: Argo has not archived it yet, and its GC waits for that too"
    return None


@dataclass(frozen=True)
class Field:
    """A value read from an object, and where from (for reasons that name the field)."""

    field: str
    value: Any


@dataclass(frozen=True)
class JobKind:
    group: str
    version: str
    kind: str
    plural: str
    finish: Callable[[dict], Finish | None]
    own_ttl: Callable[[dict, Finish], OwnTTL | None]
    # The object's own TTL is enforced by a controller built into Kubernetes (batch/v1 Job):
    # jobttl leaves such objects alone rather than race it.
    builtin_ttl_controller: bool = False
    # The label its controller puts on the job's pods, valued with the job's name.
    pod_label: str | None = None
    # Where the object names the controller that runs it, and the names that mean the kind's own
    # controller (the one whose TTL jobttl stands in for). Anything else, "" included, is another
    # controller's job (e.g. Kueue's MultiKueue): upstream skips it entirely, TTL included.
    managed_by: tuple[str, ...] | None = None
    own_controllers: tuple[str, ...] = ()
    # Where the object says it is suspended: its controller does not expire it while it is.
    suspend: tuple[str, ...] | None = None
    # A kind's own "not yet" for a finished job (Argo's archiving): why, or None.
    hold: Callable[[dict], str | None] = no_hold
    # Deleting the pods of a *finished* job before the job is safe: its controller creates no
    # pods for a finished job, and the pods are owned (controller ownerReference) by the job
    # itself. Only then may the policy's podTTL delete them first (jobttl.core.stages).
    pod_cleanup_safe: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """The name RBAC and API errors use, e.g. ``tfjobs.kubeflow.org``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def external_manager(self, obj: dict) -> Field | None:
        """The managedBy value naming another controller, or None when the kind's own runs it."""
        if self.managed_by is None:
            return None
        value = get_path(obj, self.managed_by)
        if value is None or value in self.own_controllers:
            return None
        return Field(".".join(self.managed_by), value)

    def suspended(self, obj: dict) -> Field | None:
        """The suspend field when it is set. Anything but absent or false counts: unsure means keep."""
        value = get_path(obj, self.suspend) if self.suspend else None
        return None if value in (None, False) else Field(".".join(self.suspend), value)

    def path(self, namespace: str, name: str) -> str:
        """The object's API path, as Knative puts it in an event's ``subject``."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{prefix}/namespaces/{namespace}/{self.plural}/{name}"


# Kubeflow training-operator v1 (pkg/util/status.go: finished = Succeeded or Failed true).
# The TTL moved into runPolicy in v1.2; older objects still carry it at spec level. Its
# CleanupJob skips a suspended job (pkg/controller.v1/common/job.go), and each controller skips
# a job whose runPolicy.managedBy is not its own name (KubeflowJobsController).
_training_operator_finish = finished_by_conditions(("Succeeded",), ("Failed",), ("status", "completionTime"))
_run_policy_ttl = ttl_at(("spec", "runPolicy", "ttlSecondsAfterFinished"), ("spec", "ttlSecondsAfterFinished"))
_RUN_POLICY_MANAGED_BY = ("spec", "runPolicy", "managedBy")
_RUN_POLICY_SUSPEND = ("spec", "runPolicy", "suspend")


def _training_operator(kind: str, plural: str, version: str = "v1",
                       controller: str = "kubeflow.org/training-operator") -> JobKind:
    # Pod cleanup is safe: for a Succeeded or Failed job the operator's ReconcileJobs only cleans
    # up (by runPolicy.cleanPodPolicy) and updates the status; it never creates pods again
    # (training-operator pkg/controller.v1/common/job.go; mpi-operator's v2beta1 controller
    # likewise returns once the MPIJob is finished). Its launcher pod belongs to a batch Job,
    # not the MPIJob, so the controller-reference check leaves it alone.
    return JobKind("kubeflow.org", version, kind, plural, _training_operator_finish, _run_policy_ttl,
                   pod_label="training.kubeflow.org/job-name", managed_by=_RUN_POLICY_MANAGED_BY,
                   own_controllers=(controller,), suspend=_RUN_POLICY_SUSPEND, pod_cleanup_safe=True)


TFJOB = _training_operator("TFJob", "tfjobs")
PYTORCHJOB = _training_operator("PyTorchJob", "pytorchjobs")
MPIJOB = _training_operator("MPIJob", "mpijobs")
XGBOOSTJOB = _training_operator("XGBoostJob", "xgboostjobs")
PADDLEJOB = _training_operator("PaddleJob", "paddlejobs")
JAXJOB = _training_operator("JAXJob", "jaxjobs")
# mpi-operator's v2beta1 MPIJob: the training operator's runPolicy and conditions, its own
# controller name (pkg/apis/kubeflow/v2beta1/types.go KubeflowJobController). Upstream only
# copies the TTL onto the launcher Job; jobttl deletes the MPIJob itself (see the README).
MPIJOB_V2BETA1 = _training_operator("MPIJob", "mpijobs", version="v2beta1", controller="kubeflow.org/mpi-operator")

# Kubeflow Trainer v2: Complete/Failed conditions, no completionTime, and no TTL field at
# all (kubeflow/trainer #2899, #4052): only the policy and annotations can expire it.
# spec.managedBy (pkg/util/trainjob/trainjob.go TrainJobControllerName) and spec.suspend. No pod
# cleanup: its pods belong to the batch Jobs of its JobSet, not to the TrainJob, so no pod
# has a controller reference to it (the JobSet's own TTL is the tool for those).
TRAINJOB = JobKind("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs",
                   finished_by_conditions(("Complete",), ("Failed",)), no_ttl_field,
                   pod_label="jobset.sigs.k8s.io/jobset-name", managed_by=("spec", "managedBy"),
                   own_controllers=("trainer.kubeflow.org/trainjob-controller",), suspend=("spec", "suspend"))

# batch/v1 Job: a Job that sets spec.ttlSecondsAfterFinished is cleaned up by Kubernetes'
# own TTL-after-finished controller; jobttl only applies policy to the others, and only to
# those the built-in Job controller runs (batch/v1 JobControllerName; KEP-4368). Pod cleanup is
# safe: the Job controller's syncJob returns early for a finished Job ("if job was finished
# previously, we don't want to redo the termination", pkg/controller/job/job_controller.go),
# so deleted pods are not replaced, and the Job's status keeps its counts.
BATCH_JOB = JobKind("batch", "v1", "Job", "jobs", finished_by_conditions(("Complete",), ("Failed",)),
                    ttl_at(("spec", "ttlSecondsAfterFinished")), builtin_ttl_controller=True,
                    pod_label="batch.kubernetes.io/job-name", managed_by=("spec", "managedBy"),
                    own_controllers=("kubernetes.io/job-controller",), pod_cleanup_safe=True)

# Argo Workflows: finished by phase, finish time in status.finishedAt. For the policy an Error
# is a failure (it did not succeed); its own ttlStrategy follows Argo exactly (argo_ttl_strategy).
# Pod cleanup is safe: Argo's own podGC (strategy OnWorkflowCompletion) deletes the pods of
# completed workflows, and the controller does not run a completed workflow's steps again.
WORKFLOW = JobKind("argoproj.io", "v1alpha1", "Workflow", "workflows",
                   finished_by_phase(("Succeeded",), ("Failed", "Error"), ("status", "finishedAt")),
                   argo_ttl_strategy, pod_label="workflows.argoproj.io/workflow", hold=argo_archiving,
                   pod_cleanup_safe=True)

ALL_KINDS: tuple[JobKind, ...] = (TFJOB, PYTORCHJOB, MPIJOB, XGBOOSTJOB, PADDLEJOB, JAXJOB, MPIJOB_V2BETA1,
                                  TRAINJOB, BATCH_JOB, WORKFLOW)


class KindRegistry:
    """The enabled kinds, looked up the ways events and tasks name them."""

    def __init__(self, kinds: tuple[JobKind, ...] = ALL_KINDS):
        self.kinds = kinds
        self._by_api_kind = {(k.api_version, k.kind): k for k in kinds}

    def get(self, api_version: str, kind: str) -> JobKind | None:
        return self._by_api_kind.get((api_version, kind))
