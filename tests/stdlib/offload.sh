#!/bin/sh
# tests/stdlib/offload.sh: PipeOffload. When the host link satisfies the paper's
# condition (a stage's copy, TOFF/v, fits inside the compute between its F and B;
# here TOFF <= TF), full offload keeps the makespan within 2% of no offload and the
# activation per device constant as P grows (1.5 + 1/2: the paper's 1.5 and the stage
# a reload brings back one pass before its B); selective offload of the first
# chunk lowers the peak more than spreading the same copy volume over every stage;
# on the interleaved and on the ZB-V base.
. "${top_srcdir:?}/tests/stdlib/lib.sh"
for P in 2 3 4 6 8 12 16 32; do
  for m in $P $((4 * P)); do
    set -- $(figures "$STD/interleaved_1f1b.pps" -D P=$P -D m=$m); base_mk=$2 base_pk=$3
    for t in 0.25 0.5 1; do
      set -- $(figures "$STD/pipeoffload.pps" -D P=$P -D m=$m -D TOFF=$t)
      [ "$1" = true ] && [ "$5" = true ] || { bad "pipeoffload P=$P m=$m TOFF=$t: valid=$1 expects_ok=$5"; continue; }
      awk -v a="$2" -v b="$base_mk" -v pk="$3" 'BEGIN { exit !(a <= 1.02 * b && pk <= 2 + 1e-9) }' \
        || bad "pipeoffload P=$P m=$m TOFF=$t: makespan $2 (no offload $base_mk), peak $3"
      set -- $(figures "$STD/pipeoffload_selective.pps" -D P=$P -D m=$m -D TOFF=$t); sel=$3
      [ "$1" = true ] && [ "$5" = true ] || bad "pipeoffload_selective P=$P m=$m TOFF=$t: valid=$1 expects_ok=$5"
      set -- $(figures "$STD/pipeoffload.pps" -D P=$P -D m=$m -D TOFF=$t -D ratio=0.5 -D checks=false); half=$3
      awk -v s="$sel" -v h="$half" -v b="$base_pk" -v P=$P 'BEGIN { exit !(s <= h + 1e-9 && (P < 4 || s < h) && s < b) }' \
        || bad "selective offload P=$P m=$m TOFF=$t: peak $sel, half of every stage $half, none $base_pk"
    done
  done
  # the V-shaped base (ZB-V) stays valid with every offload choice
  for a in "-D ratio=1" "-D ratio=0.5" "-D k=$P"; do
    set -- $(figures "$STD/pipeoffload.pps" -D P=$P -D m=$((2 * P)) -D vee=true $a)
    [ "$1" = true ] && [ "$5" = true ] || bad "pipeoffload vee P=$P $a: valid=$1"
  done
done
# the same claims on the ZB-V base (vee = true; its cool-down W's right after their B,
# cooldown_w = 1): full offload keeps ZB-V's makespan and leaves max(1.5, P/2) + 1/2 of its
# P device shares; with every W right after its B (cooldown_w = 2) 1.5 at every P for
# the bubble doubled; offloading chunk 0 alone (stages 0..P, P/(2P-1) of the copy
# volume) cuts the peak better than linearly, and below ratio 0.5 over every stage
for P in 2 3 4 6 8 12 16 32; do
  for m in $((2 * P)) $((4 * P)); do
    set -- $(figures "$STD/zb_v.pps" -D P=$P -D m=$m); base_mk=$2 base_pk=$3
    for t in 0.25 0.5 1; do
      set -- $(figures "$STD/pipeoffload.pps" -D P=$P -D m=$m -D TOFF=$t -D vee=true); full=$3
      [ "$1" = true ] && [ "$5" = true ] && awk -v a="$2" -v b="$base_mk" -v pk="$3" -v P=$P \
        'BEGIN { h = (P / 2 < 1.5 ? 1.5 : P / 2) + 0.5; exit !(a <= b + 1e-9 && pk <= h + 1e-9) }' \
        || bad "pipeoffload vee P=$P m=$m TOFF=$t: valid=$1 expects=$5 makespan $2 (ZB-V $base_mk), peak $3 (ZB-V $base_pk)"
      set -- $(figures "$STD/pipeoffload.pps" -D P=$P -D m=$m -D TOFF=$t -D vee=true -D cooldown_w=2)
      [ "$1" = true ] && [ "$5" = true ] && awk -v a="$2" -v P=$P -v m=$m -v pk="$3" \
        'BEGIN { exit !(a <= 3 * m + (P - 1) + 1e-9 && pk <= 1.5 + 1e-9) }' \
        || bad "pipeoffload vee cooldown_w=2 P=$P m=$m TOFF=$t: valid=$1 expects=$5 makespan $2, peak $3"
      set -- $(figures "$STD/pipeoffload_selective.pps" -D P=$P -D m=$m -D TOFF=$t -D vee=true); sel=$3
      [ "$1" = true ] && [ "$5" = true ] && awk -v a="$2" -v b="$base_mk" 'BEGIN { exit !(a <= b + 1e-9) }' \
        || bad "pipeoffload_selective vee P=$P m=$m TOFF=$t: valid=$1 expects=$5 makespan $2 (ZB-V $base_mk)"
      set -- $(figures "$STD/pipeoffload.pps" -D P=$P -D m=$m -D TOFF=$t -D vee=true -D ratio=0.5 -D checks=false); half=$3
      awk -v s="$sel" -v h="$half" -v f="$full" -v b="$base_pk" -v P=$P \
        'BEGIN { exit !(s < h && b - s > (b - f) * P / (2 * P - 1) + 1e-9) }' \
        || bad "selective offload vee P=$P m=$m TOFF=$t: peak $sel, half of every stage $half, full $full, none $base_pk"
    done
  done
done
# a slow host link costs time (the model is not free of charge)
set -- $(figures "$STD/pipeoffload.pps" -D P=4 -D m=8 -D TOFF=8 -D checks=false)
awk -v a="$2" 'BEGIN { exit !(a > 28.5) }' || bad "pipeoffload with TOFF=8 should be slower than 28.5, got $2"
exit $fail
