"""The chart's watch mode (no Knative), run: a finished TFJob is deleted at its TTL, and the
chart's `helm test` pod reports the release (and fails on a Redis it cannot use).

There is no kubelet here, so this test plays one: the pre-install hook Job (the Redis password,
made in the API emulator), then each rendered workload (the bundled Redis StatefulSet, the sink,
worker and watcher Deployments) runs as a local process with exactly the container's arguments
and environment, `$(VAR)` references expanded and Secrets read from the API server, as
Kubernetes would. What a pod has that this machine does not is stood in for,
and only that:
- a pod's own network: each listening port is a free local one (the sink's `--port`, the
  worker's metrics port, Redis's), and the Services' DNS names lead to them;
- volumes: the rendered ConfigMap's files in a directory, emptyDirs as directories;
- the service account token: a kubeconfig for the API emulator, given only to the pods whose
  account the chart lets mount one (not the sink's);
- Redis's image entrypoint: `redis-server` with the container's arguments.
The worker is declared ready by running the chart's own startup probe.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib
import requests
from kubernetes import client, config

pytest.importorskip("helm_python", reason="helm-python-sdk (the test extras) is not installed")

from jobttl.core.domain.kinds.registry import ALL_KINDS, BATCH_JOB, MPIJOB_V2BETA1, WORKFLOW
from jobttl_emulator import CONFIG_MAP, EVENT, JOB, Resource
from tests.deploy.chart import NAMESPACE, HookJobs, find, render
from tests.deploy.manifests import ENV_REFERENCE, pod_spec
from tests.fixtures import finished_status, running_status, tfjob
from tests.services import ROOT, JobttlProcess, free_port, start_emulator, wait_for

TTL = 3
VALUES = {"intake": {"mode": "watch"}}  # everything else: the chart's defaults, the first-run review on


def served_kinds():
    """Every kind the chart's default `kinds` value names, as its CRD (or batch/v1) serves it."""
    return tuple(
        JOB if k is BATCH_JOB else Resource(k.group, k.version, k.kind, k.plural, status_subresource=k is not WORKFLOW)
        for k in ALL_KINDS
        if k is not MPIJOB_V2BETA1
    )


class Kubelet:
    """Runs rendered containers as local processes (see the module docstring)."""

    def __init__(self, objects: list[dict[str, Any]], directory: Path, kubeconfig: Path):
        self.objects = objects
        self.directory = directory
        self.kubeconfig = kubeconfig
        self.addresses: dict[str, str] = {}  # "host:port" as the cluster names it -> "127.0.0.1:port"

    def expose(self, service: str, local_port: int) -> None:
        """The Service's names, short and qualified, at its port, lead to local_port."""
        svc = find(self.objects, "Service", service)
        port = svc["spec"]["ports"][0]["port"]
        for host in (f"{service}.{NAMESPACE}.svc", service):
            self.addresses[f"{host}:{port}"] = f"127.0.0.1:{local_port}"
            if port == 80:
                self.addresses[f"http://{host}"] = f"http://127.0.0.1:{local_port}"

    def _network(self, text: str) -> str:
        for name in sorted(self.addresses, key=len, reverse=True):
            text = re.sub(re.escape(name) + r"(?![\w.-])", self.addresses[name], text)
        return text

    def _secret(self, ref: dict[str, str]) -> str:
        """From the API server, where the chart's password Job made it (the chart renders none)."""
        api = client.CoreV1Api(config.new_client_from_config(str(self.kubeconfig)))
        return base64.b64decode(api.read_namespaced_secret(ref["name"], NAMESPACE).data[ref["key"]]).decode()

    def _mounts(self, workload: dict[str, Any], container: dict[str, Any], name: str) -> dict[str, str]:
        volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
        # A StatefulSet's claims: a directory of its own stands in for the PersistentVolume.
        volumes.update(
            {c["metadata"]["name"]: {"emptyDir": {}} for c in workload["spec"].get("volumeClaimTemplates", [])}
        )
        paths = {}
        for mount in container.get("volumeMounts", []):
            local = self.directory / name / mount["name"]
            local.mkdir(parents=True, exist_ok=True)
            volume = volumes[mount["name"]]
            if "configMap" in volume:
                for key, text in find(self.objects, "ConfigMap", volume["configMap"]["name"])["data"].items():
                    (local / key).write_text(text)
            else:
                assert "emptyDir" in volume, f"{name}: volume {volume} has no local stand-in"
            paths[mount["mountPath"]] = str(local)
        return paths

    def container(self, workload: dict[str, Any], name: str) -> tuple[list[str], dict[str, str]]:
        """The container's args and environment, as Kubernetes would give them, made local."""
        spec = pod_spec(workload)
        [container] = spec["containers"]
        mounts = self._mounts(workload, container, name)

        def local(text: str) -> str:
            for path, directory in sorted(mounts.items(), key=lambda m: len(m[0]), reverse=True):
                if text == path or text.startswith(path + "/"):
                    return directory + text[len(path) :]
            return self._network(text)

        env: dict[str, str] = {}
        for entry in container.get("env", []):
            if "value" in entry:
                value = ENV_REFERENCE.sub(lambda m: env.get(m[1], m[0]), entry["value"])
            else:
                value = self._secret(entry["valueFrom"]["secretKeyRef"])
            env[entry["name"]] = local(value)
        args = [local(ENV_REFERENCE.sub(lambda m: env.get(m[1], m[0]), arg)) for arg in container.get("args", [])]
        if spec.get("automountServiceAccountToken", True) is not False:
            env["KUBECONFIG"] = str(self.kubeconfig)  # the service account's token, for the emulator
        return args, env


def replace_arg(args: list[str], flag: str, value: str) -> list[str]:
    index = args.index(flag)
    return args[: index + 1] + [value] + args[index + 2 :]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("chart-run")
    objects = render(VALUES)
    secrets = Resource("", "v1", "Secret", "secrets", status_subresource=False, builtin=True)
    emulator = start_emulator(tmp_path, (*served_kinds(), EVENT, CONFIG_MAP, secrets), gc_delay=0.1)
    kubelet = Kubelet(objects, tmp_path / "pods", emulator.kubeconfig)
    processes: list[Any] = []
    try:
        # Before anything starts, as Helm runs its pre-install hook: the Job making Redis's password.
        done = HookJobs(emulator).run(find(objects, "Job", "jobttl-redis-init"))
        assert done.returncode == 0, done.stdout + done.stderr
        # Redis: the StatefulSet's container, its arguments to redis-server (the image's entrypoint).
        redis_port = free_port()
        args, _ = kubelet.container(find(objects, "StatefulSet", "jobttl-redis"), "redis")
        redis_server = subprocess.Popen(
            [shutil.which("redis-server"), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", *args],
            stdout=subprocess.DEVNULL,
        )
        processes.append(redis_server)
        kubelet.expose("jobttl-redis", redis_port)

        sink_port = free_port()
        args, env = kubelet.container(find(objects, "Deployment", "jobttl-sink"), "sink")
        args = replace_arg(replace_arg(args, "--port", str(sink_port)), "--host", "127.0.0.1")
        assert "KUBECONFIG" not in env  # the sink's account mounts no token: it never calls the API
        sink = JobttlProcess(args, env, tmp_path, "sink").start()
        processes.append(sink)
        kubelet.expose("jobttl-sink", sink_port)

        worker_deployment = find(objects, "Deployment", "jobttl-worker")
        args, worker_env = kubelet.container(worker_deployment, "worker")
        worker_env["JOBTTL_WORKER_METRICS_PORT"] = str(free_port())  # the pod's own port 9090
        worker = JobttlProcess(args, worker_env, tmp_path, "worker").start()
        processes.append(worker)

        args, env = kubelet.container(find(objects, "Deployment", "jobttl-watcher"), "watcher")
        watcher = JobttlProcess(args, env, tmp_path, "watcher").start()
        processes.append(watcher)

        # Ready as the chart's probes say: the sink's readinessProbe, the worker's startupProbe.
        readiness = pod_spec(find(objects, "Deployment", "jobttl-sink"))["containers"][0]["readinessProbe"]["httpGet"]
        wait_for(
            lambda: requests.get(f"http://127.0.0.1:{sink_port}{readiness['path']}", timeout=1).ok,
            timeout=30,
            what=f"the sink's readiness ({sink.log()})",
        )
        probe = pod_spec(worker_deployment)["containers"][0]["startupProbe"]["exec"]["command"]
        assert probe[0] == "python"  # the image's; here this interpreter, which has jobttl installed
        wait_for(
            lambda: (
                subprocess.run(
                    [sys.executable, *probe[1:]],
                    env={**os.environ, **worker_env},
                    cwd=ROOT,
                    capture_output=True,
                    timeout=20,
                ).returncode
                == 0
            ),
            timeout=30,
            interval=0.5,
            what=f"the worker's startup probe ({worker.log()})",
        )
        password = kubelet._secret({"name": "jobttl-redis", "key": "password"})
        yield (
            emulator,
            redis_lib.Redis(port=redis_port, password=password),
            {"sink": sink, "worker": worker, "watcher": watcher},
            kubelet,
        )
    finally:
        for process in reversed(processes):
            if isinstance(process, JobttlProcess):
                process.stop()
            else:
                process.terminate()
                process.wait(timeout=10)
        emulator.stop()


def test_the_rendered_watch_mode_deletes_a_finished_tfjob_at_its_ttl(stack):
    emulator, redis, logs, kubelet = stack
    api = client.CustomObjectsApi(config.new_client_from_config(str(emulator.kubeconfig)))
    core = client.CoreV1Api(api.api_client)
    # The worker's first resync recorded the install (the first-run review is on): what finishes
    # from now on is not held.
    wait_for(
        lambda: core.read_namespaced_config_map("jobttl-install", NAMESPACE),
        timeout=20,
        interval=0.2,
        what=f"the install record ({logs['worker'].log()})",
    )
    # Redis runs with the rendered settings: the generated password (nothing without it), AOF, the listpack size.
    with pytest.raises(redis_lib.AuthenticationError):
        redis_lib.Redis(port=redis.connection_pool.connection_kwargs["port"]).ping()
    assert redis.config_get("appendonly") == {"appendonly": "yes"}
    assert redis.config_get("hash-max-listpack-value") == {"hash-max-listpack-value": "512"}

    group, version, plural = "kubeflow.org", "v1", "tfjobs"
    api.create_namespaced_custom_object(group, version, "team-a", plural, tfjob("train", "team-a", ttl=TTL))
    api.patch_namespaced_custom_object_status(
        group, version, "team-a", plural, "train", {"status": running_status(time.time())}
    )
    finished = time.time()
    api.patch_namespaced_custom_object_status(
        group, version, "team-a", plural, "train", {"status": finished_status(finished)}
    )

    def gone() -> bool:
        try:
            api.get_namespaced_custom_object(group, version, "team-a", plural, "train")
            return False
        except client.ApiException as exc:
            return exc.status == 404

    wait_for(
        gone,
        timeout=TTL + 20,
        interval=0.1,
        what=f"the TFJob's deletion\n{logs['watcher'].log()}\n{logs['sink'].log()}\n{logs['worker'].log()}",
    )
    # Not before its TTL (whole seconds: the finish time is read to the second).
    assert time.time() - finished >= TTL - 1
    # ... booked by the sink from the watcher's event (the worker's only resync ran before the job
    # existed), deleted by the worker.
    assert [
        line
        for line in logs["sink"].log().splitlines()
        if '"event": "scheduled", "by": "event"' in line and '"name": "train"' in line
    ]
    assert [
        line
        for line in logs["worker"].log().splitlines()
        if '"event": "delete-requested"' in line and '"name": "train"' in line
    ]


def helm_test(kubelet) -> subprocess.CompletedProcess:
    """The chart's `helm test` pod, run as its kubelet would: `jobttl status` with its settings."""
    pod = find(kubelet.objects, "Pod", "jobttl-test-status")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    args, env = kubelet.container(pod, "test")
    assert "KUBECONFIG" not in env  # no token: operator commands read Redis only
    return subprocess.run(
        [sys.executable, "-m", "jobttl", *args],
        env={"PATH": os.environ["PATH"], **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_helm_test_pod_reports_the_release_and_fails_on_a_redis_it_cannot_use(stack):
    emulator, redis, logs, kubelet = stack
    done = helm_test(kubelet)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Redis" in done.stdout and "worker" in done.stdout.lower()
    # The same pod where Redis has another password: it fails, naming the Redis it could not use.
    password = redis.connection_pool.connection_kwargs["password"]
    redis.config_set("requirepass", "another-one")
    try:
        done = helm_test(kubelet)
    finally:
        redis_lib.Redis(port=redis.connection_pool.connection_kwargs["port"], password="another-one").config_set(
            "requirepass", password
        )
    assert done.returncode != 0 and "Redis refused the credentials" in done.stderr, done.stdout + done.stderr
