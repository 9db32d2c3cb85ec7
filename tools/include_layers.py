#!/usr/bin/env python3
"""The folders' include graph: the layering rules of docs/architecture.md, checked.

Every folder of shared/, ps/ and worker/ (sub-folders count as folders of their own) is a node;
a quoted include of a repository file from a file in another folder is an edge. Fails (exit 1),
naming an include that makes each breach, when:
  - shared/ includes ps/ or worker/, or ps/ and worker/ include each other;
  - the folders' graph has a cycle (two folders that include each other, directly or round a
    longer loop): a room that needs another's headers must not be needed by it.

    python3 tools/include_layers.py [--root DIR] [--graph] [--self-test]

--graph prints every folder's edges (with one include for each) before the breaches; --self-test
checks the checker on a small tree made with a cycle and a layering breach (ctest runs both).
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
TOPS = ("shared", "ps", "worker")
SOURCES = (".h", ".cc", ".cu", ".cuh")


def edges_of(root):
    """{folder: {folder: 'file -> include'}} over the repository's C++ sources."""
    edges = {}
    for top in TOPS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                src = os.path.dirname(rel)
                edges.setdefault(src, {})
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    if inc.split("/")[0] not in TOPS or not os.path.exists(os.path.join(root, inc)):
                        continue
                    dst = os.path.dirname(inc)
                    if dst != src:
                        edges[src].setdefault(dst, f"{rel} includes {inc}")
    return edges


def layer_breaches(edges):
    allowed = {"shared": {"shared"}, "ps": {"shared", "ps"}, "worker": {"shared", "worker"}}
    out = []
    for src, dsts in sorted(edges.items()):
        for dst, why in sorted(dsts.items()):
            if dst.split("/")[0] not in allowed[src.split("/")[0]]:
                out.append(f"layering: {src} -> {dst} ({why})")
    return out


def cycles(edges):
    """The strongly connected components of more than one folder (Tarjan), each with its edges."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = [0]
    nodes = sorted(set(edges) | {d for ds in edges.values() for d in ds})
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    out = []
    for comp in comps:
        inside = [f"    {s} -> {d} ({edges[s][d]})" for s in comp for d in sorted(edges.get(s, {})) if d in comp]
        out.append("cycle among " + ", ".join(comp) + ":\n" + "\n".join(inside))
    return out


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        files = {"worker/a/x.h": '#include "worker/b/y.h"', "worker/b/y.h": '#include "worker/c/z.h"',
                 "worker/c/z.h": '#include "worker/a/x.h"', "shared/u/v.h": '#include "ps/p.h"', "ps/p.h": "",
                 "worker/d/ok.h": '#include "worker/a/x.h"\n#include "shared/u/v.h"'}
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text + "\n")
        found = layer_breaches(edges_of(root)) + cycles(edges_of(root))
    want = ["layering: shared/u -> ps", "cycle among worker/a, worker/b, worker/c:"]
    ok = len(found) == 2 and all(any(f.startswith(w) for f in found) for w in want)
    print("include_layers self-test:", "ok" if ok else "FAILED, found: " + repr(found))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--graph", action="store_true", help="print every folder's edges")
    ap.add_argument("--self-test", action="store_true", help="check the checker on a tree with breaches")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    edges = edges_of(args.root)
    if args.graph:
        for src, dsts in sorted(edges.items()):
            print(src)
            for dst, why in sorted(dsts.items()):
                print(f"  -> {dst}  ({why})")
    breaches = layer_breaches(edges) + cycles(edges)
    for b in breaches:
        print(b)
    if breaches:
        print(f"include_layers: {len(breaches)} breach(es) of the folders' layering (docs/architecture.md)")
        return 1
    print(f"include_layers: {len(edges)} folders, no cycle, shared/ below ps/ and worker/, neither includes the other")
    return 0


if __name__ == "__main__":
    sys.exit(main())
