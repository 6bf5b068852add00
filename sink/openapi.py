"""The OpenAPI 3 document of the sink's read-only HTTP API, served at ``/openapi.json``.

Written by hand, next to the routes in `jobttl.sink.api`: the tests check that it is a valid
OpenAPI document and that every answer the sink gives matches it. The CloudEvents endpoint
(``POST /``) and ``/metrics`` follow other specifications and are not described here, and so
neither is ``GET /``, the same index as ``GET /api/v1`` on the path CloudEvents are posted to.
"""

from __future__ import annotations

from typing import Any

from jobttl.core.domain.wire.shapes import FIELDS, TIME_FIELDS, TIME_SUFFIX, UNPARSED

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
MAX_OFFSET = 10_000_000  # far past any real backlog; keeps Redis from being asked absurd ranges


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_IDENTITY = {
    "apiVersion": {"type": "string", "example": "kubeflow.org/v1"},
    "kind": {"type": "string", "example": "TFJob"},
    "namespace": {"type": "string"},
    "name": {"type": "string"},
    "uid": {"type": "string"},
}

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def _typed(kind: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}} if kind == "array" else {"type": kind}  # lists of strings


def _times(*fields: str) -> dict[str, Any]:
    """The RFC 3339 twins of these epoch fields (jobttl.core.domain.wire.shapes.with_times)."""
    return {
        field + TIME_SUFFIX: {"type": "string", "format": "date-time", "description": f"{field}, in RFC 3339 UTC"}
        for field in fields
    }


# An audit entry's fields that have a type of their own (jobttl.core.domain.wire.shapes.FIELDS), the RFC
# 3339 twins of its times, and what did not parse as its type; every other field is a string.
_ENTRY_FIELDS = {
    **{name: _typed(kind) for name, kind in FIELDS.items()},
    **_times(*TIME_FIELDS),
    UNPARSED: {**_STRING_MAP, "description": "fields whose stored value is not of their type, as stored"},
}

# Kubernetes object names are DNS-1123 subdomains of at most 253 characters; namespaces
# DNS-1123 labels of at most 63 (jobttl.core.domain.wire.identity checks the same).
_NAME = {
    "type": "string",
    "minLength": 1,
    "maxLength": 253,
    "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
}
_NAMESPACE = {"type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}

# With JOBTTL_READ_API_AUTH (oidc or kubernetes): the same right as writes (docs/console.md#the-read-api).
_READER_REFUSED = {
    "401": _json(_ref("Error"), "JOBTTL_READ_API_AUTH is on and no valid bearer token was sent (WWW-Authenticate)"),
    "403": _json(
        _ref("Error"),
        "the token's user may not read this (the message names the right and the ClusterRole jobttl-reader)",
    ),
}

DOCUMENT: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {
        "title": "jobttl",
        "version": "1",
        "description": "What jobttl will delete, when and why: the pending deletions of finished Kubernetes "
        "training jobs, and everything known about one job. Read-only. Every time is given in Unix "
        "seconds (`due`) and, beside it, in RFC 3339 UTC (`dueTime`).",
    },
    "paths": {
        "/api/v1": {
            "get": {
                "summary": "Where the API is: this document and its paths",
                "operationId": "apiIndex",
                "responses": {"200": _json(_ref("Index"), "links")},
            }
        },
        "/healthz": {
            "get": {
                "summary": "The process is alive (checks nothing else)",
                "operationId": "healthz",
                "responses": {"200": _json(_ref("Health"), "alive")},
            }
        },
        "/readyz": {
            "get": {
                "summary": "Redis answers within a second, its clock agrees, and it has room for bookings",
                "operationId": "readyz",
                "responses": {
                    "200": _json(_ref("Health"), "ready"),
                    "503": _json(
                        _ref("Error"),
                        "Redis is unreachable, its clock disagrees, or it is full "
                        "(past 90% of its maxmemory); the message says which",
                    ),
                },
            }
        },
        "/api/v1/deletions": {
            "get": {
                "summary": "Pending deletions, in due order",
                "operationId": "listDeletions",
                "parameters": [
                    {
                        "name": "namespace",
                        "in": "query",
                        "schema": {"type": "string"},
                        "description": "only this namespace",
                    },
                    {
                        "name": "kind",
                        "in": "query",
                        "schema": {"type": "string"},
                        "description": "only this kind, e.g. TFJob, Job (batch/v1's), Job.batch.volcano.sh",
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "description": "page size",
                        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
                    },
                    {
                        "name": "offset",
                        "in": "query",
                        "description": "items to skip",
                        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
                    },
                ],
                "responses": {
                    "200": _json(_ref("DeletionList"), "one page of pending deletions"),
                    "400": _json(_ref("Error"), "a query parameter is invalid; the message names it"),
                    **_READER_REFUSED,
                    "503": _json(_ref("Error"), "Redis is unreachable, or the token's reviewer (API server, issuer)"),
                },
            }
        },
        "/api/v1/deletions/{namespace}/{name}": {
            "get": {
                "summary": "Everything known about one job: pending deletion, history, tombstone",
                "operationId": "getDeletion",
                "parameters": [
                    {"name": "namespace", "in": "path", "required": True, "schema": _NAMESPACE, "example": "team-a"},
                    {"name": "name", "in": "path", "required": True, "schema": _NAME, "example": "mnist"},
                    {
                        "name": "kind",
                        "in": "query",
                        "schema": {"type": "string"},
                        "description": "needed only when jobs of several kinds share the name; Kind, Kind.group "
                        "(Job.batch.volcano.sh) or apiVersion/Kind",
                    },
                ],
                "responses": {
                    "200": _json(_ref("Job"), "what jobttl knows"),
                    "400": _json(_ref("Error"), "the namespace or name is not a valid Kubernetes name"),
                    "404": _json(_ref("Error"), "jobttl knows nothing about this job"),
                    "409": _json(_ref("Error"), "jobs of several kinds share the name; pass kind"),
                    **_READER_REFUSED,
                    "503": _json(_ref("Error"), "Redis is unreachable, or the token's reviewer (API server, issuer)"),
                },
            }
        },
    },
    "components": {
        "schemas": {
            "Health": {
                "type": "object",
                "required": ["status"],
                "properties": {
                    "status": {"type": "string"},
                    "redisClockOffset": {"type": "number", "description": "Redis's clock minus this host's, seconds"},
                },
            },
            "Index": {
                "type": "object",
                "required": ["name", "openapi", "paths"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string"},
                    "openapi": {"type": "string", "description": "where the OpenAPI document is"},
                    "paths": {"type": "array", "items": {"type": "string"}, "description": "the paths it describes"},
                    "events": {"type": "string", "description": "where CloudEvents go"},
                    "metrics": {"type": "string", "description": "Prometheus metrics"},
                },
            },
            "Error": {
                "type": "object",
                "required": ["error", "code"],
                "properties": {"error": {"type": "string"}, "code": {"type": "integer"}},
            },
            "PendingDeletion": {
                "type": "object",
                "required": [
                    *_IDENTITY,
                    "stage",
                    "due",
                    "dueTime",
                    "dueIn",
                    "jobId",
                    "state",
                    "finishedAt",
                    "ttl",
                    "ttlSource",
                    "rules",
                    "dryRun",
                    "scheduledAt",
                ],
                "properties": {
                    **_IDENTITY,
                    "stage": {
                        "type": "string",
                        "enum": ["job", "pods"],
                        "description": "what is deleted: the job, or first its pods",
                    },
                    "due": {"type": "integer", "description": "when the deletion is due"},
                    "dueIn": {"type": "number", "description": "seconds from now; negative when overdue"},
                    "jobId": {"type": "string", "description": "the RQ job that will delete it"},
                    "state": {
                        "type": "string",
                        "nullable": True,
                        "description": "the RQ job's status (scheduled, queued, started, failed, ...)",
                    },
                    "finishedAt": {"type": "integer", "nullable": True},
                    "ttl": {"type": "integer", "nullable": True},
                    "ttlSource": {"type": "string", "nullable": True, "description": "where the TTL came from"},
                    "rules": {"type": "array", "items": {"type": "string"}, "description": "policy rules that matched"},
                    "dryRun": {"type": "boolean"},
                    "scheduledAt": {"type": "integer", "nullable": True},
                    "wouldDeleteAt": {
                        "type": "integer",
                        "nullable": True,
                        "description": "dry-run: when a real run would have deleted it",
                    },
                    **_times("due", "finishedAt", "scheduledAt", "wouldDeleteAt"),
                },
            },
            "DeletionList": {
                "type": "object",
                "required": ["items", "total", "offset", "limit"],
                "properties": {
                    "items": {"type": "array", "items": _ref("PendingDeletion")},
                    "total": {"type": "integer", "description": "how many match in all"},
                    "offset": {"type": "integer"},
                    "limit": {"type": "integer"},
                },
            },
            "AuditEntry": {
                "type": "object",
                "required": ["id", "at", "atTime", "event"],
                "description": "One decision from the audit trail: the job's identity, what happened and its details "
                "(reason, due, lateness, error, ...). Fields not listed here are strings.",
                "properties": {
                    "id": {"type": "string", "description": "the stream id; its first part is `at` in ms"},
                    "at": {"type": "number"},
                    "event": {"type": "string"},
                    **_IDENTITY,
                    **_ENTRY_FIELDS,
                },
                "additionalProperties": {"type": "string"},
            },
            "Tombstone": {
                "type": "object",
                "required": [*_IDENTITY, "deletedAt", "labels", "annotations", "creationTimestamp", "status"],
                "properties": {
                    **_IDENTITY,
                    "deletedAt": {"type": "number"},
                    **_times("deletedAt"),
                    "labels": _STRING_MAP,
                    "annotations": _STRING_MAP,
                    "creationTimestamp": {"type": "string", "nullable": True},
                    "status": {
                        "type": "object",
                        "description": "the job's final status: conditions, replicaStatuses, start and completion time",
                    },
                    "archive": {
                        "type": "string",
                        "description": "where its archive is (a directory or s3:// URL), when "
                        "the policy archives; `jobttl logs` prints its logs",
                    },
                    "unkept": {
                        "type": "string",
                        "description": "why its labels and status were not kept (too large or "
                        "too deep); they are empty then",
                    },
                },
            },
            "Decision": {
                "type": "object",
                "required": ["uid", "event", "at"],
                "description": "The latest decision about one UID that had the name: why it is kept, or what happened.",
                "properties": {
                    "uid": {"type": "string"},
                    "event": {"type": "string"},
                    "kind": {"type": "string"},
                    "apiVersion": {
                        "type": "string",
                        "description": "the kind's apiVersion (absent on what an earlier release noted)",
                    },
                    "reason": {"type": "string"},
                    "detail": {"type": "string"},
                    "at": {"type": "number", "nullable": True},
                    **_ENTRY_FIELDS,
                },
                "additionalProperties": {"type": "string"},
            },
            "Override": {
                "type": "object",
                "required": ["uid", "keep", "until", "by", "at"],
                "description": "An operator's keep (`jobttl cancel`) or later time (`jobttl postpone`) for one UID; "
                "`--undo` takes it back.",
                "properties": {
                    "uid": {"type": "string"},
                    "keep": {"type": "boolean"},
                    "until": {"type": "integer", "nullable": True, "description": "not deleted before (epoch s)"},
                    "by": {"type": "string", "nullable": True},
                    "at": {"type": "integer", "nullable": True, "description": "when it was said (epoch s)"},
                },
            },
            "Job": {
                "type": "object",
                "required": [
                    "namespace",
                    "name",
                    "kind",
                    "apiVersion",
                    "pending",
                    "overrides",
                    "decisions",
                    "history",
                    "tombstones",
                ],
                "properties": {
                    "namespace": {"type": "string"},
                    "name": {"type": "string"},
                    "kind": {"type": "string", "nullable": True},
                    "apiVersion": {
                        "type": "string",
                        "nullable": True,
                        "description": "the kind's: a batch/v1 Job and a Volcano Job are both `Job`",
                    },
                    "pending": {"type": "array", "items": _ref("PendingDeletion")},
                    "overrides": {
                        "type": "array",
                        "items": _ref("Override"),
                        "description": "what operators said (jobttl cancel, postpone) about each UID, if anything",
                    },
                    "decisions": {"type": "array", "items": _ref("Decision"), "description": "newest first"},
                    "history": {"type": "array", "items": _ref("AuditEntry"), "description": "newest first"},
                    "tombstones": {"type": "array", "items": _ref("Tombstone"), "description": "newest first"},
                },
            },
        }
    },
}
