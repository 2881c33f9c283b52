#!/bin/sh
# Replay benchmark at full size: builds bench_replay and runs it RUNS times
# (default 5) with 1,000,000 records (or $1), each in a fresh process, printing
# every run's rate, then the median and the spread; fails when the median is
# below $2 records/s (default 2,000,000, issue 11's target).
# BUILD_DIR picks the build tree (default: build/ at the top of the repo).
# Huge pages for malloc are off (GLIBC_TUNABLES unset), as the target says.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
runs=${RUNS:-5}
n=${1:-1000000}
min=${2:-2000000}
unset GLIBC_TUNABLES
cmake -S "$root" -B "$build" >/dev/null
cmake --build "$build" --target bench_replay -j2 >/dev/null
rates=""
i=1
while [ "$i" -le "$runs" ]; do
    out=$("$build/tests/bench/bench_replay" "$n")
    [ "$i" -eq 1 ] && echo "$out" | sed -n '1,2p'
    rate=$(echo "$out" | sed -n 's/^replay into index *\([0-9]*\) records.*/\1/p')
    echo "run $i: $(echo "$out" | grep '^replay into index')"
    rates="$rates $rate"
    i=$((i + 1))
done
set -- $(printf '%s\n' $rates | sort -n)
med=$(printf '%s\n' "$@" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
eval "last=\${$#}"
echo "replay into index: median $med records/s (min $1, max $last, $runs runs)"
if [ "$med" -lt "$min" ]; then
    echo "below the target of $min records/s"
    exit 1
fi
