#!/bin/sh
# tests/gpu/e2e.sh: schedules built with `ppsc build` and run on the GPU with --check
# (loss and every weight gradient against a single-device run; measured peak memory
# against ppsc's prediction): the stdlib and example schedules at P = 2, 3, 4 ranks on
# the NCCL transport (ranks as threads; on fewer GPUs than ranks, the device-copy
# channel), the threads transport with the CUDA backend, a full-offload policy, the
# gpt model (vocabulary-parallel schedules with it only), and --data-parallel 2 with and
# without --distributed-optimizer (the same losses), also with Vocab-2, and
# --tensor-parallel 2 on the threads and NCCL transports, also with
# --sequence-parallel, and Llama's layer (--arch llama: RMS norms, RoPE, SwiGLU; alone,
# on a V shape, at T = 2 with --sequence-parallel), --context-parallel 2 (alone and with
# T = 2 + SP), experts (--num-experts 4, alone, at T = 2 + SP, and over 2 replicas with
# --expert-parallel 2), Vocab-1 at T = 2 (vocabulary rows split over the tensor ranks)
# and validation through the pipeline (--split, --eval-iters) (these never run on a GPU yet). Every schedule is expected
# valid at every P (a literal one runs once): one that ppsc check rejects fails. Skipped
# (77) when no GPU is visible; a failing `cuda_kernels --count` is an error.
. "$(dirname "$0")/../runtime/lib.sh"
# a count that errors is an error (a broken driver is not "no GPU")
ngpu=$("$top_builddir/tests/gpu/cuda_kernels" --count) || { echo "FAIL: tests/gpu/cuda_kernels --count failed" >&2; exit 1; }
if [ "${ngpu:-0}" -eq 0 ]; then echo "skip: no CUDA device visible"; exit 77; fi
SIZES="--hidden 64 --seq 16 --micro-batch 2 --iterations 2 -q"
# vocabulary-parallel schedules run the gpt (the mlp has no vocabulary layers)
GPTV="--model gpt --hidden 64 --heads 4 --query-groups 2 --seq 16 --micro-batch 2 --vocab 256 --iterations 2 -q"
transports=threads
grep -q "HAVE_NCCL 1" "$top_builddir/config.h" && transports="nccl threads"
# schedules written for one size only (no P/m parameters): run once, as written
LITERAL="zb_h1_literal"
n=0 nwant=0
for f in $(ls "$top_srcdir"/stdlib/*.pps "$top_srcdir"/examples/*.pps 2>/dev/null); do
  base=$(basename "$f" .pps)
  flags=$SIZES
  grep -q "vocab parallel" "$f" && flags=$GPTV
  for P in 2 3 4; do
    m=$((2 * P))
    name=${base}_P${P} defs="-D P=$P -D m=$m"
    # every schedule is expected valid at every size, except the literal ones
    case " $LITERAL " in
      *" $base "*) [ $P = 2 ] || continue; name=$base defs= ;;
    esac
    nwant=$((nwant + $(echo $transports | wc -w)))
    if ! "$PPSC" check "$f" $defs -q > /dev/null 2>&1; then
      fail "$name: ppsc check rejects it (expected valid)"; continue
    fi
    if ! build "$name" "$f" $defs; then fail "build $name"; continue; fi
    for tr in $transports; do
      expect_exit 0 "$name cuda/$tr --check" "$WORK/$name" --backend cuda --transport $tr --check $flags
      n=$((n + 1))
    done
  done
done
[ $n -eq $nwant ] && pass "$n schedule runs on the GPU, as expected" || fail "$n schedule runs on the GPU, expected $nwant"

# full offload: every activation to pinned host memory after F, back before B
sed 's/cost TF = 1, TB = 1, TW = 1, TC = 0;/cost TF = 1, TB = 1, TW = 1, TC = 0; offload ratio 1;/' \
  "$top_srcdir/examples/1f1b.pps" > "$WORK/off.pps"
if build off "$WORK/off.pps" -D P=3 -D m=6; then
  expect_exit 0 "1f1b full offload cuda --check" "$WORK/off" --backend cuda --check $SIZES
else fail "build offload"; fi

# the gpt model (grouped query attention, vocabulary layers) where it is implemented
if build g "$top_srcdir/examples/1f1b.pps" -D P=2 -D m=4; then
  expect_exit 0 "gpt 1f1b cuda --check" "$WORK/g" --backend cuda --model gpt --check --hidden 128 --heads 4 \
    --query-groups 2 --seq 32 --vocab 512 -q
else fail "build gpt 1f1b"; fi

# --data-parallel 2 at P = 2 (4 ranks; on fewer GPUs the replica groups share them),
# plain and with --distributed-optimizer (ncclReduceScatter/ncclAllGather on NCCL):
# --check on both, and the same losses (2 replicas: each sum has two terms, in either
# order the same bits; 1e-6 relative allows another reduction order all the same)
if build dp "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4; then
  DPG="--backend cuda --model gpt --hidden 128 --heads 4 --query-groups 2 --seq 32 --vocab 512 --optimizer adam --lr 0.01 --data-parallel 2"
  for tr in $transports; do
    for f in "" --distributed-optimizer; do
      expect_exit 0 "gpt 1f1b --data-parallel 2 $f cuda/$tr --check" "$WORK/dp" $DPG --transport $tr $f --check -q
      "$WORK/dp" $DPG --transport $tr $f --iterations 3 --json -q > "$WORK/dp$tr$f.json" 2>"$WORK/err" || fail "gpt dp $tr $f: 3 iterations"
    done
    a=$(grep -o '"loss":[-0-9.e+]*' "$WORK/dp$tr.json" | tr '\n' ' '); b=$(grep -o '"loss":[-0-9.e+]*' "$WORK/dp$tr--distributed-optimizer.json" | tr '\n' ' ')
    if [ -n "$a" ] && python3 -c "
import sys
a, b = [[float(x.split(':')[1]) for x in s.split()] for s in sys.argv[1:3]]
assert len(a) == len(b) == 3 and all(abs(x - y) <= 1e-6 * abs(y) for x, y in zip(a, b)), (a, b)" "$a" "$b"
    then pass "cuda/$tr: --distributed-optimizer losses = plain data-parallel: $b"
    else fail "cuda/$tr: --distributed-optimizer '$b' vs plain '$a'"; fi
  done
else fail "build 1f1b for --data-parallel"; fi
# a vocabulary-parallel schedule with --data-parallel 2 ($DPG above; each replica's collectives on its
# view of the lane; the devices' vocabulary rows averaged at the iteration's end)
if build vdp "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4 -D mode=2; then
  for tr in $transports; do
    expect_exit 0 "gpt Vocab-2 --data-parallel 2 cuda/$tr --check" "$WORK/vdp" $DPG --transport $tr --check -q
  done
else fail "build vocab_1f1b for --data-parallel"; fi
# --tensor-parallel 2, alone, with 2 replicas and the distributed optimizer, and with
# --sequence-parallel, on the threads and NCCL transports (NCCL: the groups' own
# communicators, or on fewer GPUs than ranks the copy channel)
if build tpg "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4; then
  TPG="--backend cuda --model gpt --hidden 128 --heads 4 --query-groups 2 --seq 32 --vocab 512 --optimizer adam"
  for tr in threads nccl; do
    expect_exit 0 "gpt 1f1b --tensor-parallel 2 cuda/$tr --check" "$WORK/tpg" $TPG --transport $tr --tensor-parallel 2 --check -q
    expect_exit 0 "gpt 1f1b --tensor-parallel 2 --data-parallel 2 --distributed-optimizer cuda/$tr --check" "$WORK/tpg" $TPG \
      --transport $tr --tensor-parallel 2 --data-parallel 2 --distributed-optimizer --check -q
    expect_exit 0 "gpt 1f1b --tensor-parallel 2 --sequence-parallel cuda/$tr --check" "$WORK/tpg" $TPG --transport $tr \
      --tensor-parallel 2 --sequence-parallel --check -q
  done
  # --context-parallel 2 (the cuBLAS attention over query blocks at offsets, the groups'
  # all-gathers and reduce-scatters), alone and with T = 2 --sequence-parallel
  for tr in threads nccl; do
    expect_exit 0 "gpt 1f1b --context-parallel 2 cuda/$tr --check" "$WORK/tpg" $TPG --transport $tr --context-parallel 2 --check -q
    expect_exit 0 "gpt 1f1b --context-parallel 2 --tensor-parallel 2 --sequence-parallel cuda/$tr --check" "$WORK/tpg" $TPG \
      --transport $tr --context-parallel 2 --tensor-parallel 2 --sequence-parallel --check -q
  done
else fail "build 1f1b for --tensor-parallel"; fi
# Llama's layer (the RMS norm, RoPE and SwiGLU kernels in whole schedules): 1F1B, ZB-V,
# and 1F1B at T = 2 with --sequence-parallel, on the NCCL transport where it is built
LL="--backend cuda --model gpt --arch llama --hidden 128 --heads 4 --query-groups 2 --seq 32 --vocab 512 --optimizer adam"
tr=threads; grep -q "HAVE_NCCL 1" "$top_builddir/config.h" && tr=nccl
for s in 1f1b zb_v; do
  if build "ll_$s" "$top_srcdir/stdlib/$s.pps" -D P=2 -D m=4; then
    expect_exit 0 "gpt --arch llama $s cuda/$tr --check" "$WORK/ll_$s" $LL --transport $tr --check -q
  else fail "build $s for --arch llama"; fi
done
[ -x "$WORK/ll_1f1b" ] && expect_exit 0 "gpt --arch llama 1f1b --tensor-parallel 2 --sequence-parallel cuda/$tr --check" \
  "$WORK/ll_1f1b" $LL --transport $tr --tensor-parallel 2 --sequence-parallel --check -q
# mixture-of-experts layers (the moe_* kernels, the routing's host copy per layer):
# Llama's layer with 4 experts, top 2, on 1F1B and ZB-V, and at T = 2 with
# --sequence-parallel (expert tensor parallel: the experts' partial sums all-reduced)
MOE="--num-experts 4 --moe-topk 2 --moe-aux-loss-coeff 0.01"
for s in 1f1b zb_v; do
  [ -x "$WORK/ll_$s" ] && expect_exit 0 "gpt --arch llama $MOE $s cuda/$tr --check" "$WORK/ll_$s" $LL $MOE --transport $tr --check -q
done
[ -x "$WORK/ll_1f1b" ] && expect_exit 0 "gpt --arch llama $MOE 1f1b --tensor-parallel 2 --sequence-parallel cuda/$tr --check" \
  "$WORK/ll_1f1b" $LL $MOE --transport $tr --tensor-parallel 2 --sequence-parallel --check -q
# expert parallelism (the experts of each layer over 2 replicas: the EP group's
# all-gathers and reduce-scatters, the experts' own gradient buffers)
[ -x "$WORK/ll_1f1b" ] && expect_exit 0 "gpt --arch llama $MOE 1f1b --data-parallel 2 --expert-parallel 2 cuda/$tr --check" \
  "$WORK/ll_1f1b" $LL $MOE --transport $tr --data-parallel 2 --expert-parallel 2 --check -q
# Vocab-1 at T = 2: each device's vocabulary rows split over its tensor ranks
if build vtp "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4 -D mode=1; then
  expect_exit 0 "gpt Vocab-1 --tensor-parallel 2 cuda/$tr --check" "$WORK/vtp" $LL --transport $tr --tensor-parallel 2 --check -q
else fail "build vocab_1f1b for --tensor-parallel"; fi
# validation through the pipeline (forward-only passes, --eval-iters) on --split's part
[ -x "$WORK/ll_1f1b" ] && expect_exit 0 "gpt --arch llama 1f1b --split 90,10 --eval-iters 2 cuda/$tr --check" \
  "$WORK/ll_1f1b" $LL --transport $tr --data "$top_srcdir/README.md" --split 90,10 --val-every 1 --eval-iters 2 --check -q
finish
