#!/usr/bin/env python3
"""System calls per request, counted by strace -c -f (issue 20's kernel side).

eventd runs alone (no wrapper) with the idle sweep pinned off
(--idle-sweep-ms 86400000: its malloc_trim is periodic, not per request).
For each operation (tests/bench/icount.py's six) the client opens keep-alive
connections and warms them up; then `strace -c -f -p PID` attaches to every
thread of the server, REQUESTS requests are sent, strace is stopped with
SIGINT and its summary divided by REQUESTS. Two client patterns (PATTERNS):
  turns   4 connections taking turns, one request in flight at a time: no
          batching, the most system calls per request (every loop turn
          serves one request);
  waves   16 connections: a request on each at once, then the 16 answers:
          what a loaded server amortises over a loop turn (epoll_wait, the
          access log's one write per turn, the store's batches).
Each pattern runs once per --fsync mode in FSYNCS, on a fresh server.

    tests/bench/syscalls.py        a table per mode: each operation's system calls per
                                   request, total and by call

Environment: EVENTD_BIN (build-bench/eventd, the Release build), REQUESTS (400),
FSYNCS ("interval always"), PATTERNS ("turns waves"), OPS (icount.py's six; older
binaries have no /signin). Bounded: each request and strace's attach and exit
time out.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "blackbox"))
if "EVENTD_BIN" not in os.environ:
    os.environ["EVENTD_BIN"] = os.path.join(HERE, "..", "..", "build-bench", "eventd")
import harness  # noqa: E402
import icount  # noqa: E402  (the operations and their requests)

REQUESTS = int(os.environ.get("REQUESTS", "400"))
FSYNCS = os.environ.get("FSYNCS", "interval always").split()
PATTERNS = os.environ.get("PATTERNS", "turns waves").split()
# get_pooled needs several users and their themes: icount.py's alone.
OPS = os.environ.get("OPS", " ".join(op for op in icount.OPS if op != "get_pooled")).split()
CONNS = {"turns": 4, "waves": 16}
WARMUP = 32


def waves(socks, raw, n, status):
    """n requests in waves: one on every connection at once, then every answer."""
    for i in range(0, n, len(socks)):
        batch = socks[:min(len(socks), n - i)]
        for s in batch:
            harness.send_raw(s, raw)
        for s in batch:
            r = harness.read_response(s, timeout=60)
            if r.status != status:
                raise SystemExit("syscalls: %r answered %d, not %d" % (raw[:40], r.status, status))


SEND = {"turns": icount.run, "waves": waves}
DESCRIBE = {"turns": "4 connections taking turns, one request in flight",
            "waves": "16 connections, a request on each at once, then the 16 answers"}


def attach(pid, out):
    """strace -c -f on every thread of pid, once it has attached to all of them."""
    log = tempfile.NamedTemporaryFile(prefix="eventd-strace-", suffix=".err", delete=False)
    p = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(pid)],
                         stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(log.name) as f:
            # "Process N attached with T threads", once all are
            if "attached" in f.read():
                return p, log.name
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    raise SystemExit("syscalls: strace did not attach: %s" % open(log.name).read())


def summary(path):
    """{syscall: calls} from strace -c's table."""
    calls = {}
    with open(path) as f:
        for line in f:
            # % time  seconds  usecs/call  calls  [errors]  syscall
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
            if m and m.group(2) != "total":
                calls[m.group(2)] = int(m.group(1))
    return calls


def sweep_pinned():
    """--idle-sweep-ms 86400000 where the binary has the setting (older ones for a
    before-and-after run do not)."""
    out = subprocess.run([harness.EVENTD_BIN, "serve", "--help"], capture_output=True, text=True,
                         timeout=30)
    return ["--idle-sweep-ms", "86400000"] if "--idle-sweep-ms" in out.stdout + out.stderr else []


def measure(fsync, pattern):
    rows = {}
    extra = sweep_pinned() + ["--fsync", fsync]
    with harness.Server(users=["alice"], extra_args=extra) as srv:
        pid = srv.proc.pid
        auth = harness.auth_header("alice", srv.keys["alice"])
        r = harness.request(srv.port, "POST", "/v2/theme", icount.THEME,
                            headers={"Authorization": auth}, timeout=30)
        theme_id = r.json()["Result"]["ID"]
        for op in OPS:
            raw = icount.requests_for(op, auth, theme_id)
            socks = [harness.connect(srv.port, timeout=60) for _ in range(CONNS[pattern])]
            out = tempfile.mktemp(prefix="eventd-strace-")
            try:
                SEND[pattern](socks, raw, WARMUP, icount.EXPECT[op])
                p, err = attach(pid, out)
                try:
                    SEND[pattern](socks, raw, REQUESTS, icount.EXPECT[op])
                finally:
                    p.send_signal(signal.SIGINT)
                    p.wait(timeout=30)
                    os.unlink(err)
            finally:
                for s in socks:
                    s.close()
            rows[op] = summary(out)
            os.unlink(out)
    return rows


def main():
    for fsync in FSYNCS:
        for pattern in PATTERNS:
            rows = measure(fsync, pattern)
            print("--fsync %s, %s: system calls per request (%d requests, %s)"
                  % (fsync, pattern, REQUESTS, DESCRIBE[pattern]))
            for op in OPS:
                calls = rows[op]
                total = sum(calls.values()) / REQUESTS
                parts = ", ".join("%s %.2f" % (k, v / REQUESTS)
                                  for k, v in sorted(calls.items(), key=lambda kv: -kv[1]))
                print("  %-13s %5.2f  %s" % (op, total, parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
