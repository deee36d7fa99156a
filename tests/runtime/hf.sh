#!/bin/sh
# hf.sh: python/pps_hf.py, PPS gpt checkpoints of Llama's layer <-> Hugging Face
# LlamaForCausalLM directories. Against independent figures:
#  - a tiny Llama (h 16, 4 heads, 2 query groups, ffn 24, seq 8, bytes, 4 layers) that
#    the runtime ran for one iteration at --lr 0 under 1F1B (P = 2) is exported; a
#    forward pass of HF Llama written here from HF's definition (hf_llama_ref below, its
#    own safetensors reader, [out, in] weights, rotate-half RoPE, GQA), fed the token
#    windows the runtime used, gives the loss the runtime printed within 1e-5 relative:
#    untied at --rope-base 10000, tied at --rope-base 500;
#  - a --qk-layernorm checkpoint trained 2 iterations (gains away from 1) exports as
#    Qwen3ForCausalLM; the same reference with q_norm / k_norm (each head RMS-normed
#    before RoPE) gives the runtime's loss of the next sequences within 1e-5;
#  - --kv-channels (HF's head_dim) at D = 6 and 2 (4 heads of h = 16): the export's
#    head_dim and shapes, HF's forward (head_dim's RoPE frequencies) gives the runtime's
#    loss within 1e-5, the import prints --kv-channels D, round trip bit for bit, the
#    import's loss under ZB-V; Qwen3 (--qk-layernorm) with head_dim 6 the same forward;
#  - export then import gives back every tensor bit for bit, and the imported
#    checkpoint, run with the flags the import prints under ZB-V (P = 2, 4 stages),
#    reproduces the loss; imported with --optimizer adam (zero moments), 3 iterations
#    of Adam from it are a fresh Adam run's, bit for bit; a sharded HF directory with
#    F16 and BF16 tensors imports to their exact values;
#  - a Vocab-1 checkpoint (vocabulary slices in each shard) exports to 1F1B's file, byte
#    for byte (the weights do not depend on the placement);
#  - --dtype bf16 writes each value within half a bfloat16 ulp of the F32 one;
#  - GPT-2's layer (the default) <-> GPT2LMHeadModel: a GPT-2 forward written here
#    (hf_gpt2_ref.py) on the export gives the runtime's loss, tied and untied; the round
#    trip is bit for bit, the import runs under ZB-V with the loss; a hub-style
#    directory (no "transformer." prefix, causal-mask buffers, more positions than
#    --seq) imports to the same tensors;
#  - a Llama 3-shaped model (hf_l3, made here: BF16, rope_theta 500000, rope_scaling
#    llama3 over an original context of 64, GQA 2:1, tied; D = 16 so that at --seq 16
#    the high, medium and low bands each hold pairs and the medium and low ones move the
#    last angle by > 0.05 rad, asserted from the config): imported, the runtime at
#    --lr 0 gives the loss of HF's forward with llama3's frequencies (hf_rope.py, from
#    transformers' definition) within 1e-5 (unscaled, HF's differs by 1.5%), trained,
#    exported (config.json's rope_scaling, rope_theta) and checked again, imported again
#    with the same flags; rope_scaling linear (the old "type" key) the same way; Llama 3's
#    vocabulary (128256, untied) imported, the forward equal, exported bit for bit;
#  - refusals (exit 2, the field named, no output left): a layer neither Llama's nor
#    GPT-2's, GPT-2 with query groups; configs with rope_scaling yarn or dynamic,
#    rope_parameters longrope, llama3 with low >= high or no original context, linear
#    with factor 0, attention_bias, rms_norm_eps 0 or a string, an odd head_dim, head_dim 8
#    (the tensors' shapes named); an index with rope_scaling yarn
#    (export); bad files get one line, no traceback.
# Planted by hand in pps_hf.py and caught: in the export, k/v column blocks of qkv.w
# swapped, gate/up swapped, o_proj or down_proj not transposed, lm_head from vocab.tok,
# rope_theta written as 10000 (each fails the forward check); in the import, k/v order
# (round trip, ZB-V loss), F16 misread (sharded import), Adam's moments 1e-4 instead
# of 0, a vocabulary slice's offset ignored (Vocab-1); bf16 truncated instead of rounded; rms_norm_eps unchecked; a temporary file
# left by a failed write. Planted in runtime/model_gpt.c rope_freq and caught: llama3's
# smooth factor inverted, its band edges (low/high) swapped (each fails the import's and
# the trained forward checks), linear multiplying; in the export, rope_scaling dropped.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/hf_lib.sh"
G="--model gpt --arch llama --hidden 16 --heads 4 --query-groups 2 --ffn-hidden 24 --seq 8 --vocab 256"

# hf_llama_ref.py HFDIR DATA SEQS: HF Llama's forward (modeling_llama: embed_tokens;
# per layer x += o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))) with
# n = RMSNorm(x), then x += down_proj(silu(gate_proj(n)) * up_proj(n)) with
# n = RMSNorm(x); norm; lm_head or embed_tokens^T when tied), in double, on sequences
# 0..SEQS-1 of DATA as bytes (sequence k: the s + 1 tokens from (k mod W) s); prints the
# mean cross-entropy. Reads F32 and BF16 safetensors.
# What both references share (hf_ref.py): the arguments, a safetensors reader (F32 and
# BF16; a 2-D tensor as rows; GPT2LMHeadModel's "transformer." prefix dropped), the
# token windows, causal attention with grouped heads, the cross-entropy.
# hf_rope.py: HF transformers' RoPE inverse frequencies of a Llama config.json
# (modeling_rope_utils: _compute_default_rope_parameters, and rope_scaling's rope_type
# linear (inv_freq / factor) or llama3 (_compute_llama3_parameters: by wavelength
# 2 pi / inv_freq, under original / high_freq_factor kept, over original /
# low_freq_factor divided by factor, between them the smooth blend)), in double,
# written here from that definition; and each pair's band.
# hf_llama_ref.py HFDIR DATA SEQS [FIRST [S]]: HF Llama's forward (modeling_llama: embed_tokens;
# per layer x += o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))) with
# n = RMSNorm(x), then x += down_proj(silu(gate_proj(n)) * up_proj(n)) with
# n = RMSNorm(x); norm; lm_head or embed_tokens^T when tied; RoPE's frequencies from
# hf_rope.py), in double, on sequences FIRST..FIRST+SEQS-1 of DATA as bytes (windows of
# S tokens, default max_position_embeddings); prints the mean cross-entropy.
cat > "$WORK/hf_llama_ref.py" <<'PY'
import math, sys
sys.path.insert(0, sys.path[0])
from hf_ref import c, W, windows, attention, xent, report, llama_ops
from hf_rope import inv_freq
h, Hq, L, V = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"], c["vocab_size"]
Hkv = c["num_key_value_heads"]; D = c.get("head_dim") or h // Hq; eps = c["rms_norm_eps"]
inv = inv_freq(c)[0]
lin, rms, rope, silu = llama_ops(D, eps, inv)
head = W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]
for ids, tgt in windows(c["max_position_embeddings"]):
    x = [list(W["model.embed_tokens.weight"][i]) for i in ids]
    for l in range(L):
        p = "model.layers.%d." % l
        nx = [rms(v, W[p + "input_layernorm.weight"]) for v in x]
        q = [rope(lin(v, W[p + "self_attn.q_proj.weight"]), t) for t, v in enumerate(nx)]
        kk = [rope(lin(v, W[p + "self_attn.k_proj.weight"]), t) for t, v in enumerate(nx)]
        if p + "self_attn.q_norm.weight" in W:   # Qwen3: each head RMS-normed before RoPE (rope is per head)
            hn = lambda y, g: [u for j in range(len(y) // D) for u in rms(y[j * D:(j + 1) * D], g)]
            q = [rope(hn(lin(v, W[p + "self_attn.q_proj.weight"]), W[p + "self_attn.q_norm.weight"]), t) for t, v in enumerate(nx)]
            kk = [rope(hn(lin(v, W[p + "self_attn.k_proj.weight"]), W[p + "self_attn.k_norm.weight"]), t) for t, v in enumerate(nx)]
        vv = [lin(v, W[p + "self_attn.v_proj.weight"]) for v in nx]
        att = attention(q, kk, vv, Hq, Hkv, D)
        x = [[a + b for a, b in zip(xv, lin(o, W[p + "self_attn.o_proj.weight"]))] for xv, o in zip(x, att)]
        nx = [rms(v, W[p + "post_attention_layernorm.weight"]) for v in x]
        mlp = [lin([silu(g) * u for g, u in zip(lin(v, W[p + "mlp.gate_proj.weight"]), lin(v, W[p + "mlp.up_proj.weight"]))],
                   W[p + "mlp.down_proj.weight"]) for v in nx]
        x = [[a + b for a, b in zip(xv, mv)] for xv, mv in zip(x, mlp)]
    for v, t in zip(x, tgt):
        xent(lin(rms(v, W["model.norm.weight"]), head), t)
report()
PY
# within REL relative: "A B REL"

# --- export: the HF forward gives the runtime's loss ---
for c in "untied 10000" "tied 500"; do
  set -- $c; e=$1; base=$2
  run() { "$A" $G --embeddings $e --rope-base $base --layers-per-stage 2 "$@"; }
  run --lr 0 --iterations 1 --data "$DATA" --save "$WORK/ck_$e" --json > "$WORK/r_$e" 2> "$WORK/err" ||
    { fail "$e: the run: $(cat "$WORK/err")"; continue; }
  l=$(loss1 "$WORK/r_$e")
  expect_exit 0 "$e: export" hf export "$WORK/ck_$e" "$WORK/hf_$e"
  ref=$(python3 "$WORK/hf_llama_ref.py" "$WORK/hf_$e" "$DATA" 2 2> "$WORK/err") || fail "$e: the reference: $(cat "$WORK/err")"
  if [ -n "$l" ] && [ -n "$ref" ] && near "$ref" "$l" 1e-5; then
    pass "$e embeddings, rope base $base: HF Llama's forward on the export gives the runtime's loss: $ref vs $l"
  else fail "$e embeddings, rope base $base: HF Llama's forward gives '$ref', the runtime printed '$l'"; fi
done
# --qk-layernorm exports as Qwen3ForCausalLM (q_norm / k_norm): trained 2 iterations (gains
# away from 1), the runtime's loss of the next 2 sequences = the reference's (per-head
# RMS norm of q and k before RoPE)
"$A" $G --qk-layernorm --layers-per-stage 2 --optimizer adam --lr 0.05 --iterations 2 --data "$DATA" --save "$WORK/ck_qw" -q \
  2> "$WORK/err" || fail "qwen3: the training run: $(cat "$WORK/err")"
"$A" $G --qk-layernorm --layers-per-stage 2 --lr 0 --iterations 1 --data "$DATA" --load "$WORK/ck_qw" --json > "$WORK/r_qw" \
  2> "$WORK/err" || fail "qwen3: the resumed run: $(cat "$WORK/err")"
pos=$(grep -o '"data_position":"[0-9]*"' "$WORK/ck_qw" | grep -o '[0-9][0-9]*')
expect_exit 0 "qwen3: export" hf export "$WORK/ck_qw" "$WORK/hf_qw"
grep -q '"model_type": *"qwen3"' "$WORK/hf_qw/config.json" && pass "qwen3: config.json model_type qwen3" || fail "qwen3: config.json"
ref=$(python3 "$WORK/hf_llama_ref.py" "$WORK/hf_qw" "$DATA" 2 "$pos" 2> "$WORK/err") || fail "qwen3: the reference: $(cat "$WORK/err")"
l=$(loss1 "$WORK/r_qw")
if [ -n "$l" ] && [ -n "$ref" ] && near "$ref" "$l" 1e-5; then pass "qwen3: the HF forward with q_norm / k_norm gives the runtime's loss: $ref vs $l"
else fail "qwen3: the HF forward gives '$ref', the runtime printed '$l' (sequences from $pos)"; fi
# --kv-channels D (HF's head_dim) apart from hidden / heads: D = 6 and 2 with 4 heads of
# h = 16 (a D = 24 and 8): the export's config.json has head_dim D and the HF forward
# gives the runtime's loss; imported back (--stages 4) bit for bit, the printed flags
# with --kv-channels D give the loss under ZB-V; D = 6 with --qk-layernorm as Qwen3
for D in 6 2; do
  "$A" $G --kv-channels $D --layers-per-stage 2 --lr 0 --iterations 1 --data "$DATA" --save "$WORK/ck_kv$D" --json \
    > "$WORK/r_kv$D" 2> "$WORK/err" || fail "kv-channels $D: the run: $(cat "$WORK/err")"
  l=$(loss1 "$WORK/r_kv$D")
  expect_exit 0 "kv-channels $D: export" hf export "$WORK/ck_kv$D" "$WORK/hf_kv$D"
  python3 - "$WORK/hf_kv$D" $D <<'PY' && pass "kv-channels $D: config.json head_dim $D, q_proj [4 D, 16], o_proj [16, 4 D]" || fail "kv-channels $D: config.json / shapes"
import json, struct, sys
d, D = sys.argv[1], int(sys.argv[2])
c = json.load(open(d + "/config.json"))
assert (c["head_dim"], c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]) == (D, 16, 4, 2), c
raw = open(d + "/model.safetensors", "rb").read()
hd = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
assert hd["model.layers.0.self_attn.q_proj.weight"]["shape"] == [4 * D, 16], hd["model.layers.0.self_attn.q_proj.weight"]
assert hd["model.layers.0.self_attn.k_proj.weight"]["shape"] == [2 * D, 16]
assert hd["model.layers.0.self_attn.o_proj.weight"]["shape"] == [16, 4 * D]
PY
  ref=$(python3 "$WORK/hf_llama_ref.py" "$WORK/hf_kv$D" "$DATA" 2 2> "$WORK/err") || fail "kv-channels $D: the reference: $(cat "$WORK/err")"
  if [ -n "$l" ] && [ -n "$ref" ] && near "$ref" "$l" 1e-5; then
    pass "kv-channels $D: HF Llama's forward with head_dim $D gives the runtime's loss: $ref vs $l"
  else fail "kv-channels $D: HF Llama's forward gives '$ref', the runtime printed '$l'"; fi
  expect_exit 0 "kv-channels $D: import" hf import "$WORK/hf_kv$D" "$WORK/back_kv$D" --stages 4
  expect_grep "--kv-channels $D " "kv-channels $D: the import's flags name --kv-channels $D"
  kflags=$(sed -n 's/^  \(--model .*\)/\1/p' "$WORK/out")
  PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK/ck_kv$D" "$WORK/back_kv$D" <<'PY' && pass "kv-channels $D: export then import, every tensor bit for bit" || fail "kv-channels $D: round trip"
import sys
from ckpt_tensors import load
x, y = load(sys.argv[1], raw=True), load(sys.argv[2], raw=True)
assert sorted(x) == sorted(y) and len(x) == 3 + 6 * 4, (sorted(x), sorted(y))
for k in x:
    assert x[k] == y[k], k
PY
  grep -q "\"kv_channels\":\"$D\"" "$WORK/back_kv$D" && pass "kv-channels $D: the imported index records kv_channels" ||
    fail "kv-channels $D: the imported index has no kv_channels $D"
  "$ZV" $kflags --lr 0 --iterations 1 --data "$DATA" --json > "$WORK/zkv" 2> "$WORK/err" || fail "kv-channels $D: ZB-V --load: $(cat "$WORK/err")"
  a=$(loss1 "$WORK/zkv")
  [ -n "$a" ] && near "$a" "$l" 1e-6 && pass "kv-channels $D: the import under ZB-V with the printed flags: loss $a (1F1B $l)" ||
    fail "kv-channels $D: ZB-V with the import: loss '$a', 1F1B's '$l'"
done
"$A" $G --kv-channels 6 --qk-layernorm --layers-per-stage 2 --optimizer adam --lr 0.05 --iterations 2 --data "$DATA" \
  --save "$WORK/ck_qkv" -q 2> "$WORK/err" || fail "qwen3 kv-channels 6: the training run: $(cat "$WORK/err")"
"$A" $G --kv-channels 6 --qk-layernorm --layers-per-stage 2 --lr 0 --iterations 1 --data "$DATA" --load "$WORK/ck_qkv" \
  --json > "$WORK/r_qkv" 2> "$WORK/err" || fail "qwen3 kv-channels 6: the resumed run: $(cat "$WORK/err")"
pos=$(grep -o '"data_position":"[0-9]*"' "$WORK/ck_qkv" | grep -o '[0-9][0-9]*')
expect_exit 0 "qwen3 kv-channels 6: export" hf export "$WORK/ck_qkv" "$WORK/hf_qkv"
ref=$(python3 "$WORK/hf_llama_ref.py" "$WORK/hf_qkv" "$DATA" 2 "$pos" 2> "$WORK/err") || fail "qwen3 kv-channels 6: the reference: $(cat "$WORK/err")"
l=$(loss1 "$WORK/r_qkv")
if [ -n "$l" ] && [ -n "$ref" ] && near "$ref" "$l" 1e-5; then pass "qwen3 head_dim 6 (q_norm / k_norm [6]): the HF forward gives the runtime's loss: $ref vs $l"
else fail "qwen3 kv-channels 6: the HF forward gives '$ref', the runtime printed '$l'"; fi
python3 - "$WORK" <<'PY' && pass "config.json: LlamaForCausalLM, sizes, tie_word_embeddings, rope_theta; lm_head only untied" || fail "config.json / names"
import json, struct, sys
w = sys.argv[1]
for e, tied, base in (("untied", False, 10000.0), ("tied", True, 500.0)):
    c = json.load(open("%s/hf_%s/config.json" % (w, e)))
    want = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16, "intermediate_size": 24,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
            "max_position_embeddings": 8, "rms_norm_eps": 1e-5, "rope_theta": base, "tie_word_embeddings": tied,
            "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32"}
    assert all(c.get(k) == v for k, v in want.items()), (e, c)
    raw = open("%s/hf_%s/model.safetensors" % (w, e), "rb").read()
    hd = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    assert ("lm_head.weight" in hd) == (not tied), sorted(hd)
    assert hd["model.layers.3.self_attn.k_proj.weight"]["shape"] == [8, 16] and hd["model.layers.0.mlp.down_proj.weight"]["shape"] == [16, 24]
PY

# a vocabulary-parallel checkpoint (each shard a slice of vocab.tok and vocab.out): the
# weights do not depend on the placement, so its export is the same file
if build v1 "$top_srcdir/stdlib/vocab_1f1b.pps" -D P=2 -D m=2; then
  "$WORK/v1" $G --layers-per-stage 2 --lr 0 --iterations 1 --data "$DATA" --save "$WORK/ck_v1" > /dev/null 2> "$WORK/err" ||
    fail "Vocab-1 run: $(cat "$WORK/err")"
  grep -q '"slice.vocab.tok"' "$WORK"/ck_v1.*.safetensors && pass "Vocab-1's shards hold slices" || fail "Vocab-1's shards: no slices"
  expect_exit 0 "export of Vocab-1's checkpoint" hf export "$WORK/ck_v1" "$WORK/hf_v1"
  cmp -s "$WORK/hf_v1/model.safetensors" "$WORK/hf_untied/model.safetensors" &&
    pass "its model.safetensors is 1F1B's, byte for byte (the slices joined)" || fail "Vocab-1's export differs from 1F1B's"
else fail "build vocab_1f1b"; fi

# --- round trip, and the import under another schedule ---
expect_exit 0 "import (untied)" hf import "$WORK/hf_untied" "$WORK/back" --stages 4
flags=$(sed -n 's/^  \(--model .*\)/\1/p' "$WORK/out")
expect_grep "--query-groups 2 --ffn-hidden 24 --vocab 256 --rope-base 10000 --embeddings untied --seq 8 --layers-per-stage 1 --load" \
  "the import prints the runtime's flags"
expect_exit 0 "import (tied)" hf import "$WORK/hf_tied" "$WORK/back_t"
expect_grep "--rope-base 500 --embeddings tied" "the tied import's flags"
PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK" <<'PY' && pass "export then import: every tensor bit for bit (untied and tied)" || fail "round trip"
import sys
from ckpt_tensors import load
w = sys.argv[1]
for a, b in (("ck_untied", "back"), ("ck_tied", "back_t")):
    x, y = load("%s/%s" % (w, a), raw=True), load("%s/%s" % (w, b), raw=True)
    assert sorted(x) == sorted(y) and len(x) == 2 + 6 * 4 + (a == "ck_untied"), (sorted(x), sorted(y))
    for k in x:
        assert x[k] == y[k], k
PY
if [ -n "$flags" ]; then
  "$ZV" $flags --lr 0 --iterations 1 --data "$DATA" --json > "$WORK/zl" 2> "$WORK/err" || fail "ZB-V --load: $(cat "$WORK/err")"
  a=$(loss1 "$WORK/zl"); b=$(loss1 "$WORK/r_untied")
  [ -n "$a" ] && near "$a" "$b" 1e-6 && pass "the import loaded under ZB-V (P = 2, 4 stages) with the printed flags: loss $a (1F1B $b)" ||
    fail "ZB-V with the imported checkpoint: loss '$a', 1F1B's '$b'"
else fail "no flags printed"; fi
"$ZV" $G --embeddings tied --rope-base 500 --layers-per-stage 1 --load "$WORK/back_t" --lr 0 --iterations 1 --data "$DATA" --json > "$WORK/zt" 2> "$WORK/err"
a=$(loss1 "$WORK/zt"); b=$(loss1 "$WORK/r_tied")
[ -n "$a" ] && near "$a" "$b" 1e-6 && pass "the tied import under ZB-V: loss $a (1F1B $b)" || fail "tied import under ZB-V: '$a' vs '$b' $(cat "$WORK/err")"

# --optimizer adam: zero moments at step 0, so fine-tuning the import is a fresh Adam run
expect_exit 0 "import --optimizer adam" hf import "$WORK/hf_untied" "$WORK/back_a" --optimizer adam
losses() { grep -o '"loss":[-0-9.e+]*' "$1" | tr '\n' ' '; }
"$A" $G --layers-per-stage 2 --optimizer adam --lr 0.01 --iterations 3 --data "$DATA" --json > "$WORK/fa" 2> "$WORK/err" || fail "fresh Adam: $(cat "$WORK/err")"
"$A" $G --layers-per-stage 2 --load "$WORK/back_a" --lr 0.01 --iterations 3 --data "$DATA" --json > "$WORK/la" 2> "$WORK/err" || fail "Adam from the import: $(cat "$WORK/err")"
a=$(losses "$WORK/la"); b=$(losses "$WORK/fa")
[ -n "$a" ] && [ "$a" = "$b" ] && pass "Adam from the import = a fresh Adam run, 3 iterations bit for bit: $a" || fail "Adam from the import: '$a', fresh: '$b'"
# the runtime switches optimizer at step 0 too: the SGD import loaded with --optimizer adam
"$A" $G --layers-per-stage 2 --load "$WORK/back" --optimizer adam --lr 0.01 --iterations 3 --data "$DATA" --json > "$WORK/ls" 2> "$WORK/err" || fail "--optimizer adam on the SGD import: $(cat "$WORK/err")"
a=$(losses "$WORK/ls")
[ -n "$a" ] && [ "$a" = "$b" ] && pass "--optimizer adam on an SGD checkpoint at step 0 = a fresh Adam run: $a" || fail "Adam on the SGD import: '$a', fresh: '$b'"

# --- BF16 export; F16 / BF16 / sharded import ---
expect_exit 0 "export --dtype bf16" hf export "$WORK/ck_untied" "$WORK/hf_bf" --dtype bf16
python3 - "$WORK" <<'PY' && pass "bf16: every value within half a bfloat16 ulp of the F32 one (nearest, not truncated)" || fail "bf16 export"
import json, math, struct, sys
w = sys.argv[1]
def rd(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for k, v in json.loads(raw[8:8 + n]).items():
        if k == "__metadata__": continue
        a, b = v["data_offsets"]; body = raw[8 + n + a:8 + n + b]
        out[k] = (v["dtype"], struct.unpack("<%df" % (len(body) // 4), body) if v["dtype"] == "F32" else
                  [struct.unpack("<f", b"\0\0" + body[i:i + 2])[0] for i in range(0, len(body), 2)])
    return out
f, b = rd(w + "/hf_untied/model.safetensors"), rd(w + "/hf_bf/model.safetensors")
assert sorted(f) == sorted(b) and json.load(open(w + "/hf_bf/config.json"))["torch_dtype"] == "bfloat16"
moved = 0
for k in f:
    assert b[k][0] == "BF16", k
    for x, y in zip(f[k][1], b[k][1]):
        half = 2.0 ** (math.floor(math.log2(abs(x))) - 8) if x else 0
        assert abs(x - y) <= half, (k, x, y)
        moved += x != y
assert moved > 0.9 * sum(len(v[1]) for v in f.values())
PY
# a sharded directory: shard 1 F16, shard 2 BF16 (the values made representable), imported exactly
python3 - "$WORK" <<'PY' || fail "making the sharded F16/BF16 directory"
import json, os, shutil, struct, sys
w = sys.argv[1]; src = w + "/hf_untied"; dst = w + "/hf_sh"
os.mkdir(dst); shutil.copy(src + "/config.json", dst)
raw = open(src + "/model.safetensors", "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
hd = {k: v for k, v in json.loads(raw[8:8 + n]).items() if k != "__metadata__"}
names = sorted(hd); parts = {"a.safetensors": names[::2], "b.safetensors": names[1::2]}
exact = {}
for fn, ks in parts.items():
    dt = "F16" if fn == "a.safetensors" else "BF16"
    h, body = {}, b""
    for k in ks:
        a, b = hd[k]["data_offsets"]
        vals = struct.unpack("<%df" % ((b - a) // 4), raw[8 + n + a:8 + n + b])
        if dt == "F16":
            enc = struct.pack("<%de" % len(vals), *vals); back = struct.unpack("<%de" % len(vals), enc)
        else:
            enc = b"".join(struct.pack("<f", v)[2:] for v in vals)
            back = [struct.unpack("<f", b"\0\0" + enc[i:i + 2])[0] for i in range(0, len(enc), 2)]
        h[k] = {"dtype": dt, "shape": hd[k]["shape"], "data_offsets": [len(body), len(body) + len(enc)]}
        body += enc; exact[k] = back
    t = json.dumps(h).encode(); t += b" " * (-len(t) % 8)
    open(dst + "/" + fn, "wb").write(struct.pack("<Q", len(t)) + t + body)
json.dump({"metadata": {}, "weight_map": {k: fn for fn, ks in parts.items() for k in ks}}, open(dst + "/model.safetensors.index.json", "w"))
json.dump(exact, open(w + "/exact.json", "w"))
PY
expect_exit 0 "import of a sharded F16 + BF16 directory" hf import "$WORK/hf_sh" "$WORK/sh"
expect_exit 0 "its export" hf export "$WORK/sh" "$WORK/hf_sh2"
python3 - "$WORK" <<'PY' && pass "F16 and BF16 tensors of a sharded directory import to their exact values" || fail "sharded F16/BF16 import"
import json, struct, sys
w = sys.argv[1]; exact = json.load(open(w + "/exact.json"))
raw = open(w + "/hf_sh2/model.safetensors", "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
hd = {k: v for k, v in json.loads(raw[8:8 + n]).items() if k != "__metadata__"}
assert sorted(hd) == sorted(exact)
for k, v in hd.items():
    a, b = v["data_offsets"]
    assert list(struct.unpack("<%df" % ((b - a) // 4), raw[8 + n + a:8 + n + b])) == exact[k], k
PY

# trained weights (at initialisation every norm's gain is 1 and every bias 0, so a swap
# among them would not change the loss): 3 SGD steps, saved; the resumed run at --lr 0
# prints the loss of those weights on sequences 6 and 7 (the data position of 3
# iterations of 2 microbatches); the reference computes it from the export
# trained LABEL REF NAME FLAGS...: train, resume, export ($WORK/hfT_NAME), and compare
# the reference REF's loss on the export with the runtime's
# (T_START: the first run --loads it; T_SEQ: the reference's window when not the config's)
trained() {
  label=$1 ref=$2 nm=$3; shift 3
  if "$A" "$@" --layers-per-stage 2 ${T_START:+--load "$T_START"} --lr 0.1 --iterations 3 --data "$DATA" \
       --save "$WORK/ckT0_$nm" > /dev/null 2> "$WORK/err" &&
     "$A" "$@" --layers-per-stage 2 --lr 0 --iterations 1 --data "$DATA" --load "$WORK/ckT0_$nm" --save "$WORK/ckT_$nm" --json \
       > "$WORK/rT_$nm" 2>> "$WORK/err" && hf export "$WORK/ckT_$nm" "$WORK/hfT_$nm" > /dev/null; then
    l=$(loss1 "$WORK/rT_$nm"); r=$(python3 "$WORK/$ref" "$WORK/hfT_$nm" "$DATA" 2 6 $T_SEQ 2> "$WORK/err")
    [ -n "$l" ] && [ -n "$r" ] && near "$r" "$l" 1e-5 && pass "trained $label: the reference forward on the export gives the runtime's loss: $r vs $l" ||
      fail "trained $label: the reference forward '$r', the runtime '$l' $(cat "$WORK/err")"
  else fail "trained $label: $(cat "$WORK/err")"; fi
}
for e in untied tied; do trained "Llama, $e" hf_llama_ref.py llama$e $G --embeddings $e; done

# --- a Llama 3-shaped model: rope_theta 500000, rope_scaling llama3, grouped-query
# attention, tied embeddings, BF16 tensors (as the hub's 1B and 3B) ---
# mk_llama3.py DIR VOCAB HIDDEN HEADS KV FFN LAYERS POSITIONS ORIGINAL TIED QK_STD: a HF
# directory of random BF16 weights (seeded); query and key projections of QK_STD, so
# that attention is sharp and the loss depends on RoPE's angles
cat > "$WORK/mk_llama3.py" <<'PY'
import json, os, random, struct, sys
d, V, h, Hq, Hkv, F, L, npos, orig, tied = sys.argv[1], *map(int, sys.argv[2:11]); qk = float(sys.argv[11])
rng = random.Random(3); D = h // Hq
os.makedirs(d, exist_ok=True)
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h, "intermediate_size": F,
           "num_hidden_layers": L, "num_attention_heads": Hq, "num_key_value_heads": Hkv, "head_dim": D, "vocab_size": V,
           "max_position_embeddings": npos, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": orig, "rope_type": "llama3"},
           "tie_word_embeddings": bool(tied), "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
           "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"}, open(d + "/config.json", "w"))
shapes = [("model.embed_tokens.weight", [V, h], 0.3), ("model.norm.weight", [h], -1)]
if not tied: shapes.append(("lm_head.weight", [V, h], 0.3))
for l in range(L):
    p = "model.layers.%d." % l
    shapes += [(p + "input_layernorm.weight", [h], -1), (p + "post_attention_layernorm.weight", [h], -1),
               (p + "self_attn.q_proj.weight", [Hq * D, h], qk), (p + "self_attn.k_proj.weight", [Hkv * D, h], qk),
               (p + "self_attn.v_proj.weight", [Hkv * D, h], 0.2), (p + "self_attn.o_proj.weight", [h, Hq * D], 0.2),
               (p + "mlp.gate_proj.weight", [F, h], 0.2), (p + "mlp.up_proj.weight", [F, h], 0.2), (p + "mlp.down_proj.weight", [h, F], 0.2)]
hd, body = {}, bytearray()
for k, shape, std in shapes:
    n = shape[0] * (shape[1] if len(shape) > 1 else 1)
    vals = [1 + 0.1 * rng.gauss(0, 1) if std < 0 else rng.gauss(0, std) for _ in range(n)]
    enc = struct.pack("<%df" % n, *vals)
    enc = b"".join(enc[i + 2:i + 4] for i in range(0, len(enc), 4))    # BF16: the high halves (truncated)
    hd[k] = {"dtype": "BF16", "shape": shape, "data_offsets": [len(body), len(body) + len(enc)]}; body += enc
t = json.dumps(hd).encode(); t += b" " * (-len(t) % 8)
open(d + "/model.safetensors", "wb").write(struct.pack("<Q", len(t)) + t + body)
PY
S3=16   # the sequence length: D = 16 (8 pairs), original context 64
python3 "$WORK/mk_llama3.py" "$WORK/hf_l3" 256 32 2 1 64 4 $S3 64 1 0.4 || fail "making the Llama 3-shaped directory"
# the three bands of llama3's adjustment all hold pairs, and at this sequence length the
# adjustment moves the last position's angle by over 0.05 radians in a pair of the low
# band and one of the medium band (the high band's by none)
python3 - "$WORK" $S3 <<'PY' && pass "llama3 bands at D = 16, original 64: every band holds pairs, the medium and low ones move the angle at t = $((S3 - 1)) by > 0.05 rad" || fail "llama3 bands not all exercised"
import json, sys
sys.path.insert(0, sys.argv[1])
from hf_rope import inv_freq
c = json.load(open(sys.argv[1] + "/hf_l3/config.json")); t = int(sys.argv[2]) - 1
scaled, band = inv_freq(c)
plain, _ = inv_freq(dict(c, rope_scaling=None))
print("  bands:", band, " angle moved at t = %d:" % t, ["%.3f" % (t * abs(a - b)) for a, b in zip(plain, scaled)])
assert set(band) == {"high", "medium", "low"}, band
assert all(t * abs(a - b) == 0 for a, b, k in zip(plain, scaled, band) if k == "high")
assert all(max(t * abs(a - b) for a, b, k in zip(plain, scaled, band) if k == kind) > 0.05 for kind in ("medium", "low"))
PY
expect_exit 0 "import of the Llama 3-shaped directory (BF16, llama3 scaling, GQA 2:1, tied)" hf import "$WORK/hf_l3" "$WORK/l3" --stages 2
expect_grep "--query-groups 1 --ffn-hidden 64 --vocab 256 --rope-base 500000 --embeddings tied --seq 16 --rope-scaling llama3 --rope-scaling-factor 8 --rope-low-freq-factor 1 --rope-high-freq-factor 4 --rope-original-max-positions 64 --layers-per-stage 2 --load" \
  "  the flags printed name the scaling"
l3flags=$(sed -n 's/^  \(--model .*\) --load .*/\1/p' "$WORK/out")
for kv in '"rope_scaling":"llama3"' '"rope_scaling_factor":"8.0"' '"rope_original_max_positions":"64"' '"rope_base":"500000.0"'; do
  grep -q "$kv" "$WORK/l3" && pass "  the index records $kv" || fail "the imported index lacks $kv"
done
"$A" $l3flags --load "$WORK/l3" --lr 0 --iterations 1 --data "$DATA" --json > "$WORK/r_l3" 2> "$WORK/err" || fail "Llama 3 import run: $(cat "$WORK/err")"
l=$(loss1 "$WORK/r_l3")
ref=$(python3 "$WORK/hf_llama_ref.py" "$WORK/hf_l3" "$DATA" 2 2> "$WORK/err") || fail "Llama 3 reference: $(cat "$WORK/err")"
[ -n "$l" ] && [ -n "$ref" ] && near "$ref" "$l" 1e-5 && pass "Llama 3-shaped import: HF's forward (llama3 frequencies) gives the runtime's loss: $ref vs $l" ||
  fail "Llama 3-shaped import: HF's forward '$ref', the runtime '$l'"
# the same weights without the scaling: another loss (the check sees the frequencies)
python3 -c "import json, sys; c = json.load(open(sys.argv[1])); c['rope_scaling'] = None; json.dump(c, open(sys.argv[2], 'w'))" \
  "$WORK/hf_l3/config.json" "$WORK/l3_plain.json"
mkdir "$WORK/hf_l3p" && cp "$WORK/l3_plain.json" "$WORK/hf_l3p/config.json" && cp "$WORK/hf_l3/model.safetensors" "$WORK/hf_l3p/"
refp=$(python3 "$WORK/hf_llama_ref.py" "$WORK/hf_l3p" "$DATA" 2 2> "$WORK/err")
[ -n "$refp" ] && ! near "$refp" "$l" 1e-4 && pass "  unscaled, HF's forward gives another loss ($refp): the frequencies matter here" ||
  fail "the unscaled reference '$refp' is the scaled loss '$l': the test would not see the scaling"
T_START=$WORK/l3 T_SEQ=$S3 trained "Llama 3-shaped import (llama3 scaling, tied, GQA)" hf_llama_ref.py l3 $l3flags
python3 - "$WORK/hfT_l3" <<'PY' && pass "its export's config.json: rope_theta 500000, rope_scaling llama3 and its parameters, tied, max_position_embeddings 8 x 64" || fail "the Llama 3 export's config.json"
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))
want = {"rope_theta": 500000.0, "tie_word_embeddings": True, "num_key_value_heads": 1, "max_position_embeddings": 512,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64}}
assert all(c.get(k) == v for k, v in want.items()), c
assert isinstance(c["rope_scaling"]["original_max_position_embeddings"], int) and isinstance(c["rope_scaling"]["factor"], float)
PY
expect_exit 0 "the export imports again" hf import "$WORK/hfT_l3" "$WORK/l3b" --stages 2
expect_grep "--rope-base 500000 --embeddings tied --seq 512 --rope-scaling llama3 --rope-scaling-factor 8 --rope-low-freq-factor 1 --rope-high-freq-factor 4 --rope-original-max-positions 64" \
  "  with the same scaling"
# linear scaling (HF's rope_type linear: inv_freq / factor), imported and checked the same way
python3 -c "import json, sys; c = json.load(open(sys.argv[1])); c['rope_scaling'] = {'type': 'linear', 'factor': 2.5}; json.dump(c, open(sys.argv[2], 'w'))" \
  "$WORK/hf_l3/config.json" "$WORK/l3_lin.json"
mkdir "$WORK/hf_l3l" && cp "$WORK/l3_lin.json" "$WORK/hf_l3l/config.json" && cp "$WORK/hf_l3/model.safetensors" "$WORK/hf_l3l/"
expect_exit 0 "import with rope_scaling linear (the old \"type\" key)" hf import "$WORK/hf_l3l" "$WORK/l3l" --stages 2
expect_grep "--rope-scaling linear --rope-scaling-factor 2.5 --layers-per-stage 2" "  the flags name it"
lflags=$(sed -n 's/^  \(--model .*\) --load .*/\1/p' "$WORK/out")
"$A" $lflags --load "$WORK/l3l" --lr 0 --iterations 1 --data "$DATA" --json > "$WORK/r_l3l" 2> "$WORK/err" || fail "linear run: $(cat "$WORK/err")"
l=$(loss1 "$WORK/r_l3l"); ref=$(python3 "$WORK/hf_llama_ref.py" "$WORK/hf_l3l" "$DATA" 2 2> "$WORK/err")
[ -n "$l" ] && [ -n "$ref" ] && near "$ref" "$l" 1e-5 && pass "linear: HF's forward gives the runtime's loss: $ref vs $l" || fail "linear: HF's forward '$ref', the runtime '$l'"
"$A" $lflags --load "$WORK/l3l" --lr 0 --iterations 1 --data "$DATA" --save "$WORK/ck_l3l" > /dev/null 2> "$WORK/err" &&
  hf export "$WORK/ck_l3l" "$WORK/hf_l3l2" > /dev/null &&
  python3 -c "import json, sys; c = json.load(open(sys.argv[1])); assert c['rope_scaling'] == {'rope_type': 'linear', 'factor': 2.5} and c['max_position_embeddings'] == 16, c" \
    "$WORK/hf_l3l2/config.json" && pass "  its export writes rope_scaling linear 2.5" || fail "linear export: $(cat "$WORK/err")"

# Llama 3's vocabulary, 128256 tokens (untied, as 8B: both matrices): import, the runtime's
# forward = HF's (one window of 4 bytes of DATA), a run at --lr 0 saved, exported: every
# tensor the BF16 value imported
python3 "$WORK/mk_llama3.py" "$WORK/hf_v" 128256 8 2 1 16 2 4 2 0 0.4 || fail "making the 128256-token directory"
expect_exit 0 "import with vocab_size 128256" hf import "$WORK/hf_v" "$WORK/lv" --stages 2
vflags=$(sed -n 's/^  \(--model .*\) --load .*/\1/p' "$WORK/out")
"$A" $vflags --micro-batch 1 --load "$WORK/lv" --lr 0 --iterations 1 --data "$DATA" --json --save "$WORK/ck_v" > "$WORK/r_v" 2> "$WORK/err" ||
  fail "the 128256-token run: $(cat "$WORK/err")"
l=$(loss1 "$WORK/r_v"); ref=$(python3 "$WORK/hf_llama_ref.py" "$WORK/hf_v" "$DATA" 2 2> "$WORK/err")
[ -n "$l" ] && [ -n "$ref" ] && near "$ref" "$l" 1e-5 && pass "vocab 128256: HF's forward gives the runtime's loss: $ref vs $l" || fail "vocab 128256: HF's forward '$ref', the runtime '$l' $(cat "$WORK/err")"
expect_exit 0 "  its export" hf export "$WORK/ck_v" "$WORK/hf_v2"
python3 - "$WORK/hf_v" "$WORK/hf_v2" <<'PY' && pass "  every tensor of the export is the imported BF16 value, vocab 128256 rows" || fail "the 128256-token round trip"
import json, struct, sys
def rd(p):
    raw = open(p + "/model.safetensors", "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; out = {}
    for k, v in json.loads(raw[8:8 + n]).items():
        if k == "__metadata__": continue
        a, b = v["data_offsets"]; body = raw[8 + n + a:8 + n + b]
        out[k] = (v["shape"], struct.unpack("<%df" % (len(body) // 4), body) if v["dtype"] == "F32" else
                  struct.unpack("<%df" % (len(body) // 2), b"".join(b"\0\0" + body[i:i + 2] for i in range(0, len(body), 2))))
    return out
a, b = rd(sys.argv[1]), rd(sys.argv[2])
assert sorted(a) == sorted(b) and a["lm_head.weight"][0] == [128256, 8]
for k in a: assert a[k] == b[k], k
PY

# --- GPT-2's layer (the gpt model's default) <-> Hugging Face GPT2LMHeadModel ---
# hf_gpt2_ref.py HFDIR DATA SEQS: GPT-2's forward (modeling_gpt2: wte + wpe; per layer
# x += c_proj(attn(split(c_attn(LN(x))))), x += mlp.c_proj(gelu_new(c_fc(LN(x)))), Conv1D
# weights [in, out]; ln_f; lm_head or wte^T when tied), in double, as hf_llama_ref.py, on hf_ref.py
cat > "$WORK/hf_gpt2_ref.py" <<'PY'
import math, sys
sys.path.insert(0, sys.path[0])
from hf_ref import c, W, windows, attention, xent, report
h, H, L, s = c["n_embd"], c["n_head"], c["n_layer"], c["n_positions"]; D = h // H; eps = c["layer_norm_epsilon"]
def conv(x, w, b): return [sum(x[i] * w[i][o] for i in range(len(x))) + b[o] for o in range(len(b))]   # x W + b, W [in, out]
def ln(x, g, b):
    m = sum(x) / len(x); v = sum((t - m) ** 2 for t in x) / len(x); r = 1 / math.sqrt(v + eps)
    return [(t - m) * r * gi + bi for t, gi, bi in zip(x, g, b)]
gelu = lambda x: 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
head = W["wte.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]
for ids, tgt in windows(s):
    x = [[a + b for a, b in zip(W["wte.weight"][i], W["wpe.weight"][t])] for t, i in enumerate(ids)]
    for l in range(L):
        p = "h.%d." % l
        qkv = [conv(ln(v, W[p + "ln_1.weight"], W[p + "ln_1.bias"]), W[p + "attn.c_attn.weight"], W[p + "attn.c_attn.bias"]) for v in x]
        att = attention([r[:h] for r in qkv], [r[h:2 * h] for r in qkv], [r[2 * h:] for r in qkv], H, H, D)
        x = [[a + b for a, b in zip(xv, conv(o, W[p + "attn.c_proj.weight"], W[p + "attn.c_proj.bias"]))] for xv, o in zip(x, att)]
        x = [[a + b for a, b in zip(xv, conv([gelu(u) for u in conv(ln(xv, W[p + "ln_2.weight"], W[p + "ln_2.bias"]),
                W[p + "mlp.c_fc.weight"], W[p + "mlp.c_fc.bias"])], W[p + "mlp.c_proj.weight"], W[p + "mlp.c_proj.bias"]))] for xv in x]
    for v, t in zip(x, tgt):
        f = ln(v, W["ln_f.weight"], W["ln_f.bias"]); xent([sum(a * b for a, b in zip(f, r)) for r in head], t)
report()
PY
G2="--model gpt --hidden 16 --heads 4 --query-groups 4 --seq 8 --vocab 256"
for e in tied untied; do
  "$A" $G2 --embeddings $e --layers-per-stage 2 --lr 0 --iterations 1 --data "$DATA" --save "$WORK/ck_gpt2$e" --json \
    > "$WORK/r_gpt2$e" 2> "$WORK/err" || { fail "GPT-2 $e run: $(cat "$WORK/err")"; continue; }
  expect_exit 0 "GPT-2 $e: export" hf export "$WORK/ck_gpt2$e" "$WORK/hf_gpt2$e"
  l=$(loss1 "$WORK/r_gpt2$e")
  ref=$(python3 "$WORK/hf_gpt2_ref.py" "$WORK/hf_gpt2$e" "$DATA" 2 2> "$WORK/err") || fail "GPT-2 reference: $(cat "$WORK/err")"
  if [ -n "$l" ] && [ -n "$ref" ] && near "$ref" "$l" 1e-5; then pass "GPT-2 $e: HF GPT-2's forward on the export gives the runtime's loss: $ref vs $l"
  else fail "GPT-2 $e: HF GPT-2's forward gives '$ref', the runtime printed '$l'"; fi
  expect_exit 0 "GPT-2 $e: import" hf import "$WORK/hf_gpt2$e" "$WORK/back_gpt2$e" --stages 4
  expect_grep "\-\-model gpt --hidden 16 --heads 4 --query-groups 4 --ffn-hidden 64 --vocab 256 --seq 8 --embeddings $e --layers-per-stage 1" "  the flags printed"
  PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK/ck_gpt2$e" "$WORK/back_gpt2$e" <<'PY' && pass "GPT-2 $e: export then import, every tensor bit for bit" || fail "GPT-2 $e round trip"
import sys
from ckpt_tensors import load
a, b = load(sys.argv[1], raw=True), load(sys.argv[2], raw=True)
assert sorted(a) == sorted(b) and all(a[k][1] == b[k][1] for k in a), sorted(set(a) ^ set(b))
PY
  "$ZV" $G2 --embeddings $e --layers-per-stage 1 --load "$WORK/back_gpt2$e" --lr 0 --iterations 1 --data "$DATA" --json \
    > "$WORK/z_gpt2$e" 2> "$WORK/err"
  a=$(loss1 "$WORK/z_gpt2$e")
  [ -n "$a" ] && near "$a" "$l" 1e-6 && pass "GPT-2 $e: the import under ZB-V gives 1F1B's loss $a" || fail "GPT-2 $e under ZB-V: '$a' vs '$l' $(cat "$WORK/err")"
done
for e in tied untied; do trained "GPT-2, $e" hf_gpt2_ref.py gpt2$e $G2 --embeddings $e; done
python3 - "$WORK/hf_gpt2tied" <<'PY' && pass "GPT-2's config.json: GPT2LMHeadModel, gelu_new, n_positions = seq, no lm_head when tied" || fail "GPT-2 config.json"
import json, struct, sys
c = json.load(open(sys.argv[1] + "/config.json"))
want = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 16, "n_head": 4, "n_layer": 4, "n_positions": 8,
        "n_inner": None, "vocab_size": 256, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
assert all(c.get(k) == v for k, v in want.items()), c
raw = open(sys.argv[1] + "/model.safetensors", "rb").read()
hd = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
assert "lm_head.weight" not in hd and hd["transformer.h.0.attn.c_attn.weight"]["shape"] == [16, 48], sorted(hd)
PY
# the hub's gpt2 files: GPT2Model's keys (no "transformer."), causal-mask buffers, 1024
# positions of which --seq takes the first rows
python3 - "$WORK/hf_gpt2tied" "$WORK/hf_hub" <<'PY' || fail "making a hub-style GPT-2 directory"
import json, os, struct, sys
src, dst = sys.argv[1:3]
os.makedirs(dst, exist_ok=True)
c = json.load(open(src + "/config.json")); c["n_positions"] = c["n_ctx"] = 12
json.dump(c, open(dst + "/config.json", "w"))
raw = open(src + "/model.safetensors", "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
hd = json.loads(raw[8:8 + n]); out, body = {}, b""
for k, v in hd.items():
    if k == "__metadata__": continue
    a, b = v["data_offsets"]; t = raw[8 + n + a:8 + n + b]; shape = v["shape"]
    if k.endswith("wpe.weight"): t += struct.pack("<%df" % (4 * 16), *[0.5] * 64); shape = [12, 16]
    out[k.replace("transformer.", "")] = {"dtype": "F32", "shape": shape, "data_offsets": [len(body), len(body) + len(t)]}; body += t
mask = struct.pack("<f", 1.0) * 144
out["h.0.attn.bias"] = {"dtype": "F32", "shape": [1, 1, 12, 12], "data_offsets": [len(body), len(body) + len(mask)]}; body += mask
h = json.dumps(out).encode(); h += b" " * (-len(h) % 8)
open(dst + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + body)
PY
expect_exit 0 "a hub-style GPT-2 (no transformer. prefix, mask buffers, 12 positions) --seq 8" hf import "$WORK/hf_hub" "$WORK/back_hub" --seq 8
PYTHONPATH="$top_srcdir/tests/runtime" python3 - "$WORK/ck_gpt2tied" "$WORK/back_hub" <<'PY' && pass "  the same tensors (the first 8 positions)" || fail "hub-style import"
import sys
from ckpt_tensors import load
a, b = load(sys.argv[1], raw=True), load(sys.argv[2], raw=True)
assert sorted(a) == sorted(b) and all(a[k][1] == b[k][1] for k in a), sorted(set(a) ^ set(b))
PY
expect_exit 2 "--seq past n_positions" hf import "$WORK/hf_hub" "$WORK/x" --seq 13
expect_grep "\-\-seq 13: the model has 12 positions (n_positions)" "  said so"

# --- refusals ---
"$A" --model gpt --hidden 16 --heads 4 --query-groups 2 --seq 8 --vocab 256 --layers-per-stage 2 --iterations 1 --mlp swiglu \
  --data "$DATA" --save "$WORK/ck_mixed" > /dev/null 2>&1 || fail "the SwiGLU-only run"
expect_exit 2 "export refuses a layer neither Llama's nor GPT-2's" hf export "$WORK/ck_mixed" "$WORK/hf_mixed"
expect_grep "metadata field 'norm' is 'layernorm'.*--arch llama" "the field named"
[ ! -e "$WORK/hf_mixed/model.safetensors" ] && pass "nothing exported" || fail "the refused export left model.safetensors"
"$A" --model gpt --hidden 16 --heads 4 --query-groups 2 --seq 8 --vocab 256 --layers-per-stage 2 --iterations 1 \
  --data "$DATA" --save "$WORK/ck_gqa" > /dev/null 2>&1 || fail "the GPT-2 GQA run"
expect_exit 2 "export refuses GPT-2's layer with query groups" hf export "$WORK/ck_gqa" "$WORK/hf_gqa"
expect_grep "metadata field 'query_groups' is 2: Hugging Face's GPT-2 has as many key/value heads as heads" "the field named"
refuse() {   # refuse FIELD JSON-VALUE [PATTERN]: import of hf_untied with config FIELD = VALUE is refused
  rm -rf "$WORK/hf_x" "$WORK/x" "$WORK/x."*; cp -r "$WORK/hf_untied" "$WORK/hf_x"
  python3 -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); c[sys.argv[2]] = json.loads(sys.argv[3]); json.dump(c, open(p, 'w'))" \
    "$WORK/hf_x/config.json" "$1" "$2"
  expect_exit 2 "import refuses $1 = $2" hf import "$WORK/hf_x" "$WORK/x"
  expect_grep "${3:-field '$1' is}" "  naming '$1'"
  [ ! -e "$WORK/x" ] && [ -z "$(ls -a "$WORK" | grep '^\.x\|^x\.')" ] && pass "  nothing written" || fail "$1: the refused import left files"
}
refuse rope_scaling '{"rope_type": "yarn", "factor": 4.0}' "field 'rope_scaling' is .*rope_type \"yarn\": PPS's RoPE scales as rope_type linear or llama3 only"
refuse rope_scaling '{"type": "dynamic", "factor": 2.0}' "rope_type \"dynamic\": PPS's RoPE scales as"
refuse rope_parameters '{"rope_type": "longrope", "rope_theta": 10000.0}' "field 'rope_parameters' is .*rope_type \"longrope\""
refuse rope_scaling '{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}' \
  "rope_type llama3: low_freq_factor 4 is not below high_freq_factor 1"
refuse rope_scaling '{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}' \
  "rope_type llama3: original_max_position_embeddings is null, not a whole number above 0"
refuse rope_scaling '{"rope_type": "linear", "factor": 0}' "rope_type linear: factor is 0, not a number above 0"
refuse attention_bias true
refuse rms_norm_eps 0
refuse rms_norm_eps '"1e-6"'
refuse hidden_act '"gelu"'
refuse head_dim 7 "field 'head_dim' is 7: odd (RoPE rotates pairs"
refuse head_dim 8 "q_proj.weight' has shape \[16, 16\], the config's model needs \[32, 16\]"
refuse intermediate_size 32 "mlp.gate_proj.weight' has shape \[24, 16\], the config's model needs \[32, 16\]"
# bad files: one line, no traceback
printf '{"hidden_size": 16,' > "$WORK/hf_x/config.json"
expect_exit 2 "malformed config.json" hf import "$WORK/hf_x" "$WORK/x"
expect_grep "config.json: malformed config.json" "  the file named"
cp "$WORK/hf_untied/config.json" "$WORK/hf_x/"
python3 -c "import sys; d = open(sys.argv[1], 'rb').read(); open(sys.argv[2], 'wb').write(d[:-100])" \
  "$WORK/hf_untied/model.safetensors" "$WORK/hf_x/model.safetensors"
expect_exit 2 "a truncated model.safetensors" hf import "$WORK/hf_x" "$WORK/x"
expect_grep "model.safetensors: .*end past the file" "  said so"
sed 's/"rope_scaling":"llama3"/"rope_scaling":"yarn"/' "$WORK/ckT_l3" > "$WORK/ckT_l3.bad"   # (its shards beside it)
expect_exit 2 "export of an index with rope_scaling yarn" hf export "$WORK/ckT_l3.bad" "$WORK/hf_bad"
expect_grep "metadata field 'rope_scaling' is 'yarn', expected none, linear or llama3" "  the field named"
[ ! -e "$WORK/hf_bad/model.safetensors" ] && pass "  nothing exported" || fail "the refused export left model.safetensors"
expect_exit 2 "a missing index" hf export "$WORK/nothere" "$WORK/hf_y"
expect_exit 2 "a usage error" hf export "$WORK/ck_untied"
expect_exit 2 "--dtype f8" hf export "$WORK/ck_untied" "$WORK/hf_y" --dtype f8
expect_grep "--dtype needs f32 or bf16" "  the values named"
expect_exit 2 "--stages 3 of 4 layers" hf import "$WORK/hf_untied" "$WORK/x" --stages 3
grep -q Traceback "$WORK/all" && fail "a Python traceback: $(cat "$WORK/all")" || pass "no traceback in any of pps_hf.py's messages"
finish
