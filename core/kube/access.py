"""Who is asking, and may they: a bearer token checked with TokenReview, a right with SubjectAccessReview.

The console and the read API do not judge tokens themselves: the API server does, as it does for
kube-rbac-proxy and the metrics-server (the rights of `system:auth-delegator`). A token is
whatever the cluster accepts (a service account's, an OIDC user's through the API server's own
authenticator); the right is a verb on jobttl's virtual resources (`jobttl.core.domain.deploy.rights`),
granted with RBAC like any other.

Answers are remembered briefly (`REMEMBER` seconds, by a hash of the token; by user, groups and
attributes for rights), so that a page of twenty requests is not forty reviews; a revoked token or
right takes at most that long to be refused. Failing closed: an API server that cannot answer
is `AccessUnavailable` (503), never an allow.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from jobttl.core.domain.deploy import rights
from jobttl.core.kube.client import KubeClient, PermanentApiError, TransientApiError, Undecodable

REMEMBER = 10.0  # seconds an answer is reused
MAX_REMEMBERED = 10_000


class Unauthenticated(Exception):
    """No token, or one the API server does not accept: 401."""


class Forbidden(Exception):
    """A known user without the right: 403 (the message names the verb, the resource and the role)."""


class AccessUnavailable(Exception):
    """The API server cannot review the token or the right now: 503, try again."""


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer ...` header, or None."""
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class Access:
    """TokenReview and SubjectAccessReview through `kube` (component "access" of the permissions table)."""

    def __init__(self, kube: KubeClient, audiences: tuple[str, ...] = (), remember: float = REMEMBER):
        self.kube = kube
        self.audiences = audiences
        self.remember = remember
        self._lock = threading.Lock()
        self._answers: dict[Any, tuple[float, Any]] = {}

    def _recall(self, key: Any) -> Any:
        with self._lock:
            found = self._answers.get(key)
        return found[1] if found is not None and found[0] > time.monotonic() else None

    def _keep(self, key: Any, value: Any) -> None:
        with self._lock:
            if len(self._answers) >= MAX_REMEMBERED:
                now = time.monotonic()
                self._answers = {k: v for k, v in self._answers.items() if v[0] > now}
                if len(self._answers) >= MAX_REMEMBERED:
                    self._answers.clear()
            self._answers[key] = (time.monotonic() + self.remember, value)

    def authenticate(self, token: str | None) -> User:
        """The user a bearer token is, as the API server's TokenReview says."""
        if not token:
            raise Unauthenticated(
                "a Kubernetes bearer token is required (Authorization: Bearer TOKEN, e.g. `kubectl create token NAME`)"
            )
        key = ("token", hashlib.sha256(token.encode()).hexdigest())
        user = self._recall(key)
        if user is not None:
            return user
        try:
            status = self.kube.token_review(token, self.audiences)
        except (TransientApiError, PermanentApiError, Undecodable) as exc:
            raise AccessUnavailable(f"cannot review the token with the API server (TokenReview): {exc}") from None
        info = status.get("user") or {}
        if status.get("authenticated") is not True or not isinstance(info.get("username"), str):
            why = status.get("error") or "the API server did not authenticate it"
            raise Unauthenticated(f"the token was not accepted: {str(why)[:300]}")
        user = User(
            info["username"],
            tuple(g for g in info.get("groups") or () if isinstance(g, str)),
            info.get("uid") if isinstance(info.get("uid"), str) else None,
            info.get("extra") if isinstance(info.get("extra"), dict) else {},
        )
        self._keep(key, user)
        return user

    def allowed(
        self, user: User, verb: str, resource: str, namespace: str | None = None, name: str | None = None
    ) -> bool:
        """Whether RBAC lets `user` use `verb` on `resource` of jobttl.io (in `namespace`, on `name`)."""
        attributes = {"group": rights.GROUP, "resource": resource, "verb": verb}
        if namespace:
            attributes["namespace"] = namespace
        if name:
            attributes["name"] = name
        # Everything the review is sent with is in the key: an authorizer that reads `uid` or `extra`
        # (scoped tokens) may answer one user's two tokens differently.
        extra = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in user.extra.items()))
        key = ("access", user.name, user.groups, user.uid, extra, tuple(sorted(attributes.items())))
        answer = self._recall(key)
        if answer is not None:
            return answer
        try:
            status = self.kube.subject_access_review(user.name, list(user.groups), user.uid, user.extra, attributes)
        except (TransientApiError, PermanentApiError, Undecodable) as exc:
            raise AccessUnavailable(
                f"cannot review {user.name}'s rights with the API server (SubjectAccessReview): {exc}"
            ) from None
        answer = status.get("allowed") is True and status.get("denied") is not True
        self._keep(key, answer)
        return answer

    def authorize(
        self, user: User, verb: str, resource: str, namespace: str | None = None, name: str | None = None
    ) -> None:
        """Raise Forbidden unless `allowed`, saying which right is missing and which ClusterRole has it."""
        if not self.allowed(user, verb, resource, namespace, name):
            role = rights.READER if verb in rights.READ else rights.OPERATOR
            where = f" in namespace {namespace}" if namespace else ""
            raise Forbidden(
                f"{user.name} may not {verb} {resource}.{rights.GROUP}{where}: bind the ClusterRole "
                f"{role} (or one granting that verb) to this user or one of its groups"
            )
