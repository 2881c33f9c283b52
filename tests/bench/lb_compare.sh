#!/usr/bin/env bash
# tests/bench/lb_compare.sh: the cost of the balancer path, in one run (issue 18's table).
#
# Rows, each measured with the same wrk script (tests/bench/lb_ops.lua: USERS
# users, one theme each, requests spread over them):
#   eventd            one unsharded eventd, directly
#   nginx             nginx directly: one process, a fixed JSON answer as long
#                     as eventd's POST /v2/theme answer (tests/bench/lib.sh)
#   nginx+minimal     nginx behind a minimal one-pass HAProxy with pooled
#                     keep-alive connections ("balance hash" on the Basic-auth
#                     username, hash-type consistent, "http-reuse safe"), three
#                     server lines all pointing at that nginx
#   nginx3+minimal    three nginx processes, one per server line of that
#                     minimal HAProxy (not in the default ROWS): the shards'
#                     shape, four processes on the server CPU instead of two
#   shards+minimal    three eventd shards behind that minimal HAProxy
#   shards+shipped    three eventd shards behind docker/haproxy.cfg as shipped
#   shards+variant    the same shards behind VARIANT_CFG (not in the default
#                     ROWS: a variant of the shipped file, to compare the two
#                     in one run)
# and for each, the operations of OPS: get (GET /v2/theme/:id), put, post
# (POST /v2/theme), post_key (POST with an Idempotency-Key of its own), post_nonce
# (post_key's requests with the key under a header nobody reads: its control).
# Every server (eventd, nginx, HAProxy) is pinned to CPU BENCH_SERVER_CPU,
# wrk (-t1) to BENCH_CLIENT_CPU. Every eventd runs with --fsync interval.
# HAProxy's request log is off in every row (the shipped file is copied with
# "no log" added to its frontend: the only change). CPU per request is the
# utime+stime (/proc/PID/stat) of HAProxy and every backend process of the
# row, before and after each wrk run, divided by its requests.
#
# Usage: tests/bench/lb_compare.sh
# Environment: DURATION (s per row, default 5), CONNECTIONS (default 64),
# USERS (default 300), OPS (default "get put post post_key"), ROWS (default
# all five, by name), ROUNDS (default 1: with more, every setup stays up and
# the rows take turns, DURATION seconds each, ROUNDS times; then the medians
# and each round's ratio to nginx+minimal, the median of those ratios), SHARD_ARGS (more
# flags for the three shards), SHIPPED_CFG (a variant of the shipped file to measure
# instead, its shards.map next to it), and those of lib.sh (EVENTD_BIN to skip the build,
# BENCH_SERVER_CPU, BENCH_CLIENT_CPU, BENCH_KEEP=1).
# The shards run with --sched-batch and trust the balancer (--trusted-proxies), as
# docker/compose.yaml runs them (eventd direct and nginx with the default policy);
# SHARD_ARGS="--no-sched-batch" measures them without it.
# Exit status: 0 when every row ran, 1 otherwise. Loopback only.
set -uo pipefail

PROG=lb_compare.sh
# shellcheck source=tests/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ ${1:-} == -h || ${1:-} == --help ]] && { bench_usage; exit 0; }
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-64}
USERS=${USERS:-300}
OPS=${OPS:-get put post post_key}
ROWS=${ROWS:-eventd nginx nginx+minimal shards+minimal shards+shipped}
ROUNDS=${ROUNDS:-1}
need wrk nginx haproxy taskset python3 timeout
bench_init
bench_binary
note "binary: $EVENTD_BIN; ${DURATION}s per row, -c$CONNECTIONS, $USERS users"
FAILED=0
RESULTS=$BENCH_WORK/results.txt
: >"$RESULTS"

# ---- users: every user on the unsharded eventd, and on the shard the shipped file names ----
for ((i = 0; i < USERS; i++)); do printf 'bench%04d\n' "$i"; done >"$BENCH_WORK/names"
python3 "$ROOT/docker/placement.py" --config "$ROOT/docker/haproxy.cfg" <"$BENCH_WORK/names" \
    >"$BENCH_WORK/placement" || die "docker/placement.py failed"
add_users() { # add_users DATA NODE NAMES_FILE -> "name key" lines on stdout
    local data=$1 node=$2 name key
    while read -r name; do
        key=$("$EVENTD_BIN" user add "$name" --data "$data" --node-id "$node" 2>>"$BENCH_WORK/user.log" |
            tail -n 1) || die "eventd user add $name failed (see $BENCH_WORK/user.log)"
        echo "$name $key"
    done <"$3"
}
add_users "$BENCH_WORK/direct" 0 "$BENCH_WORK/names" >"$BENCH_WORK/keys-direct"
for n in 1 2 3; do
    awk -v s="shard$n" '$2 == s { print $1 }' "$BENCH_WORK/placement" >"$BENCH_WORK/names$n"
    add_users "$BENCH_WORK/shard$n" "$n" "$BENCH_WORK/names$n" >"$BENCH_WORK/keys$n"
done

# One theme per user, created directly on its server: seed PORT KEYS OUT [BODY_OUT]
# writes lb_ops.lua's requests file (and the first answer's body).
seed() {
    python3 - "$@" <<'EOF'
import base64, http.client, json, sys
port, keys, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
body_out = sys.argv[4] if len(sys.argv) > 4 else None
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
with open(keys) as f, open(out, "a") as o:
    for line in f:
        name, key = line.split()
        cred = base64.b64encode(("%s:%s" % (name, key)).encode()).decode()
        c.request("POST", "/v2/theme", body=json.dumps({"Theme": {"Name": name}}),
                  headers={"Authorization": "Basic " + cred, "Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            sys.exit("seed %s: %d %s" % (name, r.status, data[:200]))
        if body_out:
            open(body_out, "wb").write(data)
            body_out = None
        o.write("%s %d\n" % (cred, json.loads(data)["Result"]["ID"]))
EOF
}

# ---- one measurement: measure ROW OP URL REQUESTS_FILE PID... ----
measure() {
    local row=$1 op=$2 url=$3 reqs=$4
    shift 4
    local pids=("$@") out="$BENCH_WORK/$row-$op.wrk" t0=0 t1=0 h0=0 h1=0 s0=0 s1=0 p u k
    for p in "${pids[@]}"; do
        s0=$((s0 + $(bench_ctx_switches "$p")))
        read -r u k < <(bench_cpu_ticks "$p") || { note "$row: pid $p is not running"; return 1; }
        t0=$((t0 + u + k))
        [[ $p == "${HAPROXY_PID:-none}" ]] && h0=$((u + k))
    done
    if ! EVENTD_LB_REQUESTS=$reqs EVENTD_LB_OPS=$op bench_wrk "$out" "$BENCH_DIR/lb_ops.lua" "$url" \
        "$DURATION" "$CONNECTIONS"; then
        note "$row $op: wrk failed:"
        tail -n 5 "$out" >&2
        return 1
    fi
    for p in "${pids[@]}"; do
        read -r u k < <(bench_cpu_ticks "$p") || { note "$row: pid $p died during $op"; return 1; }
        t1=$((t1 + u + k))
        s1=$((s1 + $(bench_ctx_switches "$p")))
        [[ $p == "${HAPROXY_PID:-none}" ]] && h1=$((u + k))
    done
    local req rps p99 non2xx errs
    req=$(bench_field "$out" requests)
    rps=$(bench_field "$out" rps)
    p99=$(bench_field "$out" p99_us)
    non2xx=$(bench_field "$out" non2xx)
    errs=$(($(bench_field "$out" err_connect) + $(bench_field "$out" err_read) + \
        $(bench_field "$out" err_write) + $(bench_field "$out" err_timeout)))
    [[ -n $req && $req -gt 0 ]] || { note "$row $op: no requests"; tail -n 5 "$out" >&2; return 1; }
    printf '%-15s %-9s %9.0f %9.1f %9.1f %9.3f %7d %6d %6.2f\n' "$row" "$op" "$rps" \
        "$(awk -v t=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$req" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')" \
        "$(awk -v t=$((h1 - h0)) -v hz="$CLK_TCK" -v n="$req" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')" \
        "$(awk -v x="$p99" 'BEGIN { print x / 1000 }')" "$non2xx" "$errs" \
        "$(awk -v s=$((s1 - s0)) -v n="$req" 'BEGIN { print s / n }')" | tee -a "$RESULTS"
}

# HAProxy on $1 (a configuration) with the shards' or nginx's addresses in the
# environment; sets HAPROXY_PID and HAPROXY_PORT.
start_haproxy() {
    local cfg=$1 i j
    for ((i = 0; i < 5; i++)); do
        HAPROXY_PORT=$(bench_free_port)
        LB_BIND=127.0.0.1:$HAPROXY_PORT LB_ADMIN_SOCKET=$BENCH_WORK/admin-$i-$RANDOM.sock \
            taskset -c "$BENCH_SERVER_CPU" haproxy -db -f "$cfg" >>"$BENCH_WORK/haproxy.log" 2>&1 &
        HAPROXY_PID=$!
        bench_track "$HAPROXY_PID"
        for ((j = 0; j < 100; j++)); do
            kill -0 "$HAPROXY_PID" 2>/dev/null || break
            [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HAPROXY_PORT/healthz") != 000 ]] &&
                return 0
            sleep 0.1
        done
        bench_stop "$HAPROXY_PID" 2
    done
    tail -n 5 "$BENCH_WORK/haproxy.log" >&2
    die "haproxy did not start with $cfg"
}

# The minimal one-pass keep-alive HAProxy of the issue's table.
MINIMAL=$BENCH_WORK/minimal.cfg
cat >"$MINIMAL" <<'EOF'
defaults
    mode http
    timeout connect 3s
    timeout client 30s
    timeout server 30s
frontend api
    bind "${LB_BIND}"
    http-request set-var(txn.user) req.hdr(authorization),word(2,' '),b64dec,field(1,:)
    default_backend route
backend route
    balance hash var(txn.user)
    hash-type consistent
    http-reuse safe
    server shard1 "${EVENTD_SHARD1}" id 1 weight 256
    server shard2 "${EVENTD_SHARD2}" id 2 weight 256
    server shard3 "${EVENTD_SHARD3}" id 3 weight 256
EOF
# The shipped file (or SHIPPED_CFG, a variant with its shards.map next to it)
# with its request log off, and its map.
SHIPPED_CFG=${SHIPPED_CFG:-$ROOT/docker/haproxy.cfg}
mkdir -p "$BENCH_WORK/shipped"
cp "$(dirname "$SHIPPED_CFG")/shards.map" "$BENCH_WORK/shipped/"
sed 's/^frontend api$/frontend api\n    no log/' "$SHIPPED_CFG" >"$BENCH_WORK/shipped/haproxy.cfg"
grep -q '^    no log$' "$BENCH_WORK/shipped/haproxy.cfg" || die "could not turn the shipped file's log off"

want() { [[ " $ROWS " == *" $1 "* ]]; }
if want shards+variant; then
    [[ -f ${VARIANT_CFG:-} ]] || die "row shards+variant needs VARIANT_CFG, a variant of the shipped file"
    mkdir -p "$BENCH_WORK/variant"
    cp "$(dirname "$VARIANT_CFG")/shards.map" "$BENCH_WORK/variant/"
    sed 's/^frontend api$/frontend api\n    no log/' "$VARIANT_CFG" >"$BENCH_WORK/variant/haproxy.cfg"
fi
run_ops() { # run_ops ROW URL REQUESTS PID...
    local row=$1 url=$2 reqs=$3 op
    shift 3
    for op in $OPS; do
        measure "$row" "$op" "$url" "$reqs" "$@" || { FAILED=1; return 1; }
    done
}

printf '%-15s %-9s %9s %9s %9s %9s %7s %6s %6s\n' row op req/s us_cpu/r of_which_lb p99_ms non2xx errors cs/r | tee -a "$RESULTS"
BODY=$BENCH_WORK/answer.json
# Every setup that a row needs is started first and stays up; the rows then
# take turns, ROUNDS times (the order rotating each round), so that a noisy
# neighbour's slow minutes fall on every row alike. An idle setup costs
# nothing but the shipped file's health checks (3 a second).
declare -A ROW_URL ROW_REQS ROW_PIDS ROW_LB
# ---- eventd direct ----
bench_start_eventd "$BENCH_WORK/direct" "$BENCH_WORK/direct.log" --fsync interval || die "eventd did not start"
seed "$EVENTD_PORT" "$BENCH_WORK/keys-direct" "$BENCH_WORK/direct.req" "$BODY" || die "seeding failed"
ROW_URL[eventd]=http://127.0.0.1:$EVENTD_PORT ROW_REQS[eventd]=$BENCH_WORK/direct.req
ROW_PIDS[eventd]=$EVENTD_PID ROW_LB[eventd]=""

# ---- nginx, directly and behind the minimal HAProxy ----
if want nginx || want nginx+minimal; then
    bench_start_nginx "$BENCH_WORK/nginx" "$(cat "$BODY")" || die "nginx did not start"
    note "nginx answers $(wc -c <"$BODY") bytes"
    ROW_URL[nginx]=http://127.0.0.1:$NGINX_PORT ROW_REQS[nginx]=$BENCH_WORK/direct.req
    ROW_PIDS[nginx]=$NGINX_PID ROW_LB[nginx]=""
    if want nginx+minimal; then
        EVENTD_SHARD1=127.0.0.1:$NGINX_PORT EVENTD_SHARD2=127.0.0.1:$NGINX_PORT \
            EVENTD_SHARD3=127.0.0.1:$NGINX_PORT start_haproxy "$MINIMAL"
        ROW_URL[nginx+minimal]=http://127.0.0.1:$HAPROXY_PORT ROW_REQS[nginx+minimal]=$BENCH_WORK/direct.req
        ROW_PIDS[nginx+minimal]="$HAPROXY_PID $NGINX_PID" ROW_LB[nginx+minimal]=$HAPROXY_PID
    fi
fi

# ---- three nginx processes, one per server line of the minimal HAProxy ----
if want nginx3+minimal; then
    NGINX3_PIDS=()
    for n in 1 2 3; do
        bench_start_nginx "$BENCH_WORK/nginx-$n" "$(cat "$BODY")" || die "nginx $n did not start"
        NGINX3_PIDS+=("$NGINX_PID")
        declare "NGINX3_PORT$n=$NGINX_PORT"
    done
    EVENTD_SHARD1=127.0.0.1:$NGINX3_PORT1 EVENTD_SHARD2=127.0.0.1:$NGINX3_PORT2 \
        EVENTD_SHARD3=127.0.0.1:$NGINX3_PORT3 start_haproxy "$MINIMAL"
    ROW_URL[nginx3+minimal]=http://127.0.0.1:$HAPROXY_PORT ROW_REQS[nginx3+minimal]=$BENCH_WORK/direct.req
    ROW_PIDS[nginx3+minimal]="$HAPROXY_PID ${NGINX3_PIDS[*]}" ROW_LB[nginx3+minimal]=$HAPROXY_PID
fi

# ---- three shards, behind the minimal HAProxy and behind the shipped file ----
if want shards+minimal || want shards+shipped || want shards+variant; then
    SHARD_PIDS=()
    for n in 1 2 3; do
        # shellcheck disable=SC2086 # SHARD_ARGS: any number of flags
        bench_start_eventd "$BENCH_WORK/shard$n" "$BENCH_WORK/shard$n.log" --fsync interval \
            --node-id "$n" --sched-batch --trusted-proxies 127.0.0.1/32 ${SHARD_ARGS:-} || die "shard $n did not start"
        SHARD_PIDS+=("$EVENTD_PID")
        export "EVENTD_SHARD$n=127.0.0.1:$EVENTD_PORT"
        seed "$EVENTD_PORT" "$BENCH_WORK/keys$n" "$BENCH_WORK/shards.req" || die "seeding shard $n failed"
    done
    if want shards+minimal; then
        start_haproxy "$MINIMAL"
        ROW_URL[shards+minimal]=http://127.0.0.1:$HAPROXY_PORT ROW_REQS[shards+minimal]=$BENCH_WORK/shards.req
        ROW_PIDS[shards+minimal]="$HAPROXY_PID ${SHARD_PIDS[*]}" ROW_LB[shards+minimal]=$HAPROXY_PID
    fi
    for row in shards+shipped shards+variant; do
        want "$row" || continue
        start_haproxy "$BENCH_WORK/${row#shards+}/haproxy.cfg"
        for ((i = 0; i < 50; i++)); do
            [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HAPROXY_PORT/healthz") == 200 ]] && break
            sleep 0.1
        done
        ROW_URL[$row]=http://127.0.0.1:$HAPROXY_PORT ROW_REQS[$row]=$BENCH_WORK/shards.req
        ROW_PIDS[$row]="$HAPROXY_PID ${SHARD_PIDS[*]}" ROW_LB[$row]=$HAPROXY_PID
    done
fi

read -ra ORDER <<<"$ROWS"
for ((round = 1; round <= ROUNDS; round++)); do
    for ((k = 0; k < ${#ORDER[@]}; k++)); do
        row=${ORDER[$(((k + round - 1) % ${#ORDER[@]}))]}
        [[ -n ${ROW_URL[$row]:-} ]] || continue
        HAPROXY_PID=${ROW_LB[$row]}
        # shellcheck disable=SC2086 # a list of pids
        run_ops "$row" "${ROW_URL[$row]}" "${ROW_REQS[$row]}" ${ROW_PIDS[$row]}
    done
done

# ---- medians over the rounds, and each round's ratio to nginx+minimal ----
if ((ROUNDS > 1)); then
    echo
    printf '%-15s %-9s %9s %9s %11s %6s %7s %11s %11s   (medians of %d rounds)\n' row op req/s us_cpu/r \
        of_which_lb cs/r p99_ms rps_vs_ngx cpu_vs_ngx "$ROUNDS"
    awk -v rows="$ROWS" -v ops="$OPS" '
        function median(list,   n, a, i, j, t) {
            n = split(list, a, " ")
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return n ? (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2) : "-"
        }
        $1 == "row" { next }
        { k = $1 SUBSEP $2; seen[k]++; rps[k] = rps[k] " " $3; cpu[k] = cpu[k] " " $4; lb[k] = lb[k] " " $5; cs[k] = cs[k] " " $9; p99[k] = p99[k] " " $6
          r[k, seen[k]] = $3; c[k, seen[k]] = $4 }
        END {
            nr = split(rows, R, " "); no = split(ops, O, " ")
            for (i = 1; i <= no; i++) for (j = 1; j <= nr; j++) {
                k = R[j] SUBSEP O[i]; if (!seen[k]) continue
                b = "nginx+minimal" SUBSEP O[i]; rr = ""; cr = ""
                for (x = 1; x <= seen[k] && x <= seen[b]; x++) {
                    rr = rr " " r[k, x] / r[b, x]; cr = cr " " c[k, x] / c[b, x] }
                printf "%-15s %-9s %9.0f %9.1f %11.1f %6.2f %7.2f %11s %11s\n", R[j], O[i], median(rps[k]), median(cpu[k]), median(lb[k]), median(cs[k]), median(p99[k]),
                    seen[b] ? sprintf("%.2fx", median(rr)) : "-", seen[b] ? sprintf("%.2fx", median(cr)) : "-"
            }
        }' "$RESULTS"
    # The key's price (issue 18: at most 10 %): each round's post_key against the same round's
    # post_nonce in the same row (the two run back to back), and the median of those ratios,
    # which the row's own noise moves less than a ratio of the two medians does.
    if [[ " $OPS " == *" post_key "* && " $OPS " == *" post_nonce "* ]]; then
        echo
        awk -v rows="$ROWS" '
            function median(list,   n, a, i, j, t) {
                n = split(list, a, " ")
                for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
                return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
            }
            $1 == "row" { next }
            $2 == "post_nonce" { nn[$1]++; n[$1, nn[$1]] = $4 }
            $2 == "post_key" { nk[$1]++; k[$1, nk[$1]] = $4 }
            END {
                nr = split(rows, R, " ")
                for (j = 1; j <= nr; j++) {
                    w = R[j]; list = ""; shown = ""
                    for (x = 1; x <= nn[w] && x <= nk[w]; x++) {
                        v = 100 * (k[w, x] / n[w, x] - 1); list = list " " v; shown = shown sprintf(" %+.1f", v) }
                    if (list != "")
                        printf "%-15s the key: post_key vs post_nonce CPU per request, by round:%s %%; median %+.1f %%\n", w, shown, median(list)
                }
            }' "$RESULTS"
    fi
fi

echo
echo "$("$EVENTD_BIN" --version 2>/dev/null | head -n 1), $(haproxy -v | head -n 1 | cut -d' ' -f1-3), nginx $(nginx -v 2>&1 | sed 's/.*\///'); servers on CPU $BENCH_SERVER_CPU, wrk -t1 -c$CONNECTIONS on CPU $BENCH_CLIENT_CPU, ${DURATION}s per row, $USERS users, --fsync interval"
echo "(us_cpu/r: utime+stime of HAProxy and every backend of the row per request; of_which_lb: HAProxy's part;"
echo " cs/r: their context switches, voluntary and not, per request)"
if ((FAILED)); then
    note "FAILED: a row did not complete (BENCH_KEEP=1 keeps the logs)"
    exit 1
fi
exit 0
