"""`jobttl watch`: an event source for clusters without Knative."""

if __name__ != "jobttl.watcher":  # pragma: no cover - a guard, not a feature
    # Imported by its folder name (e.g. from the repository root): the same file would be
    # loaded twice under two names, and enums compared with `is` would stop matching.
    raise ImportError(f"import jobttl.watcher, not {__name__}")
