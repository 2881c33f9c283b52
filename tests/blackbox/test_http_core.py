"""Black-box tests of the eventd HTTP core: CLI, routing, parsing, pipelining
and back-pressure, keep-alive, bodies (Content-Length, chunked, 100-continue),
limits, timeouts, the connection cap and graceful shutdown.

A few tests go past the letter of the HTTP-core contract into RFC 9110/9112
robustness (their comments say so): several chunk extensions per chunk, the
size of chunk extensions, no 1xx to HTTP/1.0 clients, CRLF trickling.

Run: EVENTD_BIN=build/eventd python3 tests/blackbox/test_http_core.py [Class[.test]]
"""

import base64
import json
import os
import re
import select
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import (  # noqa: E402
    ConnectionClosed, HarnessError, Server, auth_header, build_request, chunked, connect,
    exchange, find_id, is_open, parse_response_bytes, read_response, request, run_cli, send_raw,
    wait_closed, wait_server_read, wait_until)

ALL_FLAGS = ["--listen", "--data", "--base-path", "--max-header-bytes", "--max-body-bytes",
             "--max-connections", "--max-pipeline", "--header-timeout-ms",
             "--request-timeout-ms", "--idle-timeout-ms", "--shutdown-timeout-ms",
             "--no-demo-user", "--fsync", "--log-level"]

DATE_RE = re.compile(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} "
                     r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} "
                     r"\d{2}:\d{2}:\d{2} GMT$")

# The README's error table, exactly.
ERROR_STATUS = {
    "bad_request": 400, "invalid_json": 400, "invalid_field": 400, "unknown_field": 400,
    "duplicate_field": 400, "id_mismatch": 400, "invalid_query": 400, "unauthorized": 401,
    "not_found": 404, "method_not_allowed": 405, "request_timeout": 408, "conflict": 409,
    "body_too_large": 413, "headers_too_large": 431, "internal": 500, "unavailable": 503,
    "storage_error": 503, "http_version_not_supported": 505,
}

THEME_BODY = b'{"Theme":{"Name":"x"}}'
VOLATILE_KEY = re.compile(r"(?i)(id$|time|date|created|updated|modified|version|etag)")


def normalize(o):
    """JSON with volatile members (ids, timestamps) blanked, for comparisons."""
    if isinstance(o, dict):
        return {k: (None if VOLATILE_KEY.search(k) else normalize(v)) for k, v in o.items()}
    if isinstance(o, list):
        return [normalize(v) for v in o]
    return o


def allow_set(resp):
    return {m.strip() for m in (resp.header("allow") or "").split(",") if m.strip()}


def try_send(sock, data):
    """sendall that tolerates the server having closed already; returns False then."""
    try:
        send_raw(sock, data)
        return True
    except (BrokenPipeError, ConnectionResetError):
        return False


def connection_refused(port):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=0.5)
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    s.close()
    return False


def send_in_background(sock, data):
    """sendall(data) from a thread, since it blocks while the server holds the
    client back; returns the started thread and a list that collects errors."""
    errors = []

    def sender():
        try:
            sock.sendall(data)
        except OSError as e:
            errors.append(e)

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    return t, errors


class Base(unittest.TestCase):
    """Assertion helpers shared by all test classes."""

    maxDiff = 4000

    def check_common(self, resp, ctx=""):
        """Every response: Content-Length == body length, Date in IMF-fixdate;
        JSON bodies: Content-Type application/json; errors: the JSON envelope."""
        if resp.status < 200:
            return
        cl = resp.header("content-length")
        self.assertIsNotNone(cl, "%sresponse has no Content-Length: %r" % (ctx, resp))
        self.assertEqual(int(cl), len(resp.body),
                         "%sContent-Length %s != body length %d" % (ctx, cl, len(resp.body)))
        date = resp.header("date")
        self.assertIsNotNone(date, "%sresponse has no Date header: %r" % (ctx, resp))
        self.assertRegex(date, DATE_RE, "%sDate header not an IMF-fixdate" % ctx)
        if resp.body:
            try:
                json.loads(resp.body)
                is_json = True
            except ValueError:
                is_json = False
            if is_json:
                ct = resp.header("content-type") or ""
                self.assertTrue(ct.lower().startswith("application/json"),
                                "%sJSON body but Content-Type %r: %r" % (ctx, ct, resp))
        if resp.status >= 400:
            self.check_envelope(resp, None, ctx)

    def check_envelope(self, resp, code, ctx=""):
        try:
            doc = json.loads(resp.body)
        except ValueError:
            self.fail("%sexpected a JSON error envelope, got body %r (%r)" % (ctx, resp.body, resp))
        self.assertIsInstance(doc, dict, "%serror body not an object: %r" % (ctx, resp.body))
        self.assertEqual(doc.get("Status"), "error",
                         "%serror body Status should be \"error\": %r" % (ctx, resp.body))
        err = doc.get("Error")
        self.assertIsInstance(err, dict, "%serror body has no Error object: %r" % (ctx, resp.body))
        self.assertIsInstance(err.get("Code"), str, "%sError.Code missing: %r" % (ctx, resp.body))
        self.assertIsInstance(err.get("Message"), str,
                              "%sError.Message missing: %r" % (ctx, resp.body))
        self.assertTrue(err["Message"], "%sError.Message empty: %r" % (ctx, resp.body))
        extra = set(doc) - {"Status", "Error"}
        self.assertFalse(extra, "%sunexpected top-level members %r in %r" % (ctx, extra, resp.body))
        extra = set(err) - {"Code", "Message", "Field"}
        self.assertFalse(extra, "%sunexpected Error members %r in %r" % (ctx, extra, resp.body))
        self.assertIn(err["Code"], ERROR_STATUS, "%sunknown error code: %r" % (ctx, resp.body))
        self.assertEqual(ERROR_STATUS[err["Code"]], resp.status,
                         "%serror code %s does not match status %d" % (ctx, err["Code"], resp.status))
        if code is not None:
            self.assertEqual(err["Code"], code, "%sexpected error code %s, got %r"
                             % (ctx, code, resp.body))

    def assertResp(self, resp, status, code=None, ctx=""):
        if isinstance(status, int):
            status = (status,)
        self.assertIn(resp.status, status, "%sexpected status %s, got %d: %r"
                      % (ctx, "/".join(map(str, status)), resp.status, resp))
        self.check_common(resp, ctx)
        if code is not None:
            self.check_envelope(resp, code, ctx)
        return resp

    def assertClosed(self, sock, timeout=2.0, ctx=""):
        closed, data, elapsed = wait_closed(sock, timeout)
        self.assertTrue(closed, "%sexpected the server to close the connection within %.1fs; "
                        "it stayed open (extra data %r)" % (ctx, timeout, data[:300]))
        return data

    def assertStillOpen(self, sock, wait=0.3, ctx=""):
        self.assertTrue(is_open(sock, wait),
                        "%sexpected the connection to stay open, the server closed it" % ctx)


class SharedServer(Base):
    """One default server (user alice) per test class."""

    extra_args = ()

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(extra_args=cls.extra_args, users=["alice"])
        cls.srv.__enter__()
        cls.port = cls.srv.port
        cls.auth = auth_header("alice", cls.srv.keys["alice"])

    @classmethod
    def tearDownClass(cls):
        cls.srv.__exit__(None, None, None)

    def expect_error_then_close(self, data, status, code, ctx, timeout=2.0):
        s = connect(self.port)
        try:
            try_send(s, data)
            try:
                r = read_response(s, timeout=timeout)
            except HarnessError as e:
                self.fail("%sexpected %d %s, got no response: %s" % (ctx, status, code, e))
            self.assertResp(r, status, code, ctx=ctx)
            self.assertClosed(s, ctx=ctx + "after the error: ")
        finally:
            s.close()

    def create_theme(self, name):
        r = request(self.port, "POST", "/v2/theme", {"Theme": {"Name": name}},
                    {"Authorization": self.auth})
        self.assertResp(r, 200, ctx="POST /v2/theme %s: " % name)
        return find_id(r)


# ---------------------------------------------------------------------------
class CliTests(Base):

    def test_help_exits_0_and_lists_every_flag(self):
        cp = run_cli(["--help"])
        self.assertEqual(cp.returncode, 0, "eventd --help: expected exit 0, got %d (stderr %r)"
                         % (cp.returncode, cp.stderr))
        for flag in ALL_FLAGS:
            if flag == "--no-demo-user" and "--no-NAME" in cp.stdout:
                flag = "--demo-user"    # documented as "Boolean flags also take --no-NAME"
            self.assertIn(flag, cp.stdout, "eventd --help stdout does not mention %s:\n%s"
                          % (flag, cp.stdout))

    def test_version_prints_eventd_semver(self):
        cp = run_cli(["--version"])
        self.assertEqual(cp.returncode, 0, "eventd --version: expected exit 0, got %d"
                         % cp.returncode)
        self.assertRegex(cp.stdout, re.compile(r"^eventd \d+\.\d+\.\d+\s*$", re.M),
                         "eventd --version: expected 'eventd X.Y.Z' on stdout")

    def _expect_usage_error(self, args, env=None):
        with tempfile.TemporaryDirectory(prefix="eventd-cli-") as d:
            cp = run_cli(args, env=env, timeout=5.0, cwd=d)
        ctx = "eventd %s (env %r): " % (" ".join(args), env)
        self.assertEqual(cp.returncode, 2, "%sexpected exit status 2, got %d; stderr=%r"
                         % (ctx, cp.returncode, cp.stderr))
        err = cp.stderr.rstrip("\n")
        self.assertTrue(err.strip(), "%sexpected one line on stderr, got nothing" % ctx)
        self.assertNotIn("\n", err, "%sexpected exactly one line on stderr, got %r" % (ctx, cp.stderr))

    def test_bad_flags_and_values_exit_2_with_one_line(self):
        serve = ["serve", "--data", "data", "--no-demo-user"]
        cases = [
            serve + ["--listen", "127.0.0.1:0", "--bogus"],
            ["--bogus"],
            serve + ["--listen", "nonsense"],
            serve + ["--listen=nonsense"],
            serve + ["--listen", "127.0.0.1:99999"],
            serve + ["--listen", "127.0.0.1:0", "--max-body-bytes", "-5"],
            serve + ["--listen", "127.0.0.1:0", "--max-body-bytes=abc"],
            serve + ["--listen", "127.0.0.1:0", "--fsync", "sometimes"],
            serve + ["--listen", "127.0.0.1:0", "--idle-timeout-ms", "soon"],
            serve + ["--listen", "127.0.0.1:0", "--max-body-bytes"],
            serve + ["--listen", "127.0.0.1:0", "--log-level", "loud"],
            serve + ["--listen", "127.0.0.1:0", "--max-connections", "many"],
            serve + ["--listen", "127.0.0.1:0", "--header-timeout-ms", "1.5"],
            serve + ["--listen", "127.0.0.1:0", "--shutdown-timeout-ms=-1"],
        ]
        for args in cases:
            with self.subTest(args=args):
                self._expect_usage_error(args)

    def test_bad_env_value_exit_2(self):
        self._expect_usage_error(["serve", "--listen", "127.0.0.1:0", "--data", "data",
                                  "--no-demo-user"], env={"EVENTD_MAX_BODY_BYTES": "abc"})

    def test_flag_wins_over_env(self):
        with Server(env={"EVENTD_LISTEN": "bad"}) as srv:
            self.assertResp(request(srv.port, "GET", "/healthz"), 200,
                            ctx="EVENTD_LISTEN=bad with --listen 127.0.0.1:0: ")

    def test_env_vars_configure_server(self):
        env = {"EVENTD_MAX_BODY_BYTES": "100", "EVENTD_BASE_PATH": "/v3"}
        with Server(env=env, users=["alice"]) as srv:
            auth = auth_header("alice", srv.keys["alice"])
            self.assertResp(request(srv.port, "GET", "/v3/theme"), 401, "unauthorized",
                            ctx="EVENTD_BASE_PATH=/v3, GET /v3/theme without auth: ")
            self.assertResp(request(srv.port, "GET", "/v2/theme"), 404, "not_found",
                            ctx="EVENTD_BASE_PATH=/v3, GET /v2/theme: ")
            body = b'{"Theme":{"Name":"' + b"y" * 90 + b'"}}'
            r = request(srv.port, "POST", "/v3/theme", body, {"Authorization": auth})
            self.assertResp(r, 413, "body_too_large",
                            ctx="EVENTD_MAX_BODY_BYTES=100, %d-byte body: " % len(body))

    def test_base_path_flag_and_equals_syntax(self):
        with Server(extra_args=["--base-path=/api", "--max-body-bytes=100"]) as srv:
            self.assertResp(request(srv.port, "GET", "/api/theme"), 401, "unauthorized",
                            ctx="--base-path=/api, GET /api/theme: ")
            self.assertResp(request(srv.port, "GET", "/v2/theme"), 404, "not_found",
                            ctx="--base-path=/api, GET /v2/theme: ")
            self.assertResp(request(srv.port, "GET", "/healthz"), 200,
                            ctx="--base-path=/api, GET /healthz: ")

    def test_serve_is_default_subcommand(self):
        with Server(subcommand=None) as srv:
            self.assertResp(request(srv.port, "GET", "/healthz"), 200,
                            ctx="eventd without 'serve': ")


# ---------------------------------------------------------------------------
class RoutingTests(SharedServer):

    def test_healthz_ok_with_headers(self):
        r = self.assertResp(request(self.port, "GET", "/healthz"), 200, ctx="GET /healthz: ")
        self.assertEqual(r.json(), {"Status": "ok"}, "GET /healthz body")
        import email.utils
        when = email.utils.parsedate_to_datetime(r.header("date")).timestamp()
        self.assertLess(abs(when - time.time()), 5, "Date header %r is not now" % r.header("date"))
        self.assertTrue((r.header("content-type") or "").startswith("application/json"),
                        "GET /healthz Content-Type: %r" % r.header("content-type"))

    def test_healthz_query_string_ignored(self):
        r = self.assertResp(request(self.port, "GET", "/healthz?x=1"), 200,
                            ctx="GET /healthz?x=1: ")
        self.assertEqual(r.json(), {"Status": "ok"})

    def test_unknown_paths_404_without_auth(self):
        for path in ["/v2/nope", "/v1/theme", "/", "/v2/theme/", "/v2/theme/1/x", "/v2",
                     "/v2/", "/healthz/", "/v2/themes", "/V2/theme", "/v2//theme", "/v2x/theme",
                     "/healthzz", "/v2/theme/%31"]:
            with self.subTest(path=path):
                self.assertResp(request(self.port, "GET", path), 404, "not_found",
                                ctx="GET %s: " % path)

    def test_invalid_ids_404_without_auth(self):
        bad = ["0", "-1", "01", "1.5", "abc", "9007199254740992", "+1", "1e3", "00",
               "18446744073709551617", "99999999999999999999999999", "1a", "0x10"]
        for res in ["theme", "address", "event"]:
            for i in bad:
                with self.subTest(resource=res, id=i):
                    path = "/v2/%s/%s" % (res, i)
                    self.assertResp(request(self.port, "GET", path), 404, "not_found",
                                    ctx="GET %s: " % path)

    def test_valid_ids_route_then_require_auth(self):
        for res in ["theme", "address", "event"]:
            for i in ["1", "42", "9007199254740991"]:
                with self.subTest(resource=res, id=i):
                    path = "/v2/%s/%s" % (res, i)
                    r = self.assertResp(request(self.port, "GET", path), 401, "unauthorized",
                                        ctx="GET %s without auth: " % path)
                    self.assertEqual(r.header("www-authenticate"), 'Basic realm="eventd"')

    def test_wrong_method_405_with_allow(self):
        cases = [
            ("PATCH", "/v2/theme/1", {"GET", "HEAD", "PUT", "DELETE"}),
            ("POST", "/v2/theme/1", {"GET", "HEAD", "PUT", "DELETE"}),
            ("DELETE", "/v2/theme", {"GET", "HEAD", "POST"}),
            ("PUT", "/v2/theme", {"GET", "HEAD", "POST"}),
            ("PATCH", "/v2/address/1", {"GET", "HEAD", "PUT", "POST", "DELETE"}),
            ("DELETE", "/v2/address", {"GET", "HEAD", "POST"}),
            ("POST", "/v2/event/1", {"GET", "HEAD", "PUT", "DELETE"}),
            ("PUT", "/v2/event", {"GET", "HEAD", "POST"}),
        ]
        for method, path, allow in cases:
            with self.subTest(method=method, path=path):
                body = b"{}" if method in ("POST", "PUT", "PATCH") else None
                r = self.assertResp(request(self.port, method, path, body), 405,
                                    "method_not_allowed", ctx="%s %s without auth: " % (method, path))
                self.assertEqual(allow_set(r), allow, "%s %s: Allow header %r"
                                 % (method, path, r.header("allow")))

    def test_healthz_wrong_method_405(self):
        r = self.assertResp(request(self.port, "POST", "/healthz", b"{}"), 405,
                            "method_not_allowed", ctx="POST /healthz: ")
        self.assertIn("GET", allow_set(r), "POST /healthz Allow: %r" % r.header("allow"))
        self.assertNotIn("POST", allow_set(r))

    def test_matched_routes_without_credentials_401(self):
        cases = [("GET", "/v2/theme"), ("POST", "/v2/theme"), ("PUT", "/v2/theme/1"),
                 ("DELETE", "/v2/theme/1"), ("GET", "/v2/address"), ("POST", "/v2/address/1"),
                 ("GET", "/v2/event"), ("POST", "/v2/event"), ("DELETE", "/v2/event/3")]
        for method, path in cases:
            with self.subTest(method=method, path=path):
                body = THEME_BODY if method in ("POST", "PUT") else None
                r = self.assertResp(request(self.port, method, path, body), 401, "unauthorized",
                                    ctx="%s %s without auth: " % (method, path))
                self.assertEqual(r.header("www-authenticate"), 'Basic realm="eventd"',
                                 "%s %s: WWW-Authenticate" % (method, path))

    def test_bad_credentials_401(self):
        key = self.srv.keys["alice"]
        bad = {
            "wrong key": auth_header("alice", key + "x"),
            "unknown user": auth_header("mallory", key),
            "empty key": auth_header("alice", ""),
            "bearer": "Bearer " + key,
            "not base64": "Basic !!!not-base64!!!",
            "no colon": "Basic " + base64.b64encode(b"alice").decode(),
        }
        for what, value in bad.items():
            with self.subTest(case=what):
                r = self.assertResp(request(self.port, "GET", "/v2/theme", None,
                                            {"Authorization": value}), 401, "unauthorized",
                                    ctx="GET /v2/theme with %s: " % what)
                self.assertEqual(r.header("www-authenticate"), 'Basic realm="eventd"')

    def test_valid_credentials_accepted(self):
        r = request(self.port, "GET", "/v2/theme", None, {"Authorization": self.auth})
        self.assertResp(r, 200, ctx="GET /v2/theme with valid auth: ")

    def test_unsupported_http_version_rejected_with_json(self):
        for ver in ["HTTP/2.0", "HTTP/3.0", "HTTP/9.9"]:
            with self.subTest(version=ver):
                s = connect(self.port)
                try:
                    send_raw(s, "GET /healthz %s\r\nHost: x\r\n\r\n" % ver)
                    r = read_response(s)
                finally:
                    s.close()
                self.assertResp(r, 505, "http_version_not_supported", ctx="GET /healthz %s: " % ver)


# ---------------------------------------------------------------------------
class ParsingTests(SharedServer):

    def post_theme_chunked(self, name="x"):
        body = ('{"Theme":{"Name":"%s"}}' % name).encode()
        return (b"POST /v2/theme HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: " +
                self.auth.encode() + b"\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + chunked([body[:7], body[7:15], body[15:]]))

    def post_theme_cl(self, name="x"):
        return build_request("POST", "/v2/theme", {"Theme": {"Name": name}},
                             {"Authorization": self.auth})

    def send_bytewise(self, data):
        """Sends data one byte per server read; returns the response."""
        s = connect(self.port)
        try:
            for i in range(len(data)):
                s.sendall(data[i:i + 1])
                wait_server_read(self.port, [s])
            return read_response(s)
        finally:
            s.close()

    def send_split(self, data, cut):
        s = connect(self.port)
        try:
            s.sendall(data[:cut])
            wait_server_read(self.port, [s])  # the rest comes in a read of its own
            s.sendall(data[cut:])
            return read_response(s)
        finally:
            s.close()

    def test_one_byte_at_a_time_get(self):
        r = self.send_bytewise(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               b"User-Agent: bytewise\r\n\r\n")
        self.assertResp(r, 200, ctx="GET /healthz sent byte by byte: ")
        self.assertEqual(r.json(), {"Status": "ok"})

    def test_one_byte_at_a_time_chunked_post(self):
        name = "bytewise-chunked"
        r = self.send_bytewise(self.post_theme_chunked(name))
        self.assertResp(r, 200, ctx="chunked POST /v2/theme sent byte by byte: ")
        tid = find_id(r)
        g = request(self.port, "GET", "/v2/theme/%d" % tid, None, {"Authorization": self.auth})
        self.assertResp(g, 200, ctx="GET /v2/theme/%d after bytewise POST: " % tid)
        self.assertIn(json.dumps(name).encode(), g.body,
                      "theme created by a bytewise chunked POST lost its name: %r" % g.body)

    def test_every_split_point_healthz(self):
        data = b"GET /healthz?a=b HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n"
        ref = request(self.port, "GET", "/healthz?a=b")
        self.assertResp(ref, 200)
        for cut in range(1, len(data)):
            r = self.send_split(data, cut)
            self.assertEqual((r.status, r.body), (ref.status, ref.body),
                             "GET /healthz split at byte %d of %d: expected %d %r, got %r"
                             % (cut, len(data), ref.status, ref.body, r))

    def _split_post(self, make, prefix, what):
        """make(name) -> request bytes.  Each split uses its own theme name of
        the same length (in case names must be unique); the responses must
        equal the unsplit one up to that name and ids/timestamps."""
        ref_name = "%s-ref0" % prefix
        data = make(ref_name)
        ref = self.send_split(data, len(data))
        self.assertResp(ref, 200, ctx="%s unsplit: " % what)
        ref_doc = normalize(ref.json())
        for cut in range(1, len(data)):
            name = "%s-%04d" % (prefix, cut)
            data = make(name)
            r = self.send_split(data, cut)
            self.assertEqual(r.status, ref.status, "%s split at byte %d of %d: expected status "
                             "%d, got %r" % (what, cut, len(data), ref.status, r))
            doc = json.loads(r.body.replace(name.encode(), ref_name.encode()))
            self.assertEqual(normalize(doc), ref_doc, "%s split at byte %d: body differs "
                             "(ids/timestamps ignored): %r vs %r" % (what, cut, r.body, ref.body))

    def test_every_split_point_authenticated_post(self):
        self._split_post(self.post_theme_cl, "split", "Content-Length POST /v2/theme")

    def test_every_split_point_chunked_post(self):
        self._split_post(self.post_theme_chunked, "chunk", "chunked POST /v2/theme")

    def test_pipelined_requests_answered_in_order(self):
        names = ["pipe-%d" % i for i in range(5)]
        ids = [self.create_theme(n) for n in names]
        reqs, expect = [], []
        for i in range(50):
            if i % 3 == 0:
                reqs.append(build_request("GET", "/healthz?i=%d" % i))
                expect.append((200, b'"ok"'))
            elif i % 3 == 1:
                reqs.append(build_request("GET", "/v2/nope/%d" % i))
                expect.append((404, b"not_found"))
            else:
                k = (i // 3) % 5
                reqs.append(build_request("GET", "/v2/theme/%d" % ids[k], None,
                                          {"Authorization": self.auth}))
                expect.append((200, json.dumps(names[k]).encode()))
        s = connect(self.port)
        try:
            s.sendall(b"".join(reqs))
            for i, (status, needle) in enumerate(expect):
                r = read_response(s)
                self.assertEqual(r.status, status, "pipelined response #%d: expected %d, got %r"
                                 % (i, status, r))
                self.assertIn(needle, r.body, "pipelined response #%d: expected body containing "
                              "%r, got %r" % (i, needle, r.body))
                self.check_common(r, "pipelined #%d: " % i)
            self.assertStillOpen(s, ctx="after 50 pipelined requests: ")
        finally:
            s.close()

    def test_pipeline_sent_in_random_pieces(self):
        import random
        rnd = random.Random(1234)
        reqs, expect = [], []
        for i in range(40):
            k = i % 4
            if k == 0:
                reqs.append(build_request("GET", "/healthz?p=%d" % i))
                expect.append((200, b'"ok"'))
            elif k == 1:
                reqs.append(self.post_theme_chunked("rp-%02d" % i))
                expect.append((200, b'"rp-%02d"' % i))
            elif k == 2:
                reqs.append(self.post_theme_cl("rp-%02d" % i))
                expect.append((200, b'"rp-%02d"' % i))
            else:
                reqs.append(build_request("DELETE", "/v2/theme", b"zz"))
                expect.append((405, b"method_not_allowed"))
        data = b"".join(reqs)
        s = connect(self.port)
        try:
            pos, sends = 0, 0
            while pos < len(data) and sends < 10000:
                n = rnd.choice([1, 2, 3, 7, 13, 50, 200, 1000])
                s.sendall(data[pos:pos + n])
                pos += n
                sends += 1
                if sends % 10 == 0:
                    time.sleep(0.001)
            for i, (status, needle) in enumerate(expect):
                r = read_response(s)
                self.assertEqual(r.status, status, "random-piece pipeline #%d: expected %d, got %r"
                                 % (i, status, r))
                self.assertIn(needle, r.body, "random-piece pipeline #%d: body %r lacks %r"
                              % (i, r.body[:300], needle))
        finally:
            s.close()

    def test_header_names_case_insensitive(self):
        body = b'{"Theme":{"Name":"case-ins"}}'
        data = (b"POST /v2/theme HTTP/1.1\r\nhOsT: x\r\nAUTHORIZATION: " + self.auth.encode() +
                b"\r\ncontent-type: application/json\r\ntransfer-ENCODING: Chunked\r\n\r\n" +
                chunked([body[:10], body[10:]]) +
                b"GET /healthz HTTP/1.1\r\nHost: x\r\ncontent-LENGTH: 0\r\nCONNECTION: Close\r\n\r\n")
        s = connect(self.port)
        try:
            s.sendall(data)
            r = self.assertResp(read_response(s), 200,
                                ctx="POST with odd-case header names: ")
            self.assertIn(b'"case-ins"', r.body)
            r = self.assertResp(read_response(s), 200, ctx="GET with 'CONNECTION: Close': ")
            self.assertIn("close", (r.header("connection") or "").lower())
            self.assertClosed(s, ctx="after 'CONNECTION: Close': ")
        finally:
            s.close()

    def test_pipelined_posts_with_bodies_and_final_close(self):
        reqs = [self.post_theme_cl("pb-0"), self.post_theme_chunked("pb-1"),
                self.post_theme_cl("pb-2"),
                build_request("GET", "/healthz", None, {"Connection": "close"})]
        s = connect(self.port)
        try:
            s.sendall(b"".join(reqs))
            got = []
            for i in range(3):
                r = read_response(s)
                self.assertResp(r, 200, ctx="pipelined POST #%d: " % i)
                got.append(find_id(r))
            r = read_response(s)
            self.assertResp(r, 200, ctx="pipelined final GET /healthz with close: ")
            self.assertClosed(s, ctx="after 'Connection: close' as last pipelined request: ")
        finally:
            s.close()
        self.assertEqual(len(set(got)), 3, "three pipelined POSTs should create 3 ids: %r" % got)
        for i, tid in enumerate(got):
            g = request(self.port, "GET", "/v2/theme/%d" % tid, None, {"Authorization": self.auth})
            self.assertResp(g, 200, ctx="GET /v2/theme/%d: " % tid)
            self.assertIn(b'"pb-%d"' % i, g.body, "pipelined POST #%d answered with id %d, "
                          "which holds %r" % (i, tid, g.body))


class HeaderRuleTests(SharedServer):
    """RFC 9112 3.2: Host is required in HTTP/1.1 and never repeated; eventd
    also refuses a repeated Authorization (README decisions)."""

    def test_http11_without_host_400(self):
        self.expect_error_then_close(b"GET /healthz HTTP/1.1\r\n\r\n", 400, "bad_request",
                                     "HTTP/1.1 request without Host: ")

    def test_two_host_headers_400(self):
        self.expect_error_then_close(b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
                                     400, "bad_request", "two Host headers: ")

    def test_two_authorization_headers_400(self):
        a = self.auth.encode()
        self.expect_error_then_close(b"GET /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: " + a +
                                     b"\r\nauthorization: " + a + b"\r\n\r\n",
                                     400, "bad_request", "two Authorization headers: ")

    def test_host_outside_uri_host_grammar_400(self):
        self.expect_error_then_close(b"GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n",
                                     400, "bad_request", "Host: a b: ")

    def test_http10_without_host_200(self):
        r, s = exchange(self.port, b"GET /healthz HTTP/1.0\r\n\r\n")
        s.close()
        self.assertResp(r, 200, ctx="HTTP/1.0 request without Host: ")

    def test_host_forms_accepted(self):
        for host in ["127.0.0.1:8080", "[::1]:80", "example.com", "", "x  "]:
            with self.subTest(host=host):
                r, s = exchange(self.port, b"GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n"
                                % host.encode())
                s.close()
                self.assertResp(r, 200, ctx="Host: %r: " % host)


class BackPressureTests(SharedServer):
    extra_args = ["--max-pipeline", "2"]

    def rss_kib(self):
        with open("/proc/%d/status" % self.srv.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def test_client_that_never_reads_is_not_buffered(self):
        # A client pipelines requests for 2 s and reads nothing. With
        # back-pressure the server stops reading it once its queue is full, so
        # the client's writes block after a few MB of socket buffers and the
        # server's memory stays flat; without, the server would read (and
        # queue answers to) everything the client can send.
        s = connect(self.port, timeout=10)
        s.setblocking(False)
        chunk = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 1000
        rss_before = self.rss_kib()
        sent = 0
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                sent += s.send(chunk)
            except BlockingIOError:
                time.sleep(0.01)
        growth = self.rss_kib() - rss_before
        s.close()
        self.assertLess(sent, 64 << 20, "the server kept reading a client that never reads "
                        "(%d bytes accepted in 2 s)" % sent)
        self.assertLess(growth, 16 * 1024, "server memory grew by %d KiB" % growth)
        self.assertEqual(request(self.port, "GET", "/healthz").status, 200)

    def run_pipeline(self, reqs, expect, what, read_delay=0.5):
        """Writes all reqs in one sendall (from a thread, as it may block while
        the server holds back), waits read_delay, then reads the responses in
        order; expect[i] = (status, bytes the body must contain)."""
        data = b"".join(reqs)
        s = connect(self.port, timeout=10)
        t, errors = send_in_background(s, data)
        try:
            time.sleep(read_delay)     # let the server hit its pipeline limit
            deadline = time.monotonic() + 20
            for i, (status, needle) in enumerate(expect):
                self.assertLess(time.monotonic(), deadline, "%s: responses took > 20s" % what)
                try:
                    r = read_response(s, timeout=5)
                except HarnessError as e:
                    self.fail("%s: response #%d of %d missing: %s" % (what, i, len(reqs), e))
                self.assertEqual(r.status, status, "%s: response #%d: expected %d, got %r"
                                 % (what, i, status, r))
                self.assertIn(needle, r.body, "%s: response #%d: expected body containing %r, "
                              "got %r" % (what, i, needle, r.body[:300]))
            t.join(5)
            self.assertFalse(t.is_alive(), "%s: sender still blocked after all responses" % what)
            self.assertFalse(errors, "%s: sending failed: %r" % (what, errors))
            self.assertStillOpen(s, ctx="%s, after all responses: " % what)
        finally:
            s.close()

    def test_200_pipelined_requests_with_max_pipeline_2(self):
        reqs, expect = [], []
        for i in range(200):
            if i % 3 == 0 or i % 7 == 0:
                reqs.append(build_request("GET", "/v2/none-%d" % i))
                expect.append((404, b"not_found"))
            else:
                reqs.append(build_request("GET", "/healthz?i=%d" % i))
                expect.append((200, b'"ok"'))
        self.run_pipeline(reqs, expect, "--max-pipeline 2, 200 small requests")

    def test_large_pipelined_burst_client_not_reading(self):
        # ~450 KB of requests and ~2 MB of responses: both socket directions fill
        # up while the client is not reading, so the server must stop reading and
        # writing and resume without losing or reordering anything.
        names = ["bp-%02d-" % i + "n" * 190 for i in range(20)]
        for n in names:
            self.create_theme(n)
        pad = {"X-Pad": "p" * 2000}
        auth = dict(pad, Authorization=self.auth)
        reqs, expect = [], []
        for i in range(200):
            if i % 4 == 3:
                reqs.append(build_request("GET", "/healthz?i=%d" % i, None, pad))
                expect.append((200, b'"ok"'))
            elif i % 9 == 4:
                reqs.append(build_request("GET", "/v2/none-%d" % i, None, pad))
                expect.append((404, b"not_found"))
            else:
                reqs.append(build_request("GET", "/v2/theme", None, auth))
                expect.append((200, names[0].encode()))
        self.run_pipeline(reqs, expect, "--max-pipeline 2, 200 large requests/responses",
                          read_delay=1.0)


# ---------------------------------------------------------------------------
class KeepAliveTests(SharedServer):

    def test_http11_keeps_connection_open_by_default(self):
        s = connect(self.port)
        try:
            send_raw(s, build_request("GET", "/healthz"))
            self.assertResp(read_response(s), 200, ctx="first request: ")
            self.assertStillOpen(s, ctx="HTTP/1.1 default keep-alive: ")
            send_raw(s, build_request("GET", "/v2/nope"))
            self.assertResp(read_response(s), 404, ctx="second request on same connection: ")
            send_raw(s, build_request("GET", "/healthz"))
            self.assertResp(read_response(s), 200, ctx="third request on same connection: ")
        finally:
            s.close()

    def test_connection_kept_after_error_responses_with_bodies(self):
        # 401/404/405 are answered without reading the body; the body must still
        # be skipped so that the next pipelined request parses correctly.
        reqs = [
            build_request("POST", "/v2/theme", b'{"Theme":{"Name":"GET /healthz HTTP/1.1"}}'),
            build_request("POST", "/v2/nope", b"x" * 3000),
            b"PATCH /v2/theme/1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunked([b"GET / HTTP/1.1\r\n\r\n", b"y" * 100]),
            build_request("PUT", "/v2/theme/1", b"{}", {"Authorization": "Basic Ym9ndXM6a2V5"}),
            build_request("GET", "/healthz?last=1"),
        ]
        expect = [(401, "unauthorized"), (404, "not_found"), (405, "method_not_allowed"),
                  (401, "unauthorized"), (200, None)]
        s = connect(self.port)
        try:
            s.sendall(b"".join(reqs))
            for i, (status, code) in enumerate(expect):
                try:
                    r = read_response(s, timeout=3)
                except HarnessError as e:
                    self.fail("error response #%d: expected %d %s, got none: %s"
                              % (i, status, code, e))
                self.assertResp(r, status, code, ctx="pipelined after-error request #%d: " % i)
            self.assertStillOpen(s, ctx="after 401/404/405 responses: ")
        finally:
            s.close()

    def test_http10_closes_by_default(self):
        s = connect(self.port)
        try:
            send_raw(s, "GET /healthz HTTP/1.0\r\n\r\n")
            r = read_response(s)
            self.assertResp(r, 200, ctx="HTTP/1.0 GET /healthz: ")
            self.assertNotIn("keep-alive", (r.header("connection") or "").lower())
            self.assertClosed(s, ctx="HTTP/1.0 without keep-alive: ")
        finally:
            s.close()

    def test_http10_keep_alive_header(self):
        s = connect(self.port)
        try:
            for i in range(2):
                send_raw(s, "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                r = read_response(s)
                self.assertResp(r, 200, ctx="HTTP/1.0 keep-alive request #%d: " % i)
                self.assertIn("keep-alive", (r.header("connection") or "").lower(),
                              "HTTP/1.0 keep-alive: response Connection header %r"
                              % r.header("connection"))
                self.assertStillOpen(s, ctx="HTTP/1.0 with Connection: keep-alive: ")
        finally:
            s.close()

    def test_http10_close_wins_over_keep_alive(self):
        # RFC 9112 9.3: "close" ends the connection whatever else the header lists;
        # llhttp lets an HTTP/1.0 "keep-alive" override it.
        s = connect(self.port)
        try:
            send_raw(s, "GET /healthz HTTP/1.0\r\nConnection: close, keep-alive\r\n\r\n")
            r = read_response(s)
            self.assertResp(r, 200, ctx="HTTP/1.0 Connection: close, keep-alive: ")
            self.assertEqual((r.header("connection") or "").lower(), "close")
            self.assertClosed(s, ctx="HTTP/1.0 Connection: close, keep-alive: ")
        finally:
            s.close()

    def test_http11_connection_close(self):
        s = connect(self.port)
        try:
            send_raw(s, build_request("GET", "/healthz", None, {"Connection": "close"}))
            r = read_response(s)
            self.assertResp(r, 200, ctx="HTTP/1.1 Connection: close: ")
            self.assertIn("close", (r.header("connection") or "").lower(),
                          "expected 'Connection: close' in response, got %r" % r.header("connection"))
            self.assertClosed(s, ctx="HTTP/1.1 Connection: close: ")
        finally:
            s.close()


# ---------------------------------------------------------------------------
class BodyTests(SharedServer):

    def get_theme_body(self, tid):
        g = request(self.port, "GET", "/v2/theme/%d" % tid, None, {"Authorization": self.auth})
        self.assertResp(g, 200, ctx="GET /v2/theme/%d: " % tid)
        return g.body

    def test_content_length_body(self):
        tid = self.create_theme("cl-body")
        self.assertIn(b'"cl-body"', self.get_theme_body(tid))

    def post_chunked(self, parts, exts, last_ext=b""):
        enc = b""
        for p, ext in zip(parts, exts):
            enc += b"%X%s\r\n%s\r\n" % (len(p), ext, p)
        enc += b"0%s\r\n\r\n" % last_ext
        data = (b"POST /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: " + self.auth.encode() +
                b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + enc)
        r, s = exchange(self.port, data)
        s.close()
        return r

    def test_chunked_body_several_chunks_with_extensions(self):
        body = b'{"Theme":{"Name":"chunky-name"}}'
        parts = [body[:1], body[1:10], body[10:11], body[11:25], body[25:]]
        exts = [b";ext0=val", b"", b";flag", b';q="quoted value"', b";UPPER-Name=Tok.en"]
        r = self.post_chunked(parts, exts, b";last=1")
        self.assertResp(r, 200, ctx="chunked POST, 5 chunks, one extension per chunk "
                        "%r: " % exts)
        self.assertIn(b'"chunky-name"', self.get_theme_body(find_id(r)))

    # Known limitation, documented in README: Debian 12's llhttp 8.1.0 rejects a
    # chunk line with several name=value extensions (it expects CR after the
    # first value), so eventd answers 400 bad_request. Expected to fail until
    # llhttp is upgraded; an unexpected success fails the suite, so this test
    # says when the limitation is gone.
    @unittest.expectedFailure
    def test_chunked_body_multiple_extensions_per_chunk(self):
        # RFC 9112 7.1.1: chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
        for i, exts in enumerate([[b";a=b;c=d", b""], [b";a=b;flag", b""],
                                  [b";flag;other", b';x="1";y=2']]):
            with self.subTest(exts=exts):
                name = b"multi-ext-%d" % i
                body = b'{"Theme":{"Name":"' + name + b'"}}'
                r = self.post_chunked([body[:9], body[9:]], exts)
                self.assertResp(r, 200, ctx="chunked POST with chunk extensions %r: "
                                % exts)
                self.assertIn(b'"' + name + b'"', self.get_theme_body(find_id(r)))

    def test_chunked_body_with_trailer_fields(self):
        body = b'{"Theme":{"Name":"trailered"}}'
        data = (b"POST /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: " + self.auth.encode() +
                b"\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n" +
                b"%x\r\n%s\r\n0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n" % (len(body), body) +
                build_request("GET", "/healthz?after-trailer=1"))
        r, s = exchange(self.port, data)
        try:
            self.assertResp(r, 200, ctx="chunked POST with trailer fields: ")
            self.assertIn(b'"trailered"', self.get_theme_body(find_id(r)))
            self.assertResp(read_response(s), 200, ctx="request pipelined after the trailer: ")
        finally:
            s.close()

    def test_expect_100_continue(self):
        body = b'{"Theme":{"Name":"continued"}}'
        data = build_request("POST", "/v2/theme", body,
                             {"Authorization": self.auth, "Expect": "100-continue"})
        head = data[:-len(body)]
        s = connect(self.port)
        try:
            s.sendall(head)
            r1 = read_response(s, timeout=2)
            self.assertEqual(r1.status, 100, "Expect: 100-continue: expected 100 before the body, "
                             "got %r" % r1)
            self.assertEqual(r1.raw, b"HTTP/1.1 100 Continue\r\n\r\n",
                             "interim response bytes: %r" % r1.raw)
            s.sendall(body)
            r2 = read_response(s)
            self.assertResp(r2, 200, ctx="final response after 100 Continue: ")
            self.assertIn(b'"continued"', self.get_theme_body(find_id(r2)))
        finally:
            s.close()

    def test_expect_100_continue_head_sent_bytewise(self):
        body = b'{"Theme":{"Name":"continued-bytewise"}}'
        data = build_request("POST", "/v2/theme", body,
                             {"Authorization": self.auth, "Expect": "100-continue"})
        head = data[:-len(body)]
        s = connect(self.port)
        try:
            for i in range(len(head)):
                s.sendall(head[i:i + 1])
                wait_server_read(self.port, [s])
            r1 = read_response(s, timeout=2)
            self.assertEqual(r1.raw, b"HTTP/1.1 100 Continue\r\n\r\n", "Expect: 100-continue "
                             "(head sent byte by byte): expected 100 first, got %r" % r1)
            s.sendall(body)
            self.assertResp(read_response(s), 200, ctx="final response after 100: ")
        finally:
            s.close()

    def test_expect_100_not_sent_to_http10_client(self):
        # RFC 9110 15.2: "A server MUST NOT send a 1xx response to an HTTP/1.0 client."
        body = b'{"Theme":{"Name":"continued-10"}}'
        data = build_request("POST", "/v2/theme", body,
                             {"Authorization": self.auth, "Expect": "100-continue"},
                             version="HTTP/1.0")
        s = connect(self.port)
        try:
            s.sendall(data[:-len(body)])
            # Read: a 100 it would (wrongly) send goes out in the same callback.
            wait_server_read(self.port, [s])
            s.sendall(body)
            r = read_response(s)
            self.assertNotEqual(r.status, 100, "HTTP/1.0 request with Expect: 100-continue got "
                                "an interim response: %r" % r.raw)
            self.assertResp(r, 200, ctx="HTTP/1.0 POST with Expect: 100-continue: ")
        finally:
            s.close()

    def test_expect_100_with_too_large_body_gets_413_only(self):
        data = (b"POST /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: " + self.auth.encode() +
                b"\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
                b"Content-Length: 2000000\r\n\r\n")
        s = connect(self.port)
        try:
            s.sendall(data)
            r = read_response(s, timeout=2)
            self.assertResp(r, 413, "body_too_large",
                            ctx="Expect: 100-continue with Content-Length 2000000: ")
            self.assertClosed(s, ctx="after 413: ")
        finally:
            s.close()


# ---------------------------------------------------------------------------
class DefaultLimitTests(SharedServer):

    def test_long_header_431(self):
        data = build_request("GET", "/healthz", None, {"X-Long": "a" * 10000})
        self.expect_error_then_close(data, 431, "headers_too_large", "10000-byte header: ")

    def test_many_headers_431(self):
        hdrs = {"X-Header-%04d" % i: "v" * 20 for i in range(400)}
        data = build_request("GET", "/healthz", None, hdrs)
        self.expect_error_then_close(data, 431, "headers_too_large", "400 headers (~14 KB): ")

    def test_long_request_line_431(self):
        # The request line counts against --max-header-bytes (README): 431, not 414.
        data = b"GET /healthz?q=" + b"a" * 10000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
        self.expect_error_then_close(data, 431, "headers_too_large", "10 KB request line: ")

    def test_headers_just_under_default_limit_ok(self):
        data = build_request("GET", "/healthz", None, {"X-Long": "a" * 7000})
        r, s = exchange(self.port, data)
        s.close()
        self.assertResp(r, 200, ctx="7000-byte header under 8192 limit: ")

    def test_content_length_over_limit_413_before_body(self):
        data = (b"POST /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: " + self.auth.encode() +
                b"\r\nContent-Type: application/json\r\nContent-Length: 1048577\r\n\r\n")
        start = time.monotonic()
        self.expect_error_then_close(data, 413, "body_too_large",
                                     "Content-Length 1048577 (no body sent): ")
        self.assertLess(time.monotonic() - start, 4.5)

    def test_malformed_requests_400_and_close(self):
        a = self.auth.encode()
        cases = {
            "garbage": b"GARBAGE\r\n\r\n",
            "header without colon": b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
            "invalid chunk size": b"POST /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: " + a +
            b"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
            "Content-Length abc": b"POST /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: " + a +
            b"\r\nContent-Length: abc\r\n\r\n{}",
            "negative Content-Length": b"POST /v2/theme HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: " + a + b"\r\nContent-Length: -5\r\n\r\n{}",
            "both CL and TE": b"POST /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: " + a +
            b"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "conflicting Content-Lengths": b"POST /v2/theme HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: " + a + b"\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}}",
            "NUL in header value": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
            "no request target": b"GET HTTP/1.1\r\nHost: x\r\n\r\n",
        }
        for what, data in cases.items():
            with self.subTest(case=what):
                self.expect_error_then_close(data, 400, "bad_request", "%s: " % what)


class SmallLimitTests(DefaultLimitTests):
    extra_args = ["--max-header-bytes", "1024", "--max-body-bytes=100"]

    # inherited default-limit cases also hold with smaller limits, except these:
    test_headers_just_under_default_limit_ok = None
    test_content_length_over_limit_413_before_body = None

    def test_small_header_limit(self):
        ok = build_request("GET", "/healthz", None, {"X-Pad": "p" * 600})
        r, s = exchange(self.port, ok)
        s.close()
        self.assertResp(r, 200, ctx="~650-byte head with --max-header-bytes 1024: ")
        big = build_request("GET", "/healthz", None, {"X-Pad": "p" * 1100})
        self.expect_error_then_close(big, 431, "headers_too_large",
                                     "~1150-byte head with --max-header-bytes 1024: ")

    def test_header_limit_counted_across_reads(self):
        s = connect(self.port)
        try:
            try_send(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            for i in range(40):        # 40 x 50 bytes = 2000 > 1024, never an end of headers
                if not try_send(s, b"X-H%02d: " % i + b"v" * 42 + b"\r\n"):
                    break
                wait_server_read(self.port, [s], or_closed=True)  # one read per line
            try:
                r = read_response(s, timeout=2)
            except HarnessError as e:
                self.fail("2 KB of headers in 40 reads with --max-header-bytes 1024: expected "
                          "431, got: %s" % e)
            self.assertResp(r, 431, "headers_too_large",
                            ctx="2 KB of headers in 40 reads, --max-header-bytes 1024: ")
            self.assertClosed(s)
        finally:
            s.close()

    def test_whitespace_in_headers_counts_toward_limit(self):
        # Every byte of the request line and headers counts, including the
        # optional whitespace around a header value.
        for what, line in [("spaces before a value", b"X-Ws:" + b" " * 20000 + b"a"),
                           ("tabs before a value", b"X-Ws:" + b"\t" * 3000 + b"a"),
                           ("spaces after a value", b"X-Ws: a" + b" " * 3000)]:
            with self.subTest(case=what):
                data = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + line + b"\r\n\r\n"
                self.expect_error_then_close(
                    data, 431, "headers_too_large",
                    "%d-byte head (%s) with --max-header-bytes 1024: " % (len(data), what))

    def test_header_limit_independent_of_read_boundaries(self):
        # A ~480-byte head is under --max-header-bytes 1024 however it is split
        # into reads: byte by byte it must still be accepted.
        hdrs = {"X-Long-Header-Name-Number-%02d-abcdefghij" % i: "v" for i in range(10)}
        data = build_request("GET", "/healthz", None, hdrs)
        r, s = exchange(self.port, data)
        s.close()
        self.assertResp(r, 200, ctx="%d-byte head in one write: " % len(data))
        s = connect(self.port)
        try:
            for i in range(len(data)):
                if not try_send(s, data[i:i + 1]):
                    break
                wait_server_read(self.port, [s], or_closed=True)  # one read per byte
            try:
                r = read_response(s)
            except ConnectionClosed as e:
                self.fail("%d-byte head sent byte by byte with --max-header-bytes 1024: closed "
                          "without an answer (%s)" % (len(data), e))
            self.assertResp(r, 200, ctx="%d-byte head sent byte by byte with --max-header-bytes "
                            "1024: " % len(data))
        finally:
            s.close()

    def test_limits_are_per_request_on_keepalive(self):
        # 5 requests of ~750-byte heads and 5 bodies of 90 bytes on one connection:
        # each is under the limits, together they are far over them.
        body = b'{"Theme":{"Name":"per-req-%d"}}'
        reqs = []
        for i in range(5):
            reqs.append(build_request("GET", "/healthz?n=%d" % i, None, {"X-Pad": "p" * 700}))
            b = body % i
            reqs.append(build_request("POST", "/v2/theme", b + b" " * (90 - len(b)),
                                      {"Authorization": self.auth}))
        s = connect(self.port)
        try:
            s.sendall(b"".join(reqs[:4]))          # pipelined ...
            for i in range(4):
                self.assertResp(read_response(s), 200,
                                ctx="pipelined request #%d under the limits: " % i)
            for i in range(4, 10):                 # ... and one after the other
                s.sendall(reqs[i])
                self.assertResp(read_response(s), 200,
                                ctx="sequential request #%d under the limits: " % i)
        finally:
            s.close()

    def test_body_limit_boundary(self):
        body = b'{"Theme":{"Name":"edge"}}'
        exact = body + b" " * (100 - len(body))
        r = request(self.port, "POST", "/v2/theme", exact, {"Authorization": self.auth})
        self.assertResp(r, 200, ctx="100-byte body with --max-body-bytes 100: ")
        over = body + b" " * (101 - len(body))
        data = build_request("POST", "/v2/theme", over, {"Authorization": self.auth})
        head = data[:-len(over)]
        self.expect_error_then_close(head, 413, "body_too_large",
                                     "Content-Length 101 with --max-body-bytes 100 (no body): ")

    def test_huge_chunk_extension_rejected(self):
        # RFC 9112 7.1.1: a server ought to limit the total length of chunk
        # extensions and answer 4xx; 2 MB of extension text (20000x the body
        # limit) must not be accepted.
        body = b'{"Theme":{"Name":"ext"}}'
        data = (b"POST /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: " + self.auth.encode() +
                b"\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x;e=" % len(body) +
                b"a" * 2000000 + b"\r\n" + body + b"\r\n0\r\n\r\n")
        s = connect(self.port, timeout=10)
        t = threading.Thread(target=try_send, args=(s, data), daemon=True)
        try:
            t.start()
            # Chunk extensions count against the body limit (http.c): 413.
            r = read_response(s, timeout=5)
            self.assertResp(r, 413, "body_too_large", ctx="chunk with a 2 MB extension, "
                            "--max-body-bytes 100: ")
            self.assertClosed(s)
        finally:
            s.close()
            t.join(5)

    def test_chunked_body_over_limit_413(self):
        data = (b"POST /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: " + self.auth.encode() +
                b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        data += b"3c\r\n" + b" " * 60 + b"\r\n" + b"3c\r\n" + b" " * 60 + b"\r\n"
        self.expect_error_then_close(data, 413, "body_too_large",
                                     "chunked body of 120 bytes with --max-body-bytes 100: ")


# ---------------------------------------------------------------------------
class TimeoutTests(Base):

    def trickle_until_closed(self, sock, data, interval=0.1, max_seconds=3.0):
        """Sends data one byte per interval until the server closes; returns
        (closed, received_bytes, seconds)."""
        start = time.monotonic()
        received = b""
        for i in range(len(data)):
            if time.monotonic() - start > max_seconds:
                break
            if not try_send(sock, data[i:i + 1]):
                return True, received, time.monotonic() - start
            r, _, _ = select.select([sock], [], [], interval)
            if r:
                try:
                    chunk = sock.recv(65536)
                except (ConnectionResetError, BrokenPipeError):
                    return True, received, time.monotonic() - start
                if not chunk:
                    return True, received, time.monotonic() - start
                received += chunk
        return False, received, time.monotonic() - start

    def check_408(self, sock, received, ctx):
        """A request cut short by its timeout is answered 408 before the close (README)."""
        try:
            r = parse_response_bytes(received, sock)
        except HarnessError as e:
            self.fail("%sexpected 408 request_timeout before the close, got %r (%s)"
                      % (ctx, received[:300], e))
        self.assertResp(r, 408, "request_timeout", ctx=ctx)

    def test_header_timeout_slowloris(self):
        with Server(extra_args=["--header-timeout-ms", "300"]) as srv:
            s = connect(srv.port)
            try:
                send_raw(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                closed, received, secs = self.trickle_until_closed(s, b"X-Slow: " + b"a" * 60)
                self.assertTrue(closed, "--header-timeout-ms 300: slowloris client still "
                                "connected after %.1fs" % secs)
                self.assertLess(secs, 2.0, "--header-timeout-ms 300: closed only after %.2fs" % secs)
                self.check_408(s, received, "header timeout: ")
            finally:
                s.close()

    def test_request_timeout_slow_body(self):
        with Server(extra_args=["--request-timeout-ms", "500", "--header-timeout-ms", "5000"],
                    users=["alice"]) as srv:
            s = connect(srv.port)
            try:
                send_raw(s, b"POST /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: " +
                          auth_header("alice", srv.keys["alice"]).encode() +
                          b"\r\nContent-Length: 100\r\n\r\n")
                closed, received, secs = self.trickle_until_closed(s, b" " * 100)
                self.assertTrue(closed, "--request-timeout-ms 500: slow body still connected "
                                "after %.1fs" % secs)
                self.assertLess(secs, 2.0, "--request-timeout-ms 500: closed after %.2fs" % secs)
                self.check_408(s, received, "request timeout: ")
            finally:
                s.close()

    def test_header_timeout_answers_what_was_queued_before_its_408(self):
        """A request cut short by --header-timeout-ms behind answers that wait
        for the server (here a held change feed call) is answered 408 after
        them, then the connection closes: the earlier requests' answers are
        not dropped with it (it closed at once, sending nothing)."""
        with Server(extra_args=["--header-timeout-ms", "300"], users=["alice"]) as srv:
            auth = auth_header("alice", srv.keys["alice"])
            s = connect(srv.port, timeout=10)
            try:
                send_raw(s, build_request("GET", "/v2/changes", None, {"Authorization": auth}))
                cursor = json.loads(read_response(s).body)["Result"]["NextCursor"]
                send_raw(s, build_request("GET", "/v2/changes?wait=2&after=%s" % cursor, None,
                                          {"Authorization": auth}) +
                         b"GET /healthz HTTP/1.1\r\nHo")
                held = read_response(s, timeout=10)
                self.assertResp(held, 200, ctx="the held call, answered when its wait ended: ")
                self.assertEqual(json.loads(held.body)["Result"]["Changes"], [])
                closed, rest, _ = wait_closed(s, 10)
                self.assertTrue(closed, "no close after the 408: %r" % rest[:300])
                self.check_408(s, rest, "header timeout behind a held call: ")
            finally:
                s.close()

    def test_header_timeout_not_applied_between_requests(self):
        with Server(extra_args=["--header-timeout-ms", "300", "--request-timeout-ms", "600",
                                "--idle-timeout-ms", "5000"]) as srv:
            s = connect(srv.port)
            try:
                time.sleep(0.6)    # a new connection without bytes is idle, not "in headers"
                self.assertStillOpen(s, 0.05, ctx="new silent connection after 0.6s with "
                                     "--header-timeout-ms 300 and --idle-timeout-ms 5000: ")
                send_raw(s, build_request("GET", "/healthz"))
                self.assertResp(read_response(s), 200, ctx="first request: ")
                time.sleep(1.0)    # idle between requests: only the idle timeout applies
                self.assertStillOpen(s, 0.05, ctx="keep-alive idle 1s with --header-timeout-ms "
                                     "300 and --idle-timeout-ms 5000: ")
                # a request sent in pieces but well within both timeouts
                data = build_request("GET", "/healthz?second=1")
                for i in range(0, len(data), 10):
                    s.sendall(data[i:i + 10])
                    wait_server_read(srv.port, [s])  # in pieces, each a read of its own
                self.assertResp(read_response(s), 200, ctx="second request after idle: ")
                time.sleep(0.8)
                send_raw(s, build_request("GET", "/healthz?third=1"))
                self.assertResp(read_response(s), 200,
                                ctx="third request, 0.8s later (> request timeout): ")
            finally:
                s.close()

    def test_requests_parked_by_backpressure_are_not_timed_out(self):
        # The client sends 200 complete requests (~440 KB) at once and reads
        # nothing for 1.2 s. The server holds back (--max-pipeline 2); requests
        # that the client sent in full long ago must not get 408 meanwhile.
        with Server(extra_args=["--max-pipeline", "2", "--header-timeout-ms", "300",
                                "--request-timeout-ms", "400", "--idle-timeout-ms", "5000"]) as srv:
            data = b"".join(build_request("GET", "/healthz?n=%d" % i, None, {"X-Pad": "p" * 2000})
                            for i in range(200))
            s = connect(srv.port, timeout=10)
            t, errors = send_in_background(s, data)
            try:
                time.sleep(1.2)
                for i in range(200):
                    try:
                        r = read_response(s, timeout=5)
                    except HarnessError as e:
                        self.fail("parked pipelined request #%d: no response: %s" % (i, e))
                    self.assertResp(r, 200, ctx="parked pipelined request #%d: " % i)
                t.join(5)
                self.assertFalse(errors, "sending failed: %r" % errors)
            finally:
                s.close()

    def test_idle_timeout_closes_silent_new_connection(self):
        with Server(extra_args=["--idle-timeout-ms", "300"]) as srv:
            s = connect(srv.port)
            try:
                closed, data, secs = wait_closed(s, 2.5)
                self.assertTrue(closed, "--idle-timeout-ms 300: a connection that never sent "
                                "anything is still open after 2.5s")
                self.assertLess(secs, 2.0, "--idle-timeout-ms 300: closed only after %.2fs" % secs)
                # No request was started: the idle close says nothing.
                self.assertEqual(data, b"", "silent connection: idle close should send nothing, "
                                 "got %r" % data[:200])
            finally:
                s.close()

    def test_crlf_trickle_does_not_defeat_timeouts(self):
        # Slowloris variant: empty lines before a request line (which a server
        # may skip, RFC 9112 2.2) sent one every 100 ms must not keep a
        # connection open past the idle/header timeouts.
        with Server(extra_args=["--header-timeout-ms", "300", "--idle-timeout-ms", "300"]) as srv:
            s = connect(srv.port)
            try:
                closed, received, secs = self.trickle_until_closed(s, b"\r\n" * 30)
                self.assertTrue(closed, "--header-timeout-ms 300 --idle-timeout-ms 300: a client "
                                "sending CRLF every 100 ms is still connected after %.1fs" % secs)
                self.assertLess(secs, 2.0, "CRLF trickle: closed only after %.2fs" % secs)
                # Empty lines start no request (llhttp skips them), so the idle
                # timeout closes the connection without an answer.
                self.assertEqual(received, b"", "CRLF trickle: idle close should send nothing, "
                                 "got %r" % received[:300])
            finally:
                s.close()

    def test_idle_timeout_closes_keepalive_connection(self):
        with Server(extra_args=["--idle-timeout-ms", "300"]) as srv:
            s = connect(srv.port)
            try:
                send_raw(s, build_request("GET", "/healthz"))
                self.assertResp(read_response(s), 200)
                closed, data, secs = wait_closed(s, 2.5)
                self.assertTrue(closed, "--idle-timeout-ms 300: idle connection still open "
                                "after 2.5s")
                self.assertLess(secs, 2.0, "--idle-timeout-ms 300: closed only after %.2fs" % secs)
                self.assertGreater(secs, 0.1, "--idle-timeout-ms 300: closed too early, after "
                                   "%.3fs" % secs)
                self.assertEqual(data, b"", "idle close should send nothing, got %r" % data[:200])
            finally:
                s.close()


# ---------------------------------------------------------------------------
class ConnectionCapTests(Base):

    def expect_503_and_close(self, sock, ctx):
        closed, data, _ = wait_closed(sock, 2.0)
        self.assertTrue(closed, "%sthe connection stayed open (got %r)" % (ctx, data[:300]))
        try:
            r = parse_response_bytes(data, sock)
        except HarnessError as e:
            self.fail("%sexpected 503 unavailable, got %r (%s)" % (ctx, data[:300], e))
        return self.assertResp(r, 503, "unavailable", ctx=ctx)

    def test_max_connections(self):
        with Server(extra_args=["--max-connections", "3"]) as srv:
            socks = []
            try:
                for i in range(3):
                    s = connect(srv.port)
                    socks.append(s)
                    send_raw(s, build_request("GET", "/healthz"))
                    self.assertResp(read_response(s), 200, ctx="connection %d of 3: " % (i + 1))
                    # busy: half a request head, so it cannot be closed for a newcomer
                    send_raw(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                # Over the cap with every connection busy: 503 unavailable, written at
                # accept, then a close (README).
                fourth = connect(srv.port)
                socks.append(fourth)
                try_send(fourth, build_request("GET", "/healthz"))
                rejected = self.expect_503_and_close(fourth, "4th connection with "
                                                     "--max-connections 3: ")
                for i in range(5):     # more rejected attempts must not leak slots
                    extra = connect(srv.port)
                    try:
                        try_send(extra, build_request("GET", "/healthz"))
                        self.expect_503_and_close(extra, "rejected attempt %d: " % i)
                    finally:
                        extra.close()
                socks[0].close()
                ok = []

                def try_new():
                    try:
                        r = request(srv.port, "GET", "/healthz", timeout=1.0)
                    except (HarnessError, OSError):
                        return False
                    ok.append(r)
                    return r.status == 200

                self.assertTrue(wait_until(try_new, 3.0, 0.1),
                                "after closing one of 3 connections a new one was not served; "
                                "last: %r" % (ok[-1:],))
                for s in socks[1:3]:   # the busy ones finish their requests
                    send_raw(s, b"\r\n")
                    self.assertResp(read_response(s), 200, ctx="kept connection: ")
                self.assertEqual(rejected.header("retry-after"), "1",
                                 "503 over the connection cap: Retry-After")
            finally:
                for s in socks:
                    s.close()


# ---------------------------------------------------------------------------
class ShutdownTests(Base):

    def test_sigterm_finishes_inflight_request_then_exits_0(self):
        with Server(extra_args=["--shutdown-timeout-ms", "5000"], users=["alice"]) as srv:
            auth = auth_header("alice", srv.keys["alice"])
            body = b'{"Theme":{"Name":"inflight!"}}'
            data = build_request("POST", "/v2/theme", body, {"Authorization": auth})
            s = connect(srv.port)
            try:
                s.sendall(data[:-len(body) // 2])
                wait_server_read(srv.port, [s])  # the request is in flight
                srv.send_signal(signal.SIGTERM)
                refused = wait_until(lambda: connection_refused(srv.port), 2.0, 0.1)
                self.assertTrue(refused, "new connections still accepted 2s after SIGTERM")
                self.assertTrue(srv.running(), "server exited with a request in flight "
                                "(exit %r); stderr:\n%s" % (srv.proc.returncode, srv.stderr_text()))
                s.sendall(data[-len(body) // 2:])
                r = read_response(s)
                self.assertResp(r, 200, ctx="in-flight POST finished after SIGTERM: ")
            finally:
                s.close()
            rc = srv.wait(5.0)
            self.assertEqual(rc, 0, "exit status after SIGTERM: expected 0, got %r; stderr:\n%s"
                             % (rc, srv.stderr_text()))

    def test_sigint_exits_0(self):
        with Server() as srv:
            self.assertResp(request(srv.port, "GET", "/healthz"), 200)
            rc = srv.stop(signal.SIGINT, timeout=5.0)
            self.assertEqual(rc, 0, "exit status after SIGINT: expected 0, got %r" % rc)

    def test_sigterm_idle_keepalive_exits_0(self):
        with Server(extra_args=["--shutdown-timeout-ms", "3000"]) as srv:
            s = connect(srv.port)
            try:
                send_raw(s, build_request("GET", "/healthz"))
                self.assertResp(read_response(s), 200)
                rc = srv.stop(signal.SIGTERM, timeout=5.0)
                self.assertEqual(rc, 0, "exit status after SIGTERM with an idle keep-alive "
                                 "connection: expected 0, got %r" % rc)
            finally:
                s.close()

    def test_stuck_client_does_not_block_shutdown(self):
        with Server(extra_args=["--shutdown-timeout-ms", "800"]) as srv:
            s = connect(srv.port)
            try:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Partial: yes")
                wait_server_read(srv.port, [s])  # the server holds a half-read request
                start = time.monotonic()
                srv.send_signal(signal.SIGTERM)
                rc = srv.wait(3.5)
                secs = time.monotonic() - start
                self.assertIsNotNone(rc, "--shutdown-timeout-ms 800 with a stuck client: still "
                                     "running 3.5s after SIGTERM")
                self.assertEqual(rc, 0, "exit status with a stuck client: expected 0, got %r" % rc)
            finally:
                s.close()
            self.assertLess(secs, 3.5)


class AbruptClientTests(SharedServer):
    """Clients that vanish: the server must neither die (SIGPIPE) nor leak."""

    def test_client_closes_before_reading_its_responses(self):
        body = b'{"Theme":{"Name":"gone"}}'
        req = (b"POST /v2/theme HTTP/1.1\r\nHost: x\r\nAuthorization: " +
               self.auth.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        for i in range(30):
            s = connect(self.port)
            # Many responses queued, then the client goes away without reading:
            # half the time with a reset, half with an ordinary close (the
            # kernel then resets when the server writes into it).
            send_raw(s, req * 20 + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 200)
            if i % 2:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        self.assertTrue(self.srv.running(), "server died; stderr:\n%s" % self.srv.stderr_text())
        r = request(self.port, "GET", "/healthz")
        self.assertEqual(r.status, 200)

    def test_half_close_after_requests_still_answers(self):
        s = connect(self.port)
        send_raw(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
        s.shutdown(socket.SHUT_WR)
        for i in range(3):
            self.assertEqual(read_response(s).status, 200)
        self.assertClosed(s)


if __name__ == "__main__":
    unittest.main()
