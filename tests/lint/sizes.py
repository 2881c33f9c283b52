#!/usr/bin/env python3
"""tests/lint/sizes.py: no source file over 800 lines, no function over 100.

Scans every .c and .h in the given directory and its subdirectories (default:
src/ next to this tests/ tree). A function is a top-level brace block whose head (the
text since the previous top-level ';', '}' or preprocessor line) ends in ')'
and holds no '=' (so initializers such as "x = {...}" and struct, enum and
union bodies do not count). Its length is the number of lines from the
line of its opening brace to the line of its closing brace, both included.
Comments, string and character literals and preprocessor lines are blanked
before braces are counted.

Usage: sizes.py [--self-test] [DIR]
Exit status: 0 when every file and function is within the limits, 1 when
one is not (each is listed as file:line: ...), 2 on a usage or scan error.
"""
import os
import re
import sys

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100


def blank(text):
    """Returns text with comments, literals and preprocessor lines replaced
    by spaces; newlines are kept, so line numbers stay valid."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":
            # A preprocessor line, with its backslash continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """Yields (name, first_line, lines) for each top-level function body."""
    code = blank(text)
    depth = 0
    head_start = 0  # where the text before the current top-level block starts
    open_at = 0
    name = None
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            if depth == 0:
                head = code[head_start:i].strip()
                head = re.sub(r"__attribute__\s*\(\(.*?\)\)\s*$", "", head, flags=re.S).strip()
                is_function = head.endswith(")") and "=" not in head
                m = re.search(r"(\w+)\s*\(", head) if is_function else None
                name = m.group(1) if m else None
                open_at = line
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced '}' at line %d" % line)
            if depth == 0:
                if name:
                    yield name, open_at, line - open_at + 1
                name = None
                head_start = i + 1
        elif c == ";" and depth == 0:
            head_start = i + 1
    if depth != 0:
        raise ValueError("unbalanced '{' at the end of the file")


def check_file(path, text, problems):
    """Appends to problems what is over a limit; returns the number of functions."""
    nlines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if nlines > MAX_FILE_LINES:
        problems.append("%s:1: %d lines (limit %d): split it by job"
                        % (path, nlines, MAX_FILE_LINES))
    count = 0
    for name, first, lines in functions(text):
        count += 1
        if lines > MAX_FUNCTION_LINES:
            problems.append("%s:%d: function %s is %d lines (limit %d)"
                            % (path, first, name, lines, MAX_FUNCTION_LINES))
    return count


def self_test():
    """The scanner must see what it is meant to see: each case names its expectation."""
    def body(n):  # a function of exactly n lines, braces included
        return "static int f(int a) {\n" + "    a++;\n" * (n - 2) + "    return a; }\n"

    failures = []

    def expect(what, got, want):
        if got != want:
            failures.append("%s: got %r, want %r" % (what, got, want))

    expect("100-line function", [x[2] for x in functions(body(100))], [100])
    p = []
    check_file("t.c", body(101), p)
    expect("101-line function flagged", len(p), 1)
    p = []
    check_file("t.c", body(100), p)
    expect("100-line function passes", p, [])
    expect("initializer is no function",
           list(functions("static const struct x y = {\n 1,\n};\n")), [])
    expect("struct body is no function", list(functions("struct s {\n int a;\n};\n")), [])
    expect("braces in comments, strings and #defines are ignored",
           [x[0] for x in functions('/* { */\n#define X {\nint g(void) {\n'
                                    '    return "}"[0] + \'{\';\n}\n')], ["g"])
    expect("attribute after the parameters",
           [x[0] for x in functions("void h(void) __attribute__((noreturn)) {\n}\n")], ["h"])
    p = []
    check_file("t.c", "int a;\n" * (MAX_FILE_LINES + 1), p)
    expect("801-line file flagged", len(p), 1)
    for f in failures:
        print("self-test: " + f)
    print("self-test: %s" % ("FAILED" if failures else "ok"))
    return 1 if failures else 0


def main(argv):
    args = argv[1:]
    if args[:1] == ["--self-test"]:
        return self_test()
    if len(args) > 1:
        print("usage: sizes.py [--self-test] [DIR]")
        return 2
    src = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                            "..", "..", "src")
    names = sorted(os.path.relpath(os.path.join(d, f), src)
                   for d, _, files in os.walk(src) for f in files if f.endswith((".c", ".h")))
    if not names:
        print("sizes.py: no .c or .h files in %s" % src)
        return 2
    problems = []
    nfunctions = 0
    for f in names:
        path = os.path.join(src, f)
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        try:
            nfunctions += check_file(os.path.relpath(path), text, problems)
        except ValueError as e:
            print("%s: cannot scan: %s" % (path, e))
            return 2
    # A scanner that finds no function at all is broken, not clean.
    if nfunctions == 0:
        print("sizes.py: no function found in %s: the scanner is broken" % src)
        return 2
    for p in problems:
        print(p)
    print("sizes.py: %d files, %d functions, %d over the limits"
          % (len(names), nfunctions, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
