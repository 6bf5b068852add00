"""The sink's read-only HTTP API, in process: its OpenAPI document is valid and tells the truth.

Schemathesis calls every operation with the document's examples, boundary values and
generated input (positive and negative), and checks each answer against the document:
status codes, content types, bodies; and that no input ever causes a 500. Hypothesis is
derandomized and its example database off, so every run makes the same calls.
"""

from __future__ import annotations

import copy
import re
import time
import uuid

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from jsonschema.exceptions import ValidationError
from openapi_schema_validator import OAS30Validator
from openapi_spec_validator import validate

from jobttl.core.runtime.config import Settings
from jobttl.sink.app import create_app
from jobttl.sink.openapi import DOCUMENT
from jobttl.core.domain.wire import jsoncodec, shapes
from jobttl.core.store import keys
from jobttl.core.domain.wire.identity import JobRef
from jobttl.core.domain.kinds.registry import TFJOB
from tests.fixtures import finished_status, tfjob, with_server_fields
from tests.services import free_port

EXAMPLE = ("team-a", "mnist")  # the path parameters' examples in the document


@pytest.fixture
def app(redis, redis_server, queue_name):
    return create_app(Settings.from_env({"JOBTTL_REDIS_URL": redis_server.url, "JOBTTL_QUEUE": queue_name}))


@pytest.fixture
def example_app(app):
    """The app, with Redis knowing the job the document's examples name."""
    sink = app.extensions["jobttl"]
    now = int(time.time())
    obj = with_server_fields(tfjob(EXAMPLE[1], EXAMPLE[0], ttl=3600))
    obj["status"] = finished_status(now)
    sink.reconciler.reconcile(obj, TFJOB, "event")
    gone = JobRef.of({**obj, "metadata": {**obj["metadata"], "uid": "0d8e3c31-5b7a-4c9e-8f2e-6a1b2c3d4e5f"}})
    sink.audit.record("deleted", gone, by="worker")
    sink.redis.set(
        keys.tombstone(gone.namespace, gone.name, gone.uid),
        sink.audit.tombstone(gone, {"metadata": {"labels": {"team": "a"}}, "status": {"conditions": []}}, now),
    )
    return app


# The document as written; the test below checks that the app serves exactly that.
schema = schemathesis.openapi.from_dict(DOCUMENT)


@schema.parametrize()
@settings(
    max_examples=20,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
)  # example_app is only read
def test_every_answer_matches_the_openapi_document(case, example_app):
    case.call_and_validate(app=example_app)


def test_the_openapi_document_is_valid_and_served_as_written(app):
    validate(DOCUMENT)
    assert app.test_client().get("/openapi.json").json == DOCUMENT


@pytest.mark.parametrize(
    "query",
    [
        "limit=abc",
        "limit=-1",
        "limit=0",
        "limit=1001",
        "limit=",
        "limit=1.5",
        "offset=-3",
        "offset=x",
        "offset=%EF%BC%91",
        "offset=" + "9" * 5000,
    ],
)
def test_a_bad_query_parameter_is_a_400_naming_it(app, query):
    response = app.test_client().get(f"/api/v1/deletions?{query}")
    assert response.status_code == 400
    assert response.json["code"] == 400 and query.split("=")[0] in response.json["error"]


def test_an_empty_filter_is_no_filter(app):
    """`?kind=` (as forms and scripts send an unset field) means any kind, with a namespace or without."""
    sink, namespaces = app.extensions["jobttl"], [f"empty-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for namespace in namespaces:
        obj = with_server_fields(tfjob("mnist", namespace, ttl=3600))
        obj["status"] = finished_status(int(time.time()))
        sink.reconciler.reconcile(obj, TFJOB, "event")

    def listed(query: str) -> list[str]:
        answer = app.test_client().get(f"/api/v1/deletions?{query}")
        assert answer.status_code == 200, answer.get_json()
        return [i["namespace"] for i in answer.get_json()["items"] if i["namespace"] in namespaces]

    assert (
        listed(f"namespace={namespaces[0]}&kind=") == listed(f"namespace={namespaces[0]}&kind=TFJob") == [namespaces[0]]
    )
    assert sorted(listed("kind=")) == sorted(listed("namespace=&kind=")) == sorted(listed("")) == sorted(namespaces)


def test_health_needs_nothing_and_readiness_needs_redis(app):
    client = app.test_client()
    assert client.get("/healthz").json == {"status": "ok"}
    assert client.get("/readyz").json["status"] == "ready"

    down = create_app(Settings.from_env({"JOBTTL_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})).test_client()
    assert down.get("/healthz").status_code == 200
    started = time.monotonic()
    response = down.get("/readyz")
    assert response.status_code == 503 and "Redis" in response.json["error"]
    assert time.monotonic() - started < 2
    listing = down.get("/api/v1/deletions")
    assert listing.status_code == 503 and listing.json["code"] == 503


def test_the_read_api_can_be_switched_off(redis_server, queue_name):
    off = create_app(
        Settings.from_env({"JOBTTL_REDIS_URL": redis_server.url, "JOBTTL_QUEUE": queue_name, "JOBTTL_READ_API": "off"})
    ).test_client()
    for path in ("/api/v1/deletions", "/api/v1/deletions/team-a/mnist", "/openapi.json", "/api/v1"):
        response = off.get(path)
        assert response.status_code == 404 and response.json["code"] == 404
    assert off.get("/").status_code == 405, "only CloudEvents are posted there"
    assert off.get("/readyz").status_code == 200, "the sink itself still serves"


def test_a_job_lookup_costs_its_own_entries_not_the_whole_trail(example_app):
    """16 concurrent lookups once delayed an event by 31 s, each scanning 100k audit entries."""
    sink = example_app.extensions["jobttl"]
    with sink.redis.pipeline(transaction=False) as pipe:
        for i in range(100_000):
            pipe.xadd("jobttl:audit", {"event": "scheduled", "namespace": "noise", "name": f"n{i}"})
        noise = pipe.execute()
    try:
        before = sink.redis.info("commandstats").get("cmdstat_xrevrange", {}).get("calls", 0)
        response = example_app.test_client().get("/api/v1/deletions/team-a/mnist")
        assert response.status_code == 200 and response.json["history"]
        assert sink.redis.info("commandstats").get("cmdstat_xrevrange", {}).get("calls", 0) == before, (
            "no scan of the trail"
        )
    finally:
        sink.redis.xdel("jobttl:audit", *noise)  # the session's other tests read the trail


def test_the_index_points_at_the_document_and_the_paths(app):
    client = app.test_client()
    for path in ("/", "/api/v1", "/api/v1/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.json["openapi"] == "/openapi.json"
        assert {"/api/v1/deletions", "/api/v1/deletions/{namespace}/{name}"} <= set(response.json["paths"])
        assert client.get(response.json["openapi"]).json == DOCUMENT
        head = client.head(path)
        assert head.status_code == 200 and head.data == b""
    for method in ("post", "put", "delete"):
        response = getattr(client, method)("/api/v1")
        assert response.status_code == 405 and response.json["code"] == 405 and "GET" in response.headers["Allow"]
    assert client.put("/").status_code == 405 and set(client.put("/").headers["Allow"].split(", ")) >= {"GET", "POST"}
    assert client.post("/").status_code == 415, "POST / is still the CloudEvents endpoint"


def test_entries_are_typed_and_times_given_in_rfc3339_beside_their_epochs(example_app):
    job = example_app.test_client().get("/api/v1/deletions/team-a/mnist").json
    pending = job["pending"][0]  # one per run of example_app: the session's Redis is shared
    assert (pending["ttl"], pending["dryRun"], pending["rules"]) == (3600, False, [])
    assert pending["dueTime"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(pending["due"]))
    [scheduled] = [e for e in job["history"] if e["event"] == "scheduled" and e["uid"] == pending["uid"]]
    assert (scheduled["due"], scheduled["ttl"], scheduled["dryRun"], scheduled["rules"]) == (
        pending["due"],
        3600,
        False,
        [],
    )
    assert isinstance(scheduled["finishedAt"], int) and isinstance(scheduled["at"], float)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z", scheduled["atTime"])
    [decision] = [d for d in job["decisions"] if d["uid"] == pending["uid"]]
    assert decision["due"] == pending["due"] and decision["dueTime"] == pending["dueTime"]
    [tombstone] = job["tombstones"]
    assert tombstone["deletedAtTime"].endswith("Z")


def validator(name: str) -> OAS30Validator:
    """Validates against one of the document's schemas, as schemathesis does (OpenAPI 3.0's nullable too)."""
    return OAS30Validator({"$ref": f"#/components/schemas/{name}", "components": DOCUMENT["components"]})


@pytest.mark.parametrize(
    "field, stored",
    [
        ("due", "1796121233"),
        ("ttl", "3600"),
        ("dryRun", "false"),
        ("rules", "[]"),
        ("at", "1796121233.5"),
        ("atTime", 1796121233),
    ],
)
def test_the_document_refuses_an_entry_holding_redis_strings(example_app, field, stored):
    """What the responses are checked against: a type as Redis stores it would not pass."""
    job = example_app.test_client().get("/api/v1/deletions/team-a/mnist").json
    validator("Job").validate(job)
    broken = copy.deepcopy(job)
    scheduled = next(e for e in broken["history"] if e["event"] == "scheduled")
    scheduled[field] = stored
    with pytest.raises(ValidationError):
        validator("Job").validate(broken)


def test_a_tombstone_too_large_to_keep_still_matches_the_document(example_app):
    sink = example_app.extensions["jobttl"]
    gone = JobRef("kubeflow.org/v1", "TFJob", "team-a", "huge", "5f0d1c1e-2a3b-4c35-9d1a-7c1e5c8e0f1b")
    kept = jsoncodec.loads(sink.audit.tombstone(gone, {"metadata": {}, "status": {"message": "x" * 100_000}}, 1.0))
    assert "unkept" in kept
    validator("Tombstone").validate(shapes.with_times(kept))


def test_an_unexpected_error_is_a_500_naming_no_python_class(app):
    app.add_url_rule("/api/v1/broken", view_func=lambda: {}["missing"])  # a bug, as a route would have one
    response = app.test_client().get("/api/v1/broken")
    assert response.status_code == 500 and response.json["code"] == 500
    assert "KeyError" not in response.json["error"] and "log" in response.json["error"]
