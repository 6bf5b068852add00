"""Who a job is, checked the way the API server checks it.

An identity (namespace, name, UID) arrives in events, URLs and operator commands. Before it
touches Redis or becomes part of an API path it must be one the API server could have
produced: DNS-1123 names and namespaces within their length limits, an RFC 4122 UID. A
namespace ``..`` or a name ``.`` would otherwise turn a GET of one object into a GET of a
collection once urllib3 removes dot segments; a lone surrogate would fail deep inside the
Redis client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# k8s.io/apimachinery/pkg/util/validation: IsDNS1123Subdomain (object names) and
# IsDNS1123Label (namespaces).
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_UID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
MAX_NAME = 253
MAX_NAMESPACE = 63


class InvalidIdentity(ValueError):
    """A namespace, name or UID no API server would produce; the message names it."""


def shown(value: Any) -> str:
    """A value as an error message quotes it: its repr, cut short (a message, a log line, an Event
    and the history card that keep it stay small whatever the object holds)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_name(value: Any, field: str = "metadata.name") -> str:
    if not isinstance(value, str) or len(value) > MAX_NAME or not _SUBDOMAIN.fullmatch(value):
        raise InvalidIdentity(
            f"{field} {shown(value)} is not a valid Kubernetes object name (a DNS-1123 "
            f"subdomain of at most {MAX_NAME} characters)"
        )
    return value


def check_namespace(value: Any, field: str = "metadata.namespace") -> str:
    if not isinstance(value, str) or len(value) > MAX_NAMESPACE or not _LABEL.fullmatch(value):
        raise InvalidIdentity(
            f"{field} {shown(value)} is not a valid namespace (a DNS-1123 label of at most {MAX_NAMESPACE} characters)"
        )
    return value


def check_uid(value: Any, field: str = "metadata.uid") -> str:
    if not isinstance(value, str) or not _UID.fullmatch(value):
        raise InvalidIdentity(f"{field} {shown(value)} is not a Kubernetes UID (an RFC 4122 UUID)")
    return value


@dataclass(frozen=True)
class JobRef:
    """Who a job is. The UID tells apart two objects that had the same name."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    def as_dict(self) -> dict[str, str]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> JobRef:
        return cls(data["apiVersion"], data["kind"], data["namespace"], data["name"], data["uid"])

    @classmethod
    def of(cls, obj: dict[str, Any]) -> JobRef:
        """The identity of an object, validated; raises InvalidIdentity naming the bad field."""
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise InvalidIdentity("metadata is missing or not an object")
        return cls(
            obj["apiVersion"],
            obj["kind"],
            check_namespace(meta.get("namespace")),
            check_name(meta.get("name")),
            check_uid(meta.get("uid")),
        )

    @property
    def job_key(self) -> str:
        """``namespace/name``: what operators type, and what the per-job history is keyed by."""
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        from jobttl.core.domain.kinds.registry import shown_kind  # kinds builds on much more than identities need

        return f"{shown_kind(self.api_version, self.kind)} {self.namespace}/{self.name} ({self.uid})"
