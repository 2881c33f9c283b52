#!/usr/bin/env python3
"""Checks that an eventd binary was built hardened (CMakeLists.txt, EVENTD_HARDEN):

    tests/lint/hardening.py BINARY [--no-fortify]

  - PIE: an ELF of type DYN with the PIE flag;
  - full RELRO: a GNU_RELRO segment and BIND_NOW (the GOT is read-only once loaded);
  - a stack protector: the binary calls __stack_chk_fail;
  - _FORTIFY_SOURCE: the binary calls glibc's checked functions (__*_chk);
    --no-fortify skips this one (a Debug or sanitizer build has none).

ctest runs it on build/eventd (lint.hardening) and tests/docker/run.sh on the
binary inside the image. Until 2026-11-29 the image's Release binary had PIE
and partial RELRO only (Debian's gcc defaults): no canary, no fortified calls,
a writable GOT. Needs readelf (binutils). Exit 1 with what is missing.
"""

import re
import subprocess
import sys


def readelf(*args):
    cp = subprocess.run(["readelf", "-W"] + list(args), stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True, timeout=60)
    if cp.returncode != 0:
        raise SystemExit("readelf %s: %s" % (" ".join(args), cp.stderr.strip()))
    return cp.stdout


def missing(path, fortify=True):
    header, dynamic, segments = readelf("-h", path), readelf("-d", path), readelf("-l", path)
    symbols = readelf("--dyn-syms", path)
    out = []
    if not re.search(r"Type:\s+DYN", header) or not re.search(r"FLAGS_1\).*\bPIE\b", dynamic):
        out.append("PIE (not a position-independent executable)")
    if "GNU_RELRO" not in segments:
        out.append("RELRO (no GNU_RELRO segment)")
    if not re.search(r"\(BIND_NOW\)|FLAGS\).*\bBIND_NOW\b|FLAGS_1\).*\bNOW\b", dynamic):
        out.append("full RELRO (no BIND_NOW: the GOT stays writable)")
    if "__stack_chk_fail" not in symbols:
        out.append("a stack protector (no call to __stack_chk_fail)")
    if fortify and not re.search(r"\b__\w+_chk\b", symbols.replace("__stack_chk_fail", "")):
        out.append("_FORTIFY_SOURCE (no call to a checked __*_chk function)")
    return out


def main():
    args = sys.argv[1:]
    fortify = "--no-fortify" not in args
    paths = [a for a in args if a != "--no-fortify"]
    if len(paths) != 1:
        raise SystemExit(__doc__.strip().splitlines()[2].strip())
    lacks = missing(paths[0], fortify)
    for what in lacks:
        print("%s: built without %s" % (paths[0], what), file=sys.stderr)
    if lacks:
        return 1
    print("%s: PIE, full RELRO, stack protector%s" % (paths[0], ", _FORTIFY_SOURCE" if fortify else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
