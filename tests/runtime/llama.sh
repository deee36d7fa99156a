#!/bin/sh
# llama.sh: the gpt model's Llama-style layer through the runtime (--arch llama: a
# SwiGLU MLP, RMS norms, rotary position embeddings, no linear biases; each also alone:
# --mlp, --norm, --position, --bias; runtime/model_gpt.c). Its backward is checked
# against finite differences in tests/kernels/gpt_grad; here, against independent
# figures:
#  - --check (the pipelined run against one device) passes for 1F1B, a V shape
#    (ZB-V), Vocab-1, Vocab-2, PipeOffload (offloaded activations), whole-stage
#    recomputation, --data-parallel 2 with the distributed optimizer, and under mpirun;
#  - the loss falls over 8 iterations of Adam;
#  - T = 2 and T = 2 with --sequence-parallel give T = 1's losses within 1e-6 (the
#    SwiGLU matrix split by both its halves), and --check passes there;
#  - each device keeps exactly the activation bytes the layer saves, computed here:
#    against GPT-2's layer a layer keeps one F32 statistic a token and norm instead of
#    two, and 3 f (gate, up, their product) instead of 2 x 4h MLP values a token; the
#    last stage's final norm one statistic a token instead of two;
#  - ppsc's activation unit from the model { } keys equals what the runtime keeps for
#    a middle stage, byte for byte, for GPT-2's and Llama's layer;
#  - the model { } block's keys (swiglu, rmsnorm, rope, bias, ffn_hidden) reach the
#    runtime, and a flag overrides them;
#  - checkpoints record the layer (mlp, norm, position, bias, ffn_hidden) and resume
#    under another schedule with the uninterrupted losses; a run with another layer is
#    refused, naming the flag;
#  - bad flags are refused (exit 2) with the reason.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build z "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 || { fail "build zb_v"; finish; }
A=$WORK/a; Z=$WORK/z
G="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --optimizer adam --lr 0.01"
L="$G --arch llama --ffn-hidden 24"

# --check on the schedules (every one compiled here at P = 2 or 4)
expect_exit 0 "1F1B --arch llama --check" "$A" $L --iterations 2 --check -q
expect_grep "^check: passed" "1F1B: check passes"
expect_exit 0 "ZB-V --arch llama --check" "$Z" $L --iterations 2 --check -q
expect_grep "^check: passed" "ZB-V: check passes"
for s in vocab_1f1b vocab_v_half pipeoffload; do
  if build "$s" "$top_srcdir/stdlib/$s.pps" -D P=4; then
    expect_exit 0 "$s (P = 4) --arch llama --check" "$WORK/$s" $L --check -q
    expect_grep "^check: passed" "$s: check passes"
  else fail "build $s"; fi
done
# (recompute.pps's stage input shares: the values the runtime's notes name for this layer)
if build rc "$top_srcdir/tests/runtime/cases/recompute.pps"; then
  "$WORK/rc" $L --check-memory -q > "$WORK/rc.out" 2>&1
  defs=$(sed -n 's/.*write .memory stage \([0-9]\): input = \([0-9.e-]*\);.*/-D i\1=\2/p' "$WORK/rc.out" | tr '\n' ' ')
  [ -n "$defs" ] && pass "recomputation: the notes name the input shares ($defs)" || fail "recomputation: no input shares named"
  if build rc2 "$top_srcdir/tests/runtime/cases/recompute.pps" $defs; then
    expect_exit 0 "recomputation --arch llama --check" "$WORK/rc2" $L --check -q
    expect_grep "^check: passed" "recomputation: check passes (memory too)"
  else fail "build recompute.pps $defs"; fi
else fail "build recompute.pps"; fi
expect_exit 1 "a wrong SwiGLU gradient fails --check" env "PPSRT_FAULT=grad=s1.l0.fc.w*1.001" "$A" $L --check -q
expect_grep "grad s1.l0.fc.w .*DIFFERS" "the wrong tensor named"
for one in "--mlp swiglu" "--norm rmsnorm" "--position rope" "--bias off"; do
  expect_exit 0 "1F1B $one --check" "$A" $G $one --check -q
done
expect_exit 0 "--data-parallel 2 --distributed-optimizer --arch llama --check" "$A" $L --data-parallel 2 \
  --distributed-optimizer --check -q
expect_grep "^check: passed" "DP x 2, distributed optimizer: check passes"
if have_mpi; then
  expect_exit 0 "mpirun -np 2 --arch llama --check" mpirun_np 2 "$A" $L --check -q
  expect_grep "^check: passed" "MPI: check passes"
else skip "--arch llama under MPI (libppsrt without MPI, or no mpirun)"; fi

# it learns
run l8 "$A" $L --iterations 8
grep -q '"layer":{"mlp":"swiglu","norm":"rmsnorm","position":"rope","bias":false,"embeddings":"untied","ffn_hidden":24,"hidden_dropout":0,"attention_dropout":0}' "$WORK/l8" &&
  pass "--json names the layer" || fail "--json layer: $(grep -o '"layer":[^}]*}' "$WORK/l8")"
python3 - "$WORK/l8" <<'PY' && pass "the loss falls over 8 iterations: $(losses "$WORK/l8")" || fail "the loss does not fall: $(losses "$WORK/l8")"
import json, sys
l = [it["loss"] for it in json.load(open(sys.argv[1]))["iterations"]]
assert len(l) == 8 and l[-1] < 0.9 * l[0], l
PY

# tensor parallelism (and sequence parallelism): T = 1's losses
run t1 "$A" $L --iterations 3
run t2 "$A" $L --iterations 3 --tensor-parallel 2
close "T = 2 = T = 1 (SwiGLU split by both halves)" "$WORK/t2" "$WORK/t1"
run t2s "$A" $L --iterations 3 --tensor-parallel 2 --sequence-parallel
close "T = 2 --sequence-parallel = T = 1 (RMS norms' gammas summed over the group)" "$WORK/t2s" "$WORK/t1"
expect_exit 0 "T = 2 --sequence-parallel --check" "$A" $L --tensor-parallel 2 --sequence-parallel --check -q
expect_grep "^check: passed" "T = 2, SP: check passes"
expect_exit 0 "ZB-V T = 2 --check" "$Z" $L --tensor-parallel 2 --check -q
expect_grep "^check: passed" "ZB-V T = 2: check passes"

# activation bytes: Llama's layer against GPT-2's, both measured
run g1 "$A" $G --iterations 1
run m1 "$A" $L --iterations 1
python3 - "$WORK/g1" "$WORK/m1" <<'PY' && pass "each device keeps exactly Llama's layer's bytes" || fail "activation bytes of Llama's layer"
import json, sys
g, m = [json.load(open(f))["per_device"] for f in sys.argv[1:3]]
N, h, F, es = 4, 16, 24, 4                      # tokens, hidden, --ffn-hidden, F32
def layer(llama):                               # what differs: norm statistics, MLP buffers
    return N * (2 * 4 if llama else 4 * 4) + (N * 3 * F * es if llama else 2 * N * 4 * h * es)
d = layer(0) - layer(1)
assert g[0]["peak_units"] == m[0]["peak_units"] == 2, (g[0]["peak_units"], m[0]["peak_units"])
want0 = g[0]["resident_peak_bytes"] - 2 * d       # two units of one layer each
want1 = g[1]["resident_peak_bytes"] - d - N * 4   # one unit, and the final norm's mean
assert m[0]["resident_peak_bytes"] == want0, (m[0]["resident_peak_bytes"], want0)
assert m[1]["resident_peak_bytes"] == want1, (m[1]["resident_peak_bytes"], want1)
PY

# ppsc's activation unit from the model { } keys = what the runtime keeps for a
# middle stage's layers (device 1 of 1F1B at P = 4: no embedding, no output layer),
# byte for byte, for GPT-2's layer and for Llama's
for a in 0 1; do
  printf 'import "1f1b.pps";\nschedule t(P = 4, m = 8) {\n  use one_f_one_b(P = P, m = m);\n' > "$WORK/u$a.pps"
  printf '  model { layers = 8; hidden = 16; heads = 4; query_groups = 2; seq = 4; micro_batch = 1; vocab = 32; dtype_bytes = 4;\n' >> "$WORK/u$a.pps"
  printf '          swiglu = %s; rmsnorm = %s; rope = %s; bias = %s; ffn_hidden = 24; }\n}\n' $a $a $a $((1 - a)) >> "$WORK/u$a.pps"
  "$PPSC" sim "$WORK/u$a.pps" --json > "$WORK/u$a.sim" 2>"$WORK/err" || fail "ppsc sim u$a: $(cat "$WORK/err")"
  if build u$a "$WORK/u$a.pps"; then
    run u$a.run "$WORK/u$a" --model gpt
    python3 - "$WORK/u$a.sim" "$WORK/u$a.run" <<'PY' && pass "layer $a: ppsc's unit_bytes = the runtime's middle stage" || fail "layer $a: ppsc's unit_bytes vs the runtime's"
import json, sys
s, r = [json.load(open(f)) for f in sys.argv[1:3]]
assert s["unit_bytes"] == r["per_device"][1]["unit_bytes_first_stage"] == r["per_device"][2]["unit_bytes_first_stage"], \
    (s["unit_bytes"], [d["unit_bytes_first_stage"] for d in r["per_device"]])
PY
  else fail "build u$a"; fi
done
grep -q '"mlp":"swiglu","norm":"rmsnorm","position":"rope","bias":false' "$WORK/u1.run" && pass "the keys set the runtime's layer" ||
  fail "the runtime's layer from the keys: $(grep -o '"layer":{[^}]*}' "$WORK/u1.run")"

# the model { } block's keys reach the runtime; a flag wins over them
sed 's/^\( *\)devices P;/\1devices P;\n\1model { swiglu = 1; rmsnorm = 1; rope = 1; bias = 0; ffn_hidden = 24; }/' \
  "$top_srcdir/stdlib/1f1b.pps" > "$WORK/keys.pps"
if grep -q 'swiglu = 1' "$WORK/keys.pps" && build k "$WORK/keys.pps" -D P=2 -D m=4; then
  run k1 "$WORK/k" $G --iterations 3
  close "model { swiglu rmsnorm rope bias ffn_hidden } = --arch llama --ffn-hidden 24" "$WORK/k1" "$WORK/t1"
  run k2 "$WORK/k" $G --iterations 3 --arch gpt --ffn-hidden 64
  run g3 "$A" $G --iterations 3
  close "--arch gpt --ffn-hidden 64 over the block = GPT-2's layer" "$WORK/k2" "$WORK/g3"
else fail "a schedule with the Llama keys in its model block"; fi

# checkpoints: the layer recorded; resumed under ZB-V with the uninterrupted losses
GS=$(echo "$L" | sed 's/--optimizer adam/--optimizer sgd/')
run c2 "$A" $GS --iterations 2 --layers-per-stage 2 --save "$WORK/ck"
run c4 "$A" $GS --iterations 4 --layers-per-stage 2
for kv in '"mlp":"swiglu"' '"norm":"rmsnorm"' '"position":"rope"' '"bias":"off"' '"ffn_hidden":"24"'; do
  grep -q "$kv" "$WORK/ck" && pass "the index records $kv" || fail "the index lacks $kv"
done
run r2 "$Z" $GS --iterations 2 --load "$WORK/ck"
python3 - "$WORK/c4" "$WORK/r2" <<'PY' && pass "resumed under ZB-V: the uninterrupted losses" || fail "resumed losses: $(losses "$WORK/r2") vs $(losses "$WORK/c4")"
import json, sys
a, b = [[it["loss"] for it in json.load(open(f))["iterations"]] for f in sys.argv[1:3]]
assert len(b) == 2 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a[2:], b)), (a, b)
PY
# RoPE's base comes back with the checkpoint (unless --rope-base is given again)
run b2 "$A" $GS --iterations 2 --layers-per-stage 2 --rope-base 500 --save "$WORK/ckb"
run b4 "$A" $GS --iterations 4 --layers-per-stage 2 --rope-base 500
run br "$A" $GS --iterations 2 --layers-per-stage 2 --load "$WORK/ckb"
printf '%s\n' "$(grep -o '"loss":[-0-9.e+]*,"time_s"' "$WORK/b4" | sed -n 3,4p)" > "$WORK/b4b"
close "saved with --rope-base 500, resumed without the flag: the uninterrupted iterations 3-4" "$WORK/br" "$WORK/b4b"
run bx "$A" $GS --iterations 2 --layers-per-stage 2 --load "$WORK/ckb" --rope-base 10000
[ "$(losses "$WORK/bx")" != "$(losses "$WORK/br")" ] && pass "--rope-base given on --load wins over the checkpoint's" ||
  fail "--rope-base 10000 on --load changed nothing"
GSG=$(echo "$G" | sed 's/--optimizer adam/--optimizer sgd/')
expect_exit 1 "GPT-2's layer refuses a Llama checkpoint" "$A" $GSG --layers-per-stage 2 --ffn-hidden 24 --load "$WORK/ck"
expect_grep "holds a gpt with --mlp swiglu, this run's has --mlp gelu" "the layer named"
expect_exit 1 "another --ffn-hidden is refused" "$A" $GS --layers-per-stage 2 --ffn-hidden 32 --load "$WORK/ck"
expect_grep "holds a gpt with --ffn-hidden 24, this run's has 32" "the width named"
expect_exit 1 "--position learned is refused" "$A" $GS --layers-per-stage 2 --position learned --load "$WORK/ck"
expect_grep "hint: run with --position rope" "the flag to give named"
# malformed layer fields in an index (its shards beside it, unchanged)
sed 's/"mlp":"swiglu"/"mlp":"relu"/' "$WORK/ck" > "$WORK/ck.bad" && cp "$WORK/ck.bad" "$WORK/ck"
expect_exit 1 "an index with mlp relu" "$A" $GS --layers-per-stage 2 --load "$WORK/ck"
expect_grep "metadata field 'mlp' is 'relu', not 'gelu' or 'swiglu'" "the field and its values named"
sed 's/"mlp":"relu"/"mlp":"swiglu"/; s/"rope_base":"[^"]*"/"rope_base":"0.5"/' "$WORK/ck" > "$WORK/ck.bad" && cp "$WORK/ck.bad" "$WORK/ck"
expect_exit 1 "an index with rope_base 0.5" "$A" $GS --layers-per-stage 2 --load "$WORK/ck"
expect_grep "metadata field 'rope_base' is 0.5: out of range (above 1)" "the base named"

# refused flags
expect_exit 2 "--arch with the mlp model" "$A" --model mlp --arch llama
expect_grep "choose the gpt model's layer" "the model named"
expect_exit 2 "--arch bad" "$A" $G --arch bert
expect_grep "--arch needs gpt or llama" "the values named"
expect_exit 2 "--mlp relu" "$A" $G --mlp relu
expect_exit 2 "--bias maybe" "$A" $G --bias maybe
expect_exit 2 "--rope-base 1" "$A" $G --rope-base 1
expect_grep "--rope-base needs a number above 1" "the base's range named"
expect_exit 2 "RoPE with an odd head size" "$A" --model gpt --hidden 12 --heads 4 --position rope
expect_grep "head size --hidden 12 / --heads 4 = 3 must be even" "the head size named"
expect_exit 2 "--ffn-hidden 25 at T = 2" "$A" $L --ffn-hidden 25 --tensor-parallel 2
expect_grep "must divide the MLP's width 25" "the width named"
finish
