"""Settings, read once from the environment at start and passed in from there.

Every setting is declared once in `SETTINGS` (its variable, default, parser and meaning),
which the command's ``--help`` and the README's table are built from. Each is validated up
front so that a typo stops the process at start with a message naming the variable,
instead of surfacing hours later as a failed deletion.
"""

from __future__ import annotations

import math
import os
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import unquote, urlparse

from jobttl.core.domain.wire.durations import parse_duration
from jobttl.core.domain.rules.policy import Policy, PolicyError, load_policy
from jobttl.core.runtime.redisurl import SentinelAddress

PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# The password knative/base/redis.yaml ships in its Secret, so that nobody runs with it.
PLACEHOLDER_REDIS_PASSWORD = "change-me-before-real-use"


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names it."""


# --- parsers: text → value, or ValueError saying what was expected -----------------------------


def number(minimum: float, maximum: float | None = None, kind: type = int) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = kind(raw)
        except ValueError:
            raise ValueError(f"expected {'an integer' if kind is int else 'a number'}, got {raw!r}") from None
        # NaN compares false with everything, so it is refused explicitly, like infinity.
        if math.isnan(value) or math.isinf(value) or value < minimum or (maximum is not None and value > maximum):
            bounds = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
            raise ValueError(f"must be {bounds}, got {raw}")
        return value

    return parse


def choice(*choices: str, upper: bool = False) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.upper() if upper else raw
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def duration(raw: str) -> int:
    return parse_duration(raw)


def url(*schemes: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if urlparse(raw).scheme not in schemes:
            raise ValueError(f"expected {' or '.join(s + '://' for s in schemes)}, got {raw!r}")
        return raw

    return parse


def redis_url(raw: str) -> str:
    """A Redis URL jobttl can use: a known scheme, a Sentinel URL that reads, and not the shipped password."""
    url(*REDIS_SCHEMES)(raw)
    if PLACEHOLDER_REDIS_PASSWORD in unquote(raw):
        raise ValueError(
            f"it holds the placeholder password {PLACEHOLDER_REDIS_PASSWORD!r} shipped in "
            "knative/base/redis.yaml: set a real password in the jobttl-redis Secret "
            "(e.g. openssl rand -hex 32) and restart"
        )
    if urlparse(raw).scheme.endswith("+sentinel"):
        SentinelAddress.parse(raw)
    return raw


def ca_bundle(raw: str) -> str:
    """A PEM file of CA certificates that TLS can load now, rather than at the first connection."""
    try:
        ssl.create_default_context(cafile=raw)
    except FileNotFoundError:
        raise ValueError(f"no such file: {raw}") from None
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"{raw} is not a readable PEM CA bundle: {exc}") from None
    return raw


def queue_name(raw: str) -> str:
    if not raw.replace("-", "").replace("_", "").isalnum() or not raw.isascii():
        raise ValueError(f"use letters, digits, '-' and '_', got {raw!r}")
    return raw


def words(raw: str) -> tuple[str, ...]:
    return tuple(w.strip() for w in raw.split(",") if w.strip())


def text(raw: str) -> str:
    return raw


_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def namespaces(raw: str) -> tuple[str, ...]:
    """Namespace names, comma-separated, each as the API server accepts one."""
    names = words(raw)
    bad = [n for n in names if len(n) > 63 or not _NAMESPACE.match(n)]
    if bad:
        raise ValueError(f"{bad[0]!r} is not a namespace name (lowercase letters, digits and '-', at most 63)")
    return names


@dataclass(frozen=True)
class EnvSetting:
    """One setting read from the environment at start: its Settings field, its variable, how it
    is read (raising ValueError naming what is wrong), and what the help (`jobttl --help`) says of it."""

    field: str
    env: str
    parse: Callable[[str], Any]
    help: str


SETTINGS: tuple[EnvSetting, ...] = (
    EnvSetting(
        "redis_url",
        "JOBTTL_REDIS_URL",
        redis_url,
        "Redis holding the schedule: redis://, rediss:// (TLS), unix://, or Sentinel's "
        "redis+sentinel://[:PASSWORD@]HOST:PORT,.../MASTER_SET/DB (rediss+sentinel:// with TLS)",
    ),
    EnvSetting(
        "redis_ca_file",
        "JOBTTL_REDIS_CA_FILE",
        ca_bundle,
        "CA bundle (PEM) to verify Redis's TLS certificate (rediss://); unset: the system CAs",
    ),
    EnvSetting(
        "sink_min_replicas",
        "JOBTTL_SINK_MIN_REPLICAS",
        number(0, 10),
        "the sink accepts an event only once its writes are on this many Redis replicas (WAIT, one round "
        "trip more per write), else 503; keep it below the replica count, or losing one stops the sink",
    ),
    EnvSetting(
        "sink_dedupe_seconds",
        "JOBTTL_SINK_DEDUPE_SECONDS",
        number(0, 3600),
        "the sink answers an event that decides exactly what one it applied this many seconds ago from "
        "memory, without Redis (redeliveries, status updates nothing reads); a Redis that lost its data "
        "is then re-booked only after the window; 0 (default): every event goes to Redis",
    ),
    EnvSetting("queue_name", "JOBTTL_QUEUE", queue_name, "RQ queue name"),
    EnvSetting(
        "policy_path",
        "JOBTTL_POLICY",
        text,
        "the policy file (a mounted ConfigMap); unset: only jobs that ask for a TTL are deleted",
    ),
    EnvSetting(
        "kubeconfig", "KUBECONFIG", text, "kubeconfig file; unset: the in-cluster service account, else ~/.kube/config"
    ),
    EnvSetting(
        "propagation_policy",
        "JOBTTL_PROPAGATION_POLICY",
        choice(*PROPAGATION_POLICIES),
        "Foreground (like the upstream controller: the job goes once its pods are gone), Background or Orphan",
    ),
    EnvSetting("max_event_bytes", "JOBTTL_MAX_EVENT_BYTES", number(1024), "largest CloudEvent body the sink accepts"),
    EnvSetting("retry_max", "JOBTTL_RETRY_MAX", number(0), "retries of a deletion after a transient API failure"),
    EnvSetting("retry_backoff", "JOBTTL_RETRY_BACKOFF", number(0), "first retry delay in seconds; doubles each time"),
    EnvSetting("api_timeout", "JOBTTL_API_TIMEOUT", number(1), "seconds per Kubernetes API request"),
    EnvSetting(
        "job_timeout",
        "JOBTTL_JOB_TIMEOUT",
        number(10),
        "seconds a deletion may take; a worker killed mid-deletion is detected this long + 60 s later and "
        "the deletion runs again",
    ),
    EnvSetting("log_level", "JOBTTL_LOG_LEVEL", choice(*LOG_LEVELS, upper=True), "DEBUG, INFO, WARNING or ERROR"),
    EnvSetting(
        "delete_rate",
        "JOBTTL_DELETE_RATE",
        number(0, kind=float),
        "deletions per second across all workers (shared through Redis); 0 = no limit",
    ),
    EnvSetting(
        "resync_interval",
        "JOBTTL_RESYNC_INTERVAL",
        number(0),
        "seconds between automatic resyncs, which also run when a worker starts; 0 = none",
    ),
    EnvSetting(
        "resync_min_interval",
        "JOBTTL_RESYNC_MIN_INTERVAL",
        number(0, 86400),
        "seconds at least between two resyncs that events ask for (a PingSource event, a worker starting): "
        "one asked sooner is deferred to the end of the interval, and those asked meanwhile "
        "are coalesced into it; 0 = each runs at once",
    ),
    EnvSetting(
        "resync_max_deletions",
        "JOBTTL_RESYNC_MAX_DELETIONS",
        number(0),
        "a resync that would newly delete more than this holds them for confirmation; events that make more "
        "than this many deletions due within a minute are held too",
    ),
    EnvSetting(
        "resync_max_share",
        "JOBTTL_RESYNC_MAX_SHARE",
        number(0, 1, kind=float),
        "... or more than this share of the jobs it saw",
    ),
    EnvSetting(
        "first_run_review",
        "JOBTTL_FIRST_RUN_REVIEW",
        choice("on", "off"),
        "on a first install, deletions that were already due at install wait until an operator confirms them "
        "(`jobttl held`, then `jobttl resync --confirm HELD_ID`); off: the guard's thresholds alone",
    ),
    EnvSetting(
        "delete_namespaces",
        "JOBTTL_DELETE_NAMESPACES",
        namespaces,
        "the only namespaces jobttl may delete in, comma-separated, where its RBAC grants delete there "
        "alone (the chart's rbac.namespaces); jobs elsewhere are kept, saying so. Unset: every namespace",
    ),
    EnvSetting(
        "namespace",
        "JOBTTL_NAMESPACE",
        text,
        "jobttl's own namespace, where the worker keeps the install record (ConfigMap jobttl-install); unset: "
        "the service account's namespace in a pod, else jobttl",
    ),
    EnvSetting(
        "clock_skew_bound",
        "JOBTTL_CLOCK_SKEW_BOUND",
        number(1, kind=float),
        "seconds this host's (or Redis's) clock may be off the API server's before deletions wait",
    ),
    EnvSetting(
        "audit_max_entries",
        "JOBTTL_AUDIT_MAX_ENTRIES",
        number(100),
        "length of the audit trail (a capped Redis stream)",
    ),
    EnvSetting(
        "tombstone_days",
        "JOBTTL_TOMBSTONE_DAYS",
        number(1),
        "how long a deleted job's final status and its history are kept",
    ),
    EnvSetting(
        "tombstone_annotations",
        "JOBTTL_TOMBSTONE_ANNOTATIONS",
        words,
        "annotation keys whose values tombstones keep (comma-separated; default none: they may hold secrets)",
    ),
    EnvSetting(
        "stuck_after",
        "JOBTTL_STUCK_AFTER",
        duration,
        "a deleted job still present this long after its DELETE is reported stuck",
    ),
    EnvSetting(
        "worker_metrics_port",
        "JOBTTL_WORKER_METRICS_PORT",
        number(0),
        "where each worker serves /metrics and /readyz; 0 = off",
    ),
    EnvSetting(
        "warn_url",
        "JOBTTL_WARN_URL",
        url("http", "https"),
        "announce each deletion ahead of time by POSTing a CloudEvent io.jobttl.deletion.upcoming here",
    ),
    EnvSetting("warn_before", "JOBTTL_WARN_BEFORE", duration, "how long before the deletion to announce it"),
    EnvSetting(
        "sink_sources",
        "JOBTTL_SINK_SOURCES",
        words,
        "CloudEvent `source` values the sink accepts (comma-separated; default: any)",
    ),
    EnvSetting(
        "sink_oidc_audience",
        "JOBTTL_SINK_OIDC_AUDIENCE",
        text,
        "require a Knative OIDC bearer token for this audience on every event",
    ),
    EnvSetting(
        "sink_oidc_issuer",
        "JOBTTL_SINK_OIDC_ISSUER",
        url("http", "https"),
        "the token issuer (the cluster's service-account issuer); its JWKS is discovered from it",
    ),
    EnvSetting("sink_oidc_ca_file", "JOBTTL_SINK_OIDC_CA_FILE", text, "CA bundle for the issuer's HTTPS endpoints"),
    EnvSetting(
        "sink_oidc_subjects",
        "JOBTTL_SINK_OIDC_SUBJECTS",
        words,
        "token subjects accepted (comma-separated), e.g. system:serviceaccount:jobttl:jobttl-source; default: "
        "any token for the audience (any pod can mint one for its own service account)",
    ),
    EnvSetting("read_api", "JOBTTL_READ_API", choice("on", "off"), "serve the read-only API (/api/v1/...) on the sink"),
    EnvSetting(
        "read_api_auth",
        "JOBTTL_READ_API_AUTH",
        choice("oidc", "kubernetes", "none"),
        "who may read the read API: oidc (a bearer token checked as the events' are, JOBTTL_SINK_OIDC_*), "
        "kubernetes (a Kubernetes token, checked with TokenReview, allowed `list` on deletions.jobttl.io by "
        "SubjectAccessReview: ClusterRole jobttl-reader) or none; unset: oidc when the events need it, else none",
    ),
    EnvSetting(
        "read_api_oidc_subjects",
        "JOBTTL_READ_API_OIDC_SUBJECTS",
        words,
        "with JOBTTL_READ_API_AUTH=oidc, token subjects that may read (comma-separated); default: any token for "
        "the sink's audience",
    ),
    EnvSetting(
        "console_auth",
        "JOBTTL_CONSOLE_AUTH",
        choice("kubernetes", "none"),
        "who may use `jobttl console`: kubernetes (a Kubernetes token checked with TokenReview; each page and "
        "action allowed by SubjectAccessReview) or none (no sign-in: only with --host on a loopback address)",
    ),
    EnvSetting(
        "console_session_key_file",
        "JOBTTL_CONSOLE_SESSION_KEY_FILE",
        text,
        "a file holding the key that signs the console's session cookies (shared by its replicas); unset: a "
        "random key per process (sign-ins end when it restarts)",
    ),
    EnvSetting(
        "console_url",
        "JOBTTL_CONSOLE_URL",
        url("http", "https"),
        "the web console's address as operators reach it: notifications link to it (`deleted` to its history, "
        "review-opened to its held page); unset: no links",
    ),
    EnvSetting(
        "notify_metrics_port",
        "JOBTTL_NOTIFY_METRICS_PORT",
        number(0),
        "where `jobttl notify` serves /metrics and /healthz; 0 = off",
    ),
    EnvSetting(
        "notify_gather",
        "JOBTTL_NOTIFY_GATHER",
        number(0, 3600),
        "seconds a quiet digest waits for what comes with its first entry before it is sent (at most its "
        "digest period)",
    ),
    EnvSetting(
        "notify_retry_backoff",
        "JOBTTL_NOTIFY_RETRY_BACKOFF",
        number(1, 3600),
        "seconds before a notification that failed is tried again; doubles each time, up to 15 minutes",
    ),
)
_BY_FIELD = {s.field: s for s in SETTINGS}


@dataclass(frozen=True)
class Settings:
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_ca_file: str | None = None
    sink_min_replicas: int = 0
    sink_dedupe_seconds: int = 0
    queue_name: str = "jobttl"
    policy_path: str | None = None
    kubeconfig: str | None = None
    propagation_policy: str = "Foreground"
    # etcd caps an object at 1.5 MiB; the event wraps one object, so 3 MiB leaves room
    # without inviting abuse.
    max_event_bytes: int = 3 * 1024 * 1024
    retry_max: int = 5
    retry_backoff: int = 10
    api_timeout: int = 30
    job_timeout: int = 60
    log_level: str = "INFO"
    delete_rate: float = 5.0
    resync_interval: int = 900
    resync_min_interval: int = 300
    resync_max_deletions: int = 500
    resync_max_share: float = 0.5
    first_run_review: str = "on"
    delete_namespaces: tuple[str, ...] = ()
    namespace: str | None = None
    clock_skew_bound: float = 30.0
    audit_max_entries: int = 100_000
    tombstone_days: int = 7
    tombstone_annotations: tuple[str, ...] = ()
    stuck_after: int = 600
    worker_metrics_port: int = 9090
    warn_url: str | None = None
    warn_before: int = 3600
    sink_sources: tuple[str, ...] = ()
    sink_oidc_audience: str | None = None
    sink_oidc_issuer: str | None = None
    sink_oidc_ca_file: str | None = None
    sink_oidc_subjects: tuple[str, ...] = ()
    read_api: str = "on"
    read_api_auth: str | None = None
    read_api_oidc_subjects: tuple[str, ...] = ()
    console_auth: str = "kubernetes"
    console_session_key_file: str | None = None
    console_url: str | None = None
    notify_metrics_port: int = 9091
    notify_gather: int = 30
    notify_retry_backoff: int = 10
    policy: Policy = field(default_factory=Policy)

    @property
    def announce_before(self) -> int | None:
        """Seconds before a deletion to announce it, or None when announcements are off."""
        return self.warn_before if self.warn_url else None

    @property
    def retry_intervals(self) -> list[int]:
        return [self.retry_backoff * 2**n for n in range(self.retry_max)]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        values = _read_env(os.environ if env is None else env, [f.name for f in fields(cls)])
        _check_together(values, values.get("redis_url", cls.redis_url))
        if values.get("read_api_auth") is None:
            values["read_api_auth"] = "oidc" if values.get("sink_oidc_audience") else "none"
        try:
            values["policy"] = load_policy(values.get("policy_path")).confined_to(values.get("delete_namespaces", ()))
        except PolicyError as exc:
            raise ConfigError(f"JOBTTL_POLICY: {exc}") from None
        return cls(**values)


def _read_env(env: Mapping[str, str], names: list[str]) -> dict[str, Any]:
    """Each field's setting as its variable says (unset or empty: the default, left out)."""
    values: dict[str, Any] = {}
    for name in names:
        setting = _BY_FIELD.get(name)
        raw = env.get(setting.env) if setting else None
        if setting is None or raw is None or raw == "":
            continue
        try:
            values[name] = setting.parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{setting.env}: {exc}") from None
    return values


def _check_together(values: dict[str, Any], redis_url: str) -> None:
    """Settings that only make sense with others: ConfigError naming both when one is missing."""
    tls = urlparse(redis_url).scheme.startswith("rediss")
    if values.get("redis_ca_file") and not tls:
        raise ConfigError(
            "JOBTTL_REDIS_CA_FILE is set but JOBTTL_REDIS_URL does not use TLS: use rediss:// "
            "(or rediss+sentinel://), or unset the CA file"
        )
    if bool(values.get("sink_oidc_audience")) != bool(values.get("sink_oidc_issuer")):
        raise ConfigError("JOBTTL_SINK_OIDC_AUDIENCE and JOBTTL_SINK_OIDC_ISSUER: set both, or neither")
    if values.get("read_api_auth") == "oidc" and not values.get("sink_oidc_audience"):
        raise ConfigError(
            "JOBTTL_READ_API_AUTH=oidc checks tokens as the sink's events are checked: set "
            "JOBTTL_SINK_OIDC_AUDIENCE and JOBTTL_SINK_OIDC_ISSUER, or choose kubernetes or none"
        )


def describe() -> list[tuple[str, str, str]]:
    """(variable, default, meaning) of every setting, for --help and the README."""
    defaults = Settings()
    rows = []
    for setting in SETTINGS:
        default = getattr(defaults, setting.field)
        shown = "unset" if default in (None, ()) else str(default)
        rows.append((setting.env, shown, setting.help))
    return rows
