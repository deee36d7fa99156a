#!/bin/sh
# tests/gpu/posted_emu.sh: posted receives (op flag PPSRT_FLAG_POSTED, runtime/ppsrt_ops.h) on the CUDA backend with
# NO GPU, under the emulator (tests/gpu/emu/libppsrt_emu.so: its race detector fails a
# run with exit 66, its NCCL deadlock detector with 67). Programs made by hand as in
# tests/runtime/posted.sh (`ppsc emit-c` + tests/runtime/posted.awk: each recv moved up to
# 6 ops earlier and flagged posted). In NCCL mode (P emulated GPUs: the recv is enqueued
# where it stands, the compute stream waits for its completion event at the consumer)
# 1f1b, zb_v, dualpipe_v (the consumer may be the second pass of an overlapped pair, on
# the second compute stream) at P = 4, m = 8 with the mlp and vocab_1f1b with the gpt pass
# --check under seeds 1, 2, 3 with the losses of the program as emitted; the copy
# channel (4 ranks on one emulated GPU: buffered, the receive performed at the consumer)
# for 1f1b and zb_v; and rt_tables posted (a posted recv kept in its group by a later
# plain recv of its channel) in both modes. The NCCL-mode runs turn on the GPU-side
# posting (PPSRT_NCCL_POSTED=1: experimental and off by default, docs/gpu.md; these
# hand-moved recvs need it, issued plain where they stand they deadlock); removing the
# consumer's wait (cudaStreamWaitEvent in tp_recv_wait) makes them exit 66 (checked by
# hand). Exit 77 where the emulator is not built.
. "$(dirname "$0")/../runtime/lib.sh"
need_emu
GPT=$EMU_GPT
MLP="--hidden 8 --seq 4"
cc_prog() {
  ${CC:-cc} ${CFLAGS:--O2} "$WORK/$1.c" -o "$WORK/$1" -I"$top_srcdir/runtime" -L"$top_builddir/.libs" \
    -Wl,-rpath,"$top_builddir/.libs" -lppsrt $LDFLAGS 2> "$WORK/$1.cc.err" || { cat "$WORK/$1.cc.err" >&2; return 1; }
}
losses() { grep -o '"loss":[^,]*' "$1" | tr '\n' ' '; }
# emu_run GPUS SEED PROG ARGS...: one --check run under the emulator, --json in $WORK/out
emu_run() {
  g=$1 sd=$2; shift 2
  env PPSRT_NCCL_POSTED=1 PPSRT_EMU_GPUS=$g PPS_EMU_SEED=$sd LD_PRELOAD="$EMU" "$@" --backend cuda --transport nccl --check \
    --iterations 2 --json
}
for s in 1f1b zb_v dualpipe_v vocab_1f1b; do
  sizes=$MLP
  [ "$s" = vocab_1f1b ] && sizes=$GPT
  if ! { "$PPSC" emit-c "$top_srcdir/stdlib/$s.pps" -D P=4 -D m=8 -o "$WORK/$s.x.c" &&
         awk -v LIMIT=6 -f "$top_srcdir/tests/runtime/posted.awk" "$WORK/$s.x.c" > "$WORK/$s.y.c" &&
         cc_prog "$s.x" && cc_prog "$s.y"; }; then fail "$s: making the posted program"; continue; fi
  emu_run 4 1 "$WORK/$s.x" $sizes > "$WORK/$s.x.json" 2>&1 || fail "$s as emitted, NCCL mode"
  a=$(losses "$WORK/$s.x.json")
  for seed in 1 2 3; do
    expect_exit 0 "$s posted recvs, NCCL mode (4 emulated GPUs) --check, seed $seed" emu_run 4 $seed "$WORK/$s.y" $sizes
    b=$(losses "$WORK/out")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$s NCCL mode seed $seed: losses equal the unflagged program's ($b)"
    else fail "$s NCCL mode seed $seed: losses '$b', as emitted '$a'"; fi
  done
  case $s in 1f1b|zb_v)
    expect_exit 0 "$s posted recvs, copy channel (4 ranks on 1 emulated GPU) --check" emu_run 1 2 "$WORK/$s.y" $sizes
    b=$(losses "$WORK/out")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$s copy channel: losses equal the unflagged program's"
    else fail "$s copy channel: losses '$b', as emitted '$a'"; fi
  esac
done
for g in 4 1; do
  expect_exit 0 "rt_tables posted, $g emulated GPU(s) --check" emu_run $g 3 "$RT_TABLES" posted 4 8 -q $MLP
done
finish
