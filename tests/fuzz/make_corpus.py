#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

    tests/fuzz/make_corpus.py [--eventd build/eventd]

fuzz_http and fuzz_json seeds are written from the tables below. fuzz_replay
seeds are real logs: the eventd binary serves a session of requests, is
stopped, and its eventd.log is copied (whole, compacted, torn, damaged).
Without an eventd binary the replay seeds are left as they are.

The files are named after their content's purpose, so re-running this only
changes what changed; the fuzzers add their own finds elsewhere (build tree).
Python 3 standard library only.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
sys.path.insert(0, os.path.join(HERE, "..", "blackbox"))

A1 = "@A1@"  # fuzz_http replaces these with the credentials of its two users
A2 = "@A2@"
S1 = "@S1@"  # ... its user "web"'s session cookie, and that session's CSRF token
C1 = "@C1@"


def req(method, path, body=None, auth=A1, headers=(), version="HTTP/1.1"):
    lines = ["%s %s %s" % (method, path, version), "Host: 127.0.0.1"]
    if auth:
        lines.append("Authorization: " + auth)
    lines += list(headers)
    data = body.encode() if isinstance(body, str) else body
    if data is not None:
        # fuzz_http expands "@C1@" in a body to the 43-character CSRF token of its session
        lines.append("Content-Length: %d" % (len(data) + data.count(C1.encode()) * (43 - 4)))
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (data or b"")


def chunked(method, path, parts, auth=A1, ext="", trailer=""):
    head = ("%s %s HTTP/1.1\r\nHost: a\r\nAuthorization: %s\r\nTransfer-Encoding: chunked\r\n\r\n"
            % (method, path, auth)).encode()
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext.encode(), p.encode()) for p in parts)
    return head + body + b"0\r\n" + trailer.encode() + b"\r\n"


THEME = json.dumps({"Theme": {"Name": "Gala \u00e9t\u00e9", "PageBackgroundRGB": "aBc123",
                              "HeaderBackgroundRGB": "FFFFFF", "HeaderTextRGB": "000000",
                              "TextHeadingsRGB": "123456", "SmallHeadingRGB": "abcdef",
                              "Status": "draft"}})
ADDRESS = json.dumps({"Address": {"Name": "Hall", "Line1": "1 Rue X", "Line2": "", "Line3": "b",
                                  "City": "Lyon", "State": "ARA", "Country": "FR",
                                  "Post": "69002", "Lon": 4.8357, "Lat": 45.764,
                                  "ShowMap": True, "Status": "active"}})
EVENT = '{"Event":{"Name":"Launch","ThemeID":3,"AddressID":4,"Status":"active"}}'

HTTP = {
    # every endpoint, one request each
    "health": req("GET", "/healthz", auth=None),
    "theme_create": req("POST", "/v2/theme", THEME),
    "theme_list": req("GET", "/v2/theme"),
    "theme_list_page": req("GET", "/v2/theme?limit=2&cursor=9"),
    "theme_get": req("GET", "/v2/theme/3"),
    "theme_update": req("PUT", "/v2/theme/3", '{"Theme":{"ID":3,"Name":"renamed"}}'),
    "theme_delete": req("DELETE", "/v2/theme/3"),
    "address_create": req("POST", "/v2/address", ADDRESS),
    "address_list": req("GET", "/v2/address?limit=20"),
    "address_get": req("GET", "/v2/address/3"),
    "address_update_put": req("PUT", "/v2/address/3", '{"City":"Paris","Lat":"48.85"}'),
    "address_update_post": req("POST", "/v2/address/3", '{"Address":{"ShowMap":"no"}}'),
    "address_delete": req("DELETE", "/v2/address/3"),
    "event_create": req("POST", "/v2/event", '{"Event":{"Name":"E","ThemeID":0}}'),
    "event_list": req("GET", "/v2/event?cursor=100"),
    "event_get": req("GET", "/v2/event/3"),
    "event_update": req("PUT", "/v2/event/3", '{"Event":{"Name":"F","AddressID":0}}'),
    "event_delete": req("DELETE", "/v2/event/3"),
    # sessions: create, then use what was created (ids 3, 4, 5 on a fresh server)
    "session_event_links": req("POST", "/v2/theme", THEME) + req("POST", "/v2/address", ADDRESS)
    + req("POST", "/v2/event", EVENT) + req("GET", "/v2/event/5") + req("DELETE", "/v2/theme/3")
    + req("PUT", "/v2/event/5", '{"ThemeID":0}') + req("DELETE", "/v2/theme/3"),
    "session_crud": req("POST", "/v2/theme", '{"Name":"a"}') + req("GET", "/v2/theme/3")
    + req("PUT", "/v2/theme/3", '{"Name":"b","Status":"x"}') + req("GET", "/v2/theme")
    + req("DELETE", "/v2/theme/3") + req("GET", "/v2/theme/3"),
    "session_other_user": req("POST", "/v2/address", '{"City":"Oslo"}')
    + req("GET", "/v2/address/3", auth=A2) + req("DELETE", "/v2/address/3", auth=A2)
    + req("GET", "/v2/address", auth=A2),
    "pipelined_gets": b"".join(req("GET", "/v2/theme/%d" % i) for i in range(1, 9)),
    "pipelined_mixed_auth": req("GET", "/v2/theme") + req("GET", "/v2/theme", auth=A2)
    + req("GET", "/v2/theme", auth="Basic Zm9vOmJhcg==") + req("GET", "/v2/theme"),
    "connection_close": req("GET", "/healthz", auth=None, headers=["Connection: close"])
    + req("GET", "/healthz", auth=None),
    "http10_keepalive": req("GET", "/v2/theme", version="HTTP/1.0",
                            headers=["Connection: keep-alive"]) + req("GET", "/healthz", auth=None,
                                                                      version="HTTP/1.0"),
    "expect_continue": req("POST", "/v2/theme", '{"Name":"c"}', headers=["Expect: 100-continue"]),
    "expect_continue_unauth": req("POST", "/v2/theme", '{"Name":"c"}', auth=None,
                                  headers=["Expect: 100-continue"]),
    "chunked_create": chunked("POST", "/v2/theme", ['{"Theme":{"Na', 'me":"chunk', 'ed"}}']),
    "chunked_ext_trailer": chunked("PUT", "/v2/address/3", ['{"Post":', '"75001"}'],
                                   ext=";a=b", trailer="X-T: 1\r\n"),
    # errors the server must answer well
    "err_not_found": req("GET", "/v2/nothing/1") + req("GET", "/v2/theme/0")
    + req("GET", "/v2/theme/01") + req("GET", "/v3/theme"),
    "err_method": req("PATCH", "/v2/theme/3") + req("POST", "/healthz", auth=None)
    + req("OPTIONS", "/v2/theme"),
    "err_unauthorized": req("GET", "/v2/theme", auth=None) + req("GET", "/v2/theme",
                                                                  auth="Basic !!!!")
    + req("GET", "/v2/theme", auth="Bearer x"),
    "err_json": req("POST", "/v2/theme", '{"Name":') + req("POST", "/v2/theme", "[1]")
    + req("POST", "/v2/theme", '{"Nope":1}') + req("POST", "/v2/theme", '{"Name":"a","Name":"b"}')
    + req("POST", "/v2/theme", ""),
    "err_fields": req("POST", "/v2/address", '{"Lat":91}') + req("POST", "/v2/theme",
                                                                 '{"PageBackgroundRGB":"#fff"}')
    + req("POST", "/v2/event", '{"ThemeID":999}') + req("PUT", "/v2/theme/3", '{"ID":4}'),
    "err_query": req("GET", "/v2/theme?limit=0") + req("GET", "/v2/theme?limit=99999")
    + req("GET", "/v2/theme?cursor=abc&limit"),
    "err_body_too_large": req("POST", "/v2/theme", headers=["Content-Length: 5000"], body=None)
    + b"{" * 100,
    "err_headers_too_large": b"GET /v2/theme HTTP/1.1\r\nX-Pad: " + b"p" * 1100 + b"\r\n\r\n",
    "err_version": b"GET /healthz HTTP/2.0\r\n\r\n",
    "err_garbage": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    "err_bare_lf": b"GET /healthz HTTP/1.1\nHost: a\n\n",
    "err_cl_and_te": b"POST /v2/theme HTTP/1.1\r\nAuthorization: " + A1.encode()
    + b"\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{}\n\r\n0\r\n\r\n",
    "err_two_lengths": b"POST /v2/theme HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    "err_bad_chunk": b"POST /v2/theme HTTP/1.1\r\nAuthorization: " + A1.encode()
    + b"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "absolute_target": b"GET http://127.0.0.1/v2/theme HTTP/1.1\r\nAuthorization: "
    + A1.encode() + b"\r\n\r\n",
    "stray_crlf": b"\r\n\r\n" + req("GET", "/healthz", auth=None),
    "incomplete_body": req("POST", "/v2/theme", headers=["Content-Length: 40"], body=None)
    + b'{"Name":',
}

# The account site (docs/ACCOUNTS.md). fuzz_http's user "web" has the password below and a
# session: "@S1@" becomes its cookie ("eventd_session=web:TOKEN"), "@C1@" its CSRF token.
WEB_PASSWORD = "fuzz-site-password"
CSRF = "fuzzCSRFcookieFUZZcsrfCOOKIEfuzzCSRFcookieF"  # the CSRF cookie before sign-in
# ... and its form token: the cookie's crypto_auth (HMAC-SHA-512-256) under fuzz_http's
# fixed site secret (FUZZ_SITE_SECRET there: 32 bytes of 0x5a), as src/site/site_csrf.c makes it.
FUZZ_SITE_SECRET = b"\x5a" * 32


def csrf_form_token(cookie):
    import base64
    import hashlib
    import hmac
    mac = hmac.new(FUZZ_SITE_SECRET, b"eventd pre-sign-in csrf v1:" + cookie.encode(),
                   hashlib.sha512).digest()[:32]
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


CSRF_FORM = csrf_form_token(CSRF)
FORM = "Content-Type: application/x-www-form-urlencoded"
AS_JSON = "Content-Type: application/json"


def form_post(path, fields, cookie="eventd_csrf=" + CSRF, headers=()):
    from urllib.parse import urlencode
    return req("POST", path, urlencode(fields, safe="@"), auth=None,
               headers=[FORM, "Cookie: " + cookie] + list(headers))


def json_post(path, fields=None, cookie=None, headers=()):
    h = [AS_JSON] + (["Cookie: " + cookie] if cookie else []) + list(headers)
    return req("POST", path, json.dumps(fields) if fields is not None else "", auth=None, headers=h)


def site_get(path, cookie=None, headers=(), method="GET"):
    return req(method, path, auth=None, headers=(["Cookie: " + cookie] if cookie else [])
               + list(headers))


NEW_USER = {"username": "newuser", "password": "long enough pw", "password_confirm": "long enough pw",
            "csrf": CSRF_FORM}
SITE = {
    # every page
    "site_register_page": site_get("/register"),
    "site_register_page_csrf_cookie": site_get("/register", cookie="eventd_csrf=" + CSRF),
    "site_signin_page": site_get("/signin"),
    "site_user_api_no_session": site_get("/user/api"),
    "site_user_api_page": site_get("/user/api", cookie=S1),
    "site_user_api_json": site_get("/user/api", cookie=S1, headers=["Accept: application/json"]),
    "site_user_api_json_no_session": site_get("/user/api", headers=["Accept: application/json"]),
    "site_head_pages": site_get("/register", method="HEAD") + site_get("/user/api", cookie=S1,
                                                                       method="HEAD")
    + site_get("/user/api", method="HEAD"),
    "site_bad_session": site_get("/user/api", cookie="eventd_session=web:" + "x" * 43)
    + site_get("/user/api", cookie="a=b; eventd_session=nobody:" + "y" * 43 + "; c=d")
    + site_get("/user/api", cookie="eventd_session=web"),
    # register and sign in, as forms (with the CSRF cookie) and as JSON
    "site_register_form": form_post("/register", NEW_USER),
    "site_register_json": json_post("/register", {"username": "jsonuser",
                                                  "password": "long enough pw"}),
    "site_register_errors": form_post("/register", dict(NEW_USER, username="bad name"))
    + form_post("/register", dict(NEW_USER, password="short", password_confirm="short"))
    + form_post("/register", dict(NEW_USER, password_confirm="different pw!"))
    + form_post("/register", dict(NEW_USER, username="fuzz"))
    + form_post("/register", dict(NEW_USER, csrf="wrong"))
    + req("POST", "/register", "username=x", auth=None, headers=["Content-Type: text/plain"]),
    "site_register_json_errors": json_post("/register", {"username": "j", "password": 5})
    + json_post("/register", {"username": "web", "password": "long enough pw"})
    + json_post("/register", {"username": "j2", "password": "long enough pw",
                              "password_confirm": "other one!!"})
    + req("POST", "/register", '{"username":"a","username":"b"}', auth=None, headers=[AS_JSON]),
    "site_signin_form": form_post("/signin", {"username": "web", "password": WEB_PASSWORD,
                                              "csrf": CSRF_FORM}),
    "site_signin_json": json_post("/signin", {"username": "web", "password": WEB_PASSWORD}),
    "site_signin_wrong": form_post("/signin", {"username": "web", "password": "wrong password",
                                               "csrf": CSRF_FORM})
    + json_post("/signin", {"username": "nobody", "password": "whatever pw"})
    + json_post("/signin", {"username": "fuzz", "password": "no password set"}),
    "site_signin_throttled": b"".join(json_post("/signin", {"username": "web", "password": "no%d"
                                                            % i}) for i in range(7)),
    # with the session: the key page, a new key, revocation, sign-out
    "site_key_issue": form_post("/user/api/key", {"csrf": C1}, cookie=S1),
    "site_key_issue_json": json_post("/user/api/key", cookie=S1),
    "site_key_revoke": form_post("/user/api/revoke", {"csrf": C1}, cookie=S1)
    + json_post("/user/api/revoke", cookie=S1),
    "site_key_bad_csrf": form_post("/user/api/key", {"csrf": CSRF}, cookie=S1)
    + form_post("/user/api/key", {"csrf": C1}),
    "site_signout": form_post("/signout", {"csrf": C1}, cookie=S1) + site_get("/user/api",
                                                                              cookie=S1),
    "site_signout_json": json_post("/signout", cookie=S1) + json_post("/signout"),
    "site_session_flow": form_post("/signin", {"username": "web", "password": WEB_PASSWORD,
                                               "csrf": CSRF_FORM})
    + site_get("/user/api", cookie=S1) + form_post("/user/api/key", {"csrf": C1}, cookie=S1)
    + form_post("/user/api/revoke", {"csrf": C1}, cookie=S1)
    + form_post("/signout", {"csrf": C1}, cookie=S1),
    # what the pages must escape: reflected username, CSRF field, Host
    "site_reflected": form_post("/signin", {"username": "<script>x</script>\"'&", "password": "p",
                                            "csrf": "<b>\"x"})
    + form_post("/register", {"username": "a\"><p>", "password": "long enough pw",
                              "password_confirm": "x", "csrf": CSRF_FORM})
    + form_post("/user/api/key", {"csrf": C1}, cookie=S1).replace(b"Host: 127.0.0.1",
                                                                 b"Host: <script>h</script>\""),
    # issue 17: a planted cookie with a matching value, other origins, the password policy,
    # the password change, sign out everywhere
    "site_csrf_planted": form_post("/register", dict(NEW_USER, csrf=CSRF)),
    "site_cross_origin": form_post("/signin", {"username": "web", "password": WEB_PASSWORD,
                                               "csrf": CSRF_FORM},
                                   headers=["Origin: http://127.0.0.1:9"])
    + form_post("/user/api/key", {"csrf": C1}, cookie=S1, headers=["Sec-Fetch-Site: cross-site"])
    + form_post("/signin", {"username": "web", "password": WEB_PASSWORD, "csrf": CSRF_FORM},
                headers=["Origin: http://127.0.0.1", "Sec-Fetch-Site: same-origin"]),
    "site_password_policy": json_post("/register", {"username": "policy1", "password": "password123"})
    + json_post("/register", {"username": "policy2", "password": "my policy2 pw"})
    + json_post("/register", {"username": "policy3", "password": "aaaaaaaaaa"}),
    "site_password_page": site_get("/user/password", cookie=S1) + site_get("/user/password"),
    "site_password_change": form_post("/user/password", {"current_password": WEB_PASSWORD,
                                                         "password": "a new fuzz password",
                                                         "password_confirm": "a new fuzz password",
                                                         "csrf": C1}, cookie=S1),
    "site_password_change_json": json_post("/user/password", {"current_password": "wrong one!",
                                                              "password": "a new fuzz password"},
                                           cookie=S1)
    + json_post("/user/password", {"current_password": WEB_PASSWORD, "password": "web"},
                cookie=S1)
    + json_post("/user/password", {"current_password": WEB_PASSWORD,
                                   "password": "a new fuzz password"}, cookie=S1),
    "site_signout_all": form_post("/signout/all", {"csrf": C1}, cookie=S1)
    + json_post("/signout/all", cookie=S1) + json_post("/signout/all"),
    "site_method": req("PUT", "/register", "", auth=None) + req("DELETE", "/signout", auth=None)
    + req("POST", "/user/api", "", auth=None, headers=[FORM]),
    "site_form_errors": req("POST", "/signin", "username=a%zz&password=x", auth=None,
                            headers=[FORM, "Cookie: eventd_csrf=" + CSRF])
    + req("POST", "/signin", "username=a&username=b", auth=None, headers=[FORM])
    + req("POST", "/signin", "username=" + "u" * 100, auth=None, headers=[FORM]),
}
HTTP.update(SITE)

# (name, split byte 0, split byte 1): the same stream whole, byte by byte, in small pieces
SPLITS = {"": (0, 0), "_bytewise": (1, 0), "_pieces": (13, 7)}
SPLIT_VARIANTS = {"session_event_links", "pipelined_gets", "chunked_create", "expect_continue",
                  "theme_create", "err_json", "connection_close", "site_register_form",
                  "site_signin_form", "site_session_flow"}

JSON = {  # name: (kind 0 theme / 1 address / 2 event, body)
    "theme_full": (0, THEME),
    "theme_bare": (0, '{"Name":"bare","SmallHeadingRGB":"575757"}'),
    "theme_ignored": (0, '{"Theme":{"ID":5,"UserID":1,"EventID":2,"Logo":[1,{"x":null}],'
                         '"BackgroundImage":"b","Name":null}}'),
    "theme_escapes": (0, '{"Name":"\\u00e9\\ud83d\\ude00\\n\\t\\"\\\\\\/\\u0000","Status":"x"}'),
    "theme_bad_utf8": (0, b'{"Name":"\xc3\x28"}'),
    "theme_long": (0, '{"Name":"' + "x" * 300 + '"}'),
    "theme_empty_status": (0, '{"Status":""}'),
    "theme_dup": (0, '{"Name":"a","Name":"b"}'),
    "theme_unknown": (0, '{"Theme":{"Colour":"red"}}'),
    "theme_two_tops": (0, '{"Theme":{},"Name":"x"}'),
    "theme_wrapper_array": (0, '{"Theme":[]}'),
    "theme_colors_bad": (0, '{"PageBackgroundRGB":"12345g","HeaderTextRGB":"#123456"}'),
    "theme_trailing": (0, '{"Name":"a"} {"Name":"b"}'),
    "theme_deep_ignored": (0, '{"Logo":' + "[" * 64 + "]" * 64 + "}"),
    "address_full": (1, ADDRESS),
    "address_numbers": (1, '{"Lon":-180,"Lat":90,"ShowMap":1}'),
    "address_number_strings": (1, '{"Lon":"4.8357","Lat":"-0.0","ShowMap":"yes"}'),
    "address_exponent": (1, '{"Lon":1.5e2,"Lat":-9E1,"ShowMap":""}'),
    "address_long_decimal": (1, '{"Lon":12.345678901234567890,"Lat":0.1000000000000000055511}'),
    "address_out_of_range": (1, '{"Lat":90.0000001}'),
    "address_nan": (1, '{"Lon":"NaN","Lat":"inf"}'),
    "address_bool_words": (1, '{"ShowMap":"TRUE","Status":"s"}'),
    "address_output_only": (1, '{"Address":{"Line4":"x","Type":"home","City":"C"}}'),
    "event_full": (2, EVENT),
    "event_refs": (2, '{"ThemeID":9007199254740991,"AddressID":0}'),
    "event_ref_too_big": (2, '{"ThemeID":9007199254740992}'),
    "event_ref_string": (2, '{"ThemeID":"3"}'),
    "event_ref_negative": (2, '{"AddressID":-1,"ThemeID":1.0}'),
    "event_id_bad": (2, '{"Event":{"ID":"7","Name":"n"}}'),
    "event_nulls": (2, '{"Event":{"Name":null,"ThemeID":null,"AddressID":null,"Status":null}}'),
    "empty": (0, ""),
    "not_object": (1, '"string"'),
    "small_strings": (0x80, '{"Name":"exactly sixteen!","Status":"seventeen chars!!"}'),
    "small_strings_ok": (0x81, '{"City":"0123456789abcdef"}'),
}


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def http_seeds():
    for name, stream in HTTP.items():
        for suffix, (b0, b1) in SPLITS.items():
            if suffix and name not in SPLIT_VARIANTS:
                continue
            write("fuzz_http", name + suffix, bytes([b0, b1]) + stream)


def json_seeds():
    for name, (kind, body) in JSON.items():
        data = body if isinstance(body, bytes) else body.encode()
        write("fuzz_json", name, bytes([kind, 0]) + data)
        if name.endswith("_full"):
            write("fuzz_json", name + "_bytewise", bytes([kind, 1]) + data)


def replay_seeds(eventd):
    import harness
    harness.EVENTD_BIN = os.path.abspath(eventd)
    work = tempfile.mkdtemp(prefix="eventd-corpus-")
    try:
        data = os.path.join(work, "data")
        with harness.Server(users=["alice", "bob"], data_dir=data,
                            extra_args=["--fsync", "always"]) as srv:
            a = {"Authorization": harness.auth_header("alice", srv.keys["alice"])}
            b = {"Authorization": harness.auth_header("bob", srv.keys["bob"])}

            def call(method, path, body=None, h=a):
                r = harness.request(srv.port, method, path, body=body, headers=h)
                return r.json() if r.status != 204 else None

            t = call("POST", "/v2/theme", THEME)["Result"]["ID"]
            ad = call("POST", "/v2/address", ADDRESS)["Result"]["ID"]
            call("POST", "/v2/event",
                 json.dumps({"Event": {"Name": "E", "ThemeID": t, "AddressID": ad}}))
            call("PUT", "/v2/theme/%d" % t, '{"Name":"renamed \\u2603"}')
            x = call("POST", "/v2/theme", '{"Name":"gone"}')["Result"]["ID"]
            call("DELETE", "/v2/theme/%d" % x)
            call("POST", "/v2/address", '{"City":"Bergen","Lon":5.32,"Lat":60.39}', h=b)
            call("POST", "/v2/address", json.dumps(  # spans a sector boundary
                {k: k * (250 // len(k)) for k in ("Name", "Line1", "Line2", "Line3", "City")}))
            srv.stop()
        log = open(os.path.join(data, "eventd.log"), "rb").read()
        subprocess.run([eventd, "compact", "--data", data], check=True, capture_output=True)
        compacted = open(os.path.join(data, "eventd.log"), "rb").read()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mid = len(log) // 2
    # where the batches start: their sync marks (frame type 24)
    marks, off = [], 16
    while off + 9 <= len(log):
        marks += [off] if log[off + 8] == 24 else []
        off += 9 + int.from_bytes(log[off + 4:off + 8], "little")
    # as a kill -9 leaves it: the long address's batch last (no stop's give-backs, nor
    # its closing mark)
    killed = log[:marks[-2]]

    def hole(data, at):  # a sector the disk never got: zeros from at to its end
        end = (at // 512 + 1) * 512
        return data[:at] + b"\0" * (end - at) + data[end:]

    seeds = {
        "session": log,
        "compacted": compacted,
        "header_only": log[:16],
        "empty": b"",
        "torn_header": log[:7],
        "torn_tail": log[:-5],
        "torn_frame_header": log[:16 + 4],
        "zero_tail": log + b"\0" * 40,
        "flipped_middle": log[:mid] + bytes([log[mid] ^ 0x20]) + log[mid + 1:],
        "bad_length_middle": log[:16 + 4] + b"\xff\xff\xff\x0f" + log[16 + 8:],
        "garbage_tail": log + b"garbage that is not a frame",
        "bad_magic": b"EVTDLOX\0" + log[8:],
        "newer_version": log[:8] + b"\x04\0\0\0" + log[12:],
        "hole_middle": hole(log, mid) + b"\0" * 600,
        "hole_last_batch": hole(killed, marks[-3]) + b"\0" * 600,
        "log_twice": log + log[16:],
    }
    for name, data in seeds.items():
        write("fuzz_replay", name, b"\0" + data)
        if name in ("session", "compacted", "log_twice"):
            write("fuzz_replay", name + "_fix_crc", b"\2" + data)
        if name in ("flipped_middle", "bad_length_middle", "garbage_tail", "torn_tail",
                    "hole_middle"):
            write("fuzz_replay", name + "_repair", b"\1" + data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eventd", help="eventd binary that makes the replay seeds")
    args = ap.parse_args()
    http_seeds()
    json_seeds()
    if args.eventd:
        replay_seeds(args.eventd)
    else:
        print("no --eventd: replay seeds left as they are", file=sys.stderr)


if __name__ == "__main__":
    main()
