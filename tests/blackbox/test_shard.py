"""Shards (docs/SCALING.md): --node-id puts the node in the high bits of every
id it hands out and is recorded in the data directory, which then refuses any
other node id; `eventd export --user NAME` and `eventd import` move one user's
records between shards' data directories with their ids."""

import os
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
        bad[-3] ^= 0xFF
        rc, out, err = import_(self.dst.path, bytes(bad), 2)
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("the input is damaged (checksum); nothing was imported", err)
        rc, out, err = import_(self.dst.path, data[:-5], 2)
        self.assertEqual(rc, 1, (out, err))
        self.assertIn("cut short", err)

    def test_export_of_a_missing_user_exits_1(self):
        rc, data, err = export(self.src.path, "nobody", 1)
        self.assertEqual(rc, 1, err)
        self.assertIn("no user 'nobody'", err)
        self.assertEqual(data, b"")


if __name__ == "__main__":
    unittest.main()
