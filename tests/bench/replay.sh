#!/bin/sh
# Replay benchmark at full size: builds bench_replay and runs it with
# 1,000,000 records (or $1), failing below $2 records/s (default 1,000,000).
# BUILD_DIR picks the build tree (default: build/ at the top of the repo).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" >/dev/null
cmake --build "$build" --target bench_replay -j2 >/dev/null
exec "$build/tests/bench/bench_replay" "${1:-1000000}" "${2:-1000000}"
