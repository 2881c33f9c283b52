#!/usr/bin/env python3
"""The Kubernetes StatefulSet of docs/SCALING.md, as written, run as processes.

The manifest's shard environment (its "env" list) is read from the document,
and three shards run with it and nothing else (their node ids and addresses
aside) behind docker/haproxy.cfg on loopback, loopback standing for the pod
network: the CIDR the manifest trusts becomes 127.0.0.0/8, its secret file a
file of 64 hex digits made as the document's "kubectl create secret" line
makes it. Checked through the balancer, from other client addresses:

  * one client's failed sign-ins do not throttle another client (the shards
    must trust the balancer's X-Forwarded-For: until 2026-11-29 the manifest
    had no EVENTD_TRUSTED_PROXIES, and the second client got 429 at once);
  * a sign-in form fetched through the balancer (from any shard, round robin)
    is accepted by every shard (one site secret: without it, 403 csrf);
  * the entrypoint gives pod eventd-N node id N + 1, and the grace period
    is longer than the drain and the shutdown timeout together.

Needs haproxy (2.6). Bounded: a few seconds.
"""

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_lb import CFG, HOST, ROOT, EVENTD_BIN, check_binary, clean_env, free_port  # noqa: E402
from test_lb import placement, wait_until  # noqa: E402

SCALING = os.path.join(ROOT, "docs", "SCALING.md")


def statefulset():
    """The YAML block of SCALING.md's "Kubernetes" section that holds the StatefulSet."""
    with open(SCALING) as f:
        text = f.read()
    section = text.split("\n## Kubernetes\n", 1)[1].split("\n## ", 1)[0]
    for block in re.findall(r"```yaml\n(.*?)```", section, re.S):
        if "kind: StatefulSet" in block:
            return block, section
    raise AssertionError("docs/SCALING.md: no StatefulSet in the Kubernetes section")


def manifest_env(block):
    """{name: value} of the eventd container's env list."""
    return dict(re.findall(r"\{name: (EVENTD_\w+), value: \"?([^\"}]*?)\"?\}", block))


class Kubernetes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        check_binary()
        cls.block, cls.section = statefulset()
        cls.env = manifest_env(cls.block)
        cls.work = tempfile.mkdtemp(prefix="eventd-lb-k8s-")
        cls.procs = []
        try:
            cls.start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def start(cls):
        env = dict(cls.env)
        if "EVENTD_TRUSTED_PROXIES" in env:
            env["EVENTD_TRUSTED_PROXIES"] = "127.0.0.0/8"  # the pod network, here
        if "EVENTD_SITE_SECRET_FILE" in env:
            m = re.search(r"kubectl create secret generic \S+ --from-literal=(\S+)=\$\(openssl rand -hex 32\)",
                          cls.section)
            assert m, "SCALING.md: no 'kubectl create secret' line for the site secret"
            secret = os.path.join(cls.work, "secret", m.group(1))
            os.makedirs(os.path.dirname(secret))
            with open(secret, "w") as f:
                f.write(os.urandom(32).hex())
            os.chmod(secret, 0o440)
            env["EVENTD_SITE_SECRET_FILE"] = secret
        lb_env = clean_env({"LB_ADMIN_SOCKET": os.path.join(cls.work, "admin.sock")})
        for n in (1, 2, 3):
            port = free_port()
            data = os.path.join(cls.work, "shard%d" % n)
            os.makedirs(data)
            shard_env = clean_env(dict(env, EVENTD_NODE_ID=str(n), EVENTD_DATA=data,
                                       EVENTD_LISTEN="%s:%d" % (HOST, port)))
            with open(os.path.join(cls.work, "shard%d.log" % n), "w") as log:
                cls.procs.append(subprocess.Popen([EVENTD_BIN, "serve"], env=shard_env,
                                                  stdin=subprocess.DEVNULL, stdout=log, stderr=log))
            lb_env["EVENTD_SHARD%d" % n] = "%s:%d" % (HOST, port)
        cls.port = free_port()
        lb_env["LB_BIND"] = "%s:%d" % (HOST, cls.port)
        with open(os.path.join(cls.work, "haproxy.log"), "w") as log:
            cls.procs.append(subprocess.Popen(["haproxy", "-db", "-f", CFG], env=lb_env,
                                              stdin=subprocess.DEVNULL, stdout=log, stderr=log))

        def healthy():
            try:
                return cls.request("GET", "/healthz")[0] == 200
            except OSError:
                return False
        assert wait_until(healthy, 20), "the balancer did not report three healthy shards"
        cls.names = placement(CFG, ["k8s-user%d" % i for i in range(60)])

    @classmethod
    def tearDownClass(cls):
        for p in cls.procs:
            if p.poll() is None:
                p.terminate()
        for p in cls.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        shutil.rmtree(cls.work, ignore_errors=True)

    @classmethod
    def request(cls, method, path, body=None, headers=None, source=HOST):
        c = http.client.HTTPConnection(HOST, cls.port, timeout=10, source_address=(source, 0))
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.getheader("Set-Cookie") or "", r.read()
        finally:
            c.close()

    def on(self, shard):
        return [n for n, s in sorted(self.names.items()) if s == shard]

    def signin(self, name, source):
        body = json.dumps({"username": name, "password": "not the password"})
        return self.request("POST", "/signin", body, {"Content-Type": "application/json"}, source)[0]

    def test_one_client_s_failed_sign_ins_do_not_throttle_another(self):
        names = self.on(2)
        first = [self.signin(name, "127.0.0.2") for name in names[:8]]
        self.assertIn(429, first)  # the first client is throttled (5 free failures) ...
        self.assertEqual(self.signin(names[8], "127.0.0.3"), 401)  # ... the second is not

    def test_a_sign_in_form_from_any_shard_is_accepted_by_every_shard(self):
        statuses = []
        for _ in range(3):  # round robin: each page from another shard
            _, cookie, page = self.request("GET", "/signin", source="127.0.0.4")
            jar = re.search(r"eventd_csrf=([^;]+)", cookie).group(1)
            token = re.search(r'name="csrf" value="([^"]+)"', page.decode()).group(1)
            for shard in (1, 2, 3):
                form = "username=%s&password=not+the+password&csrf=%s" % (self.on(shard)[0], token)
                statuses.append(self.request("POST", "/signin", form, {
                    "Content-Type": "application/x-www-form-urlencoded",
                    "Cookie": "eventd_csrf=" + jar}, "127.0.0.%d" % (5 + shard))[0])
        self.assertEqual(statuses, [401] * 9)  # a wrong password, never 403 csrf

    def test_the_entrypoint_gives_pod_n_node_n_plus_1(self):
        command = re.search(r"command: \[\"bash\", \"-c\", '(.*)'\]", self.block).group(1)
        self.assertIn("exec eventd serve", command)
        probe = command.replace("exec eventd serve", 'echo "$EVENTD_NODE_ID"')
        for ordinal in (0, 2, 9, 10):
            out = subprocess.run(["bash", "-c", probe], env={"HOSTNAME": "eventd-%d" % ordinal},
                                 stdout=subprocess.PIPE, text=True, timeout=10).stdout.strip()
            self.assertEqual(out, str(ordinal + 1))

    def test_the_grace_period_outlasts_the_drain_and_the_shutdown(self):
        grace = int(re.search(r"terminationGracePeriodSeconds: (\d+)", self.block).group(1))
        drain = int(self.env.get("EVENTD_DRAIN_MS", "5000"))
        shutdown = int(self.env.get("EVENTD_SHUTDOWN_TIMEOUT_MS", "10000"))
        self.assertGreater(grace * 1000, drain + shutdown)


if __name__ == "__main__":
    unittest.main()
