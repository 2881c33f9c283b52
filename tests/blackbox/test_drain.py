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
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from apiclient import Client  # noqa: E402
from harness import (  # noqa: E402
    Server, auth_header, build_request, connect, is_open, read_response, request, send_raw,
    wait_closed, wait_until)

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


if __name__ == "__main__":
    unittest.main()
