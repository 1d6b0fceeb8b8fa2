#!/usr/bin/env python3
"""Calls run one way: no cycle between the core's files, none between one
engine's files, no engine calling another, the core calling no engine.

Usage: check_layers.py NM LIBSRV.a [--dot]

Reads `nm` of the static library: for each object of core/*.c and
engines/*.c the symbols it defines and the ones it uses. File A depends on
file B when A uses a symbol B defines. An engine's files are
engines/<engine>.c and engines/<engine>_<part>.c. Any cycle among the
core's files or among one engine's files fails the check, with the symbols
that make each edge of it; so does an edge from the core to an engine
(other than the registry's srv_engine_<name> tables) or between engines.
--dot prints the core's graph (graphviz) instead, for docs/ARCHITECTURE.md.
"""
import re
import subprocess
import sys


def objects(nm, lib):
    """{object name: (defined symbols, used symbols)} for core and engine
    objects: "foo" for core/foo.c, "engines/bar" for engines/bar.c."""
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
            me = re.match(r'^engines_(\w+)\.c\.o$', base)
            if mm:
                cur = mm.group(1)
            elif me:
                cur = 'engines/' + me.group(1)
            if cur:
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


# Engines whose files still call each other in a circle, with why: the
# check reports their cycles without failing, and fails once one is gone
# (then its line here must go too).
PENDING = {}


def fname(node):
    return node + '.c' if node.startswith('engines/') else 'core/' + node + '.c'


def engine_of(node):
    return node[len('engines/'):].split('_')[0] if node.startswith('engines/') else None


def report(comp, edges):
    for a in comp:
        for b in comp:
            if b in edges.get(a, {}):
                print('  %s uses %s: %s' % (fname(a), fname(b), ', '.join(sorted(edges[a][b]))))


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    objs = objects(sys.argv[1], sys.argv[2])
    core = {n for n in objs if engine_of(n) is None}
    if len(core) < 2:
        print('check_layers: no core objects found in ' + sys.argv[2],
              file=sys.stderr)
        return 2
    edges = graph(objs)
    if '--dot' in sys.argv[3:]:
        print('digraph core {\n  rankdir=BT;\n  node [shape=box, fontname="monospace"];')
        for a in sorted(edges):
            for b in sorted(edges[a]):
                if a in core and b in core:
                    print('  "%s.c" -> "%s.c";' % (a, b))
        print('}')
        return 0
    failed = 0
    groups = {None: core}
    for n in objs:
        if engine_of(n):
            groups.setdefault(engine_of(n), set()).add(n)
    for eng in sorted(groups, key=lambda e: e or ''):
        nodes = groups[eng]
        sub = {a: {b: v for b, v in edges.get(a, {}).items() if b in nodes} for a in nodes}
        bad = cycles(nodes, sub)
        where = 'core' if eng is None else 'engine ' + eng
        if eng in PENDING:
            if not bad:
                print('check_layers: %s has no cycle now: drop it from PENDING' % where)
                failed = 1
            for comp in bad:
                print('check_layers: pending (%s): cycle among %s' % (
                    PENDING[eng], ', '.join(fname(c) for c in comp)))
            continue
        for comp in bad:
            print('check_layers: cycle in %s among %s' % (where, ', '.join(fname(c) for c in comp)))
            report(comp, edges)
            failed = 1
    for a in sorted(edges):
        for b in sorted(edges[a]):
            ea, eb = engine_of(a), engine_of(b)
            syms = sorted(edges[a][b])
            if ea is None and eb is not None:
                syms = [x for x in syms if not re.match(r'^srv_engine_\w+$', x)]
            if syms and eb is not None and ea != eb:
                print('check_layers: %s uses %s: %s' % (fname(a), fname(b), ', '.join(syms)))
                failed = 1
    if failed:
        return 1
    print('check_layers: %d core files, %d engine files, %d edges, no cycle' % (
        len(core), len(objs) - len(core), sum(len(v) for v in edges.values())))
    return 0


if __name__ == '__main__':
    sys.exit(main())
