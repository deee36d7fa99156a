#!/bin/sh
# tests/gpu/ckpt_emu.sh: checkpoints, validation and clipping on the CUDA backend with
# the NCCL transport, without a GPU (the emulator, tests/gpu/emu): 1F1B at P=4 on 4
# emulated GPUs in one process saves with --val-data and --clip-grad, GPipe at P=2 (2
# layers per stage) loads it and its losses are the uninterrupted run's (weights, master
# weights and Adam moments restored); the checkpoint
# loads on the CPU backend too (within 1e-3: other kernels); the NCCL transport
# bootstrapped over MPI (mpirun -np 1, the emulator's NCCL being in-process) saves,
# validates and resumes. Skipped (77) without the emulator.
. "$(dirname "$0")/../runtime/lib.sh"
need_emu
cat "$top_srcdir"/docs/*.md >"$WORK/text.txt"
GPT="--model gpt --vocab 256 --seq 16 --hidden 16 --heads 2 --optimizer adam --lr 0.01 --data $WORK/text.txt --clip-grad 0.5"
loss() { sed -n "s/^iter $1\/[0-9]*  loss \([-0-9.]*\).*/\1/p" "$2"; }
build p4 "$top_srcdir/stdlib/1f1b.pps" -D P=4 -D m=4 || { fail "build 1f1b"; finish; }
build g2 "$top_srcdir/stdlib/gpipe.pps" -D P=2 -D m=4 || { fail "build gpipe"; finish; }
nccl() { gpus=$1; seed=$2; shift 2; env PPSRT_EMU_GPUS=$gpus PPS_EMU_SEED=$seed LD_PRELOAD="$EMU" "$@" --backend cuda --transport nccl; }

nccl 4 1 "$WORK/p4" $GPT --layers-per-stage 1 --iterations 4 >"$WORK/ref" 2>&1 || { fail "uninterrupted run"; tail -5 "$WORK/ref" >&2; }
expect_exit 0 "NCCL P=4: --save --val-data --clip-grad" nccl 4 2 "$WORK/p4" $GPT --layers-per-stage 1 --iterations 2 \
  --save "$WORK/ck" --val-data "$WORK/text.txt"
expect_grep "^saved $WORK/ck (step 2, 4 shards)" "4 shards saved"
expect_grep "^val  2/2  loss [0-9]" "validation on the NCCL transport"
expect_exit 0 "NCCL GPipe P=2 loads it" nccl 2 3 "$WORK/g2" $GPT --layers-per-stage 2 --iterations 2 --load "$WORK/ck"
a="$(loss 3 "$WORK/ref") $(loss 4 "$WORK/ref")"; b="$(loss 3 "$WORK/out") $(loss 4 "$WORK/out")"
[ "$a" != " " ] && [ "$a" = "$b" ] && pass "resumed at P=2: iterations 3, 4 losses $b = uninterrupted" || fail "resumed '$b', uninterrupted '$a'"
a=$(loss 3 "$WORK/ref")
expect_exit 0 "the CPU backend loads it" "$WORK/g2" $GPT --layers-per-stage 2 --iterations 1 --load "$WORK/ck"
c=$(loss 3 "$WORK/out")
[ -n "$c" ] && [ -n "$a" ] && awk "BEGIN { d = $a - $c; exit !(d < 1e-3 && d > -1e-3) }" && pass "CPU: iteration 3 loss $c (emulated GPU $a)" \
  || fail "CPU loss '$c' vs '$a'"
if have_mpi; then
  cat >"$WORK/one.pps" <<'EOF'
schedule one {
  devices 1; microbatches 2; placement linear;
  device 0 { F(0) F(1) BW(0) BW(1) }
}
EOF
  if build one "$WORK/one.pps"; then
    MPI1="timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=$MPI_ASAN:verify_asan_link_order=0 $MPIRUN --oversubscribe -np 1"
    G1="$GPT --layers-per-stage 2"
    env LD_PRELOAD="$EMU" PPS_EMU_SEED=1 "$WORK/one" --backend cuda $G1 --iterations 3 >"$WORK/ref1" 2>&1 || fail "one: reference"
    expect_exit 0 "NCCL over MPI (-np 1): --save --val-data" $MPI1 env LD_PRELOAD="$EMU" PPS_EMU_SEED=2 "$WORK/one" \
      --backend cuda --transport nccl $G1 --iterations 2 --save "$WORK/c1" --val-data "$WORK/text.txt"
    expect_grep "^saved $WORK/c1 (step 2, 1 shard)" "1 shard saved"
    expect_exit 0 "NCCL over MPI (-np 1): --load" $MPI1 env LD_PRELOAD="$EMU" PPS_EMU_SEED=3 "$WORK/one" \
      --backend cuda --transport nccl $G1 --iterations 1 --load "$WORK/c1"
    a=$(loss 3 "$WORK/ref1"); b=$(loss 3 "$WORK/out")
    [ -n "$a" ] && [ "$a" = "$b" ] && pass "NCCL over MPI resumes: iteration 3 loss $b = uninterrupted" || fail "NCCL over MPI: '$b' vs '$a'"
  else fail "build one.pps"; fi
else skip "NCCL over MPI (no MPI)"; fi
finish
