#!/bin/sh
# moe.sh: model { experts; moe_topk; moe_ffn_hidden; moe_aux_loss } in ppsc sim, against
# the runtime's gpt with --num-experts (runtime/moe.c) and figures computed here:
#  - the FLOPs of each device (sim's busy seconds at hardware flops = 1) equal the
#    runtime's flops_per_iteration of that device: GPT-2's layer E = 4, K = 2; Llama's
#    (SwiGLU, RMS norms, RoPE, no biases) E = 4, K = 1, width 24, and at T = 2 with
#    sequence parallelism (the router whole on each GPU);
#  - one layer's activation bytes (unit_bytes) equal what the runtime keeps (device 0's
#    resident peak over its units, less its embedding-gradient slot), and the experts'
#    part computed here from the stored tensors (256-byte aligned parts);
#  - the parameters per device (static_bytes / 16 at dtype_bytes 4 with Adam) equal a
#    count made here (E experts, the router, the rest of the layer);
#  - the three under expert parallelism (hardware expert_parallel = the runtime's
#    --expert-parallel X: X = 2 with 2 replicas, alone and at T = 2 with SP; X = 4 with 4):
#    E/X experts a GPU, the entry's slot parts sized for X N K slots;
#  - with model { moe_capacity_factor } (the runtime's --moe-expert-capacity-factor) 0.5:
#    the rows of hpre, hact and eout min(X N K, E cap), cap = min(N, ceil(CF N K / E)), at
#    X = 1 and X = 2; the FLOPs of a balanced routing's kept min(N K, E cap) slots;
#  - with model { moe_shared_ffn_hidden } (the runtime's --moe-shared-ffn-hidden) a shared
#    expert: its FLOPs, its hpre and hact (N (fc1 + 1) Sh / T values) and its FC1, FC2 and
#    biases (split over T, whole on every GPU of an expert-parallel group), GPT-2's layer,
#    and Llama's at T = 2 with SP and X = 2;
#  - with model { moe_shared_gate = 1 } (the runtime's --moe-shared-expert-gate) its gate:
#    FLOPs (x . wg on every GPU's rows: T x, or its own with SP), its store entry (8 + (h + 1)
#    es bytes a row of the GPU's) and wg (h, whole), GPT-2's layer at T = 1 and T = 2
#    without SP, Llama's at T = 2 with SP and X = 2; the runtime takes the gate from
#    model { }; errors: moe_shared_gate 2, without moe_shared_ffn_hidden, without experts;
#  - hardware ep_alltoall = 1 (the all-to-all dispatcher, sim's balanced routing): at
#    moe_topk = experts its bytes a GPU sends a layer and microbatch equal the runtime's
#    --moe-token-dispatcher alltoall measured ep_alltoall bytes, X = 2 and 4;
#  - errors with file:line:col: experts 1, ep_alltoall 2, moe_topk above experts, moe_topk without
#    experts, moe_ffn_hidden 0, moe_aux_loss 2, tensor_parallel not dividing the
#    experts' width, moe_shared_ffn_hidden 0, without experts, or T not dividing it.
. "$(dirname "$0")/../runtime/lib.sh"
command -v python3 > /dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
# sim.pps: 1F1B over P = 2 devices, one layer a stage, the model and hardware given by -D
mk() {   # mk FILE MODEL-KEYS HARDWARE-KEYS
  cat > "$1" <<PPS
schedule lin(P = 2, m = 4) {
  devices P;
  microbatches m;
  placement linear;
  model { layers = 2; seq = 4; micro_batch = 1; vocab = 32; dtype_bytes = 4; $2 }
  hardware { flops = 1; peer_bandwidth = 1e9; $3 }
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
}
# case NAME "MODEL KEYS" "HARDWARE KEYS" "RUNTIME FLAGS" E K F SWIGLU BIAS T SP RMS ROPE AUX X [CF [SH [SG]]]
case_() {
  nm=$1; mkeys=$2; hkeys=$3; flags=$4; shift 4
  mk "$WORK/$nm.pps" "$mkeys" "$hkeys"
  "$PPSC" sim "$WORK/$nm.pps" --json > "$WORK/$nm.sim" 2> "$WORK/err" || { fail "$nm: ppsc sim: $(cat "$WORK/err")"; return; }
  build "$nm" "$WORK/$nm.pps" || { fail "$nm: build"; return; }
  "$WORK/$nm" $flags --layers-per-stage 1 --iterations 1 --json > "$WORK/$nm.run" 2> "$WORK/err" ||
    { fail "$nm: run: $(cat "$WORK/err")"; return; }
  if python3 - "$WORK/$nm.sim" "$WORK/$nm.run" "$@" > "$WORK/py.out" 2>&1 <<'PY'
import json, math, sys
sim, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
E, K, F, sw, bias, T, sp, rms, rope, aux, X = [int(x) for x in sys.argv[3:14]]
cf = float(sys.argv[14]) if len(sys.argv) > 14 else 0
Sh = int(sys.argv[15]) if len(sys.argv) > 15 else 0   # the shared expert's width
SG = int(sys.argv[16]) if len(sys.argv) > 16 else 0   # and its gate
h, H, G, s, b, V, es, m = 16, 4, 2, 4, 1, 32, 4, 4
N, hd, fc1 = s * b, 16 // 4, 2 if sw else 1
up = lambda x: math.ceil(x / 256) * 256
f = F // T
# the experts' entry (runtime/moe.c): FC1 outputs, activations, expert outputs of the N K
# slots (X N K under expert parallelism: the worst case of the gathered slots); weights,
# indices, permutation; probabilities and their gradient's room
S = X * N * K
# with a capacity factor: min(X N K, E cap) rows of FC1's outputs, activations, expert outputs
R = min(S, E * min(N, math.ceil(cf * N * K / E))) if cf else S
moe = up(R * fc1 * f * es) + up(R * f * es) + up(R * h * es) + 3 * up(S * 4) + up(N * E * 4) + up(N * E * es)
moe += up(E * 4) if aux else 0   # the load-balancing loss's coefficients
# FLOPs: sim's busy seconds at flops = 1 against the runtime's count of each device
for d in range(2):
    got, want = sim["per_device"][d]["busy"], run["per_device"][d]["flops_per_iteration"]
    assert abs(got - want) <= 1e-9 * want, ("flops", d, got, want)
# one layer's bytes: device 0's resident peak over its units less the dx0 slot (its rows)
rows = N // T if sp else N
u = run["per_device"][0]["resident_peak_bytes"] / run["per_device"][0]["peak_units"] - rows * h * es
assert u == sim["unit_bytes"], ("unit_bytes", u, sim["unit_bytes"])
# the experts' part: the layer less what a dense layer keeps without its hpre and hact
q = (H // T + 2 * G // T) * hd
dense = rows * (6 * h * es + (8 if rms else 16)) + N * q * es + (H // T) * s * 4 + N * (H // T) * hd * es
dense += N * (fc1 + 1) * (Sh // T) * es   # the shared expert's hpre and hact
dense += SG * rows * (8 + (h + 1) * es)   # its gate's entry: z, s (F32), its output, dz
assert sim["unit_bytes"] - dense == moe, ("experts' bytes", sim["unit_bytes"] - dense, moe)
# parameters of a device: one layer (attention, norms, E experts, the router) and stage 0's
# embeddings or stage 1's output layer and final norm; Adam at dtype 4: 16 bytes each
norm = h if rms else 2 * h
El = E // X   # a GPU's experts
layer = (h * (H + 2 * G) * hd + H * hd * h) / T + 2 * norm + h * E + El * (h * fc1 * F + F * h) / T
layer += (h * fc1 * Sh + Sh * h) / T   # the shared expert
layer += SG * h   # its gate's wg, whole
if bias:
    layer += (H + 2 * G) * hd / T + h + El * fc1 * F / T + El * h + (fc1 * Sh / T + h if Sh else 0)
want = [layer + h * V / T + (0 if rope else s * h), layer + h * V / T + norm]
for d in range(2):
    got = sim["per_device"][d]["static_bytes"] / 16
    assert abs(got - want[d]) < 1e-6, ("params", d, got, want[d])
print("flops %s, layer %d B (experts %d B, %d rows), params %s" % ([run["per_device"][d]["flops_per_iteration"] for d in range(2)],
      sim["unit_bytes"], moe, R, want))
PY
  then pass "$nm: $(cat "$WORK/py.out")"; else fail "$nm: $(cat "$WORK/py.out")"; fi
}
RT="--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32"
case_ gpt2 "hidden = 16; heads = 4; query_groups = 2; experts = 4; moe_topk = 2;" "" \
  "$RT --num-experts 4 --moe-topk 2" 4 2 64 0 1 1 0 0 0 0 1
case_ llama "hidden = 16; heads = 4; query_groups = 2; swiglu = 1; rmsnorm = 1; rope = 1; bias = 0; experts = 4; moe_topk = 1; moe_ffn_hidden = 24; moe_aux_loss = 1;" "" \
  "$RT --arch llama --num-experts 4 --moe-topk 1 --moe-ffn-hidden 24 --moe-aux-loss-coeff 0.01" 4 1 24 1 0 1 0 1 1 1 1
case_ llama_tp "hidden = 16; heads = 4; query_groups = 2; swiglu = 1; rmsnorm = 1; rope = 1; bias = 0; experts = 4; moe_topk = 2; moe_ffn_hidden = 24;" \
  "tensor_parallel = 2; sequence_parallel = 1; tp_bandwidth = 1e12;" \
  "$RT --arch llama --num-experts 4 --moe-topk 2 --moe-ffn-hidden 24 --tensor-parallel 2 --sequence-parallel" 4 2 24 1 0 2 1 1 1 0 1
# expert parallelism (the runtime's --expert-parallel, sim's hardware expert_parallel): E/X
# experts a GPU, the entry sized for X N K slots; with 2 replicas (X = 2) and 4 (X = 4)
EPH="data_parallel = 2; expert_parallel = 2; dp_bandwidth = 1e12; ep_bandwidth = 1e15;"
case_ gpt2_ep2 "hidden = 16; heads = 4; query_groups = 2; experts = 4; moe_topk = 2;" "$EPH" \
  "$RT --num-experts 4 --moe-topk 2 --data-parallel 2 --expert-parallel 2" 4 2 64 0 1 1 0 0 0 0 2
case_ llama_ep4 "hidden = 16; heads = 4; query_groups = 2; swiglu = 1; rmsnorm = 1; rope = 1; bias = 0; experts = 4; moe_topk = 2; moe_ffn_hidden = 24; moe_aux_loss = 1;" \
  "data_parallel = 4; expert_parallel = 4; dp_bandwidth = 1e12; ep_bandwidth = 1e15;" \
  "$RT --arch llama --num-experts 4 --moe-topk 2 --moe-ffn-hidden 24 --moe-aux-loss-coeff 0.01 --data-parallel 4 --expert-parallel 4" \
  4 2 24 1 0 1 0 1 1 1 4
case_ llama_ep2_tp "hidden = 16; heads = 4; query_groups = 2; swiglu = 1; rmsnorm = 1; rope = 1; bias = 0; experts = 4; moe_topk = 2; moe_ffn_hidden = 24;" \
  "tensor_parallel = 2; sequence_parallel = 1; tp_bandwidth = 1e12; $EPH" \
  "$RT --arch llama --num-experts 4 --moe-topk 2 --moe-ffn-hidden 24 --tensor-parallel 2 --sequence-parallel --data-parallel 2 --expert-parallel 2" \
  4 2 24 1 0 2 1 1 1 0 2
# a capacity factor 0.5 (N = 4, K = 2, E = 4: cap 1, E cap = 4 rows of 8 at X = 1, of 16 at X = 2)
case_ gpt2_cap "hidden = 16; heads = 4; query_groups = 2; experts = 4; moe_topk = 2; moe_capacity_factor = 0.5;" "" \
  "$RT --num-experts 4 --moe-topk 2 --moe-expert-capacity-factor 0.5" 4 2 64 0 1 1 0 0 0 0 1 0.5
case_ llama_ep2_cap "hidden = 16; heads = 4; query_groups = 2; swiglu = 1; rmsnorm = 1; rope = 1; bias = 0; experts = 4; moe_topk = 2; moe_ffn_hidden = 24; moe_aux_loss = 1; moe_capacity_factor = 0.5;" \
  "$EPH" "$RT --arch llama --num-experts 4 --moe-topk 2 --moe-ffn-hidden 24 --moe-aux-loss-coeff 0.01 --data-parallel 2 --expert-parallel 2 --moe-expert-capacity-factor 0.5" \
  4 2 24 1 0 1 0 1 1 1 2 0.5
case_ gpt2_cap2 "hidden = 16; heads = 4; query_groups = 2; experts = 4; moe_topk = 2; moe_capacity_factor = 2;" "" \
  "$RT --num-experts 4 --moe-topk 2 --moe-expert-capacity-factor 2" 4 2 64 0 1 1 0 0 0 0 1 2
# a shared expert (model moe_shared_ffn_hidden, the runtime's --moe-shared-ffn-hidden)
case_ gpt2_shared "hidden = 16; heads = 4; query_groups = 2; experts = 4; moe_topk = 2; moe_shared_ffn_hidden = 8;" "" \
  "$RT --num-experts 4 --moe-topk 2 --moe-shared-ffn-hidden 8" 4 2 64 0 1 1 0 0 0 0 1 0 8
case_ llama_shared_tp_ep "hidden = 16; heads = 4; query_groups = 2; swiglu = 1; rmsnorm = 1; rope = 1; bias = 0; experts = 4; moe_topk = 2; moe_ffn_hidden = 24; moe_shared_ffn_hidden = 12;" \
  "tensor_parallel = 2; sequence_parallel = 1; tp_bandwidth = 1e12; $EPH" \
  "$RT --arch llama --num-experts 4 --moe-topk 2 --moe-ffn-hidden 24 --tensor-parallel 2 --sequence-parallel --data-parallel 2 --expert-parallel 2 --moe-shared-ffn-hidden 12" \
  4 2 24 1 0 2 1 1 1 0 2 0 12
# the shared expert's gate (model moe_shared_gate, the runtime's --moe-shared-expert-gate)
case_ gpt2_sgate "hidden = 16; heads = 4; query_groups = 2; experts = 4; moe_topk = 2; moe_shared_ffn_hidden = 8; moe_shared_gate = 1;" "" \
  "$RT --num-experts 4 --moe-topk 2 --moe-shared-ffn-hidden 8 --moe-shared-expert-gate" 4 2 64 0 1 1 0 0 0 0 1 0 8 1
case_ gpt2_sgate_tp "hidden = 16; heads = 4; query_groups = 2; experts = 4; moe_topk = 2; moe_shared_ffn_hidden = 8; moe_shared_gate = 1;" \
  "tensor_parallel = 2; tp_bandwidth = 1e12;" \
  "$RT --num-experts 4 --moe-topk 2 --moe-shared-ffn-hidden 8 --moe-shared-expert-gate --tensor-parallel 2" 4 2 64 0 1 2 0 0 0 0 1 0 8 1
case_ llama_sgate_tp_ep "hidden = 16; heads = 4; query_groups = 2; swiglu = 1; rmsnorm = 1; rope = 1; bias = 0; experts = 4; moe_topk = 2; moe_ffn_hidden = 24; moe_shared_ffn_hidden = 12; moe_shared_gate = 1;" \
  "tensor_parallel = 2; sequence_parallel = 1; tp_bandwidth = 1e12; $EPH" \
  "$RT --arch llama --num-experts 4 --moe-topk 2 --moe-ffn-hidden 24 --tensor-parallel 2 --sequence-parallel --data-parallel 2 --expert-parallel 2 --moe-shared-ffn-hidden 12 --moe-shared-expert-gate" \
  4 2 24 1 0 2 1 1 1 0 2 0 12 1
"$WORK/gpt2_sgate" $RT --layers-per-stage 1 --iterations 1 --json > "$WORK/defg.run" 2> "$WORK/err" || fail "gate default: $(cat "$WORK/err")"
grep -q '"shared_gate":true' "$WORK/defg.run" && pass "the shared expert's gate defaults to model { }" ||
  fail "the gate from model { }: $(grep -o '"experts":{[^}]*}' "$WORK/defg.run")"
# the runtime takes --moe-shared-ffn-hidden from model { } when not given
"$WORK/gpt2_shared" $RT --layers-per-stage 1 --iterations 1 --json > "$WORK/defs.run" 2> "$WORK/err" || fail "shared default: $(cat "$WORK/err")"
python3 - "$WORK/defs.run" <<'PY' && pass "the shared expert's width defaults to model { }" || fail "shared width from model { }"
import json, sys
a = json.load(open(sys.argv[1]))
assert a["layer"]["experts"]["shared_ffn_hidden"] == 8, a["layer"]["experts"]
PY
# the all-to-all dispatcher (hardware ep_alltoall = 1, the runtime's --moe-token-dispatcher
# alltoall) with every token routed to every expert (moe_topk = experts): sim's assumed
# balanced routing is then exact, so the bytes sim says a GPU sends a layer and microbatch
# equal the runtime's measured ep_alltoall bytes (its group's X ranks over the run) / (X m
# layers), at X = 2 and 4; the same FLOPs, parameters and layer bytes as above
A2A="dp_bandwidth = 1e12; ep_bandwidth = 1e15; ep_alltoall = 1;"
case_ gpt2_a2a "hidden = 16; heads = 4; query_groups = 2; experts = 4; moe_topk = 4;" "data_parallel = 2; expert_parallel = 2; $A2A" \
  "$RT --num-experts 4 --moe-topk 4 --data-parallel 2 --expert-parallel 2 --moe-token-dispatcher alltoall" 4 4 64 0 1 1 0 0 0 0 2
case_ llama_a2a4 "hidden = 16; heads = 4; query_groups = 2; swiglu = 1; rmsnorm = 1; rope = 1; bias = 0; experts = 4; moe_topk = 4; moe_ffn_hidden = 24;" \
  "data_parallel = 4; expert_parallel = 4; $A2A" \
  "$RT --arch llama --num-experts 4 --moe-topk 4 --moe-ffn-hidden 24 --data-parallel 4 --expert-parallel 4 --moe-token-dispatcher alltoall" \
  4 4 24 1 0 1 0 1 1 0 4
python3 - "$WORK" <<'PY' && pass "ep_alltoall = 1: sim's bytes a GPU sends a layer and microbatch = the runtime's measured ones at top-K = E (X = 2, 4); the allgather dispatcher's none" || fail "ep_alltoall bytes: sim against the runtime"
import json, sys
w = sys.argv[1]
m, layers = 4, 1   # microbatches, layers a device (--iterations 1)
for nm, X in (("gpt2_a2a", 2), ("llama_a2a4", 4)):
    sim, run = json.load(open(w + "/" + nm + ".sim")), json.load(open(w + "/" + nm + ".run"))
    e = sim["expert_parallel"]
    assert e["dispatcher"] == "alltoall" and e["layer_bytes"] == 5 * (X - 1) / X * 4 * 4 * 16 * 4, e
    for p in run["per_device"]:
        got = p["ep_alltoall"]["bytes"] / (X * m * layers)
        assert got == e["layer_bytes"], (nm, p["device"], got, e["layer_bytes"])
    ag = json.load(open(w + "/gpt2_ep2.sim"))["expert_parallel"]
    assert ag["dispatcher"] == "allgather" and ag["layer_bytes"] is None, ag
    assert e["layer_comm_f"] > 0 and e["layer_comm_w"] * 2 == e["layer_comm_b"], e
PY
"$WORK/gpt2_a2a" $RT --num-experts 4 --data-parallel 2 --expert-parallel 2 --layers-per-stage 1 -q > "$WORK/out" 2>&1 ||
  fail "gpt2_a2a without --moe-token-dispatcher: $(cat "$WORK/out")"
grep -q "note: the schedule's hardware { ep_alltoall = 1 } times the alltoall token dispatcher; this run uses the allgather one" \
  "$WORK/out" && pass "the runtime notes hardware { ep_alltoall = 1 } against an allgather run" || fail "no ep_alltoall note: $(cat "$WORK/out")"

# the runtime takes --num-experts, --moe-topk and --moe-ffn-hidden from model { } when not given
"$WORK/llama" --model gpt --arch llama --hidden 16 --heads 4 --query-groups 2 --seq 4 --vocab 32 --layers-per-stage 1 \
  --iterations 1 --json > "$WORK/def.run" 2> "$WORK/err" || fail "defaults from model { }: $(cat "$WORK/err")"
python3 - "$WORK/def.run" "$WORK/llama.run" <<'PY' && pass "the experts' flags default to model { }" || fail "defaults from model { }"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert [d["flops_per_iteration"] for d in a["per_device"]] == [d["flops_per_iteration"] for d in b["per_device"]]
assert a["layer"]["experts"] == {"num": 4, "topk": 1, "ffn_hidden": 24, "aux_loss_coeff": 0, "score_function": "softmax",
                                 "pre_softmax": False, "topk_scaling_factor": 1, "z_loss_coeff": 0,
                                 "expert_bias_update_rate": None}, a["layer"]["experts"]
PY

# errors: file:line:col and a non-zero exit
err() {   # err DESC "MODEL KEYS" "HARDWARE KEYS" PATTERN
  mk "$WORK/bad.pps" "hidden = 16; heads = 4; $2" "$3"
  "$PPSC" sim "$WORK/bad.pps" > "$WORK/out" 2>&1
  st=$?
  if [ $st -ne 0 ] && grep -q "bad.pps:[0-9]*:[0-9]*: error: $4" "$WORK/out"; then pass "$1 (exit $st)"
  else fail "$1: exit $st: $(cat "$WORK/out")"; fi
}
err "experts = 1" "experts = 1;" "" "model experts must be a whole number from 2 to 1024"
err "ep_alltoall 2" "experts = 4;" "data_parallel = 2; expert_parallel = 2; ep_bandwidth = 1e9; ep_alltoall = 2;" \
  "hardware ep_alltoall must be 0 or 1"
err "moe_topk above experts" "experts = 4; moe_topk = 5;" "" "model moe_topk must be a whole number from 1 to experts (4), got 5"
err "moe_topk without experts" "moe_topk = 2;" "" "model moe_topk sets up the experts of model experts = E"
err "moe_ffn_hidden 0" "experts = 4; moe_ffn_hidden = 0;" "" "model moe_ffn_hidden must be a positive whole number"
err "moe_aux_loss 2" "experts = 4; moe_aux_loss = 2;" "" "model moe_aux_loss must be 0 or 1"
err "moe_capacity_factor 0" "experts = 4; moe_capacity_factor = 0;" "" "model moe_capacity_factor must be a number above 0"
err "moe_capacity_factor without experts" "moe_capacity_factor = 1;" "" "model moe_capacity_factor sets up the experts of model experts = E"
err "moe_capacity_factor with context_parallel" "experts = 4; moe_capacity_factor = 1;" "context_parallel = 2; cp_bandwidth = 1e9;" \
  "model moe_capacity_factor does not run with hardware context_parallel = 2"
err "tensor_parallel not dividing the experts' width" "experts = 4; moe_ffn_hidden = 6;" "tensor_parallel = 4; tp_bandwidth = 1e9;" \
  "hardware tensor_parallel = 4 must divide the experts' width 6"
err "moe_shared_ffn_hidden 0" "experts = 4; moe_shared_ffn_hidden = 0;" "" "model moe_shared_ffn_hidden must be a positive whole number"
err "moe_shared_ffn_hidden without experts" "moe_shared_ffn_hidden = 8;" "" "model moe_shared_ffn_hidden sets up the experts of model experts = E"
err "tensor_parallel not dividing the shared width" "experts = 4; moe_shared_ffn_hidden = 6;" "tensor_parallel = 4; tp_bandwidth = 1e9;" \
  "hardware tensor_parallel = 4 must divide the shared expert's width 6"
err "moe_shared_gate 2" "experts = 4; moe_shared_ffn_hidden = 8; moe_shared_gate = 2;" "" "model moe_shared_gate must be 0 or 1"
err "moe_shared_gate without a shared expert" "experts = 4; moe_shared_gate = 1;" "" \
  "model moe_shared_gate gates the shared expert of model moe_shared_ffn_hidden"
err "moe_shared_gate without experts" "moe_shared_gate = 1;" "" "model moe_shared_gate sets up the experts of model experts = E"
finish
