"""What a job kind is: `JobKind`, and the primitives it reads objects with.

A kind says where its objects live in the API (group, version, plural) and how to read
them: how to tell it is finished and how it ended (succeeded or failed), when it finished,
where the object carries its own time-to-live, if anywhere, and whether its own controller
applies it, and what makes it someone else's for now or for good (another controller named in
managedBy, suspension, Argo's archiving), read the way that kind's own controller reads it.
Everything else in jobttl works from these `JobKind`s.

The built-in kinds are declarations in ``kinds.yaml`` beside this file, the single source of
truth; an operator declares more in the policy (``kindDeclarations``). Both are validated
against ``kinds.schema.json`` and compiled once into `JobKind`s by `jobttl.core.domain.kinds.declarations`;
`jobttl.core.domain.kinds.registry` holds the built-in ones and how kinds are named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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


class DeclarationFault(Exception):
    """Reading an object through its kind's declaration failed by the declaration's fault (its CEL
    TTL expression erred, ran over its cost, or gave no TTL): the policy's error, not the object's.
    The object is kept and the error reported against the declaration (decision.Verdict.POLICY_ERROR)."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def get_path(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


# --- reading what a declaration names, type-checked where it is read --------------------------------
# An API server keeps only what a CRD's schema allows, but a forged event, a CRD that keeps unknown
# fields or a declaration reading the wrong path can put anything there: a condition whose type is
# an object, conditions that are a map, a time that is a number. Such a field is not "absent" (that
# could delete a job whose suspend, owner or finish jobttl misread): the object cannot be decided,
# and decide() says so (Verdict.UNREADABLE): the sink refuses the event (422), the resync and the
# worker keep the object, with the field named.


class UnreadableField(ValueError):
    """A field a declaration reads holds what that reading cannot take; the message names it."""

    def __init__(self, field: str, expected: str, value: Any):
        self.field = field
        super().__init__(f"{field}: expected {expected}, got {json_type(value)}")


def json_type(value: Any) -> str:
    """What a JSON value is, in words (never its text: it may be huge, or nested past any repr)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    for kind, words in ((dict, "an object"), (list, "a list"), (str, "a string"), ((int, float), "a number")):
        if isinstance(value, kind):
            return words
    return "null" if value is None else type(value).__name__


def read_path(obj: Any, path: tuple[str, ...]) -> Any:
    """`get_path`, but a step through something that is there and is not a mapping is unreadable (a
    declaration's path goes through objects only; ``spec.runPolicy`` as a list is no runPolicy)."""
    node = obj
    for key in path:  # the hot path of every decision: plain look-ups, the error worked out apart
        if isinstance(node, dict):
            node = node.get(key)
        elif node is None:
            return None
        else:
            raise _not_an_object(obj, path)
    return node


def _not_an_object(obj: Any, path: tuple[str, ...]) -> UnreadableField:
    """The error for the first step of `path` that meets something not a mapping."""
    for i, key in enumerate(path):
        if not isinstance(obj, dict):
            return UnreadableField(".".join(path[:i]), "an object", obj)
        obj = obj.get(key)
    raise AssertionError("every step was a mapping")


def read_text(obj: Any, path: tuple[str, ...], field: str | None = None) -> str | None:
    """The string at `path`, None when absent or null; anything else is unreadable."""
    value = read_path(obj, path)
    if value is not None and not isinstance(value, str):
        raise UnreadableField(field or ".".join(path), "a string", value)
    return value


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


def no_ttl_field(obj: dict[str, Any], finish: Finish) -> None:
    return None


def no_hold(obj: dict[str, Any]) -> None:
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
    finish: Callable[[dict[str, Any]], Finish | None]
    own_ttl: Callable[[dict[str, Any], Finish], OwnTTL | None]
    # The object's own TTL is applied by the kind's own controller (batch/v1 Job: Kubernetes'
    # TTL-after-finished controller; JobSet, Spark, Volcano: their operators): jobttl leaves such
    # objects alone rather than race it. `ttl_controller` names it in reasons; `ttl_not_applied_for`
    # are the finishing states it never collects (Volcano's Aborted): there jobttl applies the TTL.
    builtin_ttl_controller: bool = False
    ttl_controller: str = "Kubernetes' TTL-after-finished controller"
    ttl_not_applied_for: tuple[str, ...] = ()
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
    hold: Callable[[dict[str, Any]], str | None] = no_hold
    # Deleting the pods of a *finished* job before the job is safe: its controller creates no
    # pods for a finished job, and the pods are owned (controller ownerReference) by the job
    # itself. Only then may the policy's podTTL delete them first (jobttl.core.domain.decisions.stages).
    pod_cleanup_safe: bool = False
    # The opt-in finishing states this kind counts because the policy's optIn names them.
    opted_in: tuple[str, ...] = ()
    # The declaration it was compiled from, where (``policy.yaml: kindDeclarations[0]``), and
    # whether it is a built-in one (kinds.yaml): the worker checks its paths against the kind's
    # CRD at start (jobttl.core.domain.kinds.crdcheck), strictly for the operator's own declarations.
    declaration: Any = field(default=None, compare=False, repr=False)
    declared_in: str = field(default="", compare=False, repr=False)
    builtin: bool = field(default=False, compare=False, repr=False)
    # The fields (ttl, managedBy, suspend, notYet) an operator's declaration replacing a built-in
    # kind took from the built-in one (`declarations.replacing`): checked against the CRD as built-in ones are.
    inherited: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def ttl_left_to_controller(self, finish: Finish) -> bool:
        """Whether the object's own TTL, when set, is its own controller's to apply (not jobttl's)."""
        return self.builtin_ttl_controller and finish.reason not in self.ttl_not_applied_for

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """The name RBAC and API errors use, e.g. ``tfjobs.kubeflow.org``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def crd(self) -> str | None:
        """The CustomResourceDefinition that defines this kind (``tfjobs.kubeflow.org``), or None for
        Kubernetes' own groups (batch): a CRD's group needs a dot (apiextensions' validation)."""
        return f"{self.plural}.{self.group}" if "." in self.group else None

    def external_manager(self, obj: dict[str, Any]) -> Field | None:
        """The managedBy value naming another controller, or None when the kind's own runs it."""
        if self.managed_by is None:
            return None
        value = read_text(obj, self.managed_by)
        if value is None or value in self.own_controllers:
            return None
        return Field(".".join(self.managed_by), value)

    def suspended(self, obj: dict[str, Any]) -> Field | None:
        """The suspend field when it is set. Anything but absent or false counts: unsure means keep."""
        value = read_path(obj, self.suspend) if self.suspend else None
        return None if value in (None, False) else Field(".".join(self.suspend), value)

    def path(self, namespace: str, name: str) -> str:
        """The object's API path, as Knative puts it in an event's ``subject``."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{prefix}/namespaces/{namespace}/{self.plural}/{name}"
