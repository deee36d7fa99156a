#!/bin/sh
# moe_shared.sh: the shared expert of the gpt model's mixture of experts
# (--moe-shared-ffn-hidden S, Megatron-LM's --moe-shared-expert-intermediate-size;
# runtime/model_gpt.c's dense MLP path on every token, added to the routed experts'
# output before the dropout). Its gradients against finite differences are in
# tests/kernels/gpt_grad (both layers, dropout); here:
#  - --check (the pipelined run against one device: loss, gradients, routing, activation
#    memory) passes for GPT's and Llama's layer on 1F1B and ZB-V, GPT's on ZB-H1,
#    PipeOffload and Vocab-1, with --hidden-dropout,
#    with whole-stage recomputation, with --tensor-parallel 2 (and --sequence-parallel),
#    with --context-parallel 2,
#    and with --data-parallel 2 --expert-parallel 2; a scaled gradient of the shared FC1
#    fails it, naming the tensor;
#  - T = 2, T = 2 with --sequence-parallel (also with dropout) and X = 2 (D = 2) give the
#    T = 1 / X = 1 losses within 1e-6 (the shared expert replicated over the
#    expert-parallel group, its gradients averaged over all D ranks like the router's);
#  - the shared expert contributes, exactly: at --lr 0 a run with it has other losses
#    than one without; with its fc2.w zeroed in a checkpoint (fc2.b starts at zero) the
#    losses are the run without it bit for bit (T = 1, and T = 2 with
#    --sequence-parallel);
#  - FLOPs: a dense run's with --ffn-hidden K F + S plus the router's; activation bytes:
#    the MoE entry plus the shared expert's hpre and hact (N (fw + f) values), byte for
#    byte against a run without it;
#  - a checkpoint resumes with the uninterrupted losses (under ZB-H1); a run with another
#    width or none is refused naming --moe-shared-ffn-hidden; --json names the width;
#  - bad flags: without --num-experts, a width T does not divide (exit 2).
# Its gate (--moe-shared-expert-gate, Megatron-Core's: the shared output times
# sigmoid(LN2(x1) . wg), wg = moe.shared.gate.w [h]; gradients against finite
# differences in tests/kernels/gpt_grad):
#  - --check passes for both layers on 1F1B and ZB-V, GPT's on ZB-H1, PipeOffload and
#    Vocab-1, with dropout, C = 2, whole-stage recomputation, T = 2 --sequence-parallel,
#    ZB-V T = 2, D = 2 X = 2 (and --no-compute runs); T = 2, T = 2 with --sequence-parallel and D = 2 X = 2 give
#    T = 1's / X = 1's losses within 1e-6 (wg whole on every rank; under SP its gradient
#    of each rank's rows summed over the group);
#  - the identity sigmoid(0) = 1/2: a checkpoint of the gated model with wg = 0 and the
#    shared FC2's weight and bias doubled gives the ungated model's losses (T = 1 and
#    T = 2 with --sequence-parallel, within 1e-6: the bias is added in another order);
#  - FLOPs: 3 x 2 N h a layer and microbatch more (F, B, W's products with wg);
#    activation bytes: n (2 F32 + (h + 1) values) a layer more, byte for byte;
#  - --json's experts object says "shared_gate":true; a checkpoint records it and a run
#    with it or without it against the other is refused naming the flag;
#  - without --moe-shared-ffn-hidden the flag is refused (exit 2) naming both.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build z "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 || { fail "build zb_v"; finish; }
build zh "$top_srcdir/stdlib/zb_h1.pps" -D P=2 -D m=4 || { fail "build zb_h1"; finish; }
build po "$top_srcdir/stdlib/pipeoffload.pps" -D P=2 -D m=4 || { fail "build pipeoffload"; finish; }
build v1 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=4 || { fail "build vocab_1f1b"; finish; }
A=$WORK/a
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --optimizer adam --lr 0.01"
M="$G --num-experts 4 --moe-aux-loss-coeff 0.01"
MS="$M --moe-shared-ffn-hidden 8"
L="$M --arch llama --ffn-hidden 24"
LS="$L --moe-shared-ffn-hidden 16"

# --check: both layers, 1F1B and ZB-V
for s in a z; do
  expect_exit 0 "$s gpt S = 8 --check" "$WORK/$s" $MS --check -q
  expect_grep "^check: passed" "$s gpt shared expert: check passes"
  expect_exit 0 "$s llama S = 16 --check" "$WORK/$s" $LS --check -q
  expect_grep "^check: passed" "$s llama shared expert: check passes"
done
for s in zh po v1; do   # W apart from B, offloaded activations, a vocabulary-parallel schedule
  expect_exit 0 "$s gpt S = 8 --check" "$WORK/$s" $MS --check -q
  expect_grep "^check: passed" "$s gpt shared expert: check passes"
done
expect_exit 0 "1F1B S = 8 --hidden-dropout 0.2 --check" "$A" $MS --hidden-dropout 0.2 --check -q
expect_grep "^check: passed" "dropout on experts + shared: check passes"
if build rc "$top_srcdir/tests/runtime/cases/recompute.pps"; then
  "$WORK/rc" $MS --check-memory -q > "$WORK/rc.out" 2>&1
  defs=$(sed -n 's/.*write .memory stage \([0-9]\): input = \([0-9.e-]*\);.*/-D i\1=\2/p' "$WORK/rc.out" | tr '\n' ' ')
  # shellcheck disable=SC2086
  if [ -n "$defs" ] && build rc2 "$top_srcdir/tests/runtime/cases/recompute.pps" $defs; then
    expect_exit 0 "recomputation S = 8 --check" "$WORK/rc2" $MS --check -q
    expect_grep "^check: passed" "recomputation with a shared expert: check passes (memory too)"
  else fail "recomputation: input shares '$defs'"; fi
else fail "build recompute.pps"; fi
expect_exit 1 "a wrong shared FC1 gradient fails --check" env "PPSRT_FAULT=grad=s1.l0.moe.shared.fc.w*1.001" "$A" $MS --check -q
expect_grep "grad s1.l0.moe.shared.fc.w .*DIFFERS" "the shared expert's tensor named"

# tensor, sequence and expert parallelism: T = 1's / X = 1's losses, and --check
for x in "$MS" "$LS"; do
  lay=$(echo "$x" | grep -o 'arch llama' || echo gpt)
  run t1 "$A" $x --iterations 3
  run t2 "$A" $x --iterations 3 --tensor-parallel 2
  close "$lay: T = 2 = T = 1 (the shared expert split as the dense MLP)" "$WORK/t2" "$WORK/t1"
  run t2s "$A" $x --iterations 3 --tensor-parallel 2 --sequence-parallel
  close "$lay: T = 2 --sequence-parallel = T = 1" "$WORK/t2s" "$WORK/t1"
  run x1 "$A" $x --iterations 3 --data-parallel 2
  run x2 "$A" $x --iterations 3 --data-parallel 2 --expert-parallel 2
  close "$lay: D = 2 X = 2 = X = 1 (the shared expert replicated)" "$WORK/x2" "$WORK/x1"
done
run d1 "$A" $MS --hidden-dropout 0.2 --iterations 3
run d2 "$A" $MS --hidden-dropout 0.2 --iterations 3 --tensor-parallel 2 --sequence-parallel
close "--hidden-dropout 0.2: T = 2 --sequence-parallel = T = 1" "$WORK/d2" "$WORK/d1"
expect_exit 0 "T = 2 --sequence-parallel --check" "$A" $LS --tensor-parallel 2 --sequence-parallel --check -q
expect_grep "^check: passed" "T = 2, SP: check passes"
expect_exit 0 "T = 2 --check" "$WORK/z" $MS --tensor-parallel 2 --check -q
expect_grep "^check: passed" "ZB-V T = 2: check passes"
expect_exit 0 "--context-parallel 2 --check" "$A" $MS --seq 8 --context-parallel 2 --check -q
expect_grep "^check: passed" "C = 2: check passes"
expect_exit 0 "D = 2 X = 2 --check" "$A" $MS --data-parallel 2 --expert-parallel 2 --check -q
expect_grep "^check: passed" "D = 2, X = 2: check passes"
expect_exit 0 "ZB-V D = 2 X = 2 T = 2 --check" "$WORK/z" $LS --data-parallel 2 --expert-parallel 2 --tensor-parallel 2 --check -q
expect_grep "^check: passed" "ZB-V D = 2, X = 2, T = 2: check passes"

# the shared expert contributes, and exactly its output: zero its FC2 and the losses are
# those without it, bit for bit (--lr 0: the weights stay; the second iteration's batch,
# as a resumed run reads it)
zero_fc2() {   # zero_fc2 INDEX: every layer*.moe.shared.fc2.w of the checkpoint's shards set to 0
  python3 - "$1" <<'PY'
import json, os, struct, sys
idx = sys.argv[1]
shards = json.load(open(idx))["shards"]
n = 0
for s in shards:
    p = os.path.join(os.path.dirname(idx), s)
    with open(p, "r+b") as f:
        hl = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(hl))
        for k, v in hdr.items():
            if k.endswith("moe.shared.fc2.w") and not k.startswith("optim."):
                a, b = v["data_offsets"]
                f.seek(8 + hl + a); f.write(b"\0" * (b - a)); n += 1
assert n > 0, "no shared fc2.w in the checkpoint"
PY
}
for par in "" "--tensor-parallel 2 --sequence-parallel"; do
  # shellcheck disable=SC2086
  run n0 "$A" $M --lr 0 --iterations 2 $par
  # shellcheck disable=SC2086
  run s0 "$A" $MS --lr 0 --iterations 1 $par --save "$WORK/kz"
  l0=$(losses "$WORK/n0" | cut -d' ' -f1); ls0=$(losses "$WORK/s0" | cut -d' ' -f1)
  [ -n "$l0" ] && [ -n "$ls0" ] && [ "$l0" != "$ls0" ] && pass "${par:-T = 1}: the shared expert changes the loss ($l0 -> $ls0)" ||
    fail "${par:-T = 1}: the shared expert changes nothing: '$l0' vs '$ls0'"
  if zero_fc2 "$WORK/kz"; then
    # shellcheck disable=SC2086
    run sz "$A" $MS --lr 0 --iterations 1 $par --load "$WORK/kz"
    l1=$(losses "$WORK/n0" | cut -d' ' -f2); lz=$(losses "$WORK/sz" | tr -d ' ')
    [ -n "$l1" ] && [ "$l1" = "$lz" ] && pass "${par:-T = 1}: a zero shared FC2 gives the losses without it exactly ($l1)" ||
      fail "${par:-T = 1}: zero shared FC2: loss '$lz', without a shared expert '$l1'"
  else fail "zeroing the checkpoint's shared fc2.w"; fi
done

# FLOPs: K experts of F and the shared expert of S a token, the router
run fm "$A" $G --num-experts 4 --moe-topk 2 --moe-ffn-hidden 16 --moe-shared-ffn-hidden 8 --iterations 1
run fd "$A" $G --ffn-hidden 40 --iterations 1
python3 - "$WORK/fm" "$WORK/fd" <<'PY' && pass "FLOPs: a dense MLP of K F + S plus the router's" || fail "shared expert FLOPs"
import json, sys
fm, fd = [[d["flops_per_iteration"] for d in json.load(open(f))["per_device"]] for f in sys.argv[1:3]]
N, h, E, mb, layers = 4, 16, 4, 4, 1
for a, b in zip(fm, fd):
    assert abs(a - (b + 3 * 2 * N * h * E * mb * layers)) < 1e-6 * a, (fm, fd)
PY
# activation bytes: the shared expert's hpre [N, fw] and hact [N, f] beside the experts' entry
run bs "$A" $MS --iterations 1
run bm "$A" $M --iterations 1
python3 - "$WORK/bs" "$WORK/bm" <<'PY' && pass "each device keeps the experts' entry plus N (fw + f) values" || fail "shared expert bytes"
import json, sys
s, m = [json.load(open(f))["per_device"] for f in sys.argv[1:3]]
N, S, es = 4, 8, 4
for x, y in zip(s, m):
    assert x["peak_units"] == y["peak_units"], (x, y)
    assert x["resident_peak_bytes"] - y["resident_peak_bytes"] == x["peak_units"] * N * 2 * S * es, (x, y)
PY
grep -q '"experts":{"num":4,"topk":2,"ffn_hidden":64,"aux_loss_coeff":0.01,"score_function":"softmax","pre_softmax":false,"topk_scaling_factor":1,"z_loss_coeff":0,"expert_bias_update_rate":null,"shared_ffn_hidden":8}' "$WORK/bs" &&
  pass "--json names the shared expert's width" || fail "--json experts: $(grep -o '"layer":.*' "$WORK/bs")"

# checkpoints: resume under ZB-H1 with the uninterrupted losses; another width refused
run c4 "$A" $MS --iterations 4
run c2 "$A" $MS --iterations 2 --save "$WORK/ck"
run c2b "$WORK/zh" $MS --iterations 2 --load "$WORK/ck"
cat "$WORK/c2" "$WORK/c2b" > "$WORK/c22"
close "save, --load under ZB-H1: the uninterrupted losses" "$WORK/c22" "$WORK/c4"
expect_exit 1 "--load with another --moe-shared-ffn-hidden" "$A" $M --moe-shared-ffn-hidden 16 --load "$WORK/ck" -q
expect_grep "holds a gpt with --moe-shared-ffn-hidden 8, this run's has 16" "another width named"
expect_exit 1 "--load without a shared expert" "$A" $M --load "$WORK/ck" -q
expect_grep "holds a gpt with --moe-shared-ffn-hidden 8, this run's has 0" "a run without one refused"
run c0 "$A" $M --iterations 1 --save "$WORK/ck0"
expect_exit 1 "--load a checkpoint without one" "$A" $MS --load "$WORK/ck0" -q
expect_grep "holds experts without a shared expert" "a checkpoint without one refused"

# bad flags
expect_exit 2 "--moe-shared-ffn-hidden without --num-experts" "$A" $G --moe-shared-ffn-hidden 8
expect_grep "hint: add --num-experts" "a shared expert alone refused"
expect_exit 2 "--moe-shared-ffn-hidden 5 with --tensor-parallel 2" "$A" $MS --moe-shared-ffn-hidden 5 --tensor-parallel 2
expect_grep "must divide the shared expert's width 5" "a width T does not divide refused"
expect_exit 2 "--moe-shared-ffn-hidden 0" "$A" $M --moe-shared-ffn-hidden 0
expect_grep "moe-shared-ffn-hidden needs an integer from 1" "width 0 refused"

# ---- the shared expert's gate (--moe-shared-expert-gate) ----
MG="$MS --moe-shared-expert-gate"
LG="$LS --moe-shared-expert-gate"
for s in a z; do
  expect_exit 0 "$s gpt gated --check" "$WORK/$s" $MG --check -q
  expect_grep "^check: passed" "$s gpt gated shared expert: check passes"
  expect_exit 0 "$s llama gated --check" "$WORK/$s" $LG --check -q
  expect_grep "^check: passed" "$s llama gated shared expert: check passes"
done
for s in zh po v1; do   # W apart from B, offloaded activations (the gate's entry too), a vocabulary-parallel schedule
  expect_exit 0 "$s gpt gated --check" "$WORK/$s" $MG --check -q
  expect_grep "^check: passed" "$s gpt gated shared expert: check passes"
done
expect_exit 0 "gated --hidden-dropout 0.2 --check" "$A" $MG --hidden-dropout 0.2 --check -q
expect_grep "^check: passed" "gated, dropout: check passes"
expect_exit 0 "gated --context-parallel 2 --check" "$A" $MG --seq 8 --context-parallel 2 --check -q
expect_grep "^check: passed" "gated C = 2: check passes"
expect_exit 0 "gated --no-compute" "$A" $MG --no-compute -q
if [ -x "$WORK/rc" ]; then   # whole-stage recomputation (the gate's entry rebuilt by the recomputed F)
  "$WORK/rc" $MG --check-memory -q > "$WORK/rcg.out" 2>&1
  defs=$(sed -n 's/.*write .memory stage \([0-9]\): input = \([0-9.e-]*\);.*/-D i\1=\2/p' "$WORK/rcg.out" | tr '\n' ' ')
  # shellcheck disable=SC2086
  if [ -n "$defs" ] && build rcg "$top_srcdir/tests/runtime/cases/recompute.pps" $defs; then
    expect_exit 0 "gated recomputation --check" "$WORK/rcg" $MG --check -q
    expect_grep "^check: passed" "recomputation with a gated shared expert: check passes (memory too)"
  else fail "gated recomputation: input shares '$defs'"; fi
fi
expect_exit 0 "gated T = 2 --sequence-parallel --check" "$A" $MG --tensor-parallel 2 --sequence-parallel --check -q
expect_grep "^check: passed" "gated T = 2, SP: check passes"
expect_exit 0 "gated ZB-V T = 2 --check" "$WORK/z" $LG --tensor-parallel 2 --check -q
expect_grep "^check: passed" "gated ZB-V T = 2: check passes"
expect_exit 0 "gated D = 2 X = 2 --check" "$A" $MG --data-parallel 2 --expert-parallel 2 --check -q
expect_grep "^check: passed" "gated D = 2, X = 2: check passes"
for x in "$MG" "$LG"; do
  lay=$(echo "$x" | grep -o 'arch llama' || echo gpt)
  run g1 "$A" $x --iterations 3
  run g2 "$A" $x --iterations 3 --tensor-parallel 2
  close "$lay gated: T = 2 = T = 1 (wg whole on every rank)" "$WORK/g2" "$WORK/g1"
  run g2s "$A" $x --iterations 3 --tensor-parallel 2 --sequence-parallel
  close "$lay gated: T = 2 --sequence-parallel = T = 1 (wg's gradient summed over the group)" "$WORK/g2s" "$WORK/g1"
  run gx1 "$A" $x --iterations 3 --data-parallel 2
  run gx2 "$A" $x --iterations 3 --data-parallel 2 --expert-parallel 2
  close "$lay gated: D = 2 X = 2 = X = 1" "$WORK/gx2" "$WORK/gx1"
done
run gd1 "$A" $MG --hidden-dropout 0.2 --iterations 3
run gd2 "$A" $MG --hidden-dropout 0.2 --iterations 3 --tensor-parallel 2 --sequence-parallel
close "gated, --hidden-dropout 0.2: T = 2 --sequence-parallel = T = 1" "$WORK/gd2" "$WORK/gd1"

# sigmoid(0) = 1/2: wg = 0 and the shared FC2 doubled is the ungated shared expert
half_gate() {   # half_gate INDEX: moe.shared.gate.w set to 0, moe.shared.fc2.w and .b doubled (F32)
  python3 - "$1" <<'PY'
import json, os, struct, sys
idx = sys.argv[1]
n = 0
for s in json.load(open(idx))["shards"]:
    p = os.path.join(os.path.dirname(idx), s)
    with open(p, "r+b") as f:
        hl = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(hl))
        for k, v in hdr.items():
            if k.startswith("optim.") or k == "__metadata__" or ".moe.shared." not in k:
                continue
            assert v["dtype"] == "F32", (k, v["dtype"])
            a, b = v["data_offsets"]
            f.seek(8 + hl + a); x = struct.unpack("<%df" % ((b - a) // 4), f.read(b - a))
            if k.endswith("moe.shared.gate.w"): y = [0.0] * len(x); n += 1
            elif k.endswith("moe.shared.fc2.w") or k.endswith("moe.shared.fc2.b"): y = [2 * t for t in x]
            else: continue
            f.seek(8 + hl + a); f.write(struct.pack("<%df" % len(y), *y))
assert n > 0, "no moe.shared.gate.w in the checkpoint"
PY
}
for par in "" "--tensor-parallel 2 --sequence-parallel"; do
  # shellcheck disable=SC2086
  run u0 "$A" $MS --lr 0 --iterations 2 $par
  # shellcheck disable=SC2086
  run h0 "$A" $MG --lr 0 --iterations 1 $par --save "$WORK/kh"
  if half_gate "$WORK/kh"; then
    # shellcheck disable=SC2086
    run hz "$A" $MG --lr 0 --iterations 1 $par --load "$WORK/kh"
    l1=$(losses "$WORK/u0" | cut -d' ' -f2); lz=$(losses "$WORK/hz" | tr -d ' ')
    [ -n "$l1" ] && python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); assert abs(a - b) <= 1e-6 * abs(b)" "$lz" "$l1" 2>/dev/null &&
      pass "${par:-T = 1} gated: wg = 0 and 2 x FC2 give the ungated losses ($lz vs $l1)" ||
      fail "${par:-T = 1} gated: wg = 0, 2 x FC2: loss '$lz', ungated '$l1'"
  else fail "editing the checkpoint's gate and shared FC2"; fi
done

# FLOPs and bytes: the gate's products, its store entry
run gf "$A" $MG --iterations 1
python3 - "$WORK/gf" "$WORK/bs" <<'PY' && pass "gated FLOPs: 3 x 2 N h a layer and microbatch more; bytes: n (8 + 4 (h + 1)) a layer" || fail "gate FLOPs / bytes"
import json, sys
g, s = [json.load(open(f))["per_device"] for f in sys.argv[1:3]]
N, h, mb, layers, es = 4, 16, 4, 1, 4
for x, y in zip(g, s):
    assert abs(x["flops_per_iteration"] - y["flops_per_iteration"] - 3 * 2 * N * h * mb * layers) < 1e-9 * x["flops_per_iteration"], (x, y)
    assert x["peak_units"] == y["peak_units"], (x, y)
    assert x["resident_peak_bytes"] - y["resident_peak_bytes"] == x["peak_units"] * layers * N * (8 + (h + 1) * es), (x, y)
PY
grep -q '"shared_ffn_hidden":8,"shared_gate":true}' "$WORK/gf" && pass "--json says shared_gate" ||
  fail "--json experts with the gate: $(grep -o '"experts":{[^}]*}' "$WORK/gf")"
grep -q '"shared_gate"' "$WORK/bs" && fail "--json: shared_gate without the gate" || pass "--json: no shared_gate without it"

# checkpoints: resumed with the uninterrupted losses; a mismatch refused naming the flag
run gc4 "$A" $MG --iterations 4
run gc2 "$A" $MG --iterations 2 --save "$WORK/gk"
run gc2b "$WORK/zh" $MG --iterations 2 --load "$WORK/gk"
cat "$WORK/gc2" "$WORK/gc2b" > "$WORK/gc22"
close "gated: save, --load under ZB-H1: the uninterrupted losses" "$WORK/gc22" "$WORK/gc4"
expect_exit 1 "--load a gated checkpoint without the gate" "$A" $MS --load "$WORK/gk" -q
expect_grep "holds a gpt with --moe-shared-expert-gate, this run's is without" "a gated checkpoint refused without the flag"
expect_exit 1 "--load an ungated checkpoint with the gate" "$A" $MG --load "$WORK/ck" -q
expect_grep "holds a gpt without --moe-shared-expert-gate, this run's has it" "an ungated checkpoint refused with the flag"

expect_exit 2 "--moe-shared-expert-gate without --moe-shared-ffn-hidden" "$A" $M --moe-shared-expert-gate
expect_grep "moe-shared-expert-gate gates the shared expert of --moe-shared-ffn-hidden" "a gate without a shared expert refused"
finish
