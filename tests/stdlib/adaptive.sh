#!/bin/sh
# tests/stdlib/adaptive.sh: the zero-bubble schedules with unequal costs (TF != TB != TW,
# TC >= 0) stay within closed-form makespan bounds and their memory guarantees.
#   ZB-V, TW >= TB, TC = 0, m >= 2P, P >= 3: bubble (P-1) max(TF, TB) / 2, the equal-cost
#     (P-1) TF / 2 generalised; it holds because the cool-down runs each chunk-0 W
#     right after its B (the fixed published order misses it, e.g. 76 > 75 at P = 4,
#     m = 16, TF = 2, TB = 1, TW = 1.5); with TC > 0 at most 2 (m + P) TC more.
#   ZB-H2, m >= 2P: only the fill ramp, (P-1) max(TF + TC, TB + 2 TC - TF) + (P-1) TC
#     (exact at TC = 0: (P-1) TF when TB <= 2 TF, else device 0 waits (P-1)(TB - TF)
#     with 2P activations).
#   ZB-H1, m >= P: (P-1) max(TF + TB - TW, TF, TB) + 2 (m + P) TC.
# Peak activation: ZB-H1 and ZB-V min(m, P), ZB-H2 min(m, 2P).
. "${top_srcdir:?}/tests/stdlib/lib.sh"
n=0
# check SCHEDULE P m TF TB TW TC BOUND_EXPR PEAK_CAP
check() {
  s=$1 P=$2 m=$3 TF=$4 TB=$5 TW=$6 TC=$7 cap=$9
  bound=$(awk -v P="$P" -v m="$m" -v TF="$TF" -v TB="$TB" -v TW="$TW" -v TC="$TC" '
    function max(a, b) { return a > b ? a : b }
    BEGIN { T = TF + TB + TW; '"$8"'; printf "%.9f\n", b }')
  set -- $(figures "$STD/$s.pps" -D P=$P -D m=$m -D TF=$TF -D TB=$TB -D TW=$TW -D TC=$TC)
  n=$((n + 1))
  [ "$1" = true ] && [ "$5" = true ] || { bad "$s P=$P m=$m $TF/$TB/$TW/$TC: valid=$1 expects_ok=$5"; return; }
  awk -v a="$2" -v b="$bound" 'BEGIN { exit !(a <= b + 1e-6) }' ||
    bad "$s P=$P m=$m TF=$TF TB=$TB TW=$TW TC=$TC: makespan $2 > bound $bound"
  awk -v a="$3" -v b="$cap" 'BEGIN { exit !(a <= b + 1e-9) }' ||
    bad "$s P=$P m=$m TF=$TF TB=$TB TW=$TW TC=$TC: peak $3 > $cap"
}
V='b = m * T + (P - 1) * max(TF, TB) / 2 + 2 * (m + P) * TC'
for c in "4 16 2 1 1.5 0" "4 16 1 1 2 0" "5 20 1.5 1 1 0" "6 12 1 1.5 2 0" "8 16 2 1.5 2 0" \
         "3 6 1 0.5 1 0" "4 16 1 1 2 0.1" "8 32 2 1 1.5 0.5"; do
  set -- $c; check zb_v "$1" "$2" "$3" "$4" "$5" "$6" "$V" "$1"
done
H2='b = m * T + (P - 1) * (max(TF + TC, TB + 2 * TC - TF) + TC)'
for c in "4 12 1 2 1 0" "4 8 2 1 1 0" "8 16 1 1.5 1 0" "3 12 0.5 1.5 1 0" "5 20 1 2 1.5 0.1" \
         "6 24 2 1 1 0.5" "16 32 1 0.5 1 0"; do
  set -- $c; check zb_h2 "$1" "$2" "$3" "$4" "$5" "$6" "$H2" "$((2 * $1))"
done
H1='b = m * T + (P - 1) * max(TF + TB - TW, max(TF, TB)) + 2 * (m + P) * TC'
for c in "4 8 1 2 1.5 0.1" "4 16 2 1 1 0" "8 16 1 1 0.5 0" "5 20 1 1.5 2 0.5" "16 16 2 1.5 1 0.1"; do
  set -- $c; check zb_h1 "$1" "$2" "$3" "$4" "$5" "$6" "$H1" "$1"
done
echo "stdlib adaptive: $n runs"
exit $fail
