#!/usr/bin/env python3
"""A bounded randomized chaos run of one whole eventd (docs/RELIABILITY.md "Chaos run").

One server (fresh data directory, a free loopback port, its admin socket in the data
directory, small limits so that they are reached) is hit at once from several threads with a
random mix of: pipelined API requests (creates with and without Idempotency-Key, updates with
If-Match, deletes, reads, lists, change feed calls, ?wait calls held), bodies sent in
random-sized pieces, connections reset (SO_LINGER 0) or half-closed at random points,
clients that never read, account-site registrations, sign-ins and sign-outs, admin socket
calls (user add, rotate, remove), SIGUSR1 compactions and injected storage faults
(EVENTD_FAULT_*), in each --fsync mode; a round ends with SIGTERM (a drain) or kill -9, then
a restart that replays the log.

The oracle:
  - no AddressSanitizer / UndefinedBehaviorSanitizer report on the server's stderr;
  - the server never exits unless it was signalled, and a SIGTERM exits 0 (or 1 with the
    documented "could not be written" line while injected faults last);
  - every request gets a well-formed HTTP answer (checked against docs/openapi.json by the
    harness) or a closed connection, within a bound: never silence;
  - a read of a record whose writes were all answered shows the last acknowledged content;
  - an Idempotency-Key sent again answers the first answer byte for byte;
  - after the restart, every acknowledged create that no acknowledged delete removed is
    readable with its acknowledged content, and every acknowledged delete stays done: in
    always mode after SIGTERM and kill -9, in interval and never mode after a clean SIGTERM
    (docs/STORAGE.md "Durability modes").

Usage (the sanitizer build, as tests/run-all.sh makes it):
    EVENTD_BIN=build-asan/eventd python3 tests/stress/chaos.py --seed 7
    EVENTD_BIN=build-asan/eventd python3 tests/stress/chaos.py --seeds 1-20 --seconds 4
Exit status 0 when every round of every seed held, 1 otherwise (the failures are printed
with their seed and round).
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "blackbox"))
import harness  # noqa: E402
from harness import (ConnectionClosed, HarnessError, auth_header, build_request,  # noqa: E402
                     chunked, read_response, send_raw)

MODES = ("always", "interval", "never")
REPORT_MARKERS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer",
                  "runtime error:", "ThreadSanitizer")
ANSWER_TIMEOUT = 10.0      # an answer (or a close) must come within this, s (a ?wait adds its own)
PASSWORD = "correct horse battery staple"


class Round:
    """One server life: load, an ending (SIGTERM or kill -9), a restart, the check."""

    def __init__(self, seed, rnd, mode, seconds, threads, verbose):
        self.rng = random.Random("%d/%d" % (seed, rnd))
        self.seed, self.rnd, self.mode = seed, rnd, mode
        self.seconds, self.nthreads, self.verbose = seconds, threads, verbose
        self.failures = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()   # the round's end signal was sent (or is about to be)
        self.done = threading.Event()       # workers stop
        self.stats = {"answers": 0, "closed": 0, "acked_creates": 0, "acked_deletes": 0,
                      "acked_updates": 0, "resets": 0, "halfclosed": 0, "unread": 0,
                      "compactions": 0, "storage_503": 0, "site": 0, "admin": 0, "held": 0}
        self.ids_seen = {}

    # ---- bookkeeping --------------------------------------------------------------------------
    def fail(self, what):
        with self.lock:
            if len(self.failures) < 50:
                self.failures.append("seed %d round %d (%s): %s" % (self.seed, self.rnd,
                                                                    self.mode, what))

    def count(self, k, n=1):
        with self.lock:
            self.stats[k] += n

    # ---- the server -----------------------------------------------------------------------
    def server_args(self):
        r = self.rng
        args = ["--fsync", self.mode, "--fsync-interval-ms", str(r.choice((20, 50, 200))),
                "--max-pipeline", "4", "--max-connections", "64",
                "--max-body-bytes", "4096", "--changes-max-waiters", "8",
                "--changes-max-waiters-per-user", "3", "--changes-max-wait-s", "3",
                "--header-timeout-ms", "1500", "--request-timeout-ms", "3000",
                "--idle-timeout-ms", "4000", "--linger-ms", "300",
                "--shutdown-timeout-ms", "4000", "--storage-retry-ms", "100",
                "--drain-ms", str(r.choice((0, 0, 800))), "--list-max", "20",
                "--list-default", "10", "--compact-min-bytes", "4096", "--compact-ratio", "2",
                "--evict-half-sent-ms", "500"]
        return args

    def fault_env(self):
        r = self.rng
        x = r.random()
        if x < 0.4:
            return {}
        env = {"EVENTD_FAULT_TIMES": str(r.randint(1, 6))}
        if x < 0.7:
            env["EVENTD_FAULT_FSYNC_AFTER"] = str(r.randint(5, 200))
        else:
            env["EVENTD_FAULT_WRITE_AFTER"] = str(r.randint(5, 300))
        return env

    # ---- one connection's exchange ------------------------------------------------------------
    def exchange(self, items, mode, hold=0.0):
        """Sends items [(bytes, on_answer, wait_s)] pipelined on one connection in random
        pieces; mode: 'read', 'reset' (at a random byte of what is sent), 'half' (shutdown
        SHUT_WR at a random byte, then read), 'answer-reset' (read some bytes of the
        answers, then reset), 'unread' (never read). on_answer(resp) is called with each
        answer in order, or on_answer(None) for each request left without one."""
        r = self.rng
        data = b"".join(i[0] for i in items)
        try:
            s = harness.connect(self.port, timeout=5.0)
        except OSError as e:
            if not self.stopping.is_set():
                # the listener backlog is far above this run's clients: a refusal is a finding
                self.fail("connect failed while the server runs: %s" % e)
            for i in items:
                i[1](None)
            return
        cut = (len(data) if mode in ("read", "unread", "answer-reset", "sent-reset") else
               r.randint(0, len(data)))
        answered = 0
        try:
            pos = 0
            while pos < cut:
                n = min(cut - pos, r.choice((1, 7, 64, 300, 4096, 65536)))
                send_raw(s, data[pos:pos + n])
                pos += n
                if r.random() < 0.15:
                    time.sleep(r.random() * 0.05)
            if mode in ("reset", "sent-reset"):
                self.count("resets")
                if hold or mode == "sent-reset":
                    time.sleep(hold or r.random() * 0.05)
                reset(s)
                s = None
            elif mode == "unread":
                self.count("unread")
                time.sleep(hold or r.random() * 2)
                (reset if r.random() < 0.5 else close)(s)
                s = None
            elif mode == "answer-reset":
                self.count("resets")
                want = r.randint(1, 400)
                s.settimeout(ANSWER_TIMEOUT)
                got = 0
                while got < want:
                    try:
                        c = s.recv(want - got)
                    except OSError:
                        break
                    if not c:
                        break
                    got += len(c)
                reset(s)
                s = None
            else:
                if mode == "half":
                    self.count("halfclosed")
                    if hold:
                        time.sleep(hold)
                    s.shutdown(socket.SHUT_WR)
                for i in items:
                    resp = read_response(s, timeout=ANSWER_TIMEOUT + i[2],
                                         head=i[0].startswith(b"HEAD "))
                    answered += 1
                    self.count("answers")
                    if resp.status == 503 and b"storage_error" in resp.body:
                        self.count("storage_503")
                    i[1](resp)
        except ConnectionClosed:
            self.count("closed")
        except (ConnectionResetError, BrokenPipeError):
            self.count("closed")
        except HarnessError as e:
            if "timed out" in str(e):
                if not self.stopping.is_set():
                    self.fail("no answer and no close within the bound: %s; requests %r"
                              % (e, [i[0][:120] for i in items]))
            else:
                self.fail("malformed answer: %s" % e)
        except AssertionError as e:      # openapi_check.Mismatch
            self.fail("answer outside the contract: %s" % str(e)[:600])
        except OSError as e:
            self.count("closed")
            if self.verbose:
                print("  socket error: %s" % e)
        finally:
            if s is not None:
                close(s)
        for i in items[answered:]:
            i[1](None)

    # ---- API workers --------------------------------------------------------------------------
    def worker(self, n, user, key):
        r = random.Random(self.rng.random())
        auth = {"Authorization": auth_header(user, key)}
        recs = {}        # id -> Rec
        idem = {}        # key -> {"path","body","answer": bytes or None, "id"}
        cursor = ["0"]
        seq = [0]

        def fields_for(kind):
            seq[0] += 1
            if kind == "theme":
                f = {"Name": "w%d-%d" % (n, seq[0]), "PageBackgroundRGB": "%06x" %
                     r.randint(0, 0xffffff), "Status": "s%d" % r.randint(0, 9)}
            else:
                f = {"Name": "a%d-%d" % (n, seq[0]), "City": "c%d" % r.randint(0, 999),
                     "Line1": "l%d" % seq[0]}
            return f

        def body_of(kind, f):
            return json.dumps({kind.capitalize(): f}).encode()

        def req(method, path, body=None, headers=None):
            h = dict(auth)
            h.update(headers or {})
            if body is not None and r.random() < 0.2:
                h["Transfer-Encoding"] = "chunked"
                cuts = sorted(r.sample(range(1, max(2, len(body))), min(3, len(body) - 1)))
                parts = [body[a:b] for a, b in zip([0] + cuts, cuts + [len(body)])]
                return build_request(method, path, chunked([p for p in parts if p]), h)
            return build_request(method, path, body, h)

        def on_create(kind, f, ikey):
            def cb(resp):
                if resp is None:
                    if ikey:
                        idem[ikey]["lost"] = True
                    return
                if resp.status == 200:
                    res = resp.json()["Result"]
                    rid = res["ID"]
                    replayed = resp.header("Idempotent-Replayed") == "true"
                    if ikey:
                        e = idem[ikey]
                        if e["answer"] is not None:
                            if resp.body != e["answer"] or not replayed:
                                self.fail("Idempotency-Key %s answered %r (replayed %r), first "
                                          "answer %r" % (ikey, resp.body[:200], replayed,
                                                         e["answer"][:200]))
                            return
                        # the first answer (or, replayed, the one of a create whose answer
                        # was lost: the record it made, unchanged since)
                        e["answer"], e["id"] = resp.body, rid
                    elif replayed:
                        self.fail("a create without a key answered Idempotent-Replayed")
                    for k, v in f.items():
                        if res.get(k) != v:
                            self.fail("create answered %s=%r, sent %r" % (k, res.get(k), v))
                    with self.lock:
                        if rid in self.ids_seen:
                            self.fail("id %d handed out twice (%s and %s)"
                                      % (rid, self.ids_seen[rid], user))
                        self.ids_seen[rid] = user
                    self.count("acked_creates")
                    recs[rid] = {"kind": kind, "fields": dict(f), "etag": resp.header("ETag"),
                                 "deleted": False, "frozen": False, "maybe": []}
                elif resp.status in (409, 422) and ikey:
                    if resp.status == 422:
                        self.fail("Idempotency-Key %s sent with its own body: 422" % ikey)
                elif resp.status not in (503, 413, 400, 408, 429, 507, 403):
                    self.fail("create: unexpected %d %r" % (resp.status, resp.body[:200]))
            return cb

        def on_update(rid, f):
            rec = recs[rid]

            def cb(resp):
                if resp is None:
                    rec["frozen"] = True
                    new = dict(rec["fields"])
                    new.update(f)
                    rec["maybe"].append(new)
                    return
                if resp.status == 204:
                    rec["fields"].update(f)
                    rec["etag"] = resp.header("ETag")
                    self.count("acked_updates")
                elif resp.status == 412 and not rec["frozen"] and not rec.get("stale"):
                    self.fail("PUT /%s/%d with the current If-Match answered 412 (ETag %r, "
                              "current %r)" % (rec["kind"], rid, rec["etag"],
                                               resp.header("ETag")))
                elif resp.status == 404 and not rec["frozen"] and not rec["deleted"]:
                    self.fail("PUT of live record %d answered 404" % rid)
                elif resp.status not in (412, 404, 503, 413, 400, 408, 429, 507, 403):
                    self.fail("update: unexpected %d %r" % (resp.status, resp.body[:200]))
            return cb

        def on_delete(rid):
            rec = recs[rid]

            def cb(resp):
                if resp is None:
                    rec["frozen"] = True
                    rec["maybe"].append(None)
                    return
                if resp.status == 204:
                    rec["deleted"] = True
                    self.count("acked_deletes")
                elif resp.status == 404 and not rec["frozen"] and not rec["deleted"]:
                    self.fail("DELETE of live record %d answered 404" % rid)
            return cb

        def on_get(rid):
            rec = recs[rid]

            def cb(resp):
                if resp is None or rec["frozen"]:
                    return
                if resp.status == 200:
                    got = resp.json()["Result"]
                    if rec["deleted"]:
                        self.fail("GET of deleted record %d answered 200" % rid)
                    for k, v in rec["fields"].items():
                        if got.get(k) != v:
                            self.fail("GET /%s/%d: %s=%r, acknowledged %r" %
                                      (rec["kind"], rid, k, got.get(k), v))
                elif resp.status == 404 and not rec["deleted"]:
                    self.fail("GET of live record %d answered 404" % rid)
            return cb

        def on_any(what):
            def cb(resp):
                if resp is not None and resp.status >= 500 and resp.status not in (503, 507):
                    self.fail("%s answered %d %r" % (what, resp.status, resp.body[:200]))
                if resp is not None and resp.status == 200 and what == "changes":
                    cursor[0] = resp.json()["Result"]["NextCursor"]
            return cb

        while not self.done.is_set():
            items = []
            touched = set()
            for _ in range(r.randint(1, 6)):
                x = r.random()
                live = [i for i, v in recs.items() if not v["frozen"] and not v["deleted"]
                        and i not in touched]
                kind = r.choice(("theme", "theme", "address"))
                if x < 0.35 or not live:
                    f = fields_for(kind)
                    body = body_of(kind, f)
                    h = {}
                    ikey = None
                    if r.random() < 0.4:
                        lost = [k for k, e in idem.items() if e.get("lost") and
                                e["answer"] is None]
                        again = [k for k, e in idem.items() if e["answer"] is not None]
                        if lost and r.random() < 0.5:
                            ikey = r.choice(lost)
                        elif again and r.random() < 0.3:
                            ikey = r.choice(again)
                        else:
                            ikey = "k%d-%d-%d" % (self.rnd, n, seq[0])
                            idem[ikey] = {"path": "/v2/" + kind, "body": body, "answer": None,
                                          "fields": f, "kind": kind}
                        e = idem[ikey]
                        kind, body, f = e["kind"], e["body"], e["fields"]
                        e["lost"] = False
                        h["Idempotency-Key"] = ikey
                    if r.random() < 0.04:
                        body = body[:-2] + b',"Logo":"' + b"x" * 5000 + b'"}}'   # over 4096
                        ikey = None
                        h.pop("Idempotency-Key", None)
                        items.append((req("POST", "/v2/" + kind, body, h), on_any("big"), 0))
                        continue
                    items.append((req("POST", "/v2/" + kind, body, h),
                                  on_create(kind, f, ikey), 0))
                elif x < 0.55:
                    rid = r.choice(live)
                    touched.add(rid)
                    rec = recs[rid]
                    f = fields_for(rec["kind"])
                    if r.random() < 0.3:
                        del f["Name"]
                    h = {}
                    rec["stale"] = False
                    if r.random() < 0.5 and rec["etag"]:
                        if r.random() < 0.15:
                            h["If-Match"] = '"1"'
                            rec["stale"] = True
                        else:
                            h["If-Match"] = rec["etag"]
                    items.append((req("PUT", "/v2/%s/%d" % (rec["kind"], rid),
                                      body_of(rec["kind"], f), h), on_update(rid, f), 0))
                elif x < 0.65:
                    rid = r.choice(live)
                    touched.add(rid)
                    rec = recs[rid]
                    h = {"If-Match": rec["etag"]} if rec["etag"] and r.random() < 0.3 else {}
                    items.append((req("DELETE", "/v2/%s/%d" % (rec["kind"], rid), None, h),
                                  on_delete(rid), 0))
                elif x < 0.8 and recs:
                    rid = r.choice(list(recs))
                    if rid in touched:
                        continue
                    rec = recs[rid]
                    items.append((req(r.choice(("GET", "GET", "HEAD")), "/v2/%s/%d" %
                                      (rec["kind"], rid)),
                                  on_get(rid), 0))
                elif x < 0.84:
                    # 250 KiB: more than the socket buffers hold, for the unread and reset ones
                    items.append((build_request("GET", "/v2/openapi.json"), on_any("openapi"), 0))
                elif x < 0.9:
                    items.append((req("GET", "/v2/%s?limit=%d" % (kind, r.randint(1, 25))),
                                  on_any("list"), 0))
                else:
                    items.append((req("GET", "/v2/changes?after=%s&limit=%d" %
                                      (cursor[0], r.randint(1, 20))), on_any("changes"), 0))
            if not items:
                continue
            if r.random() < 0.12:
                # a held ?wait call, alone on its connection
                w = r.randint(1, 3)
                items = [(req("GET", "/v2/changes?after=%s&wait=%d" % (cursor[0], w)),
                          on_any("changes"), w)]
                self.count("held")
                mode = r.choice(("read", "read", "reset", "sent-reset", "half", "answer-reset"))
                hold = r.random() * w if mode in ("reset", "sent-reset", "half") else 0
                self.exchange(items, mode, hold)
                continue
            y = r.random()
            mode = ("read" if y < 0.55 else "reset" if y < 0.67 else "sent-reset" if y < 0.75
                    else "half" if y < 0.85 else "answer-reset" if y < 0.93 else "unread")
            # a GET of a record the same pipeline writes is checked in order: fine; a HEAD's
            # callback reads no body (on_get then checks nothing)
            fixed = []
            for raw, cb, w in items:
                if raw.startswith(b"HEAD "):
                    cb = on_any("head")
                fixed.append((raw, cb, w))
            self.exchange(fixed, mode)
        return recs

    # ---- the account site ---------------------------------------------------------------------
    def site(self):
        r = random.Random(self.rng.random())
        k = 0
        while not self.done.is_set():
            k += 1
            name = "s%dr%dn%d" % (self.seed % 1000, self.rnd, k)
            cookie = []

            def keep_cookie(resp):
                if resp is None:
                    return
                if resp.status >= 500 and resp.status not in (503,):
                    self.fail("site answered %d %r" % (resp.status, resp.body[:200]))
                for h, v in resp.header_list:
                    if h.lower() == "set-cookie" and v.startswith("eventd_session="):
                        cookie[:] = [v.split(";")[0]]

            js = {"Content-Type": "application/json"}
            mode = r.choice(("read",) * 6 + ("reset", "sent-reset", "half", "answer-reset"))
            self.exchange([(build_request("POST", "/register", {"username": name,
                                                               "password": PASSWORD}, js),
                            keep_cookie, 0)], mode)
            self.count("site")
            if r.random() < 0.5:
                pw = PASSWORD if r.random() < 0.8 else "wrong password here"
                mode = r.choice(("read",) * 6 + ("reset", "sent-reset", "answer-reset"))
                self.exchange([(build_request("POST", "/signin", {"username": name,
                                                                 "password": pw}, js),
                                keep_cookie, 0)], mode)
            if cookie:
                h = dict(js, Cookie=cookie[0])
                items = [(build_request("POST", "/user/api/key", b"", h), keep_cookie, 0),
                         (build_request("GET", "/user/api", None,
                                        dict(h, Accept="application/json")), keep_cookie, 0),
                         (build_request("POST", r.choice(("/signout", "/signout/all")), b"", h),
                          keep_cookie, 0)]
                self.exchange(items, r.choice(("read",) * 5 + ("reset", "sent-reset", "half",
                                                                 "unread")))
            time.sleep(r.random() * 0.1)

    # ---- the admin socket ---------------------------------------------------------------------
    def admin_call(self, reqs, mode):
        path = os.path.join(self.data_dir, "admin.sock")
        out = []
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(path)
            data = b"".join(reqs)
            cut = len(data) if mode == "read" else self.rng.randint(0, len(data))
            s.sendall(data[:cut])
            if mode == "reset":
                return out
            if mode == "half":
                s.shutdown(socket.SHUT_WR)
            for _ in reqs:
                out.append(read_response(s, timeout=ANSWER_TIMEOUT))
        except ConnectionClosed:
            pass
        except HarnessError as e:
            if "timed out" in str(e) and not self.stopping.is_set():
                self.fail("admin socket: no answer and no close: %s" % e)
            elif "timed out" not in str(e):
                self.fail("admin socket: malformed answer: %s" % e)
        except OSError:
            pass
        finally:
            s.close()
        return out

    def admin(self):
        r = random.Random(self.rng.random())
        k = 0
        while not self.done.is_set():
            k += 1
            name = "adm%d-%d" % (self.rnd, k)
            reqs = [build_request("PUT", "/admin/users/" + name),
                    build_request("POST", "/admin/users/%s/key" % name),
                    build_request("GET", "/admin/users/" + name)]
            if r.random() < 0.5:
                reqs.append(build_request("DELETE", "/admin/users/" + name))
            mode = r.choice(("read",) * 5 + ("reset", "half"))
            out = self.admin_call(reqs, mode)
            self.count("admin")
            for resp in out:
                if resp.status >= 500 and resp.status != 503:
                    self.fail("admin answered %d %r" % (resp.status, resp.body[:200]))
            if len(out) >= 2 and out[1].status == 200 and r.random() < 0.5:
                key = out[1].json()["Result"]["APIKey"]
                got = []
                t = threading.Thread(target=self.exchange, args=(
                    [(build_request("GET", "/v2/changes?wait=3", None,
                                    {"Authorization": auth_header(name, key)}),
                      got.append, 3)], r.choice(("read", "read", "sent-reset"))), daemon=True)
                t.start()
                time.sleep(r.random() * 0.5)
                self.admin_call([build_request(r.choice(("POST", "DELETE")),
                                               "/admin/users/%s%s" % (name, r.choice(("/key",
                                                                                     ""))))],
                                "read")
                t.join(ANSWER_TIMEOUT + 5)
            elif len(out) >= 2 and out[1].status == 200:
                key = out[1].json()["Result"]["APIKey"]
                self.exchange([(build_request("POST", "/v2/theme", {"Theme": {"Name": "x"}},
                                              {"Authorization": auth_header(name, key)}),
                                lambda resp: None, 0)], "read")
            time.sleep(r.random() * 0.2)

    # ---- the round ----------------------------------------------------------------------------
    def run(self, workdir):
        r = self.rng
        self.data_dir = os.path.join(workdir, "data-%d-%d" % (self.seed, self.rnd))
        users = ["u%d" % i for i in range(self.nthreads)]
        env = self.fault_env()
        args = self.server_args()
        srv = harness.Server(extra_args=args, env=env, data_dir=self.data_dir, users=users)
        srv.start()
        self.port = srv.port
        keys = dict(srv.keys)
        if self.verbose:
            print("seed %d round %d: --fsync %s, faults %r, port %d" %
                  (self.seed, self.rnd, self.mode, env, self.port))
        results = {}
        ths = []
        for i, u in enumerate(users):
            t = threading.Thread(target=lambda i=i, u=u: results.__setitem__(
                u, self.guard(self.worker, i, u, keys[u])), daemon=True)
            ths.append(t)
        ths.append(threading.Thread(target=self.guard, args=(self.site,), daemon=True))
        ths.append(threading.Thread(target=self.guard, args=(self.admin,), daemon=True))
        for t in ths:
            t.start()
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            time.sleep(min(end - time.monotonic(), r.random() * 1.0))
            if not srv.running():
                self.fail("the server exited unsignalled: %r" % srv.proc.returncode)
                break
            if r.random() < 0.5:
                srv.send_signal(signal.SIGUSR1)
                self.count("compactions")
        ending = r.choice(("term", "term", "kill"))
        self.stopping.set()
        if srv.running():
            if ending == "kill":
                srv.send_signal(signal.SIGKILL)
            else:
                srv.send_signal(signal.SIGTERM)
        rc = srv.wait(20)
        self.done.set()
        for t in ths:
            t.join(30)
        if any(t.is_alive() for t in ths):
            self.fail("a client thread did not stop")
        if rc is None:
            self.fail("the server did not exit within 20 s of %s" % ending)
            srv._kill()
        srv.read_to_end()
        err = srv.stderr_text()
        srv.close()
        self.check_stderr(err, "first run")
        unwritten = "could not be written" in err or "could not write" in err
        if ending == "term" and rc is not None and rc != 0 and not (rc == 1 and env):
            self.fail("SIGTERM exited %r; stderr tail:\n%s" % (rc, err[-1500:]))
        if ending == "kill" and rc not in (-9, None):
            self.fail("kill -9 exited %r (it had died before)" % rc)
        if rc == 1 and ending == "term":
            print("  (seed %d round %d: SIGTERM exited 1 with faults injected: %s)" %
                  (self.seed, self.rnd, " | ".join(err.strip().splitlines()[-2:])[:300]))
        durable = self.mode == "always" or (ending == "term" and rc == 0 and not unwritten)
        # the restart: replays the log, no faults
        srv2 = harness.Server(extra_args=["--fsync", self.mode], data_dir=self.data_dir)
        try:
            srv2.start()
        except HarnessError as e:
            self.fail("the restart failed: %s" % e)
            return
        self.port = srv2.port
        self.stopping.clear()
        checked = 0
        if durable:
            for i, u in enumerate(users):
                checked += self.verify(u, keys[u], results.get(u) or {})
        rc2 = srv2.stop(timeout=15)
        srv2.read_to_end()
        err2 = srv2.stderr_text()
        srv2.close()
        self.check_stderr(err2, "restart")
        if rc2 != 0:
            self.fail("the restarted server's SIGTERM exited %r:\n%s" % (rc2, err2[-1500:]))
        shutil.rmtree(self.data_dir, ignore_errors=True)
        st = dict(self.stats, checked=checked, ending=ending, rc=rc)
        print("seed %d round %d --fsync %-8s faults=%s %s" %
              (self.seed, self.rnd, self.mode, "yes" if env else "no ",
               " ".join("%s=%s" % kv for kv in st.items())), flush=True)

    def guard(self, fn, *a):
        try:
            return fn(*a)
        except Exception as e:     # a driver bug must not pass as a clean run
            import traceback
            self.fail("client thread raised: %s\n%s" % (e, traceback.format_exc()))
            return None

    def check_stderr(self, err, which):
        for m in REPORT_MARKERS:
            if m in err:
                i = err.find(m)
                self.fail("%s: sanitizer report on stderr:\n%s" % (which, err[max(0, i - 200):
                                                                          i + 4000]))
                return

    def verify(self, user, key, recs):
        """After the restart: each record's last acknowledged state (or, for one whose last
        writes went unanswered, one of the states they could leave)."""
        auth = {"Authorization": auth_header(user, key)}
        s = harness.connect(self.port, timeout=10)
        n = 0
        try:
            for rid, rec in recs.items():
                send_raw(s, build_request("GET", "/v2/%s/%d" % (rec["kind"], rid), None, auth))
                resp = read_response(s, timeout=10)
                n += 1
                got = resp.json()["Result"] if resp.status == 200 else None
                if resp.status not in (200, 404):
                    self.fail("restart: GET %d answered %d" % (rid, resp.status))
                    continue
                states = [None if rec["deleted"] else rec["fields"]]
                if rec["frozen"]:
                    states += rec["maybe"]

                def match(st):
                    if st is None:
                        return got is None
                    return got is not None and all(got.get(k) == v for k, v in st.items())
                if not any(match(st) for st in states):
                    self.fail("after the restart %s %d of %s is %r; acknowledged %r%s" %
                              (rec["kind"], rid, user, got,
                               "deleted" if rec["deleted"] else rec["fields"],
                               " (or one of %r)" % rec["maybe"] if rec["frozen"] else ""))
        finally:
            close(s)
        return n


def reset(s):
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    close(s)


def close(s):
    try:
        s.close()
    except OSError:
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1, help="the seed (default 1)")
    ap.add_argument("--seeds", help="a range of seeds, A-B (overrides --seed)")
    ap.add_argument("--seconds", type=float, default=6.0,
                    help="load per round, s (default 6; three rounds a seed)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="server lives per seed, each --fsync mode in turn (default 3)")
    ap.add_argument("--threads", type=int, default=4, help="API client threads (default 4)")
    ap.add_argument("--max-seconds", type=float, default=600,
                    help="stop starting seeds after this long (default 600)")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    seeds = [a.seed]
    if a.seeds:
        lo, hi = (int(x) for x in a.seeds.split("-"))
        seeds = list(range(lo, hi + 1))
    harness.check_binary()
    os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    os.environ.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
    if harness.OPENAPI_CHECK:
        import openapi_check
        openapi_check.contract()       # loaded once, before the threads
    workdir = tempfile.mkdtemp(prefix="eventd-chaos-")
    failures = []
    t0 = time.monotonic()
    try:
        for seed in seeds:
            if time.monotonic() - t0 > a.max_seconds:
                print("time bound reached before seed %d" % seed)
                break
            order = list(MODES)
            random.Random(seed).shuffle(order)
            for rnd in range(a.rounds):
                rd = Round(seed, rnd, order[rnd % 3], a.seconds, a.threads, a.verbose)
                try:
                    rd.run(workdir)
                except HarnessError as e:
                    rd.fail("harness: %s" % e)
                failures += rd.failures
                for f in rd.failures:
                    print("FAIL " + f, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("chaos: %d failure(s) over %d seed(s), %.0f s" % (len(failures), len(seeds),
                                                          time.monotonic() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
