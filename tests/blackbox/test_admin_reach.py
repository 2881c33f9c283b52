#!/usr/bin/env python3
"""Who can reach the admin API (docs/SECURITY.md, issue 17's critical finding).

Whether a request came from the admin socket is a property of the listener
that accepted its connection, never of the peer's address:
  - a TCP client that resets its connection before eventd accepts it (so
    that the peer's address cannot be read) is closed unserved, whatever it
    sent: reproduced deterministically by stopping the server (SIGSTOP)
    while the client connects, sends and resets, then letting it go on;
  - admin paths on the TCP listener are 404 without --admin-on-listener,
    and 401 without a token with it;
  - --no-admin turns the admin API off everywhere, --admin-on-listener
    included;
  - DATA/admin.sock is never open to others, at any moment of a start,
    and a client of another uid that opens it anyway (its mode widened by
    hand) is refused by its credentials (SO_PEERCRED)."""

import json
import os
import signal
import socket
import stat
import struct
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_admin import SOCK, sock_call, tcp_call, wait_socket  # noqa: E402

NOBODY = 65534


def reset_before_accept(srv, requests):
    """Each request is sent on a connection that the client resets while the
    server is stopped, so the server accepts an already reset connection."""
    srv.send_signal(signal.SIGSTOP)
    try:
        for raw in requests:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.connect((harness.HOST, srv.port))
            s.sendall(raw)
            s.close()
    finally:
        srv.send_signal(signal.SIGCONT)


def metric(srv, name, label=None):
    r = harness.request(srv.port, "GET", "/metrics")
    for line in r.body.decode().splitlines():
        if line.startswith(name + ("{" + label + "}" if label else " ")):
            return float(line.split()[-1])
    return None


def refused_unknown_peer(srv):
    return metric(srv, "eventd_connections_refused_total", 'reason="peer_unknown"') or 0


class ResetBeforeAccept(unittest.TestCase):
    def check_refused(self, srv, n, done):
        """Waits until the server has refused n connections (or done() says
        the attack went through), then checks that nothing went through."""
        harness.wait_until(lambda: refused_unknown_peer(srv) >= n or done(), 10)
        self.assertFalse(done(), "an unserved connection changed the admin state")
        self.assertEqual(refused_unknown_peer(srv), n, srv.stderr_text())

    def test_delete_user_on_a_reset_connection_deletes_nothing(self):
        with harness.Server(users=["victim"]) as srv:
            wait_socket(srv)
            req = b"DELETE /admin/users/victim HTTP/1.1\r\nHost: x\r\n\r\n"
            reset_before_accept(srv, [req] * 5)
            gone = lambda: sock_call(srv.data_dir, "GET", "/admin/users/victim").status == 404
            self.check_refused(srv, 5, gone)
            self.assertEqual(sock_call(srv.data_dir, "GET", "/admin/users/victim").status, 200)

    def test_put_user_on_a_reset_connection_creates_nothing(self):
        with harness.Server() as srv:
            wait_socket(srv)
            reqs = [b"PUT /admin/users/race%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(20)]
            reset_before_accept(srv, reqs)

            def created():
                r = sock_call(srv.data_dir, "GET", "/admin/users")
                return any(u["Username"].startswith("race") for u in r.result()["Items"])
            self.check_refused(srv, 20, created)

    def test_no_admin_refuses_reset_connections_too(self):
        with harness.Server(["--no-admin"], users=["victim"]) as srv:
            reset_before_accept(srv, [b"DELETE /admin/users/victim HTTP/1.1\r\nHost: x\r\n\r\n"])
            key = srv.keys["victim"]
            ok = lambda: harness.request(srv.port, "GET", "/v2/theme", headers={
                "Authorization": harness.auth_header("victim", key)}).status == 200
            harness.wait_until(lambda: refused_unknown_peer(srv) >= 1 or not ok(), 10)
            self.assertTrue(ok(), "the user was deleted")
            self.assertEqual(refused_unknown_peer(srv), 1, srv.stderr_text())

    def test_access_log_never_says_local_for_a_tcp_client(self):
        with harness.Server(["--access-log"], users=["victim"]) as srv:
            wait_socket(srv)
            reset_before_accept(srv, [b"GET /admin/users HTTP/1.1\r\nHost: x\r\n\r\n"])
            harness.wait_until(lambda: refused_unknown_peer(srv) >= 1, 10)
            # The access log is buffered (--access-log-flush-ms): every line is out after the stop.
            self.assertEqual(srv.stop(), 0)
            srv.read_to_end()
            self.assertNotIn('"client":"local"', srv.stdout_text() + srv.stderr_text())


class TcpListener(unittest.TestCase):
    def test_admin_path_on_tcp_is_404_by_default(self):
        with harness.Server(users=["victim"]) as srv:
            self.assertEqual(tcp_call(srv.port, "DELETE", "/admin/users/victim").status, 404)
            wait_socket(srv)
            self.assertEqual(sock_call(srv.data_dir, "GET", "/admin/users/victim").status, 200)

    def test_admin_on_listener_without_token_is_401(self):
        with harness.Server(["--admin-on-listener"], users=["victim"]) as srv:
            self.assertEqual(tcp_call(srv.port, "DELETE", "/admin/users/victim").status, 401)

    def test_no_admin_with_admin_on_listener_is_404_on_tcp(self):
        with harness.Server(["--no-admin", "--admin-on-listener"], users=["victim"]) as srv:
            self.assertEqual(tcp_call(srv.port, "GET", "/admin/users").status, 404)

    def test_no_admin_creates_no_socket(self):
        with harness.Server(["--no-admin"]) as srv:
            self.assertFalse(os.path.exists(os.path.join(srv.data_dir, SOCK)))


# Every chmod eventd makes is held up 300 ms (strace's fault injection), so a
# socket that exists, open to others, before its chmod stays so long enough
# for the watcher to see it, whatever the machine's speed.
SLOW_CHMOD = ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=chmod,fchmodat,fchmod",
              "-e", "inject=chmod,fchmodat,fchmod:delay_enter=300000"]


def reachable_by_others(top, path):
    """Whether a user of another uid (and group) could connect to the socket
    at path: search permission on every directory from top down, and write
    permission on the socket, for 'other'."""
    d = os.path.dirname(path)
    while True:
        if not os.lstat(d).st_mode & 0o001:
            return False
        if os.path.samefile(d, top):
            break
        d = os.path.dirname(d)
    return bool(os.lstat(path).st_mode & 0o002)


class AdminSocket(unittest.TestCase):
    def test_socket_is_never_reachable_by_others_during_starts(self):
        """Watches the data directory (mode 0755, traversable by others)
        through three starts with slowed chmods: no socket eventd makes there
        is ever reachable by another user."""
        path = __import__("tempfile").mkdtemp(prefix="eventd-bb-")
        os.chmod(path, 0o755)
        seen, exposed = [], []
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                for root, _dirs, files in os.walk(path):
                    for n in files:
                        p = os.path.join(root, n)
                        try:
                            if not stat.S_ISSOCK(os.lstat(p).st_mode):
                                continue
                            seen.append(p)
                            if reachable_by_others(path, p):
                                exposed.append((p, oct(stat.S_IMODE(os.lstat(p).st_mode))))
                        except FileNotFoundError:
                            continue
        t = threading.Thread(target=watch, daemon=True)
        t.start()
        try:
            for _ in range(3):
                with harness.Server(data_dir=path, wrapper=SLOW_CHMOD) as srv:
                    wait_socket(srv)
                    # strace detaches on SIGTERM: stop eventd itself, then strace ends.
                    pid = srv.proc.pid
                    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                        os.kill(int(f.read().split()[0]), signal.SIGTERM)
                    srv.proc.wait(10)
        finally:
            stop.set()
            t.join(5)
            __import__("shutil").rmtree(path, ignore_errors=True)
        self.assertTrue(seen, "the watcher never saw the socket")
        self.assertEqual(sorted(set(exposed)), [], "reachable by other users")

    def test_other_uid_is_refused_even_through_a_widened_mode(self):
        if os.geteuid() != 0:
            self.fail("this test needs root, to connect as another uid")
        with harness.Server() as srv:
            wait_socket(srv)
            path = os.path.join(srv.data_dir, SOCK)
            os.chmod(srv.data_dir, 0o755)
            os.chmod(path, 0o777)  # what the old chmod-after-bind window looked like
            rfd, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: another user
                os.close(rfd)
                out = b"?"
                try:
                    os.setgid(NOBODY)
                    os.setuid(NOBODY)
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.settimeout(5)
                    s.connect(path)
                    s.sendall(b"GET /admin/users HTTP/1.1\r\nHost: x\r\n\r\n")
                    out = s.recv(100) or b"closed"
                except (ConnectionResetError, BrokenPipeError):
                    out = b"closed"
                except Exception as e:  # noqa: BLE001
                    out = ("error " + repr(e)).encode()
                os.write(wfd, out[:100])
                os._exit(0)
            os.close(wfd)
            got = os.read(rfd, 200)
            os.close(rfd)
            os.waitpid(pid, 0)
            self.assertEqual(got, b"closed", "another uid was served: %r" % got)
            self.assertEqual(sock_call(srv.data_dir, "GET", "/admin/users").status, 200)


SUN_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux


def dir_of_length(top, n):
    """A data directory under top whose path is n characters long."""
    path = os.path.join(top, "d")
    return path + "x" * (n - len(path))


class LongDataPath(unittest.TestCase):
    """DATA/admin.sock must fit a Unix socket's address (107 bytes). Until
    2026-11-29 the socket was bound first under a longer temporary name
    (DATA/.admin-XXXXXX/sock), which libuv cut to 107 bytes without a word:
    with DATA/admin.sock of 100 bytes the server had no admin socket ("cannot
    listen: no such file or directory") though the CLI could reach it there,
    and with a longer path the cut name put a socket file outside the data
    directory, in its parent, of the umask's mode."""

    def setUp(self):
        self.top = __import__("tempfile").mkdtemp(prefix="eventd-bb-")
        self.addCleanup(__import__("shutil").rmtree, self.top, True)

    def test_a_socket_path_that_fits_is_served(self):
        d = dir_of_length(self.top, 100 - len("/" + SOCK))
        with harness.Server(data_dir=d, users=["alice"]) as srv:
            self.assertEqual(len(os.path.join(d, SOCK)), 100)
            wait_socket(srv)
            cp = harness.run_cli(["user", "list", "--data", d])
            self.assertEqual(cp.returncode, 0, (cp.stdout, cp.stderr, srv.stderr_text()))
            self.assertIn("alice", cp.stdout)

    def test_a_socket_path_too_long_is_said_and_leaves_no_file(self):
        d = dir_of_length(self.top, SUN_PATH_MAX + 5)
        with harness.Server(data_dir=d, users=["alice"]) as srv:
            self.assertEqual(srv.stop(), 0)
            self.assertIn("admin API: cannot listen on %s/%s: name too long" % (d, SOCK),
                          srv.stderr_text())
        self.assertEqual(os.listdir(self.top), [os.path.basename(d)])
        self.assertEqual(sorted(os.listdir(d)), ["LOCK", "eventd.log", "site.key"])


if __name__ == "__main__":
    unittest.main()
