"""Who may send the sink events: Knative's OIDC sender tokens, and an allowlist of sources; and who may
read its read API (`ReaderCheck`).

Any pod in the cluster can reach the sink; a forged "delete" or "not finished" event would
cancel a pending deletion until the next resync (nothing is ever deleted on an event's
word: the worker re-reads the object). Three layers close that:

- a NetworkPolicy (``knative/``) admits only Knative's data plane, the watcher and the
  monitoring scraper;
- with Knative Eventing's OIDC sender authentication on, every delivery carries a bearer
  token (a Kubernetes service-account JWT) whose audience is the sink's; the sink verifies
  its signature against the issuer's published keys (OIDC discovery → JWKS), its issuer,
  audience and expiry, and answers 401 otherwise. Any pod can mint a token for its own
  service account with any audience, so ``JOBTTL_SINK_OIDC_SUBJECTS`` names the senders'
  service accounts (the ApiServerSource's, the watcher's): other subjects get 403;
- ``JOBTTL_SINK_SOURCES`` lists the CloudEvent ``source`` values accepted (the API server
  URL an ApiServerSource reports, the watcher's), refusing others with 403.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

import jwt
import requests

from jobttl.core.domain.deploy import rights
from jobttl.core.kube import access as access_errors
from jobttl.core.kube.access import Access, bearer
from jobttl.core.kube.client import KubeClient, load_api_client
from jobttl.core.runtime.config import Settings

DISCOVERY = "/.well-known/openid-configuration"


class Unauthenticated(Exception):
    """No valid sender token: answer 401."""


class Forbidden(Exception):
    """A valid sender, but not one this sink accepts events from: answer 403."""


class VerifierUnavailable(Exception):
    """The issuer's keys cannot be fetched: answer 503, so the sender retries."""


@dataclass
class SenderCheck:
    sources: tuple[str, ...] = ()
    audience: str | None = None
    issuer: str | None = None
    ca_file: str | None = None
    subjects: tuple[str, ...] = ()
    _keys: jwt.PyJWKClient | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> SenderCheck:
        return cls(
            settings.sink_sources,
            settings.sink_oidc_audience,
            settings.sink_oidc_issuer,
            settings.sink_oidc_ca_file,
            settings.sink_oidc_subjects,
        )

    @property
    def authenticates(self) -> bool:
        return self.audience is not None

    def token(self, authorization: str | None) -> dict:
        """The verified claims of the request's bearer token (when OIDC is on)."""
        if not self.authenticates:
            return {}
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("a Knative OIDC bearer token is required (Authorization: Bearer ...)")
        try:
            key = self._jwks().get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=["RS256", "ES256", "RS384", "ES384", "RS512"],
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.PyJWKClientConnectionError as exc:
            raise VerifierUnavailable(f"cannot fetch the token issuer's keys: {exc}") from None
        except jwt.PyJWKClientError as exc:
            raise Unauthenticated(f"cannot verify the sender token: {exc}") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"invalid sender token: {exc}") from None
        if self.subjects and claims["sub"] not in self.subjects:
            raise Forbidden(f"events from {str(claims['sub'])[:200]!r} are not accepted (JOBTTL_SINK_OIDC_SUBJECTS)")
        return claims

    def source(self, source: str) -> None:
        if self.sources and source not in self.sources:
            raise Forbidden(f"events from source {source[:200]!r} are not accepted (JOBTTL_SINK_SOURCES)")

    def _jwks(self) -> jwt.PyJWKClient:
        if self._keys is None:
            verify = self.ca_file or True
            try:
                discovery = requests.get(self.issuer.rstrip("/") + DISCOVERY, timeout=5, verify=verify).json()
            except (requests.RequestException, ValueError) as exc:
                raise VerifierUnavailable(f"OIDC discovery at {self.issuer} failed: {exc}") from None
            context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
            self._keys = jwt.PyJWKClient(discovery["jwks_uri"], cache_keys=True, lifespan=300, ssl_context=context)
        return self._keys


@dataclass
class ReaderCheck:
    """Who may read the read API (`JOBTTL_READ_API_AUTH`), the same right as writes (issue 26 §6).

    - ``oidc``: a bearer token verified as the events' are (`SenderCheck`: the issuer's keys, the
      sink's audience), from one of ``JOBTTL_READ_API_OIDC_SUBJECTS`` when that is set;
    - ``kubernetes``: a Kubernetes token, reviewed by the API server (TokenReview), whose user may
      ``list`` (all deletions, or one namespace's) or ``get`` (one job) ``deletions.jobttl.io``
      (SubjectAccessReview: the ClusterRole ``jobttl-reader`` grants both);
    - ``none``: anyone who reaches the sink (the NetworkPolicy's business).
    """

    mode: str = "none"
    oidc: SenderCheck | None = None
    access_of: Callable[[], Access] | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> ReaderCheck:
        mode = settings.read_api_auth or "none"
        oidc = (
            SenderCheck(
                (),
                settings.sink_oidc_audience,
                settings.sink_oidc_issuer,
                settings.sink_oidc_ca_file,
                settings.read_api_oidc_subjects,
            )
            if mode == "oidc"
            else None
        )
        built: list[Access] = []

        def access() -> Access:
            if not built:
                kube = KubeClient(
                    load_api_client(settings.kubeconfig), min(settings.api_timeout, 10), component="access"
                )
                built.append(Access(kube))
            return built[0]

        return cls(mode, oidc, access if mode == "kubernetes" else None)

    def check(
        self, authorization: str | None, verb: str, namespace: str | None = None, name: str | None = None
    ) -> str | None:
        """Who is reading (None without auth); raises Unauthenticated, Forbidden or VerifierUnavailable."""
        if self.mode == "oidc":
            try:
                return str(self.oidc.token(authorization)["sub"])
            except Forbidden as exc:
                raise Forbidden(
                    str(exc)
                    .replace("events from", "reads by")
                    .replace("JOBTTL_SINK_OIDC_SUBJECTS", "JOBTTL_READ_API_OIDC_SUBJECTS")
                ) from None
        if self.mode == "kubernetes":
            try:
                access = self.access_of()
            except Exception as exc:  # noqa: BLE001 - no kubeconfig, no service account: nobody can be checked
                raise VerifierUnavailable(f"cannot load Kubernetes credentials to review tokens: {exc}") from None
            try:
                user = access.authenticate(bearer(authorization))
                access.authorize(user, verb, rights.DELETIONS, namespace, name)
            except access_errors.Unauthenticated as exc:
                raise Unauthenticated(str(exc)) from None
            except access_errors.Forbidden as exc:
                raise Forbidden(str(exc)) from None
            except access_errors.AccessUnavailable as exc:
                raise VerifierUnavailable(str(exc)) from None
            return user.name
        return None
