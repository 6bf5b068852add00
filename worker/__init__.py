"""The worker: runs due deletions and resyncs as RQ jobs."""

if __name__ != "jobttl.worker":  # pragma: no cover - a guard, not a feature
    # Imported by its folder name (e.g. from the repository root): the same file would be
    # loaded twice under two names, and enums compared with `is` would stop matching.
    raise ImportError(f"import jobttl.worker, not {__name__}")
