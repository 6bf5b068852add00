"""`jobttl manifests rbac|sources|check`: the cluster manifests that follow the policy's kinds.

`rbac` prints the source's and the worker's ClusterRoles, `sources` the ApiServerSource's
resources and the Trigger's kind filter, both from the policy's kinds (built in and declared);
`check -f FILE` reads rendered manifests (`kubectl kustomize knative/`, `helm template REL
charts/jobttl`; `-` for stdin) and lists what they lack for those kinds, exiting 1 if anything.
Its policy: --policy FILE, else the one the manifests give the worker (its JOBTTL_POLICY, from a
ConfigMap in them), else JOBTTL_POLICY's here (the built-in defaults when unset). Offline: no
cluster, no Redis.
"""

from __future__ import annotations

import argparse
import sys

import yaml

from jobttl.cli.parsing import add_command
from jobttl.core.runtime.config import Settings
from jobttl.core.domain.deploy.manifests import (
    cluster_roles,
    missing,
    mounted_policy,
    readable,
    source_resources,
    trigger_kinds,
    workloads,
)
from jobttl.core.domain.rules.policy import Policy, PolicyError, load_policy, loads_policy


ENVIRONMENT = ("JOBTTL_POLICY",)


def add_commands(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands,
        "manifests",
        run,
        "the RBAC and event sources the policy's kinds need, or what rendered manifests lack for them (offline)",
        ENVIRONMENT,
        quiet=True,
    )
    parser.add_argument(
        "what",
        choices=("rbac", "sources", "check"),
        help="rbac: the ClusterRoles; sources: the ApiServerSource resources and Trigger filter; "
        "check: what -f FILE lacks for its worker, its event source (ApiServerSource or "
        "`jobttl watch`) and its sink, found by what they run (exit 1 if anything)",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="the policy (default: for check, the one the manifests "
        "give the worker; else JOBTTL_POLICY's, else the built-in "
        "defaults: the kinds enabled by default)",
    )
    parser.add_argument(
        "-f",
        "--filename",
        metavar="FILE",
        help="rendered manifests for check, e.g. "
        "`kubectl kustomize knative/ | jobttl manifests "
        "check -f -`, `helm template REL charts/jobttl | "
        "...`; - for stdin (default: none; check needs it)",
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        policy = load_policy(args.policy) if args.policy else settings.policy
    except PolicyError as exc:
        print(f"jobttl: invalid policy: {exc}", file=sys.stderr)
        return 2
    if args.what == "rbac":
        yaml.safe_dump_all(cluster_roles(policy), sys.stdout, sort_keys=False)
        return 0
    if args.what == "sources":
        yaml.safe_dump(
            {
                "apiServerSource": {"spec": {"resources": source_resources(policy)}},
                "trigger": {"spec": {"filters": [{"any": trigger_kinds(policy)}]}},
            },
            sys.stdout,
            sort_keys=False,
        )
        return 0
    return _check(args, policy, settings)


def _check(args: argparse.Namespace, policy: Policy, settings: Settings) -> int:
    """`check -f FILE`: what the manifests lack for the policy's kinds (exit 1 if anything, 2 if unreadable)."""
    if not args.filename:
        print("jobttl: manifests check needs -f FILE (rendered manifests; - for stdin)", file=sys.stderr)
        return 2
    objects = _read_objects(args.filename)
    if objects is None:
        return 2
    origin = f"--policy {args.policy}" if args.policy else None
    if origin is None:
        # Read from the objects it can read: one it cannot is named among the problems below.
        policy, origin = _deployed_policy(readable(objects)[0], settings)
        if policy is None:
            return 2
    problems = missing(policy, objects)
    print(f"policy: {origin}")
    for problem in problems:
        print(problem)
    if not problems:
        print(f"every enabled kind ({len(policy.kinds)}) has its RBAC and its source")
    return 1 if problems else 0


def _read_objects(filename: str) -> list[dict] | None:
    """The objects in FILE (``-``: stdin), Lists unwrapped; None once stderr says why there are none."""
    source = "stdin" if filename == "-" else filename
    try:
        text = sys.stdin.read() if filename == "-" else open(filename, encoding="utf-8").read()
        objects = [o for o in yaml.safe_load_all(text) if isinstance(o, dict)]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        print(f"jobttl: cannot read {source}: {exc}", file=sys.stderr)
        return None
    objects = [item for o in objects for item in _items(o)]
    if not objects:
        print(f"jobttl: {source} holds no Kubernetes objects", file=sys.stderr)
        return None
    return objects


def _items(obj: dict) -> list[dict]:
    """A `kind: List` (kubectl get -o yaml) as its items."""
    if obj.get("kind") == "List" and isinstance(obj.get("items"), list):
        return [i for i in obj["items"] if isinstance(i, dict)]
    return [obj]


def _deployed_policy(objects: list[dict], settings: Settings) -> tuple[Policy | None, str]:
    """The policy the manifests' worker reads, and where from; else JOBTTL_POLICY's here."""
    here = f"JOBTTL_POLICY's ({settings.policy_path})" if settings.policy_path else "the built-in defaults"
    workers = workloads(objects, "worker")
    if not workers:
        return settings.policy, f"{here} (no worker in the manifests to read one from)"
    text, origin = mounted_policy(objects, workers[0])
    if text is None:
        return settings.policy, f"{here}: {origin}; give --policy FILE to check against that one"
    try:
        return loads_policy(text, origin), origin
    except PolicyError as exc:
        print(f"jobttl: invalid policy in the manifests ({origin}): {exc}", file=sys.stderr)
        return None, origin
