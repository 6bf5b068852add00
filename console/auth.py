"""Who is using the console, and may they: a Kubernetes identity, CSRF, the session cookie.

- Reading needs a Kubernetes identity: a bearer token (``Authorization: Bearer``, e.g. through an
  authenticating proxy) or one pasted on the sign-in page, kept in Redis for the session (the
  cookie, signed with the console's key `JOBTTL_CONSOLE_SESSION_KEY_FILE`, HttpOnly,
  SameSite=Strict, holds a random session id only). The token
  is reviewed by the API server (TokenReview) and each page asks SubjectAccessReview for `list`
  (or `get`) on jobttl.io's virtual resources (`jobttl.core.domain.deploy.rights`: ClusterRole
  `jobttl-reader`).
- Every action is authorised with SubjectAccessReview for its own verb (ClusterRole
  `jobttl-console-operator`), must carry the session's CSRF token, and is written to the audit
  trail with the user's name (`by`).
- `JOBTTL_CONSOLE_AUTH=none` (what `make run` uses) signs nobody in; the command refuses it on
  any address but loopback.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from flask import abort, current_app, request, session

from jobttl.core.kube import access as reviews
from jobttl.core.kube.access import User, bearer
from jobttl.core.store.console_sessions import ConsoleSessions

NO_SIGN_IN = User("local operator (no sign-in)")


class SignInNeeded(Exception):
    """No identity: pages send the browser to the sign-in page (401 for anything else)."""

    def __init__(self, message: str):
        super().__init__(message)


@dataclass(frozen=True)
class Who:
    user: User
    signed_in: bool  # by the sign-in page (a session to sign out of), rather than a header or no auth

    @property
    def by(self) -> str:
        """What the audit trail records as the actor."""
        return f"console:{self.user.name}"


def _access() -> reviews.Access | None:
    return current_app.extensions["jobttl"].access


def _sessions() -> ConsoleSessions:
    return ConsoleSessions(current_app.extensions["jobttl"].redis)


def sign_out() -> None:
    """End this browser's session: its token deleted from Redis, its cookie emptied."""
    _sessions().end(session.get("sid"))
    session.clear()


def who() -> Who:
    """The user of this request; raises SignInNeeded, or aborts 503 when the API server cannot tell."""
    access = _access()
    if access is None:
        return Who(NO_SIGN_IN, False)
    header = bearer(request.headers.get("Authorization"))
    token = header or _sessions().token(session.get("sid"))
    if not token:
        raise SignInNeeded("sign in with a Kubernetes token")
    try:
        return Who(access.authenticate(token), header is None)
    except reviews.Unauthenticated as exc:
        if header is None:
            _sessions().end(session.pop("sid", None))
        raise SignInNeeded(str(exc)) from None
    except reviews.AccessUnavailable as exc:
        abort(503, str(exc))


def require(person: Who, verb: str, resource: str, namespace: str | None = None, name: str | None = None) -> None:
    """Abort 403 (naming the right and its ClusterRole) unless the user may; 503 if nobody can tell."""
    access = _access()
    if access is None:
        return
    try:
        access.authorize(person.user, verb, resource, namespace, name)
    except reviews.Forbidden as exc:
        abort(403, str(exc))
    except reviews.AccessUnavailable as exc:
        abort(503, str(exc))


def may(person: Who, verb: str, resource: str, namespace: str | None = None) -> bool:
    """Whether to offer an action (the action itself asks again)."""
    access = _access()
    if access is None:
        return True
    try:
        return access.allowed(person.user, verb, resource, namespace)
    except reviews.AccessUnavailable:
        return False


def sign_in(token: str) -> User:
    """Review the token (TokenReview) and keep it in the session; raises access.Unauthenticated."""
    access = _access()
    user = access.authenticate(token.strip())
    sign_out()
    # The cookie carries a random id; the token stays in Redis (core/store/console_sessions.py).
    session["sid"] = _sessions().start(token.strip(), int(current_app.permanent_session_lifetime.total_seconds()))
    session.permanent = True
    csrf_token()
    return user


def csrf_token() -> str:
    """The session's CSRF token, made on first use; every form carries it."""
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def check_csrf() -> None:
    """Abort 403 unless the form's CSRF token is the session's (and, when the browser says, the same origin)."""
    sent = request.form.get("csrf", "")
    expected = session.get("csrf")
    if not expected or not hmac.compare_digest(sent.encode(), str(expected).encode()):
        abort(403, "the form's CSRF token is missing or not this session's: reload the page and try again")
    origin = request.headers.get("Origin")
    if origin and origin != "null" and origin.rstrip("/") not in own_origins():
        abort(403, f"a form sent from {origin[:100]} is not accepted: only this console's own pages may act")


def own_origins() -> set[str]:
    """The origins this console's pages have: the one the request reached, and JOBTTL_CONSOLE_URL's
    (behind a TLS-terminating Ingress the browser's is https://..., while waitress sees http)."""
    origins = {request.host_url.rstrip("/")}
    public = current_app.config.get("JOBTTL_PUBLIC_ORIGIN")
    if public:
        origins.add(public)
    return origins
