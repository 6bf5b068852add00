"""`jobttl explain` on what admins will feed it: real kubectl output, and every example object.

The objects are seeded into an emulator serving every kind, read back with the real kubectl
(`kubectl get tfjobs -A -o yaml`, exactly as an admin would), and piped into the `jobttl
explain` command. Expected values are written out here, not recomputed with decide().
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobttl_emulator import Resource, seed_object
from jobttl.core.domain.kinds.registry import ALL_KINDS, BATCH_JOB, TFJOB, WORKFLOW
from tests.fixtures import KUBEFLOW, job_object, rfc3339
from tests.services import ROOT, start_emulator

KUBECTL = "/usr/bin/kubectl"
T0 = (int(time.time()) // 60) * 60 - 3 * 3600  # every job here finished three hours ago
NOW = rfc3339(T0 + 3 * 3600)
ITEM_KEYS = {
    "apiVersion",
    "kind",
    "namespace",
    "name",
    "uid",
    "verdict",
    "reason",
    "outcome",
    "finishedAt",
    "finishedFrom",
    "ttl",
    "ttlSource",
    "expiresAt",
    "expired",
    "dryRun",
    "rules",
}
POLICY = """\
ttl: 1h
ttlAfterFailure: 2h
maxTTL: 1d
rules:
  - name: trial
    selector: {matchLabels: {trial: "true"}}
    dryRun: true
  - name: nightly
    namespaces: [batch]
    owned: delete
"""


def explain(stdin: str, *args: str, policy: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTTL_")}
    command = [sys.executable, "-m", "jobttl", "explain", *args] + (["--policy", str(policy)] if policy else [])
    return subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)


def explained(stdin: str, policy: Path | None, *files: str) -> dict[str, dict]:
    """`explain --json` of stdin (or files), by namespace/name; the document's shape checked."""
    result = explain(stdin, *(files or ("-f", "-")), "--json", "--now", NOW, policy=policy)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert (document["apiVersion"], document["now"], set(document)) == (
        "jobttl.io/explain/v1",
        NOW,
        {"apiVersion", "now", "items"},
    )
    for item in document["items"]:
        assert set(item) == ITEM_KEYS, item
    return {f"{i['namespace']}/{i['name']}": i for i in document["items"]}


def owner(kind: str, name: str) -> list[dict]:
    return [
        {
            "apiVersion": "batch/v1" if kind == "CronJob" else "x.k8s.io/v1",
            "kind": kind,
            "name": name,
            "uid": "2f1d0c8e-8b8f-4f51-a2ad-5a9b0f1c4d10",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def tfjob(name, namespace="ml", state="succeeded", ttl=None, run_policy=None, **meta) -> dict:
    obj = job_object(TFJOB, name, namespace, state=state, at=T0, ttl=ttl)
    obj["spec"].setdefault("runPolicy", {}).update(run_policy or {})
    obj["metadata"].update(meta)
    return obj


def no_completion_time(obj: dict) -> dict:
    del obj["status"]["completionTime"]
    return obj


# name → the object, and what explain must say: (verdict, ttlSource, expiresAt offset from T0, expired)
TFJOBS = {
    "own-ttl": (tfjob("own-ttl", ttl=60), ("expires", "spec.runPolicy.ttlSecondsAfterFinished", 60, True)),
    "policy-default": (tfjob("policy-default"), ("expires", "ttl of policy", 3600, True)),
    "failed": (tfjob("failed", state="failed"), ("expires", "ttlAfterFailure of policy", 7200, True)),
    "capped": (
        tfjob("capped", ttl=10 * 86400),
        ("expires", "spec.runPolicy.ttlSecondsAfterFinished, capped by maxTTL of policy", 86400, False),
    ),
    "no-completion-time": (
        no_completion_time(tfjob("no-completion-time", ttl=60)),
        ("expires", "spec.runPolicy.ttlSecondsAfterFinished", 60, True),
    ),
    "trial": (tfjob("trial", labels={"trial": "true"}), ("expires", "ttl of policy", 3600, True)),
    "running": (tfjob("running", state="running", ttl=0), ("not-finished", None, None, False)),
    "suspended": (tfjob("suspended", ttl=0, run_policy={"suspend": True}), ("suspended", None, None, False)),
    "multikueue": (
        tfjob("multikueue", ttl=0, run_policy={"managedBy": "kueue.x-k8s.io/multikueue"}),
        ("managed-elsewhere", None, None, False),
    ),
    "in-a-pipeline": (
        tfjob("in-a-pipeline", ttl=0, ownerReferences=owner("PipelineRun", "p-1")),
        ("owned", None, None, False),
    ),
    "kept": (tfjob("kept", ttl=0, annotations={"jobttl.io/keep": "true"}), ("kept", None, None, False)),
    "system": (tfjob("system", "kube-system", ttl=0), ("excluded", None, None, False)),
}


def batch_job(name, namespace="team", **meta) -> dict:
    obj = job_object(BATCH_JOB, name, namespace, at=T0)
    obj["metadata"].update(meta)
    return obj


def workflow(name, phase, ttl=None, stored=None, labels=None) -> dict:
    obj = job_object(WORKFLOW, name, "argo", state=phase, at=T0, ttl=ttl)
    obj["metadata"]["labels"] = {"workflows.argoproj.io/completed": "true", **(labels or {})}
    if stored:
        obj["status"]["storedWorkflowTemplateSpec"] = {"ttlStrategy": stored}
    return obj


OTHERS = {
    "batch/cron-child": (
        batch_job("cron-child", "batch", ownerReferences=owner("CronJob", "nightly")),
        ("expires", "ttl of policy", 3600, True),
    ),
    "team/cron-child": (
        batch_job("cron-child", ownerReferences=owner("CronJob", "nightly")),
        ("owned", None, None, False),
    ),
    "team/initializer": (
        batch_job("initializer", ownerReferences=owner("JobSet", "llm-finetune")),
        ("owned", None, None, False),
    ),
    "team/kueue": (
        dict(batch_job("kueue"), spec={**batch_job("x")["spec"], "managedBy": "kueue.x-k8s.io/multikueue"}),
        ("managed-elsewhere", None, None, False),
    ),
    "argo/errored": (
        workflow("errored", "error", ttl={"secondsAfterFailure": 60}),
        ("expires", "ttlAfterFailure of policy", 7200, True),
    ),
    "argo/errored-completion": (
        workflow("errored-completion", "error", ttl={"secondsAfterFailure": 60, "secondsAfterCompletion": 600}),
        ("expires", "spec.ttlStrategy.secondsAfterCompletion", 600, True),
    ),
    "argo/from-template": (
        workflow("from-template", "succeeded", stored={"secondsAfterCompletion": 120}),
        ("expires", "status.storedWorkflowTemplateSpec.ttlStrategy.secondsAfterCompletion", 120, True),
    ),
    "argo/archiving": (
        workflow(
            "archiving",
            "succeeded",
            ttl={"secondsAfterCompletion": 0},
            labels={"workflows.argoproj.io/workflow-archiving-status": "Pending"},
        ),
        ("archiving", None, None, False),
    ),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("explain")
    server = start_emulator(
        directory,
        (Resource(k.group, k.version, k.kind, k.plural, status_subresource=k is not WORKFLOW) for k in ALL_KINDS),
    )
    for obj, _ in [*TFJOBS.values(), *OTHERS.values()]:
        seed_object(server.store, obj)
    server.home = directory  # kubectl's cache goes here, not into the real home
    yield server
    server.stop()


@pytest.fixture(scope="module")
def policy(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(POLICY)
    return path


def kubectl(cluster, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "HOME": str(cluster.home)}
    result = subprocess.run([KUBECTL, *args], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def check(item: dict, expected: tuple) -> None:
    verdict, source, offset, expired = expected
    assert (item["verdict"], item["ttlSource"], item["expired"]) == (verdict, source, expired), item
    assert item["expiresAt"] == (None if offset is None else rfc3339(T0 + offset)), item


def test_explain_reads_kubectl_get_tfjobs_output(cluster, policy):
    output = kubectl(cluster, "get", "tfjobs", "-A", "-o", "yaml")
    assert output.startswith("apiVersion: v1\nitems:\n") and "kind: List" in output
    items = explained(output, policy)
    assert set(items) == {f"{obj['metadata']['namespace']}/{name}" for name, (obj, _) in TFJOBS.items()}
    for name, (obj, expected) in TFJOBS.items():
        item = items[f"{obj['metadata']['namespace']}/{name}"]
        check(item, expected)
        assert re.fullmatch(r"[0-9a-f-]{36}", item["uid"]) and item["apiVersion"] == "kubeflow.org/v1"
    own = items["ml/own-ttl"]
    assert (own["outcome"], own["finishedAt"], own["finishedFrom"], own["ttl"]) == (
        "succeeded",
        rfc3339(T0),
        "status.completionTime",
        60,
    )
    assert items["ml/no-completion-time"]["finishedFrom"] == "status.conditions[Succeeded].lastTransitionTime"
    assert (items["ml/trial"]["dryRun"], items["ml/trial"]["rules"]) == (True, ["trial"])
    assert items["ml/in-a-pipeline"]["reason"].startswith("owned-by PipelineRun/p-1")
    assert "spec.runPolicy.suspend" in items["ml/suspended"]["reason"]
    assert "kueue.x-k8s.io/multikueue" in items["ml/multikueue"]["reason"]


def test_explain_reads_kubectl_json_of_several_kinds(cluster, policy):
    items = explained(kubectl(cluster, "get", "jobs.batch,workflows", "-A", "-o", "json"), policy)
    assert set(items) == set(OTHERS)
    for key, (_, expected) in OTHERS.items():
        check(items[key], expected)
    assert items["team/cron-child"]["reason"].startswith("owned-by CronJob/nightly")
    assert (
        "owned-by CronJob/nightly, expired as rule nightly says (owned: delete)" in items["batch/cron-child"]["reason"]
    )
    assert items["team/initializer"]["reason"].startswith("owned-by JobSet/llm-finetune")
    assert items["argo/errored"]["outcome"] == "failed"


def test_explain_prints_a_reading_for_humans(cluster, policy):
    result = explain(
        kubectl(cluster, "get", "jobs.batch", "-n", "team", "-o", "yaml"), "-f", "-", "--now", NOW, policy=policy
    )
    assert result.returncode == 0, result.stderr
    assert "batch/v1 Job team/cron-child: owned\n  why: owned-by CronJob/nightly" in result.stdout
    assert "batch/v1 Job team/kueue: managed-elsewhere" in result.stdout


def test_a_list_from_the_api_names_its_items_kind(tmp_path):
    """A typed list (what the API itself returns for built-in kinds) may omit its items' kind."""
    job = batch_job("plain")
    del job["apiVersion"], job["kind"]
    listing = {"apiVersion": "batch/v1", "kind": "JobList", "metadata": {"resourceVersion": "7"}, "items": [job]}
    item = explained(json.dumps(listing), None)["team/plain"]
    assert (item["kind"], item["verdict"]) == ("Job", "no-ttl")


# --- every example object in the repo ---------------------------------------------------------------
# (file, namespace/name) → verdict, under no policy. Seeds' "$NOW" is the time the emulator seeds them.

SEEDS = ROOT / "emulator" / "jobttl_emulator" / "seeds"
EXAMPLES = {
    "kubeflow/mnist-succeeded-ttl-10s": ("expires", 10),
    "kubeflow/mnist-failed-ttl-20s": ("expires", 20),
    "kubeflow/mnist-running": ("not-finished", None),
    "kubeflow/mnist-no-ttl": ("no-ttl", None),
    "kubeflow/tfjob-simple": ("not-finished", None),  # reference simple.yaml, and the docs' finished sample below
    "None/dist-mnist-for-e2e-test": ("not-finished", None),
    "None/multi-worker": ("not-finished", None),
}


def example_files() -> list[Path]:
    files = [*SEEDS.glob("*.yaml"), *(ROOT / "examples").glob("*.yaml"), *KUBEFLOW.glob("*.yaml")]
    assert len(files) >= 9, files  # 1 seed file, the example policy, 7 reference files
    return sorted(files)


def test_explain_on_every_example_object_in_the_repo(tmp_path):
    """Each file as it is (seeds with "$NOW" filled in, as the emulator seeds them): every job is
    recognised and decided as expected, and nothing else in them (CRDs, the policy) trips it."""
    inputs = []
    for path in example_files():
        copy = tmp_path / f"{path.parent.name}-{path.name}"
        copy.write_text(path.read_text().replace("$NOW", rfc3339(T0)))
        inputs.append(copy)
    for path in inputs:
        result = explain("", "-f", str(path), "--json", "--now", NOW)
        assert result.returncode == 0, (path, result.stderr)
        for item in json.loads(result.stdout)["items"]:
            assert set(item) == ITEM_KEYS
            key = f"{item['namespace']}/{item['name']}"
            if item["kind"] in ("CustomResourceDefinition", None):  # the reference CRDs; the example policy
                assert item["verdict"] == "unknown-kind", (path, item)
                continue
            if path.name == "seeds-kinds.yaml":  # the kinds built in since: a `kinds:` entry away
                assert item["verdict"] == "kind-not-enabled", (path, item)
                continue
            assert item["apiVersion"] == "kubeflow.org/v1", (path, item)
            if path.name.endswith("tfjob-succeeded-status-sample.yaml"):
                assert (item["verdict"], item["finishedAt"], item["outcome"]) == (
                    "no-ttl",
                    "2021-09-06T11:49:30Z",
                    "succeeded",
                )
                continue
            verdict, ttl = EXAMPLES[key]
            assert (item["verdict"], item["ttl"]) == (verdict, ttl), (path, item)
            assert item["expiresAt"] == (rfc3339(T0 + ttl) if ttl is not None else None)


def test_the_example_policy_decides_the_docs_finished_sample(tmp_path):
    item = explained("", ROOT / "examples" / "policy.yaml", "-f", str(KUBEFLOW / "tfjob-succeeded-status-sample.yaml"))
    sample = item["kubeflow/tfjob-simple"]
    assert (sample["verdict"], sample["ttlSource"], sample["expiresAt"]) == (
        "expires",
        "ttl of policy",
        "2021-09-13T11:49:30Z",
    )


@pytest.mark.parametrize(
    "args, stdin, words",
    [
        (["-f", "/nonexistent.yaml"], "", "cannot read /nonexistent.yaml"),
        (["-f", "-"], "kind: [unclosed", "not valid YAML or JSON"),
        (["-f", "-", "--now", "tomorrow"], "", "--now: expected an RFC 3339 time"),
        (["-f", "-", "--now", "2030-01-01T00:00:00"], "", "--now: give the time zone"),
        (
            ["-f", "-", "--policy", str(ROOT / "tests" / "e2e" / "test_explain.py")],
            "",
            "test_explain.py:1: not valid YAML",
        ),
    ],
)
def test_bad_input_is_a_clear_error(args, stdin, words):
    result = explain(stdin, *args)
    assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr, result.stderr
