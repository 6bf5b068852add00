"""The minimal kustomize stand-in in manifests.py: faithful where used, loud where not."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.deploy.manifests import KNATIVE, Unsupported, merge_patch, object_id, render, split_image

VARIANTS = {"base": KNATIVE, "direct": KNATIVE / "overlays" / "direct", "evidence": KNATIVE / "overlays" / "evidence"}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) not installed")
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_render_matches_kubectl_kustomize(variant):
    result = subprocess.run(
        ["kubectl", "kustomize", str(VARIANTS[variant])], capture_output=True, text=True, timeout=60, check=True
    )
    expected = sorted((d for d in yaml.safe_load_all(result.stdout) if d), key=object_id)
    assert sorted(render(VARIANTS[variant]), key=object_id) == expected


def test_apply_k_on_knative_renders_the_base():
    assert sorted(render(KNATIVE), key=object_id) == sorted(render(KNATIVE / "base"), key=object_id)


def _kustomization(tmp_path, text, **files):
    (tmp_path / "kustomization.yaml").write_text(text)
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    return tmp_path


CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: n}\ndata: {k: v}\n"


@pytest.mark.parametrize(
    "text",
    [
        "resources: [a.yaml]\nnamespace: other\n",
        "resources: [a.yaml]\nnamePrefix: x-\n",
        "resources: [a.yaml]\nconfigMapGenerator: [{name: b, literals: [k=v]}]\n",
        "resources: [a.yaml]\npatches: [{path: p.yaml, target: {kind: ConfigMap}}]\n",
        "resources: [a.yaml]\npatches: [{path: p.yaml}]\n",  # a strategic merge on a built-in kind
        "resources: [a.yaml]\nimages: [{name: x, newImage: y}]\n",
    ],
)
def test_features_it_does_not_implement_are_refused(tmp_path, text):
    directory = _kustomization(tmp_path, text, **{"a.yaml": CONFIG_MAP, "p.yaml": CONFIG_MAP.replace("v}", "w}")})
    with pytest.raises(Unsupported):
        render(directory)


def test_duplicates_and_patches_that_match_nothing_are_errors(tmp_path):
    with pytest.raises(ValueError, match="twice"):
        render(
            _kustomization(tmp_path, "resources: [a.yaml, b.yaml]\n", **{"a.yaml": CONFIG_MAP, "b.yaml": CONFIG_MAP})
        )
    with pytest.raises(ValueError, match="matches 0 objects"):
        render(
            _kustomization(
                tmp_path,
                "resources: [a.yaml]\npatches:\n  - patch: |-\n      $patch: delete\n"
                "      apiVersion: v1\n      kind: ConfigMap\n"
                "      metadata: {name: zz, namespace: n}\n",
                **{"a.yaml": CONFIG_MAP},
            )
        )


def test_merge_patch_and_image_parsing():
    assert merge_patch({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": 9, "c": None}}) == {"a": {"b": 9}, "d": 3}
    with pytest.raises(Unsupported):
        merge_patch({"a": [1]}, {"a": [2]})
    assert split_image("ghcr.io/jobttl/jobttl:0.1.0") == ("ghcr.io/jobttl/jobttl", "0.1.0", None)
    assert split_image("localhost:5000/jobttl") == ("localhost:5000/jobttl", None, None)
    assert split_image("redis:7@sha256:ab") == ("redis", "7", "sha256:ab")
