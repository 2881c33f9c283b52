"""API-level helpers for the eventd black-box tests (test_api, test_spec_client,
test_storage).  Builds on harness.py (owned elsewhere; imported, not edited).

Python 3 standard library only; loopback only; every wait is bounded.
"""

import http.client
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

import harness
from harness import (EVENTD_BIN, HOST, HarnessError, Server, add_user,  # noqa: F401
                     auth_header, check_binary, clean_env, run_cli)

THEME_FIELDS = {
    "ID": int, "UserID": int, "EventID": int, "Name": str, "Logo": str,
    "BackgroundImage": str, "SecondaryImage": str, "PageBackgroundRGB": str,
    "HeaderBackgroundRGB": str, "HeaderTextRGB": str, "TextHeadingsRGB": str,
    "SmallHeadingRGB": str, "Status": str,
}
ADDRESS_FIELDS = {
    "ID": int, "UserID": int, "EventID": int, "Name": str, "Line1": str,
    "Line2": str, "Line3": str, "Line4": str, "City": str, "State": str,
    "Country": str, "Post": str, "Lon": (int, float), "Lat": (int, float),
    "ShowMap": bool, "Type": str, "Status": str,
}
THEME_COLOURS = ["PageBackgroundRGB", "HeaderBackgroundRGB", "HeaderTextRGB",
                 "TextHeadingsRGB", "SmallHeadingRGB"]
THEME_DEFAULTS = {"PageBackgroundRGB": "D0CBCB", "HeaderBackgroundRGB": "f9f9f9",
                  "HeaderTextRGB": "575757", "TextHeadingsRGB": "666666",
                  "SmallHeadingRGB": "575757"}
THEME_TEXT = ["Name", "Status"]
ADDRESS_TEXT = ["Name", "Line1", "Line2", "Line3", "City", "State", "Country",
                "Post", "Status"]
WRAPPER = {"theme": "Theme", "address": "Address", "event": "Event"}


class Resp:
    """status, headers (lower-case dict), header_list, body (bytes), json()."""

    def __init__(self, method, path, sent, status, header_list, body):
        self.method = method
        self.path = path
        self.sent = sent
        self.status = status
        self.header_list = header_list
        self.headers = {}
        for k, v in header_list:
            lk = k.lower()
            self.headers[lk] = v if lk not in self.headers else self.headers[lk] + ", " + v
        self.body = body

    def header(self, name, default=None):
        return self.headers.get(name.lower(), default)

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise AssertionError("response body is not JSON (%s): %s" % (e, self.describe()))

    def result(self):
        return self.json()["Result"]

    def error(self):
        j = self.json()
        if j.get("Status") != "error" or not isinstance(j.get("Error"), dict):
            raise AssertionError("not an error envelope: %s" % self.describe())
        return j["Error"]

    def describe(self):
        sent = self.sent
        if isinstance(sent, bytes) and len(sent) > 400:
            sent = sent[:400] + b"..."
        return "%s %s body=%r -> %d %r %r" % (self.method, self.path, sent, self.status,
                                               self.header_list, self.body[:600])

    __repr__ = describe


class ErrorAsserts:
    """unittest.TestCase mixin: the API's error envelope, one documented answer."""

    def assertErr(self, r, status, code, field=None):
        """r is status with Error.Code code (and Error.Field field when given) and a
        string Message; returns the Error object."""
        self.assertEqual(r.status, status, r.describe())
        err = r.error()
        self.assertEqual(err.get("Code"), code, r.describe())
        self.assertIsInstance(err.get("Message"), str, r.describe())
        if field is not None:
            self.assertEqual(err.get("Field"), field, r.describe())
        return err


class Client:
    """One keep-alive http.client connection with Basic auth.

    call() reconnects once if the server closed an idle connection."""

    def __init__(self, port, user=None, key=None, timeout=5.0, extra_headers=None):
        self.port = port
        self.timeout = timeout
        self.auth = auth_header(user, key) if user is not None else None
        self.extra = dict(extra_headers or {})
        self.conn = None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _connect(self):
        self.close()
        self.conn = http.client.HTTPConnection(HOST, self.port, timeout=self.timeout)

    def call(self, method, path, body=None, headers=None, auth=True):
        """body: None, bytes, str, or a JSON-serialisable object."""
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode("utf-8")
        h = dict(self.extra)
        if auth and self.auth:
            h["Authorization"] = self.auth
        if body is not None and not any(k.lower() == "content-type" for k in (headers or {})):
            h.setdefault("Content-Type", "application/json")
        if headers:
            h.update(headers)
        h = {k: v for k, v in h.items() if v is not None}
        for attempt in (0, 1):
            if self.conn is None:
                self._connect()
            try:
                self.conn.request(method, path, body=body, headers=h)
                r = self.conn.getresponse()
                data = r.read()
                resp = Resp(method, path, body, r.status, r.getheaders(), data)
                if r.will_close:
                    self.close()
                return resp
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest, http.client.BadStatusLine):
                self.close()
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    # convenience -----------------------------------------------------------
    def create(self, kind, fields, wrap=True):
        return self.call("POST", "/v2/" + kind, {WRAPPER[kind]: fields} if wrap else fields)

    def update(self, kind, rid, fields, method="PUT"):
        return self.call(method, "/v2/%s/%s" % (kind, rid), {WRAPPER[kind]: fields})

    def get(self, kind, rid):
        return self.call("GET", "/v2/%s/%s" % (kind, rid))

    def delete(self, kind, rid):
        return self.call("DELETE", "/v2/%s/%s" % (kind, rid))

    def list(self, kind, query=""):
        return self.call("GET", "/v2/%s%s" % (kind, ("?" + query) if query else ""))

    def must_create(self, kind, fields):
        r = self.create(kind, fields)
        if r.status != 200:
            raise AssertionError("create %s failed: %s" % (kind, r.describe()))
        return r.result()

    def must_get(self, kind, rid):
        r = self.get(kind, rid)
        if r.status != 200:
            raise AssertionError("get %s %s failed: %s" % (kind, rid, r.describe()))
        return r.result()

    def must_update(self, kind, rid, fields, method="PUT"):
        r = self.update(kind, rid, fields, method)
        if r.status != 204:
            raise AssertionError("update %s %s failed: %s" % (kind, rid, r.describe()))
        return r

    def must_delete(self, kind, rid):
        r = self.delete(kind, rid)
        if r.status != 204:
            raise AssertionError("delete %s %s failed: %s" % (kind, rid, r.describe()))
        return r

    def list_all(self, kind, limit=2, max_pages=100):
        """Follows NextCursor; returns the list of items (bounded in pages)."""
        items = []
        q = "limit=%d" % limit
        for _ in range(max_pages):
            r = self.list(kind, q)
            if r.status != 200:
                raise AssertionError("list failed: %s" % r.describe())
            res = r.result()
            items.extend(res["Items"])
            cur = res["NextCursor"]
            if cur is None:
                return items
            q = "limit=%d&cursor=%s" % (limit, cur)
        raise AssertionError("list of %s did not end within %d pages" % (kind, max_pages))


class ManagedDir:
    """A temporary data directory that outlives individual servers."""

    def __init__(self, prefix="eventd-bb-api-"):
        self.path = tempfile.mkdtemp(prefix=prefix)

    def cleanup(self):
        shutil.rmtree(self.path, ignore_errors=True)

    def file(self, name="eventd.log"):
        return os.path.join(self.path, name)


# The one launcher is harness.Server (stdout kept, demo=True for the demo user);
# the old name stays for the suites that use it.
OutServer = Server


def run_expect_exit(args, env=None, timeout=8.0):
    """Runs eventd with args, expecting it to exit by itself within timeout.

    Returns (returncode, stdout, stderr, seconds).  If it is still running at
    the deadline it is killed and returncode is None."""
    check_binary()
    t0 = time.monotonic()
    p = subprocess.Popen([EVENTD_BIN] + list(args), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(env))
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate(timeout=5)
        rc = None
    return (rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
            time.monotonic() - t0)


def serve_args(data_dir, *extra):
    return ["serve", "--listen", "127.0.0.1:0", "--data", data_dir, "--no-demo-user"] + list(extra)


def user_id_of(client):
    """The caller's UserID, learnt from a throw-away theme (then deleted)."""
    t = client.must_create("theme", {})
    client.delete("theme", t["ID"])
    return t["UserID"]


def wait_for(pred, timeout, interval=0.05):
    return harness.wait_until(pred, timeout, interval)
