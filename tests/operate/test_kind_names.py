"""A Kind name is not a kind, to operators: two declared kinds sharing a Kind (Widgets of two API
groups) are two, and a record that kept only its Kind is not taken for whichever kind a bare name
names. Through the CLI (its own process, as operators run it) and the sink's HTTP API, against
real Redis; the deletions are booked in this process by the reconciler, as the sink books them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
import yaml

from jobttl.core.domain.wire import jsoncodec
from jobttl.core.store import keys
from jobttl.core.store.audit import Audit
from jobttl.core.runtime.config import Settings
from jobttl.core.domain.kinds.registry import KindRegistry
from jobttl.core.domain.rules.policy import parse_policy
from jobttl.core.services.reconcile import Reconciler
from jobttl.core.store.schedule import Change, Schedule
from jobttl.sink.app import create_app
from tests.fixtures import rfc3339, with_server_fields
from tests.services import ROOT

NS = "kinds"


def widget_kind(group: str) -> dict:
    return {
        "group": group,
        "version": "v1",
        "kind": "Widget",
        "plural": "widgets",
        "finished": {"conditions": [{"type": "Done", "status": "True", "outcome": "succeeded"}]},
        "finishedAt": ["status.finishedAt"],
    }


TWO_WIDGETS = {
    "ttl": "1h",
    "kindDeclarations": [widget_kind("a.example.com"), widget_kind("b.example.com")],
    "kinds": ["TFJob", "a.example.com/v1/Widget", "b.example.com/v1/Widget"],
}
TWO_JOBS = {"ttl": "1h", "kinds": ["Job", "batch.volcano.sh/v1alpha1/Job"]}


class Stack:
    """Redis, a policy file, the reconciler booking with it, and the CLI and the HTTP API reading it."""

    def __init__(self, redis, redis_server, queue: str, directory, policy: dict):
        self.redis = redis
        path = directory / f"policy-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump(policy))
        self.env = {
            **os.environ,
            "JOBTTL_REDIS_URL": redis_server.url,
            "JOBTTL_QUEUE": queue,
            "JOBTTL_POLICY": str(path),
        }
        self.policy = parse_policy(policy)
        self.schedule, self.audit = Schedule(redis, queue, []), Audit(redis)
        self.reconciler = Reconciler(self.schedule, self.audit, self.policy)
        self.kinds = KindRegistry(self.policy.kinds)
        self.api = create_app(Settings.from_env({k: v for k, v in self.env.items() if k.startswith("JOBTTL_")}))

    def book(self, obj: dict, expected: Change) -> dict:
        obj = with_server_fields(obj)
        kind = self.kinds.get(obj["apiVersion"], obj["kind"])
        assert self.reconciler.reconcile(obj, kind, "event").change is expected
        return obj

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "jobttl", *args], env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=60
        )

    def keep_of(self, obj: dict) -> str | None:
        return self.schedule.override(obj["metadata"]["uid"]).get("keep")


@pytest.fixture
def widgets(redis, redis_server, queue_name, tmp_path) -> Stack:
    return Stack(redis, redis_server, queue_name, tmp_path, TWO_WIDGETS)


def widget(group: str, name: str, done: bool) -> dict:
    now = rfc3339(time.time() - 60)
    status = (
        {"finishedAt": now, "conditions": [{"type": "Done", "status": "True", "lastTransitionTime": now}]}
        if done
        else {"conditions": []}
    )
    return {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"size": 1},
        "status": status,
    }


def test_two_declared_kinds_of_one_kind_name_are_two_kinds_to_cancel_show_and_the_api(widgets):
    name = f"twin-{uuid.uuid4().hex[:6]}"
    a = widgets.book(widget("a.example.com", name, done=True), Change.SCHEDULED)
    b = widgets.book(widget("b.example.com", name, done=True), Change.SCHEDULED)
    both = "several kinds (Widget.a.example.com, Widget.b.example.com); say which with --kind"
    for args in (
        ("cancel", f"{NS}/{name}"),
        ("cancel", f"{NS}/{name}", "--kind", "Widget"),
        ("show", f"{NS}/{name}"),
        ("postpone", f"{NS}/{name}", "1h"),
    ):
        done = widgets.run(*args)
        assert done.returncode == 1 and both in done.stderr, (args, done.stderr)
    answer = widgets.api.test_client().get(f"/api/v1/deletions/{NS}/{name}")
    assert answer.status_code == 409 and both in answer.get_json()["error"], answer.get_json()
    assert widgets.keep_of(a) is None and widgets.keep_of(b) is None, "nothing kept while it was ambiguous"

    done = widgets.run("cancel", f"{NS}/{name}", "--kind", "Widget.a.example.com")
    assert done.returncode == 0, done.stderr
    assert widgets.keep_of(a) == "true" and widgets.schedule.get(a["metadata"]["uid"]) is None
    assert widgets.keep_of(b) is None and widgets.schedule.get(b["metadata"]["uid"]) is not None
    shown = json.loads(widgets.run("show", f"{NS}/{name}", "--kind", "b.example.com/v1/Widget", "--json").stdout)
    assert shown["apiVersion"] == "b.example.com/v1" and len(shown["pending"]) == 1


def test_a_cancel_with_nothing_pending_never_keeps_the_other_kinds_job(widgets):
    """Nothing pending: the keep goes to the newest UID that had the name, which must be of the kind meant."""
    name = f"running-{uuid.uuid4().hex[:6]}"
    a = widgets.book(widget("a.example.com", name, done=False), Change.IGNORED)
    b = widgets.book(widget("b.example.com", name, done=False), Change.IGNORED)  # the newest
    done = widgets.run("cancel", f"{NS}/{name}")
    assert done.returncode == 1 and "Widget.a.example.com, Widget.b.example.com" in done.stderr, done.stderr
    assert widgets.keep_of(a) is None and widgets.keep_of(b) is None

    done = widgets.run("cancel", f"{NS}/{name}", "--kind", "Widget.a.example.com")
    assert done.returncode == 0 and "nothing was pending" in done.stdout, done.stdout + done.stderr
    assert widgets.keep_of(a) == "true" and widgets.keep_of(b) is None
    # kubectl would pick one of the two Widget CRDs by itself for `widget`: the hint names the group.
    assert f"kubectl annotate widget.a.example.com -n {NS} {name} jobttl.io/keep=true" in done.stdout, done.stdout


def forget_api_version(stack: Stack, obj: dict) -> None:
    """Make the card of `obj` one an earlier release noted: its Kind, no apiVersion, no entries left
    in the trail to read it from."""
    key, uid = keys.card(NS, obj["metadata"]["name"]), obj["metadata"]["uid"]
    card = jsoncodec.loads(stack.redis.hget(key, uid))
    card.pop("apiVersion", None)
    stack.redis.hset(key, uid, jsoncodec.dumps_str({**card, "log": []}))


def volcano_job(name: str) -> dict:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"minAvailable": 1},
        "status": {"state": {"phase": "Running"}},
    }


def test_a_record_without_its_group_is_not_taken_for_the_kind_a_bare_name_names(
    redis, redis_server, queue_name, tmp_path
):
    jobs = Stack(redis, redis_server, queue_name, tmp_path, TWO_JOBS)
    name = f"legacy-{uuid.uuid4().hex[:6]}"
    volcano = jobs.book(volcano_job(name), Change.IGNORED)
    forget_api_version(jobs, volcano)
    # `--kind Job` is batch/v1's Job: the record says Job, which Volcano's is too.
    done = jobs.run("cancel", f"{NS}/{name}", "--kind", "Job")
    assert done.returncode == 1, done.stdout
    assert "says Job but not its API group" in done.stderr and "(Job, Job.batch.volcano.sh)" in done.stderr
    assert f"kubectl annotate job -n {NS} {name} jobttl.io/keep=true" in done.stderr, done.stderr
    assert jobs.keep_of(volcano) is None
    # The only kind by that name enabled: the record is of its group.
    volcano_only = Stack(
        redis, redis_server, queue_name, tmp_path, {"ttl": "1h", "kinds": ["batch.volcano.sh/v1alpha1/Job"]}
    )
    done = volcano_only.run("cancel", f"{NS}/{name}", "--kind", "Job.batch.volcano.sh")
    assert done.returncode == 0, done.stderr
    assert jobs.keep_of(volcano) == "true"
