#!/usr/bin/env python3
"""The account site's sessions, CSRF and passwords against issue 17's findings
(docs/ACCOUNTS.md, docs/SECURITY.md), black box:

- the __Host- cookie prefix with --cookie-secure;
- the pre-sign-in CSRF token bound to the server secret (a planted cookie with
  a matching form value fails), the secret's file (0600, kept over restarts,
  shared between servers);
- Origin and Sec-Fetch-Site on every form post;
- the password policy (the username, common passwords, repeats and runs);
- the password change (current password, policy, sessions end, throttled);
- sign out everywhere; a revoked key leaves the sessions alone (a decision);
- the session check costs the same for a known and an unknown name;
- Cache-Control: no-store on the JSON answer that carries a new key.

Every test that makes a password check fail has a server of its own: the
sign-in throttle counts per address, and every test speaks from 127.0.0.1."""

import http.client
import json
import os
import re
import socket
import statistics
import sys
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from apiclient import ErrorAsserts, ManagedDir, run_expect_exit  # noqa: E402
from test_accounts import (CSRF_COOKIE, FORM, JSON_T, PASSWORD, SESSION, Browser,  # noqa: E402
                           call, hidden_csrf, parse_set_cookies, register, signin_json, uname,
                           v2_theme)

NEW_PASSWORD = "a brand new passphrase"
HOST_SESSION = "__Host-" + SESSION
HOST_CSRF = "__Host-" + CSRF_COOKIE
PLANTED = "plantedCSRFcookiePLANTEDcsrfCOOKIEplantedCS"  # 43 characters, never issued


def form_body(fields):
    return urllib.parse.urlencode(fields).encode()


def post_form(b, path, fields, headers=None):
    return b.send("POST", path, form_body(fields), FORM, headers=headers)


def user_api_json(port, cookie_value, name=SESSION):
    return call(port, "GET", "/user/api",
                headers={"Cookie": "%s=%s" % (name, cookie_value), "Accept": JSON_T})


class Base(ErrorAsserts, unittest.TestCase):
    server_args = ()

    @classmethod
    def setUpClass(cls):
        cls.srv = harness.Server(extra_args=list(cls.server_args))
        cls.srv.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.srv.__exit__(None, None, None)

    @property
    def port(self):
        return self.srv.port

    def assertStatus(self, r, status):
        self.assertEqual(r.status, status, r.describe())

    def signed_in(self, password=PASSWORD):
        """A Browser signed in as a new user (JSON registration); returns (browser, name)."""
        return register(self.port, password=password)

    def key_from_a_stolen_session(self):
        """A signed-in user and a key somebody issued with a copy of its session cookie,
        checked to work: (browser, name, key)."""
        b, name = self.signed_in()
        thief = Browser(self.port)
        thief.jar[SESSION] = b.jar[SESSION]
        stolen = thief.issue_key_json()
        self.assertEqual(v2_theme(self.port, name, stolen), 200)
        return b, name, stolen


# ---------------------------------------------------------------------------
class HostPrefix(Base):
    """With --cookie-secure both cookies are __Host- prefixed (Secure, Path=/, no Domain)."""
    server_args = ("--cookie-secure",)

    def test_session_cookie_is_host_prefixed_secure_path_root_no_domain(self):
        r = Browser(self.port).post_json("/register", {"username": uname(), "password": PASSWORD})
        self.assertStatus(r, 201)
        cookies = parse_set_cookies(r)
        self.assertIn(HOST_SESSION, cookies, r.describe())
        attrs = cookies[HOST_SESSION][1]
        self.assertIn("secure", attrs)
        self.assertEqual(attrs.get("path"), "/")
        self.assertNotIn("domain", attrs)

    def test_csrf_cookie_is_host_prefixed_secure_path_root_no_domain(self):
        r = Browser(self.port).get("/signin")
        cookies = parse_set_cookies(r)
        self.assertIn(HOST_CSRF, cookies, r.describe())
        attrs = cookies[HOST_CSRF][1]
        self.assertIn("secure", attrs)
        self.assertEqual(attrs.get("path"), "/")
        self.assertNotIn("domain", attrs)

    def test_the_session_under_the_unprefixed_name_is_not_a_session(self):
        b, _ = self.signed_in()
        self.assertStatus(user_api_json(self.port, b.jar[HOST_SESSION], HOST_SESSION), 200)
        self.assertStatus(user_api_json(self.port, b.jar[HOST_SESSION], SESSION), 401)

    def test_the_secure_form_flow_signs_in(self):
        _, name = self.signed_in()
        b = Browser(self.port)
        self.assertStatus(b.signin_form(name), 303)
        self.assertIn(HOST_SESSION, b.jar)


class PlainNames(Base):
    def test_a_session_cookie_named_twice_is_no_session(self):
        """HAProxy reads a quoted value as one cookie where eventd reads three
        (review, 2026-11-29): it placed this by "other" while eventd took the
        first session. Named twice, it is no session, as HAProxy's own rule."""
        b, _ = self.signed_in()
        mine = b.jar[SESSION]
        self.assertStatus(user_api_json(self.port, mine), 200)
        for cookie in ('a="x;%s=%s;y"; %s=other:zz' % (SESSION, mine, SESSION),
                       "%s=%s; %s=%s" % (SESSION, mine, SESSION, mine),
                       "%s=other:zz; %s=%s" % (SESSION, SESSION, mine)):
            with self.subTest(cookie=cookie):
                r = call(self.port, "GET", "/user/api", headers={"Cookie": cookie, "Accept": JSON_T})
                self.assertStatus(r, 401)
        r = call(self.port, "GET", "/user/api",
                 headers={"Cookie": "a=1; %s=%s; b=2" % (SESSION, mine), "Accept": JSON_T})
        self.assertStatus(r, 200)

    def test_without_cookie_secure_the_names_are_unprefixed(self):
        r = Browser(self.port).get("/register")
        self.assertIn(CSRF_COOKIE, parse_set_cookies(r), r.describe())
        self.assertNotIn(HOST_CSRF, parse_set_cookies(r), r.describe())


# ---------------------------------------------------------------------------
class CsrfSecret(Base):
    def test_a_planted_cookie_with_a_matching_form_value_is_403(self):
        b = Browser(self.port)
        b.jar[CSRF_COOKIE] = PLANTED
        name = uname()
        r = post_form(b, "/register", {"username": name, "password": PASSWORD,
                                       "password_confirm": PASSWORD, "csrf": PLANTED})
        self.assertStatus(r, 403)
        self.assertStatus(signin_json(self.port, name), 401)

    def test_a_planted_cookie_with_a_matching_json_free_signin_is_403(self):
        _, name = self.signed_in()
        b = Browser(self.port)
        b.jar[CSRF_COOKIE] = PLANTED
        r = post_form(b, "/signin", {"username": name, "password": PASSWORD, "csrf": PLANTED})
        self.assertStatus(r, 403)
        self.assertNotIn(SESSION, b.jar)

    def test_a_form_token_with_another_cookie_is_403(self):
        a, b = Browser(self.port), Browser(self.port)
        token_a = a.page_csrf("/register")
        b.page_csrf("/register")
        r = post_form(b, "/register", {"username": uname(), "password": PASSWORD,
                                       "password_confirm": PASSWORD, "csrf": token_a})
        self.assertStatus(r, 403)

    def test_a_second_csrf_cookie_after_the_first_keeps_forms_working(self):
        """A browser may hold a second one it cannot replace (another Path or
        Domain): the first, the one the server set, still counts."""
        b = Browser(self.port)
        token = b.page_csrf("/register")
        cookie = "%s=%s; %s=%s" % (CSRF_COOKIE, b.jar[CSRF_COOKIE], CSRF_COOKIE, PLANTED)
        body = form_body({"username": uname(), "password": PASSWORD,
                          "password_confirm": PASSWORD, "csrf": token})
        r = b.send("POST", "/register", body, FORM, headers={"Cookie": cookie}, jar=False)
        self.assertStatus(r, 303)

    def test_the_issued_pair_registers(self):
        self.assertStatus(Browser(self.port).register_form(uname()), 303)

    def test_the_secret_file_is_made_0600_with_64_hex_digits(self):
        path = os.path.join(self.srv.data_dir, "site.key")
        st = os.stat(path)
        self.assertEqual(st.st_mode & 0o777, 0o600)
        with open(path) as f:
            self.assertRegex(f.read(), r"^[0-9a-f]{64}\n$")


class CsrfSecretFiles(ErrorAsserts, unittest.TestCase):
    def setUp(self):
        self.d = ManagedDir(prefix="eventd-bb-site-")
        self.addCleanup(self.d.cleanup)

    def test_an_open_form_survives_a_restart(self):
        b = Browser(0)
        with harness.Server(data_dir=self.d.path) as srv:
            b.port = srv.port
            token = b.page_csrf("/register")
        with harness.Server(data_dir=self.d.path) as srv:
            b.port = srv.port
            r = post_form(b, "/register", {"username": uname(), "password": PASSWORD,
                                           "password_confirm": PASSWORD, "csrf": token})
            self.assertEqual(r.status, 303, r.describe())

    def test_servers_sharing_a_secret_file_accept_each_others_forms(self):
        key = os.path.join(self.d.path, "shared.key")
        with open(key, "w") as f:
            f.write("ab" * 32 + "\n")
        os.chmod(key, 0o600)
        args = ["--site-secret-file", key]
        with harness.Server(extra_args=args) as one, harness.Server(extra_args=args) as two:
            b = Browser(one.port)
            token = b.page_csrf("/register")
            b.port = two.port
            r = post_form(b, "/register", {"username": uname(), "password": PASSWORD,
                                           "password_confirm": PASSWORD, "csrf": token})
            self.assertEqual(r.status, 303, r.describe())

    def test_a_secret_file_that_is_not_64_hex_digits_stops_the_start(self):
        key = os.path.join(self.d.path, "bad.key")
        with open(key, "w") as f:
            f.write("not a secret\n")
        data = os.path.join(self.d.path, "data")
        rc, _, err, _ = run_expect_exit(["serve", "--listen", "127.0.0.1:0", "--data", data,
                                         "--no-demo-user", "--site-secret-file", key])
        self.assertEqual(rc, 2, err)
        self.assertIn("not 64 hex digits", err)


# ---------------------------------------------------------------------------
class OriginCheck(Base):
    def other_origin(self):
        return "http://127.0.0.1:%d" % (self.port + 1 if self.port < 65535 else self.port - 1)

    def signin_with(self, headers):
        _, name = self.signed_in()
        b = Browser(self.port)
        token = b.page_csrf("/signin")
        r = post_form(b, "/signin", {"username": name, "password": PASSWORD, "csrf": token},
                      headers)
        return b, r

    def test_signin_from_another_port_is_403(self):
        b, r = self.signin_with({"Origin": self.other_origin()})
        self.assertStatus(r, 403)
        self.assertNotIn(SESSION, b.jar)

    def test_signin_with_sec_fetch_site_cross_site_is_403(self):
        _, r = self.signin_with({"Sec-Fetch-Site": "cross-site"})
        self.assertStatus(r, 403)

    def test_signin_with_sec_fetch_site_same_site_is_403(self):
        _, r = self.signin_with({"Sec-Fetch-Site": "same-site"})
        self.assertStatus(r, 403)

    def test_signin_with_origin_null_is_403(self):
        _, r = self.signin_with({"Origin": "null"})
        self.assertStatus(r, 403)

    def test_signin_with_origin_null_and_sec_fetch_site_same_origin_is_303(self):
        # What a browser sends for the site's own form (Referrer-Policy: no-referrer).
        _, r = self.signin_with({"Origin": "null", "Sec-Fetch-Site": "same-origin"})
        self.assertStatus(r, 303)

    def test_signin_with_origin_null_and_sec_fetch_site_cross_site_is_403(self):
        _, r = self.signin_with({"Origin": "null", "Sec-Fetch-Site": "cross-site"})
        self.assertStatus(r, 403)

    def test_signin_from_the_same_origin_is_303(self):
        _, r = self.signin_with({"Origin": "http://127.0.0.1:%d" % self.port,
                                 "Sec-Fetch-Site": "same-origin"})
        self.assertStatus(r, 303)

    def test_register_from_another_port_is_403_and_creates_nothing(self):
        b, name = Browser(self.port), uname()
        token = b.page_csrf("/register")
        r = post_form(b, "/register", {"username": name, "password": PASSWORD,
                                       "password_confirm": PASSWORD, "csrf": token},
                      {"Origin": self.other_origin()})
        self.assertStatus(r, 403)
        self.assertStatus(signin_json(self.port, name), 401)

    def test_key_post_from_another_port_is_403_and_issues_nothing(self):
        b, _ = self.signed_in()
        token = b.page_csrf("/user/api")
        r = post_form(b, "/user/api/key", {"csrf": token}, {"Origin": self.other_origin()})
        self.assertStatus(r, 403)
        self.assertIs(b.get("/user/api", accept=JSON_T).result()["HasKey"], False)

    def test_signout_from_another_site_is_403_and_keeps_the_session(self):
        b, _ = self.signed_in()
        token = b.page_csrf("/user/api")
        r = post_form(b, "/signout", {"csrf": token}, {"Sec-Fetch-Site": "cross-site"})
        self.assertStatus(r, 403)
        self.assertStatus(b.get("/user/api", accept=JSON_T), 200)

    def test_json_post_from_another_origin_is_403_csrf(self):
        b, _ = self.signed_in()
        r = b.send("POST", "/user/api/key", b"{}", JSON_T, headers={"Origin": "http://evil.test"})
        self.assertErr(r, 403, "csrf", "csrf")


class ConfiguredOrigin(Base):
    server_args = ("--site-origin", "https://accounts.example.test")

    def register_with(self, origin):
        b = Browser(self.port)
        token = b.page_csrf("/register")
        return post_form(b, "/register", {"username": uname(), "password": PASSWORD,
                                          "password_confirm": PASSWORD, "csrf": token},
                         {"Origin": origin})

    def test_the_configured_origin_is_303(self):
        self.assertStatus(self.register_with("https://accounts.example.test"), 303)

    def test_the_hosts_own_origin_is_403_when_another_is_configured(self):
        self.assertStatus(self.register_with("http://127.0.0.1:%d" % self.port), 403)


class OriginSetting(unittest.TestCase):
    """A bad --site-origin or --trusted-proxies stops the start with status 2,
    naming the setting, before the data directory is created or replayed."""

    def refused(self, *flags):
        d = ManagedDir(prefix="eventd-bb-site-")
        self.addCleanup(d.cleanup)
        data = os.path.join(d.path, "new")
        rc, _, err, _ = run_expect_exit(["serve", "--listen", "127.0.0.1:0", "--data", data,
                                         "--no-demo-user"] + list(flags))
        self.assertEqual(rc, 2, err)
        self.assertFalse(os.path.exists(data), "the data directory was created")
        return err

    def test_a_site_origin_with_a_path_stops_the_start(self):
        self.assertIn("--site-origin", self.refused("--site-origin", "https://x.test/a"))

    def test_a_trusted_proxy_that_is_no_address_stops_the_start(self):
        self.assertIn("--trusted-proxies", self.refused("--trusted-proxies", "10.0.0.0/8,bogus"))


# ---------------------------------------------------------------------------
class PasswordPolicy(Base):
    def register_json(self, name, password):
        return Browser(self.port).post_json("/register", {"username": name, "password": password})

    def test_the_username_as_password_is_400_naming_password(self):
        name = "policy-%d" % os.getpid()
        self.assertErr(self.register_json(name, name), 400, "invalid_field", "password")

    def test_the_username_in_other_case_is_400(self):
        name = "Casey-policy-%d" % os.getpid()
        self.assertErr(self.register_json(name, name.upper()), 400, "invalid_field", "password")

    def test_a_password_containing_the_username_is_400(self):
        name = uname("mallory")
        self.assertErr(self.register_json(name, "my " + name + " pw"), 400, "invalid_field",
                       "password")

    def test_a_common_password_is_400(self):
        self.assertErr(self.register_json(uname(), "password123"), 400, "invalid_field",
                       "password")

    def test_qwertyuiop_is_400(self):
        self.assertErr(self.register_json(uname(), "qwertyuiop"), 400, "invalid_field",
                       "password")

    def test_1234567890_is_400(self):
        self.assertErr(self.register_json(uname(), "1234567890"), 400, "invalid_field",
                       "password")

    def test_one_character_repeated_is_400(self):
        self.assertErr(self.register_json(uname(), "aaaaaaaaaa"), 400, "invalid_field",
                       "password")

    def test_a_common_password_on_the_form_is_400_and_says_why(self):
        b = Browser(self.port)
        r = b.register_form(uname(), password="Password123")
        self.assertStatus(r, 400)
        self.assertIn("most common passwords", r.body.decode())


# ---------------------------------------------------------------------------
class PasswordChange(Base):
    def change_json(self, b, current, new, **more):
        body = dict({"current_password": current, "password": new}, **more)
        return b.post_json("/user/password", body)

    def test_change_is_200_and_the_new_password_signs_in(self):
        b, name = self.signed_in()
        self.assertStatus(self.change_json(b, PASSWORD, NEW_PASSWORD), 200)
        self.assertStatus(signin_json(self.port, name, NEW_PASSWORD), 200)

    def test_the_old_password_no_longer_signs_in(self):
        b, name = self.signed_in()
        self.assertStatus(self.change_json(b, PASSWORD, NEW_PASSWORD), 200)
        self.assertStatus(signin_json(self.port, name, PASSWORD), 401)

    def test_other_sessions_end(self):
        b, name = self.signed_in()
        other = Browser(self.port)
        self.assertStatus(other.post_json("/signin", {"username": name, "password": PASSWORD}),
                          200)
        self.assertStatus(self.change_json(b, PASSWORD, NEW_PASSWORD), 200)
        self.assertStatus(other.get("/user/api", accept=JSON_T), 401)

    def test_the_changing_client_gets_a_new_session_and_the_old_cookie_ends(self):
        b, _ = self.signed_in()
        old = b.jar[SESSION]
        self.assertStatus(self.change_json(b, PASSWORD, NEW_PASSWORD), 200)
        self.assertNotEqual(b.jar[SESSION], old)
        self.assertStatus(b.get("/user/api", accept=JSON_T), 200)
        self.assertStatus(user_api_json(self.port, old), 401)

    def test_the_api_key_is_revoked(self):
        # A key issued from a stolen session must not outlive the owner's recovery.
        b, name, stolen = self.key_from_a_stolen_session()
        self.assertStatus(self.change_json(b, PASSWORD, NEW_PASSWORD), 200)
        self.assertEqual(v2_theme(self.port, name, stolen), 401)
        self.assertIs(b.get("/user/api", accept=JSON_T).result()["HasKey"], False)
        self.assertEqual(v2_theme(self.port, name, b.issue_key_json()), 200)

    def test_a_weak_new_password_is_400_naming_password(self):
        b, name = self.signed_in()
        self.assertErr(self.change_json(b, PASSWORD, name), 400, "invalid_field", "password")

    def test_a_mismatched_confirmation_is_400_naming_password_confirm(self):
        b, _ = self.signed_in()
        r = self.change_json(b, PASSWORD, NEW_PASSWORD, password_confirm="something else!")
        self.assertErr(r, 400, "invalid_field", "password_confirm")

    def test_without_the_current_password_is_400_naming_current_password(self):
        b, _ = self.signed_in()
        r = b.post_json("/user/password", {"password": NEW_PASSWORD})
        self.assertErr(r, 400, "invalid_field", "current_password")

    def test_without_a_session_is_401(self):
        r = Browser(self.port).post_json("/user/password", {"current_password": PASSWORD,
                                                            "password": NEW_PASSWORD})
        self.assertErr(r, 401, "unauthorized")

    def test_the_form_page_is_200_with_the_fields(self):
        b, _ = self.signed_in()
        r = b.get("/user/password")
        self.assertStatus(r, 200)
        for field in ("current_password", "password", "password_confirm", "csrf"):
            self.assertRegex(r.body.decode(), r'name="%s"' % field)

    def test_the_form_page_without_a_session_is_303_to_signin(self):
        r = Browser(self.port).get("/user/password")
        self.assertStatus(r, 303)
        self.assertEqual(r.header("location"), "/signin")

    def test_the_form_post_is_303_to_user_api(self):
        b, name = self.signed_in()
        token = b.page_csrf("/user/password")
        r = post_form(b, "/user/password", {"current_password": PASSWORD,
                                            "password": NEW_PASSWORD,
                                            "password_confirm": NEW_PASSWORD, "csrf": token})
        self.assertStatus(r, 303)
        self.assertEqual(r.header("location"), "/user/api")
        self.assertStatus(signin_json(self.port, name, NEW_PASSWORD), 200)

    def test_the_form_post_without_csrf_is_403_and_changes_nothing(self):
        b, name = self.signed_in()
        r = post_form(b, "/user/password", {"current_password": PASSWORD,
                                            "password": NEW_PASSWORD,
                                            "password_confirm": NEW_PASSWORD})
        self.assertStatus(r, 403)
        self.assertStatus(signin_json(self.port, name, PASSWORD), 200)


class PasswordChangeWrongCurrent(Base):
    def test_a_wrong_current_password_is_400_and_changes_nothing(self):
        b, name = self.signed_in()
        r = b.post_json("/user/password", {"current_password": "not the password",
                                           "password": NEW_PASSWORD})
        self.assertErr(r, 400, "invalid_field", "current_password")
        self.assertStatus(signin_json(self.port, name, PASSWORD), 200)


class FormAgainAfterAFailure(Base):
    """A form shown again after a failure (review, 2026-11-30): a wrong password, a
    username the server never gives out, a taken name. The page is the form to try
    again with, so its hidden csrf field must be a token that passes: it was empty,
    and the corrected post from it was 403 csrf (the person had to reload the page)."""

    def again(self, b, path, fields, status):
        token = b.page_csrf(path)
        r = b.form(path, dict(fields, csrf=token))
        self.assertStatus(r, status)
        again = hidden_csrf(r.body)
        self.assertTrue(again, "the form shown again has no csrf token: %r" % again)
        return again

    def test_a_wrong_password_shows_a_form_that_signs_in(self):
        _, name = self.signed_in()
        b = Browser(self.port)
        token = self.again(b, "/signin", {"username": name, "password": "not the password"}, 401)
        r = b.form("/signin", {"username": name, "password": PASSWORD, "csrf": token})
        self.assertStatus(r, 303)

    def test_a_username_never_given_out_shows_a_form_that_signs_in(self):
        _, name = self.signed_in()
        b = Browser(self.port)
        token = self.again(b, "/signin", {"username": name + " ", "password": PASSWORD}, 401)
        r = b.form("/signin", {"username": name, "password": PASSWORD, "csrf": token})
        self.assertStatus(r, 303)

    def test_a_taken_name_shows_a_form_that_registers(self):
        _, name = self.signed_in()
        b = Browser(self.port)
        token = self.again(b, "/register", {"username": name, "password": PASSWORD,
                                            "password_confirm": PASSWORD}, 409)
        r = b.form("/register", {"username": name + "x", "password": PASSWORD,
                                 "password_confirm": PASSWORD, "csrf": token})
        self.assertStatus(r, 303)


class PasswordChangeNotLockedByStrangers(Base):
    def signin_from(self, source, name):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10,
                                       source_address=(source, 0))
        try:
            c.request("POST", "/signin", json.dumps({"username": name, "password": "guess xyz"}),
                      {"Content-Type": JSON_T})
            r = c.getresponse()
            r.read()
            return r.status
        finally:
            c.close()

    def test_signins_as_the_changes_own_throttle_key_never_reach_it(self):
        # The change counts under "\x01" + name: a sign-in as that string (a name the
        # server never gives out) is answered as a wrong password before any throttle.
        b, name = self.signed_in()
        statuses = [self.signin_from("127.0.0.%d" % (2 + i), "\x01" + name) for i in range(8)]
        self.assertEqual(statuses, [401] * 8)
        r = b.post_json("/user/password", {"current_password": PASSWORD,
                                           "password": NEW_PASSWORD})
        self.assertStatus(r, 200)

    def test_failed_signins_of_the_name_elsewhere_never_throttle_the_owners_change(self):
        # Anyone can fail sign-ins on a name (its throttle then answers 429 to everyone
        # signing in as it); the signed-in owner's password change is counted apart.
        b, name = self.signed_in()
        statuses = []
        for i in range(7):
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10,
                                           source_address=("127.0.0.2", 0))
            try:
                c.request("POST", "/signin", json.dumps({"username": name,
                                                         "password": "guess %d xyz" % i}),
                          {"Content-Type": JSON_T})
                r = c.getresponse()
                r.read()
                statuses.append(r.status)
            finally:
                c.close()
        self.assertEqual(statuses[-1], 429, statuses)  # the name is throttled
        r = b.post_json("/user/password", {"current_password": PASSWORD,
                                           "password": NEW_PASSWORD})
        self.assertStatus(r, 200)


class PasswordChangeThrottled(Base):
    def test_the_sixth_wrong_current_password_is_429_with_retry_after(self):
        b, _ = self.signed_in()
        body = {"current_password": "not the password", "password": NEW_PASSWORD}
        for i in range(5):
            self.assertErr(b.post_json("/user/password", body), 400, "invalid_field",
                           "current_password")
        r = b.post_json("/user/password", body)
        self.assertErr(r, 429, "too_many_requests")
        self.assertRegex(r.header("retry-after", ""), r"^[1-9][0-9]*$")


# ---------------------------------------------------------------------------
class SignOutEverywhere(Base):
    def two_sessions(self):
        b, name = self.signed_in()
        other = Browser(self.port)
        self.assertStatus(other.post_json("/signin", {"username": name, "password": PASSWORD}),
                          200)
        return b, other

    def test_json_is_204_and_ends_every_session(self):
        b, other = self.two_sessions()
        old = b.jar[SESSION]
        self.assertStatus(b.post_json("/signout/all"), 204)
        self.assertStatus(other.get("/user/api", accept=JSON_T), 401)
        self.assertStatus(user_api_json(self.port, old), 401)

    def test_the_form_is_303_to_signin_and_ends_the_other_session(self):
        b, other = self.two_sessions()
        token = b.page_csrf("/user/api")
        r = post_form(b, "/signout/all", {"csrf": token})
        self.assertStatus(r, 303)
        self.assertEqual(r.header("location"), "/signin")
        self.assertStatus(other.get("/user/api", accept=JSON_T), 401)

    def test_the_form_without_csrf_is_403_and_ends_nothing(self):
        b, other = self.two_sessions()
        self.assertStatus(post_form(b, "/signout/all", {}), 403)
        self.assertStatus(other.get("/user/api", accept=JSON_T), 200)

    def test_the_password_still_signs_in_afterwards(self):
        b, name = self.signed_in()
        self.assertStatus(b.post_json("/signout/all"), 204)
        self.assertStatus(signin_json(self.port, name), 200)

    def test_the_api_key_is_revoked(self):
        # A key issued from a stolen session must not outlive the owner's recovery.
        b, name, stolen = self.key_from_a_stolen_session()
        self.assertStatus(b.post_json("/signout/all"), 204)
        self.assertEqual(v2_theme(self.port, name, stolen), 401)
        b2 = Browser(self.port)
        self.assertStatus(b2.post_json("/signin", {"username": name, "password": PASSWORD}), 200)
        self.assertIs(b2.get("/user/api", accept=JSON_T).result()["HasKey"], False)


class KeyRevocationAndSessions(Base):
    def test_revoking_the_key_leaves_the_session_signed_in(self):
        # A decision (docs/ACCOUNTS.md): sessions come from the password, not the key.
        b, _ = self.signed_in()
        b.issue_key_json()
        self.assertStatus(b.post_json("/user/api/revoke"), 204)
        self.assertStatus(b.get("/user/api", accept=JSON_T), 200)


class NoStore(Base):
    def test_the_json_key_answer_is_no_store(self):
        b, _ = self.signed_in()
        r = b.post_json("/user/api/key")
        self.assertStatus(r, 200)
        self.assertEqual(r.header("cache-control"), "no-store", r.describe())

    def test_the_page_with_the_key_is_no_store(self):
        b, _ = self.signed_in()
        token = b.page_csrf("/user/api")
        r = post_form(b, "/user/api/key", {"csrf": token})
        self.assertStatus(r, 200)
        self.assertEqual(r.header("cache-control"), "no-store", r.describe())


# ---------------------------------------------------------------------------
class SessionDecoy(Base):
    """The server's own time per request (the /metrics latency sum, in ns) for
    a session cookie of a known name with a wrong token and of unknown names:
    blocks of requests on one keep-alive connection, interleaved, medians of
    the block means. Without the decoy an unknown name took about half the
    time (1.4 us of 2.8 us); with it the two are within a few percent."""

    BLOCK = 200
    BLOCKS = 15
    ATTEMPTS = 3  # a timing test on a shared machine: a real difference fails all three

    def setUp(self):
        self.b, self.name = self.signed_in()
        for _ in range(7):  # a full set of sessions: the most work a known name costs
            self.assertStatus(signin_json(self.port, self.name), 200)
        self.sock = socket.create_connection((harness.HOST, self.port), timeout=10)
        self.addCleanup(self.sock.close)
        self.buf = b""

    def get(self, path, cookie=None):
        head = "GET %s HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n" % path
        if cookie:
            head += "Cookie: %s=%s\r\n" % (SESSION, cookie)
        self.sock.sendall((head + "\r\n").encode())
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError("connection closed")
            self.buf += chunk
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        n = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        while len(rest) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError("connection closed")
            rest += chunk
        self.buf = rest[n:]
        return head.split(b" ", 2)[1], rest[:n]

    def server_ns(self):
        _, body = self.get("/metrics")
        m = re.search(rb"^eventd_http_request_duration_seconds_sum (\S+)", body, re.M)
        return float(m.group(1)) * 1e9

    def medians(self, attempt):
        known, unknown = [], []
        token = "A" * 43
        for blk in range(self.BLOCKS):
            for out, who in ((known, None), (unknown, "nobody-%d-%d" % (attempt, blk))):
                t0 = self.server_ns()
                for i in range(self.BLOCK):
                    status, _ = self.get("/user/api", "%s:%s" % (
                        self.name if who is None else "%s-%d" % (who, i), token))
                    self.assertEqual(status, b"401")
                out.append((self.server_ns() - t0) / self.BLOCK)
        return statistics.median(known), statistics.median(unknown)

    def test_a_known_and_an_unknown_name_cost_the_same(self):
        seen = []
        for attempt in range(self.ATTEMPTS):
            known, unknown = self.medians(attempt)
            seen.append((round(known), round(unknown)))
            if 0.85 <= unknown / known <= 1.15:
                return
        self.fail("server ns per request (known name, unknown name) differ by more than 15%%: %s"
                  % seen)


if __name__ == "__main__":
    unittest.main()
