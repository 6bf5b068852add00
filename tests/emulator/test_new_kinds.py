"""The emulator serves each kind jobttl has built in, registered as its upstream CRD registers it.

`make run` must work on a fresh clone, where ../shared/reference/ (the upstream CRDs) is absent:
the emulator carries minimal registrations of its own (`resources.NEW_KINDS`). Here, where the
CRDs are present, each registration is checked against its CRD, and each CRD is served by `--crd`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
import yaml

from jobttl_emulator.crds import load_crds
from jobttl_emulator.resources import NEW_KINDS, WELL_KNOWN
from jobttl.core.domain.kinds.registry import BUILTIN_KINDS
from tests.services import start_emulator

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"
CRDS = {
    ("ray.io", "RayJob"): "rayjob/ray.io_rayjobs.yaml",
    ("jobset.x-k8s.io", "JobSet"): "jobset/jobset.x-k8s.io_jobsets.yaml",
    ("batch.volcano.sh", "Job"): "volcano/batch.volcano.sh_jobs.yaml",
    ("sparkoperator.k8s.io", "SparkApplication"): "spark/sparkoperator.k8s.io_sparkapplications.yaml",
    ("tekton.dev", "PipelineRun"): "tekton/300-pipelinerun.yaml",
    ("tekton.dev", "TaskRun"): "tekton/300-taskrun.yaml",
}
SEEDS = Path(__file__).resolve().parents[2] / "emulator" / "jobttl_emulator" / "seeds" / "kinds.yaml"


def test_the_emulator_serves_every_builtin_kind_by_default():
    served = {(r.group, r.version, r.kind, r.plural) for r in WELL_KNOWN}
    assert {(k.group, k.version, k.kind, k.plural) for k in BUILTIN_KINDS} <= served


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="the upstream CRDs (../shared/reference) are not here")
@pytest.mark.parametrize("resource", NEW_KINDS, ids=lambda r: f"{r.group}/{r.version}/{r.kind}")
def test_each_minimal_registration_is_what_its_upstream_crd_registers(resource):
    (crd,) = [
        r for r in load_crds([REFERENCE / CRDS[(resource.group, resource.kind)]]) if r.version == resource.version
    ]
    for attribute in ("plural", "singular", "status_subresource", "namespaced", "short_names", "categories"):
        assert getattr(resource, attribute) == getattr(crd, attribute), attribute
    shown = ("name", "jsonPath", "type", "priority")
    assert [{k: c[k] for k in shown if c.get(k)} for c in resource.printer_columns] == [
        {k: c[k] for k in shown if c.get(k)} for c in crd.printer_columns
    ], "printer columns"


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="the upstream CRDs (../shared/reference) are not here")
def test_each_seeded_object_is_valid_against_its_upstream_crd_schema(tmp_path):
    """`--crd` serves the real CRDs, schemas included: the `make run --all-kinds` seeds pass them."""
    resources = load_crds([REFERENCE / path for path in CRDS.values()])
    server = start_emulator(tmp_path, tuple(resources))
    try:
        for obj in yaml.safe_load_all(SEEDS.read_text().replace("$NOW", "2030-01-01T00:00:00Z")):
            kind = next(k for k in BUILTIN_KINDS if (k.api_version, k.kind) == (obj["apiVersion"], obj["kind"]))
            namespace = obj["metadata"]["namespace"]
            body = {key: value for key, value in obj.items() if key != "status"}
            created = requests.post(f"{server.url}{kind.path(namespace, '')[:-1]}", json=body, timeout=10)
            assert created.status_code == 201, (obj["kind"], created.text)
            status = requests.put(
                f"{server.url}{kind.path(namespace, obj['metadata']['name'])}/status",
                json={**created.json(), "status": obj["status"]},
                timeout=10,
            )
            assert status.status_code == 200, (obj["kind"], status.text)
            assert kind.finish(status.json()) is not None, f"{obj['kind']} reads as finished"
    finally:
        server.stop()
