#!/bin/sh
# tests/synth/published.sh: `synthesize` against the published V-shape generators at
# equal memory (docs/synth.md, "Against the published generators"). Each file of
# tests/synth/published/ is the order the Zero Bubble repository's ZB-V (zbv.py), V-Half
# or V-Min (zbv_greedy.py) generator wrote at one point (P, m, TF, TB, TW, TC;
# tools/published-orders.py made them; the generators are not part of PPS). `ppsc sim`
# times each (valid, its peak); `synthesize` on the same placement and costs at that
# peak must be no slower, under both communication models (`--p2p both`, the default,
# and `--p2p buffered`), with its peak within the limit.
#   SYNTH_EFFORT (default 0): the search effort.
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
ANY=$top_srcdir/tests/synth/synth_any.pps
EFFORT=${SYNTH_EFFORT:-0}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/synth-pub.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
. "$top_srcdir/tests/synth/lib.sh"   # fig
n=0 fail=0
for f in "$top_srcdir"/tests/synth/published/*.pps; do
  name=$(basename "$f" .pps)
  # the point, from the file's schedule header and cost line
  set -- $(sed -n 's/^schedule published(P = \([0-9]*\), m = \([0-9]*\)).*/\1 \2/p; s/^  cost TF = \([^,]*\), TB = \([^,]*\), TW = \([^,]*\), TC = \([^;]*\);/\1 \2 \3 \4/p' "$f")
  if [ $# -ne 6 ]; then echo "FAIL: $name: no point in its header"; fail=1; continue; fi
  D="-D P=$1 -D m=$2 -D TF=$3 -D TB=$4 -D TW=$5 -D TC=$6"
  for p2p in both buffered; do
    set -- $(fig --p2p $p2p "$f")
    if [ "$1" != true ]; then echo "FAIL: $name (--p2p $p2p): the published order is not valid ($*)"; fail=1; continue; fi
    pub=$2 L=$3
    set -- $("$PPSC" synth --p2p $p2p --json "$ANY" $D -D pl=1 -D L=$L -D effort=$EFFORT 2>"$tmp/err" |
             sed -n 's/.*"makespan": \([0-9.e+-]*\),.*"peak_memory": \([0-9.e+-]*\),.*/\1 \2/p')
    if [ $# -ne 2 ]; then echo "FAIL: $name (--p2p $p2p): synthesize at L=$L failed: $(cat "$tmp/err")"; fail=1; continue; fi
    n=$((n + 1))
    if awk -v a=$1 -v b=$pub -v pk=$2 -v L=$L 'BEGIN { exit !(a <= b + 1e-6 * b && pk <= L * (1 + 1e-9)) }'; then
      echo "ok: $name (--p2p $p2p): published $pub at peak $L, synthesized $1 (peak $2)"
    else
      echo "FAIL: $name (--p2p $p2p): published $pub at peak $L, synthesized $1 (peak $2)"; fail=1
    fi
  done
done
[ $n -gt 0 ] || { echo "FAIL: no comparison ran"; exit 1; }
exit $fail
