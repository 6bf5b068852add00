"""knative/ is generated from the Helm chart (tools/knative.py, `make knative`): the chart says
each thing once, and these tests fail when knative/ is not what it generates.

- regenerating into a temporary directory gives, byte for byte, the files checked in, and no
  file the generator once wrote is left over: a hand edit of knative/, or a change to the chart
  or to knative/values/ without `make knative`, fails here naming the file;
- the check can fail: a template changed in a copy of the chart, a generated file edited by
  hand, a leftover are each named; what the line-by-line stripping would misread, and a Secret
  the generator has no placeholder for, stop it;
- every variant (the base, the direct and evidence overlays, the monitoring component over the
  base), rendered the way kustomize does, is the chart rendered with its values, compared object
  by object by this module's own account of what Helm adds: the generated patches and deletions
  do what the chart means, and nothing but Helm's bookkeeping is left out;
- none of Helm's bookkeeping reaches knative/, and Git holds the placeholder password every jobttl
  process refuses, never a generated one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("helm_python", reason="helm-python-sdk (the test extras) is not installed")

from jobttl.core.runtime.config import PLACEHOLDER_REDIS_PASSWORD
from tools import knative
from tests.deploy.chart import render as chart_render
from tests.deploy.manifests import KNATIVE, _json_patch, object_id, render, rendered


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return knative.generate()


# --- knative/ is what the chart generates ---------------------------------------------------------


def test_knative_is_byte_for_byte_what_the_chart_and_its_values_generate(generated, tmp_path):
    knative.write(generated, tmp_path)
    names = knative.generated_on_disk(tmp_path) | knative.generated_on_disk(KNATIVE)
    assert names == set(generated)
    for name in sorted(names):
        checked_in = KNATIVE / name
        assert checked_in.is_file(), f"knative/{name} is missing: run make knative"
        assert (tmp_path / name).is_file(), f"knative/{name} is no longer generated: run make knative"
        assert checked_in.read_bytes() == (tmp_path / name).read_bytes(), (
            f"knative/{name} is not what charts/jobttl/ and knative/values/ generate: run make knative "
            "(edit the chart or knative/values/, never knative/'s generated files)"
        )


def test_every_generated_file_says_so_and_how_to_regenerate(generated):
    for name, content in generated.items():
        head = " ".join(line.removeprefix("# ") for line in content.split("\n\n")[0].splitlines())
        assert content.startswith(knative.GENERATED) and "run make knative" in head, name
        assert "charts/jobttl/" in head and "knative/values/base.yaml" in head, name


def test_what_is_hand_written_is_not_generated(generated):
    hand_written = {
        "kustomization.yaml",
        "base/namespace.yaml",
        "README.md",
        "monitoring/README.md",
        "monitoring/alerts.yaml",
        "monitoring/alerts.test.yaml",
        "monitoring/dashboard.json",
    }
    assert not hand_written & set(generated)
    assert not hand_written & knative.generated_on_disk(KNATIVE)
    assert all((KNATIVE / name).is_file() for name in hand_written)


# --- the check can fail ---------------------------------------------------------------------------


def test_a_template_changed_in_the_chart_shows_until_knative_is_regenerated(tmp_path):
    chart = knative.copy_chart(tmp_path / "chart")
    worker = chart / "templates" / "worker.yaml"
    worker.write_text(worker.read_text().replace("periodSeconds: 60", "periodSeconds: 61", 1))
    files = knative.generate(chart_dir=chart)
    assert knative.differences(files) == [
        "knative/base/worker.yaml differs from what the chart and knative/values/ generate"
    ]
    # Regenerating (into a copy of knative/) is what makes the two agree again.
    copy = tmp_path / "knative"
    shutil.copytree(KNATIVE, copy)
    assert knative.write(files, copy) == ["wrote knative/base/worker.yaml"]
    assert knative.differences(files, copy) == []
    assert "periodSeconds: 61" in (copy / "base" / "worker.yaml").read_text()


def test_a_value_changed_in_knative_values_shows_until_knative_is_regenerated(tmp_path):
    values = tmp_path / "values"
    shutil.copytree(knative.VALUES, values)
    (values / "direct.yaml").write_text(
        (values / "direct.yaml").read_text() + "intake: {mode: direct, resyncSchedule: '*/5 * * * *'}\n"
    )
    problems = knative.differences(knative.generate(values_dir=values))
    assert problems == [
        "knative/overlays/direct/kustomization.yaml differs from what the chart and knative/values/ generate"
    ]


def test_a_hand_edit_a_missing_file_and_a_leftover_are_each_named(generated, tmp_path):
    copy = tmp_path / "knative"
    shutil.copytree(KNATIVE, copy)
    sink = copy / "base" / "sink.yaml"
    sink.write_text(sink.read_text().replace("timeoutSeconds: 30", "timeoutSeconds: 60"))
    (copy / "base" / "policy.yaml").unlink()
    (copy / "overlays" / "old").mkdir()
    (copy / "overlays" / "old" / "kustomization.yaml").write_text(knative.GENERATED + " from an older chart.\n")
    assert knative.differences(generated, copy) == [
        "knative/base/policy.yaml is missing",
        "knative/base/sink.yaml differs from what the chart and knative/values/ generate",
        "knative/overlays/old/kustomization.yaml was generated but is no longer",
    ]
    assert knative.write(generated, copy) == [
        "deleted knative/overlays/old/kustomization.yaml",
        "wrote knative/base/policy.yaml",
        "wrote knative/base/sink.yaml",
    ]
    assert knative.differences(generated, copy) == []


def test_the_generator_never_overwrites_a_hand_written_file(generated, tmp_path):
    copy = tmp_path / "knative"
    shutil.copytree(KNATIVE, copy)
    (copy / "base" / "sink.yaml").write_text("# mine\n")
    with pytest.raises(knative.GenerationError, match="knative/base/sink.yaml is hand-written"):
        knative.write(generated, copy)


def test_labels_the_line_rules_would_misread_stop_the_generator(tmp_path):
    """Labels in flow style: stripping line by line would leave Helm's in; the re-parse sees it."""
    chart = knative.copy_chart(tmp_path / "chart")
    policy = chart / "templates" / "policy.yaml"
    text = policy.read_text()
    block = '  labels:\n    {{- include "jobttl.labels" (dict "ctx" . "component" "") | nindent 4 }}'
    assert block in text
    policy.write_text(
        text.replace(block, '  labels: {{ include "jobttl.labels" (dict "ctx" . "component" "") | fromYaml | toJson }}')
    )
    with pytest.raises(knative.GenerationError, match="templates/policy.yaml: ConfigMap jobttl-policy: stripping"):
        knative.generate(chart_dir=chart)


def test_a_secret_without_a_placeholder_stops_the_generator(tmp_path):
    chart = knative.copy_chart(tmp_path / "chart")
    (chart / "templates" / "token.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: token, namespace: jobttl}\ndata: {token: c2VjcmV0}\n"
    )
    with pytest.raises(
        knative.GenerationError, match="Secret token: the generator writes a placeholder for the Redis password only"
    ):
        knative.generate(chart_dir=chart)


# --- each variant is the chart rendered with its values ----------------------------------------------

# This module's own account of what Helm adds (independent of tools/knative.py's).
HELM_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
}


def without_helm(node: Any) -> Any:
    if isinstance(node, list):
        return [without_helm(item) for item in node]
    if not isinstance(node, dict):
        return node
    result = {}
    for key, value in node.items():
        if key == "imagePullPolicy":
            continue
        plain_selector = key == "selector" and all(isinstance(v, str) for v in value.values())
        if key in ("labels", "matchLabels") or plain_selector:
            value = {k: v for k, v in value.items() if k not in HELM_LABELS}
        elif key == "matchExpressions":
            value = [e for e in value if e["key"] not in HELM_LABELS]
        elif key == "annotations":
            value = {k: v for k, v in value.items() if not k.startswith("checksum/")}
            if not value:
                continue
        result[key] = without_helm(value)
    return result


def chart_objects(*values_files: str) -> dict[tuple, dict[str, Any]]:
    """The chart rendered with knative/values/ files layered, less Helm's bookkeeping and hooks
    (kustomize runs none); in place of the Job that makes Redis's password in the cluster, the
    Secret it would make, as knative/ ships it: with the placeholder."""
    values: dict[str, Any] = {}
    for name in values_files:
        values = knative.merged(values, yaml.safe_load((KNATIVE / "values" / name).read_text()))
    objects = {}
    for obj in chart_render(values):
        annotations = obj["metadata"].get("annotations") or {}
        if "helm.sh/hook" in annotations:
            if obj["kind"] == "Job":
                env = {e["name"]: e["value"] for e in obj["spec"]["template"]["spec"]["containers"][0]["env"]}
                secret = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {
                        "name": env["SECRET_NAME"],
                        "namespace": env["SECRET_NAMESPACE"],
                        "labels": {"app.kubernetes.io/component": "redis", "app.kubernetes.io/part-of": "jobttl"},
                    },
                    "type": "Opaque",
                    "stringData": {env["SECRET_KEY"]: PLACEHOLDER_REDIS_PASSWORD},
                }
                objects[object_id(secret)] = secret
            continue
        obj = without_helm(obj)
        assert obj["kind"] != "Secret", "the chart renders no Secret of its own"
        objects[object_id(obj)] = obj
    return objects


def kustomized(directory: Path) -> dict[tuple, dict[str, Any]]:
    """What `kubectl apply -k directory` applies (test_loader.py: the loader is kustomize), but the
    hand-written Namespace (Helm installs into a namespace it is given)."""
    return {object_id(o): o for o in render(directory) if o["kind"] != "Namespace"}


def assert_same(chart: dict, kustomize: dict) -> None:
    assert sorted(kustomize) == sorted(chart)
    for key, obj in kustomize.items():
        assert obj == chart[key], key


def test_the_base_is_the_chart_rendered_with_its_values():
    assert_same(chart_objects("base.yaml"), kustomized(KNATIVE))


def test_the_direct_overlay_is_the_chart_rendered_with_its_values():
    assert_same(chart_objects("base.yaml", "direct.yaml"), kustomized(KNATIVE / "overlays" / "direct"))


def test_the_evidence_overlay_is_the_chart_rendered_with_its_values_but_the_base_policy():
    """The chart grants the evidence RBAC for a policy that archives and stages pods; the overlay
    grants it and leaves the policy, which says what to archive and where, to the operator."""
    chart = chart_objects("base.yaml", "evidence.yaml")
    policy = object_id(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "jobttl", "name": "jobttl-policy"}}
    )
    assert chart[policy] != chart_objects("base.yaml")[policy]
    chart[policy] = chart_objects("base.yaml")[policy]
    assert_same(chart, kustomized(KNATIVE / "overlays" / "evidence"))


def test_the_monitoring_component_over_the_base_is_the_chart_rendered_with_its_values(tmp_path):
    """As knative/monitoring/kustomization.yaml tells operators to turn it on."""
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(KNATIVE / "base", tmp_path)],
                "components": [os.path.relpath(KNATIVE / "monitoring", tmp_path)],
            }
        )
    )
    assert_same(chart_objects("base.yaml", "monitoring.yaml"), kustomized(tmp_path))


def test_the_comparison_sees_a_difference():
    chart = chart_objects("base.yaml", "direct.yaml")
    with pytest.raises(AssertionError):
        assert_same(chart, kustomized(KNATIVE))


def _keys(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*map(_keys, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    own = set(node) | ({node["key"]} if isinstance(node.get("key"), str) else set())
    return own.union(*map(_keys, node.values()))


@pytest.mark.parametrize("directory", ["base", "overlays/direct", "overlays/evidence", "monitoring"])
def test_none_of_helms_bookkeeping_reaches_knative(directory):
    objects = [o for path in (KNATIVE / directory).glob("*.yaml") for o in yaml.safe_load_all(path.read_text()) if o]
    keys = set().union(*map(_keys, objects))
    assert keys & HELM_LABELS == set()
    assert {k for k in keys if k.startswith("checksum/") or k == "imagePullPolicy"} == set()


def test_the_bookkeeping_check_can_fail():
    assert _keys({"metadata": {"labels": {"helm.sh/chart": "x"}}}) & HELM_LABELS
    assert _keys({"matchExpressions": [{"key": "app.kubernetes.io/instance", "operator": "In"}]}) & HELM_LABELS


def test_git_holds_the_placeholder_password_never_a_generated_one():
    [secret] = [o for o in rendered(KNATIVE) if o["kind"] == "Secret"]
    assert secret["stringData"] == {"password": PLACEHOLDER_REDIS_PASSWORD} and "data" not in secret
    # The password the pods read is that Secret's.
    assert chart_objects("base.yaml")[object_id(secret)]["stringData"] == secret["stringData"]


def test_the_image_is_pinned_to_the_charts_app_version():
    chart = yaml.safe_load((knative.CHART / "Chart.yaml").read_text())
    kustomization = yaml.safe_load((KNATIVE / "base" / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "ghcr.io/jobttl/jobttl", "newTag": chart["appVersion"]}]


# --- the pieces -------------------------------------------------------------------------------------


REF = {"spec": {"sink": {"ref": {"kind": "Broker", "name": "b"}}}}
CONTAINERS = {"containers": [{"name": "worker", "args": ["w"]}]}


@pytest.mark.parametrize(
    "old, new, other",
    [
        # a reference whose every field changes: replaced whole, after a test of the old one
        (
            REF,
            {"spec": {"sink": {"ref": {"kind": "Service", "name": "s"}}}},
            {"spec": {"sink": {"ref": {"kind": "Broker", "name": "other"}}}},
        ),
        # a key added in a list item: the item's name tested first
        (
            CONTAINERS,
            {"containers": [{"name": "worker", "args": ["w"], "ports": [1]}]},
            {"containers": [{"name": "sidecar", "args": ["w"]}]},
        ),
        # a key removed, a scalar in a list changed
        ({"a": 1, "b": 2, "c": [1, 2]}, {"a": 1, "c": [1, 3]}, {"a": 1, "b": 3, "c": [1, 2]}),
        ({"a": 1, "b": 2, "c": [1, 2]}, {"a": 1, "c": [1, 3]}, {"a": 1, "b": 2, "c": [1, 5]}),
        # a list shortened: replaced whole
        ({"a": 1, "c": [1, 2]}, {"a": 1, "c": [1]}, {"a": 1, "c": [1, 3]}),
        # items appended (nothing replaced: nothing to test)
        ({"env": [{"name": "A"}]}, {"env": [{"name": "A"}, {"name": "B"}]}, None),
    ],
)
def test_a_generated_json_patch_turns_the_old_object_into_the_new_and_refuses_another(old, new, other):
    operations = knative.json_patch(old, new)
    assert _json_patch(old, operations, "test") == new
    if other is not None:
        with pytest.raises(ValueError, match="test"):
            _json_patch(other, operations, "test")


def test_values_files_layer_as_helm_layers_them():
    assert knative.merged({"a": {"b": 1, "c": [1]}, "d": 1}, {"a": {"c": [2]}, "e": 2}) == {
        "a": {"b": 1, "c": [2]},
        "d": 1,
        "e": 2,
    }
