#!/usr/bin/env bash
# threads_ab.sh: what the threadpool's mere presence costs a GET's system calls.
#
# Linux looks a descriptor up without touching its reference count only while
# the process has one thread (fdget's fast path: the descriptor table is not
# shared); with libuv's threadpool started, every read and writev of the loop
# takes and drops a reference (an atomic increment and decrement, `fput` in a
# kernel profile). nginx, one thread, never pays it. This script measures it:
# the same binary serving GET /v2/theme/:id twice side by side, once with one
# thread (--fsync never: nothing is ever queued to the pool) and once with the
# pool's threads started (--fsync interval, after one write), in interleaved
# rounds, and prints each round's CPU per request and the median of each
# round's ratio. A GET touches no storage, so the thread count is the only
# difference. Bounded: ROUNDS rounds of DURATION seconds each.
#
# Environment: ROUNDS (default 6), DURATION (s, default 4), CONNECTIONS
# (default 64), and lib.sh's settings (EVENTD_BIN, BENCH_SERVER_CPU, ...).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-6}
DURATION=${DURATION:-4}
CONNECTIONS=${CONNECTIONS:-64}
need wrk taskset curl python3 bc
bench_init
bench_binary

declare -A PID PORT KEY
for v in one pool; do
    mkdir -p "$BENCH_WORK/$v"
    KEY[$v]=$(bench_user_add "$BENCH_WORK/$v" bench)
    flags=(--fsync never)
    [[ $v == pool ]] && flags=(--fsync interval)
    bench_start_eventd "$BENCH_WORK/$v" "$BENCH_WORK/$v.log" "${flags[@]}" || die "eventd did not start"
    PID[$v]=$EVENTD_PID PORT[$v]=$EVENTD_PORT
    curl -sf -o /dev/null -u "bench:${KEY[$v]}" -H 'Content-Type: application/json' \
        -d '{"Theme":{}}' "http://127.0.0.1:${PORT[$v]}/v2/theme" || die "the seeding POST failed"
done
sleep 1 # the interval server's first sync starts its pool
for v in one pool; do
    note "$v: $(ls "/proc/${PID[$v]}/task" | wc -l) threads"
done
[[ $(ls "/proc/${PID[one]}/task" | wc -l) == 1 ]] || die "the --fsync never server has more than one thread"

ratios=()
for ((r = 1; r <= ROUNDS; r++)); do
    declare -A US
    for v in one pool; do
        read -r u0 s0 < <(bench_cpu_ticks "${PID[$v]}")
        out=$BENCH_WORK/wrk.$v.$r
        EVENTD_KEY=${KEY[$v]} EVENTD_IDS=2 bench_wrk "$out" "$BENCH_DIR/get_theme.lua" \
            "http://127.0.0.1:${PORT[$v]}" "$DURATION" "$CONNECTIONS" || die "wrk failed"
        read -r u1 s1 < <(bench_cpu_ticks "${PID[$v]}")
        n=$(bench_field "$out" requests)
        [[ ${n:-0} -gt 0 && $(bench_field "$out" non2xx) == 0 ]] || die "wrk: no answers or non-2xx"
        US[$v]=$(echo "scale=3; ($u1 + $s1 - $u0 - $s0) * 1000000 / $CLK_TCK / $n" | bc)
        printf 'round %d  %-4s  %8d requests  %6.3f us CPU/req\n' "$r" "$v" "$n" "${US[$v]}"
    done
    ratios+=("$(echo "scale=4; ${US[pool]} / ${US[one]}" | bc)")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END {
    m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
    printf "pool threads vs one thread, CPU per GET: median of %d rounds %.3fx (rounds %s to %s)\n", NR, m, a[1], a[NR] }'
