#!/bin/sh
# tests/stdlib/memlimit.sh: the zero-bubble family under a memory limit (zb_h2.pps with
# MEM from P, ZB-H1's order, to 2P, ZB-H2's). For every MEM: valid, the file's expects
# hold, peak activation exactly min(m, MEM), the makespan never grows when MEM does,
# and where the header states it exactly (m >= MEM, TF >= TB, TC = 0) the makespan is
#   m (TF + TB + TW) + (P - 1) TF + max(0, 2P - 1 - MEM) max(0, TB - TW).
# MEM = P gives zb_h1's figures, MEM = 2P zb_h2's defaults; MEM outside [P, 2P] is a
# located error.
. "${top_srcdir:?}/tests/stdlib/lib.sh"
n=0
for P in 2 3 4 6 8; do
  for m in $P $((2 * P)) $((3 * P)); do
    for c in "1 1 1 0" "1 1 0.5 0" "2 1 0.5 0" "1 2 1 0" "1 0.5 1 0" "1 1 0.5 0.1" "0.5 1 1 0.5"; do
      set -- $c
      prev=
      M=$P
      while [ $M -le $((2 * P)) ]; do
        set -- $c
        r=$(figures "$STD/zb_h2.pps" -D P=$P -D m=$m -D MEM=$M -D TF=$1 -D TB=$2 -D TW=$3 -D TC=$4)
        n=$((n + 1))
        what="P=$P m=$m MEM=$M costs $c"
        set -- $r
        [ "$1" = true ] && [ "$5" = true ] || bad "$what: valid=$1 expects_ok=$5"
        mk=$2
        [ "$3" = "$((m < M ? m : M))" ] || bad "$what: peak $3, expected min(m, MEM)"
        [ -z "$prev" ] || awk -v a="$mk" -v b="$prev" 'BEGIN { exit !(a <= b + 1e-9) }' ||
          bad "$what: makespan $mk grew from $prev at MEM - 1"
        prev=$mk
        set -- $c
        exact=$(awk -v P=$P -v m=$m -v M=$M -v TF=$1 -v TB=$2 -v TW=$3 -v TC=$4 'BEGIN {
          if (m < M || TF < TB || TC != 0) { print "-"; exit }
          k = 2 * P - 1 - M; if (k < 0) k = 0; g = TB - TW; if (g < 0) g = 0
          printf "%.9f\n", m * (TF + TB + TW) + (P - 1) * TF + k * g }')
        [ "$exact" = - ] || awk -v a="$mk" -v b="$exact" 'BEGIN { exit !(a - b < 1e-9 && b - a < 1e-9) }' ||
          bad "$what: makespan $mk, closed form $exact"
        M=$((M + 1))
      done
    done
    # the ends of the range are the named schedules
    a=$(figures "$STD/zb_h2.pps" -D P=$P -D m=$m -D MEM=$P -D TW=0.5)
    b=$(figures "$STD/zb_h1.pps" -D P=$P -D m=$m -D TW=0.5)
    [ "$a" = "$b" ] || bad "P=$P m=$m: zb_h2 MEM=P gives '$a', zb_h1 '$b'"
    a=$(figures "$STD/zb_h2.pps" -D P=$P -D m=$m -D MEM=$((2 * P)) -D TW=0.5)
    b=$(figures "$STD/zb_h2.pps" -D P=$P -D m=$m -D TW=0.5)
    [ "$a" = "$b" ] || bad "P=$P m=$m: zb_h2 MEM=2P gives '$a', the default '$b'"
  done
done
for M in 3 9; do
  out=$("$PPSC" check "$STD/zb_h2.pps" -D MEM=$M 2>&1); rc=$?
  [ $rc = 1 ] || bad "MEM=$M: exit $rc, expected 1"
  case $out in *"zb_h2.pps:"*"error: zb_h2 needs P <= MEM <= 2P"*) ;; *) bad "MEM=$M: $out";; esac
done
echo "stdlib memlimit: $n runs"
exit $fail
