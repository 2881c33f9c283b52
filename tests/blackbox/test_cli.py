"""The command-line tools on a data directory: `eventd compact` reports a
failed compaction in its exit status, and leaves the log as it was."""

import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apiclient import ManagedDir, add_user, run_cli  # noqa: E402


class Compact(unittest.TestCase):
    def setUp(self):
        self.d = ManagedDir()
        self.addCleanup(self.d.cleanup)
        for name in ("alice", "bob", "carol"):
            add_user(self.d.path, name)
        cp = run_cli(["user", "remove", "bob", "--data", self.d.path])
        self.assertEqual(cp.returncode, 0, cp.stderr)

    def log(self):
        with open(self.d.file(), "rb") as f:
            return f.read()

    def test_failed_compaction_exits_1_and_keeps_the_log(self):
        before = self.log()
        cp = run_cli(["compact", "--data", self.d.path], env={"EVENTD_FAULT_FSYNC_AFTER": "0"})
        self.assertEqual(cp.returncode, 1, (cp.stdout, cp.stderr))
        self.assertIn("compaction failed", cp.stderr)
        self.assertNotIn("compacted", cp.stdout)
        self.assertFalse(os.path.exists(self.d.file("eventd.log.compact")))
        after = self.log()
        self.assertEqual(after[:len(before)], before, "a failed compaction changed the log")

    def test_compaction_shrinks_the_log_and_keeps_the_users(self):
        before = len(self.log())
        cp = run_cli(["compact", "--data", self.d.path])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        m = re.search(r"compacted .*: (\d+) -> (\d+) bytes", cp.stdout)
        self.assertTrue(m, cp.stdout)
        # what it read (this start's id reservation included) and what it wrote
        self.assertGreaterEqual(int(m.group(1)), before)
        self.assertLessEqual(int(m.group(2)), len(self.log()))  # then the give-back frame
        self.assertLess(len(self.log()), before)
        cp = run_cli(["user", "list", "--data", self.d.path])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        names = [line.split()[1] for line in cp.stdout.splitlines()[1:]]
        self.assertEqual(names, ["alice", "carol"])


class MissingDirectory(unittest.TestCase):
    def test_reading_commands_say_so_and_create_nothing(self):
        d = ManagedDir()
        self.addCleanup(d.cleanup)
        missing = os.path.join(d.path, "typo")
        for args in (["user", "list"], ["user", "rotate", "alice"], ["user", "remove", "alice"],
                     ["compact"]):
            with self.subTest(args=args):
                cp = run_cli(args + ["--data", missing])
                self.assertEqual(cp.returncode, 1, (cp.stdout, cp.stderr))
                self.assertIn("no data directory %s" % missing, cp.stderr)
                self.assertFalse(os.path.exists(missing), "%s created the directory" % args)

    def test_user_add_creates_it(self):
        d = ManagedDir()
        self.addCleanup(d.cleanup)
        fresh = os.path.join(d.path, "new", "data")
        add_user(fresh, "alice")
        self.assertTrue(os.path.isdir(fresh))


if __name__ == "__main__":
    unittest.main()
