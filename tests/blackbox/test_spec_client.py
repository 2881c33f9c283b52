#!/usr/bin/env python3
"""A client written only from api-spec.md: http.client, Basic auth and
`Cache-Control: no-cache` as in the spec's examples.  It must be able to
create and update themes and addresses exactly as the spec shows them."""

import base64
import http.client
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# Types exactly as the spec's field tables give them.
SPEC_THEME = {
    "ID": "integer", "UserID": "integer", "EventID": "integer", "Name": "string",
    "Logo": "string", "BackgroundImage": "string", "SecondaryImage": "string",
    "PageBackgroundRGB": "string", "HeaderBackgroundRGB": "string",
    "HeaderTextRGB": "string", "TextHeadingsRGB": "string", "SmallHeadingRGB": "string",
    "Status": "string",
}
SPEC_ADDRESS = {
    "ID": "integer", "UserID": "integer", "EventID": "integer", "Name": "string",
    "Line1": "string", "Line2": "string", "Line3": "string", "Line4": "string",
    "City": "string", "State": "string", "Country": "string", "Post": "string",
    "Lon": "double", "Lat": "double", "ShowMap": "boolean", "Type": "string",
    "Status": "string",
}


def type_ok(v, t):
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "double":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "string":
        return isinstance(v, str)
    raise ValueError(t)


class SpecClient:
    def __init__(self, port, user, key):
        self.port = port
        self.auth = "Basic " + base64.b64encode(("%s:%s" % (user, key)).encode()).decode()

    def send(self, method, path, obj=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            headers = {"Authorization": self.auth, "Cache-Control": "no-cache"}
            body = None
            if obj is not None:
                body = json.dumps(obj).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, "/v2" + path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data
        finally:
            conn.close()


class SpecClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = harness.Server(users=["speccy"])
        cls.srv.__enter__()
        cls.c = SpecClient(cls.srv.port, "speccy", cls.srv.keys["speccy"])

    @classmethod
    def tearDownClass(cls):
        cls.srv.__exit__(None, None, None)

    def ok_envelope(self, status, data, table, what):
        self.assertEqual(status, 200, "%s: %r" % (what, data))
        doc = json.loads(data.decode("utf-8"))
        self.assertIsInstance(doc, dict)
        self.assertEqual(doc.get("Status"), "ok", data)
        res = doc.get("Result")
        self.assertIsInstance(res, dict, data)
        for field, t in table.items():
            self.assertIn(field, res, "%s: field %s missing in %r" % (what, field, data))
            self.assertTrue(type_ok(res[field], t),
                            "%s: %s should be a JSON %s, got %r" % (what, field, t, res[field]))
        self.assertIsInstance(res["ID"], int)
        self.assertGreater(res["ID"], 0)
        return res

    def get_back(self, path, table):
        # Reading back is an extension (GET /v2/theme/:id); the spec has no read.
        st, _, data = self.c.send("GET", path)
        return self.ok_envelope(st, data, table, "GET " + path)

    def expect_204(self, st, hdrs, data, what):
        self.assertEqual(st, 204, "%s: %r" % (what, data))
        self.assertEqual(data, b"", what)

    def test_theme_create_update_read(self):
        theme = {"Name": "Gala night", "PageBackgroundRGB": "D0CBCB",
                 "HeaderBackgroundRGB": "f9f9f9", "HeaderTextRGB": "575757",
                 "TextHeadingsRGB": "666666", "SmallHeadingRGB": "575757",
                 "Status": "active"}
        st, _, data = self.c.send("POST", "/theme", {"Theme": theme})
        res = self.ok_envelope(st, data, SPEC_THEME, "create theme")
        for k, v in theme.items():
            self.assertEqual(res[k], v, k)
        self.assertEqual(res["EventID"], 0)
        for k in ("Logo", "BackgroundImage", "SecondaryImage"):
            self.assertEqual(res[k], "", k)
        tid = res["ID"]

        upd = {"ID": tid, "Name": "Gala night (final)", "PageBackgroundRGB": "ffffff",
               "HeaderBackgroundRGB": "000000", "HeaderTextRGB": "ABCDEF",
               "TextHeadingsRGB": "123456", "SmallHeadingRGB": "a1b2c3", "Status": "active"}
        st, hdrs, data = self.c.send("PUT", "/theme/%d" % tid, {"Theme": upd})
        self.expect_204(st, hdrs, data, "PUT theme")
        back = self.get_back("/theme/%d" % tid, SPEC_THEME)
        for k, v in upd.items():
            self.assertEqual(back[k], v, k)
        self.assertEqual(back["UserID"], res["UserID"])

    def test_theme_minimal_create(self):
        # Only Status, the field the spec marks as required.
        st, _, data = self.c.send("POST", "/theme", {"Theme": {"Status": "active"}})
        res = self.ok_envelope(st, data, SPEC_THEME, "create minimal theme")
        self.assertEqual(res["PageBackgroundRGB"], "D0CBCB")
        self.assertEqual(res["HeaderBackgroundRGB"], "f9f9f9")
        self.assertEqual(res["HeaderTextRGB"], "575757")
        self.assertEqual(res["TextHeadingsRGB"], "666666")
        self.assertEqual(res["SmallHeadingRGB"], "575757")
        self.assertEqual(res["Name"], "")

    def test_address_create_update_put_and_post(self):
        addr = {"Name": "Main hall", "Line1": "1 High Street", "Line2": "Floor 2",
                "Line3": "", "City": "Springfield", "State": "IL", "Country": "US",
                "Post": "62701", "Lon": -89.65, "Lat": 39.78, "ShowMap": "true",
                "Status": "active"}
        st, _, data = self.c.send("POST", "/address", {"Address": addr})
        res = self.ok_envelope(st, data, SPEC_ADDRESS, "create address")
        for k, v in addr.items():
            if k == "ShowMap":
                self.assertIs(res[k], True)
            else:
                self.assertEqual(res[k], v, k)
        self.assertEqual(res["EventID"], 0)
        aid = res["ID"]

        # Declared method: PUT.
        st, hdrs, data = self.c.send("PUT", "/address/%d" % aid,
                                     {"Address": {"ID": aid, "City": "Chicago",
                                                  "ShowMap": "false", "Status": "active"}})
        self.expect_204(st, hdrs, data, "PUT address")
        back = self.get_back("/address/%d" % aid, SPEC_ADDRESS)
        self.assertEqual(back["City"], "Chicago")
        self.assertIs(back["ShowMap"], False)
        self.assertEqual(back["Line1"], "1 High Street")

        # The spec's example request uses POST on the same path.
        st, hdrs, data = self.c.send("POST", "/address/%d" % aid,
                                     {"Address": {"ID": aid, "Post": "60601", "Lat": 41.88,
                                                  "Lon": -87.63, "Status": "active"}})
        self.expect_204(st, hdrs, data, "POST address/:id")
        back = self.get_back("/address/%d" % aid, SPEC_ADDRESS)
        self.assertEqual(back["Post"], "60601")
        self.assertEqual(back["Lat"], 41.88)
        self.assertEqual(back["Lon"], -87.63)
        self.assertEqual(back["City"], "Chicago")

    def test_address_defaults_as_in_sample(self):
        st, _, data = self.c.send("POST", "/address", {"Address": {"Status": "active"}})
        res = self.ok_envelope(st, data, SPEC_ADDRESS, "create empty address")
        self.assertEqual(res["Lon"], 0)
        self.assertEqual(res["Lat"], 0)
        self.assertIs(res["ShowMap"], False)
        for k in ("Name", "Line1", "Line2", "Line3", "Line4", "City", "State",
                  "Country", "Post"):
            self.assertEqual(res[k], "", k)

    def test_read_event_auth_example(self):
        # The spec's authentication example: GET /event/:id with Basic and JSON content type.
        conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=5)
        try:
            conn.request("GET", "/v2/event/999999",
                         headers={"Authorization": self.c.auth,
                                  "Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            self.assertNotEqual(r.status, 401, "valid credentials must be accepted")
            conn.request("GET", "/v2/event/999999", headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            self.assertEqual(r.status, 401)
        finally:
            conn.close()


if __name__ == "__main__":
    unittest.main()
