#!/usr/bin/env python3
"""tests/lint/layers.py: src/ is folders by layer, and arrows between them run one way.

A folder of src/ is a layer. LAYERS below lists, for each, the layers it may
lean on; that relation must be acyclic (checked), so no circle can run
between folders. An arrow from folder A to folder B is either

  - an include: a file in A includes "B/x.h" (every include of a project
    header names its folder: a bare "x.h" is an error too), or
  - a call or a data reference: an object file built from A uses a symbol
    that an object file built from B defines (read with nm from the build).

Every arrow not allowed by LAYERS is listed as file: A -> B (what).

One more rule keeps the data layer's API the only way to records: no file
outside storage/ names the db's index or store (`->index`, `.store`, ...);
the layers above use what storage/db.h declares (db_get, db_owned, db_stats,
db_acked_lsn, ...).

Usage: layers.py SRC_DIR OBJ_DIR...   (OBJ_DIR: where the .c.o files of
       src/ are, e.g. build/CMakeFiles/eventd_lib.dir/src)
       layers.py --self-test
Exit status: 0 clean, 1 arrows against the layers, 2 usage or scan error.
"""
import os
import re
import subprocess
import sys

# Each layer and the layers below it that it may use (docs/ARCHITECTURE.md).
LAYERS = {
    "common": [],
    "storage": ["common"],
    "http": ["common"],
    "core": ["common", "storage", "http"],
    "api": ["common", "storage", "http", "core"],
    "site": ["common", "storage", "http", "core"],
    "admin": ["common", "storage", "http", "core"],
    "app": ["common", "storage", "http", "core", "api", "site", "admin"],
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# The db's index or store, named outside storage/ (comments are not code: stripped first).
INDEX_FIELD = re.compile(r"(?:->|\.)\s*(?:index|store)\b")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def acyclic(layers):
    """Returns None, or a list of layers that form a circle."""
    state = {}

    def visit(n, path):
        if state.get(n) == 1:
            return path[path.index(n):] + [n]
        if state.get(n) == 2:
            return None
        state[n] = 1
        for m in layers.get(n, []):
            c = visit(m, path + [n])
            if c:
                return c
        state[n] = 2
        return None

    for n in layers:
        c = visit(n, [])
        if c:
            return c
    return None


def include_arrows(src):
    """Yields (file, from_layer, to_layer or None, header) for every project include."""
    for d, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, src)
            layer = rel.split(os.sep)[0] if os.sep in rel else None
            with open(path, encoding="utf-8") as fh:
                for inc in INCLUDE.findall(fh.read()):
                    to = inc.split("/")[0] if "/" in inc else None
                    yield rel, layer, to, inc


def index_uses(rel, text):
    """Yields a problem for every use of the db's index or store field in text (file rel)."""
    if rel.split(os.sep)[0] == "storage":
        return
    code = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    for m in INDEX_FIELD.finditer(code):
        line = code.count("\n", 0, m.start()) + 1
        yield "%s:%d: the db's index or store outside storage/: use storage/db.h" % (rel, line)


def index_field_uses(src):
    """index_uses over every .c and .h file of src."""
    for d, _, files in os.walk(src):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                path = os.path.join(d, f)
                with open(path, encoding="utf-8") as fh:
                    yield from index_uses(os.path.relpath(path, src), fh.read())


def symbol_arrows(src, obj_dirs):
    """Yields (object, from_layer, to_layer, symbol) for every symbol an object
    file uses that an object file of another folder defines. Objects whose
    source is gone (left in the build tree by a move) are skipped."""
    defined, used = {}, []
    for top in obj_dirs:
        for d, _, files in os.walk(top):
            for f in files:
                if not f.endswith(".o"):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, top)
                if not os.path.exists(os.path.join(src, rel[:-2])):
                    continue
                layer = rel.split(os.sep)[0]
                out = subprocess.run(["nm", path], capture_output=True, text=True, check=True)
                for line in out.stdout.splitlines():
                    p = line.split()
                    if len(p) == 3 and p[1] in "TDBRV":
                        defined[p[2]] = layer
                    elif len(p) == 2 and p[0] == "U":
                        used.append((os.path.relpath(path, top), layer, p[1]))
    if not defined:
        raise ValueError("no object files under %s" % " ".join(obj_dirs))
    for obj, layer, sym in used:
        to = defined.get(sym)
        if to and to != layer:
            yield obj, layer, to, sym


def check(layers, includes, symbols):
    problems = []
    for rel, frm, to, inc in includes:
        if frm is None:
            problems.append("%s: a file directly in src/: every file belongs to a layer" % rel)
        elif to is None:
            problems.append('%s: #include "%s" does not name its folder' % (rel, inc))
        elif to not in layers:
            problems.append('%s: #include "%s": no layer %s' % (rel, inc, to))
        elif to != frm and to not in layers.get(frm, []):
            problems.append('%s: %s -> %s (#include "%s")' % (rel, frm, to, inc))
    for obj, frm, to, sym in symbols:
        if frm not in layers:
            problems.append("%s: no layer %s" % (obj, frm))
        elif to not in layers[frm]:
            problems.append("%s: %s -> %s (uses %s)" % (obj, frm, to, sym))
    return problems


def self_test():
    fails = []
    if acyclic(LAYERS):
        fails.append("LAYERS has a circle: %s" % acyclic(LAYERS))
    if not acyclic({"a": ["b"], "b": ["a"]}):
        fails.append("a circle a -> b -> a was not found")
    bad = check({"a": [], "b": ["a"]},
                [("a/x.c", "a", "b", "b/y.h"), ("b/y.c", "b", None, "y.h"),
                 ("b/z.c", "b", "a", "a/x.h")],
                [("a/x.c.o", "a", "b", "b_fn"), ("b/y.c.o", "b", "a", "a_fn")])
    want = ['a/x.c: a -> b (#include "b/y.h")', 'b/y.c: #include "y.h" does not name its folder',
            "a/x.c.o: a -> b (uses b_fn)"]
    if bad != want:
        fails.append("check() found %r, wanted %r" % (bad, want))
    sample = ("/* the db->index */\nx = index_get(&h->db->index, 1);\n"
              "// db.index\ny = db_get(h->db, 2); z = db . index;\nn = db.store.acked_lsn;\n")
    rel = os.path.join("api", "a.c")
    got = list(index_uses(rel, sample))
    want = ["%s:%d: the db's index or store outside storage/: use storage/db.h" % (rel, n)
            for n in (2, 4, 5)]
    if got != want:
        fails.append("index_uses() found %r, wanted %r" % (got, want))
    if list(index_uses(os.path.join("storage", "db.c"), sample)):
        fails.append("index_uses() flagged storage/, which owns the index")
    for f in fails:
        print("self-test: " + f)
    print("layers.py self-test: %s" % ("FAILED" if fails else "ok"))
    return 1 if fails else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 3:
        print(__doc__)
        return 2
    circle = acyclic(LAYERS)
    if circle:
        print("layers.py: LAYERS has a circle: %s" % " -> ".join(circle))
        return 1
    src, obj_dirs = argv[1], argv[2:]
    try:
        includes = list(include_arrows(src))
        symbols = list(symbol_arrows(src, obj_dirs))
        index_problems = list(index_field_uses(src))
    except (OSError, ValueError, subprocess.CalledProcessError) as e:
        print("layers.py: cannot scan: %s" % e)
        return 2
    problems = check(LAYERS, includes, symbols) + index_problems
    for p in problems:
        print(p)
    print("layers.py: %d includes, %d cross-folder symbol uses, %d against the layers"
          % (len(includes), len(symbols), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
