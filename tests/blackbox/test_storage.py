#!/usr/bin/env python3
"""eventd storage and identity, black box: the user CLI, keys never stored in
clear, the directory lock, the demo user, kill -9 durability, torn and
damaged logs, compaction (offline and SIGUSR1), fsync modes, and the
EVENTD_FAULT_FSYNC_AFTER fault-injection hook."""

import base64
import concurrent.futures
import glob
import http.client
import os
import queue
import random
import re
import shutil
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from apiclient import (Client, ManagedDir, OutServer, add_user, run_cli,  # noqa: E402
                       run_expect_exit, serve_args)

import struct  # noqa: E402

KEY_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")
LOG = "eventd.log"


def user_names(data_dir):
    cp = run_cli(["user", "list", "--data", data_dir])
    if cp.returncode != 0:
        raise AssertionError("user list failed: %r %r" % (cp.stdout, cp.stderr))
    names = []
    for line in cp.stdout.splitlines():
        toks = line.split()
        if not toks or toks[-1] == "NAME":
            continue
        names.append(toks[-1])
    return cp.stdout, names


def status_of(port, user, key, method="GET", path="/v2/theme"):
    return harness.request(port, method, path,
                           headers={"Authorization": harness.auth_header(user, key)}).status


class Dir(unittest.TestCase):
    def mkdir(self):
        d = ManagedDir(prefix="eventd-bb-st-")
        self.addCleanup(d.cleanup)
        return d

    def server(self, d, *extra, env=None):
        return harness.Server(data_dir=d.path, extra_args=list(extra), env=env)

    def snapshot(self, c, kinds=("theme", "address", "event")):
        """Every GET body of every record and list of this client."""
        out = {}
        for kind in kinds:
            r = c.list(kind, "limit=500")
            self.assertEqual(r.status, 200, r.describe())
            out[kind] = r.body
            for item in r.result()["Items"]:
                g = c.get(kind, item["ID"])
                self.assertEqual(g.status, 200, g.describe())
                out["%s/%d" % (kind, item["ID"])] = g.body
        return out


# ---------------------------------------------------------------------------
class UserCli(Dir):
    def test_user_add_prints_key(self):
        d = self.mkdir()
        keys = set()
        for name in ("alice", "bob", "a.b_c-D9", "x" * 64):
            cp = run_cli(["user", "add", name, "--data", d.path])
            self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
            lines = [l.strip() for l in cp.stdout.splitlines() if l.strip()]
            self.assertTrue(lines, cp.stdout)
            key = lines[-1]
            self.assertRegex(key, KEY_RE)
            self.assertEqual(len(base64.urlsafe_b64decode(key + "=")), 32)
            keys.add(key)
        self.assertEqual(len(keys), 4, "keys must differ")
        out, names = user_names(d.path)
        self.assertEqual(sorted(names), sorted(["alice", "bob", "a.b_c-D9", "x" * 64]), out)

    def test_user_add_existing_fails(self):
        d = self.mkdir()
        k = add_user(d.path, "alice")
        cp = run_cli(["user", "add", "alice", "--data", d.path])
        self.assertNotEqual(cp.returncode, 0, cp.stdout)
        self.assertFalse(KEY_RE.match((cp.stdout.strip().splitlines() or [""])[-1]), cp.stdout)
        with self.server(d) as srv:
            self.assertEqual(status_of(srv.port, "alice", k), 200, "the first key still works")

    def test_bad_usernames_exit_2(self):
        d = self.mkdir()
        for name in ("a:b", "", "a b", "x" * 65, "é", "a/b", "a\tb", "a@b"):
            with self.subTest(name=name):
                cp = run_cli(["user", "add", name, "--data", d.path])
                self.assertEqual(cp.returncode, 2, (cp.stdout, cp.stderr))
        out, names = user_names(d.path)
        self.assertEqual(names, [], out)

    def test_rotate_remove_list(self):
        d = self.mkdir()
        ka = add_user(d.path, "alice")
        kb = add_user(d.path, "bob")
        with self.server(d) as srv:
            c = Client(srv.port, "alice", ka)
            t = c.must_create("theme", {"Name": "mine"})
            c.close()
        cp = run_cli(["user", "rotate", "alice", "--data", d.path])
        self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
        ka2 = cp.stdout.strip().splitlines()[-1].strip()
        self.assertRegex(ka2, KEY_RE)
        self.assertNotEqual(ka2, ka)
        cp = run_cli(["user", "remove", "bob", "--data", d.path])
        self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
        out, names = user_names(d.path)
        self.assertEqual(names, ["alice"], out)
        for cmd in (["user", "rotate", "nobody"], ["user", "remove", "nobody"],
                    ["user", "remove", "bob"]):
            cp = run_cli(cmd + ["--data", d.path])
            self.assertNotEqual(cp.returncode, 0, (cmd, cp.stdout, cp.stderr))
        with self.server(d) as srv:
            self.assertEqual(status_of(srv.port, "alice", ka2), 200, "new key works")
            self.assertEqual(status_of(srv.port, "alice", ka), 401, "old key refused")
            self.assertEqual(status_of(srv.port, "bob", kb), 401, "removed user refused")
            c = Client(srv.port, "alice", ka2)
            self.assertEqual(c.must_get("theme", t["ID"]), t, "records survive a key rotation")
            c.close()

    def test_key_never_stored_in_clear(self):
        d = self.mkdir()
        keys = [add_user(d.path, u) for u in ("alice", "bob", "carol")]
        cp = run_cli(["user", "rotate", "bob", "--data", d.path])
        self.assertEqual(cp.returncode, 0)
        keys.append(cp.stdout.strip().splitlines()[-1])
        with self.server(d) as srv:
            c = Client(srv.port, "alice", keys[0])
            c.must_create("theme", {"Name": "x"})
            c.close()
            for k, u in ((keys[3], "bob"), (keys[2], "carol"), (keys[1], "bob")):
                status_of(srv.port, u, k)
            srv.stop()
            logs = srv.stderr_text()
        cp = run_cli(["compact", "--data", d.path])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        files = []
        for root, _, names in os.walk(d.path):
            files += [os.path.join(root, n) for n in names]
        self.assertTrue(files)
        for k in keys:
            raw = base64.urlsafe_b64decode(k + "=")
            for f in files:
                with open(f, "rb") as fh:
                    data = fh.read()
                self.assertNotIn(k.encode(), data, "key in clear in %s" % f)
                self.assertNotIn(raw, data, "raw key bytes in %s" % f)
            self.assertNotIn(k, logs, "key in the server log")


class Lock(Dir):
    def test_second_process_refused(self):
        """A second server, or an offline compaction, on a running server's
        directory is refused. (The user commands are not: they go through
        the running server's admin socket; see test_admin.py.)"""
        d = self.mkdir()
        add_user(d.path, "alice")
        with self.server(d) as srv:
            for args in (serve_args(d.path), ["compact", "--data", d.path]):
                with self.subTest(args=args[:2]):
                    rc, out, err, secs = run_expect_exit(args, timeout=8)
                    self.assertIsNotNone(rc, "%r kept running while the dir was locked" % args)
                    self.assertNotEqual(rc, 0, (out, err))
                    self.assertIn("in use", out + err)
                    self.assertLess(secs, 5)
            # Without the admin socket (--no-admin) the user commands meet the lock too.
            self.assertTrue(srv.running())
            self.assertEqual(srv.stop(), 0)
        with self.server(d, "--no-admin") as srv:
            rc, out, err, secs = run_expect_exit(["user", "add", "x", "--data", d.path],
                                                 timeout=8)
            self.assertEqual(rc, 1, (out, err))
            self.assertIn("in use", out + err)
            self.assertEqual(srv.stop(), 0)
        out, names = user_names(d.path)
        self.assertEqual(names, ["alice"], "the refused user add must not have added x")
        self.assertRegex(add_user(d.path, "x"), KEY_RE)


class DemoUser(Dir):
    def test_demo_user_created_once(self):
        d = self.mkdir()
        with OutServer(data_dir=d.path, demo=True) as srv:
            harness.wait_until(lambda: "curl" in srv.stdout_text(), 3)
            out = srv.stdout_text()
            # stdout is a pipe here, as in a container: the key goes to a file, never the log
            self.assertFalse(re.search(r"[A-Za-z0-9_-]{43}", out), out)
            keyfile = os.path.join(d.path, "demo-user.key")
            self.assertIn("curl -u demo:$(cat %s)" % keyfile, out)
            self.assertEqual(os.stat(keyfile).st_mode & 0o777, 0o600)
            with open(keyfile) as f:
                key = f.read().strip()
            self.assertRegex(key, r"^[A-Za-z0-9_-]{43}$")
            name = "demo"
            self.assertIn("http://127.0.0.1:%d/v2/theme" % srv.port, out,
                          "the curl command names the real address and the API path")
            c = Client(srv.port, name, key)
            c.must_create("theme", {"Name": "first"})
            c.close()
            self.assertEqual(srv.stop(), 0)
        with OutServer(data_dir=d.path, demo=True) as srv:
            self.assertEqual(status_of(srv.port, name, key), 200)
            self.assertEqual(srv.stop(), 0)
            srv.read_to_end()  # all it printed, not what it printed so far
            out2 = srv.stdout_text()
            self.assertNotIn("curl", out2)
            self.assertFalse(re.search(r"[A-Za-z0-9_-]{43}", out2), out2)
        out, names = user_names(d.path)
        self.assertEqual(names, ["demo"], out)

    def test_the_key_file_is_new_mode_0600_and_never_written_through_a_symlink(self):
        # Review, 2026-11-28: an existing file kept its mode (0644), and a symlink
        # planted under the name had its target overwritten with the key.
        for planted in ("file", "symlink"):
            with self.subTest(planted=planted):
                d = self.mkdir()
                keyfile = os.path.join(d.path, "demo-user.key")
                victim = os.path.join(d.path, "victim")
                with open(victim, "w") as f:
                    f.write("important\n")
                os.chmod(victim, 0o644)
                if planted == "file":
                    os.rename(victim, keyfile)
                else:
                    os.symlink(victim, keyfile)
                with OutServer(data_dir=d.path, demo=True) as srv:
                    self.assertTrue(harness.wait_until(lambda: "curl" in srv.stdout_text(), 3))
                    self.assertEqual(srv.stop(), 0)
                self.assertFalse(os.path.islink(keyfile))
                self.assertEqual(os.stat(keyfile).st_mode & 0o777, 0o600)
                with open(keyfile) as f:
                    self.assertRegex(f.read().strip(), r"^[A-Za-z0-9_-]{43}$")
                if planted == "symlink":
                    with open(victim) as f:
                        self.assertEqual(f.read(), "important\n")

    def test_a_removed_demo_user_stays_removed(self):
        # Review, 2026-11-28: "no users" brought demo back at the next start.
        d = self.mkdir()
        with OutServer(data_dir=d.path, demo=True) as srv:
            self.assertTrue(harness.wait_until(lambda: "curl" in srv.stdout_text(), 3))
            self.assertEqual(srv.stop(), 0)
        cp = run_cli(["user", "remove", "demo", "--data", d.path])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        with OutServer(data_dir=d.path, demo=True) as srv:
            self.assertEqual(srv.stop(), 0)
            srv.read_to_end()
            self.assertNotIn("curl", srv.stdout_text())
        out, names = user_names(d.path)
        self.assertEqual(names, [], out)

    def test_no_demo_user_when_users_exist(self):
        d = self.mkdir()
        add_user(d.path, "alice")
        with OutServer(data_dir=d.path, demo=True) as srv:
            srv.stop()
            srv.read_to_end()  # all it printed, not what it printed so far
            self.assertNotIn("curl", srv.stdout_text())
        out, names = user_names(d.path)
        self.assertEqual(names, ["alice"], out)


class Kill9(Dir):
    """kill -9 at seeded random moments while several connections write.

    Each thread creates records and updates its own ones, so the value a
    record must have is known: its last acknowledged one, or the one of the
    single update still in flight at the kill (it may or may not have
    reached the disk). EVENTD_TEST_SEED changes the seed."""

    SEED = int(os.environ.get("EVENTD_TEST_SEED", "20261124"))
    # A soak run raises these (docs/RELIABILITY.md): EVENTD_KILL9_ROUNDS=200 ...
    ROUNDS = int(os.environ.get("EVENTD_KILL9_ROUNDS", "20"))
    THREADS = 4
    ROUND_SECONDS = 2.0       # a round kills at the latest this long after it starts

    def kill_round(self, srv, key, rng, rnd, state, creates_only=False):
        """Writes from THREADS connections until a random number of acks,
        then kill -9. Returns the acks of this round [(id, record)]."""
        target = rng.randint(1, 60)
        lock = threading.Lock()
        acks = []
        stop = threading.Event()
        errors = []
        seeds = [rng.random() for _ in range(self.THREADS)]

        def worker(n):
            wr = random.Random(seeds[n])
            c = Client(srv.port, "alice", key, timeout=3)
            try:
                for i in range(10000):
                    if stop.is_set():
                        return
                    mine = state["owned"][n]
                    if creates_only or not mine or wr.random() < 0.4:
                        fields = {"Name": "r%d t%d i%d" % (rnd, n, i),
                                  "Status": "s%d" % wr.randint(0, 9)}
                        with lock:
                            state["maybe_created"][fields["Name"]] = fields
                        r = c.create("theme", fields)
                        if r.status != 200:
                            errors.append(r.describe())
                            return
                        rec = r.result()
                        with lock:
                            del state["maybe_created"][fields["Name"]]
                            state["acked"][rec["ID"]] = rec
                            mine.append(rec["ID"])
                            acks.append((rec["ID"], rec))
                    else:
                        rid = wr.choice(mine)
                        fields = {"Name": "r%d t%d i%d upd" % (rnd, n, i),
                                  "PageBackgroundRGB": "%06x" % wr.randint(0, 0xffffff)}
                        new = dict(state["acked"][rid])
                        new.update(fields)
                        with lock:
                            state["maybe_updated"][rid] = new
                        r = c.update("theme", rid, fields)
                        if r.status != 204:
                            errors.append(r.describe())
                            return
                        with lock:
                            del state["maybe_updated"][rid]
                            state["acked"][rid] = new
                            acks.append((rid, new))
            except (OSError, http.client.HTTPException):
                return          # the server was killed
            finally:
                c.close()

        ths = [threading.Thread(target=worker, args=(n,), daemon=True)
               for n in range(self.THREADS)]
        for t in ths:
            t.start()
        reached = harness.wait_until(lambda: len(acks) >= target or errors,
                                     self.ROUND_SECONDS, 0.001)
        writing = sum(t.is_alive() for t in ths)
        srv.proc.send_signal(signal.SIGKILL)
        srv.wait(5)
        stop.set()
        for t in ths:
            t.join(timeout=6)
        self.assertFalse(any(t.is_alive() for t in ths), "round %d: workers did not stop" % rnd)
        self.assertEqual(errors, [], "round %d" % rnd)
        self.assertTrue(reached, "round %d: %d of %d acks within %.1fs"
                        % (rnd, len(acks), target, self.ROUND_SECONDS))
        self.assertEqual(writing, self.THREADS, "round %d: writers had stopped before the kill"
                         % rnd)
        return acks

    def check_after_kill(self, c, state, rnd):
        """Every acknowledged record with its acknowledged value (or the one
        of its update in flight at the kill); nothing nobody sent."""
        got = {x["ID"]: x for x in c.list_all("theme", limit=500, max_pages=1000)}
        for rid, rec in sorted(state["acked"].items()):
            self.assertIn(rid, got, "round %d: acknowledged record %d lost after kill -9"
                          % (rnd, rid))
            if got[rid] != rec:
                self.assertEqual(got[rid], state["maybe_updated"].get(rid),
                                 "round %d: record %d has neither its acknowledged value %r "
                                 "nor the in-flight one" % (rnd, rid, rec))
                state["acked"][rid] = got[rid]      # the in-flight update made it
        for rid in sorted(set(got) - set(state["acked"])):
            x = got[rid]
            sent = state["maybe_created"].get(x["Name"])
            self.assertIsNotNone(sent, "round %d: record %r nobody had in flight" % (rnd, x))
            for k, v in sent.items():
                self.assertEqual(x[k], v)
            state["acked"][rid] = x                 # the in-flight create made it
            n = int(re.match(r"r\d+ t(\d+) ", x["Name"]).group(1))
            state["owned"][n].append(rid)
        state["maybe_created"].clear()
        state["maybe_updated"].clear()

    def new_state(self):
        return {"acked": {}, "owned": [[] for _ in range(self.THREADS)],
                "maybe_created": {}, "maybe_updated": {}}

    def test_always_acknowledged_writes_survive_kill9_rounds(self):
        rng = random.Random(self.SEED)
        d = self.mkdir()
        key = add_user(d.path, "alice")
        state = self.new_state()
        for rnd in range(self.ROUNDS):
            with self.server(d, "--fsync", "always") as srv:
                c = Client(srv.port, "alice", key, timeout=3)
                try:
                    self.check_after_kill(c, state, rnd)
                finally:
                    c.close()
                self.kill_round(srv, key, rng, rnd, state)
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key, timeout=3)
            try:
                self.check_after_kill(c, state, self.ROUNDS)
                new = c.must_create("theme", {"Name": "after"})
                self.assertGreater(new["ID"], max(state["acked"]))
            finally:
                c.close()
        if "EVENTD_KILL9_ROUNDS" in os.environ:
            print("kill -9 soak (always): %d rounds, %d records acknowledged, every one present "
                  "with its last acknowledged value" % (self.ROUNDS, len(state["acked"])))

    def test_interval_ids_never_reused_after_kill9(self):
        rng = random.Random(self.SEED + 1)
        d = self.mkdir()
        key = add_user(d.path, "alice")
        state = self.new_state()
        top = 0                  # the highest id ever acknowledged
        reused = []
        rounds = max(10, self.ROUNDS // 2)
        for rnd in range(rounds + 1):
            with self.server(d, "--fsync", "interval") as srv:
                if rnd == rounds:
                    c = Client(srv.port, "alice", key, timeout=3)
                    new = [c.must_create("theme", {"Name": "last"})["ID"]]
                    c.close()
                else:
                    new = [rid for rid, _ in self.kill_round(srv, key, rng, rnd, state,
                                                             creates_only=True)]
                low = [rid for rid in new if rid <= top]
                if low:
                    reused.append("start %d, after kill -9: ids %s handed out again (highest "
                                  "acknowledged before the kill: %d)" % (rnd, low[:5], top))
                top = max([top] + new)
        self.assertFalse(reused, "%d of %d restarts after kill -9 reused ids:\n%s"
                         % (len(reused), rounds, "\n".join(reused)))
        if "EVENTD_KILL9_ROUNDS" in os.environ:
            print("kill -9 soak (interval): %d rounds, highest id %d, no id handed out twice"
                  % (rounds, top))


class TornBase(Dir):
    def read(self, d):
        with open(d.file(LOG), "rb") as f:
            return f.read()

    def write(self, d, data):
        with open(d.file(LOG), "wb") as f:
            f.write(data)

    def populate(self, d, n=5, kind="theme"):
        key = add_user(d.path, "alice")
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            recs = [c.must_create(kind, {"Name": "r%d" % i, "Status": "s%d" % i})
                    for i in range(n)]
            c.close()
            self.assertEqual(srv.stop(), 0)
        return key, recs

    def check(self, srv, key, present, absent=()):
        c = Client(srv.port, "alice", key)
        try:
            for r in present:
                self.assertEqual(c.must_get("theme", r["ID"]), r)
            for r in absent:
                self.assertEqual(c.get("theme", r["ID"]).status, 404)
        finally:
            c.close()

    def write_and_restart(self, d, key, recs):
        """After a recovery: a new write persists and the next start is clean."""
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            new = c.must_create("theme", {"Name": "post-recovery"})
            c.close()
            self.assertEqual(srv.stop(), 0)
        with self.server(d) as srv:
            self.check(srv, key, recs + [new])
            err = srv.stderr_text()
            self.assertNotRegex(err, r"(?i)\bwarn", "second start after recovery: %s" % err)


def damaged_copy(path, log):
    """The bytes an eventd.log.damaged-* file holds after its header, which must be
    the header of the log image they were cut from (its frame key: docs/STORAGE.md);
    None if it is not."""
    with open(path, "rb") as f:
        data = f.read()
    return data[16:] if data[:16] == bytes(log[:16]) else None


def read_log(d):
    with open(d.file(LOG), "rb") as f:
        return f.read()


def record_frames(data):
    """The frames of records: not the reservations of ids (REC_NEXT_ID, 17) and of revs
    (REC_REV_FLOOR, 22), nor the store's sync marks (24)."""
    return [f for f in frames(data) if f[2] not in (17, 22, SYNC_MARK)]


class Preallocation(TornBase):
    """--log-prealloc-bytes (docs/STORAGE.md, "Preallocation"): in always mode the server
    keeps zeros written past the log's end, a kill -9 leaves them, the next start takes
    them for the log's end, and a clean stop cuts them off."""

    def file_size(self, d):
        return os.path.getsize(d.file(LOG))

    def test_zeros_ahead_survive_a_kill_and_a_clean_stop_cuts_them(self):
        d = self.mkdir()
        key = add_user(d.path, "alice")
        with self.server(d, "--log-prealloc-bytes", "100000") as srv:
            c = Client(srv.port, "alice", key)
            recs = [c.must_create("theme", {"Name": "t%d" % i}) for i in range(30)]
            c.close()
            end = harness.log_bytes(srv.port)
            # 100000 rounded up to 4 KiB, after a 64 KiB gap past the log's end at start
            self.assertTrue(harness.wait_until(lambda: self.file_size(d) > end + 98304, 5.0),
                            (self.file_size(d), end))
            with open(d.file(LOG), "rb") as f:
                self.assertFalse(any(f.read()[end:]))
            self.assertEqual(harness.request(srv.port, "GET", "/metrics").body.decode().count(
                "\neventd_log_prealloc_bytes %d\n" % (self.file_size(d) - end)), 1)
            srv.send_signal(signal.SIGKILL)
            srv.wait(5)
        with self.server(d) as srv:
            self.assertRegex(srv.stderr_text(), r"(?m)^\S+ info store: \S+ ended in \d+ zero "
                             r"bytes at offset %d " % end)
            self.assertNotRegex(srv.stderr_text(), r"(?m)^\S+ (warn|error) ")
            c = Client(srv.port, "alice", key)
            for r in recs:
                self.assertEqual(c.must_get("theme", r["ID"]), r)
            c.must_create("theme", {"Name": "after"})
            c.close()
            self.assertGreater(self.file_size(d), harness.log_bytes(srv.port))
            self.assertEqual(srv.stop(), 0)
        # the file ends with the log's last frame (the stop's reservations came after "after")
        with open(d.file(LOG), "rb") as f:
            log = f.read()
        last = frames(log)[-1]
        self.assertEqual(last[0] + 9 + last[1], len(log))
        self.assertEqual(glob.glob(d.file(LOG + ".damaged-*")), [])

    def copies_under_writers(self, n, pause, copy, *args):
        """Starts a server on a new directory with args, four writers creating themes,
        and makes n copies of its log, pause seconds apart, with copy(data_dir, out_dir).
        Returns (alice's key, [(out_dir, themes acknowledged before that copy began)])."""
        d = self.mkdir()
        key = add_user(d.path, "alice")
        acked, lock, stop, copies = [], threading.Lock(), threading.Event(), []

        def writer(w):
            c = Client(srv.port, "alice", key)
            for i in range(3000):
                if stop.is_set():
                    break
                r = c.must_create("theme", {"Name": "w%d-%d" % (w, i)})
                with lock:
                    acked.append(r)
            c.close()

        with self.server(d, *args) as srv:
            ths = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
            for t in ths:
                t.start()
            try:
                for _ in range(n):
                    time.sleep(pause)
                    with lock:
                        before = list(acked)
                    out = self.mkdir()
                    copy(d, out)
                    copies.append((out, before))
            finally:
                stop.set()
                for t in ths:
                    t.join(30)
        self.assertTrue(all(before for _, before in copies), "no theme before a copy")
        return key, copies

    def assert_copy_holds(self, out, before, key, quiet):
        """A server starts on out (a refused start raises) and holds every theme of
        before as acknowledged; quiet: with no warning line."""
        with self.server(out) as srv:
            if quiet:
                self.assertNotRegex(srv.stderr_text(), r"(?m)^\S+ (warn|error) ")
            c = Client(srv.port, "alice", key)
            got = {r["ID"]: r for r in c.list_all("theme", limit=500, max_pages=1000)}
            c.close()
            for r in before:
                self.assertEqual(got.get(r["ID"]), r)

    def test_a_copy_taken_while_writing_without_preallocation_starts(self):
        # docs/STORAGE.md "Operating notes": a running server's log copied with cp is a
        # crash image when --log-prealloc-bytes is 0, since the reader stops at the file's
        # end, never in zeros ahead of the writer (review, 2026-11-29: with them, a slow
        # copier read zeros, then later frames under a sync mark past them, and the copy
        # was refused as damaged). Three slow copies (4 KiB a millisecond, up to the size
        # at their start) while four writers create themes: each starts (cutting a torn
        # append, perhaps), and holds every theme acknowledged before it began.
        def slow_cp(d, out):
            with open(d.file(LOG), "rb") as src, open(out.file(LOG), "wb") as dst:
                end = os.fstat(src.fileno()).st_size
                while src.tell() < end:
                    b = src.read(4096)
                    if not b:
                        break
                    dst.write(b)
                    time.sleep(0.001)

        key, copies = self.copies_under_writers(3, 0.2, slow_cp, "--log-prealloc-bytes", "0")
        for out, before in copies:
            self.assert_copy_holds(out, before, key, quiet=False)

    def test_backup_while_writing_starts_as_it_is(self):
        # eventd backup (docs/STORAGE.md "Operating notes"): the copy a plain cp of a
        # preallocating server cannot be. Five backups while four writers create themes,
        # preallocation on (always's default): each is a prefix cut at a frame's end, so
        # a server starts on it with no warning at all, and holds every theme
        # acknowledged before its backup began, as acknowledged.
        def backup(d, out):
            cp = run_cli(["backup", out.file(LOG), "--data", d.path])
            self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
            self.assertRegex(cp.stdout, r"^backed up \S+ to \S+: \d+ bytes, \d+ frames")

        key, copies = self.copies_under_writers(5, 0.15, backup)
        # Not over a file that exists: exit 1, the file as it was.
        with open(copies[0][0].file(LOG), "rb") as f:
            first = f.read()
        cp = run_cli(["backup", copies[0][0].file(LOG), "--data", copies[0][0].path])
        self.assertEqual(cp.returncode, 1, (cp.stdout, cp.stderr))
        self.assertIn("exists: a backup goes to a new file", cp.stderr)
        with open(copies[0][0].file(LOG), "rb") as f:
            self.assertEqual(f.read(), first)
        for out, before in copies:
            self.assert_copy_holds(out, before, key, quiet=True)

    def test_backup_ends_while_writes_go_on(self):
        # A backup waits 100 ms in all for frames not intact yet, then ends: it does not
        # follow a server that keeps writing (review, 2026-11-29: with a create every
        # 50 ms, the first version was still copying after 20 s).
        d = self.mkdir()
        key = add_user(d.path, "alice")
        stop = threading.Event()
        with self.server(d) as srv:
            def writer():
                c = Client(srv.port, "alice", key)
                for i in range(400):
                    if stop.wait(0.02):
                        break
                    c.must_create("theme", {"Name": "t%d" % i})
                c.close()
            th = threading.Thread(target=writer)
            th.start()
            try:
                time.sleep(0.3)
                out = self.mkdir()
                start = time.monotonic()
                cp = run_cli(["backup", out.file(LOG), "--data", d.path], timeout=30)
                took = time.monotonic() - start
            finally:
                stop.set()
                th.join(30)
            self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
            self.assertLess(took, 4.0, "the backup followed the writer")
        with self.server(out):
            pass

    def test_backup_of_a_damaged_log_fails_naming_the_offset(self):
        # Intact frames after a bad one are damage (or a crash's unsynced tail): a backup
        # ending there would drop them unsaid (review, 2026-11-29: 48 of 100 themes, exit
        # 0). It fails, names the offset, and leaves no file.
        d = self.mkdir()
        key = add_user(d.path, "alice")
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            for i in range(100):
                c.must_create("theme", {"Name": "t%d" % i})
            c.close()
            self.assertEqual(srv.stop(), 0)
        with open(d.file(LOG), "rb") as f:
            log = bytearray(f.read())
        off, n, _ = frames(bytes(log))[len(frames(bytes(log))) // 2]
        log[off + 9 + n // 2] ^= 0x10
        with open(d.file(LOG), "wb") as f:
            f.write(log)
        out = self.mkdir()
        cp = run_cli(["backup", out.file(LOG), "--data", d.path])
        self.assertEqual(cp.returncode, 1, (cp.stdout, cp.stderr))
        self.assertIn("has intact frames after offset %d, where the copy would end" % off,
                      cp.stderr)
        self.assertEqual(os.listdir(out.path), [])

    def test_backup_refuses_what_is_not_a_log(self):
        d = self.mkdir()
        with open(d.file(LOG), "wb") as f:
            f.write(b"not a log at all, just some bytes")
        out = self.mkdir()
        cp = run_cli(["backup", out.file("copy"), "--data", d.path])
        self.assertEqual(cp.returncode, 1, (cp.stdout, cp.stderr))
        self.assertIn("not an eventd log", cp.stderr)
        self.assertFalse(os.path.exists(out.file("copy")))
        cp = run_cli(["backup", "--data", d.path])
        self.assertEqual(cp.returncode, 2, (cp.stdout, cp.stderr))
        self.assertIn("usage: eventd backup FILE", cp.stderr)

    def test_none_outside_always_nor_with_0(self):
        for args in (["--fsync", "interval"], ["--fsync", "never"],
                     ["--log-prealloc-bytes", "0"]):
            with self.subTest(args=args):
                d = self.mkdir()
                key = add_user(d.path, "alice")
                with self.server(d, *args) as srv:
                    c = Client(srv.port, "alice", key)
                    for i in range(30):
                        c.must_create("theme", {"Name": "t%d" % i})
                    c.close()
                    time.sleep(0.3)  # room for a job that should not run
                    end = harness.log_bytes(srv.port)
                    self.assertEqual(self.file_size(d), end)

    def test_a_disk_without_room_for_them_keeps_the_guards_margin(self):
        # A 4 MiB file system with a 2 MiB guard margin: one 1 MiB job of zeros fits above
        # the margin, the next would eat into it.
        fs = harness.Tmpfs("4m")
        self.addCleanup(fs.close)
        key = add_user(fs.path, "alice")
        with harness.Server(data_dir=fs.path, extra_args=["--log-prealloc-bytes", "4194304",
                                                        "--min-free-disk-bytes", "2097152"]) as srv:
            c = Client(srv.port, "alice", key)
            c.must_create("theme", {"Name": "t"})
            c.close()
            self.assertTrue(harness.wait_until(
                lambda: "could not preallocate" in srv.stderr_text(), 5.0), srv.stderr_text())
            self.assertRegex(srv.stderr_text(), r"(?m)^\S+ info store: could not preallocate "
                             r"1048576 bytes at offset \d+ of \S+: the disk has too little free "
                             r"space; appending without, trying again every 10 s$")
            st = os.statvfs(fs.path)
            self.assertGreaterEqual(st.f_bavail * st.f_frsize, 2097152)

    def test_a_batch_caught_half_written_is_cut_as_the_unsynced_tail(self):
        # What a power loss during a batch's sync over the zeros, or a copy taken while the
        # server writes, can leave: the batch's first sector never written (zeros from its
        # sync mark to the sector's end), the rest of its frame on disk, then the zeros
        # ahead. No sync mark after it says it was durable: it was never acknowledged, and
        # the start cuts it, copied aside (docs/STORAGE.md, "Replay"). Until format 3
        # this refused to start until --repair.
        d = self.mkdir()
        key = add_user(d.path, "alice")
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            recs = [c.must_create("theme", {"Name": "r%d" % i}) for i in range(5)]
            last = c.must_create("theme", {"Name": "n" * 255, "Status": "s" * 255})
            c.close()
            srv.send_signal(signal.SIGKILL)  # no stop's give-backs after the last batch
            srv.wait(5)
        data = self.read(d)
        fr = frames(data)
        mark, rec = fr[-2][0], fr[-1]
        self.assertEqual((fr[-2][2], rec[2]), (SYNC_MARK, 20))
        end = (mark // 512 + 1) * 512
        used = rec[0] + 9 + rec[1]
        self.assertLess(end, used, "frame bytes after the lost sector")
        self.assertFalse(any(data[used:]), "the zeros ahead")
        self.assertGreater(len(data) - used, 65536)
        self.write(d, data[:mark] + b"\0" * (end - mark) + data[end:])
        with self.server(d) as srv:
            self.assertRegex(srv.stderr_text(), r"(?m)^\S+ warn store: cut an unsynced tail of "
                             r"%d bytes at offset %d of \S+ \(a sector the disk never got, no "
                             r"sync mark after it\); copied to eventd.log.damaged-%d \(the zeros "
                             r"after it cut, not copied\)$" % (used - mark, mark, mark))
            self.check(srv, key, recs, [last])
            self.assertEqual(srv.stop(), 0)
        self.assertEqual(damaged_copy(d.file(LOG + ".damaged-%d" % mark), data),
                         b"\0" * (end - mark) + data[end:used])
        self.write_and_restart(d, key, recs)

    def test_a_hole_under_a_later_sync_mark_is_refused_and_repair_keeps_the_rest(self):
        # The same hole of zeros (from a frame's start to a sector boundary, then the rest
        # of the frames) in the middle of the log: the batches after it start with sync
        # marks saying that it was durable, so it is damage, not a crash's tail.
        d = self.mkdir()
        key = add_user(d.path, "alice")
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            recs = [c.must_create("theme", {"Name": "r%d" % i, "Status": "x" * 200})
                    for i in range(30)]
            c.close()
            self.assertEqual(srv.stop(), 0)
        with open(d.file(LOG), "rb") as f:
            data = f.read()
        fr = frames(data)
        hole = fr[len(fr) // 2][0]
        end = (hole // 512 + 2) * 512
        nxt = [o for o, n, t in fr if o >= end][0]
        self.assertLess(end, fr[-1][0])
        with open(d.file(LOG), "wb") as f:
            f.write(data[:hole] + b"\0" * (end - hole) + data[end:] + b"\0" * 65536)
        rc, out, err, secs = run_expect_exit(serve_args(d.path), timeout=8)
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("is damaged at offset %d (bad checksum)" % hole, err)
        with self.server(d, "--repair") as srv:
            self.assertRegex(srv.stderr_text(), r"(?m)^\S+ warn store: removed %d bytes at "
                             r"offset %d of \S+; copied to eventd.log.damaged-%d$"
                             % (nxt - hole, hole, hole))
            # the last records (their frames after the hole) are kept
            self.check(srv, key, recs[-3:])
            self.assertEqual(srv.stop(), 0)
        self.assertEqual(os.path.getsize(d.file(LOG + ".damaged-%d" % hole)), 16 + nxt - hole)
        # the rewritten log's marks sit before the offsets they name: read as before
        with self.server(d) as srv:
            self.check(srv, key, recs[-3:])
            self.assertNotRegex(srv.stderr_text(), r"(?m)^\S+ (warn|error) ")

    def test_interval_loses_at_most_what_followed_the_last_sync(self):
        # interval mode, no sync during the run: a lost sector among the writes after the
        # start's (written back out of order by a power loss) cuts the log at its frame,
        # with every later write; what the last sync covered stays.
        # written (interval holds a batch up to 2 ms), never synced
        d, key, before, recs, data = self.interval_killed(
            "600000", lambda d: time.sleep(0.2) or True)
        self.assertTrue(all(data.find(r["Name"].encode()) > 0 for r in recs))
        fr = frames(data)
        # the last mark: after the start's syncs (the log it replayed, its reservations of
        # ids and revs), the interval's timer never fired
        started, used = [o for o, n, t in fr if t == SYNC_MARK][-1], fr[-1][0] + 9 + fr[-1][1]
        self.assertGreaterEqual(len([o for o, n, t in fr if o > started and t == 20]), 10)
        hole = (started + used) // 2 // 512 * 512
        self.assertTrue(started < hole and hole + 512 < used, (started, hole, used))
        cut = [o for o, n, t in fr if o <= hole][-1]
        lost = [r for r in recs if data.find(r["Name"].encode()) > cut]
        self.assertTrue(0 < len(lost) < len(recs), (hole, cut))
        self.write(d, data[:hole] + b"\0" * 512 + data[hole + 512:])
        with self.server(d) as srv:
            self.assertRegex(srv.stderr_text(), r"(?m)^\S+ warn store: cut an unsynced tail of "
                             r"\d+ bytes at offset %d " % cut)
            self.check(srv, key, before + [r for r in recs if r not in lost], lost)
            self.assertEqual(srv.stop(), 0)

    def test_interval_marks_its_syncs_so_an_idle_logs_hole_is_damage(self):
        # interval mode, synced, then idle: the mark written after the sync (and synced
        # an interval later) says the writes before it were durable, so a sector lost
        # among them is damage, refused, not a crash's unsynced tail (found by review:
        # with no write after the sync, no mark covered it and the start cut it).
        d, key, before, recs, data = self.interval_killed(
            "50", lambda d: harness.wait_until(lambda: self.synced_marks(d), 5.0))
        hole = (len(data) // 2) // 512 * 512
        self.assertLess(len(frames(data[:hole])), len(frames(data)) - 10)
        self.write(d, data[:hole] + b"\0" * 512 + data[hole + 512:])
        rc, out, err, secs = run_expect_exit(serve_args(d.path), timeout=8)
        self.assertEqual(rc, 1, (out, err))
        self.assertRegex(err, r"is damaged at offset \d+ \(bad checksum\)")

    def interval_killed(self, interval_ms, ready):
        """A log of 3 themes, then 20 made by an interval server, killed with -9 once
        ready(d) is true: (dir, key, the 3, the 20, the log's bytes)."""
        d = self.mkdir()
        key, before = self.populate(d, n=3)
        with self.server(d, "--fsync", "interval", "--fsync-interval-ms", interval_ms) as srv:
            c = Client(srv.port, "alice", key)
            recs = [c.must_create("theme", {"Name": "i%02d" % i, "Status": "x" * 100})
                    for i in range(20)]
            c.close()
            self.assertTrue(ready(d))
            srv.send_signal(signal.SIGKILL)
            srv.wait(5)
        return d, key, before, recs, self.read(d)

    def synced_marks(self, d):
        """The log ends with a mark saying that all before it is durable, after every
        record frame ("i19" the last)."""
        data = self.read(d)
        o, n, t = frames(data)[-1]
        return t == SYNC_MARK and data[o + 9:o + 9 + n] == varint(o) and b"i19" in data[:o]


class TornAndDamaged(TornBase):
    def test_partial_frame_header_appended(self):
        d = self.mkdir()
        key, recs = self.populate(d)
        before = read_log(d)
        with open(d.file(LOG), "ab") as f:
            f.write(b"\xde\xad\xbe\xef\x07")
        with self.server(d) as srv:
            err = srv.stderr_text()
            self.assertRegex(err, r"(?i)warn.*\b5 bytes", err)
            self.check(srv, key, recs)
            self.assertEqual(srv.stop(), 0)
        after = read_log(d)
        self.assertEqual(after[:len(before)], before)
        self.assertEqual([t for _, _, t in frames(after)[len(frames(before)):]],
                         [SYNC_MARK, 17, 22, SYNC_MARK, 17, 22, SYNC_MARK],
                         "the torn bytes were not cut off (then the reservations of ids and "
                         "revs, and their releases, each batch behind its sync mark, and the "
                         "stop's mark)")
        self.assertEqual(damaged_copy(d.file(LOG + ".damaged-%d" % len(before)), before),
                         b"\xde\xad\xbe\xef\x07", "cut bytes are copied aside")
        self.write_and_restart(d, key, recs)

    def test_zero_filled_tail(self):
        d = self.mkdir()
        key, recs = self.populate(d)
        with open(d.file(LOG), "ab") as f:
            f.write(b"\0" * 4096)
        size = os.path.getsize(d.file(LOG)) - 4096
        with self.server(d) as srv:
            # the log's end, as a server that preallocated and was killed leaves it: cut
            # without a warning or a copy (zeros hold nothing)
            self.assertRegex(srv.stderr_text(),
                             r"(?m)^\S+ info store: \S+ ended in 4096 zero bytes at offset %d "
                             r"\(space preallocated by the last server, or an append of which "
                             r"nothing reached the disk\): cut$" % size)
            self.assertNotRegex(srv.stderr_text(), r"(?m)^\S+ (warn|error) ")
            self.check(srv, key, recs)
            self.assertEqual(srv.stop(), 0)
        self.assertEqual(glob.glob(d.file(LOG + ".damaged-*")), [])
        self.write_and_restart(d, key, recs)

    def test_truncated_last_record(self):
        base = self.mkdir()
        key, recs = self.populate(base)
        for cut in (1, 4, 8, 12):
            with self.subTest(cut=cut):
                d = self.mkdir()
                shutil.rmtree(d.path)
                shutil.copytree(base.path, d.path)
                # a crash while the last record was being appended: the log ends inside it
                off, n, _ = record_frames(read_log(d))[-1]
                os.truncate(d.file(LOG), off + 9 + n - cut)
                with self.server(d) as srv:
                    err = srv.stderr_text()
                    self.assertRegex(err, r"(?i)warn.*\d+ bytes", err)
                    m = re.search(r"(\d+) bytes", err.split("warn", 1)[-1])
                    self.assertGreater(int(m.group(1)), 0)
                    self.check(srv, key, recs[:-1], [recs[-1]])
                    self.assertEqual(srv.stop(), 0)
                self.write_and_restart(d, key, recs[:-1])

    def test_flipped_byte_refuses_then_repair(self):
        d = self.mkdir()
        key, recs = self.populate(d, n=20)
        path = d.file(LOG)
        with open(path, "rb") as f:
            data = bytearray(f.read())
        recframes = record_frames(bytes(data))
        off, n, _ = recframes[len(recframes) // 2]
        hit = len(recframes) // 2 - 1  # the user's frame comes first
        pos = off + 9 + n // 2
        data[pos] ^= 0x5A
        with open(path, "wb") as f:
            f.write(data)
        rc, out, err, secs = run_expect_exit(serve_args(d.path), timeout=8)
        self.assertIsNotNone(rc, "server started on a damaged log")
        self.assertNotEqual(rc, 0)
        msg = out + err
        self.assertIn(LOG, msg)
        offsets = [int(x) for x in re.findall(r"\b\d+\b", msg)]
        self.assertTrue([o for o in offsets if 16 <= o <= pos],
                        "no offset of the damage (<= %d) in %r" % (pos, msg))
        with open(path, "rb") as f:
            self.assertEqual(bytes(data), f.read(), "a refused start changed the log")
        self.assertEqual(glob.glob(d.file(LOG + ".damaged-*")), [])
        kept = recs[:hit] + recs[hit + 1:]
        with self.server(d, "--repair") as srv:
            self.assertTrue(srv.running())
            damaged = glob.glob(d.file(LOG + ".damaged-*"))
            self.assertEqual(damaged, [d.file(LOG + ".damaged-%d" % off)], os.listdir(d.path))
            self.assertEqual(damaged_copy(damaged[0], data), bytes(data[off:off + 9 + n]),
                             "exactly the damaged frame is copied aside")
            # --repair skips only the damaged frame: the records after it are kept
            self.check(srv, key, kept, [recs[hit]])
            self.assertRegex(srv.stderr_text(), r"(?i)warn")
            self.assertEqual(srv.stop(), 0)
        # after the repair a normal start works and keeps what survived
        with self.server(d) as srv:
            self.check(srv, key, kept, [recs[hit]])
            srv.stop()
        self.write_and_restart(d, key, kept)


class Compaction(Dir):
    N_UPDATES = 300

    def churn(self, c):
        t = c.must_create("theme", {"Name": "start"})
        a = c.must_create("address", {"City": "start"})
        for i in range(self.N_UPDATES):
            c.must_update("theme", t["ID"], {"Name": "update %d %s" % (i, "x" * 100)})
        c.must_update("address", a["ID"], {"City": "end", "Lat": 1.5})
        e = c.must_create("event", {"Name": "E", "ThemeID": t["ID"], "AddressID": a["ID"]})
        gone = c.must_create("theme", {"Name": "deleted"})
        self.assertEqual(c.delete("theme", gone["ID"]).status, 204)
        return max(t["ID"], a["ID"], e["ID"], gone["ID"])

    def test_offline_compact(self):
        d = self.mkdir()
        key = add_user(d.path, "alice")
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            max_id = self.churn(c)
            before = self.snapshot(c)
            c.close()
            self.assertEqual(srv.stop(), 0)
        size1 = os.path.getsize(d.file(LOG))
        cp = run_cli(["compact", "--data", d.path], timeout=20)
        self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr))
        size2 = os.path.getsize(d.file(LOG))
        self.assertLess(size2, size1 // 4, "compaction did not shrink the log (%d -> %d)"
                        % (size1, size2))
        self.assertFalse(os.path.exists(d.file(LOG + ".compact")))
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            self.assertEqual(self.snapshot(c), before)
            new = c.must_create("theme", {})
            self.assertGreater(new["ID"], max_id, "an id was reused after compaction")
            c.close()
            srv.stop()
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            self.assertEqual(c.must_get("theme", new["ID"]), new)
            c.close()

    def test_automatic_compaction_by_ratio(self):
        # --compact-ratio 2 with a small floor: the churn makes the log many
        # times the live data, so the server compacts on its own.
        d = self.mkdir()
        key = add_user(d.path, "alice")
        with self.server(d, "--compact-ratio", "2", "--compact-min-bytes", "8192") as srv:
            c = Client(srv.port, "alice", key)
            max_id = self.churn(c)
            before = self.snapshot(c)
            started = harness.wait_until(
                lambda: "compaction done" in srv.stderr_text(), 5.0)
            self.assertTrue(started, "no automatic compaction; stderr:\n%s" % srv.stderr_text())
            size = harness.log_bytes(srv.port)
            self.assertLess(size, 8 * 1024 * 4, "log still %d bytes after compacting" % size)
            self.assertEqual(self.snapshot(c), before)
            c.close()
            self.assertEqual(srv.stop(), 0)
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            self.assertEqual(self.snapshot(c), before)
            self.assertGreater(c.must_create("theme", {})["ID"], max_id)
            c.close()
        # --compact-ratio 0 never compacts.
        d2 = self.mkdir()
        key2 = add_user(d2.path, "alice")
        with self.server(d2, "--compact-ratio", "0", "--compact-min-bytes", "0") as srv:
            c = Client(srv.port, "alice", key2)
            self.churn(c)
            c.close()
            srv.stop()
            srv.read_to_end()  # all it logged, not what it logged so far
            self.assertNotIn("compaction", srv.stderr_text())

    def test_online_compact_sigusr1(self):
        d = self.mkdir()
        key = add_user(d.path, "alice")
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            max_id = self.churn(c)
            before = self.snapshot(c)
            size1 = harness.log_bytes(srv.port)
            # keep writing from another connection during the compaction
            acked = {}
            stop = threading.Event()

            def writer():
                wc = Client(srv.port, "alice", key)
                try:
                    for i in range(150):
                        if stop.is_set():
                            return
                        time.sleep(0.002)
                        r = wc.create("address", {"City": "during %d" % i})
                        if r.status != 200:
                            acked[-i - 1] = r.describe()
                            return
                        acked[r.result()["ID"]] = r.result()
                finally:
                    wc.close()

            th = threading.Thread(target=writer, daemon=True)
            th.start()
            # The compaction starts while the writer writes: once its first create is in.
            self.assertTrue(harness.wait_until(lambda: len(acked) >= 1, 5.0), "no write")
            srv.send_signal(signal.SIGUSR1)
            shrunk = harness.wait_until(lambda: harness.log_bytes(srv.port) < size1 // 2, 5.0)
            stop.set()
            th.join(timeout=10)
            self.assertFalse(th.is_alive())
            self.assertTrue(shrunk, "SIGUSR1 did not shrink the log (%d -> %d); stderr:\n%s"
                            % (size1, harness.log_bytes(srv.port), srv.stderr_text()))
            self.assertEqual([v for k, v in acked.items() if k < 0], [])
            self.assertTrue(srv.running())
            snap = self.snapshot(c)
            for k, v in before.items():
                if k != "address":   # the writer added addresses
                    self.assertEqual(snap[k], v, k)
            after = c.must_create("theme", {"Name": "after compaction"})
            self.assertGreater(after["ID"], max_id)
            c.must_update("theme", after["ID"], {"Name": "after compaction, updated"})
            c.close()
            self.assertEqual(srv.stop(), 0)
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            try:
                self.assertEqual(c.must_get("theme", after["ID"])["Name"],
                                 "after compaction, updated")
                for rid, rec in acked.items():
                    self.assertEqual(c.must_get("address", rid), rec)
                snap = self.snapshot(c)
                for k, v in before.items():
                    if k not in ("theme", "address"):   # the lists changed on purpose
                        self.assertEqual(snap[k], v, k)
            finally:
                c.close()


class FsyncModes(Dir):
    def test_interval_and_never_persist_on_sigterm(self):
        for mode, extra in (("interval", ["--fsync-interval-ms", "200"]), ("never", []),
                            ("always", [])):
            with self.subTest(mode=mode):
                d = self.mkdir()
                key = add_user(d.path, "alice")
                with self.server(d, "--fsync", mode, *extra) as srv:
                    self.assertIn(mode, srv.stderr_text())
                    c = Client(srv.port, "alice", key)
                    recs = [c.must_create("theme", {"Name": "%s %d" % (mode, i)})
                            for i in range(20)]
                    a = c.must_create("address", {"City": "c", "Lon": 3})
                    c.must_update("theme", recs[0]["ID"], {"Name": "changed"})
                    self.assertEqual(c.delete("theme", recs[1]["ID"]).status, 204)
                    c.must_create("event", {"Name": "e", "ThemeID": recs[2]["ID"],
                                            "AddressID": a["ID"]})
                    before = self.snapshot(c)
                    c.close()
                    self.assertEqual(srv.stop(), 0)
                with self.server(d) as srv:
                    c = Client(srv.port, "alice", key)
                    self.assertEqual(self.snapshot(c), before)
                    self.assertEqual(c.get("theme", recs[1]["ID"]).status, 404)
                    c.close()


class FaultInjection(Dir):
    """The fault hooks themselves: a hook that injects nothing FAILS these
    tests (a broken hook must show red, never skip). The first N log data
    syncs (or writes) after the server listens succeed, the next one fails,
    and with no EVENTD_FAULT_TIMES every later one fails too. The full
    matrix of modes and faults is in test_faults.py."""

    GOOD = 2

    def run_hook(self, var):
        d = self.mkdir()
        key = add_user(d.path, "alice")
        env = {var: str(self.GOOD), "EVENTD_STORAGE_RETRY_MS": "600000"}
        srv = self.server(d, "--fsync", "always", "--shutdown-timeout-ms", "1000", env=env)
        with srv:
            c = Client(srv.port, "alice", key, timeout=3)
            self.addCleanup(c.close)
            acked = [c.must_create("theme", {"Name": "ok%d" % i}) for i in range(self.GOOD)]
            failed = c.create("theme", {"Name": "lost"})
            self.assertNotEqual(failed.status, 200,
                                "%s=%d injected nothing: write %d succeeded"
                                % (var, self.GOOD, self.GOOD + 1))
            self.assertEqual(failed.status, 503, failed.describe())
            self.assertEqual(failed.error()["Code"], "storage_error", failed.describe())
            self.assertTrue(srv.running(), "the server died after a storage error")
            h = harness.request(srv.port, "GET", "/healthz", timeout=3)
            self.assertEqual(h.status, 503, h)
            r = c.create("address", {"City": "also lost"})
            self.assertEqual(r.status, 503, r.describe())
            self.assertEqual(r.error()["Code"], "storage_error")
            try:
                for rec in acked:
                    self.assertEqual(c.must_get("theme", rec["ID"]), rec)
                self.assertEqual([x["ID"] for x in c.list_all("theme", limit=500)],
                                 [x["ID"] for x in reversed(acked)])
                self.assertEqual(c.list_all("address", limit=500), [])
            except OSError as e:
                self.fail("GET after a storage error: no answer within 3 s (%s)" % e)
            self.assertTrue(srv.running())
            c.close()
            srv.stop(timeout=5)
        # restart without the fault: exactly the acknowledged records
        with self.server(d) as srv2:
            c3 = Client(srv2.port, "alice", key)
            items = c3.list_all("theme", limit=500)
            self.assertEqual(items, list(reversed(acked)))
            self.assertEqual(c3.list_all("address", limit=500), [])
            c3.close()

    def test_fsync_hook_fails_the_sync_after_n_with_503(self):
        self.run_hook("EVENTD_FAULT_FSYNC_AFTER")

    def test_write_hook_fails_the_write_after_n_with_503(self):
        self.run_hook("EVENTD_FAULT_WRITE_AFTER")


# -- the documented log format (docs/STORAGE.md) -------------------------------
def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC_T = _crc_table()


SYNC_MARK = 24  # the store's frame: varint S, the log's first S bytes were durable before it


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _CRC_T[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def frame_key(data):
    """The frame key of a log image: in the header from format 2 on, 0 in format 1."""
    version, key = struct.unpack_from("<II", data, 8)
    return key if version >= 2 else 0


def frames(data):
    """[(offset, length, type)] of the frames of a log image (stops at a bad one)."""
    out, off, key = [], 16, frame_key(data)
    while off + 9 <= len(data):
        crc, n, typ = struct.unpack_from("<IIB", data, off)
        if off + 9 + n > len(data) or crc32c(data[off + 4:off + 9 + n]) ^ key != crc:
            break
        out.append((off, n, typ))
        off += 9 + n
    return out


def frame(typ, payload, key):
    body = struct.pack("<IB", len(payload), typ) + payload
    return struct.pack("<I", crc32c(body) ^ key) + body


class LogFormat(TornBase):
    def refused(self, d, *extra):
        rc, out, err, secs = run_expect_exit(serve_args(d.path, *extra), timeout=8)
        self.assertIsNotNone(rc, "the server started")
        self.assertNotEqual(rc, 0, (out, err))
        return out + err

    def test_a_frame_inside_a_client_string_is_never_taken_for_one(self):
        """A client can put bytes that form a whole frame with a good crc32c into a
        string (control characters are allowed): here a deletion of bob's theme
        (REC_REV 20 around REC_DELETE 16), inside alice's theme name, and a crash
        that tore alice's append just after it. Without the log's frame key those
        bytes are no frame: the start cuts the torn append, --repair applies none."""
        d = self.mkdir()
        ka, kb = add_user(d.path, "alice"), add_user(d.path, "bob")
        with self.server(d) as srv:
            bob = Client(srv.port, "bob", kb)
            theirs = bob.must_create("theme", {"Name": "bob's"})
            self.assertLess(theirs["ID"], 128, "a one-byte varint id")
            inner = next(f for f in (frame(20, bytes([rev, 16, theirs["ID"]]), 0)
                                     for rev in range(1, 128)) if max(f) < 0x80)
            alice = Client(srv.port, "alice", ka)
            alice.must_create("theme", {"Name": "x" * 20 + inner.decode("ascii") + "y" * 100})
            bob.close()
            alice.close()
            self.assertEqual(srv.stop(), 0)
        data = self.read(d)
        at = data.rindex(inner)
        outer = [o for o, _, _ in frames(data) if o < at][-1]
        self.write(d, data[:at + len(inner) + 5])
        for extra in ((), ("--repair",)):
            with self.server(d, *extra) as srv:
                bob = Client(srv.port, "bob", kb)
                self.assertEqual(bob.must_get("theme", theirs["ID"]), theirs)
                bob.close()
                self.assertEqual(srv.stop(), 0)
            self.assertEqual(damaged_copy(d.file(LOG + ".damaged-%d" % outer), data),
                             data[outer:at + len(inner) + 5], "cut where alice's append starts")

    def test_format_1_2_and_3_logs_are_read_and_rewritten_in_format_4_at_once(self):
        for version in (1, 2, 3):
            with self.subTest(version=version):
                self.older_format(version)

    def older_format(self, version):
        d = self.mkdir()
        key, recs = self.populate(d, n=3)
        now = self.read(d)
        fkey = frame_key(now)
        # the same log as eventd wrote it before keys by reference (format 3: the same
        # frames), before sync marks (2), and before frame keys (1)
        data = bytearray(now[:16])
        for off, n, typ in frames(now):
            if typ != SYNC_MARK or version == 3:
                xor = fkey if version == 1 else 0
                data += struct.pack("<I", struct.unpack_from("<I", now, off)[0] ^ xor)
                data += now[off + 4:off + 9 + n]
        struct.pack_into("<II", data, 8, version, 0 if version == 1 else fkey)
        self.write(d, bytes(data))
        if version < 3:
            self.assertEqual(len(frames(bytes(data))), len(record_frames(now)) + 4 * 2)
        with self.server(d) as srv:
            self.assertTrue(harness.wait_until(lambda: "compaction done" in srv.stderr_text(), 10),
                            srv.stderr_text())
            self.check(srv, key, recs)
            self.assertEqual(srv.stop(), 0)
        now = self.read(d)
        self.assertEqual(struct.unpack_from("<I", now, 8)[0], 4)
        self.assertNotEqual(frame_key(now), 0)
        self.assertEqual(sum(9 + n for _, n, _ in frames(now)) + 16, len(now))
        with self.server(d) as srv:
            self.check(srv, key, recs)

    def test_crc_and_parser_self_check(self):
        self.assertEqual(crc32c(b"123456789"), 0xE3069283)
        d = self.mkdir()
        key, recs = self.populate(d, n=3)
        data = self.read(d)
        self.assertEqual(data[:8], b"EVTDLOG\0")
        version, fkey = struct.unpack_from("<II", data, 8)
        self.assertEqual(version, 4)
        self.assertNotEqual(fkey, 0, "a new log has a frame key")
        fr = frames(data)
        self.assertEqual(fr[-1][0] + 9 + fr[-1][1], len(data), "frames must cover the log")
        # user add: the reservations of ids (17) and revs (22), the user, their give-backs;
        # a server: the same around 3 themes; every change in a REC_REV frame (20):
        # varint rev, the inner type, its payload
        self.assertEqual([t for _, _, t in fr if t != SYNC_MARK],
                         [17, 22, 20, 17, 22, 17, 22, 20, 20, 20, 17, 22])
        # every batch after the log's first starts with a sync mark (M), and each clean
        # stop ends the log with one: varint S, the bytes before it durable; in always
        # mode the batch before it was synced, so S is the mark's own offset
        M = SYNC_MARK
        self.assertEqual([t for _, _, t in fr],
                         [17, 22, M, 20, M, 17, 22, M,  # user add
                          M, 17, 22, M, 20, M, 20, M, 20, M, 17, 22, M])  # the server
        marks = [(o, data[o + 9:o + 9 + n]) for o, n, t in fr if t == SYNC_MARK]
        for o, payload in marks:
            self.assertEqual(payload, varint(o), "the mark at %d" % o)
        inner = [(data[o + 9], data[o + 10]) for o, _, t in fr if t == 20]
        self.assertEqual(inner, [(1, 1), (2, 2), (3, 2), (4, 2)])

    def test_modes(self):
        d = self.mkdir()
        sub = os.path.join(d.path, "new", "dir")
        os.makedirs(os.path.dirname(sub))
        add_user(sub, "alice")
        self.assertEqual(os.stat(sub).st_mode & 0o777, 0o700)
        for n in os.listdir(sub):
            self.assertEqual(os.stat(os.path.join(sub, n)).st_mode & 0o777, 0o600, n)

    def test_bad_crc_last_frame_refuses_start(self):
        # one flipped bit in a complete last frame is damage, not a torn append
        d = self.mkdir()
        key, recs = self.populate(d)
        data = bytearray(self.read(d))
        off, n, _ = frames(bytes(data))[-1]
        data[off + 9 + n // 2] ^= 0x01
        self.write(d, bytes(data))
        msg = self.refused_exit_1(d)
        self.assertRegex(msg, r"\boffset %d\b" % off)
        self.assertIn("--repair", msg)
        self.assertEqual(self.read(d), bytes(data), "a refused start changed the log")

    def test_bad_frame_followed_by_zeros_refuses_start(self):
        d = self.mkdir()
        key, recs = self.populate(d)
        data = bytearray(self.read(d))
        off, n, _ = frames(bytes(data))[-1]
        data[off + 9 + n // 2] ^= 0x01
        data += b"\0" * 4096
        self.write(d, bytes(data))
        msg = self.refused_exit_1(d)
        self.assertRegex(msg, r"\boffset %d\b" % off)
        self.assertIn("--repair", msg)
        self.assertEqual(self.read(d), bytes(data), "a refused start changed the log")

    # -- damage at every offset of the last two frames -----------------------
    # Sweeps start hundreds of servers: leak checks at exit (a sanitizer
    # build) would triple their time, and the single-case tests keep them.
    SWEEP_ENV = {"ASAN_OPTIONS": "detect_leaks=0"}

    def outcome(self, d, *extra, env=None):
        """Starts a server on d: (True, None, stderr) if it started (it is
        killed at once: replay is over when it listens), else (False, its
        exit code, its output). Never waits for a timeout either way."""
        srv = self.server(d, *extra, env=env)
        try:
            srv.start()
        except harness.HarnessError:
            srv.close()
            return False, srv.proc.returncode, srv.stderr_text() + srv.stdout_text()
        err = srv.stderr_text()
        srv.close()
        return True, None, err

    def refused_exit_1(self, d, *extra):
        started, rc, msg = self.outcome(d, *extra)
        self.assertFalse(started, "the server started on a damaged log:\n%s" % msg)
        self.assertEqual(rc, 1, msg)
        return msg

    def fixture(self, n=3, name_len=2):
        """A log of a user and n themes whose payloads end in non-zero bytes."""
        d = self.mkdir()
        key = add_user(d.path, "alice")
        with self.server(d, "--max-string-bytes", "4096") as srv:
            c = Client(srv.port, "alice", key)
            recs = [c.must_create("theme", {"Name": ("n%d" % i) + "x" * name_len,
                                            "Status": "s%d" % i}) for i in range(n)]
            c.close()
            self.assertEqual(srv.stop(), 0)
        # End the image with the last record, as a crash right after it would:
        # a clean stop appends give-back frames (REC_NEXT_ID, REC_REV_FLOOR) after it.
        data = self.read(d)
        last = record_frames(data)[-1]
        data = data[:last[0] + 9 + last[1]]
        self.write(d, data)
        return d, key, recs, data

    def sweep(self, cases, check):
        """Runs check(scratch_dir, case) -> error text or None for every case,
        on two threads with a scratch data directory each (one server start
        per case); returns the errors."""
        dirs = queue.Queue()
        for _ in range(2):
            dirs.put(self.mkdir())

        def one(case):
            d = dirs.get()
            try:
                for name in os.listdir(d.path):
                    if name != "LOCK":
                        os.unlink(d.file(name))
                return check(d, case)
            finally:
                dirs.put(d)

        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
            return [e for e in ex.map(one, cases) if e]

    def test_flipped_bit_anywhere_in_last_two_frames_refuses_start(self):
        d, key, recs, data = self.fixture()
        fr = record_frames(data)
        self.assertEqual(fr[-1][0] + 9 + fr[-1][1], len(data))
        cases = [(off, pos) for off, n, _ in fr[-2:] for pos in range(off, off + 9 + n)]

        def check(scratch, case):
            off, pos = case
            bad = bytearray(data)
            # flip a bit that leaves the byte non-zero: no new zero tail
            bit = 0x01 if bad[pos] != 0x01 else 0x02
            bad[pos] ^= bit
            n = struct.unpack_from("<I", bad, off + 4)[0]
            last = off == fr[-1][0]
            if last and 4 <= pos - off < 8 and off + 9 + n > len(bad) and n <= 64 << 20:
                # A length that now runs past the end of the file reads exactly like
                # a crash inside the write of the last frame: cut, but copied aside
                # (docs/STORAGE.md).
                return self.torn_error(scratch, bytes(bad), off,
                                       "bit 0x%02x of length byte %d" % (bit, pos))
            self.write(scratch, bytes(bad))
            started, rc, msg = self.outcome(scratch, env=self.SWEEP_ENV)
            why = None
            if started:
                why = "started"
            elif rc != 1:
                why = "exit %r" % rc
            elif not re.search(r"\boffset %d\b" % off, msg):
                why = "no 'offset %d' in %r" % (off, msg[-300:])
            elif "--repair" not in msg:
                why = "no --repair suggestion in %r" % msg[-300:]
            elif self.read(scratch) != bytes(bad):
                why = "the log was changed"
            elif glob.glob(scratch.file(LOG + ".damaged-*")):
                why = "a refused start copied bytes aside"
            if why:
                return ("bit 0x%02x of byte %d (frame at %d, frame byte %d): %s"
                        % (bit, pos, off, pos - off, why))
            return None

        wrong = self.sweep(cases, check)
        self.assertFalse(wrong, "%d of %d flips were not refused as documented, e.g.:\n%s"
                         % (len(wrong), sum(9 + n for _, n, _ in fr[-2:]),
                            "\n".join(wrong[:8])))

    def torn_error(self, scratch, bad, frame_off, what):
        """bad (a log ending in a torn append at frame_off) must start, cut
        at frame_off, with the cut bytes in eventd.log.damaged-<frame_off>
        and a warning naming the offset and that file."""
        self.write(scratch, bad)
        started, rc, err = self.outcome(scratch, env=self.SWEEP_ENV)
        if not started:
            return "%s: did not start (exit %r): %s" % (what, rc, err[-300:])
        damaged = scratch.file("%s.damaged-%d" % (LOG, frame_off))
        warn = [l for l in err.splitlines() if re.match(r"^\S+ warn ", l) and
                re.search(r"\boffset %d\b" % frame_off, l) and
                "%s.damaged-%d" % (LOG, frame_off) in l]
        log = self.read(scratch)
        # cut at frame_off; after it only the reservations the start appended (ids, revs)
        # behind their batch's sync mark, then the zeros it preallocated (it was killed:
        # no clean stop cut them)
        after = [t for o, n, t in frames(log) if o >= frame_off]
        covered = frames(log)[-1][0] + 9 + frames(log)[-1][1] if frames(log) else 16
        if log[:frame_off] != bad[:frame_off] or any(log[covered:]) or \
                after != [SYNC_MARK, 17, 22]:
            return ("%s: log is %d bytes, not cut at %d (then the two reservation frames)"
                    % (what, covered, frame_off))
        if not any(bad[frame_off:]):
            # a cut inside the frame's checksum that left only zero bytes of it (the frame
            # key is random): the log's end, cut without a copy or a warning
            if os.path.exists(damaged) or re.search(r"(?m)^\S+ (warn|error) ", err):
                return "%s: zeros alone were copied aside or warned about" % what
            return None
        elif not os.path.exists(damaged):
            return ("%s: no %s (have %s)"
                    % (what, os.path.basename(damaged), sorted(os.listdir(scratch.path))))
        if damaged_copy(damaged, bad) != bad[frame_off:]:
            return ("%s: %s does not hold exactly the cut bytes"
                    % (what, os.path.basename(damaged)))
        if not warn:
            return ("%s: no warning naming offset %d and %s.damaged-%d: %r"
                    % (what, frame_off, LOG, frame_off, err[-400:]))
        return None

    def test_truncation_inside_last_two_frames_is_cut_and_copied_aside(self):
        d, key, recs, data = self.fixture()
        o1 = record_frames(data)[-2][0]
        # the last two records, and the sync mark that starts the last one's batch
        starts = [o for o, _, _ in frames(data) if o >= o1]
        cuts = [x for x in range(o1 + 1, len(data)) if x not in starts]
        wrong = self.sweep(cuts, lambda scratch, x: self.torn_error(
            scratch, data[:x], max(o for o in starts if o < x), "cut at %d" % x))
        self.assertFalse(wrong, "%d of %d truncations not handled as a torn append, e.g.:\n%s"
                         % (len(wrong), len(cuts), "\n".join(wrong[:8])))

    def test_truncation_at_a_frame_boundary_starts_clean(self):
        d, key, recs, data = self.fixture()
        off = record_frames(data)[-1][0]
        self.write(d, data[:off])
        with self.server(d) as srv:
            self.assertNotRegex(srv.stderr_text(), r"(?m)^\S+ (warn|error) ")
            self.check(srv, key, recs[:-1], [recs[-1]])
            self.assertEqual(srv.stop(), 0)
        self.assertEqual(glob.glob(d.file(LOG + ".damaged-*")), [])

    def big_last_frame(self):
        d, key, recs, data = self.fixture(n=2, name_len=1500)
        off, n, _ = record_frames(data)[-1]
        bounds = [b for b in range(off + 1, off + 9 + n) if b % 512 == 0]
        self.assertGreaterEqual(len(bounds), 2, "the last frame must span 512-byte boundaries")
        return d, key, recs, data, off, bounds

    def test_last_frame_zero_from_a_512_byte_boundary_is_cut_and_copied_aside(self):
        d, key, recs, data, off, bounds = self.big_last_frame()
        wrong = self.sweep(bounds, lambda scratch, b: self.torn_error(
            scratch, data[:b] + b"\0" * (len(data) - b), off, "zeros from %d" % b))
        self.assertFalse(wrong, "\n".join(wrong))
        self.write(d, data[:bounds[0]] + b"\0" * (len(data) - bounds[0]))
        with self.server(d) as srv:
            self.check(srv, key, recs[:-1], [recs[-1]])

    def test_last_frame_zero_from_its_start_is_the_logs_end(self):
        # zeros from a frame's first byte to the end of the file: preallocated space, or an
        # append of which nothing reached the disk; cut with an info line, nothing copied
        d, key, recs, data, off, bounds = self.big_last_frame()
        self.write(d, data[:off] + b"\0" * (len(data) - off))
        with self.server(d) as srv:
            self.assertRegex(srv.stderr_text(), r"(?m)^\S+ info store: \S+ ended in %d zero "
                             r"bytes at offset %d " % (len(data) - off, off))
            self.assertNotRegex(srv.stderr_text(), r"(?m)^\S+ (warn|error) ")
            self.check(srv, key, recs[:-1], [recs[-1]])
            self.assertEqual(srv.stop(), 0)
        self.assertEqual(glob.glob(d.file(LOG + ".damaged-*")), [])
        log = self.read(d)
        self.assertEqual(log[:off], data[:off])
        self.assertEqual([t for o, n, t in frames(log) if o >= off][:3], [SYNC_MARK, 17, 22])

    def test_last_frame_zero_from_an_unaligned_offset_refuses_start(self):
        # zeros that start inside a sector and reach the end of the file with no
        # sector boundary in them: the sector was written, so its bytes are damage
        d, key, recs, data, off, bounds = self.big_last_frame()
        end = len(data)
        z = end - 5
        self.assertTrue(z % 512 and (end - 1) // 512 == z // 512, "pick another length")
        self.assertNotEqual(data[z - 1], 0)
        self.write(d, data[:z] + b"\0" * (end - z))
        msg = self.refused_exit_1(d)
        self.assertRegex(msg, r"\boffset %d\b" % off)
        self.assertIn("--repair", msg)

    # -- --repair of a damaged middle frame -----------------------------------
    def repair_middle(self, damage):
        d, key, recs, data = self.fixture(n=6)
        fr = record_frames(data)
        victim = 3                                  # frames: user, themes 0..5
        off, n, _ = fr[victim]
        end = off + 9 + n
        bad = bytearray(data)
        damage(bad, off, n)
        self.write(d, bytes(bad))
        msg = self.refused_exit_1(d)
        self.assertRegex(msg, r"\boffset %d\b" % off)
        self.assertIn("--repair", msg)
        kept = [r for i, r in enumerate(recs) if i != victim - 1]
        lost = [recs[victim - 1]]
        with self.server(d, "--repair") as srv:
            self.check(srv, key, kept, lost)
            self.assertRegex(srv.stderr_text(), r"(?m)^\S+ warn .*\boffset %d\b" % off)
            self.assertEqual(srv.stop(), 0)
        damaged = d.file("%s.damaged-%d" % (LOG, off))
        self.assertTrue(os.path.exists(damaged), os.listdir(d.path))
        self.assertEqual(damaged_copy(damaged, bad), bytes(bad[off:end]),
                         "the damaged frame, exactly")
        with self.server(d) as srv:                # a plain start after the repair
            self.assertNotRegex(srv.stderr_text(), r"(?m)^\S+ (warn|error) ")
            self.check(srv, key, kept, lost)
            srv.stop()
        self.write_and_restart(d, key, kept)

    def test_repair_keeps_the_frames_after_a_damaged_middle_frame(self):
        def flip(bad, off, n):
            bad[off + 9 + n // 2] ^= 0x10
        self.repair_middle(flip)

    def test_repair_keeps_the_frames_after_a_damaged_middle_length(self):
        def length(bad, off, n):
            struct.pack_into("<I", bad, off + 4, 0x7FFFFFF0)
        self.repair_middle(length)

    def test_bad_magic_refused_without_suggesting_repair(self):
        d = self.mkdir()
        key, recs = self.populate(d, n=2)
        bad = b"NOTALOG\0" + self.read(d)[8:]
        self.write(d, bad)
        msg = self.refused_exit_1(d)
        self.assertNotIn("--repair", msg)
        self.assertEqual(self.read(d), bad)

    def test_newer_format_refused_without_suggesting_repair(self):
        d = self.mkdir()
        key, recs = self.populate(d, n=2)
        newer = bytearray(self.read(d))
        struct.pack_into("<I", newer, 8, 5)
        self.write(d, bytes(newer))
        msg = self.refused_exit_1(d)
        self.assertIn("newer", msg)
        self.assertNotIn("--repair", msg)
        self.assertEqual(self.read(d), bytes(newer))

    def test_bad_crc_in_middle_is_corrupt_even_at_frame_start(self):
        d = self.mkdir()
        key, recs = self.populate(d, n=6)
        data = bytearray(self.read(d))
        off, n, _ = frames(bytes(data))[3]
        data[off] ^= 0xFF                         # the CRC field itself
        self.write(d, bytes(data))
        msg = self.refused(d)
        self.assertIn(LOG, msg)
        self.assertIn(str(off), msg)
        self.assertIn(str(len(data) - off), msg, "bytes after the damage")

    def test_damaged_length_mid_log_is_corrupt(self):
        d = self.mkdir()
        key, recs = self.populate(d, n=6)
        data = bytearray(self.read(d))
        off, n, _ = frames(bytes(data))[2]
        struct.pack_into("<I", data, off + 4, 0x7FFFFFF0)
        self.write(d, bytes(data))
        msg = self.refused(d)
        self.assertIn(str(off), msg)
        self.assertEqual(self.read(d), bytes(data), "a refused start must not change the log")

    def test_good_crc_undecodable_frame_is_corrupt_even_last(self):
        for typ, payload in ((99, b"\x01\x02\x03"), (2, b"\xff" * 11)):
            with self.subTest(type=typ):
                d = self.mkdir()
                key, recs = self.populate(d, n=2)
                data = self.read(d)
                self.write(d, data + frame(typ, payload, frame_key(data)))
                msg = self.refused(d)
                self.assertIn(str(len(data)), msg, "offset of the undecodable frame")
                with self.server(d, "--repair") as srv:
                    self.check(srv, key, recs)
                    srv.stop()
                self.assertTrue(glob.glob(d.file(LOG + ".damaged-%d*" % len(data))),
                                os.listdir(d.path))

    def test_wrong_magic_and_newer_version_refused(self):
        d = self.mkdir()
        key, recs = self.populate(d, n=2)
        orig = self.read(d)
        self.write(d, b"NOTALOG\0" + orig[8:])
        self.refused(d)
        self.refused(d, "--repair")
        self.assertEqual(self.read(d)[:8], b"NOTALOG\0", "the file was touched")
        newer = bytearray(orig)
        struct.pack_into("<I", newer, 8, 5)
        self.write(d, bytes(newer))
        msg = self.refused(d)
        self.assertIn("newer", msg)
        self.assertEqual(self.read(d), bytes(newer), "the file was touched")
        self.write(d, orig)
        with self.server(d) as srv:
            self.check(srv, key, recs)

    def test_stray_compact_file_removed_not_read(self):
        d = self.mkdir()
        key, recs = self.populate(d, n=3)
        # complete-looking compaction and repair files (a crash before their rename)
        # holding other content must be ignored, and removed
        for stray in (".compact", ".repair"):
            with open(d.file(LOG + stray), "wb") as f:
                f.write(self.read(d)[:16] + frame(2, b"\x01", frame_key(self.read(d))))
        with self.server(d) as srv:
            self.assertFalse(os.path.exists(d.file(LOG + ".compact")))
            self.assertFalse(os.path.exists(d.file(LOG + ".repair")))
            self.check(srv, key, recs)


class CompactionFaults(Dir):
    def test_compaction_sync_failure_keeps_old_log(self):
        d = self.mkdir()
        key = add_user(d.path, "alice")
        writes = 40
        # every write below is one batch with one fdatasync; the next sync
        # (the compaction's) fails
        with self.server(d, env={"EVENTD_FAULT_FSYNC_AFTER": str(writes)}) as srv:
            c = Client(srv.port, "alice", key, timeout=3)
            t = c.must_create("theme", {"Name": "0"})
            for i in range(writes - 1):
                c.must_update("theme", t["ID"], {"Name": "%d" % (i + 1)})
            before = self.snapshot(c)
            size = os.path.getsize(d.file(LOG))
            srv.send_signal(signal.SIGUSR1)
            logged = harness.wait_until(lambda: re.search(
                r"(?i)compact\w*.*(fail|error|abandon)|(fail|error).*compact",
                srv.stderr_text()), 5)
            self.assertTrue(logged, "no compaction failure logged:\n" + srv.stderr_text())
            harness.wait_until(lambda: not os.path.exists(d.file(LOG + ".compact")), 3)
            self.assertFalse(os.path.exists(d.file(LOG + ".compact")))
            self.assertEqual(os.path.getsize(d.file(LOG)), size, "the old log must stay")
            self.assertTrue(srv.running())
            self.assertEqual(self.snapshot(c), before)
            c.close()
            srv.stop()
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            self.assertEqual(self.snapshot(c), before)
            c.close()

    def test_a_failed_automatic_compaction_is_not_tried_again_at_once(self):
        # The log over --compact-ratio times its live data, and a disk that fails every
        # compaction (here its syncs; a disk too full for the new log does the same,
        # ENOSPC) while the log, idle in interval mode, never asks for one: each failure
        # was followed by the next attempt in the next loop turn (7,000 a second on a
        # full tmpfs, two error lines each). docs/STORAGE.md, "Compaction".
        d = self.mkdir()
        key = add_user(d.path, "alice")
        with self.server(d, "--compact-ratio", "0") as srv:
            c = Client(srv.port, "alice", key)
            t = c.must_create("theme", {"Name": "kept"})
            for i in range(200):
                c.must_update("theme", t["ID"], {"Name": "update %d %s" % (i, "x" * 100)})
            c.close()
            self.assertEqual(srv.stop(), 0)
        env = {"EVENTD_FAULT_FSYNC_AFTER": "0"}
        with self.server(d, "--fsync", "interval", "--fsync-interval-ms", "60000",
                         "--compact-ratio", "1.5", "--compact-min-bytes", "0",
                         env=env) as srv:
            self.assertTrue(harness.wait_until(
                lambda: "compaction failed" in srv.stderr_text(), 5), srv.stderr_text())
            time.sleep(1.0)
            err = srv.stderr_text()
            self.assertEqual(err.count("compaction started"), 1, err[-2000:])
            self.assertTrue(srv.running())
            c = Client(srv.port, "alice", key)
            self.assertEqual(c.must_get("theme", t["ID"])["Name"], "update 199 " + "x" * 100)
            c.close()

    def test_kill9_during_online_compaction(self):
        d = self.mkdir()
        key = add_user(d.path, "alice")
        mid = 0
        with self.server(d, "--fsync", "never") as srv:
            c = Client(srv.port, "alice", key)
            recs = [c.must_create("theme", {"Name": "%d %s" % (i, "z" * 240)})
                    for i in range(800)]
            c.close()
            srv.stop()
        for it, delay in enumerate((0.0, 0.0005, 0.001, 0.002, 0.004, 0.008)):
            with self.server(d) as srv:
                self.assertFalse(os.path.exists(d.file(LOG + ".compact")))
                c = Client(srv.port, "alice", key)
                items = c.list_all("theme", limit=500)
                if it:
                    self.assertEqual(items, expect, "iteration %d" % it)
                for i in range(30):
                    c.must_update("theme", recs[i]["ID"], {"Name": "it%d u%d" % (it, i)})
                expect = c.list_all("theme", limit=500)
                self.assertEqual(len(expect), len(recs))
                c.close()
                srv.send_signal(signal.SIGUSR1)
                time.sleep(delay)
                srv.proc.send_signal(signal.SIGKILL)
                srv.wait(5)
                mid += os.path.exists(d.file(LOG + ".compact"))
        with self.server(d) as srv:
            self.assertFalse(os.path.exists(d.file(LOG + ".compact")))
            c = Client(srv.port, "alice", key)
            self.assertEqual(c.list_all("theme", limit=500), expect)
            c.close()
        sys.stderr.write("[kill9 during compaction: %d of 6 kills left a .compact file] " % mid)

if __name__ == "__main__":
    unittest.main()
