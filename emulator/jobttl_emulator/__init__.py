"""A Kubernetes API emulator for jobttl's tests and quickstart.

It serves namespaced custom resources (TFJob by default) over HTTP with the
semantics jobttl relies on: resourceVersions, status subresource, delete
preconditions and propagation, paginated lists and watches, discovery, and
test hooks for request inspection and fault injection.
"""

from .resources import DEFAULT_RESOURCES, TFJOB, WELL_KNOWN, Resource
from .server import EmulatorServer, create_app, run, seed_object

__all__ = ["DEFAULT_RESOURCES", "TFJOB", "WELL_KNOWN", "EmulatorServer", "Resource", "create_app", "run", "seed_object"]
