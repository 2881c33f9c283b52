#!/usr/bin/env python3
"""The price of --sched-batch: request latency when a CPU-bound task shares
eventd's CPU (docs/BENCHMARKS.md, "SCHED_BATCH").

A SCHED_BATCH task that wakes does not preempt the task running on its CPU;
it waits for that task's turn to end. Behind a balancer on the same CPU this
is the point (the balancer finishes its batch first). With a neighbour that
never sleeps, it is the cost: a request waits for the neighbour's slice.

For each policy (--sched-batch, --no-sched-batch), eventd runs pinned to
CPU_SERVER with --fsync interval and one theme; the client, pinned to
CPU_CLIENT, sends REQUESTS authenticated GETs of it on one keep-alive
connection, one at a time, with THINK_MS between them, first with CPU_SERVER
otherwise idle, then with a busy loop (a process that never sleeps, nice 0)
pinned to it. Prints p50, p99 and the maximum of each.

    tests/bench/sched_neighbour.py

Environment: EVENTD_BIN (build-bench/eventd), REQUESTS (2000), THINK_MS
(0.2), CPU_SERVER (0), CPU_CLIENT (1). Loopback only; each request times
out after 5 s.
"""

import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "blackbox"))
os.environ.setdefault("EVENTD_BIN", os.path.join(HERE, "..", "..", "build-bench", "eventd"))
import harness  # noqa: E402

REQUESTS = int(os.environ.get("REQUESTS", "2000"))
THINK_S = float(os.environ.get("THINK_MS", "0.2")) / 1000
CPU_SERVER = int(os.environ.get("CPU_SERVER", "0"))
CPU_CLIENT = int(os.environ.get("CPU_CLIENT", "1"))


def latencies(port, raw):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    try:
        for _ in range(REQUESTS):
            t0 = time.perf_counter()
            s.sendall(raw)
            r = harness.read_response(s, timeout=5)
            out.append(time.perf_counter() - t0)
            if r.status != 200:
                raise SystemExit("GET answered %d" % r.status)
            if THINK_S:
                time.sleep(THINK_S)
    finally:
        s.close()
    return sorted(out)


def row(label, lat):
    def q(p):
        return lat[min(len(lat) - 1, int(len(lat) * p))] * 1000
    print("%-34s p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms" % (label, q(0.50), q(0.99), lat[-1] * 1000),
          flush=True)


def main():
    os.sched_setaffinity(0, {CPU_CLIENT})
    print("eventd on CPU %d, client on CPU %d, %d GETs one at a time, %.1f ms apart"
          % (CPU_SERVER, CPU_CLIENT, REQUESTS, THINK_S * 1000), flush=True)
    for flag in ("--sched-batch", "--no-sched-batch"):
        args = ["--fsync", "interval", "--no-access-log", flag]
        with harness.Server(users=["alice"], extra_args=args,
                            wrapper=["taskset", "-c", str(CPU_SERVER)]) as srv:
            auth = harness.auth_header("alice", srv.keys["alice"])
            r = harness.request(srv.port, "POST", "/v2/theme", body={"Theme": {"Name": "t"}},
                                headers={"Authorization": auth})
            assert r.status == 200, r.body
            tid = r.json()["Result"]["ID"]
            raw = harness.build_request("GET", "/v2/theme/%s" % tid, None, {"Authorization": auth})
            row("%s, CPU otherwise idle" % flag, latencies(srv.port, raw))
            hog = subprocess.Popen(["taskset", "-c", str(CPU_SERVER), "sh", "-c", "while :; do :; done"])
            try:
                time.sleep(0.2)
                row("%s, busy loop on its CPU" % flag, latencies(srv.port, raw))
            finally:
                hog.kill()
                hog.wait()


if __name__ == "__main__":
    main()
