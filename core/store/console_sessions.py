"""The console's sign-ins: each session's Kubernetes token, kept in Redis, not in the browser.

The session cookie is signed, not encrypted: a token kept in it could be read wherever the cookie
ends up (a proxy's log, a copied browser profile), and would outlive a sign-out. So the cookie
carries a random session id; Redis keeps the token under the id's SHA-256 (Redis's contents never
give back the id a browser would present), for the session's lifetime, and a sign-out deletes it.
"""

from __future__ import annotations

import hashlib
import secrets

from redis import Redis

from jobttl.core.store import keys


def _key(session_id: str) -> str:
    return keys.console_session(hashlib.sha256(session_id.encode()).hexdigest())


class ConsoleSessions:
    def __init__(self, redis: Redis):
        self.redis = redis

    def start(self, token: str, seconds: int) -> str:
        """Keep `token` for `seconds`; the new session's id, for the cookie."""
        session_id = secrets.token_urlsafe(32)
        self.redis.set(_key(session_id), token, ex=seconds)
        return session_id

    def token(self, session_id: str | None) -> str | None:
        if not session_id or not isinstance(session_id, str) or len(session_id) > 100:
            return None
        value = self.redis.get(_key(session_id))
        return value.decode() if value is not None else None

    def end(self, session_id: str | None) -> None:
        if session_id and isinstance(session_id, str) and len(session_id) <= 100:
            self.redis.delete(_key(session_id))
