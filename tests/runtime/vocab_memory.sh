#!/bin/sh
# tests/runtime/vocab_memory.sh: the whole device memory (parameters, gradients,
# optimizer state, activations) of 1F1B with the vocabulary layers on its end stages
# against Vocab-1 and Vocab-2 (tests/runtime/cases/vocab_memory.pps: gpt h = 64,
# vocab 16384, 8 layers on 4 devices, Adam), measured by the runtime (--json
# device_peak_bytes, CPU backend) and predicted by `ppsc sim` from model { }
# (peak_bytes): the Vocabulary Parallelism paper's point (Yeung et al., MLSys 2025)
# that partitioning the vocabulary layers over every device balances the memory.
#  - 1F1B: the end devices hold over 4 times what the middle ones do;
#  - Vocab-1, Vocab-2: every device within 25% of every other, and the largest below
#    1F1B's largest;
#  - measured within -3% .. +15% of predicted on every device (the runtime also holds
#    the passes' temporaries, message buffers and the last stage's logits);
#  - 1F1B, Vocab-1 and Vocab-2 with --tensor-parallel 2 against `ppsc sim --hardware
#    tensor_parallel=2` (Megatron's split: the layers, and the input and output layers
#    by vocabulary; under Vocab-1/2 each device's V/P rows over its tensor ranks):
#    within the same bounds on every device, and every device below 60% of T = 1's.
. "$(dirname "$0")/lib.sh"
CASE=$top_srcdir/tests/runtime/cases/vocab_memory.pps
for mode in 0 1 2; do
  build vm$mode "$CASE" --stdlib "$top_srcdir/stdlib" -D mode=$mode || { fail "ppsc build mode $mode"; continue; }
  "$PPSC" sim --stdlib "$top_srcdir/stdlib" "$CASE" -D mode=$mode --json > "$WORK/p$mode.json" 2> "$WORK/err" ||
    { fail "ppsc sim mode $mode"; cat "$WORK/err" >&2; }
  "$WORK/vm$mode" --model gpt --optimizer adam --json > "$WORK/m$mode.json" 2> "$WORK/err" ||
    { fail "run mode $mode"; cat "$WORK/err" >&2; }
done
for mode in 0 1 2; do
  "$PPSC" sim --stdlib "$top_srcdir/stdlib" "$CASE" -D mode=$mode --hardware tensor_parallel=2 --hardware tp_bandwidth=1e11 --json \
    > "$WORK/pt$mode.json" 2> "$WORK/err" || { fail "ppsc sim mode $mode --hardware tensor_parallel=2"; cat "$WORK/err" >&2; }
  "$WORK/vm$mode" --model gpt --optimizer adam --tensor-parallel 2 --json > "$WORK/mt$mode.json" 2> "$WORK/err" ||
    { fail "run mode $mode --tensor-parallel 2"; cat "$WORK/err" >&2; }
done
python3 - "$WORK" <<'PY' > "$WORK/py.out" 2>&1
import json, sys
w = sys.argv[1]
bad = []
pred = {m: [d["peak_bytes"] for d in json.load(open("%s/p%d.json" % (w, m)))["per_device"]] for m in (0, 1, 2)}
meas = {m: [d["device_peak_bytes"] for d in json.load(open("%s/m%d.json" % (w, m)))["per_device"]] for m in (0, 1, 2)}
for what, v in (("predicted", pred), ("measured", meas)):
    print("%s: 1F1B %s, Vocab-1 %s, Vocab-2 %s" % (what, v[0], v[1], v[2]))
    if not max(v[0]) > 4 * min(v[0]): bad.append("%s: 1F1B's end devices do not hold over 4x the middle ones" % what)
    for m in (1, 2):
        if not max(v[m]) <= 1.25 * min(v[m]): bad.append("%s: Vocab-%d is not balanced within 25%%" % (what, m))
        if not max(v[m]) < max(v[0]): bad.append("%s: Vocab-%d's largest device is not below 1F1B's" % (what, m))
for m in (0, 1, 2):
    for d, (a, b) in enumerate(zip(meas[m], pred[m])):
        if not 0.97 * b <= a <= 1.15 * b: bad.append("mode %d device %d: measured %d, predicted %d" % (m, d, a, b))
for m in (0, 1, 2):
    pt = [d["peak_bytes"] for d in json.load(open("%s/pt%d.json" % (w, m)))["per_device"]]
    mt = [d["device_peak_bytes"] for d in json.load(open("%s/mt%d.json" % (w, m)))["per_device"]]
    print("mode %d T = 2: predicted %s, measured %s" % (m, pt, mt))
    if len(pt) != 4 or len(mt) != 4: bad.append("mode %d T = 2: %d predicted and %d measured devices" % (m, len(pt), len(mt)))
    for d, (a, b) in enumerate(zip(mt, pt)):
        if not 0.97 * b <= a <= 1.15 * b: bad.append("mode %d T = 2 device %d: measured %d, predicted %d" % (m, d, a, b))
        if not a < 0.6 * meas[m][d]: bad.append("mode %d T = 2 device %d: %d is not below 60%% of T = 1's %d" % (m, d, a, meas[m][d]))
print("\n".join(bad) if bad else "ok")
sys.exit(1 if bad else 0)
PY
if [ $? -eq 0 ]; then pass "$(tr '\n' ';' < "$WORK/py.out")"; else fail "vocabulary memory:"; sed 's/^/    /' "$WORK/py.out" >&2; fi
finish
