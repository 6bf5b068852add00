"""A kind jobttl has never heard of, added by editing the policy alone (issue 19).

`widgets.example.com/v1 Widget` (tests/e2e/widget-crd.yaml) is done when its `Done` condition is
True, at `status.finishedAt`. The policy declares it (`kindDeclarations`); nothing else changes.
The real processes run against an emulator serving the Widget CRD: `jobttl watch` sees a finished
Widget and posts the event, the sink books it, the worker archives it (with its pod's log) and
deletes it at finish + TTL with the UID precondition. A resync finds one nobody posted,
`jobttl explain` explains one, and a typo in the declaration stops jobttl at start, naming the field;
a well-formed path the Widget CRD does not have (the emulator serves the CRD, and the worker reads
it at start) stops the worker too, naming the path and the nearest field; when RBAC will not let it
read the CRD, it warns, naming the rule to grant, and starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml
from kubernetes import client, config

from jobttl_emulator import EVENT, POD
from jobttl_emulator.crds import load_crds
from tests.e2e.conftest import stack_environment
from tests.fixtures import rfc3339
from tests.services import ROOT, JobttlProcess, RedisServer, free_port, start_emulator, start_sink, wait_for

QUEUE = "widgets"
GROUP, VERSION, PLURAL = "widgets.example.com", "v1", "widgets"
POD_LABEL = "widgets.example.com/name"
WIDGET = {
    "group": GROUP,
    "version": VERSION,
    "kind": "Widget",
    "plural": PLURAL,
    "finished": {"conditions": [{"type": "Done", "status": "True", "outcome": "succeeded"}]},
    "finishedAt": ["status.finishedAt"],
    "pods": {"label": POD_LABEL},
}


def policy(store: str, declaration: dict = WIDGET) -> dict:
    return {
        "ttl": "1h",
        "kindDeclarations": [declaration],
        "archive": {"store": store, "enabled": False},
        "rules": [{"name": "quick", "selector": {"matchLabels": {"widget": "quick"}}, "ttl": "3s", "archive": True}],
    }


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    widgets = load_crds([Path(__file__).with_name("widget-crd.yaml")])
    server = start_emulator(tmp_path_factory.mktemp("widget-kube"), (*widgets, POD, EVENT), gc_delay=0.1)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def archive_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("widget-archive")


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory, archive_dir) -> Path:
    path = tmp_path_factory.mktemp("widget-policy") / "policy.yaml"
    path.write_text(yaml.safe_dump(policy(str(archive_dir))))
    return path


@pytest.fixture(scope="module")
def own_redis():
    """A Redis of its own: deletion follow-ups are one set per Redis, and another package's worker
    (whose policy declares no Widget) must not be the one that claims this stack's."""
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def env(own_redis, kube, policy_file):
    return stack_environment(own_redis, kube, QUEUE, free_port(), JOBTTL_POLICY=str(policy_file))


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("widget-logs")


@pytest.fixture(scope="module")
def stack(env, logs):
    worker = JobttlProcess(["worker"], env, logs, "worker").start()
    sink, url = start_sink(env, logs)
    yield url
    sink.stop()
    worker.stop()


class Widgets:
    def __init__(self, kube, namespace: str):
        api_client = config.new_client_from_config(config_file=str(kube.kubeconfig))
        self.api = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.kube = kube
        self.namespace = namespace

    def finished(self, name: str, at: float, **labels: str) -> dict:
        self.api.create_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Widget",
                "metadata": {"name": name, "labels": labels},
                "spec": {"size": 3},
            },
        )
        return self.api.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            name,
            {
                "status": {
                    "finishedAt": rfc3339(at),
                    "conditions": [
                        {"type": "Done", "status": "True", "reason": "Polished", "lastTransitionTime": rfc3339(at + 5)}
                    ],
                }
            },
        )

    def pod(self, owner: dict, log: str) -> None:
        meta = owner["metadata"]
        name = f"{meta['name']}-maker"
        self.core.create_namespaced_pod(
            self.namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "labels": {POD_LABEL: meta["name"]},
                    "ownerReferences": [
                        {
                            "apiVersion": f"{GROUP}/{VERSION}",
                            "kind": "Widget",
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": {"containers": [{"name": "maker", "image": "busybox"}]},
            },
        )
        self.kube.set_log(self.namespace, name, "maker", log)

    def get(self, name: str) -> dict | None:
        try:
            return self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def deletes(self, name: str) -> list[dict]:
        log = requests.get(f"{self.kube.url}/_emulator/requests", params={"method": "DELETE"}, timeout=5).json()
        return [r for r in log if r["path"].endswith(f"/namespaces/{self.namespace}/{PLURAL}/{name}")]


def jobttl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobttl", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_a_resync_finds_a_finished_widget_and_explain_explains_it(kube, env, stack, tmp_path):
    widgets = Widgets(kube, "resync")
    finished_at = time.time() - 60
    widget = widgets.finished("found-by-resync", finished_at)  # no event: nothing is watching yet

    resync = jobttl(env, "resync", "--json")
    assert resync.returncode == 0, resync.stderr
    report = json.loads(resync.stdout)
    assert "widgets.example.com/v1/Widget" not in report["missing_kinds"]
    pending = json.loads(jobttl(env, "pending", "--json").stdout)["items"]
    booked = [p for p in pending if p["uid"] == widget["metadata"]["uid"]]
    assert [(p["kind"], p["due"]) for p in booked] == [("Widget", int(finished_at) + 3600)], pending

    path = tmp_path / "widget.yaml"
    path.write_text(yaml.safe_dump(widget))
    explained = jobttl(env, "explain", "-f", str(path), "--json")
    assert explained.returncode == 0, explained.stderr
    (item,) = json.loads(explained.stdout)["items"]
    assert (item["kind"], item["verdict"], item["finishedFrom"], item["ttlSource"]) == (
        "Widget",
        "expires",
        "status.finishedAt",
        "ttl of policy",
    )
    assert item["expiresAt"] == rfc3339(int(finished_at) + 3600)

    shown = jobttl(env, "show", "resync/found-by-resync")
    assert shown.returncode == 0 and "Widget" in shown.stdout, shown.stdout + shown.stderr


def test_a_watched_widget_is_archived_and_deleted_at_finish_plus_ttl_with_its_uid(kube, env, stack, logs, archive_dir):
    opened = kube.store.open_watches
    watcher = JobttlProcess(["watch", "--sink", stack, "--port", "0"], env, logs, "watch").start()
    try:
        # Like ApiServerSource it takes stock first: only what changes once it watches is posted.
        wait_for(lambda: kube.store.open_watches > opened, timeout=30, what="jobttl watch to watch the Widgets")
        widgets = Widgets(kube, "watched")
        finished_at = time.time()
        widget = widgets.finished("w1", finished_at, widget="quick")
        widgets.pod(widget, "polishing... done\n")
        wait_for(lambda: widgets.get("w1") is None, timeout=30, what="the Widget to be deleted")
        gone_at = time.time()
    finally:
        watcher.stop()
    assert gone_at >= int(finished_at) + 3, "not before finish + TTL"
    (delete,) = widgets.deletes("w1")
    assert delete["body"]["preconditions"]["uid"] == widget["metadata"]["uid"]

    def recorded():  # "deleted" once the follow-up sees it gone (jobttl.core.services.follow)
        history = json.loads(jobttl(env, "history", "--json", "--event", "deleted").stdout)["items"]
        return [(h["kind"], h["name"]) for h in history if h["uid"] == widget["metadata"]["uid"]]

    wait_for(recorded, timeout=20, what="the audit trail to record the Widget deleted")
    assert recorded() == [("Widget", "w1")]
    archived = [p for p in archive_dir.rglob("*") if p.is_file() and f"Widget/w1-{widget['metadata']['uid']}" in str(p)]
    assert archived, sorted(str(p) for p in archive_dir.rglob("*"))
    assert any("polishing... done" in p.read_text(errors="replace") for p in archived), "its pod's log, found by label"


def test_a_typo_in_a_declaration_stops_jobttl_at_start_naming_the_field(tmp_path, env):
    declaration = {key: value for key, value in WIDGET.items() if key != "plural"}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy(str(tmp_path), declaration)))
    started = jobttl({**env, "JOBTTL_POLICY": str(path)}, "worker")
    assert started.returncode == 2, started.stderr
    assert f"{path}:5: kindDeclarations[0].plural: required" in started.stderr
    broken = {**WIDGET, "finishedAt": ["finishedAt"]}
    path.write_text(yaml.safe_dump(policy(str(tmp_path), broken)))
    explained = jobttl(env, "explain", "-f", str(path), "--policy", str(path))
    assert explained.returncode == 2
    assert "kindDeclarations[0].finishedAt[0]: 'finishedAt' is not" in explained.stderr


def test_a_declared_path_its_crd_does_not_have_stops_the_worker_naming_it_and_the_right_one_starts(tmp_path, env):
    """The emulator serves the Widget CRD (GET customresourcedefinitions/widgets.widgets.example.com):
    `spec.sise` is well-formed, so only the CRD's schema can tell it names nothing."""
    path = tmp_path / "policy.yaml"
    own = {
        **env,
        "JOBTTL_POLICY": str(path),
        "JOBTTL_QUEUE": "widgets-checked",
        "JOBTTL_WORKER_METRICS_PORT": str(free_port()),
    }
    path.write_text(yaml.safe_dump(policy(str(tmp_path), {**WIDGET, "suspend": "spec.sise"})))
    refused = jobttl(own, "worker", "--burst")
    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr
    assert (
        f"jobttl: configuration error: a kind declaration reads fields its CustomResourceDefinition does not "
        f"have (such a path never matches):\n  {path}: kindDeclarations[0].suspend: 'spec.sise' is not in the "
        "schema of widgets.example.com/v1/Widget (CRD widgets.widgets.example.com): spec has no field 'sise'; "
        "did you mean spec.size?"
    ) in refused.stderr

    path.write_text(yaml.safe_dump(policy(str(tmp_path), {**WIDGET, "suspend": "spec.size"})))
    started = jobttl(own, "worker", "--burst")
    assert started.returncode == 0, started.stderr
    checked = [json.loads(line) for line in started.stderr.splitlines() if '"kinds-checked"' in line]
    assert checked and "widgets.example.com/v1/Widget" in checked[0]["verified"]


def test_a_worker_rbac_will_not_let_read_the_crd_warns_naming_the_rule_and_starts(tmp_path, env, kube):
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy(str(tmp_path), {**WIDGET, "suspend": "spec.sise"})))
    own = {
        **env,
        "JOBTTL_POLICY": str(path),
        "JOBTTL_QUEUE": "widgets-unchecked",
        "JOBTTL_WORKER_METRICS_PORT": str(free_port()),
    }
    kube.add_fault(
        verb="get", status=403, count=1, path_contains="/customresourcedefinitions/widgets.widgets.example.com"
    )
    started = jobttl(own, "worker", "--burst")
    assert started.returncode == 0, started.stderr
    (warning,) = [json.loads(line) for line in started.stderr.splitlines() if '"kind-unverified"' in line]
    assert warning["level"] == "WARNING" and warning["crds"] == ["widgets.widgets.example.com"]
    # The rule covers every enabled custom kind (the default ones and the Widget), by name.
    assert (
        "{apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions], "
        "resourceNames: [tfjobs.kubeflow.org, " in warning["detail"]
    )
    assert "workflows.argoproj.io, widgets.widgets.example.com], verbs: [get]}" in warning["detail"]
