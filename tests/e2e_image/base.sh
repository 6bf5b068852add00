#!/bin/sh
# The stand-in for python:3.12-slim-bookworm where registry images cannot be pulled: a minimal
# Debian bookworm (debootstrap) with Debian's python3 (3.11, what jobttl requires at least),
# imported into podman as localhost/jobttl-base:bookworm. Like the official image it offers
# `python` and `pip` in /usr/local/bin: a venv at /usr/local, so the Dockerfile's stages run
# unchanged with --build-arg PYTHON_IMAGE=localhost/jobttl-base:bookworm.
# The root filesystem tarball is cached in .cache/e2e/ (gitignored): a rerun only imports it.
#   tests/e2e_image/base.sh [IMAGE]
set -eu
IMAGE=${1:-localhost/jobttl-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${E2E_CACHE:-.cache/e2e}
TARBALL=$CACHE/base-bookworm.tar

if podman image exists "$IMAGE"; then
    echo "base: $IMAGE present"
    exit 0
fi
mkdir -p "$CACHE"
if [ ! -f "$TARBALL" ]; then
    command -v debootstrap >/dev/null || { echo "base: debootstrap missing (apt-get install debootstrap)" >&2; exit 1; }
    ROOT=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    trap 'rm -rf "$ROOT"' EXIT
    echo "base: debootstrap bookworm into $ROOT (a few minutes, once)"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$ROOT" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
        || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
    # python and pip where the official image has them. --copies: the venv's python is a file
    # of its own, not a link to /usr/bin/python3 (same interpreter, same stdlib).
    chroot "$ROOT" /usr/bin/python3 -m venv /usr/local
    # The host's CA bundle: pip inside a build goes through whatever TLS inspection the host's
    # network does, which the host's bundle trusts and Debian's stock one may not.
    cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$ROOT/etc/pip.conf"
    rm -rf "$ROOT"/var/cache/apt/* "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* \
           "$ROOT"/usr/share/locale/* "$ROOT"/var/log/*
    tar --numeric-owner -C "$ROOT" -cf "$TARBALL.tmp" . && mv "$TARBALL.tmp" "$TARBALL"
fi
podman import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    "$TARBALL" "$IMAGE" >/dev/null
echo "base: imported $IMAGE from $TARBALL"
