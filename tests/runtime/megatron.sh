#!/bin/sh
# megatron.sh: python/pps_megatron.py, Megatron-LM checkpoints (Megatron-Core GPTModel,
# the torch format) -> PPS checkpoints. The Megatron files are written here from PPS
# checkpoints the runtime saved, by megatron_ckpt.py: Megatron-Core's layout (query
# groups [their query heads | key | value], column- and row-parallel splits, SwiGLU's
# [gate | up] per rank, virtual pipeline chunks) written from Megatron's definitions,
# in torch.save's zip format without torch (with torch too when PPS_TORCH_PYTHON has it).
#  - A Llama-style model (SwiGLU, RMS norms, RoPE, GQA 4:2, no biases, untied) split
#    TP 2 x PP 2, TE names: the import equals the saved checkpoint bit for bit, and
#    the runtime, run with the flags the import prints, gives the saved run's loss;
#    tied under PP 1 x VP 2 (Megatron's interleaved chunks: layer order), local names,
#    parameters as views of one buffer;
#  - GPT-2's layer (layer norms, learned positions, tanh GeLU, biases, untied) at TP 2,
#    and tied at TP 1 x PP 2 x VP 2 with the buffer: bit for bit and the loss;
#  - kv_channels other than hidden / heads (--kv-channels): Llama's layer D = 6 at TP 2 x
#    PP 2, GPT-2's D = 2 at TP 2: bit for bit, --kv-channels printed, the saved run's loss;
#  - Qwen2's layer (norm_epsilon 1e-6, add_qkv_bias without add_bias_linear) at TP 2 x
#    PP 2: bit for bit, --add-qkv-bias --norm-epsilon 1e-06 printed, the saved run's
#    loss; trained 2 iterations (the bias away from 0): bit for bit, and the import runs
#    with the printed flags;
#  - qk_layernorm (q_layernorm / k_layernorm [D], whole on every rank): Llama's layer at
#    TP 2 x PP 2 (RMS norms, gains) and GPT-2's at TP 2 (layer norms, gains and biases):
#    bit for bit, and the loss of the saved run with --qk-layernorm;
#  - MoE (E = 4, K = 2): a Llama-style model with TEGroupedMLP's names at TP 2 x PP 2 x
#    EP 2 (mp_rank_TT_PPP_EEE): bit for bit, the saved run's loss, also at
#    --data-parallel 2 --expert-parallel 2; SequentialMLP's names at TP 2 x EP 2 and the
#    legacy GroupedMLP at PP 2 x EP 2 bit for bit; GPT-2's layer with biases at TP 1 x
#    EP 4 (mp_rank_TT_EEE): bit for bit and the loss; the router's options (sigmoid, the
#    expert bias, a scaling factor, a z-loss) become the run's flags, router.expert_bias
#    the checkpoint's tensor bit for bit, and the import continues the saved run's loss;
#    the shared expert's gate (moe_shared_expert_gate, gate_weight [1, h] on every TP and
#    EP rank) at TP 2 x PP 2 x EP 2 (Llama's layer) and TP 1 x EP 4 (GPT-2's): bit for
#    bit, --moe-shared-expert-gate printed, the saved run's loss; files saying there is a
#    gate without its gate_weight refused naming the tensor;
#    each MoE argument the runtime cannot compute refused (sqrtsoftplus scores, an expert
#    bias with softmax, a scaling factor of 0,
#    moe_layer_freq, groups, padding to the capacity, a capacity factor of 0
#    or another drop policy, seq_aux_loss > 0, Sinkhorn,
#    a negative z-loss, expert TP, GroupedMLP at TP 2, a missing EP rank, EP ranks of a dense model,
#    a dense tensor differing between EP ranks);
#  - BF16 weights: the import is the bfloat16 values (exact) and --optimizer adam adds
#    zero moments;
#  - --use-rope-scaling becomes --rope-scaling llama3 (Megatron's fixed 1/4/8192);
#    Megatron's dropout rates become --hidden-dropout / --attention-dropout;
#  - refusals (exit 2, one line naming the argument or file, no output left): the erf
#    GeLU, norm_epsilon 0, -1 or True, add_qkv_bias without its tensors, num_experts without the experts' tensors,
#    a tensor the model lacks, a missing rank, mixed mp_rank_* shapes, torch_dist, the
#    legacy model, tensor_model_parallel_size disagreeing with the files, a truncated file, --stages not dividing,
#    an integer tensor, a view outside its storage, a short storage record, big-endian;
#  - a pickle that calls os.system: refused, and the command never ran.
. "$(dirname "$0")/lib.sh"
command -v python3 > /dev/null 2>&1 || { echo "skip: no python3"; exit 77; }
MG="$top_srcdir/python/pps_megatron.py"
FX="$top_srcdir/tests/runtime/megatron_ckpt.py"
DATA=$top_srcdir/README.md
build a "$top_srcdir/stdlib/1f1b.pps" -D P=2 -D m=2 || { fail "build 1f1b"; finish; }
build zv "$top_srcdir/stdlib/zb_v.pps" -D P=2 -D m=2 || { fail "build zb_v"; finish; }
loss1() { sed -n 's/.*"iterations":\[{"iteration":1,"loss":\([-0-9.e+]*\),.*/\1/p' "$1"; }

# same A B: every model tensor of PPS checkpoints A and B bit for bit, the same names
cat > "$WORK/same.py" <<'PY'
import os, sys
sys.path.insert(0, os.environ["PYDIR"])
import pps_hf
a, b = pps_hf.PPSCheckpoint(sys.argv[1]), pps_hf.PPSCheckpoint(sys.argv[2])
ka = {k for k in a.where if not k.startswith("optim.")}
kb = {k for k in b.where if not k.startswith("optim.")}
if ka != kb:
    sys.exit("tensor names differ: %s" % sorted(ka ^ kb))
for k in sorted(ka):
    n = a.where[k][0][2]
    if a.tensor(k, n).tobytes() != b.tensor(k, n).tobytes():
        sys.exit("tensor %s differs" % k)
for k in ("hidden", "heads", "query_groups", "vocab", "layers", "mlp", "norm", "position", "bias", "embeddings", "ffn_hidden",
          "kv_channels", "qk_layernorm", "qkv_bias", "norm_epsilon", "num_experts", "moe_topk", "moe_ffn_hidden", "moe_aux_loss_coeff", "moe_shared_ffn_hidden",
          "moe_shared_expert_gate"):
    if a.meta.get(k) != b.meta.get(k):
        sys.exit("metadata %s: %r vs %r" % (k, a.meta.get(k), b.meta.get(k)))
if len(sys.argv) > 3:   # the moments: all zero
    m = [k for k in b.where if k.startswith("optim.")]
    if len(m) != 2 * len(kb) or any(any(b.tensor(k, b.where[k][0][2])) for k in m):
        sys.exit("Adam moments: %d, not all zero" % len(m))
print("same %d tensors" % len(ka))
PY
same() { PYDIR="$top_srcdir/python" python3 "$WORK/same.py" "$@" > "$WORK/same.out" 2>&1; }

# case NAME PROG FLAGS -- FIXTURE ARGS: the runtime saves NAME's checkpoint (1 iteration
# at --lr 0); Megatron files from it; imported; compared; run with the printed flags
case_() {
  nm=$1; prog=$2; flags=$3; shift 3
  "$WORK/a" $flags --lr 0 --iterations 1 --data "$DATA" --save "$WORK/ck_$nm" --json > "$WORK/r_$nm" 2> "$WORK/err" ||
    { fail "$nm: save run: $(cat "$WORK/err")"; return; }
  python3 "$FX" write "$WORK/ck_$nm" "$WORK/meg_$nm" "$@" --expect "$WORK/want_$nm" 2> "$WORK/err" ||
    { fail "$nm: fixture: $(cat "$WORK/err")"; return; }
  python3 "$MG" import "$WORK/meg_$nm" "$WORK/imp_$nm" > "$WORK/imp_$nm.out" 2> "$WORK/err" ||
    { fail "$nm: import: $(cat "$WORK/err")"; return; }
  if same "$WORK/want_$nm" "$WORK/imp_$nm"; then pass "$nm: import bit for bit ($(cat "$WORK/same.out"))"
  else fail "$nm: import differs: $(cat "$WORK/same.out")"; fi
  iflags=$(sed -n 's/^  \(.*\) --load .*/\1/p' "$WORK/imp_$nm.out")
  "$WORK/$prog" $iflags --layers-per-stage $LPS --load "$WORK/imp_$nm" --lr 0 --iterations 1 --data "$DATA" --json \
    > "$WORK/l_$nm" 2> "$WORK/err" || { fail "$nm: run the import: $(cat "$WORK/err")"; return; }
  want=$(loss1 "$WORK/r_$nm"); got=$(loss1 "$WORK/l_$nm")
  if [ -n "$want" ] && [ "$want" = "$got" ]; then pass "$nm: loss $got as saved"
  else fail "$nm: loss $got, the saved run's $want"; fi
}

L="--model gpt --arch llama --hidden 16 --heads 4 --query-groups 2 --ffn-hidden 24 --seq 8 --vocab 256"
LPS=2
case_ llama a "$L --layers-per-stage 2" --tp 2 --pp 2 --names te
case_ llama_qkn a "$L --qk-layernorm --layers-per-stage 2" --tp 2 --pp 2 --names te
# Qwen2's layer: norm_epsilon 1e-6, add_qkv_bias without add_bias_linear, TP 2 x PP 2 (the
# bias 0 as initialised: the loss; then trained away from 0, so that a bias dropped or
# misplaced shows: bit for bit, and the import runs with the printed flags)
case_ qwen2 a "$L --norm-epsilon 1e-6 --add-qkv-bias --layers-per-stage 2" --tp 2 --pp 2 --names te
grep -q -- "--add-qkv-bias --norm-epsilon 1e-06 " "$WORK/imp_qwen2.out" && pass "qwen2: --add-qkv-bias --norm-epsilon 1e-06 printed" ||
  fail "qwen2: flags: $(cat "$WORK/imp_qwen2.out")"
"$WORK/a" $L --norm-epsilon 1e-6 --add-qkv-bias --layers-per-stage 2 --optimizer adam --lr 0.05 --iterations 2 --data "$DATA" \
  --save "$WORK/ck_q2" -q 2> "$WORK/err" || fail "qwen2 trained: save run: $(cat "$WORK/err")"
python3 "$FX" write "$WORK/ck_q2" "$WORK/meg_q2" --tp 2 --pp 2 --expect "$WORK/want_q2" 2> "$WORK/err" || fail "qwen2 trained: fixture: $(cat "$WORK/err")"
python3 "$MG" import "$WORK/meg_q2" "$WORK/imp_q2" > "$WORK/imp_q2.out" 2> "$WORK/err" || fail "qwen2 trained: import: $(cat "$WORK/err")"
PYDIR="$top_srcdir/python" python3 - "$WORK/want_q2" <<'PY' 2> "$WORK/err" || fail "qwen2 trained: the bias is 0: $(cat "$WORK/err")"
import os, sys
sys.path.insert(0, os.environ["PYDIR"])
import pps_hf
assert any(x != 0 for x in pps_hf.PPSCheckpoint(sys.argv[1]).tensor("layer0.qkv.b", 32))
PY
if same "$WORK/want_q2" "$WORK/imp_q2"; then pass "qwen2 trained: import bit for bit ($(cat "$WORK/same.out"))"
else fail "qwen2 trained: import differs: $(cat "$WORK/same.out")"; fi
iflags=$(sed -n 's/^  \(.*\) --load .*/\1/p' "$WORK/imp_q2.out")
expect_exit 0 "qwen2 trained: the import runs with the printed flags" "$WORK/a" $iflags --layers-per-stage 2 --load "$WORK/imp_q2" \
  --iterations 1 --data "$DATA"
case_ gpt2_qkn a "--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 8 --vocab 256 --qk-layernorm --layers-per-stage 2" \
  --tp 2 --pp 1 --names local
# (trained gains: the query's and the key's differ from 1 and from each other, so a swap shows)
"$WORK/a" $L --qk-layernorm --layers-per-stage 2 --optimizer adam --lr 0.05 --iterations 2 --data "$DATA" --save "$WORK/ck_qt" -q \
  2> "$WORK/err" || fail "qk trained: save run: $(cat "$WORK/err")"
python3 "$FX" write "$WORK/ck_qt" "$WORK/meg_qt" --tp 2 --pp 2 --expect "$WORK/want_qt" 2> "$WORK/err" || fail "qk trained: fixture: $(cat "$WORK/err")"
python3 "$MG" import "$WORK/meg_qt" "$WORK/imp_qt" > /dev/null 2> "$WORK/err" || fail "qk trained: import: $(cat "$WORK/err")"
PYDIR="$top_srcdir/python" python3 - "$WORK/want_qt" <<'PY' 2> "$WORK/err" || fail "qk trained: the gains are not distinct: $(cat "$WORK/err")"
import os, sys
sys.path.insert(0, os.environ["PYDIR"])
import pps_hf
c = pps_hf.PPSCheckpoint(sys.argv[1])
q, k = c.tensor("layer0.qnorm.g", 4), c.tensor("layer0.knorm.g", 4)
assert q != k and any(x != 1 for x in q) and any(x != 1 for x in k), (q, k)
PY
if same "$WORK/want_qt" "$WORK/imp_qt"; then pass "qk trained: import bit for bit ($(cat "$WORK/same.out"))"
else fail "qk trained: import differs: $(cat "$WORK/same.out")"; fi
# kv_channels apart from hidden / heads (the runtime's --kv-channels): Llama's layer D = 6
# at TP 2 x PP 2 (linear_proj [h, Hq D / T] per rank), GPT-2's D = 2 (biases) at TP 2
case_ llama_kv a "$L --kv-channels 6 --layers-per-stage 2" --tp 2 --pp 2 --names te
grep -q -- "--kv-channels 6 " "$WORK/imp_llama_kv.out" && pass "llama_kv: --kv-channels 6 printed" ||
  fail "llama_kv: flags: $(cat "$WORK/imp_llama_kv.out")"
case_ gpt2_kv a "--model gpt --hidden 16 --heads 4 --query-groups 2 --seq 8 --vocab 256 --kv-channels 2 --layers-per-stage 2" \
  --tp 2 --pp 1 --names local
case_ llama_vp a "$L --embeddings tied --rope-base 500 --layers-per-stage 2" --tp 1 --pp 1 --vp 2 --names local --buffer
G2="--model gpt --hidden 16 --heads 4 --query-groups 4 --ffn-hidden 32 --seq 8 --vocab 256"
case_ gpt2 a "$G2 --layers-per-stage 2" --tp 2 --pp 1 --names local
case_ gpt2_tied a "$G2 --embeddings tied --layers-per-stage 2" --tp 1 --pp 2 --vp 2 --names te --buffer
# under another schedule (ZB-V, 4 stages of 1 layer): the same loss
LPS=1
case_ llama_zv zv "$L --layers-per-stage 2" --tp 2 --pp 1

# MoE (Megatron-Core's MoE layer; runtime/moe.c): E = 4 experts, top 2, SwiGLU experts of
# width 12, the aux loss. TEGroupedMLP (linear_fc1.weightJ) at TP 2 x PP 2 x EP 2
# (mp_rank_TT_PPP_EEE), SequentialMLP (local_experts.J) at TP 2 x EP 2 and GPT-2's layer
# with biases at TP 1 x EP 4 (mp_rank_TT_EEE)
LPS=2
MOE="--num-experts 4 --moe-topk 2 --moe-ffn-hidden 12 --moe-aux-loss-coeff 0.01"
case_ moe a "$L --layers-per-stage 2 $MOE" --tp 2 --pp 2 --ep 2 --experts te
grep -q -- "--num-experts 4 --moe-topk 2 --moe-ffn-hidden 12 --moe-aux-loss-coeff 0.01 --load" "$WORK/imp_moe.out" &&
  pass "moe: the experts' flags printed" || fail "moe: flags: $(cat "$WORK/imp_moe.out")"
# under --expert-parallel 2 over 2 replicas: the import's loss is the saved run's made at
# --data-parallel 2 --expert-parallel 2 (the same seed: the same weights; X-independent)
"$WORK/a" $L --layers-per-stage 2 $MOE --data-parallel 2 --expert-parallel 2 --lr 0 --iterations 1 --data "$DATA" --json \
  > "$WORK/x2_ck" 2> "$WORK/err" || fail "moe: --expert-parallel 2 save run: $(cat "$WORK/err")"
"$WORK/a" $(sed -n 's/^  \(.*\) --load .*/\1/p' "$WORK/imp_moe.out") --layers-per-stage 2 --data-parallel 2 --expert-parallel 2 \
  --load "$WORK/imp_moe" --lr 0 --iterations 1 --data "$DATA" --json > "$WORK/x2_imp" 2> "$WORK/err" ||
  fail "moe: --expert-parallel 2 import run: $(cat "$WORK/err")"
want=$(loss1 "$WORK/x2_ck"); got=$(loss1 "$WORK/x2_imp")
[ -n "$want" ] && [ "$want" = "$got" ] && pass "moe: --expert-parallel 2 --data-parallel 2: loss $got as saved" ||
  fail "moe: --expert-parallel 2: loss $got, the saved run's $want"
python3 "$FX" write "$WORK/ck_moe" "$WORK/meg_moes" --tp 2 --pp 1 --ep 2 --experts seq --names local 2> "$WORK/err" ||
  fail "moe seq fixture: $(cat "$WORK/err")"
python3 "$MG" import "$WORK/meg_moes" "$WORK/imp_moes" > /dev/null 2> "$WORK/err" && same "$WORK/want_moe" "$WORK/imp_moes" &&
  pass "moe: SequentialMLP at TP 2 x EP 2 bit for bit" || fail "moe SequentialMLP: $(cat "$WORK/err" "$WORK/same.out")"
python3 "$FX" write "$WORK/ck_moe" "$WORK/meg_moeg" --pp 2 --ep 2 --experts legacy 2> "$WORK/err" ||
  fail "moe GroupedMLP fixture: $(cat "$WORK/err")"
python3 "$MG" import "$WORK/meg_moeg" "$WORK/imp_moeg" > /dev/null 2> "$WORK/err" && same "$WORK/want_moe" "$WORK/imp_moeg" &&
  pass "moe: the legacy GroupedMLP (weight1 / weight2) at PP 2 x EP 2 bit for bit" ||
  fail "moe GroupedMLP: $(cat "$WORK/err" "$WORK/same.out")"
# a shared expert (mlp.shared_experts.*, on every EP rank) at TP 2 x PP 2 x EP 2, TEGroupedMLP; GPT-2's layer
# (biases) at EP 4
case_ moe_shared a "$L --layers-per-stage 2 $MOE --moe-shared-ffn-hidden 8" --tp 2 --pp 2 --ep 2 --experts te
grep -q -- "--moe-ffn-hidden 12 --moe-shared-ffn-hidden 8 " "$WORK/imp_moe_shared.out" &&
  pass "moe_shared: the shared expert's flag printed" || fail "moe_shared: flags: $(cat "$WORK/imp_moe_shared.out")"
case_ gpt2_moe_shared a "$G2 --layers-per-stage 2 --num-experts 4 --moe-topk 2 --moe-ffn-hidden 16 --moe-shared-ffn-hidden 24" \
  --tp 1 --pp 1 --ep 4 --experts seq
case_ gpt2_moe a "$G2 --layers-per-stage 2 --num-experts 4 --moe-topk 2 --moe-ffn-hidden 16" --tp 1 --pp 1 --ep 4 --experts seq
# the shared expert's gate (mlp.shared_experts.gate_weight [1, h], replicated over TP and EP), both layers
case_ moe_sgate a "$L --layers-per-stage 2 $MOE --moe-shared-ffn-hidden 8 --moe-shared-expert-gate" --tp 2 --pp 2 --ep 2 --experts te
grep -q -- "--moe-shared-ffn-hidden 8 --moe-shared-expert-gate" "$WORK/imp_moe_sgate.out" &&
  pass "moe_sgate: the gate's flag printed" || fail "moe_sgate: flags: $(cat "$WORK/imp_moe_sgate.out")"
case_ gpt2_moe_sgate a "$G2 --layers-per-stage 2 --num-experts 4 --moe-topk 2 --moe-ffn-hidden 16 --moe-shared-ffn-hidden 24 --moe-shared-expert-gate" \
  --tp 1 --pp 1 --ep 4 --experts seq

# BF16: the import holds the bfloat16 values exactly (want_ has them); Adam's zero moments
python3 "$FX" write "$WORK/ck_llama" "$WORK/meg_bf" --tp 2 --pp 2 --dtype bf16 --expect "$WORK/want_bf" 2> "$WORK/err" ||
  fail "bf16 fixture: $(cat "$WORK/err")"
if python3 "$MG" import "$WORK/meg_bf" "$WORK/imp_bf" --optimizer adam > /dev/null 2> "$WORK/err" &&
   same "$WORK/want_bf" "$WORK/imp_bf" adam; then pass "bf16: exact values, zero Adam moments"
else fail "bf16: $(cat "$WORK/err" "$WORK/same.out")"; fi
if same "$WORK/ck_llama" "$WORK/imp_bf"; then
  fail "bf16: the import equals the F32 checkpoint (was bf16 written at all?)"
else pass "bf16: differs from the F32 source (rounded)"; fi

# Megatron's --use-rope-scaling: Llama 3's scaling with Megatron's fixed parameters
python3 "$FX" write "$WORK/ck_llama" "$WORK/meg_rs" --tp 1 --pp 1 --arg use_rope_scaling=True --arg rope_scaling_factor=16.0 \
  2> "$WORK/err" || fail "rope fixture: $(cat "$WORK/err")"
python3 "$MG" import "$WORK/meg_rs" "$WORK/imp_rs" --stages 2 > "$WORK/out" 2>&1
expect_grep -- "--rope-scaling llama3 --rope-scaling-factor 16 --rope-low-freq-factor 1 --rope-high-freq-factor 4 --rope-original-max-positions 8192 --layers-per-stage 2" \
  "--use-rope-scaling: llama3 16 / 1 / 4 / 8192 and --stages 2's layers per stage"
iflags=$(sed -n 's/^  \(.*\) --load .*/\1/p' "$WORK/out")
"$WORK/a" $iflags --load "$WORK/imp_rs" --lr 0 --iterations 1 --data "$DATA" > /dev/null 2> "$WORK/err" &&
  pass "the scaled import runs" || fail "scaled import run: $(cat "$WORK/err")"

# Megatron's dropout rates go on (its default 0.1 when the arguments have none)
python3 "$FX" write "$WORK/ck_llama" "$WORK/meg_do" --arg hidden_dropout=0.1 --arg attention_dropout=0.05 2> "$WORK/err" ||
  fail "dropout fixture: $(cat "$WORK/err")"
python3 "$MG" import "$WORK/meg_do" "$WORK/imp_do" > "$WORK/out" 2>&1
expect_grep -- "--hidden-dropout 0.1 --attention-dropout 0.05 --load" "the dropout rates become the run's flags"
iflags=$(sed -n 's/^  \(.*\) --load .*/\1/p' "$WORK/out")
"$WORK/a" $iflags --layers-per-stage 2 --load "$WORK/imp_do" --iterations 1 --data "$DATA" > /dev/null 2> "$WORK/err" &&
  pass "the import runs with its dropout" || fail "dropout import run: $(cat "$WORK/err")"

# refusals: exit 2, the argument named, no INDEX
refuse() {   # refuse NAME PATTERN FIXTURE-ARGS...: a fixture with FIXTURE-ARGS (of $SRC), refused
  nm=$1; pat=$2; shift 2
  rm -rf "$WORK/bad"
  python3 "$FX" write "${SRC:-$WORK/ck_llama}" "$WORK/bad" "$@" 2> "$WORK/err" || { fail "$nm fixture: $(cat "$WORK/err")"; return; }
  refused "$nm" "$pat" "$WORK/bad"
}
refused() {
  nm=$1; pat=$2; dir=$3; shift 3
  rm -f "$WORK/x"*
  python3 "$MG" import "$dir" "$WORK/x" "$@" > "$WORK/out" 2>&1
  st=$?
  if [ $st -eq 2 ] && grep -q -- "$pat" "$WORK/out" && [ "$(wc -l < "$WORK/out")" -eq 1 ] && ! ls "$WORK"/x* > /dev/null 2>&1
  then pass "$nm refused (exit 2): $(cut -c1-110 "$WORK/out")"
  else fail "$nm: exit $st, output: $(cat "$WORK/out")"; fi
}
refuse "erf GeLU" "bias_gelu_fusion" --arg swiglu=False --arg bias_gelu_fusion=False
refuse "norm_epsilon 0" "norm_epsilon = 0" --arg norm_epsilon=0
refuse "norm_epsilon -1" "norm_epsilon = -1" --arg norm_epsilon=-1
refuse "norm_epsilon True" "norm_epsilon = True" --arg norm_epsilon=True
refuse "a dropout rate of 1" "hidden_dropout = 1.0" --arg hidden_dropout=1.0
refuse "num_experts without experts' tensors" "no tensor 'decoder.layers.0.pre_mlp_layernorm.weight'" --arg num_experts=8
refuse "expert-parallel ranks of a dense model" "expert_model_parallel_size = 2: expert-parallel ranks without" --ep 2
SRC=$WORK/ck_moe
refuse "sqrtsoftplus scores" "moe_router_score_function = 'sqrtsoftplus'" --arg "moe_router_score_function='sqrtsoftplus'"
refuse "an expert bias with softmax scores" "moe_router_enable_expert_bias = True" --arg moe_router_enable_expert_bias=True
refuse "a top-K scaling factor of 0" "moe_router_topk_scaling_factor = 0" --arg moe_router_topk_scaling_factor=0
SRC=$WORK/ck_moe_shared   # (a shared expert without the gate: Megatron's files say it has one)
refuse "a shared expert gate without its gate_weight" "no tensor 'decoder.layers.0.mlp.shared_experts.gate_weight'" \
  --arg moe_shared_expert_gate=True
SRC=$WORK/ck_moe
refuse "dense layers between MoE layers" "moe_layer_freq = \[1, 0, 1, 0\]" --arg "moe_layer_freq=[1,0,1,0]"
refuse "group-limited routing" "moe_router_num_groups = 2" --arg moe_router_num_groups=2
refuse "padding to the capacity" "moe_pad_expert_input_to_capacity = True" --arg moe_expert_capacity_factor=1.0 \
  --arg moe_pad_expert_input_to_capacity=True
refuse "a capacity factor of 0" "moe_expert_capacity_factor = 0" --arg moe_expert_capacity_factor=0
refuse "another drop policy" "moe_token_drop_policy = 'random'" --arg moe_expert_capacity_factor=1.0 \
  --arg "moe_token_drop_policy='random'"
refuse "seq_aux_loss with a coefficient" "moe_router_load_balancing_type = 'seq_aux_loss'" --arg "moe_router_load_balancing_type='seq_aux_loss'"
refuse "Sinkhorn routing" "moe_router_load_balancing_type = 'sinkhorn'" --arg "moe_router_load_balancing_type='sinkhorn'" --arg moe_aux_loss_coeff=0.0
refuse "a negative z-loss" "moe_z_loss_coeff = -0.001" --arg moe_z_loss_coeff=-0.001
refuse "expert tensor parallel 1 under TP 2" "expert_tensor_parallel_size = 1" --tp 2 --arg expert_tensor_parallel_size=1
refuse "the legacy GroupedMLP at TP 2" "legacy GroupedMLP converts only at tensor_model_parallel_size 1" --tp 2 --experts legacy
refuse "dense tensors differing between EP ranks" "word_embeddings.weight' differs between expert-parallel ranks 0 and 1" \
  --ep 2 --corrupt epcopy
unset SRC
rm -rf "$WORK/bad"; python3 "$FX" write "$WORK/ck_moe" "$WORK/bad" --arg "moe_router_load_balancing_type='seq_aux_loss'" --arg moe_aux_loss_coeff=0.0 \
  2> /dev/null && python3 "$MG" import "$WORK/bad" "$WORK/imp_sq" > "$WORK/out" 2>&1 &&
  grep -q -- "--moe-ffn-hidden 12 --load" "$WORK/out" && pass "seq_aux_loss at coefficient 0: imported without the aux loss" ||
  fail "seq_aux_loss at 0: $(cat "$WORK/out")"
# a capacity factor and its drop policy become the run's flags and the checkpoint's fields
rm -rf "$WORK/bad"; python3 "$FX" write "$WORK/ck_moe" "$WORK/bad" --arg moe_expert_capacity_factor=0.5 \
  --arg "moe_token_drop_policy='position'" 2> /dev/null && python3 "$MG" import "$WORK/bad" "$WORK/imp_cf" > "$WORK/out" 2>&1 &&
  grep -q -- "--moe-expert-capacity-factor 0.5 --moe-token-drop-policy position" "$WORK/out" &&
  grep -q '"moe_expert_capacity_factor":"0.5"' "$WORK/imp_cf" && pass "a capacity factor: its flags printed and recorded" ||
  fail "capacity factor import: $(cat "$WORK/out")"
"$WORK/a" $(sed -n 's/^  \(.*\) --load .*/\1/p' "$WORK/out") --layers-per-stage 2 --load "$WORK/imp_cf" --lr 0 --iterations 1 \
  --data "$DATA" --json > "$WORK/cf.json" 2> "$WORK/err" && grep -q '"expert_capacity"' "$WORK/cf.json" &&
  pass "the import runs with its capacity factor" || fail "capacity factor run: $(cat "$WORK/err")"
# the token dispatcher: alltoall becomes --moe-token-dispatcher alltoall (and the import runs
# with it at --expert-parallel 2), flex prints none (the default's math), another is refused
rm -rf "$WORK/bad"; python3 "$FX" write "$WORK/ck_moe" "$WORK/bad" --arg "moe_token_dispatcher_type='alltoall'" 2> /dev/null &&
  python3 "$MG" import "$WORK/bad" "$WORK/imp_a2a" > "$WORK/out" 2>&1 && grep -q -- "--moe-token-dispatcher alltoall" "$WORK/out" &&
  pass "moe_token_dispatcher_type alltoall: --moe-token-dispatcher alltoall printed" || fail "alltoall import: $(cat "$WORK/out")"
"$WORK/a" $(sed -n 's/^  \(.*\) --load .*/\1/p' "$WORK/out") --layers-per-stage 2 --load "$WORK/imp_a2a" --lr 0 --iterations 1 \
  --data "$DATA" --data-parallel 2 --expert-parallel 2 -q > "$WORK/err" 2>&1 && pass "the import runs with the alltoall dispatcher at X = 2" ||
  fail "alltoall run: $(cat "$WORK/err")"
rm -rf "$WORK/bad"; python3 "$FX" write "$WORK/ck_moe" "$WORK/bad" --arg "moe_token_dispatcher_type='flex'" 2> /dev/null &&
  python3 "$MG" import "$WORK/bad" "$WORK/imp_flex" > "$WORK/out" 2>&1 && ! grep -q -- "--moe-token-dispatcher" "$WORK/out" &&
  pass "moe_token_dispatcher_type flex: no dispatcher flag" || fail "flex import: $(cat "$WORK/out")"
SRC=$WORK/ck_moe; refuse "an unknown dispatcher" "moe_token_dispatcher_type = 'magic'" --arg "moe_token_dispatcher_type='magic'"; SRC=
# the router's options (DeepSeek-V3 style: sigmoid scores, the expert bias, a scaling factor, a
# z-loss): the runtime saves after 2 iterations at --lr 0 (the bias moved, the weights not),
# Megatron files carry router.expert_bias; the import prints the flags, holds the bias bit
# for bit, and runs with the loss of the expected checkpoint (the bias loaded: not the
# saved run's first loss, made with the bias at 0)
R="--moe-router-score-function sigmoid --moe-router-topk-scaling-factor 2.5 --moe-z-loss-coeff 0.001"
R="$R --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.05"
"$WORK/a" $L --layers-per-stage 2 $MOE $R --lr 0 --iterations 2 --data "$DATA" --save "$WORK/ck_rt" --json > "$WORK/r_rt" \
  2> "$WORK/err" || fail "router: save run: $(cat "$WORK/err")"
python3 "$FX" write "$WORK/ck_rt" "$WORK/meg_rt" --tp 2 --pp 2 --ep 2 --experts te --expect "$WORK/want_rt" \
  --arg "moe_router_score_function='sigmoid'" --arg moe_router_enable_expert_bias=True --arg moe_router_bias_update_rate=0.05 \
  --arg moe_router_topk_scaling_factor=2.5 --arg moe_z_loss_coeff=0.001 2> "$WORK/err" || fail "router fixture: $(cat "$WORK/err")"
python3 "$MG" import "$WORK/meg_rt" "$WORK/imp_rt" > "$WORK/imp_rt.out" 2> "$WORK/err" || fail "router import: $(cat "$WORK/err")"
grep -q -- "--moe-aux-loss-coeff 0.01 $R --load" "$WORK/imp_rt.out" && pass "router: the options' flags printed" ||
  fail "router: flags: $(cat "$WORK/imp_rt.out")"
if same "$WORK/want_rt" "$WORK/imp_rt" && grep -q "expert_bias" "$WORK/meg_rt"/iter_*/mp_rank_00_000_000/model_optim_rng.pt &&
  python3 - "$top_srcdir/tests/runtime" "$WORK/imp_rt" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import ckpt_tensors
t = ckpt_tensors.load(sys.argv[2])
b = [x for k, (s, v) in t.items() if k.endswith(".moe.router.expert_bias") for x in v]
assert len(b) == 16 and any(b), b
PY
then pass "router: router.expert_bias imported bit for bit ($(cat "$WORK/same.out"))"; else fail "router: the bias: $(cat "$WORK/same.out")"; fi
"$WORK/a" $(sed -n 's/^  \(.*\) --load .*/\1/p' "$WORK/imp_rt.out") --layers-per-stage 2 --load "$WORK/imp_rt" --lr 0 \
  --iterations 1 --data "$DATA" --json > "$WORK/l_rt" 2> "$WORK/err" || fail "router: run the import: $(cat "$WORK/err")"
"$WORK/a" $L --layers-per-stage 2 $MOE $R --load "$WORK/want_rt" --lr 0 --iterations 1 --data "$DATA" --json > "$WORK/w_rt" \
  2> "$WORK/err" || fail "router: run the expected checkpoint: $(cat "$WORK/err")"
python3 - "$WORK/r_rt" "$WORK/l_rt" "$WORK/w_rt" <<'PY' && pass "router: the import runs with its bias" || fail "router: losses"
import json, sys
r, l, w = (json.load(open(f))["iterations"][0]["loss"] for f in sys.argv[1:4])
assert l == w and l != r, (r, l, w)
PY
rm -rf "$WORK/bad"; python3 "$FX" write "$WORK/ck_moe" "$WORK/bad" --tp 2 --pp 2 --ep 2 2> /dev/null
rm -rf "$WORK/bad/iter_0000100/mp_rank_01_001_001"
refused "a missing expert-parallel rank" "rank TP 1 PP 1 EP 1 is missing" "$WORK/bad"
refuse "interleaved RoPE" "rotary_interleaved" --arg rotary_interleaved=True
refuse "uneven stages" "decoder_first_pipeline_num_layers" --arg decoder_first_pipeline_num_layers=1
refuse "a TP size the files do not have" "tensor_model_parallel_size = 4" --arg tensor_model_parallel_size=4
refuse "a tensor the model lacks" "q_layernorm.weight' .* would be dropped" --extra decoder.layers.0.self_attention.q_layernorm.weight
refuse "Megatron's legacy model" "legacy model (language_model" --extra language_model.embedding.word_embeddings.weight
refuse "add_qkv_bias without the bias tensors" "no tensor 'decoder.layers.0.self_attention.linear_qkv.bias'" --arg add_qkv_bias=True
refuse "an integer tensor" "word_embeddings.weight' is an integer tensor" --corrupt int
refuse "a view outside its storage" "word_embeddings.weight': shape .* fall outside its storage" --corrupt outside
refuse "a storage record shorter than its size" "storage 0 holds .* bytes, .* needed" --corrupt short
refuse "big-endian tensors" "big-endian tensors" --corrupt bigendian
rm -rf "$WORK/bad"; python3 "$FX" write "$WORK/ck_llama" "$WORK/bad" --tp 2 --pp 2 2> /dev/null
rm -rf "$WORK/bad/iter_0000100/mp_rank_01_001"
refused "a missing rank" "rank TP 1 PP 1 is missing" "$WORK/bad"
mkdir -p "$WORK/bad/iter_0000100/mp_rank_01_001_001"
: > "$WORK/bad/iter_0000100/mp_rank_01_001_001/model_optim_rng.pt"
refused "mixed rank directories" "mixes mp_rank_TT, mp_rank_TT_NNN and mp_rank_TT_PPP_EEE" "$WORK/bad"
rm -rf "$WORK/bad"; python3 "$FX" write "$WORK/ck_llama" "$WORK/bad" 2> /dev/null
: > "$WORK/bad/iter_0000100/.metadata"
refused "torch_dist" "torch_dist checkpoint" "$WORK/bad"
rm -f "$WORK/bad/iter_0000100/.metadata"
refused "--iteration of no checkpoint" "iter_0000007: no such" "$WORK/bad" --iteration 7
refused "--stages 3 of 4 layers" "--stages 3 does not divide" "$WORK/bad" --stages 3
f=$WORK/bad/iter_0000100/mp_rank_00/model_optim_rng.pt
head -c 300 "$f" > "$WORK/trunc" && mv "$WORK/trunc" "$f"
refused "a truncated file" "not a torch.save file" "$WORK/bad"
rm -rf "$WORK/bad"; mkdir -p "$WORK/bad/release/mp_rank_00"
echo release > "$WORK/bad/latest_checkpointed_iteration.txt"
python3 "$FX" evil "$WORK/bad/release/mp_rank_00/model_optim_rng.pt" "$WORK/pwned" 2> "$WORK/err" || fail "evil fixture: $(cat "$WORK/err")"
refused "a pickle calling os.system" "no 'args'" "$WORK/bad"
[ -e "$WORK/pwned" ] && fail "the evil pickle ran its command" || pass "the evil pickle's command never ran"
python3 "$MG" import "$WORK/nowhere" "$WORK/x" > "$WORK/out" 2>&1; st=$?
[ $st -eq 2 ] && grep -q "no such checkpoint directory" "$WORK/out" && pass "no directory (exit 2)" || fail "no directory: $st $(cat "$WORK/out")"

# the real torch.save, when torch is there: the same import
py=${PPS_TORCH_PYTHON:-python3}
if "$py" -c 'import torch' > /dev/null 2>&1; then
  "$py" "$FX" write "$WORK/ck_llama" "$WORK/meg_t" --tp 2 --pp 2 --buffer --torch 2> "$WORK/err" || fail "torch fixture: $(cat "$WORK/err")"
  python3 "$MG" import "$WORK/meg_t" "$WORK/imp_t" > /dev/null 2> "$WORK/err" && same "$WORK/ck_llama" "$WORK/imp_t" &&
    pass "torch.save's own files import bit for bit" || fail "torch.save's files: $(cat "$WORK/err" "$WORK/same.out")"
else
  skip "torch.save's own files: no torch in $py (PPS_TORCH_PYTHON)"
fi
finish
