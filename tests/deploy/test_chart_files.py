"""charts/jobttl/'s generated parts are what tools/chart.py generates (`make knative` runs it).

- files/ holds copies of knative/monitoring's alerts and dashboard, no links;
- values.schema.json's `policy` is core/domain/rules/policy.schema.json (and the kind declarations' schema
  it refers to) in the draft-07 form every Helm reads, `kinds` refused there;
- README.md's values table lists every value values.yaml documents, and every value is
  documented (a new value without a `# --` comment stops the generator, naming it);
- Chart.yaml's Artifact Hub images are the images values.yaml runs;
- each check can fail: a stale copy, a hand edit, an undocumented value, a keyword Helm 3 cannot
  read are each named.
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tools import chart as generator
from tests.deploy.manifests import REPO

CHART = REPO / "charts" / "jobttl"


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return generator.generate()


def test_the_charts_generated_files_are_what_the_generator_writes(generated):
    assert generator.differences(generated) == [], "run make knative"


def test_the_monitoring_files_are_copies_of_knatives(generated):
    alerts = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert alerts == yaml.safe_load((REPO / "knative" / "monitoring" / "alerts.yaml").read_text())
    assert (CHART / "files" / "dashboard.json").read_bytes() == (
        REPO / "knative" / "monitoring" / "dashboard.json"
    ).read_bytes()
    assert not (CHART / "files" / "alerts.yaml").is_symlink() and not (CHART / "files" / "dashboard.json").is_symlink()


def test_the_values_schema_embeds_the_policys_schema(generated):
    schema = json.loads((CHART / "values.schema.json").read_text())
    policy = schema["properties"]["policy"]
    assert set(policy["properties"]) == set(
        json.loads((REPO / "core/domain/rules/policy.schema.json").read_text())["properties"]
    )
    assert policy["additionalProperties"] is False and policy["properties"]["kinds"]["not"] == {}
    refs = {v for v in _values(schema, "$ref")}
    assert refs and all(
        r.startswith("#/definitions/") and r.removeprefix("#/definitions/") in schema["definitions"] for r in refs
    )
    assert "kinds.kind" in schema["definitions"] and "policy.duration" in schema["definitions"]


def _values(node, key):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield v
            else:
                yield from _values(v, key)
    elif isinstance(node, list):
        for item in node:
            yield from _values(item, key)


def test_a_schema_keyword_helm_3_cannot_read_stops_the_generator():
    with pytest.raises(generator.GenerationError, match="prefixItems.*not draft-07 keywords"):
        generator._draft7({"type": "array", "prefixItems": [{"type": "string"}]}, {}, "x")
    # A $ref with siblings keeps them: draft-07 would ignore them, so the $ref moves into allOf.
    assert generator._draft7({"$ref": "#/$defs/a", "minLength": 1}, {"#/$defs/a": "#/definitions/p.a"}, "x") == {
        "minLength": 1,
        "allOf": [{"$ref": "#/definitions/p.a"}],
    }


def test_the_readme_table_lists_every_documented_value():
    values_text = (CHART / "values.yaml").read_text()
    documented = generator.documented(values_text)
    table = (CHART / "README.md").read_text().split(generator.TABLE_START)[1].split(generator.TABLE_END)[0]
    for doc in documented:
        assert f"| `{'.'.join(doc.path)}` |" in table
    assert any(d.path == ("redis", "auth", "existingSecret") for d in documented)
    assert any(d.path == ("rbac", "namespaces") for d in documented)


def test_an_undocumented_value_stops_the_generator():
    text = (CHART / "values.yaml").read_text() + "newThing:\n  enabled: true\n"
    with pytest.raises(generator.GenerationError, match="undocumented values .*: newThing.enabled"):
        generator.values_table(text)
    # Documented as a whole map, its keys need no comment of their own.
    assert "`newThing`" in generator.values_table(
        (CHART / "values.yaml").read_text() + "# -- Something new.\nnewThing:\n  enabled: true\n"
    )


def test_a_comment_that_documents_no_value_stops_the_generator():
    with pytest.raises(generator.GenerationError, match="values.yaml:3: a `# --` comment documents no value"):
        generator.documented("a: 1\n# -- floating\n\nb: 2\n")
    with pytest.raises(generator.GenerationError, match="not indented as the key is"):
        generator.documented("a:\n# -- misplaced\n  b: 2\n")


def test_a_hand_edit_of_a_generated_file_and_a_link_are_named(generated, tmp_path):
    copy = tmp_path / "jobttl"
    shutil.copytree(CHART, copy)
    readme = copy / "README.md"
    readme.write_text(readme.read_text().replace("| `logLevel` |", "| `loglevel` |"))
    (copy / "files" / "dashboard.json").unlink()
    (copy / "files" / "dashboard.json").symlink_to(REPO / "knative" / "monitoring" / "dashboard.json")
    assert generator.differences(generated, copy) == [
        "charts/jobttl/files/dashboard.json is a link: a copied or packaged chart would not carry it",
        "charts/jobttl/README.md differs from what tools/chart.py generates",
    ]
    assert generator.write(generated, copy) == [
        "wrote charts/jobttl/files/dashboard.json",
        "wrote charts/jobttl/README.md",
    ]
    assert generator.differences(generated, copy) == []


def test_artifact_hub_lists_the_images_the_chart_runs():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    images = {i["name"]: i["image"] for i in yaml.safe_load(chart["annotations"]["artifacthub.io/images"])}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert images["jobttl"] == f"ghcr.io/jobttl/jobttl:{chart['appVersion']}"
    assert images["redis"] == "docker.io/library/redis:7.4-alpine@" + values["redis"]["bundled"]["image"]["digest"]
    assert images["event-display"].endswith("@" + values["deadLetters"]["image"]["digest"])
