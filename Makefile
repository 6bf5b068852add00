# Two commands for a fresh machine:
#   make run    the whole service locally (Redis, emulator, sink, worker, watcher)
#   make test   the full test suite
#   make bench  the benchmark (bench/; not part of make test): jobttl against plain baselines
# Both create .venv and install what they need, including redis-server if it is missing.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: run test redis-server bench wrk

$(INSTALLED): pyproject.toml emulator/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]' -e ./emulator
	touch $@

redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "redis-server not found; installing it"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server; }

test: $(INSTALLED) redis-server
	$(PY) -m pytest

run: $(INSTALLED) redis-server
	$(PY) -m jobttl_emulator.localstack

wrk:
	@command -v wrk >/dev/null 2>&1 || { \
	  echo "wrk not found; installing it"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq wrk; }

# BENCH_ARGS, e.g. --quick, --rows sink,worker, --profile (see `python -m bench --help`).
bench: $(INSTALLED) redis-server wrk
	$(PY) -m pip install --quiet -r bench/requirements.txt
	$(PY) -m bench $(BENCH_ARGS)
