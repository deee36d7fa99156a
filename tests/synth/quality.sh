#!/bin/sh
# tests/synth/quality.sh: the synthesiser against the standard schedules (issue 11,
# "Quality"). For a deterministic sample of the grid P = 2..16, m = P..4P, TF, TB, TW
# in {0.5, 1, 1.5, 2}, TC in {0, 0.1, 0.25, 0.5} (the first points take P = 2, 16, 9,
# ...: every P of 2..16 within 15 points), and each placement (linear, vshape,
# interleaved(2)), every standard schedule of that placement (ZB-H1, ZB-H2, 1F1B on
# linear; ZB-V, V-Half, V-Min, 1F1B-V on vshape; interleaved 1F1B on interleaved(2))
# is simulated. `synthesize` then runs at every limit of the point: each family's
# peak and, for one placement per point (in turn), a sweep from the least limit any
# order of that placement reaches (min_memory_limit, derived per placement, never
# assumed) to 2P. At every limit the synthesised order must be no slower than every
# standard schedule of the placement whose peak is at most the limit, its peak at
# most the limit and its lower bound at most its makespan; a limit below the least
# is refused.
#   SYNTH_GRID_N=K   sample size (default 3 points); SYNTH_EFFORT (default 0: the
#   seeds make the guarantee, the test checks it); SYNTH_GRID_OUT=FILE appends one
#   line per family comparison (tools/synth-table.sh builds docs/synth.md's table).
: "${PPSC:?set PPSC to the ppsc binary}" "${top_srcdir:?set top_srcdir}"
STD=${PPS_STDLIB:-$top_srcdir/stdlib}
ANY=$top_srcdir/tests/synth/synth_any.pps
N=${SYNTH_GRID_N:-3}
OUT=${SYNTH_GRID_OUT:-/dev/null}
EFFORT=${SYNTH_EFFORT:-0}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/synth-quality.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; echo x >> "$tmp/failed"; }
. "$top_srcdir/tests/synth/lib.sh"   # fig
# syn -D...: "makespan peak lower_bound min_memory_limit" from ppsc synth --json
syn() {
  "$PPSC" synth --json "$ANY" "$@" 2>/dev/null | sed -n 's/.*"min_memory_limit": \([0-9.e+-]*\),.*"makespan": \([0-9.e+-]*\),.*"peak_memory": \([0-9.e+-]*\),.*"lower_bound": \([0-9.e+-]*\),.*/\2 \3 \4 \1/p'
}
# the sample: P in a fixed order covering 2..16, the rest from a linear congruential sequence
points=$(sample 12345 "2 16 9 5 13 3 11 7 15 4 12 6 14 8 10" "$N")
echo "$points" | while read k P m TF TB TW TC; do
  D="-D P=$P -D m=$m -D TF=$TF -D TB=$TB -D TW=$TW -D TC=$TC"
  for pl in 0 1 2; do
    case $pl in
      0) fams="zb_h1 zb_h2 1f1b" ;;
      1) fams="zb_v v_half v_min 1f1b_v" ;;
      *) fams="interleaved_1f1b" ;;
    esac
    # the standard schedules of this placement: "family makespan peak" per line
    : > "$tmp/fam"
    for s in $fams; do
      vd=; [ $pl -eq 2 ] && vd="-D v=2"
      set -- $(fig "$STD/$s.pps" $D $vd -D checks=false)   # figures even where its own expect fails
      if [ "$1" != true ]; then bad "$s $D: stdlib not valid"; continue; fi
      echo "$s $2 $3" >> "$tmp/fam"
    done
    # the least limit of this placement, from the synthesiser itself at a limit of 2P
    set -- $(syn $D -D pl=$pl -D v=2 -D L=$((2 * P)) -D effort=0)
    if [ $# -ne 4 ]; then bad "synthesize $D pl=$pl L=$((2 * P)) failed"; continue; fi
    least=$4
    # limits: every family's peak; for one placement per point, a sweep least..2P
    { awk '{ print $3 }' "$tmp/fam"
      [ $((k % 3)) -eq $pl ] && awk -v a=$least -v b=$((2 * P)) 'BEGIN { for (i = 0; i <= 4; i++) printf "%.6g\n", a + (b - a) * i / 4 }'
    } | sort -n -u > "$tmp/limits"
    prev=""
    while read L; do
      set -- $(syn $D -D pl=$pl -D v=2 -D L=$L -D effort=$EFFORT)
      if [ $# -ne 4 ]; then bad "synthesize $D pl=$pl L=$L failed"; continue; fi
      mk=$1 pk=$2 lb=$3
      # the best standard schedule at the same or a lower peak
      best=$(awk -v L=$L '$3 <= L * (1 + 1e-9) && (b == "" || $2 < b) { b = $2; f = $1 } END { print (b == "" ? "none -" : f " " b) }' "$tmp/fam")
      set -- $best
      if awk -v mk=$mk -v pk=$pk -v L=$L -v lb=$lb -v sb=$2 'BEGIN { e = 1e-6
           exit !((sb == "-" || mk <= sb + e) && pk <= L * (1 + 1e-9) && lb <= mk + e) }'; then
        echo "ok: pl=$pl $D L=$L: synthesized $mk peak $pk bound $lb; best stdlib at <= L: $1 $2"
      else
        bad "pl=$pl $D L=$L: synthesized $mk peak $pk bound $lb; best stdlib at <= L: $1 $2"
      fi
      [ -n "$prev" ] && awk -v a=$prev -v b=$mk 'BEGIN { exit !(b > a + 1e-9) }' &&
        echo "note: pl=$pl $D: makespan $mk at L=$L is above $prev at the limit below (the search is not monotone in the limit)"
      prev=$mk
      # one row per family whose peak is this limit (the table)
      awk -v L=$L -v r="$P $m $TF $TB $TW $TC $L" -v mk=$mk -v pk=$pk -v lb=$lb \
        '$3 == L { print $1, r, $2, mk, pk, lb }' "$tmp/fam" >> "$OUT"
    done < "$tmp/limits"
    # below the least: refused
    below=$(awk -v a=$least 'BEGIN { printf "%.6g", a * 0.75 }')
    "$PPSC" check "$ANY" $D -D pl=$pl -D v=2 -D L=$below > /dev/null 2>&1 && bad "pl=$pl $D L=$below accepted (below the least, $least)"
  done
  [ -s "$tmp/failed" ] && exit 1
done
[ -s "$tmp/failed" ] && fail=1
exit $fail
