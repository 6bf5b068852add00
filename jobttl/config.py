"""Settings, read once from the environment at start and passed in from there.

Every setting is validated up front so that a typo stops the process at start with a
message naming the variable, instead of surfacing hours later as a failed deletion.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlparse

from worker.durations import parse_duration
from worker.policy import Policy, PolicyError, load_policy

PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names it."""


def _number(env: Mapping[str, str], name: str, default: float, minimum: float, maximum: float | None = None,
            parse: type = int):
    """Setting `name` parsed as `parse` (int or float) within bounds, or `default` when unset."""
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = parse(raw)
    except ValueError:
        expected = "an integer" if parse is int else "a number"
        raise ConfigError(f"{name}: expected {expected}, got {raw!r}") from None
    # NaN compares false with everything, so it is refused explicitly, like infinity.
    if math.isnan(value) or math.isinf(value) or value < minimum or (maximum is not None and value > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise ConfigError(f"{name}: must be {bounds}, got {raw}")
    return value


@dataclass(frozen=True)
class Settings:
    redis_url: str = "redis://127.0.0.1:6379/0"
    queue_name: str = "jobttl"
    propagation_policy: str = "Foreground"
    # Largest CloudEvent body the sink accepts. etcd caps an object at 1.5 MiB; the
    # event wraps one object, so 3 MiB leaves room without inviting abuse.
    max_event_bytes: int = 3 * 1024 * 1024
    # Transient API failures are retried retry_max times, waiting backoff * 2**n seconds.
    retry_max: int = 5
    retry_backoff: int = 10
    api_timeout: int = 30
    log_level: str = "INFO"
    # Kubernetes access; None means the standard loaders decide (in-cluster, then KUBECONFIG).
    kubeconfig: str | None = None
    policy_path: str | None = None
    policy: Policy = field(default_factory=Policy)
    # Deletions per second across all workers (shared through Redis); 0 means no limit.
    delete_rate: float = 5.0
    # Seconds between periodic resyncs run by the workers; 0 turns them off.
    resync_interval: int = 900
    # A resync holds its deletions for confirmation when they exceed either bound.
    resync_max_deletions: int = 500
    resync_max_share: float = 0.5
    # The audit trail keeps about this many entries; tombstones of deleted jobs this many days.
    audit_max_entries: int = 100_000
    tombstone_days: int = 7
    # Where a worker serves its Prometheus metrics; 0 turns it off.
    worker_metrics_port: int = 9090
    # Announce each deletion this long before it, as a CloudEvent POSTed to warn_url.
    warn_url: str | None = None
    warn_before: int = 3600

    @property
    def announce_before(self) -> int | None:
        """Seconds before a deletion to announce it, or None when announcements are off."""
        return self.warn_before if self.warn_url else None

    @property
    def retry_intervals(self) -> list[int]:
        return [self.retry_backoff * 2**n for n in range(self.retry_max)]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        redis_url = env.get("JOBTTL_REDIS_URL") or cls.redis_url
        if urlparse(redis_url).scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(f"JOBTTL_REDIS_URL: expected redis://, rediss:// or unix://, got {redis_url!r}")
        queue_name = env.get("JOBTTL_QUEUE") or cls.queue_name
        if not queue_name.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(f"JOBTTL_QUEUE: use letters, digits, '-' and '_', got {queue_name!r}")
        policy = env.get("JOBTTL_PROPAGATION_POLICY") or cls.propagation_policy
        if policy not in PROPAGATION_POLICIES:
            raise ConfigError(
                f"JOBTTL_PROPAGATION_POLICY: must be one of {', '.join(PROPAGATION_POLICIES)}, got {policy!r}"
            )
        log_level = (env.get("JOBTTL_LOG_LEVEL") or cls.log_level).upper()
        if log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError(f"JOBTTL_LOG_LEVEL: must be DEBUG, INFO, WARNING or ERROR, got {log_level!r}")
        warn_url = env.get("JOBTTL_WARN_URL") or None
        if warn_url and urlparse(warn_url).scheme not in ("http", "https"):
            raise ConfigError(f"JOBTTL_WARN_URL: expected an http:// or https:// URL, got {warn_url!r}")
        try:
            warn_before = parse_duration(env.get("JOBTTL_WARN_BEFORE") or "1h")
        except ValueError as exc:
            raise ConfigError(f"JOBTTL_WARN_BEFORE: {exc}") from None
        policy_path = env.get("JOBTTL_POLICY") or None
        try:
            cluster_policy = load_policy(policy_path)
        except PolicyError as exc:
            raise ConfigError(f"JOBTTL_POLICY: {exc}") from None
        return cls(
            redis_url=redis_url,
            queue_name=queue_name,
            propagation_policy=policy,
            max_event_bytes=_number(env, "JOBTTL_MAX_EVENT_BYTES", cls.max_event_bytes, 1024),
            retry_max=_number(env, "JOBTTL_RETRY_MAX", cls.retry_max, 0),
            retry_backoff=_number(env, "JOBTTL_RETRY_BACKOFF", cls.retry_backoff, 0),
            api_timeout=_number(env, "JOBTTL_API_TIMEOUT", cls.api_timeout, 1),
            log_level=log_level,
            kubeconfig=env.get("KUBECONFIG") or None,
            policy_path=policy_path,
            policy=cluster_policy,
            delete_rate=_number(env, "JOBTTL_DELETE_RATE", cls.delete_rate, 0, parse=float),
            resync_interval=_number(env, "JOBTTL_RESYNC_INTERVAL", cls.resync_interval, 0),
            resync_max_deletions=_number(env, "JOBTTL_RESYNC_MAX_DELETIONS", cls.resync_max_deletions, 0),
            resync_max_share=_number(env, "JOBTTL_RESYNC_MAX_SHARE", cls.resync_max_share, 0, 1, parse=float),
            audit_max_entries=_number(env, "JOBTTL_AUDIT_MAX_ENTRIES", cls.audit_max_entries, 100),
            tombstone_days=_number(env, "JOBTTL_TOMBSTONE_DAYS", cls.tombstone_days, 1),
            worker_metrics_port=_number(env, "JOBTTL_WORKER_METRICS_PORT", cls.worker_metrics_port, 0),
            warn_url=warn_url,
            warn_before=warn_before,
        )
