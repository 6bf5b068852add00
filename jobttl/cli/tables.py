"""How the operator commands print for humans: one function per command, named after it.

Each takes exactly the data that command prints with ``--json``, so the table and the JSON
can never disagree. Markup is off: job names, rules and API errors are printed as they
are, never read as rich markup. Times are UTC, in RFC 3339 like Kubernetes', or relative
("in 5m", "3m ago"); never raw epochs.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from jobttl.core.durations import format_duration

# Piped output is not cut to 80 columns, so that nothing is lost to grep or a pager.
console = Console(markup=False, highlight=False, width=None if sys.stdout.isatty() else 200)

IDENTITY = ("id", "at", "event", "apiVersion", "kind", "namespace", "name", "uid", "lateness")
# Entry fields that hold a time (epoch seconds), printed as RFC 3339.
TIME_FIELDS = ("due", "newDue", "previousDue", "finishedAt", "deletedAt", "requestedAt", "wouldDeleteAt",
               "scheduledAt", "started_at", "failedAt", "at")
# ... and those that hold a duration in seconds (whole for TTLs, fractional for measurements).
DURATION_FIELDS = ("ttl", "goneAfter", "stuckFor", "duration", "lateness")
# Values that say nothing worth a column's room: the usual case is left out.
UNREMARKABLE = ("[]", "{}", "false", "")


def when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def human(seconds: float) -> str:
    """`1h2m` rather than `1h2m7s`: to the minute past an hour, to the second below."""
    whole = int(abs(seconds))
    return format_duration(whole - whole % 60 if whole >= 3600 else whole)


def left(seconds: float) -> str:
    return f"in {human(seconds)}" if seconds >= 0 else f"overdue {human(seconds)}"


def ago(epoch: float | None) -> str:
    return "-" if epoch is None else f"{human(time.time() - epoch)} ago"


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for column in columns:
        table.add_column(column, overflow="fold")  # a narrow terminal folds values, never cuts them
    return table


def _object(item: dict[str, Any]) -> str:
    return f"{item.get('kind') or '?'} {item.get('namespace') or '?'}/{item.get('name') or '?'}"


def seconds(value: float) -> str:
    """A measured duration: `0.5s`, `12.3s`, `2m5s`, `1h2m`."""
    return f"{value:.1f}s" if abs(value) < 60 else human(value)


def _value(key: str, value: Any) -> str:
    text = str(value)
    try:
        if key in TIME_FIELDS:
            return when(float(text))
        if key in DURATION_FIELDS:
            number = float(text)
            return format_duration(int(number)) if number == int(number) else seconds(number)
    except (ValueError, OverflowError):
        pass
    return text


def status(data: dict[str, Any]) -> None:
    counts = _table("", "", title="Deletions")
    counts.show_header = False
    for label, key in (("pending", "pending"), ("due within the hour", "dueWithinHour"), ("overdue", "overdue"),
                       ("queued now", "queued"), ("failed", "failed"), ("held for confirmation", "held"),
                       ("stuck (deleted, still present)", "stuck"), ("deleted in the last 24 h", "deletedLast24h")):
        counts.add_row(label, str(data[key]))
    console.print(counts)
    console.print(f"Redis: {data['redis']}")
    console.print(f"Scheduler: {data['scheduler'] or 'none: no worker holds the scheduler lock, due deletions are not queued'}")
    last = data.get("lastResync")
    if last:
        console.print(f"Last resync: {last['status']} {ago(last['started_at'])}, saw {last['seen']} jobs"
                      + (f", {last['held']} held (jobttl resync --confirm {last['held_id']})" if last.get("held") else ""))
        for kind in last.get("missing_kinds") or ():
            console.print(f"Kind not served by this cluster (skipped; no CRD?): {kind}")
    for name, problem in (data.get("clockProblems") or {}).items():
        console.print(f"Clock: {name}: {problem}")
    if not data["workers"]:
        console.print("Workers: none registered: nothing is deleted")
        return
    workers = _table("worker", "state", "last heartbeat", "clock", title="Workers")
    for w in data["workers"]:
        clock = w.get("clock") or {}
        offset = clock.get("apiServerOffset")
        shown = "-" if offset is None else f"{-offset:+.1f}s vs API server"
        workers.add_row(w["name"], w["state"], ago(w["lastHeartbeat"]),
                        shown + (" (deletions wait)" if clock.get("problem") else ""))
    console.print(workers)


def pending(data: dict[str, Any]) -> None:
    table = _table("due (UTC)", "time left", "job", "stage", "state", "TTL", "TTL from", "rules", "dry run")
    now = time.time()
    for p in data["items"]:
        table.add_row(when(p["due"]), left(p["due"] - now), _object(p), p.get("stage") or "job", p.get("state") or "-",
                      "-" if p["ttl"] is None else format_duration(p["ttl"]), p["ttlSource"] or "-",
                      ", ".join(p["rules"]) or "-", "yes" if p["dryRun"] else "")
    console.print(table)
    shown = len(data["items"])
    console.print(f"{shown} of {data['total']} pending deletions" + (" (--limit to see more)" if shown < data["total"] else ""))


def _details(entry: dict[str, Any], leave_out: tuple[str, ...] = IDENTITY) -> str:
    return "  ".join(f"{k}={_value(k, v)}" for k, v in entry.items()
                     if k not in leave_out and str(v) not in UNREMARKABLE)


def _lateness(entry: dict[str, Any]) -> str:
    late = entry.get("lateness")
    return "" if late is None else seconds(float(late))


def history(data: dict[str, Any]) -> None:
    table = _table("time (UTC)", "event", "job", "late", "details")
    for e in data["items"]:
        table.add_row(when(e["at"]), e["event"], _object(e) if "kind" in e else "-", _lateness(e), _details(e))
    console.print(table)


def show(data: dict[str, Any]) -> None:
    console.print(_object(data))
    now = time.time()
    for p in data["pending"]:
        ttl = "-" if p["ttl"] is None else format_duration(p["ttl"])
        console.print(f"  pending {p.get('stage', 'job')} deletion: due {when(p['due'])} ({left(p['due'] - now)}), "
                      f"TTL {ttl} from {p['ttlSource'] or '-'}, rules {', '.join(p['rules']) or '-'}"
                      f"{', dry run' if p['dryRun'] else ''}; uid {p['uid']}, job id {p['jobId']}")
    if not data["pending"]:
        console.print("  no pending deletion")
    for d in data.get("decisions", []):
        console.print(f"  uid {d['uid']}: {decision(d)}")
    if data["history"]:
        history({"items": data["history"]})
    else:
        console.print("  no audit entries (what changed nothing is kept only as the latest decision above)")
    for t in data["tombstones"]:
        console.print(f"Deleted {when(t['deletedAt'])} (uid {t['uid']}); its final status:")
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
            if t.get(key):
                console.print(f"  {key}: " + ", ".join(f"{k}={v}" for k, v in t[key].items()))
        if t.get("archive"):
            console.print(f"  archived at {t['archive']} (jobttl logs {t['namespace']}/{t['name']})")


def decision(d: dict[str, Any]) -> str:
    """The latest decision about one UID, as a sentence: `skipped, no-ttl: neither ... (3m ago)`."""
    said = d.get("event") or "?"
    if d.get("reason"):
        said += f", {d['reason']}"
    if d.get("detail"):
        said += f": {d['detail']}"
    extra = _details(d, IDENTITY + ("event", "reason", "detail"))
    return f"latest decision {said}" + (f"  [{extra}]" if extra else "") + f" ({ago(d.get('at'))})"


def failed(data: dict[str, Any]) -> None:
    table = _table("job id", "job", "was due (UTC)", "failed at (UTC)", "error")
    for f in data["items"]:
        table.add_row(f["jobId"], _object(f), when(f["due"]), when(f["failedAt"]), f["error"])
    console.print(table)
    if not data["items"]:
        console.print("no failed deletions")
    for s in data.get("stuck", []):
        ref = s["ref"]
        console.print(f"stuck: {_object(ref)} deleted {ago(s['requestedAt'])} and still present; finalizers: "
                      f"{', '.join(s['finalizers']) or 'none'}; dependants: {', '.join(s['dependants']) or 'unknown'}")


def retry(data: dict[str, Any]) -> None:
    for job_id in data["requeued"]:
        console.print(f"requeued {job_id}")
    if not data["requeued"]:
        console.print("no failed deletions to retry")


def cancel(data: dict[str, Any]) -> None:
    console.print(f"cancelled the deletion of {_object(data)} (was due {when(data['due'])}): the job will be kept")


def postpone(data: dict[str, Any]) -> None:
    console.print(f"the deletion of {_object(data)} is now due {when(data['due'])} ({left(data['due'] - time.time())})")


def resync(report: dict[str, Any], held: list, settings) -> None:
    console.print(f"resync {report['status']} in {report['duration']}s: saw {report['seen']} jobs; "
                  f"{report['scheduled']} scheduled, {report['moved']} moved, {report['unchanged']} unchanged, "
                  f"{report['cancelled']} cancelled, {report['queued_now']} queued for deletion now, "
                  f"{report['held']} held, {report['rejected']} rejected")
    for kind in report["missing_kinds"]:
        console.print(f"  not served by this cluster (skipped): {kind}")
    for error in report["errors"]:
        console.print(f"  error: {error}")
    for rejection in report["rejections"]:
        console.print(f"  rejected: {rejection}")
    if report["held"]:
        console.print(f"  {report['held']} deletions held by the blast-radius guard "
                      f"(JOBTTL_RESYNC_MAX_DELETIONS={settings.resync_max_deletions}, "
                      f"JOBTTL_RESYNC_MAX_SHARE={settings.resync_max_share}); for example:")
        for ref in held:
            console.print(f"    {ref}")
        console.print(f"  run `jobttl resync --confirm {report['held_id']}` to delete them")
    if report["status"] == "stale-confirmation":
        print(f"  not confirmed: the held deletions are not the set you named (now: {report['held_id'] or 'none'}); "
              "run `jobttl resync` to see them", file=sys.stderr)


def logs(location: str, document: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    """What an archive holds (`jobttl logs --list`, or when no log matched the filters)."""
    console.print(f"{_object(document)} (uid {document.get('uid')}), archived {when(document.get('archivedAt'))} "
                  f"at {location}")
    table = _table("pod", "container", "previous", "bytes", "cut to the last", "path")
    for e in entries:
        table.add_row(str(e.get("pod")), str(e.get("container")), "yes" if e.get("previous") else "",
                      str(e.get("bytes")), f"{document.get('logKiB')} KiB" if e.get("truncated") else "",
                      str(e.get("path")))
    console.print(table)
    for note in document.get("unkept") or []:
        console.print(f"  not kept: {note}")
