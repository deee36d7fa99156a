#!/bin/sh
# kvch.sh: the gpt's attention head size apart from hidden / heads (--kv-channels D,
# Megatron-LM's --kv-channels, Hugging Face's head_dim; model { kv_channels }): QKV
# [h, (a + 2g) D], the projection [a D, h], RoPE and --qk-layernorm's gains over D.
# Here, at hidden 16, heads 4, query groups 2 (h/a = 4) with D = 6 (a D = 24 > h) and
# D = 2 (a D = 8 < h):
#  - --check passes on the CPU backend (threads) for GPT-2's layer on 1F1B and Llama's on
#    ZB-V, at --tensor-parallel 2 (each rank a D / 2 of the projection's rows), with
#    --sequence-parallel, --context-parallel 2 (K and V of g D columns exchanged), with
#    --qk-layernorm (gains [D]), with experts (--num-experts 4), and at query groups 4
#    and 1 (multi-head, multi-query), with recomputation (recompute.pps); a hidden size
#    no multiple of the heads (18 / 4, D 4) runs too;
#  - T = 2 (and with --sequence-parallel) gives T = 1's losses within 1e-6;
#  - --kv-channels 4 (= h/a) is the run without the flag, loss for loss; D changes them;
#  - the activation bytes a device keeps are computed here buffer by buffer, and equal
#    ppsc sim's unit_bytes from model { kv_channels } byte for byte (T = 1, T = 2, T = 2
#    with sequence parallelism); the parameters a device holds equal ppsc's static bytes
#    over bytes a parameter, and the formula's; the key reaches the runtime;
#  - FLOPs: the runtime's count a stage is the formula's with a D (docs/models.md), and
#    ppsc's TF, TB, TW from model { kv_channels } (hardware flops) are the same over the rate;
#  - checkpoints record kv_channels; resuming with another D (or without the flag) is
#    refused naming --kv-channels; with the same D the resumed losses are the
#    uninterrupted run's;
#  - --json's layer shows "kv_channels" when D is not h/a;
#  - bad values: --kv-channels 0, an odd D with RoPE, --model mlp (exit 2); ppsc: a
#    fractional kv_channels, an odd one with rope = 1, one without heads (errors);
#  - the CUDA backend on the emulator (tests/gpu/emu; skipped when it is not built):
#    --check passes with D = 6, 2 and 16 (RoPE's vectorised kernel), and its first loss
#    is the CPU backend's within 2e-3 (bf16 activations).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
gpt_setup

for D in 6 2; do
  K="--kv-channels $D"
  expect_exit 0 "D = $D GPT-2 1F1B --check" "$A" $G $K --iterations 2 --check -q
  expect_grep "^check: passed" "D = $D GPT-2 1F1B: check passes"
  expect_exit 0 "D = $D llama ZB-V --check" "$Z" $L $K --iterations 2 --check -q
  expect_grep "^check: passed" "D = $D llama ZB-V: check passes"
  expect_exit 0 "D = $D llama T = 2 --check" "$A" $L $K --tensor-parallel 2 --check -q
  expect_grep "^check: passed" "D = $D T = 2: check passes"
  expect_exit 0 "D = $D GPT-2 ZB-V T = 2 --sequence-parallel --check" "$Z" $G $K --tensor-parallel 2 --sequence-parallel --check -q
  expect_grep "^check: passed" "D = $D T = 2 SP: check passes"
  expect_exit 0 "D = $D llama C = 2 --check" "$A" $L $K --seq 8 --context-parallel 2 --check -q
  expect_grep "^check: passed" "D = $D C = 2: check passes"
  expect_exit 0 "D = $D GPT-2 C = 2 x T = 2 --check" "$A" $G $K --seq 8 --context-parallel 2 --tensor-parallel 2 --check -q
  expect_grep "^check: passed" "D = $D C = 2 x T = 2: check passes"
  expect_exit 0 "D = $D llama --qk-layernorm T = 2 --check" "$A" $L $K --qk-layernorm --tensor-parallel 2 --check -q
  expect_grep "^check: passed" "D = $D --qk-layernorm T = 2: check passes"
  expect_exit 0 "D = $D llama experts --check" "$Z" $L $K --num-experts 4 --moe-topk 2 --check -q
  expect_grep "^check: passed" "D = $D experts: check passes"
  for g in 4 1; do
    expect_exit 0 "D = $D GPT-2 --query-groups $g T = 1 --check" "$A" $G $K --query-groups $g --check -q
    expect_grep "^check: passed" "D = $D query groups $g: check passes"
  done
  run t1$D "$A" $L $K --iterations 3
  run t2$D "$A" $L $K --iterations 3 --tensor-parallel 2
  close "D = $D: T = 2 = T = 1" "$WORK/t2$D" "$WORK/t1$D"
  run t2s$D "$A" $L $K --iterations 3 --tensor-parallel 2 --sequence-parallel
  close "D = $D: T = 2 --sequence-parallel = T = 1" "$WORK/t2s$D" "$WORK/t1$D"
done
expect_exit 0 "hidden 18, heads 4, D 4 (a D = 16) --check" "$A" $L --hidden 18 --kv-channels 4 --iterations 2 --check -q
expect_grep "^check: passed" "hidden 18 / heads 4 with --kv-channels: check passes"
run d0 "$A" $L --iterations 3
run d4 "$A" $L --kv-channels 4 --iterations 3
[ -n "$(losses "$WORK/d0")" ] && [ "$(losses "$WORK/d4")" = "$(losses "$WORK/d0")" ] &&
  pass "--kv-channels 4 = hidden / heads: the same losses ($(losses "$WORK/d0"))" ||
  fail "--kv-channels 4 vs no flag: '$(losses "$WORK/d4")' vs '$(losses "$WORK/d0")'"
[ "$(losses "$WORK/t16")" != "$(losses "$WORK/d0")" ] && [ "$(losses "$WORK/t12")" != "$(losses "$WORK/d0")" ] &&
  pass "D = 6 and D = 2 change the losses" || fail "--kv-channels changed nothing: $(losses "$WORK/t16")"

# recomputation (tests/runtime/cases/recompute.pps: half of 4 layers recomputed before B),
# D = 6: --check, with the stage shares the runtime's notes name (as recompute.sh does)
CASE=$top_srcdir/tests/runtime/cases/recompute.pps
R="$G --kv-channels 6 --seq 8"
hints() { sed -n "s/^hint: for this model and size write \`memory stage \([0-9]\): $1 = \([0-9.e-]*\);\`/-D $2\1=\2/p" "$WORK/out" | sort -u; }
if build rw "$CASE" -D lps=4 && build rh "$CASE" -D lps=4 -D r=0.5; then
  "$WORK/rw" --check $R > "$WORK/out" 2>&1; idefs=$(hints input i)
  "$WORK/rh" --check $R > "$WORK/out" 2>&1; ldefs=$(hints layer l)
  # shellcheck disable=SC2086
  if build rc "$CASE" -D lps=4 -D r=0.5 $idefs $ldefs; then
    expect_exit 0 "D = 6, recompute half of 4 layers: --check" "$WORK/rc" --check $R
    expect_grep "check: passed (loss, gradients and peak memory match)" "D = 6 recomputation (shares: $idefs $ldefs): gradients, loss and peak memory match"
  else fail "build recompute.pps with the shares ($idefs $ldefs)"; fi
else fail "build recompute.pps"; fi

# activation and parameter bytes: computed here, the runtime's and ppsc sim's from the key
cat > "$WORK/sim.pps" <<'PPS'
schedule lin(P = 2, m = 4, tp = 2, sp = 1, D = 6) {
  devices P;
  microbatches m;
  placement linear;
  model { layers = 2; hidden = 16; heads = 4; query_groups = 2; kv_channels = D; seq = 4; micro_batch = 1; vocab = 32;
          dtype_bytes = 4; }
  hardware { tensor_parallel = tp; sequence_parallel = sp; }
  for d in 0..P {
    device d {
      let warm = min(P - d - 1, m);
      for i in 0..warm     { F(i) }
      for i in 0..m - warm { F(i + warm) BW(i) }
      for i in m - warm..m { BW(i) }
    }
  }
}
PPS
for D in 6 2; do
  for ts in "1 0" "2 0" "2 1"; do
    set -- $ts
    tag=$D.$1.$2
    flags="--tensor-parallel $1"; [ "$2" = 1 ] && flags="$flags --sequence-parallel"
    if build s$tag "$WORK/sim.pps" -D tp=$1 -D sp=$2 -D D=$D &&
       "$PPSC" sim "$WORK/sim.pps" -D tp=$1 -D sp=$2 -D D=$D --json > "$WORK/s$tag.sim" 2>"$WORK/err"; then
      run s$tag.run "$WORK/s$tag" --model gpt $flags --iterations 1
      python3 - "$WORK/s$tag.run" "$WORK/s$tag.sim" $D $1 $2 > "$WORK/py.out" 2>&1 <<'PY' &&
import json, sys
r, s = [json.load(open(f)) for f in sys.argv[1:3]]
D, T, sp = map(int, sys.argv[3:6])
N, h, H, G, V, es, seq = 4, 16, 4, 2, 32, 4, 4   # tokens, hidden, heads, kv groups, vocab, F32, seq
n = N // T if sp else N                          # the residual stream's rows
f = 4 * h
# a layer: ln1, x1, ln2, y, two gradient slots, the norms' F32 statistics on the residual
# rows; split by heads over T: Q K V (H + 2G) D / T, att H D / T, the softmax statistics,
# hpre and hact (f / T each)
q, att = (H + 2 * G) * D // T, H * D // T
layer = n * (6 * h * es + 16) + N * q * es + N * att * es + (H // T) * seq * 4 + 2 * N * (f // T) * es
unit = r["per_device"][0]["resident_peak_bytes"] / r["per_device"][0]["peak_units"] - n * h * es   # less dx0
assert unit == layer == s["unit_bytes"], ("unit", unit, layer, s["unit_bytes"])
# parameters of one layer: QKV [h, (H + 2G) D] + bias, projection [H D, h] + bias, FC1,
# FC2 and their biases, two layer norms; T splits the matrices and column biases
per_layer = (h * (H + 2 * G) * D + (H + 2 * G) * D + H * D * h + h * f + f + f * h) // T + h + h + 4 * h
dev0 = per_layer + h * V // T + seq * h                 # + the embedding rows, positions
dev1 = per_layer + h * V // T + 2 * h                   # + the output rows, final norm
per_param = 4 + 4 + 8                                   # F32 weight, gradient, Adam (master = weight)
got = [d["parameters"] for d in r["per_device"]]
sim = [d["static_bytes"] / per_param for d in s["per_device"]]
assert got == [dev0, dev1] == sim, ("parameters", got, [dev0, dev1], sim)
print("D %d T %d sp %d: a layer %d B = ppsc's unit_bytes %d B; parameters %s = ppsc's %s" % (D, T, sp, unit, s["unit_bytes"], got, sim))
PY
      pass "bytes: $(cat "$WORK/py.out")" || fail "bytes D = $D T = $1 sp $2: $(cat "$WORK/py.out")"
      if [ $tag = 6.1.0 ]; then
        grep -q '"kv_channels":6' "$WORK/s$tag.run" && pass "model { kv_channels } reaches the runtime's layer" ||
          fail "model { kv_channels = 6 } did not reach the runtime"
      fi
    else fail "build / ppsc sim D = $D T = $1 sp $2: $(cat "$WORK/err")"; fi
  done
done

# FLOPs a layer: 2bs (h (a + 2g) D + a D h + 2 h f) + attention 4 b s^2 a D (F), 8 (B)
run fl "$A" $G --kv-channels 6 --iterations 1
python3 - "$WORK/fl" > "$WORK/py.out" 2>&1 <<'PY' && pass "FLOPs with a D: $(cat "$WORK/py.out")" || fail "FLOPs: $(cat "$WORK/py.out")"
import json, sys
r = json.load(open(sys.argv[1]))
b, s, h, a, g, D, V, nmb = 1, 4, 16, 4, 2, 6, 32, 4
f = 4 * h
M = 2 * b * s * (h * (a + 2 * g) * D + a * D * h + 2 * h * f)
layer = 3 * M + 12 * b * s * s * a * D   # F + B + W
bsh = b * s * h
want = [nmb * (layer + 3 * bsh), nmb * (layer + 6 * bsh * V)]   # 1 layer a stage: input, output layers
got = [d["flops_per_iteration"] for d in r["per_device"]]
assert all(abs(x - y) <= 1e-9 * y for x, y in zip(got, want)), (got, want)
print(got)
PY

# ppsc's derived times from the same FLOPs (hardware flops 1e12, one layer a device share):
# TF = (M + A) / rate, TB = (M + 2A) / rate, TW = M / rate with the head size D = 6
sed 's/hardware { tensor_parallel = tp; sequence_parallel = sp; }/hardware { flops = 1e12; }/' "$WORK/sim.pps" > "$WORK/simt.pps"
got=$("$PPSC" expand "$WORK/simt.pps" -D D=6 2>"$WORK/err" | sed -n 's/^  cost TF = \(.*\), TB = \(.*\), TW = \(.*\), TC = .*;$/\1 \2 \3/p' | head -1)
python3 -c "
import sys
b, s, h, a, g, D, f = 1, 4, 16, 4, 2, 6, 64
M = 2 * b * s * (h * (a + 2 * g) * D + a * D * h + 2 * h * f); A = 4 * b * s * s * a * D
want = [(M + A) / 1e12, (M + 2 * A) / 1e12, M / 1e12]
got = [float(x) for x in sys.argv[1].split()]
assert len(got) == 3 and all(abs(x - y) <= 1e-9 * y for x, y in zip(got, want)), (got, want)" "$got" 2>/dev/null &&
  pass "ppsc's TF TB TW with kv_channels = 6: $got" || fail "ppsc's times with kv_channels = 6: '$got' $(cat "$WORK/err")"

# checkpoints: recorded; refused with another D; resumed with the same one
run f4 "$A" $L --kv-channels 6 --iterations 4
printf '%s\n' "$(grep -o '"loss":[-0-9.e+]*,"time_s"' "$WORK/f4" | sed -n 3,4p)" > "$WORK/f4b"
run c6 "$A" $L --kv-channels 6 --iterations 2 --save "$WORK/ck6"
cp "$WORK/ck6" "$WORK/out"; expect_grep '"kv_channels":"6"' "the checkpoint index records kv_channels 6"
run r6 "$A" $L --kv-channels 6 --iterations 2 --load "$WORK/ck6"
close "resumed with --kv-channels 6: the uninterrupted iterations 3-4" "$WORK/r6" "$WORK/f4b"
expect_exit 1 "resume without --kv-channels refused" "$A" $L --iterations 1 --load "$WORK/ck6"
expect_grep "hint: run with --kv-channels 6" "the refusal names the flag"
expect_exit 1 "resume with --kv-channels 2 refused" "$A" $L --kv-channels 2 --iterations 1 --load "$WORK/ck6"
expect_grep "holds a gpt with --kv-channels 6, this run's has 2" "the refusal names both"
run c0 "$A" $L --iterations 1 --save "$WORK/ck0"
expect_exit 1 "resume of a default-D checkpoint with --kv-channels 6 refused" "$A" $L --kv-channels 6 --iterations 1 --load "$WORK/ck0"
expect_grep "hint: run with --kv-channels 4" "the refusal names the checkpoint's D"

# --json and the refusals
"$A" $L --kv-channels 6 --iterations 1 --json > "$WORK/out" 2>&1
expect_grep '"kv_channels":6' "--json: the layer shows kv_channels"
"$A" $L --kv-channels 4 --iterations 1 --json > "$WORK/out" 2>&1
if grep -q '"kv_channels"' "$WORK/out"; then fail "--json at D = h/a names kv_channels"; else pass "--json at D = h/a: no field"; fi
expect_exit 2 "--kv-channels 0 refused" "$A" $L --kv-channels 0 --iterations 1
expect_grep "kv-channels needs an integer from 1" "the refusal names the flag and the range"
expect_exit 2 "an odd --kv-channels with RoPE refused" "$A" $L --kv-channels 5 --iterations 1
expect_grep "the head size --kv-channels 5 must be even" "the RoPE refusal names the flag"
expect_exit 0 "an odd --kv-channels with learned positions runs" "$A" $G --kv-channels 5 --iterations 1 -q
expect_exit 2 "--kv-channels with --model mlp refused" "$A" --model mlp --kv-channels 6 --iterations 1
expect_grep "kv-channels" "the mlp refusal names the flag"
for bad in "kv_channels = 2.5;:must be a whole number" "kv_channels = 5; rope = 1;:must be even with rope = 1"; do
  keys=${bad%%:*}; want=${bad#*:}
  printf 'import "1f1b.pps";\nschedule t(P = 2, m = 4) {\n  use one_f_one_b(P = P, m = m);\n' > "$WORK/bad.pps"
  printf '  model { layers = 2; hidden = 16; heads = 4; seq = 4; micro_batch = 1; vocab = 32; %s }\n}\n' "$keys" >> "$WORK/bad.pps"
  "$PPSC" sim "$WORK/bad.pps" > "$WORK/out" 2>&1 && fail "ppsc accepted model { $keys }" ||
    expect_grep "$want" "ppsc refuses model { $keys }"
done
printf 'import "1f1b.pps";\nschedule t(P = 2, m = 4) {\n  use one_f_one_b(P = P, m = m);\n' > "$WORK/nh.pps"
printf '  model { layers = 2; hidden = 16; seq = 4; micro_batch = 1; kv_channels = 6; }\n}\n' >> "$WORK/nh.pps"
"$PPSC" sim "$WORK/nh.pps" > "$WORK/out" 2>&1 && fail "ppsc accepted kv_channels without heads" ||
  expect_grep "kv_channels is the size of each of the heads: it needs model heads" "ppsc refuses kv_channels without heads"

# the CUDA backend on the emulator: --check, and its first loss against the CPU backend's
if [ -f "$EMU" ]; then
  need_emu
  E="--model gpt --arch llama --hidden 16 --heads 4 --query-groups 2 --seq 8 --vocab 32 --ffn-hidden 24"
  for D in 6 2 16; do   # (16: the vectorised RoPE kernel, D % 16 = 0)
    expect_exit 0 "CUDA (emulated) D = $D --check" env PPSRT_EMU_GPUS=2 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" "$A" $E \
      --kv-channels $D --backend cuda --check --iterations 2 -q
    expect_grep "^check: passed" "CUDA (emulated) D = $D: check passes"
    run cu$D env PPSRT_EMU_GPUS=2 PPS_EMU_SEED=1 LD_PRELOAD="$EMU" "$A" $E --kv-channels $D --backend cuda --iterations 1
    run cp$D "$A" $E --kv-channels $D --iterations 1
    a=$(losses "$WORK/cu$D"); b=$(losses "$WORK/cp$D")
    python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); assert abs(a - b) <= 2e-3 * abs(b)" $a $b 2>/dev/null &&
      pass "CUDA (emulated) D = $D: loss $a = the CPU's $b within 2e-3" || fail "CUDA (emulated) D = $D: loss '$a' vs the CPU's '$b'"
  done
else skip "the CUDA backend on the emulator: $EMU not built"; fi
finish
