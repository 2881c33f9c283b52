#!/usr/bin/env python3
"""latency_probe: per-request latency of eventd around an online compaction.

Keeps --conns keep-alive connections busy (one request in flight on each, a
mix of GET /v2/theme/:id and POST /v2/theme), on one thread with selectors so
that no GIL hand-off adds to the measured times. After --baseline seconds it
sends SIGUSR1 to --pid, watches --log for "compaction done" (or "compaction
failed"), runs --after more seconds, and prints the latencies of the requests
before, during (overlapping [SIGUSR1, "compaction done"]) and after the
compaction, plus the longest time no request completed during it.

Exit status: 0 when measured (and, with --strict, under --limit-ms), 1 when
the compaction did not finish within --timeout or a request failed, 3 with
--strict over the limit. Used by compaction_latency.sh; standard library only.
"""
import argparse
import base64
import os
import random
import selectors
import signal
import socket
import sys
import time


def pct(sorted_vals, p):
    if not sorted_vals:
        return float("nan")
    return sorted_vals[min(len(sorted_vals) - 1, int(len(sorted_vals) * p / 100))]


class Conn:
    def __init__(self, addr, requests, rng):
        self.sock = socket.create_connection(addr)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.requests = requests
        self.rng = rng
        self.buf = b""
        self.t0 = 0.0

    def send(self):
        req = self.rng.choice(self.requests)
        self.buf = b""
        self.t0 = time.perf_counter()
        self.sock.sendall(req)  # small: fits the socket buffer

    def on_readable(self):
        """Returns the status when a whole response is in, else None."""
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("server closed the connection")
        self.buf += data
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return None
        head = self.buf[:head_end].decode("latin-1")
        length = 0
        for line in head.split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if len(self.buf) < head_end + 4 + length:
            return None
        return int(head.split(" ", 2)[1])


def summary(name, lat):
    lat = sorted(lat)
    if not lat:
        return f"{name:<11} no requests"
    return (f"{name:<11} {len(lat):7d} requests  p50 {pct(lat, 50) * 1e3:7.3f} ms  "
            f"p99 {pct(lat, 99) * 1e3:7.3f} ms  p99.9 {pct(lat, 99.9) * 1e3:7.3f} ms  "
            f"max {lat[-1] * 1e3:7.3f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True, help="eventd's pid (gets SIGUSR1)")
    ap.add_argument("--log", required=True, help="eventd's log file (stderr)")
    ap.add_argument("--ids-file", required=True, help="theme ids, one a line")
    ap.add_argument("--user", default=os.environ.get("EVENTD_USER", "bench"))
    ap.add_argument("--key", default=os.environ.get("EVENTD_KEY"))
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--post-share", type=float, default=0.25, help="share of POSTs in the mix")
    ap.add_argument("--baseline", type=float, default=3.0, help="seconds before SIGUSR1")
    ap.add_argument("--after", type=float, default=1.0, help="seconds after compaction done")
    ap.add_argument("--timeout", type=float, default=120.0, help="longest wait for compaction done")
    ap.add_argument("--limit-ms", type=float, default=10.0)
    ap.add_argument("--strict", action="store_true")
    a = ap.parse_args()
    if not a.key:
        sys.exit("latency_probe: no key (--key or EVENTD_KEY)")

    with open(a.ids_file) as f:
        ids = [line.strip() for line in f if line.strip().isdigit()]
    if not ids:
        sys.exit("latency_probe: no ids in " + a.ids_file)
    auth = base64.b64encode(f"{a.user}:{a.key}".encode()).decode()
    host = f"127.0.0.1:{a.port}"
    rng = random.Random(1)
    gets = [f"GET /v2/theme/{i} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Basic {auth}\r\n\r\n"
            .encode() for i in rng.sample(ids, min(len(ids), 5000))]
    posts = []
    for i in range(64):
        body = (f'{{"Theme":{{"Name":"Probe {i}","PageBackgroundRGB":"{i * 40503 % 16777216:06x}",'
                f'"Status":"active"}}}}').encode()
        posts.append(f"POST /v2/theme HTTP/1.1\r\nHost: {host}\r\nAuthorization: Basic {auth}\r\n"
                     f"Content-Type: application/json\r\nCache-Control: no-cache\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    n_post = max(1, round(len(gets) * a.post_share / (1 - a.post_share))) if a.post_share > 0 else 0
    mix = gets + [posts[i % len(posts)] for i in range(n_post)]

    log = open(a.log, "rb")
    log.seek(0, os.SEEK_END)

    sel = selectors.DefaultSelector()
    conns = [Conn(("127.0.0.1", a.port), mix, random.Random(100 + k)) for k in range(a.conns)]
    for c in conns:
        sel.register(c.sock, selectors.EVENT_READ, c)
        c.send()

    samples = []  # (start, end) of every request, perf_counter seconds
    bad = 0
    start = time.perf_counter()
    t_usr1 = t_done = None
    outcome = ""
    logbuf = b""
    next_log_check = start
    while True:
        now = time.perf_counter()
        if t_usr1 is None and now - start >= a.baseline:
            os.kill(a.pid, signal.SIGUSR1)
            t_usr1 = time.perf_counter()
        if t_usr1 is not None and t_done is None and now >= next_log_check:
            next_log_check = now + 0.005
            logbuf += log.read()
            for line in logbuf.split(b"\n"):
                if b"compaction done" in line or b"compaction failed" in line \
                        or b"compaction not started" in line:
                    t_done = time.perf_counter()
                    outcome = line.decode(errors="replace").strip()
                    break
            if t_done is None and now - t_usr1 > a.timeout:
                print(f"latency_probe: no 'compaction done' within {a.timeout:.0f} s", file=sys.stderr)
                return 1
        if t_done is not None and now - t_done >= a.after:
            break
        for key, _ in sel.select(timeout=0.002):
            c = key.data
            status = c.on_readable()
            if status is None:
                continue
            samples.append((c.t0, time.perf_counter()))
            if not 200 <= status < 300:
                bad += 1
            c.send()
    for c in conns:
        c.sock.close()

    before = [e - s for s, e in samples if e < t_usr1]
    during = [e - s for s, e in samples if e >= t_usr1 and s <= t_done]
    after = [e - s for s, e in samples if s > t_done]
    # The longest stretch without any completed request inside the window: a stalled loop.
    ends = sorted(e for _, e in samples if t_usr1 <= e <= t_done)
    marks = [t_usr1] + ends + [t_done]
    gap = max(b - a_ for a_, b in zip(marks, marks[1:])) if len(marks) > 1 else 0.0

    print(f"compaction: {outcome}")
    print(f"compaction window: {(t_done - t_usr1) * 1e3:.1f} ms (SIGUSR1 to the 'done' log line, "
          f"seen within 5 ms)")
    print(summary("before", before))
    print(summary("during", during))
    print(summary("after", after))
    print(f"longest gap between completions during compaction: {gap * 1e3:.3f} ms")
    worst = max(during) if during else float("inf")
    print(f"max latency during compaction: {worst * 1e3:.3f} ms (target < {a.limit_ms:g} ms): "
          f"{'ok' if worst < a.limit_ms / 1e3 else 'MISS'}")
    if bad:
        print(f"latency_probe: {bad} non-2xx answers", file=sys.stderr)
    if "compaction done" not in outcome or bad:
        return 1
    if a.strict and worst >= a.limit_ms / 1e3:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
