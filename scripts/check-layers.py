#!/usr/bin/env python3
"""The layer check: no file of src/ uses a file of a layer above its own,
and no files use each other in a cycle.

Usage: python3 scripts/check-layers.py [--graph]

A file uses another when its code (comments and strings aside) names an
item through a path into it: `crate::walk::Frame` uses src/walk/mod.rs,
`super::thread_table::X` in src/sys/linux.rs uses src/sys/thread_table.rs.
Module declarations (`mod x;`) and re-exports in a folder's own mod.rs do
not count as uses: a parent declares its children. Paths into a file's own
child modules (`fast::run`) do. The layers, lowest
first, are LAYERS below; docs/ARCHITECTURE.md gives the reasons.
Exits 1 and names each offending use, or each cycle, if there is one.
"""

import bisect
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")

# Lowest first. A file belongs to the first entry whose path it starts with.
LAYERS = [
    ("sys", ["sys/"]),
    ("formats", ["formats/"]),
    ("memory", ["memory/"]),
    ("arch", ["arch/"]),
    ("walk", ["walk/"]),
    ("cache", ["cache/"]),
    ("modules", ["modules/"]),
    ("discover", ["discover/"]),
    ("live", ["live.rs"]),
    ("markup", ["markup.rs", "markup/"]),
    ("report", ["report.rs"]),
    ("edge", ["crash/", "panic_hook.rs", "sample.rs", "threads.rs", "threads_macos.rs"]),
    ("root", ["lib.rs"]),
]


def layer_of(rel):
    for rank, (name, prefixes) in enumerate(LAYERS):
        if any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in prefixes):
            return rank, name
    return None, None


def strip_comments_and_strings(text):
    """The code alone: comments, string and char literals blanked."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == '"' or (c == "b" and text.startswith('b"', i)):
            i = text.index('"', i) + 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            i = text.index(end, i + len(m.group(0))) + len(end)
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 12]):
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\x..|\\.|[^\\'])'", text[i:])
            i += len(m.group(0)) if m else 1
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def files():
    for d, _, names in os.walk(ROOT):
        for f in names:
            if f.endswith(".rs"):
                yield os.path.relpath(os.path.join(d, f), ROOT).replace(os.sep, "/")


def module_path(rel):
    """The module path of a file: src/walk/mod.rs is ["walk"]."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return parts


REEXPORTS = {}


def file_of(path, known):
    """The file holding module path `path` or, failing that, its longest
    prefix that is a file. A name a module re-exports (`pub use`) is taken
    to the file that defines it."""
    for k in range(len(path), 0, -1):
        hit = REEXPORTS.get(tuple(path[:k]))
        if hit:
            return hit
    for k in range(len(path), 0, -1):
        p = "/".join(path[:k])
        for cand in (p + ".rs", p + "/mod.rs"):
            if cand in known:
                return cand
    return "lib.rs"


PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{)")


def brace_items(code, start):
    """The paths inside `{...}` starting at code[start] == '{' (one level
    of nesting kept as prefixes)."""
    depth, i, cur, items = 0, start, "", []
    while i < len(code):
        c = code[i]
        if c == "{":
            depth += 1
            if depth > 1:
                cur += c
        elif c == "}":
            depth -= 1
            if depth == 0:
                items.append(cur)
                break
            cur += c
        elif c == "," and depth == 1:
            items.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    out = []
    for it in items:
        it = it.strip()
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)", it)
        if m:
            out.append(m.group(1).split("::"))
    return out


def uses(rel, code, known, children):
    me = module_path(rel)
    found = set()
    # Lines inside an inline module (`mod tests {`), where `super::` is the
    # file itself.
    inline_depth_lines = set()
    lines = code.split("\n")
    in_inline, depth = False, 0
    for ln, line in enumerate(lines):
        if not in_inline and re.match(r"\s*(pub(\(crate\))?\s+)?mod\s+\w+\s*\{", line):
            in_inline, depth = True, 0
        if in_inline:
            inline_depth_lines.add(ln)
            depth += line.count("{") - line.count("}")
            if depth <= 0 and "}" in line:
                in_inline = False
    offsets = []
    pos = 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1

    def line_of(i):
        return bisect.bisect_right(offsets, i) - 1

    # Paths into the file's own child modules, named bare (`fast::run`).
    for m in re.finditer(r"(?<![\w:])(\w+)((?:::[A-Za-z_][A-Za-z0-9_]*)+)", code):
        if m.group(1) in children:
            target = file_of(list(me) + [m.group(1)] + m.group(2).strip(":").split("::"), known)
            if target != rel:
                found.add(target)
    for m in PATH.finditer(code):
        head, rest = m.group(1), m.group(2)
        inline = line_of(m.start()) in inline_depth_lines
        if head == "crate":
            base = []
        elif head == "self":
            base = list(me)
        else:
            base = list(me) if inline else me[:-1]
            # Chains of super::super::
            while rest.startswith("::super"):
                base = base[:-1]
                rest = rest[len("::super"):]
        if rest == "::{":
            paths = [base + p for p in brace_items(code, m.end() - 1)]
        else:
            paths = [base + rest.strip(":").split("::")]
        for p in paths:
            target = file_of(p, known)
            if target != rel:
                found.add(target)
    return found


def collect_reexports(known):
    """`pub use a::B;` and `pub use a::{B, C};` in each file, resolved
    relative to that file's module (`crate::` or a child)."""
    for rel in sorted(known):
        me = module_path(rel)
        code = strip_comments_and_strings(open(os.path.join(ROOT, rel)).read())
        for m in re.finditer(r"pub(?:\([a-z]+\))?\s+use\s+([^;]+);", code):
            body = m.group(1).strip()
            if body.startswith("crate::"):
                base, body = [], body[len("crate::"):]
            elif body.startswith("super::"):
                base, body = me[:-1], body[len("super::"):]
            elif body.startswith("self::"):
                base, body = list(me), body[len("self::"):]
            else:
                base = list(me)
            if "{" in body:
                prefix = body[: body.index("{")].strip(":").split("::") if body.index("{") else []
                inner = brace_items(body, body.index("{"))
                paths = [[p for p in prefix if p] + i for i in inner]
            else:
                paths = [body.split("::")]
            for p in paths:
                if not p or p[-1] == "*" or p[-1] == "self":
                    continue
                target = file_of(base + p, known)
                REEXPORTS[tuple(me + [p[-1]])] = target


def main():
    known = set(files())
    collect_reexports(known)
    problems = []
    graph = {}
    for rel in sorted(known):
        rank, name = layer_of(rel)
        if rank is None:
            problems.append(f"{rel}: in no layer (add it to LAYERS in scripts/check-layers.py)")
            continue
        code = strip_comments_and_strings(open(os.path.join(ROOT, rel)).read())
        # A folder's mod.rs declares and re-exports its children.
        # A parent declares its children (`mod x;`) and re-exports their
        # items (`pub use x::Item;`): neither is a use of the child.
        children = set(re.findall(r"\bmod\s+(\w+)\s*;", code))
        declared = re.sub(r"(?m)^\s*(#\[[^\n]*\]\s*)*(pub(\([a-z]+\))?\s+)?mod\s+\w+\s*;", "", code)
        declared = re.sub(
            r"(?s)(pub(\([a-z]+\))?\s+)?use\s+(\w+)::[^;]*;",
            lambda m: "" if m.group(3) in children else m.group(0),
            declared,
        )
        targets = uses(rel, declared, known, children)
        graph[rel] = targets
        for t in sorted(targets):
            trank, tname = layer_of(t)
            if trank is not None and trank > rank:
                problems.append(f"src/{rel} ({name}) uses src/{t} ({tname}), a layer above it")
    # Cycles: strongly connected components of more than one file.
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    for comp in sccs:
        problems.append("cycle between " + ", ".join("src/" + c for c in comp))
    if "--graph" in sys.argv:
        for v in sorted(graph):
            print(f"src/{v} ({layer_of(v)[1]}): " + " ".join(sorted(graph[v])))
    if problems:
        print("\n".join(problems))
        print(f"layer check: {len(problems)} problem(s)")
        return 1
    print(f"layer check: {len(graph)} files in {len(LAYERS)} layers, no use upward, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
