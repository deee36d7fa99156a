#!/bin/sh
# normeps.sh: the gpt model's norm epsilon (--norm-epsilon X, model { norm_epsilon },
# Megatron-LM's --norm-epsilon: every norm's, passed to the backend's layernorm_fwd) and
# the QKV-only bias (--add-qkv-bias, model { qkv_bias = 1 }: Qwen2's layer). The kernels
# at a non-default eps are checked against the naive formula in tests/kernels
# (test_kernels) and CPU against CUDA in tests/gpu/cuda_kernels; the whole Qwen2 forward
# (eps 1e-6, q/k/v biases) against an independent reference in hf_qwen2.sh. Here:
#  - --check (the pipelined run against one device) passes with --norm-epsilon 1e-6 on
#    1F1B, ZB-V and Vocab-1, Llama's layer and GPT-2's (layer norms), --qk-layernorm, and
#    at --tensor-parallel 2; with --add-qkv-bias at T = 1, T = 2 (the bias split by the
#    QKV's columns) and T = 2 --sequence-parallel;
#  - the eps reaches the norms: the loss at --norm-epsilon 1 is not the loss at the
#    default (by more than 1e-3), 1e-5 given is the default exactly, and 1e-6 moves the
#    loss (the rows' mean squares are about 1e-2 here); Vocab-1 (its final norm its own
#    call) at eps 0.5 gives 1F1B's losses;
#  - --add-qkv-bias adds exactly L (Hq + 2 Hkv) D parameters a device (/ T at T = 2),
#    trains them (the losses move from iteration 2) and T = 2 gives T = 1's losses;
#  - ppsc's static bytes from model { qkv_bias = 1 } are the runtime's parameters x
#    the bytes of one, device by device, and both keys reach the runtime's layer;
#  - checkpoints record norm_epsilon and qkv_bias; resuming with another eps or
#    without the bias is refused naming the flag;
#  - bad values are refused: --norm-epsilon 0, -1, inf, nan, x (exit 2); the flags with
#    --model mlp; model { norm_epsilon = 0 } and { qkv_bias = 2 } by ppsc.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
gpt_setup

chk() {   # chk LABEL PROGRAM FLAGS...: --check passes
  label=$1; shift
  expect_exit 0 "$label --check" "$@" --iterations 2 --check -q
  expect_grep "^check: passed" "$label: check passes"
}
chk "L 1F1B eps 1e-6" "$A" $L --norm-epsilon 1e-6
chk "L ZB-V eps 1e-6" "$Z" $L --norm-epsilon 1e-6
chk "G 1F1B eps 1e-6 (layer norms)" "$A" $G --norm-epsilon 1e-6
chk "L eps 1e-6 --qk-layernorm" "$A" $L --norm-epsilon 1e-6 --qk-layernorm
chk "L eps 1e-6 T = 2" "$A" $L --norm-epsilon 1e-6 --tensor-parallel 2
chk "L --add-qkv-bias eps 1e-6" "$A" $L --add-qkv-bias --norm-epsilon 1e-6
chk "L --add-qkv-bias T = 2" "$A" $L --add-qkv-bias --tensor-parallel 2
chk "L ZB-V --add-qkv-bias T = 2 SP" "$Z" $L --add-qkv-bias --tensor-parallel 2 --sequence-parallel

# the eps reaches the norms: losses of the same weights and data at several eps
first() { losses "$1" | cut -d' ' -f1; }
differ() {   # differ LABEL A B TOL: |A - B| > TOL |B|
  python3 -c "import sys; a, b, t = map(float, sys.argv[1:4]); assert abs(a - b) > t * abs(b)" "$2" "$3" "$4" 2>/dev/null &&
    pass "$1: $2 vs $3" || fail "$1: $2 vs $3 (expected a difference above $4 relative)"
}
for lay in L G; do
  eval "X=\"\$$lay\""
  run e0 "$A" $X --iterations 1
  run e5 "$A" $X --iterations 1 --norm-epsilon 1e-5
  run e6 "$A" $X --iterations 1 --norm-epsilon 1e-6
  run e1 "$A" $X --iterations 1 --norm-epsilon 1
  [ "$(first "$WORK/e5")" = "$(first "$WORK/e0")" ] && pass "$lay: --norm-epsilon 1e-5 is the default" ||
    fail "$lay: --norm-epsilon 1e-5 $(first "$WORK/e5") vs the default $(first "$WORK/e0")"
  differ "$lay: eps 1 moves the loss" "$(first "$WORK/e1")" "$(first "$WORK/e0")" 1e-3
  differ "$lay: eps 1e-6 moves the loss" "$(first "$WORK/e6")" "$(first "$WORK/e0")" 1e-7
done

# a vocabulary-parallel schedule's final norm (its own call, on every device): its loss
# at eps 0.5 is 1F1B's, and --check passes with the bias
if build v "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4; then
  chk "Vocab-1 eps 1e-6 --add-qkv-bias" "$WORK/v" $L --norm-epsilon 1e-6 --add-qkv-bias
  run v5 "$WORK/v" $L --iterations 3 --norm-epsilon 0.5
  run a5 "$A" $L --iterations 3 --norm-epsilon 0.5
  close "Vocab-1 at eps 0.5 = 1F1B at eps 0.5 (the final norm's eps)" "$WORK/v5" "$WORK/a5"
else fail "build vocab_1f1b"; fi

# --add-qkv-bias: the parameters it adds, that they train, T = 2 = T = 1
run q0 "$A" $L --iterations 3
run q1 "$A" $L --iterations 3 --add-qkv-bias
run q2 "$A" $L --iterations 3 --add-qkv-bias --tensor-parallel 2
python3 - "$WORK/q0" "$WORK/q1" "$WORK/q2" <<'PY' && pass "--add-qkv-bias adds L (Hq + 2 Hkv) D parameters a device (/ T)" || fail "--add-qkv-bias's parameters"
import json, sys
a, b, t = [json.load(open(f))["per_device"] for f in sys.argv[1:4]]
q = (4 + 2 * 2) * 4          # (Hq + 2 Hkv) D
L = 1                        # layers a device (1F1B, P = 2, the default --layers-per-stage)
for d in range(2):
    assert b[d]["parameters"] - a[d]["parameters"] == L * q, (d, a[d]["parameters"], b[d]["parameters"])
PY
l0=$(losses "$WORK/q0"); l1=$(losses "$WORK/q1")
[ "$(first "$WORK/q0")" = "$(first "$WORK/q1")" ] && [ "$l0" != "$l1" ] &&
  pass "the bias starts at 0 and trains: $l1 vs $l0" || fail "--add-qkv-bias losses: $l1 vs $l0"
close "--add-qkv-bias T = 2 = T = 1 (the bias split by the QKV's columns)" "$WORK/q2" "$WORK/q1"
run b1 "$A" $L --iterations 3 --bias on
run b2 "$A" $L --iterations 3 --bias on --add-qkv-bias
close "--add-qkv-bias under --bias on changes nothing" "$WORK/b2" "$WORK/b1"

# ppsc: static bytes from model { qkv_bias } = the runtime's parameters x bytes a parameter
for k in 0 1; do
  printf 'import "1f1b.pps";\nschedule t(P = 2, m = 4) {\n  use one_f_one_b(P = P, m = m);\n' > "$WORK/k$k.pps"
  printf '  model { layers = 4; hidden = 16; heads = 4; query_groups = 2; seq = 4; micro_batch = 1; vocab = 32; dtype_bytes = 4;\n' >> "$WORK/k$k.pps"
  printf '          swiglu = 1; rmsnorm = 1; rope = 1; bias = 0; ffn_hidden = 24; qkv_bias = %s; norm_epsilon = 1e-6; }\n}\n' $k >> "$WORK/k$k.pps"
  "$PPSC" sim "$WORK/k$k.pps" --json > "$WORK/k$k.sim" 2>"$WORK/err" || fail "ppsc sim k$k: $(cat "$WORK/err")"
  if build k$k "$WORK/k$k.pps"; then
    run k$k.run "$WORK/k$k" --model gpt --optimizer adam
    python3 - "$WORK/k$k.sim" "$WORK/k$k.run" <<'PY' && pass "qkv_bias $k: ppsc's static bytes = the runtime's parameters x 16 B" || fail "qkv_bias $k: ppsc's static bytes vs the runtime's parameters"
import json, sys
s, r = [json.load(open(f)) for f in sys.argv[1:3]]
sb = [d["static_bytes"] for d in s["per_device"]]
pr = [d["parameters"] for d in r["per_device"]]
per = 4 + 4 + 8              # dtype_bytes 4 (F32: no master copy), F32 gradient, Adam's moments
assert sb == [p * per for p in pr], (sb, pr)
PY
  else fail "build k$k"; fi
done
grep -q '"qkv_bias":true' "$WORK/k1.run" && grep -q '"norm_epsilon":1e-06' "$WORK/k1.run" &&
  pass "model { qkv_bias = 1; norm_epsilon = 1e-6 } reach the runtime's layer" ||
  fail "the keys' layer: $(grep -o '"layer":{[^}]*}' "$WORK/k1.run")"
if grep -q '"qkv_bias"' "$WORK/k0.run"; then fail "qkv_bias = 0 shows qkv_bias"; else pass "qkv_bias = 0: no field"; fi
run kl "$A" $L --iterations 3 --norm-epsilon 1e-6 --add-qkv-bias --layers-per-stage 2
run kk "$WORK/k1" --model gpt --optimizer adam --lr 0.01 --iterations 3
close "the keys' model = --norm-epsilon 1e-6 --add-qkv-bias" "$WORK/kk" "$WORK/kl"

# checkpoints: the fields, and resuming with another eps or without the bias refused
mkdir -p "$WORK/ck"
run s1 "$A" $L --norm-epsilon 1e-6 --add-qkv-bias --iterations 1 --save "$WORK/ck/ck"
cp "$WORK/ck/ck" "$WORK/out"
expect_grep '"norm_epsilon":"9.9999999999999995e-07"' "the index records norm_epsilon"
expect_grep '"qkv_bias":"on"' "the index records qkv_bias on"
expect_exit 0 "resume with the same flags" "$A" $L --norm-epsilon 1e-6 --add-qkv-bias --iterations 1 --load "$WORK/ck/ck"
expect_exit 1 "resume at the default eps refused" "$A" $L --add-qkv-bias --iterations 1 --load "$WORK/ck/ck"
expect_grep "hint: run with --norm-epsilon 9.9999999999999995e-07" "the refusal names --norm-epsilon"
expect_exit 1 "resume without --add-qkv-bias refused" "$A" $L --norm-epsilon 1e-6 --iterations 1 --load "$WORK/ck/ck"
expect_grep "hint: run with --add-qkv-bias" "the refusal names --add-qkv-bias"

# refusals
for v in 0 -1 inf nan x 1e-400; do
  expect_exit 2 "--norm-epsilon $v refused" "$A" $L --norm-epsilon $v
  expect_grep "norm-epsilon needs a finite number above 0" "--norm-epsilon $v: the message says what it needs"
done
expect_exit 2 "--norm-epsilon with --model mlp refused" "$A" --model mlp --norm-epsilon 1e-6
expect_grep "add --model gpt" "the mlp refusal hints --model gpt"
expect_exit 2 "--add-qkv-bias with --model mlp refused" "$A" --model mlp --add-qkv-bias
for kv in "norm_epsilon = 0" "qkv_bias = 2"; do
  printf 'schedule s(P = 2, m = 4) {\n  devices P; microbatches m; placement linear;\n  model { layers = 2; hidden = 16; %s; }\n}\n' "$kv" > "$WORK/bad.pps"
  expect_exit 1 "ppsc refuses model { $kv }" "$PPSC" sim "$WORK/bad.pps"
  expect_grep "model ${kv%% *} must be" "model { $kv }: the message names the key"
done
finish
