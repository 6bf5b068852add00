"""What a notification says: one channel's digest as a title and a plain-text body. Pure.

A digest gathers what the channel heard of in its period, a section per event, in the order of
`jobttl.core.domain.notices.notify.EVENTS`. The ``deleted`` section has a part per namespace: how many,
which kinds, its jobs, and the link to the console's history of that namespace
(``JOBTTL_CONSOLE_URL``); at most `NAMESPACES` namespaces are told one by one, the rest are
counted. A list says at most `LINES` items and how many more there were.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from jobttl.core.domain.wire.durations import format_duration
from jobttl.core.domain.notices.notify import EVENTS, WARNINGS
from jobttl.core.domain.wire.shapes import rfc3339

LINES = 20  # items listed per section (per namespace in `deleted`); the rest are counted
NAMESPACES = 50  # namespaces a deleted section tells one by one; the rest are counted
_LARGEST = 253402300799  # 9999-12-31T23:59:59Z: beyond it, a number is not a time nor a TTL jobttl tells

# Each section's heading, given how many entries it has.
_HEADINGS = {
    "review-opened": "first-run review: deletions held until an operator confirms them",
    "deleted": "deleted",
    "upcoming": "deletions scheduled",
    "stuck": "deletions stuck (deleted, still present)",
    "guard-tripped": "blast-radius guard: deletions held",
    "invalid-ttl": "jobs kept for a TTL jobttl cannot read",
    "policy-error": "policy errors",
    "kind-not-served": "kinds the cluster does not serve",
}


@dataclass(frozen=True)
class Message:
    title: str
    body: str
    warning: bool  # Apprise's "warning" type, else "info"
    events: tuple[str, ...]  # the notification events it tells of (the metric counts each)


def render(group: str, items: list[dict[str, Any]], total: int, console_url: str | None) -> Message:
    """The message for one digest group: `items` as kept (the first of `total` entries)."""
    by_event: dict[str, list[dict[str, Any]]] = {}
    items = [item for item in items if isinstance(item, dict)]  # Redis is not a trusted input
    for item in items:
        by_event.setdefault(str(item.get("event")), []).append(item)
    events = tuple(e for e in EVENTS if e in by_event)
    unlisted = max(0, total - len(items))
    # A digest of deletions only: what the buffer did not keep were deletions too, and are counted as such.
    uncounted = unlisted if events == ("deleted",) else 0
    title = "jobttl: " + ", ".join(_summary(e, by_event[e], uncounted) for e in events)
    body = "\n\n".join(
        _deleted(by_event[e], uncounted, console_url) if e == "deleted" else _section(e, by_event[e], console_url)
        for e in events
    )
    if unlisted and not uncounted:
        body += f"\n\n... and {unlisted} more entries not kept (the digest's limit)"
    return Message(title, body, any(e in WARNINGS for e in events), events)


def _by_namespace(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Items by namespace, the namespaces with most first (then by name)."""
    namespaces: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        namespaces.setdefault(str(item.get("namespace") or "?"), []).append(item)
    return dict(sorted(namespaces.items(), key=lambda pair: (-len(pair[1]), pair[0])))


def _deleted(items: list[dict[str, Any]], unlisted: int, console_url: str | None) -> str:
    namespaces = _by_namespace(items)
    alone = unlisted if len(namespaces) == 1 else 0  # one namespace: the deletions not kept were its own
    parts = []
    for namespace, listed in list(namespaces.items())[:NAMESPACES]:
        kinds = Counter(str(i.get("kind") or "?") for i in listed)
        lines = [
            f"{len(listed) + alone} deleted in namespace {namespace}: "
            + ", ".join(f"{n} {k}" for k, n in kinds.most_common())
            + (f" (and {alone} not kept by the digest)" if alone else "")
        ]
        lines += _listed(listed, _deleted_line)
        if console_url:
            lines.append(f"History: {console_url.rstrip('/')}/history?namespace={quote(namespace)}")
        parts.append("\n".join(lines))
    rest = list(namespaces.values())[NAMESPACES:]
    if rest:
        more = f"... and {sum(map(len, rest))} deleted in {len(rest)} more namespaces"
        parts.append(more + (f": {console_url.rstrip('/')}/history" if console_url else ""))
    if unlisted and not alone:
        parts.append(f"... and {unlisted} more deleted, not kept by the digest")
    return "\n\n".join(parts)


def _summary(event: str, items: list[dict[str, Any]], unlisted: int = 0) -> str:
    if event == "deleted":
        namespaces = {str(i.get("namespace") or "?") for i in items}
        where = next(iter(namespaces)) if len(namespaces) == 1 else f"{len(namespaces)} namespaces"
        count = len(items) + unlisted
        return f"{count} {'job' if count == 1 else 'jobs'} deleted in {where}"
    if event in ("review-opened", "guard-tripped"):
        held = sum(_int(i.get("count")) or 1 for i in items)
        return f"{held} held ({'first-run review' if event == 'review-opened' else 'guard tripped'})"
    return f"{len(items)} {event}"


def _section(event: str, items: list[dict[str, Any]], console_url: str | None) -> str:
    lines = [f"{_HEADINGS[event]} ({len(items)}):"]
    lines += _listed(items, _LINES[event])
    if event in ("review-opened", "guard-tripped"):
        held_id = next((i["heldId"] for i in reversed(items) if i.get("heldId")), None)
        lines.append(
            "Review them with `jobttl held`, then confirm with `jobttl resync --confirm "
            f"{held_id or 'HELD_ID'}`" + (f", or at {console_url.rstrip('/')}/held" if console_url else "")
        )
    return "\n".join(lines)


def _listed(items: list[dict[str, Any]], line: Callable[[dict[str, Any]], str]) -> list[str]:
    shown = [f"- {line(i)}" for i in items[:LINES]]
    if len(items) > LINES:
        shown.append(f"- ... and {len(items) - LINES} more")
    return shown


def _job(item: dict[str, Any]) -> str:
    return f"{item.get('kind') or '?'} {item.get('namespace') or '?'}/{item.get('name') or '?'}"


def _int(value: Any) -> int | None:
    """A whole number from what an entry says, or None (not a number, inf, nan, beyond a date's range)."""
    try:
        number = int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None
    return number if abs(number) <= _LARGEST else None


def _when(value: Any) -> str:
    epoch = _int(value)
    return (rfc3339(epoch) or str(value)) if epoch is not None else "?"


def _ttl(item: dict[str, Any]) -> str:
    ttl = _int(item.get("ttl"))
    if ttl is None:
        return ""
    source = item.get("ttlSource")
    return f", TTL {format_duration(ttl, exact=True)}" + (f" from {source}" if source else "")


def _deleted_line(item: dict[str, Any]) -> str:
    return _job(item) + _ttl(item)


def _upcoming_line(item: dict[str, Any]) -> str:
    stage = " (its pods)" if item.get("stage") == "pods" else ""
    dry = " (dry run: would delete)" if item.get("dryRun") == "true" else ""
    return f"{_job(item)}{stage} at {_when(item.get('due'))}{_ttl(item)}{dry}"


def _held_line(item: dict[str, Any]) -> str:
    if item.get("event") == "guard-tripped" and item.get("name"):
        return f"{_job(item)}: held by the burst limit (too many came due within a minute)"
    parts = [f"{item.get('count') or '?'} held"]
    if item.get("seen"):
        parts.append(f"of {item['seen']} jobs seen")
    if item.get("maxDeletions"):
        parts.append(f"(limits: {item['maxDeletions']} deletions or {item.get('maxShare')} of those seen)")
    return " ".join(parts) + (f", held id {item['heldId']}" if item.get("heldId") else "")


def _stuck_line(item: dict[str, Any]) -> str:
    waited = _int(item.get("stuckFor"))
    since = f" for {format_duration(waited)}" if waited is not None else ""
    return f"{_job(item)}: still present{since}; finalizers {item.get('finalizers') or '[]'}"


def _detail_line(item: dict[str, Any]) -> str:
    subject = _job(item) if item.get("name") else (item.get("resource") or item.get("rule") or "policy")
    return f"{subject}: {item.get('detail') or item.get('reason') or 'no detail'}"


_LINES = {
    "review-opened": _held_line,
    "deleted": _deleted_line,
    "upcoming": _upcoming_line,
    "stuck": _stuck_line,
    "guard-tripped": _held_line,
    "invalid-ttl": _detail_line,
    "policy-error": _detail_line,
    "kind-not-served": _detail_line,
}
