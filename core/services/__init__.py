"""What the sink, the worker and the CLI do with the domain, the store and the clients: the one reconcile path, the operators' operations, the first-run review."""
