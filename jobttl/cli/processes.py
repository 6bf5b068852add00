"""`jobttl sink|worker|watch|console|notify`: the processes jobttl runs, each until it is stopped.

Each imports its process only when run, so that one process never loads another's dependencies.
"""

from __future__ import annotations

import argparse

from jobttl.cli.parsing import add_command, count, port
from jobttl.core.runtime.config import Settings

# The settings that matter to each process, most important first (`jobttl --help` lists all).
ENVIRONMENT = {
    "sink": (
        "JOBTTL_REDIS_URL",
        "JOBTTL_QUEUE",
        "JOBTTL_POLICY",
        "KUBECONFIG",
        "JOBTTL_SINK_SOURCES",
        "JOBTTL_SINK_OIDC_AUDIENCE",
        "JOBTTL_READ_API",
        "JOBTTL_MAX_EVENT_BYTES",
    ),
    "worker": (
        "JOBTTL_REDIS_URL",
        "JOBTTL_QUEUE",
        "JOBTTL_POLICY",
        "KUBECONFIG",
        "JOBTTL_PROPAGATION_POLICY",
        "JOBTTL_RESYNC_INTERVAL",
        "JOBTTL_DELETE_RATE",
        "JOBTTL_WORKER_METRICS_PORT",
    ),
    "watch": ("KUBECONFIG", "JOBTTL_POLICY"),
    "console": (
        "JOBTTL_REDIS_URL",
        "JOBTTL_QUEUE",
        "JOBTTL_POLICY",
        "KUBECONFIG",
        "JOBTTL_CONSOLE_AUTH",
        "JOBTTL_CONSOLE_SESSION_KEY_FILE",
    ),
    "notify": ("JOBTTL_REDIS_URL", "JOBTTL_POLICY", "JOBTTL_CONSOLE_URL", "JOBTTL_NOTIFY_METRICS_PORT"),
}


def add_commands(commands: argparse._SubParsersAction) -> None:
    def process(name: str, run, help: str) -> argparse.ArgumentParser:
        return add_command(commands, name, run, help, ENVIRONMENT[name])

    sink = process("sink", run_sink, "serve the CloudEvents sink (and the read API, /metrics, /readyz)")
    sink.add_argument("--host", default="0.0.0.0", help="address to listen on")
    sink.add_argument("--port", type=port, default=8080, help="port to listen on")
    sink.add_argument("--threads", type=count, default=8, help="request threads (waitress)")

    worker = process("worker", run_worker, "run the deleting RQ worker with its scheduler")
    worker.add_argument("--burst", action="store_true", help="run the jobs due now, then exit")

    watch = process("watch", run_watch, "watch job kinds and post ApiServerSource-style CloudEvents to a sink")
    watch.add_argument(
        "--sink", required=True, metavar="URL", help="the sink to POST events to, e.g. http://jobttl-sink"
    )
    watch.add_argument("--host", default="0.0.0.0", help="address to serve the probes on")
    watch.add_argument(
        "--port",
        type=port,
        default=8081,
        help="port of the probes: GET /healthz (every kind's loop alive), GET /readyz (every kind "
        "listed once); 0: none",
    )

    console = process(
        "console",
        run_console,
        "serve the web console: what goes when, the held review, history, "
        "and the actions of the commands below, for Kubernetes users with "
        "the right",
    )
    console.add_argument(
        "--host", default="0.0.0.0", help="address to listen on (JOBTTL_CONSOLE_AUTH=none: a loopback address only)"
    )
    console.add_argument("--port", type=port, default=8081, help="port to listen on")
    console.add_argument("--threads", type=count, default=4, help="request threads (waitress)")

    process(
        "notify",
        run_notify,
        "send the notifications the policy's notify asks for (digests of the audit trail, through Apprise)",
    )


def run_sink(args: argparse.Namespace, settings: Settings) -> None:
    from jobttl.sink.server import serve

    serve(settings, host=args.host, port=args.port, threads=args.threads)


def run_worker(args: argparse.Namespace, settings: Settings) -> None:
    from jobttl.worker.runner import run

    run(settings, burst=args.burst)


def run_watch(args: argparse.Namespace, settings: Settings) -> None:
    from jobttl.core.kube.client import KubeClient, load_api_client
    from jobttl.watcher.watch import run

    # A watch per kind, each holding a connection: a pool as large, or urllib3 discards them.
    api_client = load_api_client(settings.kubeconfig, pool_size=len(settings.policy.kinds) + 2)
    kube = KubeClient(api_client, timeout=settings.api_timeout, component="watch")
    run(kube, settings.policy.kinds, args.sink, port=args.port or None, host=args.host)


def run_console(args: argparse.Namespace, settings: Settings) -> None:
    from jobttl.console.server import serve

    serve(settings, host=args.host, port=args.port, threads=args.threads)


def run_notify(args: argparse.Namespace, settings: Settings) -> None:
    from jobttl.notifier.runner import run

    run(settings)
