"""``TokenReview`` (authentication.k8s.io/v1) and ``SubjectAccessReview`` (authorization.k8s.io/v1).

What a webhook authenticator and RBAC answer a component that checks someone else's token and
rights (jobttl's console and read API do, as the metrics-server and kube-rbac-proxy do):

- a token table (token → ``UserInfo``: ``username``, ``uid``, ``groups``, ``extra``) answers
  ``TokenReview``; an unknown token is ``authenticated: false`` with an ``error``, as the API
  server's authenticator chain says it. Every authenticated user is in ``system:authenticated``.
- RBAC-like grants answer ``SubjectAccessReview``: ``{"users": [...], "groups": [...], "rules":
  [PolicyRule...]}``, each grant a ClusterRoleBinding of rules (the same rule matching as
  ``SelfSubjectAccessReview``, authz.py). Nothing granted is ``allowed: false`` with no
  ``denied`` (RBAC never denies: it has no opinion), and a reason naming what was asked.

Both reviews are echoed back with their ``spec`` and a ``status``, with status 201, as created.
"""

from __future__ import annotations

from typing import Any

from .authz import rule_allows
from .store import FieldError, bad_request, invalid

AUTHENTICATION = "authentication.k8s.io/v1"
AUTHORIZATION = "authorization.k8s.io/v1"
AUTHENTICATED = "system:authenticated"


class Identities:
    """The tokens the emulator knows and what each user may do; empty: nobody is authenticated."""

    def __init__(self) -> None:
        self.tokens: dict[str, dict[str, Any]] = {}
        self.grants: list[dict[str, Any]] = []

    def set(self, tokens: dict[str, dict[str, Any]] | None = None, grants: list[dict[str, Any]] | None = None) -> None:
        self.tokens = dict(tokens or {})
        self.grants = list(grants or [])

    @staticmethod
    def check(spec: Any) -> tuple[dict, list] | str:
        """The configuration ``PUT /_emulator/identities`` takes, or what is wrong with it."""
        if not isinstance(spec, dict):
            return 'expected {"tokens": {TOKEN: {"username": ..., "groups": [...]}}, "grants": [...]}'
        tokens, grants = spec.get("tokens") or {}, spec.get("grants") or []
        if not isinstance(tokens, dict) or not all(
            isinstance(u, dict) and isinstance(u.get("username"), str) for u in tokens.values()
        ):
            return 'tokens: expected an object of token to {"username": STRING, "groups": [...], "uid": ...}'
        if not isinstance(grants, list) or not all(
            isinstance(g, dict) and isinstance(g.get("rules"), list) for g in grants
        ):
            return 'grants: expected a list of {"users": [...], "groups": [...], "rules": [PolicyRule...]}'
        return tokens, grants

    def token_review(self, body: Any) -> dict:
        if not isinstance(body, dict) or body.get("kind") != "TokenReview":
            raise bad_request("expected a TokenReview")
        spec = body.get("spec") or {}
        token = spec.get("token")
        if not isinstance(token, str) or not token:
            raise invalid(
                "TokenReview",
                "authentication.k8s.io",
                "",
                [FieldError("Required", "spec.token", "Required value", "null")],
            )
        user = self.tokens.get(token)
        if user is None:
            status: dict[str, Any] = {
                "authenticated": False,
                "user": {},
                "error": "[invalid bearer token, token lookup failed]",
            }
        else:
            groups = list(user.get("groups") or [])
            if AUTHENTICATED not in groups:
                groups.append(AUTHENTICATED)
            info = {"username": user["username"], "groups": groups}
            if user.get("uid"):
                info["uid"] = user["uid"]
            if user.get("extra"):
                info["extra"] = user["extra"]
            status = {"authenticated": True, "user": info, "audiences": list(spec.get("audiences") or [])}
        return {
            "kind": "TokenReview",
            "apiVersion": AUTHENTICATION,
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }

    def access_review(self, body: Any) -> dict:
        if not isinstance(body, dict) or body.get("kind") != "SubjectAccessReview":
            raise bad_request("expected a SubjectAccessReview")
        spec = body.get("spec") or {}
        resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        errors = []
        if (resource is None) == (non_resource is None):
            errors.append(
                FieldError(
                    "Invalid",
                    "spec.resourceAttributes",
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                    "null",
                )
            )
        if not spec.get("user") and not spec.get("groups"):
            errors.append(FieldError("Invalid", "spec.user", "at least one of user or group must be specified", '""'))
        if errors:
            raise invalid("SubjectAccessReview", "authorization.k8s.io", "", errors)
        user, groups = spec.get("user") or "", set(spec.get("groups") or [])
        attributes = resource if resource is not None else non_resource
        status: dict[str, Any] = {"allowed": False}
        for index, grant in enumerate(self.grants):
            if user not in (grant.get("users") or []) and not groups & set(grant.get("groups") or []):
                continue
            if any(rule_allows(rule, attributes, resource is not None) for rule in grant["rules"]):
                status = {"allowed": True, "reason": f"RBAC: allowed by emulator grant {index}"}
                break
        return {
            "kind": "SubjectAccessReview",
            "apiVersion": AUTHORIZATION,
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }
