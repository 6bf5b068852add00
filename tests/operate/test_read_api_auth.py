"""Reads need the same right as writes (issue 26 §6): the read API behind OIDC or a Kubernetes token.

Real processes: the sink (`jobttl sink`), the API emulator answering TokenReview and
SubjectAccessReview from its token table and grants, and an OIDC issuer over HTTP.
"""

from __future__ import annotations

import time
import uuid

import pytest
import requests

from jobttl.core.domain.deploy import rights
from jobttl.core.domain.kinds.registry import TFJOB
from jobttl.core.runtime.config import ConfigError, Settings
from jobttl.core.services import graph
from jobttl.core.store import redisconn
from jobttl_emulator import TFJOB as EMULATED_TFJOB
from tests.fixtures import finished_status, tfjob, with_server_fields
from tests.services import RedisServer, start_emulator, start_sink
from tests.sink.test_auth import AUDIENCE, Issuer

TOKENS = {
    "reader-token": {"username": "system:serviceaccount:monitoring:dashboards"},
    "team-a-token": {"username": "ann", "groups": ["team-a-devs"]},
    "nobody-token": {"username": "bob"},
}
GRANTS = [
    {"users": ["system:serviceaccount:monitoring:dashboards"], "rules": rights.cluster_role(rights.READER)["rules"]},
    # a RoleBinding of jobttl-reader in team-a: the rules hold in that namespace only
    {
        "groups": ["team-a-devs"],
        "rules": [{**r, "namespaces": ["team-a"]} for r in rights.cluster_role(rights.READER)["rules"]],
    },
]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    server = start_emulator(tmp_path_factory.mktemp("kube"), (EMULATED_TFJOB,))
    server.set_identities(TOKENS, GRANTS)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def redis_server():
    """A Redis of this module's own: the due index is a Redis's, not a queue's, and other files book team-a too."""
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def queue():
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def booked(redis_server, queue):
    """One pending deletion in team-a and one in team-b."""
    settings = Settings.from_env({"JOBTTL_REDIS_URL": redis_server.url, "JOBTTL_QUEUE": queue})
    shared = graph.build(settings, redisconn.CLI, metrics=False)
    for namespace in ("team-a", "team-b"):
        obj = with_server_fields(tfjob("mnist", namespace, ttl=3600))
        obj["status"] = finished_status(time.time())
        shared.reconciler.reconcile(obj, TFJOB, "event")
    return shared


@pytest.fixture(scope="module")
def kube_sink(redis_server, queue, emulator, booked, tmp_path_factory):
    sink, url = start_sink(
        {
            "JOBTTL_REDIS_URL": redis_server.url,
            "JOBTTL_QUEUE": queue,
            "KUBECONFIG": str(emulator.kubeconfig),
            "JOBTTL_READ_API_AUTH": "kubernetes",
        },
        tmp_path_factory.mktemp("logs"),
    )
    yield url
    sink.stop()


def get(url, path, token=None, **params):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.get(f"{url}{path}", headers=headers, params=params, timeout=10)


def test_without_a_token_the_read_api_answers_401_and_says_how_to_authenticate(kube_sink):
    answer = get(kube_sink, "/api/v1/deletions")
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert "Kubernetes bearer token is required" in answer.json()["error"]
    assert get(kube_sink, "/api/v1/deletions/team-a/mnist").status_code == 401


def test_a_token_the_api_server_rejects_is_a_401(kube_sink):
    answer = get(kube_sink, "/api/v1/deletions", "forged-token")
    assert answer.status_code == 401 and "not accepted" in answer.json()["error"]


def test_a_user_without_the_reader_role_is_a_403_naming_it(kube_sink):
    answer = get(kube_sink, "/api/v1/deletions", "nobody-token")
    assert answer.status_code == 403
    assert "bob may not list deletions.jobttl.io" in answer.json()["error"]
    assert "jobttl-reader" in answer.json()["error"]


def test_a_reader_reads_everything(kube_sink):
    answer = get(kube_sink, "/api/v1/deletions", "reader-token")
    assert answer.status_code == 200, answer.text
    assert {i["namespace"] for i in answer.json()["items"]} == {"team-a", "team-b"}
    assert get(kube_sink, "/api/v1/deletions/team-b/mnist", "reader-token").status_code == 200


def test_a_namespace_reader_reads_its_namespace_only(kube_sink):
    mine = get(kube_sink, "/api/v1/deletions", "team-a-token", namespace="team-a")
    assert mine.status_code == 200 and [i["namespace"] for i in mine.json()["items"]] == ["team-a"]
    assert get(kube_sink, "/api/v1/deletions/team-a/mnist", "team-a-token").status_code == 200
    assert get(kube_sink, "/api/v1/deletions", "team-a-token").status_code == 403  # every namespace: no
    assert get(kube_sink, "/api/v1/deletions/team-b/mnist", "team-a-token").status_code == 403


def test_events_are_not_behind_the_readers_check(kube_sink):
    """The read API's auth guards reads only: the index stays open, events keep their own check."""
    assert get(kube_sink, "/").status_code == 200


@pytest.fixture(scope="module")
def issuer():
    issuer = Issuer()
    yield issuer
    issuer.server.shutdown()


def test_with_oidc_on_for_events_reads_need_a_token_too(redis_server, queue, booked, issuer, tmp_path):
    sink, url = start_sink(
        {
            "JOBTTL_REDIS_URL": redis_server.url,
            "JOBTTL_QUEUE": queue,
            "JOBTTL_SINK_OIDC_AUDIENCE": AUDIENCE,
            "JOBTTL_SINK_OIDC_ISSUER": issuer.url,
            "JOBTTL_READ_API_OIDC_SUBJECTS": "system:serviceaccount:jobttl:jobttl-source",
        },
        tmp_path,
    )
    try:
        assert get(url, "/api/v1/deletions").status_code == 401
        assert get(url, "/api/v1/deletions", issuer.token(audience="someone-else")).status_code == 401
        assert get(url, "/api/v1/deletions", issuer.token()).status_code == 200
        other = issuer.token(subject="system:serviceaccount:default:default")
        refused = get(url, "/api/v1/deletions", other)
        assert refused.status_code == 403 and "JOBTTL_READ_API_OIDC_SUBJECTS" in refused.json()["error"]
    finally:
        sink.stop()


def test_the_read_apis_auth_follows_the_events_unless_said_and_is_checked_at_start():
    oidc = {"JOBTTL_SINK_OIDC_AUDIENCE": AUDIENCE, "JOBTTL_SINK_OIDC_ISSUER": "https://issuer.example"}
    assert Settings.from_env(oidc).read_api_auth == "oidc"
    assert Settings.from_env({}).read_api_auth == "none"
    assert Settings.from_env({**oidc, "JOBTTL_READ_API_AUTH": "kubernetes"}).read_api_auth == "kubernetes"
    with pytest.raises(ConfigError, match="JOBTTL_READ_API_AUTH=oidc .* set JOBTTL_SINK_OIDC_AUDIENCE"):
        Settings.from_env({"JOBTTL_READ_API_AUTH": "oidc"})
    with pytest.raises(ConfigError, match="JOBTTL_READ_API_AUTH: must be one of oidc, kubernetes, none"):
        Settings.from_env({"JOBTTL_READ_API_AUTH": "yes"})
