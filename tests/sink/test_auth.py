"""Only event sources can use the sink: Knative OIDC sender tokens, verified (jobttl.sink.auth).

A real OIDC issuer is stood up for the test (discovery document and JWKS over HTTP, an RSA
key of its own), tokens are minted the way Kubernetes' TokenRequest mints them for Knative
senders, and the sink verifies them against that issuer over HTTP.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import jwt
import pytest
from cloudevents.core.bindings.http import to_binary_event
from cloudevents.core.v1.event import CloudEvent
from cryptography.hazmat.primitives.asymmetric import rsa
from flask import Flask, jsonify
from werkzeug.serving import make_server

from jobttl.core.runtime.config import Settings
from jobttl.sink.app import create_app
from tests.fixtures import finished_status, tfjob, with_server_fields

AUDIENCE = "serving.knative.dev/service/jobttl/jobttl-sink"


class Issuer:
    """An OIDC issuer: /.well-known/openid-configuration and its JWKS, and the key to sign with."""

    def __init__(self):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        app = Flask("issuer")
        app.add_url_rule(
            "/.well-known/openid-configuration",
            "discovery",
            lambda: jsonify(issuer=self.url, jwks_uri=f"{self.url}/openid/v1/jwks"),
        )
        app.add_url_rule(
            "/openid/v1/jwks", "jwks", lambda: jsonify(keys=[{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}])
        )
        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(
        self,
        audience=AUDIENCE,
        issuer=None,
        expires_in=600,
        key=None,
        subject="system:serviceaccount:jobttl:jobttl-source",
    ) -> str:
        now = int(time.time())
        claims = {
            "iss": issuer or self.url,
            "aud": [audience],
            "sub": subject,
            "iat": now,
            "nbf": now,
            "exp": now + expires_in,
        }
        return jwt.encode(claims, key or self.key, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture(scope="module")
def issuer():
    issuer = Issuer()
    yield issuer
    issuer.server.shutdown()


@pytest.fixture
def client(redis_server, queue_name, issuer):
    settings = Settings.from_env(
        {
            "JOBTTL_REDIS_URL": redis_server.url,
            "JOBTTL_QUEUE": queue_name,
            "JOBTTL_SINK_OIDC_AUDIENCE": AUDIENCE,
            "JOBTTL_SINK_OIDC_ISSUER": issuer.url,
        }
    )
    return create_app(settings).test_client()


def post(client, obj, action="update", token=None):
    message = to_binary_event(
        CloudEvent(
            attributes={
                "specversion": "1.0",
                "id": str(uuid.uuid4()),
                "source": "s",
                "type": f"dev.knative.apiserver.resource.{action}",
            },
            data=obj,
        )
    )
    headers = dict(message.headers)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return client.post("/", headers=headers, data=message.body)


def finished():
    obj = with_server_fields(tfjob(f"j-{uuid.uuid4().hex[:8]}", "team", ttl=3600))
    obj["status"] = finished_status(time.time())
    return obj


def test_a_valid_sender_token_is_accepted(client, issuer):
    response = post(client, finished(), token=issuer.token())
    assert response.status_code == 202 and response.headers["X-Jobttl-Outcome"] == "scheduled"


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda i: None, "required"),
        (lambda i: "not-a-jwt", "invalid sender token"),
        (lambda i: i.token(audience="someone-else"), "audience"),
        (lambda i: i.token(issuer="https://evil.example"), "issuer"),
        (lambda i: i.token(expires_in=-60), "expired"),
        (lambda i: i.token(key=rsa.generate_private_key(public_exponent=65537, key_size=2048)), "signature"),
    ],
    ids=["missing", "garbage", "wrong-audience", "wrong-issuer", "expired", "forged-signature"],
)
def test_anything_but_a_valid_sender_token_is_a_401_and_changes_nothing(client, issuer, make, words):
    response = post(client, finished(), token=make(issuer))
    assert response.status_code == 401 and words in response.json["error"].lower()
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_forged_delete_event_cannot_cancel_a_pending_deletion(client, issuer, redis):
    obj = finished()
    assert post(client, obj, token=issuer.token()).headers["X-Jobttl-Outcome"] == "scheduled"
    assert post(client, obj, action="delete").status_code == 401
    assert redis.zscore("jobttl:pending", obj["metadata"]["uid"]) is not None, "still pending"


def test_an_issuer_that_cannot_be_reached_is_a_503_so_the_sender_retries(redis_server, queue_name, issuer):
    settings = Settings.from_env(
        {
            "JOBTTL_REDIS_URL": redis_server.url,
            "JOBTTL_QUEUE": queue_name,
            "JOBTTL_SINK_OIDC_AUDIENCE": AUDIENCE,
            "JOBTTL_SINK_OIDC_ISSUER": "http://127.0.0.1:9",
        }
    )
    response = post(create_app(settings).test_client(), finished(), token=issuer.token())
    assert response.status_code == 503


def test_a_valid_token_of_another_service_account_is_refused_when_subjects_are_named(redis_server, queue_name, issuer):
    """Any pod can mint a token with the sink's audience for its own service account."""
    settings = Settings.from_env(
        {
            "JOBTTL_REDIS_URL": redis_server.url,
            "JOBTTL_QUEUE": queue_name,
            "JOBTTL_SINK_OIDC_AUDIENCE": AUDIENCE,
            "JOBTTL_SINK_OIDC_ISSUER": issuer.url,
            "JOBTTL_SINK_OIDC_SUBJECTS": "system:serviceaccount:jobttl:jobttl-source",
        }
    )
    client = create_app(settings).test_client()
    assert post(client, finished(), token=issuer.token()).status_code == 202
    other = jwt.encode(
        {
            **jwt.decode(issuer.token(), options={"verify_signature": False}),
            "sub": "system:serviceaccount:team-a:default",
        },
        issuer.key,
        algorithm="RS256",
        headers={"kid": "k1"},
    )
    refused = post(client, finished(), token=other)
    assert refused.status_code == 403 and "JOBTTL_SINK_OIDC_SUBJECTS" in refused.json["error"]
