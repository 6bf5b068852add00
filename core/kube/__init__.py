"""The clients of the outside world: the one Kubernetes client (`client`), the archive stores."""
