#!/usr/bin/env python3
"""docker/shardmap.py and docker/placement.py: their input checks, and the
placement of names made to hash onto the edges of the ring's ranges.

  * shardmap.py refuses a server line of backend "route" that is not
    "server shardN ... id N" (until 2026-11-29 such a line, e.g. a fourth
    shard written without its id, was skipped without a word: the map was
    the three-shard one and the new shard's users never reached it), and a
    missing file without a traceback;
  * placement.py refuses a name eventd would refuse ("alice:x" was answered
    with alice's shard), and places the longest one;
  * names whose hash is the first or the last of a range of the ring, or
    one past it, and the hashes 0 and 2^32-1: shardmap.py's ranges, the
    shipped map and HAProxy's own consistent hash agree on every one.

Needs haproxy (2.6). Bounded: about 10 s.
"""

import itertools
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_lb import CFG, ROOT, placement, ring_config, shardmap  # noqa: E402

SHARDMAP = os.path.join(ROOT, "docker", "shardmap.py")
PLACEMENT = os.path.join(ROOT, "docker", "placement.py")
MASK = 0xFFFFFFFF
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"
SDBM = 65599  # sdbm: h = c + h * 65599


def run(*args, stdin=None):
    return subprocess.run([sys.executable] + list(args), input=stdin, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def unfull_hash(y):
    """The x with shardmap.full_hash(x) == y: each step of it is invertible."""
    inv = lambda a: pow(a, -1, 1 << 32)  # noqa: E731
    a = (y * inv(3221225473)) & MASK
    z = a ^ 0xB55A4F09
    a = z ^ (z >> 16)
    a = ((a - 0xFD7046C5) * inv(9)) & MASK
    t, x = a, 0  # (x + C) ^ (x << 9) == t, solved from the lowest bit up
    for i in range(32):
        mask = (1 << (i + 1)) - 1
        if (((x + 0xD3A2646C) ^ (x << 9)) ^ t) & mask:
            x |= 1 << i
    a = ((x - 0x165667B1) * inv(33)) & MASK
    z = a ^ 0xC761C23C
    a = z ^ (z >> 19)
    a = ((a - 0x7ED55D16) * inv(4097)) & MASK
    assert shardmap.full_hash(a) == y
    return a


class Names:
    """Usernames with a chosen ring hash: a prefix and six characters, met in the middle."""

    def __init__(self):
        self.tail = {}
        for t in itertools.product(ALPHABET, repeat=3):
            self.tail.setdefault(self.sdbm3("".join(t)), "".join(t))

    @staticmethod
    def sdbm3(s):
        h = 0
        for c in s.encode():
            h = (c + h * SDBM) & MASK
        return h

    def with_hash(self, h, prefix):
        target, p, m3 = unfull_hash(h), shardmap.sdbm(prefix.encode()), pow(SDBM, 3, 1 << 32)
        for t in itertools.product(ALPHABET, repeat=3):
            mid = "".join(t)
            tail = self.tail.get((target - (p * m3 + self.sdbm3(mid)) * m3) & MASK)
            if tail:
                name = prefix + mid + tail
                assert shardmap.key_hash(name) == h
                return name
        return None


class Tools(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="eventd-lb-tools-")
        self.addCleanup(shutil.rmtree, self.work, True)

    def test_shardmap_refuses_a_shard_without_its_id(self):
        with open(CFG) as f:
            text = f.read()
        line = '    server shard3 "${EVENTD_SHARD3-shard3:8080}" id 3\n'
        self.assertIn(line, text)
        cfg = os.path.join(self.work, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(text.replace(line, line + '    server shard4 "${EVENTD_SHARD4-shard4:8080}"\n'))
        cp = run(SHARDMAP, "--config", cfg)
        self.assertEqual(cp.returncode, 1, cp.stderr)
        self.assertIn("server shard4", cp.stderr)
        self.assertIn("id N", cp.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.work, "shards.map")))

    def test_shardmap_names_a_missing_file(self):
        cp = run(SHARDMAP, "--config", os.path.join(self.work, "none.cfg"))
        self.assertEqual(cp.returncode, 1)
        self.assertIn("none.cfg: No such file", cp.stderr)
        self.assertNotIn("Traceback", cp.stderr)

    def test_placement_refuses_a_name_eventd_refuses(self):
        for name in ("alice:x", "bad name", "a" * 65, "caf\u00e9"):
            with self.subTest(name=name):
                cp = run(PLACEMENT, "alice", name)
                self.assertEqual(cp.returncode, 1, cp.stdout)
                self.assertEqual(cp.stdout, "")
                self.assertIn("not a username eventd accepts", cp.stderr)
        cp = run(PLACEMENT, stdin="alice\n\n" + "a" * 64 + "\n")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual([line.split()[0] for line in cp.stdout.splitlines()], ["alice", "a" * 64])

    def test_names_on_the_edges_of_the_ranges_are_placed_as_haproxy_s_ring_does(self):
        table = shardmap.ranges(shardmap.shards_of(CFG))
        rng = random.Random(7)
        hashes = {0, MASK}
        for first, last, _ in rng.sample(table, 40):
            hashes |= {first, (first - 1) & MASK, last, (last + 1) & MASK}
        made = Names()
        names = [made.with_hash(h, "e" if i % 2 else "x" * 58)  # 64 characters, the most
                 for i, h in enumerate(sorted(hashes))]
        self.assertNotIn(None, names)
        ring = os.path.join(self.work, "ring.cfg")
        with open(ring, "w") as f:
            f.write(ring_config(CFG))
        mine, theirs = placement(CFG, names), placement(ring, names)
        wrong = [(n, shardmap.key_hash(n), shardmap.owner(table, shardmap.key_hash(n)),
                  mine[n], theirs[n]) for n in names
                 if not shardmap.owner(table, shardmap.key_hash(n)) == mine[n] == theirs[n]]
        self.assertEqual(wrong, [])


if __name__ == "__main__":
    unittest.main()
