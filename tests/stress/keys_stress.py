#!/usr/bin/env python3
"""Bounded crash stress of Idempotency-Keys (not a ctest: run by hand, e.g.
ROUNDS=30 WORKERS=8 tests/stress/keys_stress.py, against build-asan/eventd or EVENTD_BIN): keyed creates, replays, other bodies, deletes,
user key rotations; kill -9 at random moments (some during a SIGUSR1 compaction); after each
restart every acknowledged key replays byte for byte and creates nothing, every acknowledged
record is there, and no record exists that was neither acknowledged nor in flight."""
import base64, http.client, json, os, random, re, signal, subprocess, sys, tempfile, threading, time

BIN = os.environ.get("EVENTD_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build-asan", "eventd"))
ROUNDS = int(os.environ.get("ROUNDS", "12"))
WORKERS = int(os.environ.get("WORKERS", "6"))
TTL = os.environ.get("TTL")  # short --idempotency-ttl-s mode
SEED = int(os.environ.get("SEED", "1"))
DEADLINE = time.time() + float(os.environ.get("MAX_S", "900"))
rnd = random.Random(SEED)
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EVENTD_") or k == "EVENTD_LOOP_SYNC_MAX_US"}
ENV.update(EVENTD_TEST_PWHASH_FAST="1", EVENTD_DRAIN_MS="0", EVENTD_LOG_PREALLOC_BYTES="262144",
           ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1",
           UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
USERS = ["u%d" % i for i in range(4)]
ROT = ["r0", "r1"]
problems = []


def problem(msg):
    print("PROBLEM:", msg, flush=True)
    problems.append(msg)


def cli(args, d):
    cp = subprocess.run([BIN] + args + ["--data", d], capture_output=True, text=True, env=ENV,
                        timeout=60)
    return cp


class Srv:
    def __init__(self, d, n):
        self.d, self.n = d, n
        self.errpath = os.path.join(d, "..", "stderr.%d" % n)
        self.err = open(self.errpath, "w")
        args = [BIN, "--listen", "127.0.0.1:0", "--data", d, "--fsync", "always",
                "--max-records-per-user", "0", "--max-bytes-per-user", "0",
                "--max-idempotency-keys-per-user", "0", "--max-idempotency-bytes-per-user", "0"]
        if TTL:
            args += ["--idempotency-ttl-s", TTL]
        self.p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=self.err, env=ENV)
        t0 = time.time()
        self.port = None
        while time.time() - t0 < 60 and self.port is None:
            with open(self.errpath) as f:
                m = re.search(r"listening on 127\.0\.0\.1:(\d+)", f.read())
            if m:
                self.port = int(m.group(1))
            elif self.p.poll() is not None:
                break
            else:
                time.sleep(0.05)
        if self.port is None:
            raise SystemExit("server did not start: " + open(self.errpath).read()[-3000:])

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait(10)
        self.err.close()
        txt = open(self.errpath, errors="replace").read()
        if re.search(r"AddressSanitizer|runtime error|LeakSanitizer|UndefinedBehavior", txt):
            problem("sanitizer report in run %d: %s" % (self.n, self.errpath))
        return txt


class Conn:
    def __init__(self, port, user, key):
        self.port, self.auth = port, "Basic " + base64.b64encode(
            ("%s:%s" % (user, key)).encode()).decode()
        self.c = None

    def call(self, method, path, body=None, headers=None, timeout=10):
        if self.c is None:
            self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Authorization": self.auth}
        h.update(headers or {})
        data = None if body is None else json.dumps(body).encode()
        try:
            self.c.request(method, path, body=data, headers=h)
            r = self.c.getresponse()
            return r.status, r.read()
        except Exception:
            self.c.close()
            self.c = None
            raise


# state
keys = {u: None for u in USERS + ROT}
acked = {}      # (user, key) -> (body, answer bytes, id)
acked_list = []
inflight = {}   # (user, key) -> body (sent, no answer)
deleted = set()  # ids whose DELETE got 204
del_inflight = set()
rot_inflight = {}  # user -> rotation sent, no answer
d_glob = [None]
lock = threading.Lock()
counter = [0]
stats = {"creates": 0, "replays": 0, "reused": 0, "deletes": 0, "rotations": 0, "kills": 0,
         "usr1_kills": 0, "checked_keys": 0, "conflict": 0}


def body_of(user, k, alt=False):
    return {"Theme": {"Name": "T-%s-%s%s" % (user, k, "-alt" if alt else ""),
                      "PageBackgroundRGB": "%06x" % (hash(k) & 0xffffff)}}


def worker(port, stop, wid):
    r = random.Random(SEED * 1000 + wid + counter[0])
    conns = {}
    while not stop.is_set():
        u = r.choice(USERS)
        if u not in conns:
            conns[u] = Conn(port, u, keys[u])
        c = conns[u]
        op = r.random()
        try:
            if op < 0.6 or not acked:
                with lock:
                    counter[0] += 1
                    k = "k%d" % counter[0]
                    b = body_of(u, k)
                    inflight[(u, k)] = b
                st, ans = c.call("POST", "/v2/theme", b, {"Idempotency-Key": k})
                with lock:
                    if st == 200:
                        acked[(u, k)] = (b, ans, json.loads(ans)["Result"]["ID"])
                        acked_list.append((u, k))
                        del inflight[(u, k)]
                        stats["creates"] += 1
                    else:
                        problem("create %s %s: %d %r" % (u, k, st, ans[:200]))
                        del inflight[(u, k)]
            else:
                with lock:
                    ku, k = acked_list[-1 - int(r.random() ** 2 * len(acked_list))]
                    b, ans, rid = acked[(ku, k)]
                if ku != u:
                    continue
                if op < 0.75:
                    st, a2 = c.call("POST", "/v2/theme", b, {"Idempotency-Key": k})
                    if st == 409:
                        stats["conflict"] += 1
                    elif (st, a2) != (200, ans):
                        problem("live replay %s %s: %d %r vs %r" % (u, k, st, a2[:200], ans[:200]))
                    stats["replays"] += 1
                elif op < 0.85:
                    st, a2 = c.call("POST", "/v2/theme", body_of(u, k, True), {"Idempotency-Key": k})
                    if st not in (422, 409):
                        problem("other body %s %s: %d %r" % (u, k, st, a2[:200]))
                    stats["reused"] += 1
                else:
                    if rid in deleted:
                        continue
                    with lock:
                        del_inflight.add(rid)
                    st, a2 = c.call("DELETE", "/v2/theme/%d" % rid)
                    with lock:
                        del_inflight.discard(rid)
                        if st == 204:
                            deleted.add(rid)
                            stats["deletes"] += 1
                        elif st != 404:
                            problem("delete %d: %d %r" % (rid, st, a2[:200]))
        except (OSError, http.client.HTTPException):
            if stop.is_set():
                return
            time.sleep(0.01)
        except json.JSONDecodeError as e:
            problem("bad json %r" % e)


def rotator(d, stop):
    r = random.Random(SEED + 7)
    while not stop.is_set():
        u = r.choice(ROT)
        rot_inflight[u] = True
        try:
            cp = subprocess.run([BIN, "user", "rotate", u, "--data", d], capture_output=True,
                                text=True, env=ENV, timeout=10)
        except subprocess.TimeoutExpired:
            continue
        if cp.returncode == 0:
            keys[u] = cp.stdout.strip().splitlines()[-1]
            rot_inflight[u] = False
            stats["rotations"] += 1
        stop.wait(r.uniform(0.05, 0.3))


def list_all(c, user):
    out, cur = {}, None
    for _ in range(2000):
        st, b = c.call("GET", "/v2/theme?limit=500" + ("&cursor=" + cur if cur else ""))
        if st != 200:
            problem("list %s: %d %r" % (user, st, b[:200]))
            return out
        res = json.loads(b)["Result"]
        for it in res["Items"]:
            out[it["ID"]] = it
        cur = res["NextCursor"]
        if not cur:
            return out
    problem("list did not end")
    return out


def verify(port, full):
    # rotated users: the last acknowledged key works (an in-flight rotation may have won)
    for u in ROT:
        st, _ = Conn(port, u, keys[u]).call("GET", "/v2/theme")
        if st != 200 and not rot_inflight.get(u):
            problem("rotated user %s: last acknowledged key gets %d" % (u, st))
        if st != 200:
            keys[u] = cli(["user", "rotate", u], d_glob[0]).stdout.strip().splitlines()[-1]
        rot_inflight[u] = False
    for u in USERS:
        c = Conn(port, u, keys[u])
        before = list_all(c, u)
        names = {it["Name"]: i for i, it in before.items()}
        mine = [(k, v) for (uu, k), v in acked.items() if uu == u]
        for k, (b, ans, rid) in mine:
            present = rid in before
            if rid in deleted and present:
                problem("deleted (204) record %d of %s %s is back" % (rid, u, k))
            if not present and rid not in deleted and rid not in del_inflight:
                problem("acknowledged record %d of %s %s is missing" % (rid, u, k))
        chk = mine if full else rnd.sample(mine, min(len(mine), 1500))
        for k, (b, ans, rid) in chk:
            st, a2 = c.call("POST", "/v2/theme", b, {"Idempotency-Key": k})
            stats["checked_keys"] += 1
            if (st, a2) != (200, ans):
                problem("replay after restart %s %s: %d %r vs %r" % (u, k, st, a2[:200], ans[:200]))
        # in flight at the kill: the key and its record together or neither
        for (uu, k), b in list(inflight.items()):
            if uu != u:
                continue
            rid = names.get(b["Theme"]["Name"])
            st, a2 = c.call("POST", "/v2/theme", b, {"Idempotency-Key": k})
            if st != 200:
                problem("in-flight key %s %s after restart: %d %r" % (u, k, st, a2[:200]))
                continue
            nid = json.loads(a2)["Result"]["ID"]
            if rid is not None and nid != rid:
                problem("in-flight %s %s: record %d exists but the key answers %d" % (u, k, rid, nid))
            if rid is None and nid in before:
                problem("in-flight %s %s: key answers old id %d" % (u, k, nid))
            acked[(u, k)] = (b, a2, nid)
            del inflight[(u, k)]
            before[nid] = {"ID": nid}
        after = list_all(c, u)
        if set(after) != set(before):
            problem("%s: replays changed the records: +%s -%s" % (
                u, sorted(set(after) - set(before))[:10], sorted(set(before) - set(after))[:10]))
        # no record that was neither acknowledged nor in flight
        known = {v[2] for (uu, _), v in acked.items() if uu == u}
        extra = set(after) - known
        if extra:
            problem("%s: records never acknowledged: %s" % (u, sorted(extra)[:10]))
    del_inflight.clear()


def main():
    base = tempfile.mkdtemp(prefix="keys-stress-")
    d = os.path.join(base, "data")
    d_glob[0] = d
    for u in USERS + ROT:
        keys[u] = cli(["user", "add", u], d).stdout.strip().splitlines()[-1]
    print("dir", base, flush=True)
    for rnd_i in range(ROUNDS):
        if time.time() > DEADLINE:
            break
        srv = Srv(d, rnd_i)
        if rnd_i:
            verify(srv.port, full=(rnd_i == ROUNDS - 1))
        stop = threading.Event()
        ts = [threading.Thread(target=worker, args=(srv.port, stop, i)) for i in range(WORKERS)]
        ts.append(threading.Thread(target=rotator, args=(d, stop)))
        for t in ts:
            t.start()
        time.sleep(rnd.uniform(2, 8))
        usr1 = rnd.random() < 0.5
        if usr1:
            srv.p.send_signal(signal.SIGUSR1)
            time.sleep(rnd.choice([0, 0.001, 0.01, 0.05, 0.2, 0.5, 1.0]) * rnd.random())
            stats["usr1_kills"] += 1
        srv.kill()
        stats["kills"] += 1
        stop.set()
        for t in ts:
            t.join(30)
        print("round", rnd_i, "usr1" if usr1 else "", "acked", len(acked), "inflight",
              len(inflight), stats, flush=True)
    srv = Srv(d, 999)
    verify(srv.port, full=True)
    txt = srv.kill(signal.SIGTERM)
    print("final", stats, "acked", len(acked), "problems", len(problems))
    for p in problems[:30]:
        print(" ", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
