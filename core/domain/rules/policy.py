"""The cluster policy: admins set defaults and caps; users may only ask for less.

A YAML file (usually a mounted ConfigMap), validated completely at start so that a typo
stops the process with the file, the field and the problem named::

    ttl: 7d                  # default TTL for finished jobs that set none
    maxTTL: 30d              # cap on whatever a job asks for
    ttlAfterSuccess: 1d      # default after success (overrides ttl)
    ttlAfterFailure: 7d      # default after failure: failed jobs are kept longer to debug
    dryRun: false            # decide and record "would delete", delete nothing
    owned: skip              # jobs with a controller ownerReference: their owner's (delete: ours too)
    managedBy: skip          # jobs whose managedBy names another controller (delete: ours too)
    kinds: [TFJob, PyTorchJob, kubeflow.org/v2beta1/MPIJob]   # default: the kinds enabled by default (kinds.DEFAULT_KINDS)
    namespaces:
      include: []            # empty: all namespaces
      exclude: [kube-system] # the default
    rules:                   # first match wins, namespace rules then selector rules
      - name: research
        namespaces: [research]
        ttlAfterFailure: 14d
      - name: pinned
        selector: {matchLabels: {pin: "true"}}
        keep: true
      - name: nightly
        namespaces: [batch]
        owned: delete        # CronJob children here are ours to expire

Keeping the evidence (global and per rule; see `Cleanup`): ``archive`` (manifest, Events and
log tails written before the DELETE; ``store``, ``retention`` and ``maxBytes`` at the top
level only), ``podTTL`` / ``podTTLAfterSuccess`` / ``podTTLAfterFailure`` (the pods go first,
the job at its own TTL), ``keepLast: {succeeded: N, failed: M, groupBy: LABEL}`` (history
limits) and ``scheduledEvents: false`` (no DeletionScheduled Events on the objects).

Values cascade global → namespace rule → selector rule: the first rule (in file order)
that matches by namespace only, then the first that has a label selector and matches,
each overriding the values it sets. Every effective value remembers where it came from,
so each decision can say which rule produced it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from jobttl.core.domain.rules import config_yaml
from jobttl.core.domain.kinds import declarations as kinddecl
from jobttl.core.domain.wire.durations import MAX_TTL, parse_duration
from jobttl.core.domain.wire.identity import MAX_NAMESPACE, InvalidIdentity, check_namespace, shown
from jobttl.core.domain.notices.notify import Channel, parse_channels
from jobttl.core.domain.kinds.registry import BUILTIN_KINDS, DEFAULT_KINDS, bare_kind
from jobttl.core.domain.kinds.model import JobKind

DEFAULT_EXCLUDED_NAMESPACES = ("kube-system",)
VALUE_KEYS = {
    "ttl": "ttl",
    "maxTTL": "max_ttl",
    "ttlAfterSuccess": "ttl_after_success",
    "ttlAfterFailure": "ttl_after_failure",
    "keep": "keep",
    "dryRun": "dry_run",
    "owned": "owned",
    "managedBy": "managed_by",
}
FLAG_KEYS = ("keep", "dry_run")
# Whether jobs that someone else runs are jobttl's to expire: "skip" (the default) or "delete".
OPT_IN_KEYS = ("owned", "managed_by")
SKIP, DELETE = "skip", "delete"
TOP_LEVEL_KEYS = set(VALUE_KEYS) | {
    "kinds",
    "kindDeclarations",
    "optIn",
    "namespaces",
    "rules",
    "stuckDeletion",
    "notify",
}
RULE_KEYS = set(VALUE_KEYS) | {"name", "namespaces", "selector"}
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# Keeping the evidence (issue 12): parsed by `_Reader.cleanup` into `Cleanup`, apart from `Values`.
CLEANUP_KEYS = {"archive", "podTTL", "podTTLAfterSuccess", "podTTLAfterFailure", "keepLast", "scheduledEvents"}
TOP_LEVEL_KEYS |= CLEANUP_KEYS
RULE_KEYS |= CLEANUP_KEYS
ARCHIVE_KEYS = {"enabled", "manifest", "events", "logs", "logKiB", "required"}
ARCHIVE_STORE_KEYS = {"store", "retention", "maxBytes"}  # the top level's only: one store per installation
DEFAULT_LOG_KIB = 256
MAX_LOG_KIB = 64 * 1024
_SIZE_UNITS = {"": 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}


class PolicyError(ValueError):
    """The policy file is invalid; the message names the file, the field and the problem."""


@dataclass(frozen=True)
class Values:
    """Policy values; None means "not set here" so that a later level can leave it alone."""

    ttl: int | None = None
    max_ttl: int | None = None
    ttl_after_success: int | None = None
    ttl_after_failure: int | None = None
    keep: bool | None = None
    dry_run: bool | None = None
    owned: str | None = None  # SKIP or DELETE
    managed_by: str | None = None  # SKIP or DELETE


@dataclass(frozen=True)
class RuledValue:
    """A policy value and where it came from: the policy's top level or one of its rules."""

    value: Any
    source: str  # "policy" or "rule <name>"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True)
class KeepLast:
    """History limits: how many finished jobs of each outcome a group keeps (None: no limit).

    A group is the jobs of one kind in one namespace under the same keepLast setting (the
    rule that set it) and, with `group_by`, the same value of that label; jobs without the
    label are in no group (the limit never deletes them)."""

    succeeded: int | None = None
    failed: int | None = None
    group_by: str | None = None

    def limit(self, outcome: str) -> int | None:
        return self.succeeded if outcome == "succeeded" else self.failed


@dataclass(frozen=True)
class ArchiveStore:
    """Where archives go (a directory or ``s3://bucket/prefix``) and how long they stay."""

    url: str
    retention: int | None = None  # seconds; None: kept until removed by hand
    max_bytes: int | None = None  # the directory store's cap: the oldest go first


@dataclass(frozen=True)
class Cleanup:
    """Keeping the evidence, then cleaning up in stages; None means "not set here" (as `Values`)."""

    archive: bool | None = None  # write an archive before deleting (needs the top level's store)
    archive_manifest: bool | None = None
    archive_events: bool | None = None
    archive_logs: bool | None = None
    archive_log_kib: int | None = None  # the last N KiB of each container's log
    archive_required: bool | None = None  # False: delete even when the archive fails
    pod_ttl: int | None = None
    pod_ttl_after_success: int | None = None
    pod_ttl_after_failure: int | None = None
    keep_last: KeepLast | None = None  # replaced whole by a later level, never merged
    scheduled_events: bool | None = None  # a DeletionScheduled Event per schedule change


@dataclass(frozen=True)
class Rule:
    name: str
    namespaces: tuple[str, ...] = ()
    selector: tuple[Requirement, ...] | None = None
    values: Values = Values()
    cleanup: Cleanup = Cleanup()

    def matches(self, namespace: str, labels: dict[str, str]) -> bool:
        if self.namespaces and namespace not in self.namespaces:
            return False
        return all(r.matches(labels) for r in self.selector or ())


@dataclass(frozen=True)
class Effective:
    """The values that apply to one object, each with where it came from."""

    settings: dict[str, RuledValue] = field(default_factory=dict)
    rules: tuple[str, ...] = ()  # the rules that matched, in cascade order

    def get(self, name: str) -> RuledValue | None:
        return self.settings.get(name)

    def opted_in(self, name: str) -> RuledValue | None:
        """The setting that makes `owned` or `managed_by` jobs ours, if one does."""
        setting = self.settings.get(name)
        return setting if setting is not None and setting.value == DELETE else None


@dataclass(frozen=True)
class Policy:
    values: Values = Values()
    rules: tuple[Rule, ...] = ()
    include_namespaces: tuple[str, ...] = ()
    exclude_namespaces: tuple[str, ...] = DEFAULT_EXCLUDED_NAMESPACES
    # The enabled kinds (the policy's `kinds`, default: kinds.DEFAULT_KINDS and those declared or opted
    # into), and every kind known:
    # the built-in ones and those of `kindDeclarations` (which may replace a built-in one), with
    # the finishing states `optIn` enables.
    kinds: tuple[JobKind, ...] = DEFAULT_KINDS
    known_kinds: tuple[JobKind, ...] = BUILTIN_KINDS
    # A deletion still present after JOBTTL_STUCK_AFTER is deleted once more with this
    # propagation policy (only "Background" makes sense); None: it is reported, nothing more.
    stuck_fallback: str | None = None
    cleanup: Cleanup = Cleanup()
    archive_store: ArchiveStore | None = None
    # Where jobttl tells what it did (`jobttl notify` sends; jobttl.core.domain.notices.notify).
    notify: tuple[Channel, ...] = ()
    # The namespaces jobttl may delete in, when its RBAC grants delete there only (the chart's
    # rbac.namespaces, JOBTTL_DELETE_NAMESPACES): not the policy file's to say, so `confined_to`
    # sets it at start. Empty: every namespace.
    delete_namespaces: tuple[str, ...] = ()

    def confined_to(self, namespaces: tuple[str, ...]) -> Policy:
        """This policy, for an installation that may delete only in `namespaces` (empty: anywhere)."""
        return replace(self, delete_namespaces=tuple(namespaces))

    @cached_property
    def label_keys(self) -> frozenset[str]:
        """Every label key the policy reads: its rules' selectors and keepLast's groupBy (an object's
        jobttl.io/ label the policy names is a known key: `decision.first_unknown_key`)."""
        keys = {r.key for rule in self.rules for r in rule.selector or ()}
        return frozenset(
            keys
            | {
                level.keep_last.group_by
                for level in [self.cleanup, *(r.cleanup for r in self.rules)]
                if level.keep_last is not None and level.keep_last.group_by
            }
        )

    def namespace_excluded(self, namespace: str) -> str | None:
        """Why `namespace` is out of scope, or None if it is in."""
        # First: a job jobttl may not delete there is kept whatever the policy says of it, so no
        # process ever asks the API server for a DELETE its RBAC refuses (a 403 is a failure).
        if self.delete_namespaces and namespace not in self.delete_namespaces:
            return (
                f"namespace {namespace!r} is not one jobttl may delete in (JOBTTL_DELETE_NAMESPACES: "
                f"{', '.join(self.delete_namespaces)})"
            )
        if namespace in self.exclude_namespaces:
            return f"namespace {namespace!r} is excluded by the policy"
        if self.include_namespaces and namespace not in self.include_namespaces:
            return f"namespace {namespace!r} is not in the policy's include list"
        return None

    def effective(self, namespace: str, labels: dict[str, str]) -> Effective:
        levels: list[tuple[Values, str]] = [(self.values, "policy")]
        matched = []
        for has_selector in (False, True):
            for rule in self.rules:
                if (rule.selector is not None) == has_selector and rule.matches(namespace, labels):
                    levels.append((rule.values, f"rule {rule.name}"))
                    matched.append(rule.name)
                    break
        settings: dict[str, RuledValue] = {}
        for values, source in levels:
            for f in fields(Values):
                value = getattr(values, f.name)
                if value is not None:
                    settings[f.name] = RuledValue(value, source)
        return Effective(settings, tuple(matched))

    # --- keeping the evidence (issue 12) ---------------------------------------------------------
    def cleanup_effective(self, namespace: str, labels: dict[str, str]) -> Effective:
        """The `Cleanup` values that apply to one object, cascaded like `effective` (same rules)."""
        by_name = {rule.name: rule for rule in self.rules}
        matched = self.effective(namespace, labels).rules
        levels = [(self.cleanup, "policy")] + [(by_name[name].cleanup, f"rule {name}") for name in matched]
        # Later levels win: a dict keeps the last value written under each name.
        settings = {
            f.name: RuledValue(getattr(values, f.name), source)
            for values, source in levels
            for f in fields(Cleanup)
            if getattr(values, f.name) is not None
        }
        if self.archive_store is None:
            settings.pop("archive", None)  # nowhere to write: validation makes this unreachable
        return Effective(settings, matched)

    def _any(self, *names: str, is_set: bool = False) -> bool:
        """Whether some level (global or a rule) says one of `names`: truthy, or with `is_set`, set at all."""
        levels = [self.cleanup] + [rule.cleanup for rule in self.rules]
        return any(
            (getattr(level, name) is not None) if is_set else getattr(level, name) for level in levels for name in names
        )

    @property
    def archiving(self) -> bool:
        """Some job may be archived: the worker needs to read pods, logs and Events."""
        return self.archive_store is not None and self._any("archive")

    @property
    def pod_stages(self) -> bool:
        """Some job may have its pods deleted before it: the worker needs to list and delete pods.
        Set, not truthy: `podTTL: 0s` deletes the pods as soon as the job finishes (jobttl.core.domain.decisions.stages)."""
        return self._any("pod_ttl", "pod_ttl_after_success", "pod_ttl_after_failure", is_set=True)

    @property
    def history_limits(self) -> bool:
        """Some rule keeps only the last N: the reconcile path maintains the group indexes."""
        return self._any("keep_last")


# --- loading and validation ----------------------------------------------------------------


def _shown_duration(value: Any) -> str:
    return repr(value) if isinstance(value, str) else f"{value:,}s"


class _Reader:
    def __init__(self, origin: str, document: config_yaml.Document | None = None):
        self.origin = origin
        self.document = document  # the file's lines, when it was read from one

    def place(self, where: str) -> str:
        """Where a field was written: the file, its line (when read from a file), then the field."""
        line = self.document.line(where) if self.document is not None else None
        return f"{self.origin}{f':{line}' if line else ''}: {where}"

    def fail(self, where: str, problem: str) -> PolicyError:
        return PolicyError(f"{self.place(where)}: {problem}")

    def kind_error(self, exc: kinddecl.KindError, replacements: Sequence[kinddecl.Replacement] = ()) -> PolicyError:
        """A declaration's error (``ORIGIN: FIELD: PROBLEM``) with the line of its field, and, in a field
        the declaration inherited from a built-in one, what the operator can write instead."""
        text, prefix = str(exc), f"{self.origin}: "
        if not text.startswith(prefix):
            return PolicyError(text)
        where, _, problem = text[len(prefix) :].partition(": ")
        for i, replacement in enumerate(replacements):
            for name in replacement.inherited:
                if (
                    where.startswith((f"kindDeclarations[{i}].{name}.", f"kindDeclarations[{i}].{name}["))
                    or where == f"kindDeclarations[{i}].{name}"
                ):
                    problem += (
                        f" (inherited from the built-in declaration of {kinddecl.key(replacement.declaration)}:"
                        f" write {name} in this declaration, or {name}: null to do without)"
                    )
        return self.fail(where, problem)

    def mapping(self, value: Any, where: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        if not all(isinstance(k, str) for k in value):
            raise self.fail(where, "every key must be a string (quote keys such as 1, true or null)")
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise self.fail(
                f"{where}.{unknown[0]}" if where != "(top level)" else unknown[0],
                f"unknown field; expected one of {', '.join(sorted(allowed))}",
            )
        return value

    def strings(self, value: Any, where: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(where, "expected a list of non-empty strings")
        return tuple(value)

    def namespaces(self, value: Any, where: str) -> tuple[str, ...]:
        """A list of namespaces, each one the API server could have (a DNS-1123 label): matched exactly,
        so `Production` or `"production "` would match nothing, and an exclude written so would let
        production's jobs expire."""
        names = self.strings(value, where)
        for i, name in enumerate(names):
            try:
                check_namespace(name, "")
            except InvalidIdentity:
                raise self.fail(
                    f"{where}[{i}]",
                    f"{shown(name)} is not a namespace name (lowercase letters, "
                    f"digits and '-', at most {MAX_NAMESPACE} characters, starting "
                    "and ending with a letter or digit; no wildcards): it would "
                    "match no namespace",
                ) from None
        return names

    def values(self, data: dict[str, Any], where: str) -> Values:
        parsed: dict[str, Any] = {}
        for key, attr in VALUE_KEYS.items():
            if key not in data:
                continue
            value = data[key]
            if attr in FLAG_KEYS:
                if not isinstance(value, bool):
                    raise self.fail(f"{where}{key}", f"expected true or false, got {value!r}")
                parsed[attr] = value
            elif attr in OPT_IN_KEYS:
                if value not in (SKIP, DELETE):
                    raise self.fail(f"{where}{key}", f"expected {DELETE} or {SKIP}, got {value!r}")
                parsed[attr] = value
            else:
                try:
                    parsed[attr] = parse_duration(value)
                except ValueError as exc:
                    raise self.fail(f"{where}{key}", str(exc)) from None
                if parsed[attr] > MAX_TTL:  # else every job would get an InvalidTTL Warning: the owner blamed
                    raise self.fail(
                        f"{where}{key}",
                        f"{_shown_duration(value)} is longer than jobttl's longest TTL, "
                        f"{MAX_TTL:,}s (about 100 years); to keep jobs for ever, "
                        "use keep: true",
                    )
        values = Values(**parsed)
        if values.max_ttl is not None:
            for attr, key in (
                ("ttl", "ttl"),
                ("ttl_after_success", "ttlAfterSuccess"),
                ("ttl_after_failure", "ttlAfterFailure"),
            ):
                if (getattr(values, attr) or 0) > values.max_ttl:
                    raise self.fail(f"{where}{key}", f"is longer than maxTTL ({data['maxTTL']})")
        return values

    def selector(self, value: Any, where: str) -> tuple[Requirement, ...]:
        data = self.mapping(value, where, {"matchLabels", "matchExpressions"})
        requirements = []
        labels = data.get("matchLabels", {})
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise self.fail(
                f"{where}.matchLabels",
                'expected a mapping of label names to string values (quote values like "true" and "1")',
            )
        requirements += [Requirement(k, "In", (v,)) for k, v in labels.items()]
        expressions = data.get("matchExpressions", [])
        if not isinstance(expressions, list):
            raise self.fail(f"{where}.matchExpressions", "expected a list")
        for i, expr in enumerate(expressions):
            at = f"{where}.matchExpressions[{i}]"
            expr = self.mapping(expr, at, {"key", "operator", "values"})
            if not isinstance(expr.get("key"), str) or not expr["key"]:
                raise self.fail(f"{at}.key", "required")
            operator = expr.get("operator")
            if operator not in SELECTOR_OPERATORS:
                raise self.fail(f"{at}.operator", f"must be one of {', '.join(SELECTOR_OPERATORS)}, got {operator!r}")
            values = self.strings(expr.get("values", []), f"{at}.values")
            if operator in ("In", "NotIn") and not values:
                raise self.fail(f"{at}.values", f"required (non-empty) for operator {operator}")
            if operator in ("Exists", "DoesNotExist") and values:
                raise self.fail(f"{at}.values", f"must be empty for operator {operator}")
            requirements.append(Requirement(expr["key"], operator, values))
        return tuple(requirements)

    def kinds(self, value: Any, known: tuple[JobKind, ...]) -> tuple[JobKind, ...]:
        names = self.strings(value, "kinds")
        chosen = []
        for i, name in enumerate(names):
            # apiVersion/Kind, else a bare Kind as everything in jobttl reads one (kinds.bare_kind).
            found = [k for k in known if name == f"{k.api_version}/{k.kind}"] or bare_kind(name, known)
            if not found:
                listed = ", ".join(sorted({k.kind for k in known}))
                raise self.fail(
                    f"kinds[{i}]",
                    f"unknown kind {name!r}; known kinds: {listed} "
                    f"(or apiVersion/Kind, e.g. kubeflow.org/v2beta1/MPIJob)",
                )
            chosen += [k for k in found if k not in chosen]
        return tuple(chosen)

    def known_kinds(self, declarations: Any, opt_in: Any) -> tuple[JobKind, ...]:
        """The built-in kinds, replaced where `kindDeclarations` declares the same apiVersion/Kind (the
        replacement inheriting what it leaves out, `kinddecl.replacing`), then the declared new ones;
        each with the finishing states `optIn` enables for it."""
        if declarations is not None and not isinstance(declarations, list):
            raise self.fail("kindDeclarations", "expected a list of kind declarations (README: Declaring a kind)")
        builtin = kinddecl.builtin_declarations()
        replacements = self.replacements(declarations or [], builtin)
        declared = [r.declaration for r in replacements]
        by_key = {**builtin, **{kinddecl.key(d): d for d in declared if isinstance(d, dict) and _named(d)}}
        opt_ins = self.opt_ins(opt_in, by_key)
        try:
            compiled = kinddecl.compile_kinds(declared, self.origin, "kindDeclarations", opt_ins)
        except kinddecl.KindError as exc:
            raise self.kind_error(exc, replacements) from None
        own = [replace(k, inherited=r.inherited) for k, r in zip(compiled, replacements)]
        return self.in_builtin_order(own, replacements, builtin, opt_ins)

    def replacements(self, declarations: list[Any], builtin: dict[str, dict[str, Any]]) -> list[kinddecl.Replacement]:
        """Each declaration as it replaces the built-in kinds of its CRD; refused when the built-in ones
        it would inherit from differ in a field it leaves out."""
        replacements = [
            kinddecl.replacing(d, builtin) if isinstance(d, dict) and _named(d) else kinddecl.Replacement(d)
            for d in declarations
        ]
        for i, replacement in enumerate(replacements):
            if replacement.conflicts:
                field = replacement.conflicts[0]
                raise self.fail(
                    f"kindDeclarations[{i}]",
                    f"replaces the built-in {' and '.join(replacement.replaces)} "
                    f"(the same CRD in other versions), which differ in "
                    f"{', '.join(replacement.conflicts)}: write {field} in this "
                    f"declaration, or {field}: null to do without",
                )
        return replacements

    def in_builtin_order(
        self,
        own: list[JobKind],
        replacements: list[kinddecl.Replacement],
        builtin: dict[str, dict[str, Any]],
        opt_ins: dict[str, tuple[str, ...]],
    ) -> tuple[JobKind, ...]:
        """The built-in kinds in their order, each replaced by the first declaration of its CRD (or
        compiled again with the states `optIn` enables), then the declarations that replace none."""
        replaced_by = _replaced_by(replacements)
        kinds, placed = [], set()
        for kind in BUILTIN_KINDS:
            name = f"{kind.api_version}/{kind.kind}"
            if name in replaced_by:
                i = replaced_by[name]
                _say_replaced(name, builtin[name], replacements[i], self.origin)
                if i not in placed:  # the operator's declaration replaces the built-in one(s), in its place
                    placed.add(i)
                    kinds.append(own[i])
            elif name in opt_ins:
                kinds += kinddecl.compile_kinds([builtin[name]], self.origin, "optIn", opt_ins, builtin=True)
            else:
                kinds.append(kind)
        return tuple(kinds) + tuple(kind for i, kind in enumerate(own) if i not in placed)

    def opt_ins(self, value: Any, declarations: dict[str, dict[str, Any]]) -> dict[str, tuple[str, ...]]:
        """`optIn: {apiVersion/Kind: [State, ...]}`: finishing states a kind counts only when named here."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(
                "optIn",
                "expected a mapping of apiVersion/Kind to the states to count as finished, "
                "e.g. {batch.volcano.sh/v1alpha1/Job: [Aborted]}",
            )
        chosen = {}
        for name, states in value.items():
            decl = declarations.get(name)
            if decl is None:
                raise self.fail(
                    f"optIn.{name}", "names no known kind; use apiVersion/Kind, e.g. batch.volcano.sh/v1alpha1/Job"
                )
            values = (decl.get("finished") or {}).get("state", {}).get("values", {})
            available = sorted(v for v, o in values.items() if isinstance(o, dict) and o.get("optIn"))
            states = self.strings(states, f"optIn.{name}")
            for i, state in enumerate(states):
                if state not in available:
                    raise self.fail(
                        f"optIn.{name}[{i}]",
                        f"{state!r} is not an opt-in state of {name} (it has: {', '.join(available) or 'none'})",
                    )
            chosen[name] = states
        return chosen

    def stuck_fallback(self, value: Any) -> str | None:
        if value is None:
            return None
        data = self.mapping(value, "stuckDeletion", {"fallback"})
        fallback = data.get("fallback")
        if fallback not in (None, "Background"):
            raise self.fail("stuckDeletion.fallback", f"must be Background (or absent), got {fallback!r}")
        return fallback

    # --- keeping the evidence (issue 12) ---------------------------------------------------------
    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"expected true or false, got {value!r}")
        return value

    def count(self, value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(where, f"expected a whole number of at least 0, got {value!r}")
        return value

    def duration(self, value: Any, where: str) -> int:
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise self.fail(where, str(exc)) from None

    def size(self, value: Any, where: str) -> int:
        """Bytes, as a whole number or with a binary suffix (``500Mi``, ``50Gi``), as Kubernetes writes quantities."""
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        text = value.strip() if isinstance(value, str) else ""
        number = text.rstrip("KMGTi")
        unit = text[len(number) :]
        if not number.isdigit() or unit not in _SIZE_UNITS or int(number) == 0:
            raise self.fail(where, f"expected a size such as 500Mi, 50Gi or a number of bytes, got {value!r}")
        return int(number) * _SIZE_UNITS[unit]

    def cleanup(self, data: dict[str, Any], where: str, top: bool) -> Cleanup:
        """The Cleanup values of one level (`where` ends with "." for rules, "" at the top)."""
        parsed: dict[str, Any] = {}
        if "archive" in data:
            parsed.update(self.archive(data["archive"], f"{where}archive", top))
        for key, attr in (
            ("podTTL", "pod_ttl"),
            ("podTTLAfterSuccess", "pod_ttl_after_success"),
            ("podTTLAfterFailure", "pod_ttl_after_failure"),
        ):
            if key in data:
                parsed[attr] = self.duration(data[key], f"{where}{key}")
        if "keepLast" in data:
            parsed["keep_last"] = self.keep_last(data["keepLast"], f"{where}keepLast")
        if "scheduledEvents" in data:
            parsed["scheduled_events"] = self.boolean(data["scheduledEvents"], f"{where}scheduledEvents")
        return Cleanup(**parsed)

    def archive(self, value: Any, where: str, top: bool) -> dict[str, Any]:
        if isinstance(value, bool):
            return {"archive": value}
        data = self.mapping(value, where, ARCHIVE_KEYS | (ARCHIVE_STORE_KEYS if top else set()))
        parsed: dict[str, Any] = {"archive": self.boolean(data.get("enabled", True), f"{where}.enabled")}
        for key, attr in (
            ("manifest", "archive_manifest"),
            ("events", "archive_events"),
            ("logs", "archive_logs"),
            ("required", "archive_required"),
        ):
            if key in data:
                parsed[attr] = self.boolean(data[key], f"{where}.{key}")
        if "logKiB" in data:
            kib = self.count(data["logKiB"], f"{where}.logKiB")
            if not 1 <= kib <= MAX_LOG_KIB:
                raise self.fail(f"{where}.logKiB", f"must be between 1 and {MAX_LOG_KIB} (64 MiB), got {kib}")
            parsed["archive_log_kib"] = kib
        return parsed

    def archive_store(self, value: Any) -> ArchiveStore | None:
        if not isinstance(value, dict) or "store" not in value:
            return None
        url = value["store"]
        if not isinstance(url, str) or not url.strip():
            raise self.fail("archive.store", "expected a directory (a mounted volume) or s3://BUCKET[/PREFIX]")
        if url.startswith("s3://") and not url[len("s3://") :].split("/")[0]:
            raise self.fail("archive.store", f"an s3:// store names its bucket: s3://BUCKET[/PREFIX], got {url!r}")
        if "://" in url and not url.startswith(("s3://", "file://")):
            raise self.fail("archive.store", f"expected a directory, file://PATH or s3://BUCKET[/PREFIX], got {url!r}")
        retention = self.duration(value["retention"], "archive.retention") if "retention" in value else None
        max_bytes = self.size(value["maxBytes"], "archive.maxBytes") if "maxBytes" in value else None
        if max_bytes is not None and url.startswith("s3://"):
            raise self.fail(
                "archive.maxBytes",
                "only for a directory store; cap a bucket with its own lifecycle rules or use retention",
            )
        return ArchiveStore(url, retention, max_bytes)

    def keep_last(self, value: Any, where: str) -> KeepLast:
        data = self.mapping(value, where, {"succeeded", "failed", "groupBy"})
        limits = {key: self.count(data[key], f"{where}.{key}") for key in ("succeeded", "failed") if key in data}
        if not limits:
            raise self.fail(where, "set succeeded, failed or both (how many finished jobs of each outcome to keep)")
        group_by = data.get("groupBy")
        if group_by is not None and (not isinstance(group_by, str) or not group_by):
            raise self.fail(f"{where}.groupBy", f"expected a label key, got {group_by!r}")
        return KeepLast(limits.get("succeeded"), limits.get("failed"), group_by)

    def check_cleanup(self, policy: Policy) -> None:
        """What no single level can check: archiving needs the top level's store."""
        levels = [("archive", policy.cleanup)] + [
            (f"rules[{i}].archive", r.cleanup) for i, r in enumerate(policy.rules)
        ]
        for where, cleanup in levels:
            if cleanup.archive and policy.archive_store is None:
                raise self.fail(
                    where,
                    "archiving needs a store: set archive.store at the top level (a directory or s3://BUCKET[/PREFIX])",
                )


def _replaced_by(replacements: list[kinddecl.Replacement]) -> dict[str, int]:
    """Each built-in kind a declaration replaces → the index of the first declaration of its CRD."""
    replaced_by: dict[str, int] = {}
    for i, replacement in enumerate(replacements):
        for name in replacement.replaces:
            replaced_by.setdefault(name, i)
    return replaced_by


def _named(declaration: dict[str, Any]) -> bool:
    """Whether a declaration has what its key needs (else the schema names what is missing)."""
    return isinstance(declaration.get("version"), str) and isinstance(declaration.get("kind"), str)


def parse_policy(data: Any, origin: str = "policy", document: config_yaml.Document | None = None) -> Policy:
    """The policy `data` says (`document`: the file it was read from, for the lines errors name)."""
    reader = _Reader(origin, document)
    if data is None:
        return Policy()
    data = reader.mapping(data, "(top level)", TOP_LEVEL_KEYS)
    namespaces = reader.mapping(data.get("namespaces", {}), "namespaces", {"include", "exclude"})
    rules = _rules(reader, data.get("rules", []))
    known = reader.known_kinds(data.get("kindDeclarations"), data.get("optIn"))
    policy = Policy(
        values=reader.values(data, ""),
        rules=tuple(rules),
        include_namespaces=(
            reader.namespaces(namespaces["include"], "namespaces.include") if "include" in namespaces else ()
        ),
        exclude_namespaces=(
            reader.namespaces(namespaces["exclude"], "namespaces.exclude")
            if "exclude" in namespaces
            else DEFAULT_EXCLUDED_NAMESPACES
        ),
        kinds=_chosen(reader, data, known) if "kinds" in data else _enabled_by_default(known, data),
        known_kinds=known,
        stuck_fallback=reader.stuck_fallback(data.get("stuckDeletion")),
        cleanup=reader.cleanup(data, "", top=True),
        archive_store=reader.archive_store(data.get("archive")),
        notify=parse_channels(reader, data.get("notify")),
    )
    reader.check_cleanup(policy)
    _one_kind_per_crd(reader, policy.kinds, data.get("kindDeclarations") or [])
    return policy


def _rules(reader: _Reader, raw_rules: Any) -> list[Rule]:
    """The policy's rules, in order: each named (uniquely) and bound to namespaces, a selector or both."""
    rules: list[Rule] = []
    if not isinstance(raw_rules, list):
        raise reader.fail("rules", "expected a list")
    for i, raw in enumerate(raw_rules):
        where = f"rules[{i}]"
        raw = reader.mapping(raw, where, RULE_KEYS)
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise reader.fail(f"{where}.name", "required: every rule has a name, so decisions can cite it")
        if name in {r.name for r in rules}:
            raise reader.fail(f"{where}.name", f"duplicate rule name {name!r}")
        rules.append(_rule(reader, raw, where, name))
    return rules


def _rule(reader: _Reader, raw: dict[str, Any], where: str, name: str) -> Rule:
    rule_namespaces = reader.namespaces(raw["namespaces"], f"{where}.namespaces") if "namespaces" in raw else ()
    selector = reader.selector(raw["selector"], f"{where}.selector") if "selector" in raw else None
    if not rule_namespaces and selector is None:
        raise reader.fail(where, "a rule needs namespaces, a selector or both (global values go at the top level)")
    return Rule(
        name, rule_namespaces, selector, reader.values(raw, f"{where}."), reader.cleanup(raw, f"{where}.", top=False)
    )


def _one_kind_per_crd(reader: _Reader, kinds: tuple[JobKind, ...], declarations: list[Any]) -> None:
    """Refuse two enabled kinds on one CRD (same group and plural) when one is the operator's: a CRD
    serving both versions hands each object to both, and the one without a guard (suspend, its own TTL)
    deletes what the other keeps. (The built-in MPIJob v1 and v2beta1 are two operators' CRDs of one
    name that a cluster cannot install together.)"""
    seen: dict[tuple[str, str], JobKind] = {}
    for kind in kinds:
        other = seen.setdefault((kind.group, kind.plural), kind)
        if other is kind or (other.builtin and kind.builtin):
            continue
        names = [f"{k.api_version}/{k.kind}" for k in (other, kind)]
        index = next(
            (
                i
                for name in reversed(names)
                for i, d in enumerate(declarations)
                if isinstance(d, dict) and _named(d) and kinddecl.key(d) == name
            ),
            None,
        )
        raise reader.fail(
            "kinds" if index is None else f"kindDeclarations[{index}]",
            f"{names[0]} and {names[1]} are both enabled and are one CRD ({kind.plural}."
            f"{kind.group or 'core'}): each object would be decided twice, by rules that can "
            "disagree; declare one version of it, or enable one of them",
        )


def load_policy(path: str | Path | None) -> Policy:
    """The policy in `path`, or the built-in default (no TTL unless a job asks) if None."""
    if path is None:
        return Policy()
    path = Path(path)
    try:
        with path.open("rb") as file:
            raw = file.read(config_yaml.MAX_BYTES + 1)  # never more: a policy over the limit is refused
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy file: {exc.strerror}") from None
    return loads_policy(raw, str(path))


def loads_policy(raw: bytes | str, origin: str) -> Policy:
    """The policy in a file's bytes, read as `jobttl.core.domain.rules.config_yaml` reads an operator's YAML."""
    try:
        document = config_yaml.loads(raw, origin)
    except config_yaml.ConfigYAMLError as exc:
        raise PolicyError(str(exc)) from None
    return parse_policy(document.data, origin, document)


def _enabled_by_default(known: tuple[JobKind, ...], data: dict[str, Any]) -> tuple[JobKind, ...]:
    """Without `kinds`: the default kinds (kinds.DEFAULT_KINDS), and those the policy declares
    (`kindDeclarations`) or opts into (`optIn`): naming a kind there is asking for it."""
    asked = {f"{k.api_version}/{k.kind}" for k in DEFAULT_KINDS}
    asked |= {kinddecl.key(d) for d in data.get("kindDeclarations") or () if isinstance(d, dict) and _named(d)}
    asked |= set(data.get("optIn") or {})
    return tuple(k for k in known if f"{k.api_version}/{k.kind}" in asked)


def _chosen(reader: _Reader, data: dict[str, Any], known: tuple[JobKind, ...]) -> tuple[JobKind, ...]:
    """The policy's own `kinds`. A kind it declares or opts into must be among them: else the
    declaration would be silently unused (a Helm chart renders `kinds` from its own value)."""
    chosen = reader.kinds(data["kinds"], known)
    enabled = {f"{k.api_version}/{k.kind}" for k in chosen}
    for i, declaration in enumerate(data.get("kindDeclarations") or ()):
        if isinstance(declaration, dict) and _named(declaration) and kinddecl.key(declaration) not in enabled:
            raise reader.fail(
                f"kindDeclarations[{i}]",
                f"{kinddecl.key(declaration)} is declared but not in "
                "`kinds`: add it there (or remove `kinds` to enable it)",
            )
    for name in data.get("optIn") or {}:
        if name not in enabled:
            raise reader.fail(f"optIn.{name}", "opted into, but not in `kinds`: add it there")
    return chosen


# What a built-in declaration guards with; a replacement that drops one (`null`) deletes more.
_SAFEGUARDS = {
    "ttl": "the TTL objects ask for themselves: the policy's applies instead",
    "managedBy": "objects another controller manages",
    "suspend": "suspended objects",
    "notYet": "objects not final yet (e.g. Argo's archiving)",
}


def _say_replaced(name: str, builtin: dict[str, Any], replacement: kinddecl.Replacement, origin: str) -> None:
    """A declaration replacing a built-in kind: what it inherits (info), and loudly what it drops."""
    decl = replacement.declaration
    dropped = [f"{field} ({_SAFEGUARDS[field]})" for field in replacement.dropped]
    if (
        "ttl" not in replacement.inherited
        and (builtin.get("ttl") or {}).get("appliedBy")
        and not (decl.get("ttl") or {}).get("appliedBy")
    ):
        dropped.append("ttl.appliedBy (objects whose own controller applies their TTL)")
    source = "it" if kinddecl.key(decl) == name else "the built-in declaration of its CRD"
    inherited = f"; inherits {', '.join(replacement.inherited)} from {source}" if replacement.inherited else ""
    deletes = f"; without {', '.join(dropped)}: jobttl now deletes those too" if dropped else ""
    declared = kinddecl.key(decl)
    # Another version of the same CRD: the built-in one is no longer decided at all (one kind per CRD).
    version = (
        f" with {declared} (the same CRD in another version: jobttl now reads these objects as {declared} only)"
        if declared != name
        else ""
    )
    logging.getLogger("jobttl.policy").log(
        logging.WARNING if dropped or version else logging.INFO,
        "%s: kindDeclarations replaces the built-in %s%s%s%s",
        origin,
        name,
        version,
        inherited,
        deletes,
        extra={
            "event": "kind-replaced",
            "kind": name,
            "declared": declared,
            "inherited": list(replacement.inherited),
            "dropped": dropped,
        },
    )
