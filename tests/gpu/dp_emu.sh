#!/bin/sh
# tests/gpu/dp_emu.sh: --data-parallel 2 on the CUDA backend without a GPU (the
# emulator, tests/gpu/emu, its race and deadlock detectors on): each stage's gradients
# all-reduced across its replicas on the backend's DP stream right after the stage's
# last W (runtime/replica.c), the optimizer after the compute stream waited for it.
# --check (one device at the global batch) passes at P=2:
#  - threads transport: 1F1B mlp, a V shape with two stages a device, gpt;
#  - NCCL transport in process: 4 emulated GPUs (NCCL mode: each device's replicas on a
#    communicator of their own, ncclCommInitAll; the emulator counts the NCCL operations
#    on the replica groups' streams: one all-reduce a stage, and with the distributed
#    optimizer one reduce-scatter and one all-gather a stage: the all-gathers on the DP
#    stream overlap the next iteration, and the race detector fails a stage's first
#    pass that does not wait for its stage's), and one GPU (the copy channel);
#  - under mpirun -np 4 (one emulated GPU per process): the MPI transport, and the NCCL
#    transport (the replica communicators bootstrapped over MPI: ncclGetUniqueId on rank
#    0, MPI_Bcast, ncclCommInitRank);
#  - Vocab-2 (its collectives on the lanes, each replica's own view of them): threads,
#    and NCCL mode with the distributed optimizer, where the emulator counts them on the
#    pipelines' own communicators and on the world's only --check's sum (one a rank);
#    with --tensor-parallel 2 (threads, NCCL, NCCL with --sequence-parallel, NCCL over
#    MPI) and 4 (NCCL), each
#    device's vocabulary rows split over its tensor ranks;
#  - --tensor-parallel 2 (threads transport), alone and with 2 replicas and the
#    distributed optimizer; with --sequence-parallel on the V shape with 2 replicas,
#    and on NCCL on 4 GPUs; on the NCCL transport (its groups' communicators: the
#    emulator counts their all-reduces), on 4 GPUs, on one (the copy channel), with 2
#    replicas on 8, and under mpirun -np 8 (P 2 x D 2 x T 2); checkpoints gathered over
#    the NCCL groups; --val-data; one tensor rank failing alone stops the run at once;
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
# 2 iterations x 4 ranks x (2 stages, each one all-reduce of its gradient buffer, + the
# loss) all-reduces on the replica communicators (one per tensor before the flat buffers:
# 2 x 4 x (2 x 2 + 1) = 40)
[ "$(dpops)" = 24 ] && pass "24 NCCL all-reduces on the replica groups' streams" || fail "NCCL operations on the replica groups' streams: '$(dpops)', expected 24"
expect_exit 0 "gpt 1F1B P=2 --data-parallel 2 --check, NCCL transport on 4 emulated GPUs" \
  env PPS_EMU_STATS=1 PPSRT_EMU_GPUS=4 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" "$WORK/l2" $GPT --backend cuda --transport nccl --data-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "NCCL gpt: check passes"
# the gpt's 14 or 15 tensors a stage (12 of its layer, the embeddings, or the output
# layer and final norm) in one buffer: 2 iterations x 4 ranks x (1 stage + the loss)
[ "$(dpops)" = 16 ] && pass "gpt: 16 NCCL all-reduces on the replica groups' streams (a stage's gradients in one)" ||
  fail "gpt: NCCL operations on the replica groups' streams: '$(dpops)', expected 16"
expect_exit 0 "gpt 1F1B P=2 --data-parallel 2 --distributed-optimizer --check, NCCL transport on 4 emulated GPUs" \
  env PPS_EMU_STATS=1 PPSRT_EMU_GPUS=4 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" "$WORK/l2" $GPT --backend cuda --transport nccl --data-parallel 2 \
  --distributed-optimizer --optimizer adam --check --iterations 2 -q
expect_grep "^check: passed" "NCCL gpt, distributed optimizer: check passes"
# the distributed optimizer on the stage's flat buffers: 2 iterations x 4 ranks x (1
# reduce-scatter of the stage's gradients + 1 all-gather of its weights + the loss) =
# 24 (one of each per tensor, 14 or 15 a stage, before the flat buffers: 240)
[ "$(dpops)" = 24 ] && pass "gpt, distributed optimizer: 24 NCCL operations on the replica groups' streams (one reduce-scatter and one all-gather a stage)" ||
  fail "gpt, distributed optimizer: NCCL operations on the replica groups' streams: '$(dpops)', expected 24"
expect_exit 0 "V shape P=2 --data-parallel 2 --check, NCCL transport's copy channel (one GPU)" emu 2 "$WORK/v2" --transport nccl --data-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "copy channel: check passes"
# a vocabulary-parallel schedule (Vocab-2, its collectives on the lanes: each replica's
# view of the lane's transport): threads, and NCCL mode on 4 emulated GPUs
if build vv "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4 -D mode=2; then
  expect_exit 0 "Vocab-2 P=2 --data-parallel 2 --check, threads" emu 2 "$WORK/vv" $GPT --transport threads --data-parallel 2 --check --iterations 2 --json
  grep -q '"collectives":"async"' "$WORK/out" && pass "Vocab-2 threads: on the collective lanes" || fail "Vocab-2 threads: not on the lanes"
  expect_exit 0 "Vocab-2 P=2 --data-parallel 2 --distributed-optimizer --check, NCCL transport on 4 emulated GPUs" \
    env PPS_EMU_STATS=1 PPSRT_EMU_GPUS=4 PPS_EMU_SEED=3 LD_PRELOAD="$EMU" "$WORK/vv" $GPT --backend cuda --transport nccl --data-parallel 2 \
    --distributed-optimizer --optimizer adam --check --iterations 2 -q
  expect_grep "^check: passed" "Vocab-2 NCCL: check passes"
  # each replica's vocabulary collectives (and the run's statistics) on its pipeline's
  # own communicators, not a host-staged world all-reduce of both replicas' slots: the
  # world's only --check's sum of every rank's mismatches (interp.c), one a rank (4)
  pp=$(sed -n 's/.*NCCL operations on pipeline-group streams \([0-9]*\).*/\1/p' "$WORK/out")
  wc=$(sed -n 's/.*NCCL operations on world collectives streams \([0-9]*\).*/\1/p' "$WORK/out")
  [ "${pp:-0}" -gt 0 ] && [ "$wc" = 4 ] && pass "Vocab-2 NCCL: $pp collectives on the pipelines' communicators, --check's 4 on the world's" ||
    fail "Vocab-2 NCCL: '$pp' collectives on the pipelines' communicators, '$wc' on the world's (expected some and 4)"
  expect_exit 0 "Vocab-2 P=2 --tensor-parallel 2 --check, NCCL on 4 emulated GPUs (the lanes' views per tensor rank)" \
    env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=3 LD_PRELOAD="$EMU" "$WORK/vv" --model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --backend cuda --transport nccl --tensor-parallel 2 \
    --check --iterations 2 --json
  grep -q '"collectives":"async"' "$WORK/out" && pass "Vocab-2 T = 2 NCCL: on the collective lanes" || fail "Vocab-2 T = 2 NCCL: not on the lanes"
  expect_exit 0 "Vocab-2 P=2 --tensor-parallel 2 --sequence-parallel --check, NCCL on 4 emulated GPUs" \
    env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=2 LD_PRELOAD="$EMU" "$WORK/vv" --model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 \
    --vocab 32 --backend cuda --transport nccl --tensor-parallel 2 --sequence-parallel --check --iterations 2 -q
  expect_grep "^check: passed" "Vocab-2 sequence parallel NCCL: check passes"
  # each device's V/P vocabulary rows split over its tensor ranks (the group's sums in
  # IF, S and T on the device's thread): threads, and T = 4 on NCCL on 8 emulated GPUs
  VG="--model gpt --hidden 16 --heads 4 --query-groups 4 --seq 4 --vocab 32"
  expect_exit 0 "Vocab-2 P=2 --tensor-parallel 2 --check, threads" emu 1 "$WORK/vv" $VG --transport threads --tensor-parallel 2 \
    --check --iterations 2 -q
  expect_grep "^check: passed" "Vocab-2 T = 2 threads: check passes"
  expect_exit 0 "Vocab-2 P=2 --tensor-parallel 4 --check, NCCL on 8 emulated GPUs" \
    env PPSRT_EMU_GPUS=8 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" "$WORK/vv" $VG --backend cuda --transport nccl --tensor-parallel 4 \
    --check --iterations 2 -q
  expect_grep "^check: passed" "Vocab-2 T = 4 NCCL: check passes"
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
# --tensor-parallel on the NCCL transport: each (replica, device)'s T ranks on a
# communicator of their own (ppsrt_nccl_transport_group)
TPG="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32"
tpops() { sed -n 's/.*NCCL operations on tensor-parallel streams \([0-9]*\).*/\1/p' "$WORK/out"; }
expect_exit 0 "gpt 1F1B P=2 --tensor-parallel 2 --check, NCCL transport on 4 emulated GPUs" \
  env PPS_EMU_STATS=1 PPSRT_EMU_GPUS=4 PPS_EMU_SEED=2 LD_PRELOAD="$EMU" "$WORK/l2" $TPG --backend cuda --transport nccl \
  --tensor-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "tensor parallel NCCL: check passes"
# 4 ranks x 2 iterations x 4 microbatches x (2 in F + 2 in B) on the one layer of their
# stage; device 0's 2 ranks x 8 F passes x the embeddings' sum, device 1's 2 ranks x 8
# x 3 for the output layer (the softmax's maxima, its sums and target logits in F, the
# input gradient in B) (--check's count of mismatches is summed over the world, not here):
# 128 + 16 + 48
[ "$(tpops)" = 192 ] && pass "192 NCCL all-reduces on the tensor-parallel groups' streams" || fail "NCCL operations on the tensor-parallel groups' streams: '$(tpops)', expected 192"
expect_exit 0 "gpt 1F1B P=2 --tensor-parallel 2 --check, NCCL transport's copy channel (one GPU)" emu 1 "$WORK/l2" $TPG \
  --transport nccl --tensor-parallel 2 --check --iterations 2 -q
expect_grep "^check: passed" "tensor parallel, copy channel: check passes"
expect_exit 0 "gpt 1F1B P=2 --tensor-parallel 2 --data-parallel 2 --distributed-optimizer --check, NCCL on 8 emulated GPUs" \
  env PPSRT_EMU_GPUS=8 PPS_EMU_SEED=3 LD_PRELOAD="$EMU" "$WORK/l2" $TPG --backend cuda --transport nccl --tensor-parallel 2 \
  --data-parallel 2 --distributed-optimizer --optimizer adam --check --iterations 2 -q
expect_grep "^check: passed" "tensor x data parallel NCCL: check passes"
# checkpoints at T = 2: tensor rank 0 writes what the NCCL group gathers (through
# device memory), the same tensors, bit for bit, as the threads transport's gather
# (two partial sums add the same in either order); it resumes at T = 1
for tr in threads nccl; do
  expect_exit 0 "gpt --tensor-parallel 2 --save, $tr transport on 4 emulated GPUs" env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" \
    "$WORK/l2" $TPG --optimizer sgd --backend cuda --transport $tr --tensor-parallel 2 --iterations 2 -q --save "$WORK/ck_$tr"
done
PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK" <<'PY' && pass "NCCL T = 2 checkpoint: the threads transport's tensors, bit for bit" || fail "NCCL T = 2 checkpoint differs from the threads transport's"
import sys
from ckpt_tensors import load
a, b = load(sys.argv[1] + "/ck_threads", raw=True), load(sys.argv[1] + "/ck_nccl", raw=True)
assert sorted(a) == sorted(b) and len(a) > 20 and all(a[k] == b[k] for k in a), [k for k in a if a.get(k) != b.get(k)]
PY
expect_exit 0 "the NCCL T = 2 checkpoint resumes at T = 1 on NCCL" env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" \
  "$WORK/l2" $TPG --optimizer sgd --backend cuda --transport nccl --iterations 1 -q --load "$WORK/ck_nccl"
# --val-data: the groups' slices summed on the NCCL groups; the loss is T = 1's within
# bf16's rounding (the same weights; products summed in another order)
VD="--iterations 3 --data $top_srcdir/README.md --val-data $top_srcdir/docs/ppsc.1 --val-every 3"
for t in 1 2; do
  expect_exit 0 "gpt --val-data --tensor-parallel $t, NCCL on 4 emulated GPUs" env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=2 LD_PRELOAD="$EMU" \
    "$WORK/l2" --model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 256 --backend cuda --transport nccl --tensor-parallel $t $VD
  sed -n 's/^val .* loss \([-0-9.e+]*\) .*/\1/p' "$WORK/out" > "$WORK/val$t"
done
python3 -c "
import sys
a, b = float(open(sys.argv[1]).read()), float(open(sys.argv[2]).read())
assert abs(a - b) <= 0.01 * abs(a), (a, b)" "$WORK/val1" "$WORK/val2" 2>/dev/null \
  && pass "NCCL --val-data: T = 2's loss $(cat "$WORK/val2") is T = 1's $(cat "$WORK/val1") within 1%" \
  || fail "NCCL --val-data: T = 1 '$(cat "$WORK/val1")', T = 2 '$(cat "$WORK/val2")'"
expect_exit 1 "one tensor rank failing alone stops the run (NCCL)" env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" timeout 90 \
  "$WORK/l2" $TPG --backend cuda --transport nccl --tensor-parallel 2 --iterations 2 -q --die-at 1:2:1 --timeout 30
expect_grep "device 1 (tensor rank 1): .*injected failure (--die-at 1:2:1)" "NCCL: the failing rank is named"
grep -q "waited\|timed out" "$WORK/out" && fail "NCCL: a rank waited for --timeout" || pass "NCCL: no rank waited for --timeout"
# --sequence-parallel (the all-gathers and reduce-scatters of device buffers, staged by
# the threads transport), on the V shape (two stages a device) with 2 replicas
expect_exit 0 "gpt V shape P=2 --tensor-parallel 2 --sequence-parallel --data-parallel 2 --check, threads" emu 2 "$WORK/v2" --model gpt \
  --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --transport threads --tensor-parallel 2 --sequence-parallel \
  --data-parallel 2 --optimizer adam --check --iterations 2 -q
expect_grep "^check: passed" "sequence parallel: check passes"
expect_exit 0 "gpt V shape P=2 --tensor-parallel 2 --sequence-parallel --check, NCCL on 4 emulated GPUs" \
  env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" "$WORK/v2" --model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 \
  --vocab 32 --backend cuda --transport nccl --tensor-parallel 2 --sequence-parallel --optimizer adam --check --iterations 2 -q
expect_grep "^check: passed" "sequence parallel NCCL: check passes"
expect_exit 1 "a rank failing under --data-parallel 2 stops the run (NCCL)" \
  env PPSRT_EMU_GPUS=4 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" timeout 90 "$WORK/v2" --backend cuda --transport nccl --data-parallel 2 --iterations 2 -q --die-at 1:3 --timeout 30
expect_grep "injected failure" "the failing rank says why"
# (--die-at 1:3 fails device 1 of both replicas: the second may fail on its own or be
# stopped by the first's abort)
expect_grep "[23] other rank(s) stopped because of it" "NCCL: the ranks stopped by the abort are counted, not each reported"

if have_mpi; then
  export TMPDIR="$WORK"
  expect_exit 0 "V shape P=2 --data-parallel 2 --check, mpirun -np 4, MPI transport" \
    mpirun_np 4 env LD_PRELOAD="$EMU" PPS_EMU_SEED=1 "$WORK/v2" --backend cuda --transport mpi --data-parallel 2 --check --iterations 2 -q
  expect_grep "^check: passed" "MPI: check passes"
  expect_exit 0 "V shape P=2 --data-parallel 2 --check, mpirun -np 4, NCCL transport over MPI" \
    mpirun_np 4 env LD_PRELOAD="$EMU" PPS_EMU_SEED=2 "$WORK/v2" --backend cuda --transport nccl --data-parallel 2 --check --iterations 2 -q
  expect_grep "^check: passed" "NCCL over MPI: check passes"
  expect_exit 0 "gpt P=2 --tensor-parallel 2 --data-parallel 2 --distributed-optimizer --check, mpirun -np 8, NCCL over MPI" \
    mpirun_np 8 env LD_PRELOAD="$EMU" PPS_EMU_SEED=2 "$WORK/l2" $TPG --backend cuda --transport nccl --tensor-parallel 2 \
    --data-parallel 2 --distributed-optimizer --optimizer adam --check --iterations 2 -q
  expect_grep "^check: passed" "tensor x data parallel, NCCL over MPI: check passes"
  expect_exit 0 "Vocab-2 P=2 --tensor-parallel 2 --check, mpirun -np 4, NCCL over MPI (each device's rows split)" \
    mpirun_np 4 env LD_PRELOAD="$EMU" PPS_EMU_SEED=2 "$WORK/vv" --model gpt --hidden 16 --heads 4 --query-groups 4 --seq 4 \
    --vocab 32 --backend cuda --transport nccl --tensor-parallel 2 --check --iterations 2 -q
  expect_grep "^check: passed" "vocabulary x tensor parallel, NCCL over MPI: check passes"
else
  echo "skip: the MPI part (no MPI in this build)"
fi
finish
