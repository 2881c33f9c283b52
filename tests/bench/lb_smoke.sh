#!/usr/bin/env bash
# tests/bench/lb_smoke.sh: docker/haproxy.cfg in front of one local eventd.
#
# Docker cannot run everywhere, so this checks the load-balancer setup of
# docker/ without it: the configuration is validated (haproxy -c), then
# HAProxy runs it unchanged (addresses through LB_BIND, EVENTD_SHARD1..3,
# LB_RUN_DIR and LB_ADMIN_SOCKET, which the config reads with
# compose-friendly defaults) with ONE eventd behind all three shard entries,
# everything on 127.0.0.1. (Three real shards, placement and the rolling
# restart are tests/lb/test_lb.py's.) It checks that the health checks mark
# the shards up, that /healthz and authenticated calls pass through, that
# docker/healthcheck.sh (the image's HEALTHCHECK) agrees, that the runtime
# API drains and readies a shard, that SIGTERM stops eventd cleanly and
# HAProxy marks it down and answers 503, and that a restarted eventd is
# marked up again with the data it had.
#
# Usage: tests/bench/lb_smoke.sh      (EVENTD_BIN=... to skip the build)
# Exit status 0 when every check passed, 1 otherwise. Bounded: about 20 s.
set -uo pipefail

PROG=lb_smoke.sh
# shellcheck source=tests/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need haproxy curl python3 taskset timeout
bench_init
bench_binary

CFG=$ROOT/docker/haproxy.cfg
FAILS=0
pass() { echo "ok   - $*"; }
fail() {
    echo "FAIL - $*"
    FAILS=$((FAILS + 1))
}
check() { # check DESCRIPTION EXPECTED ACTUAL
    if [[ $2 == "$3" ]]; then pass "$1"; else fail "$1: expected '$2', got '$3'"; fi
}

# HTTP through the balancer: http METHOD PATH [curl args...]; prints the status, body in $BODY_FILE.
BODY_FILE=$BENCH_WORK/body
http() {
    local method=$1 path=$2
    shift 2
    curl -sS -m 5 -o "$BODY_FILE" -w '%{http_code}' -X "$method" "$@" "http://127.0.0.1:$LB_PORT$path" 2>>"$BENCH_WORK/curl.log" || true
}

# One command to HAProxy's runtime API (what docker/README.md does with socat).
admin() {
    python3 - "$ADMIN" "$1" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(2)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode())
EOF
}

# "status check_status" of route/shard1 from the runtime API.
server_state() {
    admin "show stat" | python3 -c '
import csv, sys
data = sys.stdin.read()
rows = list(csv.reader(data.lstrip("# ").splitlines()))
head = rows[0]
for r in rows[1:]:
    if len(r) == len(head):
        d = dict(zip(head, r))
        if d["pxname"] == "route" and d["svname"] == "shard1":
            print(d["status"], d["check_status"])
'
}

wait_state() { # wait_state WANT SECONDS: until the server's status starts with WANT
    local want=$1 secs=$2 i st=""
    for ((i = 0; i < secs * 10; i++)); do
        st=$(server_state 2>/dev/null)
        [[ $st == "$want"* ]] && { echo "$st"; return 0; }
        sleep 0.1
    done
    echo "$st"
    return 1
}

# ---- 1. the configuration as shipped ----
if out=$(LB_RUN_DIR=$BENCH_WORK LB_ADMIN_SOCKET=$BENCH_WORK/admin.sock EVENTD_SHARD1=127.0.0.1:1 \
    EVENTD_SHARD2=127.0.0.1:2 EVENTD_SHARD3=127.0.0.1:3 haproxy -c -f "$CFG" 2>&1); then
    pass "haproxy -c -f docker/haproxy.cfg"
else
    fail "haproxy -c -f docker/haproxy.cfg"
    echo "$out" >&2
    exit 1
fi

# ---- 2. eventd and haproxy on loopback ----
data=$BENCH_WORK/data
KEY=$(bench_user_add "$data" smoke) || exit 1
bench_start_eventd "$data" "$BENCH_WORK/eventd.log" || exit 1
EPORT=$EVENTD_PORT
EPID=$EVENTD_PID

ADMIN=$BENCH_WORK/admin.sock
for ((i = 0; i < 5; i++)); do
    LB_PORT=$(bench_free_port)
    LB_BIND=127.0.0.1:$LB_PORT LB_RUN_DIR=$BENCH_WORK LB_ADMIN_SOCKET=$ADMIN \
        EVENTD_SHARD1=127.0.0.1:$EPORT EVENTD_SHARD2=127.0.0.1:$EPORT EVENTD_SHARD3=127.0.0.1:$EPORT \
        haproxy -db -f "$CFG" >"$BENCH_WORK/haproxy.log" 2>&1 &
    HPID=$!
    bench_track "$HPID"
    for ((j = 0; j < 30; j++)); do
        [[ -S $ADMIN ]] && (exec 3<>"/dev/tcp/127.0.0.1/$LB_PORT") 2>/dev/null && break 2
        kill -0 "$HPID" 2>/dev/null || break
        sleep 0.1
    done
    bench_stop "$HPID" 2
done
kill -0 "$HPID" 2>/dev/null || { tail -n 5 "$BENCH_WORK/haproxy.log" >&2; die "haproxy did not start"; }
note "eventd on 127.0.0.1:$EPORT, haproxy on 127.0.0.1:$LB_PORT"

st=$(wait_state "UP L7OK" 10) && pass "health check marks eventd up ($st)" || fail "health check: state '$st'"

# ---- 3. requests through the balancer ----
code=$(http GET /healthz)
check "GET /healthz through haproxy" "200 {\"Status\":\"ok\"}" "$code $(cat "$BODY_FILE")"

code=$(http POST /v2/theme -H 'Cache-Control: no-cache' -H 'Content-Type: application/json' \
    -d '{"Theme":{"Name":"LB smoke","PageBackgroundRGB":"ffffff"}}')
check "POST /v2/theme without credentials: 401" 401 "$code"

AUTH=(-u "smoke:$KEY")
code=$(http POST /v2/theme "${AUTH[@]}" -H 'Cache-Control: no-cache' -H 'Content-Type: application/json' \
    -d '{"Theme":{"Name":"LB smoke","PageBackgroundRGB":"ffffff"}}')
ID=$(sed -n 's/.*"ID":\([0-9][0-9]*\).*/\1/p' "$BODY_FILE")
if [[ $code == 200 && -n $ID ]]; then pass "authenticated POST /v2/theme: 200, ID $ID"; else
    fail "authenticated POST /v2/theme: $code $(head -c 200 "$BODY_FILE")"
    ID=0
fi
code=$(http PUT "/v2/theme/$ID" "${AUTH[@]}" -d '{"Theme":{"Status":"archived"}}')
check "PUT /v2/theme/$ID: 204" 204 "$code"
code=$(http GET "/v2/theme/$ID" "${AUTH[@]}")
grep -q '"Status":"archived"' "$BODY_FILE" && [[ $code == 200 ]] &&
    pass "GET /v2/theme/$ID shows the update" || fail "GET /v2/theme/$ID: $code $(head -c 200 "$BODY_FILE")"
code=$(http POST /v2/address "${AUTH[@]}" -H 'Cache-Control: no-cache' \
    -d '{"Address":{"Name":"Hall","City":"Berlin","Lon":13.4,"Lat":52.5,"ShowMap":true}}')
check "authenticated POST /v2/address: 200" 200 "$code"

# ---- 4. the image's HEALTHCHECK script ----
EVENTD_LISTEN=0.0.0.0:$EPORT "$ROOT/docker/healthcheck.sh" >/dev/null &&
    pass "docker/healthcheck.sh: healthy" || fail "docker/healthcheck.sh against a running eventd"

# ---- 5. drain and ready through the runtime API ----
admin "set server route/shard1 state drain" >/dev/null
st=$(wait_state DRAIN 5) && pass "runtime API: set server route/shard1 state drain ($st)" || fail "drain: '$st'"
admin "set server route/shard1 state ready" >/dev/null
st=$(wait_state UP 5) && pass "runtime API: state ready ($st)" || fail "ready: '$st'"

# ---- 6. graceful stop: SIGTERM, exit 0, marked down, 503 ----
t0=$(date +%s.%N)
bench_stop "$EPID" 15
rc=$?
check "eventd exits 0 on SIGTERM" 0 "$rc"
st=$(wait_state DOWN 10) && pass "haproxy marks the stopped eventd down after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s" ||
    fail "stopped eventd not marked down: '$st'"
code=$(http GET /healthz)
check "no server: haproxy answers 503" 503 "$code"
EVENTD_LISTEN=0.0.0.0:$EPORT "$ROOT/docker/healthcheck.sh" >/dev/null &&
    fail "docker/healthcheck.sh says healthy with eventd stopped" || pass "docker/healthcheck.sh: unhealthy when stopped"

# ---- 7. restart on the same port: up again, data kept ----
"$EVENTD_BIN" serve --no-demo-user --listen "127.0.0.1:$EPORT" --data "$data" \
    >"$BENCH_WORK/eventd2.log.out" 2>"$BENCH_WORK/eventd2.log" &
EPID=$!
bench_track "$EPID"
st=$(wait_state "UP" 15) && pass "restarted eventd marked up again ($st)" || fail "restarted eventd: '$st'"
code=$(http GET "/v2/theme/$ID" "${AUTH[@]}")
grep -q '"Status":"archived"' "$BODY_FILE" && [[ $code == 200 ]] &&
    pass "theme $ID survived the restart" || fail "after restart GET /v2/theme/$ID: $code"

grep -q ' 5[0-9][0-9] ' "$BENCH_WORK/haproxy.log" && note "haproxy logged 5xx answers (expected only in step 6)"
if ((FAILS)); then
    note "$FAILS check(s) failed; haproxy log tail:"
    tail -n 10 "$BENCH_WORK/haproxy.log" >&2
    exit 1
fi
note "all checks passed"
exit 0
