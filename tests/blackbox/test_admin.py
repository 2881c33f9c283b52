#!/usr/bin/env python3
"""The admin API and the user CLI on a running server, black box, against
docs/ACCOUNTS.md: DATA/admin.sock (no token, mode 0600), the main listener
only with --admin-on-listener and a Bearer token, every call's status and
shape, keys that work and stop at once on /v2, and `eventd user
add|rotate|remove|list` and `eventd admin token` talking to the running
server with the same output as offline."""

import http.client
import json
import os
import socket
import stat
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from apiclient import HOST, ManagedDir, Resp, auth_header, run_cli  # noqa: E402

SOCK = "admin.sock"
JSON_T = "application/json"
PASSWORD = "correct horse battery"
_n = [0]


def uname(prefix="adm"):
    _n[0] += 1
    return "%s%d-%d" % (prefix, os.getpid() % 10000, _n[0])


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over an AF_UNIX stream socket."""

    def __init__(self, path, timeout=10.0):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def _do(conn, method, path, body=None, headers=None):
    try:
        if body is not None and not isinstance(body, bytes):
            body = json.dumps(body).encode()
        h = dict(headers or {})
        if body is not None:
            h.setdefault("Content-Type", JSON_T)
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return Resp(method, path, body, r.status, r.getheaders(), r.read())
    finally:
        conn.close()


def sock_call(data_dir, method, path, body=None, headers=None):
    return _do(UnixHTTPConnection(os.path.join(data_dir, SOCK)), method, path, body, headers)


def tcp_call(port, method, path, body=None, headers=None):
    return _do(http.client.HTTPConnection(HOST, port, timeout=10.0), method, path, body, headers)


def v2_theme(port, user, key):
    return tcp_call(port, "POST", "/v2/theme", {"Theme": {}},
                    {"Authorization": auth_header(user, key)}).status


def wait_socket(srv):
    path = os.path.join(srv.data_dir, SOCK)
    if not harness.wait_until(lambda: os.path.exists(path), 5):
        raise AssertionError("no %s after start; stderr:\n%s" % (path, srv.stderr_text()))


def cli(args):
    return run_cli(args, timeout=20.0)


def last_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


SRV = None


def setUpModule():
    global SRV
    SRV = harness.Server()
    SRV.__enter__()
    try:
        wait_socket(SRV)
    except BaseException:
        SRV.__exit__(None, None, None)  # tearDownModule does not run after a failed setUp
        raise


def tearDownModule():
    if SRV is not None:
        SRV.__exit__(None, None, None)


class Base(unittest.TestCase):
    def srv(self):
        return SRV

    def admin(self, method, path, body=None, headers=None):
        return sock_call(self.srv().data_dir, method, path, body, headers)

    def assertStatus(self, r, status):
        self.assertEqual(r.status, status, r.describe())

    def create(self, name=None):
        name = name or uname()
        r = self.admin("PUT", "/admin/users/" + name)
        self.assertStatus(r, 201)
        return name, r.result()


class Socket(Base):
    def test_socket_is_mode_0600(self):
        mode = stat.S_IMODE(os.stat(os.path.join(SRV.data_dir, SOCK)).st_mode)
        self.assertEqual(mode, 0o600, oct(mode))

    def test_put_user_is_201_with_username_userid_apikey(self):
        name = uname()
        r = self.admin("PUT", "/admin/users/" + name)
        self.assertStatus(r, 201)
        self.assertEqual(r.json()["Status"], "ok", r.describe())
        res = r.result()
        self.assertEqual(set(res), {"Username", "UserID", "APIKey"}, r.describe())
        self.assertEqual(res["Username"], name)
        self.assertIsInstance(res["UserID"], int)

    def test_created_key_works_at_once_on_v2(self):
        name, res = self.create()
        self.assertEqual(v2_theme(SRV.port, name, res["APIKey"]), 200)

    def test_put_existing_user_is_409(self):
        name, _ = self.create()
        r = self.admin("PUT", "/admin/users/" + name)
        self.assertStatus(r, 409)
        self.assertEqual(r.error()["Code"], "conflict", r.describe())

    def test_put_bad_name_is_400(self):
        # not in the table: the username rules make it a 400 naming the field
        r = self.admin("PUT", "/admin/users/bad%20name")
        self.assertStatus(r, 400)

    def test_rotate_is_200_with_a_new_key_that_works(self):
        name, res = self.create()
        r = self.admin("POST", "/admin/users/%s/key" % name)
        self.assertStatus(r, 200)
        new = r.result()
        self.assertEqual(set(new), {"Username", "UserID", "APIKey"}, r.describe())
        self.assertEqual(new["UserID"], res["UserID"])
        self.assertNotEqual(new["APIKey"], res["APIKey"])
        self.assertEqual(v2_theme(SRV.port, name, new["APIKey"]), 200)

    def test_rotate_makes_the_old_key_401_at_once(self):
        name, res = self.create()
        self.assertEqual(v2_theme(SRV.port, name, res["APIKey"]), 200)
        self.assertStatus(self.admin("POST", "/admin/users/%s/key" % name), 200)
        self.assertEqual(v2_theme(SRV.port, name, res["APIKey"]), 401)

    def test_rotate_unknown_user_is_404(self):
        # not in the table: an unknown name is the usual 404 not_found
        self.assertStatus(self.admin("POST", "/admin/users/%s/key" % uname("ghost")), 404)

    def test_delete_is_204(self):
        name, _ = self.create()
        r = self.admin("DELETE", "/admin/users/" + name)
        self.assertStatus(r, 204)
        self.assertEqual(r.body, b"")

    def test_deleted_key_is_401_at_once(self):
        name, res = self.create()
        self.assertStatus(self.admin("DELETE", "/admin/users/" + name), 204)
        self.assertEqual(v2_theme(SRV.port, name, res["APIKey"]), 401)

    def test_delete_ends_the_users_sessions(self):
        name = uname("site")
        r = tcp_call(SRV.port, "POST", "/register", {"username": name, "password": PASSWORD})
        self.assertStatus(r, 201)
        cookie = [v.split(";")[0] for k, v in r.header_list if k.lower() == "set-cookie"
                  and v.startswith("eventd_session=")][0]
        self.assertStatus(self.admin("DELETE", "/admin/users/" + name), 204)
        r = tcp_call(SRV.port, "GET", "/user/api", headers={"Cookie": cookie, "Accept": JSON_T})
        self.assertStatus(r, 401)

    def test_get_one_is_200_with_haskey_haspassword(self):
        name, res = self.create()
        r = self.admin("GET", "/admin/users/" + name)
        self.assertStatus(r, 200)
        self.assertEqual(r.result(), {"Username": name, "UserID": res["UserID"],
                                      "HasKey": True, "HasPassword": False,
                                      "Quota": {"Records": 0, "MaxRecords": 100000,
                                                "Bytes": 0, "MaxBytes": 64 << 20,
                                                "OwnMaxRecords": None, "OwnMaxBytes": None}})

    def test_get_one_of_a_site_user_has_a_password_and_no_key(self):
        name = uname("site")
        self.assertStatus(tcp_call(SRV.port, "POST", "/register",
                                   {"username": name, "password": PASSWORD}), 201)
        r = self.admin("GET", "/admin/users/" + name)
        self.assertStatus(r, 200)
        self.assertIs(r.result()["HasPassword"], True, r.describe())
        self.assertIs(r.result()["HasKey"], False, r.describe())

    def test_get_unknown_user_is_404(self):
        # not in the table: the usual 404 not_found
        self.assertStatus(self.admin("GET", "/admin/users/" + uname("ghost")), 404)

    def test_list_is_200_items_in_id_order(self):
        made = [self.create()[0] for _ in range(3)]
        r = self.admin("GET", "/admin/users")
        self.assertStatus(r, 200)
        items = r.result()["Items"]
        names = [i["Username"] for i in items]
        for n in made:
            self.assertIn(n, names)
        ids = [i["UserID"] for i in items]
        self.assertEqual(ids, sorted(ids))
        self.assertEqual(len(set(ids)), len(ids))

    def test_list_omits_removed_users(self):
        name, _ = self.create()
        self.assertStatus(self.admin("DELETE", "/admin/users/" + name), 204)
        names = [i["Username"] for i in self.admin("GET", "/admin/users").result()["Items"]]
        self.assertNotIn(name, names)

    def test_put_token_is_201_with_name_and_token(self):
        r = self.admin("PUT", "/admin/tokens/" + uname("tok"))
        self.assertStatus(r, 201)
        res = r.result()
        self.assertEqual(set(res), {"Name", "Token"}, r.describe())
        self.assertGreaterEqual(len(res["Token"]), 32)


class NotOnTheListenerByDefault(Base):
    def test_admin_on_the_listener_is_404(self):
        for method, path in (("GET", "/admin/users"), ("PUT", "/admin/users/" + uname()),
                             ("PUT", "/admin/tokens/x")):
            with self.subTest(method=method, path=path):
                self.assertStatus(tcp_call(SRV.port, method, path), 404)


class AdminOff(unittest.TestCase):
    def test_admin_off_has_no_socket(self):
        with harness.Server(extra_args=["--no-admin"]) as srv:
            self.assertEqual(tcp_call(srv.port, "GET", "/v2/theme").status, 401)
            self.assertFalse(os.path.exists(os.path.join(srv.data_dir, SOCK)))



class OutsideAlways(unittest.TestCase):
    """--fsync interval and never acknowledge a write at once, so the record a
    write replaced is freed at once too: the admin API's answer must not read it
    (until 2026-11-29 a key rotation read the old user's id from it and the
    server died of a segmentation fault)."""

    def rotate(self, mode):
        with harness.Server(extra_args=["--fsync", mode]) as srv:
            wait_socket(srv)
            name = uname()
            old = sock_call(srv.data_dir, "PUT", "/admin/users/" + name)
            self.assertEqual(old.status, 201, old.describe())
            try:
                r = sock_call(srv.data_dir, "POST", "/admin/users/%s/key" % name)
            except (OSError, http.client.HTTPException) as e:
                self.fail("no answer to the rotation (%s); stderr:\n%s"
                          % (e, srv.stderr_text()[-3000:]))
            self.assertEqual(r.status, 200, r.describe())
            self.assertEqual(r.result()["UserID"], old.result()["UserID"], r.describe())
            self.assertEqual(v2_theme(srv.port, name, r.result()["APIKey"]), 200)
            self.assertEqual(v2_theme(srv.port, name, old.result()["APIKey"]), 401)
            self.assertEqual(srv.stop(), 0, srv.stderr_text()[-3000:])
            self.assertNotRegex(srv.stderr_text(), harness.SANITIZER_RE)

    def test_rotate_in_interval_mode_is_200_with_a_new_key_that_works(self):
        self.rotate("interval")

    def test_rotate_in_never_mode_is_200_with_a_new_key_that_works(self):
        self.rotate("never")

class OnTheListener(unittest.TestCase):
    """--admin-on-listener with a token made offline before the start."""

    @classmethod
    def setUpClass(cls):
        cls.d = ManagedDir(prefix="eventd-bb-adm-")
        cp = cli(["admin", "token", "ops", "--data", cls.d.path])
        if cp.returncode != 0:
            cls.d.cleanup()
            raise AssertionError("eventd admin token ops: exit %d %r %r"
                                 % (cp.returncode, cp.stdout, cp.stderr))
        cls.token = last_line(cp.stdout)
        cls.srv = harness.Server(data_dir=cls.d.path, extra_args=["--admin-on-listener"])
        cls.srv.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.srv.__exit__(None, None, None)
        cls.d.cleanup()

    def call(self, method, path, token=None, headers=None):
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = "Bearer " + token
        return tcp_call(self.srv.port, method, path, headers=h)

    def test_without_a_token_is_401(self):
        self.assertEqual(self.call("GET", "/admin/users").status, 401)

    def test_wrong_token_is_401(self):
        r = self.call("GET", "/admin/users", self.token[:-1] + ("0" if self.token[-1] != "0"
                                                                  else "1"))
        self.assertEqual(r.status, 401, r.describe())

    def test_a_users_basic_auth_is_401(self):
        r = self.call("PUT", "/admin/users/" + uname(), headers={"Authorization":
                                                                 auth_header("ops", self.token)})
        self.assertEqual(r.status, 401, r.describe())

    def test_valid_token_creates_201_and_the_key_works(self):
        name = uname()
        r = self.call("PUT", "/admin/users/" + name, self.token)
        self.assertEqual(r.status, 201, r.describe())
        self.assertEqual(v2_theme(self.srv.port, name, r.result()["APIKey"]), 200)

    def test_valid_token_lists_200(self):
        r = self.call("GET", "/admin/users", self.token)
        self.assertEqual(r.status, 200, r.describe())
        self.assertIsInstance(r.result()["Items"], list)

    def test_token_made_over_the_socket_works_at_once(self):
        r = sock_call(self.d.path, "PUT", "/admin/tokens/" + uname("tok"))
        self.assertEqual(r.status, 201, r.describe())
        r = self.call("GET", "/admin/users", r.result()["Token"])
        self.assertEqual(r.status, 200, r.describe())

    def test_token_made_by_the_cli_while_running_works_at_once(self):
        cp = cli(["admin", "token", uname("tok"), "--data", self.d.path])
        self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
        r = self.call("GET", "/admin/users", last_line(cp.stdout))
        self.assertEqual(r.status, 200, r.describe())

    def test_the_socket_needs_no_token(self):
        r = sock_call(self.d.path, "GET", "/admin/users")
        self.assertEqual(r.status, 200, r.describe())

    def test_a_replaced_token_stops_and_the_new_one_works(self):
        name = uname("tok")
        old = sock_call(self.d.path, "PUT", "/admin/tokens/" + name)
        self.assertEqual(old.status, 201, old.describe())
        new = sock_call(self.d.path, "PUT", "/admin/tokens/" + name)
        self.assertEqual(new.status, 200, new.describe())
        self.assertEqual(self.call("GET", "/admin/users", old.result()["Token"]).status, 401)
        self.assertEqual(self.call("GET", "/admin/users", new.result()["Token"]).status, 200)

    def test_a_revoked_token_stops_at_once(self):
        name = uname("tok")
        r = sock_call(self.d.path, "PUT", "/admin/tokens/" + name)
        token = r.result()["Token"]
        self.assertEqual(self.call("GET", "/admin/users", token).status, 200)
        r = sock_call(self.d.path, "DELETE", "/admin/tokens/" + name)
        self.assertEqual(r.status, 204, r.describe())
        self.assertEqual(self.call("GET", "/admin/users", token).status, 401)
        self.assertEqual(sock_call(self.d.path, "DELETE", "/admin/tokens/" + name).status, 404)

    def test_cli_revoke_while_running(self):
        name = uname("tok")
        cp = cli(["admin", "token", name, "--data", self.d.path])
        token = last_line(cp.stdout)
        cp = cli(["admin", "revoke", name, "--data", self.d.path])
        self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
        self.assertEqual(cp.stdout, "revoked admin token %s\n" % name)
        self.assertEqual(self.call("GET", "/admin/users", token).status, 401)


class CliOnARunningServer(Base):
    def user(self, *args):
        return cli(["user"] + list(args) + ["--data", SRV.data_dir])

    def test_user_add_prints_a_key_that_works_at_once(self):
        name = uname("cli")
        cp = self.user("add", name)
        self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
        self.assertEqual(v2_theme(SRV.port, name, last_line(cp.stdout)), 200)

    def test_user_add_existing_fails(self):
        name = uname("cli")
        self.assertEqual(self.user("add", name).returncode, 0)
        cp = self.user("add", name)
        self.assertEqual(cp.returncode, 1, (cp.stdout, cp.stderr))
        self.assertIn("exists", cp.stderr)

    def test_user_rotate_prints_a_new_key_and_the_old_stops(self):
        name = uname("cli")
        old = last_line(self.user("add", name).stdout)
        cp = self.user("rotate", name)
        self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
        new = last_line(cp.stdout)
        self.assertNotEqual(new, old)
        self.assertEqual(v2_theme(SRV.port, name, old), 401)
        self.assertEqual(v2_theme(SRV.port, name, new), 200)

    def test_user_remove_stops_the_key(self):
        name = uname("cli")
        key = last_line(self.user("add", name).stdout)
        cp = self.user("remove", name)
        self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
        self.assertIn("removed user %s" % name, cp.stdout)
        self.assertEqual(v2_theme(SRV.port, name, key), 401)

    def test_user_list_shows_users_made_every_way(self):
        by_cli = uname("cli")
        self.assertEqual(self.user("add", by_cli).returncode, 0)
        by_admin, _ = self.create()
        by_site = uname("site")
        self.assertStatus(tcp_call(SRV.port, "POST", "/register",
                                   {"username": by_site, "password": PASSWORD}), 201)
        cp = self.user("list")
        self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
        names = [line.split()[1] for line in cp.stdout.splitlines()[1:] if line.strip()]
        for n in (by_cli, by_admin, by_site):
            self.assertIn(n, names, cp.stdout)

    def test_user_list_on_a_missing_directory_fails_and_creates_nothing(self):
        d = ManagedDir(prefix="eventd-bb-adm-")
        self.addCleanup(d.cleanup)
        missing = os.path.join(d.path, "nonexistent")
        cp = cli(["user", "list", "--data", missing])
        self.assertEqual(cp.returncode, 1, (cp.stdout, cp.stderr))
        self.assertIn(missing, cp.stderr)
        self.assertFalse(os.path.exists(missing))


class CliSameOutputOnlineAndOffline(unittest.TestCase):
    def test_user_list_prints_the_same_running_or_stopped(self):
        d = ManagedDir(prefix="eventd-bb-adm-")
        self.addCleanup(d.cleanup)
        with harness.Server(data_dir=d.path) as srv:
            wait_socket(srv)
            for n in ("alice", "bob", "carol"):
                self.assertEqual(cli(["user", "add", n, "--data", d.path]).returncode, 0)
            self.assertEqual(cli(["user", "remove", "bob", "--data", d.path]).returncode, 0)
            online = cli(["user", "list", "--data", d.path])
        offline = cli(["user", "list", "--data", d.path])
        self.assertEqual(online.returncode, 0, online.stderr)
        self.assertEqual(offline.returncode, 0, offline.stderr)
        self.assertEqual(online.stdout, offline.stdout)

    def test_user_add_prints_the_same_running_or_stopped(self):
        d = ManagedDir(prefix="eventd-bb-adm-")
        self.addCleanup(d.cleanup)
        with harness.Server(data_dir=d.path) as srv:
            wait_socket(srv)
            online = cli(["user", "add", "alice", "--data", d.path])
        offline = cli(["user", "add", "bob", "--data", d.path])
        self.assertEqual(online.returncode, 0, online.stderr)
        shape = [line.replace("alice", "NAME") for line in online.stdout.splitlines()[:-1]]
        self.assertEqual(shape, [line.replace("bob", "NAME")
                                 for line in offline.stdout.splitlines()[:-1]])


if __name__ == "__main__":
    unittest.main()
