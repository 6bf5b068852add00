"""Is a job finished, and when does it expire? Pure functions: object in, decision out.

This is the one place that reads a job object and decides its fate. The sink uses it to
schedule from an event; the worker uses it again on a fresh read from the API server just
before deleting, because an event is only a hint: it may be stale, duplicated or forged.

Like the Kubernetes TTL-after-finished controller, expiry is finish time + TTL, where the
finish time comes from the object's status (written by the job's operator), never from
when we happened to see an event. Where the TTL comes from, in order:

0. the object is someone else's: another controller runs it (``managedBy``), it is suspended,
   or it has a controller ``ownerReference`` (its owner's lifecycle governs it). Its own
   controller would keep it, so jobttl does too, unless a policy rule says ``owned: delete`` /
   ``managedBy: delete``. A kind may also say "not yet" (Argo's archiving);
1. the object opts out (annotation ``jobttl.io/keep`` anything but ``"false"``: see `owner_keeps`), carries a
   ``jobttl.io/`` key jobttl does not know (a typo: kept until fixed), or a policy rule says keep;
2. the object's annotation ``jobttl.io/ttl`` (``90s``, ``36h``, ``7d``);
3. the object's own TTL field (``spec.runPolicy.ttlSecondsAfterFinished`` and the like);
4. the policy's TTL for the outcome (``ttlAfterSuccess``/``ttlAfterFailure``), then ``ttl``;

and whatever it is, the policy's ``maxTTL`` caps it: users may only ask for less. An
annotation ``jobttl.io/keep-until`` (RFC 3339) postpones expiry up to that cap.
"""

from __future__ import annotations

import difflib
import re
import enum
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jobttl.core.domain.wire.durations import MAX_TTL, parse_duration
from jobttl.core.domain.wire.identity import shown
from jobttl.core.domain.kinds.model import DeclarationFault, Finish, JobKind, OwnTTL, UnreadableField, parse_time
from jobttl.core.domain.notices.notify import owner_requests
from jobttl.core.domain.rules.policy import Effective, Policy, RuledValue

ANNOTATION_PREFIX = "jobttl.io/"
TTL_ANNOTATION = ANNOTATION_PREFIX + "ttl"
KEEP_ANNOTATION = ANNOTATION_PREFIX + "keep"
KEEP_UNTIL_ANNOTATION = ANNOTATION_PREFIX + "keep-until"
# The notification channels a job's owner asks for (jobttl.core.domain.notices.notify): carried by the decision
# into the audit entries of its deletion, never read as a URL.
NOTIFY_ANNOTATION = ANNOTATION_PREFIX + "notify"
MAX_NOTIFY_REQUEST = 256  # characters; a longer value asks for nothing

# The keys jobttl reads on an object, all annotations. Labels under jobttl.io/ are read only where the
# policy's selectors or keepLast groupBy name them (`Policy.label_keys`).
KNOWN_ANNOTATIONS = (TTL_ANNOTATION, KEEP_ANNOTATION, KEEP_UNTIL_ANNOTATION, NOTIFY_ANNOTATION)
# jobttl.io/keep's one value that does not keep: "false", exactly (as Kubernetes writes booleans in
# annotations). "true" keeps; anything else keeps too, with a Warning: unclear means keep.
KEEP, DO_NOT_KEEP = "true", "false"

# Warning Events on an object jobttl keeps because of what its owner wrote (posted once per object
# and value, from the notices outbox: jobttl.core.services.scheduled_events): a TTL (or keep-until) jobttl
# cannot use (`invalid_ttl_message`), a jobttl.io/keep value it does not recognise, a jobttl.io/ key
# it does not know.
INVALID_TTL_REASON = "InvalidTTL"
INVALID_KEEP_REASON = "InvalidKeep"
UNKNOWN_KEY_REASON = "UnknownKey"
MAX_KEY_SHOWN = 80  # of a key an UnknownKey message quotes, and compares with the known ones

DEFAULT_POLICY = Policy()
LATEST_DUE = 221845392000  # 9000-01-01: datetimes (and so RQ's scheduler) end at year 9999


class Verdict(enum.Enum):
    EXPIRES = "expires"  # finished with a TTL: delete at `expires_at`
    NOT_FINISHED = "not-finished"
    NO_TTL = "no-ttl"
    INVALID_TTL = "invalid-ttl"
    # The kind's declaration could not read this object (its CEL TTL erred): the policy's error,
    # reported against it (jobttl_policy_errors_total, a policy-error log line and audit entry),
    # never as an InvalidTTL Warning on the object, which is kept.
    POLICY_ERROR = "policy-error"
    BEING_DELETED = "being-deleted"  # has a deletionTimestamp: already going away
    NO_FINISH_TIME = "no-finish-time"  # finished, but no timestamp to count the TTL from
    EXCLUDED = "excluded"  # its namespace is out of the policy's scope
    KEPT = "kept"  # opted out by annotation or policy rule
    BUILTIN_TTL = "builtin-ttl"  # the kind's own controller applies its TTL (Kubernetes' TTL controller, ...)
    # Someone else's: each is re-decided on the next event or resync, like any verdict.
    MANAGED_ELSEWHERE = "managed-elsewhere"  # managedBy names another controller (e.g. MultiKueue)
    SUSPENDED = "suspended"  # may be resumed; its controller does not expire it meanwhile
    OWNED = "owned"  # has a controller ownerReference: its owner's lifecycle governs it
    ARCHIVING = "archiving"  # not yet: Argo has not archived it
    # A field its declaration reads holds what that reading cannot take (a condition's type that is
    # an object, conditions that are a map): kept, the field named; the sink refuses such an event.
    UNREADABLE = "unreadable"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    finished_at: int | None = None
    outcome: str | None = None  # "succeeded" or "failed"
    ttl: int | None = None
    ttl_source: str | None = None  # which field, annotation or rule the TTL came from
    expires_at: int | None = None
    dry_run: bool = False  # decide and record, but do not delete
    rules: tuple[str, ...] = ()  # the policy rules that matched
    finished_from: str | None = None  # the field the finish time was read from
    notify: str | None = None  # the job's jobttl.io/notify, as written: channel names the notifier checks
    # The Warning Event the object's owner gets for it (INVALID_KEEP_REASON, UNKNOWN_KEY_REASON), beside
    # a KEPT verdict; not in `as_dict` (held deletions are expiring decisions: they never carry one).
    warning: str | None = None

    @property
    def event_warning(self) -> str | None:
        """The Warning Event this decision posts on the object, if any (its message: `warning_message`)."""
        return self.warning or (INVALID_TTL_REASON if self.verdict is Verdict.INVALID_TTL else None)

    def as_dict(self) -> dict[str, Any]:
        """The decision as JSON-ready data (held deletions are kept in this shape)."""
        return {
            "verdict": self.verdict.value,
            "reason": self.reason,
            "finishedAt": self.finished_at,
            "outcome": self.outcome,
            "ttl": self.ttl,
            "ttlSource": self.ttl_source,
            "expiresAt": self.expires_at,
            "dryRun": self.dry_run,
            "rules": list(self.rules),
            "finishedFrom": self.finished_from,
            "notify": self.notify,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        return cls(
            Verdict(data["verdict"]),
            data["reason"],
            data.get("finishedAt"),
            data.get("outcome"),
            data.get("ttl"),
            data.get("ttlSource"),
            data.get("expiresAt"),
            bool(data.get("dryRun")),
            tuple(data.get("rules") or ()),
            data.get("finishedFrom"),
            data.get("notify"),
        )


def warning_message(event_reason: str, kind: str, detail: str, source: str | None) -> str:
    """What a Warning Event of `event_warning` says: the decision's reason, which names the value
    and what jobttl does (an invalid TTL's says it in `invalid_ttl_message`)."""
    return invalid_ttl_message(kind, detail, source) if event_reason == INVALID_TTL_REASON else detail


def invalid_ttl_message(kind: str, reason: str, source: str | None) -> str:
    """What the InvalidTTL Event says: the decision's reason (which names the value and the forms
    accepted) and what jobttl does instead. An invalid TTL does not fall back to another source
    (the object's own field, the policy's default: that could delete a job its owner meant to
    keep longer): the job is kept, and a deletion already pending for it is cancelled."""
    subject = (source or "its TTL").split(", capped by ")[0]
    return f"{reason}; jobttl will not delete this {kind} until {subject} is fixed or removed"


def policy_error_reason(kind: JobKind, fault: DeclarationFault) -> str:
    """What a policy error says: the declaration's field and problem, whose it is, and that the object stays."""
    declared = (
        f"jobttl's built-in declaration of {kind.api_version}/{kind.kind}"
        if kind.builtin or not kind.declared_in
        else kind.declared_in
    )
    return (
        f"{fault.field}: {fault.problem}; this is an error of {declared}, not of the object: jobttl keeps "
        f"this {kind.kind} until the declaration is fixed"
    )


def notify_request(annotations: dict[str, Any]) -> str | None:
    """The channel names the job's ``jobttl.io/notify`` asks for, comma-separated (what is no name is
    `notify.UNKNOWN_CHANNEL`: the audit trail and the logs never keep what an owner wrote there
    otherwise); None when it asks for nothing or is longer than any list of names."""
    value = annotations.get(NOTIFY_ANNOTATION)
    if not isinstance(value, str) or len(value) > MAX_NOTIFY_REQUEST:
        return None
    return ",".join(owner_requests(value)) or None


def _own_ttl_value(value: Any, source: str) -> int | str:
    """The TTL as an int, or a message saying why it is not one."""
    # bool is an int in Python; JSON true is not a TTL.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return f"{source} must be a non-negative integer, got {shown(value)}"
    return value


def decide(obj: dict[str, Any], kind: JobKind, policy: Policy = DEFAULT_POLICY) -> Decision:
    """What should happen to this job object, independent of the current time. An object with a
    field its declaration cannot read (`UnreadableField`) is kept: `Verdict.UNREADABLE`, naming it."""
    try:
        return _decide(obj, kind, policy)
    except UnreadableField as exc:
        declared = "its built-in declaration" if kind.builtin or not kind.declared_in else kind.declared_in
        return Decision(
            Verdict.UNREADABLE,
            f"{exc} (read as {declared} says): jobttl keeps this {kind.kind} until the field is fixed",
        )


def _mapping(meta: dict[str, Any], name: str) -> dict[str, Any]:
    """metadata.labels or .annotations: a map, or nothing; anything else is unreadable (a keep
    annotation inside a list must not pass for no annotation at all)."""
    value = meta.get(name)
    if value is not None and not isinstance(value, dict):
        raise UnreadableField(f"metadata.{name}", "a map of strings", value)
    return value or {}


def _decide(obj: dict[str, Any], kind: JobKind, policy: Policy) -> Decision:
    meta = obj.get("metadata") or {}
    out_of_reach = _out_of_reach(meta, policy)
    if out_of_reach is not None:
        return out_of_reach

    annotations, labels = _mapping(meta, "annotations"), _mapping(meta, "labels")
    effective = policy.effective(meta.get("namespace", ""), labels)
    dry_run = effective.get("dry_run")
    scope: dict[str, Any] = dict(
        rules=effective.rules, dry_run=bool(dry_run and dry_run.value), notify=notify_request(annotations)
    )
    notes: list[str] = []  # why a job someone else runs is expired all the same

    managed = _managed_elsewhere(obj, kind, effective, scope, notes)
    if managed is not None:
        return managed

    finish = kind.finish(obj)
    if finish is None:
        return Decision(Verdict.NOT_FINISHED, f"{kind.kind} has not finished", **scope)
    done = dict(outcome=finish.outcome, finished_at=finish.time, finished_from=finish.field, **scope)
    try:
        own = kind.own_ttl(obj, finish)
    except DeclarationFault as fault:
        # Before the appliedBy check: a TTL nobody could compute is not "its controller deletes it".
        return Decision(Verdict.POLICY_ERROR, policy_error_reason(kind, fault), ttl_source=fault.field, **done)
    if own is not None and kind.ttl_left_to_controller(finish):
        return Decision(Verdict.BUILTIN_TTL, f"{own.field} is set: {kind.ttl_controller} deletes it", **done)
    skip = _someone_elses(obj, kind, meta, effective, notes)
    if skip is not None:
        return Decision(skip[0], skip[1], **done)

    kept = _kept(obj, kind, policy, annotations, labels, effective, done)
    if kept is not None:
        return kept

    chosen = _choose_ttl(obj, annotations, own, finish.outcome, effective)
    if isinstance(chosen, Decision):
        return Decision(chosen.verdict, chosen.reason, ttl_source=chosen.ttl_source, **done)
    return _expiry(kind, finish, chosen, annotations, effective, notes, done)


def _out_of_reach(meta: dict[str, Any], policy: Policy) -> Decision | None:
    """Already being deleted, or in a namespace the policy excludes: nothing else is read."""
    if meta.get("deletionTimestamp"):
        return Decision(Verdict.BEING_DELETED, "the object already has a deletionTimestamp")
    excluded = policy.namespace_excluded(meta.get("namespace", ""))
    if excluded:
        return Decision(Verdict.EXCLUDED, excluded)
    return None


def _managed_elsewhere(
    obj: dict[str, Any], kind: JobKind, effective: Effective, scope: dict[str, Any], notes: list[str]
) -> Decision | None:
    """Run by another controller than the kind's own (its managedBy field): left alone unless the
    policy opts in, in which case `notes` says so and the decision goes on."""
    manager = kind.external_manager(obj)
    if manager is None:
        return None
    opted_in = effective.opted_in("managed_by")
    if opted_in is None:
        return Decision(
            Verdict.MANAGED_ELSEWHERE,
            f"{manager.field} is {manager.value!r}, not "
            f"{' or '.join(kind.own_controllers)}: that controller runs it and its own controller "
            "skips it (a policy rule with managedBy: delete opts in)",
            **scope,
        )
    notes.append(f"managed by {manager.value!r}, expired as {opted_in.source} says (managedBy: delete)")
    return None


def _kept(
    obj: dict[str, Any],
    kind: JobKind,
    policy: Policy,
    annotations: dict[str, Any],
    labels: dict[str, Any],
    effective: Effective,
    done: dict[str, Any],
) -> Decision | None:
    """A finished job kept all the same: by its owner's annotation or label, by the policy's keep, or
    held while its archive is written. The first that keeps it gives the reason."""
    kept = owner_keeps(annotations, labels, kind.kind, policy)
    if kept is not None:
        return Decision(Verdict.KEPT, kept[0], warning=kept[1], **done)
    keep = effective.get("keep")
    if keep and keep.value:
        return Decision(Verdict.KEPT, f"{keep.source} says keep", **done)
    hold = kind.hold(obj)
    if hold is not None:
        return Decision(Verdict.ARCHIVING, hold, **done)
    return None


def _someone_elses(
    obj: dict[str, Any], kind: JobKind, meta: dict[str, Any], effective: Effective, notes: list[str]
) -> tuple[Verdict, str] | None:
    """Suspended, or owned by another object (unless the policy opts in): not jobttl's to expire."""
    suspended = kind.suspended(obj)
    if suspended is not None:
        return Verdict.SUSPENDED, (
            f"{suspended.field} is {suspended.value!r}: a suspended job may be resumed, "
            "and its controller does not expire it while it is suspended"
        )
    owner = controller_owner(meta)
    if owner is None:
        return None
    opted_in = effective.opted_in("owned")
    if opted_in is None:
        return Verdict.OWNED, (
            f"owned-by {owner}: its controller ownerReference puts it under its owner's "
            "lifecycle (deleting the owner deletes it); a policy rule with owned: delete opts in"
        )
    notes.append(f"owned-by {owner}, expired as {opted_in.source} says (owned: delete)")
    return None


def owner_keeps(
    annotations: dict[str, Any], labels: dict[str, Any], kind: str, policy: Policy
) -> tuple[str, str | None] | None:
    """Whether the object's owner keeps it, by what they wrote under jobttl.io/: (why, the Warning to post
    or None), or None. ``jobttl.io/keep: "true"`` keeps quietly; any value but ``"false"`` keeps, with an
    InvalidKeep Warning (``"yes"``, ``"1"``, ``"TRUE"``, ``"true "`` meant keep, and unclear means keep);
    a jobttl.io/ key jobttl does not know keeps, with an UnknownKey Warning naming the nearest known key
    (``jobttl.io/kepp``: a typo, whose meaning jobttl cannot guess)."""
    if KEEP_ANNOTATION in annotations:
        value = annotations[KEEP_ANNOTATION]
        if value == KEEP:
            return f"annotation {KEEP_ANNOTATION} is true", None
        if value != DO_NOT_KEEP:
            return (
                f'annotation {KEEP_ANNOTATION} is {shown(value)}, neither "{KEEP}" nor "{DO_NOT_KEEP}": jobttl '
                f'keeps this {kind}, as for any value but "{DO_NOT_KEEP}" (write "{KEEP}" to keep it, '
                f'"{DO_NOT_KEEP}" or no annotation to let it expire)'
            ), INVALID_KEEP_REASON
    unknown = first_unknown_key(annotations, labels, policy)
    if unknown:
        where, key, nearest = unknown
        key = key if len(key) <= MAX_KEY_SHOWN else key[: MAX_KEY_SHOWN - 3] + "..."
        hint = (
            f" (did you mean {nearest}?)"
            if nearest
            else (f" (jobttl reads the annotations {', '.join(KNOWN_ANNOTATIONS)})")
        )
        return (
            f"{where} {key} is not a key jobttl knows{hint}: jobttl keeps this {kind} until it is fixed or removed"
        ), UNKNOWN_KEY_REASON
    return None


def first_unknown_key(
    annotations: dict[str, Any], labels: dict[str, Any], policy: Policy
) -> tuple[str, str, str | None] | None:
    """(annotation or label, key, the nearest known key or None) of the first key (in order) under
    jobttl.io/ (in any case, or under a prefix one typo away: ``jobtll.io/``) that jobttl does not
    read there, or None. Only it is reported, so only its nearest key is looked for: a forged
    object may carry thousands of such keys."""
    found = [
        (where, key)
        for where, keys in (("annotation", annotations), ("label", labels))
        for key in keys
        if isinstance(key, str) and _ours(key)
    ]
    if not found:
        return None  # nearly every object: no key under jobttl.io/ but those jobttl reads, or none at all
    known = [("annotation", k) for k in KNOWN_ANNOTATIONS] + [
        ("label", k) for k in sorted(policy.label_keys) if _ours(k)
    ]
    unknown = [pair for pair in found if pair not in known]
    if not unknown:
        return None
    where, key = min(unknown)
    return where, key, _nearest(key, known)


def _nearest(key: str, known: list[tuple[str, str]]) -> str | None:
    """The known key (``annotation jobttl.io/keep``) closest to `key`, by the names after the prefix
    (``kepp``, ``ttl-seconds``: a typo, or a known name with more after it), or None. Known names
    are short: a name is compared by its first `MAX_KEY_SHOWN` characters (difflib is quadratic)."""
    name = (key.partition("/")[2] or _after_prefix(key) or "")[:MAX_KEY_SHOWN].lower()

    def score(candidate: str) -> float:
        other = candidate.partition("/")[2]
        ratio = difflib.SequenceMatcher(None, name, other).ratio()
        return max(ratio, 0.8) if name.startswith(other) or other.startswith(name) else ratio

    scored = sorted((score(k), w, k) for w, k in known)
    best, where, candidate = scored[-1] if scored else (0.0, "", "")
    return f"{where} {candidate}" if best >= 0.6 and name else None


def _ours(key: str) -> bool:
    """A key under jobttl's prefix, however spelt: ``jobttl.io/``, ``JobTTL.io/``, ``jobtll.io/``, and the
    prefix misspelt the ways owners write it (`_misspelt_prefix`: ``jobttl/``, ``jobttl.com/``,
    ``jobttl.io.keep``). Asked of every key of every object decided: a prefix of another length is not
    compared, the comparison is remembered by the prefix alone (a cache by the whole key would keep
    every forged key), and a misspelt prefix is looked for in the key's head only."""
    prefix, slash, _ = key.partition("/")
    if slash and abs(len(prefix) - len(ANNOTATION_PREFIX[:-1])) <= 2 and _ours_prefix(prefix):
        return True
    return _after_prefix(key) is not None


@lru_cache(maxsize=4096)
def _ours_prefix(prefix: str) -> bool:
    return difflib.SequenceMatcher(None, prefix.lower(), ANNOTATION_PREFIX[:-1]).ratio() >= 0.8


_OUR_LABEL = ANNOTATION_PREFIX.split(".")[0]  # "jobttl"
# A misspelt prefix: a first label one edit from "jobttl", then at most one short domain label
# (".io", ".com", ".dev"), then "/" or "." and the name. Only the key's first 16 characters are read.
_MISSPELT = re.compile(r"([a-z0-9_-]{5,7})(\.[a-z0-9]{1,4})?([/.])(.+)")


def _after_prefix(key: str) -> str | None:
    """The name after a misspelt jobttl prefix (``keep`` of ``jobttl/keep``, ``jobttl.io.keep``,
    ``jobtl.io/keep``, ``JOBTTL.com/keep``), or None. Bounded: a short head and one small edit distance."""
    match = _MISSPELT.match(key[:16].lower())
    if match is None or (match.group(3) == "." and match.group(2) is None and "/" in key):
        return None  # "jobttl.example.com/x": another organisation's prefix
    label, _, _, _ = match.groups()
    if _edits(label, _OUR_LABEL) > 1:
        return None
    return key[match.start(4) :]


def _edits(a: str, b: str) -> int:
    """Optimal string alignment distance (a transposition is one edit: ``jbottl``), for short strings."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def controller_owner(meta: dict[str, Any]) -> str | None:
    """``Kind/name`` of the object's controller ownerReference (``controller: true``), if it has one."""
    references = meta.get("ownerReferences")
    if references is not None and not isinstance(references, list):
        raise UnreadableField("metadata.ownerReferences", "a list", references)
    for i, reference in enumerate(references or ()):
        if not isinstance(reference, dict):
            raise UnreadableField(f"metadata.ownerReferences[{i}]", "an owner reference (an object)", reference)
        controller = reference.get("controller")
        if controller is not None and not isinstance(controller, bool):
            raise UnreadableField(f"metadata.ownerReferences[{i}].controller", "true or false", controller)
        if controller:
            return f"{reference.get('kind') or '?'}/{reference.get('name') or '?'}"
    return None


def _expiry(
    kind: JobKind,
    finish: Finish,
    chosen: tuple[int, str],
    annotations: dict[str, Any],
    effective: Effective,
    notes: list[str],
    done: dict[str, Any],
) -> Decision:
    """From the chosen TTL to the expiry: capped, bounded, postponed by keep-until."""
    ttl, source = chosen
    # The admin's cap first: a user who asks for forever gets maxTTL, not an invalid TTL.
    cap: RuledValue | None = effective.get("max_ttl")
    if cap is not None and ttl > cap.value:
        ttl, source = cap.value, f"{source}, capped by maxTTL of {cap.source}"
    if ttl > MAX_TTL:
        return Decision(
            Verdict.INVALID_TTL,
            f"{source}: a TTL of {ttl}s is beyond any sensible time (at most {MAX_TTL}s, about 100 years)",
            ttl_source=source,
            **done,
        )
    if finish.time is None:
        return Decision(
            Verdict.NO_FINISH_TIME,
            f"{kind.kind} finished ({finish.reason}) but has no readable finish time",
            ttl=ttl,
            ttl_source=source,
            **done,
        )
    expires_at = finish.time + ttl
    if expires_at > LATEST_DUE:
        return Decision(
            Verdict.INVALID_TTL,
            f"finish time {finish.time} plus TTL {ttl}s is past the year 9000",
            ttl_source=source,
            **done,
        )
    if KEEP_UNTIL_ANNOTATION in annotations:
        try:
            expires_at, ttl, source = _postponed(annotations, finish.time, cap, (expires_at, ttl, source))
        except ValueError:
            return Decision(
                Verdict.INVALID_TTL,
                f"annotation {KEEP_UNTIL_ANNOTATION} must be an RFC 3339 time such "
                f"as 2030-01-31T00:00:00Z within 100 years, got "
                f"{shown(annotations[KEEP_UNTIL_ANNOTATION])}",
                ttl_source=f"annotation {KEEP_UNTIL_ANNOTATION}",
                **done,
            )
    return Decision(
        Verdict.EXPIRES,
        f"{kind.kind} {finish.outcome} ({finish.reason}); TTL {ttl}s from {source}" + "".join(f"; {n}" for n in notes),
        ttl=ttl,
        ttl_source=source,
        expires_at=expires_at,
        **done,
    )


def _postponed(
    annotations: dict[str, Any], finished_at: int, cap: RuledValue | None, expiry: tuple[int, int, str]
) -> tuple[int, int, str]:
    """(expires at, TTL, its source), postponed by ``jobttl.io/keep-until`` when it keeps the job longer.
    Raises ValueError as `_keep_until` does."""
    keep_until = _keep_until(annotations, finished_at, cap)
    assert keep_until is not None
    if keep_until <= expiry[0]:
        return expiry
    capped = cap is not None and keep_until == finished_at + cap.value
    source = f"annotation {KEEP_UNTIL_ANNOTATION}" + (f", capped by maxTTL of {cap.source}" if capped else "")
    return keep_until, keep_until - finished_at, source


def _keep_until(annotations: dict[str, Any], finished_at: int, cap: RuledValue | None) -> int | None:
    """The time ``jobttl.io/keep-until`` keeps a job until, capped by maxTTL; None without one.
    Raises ValueError for a value that is not an RFC 3339 time within 100 years of the finish."""
    if KEEP_UNTIL_ANNOTATION not in annotations:
        return None
    keep_until = parse_time(annotations[KEEP_UNTIL_ANNOTATION])
    if keep_until is not None and cap is not None:
        keep_until = min(keep_until, finished_at + cap.value)
    if keep_until is None or keep_until > finished_at + MAX_TTL:
        raise ValueError(f"{KEEP_UNTIL_ANNOTATION} is not a time jobttl can keep a job until")
    return keep_until


def keep_until(obj: dict[str, Any], kind: JobKind, policy: Policy = DEFAULT_POLICY) -> int | None:
    """When the user's ``jobttl.io/keep-until`` keeps this finished job until (capped by maxTTL),
    or None. Every way jobttl deletes early (keepLast, the pods stage) waits for it too."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    if KEEP_UNTIL_ANNOTATION not in annotations:
        return None
    finish = kind.finish(obj)
    if finish is None or finish.time is None:
        return None
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    try:
        return _keep_until(annotations, finish.time, policy.effective(meta.get("namespace", ""), labels).get("max_ttl"))
    except ValueError:
        return None  # decide() calls it an invalid TTL: nothing is deleted early either


def _choose_ttl(
    obj: dict[str, Any], annotations: dict[str, Any], own: OwnTTL | None, outcome: str, effective: Effective
) -> tuple[int, str] | Decision:
    """The TTL before capping, and where it came from; or a Decision if there is none."""
    if TTL_ANNOTATION in annotations:
        source = f"annotation {TTL_ANNOTATION}"
        try:
            return parse_duration(annotations[TTL_ANNOTATION]), source
        except ValueError as exc:
            return Decision(Verdict.INVALID_TTL, f"{source}: {exc}", ttl_source=source)
    if own is not None:
        value = _own_ttl_value(own.value, own.field)
        if isinstance(value, str):
            return Decision(Verdict.INVALID_TTL, value, ttl_source=own.field)
        return value, own.field
    specific = effective.get("ttl_after_success" if outcome == "succeeded" else "ttl_after_failure")
    if specific is not None:
        name = "ttlAfterSuccess" if outcome == "succeeded" else "ttlAfterFailure"
        return specific.value, f"{name} of {specific.source}"
    default = effective.get("ttl")
    if default is not None:
        return default.value, f"ttl of {default.source}"
    return Decision(Verdict.NO_TTL, "neither the job, its annotations nor the policy set a TTL")
