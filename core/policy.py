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
    kinds: [TFJob, PyTorchJob, kubeflow.org/v2beta1/MPIJob]   # default: every known kind
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

Values cascade global → namespace rule → selector rule: the first rule (in file order)
that matches by namespace only, then the first that has a label selector and matches,
each overriding the values it sets. Every effective value remembers where it came from,
so each decision can say which rule produced it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from jobttl.core.durations import parse_duration
from jobttl.core.kinds import ALL_KINDS, JobKind

DEFAULT_EXCLUDED_NAMESPACES = ("kube-system",)
VALUE_KEYS = {"ttl": "ttl", "maxTTL": "max_ttl", "ttlAfterSuccess": "ttl_after_success",
              "ttlAfterFailure": "ttl_after_failure", "keep": "keep", "dryRun": "dry_run",
              "owned": "owned", "managedBy": "managed_by"}
FLAG_KEYS = ("keep", "dry_run")
# Whether jobs that someone else runs are jobttl's to expire: "skip" (the default) or "delete".
OPT_IN_KEYS = ("owned", "managed_by")
SKIP, DELETE = "skip", "delete"
TOP_LEVEL_KEYS = set(VALUE_KEYS) | {"kinds", "namespaces", "rules", "stuckDeletion"}
RULE_KEYS = set(VALUE_KEYS) | {"name", "namespaces", "selector"}
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


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
class Setting:
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
class Rule:
    name: str
    namespaces: tuple[str, ...] = ()
    selector: tuple[Requirement, ...] | None = None
    values: Values = Values()

    def matches(self, namespace: str, labels: dict[str, str]) -> bool:
        if self.namespaces and namespace not in self.namespaces:
            return False
        return all(r.matches(labels) for r in self.selector or ())


@dataclass(frozen=True)
class Effective:
    """The values that apply to one object, each with where it came from."""

    settings: dict[str, Setting] = field(default_factory=dict)
    rules: tuple[str, ...] = ()  # the rules that matched, in cascade order

    def get(self, name: str) -> Setting | None:
        return self.settings.get(name)

    def opted_in(self, name: str) -> Setting | None:
        """The setting that makes `owned` or `managed_by` jobs ours, if one does."""
        setting = self.settings.get(name)
        return setting if setting is not None and setting.value == DELETE else None


@dataclass(frozen=True)
class Policy:
    values: Values = Values()
    rules: tuple[Rule, ...] = ()
    include_namespaces: tuple[str, ...] = ()
    exclude_namespaces: tuple[str, ...] = DEFAULT_EXCLUDED_NAMESPACES
    kinds: tuple[JobKind, ...] = ALL_KINDS
    # A deletion still present after JOBTTL_STUCK_AFTER is deleted once more with this
    # propagation policy (only "Background" makes sense); None: it is reported, nothing more.
    stuck_fallback: str | None = None

    def namespace_excluded(self, namespace: str) -> str | None:
        """Why `namespace` is out of scope, or None if it is in."""
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
        settings: dict[str, Setting] = {}
        for values, source in levels:
            for f in fields(Values):
                value = getattr(values, f.name)
                if value is not None:
                    settings[f.name] = Setting(value, source)
        return Effective(settings, tuple(matched))


# --- loading and validation ----------------------------------------------------------------

class _Reader:
    def __init__(self, origin: str):
        self.origin = origin

    def fail(self, where: str, problem: str) -> PolicyError:
        return PolicyError(f"{self.origin}: {where}: {problem}")

    def mapping(self, value: Any, where: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise self.fail(f"{where}.{unknown[0]}" if where != "(top level)" else unknown[0],
                            f"unknown field; expected one of {', '.join(sorted(allowed))}")
        return value

    def strings(self, value: Any, where: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(where, "expected a list of non-empty strings")
        return tuple(value)

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
        values = Values(**parsed)
        if values.max_ttl is not None:
            for attr, key in (("ttl", "ttl"), ("ttl_after_success", "ttlAfterSuccess"),
                              ("ttl_after_failure", "ttlAfterFailure")):
                if (getattr(values, attr) or 0) > values.max_ttl:
                    raise self.fail(f"{where}{key}", f"is longer than maxTTL ({data['maxTTL']})")
        return values

    def selector(self, value: Any, where: str) -> tuple[Requirement, ...]:
        data = self.mapping(value, where, {"matchLabels", "matchExpressions"})
        requirements = []
        labels = data.get("matchLabels", {})
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in labels.items()):
            raise self.fail(f"{where}.matchLabels", "expected a mapping of label names to string values "
                                                    "(quote values like \"true\" and \"1\")")
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

    def kinds(self, value: Any) -> tuple[JobKind, ...]:
        names = self.strings(value, "kinds")
        chosen = []
        for i, name in enumerate(names):
            found = [k for k in ALL_KINDS if name in (k.kind, f"{k.api_version}/{k.kind}")]
            if not found:
                known = ", ".join(sorted({k.kind for k in ALL_KINDS}))
                raise self.fail(f"kinds[{i}]", f"unknown kind {name!r}; known kinds: {known} "
                                               f"(or apiVersion/Kind, e.g. kubeflow.org/v2beta1/MPIJob)")
            chosen += [k for k in found if k not in chosen]
        return tuple(chosen)


    def stuck_fallback(self, value: Any) -> str | None:
        if value is None:
            return None
        data = self.mapping(value, "stuckDeletion", {"fallback"})
        fallback = data.get("fallback")
        if fallback not in (None, "Background"):
            raise self.fail("stuckDeletion.fallback", f"must be Background (or absent), got {fallback!r}")
        return fallback


def parse_policy(data: Any, origin: str = "policy") -> Policy:
    reader = _Reader(origin)
    if data is None:
        return Policy()
    data = reader.mapping(data, "(top level)", TOP_LEVEL_KEYS)
    namespaces = reader.mapping(data.get("namespaces", {}), "namespaces", {"include", "exclude"})
    rules = []
    raw_rules = data.get("rules", [])
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
        rule_namespaces = reader.strings(raw["namespaces"], f"{where}.namespaces") if "namespaces" in raw else ()
        selector = reader.selector(raw["selector"], f"{where}.selector") if "selector" in raw else None
        if not rule_namespaces and selector is None:
            raise reader.fail(where, "a rule needs namespaces, a selector or both (global values go at the top level)")
        rules.append(Rule(name, rule_namespaces, selector, reader.values(raw, f"{where}.")))
    return Policy(
        values=reader.values(data, ""),
        rules=tuple(rules),
        include_namespaces=reader.strings(namespaces["include"], "namespaces.include") if "include" in namespaces else (),
        exclude_namespaces=(reader.strings(namespaces["exclude"], "namespaces.exclude")
                            if "exclude" in namespaces else DEFAULT_EXCLUDED_NAMESPACES),
        kinds=reader.kinds(data["kinds"]) if "kinds" in data else ALL_KINDS,
        stuck_fallback=reader.stuck_fallback(data.get("stuckDeletion")),
    )


def load_policy(path: str | Path | None) -> Policy:
    """The policy in `path`, or the built-in default (no TTL unless a job asks) if None."""
    if path is None:
        return Policy()
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: not valid YAML: {exc}") from None
    return parse_policy(data, str(path))
