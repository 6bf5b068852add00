"""The Dockerfile and .dockerignore, checked as text.

No Docker engine runs on the machines this project is developed and tested on, and `make
test` builds no image (`make e2e` builds and runs it with podman): these tests parse the
Dockerfile instead and check the properties the image must have (slim base, dependencies in
their own cached layer, exactly the lock's, non-root user, no build tools in the final stage,
a HEALTHCHECK, a stop signal PID 1 answers, `jobttl` as the entry point), and that everything
the build copies is in the build context.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib
from dataclasses import dataclass, field

import pytest

from jobttl.cli import build_parser
from tests.deploy.manifests import REPO

DOCKERFILE = REPO / "Dockerfile"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
BUILD_TOOLS = re.compile(r"\b(apt-get|apt|apk|gcc|g\+\+|cc|make|build-essential|[a-z0-9]+-dev)\b")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) of a Dockerfile; enough of the syntax for ours."""
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            words = rest.split()
            words = [w for w in words if not w.startswith("--platform")]
            name = words[2] if len(words) > 2 and words[1].upper() == "AS" else None
            base = re.sub(r"\$\{(\w+)\}", lambda m: global_args.get(m.group(1), m.group(0)), words[0])
            stages.append(Stage(base, name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may come before the first FROM, not {keyword}"
            name, _, default = rest.partition("=")
            global_args[name] = default
        else:
            stages[-1].instructions.append((keyword, rest))
    return global_args, stages


def exec_form(rest: str) -> list[str] | None:
    try:
        value = json.loads(rest)
    except ValueError:
        return None
    return value if isinstance(value, list) else None


def copy_sources(rest: str) -> list[str]:
    words = [w for w in shlex.split(rest) if not w.startswith("--")]
    return words[:-1]


def problems(text: str) -> list[str]:
    """What is wrong with a Dockerfile, by the rules in this module's docstring."""
    found = []
    _, stages = parse(text)
    by_name = {s.name: s for s in stages}
    final = stages[-1]
    minimum = tuple(int(p) for p in re.findall(r"\d+", PYPROJECT["project"]["requires-python"])[:2])
    for stage in stages:
        match = re.fullmatch(r"python:(\d+)\.(\d+)(\.\d+)?-slim(-\w+)?(@sha256:[0-9a-f]{64})?", stage.base)
        if not match:
            found.append(f"stage {stage.name}: base {stage.base} is not a slim Python image")
        elif not match.group(5):
            found.append(f"stage {stage.name}: base {stage.base} is not pinned by digest (@sha256:...)")
        elif (int(match.group(1)), int(match.group(2))) < minimum:
            found.append(f"stage {stage.name}: Python older than {PYPROJECT['project']['requires-python']}")
    # Dependencies: a stage that sees pyproject.toml and the lock only, installed in a layer of
    # their own; exactly the lock's versions (--no-deps: pip resolves nothing), checked whole.
    deps = by_name.get("deps")
    if deps is None or sorted(src for rest in deps.all("COPY") for src in copy_sources(rest)) != [
        "pyproject.toml",
        "requirements.lock",
    ]:
        found.append("no `deps` stage copying pyproject.toml, requirements.lock and nothing else")
    elif not any(re.search(r"\bpip wheel\b.*--no-deps.*-r requirements\.lock", r) for r in deps.all("RUN")):
        found.append("the `deps` stage does not build exactly requirements.lock's wheels (--no-deps)")
    elif not any(re.search(r"\bpip wheel\b.*--require-hashes.*--only-binary :all:", r) for r in deps.all("RUN")):
        found.append("the `deps` stage downloads without the lock's hashes (--require-hashes, --only-binary :all:)")
    installs = final.all("RUN")
    if not any("from=deps" in r and "--no-index" in r and "--no-deps" in r for r in installs) or not any(
        "from=build" in r and "--no-deps" in r for r in installs
    ):
        found.append("the final stage does not install the deps and build wheels in separate offline steps")
    if not any("from=deps" in r and "--require-hashes" in r and "-r /wheels/requirements.lock" in r for r in installs):
        found.append("the final stage does not install requirements.lock with its hashes (--require-hashes)")
    if not any(re.search(r"\bpip check\b", r) for r in installs):
        found.append("the final stage does not `pip check` that the lock met every requirement")
    # Every package pyproject.toml ships is copied into the build stage.
    build = by_name.get("build")
    copied = {src.rstrip("/") for rest in (build.all("COPY") if build else []) for src in copy_sources(rest)}
    for folder in sorted(set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())):
        if folder not in copied:
            found.append(f"the build stage does not copy package {folder}")
    if PYPROJECT["project"]["readme"] not in copied:
        found.append("the build stage does not copy the readme pyproject.toml names")
    for license_file in PYPROJECT["project"].get("license-files", []):
        if license_file not in copied:
            found.append(f"the build stage does not copy {license_file}, which pyproject.toml's license-files names")
    # The final stage (and the dashboard): nothing compiled, nothing copied from the context.
    for stage in (final, by_name.get("dashboard")):
        if stage is None:
            continue
        for rest in stage.all("RUN"):
            if BUILD_TOOLS.search(rest):
                found.append(f"stage {stage.name}: build tools or a package manager: {rest[:60]}")
        if stage.all("COPY") or stage.all("ADD"):
            found.append(f"stage {stage.name}: copies files in; it should install wheels only")
        users = stage.all("USER")
        user = users[-1].split(":")[0] if users else "root"
        if not user.isdigit() or int(user) == 0:
            found.append(f"stage {stage.name}: runs as {user!r}, not a numeric non-root user")
        # PID 1 gets only the signals it handles: Python handles SIGINT, not SIGTERM (Dockerfile).
        stopsignals = stage.all("STOPSIGNAL")
        if not stopsignals or stopsignals[-1] not in ("SIGINT", "2"):
            found.append(f"stage {stage.name}: no STOPSIGNAL SIGINT (SIGTERM would go unanswered until SIGKILL)")
        healthchecks = stage.all("HEALTHCHECK")
        if not healthchecks or "CMD" not in healthchecks[-1].split() or healthchecks[-1].upper() == "NONE":
            found.append(f"stage {stage.name}: no HEALTHCHECK")
    entrypoints = final.all("ENTRYPOINT")
    if not entrypoints or exec_form(entrypoints[-1]) != ["jobttl"]:
        found.append('the final stage\'s ENTRYPOINT is not ["jobttl"]')
    if "jobttl" not in PYPROJECT["project"]["scripts"]:
        found.append("pyproject.toml has no `jobttl` console script")
    return found


def test_the_dockerfile_has_every_required_property():
    assert problems(DOCKERFILE.read_text()) == []


def test_the_final_stage_is_the_runtime_image_and_serves_the_sink_port():
    _, stages = parse(DOCKERFILE.read_text())
    final = stages[-1]
    assert final.name == "runtime"
    sink_port = build_parser().parse_args(["sink"]).port
    assert str(sink_port) in final.all("EXPOSE")
    assert f":{sink_port}/healthz" in final.all("HEALTHCHECK")[-1]


@pytest.mark.parametrize(
    "change, complaint",
    [
        (("USER 10001:10001", "USER root"), "not a numeric non-root user"),
        (
            ("ARG PYTHON_IMAGE=python:3.12-slim-bookworm", "ARG PYTHON_IMAGE=python:3.12-bookworm"),
            "not a slim Python image",
        ),
        (("ARG PYTHON_IMAGE=python:3.12-slim-bookworm", "ARG PYTHON_IMAGE=python:3.10-slim"), "Python older than"),
        (("WORKDIR /tmp", "RUN apt-get update && apt-get install -y gcc\nWORKDIR /tmp"), "build tools"),
        (('ENTRYPOINT ["jobttl"]', 'ENTRYPOINT ["python", "-m", "jobttl"]'), "ENTRYPOINT"),
        (("COPY pyproject.toml requirements.lock ./", "COPY . ./"), "`deps` stage"),
        (("COPY pyproject.toml requirements.lock ./", "COPY pyproject.toml ./"), "`deps` stage"),
        (("pip wheel --no-deps --require-hashes", "pip wheel --require-hashes"), "exactly requirements.lock"),
        (
            ("pip wheel --no-deps --require-hashes --only-binary :all:", "pip wheel --no-deps"),
            "without the lock's hashes",
        ),
        (
            (
                "--no-deps --require-hashes --only-binary :all: \\\n        --find-links",
                "--no-deps --only-binary :all: \\\n        --find-links",
            ),
            "with its hashes",
        ),
        (("@sha256:782412e85d0f0984994c290652577d4018aff08145c85b262bb63dc0c7522254", ""), "not pinned by digest"),
        ((" \\\n && pip check", ""), "pip check"),
        (("COPY watcher ./watcher\n", ""), "package watcher"),
        (("COPY pyproject.toml README.md LICENSE ./", "COPY pyproject.toml README.md ./"), "does not copy LICENSE"),
        (("WORKDIR /tmp", "COPY worker /app/worker\nWORKDIR /tmp"), "copies files in"),
        (("STOPSIGNAL SIGINT\n", ""), "stage runtime: no STOPSIGNAL SIGINT"),
        (("STOPSIGNAL SIGINT\n", "STOPSIGNAL SIGTERM\n"), "stage runtime: no STOPSIGNAL SIGINT"),
    ],
)
def test_the_checks_catch_a_broken_dockerfile(change, complaint):
    old, new = change
    text = DOCKERFILE.read_text()
    assert text.count(old) >= 1
    broken = text.replace(old, new) if old.startswith("ARG") else _replace_last(text, old, new)
    assert any(complaint in p for p in problems(broken)), problems(broken)


def test_a_missing_healthcheck_is_caught():
    text = DOCKERFILE.read_text()
    start = text.rindex("\nHEALTHCHECK ") + 1
    end = text.index("\n", text.index("CMD", start))  # the instruction's continuation line
    broken = text[:start] + text[end + 1 :]
    assert parse(broken)[1][-1].all("HEALTHCHECK") == []
    assert any("no HEALTHCHECK" in p for p in problems(broken))


def _replace_last(text: str, old: str, new: str) -> str:
    head, _, tail = text.rpartition(old)
    return head + new + tail


# --- the build context ------------------------------------------------------------------------


def dockerignore_patterns(text: str) -> list[tuple[bool, re.Pattern]]:
    patterns = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip("/"))
        regex = ""
        for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern):
            regex += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token, re.escape(token))
        patterns.append((negate, re.compile(regex)))
    return patterns


def ignored(path: str, patterns) -> bool:
    """BuildKit's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    result = False
    for negate, regex in patterns:
        if any(regex.fullmatch(c) for c in candidates):
            result = not negate
    return result


def context_files(source: str) -> list[str]:
    path = REPO / source
    if path.is_file():
        return [source]
    return [str(p.relative_to(REPO)) for p in sorted(path.rglob("*.py")) if "__pycache__" not in p.parts]


def test_everything_the_build_copies_is_in_the_build_context():
    patterns = dockerignore_patterns((REPO / ".dockerignore").read_text())
    _, stages = parse(DOCKERFILE.read_text())
    sources = [
        src for stage in stages for rest in stage.all("COPY") if "--from" not in rest for src in copy_sources(rest)
    ]
    assert sources
    for source in sources:
        files = context_files(source.rstrip("/"))
        assert files, f"COPY {source}: nothing there"
        assert not [f for f in files if ignored(f, patterns)], f"COPY {source}: excluded by .dockerignore"


@pytest.mark.parametrize(
    "path",
    [
        ".git/HEAD",
        ".venv/bin/python",
        "tests/conftest.py",
        ".run/kubeconfig",
        "jobttl.egg-info/PKG-INFO",
        "jobttl/__pycache__/cli.cpython-311.pyc",
        "knative/base/sink.yaml",
        "docker-compose.yml",
    ],
)
def test_the_build_context_leaves_out_what_the_image_does_not_need(path):
    assert ignored(path, dockerignore_patterns((REPO / ".dockerignore").read_text()))


def test_the_dockerignore_matcher_can_fail():
    patterns = dockerignore_patterns("**\n!jobttl/\n")
    assert not ignored("jobttl/cli.py", patterns) and ignored("sink/app.py", patterns)
