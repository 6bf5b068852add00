"""jobttl: deletes finished Kubernetes training jobs a time-to-live after they finish."""
