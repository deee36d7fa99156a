#!/bin/sh
# hf_qwen2.sh: python/pps_hf.py with Qwen2 (Qwen2ForCausalLM: Llama's layer with biases on
# q_proj, k_proj and v_proj, none on o_proj; the runtime's --arch llama --add-qkv-bias) and
# the norms' epsilon (rms_norm_eps, GPT-2's layer_norm_epsilon: --norm-epsilon). Against
# an independent figure: a forward pass of HF Qwen2 written here from HF's definition
# (hf_qwen2_ref.py below: modeling_qwen2, its own q/k/v biases added after the
# projections, RMS norms with the config's rms_norm_eps), on hf_ref.py's reader:
#  - a tiny Qwen2 (h 16, 4 heads, 2 query groups, ffn 24, seq 8, bytes, 4 layers) trained
#    2 iterations (the biases away from 0) at --norm-epsilon 1e-6 (Qwen2's) and at 0.05
#    (where every norm's epsilon shows in the loss), exported: config.json is a Qwen2's
#    (model_type qwen2, rms_norm_eps the run's, no sliding window), and the reference
#    gives the runtime's loss of the next 2 sequences within 1e-5; at 0.05 the same
#    reference with rms_norm_eps 1e-5 does not (the check can see an epsilon);
#  - export then import gives back every tensor bit for bit (qkv.b from the three
#    biases), the import prints --add-qkv-bias --norm-epsilon, and the import run under
#    ZB-V (4 stages) with the printed flags gives the loss;
#  - a Llama with rms_norm_eps 1e-6 (transformers' default) imports with
#    --norm-epsilon 1e-06; GPT-2's layer at --norm-epsilon 0.001 exports
#    layer_norm_epsilon 0.001 and imports back with the flag;
#  - refusals (exit 2, the field or tensor named): use_sliding_window true, rms_norm_eps
#    0, a Qwen2 directory without k_proj's bias, one with an o_proj bias; exporting
#    --add-qkv-bias with --qk-layernorm.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/hf_lib.sh"
Q="--model gpt --arch llama --add-qkv-bias --hidden 16 --heads 4 --query-groups 2 --ffn-hidden 24 --seq 8 --vocab 256"
# hf_qwen2_ref.py HFDIR DATA SEQS [FIRST [S [EPS]]]: HF Qwen2's forward (modeling_qwen2:
# embed_tokens; per layer n = RMSNorm(x) (rsqrt(mean x^2 + rms_norm_eps) * weight),
# q = q_proj(n) + q_bias, k, v the same, x += o_proj(attn(rope(q), rope(k), v)) (no
# o_proj bias), n = RMSNorm(x), x += down_proj(silu(gate_proj(n)) * up_proj(n)); norm;
# lm_head or embed_tokens^T when tied), in double, on sequences FIRST..FIRST+SEQS-1 of
# DATA as bytes (windows of S tokens, 0: max_position_embeddings); EPS overrides
# rms_norm_eps. Prints the mean cross-entropy.
cat > "$WORK/hf_qwen2_ref.py" <<'PY'
import math, sys
sys.path.insert(0, sys.path[0])
from hf_ref import c, W, windows, attention, xent, report, llama_ops
from hf_rope import inv_freq
assert c["model_type"] == "qwen2" and not c.get("use_sliding_window"), c
h, Hq, L, V = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"], c["vocab_size"]
Hkv = c["num_key_value_heads"]; D = h // Hq
eps = float(sys.argv[6]) if len(sys.argv) > 6 else c["rms_norm_eps"]
inv = inv_freq(c)[0]
lin, rms, rope, silu = llama_ops(D, eps, inv)
head = W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]
for ids, tgt in windows(c["max_position_embeddings"]):
    x = [list(W["model.embed_tokens.weight"][i]) for i in ids]
    for l in range(L):
        p = "model.layers.%d.self_attn." % l
        nx = [rms(v, W["model.layers.%d.input_layernorm.weight" % l]) for v in x]
        q = [rope(lin(v, W[p + "q_proj.weight"], W[p + "q_proj.bias"]), t) for t, v in enumerate(nx)]
        kk = [rope(lin(v, W[p + "k_proj.weight"], W[p + "k_proj.bias"]), t) for t, v in enumerate(nx)]
        vv = [lin(v, W[p + "v_proj.weight"], W[p + "v_proj.bias"]) for v in nx]
        att = attention(q, kk, vv, Hq, Hkv, D)
        x = [[a + b for a, b in zip(xv, lin(o, W[p + "o_proj.weight"]))] for xv, o in zip(x, att)]
        m = "model.layers.%d." % l
        nx = [rms(v, W[m + "post_attention_layernorm.weight"]) for v in x]
        mlp = [lin([silu(g) * u for g, u in zip(lin(v, W[m + "mlp.gate_proj.weight"]), lin(v, W[m + "mlp.up_proj.weight"]))],
                   W[m + "mlp.down_proj.weight"]) for v in nx]
        x = [[a + b for a, b in zip(xv, mv)] for xv, mv in zip(x, mlp)]
    for v, t in zip(x, tgt):
        xent(lin(rms(v, W["model.norm.weight"]), head), t)
report()
PY

# --- export: the Qwen2 forward gives the runtime's loss, at eps 1e-6 and 0.05 ---
for eps in 1e-6 0.05; do
  "$A" $Q --norm-epsilon $eps --layers-per-stage 2 --optimizer adam --lr 0.05 --iterations 2 --data "$DATA" --save "$WORK/ck_$eps" \
    -q 2> "$WORK/err" || { fail "eps $eps: the training run: $(cat "$WORK/err")"; continue; }
  "$A" $Q --norm-epsilon $eps --layers-per-stage 2 --lr 0 --iterations 1 --data "$DATA" --load "$WORK/ck_$eps" --json \
    > "$WORK/r_$eps" 2> "$WORK/err" || fail "eps $eps: the resumed run: $(cat "$WORK/err")"
  pos=$(grep -o '"data_position":"[0-9]*"' "$WORK/ck_$eps" | grep -o '[0-9][0-9]*')
  expect_exit 0 "eps $eps: export" hf export "$WORK/ck_$eps" "$WORK/hf_$eps"
  python3 - "$WORK/hf_$eps" "$eps" <<'PY' && pass "eps $eps: config.json is a Qwen2's, rms_norm_eps $eps, q/k/v biases, none on o_proj" ||
import json, struct, sys
d, eps = sys.argv[1], float(sys.argv[2])
c = json.load(open(d + "/config.json"))
want = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 16, "intermediate_size": 24,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
        "rms_norm_eps": eps, "use_sliding_window": False, "tie_word_embeddings": False, "hidden_act": "silu"}
assert all(c.get(k) == v for k, v in want.items()), c
raw = open(d + "/model.safetensors", "rb").read()
hd = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
p = "model.layers.3.self_attn."
assert hd[p + "q_proj.bias"]["shape"] == [16] and hd[p + "k_proj.bias"]["shape"] == [8] and hd[p + "v_proj.bias"]["shape"] == [8]
assert p + "o_proj.bias" not in hd, sorted(hd)
PY
    fail "eps $eps: config.json or the tensors: $(cat "$WORK/hf_$eps/config.json")"
  ref=$(python3 "$WORK/hf_qwen2_ref.py" "$WORK/hf_$eps" "$DATA" 2 "$pos" 2> "$WORK/err") || fail "eps $eps: the reference: $(cat "$WORK/err")"
  l=$(loss1 "$WORK/r_$eps")
  if [ -n "$l" ] && [ -n "$ref" ] && near "$ref" "$l" 1e-5; then pass "eps $eps: HF Qwen2's forward on the export gives the runtime's loss: $ref vs $l"
  else fail "eps $eps: HF Qwen2's forward gives '$ref', the runtime printed '$l' (sequences from $pos)"; fi
done
ref5=$(python3 "$WORK/hf_qwen2_ref.py" "$WORK/hf_0.05" "$DATA" 2 "$pos" 0 1e-5 2> "$WORK/err")
[ -n "$ref5" ] && ! near "$ref5" "$l" 1e-4 && pass "at eps 0.05 the reference with eps 1e-5 differs: $ref5 vs $l" ||
  fail "the reference cannot see the epsilon: '$ref5' vs '$l'"

# --- round trip, and the import under another schedule ---
expect_exit 0 "import" hf import "$WORK/hf_0.05" "$WORK/back" --stages 4
expect_grep "--arch llama .*--add-qkv-bias --norm-epsilon 0.05 .*--layers-per-stage 1 --load" "the import prints --add-qkv-bias --norm-epsilon 0.05"
flags=$(sed -n 's/^  \(--model .*\) --load .*/\1/p' "$WORK/out")
PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK/ck_0.05" "$WORK/back" <<'PY' && pass "export then import: every tensor bit for bit (qkv.b of 4 layers)" || fail "round trip"
import sys
from ckpt_tensors import load
x, y = load(sys.argv[1], raw=True), load(sys.argv[2], raw=True)
x = {k: v for k, v in x.items() if not k.startswith("optim.")}
assert sorted(x) == sorted(y) and sum(k.endswith(".qkv.b") for k in y) == 4, (sorted(x), sorted(y))
for k in x:
    assert x[k] == y[k], k
PY
grep -q '"norm_epsilon":"0.050000000000000003"' "$WORK/back" && grep -q '"qkv_bias":"on"' "$WORK/back" &&
  pass "the imported index records norm_epsilon and qkv_bias" || fail "the imported index: $(cat "$WORK/back")"
if [ -n "$flags" ]; then
  "$ZV" $flags --load "$WORK/back" --lr 0 --iterations 1 --data "$DATA" --json > "$WORK/zl" 2> "$WORK/err" || fail "ZB-V --load: $(cat "$WORK/err")"
  "$A" $Q --norm-epsilon 0.05 --layers-per-stage 2 --lr 0 --iterations 1 --data "$DATA" --load "$WORK/back" --json > "$WORK/al" \
    2> "$WORK/err" || fail "1F1B --load: $(cat "$WORK/err")"
  a=$(loss1 "$WORK/zl"); b=$(loss1 "$WORK/al")
  [ -n "$a" ] && near "$a" "$b" 1e-6 && pass "the import under ZB-V (4 stages) with the printed flags: loss $a (1F1B $b)" ||
    fail "ZB-V with the import: loss '$a', 1F1B's '$b'"
else fail "no flags printed"; fi

# --- the epsilon of Llama's and GPT-2's ---
rm -rf "$WORK/hf_l"; cp -r "$WORK/hf_1e-6" "$WORK/hf_l"
python3 - "$WORK/hf_l" <<'PY' || fail "making a Llama of the Qwen2"
import json, struct, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
for k in ("use_sliding_window", "sliding_window", "max_window_layers", "rms_norm_eps"):   # (rms_norm_eps: Llama's default)
    c.pop(k, None)
c.update(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=False, mlp_bias=False)
json.dump(c, open(d + "/config.json", "w"))
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hd = json.loads(raw[8:8 + n])
body, out, off = raw[8 + n:], {}, 0
parts = []
for k, v in sorted(hd.items()):
    if k == "__metadata__" or k.endswith("_proj.bias"):
        continue
    a, b = v["data_offsets"]
    parts.append(body[a:b]); out[k] = dict(v, data_offsets=[off, off + b - a]); off += b - a
h = json.dumps(out).encode()
open(d + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(parts))
PY
expect_exit 0 "a Llama without rms_norm_eps imports" hf import "$WORK/hf_l" "$WORK/x_l"
expect_grep "--norm-epsilon 1e-06 " "  with --norm-epsilon 1e-06 (LlamaConfig's default)"
if grep -q "add-qkv-bias" "$WORK/out"; then fail "the Llama's flags name --add-qkv-bias"; else pass "  and no --add-qkv-bias"; fi
G2="--model gpt --hidden 16 --heads 4 --query-groups 4 --seq 8 --vocab 256 --layers-per-stage 2"
"$A" $G2 --norm-epsilon 0.001 --lr 0 --iterations 1 --data "$DATA" --save "$WORK/ck_g" --json > "$WORK/r_g" 2> "$WORK/err" ||
  fail "GPT-2 run: $(cat "$WORK/err")"
expect_exit 0 "GPT-2 export" hf export "$WORK/ck_g" "$WORK/hf_g"
grep -q '"layer_norm_epsilon": 0.001' "$WORK/hf_g/config.json" && pass "GPT-2: layer_norm_epsilon 0.001" ||
  fail "GPT-2 config: $(cat "$WORK/hf_g/config.json")"
expect_exit 0 "GPT-2 import" hf import "$WORK/hf_g" "$WORK/x_g"
expect_grep "--embeddings untied --norm-epsilon 0.001" "  with --norm-epsilon 0.001"
"$A" $(sed -n 's/^  \(--model .*\) --load .*/\1/p' "$WORK/out") --layers-per-stage 2 --load "$WORK/x_g" --lr 0 --iterations 1 \
  --data "$DATA" --json > "$WORK/l_g" 2> "$WORK/err" || fail "GPT-2 import run: $(cat "$WORK/err")"
[ -n "$(loss1 "$WORK/l_g")" ] && [ "$(loss1 "$WORK/l_g")" = "$(loss1 "$WORK/r_g")" ] && pass "  the import gives the run's loss $(loss1 "$WORK/l_g")" ||
  fail "GPT-2 import: loss '$(loss1 "$WORK/l_g")', the run's '$(loss1 "$WORK/r_g")'"

# --- refusals ---
refuse() {   # refuse DESC PATTERN PYTHON: import of hf_1e-6 edited by PYTHON (c: config, t: tensor header) refused
  hf_edit hf_1e-6 "$3" || fail "$1: editing the directory"
  expect_exit 2 "import refuses $1" hf import "$WORK/hf_x" "$WORK/x"
  expect_grep "$2" "  naming it"
  [ ! -e "$WORK/x" ] && pass "  nothing written" || fail "$1: the refused import left files"
}
refuse "use_sliding_window true" "field 'use_sliding_window' is true: PPS's attention is not windowed" 'c["use_sliding_window"] = True'
refuse "rms_norm_eps 0" "field 'rms_norm_eps' is 0: not a number above 0" 'c["rms_norm_eps"] = 0'
refuse "no k_proj bias" "no tensor 'model.layers.0.self_attn.k_proj.bias'" 'del t["model.layers.0.self_attn.k_proj.bias"]'
refuse "an o_proj bias" "tensor 'model.layers.0.self_attn.o_proj.bias' is not part of a Qwen2" \
  't["model.layers.0.self_attn.o_proj.bias"] = dict(t["model.layers.0.input_layernorm.weight"])'
"$A" $Q --qk-layernorm --layers-per-stage 2 --iterations 1 --data "$DATA" --save "$WORK/ck_qq" -q 2> "$WORK/err" ||
  fail "--qk-layernorm --add-qkv-bias run: $(cat "$WORK/err")"
expect_exit 2 "export refuses --add-qkv-bias with --qk-layernorm" hf export "$WORK/ck_qq" "$WORK/hf_qq"
expect_grep "metadata field 'qkv_bias' is 'on': only a dense Llama layer without --qk-layernorm" "  the field named"
[ ! -e "$WORK/hf_qq/model.safetensors" ] && pass "  nothing exported" || fail "the refused export left model.safetensors"
grep -q Traceback "$WORK/all" && fail "a Python traceback: $(cat "$WORK/all")" || pass "no traceback in pps_hf.py's messages"
finish
