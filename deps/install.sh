#!/bin/sh
# Installs, from Debian packages, everything eventd's build and tests need.
# Idempotent: when every package is already installed it only checks and exits.
set -eu

# clang and libclang-rt-14-dev: libFuzzer and the sanitizers for the fuzz targets (EVENTD_FUZZ=ON).
PACKAGES="build-essential cmake pkg-config libuv1-dev libyajl-dev libsodium-dev node-llhttp
python3 curl wrk nginx-light haproxy valgrind clang clang-format libclang-rt-14-dev"

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    echo "deps: all packages present"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    SUDO=""
    command -v sudo >/dev/null 2>&1 && SUDO="sudo"
    if [ -z "$SUDO" ]; then
        echo "deps: missing packages:$missing" >&2
        echo "deps: run as root (or install sudo): apt-get install -y$missing" >&2
        exit 1
    fi
else
    SUDO=""
fi

echo "deps: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
# nginx-light starts a daemon on install on some systems; the benchmarks run their own.
if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now nginx >/dev/null 2>&1 || true; fi
echo "deps: done"
