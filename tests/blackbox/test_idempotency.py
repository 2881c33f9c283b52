#!/usr/bin/env python3
"""Idempotency-Key on creates, black box (README "Idempotency keys",
docs/STORAGE.md "Idempotency keys", issue 18).

Pinned here: a create with Idempotency-Key K is processed once; the same
user sending K again with the same request (path and body) gets the first
answer again, byte for byte, and nothing is created; another body is 422
idempotency_key_reused; another user's K is its own; a retry while the first
waits for its fdatasync is 409 conflict with Retry-After; keys survive a
restart, kill -9 after the answer, and a compaction; they are forgotten after
--idempotency-ttl-s (a create with K then makes a new record, and compaction
drops the key from the log); --max-idempotency-keys-per-user caps them (403);
a malformed header is 400 invalid_header naming Idempotency-Key.
"""

import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from apiclient import Client, ErrorAsserts, ManagedDir, add_user, run_cli  # noqa: E402

KEY = "order-7f3a9c2e-retry-safe"
LOG = "eventd.log"


class Served(ErrorAsserts, unittest.TestCase):
    """A server on a data directory of its own, with users alice and bob."""

    ENV = {}

    def setUp(self):
        self.dir = ManagedDir(prefix="eventd-bb-idem-")
        self.addCleanup(self.dir.cleanup)
        self.keys = {u: add_user(self.dir.path, u) for u in ("alice", "bob")}
        self.srv = None
        self.start()

    def start(self, extra=()):
        self.srv = harness.Server(data_dir=self.dir.path, env=dict(self.ENV),
                                  extra_args=list(extra))
        self.srv.start()
        self.addCleanup(self.srv.close)
        self.clients = {u: Client(self.srv.port, u, k) for u, k in self.keys.items()}
        for c in self.clients.values():
            self.addCleanup(c.close)

    def stop(self, sig=signal.SIGTERM):
        for c in self.clients.values():
            c.close()
        self.srv.stop(sig=sig)
        self.srv.close()
        self.srv = None

    def post(self, kind="theme", body=None, key=KEY, user="alice"):
        if body is None:
            body = {"Theme": {"Name": "Summer fair"}}
        return self.clients[user].call("POST", "/v2/" + kind, body,
                                       headers={"Idempotency-Key": key})

    def must_post(self, **kw):
        r = self.post(**kw)
        self.assertEqual(r.status, 200, r.describe())
        return r

    def count(self, kind="theme", user="alice"):
        return len(self.clients[user].list_all(kind, limit=100))

    def assertReplay(self, first, again):
        self.assertEqual((again.status, again.body), (first.status, first.body), again.describe())


class Replay(Served):
    def test_same_key_same_body_answers_the_first_answer_byte_for_byte(self):
        first = self.must_post()
        self.assertReplay(first, self.post())

    def test_same_key_same_body_creates_nothing(self):
        self.must_post()
        self.post()
        self.assertEqual(self.count(), 1)

    def test_a_replay_says_so_in_idempotent_replayed(self):
        first = self.must_post()
        self.assertIsNone(first.header("Idempotent-Replayed"), first.describe())
        self.assertEqual(self.post().header("Idempotent-Replayed"), "true")

    def test_a_replay_after_an_update_is_still_the_first_answer(self):
        first = self.must_post()
        rid = first.result()["ID"]
        self.clients["alice"].must_update("theme", rid, {"Name": "Winter fair"})
        self.assertReplay(first, self.post())

    def test_event_create_replays(self):
        body = {"Event": {"Name": "Opening night"}}
        first = self.must_post(kind="event", body=body)
        self.assertReplay(first, self.post(kind="event", body=body))
        self.assertEqual(self.count("event"), 1)

    def test_address_create_replays(self):
        body = {"Address": {"City": "Lyon"}}
        first = self.must_post(kind="address", body=body)
        self.assertReplay(first, self.post(kind="address", body=body))
        self.assertEqual(self.count("address"), 1)

    def test_metrics_count_stored_and_replayed_keys(self):
        self.must_post()
        self.post()
        self.post()
        text = harness.request(self.srv.port, "GET", "/metrics").body.decode()
        self.assertIn('eventd_idempotency_keys_total{result="stored"} 1\n', text)
        self.assertIn('eventd_idempotency_keys_total{result="replayed"} 2\n', text)

    def test_a_create_without_the_header_is_not_deduplicated(self):
        c = self.clients["alice"]
        c.must_create("theme", {"Name": "Summer fair"})
        c.must_create("theme", {"Name": "Summer fair"})
        self.assertEqual(self.count(), 2)

    def test_a_failed_create_keeps_no_key(self):
        bad = self.post(body={"Theme": {"PageBackgroundRGB": "nothex"}})
        self.assertErr(bad, 400, "invalid_field", "PageBackgroundRGB")
        self.must_post()
        self.assertEqual(self.count(), 1)


class Reuse(Served):
    def test_same_key_another_body_is_422_idempotency_key_reused(self):
        self.must_post()
        r = self.post(body={"Theme": {"Name": "Autumn fair"}})
        self.assertErr(r, 422, "idempotency_key_reused", "Idempotency-Key")

    def test_same_key_another_body_creates_nothing(self):
        self.must_post()
        self.post(body={"Theme": {"Name": "Autumn fair"}})
        self.assertEqual(self.count(), 1)

    def test_same_key_same_body_on_another_path_is_422(self):
        self.must_post(kind="address", body={})
        r = self.post(kind="event", body={})
        self.assertErr(r, 422, "idempotency_key_reused", "Idempotency-Key")

    def test_another_users_same_key_is_independent(self):
        a = self.must_post(user="alice")
        b = self.must_post(user="bob")
        self.assertNotEqual(a.result()["ID"], b.result()["ID"])
        self.assertEqual((self.count(user="alice"), self.count(user="bob")), (1, 1))


class InFlight(Served):
    ENV = {"EVENTD_FSYNC": "always"}

    def test_a_retry_before_the_first_is_durable_is_409_with_retry_after(self):
        # Both requests in one write: the server parses the second in the same
        # read as the first, before the loop turn ends and its fdatasync runs.
        req = harness.build_request("POST", "/v2/theme", {"Theme": {"Name": "Summer fair"}}, {
            "Authorization": harness.auth_header("alice", self.keys["alice"]),
            "Idempotency-Key": KEY})
        s = harness.connect(self.srv.port)
        self.addCleanup(s.close)
        s.sendall(req + req)
        first = harness.read_response(s)
        second = harness.read_response(s)
        self.assertEqual(first.status, 200, first)
        self.assertEqual(second.status, 409, second)
        self.assertEqual(second.json()["Error"]["Code"], "conflict")
        self.assertEqual(second.json()["Error"]["Field"], "Idempotency-Key")
        self.assertEqual(second.header("Retry-After"), "1")

    def test_after_the_409_the_retry_replays(self):
        req = harness.build_request("POST", "/v2/theme", {"Theme": {"Name": "Summer fair"}}, {
            "Authorization": harness.auth_header("alice", self.keys["alice"]),
            "Idempotency-Key": KEY})
        s = harness.connect(self.srv.port)
        self.addCleanup(s.close)
        s.sendall(req + req)
        first = harness.read_response(s)
        harness.read_response(s)
        s.sendall(req)
        third = harness.read_response(s)
        self.assertEqual((third.status, third.body), (first.status, first.body))


class Durable(Served):
    def test_a_key_survives_a_restart(self):
        first = self.must_post()
        self.stop()
        self.start()
        self.assertReplay(first, self.post())
        self.assertEqual(self.count(), 1)

    def test_a_key_survives_kill_9_after_the_answer(self):
        first = self.must_post()
        self.stop(sig=signal.SIGKILL)
        self.start()
        self.assertReplay(first, self.post())
        self.assertEqual(self.count(), 1)

    def test_a_key_survives_an_online_compaction(self):
        first = self.must_post()
        rid = first.result()["ID"]
        for i in range(20):  # garbage for the compaction to drop
            self.clients["alice"].must_update("theme", rid, {"Name": "rename %d" % i})
        size = harness.log_bytes(self.srv.port)
        self.srv.send_signal(signal.SIGUSR1)
        self.assertTrue(harness.wait_until(
            lambda: "compaction done" in self.srv.stderr_text(), 5.0), self.srv.stderr_text())
        self.assertLess(harness.log_bytes(self.srv.port), size)
        self.stop()
        self.start()
        self.assertReplay(first, self.post())
        self.assertEqual(self.count(), 1)

    def test_a_replay_is_answered_while_writes_are_refused(self):
        first = self.must_post()
        self.stop()
        self.ENV = {"EVENTD_MAX_LIVE_BYTES": "1"}  # every write that adds data: 507
        self.start()
        self.assertReplay(first, self.post())

    def test_a_new_key_is_refused_while_writes_are_refused(self):
        self.stop()
        self.ENV = {"EVENTD_MAX_LIVE_BYTES": "1"}
        self.start()
        self.assertErr(self.post(), 507, "insufficient_storage")

    def test_a_users_keys_go_with_eventd_user_remove(self):
        self.must_post()
        self.stop()
        cp = run_cli(["user", "remove", "alice", "--data", self.dir.path])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        with open(self.dir.file(LOG), "rb") as f:
            log = f.read()
        cp = run_cli(["compact", "--data", self.dir.path])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        with open(self.dir.file(LOG), "rb") as f:
            self.assertNotIn(KEY.encode(), f.read())
        self.assertIn(KEY.encode(), log)


class Moved(Served):
    def test_a_key_moves_with_its_user_by_export_and_import(self):
        first = self.must_post()
        self.stop()
        exp = subprocess.run([harness.EVENTD_BIN, "export", "--user", "alice", "--data",
                              self.dir.path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=harness.clean_env(), timeout=10)
        self.assertEqual(exp.returncode, 0, exp.stderr)
        cp = run_cli(["user", "purge", "alice", "--data", self.dir.path])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        imp = subprocess.run([harness.EVENTD_BIN, "import", "--data", self.dir.path],
                             input=exp.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=harness.clean_env(), timeout=10)
        self.assertEqual(imp.returncode, 0, imp.stderr)
        self.start()
        self.assertReplay(first, self.post())


class ExpiredTwin(Served):
    """An online compaction forgets an expired key without writing anything; a
    key made again with its name is filed as a new one. When that compaction
    fails (its sync here), the log holds both, and the next start met the old
    one first, took it for expired and created the record again instead of
    replaying the acknowledged answer (review, 2026-11-29)."""
    ENV = {"EVENTD_IDEMPOTENCY_TTL_S": "1", "EVENTD_FAULT_FSYNC_AFTER": "1",
           "EVENTD_FAULT_TIMES": "1", "EVENTD_LOG_PREALLOC_BYTES": "0"}

    def test_the_key_made_again_replays_after_a_failed_compaction(self):
        first = self.must_post()  # the first sync: good
        time.sleep(1.2)  # the key expires
        self.srv.proc.send_signal(signal.SIGUSR1)  # its sync fails: the log keeps both
        self.assertTrue(harness.wait_until(
            lambda: "compaction failed" in self.srv.stderr_text() or
            "compaction abandoned" in self.srv.stderr_text(), 10.0), self.srv.stderr_text())

        def made_again():
            r = self.post()
            return r if r.status == 200 else None  # 503 until the store's probe succeeds

        second = harness.wait_until(made_again, 15.0, interval=0.2)
        self.assertTrue(second, self.srv.stderr_text())
        self.assertNotEqual(second.result()["ID"], first.result()["ID"])
        self.stop(sig=signal.SIGKILL)
        self.ENV = {}
        self.start()
        self.assertReplay(second, self.post())
        self.assertEqual(self.count(), 2)


class Expiry(Served):
    ENV = {"EVENTD_IDEMPOTENCY_TTL_S": "1"}

    def test_after_the_ttl_the_same_key_creates_a_new_record(self):
        first_id = self.must_post().result()["ID"]

        def created_again():
            r = self.must_post()
            return r.result()["ID"] != first_id

        self.assertTrue(harness.wait_until(created_again, 5.0))
        self.assertEqual(self.count(), 2)

    def test_compaction_drops_an_expired_key_from_the_log(self):
        self.must_post()
        self.stop()

        def compacted_without_key():
            cp = run_cli(["compact", "--data", self.dir.path],
                         env={"EVENTD_IDEMPOTENCY_TTL_S": "1"})
            self.assertEqual(cp.returncode, 0, cp.stderr)
            with open(self.dir.file(LOG), "rb") as f:
                return KEY.encode() not in f.read()

        self.assertTrue(harness.wait_until(compacted_without_key, 5.0, interval=0.2))


class Cap(Served):
    ENV = {"EVENTD_MAX_IDEMPOTENCY_KEYS_PER_USER": "2"}

    def test_a_new_key_beyond_the_cap_is_403_quota_exceeded(self):
        self.must_post(key="k1")
        self.must_post(key="k2")
        r = self.post(key="k3")
        self.assertErr(r, 403, "quota_exceeded", "Idempotency-Key")

    def test_a_known_key_at_the_cap_still_replays(self):
        first = self.must_post(key="k1")
        self.must_post(key="k2")
        self.assertReplay(first, self.post(key="k1"))


class ByReference(Served):
    """A key answers by reference to the record it created (docs/STORAGE.md, "Idempotency
    keys"): its first answer is that record rendered as it was created, and a key whose
    record is replaced or removed keeps the record as it was. Every path that replaces
    or removes a record, and every way back from the log, gives the first answer."""

    def post_updated(self, kind="theme", body=None, update=None):
        first = self.must_post(kind=kind, body=body)
        rid = first.result()["ID"]
        self.clients["alice"].must_update(kind, rid, update or {"Name": "Winter fair"})
        return first, rid

    def test_a_replay_after_a_deletion_is_the_first_answer(self):
        first = self.must_post()
        self.clients["alice"].must_delete("theme", first.result()["ID"])
        again = self.post()
        self.assertReplay(first, again)
        self.assertEqual(again.header("Idempotent-Replayed"), "true")
        self.assertEqual(self.count(), 0)

    def test_a_replay_after_an_update_and_a_restart_is_the_first_answer(self):
        first, _ = self.post_updated()
        self.stop()
        self.start()
        self.assertReplay(first, self.post())

    def test_a_replay_after_an_update_and_kill_9_is_the_first_answer(self):
        first, _ = self.post_updated()
        self.stop(sig=signal.SIGKILL)
        self.start()
        self.assertReplay(first, self.post())

    def test_a_replay_after_updates_a_deletion_and_compactions_is_the_first_answer(self):
        first, rid = self.post_updated()
        other = self.must_post(key="k2")
        self.clients["alice"].must_delete("theme", other.result()["ID"])
        self.srv.send_signal(signal.SIGUSR1)  # online: the keys as memory holds them
        self.assertTrue(harness.wait_until(
            lambda: "compaction done" in self.srv.stderr_text(), 5.0), self.srv.stderr_text())
        self.clients["alice"].must_update("theme", rid, {"Name": "Spring fair"})
        self.stop()
        cp = run_cli(["compact", "--data", self.dir.path])  # offline: as a replay gives them
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.start()
        self.assertReplay(first, self.post())
        self.assertReplay(other, self.post(key="k2"))

    def test_a_theme_an_event_links_replays_with_the_event_id_it_was_created_with(self):
        first = self.must_post()
        rid = first.result()["ID"]
        self.clients["alice"].must_create("event", {"Name": "Gala", "ThemeID": rid})
        self.assertNotEqual(self.clients["alice"].must_get("theme", rid)["EventID"], 0)
        self.assertReplay(first, self.post())
        self.stop()
        self.start()
        self.assertReplay(first, self.post())

    def test_an_address_replays_its_numbers_as_first_written_after_a_restart(self):
        # The first answer writes the body's decimals from their digits; a replay renders
        # the stored doubles: the same bytes.
        body = {"Address": {"City": "Lyon", "Lon": "-0.10", "Lat": 45.7500, "ShowMap": True}}
        first = self.must_post(kind="address", body=body)
        self.assertIn(b'"Lon":-0.1,', first.body)
        self.clients["alice"].must_delete("address", first.result()["ID"])
        self.stop()
        self.start()
        self.assertReplay(first, self.post(kind="address", body=body))

    def test_a_repair_that_cut_the_record_as_created_never_replays_a_later_version(self):
        # After a compaction the record as created and its key are two frames: the key
        # answers by reference to the record before it. A --repair that cuts the damaged
        # record frame leaves the key filed by reference with no record, and the next
        # change of that id (a PUT after the compaction) then files the record anew: the
        # key must not take that later version for the record as created (a 200 replay
        # with another body). The first answer is lost with the frame: a 500 says so.
        body = {"Theme": {"Name": "FIRSTNAME"}}
        first = self.must_post(body=body)
        rid = first.result()["ID"]
        self.srv.send_signal(signal.SIGUSR1)
        self.assertTrue(harness.wait_until(
            lambda: "compaction done" in self.srv.stderr_text(), 5.0), self.srv.stderr_text())
        self.clients["alice"].must_update("theme", rid, {"Name": "SECONDNAME"})
        self.stop()
        with open(self.dir.file(LOG), "rb") as f:
            data = bytearray(f.read())
        at = data.find(b"FIRSTNAME")  # the compacted image of the record as created
        self.assertGreater(at, 0)
        data[at] ^= 0x5A
        with open(self.dir.file(LOG), "wb") as f:
            f.write(bytes(data))
        self.start(extra=["--repair"])
        again = self.post(body=body)
        if again.status == 200:
            self.assertReplay(first, again)
        else:
            self.assertEqual(again.status, 500, again.describe())
        self.assertNotIn(b"SECONDNAME", again.body)

    def test_the_log_holds_no_answer(self):
        self.must_post()
        self.stop()
        with open(self.dir.file(LOG), "rb") as f:
            log = f.read()
        self.assertIn(KEY.encode(), log)
        self.assertNotIn(b'"Status":"ok"', log)


class ByteCap(Served):
    """--max-idempotency-bytes-per-user: a key answers by reference to its record, but
    keeps that record when it is replaced or deleted (then outside the user's quota), so
    a key counts with the record it may come to hold from the start, and the cap bounds
    what the keys may hold. 2,000 bytes: a key of a plain theme (about 300 with its
    record) leaves room; one of a theme named with 1,800 bytes fills it."""
    ENV = {"EVENTD_MAX_IDEMPOTENCY_BYTES_PER_USER": "2000", "EVENTD_MAX_STRING_BYTES": "1800"}
    BIG = {"Theme": {"Name": "N" * 1800}}

    def test_a_new_key_once_the_keys_hold_the_cap_is_403_naming_the_setting(self):
        first = self.must_post(key="k1")
        big = self.must_post(key="k2", body=self.BIG)
        r = self.post(key="k3")
        self.assertErr(r, 403, "quota_exceeded", "Idempotency-Key")
        self.assertIn("--max-idempotency-bytes-per-user", r.json()["Error"]["Message"])
        self.assertEqual(self.count(), 2)
        self.assertReplay(first, self.post(key="k1"))  # a known key still replays
        r = self.clients["alice"].call("POST", "/v2/theme", {"Theme": {"Name": "no key"}})
        self.assertEqual(r.status, 200, r.describe())  # a create without a key is not capped
        # The record deleted, its key holds it: still counted, still replayed.
        self.clients["alice"].must_delete("theme", big.result()["ID"])
        self.assertErr(self.post(key="k3"), 403, "quota_exceeded", "Idempotency-Key")
        self.assertReplay(big, self.post(key="k2", body=self.BIG))

    def test_keys_that_came_to_hold_their_records_stay_within_the_cap(self):
        # Each key counts with its record from the start: deleting the records, which
        # makes the keys hold them, never takes the keys past the cap by more than the
        # last key's record (the count before keys by reference).
        made = []
        for i in range(20):
            r = self.post(key="m%d" % i, body={"Theme": {"Name": "M" * 400}})
            if r.status != 200:
                self.assertErr(r, 403, "quota_exceeded", "Idempotency-Key")
                break
            made.append(r)
        self.assertGreaterEqual(len(made), 2)
        self.assertLess(len(made), 6)
        for r in made:
            self.clients["alice"].must_delete("theme", r.result()["ID"])
        self.assertErr(self.post(key="m-next"), 403, "quota_exceeded", "Idempotency-Key")
        text = harness.request(self.srv.port, "GET", "/metrics").body.decode()
        held = [l for l in text.splitlines()
                if l.startswith('eventd_record_bytes{kind="idempotency_key"}')]
        self.assertEqual(len(held), 1, held)
        self.assertLess(int(held[0].split()[-1]), 2000 + 600, held)


class ByteCapReusedKeys(Served):
    """--max-idempotency-bytes-per-user holds when a create reuses the name of an
    expired key: that create replaces one key by another, which may come to hold a
    much larger record, so the bytes are checked for it too (the count alone stays)."""
    ENV = {"EVENTD_MAX_IDEMPOTENCY_BYTES_PER_USER": "2000", "EVENTD_MAX_STRING_BYTES": "1800",
           "EVENTD_IDEMPOTENCY_TTL_S": "1"}

    def test_reusing_expired_keys_never_takes_the_keys_far_past_the_cap(self):
        names = []
        for i in range(20):  # small records: several keys fit under the cap
            r = self.post(key="s%d" % i, body={"Theme": {"Name": "s"}})
            if r.status != 200:
                self.assertErr(r, 403, "quota_exceeded", "Idempotency-Key")
                break
            names.append("s%d" % i)
        self.assertGreaterEqual(len(names), 3)
        time.sleep(1.3)  # every key expires
        for name in names:  # the same names again, each with a record of 1,800 bytes
            r = self.post(key=name, body={"Theme": {"Name": "B" * 1800}})
            if r.status == 200:
                self.clients["alice"].must_delete("theme", r.result()["ID"])
            else:
                self.assertErr(r, 403, "quota_exceeded", "Idempotency-Key")
        text = harness.request(self.srv.port, "GET", "/metrics").body.decode()
        held = [l for l in text.splitlines()
                if l.startswith('eventd_record_bytes{kind="idempotency_key"}')]
        self.assertEqual(len(held), 1, held)
        # At most the cap and one key past it (the last create's record).
        self.assertLess(int(held[0].split()[-1]), 2000 + 2200, held)


class BadHeader(Served):
    def raw_post(self, value):
        """value: the header's raw bytes after "Idempotency-Key:"."""
        body = b'{"Theme":{"Name":"x"}}'
        head = ("POST /v2/theme HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Authorization: %s\r\nContent-Length: %d\r\n"
                % (harness.auth_header("alice", self.keys["alice"]), len(body))).encode()
        s = harness.connect(self.srv.port)
        self.addCleanup(s.close)
        s.sendall(head + b"Idempotency-Key:" + value + b"\r\n\r\n" + body)
        return harness.read_response(s)

    def assertBad(self, value):
        r = self.raw_post(value)
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["Error"]["Code"], "invalid_header", r)
        self.assertEqual(r.json()["Error"]["Field"], "Idempotency-Key", r)
        self.assertEqual(self.count(), 0)

    def test_an_empty_key_is_400_invalid_header(self):
        self.assertBad(b" ")

    def test_a_key_of_256_bytes_is_400_invalid_header(self):
        self.assertBad(b" " + b"k" * 256)

    def test_a_key_with_a_space_is_400_invalid_header(self):
        self.assertBad(b" order 7")

    def test_a_key_with_a_non_ascii_byte_is_400_invalid_header(self):
        self.assertBad(b" order-\xe9")

    def test_a_key_with_a_control_byte_is_400_bad_request_from_the_parser(self):
        r = self.raw_post(b" order-\x01")
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["Error"]["Code"], "bad_request", r)

    def test_a_key_sent_twice_is_400_invalid_header(self):
        self.assertBad(b" a\r\nIdempotency-Key: b")

    def test_a_key_of_255_bytes_is_taken(self):
        r = self.raw_post(b" " + b"k" * 255)
        self.assertEqual(r.status, 200, r)


if __name__ == "__main__":
    unittest.main()
