"""``Table`` responses (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``), as kubectl get asks.

Columns come from where kube-apiserver takes them: a CRD version's
``additionalPrinterColumns`` (apiextensions-apiserver ``tableconvertor``, a
``Name`` column first, then each column's JSONPath evaluated with the subset
of client-go's jsonpath described at :func:`jsonpath`; no columns means the
default ``Age``), and the built-in printers of ``pkg/printers/internalversion``
for Jobs, Pods, Events and Namespaces (always with the wide columns, as the
server generates them; kubectl hides those with priority > 0).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from .resources import Resource

_NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a "
    "client to request the generation of an appropriate name automatically. Name is primarily intended for creation "
    "idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed "
    "to be set in happens-before order across separate operations. Clients may not set this value. It is represented "
    "in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
DEFAULT_COLUMNS = ({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},)
INCLUDE_OBJECT = ("", "Metadata", "Object", "None")


# ---------------------------------------------------------------------------
# Time


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """``duration.HumanDuration`` of k8s.io/apimachinery."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes, hours = whole // 60, whole // 3600
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def since(value: Any, unknown: str = "<unknown>") -> str:
    """``translateTimestampSince``: how long ago, or ``<unknown>`` for no time."""
    when = parse_time(value)
    if when is None:
        return unknown
    return human_duration((datetime.now(timezone.utc) - when).total_seconds())


def _between(start: Any, end: Any) -> str:
    first, last = parse_time(start), parse_time(end)
    return "" if first is None or last is None else human_duration((last - first).total_seconds())


# ---------------------------------------------------------------------------
# JSONPath (the subset printer columns use)

_TOKEN = re.compile(r"\.\.|\.([A-Za-z0-9_-]+|\*)|\[([^\]]*)\]")
_FILTER = re.compile(r"\?\(@((?:\.[A-Za-z0-9_-]+)+)\s*(==|!=)\s*(?:\"([^\"]*)\"|'([^']*)'|(\S+))\)")


def jsonpath(data: Any, path: str) -> list[Any]:
    """Evaluate a printer column's JSONPath: ``.a.b``, ``['a']``, ``[0]``, ``[-1:]``, ``[1:3]``,
    ``[*]``/``.*`` and filters ``[?(@.type=="Ready")]``. Missing keys give no result (AllowMissingKeys)."""
    values, position = [data], 0
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    while position < len(path):
        match = _TOKEN.match(path, position)
        if match is None or match.group(0) == "..":
            raise ValueError(f"unsupported JSONPath {path!r}")
        position = match.end()
        values = [out for value in values for out in _step(value, match.group(1), match.group(2))]
    return values


def _step(value: Any, field: str | None, bracket: str | None) -> list[Any]:
    if field is not None:
        if field == "*":
            return list(value.values()) if isinstance(value, dict) else list(value) if isinstance(value, list) else []
        return [value[field]] if isinstance(value, dict) and field in value else []
    assert bracket is not None
    bracket = bracket.strip()
    if bracket.startswith("?"):
        return _filter(value, bracket)
    if bracket == "*":
        return _step(value, "*", None)
    if bracket[:1] in ("'", '"'):
        return _step(value, bracket[1:-1], None)
    if not isinstance(value, list):
        return []
    if ":" in bracket:
        start, _, end = bracket.partition(":")
        return value[int(start) if start else None : int(end) if end else None]
    index = int(bracket)
    return [value[index]] if -len(value) <= index < len(value) else []


def _filter(value: Any, bracket: str) -> list[Any]:
    match = _FILTER.fullmatch(bracket)
    if match is None or not isinstance(value, list):
        return []
    fields, op = match.group(1)[1:].split("."), match.group(2)
    wanted = next(g for g in match.groups()[2:] if g is not None)
    selected = []
    for item in value:
        found: Any = item
        for field in fields:
            found = found.get(field) if isinstance(found, dict) else None
        text = _text(found) if found is not None else None
        if (text == wanted) == (op == "=="):
            selected.append(item)
    return selected


def _text(value: Any) -> str:
    """jsonpath ``PrintResults`` of one value: JSON for maps and lists, else its text."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _cell(column: dict, obj: dict) -> Any:
    """``tableconvertor``'s cell: the first result, converted to the column's type (None when absent)."""
    try:
        results = jsonpath(obj, column.get("jsonPath", ""))
    except (ValueError, TypeError):
        return None
    if not results or results[0] is None:
        return None
    value, kind = results[0], column.get("type")
    if kind == "string":
        return _text(value)
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        return since(value, "<invalid>")
    return None


# ---------------------------------------------------------------------------
# Printers


def column(name: str, kind: str = "string", description: str = "", priority: int = 0, fmt: str = "") -> dict:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


NAME_COLUMN = column("Name", fmt="name", description=_NAME_DESCRIPTION)
AGE_COLUMN = column("Age", description=_AGE_DESCRIPTION)


def _containers(obj: dict) -> tuple[str, str]:
    """``layoutContainerCells`` of a pod template: names and images."""
    containers = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return ",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)


def _selector(selector: Any) -> str:
    """``metav1.FormatLabelSelector``."""
    if not isinstance(selector, dict):
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, values = expr.get("operator"), ",".join(sorted(expr.get("values") or []))
        key = expr.get("key", "")
        parts.append(
            {
                "In": f"{key} in ({values})",
                "NotIn": f"{key} notin ({values})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }.get(op, f"{key} {op}")
        )
    return ",".join(parts) or "<none>"


def _condition_true(conditions: Any, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions or [] if isinstance(c, dict))


def _job_row(job: dict) -> list:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = status.get("succeeded") or 0
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif (spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    duration = ""
    if status.get("startTime"):
        duration = _between(status["startTime"], status.get("completionTime") or datetime.now(timezone.utc).isoformat())
    conditions = status.get("conditions")
    state = next(
        (
            label
            for kind, label in (("Complete", "Complete"), ("Failed", "Failed"))
            if _condition_true(conditions, kind)
        ),
        "",
    )
    if not state:
        if job["metadata"].get("deletionTimestamp"):
            state = "Terminating"
        else:
            state = next((k for k in ("Suspended", "FailureTarget") if _condition_true(conditions, k)), "Running")
    names, images = _containers(job)
    return [
        job["metadata"]["name"],
        state,
        completions,
        duration,
        since(job["metadata"].get("creationTimestamp")),
        names,
        images,
        _selector(spec.get("selector")),
    ]


def _init_reason(statuses: list, init_total: int) -> str | None:
    """The Init:... reason of a pod still initializing, or None."""
    for index, cs in enumerate(statuses):
        state = cs.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode", 0) == 0:
            continue
        if terminated:
            if terminated.get("reason"):
                return "Init:" + terminated["reason"]
            signal = terminated.get("signal")
            return f"Init:Signal:{signal}" if signal else f"Init:ExitCode:{terminated.get('exitCode', 0)}"
        if waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            return "Init:" + waiting["reason"]
        return f"Init:{index}/{init_total}"
    return None


def _pod_row(pod: dict) -> list:
    """``printPod``, without restartable init containers and readiness gates."""
    spec, status, meta = pod.get("spec") or {}, pod.get("status") or {}, pod["metadata"]
    reason = status.get("reason") or status.get("phase") or ""
    init_statuses = status.get("initContainerStatuses") or []
    restarts = sum(cs.get("restartCount") or 0 for cs in init_statuses)
    ready = 0
    last_restart = None
    init_reason = _init_reason(init_statuses, len(spec.get("initContainers") or []))
    if init_reason is not None and not _condition_true(status.get("conditions"), "Initialized"):
        reason = init_reason
    else:
        restarts, running = 0, False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += cs.get("restartCount") or 0
            finished = parse_time(((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))
            if finished and (last_restart is None or finished > last_restart):
                last_restart = finished
            state = cs.get("state") or {}
            waiting, terminated = state.get("waiting") or {}, state.get("terminated")
            if waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated is not None and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated is not None:
                reason = (
                    f"Signal:{terminated['signal']}"
                    if terminated.get("signal")
                    else f"ExitCode:{terminated.get('exitCode', 0)}"
                )
            elif cs.get("ready") and state.get("running") is not None:
                running, ready = True, ready + 1
        if reason == "Completed" and running:
            reason = "Running" if _condition_true(status.get("conditions"), "Ready") else "NotReady"
    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and status.get("phase") not in ("Succeeded", "Failed"):
        reason = "Terminating"
    restarts_text = str(restarts)
    if restarts and last_restart is not None:
        restarts_text = f"{restarts} ({since(last_restart.isoformat())} ago)"
    pod_ip = ((status.get("podIPs") or [{}])[0]).get("ip") or status.get("podIP") or "<none>"
    return [
        meta["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        restarts_text,
        since(meta.get("creationTimestamp")),
        pod_ip,
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


def _event_row(event: dict) -> list:
    first = since(event.get("firstTimestamp")) if event.get("firstTimestamp") else since(event.get("eventTime"))
    last = since(event["lastTimestamp"]) if event.get("lastTimestamp") else first
    count = event.get("count") or 1
    if isinstance(event.get("series"), dict):
        last, count = since(event["series"].get("lastObservedTime")), event["series"].get("count") or count
    involved = event.get("involvedObject") or {}
    kind = (involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = event.get("source") or {}
    origin = source.get("component") or event.get("reportingComponent") or ""
    host = source.get("host") or event.get("reportingInstance") or ""
    origin = f"{origin}, {host}" if origin and host else origin or host
    return [
        last,
        event.get("type", ""),
        event.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        origin,
        (event.get("message") or "").strip(),
        first,
        int(count),
        event["metadata"]["name"],
    ]


def _namespace_row(namespace: dict) -> list:
    return [
        namespace["metadata"]["name"],
        (namespace.get("status") or {}).get("phase", ""),
        since(namespace["metadata"].get("creationTimestamp")),
    ]


_BUILTIN: dict[str, tuple[list[dict], Callable[[dict], list]]] = {
    "batch/Job": (
        [
            NAME_COLUMN,
            column("Status", description="Status of the job."),
            column("Completions", description="The number of pods which reached phase Succeeded."),
            column("Duration", description="Time required to complete the job."),
            AGE_COLUMN,
            column("Containers", priority=1, description="Names of each container in the template."),
            column("Images", priority=1, description="Images referenced by each container in the template."),
            column("Selector", priority=1, description="A label query over pods that should match the pod count."),
        ],
        _job_row,
    ),
    "/Pod": (
        [
            NAME_COLUMN,
            column("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
            column("Status", description="The aggregate status of the containers in this pod."),
            column(
                "Restarts",
                description="The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            AGE_COLUMN,
            column("IP", priority=1, description="IP address allocated to the pod."),
            column("Node", priority=1, description="The node the pod is scheduled onto."),
            column("Nominated Node", priority=1, description="The node the scheduler intends to place the pod on."),
            column("Readiness Gates", priority=1, description="Extra conditions evaluated for pod readiness."),
        ],
        _pod_row,
    ),
    "/Event": (
        [
            column("Last Seen", description="The time at which the most recent occurrence of this event was recorded."),
            column("Type", description="Type of this event (Normal, Warning)."),
            column("Reason", description="The reason for the transition into the object's current status."),
            column("Object", description="The object that this event is about."),
            column("Subobject", priority=1, description="The field of the involved object the event is about."),
            column("Source", priority=1, description="The component reporting this event."),
            column("Message", description="A human-readable description of the status of this operation."),
            column("First Seen", priority=1, description="The time at which the event was first recorded."),
            column("Count", priority=1, description="The number of times this event has occurred."),
            dict(NAME_COLUMN, priority=1),
        ],
        _event_row,
    ),
    "/Namespace": (
        [NAME_COLUMN, column("Status", description="The status of the namespace"), AGE_COLUMN],
        _namespace_row,
    ),
    # apiextensions-apiserver has no printer for CRDs: rest.DefaultTableConvertor's two columns.
    "apiextensions.k8s.io/CustomResourceDefinition": (
        [NAME_COLUMN, column("Created At", "date", description=_AGE_DESCRIPTION)],
        lambda crd: [crd["metadata"]["name"], crd["metadata"].get("creationTimestamp")],
    ),
}


def _printer(res: Resource) -> tuple[list[dict], Callable[[dict], list]]:
    """Column definitions and the row function for ``res``."""
    if res.builtin and f"{res.group}/{res.kind}" in _BUILTIN:
        return _BUILTIN[f"{res.group}/{res.kind}"]
    columns = res.printer_columns or DEFAULT_COLUMNS
    definitions = [NAME_COLUMN] + [
        column(
            c["name"],
            c.get("type", "string"),
            c.get("description") or f"Custom resource definition column (in JSONPath format): {c.get('jsonPath', '')}",
            c.get("priority", 0),
            c.get("format", ""),
        )
        for c in columns
    ]
    if columns is DEFAULT_COLUMNS:
        definitions[1]["description"] = _AGE_DESCRIPTION
    return definitions, lambda obj: [obj["metadata"]["name"], *(_cell(c, obj) for c in columns)]


def _row_object(obj: dict, include: str, meta_version: str) -> dict | None:
    if include == "Object":
        return obj
    if include == "None":
        return None
    return {"kind": "PartialObjectMetadata", "apiVersion": meta_version, "metadata": obj["metadata"]}


def to_table(
    res: Resource, body: dict, include: str = "", meta_version: str = "meta.k8s.io/v1", headers: bool = True
) -> dict:
    """The Table for an object or a list of ``res``."""
    definitions, row = _printer(res)
    if "items" in body:
        items = body["items"]
        metadata = {
            k: v for k, v in body["metadata"].items() if k in ("resourceVersion", "continue", "remainingItemCount")
        }
    else:
        items, metadata = [body], {"resourceVersion": body["metadata"].get("resourceVersion", "")}
    return {
        "kind": "Table",
        "apiVersion": meta_version,
        "metadata": metadata,
        "columnDefinitions": definitions if headers else [],
        "rows": [{"cells": row(obj), "object": _row_object(obj, include, meta_version)} for obj in items],
    }
