#!/usr/bin/env bash
# tests/bench/memory.sh: memory per stored record and replay speed of a server start.
#
# Writes a log of N default themes (bench_logwrite: what POST /v2/theme with an
# empty body stores, one user owning them all), then starts the Release server
# on it RUNS times (pinned to the server CPU, log in the page cache, huge pages
# for malloc off: GLIBC_TUNABLES unset) and for each start prints the replay
# rate (from the server's "replayed N records ... in X ms" line) and the
# server's resident memory once it listens (VmRSS of /proc/PID/status). An
# empty data directory's server gives the fixed part.
#
# Prints, per start, records/s and RSS, then the median and the spread of the
# rate and RSS / N (issue 11's targets: at most 200 B per default theme, at
# least 2,000,000 records/s), and the bound that fresh memory sets: replay
# writes its whole RSS into new pages, and bench_touch measures, just before
# each start, the MB/s at which this machine hands them out.
#
# Usage: tests/bench/memory.sh [--strict]     (--strict: exit 3 when a target is missed)
# Environment: N (1000000), RUNS (5), EVENTD_BENCH_BUILD (build directory, default
# <repo>/build-bench-hooks: Release with the bench tools), and lib.sh's.
set -uo pipefail

PROG=memory.sh
# shellcheck source=tests/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
N=${N:-1000000}
RUNS=${RUNS:-5}
STRICT=0
[[ ${1:-} == --strict ]] && STRICT=1
[[ ${1:-} == -h || ${1:-} == --help ]] && {
    bench_usage
    exit 0
}
unset GLIBC_TUNABLES

need cmake taskset python3
bench_init
build=${EVENTD_BENCH_BUILD:-$ROOT/build-bench-hooks}
note "building Release in $build"
if ! { cmake -S "$ROOT" -B "$build" -DCMAKE_BUILD_TYPE=Release -DEVENTD_TESTS=ON &&
    cmake --build "$build" -j2 --target eventd bench_logwrite bench_touch; } >"$BENCH_WORK/build.log" 2>&1; then
    tail -n 30 "$BENCH_WORK/build.log" >&2
    die "the Release build failed"
fi
EVENTD_BIN=${EVENTD_BIN:-$build/eventd}

rss_kb() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$1/status"; }

# One start on data dir $1: sets RESULT to "records ms rss_kb" (no subshell, so
# the EXIT trap knows the server's pid).
one_start() {
    local data=$1 log=$BENCH_WORK/serve.log line rss
    bench_start_eventd "$data" "$log" --fsync interval || return 1
    sleep 0.2 # the loop is idle by now: nothing allocates after listening
    rss=$(rss_kb "$EVENTD_PID")
    read -r ut st <<<"$(bench_cpu_ticks "$EVENTD_PID")"
    line=$(sed -n 's/.*replayed \([0-9]*\) records ([0-9]* bytes) in \([0-9.]*\) ms.*/\1 \2/p' "$log" | head -n 1)
    bench_stop "$EVENTD_PID" 30 || {
        note "eventd did not stop cleanly (status $?); its log:"
        tail -n 5 "$log" >&2
        return 1
    }
    [[ -n $line ]] || { note "no replay line in the log"; return 1; }
    RESULT="$line $rss $((ut + st))"
}

mkdir -p "$BENCH_WORK/empty" "$BENCH_WORK/data"
one_start "$BENCH_WORK/empty" || die "the empty server did not start"
read -r _ _ empty_kb _ <<<"$RESULT"
note "writing $N default themes"
"$build/tests/bench/bench_logwrite" "$BENCH_WORK/data" "$N" || die "bench_logwrite failed"
log_bytes=$(stat -c %s "$BENCH_WORK/data/eventd.log")
printf 'log: %d default themes, %d bytes (%.1f B/record); empty server: %d kB RSS\n' \
    "$N" "$log_bytes" "$(echo "$log_bytes / $N" | bc -l)" "$empty_kb"

rates=()
cpu_rates=()
touches=()
rss_all=()
for ((run = 1; run <= RUNS; run++)); do
    cat "$BENCH_WORK/data/eventd.log" >/dev/null # in the page cache, as replay.sh measures
    touch_mb=$(taskset -c "$BENCH_SERVER_CPU" "$build/tests/bench/bench_touch" 160 |
        sed -n 's/^fresh memory: \([0-9]*\) MB.*/\1/p')
    touches+=("$touch_mb")
    one_start "$BENCH_WORK/data" || die "start $run failed"
    read -r recs ms kb ticks <<<"$RESULT"
    rate=$(echo "$recs * 1000 / $ms" | bc)
    cpu_rate=$(echo "$recs * $CLK_TCK / ($ticks + 0.5)" | bc)
    rates+=("$rate")
    cpu_rates+=("$cpu_rate")
    rss_all+=("$kb")
    printf 'start %d: replayed %d records in %.1f ms: %d records/s (%d per CPU second of the whole start); RSS %d kB = %.1f B per theme; fresh memory just before: %d MB/s, so at most %d records/s\n' \
        "$run" "$recs" "$ms" "$rate" "$cpu_rate" "$kb" "$(echo "$kb * 1024 / $N" | bc -l)" \
        "$touch_mb" "$(echo "$touch_mb * 1000000 * $N / ($kb * 1024)" | bc)"
done

read -r med lo hi <<<"$(printf '%s\n' "${rates[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)], a[1], a[NR] }')"
kb=$(printf '%s\n' "${rss_all[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
per=$(echo "$kb * 1024 / $N" | bc -l)
net=$(echo "($kb - $empty_kb) * 1024 / $N" | bc -l)
printf 'replay: median %d records/s (min %d, max %d, %d starts)\n' "$med" "$lo" "$hi" "$RUNS"
read -r cmed clo chi <<<"$(printf '%s\n' "${cpu_rates[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)], a[1], a[NR] }')"
printf 'replay per CPU second (user + sys of the start, less sensitive to a busy machine): median %d records/s (min %d, max %d)\n' "$cmed" "$clo" "$chi"
read -r tmed tlo thi <<<"$(printf '%s\n' "${touches[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)], a[1], a[NR] }')"
printf 'fresh memory (bench_touch, the bound: replay writes its RSS into new pages): median %d MB/s (min %d, max %d), so at most %d records/s at this RSS\n' \
    "$tmed" "$tlo" "$thi" "$(echo "$tmed * 1000000 / ($kb * 1024 / $N)" | bc)"
printf 'memory: %.1f B of RSS per default theme (%.1f B above the empty server)\n' "$per" "$net"
missed=0
if (( $(echo "$per > 200" | bc) )); then
    echo "target: RSS per theme <= 200 B: MISS"; missed=1
else
    echo "target: RSS per theme <= 200 B: ok"
fi
if (( med < 2000000 )); then
    echo "target: replay >= 2,000,000 records/s (median): MISS"; missed=1
else
    echo "target: replay >= 2,000,000 records/s (median): ok"
fi
(( STRICT && missed )) && exit 3
exit 0
