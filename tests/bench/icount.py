#!/usr/bin/env python3
"""User-space instructions per request, counted by callgrind (a first step
towards issue 20's instruction-count guard; not yet a ctest).

eventd runs under valgrind --tool=callgrind with instrumentation off
(--fsync never: no sync path chosen by timing); for each operation the client
warms up, then instrumentation goes on and REQUESTS requests are sent on 4
keep-alive connections taking turns, one request in flight at a time (no
batching), counted in CHUNKS chunks (zero, send, dump): the least chunk's
instructions per request is the figure.

Why it is not a CI guard yet: reads repeat within 1 % from run to run, but
writes (POST, PUT) move by up to 3 %, more than a 2 % budget allows. What
moves them is work that comes with wall time, not with requests: a chunk in
which a connection's credential cache was given back by the idle sweep pays a
full key check (about 30,000 instructions), and the sweep's malloc_trim walks
the heap. A guard needs those made independent of time first (e.g. a test
setting for the sweep period), then budgets in one file.

    tests/bench/icount.py      prints each operation's instructions per request

Environment: EVENTD_BIN (build/eventd), REQUESTS (300), ICOUNT_DEBUG=1 (every
chunk's figure), ICOUNT_KEEP=1 (keep the callgrind dumps).
Bounded: each request times out after 60 s.
"""

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

REQUESTS = int(os.environ.get("REQUESTS", "300"))
CONNS = 4
CHUNKS = 10  # counted apart; the least is the figure (a chunk the sweep fell in is not)
WARMUP = 40

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
    if op == "unauthorized":
        return harness.build_request("GET", "/v2/theme/%d" % theme_id,
                                     headers={"Authorization": "Basic Ym9iOm5vcGU="})
    if op == "signin_page":
        return harness.build_request("GET", "/signin")
    raise ValueError(op)


EXPECT = {"get_theme": 200, "post_theme": 200, "put_theme": 204, "post_address": 200,
          "unauthorized": 401, "signin_page": 200}
OPS = list(EXPECT)


def control(pid, *args):
    subprocess.run(["callgrind_control"] + list(args) + [str(pid)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)


def run(socks, raw, n, status):
    for i in range(n):
        s = socks[i % len(socks)]
        harness.send_raw(s, raw)
        r = harness.read_response(s, timeout=60)
        if r.status != status:
            raise SystemExit("icount: %r answered %d, not %d: %r" % (raw[:40], r.status, status,
                                                                     r.body[:200]))


# Work the loop does on timers, whose amount depends on how long the run took,
# not on the requests: the idle-memory sweep (its malloc_trim walks the heap),
# and the store's lazy write and interval sync, which batch whatever came in
# their period. Their inclusive counts are taken out of the total.
TIMED = ("on_sweep", "on_lazy", "on_interval")


def timed_share(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         check=True, capture_output=True, text=True, timeout=60).stdout
    n = 0
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) .*:(\w+) \[", line)
        if m and m.group(2) in TIMED:
            n += int(m.group(1).replace(",", ""))
    return n


def dumped_total(out_dir, before):
    """The Ir total, less the timed work, of the newest dump file not in before."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        new = sorted(set(os.listdir(out_dir)) - before)
        for name in new:
            path = os.path.join(out_dir, name)
            with open(path) as f:
                text = f.read()
            m = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
            if m:
                return int(m.group(1)) - timed_share(path), set(os.listdir(out_dir))
        time.sleep(0.05)
    raise SystemExit("icount: callgrind wrote no dump")


def measure():
    out_dir = tempfile.mkdtemp(prefix="eventd-icount-")
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               "--callgrind-out-file=%s/callgrind.out.%%p" % out_dir]
    counts = {}
    with harness.Server(users=["alice"], wrapper=wrapper, start_timeout=60,
                        extra_args=["--fsync", "never"]) as srv:
        # valgrind is the process Popen started; it runs eventd in the same process.
        pid = srv.proc.pid
        auth = harness.auth_header("alice", srv.keys["alice"])
        r = harness.request(srv.port, "POST", "/v2/theme", THEME,
                            headers={"Authorization": auth}, timeout=30)
        theme_id = r.json()["Result"]["ID"]
        before = set(os.listdir(out_dir))
        for op in OPS:
            raw = requests_for(op, auth, theme_id)
            socks = [harness.connect(srv.port, timeout=60) for _ in range(CONNS)]
            try:
                run(socks, raw, WARMUP, EXPECT[op])
                control(pid, "-i", "on")
                chunks = []
                for _ in range(CHUNKS):
                    control(pid, "-z")
                    run(socks, raw, REQUESTS // CHUNKS, EXPECT[op])
                    control(pid, "-d")
                    total, before = dumped_total(out_dir, before)
                    chunks.append(total / (REQUESTS // CHUNKS))
                control(pid, "-i", "off")
            finally:
                for s in socks:
                    s.close()
            counts[op] = min(chunks)
            if os.environ.get("ICOUNT_DEBUG"):
                print(op, [round(c) for c in chunks], file=sys.stderr)
        srv.send_signal(signal.SIGTERM)
    if not os.environ.get("ICOUNT_KEEP"):
        subprocess.run(["rm", "-rf", out_dir])
    else:
        print("icount: dumps in", out_dir)
    return counts


def main():
    counts = measure()
    print("%-14s %12s" % ("operation", "instr/req"))
    for op in OPS:
        print("%-14s %12.0f" % (op, counts[op]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
