#!/usr/bin/env python3
"""User-space instructions per request, counted by callgrind; with --check,
issue 20's instruction-count guard (ctest perf.icount, tests/perf/).

eventd runs under valgrind --tool=callgrind with instrumentation off. For
each operation the client opens CONNS keep-alive connections, warms them up
(WARMUP requests: kits, handler states and credential caches exist), then
sends CHUNKS chunks of PER_CHUNK requests, the connections taking turns, one
request in flight at a time (no batching); each chunk is counted apart
(zero, send, dump). An operation's figure is its least chunk's instructions
per request, after taking out the work that comes with wall time rather than
with requests (below).

post_keyed is post_theme with an Idempotency-Key, each request a key of its
own: the price of the key (issue 18 asks for it through the balancer).

get_pooled is the balancer's pattern: GETs of POOLED_USERS users' themes
over the same CONNS connections, each connection's requests alternating
between two users, as HAProxy's pooled backend connections carry many
clients in turn (each user's header verified on another connection first:
the server-wide credential cache's case, core/cred_cache.h).

The pattern is made independent of wall time, so that repeated runs agree
within a few instructions per request (docs/BENCHMARKS.md, "The instruction
guard"):
  - --idle-sweep-ms 86400000: the idle sweep never runs in the measurement
    (by default it runs every second: it gives back a connection's handler
    state, so the next request pays a full key check, ~30k instructions,
    and its malloc_trim walks the heap);
  - --fsync always --loop-sync-max-us 10000000: each write is its own batch,
    written and synced on the loop (in interval and never modes, writes wait
    up to 2 ms to be batched, and how many share a batch, and so a worker
    thread's round trip, depends on timing); FSYNC=interval or never measures
    those modes (the issue's table is interval's), with that noise;
  - taken out of each chunk: the inclusive cost of the calls to the
    functions in TIMED (timer callbacks whose work depends on elapsed time,
    and the once-a-second formatting of the Date header and the access log's
    timestamp), read from the callgrind file itself.

    tests/bench/icount.py                    each operation's instructions per request
    tests/bench/icount.py --check FILE       ... and exit 1 if one is over its budget in
                                             FILE by more than 2 %, or under it by more
                                             than 5 % (then the budget must come down)

Environment: EVENTD_BIN (build/eventd; the guard's ctest passes the Release
binary), FSYNC (always), PER_CHUNK (24), CHUNKS (3), ICOUNT_DEBUG=1 (every
chunk's figure and what was taken out), ICOUNT_KEEP=1 (keep the dumps).
Bounded: each request times out after 60 s, each vgdb call after 30 s.
"""

import itertools
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "blackbox"))
import harness  # noqa: E402

CONNS = 4
WARMUP = 16
PER_CHUNK = int(os.environ.get("PER_CHUNK", "24"))
CHUNKS = int(os.environ.get("CHUNKS", "3"))
FSYNC = os.environ.get("FSYNC", "always")
OVER = 0.02   # a count above budget * (1 + OVER) fails
UNDER = 0.05  # a count below budget * (1 - UNDER) fails too: lower the budget

THEME = b'{"Theme":{"Name":"Gala night","PageBackgroundRGB":"ffffff","Status":"active"}}'
ADDRESS = (b'{"Address":{"Name":"Venue 7","Line1":"17 Market Street","Line2":"Hall 3","Line3":"",'
           b'"City":"Lyon","State":"ARA","Country":"FR","Post":"69002","Lon":4.8427,"Lat":45.7570,'
           b'"ShowMap":true,"Status":"active"}}')


def requests_for(op, auth, theme_id):
    """The request an operation sends, as bytes."""
    h = {"Authorization": auth}
    if op == "get_theme":
        return harness.build_request("GET", "/v2/theme/%d" % theme_id, headers=h)
    if op == "post_theme":
        return harness.build_request("POST", "/v2/theme", THEME, headers=h)
    if op == "put_theme":
        return harness.build_request("PUT", "/v2/theme/%d" % theme_id,
                                     b'{"Theme":{"Name":"Gala night 2"}}', headers=h)
    if op == "post_address":
        return harness.build_request("POST", "/v2/address", ADDRESS, headers=h)
    if op == "post_keyed":
        # Each request a key of its own (a key used again is a replay, not a create).
        keys = itertools.count(1)
        return lambda: harness.build_request(
            "POST", "/v2/theme", THEME,
            headers={"Authorization": auth, "Idempotency-Key": "icount-%08d" % next(keys)})
    if op == "unauthorized":
        return harness.build_request("GET", "/v2/theme/%d" % theme_id,
                                     headers={"Authorization": "Basic Ym9iOm5vcGU="})
    if op == "signin_page":
        return harness.build_request("GET", "/signin")
    raise ValueError(op)


EXPECT = {"get_theme": 200, "post_theme": 200, "put_theme": 204, "post_address": 200,
          "post_keyed": 200, "unauthorized": 401, "signin_page": 200, "get_pooled": 200}
POOLED_USERS = 2 * CONNS
OPS = list(EXPECT)

# Work whose amount depends on how long the run took, not on the requests:
# the idle sweep (pinned off, but counted out should it run), the store's lazy
# write and interval sync (interval and never modes), and the Date header's
# and the access log's per-second formatting (http_date, now_str).
TIMED = ("on_sweep", "on_lazy", "on_interval", "strftime", "gmtime_r")


def vgdb(pid, *command):
    subprocess.run(["vgdb", "--pid=%d" % pid] + list(command), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)


def run(socks, raw, n, status):
    """n requests, the connections taking turns; raw is a request, a list of requests
    sent in turn (request i on connection i % len(socks)), or a function that gives
    the next request."""
    for i in range(n):
        s = socks[i % len(socks)]
        req = raw() if callable(raw) else raw[i % len(raw)] if isinstance(raw, list) else raw
        harness.send_raw(s, req)
        r = harness.read_response(s, timeout=60)
        if r.status != status:
            raise SystemExit("icount: %r answered %d, not %d: %r" % (req[:40], r.status, status,
                                                                     r.body[:200]))


def parse_dump(path):
    """(total Ir, Ir of the calls into TIMED) of one callgrind dump.

    The format (callgrind's docs, "Callgrind Format Specification"): "fn=" and
    "cfn=" name functions, as "(id) name" the first time and "(id)" after;
    a "calls=" line is followed by the call's position and its inclusive cost."""
    names = {}
    total = None
    timed = 0
    callee = None
    after_calls = False
    with open(path) as f:
        for line in f:
            if after_calls:
                after_calls = False
                parts = line.split()
                if callee in TIMED and len(parts) > 1:
                    timed += int(parts[1])
                continue
            if line.startswith(("fn=", "cfn=")):
                key, _, rest = line.rstrip("\n").partition("=")
                m = re.match(r"\((\d+)\)(?: (.*))?$", rest)
                name = rest
                if m:
                    if m.group(2) is not None:
                        names[m.group(1)] = m.group(2)
                    name = names.get(m.group(1), "")
                if key == "cfn":
                    callee = name
            elif line.startswith("calls="):
                after_calls = True
            elif line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
    if total is None:
        raise SystemExit("icount: no total in %s" % path)
    return total, timed


def dumped(out_dir, before):
    """The newest complete dump file not in before, parsed."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for name in sorted(set(os.listdir(out_dir)) - before):
            path = os.path.join(out_dir, name)
            with open(path) as f:
                if not re.search(r"^(?:totals|summary): \d+", f.read(), re.M):
                    continue  # still being written
            return parse_dump(path), set(os.listdir(out_dir))
        time.sleep(0.05)
    raise SystemExit("icount: callgrind wrote no dump")


def server_args():
    args = ["--idle-sweep-ms", "86400000", "--fsync", FSYNC]
    if FSYNC == "always":
        args += ["--loop-sync-max-us", "10000000"]
    return args


def measure():
    out_dir = tempfile.mkdtemp(prefix="eventd-icount-")
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               "--callgrind-out-file=%s/callgrind.out.%%p" % out_dir]
    counts = {}
    debug = os.environ.get("ICOUNT_DEBUG")
    pooled = ["pool%d" % i for i in range(POOLED_USERS)]
    with harness.Server(users=["alice"] + pooled, wrapper=wrapper, start_timeout=60,
                        extra_args=server_args()) as srv:
        # valgrind is the process Popen started; it runs eventd in the same process.
        pid = srv.proc.pid
        auth = harness.auth_header("alice", srv.keys["alice"])
        r = harness.request(srv.port, "POST", "/v2/theme", THEME,
                            headers={"Authorization": auth}, timeout=30)
        theme_id = r.json()["Result"]["ID"]
        pooled_gets = []
        for u in pooled:
            a = harness.auth_header(u, srv.keys[u])
            r = harness.request(srv.port, "POST", "/v2/theme", THEME, headers={"Authorization": a},
                                timeout=30)
            pooled_gets.append(harness.build_request(
                "GET", "/v2/theme/%d" % r.json()["Result"]["ID"], headers={"Authorization": a}))
        before = set(os.listdir(out_dir))
        vgdb(pid, "instrumentation", "on")
        for op in OPS:
            raw = pooled_gets if op == "get_pooled" else requests_for(op, auth, theme_id)
            socks = [harness.connect(srv.port, timeout=60) for _ in range(CONNS)]
            try:
                run(socks, raw, WARMUP, EXPECT[op])
                chunks = []
                for _ in range(CHUNKS):
                    vgdb(pid, "zero")
                    run(socks, raw, PER_CHUNK, EXPECT[op])
                    vgdb(pid, "dump")
                    (total, timed), before = dumped(out_dir, before)
                    chunks.append(((total - timed) / PER_CHUNK, total / PER_CHUNK))
            finally:
                for s in socks:
                    s.close()
            counts[op] = min(c[0] for c in chunks)
            if debug:
                print("%s: per chunk %s (before taking out TIMED: %s)" %
                      (op, [round(c[0]) for c in chunks], [round(c[1]) for c in chunks]),
                      file=sys.stderr)
        srv.send_signal(signal.SIGTERM)
    if not os.environ.get("ICOUNT_KEEP"):
        subprocess.run(["rm", "-rf", out_dir])
    else:
        print("icount: dumps in", out_dir)
    return counts


def read_budgets(path):
    budgets = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or parts[0] not in EXPECT or not parts[1].isdigit():
                raise SystemExit("icount: %s:%d: want 'OPERATION INSTRUCTIONS' with one of %s"
                                 % (path, n, " ".join(OPS)))
            budgets[parts[0]] = int(parts[1])
    missing = [op for op in OPS if op not in budgets]
    if missing:
        raise SystemExit("icount: %s has no budget for %s" % (path, " ".join(missing)))
    return budgets


def check(counts, budgets, path):
    """Prints each operation against its budget; returns the failures."""
    failed = []
    print("%-14s %10s %10s %8s  %s" % ("operation", "instr/req", "budget", "change", "verdict"))
    for op in OPS:
        c, b = counts[op], budgets[op]
        change = (c - b) / b
        if c > b * (1 + OVER):
            verdict = "FAIL: more than %d %% over budget" % round(OVER * 100)
            failed.append(op)
        elif c < b * (1 - UNDER):
            verdict = ("FAIL: more than %d %% under budget: lower it to %d in %s in this commit"
                       % (round(UNDER * 100), -(-round(c) // 10) * 10, path))
            failed.append(op)
        else:
            verdict = "ok"
        print("%-14s %10.0f %10d %+7.2f%%  %s" % (op, c, b, 100 * change, verdict))
    return failed


def main():
    args = sys.argv[1:]
    budgets = None
    if args[:1] == ["--check"] and len(args) == 2:
        budgets = read_budgets(args[1])
    elif args:
        print("usage: icount.py [--check BUDGETS]", file=sys.stderr)
        return 2
    counts = measure()
    if budgets is None:
        print("%-14s %12s" % ("operation", "instr/req"))
        for op in OPS:
            print("%-14s %12.0f" % (op, counts[op]))
        return 0
    failed = check(counts, budgets, args[1])
    if failed:
        print("icount: over or under budget: %s (a raise needs its reason in the commit "
              "message; see the comment in %s)" % (" ".join(failed), args[1]))
        return 1
    print("icount: every operation within its budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
