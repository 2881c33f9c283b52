#!/usr/bin/env python3
"""tests/blackbox/openapi_check.py: every answer checked against docs/openapi.json.

The black-box suites' harness hands each answer they read from an eventd it
started (raw sockets through send_raw/read_response, so harness.request too;
http.client connections, apiclient.Client's included, to the listener or the
admin socket) to check(); a mismatch raises Mismatch (an AssertionError),
failing the test:

  - the path must be one of the document's (with the server URL of its path
    item: the API's under --base-path, the account site's under --site-path,
    the rest at the root), else the answer must be x-eventd-any-path's
    unlisted-path (404 not_found);
  - the method must be one of the path's, else the answer must be its
    unlisted-method (405, with Allow naming exactly the path's methods);
  - the status must be documented for that operation (connection-level
    answers, x-eventd-any-path's connection, are allowed on any request);
  - every required header of that response must be there, and every
    documented header present must match its schema;
  - a header eventd itself defines (SERVER_HEADERS) must be one the response
    documents: an answer that carries an undocumented ETag, Retry-After,
    Allow... is drift too; the framing and caching headers (FREE_HEADERS)
    are not checked;
  - the Content-Type must be one the response documents (none when it
    documents no content), and a JSON body must match the schema.

A JSON-Schema subset is implemented with the standard library: type, const,
enum, properties, required, additionalProperties, items, minItems, maxItems,
oneOf, anyOf, allOf, $ref (local), minimum, maximum, minLength, maxLength,
pattern; descriptive keywords are ignored. --self-test runs its own cases (drift
that must be refused: an extra member, a wrong type, an undocumented status, a
missing header...) and checks that every code of README's error table is
documented with its status, that README's error table and src/'s error
X-macro list (src/core/err.h) name the same codes with the same statuses, and
that every header name src/ writes is in SERVER_HEADERS or FREE_HEADERS.

Usage: openapi_check.py --self-test
"""
import json
import os
import re
import sys

DOC_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                        "openapi.json")
METHODS = ("get", "head", "post", "put", "delete", "patch", "options", "trace")
SITE_TAG = "Account site"
SRC_DIR = os.path.join(os.path.dirname(DOC_PATH), "..", "src")

# The response headers eventd itself defines (each written by its own code in src/): an
# answer that carries one must document it, so a header the server starts to send (or
# sends on an answer it was not meant for) fails the suites until the document says so.
SERVER_HEADERS = ("Accept-Encoding", "Allow", "Content-Security-Policy", "ETag", "Idempotent-Replayed", "Location",
                  "Referrer-Policy", "Retry-After", "WWW-Authenticate", "X-Changes-Cursor",
                  "X-Content-Type-Options", "X-Request-ID")
# Framing and caching headers, and the request headers src/ names: not checked (Content-Type
# is checked against the response's content; Cache-Control and Set-Cookie are documented
# where they matter, and left free elsewhere).
FREE_HEADERS = ("Cache-Control", "Connection", "Content-Length", "Content-Type", "Date",
                "Content-Encoding", "Expect", "Set-Cookie", "Transfer-Encoding")


class Mismatch(AssertionError):
    pass


# ---- the JSON-Schema subset ----------------------------------------------

def _type_ok(t, v):
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return (isinstance(v, int) and not isinstance(v, bool)) or \
            (isinstance(v, float) and v.is_integer())
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "string":
        return isinstance(v, str)
    if t == "array":
        return isinstance(v, list)
    if t == "object":
        return isinstance(v, dict)
    raise Mismatch("schema: unknown type %r" % t)


class Schemas:
    def __init__(self, doc):
        self.doc = doc

    def resolve(self, node):
        seen = 0
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            if not ref.startswith("#/"):
                raise Mismatch("only local $ref is supported: %r" % ref)
            node = self.doc
            for part in ref[2:].split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
            seen += 1
            if seen > 32:
                raise Mismatch("$ref loop at %r" % ref)
        return node

    def errors(self, schema, v, where="$", settings=None):
        """The first reason v does not match schema, or None. A schema with
        x-eventd-setting takes its maxLength from settings[that setting] when given
        (a limit the server's configuration moves, e.g. --max-string-bytes)."""
        if settings is not None:
            self.settings = settings
        s = self.resolve(schema)
        if s is True or s == {}:
            return None
        setting = s.get("x-eventd-setting") if isinstance(s, dict) else None
        if setting and setting in getattr(self, "settings", {}):
            s = dict(s, maxLength=self.settings[setting])
        if s is False:
            return "%s: nothing is allowed here" % where
        if "type" in s:
            ts = s["type"] if isinstance(s["type"], list) else [s["type"]]
            if not any(_type_ok(t, v) for t in ts):
                return "%s: %r is not of type %s" % (where, _short(v), "/".join(ts))
        if "const" in s and not _same(v, s["const"]):
            return "%s: %r is not %r" % (where, _short(v), s["const"])
        if "enum" in s and not any(_same(v, e) for e in s["enum"]):
            return "%s: %r is not one of %r" % (where, _short(v), s["enum"])
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if "minimum" in s and v < s["minimum"]:
                return "%s: %r is below the minimum %r" % (where, v, s["minimum"])
            if "maximum" in s and v > s["maximum"]:
                return "%s: %r is above the maximum %r" % (where, v, s["maximum"])
        if isinstance(v, str):
            if "minLength" in s and len(v) < s["minLength"]:
                return "%s: %r is shorter than %d" % (where, _short(v), s["minLength"])
            if "maxLength" in s and len(v) > s["maxLength"]:
                return "%s: a string of %d characters is longer than %d" % (
                    where, len(v), s["maxLength"])
            if "pattern" in s and not re.search(s["pattern"], v):
                return "%s: %r does not match %r" % (where, _short(v), s["pattern"])
        if isinstance(v, list):
            if "minItems" in s and len(v) < s["minItems"]:
                return "%s: fewer than %d items" % (where, s["minItems"])
            if "maxItems" in s and len(v) > s["maxItems"]:
                return "%s: more than %d items" % (where, s["maxItems"])
            if "items" in s:
                for i, item in enumerate(v):
                    e = self.errors(s["items"], item, "%s[%d]" % (where, i))
                    if e:
                        return e
        if isinstance(v, dict):
            props = s.get("properties", {})
            for name in s.get("required", []):
                if name not in v:
                    return "%s: the required member %r is missing" % (where, name)
            for name, val in v.items():
                if name in props:
                    e = self.errors(props[name], val, "%s.%s" % (where, name))
                    if e:
                        return e
                elif "additionalProperties" in s:
                    ap = s["additionalProperties"]
                    if ap is False:
                        return "%s: the member %r is not documented" % (where, name)
                    if ap is not True:
                        e = self.errors(ap, val, "%s.%s" % (where, name))
                        if e:
                            return e
        for sub in s.get("allOf", []):
            e = self.errors(sub, v, where)
            if e:
                return e
        if "anyOf" in s:
            errs = [self.errors(sub, v, where) for sub in s["anyOf"]]
            if all(errs):
                return "%s: matches none of anyOf (%s)" % (where, "; ".join(errs))
        if "oneOf" in s:
            errs = [self.errors(sub, v, where) for sub in s["oneOf"]]
            n = sum(1 for e in errs if e is None)
            if n == 0:
                return "%s: matches none of oneOf (%s)" % (where, "; ".join(errs))
            if n > 1:
                return "%s: matches %d of oneOf, not exactly one" % (where, n)
        return None


def _same(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def _short(v):
    if isinstance(v, str) and len(v) > 80:
        return v[:80] + "..."
    return v


# ---- the document ---------------------------------------------------------

class Contract:
    def __init__(self, doc=None, path=DOC_PATH):
        if doc is None:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        self.doc = doc
        self.schemas = Schemas(doc)
        self.any_path = doc.get("x-eventd-any-path", {})
        self._routes = {}

    def routes(self, base_path, site_path):
        key = (base_path, site_path)
        if key not in self._routes:
            out = []
            api_prefix = self.doc["servers"][0]["url"]
            for tmpl, item in self.doc["paths"].items():
                prefix = api_prefix
                if "servers" in item:
                    prefix = item["servers"][0]["url"]
                    ops = [item[m] for m in METHODS if m in item]
                    if any(SITE_TAG in o.get("tags", ()) for o in ops):
                        prefix = site_path
                elif api_prefix == "/v2":
                    prefix = base_path
                prefix = prefix.rstrip("/")
                params = {}
                for p in item.get("parameters", []):
                    p = self.schemas.resolve(p)
                    if p["in"] == "path":
                        params[p["name"]] = p["schema"]
                rx = "^" + re.escape(prefix) + re.sub(
                    r"\\\{(\w+)\\\}", lambda m: "(?P<%s>[^/]+)" % m.group(1), re.escape(tmpl)) + "$"
                out.append((re.compile(rx), tmpl, item, params))
            self._routes[key] = out
        return self._routes[key]

    def find(self, path, base_path="/v2", site_path=""):
        """(template, path item) for a request path, or (None, None)."""
        for rx, tmpl, item, params in self.routes(base_path, site_path):
            m = rx.match(path)
            if not m:
                continue
            if all(self.schemas.errors(params[k], v) is None for k, v in m.groupdict().items()
                   if k in params):
                return tmpl, item
        return None, None

    # -- one answer --
    def check(self, method, target, status, headers, body, base_path="/v2", site_path="",
              head=False, settings=None):
        """Raises Mismatch when the answer is not what the document says.

        headers: [(name, value)] or {name: value}; body: bytes (b"" for none);
        settings: the server's values of the settings schemas name (x-eventd-setting)."""
        self.schemas.settings = dict(settings or {})
        hl = headers.items() if isinstance(headers, dict) else headers
        hdrs = {}
        for k, v in hl:
            hdrs[k.lower()] = v if k.lower() not in hdrs else hdrs[k.lower()] + ", " + v
        what = "%s %s -> %d" % (method, target, status)
        if 100 <= status < 200:
            return
        path = _path_of(target)
        if path is None:
            # No request to attribute the answer to (bytes written past send_raw, or a
            # request line that is not one): a connection-level answer is checked as one,
            # anything else cannot be placed and is left alone.
            conn = self.any_path.get("connection", {}).get(str(status))
            if conn:
                self._answer(conn, what, status, hdrs, body, head, "a connection-level answer")
            return
        tmpl, item = self.find(path, base_path, site_path)
        m = method.lower()
        conn = self.any_path.get("connection", {}).get(str(status))
        if item is None:
            if conn and status != 404:
                return self._answer(conn, what, status, hdrs, body, head,
                                    "a connection-level answer")
            return self._answer(self.any_path.get("unlisted-path"),
                                what + " (path not in the document)", status, hdrs, body, head,
                                "404 (unlisted path)")
        if m not in item:
            if conn and status != 405:
                return self._answer(conn, what, status, hdrs, body, head,
                                    "a connection-level answer")
            resp = self.any_path.get("unlisted-method")
            if status == 405:
                allow = {a.strip() for a in hdrs.get("allow", "").split(",") if a.strip()}
                want = {k.upper() for k in item if k in METHODS}
                if allow != want:
                    raise Mismatch("%s: Allow %r, the document lists %s for %s" % (
                        what, hdrs.get("allow"), ", ".join(sorted(want)), tmpl))
            return self._answer(resp, what + " (method not in the document for %s)" % tmpl,
                                status, hdrs, body, head, "405 (unlisted method)")
        op = item[m]
        resp = op["responses"].get(str(status), op["responses"].get("default"))
        if resp is None:
            raise Mismatch("%s: status %d is not documented for %s %s (documented: %s); body %r"
                           % (what, status, m.upper(), tmpl, ", ".join(sorted(op["responses"])),
                              body[:300]))
        return self._answer(resp, what, status, hdrs, body, head, None)

    def _answer(self, resp, what, status, hdrs, body, head, expect):
        if resp is None:
            raise Mismatch("%s: undocumented answer (expected %s); body %r" % (
                what, expect or "a documented one", body[:300]))
        resp = self.schemas.resolve(resp)
        if expect and expect.startswith("404") and status != 404:
            raise Mismatch("%s: a path not in the document must answer 404; body %r"
                           % (what, body[:300]))
        if expect and expect.startswith("405") and status != 405:
            raise Mismatch("%s: a method not in the document must answer 405; body %r"
                           % (what, body[:300]))
        for name, h in resp.get("headers", {}).items():
            h = self.schemas.resolve(h)
            v = hdrs.get(name.lower())
            if v is None:
                if h.get("required"):
                    raise Mismatch("%s: the required header %s is missing (headers %r)" % (
                        what, name, hdrs))
                continue
            e = self.schemas.errors(h.get("schema", {}), v, name)
            if e:
                raise Mismatch("%s: header %s" % (what, e))
        documented = {n.lower() for n in resp.get("headers", {})}
        for name in SERVER_HEADERS:
            if name.lower() in hdrs and name.lower() not in documented:
                raise Mismatch("%s: the header %s is not documented for this answer "
                               "(documented: %s)" % (what, name,
                                                      ", ".join(resp.get("headers", {})) or "none"))
        content = resp.get("content")
        ctype = hdrs.get("content-type")
        if not content:
            if body:
                raise Mismatch("%s: a body where the document says none: %r" % (what, body[:300]))
            if ctype is not None and status == 204:
                raise Mismatch("%s: a Content-Type on a 204" % what)
            return
        if ctype is None:
            raise Mismatch("%s: no Content-Type; the document says %s" % (
                what, ", ".join(content)))
        media = content.get(ctype)
        if media is None:
            raise Mismatch("%s: Content-Type %r, the document says %s" % (
                what, ctype, ", ".join(content)))
        if head:
            if body:
                raise Mismatch("%s: a body in the answer to HEAD" % what)
            return
        if ctype.split(";")[0].strip() == "application/json":
            try:
                v = json.loads(body.decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as e:
                raise Mismatch("%s: the body is not JSON (%s): %r" % (what, e, body[:300]))
            e = self.schemas.errors(media.get("schema", {}), v)
            if e:
                raise Mismatch("%s: the body does not match the document: %s; body %r" % (
                    what, e, body[:400]))
        elif "schema" in media:
            e = self.schemas.errors(media["schema"], body.decode("utf-8", "replace"))
            if e:
                raise Mismatch("%s: %s" % (what, e))


def _path_of(target):
    """The path of a request target (origin- or absolute-form), or None."""
    if not isinstance(target, str) or not target:
        return None
    if target.startswith("/"):
        return target.split("?", 1)[0]
    m = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*(/[^?#]*)?", target)
    if m:
        return (m.group(1) or "/").split("?", 1)[0]
    return None


_contract = None


def contract():
    global _contract
    if _contract is None:
        _contract = Contract()
    return _contract


# ---- self-test --------------------------------------------------------------

def self_test():
    c = Contract()
    failures = []
    J = {"Content-Type": "application/json", "X-Request-ID": "a-1"}
    theme = {"ID": 2, "UserID": 1, "EventID": 0, "Name": "Gala", "Logo": "",
             "BackgroundImage": "", "SecondaryImage": "", "PageBackgroundRGB": "D0CBCB",
             "HeaderBackgroundRGB": "f9f9f9", "HeaderTextRGB": "575757",
             "TextHeadingsRGB": "666666", "SmallHeadingRGB": "575757", "Status": "active"}

    def body(o):
        return json.dumps(o).encode()

    def expect(ok, name, *args, **kw):
        try:
            c.check(*args, **kw)
            if not ok:
                failures.append("%s: accepted, should be refused" % name)
        except Mismatch as e:
            if ok:
                failures.append("%s: refused: %s" % (name, e))

    good = body({"Status": "ok", "Result": theme})
    JE = dict(J, ETag='"2"')    # a record answer: GET, HEAD, create, PUT carry its ETag
    expect(True, "a documented answer", "POST", "/v2/theme", 200, J, good)
    expect(True, "the query is not part of the path", "GET", "/v2/theme/2?x=1", 200, JE, good)
    expect(True, "absolute-form", "GET", "http://h:1/v2/theme/2", 200, JE, good)
    expect(False, "an extra member", "POST", "/v2/theme", 200, J,
           body({"Status": "ok", "Result": dict(theme, Colour="x")}))
    expect(False, "a wrong type", "POST", "/v2/theme", 200, J,
           body({"Status": "ok", "Result": dict(theme, ID="2")}))
    expect(False, "a bool for an integer", "POST", "/v2/theme", 200, J,
           body({"Status": "ok", "Result": dict(theme, EventID=False)}))
    t = dict(theme)
    del t["Status"]
    expect(False, "a required member missing", "POST", "/v2/theme", 200, J,
           body({"Status": "ok", "Result": t}))
    expect(False, "a pattern broken", "POST", "/v2/theme", 200, J,
           body({"Status": "ok", "Result": dict(theme, PageBackgroundRGB="#D0CBCB")}))
    expect(False, "over maxLength", "POST", "/v2/theme", 200, J,
           body({"Status": "ok", "Result": dict(theme, Name="x" * 256)}))
    expect(False, "an undocumented status", "POST", "/v2/theme", 418, J,
           body({"Status": "error", "Error": {"Code": "teapot", "Message": "x"}}))
    expect(False, "204 where create answers 200", "POST", "/v2/theme", 204, {"X-Request-ID": "a"},
           b"")
    expect(False, "no X-Request-ID", "POST", "/v2/theme", 200,
           {"Content-Type": "application/json"}, good)
    expect(False, "a wrong Content-Type", "POST", "/v2/theme", 200,
           dict(J, **{"Content-Type": "text/plain"}), good)
    err = lambda code, st=400: body({"Status": "error", "Error": {"Code": code, "Message": "m"}})
    expect(True, "a documented error", "POST", "/v2/theme", 400, J, err("invalid_field"))
    expect(False, "an error code not for this status", "POST", "/v2/theme", 400, J,
           err("not_found"))
    expect(False, "an error code not for this operation", "GET", "/v2/theme/2", 400, J,
           err("id_mismatch"))
    expect(False, "401 without WWW-Authenticate", "GET", "/v2/theme/2", 401, J,
           err("unauthorized"))
    expect(True, "401 with WWW-Authenticate", "GET", "/v2/theme/2", 401,
           dict(J, **{"WWW-Authenticate": 'Basic realm="eventd"'}), err("unauthorized"))
    expect(True, "an unlisted path is 404", "GET", "/v2/nothing", 404, J, err("not_found"))
    expect(True, "an id off its pattern is an unlisted path", "GET", "/v2/theme/01", 404, J,
           err("not_found"))
    expect(False, "an unlisted path answering 200", "GET", "/v2/nothing", 200, J, good)
    expect(True, "an unlisted method is 405 with the path's Allow", "PATCH", "/v2/theme", 405,
           dict(J, Allow="GET, HEAD, POST"), err("method_not_allowed"))
    expect(False, "an Allow that differs from the document", "PATCH", "/v2/theme", 405,
           dict(J, Allow="GET, POST"), err("method_not_allowed"))
    expect(False, "an unlisted method answering 200", "PATCH", "/v2/theme", 200, J, good)
    expect(True, "a connection-level answer anywhere", "PATCH", "/v2/theme", 400, J,
           err("bad_request"))
    coded = dict(J, **{"Accept-Encoding": "identity"})
    expect(True, "a coded body's 415 on an unlisted path", "POST", "/v2/nothing", 415, coded,
           err("unsupported_media_type"))
    expect(True, "a coded body's 415 for an unlisted method", "PATCH", "/v2/theme", 415, coded,
           err("unsupported_media_type"))
    expect(False, "a coded body's 415 without Accept-Encoding", "POST", "/v2/nothing", 415, J,
           err("unsupported_media_type"))
    expect(True, "HEAD: headers, no body", "HEAD", "/v2/theme/2", 200, JE, b"", head=True)
    expect(True, "the base path moves the API", "GET", "/api/theme/2", 200, JE, good,
           base_path="/api")
    expect(True, "the base path moves the API (unlisted there)", "GET", "/v2/theme/2", 404, J,
           err("not_found"), base_path="/api")
    expect(True, "/healthz stays at the root", "GET", "/healthz", 200, J, b'{"Status":"ok"}',
           base_path="/api")
    long_theme = body({"Status": "ok", "Result": dict(theme, Name="x" * 300)})
    expect(True, "a limit moved by a setting", "POST", "/v2/theme", 200, J, long_theme,
           settings={"--max-string-bytes": 300})
    expect(False, "a limit moved by a setting, past it", "POST", "/v2/theme", 200, J, long_theme,
           settings={"--max-string-bytes": 299})
    expect(True, "the site under --site-path", "POST", "/acct/signout", 204,
           {"X-Request-ID": "a"}, b"", site_path="/acct")
    expect(True, "204: no body", "DELETE", "/v2/theme/2", 204, {"X-Request-ID": "a"}, b"")
    expect(False, "204 with a body", "DELETE", "/v2/theme/2", 204, {"X-Request-ID": "a"}, b"{}")
    # Headers eventd defines: required where it always sends them, and never undocumented.
    expect(False, "a record without its ETag", "GET", "/v2/theme/2", 200, J, good)
    expect(False, "a PUT's 204 without the new ETag", "PUT", "/v2/theme/2", 204,
           {"X-Request-ID": "a"}, b"")
    expect(True, "a PUT's 204 with the new ETag", "PUT", "/v2/theme/2", 204,
           {"X-Request-ID": "a", "ETag": '"3"'}, b"")
    expect(False, "an undocumented ETag (a DELETE's 204)", "DELETE", "/v2/theme/2", 204,
           {"X-Request-ID": "a", "ETag": '"3"'}, b"")
    page = body({"Status": "ok", "Result": {"Items": [theme], "NextCursor": None}})
    expect(False, "an undocumented ETag (a list)", "GET", "/v2/theme", 200,
           dict(J, ETag='"2"', **{"X-Changes-Cursor": "7"}), page)
    expect(True, "a list with its X-Changes-Cursor", "GET", "/v2/theme", 200,
           dict(J, **{"X-Changes-Cursor": "7"}), page)
    expect(True, "HEAD of a list with its X-Changes-Cursor", "HEAD", "/v2/theme", 200,
           dict(J, **{"X-Changes-Cursor": "7"}), b"", head=True)
    expect(False, "a list without its X-Changes-Cursor", "HEAD", "/v2/theme", 200, J, b"",
           head=True)
    expect(False, "an undocumented Retry-After", "GET", "/v2/theme/2", 404,
           dict(J, **{"Retry-After": "1"}), err("not_found"))
    expect(True, "a free header (Cache-Control) needs no mention", "GET", "/v2/theme/2", 200,
           dict(JE, **{"Cache-Control": "no-store"}), good)
    # The feed: a create or update carries ETag and the record, a deletion neither.
    ch = {"Cursor": "5", "Kind": "Theme", "ID": 2, "Operation": "update"}
    feed = lambda *c: body({"Status": "ok", "Result": {"Changes": list(c), "NextCursor": "9"}})
    expect(True, "a feed's update", "GET", "/v2/changes?after=1", 200, J,
           feed(dict(ch, ETag='"5"', Theme=theme)))
    expect(True, "a feed's deletion", "GET", "/v2/changes", 200, J,
           feed(dict(ch, Operation="delete")))
    expect(False, "a feed's update without its ETag", "GET", "/v2/changes", 200, J,
           feed(dict(ch, Theme=theme)))
    expect(False, "a feed's update without its record", "GET", "/v2/changes", 200, J,
           feed(dict(ch, ETag='"5"')))
    expect(False, "a feed's update under another kind's name", "GET", "/v2/changes", 200, J,
           feed(dict(ch, ETag='"5"', Address=theme)))
    expect(False, "a feed's deletion with an ETag", "GET", "/v2/changes", 200, J,
           feed(dict(ch, Operation="delete", ETag='"5"')))
    # Every code of README's error table, under its status somewhere in the document.
    readme = os.path.join(os.path.dirname(DOC_PATH), "..", "README.md")
    with open(readme, encoding="utf-8") as f:
        table = re.findall(r"^\| `([a-z_]+)` \| (\d{3}) \|", f.read(), re.M)
    if len(table) < 20:
        failures.append("README's error table: only %d rows found" % len(table))
    by_status = {}
    any_path = c.any_path.get("connection", {}).items()
    any_path = list(any_path) + [("404", c.any_path["unlisted-path"]),
                                 ("405", c.any_path["unlisted-method"])]
    answers = [(st, r) for item in c.doc["paths"].values() for m, o in item.items()
               if m in METHODS for st, r in o["responses"].items()] + any_path
    for st, resp in answers:
        for media in c.schemas.resolve(resp).get("content", {}).values():
            env = c.schemas.resolve(media.get("schema", {}))
            code = env.get("properties", {}).get("Error", {}).get("properties", {}).get("Code")
            if code:
                for v in code.get("enum", [code.get("const")]):
                    by_status.setdefault(v, set()).add(st)
    for code, status in table:
        if status not in by_status.get(code, ()):
            failures.append("README's %s (%s) is not documented with that status" % (code, status))
    # README's table and src/'s X-macro list (ERR_MAP): the same codes and statuses, both ways.
    with open(os.path.join(SRC_DIR, "common", "err.h"), encoding="utf-8") as f:
        src_errors = set(re.findall(r'\bX\(\s*\w+,\s*"([a-z_]+)",\s*(\d{3}),', f.read()))
    if len(src_errors) < 20:
        failures.append("src/common/err.h: only %d errors found in ERR_MAP" % len(src_errors))
    for code, status in sorted(src_errors - set(table)):
        failures.append("src's error %s (%s) has no row in README's error table" % (code, status))
    for code, status in sorted(set(table) - src_errors):
        failures.append("README's error row %s (%s) is not in src's ERR_MAP" % (code, status))
    # Every header name src/ writes is either checked (SERVER_HEADERS) or left free.
    written = set()
    for top, _, files in os.walk(SRC_DIR):
        for name in files:
            if name.endswith((".c", ".h")):
                with open(os.path.join(top, name), encoding="utf-8") as f:
                    written |= set(re.findall(r'"([A-Z][A-Za-z]*(?:-[A-Z][A-Za-z]*)*): ', f.read()))
    for name in sorted(written - set(SERVER_HEADERS) - set(FREE_HEADERS)):
        failures.append("src/ writes the header %s: add it to SERVER_HEADERS (or FREE_HEADERS)"
                        % name)
    for name in sorted(set(SERVER_HEADERS) - written):
        failures.append("SERVER_HEADERS names %s, which src/ does not write" % name)
    s = Schemas({})
    cases = [({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 1, False),
             ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, 1, True),
             ({"anyOf": [{"type": "integer"}, {"type": "number"}]}, 1, True),
             ({"enum": ["a", "b"]}, "c", False), ({"const": True}, 1, False),
             ({"type": ["string", "null"]}, None, True), ({"minimum": 0}, -1, False),
             ({"type": "integer"}, 1.5, False), ({"type": "integer"}, 2.0, True),
             ({"items": {"type": "string"}}, ["a", 1], False),
             ({"additionalProperties": {"type": "string"}}, {"a": 1}, False)]
    for schema, v, ok in cases:
        if (s.errors(schema, v) is None) != ok:
            failures.append("schema %r on %r: %s" % (schema, v, "refused" if ok else "accepted"))
    for f in failures:
        print("FAIL", f)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    print(__doc__.strip().splitlines()[-1], file=sys.stderr)
    sys.exit(2)
