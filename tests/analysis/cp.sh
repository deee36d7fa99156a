#!/bin/sh
# tests/analysis/cp.sh: context parallelism in `ppsc check/sim` (hardware {
# context_parallel = C; cp_bandwidth; cp_latency }, compiler/costmodel.c and dp_derive,
# docs/language.md "Context parallelism"): Megatron-LM's --context-parallel-size C with
# --cp-comm-type all_gather. Every figure is computed here, in python3, from the
# layout the docs describe, independently of ppsc's code:
#  - TF, TB, TW (a device share, stage 0's and stage S-1's) and TC (`ppsc expand`):
#    every FLOP 1/C (the causal attention's too: 2 of 2C chunks a GPU), the K and V
#    all-gather (F) and all-gather + reduce-scatter (B) over the C GPUs of
#    2 s b (g/T)(h/a) d bytes a layer, rings at cp_bandwidth and cp_latency; the
#    tensor-parallel collectives of s / C tokens; TC of s / C (and / T with SP) rows;
#  - unit_bytes and peak_bytes (the activations 1/C), static_bytes (the optimizer state
#    sharded over D x C under distributed_optimizer), the `context_parallel` JSON object;
#  - the data-parallel collectives over the D x C GPUs (all-reduce, or reduce-scatter
#    and all-gather), and with data_parallel = 1 over the C GPUs at cp_bandwidth and
#    cp_latency (no dp_bandwidth given);
#  - at 1F1B P = 4: C = 2 against C = 1 of the same file (FLOPs and activation bytes
#    halved), with T = 2 and sequence parallelism, with D = 2 and the distributed
#    optimizer, under `vocab parallel`;
#  - context_parallel = 1 changes no byte of sim's text and JSON or check's; the
#    text's layout line;
#  - bad values: errors at the key's line and column, exit 1.
. "$(dirname "$0")/lib.sh"

# 1F1B written out (stdlib's 1f1b.pps states its costs, which would win), P = 4,
# 8 layers (2 a stage), a = 16 heads, g = 8 groups, seq 48 (divisible by 2C at C = 2, 3)
cat > "$tmp/lin.pps" <<'PPS'
schedule lin(P = 4, m = 6, C = 2, tp = 1, sp = 0, D = 1, dist = 0, mem = 1e12) {
  devices P;
  microbatches m;
  placement linear;
  model { layers = 8; hidden = 128; ffn_hidden = 384; heads = 16; query_groups = 8;
          seq = 48; micro_batch = 2; vocab = 1000; dtype_bytes = 2; }
  hardware { memory = mem; flops = 1e12; efficiency = 0.5; peer_bandwidth = 1e9;
             context_parallel = C; cp_bandwidth = 3e10; cp_latency = 2e-6;
             tensor_parallel = tp; sequence_parallel = sp; tp_bandwidth = 1e10; tp_latency = 1e-6;
             data_parallel = D; dp_bandwidth = 1e9; dp_latency = 5e-6; distributed_optimizer = dist; }
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
# the same under `vocab parallel` (Vocab-1: the warm-up 2 longer), no data parallelism
sed -e 's/schedule lin(P = 4,/schedule voc(P = 4,/' -e 's/  placement linear;/  placement linear;\n  vocab parallel 1;/' \
    -e 's/let warm = min(P - d - 1, m)/let warm = min(P - d + 1, m)/' \
    -e 's/{ F(i + warm) BW(i) }/{ F(i + warm) B(i) W(i) }/' -e 's/{ BW(i) }/{ B(i) W(i) }/' \
    -e 's/ data_parallel = D; dp_bandwidth = 1e9; dp_latency = 5e-6; distributed_optimizer = dist;//' "$tmp/lin.pps" > "$tmp/voc.pps" || exit 99
# data_parallel = 1: the gradient all-reduce over the C GPUs at cp_bandwidth, cp_latency
sed 's/ dp_bandwidth = 1e9; dp_latency = 5e-6;//' "$tmp/lin.pps" > "$tmp/nodp.pps" || exit 99

# model.py SPEC: the expected figures (JSON) of one case; SPEC {C, T, sp, D, dist, vocab}
# and "dpbw" ("dp": dp_bandwidth and dp_latency given, "cp": not given)
cat > "$tmp/model.py" <<'PY'
import json, sys
c = json.loads(sys.argv[1])
C, T, sp, D, dist, vocab, P = c["C"], c["T"], c["sp"], c["D"], c["dist"], c["vocab"], 4
L, h, f, a, g, s, b, V, d = 8, 128, 384, 16, 8, 48, 2, 1000, 2
rate, peer, tbw, tlat, cbw, clat = 1e12 * 0.5, 1e9, 1e10, 1e-6, 3e10, 2e-6
dbw, dlat = (1e9, 5e-6) if c.get("dpbw", "dp") == "dp" else (cbw, clat)
S = P; share = L / P
def ring(n, x, bw, lat): return 2 * (n - 1) / n * x / bw + 2 * (n - 1) * lat    # all-reduce
def half(n, x, bw, lat): return (n - 1) / n * x / bw + (n - 1) * lat            # reduce-scatter, all-gather
# a GPU works on s / C tokens: 2 of 2C chunks, c and 2C-1-c; under the causal mask
# chunk k attends to k + 1 chunks, so a GPU's pair sees (c + 1) + (2C - c) = 2C + 1
# chunk pairs of the C(2C + 1) in all: 1/C of the attention, as of every matrix
tok = b * s / C
for k in range(C): assert (k + 1) + (2 * C - k) == (2 * C * (2 * C + 1) // 2) // C
# a layer's FLOPs on them: the matrices 2 a weight a token, the attention 4 b s^2 h / C
M = 2 * tok * (h * (h + 2 * g * h / a) + h * h + 2 * h * f)
A = 4 * b * s * s * h / C
x = tok * h * d                                  # a TP message: the GPU's tokens
tp = 0 if T == 1 else (4 * half(T, x, tbw, tlat) if sp else 2 * ring(T, x, tbw, tlat))
kv = 2 * s * b * (g // T) * (h // a) * d        # K and V of the GPU's key/value heads, whole sequence
cpf = half(C, kv, cbw, clat)                     # F: an all-gather
cpb = 2 * half(C, kv, cbw, clat)                 # B: an all-gather and a reduce-scatter
e = {"TF": share * ((M + A) / T / rate + tp + cpf), "TB": share * ((M + 2 * A) / T / rate + tp + cpb),
     "TW": share * M / T / rate, "TC": x / (T if sp else 1) / peer}
e["cp"] = {"size": C, "gpus": P * D * C * T, "bandwidth": cbw, "latency": clat, "kv_bytes": kv,
           "comm_f": share * cpf, "comm_b": share * cpb, "comm_w": 0}
out = 2 * tok * h * V / T / rate
def ar(n, y): return 0 if T == 1 else ring(T, y, tbw, tlat)
def hf(y): return 0 if T == 1 else half(T, y, tbw, tlat)
if vocab:   # (Vocab-1; the tensor-parallel group's sums inside TIF, TS, TT: tp.sh)
    vx = ar(T, tok * h * 4)
    e["TS"], e["TT"] = out / P + 3 * ar(T, tok * 4), 2 * out / P + vx
    e["TIF"], e["TIB"] = tok * h / T / rate / P + vx, 2 * tok * h / T / rate / P
else:
    # (the input layer whole on every GPU of the tensor-parallel group: a lookup of each token)
    e["stage0"] = [e["TF"] + tok * h / rate + (hf(x) if sp else ar(T, x)), e["TB"] + (hf(x) if sp else 0),
                   e["TW"] + 2 * tok * h / rate]
    e["stageL"] = [e["TF"] + out + (hf(x) if sp else 0) + 3 * ar(T, tok * 4), e["TB"] + out + (hf(x) if sp else ar(T, x)),
                   e["TW"] + out]
# a layer's activation of the GPU's tokens: whole (6h d + 16) and split over T
# ((h + 2hg/a + h + 2f) d + 4a), all split with sequence parallelism
whole = tok * (6 * h * d + 16)
split = tok * ((h + 2 * h * g / a + h + 2 * f) * d + 4 * a)
e["unit"] = share * ((whole + split) / T if sp else whole + split / T)
# a GPU's parameters (CP splits none): QKV, projection, FC1, FC2 and their biases, norms
q = h + 2 * h * g / a
lay = (h * q + q + h * h + h * f + f + f * h) / T + h + h + 4 * h
params = [share * lay for st in range(S)]
if not vocab:
    params[0] += h * V / T + s * h
    params[S - 1] += h * V / T
params[S - 1] += 2 * h
dev = list(params)
if vocab:
    dev = [p + 2 * h * V / P / T for p in dev]
    dev[0] += s * h
R = D * C                                        # the gradient group
e["static"] = [p * (d + 4 + 12 / (R if dist else 1)) for p in dev]
if vocab and D > 1:                              # each device's vocabulary rows: one collective each
    VB = [4 * (2 * h * V / P / T + (s * h if k == 0 else 0)) for k in range(P)]
    e["vocab_dp"] = {"time": [half(R, y, dbw, dlat) if dist else ring(R, y, dbw, dlat) for y in VB],
                     "allgather_time": [half(R, y / 4 * d, dbw, dlat) for y in VB] if dist else None, "bytes": VB}
if not vocab:
    G = [4 * p for p in params]
    e["dp"] = {"ranks": R, "bandwidth": dbw, "latency": dlat,
               "time": [half(R, y, dbw, dlat) if dist else ring(R, y, dbw, dlat) for y in G],
               "allgather_time": [half(R, y / 4 * d, dbw, dlat) for y in G] if dist else None}
print(json.dumps(e))
PY

# check.py EXPECT EXPAND JSON: the figures against the model
cat > "$tmp/check.py" <<'PY'
import json, sys
from figs import bad, want, costs
e = json.loads(sys.argv[1]); x = open(sys.argv[2]).read(); j = json.load(open(sys.argv[3]))
costs = costs(x)
for k in ["TF", "TB", "TW", "TC", "TS", "TT", "TIF", "TIB"]:
    if k in e: want(k, costs.get(k), e[k])
S = j["stages"]
for k, st in [("stage0", "0"), ("stageL", str(S - 1))]:
    if k in e:
        for i, n in enumerate(["TF", "TB", "TW"]):
            want("stage %s %s" % (st, n), costs.get(st + n, costs.get(n)), e[k][i])
want("unit_bytes", j["unit_bytes"], e["unit"])
for v in j["per_device"]:
    want("device %d static_bytes" % v["device"], v["static_bytes"], e["static"][v["device"]])
    want("device %d peak_bytes" % v["device"], v["peak_bytes"], e["static"][v["device"]] + v["peak_memory"] * e["unit"])
cp = j.get("context_parallel") or {}
for k, w in e["cp"].items(): want("context_parallel." + k, cp.get(k), w)
if "tensor_parallel" in j: want("tensor_parallel.gpus", j["tensor_parallel"]["gpus"], e["cp"]["gpus"])
if "dp" in e:
    dp = j.get("data_parallel") or {"stages": []}
    want("data_parallel.ranks", dp.get("ranks"), e["dp"]["ranks"])
    want("data_parallel.context_parallel", dp.get("context_parallel"), e["cp"]["size"])
    want("data_parallel.bandwidth", dp.get("bandwidth"), e["dp"]["bandwidth"])
    want("data_parallel.latency", dp.get("latency"), e["dp"]["latency"])
    if len(dp["stages"]) != S: bad.append("data_parallel.stages: %d, want %d" % (len(dp["stages"]), S))
    for v in dp["stages"]:
        want("stage %d collective time" % v["stage"], v["time"], e["dp"]["time"][v["stage"]])
        want("stage %d end" % v["stage"], v["end"], v["start"] + e["dp"]["time"][v["stage"]])
        if e["dp"]["allgather_time"]:
            want("stage %d allgather_time" % v["stage"], v.get("allgather_time"), e["dp"]["allgather_time"][v["stage"]])
if "vocab_dp" in e:
    vs = (j.get("data_parallel") or {}).get("vocab") or []
    if len(vs) != len(e["vocab_dp"]["bytes"]): bad.append("data_parallel.vocab: %d devices" % len(vs))
    for v in vs:
        k = v["device"]
        want("device %d vocabulary rows' bytes" % k, v["bytes"], e["vocab_dp"]["bytes"][k])
        want("device %d vocabulary rows' collective time" % k, v["time"], e["vocab_dp"]["time"][k])
        if e["vocab_dp"]["allgather_time"]:
            want("device %d vocabulary rows' allgather_time" % k, v.get("allgather_time"), e["vocab_dp"]["allgather_time"][k])
if bad: print("\n".join(bad)); sys.exit(1)
PY

# run NAME FILE SPEC ARGS...: expand and sim --json of FILE at ARGS against the model
run() {
  name=$1 file=$2 spec=$3; shift 3
  "$PPSC" expand "$tmp/$file" "$@" > "$tmp/x.pps" 2> "$tmp/err" || { bad "$name: expand: $(cat "$tmp/err")"; return; }
  "$PPSC" sim --json "$tmp/$file" "$@" > "$tmp/j.json" 2> "$tmp/err" || { bad "$name: sim: $(cat "$tmp/err")"; return; }
  e=$(python3 "$tmp/model.py" "$spec") || { bad "$name: the model"; return; }
  python3 "$tmp/check.py" "$e" "$tmp/x.pps" "$tmp/j.json" > "$tmp/why" || bad "$name: $(cat "$tmp/why")"
}
run "1F1B C=2" lin.pps '{"C": 2, "T": 1, "sp": 0, "D": 1, "dist": 0, "vocab": 0, "dpbw": "dp"}'
run "1F1B C=3" lin.pps '{"C": 3, "T": 1, "sp": 0, "D": 1, "dist": 0, "vocab": 0, "dpbw": "dp"}' -D C=3
run "1F1B C=2 T=2 sp" lin.pps '{"C": 2, "T": 2, "sp": 1, "D": 1, "dist": 0, "vocab": 0}' -D tp=2 -D sp=1
run "1F1B C=2 T=2" lin.pps '{"C": 2, "T": 2, "sp": 0, "D": 1, "dist": 0, "vocab": 0}' -D tp=2
run "1F1B C=2 D=2 distributed optimizer" lin.pps '{"C": 2, "T": 1, "sp": 0, "D": 2, "dist": 1, "vocab": 0, "dpbw": "dp"}' -D D=2 -D dist=1
run "1F1B C=2 D=2 all-reduce" lin.pps '{"C": 2, "T": 1, "sp": 0, "D": 2, "dist": 0, "vocab": 0, "dpbw": "dp"}' -D D=2
run "1F1B C=2 T=2 sp D=3 distributed optimizer" lin.pps '{"C": 2, "T": 2, "sp": 1, "D": 3, "dist": 1, "vocab": 0, "dpbw": "dp"}' \
  -D tp=2 -D sp=1 -D D=3 -D dist=1
run "1F1B C=2 D=1 (cp_bandwidth)" nodp.pps '{"C": 2, "T": 1, "sp": 0, "D": 1, "dist": 0, "vocab": 0, "dpbw": "cp"}'
run "1F1B C=2 D=1 distributed optimizer (cp_bandwidth)" nodp.pps '{"C": 2, "T": 1, "sp": 0, "D": 1, "dist": 1, "vocab": 0, "dpbw": "cp"}' -D dist=1
run "Vocab-1 C=2 T=2" voc.pps '{"C": 2, "T": 2, "sp": 0, "D": 1, "dist": 0, "vocab": 1}' -D tp=2
# with data parallelism (given with --hardware): the vocabulary rows over the D x C GPUs too
run "Vocab-1 C=2 T=2 D=2 distributed optimizer" voc.pps '{"C": 2, "T": 2, "sp": 0, "D": 2, "dist": 1, "vocab": 1, "dpbw": "dp"}' -D tp=2 \
  --hardware data_parallel=2 --hardware dp_bandwidth=1e9 --hardware dp_latency=5e-6 --hardware distributed_optimizer=1

# C = 2 against C = 1 of the same file, from ppsc's own figures: a device share's
# compute (TF - the CP communication) and activation bytes halved
"$PPSC" sim --json "$tmp/lin.pps" -D C=1 > "$tmp/c1.json" && "$PPSC" sim --json "$tmp/lin.pps" -D C=2 > "$tmp/c2.json" &&
  "$PPSC" expand "$tmp/lin.pps" -D C=1 > "$tmp/c1.pps" && "$PPSC" expand "$tmp/lin.pps" -D C=2 > "$tmp/c2.pps" || bad "sim C=1, C=2"
python3 - "$tmp/c1.json" "$tmp/c2.json" "$tmp/c1.pps" "$tmp/c2.pps" <<'PY' || bad "C=2 against C=1"
import json, re, sys
j1, j2 = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
def cost(f, k): return float(re.search(r"^  cost .*\b%s = ([-0-9.e+]+)" % k, open(f).read(), re.M).group(1))
near = lambda a, b: abs(a - b) <= 1e-9 * abs(b)   # relative 1e-9
cp = j2["context_parallel"]
bad = []
if "context_parallel" in j1: bad.append("C = 1 has a context_parallel object")
for k, c in [("TF", "comm_f"), ("TB", "comm_b"), ("TW", "comm_w")]:
    if not near(cost(sys.argv[4], k) - cp[c], cost(sys.argv[3], k) / 2): bad.append("%s compute not halved" % k)
if not (cp["comm_f"] > 0 and near(cp["comm_b"], 2 * cp["comm_f"])): bad.append("comm_f %s, comm_b %s" % (cp["comm_f"], cp["comm_b"]))
if not near(j2["unit_bytes"], j1["unit_bytes"] / 2): bad.append("unit_bytes %s, C = 1: %s" % (j2["unit_bytes"], j1["unit_bytes"]))
for v1, v2 in zip(j1["per_device"], j2["per_device"]):
    a1, a2 = v1["peak_bytes"] - v1["static_bytes"], v2["peak_bytes"] - v2["static_bytes"]
    if not near(a2, a1 / 2) or v1["static_bytes"] != v2["static_bytes"]: bad.append("device %d activations %s, C = 1: %s" % (v1["device"], a2, a1))
if bad: print("\n".join(bad)); sys.exit(1)
PY

# the text: the layout, the CP communication (K and V: 2 s b (g/T)(h/a) d bytes), the gradient group
kv=$(python3 -c 'print("%.4g" % (2 * 48 * 2 * (8 // 2) * (128 // 16) * 2))')
"$PPSC" sim "$tmp/lin.pps" -D tp=2 -D sp=1 -D D=2 -D dist=1 > "$tmp/t.txt" || bad "sim text"
grep -q "^layout      tensor parallel T = 2 (sequence parallel), context parallel C = 2: P x D x C x T = 4 x 2 x 2 x 2 = 32 GPUs" "$tmp/t.txt" &&
  grep -q "^            CP communication (K and V, $kv bytes a layer and microbatch, all-gathered over the 2 GPUs" "$tmp/t.txt" &&
  grep -q "optimizer state sharded over 4 GPUs (data-parallel x context-parallel)" "$tmp/t.txt" &&
  grep -q "^data parallel 2 x context parallel 2 = R = 4 GPUs a gradient group, distributed optimizer" "$tmp/t.txt" || bad "text: $(cat "$tmp/t.txt")"
"$PPSC" check "$tmp/lin.pps" -D C=3 > "$tmp/t.txt" 2>&1 && grep -q "^lin: context parallel C = 3: P x D x C = 4 x 1 x 3 = 12 GPUs" "$tmp/t.txt" ||
  bad "check's layout line: $(cat "$tmp/t.txt")"

# context_parallel = 1 is the keys absent: the same file name in two folders
mkdir "$tmp/a" "$tmp/b" || exit 99
sed 's/context_parallel = C; cp_bandwidth = 3e10; cp_latency = 2e-6;//' "$tmp/lin.pps" > "$tmp/a/lin.pps"
sed 's/context_parallel = C;/context_parallel = 1;/' "$tmp/lin.pps" > "$tmp/b/lin.pps"
for dir in a b; do
  (cd "$tmp/$dir" && "$PPSC" sim lin.pps > s.txt && "$PPSC" sim --json lin.pps > s.json && "$PPSC" check lin.pps -D tp=2 > c.txt &&
   "$PPSC" sim --json lin.pps -D D=4 -D dist=1 -D tp=2 -D sp=1 > d.json && "$PPSC" sim lin.pps -D D=4 -D dist=1 > d.txt) || bad "sim $dir"
done
for x in s.txt s.json c.txt d.json d.txt; do cmp -s "$tmp/a/$x" "$tmp/b/$x" || bad "context_parallel = 1 changed $x"; done
cmp -s "$tmp/a/s.json" "$tmp/c2.json" && bad "context_parallel = 2 changed nothing"

# bad values: errors at the key, exit 1
M='layers = 4; hidden = 64; heads = 4; seq = 24; micro_batch = 1;'
cd "$tmp" || exit 99
keyerr seq "$M" 'context_parallel = 8; cp_bandwidth = 1;' 4:14 'hardware context_parallel = 8 needs model seq = 24 divisible by 2 x 8 = 16'
grep -q "^seq.pps:3:47: note: model seq is given here" "$tmp/seq.out" || bad "seq: no note at the seq key: $(cat "$tmp/seq.out")"
keyerr seq5 "$M" 'context_parallel = 5; cp_bandwidth = 1;' 4:14 'hardware context_parallel = 5 needs model seq = 24 divisible by 2 x 5 = 10'
keyerr nobw "$M" 'flops = 1e12; context_parallel = 2;' 4:28 'hardware context_parallel = 2 needs cp_bandwidth (bytes/s of each GPU.s link inside its context-parallel group)'
keyerr half "$M" 'context_parallel = 1.5; cp_bandwidth = 1;' 4:14 'hardware context_parallel must be a whole number from 1 to 1000000 (GPUs of each context-parallel group), got 1.5'
keyerr zero "$M" 'context_parallel = 0;' 4:14 'hardware context_parallel must be a whole number'
keyerr cpbw "$M" 'context_parallel = 2; cp_bandwidth = 0;' 4:36 'hardware cp_bandwidth must be positive, got 0'
keyerr cplat "$M" 'context_parallel = 2; cp_bandwidth = 1; cp_latency = -1;' 4:54 'hardware cp_latency must not be negative, got -1'
# the gradient group of data_parallel 1 needs a bandwidth: none of dp_, cp_, peer_bandwidth
keyerr dpbw "$M" 'context_parallel = 2;' 4:14 'hardware context_parallel 2 (a gradient all-reduce over its GPUs) needs dp_bandwidth, cp_bandwidth or peer_bandwidth'
# a bandwidth is needed only where times are derived: no flops, and a peer_bandwidth for the gradients
printf 'schedule ok {\n  devices 2; microbatches 2;\n  model { %s }\n  hardware { context_parallel = 4; peer_bandwidth = 1e9; }\n  device 0 { F(0) F(1) BW(0) BW(1) }\n  device 1 { F(0) BW(0) F(1) BW(1) }\n}\n' \
  'layers = 4; hidden = 64; heads = 4; seq = 32; micro_batch = 1;' > "$tmp/ok.pps"
"$PPSC" check "$tmp/ok.pps" > "$tmp/ok.out" 2>&1 || bad "C = 4 without flops or cp_bandwidth: $(cat "$tmp/ok.out")"
exit $fail
