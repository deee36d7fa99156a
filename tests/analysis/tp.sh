#!/bin/sh
# tests/analysis/tp.sh: tensor parallelism in `ppsc check/sim` (hardware {
# tensor_parallel = T; sequence_parallel; tp_bandwidth; tp_latency }, compiler/costmodel.c,
# docs/language.md "Tensor parallelism"). Every figure is computed here, in python3,
# from Megatron-LM's layout as the docs describe it, independently of ppsc's code:
#  - TF, TB, TW (a device share) and stage 0's and stage S-1's (input and output
#    layers), TC, and under `vocab parallel` TS, TT, TIF, TIB (`ppsc expand`), at
#    T = 2, 4, 8, with and without sequence parallelism, with a latency a ring step;
#  - unit_bytes (a layer's buffers, whole or split over the group), static_bytes and
#    peak_bytes per device (one GPU's parameters, by matrix), the data-parallel
#    gradient bytes of each stage with data_parallel + distributed_optimizer, and the
#    `tensor_parallel` JSON object; a vocabulary-parallel schedule (stdlib's and one
#    written here) with its V / (P T) shares;
#  - the same at T = 2 with model { swiglu rmsnorm rope bias } (Llama-style layers,
#    each switch alone and all together) and swiglu's default ffn_hidden;
#  - hardware.memory just above and just below the busiest GPU's total: check passes,
#    then fails at the memory key;
#  - tensor_parallel = 1 (and sequence_parallel = 0, tp_latency) changes no byte of
#    sim's text and JSON or check's; the text's layout line with T > 1;
#  - bad values: errors at the key's line and column, exit 1.
. "$(dirname "$0")/lib.sh"

# 1F1B written out (stdlib's 1f1b.pps states its costs, which would win), P = 4,
# 8 layers (2 a stage); a = 16 heads, g = 8 groups, f = 384: all divisible by 8
cat > "$tmp/lin.pps" <<'PPS'
schedule lin(P = 4, m = 6, tp = 2, sp = 0, D = 1, dist = 0, mem = 1e12) {
  devices P;
  microbatches m;
  placement linear;
  model { layers = 8; hidden = 128; ffn_hidden = 384; heads = 16; query_groups = 8;
          seq = 32; micro_batch = 2; vocab = 1000; dtype_bytes = 2; }
  hardware { memory = mem; flops = 1e12; efficiency = 0.5; peer_bandwidth = 1e9;
             tensor_parallel = tp; sequence_parallel = sp; tp_bandwidth = 1e10; tp_latency = 1e-6;
             data_parallel = D; dp_bandwidth = 1e9; distributed_optimizer = dist; }
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
# the same under `vocab parallel` (Vocab-1 or -2: the warm-up 2 or 1 longer)
sed -e 's/schedule lin(P = 4,/schedule voc(mode = 1, P = 4,/' -e 's/  placement linear;/  placement linear;\n  vocab parallel mode;/' \
    -e 's/let warm = min(P - d - 1, m)/let warm = min(P - d - 1 + 3 - mode, m)/' \
    -e 's/{ F(i + warm) BW(i) }/{ F(i + warm) B(i) W(i) }/' -e 's/{ BW(i) }/{ B(i) W(i) }/' \
    -e 's/ data_parallel = D; dp_bandwidth = 1e9; distributed_optimizer = dist;//' "$tmp/lin.pps" > "$tmp/voc.pps" || exit 99
# stdlib's Vocab-1 (its costs are stated: only the bytes are derived)
cat > "$tmp/svoc.pps" <<'PPS'
import "vocab_1f1b.pps";
schedule svoc(tp = 4, sp = 1) {
  use vocab_1f1b(4, 8, mode = 1);
  model { layers = 8; hidden = 128; ffn_hidden = 384; heads = 16; query_groups = 8;
          seq = 32; micro_batch = 2; vocab = 1000; dtype_bytes = 2; }
  hardware { memory = 1e12; tensor_parallel = tp; sequence_parallel = sp; }
}
PPS

# model.py SPEC: the expected figures (JSON) of one case; SPEC {T, sp, D, dist, vocab}
# and optionally the Llama-style switches {swiglu, rmsnorm, rope, bias} (default 0, 0,
# 0, 1) and f (ffn_hidden, default 384; null: not given, swiglu's default)
cat > "$tmp/model.py" <<'PY'
import json, sys
c = json.loads(sys.argv[1])
T, sp, D, dist, vocab, P = c["T"], c["sp"], c["D"], c["dist"], c["vocab"], c.get("P", 4)
sw, rms, rope, bias = c.get("swiglu", 0), c.get("rmsnorm", 0), c.get("rope", 0), c.get("bias", 1)
L, h, f, a, g, s, b, V, d = 8, 128, c.get("f", 384), 16, 8, 32, 2, 1000, 2
if f is None:   # Megatron-LM's default with --swiglu: int(4h * 2/3 / 64) * 64
    f = int(4 * h * 2 / 3 / 64) * 64 if sw else 4 * h
rate, peer, bw, lat = 1e12 * 0.5, 1e9, 1e10, 1e-6
S = P; share = L / P; bsh = b * s * h
def ring(n, x): return 2 * (n - 1) / n * x / bw + 2 * (n - 1) * lat      # all-reduce
def half(n, x): return (n - 1) / n * x / bw + (n - 1) * lat              # reduce-scatter, all-gather
x = bsh * d
# a layer's FLOPs: the matrices (QKV with g key/value heads, projection, FC1 of f or
# with SwiGLU 2f columns, FC2) 2 a weight a token, and the attention's scores and
# values 4bs^2h; F = M + A, B = M + 2A (two gradients of the attention), W = M
M = 2 * b * s * (h * (h + 2 * g * h / a) + h * h + (3 if sw else 2) * h * f)
A = 4 * b * s * s * h
# a layer, one microbatch: Megatron's 2 all-reduces in F and in B (the attention's and
# the MLP's row-parallel outputs), or with SP 2 all-gathers + 2 reduce-scatters
comm = (2 * half(T, x) + 2 * half(T, x)) if sp else 2 * ring(T, x)
e = {}
e["TF"] = share * ((M + A) / T / rate + comm)
e["TB"] = share * ((M + 2 * A) / T / rate + comm)
e["TW"] = share * M / T / rate
e["TC"] = x / (T if sp else 1) / peer
out = 2 * bsh * V / T / rate
if vocab:
    # each device's V/P rows split over its group (the runtime's model_gpt.c), the
    # group's sums inside the passes, of all bs rows in F32: TIF all-reduces the
    # embeddings, TS the cross-entropy's 3 bs statistics (Vocab-2: and its A and G, 2
    # bsh), TT (Vocab-1) the input gradient bsh; TIB none
    vx = ring(T, bsh * 4)
    e["TS"] = (2 if vocab == 2 else 1) * out / P + 3 * ring(T, b * s * 4) + (2 * vx if vocab == 2 else 0)
    e["TT"] = (1 if vocab == 2 else 2) * out / P + (vx if vocab == 1 else 0)
    e["TIF"] = bsh / T / rate / P + vx
    e["TIB"] = 2 * bsh / T / rate / P
    e["comm"] = {"input_comm_f": vx, "input_comm_b": 0, "output_comm_f": e["TS"] - (2 if vocab == 2 else 1) * out / P,
                 "output_comm_b": vx if vocab == 1 else 0}
else:
    # input layer: embedding lookup bsh, its gradient 2bsh, whole on every GPU (each
    # looks up every token in its vocabulary rows); F all-reduces its output (SP:
    # reduce-scatters it), B all-gathers the gradient (SP only)
    e["stage0"] = [e["TF"] + bsh / rate + (half(T, x) if sp else ring(T, x)),
                   e["TB"] + (half(T, x) if sp else 0),
                   e["TW"] + 2 * bsh / rate]
    # output layer: 2bshV each pass; F all-gathers X (SP) and all-reduces 3 bs F32
    # statistics of the cross-entropy; B all-reduces dX (SP: reduce-scatters it)
    e["stageL"] = [e["TF"] + out + (half(T, x) if sp else 0) + 3 * ring(T, b * s * 4),
                   e["TB"] + out + (half(T, x) if sp else ring(T, x)),
                   e["TW"] + out]
    e["comm"] = {"comm_f": share * comm, "comm_b": share * comm, "comm_w": 0,
                 "input_comm_f": half(T, x) if sp else ring(T, x), "input_comm_b": half(T, x) if sp else 0,
                 "output_comm_f": (half(T, x) if sp else 0) + 3 * ring(T, b * s * 4),
                 "output_comm_b": half(T, x) if sp else ring(T, x)}
# a layer's activation (runtime/model_gpt.c layer_bytes + grad_slots), per token:
# whole on every GPU without SP: ln1, x1, ln2, y, the two residual gradients (6h x d)
# and the layer norms' F32 mean and rstd (16; rstd alone with RMSNorm: 8); split:
# qkv (h + 2hg/a), att (h), hpre (f, or gate and up 2f with SwiGLU) and hact (f) x d,
# and the attention's F32 statistics (4 a head)
whole = s * b * (6 * h * d + (8 if rms else 16))
split = s * b * ((h + 2 * h * g / a + h + (2 if sw else 1) * f + f) * d + 4 * a)
layer = (whole + split) / T if sp else whole + split / T
e["unit"] = share * layer
e["layer_bytes_whole"] = 0 if sp else whole
e["layer_bytes_split"] = whole + split if sp else split
# one GPU's parameters, matrix by matrix: QKV [h, q] and its bias, projection [h, h]
# and its bias (whole), FC1 [h, f] (SwiGLU [h, 2f]) and its bias, FC2 [f, h] and its
# bias (whole); two layer norms of gamma and beta (RMSNorm: gamma), 2h each (h)
q = h + 2 * h * g / a
f1 = 2 * f if sw else f
norm = h if rms else 2 * h
lay = (h * q) / T + bias * q / T + h * h / T + bias * h + h * f1 / T + bias * f1 / T + f * h / T + bias * h + 2 * norm
pos = 0 if rope else s * h   # the learned position table
params = [share * lay for st in range(S)]
if not vocab:
    params[0] += h * V / T + pos
    params[S - 1] += h * V / T
params[S - 1] += norm
dev = list(params)
if vocab:
    dev = [p + 2 * h * V / P / T for p in dev]
    dev[0] += pos
per = d + 4 + 12 / (D if dist else 1)
e["static"] = [p * per for p in dev]
e["grad"] = [4 * p for p in params]
e["gpus"] = P * D * T
print(json.dumps(e))
PY

# check.py EXPECT EXPAND JSON: the figures against the model
cat > "$tmp/check.py" <<'PY'
import json, re, sys
e = json.loads(sys.argv[1]); x = open(sys.argv[2]).read(); j = json.load(open(sys.argv[3]))
bad = []
def near(a, b): return abs(a - b) <= 1e-9 * max(1e-12, abs(b))
def want(name, got, w):
    if got is None or not near(got, w): bad.append("%s = %s, want %.12g" % (name, got, w))
costs = {}
for m in re.finditer(r"^  cost (.*);$", x, re.M):
    line = m.group(1)
    st = re.match(r"stage (\d+): (.*)", line)
    for k, v in re.findall(r"(\w+) = ([-0-9.e+]+)", st.group(2) if st else line):
        costs[(st.group(1) if st else "") + k] = float(v)
for k in ["TF", "TB", "TW", "TC", "TS", "TT", "TIF", "TIB"]:
    if k in e: want(k, costs.get(k), e[k])
S = j["stages"]
for k, st in [("stage0", "0"), ("stageL", str(S - 1))]:
    if k in e:
        for i, n in enumerate(["TF", "TB", "TW"]):   # (expand leaves out a stage's cost equal to the schedule's)
            want("stage %s %s" % (st, n), costs.get(st + n, costs.get(n)), e[k][i])
want("unit_bytes", j["unit_bytes"], e["unit"])
for v in j["per_device"]:
    k = v["device"]
    want("device %d static_bytes" % k, v["static_bytes"], e["static"][k])
    want("device %d peak_bytes" % k, v["peak_bytes"], e["static"][k] + v["peak_memory"] * e["unit"])
t = j.get("tensor_parallel") or {}
want("tensor_parallel.gpus", t.get("gpus"), e["gpus"])
for k in ["layer_bytes_whole", "layer_bytes_split"]: want("tensor_parallel." + k, t.get(k), e[k])
for k, w in e.get("comm", {}).items(): want("tensor_parallel." + k, t.get(k), w)
if "data_parallel" in j:
    for s in j["data_parallel"]["stages"]: want("stage %d gradient bytes" % s["stage"], s["bytes"], e["grad"][s["stage"]])
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
for T in 2 4 8; do
  for sp in 0 1; do
    run "1F1B T=$T sp=$sp" lin.pps "{\"T\": $T, \"sp\": $sp, \"D\": 1, \"dist\": 0, \"vocab\": 0}" -D tp=$T -D sp=$sp
    run "1F1B T=$T sp=$sp D=4 distributed optimizer" lin.pps "{\"T\": $T, \"sp\": $sp, \"D\": 4, \"dist\": 1, \"vocab\": 0}" \
      -D tp=$T -D sp=$sp -D D=4 -D dist=1
    run "Vocab-1 T=$T sp=$sp" voc.pps "{\"T\": $T, \"sp\": $sp, \"D\": 1, \"dist\": 0, \"vocab\": 1}" -D tp=$T -D sp=$sp
  done
done
run "1F1B T=8 sp=1 D=2 (all-reduce)" lin.pps '{"T": 8, "sp": 1, "D": 2, "dist": 0, "vocab": 0}' -D tp=8 -D sp=1 -D D=2
run "Vocab-2 T=4 sp=0" voc.pps '{"T": 4, "sp": 0, "D": 1, "dist": 0, "vocab": 2}' -D tp=4 -D sp=0 -D mode=2
# the Llama-style switches (model { swiglu rmsnorm rope bias }, given here with --model):
# each alone at T = 2, all together (with SP, data parallelism and the distributed
# optimizer; and under `vocab parallel`), and swiglu's default ffn_hidden (h = 128:
# 5 x 64 = 320, not the file's 384)
run "T=2 swiglu" lin.pps '{"T": 2, "sp": 0, "D": 1, "dist": 0, "vocab": 0, "swiglu": 1}' -D tp=2 -D sp=0 --model swiglu=1
run "T=2 sp=1 rmsnorm" lin.pps '{"T": 2, "sp": 1, "D": 1, "dist": 0, "vocab": 0, "rmsnorm": 1}' -D tp=2 -D sp=1 --model rmsnorm=1
run "T=2 rope" lin.pps '{"T": 2, "sp": 0, "D": 1, "dist": 0, "vocab": 0, "rope": 1}' -D tp=2 -D sp=0 --model rope=1
run "T=2 bias=0" lin.pps '{"T": 2, "sp": 0, "D": 1, "dist": 0, "vocab": 0, "bias": 0}' -D tp=2 -D sp=0 --model bias=0
LLAMA='--model swiglu=1 --model rmsnorm=1 --model rope=1 --model bias=0'
# shellcheck disable=SC2086
run "T=2 sp=1 D=4 Llama" lin.pps '{"T": 2, "sp": 1, "D": 4, "dist": 1, "vocab": 0, "swiglu": 1, "rmsnorm": 1, "rope": 1, "bias": 0}' \
  -D tp=2 -D sp=1 -D D=4 -D dist=1 $LLAMA
# shellcheck disable=SC2086
run "Vocab-1 T=2 Llama" voc.pps '{"T": 2, "sp": 0, "D": 1, "dist": 0, "vocab": 1, "swiglu": 1, "rmsnorm": 1, "rope": 1, "bias": 0}' \
  -D tp=2 -D sp=0 $LLAMA
sed 's/ffn_hidden = 384; //' "$tmp/lin.pps" > "$tmp/linf.pps" || exit 99
run "T=2 sp=1 swiglu, default ffn_hidden" linf.pps '{"T": 2, "sp": 1, "D": 1, "dist": 0, "vocab": 0, "swiglu": 1, "f": null}' \
  -D tp=2 -D sp=1 --model swiglu=1
# shellcheck disable=SC2086
run "T=2 Llama, default ffn_hidden" linf.pps '{"T": 2, "sp": 0, "D": 1, "dist": 0, "vocab": 0, "swiglu": 1, "rmsnorm": 1, "rope": 1, "bias": 0, "f": null}' \
  -D tp=2 -D sp=0 $LLAMA
# stdlib's Vocab-1: its stated costs win (the expand has none derived); the bytes are T's
"$PPSC" sim --json "$tmp/svoc.pps" > "$tmp/sv.json" || bad "sim svoc"
python3 - "$tmp/sv.json" "$(python3 "$tmp/model.py" '{"T": 4, "sp": 1, "D": 1, "dist": 0, "vocab": 1}')" <<'PY' || bad "stdlib vocab_1f1b T=4 sp=1 bytes"
import json, sys
j = json.load(open(sys.argv[1])); e = json.loads(sys.argv[2]); near = lambda a, b: abs(a - b) <= 1e-9 * abs(b)
ok = near(j["unit_bytes"], e["unit"]) and all(near(v["static_bytes"], e["static"][v["device"]]) for v in j["per_device"])
ok = ok and j["time_unit"] == "unit" and j["tensor_parallel"]["comm_f"] is None and j["tensor_parallel"]["gpus"] == 16
if not ok: print(j["unit_bytes"], e["unit"], [v["static_bytes"] for v in j["per_device"]], e["static"], j["tensor_parallel"]); sys.exit(1)
PY

# hardware.memory at the busiest GPU's total (T = 8, SP, D = 4, distributed optimizer),
# 1e-6 above and below: check passes, then fails at the memory key (7:14)
"$PPSC" sim --json "$tmp/lin.pps" -D tp=8 -D sp=1 -D D=4 -D dist=1 > "$tmp/j.json" || bad "sim for memory"
need=$(python3 - "$tmp/j.json" "$(python3 "$tmp/model.py" '{"T": 8, "sp": 1, "D": 4, "dist": 1, "vocab": 0}')" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); e = json.loads(sys.argv[2])
print(repr(max(e["static"][v["device"]] + v["peak_memory"] * e["unit"] for v in j["per_device"])))
PY
)
hi=$(python3 -c "print(repr($need * (1 + 1e-6)))"); lo=$(python3 -c "print(repr($need * (1 - 1e-6)))")
"$PPSC" check "$tmp/lin.pps" -D tp=8 -D sp=1 -D D=4 -D dist=1 -D mem="$hi" > "$tmp/m.out" 2>&1 || bad "memory $hi (need $need): $(cat "$tmp/m.out")"
"$PPSC" check "$tmp/lin.pps" -D tp=8 -D sp=1 -D D=4 -D dist=1 -D mem="$lo" --color=never > "$tmp/m.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "lin.pps:7:14: error: device [0-9] needs .* over hardware.memory" "$tmp/m.out" || bad "memory $lo (need $need): exit $rc: $(cat "$tmp/m.out")"
# T = 8 without sequence parallelism needs more (the replicated part of the activations)
"$PPSC" check "$tmp/lin.pps" -D tp=8 -D sp=0 -D D=4 -D dist=1 -D mem="$hi" > "$tmp/m.out" 2>&1 && bad "memory $hi without sequence parallelism passed"

# the text: the layout and each pass's TP communication
"$PPSC" sim "$tmp/lin.pps" -D tp=8 -D sp=1 -D D=4 -D dist=1 > "$tmp/t.txt" || bad "sim text"
grep -q "^layout      tensor parallel T = 8 (sequence parallel): P x D x T = 4 x 4 x 8 = 128 GPUs" "$tmp/t.txt" &&
  grep -q "^            F [0-9.e-]* s, B [0-9.e-]* s, W 0 a device share; input layer F" "$tmp/t.txt" || bad "text: $(cat "$tmp/t.txt")"
"$PPSC" check "$tmp/lin.pps" -D tp=4 > "$tmp/t.txt" 2>&1 && grep -q "^lin: tensor parallel T = 4: P x D x T = 4 x 1 x 4 = 16 GPUs" "$tmp/t.txt" ||
  bad "check's layout line: $(cat "$tmp/t.txt")"

# tensor_parallel = 1 is the keys absent: the same file name in two folders
mkdir "$tmp/a" "$tmp/b" || exit 99
sed 's/tensor_parallel = tp; sequence_parallel = sp; tp_bandwidth = 1e10; tp_latency = 1e-6;//' "$tmp/lin.pps" > "$tmp/a/lin.pps"
sed 's/tensor_parallel = tp; sequence_parallel = sp;/tensor_parallel = 1; sequence_parallel = 0;/' "$tmp/lin.pps" > "$tmp/b/lin.pps"
for dir in a b; do
  (cd "$tmp/$dir" && "$PPSC" sim lin.pps > s.txt && "$PPSC" sim --json lin.pps > s.json && "$PPSC" check lin.pps > c.txt &&
   "$PPSC" sim --json lin.pps -D D=4 -D dist=1 > d.json) || bad "sim $dir"
done
for x in s.txt s.json c.txt d.json; do cmp -s "$tmp/a/$x" "$tmp/b/$x" || bad "tensor_parallel = 1 changed $x"; done
cmp -s "$tmp/a/s.json" "$tmp/j.json" && bad "tensor_parallel = 8 changed nothing"

# bad values: errors at the key, exit 1
M='layers = 4; hidden = 64; heads = 12; seq = 16; micro_batch = 1;'
cd "$tmp" || exit 99
keyerr heads "$M" 'tensor_parallel = 8; tp_bandwidth = 1;' 4:14 'hardware tensor_parallel = 8 must divide model heads = 12'
grep -q "^heads.pps:3:36: note: model heads is given here" "$tmp/heads.out" || bad "heads: no note at the heads key: $(cat "$tmp/heads.out")"
keyerr groups "$M query_groups = 6;" 'tensor_parallel = 4; tp_bandwidth = 1;' 4:14 'hardware tensor_parallel = 4 must divide model query_groups = 6'
keyerr ffn "$M ffn_hidden = 250;" 'tensor_parallel = 4; tp_bandwidth = 1;' 4:14 'hardware tensor_parallel = 4 must divide model ffn_hidden = 250'
keyerr swiffn "$M swiglu = 1;" 'tensor_parallel = 3; tp_bandwidth = 1;' 4:14 'hardware tensor_parallel = 3 must divide the feed-forward width 128, swiglu.s default ffn_hidden for hidden = 64'
grep -q "^swiffn.pps:3:75: note: model swiglu is given here" "$tmp/swiffn.out" || bad "swiffn: no note at the swiglu key: $(cat "$tmp/swiffn.out")"
keyerr spt1 "$M" 'tensor_parallel = 1; sequence_parallel = 1;' 4:35 'hardware sequence_parallel = 1 needs tensor_parallel > 1'
keyerr spnot "$M" 'sequence_parallel = 1;' 4:14 'hardware sequence_parallel = 1 needs tensor_parallel > 1'
keyerr sp2 "$M" 'tensor_parallel = 2; sequence_parallel = 2;' 4:35 'hardware sequence_parallel must be 0 or 1'
keyerr nobw "$M" 'flops = 1e12; tensor_parallel = 2;' 4:28 'hardware tensor_parallel = 2 needs tp_bandwidth (bytes/s of each GPU.s link inside its tensor-parallel group, e.g. NVLink) or peer_bandwidth'
keyerr half "$M" 'tensor_parallel = 2.5;' 4:14 'hardware tensor_parallel must be a whole number from 1 to 1000000 (GPUs of each tensor-parallel group), got 2.5'
keyerr zero "$M" 'tensor_parallel = 0;' 4:14 'hardware tensor_parallel must be a whole number'
keyerr tpbw "$M" 'tensor_parallel = 2; tp_bandwidth = 0;' 4:35 'hardware tp_bandwidth must be positive, got 0'
keyerr tplat "$M" 'tensor_parallel = 2; tp_bandwidth = 1; tp_latency = -1;' 4:53 'hardware tp_latency must not be negative, got -1'
# a bandwidth is needed only where times are derived: no flops, no error
printf 'schedule ok {\n  devices 2; microbatches 2;\n  model { %s }\n  hardware { tensor_parallel = 4; }\n  device 0 { F(0) F(1) BW(0) BW(1) }\n  device 1 { F(0) BW(0) F(1) BW(1) }\n}\n' \
  'layers = 4; hidden = 64; heads = 12; seq = 16; micro_batch = 1;' > "$tmp/ok.pps"
"$PPSC" check "$tmp/ok.pps" > "$tmp/ok.out" 2>&1 || bad "T = 4 without flops or a bandwidth: $(cat "$tmp/ok.out")"
exit $fail
