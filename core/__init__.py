"""The domain: job kinds, policy and decisions, the schedule, the audit trail, the one
Kubernetes client, the ApiServerSource event format, settings, logs and metrics.

Everything else (the sink, the worker, the watcher, the command) is built on it; it
imports none of them."""

if __name__ != "jobttl.core":  # pragma: no cover - a guard, not a feature
    # Imported by its folder name (e.g. from the repository root): the same file would be
    # loaded twice under two names, and enums compared with `is` would stop matching.
    raise ImportError(f"import jobttl.core, not {__name__}")
