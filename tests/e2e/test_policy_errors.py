"""A CEL expression cannot stall jobttl, and its errors are the policy's (issue 26 §4, §5).

Real processes: the emulator serving RayJobs, Redis, `jobttl sink` and `jobttl worker`, and the
`jobttl` command. A RayJob with 2,000 deletion rules (KubeRay accepts 12) used to cost
7 s of CPU per event in the built-in expression, and with `ttl.appliedBy` an error meant
"the KubeRay operator deletes it": it stayed for ever, unreported. Now the sink answers at once,
the RayJob is kept as the policy's error (a metric, a `policy-error` audit entry, a `jobttl
status` line, no InvalidTTL Warning on the object), while its twin with valid rules is deleted
at the policy's TTL. An operator's nested comprehension over 300 items stops jobttl at start.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import requests
from kubernetes.client.exceptions import ApiException

from jobttl.core.domain.wire.apiserversource import resource_event
from jobttl.core.store import keys
from jobttl_emulator.resources import NEW_KINDS
from tests.e2e.conftest import OwnStack
from tests.fixtures import rfc3339
from tests.services import ROOT, start_sink, wait_for

RAYJOB = next(r for r in NEW_KINDS if r.kind == "RayJob")
NAMESPACE = "ray"


def rayjob(name: str, rules: list[dict]) -> dict:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"entrypoint": "python job.py", "deletionStrategy": {"deletionRules": rules}},
        "status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "endTime": rfc3339(time.time() - 3600)},
    }


def rule(policy: str, status: str = "SUCCEEDED", ttl: int = 0) -> dict:
    return {"policy": policy, "condition": {"jobStatus": status, "ttlSeconds": ttl}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    directory = tmp_path_factory.mktemp("policy-errors")
    stack = OwnStack(directory, "policy-errors", "ttl: 2s\nkinds: [TFJob, RayJob]\n", resources=(RAYJOB,))
    sink, stack.sink_url = start_sink(stack.env, directory)
    yield stack
    sink.stop()
    stack.stop()


def post(stack, obj: dict) -> requests.Response:
    meta = obj["metadata"]
    message = resource_event(
        "update", obj, "https://10.96.0.1:443", f"/apis/ray.io/v1/namespaces/{meta['namespace']}/rayjobs/{meta['name']}"
    )
    return requests.post(stack.sink_url, headers=dict(message.headers), data=message.body, timeout=60)


def sink_metric(stack, declaration: str) -> float | None:
    text = requests.get(f"{stack.sink_url}/metrics", timeout=5).text
    prefix = f'jobttl_policy_errors_total{{declaration="{declaration}"}} '
    return next((float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix)), None)


def exists(stack, name: str) -> bool:
    try:
        stack.custom.get_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayjobs", name)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def test_a_rayjob_over_its_declaration_is_kept_and_reported_as_the_policys_error(stack):
    # Its twin's rules match no DeleteSelf: no TTL of its own, so the policy's 2 s apply.
    twin = stack.seed(rayjob("twin", [rule("DeleteCluster")]))
    broken = stack.seed(
        rayjob("broken", [rule("DeleteWorkers", "FAILED", i) for i in range(2_000)] + [rule("DeleteSelf", ttl=30)])
    )
    assert sink_metric(stack, "ray.io/v1/RayJob") == 0  # exported from the start
    answer = post(stack, broken)
    assert (answer.status_code, answer.headers["X-Jobttl-Outcome"]) == (202, "ignored:policy-error")
    assert post(stack, twin).headers["X-Jobttl-Outcome"] == "scheduled"
    wait_for(lambda: not exists(stack, "twin"), timeout=30, what="the twin to be deleted at the policy's TTL")
    # The worker has run; what the sink put in the outbox for it (the twin's DeletionScheduled) is drained.
    wait_for(lambda: stack.redis.zcard(keys.notices("policy-errors")) == 0, timeout=30, what="the outbox to drain")
    assert exists(stack, "broken"), "kept: a policy error deletes nothing"
    reasons = {(e.involved_object.name, e.reason) for e in stack.events(NAMESPACE)}
    assert not any(name == "broken" for name, _ in reasons), f"nothing told its owner: {reasons}"

    [entry] = [e for e in stack.history(NAMESPACE, "broken") if e["event"] == "policy-error"]
    assert entry["declaration"] == "ray.io/v1/RayJob" and entry["by"] == "event"
    assert "spec.deletionStrategy.deletionRules has 2,001 items, more than the 12" in entry["detail"]
    assert sink_metric(stack, "ray.io/v1/RayJob") == 1

    post(stack, broken)  # a hot object: counted again, reported once
    assert sink_metric(stack, "ray.io/v1/RayJob") == 2
    assert len([e for e in stack.history(NAMESPACE, "broken") if e["event"] == "policy-error"]) == 1

    status = stack.jobttl("status")
    report = status["policyErrors"]["ray.io/v1/RayJob"]
    assert (report["object"]["name"], report["reports"]) == ("broken", 1)
    text = stack.jobttl("status", as_json=False)
    assert "Policy error: ray.io/v1/RayJob (" in text and "more than the 12 its celInputs entry allows" in text


NESTED = """
ttl: 1d
kinds: [Widget]
kindDeclarations:
  - group: widgets.example.com
    version: v1
    kind: Widget
    plural: widgets
    finished: {state: {path: status.phase, values: {Done: succeeded}}}
    finishedAt: [status.doneAt]
    ttl:
      celWhen: spec.items
      celInputs: [{path: spec.items, maxItems: 300}]
      cel: "self.spec.items.map(a, self.spec.items.filter(b, a == b).size()).exists(n, n > 1) ? 60 : null"
"""


def test_an_expression_that_could_stall_stops_jobttl_at_start_naming_where(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(NESTED)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "jobttl", "sink", "--port", "1"],
        cwd=ROOT,
        text=True,
        env={"JOBTTL_POLICY": str(policy), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    cel_line = next(n for n, line in enumerate(NESTED.splitlines(), 1) if line.lstrip().startswith("cel:"))
    assert (
        f"{policy}:{cel_line}: kindDeclarations[0].ttl.cel: line 1, column 17 of the expression: its cost can reach "
        in result.stderr
    )
    assert "map() here runs its body (8,068 steps) once per item, and its list holds up to 300 items" in result.stderr
    assert time.monotonic() - started < 30  # refused while loading, nothing evaluated


DEEP = """\
kinds: [Widget]
kindDeclarations:
  - group: widgets.example.com
    version: v1
    kind: Widget
    plural: widgets
    finished: {state: {path: status.phase, values: {Done: succeeded}}}
    finishedAt: [status.doneAt]
    ttl:
      celWhen: spec.x
      celInputs: [spec.x]
      cel: "CEL"
"""


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 100 + "1" + ")" * 100,
        "size(" + "[" * 100 + "1" + "]" * 100 + ") > 0 ? 1 : null",
        "1" + " + 1" * 500,
    ],
)
def test_an_expression_nested_too_deeply_stops_jobttl_at_start_naming_field_and_column(tmp_path, expression):
    # It used to be a RecursionError traceback from the load-time check.
    policy = tmp_path / "policy.yaml"
    policy.write_text(DEEP.replace("CEL", expression))
    result = subprocess.run(
        [sys.executable, "-m", "jobttl", "sink", "--port", "1"],
        cwd=ROOT,
        text=True,
        env={"JOBTTL_POLICY": str(policy), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert f"{policy}:12: kindDeclarations[0].ttl.cel: line 1, column " in result.stderr
    assert "of the expression: nested too deeply" in result.stderr
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
