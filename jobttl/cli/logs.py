"""`jobttl logs NAMESPACE/NAME`: print an archived log of a job, also after it is gone.

It reads the archive store the policy names and nothing else (no cluster, no Redis): the job
and its pods may be long gone. Exit 0 printed, 1 no archive, no matching log or no store.
"""

from __future__ import annotations

import argparse
import sys

from jobttl.cli.parsing import add_command, job
from jobttl.core.runtime.config import Settings

ENVIRONMENT = ("JOBTTL_POLICY",)


def add_commands(commands: argparse._SubParsersAction) -> None:
    logs = add_command(
        commands,
        "logs",
        run,
        "print an archived log of a job, also after it is gone (reads the "
        "archive store the policy names: no cluster, no Redis)",
        ENVIRONMENT,
        quiet=True,
    )
    logs.add_argument("job", type=job, metavar="NAMESPACE/NAME", help="the job")
    logs.add_argument(
        "--kind",
        help="e.g. TFJob, or Job.batch.volcano.sh where a Kind names several (Job: "
        "batch/v1's); needed only when jobs of several kinds share the name "
        "(default: the newest archive of any kind)",
    )
    logs.add_argument("--pod", help="only this pod's logs (default: every pod)")
    logs.add_argument("--container", help="only this container's logs (default: every container)")
    logs.add_argument("--previous", action="store_true", help="the previous instance of a container that restarted")
    logs.add_argument("--list", action="store_true", help="list what the archive holds instead")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from jobttl.core.kube.archivestore import ArchiveStoreError, open_store

    spec = settings.policy.archive_store
    if spec is None:
        print("jobttl: the policy (JOBTTL_POLICY) sets no archive.store: nothing is archived", file=sys.stderr)
        return 1
    store = open_store(spec)
    try:
        return _print_latest(store, args)
    except ArchiveStoreError as exc:
        print(f"jobttl: {exc}", file=sys.stderr)
        return 1


def _print_latest(store, args: argparse.Namespace) -> int:
    """The chosen logs of the job's newest archive, as stored; else what it holds (exit 1 if none matched)."""
    from jobttl.core.domain.decisions.archive import choose_logs
    from jobttl.core.kube.archivestore import latest

    namespace, name = args.job
    found = latest(store, namespace, name, args.kind)
    if found is None:
        print(
            f"jobttl: no archive of {args.kind + ' ' if args.kind else ''}{namespace}/{name} in {store.url}",
            file=sys.stderr,
        )
        return 1
    where, document = found
    chosen = choose_logs(document, args.pod, args.container, args.previous)
    if args.list or not chosen:
        from jobttl.cli import tables

        tables.logs(
            store.location(where),
            document,
            chosen if chosen else choose_logs(document) + choose_logs(document, previous=True),
        )
        return 0 if chosen else 1
    for entry in chosen:
        if len(chosen) > 1:
            print(
                f"==> {entry['pod']}/{entry['container']}{' (previous)' if entry['previous'] else ''} <==", flush=True
            )
        sys.stdout.buffer.write(store.read(where, entry["path"]) or b"")
        sys.stdout.buffer.flush()
    return 0
