#!/bin/sh
# tests/analysis/makespan_exact.sh: makespans of the closed-form stdlib schedules equal
# their closed forms (not only stay below them, as their `expect` statements say), by
# `ppsc sim --json` over a grid of P, m and costs, without communication (TC = 0):
#   gpipe, 1f1b:        (m + P - 1)(TF + TB + TW)
#   zb_h1:              m(TF + TB + TW) + (P - 1) max(TF + TB - TW, TF, TB)
#   interleaved_1f1b:   (m + (P - 1)/v)(TF + TB + TW), v = 2 chunks, m a multiple of P
# Equal up to 1e-9 (relative).
set -u
: "${PPSC:=./ppsc}"
S=$top_srcdir/stdlib
fails=0 n=0
# mk FILE -D...: the makespan of ppsc sim --json
mk() { "$PPSC" sim --json "$@" 2>/dev/null | sed -n 's/^{.*"makespan":\([0-9.e+-]*\),.*/\1/p'; }
for P in 2 3 4 8; do
  for k in 1 2 3; do
    m=$((k * P))
    for c in "1 1 1" "1 2 1" "1.5 2 0.5" "0.5 0.5 2" "2 1 1.5"; do
      set -- $c
      for s in gpipe 1f1b zb_h1 interleaved_1f1b; do
        want=$(awk -v P=$P -v m=$m -v f=$1 -v b=$2 -v w=$3 -v s=$s 'BEGIN {
          t = f + b + w
          if (s == "zb_h1") { x = f + b - w; if (f > x) x = f; if (b > x) x = b; print m * t + (P - 1) * x }
          else if (s == "interleaved_1f1b") print (m + (P - 1) / 2) * t
          else print (m + P - 1) * t }')
        got=$(mk "$S/$s.pps" -D P=$P -D m=$m -D TF=$1 -D TB=$2 -D TW=$3 -D TC=0)
        n=$((n + 1))
        if [ -z "$got" ] || ! awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-9 * b) }'; then
          echo "FAIL: $s P=$P m=$m TF=$1 TB=$2 TW=$3: makespan ${got:-(none)}, closed form $want"
          fails=$((fails + 1))
        fi
      done
    done
  done
done
echo "$n makespans compared, $fails differ"
[ $fails -eq 0 ]
