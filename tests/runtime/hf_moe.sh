#!/bin/sh
# hf_moe.sh: python/pps_hf.py with experts, PPS gpt checkpoints of Llama's layer with
# --num-experts <-> Hugging Face MixtralForCausalLM directories. Against independent
# figures:
#  - a tiny Mixtral-shaped model (h 16, 4 heads, 2 query groups, 4 experts, top 2,
#    expert width 24, seq 8, bytes, 4 layers) that the runtime ran for one iteration at
#    --lr 0 under 1F1B (P = 2) is exported; a forward pass of HF Mixtral written here
#    from HF's definition (hf_mixtral_ref.py below, on tests/runtime/hf_ref.py's reader, [out, in]
#    weights, rotate-half RoPE, GQA, MixtralSparseMoeBlock: softmax over all experts,
#    the top K, renormalised, sum of w_k w2(silu(w1 x) * w3 x)), fed the token windows
#    the runtime used, gives the loss the runtime printed within 1e-5 relative, untied
#    and tied (--rope-base 500); the routing it computed is asserted non-trivial (every
#    expert takes some token, and tokens differ in their pair);
#  - export then import gives back every tensor bit for bit; the imported checkpoint, run
#    with the printed flags under ZB-V (P = 2, 4 stages) with --data-parallel 2
#    --expert-parallel 2, gives the loss of HF's forward on its 4 sequences; the same
#    directory with num_experts_per_tok 1, imported and run at --lr 0 (top 1), gives HF's
#    forward at top 1;
#  - a config without rms_norm_eps, rope_theta and num_key_value_heads takes Mixtral's
#    defaults (1e-5, 1e6, 8), not Llama's;
#  - notes, not refusals (exit 0): router_jitter_noise > 0, output_router_logits with
#    router_aux_loss_coef (no --moe-aux-loss-coeff printed), sliding_window 4 (--seq 4;
#    no note at 8, max_position_embeddings);
#    an export of --moe-aux-loss-coeff 0.01 and --moe-z-loss-coeff 0.001 (config.json's
#    router_aux_loss_coef 0);
#  - refusals (exit 2, the field named, nothing written): export of checkpoints made with
#    --moe-router-pre-softmax, --moe-router-score-function sigmoid,
#    --moe-router-topk-scaling-factor, --moe-expert-capacity-factor,
#    --moe-shared-ffn-hidden, an unknown moe_ field; import of num_local_experts 1,
#    num_experts_per_tok above it, sliding_window 0, rms_norm_eps 0, head_dim 7 (odd),
#    model_type qwen2_moe, a missing expert tensor, a dense MLP's tensor in a Mixtral.
# Mutants (tests/mutants/hfmoe_*.patch, on pps_hf.py): w1/w3 swapped both ways, the
# router not transposed both ways, the experts permuted in the export (each fails the
# forward check); w1/w3 swapped in the import alone (the round trip, ZB-V and top-1 fail).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/hf_lib.sh"
G="--model gpt --arch llama --hidden 16 --heads 4 --query-groups 2 --seq 8 --vocab 256 --num-experts 4 --moe-topk 2 --moe-ffn-hidden 24"

# hf_mixtral_ref.py HFDIR DATA SEQS: HF Mixtral's forward (modeling_mixtral: embed_tokens;
# per layer x += o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))) with
# n = RMSNorm(x), then x += MoE(RMSNorm(x)); norm; lm_head or embed_tokens^T when tied),
# in double, on sequences 0..SEQS-1 of DATA as bytes (sequence k: the s + 1 tokens from
# (k mod W) s, s = max_position_embeddings, W = (bytes - 1) / s); prints the mean
# cross-entropy, and on stderr the experts' token counts and the distinct pairs.
cat > "$WORK/hf_mixtral_ref.py" <<'PY'
import math, sys
sys.path.insert(0, sys.path[0])
from hf_ref import c, W, windows, attention, xent, report, llama_ops
from hf_rope import inv_freq
h, H, G, L = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["num_hidden_layers"]
E, K, eps = c["num_local_experts"], c["num_experts_per_tok"], c["rms_norm_eps"]
D = h // H
inv = inv_freq(c)[0]
lin, rms, rope, silu = llama_ops(D, eps, inv)
counts, pairs = [0] * E, set()
def moe(x, p):   # MixtralSparseMoeBlock: softmax over all E, top K, renormalised; experts w2(silu(w1 x) * w3 x)
    lg = lin(x, W[p + "gate.weight"]); m = max(lg); e = [math.exp(z - m) for z in lg]; z = sum(e); prob = [v / z for v in e]
    top = sorted(range(E), key=lambda j: (-prob[j], j))[:K]; tot = sum(prob[j] for j in top)
    pairs.add(tuple(sorted(top))); out = [0.0] * h
    for j in top:
        counts[j] += 1; q = p + "experts.%d." % j
        y = lin([silu(a) * b for a, b in zip(lin(x, W[q + "w1.weight"]), lin(x, W[q + "w3.weight"]))], W[q + "w2.weight"])
        out = [o + prob[j] / tot * v for o, v in zip(out, y)]
    return out
head = W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]
for ids, tgt in windows(c["max_position_embeddings"]):
    x = [list(W["model.embed_tokens.weight"][i]) for i in ids]
    for l in range(L):
        p = "model.layers.%d." % l
        nx = [rms(v, W[p + "input_layernorm.weight"]) for v in x]
        q = [rope(lin(v, W[p + "self_attn.q_proj.weight"]), t) for t, v in enumerate(nx)]
        kk = [rope(lin(v, W[p + "self_attn.k_proj.weight"]), t) for t, v in enumerate(nx)]
        vv = [lin(v, W[p + "self_attn.v_proj.weight"]) for v in nx]
        x = [[a + b for a, b in zip(xv, lin(o, W[p + "self_attn.o_proj.weight"]))] for xv, o in zip(x, attention(q, kk, vv, H, G, D))]
        x = [[a + b for a, b in zip(xv, moe(rms(xv, W[p + "post_attention_layernorm.weight"]), p + "block_sparse_moe."))] for xv in x]
    for v, t in zip(x, tgt): xent(lin(rms(v, W["model.norm.weight"]), head), t)
report()
sys.stderr.write("counts %s pairs %d\n" % (counts, len(pairs)))
PY

# --- export: HF Mixtral's forward gives the runtime's loss ---
for c in "untied 10000" "tied 500"; do
  set -- $c; e=$1; base=$2
  "$A" $G --layers-per-stage 2 --embeddings $e --rope-base $base --lr 0 --iterations 1 --data "$DATA" --save "$WORK/ck_$e" \
    --json > "$WORK/r_$e" 2> "$WORK/err" || { fail "$e: the run: $(cat "$WORK/err")"; continue; }
  l=$(loss1 "$WORK/r_$e")
  expect_exit 0 "$e: export" hf export "$WORK/ck_$e" "$WORK/hf_$e"
  expect_grep "wrote .*hf_$e (MixtralForCausalLM: 4 layers, hidden 16, float32)" "  a Mixtral"
  ref=$(python3 "$WORK/hf_mixtral_ref.py" "$WORK/hf_$e" "$DATA" 2 2> "$WORK/route") || fail "$e: the reference: $(cat "$WORK/route")"
  if [ -n "$l" ] && [ -n "$ref" ] && near "$ref" "$l" 1e-5; then
    pass "$e embeddings, rope base $base: HF Mixtral's forward on the export gives the runtime's loss: $ref vs $l"
  else fail "$e embeddings, rope base $base: HF Mixtral's forward gives '$ref', the runtime printed '$l'"; fi
  python3 -c "
import re, sys
m = re.match(r'counts \[(.*)\] pairs (\d+)', open(sys.argv[1]).read())
sys.exit(not (m and all(int(x) > 0 for x in m.group(1).split(',')) and int(m.group(2)) >= 3))" "$WORK/route" &&
    pass "  the routing is not trivial: $(cat "$WORK/route")" || fail "$e: a trivial routing: $(cat "$WORK/route")"
done
python3 - "$WORK/hf_untied" <<'PY' && pass "config.json: MixtralForCausalLM, the experts' fields, no jitter, window or aux loss" || fail "config.json / names"
import json, struct, sys
c = json.load(open(sys.argv[1] + "/config.json"))
want = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
        "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 8, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu", "sliding_window": None,
        "router_jitter_noise": 0.0, "output_router_logits": False}
assert all(c.get(k) == v for k, v in want.items()), c
raw = open(sys.argv[1] + "/model.safetensors", "rb").read()
hd = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
p = "model.layers.3.block_sparse_moe."
assert hd[p + "gate.weight"]["shape"] == [4, 16] and hd[p + "experts.3.w1.weight"]["shape"] == [24, 16], sorted(hd)
assert hd[p + "experts.0.w2.weight"]["shape"] == [16, 24] and hd[p + "experts.2.w3.weight"]["shape"] == [24, 16]
assert not any("mlp." in k for k in hd) and len([k for k in hd if k != "__metadata__"]) == 4 * (7 + 4 * 3) + 3, len(hd)
PY

# --- round trip, and the import under ZB-V with expert and data parallelism ---
expect_exit 0 "import (untied)" hf import "$WORK/hf_untied" "$WORK/back" --stages 4
expect_grep "\-\-ffn-hidden 24 --vocab 256 --rope-base 10000 --embeddings untied --seq 8 --num-experts 4 --moe-topk 2 --moe-ffn-hidden 24 --layers-per-stage 1 --load" \
  "the import prints the runtime's flags"
flags=$(sed -n 's/^  \(--model .*\) --load .*/\1/p' "$WORK/out")
expect_exit 0 "import (tied)" hf import "$WORK/hf_tied" "$WORK/back_t"
PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK" <<'PY' && pass "export then import: every tensor bit for bit (untied and tied)" || fail "round trip"
import sys
from ckpt_tensors import load
w = sys.argv[1]
for a, b in (("ck_untied", "back"), ("ck_tied", "back_t")):
    x, y = load("%s/%s" % (w, a), raw=True), load("%s/%s" % (w, b), raw=True)
    assert sorted(x) == sorted(y), sorted(set(x) ^ set(y))
    for k in x: assert x[k][1] == y[k][1], (a, k)
PY
"$ZV" $flags --data-parallel 2 --expert-parallel 2 --load "$WORK/back" --lr 0 --iterations 1 --data "$DATA" --json \
  > "$WORK/z" 2> "$WORK/err" || fail "the import under ZB-V, D = 2, X = 2: $(cat "$WORK/err")"
z=$(loss1 "$WORK/z")
ref4=$(python3 "$WORK/hf_mixtral_ref.py" "$WORK/hf_untied" "$DATA" 4 2> /dev/null)
[ -n "$z" ] && [ -n "$ref4" ] && near "$ref4" "$z" 1e-5 &&
  pass "the import under ZB-V with --data-parallel 2 --expert-parallel 2 gives HF's forward on its 4 sequences: $z vs $ref4" ||
  fail "ZB-V D = 2 X = 2: '$z', HF's forward on 4 sequences '$ref4'"

# a Mixtral not made by the export: the same tensors with num_experts_per_tok 1 (HF's
# renormalised top-1 weight is 1), imported and run at --lr 0: HF's forward at top 1
mkdir "$WORK/hf_k1" && cp "$WORK/hf_untied/model.safetensors" "$WORK/hf_k1/" &&
  python3 -c "import json, sys; c = json.load(open(sys.argv[1])); c['num_experts_per_tok'] = 1; json.dump(c, open(sys.argv[2], 'w'))" \
    "$WORK/hf_untied/config.json" "$WORK/hf_k1/config.json"
expect_exit 0 "import of a top-1 Mixtral" hf import "$WORK/hf_k1" "$WORK/k1" --stages 2
expect_grep "\-\-num-experts 4 --moe-topk 1 --moe-ffn-hidden 24 --layers-per-stage 2" "  --moe-topk 1"
k1flags=$(sed -n 's/^  \(--model .*\) --load .*/\1/p' "$WORK/out")
"$A" $k1flags --load "$WORK/k1" --lr 0 --iterations 1 --data "$DATA" --json > "$WORK/r_k1" 2> "$WORK/err" || fail "the top-1 run: $(cat "$WORK/err")"
l=$(loss1 "$WORK/r_k1"); ref=$(python3 "$WORK/hf_mixtral_ref.py" "$WORK/hf_k1" "$DATA" 2 2> /dev/null)
[ -n "$l" ] && [ -n "$ref" ] && near "$ref" "$l" 1e-5 && ! near "$ref" "$(loss1 "$WORK/r_untied")" 1e-3 &&
  pass "top 1: the import at --lr 0 gives HF's forward: $ref vs $l (top 2's differs)" || fail "top 1: HF's forward '$ref', the runtime '$l'"

# Mixtral's defaults for absent fields (rms_norm_eps 1e-5, rope_theta 1e6, 8 key/value heads)
mkdir "$WORK/hf_def" && cp "$WORK/hf_untied/model.safetensors" "$WORK/hf_def/" &&
  python3 -c "import json, sys; c = json.load(open(sys.argv[1])); [c.pop(k) for k in ('rms_norm_eps', 'rope_theta', 'num_key_value_heads', 'num_attention_heads')]; c['num_attention_heads'] = 8; c['head_dim'] = None; json.dump(c, open(sys.argv[2], 'w'))" \
    "$WORK/hf_untied/config.json" "$WORK/hf_def/config.json"
expect_exit 2 "Mixtral's defaults: 8 heads and 8 key/value heads (the tensors are 2 groups' shapes)" hf import "$WORK/hf_def" "$WORK/x"
expect_grep "k_proj.weight' has shape \[8, 16\], the config's model needs \[16, 16\]" "  num_key_value_heads defaults to 8"
python3 -c "import json, sys; c = json.load(open(sys.argv[1])); [c.pop(k) for k in ('rms_norm_eps', 'rope_theta')]; json.dump(c, open(sys.argv[2], 'w'))" \
  "$WORK/hf_untied/config.json" "$WORK/hf_def/config.json"
expect_exit 0 "no rms_norm_eps, no rope_theta: Mixtral's 1e-5 and 1e6" hf import "$WORK/hf_def" "$WORK/x_def"
expect_grep "\-\-rope-base 1000000 " "  --rope-base 1000000"

# notes, not refusals
note() {   # note FIELD JSON-VALUE PATTERN [FIELD2 JSON2]: import with the fields set succeeds with a note matching PATTERN
  rm -rf "$WORK/hf_x" "$WORK/x" "$WORK/x."*; cp -r "$WORK/hf_untied" "$WORK/hf_x"
  python3 -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); a = sys.argv[2:]; c.update((a[i], json.loads(a[i + 1])) for i in range(0, len(a), 2)); json.dump(c, open(p, 'w'))" \
    "$WORK/hf_x/config.json" "$1" "$2" $4 $5
  expect_exit 0 "import with $1 = $2 $4 $5" hf import "$WORK/hf_x" "$WORK/x"
  expect_grep "pps_hf: note: field '$1' is $3" "  a note"
}
note router_jitter_noise 0.1 "0.1: HF scales the router's input by uniform noise in training"
note router_aux_loss_coef 0.02 "0.02 (output_router_logits true): not mapped to --moe-aux-loss-coeff" output_router_logits true
! grep -q -- "^  --model.*--moe-aux-loss-coeff" "$WORK/out" && grep -q -- "^  --model.*--num-experts 4" "$WORK/out" &&
  pass "  no --moe-aux-loss-coeff printed" || fail "--moe-aux-loss-coeff printed: $(cat "$WORK/out")"
note sliding_window 4 "4: HF attends to the last 4 positions"
expect_grep "\-\-embeddings untied --seq 4 --num-experts" "  --seq 4 printed"
rm -rf "$WORK/hf_x" "$WORK/x" "$WORK/x."*; cp -r "$WORK/hf_untied" "$WORK/hf_x"
python3 -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); c['sliding_window'] = 8; json.dump(c, open(p, 'w'))" "$WORK/hf_x/config.json"
expect_exit 0 "import with sliding_window 8 = max_position_embeddings" hf import "$WORK/hf_x" "$WORK/x"
! grep -q "note" "$WORK/out" && grep -q -- "--seq 8 --num-experts" "$WORK/out" && pass "  no note, --seq 8" || fail "sliding_window 8: $(cat "$WORK/out")"
"$A" $G --layers-per-stage 2 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001 --lr 0 --iterations 1 --data "$DATA" --save "$WORK/ck_aux" > /dev/null 2> "$WORK/err" ||
  fail "the --moe-aux-loss-coeff run: $(cat "$WORK/err")"
expect_exit 0 "export of --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001" hf export "$WORK/ck_aux" "$WORK/hf_aux"
expect_grep "note: metadata field 'moe_aux_loss_coeff' is 0.01: not carried over" "  a note"
expect_grep "note: metadata field 'moe_z_loss_coeff' is 0.001: not carried over" "  and one for the z-loss"
python3 -c "import json, sys; c = json.load(open(sys.argv[1])); sys.exit(not (c['router_aux_loss_coef'] == 0 and c['output_router_logits'] is False))" \
  "$WORK/hf_aux/config.json" && pass "  router_aux_loss_coef 0, output_router_logits false" || fail "hf_aux's config.json"

# --- refusals: export ---
xrefuse() {   # xrefuse NAME PATTERN RUNTIME-FLAGS...: export of a checkpoint saved with those flags is refused
  n=$1; pat=$2; shift 2
  "$A" $G --layers-per-stage 2 "$@" --lr 0 --iterations 1 --data "$DATA" --save "$WORK/ck_$n" > /dev/null 2> "$WORK/err" ||
    { fail "$n: the run: $(cat "$WORK/err")"; return; }
  expect_exit 2 "export refuses $*" hf export "$WORK/ck_$n" "$WORK/hfx_$n"
  expect_grep "$pat" "  the field named"
  [ ! -e "$WORK/hfx_$n/model.safetensors" ] && pass "  nothing exported" || fail "$n: the refused export left model.safetensors"
}
xrefuse pre "metadata field 'moe_router_pre_softmax' is '1': HF Mixtral renormalises the top K" --moe-router-pre-softmax
xrefuse sig "metadata field 'moe_router_score_function' is 'sigmoid': HF Mixtral's router is the softmax" --moe-router-score-function sigmoid
xrefuse scale "metadata field 'moe_router_topk_scaling_factor' is '2': HF Mixtral's routing weights are unscaled" --moe-router-topk-scaling-factor 2
xrefuse cap "metadata field 'moe_expert_capacity_factor' is '1.5': HF Mixtral is dropless" --moe-expert-capacity-factor 1.5
xrefuse shared "metadata field 'moe_shared_ffn_hidden' is '8': HF Mixtral has no shared expert" --moe-shared-ffn-hidden 8
sed 's/"moe_topk":"2"/"moe_topk":"2","moe_router_group_topk":"1"/' "$WORK/ck_untied" > "$WORK/ck_untied.bad"   # (its shards beside it)
expect_exit 2 "export refuses an unknown moe_ field" hf export "$WORK/ck_untied.bad" "$WORK/hfx_bad"
expect_grep "metadata field 'moe_router_group_topk' is '1': an expert option a Mixtral has no field for" "  the field named"

# --- refusals: import ---
refuse() {   # refuse FIELD JSON-VALUE PATTERN: import of hf_untied with config FIELD = VALUE is refused
  rm -rf "$WORK/hf_x" "$WORK/x" "$WORK/x."*; cp -r "$WORK/hf_untied" "$WORK/hf_x"
  python3 -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); c[sys.argv[2]] = json.loads(sys.argv[3]); json.dump(c, open(p, 'w'))" \
    "$WORK/hf_x/config.json" "$1" "$2"
  expect_exit 2 "import refuses $1 = $2" hf import "$WORK/hf_x" "$WORK/x"
  expect_grep "$3" "  naming '$1'"
  [ ! -e "$WORK/x" ] && [ -z "$(ls -a "$WORK" | grep '^\.x\|^x\.')" ] && pass "  nothing written" || fail "$1: the refused import left files"
}
refuse num_local_experts 1 "field 'num_local_experts' is 1: the runtime's --num-experts is 2 to 1024"
refuse num_experts_per_tok 5 "field 'num_experts_per_tok' is 5: more than num_local_experts 4"
refuse sliding_window 0 "field 'sliding_window' is 0: not null or a positive integer"
refuse rms_norm_eps 0 "field 'rms_norm_eps' is 0: not a number above 0"
refuse head_dim 7 "field 'head_dim' is 7: odd (RoPE rotates pairs"
refuse model_type '"qwen2_moe"' "field 'model_type' is \"qwen2_moe\": only Llama (LlamaForCausalLM), Mixtral (MixtralForCausalLM), Qwen2"
refuse router_jitter_noise -1 "field 'router_jitter_noise' is -1: not a number from 0"
refuse intermediate_size 32 "experts.0.w1.weight' has shape \[24, 16\], the config's model needs \[32, 16\]"
# a missing expert and a dense MLP's tensor
python3 - "$WORK/hf_untied" "$WORK/hf_m" "$WORK/hf_d" <<'PY' || fail "making the broken directories"
import json, os, struct, sys
src = sys.argv[1]
raw = open(src + "/model.safetensors", "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; hd = json.loads(raw[8:8 + n])
def write(dst, drop=None, add=None):
    os.makedirs(dst); open(dst + "/config.json", "w").write(open(src + "/config.json").read())
    out, body = {}, b""
    for k, v in hd.items():
        if k == "__metadata__" or k == drop: continue
        a, b = v["data_offsets"]; t = raw[8 + n + a:8 + n + b]
        out[k] = {"dtype": "F32", "shape": v["shape"], "data_offsets": [len(body), len(body) + len(t)]}; body += t
    if add:
        t = struct.pack("<f", 0.5) * 24 * 16
        out[add] = {"dtype": "F32", "shape": [24, 16], "data_offsets": [len(body), len(body) + len(t)]}; body += t
    h = json.dumps(out).encode(); h += b" " * (-len(h) % 8)
    open(dst + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + body)
write(sys.argv[2], drop="model.layers.2.block_sparse_moe.experts.3.w3.weight")
write(sys.argv[3], add="model.layers.1.mlp.gate_proj.weight")
PY
expect_exit 2 "import refuses a missing expert tensor" hf import "$WORK/hf_m" "$WORK/x"
expect_grep "no tensor 'model.layers.2.block_sparse_moe.experts.3.w3.weight'" "  the tensor named"
expect_exit 2 "import refuses a dense MLP's tensor in a Mixtral" hf import "$WORK/hf_d" "$WORK/x"
expect_grep "tensor 'model.layers.1.mlp.gate_proj.weight' is not part of a Mixtral of this config (num_hidden_layers 4, num_local_experts 4)" \
  "  the tensor named"
grep -q Traceback "$WORK/all" && fail "a Python traceback: $(cat "$WORK/all")" || pass "no traceback in any of pps_hf.py's messages"
finish
