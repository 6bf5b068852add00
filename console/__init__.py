"""`jobttl console`: the web console over the operations the CLI uses (pages in HTML, actions by form)."""

if __name__ != "jobttl.console":  # pragma: no cover - a guard, not a feature
    # Imported by its folder name (e.g. from the repository root): the same file would be
    # loaded twice under two names, and enums compared with `is` would stop matching.
    raise ImportError(f"import jobttl.console, not {__name__}")
