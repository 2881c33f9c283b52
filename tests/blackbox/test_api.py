#!/usr/bin/env python3
"""eventd API black-box tests: every row of the spec's field tables, every
documented error case, the extensions (read, list, delete, events),
persistence across a restart, and authentication on every /v2 route."""

import base64
import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from apiclient import (ADDRESS_FIELDS, ADDRESS_TEXT, THEME_COLOURS, THEME_DEFAULTS,  # noqa: E402
                       THEME_FIELDS, THEME_TEXT, Client, ErrorAsserts, ManagedDir, add_user)

SRV = None
KEYS = {}
USERS = ["alice", "bob", "carol", "dave", "erin"]


def setUpModule():
    global SRV
    SRV = harness.Server(users=USERS)
    SRV.__enter__()
    KEYS.update(SRV.keys)


def tearDownModule():
    if SRV is not None:
        SRV.__exit__(None, None, None)


def client(user):
    return Client(SRV.port, user, KEYS[user])


class Base(ErrorAsserts, unittest.TestCase):
    user = "alice"

    def setUp(self):
        self.c = client(self.user)
        self.addCleanup(self.c.close)

    def assertOk(self, r):
        self.assertEqual(r.status, 200, r.describe())
        j = r.json()
        self.assertEqual(j.get("Status"), "ok", r.describe())
        self.assertIsInstance(j.get("Result"), dict, r.describe())
        return j["Result"]

    def assert204(self, r):
        self.assertEqual(r.status, 204, r.describe())
        self.assertEqual(r.body, b"", r.describe())
        # RFC 9110 8.6: a server MUST NOT send Content-Length in a 204.
        self.assertIsNone(r.header("content-length"), r.describe())

    def assertTypes(self, rec, table):
        self.assertEqual(set(rec), set(table), "fields of %r" % rec)
        for k, t in table.items():
            self.assertIsInstance(rec[k], t, "%s in %r" % (k, rec))
            if t is int or t == (int, float):
                self.assertNotIsInstance(rec[k], bool, "%s in %r" % (k, rec))


# ---------------------------------------------------------------------------
class ThemeFields(Base):
    def empty_themes(self):
        """Two themes created with {} (the defaults hold for every one, not only the first)."""
        return [self.assertOk(self.c.create("theme", {})) for _ in range(2)]

    def test_empty_object_gives_every_field_its_type(self):
        for rec in self.empty_themes():
            self.assertTypes(rec, THEME_FIELDS)

    def test_empty_object_gives_the_default_colours(self):
        for rec in self.empty_themes():
            for k, v in THEME_DEFAULTS.items():
                self.assertEqual(rec[k], v, k)

    def test_empty_object_status_is_active(self):
        for rec in self.empty_themes():
            self.assertEqual(rec["Status"], "active")

    def test_empty_object_texts_are_empty(self):
        for rec in self.empty_themes():
            self.assertEqual(rec["Name"], "")
            for k in ("Logo", "BackgroundImage", "SecondaryImage"):
                self.assertEqual(rec[k], "", k)

    def test_empty_object_has_no_event(self):
        for rec in self.empty_themes():
            self.assertEqual(rec["EventID"], 0)

    def test_empty_object_gets_an_id_and_a_user_id(self):
        for rec in self.empty_themes():
            self.assertGreater(rec["ID"], 0)
            self.assertGreater(rec["UserID"], 0)

    def test_one_user_has_one_user_id(self):
        first, second = self.empty_themes()
        self.assertEqual(second["UserID"], first["UserID"], "UserID must be the same for one user")
        a = self.assertOk(self.c.create("address", {}))
        self.assertEqual(a["UserID"], first["UserID"])

    def test_two_users_have_different_user_ids(self):
        uid = self.assertOk(self.c.create("theme", {}))["UserID"]
        other = client("bob")
        try:
            b = other.must_create("theme", {})
        finally:
            other.close()
        self.assertNotEqual(b["UserID"], uid, "two users must have different UserIDs")

    def test_each_colour_set_individually(self):
        for f in THEME_COLOURS:
            for val in ("aBcDeF", "000000", "FFFFFF", "0a1B2c"):
                rec = self.assertOk(self.c.create("theme", {f: val}))
                self.assertEqual(rec[f], val, f)
                for g in THEME_COLOURS:
                    if g != f:
                        self.assertEqual(rec[g], THEME_DEFAULTS[g], "%s when only %s set" % (g, f))
                self.assertEqual(self.c.must_get("theme", rec["ID"])[f], val)

    def test_bad_colours(self):
        bad = ["#D0CBCB", "D0CBC", "D0CBCBB", "GGGGGG", 123, "", " D0CBCB", "D0CBCB ",
               "0xD0CB", True, [], {}]
        tid = self.c.must_create("theme", {})["ID"]
        for f in THEME_COLOURS:
            for v in bad:
                with self.subTest(field=f, value=v):
                    self.assertErr(self.c.create("theme", {f: v}), 400, "invalid_field", f)
                    self.assertErr(self.c.update("theme", tid, {f: v}), 400, "invalid_field", f)
        # nothing changed by the rejected updates
        rec = self.c.must_get("theme", tid)
        for k, v in THEME_DEFAULTS.items():
            self.assertEqual(rec[k], v)

    def test_all_fields_settable(self):
        body = {"Name": "N", "PageBackgroundRGB": "111111", "HeaderBackgroundRGB": "222222",
                "HeaderTextRGB": "333333", "TextHeadingsRGB": "444444",
                "SmallHeadingRGB": "555555", "Status": "draft"}
        rec = self.assertOk(self.c.create("theme", body))
        for k, v in body.items():
            self.assertEqual(rec[k], v, k)
        self.assertEqual(self.c.must_get("theme", rec["ID"]), rec)

    def test_unsettable_ignored_on_create(self):
        uid = self.c.must_create("theme", {})["UserID"]
        body = {"ID": 987654, "UserID": uid + 1000, "EventID": 55, "Logo": "logo.png",
                "BackgroundImage": "bg.png", "SecondaryImage": "s.png", "Name": "x"}
        rec = self.assertOk(self.c.create("theme", body))
        self.assertNotEqual(rec["ID"], 987654)
        self.assertEqual(rec["UserID"], uid)
        self.assertEqual(rec["EventID"], 0)
        for k in ("Logo", "BackgroundImage", "SecondaryImage"):
            self.assertEqual(rec[k], "", k)
        self.assertEqual(rec["Name"], "x")
        self.assertEqual(self.c.get("theme", 987654).status, 404)
        self.assertEqual(self.c.must_get("theme", rec["ID"]), rec)

    def test_unsettable_ignored_on_update(self):
        rec = self.c.must_create("theme", {"Name": "before"})
        body = {"UserID": rec["UserID"] + 1000, "EventID": 77, "Logo": "l",
                "BackgroundImage": "b", "SecondaryImage": "s", "Name": "after"}
        self.assert204(self.c.update("theme", rec["ID"], body))
        back = self.c.must_get("theme", rec["ID"])
        expect = dict(rec, Name="after")
        self.assertEqual(back, expect)


class AddressFields(Base):
    def empty_address(self):
        return self.assertOk(self.c.create("address", {}))

    def test_empty_object_gives_every_field_its_type(self):
        self.assertTypes(self.empty_address(), ADDRESS_FIELDS)

    def test_empty_object_texts_are_empty(self):
        rec = self.empty_address()
        for k in ("Name", "Line1", "Line2", "Line3", "Line4", "City", "State", "Country", "Post"):
            self.assertEqual(rec[k], "", k)

    def test_empty_object_type_is_venue(self):
        self.assertEqual(self.empty_address()["Type"], "venue")

    def test_empty_object_status_is_active(self):
        self.assertEqual(self.empty_address()["Status"], "active")

    def test_empty_object_has_no_event(self):
        self.assertEqual(self.empty_address()["EventID"], 0)

    def test_empty_object_gets_an_id(self):
        self.assertGreater(self.empty_address()["ID"], 0)

    def test_empty_object_position_is_zero(self):
        rec = self.empty_address()
        self.assertEqual(rec["Lon"], 0)
        self.assertEqual(rec["Lat"], 0)

    def test_empty_object_show_map_is_false(self):
        self.assertIs(self.empty_address()["ShowMap"], False)

    def test_default_numbers_and_booleans_are_json_literals(self):
        # JSON number / boolean literally, not strings
        raw = self.c.get("address", self.empty_address()["ID"]).body
        self.assertRegex(raw, rb'"Lon":-?0(\.0+)?[,}]')
        self.assertRegex(raw, rb'"Lat":-?0(\.0+)?[,}]')
        self.assertIn(b'"ShowMap":false', raw)

    def test_all_fields_settable(self):
        body = {"Name": "n", "Line1": "l1", "Line2": "l2", "Line3": "l3", "City": "c",
                "State": "s", "Country": "co", "Post": "p", "Lon": 12.25, "Lat": -33.5,
                "ShowMap": True, "Status": "closed"}
        rec = self.assertOk(self.c.create("address", body))
        for k, v in body.items():
            self.assertEqual(rec[k], v, k)
        self.assertEqual(self.c.must_get("address", rec["ID"]), rec)

    def unsettable_body(self):
        uid = self.c.must_create("address", {})["UserID"]
        return uid, {"Line4": "l4", "Type": "online", "UserID": uid + 1000, "EventID": 9,
                     "City": "X"}

    def test_unsettable_ignored_on_create(self):
        uid, body = self.unsettable_body()
        rec = self.assertOk(self.c.create("address", body))
        self.assertEqual(rec["Line4"], "")
        self.assertEqual(rec["Type"], "venue")
        self.assertEqual(rec["UserID"], uid)
        self.assertEqual(rec["EventID"], 0)
        self.assertEqual(rec["City"], "X")

    def test_unsettable_ignored_on_update(self):
        _, body = self.unsettable_body()
        rec = self.assertOk(self.c.create("address", {"City": "X"}))
        body["City"] = "Y"
        self.assert204(self.c.update("address", rec["ID"], body))
        back = self.c.must_get("address", rec["ID"])
        self.assertEqual(back, dict(rec, City="Y"))

    def test_id_ignored_on_create(self):
        r2 = self.assertOk(self.c.create("address", {"ID": 424242}))
        self.assertNotEqual(r2["ID"], 424242)

    def test_lon_lat_numbers_and_strings(self):
        cases = [(12.5, 12.5), ("12.5", 12.5), (-45, -45), ("-45", -45), (0, 0),
                 ("0", 0), (1e-7, 1e-7), ("3.25e1", 32.5), (90, 90), (-90, -90),
                 ("90", 90), (89.999999, 89.999999)]
        for v, want in cases:
            with self.subTest(Lat=v):
                rec = self.assertOk(self.c.create("address", {"Lat": v}))
                self.assertEqual(rec["Lat"], want)
                self.assertEqual(rec["Lon"], 0)
                self.assertEqual(self.c.must_get("address", rec["ID"])["Lat"], want)
        for v, want in [(180, 180), (-180, -180), ("-180", -180), (179.5, 179.5),
                        ("-0.125", -0.125), (-122.4194155, -122.4194155)]:
            with self.subTest(Lon=v):
                rec = self.assertOk(self.c.create("address", {"Lon": v}))
                self.assertEqual(rec["Lon"], want)

    def test_lon_lat_out_of_range(self):
        aid = self.c.must_create("address", {"Lat": 1, "Lon": 2})["ID"]
        bad = [("Lat", 90.0001), ("Lat", -90.0001), ("Lat", "90.0001"), ("Lat", 1000),
               ("Lon", -180.1), ("Lon", 180.1), ("Lon", "-180.1"), ("Lon", 1e300)]
        for f, v in bad:
            with self.subTest(field=f, value=v):
                self.assertErr(self.c.create("address", {f: v}), 400, "invalid_field", f)
                self.assertErr(self.c.update("address", aid, {f: v}), 400, "invalid_field", f)
        rec = self.c.must_get("address", aid)
        self.assertEqual((rec["Lat"], rec["Lon"]), (1, 2))

    def test_lon_lat_subnormal_accepted(self):
        # Every finite number in range is read (issue 21): subnormal doubles too.
        for v in (1e-310, 2.2250738585072011e-308, 5e-324, -1e-310):
            for sent in (v, repr(v)):
                with self.subTest(Lat=sent):
                    body = ('{"Address":{"Lat":%s,"Lon":%s}}' % (
                        repr(v) if isinstance(sent, float) else '"%s"' % sent,
                        repr(v) if isinstance(sent, float) else '"%s"' % sent)).encode()
                    rec = self.assertOk(self.c.call("POST", "/v2/address", body))
                    self.assertEqual((rec["Lat"], rec["Lon"]), (v, v))
                    self.assertEqual(self.c.must_get("address", rec["ID"])["Lat"], v)

    def test_lon_lat_underflow_rounds_to_zero(self):
        # Below the smallest subnormal the value rounds to 0, as IEEE 754 does (README).
        for text in ("1e-400", "-1e-400", '"1e-400"', "0.0000000001e-999"):
            with self.subTest(Lat=text):
                body = ('{"Address":{"Lat":%s,"Lon":%s}}' % (text, text)).encode()
                rec = self.assertOk(self.c.call("POST", "/v2/address", body))
                self.assertEqual((rec["Lat"], rec["Lon"]), (0, 0))

    def test_lon_lat_overflow_out_of_range(self):
        for text in ("1e400", "-1e400", '"1e400"'):
            with self.subTest(Lat=text):
                r = self.c.call("POST", "/v2/address", ('{"Address":{"Lat":%s}}' % text).encode())
                err = self.assertErr(r, 400, "invalid_field", "Lat")
                self.assertNotIn("must be a number", err["Message"])

    def test_lon_lat_non_numeric(self):
        for f in ("Lon", "Lat"):
            for v in ("abc", "", "12abc", "1,5", "NaN", "inf", "0x10", "+1", " 1", "1e",
                      True, [], {}):
                with self.subTest(field=f, value=v):
                    self.assertErr(self.c.create("address", {f: v}), 400, "invalid_field", f)

    def test_showmap_accepted(self):
        cases = [(True, True), (False, False), ("true", True), ("false", False),
                 ("1", True), ("0", False), ("yes", True), ("no", False), ("", False),
                 ("TRUE", True), ("Yes", True), ("NO", False), ("False", False)]
        aid = self.c.must_create("address", {})["ID"]
        for v, want in cases:
            with self.subTest(ShowMap=v):
                rec = self.assertOk(self.c.create("address", {"ShowMap": v}))
                self.assertIs(rec["ShowMap"], want)
                self.assert204(self.c.update("address", aid, {"ShowMap": v}))
                self.assertIs(self.c.must_get("address", aid)["ShowMap"], want)

    def test_showmap_rejected(self):
        for v in ("maybe", 1, 0, [], {}, "2", "truee", " true"):
            with self.subTest(ShowMap=v):
                self.assertErr(self.c.create("address", {"ShowMap": v}), 400,
                               "invalid_field", "ShowMap")


class StatusField(Base):
    KINDS = ("theme", "address")

    def archived(self, kind):
        """A record of kind created with Status "archived"."""
        return self.assertOk(self.c.create(kind, {"Status": "archived"}))

    def test_status_defaults_to_active(self):
        for kind in self.KINDS:
            with self.subTest(kind=kind):
                self.assertEqual(self.assertOk(self.c.create(kind, {}))["Status"], "active")

    def test_status_set_on_create(self):
        for kind in self.KINDS:
            with self.subTest(kind=kind):
                rec = self.archived(kind)
                self.assertEqual(rec["Status"], "archived")
                self.assertEqual(self.c.must_get(kind, rec["ID"])["Status"], "archived")

    def test_empty_status_refused_on_create(self):
        for kind in self.KINDS:
            with self.subTest(kind=kind):
                self.assertErr(self.c.create(kind, {"Status": ""}), 400, "invalid_field", "Status")

    def test_non_string_status_refused_on_create(self):
        for kind in self.KINDS:
            for v in (1, True, [], {"a": 1}):
                with self.subTest(kind=kind, value=v):
                    self.assertErr(self.c.create(kind, {"Status": v}), 400, "invalid_field",
                                   "Status")

    def test_status_absent_from_an_update_is_kept(self):
        for kind in self.KINDS:
            with self.subTest(kind=kind):
                rec = self.archived(kind)
                self.assert204(self.c.update(kind, rec["ID"], {"Name": "n"}))
                self.assertEqual(self.c.must_get(kind, rec["ID"])["Status"], "archived")

    def test_status_given_in_an_update_is_changed(self):
        for kind in self.KINDS:
            with self.subTest(kind=kind):
                rec = self.archived(kind)
                self.assert204(self.c.update(kind, rec["ID"], {"Status": "active"}))
                self.assertEqual(self.c.must_get(kind, rec["ID"])["Status"], "active")

    def test_empty_status_refused_on_update_and_kept(self):
        for kind in self.KINDS:
            with self.subTest(kind=kind):
                rec = self.archived(kind)
                self.assertErr(self.c.update(kind, rec["ID"], {"Status": ""}), 400,
                               "invalid_field", "Status")
                self.assertEqual(self.c.must_get(kind, rec["ID"])["Status"], "archived")


class Strings(Base):
    FIELDS = [("theme", f) for f in THEME_TEXT] + [("address", f) for f in ADDRESS_TEXT]

    def test_length_limits(self):
        ok_values = ["a" * 255, "é" * 127 + "a", "🎉" * 63 + "abc", "€" * 85]
        bad_values = ["é" * 128, "a" * 256, "🎉" * 64, "€" * 86, "a" * 5000]
        for kind, f in self.FIELDS:
            rid = self.c.must_create(kind, {})["ID"]
            for v in ok_values:
                self.assertEqual(len(v.encode()), 255)
                with self.subTest(kind=kind, field=f, ok=v[:3]):
                    rec = self.assertOk(self.c.create(kind, {f: v}))
                    self.assertEqual(rec[f], v)
            for v in bad_values:
                with self.subTest(kind=kind, field=f, bad=v[:3], n=len(v.encode())):
                    self.assertErr(self.c.create(kind, {f: v}), 400, "invalid_field", f)
                    self.assertErr(self.c.update(kind, rid, {f: v}), 400, "invalid_field", f)

    def test_unicode_round_trip(self):
        values = ["Zoë 🎉 \"q\" \\ \n", "tab\there\r\n/slash", "\u0001\u001f\u007f",
                  "日本語テキスト", "\u2028\u2029", "emoji 👩‍👩‍👧 flags 🇫🇷", "<script>&amp;</script>"]
        for kind, f in self.FIELDS:
            for v in values:
                with self.subTest(kind=kind, field=f, value=v):
                    r = self.c.create(kind, {f: v})
                    rec = self.assertOk(r)
                    self.assertEqual(rec[f], v)
                    self.assertEqual(self.c.must_get(kind, rec["ID"])[f], v)

    def test_escaped_input_decoded(self):
        body = b'{"Theme":{"Name":"Zo\\u00eb \\ud83c\\udf89 \\"q\\" \\\\ \\n \\/"}}'
        rec = self.assertOk(self.c.call("POST", "/v2/theme", body))
        self.assertEqual(rec["Name"], "Zoë 🎉 \"q\" \\ \n /")

    def test_invalid_utf8_raw(self):
        bodies = [b'{"Theme":{"Name":"\xff"}}', b'{"Theme":{"Name":"ab\xc3"}}',
                  b'{"Theme":{"Name":"\xc0\xaf"}}', b'{"Theme":{"Name":"\xed\xa0\x80"}}',
                  b'{"Theme":{"Name":"\xf8\x88\x80\x80\x80"}}', b'{"Address":{"City":"x\x80y"}}',
                  b'{"Theme":{"Na\xffme":"x"}}']
        for b in bodies:
            kind = "address" if b"Address" in b else "theme"
            with self.subTest(body=b):
                r = self.c.call("POST", "/v2/" + kind, b)
                self.assertEqual(r.status, 400, r.describe())
                self.assertIn(r.error().get("Code"), ("invalid_field", "invalid_json", "unknown_field"),
                              r.describe())

    def test_lone_surrogate_escape_never_emits_invalid_utf8(self):
        r = self.c.call("POST", "/v2/theme", b'{"Theme":{"Name":"a\\ud800b"}}')
        if r.status == 200:
            r.body.decode("utf-8")   # must be valid UTF-8 (raises otherwise)
            rid = r.result()["ID"]
            self.c.get("theme", rid).body.decode("utf-8")
        else:
            self.assertEqual(r.status, 400, r.describe())


class BodyShapes(Base):
    def test_wrong_types_per_field_kind(self):
        cases = [
            ("theme", "Name", [1, 1.5, True, False, [], {}, ["a"]]),
            ("theme", "PageBackgroundRGB", [123456, True, [], {}]),
            ("theme", "Status", [0, False, []]),
            ("address", "City", [7, True, [], {}]),
            ("address", "Lat", [True, [], {}, "x"]),
            ("address", "Lon", [False, [1], {"v": 1}]),
            ("address", "ShowMap", [2, [], {}, 1.5]),
            ("theme", "ID", ["x", True, [], 1.5]),
            ("address", "ID", ["abc", False, {}]),
        ]
        for kind, f, vals in cases:
            for v in vals:
                with self.subTest(kind=kind, field=f, value=v):
                    if f == "ID":
                        rid = self.c.must_create(kind, {})["ID"]
                        r = self.c.update(kind, rid, {f: v})
                    else:
                        r = self.c.create(kind, {f: v})
                    self.assertErr(r, 400, "invalid_field", f)

    def test_null_means_not_given(self):
        rec = self.assertOk(self.c.create("theme", {"Name": None, "PageBackgroundRGB": None,
                                                     "Status": None}))
        self.assertEqual(rec["Name"], "")
        self.assertEqual(rec["PageBackgroundRGB"], "D0CBCB")
        self.assertEqual(rec["Status"], "active")
        a = self.assertOk(self.c.create("address", {"Lat": None, "ShowMap": None, "City": "c"}))
        self.assertEqual(a["Lat"], 0)
        self.assertIs(a["ShowMap"], False)
        self.assert204(self.c.update("address", a["ID"], {"City": None, "Lat": 5}))
        back = self.c.must_get("address", a["ID"])
        self.assertEqual((back["City"], back["Lat"]), ("c", 5))

    def test_duplicate_key(self):
        r = self.c.call("POST", "/v2/theme", b'{"Theme":{"Name":"a","Name":"b"}}')
        self.assertErr(r, 400, "duplicate_field", "Name")
        r = self.c.call("POST", "/v2/address", b'{"Address":{"Lat":1,"City":"x","Lat":2}}')
        self.assertErr(r, 400, "duplicate_field", "Lat")
        rid = self.c.must_create("theme", {"Name": "keep"})["ID"]
        r = self.c.call("PUT", "/v2/theme/%d" % rid, b'{"Theme":{"Status":"a","Status":"b"}}')
        self.assertErr(r, 400, "duplicate_field", "Status")
        self.assertEqual(self.c.must_get("theme", rid)["Status"], "active")
        # a duplicate of a response-only (ignored) field is still a duplicate
        r = self.c.call("POST", "/v2/theme", b'{"Theme":{"Logo":"a","Logo":"b"}}')
        self.assertErr(r, 400, "duplicate_field", "Logo")

    UNKNOWN = [("theme", {"Colour": "ffffff"}, "Colour"), ("address", {"Street": "x"}, "Street"),
               ("theme", {"Line1": "x"}, "Line1"),       # a field of the other kind
               ("address", {"Line4x": "x"}, "Line4x"), ("theme", {"name": "x"}, "name"),
               ("event", {"Colour": 1}, "Colour")]

    def test_unknown_field(self):
        for kind, body, _ in self.UNKNOWN:
            with self.subTest(kind=kind, body=body):
                self.assertErr(self.c.create(kind, body), 400, "unknown_field")
        rid = self.c.must_create("address", {})["ID"]
        r = self.c.update("address", rid, {"City": "z", "Bogus": 1})
        self.assertErr(r, 400, "unknown_field")
        self.assertEqual(self.c.must_get("address", rid)["City"], "")
        # unknown wrapper / extra top-level key
        self.assertEqual(self.c.call("POST", "/v2/theme", {"Theme": {}, "Extra": 1}).status, 400)
        self.assertEqual(self.c.call("POST", "/v2/theme", {"Address": {}}).status, 400)

    def test_unknown_field_names_the_field(self):
        # README: "`Field` is present when one field is at fault".
        for kind, body, name in self.UNKNOWN:
            with self.subTest(kind=kind, body=body):
                self.assertErr(self.c.create(kind, body), 400, "unknown_field", name)
        # a key beside the wrapper too
        r = self.c.call("POST", "/v2/theme", {"Theme": {}, "Extra": 1})
        self.assertErr(r, 400, "unknown_field", "Extra")

    def test_a_wrong_wrapper_says_which_one_the_call_takes(self):
        # README "Bodies": the wrapper {"Theme":{...}} is expected. Another kind's wrapper,
        # or this one's in another case, is an unknown field whose message names the
        # wrapper to send; it said only "Theme has no field \"Address\"".
        for path, body, want in [
                ("/v2/theme", {"Address": {"Name": "x"}}, '{"Theme":{...}}'),
                ("/v2/theme", {"theme": {"Name": "x"}}, '{"Theme":{...}}'),
                ("/v2/address", {"Theme": {"Name": "x"}}, '{"Address":{...}}'),
                ("/v2/event", {"EVENT": {}}, '{"Event":{...}}')]:
            with self.subTest(path=path, body=body):
                r = self.c.call("POST", path, body)
                self.assertErr(r, 400, "unknown_field", list(body)[0])
                self.assertIn("send the fields in " + want, r.error()["Message"])
        # a typo in a bare object gets no such hint
        r = self.c.call("POST", "/v2/theme", {"Nmae": "x"})
        self.assertErr(r, 400, "unknown_field", "Nmae")
        self.assertNotIn("send the fields", r.error()["Message"])

    def test_integer_fields_reject_strings(self):
        # Only Lon/Lat (numbers or numeric strings) and ShowMap are documented to
        # take strings; ID, ThemeID and AddressID are integers (spec/README).
        t = self.c.must_create("theme", {})
        r = self.c.update("theme", t["ID"], {"ID": str(t["ID"])})
        self.assertErr(r, 400, "invalid_field", "ID")
        r = self.c.create("event", {"ThemeID": str(t["ID"])})
        self.assertErr(r, 400, "invalid_field", "ThemeID")
        self.assertEqual(self.c.must_get("theme", t["ID"])["EventID"], 0)

    def test_malformed_json(self):
        for b in (b'{"Theme":{"Name" "x"}}', b'{"Theme":{"Name":x}}', b"{'Theme':{}}",
                  b'{"Theme":{,}}', b'{"Theme":{"Name":"x",}}', b'{"Theme":{}} x',
                  b'{"Theme":{}}{}', b'{"Theme":{"Name":"a\x01"}}', b'\x00',
                  b'{"Address":{"Lat":01}}', b'{"Address":{"Lat":1.}}', b'{"Address":{"Lat":-}}'):
            kind = "address" if b"Address" in b else "theme"
            with self.subTest(body=b):
                r = self.c.call("POST", "/v2/" + kind, b)
                err = self.assertErr(r, 400, "invalid_json")
                if b != b'\x00':
                    self.assertIn("byte", err["Message"], r.describe())

    def test_truncated_json(self):
        for b in (b'{"Theme":{"Name":"x"', b'{"Theme":{', b'{"Theme":{}', b'{',
                  b'{"Theme":{"Name":"abc', b'{"Address":{"Lat":1.5', b'{"Theme"'):
            kind = "address" if b"Address" in b else "theme"
            with self.subTest(body=b):
                self.assertErr(self.c.call("POST", "/v2/" + kind, b), 400, "invalid_json")

    def test_not_an_object(self):
        for b in (b'[]', b'[{"Name":"x"}]', b'"x"', b'5', b'null', b'true',
                  b'{"Theme":[]}', b'{"Theme":"x"}', b'{"Theme":5}'):
            with self.subTest(body=b):
                r = self.c.call("POST", "/v2/theme", b)
                self.assertEqual(r.status, 400, r.describe())
                self.assertEqual(r.error()["Code"], "invalid_field" if b.startswith(b'{"Theme"')
                                 else "invalid_json", r.describe())

    def test_wrapper_of_wrong_type_is_invalid_field(self):
        # One code for one kind of fault: the wrapper holding anything but an object is a
        # field of the wrong type, as every other one (issue 21).
        for kind, wrapper in (("theme", "Theme"), ("address", "Address"), ("event", "Event")):
            for v in ('"x"', "1", "true", "null", "[]", "[1]"):
                with self.subTest(kind=kind, value=v):
                    b = ('{"%s":%s}' % (wrapper, v)).encode()
                    err = self.assertErr(self.c.call("POST", "/v2/" + kind, b), 400,
                                         "invalid_field", wrapper)
                    self.assertEqual(err["Message"], "%s must be an object" % wrapper)

    def test_empty_body(self):
        r = self.c.call("POST", "/v2/theme", b"")
        self.assertErr(r, 400, "invalid_json")
        rid = self.c.must_create("theme", {})["ID"]
        self.assertErr(self.c.call("PUT", "/v2/theme/%d" % rid, b""), 400, "invalid_json")
        # no body at all (no Content-Length): the same
        raw = harness.request(SRV.port, "POST", "/v2/address",
                              headers={"Authorization": self.c.auth})
        self.assertEqual(raw.status, 400, raw)
        self.assertEqual(raw.json()["Error"]["Code"], "invalid_json", raw)
        # whitespace only
        self.assertErr(self.c.call("POST", "/v2/theme", b"  \r\n "), 400, "invalid_json")

    def test_bare_object_and_whitespace(self):
        rec = self.assertOk(self.c.call("POST", "/v2/theme", {"Name": "bare"}))
        self.assertEqual(rec["Name"], "bare")
        rec = self.assertOk(self.c.call("POST", "/v2/address", {"City": "bare"}))
        self.assertEqual(rec["City"], "bare")
        rec = self.assertOk(self.c.call("POST", "/v2/theme", {}))
        self.assertEqual(rec["Name"], "")
        rec = self.assertOk(self.c.call("POST", "/v2/theme", b' \n {"Theme" : { "Name" : "ws" } } \n'))
        self.assertEqual(rec["Name"], "ws")
        self.assert204(self.c.call("PUT", "/v2/theme/%d" % rec["ID"], {"Name": "bare2"}))
        self.assertEqual(self.c.must_get("theme", rec["ID"])["Name"], "bare2")

    def test_content_type_ignored(self):
        rec = self.assertOk(self.c.call("POST", "/v2/theme", b'{"Theme":{"Name":"tp"}}',
                                        headers={"Content-Type": "text/plain"}))
        self.assertEqual(rec["Name"], "tp")
        raw = harness.request(SRV.port, "POST", "/v2/theme", b'{"Theme":{"Name":"noct"}}',
                              headers={"Authorization": self.c.auth})
        self.assertEqual(raw.status, 200, raw)
        self.assertEqual(raw.json()["Result"]["Name"], "noct")
        rec = self.assertOk(self.c.call("POST", "/v2/address", b'{"Address":{"City":"f"}}',
                                        headers={"Content-Type": "application/x-www-form-urlencoded"}))
        self.assertEqual(rec["City"], "f")


class Updates(Base):
    def test_partial_update_keeps_absent(self):
        full = {"Name": "n", "PageBackgroundRGB": "111111", "HeaderBackgroundRGB": "222222",
                "HeaderTextRGB": "333333", "TextHeadingsRGB": "444444",
                "SmallHeadingRGB": "555555", "Status": "s"}
        rec = self.c.must_create("theme", full)
        self.assert204(self.c.update("theme", rec["ID"], {"HeaderTextRGB": "abcdef"}))
        self.assertEqual(self.c.must_get("theme", rec["ID"]), dict(rec, HeaderTextRGB="abcdef"))
        self.assert204(self.c.update("theme", rec["ID"], {}))
        self.assertEqual(self.c.must_get("theme", rec["ID"]), dict(rec, HeaderTextRGB="abcdef"))

        afull = {"Name": "n", "Line1": "1", "Line2": "2", "Line3": "3", "City": "c",
                 "State": "s", "Country": "k", "Post": "p", "Lon": 1.5, "Lat": 2.5,
                 "ShowMap": "yes", "Status": "st"}
        a = self.c.must_create("address", afull)
        self.assert204(self.c.update("address", a["ID"], {"Line2": "two", "Lon": -3}))
        self.assertEqual(self.c.must_get("address", a["ID"]), dict(a, Line2="two", Lon=-3))
        self.assert204(self.c.update("address", a["ID"], {"ShowMap": "no"}))
        self.assertEqual(self.c.must_get("address", a["ID"]),
                         dict(a, Line2="two", Lon=-3, ShowMap=False))

    def test_update_response_is_204_empty(self):
        rid = self.c.must_create("theme", {})["ID"]
        r = self.c.update("theme", rid, {"Name": "x"})
        self.assert204(r)
        # raw check: no body bytes follow, the connection stays usable
        s = harness.connect(SRV.port)
        try:
            harness.send_raw(s, harness.build_request(
                "PUT", "/v2/theme/%d" % rid, {"Theme": {"Name": "y"}},
                {"Authorization": self.c.auth}) + harness.build_request(
                "GET", "/v2/theme/%d" % rid, None, {"Authorization": self.c.auth}))
            r1 = harness.read_response(s)
            self.assertEqual(r1.status, 204, r1)
            self.assertEqual(r1.body, b"")
            r2 = harness.read_response(s)
            self.assertEqual(r2.status, 200, r2)
            self.assertEqual(r2.json()["Result"]["Name"], "y")
        finally:
            s.close()

    def test_id_in_body(self):
        for kind in ("theme", "address"):
            rid = self.c.must_create(kind, {})["ID"]
            self.assert204(self.c.update(kind, rid, {"ID": rid, "Name": "same"}))
            self.assertEqual(self.c.must_get(kind, rid)["Name"], "same")
            self.assertErr(self.c.update(kind, rid, {"ID": rid + 1, "Name": "other"}), 400,
                           "id_mismatch")
            r = self.c.update(kind, rid, {"ID": 0})
            self.assertEqual(r.status, 400, r.describe())
            self.assertIn(r.error()["Code"], ("id_mismatch", "invalid_field"), r.describe())
            self.assertEqual(self.c.must_get(kind, rid)["Name"], "same")
        a = self.c.must_create("address", {})["ID"]
        self.assert204(self.c.update("address", a, {"ID": a, "City": "p"}, method="POST"))
        self.assertErr(self.c.update("address", a, {"ID": a + 7}, method="POST"), 400,
                       "id_mismatch")

    def test_unknown_and_bad_ids(self):
        ids = ["99999999", "0", "-1", "abc", "1.5", "9007199254740992",
               "99999999999999999999999999", "%20", "1e3"]
        for kind in ("theme", "address", "event"):
            for rid in ids:
                with self.subTest(kind=kind, id=rid):
                    self.assertErr(self.c.get(kind, rid), 404, "not_found")
                    self.assertErr(self.c.call("PUT", "/v2/%s/%s" % (kind, rid),
                                               {"Name": "x"}), 404, "not_found")
                    self.assertErr(self.c.delete(kind, rid), 404, "not_found")

    def test_cross_kind_ids_are_404(self):
        t = self.c.must_create("theme", {})["ID"]
        a = self.c.must_create("address", {})["ID"]
        self.assertNotEqual(t, a)
        self.assertErr(self.c.get("address", t), 404, "not_found")
        self.assertErr(self.c.get("theme", a), 404, "not_found")
        self.assertErr(self.c.get("event", t), 404, "not_found")
        self.assertErr(self.c.update("address", t, {"City": "x"}), 404, "not_found")
        self.assertErr(self.c.delete("theme", a), 404, "not_found")
        self.c.must_get("address", a)

    def test_other_users_records_are_404(self):
        bob = client("bob")
        self.addCleanup(bob.close)
        for kind in ("theme", "address"):
            rec = self.c.must_create(kind, {"Name": "alice's"})
            rid = rec["ID"]
            own = self.c.get(kind, 99999999)
            r = bob.get(kind, rid)
            self.assertErr(r, 404, "not_found")
            self.assertEqual(r.error()["Code"], own.error()["Code"])
            self.assertErr(bob.update(kind, rid, {"Name": "bob's"}), 404, "not_found")
            if kind == "address":
                self.assertErr(bob.update(kind, rid, {"Name": "bob's"}, method="POST"), 404,
                               "not_found")
            self.assertErr(bob.delete(kind, rid), 404, "not_found")
            self.assertEqual(self.c.must_get(kind, rid), rec)
        ev = self.c.must_create("event", {"Name": "E"})
        self.assertErr(bob.get("event", ev["ID"]), 404, "not_found")
        self.assertErr(bob.call("PUT", "/v2/event/%d" % ev["ID"], {"Event": {"Name": "b"}}),
                       404, "not_found")
        self.assertErr(bob.delete("event", ev["ID"]), 404, "not_found")
        self.assertEqual(self.c.must_get("event", ev["ID"])["Name"], "E")


class ReadListDelete(Base):
    user = "carol"

    def test_get_equals_create(self):
        for kind, body in (("theme", {"Name": "g"}), ("address", {"City": "g", "Lat": 3})):
            rec = self.c.must_create(kind, body)
            r = self.c.get(kind, rec["ID"])
            self.assertEqual(self.assertOk(r), rec)
            self.assertEqual(r.header("content-type").split(";")[0].strip(), "application/json")

    def make_themes(self):
        """Makes five themes; returns them and the IDs the theme list holds, newest first.
        Other carol tests may have made themes before: they are listed after these."""
        before = self.c.list_all("theme", limit=500)
        made = [self.c.must_create("theme", {"Name": "L%d" % i}) for i in range(5)]
        return made, [m["ID"] for m in reversed(made)] + [b["ID"] for b in before]

    def test_list_page_holds_items_and_a_next_cursor(self):
        self.make_themes()
        res = self.assertOk(self.c.list("theme", "limit=2"))
        self.assertEqual(set(res), {"Items", "NextCursor"})
        self.assertEqual(len(res["Items"]), 2)
        self.assertIsInstance(res["NextCursor"], str)

    def test_list_pages_give_every_record_once_newest_first(self):
        made, expect = self.make_themes()
        res = self.assertOk(self.c.list("theme", "limit=2"))
        got = res["Items"]
        for _ in range(50):
            if res["NextCursor"] is None:
                break
            self.assertIsInstance(res["NextCursor"], str)
            res = self.assertOk(self.c.list("theme", "limit=2&cursor=" + res["NextCursor"]))
            self.assertLessEqual(len(res["Items"]), 2)
            got += res["Items"]
        self.assertIsNone(res["NextCursor"])
        self.assertEqual([g["ID"] for g in got], expect, "newest first, every record once")
        for g, m in zip(got, reversed(made)):
            self.assertEqual(g, m)

    def test_list_default_limit_lists_them_all(self):
        _, expect = self.make_themes()
        self.assertLessEqual(len(expect), 50, "carol holds more themes than the default limit")
        res = self.assertOk(self.c.list("theme"))
        self.assertEqual([g["ID"] for g in res["Items"]], expect)
        self.assertIsNone(res["NextCursor"])

    def test_list_page_ending_at_the_oldest_record_has_no_next_cursor(self):
        _, expect = self.make_themes()
        res = self.assertOk(self.c.list("theme", "limit=%d" % len(expect)))
        self.assertEqual([g["ID"] for g in res["Items"]], expect)
        self.assertIsNone(res["NextCursor"])

    def test_list_holds_only_its_kind(self):
        self.make_themes()
        a = self.c.must_create("address", {})
        self.assertNotIn(a["ID"], [x["ID"] for x in self.c.list_all("theme", limit=500)])
        self.assertIn(a["ID"], [x["ID"] for x in self.c.list_all("address", limit=3)])

    def test_list_never_shows_other_users_records(self):
        made, expect = self.make_themes()
        a = self.c.must_create("address", {})
        for other in ("alice", "bob"):
            oc = client(other)
            try:
                for kind in ("theme", "address", "event"):
                    ids = {x["ID"] for x in oc.list_all(kind, limit=500)}
                    self.assertFalse(ids & set(expect + [a["ID"]]), "%s sees carol's %s" % (other, kind))
                    for x in oc.list_all(kind, limit=500):
                        self.assertNotEqual(x["UserID"], made[0]["UserID"])
            finally:
                oc.close()

    def test_list_bad_queries(self):
        for kind in ("theme", "address", "event"):
            for q in ("limit=0", "limit=501", "limit=abc", "limit=-1", "limit=", "limit=2x",
                      "cursor=xyz", "limit=2&cursor=xyz", "limit=99999999999999999999"):
                with self.subTest(kind=kind, q=q):
                    self.assertErr(self.c.list(kind, q), 400, "invalid_query")
            self.assertOk(self.c.list(kind, "limit=500"))
            self.assertOk(self.c.list(kind, "limit=1"))

    def test_list_query_repeated_and_unknown_parameters(self):
        """README: a parameter given twice must be valid both times and the
        last applies; unknown parameters are ignored."""
        self.make_themes()
        self.assertEqual(len(self.assertOk(self.c.list("theme", "limit=1&limit=2"))["Items"]), 2)
        self.assertEqual(len(self.assertOk(self.c.list("theme", "limit=2&limit=1"))["Items"]), 1)
        self.assertErr(self.c.list("theme", "limit=x&limit=2"), 400, "invalid_query")
        self.assertErr(self.c.list("theme", "limit=2&limit=x"), 400, "invalid_query")
        self.assertEqual(len(self.assertOk(self.c.list("theme", "foo=1&limit=1"))["Items"]), 1)

    def test_cursor_survives_deletion(self):
        made = [self.c.must_create("address", {"Name": "D%d" % i}) for i in range(4)]
        ids = [m["ID"] for m in made]
        first = self.assertOk(self.c.list("address", "limit=2"))
        self.assertEqual([x["ID"] for x in first["Items"]], [ids[3], ids[2]])
        self.assertEqual(self.c.delete("address", ids[2]).status, 204)
        nxt = self.assertOk(self.c.list("address", "limit=2&cursor=" + first["NextCursor"]))
        self.assertEqual([x["ID"] for x in nxt["Items"]], [ids[1], ids[0]])

    def deleted(self, kind):
        """The id of a record of kind, created and then deleted (204, empty)."""
        rid = self.c.must_create(kind, {"Name": "del"})["ID"]
        self.assert204(self.c.delete(kind, rid))
        return rid

    def test_delete_answers_204(self):
        for kind in ("theme", "address"):
            with self.subTest(kind=kind):
                self.deleted(kind)

    def test_deleted_record_is_404_to_get(self):
        for kind in ("theme", "address"):
            with self.subTest(kind=kind):
                self.assertErr(self.c.get(kind, self.deleted(kind)), 404, "not_found")

    def test_deleted_record_is_404_to_update(self):
        for kind in ("theme", "address"):
            with self.subTest(kind=kind):
                self.assertErr(self.c.update(kind, self.deleted(kind), {"Name": "x"}), 404,
                               "not_found")

    def test_deleted_record_is_404_to_delete(self):
        for kind in ("theme", "address"):
            with self.subTest(kind=kind):
                self.assertErr(self.c.delete(kind, self.deleted(kind)), 404, "not_found")

    def test_deleted_record_is_not_listed(self):
        for kind in ("theme", "address"):
            with self.subTest(kind=kind):
                rid = self.deleted(kind)
                self.assertNotIn(rid, [x["ID"] for x in self.c.list_all(kind, limit=500)])

    def test_deleted_id_is_never_reused(self):
        for kind in ("theme", "address"):
            with self.subTest(kind=kind):
                rid = self.deleted(kind)
                newer = [self.c.must_create(k, {})["ID"] for k in ("theme", "address", "theme")]
                for n in newer:
                    self.assertGreater(n, rid, "a deleted id must never be reused")


class Events(Base):
    user = "dave"

    def setUp(self):
        super().setUp()
        self.bob = client("bob")
        self.addCleanup(self.bob.close)

    def event(self, **kw):
        return self.c.call("POST", "/v2/event", {"Event": kw})

    def put_event(self, eid, **kw):
        return self.c.call("PUT", "/v2/event/%d" % eid, {"Event": kw})

    def gala(self):
        """A theme T, an address A and the event Gala linking both: (t, a, event)."""
        t = self.c.must_create("theme", {"Name": "T"})
        a = self.c.must_create("address", {"City": "A"})
        ev = self.assertOk(self.event(Name="Gala", ThemeID=t["ID"], AddressID=a["ID"]))
        return t, a, ev

    def test_create_event_answers_the_event(self):
        t, a, ev = self.gala()
        for k in ("ID", "Name", "ThemeID", "AddressID", "Status"):
            self.assertIn(k, ev)
        self.assertEqual((ev["Name"], ev["ThemeID"], ev["AddressID"], ev["Status"]),
                         ("Gala", t["ID"], a["ID"], "active"))
        self.assertGreater(ev["ID"], 0)

    def test_linking_sets_event_id_and_nothing_else(self):
        t, a, ev = self.gala()
        tt = self.c.must_get("theme", t["ID"])
        aa = self.c.must_get("address", a["ID"])
        self.assertEqual(tt["EventID"], ev["ID"])
        self.assertEqual(aa["EventID"], ev["ID"])
        self.assertEqual(tt, dict(t, EventID=ev["ID"]))
        self.assertEqual(aa, dict(a, EventID=ev["ID"]))

    def test_event_read_embeds_the_linked_records(self):
        t, a, ev = self.gala()
        got = self.c.must_get("event", ev["ID"])
        self.assertEqual(got["Theme"], self.c.must_get("theme", t["ID"]))
        self.assertEqual(got["Address"], self.c.must_get("address", a["ID"]))
        self.assertEqual(got["ThemeID"], t["ID"])

    def test_event_is_listed(self):
        _, _, ev = self.gala()
        self.assertIn(ev["ID"], [x["ID"] for x in self.c.list_all("event", limit=100)])

    def test_deleting_a_linked_record_is_a_conflict(self):
        t, a, _ = self.gala()
        self.assertErr(self.c.delete("theme", t["ID"]), 409, "conflict")
        self.assertErr(self.c.delete("address", a["ID"]), 409, "conflict")
        self.c.must_get("theme", t["ID"])
        self.c.must_get("address", a["ID"])

    def test_updating_a_linked_theme_keeps_its_event_id(self):
        t, _, ev = self.gala()
        self.assert204(self.c.update("theme", t["ID"], {"Name": "T2"}))
        self.assertEqual(self.c.must_get("theme", t["ID"])["EventID"], ev["ID"])
        self.assertEqual(self.c.must_get("event", ev["ID"])["Theme"]["Name"], "T2")

    def test_theme_id_0_unlinks_the_theme(self):
        t, a, ev = self.gala()
        self.assert204(self.put_event(ev["ID"], ThemeID=0))
        self.assertEqual(self.c.must_get("theme", t["ID"])["EventID"], 0)
        got = self.c.must_get("event", ev["ID"])
        self.assertIsNone(got["Theme"])
        self.assertEqual(got["ThemeID"], 0)
        self.assertEqual(got["AddressID"], a["ID"], "partial event update keeps AddressID")
        self.assertEqual(got["Name"], "Gala")

    def test_an_unlinked_theme_can_be_linked_again(self):
        t, _, ev = self.gala()
        self.assert204(self.put_event(ev["ID"], ThemeID=0))
        self.assert204(self.put_event(ev["ID"], ThemeID=t["ID"]))
        self.assertEqual(self.c.must_get("theme", t["ID"])["EventID"], ev["ID"])

    def test_deleting_the_event_unlinks_both(self):
        t, a, ev = self.gala()
        self.assert204(self.c.delete("event", ev["ID"]))
        self.assertErr(self.c.get("event", ev["ID"]), 404, "not_found")
        self.assertEqual(self.c.must_get("theme", t["ID"])["EventID"], 0)
        self.assertEqual(self.c.must_get("address", a["ID"])["EventID"], 0)
        self.assert204(self.c.delete("theme", t["ID"]))
        self.assert204(self.c.delete("address", a["ID"]))

    def test_event_without_links(self):
        ev = self.assertOk(self.event(Name="Bare"))
        self.assertEqual((ev["ThemeID"], ev["AddressID"], ev["Status"]), (0, 0, "active"))
        got = self.c.must_get("event", ev["ID"])
        self.assertIsNone(got["Theme"])
        self.assertIsNone(got["Address"])
        self.assertIn(b'"Theme":null', self.c.get("event", ev["ID"]).body)
        self.assertIn(b'"Address":null', self.c.get("event", ev["ID"]).body)

    def test_conflicts(self):
        t = self.c.must_create("theme", {})
        a = self.c.must_create("address", {})
        t2 = self.c.must_create("theme", {})
        e1 = self.assertOk(self.event(Name="one", ThemeID=t["ID"], AddressID=a["ID"]))
        self.assertErr(self.event(Name="two", ThemeID=t["ID"]), 409, "conflict")
        self.assertErr(self.event(Name="two", AddressID=a["ID"]), 409, "conflict")
        # no partial effect: t2 must stay unlinked after a 409 on the address
        self.assertErr(self.event(Name="two", ThemeID=t2["ID"], AddressID=a["ID"]), 409,
                       "conflict")
        self.assertEqual(self.c.must_get("theme", t2["ID"])["EventID"], 0)
        e2 = self.assertOk(self.event(Name="two"))
        self.assertErr(self.put_event(e2["ID"], ThemeID=t["ID"]), 409, "conflict")
        self.assertEqual(self.c.must_get("event", e2["ID"])["ThemeID"], 0)
        self.assertEqual(self.c.must_get("theme", t["ID"])["EventID"], e1["ID"])
        # relinking to the same event is not a conflict
        self.assert204(self.put_event(e1["ID"], ThemeID=t["ID"]))
        self.assertEqual(self.c.must_get("theme", t["ID"])["EventID"], e1["ID"])
        # moving: unlink from e1, then link to e2
        self.assert204(self.put_event(e1["ID"], ThemeID=0))
        self.assert204(self.put_event(e2["ID"], ThemeID=t["ID"]))
        self.assertEqual(self.c.must_get("theme", t["ID"])["EventID"], e2["ID"])
        # switching e2 to t2 frees t
        self.assert204(self.put_event(e2["ID"], ThemeID=t2["ID"]))
        self.assertEqual(self.c.must_get("theme", t["ID"])["EventID"], 0)
        self.assertEqual(self.c.must_get("theme", t2["ID"])["EventID"], e2["ID"])

    def test_bad_links(self):
        bt = self.bob.must_create("theme", {})
        ba = self.bob.must_create("address", {})
        own_a = self.c.must_create("address", {})
        own_t = self.c.must_create("theme", {})
        for field, val in (("ThemeID", bt["ID"]), ("ThemeID", 99999999),
                           ("ThemeID", own_a["ID"]), ("AddressID", ba["ID"]),
                           ("AddressID", 99999999), ("AddressID", own_t["ID"])):
            with self.subTest(field=field, val=val):
                self.assertErr(self.event(Name="x", **{field: val}), 400, "invalid_field", field)
        for field, val in (("ThemeID", "1"), ("ThemeID", -1), ("ThemeID", 1.5),
                           ("AddressID", True), ("Name", 5)):
            with self.subTest(field=field, val=val):
                self.assertErr(self.event(**{field: val}), 400, "invalid_field", field)
        ev = self.assertOk(self.event(Name="ok"))
        self.assertErr(self.put_event(ev["ID"], ThemeID=bt["ID"]), 400, "invalid_field", "ThemeID")
        self.assertEqual(self.bob.must_get("theme", bt["ID"])["EventID"], 0)
        self.assertErr(self.c.call("POST", "/v2/event", {"Event": {"Colour": 1}}), 400,
                       "unknown_field")
        self.assertErr(self.put_event(ev["ID"], ID=ev["ID"] + 1), 400, "id_mismatch")


class Restart(unittest.TestCase):
    def test_restart_keeps_everything(self):
        d = ManagedDir()
        self.addCleanup(d.cleanup)
        keys = {u: add_user(d.path, u) for u in ("ann", "ben")}
        paths = []
        max_id = 0
        srv = harness.Server(data_dir=d.path)
        with srv:
            ca = Client(srv.port, "ann", keys["ann"])
            cb = Client(srv.port, "ben", keys["ben"])
            try:
                created = []
                for i in range(4):
                    created.append(("theme", ca.must_create("theme", {"Name": "t%d é🎉" % i,
                                                                      "HeaderTextRGB": "aBcDeF"})))
                    created.append(("address", ca.must_create("address", {
                        "City": "c%d" % i, "Lat": 10.125 + i, "Lon": -0.1 * i, "ShowMap": i % 2 == 0})))
                created.append(("theme", cb.must_create("theme", {"Name": "ben"})))
                t0, a0 = created[0][1]["ID"], created[1][1]["ID"]
                t1, a1 = created[2][1]["ID"], created[3][1]["ID"]
                ca.must_update("theme", t0, {"Name": "updated", "Status": "archived"})
                ca.must_update("address", a0, {"Line2": "x"}, method="POST")
                e1 = ca.must_create("event", {"Name": "E1", "ThemeID": t0, "AddressID": a0})
                e2 = ca.must_create("event", {"Name": "E2", "ThemeID": t1})
                e3 = ca.must_create("event", {"Name": "E3", "AddressID": a1})
                self.assertEqual(ca.delete("event", e3["ID"]).status, 204)
                deleted_t = created[4][1]["ID"]
                self.assertEqual(ca.delete("theme", deleted_t).status, 204)
                ca.call("PUT", "/v2/event/%d" % e2["ID"], {"Event": {"Name": "E2b"}})
                all_ids = [r["ID"] for _, r in created] + [e1["ID"], e2["ID"], e3["ID"]]
                max_id = max(all_ids)
                for kind, r in created:
                    paths.append(("ann" if r["UserID"] == created[0][1]["UserID"] else "ben",
                                  "/v2/%s/%d" % (kind, r["ID"])))
                for e in (e1, e2, e3):
                    paths.append(("ann", "/v2/event/%d" % e["ID"]))
                for u in ("ann", "ben"):
                    for kind in ("theme", "address", "event"):
                        paths.append((u, "/v2/%s?limit=500" % kind))
                        paths.append((u, "/v2/%s?limit=2" % kind))
                clients = {"ann": ca, "ben": cb}
                before = {}
                for u, p in paths:
                    r = clients[u].call("GET", p)
                    before[(u, p)] = (r.status, r.body)
                self.assertEqual(before[("ann", "/v2/theme/%d" % deleted_t)][0], 404)
                self.assertEqual(before[("ann", "/v2/event/%d" % e3["ID"])][0], 404)
            finally:
                ca.close()
                cb.close()
            self.assertEqual(srv.stop(signal.SIGTERM), 0, srv.stderr_text())
        srv2 = harness.Server(data_dir=d.path)
        with srv2:
            clients = {u: Client(srv2.port, u, keys[u]) for u in keys}
            try:
                for u, p in paths:
                    r = clients[u].call("GET", p)
                    self.assertEqual((r.status, r.body), before[(u, p)], "GET %s as %s" % (p, u))
                for kind in ("theme", "address", "event"):
                    rec = clients["ann"].must_create(kind, {})
                    self.assertGreater(rec["ID"], max_id, "new ids must exceed all old ones")
            finally:
                for c in clients.values():
                    c.close()


class CrossSiteWrites(Base):
    """A browser that holds Basic credentials for the API (typed into its prompt)
    sends them with whatever a page of another site posts: a form of enctype
    text/plain makes a body that reads as JSON. The API takes no write from
    another site's page (docs/SECURITY.md); clients that send neither header
    (curl, libraries) and the browser's own origin are unaffected."""
    FORGED = '{"Theme":{"Name":"csrf=x"}}'  # <input name='{"Theme":{"Name":"csrf' value='x"}}'>

    def themes(self):
        return len(self.c.list_all("theme", limit=500))

    def test_a_cross_site_form_post_is_403_csrf_and_creates_nothing(self):
        before = self.themes()
        for headers in ({"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
                        {"Sec-Fetch-Site": "same-site"},
                        {"Origin": "https://evil.example"}):
            h = dict(headers, **{"Content-Type": "text/plain"})
            r = self.c.call("POST", "/v2/theme", self.FORGED, headers=h)
            self.assertErr(r, 403, "csrf")
        self.assertEqual(self.themes(), before)

    def test_cross_site_updates_and_deletions_are_403_and_change_nothing(self):
        t = self.c.must_create("theme", {"Name": "mine"})
        a = self.c.must_create("address", {"City": "mine"})
        h = {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}
        self.assertErr(self.c.call("PUT", "/v2/theme/%d" % t["ID"], '{"Theme":{"Name":"x"}}',
                                   headers=h), 403, "csrf")
        self.assertErr(self.c.call("POST", "/v2/address/%d" % a["ID"],
                                   '{"Address":{"City":"x"}}', headers=h), 403, "csrf")
        self.assertErr(self.c.call("DELETE", "/v2/theme/%d" % t["ID"], headers=h), 403, "csrf")
        self.assertEqual(self.c.must_get("theme", t["ID"])["Name"], "mine")
        self.assertEqual(self.c.must_get("address", a["ID"])["City"], "mine")

    def test_the_same_origin_scripts_and_reads_are_served(self):
        for headers in ({"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}, {}):
            r = self.c.call("POST", "/v2/theme", {"Theme": {"Name": "ok"}}, headers=headers)
            self.assertOk(r)
        port = self.c.port
        r = self.c.call("POST", "/v2/theme", {"Theme": {}},
                        headers={"Origin": "http://127.0.0.1:%d" % port,
                                 "Host": "127.0.0.1:%d" % port})
        self.assertOk(r)
        r = self.c.call("GET", "/v2/theme", headers={"Sec-Fetch-Site": "cross-site"})
        self.assertOk(r)  # a read changes nothing; without CORS the page cannot read it


class Auth(unittest.TestCase):
    def routes(self, tid, aid, eid):
        return [("POST", "/v2/theme"), ("GET", "/v2/theme"), ("GET", "/v2/theme/%d" % tid),
                ("PUT", "/v2/theme/%d" % tid), ("DELETE", "/v2/theme/%d" % tid),
                ("POST", "/v2/address"), ("GET", "/v2/address"),
                ("GET", "/v2/address/%d" % aid), ("PUT", "/v2/address/%d" % aid),
                ("POST", "/v2/address/%d" % aid), ("DELETE", "/v2/address/%d" % aid),
                ("POST", "/v2/event"), ("GET", "/v2/event"), ("GET", "/v2/event/%d" % eid),
                ("PUT", "/v2/event/%d" % eid), ("DELETE", "/v2/event/%d" % eid),
                ("GET", "/v2/theme/99999999")]

    def test_401_everywhere(self):
        key = KEYS["erin"]
        c = client("erin")
        self.addCleanup(c.close)
        t = c.must_create("theme", {"Name": "orig"})
        a = c.must_create("address", {"City": "orig"})
        e = c.must_create("event", {"Name": "orig"})
        b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        bad = {
            "missing": None,
            "not basic": "Bearer " + key,
            "digest": "Digest username=\"erin\"",
            "bad base64": "Basic !!!not-base64!!!",
            "no colon": "Basic " + b64("erin" + key),
            "unknown user": "Basic " + b64("nobody:" + key),
            "wrong key": "Basic " + b64("erin:" + key[:-1] + ("A" if key[-1] != "A" else "B")),
            "empty key": "Basic " + b64("erin:"),
            "empty user": "Basic " + b64(":" + key),
            "basic only": "Basic",
            "other user's key": "Basic " + b64("alice:" + key),
            "key with suffix": "Basic " + b64("erin:" + key + "x"),
        }
        for method, path in self.routes(t["ID"], a["ID"], e["ID"]):
            for name, hv in bad.items():
                with self.subTest(route="%s %s" % (method, path), case=name):
                    headers = {"Content-Type": "application/json"}
                    if hv is not None:
                        headers["Authorization"] = hv
                    body = {"Name": "hacked"} if method in ("POST", "PUT") else None
                    r = harness.request(SRV.port, method, path, body, headers)
                    self.assertEqual(r.status, 401, r)
                    self.assertEqual(r.header("www-authenticate"), 'Basic realm="eventd"', r)
                    self.assertEqual(r.json()["Status"], "error", r)
                    self.assertEqual(r.json()["Error"]["Code"], "unauthorized", r)
        # nothing changed
        self.assertEqual(c.must_get("theme", t["ID"]), t)
        self.assertEqual(c.must_get("address", a["ID"]), a)
        self.assertEqual(c.must_get("event", e["ID"])["Name"], "orig")
        self.assertEqual(len(c.list_all("theme", limit=500)), 1)

    def test_scheme_case_insensitive(self):
        # RFC 9110 11.1: the auth-scheme is case-insensitive.
        cred = base64.b64encode(("erin:" + KEYS["erin"]).encode()).decode()
        for scheme in ("basic", "BASIC"):
            r = harness.request(SRV.port, "GET", "/v2/theme",
                                headers={"Authorization": scheme + " " + cred})
            self.assertEqual(r.status, 200, r)

    def test_healthz_needs_no_auth(self):
        r = harness.request(SRV.port, "GET", "/healthz")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json(), {"Status": "ok"})


if __name__ == "__main__":
    unittest.main()
