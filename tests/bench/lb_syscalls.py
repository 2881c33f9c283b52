#!/usr/bin/env python3
"""System calls per request behind the balancer, counted by strace -c -f (issue 18's
kernel side): three eventd shards behind docker/haproxy.cfg as shipped, as
tests/lb/test_lb.py starts them (stderr to a file, --fsync interval),
authenticated GET (and PUT) /v2/theme/:id of USERS users, each request to the
user's shard.

For each pattern, `strace -c -f -p PID` attaches to every shard and to
HAProxy once their connections are warm; then the requests run, strace is
stopped with SIGINT and each summary is divided by the requests answered:
  turns   CONNS keep-alive connections to HAProxy taking turns, one request
          in flight at a time (REQUESTS requests): each shard serves one
          request per loop wakeup, the case the access log's per-turn write
          paid for;
  load    wrk -t1 -c64 for SECONDS (the requests wrk counts): many requests
          in flight, as in lb_compare.sh, slowed by strace.

    tests/bench/lb_syscalls.py       system calls per request of the shards
                                     (together) and of HAProxy, total and by call

Environment: EVENTD_BIN (build-bench/eventd), SHARD_ARGS (more eventd flags,
e.g. "--access-log-flush-ms 0"), USERS (30), REQUESTS (600), CONNS (8),
SECONDS (3), PATTERNS ("turns load"), OPS ("get"; "get put" adds PUT).
Loopback only; every wait is bounded.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
os.environ.setdefault("EVENTD_BIN", os.path.join(ROOT, "build-bench", "eventd"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "lb"))
sys.path.insert(0, os.path.join(ROOT, "tests", "blackbox"))
sys.path.insert(0, os.path.join(ROOT, "docker"))
import harness  # noqa: E402
import syscalls  # noqa: E402  (attach, summary)
import test_lb  # noqa: E402
from lb_shards import add_users, seed  # noqa: E402
from placement import placement  # noqa: E402
from test_lb import Balancer, Shard, wait_until  # noqa: E402

USERS = int(os.environ.get("USERS", "30"))
REQUESTS = int(os.environ.get("REQUESTS", "600"))
CONNS = int(os.environ.get("CONNS", "8"))
SECONDS = int(os.environ.get("SECONDS", "3"))
PATTERNS = os.environ.get("PATTERNS", "turns load").split()
OPS = os.environ.get("OPS", "get").split()
SHARD_ARGS = os.environ.get("SHARD_ARGS", "").split()


class QuietShard(Shard):
    """A shard with SHARD_ARGS and the idle sweep pinned off (its malloc_trim is periodic)."""

    def args(self, *cmd):
        more = []
        if cmd and cmd[0] == "serve":
            more = syscalls.sweep_pinned() + ["--fsync", "interval"] + SHARD_ARGS
        return super().args(*cmd) + more


def requests_of(path, op):
    """The raw GET or PUT of every line of seed's file (BASIC THEME_ID), as mix.lua's."""
    out = []
    with open(path) as f:
        for i, line in enumerate(f):
            cred, theme_id = line.split()
            h = {"Authorization": "Basic " + cred}
            if op == "get":
                out.append(harness.build_request("GET", "/v2/theme/%s" % theme_id, headers=h))
            else:
                body = {"Theme": {"Name": "lb %d" % i, "Status": "active"}}
                out.append(harness.build_request("PUT", "/v2/theme/%s" % theme_id, body=body,
                                                 headers=h))
    return out


def turns(port, raws, n):
    socks = [harness.connect(port, timeout=60) for _ in range(CONNS)]
    try:
        for i in range(n):
            s = socks[i % len(socks)]
            harness.send_raw(s, raws[i % len(raws)])
            r = harness.read_response(s, timeout=60)
            if r.status not in (200, 204):
                raise SystemExit("lb_syscalls: answered %d: %r" % (r.status, r.body[:200]))
    finally:
        for s in socks:
            s.close()
    return n


def load(port, req_file, seconds, op):
    env = dict(os.environ, EVENTD_LB_REQUESTS=req_file, EVENTD_LB_OPS=op)
    out = subprocess.run(["wrk", "-t1", "-c64", "-d%ds" % seconds, "-s", test_lb.MIX,
                          "http://127.0.0.1:%d" % port], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=seconds + 60).stdout
    m = re.search(r"(\d+) requests in", out)
    if not m or re.search(r"Non-2xx|Socket errors", out):
        raise SystemExit("lb_syscalls: wrk failed or had errors:\n" + out)
    return int(m.group(1))


def counted(pids, run):
    """{pid: {syscall: calls}} of run() under strace, and what run() returned."""
    work = tempfile.mkdtemp(prefix="eventd-lbsys-")
    procs = []
    try:
        for pid in pids:
            out = os.path.join(work, "%d.strace" % pid)
            procs.append((pid, out) + syscalls.attach(pid, out))
        try:
            n = run()
        finally:
            for _, _, p, _ in procs:
                p.send_signal(signal.SIGINT)
            for _, _, p, err in procs:
                p.wait(timeout=30)
                os.unlink(err)
        return {pid: syscalls.summary(out) for pid, out, _, _ in procs}, n
    finally:
        shutil.rmtree(work, ignore_errors=True)


def line(label, calls, n):
    total = sum(calls.values()) / n
    parts = ", ".join("%s %.2f" % (k, v / n) for k, v in sorted(calls.items(), key=lambda kv: -kv[1])
                      if v / n >= 0.005)
    return "  %-8s %6.2f  %s" % (label, total, parts)


def main():
    work = tempfile.mkdtemp(prefix="eventd-bench-lbsys-")
    names = ["bench%04d" % i for i in range(USERS)]
    started = []
    try:
        shards = {n: QuietShard(n, work) for n in test_lb.NODES}
        where = placement(test_lb.CFG, names)
        keys = {}
        for n, s in shards.items():
            keys.update(add_users(s, [name for name in names if where[name] == n]))
            s.start()
            started.append(s)
        lb = Balancer(shards.values(), work)
        lb.start()
        started.append(lb)
        if not wait_until(lb.healthy, 10):
            raise SystemExit("lb_syscalls: the balancer's shards are not up")
        req_file = os.path.join(work, "lb.req")
        seed(lb.port, keys, req_file)
        pids = [s.proc.pid for s in shards.values()]
        print("%s, shards %s; %d users; docker/haproxy.cfg as shipped"
              % (os.environ["EVENTD_BIN"], " ".join(SHARD_ARGS) or "(defaults)", USERS))
        for op in OPS:
            raws = requests_of(req_file, op)
            for pattern in PATTERNS:
                turns(lb.port, raws, 200)  # warm: pooled connections, credential caches
                if pattern == "turns":
                    what = "%d connections taking turns" % CONNS
                    rows, n = counted(pids + [lb.proc.pid],
                                      lambda: turns(lb.port, raws, REQUESTS))
                else:
                    what = "wrk -t1 -c64 -d%ds" % SECONDS
                    rows, n = counted(pids + [lb.proc.pid],
                                      lambda: load(lb.port, req_file, SECONDS, op))
                shard_calls = {}
                for pid in pids:
                    for k, v in rows[pid].items():
                        shard_calls[k] = shard_calls.get(k, 0) + v
                print("%s, %s (%d requests): system calls per request" % (op.upper(), what, n))
                print(line("shards", shard_calls, n))
                print(line("haproxy", rows[lb.proc.pid], n))
    finally:
        for s in started:
            s.kill() if hasattr(s, "kill") else s.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
