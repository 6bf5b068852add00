"""Every object in knative/ (the base and the direct overlay) against its real schema.

Knative objects: the upstream CRDs in ../shared/reference/knative/ (see manifests.py for how
an OpenAPI structural schema becomes a JSON Schema). Everything else: kubernetes-validate's
bundled Kubernetes schemas, strict (unknown fields are errors), for the oldest and newest
Kubernetes versions we claim. No cluster is needed or contacted.
"""

from __future__ import annotations

import pytest

from tests.deploy.manifests import (
    KNATIVE,
    KNATIVE_CRDS,
    find,
    is_knative,
    knative_crds,
    pod_spec,
    rendered,
    validate,
    validate_core,
    validate_knative,
)

pytestmark = pytest.mark.skipif(not KNATIVE_CRDS.is_dir(), reason=f"reference CRDs not found at {KNATIVE_CRDS}")

VARIANTS = {"base": KNATIVE, "direct": KNATIVE / "overlays" / "direct", "evidence": KNATIVE / "overlays" / "evidence"}


def _objects():
    return [
        pytest.param(obj, id=f"{variant}:{obj['kind']}/{obj['metadata']['name']}")
        for variant, directory in VARIANTS.items()
        for obj in rendered(directory)
    ]


@pytest.mark.parametrize("obj", _objects())
def test_object_is_valid(obj):
    assert validate(obj) == []


def test_every_knative_kind_used_has_a_reference_crd():
    used = {(o["apiVersion"], o["kind"]) for d in VARIANTS.values() for o in rendered(d) if is_knative(o)}
    assert used == {
        ("serving.knative.dev/v1", "Service"),
        ("eventing.knative.dev/v1", "Broker"),
        ("eventing.knative.dev/v1", "Trigger"),
        ("sources.knative.dev/v1", "ApiServerSource"),
        ("sources.knative.dev/v1", "PingSource"),
    }
    assert used <= set(knative_crds())


# --- the validators reject broken manifests -------------------------------------------------


def test_crd_validation_rejects_a_wrong_type_and_a_misspelt_field():
    trigger = find(rendered(KNATIVE), "Trigger", "jobttl-jobs")
    trigger["spec"]["delivery"]["retry"] = "10"
    trigger["spec"]["delivery"]["backofPolicy"] = trigger["spec"]["delivery"].pop("backoffPolicy")
    problems = validate_knative(trigger)
    assert any("'10' is not of type 'integer'" in p for p in problems)
    assert any("'backofPolicy' was unexpected" in p for p in problems)


def test_crd_validation_rejects_a_numeric_annotation_and_a_podspec_field_knative_forbids():
    service = find(rendered(KNATIVE), "Service", "jobttl-sink", "serving.knative.dev/v1")
    service["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = 1
    pod_spec(service)["terminationGracePeriodSeconds"] = 30  # a Deployment field, not a Knative one
    problems = validate_knative(service)
    assert any("min-scale: 1 is not of type 'string'" in p for p in problems)
    assert any("'terminationGracePeriodSeconds' was unexpected" in p for p in problems)


def test_crd_validation_rejects_a_missing_required_field_and_a_bad_name():
    source = find(rendered(KNATIVE), "ApiServerSource", "jobttl-jobs")
    del source["spec"]["resources"]
    source["metadata"]["name"] = "Jobs_Source"
    problems = validate_knative(source)
    assert any("'resources' is a required property" in p for p in problems)
    assert any(p.startswith("metadata.name:") for p in problems)


def test_crd_validation_rejects_an_unknown_knative_kind():
    assert (
        validate_knative({"apiVersion": "sources.knative.dev/v1", "kind": "GitHubSource", "metadata": {"name": "x"}})
        != []
    )


def test_kubernetes_validation_rejects_an_unknown_field():
    worker = find(rendered(KNATIVE), "Deployment", "jobttl-worker")
    pod_spec(worker)["containers"][0]["livenessprobe"] = pod_spec(worker)["containers"][0].pop("livenessProbe")
    problems = validate_core(worker)
    assert problems and all("'livenessprobe' was unexpected" in p for p in problems)


def test_kubernetes_validation_rejects_a_wrong_type():
    worker = find(rendered(KNATIVE), "Deployment", "jobttl-worker")
    worker["spec"]["replicas"] = "1"  # kubernetes-validate reports the first problem only
    problems = validate_core(worker)
    assert problems and all("'1' is not of type 'integer'" in p for p in problems)


def test_kubernetes_validation_rejects_a_kind_it_has_no_schema_for():
    assert validate_core({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}}) != []
