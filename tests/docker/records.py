#!/usr/bin/env python3
"""Records through a containerised eventd, for tests/docker/run.sh.

    records.py create URL KEY FILE   create a theme and an address (user "demo"),
                                     update the theme, save what the server returned
    records.py check  URL KEY FILE   read them back: each must equal what was saved

URL is http://127.0.0.1:PORT (the published port). Python 3 standard library
only; loopback only; each request has a 5 s timeout. Exit 0 on success.
"""

import base64
import json
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 5
# Straight to the loopback address, whatever proxy the environment names.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(url, key, method, path, body=None):
    """Returns (status, parsed JSON or None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + "/v2" + path, data=data, method=method)
    token = base64.b64encode(("demo:" + key).encode()).decode()
    req.add_header("Authorization", "Basic " + token)
    req.add_header("Cache-Control", "no-cache")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with OPENER.open(req, timeout=TIMEOUT_S) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    return status, (json.loads(raw) if raw else None)


def expect(what, got, want):
    if got != want:
        raise SystemExit("records: %s: got %r, want %r" % (what, got, want))


def create(url, key, path):
    status, theme = call(url, key, "POST", "/theme",
                         {"Theme": {"Name": "Container gala", "PageBackgroundRGB": "ffffff"}})
    expect("POST /theme status", status, 200)
    theme = theme["Result"]
    status, address = call(url, key, "POST", "/address",
                           {"Address": {"Name": "Hall", "City": "Leeds", "Lat": 53.8,
                                        "Lon": -1.55, "ShowMap": True}})
    expect("POST /address status", status, 200)
    address = address["Result"]
    status, _ = call(url, key, "PUT", "/theme/%d" % theme["ID"],
                     {"Theme": {"Status": "archived"}})
    expect("PUT /theme status", status, 204)
    status, theme = call(url, key, "GET", "/theme/%d" % theme["ID"])
    expect("GET /theme status", status, 200)
    theme = theme["Result"]
    expect("theme status after PUT", theme["Status"], "archived")
    with open(path, "w") as f:
        json.dump({"theme": theme, "address": address}, f)
    print("records: created theme %d and address %d" % (theme["ID"], address["ID"]))


def check(url, key, path):
    with open(path) as f:
        saved = json.load(f)
    for kind in ("theme", "address"):
        status, got = call(url, key, "GET", "/%s/%d" % (kind, saved[kind]["ID"]))
        expect("GET /%s status" % kind, status, 200)
        expect("%s read back" % kind, got["Result"], saved[kind])
    print("records: theme %d and address %d read back unchanged"
          % (saved["theme"]["ID"], saved["address"]["ID"]))


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("create", "check"):
        raise SystemExit(__doc__)
    cmd, url, key, path = sys.argv[1:]
    (create if cmd == "create" else check)(url, key, path)


if __name__ == "__main__":
    main()
