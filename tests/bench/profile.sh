#!/usr/bin/env bash
# tests/bench/profile.sh: where eventd's user-space instructions go, per operation.
#
# Runs the Release binary under valgrind --tool=callgrind with instrumentation
# off, seeds themes, then for each operation switches instrumentation on,
# zeroes the counters, sends REQUESTS requests with the wrk script of that
# operation (-c CONNECTIONS), dumps, and prints the top functions by
# instruction count (callgrind_annotate, exclusive). Startup and seeding are
# not counted. Callgrind sees user space only: for the kernel's share use
# perf (see docs/BENCHMARKS.md), where the CPU has counters or cpu-clock works.
#
# Usage: tests/bench/profile.sh
# Environment: REQUESTS (20000), OPS (post_theme put_theme get_theme post_address),
# CONNECTIONS (16), FSYNC (interval), TOP (25), OUT (directory for the callgrind
# files, default: the scratch directory, removed unless BENCH_KEEP=1), and lib.sh's.
# Bounded: each operation stops after 120 s.
set -uo pipefail

PROG=profile.sh
# shellcheck source=tests/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
REQUESTS=${REQUESTS:-20000}
OPS=${OPS:-post_theme put_theme get_theme post_address}
CONNECTIONS=${CONNECTIONS:-16}
FSYNC=${FSYNC:-interval}
TOP=${TOP:-25}

need valgrind callgrind_control callgrind_annotate wrk taskset python3 timeout
bench_init
bench_binary
OUT=${OUT:-$BENCH_WORK}
mkdir -p "$OUT"

data=$BENCH_WORK/data
log=$BENCH_WORK/eventd.log
EVENTD_KEY=$(bench_user_add "$data" bench) || exit 1
export EVENTD_USER=bench EVENTD_KEY
real_bin=$EVENTD_BIN
# bench_start_eventd runs "$EVENTD_BIN serve ..." pinned to the server CPU.
cat >"$BENCH_WORK/under-callgrind" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/callgrind.out.%p" \
    "$real_bin" "\$@"
EOF
chmod +x "$BENCH_WORK/under-callgrind"
EVENTD_BIN=$BENCH_WORK/under-callgrind
bench_start_eventd "$data" "$log" --fsync "$FSYNC" || exit 1
pid=$EVENTD_PID
url="http://127.0.0.1:$EVENTD_PORT"
note "eventd under callgrind: pid $pid on $url (--fsync $FSYNC)"

export EVENTD_IDS_FILE=$BENCH_WORK/ids.txt
bench_seed "$BENCH_DIR/post_theme.lua" "$EVENTD_IDS_FILE" 1000 120 "$url" || exit 1

for op in $OPS; do
    callgrind_control -i on "$pid" >/dev/null && callgrind_control -z "$pid" >/dev/null ||
        die "callgrind_control cannot reach pid $pid"
    # bench_seed's machinery: stop after REQUESTS answers (the "ids" file is unused here).
    EVENTD_BENCH_MAX=$REQUESTS EVENTD_IDS_OUT=$BENCH_WORK/$op.status \
        timeout -k 5 130 taskset -c "$BENCH_CLIENT_CPU" \
        wrk -t1 -c"$CONNECTIONS" -d120s -s "$BENCH_DIR/$op.lua" "$url" >"$BENCH_WORK/$op.wrk" 2>&1 &
    wpid=$!
    bench_track "$wpid"
    for ((i = 0; i < 1200; i++)); do
        grep -q '^#' "$BENCH_WORK/$op.status" 2>/dev/null && break
        kill -0 "$wpid" 2>/dev/null || break
        sleep 0.1
    done
    kill -INT "$wpid" 2>/dev/null
    wait "$wpid" 2>/dev/null
    grep -q '^#done' "$BENCH_WORK/$op.status" || {
        grep '^#error' "$BENCH_WORK/$op.status" >&2
        die "$op: did not complete $REQUESTS requests"
    }
    callgrind_control -d "$op" "$pid" >/dev/null
    callgrind_control -i off "$pid" >/dev/null
    sleep 0.5 # let the dump land
    dump=$(find "$OUT" -maxdepth 1 -name "callgrind.out.$pid.*" -printf '%T@ %p\n' | sort -rn | head -n 1 | cut -d' ' -f2-)
    [[ -n $dump ]] || die "no callgrind dump for $op"
    mv "$dump" "$OUT/callgrind.$op"
    echo
    # One line per function: instructions per request, share, function, object.
    callgrind_annotate --inclusive=no --threshold=100 "$OUT/callgrind.$op" 2>/dev/null |
        awk -v n="$REQUESTS" -v op="$op" -v top="$TOP" '
        /PROGRAM TOTALS/ { gsub(",", "", $1); total = $1
            printf "== %s: %d requests, %.0f user-space instructions/request\n", op, n, total / n
            printf "%9s %6s  %s\n", "instr/req", "share", "function [object]"; next }
        /file:function/ { on = 1; next }
        /^-+$/ { next }
        on && NF && shown < top {
            c = $1; gsub(",", "", c)
            line = $0; sub(/^ *[0-9,]+ +(\( *[0-9.]+%\) +)?/, "", line)
            sub(/^[^ :]*:/, "", line)                  # drop "file:" (or "???:")
            gsub(/\[[^]]*\//, "[", line)              # object basename only
            printf "%9.0f %5.1f%%  %s\n", c / n, 100 * c / total, line; shown++ }'
done
bench_stop "$pid" 30
[[ $OUT != "$BENCH_WORK" ]] && note "callgrind files in $OUT (callgrind_annotate $OUT/callgrind.OP)"
exit 0
