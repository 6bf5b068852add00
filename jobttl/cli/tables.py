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

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.domain.wire.durations import format_duration
from jobttl.core.domain.kinds.registry import kubectl_resource, shown_kind
from jobttl.core.domain.wire.shapes import TIME_FIELDS, TIME_SUFFIX, UNPARSED

# Piped output is not cut to 80 columns, so that nothing is lost to grep or a pager.
console = Console(markup=False, highlight=False, width=None if sys.stdout.isatty() else 200)

IDENTITY = ("id", "at", "event", "apiVersion", "kind", "namespace", "name", "uid", "lateness")
# The RFC 3339 twins of TIME_FIELDS (epoch seconds, which are printed as RFC 3339 themselves).
TIME_TWINS = tuple(field + TIME_SUFFIX for field in TIME_FIELDS)
# Fields that hold a duration in seconds (whole for TTLs, fractional for measurements).
DURATION_FIELDS = ("ttl", "goneAfter", "stuckFor", "duration", "lateness")
# Values that say nothing worth a column's room: the usual case is left out.
UNREMARKABLE = ([], {}, False, "", None)


def when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def left(seconds: float) -> str:
    return f"in {format_duration(seconds)}" if seconds >= 0 else f"overdue {format_duration(seconds)}"


def left_of(pending: dict[str, Any], now: float) -> str:
    """A pending deletion's time left; a dry-run record past its due time is not overdue: dry run
    deletes nothing, so it says what dry run decided."""
    if pending.get("dryRun") and pending["due"] <= now:
        return "dry run: would delete"
    return left(pending["due"] - now)


def would_delete(count: int) -> str:
    return f"dry run: would delete {count}"


def ago(epoch: float | None) -> str:
    return "-" if epoch is None else f"{format_duration(time.time() - epoch)} ago"


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for column in columns:
        table.add_column(column, overflow="fold")  # a narrow terminal folds values, never cuts them
    return table


def _object(item: dict[str, Any]) -> str:
    """``TFJob ns/name``; ``Job.batch.volcano.sh ns/name`` where the bare Kind names another kind."""
    kind = shown_kind(str(item.get("apiVersion") or ""), str(item["kind"])) if item.get("kind") else "?"
    return f"{kind} {item.get('namespace') or '?'}/{item.get('name') or '?'}"


def seconds(value: float) -> str:
    """A measured duration: `0.5s`, `12.3s`, `2m5s`, `1h2m`."""
    return f"{value:.1f}s" if abs(value) < 60 else format_duration(value)


def _value(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return jsoncodec.dumps_str(value)
    text = str(value)
    try:
        if key in TIME_FIELDS:
            return when(float(text))
        if key in DURATION_FIELDS:
            number = float(text)
            # A TTL exactly as configured; anything else, like every duration, to its two largest units.
            return format_duration(number, exact=key == "ttl") if number == int(number) else seconds(number)
    except (ValueError, OverflowError):
        pass
    return text


def status(data: dict[str, Any]) -> None:
    console.print(_deletion_counts(data))
    if data.get("dryRunWouldDelete"):
        console.print(
            f"{would_delete(data['dryRunWouldDelete'])} (due, and kept: dry run deletes nothing; "
            "not counted as due or overdue)"
        )
    console.print(f"Redis: {data['redis']}")
    console.print(
        f"Scheduler: {data['scheduler'] or 'none: no worker holds the scheduler lock, due deletions are not queued'}"
    )
    last = data.get("lastResync")
    if last:
        _last_resync(last)
    _first_run_review(data, last)
    for name, problem in (data.get("clockProblems") or {}).items():
        console.print(f"Clock: {name}: {problem}")
    for name, report in (data.get("policyErrors") or {}).items():
        console.print(policy_error_line(name, report), soft_wrap=True)  # one line a declaration, for grep
    _workers(data["workers"])


def _deletion_counts(data: dict[str, Any]) -> Table:
    counts = _table("", "", title="Deletions")
    counts.show_header = False
    for label, key in (
        ("pending", "pending"),
        ("due within the hour", "dueWithinHour"),
        ("overdue", "overdue"),
        ("queued now", "queued"),
        ("failed", "failed"),
        ("held for confirmation", "held"),
        ("stuck (deleted, still present)", "stuck"),
        ("deleted in the last 24 h", "deletedLast24h"),
    ):
        counts.add_row(label, str(data[key]))
    return counts


def _last_resync(last: dict[str, Any]) -> None:
    """The last resync's report, as `jobttl status` tells it: what it saw, and what needs a person."""
    console.print(
        f"Last resync: {last['status']} {ago(last['started_at'])}, saw {last['seen']} jobs"
        + (f", {last['held']} held (jobttl resync --confirm {last['held_id']})" if last.get("held") else "")
    )
    for kind in last.get("missing_kinds") or ():
        console.print(f"Kind not served by this cluster (skipped; no CRD?): {kind}")
    if last.get("install_problem"):
        console.print(
            f"Install record: {last['install_problem']}: the last resync held every deletion due, "
            "released none; check the worker's RBAC on the ConfigMap jobttl-install, then run "
            "`jobttl resync`",
            soft_wrap=True,
        )
    if last.get("held_dropped"):
        console.print(
            f"Held set: {last['held_dropped']} held deletions dropped, their object not in the cluster "
            "(deleted since, or named by events for objects that do not exist)"
        )


def _first_run_review(data: dict[str, Any], last: dict[str, Any] | None) -> None:
    """The first-run review: open since the install, or confirmed but for kinds not listed completely then."""
    install = data.get("install") or {}
    kinds = install.get("kindsUnderReview") or []
    if install.get("underReview"):
        console.print(
            f"First-run review: open since the install ({install['installedAt']}): deletions already "
            "due then wait for you"
            + (
                f"; {data['held']} held: `jobttl held`, then `jobttl resync --confirm ID`"
                if data["held"]
                else "; none held"
            )
        )
    elif kinds:
        _kinds_still_under_review(data, install, kinds, set((last or {}).get("missing_kinds") or ()))


def _kinds_still_under_review(
    data: dict[str, Any], install: dict[str, Any], kinds: list[str], unserved: set[str]
) -> None:
    # One line each, for grep: the kinds a confirmation did not cover (not listed completely then),
    # apart from those this cluster does not serve at all (no CRD: usually nothing to do).
    listed_later = [k for k in kinds if k not in unserved]
    if listed_later:
        console.print(
            f"First-run review: reviewed ({install['reviewedAt']}) but for {', '.join(listed_later)}: "
            "not listed completely when it was confirmed (an API error, or not served then); what of "
            f"them was already due at the install ({install['installedAt']}) is held for your "
            "confirmation once a resync lists them" + (f"; {data['held']} held: `jobttl held`" if data["held"] else ""),
            soft_wrap=True,
        )
    if unserved & set(kinds):
        console.print(
            f"First-run review: not served by this cluster, so not reviewed: "
            f"{', '.join(sorted(unserved & set(kinds)))}: if one is served later, what of it was "
            "already due at the install waits for your confirmation",
            soft_wrap=True,
        )


def _workers(workers: list[dict[str, Any]]) -> None:
    if not workers:
        console.print("Workers: none registered: nothing is deleted")
        return
    table = _table("worker", "state", "last heartbeat", "clock", title="Workers")
    for w in workers:
        clock = w.get("clock") or {}
        offset = clock.get("apiServerOffset")
        shown = "-" if offset is None else f"{-offset:+.1f}s vs API server"
        table.add_row(
            w["name"],
            w["state"],
            ago(w["lastHeartbeat"]),
            shown + (" (deletions wait)" if clock.get("problem") else ""),
        )
    console.print(table)


def policy_error_line(declaration: str, report: dict[str, Any]) -> str:
    """One declaration's errors (the objects it could not read are kept): the policy's to fix."""
    obj = report.get("object") or {}
    return (
        f"Policy error: {declaration} ({report.get('declaredIn') or 'declared in the policy'}): "
        f"{report.get('error', '?')} (latest on {obj.get('namespace', '?')}/{obj.get('name', '?')} "
        f"{ago(report.get('at'))}; {report.get('reports', 0)} reports, an object at most once an hour)"
    )


def pending(data: dict[str, Any]) -> None:
    table = _table("due (UTC)", "time left", "job", "stage", "state", "TTL", "TTL from", "rules", "dry run")
    now = time.time()
    for p in data["items"]:
        table.add_row(
            when(p["due"]),
            left_of(p, now),
            _object(p),
            p.get("stage") or "job",
            p.get("state") or "-",
            "-" if p["ttl"] is None else format_duration(p["ttl"], exact=True),
            p["ttlSource"] or "-",
            ", ".join(p["rules"]) or "-",
            "yes" if p["dryRun"] else "",
        )
    console.print(table)
    shown = len(data["items"])
    more = " (--limit to see more)" if shown < data["total"] else ""
    dry = f"; {would_delete(data['dryRunWouldDelete'])}" if data.get("dryRunWouldDelete") else ""
    console.print(f"{shown} of {data['total']} pending deletions{more}{dry}")


def _unremarkable(value: Any) -> bool:
    # By type as well: 0 == False, and a count of 0 (retriesLeft=0) says something.
    return any(type(value) is type(u) and value == u for u in UNREMARKABLE)


def _details(entry: dict[str, Any], leave_out: tuple[str, ...] = IDENTITY) -> str:
    shown = {**{k: v for k, v in entry.items() if k != UNPARSED}, **(entry.get(UNPARSED) or {})}
    return "  ".join(
        f"{k}={_value(k, v)}"
        for k, v in shown.items()
        if k not in leave_out and k not in TIME_TWINS and not _unremarkable(v)
    )


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
    _pending_deletions(data["pending"])
    job = f"{data['namespace']}/{data['name']}"
    for o in data.get("overrides", []):
        for line in _overrides(o, job):
            console.print(f"  uid {o['uid']}: {line}")
    for d in data.get("decisions", []):
        console.print(f"  uid {d['uid']}: {decision(d)}")
    if data["history"]:
        history({"items": data["history"]})
    else:
        console.print("  no audit entries (what changed nothing is kept only as the latest decision above)")
    for t in data["tombstones"]:
        _tombstone(t)


def _pending_deletions(pending: list[dict[str, Any]]) -> None:
    """`jobttl show`'s pending deletions of the job, a line each (one a stage)."""
    now = time.time()
    for p in pending:
        ttl = "-" if p["ttl"] is None else format_duration(p["ttl"], exact=True)
        console.print(
            f"  pending {p.get('stage', 'job')} deletion: due {when(p['due'])} ({left_of(p, now)}), "
            f"TTL {ttl} from {p['ttlSource'] or '-'}, rules {', '.join(p['rules']) or '-'}"
            f"{', dry run' if p['dryRun'] else ''}; uid {p['uid']}, job id {p['jobId']}"
        )
    if not pending:
        console.print("  no pending deletion")


def _tombstone(t: dict[str, Any]) -> None:
    """A deleted UID's tombstone: when, its final status (conditions as a table), labels, its archive."""
    console.print(f"Deleted {when(t['deletedAt'])} (uid {t['uid']}); its final status:")
    final = t["status"]
    conditions = _table("condition", "status", "reason", "since (UTC)", "message")
    for c in final.get("conditions") or []:
        conditions.add_row(
            c.get("type", ""),
            c.get("status", ""),
            c.get("reason", ""),
            c.get("lastTransitionTime", ""),
            c.get("message", ""),
        )
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
        console.print(
            f"stuck: {_object(ref)} deleted {ago(s['requestedAt'])} and still present; finalizers: "
            f"{', '.join(s['finalizers']) or 'none'}; dependants: {', '.join(s['dependants']) or 'unknown'}"
        )


def retry(data: dict[str, Any]) -> None:
    for job_id in data["requeued"]:
        console.print(f"requeued {job_id}")
    if not data["requeued"]:
        console.print("no failed deletions to retry")


def cancel(data: dict[str, Any]) -> None:
    if "undone" in data:
        return undone(data)
    job = f"{data['namespace']}/{data['name']}"
    if data["wasPending"]:
        console.print(f"cancelled the deletion of {_object(data)} (was due {when(data['due'])}): the job will be kept")
    else:
        console.print(
            f"nothing was pending for {_object(data)} (uid {data['uid']}); recorded the keep anyway: no "
            "deletion will be booked for it while the keep lasts (400 days from the last time it "
            "was read)"
        )
        kind = kubectl_resource(data.get("apiVersion") or "", data["kind"]) if data.get("kind") else "KIND"
        console.print(
            f"  to keep it whatever jobttl's Redis holds, annotate the job: "
            f"kubectl annotate {kind} -n {data['namespace']} {data['name']} jobttl.io/keep=true"
        )
    console.print(f"  undo: jobttl cancel --undo {job}")


def postpone(data: dict[str, Any]) -> None:
    if "undone" in data:
        return undone(data)
    console.print(f"the deletion of {_object(data)} is now due {when(data['due'])} ({left(data['due'] - time.time())})")
    console.print(f"  undo: jobttl postpone --undo {data['namespace']}/{data['name']}")


def undone(data: dict[str, Any]) -> None:
    """`cancel --undo`, `postpone --undo`: what was taken back, and what decides now."""
    action = data["undone"]
    for said in data["uids"]:
        what = f"until {when(said['until'])}" if said.get("until") is not None else ""
        console.print(
            f"took back the {action} of {_object(data)} (uid {said['uid']}"
            f"{', ' + what if what else ''}; said by {said.get('by') or '?'} {ago(said.get('at'))})"
        )
    for p in data["pending"]:
        console.print(f"  still pending: due {when(p['due'])} ({left(p['due'] - time.time())}), until decided again")
    console.print(
        "  the deletion is decided again from the job and the policy: the workers were asked for a resync "
        "(or the next event about the job comes first); if its TTL has passed, it is deleted then. "
        f"`jobttl show {data['namespace']}/{data['name']}` shows the outcome"
    )


def _overrides(o: dict[str, Any], job: str) -> list[str]:
    """What an operator said about one UID, as `jobttl show` prints it: a line for each."""
    said = f"by {o.get('by') or '?'} {ago(o.get('at'))}" + (f" ({when(o['at'])})" if o.get("at") else "")
    lines = []
    if o["keep"]:
        lines.append(f"kept (jobttl cancel) {said}: no deletion is booked; undo: jobttl cancel --undo {job}")
    if o.get("until") is not None:
        lines.append(
            f"postponed {said}: not deleted before {when(o['until'])} ({left(o['until'] - time.time())}); "
            f"undo: jobttl postpone --undo {job}"
        )
    return lines


# HeldDeletion.by: who held it, and why.
_HELD_BY = {
    "first-run": "first run: due at install",
    "resync": "resync: over the thresholds",
    "event": "events: burst",
    "worker": "worker: burst",
}


def held(data: dict[str, Any]) -> None:
    install = data.get("install")
    if install and install.get("underReview"):
        console.print(
            f"jobttl was installed {install['installedAt']}: what was already due then waits for your "
            "review (first run)"
        )
    if not data["items"]:
        console.print("nothing is held")
        return
    table = _table("job", "stage", "held by", "due (UTC)", "overdue", "finished", "TTL", "TTL from", "rules")
    now = time.time()
    for h in data["items"]:
        table.add_row(*_held_row(h, now))
    console.print(table)
    _how_to_release(data)


def _held_row(h: dict[str, Any], now: float) -> tuple[str, ...]:
    return (
        _object(h),
        h["stage"] or "job",
        _HELD_BY.get(h["heldBy"], h["heldBy"] or "-"),
        when(h["due"]),
        ago(h["due"]) if h["due"] and h["due"] <= now else "-",
        f"{h['outcome'] or '-'} {when(_epoch(h['finishedAt']))}",
        "-" if h["ttl"] is None else format_duration(h["ttl"], exact=True),
        h["ttlSource"] or "-",
        ", ".join(h["rules"]) or "-",
    )


def _how_to_release(data: dict[str, Any]) -> None:
    """Under `jobttl held`'s table: how to delete exactly those held, and what else can be done."""
    unlisted = [h for h in data["items"] if not h.get("listed", True)]
    listed = len(data["items"]) - len(unlisted)
    if listed:
        console.print(f"{listed} held; to delete exactly these: jobttl resync --confirm {data['heldId']}")
    if unlisted:
        console.print(
            f"{len(unlisted)} held from events alone (held by: events), not yet listed by the API server: "
            "not in that id; the next resync lists them (and they join the id) or drops them (gone, or "
            "never there)"
        )
    console.print(
        'to keep one instead: `jobttl cancel NAMESPACE/NAME` or the annotation jobttl.io/keep: "true"; '
        "to change what the policy decides, edit it and run `jobttl resync` again"
    )


def _epoch(value: Any) -> float | None:
    """A finish time as decisions carry it (RFC 3339 text, or epoch seconds)."""
    if value is None or isinstance(value, (int, float)):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def resync(report: dict[str, Any], held: list, settings) -> None:
    console.print(
        f"resync {report['status']} in {report['duration']}s: saw {report['seen']} jobs; "
        f"{report['scheduled']} scheduled, {report['moved']} moved, {report['unchanged']} unchanged, "
        f"{report['cancelled']} cancelled, {report['queued_now']} queued for deletion now, "
        f"{report['held']} held, {report['rejected']} rejected"
    )
    _resync_notes(report)
    if report["held"]:
        _resync_held(report, held, settings)
    if report["status"] == "stale-confirmation":
        print(
            f"  not confirmed: the held deletions are not the set you named (now: {report['held_id'] or 'none'}); "
            "run `jobttl resync` to see them",
            file=sys.stderr,
        )


def _resync_notes(report: dict[str, Any]) -> None:
    """What the resync could not do, or left to a person: a line each."""
    for kind in report["missing_kinds"]:
        console.print(f"  not served by this cluster (skipped): {kind}")
    for error in report["errors"]:
        console.print(f"  error: {error}")
    if report.get("install_problem"):
        console.print(
            "  every deletion due now is held and none released until a resync can read and write the "
            "install record (the worker needs get, create and update on the ConfigMap jobttl-install)"
        )
    if report.get("held_dropped"):
        console.print(f"  {report['held_dropped']} held deletions dropped: their object is not in the cluster")
    kinds = (report.get("install") or {}).get("kindsUnderReview") or []
    if kinds:
        console.print(f"  still under the first-run review (not listed completely): {', '.join(kinds)}")
    for rejection in report["rejections"]:
        console.print(f"  rejected: {rejection}")


def _resync_held(report: dict[str, Any], held: list, settings) -> None:
    """Why deletions are held (the first-run review, the guard's thresholds), some of them, and how to confirm."""
    first_run = report.get("first_run_held") or 0
    if first_run:
        installed = (report.get("install") or {}).get("installedAt")
        console.print(
            f"  {first_run} deletions were already due when jobttl was installed ({installed}): "
            "first run, they wait for your review"
        )
    if report["held"] > first_run:
        console.print(
            f"  {report['held'] - first_run} deletions held by the blast-radius guard "
            f"(JOBTTL_RESYNC_MAX_DELETIONS={settings.resync_max_deletions}, "
            f"JOBTTL_RESYNC_MAX_SHARE={settings.resync_max_share})"
        )
    console.print("  for example:")
    for ref in held:
        console.print(f"    {ref}")
    console.print(
        f"  `jobttl held` lists them with the rule behind each; "
        f"`jobttl resync --confirm {report['held_id']}` deletes them"
    )


def logs(location: str, document: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    """What an archive holds (`jobttl logs --list`, or when no log matched the filters)."""
    console.print(
        f"{_object(document)} (uid {document.get('uid')}), archived {when(document.get('archivedAt'))} at {location}"
    )
    table = _table("pod", "container", "previous", "bytes", "cut to the last", "path")
    for e in entries:
        table.add_row(
            str(e.get("pod")),
            str(e.get("container")),
            "yes" if e.get("previous") else "",
            str(e.get("bytes")),
            f"{document.get('logKiB')} KiB" if e.get("truncated") else "",
            str(e.get("path")),
        )
    console.print(table)
    for note in document.get("unkept") or []:
        console.print(f"  not kept: {note}")
