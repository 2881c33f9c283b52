#!/usr/bin/env bash
# tests/bench/run.sh: throughput, latency and CPU cost of eventd against nginx.
#
# For each fsync mode (interval, always) it starts eventd on a fresh data
# directory pinned to CPU 0, seeds themes for the PUT and GET runs, and drives
# each operation (post_theme, put_theme, get_theme, post_address) with wrk
# pinned to CPU 1 (-t1 -c64, DURATION seconds). Then it runs nginx (one
# process, pinned to CPU 0) answering every request with a fixed 200 JSON
# body as long as eventd's POST /v2/theme response, through the same scripts.
# Server CPU time per request comes from utime+stime in /proc/PID/stat,
# read before and after each wrk run.
#
# Usage: tests/bench/run.sh [--quick] [--strict] [--syscalls]
#   --quick     DURATION=2 unless DURATION is set: a smoke test
#   --strict    exit 3 when a target is missed (default: report only)
#   --syscalls  also count the server's system calls and context switches per
#               request (perf stat on tracepoints; costs the server a little)
# Environment: DURATION (s, default 10), CONNECTIONS (default 64), SEED (themes
# created for PUT/GET, default 1000), MODES (default "interval always"),
# OPS (default "post_theme put_theme get_theme post_address"), ROUNDS (default
# 1; with more, every server stays up and they take turns, ROUNDS times: the
# summary gives medians, and the median of each round's ratio), and those in lib.sh
# (EVENTD_BIN to skip the build, BENCH_KEEP=1, ...).
#
# Exit status: 0 when every server started and every wrk run completed, 1 when
# something failed (a server did not start or died, wrk failed, a build
# failed), 3 with --strict when a target was missed.
#
# Targets: --fsync interval >= 0.90x nginx req/s and <= 1.25x nginx CPU/request;
#          --fsync always  >= 0.75x the interval req/s of the same operation.
set -uo pipefail

PROG=run.sh
# shellcheck source=tests/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STRICT=0
SYSCALLS=0
for arg in "$@"; do
    case $arg in
    --quick) DURATION=${DURATION:-2} ;;
    --strict) STRICT=1 ;;
    --syscalls) SYSCALLS=1 ;;
    -h | --help)
        bench_usage
        exit 0
        ;;
    *) die "unknown argument $arg (try --help)" ;;
    esac
done
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
SEED=${SEED:-1000}
MODES=${MODES:-interval always}
OPS=${OPS:-post_theme put_theme get_theme post_address}
ROUNDS=${ROUNDS:-1}
[[ $DURATION =~ ^[0-9]+$ && $DURATION -ge 1 ]] || die "DURATION must be a whole number of seconds"

need wrk nginx taskset python3 getconf timeout
if ((SYSCALLS)); then
    need perf
    perf stat -e raw_syscalls:sys_enter,context-switches -- true >/dev/null 2>&1 ||
        die "--syscalls: perf cannot count raw_syscalls:sys_enter here"
fi
(($(nproc) >= 2)) || note "warning: fewer than 2 CPUs: server and client will share one"
bench_init
bench_binary
note "binary: $EVENTD_BIN; DURATION=${DURATION}s, ${CONNECTIONS} connections, seed $SEED"

FAILED=0
declare -A R # R[server:op:field] for server in interval, always, nginx
RESULTS=$BENCH_WORK/results.txt
: >"$RESULTS"

# Runs one wrk measurement against pid $3 and stores its numbers under $1:$2.
#   measure SERVER OP PID URL
measure() {
    local srv=$1 op=$2 pid=$3 url=$4 out="$BENCH_WORK/$1-$2.wrk"
    local u0 k0 u1 k1 c0 c1 s0 s1
    read -r u0 k0 < <(bench_cpu_ticks "$pid")
    [[ -n ${k0:-} ]] || { note "$srv is not running"; return 1; }
    read -r c0 s0 < <(bench_cpu_busy "$BENCH_CLIENT_CPU")
    local perf_pid=""
    if ((SYSCALLS)); then
        perf stat -e raw_syscalls:sys_enter,context-switches -x, -o "$out.perf" -p "$pid" &
        perf_pid=$!
        bench_track "$perf_pid"
    fi
    if ! bench_wrk "$out" "$BENCH_DIR/$op.lua" "$url" "$DURATION" "$CONNECTIONS"; then
        note "$srv $op: wrk failed:"
        tail -n 5 "$out" >&2
        return 1
    fi
    read -r c1 s1 < <(bench_cpu_busy "$BENCH_CLIENT_CPU")
    if [[ -n $perf_pid ]]; then
        kill -INT "$perf_pid" 2>/dev/null
        wait "$perf_pid" 2>/dev/null
    fi
    read -r u1 k1 < <(bench_cpu_ticks "$pid")
    [[ -n ${k1:-} ]] || { note "$srv died during $op"; return 1; }
    local t0=$((u0 + k0)) t1=$((u1 + k1))
    local req dur
    req=$(bench_field "$out" requests)
    dur=$(bench_field "$out" duration_us)
    if [[ -z $req || $req -eq 0 ]]; then
        note "$srv $op: no requests completed:"
        tail -n 5 "$out" >&2
        return 1
    fi
    local f
    for f in rps p50_us p99_us non2xx err_connect err_read err_write err_timeout; do
        R[$srv:$op:$f]=$(bench_field "$out" "$f")
    done
    R[$srv:$op:requests]=$req
    # CPU microseconds per request, and how busy the server and client CPUs were.
    R[$srv:$op:cpu_us]=$(awk -v t=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$req" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
    R[$srv:$op:usr_us]=$(awk -v t=$((u1 - u0)) -v hz="$CLK_TCK" -v n="$req" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
    R[$srv:$op:sys_us]=$(awk -v t=$((k1 - k0)) -v hz="$CLK_TCK" -v n="$req" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
    R[$srv:$op:srv_pct]=$(awk -v t=$((t1 - t0)) -v hz="$CLK_TCK" -v d="$dur" 'BEGIN { printf "%.0f", 100 * t / hz / (d / 1e6) }')
    R[$srv:$op:cli_pct]=$(awk -v b=$((c1 - c0)) -v s=$((s1 - s0)) 'BEGIN { printf "%.0f", (s > 0 ? 100 * b / s : 0) }')
    R[$srv:$op:sc]="" R[$srv:$op:cs]=""
    if ((SYSCALLS)) && [[ -s $out.perf ]]; then
        R[$srv:$op:sc]=$(awk -F, -v n="$req" '$3 ~ /sys_enter/ { printf "%.2f", $1 / n }' "$out.perf")
        R[$srv:$op:cs]=$(awk -F, -v n="$req" '$3 ~ /context-switches/ { printf "%.3f", $1 / n }' "$out.perf")
    fi
    local errs=0 e
    for e in err_connect err_read err_write err_timeout; do
        errs=$((errs + ${R[$srv:$op:$e]:-0}))
    done
    printf '%-9s %-13s %9.0f req/s  p50 %7.3f ms  p99 %7.3f ms  non-2xx %d  socket errors %d  %6.2f us CPU/req (user %s, sys %s)  server CPU %s%%  client CPU %s%%\n' \
        "$srv" "$op" "${R[$srv:$op:rps]}" "$(awk -v x="${R[$srv:$op:p50_us]}" 'BEGIN{print x/1000}')" \
        "$(awk -v x="${R[$srv:$op:p99_us]}" 'BEGIN{print x/1000}')" "${R[$srv:$op:non2xx]}" "$errs" \
        "${R[$srv:$op:cpu_us]}" "${R[$srv:$op:usr_us]}" "${R[$srv:$op:sys_us]}" \
        "${R[$srv:$op:srv_pct]}" "${R[$srv:$op:cli_pct]}" | tee -a "$RESULTS"
    if [[ -n ${R[$srv:$op:sc]} ]]; then
        echo "          $op: ${R[$srv:$op:sc]} system calls and ${R[$srv:$op:cs]} context switches per request" | tee -a "$RESULTS"
    fi
    if ((errs > 0)); then note "$srv $op: $errs socket errors (see $out)"; fi
    return 0
}

# ---- eventd, once per fsync mode ----
SAMPLE_BODY=$BENCH_WORK/post_theme_body.json
run_eventd() {
    local mode=$1
    local data="$BENCH_WORK/data-$mode" log="$BENCH_WORK/eventd-$mode.log" key
    key=$(bench_user_add "$data" bench) || return 1
    export EVENTD_USER=bench EVENTD_KEY=$key
    bench_start_eventd "$data" "$log" --fsync "$mode" || return 1
    local pid=$EVENTD_PID url="http://127.0.0.1:$EVENTD_PORT"
    note "eventd --fsync $mode: pid $pid on $url"
    export EVENTD_IDS_FILE=$BENCH_WORK/ids-$mode.txt
    if ! bench_seed "$BENCH_DIR/post_theme.lua" "$EVENTD_IDS_FILE" "$SEED" 60 "$url" "$SAMPLE_BODY"; then
        bench_stop "$pid"
        return 1
    fi
    local op rc=0
    for op in $OPS; do
        measure "$mode" "$op" "$pid" "$url" || { rc=1; break; }
    done
    if grep -q "compaction started" "$log"; then
        note "note: an automatic compaction ran during the $mode runs"
    fi
    local status
    bench_stop "$pid"
    status=$?
    if ((status != 0)); then
        note "eventd --fsync $mode exited with status $status$( ((status > 128)) && echo " (signal $((status - 128)))")"
        tail -n 5 "$log" >&2
        rc=1
    fi
    return $rc
}

# ---- nginx: the same scripts against a fixed answer ----
run_nginx() {
    local dir=$BENCH_WORK/nginx body port pid
    if [[ -s $SAMPLE_BODY ]]; then
        body=$(cat "$SAMPLE_BODY")
    else # no eventd run: a body of the usual shape and size
        body='{"Status":"ok","Result":{"ID":123456,"UserID":1,"EventID":0,"Name":"Spring Gala #1","Logo":"","BackgroundImage":"","SecondaryImage":"","PageBackgroundRGB":"9e3779","HeaderBackgroundRGB":"3c6ef3","HeaderTextRGB":"575757","TextHeadingsRGB":"daa66d","SmallHeadingRGB":"575757","Status":"active"}}'
    fi
    export EVENTD_USER=bench EVENTD_KEY=${EVENTD_KEY:-unused-by-nginx}
    [[ -n ${EVENTD_IDS_FILE:-} && -s $EVENTD_IDS_FILE ]] || export EVENTD_IDS=2,3,4,5,6,7,8,9
    bench_start_nginx "$dir" "$body" || return 1
    pid=$NGINX_PID port=$NGINX_PORT
    local url="http://127.0.0.1:$port" op rc=0
    note "nginx: pid $pid on $url, body $(printf '%s' "$body" | wc -c) bytes"
    for op in $OPS; do
        measure nginx "$op" "$pid" "$url" || { rc=1; break; }
    done
    bench_stop "$pid" 5
    return $rc
}

# ---- ROUNDS > 1: every server up at once, taking turns ----
# Each round measures every server on every operation, the servers' order
# rotating from round to round, so that a noisy neighbour's slow minutes fall
# on all of them alike; the summary shows each figure's median over the rounds
# and, for rps/ngx and cpu/ngx, the median of each round's own ratio.
declare -A L  # L[server:op:field] the rounds' values, space-separated
declare -A PR # PR[server:op:rps|cpu] the rounds' ratios to nginx
median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{ a[++n] = $1 } END {
    if (n) printf "%s", n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }'; }
run_rounds() {
    local -A pid url key ids
    local srv op round k order rc=0
    for srv in $MODES; do
        local data="$BENCH_WORK/data-$srv"
        key[$srv]=$(bench_user_add "$data" bench) || return 1
        bench_start_eventd "$data" "$BENCH_WORK/eventd-$srv.log" --fsync "$srv" || return 1
        pid[$srv]=$EVENTD_PID url[$srv]=http://127.0.0.1:$EVENTD_PORT ids[$srv]=$BENCH_WORK/ids-$srv.txt
        EVENTD_USER=bench EVENTD_KEY=${key[$srv]} EVENTD_IDS_FILE=${ids[$srv]} \
            bench_seed "$BENCH_DIR/post_theme.lua" "${ids[$srv]}" "$SEED" 60 "${url[$srv]}" "$SAMPLE_BODY" ||
            return 1
    done
    bench_start_nginx "$BENCH_WORK/nginx" "$(cat "$SAMPLE_BODY")" || return 1
    pid[nginx]=$NGINX_PID url[nginx]=http://127.0.0.1:$NGINX_PORT key[nginx]=unused-by-nginx
    ids[nginx]=${ids[interval]:-${ids[always]}}
    read -ra order <<<"$MODES nginx"
    for ((round = 1; round <= ROUNDS; round++)); do
        for ((k = 0; k < ${#order[@]}; k++)); do
            srv=${order[$(((k + round - 1) % ${#order[@]}))]}
            for op in $OPS; do
                EVENTD_USER=bench EVENTD_KEY=${key[$srv]} EVENTD_IDS_FILE=${ids[$srv]} \
                    measure "$srv" "$op" "${pid[$srv]}" "${url[$srv]}" || return 1
                for f in rps p50_us p99_us non2xx err_connect err_read err_write err_timeout requests \
                    cpu_us usr_us sys_us srv_pct cli_pct sc cs; do
                    L[$srv:$op:$f]+="${R[$srv:$op:$f]} "
                done
            done
        done
        for srv in $MODES; do
            for op in $OPS; do
                PR[$srv:$op:rps]+="$(ratio "${R[$srv:$op:rps]}" "${R[nginx:$op:rps]}") "
                PR[$srv:$op:cpu]+="$(ratio "${R[$srv:$op:cpu_us]}" "${R[nginx:$op:cpu_us]}") "
            done
        done
    done
    for k in "${!L[@]}"; do R[$k]=$(median "${L[$k]}"); done
    return $rc
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }'; }
if ((ROUNDS > 1)); then
    run_rounds || FAILED=1
else
    for mode in $MODES; do
        run_eventd "$mode" || FAILED=1
        [[ $mode == interval ]] && { run_nginx || FAILED=1; }
    done
    [[ " $MODES " == *" interval "* ]] || { run_nginx || FAILED=1; }
fi

# ---- summary ----
MISSED=0
echo
REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD -- src 2>/dev/null || echo "+src changes")
echo "$("$EVENTD_BIN" --version 2>/dev/null | head -n 1) (${REV:-no git}, $(basename "$(dirname "$EVENTD_BIN")")) vs nginx $(nginx -v 2>&1 | sed 's/.*\///'), $(nproc) CPUs, server on CPU $BENCH_SERVER_CPU, wrk on CPU $BENCH_CLIENT_CPU, -c$CONNECTIONS, ${DURATION}s"
printf '%-9s %-13s %9s %8s %8s %7s %8s %5s %5s %7s %7s  %s\n' server op req/s p50_ms p99_ms non2xx us_cpu/r srv% cli% rps/ngx cpu/ngx target
for srv in $MODES nginx; do
    for op in $OPS; do
        [[ -n ${R[$srv:$op:rps]:-} ]] || continue
        rr="-" cr="-" verdict=""
        if [[ $srv != nginx ]]; then
            rr=$(ratio "${R[$srv:$op:rps]}" "${R[nginx:$op:rps]:-}")
            cr=$(ratio "${R[$srv:$op:cpu_us]}" "${R[nginx:$op:cpu_us]:-}")
            if [[ -n ${PR[$srv:$op:rps]:-} ]]; then
                rr=$(printf "%.2f" "$(median "${PR[$srv:$op:rps]}")")
                cr=$(printf "%.2f" "$(median "${PR[$srv:$op:cpu]}")")
            fi
        fi
        if [[ $srv == interval && $rr != "-" ]]; then
            if awk -v r="$rr" -v c="$cr" 'BEGIN { exit !(r >= 0.90 && c <= 1.25) }'; then
                verdict="ok (>=0.90x rps, <=1.25x cpu)"
            else
                verdict="MISS (>=0.90x rps, <=1.25x cpu)"
                MISSED=1
            fi
        elif [[ $srv == always && -n ${R[interval:$op:rps]:-} ]]; then
            ai=$(ratio "${R[always:$op:rps]}" "${R[interval:$op:rps]}")
            if awk -v r="$ai" 'BEGIN { exit !(r >= 0.75) }'; then
                verdict="ok (${ai}x interval, >=0.75x)"
            else
                verdict="MISS (${ai}x interval, >=0.75x)"
                MISSED=1
            fi
        fi
        printf '%-9s %-13s %9.0f %8.3f %8.3f %7d %8.2f %5s %5s %7s %7s  %s\n' "$srv" "$op" \
            "${R[$srv:$op:rps]}" "$(awk -v x="${R[$srv:$op:p50_us]}" 'BEGIN{print x/1000}')" \
            "$(awk -v x="${R[$srv:$op:p99_us]}" 'BEGIN{print x/1000}')" "${R[$srv:$op:non2xx]}" \
            "${R[$srv:$op:cpu_us]}" "${R[$srv:$op:srv_pct]}" "${R[$srv:$op:cli_pct]}" "$rr" "$cr" "$verdict"
    done
done
echo "(srv%: server CPU time / wall time; cli%: busy share of the client CPU, near 100 means wrk was the limit)"
((ROUNDS > 1)) && echo "(medians of $ROUNDS rounds; rps/ngx and cpu/ngx: the median of each round's ratio)"

NON2XX=0
for k in "${!R[@]}"; do
    [[ $k == *:non2xx && ${R[$k]} != 0 && $k != nginx:* ]] && NON2XX=1
done
((NON2XX)) && note "warning: some eventd runs had non-2xx answers (see the table)"
if ((FAILED)); then
    note "FAILED: a server did not start, died, or wrk failed (BENCH_KEEP=1 keeps the logs)"
    exit 1
fi
if ((MISSED)); then
    note "some targets were missed"
    ((STRICT)) && exit 3
fi
exit 0
