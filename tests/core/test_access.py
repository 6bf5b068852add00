"""Who is asking, and may they (jobttl.core.kube.access): TokenReview and SubjectAccessReview through the
real `kubernetes` client against the emulator, and the emulator's reviews as kubectl sees them."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess

import pytest

from jobttl.core.domain.deploy import rights
from jobttl.core.kube.access import Access, AccessUnavailable, Forbidden, Unauthenticated, bearer
from jobttl.core.kube.client import KubeClient, load_api_client
from jobttl_emulator import EmulatorServer

TOKENS = {
    "alice-token": {"username": "alice", "groups": ["ops"], "uid": "u-1"},
    "bob-token": {"username": "bob"},
    "carol-token": {"username": "system:serviceaccount:monitoring:dashboards"},
}
GRANTS = [
    {"groups": ["ops"], "rules": rights.cluster_role(rights.OPERATOR)["rules"]},
    {"users": ["system:serviceaccount:monitoring:dashboards"], "rules": rights.cluster_role(rights.READER)["rules"]},
]


@pytest.fixture
def emulator(tmp_path):
    with EmulatorServer() as server:
        server.set_identities(TOKENS, GRANTS)
        server.kubeconfig = tmp_path / "kubeconfig"
        server.write_kubeconfig(str(server.kubeconfig))
        yield server


@pytest.fixture
def access(emulator):
    return Access(KubeClient(load_api_client(str(emulator.kubeconfig)), timeout=5, component="access"))


def test_a_token_the_api_server_knows_is_its_user_with_groups(access, emulator):
    alice = access.authenticate("alice-token")
    assert (alice.name, alice.uid) == ("alice", "u-1")
    assert set(alice.groups) == {"ops", "system:authenticated"}
    sent = emulator.hooks.requests("POST", "tokenreviews")
    assert sent and sent[-1]["path"] == "/apis/authentication.k8s.io/v1/tokenreviews"


def test_an_unknown_or_missing_token_is_unauthenticated(access):
    with pytest.raises(Unauthenticated, match="not accepted: .*invalid bearer token"):
        access.authenticate("forged")
    with pytest.raises(Unauthenticated, match="bearer token is required"):
        access.authenticate(None)


def test_rights_follow_the_cluster_roles_bound(access):
    alice, bob, carol = (access.authenticate(t) for t in ("alice-token", "bob-token", "carol-token"))
    for verb in rights.VERBS[rights.DELETIONS]:
        assert access.allowed(alice, verb, rights.DELETIONS, "team-a")
    assert access.allowed(alice, rights.CONFIRM, rights.REVIEWS)
    assert access.allowed(carol, "list", rights.DELETIONS) and access.allowed(carol, "get", rights.REVIEWS)
    assert not access.allowed(carol, rights.POSTPONE, rights.DELETIONS, "team-a")
    assert not access.allowed(carol, rights.CONFIRM, rights.REVIEWS)
    assert not access.allowed(bob, "list", rights.DELETIONS)
    with pytest.raises(Forbidden, match="bob may not list deletions.jobttl.io: bind the ClusterRole jobttl-reader"):
        access.authorize(bob, "list", rights.DELETIONS)
    with pytest.raises(Forbidden, match="in namespace team-a: bind the ClusterRole jobttl-console-operator"):
        access.authorize(carol, rights.KEEP, rights.DELETIONS, "team-a")


def test_the_review_asks_about_jobttls_group_for_that_user(access, emulator):
    alice = access.authenticate("alice-token")
    access.allowed(alice, rights.POSTPONE, rights.DELETIONS, "team-a", "mnist")
    sent = emulator.hooks.requests("POST", "subjectaccessreviews")[-1]
    assert sent["path"] == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    spec = sent["body"]["spec"]
    assert spec["user"] == "alice" and "ops" in spec["groups"] and spec["uid"] == "u-1"
    assert spec["resourceAttributes"] == {
        "group": "jobttl.io",
        "resource": "deletions",
        "verb": "postpone",
        "namespace": "team-a",
        "name": "mnist",
    }


def test_an_answer_is_remembered_for_the_same_token_only_not_another_scoped_differently(access, emulator):
    """An authorizer may read the review's `uid` and `extra` (scoped tokens): one user's two tokens
    are asked about each, never answered from the other's cached decision."""
    alice = access.authenticate("alice-token")
    scoped = dataclasses.replace(alice, extra={"scopes.authorization.openshift.io": ["user:info"]})
    before = len(emulator.hooks.requests("POST", "subjectaccessreviews"))
    for user in (alice, alice, scoped):
        access.allowed(user, rights.POSTPONE, rights.DELETIONS, "team-a", "mnist")
    sent = emulator.hooks.requests("POST", "subjectaccessreviews")[before:]
    assert [r["body"]["spec"].get("extra", {}) for r in sent] == [
        {},
        {"scopes.authorization.openshift.io": ["user:info"]},
    ]


def test_an_api_server_that_cannot_answer_is_unavailable_never_allowed(access, emulator):
    emulator.add_fault(verb="create", status=500, count=100, path_contains="subjectaccessreviews")
    alice = access.authenticate("alice-token")
    with pytest.raises(AccessUnavailable, match="SubjectAccessReview"):
        access.allowed(alice, "list", rights.DELETIONS)


def test_bearer_reads_the_authorization_header():
    assert bearer("Bearer abc") == "abc" and bearer("bearer  abc ") == "abc"
    assert bearer("Basic abc") is None and bearer(None) is None and bearer("Bearer ") is None


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_kubectl_creates_the_emulators_reviews(emulator, tmp_path):
    """The wire format as kubectl (a real client with its own discovery) sends and reads it (without
    client-side validation: the emulator's OpenAPI documents the job kinds, not the reviews)."""
    review = tmp_path / "review.json"
    review.write_text(
        json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "alice-token"}})
    )
    env = {"KUBECONFIG": str(emulator.kubeconfig), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        ["kubectl", "create", "--validate=false", "-f", str(review), "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"]["user"]["username"] == "alice"
    sar = tmp_path / "sar.json"
    sar.write_text(
        json.dumps(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": "bob",
                    "resourceAttributes": {"group": "jobttl.io", "resource": "deletions", "verb": "list"},
                },
            }
        )
    )
    done = subprocess.run(
        ["kubectl", "create", "--validate=false", "-f", str(sar), "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"]["allowed"] is False
