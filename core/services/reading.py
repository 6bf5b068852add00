"""What the cluster says now, for one due deletion: the object read again, and this stage's decision
made from it (the job's own, with its keepLast limit checked against the cluster; or its pods').

The event that booked the deletion was only a hint (stale, duplicated or forged; the job may have
been re-created under the same name, or its TTL extended): the worker judges only what it reads here.
Needs the Kubernetes client, the policy and the history index it repairs; nothing else.
"""

from __future__ import annotations

from typing import Any

from jobttl.core.domain.decisions.decision import Decision, decide
from jobttl.core.domain.decisions.keeplast import Member, limit_decision, membership, ranked
from jobttl.core.store.keeplast_index import KeepLastIndex
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.model import JobKind
from jobttl.core.kube.client import KubeClient, ObjectGone
from jobttl.core.domain.rules.policy import Policy
from jobttl.core.domain.decisions.stages import pod_stage
from jobttl.core.domain.decisions.judgement import Current, Target, due_later
from jobttl.core.domain.decisions.plan import JOB_STAGE, PODS_STAGE


def reread(kube: KubeClient, kind: JobKind, ref: JobRef) -> dict[str, Any] | None:
    """The object as the API server has it now; None when it is not found."""
    try:
        return kube.get(kind, ref.namespace, ref.name)
    except ObjectGone:
        return None


class Reading:
    def __init__(self, kube: KubeClient, policy: Policy, keeplast: KeepLastIndex):
        self.kube = kube
        self.policy = policy
        self.keeplast = keeplast

    def reread(self, kind: JobKind, ref: JobRef) -> dict[str, Any] | None:
        return reread(self.kube, kind, ref)

    def decide(self, target: Target, kind: JobKind, obj: dict[str, Any], current: Current) -> Decision:
        """The decision for this stage, from the object just read: the job's own (with its history
        limit checked against the cluster when the TTL alone would not delete it now), or its pods'."""
        policy = self.policy
        decision = decide(obj, kind, policy)
        if target.stage == JOB_STAGE and policy.history_limits and due_later(target, current, decision):
            decision = self.check_limit(kind, obj, decision)
        if target.stage == PODS_STAGE:
            return pod_stage(obj, kind, policy, decision).decision
        return decision

    def check_limit(self, kind: JobKind, obj: dict[str, Any], decision: Decision) -> Decision:
        """Whether this job is beyond its group's keepLast limit, by the cluster's word, not the index's:
        the group is listed from the API server and ranked (`jobttl.core.domain.decisions.keeplast.ranked`). When the
        index said otherwise, its members the listing does not have are dropped."""
        policy = self.policy
        member = membership(obj, kind, policy, decision)
        if member is None:
            return decision
        group_by = policy.cleanup_effective(member.ref.namespace, (obj["metadata"].get("labels") or {})).get(
            "keep_last"
        )
        label = group_by.value.group_by if group_by is not None else None
        selector = f"{label}={obj['metadata']['labels'][label]}" if label else None
        listed: dict[str, Member] = {}  # by UID: a list restarted after a 410 yields its first page again
        for page in self.kube.pages(kind, namespace=member.ref.namespace, label_selector=selector):
            for item in page.items:
                item = {**item, "apiVersion": kind.api_version, "kind": kind.kind}
                other = membership(item, kind, policy, decide(item, kind, policy))
                if other is not None and other.group == member.group:
                    listed[other.uid] = other
        listed.setdefault(member.uid, member)  # the object just read counts, whatever the listing missed
        # The index is a hint: make it what the cluster says, so that the reconcile that follows
        # (which ranks by the index) reaches the same decision as this one.
        self.keeplast.repair(member.group, list(listed.values()))
        rank, beyond_at = ranked(listed.values()).get(member.uid, (0, None))
        if beyond_at is not None:
            return limit_decision(member, rank, beyond_at, decision)
        return decision
