#!/bin/sh
# tests/synth/reference.sh: `synthesize` against independent reference generators
# (tests/synth/ref_greedy.awk, written from the papers' descriptions): Zero Bubble's
# heuristic at its memory (ZB-1p: P activations, ZB-2p: 2P; the four settings of its
# two hyperparameters, the fastest kept, as the paper's grid search does) on linear,
# and a low-memory V-shape greedy (first stage capped one activation below the
# limit) at limits from 1.5 to P. Every reference order is a literal PPS file timed
# by `ppsc sim`; it must be valid with its peak within its memory, and `synthesize`
# at that memory must be no slower.
#   SYNTH_REF_N=K   sample size (default 3 points); SYNTH_EFFORT (default 0);
#   SYNTH_REF_OUT=FILE appends one line per comparison (docs/synth.md's table).
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
ANY=$top_srcdir/tests/synth/synth_any.pps
REF=$top_srcdir/tests/synth/ref_greedy.awk
N=${SYNTH_REF_N:-3}
EFFORT=${SYNTH_EFFORT:-0}
OUT=${SYNTH_REF_OUT:-/dev/null}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/synth-ref.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
bad() { echo "FAIL: $*"; echo x >> "$tmp/failed"; }
. "$top_srcdir/tests/synth/lib.sh"   # fig
syn() {
  "$PPSC" synth --json "$ANY" "$@" 2>/dev/null | sed -n 's/.*"makespan": \([0-9.e+-]*\),.*"peak_memory": \([0-9.e+-]*\),.*/\1 \2/p'
}
points=$(sample 271828 "16 2 9 5 13 3 11 7 15 4 12 6 14 8 10" "$N" v)
echo "$points" | while read k P m TF TB TW TC VL; do
  A="-v P=$P -v m=$m -v TF=$TF -v TB=$TB -v TW=$TW -v TC=$TC"
  D="-D P=$P -D m=$m -D TF=$TF -D TB=$TB -D TW=$TW -D TC=$TC"
  # Zero Bubble's heuristic: ZB-1p and ZB-2p
  for MEM in $P $((2 * P)); do
    best=
    for h in "0 0" "1 0" "0 1" "1 1"; do
      set -- $h
      if ! awk -v mode=zb $A -v MEM=$MEM -v h1=$1 -v h2=$2 -f "$REF" > "$tmp/zb.pps" 2> "$tmp/zb.err"; then
        bad "zb greedy $D MEM=$MEM h1=$1 h2=$2: $(cat "$tmp/zb.err")"; continue
      fi
      set -- $(fig "$tmp/zb.pps")
      if [ "$1" != true ] || awk -v pk=$3 -v M=$MEM 'BEGIN { exit !(pk > M + 1e-9) }'; then
        bad "zb greedy $D MEM=$MEM h=$h: valid $1, peak $3"; continue
      fi
      best=$(echo "$best $2" | awk '{ b = $1; for (i = 2; i <= NF; i++) if ($i < b) b = $i; print b }')
    done
    [ -n "$best" ] || continue
    set -- $(syn $D -D pl=0 -D L=$MEM -D effort=$EFFORT)
    if [ $# -ne 2 ]; then bad "synthesize $D L=$MEM failed"; continue; fi
    name=ZB-1p; [ $MEM -eq $P ] || name=ZB-2p
    echo "$name $P $m $TF $TB $TW $TC $MEM $best $1 $2" >> "$OUT"
    awk -v a=$1 -v b=$best -v pk=$2 -v L=$MEM 'BEGIN { exit !(a <= b + 1e-6 && pk <= L * (1 + 1e-9)) }' \
      && echo "ok: $name $D: greedy $best, synthesized $1 (peak $2)" || bad "$name $D: greedy $best, synthesized $1 peak $2"
  done
  # the low-memory V-shape greedy at limit VL
  if ! awk -v mode=vlow $A -v MEM=$VL -f "$REF" > "$tmp/v.pps" 2> "$tmp/v.err"; then
    bad "V greedy $D MEM=$VL: $(cat "$tmp/v.err")"
  else
    set -- $(fig "$tmp/v.pps")
    if [ "$1" != true ] || awk -v pk=$3 -v M=$VL 'BEGIN { exit !(pk > M + 1e-9) }'; then
      bad "V greedy $D MEM=$VL: valid $1, peak $3"
    else
      g=$2
      set -- $(syn $D -D pl=1 -D L=$VL -D effort=$EFFORT)
      if [ $# -ne 2 ]; then bad "synthesize $D pl=1 L=$VL failed"
      else
        echo "V-greedy $P $m $TF $TB $TW $TC $VL $g $1 $2" >> "$OUT"
        awk -v a=$1 -v b=$g -v pk=$2 -v L=$VL 'BEGIN { exit !(a <= b + 1e-6 && pk <= L * (1 + 1e-9)) }' \
          && echo "ok: V greedy $D L=$VL: greedy $g, synthesized $1 (peak $2)" || bad "V greedy $D L=$VL: greedy $g, synthesized $1 peak $2"
      fi
    fi
  fi
  [ -s "$tmp/failed" ] && exit 1
done
[ -s "$tmp/failed" ] && exit 1
exit 0
