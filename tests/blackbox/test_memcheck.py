"""The real server under valgrind memcheck: a mixed, bounded workload (every
endpoint, bad bodies, pipelining, requests cut at random points, connections
dropped mid-request, a timeout, a compaction), then SIGTERM. Passes only if
valgrind reports no memory error and no definite leak, and eventd exits 0.
A missing valgrind fails it (deps/install.sh --test installs it): a skip would let CI
pass without the check RELIABILITY.md says it runs."""

import base64
import os
import random
import shutil
import signal
import subprocess
import tempfile
import unittest

from harness import Server, add_user, connect, read_response, send_raw, wait_closed, wait_until

COMPACTION_DONE = "compaction done"


def workload_requests(auth):
    def req(method, path, body=None):
        head = "%s %s HTTP/1.1\r\nHost: x\r\n%s" % (method, path, auth)
        if body is not None:
            head += "Content-Length: %d\r\n" % len(body)
        return head.encode() + b"\r\n" + (body or b"")

    bodies = [b'{"Theme":{"Name":"m","PageBackgroundRGB":"aBcDeF"}}', b'{"Theme":{"Name":5}}',
              b'{"Theme":', b'[]', b'{"Address":{"Lat":"x"}}', b'\xff\xfe',
              b'{"Name":"\xc3\xa9","Status":"draft"}', b'{"Theme":{"Nope":1}}', b'']
    out = []
    for b in bodies:
        out.append(req("POST", "/v2/theme", b))
        out.append(req("PUT", "/v2/theme/2", b))
        out.append(req("POST", "/v2/address", b))
    out.append(req("POST", "/v2/address", b'{"Address":{"Lat":51.5,"Lon":"-0.12","ShowMap":"yes"}}'))
    out.append(req("POST", "/v2/event", b'{"Event":{"Name":"e","ThemeID":2}}'))
    out.append(req("GET", "/v2/theme?limit=2"))
    out.append(req("GET", "/v2/theme/2"))
    out.append(req("GET", "/v2/event/3"))
    out.append(req("DELETE", "/v2/theme/4"))
    out.append(req("PATCH", "/v2/theme/4"))
    out.append(req("GET", "/nowhere"))
    return out


class MemcheckTest(unittest.TestCase):
    def test_no_memory_errors(self):
        self.assertIsNotNone(shutil.which("valgrind"),
                             "valgrind is not installed: run ./deps/install.sh --test")
        data = tempfile.mkdtemp(prefix="eventd-vg-")
        try:
            key = add_user(data, "vg")
            auth = "Authorization: Basic %s\r\n" % base64.b64encode(
                ("vg:" + key).encode()).decode()
            log = os.path.join(data, "valgrind.log")
            srv = Server(data_dir=data, start_timeout=60,
                         wrapper=["valgrind", "--error-exitcode=99", "--leak-check=full",
                                  "--errors-for-leak-kinds=definite", "--log-file=" + log],
                         extra_args=["--max-pipeline", "4", "--header-timeout-ms", "2000"])
            srv.start()
            proc, port = srv.proc, srv.port

            reqs = workload_requests(auth)
            everything = b"".join(reqs)
            rng = random.Random(7)
            # Pipelined in one write, then cut at random points, each bounded.
            for round_ in range(6):
                s = connect(port, timeout=30)
                pos = 0
                while pos < len(everything):
                    n = rng.randint(1, 400) if round_ else len(everything)
                    send_raw(s, everything[pos:pos + n])
                    pos += n
                for i in range(len(reqs)):
                    r = read_response(s, timeout=30)
                    self.assertGreaterEqual(r.status, 200)
                s.close()
            # Connections dropped mid-request.
            for i in range(20):
                s = connect(port, timeout=30)
                send_raw(s, everything[:rng.randint(1, len(everything) - 1)])
                s.close()
            # One connection left to time out inside its headers (--header-timeout-ms).
            s = connect(port, timeout=30)
            send_raw(s, b"GET /healthz HTTP/1.1\r\n")
            closed, _, _ = wait_closed(s, 30)
            self.assertTrue(closed, "the header timeout did not close the connection")
            s.close()
            # An online compaction, to its end.
            done = srv.stderr_text().count(COMPACTION_DONE)
            proc.send_signal(signal.SIGUSR1)
            self.assertTrue(
                wait_until(lambda: srv.stderr_text().count(COMPACTION_DONE) > done, 60),
                "no %r line after SIGUSR1" % COMPACTION_DONE)
            s = connect(port, timeout=30)
            send_raw(s, reqs[0])
            self.assertEqual(read_response(s, timeout=30).status, 200)
            s.close()

            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                self.fail("eventd under valgrind did not exit after SIGTERM")
            with open(log) as f:
                report = f.read()
            self.assertEqual(code, 0, "exit %d; valgrind report:\n%s" % (code, report[-6000:]))
            self.assertIn("ERROR SUMMARY: 0 errors", report, report[-6000:])
        finally:
            if os.environ.get("KEEP"): print("kept", data)
            else: shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
