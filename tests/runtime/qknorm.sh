#!/bin/sh
# qknorm.sh: the gpt model's query/key normalisation (--qk-layernorm: every query and
# key head normalised with the layer's norm and gains [D] before RoPE, Qwen3's and
# Megatron-Core's qk_layernorm; runtime/model_gpt.c qkn_*). Its backward is checked
# against finite differences in tests/kernels/gpt_grad; here:
#  - --check (the pipelined run against one device) passes on 1F1B and ZB-V, at
#    T = 2 (each rank its heads, the gains' gradients summed over the group), with
#    --sequence-parallel, and --data-parallel 2, for Llama's layer and GPT-2's, and
#    --context-parallel 2 x --tensor-parallel 2;
#  - T = 2 and T = 2 with --sequence-parallel give T = 1's losses within 1e-6;
#  - the norm applies to both q and k: multiplying the query and key columns of every
#    layer's QKV matrix in a checkpoint by 3 leaves the resumed loss as it was (within
#    1e-5: only eps 1e-5 sees the scale), while without --qk-layernorm the same edit
#    moves it; multiplying the key columns alone also leaves it (k normalised too);
#  - it changes the losses (against the same run without it);
#  - each device keeps exactly the bytes the heads' entry adds: per layer (Hq + Hkv) N
#    (nst F32 statistics + 2 D values: the heads' input and B's output gradient);
#  - ppsc's unit_bytes from model { qk_layernorm = 1 } is the runtime's, byte for byte;
#  - checkpoints record it; resuming with and without it is refused naming the flag;
#  - --json's layer shows "qk_layernorm":true; the flag is refused for --model mlp.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
gpt_setup

for lay in L G; do
  eval "X=\"\$$lay --qk-layernorm\""
  expect_exit 0 "$lay 1F1B --check" "$A" $X --iterations 2 --check -q
  expect_grep "^check: passed" "$lay 1F1B: check passes"
  expect_exit 0 "$lay ZB-V --check" "$Z" $X --iterations 2 --check -q
  expect_grep "^check: passed" "$lay ZB-V: check passes"
  expect_exit 0 "$lay T = 2 --check" "$A" $X --tensor-parallel 2 --check -q
  expect_grep "^check: passed" "$lay T = 2: check passes"
  expect_exit 0 "$lay ZB-V T = 2 --sequence-parallel --check" "$Z" $X --tensor-parallel 2 --sequence-parallel --check -q
  expect_grep "^check: passed" "$lay ZB-V T = 2 SP: check passes"
  run t1 "$A" $X --iterations 3
  run t2 "$A" $X --iterations 3 --tensor-parallel 2
  close "$lay T = 2 = T = 1 (the gains' gradients summed over the group)" "$WORK/t2" "$WORK/t1"
  run t2s "$A" $X --iterations 3 --tensor-parallel 2 --sequence-parallel
  close "$lay T = 2 --sequence-parallel = T = 1" "$WORK/t2s" "$WORK/t1"
  eval "Y=\"\$$lay\""
  run n1 "$A" $Y --iterations 3
  [ "$(losses "$WORK/n1")" != "$(losses "$WORK/t1")" ] && pass "$lay: the norm changes the losses" ||
    fail "$lay: --qk-layernorm changed nothing: $(losses "$WORK/t1")"
done
expect_exit 0 "D = 2 --check" "$A" $L --qk-layernorm --data-parallel 2 --check -q
expect_grep "^check: passed" "D = 2: check passes"
expect_exit 0 "C = 2 x T = 2 --check" "$A" $G --qk-layernorm --seq 8 --context-parallel 2 --tensor-parallel 2 --check -q
expect_grep "^check: passed" "C = 2 x T = 2 (the rank's tokens): check passes"

# the norm applies: q and k columns scaled by 3 in a checkpoint (sgd, lr 0: the loss of
# the same weights); part: qk (both), k (the keys alone)
S="$L --optimizer sgd --lr 0"
scale() {   # scale IN OUT PART: OUT = IN's checkpoint with the part's columns of QKV scaled
  # (OUT's base name IN's: the index names its shards by it)
  python3 - "$1" "$2" "$3" <<'PY'
import glob, json, os, shutil, struct, sys
src, dst, part = sys.argv[1:4]
h, Hq, Hkv, D = 16, 4, 2, 4
q = (Hq + 2 * Hkv) * D
c0, c1 = (0, (Hq + Hkv) * D) if part == "qk" else (Hq * D, (Hq + Hkv) * D)
os.makedirs(os.path.dirname(dst), exist_ok=True)
shutil.copy(src, dst)
for f in glob.glob(src + ".*.safetensors"):
    data = bytearray(open(f, "rb").read())
    n = struct.unpack("<Q", data[:8])[0]
    hd = json.loads(data[8:8 + n])
    for k, v in hd.items():
        if k.endswith(".qkv.w"):
            a = 8 + n + v["data_offsets"][0]
            for r in range(h):
                for c in range(c0, c1):
                    o = a + 4 * (r * q + c)
                    data[o:o + 4] = struct.pack("<f", 3 * struct.unpack("<f", data[o:o + 4])[0])
    open(dst + f[len(src):], "wb").write(data)
PY
}
first() { losses "$1" | cut -d' ' -f1; }
within() {   # within LABEL A B TOL: |A - B| <= TOL |B|
  python3 -c "import sys; a, b, t = map(float, sys.argv[1:4]); assert abs(a - b) <= t * abs(b)" "$2" "$3" "$4" 2>/dev/null &&
    pass "$1: $2 vs $3" || fail "$1: $2 vs $3 (tolerance $4)"
}
for on in 1 0; do
  F=; [ $on = 1 ] && F=--qk-layernorm
  mkdir -p "$WORK/ck$on"
  run c$on "$A" $S $F --iterations 1 --save "$WORK/ck$on/ck"
  for part in qk k; do
    scale "$WORK/ck$on/ck" "$WORK/ck$on$part/ck" $part || fail "scaling the checkpoint"
    run r$on$part "$A" $S $F --iterations 1 --load "$WORK/ck$on$part/ck"
  done
  run r$on "$A" $S $F --iterations 1 --load "$WORK/ck$on/ck"
done
within "--qk-layernorm: q and k scaled by 3 leave the loss" "$(first "$WORK/r1qk")" "$(first "$WORK/r1")" 1e-5
within "--qk-layernorm: k scaled by 3 leaves the loss" "$(first "$WORK/r1k")" "$(first "$WORK/r1")" 1e-5
for part in qk k; do
  python3 -c "import sys; a, b = map(float, sys.argv[1:3]); assert abs(a - b) > 1e-3 * abs(b)" \
    "$(first "$WORK/r0$part")" "$(first "$WORK/r0")" 2>/dev/null &&
    pass "without it scaling $part moves the loss: $(first "$WORK/r0$part") vs $(first "$WORK/r0")" ||
    fail "without --qk-layernorm scaling $part moved nothing: $(first "$WORK/r0$part") vs $(first "$WORK/r0")"
done

# activation bytes: the heads' entry, against the same run without it (measured)
run b0 "$A" $L --iterations 1
run b1 "$A" $L --qk-layernorm --iterations 1
python3 - "$WORK/b0" "$WORK/b1" <<'PY' && pass "each device keeps exactly the heads' entry's bytes" || fail "activation bytes with --qk-layernorm"
import json, sys
g, m = [json.load(open(f))["per_device"] for f in sys.argv[1:3]]
N, Hq, Hkv, D, nst = 4, 4, 2, 4, 1          # micro-batch 1 x seq 4; RMS norms: rstd only
e = (Hq + Hkv) * N * (nst * 4 + 2 * D * 4)  # per layer, F32 activations
assert m[0]["resident_peak_bytes"] == g[0]["resident_peak_bytes"] + 2 * e, (m[0], g[0], e)
assert m[1]["resident_peak_bytes"] == g[1]["resident_peak_bytes"] + e, (m[1], g[1], e)
PY

# ppsc's activation unit from the model { } key qk_layernorm = what the runtime keeps for
# a middle stage's layers (device 1 of 1F1B at P = 4), byte for byte, with RMS norms and
# layer norms; and the key reaches the runtime's layer
for a in 0 1; do
  printf 'import "1f1b.pps";\nschedule t(P = 4, m = 8) {\n  use one_f_one_b(P = P, m = m);\n' > "$WORK/u$a.pps"
  printf '  model { layers = 8; hidden = 16; heads = 4; query_groups = 2; seq = 4; micro_batch = 1; vocab = 32; dtype_bytes = 4;\n' >> "$WORK/u$a.pps"
  printf '          rmsnorm = %s; qk_layernorm = 1; }\n}\n' $a >> "$WORK/u$a.pps"
  "$PPSC" sim "$WORK/u$a.pps" --json > "$WORK/u$a.sim" 2>"$WORK/err" || fail "ppsc sim u$a: $(cat "$WORK/err")"
  if build u$a "$WORK/u$a.pps"; then
    run u$a.run "$WORK/u$a" --model gpt
    python3 - "$WORK/u$a.sim" "$WORK/u$a.run" <<'PY' && pass "rmsnorm $a: ppsc's unit_bytes = the runtime's middle stage" || fail "rmsnorm $a: ppsc's unit_bytes vs the runtime's"
import json, sys
s, r = [json.load(open(f)) for f in sys.argv[1:3]]
assert s["unit_bytes"] == r["per_device"][1]["unit_bytes_first_stage"] == r["per_device"][2]["unit_bytes_first_stage"], \
    (s["unit_bytes"], [d["unit_bytes_first_stage"] for d in r["per_device"]])
PY
    grep -q '"qk_layernorm":true' "$WORK/u$a.run" && pass "the key sets the runtime's layer" || fail "model { qk_layernorm = 1 } did not reach the runtime"
  else fail "build u$a"; fi
done

# --json, the checkpoint's field and the refusals
"$A" $L --qk-layernorm --iterations 1 --json > "$WORK/out" 2>&1
expect_grep '"qk_layernorm":true' "--json: the layer shows qk_layernorm"
"$A" $L --iterations 1 --json > "$WORK/out" 2>&1
if grep -q '"qk_layernorm"' "$WORK/out"; then fail "--json without the flag names qk_layernorm"; else pass "--json without it: no field"; fi
cp "$WORK/ck1/ck" "$WORK/out"; expect_grep '"qk_layernorm":"on"' "the checkpoint index records qk_layernorm on"
expect_exit 1 "resume without --qk-layernorm refused" "$A" $S --iterations 1 --load "$WORK/ck1/ck"
expect_grep "hint: run with --qk-layernorm" "the refusal names the flag"
expect_exit 1 "resume with --qk-layernorm of a checkpoint without it refused" "$A" $S --qk-layernorm --iterations 1 --load "$WORK/ck0/ck"
expect_grep "hint: run without --qk-layernorm" "the refusal names the flag (without)"
expect_exit 2 "--qk-layernorm with --model mlp refused" "$A" --model mlp --qk-layernorm --iterations 1
expect_grep "qk-layernorm" "the mlp refusal names the flag"
finish
