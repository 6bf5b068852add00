"""The HTTP side of jobttl: receives Kubernetes API events as CloudEvents."""
