#!/usr/bin/env python3
"""GET {base path}/openapi.json: the API contract as the binary serves it, black box.

The binary embeds docs/openapi.json at build time: the answer is the file
byte for byte (with the default base path), without authentication, with a
strong ETag of its bytes and Cache-Control: public, max-age=300; HEAD has the
same head and no body; another method is 405 with Allow. With --base-path the
servers entry names it, and nothing else changes.
"""

import hashlib
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import REPO_ROOT, auth_header, build_request, connect, read_response, send_raw  # noqa: E402,E501

with open(os.path.join(REPO_ROOT, "docs", "openapi.json"), "rb") as f:
    DOC = f.read()

SRV = None


def setUpModule():
    global SRV
    SRV = harness.Server(users=["alice"])
    SRV.__enter__()


def tearDownModule():
    SRV.__exit__(None, None, None)


def etag_of(data):
    return '"%s"' % hashlib.blake2b(data, digest_size=16).hexdigest()


class Served(unittest.TestCase):
    def test_the_file_byte_for_byte_without_credentials(self):
        r = harness.request(SRV.port, "GET", "/v2/openapi.json")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.header("Content-Type"), "application/json")
        self.assertEqual(r.body, DOC)
        self.assertEqual(r.header("Content-Length"), str(len(DOC)))

    def test_credentials_change_nothing(self):
        auth = {"Authorization": auth_header("alice", SRV.keys["alice"])}
        self.assertEqual(harness.request(SRV.port, "GET", "/v2/openapi.json", headers=auth).body,
                         DOC)
        bad = {"Authorization": auth_header("alice", "wrong")}
        r = harness.request(SRV.port, "GET", "/v2/openapi.json", headers=bad)
        self.assertEqual((r.status, r.body), (200, DOC))

    def test_cacheable_with_a_strong_etag_of_its_bytes(self):
        r = harness.request(SRV.port, "GET", "/v2/openapi.json")
        self.assertEqual(r.header("ETag"), etag_of(DOC))
        self.assertEqual(r.header("Cache-Control"), "public, max-age=300")

    def test_head_is_get_without_the_body(self):
        s = connect(SRV.port)
        try:
            send_raw(s, build_request("HEAD", "/v2/openapi.json"))
            h = read_response(s, head=True)
            send_raw(s, build_request("GET", "/v2/openapi.json"))
            g = read_response(s)
        finally:
            s.close()
        self.assertEqual(h.status, 200, h)
        self.assertEqual(h.body, b"")
        for name in ("Content-Type", "Content-Length", "ETag", "Cache-Control"):
            self.assertEqual(h.header(name), g.header(name), name)
        self.assertEqual(g.body, DOC)

    def test_other_methods_are_405_with_allow(self):
        for m in ("POST", "PUT", "DELETE", "PATCH"):
            with self.subTest(method=m):
                r = harness.request(SRV.port, m, "/v2/openapi.json", b"{}")
                self.assertEqual(r.status, 405, r)
                self.assertEqual(r.header("Allow"), "GET, HEAD")
                self.assertEqual(r.json()["Error"]["Code"], "method_not_allowed")

    def test_only_under_the_base_path(self):
        for p in ("/openapi.json", "/v2/openapi.json/", "/v2/openapi.jso", "/v2/openapi.json.gz"):
            with self.subTest(path=p):
                r = harness.request(SRV.port, "GET", p)
                self.assertEqual(r.status, 404, r)

    def test_the_document_is_openapi_3_1_with_the_default_server(self):
        doc = json.loads(DOC)
        self.assertEqual(doc["openapi"], "3.1.0")
        self.assertEqual(doc["servers"][0]["url"], "/v2")


class BasePath(unittest.TestCase):
    def test_servers_names_the_configured_base_path(self):
        with harness.Server(extra_args=["--base-path", "/api/v9"]) as srv:
            r = harness.request(srv.port, "GET", "/api/v9/openapi.json")
            self.assertEqual(r.status, 200, r)
            doc = json.loads(r.body)
            self.assertEqual(doc["servers"][0]["url"], "/api/v9")
            want = json.loads(DOC)
            want["servers"][0]["url"] = "/api/v9"
            self.assertEqual(doc, want)
            self.assertEqual(r.header("ETag"), etag_of(r.body))
            self.assertNotEqual(r.header("ETag"), etag_of(DOC))
            self.assertEqual(harness.request(srv.port, "GET", "/v2/openapi.json").status, 404)

    def test_root_base_path(self):
        with harness.Server(extra_args=["--base-path", "/"]) as srv:
            r = harness.request(srv.port, "GET", "/openapi.json")
            self.assertEqual(r.status, 200, r)
            self.assertEqual(json.loads(r.body)["servers"][0]["url"], "/")


if __name__ == "__main__":
    unittest.main()
