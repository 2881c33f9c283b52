#!/bin/sh
# Every test of eventd, as CI runs them (README's test command and .ci/run):
#   1. the formatting check (clang-format, the committed .clang-format);
#   2. the plain build with -Werror: every ctest suite (unit, http, lb: three shards
#      behind HAProxy, bench smoke);
#   3. the Release build as shipped (no test hooks) and the instruction-count guard
#      (ctest -L perf: instructions per request under callgrind against
#      tests/perf/budgets.txt, docs/BENCHMARKS.md "The instruction guard");
#   4. the sanitizer build (AddressSanitizer + UndefinedBehaviorSanitizer): the same
#      suites but valgrind's and the benchmark's, on the same binary the fault tests use;
#   5. the fuzz build (clang + libFuzzer): each target for a bounded time over its corpus;
#   6. the container: docker/Dockerfile built and run with podman (tests/docker/run.sh).
# Build trees: build/, build-bench/ (Release, the benchmarks' tree too), build-asan/,
# build-fuzz/ (-DEVENTD_TESTS=ON: README's run command configures build/ without tests).
# Every step runs; the exit status is non-zero if any failed, and the last lines name them.
set -u
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
FAILED=""

step() { printf '\n== %s\n' "$*"; }
# Runs "$@" as part of step $STEP; remembers the step if it fails.
run() { "$@" || { FAILED="$FAILED\n  $STEP"; return 1; }; }

STEP="format (clang-format --dry-run --Werror)"
step "$STEP"
# The files git tracks: outside a checkout (or without git) the list would be
# empty, and clang-format would pass having checked nothing.
SOURCES=$(git ls-files 'src/*.[ch]' 'tests/*.[ch]' 'deps/*.[ch]')
if [ -z "$SOURCES" ]; then
    echo "format: no sources listed (run from a git checkout, with git installed)" >&2
    run false
else
    # shellcheck disable=SC2086
    run clang-format --dry-run --Werror $SOURCES
fi

STEP="plain build (-Werror) and every suite"
step "$STEP"
# The build type is said: README's run command leaves build/ configured as Release,
# which a later configure would keep (no -g; CI's clean clone gets RelWithDebInfo).
run cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEVENTD_WERROR=ON -DEVENTD_TESTS=ON \
    >/dev/null &&
    run cmake --build build -j"$JOBS" &&
    run ctest --test-dir build --output-on-failure -j"$JOBS"

STEP="Release build and the instruction-count guard (ctest -L perf)"
step "$STEP"
run cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DEVENTD_TESTS=OFF -DEVENTD_PERF=ON \
    -DEVENTD_WERROR=ON >/dev/null &&
    run cmake --build build-bench -j"$JOBS" --target eventd &&
    run ctest --test-dir build-bench --output-on-failure -L perf

STEP="sanitizer build (address;undefined) and every suite but valgrind's and the benchmark"
step "$STEP"
run cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DEVENTD_WERROR=ON -DEVENTD_TESTS=ON \
    -DEVENTD_SANITIZE="address;undefined" >/dev/null &&
    run cmake --build build-asan -j"$JOBS" &&
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        run ctest --test-dir build-asan --output-on-failure -j"$JOBS" -LE bench

STEP="fuzz build (clang, libFuzzer): each target for a bounded time"
step "$STEP"
run cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
    -DEVENTD_FUZZ=ON >/dev/null &&
    run cmake --build build-fuzz -j"$JOBS" &&
    run ctest --test-dir build-fuzz --output-on-failure -L fuzz

STEP="container: docker/Dockerfile built and run with podman (tests/docker/run.sh)"
step "$STEP"
run ./tests/docker/run.sh

if [ -n "$FAILED" ]; then
    printf 'run-all: FAILED:%b\n' "$FAILED"
    exit 1
fi
echo "run-all: every step passed"
