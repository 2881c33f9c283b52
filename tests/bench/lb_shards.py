#!/usr/bin/env python3
"""tests/bench/lb_shards.py: the cost of the balancer. The same wrk
operations (GET and PUT /v2/theme/:id of many users, tests/lb/mix.lua)
against one eventd directly, then through HAProxy (docker/haproxy.cfg as
shipped) in front of three shards; prints req/s and latency percentiles of
both.

    tests/bench/lb_shards.py [--users 300] [--seconds 10] [--connections 16]
                             [--ops get,put] [--config docker/haproxy.cfg]
    EVENTD_BIN=build/eventd (default: that path under the repository)

The servers (eventd, HAProxy) run on CPU BENCH_SERVER_CPU (default 0) and wrk
on BENCH_CLIENT_CPU (default 1), as tests/bench/run.sh does: with three
shards, the balancer and the shards share that one core. --fsync always
(the default) in both cases. Loopback only; every wait is bounded.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
os.environ.setdefault("EVENTD_BIN", os.path.join(ROOT, "build", "eventd"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lb"))
sys.path.insert(0, os.path.join(ROOT, "tests", "blackbox"))
sys.path.insert(0, os.path.join(ROOT, "docker"))
import test_lb  # noqa: E402
from harness import clean_env  # noqa: E402
from placement import placement  # noqa: E402
from test_lb import Balancer, Shard, basic, call, wait_until  # noqa: E402

SERVER_CPU = os.environ.get("BENCH_SERVER_CPU", "0")
CLIENT_CPU = os.environ.get("BENCH_CLIENT_CPU", "1")


def add_users(shard, names):
    """Creates names on the stopped shard; returns {name: key}."""
    keys = {}
    for name in names:
        cp = subprocess.run(shard.args("user", "add", name), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=clean_env(), timeout=10)
        if cp.returncode != 0:
            raise SystemExit("user add %s: %s" % (name, cp.stderr))
        keys[name] = cp.stdout.strip().splitlines()[-1]
    return keys


def seed(port, keys, path):
    """One theme per user through port; writes mix.lua's requests file."""
    with open(path, "w") as f:
        for name, key in keys.items():
            status, doc, _ = call(port, "POST", "/v2/theme", {"Theme": {"Name": name}},
                                  auth=basic(name, key))
            if status != 200:
                raise SystemExit("POST /v2/theme for %s: %d %s" % (name, status, doc))
            f.write("%s %d\n" % (basic(name, key), doc["Result"]["ID"]))


def wrk(port, requests, ops, seconds, conns):
    env = dict(os.environ, EVENTD_LB_REQUESTS=requests, EVENTD_LB_OPS=ops)
    out = subprocess.run(["taskset", "-c", CLIENT_CPU, "wrk", "-t1", "-c%d" % conns,
                          "-d%ds" % seconds, "--latency", "-s", test_lb.MIX,
                          "http://127.0.0.1:%d" % port], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=seconds + 30).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    pct = {p: re.search(r"^\s+%s%%\s+(\S+)" % p, out, re.M) for p in ("50", "99")}
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errs = re.search(r"Socket errors: (.*)", out)
    if not rps:
        raise SystemExit("wrk failed:\n" + out)
    return {"rps": float(rps.group(1)), "p50": pct["50"].group(1) if pct["50"] else "?",
            "p99": pct["99"].group(1) if pct["99"] else "?",
            "non2xx": int(bad.group(1)) if bad else 0, "errors": errs.group(1) if errs else ""}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=300)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--ops", default="get,put", help="comma-separated: get, put")
    ap.add_argument("--config", default=test_lb.CFG, help="the HAProxy configuration to measure")
    args = ap.parse_args()
    test_lb.CFG = args.config
    os.sched_setaffinity(0, {int(SERVER_CPU)})  # inherited by every server started below
    work = tempfile.mkdtemp(prefix="eventd-bench-lb-")
    names = ["bench%04d" % i for i in range(args.users)]
    started = []
    results = {}
    try:
        # Direct: one unsharded eventd with every user.
        direct = Shard(0, work)
        keys = add_users(direct, names)
        direct.start()
        started.append(direct)
        seed(direct.port, keys, os.path.join(work, "direct.req"))
        # Sharded: each user on the shard the shipped configuration places it on.
        shards = {n: Shard(n, work) for n in test_lb.NODES}
        where = placement(args.config, names)
        keys = {}
        for n, s in shards.items():
            keys.update(add_users(s, [name for name in names if where[name] == n]))
            s.start()
            started.append(s)
        lb = Balancer(shards.values(), work)
        lb.start()
        if not wait_until(lb.healthy, 10):
            raise SystemExit("the balancer's shards are not up")
        seed(lb.port, keys, os.path.join(work, "lb.req"))
        for ops in args.ops.split(","):
            for what, port, req in (("direct", direct.port, "direct.req"),
                                    ("haproxy+3", lb.port, "lb.req")):
                time.sleep(1)
                results[(ops, what)] = wrk(port, os.path.join(work, req), ops, args.seconds,
                                           args.connections)
        lb.stop()
    finally:
        for s in started:
            s.kill()
        shutil.rmtree(work, ignore_errors=True)
    print("%d users, wrk -t1 -c%d -d%ds, servers on CPU %s, wrk on CPU %s"
          % (args.users, args.connections, args.seconds, SERVER_CPU, CLIENT_CPU))
    print("%-4s %-10s %10s %9s %9s  %s" % ("op", "path", "req/s", "p50", "p99", "failures"))
    for (ops, what), r in results.items():
        print("%-4s %-10s %10.0f %9s %9s  %s" % (ops.upper(), what, r["rps"], r["p50"], r["p99"],
                                                 (r["non2xx"], r["errors"] or "none")))


if __name__ == "__main__":
    main()
