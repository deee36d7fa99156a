#!/bin/sh
# tests/gpu/eval_emu.sh: validation as forward-only evaluation through the pipeline
# (validate.c, interp.c rt_eval_forward) on the CUDA backend with the NCCL transport,
# without a GPU (the emulator, tests/gpu/emu): the validation loss on a file V equals
# the training loss of iteration 1 of a run that trains on V at --lr 0 (the same
# sequences and weights; the same kernels, so the same digits), under 1F1B, ZB-V and
# 1F1B-V at P = 4 with the receives ppsc posts (PPSRT_NCCL_POSTED=1: posted receives
# matched to their first kept reader, point-to-point groups cut to their kept members),
# Vocab-1 V-Half with asynchronous collectives (the collective lane), T = 2 with
# --sequence-parallel and D = 2 with --distributed-optimizer; and --eval-iters 2 is
# the mean of the two batches evaluated alone. Skipped (77) without the emulator.
. "$(dirname "$0")/../runtime/lib.sh"
need_emu
G="--model gpt --hidden 16 --heads 2 --query-groups 2 --seq 8 --vocab 256 --layers-per-stage 1"
i=0; : > "$WORK/V"; : > "$WORK/T"
while [ $i -lt 40 ]; do
  echo "validation line $i: the quick brown fox jumps over the lazy dog $((i * 7919 % 1013))" >> "$WORK/V"
  echo "training text $i, something else entirely: $((i * 104729 % 4099)) lorem ipsum" >> "$WORK/T"
  i=$((i + 1))
done
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build zv4 "$top_srcdir/stdlib/zb_v.pps" -D P=4 -D m=8 || { fail "build zb_v"; finish; }
build v4 "$top_srcdir/stdlib/1f1b_v.pps" -D P=4 -D m=8 || { fail "build 1f1b_v"; finish; }
build vh "$top_srcdir/stdlib/vocab_v_half.pps" -D P=2 -D m=4 -D async=true || { fail "build vocab_v_half"; finish; }
nccl() { gpus=$1; shift; env PPSRT_NCCL_POSTED=1 PPSRT_EMU_GPUS=$gpus PPS_EMU_SEED=2 LD_PRELOAD="$EMU" "$@" --backend cuda --transport nccl; }
iter1() { sed -n 's/^iter 1\/1  loss \([-0-9.e+]*\) .*/\1/p' "$1"; }
val1() { sed -n 's/^val  1\/1  loss \([-0-9.e+]*\) .*/\1/p' "$1"; }
# same DESC GPUS PROG FLAGS...
same() {
  desc=$1; gpus=$2; shift 2
  nccl "$gpus" "$@" --data "$WORK/T" --val-data "$WORK/V" --lr 0 --iterations 1 > "$WORK/ev" 2>&1 || {
    fail "$desc: validation run failed"; tail -5 "$WORK/ev" >&2; return; }
  nccl "$gpus" "$@" --data "$WORK/V" --lr 0 --iterations 1 > "$WORK/tr" 2>&1 || {
    fail "$desc: training run failed"; tail -5 "$WORK/tr" >&2; return; }
  v=$(val1 "$WORK/ev"); t=$(iter1 "$WORK/tr")
  if [ -n "$v" ] && [ "$v" = "$t" ]; then pass "$desc: validation loss $v = training loss on V"
  else fail "$desc: validation loss '$v', training loss on V '$t'"; fi
}
# shellcheck disable=SC2086
{
same "1F1B P=2" 2 "$WORK/a" $G
same "ZB-V P=4, posted receives" 4 "$WORK/zv4" $G
same "1F1B-V P=4, posted receives" 4 "$WORK/v4" $G
same "Vocab-1 V-Half, asynchronous collectives" 2 "$WORK/vh" $G
same "1F1B T=2 --sequence-parallel" 4 "$WORK/a" $G --tensor-parallel 2 --sequence-parallel
same "1F1B D=2 --distributed-optimizer" 4 "$WORK/a" $G --data-parallel 2 --distributed-optimizer --optimizer adam
# --eval-iters 2 = the mean of batch 1 and batch 2 alone (4 sequences of 8 bytes a batch)
nccl 2 "$WORK/a" $G --data "$WORK/T" --val-data "$WORK/V" --lr 0 --iterations 1 --eval-iters 2 > "$WORK/k2" 2>&1
tail -c +33 "$WORK/V" > "$WORK/V1"
nccl 2 "$WORK/a" $G --data "$WORK/T" --val-data "$WORK/V1" --lr 0 --iterations 1 > "$WORK/b1" 2>&1
nccl 2 "$WORK/a" $G --data "$WORK/T" --val-data "$WORK/V" --lr 0 --iterations 1 > "$WORK/b0" 2>&1
k=$(val1 "$WORK/k2") x=$(val1 "$WORK/b0") y=$(val1 "$WORK/b1")
if [ -n "$k" ] && [ -n "$x" ] && [ -n "$y" ] &&
   awk -v a="$x" -v b="$y" -v k="$k" 'BEGIN { m = (a + b) / 2; d = m - k; if (d < 0) d = -d; exit !(d <= 2e-7 * m + 1e-7 && a != b) }'; then
  pass "--eval-iters 2 loss $k = mean of $x and $y"
else fail "--eval-iters 2 loss '$k', batches alone '$x' '$y'"; fi
}
finish
