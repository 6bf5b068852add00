"""Checks on the private parts of redis-py and RQ that jobttl overrides or copies.

jobttl subclasses a few of their classes at seams that are not public API (see
core/store/redisconn.py, core/store/schedule.py, worker/runner.py), so a new release may change them without
notice; pyproject.toml bounds both to the versions tested. These helpers state what each override
relies on, so that a release that changes it fails a test that names what to re-check, rather
than changing jobttl's behaviour silently.
"""

from __future__ import annotations

import hashlib
import inspect
import textwrap


def parameters(owner: type, name: str) -> list[str] | None:
    """The parameter names of ``owner.name`` (None when it has none of that name)."""
    func = getattr(owner, name, None)
    return None if func is None else list(inspect.signature(func).parameters)


def source(owner: type, name: str) -> str:
    """The source of ``owner.name`` ('' when it has none of that name)."""
    func = getattr(owner, name, None)
    return "" if func is None else textwrap.dedent(inspect.getsource(func))


def fingerprint(owner: type, name: str) -> str:
    """The first 16 hex digits of the SHA-256 of ``owner.name``'s source (comments and all)."""
    return hashlib.sha256(source(owner, name).encode()).hexdigest()[:16]


def recheck(library: str, version: str, what: str, where: str) -> str:
    """The message of a failed check: what changed, and what in jobttl to re-read."""
    return (
        f"{library} {version} changed {what}, which jobttl relies on ({where}): re-check that code against "
        f"this release, then update this test and the bound in pyproject.toml"
    )
