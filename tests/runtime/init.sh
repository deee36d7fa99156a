#!/bin/sh
# init.sh: --init-method-std S, Megatron-LM's initialisation of the gpt model
# (runtime/model_gpt.c init_weight, ppsrt_rand_normal in model_mlp.c). The initial
# weights are read from a checkpoint saved after one SGD step at --lr 0 (the weights
# unchanged), with tests/runtime/ckpt_tensors.py. Against independent figures:
#  - every tensor's distribution, a dense GPT-2 layer (untied, learned positions, biases)
#    and a Llama layer with experts (router, experts, a shared expert and its gate, tied
#    embeddings): weights, tables, output layer and router mean 0 and std S, the
#    attention's projection and every FC2 (dense, experts', shared) std S / sqrt(2 L)
#    with L = 2 stages x 2 layers = 4 (not a stage's 2), each within 5 standard errors
#    of its size; biases and norm betas 0, gains 1 exactly; normal, not uniform: the
#    share within one std is 0.6827 (uniform's 0.577) over all the S-weights;
#  - the values are the formula's: elements of vocab.tok and layer3.fc2.w recomputed
#    here (splitmix64 of seed, the FNV-1a of the checkpoint key and index 2i and 2i + 1,
#    Box-Muller) within 1e-6 relative;
#  - they depend on no placement: checkpoints of 1F1B at P = 2 (2 layers a stage),
#    interleaved 1F1B at P = 2, v = 2 (4 stages of 1 layer), ZB-V, and 1F1B at
#    --tensor-parallel 2 (the experts too) and the experts at --expert-parallel 2 are the
#    same bytes, and with the emulator the CUDA backend's as well (made on the host);
#  - --check passes with it (1F1B, T = 2, experts at T = 2, Vocab-1's sharded vocabulary);
#  - the loss at step 0 is about ln V at S = 0.02 (logits of std S sqrt(h) ~ 0.1), not the
#    default init's (unit-variance logits; its figures, unchanged, are the other tests');
#    --json's layer records init_method_std, only when given;
#  - refused (exit 2, naming the flag): --init-method-std 0, -1, inf, nan, x, none given,
#    and with --model mlp.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/split_lib.sh"
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=4 || { fail "build 1f1b"; finish; }
build i "$top_srcdir/stdlib/interleaved_1f1b.pps" -D P=2 -D m=4 -D v=2 || { fail "build interleaved"; finish; }
build z "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=4 || { fail "build zb_v"; finish; }
A=$WORK/a; I=$WORK/i; Z=$WORK/z
S=0.02
G="--model gpt --hidden 32 --heads 4 --query-groups 2 --seq 8 --vocab 64 --seed 7"
M="$G --arch llama --ffn-hidden 64 --num-experts 4 --moe-topk 2 --moe-ffn-hidden 32 --moe-shared-ffn-hidden 32 \
--moe-shared-expert-gate --embeddings tied"
Z0="--optimizer sgd --lr 0 --iterations 1 -q --init-method-std $S"   # one step that changes nothing
save() { out=$1; shift; "$@" $Z0 --save "$WORK/$out" >"$WORK/err" 2>&1 || fail "save $out: exit $?: $(tail -3 "$WORK/err")"; }

save gd "$A" $G --layers-per-stage 2
save gm "$A" $M --layers-per-stage 2
# the distribution of every tensor (L = 4 layers in all: 2 stages x 2)
for c in gd gm; do
  PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK/$c" $S 4 <<'PY' && pass "$c: every tensor's distribution (S = 0.02, S / sqrt(8) for proj and FC2)" || fail "$c: the distribution"
import math, sys
from ckpt_tensors import load
t = load(sys.argv[1]); S = float(sys.argv[2]); L = int(sys.argv[3])
bad, within, total, kinds = [], 0, 0, set()
for k, (shape, v) in sorted(t.items()):
    n = len(v)
    if k.endswith(".b"):
        if any(x != 0.0 for x in v): bad.append((k, "bias/beta not 0"))
        continue
    if k.endswith(".g"):
        if any(x != 1.0 for x in v): bad.append((k, "gain not 1"))
        continue
    scaled = k.endswith(".proj.w") or k.endswith(".fc2.w")
    sd = S / math.sqrt(2 * L) if scaled else S
    kinds.add(k.split(".", 1)[1] if k.startswith("layer") else k)
    m = sum(v) / n
    s = math.sqrt(sum((x - m) ** 2 for x in v) / n)
    # 5 standard errors: of the mean sd / sqrt(n), of the std sd / sqrt(2 n)
    if abs(m) > 5 * sd / math.sqrt(n) or abs(s / sd - 1) > 5 / math.sqrt(2 * n):
        bad.append((k, n, "mean %.3g std %.5g, expected 0 and %.5g" % (m, s, sd)))
    if not scaled:
        within += sum(1 for x in v if abs(x) < sd); total += n
p = within / total
if abs(p - 0.6827) > 5 * math.sqrt(0.6827 * 0.3173 / total):
    bad.append(("share within one std", p, total))
print("  %s: %d tensors, share within one std %.4f of %d" % (sys.argv[1].rsplit("/", 1)[1], len(t), p, total))
assert not bad, bad
PY
done
PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK/gm" <<'PY' && pass "the MoE model has the router, experts, shared expert and its gate, tied embeddings" || fail "gm's tensors"
import sys
from ckpt_tensors import load
k = set(load(sys.argv[1]))
need = {"layer3.moe.router.w", "layer3.moe.e3.fc.w", "layer3.moe.e3.fc2.w", "layer3.moe.shared.fc2.w",
        "layer3.moe.shared.gate.w", "vocab.tok"}
assert need <= k and "vocab.out" not in k, (sorted(need - k), sorted(k))
PY

# the values are the formula's (an independent implementation of the hash and Box-Muller)
PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK/gd" $S 4 7 <<'PY' && pass "elements recomputed from (seed, key, index)" || fail "the values are not the formula's"
import math, sys
from ckpt_tensors import load
t = load(sys.argv[1]); S = float(sys.argv[2]); L = int(sys.argv[3]); seed = int(sys.argv[4])
M = (1 << 64) - 1
def mix(x):
    x = (x + 0x9e3779b97f4a7c15) & M
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M
    return x ^ (x >> 31)
def fnv(s):
    h = 1469598103934665603
    for c in s.encode():
        h = ((h ^ c) * 1099511628211) & M
    return h
def u(st, i):
    return ((mix(seed ^ mix(st ^ mix(i))) >> 12) + 0.5) / 2.0 ** 52
def normal(key, i):
    st = fnv(key)
    return math.sqrt(-2 * math.log(u(st, 2 * i))) * math.cos(2 * math.pi * u(st, 2 * i + 1))
for key, sd in (("vocab.tok", S), ("layer3.fc2.w", S / math.sqrt(2 * L)), ("layer1.qkv.w", S)):
    v = t[key][1]
    for i in list(range(8)) + [len(v) - 1]:
        want = sd * normal(key, i)
        assert abs(v[i] - want) <= 1e-6 * abs(want), (key, i, v[i], want)
PY

# independent of the schedule, the split into stages, P and T: the same bytes
save gi "$I" $G --layers-per-stage 1
save gz "$Z" $G --layers-per-stage 1
save gt "$A" $G --layers-per-stage 2 --tensor-parallel 2
save mt "$A" $M --layers-per-stage 2 --tensor-parallel 2
same() {   # same LABEL A B: checkpoints A and B hold the same tensors, bit for bit
  PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK/$2" "$WORK/$3" <<'PY' && pass "$1" || fail "$1"
import sys
from ckpt_tensors import load
a, b = load(sys.argv[1], raw=True), load(sys.argv[2], raw=True)
assert sorted(a) == sorted(b) and len(a) > 20, (len(a), len(b))
d = [k for k in a if a[k] != b[k]]
assert not d, "differ: %s" % d[:8]
PY
}
same "interleaved P = 2 v = 2 (4 stages of 1 layer) = 1F1B P = 2 (2 of 2), bit for bit" gi gd
same "ZB-V P = 2 (4 stages, 2 a device) = 1F1B P = 2, bit for bit" gz gd
same "1F1B --tensor-parallel 2 = T = 1, bit for bit" gt gd
same "experts at --tensor-parallel 2 = T = 1, bit for bit" mt gm
save me "$A" $M --layers-per-stage 2 --data-parallel 2 --expert-parallel 2
same "experts at --expert-parallel 2 (2 replicas) = X = 1, bit for bit" me gm
if [ -f "$EMU" ]; then
  env PPSRT_EMU_GPUS=2 LD_PRELOAD="$EMU" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    PPS_EMU_TIMEOUT=30 "$A" $G --layers-per-stage 2 --backend cuda $Z0 --save "$WORK/gc" >"$WORK/err" 2>&1 ||
    fail "CUDA backend (emulated): exit $?: $(tail -3 "$WORK/err")"
  same "the CUDA backend (emulated) = the CPU's, bit for bit" gc gd
else skip "the CUDA backend's initial weights: $EMU not built"; fi

# --check with it
chk() {   # chk LABEL PROGRAM FLAGS...: --check passes
  label=$1; shift
  expect_exit 0 "$label --check" "$@" --init-method-std $S --optimizer adam --lr 0.01 --iterations 2 --check -q
  expect_grep "^check: passed" "$label: check passes"
}
chk "1F1B" "$A" $G --layers-per-stage 2
chk "1F1B T = 2" "$A" $G --layers-per-stage 2 --tensor-parallel 2
chk "experts, T = 2" "$A" $M --layers-per-stage 2 --tensor-parallel 2
if build v "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=4; then   # the vocabulary's rows sharded over the devices
  chk "Vocab-1" "$WORK/v" $G --layers-per-stage 2
else fail "build vocab_1f1b"; fi

# the loss at step 0: about ln V (tiny logits) at S = 0.02; the default init's is not
first() { losses "$1" | cut -d' ' -f1; }
T="$G --layers-per-stage 2 --optimizer adam --lr 0.01 --iterations 2"
run l0 "$A" $T
run l1 "$A" $T --init-method-std $S
python3 -c "import math, sys; a, d = map(float, sys.argv[1:3]); assert abs(a - math.log(64)) < 0.1 and abs(d - a) > 0.1" \
  "$(first "$WORK/l1")" "$(first "$WORK/l0")" 2>/dev/null && pass "step 0: S = 0.02 gives $(first "$WORK/l1") ~ ln 64, the default $(first "$WORK/l0")" ||
  fail "step 0: S = 0.02 $(first "$WORK/l1") (expected ln 64 = 4.159 within 0.1), the default $(first "$WORK/l0") (expected another)"
[ -n "$(losses "$WORK/l0")" ] && ! grep -q init_method_std "$WORK/l0" && pass "without the flag: no init_method_std in JSON" ||
  fail "the default run: '$(losses "$WORK/l0")', $(grep -o '"init_method_std":[^,]*' "$WORK/l0")"
grep -q '"init_method_std":0.02' "$WORK/l1" && pass "JSON layer: init_method_std 0.02" || fail "JSON: no init_method_std 0.02"

# refused
for v in 0 -1 inf nan x ""; do
  expect_exit 2 "--init-method-std '$v' refused" "$A" $G --init-method-std "$v" -q
  expect_grep "init-method-std needs a finite number above 0" "--init-method-std '$v': the message"
done
expect_exit 2 "--init-method-std without a value refused" "$A" $G --init-method-std
expect_exit 2 "--init-method-std with --model mlp refused" "$A" --model mlp --init-method-std $S -q
expect_grep "hint: add --model gpt" "--model mlp: the hint"
finish
