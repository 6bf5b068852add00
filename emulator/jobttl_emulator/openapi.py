"""``/openapi/v2`` and ``/openapi/v3`` built from the served resources' schemas.

Shaped like kube-apiserver's (kube-openapi ``handler``/``handler3`` and the
apiextensions-apiserver OpenAPI builder), as far as kubectl 1.32 reads them:

* ``/openapi/v3`` is the discovery index: ``{"paths": {"apis/<g>/<v>":
  {"serverRelativeURL": "/openapi/v3/apis/<g>/<v>?hash=<sha512>"}}}``; the
  per group-version document answers that URL with ``Cache-Control: public,
  immutable`` and redirects (301) a stale hash to the current one.
* Each document has the REST paths of its resources; every operation carries
  ``x-kubernetes-action`` and ``x-kubernetes-group-version-kind``, and PATCH
  lists its content types (strategic merge only for built-in kinds, which
  makes kubectl apply compute strategic or JSON merge patches as against a real
  server) and the ``fieldValidation`` query parameter (so kubectl validates
  server-side and never needs the v2 document).
* ``components.schemas`` holds each kind's schema (named
  ``org.kubeflow.v1.TFJob``-style for custom resources, ``io.k8s.api.batch.v1.Job``
  for built-ins) with ``x-kubernetes-group-version-kind``, its list, and
  ``ObjectMeta``/``ListMeta``/``Status``/``DeleteOptions``/``Patch``, so
  ``kubectl explain`` can walk any field.
* ``/openapi/v2`` is the same in Swagger 2.0, in JSON only: protobuf
  (``application/com.github.proto-openapi.spec.v2@v1.0+protobuf``, which
  kubectl asks for) is answered 406 as kube-openapi answers any type it does
  not offer. kubectl 1.32 only falls back to v2 when v3 lacks something
  (client-side validation without ``fieldValidation``, ``explain
  --output=plaintext-openapiv2``), and treats a failed v2 fetch in apply's
  patch computation as "no schema".
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from . import builtin_schemas
from .resources import Resource

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
_COMMON = {
    f"{META}.ObjectMeta": builtin_schemas.OBJECT_META,
    f"{META}.ListMeta": builtin_schemas.LIST_META,
    f"{META}.Status": builtin_schemas.STATUS,
    f"{META}.DeleteOptions": builtin_schemas.DELETE_OPTIONS,
    f"{META}.Patch": {
        "type": "object",
        "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.",
    },
}
_PATCH_TYPES = ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
_STRATEGIC = "application/strategic-merge-patch+json"
_QUERY = {
    "dryRun": "When present, indicates that modifications should not be persisted.",
    "fieldManager": "A name associated with the actor or entity that is making these changes.",
    "fieldValidation": "How the server handles fields the schema does not know: Ignore, Warn or Strict.",
    "force": 'Force is going to "force" Apply requests; it must be unset for non-apply patch requests.',
    "labelSelector": "A selector to restrict the list of returned objects by their labels.",
    "fieldSelector": "A selector to restrict the list of returned objects by their fields.",
    "limit": "The maximum number of responses to return for a list call.",
    "continue": "The continue option should be set when retrieving more results from the server.",
    "resourceVersion": "Sets a constraint on what resource versions a request may be served from.",
    "watch": "Watch for changes to the described resources.",
    "propagationPolicy": "Whether and how garbage collection will be performed: Orphan, Background or Foreground.",
    "gracePeriodSeconds": "The duration in seconds before the object should be deleted.",
    "container": "The container for which to stream logs. Defaults to only container if there is one container in the pod.",
    "tailLines": "If set, the number of lines from the end of the logs to show.",
    "limitBytes": "If set, the number of bytes to read from the server before terminating the log output.",
    "previous": "Return previous terminated container logs. Defaults to false.",
    "timestamps": "If true, add an RFC3339 timestamp at the beginning of every line of log output.",
}
_LIST_QUERY = ("labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch")
_WRITE_QUERY = ("dryRun", "fieldManager", "fieldValidation")


def definition_name(res: Resource) -> str:
    """``io.k8s.api.batch.v1.Job`` for built-ins, the reversed group for custom resources (``org.kubeflow.v1.TFJob``)."""
    if res.builtin:
        return f"io.k8s.api.{res.group or 'core'}.{res.version}.{res.kind}"
    reversed_group = ".".join(reversed(res.group.split("."))) if res.group else "core"
    return f"{reversed_group}.{res.version}.{res.kind}"


def gvk(res: Resource) -> dict:
    return {"group": res.group, "kind": res.kind, "version": res.version}


def group_version_key(res: Resource) -> str:
    """The key of a group-version in the v3 index: ``api/v1`` or ``apis/<group>/<version>``."""
    return res.path_prefix.lstrip("/")


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def object_schema(res: Resource) -> dict:
    """The kind's schema with typed apiVersion/kind, metadata as ObjectMeta, and its GVK."""
    schema = (
        copy.deepcopy(res.schema) if res.schema else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    )
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = builtin_schemas.string(
        "APIVersion defines the versioned schema of this representation of an object."
    )
    properties["kind"] = builtin_schemas.string(
        "Kind is a string value representing the REST resource this object represents."
    )
    properties["metadata"] = {
        "allOf": [_ref(f"{META}.ObjectMeta")],
        "default": {},
        "description": "Standard object's metadata.",
    }
    schema["type"] = "object"
    schema["x-kubernetes-group-version-kind"] = [gvk(res)]
    return schema


def list_schema(res: Resource) -> dict:
    return {
        "type": "object",
        "description": f"{res.list_kind} is a list of {res.kind}",
        "required": ["items"],
        "properties": {
            "apiVersion": builtin_schemas.string(),
            "kind": builtin_schemas.string(),
            "items": {"type": "array", "items": _ref(definition_name(res))},
            "metadata": {"allOf": [_ref(f"{META}.ListMeta")], "default": {}},
        },
        "x-kubernetes-group-version-kind": [{**gvk(res), "kind": res.list_kind}],
    }


def _param(name: str, where: str = "query") -> dict:
    param: dict[str, Any] = {"name": name, "in": where, "schema": {"type": "string", "uniqueItems": True}}
    if where == "path":
        param.update(required=True, description=f"{name} of the object")
    else:
        param["description"] = _QUERY[name]
    return param


def _operation(
    res: Resource,
    action: str,
    op_id: str,
    response: str,
    query: tuple[str, ...] = (),
    body: list[str] | None = None,
    body_schema: str = "",
) -> dict:
    """One operation; ``body``: the request content types (JSON bodies are ``body_schema``, else ``response``)."""
    op: dict[str, Any] = {
        "operationId": op_id,
        "description": f"{action} {res.kind}",
        "parameters": [_param(q) for q in query],
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": _ref(response)}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(res),
    }
    if body is not None:
        json_schema = body_schema or response
        op["requestBody"] = {
            "required": True,
            "content": {t: {"schema": _ref(json_schema if t == "application/json" else f"{META}.Patch")} for t in body},
        }
    return op


def _paths_for(res: Resource) -> dict[str, dict]:
    name, list_name = definition_name(res), definition_name(res) + "List"
    op_kind = (
        "".join(p.capitalize() for p in (res.group or "core").replace("-", ".").split(".")) + res.version.capitalize()
    )
    scope = "Namespaced" if res.namespaced else ""
    collection = (
        f"{res.path_prefix}/namespaces/{{namespace}}/{res.plural}"
        if res.namespaced
        else f"{res.path_prefix}/{res.plural}"
    )
    item = collection + "/{name}"
    path_params = [_param("namespace", "path")] if res.namespaced else []
    patch_types = _PATCH_TYPES[:2] + ([_STRATEGIC] if res.builtin else []) + _PATCH_TYPES[2:]
    paths = {
        collection: {
            "parameters": path_params,
            "get": _operation(res, "list", f"list{op_kind}{scope}{res.kind}", list_name, _LIST_QUERY),
            "post": _operation(
                res, "post", f"create{op_kind}{scope}{res.kind}", name, _WRITE_QUERY, ["application/json"]
            ),
            "delete": _operation(
                res, "deletecollection", f"deletecollection{op_kind}{scope}{res.kind}", f"{META}.Status", _LIST_QUERY
            ),
        },
        item: {
            "parameters": [_param("name", "path"), *path_params],
            "get": _operation(res, "get", f"read{op_kind}{scope}{res.kind}", name),
            "put": _operation(
                res, "put", f"replace{op_kind}{scope}{res.kind}", name, _WRITE_QUERY, ["application/json"]
            ),
            "patch": _operation(
                res, "patch", f"patch{op_kind}{scope}{res.kind}", name, (*_WRITE_QUERY, "force"), patch_types
            ),
            "delete": _operation(
                res,
                "delete",
                f"delete{op_kind}{scope}{res.kind}",
                f"{META}.Status",
                ("dryRun", "gracePeriodSeconds", "propagationPolicy"),
                ["application/json"],
                f"{META}.DeleteOptions",
            ),
        },
    }
    if res.namespaced:
        paths[f"{res.path_prefix}/{res.plural}"] = {
            "get": _operation(res, "list", f"list{op_kind}{res.kind}ForAllNamespaces", list_name, _LIST_QUERY)
        }
    if res.status_subresource:
        paths[item + "/status"] = {
            "parameters": [_param("name", "path"), *path_params],
            "get": _operation(res, "get", f"read{op_kind}{scope}{res.kind}Status", name),
            "put": _operation(
                res, "put", f"replace{op_kind}{scope}{res.kind}Status", name, _WRITE_QUERY, ["application/json"]
            ),
            "patch": _operation(
                res, "patch", f"patch{op_kind}{scope}{res.kind}Status", name, (*_WRITE_QUERY, "force"), patch_types
            ),
        }
    if res.log_subresource:
        log = _operation(res, "get", f"read{op_kind}{scope}{res.kind}Log", name, ())
        log["parameters"] = [_param(q) for q in ("container", "tailLines", "limitBytes", "previous", "timestamps")]
        log["responses"] = {"200": {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}}
        paths[item + "/log"] = {"parameters": [_param("name", "path"), *path_params], "get": log}
    return paths


def v3_document(resources: list[Resource], version: str) -> dict:
    """The OpenAPI v3 document of one group-version."""
    schemas: dict[str, Any] = copy.deepcopy(_COMMON)
    paths: dict[str, Any] = {}
    for res in resources:
        schemas[definition_name(res)] = object_schema(res)
        schemas[definition_name(res) + "List"] = list_schema(res)
        paths.update(_paths_for(res))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": paths,
        "components": {"schemas": schemas},
    }


# What Swagger 2.0 cannot say; the apiserver drops them from CRD schemas in v2 too (ToStructuralOpenAPIV2).
_V3_ONLY = ("anyOf", "oneOf", "not", "nullable", "allOf")


def _to_v2(value: Any, names: bool = False) -> Any:
    """Swagger 2.0 spelling of a v3 schema: ``#/definitions`` refs, plain ``$ref`` instead of ``allOf``.

    ``names``: ``value`` maps names to schemas (properties, definitions), whose keys are kept as they are.
    """
    if isinstance(value, dict) and names:
        return {k: _to_v2(v) for k, v in value.items()}
    if isinstance(value, dict):
        if "allOf" in value and len(value["allOf"]) == 1 and "$ref" in value["allOf"][0]:
            return _to_v2(value["allOf"][0])
        if set(value) == {"$ref"}:
            return {"$ref": value["$ref"].replace("#/components/schemas/", "#/definitions/")}
        return {k: _to_v2(v, k in ("properties", "patternProperties")) for k, v in value.items() if k not in _V3_ONLY}
    if isinstance(value, list):
        return [_to_v2(v) for v in value]
    return value


def _v2_operation(op: dict) -> dict:
    converted = {k: v for k, v in op.items() if k not in ("parameters", "responses", "requestBody")}
    converted["parameters"] = [
        {
            "name": p["name"],
            "in": p["in"],
            "type": "string",
            "uniqueItems": True,
            **({"required": True} if p.get("required") else {}),
        }
        for p in op["parameters"]
    ]
    if "requestBody" in op:
        content = op["requestBody"]["content"]
        converted["consumes"] = list(content)
        converted["parameters"].append(
            {"name": "body", "in": "body", "required": True, "schema": _to_v2(next(iter(content.values()))["schema"])}
        )
    response = next(iter(op["responses"]["200"]["content"].values()))["schema"]
    converted["produces"] = list(op["responses"]["200"]["content"])
    converted["responses"] = {"200": {"description": "OK", "schema": _to_v2(response)}}
    return converted


def v2_document(groups: dict[str, dict], version: str) -> dict:
    """Swagger 2.0 of every group-version, from their v3 documents."""
    definitions: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for document in groups.values():
        definitions.update(_to_v2(document["components"]["schemas"], names=True))
        for path, item in document["paths"].items():
            paths[path] = {
                method: _v2_operation(op)
                if method != "parameters"
                else [
                    {"name": p["name"], "in": p["in"], "type": "string", "uniqueItems": True, "required": True}
                    for p in op
                ]
                for method, op in item.items()
            }
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": paths,
        "definitions": definitions,
    }


class OpenAPI:
    """The documents for a fixed set of resources, built once and kept as bytes with their hashes."""

    def __init__(self, resources: tuple[Resource, ...], version: str) -> None:
        self._resources = resources
        self._version = version
        self._v3: dict[str, tuple[bytes, str]] | None = None
        self._v2: bytes | None = None

    def _groups(self) -> dict[str, dict]:
        by_gv: dict[str, list[Resource]] = {}
        for res in self._resources:
            by_gv.setdefault(group_version_key(res), []).append(res)
        return {key: v3_document(members, self._version) for key, members in by_gv.items()}

    def v3(self) -> dict[str, tuple[bytes, str]]:
        """Each group-version's document as JSON bytes and its hash (kube-openapi's ETag: SHA-512, upper-case hex)."""
        if self._v3 is None:
            documents = {key: json.dumps(doc, separators=(",", ":")).encode() for key, doc in self._groups().items()}
            self._v3 = {key: (body, hashlib.sha512(body).hexdigest().upper()) for key, body in documents.items()}
        return self._v3

    def v3_index(self) -> dict:
        return {
            "paths": {
                key: {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"} for key, (_, digest) in self.v3().items()
            }
        }

    def v2(self) -> bytes:
        if self._v2 is None:
            self._v2 = json.dumps(v2_document(self._groups(), self._version), separators=(",", ":")).encode()
        return self._v2
