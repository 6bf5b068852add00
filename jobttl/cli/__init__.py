"""The ``jobttl`` command: one entry point for every process jobttl runs, and the operator's tools.

Layers: this command imports the processes (`jobttl.sink`, `jobttl.worker`,
`jobttl.watcher`, `jobttl.notifier`) and the core; nothing imports it.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import re
import shlex
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path

from jobttl.core.runtime import config, logs
from jobttl.core.services import operations
from jobttl.core.store import redisconn
from jobttl.core.runtime.config import ConfigError, Settings

log = logging.getLogger("jobttl")

# The settings that matter to each command, most important first (`jobttl --help` lists all).
OPERATOR_ENV = ("JOBTTL_REDIS_URL", "JOBTTL_QUEUE", "JOBTTL_REDIS_CA_FILE")
COMMAND_ENV = {
    "sink": ("JOBTTL_REDIS_URL", "JOBTTL_QUEUE", "JOBTTL_POLICY", "KUBECONFIG", "JOBTTL_SINK_SOURCES",
             "JOBTTL_SINK_OIDC_AUDIENCE", "JOBTTL_READ_API", "JOBTTL_MAX_EVENT_BYTES"),
    "worker": ("JOBTTL_REDIS_URL", "JOBTTL_QUEUE", "JOBTTL_POLICY", "KUBECONFIG", "JOBTTL_PROPAGATION_POLICY",
               "JOBTTL_RESYNC_INTERVAL", "JOBTTL_DELETE_RATE", "JOBTTL_WORKER_METRICS_PORT"),
    "watch": ("KUBECONFIG", "JOBTTL_POLICY"),
    "console": ("JOBTTL_REDIS_URL", "JOBTTL_QUEUE", "JOBTTL_POLICY", "KUBECONFIG", "JOBTTL_CONSOLE_AUTH",
                "JOBTTL_CONSOLE_SESSION_KEY_FILE"),
    "notify": ("JOBTTL_REDIS_URL", "JOBTTL_POLICY", "JOBTTL_CONSOLE_URL", "JOBTTL_NOTIFY_METRICS_PORT"),
    "resync": ("JOBTTL_REDIS_URL", "JOBTTL_QUEUE", "KUBECONFIG", "JOBTTL_POLICY", "JOBTTL_RESYNC_MAX_DELETIONS",
               "JOBTTL_RESYNC_MAX_SHARE"),
    "explain": ("JOBTTL_POLICY",),
    "logs": ("JOBTTL_POLICY",),
    "manifests": ("JOBTTL_POLICY",),
}


def _environment_epilog(names: tuple[str, ...]) -> str:
    """The environment variables a command reads, with their defaults, from the one SETTINGS table."""
    described = {env: (default, meaning) for env, default, meaning in config.describe()}
    lines = ["environment (the ones that matter here; `jobttl --help` lists every setting):"]
    for env in names:
        default, meaning = described[env]
        lines.append(f"  {env} (default: {default})")
        lines += textwrap.wrap(meaning, 76, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def _sink(args: argparse.Namespace, settings: Settings) -> None:
    from jobttl.sink.server import serve

    serve(settings, host=args.host, port=args.port, threads=args.threads)


def _worker(args: argparse.Namespace, settings: Settings) -> None:
    from jobttl.worker.runner import run

    run(settings, burst=args.burst)


def _resync(args: argparse.Namespace, settings: Settings) -> int:
    from jobttl.core.store.guard import HeldDeletions
    from jobttl.worker import resync, tasks

    from redis.exceptions import RedisError

    try:
        _connect(settings, args.force)  # a resync writes the schedule: never into a Redis that is not jobttl's
    except (operations.UnknownRedis, RedisError) as exc:
        return _redis_problem(exc, settings)
    ctx = tasks.configure(settings, notices=False)
    report = resync.run(ctx, confirm=args.confirm)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        from jobttl.cli import tables

        tables.resync(report.as_dict(), [h.ref for h in HeldDeletions(ctx.redis).all()[:10]], settings)
    return {"done": 0, "held": 3, "already-running": 4, "stale-confirmation": 5}.get(report.status, 1)


def _watch(args: argparse.Namespace, settings: Settings) -> None:
    from jobttl.core.kube.client import KubeClient, load_api_client
    from jobttl.watcher.watch import run

    # A watch per kind, each holding a connection: a pool as large, or urllib3 discards them.
    api_client = load_api_client(settings.kubeconfig, pool_size=len(settings.policy.kinds) + 2)
    kube = KubeClient(api_client, timeout=settings.api_timeout, component="watch")
    run(kube, settings.policy.kinds, args.sink, port=args.port or None, host=args.host)


def _console(args: argparse.Namespace, settings: Settings) -> None:
    from jobttl.console.server import serve

    serve(settings, host=args.host, port=args.port, threads=args.threads)


def _notify(args: argparse.Namespace, settings: Settings) -> None:
    from jobttl.notifier.runner import run

    run(settings)


def _logs(args: argparse.Namespace, settings: Settings) -> int:
    """Print an archived log: reads the archive store only (the job and its pods may be long gone)."""
    from jobttl.core.domain.archive import choose_logs
    from jobttl.core.kube.archivestore import ArchiveStoreError, latest, open_store

    spec = settings.policy.archive_store
    if spec is None:
        print("jobttl: the policy (JOBTTL_POLICY) sets no archive.store: nothing is archived", file=sys.stderr)
        return 1
    store = open_store(spec)
    namespace, name = args.job
    try:
        found = latest(store, namespace, name, args.kind)
        if found is None:
            print(f"jobttl: no archive of {args.kind + ' ' if args.kind else ''}{namespace}/{name} in {store.url}",
                  file=sys.stderr)
            return 1
        where, document = found
        chosen = choose_logs(document, args.pod, args.container, args.previous)
        if args.list or not chosen:
            from jobttl.cli import tables

            tables.logs(store.location(where), document, chosen if chosen else choose_logs(document) +
                        choose_logs(document, previous=True))
            return 0 if chosen else 1
        for entry in chosen:
            if len(chosen) > 1:
                print(f"==> {entry['pod']}/{entry['container']}{' (previous)' if entry['previous'] else ''} <==",
                      flush=True)
            sys.stdout.buffer.write(store.read(where, entry["path"]) or b"")
            sys.stdout.buffer.flush()
    except ArchiveStoreError as exc:
        print(f"jobttl: {exc}", file=sys.stderr)
        return 1
    return 0


def _explain(args: argparse.Namespace, settings: Settings) -> int:
    from jobttl.cli import explain

    return explain.main(args, settings)


def _manifests(args: argparse.Namespace, settings: Settings) -> int:
    from jobttl.cli import manifests

    return manifests.main(args, settings)


# --- operator commands: Redis only, never the cluster -----------------------------------------
# Each returns what it prints with --json; jobttl/cli/tables.py has the same-named function
# that prints it for humans.

def _connect(settings: Settings, force: bool = False) -> operations.Operations:
    from jobttl.core.services import graph
    from jobttl.core.store import redisconn, upgrade

    shared = graph.build(settings, redisconn.CLI, metrics=False)
    ops = shared.operations()
    if not force:
        ops.check_redis()  # a Redis with no jobttl schedule is probably not the one meant
    upgrade.ensure(shared.redis, shared.audit.tombstone_seconds, mark=False)
    return ops


def _status(args, ops) -> dict:
    return ops.status()


def _held(args, ops) -> dict:
    return ops.held()


def _pending(args, ops) -> dict:
    items, total = ops.pending(args.namespace, args.kind, limit=args.limit)
    now = time.time()
    return {"items": [p.as_dict(now) for p in items], "total": total,
            "dryRunWouldDelete": ops.would_delete(args.namespace, args.kind)}


def _show(args, ops) -> dict:
    return ops.find(*args.job, args.kind)


def _history(args, ops) -> dict:
    namespace, name = args.job if args.job else (args.namespace, None)
    return {"items": ops.history(args.since, args.limit, args.event, namespace, name)}


def _failed(args, ops) -> dict:
    return {"items": [f.as_dict() for f in ops.failed()], "stuck": ops.stuck()}


def _retry(args, ops) -> dict:
    return {"requeued": ops.retry(args.job_id)}


def _cancel(args, ops) -> dict:
    if args.undo:
        return ops.undo(*args.job, "cancel", args.kind).as_dict()
    return ops.cancel(*args.job, args.kind).as_dict(time.time())


def _postpone(args, ops) -> dict:
    if args.undo:
        return ops.undo(*args.job, "postpone", args.kind).as_dict()
    return ops.postpone(*args.job, args.duration, args.kind).as_dict(time.time())


def _operate(args: argparse.Namespace, settings: Settings) -> int:
    """Run an operator command: 0 done, 1 nothing (or several things) by that name or no Redis."""
    from redis.exceptions import RedisError

    from jobttl.cli import tables
    from jobttl.core.domain.identity import InvalidIdentity

    try:
        data = args.operation(args, _connect(settings, args.force))
    except (operations.UnknownRedis, RedisError) as exc:
        return _redis_problem(exc, settings)
    except (operations.NotFound, operations.Ambiguous, operations.AlreadyKept, InvalidIdentity) as exc:
        print(f"jobttl: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        getattr(tables, args.command)(data)
    return 0


def _redis_problem(exc: Exception, settings: Settings) -> int:
    """Exit 1, naming the Redis used: the usual cause is JOBTTL_REDIS_URL pointing elsewhere."""
    if isinstance(exc, operations.UnknownRedis):
        print(f"jobttl: {exc} (JOBTTL_REDIS_URL={redisconn.redacted(settings.redis_url)}); --force to use it anyway",
              file=sys.stderr)
    else:
        print(f"jobttl: cannot use Redis (JOBTTL_REDIS_URL={redisconn.redacted(settings.redis_url)}): {exc}", file=sys.stderr)
        from redis.exceptions import ConnectionError as RedisConnectionError

        hint = _stale_run_env(settings.redis_url) if isinstance(exc, RedisConnectionError) else None
        if hint:
            print(f"jobttl: {hint}", file=sys.stderr)
    return 1


def _stale_run_env(redis_url: str) -> str | None:
    """Why a Redis of `make run` may not answer: the shell sourced the `.run/env` of an earlier run.

    `.run/env` names itself in JOBTTL_RUN_ENV; without it (a file from before that), `.run/env`
    in the current folder is looked at. `make run` picks new ports each time and removes the
    file when it stops, so a file now gone or naming another Redis says what happened.
    """
    sourced = os.environ.get("JOBTTL_RUN_ENV")
    path = Path(sourced) if sourced else Path(".run", "env")
    try:
        text = path.read_text()
    except FileNotFoundError:
        if not sourced:
            return None
        return (f"{path} is gone: the `make run` that wrote it has stopped. Start it again (`make run`), "
                f"then `. {path}` again in this shell")
    except OSError:
        return None
    current = None
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "export" and words[1].startswith("JOBTTL_REDIS_URL="):
            current = words[1].partition("=")[2]
    if current is None or current == redis_url:
        return None
    if not sourced:  # this shell may never have sourced it: say what the file says, no more
        return (f"{path} names another Redis, {current} (`make run` picks new ports each time it starts): "
                f"if that is the one meant, `. {path}` (or use .run/bin/jobttl, which reads it each time)")
    return (f"`make run` was restarted since this shell sourced {path}: its Redis is now at {current}. "
            f"Run `. {path}` again (or use .run/bin/jobttl, which reads it each time)")


def _job(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    return namespace, name


def _duration(text: str) -> int:
    from jobttl.core.domain.durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _later(text: str) -> int:
    """How much later: a duration above zero (`-5m` reaches here as a value: see _CommandParser)."""
    if text.startswith("-") or _duration(text) == 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive, got {text!r} (to take a postpone back: "
                                         "jobttl postpone --undo NAMESPACE/NAME)")
    return _duration(text)


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 0 to 65535, got {text!r}")
    return int(text)


def _since(text: str) -> float:
    """A duration back from now (`2h`) or a point in time (RFC 3339), as Unix seconds."""
    try:
        return time.time() - _duration(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration such as 2h or an RFC 3339 time, got {text!r}") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time zone (e.g. Z), got {text!r}")
    return when.timestamp()


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Every flag says its default (or that it is required); epilogs are kept as written.

    Unlike argparse's ArgumentDefaultsHelpFormatter it never prints "(default: None)": a flag
    without a value of its own says in words what happens without it ("default: every
    namespace"), which `tests/operate/test_help.py` checks for every command.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or "default" in text or action.default is argparse.SUPPRESS:
            return text
        if action.required:
            return f"{text} (required)"
        if isinstance(action, argparse._StoreTrueAction):
            return f"{text} (default: off)"
        if action.default is None:
            return text  # the help must say what happens without it
        return f"{text} (default: %(default)s)"


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: its own mistakes are reported with its own usage.

    argparse leaves an unknown option to the top-level parser, which prints `jobttl`'s usage:
    `jobttl pending --namespce x` would not show what `pending` takes. Values that look like a
    negative duration (`-5m`) are values, so that their check can say what is wrong with them.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\d+$|^-\d*\.\d+$|^-(\d+[smhdw])+$")

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            known = [option for action in self._actions for option in action.option_strings]
            guesses = [difflib.get_close_matches(extra.split("=")[0], known, n=1) for extra in extras
                       if extra.startswith("-")]
            hint = "; did you mean " + ", ".join(g[0] for g in guesses if g) + "?" if any(guesses) else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed, extras


def _add_operator_commands(commands) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_argument("--force", action="store_true",
                        help="use this Redis even if it holds no jobttl schedule")

    def command(name: str, operation, help: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help, description=help, parents=[common], formatter_class=_Formatter,
                                     epilog=_environment_epilog(OPERATOR_ENV))
        parser.set_defaults(run=_operate, operation=operation)
        return parser

    def job_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("job", type=_job, metavar="NAMESPACE/NAME", help="the job")
        parser.add_argument("--kind", help="e.g. TFJob, or Job.batch.volcano.sh where a Kind names several (Job: "
                                                "batch/v1's); needed only when jobs of several kinds share the name "
                                                "(default: any kind)")

    command("status", _status, "counts of pending, due, failed, held and deleted jobs; health of Redis, workers, "
                               "the scheduler and the clocks")

    pending = command("pending", _pending, "pending deletions in due order, with their TTL and where it came from")
    pending.add_argument("--namespace", help="only this namespace (default: every namespace)")
    pending.add_argument("--kind", help="only this kind, e.g. TFJob, Job (batch/v1's), Job.batch.volcano.sh "
                                        "(default: every kind)")
    pending.add_argument("--limit", type=_count, default=100, help="at most this many")

    job_arguments(command("show", _show, "everything known about one job: pending deletion, the latest decision "
                                         "about every UID it had (why it is kept, too), history, tombstone"))

    history = command("history", _history, "the audit trail, newest first")
    history.add_argument("job", nargs="?", type=_job, metavar="NAMESPACE/NAME",
                         help="only this job's entries, every UID that had the name (default: every job)")
    history.add_argument("--since", type=_since, metavar="DURATION_OR_TIME",
                         help="only entries since then: a duration back from now (2h) or an RFC 3339 time "
                              "(2030-01-31T00:00:00Z) (default: the whole trail)")
    history.add_argument("--event", help="only this event, e.g. deleted, delete-requested, cancelled, failed, stuck "
                                         "(default: every event)")
    history.add_argument("--namespace", help="only this namespace (default: every namespace)")
    history.add_argument("--limit", type=_count, default=50, help="at most this many")

    command("held", _held, "deletions the blast-radius guard holds for confirmation (on a first install: those "
                           "already due at install), with the policy rule behind each and the id to confirm")

    command("failed", _failed, "failed deletions, with their RQ job id and the error, and stuck ones")

    retry = command("retry", _retry, "run a failed deletion again")
    which = retry.add_mutually_exclusive_group(required=True)
    which.add_argument("job_id", nargs="?", metavar="JOB_ID",
                       help="the RQ job id, from `jobttl failed` (or --all-failed)")
    which.add_argument("--all-failed", action="store_true", help="every failed deletion")

    cancel = command("cancel", _cancel, "never delete this job (recorded in history); with nothing pending, the "
                                        "keep is recorded for when a deletion would be booked")
    job_arguments(cancel)
    cancel.add_argument("--undo", action="store_true",
                        help="take a cancel back: the deletion is decided again from the job and the policy (the "
                             "workers are asked for a resync)")

    postpone = command("postpone", _postpone, "delete this job later than planned")
    job_arguments(postpone)
    postpone.add_argument("duration", type=_later, nargs="?", metavar="DURATION",
                          help="how much later, e.g. 2h or 3d (required, unless --undo)")
    postpone.add_argument("--undo", action="store_true",
                          help="take a postpone back: the deletion is decided again from the job and the policy "
                               "(the workers are asked for a resync)")


def _settings_epilog() -> str:
    lines = ["settings (environment variables, checked at start):"]
    lines += [f"  {env:<30} {default:<26} {meaning}" for env, default, meaning in config.describe()]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobttl", formatter_class=_Formatter,
        description="Delete finished Kubernetes training jobs a time-to-live after they finish.",
        epilog=_settings_epilog(),
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_CommandParser)

    def process(name: str, run, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help, formatter_class=_Formatter,
                                  epilog=_environment_epilog(COMMAND_ENV[name]))
        sub.set_defaults(run=run)
        return sub

    sink = process("sink", _sink, "serve the CloudEvents sink (and the read API, /metrics, /readyz)")
    sink.add_argument("--host", default="0.0.0.0", help="address to listen on")
    sink.add_argument("--port", type=_port, default=8080, help="port to listen on")
    sink.add_argument("--threads", type=_count, default=8, help="request threads (waitress)")

    worker = process("worker", _worker, "run the deleting RQ worker with its scheduler")
    worker.add_argument("--burst", action="store_true", help="run the jobs due now, then exit")

    watch = process("watch", _watch, "watch job kinds and post ApiServerSource-style CloudEvents to a sink")
    watch.add_argument("--sink", required=True, metavar="URL",
                       help="the sink to POST events to, e.g. http://jobttl-sink")
    watch.add_argument("--host", default="0.0.0.0", help="address to serve the probes on")
    watch.add_argument("--port", type=_port, default=8081,
                       help="port of the probes: GET /healthz (every kind's loop alive), GET /readyz (every kind "
                            "listed once); 0: none")

    console = process("console", _console, "serve the web console: what goes when, the held review, history, and "
                                           "the actions of the commands below, for Kubernetes users with the right")
    console.add_argument("--host", default="0.0.0.0", help="address to listen on (JOBTTL_CONSOLE_AUTH=none: a "
                                                           "loopback address only)")
    console.add_argument("--port", type=_port, default=8081, help="port to listen on")
    console.add_argument("--threads", type=_count, default=4, help="request threads (waitress)")

    process("notify", _notify, "send the notifications the policy's notify asks for (digests of the audit trail, "
                               "through Apprise)")

    resync = process("resync", _resync, "make the schedule in Redis match the cluster, now")
    resync.add_argument("--confirm", metavar="HELD_ID",
                        help="delete the deletions held by the blast-radius guard (those still due); HELD_ID, from "
                             "the report, makes sure they are the ones you reviewed (default: hold them again if "
                             "there are too many)")
    resync.add_argument("--json", action="store_true", help="print the report as JSON")
    resync.add_argument("--force", action="store_true", help="use this Redis even if it holds no jobttl schedule")

    explain = process("explain", _explain, "what jobttl would decide for objects in a file, and why; or, with "
                                           "--crd, whether the kinds' declared paths are in their CRDs (offline: "
                                           "no cluster, no Redis)")
    explain.add_argument("-f", "--filename", metavar="FILE",
                         help="YAML or JSON objects (`kubectl get -o yaml` output and List objects too); - for stdin "
                              "(default: none; one of -f and --crd is required)")
    explain.add_argument("--crd", metavar="FILE",
                         help="check the policy's kinds against the CustomResourceDefinitions in FILE (`kubectl get "
                              "crd NAME -o yaml`, release manifests; - for stdin) as the worker does at start, instead "
                              "of deciding objects (default: none)")
    explain.add_argument("--policy", metavar="FILE",
                         help="the policy to decide with (default: JOBTTL_POLICY's, else the built-in defaults)")
    explain.add_argument("--now", metavar="RFC3339", help="decide as of this time (default: now)")
    explain.add_argument("--json", action="store_true", help="print JSON (the documented, stable shape)")

    logs = process("logs", _logs, "print an archived log of a job, also after it is gone (reads the archive store "
                                  "the policy names: no cluster, no Redis)")
    logs.add_argument("job", type=_job, metavar="NAMESPACE/NAME", help="the job")
    logs.add_argument("--kind", help="e.g. TFJob, or Job.batch.volcano.sh where a Kind names several (Job: "
                                      "batch/v1's); needed only when jobs of several kinds share the name "
                                      "(default: the newest archive of any kind)")
    logs.add_argument("--pod", help="only this pod's logs (default: every pod)")
    logs.add_argument("--container", help="only this container's logs (default: every container)")
    logs.add_argument("--previous", action="store_true", help="the previous instance of a container that restarted")
    logs.add_argument("--list", action="store_true", help="list what the archive holds instead")

    manifests = process("manifests", _manifests, "the RBAC and event sources the policy's kinds need, or what "
                                                  "rendered manifests lack for them (offline)")
    manifests.add_argument("what", choices=("rbac", "sources", "check"),
                           help="rbac: the ClusterRoles; sources: the ApiServerSource resources and Trigger filter; "
                                "check: what -f FILE lacks for its worker, its event source (ApiServerSource or "
                                "`jobttl watch`) and its sink, found by what they run (exit 1 if anything)")
    manifests.add_argument("--policy", metavar="FILE", help="the policy (default: for check, the one the manifests "
                                                            "give the worker; else JOBTTL_POLICY's, else the built-in "
                                                            "defaults: the kinds enabled by default)")
    manifests.add_argument("-f", "--filename", metavar="FILE", help="rendered manifests for check, e.g. "
                                                                    "`kubectl kustomize knative/ | jobttl manifests check "
                                                                    "-f -`, `helm template REL charts/jobttl | ...`; - "
                                                                    "for stdin (default: none; check needs it)")

    _add_operator_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "postpone" and (args.duration is None) != args.undo:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices["postpone"].error("give DURATION, or --undo" if not args.undo
                                           else "--undo takes no DURATION")
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"jobttl: configuration error: {exc}", file=sys.stderr)
        return 2
    # An operator command's output is its table; its audit records are kept in Redis, and
    # logging them here too would only interleave JSON lines with it.
    quiet = args.run in (_operate, _explain, _logs, _manifests)
    logs.configure("WARNING" if quiet else settings.log_level)
    try:
        return args.run(args, settings) or 0
    except ConfigError as exc:
        print(f"jobttl: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
