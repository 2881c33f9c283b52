"""Black-box tests of the access log's buffer (README "Observability",
--access-log-flush-ms, --access-log-buffer-bytes): lines reach stderr (a pipe
here) once the interval has passed, or at once when the buffer is full, and
every line is written before eventd exits on SIGTERM, or dies of SIGABRT.

Each test starts the real binary on 127.0.0.1:0 with a fresh data dir; every
wait is bounded.

Run: EVENTD_BIN=build/eventd python3 tests/blackbox/test_access_log.py [Class[.test]]
"""

import json
import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import (  # noqa: E402
    Server, build_request, connect, read_response, send_raw, wait_until)

LONG_MS = "60000"  # an interval no test waits out


def access_lines(srv):
    """The access log lines (JSON objects) on stderr so far; a torn line fails json.loads."""
    return [json.loads(line) for line in srv.stderr_text().splitlines() if line.startswith("{")]


def get_many(srv, n, tag):
    """n GET /healthz on one keep-alive connection, X-Request-ID tag-0, tag-1, ..."""
    s = connect(srv.port)
    try:
        for i in range(n):
            send_raw(s, build_request("GET", "/healthz", headers={"X-Request-ID": "%s-%d" % (tag, i)}))
            r = read_response(s)
            if r.status != 200:
                raise AssertionError("GET /healthz answered %d" % r.status)
    finally:
        s.close()


def tagged(srv, tag):
    return [line for line in access_lines(srv) if line["request_id"].startswith(tag + "-")]


def metric(srv, name):
    s = connect(srv.port)
    try:
        send_raw(s, build_request("GET", "/metrics"))
        r = read_response(s)
    finally:
        s.close()
    for line in r.body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no %s in /metrics" % name)


class StalledReaderTests(unittest.TestCase):
    """stderr is a pipe whose reader stopped (a paused `| less`, a stuck log
    collector): once it is full, access lines are dropped and counted, and
    the server answers on; it blocked in write(2) at about 64 KiB before."""

    def test_a_full_stderr_pipe_never_stops_the_server(self):
        with Server(extra_args=["--access-log-flush-ms", "0"]) as srv:
            self.assertEqual(metric(srv, "eventd_access_log_dropped_total"), 0)
            srv.stall_stderr()
            get_many(srv, 1500, "s")  # ~300 KB of lines: the 64 KiB pipe fills
            dropped = metric(srv, "eventd_access_log_dropped_total")
            self.assertGreater(dropped, 0)
            self.assertLess(dropped, 1500)
            srv.resume_stderr()
            # The pipe drains (the reader needs a moment: until then lines are still
            # dropped); the lines of later requests reach it again.
            sent = []

            def one_more_logged():
                sent.append(len(sent))
                get_many(srv, 1, "after%d" % len(sent))
                return wait_until(lambda: tagged(srv, "after%d" % len(sent)), 0.5)

            self.assertTrue(wait_until(one_more_logged, 20))
            self.assertEqual(srv.stop(), 0)


class AccessLogBufferTests(unittest.TestCase):
    def test_lines_appear_once_the_interval_passed(self):
        with Server(extra_args=["--access-log-flush-ms", "100"]) as srv:
            get_many(srv, 20, "a")
            # Still running: the interval's timer wrote them, not the exit.
            self.assertTrue(wait_until(lambda: len(tagged(srv, "a")) == 20, 10), srv.stderr_text())
            self.assertTrue(srv.running())
            self.assertEqual([l["request_id"] for l in tagged(srv, "a")],
                             ["a-%d" % i for i in range(20)])

    def test_full_buffer_is_written_before_the_interval(self):
        # 60 lines of about 200 bytes pass 4096 bytes at least twice.
        with Server(extra_args=["--access-log-flush-ms", LONG_MS,
                                "--access-log-buffer-bytes", "4096"]) as srv:
            get_many(srv, 60, "b")
            self.assertTrue(wait_until(lambda: len(tagged(srv, "b")) >= 20, 10), srv.stderr_text())
            self.assertEqual(srv.stop(), 0)
            srv.read_to_end()
            self.assertEqual(len(tagged(srv, "b")), 60)

    def test_every_line_is_written_on_sigterm(self):
        with Server(extra_args=["--access-log-flush-ms", LONG_MS]) as srv:
            get_many(srv, 50, "c")
            self.assertEqual(srv.stop(signal.SIGTERM), 0)
            srv.read_to_end()
            self.assertEqual([l["request_id"] for l in tagged(srv, "c")],
                             ["c-%d" % i for i in range(50)])
            # ... before the shutdown's log lines.
            err = srv.stderr_text()
            self.assertLess(err.index('"request_id":"c-49"'), err.index("SIGTERM: stopping"))

    def test_every_line_is_written_in_the_drain_window_and_after(self):
        with Server(extra_args=["--access-log-flush-ms", LONG_MS, "--drain-ms", "60000"]) as srv:
            get_many(srv, 10, "d")
            srv.send_signal(signal.SIGTERM)
            self.assertTrue(wait_until(lambda: "draining for" in srv.stderr_text(), 10))
            # The lines before the signal were written as it came, before its log line.
            err = srv.stderr_text()
            self.assertLess(err.index('"request_id":"d-9"'), err.index("draining for"))
            s = connect(srv.port)
            try:
                send_raw(s, build_request("GET", "/healthz", headers={"X-Request-ID": "e-0"}))
                self.assertEqual(read_response(s).status, 503)  # draining
            finally:
                s.close()
            self.assertEqual(srv.stop(signal.SIGTERM), 0)  # the second one ends the window
            srv.read_to_end()
            self.assertEqual(len(tagged(srv, "d")), 10)
            self.assertEqual(len(tagged(srv, "e")), 1)

    def test_abort_writes_the_buffered_lines(self):
        with Server(extra_args=["--access-log-flush-ms", LONG_MS]) as srv:
            get_many(srv, 30, "f")
            self.assertEqual(srv.stop(signal.SIGABRT), -signal.SIGABRT)
            srv.read_to_end()
            self.assertEqual(len(tagged(srv, "f")), 30)

    def test_interval_zero_writes_each_loop_turn(self):
        with Server(extra_args=["--access-log-flush-ms", "0"]) as srv:
            get_many(srv, 5, "g")
            self.assertTrue(wait_until(lambda: len(tagged(srv, "g")) == 5, 10), srv.stderr_text())

    def test_buffer_below_4096_is_refused(self):
        with self.assertRaises(Exception) as cm:
            with Server(extra_args=["--access-log-buffer-bytes", "100"]):
                pass
        self.assertIn("access-log-buffer-bytes", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
