"""A Kubernetes API emulator for jobttl's tests and quickstart.

It serves custom resources (TFJob by default, or any kind from a CRD file) and
the built-in Job, Pod, Event and Namespace kinds over HTTP with the semantics
jobttl relies on: resourceVersions, status subresource, delete preconditions
and propagation, a garbage collector, paginated lists and watches, discovery,
OpenAPI, Tables, server-side apply, pod logs, and test hooks for request
inspection and fault injection. kubectl 1.32 works against it. See README.md.
"""

from .crds import load_crds
from .resources import CONFIG_MAP, DEFAULT_RESOURCES, EVENT, JOB, NAMESPACE, POD, TFJOB, WELL_KNOWN, Resource
from .server import EmulatorServer, create_app, run, seed_object

__all__ = [
    "CONFIG_MAP",
    "DEFAULT_RESOURCES",
    "EVENT",
    "JOB",
    "NAMESPACE",
    "POD",
    "TFJOB",
    "WELL_KNOWN",
    "EmulatorServer",
    "Resource",
    "create_app",
    "load_crds",
    "run",
    "seed_object",
]
