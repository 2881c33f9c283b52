#!/usr/bin/env python3
"""eventd storage and identity, black box: the user CLI, keys never stored in
clear, the directory lock, the demo user, kill -9 durability, torn and
damaged logs, compaction (offline and SIGUSR1), fsync modes, and the
EVENTD_FAULT_FSYNC_AFTER fault-injection hook."""

import base64
import glob
import os
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
        d = self.mkdir()
        add_user(d.path, "alice")
        with self.server(d) as srv:
            for args in (serve_args(d.path), ["user", "add", "x", "--data", d.path],
                         ["user", "list", "--data", d.path], ["compact", "--data", d.path]):
                with self.subTest(args=args[:2]):
                    rc, out, err, secs = run_expect_exit(args, timeout=8)
                    self.assertIsNotNone(rc, "%r kept running while the dir was locked" % args)
                    self.assertNotEqual(rc, 0, (out, err))
                    self.assertIn("in use", out + err)
                    self.assertLess(secs, 5)
            self.assertTrue(srv.running())
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
            time.sleep(0.3)
            out2 = srv.stdout_text()
            self.assertNotIn("curl", out2)
            self.assertFalse(re.search(r"[A-Za-z0-9_-]{43}", out2), out2)
            self.assertEqual(status_of(srv.port, name, key), 200)
            self.assertEqual(srv.stop(), 0)
        out, names = user_names(d.path)
        self.assertEqual(names, ["demo"], out)

    def test_no_demo_user_when_users_exist(self):
        d = self.mkdir()
        add_user(d.path, "alice")
        with OutServer(data_dir=d.path, demo=True) as srv:
            time.sleep(0.3)
            self.assertNotIn("curl", srv.stdout_text())
            srv.stop()
        out, names = user_names(d.path)
        self.assertEqual(names, ["alice"], out)


class Kill9(Dir):
    THREADS = 4
    PER_THREAD = 750          # at most 3000 requests in all
    MAX_SECONDS = 10.0

    def test_acknowledged_writes_survive_sigkill(self):
        d = self.mkdir()
        key = add_user(d.path, "alice")
        acked = {}              # id -> (sent fields, returned record)
        sent_all = {}           # Name -> fields, every request sent
        lock = threading.Lock()
        stop = threading.Event()
        counts = [0] * self.THREADS
        errors = []
        srv = self.server(d, "--fsync", "always")
        with srv:
            t_end = time.monotonic() + self.MAX_SECONDS

            def worker(n):
                c = Client(srv.port, "alice", key, timeout=3)
                try:
                    for i in range(self.PER_THREAD):
                        if stop.is_set() or time.monotonic() > t_end:
                            return
                        fields = {"Name": "w%d-%d é" % (n, i),
                                  "PageBackgroundRGB": "%06x" % ((n * 100003 + i * 7919) & 0xffffff),
                                  "Status": "s%d" % (i % 5)}
                        with lock:
                            sent_all[fields["Name"]] = fields
                        try:
                            r = c.create("theme", fields)
                        except Exception:   # the server was killed
                            return
                        counts[n] += 1
                        if r.status != 200:
                            with lock:
                                errors.append(r.describe())
                            return
                        rec = r.result()
                        with lock:
                            acked[rec["ID"]] = (fields, rec)
                finally:
                    c.close()

            ths = [threading.Thread(target=worker, args=(n,), daemon=True)
                   for n in range(self.THREADS)]
            for t in ths:
                t.start()
            # kill while writes are still going
            harness.wait_until(lambda: len(acked) >= 300, 3.0, 0.01)
            still_writing = sum(t.is_alive() for t in ths)
            srv.proc.send_signal(signal.SIGKILL)
            srv.wait(5)
            stop.set()
            for t in ths:
                t.join(timeout=6)
            self.assertFalse(any(t.is_alive() for t in ths), "workers did not stop")
        self.assertEqual(errors, [])
        self.assertGreater(still_writing, 0, "writes had finished before the kill")
        self.assertGreater(len(acked), 50, "too few acknowledged writes to be meaningful")
        self.assertLessEqual(sum(counts), self.THREADS * self.PER_THREAD)
        with self.server(d) as srv2:
            c = Client(srv2.port, "alice", key)
            try:
                missing = []
                for rid, (fields, rec) in sorted(acked.items()):
                    r = c.get("theme", rid)
                    if r.status != 200:
                        missing.append((rid, r.status))
                        continue
                    got = r.result()
                    self.assertEqual(got, rec, "record %d changed across kill -9" % rid)
                    for k, v in fields.items():
                        self.assertEqual(got[k], v)
                self.assertEqual(missing, [], "%d of %d acknowledged writes lost"
                                 % (len(missing), len(acked)))
                listed = c.list_all("theme", limit=500)
                extra = [x for x in listed if x["ID"] not in acked]
                # at most one unacknowledged request per connection was in flight
                self.assertLessEqual(len(extra), self.THREADS, extra)
                for x in extra:
                    self.assertIn(x["Name"], sent_all, "a record nobody sent: %r" % x)
                    for k, v in sent_all[x["Name"]].items():
                        self.assertEqual(x[k], v)
                # the restarted server takes writes that persist
                new = c.must_create("theme", {"Name": "after"})
                self.assertGreater(new["ID"], max(acked))
            finally:
                c.close()


class TornBase(Dir):
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


def read_log(d):
    with open(d.file(LOG), "rb") as f:
        return f.read()


def record_frames(data):
    """The frames of records (types 1-15: not REC_NEXT_ID, 17, the id reservations)."""
    return [f for f in frames(data) if f[2] != 17]


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
        self.assertEqual(len(frames(after)), len(frames(before)) + 2,
                         "the torn bytes were not cut off (then one reservation, one release)")
        with open(d.file(LOG + ".damaged-%d" % len(before)), "rb") as f:
            self.assertEqual(f.read(), b"\xde\xad\xbe\xef\x07", "cut bytes are copied aside")
        self.write_and_restart(d, key, recs)

    def test_zero_filled_tail(self):
        d = self.mkdir()
        key, recs = self.populate(d)
        with open(d.file(LOG), "ab") as f:
            f.write(b"\0" * 4096)
        with self.server(d) as srv:
            self.assertRegex(srv.stderr_text(), r"(?i)warn.*4096 bytes")
            self.check(srv, key, recs)
            self.assertEqual(srv.stop(), 0)
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
            with open(damaged[0], "rb") as f:
                self.assertEqual(f.read(), bytes(data[off:off + 9 + n]),
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
            size = os.path.getsize(d.file(LOG))
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
            time.sleep(0.3)
            self.assertNotIn("compaction", srv.stderr_text())

    def test_online_compact_sigusr1(self):
        d = self.mkdir()
        key = add_user(d.path, "alice")
        with self.server(d) as srv:
            c = Client(srv.port, "alice", key)
            max_id = self.churn(c)
            before = self.snapshot(c)
            size1 = os.path.getsize(d.file(LOG))
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
            time.sleep(0.05)
            srv.send_signal(signal.SIGUSR1)
            shrunk = harness.wait_until(
                lambda: os.path.getsize(d.file(LOG)) < size1 // 2, 5.0)
            stop.set()
            th.join(timeout=10)
            self.assertFalse(th.is_alive())
            self.assertTrue(shrunk, "SIGUSR1 did not shrink the log (%d -> %d); stderr:\n%s"
                            % (size1, os.path.getsize(d.file(LOG)), srv.stderr_text()))
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
    def test_fsync_failure_is_503_and_not_saved(self):
        run = None
        for n in range(0, 6):
            d = self.mkdir()
            key = add_user(d.path, "alice")
            srv = self.server(d, "--fsync", "always", "--shutdown-timeout-ms", "1000",
                              env={"EVENTD_FAULT_FSYNC_AFTER": str(n)})
            try:
                srv.start()
            except harness.HarnessError:
                srv.close()
                continue         # the startup syncs failed; allow more
            c = Client(srv.port, "alice", key, timeout=3)
            acked, failed = [], None
            for i in range(8):
                r = c.create("theme", {"Name": "f%d" % i})
                if r.status == 200:
                    acked.append(r.result())
                    continue
                failed = r
                break
            if failed is None:
                c.close()
                srv.close()
                continue        # every write succeeded: maybe no hook; try a larger N next
            if not acked:
                c.close()
                srv.close()
                continue        # want at least one good write before the failure
            run = (d, key, srv, c, acked, failed)
            break
        if run is None:
            self.skipTest("EVENTD_FAULT_FSYNC_AFTER seems not to exist in this build: no write "
                          "ever failed for N = 0..5")
        d, key, srv, c, acked, failed = run
        self.addCleanup(srv.close)
        self.addCleanup(c.close)
        self.assertEqual(failed.status, 503, failed.describe())
        self.assertEqual(failed.error()["Code"], "storage_error", failed.describe())
        self.assertTrue(srv.running(), "the server died after a storage error")
        self.assertEqual(harness.request(srv.port, "GET", "/healthz").status, 503)
        # more writes keep failing (every later fdatasync fails), never 200
        r = c.create("address", {"City": "also lost"})
        self.assertEqual(r.status, 503, r.describe())
        self.assertEqual(r.error()["Code"], "storage_error")
        # reads answer, show the acknowledged records and nothing new
        with self.subTest(phase="reads after the storage error"):
            c2 = Client(srv.port, "alice", key, timeout=3)
            self.addCleanup(c2.close)
            try:
                for rec in acked:
                    got = c2.get("theme", rec["ID"])
                    self.assertEqual(got.status, 200, got.describe())
                    self.assertEqual(got.result(), rec)
                listed = c2.list("theme", "limit=500")
                self.assertEqual([x["ID"] for x in listed.result()["Items"]],
                                 [x["ID"] for x in reversed(acked)])
                top = max(x["ID"] for x in acked)
                for rid in range(top + 1, top + 4):
                    self.assertEqual(c2.get("theme", rid).status, 404)
                    self.assertEqual(c2.get("address", rid).status, 404)
            except OSError as e:
                self.fail("GET after a storage error (503 to %s): no answer within 3 s (%s)"
                          % (failed.describe(), e))
        self.assertTrue(srv.running())
        c2.close()
        self.assertEqual(srv.stop(timeout=5), 0, srv.stderr_text())
        # restart without the fault: exactly the acknowledged records
        with self.server(d) as srv2:
            c3 = Client(srv2.port, "alice", key)
            items = c3.list_all("theme", limit=500)
            self.assertEqual([x["ID"] for x in items], [x["ID"] for x in reversed(acked)])
            self.assertEqual(c3.list_all("address", limit=500), [])
            c3.close()


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


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _CRC_T[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def frames(data):
    """[(offset, length, type)] of the frames of a log image (stops at a bad one)."""
    out, off = [], 16
    while off + 9 <= len(data):
        crc, n, typ = struct.unpack_from("<IIB", data, off)
        if off + 9 + n > len(data) or crc32c(data[off + 4:off + 9 + n]) != crc:
            break
        out.append((off, n, typ))
        off += 9 + n
    return out


def frame(typ, payload):
    body = struct.pack("<IB", len(payload), typ) + payload
    return struct.pack("<I", crc32c(body)) + body


class LogFormat(TornBase):
    def read(self, d):
        with open(d.file(LOG), "rb") as f:
            return f.read()

    def write(self, d, data):
        with open(d.file(LOG), "wb") as f:
            f.write(data)

    def refused(self, d, *extra):
        rc, out, err, secs = run_expect_exit(serve_args(d.path, *extra), timeout=8)
        self.assertIsNotNone(rc, "the server started")
        self.assertNotEqual(rc, 0, (out, err))
        return out + err

    def test_crc_and_parser_self_check(self):
        self.assertEqual(crc32c(b"123456789"), 0xE3069283)
        d = self.mkdir()
        key, recs = self.populate(d, n=3)
        data = self.read(d)
        self.assertEqual(data[:8], b"EVTDLOG\0")
        self.assertEqual(struct.unpack_from("<II", data, 8), (1, 0))
        fr = frames(data)
        self.assertEqual(fr[-1][0] + 9 + fr[-1][1], len(data), "frames must cover the log")
        # user add: reservation, user, release; a server: reservation, 3 themes, release
        self.assertEqual([t for _, _, t in fr], [17, 1, 17, 17, 2, 2, 2, 17])

    def test_modes(self):
        d = self.mkdir()
        sub = os.path.join(d.path, "new", "dir")
        os.makedirs(os.path.dirname(sub))
        add_user(sub, "alice")
        self.assertEqual(os.stat(sub).st_mode & 0o777, 0o700)
        for n in os.listdir(sub):
            self.assertEqual(os.stat(os.path.join(sub, n)).st_mode & 0o777, 0o600, n)

    def test_flipped_bit_in_last_frame_is_damage(self):
        # a crash leaves unwritten sectors as zeros; it never flips a bit: refuse, cut nothing
        for tail in (b"", b"\0" * 64):
            with self.subTest(zeros=len(tail)):
                d = self.mkdir()
                key, recs = self.populate(d)
                data = bytearray(self.read(d))
                off, n, _ = frames(bytes(data))[-1]
                data[off + 9 + n // 2] ^= 0x01
                self.write(d, bytes(data) + tail)
                msg = self.refused(d)
                self.assertIn("offset %d" % off, msg)
                self.assertIn("--repair", msg)
                self.assertEqual(self.read(d), bytes(data) + tail, "a refused start changed the log")

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
                self.write(d, data + frame(typ, payload))
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
        struct.pack_into("<I", newer, 8, 2)
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
        # a complete-looking compaction file holding other content must be ignored
        with open(d.file(LOG + ".compact"), "wb") as f:
            f.write(self.read(d)[:16] + frame(2, b"\x01"))
        with self.server(d) as srv:
            self.assertFalse(os.path.exists(d.file(LOG + ".compact")))
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
