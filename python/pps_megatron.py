#!/usr/bin/env python3
"""pps_megatron.py: imports a Megatron-LM checkpoint of a GPT model (Megatron-Core's
GPTModel, the `torch` checkpoint format) into a PPS checkpoint of the runtime's gpt model,
in pure Python 3 (zipfile, pickle, array; no torch, numpy or Megatron needed).

  python3 python/pps_megatron.py import CKPT INDEX [--stages S] [--optimizer sgd|adam]
                                                   [--seq S] [--iteration N]
      CKPT: a Megatron --save directory (latest_checkpointed_iteration.txt picks the
      iteration; --iteration N another), or one iter_NNNNNNN / release directory. Every
      tensor-, pipeline- and expert-parallel rank's model_optim_rng.pt (mp_rank_TT,
      mp_rank_TT_PPP, mp_rank_TT_EEE or mp_rank_TT_PPP_EEE, as Megatron's
      get_checkpoint_name names them; virtual pipeline chunks model0, model1, ...) is merged into one PPS
      checkpoint INDEX (+ one shard beside it): step 0, data position 0, no optimizer
      state (--optimizer adam: Adam with zero moments), which `--load INDEX` starts under
      any schedule, P, --tensor-parallel or --data-parallel. Prints the runtime flags
      that make the same model and go on with its dropout rates (hidden_dropout,
      attention_dropout; Megatron's default 0.1 each) (--stages S: the
      --layers-per-stage of an S-stage schedule). --seq: the rows of a learned position table to keep (default the
      checkpoint's seq_length).

What converts. The layer is read from the checkpoint's `args` (Megatron's own
arguments, saved in every file): normalization LayerNorm or RMSNorm, norm_epsilon (or
the older layernorm_epsilon) -> --norm-epsilon (any number above 0);
position_embedding_type learned_absolute or rope (rotary_percent 1, not interleaved; --use-rope-scaling becomes --rope-scaling llama3 with Megatron's
fixed 1 / 4 / 8192, --rotary-seq-len-interpolation-factor becomes linear); swiglu or
GeLU (only the tanh GeLU: --openai-gelu, or the fused bias-GeLU that Megatron computes
with the tanh formula; the erf GeLU is refused: the runtime computes tanh's);
add_bias_linear (--bias on|off) and add_qkv_bias (with add_bias_linear off:
--add-qkv-bias, the QKV's bias alone, Qwen2's); tied or untied output layer;
kv_channels (the head size D; other than hidden_size / num_attention_heads: --kv-channels D,
recorded in the index); grouped-query attention; MoE layers
(num_experts -> --num-experts, moe_router_topk -> --moe-topk, moe_ffn_hidden_size ->
--moe-ffn-hidden, moe_aux_loss_coeff -> --moe-aux-loss-coeff with the load-balancing
type aux_loss; none: no loss; seq_aux_loss / global_aux_loss only at coefficient 0;
moe_expert_capacity_factor and moe_token_drop_policy -> --moe-expert-capacity-factor
and --moe-token-drop-policy, without moe_pad_expert_input_to_capacity;
moe_token_dispatcher_type alltoall (or alltoall_seq) -> --moe-token-dispatcher alltoall
(allgather and flex: the runtime's default, the same math); the router's
moe_router_score_function softmax or sigmoid, moe_router_pre_softmax,
moe_router_topk_scaling_factor, moe_z_loss_coeff, moe_router_enable_expert_bias and
moe_router_bias_update_rate -> the runtime's flags of those names, the router's
expert_bias buffer (when the files hold it; else 0) -> moe.router.expert_bias;
moe_shared_expert_intermediate_size -> --moe-shared-ffn-hidden, its SharedExpertMLP,
and moe_shared_expert_gate -> --moe-shared-expert-gate (its gate_weight [1, h]);
expert_model_parallel_size: the directories' EP, no flag, since PPS checkpoints are the
same at any --expert-parallel); qk_layernorm -> --qk-layernorm (q_layernorm and
k_layernorm [D], the layer's norm kind). init_method_std converts to nothing (the weights
are the checkpoint's; --load replaces any initialisation) and is never refused. Refused,
naming the argument: post-layer-norm
residuals, uneven pipeline stages, Megatron's legacy (non-Core) model,
the torch_dist format (convert it first with Megatron's own `--ckpt-convert-format
torch --ckpt-convert-save DIR`), and what the runtime's experts cannot compute:
moe_layer_freq other than every layer, a score function other than softmax or sigmoid,
group-limited routing, padding the
experts' inputs to the capacity, input
jitter, Sinkhorn, expert_tensor_parallel_size other than the tensor-parallel size and
the legacy GroupedMLP (experts.weight1 / weight2) under tensor parallelism.

The mapping (Megatron weights are [out, in], Y = X W^T; PPS's [in, out], Y = X W):

  embedding.word_embeddings.weight     [V/T, h] per TP rank    vocab.tok (rows joined)
  embedding.position_embeddings.weight [s, h]                  vocab.pos (learned)
  output_layer.weight                  [V/T, h]                vocab.out (untied)
  decoder.final_layernorm.weight/bias                          lnf.g / lnf.b
  decoder.layers.K. (local index K of a pipeline rank's chunk; global index from the
      chunk: virtual chunk v of pipeline rank p holds layers (v P + p) L/(P V) ...)
    self_attention.linear_qkv.layer_norm_weight/bias (or input_layernorm.*)   ln1.g/b
    self_attention.linear_qkv.weight/bias: per TP rank [G/T groups x (Hq/G query
        heads | 1 key head | 1 value head) x D, h]                 qkv.w [h, (Hq + 2G) D]
        columns [query heads | key heads | value heads], qkv.b
    self_attention.q_layernorm.weight/bias, k_layernorm.* [D] (qk_layernorm)   qnorm.g/b, knorm.g/b
    self_attention.linear_proj.weight [h, Hq D / T] (columns joined), bias    proj.w, b
    mlp.linear_fc1.layer_norm_weight/bias (or pre_mlp_layernorm.*)            ln2.g/b
    mlp.linear_fc1.weight/bias: per TP rank [f/T, h], SwiGLU [gate f/T | up f/T, h]
                                                                  fc.w [h, f] or [h, 2f]
                                                                  columns [gate | up]
    mlp.linear_fc2.weight [h, f/T] (columns joined), bias                     fc2.w, b
  a MoE layer (num_experts E; the norm pre_mlp_layernorm.* under both name sets):
    mlp.router.weight [E, h] (replicated)                                 moe.router.w [h, E]
    mlp.router.expert_bias [E] (replicated; F32)                  moe.router.expert_bias
    expert J of EP rank e (directory _EEE), global expert g = e E/EP + J, split over TP
    like the dense MLP: SequentialMLP mlp.experts.local_experts.J.linear_fc1/fc2.weight
    (and .bias) or TEGroupedMLP mlp.experts.linear_fc1/fc2.weightJ (biasJ)
                                          moe.e{g}.fc.w, fc.b, fc2.w, fc2.b
    or (TP 1) the legacy GroupedMLP mlp.experts.weight1 [h, E/EP fw] / weight2
    [E/EP F, h], the memory of [E/EP, h, fw] / [E/EP, F, h]: block J    fc.w / fc2.w
    (the dense tensors of every EP rank must be equal: copies)
    the shared expert (moe_shared_expert_intermediate_size S): mlp.shared_experts.
    linear_fc1/fc2.weight (and .bias), split over TP like the dense MLP, on every EP rank
                                          moe.shared.fc.w, fc.b, fc2.w, fc2.b
    and with moe_shared_expert_gate mlp.shared_experts.gate_weight [1, h], replicated over
    TP and EP                             moe.shared.gate.w [h]
  (*._extra_state: Transformer Engine's FP8 metadata, skipped; every other tensor a
  model of this config does not have is refused.)

Replicated tensors (norms, biases of row-parallel layers, positions) are taken from
TP rank 0 and must be equal on every rank. Tensors may be F32, BF16, F16 or F64, and
views into a shared storage (Megatron's contiguous parameter buffers).

Safety: the pickles are read by an unpickler that calls nothing. It rebuilds only
tensors, storages and plain containers; every other global a checkpoint names (Megatron's
classes, enums, numpy arrays, RNG states) becomes an inert placeholder, so an untrusted
file cannot run code (unlike torch.load without weights_only).

Never run on a file Megatron-LM itself wrote (no torch or Megatron where it was made):
tests/runtime/megatron_ckpt.py writes Megatron's layout from Megatron's source, and with
PPS_TORCH_PYTHON naming a Python with torch, the real torch.save (dense models).

Errors are one line on stderr ("pps_megatron: ...") and exit 2 (bad input or a model PPS
cannot run) or 1 (an output that cannot be written); outputs are written to temporary
files and renamed, so a failure leaves none.
"""
import array
import io
import math
import os
import pickle
import re
import struct
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pps_hf import ConvertError, EPS, _num, _write_pps, hcat_t, parse_cli, run_main  # noqa: E402

# ---- torch.save's zip format, read without torch ----

# Storage class name -> (array typecode of the element's bits, element bytes, kind)
STORAGE = {"FloatStorage": ("f", 4, "f32"), "BFloat16Storage": ("H", 2, "bf16"), "HalfStorage": ("H", 2, "f16"),
           "DoubleStorage": ("d", 8, "f64"), "LongStorage": ("q", 8, "int"), "IntStorage": ("i", 4, "int"),
           "ShortStorage": ("h", 2, "int"), "CharStorage": ("b", 1, "int"), "ByteStorage": ("B", 1, "int"),
           "BoolStorage": ("B", 1, "int")}


class Inert:
    """Whatever a pickle names that is not a tensor or a plain container: built from
    any arguments, holding them, doing nothing."""
    where = "?"

    def __init__(self, *args, **kw):
        self.args = args

    def __setstate__(self, state):
        self.state = state

    def __repr__(self):
        return "<%s>" % self.where


_inert = {}


def inert(module, name):
    key = module + "." + name
    if key not in _inert:
        _inert[key] = type(name, (Inert,), {"where": key})
    return _inert[key]


class StorageType:
    def __init__(self, name):
        self.name = name


class Storage:
    """One storage record of the archive (data/KEY), read when a tensor needs it."""

    def __init__(self, tf, stype, key, numel):
        if not isinstance(stype, StorageType) or stype.name not in STORAGE:
            raise ConvertError("%s: storage %r of an unsupported type %r" % (tf.path, key, getattr(stype, "name", stype)))
        self.tf, self.key, self.numel = tf, str(key), numel
        self.code, self.size, self.kind = STORAGE[stype.name]


class Tensor:
    def __init__(self, storage, offset, shape, stride):
        self.storage, self.offset, self.shape, self.stride = storage, offset, tuple(shape), tuple(stride)

    def numel(self):
        n = 1
        for x in self.shape:
            n *= x
        return n

    def values(self, what):
        """The tensor as array('f'), row-major (any strides; F32 exact, BF16/F16 widened
        exactly, F64 rounded)."""
        st, n = self.storage, self.numel()
        if st.kind == "int":
            raise ConvertError("%s: %s is an integer tensor, not weights" % (st.tf.path, what))
        if n == 0:
            return array.array("f")
        far = self.offset + sum((d - 1) * s for d, s in zip(self.shape, self.stride))
        if self.offset < 0 or far >= st.numel or any(s < 0 for s in self.stride):
            raise ConvertError("%s: %s: shape %s, stride %s at offset %d fall outside its storage of %d elements"
                               % (st.tf.path, what, list(self.shape), list(self.stride), self.offset, st.numel))
        raw = st.tf.record(st, what)
        contiguous, expect = True, 1
        for d, s in reversed(list(zip(self.shape, self.stride))):
            if d != 1 and s != expect:
                contiguous = False
            expect *= d
        if contiguous:
            body = raw[self.offset * st.size:(self.offset + n) * st.size]
        else:
            idx = [self.offset]
            for d, s in zip(self.shape, self.stride):
                idx = [i + k * s for i in idx for k in range(d)]
            body = b"".join(raw[i * st.size:(i + 1) * st.size] for i in idx)
        if st.kind == "bf16":      # the high half of an F32: two zero bytes below each value
            wide = bytearray(4 * n)
            wide[2::4], wide[3::4] = body[0::2], body[1::2]
            out = array.array("f", bytes(wide))
        elif st.kind == "f16":
            out = array.array("f", struct.unpack("<%de" % n, body))
        else:
            a = array.array(st.code)
            a.frombytes(body)
            if sys.byteorder == "big":
                a.byteswap()
            out = a if st.kind == "f32" else array.array("f", a)
        return out


def _rebuild_tensor(storage, offset, size, stride, *rest):
    return Tensor(storage, offset, size, stride)


def _rebuild_parameter(data, *rest):
    return data


def _rebuild_from_type(func, new_type, args, state):
    return func(*args) if func in (_rebuild_tensor, _rebuild_parameter) else Inert(func, args)


SAFE = {("collections", "OrderedDict"): __import__("collections").OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor, ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
        ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
        ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "slice"): slice,
        ("builtins", "complex"): complex, ("builtins", "bytearray"): bytearray,
        ("_codecs", "encode"): lambda s, enc="utf-8": s.encode(enc)}   # protocol 2's bytes


class TorchFile:
    """One torch.save file (the zip format, torch >= 1.6): its object, tensors lazy."""

    def __init__(self, path):
        self.path, self._cache = path, (None, None)
        try:
            self.zf = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as e:
            raise ConvertError("%s: not a torch.save file (zip format): %s" % (path, getattr(e, "strerror", None) or e))
        pk = [n for n in self.zf.namelist() if n == "data.pkl" or (n.endswith("/data.pkl") and n.count("/") == 1)]
        if len(pk) != 1:
            raise ConvertError("%s: not a torch.save file (no single data.pkl in the archive)" % path)
        self.prefix = pk[0][:-len("data.pkl")]
        if self.prefix + "byteorder" in self.zf.namelist() and self._read(self.prefix + "byteorder") != b"little":
            raise ConvertError("%s: big-endian tensors (byteorder record): not supported" % path)
        tf = self

        class Unpickler(pickle.Unpickler):
            def find_class(self, module, name):
                if (module, name) in SAFE:
                    return SAFE[(module, name)]
                if module == "torch" and name.endswith("Storage"):
                    return StorageType(name)
                return inert(module, name)

            def persistent_load(self, pid):
                if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] not in ("storage", b"storage"):
                    raise ConvertError("%s: unknown persistent record %r" % (tf.path, pid[:1] if isinstance(pid, tuple) else pid))
                return Storage(tf, pid[1], pid[2], pid[4])
        try:
            self.obj = Unpickler(io.BytesIO(self._read(pk[0]))).load()
        except ConvertError:
            raise
        except Exception as e:     # a malformed pickle: any of pickle's own errors
            raise ConvertError("%s: malformed pickle (%s: %s)" % (path, type(e).__name__, e))

    def _read(self, name):
        try:
            return self.zf.read(name)
        except (KeyError, OSError, zipfile.BadZipFile, EOFError) as e:
            raise ConvertError("%s: cannot read record %s: %s" % (self.path, name, e))

    def record(self, st, what):
        """The bytes of storage st (the last one kept: parameters are often views of one)."""
        if self._cache[0] != st.key:
            raw = self._read(self.prefix + "data/" + st.key)
            if len(raw) < st.numel * st.size:
                raise ConvertError("%s: %s: storage %s holds %d bytes, %d needed" % (self.path, what, st.key, len(raw),
                                                                                      st.numel * st.size))
            self._cache = (st.key, raw)
        return self._cache[1]


# ---- Megatron checkpoints ----

def _iteration_dir(ckpt, iteration):
    tracker = os.path.join(ckpt, "latest_checkpointed_iteration.txt")
    if iteration is not None:
        d = os.path.join(ckpt, "iter_%07d" % iteration)
    elif os.path.isfile(tracker):
        try:
            with open(tracker) as f:
                t = f.read().strip()
        except OSError as e:
            raise ConvertError("%s: %s" % (tracker, e.strerror or e))
        if t == "release":
            d = os.path.join(ckpt, "release")
        elif t.isdigit():
            d = os.path.join(ckpt, "iter_%07d" % int(t))
        else:
            raise ConvertError("%s: %r is neither an iteration nor 'release'" % (tracker, t))
    else:
        d = ckpt
    if not os.path.isdir(d):
        raise ConvertError("%s: no such checkpoint directory" % d)
    return d


def find_ranks(d):
    """[(tp, (suffix numbers...), path)] of the iteration directory d: mp_rank_TT,
    mp_rank_TT_NNN (a pipeline or an expert-parallel rank: the arguments decide) or
    mp_rank_TT_PPP_EEE."""
    if os.path.isfile(os.path.join(d, ".metadata")):
        raise ConvertError("%s: a torch_dist checkpoint (.metadata): convert it to the torch format first with Megatron "
                           "(--ckpt-convert-format torch --ckpt-convert-save DIR), then import DIR" % d)
    found = []
    for n in sorted(os.listdir(d)):
        m = re.fullmatch(r"mp_rank_(\d{2})((?:_\d{3}){0,2})", n)
        if not m:
            continue
        p = os.path.join(d, n, "model_optim_rng.pt")
        if not os.path.isfile(p):
            raise ConvertError("%s: no model_optim_rng.pt" % os.path.join(d, n))
        found.append((int(m.group(1)), tuple(int(x) for x in m.group(2).split("_")[1:]), p))
    if not found:
        raise ConvertError("%s: no mp_rank_* directories (is it a Megatron checkpoint in the torch format?)" % d)
    if len({len(sf) for _, sf, _ in found}) != 1:
        raise ConvertError("%s: mixes mp_rank_TT, mp_rank_TT_NNN and mp_rank_TT_PPP_EEE directories" % d)
    return found


def place_ranks(d, found, P, EP):
    """{(tp, pp, ep): path} from find_ranks's directories, with Megatron's get_checkpoint_name:
    _PPP when pipeline_model_parallel_size P > 1, then _EEE when expert_model_parallel_size
    EP > 1; and T."""
    n = len(found[0][1])
    want = (P > 1) + (EP > 1)
    if n != want:
        raise ConvertError("%s: %s directories, but the arguments say pipeline_model_parallel_size %d and "
                           "expert_model_parallel_size %d (%s)" % (d, ("mp_rank_TT", "mp_rank_TT_NNN", "mp_rank_TT_PPP_EEE")[n], P, EP,
                                                                   ("mp_rank_TT", "mp_rank_TT_NNN", "mp_rank_TT_PPP_EEE")[want]
                                                                   + " expected; expert-parallel directories go with "
                                                                   "expert_model_parallel_size > 1"))
    files = {}
    for t, sf, path in found:
        pp = sf[0] if P > 1 else 0
        ep = sf[-1] if EP > 1 else 0
        if pp >= P or ep >= EP:
            raise ConvertError("%s: a rank outside pipeline_model_parallel_size %d x expert_model_parallel_size %d"
                               % (os.path.dirname(path), P, EP))
        files[(t, pp, ep)] = path
    T = 1 + max(t for t, _, _ in files)
    for t in range(T):
        for p in range(P):
            for e in range(EP):
                if (t, p, e) not in files:
                    raise ConvertError("%s: rank TP %d PP %d%s is missing (%d x %d%s ranks expected from the others)"
                                       % (d, t, p, " EP %d" % e if EP > 1 else "", T, P, " x %d" % EP if EP > 1 else ""))
    return files, T


def _args_of(obj, path):
    a = obj.get("args") if isinstance(obj, dict) else None
    st = getattr(a, "state", None)
    if not isinstance(a, Inert) or a.where != "argparse.Namespace" or not isinstance(st, dict):
        raise ConvertError("%s: no 'args' (Megatron's arguments, an argparse.Namespace) in the checkpoint" % path)
    return dict(st)


class Config:
    """The PPS model of a checkpoint's Megatron arguments, or ConvertError naming the
    argument the runtime's gpt layer cannot run."""

    def __init__(self, a, path, T, P, EP=1):
        self.path, self.a = path, a

        def refuse(k, why):
            raise ConvertError("%s: argument %s = %r: %s" % (path, k, a.get(k), why))

        def pos_int(k, default=None):
            v = a.get(k, default)
            if v is None:
                v = default
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                refuse(k, "not a positive integer")
            return v
        self.refuse = refuse
        if a.get("tensor_model_parallel_size", T) != T:
            refuse("tensor_model_parallel_size", "the directory holds %d tensor-parallel ranks" % T)
        if a.get("pipeline_model_parallel_size", P) != P:
            refuse("pipeline_model_parallel_size", "the directory holds %d pipeline ranks" % P)
        self.L, self.h = pos_int("num_layers"), pos_int("hidden_size")
        self.hq = pos_int("num_attention_heads")
        self.G = pos_int("num_query_groups", self.hq) if a.get("group_query_attention") else self.hq
        self.f = pos_int("ffn_hidden_size", 4 * self.h)
        self.VP = pos_int("virtual_pipeline_model_parallel_size", 1)
        self.moe(a, refuse, pos_int, T, EP)
        self.qkn = bool(a.get("qk_layernorm"))   # q_layernorm / k_layernorm [D]: --qk-layernorm
        for k, why in (("apply_residual_connection_post_layernorm", "PPS's layer is pre-norm"),
                       ("rotary_interleaved", "PPS's RoPE rotates halves (Megatron's default), not pairs"),
                       ("multi_latent_attention", "PPS's attention is grouped-query attention"),
                       ("squared_relu", "PPS's MLP is GeLU or SwiGLU")):
            if a.get(k):
                refuse(k, why)
        for k in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers", "num_layers_per_virtual_pipeline_stage"):
            if a.get(k) is not None and not (k == "num_layers_per_virtual_pipeline_stage" and self.VP > 1):
                refuse(k, "uneven pipeline stages: only Megatron's uniform split converts")
        if self.L % (P * self.VP):
            refuse("num_layers", "not divisible by %d pipeline ranks x %d virtual chunks" % (P, self.VP))
        if a.get("kv_channels") is not None:   # (Megatron sets it: hidden_size / num_attention_heads by default)
            self.D = pos_int("kv_channels")
        elif self.h % self.hq:
            refuse("num_attention_heads", "does not divide hidden_size %d (and no kv_channels gives the head size)" % self.h)
        else:
            self.D = self.h // self.hq
        if self.hq % self.G:
            refuse("num_query_groups", "does not divide num_attention_heads %d" % self.hq)
        if self.G % T or self.f % T:
            refuse("tensor_model_parallel_size", "does not divide num_query_groups %d and ffn_hidden_size %d" % (self.G, self.f))
        norm = a.get("normalization", "LayerNorm")
        if norm not in ("LayerNorm", "RMSNorm"):
            refuse("normalization", "PPS has LayerNorm and RMSNorm")
        self.rms = norm == "RMSNorm"
        eps = a.get("norm_epsilon", a.get("layernorm_epsilon", EPS))   # (Megatron's default 1e-5 under both names)
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not (eps > 0 and math.isfinite(eps)):
            refuse("norm_epsilon" if "norm_epsilon" in a else "layernorm_epsilon", "not a number above 0 (--norm-epsilon)")
        self.eps = float(eps)
        self.swiglu = bool(a.get("swiglu"))
        if not self.swiglu and not (a.get("openai_gelu") or a.get("bias_gelu_fusion")):
            refuse("bias_gelu_fusion", "with neither --openai-gelu nor the fused bias-GeLU, Megatron's GeLU is the erf "
                   "form; the runtime's is the tanh form (Megatron's fused kernel's), so the model would change")
        bias = a.get("add_bias_linear", True)
        self.bias = bool(bias)
        self.qkvb = bool(a.get("add_qkv_bias", False)) and not self.bias   # --add-qkv-bias: QKV's bias alone
        pe = a.get("position_embedding_type", "learned_absolute")
        if pe not in ("learned_absolute", "rope"):
            refuse("position_embedding_type", "PPS has learned_absolute and rope")
        self.rope = pe == "rope"
        self.rope_scaling, self.rope_params, self.rope_base = None, {}, 10000.0
        if self.rope:
            rp = a.get("rotary_percent", 1.0)
            if rp != 1.0:
                refuse("rotary_percent", "PPS rotates the whole head (1.0)")
            if self.D % 2:
                refuse("num_attention_heads", "the head size %d is odd (RoPE rotates pairs)" % self.D)
            base = a.get("rotary_base", 10000)
            if not isinstance(base, (int, float)) or not (base > 1 and math.isfinite(base)):
                refuse("rotary_base", "not a number above 1")
            self.rope_base = float(base)
            interp = a.get("rotary_seq_len_interpolation_factor")
            if a.get("use_rope_scaling"):
                if interp:
                    refuse("rotary_seq_len_interpolation_factor", "together with --use-rope-scaling: not one of PPS's scalings")
                fac = a.get("rope_scaling_factor", 8.0)
                if not isinstance(fac, (int, float)) or not fac > 0:
                    refuse("rope_scaling_factor", "not a number above 0")
                # Megatron's llama3 scaling: its fixed low 1, high 4, original context 8192
                self.rope_scaling = "llama3"
                self.rope_params = {"factor": float(fac), "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8192}
            elif interp:
                if not isinstance(interp, (int, float)) or not interp > 0:
                    refuse("rotary_seq_len_interpolation_factor", "not a number above 0")
                self.rope_scaling, self.rope_params = "linear", {"factor": float(interp)}
        self.drop = {}
        for k in ("hidden_dropout", "attention_dropout"):   # Megatron's defaults 0.1: the run goes on with them
            x = a.get(k, 0.1)
            if not isinstance(x, (int, float)) or isinstance(x, bool) or not 0 <= x < 1:
                refuse(k, "not a rate from 0 to below 1")
            self.drop[k] = float(x)
        self.tied = not a.get("untie_embeddings_and_output_weights", False)
        self.seq = pos_int("seq_length", a.get("max_position_embeddings"))
        self.max_pos = pos_int("max_position_embeddings", self.seq)


    def moe(self, a, refuse, pos_int, T, EP):
        """Megatron-Core's MoE arguments -> the runtime's --num-experts E, --moe-topk K,
        --moe-ffn-hidden F, --moe-aux-loss-coeff a, --moe-expert-capacity-factor and
        --moe-token-drop-policy (self.E = 0: dense MLPs)."""
        self.E = a.get("num_experts") or 0
        self.cap, self.drop_policy, self.S = 0.0, "probs", 0
        if not self.E:
            if EP > 1:
                refuse("expert_model_parallel_size", "expert-parallel ranks without experts (num_experts)")
            return
        E = self.E = pos_int("num_experts")
        if E < 2:
            refuse("num_experts", "the runtime's --num-experts needs 2 or more")
        self.K = pos_int("moe_router_topk", 2)
        if self.K > E:
            refuse("moe_router_topk", "more than num_experts %d" % E)
        self.F = pos_int("moe_ffn_hidden_size", self.f)
        self.S = pos_int("moe_shared_expert_intermediate_size") if a.get("moe_shared_expert_intermediate_size") else 0
        if self.S % T:
            refuse("tensor_model_parallel_size", "does not divide moe_shared_expert_intermediate_size %d" % self.S)
        # the shared expert's gate (SharedExpertMLP's gate_weight; without a shared expert Megatron has none)
        self.SG = bool(a.get("moe_shared_expert_gate")) and self.S > 0
        self.EP = EP
        if E % EP:
            refuse("expert_model_parallel_size", "does not divide num_experts %d" % E)
        if self.F % T:
            refuse("tensor_model_parallel_size", "does not divide moe_ffn_hidden_size %d" % self.F)
        etp = a.get("expert_tensor_parallel_size")
        if etp is not None and etp != T:
            refuse("expert_tensor_parallel_size", "the runtime splits the experts over the tensor-parallel group "
                   "(expert tensor parallel = tensor_model_parallel_size %d)" % T)
        freq = a.get("moe_layer_freq", 1)
        if not (freq == 1 or (isinstance(freq, (list, tuple)) and list(freq) == [1] * self.L)):
            refuse("moe_layer_freq", "the runtime's --num-experts makes every layer's MLP experts")
        for k, ok, why in (
                ("moe_router_score_function", lambda x: x in (None, "softmax", "sigmoid"),
                 "the runtime's router scores are softmax or sigmoid"),
                ("moe_router_num_groups", lambda x: not x, "the runtime has no group-limited routing"),
                ("moe_router_group_topk", lambda x: not x, "the runtime has no group-limited routing"),
                ("moe_pad_expert_input_to_capacity", lambda x: not x, "the runtime drops past the capacity without "
                 "padding the experts' inputs to it"),
                ("moe_input_jitter_eps", lambda x: not x, "the runtime's router takes no input jitter")):
            if k in a and not ok(a[k]):
                refuse(k, why)
        coeff = a.get("moe_aux_loss_coeff", 0.0)
        if isinstance(coeff, (list, tuple)) and len(coeff) == 1:
            coeff = coeff[0]
        if not isinstance(coeff, (int, float)) or isinstance(coeff, bool) or not (coeff >= 0 and math.isfinite(coeff)):
            refuse("moe_aux_loss_coeff", "not a number from 0")
        lb = a.get("moe_router_load_balancing_type", "aux_loss")
        if isinstance(lb, (list, tuple)) and len(lb) == 1:
            lb = lb[0]
        if lb == "sinkhorn":
            refuse("moe_router_load_balancing_type", "Sinkhorn routing changes which experts train; the runtime's is top-K")
        if lb == "none":
            coeff = 0.0           # (no load-balancing loss, whatever the coefficient)
        elif lb != "aux_loss" and coeff > 0:
            refuse("moe_router_load_balancing_type", "with moe_aux_loss_coeff %r: the runtime's loss is the switch-style "
                   "aux_loss (over the microbatch's tokens); set the coefficient 0 or use aux_loss" % coeff)
        self.aux = float(coeff)
        # a capacity factor and its drop policy -> --moe-expert-capacity-factor, --moe-token-drop-policy
        cf = a.get("moe_expert_capacity_factor")
        if cf is not None and (not isinstance(cf, (int, float)) or isinstance(cf, bool) or not (0 < cf <= 1e6)):
            refuse("moe_expert_capacity_factor", "not a number above 0 (at most 1e6)")
        pol = a.get("moe_token_drop_policy", "probs")
        if cf is not None and pol not in ("probs", "position"):
            refuse("moe_token_drop_policy", "the runtime drops by probs or position")
        self.cap, self.drop_policy = (float(cf) if cf is not None else 0.0), pol
        # the router -> --moe-router-score-function, --moe-router-pre-softmax, --moe-router-topk-scaling-factor,
        # --moe-z-loss-coeff, --moe-router-enable-expert-bias, --moe-router-bias-update-rate (as cli.c checks them)
        def real(k, lo_open, hi):
            x = a.get(k)
            if x is None:
                return 0.0
            if not isinstance(x, (int, float)) or isinstance(x, bool) or not (x > 0 if lo_open else x >= 0) or x > hi:
                refuse(k, "not a number %s 0 (at most %g)" % ("above" if lo_open else "from", hi))
            return float(x)
        self.sigmoid = a.get("moe_router_score_function") == "sigmoid"
        self.pre = bool(a.get("moe_router_pre_softmax"))
        if self.pre and self.sigmoid:
            refuse("moe_router_pre_softmax", "pre-softmax is the softmax score function's")
        self.scale = real("moe_router_topk_scaling_factor", True, 1e6)
        self.z = real("moe_z_loss_coeff", False, math.inf)
        self.ebias = bool(a.get("moe_router_enable_expert_bias"))
        if self.ebias and not self.sigmoid:
            refuse("moe_router_enable_expert_bias", "the expert bias is the sigmoid score function's")
        self.rate = real("moe_router_bias_update_rate", True, 1.0) if self.ebias else 0.0
        # the token dispatcher -> --moe-token-dispatcher alltoall (alltoall, and older Megatron's alltoall_seq);
        # allgather and flex print nothing: the runtime's default computes the same (a dispatcher moves tokens,
        # it does not change the math), and without --expert-parallel every dispatcher is the same
        disp = a.get("moe_token_dispatcher_type", "allgather")
        if disp not in ("allgather", "alltoall", "alltoall_seq", "flex"):
            refuse("moe_token_dispatcher_type", "not allgather, alltoall, alltoall_seq or flex")
        self.a2a = disp in ("alltoall", "alltoall_seq")


def _state(tf):
    o = tf.obj
    if not isinstance(o, dict):
        raise ConvertError("%s: not a Megatron checkpoint (its object is %s, not a dict)" % (tf.path, type(o).__name__))
    return o


def _chunks(tf, VP):
    """The model state dicts of the file: [model] or [model0, model1, ...]."""
    o = _state(tf)
    keys = ["model"] if VP == 1 else ["model%d" % v for v in range(VP)]
    out = []
    for k in keys:
        sd = o.get(k)
        if not isinstance(sd, dict):
            raise ConvertError("%s: no '%s' state dict (virtual pipeline chunks: %d)" % (tf.path, k, VP))
        if any(str(n).startswith("language_model.") for n in sd):
            raise ConvertError("%s: a checkpoint of Megatron's legacy model (language_model.*): convert it to Megatron-Core's "
                               "GPTModel first (Megatron's tools/checkpoint/convert.py --saver core)" % tf.path)
        out.append(sd)
    return out


class Merger:
    """The tensors of every rank, looked up by (tp, pp, ep, chunk, name), read and checked.
    Expert-parallel ranks hold copies of every tensor but the experts': those are read
    from EP rank 0 and checked equal on the others (ep_copies)."""

    def __init__(self, files, T, P, VP, opened=None, EP=1):
        self.T, self.P, self.VP, self.EP = T, P, VP, EP
        self.sd = {}
        self.used = set()
        for (t, p, e), path in files.items():
            tf = opened if opened is not None and opened.path == path else TorchFile(path)
            for v, sd in enumerate(_chunks(tf, VP)):
                self.sd[(t, p, e, v)] = (tf, sd)

    def get(self, t, p, v, name, shape, e=0):
        tf, sd = self.sd[(t, p, e, v)]
        x = sd.get(name)
        if not isinstance(x, Tensor):
            raise ConvertError("%s: no tensor '%s'%s" % (tf.path, name, "" if self.VP == 1 else " in model%d" % v))
        if list(x.shape) != list(shape):
            raise ConvertError("%s: tensor '%s' has shape %s, this model's is %s" % (tf.path, name, list(x.shape), list(shape)))
        self.used.add((t, p, e, v, name))
        return x.values("tensor '%s'" % name)

    def replicated(self, p, v, name, shape, e=0):
        a = self.get(0, p, v, name, shape, e)
        for t in range(1, self.T):
            if self.get(t, p, v, name, shape, e) != a:
                raise ConvertError("%s: tensor '%s' differs between tensor-parallel ranks 0 and %d (it should be replicated)"
                                   % (self.sd[(t, p, e, v)][0].path, name, t))
        return a

    def ep_copies(self):
        """Every tensor read from EP rank 0 but the experts': the same on the other EP ranks."""
        for (t, p, e, v, name) in sorted(self.used):
            if e != 0 or ".mlp.experts." in name:
                continue
            tf, sd = self.sd[(t, p, 0, v)]
            for e2 in range(1, self.EP):
                if self.get(t, p, v, name, sd[name].shape, e2) != sd[name].values("tensor '%s'" % name):
                    raise ConvertError("%s: tensor '%s' differs between expert-parallel ranks 0 and %d (only the experts "
                                       "are split over them)" % (self.sd[(t, p, e2, v)][0].path, name, e2))

    def has(self, p, v, name):
        return name in self.sd[(0, p, 0, v)][1]

    def leftovers(self):
        for (t, p, e, v), (tf, sd) in sorted(self.sd.items(), key=lambda kv: kv[0]):
            for n, x in sd.items():
                if (t, p, e, v, n) in self.used or str(n).endswith("_extra_state"):
                    continue
                if isinstance(x, Tensor) or x is not None:
                    raise ConvertError("%s: tensor '%s'%s is not part of the model PPS converts (it would be dropped)"
                                       % (tf.path, n, "" if self.VP == 1 else " in model%d" % v))


def _rows_t(parts, cols):
    """[sum r_i, cols] row blocks (Megatron [out, in] pieces) -> PPS's [cols, sum r_i]."""
    return hcat_t(parts, cols)


def convert(ckpt, index, stages=None, optimizer="sgd", seq=None, iteration=None):
    if optimizer not in ("sgd", "adam"):
        raise ConvertError("--optimizer needs sgd or adam, got %r" % optimizer)
    d = _iteration_dir(ckpt, iteration)
    found = find_ranks(d)
    first = TorchFile(found[0][2])
    a = _args_of(_state(first), first.path)
    P, EP = (a.get(k) or 1 for k in ("pipeline_model_parallel_size", "expert_model_parallel_size"))
    for k, x in (("pipeline_model_parallel_size", P), ("expert_model_parallel_size", EP)):
        if not isinstance(x, int) or isinstance(x, bool) or x < 1:
            raise ConvertError("%s: argument %s = %r: not a positive integer" % (first.path, k, x))
    files, T = place_ranks(d, found, P, EP)
    c = Config(a, first.path, T, P, EP)
    if stages is not None and (stages < 1 or c.L % stages):
        raise ConvertError("--stages %d does not divide the model's %d layers (num_layers)" % (stages, c.L))
    if seq is not None and not c.rope and not (1 <= seq <= c.max_pos):
        raise ConvertError("--seq %d: the position table has %d rows (max_position_embeddings)" % (seq, c.max_pos))
    seq = seq or c.seq
    m = Merger(files, T, P, c.VP, first, EP)   # (rank 0's file read once)
    h, hq, G, D, f, L = c.h, c.hq, c.G, c.D, c.f, c.L
    te = m.has(0, 0, "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight")
    tf0, sd0 = m.sd[(0, 0, 0, 0)]
    wv = sd0.get("embedding.word_embeddings.weight")
    if not isinstance(wv, Tensor) or len(wv.shape) != 2:
        raise ConvertError("%s: no tensor 'embedding.word_embeddings.weight' on the first pipeline rank" % tf0.path)
    Vt = wv.shape[0]
    V = Vt * T

    def word(name, p, v):
        out = array.array("f")
        for t in range(T):
            out.extend(m.get(t, p, v, name, [Vt, h]))
        return out
    def experts(q, pre, p, v, colpar, fc1):
        """A MoE layer's router and experts: global expert g = EP rank e x E/EP + local J."""
        E, F, El = c.E, c.F, c.E // EP
        x = "mlp.experts."
        fw = (2 if c.swiglu else 1) * F
        out = [(q + "moe.router.w", [h * E], lambda: _rows_t([m.replicated(p, v, pre + "mlp.router.weight", [E, h])], h))]
        if c.ebias:   # the aux-loss-free balancing's bias (a buffer, F32 [E]); a checkpoint without it: 0
            b = pre + "mlp.router.expert_bias"
            out.append((q + "moe.router.expert_bias", [E], lambda b=b: m.replicated(p, v, b, [E]) if m.has(p, v, b)
                        else array.array("f", bytes(4 * E))))
        if m.has(p, v, pre + x + "weight1"):
            # the legacy GroupedMLP: weight1 [h, El fw] is the memory of [El, h, fw] (its forward's
            # view), expert J's block [h, fw] PPS's fc.w as it is ([gate | up] columns); weight2
            # [El F, h] = [El, F, h], block J fc2.w. Only at TP 1: its TP split is not checked here
            where = "%s: '%sweight1': the legacy GroupedMLP" % (m.sd[(0, p, 0, v)][0].path, pre + x)
            if T > 1:
                raise ConvertError(where + " converts only at tensor_model_parallel_size 1 (its split over %d ranks is "
                                   "not one the importer checks; SequentialMLP's and TEGroupedMLP's convert)" % T)
            if c.bias:
                raise ConvertError(where + " has no biases (Megatron refuses add_bias_linear with it)")
            for g in range(E):
                e, j = g // El, g % El
                out.append((q + "moe.e%d.fc.w" % g, [h * fw], lambda e=e, j=j:
                            m.get(0, p, v, pre + x + "weight1", [h, El * fw], e)[j * h * fw:(j + 1) * h * fw]))
                out.append((q + "moe.e%d.fc2.w" % g, [F * h], lambda e=e, j=j:
                            m.get(0, p, v, pre + x + "weight2", [El * F, h], e)[j * F * h:(j + 1) * F * h]))
            return out
        grouped = m.has(p, v, pre + x + "linear_fc1.weight0")      # TEGroupedMLP: linear_fc1.weightJ
        for g in range(E):
            e, j = g // El, g % El
            if grouped:
                n1, n2, w, b = x + "linear_fc1.", x + "linear_fc2.", "weight%d" % j, "bias%d" % j
            else:
                n1, n2 = x + "local_experts.%d.linear_fc1." % j, x + "local_experts.%d.linear_fc2." % j
                w, b = "weight", "bias"
            qe = q + "moe.e%d." % g
            out.append((qe + "fc.w", [h * fw], lambda n1=n1, w=w, e=e: fc1(w, name=n1, width=F, e=e)))
            if c.bias:
                out.append((qe + "fc.b", [fw], lambda n1=n1, b=b, e=e: fc1(b, name=n1, width=F, e=e)))
            out.append((qe + "fc2.w", [F * h], lambda n2=n2, w=w, e=e: colpar(n2 + w, h, F // T, e=e)))
            if c.bias:
                out.append((qe + "fc2.b", [h], lambda n2=n2, b=b, e=e: m.replicated(p, v, pre + n2 + b, [h], e)))
        if c.S:   # the shared expert (SharedExpertMLP): a dense MLP of width S, EP rank 0's (the others' copies)
            S, fws, n1, n2 = c.S, (2 if c.swiglu else 1) * c.S, "mlp.shared_experts.linear_fc1.", "mlp.shared_experts.linear_fc2."
            out.append((q + "moe.shared.fc.w", [h * fws], lambda: fc1("weight", name=n1, width=S)))
            if c.bias:
                out.append((q + "moe.shared.fc.b", [fws], lambda: fc1("bias", name=n1, width=S)))
            out.append((q + "moe.shared.fc2.w", [S * h], lambda: colpar(n2 + "weight", h, S // T)))
            if c.bias:
                out.append((q + "moe.shared.fc2.b", [h], lambda: m.replicated(p, v, pre + n2 + "bias", [h])))
            if c.SG:   # its gate: gate_weight [1, h], whole on every TP rank
                out.append((q + "moe.shared.gate.w", [h],
                            lambda: m.replicated(p, v, pre + "mlp.shared_experts.gate_weight", [1, h])))
        return out
    per = L // (P * c.VP)
    tensors = [("vocab.tok", [V * h], lambda: word("embedding.word_embeddings.weight", 0, 0))]
    if not c.rope:
        tensors.append(("vocab.pos", [seq * h], lambda: m.replicated(0, 0, "embedding.position_embeddings.weight",
                                                                     [c.max_pos, h])[:seq * h]))
    npg = hq // G                           # query heads per group
    for v in range(c.VP):
        for p in range(P):
            for k in range(per):
                i = (v * P + p) * per + k
                pre, q = "decoder.layers.%d." % k, "layer%d." % i
                n1 = pre + ("self_attention.linear_qkv.layer_norm_" if te else "input_layernorm.")
                n2 = pre + ("mlp.linear_fc1.layer_norm_" if te and not c.E else "pre_mlp_layernorm.")

                def qkv(pre=pre, p=p, v=v, what="weight"):
                    """Rows of every rank's [G/T x (npg + 2) x D, h] joined, regrouped into
                    [query heads | key heads | value heads] (each [x D, h] rows)."""
                    cols = h if what == "weight" else 1
                    rows = []
                    for t in range(T):
                        w = m.get(t, p, v, pre + "self_attention.linear_qkv." + what,
                                  [G // T * (npg + 2) * D, h] if what == "weight" else [G // T * (npg + 2) * D])
                        rows += [w[r * D * cols:(r + 1) * D * cols] for r in range(G // T * (npg + 2))]
                    qs = [rows[g * (npg + 2) + j] for g in range(G) for j in range(npg)]
                    ks = [rows[g * (npg + 2) + npg] for g in range(G)]
                    vs = [rows[g * (npg + 2) + npg + 1] for g in range(G)]
                    if what != "weight":
                        out = array.array("f")
                        for b in qs + ks + vs:
                            out.extend(b)
                        return out
                    return _rows_t(qs + ks + vs, h)

                def colpar(name, rows, cols_t, pre=pre, p=p, v=v, e=0):
                    """A row-parallel layer [rows, cols/T] per rank (columns joined) -> [cols, rows]."""
                    full = array.array("f", bytes(4 * rows * cols_t * T))
                    for t in range(T):
                        w = m.get(t, p, v, pre + name, [rows, cols_t], e)
                        for r in range(rows):
                            full[(r * T + t) * cols_t:(r * T + t + 1) * cols_t] = w[r * cols_t:(r + 1) * cols_t]
                    return _rows_t([full], cols_t * T)

                def fc1(what="weight", pre=pre, p=p, v=v, name="mlp.linear_fc1.", width=f, e=0):
                    """A column-parallel FC1 [fw/T, h] per rank (SwiGLU: [gate | up] of the rank) ->
                    [h, fw], columns [gate | up]; name + what: its tensor (TEGroupedMLP's weightJ)."""
                    cols = h if what.startswith("weight") else 1
                    ft = width // T
                    parts = ([], [])
                    for t in range(T):
                        w = m.get(t, p, v, pre + name + what,
                                  [(2 if c.swiglu else 1) * ft] + ([h] if cols == h else []), e)
                        parts[0].append(w[:ft * cols])
                        if c.swiglu:
                            parts[1].append(w[ft * cols:])
                    blocks = parts[0] + parts[1]
                    if cols == 1:
                        out = array.array("f")
                        for b in blocks:
                            out.extend(b)
                        return out
                    return _rows_t(blocks, h)
                nf = (2 if c.swiglu else 1) * f
                tensors += [(q + "ln1.g", [h], lambda n1=n1, p=p, v=v: m.replicated(p, v, n1 + "weight", [h]))]
                if not c.rms:
                    tensors += [(q + "ln1.b", [h], lambda n1=n1, p=p, v=v: m.replicated(p, v, n1 + "bias", [h]))]
                tensors += [(q + "qkv.w", [h * (hq + 2 * G) * D], qkv)]
                if c.bias or c.qkvb:
                    tensors += [(q + "qkv.b", [(hq + 2 * G) * D], lambda qkv=qkv: qkv(what="bias"))]
                for pk, mk in (("qnorm", "q_layernorm"), ("knorm", "k_layernorm")) if c.qkn else ():
                    nm = pre + "self_attention." + mk + "."   # (its norm kind: the layer's, --normalization)
                    tensors += [(q + pk + ".g", [D], lambda nm=nm, p=p, v=v: m.replicated(p, v, nm + "weight", [D]))]
                    if not c.rms:
                        tensors += [(q + pk + ".b", [D], lambda nm=nm, p=p, v=v: m.replicated(p, v, nm + "bias", [D]))]
                tensors += [(q + "proj.w", [hq * D * h], lambda colpar=colpar: colpar("self_attention.linear_proj.weight", h,
                                                                                        hq * D // T))]
                if c.bias:
                    tensors += [(q + "proj.b", [h], lambda pre=pre, p=p, v=v:
                                 m.replicated(p, v, pre + "self_attention.linear_proj.bias", [h]))]
                tensors += [(q + "ln2.g", [h], lambda n2=n2, p=p, v=v: m.replicated(p, v, n2 + "weight", [h]))]
                if not c.rms:
                    tensors += [(q + "ln2.b", [h], lambda n2=n2, p=p, v=v: m.replicated(p, v, n2 + "bias", [h]))]
                if c.E:
                    tensors += experts(q, pre, p, v, colpar, fc1)
                    continue
                tensors += [(q + "fc.w", [h * nf], fc1)]
                if c.bias:
                    tensors += [(q + "fc.b", [nf], lambda fc1=fc1: fc1("bias"))]
                tensors += [(q + "fc2.w", [f * h], lambda colpar=colpar: colpar("mlp.linear_fc2.weight", h, f // T))]
                if c.bias:
                    tensors += [(q + "fc2.b", [h], lambda pre=pre, p=p, v=v:
                                 m.replicated(p, v, pre + "mlp.linear_fc2.bias", [h]))]
    last_p, last_v = P - 1, c.VP - 1
    tensors.append(("lnf.g", [h], lambda: m.replicated(last_p, last_v, "decoder.final_layernorm.weight", [h])))
    if not c.rms:
        tensors.append(("lnf.b", [h], lambda: m.replicated(last_p, last_v, "decoder.final_layernorm.bias", [h])))
    if not c.tied:
        tensors.append(("vocab.out", [V * h], lambda: word("output_layer.weight", last_p, last_v)))
    elif m.has(last_p, last_v, "output_layer.weight"):
        # tied under pipeline parallelism: the last stage's copy of the embedding; it must be the same
        def tied_copy():
            if word("output_layer.weight", last_p, last_v) != word("embedding.word_embeddings.weight", 0, 0):
                raise ConvertError("%s: tied embeddings, but the last stage's output_layer.weight differs from the "
                                   "first stage's embedding.word_embeddings.weight" % files[(0, last_p, 0)])
            return None
        tensors.append((None, None, tied_copy))
    out = [(k, s, fn) for k, s, fn in tensors if k is not None]
    checks = [fn for k, _, fn in tensors if k is None]

    # read every tensor once before writing (what a model of this config lacks must be refused)
    values = {}
    for k, s, fn in out:
        values[k] = fn()
        if len(values[k]) != s[0]:
            raise ConvertError("internal: %s has %d values, %d expected" % (k, len(values[k]), s[0]))
    for fn in checks:
        fn()
    m.ep_copies()
    m.leftovers()
    meta = {"hidden": str(h), "heads": str(hq), "query_groups": str(G), "vocab": str(V), "layers": str(L),
            "mlp": "swiglu" if c.swiglu else "gelu", "norm": "rmsnorm" if c.rms else "layernorm",
            "position": "rope" if c.rope else "learned", "bias": "on" if c.bias else "off",
            "embeddings": "tied" if c.tied else "untied", "ffn_hidden": str(f), "kv_channels": str(D)}
    if c.qkn:
        meta["qk_layernorm"] = "on"
    if c.qkvb:
        meta["qkv_bias"] = "on"
    meta["norm_epsilon"] = "%.17g" % c.eps
    if c.E:
        meta.update(num_experts=str(c.E), moe_topk=str(c.K), moe_ffn_hidden=str(c.F), moe_aux_loss_coeff="%.17g" % c.aux)
        if c.S:
            meta.update(moe_shared_ffn_hidden=str(c.S))
        if c.SG:
            meta["moe_shared_expert_gate"] = "1"
        if c.cap > 0:
            meta.update(moe_expert_capacity_factor="%.17g" % c.cap, moe_token_drop_policy=c.drop_policy)
        meta["moe_router_score_function"] = "sigmoid" if c.sigmoid else "softmax"
        if c.pre:
            meta["moe_router_pre_softmax"] = "1"
        if c.scale > 0:
            meta["moe_router_topk_scaling_factor"] = "%.17g" % c.scale
        if c.z > 0:
            meta["moe_z_loss_coeff"] = "%.17g" % c.z
        if c.ebias:
            meta.update(moe_router_enable_expert_bias="1", moe_router_bias_update_rate="%.17g" % (c.rate or 1e-3))
    meta.update((k, repr(x)) for k, x in c.drop.items() if x > 0)   # (the runtime refuses another rate)
    if not c.rope:
        meta["seq"] = str(seq)
    else:
        meta["rope_base"] = repr(c.rope_base)
        meta["rope_scaling"] = c.rope_scaling or "none"
        from pps_hf import ROPE_PARAMS
        for hk, field, _ in ROPE_PARAMS:
            if hk in c.rope_params:
                x = c.rope_params[hk]
                meta[field] = repr(x) if isinstance(x, float) else str(x)
    _write_pps(index, [(k, s, lambda k=k: values[k]) for k, s, _ in out], meta, optimizer)
    return flags(c, V, seq, stages)


def flags(c, V, seq, stages):
    """The libppsrt flags of the imported model."""
    from pps_hf import ROPE_PARAMS
    fl = ("--model gpt --mlp %s --norm %s --position %s --bias %s --hidden %d --heads %d --query-groups %d "
          "--ffn-hidden %d --vocab %d --embeddings %s --seq %d"
          % ("swiglu" if c.swiglu else "gelu", "rmsnorm" if c.rms else "layernorm", "rope" if c.rope else "learned",
             "on" if c.bias else "off", c.h, c.hq, c.G, c.f, V, "tied" if c.tied else "untied", seq))
    if c.D * c.hq != c.h:
        fl += " --kv-channels %d" % c.D
    if c.qkn:
        fl += " --qk-layernorm"
    if c.qkvb:
        fl += " --add-qkv-bias"
    if c.eps != EPS:
        fl += " --norm-epsilon " + _num(c.eps)
    if c.rope:
        fl += " --rope-base " + _num(c.rope_base)
        if c.rope_scaling:
            fl += " --rope-scaling " + c.rope_scaling
            fl += "".join(" %s %s" % (flag, _num(c.rope_params[k])) for k, _, flag in ROPE_PARAMS if k in c.rope_params)
    for k in ("hidden_dropout", "attention_dropout"):
        if c.drop[k] > 0:
            fl += " --%s %s" % (k.replace("_", "-"), _num(c.drop[k]))
    if c.E:   # (no --expert-parallel: the checkpoint is the same under any)
        fl += " --num-experts %d --moe-topk %d --moe-ffn-hidden %d" % (c.E, c.K, c.F)
        if c.S:
            fl += " --moe-shared-ffn-hidden %d" % c.S
        if c.SG:
            fl += " --moe-shared-expert-gate"
        if c.aux > 0:
            fl += " --moe-aux-loss-coeff " + _num(c.aux)
        if c.cap > 0:
            fl += " --moe-expert-capacity-factor %s --moe-token-drop-policy %s" % (_num(c.cap), c.drop_policy)
        if c.sigmoid:
            fl += " --moe-router-score-function sigmoid"
        if c.pre:
            fl += " --moe-router-pre-softmax"
        if c.scale > 0:
            fl += " --moe-router-topk-scaling-factor " + _num(c.scale)
        if c.z > 0:
            fl += " --moe-z-loss-coeff " + _num(c.z)
        if c.a2a:
            fl += " --moe-token-dispatcher alltoall"
        if c.ebias:
            fl += " --moe-router-enable-expert-bias"
            if c.rate > 0:
                fl += " --moe-router-bias-update-rate " + _num(c.rate)
    if stages:
        fl += " --layers-per-stage %d" % (c.L // stages)
    return fl


USAGE = """usage: pps_megatron.py import CKPT INDEX [--stages S] [--optimizer sgd|adam] [--seq S] [--iteration N]
  a Megatron-LM GPT checkpoint (Megatron-Core, torch format: a --save directory or one
  iteration's; dense or MoE, any TP / PP / VP / EP) -> a PPS checkpoint for --load
  (prints the runtime flags, --num-experts ... for MoE)"""


def main(argv):
    parsed = parse_cli(argv, ("--stages", "--optimizer", "--seq", "--iteration"), USAGE)
    if parsed is None:
        return 0
    args, opts = parsed
    if len(args) != 3 or args[0] != "import":
        raise ConvertError("expected: import CKPT INDEX\n" + USAGE)
    num = {}
    for k in ("stages", "seq", "iteration"):
        if k in opts:
            if not opts[k].isdigit():
                raise ConvertError("--%s needs a whole number, got '%s'" % (k, opts[k]))
            num[k] = int(opts[k])
    fl = convert(args[1], args[2], num.get("stages"), opts.get("optimizer", "sgd"), num.get("seq"), num.get("iteration"))
    print("pps_megatron: wrote %s; run it with\n  %s --load %s" % (args[2], fl, args[2]))
    return 0


if __name__ == "__main__":
    run_main(main, "pps_megatron")
