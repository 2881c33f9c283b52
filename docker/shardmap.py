#!/usr/bin/env python3
"""Writes docker/shards.map: the consistent-hash ring of docker/haproxy.cfg's
shards, as a map HAProxy looks a username's hash up in (docs/SCALING.md).

    docker/shardmap.py [--config docker/haproxy.cfg] [--out docker/shards.map]

Run it after adding a shard (a "server shardN ... id N weight W" line in
backend "route"), never otherwise: the map is what places users.

WHY A MAP: HAProxy takes a down server off a "balance hash" ring and sends
its users to the next server, which does not hold them. So the shipped
configuration does not let HAProxy balance users at all: the frontend
computes the shard itself and "use-server" sends the request there, or
answers 503 when that shard is down. The placement must stay the one of the
ring that earlier configurations used (hash-type consistent, each server's
id and weight), or users would move between shards; this script writes
that ring out. HAProxy 2.6 hashes a key for its ring as

    hash = full_hash(sdbm(key))            (the "sdbm(1)" converter)

and places server id I, weight W, at the W x 16 points
full_hash(I x 4096 + k), k = 0 .. W x 16 - 1 (lb_chash.c); a hash goes to
the nearest point, the one before it on a tie. This script lists, for the
whole 32-bit hash space, which shard owns which range, and writes each
range as IPv4 prefixes (the hash read as an address: HAProxy casts an
integer to an IPv4 address), so that "map_ip_int" finds the shard with one
longest-prefix lookup. Prefixes nest: a short one gives a block's most
common shard and longer ones inside it the exceptions, the fewest a
longest-prefix table can have for these ranges (ORTC, Draves et al.,
"Constructing Optimal IP Routing Tables", 1999): 54,273 lines for three
shards where one prefix per piece of each range took 150,140, so HAProxy
loads a third of the map, in a third of the memory. The script checks the
first and the last hash of every range against what it writes. tests/lb/test_lb.py checks the result against
HAProxy's own ring (docker/placement.py) on thousands of names.
"""

import argparse
import os
import re
import sys

MASK = 0xFFFFFFFF
WEIGHT_SCALE = 16  # BE_WEIGHT_SCALE: ring points per unit of weight
EWGHT_RANGE = 256 * WEIGHT_SCALE  # SRV_EWGHT_RANGE: the points of one server id


def full_hash(a):
    """HAProxy's full_hash() (Bob Jenkins' avalanche, then a prime multiply)."""
    a = ((a + 0x7ED55D16) + (a << 12)) & MASK
    a = ((a ^ 0xC761C23C) ^ (a >> 19)) & MASK
    a = ((a + 0x165667B1) + (a << 5)) & MASK
    a = ((a + 0xD3A2646C) ^ (a << 9)) & MASK
    a = ((a + 0xFD7046C5) + (a << 3)) & MASK
    a = ((a ^ 0xB55A4F09) ^ (a >> 16)) & MASK
    return (a * 3221225473) & MASK


def sdbm(data):
    h = 0
    for c in data:
        h = (c + (h << 6) + (h << 16) - h) & MASK
    return h


def key_hash(name):
    """What "var(txn.user),sdbm(1)" gives for name."""
    return full_hash(sdbm(name.encode()))


def shards_of(config):
    """[(shard number, id, weight)] from backend route's server lines."""
    try:
        with open(config) as f:
            text = f.read()
    except OSError as e:
        raise SystemExit("%s: %s" % (config, e.strerror))
    m = re.search(r"^backend route\n(.*?)(?=^\S|\Z)", text, re.M | re.S)
    if not m:
        raise SystemExit("%s: no backend route" % config)
    body = m.group(1)
    default = re.search(r"^\s*default-server .*?\bweight (\d+)", body, re.M)
    out = []
    for line in body.splitlines():
        if not re.match(r"\s*server\s", line):
            continue
        s = re.match(r"\s*server shard(\d+) .*?\bid (\d+)", line)
        if not s:
            # HAProxy would number such a server itself and the map would leave it
            # out: its users would never reach it (it was skipped without a word).
            raise SystemExit("%s: backend route: %r is not 'server shardN ADDRESS ... id N': "
                             "every shard needs its name and a fixed id (docs/SCALING.md)"
                             % (config, line.strip()))
        w = re.search(r"\bweight (\d+)", line)
        weight = int(w.group(1)) if w else int(default.group(1)) if default else 1
        out.append((int(s.group(1)), int(s.group(2)), weight))
    for key, what in ((0, "shard number"), (1, "id")):
        seen = [t[key] for t in out]
        dup = sorted({v for v in seen if seen.count(v) > 1})
        if dup:
            raise SystemExit("%s: backend route: %s %s given to two servers" % (config, what, dup[0]))
    if not out:
        raise SystemExit("%s: backend route has no 'server shardN ... id N' line" % config)
    return out


def ranges(shards):
    """[(first hash, last hash, shard)] covering 0 .. 2^32-1, adjacent ranges merged."""
    points = sorted((full_hash(sid * EWGHT_RANGE + k), n)
                    for n, sid, weight in shards for k in range(weight * WEIGHT_SCALE))
    keys = [p for p, _ in points]
    if len(set(keys)) != len(keys):
        raise SystemExit("two ring points coincide: HAProxy's order is not modelled")
    # Between points p and q (the next one, around the ring), the hashes
    # (p, p + (q-p)/2] are p's and (p + (q-p)/2, q] are q's. Each cut is the
    # last hash of a piece and its owner; a piece may wrap through 0.
    cuts = []
    for i, (q, owner_q) in enumerate(points):
        p, owner_p = points[i - 1]
        cuts.append(((p + ((q - p) & MASK) // 2) & MASK, owner_p))
        cuts.append((q, owner_q))
    cuts.sort()
    pieces = []
    prev = cuts[-1][0]
    for i, (last, owner) in enumerate(cuts):
        first = (prev + 1) & MASK
        if i == 0 and prev != MASK:  # from after the last cut, through 0
            pieces.append((first, MASK, owner))
            pieces.append((0, last, owner))
        elif first <= last:  # (an empty piece when two cuts coincide)
            pieces.append((first, last, owner))
        prev = last
    pieces.sort()
    out = []
    for first, last, owner in pieces:
        if out and out[-1][2] == owner and out[-1][1] + 1 == first:
            out[-1] = (out[-1][0], last, owner)
        else:
            out.append((first, last, owner))
    assert out[0][0] == 0 and out[-1][1] == MASK
    assert all(a[1] + 1 == b[0] for a, b in zip(out, out[1:]))
    return out


def prefixes(first, last):
    """The fewest (address, prefix length) covering first .. last exactly."""
    while first <= last:
        size = first & -first if first else 1 << 32
        while size > last - first + 1:
            size >>= 1
        yield first, 32 - size.bit_length() + 1
        first += size


def owner(table, h):
    lo, hi = 0, len(table) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if table[mid][0] <= h:
            lo = mid
        else:
            hi = mid - 1
    return table[lo][2]


def nested_prefixes(table):
    """[(address, prefix length, shard)], the fewest longest-prefix entries
    that give every hash its range's shard: ORTC over the binary trie of the
    ranges' prefixes. Pass one, from the leaves up: a node's candidates are
    its children's common shards, or all of theirs when they share none.
    Pass two, from the root down: a node keeps the shard it inherits if that
    is a candidate, else it takes one of its candidates (the least) and is
    written out."""
    leaves = [(a, plen, shard) for first, last, shard in table
              for a, plen in prefixes(first, last)]
    pos = 0

    def candidates(addr, plen):  # (set, children), consuming leaves in order
        nonlocal pos
        a, l, shard = leaves[pos]
        if (a, l) == (addr, plen):
            pos += 1
            return {shard}, None
        half = 1 << (31 - plen)
        low, high = candidates(addr, plen + 1), candidates(addr + half, plen + 1)
        both = low[0] & high[0]
        return both or low[0] | high[0], (low, high)

    out = []

    def choose(node, addr, plen, inherited):
        cands, children = node
        shard = inherited
        if inherited not in cands:
            shard = min(cands)
            out.append((addr, plen, shard))
        if children:
            half = 1 << (31 - plen)
            choose(children[0], addr, plen + 1, shard)
            choose(children[1], addr + half, plen + 1, shard)

    choose(candidates(0, 0), 0, 0, None)
    return out


def longest_match(entries, h):
    for plen in range(32, -1, -1):
        shard = entries.get((h & ~(MASK >> plen) & MASK, plen))
        if shard is not None:
            return shard
    return None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=os.path.join(here, "haproxy.cfg"))
    ap.add_argument("--out", default=None, help="default: shards.map next to --config")
    args = ap.parse_args()
    out_path = args.out or os.path.join(os.path.dirname(os.path.abspath(args.config)),
                                        "shards.map")
    shards = shards_of(args.config)
    table = ranges(shards)
    entries = sorted(nested_prefixes(table))
    lookup = {(addr, plen): shard for addr, plen, shard in entries}
    for first, last, shard in table:
        for h in (first, last):
            if longest_match(lookup, h) != shard:
                raise SystemExit("internal error: hash %d would go to shard %s, not %d"
                                 % (h, longest_match(lookup, h), shard))
    lines = 0
    with open(out_path + ".tmp", "w") as f:
        f.write("# Written by docker/shardmap.py from %s: never edit by hand.\n"
                % os.path.basename(args.config))
        f.write("# hash of the username (sdbm(1)) as an IPv4 prefix -> shard number\n")
        f.write("# shards (number id weight): %s\n"
                % ", ".join("%d %d %d" % s for s in shards))
        for addr, plen, shard in entries:
            f.write("%d.%d.%d.%d/%d %d\n" % (addr >> 24, (addr >> 16) & 255,
                                             (addr >> 8) & 255, addr & 255, plen, shard))
            lines += 1
    os.replace(out_path + ".tmp", out_path)
    print("%s: %d ranges, %d prefixes, shards %s"
          % (out_path, len(table), lines, [s[0] for s in shards]), file=sys.stderr)


if __name__ == "__main__":
    main()
