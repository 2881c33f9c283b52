"""The command-line tools on a data directory: `eventd compact` reports a
failed compaction in its exit status, and leaves the log as it was."""

import os
import re
import sys
import signal
import subprocess
import time
import socket
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
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


def sig_masks(pid):
    """(ignored, caught) signal masks of a process, from /proc."""
    masks = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("SigIgn:", "SigCgt:")):
                masks[line[:6]] = int(line.split()[1], 16)
    return masks.get("SigIgn", 0), masks.get("SigCgt", 0)


class Usr1BeforeTheHandler(unittest.TestCase):
    """SIGUSR1 asks a server to compact. While it replays (no handler yet) the
    signal is ignored: until 2026-11-28 its default action ended the process
    (review: kill -USR1 during a 5M-record replay, exit 138)."""

    def test_usr1_during_replay_is_ignored(self):
        d = users_dir(self, 50000)
        bit = 1 << (signal.SIGUSR1 - 1)
        proc = subprocess.Popen([harness.EVENTD_BIN, "serve", "--data", d.path, "--listen",
                                 "127.0.0.1:0", "--no-demo-user"], env=harness.clean_env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        self.addCleanup(proc.kill)
        ignored = False
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            ign, cgt = sig_masks(proc.pid)
            if ign & bit:
                ignored = True
                proc.send_signal(signal.SIGUSR1)  # while it replays
                break
            if cgt & bit:
                break  # the handler exists already: too late to see the replay
            time.sleep(0.0005)
        self.assertTrue(ignored, "SIGUSR1 was never ignored before its handler")
        time.sleep(0.5)
        self.assertIsNone(proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(20), 0)


def users_dir(test, n):
    """A new data directory holding users u00000.. u<n-1>, its server stopped."""
    d = ManagedDir(prefix="eventd-bb-cli-")
    test.addCleanup(d.cleanup)
    with harness.Server(data_dir=d.path) as srv:
        fill_users(test, d.path, n)
        test.assertEqual(srv.stop(), 0)
    return d


def fill_users(test, data_dir, n):
    """PUT /admin/users/uNNNNN for n users, pipelined on the admin socket."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(120)
    s.connect(os.path.join(data_dir, "admin.sock"))
    sender = threading.Thread(target=s.sendall, args=(b"".join(
        b"PUT /admin/users/u%05d HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n" % i
        for i in range(n)),))
    sender.start()
    got, tail, mark = 0, b"", b"HTTP/1.1 201 "
    while got < n:
        chunk = s.recv(1 << 20)
        test.assertTrue(chunk, "the admin socket closed after %d answers" % got)
        data = tail + chunk
        got += data.count(mark)
        tail = data[-(len(mark) - 1):]  # shorter than a mark: never counted twice
    sender.join()
    s.close()


class ClosedStandardDescriptors(unittest.TestCase):
    """A command run with stdout and stderr closed exits as it would with them
    open: until 2026-11-28 libuv took their numbers and aborted at exit (134)."""

    def test_user_list_with_stdout_and_stderr_closed(self):
        d = ManagedDir(prefix="eventd-bb-cli-")
        self.addCleanup(d.cleanup)
        add_user(d.path, "alice")
        cp = subprocess.run(["bash", "-c", 'exec "$0" user list --data "$1" >&- 2>&-',
                             harness.EVENTD_BIN, d.path], env=harness.clean_env(),
                            stdin=subprocess.DEVNULL, timeout=20)
        self.assertEqual(cp.returncode, 0)


class RemoteUserList(unittest.TestCase):
    """eventd user list on a running server (through its admin socket) prints every
    user, however long the answer: until 2026-11-28 it stopped at 8 MiB (45,899 of
    50,000 users) and exited 0, and "Adding a shard" builds its list from it."""

    def test_every_user_however_long_the_answer(self):
        n = 50000
        d = users_dir(self, n)
        with harness.Server(data_dir=d.path) as srv:
            cp = run_cli(["user", "list", "--data", d.path], timeout=120)
            self.assertEqual(cp.returncode, 0, cp.stderr)
            names = [ln.split()[1] for ln in cp.stdout.splitlines()[1:]]
            self.assertEqual(names, ["u%05d" % i for i in range(n)], cp.stdout[-300:])
            self.assertEqual(srv.stop(), 0)


class MissingDirectory(unittest.TestCase):
    def test_reading_commands_say_so_and_create_nothing(self):
        d = ManagedDir()
        self.addCleanup(d.cleanup)
        missing = os.path.join(d.path, "typo")
        for args in (["user", "list"], ["user", "rotate", "alice"], ["user", "remove", "alice"],
                     ["user", "purge", "alice"], ["user", "limits", "alice"],
                     ["admin", "revoke", "ops"], ["export", "--user", "alice"], ["compact"]):
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


class BusyPort(unittest.TestCase):
    def test_a_port_in_use_is_named_and_nothing_else(self):
        # The first start's most common failure (8080 taken): exit 1 with one line naming
        # the address; it also warned "handles left open at exit", as if eventd were broken.
        taken = socket.socket()
        self.addCleanup(taken.close)
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        listen = "127.0.0.1:%d" % taken.getsockname()[1]
        d = ManagedDir()
        self.addCleanup(d.cleanup)
        cp = subprocess.run([harness.EVENTD_BIN, "serve", "--listen", listen, "--data", d.path,
                             "--no-demo-user"], env=harness.clean_env(), capture_output=True,
                            text=True, timeout=30)
        self.assertEqual(cp.returncode, 1, cp.stderr)
        self.assertIn("eventd: cannot listen on %s: address already in use\n" % listen, cp.stderr)
        self.assertNotIn("warning", cp.stderr)


class OneShotWrites(unittest.TestCase):
    """A command's exit status says whether its change was saved, whatever
    --fsync the environment gives it (a shard's EVENTD_FSYNC=interval, say): the
    CLI writes in always mode, so a write the disk refuses is not saved, exit 1,
    and the command can be run again. Until 2026-11-29 it kept the batch in
    memory as an interval server does, exited 1 "could not write the log", and
    its close wrote everything: a user made whose key was never shown, an
    import done that said it failed."""

    FAULTS = [{"EVENTD_FSYNC": mode, fault: "0", "EVENTD_FAULT_TIMES": "1"}
              for mode in ("interval", "never")
              for fault in ("EVENTD_FAULT_WRITE_AFTER", "EVENTD_FAULT_FSYNC_AFTER")]

    def setUp(self):
        self.d = ManagedDir()
        self.addCleanup(self.d.cleanup)
        self.dst = ["--data", self.d.path, "--node-id", "2"]  # a shard: import takes node 1's
        self.assertEqual(run_cli(["user", "add", "alice"] + self.dst).returncode, 0)

    def users(self):
        cp = run_cli(["user", "list"] + self.dst)
        self.assertEqual(cp.returncode, 0, cp.stderr)
        return [line.split()[1] for line in cp.stdout.splitlines()[1:]]

    def test_a_user_add_that_failed_made_no_user(self):
        for i, env in enumerate(self.FAULTS):
            with self.subTest(env=env):
                name = "bob%d" % i
                cp = run_cli(["user", "add", name] + self.dst, env=env)
                self.assertEqual(cp.returncode, 1, (cp.stdout, cp.stderr))
                self.assertIn("could not write the log", cp.stderr)
                self.assertNotIn(name, self.users())
                cp = run_cli(["user", "add", name] + self.dst)  # and it can be run again
                self.assertEqual(cp.returncode, 0, cp.stderr)

    def test_a_user_purge_that_failed_kept_the_user(self):
        for env in self.FAULTS:
            with self.subTest(env=env):
                cp = run_cli(["user", "purge", "alice"] + self.dst, env=env)
                self.assertEqual(cp.returncode, 1, (cp.stdout, cp.stderr))
                self.assertIn("could not write the log", cp.stderr)
                self.assertIn("alice", self.users())

    def test_an_import_that_failed_imported_nothing_and_can_be_run_again(self):
        src = ManagedDir()
        self.addCleanup(src.cleanup)
        cp = run_cli(["user", "add", "carol", "--data", src.path, "--node-id", "1"])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        data = subprocess.run([harness.EVENTD_BIN, "export", "--user", "carol", "--data",
                               src.path, "--node-id", "1"], stdout=subprocess.PIPE, env=harness.clean_env(),
                              timeout=10, check=True).stdout
        for env in self.FAULTS:
            with self.subTest(env=env):
                p = subprocess.run([harness.EVENTD_BIN, "import"] + self.dst,
                                   input=data, capture_output=True,
                                   env=harness.clean_env(env), timeout=10)
                self.assertEqual(p.returncode, 1, p)
                self.assertIn(b"could not write the log", p.stderr)
                self.assertNotIn("carol", self.users())
        p = subprocess.run([harness.EVENTD_BIN, "import"] + self.dst, input=data,
                           capture_output=True, env=harness.clean_env(), timeout=10)
        self.assertEqual(p.returncode, 0, p)
        self.assertIn("carol", self.users())


if __name__ == "__main__":
    unittest.main()
