#!/bin/sh
# A long fuzzing run of one target, for the figures in docs/RELIABILITY.md.
#
# Usage: tests/fuzz/long_run.sh TARGET [EXECUTIONS]
#   TARGET      fuzz_http, fuzz_json or fuzz_replay
#   EXECUTIONS  inputs to run (default 10000000)
# Environment:
#   BUILD_DIR   build tree configured with -DEVENTD_FUZZ=ON (default build-fuzz)
#   MAX_SECONDS also stop after this many seconds (default: no limit)
#   RSS_MB      memory limit, libFuzzer -rss_limit_mb (default 2048)
#   WORK_DIR    where the run keeps its corpus, log and crash inputs
#               (default BUILD_DIR/tests/fuzz/long/TARGET; reused, so runs build on each other)
#
# Prints executions, exec/s, coverage (libFuzzer's cov: edges and ft: features),
# corpus size and peak memory; exits non-zero if the fuzzer found a crash, a
# leak or a sanitizer report (the input is then in WORK_DIR/artifacts/).
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 TARGET [EXECUTIONS]" >&2
    exit 2
fi
target=$1
runs=${2:-10000000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$root/build-fuzz}
bin=$build/tests/fuzz/$target
work=${WORK_DIR:-$build/tests/fuzz/long/$target}
if [ ! -x "$bin" ]; then
    echo "$0: $bin not found: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DEVENTD_FUZZ=ON" \
        "&& cmake --build build-fuzz" >&2
    exit 2
fi
mkdir -p "$work/corpus" "$work/artifacts"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
set -- -runs="$runs" -rss_limit_mb="${RSS_MB:-2048}" -timeout=25 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/"
[ -n "${MAX_SECONDS:-}" ] && set -- "$@" -max_total_time="$MAX_SECONDS"
[ -f "$here/$target.dict" ] && set -- "$@" -dict="$here/$target.dict"
set -- "$@" "$work/corpus" "$here/corpus/$target"
[ -n "$(ls -A "$here/regressions/$target" 2>/dev/null)" ] && set -- "$@" "$here/regressions/$target"

log=$work/run-$(date -u +%Y%m%dT%H%M%SZ).log
echo "== $target: up to $runs executions${MAX_SECONDS:+ or $MAX_SECONDS s}; log $log"
start=$(date +%s)
rc=0
"$bin" "$@" >"$log" 2>&1 || rc=$?
elapsed=$(($(date +%s) - start))

stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -n 1; }
# The last status line: "#N  DONE  cov: C ft: F corp: K/SIZE lim: L exec/s: E rss: R"
last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
field() { echo "$last" | sed -n "s/.* $1: *\([^ ]*\).*/\1/p"; }

echo "target:      $target"
echo "executions:  $(stat number_of_executed_units)"
echo "seconds:     $elapsed"
echo "exec/s:      $(stat average_exec_per_sec)"
echo "coverage:    cov $(field cov) (edges), ft $(field ft) (features)"
echo "corpus:      $(field corp) (inputs/bytes)"
echo "peak rss:    $(stat peak_rss_mb) MB"
if [ "$rc" -ne 0 ] || grep -q "runtime error:\|ERROR: .*Sanitizer\|FUZZ PROPERTY FAILED" "$log"; then
    echo "result:      FAILED (exit $rc): see $log; input under $work/artifacts/"
    grep -m 1 -A 30 "ERROR: \|FUZZ PROPERTY FAILED\|runtime error:" "$log" || true
    exit 1
fi
echo "result:      no crash, leak or sanitizer report"
