#!/bin/sh
# tests/synth/quality.sh: the synthesiser against the standard schedules (issue 11,
# "Quality"). For a deterministic sample of the grid P = 2..16, m = P..4P, TF, TB, TW
# in {0.5, 1, 1.5, 2}, TC in {0, 0.1, 0.25, 0.5}, every standard schedule of each
# placement (ZB-H1, ZB-H2, 1F1B on linear; ZB-V, V-Half, V-Min, 1F1B-V on vshape;
# interleaved 1F1B on interleaved(2)) is simulated, and `synthesize` with the memory
# limit set to that schedule's peak must be no slower, with its peak at most the
# limit and the lower bound at most its makespan. Then, at a few points, limits from
# the least any order can reach to 2P: the peak stays under the limit, the bound under
# the makespan, and a limit below the least is refused.
#   SYNTH_GRID_N=K   sample size (default 4 points); SYNTH_GRID_OUT=FILE appends one
#   line per comparison (tools/synth-table.sh builds docs/synth.md's table from it).
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
STD=${PPS_STDLIB:-$top_srcdir/stdlib}
ANY=$top_srcdir/tests/synth/synth_any.pps
N=${SYNTH_GRID_N:-4}
OUT=${SYNTH_GRID_OUT:-/dev/null}
EFFORT=${SYNTH_EFFORT:-1}
fail=0
n=0
bad() { echo "FAIL: $*"; fail=1; }
# fig FILE -D...: "valid makespan peak_memory"
# (the first occurrence of each key: per-device figures come later in the object)
fig() {
  "$PPSC" sim --json "$@" 2>/dev/null | awk '
    function val(key,   i, s) {
      i = index($0, "\"" key "\":"); if (i == 0) return "?";
      s = substr($0, i + length(key) + 3); sub(/[,}\]].*/, "", s); return s
    }
    { line = line $0 } END { $0 = line; print val("valid"), val("makespan"), val("peak_memory") }'
}
# synth FILE -D...: "makespan peak lower_bound" from ppsc synth --json
syn() {
  "$PPSC" synth --json "$@" 2>/dev/null | sed -n 's/.*"makespan": \([0-9.e+-]*\),.*"peak_memory": \([0-9.e+-]*\),.*"lower_bound": \([0-9.e+-]*\),.*/\1 \2 \3/p'
}
# the sample: a fixed linear congruential sequence over the grid
points=$(awk -v n="$N" 'BEGIN {
  x = 12345
  split("0.5 1 1.5 2", c, " "); split("0 0.1 0.25 0.5", tc, " ")
  for (k = 0; k < n; k++) {
    x = (x * 1103515245 + 12345) % 2147483648; P = 2 + int(x / 65536) % 15
    if (k % 3 != 2 && P > 8) P = P - 6          # most points small: the test stays quick
    x = (x * 1103515245 + 12345) % 2147483648; m = P * (1 + int(x / 65536) % 4)
    x = (x * 1103515245 + 12345) % 2147483648; f = c[1 + int(x / 65536) % 4]
    x = (x * 1103515245 + 12345) % 2147483648; b = c[1 + int(x / 65536) % 4]
    x = (x * 1103515245 + 12345) % 2147483648; w = c[1 + int(x / 65536) % 4]
    x = (x * 1103515245 + 12345) % 2147483648; t = tc[1 + int(x / 65536) % 4]
    print P, m, f, b, w, t
  }}')
echo "$points" | while read P m TF TB TW TC; do
  for fam in "zb_h1 0" "zb_h2 0" "1f1b 0" "zb_v 1" "v_half 1" "v_min 1" "1f1b_v 1" "interleaved_1f1b 2"; do
    set -- $fam
    s=$1 pl=$2
    D="-D P=$P -D m=$m -D TF=$TF -D TB=$TB -D TW=$TW -D TC=$TC"
    set -- $(fig "$STD/$s.pps" $D -D checks=false)   # figures even where its own expect fails
    if [ "$1" != true ]; then bad "$s $D: stdlib not valid"; continue; fi
    smk=$2 spk=$3
    set -- $(syn "$ANY" $D -D pl=$pl -D L=$spk -D effort=$EFFORT)
    if [ $# -ne 3 ]; then bad "synthesize $D pl=$pl L=$spk failed"; continue; fi
    echo "$s $P $m $TF $TB $TW $TC $spk $smk $1 $2 $3" >> "$OUT"
    awk -v a=$smk -v b=$1 -v pk=$2 -v L=$spk -v lb=$3 'BEGIN { e = 1e-6; exit !(b <= a + e && pk <= L + e && lb <= b + e) }' \
      && echo "ok: $s P=$P m=$m TF=$TF TB=$TB TW=$TW TC=$TC L=$spk: stdlib $smk, synthesized $1 (bound $3)" \
      || bad "$s P=$P m=$m TF=$TF TB=$TB TW=$TW TC=$TC L=$spk: stdlib $smk, synthesized $1 peak $2 bound $3"
  done
  [ $fail -eq 0 ] || exit 1
done || fail=1
# limits from the least any order can reach to 2P
for pt in "4 8 1 1 1 0.1 1" "6 12 1.5 1 1 0.25 1" "3 9 1 1 2 0.5 2"; do
  set -- $pt
  P=$1 m=$2 D="-D P=$1 -D m=$2 -D TF=$3 -D TB=$4 -D TW=$5 -D TC=$6 -D pl=$7 -D v=2 -D effort=$EFFORT"
  least=1
  L=$least
  while awk -v L=$L -v P=$P 'BEGIN { exit !(L <= 2 * P) }'; do
    set -- $(syn "$ANY" $D -D L=$L)
    if [ $# -ne 3 ]; then bad "synthesize $D L=$L failed"
    else awk -v mk=$1 -v pk=$2 -v L=$L -v lb=$3 'BEGIN { exit !(pk <= L + 1e-6 && lb <= mk + 1e-6) }' \
      && echo "ok: $D L=$L: makespan $1 peak $2 bound $3" || bad "$D L=$L: makespan $1 peak $2 bound $3"
    fi
    L=$(awk -v L=$L 'BEGIN { print L + 1.5 }')
  done
  "$PPSC" check "$ANY" $D -D L=0.75 > /dev/null 2>&1 && bad "$D L=0.75 accepted (below the least, 1)"
done
exit $fail
