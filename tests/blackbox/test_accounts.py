#!/usr/bin/env python3
"""The account site and its JSON variant, black box, against docs/ACCOUNTS.md:
the pages (/register, /signin, /signout, /user/api and its key/revoke forms),
the session cookie, CSRF, every rule (username, password, confirmation, taken
name, wrong password), throttling per username and per client address (and
X-Forwarded-For from trusted proxies only), HTML escaping of everything a
user controls, accounts surviving a restart and a compaction, and /v2 staying
fast while passwords are being hashed.

Sign-in failures are throttled per client address, and every test speaks from
127.0.0.1: a test that makes sign-ins fail gets a server of its own (OwnServer),
so the shared one never sees a failed sign-in."""

import html
import http.client
import itertools
import json
import os
import re
import signal
import sys
import threading
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from apiclient import HOST, ErrorAsserts, ManagedDir, Resp, auth_header, run_cli  # noqa: E402

PASSWORD = "correct horse battery"
SESSION = "eventd_session"
CSRF_COOKIE = "eventd_csrf"
FORM = "application/x-www-form-urlencoded"
JSON_T = "application/json"
_names = itertools.count(1)


def uname(prefix="u"):
    """A fresh valid username (unique within this process)."""
    return "%s%d-%d" % (prefix, os.getpid() % 10000, next(_names))


def parse_set_cookies(resp):
    """{name: (value, {attr-lower: value or True})} of every Set-Cookie."""
    out = {}
    for k, v in resp.header_list:
        if k.lower() != "set-cookie":
            continue
        parts = [p.strip() for p in v.split(";")]
        name, _, value = parts[0].partition("=")
        attrs = {}
        for p in parts[1:]:
            a, eq, av = p.partition("=")
            attrs[a.strip().lower()] = av.strip() if eq else True
        out[name.strip()] = (value.strip(), attrs)
    return out


def cleared(value, attrs):
    """True if a Set-Cookie deletes the cookie (empty, Max-Age=0 or an old Expires)."""
    return (value == "" or attrs.get("max-age") == "0" or
            bool(re.search(r"19[78]\d", str(attrs.get("expires", "")))))


def alert_text(body):
    """The text of the page's role="alert" element ('' if none)."""
    m = re.search(r'<(\w+)[^>]*role="alert"[^>]*>(.*?)</\1>', body.decode("utf-8", "replace"),
                  re.S)
    if not m:
        return ""
    return html.unescape(re.sub(r"<[^>]*>", "", m.group(2))).strip()


def hidden_csrf(body):
    m = re.search(r'<input[^>]*name="csrf"[^>]*>', body.decode("utf-8", "replace"))
    if not m:
        return None
    v = re.search(r'value="([^"]*)"', m.group(0))
    return html.unescape(v.group(1)) if v else None


def api_key_of(body):
    m = re.search(r'id="api-key"[^>]*>([^<]*)<', body.decode("utf-8", "replace"))
    return html.unescape(m.group(1)).strip() if m else None


def v2_theme(port, user, key):
    """POST /v2/theme with Basic auth; returns the status."""
    return call(port, "POST", "/v2/theme", json.dumps({"Theme": {}}).encode(),
                {"Authorization": auth_header(user, key), "Content-Type": JSON_T}).status


def call(port, method, path, body=None, headers=None, timeout=10.0):
    """One request on a fresh connection; returns apiclient.Resp."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        r = conn.getresponse()
        return Resp(method, path, body, r.status, r.getheaders(), r.read())
    finally:
        conn.close()


class Browser:
    """A cookie jar and the site's forms, as a person's browser would use them.

    xff, when set, is sent as X-Forwarded-For on every request."""

    def __init__(self, port, xff=None):
        self.port = port
        self.xff = xff
        self.jar = {}
        self.last = None

    def send(self, method, path, body=None, ctype=None, headers=None, jar=True):
        h = {}
        if jar and self.jar:
            h["Cookie"] = "; ".join("%s=%s" % kv for kv in self.jar.items())
        if ctype:
            h["Content-Type"] = ctype
        if self.xff:
            h["X-Forwarded-For"] = self.xff
        h.update(headers or {})
        r = call(self.port, method, path, body, h)
        for name, (value, attrs) in parse_set_cookies(r).items():
            if cleared(value, attrs):
                self.jar.pop(name, None)
            else:
                self.jar[name] = value
        self.last = r
        return r

    def get(self, path, accept=None):
        return self.send("GET", path, headers={"Accept": accept} if accept else None)

    def form(self, path, fields):
        return self.send("POST", path, urllib.parse.urlencode(fields).encode(), FORM)

    def post_json(self, path, obj=None):
        return self.send("POST", path, b"" if obj is None else json.dumps(obj).encode(), JSON_T)

    def page_csrf(self, path):
        """GETs a form page and returns its hidden csrf value."""
        r = self.get(path)
        if r.status != 200:
            raise AssertionError("GET %s: %s" % (path, r.describe()))
        token = hidden_csrf(r.body)
        if token is None:
            raise AssertionError("no csrf field on %s: %s" % (path, r.describe()))
        return token

    # whole operations, each checked -----------------------------------------
    def register_form(self, name, password=PASSWORD, confirm=None):
        token = self.page_csrf("/register")
        return self.form("/register", {"username": name, "password": password,
                                       "password_confirm": password if confirm is None
                                       else confirm, "csrf": token})

    def signin_form(self, name, password=PASSWORD):
        token = self.page_csrf("/signin")
        return self.form("/signin", {"username": name, "password": password, "csrf": token})

    def register_json(self, name, password=PASSWORD):
        r = self.post_json("/register", {"username": name, "password": password})
        if r.status != 201:
            raise AssertionError("JSON register %s: %s" % (name, r.describe()))
        return r.result()

    def issue_key_form(self):
        token = self.page_csrf("/user/api")
        r = self.form("/user/api/key", {"csrf": token})
        if r.status != 200:
            raise AssertionError("issue key: %s" % r.describe())
        key = api_key_of(r.body)
        if not key:
            raise AssertionError("no id=\"api-key\" on the page: %s" % r.describe())
        return key

    def issue_key_json(self):
        r = self.post_json("/user/api/key")
        if r.status != 200:
            raise AssertionError("JSON key: %s" % r.describe())
        return r.result()["APIKey"]


def register(port, name=None, password=PASSWORD, xff=None):
    """A signed-in Browser for a new user registered with JSON; returns (browser, name)."""
    name = name or uname()
    b = Browser(port, xff)
    b.register_json(name, password)
    return b, name


def signin_json(port, name, password=PASSWORD, xff=None):
    h = {"Content-Type": JSON_T}
    if xff:
        h["X-Forwarded-For"] = xff
    return call(port, "POST", "/signin",
                json.dumps({"username": name, "password": password}).encode(), h)


SRV = None


def setUpModule():
    global SRV
    SRV = harness.Server()
    SRV.__enter__()


def tearDownModule():
    if SRV is not None:
        SRV.__exit__(None, None, None)


class Base(ErrorAsserts, unittest.TestCase):
    def port(self):
        return SRV.port

    def browser(self, xff=None):
        return Browser(self.port(), xff)

    def assertStatus(self, r, status):
        self.assertEqual(r.status, status, r.describe())

    def assertNoRaw(self, r, *values):
        body = r.body.decode("utf-8", "replace")
        for v in values:
            self.assertNotIn(v, body, "an unescaped user value is on the page: %s" % r.describe())


class OwnServer(Base):
    """A class with a server of its own (args in server_args, env in server_env)."""
    server_args = ()
    server_env = None

    @classmethod
    def setUpClass(cls):
        cls.srv = harness.Server(extra_args=list(cls.server_args), env=cls.server_env)
        cls.srv.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.srv.__exit__(None, None, None)

    def port(self):
        return self.srv.port


# ---------------------------------------------------------------------------
class RegisterPage(Base):
    def test_get_register_is_200_html_with_the_fields(self):
        r = self.browser().get("/register")
        self.assertStatus(r, 200)
        self.assertIn("text/html", r.header("content-type", ""))
        for field in ("username", "password", "password_confirm", "csrf"):
            self.assertRegex(r.body.decode(), r'name="%s"' % field, field)

    def test_get_register_sets_the_csrf_cookie_and_a_hidden_field_bound_to_it(self):
        # The form's token is the cookie's MAC under the server secret, not the
        # cookie itself (docs/ACCOUNTS.md "CSRF"): both 43 characters, different.
        b = self.browser()
        token = b.page_csrf("/register")
        self.assertRegex(token, r"^[A-Za-z0-9_-]{43}$")
        self.assertRegex(b.jar.get(CSRF_COOKIE, ""), r"^[A-Za-z0-9_-]{43}$", b.last.describe())
        self.assertNotEqual(b.jar.get(CSRF_COOKIE), token, b.last.describe())

    def test_the_csrf_cookie_is_samesite_strict(self):
        r = self.browser().get("/register")
        attrs = parse_set_cookies(r).get(CSRF_COOKIE, ("", {}))[1]
        self.assertEqual(str(attrs.get("samesite")).lower(), "strict", r.describe())

    def test_pages_have_a_csp_and_no_external_assets(self):
        for path in ("/register", "/signin"):
            with self.subTest(path=path):
                r = self.browser().get(path)
                self.assertStatus(r, 200)
                self.assertTrue(r.header("content-security-policy"), r.describe())
                self.assertNotRegex(r.body.decode(), r'(src|href)\s*=\s*"?(https?:)?//',
                                    "an external asset")

    def test_register_form_is_303_to_user_api(self):
        r = self.browser().register_form(uname())
        self.assertStatus(r, 303)
        self.assertTrue(r.header("location", "").endswith("/user/api"), r.describe())

    def test_register_form_sets_the_session_cookie(self):
        name = uname()
        r = self.browser().register_form(name)
        self.assertStatus(r, 303)
        cookies = parse_set_cookies(r)
        self.assertIn(SESSION, cookies, r.describe())
        value, attrs = cookies[SESSION]
        user, _, token = value.partition(":")
        self.assertEqual(user, name)
        self.assertGreaterEqual(len(token), 32, "a 256-bit token is at least 32 characters")
        self.assertIn("httponly", attrs, r.describe())
        self.assertEqual(str(attrs.get("samesite")).lower(), "strict", r.describe())
        self.assertEqual(attrs.get("path"), "/", r.describe())
        self.assertEqual(attrs.get("max-age"), str(7 * 24 * 3600), r.describe())
        self.assertNotIn("secure", attrs, "Secure only with --cookie-secure")

    def test_registered_session_opens_user_api(self):
        name = uname()
        b = self.browser()
        self.assertStatus(b.register_form(name), 303)
        r = b.get("/user/api")
        self.assertStatus(r, 200)
        self.assertIn(name, r.body.decode())
        uid = b.get("/user/api", accept=JSON_T).result()["UserID"]
        self.assertRegex(r.body.decode(), r"\b%d\b" % uid, "the page shows the UserID")


class SignInOut(Base):
    def test_signin_form_is_303_to_user_api_with_a_session(self):
        _, name = register(self.port())
        b = self.browser()
        r = b.signin_form(name)
        self.assertStatus(r, 303)
        self.assertTrue(r.header("location", "").endswith("/user/api"), r.describe())
        self.assertTrue(b.jar.get(SESSION, "").startswith(name + ":"), r.describe())
        self.assertEqual(b.get("/user/api").status, 200)

    def test_get_signin_is_200_with_the_fields(self):
        r = self.browser().get("/signin")
        self.assertStatus(r, 200)
        for field in ("username", "password", "csrf"):
            self.assertRegex(r.body.decode(), r'name="%s"' % field, field)

    def test_user_api_without_a_session_is_303_to_signin(self):
        r = self.browser().get("/user/api")
        self.assertStatus(r, 303)
        self.assertTrue(r.header("location", "").endswith("/signin"), r.describe())

    def test_signout_is_303_to_signin_and_clears_the_cookie(self):
        b, _ = register(self.port())
        token = b.page_csrf("/user/api")
        r = b.form("/signout", {"csrf": token})
        self.assertStatus(r, 303)
        self.assertTrue(r.header("location", "").endswith("/signin"), r.describe())
        cookies = parse_set_cookies(r)
        self.assertIn(SESSION, cookies, r.describe())
        self.assertTrue(cleared(*cookies[SESSION]), r.describe())

    def test_signout_ends_the_session_on_the_server(self):
        b, _ = register(self.port())
        old = b.jar[SESSION]
        self.assertStatus(b.form("/signout", {"csrf": b.page_csrf("/user/api")}), 303)
        r = call(self.port(), "GET", "/user/api", headers={"Cookie": "%s=%s" % (SESSION, old)})
        self.assertStatus(r, 303)
        self.assertTrue(r.header("location", "").endswith("/signin"), r.describe())

    def test_the_cookie_name_grants_nothing(self):
        _, victim = register(self.port())
        b, _ = register(self.port())
        token = b.jar[SESSION].partition(":")[2]
        r = call(self.port(), "GET", "/user/api",
                 headers={"Cookie": "%s=%s:%s" % (SESSION, victim, token), "Accept": JSON_T})
        self.assertErr(r, 401, "unauthorized")

    def test_a_ninth_session_ends_the_oldest(self):
        _, name = register(self.port())
        cookies = []
        for _ in range(9):
            r = signin_json(self.port(), name)
            self.assertStatus(r, 200)
            cookies.append(parse_set_cookies(r)[SESSION][0])
        first = call(self.port(), "GET", "/user/api",
                     headers={"Cookie": "%s=%s" % (SESSION, cookies[0]), "Accept": JSON_T})
        self.assertErr(first, 401, "unauthorized")
        last = call(self.port(), "GET", "/user/api",
                    headers={"Cookie": "%s=%s" % (SESSION, cookies[-1]), "Accept": JSON_T})
        self.assertStatus(last, 200)


class KeyForms(Base):
    def test_issued_key_works_at_once_on_v2(self):
        b, name = register(self.port())
        key = b.issue_key_form()
        self.assertEqual(v2_theme(self.port(), name, key), 200)

    def test_key_page_has_a_copy_button_and_a_curl_line(self):
        b, name = register(self.port())
        token = b.page_csrf("/user/api")
        r = b.form("/user/api/key", {"csrf": token})
        self.assertStatus(r, 200)
        text = html.unescape(r.body.decode())
        self.assertRegex(text, r"<button[^>]*>[^<]*[Cc]opy", "a copy button")
        key = api_key_of(r.body)
        self.assertRegex(text, r"curl [^\n]*%s[^\n]*/v2" % re.escape(key), "a curl line")

    def test_the_key_is_shown_once(self):
        b, _ = register(self.port())
        key = b.issue_key_form()
        r = b.get("/user/api")
        self.assertStatus(r, 200)
        self.assertNotIn(key, r.body.decode())

    def test_revoke_is_303_to_user_api(self):
        b, _ = register(self.port())
        b.issue_key_form()
        r = b.form("/user/api/revoke", {"csrf": b.page_csrf("/user/api")})
        self.assertStatus(r, 303)
        self.assertTrue(r.header("location", "").endswith("/user/api"), r.describe())

    def test_revoked_key_is_401_at_once(self):
        b, name = register(self.port())
        key = b.issue_key_form()
        self.assertEqual(v2_theme(self.port(), name, key), 200)
        self.assertStatus(b.form("/user/api/revoke", {"csrf": b.page_csrf("/user/api")}), 303)
        self.assertEqual(v2_theme(self.port(), name, key), 401)

    def test_rotated_key_old_is_401(self):
        b, name = register(self.port())
        old = b.issue_key_form()
        b.issue_key_form()
        self.assertEqual(v2_theme(self.port(), name, old), 401)

    def test_rotated_key_new_is_200(self):
        b, name = register(self.port())
        old = b.issue_key_form()
        new = b.issue_key_form()
        self.assertNotEqual(old, new)
        self.assertEqual(v2_theme(self.port(), name, new), 200)


class Json(Base):
    def test_register_is_201_with_username_and_userid(self):
        name = uname()
        r = self.browser().post_json("/register", {"username": name, "password": PASSWORD,
                                                   "password_confirm": PASSWORD})
        self.assertStatus(r, 201)
        self.assertEqual(r.json()["Status"], "ok", r.describe())
        res = r.result()
        self.assertEqual(set(res), {"Username", "UserID"}, r.describe())
        self.assertEqual(res["Username"], name)
        self.assertIsInstance(res["UserID"], int)
        self.assertIn(SESSION, parse_set_cookies(r), r.describe())

    def test_a_password_that_is_not_utf8_is_refused_as_by_the_form(self):
        # Review, 2026-11-28: yajl lets overlongs through, and the JSON variant
        # made an account the HTML form could never sign in to.
        body = b'{"username":"%s","password":"' % uname().encode() + b"\xc0\x80" * 6 + b'"}'
        r = self.browser().send("POST", "/register", body, JSON_T)
        self.assertErr(r, 400, "invalid_field", "password")
        self.assertIn("UTF-8", r.json()["Error"]["Message"])

    def test_a_body_that_is_not_an_object_says_so(self):
        for body in (b"null", b"[]", b'"x"', b'{"username":{"a":1}}'):
            with self.subTest(body=body):
                r = self.browser().send("POST", "/register", body, JSON_T)
                self.assertStatus(r, 400)
                self.assertTrue(r.json()["Error"]["Message"], r.describe())

    def test_an_unpaired_surrogate_escape_is_refused(self):
        body = b'{"username":"%s","password":"long enough \\ud800 password"}' % uname().encode()
        r = self.browser().send("POST", "/register", body, JSON_T)
        self.assertErr(r, 400, "invalid_json")
        self.assertIn("surrogate", r.json()["Error"]["Message"])

    def test_signin_is_200_with_username_and_userid(self):
        _, name = register(self.port())
        r = signin_json(self.port(), name)
        self.assertStatus(r, 200)
        self.assertEqual(set(r.result()), {"Username", "UserID"}, r.describe())
        self.assertTrue(parse_set_cookies(r)[SESSION][0].startswith(name + ":"), r.describe())

    def test_user_api_is_200_with_haskey(self):
        b, name = register(self.port())
        r = b.get("/user/api", accept=JSON_T)
        self.assertStatus(r, 200)
        self.assertEqual(r.result(), {"Username": name, "UserID": r.result()["UserID"],
                                      "HasKey": False})
        b.issue_key_json()
        self.assertIs(b.get("/user/api", accept=JSON_T).result()["HasKey"], True)

    def test_user_api_without_session_is_401(self):
        self.assertErr(self.browser().get("/user/api", accept=JSON_T), 401, "unauthorized")

    def test_key_is_200_and_works_at_once(self):
        b, name = register(self.port())
        r = b.post_json("/user/api/key")
        self.assertStatus(r, 200)
        res = r.result()
        self.assertEqual(set(res), {"Username", "UserID", "APIKey"}, r.describe())
        self.assertEqual(v2_theme(self.port(), name, res["APIKey"]), 200)

    def test_rotated_key_old_is_401(self):
        b, name = register(self.port())
        old = b.issue_key_json()
        new = b.issue_key_json()
        self.assertEqual(v2_theme(self.port(), name, old), 401)
        self.assertEqual(v2_theme(self.port(), name, new), 200)

    def test_revoke_is_204(self):
        b, _ = register(self.port())
        b.issue_key_json()
        r = b.post_json("/user/api/revoke")
        self.assertStatus(r, 204)

    def test_revoked_key_is_401(self):
        b, name = register(self.port())
        key = b.issue_key_json()
        self.assertStatus(b.post_json("/user/api/revoke"), 204)
        self.assertEqual(v2_theme(self.port(), name, key), 401)

    def test_signout_is_204_and_ends_the_session(self):
        b, _ = register(self.port())
        old = b.jar[SESSION]
        r = b.post_json("/signout")
        self.assertStatus(r, 204)
        self.assertTrue(cleared(*parse_set_cookies(r)[SESSION]), r.describe())
        r = call(self.port(), "GET", "/user/api",
                 headers={"Cookie": "%s=%s" % (SESSION, old), "Accept": JSON_T})
        self.assertErr(r, 401, "unauthorized")

    def test_post_neither_form_nor_json_is_415(self):
        r = self.browser().send("POST", "/register", b"username=x", "text/plain")
        self.assertErr(r, 415, "unsupported_media_type")

    def test_a_content_type_list_is_415_and_registers_nobody(self):
        """A body whose type is a list (one line naming two, or two lines) is
        refused whole. A balancer placing the registration by its username
        read the JSON body's (HAProxy takes any item of the list), while a form
        of another name hid in a JSON string: that name was created on a shard
        not its own (review, 2026-11-29)."""
        for lines in ([FORM + ", " + JSON_T], [FORM, JSON_T], [JSON_T + ", " + FORM]):
            with self.subTest(lines=lines):
                b, name = self.browser(), uname("ct")
                form = urllib.parse.urlencode({
                    "username": name, "password": PASSWORD, "password_confirm": PASSWORD,
                    "csrf": b.page_csrf("/register")})
                body = json.dumps({"a": "&%s&" % form, "username": uname("cover")}).encode()
                c = http.client.HTTPConnection(HOST, self.port(), timeout=10)
                try:
                    c.putrequest("POST", "/register")
                    c.putheader("Cookie", "; ".join("%s=%s" % kv for kv in b.jar.items()))
                    for line in lines:
                        c.putheader("Content-Type", line)
                    c.putheader("Content-Length", str(len(body)))
                    c.endheaders(body)
                    resp = c.getresponse()
                    r = Resp("POST", "/register", body, resp.status, resp.getheaders(),
                             resp.read())
                finally:
                    c.close()
                self.assertErr(r, 415, "unsupported_media_type")
                # The name is still free (a sign-in would count a failure here).
                self.assertStatus(b.post_json("/register", {"username": name,
                                                            "password": PASSWORD}), 201)

    def test_bad_username_is_400_naming_username(self):
        r = self.browser().post_json("/register", {"username": "no spaces", "password": PASSWORD})
        self.assertErr(r, 400, "invalid_field", "username")

    def test_username_of_65_characters_is_400(self):
        r = self.browser().post_json("/register", {"username": "a" * 65, "password": PASSWORD})
        self.assertErr(r, 400, "invalid_field", "username")

    def test_username_of_64_characters_is_201(self):
        r = self.browser().post_json("/register",
                                     {"username": uname("L").ljust(64, "x"), "password": PASSWORD})
        self.assertStatus(r, 201)

    def test_short_password_is_400_naming_password(self):
        r = self.browser().post_json("/register", {"username": uname(), "password": "x" * 9})
        self.assertErr(r, 400, "invalid_field", "password")

    def test_password_of_10_bytes_is_201(self):
        r = self.browser().post_json("/register", {"username": uname(), "password": "k7#mQ2!vLp"})
        self.assertStatus(r, 201)

    def test_password_over_256_bytes_is_400(self):
        r = self.browser().post_json("/register", {"username": uname(), "password": "x" * 257})
        self.assertErr(r, 400, "invalid_field", "password")

    def test_mismatched_confirmation_is_400_naming_password_confirm(self):
        r = self.browser().post_json("/register", {"username": uname(), "password": PASSWORD,
                                                   "password_confirm": PASSWORD + "!"})
        self.assertErr(r, 400, "invalid_field", "password_confirm")

    def test_taken_username_is_409_and_says_only_that(self):
        _, name = register(self.port())
        r = self.browser().post_json("/register", {"username": name, "password": "other pass 123"})
        err = self.assertErr(r, 409, "conflict")
        self.assertEqual(err["Message"].rstrip(".").lower(), "this username is taken", r.describe())
        self.assertLessEqual(set(err), {"Code", "Message", "Field"}, r.describe())
        self.assertNotIn("Result", r.json())

    def test_taken_username_answer_does_not_depend_on_the_password(self):
        _, name = register(self.port())
        a = self.browser().post_json("/register", {"username": name, "password": PASSWORD})
        b = self.browser().post_json("/register", {"username": name, "password": "other pass 123"})
        self.assertEqual(a.status, 409, a.describe())
        self.assertEqual(a.json(), b.json())


class FormRules(Base):
    """Each failing form is shown again with the status and a role="alert" reason."""

    def test_bad_username_is_400_naming_username(self):
        r = self.browser().register_form("no spaces")
        self.assertStatus(r, 400)
        self.assertIn("username", alert_text(r.body).lower(), r.describe())

    def test_short_password_is_400_naming_password(self):
        r = self.browser().register_form(uname(), "x" * 9)
        self.assertStatus(r, 400)
        self.assertIn("password", alert_text(r.body).lower(), r.describe())

    def test_mismatched_confirmation_is_400_naming_the_confirmation(self):
        r = self.browser().register_form(uname(), PASSWORD, PASSWORD + "!")
        self.assertStatus(r, 400)
        self.assertIn("confirm", alert_text(r.body).lower(), r.describe())

    def test_failed_register_creates_nothing(self):
        name = uname()
        self.assertStatus(self.browser().register_form(name, PASSWORD, PASSWORD + "!"), 400)
        self.assertStatus(self.browser().post_json("/register", {"username": name,
                                                                 "password": PASSWORD}), 201)

    def test_taken_username_is_409_and_says_only_that(self):
        _, name = register(self.port())
        r = self.browser().register_form(name, "other pass 123")
        self.assertStatus(r, 409)
        self.assertEqual(alert_text(r.body).rstrip(".").lower(), "this username is taken",
                         r.describe())


class Csrf(Base):
    def test_register_without_csrf_is_403(self):
        b = self.browser()
        b.page_csrf("/register")
        r = b.form("/register", {"username": uname(), "password": PASSWORD,
                                 "password_confirm": PASSWORD})
        self.assertStatus(r, 403)

    def test_register_with_wrong_csrf_is_403_and_creates_nothing(self):
        name = uname()
        b = self.browser()
        token = b.page_csrf("/register")
        r = b.form("/register", {"username": name, "password": PASSWORD,
                                 "password_confirm": PASSWORD, "csrf": token + "x"})
        self.assertStatus(r, 403)
        self.assertNotIn(SESSION, parse_set_cookies(r))
        self.assertStatus(self.browser().post_json("/register", {"username": name,
                                                                 "password": PASSWORD}), 201)

    def test_register_without_the_csrf_cookie_is_403(self):
        b = self.browser()
        token = b.page_csrf("/register")
        b.jar.clear()
        r = b.form("/register", {"username": uname(), "password": PASSWORD,
                                 "password_confirm": PASSWORD, "csrf": token})
        self.assertStatus(r, 403)

    def test_signin_without_csrf_is_403(self):
        _, name = register(self.port())
        b = self.browser()
        b.page_csrf("/signin")
        r = b.form("/signin", {"username": name, "password": PASSWORD})
        self.assertStatus(r, 403)

    def test_issue_key_with_wrong_csrf_is_403_and_keeps_the_key(self):
        b, name = register(self.port())
        key = b.issue_key_form()
        r = b.form("/user/api/key", {"csrf": "0" * 64})
        self.assertStatus(r, 403)
        self.assertEqual(v2_theme(self.port(), name, key), 200)

    def test_issue_key_with_the_pre_signin_csrf_cookie_is_403(self):
        b, _ = register(self.port())
        pre = Browser(self.port())
        pre_token = pre.page_csrf("/register")
        b.jar[CSRF_COOKIE] = pre_token
        r = b.form("/user/api/key", {"csrf": pre_token})
        self.assertStatus(r, 403)

    def test_revoke_without_csrf_is_403_and_keeps_the_key(self):
        b, name = register(self.port())
        key = b.issue_key_form()
        r = b.form("/user/api/revoke", {})
        self.assertStatus(r, 403)
        self.assertEqual(v2_theme(self.port(), name, key), 200)

    def test_signout_without_csrf_is_403_and_keeps_the_session(self):
        b, _ = register(self.port())
        r = b.form("/signout", {})
        self.assertStatus(r, 403)
        self.assertStatus(b.get("/user/api"), 200)


HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>',
           "'><svg onload=alert(1)>", "</textarea><b>x</b>"]


class Escaping(Base):
    """Every value a user controls is escaped wherever a page shows it."""

    def test_hostile_username_on_register_is_400_and_escaped(self):
        for v in HOSTILE:
            with self.subTest(value=v):
                r = self.browser().register_form(v)
                self.assertStatus(r, 400)
                self.assertNoRaw(r, v)

    def test_hostile_passwords_on_register_are_not_echoed(self):
        for v in HOSTILE:
            with self.subTest(value=v):
                pw = v + " long enough"
                r = self.browser().register_form(uname(), pw, pw + "<i>")
                self.assertStatus(r, 400)
                self.assertNoRaw(r, v)

    def test_hostile_csrf_on_register_is_403_and_not_echoed(self):
        for v in HOSTILE:
            with self.subTest(value=v):
                b = self.browser()
                b.page_csrf("/register")
                r = b.form("/register", {"username": uname(), "password": PASSWORD,
                                         "password_confirm": PASSWORD, "csrf": v})
                self.assertStatus(r, 403)
                self.assertNoRaw(r, v)

    def test_hostile_query_string_is_not_echoed(self):
        v = HOSTILE[0]
        for path in ("/register", "/signin"):
            with self.subTest(path=path):
                r = self.browser().get(path + "?username=" + urllib.parse.quote(v))
                self.assertStatus(r, 200)
                self.assertNoRaw(r, v)

    def test_the_most_hostile_valid_username_is_shown_escaped(self):
        # the username pattern allows only [A-Za-z0-9._-]: dots and dashes are
        # the worst it lets through (path-like, comment-like names)
        for v in ("..", "-->", ".-_-."):
            with self.subTest(name=v):
                name = v if v != "-->" else "--" + uname("x")
                b = Browser(self.port())
                r = b.register_form(name)
                self.assertStatus(r, 303)
                page = b.get("/user/api")
                self.assertStatus(page, 200)
                self.assertIn(name, page.body.decode())
                key = b.issue_key_form()
                self.assertEqual(v2_theme(self.port(), name, key), 200)


class SigninFailures(OwnServer):
    """Wrong password / unknown user (at most 4 failures: under the free 5)."""

    def test_wrong_password_form_is_401(self):
        _, name = register(self.port())
        r = self.browser().signin_form(name, "wrong password!")
        self.assertStatus(r, 401)
        self.assertTrue(alert_text(r.body), r.describe())

    def test_unknown_user_form_gets_the_same_message_as_a_wrong_password(self):
        _, name = register(self.port())
        wrong = self.browser().signin_form(name, "wrong password!")
        unknown = self.browser().signin_form(uname("nobody"), "wrong password!")
        self.assertStatus(unknown, 401)
        self.assertEqual(alert_text(unknown.body), alert_text(wrong.body))


class SigninFailuresJson(OwnServer):
    def test_wrong_password_json_is_401_unauthorized_same_for_unknown(self):
        _, name = register(self.port())
        wrong = signin_json(self.port(), name, "wrong password!")
        self.assertErr(wrong, 401, "unauthorized")
        unknown = signin_json(self.port(), uname("nobody"), "wrong password!")
        self.assertEqual(unknown.json(), wrong.json())


class SigninHostile(OwnServer):
    def test_hostile_username_on_signin_is_401_and_escaped(self):
        # Reading of the contract: /signin lists only 401 for a wrong name; a
        # name the pattern refuses is one no account has, so it is the same
        # 401 as an unknown user (nothing about the rules is revealed there).
        r = self.browser().signin_form(HOSTILE[1], "wrong password!")
        self.assertStatus(r, 401)
        self.assertNoRaw(r, HOSTILE[1])

    def test_hostile_password_on_signin_is_401_and_not_echoed(self):
        r = self.browser().signin_form(uname(), HOSTILE[0] + " long enough")
        self.assertStatus(r, 401)
        self.assertNoRaw(r, HOSTILE[0])


def fail_signins(test, port, names, xffs, n=5):
    """n wrong-password sign-ins (names[i], xffs[i]); each must be 401."""
    for i in range(n):
        r = signin_json(port, names[i % len(names)], "wrong password!", xffs[i % len(xffs)])
        test.assertEqual(r.status, 401, "failure %d: %s" % (i + 1, r.describe()))


class ThrottleAddress(OwnServer):
    def test_sixth_attempt_from_one_address_is_429_with_retry_after(self):
        _, good = register(self.port())
        fail_signins(self, self.port(), [uname("nobody") for _ in range(5)], [None])
        r = signin_json(self.port(), good)
        self.assertStatus(r, 429)
        self.assertGreaterEqual(int(r.header("retry-after", "0")), 1, r.describe())
        self.assertErr(r, 429, "too_many_requests")


def pipelined_signins(port, names, password="wrong password!", xffs=None):
    """JSON sign-ins for names (from xffs[i] when given), sent at once on one
    connection; returns the statuses."""
    reqs = []
    for i, n in enumerate(names):
        h = {"Content-Type": JSON_T}
        if xffs:
            h["X-Forwarded-For"] = xffs[i]
        reqs.append(harness.build_request(
            "POST", "/signin", json.dumps({"username": n, "password": password}).encode(), h))
    s = harness.connect(port)
    try:
        s.sendall(b"".join(reqs))
        return [harness.read_response(s).status for _ in names]
    finally:
        s.close()


class ThrottleInFlightName(OwnServer):
    """A name has at most two checks in flight, failures or not (docs/ACCOUNTS.md):
    sent at once, the third is 429 although no failure is recorded yet (found by
    fuzz_http: pipelined wrong passwords all got 401; then by a review: right
    passwords, never counted as failures, kept the sign-in lane full)."""
    server_args = ("--trusted-proxies", "127.0.0.1")

    def test_pipelined_wrong_passwords_for_one_name_third_is_429(self):
        _, name = register(self.port())
        # From seven addresses, so only the name's count can refuse them.
        statuses = pipelined_signins(self.port(), [name] * 7,
                                     xffs=["198.51.100.%d" % i for i in range(7)])
        self.assertEqual(statuses, [401] * 2 + [429] * 5)

    def test_pipelined_right_passwords_for_one_name_third_is_429(self):
        _, name = register(self.port())
        statuses = pipelined_signins(self.port(), [name] * 4, password=PASSWORD,
                                     xffs=["198.51.100.%d" % i for i in range(4)])
        self.assertEqual(statuses, [200] * 2 + [429] * 2)


class ThrottleInFlightAddress(OwnServer):
    """... and of an address once it has a recorded failure."""

    def test_pipelined_sign_ins_from_a_failing_address_sixth_failure_is_429(self):
        self.assertEqual(signin_json(self.port(), uname("nobody"), "wrong password!").status, 401)
        self.assertEqual(pipelined_signins(self.port(), [uname("nobody") for _ in range(6)]),
                         [401] * 4 + [429] * 2)


class ThrottleAddressForm(OwnServer):
    def test_sixth_form_attempt_from_one_address_is_429_with_retry_after(self):
        _, good = register(self.port())
        fail_signins(self, self.port(), [uname("nobody") for _ in range(5)], [None])
        r = self.browser().signin_form(good)
        self.assertStatus(r, 429)
        self.assertGreaterEqual(int(r.header("retry-after", "0")), 1, r.describe())
        self.assertTrue(alert_text(r.body), r.describe())


class XffUntrusted(OwnServer):
    def test_xff_from_an_untrusted_peer_is_ignored(self):
        _, good = register(self.port())
        fail_signins(self, self.port(), [uname("nobody") for _ in range(5)],
                     ["203.0.113.%d" % i for i in range(1, 6)])
        r = signin_json(self.port(), good, xff="203.0.113.99")
        self.assertStatus(r, 429)


class ThrottleTrusted(OwnServer):
    """Behind a trusted proxy (127.0.0.1): per forwarded address, and per name."""
    server_args = ("--trusted-proxies", "127.0.0.1,192.0.2.0/24")

    def test_sixth_attempt_for_one_name_is_429_even_from_new_addresses(self):
        _, name = register(self.port(), xff="198.51.100.200")
        fail_signins(self, self.port(), [name], ["198.51.100.%d" % i for i in range(1, 6)])
        r = signin_json(self.port(), name, xff="198.51.100.77")
        self.assertStatus(r, 429)
        self.assertGreaterEqual(int(r.header("retry-after", "0")), 1, r.describe())

    def test_sixth_attempt_from_one_forwarded_address_is_429(self):
        _, good = register(self.port(), xff="198.51.100.201")
        fail_signins(self, self.port(), [uname("nobody") for _ in range(5)], ["203.0.113.7"])
        self.assertStatus(signin_json(self.port(), good, xff="203.0.113.7"), 429)

    def test_other_forwarded_addresses_are_counted_separately(self):
        _, good = register(self.port(), xff="198.51.100.202")
        fail_signins(self, self.port(), [uname("nobody") for _ in range(5)], ["203.0.113.8"])
        self.assertStatus(signin_json(self.port(), good, xff="203.0.113.9"), 200)

    def test_a_success_clears_the_names_count(self):
        _, name = register(self.port(), xff="198.51.100.204")
        fail_signins(self, self.port(), [name], ["198.51.100.%d" % i for i in range(11, 15)], 4)
        self.assertStatus(signin_json(self.port(), name, xff="198.51.100.15"), 200)
        # with the count cleared, five more failures are free again
        fail_signins(self, self.port(), [name], ["198.51.100.%d" % i for i in range(16, 21)], 5)

    def test_the_wait_doubles(self):
        _, name = register(self.port(), xff="198.51.100.205")
        fail_signins(self, self.port(), [name], ["198.51.100.%d" % i for i in range(31, 36)])
        r = signin_json(self.port(), name, "wrong password!", "198.51.100.36")
        self.assertEqual(r.header("retry-after"), "1", r.describe())
        # The one-second wait is the behaviour (its base has no setting): poll until it has
        # passed. A refused (429) attempt is not counted, so polling does not move it.
        last = []

        def waited_out():
            last[:] = [signin_json(self.port(), name, "wrong password!", "198.51.100.37")]
            return last[0].status != 429

        harness.wait_until(waited_out, 5.0)
        self.assertStatus(last[0], 401)
        r = signin_json(self.port(), name, "wrong password!", "198.51.100.38")
        self.assertStatus(r, 429)
        self.assertEqual(r.header("retry-after"), "2", r.describe())

    def test_the_rightmost_untrusted_address_is_the_client(self):
        _, good = register(self.port(), xff="198.51.100.203")
        fail_signins(self, self.port(), [uname("nobody") for _ in range(5)],
                     ["198.51.100.1, 203.0.113.20, 192.0.2.5",
                      "198.51.100.2, 203.0.113.20, 192.0.2.6"])
        self.assertStatus(signin_json(self.port(), good, xff="203.0.113.20"), 429)


class Persistence(unittest.TestCase):
    def setUp(self):
        self.d = ManagedDir(prefix="eventd-bb-acc-")
        self.addCleanup(self.d.cleanup)

    def server(self):
        return harness.Server(data_dir=self.d.path)

    def make_accounts(self, port):
        """alice-like user with a key, a user whose key was revoked; returns the facts."""
        b, keep = register(port)
        key = b.issue_key_json()
        rb, revoked = register(port)
        rkey = rb.issue_key_json()
        self.assertStatus_(rb.post_json("/user/api/revoke"), 204)
        return {"keep": keep, "key": key, "revoked": revoked, "rkey": rkey,
                "cookie": b.jar[SESSION]}

    def assertStatus_(self, r, status):
        self.assertEqual(r.status, status, r.describe())

    def check(self, port, f):
        self.assertStatus_(signin_json(port, f["keep"]), 200)
        self.assertEqual(v2_theme(port, f["keep"], f["key"]), 200)
        self.assertEqual(v2_theme(port, f["revoked"], f["rkey"]), 401)
        r = call(port, "GET", "/user/api",
                 headers={"Cookie": "%s=%s" % (SESSION, f["cookie"]), "Accept": JSON_T})
        self.assertStatus_(r, 200)

    def test_accounts_survive_a_restart(self):
        with self.server() as srv:
            f = self.make_accounts(srv.port)
        with self.server() as srv:
            self.check(srv.port, f)

    def test_accounts_survive_an_online_compaction(self):
        with self.server() as srv:
            f = self.make_accounts(srv.port)
            srv.send_signal(signal.SIGUSR1)
            done = harness.wait_until(lambda: "compaction done" in srv.stderr_text(), 10)
            self.assertTrue(done, "no 'compaction done' logged:\n" + srv.stderr_text())
            self.check(srv.port, f)
        with self.server() as srv:
            self.check(srv.port, f)

    def test_accounts_survive_an_offline_compaction(self):
        with self.server() as srv:
            f = self.make_accounts(srv.port)
        cp = run_cli(["compact", "--data", self.d.path])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        with self.server() as srv:
            self.check(srv.port, f)


class Configuration(unittest.TestCase):
    def test_site_path_moves_the_pages(self):
        with harness.Server(extra_args=["--site-path", "/account"]) as srv:
            self.assertEqual(call(srv.port, "GET", "/account/register").status, 200)

    def test_site_path_leaves_nothing_at_the_root(self):
        with harness.Server(extra_args=["--site-path", "/account"]) as srv:
            self.assertEqual(call(srv.port, "GET", "/register").status, 404)

    def test_site_path_forms_post_under_it(self):
        with harness.Server(extra_args=["--site-path", "/account"]) as srv:
            r = call(srv.port, "GET", "/account/register")
            self.assertIn('action="/account/register"', r.body.decode(), r.describe())

    def test_site_path_under_the_api_base_keeps_its_pages(self):
        # The front sends paths under the API's base straight to the API only
        # when no page of the site lies there: here the pages do.
        with harness.Server(extra_args=["--site-path", "/v2"]) as srv:
            self.assertEqual(call(srv.port, "GET", "/v2/register").status, 200)
            self.assertEqual(call(srv.port, "GET", "/v2/theme/1").status, 401)

    def test_api_base_over_the_site_keeps_its_pages(self):
        with harness.Server(extra_args=["--base-path", "/user"]) as srv:
            self.assertEqual(call(srv.port, "GET", "/user/api").status, 303)  # to sign-in
            self.assertEqual(call(srv.port, "GET", "/user/theme/1").status, 401)

    def test_site_off_is_404(self):
        with harness.Server(extra_args=["--no-site"]) as srv:
            for path in ("/register", "/signin", "/user/api"):
                with self.subTest(path=path):
                    self.assertEqual(call(srv.port, "GET", path).status, 404)

    def test_session_ttl_is_the_cookies_max_age(self):
        # its minimum is 60 s: too long to wait for the expiry itself here
        with harness.Server(extra_args=["--session-ttl-s", "60"]) as srv:
            r = Browser(srv.port).post_json("/register", {"username": uname(),
                                                          "password": PASSWORD})
            self.assertEqual(r.status, 201, r.describe())
            self.assertEqual(parse_set_cookies(r)[SESSION][1].get("max-age"), "60")

    def test_password_min_bytes_is_the_minimum(self):
        with harness.Server(extra_args=["--password-min-bytes", "12"]) as srv:
            r = Browser(srv.port).post_json("/register", {"username": uname(),
                                                          "password": "x" * 11})
            self.assertEqual(r.status, 400, r.describe())
            self.assertEqual(r.error()["Field"], "password", r.describe())

    def test_cookie_secure_adds_secure(self):
        with harness.Server(extra_args=["--cookie-secure"]) as srv:
            b = Browser(srv.port)
            r = b.post_json("/register", {"username": uname(), "password": PASSWORD})
            self.assertEqual(r.status, 201, r.describe())
            # With --cookie-secure the cookie is __Host- prefixed (docs/ACCOUNTS.md).
            self.assertIn("secure", parse_set_cookies(r)["__Host-" + SESSION][1], r.describe())


class SurfacesOnOneConnection(Base):
    """One keep-alive connection whose requests go to the API and the site in
    turn, pipelined, one of them answered later (a sign-in, hashed on the
    threadpool): each surface has its own request state and the API keeps
    its credential cache between them (docs/ARCHITECTURE.md "Request state"),
    so every answer comes right and in order."""

    def test_api_and_site_requests_take_turns_on_one_connection(self):
        b, name = register(self.port())
        auth = {"Authorization": auth_header(name, b.issue_key_json())}
        theme = {"Theme": {"Name": "One connection", "Status": "active"}}
        signin = {"username": name, "password": PASSWORD}
        reqs = [harness.build_request("POST", "/v2/theme", theme, auth),
                harness.build_request("POST", "/signin", signin),
                harness.build_request("GET", "/v2/theme", headers=auth),
                harness.build_request("GET", "/signin"),
                harness.build_request("GET", "/v2/theme", headers=auth)]
        s = harness.connect(self.port())
        try:
            harness.send_raw(s, b"".join(reqs))
            got = [harness.read_response(s) for _ in reqs]
        finally:
            s.close()
        self.assertEqual([r.status for r in got], [200, 200, 200, 200, 200], got)
        self.assertEqual(got[1].json()["Result"]["Username"], name, got[1])
        self.assertIn("text/html", got[3].header("content-type", ""), got[3])
        for r in (got[2], got[4]):
            self.assertIn(b"One connection", r.body, r)


class HashingKeepsTheLoopFree(OwnServer):
    """/v2 is answered while sign-ins wait for Argon2id, which runs on the threadpool.

    SIGNERS sign-ins (the real Argon2id cost, one hash at a time) are sent on
    connections of their own and read by the server; then GET /v2/theme is
    answered, and the server's count of sign-in hashes done (/metrics) must show
    at most MAX_DONE of them done. Were a hash run on the loop, the server would
    hash each sign-in as it read it, so all of them would be done before the GET
    was read. An order, not a time (a timed bound flakes on a busy machine):
    tests/bench/signin_latency.sh measures the latency."""
    server_env = {"EVENTD_TEST_PWHASH_FAST": "0"}  # the real Argon2id cost
    server_args = ("--pwhash-concurrency", "1")
    SIGNERS = 8
    MAX_DONE = SIGNERS // 2  # the GET has all the time 4 hashes take

    def signin_hashes(self):
        r = call(self.port(), "GET", "/metrics")
        m = re.search(r'^eventd_password_hashes_total\{lane="signin"\} (\d+)$',
                      r.body.decode(), re.M)
        self.assertIsNotNone(m, r.body[:3000])
        return int(m.group(1))

    def test_v2_is_answered_while_signins_wait_for_their_hashes(self):
        b, name = register(self.port())
        auth = {"Authorization": auth_header(name, b.issue_key_json())}
        # One user per sign-in: a name with 5 sign-ins in flight refuses more (429).
        names = [register(self.port())[1] for _ in range(self.SIGNERS)]
        before = self.signin_hashes()
        socks = []
        try:
            for n in names:
                body = json.dumps({"username": n, "password": PASSWORD}).encode()
                s = harness.connect(self.port(), timeout=60)
                socks.append(s)
                s.sendall(b"POST /signin HTTP/1.1\r\nHost: x\r\nContent-Type: " +
                          JSON_T.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) +
                          body)
            harness.wait_server_read(self.port(), socks, timeout=60)
            r = call(self.port(), "GET", "/v2/theme", headers=auth)
            done = self.signin_hashes() - before
            got = [harness.read_response(s, timeout=60).status for s in socks]
        finally:
            for s in socks:
                s.close()
        self.assertEqual(r.status, 200, r.describe())
        self.assertEqual(got, [200] * self.SIGNERS)
        self.assertLessEqual(done, self.MAX_DONE, "sign-in hashes done when GET /v2/theme "
                             "was answered, of %d read before it" % self.SIGNERS)


def concurrent_signins(port, names, n):
    """n JSON sign-ins sent at once (a barrier after connecting), the k-th as names[k %
    len(names)] from address 198.51.100.(100 + k) (X-Forwarded-For: the server must trust
    127.0.0.1), so that no name or address has more than its share in flight; returns the
    Resps."""
    out = []
    lock = threading.Lock()
    go = threading.Barrier(n, timeout=30)

    def one(k):
        c = http.client.HTTPConnection(HOST, port, timeout=120)
        try:
            c.connect()
            go.wait()
            body = json.dumps({"username": names[k % len(names)], "password": PASSWORD})
            c.request("POST", "/signin", body, {"Content-Type": JSON_T,
                                                "X-Forwarded-For": "198.51.100.%d" % (100 + k)})
            r = c.getresponse()
            resp = Resp("POST", "/signin", body, r.status, r.getheaders(), r.read())
        finally:
            c.close()
        with lock:
            out.append(resp)

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=150)
    return out


class HashQueueFlags(OwnServer):
    """--pwhash-concurrency 1 hashing and --pwhash-queue 1 waiting: the rest get 503
    (three users from six addresses: no name or address is over its share in flight)."""
    server_args = ("--pwhash-concurrency", "1", "--pwhash-queue", "1",
                   "--trusted-proxies", "127.0.0.1")
    server_env = {"EVENTD_TEST_PWHASH_FAST": "0"}  # hashes slow enough to queue

    def test_the_flags_bound_the_hashing_queue(self):
        names = [register(self.port())[1] for _ in range(3)]
        out = concurrent_signins(self.port(), names, 6)
        self.assertEqual(sorted(r.status for r in out), [200, 200, 503, 503, 503, 503],
                         [r.describe() for r in out])

    def test_beyond_the_hashing_queue_is_503_unavailable_with_retry_after_1(self):
        # (the defaults, 2 + 64, would need 67 hashes at once: slow on 2 cores)
        names = [register(self.port())[1] for _ in range(2)]
        refused = [r for r in concurrent_signins(self.port(), names, 4) if r.status == 503]
        self.assertTrue(refused, "no 503 with 4 sign-ins at once")
        self.assertEqual(refused[0].header("retry-after"), "1", refused[0].describe())
        self.assertEqual(refused[0].error()["Code"], "unavailable", refused[0].describe())


class ConcurrentRegister(OwnServer):
    def test_one_name_registered_concurrently_is_created_once(self):
        name = uname("race")
        out = []

        def reg():
            out.append(call(self.port(), "POST", "/register",
                            json.dumps({"username": name, "password": PASSWORD}).encode(),
                            {"Content-Type": JSON_T}).status)

        threads = [threading.Thread(target=reg) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        self.assertEqual(sorted(out), [201, 409, 409, 409])


if __name__ == "__main__":
    unittest.main()
