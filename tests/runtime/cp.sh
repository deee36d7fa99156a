#!/bin/sh
# cp.sh: --context-parallel C (runtime/cp.c, Megatron-LM's context parallelism with
# --cp-comm-type all_gather): each sequence in 2C chunks, rank c holding chunks c and
# 2C-1-c, the keys and values all-gathered in attention and their gradients
# reduce-scattered, the weight gradients summed over D x C ranks. Against independent
# figures:
#  - the losses of a gpt and of a llama config (RoPE at global positions, GQA, SwiGLU,
#    RMS norm) at C = 2 and 4 equal C = 1's within 1e-6 relative (1F1B, Adam), and
#    --check (one whole-sequence device: the C = 1 computation, check.c) passes at
#    C = 2 and 4, and under mpirun -np 4 (P 2 x C 2);
#  - device 0's peak activation bytes at C = 2 are half of C = 1's (only the local
#    tokens' activations, K and V included, are kept); its FLOPs those of its tokens
#    and of its two query chunks against the keys they see (computed here);
#  - with --tensor-parallel 2 --sequence-parallel, with --data-parallel 2 and the
#    distributed optimizer (sharded over D x C = 4), on ZB-V (a V shape, B and W apart),
#    V-Half with vocabulary parallelism (async), PipeOffload and tied embeddings: the
#    C = 1 losses and --check passes;
#  - --data (a file's sequences) and --val-data give C = 1's training and validation
#    losses;
#  - a checkpoint saved at C = 2 resumes at C = 1 (and one of C = 1 at C = 4) with the
#    uninterrupted run's next losses; the JSON layout counts the ranks;
#  - --micro-batch 3 (each sequence its own chunks) gives C = 1's losses at C = 4 and passes
#    --check at C = 2 x T = 2 + SP;
#  - --hidden-dropout and --attention-dropout give C = 1's losses at C = 2 and 4 (and with
#    T = 2 + SP) and pass --check: the masks are indexed by global positions;
#  - experts with the load-balancing loss pass --check at C = 2 and 4 (its f_e and P_e
#    counted over the context group: the whole sequences');
#  - bad uses are refused (exit 2) with the reason: --seq not a multiple of 2C, C < 1,
#    the mlp model, a transport of the wrong size.
. "$(dirname "$0")/lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
A=$WORK/a
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 8 --vocab 32 --optimizer adam --lr 0.01"
L="$G --arch llama --ffn-hidden 24"
. "$(dirname "$0")/split_lib.sh"
peak0() { grep -o '"peak_bytes":\[[0-9]*' "$1" | head -1 | sed 's/.*\[//'; }

for M in G L; do
  eval "cfg=\$$M"
  run ${M}1 "$A" $cfg --iterations 3
  for C in 2 4; do
    run ${M}$C "$A" $cfg --iterations 3 --context-parallel $C
    close "$M: C = $C = C = 1 (1F1B, Adam)" "$WORK/${M}$C" "$WORK/${M}1"
    expect_exit 0 "$M: --context-parallel $C --check" "$A" $cfg --context-parallel $C --check -q
    expect_grep "^check: passed" "$M: C = $C: check passes against the whole-sequence device"
  done
done
# experts with the load-balancing loss: f_e and P_e of the whole sequences (moe.c cp_counts)
for C in 2 4; do
  expect_exit 0 "experts, aux loss 0.1: --context-parallel $C --check" "$A" $G --num-experts 4 --moe-aux-loss-coeff 0.1 \
    --context-parallel $C --check -q
  expect_grep "^check: passed" "experts, aux loss: C = $C: check passes (the loss is the whole sequences')"
done
grep -q '"layout":{"devices":2,"data_parallel":1,"context_parallel":2,"tensor_parallel":1,"expert_parallel":1,"ranks":4,' "$WORK/G2" \
  && pass "JSON layout: context_parallel 2, 4 ranks" || fail "JSON layout: $(grep -o '"layout":{[^}]*}' "$WORK/G2")"
p1=$(peak0 "$WORK/G1"); p2=$(peak0 "$WORK/G2")
[ -n "$p1" ] && [ "$p2" -gt 0 ] && [ $((2 * p2)) -eq "$p1" ] && pass "device 0 keeps half the activation bytes at C = 2 ($p2 of $p1)" \
  || fail "peak activation bytes C = 2: '$p2', C = 1: '$p1'"

# FLOPs a rank: its s/C tokens' products, and its two query chunks against the keys
# they see, (2C + 1) (s/2C)^2 query-key pairs a rank where C = 1 counts s^2: device 0
# (stage 0, one layer, m = 4) at C = 1 minus C times its C-rank figure is the attention
# C ranks do not compute, 4 x 12 b h (s^2 - C (2C + 1) (s/2C)^2) (12 = F's 4 + B's 8)
d0() { "$A" $G --context-parallel $1 2>/dev/null | sed -n 's/^flops: .*(d0 \([0-9]*\) .*/\1/p'; }
f1=$(d0 1)
for C in 2 4; do
  fc=$(d0 $C)
  want=$(python3 -c "C=$C; s=8; print(int(4 * 12 * 1 * 16 * (s * s - C * (2 * C + 1) * (s / (2 * C)) ** 2)))")
  [ -n "$f1" ] && [ -n "$fc" ] && [ $((f1 - C * fc)) -eq "$want" ] && pass "FLOPs: device 0 at C = $C: $fc (C = 1: $f1, the masked blocks $want)" \
    || fail "FLOPs at C = $C: '$fc', C = 1 '$f1', want a difference of $want"
done

# with the other splits and schedules
run t1 "$A" $G --iterations 3 --tensor-parallel 2 --sequence-parallel
run t2 "$A" $G --iterations 3 --tensor-parallel 2 --sequence-parallel --context-parallel 2
close "T = 2 --sequence-parallel x C = 2 = C = 1" "$WORK/t2" "$WORK/G1"
expect_exit 0 "T = 2 --sequence-parallel x C = 2 --check" "$A" $L --tensor-parallel 2 --sequence-parallel --context-parallel 2 --check -q
expect_grep "^check: passed" "T = 2 SP x C = 2 (llama): check passes"
run d1 "$A" $G --iterations 3 --data-parallel 2
run d2 "$A" $G --iterations 3 --data-parallel 2 --context-parallel 2 --distributed-optimizer
close "D = 2 x C = 2, distributed optimizer = D = 2, C = 1" "$WORK/d2" "$WORK/d1"
expect_exit 0 "D = 2 x C = 2 --distributed-optimizer --check" "$A" $G --data-parallel 2 --context-parallel 2 --distributed-optimizer --check -q
expect_grep "^check: passed" "D = 2 x C = 2, distributed optimizer: check passes"
expect_exit 0 "C = 2 --distributed-optimizer alone (shards over the context ranks) --check" "$A" $G --context-parallel 2 --distributed-optimizer --check -q
expect_grep "^check: passed" "C = 2, distributed optimizer: check passes"
expect_exit 0 "tied embeddings C = 2 --check" "$A" $G --embeddings tied --context-parallel 2 --check -q
expect_grep "^check: passed" "tied embeddings C = 2: check passes"
if build z "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 && build vh "$top_srcdir/stdlib/vocab_v_half.pps" -D P=2 -D m=4 -D async=true &&
   build po "$top_srcdir/stdlib/pipeoffload.pps"; then
  for s in z vh po; do
    run ${s}1 "$WORK/$s" $G --iterations 3
    run ${s}2 "$WORK/$s" $G --iterations 3 --context-parallel 2
    close "$s: C = 2 = C = 1" "$WORK/${s}2" "$WORK/${s}1"
    expect_exit 0 "$s: C = 2 --check" "$WORK/$s" $G --context-parallel 2 --check -q
    expect_grep "^check: passed" "$s: C = 2: check passes"
  done
else fail "build zb_v, vocab_v_half, pipeoffload"; fi

# dropout: the masks indexed by global positions (the embedding's, the attention
# probabilities', the projection's and FC2's), so the ranks drop what C = 1 drops
DR="--hidden-dropout 0.1 --attention-dropout 0.2"
run p1 "$A" $G $DR --iterations 3
for C in 2 4; do
  run p$C "$A" $G $DR --iterations 3 --context-parallel $C
  close "dropout: C = $C = C = 1" "$WORK/p$C" "$WORK/p1"
done
run pt "$A" $L $DR --iterations 3 --context-parallel 2 --tensor-parallel 2 --sequence-parallel
run pl "$A" $L $DR --iterations 3
close "dropout, llama: C = 2 x T = 2 --sequence-parallel = C = 1" "$WORK/pt" "$WORK/pl"
# several sequences a microbatch: each one's chunks (data, positions, the masks' rows)
run b1 "$A" $G $DR --micro-batch 3 --iterations 3
run b4 "$A" $G $DR --micro-batch 3 --iterations 3 --context-parallel 4
close "--micro-batch 3, dropout: C = 4 = C = 1" "$WORK/b4" "$WORK/b1"
expect_exit 0 "--micro-batch 3, dropout, C = 2 x T = 2 --sequence-parallel --check" "$A" $L $DR --micro-batch 3 --context-parallel 2 \
  --tensor-parallel 2 --sequence-parallel --check -q
expect_grep "^check: passed" "--micro-batch 3 C = 2 x T = 2 SP: check passes"
expect_exit 0 "dropout C = 2 --check" "$A" $G $DR --context-parallel 2 --check -q
expect_grep "^check: passed" "dropout C = 2: check passes (the reference drops what the ranks drop)"

# --data and --val-data: each rank takes its chunks of the file's sequences; the
# validation model (whole sequences) gets the same weights: C = 1's losses
VD="--iterations 3 --data $top_srcdir/README.md --val-data $top_srcdir/docs/ppsc.1 --val-every 2 --vocab 256"
vals() { sed -n 's/^\(iter\|val\) .* loss \([-0-9.e+]*\) .*/\2/p' "$WORK/$1" | tr '\n' ' '; }
for C in 1 2; do
  "$A" $G $VD --context-parallel $C > "$WORK/vd$C" 2>"$WORK/err" || fail "--data --val-data C = $C: exit $?: $(cat "$WORK/err")"
done
a=$(vals vd1); b=$(vals vd2)
if [ -n "$a" ] && python3 -c "
import sys
a, b = [[float(x) for x in s.split()] for s in sys.argv[1:3]]
assert len(a) == len(b) == 5 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)), (a, b)" "$a" "$b" 2>/dev/null
then pass "--data, --val-data: C = 2's training and validation losses equal C = 1's: $b"; else fail "--data --val-data: C = 1 '$a', C = 2 '$b'"; fi

# checkpoints are independent of C
run u "$A" $G --iterations 4
run s2 "$A" $G --iterations 2 --context-parallel 2 --save "$WORK/ck2.json"
run r1 "$A" $G --iterations 2 --load "$WORK/ck2.json"
[ "$(losses "$WORK/r1")" = "$(losses "$WORK/u" | cut -d' ' -f3-4) " ] && pass "saved at C = 2, resumed at C = 1: $(losses "$WORK/r1")" \
  || fail "resumed at C = 1: '$(losses "$WORK/r1")' vs '$(losses "$WORK/u")'"
# (Adam's state sharded over the context ranks, gathered whole by the save)
run s3 "$A" $G --iterations 2 --context-parallel 2 --tensor-parallel 2 --distributed-optimizer --save "$WORK/ck3.json"
run r3 "$A" $G --iterations 2 --load "$WORK/ck3.json"
[ "$(losses "$WORK/r3")" = "$(losses "$WORK/u" | cut -d' ' -f3-4) " ] && pass "saved at C = 2 x T = 2, distributed optimizer, resumed at C = 1: $(losses "$WORK/r3")" \
  || fail "resumed at C = 1: '$(losses "$WORK/r1")' vs '$(losses "$WORK/u")'"
run s1 "$A" $G --iterations 2 --save "$WORK/ck1.json"
run r4 "$A" $G --iterations 2 --load "$WORK/ck1.json" --context-parallel 4
close "saved at C = 1, resumed at C = 4" "$WORK/r4" "$WORK/r1"

if have_mpi; then
  expect_exit 0 "mpirun -np 4: P 2 x C 2 --check" mpirun_np 4 "$A" $G --context-parallel 2 --check -q
  expect_grep "^check: passed" "MPI: C = 2: check passes"
else skip "no MPI: the mpirun line"; fi

# refused
expect_exit 2 "--seq 6 at C = 2" "$A" $G --seq 6 --context-parallel 2
expect_grep "must be a multiple of 4" "seq not a multiple of 2C: the reason"
expect_exit 2 "--context-parallel 0" "$A" $G --context-parallel 0
expect_grep "context-parallel needs a group size from 1 to 1024" "C < 1: the reason"
expect_exit 2 "--model mlp" "$A" --context-parallel 2
expect_grep "does not run with --model mlp" "mlp: the reason"
if have_mpi; then
  expect_exit 2 "mpirun -np 2 for P 2 x C 2" mpirun_np 2 "$A" $G --context-parallel 2
  expect_grep "context-parallel 2" "wrong world size: names C"
fi
finish
