"""The console's pages and actions: each page one question the CLI answers, each action one CLI command.

Overview (`jobttl status`, and what goes when), Pending (`jobttl pending`), Held (`jobttl held`,
confirmed as `jobttl resync --confirm ID`), History (`jobttl history`) and a job's card (`jobttl
show`, with its archive as `jobttl logs` reads it). Actions are forms POSTed here, answered with a
redirect to the page they came from and a message (post/redirect/get): readable without JavaScript.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, Response, abort, current_app, flash, redirect, render_template, request, url_for
from redis.exceptions import RedisError

from jobttl.core.domain.deploy import rights
from jobttl.core.domain.decisions.archive import MANIFEST, choose_logs
from jobttl.core.domain.wire.durations import parse_duration
from jobttl.core.domain.wire.identity import InvalidIdentity, check_name, check_namespace
from jobttl.core.kube import access as reviews
from jobttl.core.kube.archivestore import ArchiveStoreError, latest
from jobttl.core.services import operations
from jobttl.console import auth
from jobttl.console.context import ConsoleContext

blueprint = Blueprint("console", __name__)

PAGE = 100  # rows a page lists
LOG_TAIL = 64 * 1024  # bytes of each archived log shown on the card (the whole file is a download)
CONFIRM_WAIT = 20.0  # seconds the confirm action waits for the worker's resync before answering


def _context() -> ConsoleContext:
    return current_app.extensions["jobttl"]


def _ops() -> operations.Operations:
    return _context().operations()


def _reader(
    resource: str = rights.DELETIONS, verb: str = "list", namespace: str | None = None, name: str | None = None
) -> auth.Who:
    person = auth.who()
    auth.require(person, verb, resource, namespace, name)
    return person


def _page(template: str, person: auth.Who, **values: Any) -> str:
    return render_template(template, who=person, csrf=auth.csrf_token(), now=time.time(), **values)


# --- pages -----------------------------------------------------------------------------------------------


@blueprint.get("/")
def overview() -> str:
    person = _reader()
    ops = _ops()
    now = time.time()
    status = ops.status()
    histogram = ops.due_histogram(now)
    policy = _context().settings.policy
    dry = {
        "everything": policy.values.dry_run is True,
        "rules": [r.name for r in policy.rules if r.values.dry_run is True],
    }
    return _page(
        "overview.html",
        person,
        status=status,
        histogram=histogram,
        counts=ops.counts(),
        stuck=ops.stuck(),
        held=status["held"],
        settings=_context().settings,
        dry=dry,
    )


@blueprint.get("/pending")
def pending() -> str:
    namespace = request.args.get("namespace", "").strip() or None
    kind = request.args.get("kind", "").strip() or None
    name = request.args.get("name", "").strip() or None
    order = "desc" if request.args.get("sort") == "due-desc" else "asc"
    person = _reader(namespace=namespace)
    ops = _ops()
    if name:
        # A name filter reads the whole (filtered) schedule: no index has names.
        rows, _ = ops.pending(namespace, kind)
        rows = [p for p in rows if name in p.ref.name]
        total = len(rows)
        rows = rows[:PAGE]
    else:
        rows, total = ops.pending(namespace, kind, 0, PAGE)
    if order == "desc":
        rows = list(reversed(rows))
    now = time.time()
    return _page(
        "pending.html",
        person,
        rows=[p.as_dict(now) for p in rows],
        total=total,
        filters={"namespace": namespace or "", "kind": kind or "", "name": name or ""},
        order=order,
        can_act=auth.may(person, rights.POSTPONE, rights.DELETIONS, namespace),
    )


@blueprint.get("/held")
def held() -> str:
    person = _reader(rights.REVIEWS)
    data = _ops().held()
    return _page(
        "held.html",
        person,
        held=data,
        can_confirm=auth.may(person, rights.CONFIRM, rights.REVIEWS),
        can_act=auth.may(person, rights.KEEP, rights.DELETIONS),
    )


@blueprint.get("/history")
def history() -> str:
    namespace = request.args.get("namespace", "").strip() or None
    event = request.args.get("event", "").strip() or None
    person = _reader(namespace=namespace)
    entries = _ops().history(limit=PAGE, event=event, namespace=namespace)
    return _page("history.html", person, entries=entries, filters={"namespace": namespace or "", "event": event or ""})


def _card_ref(namespace: str, name: str) -> None:
    try:
        check_namespace(namespace, "namespace")
        check_name(name, "name")
    except InvalidIdentity as exc:
        abort(400, str(exc))


@blueprint.get("/jobs/<namespace>/<name>")
def job(namespace: str, name: str) -> str:
    _card_ref(namespace, name)
    person = _reader(verb="get", namespace=namespace, name=name)
    kind = request.args.get("kind") or None
    with _answering_lookups():
        card = _ops().find(namespace, name, kind)
    archive = _archive(namespace, name, kind)
    return _page(
        "job.html",
        person,
        card=card,
        archive=archive,
        can_act=auth.may(person, rights.KEEP, rights.DELETIONS, namespace),
    )


def _archive(namespace: str, name: str, kind: str | None) -> dict[str, Any]:
    """The newest archive of the job: its manifest and the tail of each log (or why there is none)."""
    store = _context().archive
    if store is None:
        return {"problem": "the policy sets no archive.store: nothing is archived"}
    try:
        found = latest(store, namespace, name, kind)
        if found is None:
            return {"problem": f"no archive of {namespace}/{name} in {store.location('')}"}
        where, document = found
        manifest = (store.read(where, MANIFEST) or b"").decode("utf-8", "replace")
        logs = []
        for entry in choose_logs(document) + choose_logs(document, previous=True):
            body = store.read(where, str(entry["path"])) or b""
            logs.append(
                {
                    **entry,
                    "tail": body[-LOG_TAIL:].decode("utf-8", "replace"),
                    "bytes": len(body),
                    "cut": len(body) > LOG_TAIL,
                }
            )
        return {"where": store.location(where), "folder": where, "manifest": manifest, "logs": logs, "index": document}
    except ArchiveStoreError as exc:
        return {"problem": str(exc)}


@blueprint.get("/jobs/<namespace>/<name>/archive/<path:path>")
def download(namespace: str, name: str, path: str) -> Response:
    """One file of the job's newest archive, as stored (the manifest, a log)."""
    _card_ref(namespace, name)
    _reader(verb="get", namespace=namespace, name=name)
    store = _context().archive
    if store is None:
        abort(404, "the policy sets no archive.store: nothing is archived")
    try:
        found = latest(store, namespace, name, request.args.get("kind") or None)
        if found is None:
            abort(404, f"no archive of {namespace}/{name}")
        where, document = found
        listed = {MANIFEST} | {str(e.get("path")) for e in document.get("logs") or [] if isinstance(e, dict)}
        if path not in listed:  # only what the index lists: never a path of the caller's making
            abort(404, f"the archive of {namespace}/{name} holds no {path!r}")
        body = store.read(where, path)
    except ArchiveStoreError as exc:
        abort(503, str(exc))
    if body is None:
        abort(404, f"{path} is listed but missing from the archive")
    filename = f"{namespace}-{name}-{path.replace('/', '-')}"
    return Response(
        body,
        mimetype="text/plain; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


# --- actions ---------------------------------------------------------------------------------------------

_LOCAL_PATH = re.compile(r"/(?![/\\])[^\x00-\x20\x7f\\]*")


def _back(default: str) -> Response:
    """Where the form came from (a path of this console only), else `default`."""
    target = request.form.get("next", "")
    # A path of this console: "/" then no "/" or "\\" ("//host", "/\\host" are other sites to a
    # browser), and no backslash, space or control character anywhere (a browser drops tabs and
    # newlines from a URL: "/\t/host" is "//host" to it).
    if not _LOCAL_PATH.fullmatch(target):
        target = default
    return redirect(target, code=303)


def _job_action(verb: str) -> tuple[auth.Who, str, str, str | None]:
    """Who acts, on which job (the form's namespace, name and kind), once they may `verb` it."""
    person = auth.who()
    auth.check_csrf()
    namespace, name, kind = _job_form()
    auth.require(person, verb, rights.DELETIONS, namespace, name)
    return person, namespace, name, kind


@contextmanager
def _answering_lookups() -> Iterator[None]:
    """A job not found answers 404; one the name leaves open (several kinds), or already kept, 409."""
    try:
        yield
    except operations.NotFound as exc:
        abort(404, str(exc))
    except (operations.Ambiguous, operations.AlreadyKept) as exc:
        abort(409, str(exc))


def _job_form() -> tuple[str, str, str | None]:
    namespace, name = request.form.get("namespace", ""), request.form.get("name", "")
    try:
        check_namespace(namespace, "namespace")
        check_name(name, "name")
    except InvalidIdentity as exc:
        abort(400, str(exc))
    return namespace, name, request.form.get("kind") or None


def _acted(message: str) -> None:
    flash(message, "done")


@blueprint.post("/actions/postpone")
def postpone() -> Response:
    person, namespace, name, kind = _job_action(rights.POSTPONE)
    try:
        seconds = parse_duration(request.form.get("duration", ""))
    except ValueError as exc:
        abort(400, f"duration: {exc} (e.g. 2h, 3d)")
    if seconds <= 0:
        abort(400, "duration: must be more than zero (e.g. 2h, 3d)")
    with _answering_lookups():
        moved = _ops().postpone(namespace, name, seconds, kind, by=person.by)
    _acted(
        f"Postponed {namespace}/{name}: now due {time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime(moved.due))} "
        f"(as `jobttl postpone {namespace}/{name} {request.form.get('duration')}`, by {person.user.name})"
    )
    return _back(url_for("console.pending"))


@blueprint.post("/actions/keep")
def keep() -> Response:
    person, namespace, name, kind = _job_action(rights.KEEP)
    with _answering_lookups():
        _ops().cancel(namespace, name, kind, by=person.by)
    _acted(
        f"Kept {namespace}/{name}: jobttl will not delete it (as `jobttl cancel {namespace}/{name}`, "
        f"by {person.user.name})"
    )
    return _back(url_for("console.pending"))


@blueprint.post("/actions/cancel")
def cancel() -> Response:
    """Take back an operator's keep or postpone (`jobttl cancel --undo`, `jobttl postpone --undo`)."""
    person, namespace, name, kind = _job_action(rights.CANCEL)
    action = request.form.get("action", "")
    if action not in operations.UNDOABLE:
        abort(400, f"action: expected one of {', '.join(operations.UNDOABLE)}, got {action[:50]!r}")
    with _answering_lookups():
        _ops().undo(namespace, name, action, kind, by=person.by)
    _acted(
        f"Took back the {action} of {namespace}/{name}: it is decided again from the job and the policy "
        f"(as `jobttl {action} --undo {namespace}/{name}`, by {person.user.name})"
    )
    return _back(url_for("console.job", namespace=namespace, name=name))


@blueprint.post("/actions/confirm")
def confirm() -> Response:
    """Release exactly the held set shown (its id): `jobttl resync --confirm ID`, run by a worker."""
    person = auth.who()
    auth.check_csrf()
    auth.require(person, rights.CONFIRM, rights.REVIEWS)
    held_id = request.form.get("held", "")
    ops = _ops()
    try:
        job_id = ops.confirm_held(held_id, by=person.by)
    except operations.NotFound as exc:
        abort(409, str(exc))
    report = _wait_for(ops, job_id)
    if report is None:
        flash(
            f"Confirmation of {held_id} booked (resync {job_id}); no worker has run it yet (another resync may be "
            "running: it waits for it): this page shows the held set until one does",
            "pending",
        )
    elif report.get("status") == "done":
        _acted(
            f"Confirmed {held_id}: the held deletions are released to the workers (as `jobttl resync --confirm "
            f"{held_id}`, by {person.user.name})"
        )
    else:
        flash(
            f"The worker's resync answered {report.get('status')}: nothing was confirmed"
            + (f" ({'; '.join(report.get('errors') or [])})" if report.get("errors") else ""),
            "error",
        )
    return _back(url_for("console.held"))


def _wait_for(ops: operations.Operations, job_id: str) -> dict[str, Any] | None:
    """The resync's report once a worker ran it, waiting up to CONFIRM_WAIT (polling its RQ job)."""
    deadline = time.monotonic() + CONFIRM_WAIT
    while True:
        report = ops.resync_result(job_id)
        if report is not None or time.monotonic() > deadline:
            return report
        time.sleep(0.2)


# --- sign-in ---------------------------------------------------------------------------------------------


@blueprint.route("/signin", methods=["GET", "POST"])
def signin() -> Response | str:
    if _context().access is None:
        return redirect(url_for("console.overview"), code=303)
    problem = request.args.get("problem")
    if request.method == "POST":
        auth.check_csrf()
        token = request.form.get("token", "")
        try:
            auth.sign_in(token)
        except reviews.Unauthenticated as exc:
            problem = str(exc)
        except reviews.AccessUnavailable as exc:
            abort(503, str(exc))
        else:
            return _back(url_for("console.overview"))
    return render_template(
        "signin.html", who=None, csrf=auth.csrf_token(), problem=problem, next=request.values.get("next", "/")
    ), 401 if problem else 200


@blueprint.post("/signout")
def signout() -> Response:
    auth.check_csrf()
    auth.sign_out()
    return redirect(url_for("console.signin"), code=303)


@blueprint.get("/healthz")
def healthz() -> Response:
    return Response("ok", mimetype="text/plain")


# --- errors ----------------------------------------------------------------------------------------------


@blueprint.app_errorhandler(auth.SignInNeeded)
def sign_in_needed(exc: auth.SignInNeeded) -> Response | tuple[str, int]:
    if request.method == "GET" and "text/html" in request.headers.get("Accept", "text/html"):
        query = urlencode({"next": request.full_path.rstrip("?"), "problem": str(exc)})
        return redirect(f"{url_for('console.signin')}?{query}", code=303)
    response = Response(f"{exc}\n", status=401, mimetype="text/plain")
    response.headers["WWW-Authenticate"] = 'Bearer realm="jobttl-console"'
    return response


@blueprint.app_errorhandler(RedisError)
def redis_unavailable(exc: RedisError) -> tuple[str, int]:
    return render_template("error.html", who=None, code=503, message=f"Redis is unavailable, retry later: {exc}"), 503
