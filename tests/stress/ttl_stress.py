#!/usr/bin/env python3
"""Idempotency-Key expiry across kill -9, restarts and compactions (short --idempotency-ttl-s)."""
import json, os, random, re, signal, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TTL", "4")
import keys_stress as ks  # noqa: E402

TTL = int(os.environ["TTL"])
N = int(os.environ.get("N", "600"))
ROUNDS = int(os.environ.get("TTL_ROUNDS", "4"))
rnd = random.Random(int(os.environ.get("SEED", "1")))
problems = ks.problems


def wait_compaction(srv, t=60):
    t0 = time.time()
    while time.time() - t0 < t:
        txt = open(srv.errpath, errors="replace").read()
        if txt.count("compaction done") + txt.count("compaction failed") > 0:
            return True
        time.sleep(0.05)
    return False


def post(c, u, k, body):
    st, a = c.call("POST", "/v2/theme", body, {"Idempotency-Key": k})
    return st, a


def main():
    base = tempfile.mkdtemp(prefix="ttl-stress-")
    d = os.path.join(base, "data")
    for u in ks.USERS:
        ks.keys[u] = ks.cli(["user", "add", u], d).stdout.strip().splitlines()[-1]
    run = [0]

    def start():
        run[0] += 1
        s = ks.Srv(d, run[0])
        return s, {u: ks.Conn(s.port, u, ks.keys[u]) for u in ks.USERS}

    live = {}  # (u, k) -> (body, answer, id, t_created)
    srv, cs = start()
    for rd in range(ROUNDS):
        # fresh keys, and every known key again (expired ones make a new record)
        for i in range(N):
            u = rnd.choice(ks.USERS)
            k = "t%d-%d" % (rd, i) if rnd.random() < 0.7 or not live else rnd.choice(list(live))[1]
            if (u, k) in live and time.time() - live[(u, k)][3] < TTL - 1.5:
                continue
            alt = rnd.random() < 0.3
            b = ks.body_of(u, k, alt)
            b["Theme"]["Name"] += "-r%d" % rd
            t0 = time.time()
            st, a = post(cs[u], u, k, b)
            if st != 200:
                problem = "round %d create %s %s (%s): %d %r" % (rd, u, k, (u, k) in live, st, a[:200])
                ks.problem(problem)
                continue
            rid = json.loads(a)["Result"]["ID"]
            if (u, k) in live and rid == live[(u, k)][2]:
                ks.problem("expired key %s %s answered its old record %d" % (u, k, rid))
            live[(u, k)] = (b, a, rid, t0)
        mode = rd % 3
        if mode == 1:
            srv.p.send_signal(signal.SIGUSR1)
            wait_compaction(srv)
        elif mode == 2:
            srv.p.send_signal(signal.SIGUSR1)
            time.sleep(rnd.random() * 0.05)
        srv.kill()
        srv, cs = start()
        # within the TTL: the answers replay; past it: nothing of the old answer remains
        now = time.time()
        fresh = [(uk, v) for uk, v in live.items() if now - v[3] < TTL - 1]
        for (u, k), (b, a, rid, t0) in fresh:
            st, a2 = post(cs[u], u, k, b)
            if (st, a2) != (200, a) and time.time() - t0 < TTL - 0.5:
                ks.problem("round %d fresh key %s %s after restart: %d %r vs %r" % (rd, u, k, st, a2[:150], a[:150]))
        time.sleep(TTL + 1.5)
        during = rd % 2 == 1
        if not during:
            # compaction after expiry, then kill: expired keys gone for good
            srv.p.send_signal(signal.SIGUSR1)
            wait_compaction(srv)
            srv.kill()
            srv, cs = start()
        else:
            srv.p.send_signal(signal.SIGUSR1)  # the re-creates race the compaction
        # every key is expired now: the same key (same or another body) makes a new record
        sample = rnd.sample(list(live.items()), min(150, len(live)))
        for (u, k), (b, a, rid, t0) in sample:
            b2 = ks.body_of(u, k, True) if rnd.random() < 0.5 else b
            st, a2 = post(cs[u], u, k, b2)
            if st != 200 or json.loads(a2)["Result"]["ID"] == rid:
                ks.problem("round %d expired key %s %s: %d %r" % (rd, u, k, st, a2[:150]))
                continue
            live[(u, k)] = (b2, a2, json.loads(a2)["Result"]["ID"], time.time())
        if during:
            time.sleep(rnd.random() * 0.05)
        # the new answers survive kill -9 and replay
        srv.kill()
        srv, cs = start()
        for (u, k), _ in sample:
            b, a, rid, t0 = live[(u, k)]
            if time.time() - t0 > TTL - 0.5:
                continue
            st, a2 = post(cs[u], u, k, b)
            if (st, a2) != (200, a):
                ks.problem("round %d renewed key %s %s after kill: %d %r vs %r" % (rd, u, k, st, a2[:150], a[:150]))
        print("ttl round", rd, "keys", len(live), "problems", len(problems), flush=True)
    srv.kill(signal.SIGTERM)
    print("ttl final problems", len(problems))
    for p in problems[:30]:
        print(" ", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
