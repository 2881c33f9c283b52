# lib.sh: shell helpers shared by the scripts in tests/bench/ (sourced, not run).
#
# Every process a script starts goes through bench_track so that one EXIT
# trap (bench_cleanup) stops exactly those processes, by pid, and removes the
# scratch directory. Everything listens on 127.0.0.1 only.
#
# Settings read from the environment:
#   EVENTD_BIN            use this binary instead of building one (e.g. build/eventd)
#   EVENTD_BENCH_BUILD    build directory for the Release binary (default: <repo>/build-bench)
#   BENCH_SERVER_CPU      CPU the servers are pinned to (default 0)
#   BENCH_CLIENT_CPU      CPU the load generator is pinned to (default 1)
#   BENCH_KEEP=1          keep the scratch directory (data, logs) for inspection
#   NGINX_SCHED_BATCH=1   run nginx under SCHED_BATCH too (chrt -b 0), to see what the
#                         shards' --sched-batch would give the reference

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/../.." && pwd)
PROG=${PROG:-$(basename "$0")}
BENCH_SERVER_CPU=${BENCH_SERVER_CPU:-0}
BENCH_CLIENT_CPU=${BENCH_CLIENT_CPU:-1}
# shellcheck disable=SC2034 # used by the scripts that source this file
CLK_TCK=$(getconf CLK_TCK)

BENCH_PIDS=()
BENCH_WORK=""

note() { echo "[$PROG] $*" >&2; }
# Prints the calling script's header comment (its --help).
bench_usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() {
    echo "[$PROG] error: $*" >&2
    exit 1
}

need() {
    local t
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || die "'$t' not found (Debian: see deps/install.sh)"
    done
}

bench_track() { BENCH_PIDS+=("$1"); }

# Stops one process we started: SIGTERM, then SIGKILL after $2 seconds (default 15).
# Prints nothing; returns the process's exit status (128+signal if killed).
bench_stop() {
    local pid=$1 grace=${2:-15} i
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return $?; }
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < grace * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}

bench_cleanup() {
    local i
    for ((i = ${#BENCH_PIDS[@]} - 1; i >= 0; i--)); do
        bench_stop "${BENCH_PIDS[i]}" 5 || true
    done
    BENCH_PIDS=()
    if [[ -n $BENCH_WORK && -d $BENCH_WORK ]]; then
        if [[ ${BENCH_KEEP:-0} == 1 ]]; then
            note "kept $BENCH_WORK"
        else
            rm -rf "$BENCH_WORK"
        fi
    fi
}

# Creates the scratch directory and installs the traps.
bench_init() {
    BENCH_WORK=$(mktemp -d "${TMPDIR:-/tmp}/eventd-bench.XXXXXX")
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# Sets EVENTD_BIN: the given binary, or a Release build in its own directory.
bench_binary() {
    if [[ -n ${EVENTD_BIN:-} ]]; then
        [[ -x $EVENTD_BIN ]] || die "EVENTD_BIN=$EVENTD_BIN is not executable"
        return 0
    fi
    need cmake
    # BENCH_HOOKS=1: a build with the tests' fault hooks (EVENTD_FAULT_*), in its own directory.
    local tests=OFF dir=${EVENTD_BENCH_BUILD:-$ROOT/build-bench}
    [[ ${BENCH_HOOKS:-0} == 1 ]] && tests=ON dir=${EVENTD_BENCH_BUILD:-$ROOT/build-bench-hooks}
    note "building Release in $dir"
    if ! { cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DEVENTD_TESTS=$tests &&
        cmake --build "$dir" -j2 --target eventd; } >"$BENCH_WORK/build.log" 2>&1; then
        tail -n 30 "$BENCH_WORK/build.log" >&2
        die "the Release build failed"
    fi
    EVENTD_BIN=$dir/eventd
}

# A TCP port free on 127.0.0.1 right now.
bench_free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# Creates user $2 in data directory $1 and prints its key (the last stdout line).
bench_user_add() {
    local key
    key=$("$EVENTD_BIN" user add "$2" --data "$1" 2>>"$BENCH_WORK/user.log" | tail -n 1) ||
        die "eventd user add $2 failed (see $BENCH_WORK/user.log)"
    [[ -n $key ]] || die "eventd user add printed no key"
    echo "$key"
}

# Starts eventd pinned to the server CPU on a port the kernel picks:
#   bench_start_eventd DATA_DIR LOG_FILE [extra flags...]
# Sets EVENTD_PID and EVENTD_PORT. Returns 1 (log tail on stderr) if it does not come up.
bench_start_eventd() {
    local data=$1 log=$2 i
    shift 2
    # One loopback client opens up to 1024 connections: no per-address cap.
    # One user creates a few hundred thousand records in a run: no quota (its
    # 403 answers would be counted as cheap non-2xx requests).
    taskset -c "$BENCH_SERVER_CPU" "$EVENTD_BIN" serve --no-demo-user \
        --max-connections-per-address 0 --max-records-per-user 0 --max-bytes-per-user 0 --listen 127.0.0.1:0 --data "$data" "$@" >"$log.out" 2>"$log" &
    EVENTD_PID=$!
    bench_track "$EVENTD_PID"
    EVENTD_PORT=""
    for ((i = 0; i < 150; i++)); do
        EVENTD_PORT=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' "$log" 2>/dev/null | head -n 1)
        [[ -n $EVENTD_PORT ]] && return 0
        kill -0 "$EVENTD_PID" 2>/dev/null || break
        sleep 0.1
    done
    note "eventd did not start; its log:"
    tail -n 20 "$log" >&2
    return 1
}

# "utime stime" of a process (all its threads), in clock ticks (CLK_TCK a second).
bench_cpu_ticks() {
    local rest
    rest=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) && [[ -n $rest ]] || return 1
    awk '{ print $12, $13 }' <<<"$rest"
}

# Context switches (voluntary + involuntary) of every thread of PID so far.
bench_ctx_switches() {
    cat /proc/"$1"/task/*/status 2>/dev/null |
        awk '/^(non)?voluntary_ctxt_switches:/ { n += $2 } END { print n + 0 }'
}

# "busy total" jiffies of one CPU from /proc/stat (busy = all but idle and iowait).
bench_cpu_busy() {
    awk -v c="cpu$1" '$1 == c { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat
}

# Runs wrk pinned to the client CPU, bounded in time; its output goes to $1.
#   bench_wrk OUT SCRIPT URL DURATION_S CONNECTIONS
bench_wrk() {
    local out=$1 script=$2 url=$3 dur=$4 conns=$5
    timeout -k 5 $((dur + 30)) taskset -c "$BENCH_CLIENT_CPU" \
        wrk -t1 -c"$conns" -d"${dur}s" --latency -s "$script" "$url" >"$out" 2>&1
}

# Value of key=$2 in the "BENCH ..." line of wrk output $1.
bench_field() {
    sed -n 's/^BENCH .*[ ]'"$2"'=\([^ ]*\).*/\1/p' "$1" | tail -n 1
}

# Runs a wrk script until it has had $3 answers (or $4 seconds pass), appending
# the "ID" of each 2xx answer to $2. Fails at the first non-2xx answer.
#   bench_seed SCRIPT IDS_FILE COUNT MAX_SECONDS URL [BODY_OUT]
bench_seed() {
    local script=$1 ids=$2 count=$3 max=$4 url=$5 body=${6:-} pid i
    : >"$ids"
    EVENTD_BENCH_MAX=$count EVENTD_IDS_OUT=$ids EVENTD_BODY_OUT=$body \
        timeout -k 5 $((max + 10)) taskset -c "$BENCH_CLIENT_CPU" \
        wrk -t1 -c16 -d"${max}s" -s "$script" "$url" >"$ids.wrk" 2>&1 &
    pid=$!
    bench_track "$pid"
    # wrk sleeps for its whole -d even when the script stops its thread: watch
    # the ids file for the script's "#done"/"#error" line and interrupt wrk.
    for ((i = 0; i < max * 10; i++)); do
        grep -q '^#' "$ids" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -INT "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    if ! grep -q '^#done' "$ids"; then
        note "$(basename "$script") did not get $count answers in ${max}s:"
        grep '^#error' "$ids" >&2
        tail -n 3 "$ids.wrk" >&2
        return 1
    fi
    sed -i '/^#/d' "$ids"
}

# Starts nginx (one process, no master, pinned to the server CPU) answering
# every request with 200 and the fixed JSON body $2, on a port of its own:
#   bench_start_nginx DIR BODY
# Sets NGINX_PID and NGINX_PORT. Returns 1 (error log tail on stderr) if it does not come up.
bench_start_nginx() {
    local dir=$1 body=$2 i j up
    mkdir -p "$dir/tmp"
    # Inside nginx's single quotes, ' and \ need escaping and $ would start a variable.
    body=$(printf '%s' "$body" | sed "s/[\\\\']/\\\\&/g; s/\\\$/_/g")
    NGINX_PID="" NGINX_PORT=""
    for ((i = 0; i < 5; i++)); do
        NGINX_PORT=$(bench_free_port)
        cat >"$dir/nginx.conf" <<EOF
# Generated by tests/bench/lib.sh: one process, a fixed JSON answer.
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    server_tokens off;
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    default_type application/json;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / { return 200 '$body'; }
    }
}
EOF
        local sched=()
        [[ ${NGINX_SCHED_BATCH:-0} == 1 ]] && sched=(chrt -b 0)
        taskset -c "$BENCH_SERVER_CPU" "${sched[@]}" nginx -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf" \
            >"$dir/stdout.log" 2>&1 &
        NGINX_PID=$!
        bench_track "$NGINX_PID"
        up=0
        for ((j = 0; j < 50; j++)); do
            kill -0 "$NGINX_PID" 2>/dev/null || break
            if (exec 3<>"/dev/tcp/127.0.0.1/$NGINX_PORT") 2>/dev/null; then
                up=1
                break
            fi
            sleep 0.1
        done
        ((up)) && return 0
        bench_stop "$NGINX_PID" 2
    done
    note "nginx did not start:"
    tail -n 5 "$dir/error.log" >&2
    return 1
}
