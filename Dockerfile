# syntax=docker/dockerfile:1
# One image for every jobttl process: the sink, the worker, `jobttl watch`, the operator commands.
#   make image        (docker build -t ghcr.io/jobttl/jobttl:<version> ., the version pyproject.toml says)
#   docker run --rm ghcr.io/jobttl/jobttl:<version> worker
# `--target dashboard` builds rq-dashboard against the same RQ version (docker-compose.yml).
# Needs BuildKit (the default builder since Docker 23) for RUN --mount; podman/buildah build it
# too (`make e2e`, with a local Debian base in place of the registry's: PYTHON_IMAGE below).
# The dependencies installed are exactly requirements.lock's (`make lock` regenerates it): only
# wheels whose SHA-256 the lock holds (--require-hashes), nothing built from source.

# The base, pinned by digest (the index of every platform's image), so that a rebuild of the same
# commit starts from the same bytes. To move to a newer python:3.12-slim-bookworm: take its digest
# (`docker buildx imagetools inspect python:3.12-slim-bookworm`, or `crane digest ...`) and put it
# here; Dependabot (.github/dependabot.yml) proposes it weekly. docs/deploying.md says more.
ARG PYTHON_IMAGE=python:3.12-slim-bookworm@sha256:782412e85d0f0984994c290652577d4018aff08145c85b262bb63dc0c7522254

# --- deps: wheels of the pinned dependencies, from requirements.lock alone ------------------
# This stage sees nothing but pyproject.toml and the lock, so it (and the layer installing its
# wheels in the final image) is rebuilt only when they change, not on every code change.
# --no-deps: the lock is the whole set, every transitive dependency at its pinned version; pip
# resolves nothing here, and the final stage's `pip check` fails the build if the lock misses one.
# --require-hashes: each file downloaded must have a hash the lock holds (a package replaced on the
# index, or a mirror serving another file, stops the build); --only-binary: nothing built here.
FROM ${PYTHON_IMAGE} AS deps
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml requirements.lock ./
RUN pip wheel --no-deps --require-hashes --only-binary :all: --wheel-dir /wheels -r requirements.lock \
 && cp requirements.lock /wheels/ \
 && sed -e '/--hash=/d' -e 's/ *\\$//' requirements.lock > /wheels/constraints.txt

# --- build: the jobttl wheel -----------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY jobttl ./jobttl
COPY core ./core
COPY sink ./sink
COPY worker ./worker
COPY watcher ./watcher
COPY notifier ./notifier
COPY console ./console
RUN pip wheel --no-deps --wheel-dir /wheels .

# --- dashboard: rq-dashboard for docker-compose.yml, with jobttl's own RQ wheel --------------
FROM ${PYTHON_IMAGE} AS dashboard
ARG RQ_DASHBOARD_VERSION=0.9.0
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# six: rq-dashboard 0.9.0 imports it without declaring it. What it shares with jobttl (RQ,
# redis-py, Flask, ...) is held at requirements.lock's versions.
RUN --mount=type=bind,from=deps,source=/wheels,target=/wheels \
    pip install --no-cache-dir --find-links /wheels --constraint /wheels/constraints.txt \
        "rq-dashboard==${RQ_DASHBOARD_VERSION}" six /wheels/rq-[0-9]*.whl \
 && groupadd --system --gid 10001 dashboard \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin dashboard
USER 10001:10001
EXPOSE 9181
# SIGINT, not SIGTERM: see the runtime stage.
STOPSIGNAL SIGINT
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9181/', timeout=4)"]
ENTRYPOINT ["rq-dashboard"]
CMD ["--json"]

# --- runtime: the jobttl image (the default target) ------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
# VERSION and REVISION: make image and the release workflow pass pyproject.toml's version and the commit.
ARG VERSION=""
ARG REVISION=""
LABEL org.opencontainers.image.title="jobttl" \
      org.opencontainers.image.description="Deletes finished Kubernetes training jobs a time-to-live after they finish." \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/jobttl/jobttl" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 jobttl \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin jobttl
# Dependencies, then jobttl: two layers, so a code change rebuilds only the small second one.
# The wheels are bind-mounted from the build stages, never copied into a layer; the lock's hashes
# are checked again as they are installed.
RUN --mount=type=bind,from=deps,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --no-deps --require-hashes --only-binary :all: \
        --find-links /wheels -r /wheels/requirements.lock
# pip check: every requirement of jobttl and of each locked package is met by the lock.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --no-deps /wheels/*.whl \
 && pip check
# A numeric user, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080
# The signal `docker stop`, Compose and Kubernetes' container runtimes (containerd, CRI-O) send
# first. The process is PID 1 in its container, and the kernel gives PID 1 only the signals it
# handles: the sink (waitress) and `jobttl watch` handle none but Python's own SIGINT, so they
# ignored SIGTERM and were killed at the end of the grace period (measured: 60 s of 60 s, exit
# 137). On SIGINT they stop in about a second; RQ's worker takes either as its warm shutdown
# (the deletion in progress finishes).
STOPSIGNAL SIGINT
# The sink's health endpoint. For other commands point JOBTTL_HEALTHCHECK_URL elsewhere or
# override the healthcheck (docker-compose.yml does). Kubernetes ignores HEALTHCHECK and uses
# the probes in knative/.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('JOBTTL_HEALTHCHECK_URL', 'http://127.0.0.1:8080/healthz'), timeout=4)"]
ENTRYPOINT ["jobttl"]
CMD ["--help"]
