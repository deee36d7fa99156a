#!/bin/sh
# moe_router.sh: the router's options of the gpt model's experts (Megatron-Core's
# --moe-router-score-function, --moe-router-pre-softmax, --moe-router-topk-scaling-factor,
# --moe-z-loss-coeff, --moe-router-enable-expert-bias with --moe-router-bias-update-rate;
# runtime/moe.c, backend.h moe_route). The kernels are checked against double references
# and finite differences in tests/kernels/test_kernels, the whole layer's gradients (z-loss
# and sigmoid included) in tests/kernels/gpt_grad, the bias's update on made-up loads
# there too; here, on the CPU backend (threads):
#  - --check passes for each option on 1F1B and ZB-V, and for all of them together with
#    --data-parallel 2 and with --tensor-parallel 2 --sequence-parallel; the z-loss with
#    --context-parallel 2 (--check, and C = 1's losses);
#  - the z-loss adds Z x mean lse^2 a layer: Z (log E)^2 exactly with the routers' weights
#    zeroed in a checkpoint (every logit 0);
#  - the expert bias's direction: from routers zeroed in a checkpoint (all scores tie: every
#    token to experts 0 and 1) one iteration gives -U -U +U +U, a second 0 0 0 0, at D = 1
#    and 2;
#  - the expert bias: the first iteration's loss is the run's without it (the bias starts
#    at 0), later ones differ (it moved the routing); 2 replicas x 4 microbatches give the
#    losses of 1 pipeline x 8 (the loads summed over the replicas: every replica's bias the
#    same and the global batch's), as do --tensor-parallel 2 and --context-parallel 2;
#  - a checkpoint holds layerN.moe.router.expert_bias (multiples of U, not all 0) and
#    resumes with the uninterrupted losses (under ZB-H1), D = 2's as 1 pipeline x 8's; a
#    resume with another score function or pre-softmax is refused (exit 1) naming the flag;
#  - bad flags are refused (exit 2) with the reason; --json's layer.experts names them.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build a8 "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=8 || { fail "build 1f1b m=8"; finish; }
build z "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 || { fail "build zb_v"; finish; }
build zh "$top_srcdir/stdlib/zb_h1.pps" -D P=2 -D m=4 || { fail "build zb_h1"; finish; }
A=$WORK/a
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --optimizer adam --lr 0.01"
M="$G --num-experts 4"
SIG="--moe-router-score-function sigmoid"
EB="$SIG --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.05"

# --check: each option alone (and the sigmoid at K = 1: no renormalisation), both schedules
for r in "--moe-router-pre-softmax" "$SIG" "$SIG --moe-topk 1" "--moe-router-topk-scaling-factor 2.5" \
  "--moe-z-loss-coeff 0.1 --moe-aux-loss-coeff 0.01" "$SIG --moe-z-loss-coeff 0.1 --moe-aux-loss-coeff 0.01" "$EB"; do
  for s in a z; do
    expect_exit 0 "$s E = 4 $r --check" "$WORK/$s" $M $r --check -q
    expect_grep "^check: passed" "$s $r: check passes"
  done
done
ALL="$EB --moe-router-topk-scaling-factor 2 --moe-z-loss-coeff 0.05 --moe-aux-loss-coeff 0.01"
expect_exit 0 "all the options, --data-parallel 2 --check" "$A" $M $ALL --data-parallel 2 --check -q
expect_grep "^check: passed" "D = 2: check passes"
expect_exit 0 "all the options, --tensor-parallel 2 --sequence-parallel --check" "$A" $M $ALL --tensor-parallel 2 \
  --sequence-parallel --check -q
expect_grep "^check: passed" "T = 2, SP: check passes"
expect_exit 0 "pre-softmax, --data-parallel 2 --expert-parallel 2 --check" "$A" $M --moe-router-pre-softmax \
  --moe-z-loss-coeff 0.05 --data-parallel 2 --expert-parallel 2 --check -q
expect_grep "^check: passed" "D = 2 X = 2: check passes"
expect_exit 0 "sigmoid, z-loss, aux loss, --context-parallel 2 --check" "$A" $M $SIG --moe-z-loss-coeff 0.1 \
  --moe-aux-loss-coeff 0.01 --context-parallel 2 --check -q
expect_grep "^check: passed" "C = 2 with the z-loss: check passes"
run zc1 "$A" $M --moe-z-loss-coeff 0.1 --iterations 3
run zc2 "$A" $M --moe-z-loss-coeff 0.1 --iterations 3 --context-parallel 2
close "the z-loss: C = 2 = C = 1 (its sum gathered over the context ranks)" "$WORK/zc2" "$WORK/zc1"

# the z-loss: Z mean_n lse_n^2 a layer (2 layers), a mean over microbatches. With the
# routers' weights zeroed in a checkpoint every logit is 0, lse = log E exactly: the loss
# grows by Z x 2 x (log E)^2
zero_routers() {   # zero_routers CKPT: every moe.router.w of the checkpoint's shards set to 0, in place
  python3 - "$1" <<'PY' || fail "zeroing the routers' weights of $1"
import glob, json, struct, sys
for f in glob.glob(sys.argv[1] + ".*.safetensors"):
    with open(f, "r+b") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        for k, v in json.loads(fh.read(n)).items():
            if k.endswith(".moe.router.w"):
                a, b = v["data_offsets"]
                fh.seek(8 + n + a); fh.write(bytes(b - a))
PY
}
expect_exit 0 "save the initial weights" "$A" $M --lr 0 --iterations 1 --save "$WORK/zk" -q
zero_routers "$WORK/zk"
run z0 "$A" $M --iterations 1 --load "$WORK/zk"
run z1 "$A" $M --iterations 1 --load "$WORK/zk" --moe-z-loss-coeff 0.5
python3 - "$WORK/z0" "$WORK/z1" <<'PY' && pass "the z-loss at zero logits: Z x layers x (log E)^2 exactly" || fail "z-loss value"
import json, math, sys
l0, l1 = [json.load(open(f))["iterations"][0]["loss"] for f in sys.argv[1:3]]
assert abs((l1 - l0) - 0.5 * 2 * math.log(4) ** 2) <= 1e-5, (l0, l1, l1 - l0, 0.5 * 2 * math.log(4) ** 2)
PY

# the expert bias: 0 at first, then moving; the same over replicas, tensor and context ranks
run b0 "$A" $M $SIG --iterations 4
run b1 "$A" $M $EB --iterations 4
python3 - "$WORK/b0" "$WORK/b1" <<'PY' && pass "the bias: iteration 1 as without it, then other losses" || fail "the bias does nothing or too early"
import json, sys
a, b = [[it["loss"] for it in json.load(open(f))["iterations"]] for f in sys.argv[1:3]]
assert a[0] == b[0] and any(abs(x - y) > 1e-6 * abs(x) for x, y in zip(a[1:], b[1:])), (a, b)
PY
run b8 "$WORK/a8" $M $EB --iterations 4
run bd "$A" $M $EB --iterations 4 --data-parallel 2
close "expert bias: 2 replicas x 4 microbatches = 1 pipeline x 8" "$WORK/bd" "$WORK/b8"
run bt "$A" $M $EB --iterations 4 --tensor-parallel 2 --sequence-parallel
close "expert bias: T = 2 --sequence-parallel = T = 1" "$WORK/bt" "$WORK/b1"
run bc "$A" $M $EB --iterations 4 --context-parallel 2
close "expert bias: --context-parallel 2 = C = 1" "$WORK/bc" "$WORK/b1"
run bx "$A" $M $EB --iterations 4 --data-parallel 2 --expert-parallel 2
close "expert bias: D = 2 --expert-parallel 2 = 1 pipeline x 8" "$WORK/bx" "$WORK/b8"

# the bias's direction end to end: from the zeroed routers (every sigmoid 0.5, a tie: the
# top 2 are experts 0 and 1 for every token) at --lr 0, one iteration (D = 2: the
# replicas' loads summed) leaves every layer's bias at -U -U +U +U (0 and 1 over the
# mean, 2 and 3 under it); a second one routes every token to 2 and 3: back to 0 0 0 0
dirck() {   # dirck LABEL CKPT WANT...
  python3 - "$top_srcdir/tests/runtime" "$@" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import ckpt_tensors
t, want = ckpt_tensors.load(sys.argv[3]), [float(x) for x in sys.argv[4:]]
b = {k: v for k, (s, v) in t.items() if k.endswith(".moe.router.expert_bias")}
assert len(b) == 2 and all(all(abs(x - y) < 1e-7 for x, y in zip(v, want)) for v in b.values()), b
PY
}
expect_exit 0 "save the initial weights (sigmoid)" "$A" $M $SIG --lr 0 --iterations 1 --save "$WORK/zs" -q
zero_routers "$WORK/zs"
for d in 1 2; do
  expect_exit 0 "D = $d: 1 iteration from the zeroed routers" "$A" $M $EB --lr 0 --load "$WORK/zs" --data-parallel $d \
    --iterations 1 --save "$WORK/zb1" -q
  dirck x "$WORK/zb1" -0.05 -0.05 0.05 0.05 && pass "D = $d: the over-loaded experts' bias lowered, the others' raised" ||
    fail "D = $d: the bias after 1 iteration"
  expect_exit 0 "D = $d: 2 iterations from the zeroed routers" "$A" $M $EB --lr 0 --load "$WORK/zs" --data-parallel $d \
    --iterations 2 --save "$WORK/zb2" -q
  dirck x "$WORK/zb2" 0 0 0 0 && pass "D = $d: then the other two over-loaded: back to 0" || fail "D = $d: the bias after 2 iterations"
done

# checkpoints: the bias saved (Megatron's name) and resumed; D = 2's too
expect_exit 0 "save after 2 iterations" "$A" $M $EB --iterations 2 --save "$WORK/ck" -q
python3 - "$top_srcdir/tests/runtime" "$WORK/ck" <<'PY' && pass "the checkpoint holds each layer's expert bias, multiples of U" || fail "the bias in the checkpoint"
import sys
sys.path.insert(0, sys.argv[1])
import ckpt_tensors
t = ckpt_tensors.load(sys.argv[2])
b = {k: v for k, v in t.items() if k.endswith(".moe.router.expert_bias")}
assert sorted(b) == ["layer0.moe.router.expert_bias", "layer1.moe.router.expert_bias"], sorted(t)
vals = [x for shape, v in b.values() for x in v]
assert all(shape == [4] for shape, v in b.values())
assert all(abs(x / 0.05 - round(x / 0.05)) < 1e-4 and abs(x) <= 0.1 + 1e-6 for x in vals) and any(vals), vals
assert not any(k.startswith("optim.") and "expert_bias" in k for k in t)
PY
run br "$WORK/zh" $M $EB --iterations 2 --load "$WORK/ck"
python3 - "$WORK/b1" "$WORK/br" <<'PY' && pass "the resumed run (ZB-H1) goes on with the uninterrupted losses" || fail "resume with the bias"
import json, sys
a = [it["loss"] for it in json.load(open(sys.argv[1]))["iterations"]][2:]
b = [it["loss"] for it in json.load(open(sys.argv[2]))["iterations"]]
assert len(b) == 2 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)), (a, b)
PY
expect_exit 0 "D = 2 saves after 2 iterations" "$A" $M $EB --iterations 2 --data-parallel 2 --save "$WORK/ckd" -q
run bdr "$WORK/a8" $M $EB --iterations 2 --load "$WORK/ckd"
python3 - "$WORK/b8" "$WORK/bdr" <<'PY' && pass "D = 2's checkpoint goes on as 1 pipeline x 8" || fail "D = 2 resume with the bias"
import json, sys
a = [it["loss"] for it in json.load(open(sys.argv[1]))["iterations"]][2:]
b = [it["loss"] for it in json.load(open(sys.argv[2]))["iterations"]]
assert len(b) == 2 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)), (a, b)
PY
expect_exit 1 "resume with softmax refused" "$A" $M --load "$WORK/ck" -q
expect_grep "holds a gpt with --moe-router-score-function sigmoid, this run's is softmax" "another score function named"
expect_exit 0 "save a pre-softmax run" "$A" $M --moe-router-pre-softmax --iterations 1 --save "$WORK/ckp" -q
expect_exit 1 "resume without pre-softmax refused" "$A" $M --load "$WORK/ckp" -q
expect_grep "with --moe-router-pre-softmax, this run's is without" "pre-softmax named"

# bad flags: exit 2, the reason
bad() { want=$1; shift; expect_exit 2 "refused: $*" "$A" "$@" -q; expect_grep -- "$want" "the reason for $*"; }
bad "needs softmax or sigmoid, got 'tanh'" $M --moe-router-score-function tanh
bad "needs --moe-router-score-function softmax, not sigmoid" $M $SIG --moe-router-pre-softmax
bad "enable-expert-bias needs --moe-router-score-function sigmoid" $M --moe-router-enable-expert-bias
bad "bias-update-rate sets the rate of --moe-router-enable-expert-bias" $M $SIG --moe-router-bias-update-rate 0.01
bad "needs a number above 0 (at most 1), got '0'" $M $EB --moe-router-bias-update-rate 0
bad "topk-scaling-factor needs a number above 0 (at most 1e6), got '-1'" $M --moe-router-topk-scaling-factor -1
bad "topk-scaling-factor needs a number above 0 (at most 1e6), got 'x'" $M --moe-router-topk-scaling-factor x
bad "z-loss-coeff needs a number from 0, got '-0.1'" $M --moe-z-loss-coeff -0.1
bad "set up the router of --num-experts" $G $SIG
bad "set up the router of --num-experts" $G --moe-z-loss-coeff 0.1

# --json: layer.experts names the router
run j "$A" $M $EB --moe-z-loss-coeff 0.001 --moe-router-topk-scaling-factor 2.5
grep -q '"score_function":"sigmoid","pre_softmax":false,"topk_scaling_factor":2.5,"z_loss_coeff":0.001,"expert_bias_update_rate":0.05}' \
  "$WORK/j" && pass "--json names the router's options" || fail "--json router: $(grep -o '"experts":{[^}]*}' "$WORK/j")"
finish
