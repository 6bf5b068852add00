"""The sink: receives Kubernetes API events as CloudEvents and reconciles the schedule."""

if __name__ != "jobttl.sink":  # pragma: no cover - a guard, not a feature
    # Imported by its folder name (e.g. from the repository root): the same file would be
    # loaded twice under two names, and enums compared with `is` would stop matching.
    raise ImportError(f"import jobttl.sink, not {__name__}")
