"""Row 9: CEL on large RayJobs, and what costly events do to the sink (issue 26 §4).

Two parts, each jobttl against a baseline in the same run:

- **decide()** on a 1.7 MB RayJob as a real one grows (a RayCluster spec of many worker groups
  with long environments, and the most deletion rules KubeRay accepts, 12), each round with
  inputs not seen before (no cache), against reading the same seven celInputs paths and
  computing the same rule in plain Python (`_plain_rayjob_ttl`): the price of CEL itself.
  The same for a RayJob of 20,000 rules (KubeRay would refuse it; one that costs minutes to
  evaluate unbounded), which jobttl keeps as the policy's error without evaluating.
- **the sink** (`python -m jobttl sink`, 8 threads as the chart runs it) receiving an ordinary
  TFJob event and polling ``/healthz`` while six events for costly RayJobs (5,000 rules each:
  ~17 s of CPU each, unbounded, as issue 26 found) are in flight, against the same ordinary event alone.

`python -m bench.cel [--rounds N]` runs it alone and prints the figures; `--python PATH` runs
the sink and decide() of another installation (how the "before" figures were taken).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from bench.harness import Line, RowResult, interleave, spawn, stop
from bench.redis_side import RedisSide

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
if not REFERENCE.exists():
    REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "reference"
OBJECT_BYTES = 1_700_000
COSTLY_RULES = 5_000


def rayjob(rules: int, seed: str, size: int = OBJECT_BYTES) -> dict[str, Any]:
    """A finished RayJob of about `size` bytes: the upstream sample's spec, its worker group
    repeated (with long environments) until the object is that large, and `rules` deletion rules
    whose TTLs depend on `seed` (so that no cache has seen them)."""
    import yaml

    sample = yaml.safe_load((REFERENCE / "rayjob" / "ray-job.deletion-rules.yaml").read_text())
    obj = copy.deepcopy(sample)
    obj["metadata"].update(
        name=f"ray-{seed}",
        namespace="bench",
        uid=str(uuid.uuid4()),
        creationTimestamp="2026-01-01T00:00:00Z",
        resourceVersion="1",
    )
    group = obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    container = group["template"]["spec"]["containers"][0]
    container["env"] = [{"name": f"SETTING_{i}", "value": "x" * 200} for i in range(20)]
    groups, total = [], len(json.dumps(obj))
    while total < size:
        extra = copy.deepcopy(group)
        extra["groupName"] = f"workers-{len(groups)}"
        groups.append(extra)
        total += len(json.dumps(extra))
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"] = groups or [group]
    statuses = ["SUCCEEDED", "FAILED"]
    policies = ["DeleteWorkers", "DeleteCluster", "DeleteNone", "DeleteSelf"]
    base = sum(map(ord, seed)) % 1000
    # The 12 rules KubeRay accepts last, after any more: the expression reads every rule to find the match.
    padding = [
        {"policy": "DeleteWorkers", "condition": {"jobStatus": "FAILED", "ttlSeconds": base + i}}
        for i in range(max(0, rules - 12))
    ]
    obj["spec"]["deletionStrategy"] = {
        "deletionRules": padding
        + [
            {"policy": policies[(i // 2) % 4], "condition": {"jobStatus": statuses[i % 2], "ttlSeconds": base + i}}
            for i in range(min(rules, 12))
        ]
    }
    obj["status"] = {
        "jobDeploymentStatus": "Complete",
        "jobStatus": "SUCCEEDED",
        "endTime": "2026-01-01T01:00:00Z",
        "rayClusterName": f"ray-{seed}-cluster",
    }
    return obj


def _plain_rayjob_ttl(obj: dict[str, Any]) -> int | None:
    """The built-in expression's rule, in Python, over the same paths: the baseline."""
    from jobttl.core.domain.kinds.model import get_path

    if get_path(obj, ("spec", "clusterSelector")):
        return None
    status = get_path(obj, ("status", "jobStatus"))
    deployment = get_path(obj, ("status", "jobDeploymentStatus"))
    rules = get_path(obj, ("spec", "deletionStrategy", "deletionRules"))
    if rules is not None:
        for rule in rules:
            condition = rule.get("condition") or {}
            matches = (
                condition.get("jobStatus") == status
                if "jobStatus" in condition
                else condition.get("jobDeploymentStatus") == deployment
            )
            if rule.get("policy") == "DeleteSelf" and matches:
                return condition.get("ttlSeconds", 0)
        return None
    legacy = get_path(obj, ("spec", "deletionStrategy", "onSuccess" if status == "SUCCEEDED" else "onFailure"))
    if isinstance(legacy, dict) and legacy.get("policy") == "DeleteSelf":
        return get_path(obj, ("spec", "ttlSecondsAfterFinished")) or 0
    return None


def _cpu_ms(work) -> float:
    started = time.process_time()
    work()
    return (time.process_time() - started) * 1000


def measure_decide(rules: int, rounds: int) -> list[float]:
    """CPU milliseconds of decide() on fresh 1.7 MB RayJobs (a new kind each, so no cache)."""
    from jobttl.core.domain.decisions.decision import decide
    from jobttl.core.domain.kinds.declarations import builtin_kinds

    out = []
    warm = builtin_kinds()["ray.io/v1/RayJob"]
    decide(rayjob(2, "warm", size=1000), warm)  # the parser built, as in a running sink
    for i in range(rounds):
        obj = rayjob(rules, f"d{rules}-{i}-{uuid.uuid4().hex[:6]}")
        out.append(_cpu_ms(lambda: decide(obj, warm)))
    return out


def measure_plain(rules: int, rounds: int) -> list[float]:
    out = []
    for i in range(rounds):
        obj = rayjob(rules, f"p{rules}-{i}")
        out.append(_cpu_ms(lambda: _plain_rayjob_ttl(obj)))
    return out


# --- the sink ----------------------------------------------------------------------------------------


def _event(obj: dict[str, Any], plural: str) -> tuple[dict[str, str], bytes]:
    """The binary-mode CloudEvent an ApiServerSource sends for `obj` (bench.objects's, for any kind)."""
    from bench.objects import resource_event

    meta = obj["metadata"]
    message = resource_event(
        "update",
        obj,
        "https://10.96.0.1:443",
        f"/apis/{obj['apiVersion']}/namespaces/{meta['namespace']}/{plural}/{meta['name']}",
    )
    return dict(message.headers), message.body


def _tfjob() -> dict[str, Any]:
    from bench.objects import realistic_tfjobs

    [obj] = realistic_tfjobs(
        [("bench", f"tf-{uuid.uuid4().hex[:8]}", str(uuid.uuid4()))], state="succeeded", at=time.time()
    )
    return obj


class Sink:
    def __init__(self, python: str, workdir: Path, redis_url: str):
        self.port = _free_port()
        policy = workdir / "cel-policy.yaml"
        policy.write_text("ttl: 1h\nkinds: [TFJob, RayJob]\n")
        env = {
            **os.environ,
            "JOBTTL_REDIS_URL": redis_url,
            "JOBTTL_POLICY": str(policy),
            "JOBTTL_QUEUE": f"cel-{uuid.uuid4().hex[:6]}",
            "JOBTTL_FIRST_RUN_REVIEW": "off",
        }
        self.url = f"http://127.0.0.1:{self.port}"
        # -P: jobttl from `python`'s installation, not from the checkout's jobttl/ (the working directory).
        self.process = spawn(
            [python, "-P", "-m", "jobttl", "sink", "--host", "127.0.0.1", "--port", str(self.port), "--threads", "8"],
            env,
            workdir / f"cel-sink-{self.port}.log",
        )
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if requests.get(f"{self.url}/healthz", timeout=1).ok:
                    return
            except requests.RequestException:
                time.sleep(0.2)
        raise RuntimeError("the sink did not start")

    def post(self, obj: dict[str, Any], plural: str) -> float:
        headers, body = _event(obj, plural)
        started = time.perf_counter()
        answer = requests.post(self.url, headers=headers, data=body, timeout=600)
        assert answer.status_code < 500, answer.text
        return time.perf_counter() - started


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sink_under_costly_events(sink: Sink, costly: int, rules: int) -> dict[str, float]:
    """The ordinary event's latency and the slowest /healthz while `costly` RayJob events are in flight."""
    objects = [rayjob(rules, f"s{i}-{uuid.uuid4().hex[:6]}") for i in range(costly)]
    threads = [threading.Thread(target=sink.post, args=(o, "rayjobs")) for o in objects]
    for t in threads:
        t.start()
    time.sleep(0.5 if costly else 0)  # the costly ones are being read and decided
    health: list[float] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            started = time.perf_counter()
            requests.get(f"{sink.url}/healthz", timeout=600)
            health.append(time.perf_counter() - started)
            time.sleep(0.2)

    poller = threading.Thread(target=poll)
    poller.start()
    ordinary = sink.post(_tfjob(), "tfjobs")
    for t in threads:
        t.join()
    done.set()
    poller.join()
    return {"ordinary_s": ordinary, "healthz_max_s": max(health) if health else 0.0}


def run(workdir: Path, rounds: int, python: str = sys.executable) -> RowResult:
    result = RowResult(
        "cel", "CEL: the built-in RayJob expression on 1.7 MB RayJobs, and the sink while costly ones arrive"
    )
    print("  decide(): 12 rules, 20,000 rules; the plain-Python rule", flush=True)
    for rules, name in ((12, "decide 1.7 MB RayJob, 12 rules"), (20_000, "decide 1.7 MB RayJob, 20,000 rules")):
        for value in _decide_in(python, rules, rounds):
            result.side(name, "ms CPU", higher_is_better=False).add(value)
    for value in measure_plain(12, rounds):
        result.side("plain Python, same paths and rule", "ms CPU", higher_is_better=False).add(value)
    result.lines += [
        Line(
            "9",
            "decide 1.7 MB RayJob, 12 rules",
            "plain Python, same paths and rule",
            "<= 50",
            "absolute target: ms of CPU, first time its inputs are seen",
            absolute=True,
        ),
        Line(
            "9",
            "decide 1.7 MB RayJob, 20,000 rules",
            "plain Python, same paths and rule",
            "<= 50",
            "over maxItems: kept as the policy's error, not evaluated",
            absolute=True,
        ),
    ]
    with RedisSide() as redis:
        sink = Sink(python, workdir, redis.url)
        try:

            def loaded() -> None:
                figures = sink_under_costly_events(sink, 6, COSTLY_RULES)
                result.side(
                    f"ordinary event, 6 RayJobs of {COSTLY_RULES:,} rules in flight", "s", higher_is_better=False
                ).add(figures["ordinary_s"])
                result.side("slowest /healthz meanwhile", "s", higher_is_better=False).add(figures["healthz_max_s"])

            def alone() -> None:
                figures = sink_under_costly_events(sink, 0, COSTLY_RULES)
                result.side("ordinary event alone", "s", higher_is_better=False).add(figures["ordinary_s"])

            interleave(rounds, [("costly events in flight", loaded), ("alone", alone)])
        finally:
            stop(sink.process)
    result.lines += [
        Line(
            "9",
            f"ordinary event, 6 RayJobs of {COSTLY_RULES:,} rules in flight",
            "ordinary event alone",
            "<= 1.0",
            "absolute target: s",
            absolute=True,
        ),
        Line(
            "9",
            "slowest /healthz meanwhile",
            "ordinary event alone",
            "<= 3",
            "absolute target: s (the chart's liveness timeout)",
            absolute=True,
        ),
    ]
    return result


def _decide_in(python: str, rules: int, rounds: int) -> list[float]:
    """measure_decide in `python` (this one, or another installation's for the "before" figures)."""
    if python == sys.executable:
        return measure_decide(rules, rounds)
    code = f"import json, bench.cel as c; print(json.dumps(c.measure_decide({rules}, {rounds})))"
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as path:
        # bench/ and tests/ from this checkout, jobttl from `python`'s installation (-P: not the checkout's).
        for name in ("bench", "tests"):
            (Path(path) / name).symlink_to(root / name)
        out = subprocess.run(
            [python, "-P", "-c", code],
            capture_output=True,
            text=True,
            timeout=7200,
            cwd=path,
            env={**os.environ, "PYTHONPATH": path},
            check=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cel", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--python", default=sys.executable, help="the Python of the jobttl installation to measure")
    args = parser.parse_args(argv)
    from bench.harness import table

    result = run(Path(tempfile.mkdtemp(prefix="jobttl-bench-cel-")), args.rounds, args.python)
    print(table([result]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
