#!/bin/sh
# tests/gpu/dp_emu.sh: --data-parallel 2 on the CUDA backend without a GPU (the
# emulator, tests/gpu/emu, its race and deadlock detectors on): each stage's gradients
# all-reduced across its replicas on the backend's DP stream right after the stage's
# last W (runtime/replica.c), the optimizer after the compute stream waited for it.
# --check (one device at the global batch) passes at P=2:
#  - threads transport: 1F1B mlp, a V shape with two stages a device, gpt;
#  - NCCL transport in process: 4 emulated GPUs (NCCL mode: each device's replicas on a
#    communicator of their own, ncclCommInitAll; the emulator counts the NCCL operations
#    on the replica groups' streams), and one GPU (the copy channel);
#  - under mpirun -np 4 (one emulated GPU per process): the MPI transport, and the NCCL
#    transport (the replica communicators bootstrapped over MPI: ncclGetUniqueId on rank
#    0, MPI_Bcast, ncclCommInitRank);
#  - Vocab-2 (its collectives on the lanes, each replica's own view of them): threads,
#    and NCCL mode with the distributed optimizer;
#  - --tensor-parallel 2 (threads transport), alone and with 2 replicas and the
#    distributed optimizer; with --sequence-parallel on the V shape with 2 replicas;
#  - a rank failing under --data-parallel stops every rank (exit 1, no hang).
# Skipped (77) without the emulator; the MPI parts without MPI (said so).
. "$(dirname "$0")/../runtime/lib.sh"
need_emu
GPT=$EMU_GPT
build l2 "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build v2 "$top_srcdir/stdlib/1f1b_v.pps" -D P=2 -D m=4 || { fail "build 1f1b_v"; finish; }
emu() { seed=$1; shift; env PPS_EMU_SEED=$seed LD_PRELOAD="$EMU" "$@" --backend cuda; }

expect_exit 0 "1F1B P=2 --data-parallel 2 --check, threads" emu 1 "$WORK/l2" --transport threads --data-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "1F1B: check passes"
expect_exit 0 "V shape P=2 (two stages a device) --data-parallel 2 --check, threads" emu 2 "$WORK/v2" --transport threads --data-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "V shape: check passes"
expect_exit 0 "gpt 1F1B P=2 --data-parallel 2 --check, threads" emu 3 "$WORK/l2" $GPT --transport threads --data-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "gpt: check passes"
dpops() { sed -n 's/.*operations on data-parallel streams [0-9]* (NCCL \([0-9]*\)).*/\1/p' "$WORK/out"; }
expect_exit 0 "V shape P=2 --data-parallel 2 --check, NCCL transport on 4 emulated GPUs" \
  env PPS_EMU_STATS=1 PPSRT_EMU_GPUS=4 PPS_EMU_SEED=3 LD_PRELOAD="$EMU" "$WORK/v2" --backend cuda --transport nccl --data-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "NCCL: check passes"
# 2 iterations x 4 ranks x (2 stages x 2 tensors + the loss) all-reduces on the replica communicators
[ "$(dpops)" = 40 ] && pass "40 NCCL all-reduces on the replica groups' streams" || fail "NCCL operations on the replica groups' streams: '$(dpops)', expected 40"
expect_exit 0 "gpt 1F1B P=2 --data-parallel 2 --check, NCCL transport on 4 emulated GPUs" \
  env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" "$WORK/l2" $GPT --backend cuda --transport nccl --data-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "NCCL gpt: check passes"
expect_exit 0 "V shape P=2 --data-parallel 2 --check, NCCL transport's copy channel (one GPU)" emu 2 "$WORK/v2" --transport nccl --data-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "copy channel: check passes"
# a vocabulary-parallel schedule (Vocab-2, its collectives on the lanes: each replica's
# view of the lane's transport): threads, and NCCL mode on 4 emulated GPUs
if build vv "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4 -D mode=2; then
  expect_exit 0 "Vocab-2 P=2 --data-parallel 2 --check, threads" emu 2 "$WORK/vv" $GPT --transport threads --data-parallel 2 --check --iterations 2 --json
  grep -q '"collectives":"async"' "$WORK/out" && pass "Vocab-2 threads: on the collective lanes" || fail "Vocab-2 threads: not on the lanes"
  expect_exit 0 "Vocab-2 P=2 --data-parallel 2 --distributed-optimizer --check, NCCL transport on 4 emulated GPUs" \
    env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=3 LD_PRELOAD="$EMU" "$WORK/vv" $GPT --backend cuda --transport nccl --data-parallel 2 \
    --distributed-optimizer --optimizer adam --check --iterations 2 -q
  expect_grep "^check: passed" "Vocab-2 NCCL: check passes"
else fail "build vocab_1f1b"; fi
# --tensor-parallel 2 on the CUDA backend (bf16; the partial products summed in F32 over
# the group, threads transport), with --data-parallel 2 and the distributed optimizer
expect_exit 0 "gpt 1F1B P=2 --tensor-parallel 2 --check, threads" emu 3 "$WORK/l2" --model gpt --hidden 16 --heads 4 --query-groups 2 \
  --seq 4 --vocab 32 --transport threads --tensor-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "tensor parallel: check passes"
expect_exit 0 "gpt 1F1B P=2 --tensor-parallel 2 --data-parallel 2 --distributed-optimizer --check, threads" emu 1 "$WORK/l2" --model gpt \
  --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --transport threads --tensor-parallel 2 --data-parallel 2 \
  --distributed-optimizer --optimizer adam --check --iterations 2 -q
expect_grep "^check: passed" "tensor x data parallel: check passes"
# --sequence-parallel (the all-gathers and reduce-scatters of device buffers, staged by
# the threads transport), on the V shape (two stages a device) with 2 replicas
expect_exit 0 "gpt V shape P=2 --tensor-parallel 2 --sequence-parallel --data-parallel 2 --check, threads" emu 2 "$WORK/v2" --model gpt \
  --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --transport threads --tensor-parallel 2 --sequence-parallel \
  --data-parallel 2 --optimizer adam --check --iterations 2 -q
expect_grep "^check: passed" "sequence parallel: check passes"
expect_exit 1 "a rank failing under --data-parallel 2 stops the run (NCCL)" \
  env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" timeout 90 "$WORK/v2" --backend cuda --transport nccl --data-parallel 2 --iterations 2 -q --die-at 1:3 --timeout 30
expect_grep "injected failure" "the failing rank says why"
# (--die-at 1:3 fails device 1 of both replicas: the second may fail on its own or be
# stopped by the first's abort)
expect_grep "[23] other device(s) stopped because of it" "NCCL: the ranks stopped by the abort are counted, not each reported"

if have_mpi; then
  export TMPDIR="$WORK"
  expect_exit 0 "V shape P=2 --data-parallel 2 --check, mpirun -np 4, MPI transport" \
    mpirun_np 4 env LD_PRELOAD="$EMU" PPS_EMU_SEED=1 "$WORK/v2" --backend cuda --transport mpi --data-parallel 2 --check --iterations 2 -q
  expect_grep "^check: passed" "MPI: check passes"
  expect_exit 0 "V shape P=2 --data-parallel 2 --check, mpirun -np 4, NCCL transport over MPI" \
    mpirun_np 4 env LD_PRELOAD="$EMU" PPS_EMU_SEED=2 "$WORK/v2" --backend cuda --transport nccl --data-parallel 2 --check --iterations 2 -q
  expect_grep "^check: passed" "NCCL over MPI: check passes"
else
  echo "skip: the MPI part (no MPI in this build)"
fi
finish
