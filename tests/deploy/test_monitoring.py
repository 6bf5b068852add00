"""The monitoring kit (knative/monitoring/), proven on the real thing.

- the component renders (kustomize and the loader agree) into objects of the right shape,
  whose PodMonitors find the sink's and the workers' pods and metrics ports;
- `promtool check rules` accepts the alerts and `promtool test rules` runs a unit test per
  alert, firing and quiet, and those unit tests catch an alert that never or always fires;
- a real `prometheus` scrapes a running stack (Redis, the emulator, the sink and worker
  processes) driven into trouble (a late deletion, a failed one, a stuck one, a held one):
  every expression of the rules and of the dashboard is accepted and returns the series it
  should, exactly the alerts for that trouble go off, and none of the others.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import jsonschema
import pytest
import requests
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobttl.core.store import keys
from jobttl.core.runtime.config import Settings
from jobttl.core.store import gauges
from jobttl.core.runtime.metrics import Metrics
from jobttl.core.store.schedule import Schedule
from jobttl_emulator import TFJOB
from tests.deploy.manifests import KNATIVE, find, object_id, pod_spec, render, validate_core
from tests.deploy.monitoring import (
    MONITORING,
    RULES_TEST,
    SCHEMAS,
    Prometheus,
    alerts,
    as_prometheus_sees_it,
    dashboard,
    dashboard_targets,
    grouping_labels,
    prometheus_binary,
    prometheus_rule,
    promtool,
    selectors,
    write_rules_file,
)
from tests.e2e.conftest import CORE_EVENTS, Cluster, stack_environment
from tests.fixtures import finished_status
from tests.services import JobttlProcess, RedisServer, free_port, start_emulator, wait_for

SEVERITIES = {"critical", "warning"}
DASHBOARD_PANELS = {
    "Pending deletions",
    "Deletions per minute by kind",
    "Deletion lateness",
    "Failures per minute by reason",
    "Resync duration",
    "Kubernetes API latency p99 by verb",
    "Dry run: would delete by kind",
}


# --- the manifests ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def overlay(tmp_path_factory):
    """An overlay turning the kit on, as the component's comment tells users to."""
    directory = tmp_path_factory.mktemp("monitored")
    (directory / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(KNATIVE / "base", directory)],
                "components": [os.path.relpath(MONITORING, directory)],
            }
        )
    )
    return directory


@pytest.fixture(scope="module")
def monitored(overlay):
    return render(overlay)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) not installed")
def test_kustomize_renders_the_component_as_the_loader_does(overlay, monitored):
    result = subprocess.run(
        ["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, timeout=60, check=True
    )
    expected = sorted((d for d in yaml.safe_load_all(result.stdout) if d), key=object_id)
    assert sorted(monitored, key=object_id) == expected


def test_the_component_adds_the_kit_and_names_the_worker_metrics_port(monitored):
    base = {object_id(o): o for o in render(KNATIVE / "base")}
    added = sorted((o["kind"], o["metadata"]["name"]) for o in monitored if object_id(o) not in base)
    assert added == [
        ("ConfigMap", "jobttl-dashboard"),
        ("PodMonitor", "jobttl-sink"),
        ("PodMonitor", "jobttl-worker"),
        ("PrometheusRule", "jobttl"),
    ]
    changed = [object_id(o) for o in monitored if object_id(o) in base and o != base[object_id(o)]]
    assert changed == [object_id(find(monitored, "Deployment", "jobttl-worker"))]


def test_the_kit_objects_have_the_operator_and_kubernetes_shapes(monitored):
    for obj in monitored:
        if obj["kind"] in SCHEMAS:
            problems = [
                f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
                for e in jsonschema.Draft202012Validator(SCHEMAS[obj["kind"]]).iter_errors(obj)
            ]
        elif obj["kind"] in ("ConfigMap", "Deployment"):
            problems = validate_core(obj)
        else:
            continue
        assert not problems, f"{obj['kind']} {obj['metadata']['name']}: {problems}"


def test_the_structural_check_refuses_what_the_operator_would_not_take():
    rule = prometheus_rule()
    rule["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    assert list(jsonschema.Draft202012Validator(SCHEMAS["PrometheusRule"]).iter_errors(rule))
    monitor = next(
        o for o in yaml.safe_load_all((MONITORING / "monitoring.yaml").read_text()) if o["kind"] == "PodMonitor"
    )
    monitor["spec"]["endpoints"] = monitor["spec"].pop("podMetricsEndpoints")  # a ServiceMonitor's field
    assert list(jsonschema.Draft202012Validator(SCHEMAS["PodMonitor"]).iter_errors(monitor))


def _selects(monitor: dict, template: dict) -> bool:
    labels = template["metadata"]["labels"]
    return monitor["metadata"]["namespace"] == "jobttl" and all(
        labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items()
    )


def test_the_sink_pod_monitor_scrapes_the_sink_container_itself(monitored):
    monitor = find(monitored, "PodMonitor", "jobttl-sink")
    service = find(monitored, "Service", "jobttl-sink", "serving.knative.dev/v1")
    assert _selects(monitor, service["spec"]["template"])
    assert not _selects(monitor, find(monitored, "Deployment", "jobttl-worker")["spec"]["template"])
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    # Knative names the one port of the user container `user-port` in the revision's pods,
    # and the sink serves /metrics on the port it serves events on.
    [container] = pod_spec(service)["containers"]
    [port] = container["ports"]
    assert (endpoint["port"], endpoint["path"]) == ("user-port", "/metrics")
    assert container["args"][container["args"].index("--port") + 1] == str(port["containerPort"])


def test_the_worker_pod_monitor_scrapes_the_port_the_worker_serves_metrics_on(monitored):
    monitor = find(monitored, "PodMonitor", "jobttl-worker")
    deployment = find(monitored, "Deployment", "jobttl-worker")
    assert _selects(monitor, deployment["spec"]["template"])
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    [container] = pod_spec(deployment)["containers"]
    [port] = [p for p in container["ports"] if p["name"] == endpoint["port"]]
    env = {e["name"]: e.get("value") for e in container["env"]}
    serves_on = int(env.get("JOBTTL_WORKER_METRICS_PORT") or Settings().worker_metrics_port)
    assert port["containerPort"] == serves_on and endpoint["path"] == "/metrics"


def test_every_alert_has_a_severity_and_tells_the_on_call_what_to_do():
    runbook = (MONITORING / "README.md").read_text()
    anchors = {line.lstrip("#").strip().lower() for line in runbook.splitlines() if line.startswith("### ")}
    names = [a["alert"] for a in alerts()]
    assert len(names) == len(set(names)) >= 10
    for alert in alerts():
        annotations = alert["annotations"]
        assert alert["labels"]["severity"] in SEVERITIES, alert["alert"]
        assert set(annotations) == {"summary", "description", "runbook"}, alert["alert"]
        assert "`" in annotations["description"], f"{alert['alert']}: the description names no command"
        assert annotations["runbook"] == f"knative/monitoring/README.md#{alert['alert'].lower()}"
        assert alert["alert"].lower() in anchors, f"no runbook section '### {alert['alert']}' in the README"


def test_the_dashboard_is_a_grafana_sidecar_config_map(monitored):
    config_map = find(monitored, "ConfigMap", "jobttl-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    [text] = config_map["data"].values()
    # `kubectl apply` (client-side) keeps the whole object in an annotation, capped at 256 KiB.
    assert len(text.encode()) < 200 * 1024
    board = dashboard()
    assert board["uid"] and board["title"] and [v["name"] for v in board["templating"]["list"]] == ["datasource"]
    assert DASHBOARD_PANELS <= {p["title"] for p in board["panels"]}
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    for title, target in dashboard_targets():
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, title
        assert selectors(target["expr"]), f"{title}: no jobttl metric in {target['expr']}"


# --- promtool ---------------------------------------------------------------------------------


def test_promtool_accepts_the_rules(tmp_path):
    checked = promtool("check", "rules", str(write_rules_file(tmp_path)), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout


def _unit_tests(tmp_path, groups=None) -> subprocess.CompletedProcess:
    write_rules_file(tmp_path, groups)
    shutil.copy(RULES_TEST, tmp_path / RULES_TEST.name)
    return promtool("test", "rules", RULES_TEST.name, cwd=tmp_path)


def test_the_alert_unit_tests_pass(tmp_path):
    result = _unit_tests(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not():
    cases = [case for group in yaml.safe_load(RULES_TEST.read_text())["tests"] for case in group["alert_rule_test"]]
    for name in (a["alert"] for a in alerts()):
        outcomes = {bool(c["exp_alerts"]) for c in cases if c["alertname"] == name}
        assert outcomes == {True, False}, f"{name}: firing and quiet cases expected, got {outcomes}"


def _mutant(directory, name: str, expr: str) -> Path:
    """The rules with alert `name`'s expression replaced by `expr`, and only its unit tests."""
    directory.mkdir()
    groups = prometheus_rule()["spec"]["groups"]
    for rule in groups[0]["rules"]:
        if rule.get("alert") == name:
            rule["expr"] = expr
    write_rules_file(directory, groups)
    suite = yaml.safe_load(RULES_TEST.read_text())
    suite["tests"] = [
        {**group, "alert_rule_test": cases}
        for group in suite["tests"]
        if (cases := [c for c in group["alert_rule_test"] if c["alertname"] == name])
    ]
    path = directory / RULES_TEST.name
    path.write_text(yaml.safe_dump(suite))
    return path


# The series dry run moves (`dryRun: true`, globally or in a rule): what it decided, by kind,
# pending and never deleted. An alert that reads any of them as trouble fires in every dry run.
DRY_RUN_SERIES = (
    "sum(jobttl_dry_run_would_delete) > 0",
    "sum(increase(jobttl_would_delete_total[15m])) > 0",
    'sum(increase(jobttl_decisions_total{event="would-delete"}[15m])) > 0',
    "max(jobttl_pending_deletions) > 0",
)
# The alerts that read the deletion series: each has a unit test of the dry-run case.
DELETION_ALERTS = {
    "JobttlMetricsAbsent",
    "JobttlDeletionsStalled",
    "JobttlDeletionsFailing",
    "JobttlDeletionsStuck",
    "JobttlDeletionsHeld",
    "JobttlDeletionsLate",
}


def _dry_run_cases() -> list[dict]:
    return [group for group in yaml.safe_load(RULES_TEST.read_text())["tests"] if group["name"].startswith("dry run")]


def test_every_alert_on_the_deletion_series_has_a_dry_run_unit_test_that_it_stays_quiet():
    reads = {a["alert"] for a in alerts() if re.search(r"jobttl_\w*(deletion|decisions)", a["expr"])}
    assert reads == DELETION_ALERTS, "an alert reads the deletion series: give it a dry-run case in alerts.test.yaml"
    [case] = _dry_run_cases()
    quiet = {c["alertname"] for c in case["alert_rule_test"] if not c["exp_alerts"]}
    assert quiet == DELETION_ALERTS


def test_the_dry_run_unit_tests_catch_an_alert_that_fires_on_what_dry_run_decided(tmp_path):
    """Each deletion alert, made to fire on a series dry run moves, fails its dry-run case."""
    mutants = {}
    for i, broken in enumerate(DRY_RUN_SERIES):
        for j, name in enumerate(sorted(DELETION_ALERTS)):
            path = _mutant(tmp_path / f"m{i}-{j}", name, broken)
            suite = yaml.safe_load(path.read_text())
            suite["tests"] = [
                {**g, "alert_rule_test": [c for c in g["alert_rule_test"] if c["alertname"] == name]}
                for g in _dry_run_cases()
            ]
            path.write_text(yaml.safe_dump(suite))
            mutants[str(path)] = f"{name}: {broken}"
    result = subprocess.run(
        [prometheus_binary("promtool"), "test", "rules", *mutants],
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=60,
    )
    outcomes = dict(re.findall(r"Unit Testing:\s+(\S+)\s+(SUCCESS|FAILED)", result.stdout))
    assert set(outcomes) == set(mutants), result.stdout
    passed = [mutants[path] for path, outcome in outcomes.items() if outcome == "SUCCESS"]
    assert not passed, f"the dry-run unit tests pass with these alerts firing on dry run: {passed}"


def test_the_unit_tests_catch_an_alert_that_never_or_always_fires(tmp_path):
    mutants = {
        str(_mutant(tmp_path / f"m{i}-{j}", alert["alert"], broken)): f"{alert['alert']}: {broken}"
        for i, broken in enumerate(("vector(1) < 0", "vector(1)"))
        for j, alert in enumerate(alerts())
    }
    # One promtool run for all of them: its start costs about a second.
    result = subprocess.run(
        [prometheus_binary("promtool"), "test", "rules", *mutants],
        cwd=tmp_path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=60,
    )
    outcomes = dict(re.findall(r"Unit Testing:\s+(\S+)\s+(SUCCESS|FAILED)", result.stdout))
    assert set(outcomes) == set(mutants), result.stdout
    passed = [mutants[path] for path, outcome in outcomes.items() if outcome == "SUCCESS"]
    assert not passed, f"the unit tests pass with these broken alerts: {passed}"


# --- a real Prometheus on a running stack -----------------------------------------------------

QUEUE = "monitoring"
# The alerts the stack is driven into (see `troubled`); every other alert must stay quiet.
EXPECTED_ALERTS = {"JobttlDeletionsLate", "JobttlDeletionsFailing", "JobttlDeletionsStuck", "JobttlDeletionsHeld"}
HOUR = 3600


class Stack:
    """Redis, the emulator, a sink and a worker of their own (held and stuck deletions would
    leak into other tests' schedule), scraped by a Prometheus that loads the kit's rules."""

    def __init__(self, directory, policy: str):
        self.started: list = []  # whatever runs, stopped in reverse order, even if starting fails
        try:
            self._start(directory, policy)
        except BaseException:
            self.stop()
            raise

    def _start(self, directory, policy: str):
        (directory / "policy.yaml").write_text(policy)
        self.redis_server = self._started(RedisServer().start())
        self.redis = self.redis_server.client()
        self.emulator = self._started(start_emulator(directory, (TFJOB, CORE_EVENTS), gc_delay=0.2))
        worker_port, sink_port = free_port(), free_port()
        self.worker_metrics = f"http://127.0.0.1:{worker_port}/metrics"
        self.env = stack_environment(
            self.redis_server,
            self.emulator,
            QUEUE,
            worker_port,
            JOBTTL_RESYNC_INTERVAL="3600",  # so the worker resyncs when it starts
            JOBTTL_RESYNC_MAX_DELETIONS="1",
            JOBTTL_RESYNC_MAX_SHARE="1",  # events: the 2nd due in a minute is held
            JOBTTL_STUCK_AFTER="1s",
            JOBTTL_POLICY=str(directory / "policy.yaml"),
        )
        # Prometheus first, so it sees the processes from their first sample on.
        self.prometheus = self._started(
            Prometheus(
                directory,
                {"jobttl-sink": f"127.0.0.1:{sink_port}", "jobttl-worker": f"127.0.0.1:{worker_port}"},
                [write_rules_file(directory)],
            ).start()
        )
        self.worker = self._started(JobttlProcess(["worker"], self.env, directory, "worker").start())
        self.sink = self._started(
            JobttlProcess(
                ["sink", "--host", "127.0.0.1", "--port", str(sink_port), "--threads", "4"], self.env, directory, "sink"
            ).start()
        )
        self.sink_url = f"http://127.0.0.1:{sink_port}"
        wait_for(lambda: requests.get(f"{self.sink_url}/metrics", timeout=1).ok, timeout=20, what="the sink")
        # Prometheus's service discovery hands it its targets ~5 s after it starts.
        wait_for(
            lambda: [t["health"] for t in self.prometheus.api("targets")["activeTargets"]] == ["up", "up"],
            timeout=20,
            what="Prometheus to scrape the sink and the worker",
        )

    def _started(self, part):
        self.started.append(part)
        return part

    def stop(self):
        while self.started:
            self.started.pop().stop()

    def cluster(self) -> Cluster:
        return Cluster(self.emulator, self.sink_url, self.redis)

    def resync(self) -> None:
        """A resync by the worker (as the PingSource asks for one), waited for."""
        schedule = Schedule(self.redis, QUEUE, retry_intervals=[])
        before = time.time()
        # A request is one job per second: one in the same second as another is a duplicate.
        wait_for(schedule.request_resync, timeout=5, interval=0.2, what="the resync to be requested")
        wait_for(lambda: float(self.redis.get(keys.RESYNC_LAST_SUCCESS) or 0) > before, timeout=15, what="the resync")


# A rule's dry run, as an admin tries a new rule: jobs labelled rehearsal=true are only rehearsed.
REHEARSAL = 'rules:\n- name: rehearsal\n  selector: {matchLabels: {rehearsal: "true"}}\n  dryRun: true\n'


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp("monitoring-stack"), REHEARSAL)
    yield stack
    stack.stop()


def _finished(
    cluster: Cluster,
    name: str,
    ttl: int,
    finished_at: float,
    finalizer: str | None = None,
    labels: dict[str, str] | None = None,
):
    obj = cluster.create(name, ttl=ttl)
    if finalizer:
        cluster.patch(name, {"metadata": {"finalizers": [finalizer]}})
    if labels:
        cluster.patch(name, {"metadata": {"labels": labels}})
    obj = cluster.set_status(name, finished_status(finished_at))
    assert cluster.event("update", obj).status_code == 202
    return obj


@pytest.fixture(scope="module")
def troubled(stack):
    """The stack after a late, a held, a failed and a stuck deletion, as Prometheus saw it."""
    wait_for(lambda: stack.redis.get(keys.RESYNC_LAST_SUCCESS), timeout=15, what="the worker's first resync")
    stack.resync()  # once more, now that Prometheus scrapes the worker: its duration is observed
    late, failing, stuck = stack.cluster(), stack.cluster(), stack.cluster()
    # Due an hour ago: deleted at once, an hour late. The guard lets 1 newly due deletion
    # a minute through: the next one is held.
    _finished(late, "late", ttl=60, finished_at=time.time() - HOUR)
    _finished(late, "held", ttl=60, finished_at=time.time() - HOUR)
    late.wait_gone("late")
    # Due an hour ago too, in a rule's dry run: would-delete, kept, not held (nor overdue, nor late).
    _finished(late, "rehearsed", ttl=60, finished_at=time.time() - HOUR, labels={"rehearsal": "true"})
    # Due in 3 s (so not "newly due"): a 403 fails one for good; a finalizer keeps the other.
    failing.fail_next("delete", 403, 1)
    _finished(failing, "forbidden", ttl=3, finished_at=time.time())
    _finished(stuck, "finalized", ttl=3, finished_at=time.time(), finalizer="example.com/never")
    wait_for(lambda: stack.redis.hlen(keys.STUCK) == 1, timeout=20, what="the deletion to be reported stuck")
    wait_for(
        lambda: stack.prometheus.value("max(jobttl_stuck_deletions)") == 1,
        timeout=10,
        what="Prometheus to scrape the stuck deletion",
    )
    wait_for(
        lambda: stack.prometheus.value('sum(jobttl_decisions_total{event="failed"})') == 1,
        timeout=10,
        what="Prometheus to scrape the failed deletion",
    )
    wait_for(
        lambda: stack.prometheus.value("max(jobttl_dry_run_would_delete)") == 1,
        timeout=10,
        what="Prometheus to scrape the dry run's would-delete",
    )
    assert stack.redis.hlen(keys.HELD) == 1 and late.get("held") is not None and late.get("rehearsed") is not None
    assert failing.get("forbidden") is not None
    return stack


def _expressions() -> list[tuple[str, str]]:
    return [(f"alert {a['alert']}", a["expr"]) for a in alerts()] + [
        (f"panel {title}", as_prometheus_sees_it(t["expr"])) for title, t in dashboard_targets()
    ]


def test_prometheus_evaluates_every_rule_without_error(troubled):
    def evaluated():
        rules = [r for g in troubled.prometheus.api("rules")["groups"] for r in g["rules"]]
        never = "0001-01-01T00:00:00Z"  # Go's zero time
        return len(rules) == len(alerts()) and all(r["lastEvaluation"] != never for r in rules) and rules

    for rule in wait_for(evaluated, timeout=10, what="every rule to be evaluated"):
        assert rule["health"] == "ok", f"{rule['name']}: {rule.get('lastError')}"


def test_every_expression_is_accepted_and_every_series_it_reads_exists(troubled):
    for origin, expr in _expressions():
        troubled.prometheus.query(expr)  # a parse or evaluation error fails here, with Prometheus's message
        for selector in selectors(expr):
            assert troubled.prometheus.query(selector), f"{origin}: nothing matches {selector} on the live stack"


def test_every_dashboard_query_returns_its_series_with_their_labels(troubled):
    for title, target in dashboard_targets():
        expr = as_prometheus_sees_it(target["expr"])
        result = troubled.prometheus.query(expr)
        assert result, f"panel {title}: {expr} returned nothing"
        for series in result:
            assert grouping_labels(expr) <= set(series["metric"]), f"panel {title}: {series['metric']}"


def _panel(title: str) -> dict[str, str]:
    """A dashboard panel's queries, by legend."""
    [panel] = [p for p in dashboard()["panels"] if p["title"] == title]
    return {t["legendFormat"]: as_prometheus_sees_it(t["expr"]) for t in panel["targets"]}


def test_the_dashboard_shows_what_happened(troubled):
    prometheus = troubled.prometheus

    def labels(title: str, label: str) -> set[str]:
        [expr] = _panel(title).values()
        return {s["metric"][label] for s in prometheus.query(expr)}

    assert labels("Deletions per minute by kind", "kind") == {"TFJob"}
    assert labels("Deletions per minute by kind", "group") == {"kubeflow.org"}
    assert "permanent" in labels("Failures per minute by reason", "reason")
    assert {"get", "delete", "list"} <= labels("Kubernetes API latency p99 by verb", "verb")
    pending = _panel("Pending deletions")
    assert (prometheus.value(pending["held"]), prometheus.value(pending["stuck"])) == (1, 1)
    assert prometheus.value(_panel("Deletion lateness p50 / p99")["p99"]) > 900
    assert prometheus.value(_panel("Resync duration")["since the last complete resync"]) < 60
    assert prometheus.value(_panel("Workers and scheduler")["heartbeat age (s)"]) < 30
    assert {
        (s["metric"]["kind"], s["metric"]["group"]): float(s["value"][1])
        for s in prometheus.query(_panel("Dry run: would delete by kind")["{{kind}}.{{group}}"])
    } == {("TFJob", "kubeflow.org"): 1}


def test_exactly_the_alerts_for_the_trouble_go_off(troubled):
    def settled():
        active = troubled.prometheus.active_alerts()
        return active if set(active) == EXPECTED_ALERTS else None

    try:
        active = wait_for(settled, timeout=15, what="the expected alerts")
    except AssertionError:
        raise AssertionError(
            f"active alerts: {troubled.prometheus.active_alerts()}, expected {EXPECTED_ALERTS}"
        ) from None
    assert active["JobttlDeletionsFailing"] == "firing"  # no `for`: at once
    quiet = {a["alert"] for a in alerts()} - EXPECTED_ALERTS
    for alert in alerts():
        if alert["alert"] in quiet:
            assert troubled.prometheus.query(alert["expr"]) == [], alert["alert"]


def test_the_heartbeat_gauge_reads_0_without_a_worker_and_skips_a_garbled_heartbeat(stack):
    stack.redis.sadd("rq:workers:unattended", "rq:worker:garbled", "rq:worker:expired")
    stack.redis.hset("rq:worker:garbled", "last_heartbeat", "yesterday")
    text = generate_latest(_registry(stack.redis, "unattended")).decode()
    assert "jobttl_worker_last_heartbeat_timestamp_seconds 0.0" in text


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """A stack of its own in dry run (`dryRun: true`), with three jobs due an hour ago: what
    every dry-run rollout looks like to Prometheus, once the worker has decided."""
    stack = Stack(tmp_path_factory.mktemp("dry-run-stack"), "dryRun: true\n")
    try:
        cluster = stack.rehearsed = stack.cluster()
        for i in range(3):
            _finished(cluster, f"rehearsed-{i}", ttl=60, finished_at=time.time() - HOUR)
        wait_for(
            lambda: stack.prometheus.value("sum(jobttl_would_delete_total)") == 3,
            timeout=30,
            what="the worker's 3 would-deletes, scraped",
        )
        wait_for(
            lambda: stack.prometheus.value("max(jobttl_dry_run_would_delete)") == 3,
            timeout=10,
            what="the would-delete gauge, scraped",
        )
        yield stack
    finally:
        stack.stop()


def test_in_dry_run_nothing_is_overdue_and_the_metrics_say_what_it_would_delete(dry_run):
    prometheus = dry_run.prometheus
    worker = _scraped_samples(dry_run.worker_metrics)
    assert worker[("jobttl_overdue_deletions", ())] == 0
    assert worker[("jobttl_pending_deletions", ())] == 3
    assert worker[("jobttl_dry_run_would_delete", (("group", "kubeflow.org"), ("kind", "TFJob")))] == 3
    assert worker[("jobttl_would_delete_total", (("group", "kubeflow.org"), ("kind", "TFJob")))] == 3
    assert prometheus.value("max(jobttl_overdue_deletions)") == 0
    assert prometheus.value("max(jobttl_held_deletions)") == 0  # the guard holds no dry run
    assert dry_run.rehearsed.deletes() == [] and all(dry_run.rehearsed.get(f"rehearsed-{i}") for i in range(3))


def test_in_dry_run_no_alert_reads_trouble(dry_run):
    """Every rule's expression, evaluated on the dry-run stack, returns nothing: the `for:` of an
    alert only delays what its expression says."""
    for alert in alerts():
        assert dry_run.prometheus.query(alert["expr"]) == [], alert["alert"]
    assert dry_run.prometheus.active_alerts() == {}


def _scraped_samples(url: str) -> dict[tuple[str, tuple], float]:
    text = requests.get(url, timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _scraped(url: str) -> dict[str, float]:
    text = requests.get(url, timeout=5).text
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_killed_worker_stays_registered_but_its_heartbeat_stops(troubled):
    """Why jobttl_worker_last_heartbeat_timestamp_seconds exists (and this test runs last: it
    kills the stack's worker): RQ keeps a worker killed without a goodbye registered, so
    jobttl_workers does not drop; its heartbeat, as every pod reports it, ages."""
    before = _scraped(f"{troubled.sink_url}/metrics")
    assert before["jobttl_workers"] == 1 and time.time() - before["jobttl_worker_last_heartbeat_timestamp_seconds"] < 15
    os.killpg(troubled.worker.process.pid, signal.SIGKILL)
    troubled.worker.process.wait()

    def aged():
        now = _scraped(f"{troubled.sink_url}/metrics")
        return now if time.time() - now["jobttl_worker_last_heartbeat_timestamp_seconds"] > 8 else None

    after = wait_for(aged, timeout=20, what="the heartbeat to age")  # RQ heartbeats an idle worker every 5 s
    assert after["jobttl_workers"] == 1


def _registry(redis, queue: str):
    """A process's registry with the schedule's gauges, as the sink and the worker build it."""
    metrics = Metrics()
    gauges.register(metrics.registry, redis, queue)
    return metrics.registry
