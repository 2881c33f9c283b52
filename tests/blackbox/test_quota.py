#!/usr/bin/env python3
"""Quotas and the storage guard, black box (docs/ACCOUNTS.md "Quotas",
docs/STORAGE.md "The storage guard", issue 17).

The attack: one account creating far more records than it should (30,000
themes of 1,369 bytes in 1.2 s) until memory and disk run out. Pinned here:

- --max-records-per-user and --max-bytes-per-user: a create over either
  answers 403 quota_exceeded (Field names the limit) and creates nothing;
  an update that grows the account past its bytes is refused the same way;
  a deletion frees quota; themes, addresses and events count together, each
  account on its own; the usage survives a restart and a compaction.
- A user's own limits: PUT /admin/users/NAME/limits, shown by GET, kept
  across a key rotation, a restart and a compaction; eventd user limits.
- The guard: --min-free-disk-bytes and --max-live-bytes refuse writes that
  add data with 507 insufficient_storage; reads and deletions still work.
"""

import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from apiclient import Client, ErrorAsserts, ManagedDir, add_user, run_cli  # noqa: E402
from test_admin import sock_call, wait_socket  # noqa: E402

LIMIT = 3                      # --max-records-per-user of these tests
HUGE = str((1 << 53) - 1)      # more free disk than any test machine has
NAME_255 = "n" * 255           # a theme of about 390 bytes (record_size)


class Served(ErrorAsserts, unittest.TestCase):
    """A server on a data directory of its own, with users alice and bob. The settings
    under test come as environment variables, which a server without them ignores: run
    against one (EVENTD_BIN), the tests fail on what it answers, not on its start."""

    ENV = {"EVENTD_MAX_RECORDS_PER_USER": str(LIMIT)}

    def setUp(self):
        self.dir = ManagedDir(prefix="eventd-bb-quota-")
        self.addCleanup(self.dir.cleanup)
        self.keys = {u: add_user(self.dir.path, u) for u in ("alice", "bob")}
        self.srv = None
        self.start()

    def start(self, env=None):
        if self.srv is not None:
            self.stop()
        self.srv = harness.Server(data_dir=self.dir.path, env=self.ENV if env is None else env)
        self.srv.start()
        self.addCleanup(self.srv.close)
        self.clients = {u: Client(self.srv.port, u, k) for u, k in self.keys.items()}
        for c in self.clients.values():
            self.addCleanup(c.close)

    def stop(self):
        for c in self.clients.values():
            c.close()
        self.srv.stop()
        self.srv.close()
        self.srv = None

    def c(self, user="alice"):
        return self.clients[user]

    def fill(self, user="alice", n=LIMIT, kind="theme", fields=None):
        return [self.c(user).must_create(kind, fields or {})["ID"] for _ in range(n)]

    def count(self, kind="theme", user="alice"):
        return len(self.c(user).list_all(kind, limit=100))

    def admin(self, method, path, body=None, headers=None):
        wait_socket(self.srv)
        return sock_call(self.srv.data_dir, method, path, body, headers)


class RecordQuota(Served):
    def test_create_over_the_record_limit_is_403_quota_exceeded(self):
        self.fill()
        r = self.c().create("theme", {"Name": "one too many"})
        err = self.assertErr(r, 403, "quota_exceeded", "MaxRecords")
        self.assertIn(str(LIMIT), err["Message"], r.describe())

    def test_a_refused_create_creates_nothing(self):
        self.fill()
        self.c().create("theme", {})
        self.assertEqual(self.count(), LIMIT)

    def test_themes_addresses_and_events_count_together(self):
        self.fill(n=1, kind="theme")
        self.fill(n=1, kind="address")
        self.fill(n=1, kind="event")
        self.assertErr(self.c().create("address", {}), 403, "quota_exceeded", "MaxRecords")

    def test_a_deletion_frees_quota(self):
        ids = self.fill()
        self.assertEqual(self.c().delete("theme", ids[0]).status, 204)
        self.assertEqual(self.c().create("theme", {}).status, 200)

    def test_each_account_has_its_own_quota(self):
        self.fill("alice")
        self.assertEqual(self.c("bob").create("theme", {}).status, 200)

    def test_updates_at_the_record_limit_still_work(self):
        ids = self.fill()
        self.assertEqual(self.c().update("theme", ids[0], {"Name": "renamed"}).status, 204)

    def test_the_usage_survives_a_restart(self):
        self.fill()
        self.start()
        self.assertErr(self.c().create("theme", {}), 403, "quota_exceeded", "MaxRecords")

    def test_the_usage_survives_a_compaction(self):
        # bob may hold more, so that his deletions leave dead frames to compact away
        r = self.admin("PUT", "/admin/users/bob/limits", {"MaxRecords": LIMIT + 2})
        self.assertEqual(r.status, 200, r.describe())
        for i in self.fill(n=LIMIT + 2, user="bob")[:2]:
            self.c("bob").delete("theme", i)
        self.fill()
        self.stop()
        cp = run_cli(["compact", "--data", self.dir.path])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.start()
        self.assertErr(self.c().create("theme", {}), 403, "quota_exceeded", "MaxRecords")
        self.fill(n=2, user="bob")
        self.assertErr(self.c("bob").create("theme", {}), 403, "quota_exceeded", "MaxRecords")


class ByteQuota(Served):
    ENV = {"EVENTD_MAX_BYTES_PER_USER": "2000"}

    def test_create_over_the_byte_limit_is_403_quota_exceeded(self):
        made = 0
        for _ in range(20):
            r = self.c().create("theme", {"Name": NAME_255})
            if r.status != 200:
                break
            made += 1
        self.assertErr(r, 403, "quota_exceeded", "MaxBytes")
        self.assertGreater(made, 0)
        self.assertEqual(self.count(), made)

    def test_an_update_growing_past_the_byte_limit_is_403(self):
        tid = self.c().must_create("theme", {"Name": "s"})["ID"]
        used = self.admin("GET", "/admin/users/alice").result()["Quota"]["Bytes"]
        self.admin("PUT", "/admin/users/alice/limits", {"MaxBytes": used + 100})
        r = self.c().update("theme", tid, {"Name": NAME_255})  # 254 bytes more
        self.assertErr(r, 403, "quota_exceeded", "MaxBytes")
        self.assertEqual(self.c().must_get("theme", tid)["Name"], "s")

    def test_an_update_growing_within_the_byte_limit_works(self):
        tid = self.c().must_create("theme", {"Name": "s"})["ID"]
        used = self.admin("GET", "/admin/users/alice").result()["Quota"]["Bytes"]
        self.admin("PUT", "/admin/users/alice/limits", {"MaxBytes": used + 100})
        self.assertEqual(self.c().update("theme", tid, {"Name": "s" * 50}).status, 204)

    def test_an_update_that_shrinks_is_allowed_over_the_limit(self):
        ids = self.fill(n=1, fields={"Name": NAME_255})
        self.assertEqual(self.admin("PUT", "/admin/users/alice/limits",
                                    {"MaxBytes": 1}).status, 200)
        self.assertEqual(self.c().update("theme", ids[0], {"Name": "short"}).status, 204)


class OwnLimits(Served):
    def test_put_limits_sets_the_users_own_limit(self):
        r = self.admin("PUT", "/admin/users/alice/limits", {"MaxRecords": 1})
        self.assertEqual(r.status, 200, r.describe())
        self.assertEqual(r.result()["Quota"]["OwnMaxRecords"], 1, r.describe())
        self.assertEqual(self.c().create("theme", {}).status, 200)
        self.assertErr(self.c().create("theme", {}), 403, "quota_exceeded", "MaxRecords")

    def test_an_own_limit_may_be_above_the_servers(self):
        self.admin("PUT", "/admin/users/alice/limits", {"MaxRecords": LIMIT + 1})
        self.fill(n=LIMIT + 1)
        self.assertErr(self.c().create("theme", {}), 403, "quota_exceeded", "MaxRecords")

    def test_zero_means_no_limit(self):
        self.admin("PUT", "/admin/users/alice/limits", {"MaxRecords": 0})
        self.fill(n=LIMIT + 2)

    def test_null_gives_back_the_servers_default(self):
        self.admin("PUT", "/admin/users/alice/limits", {"MaxRecords": 1})
        r = self.admin("PUT", "/admin/users/alice/limits", {"MaxRecords": None})
        self.assertEqual(r.result()["Quota"]["OwnMaxRecords"], None, r.describe())
        self.assertEqual(r.result()["Quota"]["MaxRecords"], LIMIT, r.describe())

    def test_an_absent_member_keeps_its_limit(self):
        self.admin("PUT", "/admin/users/alice/limits", {"MaxBytes": 5000})
        r = self.admin("PUT", "/admin/users/alice/limits", {"MaxRecords": 7})
        self.assertEqual(r.result()["Quota"]["OwnMaxBytes"], 5000, r.describe())

    def test_get_user_shows_usage_and_limits(self):
        self.fill(n=2)
        self.admin("PUT", "/admin/users/alice/limits", {"MaxBytes": 100000})
        q = self.admin("GET", "/admin/users/alice").result()["Quota"]
        self.assertEqual(q["Records"], 2, q)
        self.assertEqual(q["MaxRecords"], LIMIT, q)
        self.assertEqual(q["OwnMaxRecords"], None, q)
        self.assertEqual(q["MaxBytes"], 100000, q)
        self.assertEqual(q["OwnMaxBytes"], 100000, q)
        self.assertGreater(q["Bytes"], 0, q)

    def test_a_deletion_shows_in_the_usage(self):
        ids = self.fill(n=2)
        self.c().delete("theme", ids[0])
        q = self.admin("GET", "/admin/users/alice").result()["Quota"]
        self.assertEqual(q["Records"], 1, q)

    def test_a_negative_limit_is_400_invalid_field(self):
        r = self.admin("PUT", "/admin/users/alice/limits", {"MaxRecords": -1})
        self.assertErr(r, 400, "invalid_field", "MaxRecords")

    def test_a_limit_past_2_pow_53_is_400_invalid_field(self):
        r = self.admin("PUT", "/admin/users/alice/limits", {"MaxBytes": 1 << 53})
        self.assertErr(r, 400, "invalid_field", "MaxBytes")

    def test_a_text_limit_is_400_invalid_field(self):
        r = self.admin("PUT", "/admin/users/alice/limits", {"MaxBytes": "lots"})
        self.assertErr(r, 400, "invalid_field", "MaxBytes")

    def test_a_limit_given_as_a_json_string_is_400_invalid_field(self):
        # ACCOUNTS.md: null or an integer; "7" and "" were taken as 7 and as null.
        for v in ("7", ""):
            r = self.admin("PUT", "/admin/users/alice/limits", {"MaxRecords": v})
            self.assertErr(r, 400, "invalid_field", "MaxRecords")
        r = self.admin("PUT", "/admin/users/alice/limits", {"MaxRecords": True})
        err = self.assertErr(r, 400, "invalid_field", "MaxRecords")
        self.assertIn("null or an integer", err["Message"], r.describe())
        q = self.admin("GET", "/admin/users/alice").result()["Quota"]
        self.assertEqual(q["OwnMaxRecords"], None, q)

    def test_a_mistyped_member_is_400_unknown_field(self):
        # {"MaxRecord":5} changed nothing and answered 200: a limit silently kept.
        r = self.admin("PUT", "/admin/users/alice/limits", {"MaxRecord": 5})
        self.assertErr(r, 400, "unknown_field", "MaxRecord")
        r = self.admin("PUT", "/admin/users/alice/limits", b"MaxRecords=5&MaxByte=9",
                       {"Content-Type": "application/x-www-form-urlencoded"})
        self.assertErr(r, 400, "unknown_field", "MaxByte")
        # JSON sent as a form (curl -d without a JSON header): one odd field name.
        r = self.admin("PUT", "/admin/users/alice/limits", b'{"MaxRecords":1}',
                       {"Content-Type": "application/x-www-form-urlencoded"})
        self.assertErr(r, 400, "unknown_field")
        q = self.admin("GET", "/admin/users/alice").result()["Quota"]
        self.assertEqual((q["OwnMaxRecords"], q["OwnMaxBytes"]), (None, None), q)

    def test_a_form_sets_and_an_empty_value_resets(self):
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        r = self.admin("PUT", "/admin/users/alice/limits", b"MaxRecords=3", form)
        self.assertEqual(r.result()["Quota"]["OwnMaxRecords"], 3, r.describe())
        r = self.admin("PUT", "/admin/users/alice/limits", b"MaxRecords=", form)
        self.assertEqual(r.result()["Quota"]["OwnMaxRecords"], None, r.describe())

    def test_limits_of_an_unknown_user_are_404(self):
        r = self.admin("PUT", "/admin/users/nobody/limits", {"MaxRecords": 1})
        self.assertErr(r, 404, "not_found")

    def test_get_on_limits_is_405_allow_put(self):
        r = self.admin("GET", "/admin/users/alice/limits")
        self.assertErr(r, 405, "method_not_allowed")
        self.assertEqual(r.header("Allow"), "PUT", r.describe())

    def test_limits_survive_a_key_rotation(self):
        self.admin("PUT", "/admin/users/alice/limits", {"MaxRecords": 1})
        self.assertEqual(self.admin("POST", "/admin/users/alice/key").status, 200)
        q = self.admin("GET", "/admin/users/alice").result()["Quota"]
        self.assertEqual(q["OwnMaxRecords"], 1, q)

    def test_limits_survive_a_restart_and_a_compaction(self):
        self.admin("PUT", "/admin/users/alice/limits", {"MaxRecords": 1, "MaxBytes": 4321})
        self.stop()
        cp = run_cli(["compact", "--data", self.dir.path])
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.start()
        q = self.admin("GET", "/admin/users/alice").result()["Quota"]
        self.assertEqual((q["OwnMaxRecords"], q["OwnMaxBytes"]), (1, 4321), q)


class Cli(Served):
    def limits(self, *args):
        return run_cli(["user", "limits", "alice", "--data", self.dir.path] + list(args))

    def test_cli_sets_a_limit_on_a_running_server(self):
        wait_socket(self.srv)
        cp = self.limits("--max-records", "1")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("limit: 1, its own", cp.stdout)
        self.assertEqual(self.c().create("theme", {}).status, 200)
        self.assertErr(self.c().create("theme", {}), 403, "quota_exceeded", "MaxRecords")

    def test_cli_default_gives_back_the_servers_limit(self):
        wait_socket(self.srv)
        self.limits("--max-records", "1")
        cp = self.limits("--max-records", "default")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertEqual(self.c().create("theme", {}).status, 200)
        self.assertEqual(self.c().create("theme", {}).status, 200)

    def test_cli_sets_a_limit_offline(self):
        self.stop()
        cp = self.limits("--max-bytes", "777")
        self.assertEqual(cp.returncode, 0, cp.stderr)
        self.assertIn("limit: 777, its own", cp.stdout)
        self.start()
        q = self.admin("GET", "/admin/users/alice").result()["Quota"]
        self.assertEqual(q["OwnMaxBytes"], 777, q)

    def test_cli_refuses_a_bad_value_with_exit_2(self):
        wait_socket(self.srv)
        cp = self.limits("--max-records", "-1")
        self.assertEqual(cp.returncode, 2, cp.stdout + cp.stderr)

    def test_a_mistyped_verb_never_removes_the_user(self):
        wait_socket(self.srv)
        cp = run_cli(["user", "limit", "alice", "--data", self.dir.path])
        self.assertEqual(cp.returncode, 2, cp.stdout + cp.stderr)
        self.assertEqual(self.admin("GET", "/admin/users/alice").status, 200)


class DiskGuard(Served):
    """--min-free-disk-bytes above what the file system has: every write that adds data
    is refused, deterministically, while reads and deletions work."""

    def setUp(self):
        super().setUp()
        self.tid = self.c().must_create("theme", {})["ID"]
        self.start({"EVENTD_MIN_FREE_DISK_BYTES": HUGE})

    def test_a_create_is_507_insufficient_storage(self):
        r = self.c().create("theme", {})
        err = self.assertErr(r, 507, "insufficient_storage")
        self.assertIn("min-free-disk-bytes", err["Message"], r.describe())

    def test_an_update_is_507(self):
        self.assertErr(self.c().update("theme", self.tid, {"Name": "x"}), 507,
                       "insufficient_storage")

    def test_reads_work(self):
        self.assertEqual(self.c().get("theme", self.tid).status, 200)

    def test_a_deletion_works(self):
        self.assertEqual(self.c().delete("theme", self.tid).status, 204)

    def test_a_new_user_is_507(self):
        self.assertErr(self.admin("PUT", "/admin/users/carol"), 507, "insufficient_storage")

    def test_a_key_rotation_works(self):
        self.assertEqual(self.admin("POST", "/admin/users/alice/key").status, 200)

    def test_a_registration_is_507(self):
        c = Client(self.srv.port)
        self.addCleanup(c.close)
        r = c.call("POST", "/register", {"username": "dave", "password": "correct horse battery"},
                   auth=False)
        self.assertErr(r, 507, "insufficient_storage")


class MemoryGuard(Served):
    """--max-live-bytes below the live data already there (the users)."""

    def setUp(self):
        super().setUp()
        self.tid = self.c().must_create("theme", {})["ID"]
        self.start({"EVENTD_MAX_LIVE_BYTES": "100"})

    def test_a_create_is_507_insufficient_storage(self):
        r = self.c().create("theme", {})
        err = self.assertErr(r, 507, "insufficient_storage")
        self.assertIn("max-live-bytes", err["Message"], r.describe())

    def test_a_deletion_works(self):
        self.assertEqual(self.c().delete("theme", self.tid).status, 204)


class RealDiskFull(ErrorAsserts, unittest.TestCase):
    """A small file system: the guard answers 507 before the disk is full, where
    without it the write would fail (503 storage_error) once it is."""

    def test_writes_stop_with_507_while_the_disk_still_has_room(self):
        fs = harness.Tmpfs("4m")
        self.addCleanup(fs.close)
        key = add_user(fs.path, "alice")
        srv = harness.Server(data_dir=fs.path, extra_args=["--max-string-bytes", "60000"],
                             env={"EVENTD_MIN_FREE_DISK_BYTES": str(2 << 20),
                                  "EVENTD_MAX_BYTES_PER_USER": "0"})
        srv.start()
        self.addCleanup(srv.close)
        c = Client(srv.port, "alice", key)
        self.addCleanup(c.close)
        big = "b" * 60000
        for _ in range(100):
            r = c.create("theme", {"Name": big})
            if r.status != 200:
                break
        self.assertErr(r, 507, "insufficient_storage")
        st = os.statvfs(fs.path)
        self.assertGreater(st.f_bavail * st.f_frsize, 1 << 20)
        srv.send_signal(signal.SIGTERM)


if __name__ == "__main__":
    unittest.main()
