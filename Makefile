# Two commands for a fresh machine:
#   make run    the whole service locally (Redis, emulator, sink, worker, watcher); it writes
#               .run/env: `. .run/env` (or `make shell`) in another terminal, then `jobttl status`
#               (`make run RUN_ARGS=--all-kinds` seeds one finished object of every built-in kind)
#   make test   ruff and mypy (make lint), then the test suite, but for the tests marked slow (CI runs
#               it, via .ci/run)
#   make lint   ruff's checks, ruff's format check and mypy (configured in pyproject.toml); `make format`
#               formats the tree as the check wants it
#   make bench  the benchmark (bench/; not part of make test): jobttl against plain baselines
#   make e2e    the tests marked slow (RQ's recovery timings, a worker's clock stepping 30 days,
#               the rest of the sink fuzzer's 10,400 cases: about 3 minutes), then the image built
#               and run with podman + runc, the compose stack deleting a TFJob (tests/e2e_image/:
#               root, podman, about 4-6 minutes more)
#   make lock   rewrite requirements.lock (the image's exact dependencies, hashed) from pyproject.toml
#   make image  the image, IMAGE:VERSION (ghcr.io/jobttl/jobttl:<pyproject.toml's version>), with docker
#               buildx or podman: `make image IMAGE=registry.example.com/jobttl/jobttl PUSH=1` puts it
#               in your registry; PLATFORMS=linux/amd64,linux/arm64 builds both
#   make chart  the chart's generated parts written, then the chart packaged by Helm's SDK:
#               dist/jobttl-<version>.tgz (the release workflow pushes it to an OCI registry)
#   make knative  rewrite knative/'s generated Kustomize manifests from the Helm chart (charts/jobttl/)
#               and knative/values/: run it after changing either (tests/deploy/test_knative.py fails
#               until you do)
# Each creates .venv and installs what it needs, including redis-server if it is missing
# (and, for the monitoring kit's tests, Debian's prometheus package: prometheus and promtool).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# `make run` installs what running needs; `make test` adds the test extras (Helm's SDK, schemathesis,
# moto, ...: several hundred MB more).
RUN_INSTALLED := $(VENV)/.installed-run
INSTALLED := $(VENV)/.installed
# Editable installs in setuptools' lenient mode (its default, named because it is chosen): an import
# hook maps jobttl.core to core/ and so on (pyproject.toml's package-dir), so each module runs from
# its one file in the repository and a new module needs no reinstall. What the hook maps changes
# only with pyproject.toml, which the targets below depend on: make reinstalls then. Strict mode
# would import a tree of links under build/ instead (a second path per file, a reinstall per new
# file), hidden by the root's jobttl/ wherever the root is on the path: docs/development.md.
EDITABLE := --config-settings editable_mode=lenient

.PHONY: run shell test lint format redis-server prometheus chromium axe-core screenshots bench wrk podman e2e lock knative image chart

$(RUN_INSTALLED): pyproject.toml emulator/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(EDITABLE) -e . -e ./emulator
	touch $@

$(INSTALLED): $(RUN_INSTALLED) pyproject.toml emulator/pyproject.toml
	$(PY) -m pip install --quiet $(EDITABLE) -e '.[test]' -e ./emulator
	touch $@

redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "redis-server not found; installing it"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server; }

prometheus:
	@{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || { \
	  echo "prometheus/promtool not found; installing Debian's prometheus package"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }

# The console's browser tests (tests/console/test_browser.py): Debian's Chromium and its driver (no
# browser download), and axe-core from npm into a git-ignored folder, injected into each page.
chromium:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || { \
	  echo "chromium/chromedriver not found; installing Debian's chromium and chromium-driver"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver; }

AXE := .tools/node_modules/axe-core/axe.min.js
$(AXE):
	mkdir -p .tools && npm install --silent --no-audit --no-fund --prefix .tools axe-core@4

axe-core: $(AXE)

# The console's screenshots in docs/console/, taken by its browser tests against a real stack.
screenshots: $(INSTALLED) redis-server chromium axe-core
	JOBTTL_SCREENSHOTS=docs/console $(PY) -m pytest tests/console/test_browser.py -q

# Two processes, each taking whole files (module fixtures stay shared): about half the time of
# one. `.venv/bin/python -m pytest tests/...` runs a part in one process, for debugging (marked
# slow or not). Tests marked slow wait minutes on real timeouts (or send thousands of cases, of
# which make test sends a smaller set covering every case): make e2e runs them, to keep CI's run
# inside its 15 minutes.
test: $(INSTALLED) redis-server prometheus chromium axe-core lint
	$(PY) -m pytest -n 2 --dist loadfile -m "not slow"

# mypy finds a module by its path, folders named as the module's packages; the build maps ours instead
# (package-dir in pyproject.toml: jobttl.core is core/, ...), which an editable install's import hook
# follows and mypy does not. So mypy reads a tree of links named as the namespace ships, made from that
# mapping each run (git-ignored), from inside it: it reports jobttl/core/... for core/..., and so on.
MYPY_TREE := .cache/mypy-tree
define MYPY_TREE_PY
import pathlib, shutil, tomllib
tree = pathlib.Path("$(MYPY_TREE)")
shutil.rmtree(tree, ignore_errors=True)
mapped = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
for package, folder in mapped.items():
    source, target = pathlib.Path(folder).resolve(), tree.joinpath(*package.split("."))
    target.parent.mkdir(parents=True, exist_ok=True)
    if "." in package:
        target.symlink_to(source, target_is_directory=True)
        continue
    target.mkdir()  # the top package: its own files, not the folders mapped beneath it
    beneath = {p.removeprefix(package + ".") for p in mapped if p.startswith(package + ".")}
    for entry in source.iterdir():
        if entry.name not in beneath and not entry.is_symlink():
            (target / entry.name).symlink_to(entry.resolve())
endef
export MYPY_TREE_PY

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -c "$$MYPY_TREE_PY"
	cd $(MYPY_TREE) && $(abspath $(VENV))/bin/mypy --config-file $(CURDIR)/pyproject.toml --cache-dir $(CURDIR)/.cache/mypy

# The tree formatted as `make lint` checks it. Then `make lint`: a `# noqa` the formatter moved off the
# line it speaks for shows as unused (RUF100), and goes back to that line by hand.
format: $(INSTALLED)
	$(VENV)/bin/ruff format .

run: $(RUN_INSTALLED) redis-server
	$(PY) -m jobttl_emulator.localstack $(RUN_ARGS)

# A shell with the environment `make run` (in another terminal) started: jobttl and kubectl
# reach that stack. The same as `. .run/env` in the shell you have.
shell:
	@test -f .run/env || { echo "make run is not running here (no .run/env)" >&2; exit 1; }
	@. ./.run/env && echo "jobttl: $$JOBTTL_REDIS_URL, kubectl: $$KUBECONFIG (exit to leave)" && exec $${SHELL:-/bin/sh}

wrk:
	@command -v wrk >/dev/null 2>&1 || { \
	  echo "wrk not found; installing it"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq wrk; }

# BENCH_ARGS, e.g. --quick, --rows sink,worker, --profile (see `python -m bench --help`).
bench: $(INSTALLED) redis-server wrk
	$(PY) -m pip install --quiet -r bench/requirements.txt
	$(PY) -m bench $(BENCH_ARGS)

# Debian's podman (4.3), runc and debootstrap: `make e2e` builds and runs the image with them.
podman:
	@{ command -v podman && command -v runc && command -v debootstrap; } >/dev/null 2>&1 || { \
	  echo "podman/runc/debootstrap not found; installing Debian's"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap; }

# First the tests make test leaves out (marked slow; pyproject.toml), then the image: no Docker
# engine needed, a debootstrapped Debian base (cached in .cache/e2e/), podman's builder, the
# Docker Compose v2 CLI through `podman system service`. The image part needs root.
e2e: $(INSTALLED) redis-server prometheus podman chromium axe-core
	$(PY) -m pytest -n 2 --dist loadfile -m slow
	$(PY) -m tests.e2e_image.run

lock: $(INSTALLED)
	$(PY) -m tools.lock

# Helm's own engine (helm-python-sdk, a test extra) renders the chart; tools/knative.py says what
# it writes and why (`--check`: name what differs, write nothing).
knative: $(INSTALLED)
	$(PY) -m tools.chart
	$(PY) -m tools.knative

VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
IMAGE ?= ghcr.io/jobttl/jobttl
# PLATFORMS: e.g. linux/amd64,linux/arm64 (buildx needs QEMU or native builders for the others).
# PUSH=1: push the image (or, for several platforms, its manifest list) to IMAGE's registry.
# PYTHON_IMAGE: another base, e.g. a mirror of python:3.12-slim-bookworm (Dockerfile).
PLATFORMS ?=
PUSH ?=
PYTHON_IMAGE ?=
BUILD_ARGS = --target runtime --build-arg VERSION=$(VERSION) \
	--build-arg REVISION=$$(git rev-parse HEAD 2>/dev/null) $(if $(PYTHON_IMAGE),--build-arg PYTHON_IMAGE=$(PYTHON_IMAGE))

image:
	@if command -v docker >/dev/null 2>&1 && docker buildx version >/dev/null 2>&1; then \
	  docker buildx build $(BUILD_ARGS) $(if $(PLATFORMS),--platform $(PLATFORMS)) \
	    -t $(IMAGE):$(VERSION) $(if $(PUSH),--push,$(if $(PLATFORMS),,--load)) . ; \
	elif command -v podman >/dev/null 2>&1; then \
	  podman build $(BUILD_ARGS) $(if $(PLATFORMS),--platform $(PLATFORMS) --manifest,-t) $(IMAGE):$(VERSION) . && \
	  $(if $(PUSH),podman $(if $(PLATFORMS),manifest push --all,push) $(IMAGE):$(VERSION),true) ; \
	else \
	  echo "make image: needs docker with buildx, or podman (apt-get install podman)" >&2; exit 1; \
	fi
	@echo "$(IMAGE):$(VERSION)$(if $(PUSH), pushed)"

chart: $(INSTALLED)
	$(PY) -m tools.chart --package dist
