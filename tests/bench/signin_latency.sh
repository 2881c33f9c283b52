#!/usr/bin/env bash
# tests/bench/signin_latency.sh: do password hashes slow down /v2?
#
# Starts eventd on a fresh data directory, registers a user on the account
# site (JSON variant) and issues it an API key, then times GETS sequential
# GET /v2/theme requests (one keep-alive connection, PAUSE_MS between them)
# twice: idle, and (at least GETS, until SIGNERS sign-ins have finished
# meanwhile) while SIGNERS threads keep signing in (Argon2id verify on
# the threadpool, at most --pwhash-concurrency at once). Prints p50/p99/max of
# each phase and the sign-ins completed during the second. Argon2id runs on
# the threadpool, so the loop should answer /v2 within a few ms either way;
# on a 2-core machine the hashes still take CPU from the loop's core.
#
# Usage: tests/bench/signin_latency.sh [--strict] [--pin-loop]
#   --strict    exit 3 when the max while signing in is over LIMIT_MS
#   --pin-loop  after the first hash, pin eventd's loop thread to CPU 1 and its
#               other threads (libuv's threadpool) to CPU 0: what is left of the
#               spikes then is not CPU taken by the hashes (a diagnostic)
# Environment: GETS (500), SIGNERS (8), PAUSE_MS (2), LIMIT_MS (20), FLAGS (more
# eventd flags, e.g. "--fsync never"),
# BENCH_SERVER_CPU (default here 0,1: the hashing threads may use both cores),
# and those of lib.sh (EVENTD_BIN, BENCH_KEEP, ...).
# Bounded: each phase stops after GETS requests or 120 s.
set -uo pipefail

PROG=signin_latency.sh
BENCH_SERVER_CPU=${BENCH_SERVER_CPU:-0,1}
# shellcheck source=tests/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STRICT=0
PIN=0
for arg in "$@"; do
    case $arg in
    --strict) STRICT=1 ;;
    --pin-loop) PIN=1 ;;
    -h | --help)
        bench_usage
        exit 0
        ;;
    *) die "unknown argument $arg (try --help)" ;;
    esac
done
GETS=${GETS:-500}
SIGNERS=${SIGNERS:-8}
PAUSE_MS=${PAUSE_MS:-2}
LIMIT_MS=${LIMIT_MS:-20}

need python3 taskset timeout
bench_init
bench_binary

data=$BENCH_WORK/data
log=$BENCH_WORK/eventd.log
# shellcheck disable=SC2086 # FLAGS is a list of words
bench_start_eventd "$data" "$log" ${FLAGS:-} || exit 1
note "eventd pid $EVENTD_PID on 127.0.0.1:$EVENTD_PORT, binary $EVENTD_BIN"

timeout -k 5 300 python3 - "$EVENTD_PORT" "$GETS" "$SIGNERS" "$PAUSE_MS" "$LIMIT_MS" "$STRICT" \
    "$EVENTD_PID" "$PIN" <<'EOF'
import base64, http.client, json, os, subprocess, sys, threading, time

port, gets, signers = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
pause, limit, strict = float(sys.argv[4]) / 1000.0, float(sys.argv[5]), sys.argv[6] == "1"
PW = "correct horse battery"


def call(method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        c.close()


js = {"Content-Type": "application/json"}
st, hdrs, body = call("POST", "/register", json.dumps({"username": "bench", "password": PW}), js)
if st != 201:
    sys.exit("register: %d %r" % (st, body[:200]))
cookie = [v.split(";")[0] for k, v in hdrs if k.lower() == "set-cookie"
          and v.startswith("eventd_session=")][0]
st, _, body = call("POST", "/user/api/key", b"", dict(js, Cookie=cookie))
if st != 200:
    sys.exit("issue key: %d %r" % (st, body[:200]))
key = json.loads(body)["Result"]["APIKey"]
if sys.argv[8] == "1":
    pid = int(sys.argv[7])
    for tid in os.listdir("/proc/%d/task" % pid):
        cpu = "1" if int(tid) == pid else "0"
        subprocess.run(["taskset", "-pc", cpu, tid], stdout=subprocess.DEVNULL, check=True)
    print("pinned: loop thread %d on CPU 1, the other threads on CPU 0" % pid)
auth = {"Authorization": "Basic " + base64.b64encode(("bench:" + key).encode()).decode()}


def phase(more=lambda: False):
    """GETS requests, and on while more() says so; 120 s at most."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out = []
    deadline = time.monotonic() + 120
    while len(out) < gets or more():
        if time.monotonic() > deadline:
            break
        t0 = time.perf_counter()
        conn.request("GET", "/v2/theme", headers=auth)
        r = conn.getresponse()
        r.read()
        out.append((time.perf_counter() - t0) * 1000.0)
        if r.status != 200:
            sys.exit("GET /v2/theme: %d" % r.status)
        time.sleep(pause)
    conn.close()
    return sorted(out)


def show(name, t, extra=""):
    pick = lambda p: t[min(len(t) - 1, int(len(t) * p))]
    print("%-22s n=%-4d p50=%6.2f ms  p99=%6.2f ms  max=%6.2f ms%s"
          % (name, len(t), pick(0.5), pick(0.99), t[-1], extra))


idle = phase()
show("idle", idle)

stop = threading.Event()
done, bad = [0], [0]
lock = threading.Lock()


def signer():
    for _ in range(100000):
        if stop.is_set():
            return
        st, _, _ = call("POST", "/signin", json.dumps({"username": "bench", "password": PW}), js)
        with lock:
            done[0] += 1
            bad[0] += st != 200


threads = [threading.Thread(target=signer, daemon=True) for _ in range(signers)]
for th in threads:
    th.start()
time.sleep(0.2)
t0 = time.monotonic()
n0 = done[0]
busy = phase(lambda: done[0] - n0 < signers)  # until SIGNERS sign-ins overlapped it
elapsed = time.monotonic() - t0
n1 = done[0]
stop.set()
for th in threads:
    th.join(timeout=30)
show("while signing in (%d)" % signers, busy,
     "   sign-ins: %d in %.1f s (%.1f/s), %d not 200" % (n1 - n0, elapsed, (n1 - n0) / elapsed,
                                                          bad[0]))
if bad[0]:
    sys.exit(1)
if strict and busy[-1] > limit:
    print("over the limit: max %.2f ms > %.0f ms" % (busy[-1], limit))
    sys.exit(3)
EOF
rc=$?
kill -0 "$EVENTD_PID" 2>/dev/null || { note "eventd died"; tail -n 5 "$log" >&2; exit 1; }
bench_stop "$EVENTD_PID" || { note "eventd exited with status $?"; rc=1; }
exit $rc
