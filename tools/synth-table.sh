#!/bin/sh
# tools/synth-table.sh: regenerates the quality tables of docs/synth.md (between the
# synth-table and synth-ref-table markers) from runs of tests/synth/quality.sh and
# tests/synth/reference.sh over larger samples of their grids. Usage, from the build
# directory:
#   sh ../tools/synth-table.sh [POINTS [REF_POINTS]]   (defaults 40 and 30; effort 3: the
#   whole budget, what effort 2 searched before its early end; SYNTH_EFFORT=E for another)
# Needs ./ppsc; prints the tables and rewrites those sections of ../docs/synth.md.
set -e
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
PPSC=${PPSC:-$(pwd)/ppsc}
N=${1:-40}
NR=${2:-30}
EFF=${SYNTH_EFFORT:-3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/synth-table.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
SYNTH_GRID_N=$N SYNTH_GRID_OUT=$tmp/rows SYNTH_EFFORT=$EFF top_srcdir=$top_srcdir PPSC=$PPSC \
  PPS_STDLIB=$top_srcdir/stdlib sh "$top_srcdir/tests/synth/quality.sh" > $tmp/log 2>&1 || { grep FAIL $tmp/log; exit 1; }
t1=$(date +%s)
SYNTH_REF_N=$NR SYNTH_REF_OUT=$tmp/ref SYNTH_EFFORT=$EFF top_srcdir=$top_srcdir PPSC=$PPSC \
  sh "$top_srcdir/tests/synth/reference.sh" > $tmp/rlog 2>&1 || { grep FAIL $tmp/rlog; exit 1; }
t2=$(date +%s)
limits=$(grep -c '^ok:' $tmp/log || true)
nonmono=$(grep -c '^note:' $tmp/log || true)
# rows: family P m TF TB TW TC limit stdlib_makespan synth_makespan synth_peak lower_bound
awk -v n="$N" -v secs=$((t1 - t0)) -v eff=$EFF -v limits=$limits -v nonmono=$nonmono '
  { f = $1; k[f]++; g = 100 * (1 - $10 / $9); if (g > 1e-7) { faster[f]++; sg[f] += g } if (g > mg[f]) mg[f] = g
    if ($10 > $9 + 1e-6) slower[f]++
    gap = 100 * ($10 / $12 - 1); sgap[f] += gap; if (gap > mgap[f]) mgap[f] = gap; if (gap < 1e-7) opt[f]++
    if (!(f in seen)) { seen[f] = 1; order[++nf] = f } }
  END {
    print "| stdlib schedule (placement) | points | synthesized faster | mean / max gain where faster | slower | mean / max gap to the lower bound | gap 0 (proven optimal) |"
    print "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    name["zb_h1"] = "ZB-H1 (linear)"; name["zb_h2"] = "ZB-H2 (linear)"; name["1f1b"] = "1F1B (linear)"
    name["zb_v"] = "ZB-V (vshape)"; name["v_half"] = "V-Half (vshape)"; name["v_min"] = "V-Min (vshape)"
    name["1f1b_v"] = "1F1B-V (vshape)"; name["interleaved_1f1b"] = "interleaved 1F1B (interleaved(2))"
    for (i = 1; i <= nf; i++) { f = order[i]
      printf "| %s | %d | %d | %.2f%% / %.2f%% | %d | %.2f%% / %.2f%% | %d |\n", name[f], k[f], faster[f],
        faster[f] ? sg[f] / faster[f] : 0, mg[f], slower[f], sgap[f] / k[f], mgap[f], opt[f] }
    printf "\n%d grid points, every family of each placement at its own peak (%d comparisons; %d limits in all, the\n", n, NR, limits
    printf "sweeps included, each against every family at the same or a lower peak), effort %d, in %d s:\n", eff, secs
    printf "`sh ../tools/synth-table.sh %d` from the build directory. Of the %d limits, %d gave a slower order\n", n, limits, nonmono
    printf "than the next lower limit of the same point and placement (the search is not monotone in the limit; see above).\n"
  }' $tmp/rows > $tmp/table
# ref rows: generator P m TF TB TW TC memory generator_makespan synth_makespan synth_peak
awk -v n="$NR" -v secs=$((t2 - t1)) -v eff=$EFF '
  { f = $1; k[f]++; g = 100 * (1 - $10 / $9)
    if (g > 1e-7) { faster[f]++; sg[f] += g; if (g > mg[f]) mg[f] = g } else if ($10 <= $9 + 1e-6) eq[f]++; else slower[f]++
    if (!(f in seen)) { seen[f] = 1; order[++nf] = f } }
  END {
    print "| reference generator (memory) | points | synthesized faster | equal | slower | mean / max gain where faster |"
    print "| --- | ---: | ---: | ---: | ---: | ---: |"
    name["ZB-1p"] = "ZB-1p: Zero Bubble heuristic (P)"; name["ZB-2p"] = "ZB-2p: Zero Bubble heuristic (2P)"
    name["V-greedy"] = "low-memory V-shape greedy (1.5 .. P)"
    for (i = 1; i <= nf; i++) { f = order[i]
      printf "| %s | %d | %d | %d | %d | %.2f%% / %.2f%% |\n", name[f], k[f], faster[f], eq[f], slower[f],
        faster[f] ? sg[f] / faster[f] : 0, mg[f] }
    printf "\n%d points of tests/synth/reference.sh, effort %d, in %d s (`sh ../tools/synth-table.sh N %d`).\n", n, eff, secs, n
  }' $tmp/ref > $tmp/rtable
cat $tmp/table; echo; cat $tmp/rtable
doc=$top_srcdir/docs/synth.md
for sec in synth-table:table synth-ref-table:rtable; do
  mark=${sec%%:*} file=$tmp/${sec#*:}
  if grep -q "<!-- $mark begin -->" "$doc"; then
    awk -v tf=$file -v b="<!-- $mark begin -->" -v e="<!-- $mark end -->" '
      $0 == b { print; while ((getline l < tf) > 0) print l; skip = 1; next }
      $0 == e { skip = 0 }
      !skip { print }' "$doc" > $tmp/doc && cp $tmp/doc "$doc"
  fi
done
