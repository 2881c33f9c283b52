#!/usr/bin/env python3
"""HEAD on every GET route (RFC 9110 9.3.2), black box.

A HEAD answer is the GET answer without its body: the same status, the same
header lines (Content-Type and Content-Length included: the length the GET
body has), and nothing after the head, so the next answer on the same
keep-alive connection starts where it should.  Covered: the /v2 reads and
lists, /healthz, /metrics, the account site's GET pages, the admin API's
GETs on DATA/admin.sock; and every Allow line lists HEAD where GET is.

Each pair is asked on ONE connection, HEAD first: a body after the HEAD
answer would be read as the start of the GET answer and fail its status line.
"""

import json
import os
import socket
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import auth_header, build_request, connect, read_response, send_raw  # noqa: E402

PASSWORD = "correct horse battery staple 7"
# Header lines that differ between two answers by design.
VOLATILE = {"date", "x-request-id", "set-cookie"}

SRV = None
IDS = {}


def setUpModule():
    global SRV
    SRV = harness.Server(users=["alice"])
    SRV.__enter__()
    try:
        auth = {"Authorization": auth_header("alice", SRV.keys["alice"])}
        for kind, wrap in (("theme", "Theme"), ("address", "Address")):
            r = harness.request(SRV.port, "POST", "/v2/" + kind, {wrap: {"Name": "x"}}, auth)
            if r.status != 200:
                raise AssertionError("setup: create %s: %r" % (kind, r))
            IDS[kind] = r.json()["Result"]["ID"]
        r = harness.request(SRV.port, "POST", "/v2/event",
                            {"Event": {"ThemeID": IDS["theme"], "AddressID": IDS["address"]}},
                            auth)
        if r.status != 200:
            raise AssertionError("setup: create event: %r" % r)
        IDS["event"] = r.json()["Result"]["ID"]
        if not harness.wait_until(
                lambda: os.path.exists(os.path.join(SRV.data_dir, "admin.sock")), 5):
            raise AssertionError("no admin.sock")
    except BaseException:
        SRV.__exit__(None, None, None)
        raise


def tearDownModule():
    if SRV is not None:
        SRV.__exit__(None, None, None)


def names(resp):
    return sorted(k.lower() for k, _ in resp.header_list)


def stable(resp):
    return sorted((k.lower(), v) for k, v in resp.header_list if k.lower() not in VOLATILE)


class Base(unittest.TestCase):
    def auth(self):
        return {"Authorization": auth_header("alice", SRV.keys["alice"])}

    def sock(self):
        return connect(SRV.port)

    def head_then_get(self, path, headers=None, sock=None):
        """HEAD then GET of path on one keep-alive connection; returns both answers."""
        s = sock or self.sock()
        try:
            send_raw(s, build_request("HEAD", path, headers=headers))
            head = read_response(s, head=True)
            send_raw(s, build_request("GET", path, headers=headers))
            get = read_response(s)
            # The connection is still usable, and nothing stray is left on it.
            self.assertTrue(harness.is_open(s, 0.05), "closed after HEAD + GET of %s" % path)
            self.assertEqual(bytes(harness._buf(s)), b"", "bytes after the GET answer")
            return head, get
        finally:
            s.close()

    def assertHeadIsGetWithoutBody(self, head, get, status):
        self.assertEqual(get.status, status, get)
        self.assertEqual(head.status, get.status, (head, get))
        self.assertEqual(head.header("content-type"), get.header("content-type"), (head, get))
        self.assertEqual(head.header("content-length"), str(len(get.body)), (head, get))
        self.assertEqual(stable(head), stable(get), "HEAD and GET header lines differ")
        self.assertEqual(names(head), names(get), "HEAD and GET header names differ")


class V2(Base):
    def test_head_of_a_record_is_its_get_without_the_body(self):
        for kind in ("theme", "address", "event"):
            with self.subTest(kind=kind):
                head, get = self.head_then_get("/v2/%s/%d" % (kind, IDS[kind]), self.auth())
                self.assertHeadIsGetWithoutBody(head, get, 200)

    def test_head_of_a_list_is_its_get_without_the_body(self):
        for kind in ("theme", "address", "event"):
            with self.subTest(kind=kind):
                head, get = self.head_then_get("/v2/%s?limit=5" % kind, self.auth())
                self.assertHeadIsGetWithoutBody(head, get, 200)

    def test_head_without_credentials_is_the_get_401(self):
        head, get = self.head_then_get("/v2/theme")
        self.assertHeadIsGetWithoutBody(head, get, 401)
        self.assertEqual(head.header("www-authenticate"), 'Basic realm="eventd"')

    def test_head_of_a_missing_record_is_the_get_404(self):
        head, get = self.head_then_get("/v2/theme/9007199254740991", self.auth())
        self.assertHeadIsGetWithoutBody(head, get, 404)

    def test_head_with_a_bad_list_query_is_the_get_400(self):
        head, get = self.head_then_get("/v2/theme?limit=0", self.auth())
        self.assertHeadIsGetWithoutBody(head, get, 400)


class Healthz(Base):
    def test_head_healthz_is_its_get_without_the_body(self):
        head, get = self.head_then_get("/healthz")
        self.assertHeadIsGetWithoutBody(head, get, 200)


class Metrics(Base):
    def test_head_metrics_is_200_text_with_a_length_and_no_body(self):
        # The counters move between two scrapes, so only the shape is compared.
        head, get = self.head_then_get("/metrics")
        self.assertEqual(head.status, 200, head)
        self.assertEqual(head.header("content-type"), get.header("content-type"))
        self.assertGreater(int(head.header("content-length")), 0, head)
        self.assertEqual(names(head), names(get))


class Site(Base):
    def test_head_of_the_form_pages_is_their_get_without_the_body(self):
        # A CSRF cookie makes both answers reuse it (no fresh token per answer).
        cookie = {"Cookie": "eventd_csrf=" + "A" * 43}
        for path in ("/register", "/signin"):
            with self.subTest(path=path):
                head, get = self.head_then_get(path, cookie)
                self.assertHeadIsGetWithoutBody(head, get, 200)

    def test_head_of_the_key_page_is_its_get_without_the_body(self):
        name = "headsite%d" % os.getpid()
        r = harness.request(SRV.port, "POST", "/register",
                            {"username": name, "password": PASSWORD})
        self.assertEqual(r.status, 201, r)
        session = [v.split(";")[0] for k, v in r.header_list
                   if k.lower() == "set-cookie" and v.startswith("eventd_session=")]
        self.assertEqual(len(session), 1, r)
        for accept in ("text/html", "application/json"):
            with self.subTest(accept=accept):
                head, get = self.head_then_get("/user/api",
                                               {"Cookie": session[0], "Accept": accept})
                self.assertHeadIsGetWithoutBody(head, get, 200)

    def test_head_of_the_key_page_signed_out_is_the_get_303(self):
        head, get = self.head_then_get("/user/api")
        self.assertHeadIsGetWithoutBody(head, get, 303)


class Admin(Base):
    def sock(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(harness.DEFAULT_TIMEOUT)
        s.connect(os.path.join(SRV.data_dir, "admin.sock"))
        return s

    def test_head_of_the_admin_gets_is_their_get_without_the_body(self):
        for path in ("/admin/users", "/admin/users/alice", "/admin/users/nobody"):
            with self.subTest(path=path):
                head, get = self.head_then_get(path)
                self.assertHeadIsGetWithoutBody(head, get,
                                                404 if path.endswith("nobody") else 200)


class Pipelining(Base):
    def test_pipelined_head_get_head_are_answered_in_order_and_framed(self):
        path = "/v2/theme/%d" % IDS["theme"]
        s = self.sock()
        try:
            send_raw(s, build_request("HEAD", path, headers=self.auth()) +
                     build_request("GET", path, headers=self.auth()) +
                     build_request("HEAD", "/healthz") +
                     build_request("GET", "/healthz"))
            h1 = read_response(s, head=True)
            g1 = read_response(s)
            h2 = read_response(s, head=True)
            g2 = read_response(s)
            self.assertTrue(harness.is_open(s, 0.05))
            self.assertEqual(bytes(harness._buf(s)), b"")
        finally:
            s.close()
        self.assertHeadIsGetWithoutBody(h1, g1, 200)
        self.assertEqual(json.loads(g1.body)["Result"]["ID"], IDS["theme"])
        self.assertHeadIsGetWithoutBody(h2, g2, 200)

    def test_http10_keep_alive_head_keeps_the_connection(self):
        s = self.sock()
        try:
            ka = {"Connection": "keep-alive"}
            send_raw(s, build_request("HEAD", "/healthz", headers=ka, version="HTTP/1.0"))
            head = read_response(s, head=True)
            send_raw(s, build_request("GET", "/healthz", headers=ka, version="HTTP/1.0"))
            get = read_response(s)
        finally:
            s.close()
        self.assertHeadIsGetWithoutBody(head, get, 200)
        self.assertEqual(head.header("connection"), "keep-alive")


class Allow(Base):
    def test_405_on_v2_routes_lists_head_with_get(self):
        cases = [("PATCH", "/v2/theme/1", "GET, HEAD, PUT, DELETE"),
                 ("DELETE", "/v2/theme", "GET, HEAD, POST"),
                 ("PATCH", "/v2/address/1", "GET, HEAD, PUT, POST, DELETE"),
                 ("PUT", "/v2/event", "GET, HEAD, POST")]
        for method, path, allow in cases:
            with self.subTest(method=method, path=path):
                r = harness.request(SRV.port, method, path)
                self.assertEqual(r.status, 405, r)
                self.assertEqual(r.header("allow"), allow, r)

    def test_405_on_healthz_lists_get_and_head(self):
        r = harness.request(SRV.port, "POST", "/healthz", b"{}")
        self.assertEqual(r.status, 405, r)
        self.assertEqual(r.header("allow"), "GET, HEAD", r)


if __name__ == "__main__":
    unittest.main()
