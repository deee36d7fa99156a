#!/usr/bin/env python3
"""tools/published-orders.py: writes the orders of the published V-shape generators as
literal PPS files, the fixtures of tests/synth/published.sh (docs/synth.md, "Against
the published generators").

The generators are the Zero Bubble repository's (sail-sg/zero-bubble-pipeline-
parallelism, megatron/core/pipeline_parallel/zerobubble/scheduler/: zbv.py, ZB-V;
zbv_greedy.py, V-Half and V-Min). Their code is not part of PPS: this script imports it
from a local checkout named on the command line (its megatron imports are stubbed), runs
it, and writes what it produced.

Usage: python3 tools/published-orders.py CHECKOUT OUTDIR GEN P m TF TB TW TC ...
  GEN is zbv, half or min; each further group of six numbers is another point.
  Each chunk of the V costs half of TF, TB, TW (the PPS vshape placement's stage costs).
"""
import os
import subprocess
import sys
import types


def load(checkout):
    d = os.path.join(checkout, "megatron/core/pipeline_parallel/zerobubble/scheduler")
    # the generators import their node types from graph.py, which pulls in megatron;
    # the orders need none of it
    for name in ["megatron", "megatron.core", "megatron.core.pipeline_parallel",
                 "megatron.core.pipeline_parallel.zerobubble",
                 "megatron.core.pipeline_parallel.zerobubble.scheduler"]:
        sys.modules.setdefault(name, types.ModuleType(name))
    g = types.ModuleType("megatron.core.pipeline_parallel.zerobubble.scheduler.graph")
    g.F, g.B, g.W = "F", "B", "W"
    g.ScheduledNode = g.FuncType = object
    sys.modules[g.__name__] = g
    mods = {}
    for f in ("zbv", "zbv_greedy"):
        src = open(os.path.join(d, f + ".py")).read()
        m = types.ModuleType(f)
        exec(compile(src, os.path.join(d, f + ".py"), "exec"), m.__dict__)
        mods[f] = m
    return mods


def order(mods, gen, P, m, TF, TB, TW, TC):
    """per device: a list of (kind, microbatch, stage)"""
    out = [[] for _ in range(P)]
    if gen == "zbv":
        g = mods["zbv"].PipelineGraph(P, m, TF / 2, TB / 2, TW / 2, TC, 1, 0, -1)
        best = None
        for fill_b in (True, False):          # as its create_schedule: the least bubble
            for fill_f in (True, False):
                s, _, b = g.try_v_schedule(fill_b=fill_b, fill_f=fill_f)
                if best is None or b < best[1]:
                    best = (s, b)
        for d in range(P):
            for cat, chunk, mb in best[0][d]:
                first = chunk == 0 if cat == 0 else chunk == 1
                out[d].append(("FBW"[cat], mb, d if first else 2 * P - 1 - d))
    else:
        g = mods["zbv_greedy"].PipelineGraph(P, m, gen, TF / 2, TB / 2, TW / 2, TC)
        pat = {"half": g.stable_pattern_v_half, "min": g.stable_pattern_v_min}[gen](P)
        cost = [g.fbw_cost[x // 2] for x in range(6)]
        _, _, so = g.schedule_from_pattern(pat, m, cost, do_reorder=True)
        for d in range(P):
            for t, mb in so[d]:
                cat, chunk = t // 2, t % 2
                first = chunk == 0 if cat == 0 else chunk == 1
                out[d].append(("FBW"[cat], mb, d if first else 2 * P - 1 - d))
    return out


def main():
    if len(sys.argv) < 10 or (len(sys.argv) - 4) % 6:
        sys.exit(__doc__)
    mods = load(sys.argv[1])
    try:
        rev = subprocess.run(["git", "-C", sys.argv[1], "rev-parse", "HEAD"], capture_output=True,
                             text=True).stdout.strip() or "unknown commit"
    except OSError:
        rev = "unknown commit"
    outdir, gen = sys.argv[2], sys.argv[3]
    names = {"zbv": "ZB-V (zbv.py)", "half": "V-Half (zbv_greedy.py)", "min": "V-Min (zbv_greedy.py)"}
    a = sys.argv[4:]
    for k in range(0, len(a), 6):
        P, m = int(a[k]), int(a[k + 1])
        TF, TB, TW, TC = (float(x) for x in a[k + 2:k + 6])
        o = order(mods, gen, P, m, TF, TB, TW, TC)
        fn = os.path.join(outdir, "%s-P%d-m%d-%s-%s-%s-%s.pps" % (gen, P, m, *a[k + 2:k + 6]))
        with open(fn + ".tmp", "w") as f:
            f.write("// %s's order at P = %d, m = %d, TF = %s, TB = %s, TW = %s, TC = %s\n"
                    % (names[gen], P, m, *a[k + 2:k + 6]))
            f.write("// written by tools/published-orders.py from zero-bubble-pipeline-parallelism %s;\n" % rev)
            f.write("// tests/synth/published.sh compares synthesize with it\n")
            f.write("schedule published(P = %d, m = %d) {\n  devices P;\n  microbatches m;\n  placement vshape;\n" % (P, m))
            f.write("  cost TF = %s, TB = %s, TW = %s, TC = %s;\n" % tuple(a[k + 2:k + 6]))
            for d in range(P):
                f.write("  device %d { %s }\n" % (d, " ".join("%s(%d,%d)" % x for x in o[d])))
            f.write("}\n")
        os.replace(fn + ".tmp", fn)


main()
