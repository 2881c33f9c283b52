#!/usr/bin/env python3
"""Registration abuse and the throttle tables, black box (issue 17, docs/ACCOUNTS.md):

- registrations are throttled per client address (an IPv6 address by its /64)
  and server-wide: 429 too_many_requests with Retry-After;
- registrations hash in their own lane of the hashing queue: a flood of them
  never makes a known user's sign-in 503;
- a taken name costs what a free one does (throttled, queued and hashed the
  same; the 409 comes only once the hash is done), under load too;
- the sign-in throttle keys an IPv6 client by its /64, and an IPv4-mapped
  address as the IPv4 address it is.

Every server here trusts X-Forwarded-For from 127.0.0.1, so each test picks
the client addresses it speaks from. The harness lifts the registration
limits (the other suites register hundreds of accounts from 127.0.0.1); the
tests of those limits pass their own flags."""

import http.client
import json
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from apiclient import HOST, ErrorAsserts, Resp  # noqa: E402
from test_accounts import (  # noqa: E402
    JSON_T, PASSWORD, Browser, call, hidden_csrf, signin_json, uname)

TRUST = ("--trusted-proxies", "127.0.0.1")


def register_json(port, name, xff, password=PASSWORD):
    return call(port, "POST", "/register",
                json.dumps({"username": name, "password": password}).encode(),
                {"Content-Type": JSON_T, "X-Forwarded-For": xff})


def pipelined(port, bodies):
    """(path, body dict, xff) requests sent at once on one connection; returns the
    responses in order. All of them are parsed before the first hash is done: the loop
    reads them in one go, and a hash's answer comes back through the loop."""
    reqs = [harness.build_request("POST", path, json.dumps(body).encode(),
                                  {"Content-Type": JSON_T, "X-Forwarded-For": xff})
            for path, body, xff in bodies]
    s = harness.connect(port, timeout=60)
    try:
        s.sendall(b"".join(reqs))
        return [harness.read_response(s, timeout=60) for _ in bodies]
    finally:
        s.close()


def metric(port, name, labels):
    """The value of one sample of GET /metrics (AssertionError when missing)."""
    r = call(port, "GET", "/metrics")
    want = "%s{%s} " % (name, labels)
    for line in r.body.decode().splitlines():
        if line.startswith(want):
            return float(line[len(want):])
    raise AssertionError("no %s{%s} in /metrics:\n%s" % (name, labels, r.body.decode()))


class Flood:
    """threads JSON POSTs to path from address xff, each thread at most max_each, the
    k-th thread's bodies from body(k), until stop() (bounded in count and time).
    counts: answers by status; first(status) waits for the first answer of status."""

    def __init__(self, port, path, body, xff, threads, max_each):
        self.counts = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._seen = {}

        def run(k):
            c = http.client.HTTPConnection(HOST, port, timeout=60)
            try:
                for _ in range(max_each):
                    if self._stop.is_set():
                        return
                    c.request("POST", path, json.dumps(body(k)),
                              {"Content-Type": JSON_T, "X-Forwarded-For": xff})
                    r = c.getresponse()
                    r.read()
                    with self._lock:
                        self.counts[r.status] = self.counts.get(r.status, 0) + 1
                        self._seen.setdefault(r.status, threading.Event()).set()
            finally:
                c.close()

        self._threads = [threading.Thread(target=run, args=(k,), daemon=True)
                         for k in range(threads)]
        for t in self._threads:
            t.start()

    def first(self, status, timeout):
        return harness.wait_until(lambda: status in self._seen, timeout)

    def running(self):
        return any(t.is_alive() for t in self._threads)

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=120)


class Base(ErrorAsserts, unittest.TestCase):
    server_args = ()
    server_env = None

    @classmethod
    def setUpClass(cls):
        cls.srv = harness.Server(extra_args=list(TRUST) + list(cls.server_args),
                                 env=cls.server_env)
        cls.srv.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.srv.__exit__(None, None, None)

    def port(self):
        return self.srv.port

    def assertStatus(self, r, status):
        self.assertEqual(r.status, status, r.describe() if hasattr(r, "describe") else r)


class PerAddress(Base):
    """--register-per-address 3: the fourth registration from one address waits 60 s."""
    server_args = ("--register-per-address", "3")

    def register_n(self, xff, n, names=None):
        for i in range(n):
            name = names[i] if names else uname("pa")
            self.assertStatus(register_json(self.port(), name, xff), 201)

    def test_fourth_registration_from_one_address_is_429_with_retry_after_60(self):
        self.register_n("198.51.100.1", 3)
        r = register_json(self.port(), uname("pa"), "198.51.100.1")
        self.assertErr(r, 429, "too_many_requests")
        self.assertEqual(r.header("retry-after"), "60", r.describe())

    def test_a_refused_registration_creates_nothing(self):
        self.register_n("198.51.100.2", 3)
        name = uname("pa")
        self.assertStatus(register_json(self.port(), name, "198.51.100.2"), 429)
        self.assertStatus(signin_json(self.port(), name, xff="203.0.113.2"), 401)

    def test_another_address_still_registers(self):
        self.register_n("198.51.100.3", 3)
        self.assertStatus(register_json(self.port(), uname("pa"), "198.51.100.3"), 429)
        self.assertStatus(register_json(self.port(), uname("pa"), "198.51.100.4"), 201)

    def test_a_taken_name_from_a_throttled_address_is_429_like_a_free_one(self):
        taken = uname("pa")
        self.register_n("198.51.100.5", 3, [taken, uname("pa"), uname("pa")])
        r = register_json(self.port(), taken, "198.51.100.5")
        self.assertErr(r, 429, "too_many_requests")
        free = register_json(self.port(), uname("pa"), "198.51.100.5")
        self.assertEqual(r.json(), free.json())

    def test_addresses_of_one_ipv6_64_share_the_count(self):
        self.register_n("2001:db8:1:2::1", 1)
        self.register_n("2001:db8:1:2::2", 1)
        self.register_n("2001:db8:1:2:ffff:ffff:ffff:ffff", 1)
        r = register_json(self.port(), uname("pa"), "2001:db8:1:2:abcd::9")
        self.assertErr(r, 429, "too_many_requests")

    def test_the_next_ipv6_64_is_counted_apart(self):
        self.register_n("2001:db8:1:4::1", 3)
        self.assertStatus(register_json(self.port(), uname("pa"), "2001:db8:1:5::1"), 201)

    def test_the_form_answer_is_the_page_with_429_and_retry_after(self):
        self.register_n("198.51.100.6", 3)
        b_jar = call(self.port(), "GET", "/register", headers={"X-Forwarded-For": "198.51.100.6"})
        cookie = [v for k, v in b_jar.header_list if k.lower() == "set-cookie"][0].split(";")[0]
        token = hidden_csrf(b_jar.body)
        body = "username=%s&password=%s&password_confirm=%s&csrf=%s" % (
            uname("pa"), "correct+horse+battery", "correct+horse+battery", token)
        r = call(self.port(), "POST", "/register", body.encode(),
                 {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie,
                  "X-Forwarded-For": "198.51.100.6"})
        self.assertStatus(r, 429)
        self.assertEqual(r.header("retry-after"), "60", r.describe())
        self.assertIn("too many registrations from this address", r.body.decode(), r.describe())


class ServerWide(Base):
    """--register-per-minute 2: a third registration within the minute waits, from anywhere."""
    server_args = ("--register-per-minute", "2")

    def test_third_registration_of_the_minute_is_429_from_a_new_address(self):
        self.assertStatus(register_json(self.port(), uname("sw"), "198.51.100.11"), 201)
        self.assertStatus(register_json(self.port(), uname("sw"), "198.51.100.12"), 201)
        r = register_json(self.port(), uname("sw"), "198.51.100.13")
        self.assertErr(r, 429, "too_many_requests")
        self.assertIn("on this server", r.error()["Message"], r.describe())
        wait = int(r.header("retry-after", "0"))
        self.assertTrue(1 <= wait <= 30, r.describe())


class Lanes(Base):
    """One hash at a time, one sign-in and one registration waiting."""
    server_args = ("--pwhash-concurrency", "1", "--pwhash-queue", "1",
                   "--pwhash-register-queue", "1")

    def test_registrations_filling_their_lane_leave_a_known_users_sign_in_200(self):
        name = uname("known")
        self.assertStatus(register_json(self.port(), name, "203.0.113.30"), 201)
        regs = [("/register", {"username": uname("flood"), "password": PASSWORD},
                 "198.51.100.%d" % (31 + i)) for i in range(4)]
        out = pipelined(self.port(), regs + [
            ("/signin", {"username": name, "password": PASSWORD}, "203.0.113.30")])
        self.assertEqual([r.status for r in out], [201, 201, 503, 503, 200],
                         [r.body[:200] for r in out])


class LanesUnderAFlood(Base):
    """Threads registering from one address with the real Argon2id cost, for as long as a
    known user signs in from another one five times: every sign-in is 200. (Before, the
    registrations kept the shared queue full and the sign-ins got 503.)"""
    server_args = ("--pwhash-concurrency", "1", "--pwhash-queue", "2")
    server_env = {"EVENTD_TEST_PWHASH_FAST": "0"}
    FLOODERS = 12  # more than the registrations' lane holds (1 running + 8 waiting)
    MAX_EACH = 300  # registrations per flooding thread at most (most are quick 503s)
    SIGNINS = 5

    def test_a_registration_flood_never_makes_a_known_users_sign_in_503(self):
        name = uname("known")
        self.assertStatus(register_json(self.port(), name, "203.0.113.40"), 201)
        flood = Flood(self.port(), "/register",
                      lambda k: {"username": uname("fl"), "password": PASSWORD},
                      "198.51.100.40", self.FLOODERS, self.MAX_EACH)
        try:
            self.assertTrue(flood.first(503, 60), "the flood never filled the registrations' lane")
            statuses = [signin_json(self.port(), name, xff="203.0.113.41").status
                        for _ in range(self.SIGNINS)]
            flooding = flood.running()
        finally:
            flood.stop()
        self.assertTrue(flooding, "the flood ended before the sign-ins: %r" % flood.counts)
        self.assertEqual(statuses, [200] * self.SIGNINS, flood.counts)


class SigninsUnderAFlood(Base):
    """Threads signing in with the right passwords (no failure is ever counted) on a
    few accounts from one address, with the real Argon2id cost, for as long as a known
    user signs in from another address five times: every sign-in of the known user is
    200. One address has at most an eighth of the sign-in queue (at least 2) in flight,
    a name at most 2, failures or not. (Before, only failures were counted, and the
    flood kept the sign-in lane full: the known user got 503. Found by review.)"""
    server_args = ("--pwhash-concurrency", "1", "--pwhash-queue", "8")
    server_env = {"EVENTD_TEST_PWHASH_FAST": "0"}
    ACCOUNTS = 4
    FLOODERS = 12
    MAX_EACH = 400
    SIGNINS = 5

    def test_correct_passwords_from_one_address_never_make_a_known_users_sign_in_503(self):
        known = uname("known")
        self.assertStatus(register_json(self.port(), known, "203.0.113.42"), 201)
        names = [uname("fl") for _ in range(self.ACCOUNTS)]
        for i, n in enumerate(names):
            self.assertStatus(register_json(self.port(), n, "198.51.100.%d" % (70 + i)), 201)
        flood = Flood(self.port(), "/signin",
                      lambda k: {"username": names[k % len(names)], "password": PASSWORD},
                      "198.51.100.80", self.FLOODERS, self.MAX_EACH)
        try:
            self.assertTrue(harness.wait_until(lambda: flood.counts.get(200, 0) >= 2, 60),
                            flood.counts)
            statuses = [signin_json(self.port(), known, xff="203.0.113.43").status
                        for _ in range(self.SIGNINS)]
            flooding = flood.running()
        finally:
            flood.stop()
        self.assertTrue(flooding, "the flood ended before the sign-ins: %r" % flood.counts)
        self.assertEqual(statuses, [200] * self.SIGNINS, flood.counts)
        self.assertGreater(flood.counts.get(429, 0), 0, flood.counts)  # the flood was held back


class PasswordChangeShare(Base):
    """A password change is two hashes: the current password's check, then the new
    one's. Only the check counted toward its address's share of the sign-in queue
    (an eighth, at least 2, in flight): once it was done, the second hash waited in
    the queue uncounted, so an address changing passwords held up to twice its
    share (review, 2026-11-29). A change now counts until its second hash is done."""
    server_args = ("--pwhash-concurrency", "1", "--pwhash-queue", "16")  # an address: 2
    server_env = {"EVENTD_TEST_PWHASH_FAST": "0"}
    NEW = "another long passphrase"

    def test_a_changes_second_hash_counts_toward_its_address(self):
        addr = "198.51.100.99"
        browsers = []
        for i in range(2):
            b = Browser(self.port(), xff="198.51.100.%d" % (90 + i))
            b.register_json(uname("pc"))  # 201 or it raises; signed in
            b.xff = addr
            browsers.append(b)
        third = uname("pc")
        self.assertStatus(register_json(self.port(), third, "198.51.100.92"), 201)
        lane = 'lane="signin"'
        done = metric(self.port(), "eventd_password_hashes_total", lane)
        answers = []
        threads = [threading.Thread(target=lambda b=b: answers.append(b.post_json(
            "/user/password", {"current_password": PASSWORD, "password": self.NEW})))
            for b in browsers]
        for t in threads:
            t.start()
        try:
            # One check done: the other runs, and the first change's new hash waits.
            self.assertTrue(harness.wait_until(
                lambda: metric(self.port(), "eventd_password_hashes_total", lane) > done,
                30, interval=0.002))
            busy = metric(self.port(), "eventd_password_hashes_total", lane) == done + 1
            r = signin_json(self.port(), third, xff=addr)
        finally:
            for t in threads:
                t.join(timeout=60)
        self.assertTrue(busy, "the second check ended before the sign-in: hashes too fast")
        self.assertStatus(r, 429)
        self.assertEqual(sorted(a.status for a in answers), [200, 200])


class TakenNameCost(Base):
    def test_a_taken_name_is_hashed_like_a_free_one(self):
        name = uname("tk")
        before = metric(self.port(), "eventd_password_hashes_total", 'lane="register"')
        self.assertStatus(register_json(self.port(), name, "198.51.100.50"), 201)
        after_free = metric(self.port(), "eventd_password_hashes_total", 'lane="register"')
        r = register_json(self.port(), name, "198.51.100.51")
        self.assertErr(r, 409, "conflict")
        after_taken = metric(self.port(), "eventd_password_hashes_total", 'lane="register"')
        self.assertEqual((after_free - before, after_taken - after_free), (1, 1))


class TakenNameUnderLoad(Base):
    """One hash at a time, no registration waiting: while one runs, the rest are 503."""
    server_args = ("--pwhash-concurrency", "1", "--pwhash-register-queue", "0")

    def test_a_taken_name_gets_the_same_503_as_a_free_one_while_the_lane_is_full(self):
        taken = uname("tk")
        self.assertStatus(register_json(self.port(), taken, "198.51.100.60"), 201)
        out = pipelined(self.port(), [
            ("/register", {"username": uname("tk"), "password": PASSWORD}, "198.51.100.61"),
            ("/register", {"username": uname("tk"), "password": PASSWORD}, "198.51.100.62"),
            ("/register", {"username": taken, "password": PASSWORD}, "198.51.100.63")])
        self.assertEqual([r.status for r in out], [201, 503, 503], [r.body for r in out])
        self.assertEqual(out[2].body, out[1].body)
        self.assertEqual(out[2].header("retry-after"), out[1].header("retry-after"))

    def test_a_full_registration_lane_is_503_naming_its_own_limit(self):
        """(Until 2026-11-29 it named --pwhash-queue, the sign-in lane's limit, which an
        operator raising it would find changed nothing.)"""
        out = pipelined(self.port(), [
            ("/register", {"username": uname("rl"), "password": PASSWORD}, "198.51.100.64"),
            ("/register", {"username": uname("rl"), "password": PASSWORD}, "198.51.100.65")])
        self.assertEqual([r.status for r in out], [201, 503], [r.body for r in out])
        err = out[1].json()["Error"]
        self.assertEqual(err["Code"], "unavailable", out[1].body)
        self.assertIn("--pwhash-register-queue", err["Message"], out[1].body)
        self.assertEqual(out[1].header("retry-after"), "1", out[1].body)


class SigninIpv6(Base):
    """The sign-in throttle counts an IPv6 client by its /64 (5 free failures)."""

    def test_failures_from_one_64_throttle_another_address_of_it(self):
        name = uname("v6")
        self.assertStatus(register_json(self.port(), name, "203.0.113.70"), 201)
        for i in range(5):
            r = signin_json(self.port(), uname("nobody"), "wrong password!",
                            "2001:db8:7:8::%x" % (i + 1))
            self.assertStatus(r, 401)
        r = signin_json(self.port(), name, xff="2001:db8:7:8:ffff::1")
        self.assertErr(r, 429, "too_many_requests")

    def test_another_64_is_counted_apart(self):
        name = uname("v6")
        self.assertStatus(register_json(self.port(), name, "203.0.113.71"), 201)
        for i in range(5):
            self.assertStatus(signin_json(self.port(), uname("nobody"), "wrong password!",
                                          "2001:db8:7:9::%x" % (i + 1)), 401)
        self.assertStatus(signin_json(self.port(), name, xff="2001:db8:7:a::1"), 200)

    def test_an_ipv4_mapped_address_is_its_ipv4_address(self):
        name = uname("v6")
        self.assertStatus(register_json(self.port(), name, "203.0.113.72"), 201)
        for i in range(5):
            self.assertStatus(signin_json(self.port(), uname("nobody"), "wrong password!",
                                          "::ffff:198.51.100.80"), 401)
        r = signin_json(self.port(), name, xff="198.51.100.80")
        self.assertErr(r, 429, "too_many_requests")


class ThrottleFlush(Base):
    """The attack run's flush, on a table of 16 keys: a throttled name stays
    throttled however many other names fail after it."""
    server_args = ("--throttle-entries", "16")

    def test_a_throttled_name_survives_a_flood_of_other_names(self):
        victim = uname("fl")
        self.assertStatus(register_json(self.port(), victim, "203.0.113.90"), 201)
        n = [0]

        def addr():  # a fresh address per attempt: only the name tables count
            n[0] += 1
            return "198.18.%d.%d" % (n[0] // 250, n[0] % 250 + 1)
        for _ in range(5):
            self.assertStatus(signin_json(self.port(), victim, "wrong password!", addr()), 401)
        self.assertErr(signin_json(self.port(), victim, xff=addr()), 429, "too_many_requests")
        # 3x the table, each name failing until throttled; once the table is full of
        # throttled names, newcomers may be throttled early (sharing a slot with an
        # evicted count): their answers are not what this test is about.
        for i in range(48):
            other = "flood%d-%d" % (os.getpid() % 1000, i)
            for _ in range(5):
                signin_json(self.port(), other, "wrong password!", addr())
        self.assertErr(signin_json(self.port(), victim, xff=addr()), 429, "too_many_requests")


class Settings(unittest.TestCase):
    def test_the_new_settings_are_in_help(self):
        cp = harness.run_cli(["serve", "--help"])
        out = cp.stdout + cp.stderr
        for flag in ("--register-per-address", "--register-per-minute",
                     "--pwhash-register-queue", "--throttle-entries"):
            with self.subTest(flag=flag):
                self.assertTrue(flag in out, "%s is not in --help" % flag)

    def test_register_per_minute_zero_is_refused(self):
        cp = harness.run_cli(["serve", "--register-per-minute", "0", "--data", "/nonexistent"])
        self.assertEqual(cp.returncode, 2, cp.stderr)
        self.assertIn("--register-per-minute", cp.stderr)


if __name__ == "__main__":
    unittest.main()
