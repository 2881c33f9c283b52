#!/usr/bin/env python3
"""HAProxy's user-space instructions per GET /v2/theme/:id (or OP), counted by
callgrind, for each HAProxy configuration given (docs/BENCHMARKS.md, "Where
the shipped file's CPU goes"). Unlike lb_compare.sh's CPU time, the count
does not move with the machine's load (repeats within 0.1 %), so variants of
docker/haproxy.cfg can be told apart by a few hundred instructions.

Three eventd shards (USERS users placed by docker/placement.py, one theme
each) are started once; for each configuration, HAProxy runs under
valgrind --tool=callgrind with its request log off ("no log" added to
frontend "api", as lb_compare.sh does), gets 200 warm-up GETs, then N GETs
(4 keep-alive connections taking turns, one request in flight) between a
zeroing and a dump of the counters. Each configuration needs its shards.map
next to it, and the addresses of the shards in EVENTD_SHARD1..3 and its bind
address in LB_BIND ("${LB_BIND}" as in lb_compare.sh's minimal config, or
the shipped file's defaults).

    tests/bench/lb_icount.py docker/haproxy.cfg /tmp/variant/haproxy.cfg ...
    MINIMAL=1 tests/bench/lb_icount.py ...   also lb_compare.sh's minimal config

Environment: EVENTD_BIN (build-bench/eventd), N (500), USERS (30), OP (get;
post: POST /v2/theme; post_key: the same with an Idempotency-Key of its own), KEEP (a
directory to keep each configuration's dump in, cfgI.callgrind, I counting
from 0 with the minimal config first).
The counts are user space only: the kernel's side (the same syscalls for
every variant here: 2 sendto and 2 recvfrom a request) is not in them. A
large memcpy counts one instruction per byte copied (rep movsb), so a copy
weighs more in the count than in CPU time.
"""

import base64, glob, http.client, json, os, re, shutil, socket, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
EV = os.environ.get("EVENTD_BIN", os.path.join(ROOT, "build-bench", "eventd"))
N = int(os.environ.get("N", "500"))
OP = os.environ.get("OP", "get")
if OP not in ("get", "post", "post_key"):
    sys.exit("OP: get, post or post_key")
USERS = int(os.environ.get("USERS", "30"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def minimal_config(work):
    """lb_compare.sh's minimal config, cut out of the script itself."""
    text = open(os.path.join(HERE, "lb_compare.sh")).read()
    m = re.search(r"cat >\"\$MINIMAL\" <<'EOF'\n(.*?)\nEOF\n", text, re.S)
    d = os.path.join(work, "minimal")
    os.makedirs(d)
    open(os.path.join(d, "haproxy.cfg"), "w").write(m.group(1) + "\n")
    shutil.copy(os.path.join(ROOT, "docker", "shards.map"), d)
    return os.path.join(d, "haproxy.cfg")


def main():
    work = tempfile.mkdtemp(prefix="lb_icount.")
    cfgs = list(sys.argv[1:])
    if os.environ.get("MINIMAL"):
        cfgs.insert(0, minimal_config(work))
    if not cfgs:
        sys.exit(__doc__)
    names = ["bench%04d" % i for i in range(USERS)]
    out = subprocess.run([sys.executable, os.path.join(ROOT, "docker", "placement.py"), "--config",
                          os.path.join(ROOT, "docker", "haproxy.cfg")],
                         input="\n".join(names) + "\n", capture_output=True, text=True, check=True).stdout
    place = dict(line.split()[:2] for line in out.splitlines())
    procs, ports, creds = [], {}, []
    try:
        for n in (1, 2, 3):
            d = os.path.join(work, "shard%d" % n)
            keys = []
            for name in names:
                if place[name] == "shard%d" % n:
                    r = subprocess.run([EV, "user", "add", name, "--data", d, "--node-id", str(n)],
                                       capture_output=True, text=True, check=True)
                    keys.append((name, r.stdout.strip().splitlines()[-1]))
            log = d + ".log"
            procs.append(subprocess.Popen(
                ["taskset", "-c", "0", EV, "serve", "--no-demo-user", "--max-connections-per-address", "0",
                 "--listen", "127.0.0.1:0", "--data", d, "--node-id", str(n), "--fsync", "interval"],
                stdout=subprocess.DEVNULL, stderr=open(log, "w")))
            for _ in range(150):
                m = re.search(r"listening on 127\.0\.0\.1:(\d+)", open(log).read())
                if m:
                    break
                time.sleep(0.1)
            ports[n] = int(m.group(1))
            c = http.client.HTTPConnection("127.0.0.1", ports[n], timeout=10)
            for name, key in keys:
                cred = base64.b64encode(("%s:%s" % (name, key)).encode()).decode()
                c.request("POST", "/v2/theme", body=json.dumps({"Theme": {"Name": name}}),
                          headers={"Authorization": "Basic " + cred, "Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
                assert r.status == 200, data
                creds.append((cred, json.loads(data)["Result"]["ID"]))
        env = dict(os.environ, **{"EVENTD_SHARD%d" % n: "127.0.0.1:%d" % p for n, p in ports.items()})
        for i, cfg in enumerate(cfgs):
            label = "minimal (lb_compare.sh)" if cfg.startswith(work) else cfg
            print("%9.0f  %s" % (count(work, i, cfg, env, creds), label), flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        shutil.rmtree(work, ignore_errors=True)


def count(work, i, cfg, env, creds):
    """Instructions per GET of HAProxy with cfg."""
    d = os.path.join(work, "cfg%d" % i)
    os.makedirs(d)
    text = open(cfg).read().replace("\nfrontend api\n", "\nfrontend api\n    no log\n")
    open(os.path.join(d, "haproxy.cfg"), "w").write(text)
    shutil.copy(os.path.join(os.path.dirname(cfg), "shards.map"), d)
    port = free_port()
    e = dict(env, LB_BIND="127.0.0.1:%d" % port, LB_ADMIN_SOCKET=os.path.join(d, "admin.sock"))
    hp = subprocess.Popen(["taskset", "-c", "0", "valgrind", "--tool=callgrind",
                           "--callgrind-out-file=%s/cg.%%p" % d, "haproxy", "-db", "-f",
                           os.path.join(d, "haproxy.cfg")],
                          env=e, stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "log"), "w"))
    try:
        up = False
        for _ in range(300):  # every shard up (the minimal config has no /healthz: any answer)
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/healthz")
                r = c.getresponse()
                r.read()
                if r.status == 200 or "srv_is_up" not in text:
                    up = True
                    break
            except OSError:
                pass
            time.sleep(0.1)
        assert up, "haproxy did not come up with %s" % cfg
        conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=60) for _ in range(4)]

        def send(k):
            for j in range(k):
                cred, tid = creds[j % len(creds)]
                c = conns[j % 4]
                h = {"Authorization": "Basic " + cred}
                if OP == "get":
                    c.request("GET", "/v2/theme/%d" % tid, headers=h)
                else:
                    h["Content-Type"] = "application/json"
                    if OP == "post_key":
                        send.seq += 1
                        h["Idempotency-Key"] = "icount-%d-%d-%d" % (os.getpid(), i, send.seq)
                    c.request("POST", "/v2/theme", headers=h,
                              body='{"Theme":{"Name":"lb %d","PageBackgroundRGB":"A0B1C2"}}' % j)
                r = c.getresponse()
                r.read()
                assert r.status == 200, (r.status, cfg)

        send.seq = 0

        send(200)
        subprocess.run(["callgrind_control", "-z", str(hp.pid)], capture_output=True, check=True)
        send(N)
        subprocess.run(["callgrind_control", "-d", str(hp.pid)], capture_output=True, check=True)
        dump = glob.glob(os.path.join(d, "cg.%d.1" % hp.pid))[0]
        if os.environ.get("KEEP"):  # a directory for the dumps (callgrind_annotate)
            os.makedirs(os.environ["KEEP"], exist_ok=True)
            shutil.copy(dump, os.path.join(os.environ["KEEP"], "cfg%d.callgrind" % i))
        totals = [line for line in open(dump) if line.startswith(("totals:", "summary:"))]
        return int(totals[-1].split()[1]) / N
    finally:
        hp.terminate()
        hp.wait()


if __name__ == "__main__":
    main()
