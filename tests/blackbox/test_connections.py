"""Black-box tests of the connection layer: the connection cap closes the
longest-idle connection rather than refusing a new client, idle connections
give their per-request memory back, and error answers survive a client that
sends its whole request before reading (lingering close).

Run: EVENTD_BIN=build/eventd python3 tests/blackbox/test_connections.py [Class[.test]]
"""

import http.client
import os
import resource
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import (  # noqa: E402
    EVENTD_BIN, Server, auth_header, build_request, connect, is_open, parse_response_bytes,
    read_response, request, send_raw, wait_closed, wait_server_closed, wait_server_read)

SWEEP_S = 1.0            # --idle-sweep-ms's default: idle connections keep their app state this long
SETTLE_S = 3.5 * SWEEP_S  # state released (<= 2 sweeps), free lists trimmed (one more)
IDLE_CONN_LIMIT = 768    # bytes of RSS per idle connection (README: about 700)
IDLE_CONN_SLACK = 64     # libuv's per-descriptor watcher array (8-16 B) and page rounding
MEM_CONNS = 2000


def setUpModule():
    # Thousands of sockets: lift our own descriptor limit as far as allowed.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def settled_rss(pid):
    """The RSS once the idle sweeps are done: at least SETTLE_S, then until it has not
    fallen for two sweeps (a loaded machine runs the sweeps late), at most 20 s."""
    time.sleep(SETTLE_S)
    deadline = time.monotonic() + 20
    low, low_at = vm_rss(pid), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - low_at < 2 * SWEEP_S:
        time.sleep(0.25)
        rss = vm_rss(pid)
        if rss < low:
            low, low_at = rss, time.monotonic()
    return low


def vm_rss(pid):
    """The process's resident set in bytes, from /proc/PID/status."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/%d/status" % pid)


def sanitized_binary():
    """True for an AddressSanitizer build, whose allocator makes RSS meaningless."""
    with open(EVENTD_BIN, "rb") as f:
        return b"__asan_init" in f.read()


def assert_error(test, resp, status, code, ctx=""):
    test.assertEqual(resp.status, status, ctx + repr(resp))
    test.assertEqual(resp.json()["Error"]["Code"], code, ctx + repr(resp))


class EvictionTests(unittest.TestCase):
    """--max-connections: idle connections make room, busy ones do not."""

    CAP = 20

    def test_new_client_served_by_closing_longest_idle_connection(self):
        with Server(extra_args=["--max-connections", str(self.CAP)]) as srv:
            socks = []
            try:
                for i in range(self.CAP):
                    s = connect(srv.port)
                    socks.append(s)
                    send_raw(s, build_request("GET", "/healthz"))
                    # No pause needed for a strict idle order: the idle list is kept in
                    # the order connections went idle, and each went idle before the
                    # next one's request was sent.
                    self.assertEqual(read_response(s).status, 200, "connection %d" % i)
                r = request(srv.port, "GET", "/healthz", timeout=3.0)
                self.assertEqual(r.status, 200, "new client at the cap with %d idle "
                                 "connections: %r" % (self.CAP, r))
                closed, data, _ = wait_closed(socks[0], 2.0)
                self.assertTrue(closed and not data,
                                "the longest-idle connection was not closed (data %r)" % data)
                self.assertTrue(is_open(socks[-1]), "the most recently idle connection closed")
            finally:
                for s in socks:
                    s.close()

    def test_a_client_over_its_address_cap_closes_nobody_at_the_cap(self):
        # At --max-connections, a client already at its address's cap is closed at
        # once, without an answer; the longest-idle connection, another client's,
        # stays open (before, it was closed to make room, then the newcomer refused).
        args = ["--max-connections", "3", "--max-connections-per-address", "2"]
        with Server(extra_args=args) as srv:
            socks = []
            try:
                victim = socket.create_connection(("127.0.0.1", srv.port), timeout=5,
                                                  source_address=("127.0.0.2", 0))
                socks.append(victim)
                send_raw(victim, build_request("GET", "/healthz"))
                self.assertEqual(read_response(victim).status, 200)
                for _ in range(2):
                    s = connect(srv.port)
                    socks.append(s)
                    send_raw(s, build_request("GET", "/healthz"))
                    self.assertEqual(read_response(s).status, 200)
                extra = connect(srv.port)
                socks.append(extra)
                closed, data, _ = wait_closed(extra, 3.0)
                self.assertTrue(closed and not data, "closed %s, data %r" % (closed, data))
                send_raw(victim, build_request("GET", "/healthz"))
                self.assertEqual(read_response(victim).status, 200)
            finally:
                for s in socks:
                    s.close()

    def test_refusals_of_one_address_linger_up_to_its_cap_then_close_at_once(self):
        # Refused connections linger until their 503 is read (--linger-ms); they
        # count under their address, so past twice its cap the next ones are
        # closed at once (review, 2026-11-29: 3,000 connects held 3,000 sockets).
        args = ["--max-connections-per-address", "4", "--linger-ms", "30000"]
        with Server(extra_args=args) as srv:
            socks = []
            try:
                for _ in range(40):
                    socks.append(connect(srv.port))
                wait_server_read(srv.port, socks, timeout=10, or_closed=True)
                scrape = socket.create_connection(("127.0.0.1", srv.port), timeout=5,
                                                  source_address=("127.0.0.2", 0))
                socks.append(scrape)
                send_raw(scrape, build_request("GET", "/metrics"))
                body = read_response(scrape).body.decode()
                open_now = [line for line in body.splitlines()
                            if line.startswith("eventd_connections_open ")]
                # 4 admitted, 4 refusals lingering, and the scrape itself
                self.assertEqual(open_now, ["eventd_connections_open 9"], body[:3000])
                answered = 0
                for s in socks[4:8]:
                    closed, data, _ = wait_closed(s, 3.0)
                    answered += data.startswith(b"HTTP/1.1 503 ")
                self.assertEqual(answered, 4)
                closed, data, _ = wait_closed(socks[20], 3.0)
                self.assertTrue(closed and not data, "closed %s, data %r" % (closed, data))
            finally:
                for s in socks:
                    s.close()

    def test_a_per_address_refusal_is_timed_from_its_own_arrival(self):
        # The 503's connection read nothing: its duration in the request histogram
        # is not measured from the last read of the connection whose buffers it
        # reuses (here one that read over a second before).
        args = ["--max-connections-per-address", "1", "--idle-sweep-ms", "600000"]
        with Server(extra_args=args) as srv:
            held = connect(srv.port)  # 127.0.0.1's one connection; it keeps its buffers
            self.addCleanup(held.close)

            def buckets():
                send_raw(held, build_request("GET", "/metrics"))
                body = read_response(held).body.decode()
                return [float(line.split()[1]) for line in body.splitlines() if line.startswith(
                    ('eventd_http_request_duration_seconds_bucket{le="1"}',
                     'eventd_http_request_duration_seconds_bucket{le="+Inf"}'))]
            before = buckets()
            # Another address's request: its buffers go back to the pool when it closes.
            other = socket.create_connection(("127.0.0.1", srv.port), timeout=5,
                                             source_address=("127.0.0.2", 0))
            send_raw(other, build_request("GET", "/healthz", headers={"Connection": "close"}))
            self.assertEqual(read_response(other).status, 200)
            other.close()
            time.sleep(1.2)
            extra = connect(srv.port)  # over 127.0.0.1's cap: 503, with those buffers
            self.addCleanup(extra.close)
            closed, data, _ = wait_closed(extra, 3.0)
            self.assertIn(b" 503 ", data[:20])
            after = buckets()
            under_1s, total = after[0] - before[0], after[1] - before[1]
            self.assertEqual(under_1s, total, "a request over a second: %r -> %r" % (before, after))

    def test_connections_inside_a_request_are_not_closed_for_a_new_client(self):
        with Server(extra_args=["--max-connections", str(self.CAP)]) as srv:
            socks = []
            try:
                for _ in range(self.CAP):
                    s = connect(srv.port)
                    socks.append(s)
                    send_raw(s, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # half a head
                wait_server_read(srv.port, socks)  # every connection busy, none idle
                extra = connect(srv.port)
                socks.append(extra)
                closed, data, _ = wait_closed(extra, 3.0)
                self.assertTrue(data, "no answer for a client over the cap (closed=%s)" % closed)
                assert_error(self, parse_response_bytes(data, extra), 503, "unavailable",
                             "over the cap with every connection busy: ")
                for i, s in enumerate(socks[:-1]):  # each still finishes its request
                    send_raw(s, b"\r\n")
                    self.assertEqual(read_response(s).status, 200, "busy connection %d" % i)
            finally:
                for s in socks:
                    s.close()


class IdleMemoryTests(unittest.TestCase):
    """An idle connection costs at most 768 bytes; closed ones give memory back."""

    def test_idle_connection_memory(self):
        if sanitized_binary():
            self.skipTest("RSS is not measurable under AddressSanitizer (shadow memory, "
                          "quarantine); the plain build runs this test")
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.assertGreater(soft, MEM_CONNS + 100, "RLIMIT_NOFILE too low for the test")
        with Server(users=["alice"], extra_args=["--fsync", "never",
                                                   "--max-connections-per-address", "0"]) as srv:
            auth = auth_header("alice", srv.keys["alice"])
            # A body the decoder reads in full, refused without storing anything, so
            # memory growth is the connections' alone.
            req = build_request("POST", "/v2/theme", b'{"Theme":{"Name":"x","Nope":1}}',
                                {"Authorization": auth, "Content-Type": "application/json"})

            def one_request(s):
                send_raw(s, req)
                r = read_response(s)
                self.assertEqual(r.status, 400, repr(r))

            s = connect(srv.port)  # warm up: every lazily made server structure exists
            one_request(s)
            s.close()
            time.sleep(SETTLE_S)
            base = vm_rss(srv.proc.pid)

            socks = []
            try:
                start = time.monotonic()
                for _ in range(MEM_CONNS):
                    s = connect(srv.port)
                    socks.append(s)
                    send_raw(s, req)
                for s in socks:
                    r = read_response(s)
                    self.assertEqual(r.status, 400, repr(r))
                self.assertLess(time.monotonic() - start, 30, "requests too slow")
                busy = vm_rss(srv.proc.pid)
                idle = settled_rss(srv.proc.pid)
                per_conn = (idle - base) / MEM_CONNS
                print("\n  RSS: baseline %d KiB, %d connections just served %d KiB, idle %d KiB"
                      " = %.0f bytes per idle connection"
                      % (base // 1024, MEM_CONNS, busy // 1024, idle // 1024, per_conn),
                      file=sys.stderr)
                self.assertTrue(srv.running(), "server died")
                self.assertLessEqual(per_conn, IDLE_CONN_LIMIT + IDLE_CONN_SLACK,
                                     "RSS per idle connection")
            finally:
                for s in socks:
                    s.close()
            time.sleep(SETTLE_S)
            after = vm_rss(srv.proc.pid)
            print("  RSS after closing them all: %d KiB (%+d KiB from the baseline)"
                  % (after // 1024, (after - base) // 1024), file=sys.stderr)
            self.assertLessEqual(after - base, 1024 * 1024,
                                 "RSS did not fall back near the baseline after the close")


class KitReuseTests(unittest.TestCase):
    """The parser travels with the kit (server_pool.c): a kit given back by a connection
    that ended inside a request serves the next connection's request from its start.
    Kits are reused last-in first-out, so the next connection takes that kit."""

    def test_kit_of_a_connection_closed_inside_a_chunk_serves_the_next(self):
        with Server() as srv:
            a = connect(srv.port)
            try:
                # The chunk's data is complete: its CRLF terminator is still expected.
                send_raw(a, b"POST /v2/theme HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello")
                wait_server_read(srv.port, [a])
                a.shutdown(socket.SHUT_WR)  # the request is cut short: the server closes
                wait_server_closed(srv.port, a, 2.0)
            finally:
                a.close()
            b = connect(srv.port)
            try:
                send_raw(b, build_request("GET", "/healthz"))
                self.assertEqual(read_response(b).status, 200,
                                 "a request on the connection after one closed inside a chunk")
            finally:
                b.close()

    def test_kit_of_a_connection_timed_out_inside_its_head_serves_the_next(self):
        with Server(extra_args=["--header-timeout-ms", "300"]) as srv:
            a = connect(srv.port)
            try:
                send_raw(a, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ")
                assert_error(self, read_response(a, timeout=5.0), 408, "request_timeout")
                # The answer is out: the connection lingers, its kit given back.
                b = connect(srv.port)
                try:
                    send_raw(b, build_request("GET", "/healthz"))
                    self.assertEqual(read_response(b).status, 200,
                                     "a request on the connection after one timed out in its head")
                finally:
                    b.close()
            finally:
                a.close()


class LingerTests(unittest.TestCase):
    """Error answers reach a client that sends everything before reading."""

    TRIES = 20
    BIG = 2 * 1024 * 1024  # over the default --max-body-bytes (1 MiB)

    def test_413_reaches_client_that_sends_whole_body_first(self):
        with Server() as srv:
            body = b"x" * self.BIG
            resets = []
            for i in range(self.TRIES):
                c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
                try:
                    # http.client writes the whole request, then reads.
                    c.request("POST", "/v2/theme", body=body,
                              headers={"Content-Type": "application/json"})
                    r = c.getresponse()
                    data = r.read()
                    self.assertEqual(r.status, 413, "try %d: %r" % (i, data))
                    self.assertIn(b'"Code":"body_too_large"', data, "try %d" % i)
                except (ConnectionResetError, BrokenPipeError) as e:
                    resets.append("try %d: %r" % (i, e))
                finally:
                    c.close()
            self.assertEqual(resets, [], "%d of %d tries lost the 413 to a reset"
                             % (len(resets), self.TRIES))

    def test_503_over_the_cap_reaches_client_that_sends_whole_request_first(self):
        # Every connection busy: the refused client's request is unread when the
        # server answers; without the drain, closing would reset the 503 away.
        with Server(extra_args=["--max-connections", "2"]) as srv:
            busy = [connect(srv.port, timeout=10) for _ in range(2)]
            for s in busy:
                send_raw(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # half a head
            wait_server_read(srv.port, busy)  # both busy, neither idle
            body = b"x" * 65536
            resets = []
            for i in range(self.TRIES):
                c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
                try:
                    c.request("POST", "/v2/theme", body=body,
                              headers={"Content-Type": "application/json"})
                    r = c.getresponse()
                    data = r.read()
                    self.assertEqual(r.status, 503, "try %d: %r" % (i, data))
                    self.assertIn(b'"Code":"unavailable"', data, "try %d" % i)
                except (ConnectionResetError, BrokenPipeError) as e:
                    resets.append("try %d: %r" % (i, e))
                finally:
                    c.close()
            for s in busy:
                s.close()
            self.assertEqual(resets, [], "%d of %d tries lost the 503 to a reset"
                             % (len(resets), self.TRIES))

    def test_400_intact_when_more_bytes_follow_a_bad_header(self):
        with Server() as srv:
            s = connect(srv.port, timeout=10)
            try:
                head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nNo colon here\r\n\r\n"
                try:
                    send_raw(s, head + b"y" * (1024 * 1024))
                    r = read_response(s, timeout=10)
                except (ConnectionResetError, BrokenPipeError) as e:
                    self.fail("the 400 was lost to a reset: %r" % e)
                assert_error(self, r, 400, "bad_request")
                self.assertEqual(r.header("connection"), "close")
            finally:
                s.close()

    def test_lingering_ends_after_linger_ms(self):
        with Server(extra_args=["--linger-ms", "300"]) as srv:
            s = connect(srv.port)
            try:
                send_raw(s, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nBad\r\n\r\n")
                assert_error(self, read_response(s), 400, "bad_request")
                closed, data, _ = wait_closed(s, 2.0)  # the server's write side ends at once
                self.assertTrue(closed and not data, "no end of the answer (data %r)" % data)
                # We stay silent past --linger-ms: then the socket is closed for good,
                # so what we send now is answered with a reset.
                wait_server_closed(srv.port, s, 2.0)
                with self.assertRaises((ConnectionResetError, BrokenPipeError)):
                    for _ in range(20):
                        s.sendall(b"z")
                        s.settimeout(0.1)
                        try:
                            s.recv(1)
                        except socket.timeout:
                            pass
            finally:
                s.close()


class PipelineBytesTests(unittest.TestCase):
    """--max-pipeline-bytes: a client that pipelines requests for large answers
    and reads none stops being read once its queued answers reach that many
    bytes, well before --max-pipeline answers; reading resumes as they leave,
    and every answer comes, in order (README "Settings")."""

    def test_reading_pauses_on_queued_bytes_and_resumes(self):
        # --max-pipeline 1024: the count alone would read every request below.
        with Server(extra_args=["--max-pipeline-bytes", "65536", "--max-pipeline", "1024"]) as srv:
            s = socket.socket()
            self.addCleanup(s.close)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the answers cannot leave
            s.settimeout(20)
            s.connect(("127.0.0.1", srv.port))
            # The OpenAPI document (about 245 KB) more times than the server's socket
            # takes (its send buffer grows to tcp_wmem's largest), so answers stay
            # queued; then 5 small requests padded to 7 KB: 35 KB behind them, more
            # than a read of the server's (16 KB).
            with open("/proc/sys/net/ipv4/tcp_wmem") as f:
                wmem_max = int(f.read().split()[2])
            docs = wmem_max // 245000 + 8
            pad = "x" * 7000
            blob = b"".join(build_request("GET", "/v2/openapi.json", headers={
                "X-Request-ID": "doc%d" % i}) for i in range(docs))
            blob += b"".join(build_request("GET", "/healthz", headers={
                "X-Pad": pad, "X-Request-ID": "h%d" % i}) for i in range(5))
            s.sendall(blob)
            time.sleep(0.5)
            unread = harness._server_socket(srv.port, s)[0]
            self.assertGreater(unread, 0, "the server read on past 64 KB of queued answers")
            got = []
            for _ in range(docs + 5):
                r = read_response(s, timeout=20)
                got.append((r.header("X-Request-ID"), r.status))
            self.assertEqual(got, [("doc%d" % i, 200) for i in range(docs)] +
                             [("h%d" % i, 200) for i in range(5)])


class SchedulingTests(unittest.TestCase):
    """--sched-batch (off by default): every thread of the server, the worker
    threads that start later included, runs under SCHED_BATCH; without it,
    the default policy (README "Settings")."""

    def policies(self, srv):
        """{thread id: policy} of every thread of the server, once a sync has run
        on a worker thread (--loop-sync-max-us 0), so that libuv's pool exists."""
        body = b'{"Theme":{"Name":"t"}}'
        headers = {"Authorization": auth_header("alice", srv.keys["alice"]),
                   "Content-Type": "application/json"}
        r = request(srv.port, "POST", "/v2/theme", body, headers)
        self.assertEqual(r.status, 200, r.body)
        tids = [int(t) for t in os.listdir("/proc/%d/task" % srv.proc.pid)]
        return {t: os.sched_getscheduler(t) for t in tids}

    def test_sched_batch_puts_every_thread_under_batch(self):
        with Server(users=["alice"], extra_args=["--fsync", "always", "--loop-sync-max-us", "0",
                                                 "--sched-batch"]) as srv:
            got = self.policies(srv)
            self.assertGreater(len(got), 1, "no worker thread started")
            self.assertEqual(set(got.values()), {os.SCHED_BATCH}, got)
            self.assertIn("scheduling batch)", srv.stderr_text())

    def test_more_hashes_at_once_get_threads_of_their_own(self):
        # --pwhash-concurrency above 2 grows libuv's pool to it + 2 threads, so the
        # log keeps two (review, 2026-11-28: at 4 of a pool of 4, a sign-in flood
        # held creates for 60 ms).
        counts = {}
        for conc in ("2", "6"):
            with Server(users=["alice"], extra_args=[
                    "--fsync", "always", "--loop-sync-max-us", "0",
                    "--pwhash-concurrency", conc]) as srv:
                counts[conc] = len(self.policies(srv))
        self.assertEqual(counts["6"] - counts["2"], 4, counts)

    def test_default_policy_by_default(self):
        with Server(users=["alice"], extra_args=["--fsync", "always", "--loop-sync-max-us", "0"]) as srv:
            got = self.policies(srv)
            self.assertGreater(len(got), 1, "no worker thread started")
            self.assertEqual(set(got.values()), {os.SCHED_OTHER}, got)
            self.assertIn("scheduling default)", srv.stderr_text())

    def test_environment_variable_turns_it_on(self):
        with Server(users=["alice"], env={"EVENTD_SCHED_BATCH": "true"}) as srv:
            self.assertEqual(os.sched_getscheduler(srv.proc.pid), os.SCHED_BATCH)

    def test_a_policy_set_from_outside_is_kept_and_named(self):
        # chrt -i: the operator's choice stands when --sched-batch is not given.
        with Server(users=["alice"], wrapper=["chrt", "-i", "0"]) as srv:
            self.assertEqual(os.sched_getscheduler(srv.proc.pid), os.SCHED_IDLE)
            self.assertIn("scheduling idle)", srv.stderr_text())

if __name__ == "__main__":
    unittest.main(verbosity=2)
