#!/bin/sh
# tests/analysis/ep.sh: expert parallelism in `ppsc check/sim` (hardware {
# expert_parallel = X; ep_bandwidth; ep_latency }, compiler/costmodel.c EpModel and
# dp_derive, docs/language.md "Mixture of experts"): Megatron-LM's
# --expert-model-parallel-size X with --moe-token-dispatcher-type allgather. Every figure
# is computed here, in python3, from the protocol the docs describe, independently of
# ppsc's code:
#  - TF, TB, TW (a device share, stage 0's and stage S-1's, `ppsc expand`) with the EP
#    collectives of a MoE layer over the X GPUs of the group, rings of (X-1) x bytes a
#    rank / ep_bandwidth + (X-1) x ep_latency each: F all-gathers LN2's output (N h d)
#    and the routing (8 N K) and reduce-scatters the outputs (4 N h), B all-gathers dy
#    (N h d) and reduce-scatters the input gradient (4 N h) and the routing weights'
#    gradient (4 N K), W all-gathers LN2's output (N h d); the devices' busy seconds
#    m (TF + TB + TW) (the schedule's BW fuses B and W);
#  - unit_bytes (the experts' store entry of X N K slots, 256-byte parts) and
#    static_bytes (the experts 1/X a GPU, their optimizer state sharded over
#    (D/X) x C under distributed_optimizer, the rest over D x C);
#  - the data-parallel collectives: the dense gradients over D x C GPUs, the experts'
#    over (D/X) x C in a ring of their own (all-reduce, or reduce-scatter and
#    all-gather); the `expert_parallel` JSON object;
#  - X = 1, 2, 4 with and without the distributed optimizer, with context parallelism
#    C = 2, without the load-balancing loss;
#  - expert_parallel = 1 changes no byte of sim's text and JSON or check's;
#  - bad values: errors at the key's line and column, exit 1.
. "$(dirname "$0")/lib.sh"

# 1F1B written out (stdlib's 1f1b.pps states its costs, which would win), P = 4,
# 8 layers (2 a stage), E = 8 experts of width 96, top-2
cat > "$tmp/lin.pps" <<'PPS'
schedule lin(P = 4, m = 6, X = 2, D = 4, dist = 0, C = 1, aux = 1) {
  devices P;
  microbatches m;
  placement linear;
  model { layers = 8; hidden = 128; ffn_hidden = 384; heads = 16; query_groups = 8;
          seq = 48; micro_batch = 2; vocab = 1000; dtype_bytes = 2;
          experts = 8; moe_topk = 2; moe_ffn_hidden = 96; moe_aux_loss = aux; }
  hardware { memory = 1e12; flops = 1e12; efficiency = 0.5; peer_bandwidth = 1e9;
             expert_parallel = X; ep_bandwidth = 2e10; ep_latency = 3e-6;
             context_parallel = C; cp_bandwidth = 3e10; cp_latency = 2e-6;
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

# model.py SPEC: the expected figures (JSON) of one case; SPEC {X, D, dist, C, aux}
cat > "$tmp/model.py" <<'PY'
import json, math, sys
c = json.loads(sys.argv[1])
X, D, dist, C, aux, P, m = c["X"], c["D"], c["dist"], c["C"], c["aux"], 4, 6
L, h, a, g, s, b, V, d = 8, 128, 16, 8, 48, 2, 1000, 2
E, K, Fe = 8, 2, 96
rate, peer, ebw, elat, cbw, clat, dbw, dlat = 1e12 * 0.5, 1e9, 2e10, 3e-6, 3e10, 2e-6, 1e9, 5e-6
S = P; share = L / P
def ring(n, x, bw, lat): return 2 * (n - 1) / n * x / bw + 2 * (n - 1) * lat if n > 1 else 0   # all-reduce of x
def half(n, x, bw, lat): return (n - 1) / n * x / bw + (n - 1) * lat if n > 1 else 0            # reduce-scatter, all-gather of x
def coll(y): return (X - 1) * y / ebw + (X - 1) * elat       # an EP all-gather or reduce-scatter of y bytes a rank
N = b * s / C                                                # the tokens a GPU's MoE MLP sees
# a layer's FLOPs on a GPU: QKV, projection, K experts of width Fe a token, the router
# (whole), 2 a weight a token; the attention 4 b s^2 h / C
M = 2 * N * (h * (h + 2 * g * h / a) + h * h + K * 2 * h * Fe + h * E)
A = 4 * b * s * s * h / C
kv = 2 * s * b * g * (h // a) * d                            # CP: K and V of the whole sequence
cpf, cpb = (half(C, kv, cbw, clat), 2 * half(C, kv, cbw, clat)) if C > 1 else (0, 0)
epf = coll(N * h * d) + coll(8 * N * K) + coll(4 * N * h)
epb = coll(N * h * d) + coll(4 * N * h) + coll(4 * N * K)
epw = coll(N * h * d)
e = {"TF": share * ((M + A) / rate + cpf + epf), "TB": share * ((M + 2 * A) / rate + cpb + epb),
     "TW": share * (M / rate + epw), "TC": N * h * d / peer}
out = 2 * N * h * V / rate
e["stage0"] = [e["TF"] + N * h / rate, e["TB"], e["TW"] + 2 * N * h / rate]
e["stageL"] = [e["TF"] + out, e["TB"] + out, e["TW"] + out]
e["ep"] = {"size": X, "expert_data_parallel": D // X, "bandwidth": ebw, "latency": elat, "tokens": N, "slots": X * N * K,
           "comm_f": share * epf, "comm_b": share * epb, "comm_w": share * epw,
           "layer_comm_f": epf, "layer_comm_b": epb, "layer_comm_w": epw}
# a layer's activation: ln1, x1, ln2, y, two residual gradients, the norms' F32 statistics;
# qkv, att, the softmax statistics; the experts' entry (runtime/moe.c ppsrt_moe_init) of
# X N K slots, each part rounded up to 256 bytes
up = lambda x: math.ceil(x / 256) * 256
nk = X * N * K
moe = up(nk * Fe * d) + up(nk * Fe * d) + up(nk * h * d) + up(nk * 4) + up(nk * 4) + up(nk * 4) + up(N * E * 4) + up(N * E * d)
moe += up(E * 4) if aux else 0
e["ep"]["expert_bytes"] = moe
e["unit"] = share * (N * (6 * h * d + 16 + (h + 2 * h * g / a + h) * d + 4 * a) + moe)
# a GPU's parameters: dense (attention and its biases, the projection's bias, two norms,
# the router) and the experts' (E / X experts: FC1, FC2, FC1's and FC2's biases)
q = h + 2 * h * g / a
dense = [share * (h * q + q + h * h + h + 4 * h + h * E) for st in range(S)]
dense[0] += h * V + s * h
dense[S - 1] += h * V + 2 * h
ex = share * E * (h * Fe + Fe + Fe * h + h) / X
e["ep"]["expert_params"] = [ex] * P
R, Re = D * C, D // X * C                                    # the dense and the experts' gradient groups
pb = lambda n: d + 4 + 12 / (n if dist else 1)               # bytes a parameter (Adam, F32 master)
e["static"] = [dense[k] * pb(R) + ex * pb(Re) for k in range(P)]
G, Ge = [4 * p for p in dense], 4 * ex
if X == 1:                                                   # one ring of everything
    e["dp"] = {"time": [half(R, y + Ge, dbw, dlat) if dist else ring(R, y + Ge, dbw, dlat) for y in G],
               "allgather_time": [half(R, (y + Ge) / 4 * d, dbw, dlat) for y in G] if dist else None}
else:
    e["dp"] = {"time": [half(R, y, dbw, dlat) + half(Re, Ge, dbw, dlat) if dist else ring(R, y, dbw, dlat) + ring(Re, Ge, dbw, dlat) for y in G],
               "allgather_time": [half(R, y / 4 * d, dbw, dlat) + half(Re, Ge / 4 * d, dbw, dlat) for y in G] if dist else None,
               "expert_bytes": Ge, "expert_ranks": Re}
e["dp"]["bytes"] = [y + Ge for y in G]
e["dp"]["ranks"] = R
e["busy"] = m * (e["TF"] + e["TB"] + e["TW"])                # devices 1 and 2: no embedding or LM head
print(json.dumps(e))
PY

# check.py EXPECT EXPAND JSON: the figures against the model
cat > "$tmp/check.py" <<'PY'
import json, sys
from figs import bad, want, costs
e = json.loads(sys.argv[1]); x = open(sys.argv[2]).read(); j = json.load(open(sys.argv[3]))
costs = costs(x)
for k in ["TF", "TB", "TW", "TC"]: want(k, costs.get(k), e[k])
S = j["stages"]
for k, st in [("stage0", "0"), ("stageL", str(S - 1))]:
    for i, n in enumerate(["TF", "TB", "TW"]):
        want("stage %s %s" % (st, n), costs.get(st + n, costs.get(n)), e[k][i])
want("unit_bytes", j["unit_bytes"], e["unit"])
for v in j["per_device"]:
    want("device %d static_bytes" % v["device"], v["static_bytes"], e["static"][v["device"]])
    want("device %d peak_bytes" % v["device"], v["peak_bytes"], e["static"][v["device"]] + v["peak_memory"] * e["unit"])
    if v["device"] in (1, 2): want("device %d busy" % v["device"], v["busy"], e["busy"])
ep = j.get("expert_parallel")
if e["ep"]["size"] == 1:
    if ep is not None: bad.append("expert_parallel = 1 has an expert_parallel object")
else:
    ep = ep or {}
    for k, w in e["ep"].items():
        if k == "expert_params":
            for i, y in enumerate(w): want("expert_parallel.expert_params[%d]" % i, (ep.get(k) or [None] * 9)[i], y)
        else: want("expert_parallel." + k, ep.get(k), w)
dp = j.get("data_parallel") or {"stages": []}
want("data_parallel.ranks", dp.get("ranks", dp.get("replicas")), e["dp"]["ranks"])
if "expert_ranks" in e["dp"]: want("data_parallel.expert_ranks", dp.get("expert_ranks"), e["dp"]["expert_ranks"])
elif "expert_ranks" in dp: bad.append("data_parallel.expert_ranks without expert parallelism")
if len(dp["stages"]) != S: bad.append("data_parallel.stages: %d, want %d" % (len(dp["stages"]), S))
for v in dp["stages"]:
    k = v["stage"]
    want("stage %d gradient bytes" % k, v["bytes"], e["dp"]["bytes"][k])
    want("stage %d collective time" % k, v["time"], e["dp"]["time"][k])
    want("stage %d end" % k, v["end"], v["start"] + e["dp"]["time"][k])
    if "expert_bytes" in e["dp"]: want("stage %d expert_bytes" % k, v.get("expert_bytes"), e["dp"]["expert_bytes"])
    if e["dp"]["allgather_time"]:
        want("stage %d allgather_time" % k, v.get("allgather_time"), e["dp"]["allgather_time"][k])
if bad: print("\n".join(bad)); sys.exit(1)
PY

# run NAME SPEC ARGS...: expand and sim --json of lin.pps at ARGS against the model
run() {
  name=$1 spec=$2; shift 2
  "$PPSC" expand "$tmp/lin.pps" "$@" > "$tmp/x.pps" 2> "$tmp/err" || { bad "$name: expand: $(cat "$tmp/err")"; return; }
  "$PPSC" sim --json "$tmp/lin.pps" "$@" > "$tmp/j.json" 2> "$tmp/err" || { bad "$name: sim: $(cat "$tmp/err")"; return; }
  e=$(python3 "$tmp/model.py" "$spec") || { bad "$name: the model"; return; }
  python3 "$tmp/check.py" "$e" "$tmp/x.pps" "$tmp/j.json" > "$tmp/why" || bad "$name: $(cat "$tmp/why")"
}
for X in 1 2 4; do
  for dist in 0 1; do
    run "1F1B X=$X D=4 dist=$dist" "{\"X\": $X, \"D\": 4, \"dist\": $dist, \"C\": 1, \"aux\": 1}" -D X=$X -D dist=$dist
  done
done
run "1F1B X=2 D=8 distributed optimizer" '{"X": 2, "D": 8, "dist": 1, "C": 1, "aux": 1}' -D D=8 -D dist=1
run "1F1B X=2 D=4 C=2 distributed optimizer" '{"X": 2, "D": 4, "dist": 1, "C": 2, "aux": 1}' -D C=2 -D dist=1
run "1F1B X=4 D=4 C=2 all-reduce" '{"X": 4, "D": 4, "dist": 0, "C": 2, "aux": 1}' -D X=4 -D C=2
run "1F1B X=2 no aux loss" '{"X": 2, "D": 4, "dist": 0, "C": 1, "aux": 0}' -D aux=0

# the text: the experts' line, the EP communication, the shards, the experts' gradient group
"$PPSC" sim "$tmp/lin.pps" -D dist=1 > "$tmp/t.txt" || bad "sim text"
grep -q "^experts     expert parallel X = 2: each EP group is 2 data-parallel replicas, 1/2 of the experts a GPU;" "$tmp/t.txt" &&
  grep -q "^            EP communication (96 tokens a GPU; ring, 2e+10 B/s, 3e-06 s a step" "$tmp/t.txt" &&
  grep -q "optimizer state sharded over 4 replicas, the experts' over 2:" "$tmp/t.txt" &&
  grep -q "over the 2 GPUs of the same EP" "$tmp/t.txt" || bad "text: $(cat "$tmp/t.txt")"

# expert_parallel = 1 is the keys absent (today's figures): the same file name in two folders
mkdir "$tmp/a" "$tmp/b" || exit 99
sed 's/expert_parallel = X; ep_bandwidth = 2e10; ep_latency = 3e-6;//' "$tmp/lin.pps" > "$tmp/a/lin.pps"
sed 's/expert_parallel = X;/expert_parallel = 1;/' "$tmp/lin.pps" > "$tmp/b/lin.pps"
for dir in a b; do
  (cd "$tmp/$dir" && "$PPSC" sim lin.pps > s.txt && "$PPSC" sim --json lin.pps > s.json && "$PPSC" check lin.pps > c.txt &&
   "$PPSC" sim --json lin.pps -D dist=1 -D C=2 > d.json && "$PPSC" sim lin.pps -D dist=1 > d.txt) || bad "sim $dir"
done
for x in s.txt s.json c.txt d.json d.txt; do cmp -s "$tmp/a/$x" "$tmp/b/$x" || bad "expert_parallel = 1 changed $x"; done
(cd "$tmp/b" && "$PPSC" sim --json ../lin.pps > x2.json) && cmp -s "$tmp/b/s.json" "$tmp/b/x2.json" && bad "expert_parallel = 2 changed nothing"

# bad values: errors at the key, exit 1
M='layers = 4; hidden = 64; heads = 4; seq = 24; micro_batch = 1; experts = 4;'
cd "$tmp" || exit 99
keyerr half "$M" 'expert_parallel = 1.5; data_parallel = 4;' 4:14 'hardware expert_parallel must be a whole number from 1 to 1000000 (GPUs of each expert-parallel group), got 1.5'
keyerr zero "$M" 'expert_parallel = 0;' 4:14 'hardware expert_parallel must be a whole number'
keyerr noexp 'layers = 4; hidden = 64; heads = 4;' 'expert_parallel = 2; data_parallel = 2; peer_bandwidth = 1;' 4:14 \
  'hardware expert_parallel = 2 needs model experts'
keyerr experts "$M" 'data_parallel = 3; peer_bandwidth = 1; expert_parallel = 3;' 4:53 'hardware expert_parallel = 3 must divide model experts = 4'
grep -q "^experts.pps:3:74: note: model experts is given here" "$tmp/experts.out" || bad "experts: no note at the experts key: $(cat "$tmp/experts.out")"
keyerr dp "$M" 'data_parallel = 6; peer_bandwidth = 1; expert_parallel = 4;' 4:53 'hardware expert_parallel = 4 must divide data_parallel = 6'
grep -q "^dp.pps:4:14: note: hardware data_parallel is given here" "$tmp/dp.out" || bad "dp: no note at data_parallel: $(cat "$tmp/dp.out")"
keyerr nodp "$M" 'expert_parallel = 2;' 4:14 'hardware expert_parallel = 2 must divide data_parallel = 1'
keyerr nobw "$M" 'flops = 1e12; data_parallel = 2; peer_bandwidth = 1; expert_parallel = 2;' 4:67 \
  'hardware expert_parallel = 2 needs ep_bandwidth (bytes/s of each GPU.s link inside its expert-parallel group)'
keyerr epbw "$M" 'expert_parallel = 2; ep_bandwidth = 0;' 4:35 'hardware ep_bandwidth must be positive, got 0'
keyerr eplat "$M" 'expert_parallel = 2; ep_latency = -1;' 4:35 'hardware ep_latency must not be negative, got -1'
# a bandwidth is needed only where times are derived: no flops
printf 'schedule ok {\n  devices 2; microbatches 2;\n  model { %s }\n  hardware { expert_parallel = 2; data_parallel = 2; peer_bandwidth = 1e9; }\n  device 0 { F(0) F(1) BW(0) BW(1) }\n  device 1 { F(0) BW(0) F(1) BW(1) }\n}\n' \
  "$M" > "$tmp/ok.pps"
"$PPSC" check "$tmp/ok.pps" > "$tmp/ok.out" 2>&1 || bad "X = 2 without flops or ep_bandwidth: $(cat "$tmp/ok.out")"
[ $fail = 0 ] && echo "ep.sh: all passed"
exit $fail
