#!/usr/bin/env python3
"""Checks that a graceful stop answers every request sent on an accepted
connection (docs/SCALING.md, "A request at the instant of SIGTERM"); it
reproduced the bug that lost such POSTs before the fix. Not part of ctest.

    tests/lb/sigterm_race.py [build/eventd] [--rounds 5]

Eight clients each open a new connection, send one POST /v2/theme and read
the answer, in a loop, straight to eventd (no HAProxy); after half a second
eventd gets SIGTERM. Per round it prints the answers (200), the requests that
were connected and sent but dropped without any answer, and the connections
refused after the listener closed; then the number of themes in the log. A
correct graceful stop drops none: a request that was sent on an accepted
connection is either answered or was never accepted (refused). Seen on the
2-core test machine: 1 to 3 dropped in 3 of 6 rounds, none of them in the log.
Exit status 1 when any round dropped a request. eventd runs with
--drain-ms 0: what is checked is the moment the listener closes, which the
drain window (--drain-ms) only postpones.
"""

import argparse
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_round(binary):
    d = tempfile.mkdtemp(prefix="eventd-sigterm-race-")
    try:
        key = subprocess.run([binary, "user", "add", "u", "--data", d], capture_output=True,
                             text=True, timeout=10).stdout.split()[-1]
        auth = base64.b64encode(("u:" + key).encode())
        port = free_port()
        p = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:%d" % port, "--data", d,
                              "--no-demo-user", "--drain-ms", "0"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        body = b'{"Theme":{"Name":"x"}}'
        req = (b"POST /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: Basic " + auth +
               b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        stats = {"answered": 0, "dropped": 0, "refused": 0, "other": 0}
        lock = threading.Lock()
        stop = threading.Event()

        def client():
            deadline = time.monotonic() + 10
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    c = socket.create_connection(("127.0.0.1", port), 1)
                except OSError:
                    with lock:
                        stats["refused"] += 1
                    time.sleep(0.001)
                    continue
                try:
                    c.sendall(req)
                    data = c.recv(4096)
                    kind = ("answered" if data.startswith(b"HTTP/1.1 200") else
                            "dropped" if not data else "other")
                except OSError:
                    kind = "dropped"
                c.close()
                with lock:
                    stats[kind] += 1

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        p.wait(15)
        time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join(15)
        out = subprocess.run([binary, "export", "--user", "u", "--data", d], capture_output=True,
                             timeout=10).stderr.decode()
        stats["in_log"] = int(out.split(" and ")[1].split()[0])
        return stats
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary", nargs="?", default=os.path.join(ROOT, "build", "eventd"))
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    dropped = 0
    for _ in range(args.rounds):
        s = one_round(args.binary)
        dropped += s["dropped"]
        print("answered 200: %(answered)d, dropped after connect and send: %(dropped)d, "
              "refused: %(refused)d, other: %(other)d; themes in the log: %(in_log)d" % s)
    sys.exit(1 if dropped else 0)


if __name__ == "__main__":
    main()
