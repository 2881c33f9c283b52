#!/usr/bin/env python3
"""The change feed's held callers (issue 21's targets): server memory per
waiting client, the latency of other requests while they wait, and how soon
a change reaches a waiting client after its acknowledgement.

    tests/bench/feed_waiters.py            prints the three figures
    tests/bench/feed_waiters.py --icount   instructions per GET and PUT of a theme
                                           with no waiters and with WAITERS held

1. WAITERS connections (default 10,000) each send
   GET /v2/changes?wait=60&after=CURSOR (spread over USERS users) and are
   held; once /metrics says eventd_changes_waiting == WAITERS, the growth of
   the server's RSS (VmRSS, /proc) over the idle server with the same users
   is divided by WAITERS: what a held client costs, its connection included.
   (Held connections park: eventd_connections_parked says how many; the RSS
   is read once a sweep, --idle-sweep-ms, has run after the last one parked.)
   Around it, PROBE_REQUESTS authenticated GETs of one theme (round robin
   over PROBE_CONNS keep-alive connections, one request at a time) are timed
   with no waiters, again with the WAITERS held, and once more after they
   are answered (how much the run's noise moves the figure): p50, p99, and
   the p99 of each of PROBE_BLOCKS blocks, whose median the ratios compare.
   Then one change per user answers them all.
2. ROUNDS times (default 200): one client waits on user u0, another creates
   a theme of u0 (--fsync always: acknowledged after its fdatasync); the
   figure is the time from the create's answer (the acknowledgement reaching
   its client) to the waiter's answer, p50/p99/max. Both answers leave after
   the same fdatasync, so this is the wake's own cost.

--icount: the machine's load moves every latency above (and even the CPU
time per request), instruction counts not: eventd runs under callgrind as in
icount.py (its settings, its chunks, its TIMED work taken out); get_theme
and put_theme are counted (least of CHUNKS chunks of PER_CHUNK requests),
then WAITERS callers are held (instrumentation off), then both are counted
again, well within the waits' 60 s.

Environment: EVENTD_BIN (build/eventd), WAITERS (10000), USERS (100),
ROUNDS (200), PROBE_CONNS (4), PROBE_REQUESTS (4000), PROBE_BLOCKS (5). Needs `ulimit -n` above
WAITERS + 100: the script raises its soft limit (and so the server's) to the
hard limit, and stops if that is too low. Loopback only; bounded: every wait
has a deadline, every loop a count.
"""

import gc
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "blackbox"))
import harness  # noqa: E402

WAITERS = int(os.environ.get("WAITERS", "10000"))
USERS = int(os.environ.get("USERS", "100"))
ROUNDS = int(os.environ.get("ROUNDS", "200"))
PROBE_CONNS = int(os.environ.get("PROBE_CONNS", "4"))
PROBE_REQUESTS = int(os.environ.get("PROBE_REQUESTS", "4000"))
PROBE_BLOCKS = int(os.environ.get("PROBE_BLOCKS", "5"))


def raise_nofile():
    """The server inherits this limit: it needs a descriptor per held client too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = WAITERS + 200
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise SystemExit("ulimit -n: the hard limit %d is below %d (WAITERS + 200)"
                             % (hard, need))
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_s(pid):
    """The server's user + system CPU time, s (/proc/PID/stat; clock ticks)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gauge(port, name, default=None):
    r = harness.request(port, "GET", "/metrics")
    for line in r.body.decode().splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    if default is not None:  # (a binary from before the gauge)
        return default
    raise RuntimeError("no %s in /metrics" % name)


def list_cursor(port, auth):
    r = harness.request(port, "GET", "/v2/theme?limit=1", headers={"Authorization": auth})
    return r.header("X-Changes-Cursor")


def create(port, auth, name):
    body = b'{"Theme":{"Name":"%s"}}' % name.encode()
    r = harness.request(port, "POST", "/v2/theme", body,
                        headers={"Authorization": auth, "Content-Type": "application/json"})
    if r.status != 200:
        raise RuntimeError("create answered %d: %r" % (r.status, r.body[:200]))
    return r


def pct(v, q):
    return v[min(len(v) - 1, int(q * len(v)))]


def probe(srv, auth, theme_path):
    """PROBE_REQUESTS GETs over PROBE_CONNS keep-alive connections, one at a time;
    returns the latencies in ms (send to the whole answer read), in PROBE_BLOCKS
    blocks of consecutive requests, each sorted, and the server's CPU time per request
    (µs): unlike the latencies, the other processes on the machine do not move it."""
    port = srv.port
    conns = []
    for _ in range(PROBE_CONNS):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append(s)
    req = harness.build_request("GET", theme_path, headers={"Authorization": auth})
    for s in conns:  # warm: each connection's credentials cached
        s.sendall(req)
        harness.read_response(s, timeout=10)
    lat = []
    # Python's cyclic collector walks every object this process holds, the 10,000
    # waiters' sockets among them: a full pass inside a timed request is the client's
    # pause, not the server's (it tripled the busy probe's p99 in some runs).
    gc.collect()
    gc.disable()
    cpu0 = cpu_s(srv.proc.pid)
    for i in range(PROBE_REQUESTS):
        s = conns[i % PROBE_CONNS]
        t0 = time.perf_counter()
        s.sendall(req)
        r = harness.read_response(s, timeout=10)
        lat.append((time.perf_counter() - t0) * 1e3)
        if r.status != 200:
            raise RuntimeError("probe GET answered %d" % r.status)
    cpu = (cpu_s(srv.proc.pid) - cpu0) * 1e6 / PROBE_REQUESTS
    gc.enable()
    for s in conns:
        s.close()
    n = len(lat) // PROBE_BLOCKS
    return [sorted(lat[i * n:(i + 1) * n]) for i in range(PROBE_BLOCKS)], cpu


def show(name, probed):
    """Prints p50, p99 and max over all, and the p99 of each block; returns the blocks'
    median p99: on a shared machine a block that another process's burst hit stands out,
    and the median of the blocks leaves it aside, as icount.py takes the least chunk."""
    blocks, cpu = probed
    v = sorted(x for b in blocks for x in b)
    p99s = sorted(pct(b, 0.99) for b in blocks)
    med = p99s[len(p99s) // 2]
    print("other requests (%d GETs of a theme over %d keep-alive connections), %s: p50 %.3f ms, "
          "p99 %.3f ms, max %.3f ms; p99 of each block of %d: %s (median %.3f ms); "
          "server CPU %.0f us per request"
          % (len(v), PROBE_CONNS, name, pct(v, 0.5), pct(v, 0.99), v[-1], len(blocks[0]),
             " ".join("%.3f" % x for x in p99s), med, cpu))
    return med


def memory(srv, auths):
    port = srv.port
    for a in auths:  # every user's first request: its credential checks and owner entries
        create(port, a, "warm")
    theme = "/v2/theme/%s" % harness.find_id(create(port, auths[0], "probe"))
    cursors = [list_cursor(port, a) for a in auths]
    quiet = probe(srv, auths[0], theme)
    time.sleep(2.5)  # two sweeps: what the probe's connections took goes back
    base = rss_kib(srv.proc.pid)
    socks = []
    for i in range(WAITERS):
        u = i % len(auths)
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(harness.build_request("GET", "/v2/changes?wait=60&after=%s" % cursors[u],
                                        headers={"Authorization": auths[u]}))
        socks.append(s)
    deadline = time.monotonic() + 60
    while gauge(port, "eventd_changes_waiting") < WAITERS:
        if time.monotonic() > deadline:
            raise RuntimeError("only %d held" % gauge(port, "eventd_changes_waiting"))
        time.sleep(0.1)
    parked = gauge(port, "eventd_connections_parked", 0)
    time.sleep(2.5)  # two sweeps: the free lists give back what the arrivals' burst took
    held = rss_kib(srv.proc.pid)
    per = (held - base) * 1024.0 / WAITERS
    print("waiters %d (%d parked): server RSS %d KiB idle, %d KiB with them held: %.0f bytes "
          "per waiting client (its connection included)" % (WAITERS, parked, base, held, per))
    busy = probe(srv, auths[0], theme)
    q = show("no waiters", quiet)
    b = show("%d waiters" % WAITERS, busy)
    print("p99 with waiters / without (blocks' medians): %.3f" % (b / q))
    t0 = time.monotonic()
    for a in auths:
        create(port, a, "wake")
    for s in socks:  # each answered by its user's create, or at worst by its wait's end
        harness.read_response(s, timeout=70)
        s.close()
    print("woke all %d in %.0f ms (one create per user)" % (WAITERS, (time.monotonic() - t0) * 1e3))
    again = show("no waiters again", probe(srv, auths[0], theme))  # the run's noise
    print("p99 with waiters / without, this time: %.3f" % (b / again))


def latency(srv, auth):
    port = srv.port
    lat = []
    w = socket.create_connection(("127.0.0.1", port))
    w.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sel = selectors.DefaultSelector()
    sel.register(w, selectors.EVENT_READ, "w")
    sel.register(c, selectors.EVENT_READ, "c")
    body = b'{"Theme":{"Name":"lat"}}'
    creq = harness.build_request("POST", "/v2/theme", body,
                                 headers={"Authorization": auth,
                                          "Content-Type": "application/json"})
    for _ in range(ROUNDS):
        cur = list_cursor(port, auth)
        w.sendall(harness.build_request("GET", "/v2/changes?wait=30&after=%s" % cur,
                                        headers={"Authorization": auth}))
        deadline = time.monotonic() + 10
        while gauge(port, "eventd_changes_waiting") < 1:
            if time.monotonic() > deadline:
                raise RuntimeError("the waiter was not held")
        c.sendall(creq)
        got = {}
        bufs = {"w": b"", "c": b""}
        end = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < end:
            for key, _ in sel.select(timeout=1):
                data = key.fileobj.recv(65536)
                now = time.monotonic()
                bufs[key.data] += data
                if key.data not in got and b"\r\n\r\n" in bufs[key.data]:
                    head, _, rest = bufs[key.data].partition(b"\r\n\r\n")
                    n = int([ln.split(b":")[1] for ln in head.split(b"\r\n")
                             if ln.lower().startswith(b"content-length")][0])
                    if len(rest) >= n:
                        got[key.data] = now
        if len(got) < 2:
            raise RuntimeError("no answer within 10 s")
        lat.append((got["w"] - got["c"]) * 1e3)
    lat.sort()
    print("wake after acknowledgement, %d rounds: p50 %.3f ms, p99 %.3f ms, max %.3f ms "
          "(waiter's answer minus the create's answer; negative: the waiter's came first)"
          % (ROUNDS, pct(lat, 0.5), pct(lat, 0.99), lat[-1]))
    w.close()
    c.close()


def icount_held():
    import icount  # noqa: E402  (tests/bench, beside this script)
    out_dir = icount.tempfile.mkdtemp(prefix="eventd-feed-icount-")
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               "--callgrind-out-file=%s/callgrind.out.%%p" % out_dir]
    args = icount.server_args() + ["--max-connections", str(WAITERS + 200),
                                   "--max-connections-per-address", "0"]
    with harness.Server(users=["alice", "bob"], wrapper=wrapper, start_timeout=60,
                        extra_args=args) as srv:
        pid = srv.proc.pid
        auth = harness.auth_header("alice", srv.keys["alice"])
        bob = harness.auth_header("bob", srv.keys["bob"])
        r = harness.request(srv.port, "POST", "/v2/theme", icount.THEME,
                            headers={"Authorization": auth}, timeout=30)
        theme_id = r.json()["Result"]["ID"]
        before = set(os.listdir(out_dir))

        def count(op):
            raw = icount.requests_for(op, auth, theme_id)
            socks = [harness.connect(srv.port, timeout=60) for _ in range(icount.CONNS)]
            icount.run(socks, raw, icount.WARMUP, icount.EXPECT[op])
            nonlocal before
            chunks = []
            icount.vgdb(pid, "instrumentation", "on")
            for _ in range(icount.CHUNKS):
                icount.vgdb(pid, "zero")
                icount.run(socks, raw, icount.PER_CHUNK, icount.EXPECT[op])
                icount.vgdb(pid, "dump")
                (total, timed), before = icount.dumped(out_dir, before)
                chunks.append((total - timed) / icount.PER_CHUNK)
            icount.vgdb(pid, "instrumentation", "off")
            for s in socks:
                s.close()
            return min(chunks)

        ops = ("get_theme", "put_theme")
        for op in ops:  # once first: the theme at its new name, the revs at 3 digits
            count(op)
        quiet = {op: count(op) for op in ops}
        cur = list_cursor(srv.port, bob)
        req = harness.build_request("GET", "/v2/changes?wait=60&after=%s" % cur,
                                    headers={"Authorization": bob})
        socks = []
        for _ in range(WAITERS):  # bob's: alice's PUTs do not wake them
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(req)
            socks.append(s)
        deadline = time.monotonic() + 50
        while gauge(srv.port, "eventd_changes_waiting") < WAITERS:
            if time.monotonic() > deadline:
                raise RuntimeError("only %d held" % gauge(srv.port, "eventd_changes_waiting"))
            time.sleep(0.2)
        parked = gauge(srv.port, "eventd_connections_parked", 0)
        held = {op: count(op) for op in ops}
        for op in ops:
            print("%s: %.0f instructions per request with no waiters, %.0f with %d held (%d "
                  "parked): %+.2f %%" % (op, quiet[op], held[op], WAITERS, parked,
                                        (held[op] / quiet[op] - 1) * 100), flush=True)
        # One create of bob's answers them all (slowly, under callgrind).
        harness.request(srv.port, "POST", "/v2/theme", b'{"Theme":{"Name":"wake"}}',
                        headers={"Authorization": bob, "Content-Type": "application/json"},
                        timeout=300)
        for s in socks:
            harness.read_response(s, timeout=300)
            s.close()
        deadline = time.monotonic() + 120
        while gauge(srv.port, "eventd_connections_open") > 1:
            if time.monotonic() > deadline:
                raise RuntimeError("the held clients' connections did not close")
            time.sleep(0.2)
        again = {op: count(op) for op in ops}
        srv.send_signal(signal.SIGTERM)
    subprocess.run(["rm", "-rf", out_dir])
    for op in ops:
        print("%s: instructions per request: %.0f with no waiters, %.0f with %d held (%d "
              "parked: %+.2f %%), %.0f with none again (%+.2f %%)"
              % (op, quiet[op], held[op], WAITERS, parked, (held[op] / quiet[op] - 1) * 100,
                 again[op], (held[op] / again[op] - 1) * 100))


def main():
    raise_nofile()
    if sys.argv[1:] == ["--icount"]:
        icount_held()
        return 0
    users = ["u%d" % i for i in range(USERS)]
    with harness.Server(users=users, extra_args=[
            "--fsync", "always", "--max-connections", str(WAITERS + 200),
            "--max-connections-per-address", "0"],
            start_timeout=60) as srv:
        auths = [harness.auth_header(u, srv.keys[u]) for u in users]
        memory(srv, auths)
        latency(srv, auths[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
