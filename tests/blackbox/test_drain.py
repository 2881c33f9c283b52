"""Black-box tests of the drain window on SIGTERM (--drain-ms, README "Signals",
docker/README.md "Graceful shutdown"): eventd keeps serving, /healthz answers
503 draining, every answer closes its connection, idle keep-alive connections
stay open until the window ends, then the shutdown runs as before. A second
SIGTERM ends the window early; --drain-ms 0 stops at once, as before.

The harness sets EVENTD_DRAIN_MS=0 for every other suite; these tests pass
--drain-ms (a flag wins over its variable).

Run: EVENTD_BIN=build/eventd python3 tests/blackbox/test_drain.py [Class[.test]]
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from apiclient import Client  # noqa: E402
from harness import (  # noqa: E402
    EVENTD_BIN, ConnectionClosed, Server, auth_header, build_request, clean_env, connect, is_open,
    read_response, request, send_raw, wait_closed, wait_until)

DRAIN_MS = 3000       # long enough to act inside the window on a loaded (or sanitized) run
LONG_DRAIN_MS = 60000  # a window no test waits out
DRAINING_LINE = "draining for"
EXIT_SLACK_S = 10.0   # after the window: the shutdown and the final flush


def start_drain(test, srv):
    """SIGTERM, then wait until eventd logs that the window began."""
    srv.send_signal(signal.SIGTERM)
    test.assertTrue(wait_until(lambda: DRAINING_LINE in srv.stderr_text(), 5.0),
                    "no %r log line after SIGTERM; stderr:\n%s"
                    % (DRAINING_LINE, srv.stderr_text()))


def keepalive_get(sock, srv, user="u"):
    """An authenticated GET of the user's themes on sock; returns the response."""
    send_raw(sock, build_request("GET", "/v2/theme",
                                 headers={"Authorization": auth_header(user, srv.keys[user])}))
    return read_response(sock)


class DrainTests(unittest.TestCase):
    def test_healthz_answers_503_draining(self):
        with Server(extra_args=["--drain-ms", str(LONG_DRAIN_MS)]) as srv:
            start_drain(self, srv)
            r = request(srv.port, "GET", "/healthz")
            self.assertEqual((r.status, r.json()["Error"]["Code"]), (503, "draining"), repr(r))

    def test_metrics_gauge_says_draining(self):
        with Server(extra_args=["--drain-ms", str(LONG_DRAIN_MS)]) as srv:
            start_drain(self, srv)
            r = request(srv.port, "GET", "/metrics")
            self.assertEqual(r.status, 200, repr(r))
            self.assertIn("\neventd_draining 1\n", r.body.decode(), r.body[:2000])

    def test_request_on_keepalive_connection_answered_with_close(self):
        with Server(extra_args=["--drain-ms", str(LONG_DRAIN_MS)], users=["u"]) as srv:
            s = connect(srv.port)
            try:
                self.assertEqual(keepalive_get(s, srv).status, 200)
                start_drain(self, srv)
                r = keepalive_get(s, srv)
                self.assertEqual((r.status, (r.header("Connection") or "").lower()),
                                 (200, "close"), repr(r))
            finally:
                s.close()

    def test_keepalive_connection_closes_after_its_answer(self):
        with Server(extra_args=["--drain-ms", str(LONG_DRAIN_MS)], users=["u"]) as srv:
            s = connect(srv.port)
            try:
                self.assertEqual(keepalive_get(s, srv).status, 200)
                start_drain(self, srv)
                keepalive_get(s, srv)
                closed, data, _ = wait_closed(s, 3.0)
                self.assertTrue(closed and not data,
                                "connection still open after its drain answer (data %r)" % data)
            finally:
                s.close()

    def test_new_connection_served(self):
        with Server(extra_args=["--drain-ms", str(LONG_DRAIN_MS)], users=["u"]) as srv:
            start_drain(self, srv)
            r = request(srv.port, "GET", "/v2/theme",
                        headers={"Authorization": auth_header("u", srv.keys["u"])})
            self.assertEqual(r.status, 200, repr(r))

    def test_idle_keepalive_connection_stays_open_and_is_answered(self):
        with Server(extra_args=["--drain-ms", str(LONG_DRAIN_MS)], users=["u"]) as srv:
            s = connect(srv.port)
            try:
                self.assertEqual(keepalive_get(s, srv).status, 200)
                time.sleep(0.3)  # idle longer than the shutdown's grace (SHUTDOWN_GRACE_MS)
                start_drain(self, srv)
                self.assertTrue(is_open(s, 1.0), "an idle connection closed in the window")
                self.assertEqual(keepalive_get(s, srv).status, 200)
            finally:
                s.close()

    def test_exits_0_after_window_with_write_of_the_window_kept(self):
        with Server(extra_args=["--drain-ms", str(DRAIN_MS)], users=["u"]) as srv:
            start_drain(self, srv)
            c = Client(srv.port, "u", srv.keys["u"])
            try:
                rec = c.must_create("theme", {"Name": "drained"})
            finally:
                c.close()
            rc = srv.wait(DRAIN_MS / 1000 + EXIT_SLACK_S)
            self.assertEqual(rc, 0, srv.stderr_text())
            data_dir, keys = srv.data_dir, dict(srv.keys)
            srv.own_dir = False  # keep the data directory for the restart
        try:
            with Server(data_dir=data_dir) as again:
                c = Client(again.port, "u", keys["u"])
                try:
                    r = c.get("theme", rec["ID"])
                finally:
                    c.close()
                self.assertEqual(r.status, 200, r.describe())
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)

    def test_second_sigterm_ends_the_window(self):
        with Server(extra_args=["--drain-ms", str(LONG_DRAIN_MS)]) as srv:
            start_drain(self, srv)
            srv.send_signal(signal.SIGTERM)
            self.assertEqual(srv.wait(EXIT_SLACK_S), 0, srv.stderr_text())

    def test_drain_ms_0_closes_idle_connections_at_once(self):
        with Server(extra_args=["--drain-ms", "0"], users=["u"]) as srv:
            s = connect(srv.port)
            try:
                self.assertEqual(keepalive_get(s, srv).status, 200)
                time.sleep(0.3)  # idle longer than the shutdown's grace (SHUTDOWN_GRACE_MS)
                srv.send_signal(signal.SIGTERM)
                closed, data, _ = wait_closed(s, 3.0)
                self.assertTrue(closed and not data,
                                "idle connection not closed at SIGTERM (data %r)" % data)
            finally:
                s.close()


class DrainEdges(unittest.TestCase):
    """What a drain does to a held change-feed call, a pipelining client, and /healthz
    once the window is over (review of 2026-11-28)."""

    def feed(self, sock, srv, wait):
        send_raw(sock, build_request("GET", "/v2/changes?after=0&wait=%d" % wait,
                                     headers={"Authorization": auth_header("u", srv.keys["u"])}))

    def test_a_held_feed_call_is_answered_with_close_when_the_drain_begins(self):
        with Server(extra_args=["--drain-ms", str(LONG_DRAIN_MS)], users=["u"]) as srv:
            s = connect(srv.port)
            try:
                self.feed(s, srv, 30)
                time.sleep(0.3)  # held: nothing of the user's is new
                start_drain(self, srv)
                r = read_response(s, timeout=5.0)
                self.assertEqual((r.status, r.json()["Result"]["Changes"],
                                  (r.header("Connection") or "").lower()), (200, [], "close"), repr(r))
                closed, data, _ = wait_closed(s, 3.0)
                self.assertTrue(closed and not data, "still open after its drain answer (%r)" % data)
            finally:
                s.close()

    def test_a_feed_call_in_the_window_is_held_until_just_before_its_end(self):
        with Server(extra_args=["--drain-ms", str(DRAIN_MS)], users=["u"]) as srv:
            start_drain(self, srv)
            began = time.monotonic()
            s = connect(srv.port)
            try:
                self.feed(s, srv, 30)
                r = read_response(s, timeout=DRAIN_MS / 1000 + 5.0)
                held = time.monotonic() - began
            finally:
                s.close()
            # Not at once (its client would poll again at once, for the whole window), and
            # before the window ends (answered 500 ms before it, with close).
            self.assertEqual((r.status, (r.header("Connection") or "").lower()), (200, "close"),
                             repr(r))
            self.assertGreater(held, 1.0)
            self.assertLess(held, DRAIN_MS / 1000)

    def test_a_pipelining_client_gets_its_answer_and_a_clean_end_not_a_reset(self):
        with Server(extra_args=["--drain-ms", str(LONG_DRAIN_MS)], users=["u"]) as srv:
            start_drain(self, srv)
            s = connect(srv.port)
            try:
                get = build_request("GET", "/v2/theme",
                                    headers={"Authorization": auth_header("u", srv.keys["u"])})
                # The first answer ends the connection; the rest stay unread, more than eventd
                # reads at once, so some are still in its socket when the answer is out.
                send_raw(s, get * 1000)
                time.sleep(0.5)
                r = read_response(s)
                self.assertEqual((r.status, (r.header("Connection") or "").lower()), (200, "close"))
                s.settimeout(5.0)
                try:
                    rest = s.recv(65536)
                except ConnectionResetError:
                    rest = "reset"
                self.assertEqual(rest, b"", "the connection ended with %r, not a clean close" % rest)
            finally:
                s.close()

    def test_a_pipeline_in_the_write_at_sigterm_ends_with_an_answer_that_says_close(self):
        """A client pipelines 24 requests for the OpenAPI document (256 KB) and reads
        none: at SIGTERM the answers eventd is writing are all it has queued, the rest of
        the requests wait unread. The drain ended that connection once those answers were
        written, and none said Connection: close (15 answers, then the end): a balancer
        takes such a connection for reusable, which is what the drain is there to avoid
        (docker/README.md: eventd closes a connection only right after an answer that said
        Connection: close)."""
        with Server(extra_args=["--drain-ms", str(LONG_DRAIN_MS)]) as srv:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(10)
            try:
                s.connect(("127.0.0.1", srv.port))
                send_raw(s, build_request("GET", "/v2/openapi.json") * 24)
                time.sleep(0.5)  # the answers fill the sockets; eventd stops reading
                start_drain(self, srv)
                answers = []
                try:
                    while len(answers) < 24:
                        answers.append(read_response(s, timeout=10))
                except ConnectionClosed:
                    pass
                self.assertTrue(answers)
                self.assertEqual([r.status for r in answers], [200] * len(answers))
                self.assertEqual((answers[-1].header("Connection") or "").lower(), "close",
                                 "the connection ended after %d answers, the last without "
                                 "Connection: close" % len(answers))
            finally:
                s.close()

    def test_healthz_says_draining_after_the_window_too(self):
        with Server(extra_args=["--drain-ms", str(LONG_DRAIN_MS)]) as srv:
            s = connect(srv.port)
            try:
                send_raw(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # a request in flight
                start_drain(self, srv)
                srv.send_signal(signal.SIGTERM)  # the window ends: the stop waits for it
                self.assertTrue(wait_until(lambda: "SIGTERM: stopping" in srv.stderr_text(), 5.0),
                                srv.stderr_text())
                send_raw(s, b"\r\n")
                r = read_response(s, timeout=5.0)
                self.assertEqual((r.status, r.json()["Error"]["Code"]), (503, "draining"), repr(r))
            finally:
                s.close()


class StopDuringStartupTests(unittest.TestCase):
    """SIGTERM or SIGINT before the server listens (a long replay; here a test
    build's pause in it) ends the process at once, with a line saying so, also
    as PID 1: a container's process, to which the kernel gives no default
    action (podman stop then waited its grace period and sent SIGKILL)."""

    PAUSE_MS = 60000

    def start(self, pid1, extra=()):
        data = tempfile.mkdtemp(prefix="eventd-bb-")
        self.addCleanup(shutil.rmtree, data, True)
        args = [EVENTD_BIN, "serve", "--listen", "127.0.0.1:0", "--data", data,
                "--no-demo-user"] + list(extra)
        if pid1:  # a PID namespace of its own, as in a container (user namespace: no root needed)
            args = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child"] + args
        err = open(os.path.join(data, "stderr"), "w+")
        self.addCleanup(err.close)
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err,
                                env=clean_env({"EVENTD_FAULT_REPLAY_PAUSE_MS": str(self.PAUSE_MS)}
                                              if self.PAUSE_MS else None))
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))

        def text():
            with open(err.name) as f:
                return f.read()
        ready = "replay paused" if self.PAUSE_MS else "listening on 127.0.0.1:"
        self.assertTrue(wait_until(lambda: ready in text(), 10.0), text())
        pid = proc.pid
        if pid1:  # eventd is unshare's child
            with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                pid = int(f.read().split()[0])
            with open("/proc/%d/status" % pid) as f:
                self.assertIn("\nNSpid:\t%d\t1\n" % pid, f.read())
        return proc, pid, text

    def stops_at_once(self, pid1, sig):
        proc, pid, text = self.start(pid1)
        os.kill(pid, sig)
        try:
            rc = proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.fail("eventd%s did not stop within 5 s of signal %d during replay; stderr:\n%s"
                      % (" as PID 1" if pid1 else "", sig, text()))
        self.assertEqual(rc, 0, text())
        self.assertIn("eventd: stopped by a signal before serving (during startup)", text())

    def test_sigterm_as_pid_1(self):
        self.stops_at_once(True, signal.SIGTERM)

    def test_sigint_as_pid_1(self):
        self.stops_at_once(True, signal.SIGINT)

    def test_sigterm_as_any_process(self):
        self.stops_at_once(False, signal.SIGTERM)

    def test_a_signal_during_the_stop_ends_pid_1_at_once(self):
        """Once the stop waits for a request in flight (--shutdown-timeout-ms),
        the next SIGTERM ends the process at once, as PID 1 too (status 143)."""
        self.PAUSE_MS = 0
        proc, pid, text = self.start(True, extra=["--drain-ms", "0",
                                                  "--shutdown-timeout-ms", "60000"])
        port = int(text().split("listening on 127.0.0.1:")[1].split()[0])
        s = connect(port)
        try:
            send_raw(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # a request in flight
            os.kill(pid, signal.SIGTERM)
            self.assertTrue(wait_until(lambda: "SIGTERM: stopping" in text(), 5.0), text())
            os.kill(pid, signal.SIGTERM)
            try:
                rc = proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self.fail("eventd as PID 1 did not end within 5 s of a second SIGTERM; "
                          "stderr:\n" + text())
            self.assertEqual(rc, 128 + signal.SIGTERM, text())
            self.assertIn("eventd: a signal during the stop: exiting now", text())
        finally:
            s.close()


if __name__ == "__main__":
    unittest.main()
