#!/bin/sh
# tools/synth-table.sh: regenerates the quality table of docs/synth.md (between the
# synth-table markers) from a run of tests/synth/quality.sh over a larger sample of
# its grid. Usage, from the build directory:
#   sh ../tools/synth-table.sh [POINTS]      (default 40 grid points, all stdlib families each)
# Needs ./ppsc; prints the table and rewrites the section of ../docs/synth.md.
set -e
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
PPSC=${PPSC:-$(pwd)/ppsc}
N=${1:-40}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/synth-table.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
SYNTH_GRID_N=$N SYNTH_GRID_OUT=$tmp/rows SYNTH_EFFORT=${SYNTH_EFFORT:-2} top_srcdir=$top_srcdir PPSC=$PPSC \
  PPS_STDLIB=$top_srcdir/stdlib sh "$top_srcdir/tests/synth/quality.sh" > $tmp/log 2>&1 || { grep FAIL $tmp/log; exit 1; }
t1=$(date +%s)
# rows: family P m TF TB TW TC limit stdlib_makespan synth_makespan synth_peak lower_bound
awk -v n="$N" -v secs=$((t1 - t0)) '
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
    printf "\n%d grid points, every family at each (%d comparisons), in %d s: `sh ../tools/synth-table.sh %d` from the build directory.\n", n, NR, secs, n
  }' $tmp/rows > $tmp/table
cat $tmp/table
doc=$top_srcdir/docs/synth.md
if grep -q '<!-- synth-table begin -->' "$doc"; then
  awk -v tf=$tmp/table '
    /<!-- synth-table begin -->/ { print; while ((getline l < tf) > 0) print l; skip = 1; next }
    /<!-- synth-table end -->/ { skip = 0 }
    !skip { print }' "$doc" > $tmp/doc && cp $tmp/doc "$doc"
fi
