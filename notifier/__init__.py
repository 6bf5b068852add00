"""`jobttl notify`: tells the channels the policy names what jobttl did, from the audit trail."""

if __name__ != "jobttl.notifier":  # pragma: no cover - a guard, not a feature
    # Imported by its folder name (e.g. from the repository root): the same file would be
    # loaded twice under two names, and enums compared with `is` would stop matching.
    raise ImportError(f"import jobttl.notifier, not {__name__}")
