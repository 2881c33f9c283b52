#!/usr/bin/env python3
"""An expired key dropped by a compaction that then fails (or is killed) comes back at the
next start beside the key re-created with the same name: does the re-created one replay?"""
import json, os, signal, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["TTL"] = "2"
import keys_stress as ks  # noqa: E402

MODE = os.environ.get("MODE", "fault")  # fault: the compaction's fdatasync fails; kill: kill -9


def main():
    base = tempfile.mkdtemp(prefix="twin-")
    d = os.path.join(base, "data")
    ks.keys["a"] = ks.cli(["user", "add", "a"], d).stdout.strip().splitlines()[-1]
    if MODE == "fault":
        ks.ENV.update(EVENTD_FAULT_FSYNC_AFTER="1", EVENTD_FAULT_TIMES="1",
                      EVENTD_LOG_PREALLOC_BYTES="0")
    s = ks.Srv(d, 1)
    c = ks.Conn(s.port, "a", ks.keys["a"])
    b = {"Theme": {"Name": "twin"}}
    st, first = c.call("POST", "/v2/theme", b, {"Idempotency-Key": "K"})
    assert st == 200, (st, first)
    if MODE == "kill":  # a log long enough that the compaction takes a while after the key
        for i in range(20000):
            c.call("POST", "/v2/theme", {"Theme": {"Name": "f%d" % i}})
    time.sleep(3.2)  # K expires
    s.p.send_signal(signal.SIGUSR1)
    if MODE == "fault":
        t0 = time.time()
        while "compaction failed" not in open(s.errpath).read() and time.time() - t0 < 10:
            time.sleep(0.05)
    else:
        time.sleep(0.002)
    for _ in range(50):  # the failed sync makes the store refuse writes until its probe
        st, second = c.call("POST", "/v2/theme", b, {"Idempotency-Key": "K"})
        if st != 503:
            break
        time.sleep(0.2)
    assert st == 200 and second != first, (st, second)
    print("re-created:", second[:80])
    s.kill()
    ks.ENV.pop("EVENTD_FAULT_FSYNC_AFTER", None)
    s = ks.Srv(d, 2)
    c = ks.Conn(s.port, "a", ks.keys["a"])
    st, again = c.call("POST", "/v2/theme", b, {"Idempotency-Key": "K"})
    s.kill(signal.SIGTERM)
    print("after restart:", st, again[:80])
    if again != second:
        print("FAIL: the acknowledged re-created key does not replay (a new record instead)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
