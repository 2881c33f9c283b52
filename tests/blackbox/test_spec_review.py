#!/usr/bin/env python3
"""Answers a client written from api-spec.md and docs/openapi.json can meet
at the edges of the field rules: each case here was found answering other
than README or the contract says."""

import gzip
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from apiclient import Client, ErrorAsserts  # noqa: E402

SRV = None


def setUpModule():
    global SRV
    SRV = harness.Server(users=["rita"])
    SRV.__enter__()


def tearDownModule():
    if SRV is not None:
        SRV.__exit__(None, None, None)


class Base(ErrorAsserts, unittest.TestCase):
    def setUp(self):
        self.c = Client(SRV.port, "rita", SRV.keys["rita"])
        self.addCleanup(self.c.close)


class EmptyKey(Base):
    """The empty key is an unknown field like any other, but Field is a non-empty
    name (FieldName, minLength 1): the message shows it, Field is left out."""

    BODIES = [
        ("/v2/theme", '{"":{}}'),
        ("/v2/theme", '{"Theme":{"":1}}'),
        ("/v2/theme", '{"Theme":{},"":1}'),
        ("/v2/address", '{"Address":{"":null}}'),
        ("/v2/event", '{"Event":{"":"x"}}'),
    ]

    def test_unknown_empty_key_has_no_empty_field(self):
        for path, body in self.BODIES:
            with self.subTest(path=path, body=body):
                r = self.c.call("POST", path, body)
                err = self.assertErr(r, 400, "unknown_field")
                self.assertNotIn("Field", err, r.describe())
                self.assertIn('""', err["Message"], r.describe())

    def test_update_with_empty_key(self):
        tid = self.c.must_create("theme", {})["ID"]
        r = self.c.call("PUT", "/v2/theme/%d" % tid, '{"Theme":{"":1}}')
        err = self.assertErr(r, 400, "unknown_field")
        self.assertNotIn("Field", err, r.describe())


class IdInBody(Base):
    """ID on create is response-only: ignored whatever it holds (a typed client
    sends 0 for a new record, a copied record its old id), as README says; it
    refused true, {} and [] but took "x", 0 and -1. On update it must be the
    path id, a positive integer, whatever else it holds is 400 naming it."""

    ODD = ['true', 'false', '{}', '{"a":[1]}', '[]', '"x"', '"7"', '0', '-1', '1.5', '1e3', 'null']

    def test_create_ignores_any_id(self):
        for kind in ("theme", "address"):
            for v in self.ODD + ['987654321']:
                with self.subTest(kind=kind, id=v):
                    body = '{"%s":{"ID":%s,"Status":"active"}}' % (kind.capitalize(), v)
                    r = self.c.call("POST", "/v2/" + kind, body)
                    self.assertEqual(r.status, 200, r.describe())
                    rec = r.json()["Result"]
                    self.assertNotEqual(rec["ID"], 987654321)
                    self.assertEqual(self.c.must_get(kind, rec["ID"]), rec)

    def test_update_refuses_an_id_that_is_not_one(self):
        tid = self.c.must_create("theme", {"Name": "kept"})["ID"]
        for v in self.ODD[:-1]:
            with self.subTest(id=v):
                r = self.c.call("PUT", "/v2/theme/%d" % tid, '{"Theme":{"ID":%s,"Name":"no"}}' % v)
                err = self.assertErr(r, 400, "invalid_field")
                self.assertEqual(err["Field"], "ID", r.describe())
        self.assertEqual(self.c.must_get("theme", tid)["Name"], "kept")
        r = self.c.call("PUT", "/v2/theme/%d" % tid, '{"Theme":{"ID":null,"Name":"n"}}')
        self.assertEqual(r.status, 204, r.describe())
        r = self.c.call("PUT", "/v2/theme/%d" % tid, '{"Theme":{"ID":%d,"Name":"m"}}' % (tid + 1))
        self.assertErr(r, 400, "id_mismatch")


class ContentEncoding(Base):
    """Bodies are read as sent: a body in a content coding (a client library
    that compresses) was parsed as JSON and answered "malformed JSON at byte
    1". RFC 9110 15.5.16: 415, naming the header, with Accept-Encoding."""

    def count(self):
        return len(self.c.list("theme", "limit=500").json()["Result"]["Items"])

    def assert_refused(self, r):
        err = self.assertErr(r, 415, "unsupported_media_type")
        self.assertEqual(err["Field"], "Content-Encoding", r.describe())
        self.assertEqual(r.header("Accept-Encoding"), "identity", r.describe())
        self.assertEqual(r.header("Connection"), "close", r.describe())

    def test_a_coded_body_is_415(self):
        before = self.count()
        body = gzip.compress(b'{"Theme":{"Name":"zipped"}}')
        for coding in ("gzip", "GZIP", "br", "deflate", "identity, gzip", "x"):
            with self.subTest(coding=coding):
                r = self.c.call("POST", "/v2/theme", body, headers={"Content-Encoding": coding})
                self.assert_refused(r)
        tid = self.c.must_create("theme", {"Name": "plain"})["ID"]
        r = self.c.call("PUT", "/v2/theme/%d" % tid, body, headers={"Content-Encoding": "gzip"})
        self.assert_refused(r)
        r = self.c.call("POST", "/signin", body, headers={"Content-Encoding": "gzip"}, auth=False)
        self.assert_refused(r)
        self.assertEqual(self.count(), before + 1)
        self.assertEqual(self.c.must_get("theme", tid)["Name"], "plain")

    def test_a_coded_body_is_415_on_any_path_and_method(self):
        """The 415 comes before routing, as 400 and 413 do: a path or a method the
        document does not list gets it too, so the contract lists it among the
        connection-level answers (x-eventd-any-path), which the harness's check of
        every answer reads; it refused these as off-contract (a 404 or 405 was due)."""
        body = gzip.compress(b'{"Theme":{}}')
        for method, path in (("POST", "/v2/nothing"), ("POST", "/nowhere"),
                             ("PATCH", "/v2/theme"), ("OPTIONS", "/healthz")):
            with self.subTest(method=method, path=path):
                r = self.c.call(method, path, body, headers={"Content-Encoding": "gzip"})
                self.assert_refused(r)

    def test_identity_or_no_body_is_served(self):
        for coding in ("identity", "Identity ", ""):
            with self.subTest(coding=coding):
                r = self.c.call("POST", "/v2/theme", '{"Theme":{"Name":"as sent"}}',
                                headers={"Content-Encoding": coding})
                self.assertEqual(r.status, 200, r.describe())
        r = self.c.call("GET", "/v2/theme", headers={"Content-Encoding": "gzip"})
        self.assertEqual(r.status, 200, r.describe())


if __name__ == "__main__":
    unittest.main()
