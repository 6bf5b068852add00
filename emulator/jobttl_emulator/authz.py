"""``SelfSubjectAccessReview`` (authorization.k8s.io/v1), which ``kubectl auth can-i`` creates.

There is no authentication: every request is the same user. With no rules
everything is allowed (as for a cluster admin); with rules, a review is allowed
when one of them matches, like RBAC ``PolicyRule``s granted to that user:
``verbs``, ``apiGroups``, ``resources`` (``resource/subresource`` for a
subresource), ``resourceNames`` and, ours, ``namespaces``, each a list where
``*`` matches anything and an absent list matches everything but
``nonResourceURLs``. Rules only answer reviews: the emulator does not refuse
requests by them (inject a 403 with a fault for that).
"""

from __future__ import annotations

from typing import Any

from .store import FieldError, bad_request, invalid

API_VERSION = "authorization.k8s.io/v1"


def _matches(values: Any, wanted: str) -> bool:
    return values is None or "*" in values or wanted in values


def rule_allows(rule: dict, attributes: dict, resource: bool) -> bool:
    """Whether one rule grants the review's attributes."""
    verb = attributes.get("verb", "")
    if not _matches(rule.get("verbs"), verb):
        return False
    if not resource:
        urls = rule.get("nonResourceURLs")
        path = attributes.get("path", "")
        return urls is not None and any(
            u == "*" or u == path or (u.endswith("*") and path.startswith(u[:-1])) for u in urls
        )
    if "nonResourceURLs" in rule and "resources" not in rule:
        return False
    name = attributes.get("resource", "")
    if attributes.get("subresource"):
        name = f"{name}/{attributes['subresource']}"
    return (
        _matches(rule.get("apiGroups"), attributes.get("group", ""))
        and _matches(rule.get("resources"), name)
        and (not attributes.get("name") or _matches(rule.get("resourceNames"), attributes["name"]))
        and _matches(rule.get("namespaces"), attributes.get("namespace", ""))
    )


def review(body: Any, rules: list[dict] | None) -> dict:
    """The created review with its ``status``."""
    if not isinstance(body, dict) or body.get("kind") != "SelfSubjectAccessReview":
        raise bad_request("expected a SelfSubjectAccessReview")
    spec = body.get("spec") or {}
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (resource is None) == (non_resource is None):
        raise invalid(
            "SelfSubjectAccessReview",
            "authorization.k8s.io",
            "",
            [
                FieldError(
                    "Invalid",
                    "spec.resourceAttributes",
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                    "null",
                )
            ],
        )
    attributes = resource if resource is not None else non_resource
    if rules is None:
        status = {"allowed": True, "reason": "the emulator allows everything"}
    else:
        index = next((i for i, rule in enumerate(rules) if rule_allows(rule, attributes, resource is not None)), None)
        status = (
            {"allowed": True, "reason": f"allowed by emulator rule {index}"}
            if index is not None
            else {"allowed": False}
        )
    return {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": API_VERSION,
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": status,
    }
