#!/bin/sh
# moe.sh: mixture-of-experts MLPs in the gpt model (--num-experts, --moe-topk,
# --moe-ffn-hidden, --moe-aux-loss-coeff; runtime/moe.c). The backward itself is checked
# against finite differences in tests/kernels/gpt_grad (E = 4, top 2 and top 1, with
# and without the load-balancing loss, GPT's and Llama's layer, dropout); here:
#  - --check (the pipelined run against one device: loss, gradients, activation memory)
#    passes for GPT's and Llama's layer, E = 4 with K = 2 and K = 1, on 1F1B, a
#    zero-bubble schedule (ZB-H1), ZB-V, PipeOffload (offloaded activations), whole-stage
#    and partial (ratio 0.5, ZB-H1) recomputation (recompute.pps), a Vocab-1 schedule,
#    --hidden-dropout, tied embeddings; a scaled expert gradient fails it;
#  - T = 2, and T = 2 with --sequence-parallel (also with dropout), give T = 1's losses
#    within 1e-6, and
#    --check passes there; --data-parallel 2 with the distributed optimizer (and T = 2)
#    passes --check;
#  - the load-balancing loss as this test computes it: with K = E every expert takes
#    every token (f_e = 1/E), so a E sum_e f_e P_e = a sum_e P_e = a exactly and the first
#    iteration's loss grows by a x layers; the loss falls over 8 iterations;
#  - FLOPs count the router and K experts a token: a MoE run's FLOPs are those of a
#    dense run with --ffn-hidden K F plus the router's 2 N h E a pass (F, B and W);
#  - activation bytes: what F keeps is the layer's documented MoE entry (docs/models.md)
#    byte for byte, against a dense run's measured bytes;
#  - a checkpoint resumes with the uninterrupted losses (under another schedule); a run
#    with another --num-experts, --moe-topk or a dense MLP is refused naming the flag;
#  - bad flags are refused (exit 2) with the reason; --json names the experts.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build zh "$top_srcdir/stdlib/zb_h1.pps" -D P=2 -D m=4 || { fail "build zb_h1"; finish; }
build z "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 || { fail "build zb_v"; finish; }
build po "$top_srcdir/stdlib/pipeoffload.pps" -D P=2 -D m=4 || { fail "build pipeoffload"; finish; }
build v1 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=4 || { fail "build vocab_1f1b"; finish; }
A=$WORK/a
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --optimizer adam --lr 0.01"
M="$G --num-experts 4 --moe-aux-loss-coeff 0.01"
L="$M --arch llama --ffn-hidden 24"

# --check: both layers, top 2 and top 1, on every kind of schedule
for k in 2 1; do
  for s in a zh z po v1; do
    expect_exit 0 "$s gpt E = 4 K = $k --check" "$WORK/$s" $M --moe-topk $k --check -q
    expect_grep "^check: passed" "$s gpt K = $k: check passes"
    expect_exit 0 "$s llama E = 4 K = $k --check" "$WORK/$s" $L --moe-topk $k --check -q
    expect_grep "^check: passed" "$s llama K = $k: check passes"
  done
done
expect_exit 0 "1F1B E = 4 --embeddings tied --check" "$A" $M --embeddings tied --check -q
expect_grep "^check: passed" "tied embeddings: check passes"
expect_exit 0 "1F1B E = 4 --hidden-dropout 0.2 --check" "$A" $M --hidden-dropout 0.2 --check -q
expect_grep "^check: passed" "dropout on the experts' output: check passes"
# whole-stage recomputation (the input shares the runtime's notes name for this layer)
if build rc "$top_srcdir/tests/runtime/cases/recompute.pps"; then
  "$WORK/rc" $M --check-memory -q > "$WORK/rc.out" 2>&1
  defs=$(sed -n 's/.*write .memory stage \([0-9]\): input = \([0-9.e-]*\);.*/-D i\1=\2/p' "$WORK/rc.out" | tr '\n' ' ')
  [ -n "$defs" ] && pass "recomputation: the notes name the input shares ($defs)" || fail "recomputation: no input shares named"
  if build rc2 "$top_srcdir/tests/runtime/cases/recompute.pps" $defs; then
    expect_exit 0 "recomputation E = 4 --check" "$WORK/rc2" $M --check -q
    expect_grep "^check: passed" "recomputation: check passes (memory too)"
  else fail "build recompute.pps $defs"; fi
else fail "build recompute.pps"; fi
# partial recomputation (ratio 0.5 of 2 layers a stage, ZB-H1: B and W apart), with the
# input and layer shares the runtime's notes name for this model
CASE=$top_srcdir/tests/runtime/cases/recompute.pps
hints() { sed -n "s/^hint: for this model and size write \`memory stage \([0-9]\): $1 = \([0-9.e-]*\);\`/-D $2\1=\2/p" "$WORK/out" | sort -u; }
if build rw "$CASE" -D lps=2 && build rh "$CASE" -D lps=2 -D r=0.5; then
  "$WORK/rw" --check $M > "$WORK/out" 2>&1; idefs=$(hints input i)
  "$WORK/rh" --check $M > "$WORK/out" 2>&1; ldefs=$(hints layer l)
  # shellcheck disable=SC2086
  if [ -n "$idefs" ] && [ -n "$ldefs" ] && build rz "$CASE" -D lps=2 -D r=0.5 -D zb=true $idefs $ldefs; then
    expect_exit 0 "ZB-H1, recompute 0.5 of 2 layers, E = 4 --check" "$WORK/rz" $M --check -q
    expect_grep "^check: passed" "partial recomputation: check passes (memory too)"
  else fail "partial recomputation: shares '$idefs' '$ldefs'"; fi
else fail "build recompute.pps lps=2"; fi

# a wrong expert gradient is seen
expect_exit 1 "a wrong expert gradient fails --check" env "PPSRT_FAULT=grad=s1.l0.moe.e2.fc.w*1.001" "$A" $M --check -q
expect_grep "grad s1.l0.moe.e2.fc.w .*DIFFERS" "the wrong tensor named"

# tensor and sequence parallelism: T = 1's losses; data parallelism with the distributed optimizer
for x in "$M" "$L"; do
  run t1 "$A" $x --iterations 3
  run t2 "$A" $x --iterations 3 --tensor-parallel 2
  close "T = 2 = T = 1 ($(echo "$x" | grep -o 'arch llama' || echo gpt))" "$WORK/t2" "$WORK/t1"
  run t2s "$A" $x --iterations 3 --tensor-parallel 2 --sequence-parallel
  close "T = 2 --sequence-parallel = T = 1" "$WORK/t2s" "$WORK/t1"
done
run d1 "$A" $M --hidden-dropout 0.2 --iterations 3
run d2 "$A" $M --hidden-dropout 0.2 --iterations 3 --tensor-parallel 2 --sequence-parallel
close "--hidden-dropout 0.2: T = 2 --sequence-parallel = T = 1 (the experts' output masked by rows)" "$WORK/d2" "$WORK/d1"
expect_exit 0 "T = 2 --sequence-parallel K = 1 --check" "$A" $L --moe-topk 1 --tensor-parallel 2 --sequence-parallel --check -q
expect_grep "^check: passed" "T = 2, SP: check passes"
expect_exit 0 "--data-parallel 2 --distributed-optimizer --check" "$A" $M --data-parallel 2 --distributed-optimizer --check -q
expect_grep "^check: passed" "D = 2, distributed optimizer: check passes"
expect_exit 0 "T = 2 x D = 2 --distributed-optimizer --check" "$A" $L --tensor-parallel 2 --data-parallel 2 \
  --distributed-optimizer --check -q
expect_grep "^check: passed" "T = 2 x D = 2: check passes"
if have_mpi; then
  expect_exit 0 "mpirun -np 2 E = 4 --check" mpirun_np 2 "$A" $M --check -q
  expect_grep "^check: passed" "MPI: check passes"
else skip "MoE under MPI (libppsrt without MPI, or no mpirun)"; fi

# the load-balancing loss: K = E, 2 stages x 2 layers: the first loss grows by 4 a exactly
run x0 "$A" $G --num-experts 4 --moe-topk 4 --layers-per-stage 2 --iterations 1
run x1 "$A" $G --num-experts 4 --moe-topk 4 --layers-per-stage 2 --iterations 1 --moe-aux-loss-coeff 0.25
python3 - "$WORK/x0" "$WORK/x1" <<'PY' && pass "the aux loss: K = E adds a x layers (1.0) to the loss" || fail "aux loss"
import json, sys
l0, l1 = [json.load(open(f))["iterations"][0]["loss"] for f in sys.argv[1:3]]
assert abs((l1 - l0) - 0.25 * 4) < 1e-5, (l0, l1)
PY
run x2 "$A" $M --iterations 1 --moe-aux-loss-coeff 0.5
run x3 "$A" $M --iterations 1 --moe-aux-loss-coeff 0
python3 - "$WORK/x3" "$WORK/x2" <<'PY' && pass "the aux loss at K = 2 lies in [a, a E / K] a layer (balanced to all on K)" || fail "aux loss bounds"
import json, sys
l0, l1 = [json.load(open(f))["iterations"][0]["loss"] for f in sys.argv[1:3]]
d = (l1 - l0) / (0.5 * 2)           # per layer (2 stages x 1 layer), over a
assert 0.5 <= d <= 2.0 + 1e-6, d    # E sum f P: f sums to 1; >= ~1/2 here, at most E/K = 2
PY
run l8 "$A" $L --iterations 8
python3 - "$WORK/l8" <<'PY' && pass "the loss falls over 8 iterations: $(losses "$WORK/l8")" || fail "the loss does not fall: $(losses "$WORK/l8")"
import json, sys
l = [it["loss"] for it in json.load(open(sys.argv[1]))["iterations"]]
assert len(l) == 8 and l[-1] < 0.9 * l[0], l
PY
grep -q '"experts":{"num":4,"topk":2,"ffn_hidden":24,"aux_loss_coeff":0.01,"score_function":"softmax","pre_softmax":false,"topk_scaling_factor":1,"z_loss_coeff":0,"expert_bias_update_rate":null}}' "$WORK/l8" &&
  pass "--json names the experts" || fail "--json experts: $(grep -o '"layer":.*' "$WORK/l8")"

# --val-data: the language model's loss, the same with and without the load-balancing loss (--lr 0: the same weights)
printf 'a mixture of experts routes each token to its top experts. %.0s' $(seq 1 40) > "$WORK/t.txt"
"$A" $M --vocab 256 --data "$WORK/t.txt" --val-data "$WORK/t.txt" --val-every 1 --iterations 1 --lr 0 > "$WORK/va" 2>&1
"$A" $M --vocab 256 --moe-aux-loss-coeff 0 --data "$WORK/t.txt" --val-data "$WORK/t.txt" --val-every 1 --iterations 1 --lr 0 > "$WORK/vb" 2>&1
va=$(sed -n 's/^val  1\/1  loss \([0-9.]*\).*/\1/p' "$WORK/va"); vb=$(sed -n 's/^val  1\/1  loss \([0-9.]*\).*/\1/p' "$WORK/vb")
[ -n "$va" ] && [ "$va" = "$vb" ] && pass "--val-data: the language model's loss ($va) without the aux term" ||
  fail "--val-data loss with the aux coefficient '$va', without '$vb'"

# FLOPs: router + K experts a token, not E
run fm "$A" $G --num-experts 4 --moe-topk 2 --moe-ffn-hidden 16 --iterations 1
run fd "$A" $G --ffn-hidden 32 --iterations 1
python3 - "$WORK/fm" "$WORK/fd" <<'PY' && pass "FLOPs: a dense MLP of K F plus the router's 3 x 2 N h E a layer" || fail "MoE FLOPs"
import json, sys
fm, fd = [[d["flops_per_iteration"] for d in json.load(open(f))["per_device"]] for f in sys.argv[1:3]]
N, h, E, mb, layers = 4, 16, 4, 4, 1     # tokens a microbatch, hidden, experts, microbatches, layers a stage
for a, b in zip(fm, fd):
    assert abs(a - (b + 3 * 2 * N * h * E * mb * layers)) < 1e-6 * a, (fm, fd)
PY

# activation bytes: the MoE entry (docs/models.md) instead of the dense MLP's hpre and hact
run bm "$A" $G --num-experts 4 --moe-aux-loss-coeff 0.1 --iterations 1
run bd "$A" $G --iterations 1
python3 - "$WORK/bm" "$WORK/bd" <<'PY' && pass "each device keeps exactly the MoE layer's bytes" || fail "MoE activation bytes"
import json, sys
m, d = [json.load(open(f))["per_device"] for f in sys.argv[1:3]]
up = lambda b: (b + 255) // 256 * 256
N, h, E, K, F, es = 4, 16, 4, 2, 64, 4
NK = N * K
moe = up(NK * F * es) * 2 + up(NK * h * es) + 3 * up(NK * 4) + up(N * E * 4) + up(N * E * es) + up(E * 4)   # (--moe-aux-loss-coeff > 0: the coefficients)
dense = N * 2 * F * es
units = [x["peak_units"] for x in d]
for x, y, u in zip(m, d, units):     # 1F1B P = 2: device 0 keeps 2 microbatches, device 1 one (one layer each)
    assert x["resident_peak_bytes"] - y["resident_peak_bytes"] == u * (moe - dense), (x, y, moe, dense)
PY

# checkpoints: resume under another schedule with the uninterrupted losses; mismatches refused
run c4 "$A" $M --iterations 4
run c2 "$A" $M --iterations 2 --save "$WORK/ck"
run c2b "$WORK/zh" $M --iterations 2 --load "$WORK/ck"
cat "$WORK/c2" "$WORK/c2b" > "$WORK/c22"
close "save, --load under ZB-H1: the uninterrupted losses" "$WORK/c22" "$WORK/c4"
expect_exit 1 "--load with another --num-experts" "$A" $M --num-experts 8 --load "$WORK/ck" -q
expect_grep "holds a gpt with --num-experts 4, this run's has 8" "another --num-experts named"
expect_exit 1 "--load with another --moe-topk" "$A" $M --moe-topk 1 --load "$WORK/ck" -q
expect_grep "holds a gpt with --moe-topk 2, this run's has 1" "another --moe-topk named"
expect_exit 1 "--load into a dense model" "$A" $G --load "$WORK/ck" -q
expect_grep "holds a gpt with --num-experts 4, this run's has dense MLPs" "a dense run refused"

# bad flags
expect_exit 2 "--num-experts 1" "$A" $G --num-experts 1
expect_grep "num-experts must be from 2 to 1024, got 1" "--num-experts 1 refused"
expect_exit 2 "--num-experts 2000" "$A" $G --num-experts 2000
expect_grep "num-experts must be from 2 to 1024" "--num-experts 2000 refused"
expect_exit 2 "--moe-topk 5 of 4" "$A" $G --num-experts 4 --moe-topk 5
expect_grep "moe-topk must be from 1 to --num-experts 4, got 5" "--moe-topk above E refused"
expect_exit 2 "--moe-topk without --num-experts" "$A" $G --moe-topk 1
expect_grep "hint: add --num-experts" "--moe-topk alone refused"
expect_exit 2 "--moe-aux-loss-coeff -1" "$A" $G --num-experts 4 --moe-aux-loss-coeff -1
expect_grep "moe-aux-loss-coeff needs a number from 0" "a negative coefficient refused"
expect_exit 2 "--moe-ffn-hidden 5 with --tensor-parallel 2" "$A" $G --num-experts 4 --moe-ffn-hidden 5 --tensor-parallel 2
expect_grep "must divide the experts' width 5" "an expert width T does not divide refused"
expect_exit 2 "--num-experts with the mlp model" "$A" --model mlp --num-experts 4
expect_grep "choose the gpt model's layer" "--num-experts with --model mlp refused"
finish
