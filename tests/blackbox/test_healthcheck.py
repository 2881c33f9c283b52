"""docker/healthcheck.sh, the image's HEALTHCHECK, against eventd as a
container runs it: PID 1 of a PID namespace of its own, the check run inside
that namespace (as `docker exec` does). It must find the address eventd
listens on from eventd's own command line, whichever way that line names the
`serve` command: written out, or left out (it is eventd's default, so
`docker run IMAGE --listen ...` replaces the image's `serve` with settings)."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import EVENTD_BIN, clean_env, wait_until  # noqa: E402

HEALTHCHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docker",
                           "healthcheck.sh")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class HealthcheckTests(unittest.TestCase):
    def check(self, command):
        """The check's exit status and output, eventd started as PID 1 with
        `eventd COMMAND --listen 127.0.0.1:PORT ...` and EVENTD_LISTEN naming
        another port (the image's), as a container whose arguments set --listen."""
        if os.geteuid() != 0:
            self.fail("this test needs root, to enter the container's namespaces")
        data = tempfile.mkdtemp(prefix="eventd-bb-")
        self.addCleanup(shutil.rmtree, data, True)
        port = free_port()
        args = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", EVENTD_BIN] + \
            command + ["--listen", "127.0.0.1:%d" % port, "--data", data, "--no-demo-user"]
        err = open(os.path.join(data, "stderr"), "w+")
        self.addCleanup(err.close)
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, env=clean_env())
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))

        def text():
            with open(err.name) as f:
                return f.read()
        self.assertTrue(wait_until(lambda: "listening on 127.0.0.1:%d" % port in text(), 10.0),
                        text())
        with open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)) as f:
            pid = int(f.read().split()[0])  # eventd, unshare's child: PID 1 inside
        cp = subprocess.run(["nsenter", "--target", str(pid), "--pid", "--mount", "bash",
                             HEALTHCHECK], stdin=subprocess.DEVNULL, capture_output=True,
                            text=True, timeout=10,
                            env=clean_env({"EVENTD_LISTEN": "0.0.0.0:%d" % free_port()}))
        return cp.returncode, cp.stdout + cp.stderr

    def test_serve_written_out(self):
        self.assertEqual(self.check(["serve"]), (0, ""))

    def test_serve_left_out_settings_only(self):
        self.assertEqual(self.check([]), (0, ""))


if __name__ == "__main__":
    unittest.main()
