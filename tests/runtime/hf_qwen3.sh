#!/bin/sh
# hf_qwen3.sh: python/pps_hf.py with Qwen3 (Qwen3ForCausalLM: Llama's layer with per-head
# RMS norms of the query and the key, q_norm / k_norm [head_dim]; the runtime's --arch llama
# --qk-layernorm) and Qwen3-MoE (Qwen3MoeForCausalLM: the same attention and experts in
# every layer; --num-experts, norm_topk_prob false = --moe-router-pre-softmax), both
# directions. Against an independent figure: a forward pass written here from
# transformers' modeling_qwen3 / modeling_qwen3_moe (hf_qwen3_ref.py below, on hf_ref.py's
# reader: q_proj's output viewed [heads, head_dim], each head RMS-normed with q_norm's gain
# and rms_norm_eps BEFORE RoPE, k the same with k_norm; Qwen3MoeSparseMoeBlock: softmax over
# all E logits, the top K, renormalised when norm_topk_prob, sum of w down(silu(gate) * up)):
#  - Qwen3, head_dim 6 (not hidden / heads = 4), eps 1e-6, untied (rope base 10000) and
#    tied (500), trained 2 iterations of Adam (the q/k gains apart from 1 and from each
#    other), exported: config.json is a Qwen3's (head_dim 6, rms_norm_eps 1e-6, no sliding
#    window), the reference gives the runtime's loss of the next 2 sequences within 1e-5;
#  - Qwen3-MoE the same (4 experts, top 2, expert width 12): norm_topk_prob true (the
#    runtime's default router, untied) and false (--moe-router-pre-softmax, tied); the
#    routing asserted non-trivial; the reference with norm_topk_prob flipped does not give
#    the loss (the check can see the mapping);
#  - export then import gives back every tensor bit for bit; the import prints
#    --qk-layernorm --kv-channels 6 --norm-epsilon 1e-06 (and the experts' flags,
#    --moe-router-pre-softmax for norm_topk_prob false); run with the printed flags under
#    ZB-V (4 stages) at --lr 0 it gives the reference's loss of sequences 0 and 1, and
#    --check (the one-device reference) passes under ZB-V;
#  - transformers' defaults for absent fields: Qwen3's head_dim 128 (the tensors' shapes
#    then named), Qwen3-MoE's hidden / heads; rms_norm_eps 1e-6; Qwen3-MoE's
#    norm_topk_prob false; output_router_logits with router_aux_loss_coef is a note;
#  - refusals (exit 2, the field or tensor named, nothing written): import of
#    use_sliding_window true, layer_types with sliding_attention, attention_bias true
#    (Qwen3's also biases o_proj), mlp_only_layers [1], decoder_sparse_step 2,
#    norm_topk_prob "yes", num_experts 1, a missing k_norm, a shared expert's tensor
#    (Qwen2-MoE's), model_type qwen2_moe; export of a Qwen3-MoE checkpoint with
#    --moe-router-score-function sigmoid, --moe-router-topk-scaling-factor 2,
#    --moe-shared-ffn-hidden 8.
# Mutants (tests/mutants/hfq3_*.patch, on pps_hf.py): q_norm and k_norm swapped on import,
# the Qwen3-MoE router not transposed on export, norm_topk_prob mapped the wrong way round
# on import, Qwen3's head_dim default hidden / heads.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/hf_lib.sh"
Q="--model gpt --arch llama --qk-layernorm --hidden 16 --heads 4 --query-groups 2 --kv-channels 6 --ffn-hidden 24 --seq 8 --vocab 256 --norm-epsilon 1e-6"
MOE="--num-experts 4 --moe-topk 2 --moe-ffn-hidden 12"
# hf_qwen3_ref.py HFDIR DATA SEQS [FIRST [S [flip]]]: HF Qwen3's / Qwen3-MoE's forward
# (modeling_qwen3, modeling_qwen3_moe: embed_tokens; per layer n = RMSNorm(x) (rsqrt(mean
# x^2 + rms_norm_eps) * weight), q = q_proj(n) viewed [heads, head_dim], each head
# q_norm(q_h), then RoPE (head_dim's frequencies); k the same with k_norm; v = v_proj(n);
# attention scaled by head_dim^-0.5; x += o_proj(attn); n = RMSNorm(x); x += mlp(n): the
# dense SwiGLU, or Qwen3MoeSparseMoeBlock: p = softmax(gate(n)) over all E, the top K of p
# (renormalised when norm_topk_prob; "flip" inverts that), sum p_k down(silu(gate_proj) *
# up_proj); norm; lm_head or embed_tokens^T when tied), in double, on sequences
# FIRST..FIRST+SEQS-1 of DATA as bytes. Prints the mean cross-entropy; on stderr the
# experts' token counts and the distinct sets of K.
cat > "$WORK/hf_qwen3_ref.py" <<'PY'
import math, sys
sys.path.insert(0, sys.path[0])
from hf_ref import c, W, windows, attention, xent, report, llama_ops
from hf_rope import inv_freq
moe = c["model_type"] == "qwen3_moe"
assert c["model_type"] in ("qwen3", "qwen3_moe") and not c.get("use_sliding_window") and not c.get("attention_bias"), c
h, Hq, L, Hkv = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"], c["num_key_value_heads"]
D = c["head_dim"]; eps = c["rms_norm_eps"]
if moe:
    assert c["decoder_sparse_step"] == 1 and not c["mlp_only_layers"], c
    E, K = c["num_experts"], c["num_experts_per_tok"]
    norm_topk = c["norm_topk_prob"] != (len(sys.argv) > 6 and sys.argv[6] == "flip")
inv = inv_freq(c)[0]
lin, rms, rope, silu = llama_ops(D, eps, inv)
def heads_rms(y, g):   # Qwen3: q_norm / k_norm on the [.., head_dim] view: each head on its own
    return [u for j in range(len(y) // D) for u in rms(y[j * D:(j + 1) * D], g)]
def swiglu(x, p): return lin([silu(a) * b for a, b in zip(lin(x, W[p + "gate_proj.weight"]), lin(x, W[p + "up_proj.weight"]))],
                             W[p + "down_proj.weight"])
counts, sets = [0] * (E if moe else 1), set()
def sparse(x, p):   # Qwen3MoeSparseMoeBlock
    lg = lin(x, W[p + "gate.weight"]); m = max(lg); e = [math.exp(z - m) for z in lg]; z = sum(e); prob = [v / z for v in e]
    top = sorted(range(E), key=lambda j: (-prob[j], j))[:K]
    tot = sum(prob[j] for j in top) if norm_topk else 1.0
    sets.add(tuple(sorted(top))); out = [0.0] * h
    for j in top:
        counts[j] += 1
        out = [o + prob[j] / tot * v for o, v in zip(out, swiglu(x, p + "experts.%d." % j))]
    return out
head = W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]
for ids, tgt in windows(c["max_position_embeddings"]):
    x = [list(W["model.embed_tokens.weight"][i]) for i in ids]
    for l in range(L):
        p = "model.layers.%d." % l; a = p + "self_attn."
        nx = [rms(v, W[p + "input_layernorm.weight"]) for v in x]
        q = [rope(heads_rms(lin(v, W[a + "q_proj.weight"]), W[a + "q_norm.weight"]), t) for t, v in enumerate(nx)]
        kk = [rope(heads_rms(lin(v, W[a + "k_proj.weight"]), W[a + "k_norm.weight"]), t) for t, v in enumerate(nx)]
        vv = [lin(v, W[a + "v_proj.weight"]) for v in nx]
        x = [[u + w for u, w in zip(xv, lin(o, W[a + "o_proj.weight"]))] for xv, o in zip(x, attention(q, kk, vv, Hq, Hkv, D))]
        nx = [rms(v, W[p + "post_attention_layernorm.weight"]) for v in x]
        x = [[u + w for u, w in zip(xv, sparse(n, p + "mlp.") if moe else swiglu(n, p + "mlp."))] for xv, n in zip(x, nx)]
    for v, t in zip(x, tgt): xent(lin(rms(v, W["model.norm.weight"]), head), t)
report()
sys.stderr.write("counts %s sets %d\n" % (counts, len(sets)))
PY

# --- export: the Qwen3 / Qwen3-MoE forward gives the runtime's loss ---
# case NAME EMBEDDINGS ROPE-BASE FLAGS...
for c in "dense untied 10000" "dense_t tied 500" "moe untied 10000 $MOE" "pre tied 500 $MOE --moe-router-pre-softmax"; do
  set -- $c; n=$1; e=$2; base=$3; shift 3
  "$A" $Q "$@" --embeddings $e --rope-base $base --layers-per-stage 2 --optimizer adam --lr 0.05 --iterations 2 --data "$DATA" \
    --save "$WORK/ck_$n" -q 2> "$WORK/err" || { fail "$n: the training run: $(cat "$WORK/err")"; continue; }
  "$A" $Q "$@" --embeddings $e --rope-base $base --layers-per-stage 2 --lr 0 --iterations 1 --data "$DATA" --load "$WORK/ck_$n" \
    --json > "$WORK/r_$n" 2> "$WORK/err" || fail "$n: the resumed run: $(cat "$WORK/err")"
  pos=$(grep -o '"data_position":"[0-9]*"' "$WORK/ck_$n" | grep -o '[0-9][0-9]*')
  expect_exit 0 "$n: export" hf export "$WORK/ck_$n" "$WORK/hf_$n"
  python3 - "$WORK/hf_$n" "$e" "$n" <<'PY' && pass "$n: config.json and the tensors' names and shapes are a Qwen3's ($n)" ||
import json, struct, sys
d, e, n = sys.argv[1:4]
c = json.load(open(d + "/config.json"))
moe = n in ("moe", "pre")
want = {"architectures": ["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"], "model_type": "qwen3_moe" if moe else "qwen3",
        "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 6, "vocab_size": 256, "rms_norm_eps": 1e-6, "use_sliding_window": False,
        "tie_word_embeddings": e == "tied", "hidden_act": "silu", "attention_bias": False}
if moe:
    want.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=12, norm_topk_prob=n == "moe",
                decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=False)
assert all(c.get(k) == v for k, v in want.items()), (c, want)
raw = open(d + "/model.safetensors", "rb").read()
hd = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
p = "model.layers.3."
assert hd[p + "self_attn.q_norm.weight"]["shape"] == [6] and hd[p + "self_attn.k_norm.weight"]["shape"] == [6], sorted(hd)
assert hd[p + "self_attn.q_proj.weight"]["shape"] == [24, 16] and hd[p + "self_attn.o_proj.weight"]["shape"] == [16, 24]
if moe:
    assert hd[p + "mlp.gate.weight"]["shape"] == [4, 16] and hd[p + "mlp.experts.3.up_proj.weight"]["shape"] == [12, 16]
    assert hd[p + "mlp.experts.0.down_proj.weight"]["shape"] == [16, 12] and p + "mlp.gate_proj.weight" not in hd
    assert not any("block_sparse_moe" in k for k in hd)
PY
    fail "$n: config.json or the tensors: $(cat "$WORK/hf_$n/config.json")"
  ref=$(python3 "$WORK/hf_qwen3_ref.py" "$WORK/hf_$n" "$DATA" 2 "$pos" 2> "$WORK/route_$n") || fail "$n: the reference: $(cat "$WORK/route_$n")"
  l=$(loss1 "$WORK/r_$n")
  if [ -n "$l" ] && [ -n "$ref" ] && near "$ref" "$l" 1e-5; then pass "$n: HF's forward on the export gives the runtime's loss: $ref vs $l"
  else fail "$n: HF's forward gives '$ref', the runtime printed '$l' (sequences from $pos)"; fi
  case $n in moe|pre)
    python3 -c "
import re, sys
m = re.match(r'counts \[(.*)\] sets (\d+)', open(sys.argv[1]).read())
sys.exit(not (m and all(int(x) > 0 for x in m.group(1).split(',')) and int(m.group(2)) >= 3))" "$WORK/route_$n" &&
      pass "  the routing is not trivial: $(cat "$WORK/route_$n")" || fail "$n: a trivial routing: $(cat "$WORK/route_$n")"
    flip=$(python3 "$WORK/hf_qwen3_ref.py" "$WORK/hf_$n" "$DATA" 2 "$pos" 0 flip 2> /dev/null)
    [ -n "$flip" ] && ! near "$flip" "$l" 1e-4 && pass "  with norm_topk_prob flipped the reference differs: $flip vs $l" ||
      fail "$n: the reference cannot see norm_topk_prob: '$flip' vs '$l'";;
  esac
  if [ "$n" = dense ]; then   # the q and k gains apart from 1 and from each other (a swap would show)
    PYTHONPATH="$WORK" python3 -c "
import sys; sys.argv = [sys.argv[0], sys.argv[1], sys.argv[2], '1']
from hf_ref import W
q, k = W['model.layers.1.self_attn.q_norm.weight'], W['model.layers.1.self_attn.k_norm.weight']
sys.exit(not (max(abs(a - b) for a, b in zip(q, k)) > 1e-3 and max(abs(a - 1) for a in q) > 1e-3))" "$WORK/hf_$n" "$DATA" &&
      pass "  the trained q_norm and k_norm gains differ from 1 and from each other" ||
      fail "dense: the q_norm / k_norm gains are not apart"
  fi
done

# --- round trip, the printed flags, ZB-V and --check with them ---
for c in "dense --num-experts" "dense_t --num-experts" "moe --moe-router-pre-softmax" "pre --nothing"; do
  set -- $c; n=$1; absent=$2
  expect_exit 0 "$n: import" hf import "$WORK/hf_$n" "$WORK/back_$n" --stages 4
  expect_grep "\-\-arch llama .*--kv-channels 6 --qk-layernorm --norm-epsilon 1e-06 .*--layers-per-stage 1 --load" \
    "  prints --kv-channels 6 --qk-layernorm --norm-epsilon 1e-06"
  case $n in
    moe) expect_grep "\-\-num-experts 4 --moe-topk 2 --moe-ffn-hidden 12 --layers-per-stage" "  and the experts' flags, no pre-softmax";;
    pre) expect_grep "\-\-num-experts 4 --moe-topk 2 --moe-ffn-hidden 12 --moe-router-pre-softmax --layers-per-stage" \
      "  and --moe-router-pre-softmax (norm_topk_prob false)";;
  esac
  if grep -q -- "^  --model.*$absent" "$WORK/out"; then fail "$n: the flags name $absent: $(cat "$WORK/out")"; fi
  flags=$(sed -n 's/^  \(--model .*\) --load .*/\1/p' "$WORK/out")
  PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK/ck_$n" "$WORK/back_$n" <<'PY' && pass "$n: export then import: every tensor bit for bit" || fail "$n: round trip"
import sys
from ckpt_tensors import load
x, y = load(sys.argv[1], raw=True), load(sys.argv[2], raw=True)
x = {k: v for k, v in x.items() if not k.startswith("optim.")}
assert sorted(x) == sorted(y) and sum(k.endswith((".qnorm.g", ".knorm.g")) for k in y) == 8, sorted(set(x) ^ set(y))
for k in x:
    assert x[k] == y[k], k
PY
  [ -n "$flags" ] || { fail "$n: no flags printed"; continue; }
  "$ZV" $flags --load "$WORK/back_$n" --lr 0 --iterations 1 --data "$DATA" --json > "$WORK/z_$n" 2> "$WORK/err" ||
    fail "$n: ZB-V --load: $(cat "$WORK/err")"
  z=$(loss1 "$WORK/z_$n"); ref0=$(python3 "$WORK/hf_qwen3_ref.py" "$WORK/hf_$n" "$DATA" 2 0 2> /dev/null)
  [ -n "$z" ] && [ -n "$ref0" ] && near "$ref0" "$z" 1e-5 &&
    pass "$n: the import under ZB-V (4 stages) with the printed flags gives HF's forward of sequences 0, 1: $z vs $ref0" ||
    fail "$n: ZB-V with the import: loss '$z', HF's forward '$ref0'"
  expect_exit 0 "$n: --check under ZB-V with the import's flags" "$ZV" $flags --load "$WORK/back_$n" --iterations 1 --data "$DATA" --check -q
done
grep -q '"qk_layernorm":"on"' "$WORK/back_pre" && grep -q '"moe_router_pre_softmax":"1"' "$WORK/back_pre" &&
  grep -q '"kv_channels":"6"' "$WORK/back_pre" && pass "the imported index records qk_layernorm, kv_channels, moe_router_pre_softmax" ||
  fail "the imported index: $(cat "$WORK/back_pre")"

# edit SRC JSON-PYTHON: a copy of hf_SRC in hf_x with its config (c) and tensor header (t) edited
edit() {
  hf_edit "hf_$1" "$2" || fail "editing the directory: $2"
}

# --- transformers' defaults for absent fields; the aux-loss note ---
edit dense 'del c["head_dim"]'
expect_exit 2 "Qwen3 without head_dim: Qwen3Config's 128" hf import "$WORK/hf_x" "$WORK/x"
expect_grep "q_proj.weight' has shape \[24, 16\], the config's model needs \[512, 16\]" "  the shapes named (4 heads x 128)"
edit moe 'del c["head_dim"]'
expect_exit 2 "Qwen3-MoE without head_dim: hidden / heads" hf import "$WORK/hf_x" "$WORK/x"
expect_grep "q_proj.weight' has shape \[24, 16\], the config's model needs \[16, 16\]" "  the shapes named (4 heads x 4)"
edit moe 'del c["rms_norm_eps"]; del c["norm_topk_prob"]'
expect_exit 0 "Qwen3-MoE without rms_norm_eps and norm_topk_prob" hf import "$WORK/hf_x" "$WORK/x"
expect_grep "\-\-norm-epsilon 1e-06 .*--moe-router-pre-softmax" "  1e-6 and norm_topk_prob false (Qwen3MoeConfig's defaults)"
edit dense 'del c["rms_norm_eps"]'
expect_exit 0 "Qwen3 without rms_norm_eps" hf import "$WORK/hf_x" "$WORK/x"
expect_grep "\-\-norm-epsilon 1e-06 " "  --norm-epsilon 1e-06 (Qwen3Config's default)"
edit moe 'c["output_router_logits"] = True; c["router_aux_loss_coef"] = 0.02'
expect_exit 0 "Qwen3-MoE with output_router_logits and router_aux_loss_coef 0.02" hf import "$WORK/hf_x" "$WORK/x"
expect_grep "note: field 'router_aux_loss_coef' is 0.02 (output_router_logits true): not mapped to --moe-aux-loss-coeff" "  a note"
! grep -q -- "^  --model.*--moe-aux-loss-coeff" "$WORK/out" && pass "  no --moe-aux-loss-coeff printed" || fail "aux loss printed"
edit moe 'c["mlp_only_layers"] = [4, 7]; c["num_local_experts"] = c.pop("num_experts")'
expect_exit 0 "Qwen3-MoE: mlp_only_layers past the 4 layers, num_local_experts (newer transformers' name)" hf import "$WORK/hf_x" "$WORK/x"
expect_grep "\-\-num-experts 4 --moe-topk 2" "  the experts"

# --- refusals ---
refuse() {   # refuse SRC DESC PATTERN PYTHON: import of hf_SRC edited by PYTHON refused, naming PATTERN
  edit "$1" "$4"
  expect_exit 2 "import refuses $2" hf import "$WORK/hf_x" "$WORK/x"
  expect_grep "$3" "  naming it"
  [ ! -e "$WORK/x" ] && [ -z "$(ls -a "$WORK" | grep '^\.x\.\|^x\.')" ] && pass "  nothing written" || fail "$2: the refused import left files"
}
refuse dense "use_sliding_window true" "field 'use_sliding_window' is true: PPS's attention is not windowed (Qwen3's" \
  'c["use_sliding_window"] = True'
refuse moe "a Qwen3-MoE's use_sliding_window true" "field 'use_sliding_window' is true: PPS's attention is not windowed" \
  'c["use_sliding_window"] = True'
refuse dense "layer_types with sliding_attention" "field 'layer_types' is .*\"sliding_attention\".*: PPS's attention is not windowed" \
  'c["layer_types"] = ["full_attention"] * 3 + ["sliding_attention"]'
refuse dense "attention_bias true" "field 'attention_bias' is true: .*Qwen3's attention_bias also puts one on o_proj" \
  'c["attention_bias"] = True'
refuse moe "mlp_only_layers [1]" "field 'mlp_only_layers' is \[1\]: layer 1 has a dense MLP in HF; PPS makes every layer an MoE layer" \
  'c["mlp_only_layers"] = [1]'
refuse moe "decoder_sparse_step 2" "field 'decoder_sparse_step' is 2: PPS makes every layer an MoE layer: only 1" \
  'c["decoder_sparse_step"] = 2'
refuse moe "norm_topk_prob \"yes\"" "field 'norm_topk_prob' is \"yes\": not true or false" 'c["norm_topk_prob"] = "yes"'
refuse moe "num_experts 1" "field 'num_experts' is 1: the runtime's --num-experts is 2 to 1024" 'c["num_experts"] = 1'
refuse moe "num_experts_per_tok 5" "field 'num_experts_per_tok' is 5: more than num_experts 4" 'c["num_experts_per_tok"] = 5'
refuse dense "a missing k_norm" "no tensor 'model.layers.2.self_attn.k_norm.weight'" 'del t["model.layers.2.self_attn.k_norm.weight"]'
refuse moe "a shared expert's tensor (Qwen2-MoE's)" \
  "tensor 'model.layers.0.mlp.shared_expert.gate_proj.weight' is not part of a Qwen3-MoE of this config (num_hidden_layers 4, num_experts 4)" \
  't["model.layers.0.mlp.shared_expert.gate_proj.weight"] = dict(t["model.layers.0.mlp.experts.0.gate_proj.weight"])'
refuse moe "model_type qwen2_moe" "field 'model_type' is \"qwen2_moe\": only Llama" 'c["model_type"] = "qwen2_moe"'
xrefuse() {   # xrefuse NAME PATTERN RUNTIME-FLAGS...: export of a Qwen3-MoE checkpoint saved with those flags refused
  n=$1; pat=$2; shift 2
  "$A" $Q $MOE --layers-per-stage 2 "$@" --lr 0 --iterations 1 --data "$DATA" --save "$WORK/ck_$n" > /dev/null 2> "$WORK/err" ||
    { fail "$n: the run: $(cat "$WORK/err")"; return; }
  expect_exit 2 "export refuses $*" hf export "$WORK/ck_$n" "$WORK/hfx_$n"
  expect_grep "$pat" "  the field named"
  [ ! -e "$WORK/hfx_$n/model.safetensors" ] && pass "  nothing exported" || fail "$n: the refused export left model.safetensors"
}
xrefuse sig "metadata field 'moe_router_score_function' is 'sigmoid': HF Qwen3-MoE's router is the softmax" \
  --moe-router-score-function sigmoid
xrefuse scale "metadata field 'moe_router_topk_scaling_factor' is '2': HF Qwen3-MoE's routing weights are unscaled; such a checkpoint does not convert to a Qwen3-MoE" \
  --moe-router-topk-scaling-factor 2
xrefuse shared "metadata field 'moe_shared_ffn_hidden' is '8': HF Qwen3-MoE has no shared expert" --moe-shared-ffn-hidden 8
grep -q Traceback "$WORK/all" && fail "a Python traceback: $(cat "$WORK/all")" || pass "no traceback in pps_hf.py's messages"
finish
