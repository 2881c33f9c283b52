#!/bin/sh
# The ctest entry of one fuzz target: replays its committed regressions, then
# fuzzes for a bounded time starting from the seeds. Fails (non-zero) on any
# crash, leak, timeout or sanitizer report; libFuzzer prints the stack and
# saves the input under WORKDIR/artifacts/.
#
# Usage: ci_run.sh TARGET_BINARY WORKDIR SECONDS RSS_LIMIT_MB
set -eu

bin=$1
work=$2
seconds=$3
rss=$4
name=$(basename "$bin")
here=$(cd "$(dirname "$0")" && pwd)

mkdir -p "$work/corpus" "$work/artifacts"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
opts="-rss_limit_mb=$rss -timeout=25 -artifact_prefix=$work/artifacts/ -print_final_stats=1"
[ -f "$here/$name.dict" ] && opts="$opts -dict=$here/$name.dict"

regressions="$here/regressions/$name"
seeds=""
if [ -n "$(ls -A "$regressions" 2>/dev/null)" ]; then
    echo "== $name: replaying $(ls "$regressions" | wc -l) regression inputs"
    # shellcheck disable=SC2086
    "$bin" $opts "$regressions"/*
    seeds=$regressions # fixed now: worth mutating further
fi

echo "== $name: fuzzing for $seconds s from $here/corpus/$name"
log="$work/last_run.log"
rc=0
# The first directory receives new inputs: the build tree's, never the source tree.
# shellcheck disable=SC2086
"$bin" $opts -max_total_time="$seconds" "$work/corpus" "$here/corpus/$name" $seeds >"$log" 2>&1 ||
    rc=$?
# libFuzzer prints a line per new input; the verdict, the stack and the stats are at the end.
tail -n 120 "$log"
if [ "$rc" -ne 0 ] || grep -q "runtime error:\|ERROR: .*Sanitizer\|FUZZ PROPERTY FAILED" "$log"; then
    echo "== $name: FAILED (exit $rc; full log $log, input saved under $work/artifacts/)"
    exit 1
fi
echo "== $name: passed"
