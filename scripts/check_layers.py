#!/usr/bin/env python3
"""The core's calls run one way: no cycle between its object files.

Usage: check_layers.py NM LIBSRV.a [--dot]

Reads `nm` of the static library: for each core object (core/*.c) the
symbols it defines and the ones it uses. File A depends on file B when A
uses a symbol B defines. Any cycle among the core's files fails the check,
with the symbols that make each edge of it. --dot prints the graph
(graphviz) instead, for docs/ARCHITECTURE.md.
"""
import re
import subprocess
import sys


def objects(nm, lib):
    """{object name: (defined symbols, used symbols)} for core objects."""
    out = subprocess.run([nm, lib], check=True, capture_output=True,
                         text=True).stdout
    objs, cur = {}, None
    for line in out.splitlines():
        m = re.match(r'^(\S+\.o):$', line)
        if m:
            cur = None
            # meson names the object of core/foo.c "core_foo.c.o"
            # (optionally under a path); keep only the core's.
            base = m.group(1).rsplit('/', 1)[-1]
            mm = re.match(r'^core_(\w+)\.c\.o$', base)
            if mm:
                cur = mm.group(1)
                objs[cur] = (set(), set())
            continue
        if cur is None or not line.strip():
            continue
        parts = line.split()
        kind, sym = parts[-2], parts[-1]
        if kind == 'U':
            objs[cur][1].add(sym)
        elif kind in 'TDBRVWGS' and kind.isupper():
            objs[cur][0].add(sym)
    return objs


def graph(objs):
    owner = {}
    for name, (defs, _) in objs.items():
        for s in defs:
            owner[s] = name
    edges = {}
    for name, (_, uses) in objs.items():
        for s in uses:
            o = owner.get(s)
            if o and o != name:
                edges.setdefault(name, {}).setdefault(o, set()).add(s)
    return edges


def cycles(nodes, edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
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
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    objs = objects(sys.argv[1], sys.argv[2])
    if len(objs) < 2:
        print('check_layers: no core objects found in ' + sys.argv[2],
              file=sys.stderr)
        return 2
    edges = graph(objs)
    if '--dot' in sys.argv[3:]:
        print('digraph core {\n  rankdir=BT;\n  node [shape=box, fontname="monospace"];')
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print('  "%s.c" -> "%s.c";' % (a, b))
        print('}')
        return 0
    bad = cycles(objs, edges)
    for comp in bad:
        print('check_layers: cycle among core/%s' % ', core/'.join(
            c + '.c' for c in comp))
        for a in comp:
            for b in comp:
                if b in edges.get(a, {}):
                    print('  %s.c uses %s.c: %s' % (
                        a, b, ', '.join(sorted(edges[a][b]))))
    if bad:
        return 1
    print('check_layers: %d core files, %d edges, no cycle' % (
        len(objs), sum(len(v) for v in edges.values())))
    return 0


if __name__ == '__main__':
    sys.exit(main())
