"""`jobttl manifests rbac|sources|check`: the cluster manifests that follow the policy's kinds.

`rbac` prints the source's and the worker's ClusterRoles, `sources` the ApiServerSource's
resources and the Trigger's kind filter, both from the policy's kinds (built in and declared);
`check -f FILE` reads rendered manifests (`kubectl kustomize knative/`) and lists what they lack
for those kinds, exiting 1 if anything. Offline: no cluster, no Redis.
"""

from __future__ import annotations

import argparse
import sys

import yaml

from jobttl.core.config import Settings
from jobttl.core.manifests import cluster_roles, missing, source_resources, trigger_kinds
from jobttl.core.policy import PolicyError, load_policy


def main(args: argparse.Namespace, settings: Settings) -> int:
    try:
        policy = load_policy(args.policy) if args.policy else settings.policy
    except PolicyError as exc:
        print(f"jobttl: invalid policy: {exc}", file=sys.stderr)
        return 2
    if args.what == "rbac":
        yaml.safe_dump_all(cluster_roles(policy), sys.stdout, sort_keys=False)
        return 0
    if args.what == "sources":
        yaml.safe_dump({"apiServerSource": {"spec": {"resources": source_resources(policy)}},
                        "trigger": {"spec": {"filters": [{"any": trigger_kinds(policy)}]}}}, sys.stdout, sort_keys=False)
        return 0
    if not args.filename:
        print("jobttl: manifests check needs -f FILE (rendered manifests; - for stdin)", file=sys.stderr)
        return 2
    try:
        text = sys.stdin.read() if args.filename == "-" else open(args.filename, encoding="utf-8").read()
        objects = [o for o in yaml.safe_load_all(text) if isinstance(o, dict)]
    except (OSError, yaml.YAMLError) as exc:
        print(f"jobttl: cannot read {args.filename}: {exc}", file=sys.stderr)
        return 2
    problems = missing(policy, objects)
    for problem in problems:
        print(problem)
    if not problems:
        print(f"every enabled kind ({len(policy.kinds)}) has its RBAC and its source")
    return 1 if problems else 0
