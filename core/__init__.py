"""The core, in rooms: `domain` (the rules, pure), `runtime` (settings, logs, metrics),
`store` (everything kept in Redis, with the schedule's write protocol), `kube` (the one
Kubernetes client, the archive stores) and `services` (reconcile, operations, the first-run
review, and `graph`, the composition root every process builds its objects with).

Everything else (the sink, the worker, the watcher, the command) is built on it; it imports
none of them, nor names them: what the RQ jobs it books run, the worker declares
(`jobttl.core.store.tasks`)."""

if __name__ != "jobttl.core":  # pragma: no cover - a guard, not a feature
    # Imported by its folder name (e.g. from the repository root): the same file would be
    # loaded twice under two names, and enums compared with `is` would stop matching.
    raise ImportError(f"import jobttl.core, not {__name__}")
