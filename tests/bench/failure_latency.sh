#!/usr/bin/env bash
# tests/bench/failure_latency.sh: what does a disk that refuses writes cost the loop?
#
# Starts eventd (pinned to CPU 0) on a fresh data directory and creates RECORDS
# themes. Restarts it with every log write failing (EVENTD_FAULT_WRITE_AFTER=0,
# a test build's hook) and --storage-retry-ms RETRY_MS, then for SECONDS keeps
# wrk (CPU 1) posting themes (each answered 503 storage_error) while a probe
# times GET /healthz back to back. Prints the answers wrk got, the /healthz
# latency (p50, p90, p99, max), the ERROR lines in the log (one per episode)
# and the server's CPU per failed request. Before the fix each failure
# replayed the whole log on the loop: 52-100 ms a failure at 270k records.
#
# Usage: tests/bench/failure_latency.sh
# Environment: RECORDS (270000), SECONDS_ (10), RETRY_MS (100), CONNS (16),
# and those of lib.sh (EVENTD_BIN, BENCH_KEEP, ...). Bounded: seeding stops
# after 300 s, the measurement after SECONDS_ + 30 s.
set -uo pipefail

PROG=failure_latency.sh
# shellcheck source=tests/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
case ${1:-} in -h | --help) bench_usage; exit 0 ;; "") ;; *) die "unknown argument $1" ;; esac
RECORDS=${RECORDS:-270000}
SECS=${SECONDS_:-10}
RETRY_MS=${RETRY_MS:-100}
CONNS=${CONNS:-16}

need wrk taskset python3 timeout
BENCH_HOOKS=1 # the fault hooks exist only in builds with the tests
bench_init
bench_binary

data=$BENCH_WORK/data
log=$BENCH_WORK/eventd.log
EVENTD_KEY=$(bench_user_add "$data" bench) || exit 1
export EVENTD_USER=bench EVENTD_KEY
bench_start_eventd "$data" "$log" --fsync interval --compact-ratio 0 || exit 1
url="http://127.0.0.1:$EVENTD_PORT"
bench_seed "$BENCH_DIR/post_theme.lua" "$BENCH_WORK/ids.txt" "$RECORDS" 300 "$url" || exit 1
bench_stop "$EVENTD_PID" || die "eventd did not stop cleanly"
note "created $RECORDS themes; restarting with every log write failing"

log2=$BENCH_WORK/eventd-failing.log
EVENTD_FAULT_WRITE_AFTER=0 bench_start_eventd "$data" "$log2" --fsync interval \
    --compact-ratio 0 --storage-retry-ms "$RETRY_MS" || exit 1
url="http://127.0.0.1:$EVENTD_PORT"
before=$(bench_cpu_ticks "$EVENTD_PID")
bench_wrk "$BENCH_WORK/wrk.txt" "$BENCH_DIR/post_theme.lua" "$url" "$SECS" "$CONNS" &
wrk_pid=$!
timeout -k 5 $((SECS + 30)) taskset -c "$BENCH_CLIENT_CPU" python3 - "$EVENTD_PORT" "$SECS" <<'PY'
import socket, sys, time
port, secs = int(sys.argv[1]), float(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
lat, codes, end = [], {}, time.monotonic() + secs
while time.monotonic() < end:
    t0 = time.monotonic()
    s.sendall(req)
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(4096)
    head, _, body = buf.partition(b"\r\n\r\n")
    n = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1])
    while len(body) < n:
        body += s.recv(4096)
    lat.append((time.monotonic() - t0) * 1000)
    code = head.split(b" ")[1].decode()
    codes[code] = codes.get(code, 0) + 1
    time.sleep(0.002)
lat.sort()
p = lambda q: lat[min(len(lat) - 1, int(len(lat) * q))]
print("healthz during the failure: %d probes %s; latency ms p50 %.2f p90 %.2f p99 %.2f max %.2f"
      % (len(lat), codes, p(0.5), p(0.9), p(0.99), lat[-1]))
PY
wait "$wrk_pid"
after=$(bench_cpu_ticks "$EVENTD_PID")
reqs=$(awk '/ requests in / && $1 ~ /^[0-9]+$/ { print $1 }' "$BENCH_WORK/wrk.txt")
non2xx=$(awk '/Non-2xx/ { print $NF }' "$BENCH_WORK/wrk.txt")
ticks=$(awk -v a="$before" -v b="$after" 'BEGIN { split(a, x, " "); split(b, y, " "); print (y[1] + y[2]) - (x[1] + x[2]) }')
hz=$(getconf CLK_TCK)
echo "wrk: $reqs requests in ${SECS}s, non-2xx $non2xx; server CPU $(awk -v t="$ticks" -v hz="$hz" -v n="$reqs" 'BEGIN { printf "%.1f", t / hz * 1e6 / (n ? n : 1) }') us per request"
echo "error lines in the log: $(grep -c ' error ' "$log2"); retry attempts so far: $((SECS * 1000 / RETRY_MS)) or so"
grep ' error ' "$log2" | head -n 2
bench_stop "$EVENTD_PID"
exit 0
