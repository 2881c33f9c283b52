#!/bin/sh
# Every test of eventd, as CI runs them (README's test command and .ci/run):
#   1. the formatting check (clang-format, the committed .clang-format);
#   2. the plain build with -Werror: every ctest suite (unit, http, bench smoke);
#   3. the sanitizer build (AddressSanitizer + UndefinedBehaviorSanitizer): the same
#      suites but valgrind's and the benchmark's, on the same binary the fault tests use;
#   4. the fuzz build (clang + libFuzzer): each target for a bounded time over its corpus.
# Build trees: build/, build-asan/, build-fuzz/. Stops at the first failing step.
set -eu
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}

step() { printf '\n== %s\n' "$*"; }

step "format: clang-format --dry-run --Werror"
# shellcheck disable=SC2046
clang-format --dry-run --Werror $(git ls-files 'src/*.[ch]' 'tests/*.[ch]')

step "plain build (-Werror) and every suite"
cmake -S . -B build -DEVENTD_WERROR=ON >/dev/null
cmake --build build -j"$JOBS"
ctest --test-dir build --output-on-failure -j"$JOBS"

step "sanitizer build (address;undefined) and every suite but valgrind's and the benchmark"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DEVENTD_WERROR=ON \
    -DEVENTD_SANITIZE="address;undefined" >/dev/null
cmake --build build-asan -j"$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$JOBS" -LE bench

if [ -f tests/fuzz/CMakeLists.txt ]; then
    step "fuzz build (clang, libFuzzer): each target for a bounded time"
    cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
        -DEVENTD_FUZZ=ON >/dev/null
    cmake --build build-fuzz -j"$JOBS"
    ctest --test-dir build-fuzz --output-on-failure -L fuzz
fi
echo "run-all: every step passed"
