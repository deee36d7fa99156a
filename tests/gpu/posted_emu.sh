#!/bin/sh
# tests/gpu/posted_emu.sh: posted receives (op flag PPSRT_FLAG_POSTED, runtime/ppsrt_ops.h) on the CUDA backend with
# NO GPU, under the emulator (tests/gpu/emu/libppsrt_emu.so: its race detector fails a
# run with exit 66, its NCCL deadlock detector with 67). The NCCL-mode runs turn on the
# GPU-side posting (PPSRT_NCCL_POSTED=1: off by default, docs/gpu.md); in NCCL mode (P
# emulated GPUs) the recv is enqueued where it stands and the compute stream waits for
# its completion event at the consumer.
#  - The recvs ppsc posts (the rendezvous repair's) in 1f1b_v, zb_v (mlp) and vocab_1f1b
#    (gpt) at P = 4, m = 8, as emitted: --check under seeds 1, 2, 3 with the losses of the
#    run without the posting. 1f1b_v has a posted recv in a group after a plain recv of
#    its channel: launched after the group, as before interp.c's posted_late kept it in
#    the group, its channel held it until the group completed and every seed deadlocked
#    (exit 67).
#  - Programs made by hand as in tests/runtime/posted.sh (`ppsc emit-c` +
#    tests/runtime/posted.awk: each recv moved up to 6 ops earlier and flagged posted):
#    zb_v, dualpipe_v (the consumer may be the second pass of an overlapped pair, on the
#    second compute stream) and vocab_1f1b in NCCL mode under seeds 1, 2, 3 with the
#    losses of the program as emitted; the copy channel (4 ranks on one emulated GPU:
#    buffered, the receive performed at the consumer) for 1f1b and zb_v. (The hand-moved
#    1f1b is not run in NCCL mode: its order deadlocks in the compiler's rendezvous model,
#    where a posted recv is matched at its group as NCCL completes a group as a whole:
#    device 0's group {send F(0), posted recv B(0)} waits for device 1's send of B(0),
#    device 1's first group for device 0's send of F(1); the runtime now keeps that
#    model, so it deadlocks there too.)
#  - rt_tables posted (a posted recv kept in its group by a later plain recv of its
#    channel) in both modes.
# Removing the consumer's wait (cudaStreamWaitEvent in tp_recv_wait) makes the NCCL-mode
# runs exit 66 (checked by hand). Exit 77 where the emulator is not built.
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
# the recvs ppsc posts, against the same program without the GPU-side posting
for s in 1f1b_v zb_v vocab_1f1b; do
  sizes=$MLP
  [ "$s" = vocab_1f1b ] && sizes=$GPT
  if ! { "$PPSC" emit-c "$top_srcdir/stdlib/$s.pps" -D P=4 -D m=8 -o "$WORK/$s.p.c" && cc_prog "$s.p"; }; then
    fail "$s: making the program"; continue
  fi
  grep -q 'RECV([A-Z]*,[0-9]*,[0-9]*,[0-9]*,1[23],' "$WORK/$s.p.c" || fail "$s P=4: ppsc posted no recv"
  env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" "$WORK/$s.p" $sizes --backend cuda --transport nccl --check \
    --iterations 2 --json > "$WORK/$s.p.json" 2>&1 || fail "$s P=4 NCCL mode without the posting"
  a=$(losses "$WORK/$s.p.json")
  for seed in 1 2 3; do
    expect_exit 0 "$s as emitted, NCCL mode with the posting, seed $seed" emu_run 4 $seed "$WORK/$s.p" $sizes
    b=$(losses "$WORK/out")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then pass "$s posted by ppsc, seed $seed: losses equal the unposted run's"
    else fail "$s posted by ppsc, seed $seed: losses '$b', unposted '$a'"; fi
  done
done
# hand-moved programs
for s in 1f1b zb_v dualpipe_v vocab_1f1b; do
  sizes=$MLP
  [ "$s" = vocab_1f1b ] && sizes=$GPT
  if ! { "$PPSC" emit-c "$top_srcdir/stdlib/$s.pps" -D P=4 -D m=8 -o "$WORK/$s.x.c" &&
         awk -v LIMIT=6 -f "$top_srcdir/tests/runtime/posted.awk" "$WORK/$s.x.c" > "$WORK/$s.y.c" &&
         cc_prog "$s.x" && cc_prog "$s.y"; }; then fail "$s: making the posted program"; continue; fi
  emu_run 4 1 "$WORK/$s.x" $sizes > "$WORK/$s.x.json" 2>&1 || fail "$s as emitted, NCCL mode"
  a=$(losses "$WORK/$s.x.json")
  [ "$s" = 1f1b ] && seeds= || seeds="1 2 3"   # see the header
  for seed in $seeds; do
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
