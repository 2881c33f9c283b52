"""Shared helpers for the eventd black-box tests.

Python 3 standard library only.  Everything talks to 127.0.0.1; every wait
is bounded in time.

    with Server(users=["alice"]) as srv:
        key = srv.keys["alice"]
        r = request(srv.port, "GET", "/v2/theme",
                    headers={"Authorization": auth_header("alice", key)})

Raw sockets keep a per-socket read buffer (see read_response), so several
pipelined responses can be read one after the other from the same socket.

Other test files use this module and apiclient.OutServer subclasses Server
with its internals (_drain, _cond, _lock, _threads, _eof, _kill, keys, users,
env, extra_args, start_timeout): keep those names and their meaning stable.
"""

import base64
import errno
import http.client
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import weakref

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EVENTD_BIN = os.path.abspath(os.environ.get("EVENTD_BIN") or
                             os.path.join(REPO_ROOT, "build", "eventd"))

HOST = "127.0.0.1"
DEFAULT_TIMEOUT = 5.0
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
LISTEN_RE = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


class HarnessError(AssertionError):
    """A failure of the server under test detected by the harness."""


class ConnectionClosed(HarnessError):
    """The peer closed (or reset) the connection before a full response."""

    def __init__(self, msg, partial=b""):
        super().__init__("%s (partial data: %r)" % (msg, partial[:500]))
        self.partial = partial


def check_binary():
    if not (os.path.isfile(EVENTD_BIN) and os.access(EVENTD_BIN, os.X_OK)):
        raise HarnessError("eventd binary not found or not executable: %s "
                           "(set EVENTD_BIN or build it)" % EVENTD_BIN)


def clean_env(extra=None):
    """The current environment without any EVENTD_* server variables, plus extra."""
    # EVENTD_LOOP_SYNC_MAX_US is the test run's choice (ctest runs the storage and fault
    # suites once with each of the store's sync paths), not a server setting to clear.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EVENTD_") or k == "EVENTD_LOOP_SYNC_MAX_US"}
    # Test builds hash new passwords with libsodium's minimum limits (src/common/pwhash.c):
    # a test that measures the real cost passes EVENTD_TEST_PWHASH_FAST="0".
    env["EVENTD_TEST_PWHASH_FAST"] = "1"
    # The suites register hundreds of accounts from 127.0.0.1 within seconds: far more than
    # the registration throttles let one address (or a server) make. A test of those limits
    # passes its own flags (a flag wins over its variable).
    env["EVENTD_REGISTER_PER_ADDRESS"] = "1000000"
    env["EVENTD_REGISTER_PER_MINUTE"] = "1000000"
    # SIGTERM stops at once, as before the drain window existed: stop() would otherwise
    # wait --drain-ms (5 s) each time. The drain's own tests pass --drain-ms (test_drain.py).
    env["EVENTD_DRAIN_MS"] = "0"
    # The log's preallocation (--log-prealloc-bytes, 4 MiB by default) is on in every suite,
    # smaller: hundreds of servers start, each writing its zeros. A test that reads the log
    # file byte for byte while a server runs passes 0 (test_storage.py's LogFormat).
    env["EVENTD_LOG_PREALLOC_BYTES"] = "262144"
    if extra:
        env.update(extra)
    return env


def run_cli(args, env=None, timeout=10.0, cwd=None):
    """Runs EVENTD_BIN with args; returns CompletedProcess (text mode).

    Raises HarnessError if it does not finish within timeout."""
    check_binary()
    try:
        return subprocess.run([EVENTD_BIN] + list(args), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=clean_env(env), timeout=timeout, cwd=cwd,
                              text=True, errors="replace")
    except subprocess.TimeoutExpired as e:
        raise HarnessError("eventd %s did not exit within %.1fs; stdout=%r stderr=%r"
                           % (" ".join(args), timeout, e.stdout, e.stderr))


def add_user(data_dir, name):
    """`eventd user add NAME --data DIR`; returns the API key (last stdout line)."""
    cp = run_cli(["user", "add", name, "--data", data_dir])
    if cp.returncode != 0:
        raise HarnessError("eventd user add %s failed: exit %d, stdout=%r stderr=%r"
                           % (name, cp.returncode, cp.stdout, cp.stderr))
    lines = [l.strip() for l in cp.stdout.splitlines() if l.strip()]
    if not lines:
        raise HarnessError("eventd user add %s printed no key; stderr=%r" % (name, cp.stderr))
    return lines[-1]


def auth_header(name, key):
    return "Basic " + base64.b64encode(("%s:%s" % (name, key)).encode()).decode()


# ---- every answer checked against the API contract (docs/openapi.json) ----
# Ports of the eventd servers this process started (Server.start), with the base path and
# site path each serves under: only their answers are checked, not a balancer's or nginx's.
# A suite that must not be checked (none of the API suites) sets OPENAPI_CHECK = False.
OPENAPI_CHECK = os.environ.get("EVENTD_OPENAPI_CHECK", "1") != "0"
_served = {}
_max_string = 0


def _flag_value(args, env, flag, var, default):
    v = (env or {}).get(var, default)
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            v = args[i + 1]
        elif a.startswith(flag + "="):
            v = a[len(flag) + 1:]
    return "" if v == "/" else v


def check_answer(port, method, target, status, header_list, body, head=False):
    """Checks one answer of the eventd on port (or admin socket path) against docs/openapi.json
    (tests/blackbox/openapi_check.py); raises openapi_check.Mismatch."""
    if not OPENAPI_CHECK or port not in _served:
        return
    import openapi_check
    base, site, settings = _served[port]
    openapi_check.contract().check(method, target, status, header_list, body, base_path=base,
                                   site_path=site, head=head or method == "HEAD",
                                   settings=settings)


class _Sent:
    """What was sent on a raw socket: the requests whose answers are still due."""

    def __init__(self, port):
        self.port = port
        self.buf = bytearray()   # bytes not yet parsed into requests
        self.due = []            # [(method, target)], oldest first
        self.body_left = 0       # Content-Length bytes of the last request still to come
        self.chunked = False     # the last request's chunked body is still coming
        self.lost = False        # unparseable: the rest of this socket is not attributed

    def feed(self, data):
        self.buf += data
        while not self.lost:
            if self.body_left:
                n = min(self.body_left, len(self.buf))
                del self.buf[:n]
                self.body_left -= n
                if self.body_left:
                    return
            if self.chunked:
                end = _chunked_end(self.buf)
                if end is None:
                    return
                if end < 0:
                    self.lost = True
                    return
                del self.buf[:end]
                self.chunked = False
            while self.buf[:2] == b"\r\n":
                del self.buf[:2]
            idx = self.buf.find(b"\r\n\r\n")
            if idx < 0:
                return
            lines = bytes(self.buf[:idx]).decode("latin-1").split("\r\n")
            del self.buf[:idx + 4]
            parts = lines[0].split(" ")
            if len(parts) != 3:
                self.lost = True
                return
            self.due.append((parts[0], parts[1]))
            te = cl = None
            for line in lines[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "transfer-encoding":
                    te = v.strip().lower()
                elif k.strip().lower() == "content-length":
                    cl = v.strip()
            if te == "chunked":
                self.chunked = True
            elif te is not None:
                self.lost = True
            elif cl is not None:
                if not cl.isdigit():
                    self.lost = True
                    return
                self.body_left = int(cl)

    def next_due(self):
        """(method, target) of the request the next answer is for, or (None, None)."""
        if self.due:
            return self.due.pop(0)
        if self.lost:
            return None, None
        # An answer before the request's head was complete (431, 408, 400): its request line.
        line = bytes(self.buf).split(b"\r\n", 1)
        if len(line) == 2:
            parts = line[0].decode("latin-1").split(" ")
            if len(parts) == 3:
                return parts[0], parts[1]
        return None, None


def _chunked_end(buf):
    """Bytes of a complete chunked body at the start of buf; None: incomplete; -1: malformed."""
    i = 0
    while True:
        j = buf.find(b"\r\n", i)
        if j < 0:
            return None
        try:
            size = int(bytes(buf[i:j]).split(b";")[0].strip(), 16)
        except ValueError:
            return -1
        i = j + 2
        if size == 0:
            while True:     # trailers, then the empty line
                j = buf.find(b"\r\n", i)
                if j < 0:
                    return None
                if j == i:
                    return j + 2
                i = j + 2
        if len(buf) < i + size + 2:
            return None
        i += size + 2


_sent = weakref.WeakKeyDictionary()


# http.client, as the suites use it (apiclient.Client, the spec client, one-off
# connections): every answer read whole with read() is checked too.
_http_request = http.client.HTTPConnection.request
_http_getresponse = http.client.HTTPConnection.getresponse


def _checked_request(self, method, url, *args, **kwargs):
    self._eventd_sent = (method, url)
    return _http_request(self, method, url, *args, **kwargs)


def _checked_getresponse(self):
    r = _http_getresponse(self)
    sent, self._eventd_sent = getattr(self, "_eventd_sent", None), None
    # A server by its port, or its admin socket by its path (an AF_UNIX subclass's unix_path).
    where = getattr(self, "unix_path", None) or (self.port if self.host == HOST else None)
    if sent and where in _served:
        read = r.read

        def checked_read(amt=None):
            data = read(amt)
            if amt is None:
                check_answer(where, sent[0], sent[1], r.status, r.getheaders(), data)
            return data
        r.read = checked_read
    return r


http.client.HTTPConnection.request = _checked_request
http.client.HTTPConnection.getresponse = _checked_getresponse


class Server:
    """Runs `eventd serve` on 127.0.0.1:0 with a fresh (or given) data dir.

    Server(extra_args=[...], env={...}, data_dir=None, users=[...])
    Users are added with `eventd user add` before the server starts; their
    keys are in .keys[name]."""

    def __init__(self, extra_args=(), env=None, data_dir=None, users=(),
                 start_timeout=START_TIMEOUT, subcommand="serve", demo=False, wrapper=()):
        """demo=True leaves the demo user on (no --no-demo-user); wrapper is a
        command the binary runs under (e.g. valgrind and its flags)."""
        self.demo = demo
        self.wrapper = list(wrapper)
        self.extra_args = list(extra_args)
        self.subcommand = subcommand
        self.env = env
        self.users = list(users)
        self.start_timeout = start_timeout
        self.own_dir = data_dir is None
        self.data_dir = data_dir
        self.proc = None
        self.port = None
        self.keys = {}
        self._lines = []           # stderr lines
        self._stdout_lines = []
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._threads = []
        self._eof = False
        self._stderr_open = threading.Event()  # cleared: stderr is not read (stall_stderr)
        self._stderr_open.set()

    # -- lifecycle ---------------------------------------------------------
    def start(self):
        check_binary()
        if self.data_dir is None:
            self.data_dir = tempfile.mkdtemp(prefix="eventd-bb-")
        for u in self.users:
            self.keys[u] = add_user(self.data_dir, u)
        args = (self.wrapper + [EVENTD_BIN] + ([self.subcommand] if self.subcommand else []) +
                ["--listen", "127.0.0.1:0", "--data", self.data_dir] +
                ([] if self.demo else ["--no-demo-user"]) + self.extra_args)
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=clean_env(self.env), cwd=self.data_dir)
        t = threading.Thread(target=self._drain, args=(self.proc.stderr, True), daemon=True)
        t.start()
        self._threads.append(t)
        t2 = threading.Thread(target=self._drain, args=(self.proc.stdout, False), daemon=True)
        t2.start()
        self._threads.append(t2)
        deadline = time.monotonic() + self.start_timeout
        with self._cond:
            while self.port is None:
                left = deadline - time.monotonic()
                if left <= 0 or self._eof:
                    break
                self._cond.wait(min(left, 0.1))
        if self.port is None:
            reason = "exited early" if self.proc.poll() is not None else \
                "did not log 'listening on 127.0.0.1:PORT' within %.0fs" % self.start_timeout
            self._kill()
            raise HarnessError("eventd %s (args %r, exit %r); stderr:\n%s"
                               % (reason, args[1:], self.proc.returncode, self.stderr_text()))
        env = dict(os.environ, **(self.env or {}))
        # A record keeps what its writer's --max-string-bytes allowed, and a data directory may
        # pass from one server to the next: the largest this process has started with holds.
        global _max_string
        _max_string = max(_max_string, int(_flag_value(
            self.extra_args, env, "--max-string-bytes", "EVENTD_MAX_STRING_BYTES", "255")))
        _served[self.port] = (
            _flag_value(self.extra_args, env, "--base-path", "EVENTD_BASE_PATH", "/v2"),
            _flag_value(self.extra_args, env, "--site-path", "EVENTD_SITE_PATH", ""),
            {"--max-string-bytes": _max_string})
        # The admin socket (DATA/admin.sock) answers as the listener does.
        _served[os.path.join(self.data_dir, "admin.sock")] = _served[self.port]
        return self

    def stall_stderr(self):
        """Stops reading eventd's stderr (after the line being read), as a log reader
        that stopped: its pipe fills. resume_stderr reads on."""
        self._stderr_open.clear()

    def resume_stderr(self):
        self._stderr_open.set()

    def _drain(self, pipe, is_stderr):
        try:
            for raw in iter(pipe.readline, b""):
                if is_stderr:
                    self._stderr_open.wait()
                line = raw.decode("utf-8", "replace")
                with self._cond:
                    if not is_stderr:
                        self._stdout_lines.append(line)
                    else:
                        self._lines.append(line)
                        if self.port is None:
                            m = LISTEN_RE.search(line)
                            if m:
                                self.port = int(m.group(1))
                    self._cond.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            if is_stderr:
                with self._cond:
                    self._eof = True
                    self._cond.notify_all()

    def stderr_text(self):
        with self._lock:
            return "".join(self._lines)

    def stdout_text(self):
        with self._lock:
            return "".join(self._stdout_lines)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def read_to_end(self, timeout=STOP_TIMEOUT):
        """Once the process has exited (stop, wait): waits (bounded) until its stdout and
        stderr have been read to their end, so stdout_text and stderr_text hold all it
        wrote. Raises HarnessError if it is still running or the reading does not end."""
        if self.running():
            raise HarnessError("read_to_end while eventd is still running")
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise HarnessError("eventd's output was not read to its end within %.1fs"
                                   % timeout)

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout):
        """Waits for exit; returns the exit code or None on timeout (no kill)."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT):
        """Sends sig, waits up to timeout; returns the exit code.

        On timeout kills the server and raises HarnessError."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.wait(timeout)
        if rc is None:
            self._kill()
            raise HarnessError("eventd did not exit within %.1fs after signal %d; stderr:\n%s"
                               % (timeout, sig, self.stderr_text()))
        return rc

    def _kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def close(self):
        self._kill()
        for t in self._threads:
            t.join(timeout=2)
        for p in (self.proc.stdout, self.proc.stderr) if self.proc else ():
            try:
                p.close()
            except OSError:
                pass
        if self.own_dir and self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()
        return False


# -- raw sockets -------------------------------------------------------------

_buffers = weakref.WeakKeyDictionary()


def _buf(sock):
    b = _buffers.get(sock)
    if b is None:
        b = bytearray()
        _buffers[sock] = b
    return b


def connect(port, timeout=DEFAULT_TIMEOUT, nodelay=True):
    s = socket.create_connection((HOST, port), timeout=timeout)
    if nodelay:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _buffers[s] = bytearray()
    return s


def _peer_port(sock):
    try:
        return sock.getpeername()[1]
    except (OSError, IndexError, TypeError):
        return None


def _sent_on(sock):
    """What was sent on sock to a server whose answers are checked (made on first use),
    or None for a socket to anything else."""
    st = _sent.get(sock)
    if st is None:
        port = _peer_port(sock)
        if port in _served:
            st = _sent[sock] = _Sent(port)
    return st


def send_raw(sock, data):
    if isinstance(data, str):
        data = data.encode("latin-1")
    st = _sent_on(sock)
    if st is not None:
        st.feed(data)
    sock.sendall(data)


class Response:
    def __init__(self, version, status, reason, header_list, body, raw):
        self.version = version
        self.status = status
        self.reason = reason
        self.header_list = header_list          # [(name as sent, value)]
        self.headers = {}                       # lower-case name -> value (dups joined ", ")
        for k, v in header_list:
            lk = k.lower()
            self.headers[lk] = v if lk not in self.headers else self.headers[lk] + ", " + v
        self.body = body
        self.raw = raw

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise HarnessError("response body is not JSON (%s): %r" % (e, self.body[:500]))

    def header(self, name, default=None):
        return self.headers.get(name.lower(), default)

    def __repr__(self):
        return "<Response %s %d %s headers=%r body=%r>" % (
            self.version, self.status, self.reason, self.header_list, self.body[:300])


def _recv_more(sock, deadline, buf, what):
    left = deadline - time.monotonic()
    if left <= 0:
        raise HarnessError("timed out waiting for %s; have %r" % (what, bytes(buf[:500])))
    sock.settimeout(left)
    try:
        chunk = sock.recv(65536)
    except socket.timeout:
        raise HarnessError("timed out waiting for %s; have %r" % (what, bytes(buf[:500])))
    except (ConnectionResetError, BrokenPipeError) as e:
        raise ConnectionClosed("connection reset while waiting for %s: %s" % (what, e), bytes(buf))
    if not chunk:
        raise ConnectionClosed("connection closed while waiting for %s" % what, bytes(buf))
    buf += chunk


def read_response(sock, timeout=DEFAULT_TIMEOUT, head=False):
    """Reads exactly ONE HTTP response from sock (keeps any excess buffered).

    1xx, 204 and 304 responses (and head=True) have no body.  The body is read
    by Content-Length, by chunked coding, or else until the server closes."""
    buf = _buf(sock)
    deadline = time.monotonic() + timeout
    while True:
        idx = buf.find(b"\r\n\r\n")
        if idx >= 0:
            break
        if len(buf) > 1 << 20:
            raise HarnessError("response head larger than 1 MiB: %r" % bytes(buf[:300]))
        _recv_more(sock, deadline, buf, "response head")
    head_bytes = bytes(buf[:idx])
    del buf[:idx + 4]
    lines = head_bytes.decode("latin-1").split("\r\n")
    m = re.match(r"^(HTTP/\d\.\d) (\d{3})(?: (.*))?$", lines[0])
    if not m:
        raise HarnessError("bad status line %r (head %r)" % (lines[0], head_bytes[:300]))
    version, status, reason = m.group(1), int(m.group(2)), m.group(3) or ""
    hl = []
    for line in lines[1:]:
        if ":" not in line:
            raise HarnessError("bad response header line %r" % line)
        k, v = line.split(":", 1)
        if k != k.strip() or not k:
            raise HarnessError("bad response header name %r" % line)
        hl.append((k, v.strip(" \t")))
    hdrs = {k.lower(): v for k, v in hl}
    body = b""
    if head or 100 <= status < 200 or status in (204, 304):
        pass
    elif "chunked" in hdrs.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            while b"\r\n" not in buf:
                _recv_more(sock, deadline, buf, "chunk size")
            i = buf.find(b"\r\n")
            size = int(bytes(buf[:i]).split(b";")[0].strip(), 16)
            del buf[:i + 2]
            if size == 0:
                while True:    # trailers until empty line
                    while b"\r\n" not in buf:
                        _recv_more(sock, deadline, buf, "trailer")
                    i = buf.find(b"\r\n")
                    line = bytes(buf[:i])
                    del buf[:i + 2]
                    if not line:
                        break
                break
            while len(buf) < size + 2:
                _recv_more(sock, deadline, buf, "chunk data")
            body += buf[:size]
            del buf[:size + 2]
        body = bytes(body)
    elif "content-length" in hdrs:
        try:
            n = int(hdrs["content-length"])
        except ValueError:
            raise HarnessError("bad Content-Length in response: %r" % hdrs["content-length"])
        while len(buf) < n:
            _recv_more(sock, deadline, buf, "response body (%d bytes)" % n)
        body = bytes(buf[:n])
        del buf[:n]
    else:
        try:
            while True:
                _recv_more(sock, deadline, buf, "body until close")
        except ConnectionClosed:
            pass
        body = bytes(buf)
        del buf[:]
    raw = head_bytes + b"\r\n\r\n" + body
    st = _sent.get(sock) if not isinstance(sock, _BytesSock) else None
    if st is not None and not 100 <= status < 200:
        method, target = st.next_due()
        check_answer(st.port, method or "", target, status, hl, body, head=head)
    return Response(version, status, reason, hl, body, raw)


class _BytesSock:
    """Socket stand-in that serves fixed bytes, for parse_response_bytes."""

    def __init__(self, data):
        self.data = bytes(data)

    def settimeout(self, t):
        pass

    def recv(self, n):
        out, self.data = self.data[:n], self.data[n:]
        return out


def parse_response_bytes(data, sock=None):
    """Parses the first HTTP response in data (e.g. what arrived before a close).

    With sock, the socket data came from, the answer is checked against the API contract
    like read_response's: as the answer to the socket's next request sent with send_raw, or,
    with none to tie it to, as a connection-level answer (check_answer)."""
    r = read_response(_BytesSock(data), timeout=1.0)
    if sock is not None and not 100 <= r.status < 200:
        st = _sent_on(sock)
        if st is not None:
            method, target = st.next_due()
            check_answer(st.port, method or "", target, r.status, r.header_list, r.body,
                         head=method == "HEAD")
    return r


def wait_closed(sock, timeout):
    """Reads until EOF/reset or timeout.

    Returns (closed, data, elapsed_seconds); data includes anything buffered."""
    buf = _buf(sock)
    start = time.monotonic()
    deadline = start + timeout
    closed = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except (ConnectionResetError, BrokenPipeError):
            closed = True
            break
        if not chunk:
            closed = True
            break
        buf += chunk
    data = bytes(buf)
    del buf[:]
    return closed, data, time.monotonic() - start


def read_all_until_close(sock, timeout=DEFAULT_TIMEOUT):
    """Returns everything until the server closes; raises HarnessError if it
    does not close within timeout."""
    closed, data, _ = wait_closed(sock, timeout)
    if not closed:
        raise HarnessError("server did not close the connection within %.1fs; got %r"
                           % (timeout, data[:500]))
    return data


def is_open(sock, wait=0.3):
    """True if no EOF/reset arrives within wait seconds (data is kept buffered)."""
    buf = _buf(sock)
    r, _, _ = select.select([sock], [], [], wait)
    if not r:
        return True
    try:
        sock.settimeout(0.5)
        chunk = sock.recv(65536)
    except socket.timeout:
        return True
    except (ConnectionResetError, BrokenPipeError):
        return False
    if not chunk:
        return False
    buf += chunk
    return True


def build_request(method, path, body=None, headers=None, version="HTTP/1.1"):
    """Builds request bytes; adds Host and (for a body) Content-Length unless given.

    body may be bytes, str or a JSON-serialisable object (dict/list)."""
    headers = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
        headers.setdefault("Content-Type", "application/json")
    if isinstance(body, str):
        body = body.encode("utf-8")
    lower = {k.lower() for k in headers}
    out = ["%s %s %s" % (method, path, version)]
    if "host" not in lower:
        out.append("Host: 127.0.0.1")
    if body is not None and "content-length" not in lower and "transfer-encoding" not in lower:
        out.append("Content-Length: %d" % len(body))
    for k, v in headers.items():
        out.append("%s: %s" % (k, v))
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + (body or b"")


def chunked(body_parts, ext=None):
    """Encodes parts as a chunked body (optional chunk extension text)."""
    out = b""
    for p in body_parts:
        if isinstance(p, str):
            p = p.encode()
        out += b"%x%s\r\n%s\r\n" % (len(p), (";" + ext).encode() if ext else b"", p)
    return out + b"0\r\n\r\n"


def request(port, method, path, body=None, headers=None, timeout=DEFAULT_TIMEOUT,
            version="HTTP/1.1"):
    """One request on a fresh connection; returns the Response."""
    s = connect(port, timeout=timeout)
    try:
        send_raw(s, build_request(method, path, body, headers, version))
        return read_response(s, timeout=timeout, head=(method == "HEAD"))
    finally:
        s.close()


def log_bytes(port):
    """The bytes of the server's log (eventd_log_bytes on /metrics): its end, which the file's
    size is not while the server runs (zeros are preallocated past it, docs/STORAGE.md)."""
    r = request(port, "GET", "/metrics")
    for line in r.body.decode().splitlines():
        if line.startswith("eventd_log_bytes "):
            return int(float(line.split()[1]))
    raise AssertionError("no eventd_log_bytes in /metrics")


def exchange(port, data, timeout=DEFAULT_TIMEOUT):
    """Sends raw bytes on a fresh connection, returns (response, socket)."""
    s = connect(port, timeout=timeout)
    send_raw(s, data)
    return read_response(s, timeout=timeout), s


def find_id(resp, kind=None):
    """Best-effort id of a created resource: Location header .../N, else the
    first integer value of a key named "Id" (any case) in the JSON body."""
    loc = resp.header("location")
    if loc:
        m = re.search(r"/(\d+)/?$", loc)
        if m:
            return int(m.group(1))

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k.lower() == "id" and isinstance(v, int) and not isinstance(v, bool):
                    return v
            for v in o.values():
                r = walk(v)
                if r is not None:
                    return r
        elif isinstance(o, list):
            for v in o:
                r = walk(v)
                if r is not None:
                    return r
        return None

    try:
        found = walk(resp.json())
    except HarnessError:
        found = None
    if found is None:
        raise HarnessError("cannot find the id of the created resource in %r" % resp)
    return found


def wait_until(pred, timeout, interval=0.05):
    """Polls pred() until true or timeout (bounded); returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


# -- what the server has done with a connection, asked of the kernel -----------

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2
_TCP_ESTABLISHED, _TCP_SYN_RECV, _TCP_LISTEN = 1, 3, 10


def _server_socket(port, sock):
    """The server's side of sock's connection to port on loopback, looked up in the kernel
    by its address (sock_diag over netlink, as ss does): (unread bytes, inode, TCP state),
    or None when there is none (gone; the lookup then finds the listener, which does not
    count). An inode of 0 is a socket no process holds: still in the listener's queue
    (established), or closed and left to the kernel (finishing its FIN handshake)."""
    client = sock.getsockname()[1]
    lo = socket.inet_pton(socket.AF_INET, HOST) + bytes(12)
    # inet_diag_sockid: the server's port and address first, then the client's; no cookie
    sockid = struct.pack("!HH16s16s", port, client, lo, lo) + struct.pack(
        "=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)
    req = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
    msg = struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, 1, 1, 0) + req
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        nl.send(msg)
        data = nl.recv(65536)
    _, mtype = struct.unpack_from("=IH", data)
    if mtype == _NLMSG_ERROR:
        return None
    state = data[17]
    rqueue, _, _, inode = struct.unpack_from("=IIII", data, 16 + 4 + 48 + 4)
    return None if state == _TCP_LISTEN else (rqueue, inode, state)


def _closed_by_server(f):
    """f (a _server_socket answer) is a socket the server has closed for good."""
    return f is None or (f[1] == 0 and f[2] not in (_TCP_ESTABLISHED, _TCP_SYN_RECV))


def _server_sockets(port, socks):
    """{client port: _server_socket(port, s)} for each of socks."""
    return {s.getsockname()[1]: _server_socket(port, s) for s in socks}


def wait_server_read(port, socks, timeout=DEFAULT_TIMEOUT, or_closed=False):
    """Waits (bounded) until the server has accepted each of socks and read every byte
    sent on it so far: its side of each connection is its own and holds nothing unread.
    On loopback a byte is in that queue once send returns, and eventd parses what it
    reads in the same callback, so afterwards the server has seen the bytes (half a head
    makes a connection busy, a first part of a request is a read of its own). With
    or_closed, a connection the server has closed counts as done (for a client sending a
    request the server may refuse halfway). Raises HarnessError at the timeout."""
    def done(f):
        if or_closed and _closed_by_server(f):
            return True
        return f is not None and f[0] == 0 and f[1] != 0  # inode 0: not accepted yet

    def all_read():
        return all(done(f) for f in _server_sockets(port, socks).values())

    if not wait_until(all_read, timeout, 0.002):
        raise HarnessError("the server did not read what was sent within %.1fs: %r"
                           % (timeout, _server_sockets(port, socks)))


def wait_server_closed(port, sock, timeout=DEFAULT_TIMEOUT):
    """Waits (bounded) until the server has closed its side of sock's connection for good
    (not only shut down its writing, as a lingering close does): the socket is gone, or
    left to the kernel to finish its FIN handshake. Raises HarnessError at the timeout."""
    if not wait_until(lambda: _closed_by_server(_server_socket(port, sock)), timeout, 0.005):
        raise HarnessError("the server did not close the connection within %.1fs: %r"
                           % (timeout, _server_sockets(port, [sock])))


# -- a small file system that can be filled up (real ENOSPC) -------------------

SANITIZER_RE = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|"
                          r"runtime error:")


class Tmpfs:
    """A tmpfs of `size` mounted on a fresh directory (we run as root).

    fill() writes a filler file until the file system refuses with ENOSPC;
    unfill() deletes it again.  A mount that fails raises HarnessError: a
    test that cannot make the disk full must fail, not skip."""

    FILLER = "zz-filler"

    def __init__(self, size="2m", prefix="eventd-bb-tmpfs-"):
        self.path = tempfile.mkdtemp(prefix=prefix)
        cp = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % size,
                             "tmpfs", self.path], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            timeout=10)
        if cp.returncode != 0:
            os.rmdir(self.path)
            raise HarnessError("cannot mount a tmpfs on %s (exit %d): %s"
                               % (self.path, cp.returncode, cp.stderr.strip()))
        self.mounted = True

    def file(self, name):
        return os.path.join(self.path, name)

    def fill(self, max_bytes=1 << 30):
        """Writes the filler until ENOSPC; returns the bytes written (bounded)."""
        fd = os.open(self.file(self.FILLER), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        total, chunk = 0, 1 << 16
        try:
            while total < max_bytes:
                try:
                    n = os.write(fd, b"\xa5" * chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    if chunk == 1:
                        break
                    chunk //= 16 if chunk >= 16 else chunk
                    continue
                total += n
        finally:
            os.close(fd)
        if total >= max_bytes:
            raise HarnessError("tmpfs %s did not fill up within %d bytes" % (self.path, max_bytes))
        return total

    def unfill(self):
        os.unlink(self.file(self.FILLER))

    def close(self):
        if self.mounted:
            subprocess.run(["umount", "-l", self.path], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
            self.mounted = False
            try:
                os.rmdir(self.path)
            except OSError:
                pass
