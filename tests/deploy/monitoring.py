"""Helpers for the monitoring kit's tests (knative/monitoring/): its rules, its dashboard, the
prometheus-operator objects' structure, and a real Prometheus process.

prometheus-operator's CRDs are not in the shared reference data, so the schemas below are
written by hand from its API (the CRDs of prometheus-operator v0.93,
example/prometheus-operator-crd/monitoring.coreos.com_{podmonitors,prometheusrules}.yaml):
only the fields the kit uses, or might plausibly use, are allowed, each with the CRD's type
and pattern, so a typo or a field in the wrong place fails as the API server's pruning would
silently hide it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.deploy.manifests import KNATIVE, OBJECT_META, load_yaml_documents
from tests.services import free_port, wait_for

MONITORING = KNATIVE / "monitoring"
RULES_TEST = MONITORING / "alerts.test.yaml"
RULES_FILE_NAME = "jobttl-rules.yaml"  # what alerts.test.yaml's rule_files names

# --- prometheus-operator's objects -------------------------------------------------------------

# The CRDs' pattern for a Prometheus duration.
DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"matchLabels": _STRINGS, "matchExpressions": {"type": "array"}},
}


def _operator_object(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": OBJECT_META,
            "spec": spec,
        },
    }


POD_METRICS_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "port": {"type": "string"},  # the pod's port *name*; a PodMonitor scrapes declared ports only
        "portNumber": {"type": "integer", "minimum": 1, "maximum": 65535},
        "path": {"type": "string"},
        "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
        "interval": DURATION,
        "scrapeTimeout": DURATION,
        "honorLabels": {"type": "boolean"},
        "relabelings": {"type": "array"},
        "metricRelabelings": {"type": "array"},
    },
}
SCHEMAS = {
    "PodMonitor": _operator_object(
        "PodMonitor",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "podMetricsEndpoints"],
            "properties": {
                "selector": _LABEL_SELECTOR,
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "jobLabel": {"type": "string"},
                "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                "podMetricsEndpoints": {"type": "array", "minItems": 1, "items": POD_METRICS_ENDPOINT},
            },
        },
    ),
    "PrometheusRule": _operator_object(
        "PrometheusRule",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": DURATION,
                            "limit": {"type": "integer"},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["expr"],
                                    # Exactly one of alert and record.
                                    "oneOf": [
                                        {"required": ["alert"], "not": {"required": ["record"]}},
                                        {"required": ["record"], "not": {"required": ["alert"]}},
                                    ],
                                    "properties": {
                                        "alert": {"type": "string"},
                                        "record": {"type": "string"},
                                        "expr": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                                        "for": DURATION,
                                        "keep_firing_for": {**DURATION, "minLength": 1},
                                        "labels": _STRINGS,
                                        "annotations": _STRINGS,
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    ),
}


# --- the kit's rules and dashboard -------------------------------------------------------------


def prometheus_rule() -> dict[str, Any]:
    [rule] = load_yaml_documents(MONITORING / "alerts.yaml")
    return rule


def alerts() -> list[dict[str, Any]]:
    return [r for group in prometheus_rule()["spec"]["groups"] for r in group["rules"] if "alert" in r]


def write_rules_file(directory: Path, groups: list[dict[str, Any]] | None = None) -> Path:
    """The PrometheusRule's groups as the plain rule file Prometheus and promtool read."""
    path = directory / RULES_FILE_NAME
    path.write_text(
        yaml.safe_dump(
            {"groups": groups if groups is not None else prometheus_rule()["spec"]["groups"]}, sort_keys=False
        )
    )
    return path


def dashboard() -> dict[str, Any]:
    return json.loads((MONITORING / "dashboard.json").read_text())


def dashboard_targets() -> list[tuple[str, dict[str, Any]]]:
    """(panel title, target) for every query of the dashboard."""
    return [(panel["title"], target) for panel in dashboard()["panels"] for target in panel.get("targets", [])]


# Grafana's own variables, as Grafana would expand them for a 1 s scrape interval (4 x 1 s,
# rounded up so that every window holds a few samples).
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1s"}


def as_prometheus_sees_it(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"a Grafana variable the tests cannot expand: {expr}"
    return expr


_SELECTOR = re.compile(r"\b(jobttl_[a-z0-9_]+)(\{[^}]*\})?")
_GROUPING = re.compile(r"\bby\s*\(([^)]*)\)")


def selectors(expr: str) -> list[str]:
    """The jobttl series selectors in an expression (enough PromQL for the kit's own expressions)."""
    return sorted({name + (matchers or "") for name, matchers in _SELECTOR.findall(expr)})


def grouping_labels(expr: str) -> set[str]:
    """The labels of the first (outermost) `by (...)`: what each series of the result must carry."""
    groups = _GROUPING.findall(expr)
    labels = {label.strip() for label in groups[0].split(",") if label.strip()} if groups else set()
    return labels - {"le"} if "histogram_quantile" in expr else labels  # the quantile consumes the buckets


# --- the Prometheus package -------------------------------------------------------------------


def prometheus_binary(name: str) -> str:
    """`prometheus` or `promtool`; `make test` installs Debian's prometheus package for them."""
    binary = shutil.which(name)
    if binary is None:
        pytest.fail(f"{name} is not installed; `make test` installs it (apt-get install -y prometheus)")
    return binary


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([prometheus_binary("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


class Prometheus:
    """A real prometheus process: its own port, storage in a temp dir, a 1 s scrape and evaluation."""

    def __init__(self, directory: Path, targets: dict[str, str], rule_files: list[Path]):
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = directory / "prometheus.yml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(p) for p in rule_files],
                    "scrape_configs": [
                        {"job_name": job, "static_configs": [{"targets": [address]}]}
                        for job, address in targets.items()
                    ],
                }
            )
        )
        self.log_path = directory / "prometheus.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> Prometheus:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [
                prometheus_binary("prometheus"),
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        wait_for(
            lambda: requests.get(f"{self.url}/-/ready", timeout=1).ok,
            timeout=20,
            what=f"prometheus on port {self.port} (log: {self.log_path})",
        )
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def api(self, path: str, **params: str) -> Any:
        response = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=5)
        body = response.json()
        assert body["status"] == "success", f"{path} {params}: {body.get('errorType')}: {body.get('error')}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's series (a scalar result as one series without labels)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def value(self, expr: str) -> float | None:
        """The single value of an expression, None when it returns nothing."""
        result = self.query(expr)
        assert len(result) <= 1, f"{expr}: {len(result)} series"
        return float(result[0]["value"][1]) if result else None

    def active_alerts(self) -> dict[str, str]:
        """alertname -> state (pending or firing)."""
        return {a["labels"]["alertname"]: a["state"] for a in self.api("alerts")["alerts"]}
