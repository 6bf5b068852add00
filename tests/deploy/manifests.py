"""Helpers for the deployment tests: render knative/, validate objects against real schemas.

Everything here runs offline: the Knative CRDs come from ``../shared/reference/knative/``
(unchanged upstream copies), the Kubernetes schemas from the ``kubernetes-validate``
package, which bundles them.

``render()`` is a deliberately small stand-in for ``kustomize build``, implementing only what
knative/ uses and refusing everything else, so it can never silently render something
different from kustomize:

- ``resources``: YAML files (multi-document) and directories holding a kustomization.yaml;
- ``components``: directories holding a ``kind: Component`` kustomization, applied in order
  to what the resources produced (their own resources added, their generators and patches
  run), before the including kustomization's own generators and patches, as kustomize does;
- ``configMapGenerator`` with ``files`` (``key=path`` or ``path``), an optional
  ``namespace``, and ``options`` ``labels`` / ``annotations`` and ``disableNameSuffixHash:
  true`` (the name hash, and the references to it kustomize rewrites, are not implemented);
- ``patches`` without ``target``, each one document: ``$patch: delete`` removes the object
  it names; otherwise a JSON merge patch (RFC 7386) on a custom resource, lists not allowed
  (kustomize merges lists of built-in kinds by key, which is not implemented here);
- ``patches`` with a ``target`` (``group``, ``version``, ``kind``, ``name``, ``namespace``,
  matched exactly: kustomize would take ``name`` as a regular expression) holding a JSON 6902
  patch (``add``, ``remove``, ``replace``, ``test``); a target matching nothing is an error
  here (kustomize ignores it), so a typo cannot pass;
- ``images``: ``newName`` / ``newTag`` / ``digest`` on ``spec.containers``,
  ``spec.initContainers`` and the same under ``spec.template.spec`` (kustomize's field specs);
- duplicate objects are an error, as in kustomize.

Not implemented (any of them makes ``render()`` raise ``Unsupported``): other generators and
generator options, ``namespace``, name prefixes and suffixes, labels and annotations
transformers, replicas, strategic-merge patches with a target, label selectors in targets,
remote bases. test_loader.py compares the output with ``kubectl kustomize`` where kubectl is
installed (test_monitoring.py too, for the monitoring component).
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
KNATIVE = REPO / "knative"
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"
KNATIVE_CRDS = REFERENCE / "knative"
COMPOSE_SCHEMA = REFERENCE / "compose" / "compose-spec.json"

# The oldest Kubernetes the manifests promise to work on (Knative 1.15+ needs 1.28+), and the
# newest kubernetes-validate knows: core objects must validate against both.
KUBERNETES_VERSIONS = ("1.29", kubernetes_validate.utils.latest_version())

KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "components", "configMapGenerator", "patches", "images"}
COMPONENT_KEYS = KUSTOMIZATION_KEYS - {"components"}


class Unsupported(Exception):
    """The kustomization uses a feature render() does not implement."""


# --- rendering ----------------------------------------------------------------------------


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def object_id(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")


def api_group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def is_custom_resource(obj: dict[str, Any]) -> bool:
    group = api_group(obj["apiVersion"])
    return "." in group and not group.endswith(".k8s.io")


def merge_patch(target: Any, patch: Any, where: str = "") -> Any:
    """RFC 7386 JSON merge patch; lists in the patch are refused (see the module docstring)."""
    if isinstance(patch, list):
        raise Unsupported(f"a list in a merge patch ({where or 'top level'}): kustomize would merge it by key")
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value, f"{where}.{key}")
    return result


def _apply_patch(objects: list[dict[str, Any]], patch: dict[str, Any], origin: str) -> list[dict[str, Any]]:
    patch = copy.deepcopy(patch)
    delete = patch.pop("$patch", None) == "delete"
    if any(isinstance(k, str) and k.startswith("$") for k in patch):
        raise Unsupported(f"{origin}: strategic-merge directives other than a top-level $patch: delete")
    matches = [i for i, obj in enumerate(objects) if object_id(obj) == object_id(patch)]
    if len(matches) != 1:
        raise ValueError(f"{origin}: the patch matches {len(matches)} objects, not 1: {object_id(patch)}")
    index = matches[0]
    if delete:
        return objects[:index] + objects[index + 1 :]
    if not is_custom_resource(objects[index]):
        raise Unsupported(f"{origin}: merge patches on built-in kinds (strategic merge) are not implemented")
    patched = merge_patch(objects[index], patch)
    return objects[:index] + [patched] + objects[index + 1 :]


_IMAGE_PATHS = (("spec",), ("spec", "template", "spec"))


def _containers(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for path in _IMAGE_PATHS:
        spec: Any = obj
        for key in path:
            spec = spec.get(key) if isinstance(spec, dict) else None
        if isinstance(spec, dict):
            for field in ("containers", "initContainers"):
                yield from spec.get(field) or ()


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """``name[:tag][@digest]`` -> (name, tag, digest)."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = None
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    return name, tag, digest or None


def _apply_images(objects: list[dict[str, Any]], images: list[dict[str, Any]]) -> None:
    for rule in images:
        unknown = set(rule) - {"name", "newName", "newTag", "digest"}
        if unknown:
            raise Unsupported(f"images: {sorted(unknown)}")
        for obj in objects:
            for container in _containers(obj):
                name, tag, digest = split_image(container.get("image", ""))
                if name != rule["name"]:
                    continue
                name = rule.get("newName", name)
                if "digest" in rule:
                    container["image"] = f"{name}@{rule['digest']}"
                else:
                    tag = rule.get("newTag", tag)
                    container["image"] = name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


def _json_pointer(path: str, origin: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError(f"{origin}: {path!r} is not a JSON pointer")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _json_patch(obj: dict[str, Any], operations: list[dict[str, Any]], origin: str) -> dict[str, Any]:
    """RFC 6902 add / remove / replace / test on a copy of obj."""
    result = copy.deepcopy(obj)
    for op in operations:
        kind = op.get("op")
        if kind not in ("add", "remove", "replace", "test"):
            raise Unsupported(f"{origin}: JSON patch op {kind!r}")
        *parents, last = _json_pointer(op["path"], origin)
        node: Any = result
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = (len(node) if last == "-" else int(last)) if isinstance(node, list) else last
        present = key < len(node) if isinstance(node, list) else key in node
        if kind in ("test", "remove", "replace") and not present:
            raise ValueError(f"{origin}: {kind} at {op['path']}, which does not exist")
        if kind == "test":
            if node[key] != op["value"]:
                raise ValueError(f"{origin}: test failed at {op['path']}: {node[key]!r} != {op['value']!r}")
        elif kind == "remove":
            del node[key]
        elif kind == "add" and isinstance(node, list):
            node.insert(key, copy.deepcopy(op["value"]))
        else:
            node[key] = copy.deepcopy(op["value"])
    return result


def _targets(obj: dict[str, Any], target: dict[str, Any]) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    meta = obj.get("metadata") or {}
    actual = {
        "group": group,
        "version": version,
        "kind": obj["kind"],
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
    }
    return all(actual[k] == v for k, v in target.items())


def _apply_targeted_patch(
    objects: list[dict[str, Any]], target: dict[str, Any], text: str, origin: str
) -> list[dict[str, Any]]:
    unknown = set(target) - {"group", "version", "kind", "name", "namespace"}
    if unknown:
        raise Unsupported(f"{origin}: target {sorted(unknown)}")
    operations = yaml.safe_load(text)
    if not isinstance(operations, list):
        raise Unsupported(f"{origin}: a strategic-merge patch with a target")
    matched = [i for i, obj in enumerate(objects) if _targets(obj, target)]
    if not matched:
        raise ValueError(f"{origin}: the target matches no object: {target}")
    return [_json_patch(obj, operations, origin) if i in matched else obj for i, obj in enumerate(objects)]


def _generate_config_maps(directory: Path, generators: list[dict[str, Any]], origin: str) -> list[dict[str, Any]]:
    config_maps = []
    for generator in generators:
        options = generator.get("options") or {}
        unknown = (set(generator) - {"name", "namespace", "files", "options"}) | (
            set(options) - {"disableNameSuffixHash", "labels", "annotations"}
        )
        if unknown or options.get("disableNameSuffixHash") is not True:
            raise Unsupported(
                f"{origin}: configMapGenerator {generator.get('name')}: {sorted(unknown)} "
                "(only files, with disableNameSuffixHash: true)"
            )
        data = {}
        for entry in generator.get("files") or []:
            key, _, path = entry.rpartition("=")
            data[key or Path(path).name] = (directory / path).read_text()
        metadata = {
            "name": generator["name"],
            "namespace": generator.get("namespace"),
            "labels": options.get("labels"),
            "annotations": options.get("annotations"),
        }
        config_maps.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "data": data,
                "metadata": {k: v for k, v in metadata.items() if v is not None},
            }
        )
    return config_maps


def render(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kustomize build directory`` produces (for the subset described above)."""
    return _accumulate(directory, [], "Kustomization")


def _accumulate(directory: Path, objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """A kustomization's (or a component's, applied to `objects`) resources, components, generators, patches."""
    kustomization_file = directory / "kustomization.yaml"
    kustomization = yaml.safe_load(kustomization_file.read_text()) or {}
    if kustomization.get("kind", "Kustomization") != kind:
        raise ValueError(f"{kustomization_file}: expected kind {kind}, got {kustomization.get('kind')}")
    unknown = set(kustomization) - (KUSTOMIZATION_KEYS if kind == "Kustomization" else COMPONENT_KEYS)
    if unknown:
        raise Unsupported(f"{kustomization_file}: {sorted(unknown)}")
    objects = list(objects)
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        if "://" in entry or entry.startswith("git@"):
            raise Unsupported(f"{kustomization_file}: remote resource {entry}")
        objects += render(path) if path.is_dir() else load_yaml_documents(path)
    for entry in kustomization.get("components", []):
        objects = _accumulate((directory / entry).resolve(), objects, "Component")
    objects += _generate_config_maps(directory, kustomization.get("configMapGenerator", []), str(kustomization_file))
    for i, patch in enumerate(kustomization.get("patches", [])):
        origin = f"{kustomization_file}: patches[{i}]"
        unknown = set(patch) - {"path", "patch", "target"}
        if unknown:
            raise Unsupported(f"{origin}: {sorted(unknown)}")
        text = (directory / patch["path"]).read_text() if "path" in patch else patch["patch"]
        if "target" in patch:
            objects = _apply_targeted_patch(objects, patch["target"], text, origin)
            continue
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
        if len(documents) != 1 or not isinstance(documents[0], dict) or "apiVersion" not in documents[0]:
            raise Unsupported(f"{origin}: one strategic-merge patch document per entry")
        objects = _apply_patch(objects, documents[0], origin)
    _apply_images(objects, kustomization.get("images", []))
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objects:
        if object_id(obj) in seen:
            raise ValueError(f"{kustomization_file}: {object_id(obj)} defined twice")
        seen.add(object_id(obj))
    return objects


@functools.cache
def _rendered(directory: str) -> tuple[dict[str, Any], ...]:
    return tuple(render(Path(directory)))


def rendered(directory: Path) -> list[dict[str, Any]]:
    """render(), cached; a deep copy, so a test may change what it gets."""
    return copy.deepcopy(list(_rendered(str(directory))))


def find(objects: list[dict[str, Any]], kind: str, name: str, api_version: str | None = None) -> dict[str, Any]:
    found = [
        o
        for o in objects
        if o["kind"] == kind
        and o["metadata"]["name"] == name
        and (api_version is None or o["apiVersion"] == api_version)
    ]
    assert len(found) == 1, f"expected exactly one {kind} {name}, found {len(found)}"
    return found[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod template's spec of a Deployment, StatefulSet, Job or Knative Service; a Pod's own."""
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


# --- Kubernetes schemas -------------------------------------------------------------------


def validate_core(obj: dict[str, Any]) -> list[str]:
    """Problems kubernetes-validate (strict: unknown fields are errors) finds, per version."""
    problems = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            problems.append(f"Kubernetes {version}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(exc.message)
    return problems


# --- Knative CRD schemas --------------------------------------------------------------------

DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECT_META = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": DNS1123_SUBDOMAIN, "maxLength": 253},
        "namespace": {"type": "string", "pattern": DNS1123_LABEL, "maxLength": 63},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    },
}
_COPIED_KEYWORDS = (
    "enum",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "required",
    "default",
    "description",
)


def structural_to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI v3 structural schema (as in a CRD) as a JSON Schema.

    - ``x-kubernetes-int-or-string``: an integer or a string;
    - ``nullable``: null is allowed too;
    - an object with ``properties`` accepts no other field, whether or not it has
      ``x-kubernetes-preserve-unknown-fields``. Without that marker the API server would
      silently drop ("prune") the unknown field; with it the field would be stored and then
      ignored by the controller. Either way a field our manifests set but the CRD does not
      declare is a mistake, typically a typo;
    - an object with ``x-kubernetes-preserve-unknown-fields`` and no ``properties`` is a
      free-form map (e.g. a Trigger's ``exact`` filter) and accepts anything;
    - an object with neither (nor ``additionalProperties``) keeps nothing once pruned, so it
      accepts no field;
    - ``x-kubernetes-embedded-resource`` adds apiVersion, kind and metadata;
    - CEL rules (``x-kubernetes-validations``) and list/map-type markers are not checked.
    """
    out: dict[str, Any] = {k: node[k] for k in _COPIED_KEYWORDS if k in node}
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    elif "type" in node:
        out["type"] = [node["type"], "null"] if node.get("nullable") else node["type"]
    for combinator in ("allOf", "anyOf", "oneOf"):
        if combinator in node and not node.get("x-kubernetes-int-or-string"):
            out[combinator] = [structural_to_json_schema(s) for s in node[combinator]]
    if "not" in node:
        out["not"] = structural_to_json_schema(node["not"])
    if "items" in node:
        out["items"] = structural_to_json_schema(node["items"])
    properties = {k: structural_to_json_schema(v) for k, v in (node.get("properties") or {}).items()}
    if node.get("x-kubernetes-embedded-resource"):
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties.setdefault("metadata", {"type": "object"})
    if properties:
        out["properties"] = properties
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = structural_to_json_schema(node["additionalProperties"])
    elif "additionalProperties" in node:
        out["additionalProperties"] = node["additionalProperties"]
    elif node.get("type") == "object" and (properties or not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@functools.cache
def knative_crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> JSON Schema, for every served version of the reference CRDs."""
    schemas = {}
    for path in sorted(KNATIVE_CRDS.glob("*.yaml")):
        for crd in load_yaml_documents(path):
            if crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                if not version.get("served"):
                    continue
                api_version = f"{spec['group']}/{version['name']}"
                schema = structural_to_json_schema(version["schema"]["openAPIV3Schema"])
                schema.setdefault("properties", {})
                schema["properties"].update(
                    {
                        "apiVersion": {"const": api_version},
                        "kind": {"const": spec["names"]["kind"]},
                        "metadata": OBJECT_META,
                    }
                )
                schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata"})
                schema["additionalProperties"] = False
                jsonschema.Draft202012Validator.check_schema(schema)
                schemas[(api_version, spec["names"]["kind"])] = schema
    return schemas


def validate_knative(obj: dict[str, Any]) -> list[str]:
    """Problems the reference CRD schema finds in a Knative object."""
    schema = knative_crds().get((obj.get("apiVersion"), obj.get("kind")))
    if schema is None:
        return [f"no CRD in {KNATIVE_CRDS} serves {obj.get('apiVersion')} {obj.get('kind')}"]
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message}"
        for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]


def is_knative(obj: dict[str, Any]) -> bool:
    return api_group(obj.get("apiVersion", "")).endswith("knative.dev")


def validate(obj: dict[str, Any]) -> list[str]:
    return validate_knative(obj) if is_knative(obj) else validate_core(obj)


# --- bits shared by several tests -----------------------------------------------------------

ENV_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
