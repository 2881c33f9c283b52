"""Shards (docs/SCALING.md): --node-id puts the node in the high bits of every
id it hands out and is recorded in the data directory, which then refuses any
other node id; `eventd export --user NAME` and `eventd import` move one user's
records between shards' data directories with their ids."""

import os
import struct
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apiclient import (EVENTD_BIN, Client, ManagedDir, Server, clean_env,  # noqa: E402
                       run_cli, run_expect_exit, serve_args)

NODE_SHIFT = 43


def add_user(data_dir, name, node):
    cp = run_cli(["user", "add", name, "--data", data_dir, "--node-id", str(node)])
    if cp.returncode != 0:
        raise AssertionError("user add %s: %d %s" % (name, cp.returncode, cp.stderr))
    return cp.stdout.strip().splitlines()[-1]


def shard(data_dir, node):
    return Server(data_dir=data_dir, extra_args=["--node-id", str(node)])


class NodeId(unittest.TestCase):
    def setUp(self):
        self.d = ManagedDir()
        self.addCleanup(self.d.cleanup)

    def test_ids_carry_the_node_in_the_high_bits(self):
        key = add_user(self.d.path, "alice", 3)
        with shard(self.d.path, 3) as s:
            c = Client(s.port, "alice", key)
            self.addCleanup(c.close)
            t = c.must_create("theme", {"Name": "t"})
            a = c.must_create("address", {"Name": "a"})
        self.assertEqual(t["ID"] >> NODE_SHIFT, 3)
        self.assertEqual(t["UserID"] >> NODE_SHIFT, 3)
        self.assertEqual(a["ID"], t["ID"] + 1)
        self.assertLess(a["ID"], 2 ** 53)

    def test_the_environment_variable_sets_it(self):
        key = add_user(self.d.path, "alice", 7)
        with Server(data_dir=self.d.path, env={"EVENTD_NODE_ID": "7"}) as s:
            c = Client(s.port, "alice", key)
            self.addCleanup(c.close)
            self.assertEqual(c.must_create("theme", {})["ID"] >> NODE_SHIFT, 7)

    def test_another_node_id_is_refused_with_exit_1(self):
        add_user(self.d.path, "alice", 3)
        before = open(self.d.file(), "rb").read()
        rc, out, err, _ = run_expect_exit(serve_args(self.d.path, "--node-id", "4"))
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("belongs to node 3, not to --node-id 4", err)
        rc, out, err, _ = run_expect_exit(serve_args(self.d.path))  # 0: unsharded
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("belongs to node 3, not to --node-id 0", err)
        self.assertEqual(open(self.d.file(), "rb").read(), before, "a refused start wrote")

    def test_unsharded_data_is_refused_as_a_shard(self):
        add_user(self.d.path, "alice", 0)
        rc, out, err, _ = run_expect_exit(serve_args(self.d.path, "--node-id", "2"))
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("without a node id (node 0, unsharded), not by --node-id 2", err)

    def test_node_id_above_1023_is_a_usage_error(self):
        rc, out, err, _ = run_expect_exit(serve_args(self.d.path, "--node-id", "1024"))
        self.assertEqual(rc, 2, (out, err))
        self.assertIn("--node-id 1024: is out of range (0..1023)", err)


def export(data_dir, name, node):
    p = subprocess.run([EVENTD_BIN, "export", "--user", name, "--data", data_dir,
                        "--node-id", str(node)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(),
                       timeout=10)
    return p.returncode, p.stdout, p.stderr.decode()


def import_(data_dir, data, node):
    p = subprocess.run([EVENTD_BIN, "import", "--data", data_dir, "--node-id", str(node)],
                       input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=clean_env(), timeout=10)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


class ExportImport(unittest.TestCase):
    """alice moves from shard 1 to shard 2; bob stays on shard 1."""

    def setUp(self):
        self.src, self.dst = ManagedDir(), ManagedDir()
        self.addCleanup(self.src.cleanup)
        self.addCleanup(self.dst.cleanup)
        self.key = add_user(self.src.path, "alice", 1)
        self.bob = add_user(self.src.path, "bob", 1)
        add_user(self.dst.path, "carol", 2)
        with shard(self.src.path, 1) as s:
            c = Client(s.port, "alice", self.key)
            self.addCleanup(c.close)
            self.theme = c.must_create("theme", {"Name": "Gala", "PageBackgroundRGB": "ffffff"})
            self.addr = c.must_create("address", {"Name": "Hall", "Lat": 52.5, "ShowMap": True})
            self.event = c.must_create("event", {"Name": "E", "ThemeID": self.theme["ID"],
                                                 "AddressID": self.addr["ID"]})
            self.theme = c.must_get("theme", self.theme["ID"])  # with its EventID
            self.addr = c.must_get("address", self.addr["ID"])
            b = Client(s.port, "bob", self.bob)
            self.addCleanup(b.close)
            self.bob_theme = b.must_create("theme", {"Name": "bob's"})

    def test_records_move_with_their_ids_and_the_key_keeps_working(self):
        rc, data, err = export(self.src.path, "alice", 1)
        self.assertEqual(rc, 0, err)
        self.assertIn("exported user alice", err)
        rc, out, err = import_(self.dst.path, data, 2)
        self.assertEqual(rc, 0, err)
        self.assertIn("imported user alice", out)
        self.assertIn("and 3 records", out)
        with shard(self.dst.path, 2) as s:
            c = Client(s.port, "alice", self.key)
            self.addCleanup(c.close)
            self.assertEqual(c.must_get("theme", self.theme["ID"]), self.theme)
            self.assertEqual(c.must_get("address", self.addr["ID"]), self.addr)
            self.assertEqual(c.must_get("event", self.event["ID"])["ThemeID"], self.theme["ID"])
            # new records on the new shard get the new shard's ids
            self.assertEqual(c.must_create("theme", {})["ID"] >> NODE_SHIFT, 2)
            self.assertEqual(c.get("theme", self.bob_theme["ID"]).status, 404)

    def test_a_moved_records_later_states_never_have_the_etag_of_an_earlier_one(self):
        """README "Conditional requests": a change never gets the ETag of another state
        of the record, a move included. Until 2026-11-29 an ETag was made of revs alone,
        and revs are each shard's own count: on the new shard (fewer revs so far) the
        theme's later states took, one by one, the ETags its earlier states had on the old
        one, so an If-None-Match of a stale copy answered 304 and an If-Match of one let a
        PUT overwrite changes its client never saw."""
        src, dst = ManagedDir(), ManagedDir()  # each at its first run: low revs
        self.addCleanup(src.cleanup)
        self.addCleanup(dst.cleanup)
        key = add_user(src.path, "dora", 1)
        add_user(dst.path, "erin", 2)
        seen = {}
        with shard(src.path, 1) as s:
            c = Client(s.port, "dora", key)
            self.addCleanup(c.close)
            tid = c.must_create("theme", {"Name": "v"})["ID"]
            for i in range(8):
                r = c.update("theme", tid, {"Name": "v%d" % i})
                self.assertEqual(r.status, 204, r.describe())
                seen[r.header("ETag")] = "v%d" % i
        rc, data, err = export(src.path, "dora", 1)
        self.assertEqual(rc, 0, err)
        rc, out, err = import_(dst.path, data, 2)
        self.assertEqual(rc, 0, err)
        with shard(dst.path, 2) as s:
            c = Client(s.port, "dora", key)
            self.addCleanup(c.close)
            for i in range(30):
                r = c.get("theme", tid)
                self.assertEqual(r.status, 200, r.describe())
                self.assertNotIn(r.header("ETag"), seen, "state n%d" % i)
                r = c.update("theme", tid, {"Name": "n%d" % i})
                self.assertEqual(r.status, 204, r.describe())

    def test_purge_removes_the_user_and_its_records_from_the_source(self):
        rc, data, err = export(self.src.path, "alice", 1)
        self.assertEqual(rc, 0, err)
        cp = run_cli(["user", "purge", "alice", "--data", self.src.path, "--node-id", "1"])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("removed user alice and 3 records", cp.stdout)
        with shard(self.src.path, 1) as s:
            c = Client(s.port, "alice", self.key)
            self.addCleanup(c.close)
            self.assertEqual(c.get("theme", self.theme["ID"]).status, 401)
            b = Client(s.port, "bob", self.bob)
            self.addCleanup(b.close)
            self.assertEqual(b.must_get("theme", self.bob_theme["ID"])["Name"], "bob's")
        # and the move can go back: the ids are free again on shard 1
        rc, out, err = import_(self.src.path, data, 1)
        self.assertEqual(rc, 0, err)

    def test_a_second_import_is_refused_and_writes_nothing(self):
        rc, data, err = export(self.src.path, "alice", 1)
        self.assertEqual(rc, 0, err)
        self.assertEqual(import_(self.dst.path, data, 2)[0], 0)
        before = open(self.dst.file(), "rb").read()
        rc, out, err = import_(self.dst.path, data, 2)
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("user 'alice' exists already here; nothing was imported", err)
        after = open(self.dst.file(), "rb").read()
        self.assertEqual(after[:len(before)], before)

    def test_a_damaged_export_is_refused(self):
        rc, data, err = export(self.src.path, "alice", 1)
        self.assertEqual(rc, 0, err)
        bad = bytearray(data)
        bad[-13] ^= 0xFF  # in the last record's payload (the end mark is the last 10 bytes)
        rc, out, err = import_(self.dst.path, bytes(bad), 2)
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("the input is damaged (checksum); nothing was imported", err)
        rc, out, err = import_(self.dst.path, data[:-5], 2)
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("cut short", err)

    def test_an_export_cut_at_a_frames_end_is_refused(self):
        rc, data, err = export(self.src.path, "alice", 1)
        self.assertEqual(rc, 0, err)
        # Format 2 (docs/STORAGE.md): it holds no sync marks, so eventd before format 3
        # imports it too.
        self.assertEqual(data[:12], b"EVTDLOG\0\x02\0\0\0")
        # The frames: header, then [crc u32][len u32][type][payload]; the last is the end mark.
        frames, p = [], 16
        while p < len(data):
            frames.append(p)
            p += 9 + struct.unpack_from("<I", data, p + 4)[0]
        self.assertEqual(len(frames), 5)  # alice, theme, address, event, the end mark
        self.assertEqual(data[frames[-1] + 8], 23)
        for cut in (frames[-1], frames[-2]):
            rc, out, err = import_(self.dst.path, data[:cut], 2)
            self.assertEqual(rc, 1, (out, err))
            self.assertIn("the input is cut short (no end mark; ", err)
            self.assertIn("; nothing was imported", err)
        # a frame dropped before the mark: the mark counts four
        rc, out, err = import_(self.dst.path, data[:frames[-2]] + data[frames[-1]:], 2)
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("is damaged (its end mark counts other records)", err)
        rc, out, err = import_(self.dst.path, data + data[frames[1]:frames[2]], 2)
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("holds frames after its end mark", err)

    def test_export_of_a_missing_user_exits_1(self):
        rc, data, err = export(self.src.path, "nobody", 1)
        self.assertEqual(rc, 1, err)
        self.assertIn("no user 'nobody'", err)
        self.assertEqual(data, b"")


# ---- export files made here, to be hostile (the format: src/storage/logfile.h, record.c) ----

def _crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def _varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _str(b):
    b = b.encode() if isinstance(b, str) else b
    return _varint(len(b)) + b


USER, THEME, ADDRESS, EVENT = 1, 2, 3, 4


def _record(rid, uid, fields):
    return _varint(rid) + _varint(uid) + _varint(len(fields)) + b"".join(fields)


def user_rec(rid, name, pwhash=b""):
    return USER, _record(rid, 0, [_str(name), _str(b""), _str(pwhash), _varint(0), _varint(0)])


def theme_rec(rid, uid, name="t"):
    return THEME, _record(rid, uid, [_str(name)])


def event_rec(rid, uid, theme_id=0, address_id=0):
    return EVENT, _record(rid, uid, [_str("e"), _varint(theme_id), _varint(address_id)])


EXPORT_END = 23


def idem_rec(rid, uid, record_id, status=200, key="k1", answer='{"Status":"ok"}'):
    return 7, _record(rid, uid, [_str(key), _str(b"0123456789abcdef"), _varint(1),
                                 _varint(status), _str(answer), _varint(record_id)])


def export_file(recs, key=0x1234ABCD):
    out = bytearray(b"EVTDLOG\0" + struct.pack("<II", 2, key))
    for typ, payload in recs + [(EXPORT_END, _varint(len(recs)))]:
        body = struct.pack("<I", len(payload)) + bytes([typ]) + payload
        out += struct.pack("<I", _crc32c(body) ^ key) + body
    return bytes(out)


class HostileImport(unittest.TestCase):
    """An export is input like any other: `eventd import` refuses what the API
    would have refused and what would harm the node, and writes nothing."""

    def setUp(self):
        self.d = ManagedDir()
        self.addCleanup(self.d.cleanup)
        self.alice = add_user(self.d.path, "alice", 2)
        with shard(self.d.path, 2) as s:
            c = Client(s.port, "alice", self.alice)
            self.addCleanup(c.close)
            self.alice_theme = c.must_create("theme", {"Name": "alice's"})["ID"]
            self.assertEqual(s.stop(), 0)  # at rest: no zeros preallocated past the log
        with open(self.d.file(), "rb") as f:
            self.before = f.read()
        self.base = 1 << NODE_SHIFT  # node 1's ids: foreign here

    def refused(self, recs, why, node=2):
        rc, out, err = import_(self.d.path, export_file(recs), node)
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("the input %s" % why, err)
        self.assertIn("; nothing was imported", err)
        # (opening the directory may reserve ids: a frame appended, no record)
        with open(self.d.file(), "rb") as f:
            self.assertEqual(f.read()[:len(self.before)], self.before)
        cp = run_cli(["user", "list", "--data", self.d.path, "--node-id", str(node)])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("alice", cp.stdout)
        self.assertNotIn("mal", cp.stdout)

    def test_a_well_formed_file_imports(self):
        # The writer above is right: the refusals below are the checks, not its bugs.
        b = self.base
        rc, out, err = import_(self.d.path, export_file(
            [user_rec(b + 1, "mallory"), theme_rec(b + 2, b + 1), event_rec(b + 3, b + 1, b + 2)]),
            2)
        self.assertEqual(rc, 0, err)
        self.assertIn("imported user mallory (id %d) and 2 records" % (b + 1), out)

    def test_an_event_linking_another_users_theme_is_refused(self):
        b = self.base
        self.refused([user_rec(b + 1, "mallory"), event_rec(b + 2, b + 1, self.alice_theme)],
                     "holds event %d linking id %d, not a theme of its user"
                     % (b + 2, self.alice_theme))

    def test_an_event_linking_a_record_of_another_kind_is_refused(self):
        b = self.base
        self.refused([user_rec(b + 1, "mallory"), theme_rec(b + 2, b + 1),
                      event_rec(b + 3, b + 1, 0, b + 2)],
                     "holds event %d linking id %d, not a address of its user" % (b + 3, b + 2))

    def test_a_kept_answer_that_is_not_a_200_is_refused(self):
        # A key's answer is replayed byte for byte: a 204 or 304 with a body would break
        # the framing of a connection HAProxy shares between clients.
        b = self.base
        self.refused([user_rec(b + 1, "mallory"), theme_rec(b + 2, b + 1),
                      idem_rec(b + 3, b + 1, b + 2, status=204)],
                     "holds an Idempotency-Key (id %d) whose answer is not a 200" % (b + 3))
        rc, out, err = import_(self.d.path, export_file(
            [user_rec(b + 1, "mallory"), theme_rec(b + 2, b + 1), idem_rec(b + 3, b + 1, b + 2)]),
            2)
        self.assertEqual(rc, 0, err)

    def test_a_key_without_its_answers_body_is_refused(self):
        # A log keeps a key's answer by reference to its record, or as the record's
        # payload (docs/STORAGE.md); an export always carries the body, which does not
        # depend on ids or on the records beside it.
        b = self.base
        for answer in ("", "\x00\x02abc", "\x01\x40"):
            with self.subTest(answer=answer):
                self.refused([user_rec(b + 1, "mallory"), theme_rec(b + 2, b + 1),
                              idem_rec(b + 3, b + 1, b + 2, answer=answer)],
                             "holds an Idempotency-Key (id %d) without its answer's body"
                             % (b + 3))

    def test_two_keys_alike_are_refused(self):
        # The API keeps one record a key; with two, a replay could answer with either,
        # and the index filed both under one name (review, 2026-11-29).
        b = self.base
        self.refused([user_rec(b + 1, "mallory"), theme_rec(b + 2, b + 1), theme_rec(b + 3, b + 1),
                      idem_rec(b + 4, b + 1, b + 2), idem_rec(b + 5, b + 1, b + 3)],
                     "holds an Idempotency-Key (id %d) whose key another one has too" % (b + 5))
        rc, out, err = import_(self.d.path, export_file(
            [user_rec(b + 1, "mallory"), theme_rec(b + 2, b + 1), theme_rec(b + 3, b + 1),
             idem_rec(b + 4, b + 1, b + 2), idem_rec(b + 5, b + 1, b + 3, key="k2")]), 2)
        self.assertEqual(rc, 0, err)

    def test_two_events_linking_one_theme_are_refused(self):
        # The API lets a theme belong to one event; two links broke deletions (the theme
        # could go while an event still named it) and the user's next export.
        b = self.base
        self.refused([user_rec(b + 1, "mallory"), theme_rec(b + 2, b + 1),
                      event_rec(b + 3, b + 1, b + 2), event_rec(b + 4, b + 1, b + 2)],
                     "holds two events linking id %d" % (b + 2))

    def test_a_password_hash_beyond_the_servers_limits_is_refused(self):
        # A sign-in would spend t=2^32-1 passes of Argon2id on it: hours of a hashing slot.
        h = b"$argon2id$v=19$m=8,t=4294967295,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA"
        self.refused([user_rec(self.base + 1, "mallory", h)],
                     "holds a password hash that is not Argon2id within this server's limits")

    def test_a_username_the_server_refuses_is_refused(self):
        self.refused([user_rec(self.base + 1, "mal\x1b]0;pwned\x07\nlory")],
                     "holds a username the server refuses")

    def test_an_id_twice_is_refused(self):
        b = self.base
        self.refused([user_rec(b + 1, "mallory"), theme_rec(b + 2, b + 1), theme_rec(b + 2, b + 1)],
                     "holds id %d twice" % (b + 2))
        # the user's own id again, as a theme: it replaced the user record
        self.refused([user_rec(b + 1, "mallory"), theme_rec(b + 1, b + 1)],
                     "holds id %d twice" % (b + 1))

    def test_an_id_of_this_nodes_range_not_handed_out_is_refused(self):
        # Node 2's own range, past its next id: the node's next id would jump there, and
        # its compactions walk the own range up to it (the last id: no create ever again).
        last = (3 << NODE_SHIFT) - 1
        self.refused([user_rec(last, "mallory")],
                     "holds id %d, of this node's own range but not handed out by it yet" % last)

    def test_a_shards_export_is_refused_by_an_unsharded_node(self):
        # Node 0's range holds every shard's: a shard's ids there would move its next id
        # to 2^43 and more, and make each compaction walk 2^43 ids.
        d0 = ManagedDir()
        self.addCleanup(d0.cleanup)
        add_user(d0.path, "carol", 0)
        rc, data, err = export(self.d.path, "alice", 2)
        self.assertEqual(rc, 0, err)
        with open(d0.file(), "rb") as f:
            before = f.read()
        rc, out, err = import_(d0.path, data, 0)
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("of this node's own range but not handed out by it yet: import into a "
                      "node of another --node-id", err)
        with open(d0.file(), "rb") as f:
            self.assertEqual(f.read()[:len(before)], before)


if __name__ == "__main__":
    unittest.main()
