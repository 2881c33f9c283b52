#!/usr/bin/env bash
# tests/bench/sync_compare.sh: issue 11's durable write path, measured three ways.
#
# 1. The disk alone: write + fdatasync of 4 KiB to a file in the scratch
#    directory (same file system as the data directories), 2000 times,
#    pinned to the server CPU; prints p50/p99/max.
# 2. Redis, the anchor: Debian's redis-server (appendonly yes, appendfsync
#    always) on CPU 0, `redis-benchmark -t set -d 300 -c 64` on CPU 1,
#    REDIS_RUNS times per repetition (a fresh instance each repetition).
# 3. eventd, POST /v2/theme (tests/bench/post_theme.lua), for every sync
#    mechanism in MECHS x fsync mode in MODES x connections in CONNS, on CPU 0
#    with wrk -t1 on CPU 1, DURATION seconds a run. Repetitions are
#    interleaved (A B C, A B C ...) so that a noisy neighbour spreads over
#    all mechanisms; the summary gives medians and the min-max spread.
#
# Mechanisms (MECHS):
#   head        the binary of this tree, as it is (since issue 11: "always"
#               batches on the loop thread, gathering ready input first, while
#               fdatasync averages under --loop-sync-max-us (2 ms), else on
#               the threadpool; "interval" on the threadpool)
#   head_worker, head_loop
#               the same binary pinned to one path: --loop-sync-max-us 0
#               (every sync on the threadpool) or 10 s (every sync on the loop)
#   head_batch  the same binary with --sched-batch (SCHED_BATCH)
#   head_noprealloc, head_prealloc64m
#               the same binary with --log-prealloc-bytes 0 (appends that grow
#               the file, as before 2026-11-29) or 64 MiB (zeros written 16
#               times less often than the default 4 MiB)
#   threadpool, loop, loop_dsync, uring, uring_dsync
#               the experiment commit SYNC_REF (built once into
#               build-bench-sync-<ref>/), where EVENTD_SYNC picks how a batch
#               reaches the disk: libuv's threadpool; the loop thread at the end
#               of its turn (write + fdatasync, or pwritev2(RWF_DSYNC)); io_uring
#               (linked write + fdatasync, or one RWF_DSYNC write) completed
#               through an eventfd. docs/BENCHMARKS.md (issue 11) has the results.
#
# Usage: tests/bench/sync_compare.sh [--quick]
#   --quick   DURATION=2 REPS=1 CONNS=64 REDIS_RUNS=1 unless set: a smoke test
# Environment: DURATION (s, default 4), REPS (default 2), CONNS (default
# "64 256 1024"), MODES (default "always interval"), MECHS (default
# "head head_worker head_loop"; the experiment commit's threadpool, loop, loop_dsync,
# uring and uring_dsync too), REDIS_RUNS (per
# repetition, default 3), REDIS_N (SETs per redis-benchmark run, default 100000),
# PARTS (default "disk redis eventd"), SYNC_REF, SYNC_TMPDIR (where the scratch
# directory goes, default build-bench/), and those of lib.sh.
# Bounded: every run has a timeout; the default set takes about 7 minutes (plus
# a Release build the first time). The experiment commit's mechanisms build it
# too, and need liburing-dev.
# Exit status: 0 when every part ran, 1 when something failed to start or run.
set -uo pipefail

PROG=sync_compare.sh
# shellcheck source=tests/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for arg in "$@"; do
    case $arg in
    --quick)
        DURATION=${DURATION:-2} REPS=${REPS:-1} CONNS=${CONNS:-64} REDIS_RUNS=${REDIS_RUNS:-1}
        REDIS_N=${REDIS_N:-30000}
        ;;
    -h | --help)
        bench_usage
        exit 0
        ;;
    *) die "unknown argument $arg (try --help)" ;;
    esac
done
DURATION=${DURATION:-4}
REPS=${REPS:-2}
CONNS=${CONNS:-64 256 1024}
MODES=${MODES:-always interval}
MECHS=${MECHS:-head head_worker head_loop}
REDIS_RUNS=${REDIS_RUNS:-3}
REDIS_N=${REDIS_N:-100000}
PARTS=${PARTS:-disk redis eventd}
SYNC_REF=${SYNC_REF:-1c29cd6}
[[ $DURATION =~ ^[0-9]+$ && $DURATION -ge 1 && $DURATION -le 60 ]] || die "DURATION: 1..60 seconds"
[[ $REPS =~ ^[0-9]+$ && $REPS -ge 1 && $REPS -le 10 ]] || die "REPS: 1..10"
[[ $REDIS_RUNS =~ ^[0-9]+$ && $REDIS_RUNS -le 10 ]] || die "REDIS_RUNS: 0..10"

need wrk taskset python3 getconf timeout git curl bc
# Context switches and system calls per request, when perf can count them (PERF=0: never).
PERF=${PERF:-1}
if ((PERF)) && ! { command -v perf >/dev/null &&
    perf stat -e context-switches,raw_syscalls:sys_enter -- true >/dev/null 2>&1; }; then
    note "perf cannot count context switches and system calls here: those columns stay empty"
    PERF=0
fi
# The scratch directory lives under build-bench/, not /tmp: a shared machine's /tmp
# cleanups once removed it in the middle of a run. Same file system as /tmp here.
mkdir -p "$ROOT/build-bench"
TMPDIR=${SYNC_TMPDIR:-$ROOT/build-bench} bench_init
RESULTS=$BENCH_WORK/results.txt
: >"$RESULTS"
FAILED=0

# ---- 1. the disk's own fdatasync ----
disk_sync() {
    note "disk: write + fdatasync of 4 KiB, 2000 times"
    taskset -c "$BENCH_SERVER_CPU" timeout -k 5 60 python3 - "$BENCH_WORK/disk.probe" <<'EOF' | tee -a "$RESULTS"
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
buf, lat, deadline = b"x" * 4096, [], time.monotonic() + 40
for _ in range(2000):
    t = time.perf_counter()
    os.write(fd, buf)
    os.fdatasync(fd)
    lat.append(time.perf_counter() - t)
    if time.monotonic() > deadline:
        break
os.close(fd)
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3
print("DISK n=%d p50_ms=%.3f p99_ms=%.3f max_ms=%.3f syncs_per_s=%.0f" %
      (len(lat), q(0.50), q(0.99), lat[-1] * 1e3, len(lat) / sum(lat)))
EOF
}

# ---- 2. Redis with appendfsync always ----
REDIS_PID=""
REDIS_PORT=""
redis_start() {
    local d=$BENCH_WORK/redis i
    rm -rf "$d"
    mkdir -p "$d"
    REDIS_PORT=$(bench_free_port)
    taskset -c "$BENCH_SERVER_CPU" redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$d" \
        --appendonly yes --appendfsync always --save '' --daemonize no \
        --logfile "$d/redis.log" >/dev/null 2>&1 &
    REDIS_PID=$!
    bench_track "$REDIS_PID"
    for ((i = 0; i < 50; i++)); do
        [[ $(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]] && return 0
        kill -0 "$REDIS_PID" 2>/dev/null || break
        sleep 0.1
    done
    note "redis-server did not start"
    tail -n 5 "$d/redis.log" >&2
    return 1
}

redis_run() {
    local rep=$1 run=$2 out="$BENCH_WORK/redis-$1-$2.csv" u0 k0 u1 k1
    read -r u0 k0 < <(bench_cpu_ticks "$REDIS_PID")
    if ! timeout -k 5 120 taskset -c "$BENCH_CLIENT_CPU" redis-benchmark -h 127.0.0.1 \
        -p "$REDIS_PORT" -t set -d 300 -c 64 -n "$REDIS_N" --csv >"$out" 2>&1; then
        note "redis-benchmark failed:"
        tail -n 3 "$out" >&2
        return 1
    fi
    read -r u1 k1 < <(bench_cpu_ticks "$REDIS_PID")
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    awk -F'"' -v n="$REDIS_N" -v t=$((u1 + k1 - u0 - k0)) -v hz="$CLK_TCK" -v rep="$rep" \
        -v run="$run" '$2 == "SET" {
        printf "REDIS rep=%s run=%s rps=%.0f p50_ms=%s p99_ms=%s cpu_us=%.2f\n", rep, run, $4, $10, $14, t / hz * 1e6 / n
    }' "$out" | tee -a "$RESULTS"
    grep -q '^REDIS rep='"$rep"' run='"$run"' ' "$RESULTS" || { note "no SET line in $out"; return 1; }
}

redis_rep() {
    local rep=$1 run
    redis_start || return 1
    for ((run = 1; run <= REDIS_RUNS; run++)); do
        redis_run "$rep" "$run" || { bench_stop "$REDIS_PID" 5; return 1; }
    done
    bench_stop "$REDIS_PID" 5
}

# ---- 3. eventd, one mechanism at a time ----
REF_BIN=""
build_ref() {
    local ref dir
    ref=$(git -C "$ROOT" rev-parse --short "$SYNC_REF" 2>/dev/null) || {
        note "SYNC_REF $SYNC_REF is not in this repository: its mechanisms are skipped"
        return 1
    }
    dir=$ROOT/build-bench-sync-$ref
    if [[ ! -x $dir/build/eventd ]]; then
        note "building the experiment commit $ref in $dir"
        rm -rf "$dir"
        mkdir -p "$dir/src"
        if ! { git -C "$ROOT" archive "$ref" | tar -x -C "$dir/src" &&
            cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DEVENTD_TESTS=OFF &&
            cmake --build "$dir/build" -j2 --target eventd; } >"$BENCH_WORK/build-ref.log" 2>&1; then
            tail -n 20 "$BENCH_WORK/build-ref.log" >&2
            note "the build of $ref failed: its mechanisms are skipped"
            return 1
        fi
    fi
    REF_BIN=$dir/build/eventd
}

# Prints "BINARY ENV" for a mechanism, or fails when it is unavailable.
mech_cmd() {
    case $1 in
    head) echo "$HEAD_BIN EVENTD_NONE=1" ;;
    head_worker) echo "$HEAD_BIN EVENTD_LOOP_SYNC_MAX_US=0" ;;
    head_loop) echo "$HEAD_BIN EVENTD_LOOP_SYNC_MAX_US=10000000" ;;
    head_batch) echo "$HEAD_BIN EVENTD_SCHED_BATCH=true" ;;
    head_noprealloc) echo "$HEAD_BIN EVENTD_LOG_PREALLOC_BYTES=0" ;;
    head_prealloc64m) echo "$HEAD_BIN EVENTD_LOG_PREALLOC_BYTES=67108864" ;;
    threadpool | loop | loop_dsync | uring | uring_dsync)
        [[ -n $REF_BIN ]] || return 1
        echo "$REF_BIN EVENTD_SYNC=$1"
        ;;
    *) return 1 ;;
    esac
}

# "COUNT SUM_SECONDS ON_LOOP LE1MS LE2_5MS" of eventd's fsync histogram, the syncs
# the loop did itself and the histogram's counts up to 1 and 2.5 ms (GET /metrics),
# or "0 0 0 0 0".
fsync_totals() {
    curl -s --max-time 5 "$1/metrics" | awk '
        $1 == "eventd_fsync_duration_seconds_count" { n = $2 }
        $1 == "eventd_fsync_duration_seconds_sum" { s = $2 }
        $1 == "eventd_fsyncs_on_loop_total" { l = $2 }
        $1 == "eventd_fsync_duration_seconds_bucket{le=\"0.001\"}" { b1 = $2 }
        $1 == "eventd_fsync_duration_seconds_bucket{le=\"0.0025\"}" { b2 = $2 }
        END { printf "%d %.9f %d %d %d\n", n, s, l, b1, b2 }'
}

# One wrk run: eventd_run MECH MODE CONNS REP PID URL
# Besides req/s and CPU it prints the syncs the run made (from /metrics): how
# many per second, the requests each covered, their mean time, and the share
# of the run's wall time a sync was in flight (sync_busy): near 1 with batches
# of about CONNS requests, the disk is what bounds the run (Little's law:
# CONNS requests per sync time); the share of syncs the loop did itself; and
# the share that took over 1 and 2.5 ms (the sync's tail under load, which
# bounds the requests' p99: docs/BENCHMARKS.md, issue 11's final run).
eventd_run() {
    local mech=$1 mode=$2 c=$3 rep=$4 pid=$5 url=$6 out="$BENCH_WORK/wrk-$1-$2-$3-$4.txt"
    local u0 k0 u1 k1 perf_pid="" cs="" sc="" f0n f0s f0l f0a f0b f1n f1s f1l f1a f1b
    read -r f0n f0s f0l f0a f0b < <(fsync_totals "$url")
    read -r u0 k0 < <(bench_cpu_ticks "$pid")
    [[ -n ${k0:-} ]] || { note "eventd ($mech) is not running"; return 1; }
    if ((PERF)); then
        perf stat -e context-switches,raw_syscalls:sys_enter -x, -o "$out.perf" -p "$pid" &
        perf_pid=$!
        bench_track "$perf_pid"
    fi
    if ! bench_wrk "$out" "$BENCH_DIR/post_theme.lua" "$url" "$DURATION" "$c"; then
        note "$mech $mode c$c: wrk failed"
        tail -n 3 "$out" >&2
        [[ -n $perf_pid ]] && kill -INT "$perf_pid" 2>/dev/null
        return 1
    fi
    if [[ -n $perf_pid ]]; then
        kill -INT "$perf_pid" 2>/dev/null
        wait "$perf_pid" 2>/dev/null
    fi
    read -r u1 k1 < <(bench_cpu_ticks "$pid")
    [[ -n ${k1:-} ]] || { note "eventd ($mech) died"; return 1; }
    read -r f1n f1s f1l f1a f1b < <(fsync_totals "$url")
    local req
    req=$(bench_field "$out" requests)
    [[ -n $req && $req -gt 0 ]] || { note "$mech $mode c$c: no requests"; return 1; }
    if [[ -s $out.perf ]]; then
        cs=$(awk -F, -v n="$req" '$3 ~ /context-switches/ { printf "%.3f", $1 / n }' "$out.perf")
        sc=$(awk -F, -v n="$req" '$3 ~ /sys_enter/ { printf "%.2f", $1 / n }' "$out.perf")
    fi
    awk -v m="$mech" -v mode="$mode" -v c="$c" -v rep="$rep" -v n="$req" -v hz="$CLK_TCK" \
        -v t=$((u1 + k1 - u0 - k0)) -v rps="$(bench_field "$out" rps)" \
        -v p50="$(bench_field "$out" p50_us)" -v p99="$(bench_field "$out" p99_us)" \
        -v bad="$(bench_field "$out" non2xx)" -v cs="${cs:--1}" -v sc="${sc:--1}" \
        -v syncs=$((f1n - f0n)) -v on_loop=$((f1l - f0l)) -v le1=$((f1a - f0a)) \
        -v le2=$((f1b - f0b)) -v sync_s="$(echo "$f1s - $f0s" | bc -l)" -v dur="$DURATION" 'BEGIN {
        printf "EVENTD mech=%s mode=%s c=%s rep=%s rps=%.0f p50_ms=%.3f p99_ms=%.3f cpu_us=%.2f non2xx=%s cs_per_req=%s sc_per_req=%s",
            m, mode, c, rep, rps, p50 / 1000, p99 / 1000, t / hz * 1e6 / n, bad, cs, sc
        if (syncs > 0)
            printf " syncs_per_s=%.0f req_per_sync=%.1f sync_ms=%.3f sync_busy=%.2f on_loop=%.2f over_1ms=%.4f over_2_5ms=%.4f",
                syncs / dur, n / syncs, sync_s * 1000 / syncs, sync_s / dur, on_loop / syncs,
                (syncs - le1) / syncs, (syncs - le2) / syncs
        printf "\n"
    }' | tee -a "$RESULTS"
}

eventd_rep() {
    local mech=$1 mode=$2 rep=$3 cmd bin env data log key c rc=0
    cmd=$(mech_cmd "$mech") || return 0
    read -r bin env <<<"$cmd"
    data=$BENCH_WORK/data-$mech-$mode
    log=$BENCH_WORK/eventd-$mech-$mode-$rep.log
    rm -rf "$data"
    EVENTD_BIN=$bin
    key=$(bench_user_add "$data" bench) || return 1
    export EVENTD_USER=bench EVENTD_KEY=$key
    export "${env?}" # the mechanism's variable, for this server only
    bench_start_eventd "$data" "$log" --fsync "$mode" || { unset "${env%%=*}"; return 1; }
    unset "${env%%=*}"
    grep -i "io_uring" "$log" | head -n 1 | sed "s/^/[$PROG] $mech: /" >&2
    for c in $CONNS; do
        eventd_run "$mech" "$mode" "$c" "$rep" "$EVENTD_PID" "http://127.0.0.1:$EVENTD_PORT" || {
            rc=1
            break
        }
    done
    bench_stop "$EVENTD_PID" 10 || { note "eventd ($mech $mode) exited with status $?"; rc=1; }
    rm -rf "$data"
    return $rc
}

# ---- run ----
[[ " $PARTS " == *" disk "* ]] && { disk_sync || FAILED=1; }
if [[ " $PARTS " == *" redis "* ]]; then
    need redis-server redis-cli redis-benchmark
fi
if [[ " $PARTS " == *" eventd "* ]]; then
    bench_binary
    HEAD_BIN=$EVENTD_BIN
    if [[ " $MECHS " =~ \ (threadpool|loop|loop_dsync|uring|uring_dsync)\  ]]; then build_ref || true; fi
fi
note "DURATION=${DURATION}s REPS=$REPS CONNS='$CONNS' MODES='$MODES' MECHS='$MECHS' (head: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null), SYNC_REF=$SYNC_REF)"
for ((rep = 1; rep <= REPS; rep++)); do
    if [[ " $PARTS " == *" redis "* ]] && ((REDIS_RUNS > 0)); then redis_rep "$rep" || FAILED=1; fi
    if [[ " $PARTS " == *" eventd "* ]]; then
        for mode in $MODES; do
            for mech in $MECHS; do
                # Pinning the sync path changes nothing outside "always": head's run stands in.
                [[ $mode != always && $mech == head_* ]] && continue
                eventd_rep "$mech" "$mode" "$rep" || FAILED=1
            done
        done
    fi
done

# ---- summary: medians and spread ----
echo
echo "sync_compare: $(nproc) CPUs, servers on CPU $BENCH_SERVER_CPU, clients on CPU $BENCH_CLIENT_CPU, ${DURATION}s runs, $REPS repetition(s), load: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$RESULTS" <<'EOF'
import collections, statistics, sys
rows = [dict(kv.split("=", 1) for kv in l.split()[1:]) | {"kind": l.split()[0]}
        for l in open(sys.argv[1]) if l[:5] in ("DISK ", "REDIS", "EVENT")]
med = lambda xs: statistics.median(xs) if xs else float("nan")
for r in rows:
    if r["kind"] == "DISK":
        print("disk write+fdatasync 4 KiB: n=%s p50 %s ms, p99 %s ms, max %s ms (%s syncs/s)" %
              (r["n"], r["p50_ms"], r["p99_ms"], r["max_ms"], r["syncs_per_s"]))
red = [r for r in rows if r["kind"] == "REDIS"]
redis_med = None
if red:
    rps = [float(r["rps"]) for r in red]
    redis_med = med(rps)
    print("redis SET -d 300 -c64 appendfsync always: %d runs, median %.0f/s (min %.0f, max %.0f), "
          "p50 %.3f ms, p99 %.3f ms, CPU %.2f us/SET (medians)" %
          (len(rps), redis_med, min(rps), max(rps), med([float(r["p50_ms"]) for r in red]),
           med([float(r["p99_ms"]) for r in red]), med([float(r["cpu_us"]) for r in red])))
groups = collections.OrderedDict()
for r in rows:
    if r["kind"] == "EVENTD":
        groups.setdefault((r["mode"], int(r["c"]), r["mech"]), []).append(r)
if groups:
    print("\n%-8s %5s %-12s %4s %9s %17s %8s %8s %8s %6s %6s %6s %9s" % (
        "mode", "conns", "mechanism", "runs", "req/s", "(min-max)", "us_cpu/r", "p50_ms",
        "p99_ms", "cs/req", "sc/req", "non2xx", "x_interval"))
    interval = {}
    for (mode, c, mech), rs in groups.items():
        if mode == "interval":
            interval[(c, mech)] = med([float(r["rps"]) for r in rs])
    for (mode, c, mech), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        rps = [float(r["rps"]) for r in rs]
        ratio = ""
        base = interval.get((c, mech), interval.get((c, "head")))
        if mode == "always" and base:
            ratio = "%.2f" % (med(rps) / base)
        opt = lambda k: ("%6.2f" % med([float(r[k]) for r in rs])) if all(
            float(r.get(k, -1)) >= 0 for r in rs) else "%6s" % "-"
        print("%-8s %5d %-12s %4d %9.0f %8.0f-%-8.0f %8.2f %8.3f %8.3f %s %s %6d %9s" % (
            mode, c, mech, len(rs), med(rps), min(rps), max(rps),
            med([float(r["cpu_us"]) for r in rs]), med([float(r["p50_ms"]) for r in rs]),
            med([float(r["p99_ms"]) for r in rs]), opt("cs_per_req"), opt("sc_per_req"),
            sum(int(r["non2xx"] or 0) for r in rs), ratio))
        if all("sync_busy" in r for r in rs):
            print("%-8s %5s %-12s       syncs: %.0f/s, %.1f requests each, %.3f ms each, "
                  "a sync in flight %.0f %% of the time, %.0f %% of them on the loop, "
                  "%.1f %% over 1 ms, %.1f %% over 2.5 ms" % (
                      "", "", "", med([float(r["syncs_per_s"]) for r in rs]),
                      med([float(r["req_per_sync"]) for r in rs]),
                      med([float(r["sync_ms"]) for r in rs]),
                      100 * med([float(r["sync_busy"]) for r in rs]),
                      100 * med([float(r.get("on_loop", 0)) for r in rs]),
                      100 * med([float(r.get("over_1ms", 0)) for r in rs]),
                      100 * med([float(r.get("over_2_5ms", 0)) for r in rs])))
    if redis_med:
        print()
        for (mode, c, mech), rs in groups.items():
            if mode == "always" and c == 64:
                print("eventd %-12s always POST /v2/theme c64: %.2fx redis's median durable SETs/s" %
                      (mech, med([float(r["rps"]) for r in rs]) / redis_med))
EOF
if ((FAILED)); then
    note "FAILED: something did not start or run (BENCH_KEEP=1 keeps the logs)"
    exit 1
fi
exit 0
