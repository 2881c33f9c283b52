#!/usr/bin/env python3
"""ETags and conditional requests, black box (README "Conditional requests",
docs/STORAGE.md "Revisions", issue 21).

Pinned here: GET, HEAD, a create and PUT's 204 carry a strong ETag; it
changes with every update, and a theme's or address's when an event links
or unlinks it, an event's when its theme or address changes; If-Match on
PUT and DELETE (a list; "*" for a theme, an address or an event that
exists, while a missing one stays 404; weak tags never match) answers 412
precondition_failed with the current ETag and changes nothing; If-None-Match
on GET and HEAD answers 304 with the ETag and no body ("*" too), on a write
412; a malformed value is 400 invalid_header naming the header; 404 wins
over a precondition; two editors racing on one ETag: one 204, one 412,
nothing lost; ETags are equal after a restart, a kill -9 and a compaction.
"""

import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from apiclient import Client, ErrorAsserts, ManagedDir, add_user  # noqa: E402

LOG = "eventd.log"


class Served(ErrorAsserts, unittest.TestCase):
    """A server on a data directory of its own, with users alice and bob."""

    def setUp(self):
        self.dir = ManagedDir(prefix="eventd-bb-cond-")
        self.addCleanup(self.dir.cleanup)
        self.keys = {u: add_user(self.dir.path, u) for u in ("alice", "bob")}
        self.srv = None
        self.start()

    def start(self):
        self.srv = harness.Server(data_dir=self.dir.path)
        self.srv.start()
        self.addCleanup(self.srv.close)
        self.clients = {u: Client(self.srv.port, u, k) for u, k in self.keys.items()}
        for c in self.clients.values():
            self.addCleanup(c.close)
        self.c = self.clients["alice"]

    def stop(self, sig=signal.SIGTERM):
        for c in self.clients.values():
            c.close()
        self.srv.stop(sig=sig)
        self.srv.close()
        self.srv = None

    def theme(self, name="Gala"):
        r = self.c.create("theme", {"Name": name})
        self.assertEqual(r.status, 200, r.describe())
        return r.result()["ID"], r.header("ETag")

    def etag(self, kind, rid):
        r = self.c.get(kind, rid)
        self.assertEqual(r.status, 200, r.describe())
        return r.header("ETag")

    def put(self, rid, name, kind="theme", **headers):
        wrap = {"theme": "Theme", "address": "Address", "event": "Event"}[kind]
        return self.c.call("PUT", "/v2/%s/%s" % (kind, rid), {wrap: {"Name": name}},
                           headers=headers)

    def name_of(self, rid):
        return self.c.must_get("theme", rid)["Name"]


class Tags(Served):
    def test_create_get_head_and_put_carry_one_strong_etag(self):
        rid, created = self.theme()
        self.assertRegex(created, r'^"[0-9]+"$')
        self.assertEqual(self.etag("theme", rid), created)
        head = self.c.call("HEAD", "/v2/theme/%s" % rid)
        self.assertEqual((head.status, head.header("ETag")), (200, created))
        r = self.put(rid, "Renamed")
        self.assertEqual(r.status, 204, r.describe())
        self.assertNotEqual(r.header("ETag"), created)
        self.assertEqual(self.etag("theme", rid), r.header("ETag"))

    def test_every_update_changes_it_even_to_the_same_value(self):
        rid, first = self.theme()
        seen = {first}
        for _ in range(3):
            r = self.put(rid, "Gala")
            self.assertNotIn(r.header("ETag"), seen)
            seen.add(r.header("ETag"))

    def test_linking_changes_the_theme_and_address_etags(self):
        tid, t0 = self.theme()
        aid = self.c.must_create("address", {"Name": "Hall"})["ID"]
        a0 = self.etag("address", aid)
        ev = self.c.create("event", {"Name": "Fair", "ThemeID": tid, "AddressID": aid})
        self.assertEqual(ev.status, 200, ev.describe())
        eid = ev.result()["ID"]
        t1, a1 = self.etag("theme", tid), self.etag("address", aid)
        self.assertNotEqual(t1, t0)
        self.assertNotEqual(a1, a0)
        # The event embeds its theme: a theme update changes the event's ETag.
        e0 = self.etag("event", eid)
        self.assertEqual(ev.header("ETag"), e0)
        self.assertEqual(self.put(tid, "New look").status, 204)
        e1 = self.etag("event", eid)
        self.assertNotEqual(e1, e0)
        # Unlinking gives the theme an ETag it never had linked.
        r = self.c.call("PUT", "/v2/event/%s" % eid, {"Event": {"ThemeID": 0}})
        self.assertEqual(r.status, 204, r.describe())
        self.assertNotEqual(self.etag("theme", tid), t1)
        self.assertNotEqual(self.etag("event", eid), e1)
        self.assertEqual(self.etag("event", eid), r.header("ETag"))

    def test_a_keyed_create_carries_the_etag_and_its_replay_none(self):
        h = {"Idempotency-Key": "k-1"}
        first = self.c.call("POST", "/v2/theme", {"Theme": {"Name": "K"}}, headers=h)
        self.assertEqual(first.status, 200, first.describe())
        self.assertEqual(first.header("ETag"), self.etag("theme", first.result()["ID"]))
        again = self.c.call("POST", "/v2/theme", {"Theme": {"Name": "K"}}, headers=h)
        self.assertEqual(again.body, first.body)
        self.assertIsNone(again.header("ETag"))

    def test_list_items_carry_no_etag(self):
        self.theme()
        r = self.c.list("theme")
        self.assertEqual(r.status, 200)
        self.assertIsNone(r.header("ETag"))
        self.assertNotIn("ETag", r.result()["Items"][0])


class IfMatch(Served):
    def test_put_with_the_current_etag_succeeds_and_chains(self):
        rid, tag = self.theme()
        for i in range(3):
            r = self.put(rid, "v%d" % i, **{"If-Match": tag})
            self.assertEqual(r.status, 204, r.describe())
            tag = r.header("ETag")
        self.assertEqual(self.name_of(rid), "v2")

    def test_put_with_a_stale_etag_is_412_with_the_current_one(self):
        rid, old = self.theme()
        cur = self.put(rid, "B").header("ETag")
        r = self.put(rid, "C", **{"If-Match": old})
        self.assertErr(r, 412, "precondition_failed", "If-Match")
        self.assertEqual(r.header("ETag"), cur)
        self.assertEqual(self.name_of(rid), "B")

    def test_a_list_matches_when_one_member_does(self):
        rid, tag = self.theme()
        r = self.put(rid, "B", **{"If-Match": '"999999", %s ,"1"' % tag})
        self.assertEqual(r.status, 204, r.describe())

    def test_star_means_exists(self):
        rid, _ = self.theme()
        self.assertEqual(self.put(rid, "B", **{"If-Match": "*"}).status, 204)

    def test_star_means_exists_for_an_address(self):
        aid = self.c.must_create("address", {"Name": "Hall"})["ID"]
        r = self.put(aid, "Annex", kind="address", **{"If-Match": "*"})
        self.assertEqual(r.status, 204, r.describe())
        self.assertEqual(r.header("ETag"), self.etag("address", aid))

    def test_star_means_exists_for_an_event(self):
        eid = self.c.must_create("event", {"Name": "Fair"})["ID"]
        r = self.put(eid, "Fete", kind="event", **{"If-Match": "*"})
        self.assertEqual(r.status, 204, r.describe())
        self.assertEqual(r.header("ETag"), self.etag("event", eid))

    def test_delete_with_star_deletes_a_record_that_exists(self):
        rid, _ = self.theme()
        r = self.c.call("DELETE", "/v2/theme/%s" % rid, headers={"If-Match": "*"})
        self.assertEqual(r.status, 204, r.describe())
        self.assertErr(self.c.get("theme", rid), 404, "not_found")

    def test_delete_with_star_of_a_missing_record_is_404(self):
        r = self.c.call("DELETE", "/v2/theme/987654", headers={"If-Match": "*"})
        self.assertErr(r, 404, "not_found")

    def test_a_weak_etag_never_matches_if_match(self):
        rid, tag = self.theme()
        r = self.put(rid, "B", **{"If-Match": "W/" + tag})
        self.assertErr(r, 412, "precondition_failed", "If-Match")
        self.assertEqual(self.name_of(rid), "Gala")

    def test_delete_honours_if_match(self):
        rid, old = self.theme()
        cur = self.put(rid, "B").header("ETag")
        r = self.c.call("DELETE", "/v2/theme/%s" % rid, headers={"If-Match": old})
        self.assertErr(r, 412, "precondition_failed", "If-Match")
        self.assertEqual(r.header("ETag"), cur)
        r = self.c.call("DELETE", "/v2/theme/%s" % rid, headers={"If-Match": cur})
        self.assertEqual(r.status, 204, r.describe())
        self.assertEqual(self.c.get("theme", rid).status, 404)

    def test_not_found_wins_over_a_precondition(self):
        r = self.put(987654, "B", **{"If-Match": "*"})
        self.assertErr(r, 404, "not_found")
        r = self.c.call("GET", "/v2/theme/987654", headers={"If-None-Match": "*"})
        self.assertErr(r, 404, "not_found")

    def test_another_users_record_is_404_whatever_the_tag(self):
        rid, tag = self.theme()
        r = self.clients["bob"].call("PUT", "/v2/theme/%s" % rid, {"Theme": {"Name": "x"}},
                                     headers={"If-Match": tag})
        self.assertErr(r, 404, "not_found")

    def test_the_precondition_comes_before_the_body(self):
        rid, old = self.theme()
        self.put(rid, "B")
        r = self.c.call("PUT", "/v2/theme/%s" % rid, b'{"Theme":', headers={"If-Match": old})
        self.assertErr(r, 412, "precondition_failed", "If-Match")

    def test_malformed_values_are_400_naming_the_header(self):
        rid, tag = self.theme()
        for bad in ("", "abc", tag[:-1], '"a"b', "W/", '"x" "y"', "*, " + tag):
            with self.subTest(value=bad):
                r = self.put(rid, "B", **{"If-Match": bad})
                self.assertErr(r, 400, "invalid_header", "If-Match")
                r = self.c.call("GET", "/v2/theme/%s" % rid, headers={"If-None-Match": bad})
                self.assertErr(r, 400, "invalid_header", "If-None-Match")
        self.assertEqual(self.name_of(rid), "Gala")

    def test_two_editors_racing_one_wins_one_gets_412_nothing_lost(self):
        rid, tag = self.theme()
        other = Client(self.srv.port, "alice", self.keys["alice"])
        self.addCleanup(other.close)
        first = self.put(rid, "editor one", **{"If-Match": tag})
        second = other.call("PUT", "/v2/theme/%s" % rid, {"Theme": {"Name": "editor two"}},
                            headers={"If-Match": tag})
        self.assertEqual(first.status, 204, first.describe())
        self.assertErr(second, 412, "precondition_failed", "If-Match")
        self.assertEqual(second.header("ETag"), first.header("ETag"))
        # The loser reads again, merges and writes with the new tag.
        self.assertEqual(self.name_of(rid), "editor one")
        r = other.call("PUT", "/v2/theme/%s" % rid, {"Theme": {"Name": "one + two"}},
                       headers={"If-Match": second.header("ETag")})
        self.assertEqual(r.status, 204, r.describe())
        self.assertEqual(self.name_of(rid), "one + two")

    def test_two_editors_pipelined_in_one_turn(self):
        """Both requests in one read: the first commits before the second is checked."""
        rid, tag = self.theme()
        body = b'{"Theme":{"Name":"%s"}}'
        reqs = b"".join(harness.build_request(
            "PUT", "/v2/theme/%s" % rid, body % n,
            headers={"Authorization": self.c.auth, "If-Match": tag,
                     "Content-Type": "application/json"}) for n in (b"p1", b"p2"))
        s = harness.connect(self.srv.port)
        self.addCleanup(s.close)
        harness.send_raw(s, reqs)
        a, b = harness.read_response(s), harness.read_response(s)
        self.assertEqual((a.status, b.status), (204, 412))
        self.assertEqual(self.name_of(rid), "p1")


class IfNoneMatch(Served):
    def test_get_with_the_current_etag_is_304_without_a_body(self):
        rid, tag = self.theme()
        r = self.c.call("GET", "/v2/theme/%s" % rid, headers={"If-None-Match": tag})
        self.assertEqual((r.status, r.body, r.header("ETag")), (304, b"", tag))
        self.assertIsNone(r.header("Content-Length"))

    def test_head_too(self):
        rid, tag = self.theme()
        r = self.c.call("HEAD", "/v2/theme/%s" % rid, headers={"If-None-Match": tag})
        self.assertEqual((r.status, r.header("ETag")), (304, tag))

    def test_a_weak_or_listed_tag_matches_and_star_too(self):
        rid, tag = self.theme()
        for v in ("W/" + tag, '"1x", ' + tag, "*"):
            with self.subTest(value=v):
                r = self.c.call("GET", "/v2/theme/%s" % rid, headers={"If-None-Match": v})
                self.assertEqual(r.status, 304)

    def test_a_stale_tag_gets_the_record(self):
        rid, old = self.theme()
        self.put(rid, "B")
        r = self.c.call("GET", "/v2/theme/%s" % rid, headers={"If-None-Match": old})
        self.assertEqual(r.status, 200)
        self.assertEqual(r.result()["Name"], "B")

    def test_an_event_304_until_its_theme_changes(self):
        tid, _ = self.theme()
        eid = self.c.must_create("event", {"Name": "Fair", "ThemeID": tid})["ID"]
        tag = self.etag("event", eid)
        h = {"If-None-Match": tag}
        self.assertEqual(self.c.call("GET", "/v2/event/%s" % eid, headers=h).status, 304)
        self.put(tid, "Other")
        self.assertEqual(self.c.call("GET", "/v2/event/%s" % eid, headers=h).status, 200)

    def test_on_a_write_a_match_is_412(self):
        rid, tag = self.theme()
        r = self.put(rid, "B", **{"If-None-Match": "*"})
        self.assertErr(r, 412, "precondition_failed", "If-None-Match")
        r = self.put(rid, "B", **{"If-None-Match": '"1x"'})
        self.assertEqual(r.status, 204)


class Durable(Served):
    def tags(self, ids):
        return {(k, i): self.etag(k, i) for k, i in ids}

    def populate(self):
        tid, _ = self.theme()
        aid = self.c.must_create("address", {"Name": "Hall"})["ID"]
        eid = self.c.must_create("event", {"Name": "Fair", "ThemeID": tid, "AddressID": aid})["ID"]
        other, _ = self.theme("other")
        for i in range(5):  # garbage for a compaction
            self.put(other, "rename %d" % i)
        gone, _ = self.theme("gone")
        self.assertEqual(self.c.delete("theme", gone).status, 204)
        return [("theme", tid), ("address", aid), ("event", eid), ("theme", other)]

    def test_equal_after_a_restart(self):
        ids = self.populate()
        before = self.tags(ids)
        self.stop()
        self.start()
        self.assertEqual(self.tags(ids), before)

    def test_equal_after_kill_9(self):
        ids = self.populate()
        before = self.tags(ids)
        self.stop(sig=signal.SIGKILL)
        self.start()
        self.assertEqual(self.tags(ids), before)
        # and a new write gets a tag never seen before
        r = self.put(ids[3][1], "after the crash")
        self.assertNotIn(r.header("ETag"), before.values())

    def test_equal_after_a_compaction_and_a_restart(self):
        ids = self.populate()
        before = self.tags(ids)
        size = harness.log_bytes(self.srv.port)
        self.srv.send_signal(signal.SIGUSR1)
        self.assertTrue(harness.wait_until(
            lambda: "compaction done" in self.srv.stderr_text(), 5.0), self.srv.stderr_text())
        self.assertLess(harness.log_bytes(self.srv.port), size)
        self.assertEqual(self.tags(ids), before)
        self.stop()
        self.start()
        self.assertEqual(self.tags(ids), before)
        r = self.put(ids[3][1], "after")
        self.assertEqual(r.status, 204)
        self.assertNotIn(r.header("ETag"), before.values())


if __name__ == "__main__":
    unittest.main()
