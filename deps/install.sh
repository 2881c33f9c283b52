#!/bin/sh
# Installs, from Debian packages, what eventd needs:
#   deps/install.sh --runtime   to build and run the service (README's first command)
#   deps/install.sh [--test]    that, plus everything tests/run-all.sh uses (the default)
# Idempotent: when every package is already installed it only checks and exits.
set -eu

usage() { echo "usage: $0 [--runtime | --test]" >&2; exit 2; }
MODE="test"
case $# in
0) ;;
1) case $1 in --runtime) MODE=runtime ;; --test) MODE="test" ;; *) usage ;; esac ;;
*) usage ;;
esac

# Build and run: the compiler, CMake, and the libraries eventd links (llhttp is
# compiled in from node-llhttp's sources).
RUNTIME="build-essential cmake pkg-config libuv1-dev libyajl-dev libsodium-dev node-llhttp"
# Tests (tests/run-all.sh): python3 for the black-box suites; curl, wrk, nginx-light
# and haproxy for the benchmarks and the load-balancer smoke test; valgrind for the
# memcheck suite and the instruction-count guard (callgrind, vgdb); clang and
# libclang-rt-14-dev for libFuzzer and the sanitizers (EVENTD_FUZZ=ON); clang-format for the formatting check; podman, runc, netavark,
# iptables and debootstrap (+ the archive keyring) for tests/docker/run.sh, which
# builds and runs docker/Dockerfile without a Docker engine; chromium and nodejs for
# the browser test (tests/browser: headless Chromium driven by playwright-core from npm)
# and the OpenAPI lint (tests/openapi: Redocly CLI from npm);
# redis-server and redis-tools for tests/bench/sync_compare.sh (Redis with appendfsync
# always, the anchor of issue 11), and liburing-dev for the io_uring variant that script
# builds from the experiment commit (eventd itself does not link it); strace for the
# admin-socket test (test_admin_reach.py holds every chmod up with its fault injection)
# and tests/bench/syscalls.py.
TEST="git python3 curl wrk nginx-light haproxy valgrind clang clang-format libclang-rt-14-dev
podman runc netavark iptables debootstrap debian-archive-keyring chromium nodejs
redis-server redis-tools liburing-dev strace"
# Debian's npm only where no npm is installed: a nodejs package that bundles its own
# npm (as some machines have) conflicts with Debian's.
command -v npm >/dev/null 2>&1 || TEST="$TEST npm"

PACKAGES=$RUNTIME
[ "$MODE" = test ] && PACKAGES="$RUNTIME $TEST"

# The browser test's playwright-core, pinned by tests/browser/package-lock.json, and the
# OpenAPI lint's Redocly CLI, pinned by tests/openapi/package-lock.json. Their locks ask
# for Node.js 20.19 or later (Redocly: 20.19+ or 22.12+); Debian 12's own nodejs is 18,
# which npm ci only warns about: say so here, before a test fails on it.
npm_step() {
    [ "$MODE" = test ] || return 0
    if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number);
                  process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)'; then
        echo "deps: warning: Node.js $(node --version) is older than 20.19, which the pinned" \
            "@redocly/cli and playwright-core need (install Node.js 20.19+ or 22.12+)" >&2
    fi
    "$(dirname "$0")/../tests/browser/install.sh"
    "$(dirname "$0")/../tests/openapi/install.sh"
}

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    echo "deps ($MODE): all packages present"
    npm_step
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

echo "deps ($MODE): installing:$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
# nginx-light starts a daemon on install on some systems; the benchmarks run their own.
if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now nginx >/dev/null 2>&1 || true; fi
npm_step
echo "deps: done"
