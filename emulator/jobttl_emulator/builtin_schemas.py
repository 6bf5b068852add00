"""Hand-written minimal OpenAPI v3 schemas of the built-in kinds the emulator serves.

Just enough for kubectl: ``explain`` finds the commonly used fields, client-side
``apply`` computes strategic merge patches (the ``x-kubernetes-patch-*``
extensions of lists such as ``containers``), and the emulator's own strategic
merge patch reads the same extensions. Everything else is accepted through
``x-kubernetes-preserve-unknown-fields``, so nothing a real server would take
is rejected. Field names, types and patch strategies follow the Kubernetes API
reference; descriptions are ours and short.
"""

from __future__ import annotations

from typing import Any


def obj(description: str = "", open_: bool = False, **properties: Any) -> dict:
    """An object schema; ``open_``: unknown fields are kept."""
    schema: dict[str, Any] = {"type": "object"}
    if description:
        schema["description"] = description
    if properties:
        schema["properties"] = properties
    if open_ or not properties:
        schema["x-kubernetes-preserve-unknown-fields"] = True
    return schema


def string(description: str = "", fmt: str = "") -> dict:
    schema: dict[str, Any] = {"type": "string"}
    if fmt:
        schema["format"] = fmt
    if description:
        schema["description"] = description
    return schema


def integer(description: str = "") -> dict:
    schema: dict[str, Any] = {"type": "integer", "format": "int32"}
    if description:
        schema["description"] = description
    return schema


def boolean(description: str = "") -> dict:
    return {"type": "boolean", "description": description} if description else {"type": "boolean"}


def string_map(description: str = "") -> dict:
    schema: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
    if description:
        schema["description"] = description
    return schema


def array(items: dict, description: str = "", merge_key: str = "", strategy: str = "") -> dict:
    """A list; ``merge_key``/``strategy``: its strategic-merge-patch extensions."""
    schema: dict[str, Any] = {"type": "array", "items": items}
    if description:
        schema["description"] = description
    if merge_key:
        schema["x-kubernetes-patch-merge-key"] = merge_key
        schema["x-kubernetes-list-type"] = "map"
        schema["x-kubernetes-list-map-keys"] = [merge_key]
    if strategy:
        schema["x-kubernetes-patch-strategy"] = strategy
    return schema


def time_(description: str) -> dict:
    return string(description, "date-time")


def strings(**descriptions: str) -> dict[str, dict]:
    """String properties from their descriptions."""
    return {name: string(text) for name, text in descriptions.items()}


OWNER_REFERENCE = obj(
    "Identifies an owning object; dependents are garbage-collected when all their owners are gone.",
    **strings(
        apiVersion="API version of the referent.",
        kind="Kind of the referent.",
        name="Name of the referent.",
        uid="UID of the referent.",
    ),
    controller=boolean("If true, this reference points to the managing controller."),
    blockOwnerDeletion=boolean("If true, the owner cannot be deleted in the foreground until this dependent is gone."),
)
OWNER_REFERENCE["required"] = ["apiVersion", "kind", "name", "uid"]

OBJECT_META = obj(
    "Standard object's metadata.",
    **strings(
        name="Name must be unique within a namespace.",
        generateName="Prefix the server uses to generate a unique name if name is not provided.",
        namespace="The namespace the object belongs to; empty for cluster-scoped objects.",
        uid="Unique in time and space for this object; set by the server.",
        resourceVersion="Opaque version of this object, for optimistic concurrency and watches.",
    ),
    generation=integer("A sequence number of the desired state; set by the server."),
    creationTimestamp=time_("When this object was created; set by the server."),
    deletionTimestamp=time_("When this object will be deleted; set by the server when deletion is requested."),
    deletionGracePeriodSeconds=integer("Seconds allowed for the object to terminate gracefully."),
    labels=string_map("Map of string keys and values to organize and select objects."),
    annotations=string_map("Unstructured key value map for arbitrary metadata."),
    finalizers=dict(
        array(string(), "Must be empty before the object is deleted from the registry.", strategy="merge"),
        **{"x-kubernetes-list-type": "set"},
    ),
    ownerReferences=array(OWNER_REFERENCE, "Objects this object depends on.", merge_key="uid", strategy="merge"),
    managedFields=array(obj(), "Which managers own which fields (server-side apply)."),
)
LIST_META = obj(
    "Standard list metadata.",
    resourceVersion=string("The resourceVersion the list was read at."),
    _continue=string("Token to fetch the next page."),
    remainingItemCount=integer("Items left after this page, when known."),
)
LIST_META["properties"]["continue"] = LIST_META["properties"].pop("_continue")

CONDITIONS = array(
    obj(
        type=string("Type of the condition."),
        status=string("True, False or Unknown."),
        reason=string("Machine-readable reason for the last transition."),
        message=string("Human-readable details."),
        lastTransitionTime=time_("Last time the condition changed status."),
        lastProbeTime=time_("Last time the condition was checked."),
        open_=True,
    ),
    "The latest observations of the object's state.",
    merge_key="type",
    strategy="merge",
)

CONTAINER = obj(
    "A single application container.",
    name=string("Name of the container, unique in the pod."),
    image=string("Container image name."),
    command=array(string(), "Entrypoint array."),
    args=array(string(), "Arguments to the entrypoint."),
    env=array(
        obj(name=string(), value=string(), valueFrom=obj(), open_=True),
        "Environment variables.",
        merge_key="name",
        strategy="merge",
    ),
    ports=array(
        obj(containerPort=integer(), name=string(), protocol=string(), open_=True),
        "Ports to expose.",
        merge_key="containerPort",
        strategy="merge",
    ),
    resources=obj("Compute resources required by this container."),
    volumeMounts=array(
        obj(name=string(), mountPath=string(), open_=True), "Volumes to mount.", merge_key="mountPath", strategy="merge"
    ),
    open_=True,
)
CONTAINER["required"] = ["name"]

POD_SPEC = obj(
    "Specification of the desired behavior of the pod.",
    containers=array(CONTAINER, "Containers belonging to the pod.", merge_key="name", strategy="merge"),
    initContainers=array(CONTAINER, "Containers run before the app containers.", merge_key="name", strategy="merge"),
    restartPolicy=string("Always, OnFailure or Never."),
    nodeName=string("The node the pod is scheduled onto."),
    schedulerName=string("The scheduler that dispatches the pod."),
    serviceAccountName=string("The service account the pod runs as."),
    volumes=array(
        obj(name=string(), open_=True),
        "Volumes that containers may mount.",
        merge_key="name",
        strategy="merge,retainKeys",
    ),
    open_=True,
)
CONTAINER_STATUS = obj(
    name=string(),
    ready=boolean(),
    restartCount=integer(),
    image=string(),
    started=boolean(),
    state=obj("Current state: waiting, running or terminated."),
    lastState=obj("The previous container instance's termination state."),
    open_=True,
)
POD_STATUS = obj(
    "Most recently observed status of the pod.",
    phase=string("Pending, Running, Succeeded, Failed or Unknown."),
    conditions=CONDITIONS,
    containerStatuses=array(CONTAINER_STATUS, "Statuses of the app containers."),
    initContainerStatuses=array(CONTAINER_STATUS, "Statuses of the init containers."),
    podIP=string("IP address allocated to the pod."),
    startTime=time_("When the kubelet acknowledged the pod."),
    reason=string("Why the pod is in this state."),
    message=string("Details about why the pod is in this state."),
    open_=True,
)


def _kind(description: str, **properties: Any) -> dict:
    """A top-level kind: apiVersion, kind and metadata plus ``properties``."""
    return obj(
        description,
        apiVersion=string("APIVersion defines the versioned schema of this representation of an object."),
        kind=string("Kind is a string value representing the REST resource this object represents."),
        metadata=OBJECT_META,
        **properties,
    )


POD = _kind("Pod is a collection of containers that can run on a host.", spec=POD_SPEC, status=POD_STATUS)

JOB = _kind(
    "Job represents the configuration of a single job.",
    spec=obj(
        "Specification of the desired behavior of a job.",
        parallelism=integer("Maximum desired number of pods running at any given time."),
        completions=integer("Desired number of successfully finished pods."),
        backoffLimit=integer("Number of retries before marking this job failed."),
        activeDeadlineSeconds=integer("Duration in seconds the job may be active before the system terminates it."),
        ttlSecondsAfterFinished=integer("Seconds after the job finishes before it is eligible for deletion."),
        suspend=boolean("Whether the Job controller should create pods."),
        selector=obj("A label query over pods."),
        template=obj("Describes the pod that will be created.", metadata=OBJECT_META, spec=POD_SPEC, open_=True),
        open_=True,
    ),
    status=obj(
        "Current status of a job.",
        conditions=CONDITIONS,
        startTime=time_("When the job controller started processing the job."),
        completionTime=time_("When the job was completed."),
        active=integer("Number of pending and running pods."),
        succeeded=integer("Number of pods which reached phase Succeeded."),
        failed=integer("Number of pods which reached phase Failed."),
        ready=integer("Number of active pods with a Ready condition."),
        open_=True,
    ),
)

EVENT = _kind(
    "Event is a report of an event somewhere in the cluster.",
    involvedObject=obj(
        "The object this event is about.",
        kind=string(),
        namespace=string(),
        name=string(),
        uid=string(),
        apiVersion=string(),
        resourceVersion=string(),
        fieldPath=string(),
        open_=True,
    ),
    reason=string("Short, machine understandable string of why the transition happened."),
    message=string("A human-readable description of the status of this operation."),
    type=string("Normal or Warning."),
    source=obj("The component reporting this event.", component=string(), host=string(), open_=True),
    firstTimestamp=time_("The time at which the event was first recorded."),
    lastTimestamp=time_("The time at which the most recent occurrence of this event was recorded."),
    eventTime=string("Time when this Event was first observed (MicroTime).", "date-time"),
    count=integer("The number of times this event has occurred."),
    reportingComponent=string("Name of the controller that emitted this Event."),
    reportingInstance=string("ID of the controller instance."),
    action=string("What action was taken/failed regarding the involved object."),
    series=obj("Data about the Event series this event represents."),
    related=obj("Optional secondary object for more complex actions."),
)

NAMESPACE = _kind(
    "Namespace provides a scope for Names.",
    spec=obj(
        "Spec defines the behavior of the Namespace.",
        finalizers=array(string(), "What must be done before the namespace is removed from storage."),
    ),
    status=obj(
        "Status describes the current status of a Namespace.",
        phase=string("Active or Terminating."),
        conditions=CONDITIONS,
        open_=True,
    ),
)

CONFIG_MAP = _kind(
    "ConfigMap holds configuration data for pods to consume.",
    data=string_map("Configuration data: keys of [-._a-zA-Z0-9]+, string values."),
    binaryData=string_map("Binary data, base64-encoded."),
    immutable=boolean("If true, only metadata can be modified."),
)

SELF_SUBJECT_ACCESS_REVIEW = _kind(
    "SelfSubjectAccessReview checks whether the current user can perform an action.",
    spec=obj(
        "What is being checked.",
        resourceAttributes=obj(
            namespace=string(),
            verb=string(),
            group=string(),
            version=string(),
            resource=string(),
            subresource=string(),
            name=string(),
            open_=True,
        ),
        nonResourceAttributes=obj(path=string(), verb=string()),
    ),
    status=obj(
        "Whether the request is allowed.",
        allowed=boolean(),
        denied=boolean(),
        reason=string(),
        evaluationError=string(),
    ),
)

STATUS = obj(
    "Status is a return value for calls that don't return other objects.",
    apiVersion=string(),
    kind=string(),
    metadata=LIST_META,
    status=string("Success or Failure."),
    message=string(),
    reason=string(),
    details=obj(),
    code=integer(),
)
DELETE_OPTIONS = obj(
    "DeleteOptions may be provided when deleting an API object.",
    apiVersion=string(),
    kind=string(),
    gracePeriodSeconds=integer(),
    propagationPolicy=string("Orphan, Background or Foreground."),
    orphanDependents=boolean(),
    preconditions=obj(uid=string(), resourceVersion=string()),
    dryRun=array(string()),
)
