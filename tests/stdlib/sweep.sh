#!/bin/sh
# tests/stdlib/sweep.sh: every standard schedule, P = 2..32 and several m, equal costs:
# valid, its own `expect` statements hold, and peak memory / makespan are the
# published figures:
#   1F1B, ZB-H1: peak exactly P; makespan (m+P-1)(3) resp. 3m + P - 1;
#   ZB-H2: peak exactly 2P, makespan 3m + P - 1 (only the fill ramp);
#   ZB-V: peak exactly P (m >= 2P - 1, at most P always), bubble (P - 1)/2 of a pass;
#   V-Half: peak (P + 2) div 2, bubble rate <= P / (2m) + 1/m;
#   V-Min: peak (P + 4) div 3, bubble rate <= 2P / (3m) + 1/m;
#   1F1B-V: peak at most (2P + 3) div 3 (squeeze may do better), bubble rate <= P / m;
#   interleaved (v = 2): makespan 3m + 1.5 (P - 1); GPipe: peak m.
. "${top_srcdir:?}/tests/stdlib/lib.sh"
n=0
for P in 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32; do
  for m in $P $((2 * P)) $((3 * P + 1)); do
    for s in gpipe 1f1b zb_h1 zb_h2 zb_v v_half v_min 1f1b_v; do
      set -- $(figures "$STD/$s.pps" -D P=$P -D m=$m)
      n=$((n + 1))
      if [ "$1" != true ] || [ "$5" != true ]; then bad "$s P=$P m=$m: valid=$1 expects_ok=$5"; continue; fi
      awk -v s=$s -v P=$P -v m=$m -v mk="$2" -v pk="$3" -v br="$4" 'BEGIN {
        e = 1e-6; ok = 1
        if (s == "gpipe")  ok = (pk == m && mk <= 3 * (m + P - 1) + e)
        if (s == "1f1b")   ok = (pk == P && mk <= 3 * (m + P - 1) + e)
        if (s == "zb_h1")  ok = (pk == P && mk <= 3 * m + (P - 1) + e)
        if (s == "zb_h2")  ok = (pk == 2 * P || (m < 2 * P && pk == m)) && mk <= 3 * m + (P - 1) + e
        if (s == "zb_v")   ok = (pk == P && (m < 2 * P - 1 || mk <= 3 * m + (P - 1) / 2 + e))
        if (s == "v_half") ok = (pk == int((P + 2) / 2) && br <= P / (2 * m) + 1 / m + e)
        if (s == "v_min")  ok = (pk == int((P + 4) / 3) && br <= 2 * P / (3 * m) + 1 / m + e)
        if (s == "1f1b_v") ok = (pk <= int((2 * P + 3) / 3) && br <= P / m + e)   # squeeze may do better
        exit !ok }' || bad "$s P=$P m=$m: makespan $2 peak $3 bubble_rate $4"
    done
    for mm in $P $((2 * P)); do
      set -- $(figures "$STD/interleaved_1f1b.pps" -D P=$P -D m=$mm)
      n=$((n + 1))
      [ "$1" = true ] && [ "$5" = true ] && awk -v P=$P -v m=$mm -v mk="$2" 'BEGIN { exit !(mk <= 3 * m + 1.5 * (P - 1) + 1e-6) }' \
        || bad "interleaved_1f1b P=$P m=$mm: $*"
    done
  done
done
# DualPipeV (needs m >= 2P): valid, peak P + 1/2; passes one after the other
# (overlapped = false): bubble (P - 1)/2 at equal costs; with its F&B pairs the file's
# expects check DualPipe's published bubble (P - 1)(TFB + TB - 2TW)/2
for P in 2 3 4 5 6 7 8 9 10 12 16 20 24 32; do
  for m in $((2 * P)) $((3 * P + 1)); do
    n=$((n + 2))
    set -- $(figures "$STD/dualpipe_v.pps" -D P=$P -D m=$m -D TFB=2.5)
    [ "$1" = true ] && [ "$5" = true ] && awk -v P=$P -v pk="$3" 'BEGIN { exit !(pk == P + 0.5) }' \
      || bad "dualpipe_v P=$P m=$m TFB=2.5: $*"
    set -- $(figures "$STD/dualpipe_v.pps" -D P=$P -D m=$m -D overlapped=false)
    [ "$1" = true ] && [ "$5" = true ] && awk -v P=$P -v m=$m -v mk="$2" -v pk="$3" 'BEGIN {
        exit !(pk == P + 0.5 && mk <= 3 * m + (P - 1) / 2 + 1e-6) }' \
      || bad "dualpipe_v P=$P m=$m: $*"
  done
done
# other chunk counts of the interleaved schedule
for P in 2 3 4 7 8 16; do
  for v in 1 3 4; do
    m=$((2 * P)); n=$((n + 1))
    set -- $(figures "$STD/interleaved_1f1b.pps" -D P=$P -D m=$m -D v=$v)
    [ "$1" = true ] && [ "$5" = true ] && awk -v P=$P -v m=$m -v v=$v -v mk="$2" -v pk="$3" 'BEGIN {
        w = 2 * (P - 1) + (v - 1) * P + 1; if (w > m * v) w = m * v
        exit !(mk <= 3 * m + 3 * (P - 1) / v + 1e-6 && pk <= w / v + 1e-9) }' \
      || bad "interleaved_1f1b P=$P m=$m v=$v: $*"
  done
done
echo "stdlib sweep: $n runs"
exit $fail
