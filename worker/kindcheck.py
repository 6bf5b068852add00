"""At the worker's start: the enabled kinds' declared paths checked against the cluster's CRDs.

For each enabled kind a CRD defines, the worker reads that CustomResourceDefinition once
(``GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/<plural>.<group>``) and checks
every path its declaration reads against the schema of the version jobttl uses
(`jobttl.core.domain.kinds.crdcheck`). What it finds:

- a path of the operator's own declaration (``kindDeclarations``) that names nothing, or the wrong
  thing: a configuration error naming the declaration's field, the path, the kind and the nearest
  field names. The worker stops before it deletes anything (a ``managedBy`` or ``suspend`` path
  that reads nothing would delete what it must leave alone);
- the same in a built-in declaration (``core/domain/kinds/kinds.yaml``): the cluster runs another version of
  that operator than jobttl was written for. A warning (``kind-fields-absent``): the operator
  cannot fix kinds.yaml, but can redeclare the kind;
- no CRD (404: not installed, or served by an aggregated API), batch/v1 (Kubernetes' own): nothing
  to check. A kind not served is reported by the resync as before (``jobttl_kind_not_served``);
- a CRD that does not serve the kind's version: the same, said once (a warning for a declared kind);
- a CRD that prunes nothing (``spec.preserveUnknownFields: true``, from apiextensions v1beta1) or
  gives the version no schema: any path may be there, so none is refused; the ``kinds-checked`` line
  names it (``unchecked``), and every path is unverified (below);
- a path the schema cannot follow to its end (preserved unknown fields, a map of anything): not
  refused, but ``unverified``, never verified: a warning (``kind-unverified``, ``reason: schema``)
  for the operator's own declaration, the ``kinds-checked`` line's ``unverified`` for built-in ones;
- a path a replacing declaration inherited from the built-in one: held as the built-in's (a
  warning, never a stop: the operator did not write it);
- RBAC refusing the read (403), or an API server not answering: one warning naming what was not
  checked (and the rule to grant); the worker goes on, as it did before the check existed.

The check is bounded so that a hanging API server cannot hold the worker's start past its
startup probe: each read gives up after ``min(JOBTTL_API_TIMEOUT, READ_TIMEOUT)`` (tried once by
the transport: `KubeClient.single_tries`), is tried ``ATTEMPTS`` times, and the whole check
stops reading after ``BUDGET`` seconds (what is left is named not checked).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobttl.core.domain.kinds import crdcheck
from jobttl.core.runtime import logs
from jobttl.core.runtime.config import ConfigError
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.kube.client import KubeClient, PermanentApiError, TransientApiError, Undecodable
from jobttl.core.domain.deploy.permissions import CRDS, permissions
from jobttl.core.domain.deploy.manifests import crd_rules

log = logging.getLogger("jobttl.worker")

ATTEMPTS = 2  # reads of one CRD while the API server does not answer, PAUSE apart
PAUSE = 1.0
READ_TIMEOUT = 5.0  # seconds per read at most (JOBTTL_API_TIMEOUT when shorter): a CRD is one small GET
BUDGET = 15.0  # seconds for the whole check at most: the chart's startup probe allows the worker 120


@dataclass
class Report:
    verified: list[str] = field(default_factory=list)  # apiVersion/Kind whose paths were all found
    no_crd: list[str] = field(default_factory=list)
    not_served: list[tuple[JobKind, tuple[str, ...]]] = field(default_factory=list)  # and the versions served
    errors: list[str] = field(default_factory=list)  # the operator's declarations: configuration errors
    absent: list[tuple[JobKind, list[crdcheck.Problem]]] = field(default_factory=list)  # built-in declarations
    forbidden: list[str] = field(default_factory=list)  # CRDs RBAC would not let it read
    unreadable: dict[str, str] = field(default_factory=dict)  # CRD -> why (API down, undecodable)
    unchecked: dict[str, str] = field(default_factory=dict)  # apiVersion/Kind -> why its paths were not checked
    # apiVersion/Kind -> the paths its CRD's schema cannot follow to their end (never verified), and
    # whether the declaration is the operator's own (its paths warned) or built in (or inherited).
    unverified: dict[str, tuple[JobKind, list[crdcheck.Problem]]] = field(default_factory=dict)


def _name(kind: JobKind) -> str:
    return f"{kind.api_version}/{kind.kind}"


GetCRD = Callable[[JobKind, float], "dict[str, Any] | None"]  # the client's get_crd(kind, timeout)


def check(
    get_crd: GetCRD,
    kinds: tuple[JobKind, ...],
    pause: float = PAUSE,
    timeout: float = READ_TIMEOUT,
    budget: float = BUDGET,
) -> Report:
    """Read each CRD once (`get_crd`: the client's) and check the declarations of `kinds` against it,
    each read within `timeout` and all of them within `budget` seconds."""
    report = Report()
    deadline = time.monotonic() + budget
    crds: dict[str, dict[str, Any] | None] = {}
    down: str | None = None  # the API server did not answer: the others are not asked (nor waited for)
    for kind in kinds:
        if kind.crd is None or kind.declaration is None:
            continue  # Kubernetes' own (batch/v1 Job), or a kind built without a declaration
        if kind.crd in report.forbidden or kind.crd in report.unreadable:
            continue
        if down is not None:
            report.unreadable[kind.crd] = down
            continue
        if kind.crd not in crds:
            if time.monotonic() >= deadline:
                report.unreadable[kind.crd] = f"not read: the check's {budget:g} s were spent"
                continue
            try:
                crds[kind.crd] = _read(get_crd, kind, pause, timeout, deadline)
            except PermanentApiError as exc:
                if exc.status == 403:
                    report.forbidden.append(kind.crd)
                else:
                    report.unreadable[kind.crd] = str(exc)
                continue
            except TransientApiError as exc:
                report.unreadable[kind.crd] = down = str(exc)
                continue
            except Undecodable as exc:
                report.unreadable[kind.crd] = str(exc)
                continue
        crd = crds[kind.crd]
        if crd is None:
            report.no_crd.append(_name(kind))
            continue
        _file(report, kind, crdcheck.verify(kind.declaration, crd, lenient=kind.builtin, inherited=kind.inherited))
    return report


def _file(report: Report, kind: JobKind, verdict: crdcheck.CrdCheck) -> None:
    """Where one kind's check goes in the report: verified only when every path was checked and found."""
    if not verdict.served:
        report.not_served.append((kind, verdict.served_versions))
        return
    # A built-in declaration's paths (and those a replacement inherited from it) warn: the operator
    # did not write them. The operator's own stop the worker.
    theirs = [p for p in verdict.problems if kind.builtin or p.inherited]
    own = [p for p in verdict.problems if p not in theirs]
    if theirs:
        report.absent.append((kind, theirs))
    report.errors += [crdcheck.describe(kind.declared_in, p) for p in own]
    if verdict.unchecked:
        report.unchecked[_name(kind)] = verdict.unchecked
    if verdict.unverified:
        report.unverified[_name(kind)] = (kind, list(verdict.unverified))
    if verdict.verified:
        report.verified.append(_name(kind))


def _read(get_crd: GetCRD, kind: JobKind, pause: float, timeout: float, deadline: float) -> dict[str, Any] | None:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            # Never past the deadline: the last read gets what time is left.
            return get_crd(kind, max(0.1, min(timeout, deadline - time.monotonic())))
        except TransientApiError:
            if attempt == ATTEMPTS or time.monotonic() + pause >= deadline:
                raise
            time.sleep(pause)
    return None  # not reached


def grant_rule(kinds: tuple[JobKind, ...]) -> str:
    """The RBAC rule the worker needs for the check, as `jobttl manifests rbac` prints it in the
    worker's ClusterRole (`jobttl.core.domain.deploy.manifests.crd_rules`), in YAML's flow style."""

    def flow(value: Any) -> str:
        return f"[{', '.join(value)}]" if isinstance(value, list) else str(value)

    return "; ".join(
        "{" + ", ".join(f"{key}: {flow(value)}" for key, value in rule.items()) + "}"
        for rule in crd_rules(kinds, permissions("worker")[CRDS])
    )


def verify_at_start(kube: KubeClient, kinds: tuple[JobKind, ...]) -> Report:
    """`verify_kinds` as the worker runs it at start: each read tried once by the transport, within
    min(JOBTTL_API_TIMEOUT, READ_TIMEOUT), the whole check within BUDGET."""
    with kube.single_tries() as bounded:
        return verify_kinds(bounded.get_crd, kinds, timeout=min(kube.timeout, READ_TIMEOUT))


def verify_kinds(
    get_crd: GetCRD,
    kinds: tuple[JobKind, ...],
    pause: float = PAUSE,
    timeout: float = READ_TIMEOUT,
    budget: float = BUDGET,
) -> Report:
    """Check, log what could not be checked, and stop (ConfigError) on an operator's declaration
    naming what its CRD does not have."""
    report = check(get_crd, kinds, pause, timeout, budget)
    if report.errors:
        raise ConfigError(
            "a kind declaration reads fields its CustomResourceDefinition does not have (such a path "
            "never matches):\n  " + "\n  ".join(report.errors)
        )
    _say_not_read(report, kinds)
    _say_unverified(report)
    _say_absent(report)
    _say_not_served(report)
    _say_checked(report)
    return report


def _say_not_read(report: Report, kinds: tuple[JobKind, ...]) -> None:
    """The CRDs RBAC would not let the worker read, or the API server did not give: one warning each."""
    if report.forbidden:
        logs.record(
            log,
            "kind-unverified",
            level=logging.WARNING,
            reason="forbidden",
            crds=report.forbidden,
            detail=f"RBAC refused to let the worker read the CustomResourceDefinitions "
            f"{', '.join(report.forbidden)}: the declared paths of their kinds are not checked "
            f"against their schemas. Grant the worker's ClusterRole the rule {grant_rule(kinds)} "
            "(`jobttl manifests rbac` prints it)",
        )
    if report.unreadable:
        logs.record(
            log,
            "kind-unverified",
            level=logging.WARNING,
            reason="unreadable",
            crds=list(report.unreadable),
            detail="could not read the CustomResourceDefinitions "
            + "; ".join(f"{crd} ({why})" for crd, why in report.unreadable.items())
            + ": their kinds' declared paths are not checked against their schemas",
        )


def _say_unverified(report: Report) -> None:
    """The operator's own paths a CRD cannot check (no schema, preserved unknown fields, a map of
    anything): a warning each kind, since a misspelt managedBy or suspend path would pass there.
    Those of built-in declarations (or inherited from them) are in the `kinds-checked` line."""
    for name, (kind, problems) in report.unverified.items():
        own = [p for p in problems if not (kind.builtin or p.inherited)]
        if not own:
            continue
        said = (
            f"{report.unchecked[name]}: jobttl reads every path it declares unverified "
            f"({', '.join(p.text for p in own)})"
            if name in report.unchecked
            else "; ".join(f"{p.field}: {p.message}" for p in own) + ": jobttl reads these paths unverified"
        )
        logs.record(
            log,
            "kind-unverified",
            level=logging.WARNING,
            reason="schema",
            kind=name,
            fields=[f"{p.field}: {p.text}" for p in own],
            detail=f"{kind.declared_in}: {said}",
        )


def _say_absent(report: Report) -> None:
    """The built-in declarations' fields (or inherited ones) the installed CRD does not have: one warning each kind."""
    for kind, problems in report.absent:
        whose = (
            f"the built-in declaration of {_name(kind)} reads"
            if kind.builtin
            else f"{kind.declared_in} inherits from the built-in declaration of {_name(kind)}"
        )
        logs.record(
            log,
            "kind-fields-absent",
            level=logging.WARNING,
            kind=_name(kind),
            fields=[f"{p.field}: {p.text}" for p in problems],
            detail=f"{whose} fields the installed CRD {kind.crd} does not have (another version of its "
            "operator?); those readings never match: "
            + "; ".join(f"{p.field}: {p.message}" for p in problems)
            + ". Declare those fields in the policy's kindDeclarations to read them where they are",
        )


def _say_not_served(report: Report) -> None:
    """An operator's declaration of a version its CRD does not serve: one warning each."""
    for kind, served in report.not_served:
        if not kind.builtin:
            logs.record(
                log,
                "kind-version-not-served",
                level=logging.WARNING,
                kind=_name(kind),
                detail=f"{kind.declared_in}: the CRD {kind.crd} does not serve {kind.version} (it serves "
                f"{', '.join(served) or 'no version'}): nothing of this kind is found until it does",
            )


def _say_checked(report: Report) -> None:
    """The one `kinds-checked` line: what was verified, and why the rest was not."""
    unverified = {name: [p.text for p in problems] for name, (_, problems) in report.unverified.items()}
    why = [f"{kind}: {text}" for kind, text in report.unchecked.items()] + [
        f"{name}: {p.message}"
        for name, (_, problems) in report.unverified.items()
        if name not in report.unchecked
        for p in problems
    ]
    logs.record(
        log,
        "kinds-checked",
        verified=report.verified,
        no_crd=report.no_crd,
        not_served=[_name(k) for k, _ in report.not_served],
        unchecked=list(report.unchecked),
        unverified=unverified,
        **({"detail": "; ".join(why)} if why else {}),
    )
