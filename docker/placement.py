#!/usr/bin/env python3
"""Which shard a HAProxy configuration places each user on (docs/SCALING.md).

    docker/placement.py [--config docker/haproxy.cfg] NAME...
    docker/placement.py --config new.cfg < names.txt     (one name a line)

Prints "NAME shardN" for each name, and refuses (exit 1, printing none) a name
eventd would refuse (1 to 64 of A-Z a-z 0-9 . _ -). It runs the configuration itself on
loopback (haproxy must be installed: Debian's haproxy 2.6), with every
EVENTD_SHARDn pointing at a stub that answers 204, sends one request per name
with that username in Basic credentials (as a client of /v2 would), and reads
HAProxy's log for the server the ring chose ("route/shardN"). So the answer
is HAProxy's own hashing, never a re-implementation of it.

Use it before adding a shard: the users whose shard differs between the old
and the new configuration are the ones to move (with consistent hashing, they
all move to the new shard). Python 3 standard library; loopback only; every
wait is bounded (about 20 s at most, plus a millisecond or so per name).
"""

import argparse
import base64
import http.client
import http.server
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HOST = "127.0.0.1"
MAX_SHARDS = 64  # EVENTD_SHARD1..64 are set; a configuration uses those it names
USERNAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


class Stub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(200 if self.path == "/healthz" else 204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_PUT = do_DELETE = answer

    def log_message(self, *args):
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # HAProxy ends its health checks with a reset: nothing to report


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_until(pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def placement(config, names):
    """{name: shard number} as config places them."""
    stub = QuietServer((HOST, 0), Stub)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    work = tempfile.mkdtemp(prefix="eventd-placement-")
    log_path = os.path.join(work, "haproxy.log")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENTD_", "LB_"))}
    port = free_port()
    env.update(LB_BIND="%s:%d" % (HOST, port), LB_RUN_DIR=work,
               LB_ADMIN_SOCKET=os.path.join(work, "admin.sock"))
    for n in range(1, MAX_SHARDS + 1):
        env["EVENTD_SHARD%d" % n] = "%s:%d" % (HOST, stub.server_address[1])
    proc = None
    try:
        with open(log_path, "w") as log:
            proc = subprocess.Popen(["haproxy", "-db", "-f", config], env=env,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log)

        def up():
            try:
                with socket.create_connection((HOST, port), timeout=0.2):
                    return True
            except OSError:
                return False
        if not wait_until(lambda: proc.poll() is not None or up(), 10) or proc.poll() is not None:
            with open(log_path) as f:
                raise SystemExit("haproxy did not start:\n" + f.read()[-2000:])
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        for i, name in enumerate(names):
            cred = base64.b64encode(("%s:x" % name).encode()).decode()
            conn.request("GET", "/v2/placement?n=%d" % i, headers={"Authorization": "Basic " + cred})
            conn.getresponse().read()
        conn.close()
        pat = re.compile(r"route/shard(\d+) .*/v2/placement\?n=(\d+) ")
        found = {}

        def read_log():
            with open(log_path) as f:
                for line in f:
                    m = pat.search(line)
                    if m:
                        found[int(m.group(2))] = int(m.group(1))
            return len(found) == len(names)
        if not wait_until(read_log, 10):
            raise SystemExit("haproxy logged %d of %d requests" % (len(found), len(names)))
        return {name: found[i] for i, name in enumerate(names)}
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        stub.shutdown()
        stub.server_close()
        shutil.rmtree(work, ignore_errors=True)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=os.path.join(here, "haproxy.cfg"))
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    names = args.names or [line.strip() for line in sys.stdin if line.strip()]
    # Only names eventd accepts (src/storage/auth.c): any other has no shard, and one
    # with a ':' was answered for the part before it (the Basic-auth username).
    bad = [name for name in names if not USERNAME.fullmatch(name)]
    if bad:
        raise SystemExit("not a username eventd accepts (1 to 64 of A-Z a-z 0-9 . _ -): %s"
                         % ", ".join(repr(name) for name in bad[:10]))
    for name, shard in placement(args.config, names).items():
        print("%s shard%d" % (name, shard))


if __name__ == "__main__":
    main()
