#!/usr/bin/env python3
"""tools/depcycles.py: dependency circles among object files, from their symbols.

Reads `nm` of each object given: file A depends on file B when A uses (U) a global
symbol B defines. Prints every strongly connected component of more than one file
(a circle: A calls into B and B, directly or through others, back into A) with one
symbol per edge as evidence, and exits 1 when there is any; 0 when the files form a
one-way graph. Names are shortened to the source name (libppsc_la-lower.o -> lower).
  tools/depcycles.py [--ignore NAME ...] [--forbid A,B:C,D ...] OBJ.o ...
--ignore drops a file from the graph (e.g. the command driver main, which calls
everything and is called by nothing). --forbid A,B:C,D says that files A and B use no
symbol C or D defines (an earlier phase calling no later one): each such use is
printed as `forbidden: A -> C (symbol)` and makes the exit status 1 too."""
import re
import subprocess
import sys


def short(path):
    n = path.rsplit('/', 1)[-1]
    n = re.sub(r'\.(o|lo)$', '', n)
    return re.sub(r'^lib[a-z_]+_la-', '', n)


def main(argv):
    ignore = set()
    forbid = []   # (users, providers)
    objs = []
    i = 0
    while i < len(argv):
        if argv[i] == '--ignore' and i + 1 < len(argv):
            ignore.add(argv[i + 1])
            i += 2
            continue
        if argv[i] == '--forbid' and i + 1 < len(argv) and ':' in argv[i + 1]:
            users, providers = argv[i + 1].split(':', 1)
            forbid.append((set(users.split(',')), set(providers.split(','))))
            i += 2
            continue
        objs.append(argv[i])
        i += 1
    if not objs:
        print('usage: depcycles.py [--ignore NAME ...] OBJ.o ...', file=sys.stderr)
        return 2
    defs, uses = {}, {}
    for o in objs:
        name = short(o)
        if name in ignore:
            continue
        try:
            out = subprocess.run(['nm', o], check=True, capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            print(f'depcycles.py: nm {o}: {e}', file=sys.stderr)
            return 2
        uses[name] = set()
        for line in out.splitlines():
            f = line.split()
            if len(f) == 2 and f[0] == 'U':
                uses[name].add(f[1])
            elif len(f) == 3 and f[1] in 'TDBRGSCV':   # global definitions
                defs.setdefault(f[2], name)
    edges = {a: {} for a in uses}
    for a, syms in uses.items():
        for sym in sorted(syms):
            b = defs.get(sym)
            if b and b != a and b not in edges[a]:
                edges[a][b] = sym
    # Tarjan's strongly connected components
    index, low, onstack, stack, comps, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        onstack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in onstack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                onstack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    for comp in comps:
        print('circle: ' + ' <-> '.join(comp))
        for a in comp:
            for b, sym in sorted(edges[a].items()):
                if b in comp:
                    print(f'  {a} -> {b} ({sym})')
    bad = 0
    for users, providers in forbid:
        for a in sorted(users & set(edges)):
            for b, sym in sorted(edges[a].items()):
                if b in providers:
                    print(f'forbidden: {a} -> {b} ({sym})')
                    bad = 1
    if not comps:
        print(f'depcycles.py: {len(edges)} files, no circle')
    return 1 if comps or bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
