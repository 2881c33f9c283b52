#!/usr/bin/env python3
"""Credentials, black box (issue 17's informational items and revocation):

- Cache-Control: no-store on every answer that carries a secret: the admin
  API's user creation, key rotation and admin token creation (on the socket
  and on the listener), and the site's JSON key answer.
- One whitespace rule for Basic and Bearer: spaces or tabs after the
  credentials are no part of them, for an API key and an admin token alike.
- Revocation means now: a request whose key (or admin token, or session) is
  rotated, revoked or removed after its headers came and before its body is
  complete is 401 and changes nothing.  The tests make that order certain:
  the request asks "Expect: 100-continue", the "100 Continue" comes only
  once the server has checked the headers, then the key is changed (its
  answer has come), then the body is sent.
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from apiclient import ManagedDir, run_cli  # noqa: E402
from harness import auth_header, build_request, connect, read_response, send_raw  # noqa: E402
from test_admin import sock_call  # noqa: E402

PASSWORD = "correct horse battery staple 7"
JSON_T = "application/json"
_n = [0]


def uname(prefix="cred"):
    _n[0] += 1
    return "%s%d-%d" % (prefix, os.getpid() % 10000, _n[0])


def last_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


D = None
SRV = None
TOKEN = None


def setUpModule():
    global D, SRV, TOKEN
    D = ManagedDir(prefix="eventd-bb-cred-")
    cp = run_cli(["admin", "token", "ops", "--data", D.path], timeout=20.0)
    if cp.returncode != 0:
        D.cleanup()
        raise AssertionError("eventd admin token ops: %r %r" % (cp.stdout, cp.stderr))
    TOKEN = last_line(cp.stdout)
    SRV = harness.Server(data_dir=D.path, extra_args=["--admin-on-listener"])
    SRV.__enter__()
    if not harness.wait_until(lambda: os.path.exists(os.path.join(D.path, "admin.sock")), 5):
        SRV.__exit__(None, None, None)
        D.cleanup()
        raise AssertionError("no admin.sock; stderr:\n%s" % SRV.stderr_text())


def tearDownModule():
    if SRV is not None:
        SRV.__exit__(None, None, None)
    if D is not None:
        D.cleanup()


class Base(unittest.TestCase):
    def admin(self, method, path):
        return sock_call(D.path, method, path)

    def new_user(self):
        name = uname()
        r = self.admin("PUT", "/admin/users/" + name)
        self.assertEqual(r.status, 201, r.describe())
        return name, r.result()["APIKey"]

    def api(self, method, path, name, key, body=None):
        return harness.request(SRV.port, method, path, body,
                               {"Authorization": auth_header(name, key)})

    def register(self):
        """A site user signed in with JSON; returns (name, session cookie header)."""
        name = uname("site")
        r = harness.request(SRV.port, "POST", "/register",
                            {"username": name, "password": PASSWORD})
        self.assertEqual(r.status, 201, r)
        cookies = [v.split(";")[0] for k, v in r.header_list
                   if k.lower() == "set-cookie" and v.startswith("eventd_session=")]
        self.assertEqual(len(cookies), 1, r)
        return name, cookies[0]

    def site_json(self, path, cookie):
        return harness.request(SRV.port, "POST", path, b"{}",
                               {"Cookie": cookie, "Content-Type": JSON_T})


class NoStore(Base):
    def test_admin_user_creation_is_no_store(self):
        r = self.admin("PUT", "/admin/users/" + uname())
        self.assertEqual(r.status, 201, r.describe())
        self.assertEqual(r.header("cache-control"), "no-store", r.describe())

    def test_admin_key_rotation_is_no_store(self):
        name, _ = self.new_user()
        r = self.admin("POST", "/admin/users/%s/key" % name)
        self.assertEqual(r.status, 200, r.describe())
        self.assertEqual(r.header("cache-control"), "no-store", r.describe())

    def test_admin_token_creation_is_no_store(self):
        r = self.admin("PUT", "/admin/tokens/" + uname("tok"))
        self.assertEqual(r.status, 201, r.describe())
        self.assertEqual(r.header("cache-control"), "no-store", r.describe())

    def test_admin_token_replacement_is_no_store(self):
        name = uname("tok")
        self.assertEqual(self.admin("PUT", "/admin/tokens/" + name).status, 201)
        r = self.admin("PUT", "/admin/tokens/" + name)
        self.assertEqual(r.status, 200, r.describe())
        self.assertEqual(r.header("cache-control"), "no-store", r.describe())

    def test_admin_user_creation_on_the_listener_is_no_store(self):
        r = harness.request(SRV.port, "PUT", "/admin/users/" + uname(),
                            headers={"Authorization": "Bearer " + TOKEN})
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.header("cache-control"), "no-store", r)

    def test_site_json_key_answer_is_no_store(self):
        _, cookie = self.register()
        r = self.site_json("/user/api/key", cookie)
        self.assertEqual(r.status, 200, r)
        self.assertIn("APIKey", r.json()["Result"], r)
        self.assertEqual(r.header("cache-control"), "no-store", r)


class Whitespace(Base):
    """Spaces or tabs after the credentials: the same answer for Basic and Bearer."""

    def basic(self, suffix):
        name, key = self.new_user()
        return harness.request(SRV.port, "GET", "/v2/theme", headers={
            "Authorization": auth_header(name, key) + suffix})

    def bearer(self, value):
        return harness.request(SRV.port, "GET", "/admin/users",
                               headers={"Authorization": value})

    def test_basic_with_a_trailing_space_is_200(self):
        self.assertEqual(self.basic(" ").status, 200)

    def test_bearer_with_a_trailing_space_is_200(self):
        r = self.bearer("Bearer %s " % TOKEN)
        self.assertEqual(r.status, 200, r)

    def test_basic_with_a_trailing_tab_is_200(self):
        self.assertEqual(self.basic("\t").status, 200)

    def test_bearer_with_a_trailing_tab_is_200(self):
        r = self.bearer("Bearer %s\t" % TOKEN)
        self.assertEqual(r.status, 200, r)

    def test_bearer_with_spaces_before_the_token_is_200(self):
        r = self.bearer("bearer   %s" % TOKEN)
        self.assertEqual(r.status, 200, r)

    def test_bearer_with_a_space_inside_the_token_is_401(self):
        r = self.bearer("Bearer %s %s" % (TOKEN[:10], TOKEN[10:]))
        self.assertEqual(r.status, 401, r)

    def test_bearer_without_a_token_is_401(self):
        r = self.bearer("Bearer  ")
        self.assertEqual(r.status, 401, r)


class Revocation(Base):
    """A credential changed between the headers and the end of the body."""

    def start(self, method, path, body, headers):
        """Sends the head with Expect: 100-continue and waits for the 100: the server has
        checked the headers. Returns the socket; send the body with finish()."""
        h = dict(headers)
        h["Expect"] = "100-continue"
        h["Content-Length"] = str(len(body))
        h.setdefault("Content-Type", JSON_T)
        s = connect(SRV.port)
        send_raw(s, build_request(method, path, None, h))
        cont = read_response(s)
        self.assertEqual(cont.status, 100, "the headers were not accepted: %r" % cont)
        return s

    def finish(self, s, body):
        try:
            send_raw(s, body)
            return read_response(s)
        finally:
            s.close()

    def v2_start(self, method, path, name, key, obj):
        body = json.dumps(obj).encode()
        return self.start(method, path, body, {"Authorization": auth_header(name, key)}), body

    def rotate(self, name):
        r = self.admin("POST", "/admin/users/%s/key" % name)
        self.assertEqual(r.status, 200, r.describe())
        return r.result()["APIKey"]

    def themes(self, name, key):
        r = self.api("GET", "/v2/theme", name, key)
        self.assertEqual(r.status, 200, r)
        return r.json()["Result"]["Items"]

    def test_key_rotated_before_the_body_create_is_401_and_creates_nothing(self):
        name, key = self.new_user()
        s, body = self.v2_start("POST", "/v2/theme", name, key, {"Theme": {"Name": "late"}})
        new = self.rotate(name)
        r = self.finish(s, body)
        self.assertEqual(r.status, 401, r)
        self.assertEqual(r.json()["Error"]["Code"], "unauthorized", r)
        self.assertEqual(r.header("www-authenticate"), 'Basic realm="eventd"', r)
        self.assertEqual(self.themes(name, new), [])

    def test_other_users_key_rotated_before_the_body_create_is_200(self):
        # A user record changed, but not this request's: its key is still its user's.
        name, key = self.new_user()
        other, _ = self.new_user()
        s, body = self.v2_start("POST", "/v2/theme", name, key, {"Theme": {"Name": "goes on"}})
        self.rotate(other)
        r = self.finish(s, body)
        self.assertEqual(r.status, 200, r)
        self.assertEqual([t["Name"] for t in self.themes(name, key)], ["goes on"])

    def test_key_rotated_by_the_cli_before_the_body_create_is_401(self):
        name, key = self.new_user()
        s, body = self.v2_start("POST", "/v2/theme", name, key, {"Theme": {"Name": "late"}})
        cp = run_cli(["user", "rotate", name, "--data", D.path], timeout=20.0)
        self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
        r = self.finish(s, body)
        self.assertEqual(r.status, 401, r)
        self.assertEqual(self.themes(name, last_line(cp.stdout)), [])

    def test_key_rotated_before_the_body_update_is_401_and_changes_nothing(self):
        name, key = self.new_user()
        r = self.api("POST", "/v2/event", name, key, {"Event": {"Name": "before"}})
        self.assertEqual(r.status, 200, r)
        eid = r.json()["Result"]["ID"]
        s, body = self.v2_start("PUT", "/v2/event/%d" % eid, name, key,
                                {"Event": {"Name": "after"}})
        new = self.rotate(name)
        r = self.finish(s, body)
        self.assertEqual(r.status, 401, r)
        r = self.api("GET", "/v2/event/%d" % eid, name, new)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["Result"]["Name"], "before", r)

    def test_key_rotated_before_the_body_delete_is_401_and_deletes_nothing(self):
        name, key = self.new_user()
        r = self.api("POST", "/v2/address", name, key, {"Address": {"Name": "home"}})
        self.assertEqual(r.status, 200, r)
        aid = r.json()["Result"]["ID"]
        s = self.start("DELETE", "/v2/address/%d" % aid, b"{}",
                       {"Authorization": auth_header(name, key)})
        new = self.rotate(name)
        r = self.finish(s, b"{}")
        self.assertEqual(r.status, 401, r)
        self.assertEqual(self.api("GET", "/v2/address/%d" % aid, name, new).status, 200)

    def test_key_revoked_on_the_site_before_the_body_is_401_and_creates_nothing(self):
        name, cookie = self.register()
        r = self.site_json("/user/api/key", cookie)
        self.assertEqual(r.status, 200, r)
        key = r.json()["Result"]["APIKey"]
        s, body = self.v2_start("POST", "/v2/theme", name, key, {"Theme": {}})
        r = harness.request(SRV.port, "POST", "/user/api/revoke", b"{}",
                            {"Cookie": cookie, "Content-Type": JSON_T})
        self.assertEqual(r.status, 204, r)
        r = self.finish(s, body)
        self.assertEqual(r.status, 401, r)
        r = self.site_json("/user/api/key", cookie)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.themes(name, r.json()["Result"]["APIKey"]), [])

    def test_user_removed_before_the_body_is_401(self):
        name, key = self.new_user()
        s, body = self.v2_start("POST", "/v2/theme", name, key, {"Theme": {}})
        self.assertEqual(self.admin("DELETE", "/admin/users/" + name).status, 204)
        r = self.finish(s, body)
        self.assertEqual(r.status, 401, r)

    def test_after_the_401_the_connection_takes_only_the_new_key(self):
        # The connection's credential cache follows the rotation: the old key
        # is 401 on it, the new one 200.
        name, key = self.new_user()
        s, body = self.v2_start("POST", "/v2/theme", name, key, {"Theme": {}})
        new = self.rotate(name)
        try:
            send_raw(s, body)
            self.assertEqual(read_response(s).status, 401)
            send_raw(s, build_request("GET", "/v2/theme",
                                      headers={"Authorization": auth_header(name, key)}))
            self.assertEqual(read_response(s).status, 401)
            send_raw(s, build_request("GET", "/v2/theme",
                                      headers={"Authorization": auth_header(name, new)}))
            self.assertEqual(read_response(s).status, 200)
        finally:
            s.close()

    def test_a_header_one_byte_off_the_cached_one_is_401_at_every_position(self):
        # The connection caches the header that verified; a header of the same
        # length that differs in any one byte (so in the key, the name or the
        # scheme) is checked in full, and refused, never taken for the cached one.
        name, key = self.new_user()
        good = auth_header(name, key)
        s = connect(SRV.port)
        try:
            send_raw(s, build_request("GET", "/v2/theme", headers={"Authorization": good}))
            self.assertEqual(read_response(s).status, 200)
            for i in range(len(good)):
                c = good[i]
                bad = good[:i] + ("B" if c != "B" else "C") + good[i + 1:]
                send_raw(s, build_request("GET", "/v2/theme", headers={"Authorization": bad}))
                self.assertEqual(read_response(s).status, 401, (i, bad))
                send_raw(s, build_request("GET", "/v2/theme", headers={"Authorization": good}))
                self.assertEqual(read_response(s).status, 200, i)
        finally:
            s.close()

    def test_a_key_unchanged_meanwhile_still_writes(self):
        name, key = self.new_user()
        other, _ = self.new_user()
        s, body = self.v2_start("POST", "/v2/theme", name, key, {"Theme": {"Name": "kept"}})
        self.rotate(other)  # someone else's key changes: this request is not concerned
        r = self.finish(s, body)
        self.assertEqual(r.status, 200, r)
        self.assertEqual([t["Name"] for t in self.themes(name, key)], ["kept"])

    def test_admin_token_revoked_before_the_body_is_401_and_creates_nothing(self):
        tok = uname("tok")
        r = self.admin("PUT", "/admin/tokens/" + tok)
        self.assertEqual(r.status, 201, r.describe())
        victim = uname()
        s = self.start("PUT", "/admin/users/" + victim, b"{}",
                       {"Authorization": "Bearer " + r.result()["Token"]})
        self.assertEqual(self.admin("DELETE", "/admin/tokens/" + tok).status, 204)
        r = self.finish(s, b"{}")
        self.assertEqual(r.status, 401, r)
        self.assertEqual(r.header("www-authenticate"), 'Bearer realm="eventd-admin"', r)
        self.assertEqual(self.admin("GET", "/admin/users/" + victim).status, 404)

    def test_admin_token_replaced_before_the_body_is_401(self):
        tok = uname("tok")
        r = self.admin("PUT", "/admin/tokens/" + tok)
        self.assertEqual(r.status, 201, r.describe())
        victim = uname()
        s = self.start("PUT", "/admin/users/" + victim, b"{}",
                       {"Authorization": "Bearer " + r.result()["Token"]})
        self.assertEqual(self.admin("PUT", "/admin/tokens/" + tok).status, 200)
        r = self.finish(s, b"{}")
        self.assertEqual(r.status, 401, r)
        self.assertEqual(self.admin("GET", "/admin/users/" + victim).status, 404)

    def test_site_session_ended_before_the_body_is_401_and_issues_no_key(self):
        name, cookie = self.register()
        s = self.start("POST", "/user/api/key", b"{}", {"Cookie": cookie})
        r = harness.request(SRV.port, "POST", "/signout", b"{}",
                            {"Cookie": cookie, "Content-Type": JSON_T})
        self.assertEqual(r.status, 204, r)
        r = self.finish(s, b"{}")
        self.assertEqual(r.status, 401, r)
        r = self.admin("GET", "/admin/users/" + name)
        self.assertEqual(r.status, 200, r.describe())
        self.assertFalse(r.result()["HasKey"], r.describe())


def checks():
    """eventd_auth_checks_total by its label: how /v2 requests' credentials were settled."""
    r = harness.request(SRV.port, "GET", "/metrics")
    out = {}
    for line in r.body.decode().splitlines():
        if line.startswith('eventd_auth_checks_total{by="'):
            out[line.split('"')[1]] = int(float(line.split()[-1]))
    return out


class ServerWideCache(Base):
    """The server-wide credential cache (--auth-cache-entries, core/cred_cache.h): a header
    that verified on one connection is taken on another without the full check, as behind
    a balancer whose pooled connections carry many users; a rotated or revoked key, a removed
    user and a header one byte off are never taken from it."""

    def get(self, s, name, key, header=None):
        send_raw(s, build_request("GET", "/v2/theme",
                                  headers={"Authorization": header or auth_header(name, key)}))
        return read_response(s).status

    def fresh(self, name, key, header=None):
        """The status of a GET on a new connection, and what settled its credentials."""
        before = checks()
        s = connect(SRV.port)
        try:
            status = self.get(s, name, key, header)
        finally:
            s.close()
        after = checks()
        return status, [k for k in ("connection", "server_cache", "full")
                        if after.get(k, 0) != before.get(k, 0)]

    def test_a_header_that_verified_is_taken_on_another_connection(self):
        name, key = self.new_user()
        self.assertEqual(self.fresh(name, key), (200, ["full"]))
        self.assertEqual(self.fresh(name, key), (200, ["server_cache"]))

    def test_one_connection_carrying_two_users_in_turn_checks_each_once(self):
        a, ka = self.new_user()
        b, kb = self.new_user()
        before = checks()
        s = connect(SRV.port)
        try:
            statuses = [self.get(s, *u) for u in [(a, ka), (b, kb)] * 3]
        finally:
            s.close()
        after = checks()
        self.assertEqual(statuses, [200] * 6)
        self.assertEqual((after["full"] - before["full"],
                          after["server_cache"] - before["server_cache"]), (2, 4))

    def test_a_rotated_key_is_401_on_every_connection_at_once(self):
        name, key = self.new_user()
        self.assertEqual(self.fresh(name, key)[0], 200)
        self.assertEqual(self.fresh(name, key), (200, ["server_cache"]))
        r = self.admin("POST", "/admin/users/%s/key" % name)
        self.assertEqual(r.status, 200, r.describe())
        self.assertEqual(self.fresh(name, key), (401, ["full"]))
        self.assertEqual(self.fresh(name, r.result()["APIKey"]), (200, ["full"]))

    def test_a_removed_user_is_401_on_every_connection_at_once(self):
        name, key = self.new_user()
        self.assertEqual(self.fresh(name, key)[0], 200)
        self.assertEqual(self.admin("DELETE", "/admin/users/" + name).status, 204)
        self.assertEqual(self.fresh(name, key), (401, ["full"]))

    def test_a_header_one_byte_off_a_cached_one_is_401_at_every_position(self):
        name, key = self.new_user()
        good = auth_header(name, key)
        self.assertEqual(self.fresh(name, key)[0], 200)
        for i in range(len(good)):
            bad = good[:i] + ("B" if good[i] != "B" else "C") + good[i + 1:]
            s = connect(SRV.port)
            try:
                send_raw(s, build_request("GET", "/v2/theme", headers={"Authorization": bad}))
                self.assertEqual(read_response(s).status, 401, (i, bad))
            finally:
                s.close()
        self.assertEqual(self.fresh(name, key), (200, ["server_cache"]))

    def test_one_key_is_one_entry_however_the_header_is_written(self):
        """The cache is keyed on the token: the scheme's case and the spaces around the
        token (all accepted) find the same entry, so one account cannot fill the cache
        with spellings of one key and push other users out."""
        name, key = self.new_user()
        token = auth_header(name, key)[len("Basic "):]
        self.assertEqual(self.fresh(name, key), (200, ["full"]))
        for header in ["basic " + token, "BASIC   " + token, "Basic " + token + "  ",
                       "bAsIc " + token + "\t"]:
            self.assertEqual(self.fresh(name, key, header), (200, ["server_cache"]), header)

    def test_with_the_cache_off_every_new_connection_checks_in_full(self):
        with harness.Server(users=["off"], extra_args=["--auth-cache-entries", "0"]) as srv:
            auth = auth_header("off", srv.keys["off"])
            for _ in range(2):
                r = harness.request(srv.port, "GET", "/v2/theme", headers={"Authorization": auth})
                self.assertEqual(r.status, 200, r)
            body = harness.request(srv.port, "GET", "/metrics").body.decode()
            self.assertIn('eventd_auth_checks_total{by="full"} 2', body)
            self.assertIn('eventd_auth_checks_total{by="server_cache"} 0', body)


if __name__ == "__main__":
    unittest.main()
