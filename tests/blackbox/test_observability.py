"""Black-box tests of observability (README "Observability"): GET /metrics,
the JSON access log on stderr, and X-Request-ID.

Each test starts the real binary on 127.0.0.1:0 with a fresh data dir.
Python 3 standard library only; every wait is bounded.
"""

import json
import re
import time
import unittest

from harness import (Server, auth_header, build_request, connect, read_response, request,
                     send_raw, wait_server_read, wait_until)

GENERATED_RID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]+$")
SAMPLE = re.compile(r'^([a-z_]+)(\{[^}]*\})? (\S+)$')


def scrape(port):
    r = request(port, "GET", "/metrics")
    if r.status != 200:
        raise AssertionError("GET /metrics answered %d: %r" % (r.status, r.body[:200]))
    return r


def samples(resp):
    """{(name, labels): value} of a scrape; labels as the raw '{...}' text or ''."""
    out = {}
    for line in resp.body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise AssertionError("not a sample line: %r" % line)
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def access_lines(srv):
    """The access log lines (JSON objects) written so far."""
    out = []
    for line in srv.stderr_text().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def post_theme(srv, user, headers=None, path="/v2/theme"):
    h = {"Authorization": auth_header(user, srv.keys[user])}
    h.update(headers or {})
    return request(srv.port, "POST", path, body={"Theme": {"Name": "t"}}, headers=h)


class MetricsTests(unittest.TestCase):
    def test_content_type_is_prometheus_text_0_0_4(self):
        with Server() as srv:
            r = scrape(srv.port)
            self.assertEqual(r.header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8")

    def test_theme_create_counter_moves_by_exactly_one(self):
        with Server(users=["alice"]) as srv:
            key = ('eventd_http_requests_total', '{route="theme_create",code="200"}')
            before = samples(scrape(srv.port)).get(key, 0)
            self.assertEqual(post_theme(srv, "alice").status, 200)
            after = samples(scrape(srv.port)).get(key, 0)
            self.assertEqual(after - before, 1)

    def test_histogram_buckets_monotonic_and_count_is_requests(self):
        with Server() as srv:
            for _ in range(7):
                self.assertEqual(request(srv.port, "GET", "/healthz").status, 200)
            s = samples(scrape(srv.port))
            name = "eventd_http_request_duration_seconds"
            buckets = [(float(k[1][5:-2]) if k[1] != '{le="+Inf"}' else float("inf"), v)
                       for k, v in s.items() if k[0] == name + "_bucket"]
            buckets.sort()
            self.assertEqual(len(buckets), 18)
            values = [v for _, v in buckets]
            self.assertEqual(values, sorted(values), "buckets must not decrease")
            # The scrape itself is counted once it has been written: 7 requests before it.
            self.assertEqual(s[(name + "_count", "")], 7)
            self.assertEqual(values[-1], 7)
            total = sum(v for k, v in s.items() if k[0] == "eventd_http_requests_total")
            self.assertEqual(total, 7)

    def test_change_feed_calls_have_their_route_and_no_latency(self):
        """GET /v2/changes counts under route="changes", not "other"; a held call
        (?wait) stays out of the latency histogram, which it would drown."""
        with Server(users=["alice"]) as srv:
            h = {"Authorization": auth_header("alice", srv.keys["alice"])}
            r = request(srv.port, "GET", "/v2/changes", headers=h)
            self.assertEqual(r.status, 200, repr(r))
            cursor = r.json()["Result"]["NextCursor"]
            r = request(srv.port, "GET", "/v2/changes?wait=1&after=" + cursor, headers=h)
            self.assertEqual((r.status, r.json()["Result"]["Changes"]), (200, []), repr(r))
            s = samples(scrape(srv.port))
            self.assertEqual(s.get(("eventd_http_requests_total",
                                    '{route="changes",code="200"}')), 2)
            self.assertNotIn(("eventd_http_requests_total", '{route="other",code="200"}'), s)
            self.assertEqual(s[("eventd_http_request_duration_seconds_count", "")], 0)

    def test_records_gauge_counts_live_themes(self):
        with Server(users=["alice"]) as srv:
            self.assertEqual(post_theme(srv, "alice").status, 200)
            s = samples(scrape(srv.port))
            self.assertEqual(s[("eventd_records", '{kind="theme"}')], 1)
            self.assertEqual(s[("eventd_records", '{kind="user"}')], 1)

    def test_fsync_histogram_counts_a_synced_write(self):
        with Server(users=["alice"], extra_args=["--fsync", "always"]) as srv:
            self.assertEqual(post_theme(srv, "alice").status, 200)
            s = samples(scrape(srv.port))
            self.assertGreaterEqual(s[("eventd_fsync_duration_seconds_count", "")], 1)

    def test_loop_sync_max_us_picks_where_syncs_run(self):
        # 0: every sync on a worker thread; 10 s: every plain batch on the loop.
        total, on_loop = ("eventd_fsyncs_total", ""), ("eventd_fsyncs_on_loop_total", "")
        for limit, want in (("0", 0), ("10000000", 3)):
            args = ["--fsync", "always", "--loop-sync-max-us", limit]
            with self.subTest(limit=limit), Server(users=["alice"], extra_args=args) as srv:
                before = samples(scrape(srv.port))
                for _ in range(3):
                    self.assertEqual(post_theme(srv, "alice").status, 200)
                s = samples(scrape(srv.port))
                self.assertEqual(s[total] - before[total], 3)
                self.assertEqual(s[on_loop] - before[on_loop], want)

    def test_never_syncs_when_its_unsynced_bytes_reach_the_limit(self):
        # "never" syncs only its id reservations (one per 32,768 creates), unless what it
        # wrote since its last sync reaches --fsync-max-unsynced-bytes: 24 creates of 4 KB
        # pass 64 KiB and make one sync (at least); under the default 32 MiB, none.
        total = ("eventd_fsyncs_total", "")
        for limit, synced in (("65536", True), (None, False)):
            args = ["--fsync", "never", "--max-string-bytes", "4000"]
            if limit:
                args += ["--fsync-max-unsynced-bytes", limit]
            with self.subTest(limit=limit), Server(users=["alice"], extra_args=args) as srv:
                h = {"Authorization": auth_header("alice", srv.keys["alice"])}
                body = {"Theme": {"Name": "n" * 4000}}
                self.assertEqual(request(srv.port, "POST", "/v2/theme", body=body,
                                         headers=h).status, 200)  # the first reservation
                time.sleep(0.2)
                before = samples(scrape(srv.port))[total]
                for _ in range(24):
                    self.assertEqual(request(srv.port, "POST", "/v2/theme", body=body,
                                             headers=h).status, 200)
                deadline = time.monotonic() + 5
                after = samples(scrape(srv.port))[total]
                while synced and after == before and time.monotonic() < deadline:
                    time.sleep(0.05)
                    after = samples(scrape(srv.port))[total]
                if not synced:
                    time.sleep(0.2)  # a sync, had there been one, would show by now
                    after = samples(scrape(srv.port))[total]
                self.assertEqual(after > before, synced, (before, after))

    def test_failed_signin_counts_as_signin_failed(self):
        with Server() as srv:
            key = ("eventd_account_events_total", '{event="signin_failed"}')
            self.assertEqual(samples(scrape(srv.port))[key], 0)
            r = request(srv.port, "POST", "/signin", body={"username": "nobody",
                                                           "password": "wrong password"})
            self.assertEqual(r.status, 401)
            self.assertEqual(samples(scrape(srv.port))[key], 1)

    def test_no_metrics_makes_it_404(self):
        with Server(extra_args=["--no-metrics"]) as srv:
            self.assertEqual(request(srv.port, "GET", "/metrics").status, 404)


class AccessLogTests(unittest.TestCase):
    def test_line_fields_and_no_query(self):
        with Server(users=["alice"]) as srv:
            s = connect(srv.port)
            try:
                send_raw(s, build_request("GET", "/v2/theme?limit=5&token=hunter2", headers={
                    "Authorization": auth_header("alice", srv.keys["alice"]),
                    "X-Request-ID": "trace-42"}))
                r = read_response(s)
            finally:
                s.close()
            self.assertEqual(r.status, 200)
            lines = wait_until(lambda: [l for l in access_lines(srv)
                                        if l.get("request_id") == "trace-42"], 5)
            self.assertEqual(len(lines), 1, srv.stderr_text())
            line = lines[0]
            self.assertEqual(sorted(line), sorted(["time", "method", "path", "status", "bytes",
                                                   "us", "user_id", "request_id", "client"]))
            self.assertEqual(line["method"], "GET")
            self.assertEqual(line["path"], "/v2/theme")
            self.assertEqual(line["status"], 200)
            self.assertEqual(line["bytes"], len(r.raw))
            self.assertIsInstance(line["us"], int)
            self.assertGreater(line["user_id"], 0)
            self.assertEqual(line["client"], "127.0.0.1")
            self.assertNotIn("hunter2", srv.stderr_text())

    def test_an_answer_given_after_authentication_names_the_user(self):
        # README "Observability": user_id is the authenticated user. Answers given when
        # the headers came, once the key was checked, logged 0: a bad Idempotency-Key
        # (400) and a write the storage guard refuses (507).
        cases = [("idempotency", [], {"Idempotency-Key": "a b"}, 400),
                 ("guard", ["--min-free-disk-bytes", str(1 << 52)], {}, 507)]
        for name, args, headers, status in cases:
            with self.subTest(name), Server(users=["alice"], extra_args=args) as srv:
                ok = request(srv.port, "GET", "/v2/theme", headers={
                    "Authorization": auth_header("alice", srv.keys["alice"]),
                    "X-Request-ID": "who-0"})
                self.assertEqual(ok.status, 200)
                h = {"X-Request-ID": "who-1"}
                h.update(headers)
                self.assertEqual(post_theme(srv, "alice", headers=h).status, status)

                def both():
                    got = {l["request_id"]: l for l in access_lines(srv)
                           if l["request_id"] in ("who-0", "who-1")}
                    return got if len(got) == 2 else None
                lines = wait_until(both, 5)
                self.assertEqual(lines["who-1"]["status"], status)
                self.assertGreater(lines["who-0"]["user_id"], 0)
                self.assertEqual(lines["who-1"]["user_id"], lines["who-0"]["user_id"])

    def test_path_is_json_escaped(self):
        with Server() as srv:
            # A backslash is legal in llhttp's request target; the line must stay JSON.
            r = request(srv.port, "GET", "/nope\\x")
            self.assertEqual(r.status, 404)
            lines = wait_until(lambda: [l for l in access_lines(srv) if l["status"] == 404], 5)
            self.assertEqual([l["path"] for l in lines], ["/nope\\x"])

    def refused_line(self, srv, raw, status):
        """The access line of the request sent as raw bytes, which eventd refuses with status."""
        s = connect(srv.port)
        try:
            send_raw(s, raw)
            r = read_response(s)
        finally:
            s.close()
        self.assertEqual(r.status, status)
        rid = r.header("X-Request-ID")
        lines = wait_until(lambda: [l for l in access_lines(srv) if l["request_id"] == rid], 5)
        self.assertEqual(len(lines), 1, srv.stderr_text())
        return lines[0]

    def test_a_body_refused_by_its_length_logs_its_request_line(self):
        # README: the method is "-" only when the request line could not be read;
        # this one was read whole, and its headers too (413 before the body).
        with Server() as srv:
            line = self.refused_line(srv, b"POST /v2/theme?k=hunter2 HTTP/1.1\r\nHost: x\r\n"
                                     b"Content-Length: 99999999999\r\n\r\n", 413)
            self.assertEqual(line["method"], "POST")
            self.assertEqual(line["path"], "/v2/theme")
            self.assertNotIn("hunter2", srv.stderr_text())

    def test_a_request_timed_out_in_its_headers_logs_its_request_line(self):
        with Server(extra_args=["--header-timeout-ms", "300"]) as srv:
            line = self.refused_line(srv, b"GET /v2/theme/7 HTTP/1.1\r\nHo", 408)
            self.assertEqual(line["method"], "GET")
            self.assertEqual(line["path"], "/v2/theme/7")

    def test_a_request_line_that_could_not_be_read_logs_a_dash(self):
        with Server() as srv:
            line = self.refused_line(srv, b"GET /v2 HTTP/9.1\r\nHost: x\r\n\r\n", 505)
            self.assertEqual(line["method"], "-")

    def test_no_access_log_silences_it(self):
        with Server(extra_args=["--no-access-log"]) as srv:
            for _ in range(3):
                self.assertEqual(request(srv.port, "GET", "/healthz").status, 200)
            self.assertEqual(srv.stop(), 0)
            srv.read_to_end()
            self.assertEqual(access_lines(srv), [])

    def test_on_by_default(self):
        with Server() as srv:
            self.assertEqual(request(srv.port, "GET", "/healthz").status, 200)
            self.assertEqual(srv.stop(), 0)
            srv.read_to_end()  # the line is written at the stop (--access-log-flush-ms)
            self.assertEqual([l["path"] for l in access_lines(srv)], ["/healthz"])


class RequestIdTests(unittest.TestCase):
    def rid(self, srv, value=None, path="/healthz"):
        headers = {"X-Request-ID": value} if value is not None else None
        return request(srv.port, "GET", path, headers=headers).header("X-Request-ID")

    def test_given_is_echoed(self):
        with Server() as srv:
            self.assertEqual(self.rid(srv, "a.B_9:z-1"), "a.B_9:z-1")

    def test_64_bytes_kept_65_replaced(self):
        with Server() as srv:
            self.assertEqual(self.rid(srv, "x" * 64), "x" * 64)
            self.assertRegex(self.rid(srv, "x" * 65), GENERATED_RID)

    def test_bad_characters_replaced(self):
        with Server() as srv:
            got = self.rid(srv, 'evil"id</script>')
            self.assertRegex(got, GENERATED_RID)

    def test_generated_when_absent_and_unique(self):
        with Server() as srv:
            ids = [self.rid(srv) for _ in range(5)]
            for i in ids:
                self.assertRegex(i, GENERATED_RID)
            self.assertEqual(len(set(ids)), 5)

    def test_echoed_on_an_error_answer(self):
        with Server() as srv:
            self.assertEqual(self.rid(srv, "e-404", path="/nope"), "e-404")

    def test_generated_on_a_malformed_request(self):
        with Server() as srv:
            s = connect(srv.port)
            try:
                send_raw(s, b"GET / HTTP/1.1\r\nBad Header\r\n\r\n")
                r = read_response(s)
            finally:
                s.close()
            self.assertEqual(r.status, 400)
            self.assertRegex(r.header("X-Request-ID"), GENERATED_RID)

    def test_generated_on_the_503_at_the_connection_cap(self):
        with Server(extra_args=["--max-connections", "1"]) as srv:
            busy = connect(srv.port)
            try:
                send_raw(busy, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # inside a request
                wait_server_read(srv.port, [busy])  # read: the connection is busy, not idle
                s = connect(srv.port)
                try:
                    r = read_response(s)
                finally:
                    s.close()
            finally:
                busy.close()
            self.assertEqual(r.status, 503)
            self.assertRegex(r.header("X-Request-ID"), GENERATED_RID)

    def test_in_access_log(self):
        with Server() as srv:
            got = self.rid(srv)
            lines = wait_until(lambda: [l for l in access_lines(srv)
                                        if l["request_id"] == got], 5)
            self.assertEqual(len(lines), 1)


if __name__ == "__main__":
    unittest.main()
