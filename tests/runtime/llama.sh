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
#  - RoPE scaling (--rope-scaling linear|llama3 and its parameters; the frequencies
#    against HF's definition in hf.sh): llama3's limits are the other scalings bit for
#    bit (an original context of 1 position: linear by the factor; of 4096: none), linear
#    by 1 is none, a real llama3 band split changes the losses; --json shows it; the
#    checkpoint records it and --load restores each part unless given (a resumed run has
#    the uninterrupted losses), a given part wins, a parameter the restored scaling does
#    not take, bad parameters and malformed index fields are refused naming them; on
#    the emulated CUDA backend (when built) a llama3 run gives the CPU's loss within
#    5e-4 (bfloat16), well apart from the unscaled loss;
#  - bad flags are refused (exit 2) with the reason.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
gpt_setup

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
grep -q '"layer":{"mlp":"swiglu","norm":"rmsnorm","position":"rope","bias":false,"embeddings":"untied","ffn_hidden":24,"hidden_dropout":0,"attention_dropout":0,"rope":{"base":10000,"scaling":"none"}}' "$WORK/l8" &&
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
# RoPE scaling (--rope-scaling; the frequencies against HF's definition: hf.sh). Here
# D = 4: pair 0 has frequency 1 (wavelength 2 pi), pair 1 base^-1/2 = 0.01 (628).
# Limits that are the other scalings exactly, bit for bit: llama3 with an original
# context of 1 position puts every pair in the low band (f / factor) = linear; with 4096
# every pair in the high band (f) = none; linear by 1 = none. llama3 over 64 positions
# (pair 0 high, pair 1 low) changes the losses.
run sn "$A" $GS --iterations 2
run sl "$A" $GS --iterations 2 --rope-scaling linear --rope-scaling-factor 8
run s1 "$A" $GS --iterations 2 --rope-scaling llama3 --rope-original-max-positions 1
run s4k "$A" $GS --iterations 2 --rope-scaling llama3 --rope-original-max-positions 4096
run sl1 "$A" $GS --iterations 2 --rope-scaling linear --rope-scaling-factor 1
run s64 "$A" $GS --iterations 2 --rope-scaling llama3 --rope-original-max-positions 64
same() { [ -n "$(losses "$2")" ] && [ "$(losses "$2")" = "$(losses "$3")" ] && pass "$1: $(losses "$2")" || fail "$1: '$(losses "$2")' vs '$(losses "$3")'"; }
same "llama3 over 1 original position (all pairs low: f / 8) = linear by 8, bit for bit" "$WORK/s1" "$WORK/sl"
same "llama3 over 4096 original positions (all pairs high: f) = no scaling, bit for bit" "$WORK/s4k" "$WORK/sn"
same "linear by 1 = no scaling, bit for bit" "$WORK/sl1" "$WORK/sn"
[ "$(losses "$WORK/sl")" != "$(losses "$WORK/sn")" ] && [ "$(losses "$WORK/s64")" != "$(losses "$WORK/sn")" ] &&
  [ "$(losses "$WORK/s64")" != "$(losses "$WORK/sl")" ] && pass "linear by 8 and llama3 over 64 positions change the losses" ||
  fail "scaling changed nothing: $(losses "$WORK/sn") / $(losses "$WORK/sl") / $(losses "$WORK/s64")"
grep -q '"rope":{"base":10000,"scaling":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_positions":64}}' \
  "$WORK/s64" && grep -q '"rope":{"base":10000,"scaling":"linear","factor":8}}' "$WORK/sl" &&
  pass "--json's layer shows the scaling and its parameters" || fail "--json rope: $(grep -o '"rope":[^}]*}' "$WORK/s64" "$WORK/sl")"
run sg "$A" $GSG --iterations 1
grep -q '"ffn_hidden":64,"hidden_dropout":0,"attention_dropout":0,"rope":null}' "$WORK/sg" && pass "--json: rope null with learned positions" || fail "--json rope with learned positions"
# checkpoints record the scaling; --load restores each part unless given
S3="--rope-scaling llama3 --rope-scaling-factor 4 --rope-low-freq-factor 0.5 --rope-high-freq-factor 2 --rope-original-max-positions 64"
run q2 "$A" $GS --iterations 2 --layers-per-stage 2 $S3 --save "$WORK/cks"
run q4 "$A" $GS --iterations 4 --layers-per-stage 2 $S3
for kv in '"rope_scaling":"llama3"' '"rope_scaling_factor":"4"' '"rope_low_freq_factor":"0.5"' '"rope_high_freq_factor":"2"' \
          '"rope_original_max_positions":"64"'; do
  grep -q "$kv" "$WORK/cks" && pass "the index records $kv" || fail "the index lacks $kv"
done
run qr "$Z" $GS --iterations 2 --load "$WORK/cks"
printf '%s\n' "$(grep -o '"loss":[-0-9.e+]*,"time_s"' "$WORK/q4" | sed -n 3,4p)" > "$WORK/q4b"
close "saved with llama3 scaling, resumed under ZB-V without the flags: the uninterrupted iterations 3-4" "$WORK/qr" "$WORK/q4b"
grep -q '"rope":{"base":10000,"scaling":"llama3","factor":4,"low_freq_factor":0.5,"high_freq_factor":2,"original_max_positions":64}}' \
  "$WORK/qr" && pass "  its --json shows the restored scaling" || fail "restored scaling: $(grep -o '"rope":[^}]*}' "$WORK/qr")"
run qn "$A" $GS --iterations 2 --layers-per-stage 2 --load "$WORK/cks" --rope-scaling none
run qf "$A" $GS --iterations 2 --layers-per-stage 2 --load "$WORK/cks" --rope-scaling-factor 16
grep -q '"scaling":"none"}' "$WORK/qn" && [ "$(losses "$WORK/qn")" != "$(losses "$WORK/qr")" ] &&
  pass "--rope-scaling none on --load wins over the checkpoint's llama3" || fail "--rope-scaling none on --load: $(grep -o '"rope":[^}]*}' "$WORK/qn")"
grep -q '"scaling":"llama3","factor":16,"low_freq_factor":0.5' "$WORK/qf" && [ "$(losses "$WORK/qf")" != "$(losses "$WORK/qr")" ] &&
  pass "--rope-scaling-factor 16 alone on --load: the checkpoint's llama3 and other parameters, the given factor" ||
  fail "--rope-scaling-factor on --load: $(grep -o '"rope":[^}]*}' "$WORK/qf")"
expect_exit 1 "--rope-low-freq-factor on --load of a checkpoint without scaling" "$A" $GS --layers-per-stage 2 --load "$WORK/ckb" \
  --rope-low-freq-factor 2
expect_grep "--rope-low-freq-factor needs --rope-scaling llama3: checkpoint '.*' was saved with --rope-scaling none" "  the flag and the checkpoint's scaling named"
expect_exit 1 "--rope-high-freq-factor 0.25 on --load of low 0.5" "$A" $GS --layers-per-stage 2 --load "$WORK/cks" --rope-high-freq-factor 0.25
expect_grep "needs 0 < --rope-low-freq-factor < --rope-high-freq-factor .*got 0.5, 0.25" "  the values named"
# with --rope-scaling llama3 given too, the low factor not given is still the checkpoint's
# (0.5), not the default 1: a high factor of 0.75 is above it
expect_exit 0 "--rope-scaling llama3 --rope-high-freq-factor 0.75 on --load of low 0.5" "$A" $GS --iterations 1 \
  --layers-per-stage 2 --load "$WORK/cks" --rope-scaling llama3 --rope-high-freq-factor 0.75 -q
expect_exit 1 "--rope-scaling llama3 --rope-high-freq-factor 0.25 on --load of low 0.5" "$A" $GS --iterations 1 \
  --layers-per-stage 2 --load "$WORK/cks" --rope-scaling llama3 --rope-high-freq-factor 0.25 -q
expect_grep "needs 0 < --rope-low-freq-factor < --rope-high-freq-factor .*got 0.5, 0.25" "  the restored low factor named"
cp "$WORK/cks" "$WORK/cks.good"
sed 's/"rope_scaling":"llama3"/"rope_scaling":"yarn"/' "$WORK/cks.good" > "$WORK/cks"
expect_exit 1 "an index with rope_scaling yarn" "$A" $GS --layers-per-stage 2 --load "$WORK/cks"
expect_grep "metadata field 'rope_scaling' is 'yarn', expected none, linear or llama3" "  the field named"
sed 's/"rope_scaling_factor":"4"/"rope_scaling_factor":"0"/' "$WORK/cks.good" > "$WORK/cks"
expect_exit 1 "an index with rope_scaling_factor 0" "$A" $GS --layers-per-stage 2 --load "$WORK/cks"
expect_grep "metadata field 'rope_scaling_factor' is 0: out of range (above 0)" "  the field named"
sed 's/"rope_original_max_positions":"64"/"rope_original_max_positions":"6.4"/' "$WORK/cks.good" > "$WORK/cks"
expect_exit 1 "an index with rope_original_max_positions 6.4" "$A" $GS --layers-per-stage 2 --load "$WORK/cks"
expect_grep "rope_original_max_positions" "  the field named"
cp "$WORK/cks.good" "$WORK/cks"
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

# the CUDA backend reads the same scaled table (on the emulator, when built): its loss
# is the CPU's within bfloat16's error, and farther from the unscaled one
if [ -f "$EMU" ]; then
  E="--model gpt --arch llama --hidden 32 --heads 2 --query-groups 1 --seq 16 --vocab 64 --ffn-hidden 48 --rope-base 500000"
  ES="--rope-scaling llama3 --rope-original-max-positions 64"
  run ec "$A" $E $ES --iterations 1
  run en "$A" $E --iterations 1
  run eg env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" PPS_EMU_TIMEOUT=30 PPSRT_EMU_GPUS=2 \
    LD_PRELOAD="$EMU" "$A" $E $ES --iterations 1 --backend cuda
  python3 -c "
import sys
g, c, n = (float(x) for x in sys.argv[1:4])
assert abs(g - c) <= 5e-4 * c and abs(g - n) > 2 * abs(g - c) and abs(c - n) > 1e-3 * c, (g, c, n)" \
    "$(losses "$WORK/eg")" "$(losses "$WORK/ec")" "$(losses "$WORK/en")" 2>/dev/null &&
    pass "llama3 scaling on the emulated CUDA backend: $(losses "$WORK/eg")(CPU $(losses "$WORK/ec"), unscaled $(losses "$WORK/en"))" ||
    fail "llama3 on the emulated CUDA backend: $(losses "$WORK/eg") vs CPU $(losses "$WORK/ec") (unscaled $(losses "$WORK/en"))"
else skip "RoPE scaling on the CUDA backend: the emulator ($EMU) is not built"; fi

# refused flags
expect_exit 2 "--arch with the mlp model" "$A" --model mlp --arch llama
expect_grep "choose the gpt model's layer" "the model named"
expect_exit 2 "--arch bad" "$A" $G --arch bert
expect_grep "--arch needs gpt or llama" "the values named"
expect_exit 2 "--mlp relu" "$A" $G --mlp relu
expect_exit 2 "--bias maybe" "$A" $G --bias maybe
expect_exit 2 "--rope-base 1" "$A" $G --rope-base 1
expect_grep "--rope-base needs a number above 1" "the base's range named"
expect_exit 2 "--rope-scaling yarn" "$A" $L --rope-scaling yarn
expect_grep "--rope-scaling needs none, linear or llama3, got 'yarn'" "  the values named"
expect_exit 2 "--rope-scaling-factor without --rope-scaling" "$A" $L --rope-scaling-factor 8
expect_grep "--rope-scaling-factor needs --rope-scaling linear or llama3" "  the scaling to give named"
expect_exit 2 "--rope-original-max-positions with linear" "$A" $L --rope-scaling linear --rope-original-max-positions 64
expect_grep "--rope-original-max-positions needs --rope-scaling llama3$" "  llama3 named"
expect_exit 2 "--rope-scaling none --rope-high-freq-factor 4 --load (given: checked at once)" "$A" $L --rope-scaling none \
  --rope-high-freq-factor 4 --load "$WORK/cks"
expect_grep "--rope-high-freq-factor needs --rope-scaling llama3" "  said so"
for bad in "--rope-scaling-factor 0" "--rope-scaling-factor -2" "--rope-low-freq-factor inf" "--rope-high-freq-factor x"; do
  expect_exit 2 "--rope-scaling llama3 $bad" "$A" $L --rope-scaling llama3 $bad
  expect_grep "${bad%% *} needs a number above 0, got '${bad#* }'" "  the flag and value named"
done
expect_exit 2 "--rope-original-max-positions 0" "$A" $L --rope-scaling llama3 --rope-original-max-positions 0
expect_grep "--rope-original-max-positions needs an integer from 1" "  the range named"
expect_exit 2 "llama3 with low = high" "$A" $L --rope-scaling llama3 --rope-low-freq-factor 4
expect_grep "needs 0 < --rope-low-freq-factor < --rope-high-freq-factor .*got 4, 4 and 8192" "  the values named"
expect_exit 2 "--rope-scaling with learned positions" "$A" $G --rope-scaling llama3
expect_grep "this gpt has learned positions" "  said so"
expect_exit 2 "--rope-scaling with the mlp model" "$A" --model mlp --rope-scaling linear
expect_grep "choose the gpt model's layer" "  the model named"
expect_exit 2 "RoPE with an odd head size" "$A" --model gpt --hidden 12 --heads 4 --position rope
expect_grep "head size --hidden 12 / --heads 4 = 3 must be even" "the head size named"
expect_exit 2 "--ffn-hidden 25 at T = 2" "$A" $L --ffn-hidden 25 --tensor-parallel 2
expect_grep "must divide the MLP's width 25" "the width named"
finish
