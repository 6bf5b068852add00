"""Resource registrations: which kinds the emulated API server serves.

A kind is served by registering one :class:`Resource`; routing, discovery,
storage, OpenAPI documents, Table columns and error messages are all derived
from it, the way kube-apiserver derives them from a CustomResourceDefinition
(group, version, names, scope, the ``status`` subresource, printer columns and
the OpenAPI v3 schema). :func:`jobttl_emulator.crds.load_crds` builds them from
real CRD YAML files.

The core group (``group=""``) is served under ``/api/v1``, every other group
under ``/apis/<group>/<version>``.

A plain ``Resource(...)`` gets custom-resource semantics (see ``store.py``).
The constants :data:`JOB`, :data:`POD`, :data:`EVENT`, :data:`NAMESPACE` and :data:`CONFIG_MAP`
are *built-in* kinds instead (``builtin=True``): they accept strategic merge
patches, print the columns kube-apiserver's built-in printers print, carry
hand-written minimal schemas (``builtin_schemas.py``), and batch/v1 Jobs
orphan their pods when deleted without a propagation policy, as the real
``DefaultGarbageCollectionPolicy`` of batch/v1 does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import builtin_schemas


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
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    # Built-in kind: strategic merge patch accepted, built-in printer columns.
    builtin: bool = False
    # The propagation a DELETE without one gets (rest.GarbageCollectionPolicy).
    default_propagation: str = "Background"
    # Field selectors beyond metadata.name and metadata.namespace (JSON paths without the leading dot).
    selectable_fields: tuple[str, ...] = ()
    # Serve <name>/log (pods).
    log_subresource: bool = False
    # DELETE answers with the deleted object rather than a Success Status (pods).
    return_deleted: bool = False
    # The OpenAPI v3 schema of the objects (a CRD's openAPIV3Schema); None: accept anything.
    schema: dict | None = field(default=None, compare=False, hash=False, repr=False)
    # A CRD version's additionalPrinterColumns.
    printer_columns: tuple[dict, ...] = field(default=(), compare=False, hash=False, repr=False)
    # Served read-only: writes are refused (405), as the emulator cannot act on them (CRDs).
    read_only: bool = False
    # The CustomResourceDefinition this kind was read from (crds.py): served at
    # /apis/apiextensions.k8s.io/v1/customresourcedefinitions.
    crd: dict | None = field(default=None, compare=False, hash=False, repr=False)

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

    @property
    def path_prefix(self) -> str:
        """``/apis/<group>/<version>``, or ``/api/v1`` for core."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


def qualify(name: str, group: str) -> str:
    """``name.group`` as kube-apiserver prints GroupResource/GroupKind in messages."""
    return f"{name}.{group}" if group else name


TFJOB = Resource("kubeflow.org", "v1", "TFJob", "tfjobs")

DEFAULT_RESOURCES: tuple[Resource, ...] = (TFJOB,)

JOB = Resource(
    "batch",
    "v1",
    "Job",
    "jobs",
    categories=("all",),
    builtin=True,
    default_propagation="Orphan",
    selectable_fields=("status.successful",),
    schema=builtin_schemas.JOB,
)
POD = Resource(
    "",
    "v1",
    "Pod",
    "pods",
    short_names=("po",),
    categories=("all",),
    builtin=True,
    log_subresource=True,
    return_deleted=True,
    selectable_fields=(
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    schema=builtin_schemas.POD,
)
EVENT = Resource(
    "",
    "v1",
    "Event",
    "events",
    status_subresource=False,
    short_names=("ev",),
    builtin=True,
    selectable_fields=(
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    schema=builtin_schemas.EVENT,
)
NAMESPACE = Resource(
    "",
    "v1",
    "Namespace",
    "namespaces",
    namespaced=False,
    short_names=("ns",),
    builtin=True,
    selectable_fields=("status.phase",),
    schema=builtin_schemas.NAMESPACE,
)

# The CustomResourceDefinitions of the kinds served from CRD files, as kube-apiserver serves them
# (status subresource, short names crd/crds, category api-extensions). Registered only when some
# kind came from a CRD; read-only: a CRD posted here would define nothing.
CUSTOM_RESOURCE_DEFINITION = Resource(
    "apiextensions.k8s.io",
    "v1",
    "CustomResourceDefinition",
    "customresourcedefinitions",
    short_names=("crd", "crds"),
    categories=("api-extensions",),
    namespaced=False,
    builtin=True,
    read_only=True,
)

CONFIG_MAP = Resource(
    "",
    "v1",
    "ConfigMap",
    "configmaps",
    status_subresource=False,
    short_names=("cm",),
    builtin=True,
    schema=builtin_schemas.CONFIG_MAP,
)


# Printer columns (`kubectl get`) as the real CRDs declare them; kube-apiserver serves a CRD
# version's additionalPrinterColumns, and the Age column alone when it declares none. They are
# written out here, not read from the CRD files, so that the command serves them on any checkout;
# tests/emulator/test_emulator_kinds.py compares them with the CRDs in ../shared/reference.
STATE = {"jsonPath": ".status.conditions[-1:].type", "name": "State", "type": "string"}
AGE = {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"}
# kubeflow/training-operator v1.9.0 (6f74c7f6b2ed6c27aabd82d0a316b23f0646059c),
# manifests/base/crds/kubeflow.org_{tfjobs,pytorchjobs,xgboostjobs,paddlejobs,jaxjobs}.yaml; and
# kubeflow/trainer v2.3.0 (658725bdae5c7e3a0854d93ac6ff492e109a22ab),
# manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml.
STATE_AGE = (STATE, AGE)
# training-operator v1.9.0, manifests/base/crds/kubeflow.org_mpijobs.yaml: its MPIJob v1 lists
# Age first.
AGE_STATE = (AGE, STATE)
# argoproj/argo-workflows f016ad89eb269d282aec06dc491c29f396a38df4,
# manifests/base/crds/minimal/argoproj.io_workflows.yaml (the full CRD declares the same).
WORKFLOW_COLUMNS = (
    {"description": "Status of the workflow", "jsonPath": ".status.phase", "name": "Status", "type": "string"},
    {
        "description": "When the workflow was started",
        "format": "date-time",
        "jsonPath": ".status.startedAt",
        "name": "Age",
        "type": "date",
    },
    {
        "description": "Human readable message indicating details about why the workflow is in this condition.",
        "jsonPath": ".status.message",
        "name": "Message",
        "type": "string",
    },
)


def _kubeflow(kind: str, columns: tuple[dict, ...], version: str = "v1") -> Resource:
    return Resource("kubeflow.org", version, kind, kind.lower() + "s", printer_columns=columns)


def _columns(*columns: tuple) -> tuple[dict, ...]:
    """(name, jsonPath, type[, priority]) as a CRD's additionalPrinterColumns."""
    return tuple(
        {"name": c[0], "jsonPath": c[1], "type": c[2], **({"priority": c[3]} if len(c) > 3 else {})} for c in columns
    )


_CREATED = (".metadata.creationTimestamp", "date")
_SUCCEEDED = '.status.conditions[?(@.type=="Succeeded")]'
# The columns of the CRDs in ../shared/reference/{rayjob,jobset,volcano,spark,tekton}/ (each README
# names its upstream file and commit); tests/emulator/test_new_kinds.py compares them.
NEW_KINDS: tuple[Resource, ...] = (
    Resource(
        "ray.io",
        "v1",
        "RayJob",
        "rayjobs",
        singular="rayjob",
        categories=("all",),
        printer_columns=_columns(
            ("job status", ".status.jobStatus", "string"),
            ("deployment status", ".status.jobDeploymentStatus", "string"),
            ("ray cluster name", ".status.rayClusterName", "string"),
            ("start time", ".status.startTime", "string"),
            ("end time", ".status.endTime", "string"),
            ("age", *_CREATED),
        ),
    ),
    Resource(
        "jobset.x-k8s.io",
        "v1alpha2",
        "JobSet",
        "jobsets",
        singular="jobset",
        printer_columns=_columns(
            ("TerminalState", ".status.terminalState", "string"),
            ("Restarts", ".status.restarts", "string"),
            ("Completed", '.status.conditions[?(@.type=="Completed")].status', "string"),
            ("Suspended", ".spec.suspend", "string"),
            ("Age", *_CREATED),
        ),
    ),
    Resource(
        "batch.volcano.sh",
        "v1alpha1",
        "Job",
        "jobs",
        singular="job",
        short_names=("vcjob", "vj"),
        printer_columns=_columns(
            ("STATUS", ".status.state.phase", "string"),
            ("minAvailable", ".status.minAvailable", "integer"),
            ("RUNNINGS", ".status.running", "integer"),
            ("AGE", *_CREATED),
            ("QUEUE", ".spec.queue", "string", 1),
        ),
    ),
    Resource(
        "sparkoperator.k8s.io",
        "v1beta2",
        "SparkApplication",
        "sparkapplications",
        singular="sparkapplication",
        short_names=("sparkapp",),
        printer_columns=_columns(
            ("Suspend", ".spec.suspend", "boolean"),
            ("Status", ".status.applicationState.state", "string"),
            ("Attempts", ".status.executionAttempts", "string"),
            ("Start", ".status.lastSubmissionAttemptTime", "string"),
            ("Finish", ".status.terminationTime", "string"),
            ("Age", *_CREATED),
        ),
    ),
    *(
        Resource(
            "tekton.dev",
            "v1",
            kind,
            kind.lower() + "s",
            singular=kind.lower(),
            short_names=short,
            categories=("tekton", "tekton-pipelines"),
            printer_columns=_columns(
                ("Succeeded", f"{_SUCCEEDED}.status", "string"),
                ("Reason", f"{_SUCCEEDED}.reason", "string"),
                ("StartTime", ".status.startTime", "date"),
                ("CompletionTime", ".status.completionTime", "date"),
            ),
        )
        for kind, short in (("PipelineRun", ("pr", "prs")), ("TaskRun", ("tr", "trs")))
    ),
)


# What a cluster running jobttl typically serves: the job kinds' CRDs installed (Kubeflow's
# training operator and mpi-operator, Trainer, Argo), batch Jobs, their pods, core Events and
# Namespaces, each with its CRD's names and printer columns (not its schema: such a kind accepts
# any field). The emulator's command serves these unless told otherwise; `--crd` files replace
# the registration of the kind they define.
WELL_KNOWN: tuple[Resource, ...] = (
    *(_kubeflow(k, STATE_AGE) for k in ("TFJob", "PyTorchJob")),
    _kubeflow("MPIJob", AGE_STATE),
    *(_kubeflow(k, STATE_AGE) for k in ("XGBoostJob", "PaddleJob", "JAXJob")),
    # kubeflow/mpi-operator v0.8.0 (101db144e019e1de65aaded07745e9d805c2852a),
    # manifests/base/kubeflow.org_mpijobs.yaml declares no printer columns: Age alone.
    _kubeflow("MPIJob", (), "v2beta1"),
    Resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs", printer_columns=STATE_AGE),
    JOB,
    Resource(
        "argoproj.io",
        "v1alpha1",
        "Workflow",
        "workflows",
        status_subresource=False,
        short_names=("wf",),
        printer_columns=WORKFLOW_COLUMNS,
    ),
    # The kinds built in since (jobttl's core/domain/kinds/kinds.yaml), registered as their upstream CRDs do
    # (names, short names, categories, the status subresource; tests/emulator/test_new_kinds.py
    # checks each against the CRD in ../shared/reference/ where that is present). `--crd` serves
    # the real CRD, schema and printer columns included.
    *NEW_KINDS,
    EVENT,
    POD,
    NAMESPACE,
    CONFIG_MAP,  # jobttl's install record (jobttl.core.services.install)
)
