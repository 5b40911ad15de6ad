#!/usr/bin/env bash
# Build deploy/docker/Dockerfile with buildah and check the image: it runs as uid 10001, and
# `agentrt controller serve` started in it answers /livez, /readyz and /metrics in front of an
# emulator started from the same image. By hand, not in CI (minutes with a fresh base image):
#
#   deploy/docker/check-image.sh                      # base: Debian bookworm by debootstrap
#   PYTHON_IMAGE=docker.io/library/python:3.12-slim-bookworm deploy/docker/check-image.sh
#
# Needs root, buildah and, without PYTHON_IMAGE, debootstrap (Debian packages of those names).
# Without a registry, the base is a minimal Debian bookworm with python3 and python3-venv, made
# by debootstrap from deb.debian.org and kept as localhost/agentrt-python-base:bookworm. Behind a
# TLS-intercepting proxy set PIP_CERT to its CA bundle: it is mounted into the build for pip.
set -euo pipefail
cd "$(dirname "$0")/../.."
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs} # vfs works inside containers without overlayfs
BASE=localhost/agentrt-python-base:bookworm
TAG=${TAG:-localhost/agentrt-controller:check}

if [[ -z ${PYTHON_IMAGE:-} ]]; then
  if ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
    echo "==> $BASE: debootstrap bookworm (minbase, python3, python3-venv)"
    rootfs=$(mktemp -d)
    debootstrap --variant=minbase --include=python3,python3-venv bookworm "$rootfs" \
      http://deb.debian.org/debian >/dev/null
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    ctr=$(buildah from scratch)
    cp -a "$rootfs"/. "$(buildah mount "$ctr")"/
    buildah umount "$ctr" >/dev/null
    buildah commit --quiet --rm "$ctr" "$BASE" >/dev/null
    rm -rf "$rootfs"
  fi
  PYTHON_IMAGE=$BASE
fi

echo "==> building $TAG on $PYTHON_IMAGE"
build=(--isolation chroot --network host --format docker --layers=false
       --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE")
if [[ -n ${PIP_CERT:-} ]]; then
  build+=(--build-arg PIP_CERT=/run/agentrt-build-ca.crt
          -v "$PIP_CERT:/run/agentrt-build-ca.crt:ro")
fi
previous=$(buildah images --quiet --no-trunc "$TAG" 2>/dev/null || true)
buildah bud --quiet "${build[@]}" -f deploy/docker/Dockerfile -t "$TAG" . >/dev/null
# A rebuild leaves the previous image untagged: remove it rather than let them pile up.
if [[ -n $previous && $previous != $(buildah images --quiet --no-trunc "$TAG") ]]; then
  buildah rmi "$previous" >/dev/null || true
fi

echo "==> checking $TAG"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
engine=$(buildah from "$TAG")
controller=$(buildah from "$TAG")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  buildah rm "$engine" "$controller" >/dev/null
}
trap cleanup EXIT
run=(buildah run --isolation chroot --network host)
[[ $(buildah inspect --format '{{.Docker.Config.User}}' "$TAG") == 10001:10001 ]] \
  || { echo "FAIL: the image's USER is not 10001:10001"; exit 1; }
[[ $("${run[@]}" "$controller" -- id -u) == 10001 ]] || { echo "FAIL: not uid 10001"; exit 1; }
engine_port=$(free_port)
controller_port=$(free_port)
"${run[@]}" "$engine" -- agentrt engine serve --port "$engine_port" >/dev/null 2>&1 &
pids+=($!)
"${run[@]}" "$controller" -- agentrt controller serve --port "$controller_port" \
  --backend "http://127.0.0.1:$engine_port,kind=emulator" >/dev/null 2>&1 &
pids+=($!)
url=http://127.0.0.1:$controller_port
for _ in $(seq 150); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' "$url/readyz") == 200 ]] && break
  sleep 0.2
done
[[ $(curl -s -o /dev/null -w '%{http_code}' "$url/livez") == 200 ]] || { echo "FAIL: /livez"; exit 1; }
[[ $(curl -s -o /dev/null -w '%{http_code}' "$url/readyz") == 200 ]] || { echo "FAIL: /readyz"; exit 1; }
curl -s "$url/metrics" | grep -q '^agentrt_build_info{component="controller"' \
  || { echo "FAIL: /metrics"; exit 1; }
echo "OK: $TAG runs as uid 10001; /livez, /readyz and /metrics answer in front of an emulator"
