"""How the operator commands print for humans: one function per command, named after it.

Each takes exactly the data that command prints with ``--json``, so the table and the JSON
can never disagree. Markup is off: job names, rules and API errors are printed as they
are, never read as rich markup. Times are UTC, in RFC 3339 like Kubernetes'.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from worker.durations import format_duration

# Piped output is not cut to 80 columns, so that nothing is lost to grep or a pager.
console = Console(markup=False, highlight=False, width=None if sys.stdout.isatty() else 200)

IDENTITY = ("id", "at", "event", "apiVersion", "kind", "namespace", "name", "uid", "lateness")
TIME_FIELDS = ("due", "newDue", "finishedAt")


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _human(seconds: float) -> str:
    """`1h2m` rather than `1h2m7s`: to the minute past an hour, to the second below."""
    whole = int(abs(seconds))
    return format_duration(whole - whole % 60 if whole >= 3600 else whole)


def _left(seconds: float) -> str:
    return f"in {_human(seconds)}" if seconds >= 0 else f"overdue {_human(seconds)}"


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for column in columns:
        table.add_column(column, overflow="fold")  # a narrow terminal folds values, never cuts them
    return table


def _object(item: dict[str, Any]) -> str:
    return f"{item['kind']} {item['namespace']}/{item['name']}"


def status(data: dict[str, Any]) -> None:
    counts = _table("", "", title="Deletions")
    counts.show_header = False
    for label, key in (("pending", "pending"), ("due within the hour", "dueWithinHour"),
                       ("queued now", "queued"), ("failed", "failed"), ("deleted in the last 24 h", "deletedLast24h")):
        counts.add_row(label, str(data[key]))
    console.print(counts)
    console.print(f"Redis: {data['redis']}")
    console.print(f"Scheduler: {data['scheduler'] or 'none: no worker holds the scheduler lock, due deletions are not queued'}")
    if not data["workers"]:
        console.print("Workers: none registered: nothing is deleted")
        return
    workers = _table("worker", "state", "last heartbeat", title="Workers")
    now = time.time()
    for w in data["workers"]:
        beat = w["lastHeartbeat"]
        workers.add_row(w["name"], w["state"], "-" if beat is None else f"{_human(now - beat)} ago")
    console.print(workers)


def pending(data: dict[str, Any]) -> None:
    table = _table("due (UTC)", "time left", "job", "TTL", "TTL from", "rules", "dry run")
    for p in data["items"]:
        table.add_row(_when(p["due"]), _left(p["dueIn"]), _object(p),
                      "-" if p["ttl"] is None else format_duration(p["ttl"]), p["ttlSource"] or "-",
                      ", ".join(p["rules"]) or "-", "yes" if p["dryRun"] else "")
    console.print(table)
    shown = len(data["items"])
    console.print(f"{shown} of {data['total']} pending deletions" + (" (--limit to see more)" if shown < data["total"] else ""))


def _details(entry: dict[str, Any]) -> str:
    return "  ".join(f"{k}={_when(int(v)) if k in TIME_FIELDS and v.isdigit() else v}"
                     for k, v in entry.items() if k not in IDENTITY)


def _lateness(entry: dict[str, Any]) -> str:
    late = entry.get("lateness")
    return "" if late is None else f"{float(late):.1f}s" if float(late) < 60 else _human(float(late))


def history(data: dict[str, Any]) -> None:
    table = _table("time (UTC)", "event", "job", "late", "details")
    for e in data["items"]:
        table.add_row(_when(e["at"]), e["event"], _object(e) if "kind" in e else "-", _lateness(e), _details(e))
    console.print(table)


def show(data: dict[str, Any]) -> None:
    console.print(_object(data))
    for p in data["pending"]:
        ttl = "-" if p["ttl"] is None else format_duration(p["ttl"])
        console.print(f"  pending deletion: due {_when(p['due'])} ({_left(p['dueIn'])}), TTL {ttl} "
                      f"from {p['ttlSource'] or '-'}, rules {', '.join(p['rules']) or '-'}"
                      f"{', dry run' if p['dryRun'] else ''}; uid {p['uid']}, job id {p['jobId']}")
    if not data["pending"]:
        console.print("  no pending deletion")
    history({"items": data["history"]})
    for t in data["tombstones"]:
        console.print(f"Deleted {_when(t['deletedAt'])} (uid {t['uid']}); its final status:")
        final = t["status"]
        conditions = _table("condition", "status", "reason", "since (UTC)", "message")
        for c in final.get("conditions") or []:
            conditions.add_row(c.get("type", ""), c.get("status", ""), c.get("reason", ""),
                               c.get("lastTransitionTime", ""), c.get("message", ""))
        console.print(conditions)
        for key, value in final.items():
            if key != "conditions":
                console.print(f"  {key}: {value}")
        for key in ("labels", "annotations"):
            if t[key]:
                console.print(f"  {key}: " + ", ".join(f"{k}={v}" for k, v in t[key].items()))


def failed(data: dict[str, Any]) -> None:
    table = _table("job id", "job", "was due (UTC)", "failed at (UTC)", "error")
    for f in data["items"]:
        table.add_row(f["jobId"], _object(f), _when(f["due"]), _when(f["failedAt"]), f["error"])
    console.print(table)
    if not data["items"]:
        console.print("no failed deletions")


def retry(data: dict[str, Any]) -> None:
    for job_id in data["requeued"]:
        console.print(f"requeued {job_id}")
    if not data["requeued"]:
        console.print("no failed deletions to retry")


def cancel(data: dict[str, Any]) -> None:
    console.print(f"cancelled the deletion of {_object(data)} (was due {_when(data['due'])}): the job will be kept")


def postpone(data: dict[str, Any]) -> None:
    console.print(f"the deletion of {_object(data)} is now due {_when(data['due'])} ({_left(data['dueIn'])})")
