#!/bin/sh
# tests/stdlib/costs.sh: unequal costs and TC > 0: every schedule stays valid and keeps
# the guarantees written in it (its `expect` statements), for a few P and m.
. "${top_srcdir:?}/tests/stdlib/lib.sh"
n=0
for P in 2 3 5 8 13; do
  for m in $P $((2 * P + 1)); do
    for c in "1 2 1 0" "1 2 2 0.1" "2 3 1 0" "1 1 0.5 0.3" "1 1.5 0.7 0" "1 1 2 0.05"; do
      set -- $c; TF=$1 TB=$2 TW=$3 TC=$4
      for s in gpipe 1f1b zb_h1 zb_h2 zb_v v_half v_min 1f1b_v vocab_1f1b; do
        n=$((n + 1))
        set -- $(figures "$STD/$s.pps" -D P=$P -D m=$m -D TF=$TF -D TB=$TB -D TW=$TW -D TC=$TC)
        [ "$1" = true ] && [ "$5" = true ] || bad "$s P=$P m=$m TF=$TF TB=$TB TW=$TW TC=$TC: valid=$1 expects_ok=$5"
      done
      mm=$((P * 2)); n=$((n + 1))
      set -- $(figures "$STD/dualpipe_v.pps" -D P=$P -D m=$((mm + 1)) -D TF=$TF -D TB=$TB -D TW=$TW -D TC=$TC)
      [ "$1" = true ] && [ "$5" = true ] || bad "dualpipe_v P=$P m=$((mm + 1)) costs $c: valid=$1 expects_ok=$5"
      n=$((n + 1))
      set -- $(figures "$STD/interleaved_1f1b.pps" -D P=$P -D m=$mm -D TF=$TF -D TB=$TB -D TW=$TW -D TC=$TC)
      [ "$1" = true ] && [ "$5" = true ] || bad "interleaved_1f1b P=$P m=$mm costs $c: valid=$1 expects_ok=$5"
    done
  done
done
# ZB-H2 is never slower than ZB-H1 (same costs), as the published ZB-H2 is not.
for P in 3 4 8; do
  for c in "1 2 1" "2 3 1" "1 1 0.5" "1 1 2" "2 1 1"; do
    set -- $c; m=$((3 * P))
    a=$(figures "$STD/zb_h2.pps" -D P=$P -D m=$m -D TF=$1 -D TB=$2 -D TW=$3 | cut -d' ' -f2)
    b=$(figures "$STD/zb_h1.pps" -D P=$P -D m=$m -D TF=$1 -D TB=$2 -D TW=$3 | cut -d' ' -f2)
    awk -v a="$a" -v b="$b" 'BEGIN { exit !(a <= b + 1e-9) }' || bad "zb_h2 slower than zb_h1 at P=$P costs $c: $a > $b"
  done
done
echo "stdlib costs: $n runs"
exit $fail
