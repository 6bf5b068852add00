"""charts/jobttl/: the chart's generated parts (each said once elsewhere), and its package.

    python -m tools.chart                 rewrite them (`make knative` and `make chart` run this first)
    python -m tools.chart --check         name each one that differs, write nothing (exit 1);
                                          tests/deploy/test_chart_files.py does the same
    python -m tools.chart --package DIR   rewrite them, then package the chart into DIR with
                                          Helm's own SDK (`make chart`: dist/jobttl-<version>.tgz)

What is generated, and from what:

- files/alerts.yaml and files/dashboard.json: copies of knative/monitoring/'s, which are written
  by hand there and tested with promtool. Copies, not links: a chart copied or packaged anywhere
  carries them (a link resolves to nothing outside this checkout).
- values.schema.json's `policy`: core/domain/rules/policy.schema.json, the policy's one schema, with
  the kind declarations' (core/domain/kinds/kinds.schema.json) it refers to, as definitions named
  `policy.*` and `kinds.*`, in draft-07 form (the draft every Helm 3 and 4 reads), and `kinds`
  refused there (the chart's own `kinds` value sets it). So `--set policy.tll=7d` stops
  `helm install`, naming the field. The rest of values.schema.json is written by hand.
- README.md's values table: every value documented in values.yaml by a `# --` comment (the
  helm-docs convention: `# -- text`, more `#` lines continue it, `# @default -- text` replaces the
  default shown), in file order. Every value must be documented, itself or through a documented
  map above it: an undocumented one stops the generator, naming it.
- Chart.yaml's artifacthub.io/images annotation: the images values.yaml runs, as Artifact Hub
  lists them (jobttl's at the chart's appVersion).
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools.command import check_or_write, exit_status

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "jobttl"
MONITORING = REPO / "knative" / "monitoring"
DOMAIN = REPO / "core" / "domain"
# The policy's schema and the kind declarations' it refers to (by their $id: https://jobttl.io/schemas/...)
SCHEMAS = {"policy": DOMAIN / "rules" / "policy.schema.json", "kinds": DOMAIN / "kinds" / "kinds.schema.json"}
COMMAND = "make knative"

TABLE_START = "<!-- values table: generated from values.yaml by `make knative` (tools/chart.py); do not edit -->"
TABLE_END = "<!-- end of the values table -->"
IMAGES_KEY = "  artifacthub.io/images: |"

# The keywords the embedded schemas may use: draft-07's (Helm 3 before 3.18 validates with
# gojsonschema, which knows no newer draft); `$defs` is renamed to `definitions` on the way.
DRAFT7_KEYWORDS = frozenset(
    {
        "$schema",
        "$id",
        "$ref",
        "$comment",
        "$defs",
        "title",
        "description",
        "default",
        "examples",
        "type",
        "enum",
        "const",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "items",
        "additionalItems",
        "maxItems",
        "minItems",
        "uniqueItems",
        "contains",
        "maxProperties",
        "minProperties",
        "required",
        "properties",
        "patternProperties",
        "additionalProperties",
        "dependencies",
        "propertyNames",
        "if",
        "then",
        "else",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "format",
    }
)
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment"})
# Keys whose values are maps of names to schemas (the names are not keywords).
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependencies"})


class GenerationError(Exception):
    """Something the generator cannot write faithfully; the message names it."""


# --- the policy's schema, embedded ---------------------------------------------------------------


def _draft7(node: Any, refs: dict[str, str], where: str) -> Any:
    """A draft 2020-12 schema node in draft-07 form: refs renamed, a $ref with other keywords
    wrapped in allOf (draft-07 ignores a $ref's siblings), any keyword draft-07 lacks refused."""
    if isinstance(node, list):
        return [_draft7(item, refs, where) for item in node]
    if not isinstance(node, dict):
        return node
    unknown = set(node) - DRAFT7_KEYWORDS
    if unknown:
        raise GenerationError(f"{where}: {sorted(unknown)} are not draft-07 keywords; Helm 3 would not read them")
    out = {}
    for key, value in node.items():
        if key == "$ref":
            if value not in refs:
                raise GenerationError(f"{where}: $ref {value} names nothing this generator embeds")
            out[key] = refs[value]
        elif key in SCHEMA_MAPS:
            out[key] = {name: _draft7(sub, refs, f"{where}/{name}") for name, sub in value.items()}
        elif key in ("enum", "const", "default", "examples", "required"):
            out[key] = copy.deepcopy(value)
        else:
            out[key] = _draft7(value, refs, f"{where}/{key}")
    if "$ref" in out and set(out) - ANNOTATIONS - {"$ref"}:
        out = {**{k: v for k, v in out.items() if k != "$ref"}, "allOf": [{"$ref": out["$ref"]}]}
    return out


def policy_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the `policy` value's schema, the definitions it refers to) from core/domain's schemas."""
    documents = {name: json.loads(path.read_text()) for name, path in SCHEMAS.items()}
    refs = {}
    for name, document in documents.items():
        for definition in document.get("$defs", {}):
            refs[f"{name}.schema.json#/$defs/{definition}"] = f"#/definitions/{name}.{definition}"
    definitions = {}
    for name, document in documents.items():
        local = {**refs, **{f"#/$defs/{d}": f"#/definitions/{name}.{d}" for d in document.get("$defs", {})}}
        for definition, schema in document.get("$defs", {}).items():
            definitions[f"{name}.{definition}"] = _draft7(
                schema, local, f"{SCHEMAS[name].relative_to(REPO)}#/$defs/{definition}"
            )
        if name == "policy":
            top = {k: v for k, v in document.items() if k not in ("$schema", "$id", "$defs", "title")}
            policy = _draft7(top, local, str(SCHEMAS["policy"].relative_to(REPO)))
    policy["properties"]["kinds"] = {
        "not": {},
        "description": "not here: set the top-level `kinds` value, which the event source and the RBAC follow too",
    }
    return policy, definitions


def values_schema(text: str) -> str:
    """values.schema.json with its `policy` and the definitions it uses generated, the rest as written."""
    schema = json.loads(text)
    policy, definitions = policy_schema()
    schema["properties"]["policy"] = policy
    kept = {k: v for k, v in schema.get("definitions", {}).items() if not k.startswith(("policy.", "kinds."))}
    schema["definitions"] = {**kept, **definitions}
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


# --- the values table ------------------------------------------------------------------------------

_KEY = re.compile(r"^(\s*)([A-Za-z0-9_.-]+):(\s|$)")


@dataclass
class Documented:
    path: tuple[str, ...]
    description: str
    default: str | None = None  # what `# @default --` says instead of the value


def documented(text: str, origin: str = "values.yaml") -> list[Documented]:
    """The values documented by `# --` comments, in file order."""
    found: list[Documented] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the key each line is under
    pending: Documented | None = None
    pending_indent = 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if stripped.startswith("# --"):
            pending, pending_indent = Documented((), stripped[4:].strip()), indent
        elif pending is not None and stripped.startswith("#"):
            _continue_comment(pending, stripped)
        elif not stripped or stripped.startswith(("#", "- ")):
            if pending is not None:
                raise GenerationError(
                    f"{origin}:{number}: a `# --` comment documents no value (it must sit right above its key)"
                )
        elif _enter_key(stack, line, indent) and pending is not None:
            if pending_indent != indent:
                raise GenerationError(
                    f"{origin}:{number}: the `# --` comment above {stack[-1][1]} is not indented as the key is"
                )
            pending.path = tuple(key for _, key in stack)
            found.append(pending)
            pending = None
    return found


def _continue_comment(pending: Documented, stripped: str) -> None:
    """A comment line after `# --`: the default shown (`# @default --`), or more description."""
    if stripped.startswith("# @default --"):
        pending.default = stripped[len("# @default --") :].strip()
    else:
        pending.description += " " + stripped[1:].strip()


def _enter_key(stack: list[tuple[int, str]], line: str, indent: int) -> bool:
    """Whether the line holds a key: if so, the stack ends with it (the keys it closes popped)."""
    match = _KEY.match(line)
    if match is None:
        return False  # a continuation of a flow value
    while stack and stack[-1][0] >= indent:
        stack.pop()
    stack.append((indent, match.group(2)))
    return True


def leaves(values: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths of every value that is not a map holding more (lists and empty maps are leaves)."""
    if isinstance(values, dict) and values:
        return [p for key, value in values.items() for p in leaves(value, (*path, key))]
    return [path]


def lookup(values: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        values = values[key]
    return values


def _type(value: Any) -> str:
    for kind, name in (
        (bool, "bool"),
        (int, "int"),
        (float, "float"),
        (str, "string"),
        (list, "list"),
        (dict, "object"),
    ):
        if isinstance(value, kind):
            return name
    return "null"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def values_table(values_text: str) -> str:
    values = yaml.safe_load(values_text)
    docs = documented(values_text)
    covered = {d.path for d in docs}
    missing = [".".join(p) for p in leaves(values) if not any(p[:i] in covered for i in range(1, len(p) + 1))]
    if missing:
        raise GenerationError(
            f"values.yaml: undocumented values (add a `# --` comment above each, or above a "
            f"map holding them): {', '.join(missing)}"
        )
    rows = ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for doc in docs:
        value = lookup(values, doc.path)
        default = (
            doc.default
            if doc.default is not None
            else f"`{_cell(json.dumps(value, ensure_ascii=False, separators=(', ', ': ')))}`"
        )
        rows.append(f"| `{'.'.join(doc.path)}` | {_type(value)} | {default} | {_cell(doc.description)} |")
    return "\n".join(rows)


def readme(text: str, values_text: str) -> str:
    if TABLE_START not in text or TABLE_END not in text:
        raise GenerationError(f"charts/jobttl/README.md: the markers {TABLE_START!r} and {TABLE_END!r} are missing")
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_START}\n{values_table(values_text)}\n{TABLE_END}{tail}"


# --- Chart.yaml's images ------------------------------------------------------------------------


def image_ref(image: dict[str, Any], default_tag: str = "") -> str:
    """As the chart's jobttl.imageRef writes it (without global.imageRegistry)."""
    ref = "/".join(p for p in (image.get("registry"), image["repository"]) if p)
    tag = str(image.get("tag") or default_tag)
    return ref + (f":{tag}" if tag else "") + (f"@{image['digest']}" if image.get("digest") else "")


def chart_yaml(text: str, values: dict[str, Any]) -> str:
    chart = yaml.safe_load(text)
    images = [
        ("jobttl", image_ref(values["image"], str(chart["appVersion"]))),
        ("redis", image_ref(values["redis"]["bundled"]["image"])),
        ("event-display", image_ref(values["deadLetters"]["image"])),
    ]
    block = [IMAGES_KEY] + [f"    - name: {name}\n      image: {ref}" for name, ref in images]
    lines = text.splitlines()
    if IMAGES_KEY not in lines:
        raise GenerationError(f"charts/jobttl/Chart.yaml: no {IMAGES_KEY.strip()!r} annotation to write")
    start = lines.index(IMAGES_KEY)
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return "\n".join(lines[:start] + block + lines[end:]) + "\n"


# --- all of it ------------------------------------------------------------------------------------

MONITORING_HEADER = f"""\
# GENERATED by `{COMMAND}` (tools/chart.py): a copy of knative/monitoring/alerts.yaml, so that the
# chart carries it wherever it is copied or packaged. Edit that file, then run {COMMAND}.
"""


def generate(chart_dir: Path = CHART) -> dict[str, str]:
    """Every generated file: its path under the chart -> its content."""
    values_text = (chart_dir / "values.yaml").read_text()
    values = yaml.safe_load(values_text)
    return {
        "files/alerts.yaml": MONITORING_HEADER + (MONITORING / "alerts.yaml").read_text(),
        "files/dashboard.json": (MONITORING / "dashboard.json").read_text(),
        "values.schema.json": values_schema((chart_dir / "values.schema.json").read_text()),
        "README.md": readme((chart_dir / "README.md").read_text(), values_text),
        "Chart.yaml": chart_yaml((chart_dir / "Chart.yaml").read_text(), values),
    }


def differences(files: dict[str, str], chart_dir: Path = CHART) -> list[str]:
    problems = []
    for name, content in files.items():
        path = chart_dir / name
        if path.is_symlink():
            problems.append(f"charts/jobttl/{name} is a link: a copied or packaged chart would not carry it")
        elif not path.is_file() or path.read_text() != content:
            problems.append(f"charts/jobttl/{name} differs from what tools/chart.py generates")
    return problems


def write(files: dict[str, str], chart_dir: Path = CHART) -> list[str]:
    changed = []
    for name, content in files.items():
        path = chart_dir / name
        if path.is_file() and not path.is_symlink() and path.read_text() == content:
            continue
        if path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        changed.append(f"wrote charts/jobttl/{name}")
    return changed


def package(destination: Path, chart_dir: Path = CHART) -> Path:
    """`helm package` by Helm's own SDK (helm-python-sdk, the test extras): jobttl-<version>.tgz."""
    import helm_python

    destination.mkdir(parents=True, exist_ok=True)
    return Path(helm_python.package(str(chart_dir), destination=str(destination)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chart", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; name what differs (exit 1)")
    parser.add_argument("--package", metavar="DIR", type=Path, help="then package the chart into DIR")
    args = parser.parse_args(argv)
    status = exit_status(
        lambda: check_or_write(
            generate(),
            check=args.check,
            differences=differences,
            write=write,
            up_to_date="charts/jobttl/'s generated files are up to date",
            command=COMMAND,
        ),
        program="tools/chart.py",
        errors=GenerationError,
        status=2,
    )
    if status or args.check or not args.package:
        return status
    print(f"packaged {package(args.package)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
