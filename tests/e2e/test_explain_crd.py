"""`jobttl explain --crd FILE`: the kinds' declared paths against upstream CRDs (../shared/reference), offline,
as the worker checks them at start; the real command, its exit status and its documented JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from tests.fixtures import REFERENCE
from tests.services import ROOT

TFJOB_CRD = REFERENCE / "kubeflow" / "kubeflow.org_tfjobs.yaml"
ARGO_CRD = REFERENCE / "kubeflow" / "argoproj.io_workflows.yaml"
pytestmark = pytest.mark.skipif(not TFJOB_CRD.exists(), reason="the upstream CRDs (../shared/reference) are not here")

TFJOB_DECLARATION = """\
kindDeclarations:
  - group: kubeflow.org
    version: v1
    kind: TFJob
    plural: tfjobs
    finished:
      conditions:
        - {type: Succeeded, status: "True", outcome: succeeded}
        - {type: Failed, status: "True", outcome: failed}
    finishedAt: [status.completionTime, condition.lastTransitionTime]
    suspend: SUSPEND
"""


def explain_crd(crd, policy: str | None, tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTTL_")}
    command = [sys.executable, "-m", "jobttl", "explain", "--crd", str(crd), *args]
    if policy is not None:
        (tmp_path / "policy.yaml").write_text(policy)
        command += ["--policy", str(tmp_path / "policy.yaml")]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def test_the_builtin_tfjob_is_verified_against_its_upstream_crd(tmp_path):
    result = explain_crd(TFJOB_CRD, None, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "kubeflow.org/v1/TFJob (built in; enabled) against CRD tfjobs.kubeflow.org: verified"
    )


def test_a_misspelt_suspend_is_refused_naming_the_nearest_field_and_exits_1(tmp_path):
    result = explain_crd(TFJOB_CRD, TFJOB_DECLARATION.replace("SUSPEND", "spec.runPolicy.suspnd"), tmp_path, "--json")
    assert result.returncode == 1, result.stderr
    (item,) = json.loads(result.stdout)["items"]
    assert (item["kind"], item["verdict"], item["builtin"], item["enabled"]) == (
        "kubeflow.org/v1/TFJob",
        "refused",
        False,
        True,
    )
    assert item["refused"] == [
        f"{tmp_path / 'policy.yaml'}: kindDeclarations[0].suspend: 'spec.runPolicy.suspnd' is not in the schema of "
        "kubeflow.org/v1/TFJob (CRD tfjobs.kubeflow.org): spec.runPolicy has no field 'suspnd'; did you mean "
        "spec.runPolicy.suspend?"
    ]


def test_the_same_declaration_spelt_right_is_verified_with_what_it_inherits(tmp_path):
    result = explain_crd(TFJOB_CRD, TFJOB_DECLARATION.replace("SUSPEND", "spec.runPolicy.suspend"), tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    (item,) = json.loads(result.stdout)["items"]
    assert item["verdict"] == "verified" and item["refused"] == item["unverified"] == item["absent"] == []


def test_a_crd_that_keeps_unknown_fields_leaves_a_misspelt_suspend_unverified_not_verified(tmp_path):
    policy = textwrap.dedent("""\
        kindDeclarations:
          - group: argoproj.io
            version: v1alpha1
            kind: Workflow
            plural: workflows
            finished: {state: {path: status.phase, values: {Succeeded: succeeded, Failed: failed, Error: failed}}}
            finishedAt: [status.finishedAt]
            suspend: spec.suspnd
        """)
    result = explain_crd(ARGO_CRD, policy, tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith("against CRD workflows.argoproj.io: unverified")
    assert (
        "  unverified: suspend: 'spec.suspnd' cannot be checked against the schema of argoproj.io/v1alpha1/Workflow "
        "(CRD workflows.argoproj.io): spec keeps unknown fields (x-kubernetes-preserve-unknown-fields)"
    ) in lines
    # What it inherited from the built-in Workflow (its TTL object, the archiving wait) is said as such.
    assert any(
        line.startswith("  unverified (inherited from the built-in declaration): ttl.within[0]:") for line in lines
    )


def test_a_crd_without_a_schema_verifies_nothing(tmp_path):
    crd = yaml.safe_load(TFJOB_CRD.read_text())
    for version in crd["spec"]["versions"]:
        version.pop("schema")
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [crd]}))
    result = explain_crd(tmp_path / "crd.yaml", None, tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    (item,) = json.loads(result.stdout)["items"]
    assert item["verdict"] == "unverified"
    assert "spec.runPolicy.suspend" in {p["path"] for p in item["unverified"]}
    assert all("gives v1 no schema (openAPIV3Schema)" in p["message"] for p in item["unverified"])


def test_a_file_with_no_crd_of_a_known_kind_and_a_missing_file_exit_2(tmp_path):
    (tmp_path / "other.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    result = explain_crd(tmp_path / "other.yaml", None, tmp_path)
    assert result.returncode == 2 and "holds no CustomResourceDefinition of a kind the policy knows" in result.stderr
    result = explain_crd(tmp_path / "missing.yaml", None, tmp_path)
    assert result.returncode == 2 and "cannot read" in result.stderr


def test_explain_needs_objects_or_crds():
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTTL_")}
    result = subprocess.run(
        [sys.executable, "-m", "jobttl", "explain"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert result.returncode == 2 and "needs -f FILE" in result.stderr


@pytest.mark.parametrize(
    "change, words",
    [
        pytest.param(
            lambda crd: crd["spec"].update(names="TFJob"),
            "document 1 (CRD tfjobs.kubeflow.org): spec.names: expected a mapping, got a string 'TFJob'",
            id="spec.names a string (was a traceback, exit 1)",
        ),
        pytest.param(
            lambda crd: crd["spec"]["versions"][0].update(schema=[]),
            "document 1 (CRD tfjobs.kubeflow.org): spec.versions[0].schema: expected a mapping, got a list",
            id="a version's schema a list",
        ),
    ],
)
def test_a_malformed_crd_is_a_clear_error_naming_the_document_and_field_exit_2(tmp_path, change, words):
    crd = yaml.load(TFJOB_CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    change(crd)
    path = tmp_path / "crd.yaml"
    path.write_text(yaml.safe_dump(crd))
    result = explain_crd(path, None, tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        f"jobttl: {path}: not a CustomResourceDefinition as the API server writes one: {words}"
    )
    assert "Traceback" not in result.stderr
