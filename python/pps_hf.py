#!/usr/bin/env python3
"""pps_hf.py: converts between PPS checkpoints of the gpt model with Llama's layer and
Hugging Face `LlamaForCausalLM` checkpoints, with Llama's layer and --add-qkv-bias and
`Qwen2ForCausalLM` ones, with Llama's layer and --qk-layernorm and `Qwen3ForCausalLM` ones
(and experts: `Qwen3MoeForCausalLM`), with Llama's layer and experts
(--num-experts) and `MixtralForCausalLM` ones, and with GPT-2's layer (the default) and
`GPT2LMHeadModel` ones, in pure Python 3 (json, struct, array; no numpy, torch or
safetensors package). GPT-2: see GPT2_NAMES below; import takes --seq S, the rows of
the position table to keep (default n_positions). Mixtral: see below the mapping.

  python3 python/pps_hf.py export INDEX OUTDIR [--dtype f32|bf16]
      A PPS checkpoint (the JSON index that --save wrote, and its safetensors shards
      beside it) -> OUTDIR/config.json and OUTDIR/model.safetensors, HF's names and
      [out, in] weight layout. Only Llama's layer converts (--arch llama: SwiGLU,
      RMS norms, RoPE, no biases); GeLU, layer norms, learned positions or biases are
      refused (exit 2), naming the index field. config.json's rope_scaling is the
      checkpoint's (--rope-scaling linear or llama3, else null). A checkpoint with
      --qk-layernorm exports as Qwen3ForCausalLM (model_type qwen3: Llama's tensors and
      self_attn.q_norm / k_norm [D] from qnorm.g / knorm.g; head_dim D, no sliding
      window), with experts as Qwen3MoeForCausalLM (see below the mapping; the router
      options it cannot express are refused, naming the field). A dense checkpoint with
      --add-qkv-bias exports as Qwen2ForCausalLM (model_type qwen2: Llama's tensors and
      self_attn.q_proj / k_proj / v_proj.bias from qkv.b's column blocks; no sliding
      window). rms_norm_eps (GPT-2: layer_norm_epsilon) is the checkpoint's norm_epsilon
      (--norm-epsilon; 1e-5 when it has none). --dtype bf16 rounds
      each F32 value to the nearest bfloat16 (ties to even).

  python3 python/pps_hf.py import HFDIR INDEX [--stages S] [--optimizer sgd|adam]
      A Hugging Face Llama directory (config.json and model.safetensors, or a sharded
      model.safetensors.index.json; F32, BF16 or F16 tensors) -> a PPS checkpoint: the
      index INDEX and one shard beside it, step 0, data position 0, SGD (no moments;
      --optimizer adam: Adam with zero moments, as the runtime continues a checkpoint
      with its own optimizer), which `--load INDEX` starts under any schedule and P with
      the same number of layers. Prints the runtime flags that make the same model
      (with --stages S, the --layers-per-stage of an S-stage schedule). rope_scaling (or
      newer transformers' rope_parameters) of rope_type linear or llama3 (Llama 3.1's
      and 3.2's) becomes the runtime's --rope-scaling (see ROPE_PARAMS), recorded in the
      checkpoint. rms_norm_eps becomes --norm-epsilon (printed unless 1e-5; absent:
      transformers' default, 1e-6 for Llama, Qwen2 and Qwen3, 1e-5 for Mixtral). A Qwen2
      (model_type qwen2) imports with its q/k/v biases as qkv.b and --add-qkv-bias. A
      Qwen3 (model_type qwen3) imports with q_norm / k_norm as qnorm.g / knorm.g and
      --qk-layernorm (absent head_dim: Qwen3Config's 128), a Qwen3-MoE (qwen3_moe) with
      its experts too (below). Refused (exit 2, the config field named): another
      rope_type (yarn, dynamic, longrope, ...), attention_bias or mlp_bias true (Qwen3's
      attention_bias biases o_proj too), hidden_act other than silu, an rms_norm_eps not
      above 0, an odd head_dim, a Qwen2's or Qwen3's use_sliding_window true or
      layer_types entry other than full_attention, a model_type other than llama, qwen2,
      qwen3, qwen3_moe, mixtral or gpt2. head_dim (default hidden_size /
      num_attention_heads) other than that becomes --kv-channels D (Qwen3's and Gemma's
      128 with num_attention_heads x 128 != hidden_size), recorded as kv_channels; export
      writes the checkpoint's kv_channels as head_dim (GPT-2 has none: refused).

The mapping (docs/models.md "Hugging Face Llama checkpoints"; PPS weights are [in, out]
row-major, Y = X W; HF's are [out, in], Y = X W^T):

  model.embed_tokens.weight [V, h]          vocab.tok
  lm_head.weight [V, h]                     vocab.out (absent when tied)
  model.norm.weight [h]                     lnf.g
  model.layers.K.input_layernorm.weight     layerK.ln1.g
  model.layers.K.post_attention_layernorm   layerK.ln2.g
  ...self_attn.q_proj/k_proj/v_proj         layerK.qkv.w [h, (Hq + 2 Hkv) D] columns
                                            [query heads | key heads | value heads]^T
  ...q_proj/k_proj/v_proj.bias (Qwen2)      layerK.qkv.b [(Hq + 2 Hkv) D], the same blocks
  ...self_attn.o_proj [h, Hq D]             layerK.proj.w^T
  ...mlp.gate_proj/up_proj [f, h]           layerK.fc.w [h, 2f] columns [gate | up]^T
  ...mlp.down_proj [h, f]                   layerK.fc2.w^T

Mixtral (model_type mixtral; the attention, norms and embeddings as Llama's; MixtralSparseMoeBlock's
router, softmax over all E, top K, renormalised, is the runtime's default router; see
mixtral_experts and MOE_REFUSED for what is noted and refused):

  ...block_sparse_moe.gate.weight [E, h]    layerK.moe.router.w [h, E] (transposed)
  ...block_sparse_moe.experts.J.w1/w3 [F, h] layerK.moe.eJ.fc.w [h, 2F] columns [gate w1 | up w3]^T
  ...block_sparse_moe.experts.J.w2 [h, F]   layerK.moe.eJ.fc2.w^T
  num_local_experts, num_experts_per_tok, intermediate_size
                                            --num-experts, --moe-topk, --moe-ffn-hidden (= --ffn-hidden)

Qwen3 (model_type qwen3; Llama's tensors, and the per-head RMS norms of q and k applied
before RoPE, --qk-layernorm) and Qwen3-MoE (qwen3_moe: the same attention, experts in
every layer; see qwen3_experts for the defaults, notes and refusals):

  ...self_attn.q_norm.weight / k_norm [D]   layerK.qnorm.g / layerK.knorm.g
  ...mlp.gate.weight [E, h]                 layerK.moe.router.w [h, E] (transposed)
  ...mlp.experts.J.gate_proj/up_proj [F, h] layerK.moe.eJ.fc.w [h, 2F] columns [gate | up]^T
  ...mlp.experts.J.down_proj [h, F]         layerK.moe.eJ.fc2.w^T
  num_experts, num_experts_per_tok, moe_intermediate_size
                                            --num-experts, --moe-topk, --moe-ffn-hidden
  intermediate_size                         --ffn-hidden (a dense MLP's; no layer has one)
  norm_topk_prob true / false               the default router / --moe-router-pre-softmax

PPS's RoPE is HF Llama's rotate-half layout (pairs (i, i + D/2) of a head, angle
t base^(-2i/D), scaled as HF's rope_type linear or llama3), so the query and key
columns are not permuted. As a module:
export_checkpoint(index, outdir, dtype), import_checkpoint(hfdir, index) -> the flags,
read_safetensors(path) and write_safetensors(path, tensors, metadata).

Errors are one line on stderr ("pps_hf: ...") and a non-zero exit (2: bad input or a
model PPS cannot convert; 1: a file that cannot be written); outputs are written to a
temporary file in the target directory and renamed, so a failure leaves none.
"""
import array
import json
import math
import os
import struct
import sys
import tempfile

EPS = 1e-5          # the runtime's default norm epsilon (--norm-epsilon; runtime/model.h PPSRT_NORM_EPS)
DTYPE_SIZE = {"F32": 4, "BF16": 2, "F16": 2}


class ConvertError(Exception):
    """Bad input or an unconvertible model: the message is the whole report."""
    code = 2


class WriteError(ConvertError):
    code = 1


# ---- safetensors ----

class SafeFile:
    """The header of one safetensors file; tensors read on demand as F32 arrays."""

    def __init__(self, path):
        self.path = path
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                head = f.read(8)
                if len(head) < 8:
                    raise ConvertError("%s: truncated (%d bytes): not a safetensors file" % (path, size))
                n = struct.unpack("<Q", head)[0]
                if n > size - 8 or n > (100 << 20):
                    raise ConvertError("%s: not a safetensors file (header length %d, file %d bytes)" % (path, n, size))
                text = f.read(n)
        except OSError as e:
            raise ConvertError("%s: %s" % (path, e.strerror or e))
        try:
            hd = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ConvertError("%s: malformed safetensors header: %s" % (path, e))
        if not isinstance(hd, dict):
            raise ConvertError("%s: malformed safetensors header: not a JSON object" % path)
        self.data0 = 8 + n
        self.metadata = hd.pop("__metadata__", None) or {}
        if not isinstance(self.metadata, dict):
            raise ConvertError("%s: malformed safetensors header: __metadata__ is not an object" % path)
        self.entries = {}
        dsize = size - self.data0
        for k, v in hd.items():
            ok = isinstance(v, dict) and isinstance(v.get("shape"), list) and isinstance(v.get("data_offsets"), list) \
                and len(v["data_offsets"]) == 2 and all(isinstance(x, int) and x >= 0 for x in v["shape"] + v["data_offsets"])
            if not ok:
                raise ConvertError("%s: tensor '%s': malformed entry (needs dtype, shape, data_offsets)" % (path, k))
            dt = v.get("dtype")
            if dt not in DTYPE_SIZE:
                raise ConvertError("%s: tensor '%s': dtype %r, expected F32, BF16 or F16" % (path, k, dt))
            numel = 1
            for x in v["shape"]:
                numel *= x
            a, b = v["data_offsets"]
            if b - a != numel * DTYPE_SIZE[dt]:
                raise ConvertError("%s: tensor '%s': data_offsets [%d, %d] do not hold its shape %s of %s"
                                   % (path, k, a, b, v["shape"], dt))
            if b > dsize:
                raise ConvertError("%s: tensor '%s': data_offsets [%d, %d] end past the file's %d data bytes (truncated?)"
                                   % (path, k, a, b, dsize))
            self.entries[k] = (dt, list(v["shape"]), a, b)

    def read(self, key):
        """The tensor `key` as array('f') (BF16 and F16 widened exactly)."""
        dt, shape, a, b = self.entries[key]
        try:
            with open(self.path, "rb") as f:
                f.seek(self.data0 + a)
                raw = f.read(b - a)
        except OSError as e:
            raise ConvertError("%s: %s" % (self.path, e.strerror or e))
        if len(raw) != b - a:
            raise ConvertError("%s: tensor '%s': file shorter than its data_offsets" % (self.path, key))
        if dt == "F32":
            out = array.array("f")
            out.frombytes(raw)
            if sys.byteorder == "big":
                out.byteswap()
        elif dt == "BF16":
            u = array.array("H")
            u.frombytes(raw)
            if sys.byteorder == "big":
                u.byteswap()
            bits = array.array("I", (x << 16 for x in u))
            out = array.array("f")
            out.frombytes(bits.tobytes())
        else:
            out = array.array("f", struct.unpack("<%de" % ((b - a) // 2), raw))
        return out


def read_safetensors(path):
    """{name: (shape, array('f'))} of one safetensors file."""
    sf = SafeFile(path)
    return {k: (e[1], sf.read(k)) for k, e in sf.entries.items()}


def bf16_bits(values):
    """array('H') of the bfloat16 nearest each F32 value (ties to even; NaN stays NaN)."""
    u = array.array("I")
    u.frombytes(array.array("f", values).tobytes())
    out = array.array("H", bytes(2 * len(u)))
    for i, x in enumerate(u):
        if (x & 0x7f800000) == 0x7f800000 and (x & 0x7fffff):
            out[i] = (x >> 16) | 0x40            # a quiet NaN
        else:
            out[i] = ((x + 0x7fff + ((x >> 16) & 1)) >> 16) & 0xffff
    return out


def _tmp_in(directory, prefix):
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + prefix + ".", suffix=".tmp", dir=directory)
    except OSError as e:
        raise WriteError("%s: cannot write there: %s" % (directory or ".", e.strerror or e))
    mask = os.umask(0o22)       # mkstemp makes 0600: give the file the mode open() would
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)
    return os.fdopen(fd, "wb"), tmp


def write_safetensors(path, tensors, metadata=None, dtype="F32"):
    """Writes tensors [(name, shape, producer)] (producer() -> array('f') of the shape's
    numel, called once, in order) to a temporary file beside `path`; returns its name
    (the caller renames it into place, or removes it). dtype F32 or BF16."""
    size = DTYPE_SIZE[dtype]
    hd, off = {}, 0
    if metadata:
        hd["__metadata__"] = metadata
    for name, shape, _ in tensors:
        numel = 1
        for x in shape:
            numel *= x
        hd[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + numel * size]}
        off += numel * size
    text = json.dumps(hd, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    f, tmp = _tmp_in(os.path.dirname(path) or ".", os.path.basename(path))
    try:
        with f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for name, shape, produce in tensors:
                a = produce()
                want = hd[name]["data_offsets"][1] - hd[name]["data_offsets"][0]
                if dtype == "BF16":
                    a = bf16_bits(a)
                elif not isinstance(a, array.array) or a.typecode != "f":
                    a = array.array("f", a)
                if len(a) * size != want:
                    raise ConvertError("tensor '%s': %d values, its shape %s holds %d" % (name, len(a), shape, want // size))
                if sys.byteorder == "big":
                    a = array.array(a.typecode, a)
                    a.byteswap()
                f.write(a.tobytes())
    except OSError as e:
        os.unlink(tmp)
        raise WriteError("%s: cannot write it: %s" % (path, e.strerror or e))
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _write_text(path, text):
    f, tmp = _tmp_in(os.path.dirname(path) or ".", os.path.basename(path))
    try:
        with f:
            f.write(text.encode())
    except OSError as e:
        os.unlink(tmp)
        raise WriteError("%s: cannot write it: %s" % (path, e.strerror or e))
    return tmp


def _commit(pairs):
    """Renames each (tmp, final) into place (after every output is complete)."""
    for tmp, final in pairs:
        try:
            os.replace(tmp, final)
        except OSError as e:
            for t, _ in pairs:
                if os.path.exists(t):
                    os.unlink(t)
            raise WriteError("%s: cannot write it: %s" % (final, e.strerror or e))


# ---- matrices (flat row-major array('f')) ----

def cols_t(a, rows, cols, c0, c1):
    """Columns [c0, c1) of the [rows, cols] matrix a, transposed: [c1 - c0, rows]."""
    out = array.array("f")
    for c in range(c0, c1):
        out.extend(a[c::cols])
    return out


def hcat_t(parts, rows):
    """The [rows, sum n_i] matrix whose column blocks are the transposes of parts, each
    [n_i, rows]: the reverse of cols_t."""
    cols = sum(len(p) // rows for p in parts)
    out = array.array("f", bytes(4 * rows * cols))
    c = 0
    for p in parts:
        for r in range(len(p) // rows):
            out[c::cols] = p[r * rows:(r + 1) * rows]
            c += 1
    return out


# ---- PPS checkpoints ----

LLAMA_LAYER = (("mlp", "swiglu", "--mlp swiglu"), ("norm", "rmsnorm", "--norm rmsnorm"),
               ("position", "rope", "--position rope"), ("bias", "off", "--bias off"))
# RoPE scaling: HF's rope_scaling key, the PPS checkpoint's metadata field, the runtime's
# flag; and the keys each rope_type takes (runtime/model_gpt.c rope_freq computes them).
ROPE_PARAMS = (("factor", "rope_scaling_factor", "--rope-scaling-factor"),
               ("low_freq_factor", "rope_low_freq_factor", "--rope-low-freq-factor"),
               ("high_freq_factor", "rope_high_freq_factor", "--rope-high-freq-factor"),
               ("original_max_position_embeddings", "rope_original_max_positions", "--rope-original-max-positions"))
ROPE_TAKES = {"linear": ("factor",), "llama3": tuple(k for k, _, _ in ROPE_PARAMS)}


def _num(x):
    """A number as the runtime's flags and HF's config read it back exactly."""
    return "%d" % x if x == int(x) and abs(x) < 1e15 else repr(float(x))


def rope_scaling_check(t, vals, where, refuse):
    """Checks the parameters `vals` ({HF key: value}) of rope_type `t` (linear, llama3):
    each a number above 0 (original_max_position_embeddings a whole one), low below high;
    refuse(where, why) otherwise. Returns vals with factors as floats."""
    out = {}
    for k in ROPE_TAKES[t]:
        v = vals.get(k)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        if k == "original_max_position_embeddings":
            ok = ok and v == int(v) and v <= 1000000000
        if not ok:
            refuse(where, "rope_type %s: %s is %s, not a %snumber above 0" % (t, k, json.dumps(v), "whole " if
                                                                            k.startswith("orig") else ""))
        out[k] = int(v) if k.startswith("orig") else float(v)
    if t == "llama3" and not out["low_freq_factor"] < out["high_freq_factor"]:
        refuse(where, "rope_type llama3: low_freq_factor %s is not below high_freq_factor %s" %
               (_num(out["low_freq_factor"]), _num(out["high_freq_factor"])))
    return out


MOE = "block_sparse_moe."   # a Mixtral layer's experts: model.layers.K.block_sparse_moe.gate / .experts.J.w1 w2 w3
# An MoE layer's HF names: the block's prefix, then each expert's gate, up and down projections
# (Mixtral: block_sparse_moe.experts.J.w1 / w3 / w2; Qwen3-MoE: mlp.experts.J.gate_proj / up_proj / down_proj)
MOE_NAMES = {"mixtral": (MOE, "w1", "w3", "w2"), "qwen3_moe": ("mlp.", "gate_proj", "up_proj", "down_proj")}
# The model_types that import with Llama's layer, and the name messages give them
MODEL_NAMES = {"llama": "Llama", "mixtral": "Mixtral", "qwen2": "Qwen2", "qwen3": "Qwen3", "qwen3_moe": "Qwen3-MoE"}
GPT2_DEFAULT = {"mlp": "gelu", "norm": "layernorm", "position": "learned", "bias": "on", "embeddings": "untied"}


def _load_json(path, what):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except OSError as e:
        raise ConvertError("%s: %s" % (path, e.strerror or e))
    except (UnicodeDecodeError, ValueError) as e:
        raise ConvertError("%s: malformed %s: %s" % (path, what, e))


class PPSCheckpoint:
    """A PPS checkpoint index and its shards: metadata, and tensors by model-layer key
    (vocabulary slices of several shards joined)."""

    def __init__(self, index):
        j = _load_json(index, "checkpoint index (JSON)")
        if not isinstance(j, dict) or not isinstance(j.get("__metadata__"), dict) or not isinstance(j.get("shards"), list):
            raise ConvertError("%s: not a PPS checkpoint index (needs __metadata__ and shards)" % index)
        self.path = index
        self.meta = j["__metadata__"]
        if self.meta.get("format") != "pps-ppsrt-index":
            raise ConvertError("%s: metadata field 'format' is %r, expected 'pps-ppsrt-index'" % (index, self.meta.get("format")))
        self.where = {}      # key -> [(SafeFile, offset in the full tensor, full numel)]
        d = os.path.dirname(index)
        for s in j["shards"]:
            if not isinstance(s, str) or not s or "/" in s:
                raise ConvertError("%s: field 'shards': %r is not a file name beside the index" % (index, s))
            sf = SafeFile(os.path.join(d, s))
            for k, (dt, shape, a, b) in sf.entries.items():
                if dt != "F32":
                    raise ConvertError("%s: tensor '%s': dtype %s, expected F32" % (sf.path, k, dt))
                numel = (b - a) // 4
                off, full = 0, numel
                sl = sf.metadata.get("slice." + k)
                if sl is not None:
                    try:
                        off, full = (int(x) for x in sl.split("/"))
                    except (ValueError, AttributeError):
                        raise ConvertError("%s: metadata field 'slice.%s' is %r: not OFFSET/FULL" % (sf.path, k, sl))
                    if off < 0 or off + numel > full:
                        raise ConvertError("%s: metadata field 'slice.%s' is %r: outside the tensor" % (sf.path, k, sl))
                self.where.setdefault(k, []).append((sf, off, full, numel))

    def int_field(self, k):
        v = self.meta.get(k)
        if not isinstance(v, str) or not v.isdigit() or int(v) < 1:
            raise ConvertError("%s: metadata field '%s' is %r: not a positive integer" % (self.path, k, v))
        return int(v)

    def tensor(self, key, numel):
        """The whole tensor `key` (numel values), from the shards that hold its pieces."""
        parts = self.where.get(key)
        if not parts:
            raise ConvertError("%s: no tensor '%s' in its shards" % (self.path, key))
        out = array.array("f", bytes(4 * numel))
        have = 0
        for sf, off, full, n in parts:
            if full != numel:
                raise ConvertError("%s: tensor '%s' holds %d values, the model's has %d" % (sf.path, key, full, numel))
            out[off:off + n] = sf.read(key)
            have += n
        if have != numel:
            raise ConvertError("%s: tensor '%s': its shards hold %d of its %d values" % (self.path, key, have, numel))
        return out


def export_checkpoint(index, outdir, dtype="f32"):
    """PPS checkpoint INDEX -> HF LlamaForCausalLM (with experts: MixtralForCausalLM;
    --add-qkv-bias: Qwen2ForCausalLM; --qk-layernorm: Qwen3ForCausalLM, with experts
    Qwen3MoeForCausalLM; GPT-2's layer: GPT2LMHeadModel) in OUTDIR. Returns the config dict."""
    st = {"f32": "F32", "bf16": "BF16"}.get(dtype)
    if st is None:
        raise ConvertError("--dtype needs f32 or bf16, got %r" % dtype)
    ck = PPSCheckpoint(index)
    m = ck.meta
    if m.get("model") != "gpt":
        raise ConvertError("%s: metadata field 'model' is %r: only the gpt model converts" % (index, m.get("model")))
    qkn = m.get("qk_layernorm", "off") == "on"   # --qk-layernorm: Qwen3 (Llama's layer + q_norm / k_norm; with experts Qwen3-MoE)
    if m.get("qk_layernorm", "off") not in ("on", "off"):
        raise ConvertError("%s: metadata field 'qk_layernorm' is %r, not on or off" % (index, m.get("qk_layernorm")))
    qkvb = m.get("qkv_bias", "off") == "on"   # --add-qkv-bias: Qwen2 (Llama's layer + q/k/v biases)
    if m.get("qkv_bias", "off") not in ("on", "off") or (qkvb and (qkn or "num_experts" in m)):
        raise ConvertError("%s: metadata field 'qkv_bias' is %r: only a dense Llama layer without --qk-layernorm "
                           "converts with --add-qkv-bias (Qwen2ForCausalLM)" % (index, m.get("qkv_bias")))
    if all(m.get(k, GPT2_DEFAULT[k]) == GPT2_DEFAULT[k] for k, _, _ in LLAMA_LAYER) and not qkn:
        return _export_gpt2(ck, outdir, st)
    for k, want, flag in LLAMA_LAYER:
        have = m.get(k, GPT2_DEFAULT[k])
        if have != want:
            raise ConvertError("%s: metadata field '%s' is %r: a Hugging Face Llama has %s (%s); only a checkpoint of "
                               "Llama's layer (--arch llama) or GPT-2's (the default) converts" % (index, k, have, want, flag))
    tied = m.get("embeddings", "untied")
    if tied not in ("tied", "untied"):
        raise ConvertError("%s: metadata field 'embeddings' is %r, not tied or untied" % (index, tied))
    tied = tied == "tied"
    h, hq, hkv, V, L, f = (ck.int_field(k) for k in ("hidden", "heads", "query_groups", "vocab", "layers", "ffn_hidden"))
    seq = ck.int_field("seq") if "seq" in m else 0
    D = _export_head_dim(index, ck, h, hq)
    if hq % hkv or D % 2:
        raise ConvertError("%s: hidden %d, heads %d, query_groups %d, head size %d: not an even head size (--kv-channels, "
                           "default hidden / heads) with heads a multiple of query_groups" % (index, h, hq, hkv, D))
    try:
        base = float(m.get("rope_base", "10000"))
    except ValueError:
        base = float("nan")
    if not (base > 1 and math.isfinite(base)):
        raise ConvertError("%s: metadata field 'rope_base' is %r: not a number above 1" % (index, m.get("rope_base")))
    scaling, max_pos = _export_rope_scaling(index, m), seq or 2048
    if scaling and scaling["rope_type"] == "llama3":   # the context the scaling is for: factor x the original
        max_pos = max(max_pos, int(scaling["factor"] * scaling["original_max_position_embeddings"]))
    moe = _export_moe(index, ck, "Qwen3-MoE" if qkn else "Mixtral") if "num_experts" in m else None
    E = moe["num_experts"] if moe else 0
    f_dense = f         # (a Qwen3-MoE's intermediate_size: the dense MLP it has in no layer here)
    if moe:
        f = moe["moe_ffn_hidden"]       # (the dense ffn_hidden is unused by a MoE layer)
    known = {"vocab.tok", "lnf.g"} | (set() if tied else {"vocab.out"})
    names = ("ln1.g", "ln2.g", "qkv.w", "proj.w") + (("moe.router.w",) + tuple("moe.e%d.%s" % (j, w) for j in range(E)
                                                                              for w in ("fc.w", "fc2.w"))
                                                    if E else ("fc.w", "fc2.w")) + (("qnorm.g", "knorm.g") if qkn else ()) + \
        (("qkv.b",) if qkvb else ())
    known |= {"layer%d.%s" % (i, n) for i in range(L) for n in names}
    extra = sorted(k for k in ck.where if k not in known and not k.startswith("optim."))
    if extra:
        raise ConvertError("%s: tensor '%s' is not a parameter of a gpt with Llama's layer and these sizes%s" %
                           (index, extra[0], " (vocab.out with --embeddings tied?)" if extra[0] == "vocab.out" else ""))

    def T(key, n):
        return lambda: ck.tensor(key, n)

    def block(key, rows, cols, c0, c1):
        return lambda: cols_t(ck.tensor(key, rows * cols), rows, cols, c0, c1)

    def part(key, n, c0, c1):   # elements c0..c1 of a vector of n
        return lambda: ck.tensor(key, n)[c0:c1]

    qkv = (hq + 2 * hkv) * D
    out = [("model.embed_tokens.weight", [V, h], T("vocab.tok", V * h))]
    for i in range(L):
        p, q = "model.layers.%d." % i, "layer%d." % i
        out += [(p + "input_layernorm.weight", [h], T(q + "ln1.g", h)),
                (p + "self_attn.q_proj.weight", [hq * D, h], block(q + "qkv.w", h, qkv, 0, hq * D)),
                (p + "self_attn.k_proj.weight", [hkv * D, h], block(q + "qkv.w", h, qkv, hq * D, (hq + hkv) * D)),
                (p + "self_attn.v_proj.weight", [hkv * D, h], block(q + "qkv.w", h, qkv, (hq + hkv) * D, qkv)),
                (p + "self_attn.o_proj.weight", [h, hq * D], block(q + "proj.w", hq * D, h, 0, h)),
                (p + "post_attention_layernorm.weight", [h], T(q + "ln2.g", h))]
        if qkvb:   # Qwen2's q/k/v biases: qkv.b's [query heads | key heads | value heads]
            out += [(p + "self_attn.q_proj.bias", [hq * D], part(q + "qkv.b", qkv, 0, hq * D)),
                    (p + "self_attn.k_proj.bias", [hkv * D], part(q + "qkv.b", qkv, hq * D, (hq + hkv) * D)),
                    (p + "self_attn.v_proj.bias", [hkv * D], part(q + "qkv.b", qkv, (hq + hkv) * D, qkv))]
        if qkn:   # Qwen3's per-head RMS norms of q and k, [D], before RoPE
            out += [(p + "self_attn.q_norm.weight", [D], T(q + "qnorm.g", D)),
                    (p + "self_attn.k_norm.weight", [D], T(q + "knorm.g", D))]
        if E:   # Mixtral (Qwen3-MoE): gate = the router transposed; expert J's w1 | w3 (gate_proj | up_proj) = FC1's
            # [gate | up] columns, w2 (down_proj) = FC2^T
            mpre, wg, wu, wd = MOE_NAMES["qwen3_moe" if qkn else "mixtral"]
            out.append((p + mpre + "gate.weight", [E, h], block(q + "moe.router.w", h, E, 0, E)))
            for j in range(E):
                r, e = p + mpre + "experts.%d." % j, q + "moe.e%d." % j
                out += [(r + wg + ".weight", [f, h], block(e + "fc.w", h, 2 * f, 0, f)),
                        (r + wd + ".weight", [h, f], block(e + "fc2.w", f, h, 0, h)),
                        (r + wu + ".weight", [f, h], block(e + "fc.w", h, 2 * f, f, 2 * f))]
        else:
            out += [(p + "mlp.gate_proj.weight", [f, h], block(q + "fc.w", h, 2 * f, 0, f)),
                    (p + "mlp.up_proj.weight", [f, h], block(q + "fc.w", h, 2 * f, f, 2 * f)),
                    (p + "mlp.down_proj.weight", [h, f], block(q + "fc2.w", f, h, 0, h))]
    out.append(("model.norm.weight", [h], T("lnf.g", h)))
    if not tied:
        out.append(("lm_head.weight", [V, h], T("vocab.out", V * h)))
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": h, "intermediate_size": f, "num_hidden_layers": L,
        "num_attention_heads": hq, "num_key_value_heads": hkv, "head_dim": D, "vocab_size": V,
        "max_position_embeddings": max_pos, "rms_norm_eps": _export_eps(index, m), "rope_theta": base,
        "rope_scaling": scaling,
        "tie_word_embeddings": tied, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "torch_dtype": "float32" if st == "F32" else "bfloat16",
    }
    if qkvb:   # Qwen2Config: Llama's fields less head_dim and the bias switches (its q/k/v biases always
        # there, o_proj's never); no sliding window
        for k in ("head_dim", "attention_bias", "mlp_bias"):
            del config[k]
        config.update({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "use_sliding_window": False,
                       "sliding_window": None, "max_window_layers": L, "attention_dropout": 0.0})
    if qkn:   # Qwen3Config: Llama's fields and head_dim; no sliding window
        del config["mlp_bias"]
        config.update({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "use_sliding_window": False,
                       "sliding_window": None, "attention_dropout": 0.0})
    if E and qkn:   # Qwen3MoeConfig: Qwen3's fields and the experts in every layer (decoder_sparse_step 1, no
        # mlp_only_layers); norm_topk_prob false is --moe-router-pre-softmax; no load-balancing loss
        config.update({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "intermediate_size": f_dense,
                       "moe_intermediate_size": f, "num_experts": E, "num_experts_per_tok": moe["moe_topk"],
                       "norm_topk_prob": not moe["pre_softmax"], "decoder_sparse_step": 1, "mlp_only_layers": [],
                       "output_router_logits": False, "router_aux_loss_coef": 0.0})
    elif E:   # MixtralConfig: no attention_bias / mlp_bias fields; no sliding window, jitter or load-balancing loss
        for k in ("attention_bias", "mlp_bias"):
            del config[k]
        config.update({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": E,
                       "num_experts_per_tok": moe["moe_topk"], "sliding_window": None, "router_jitter_noise": 0.0,
                       "output_router_logits": False, "router_aux_loss_coef": 0.0, "attention_dropout": 0.0})
    c = _write_hf(outdir, out, config, st)
    if moe and moe["moe_aux_loss_coeff"] > 0:
        sys.stderr.write("pps_hf: note: metadata field 'moe_aux_loss_coeff' is %s: not carried over (config.json's "
                         "router_aux_loss_coef 0, output_router_logits false): HF's load_balancing_loss_func pools the "
                         "shares over all layers and counts them per token, another loss than the runtime's sum over "
                         "layers of a E sum_e f_e P_e\n" % _num(moe["moe_aux_loss_coeff"]))
    if moe and "moe_z_loss_coeff" in ck.meta:
        sys.stderr.write("pps_hf: note: metadata field 'moe_z_loss_coeff' is %s: not carried over (a Mixtral has no "
                         "router z-loss; a training-only term, the forward is the same)\n" % ck.meta["moe_z_loss_coeff"])
    return c


# The metadata fields of a PPS MoE checkpoint that a Mixtral cannot express: each changes
# the forward (a routing other than the softmax over the top K renormalised, dropped
# slots, a shared expert). moe_z_loss_coeff and the load-balancing coefficient are
# training-only (not carried over); anything else "moe_*" unknown here is refused too.
MOE_REFUSED = {"moe_router_pre_softmax": "HF Mixtral renormalises the top K of the softmax over all experts "
                                         "(the runtime's default, without --moe-router-pre-softmax)",
               "moe_router_topk_scaling_factor": "HF Mixtral's routing weights are unscaled",
               "moe_router_enable_expert_bias": "HF Mixtral's router has no expert bias",
               "moe_router_bias_update_rate": "HF Mixtral's router has no expert bias",
               "moe_expert_capacity_factor": "HF Mixtral is dropless",
               "moe_token_drop_policy": "HF Mixtral is dropless",
               "moe_shared_ffn_hidden": "HF Mixtral has no shared expert"}


def _export_moe(index, ck, model="Mixtral"):
    """num_experts, moe_topk, moe_ffn_hidden (ints), moe_aux_loss_coeff (float) and
    pre_softmax (bool) of a PPS MoE checkpoint that a HF Mixtral (model "Mixtral") or
    Qwen3-MoE ("Qwen3-MoE": --moe-router-pre-softmax is its norm_topk_prob false)
    computes; ConvertError naming the field else."""
    m = ck.meta
    pre_ok = model == "Qwen3-MoE"
    out = {k: ck.int_field(k) for k in ("num_experts", "moe_topk", "moe_ffn_hidden")}
    if out["moe_topk"] > out["num_experts"]:
        raise ConvertError("%s: metadata field 'moe_topk' is %d, more than num_experts %d" %
                           (index, out["moe_topk"], out["num_experts"]))
    sf = m.get("moe_router_score_function", "softmax")
    if sf != "softmax":
        raise ConvertError("%s: metadata field 'moe_router_score_function' is %r: HF %s's router is the softmax "
                           "(--moe-router-score-function softmax)" % (index, sf, model))
    for k in sorted(m):
        if pre_ok and k == "moe_router_pre_softmax":
            continue
        if k in MOE_REFUSED or (k.startswith("moe_") and k not in ("moe_topk", "moe_ffn_hidden", "moe_aux_loss_coeff",
                                                                  "moe_router_score_function", "moe_z_loss_coeff")):
            why = MOE_REFUSED.get(k, "an expert option a Mixtral has no field for").replace("Mixtral", model)
            raise ConvertError("%s: metadata field '%s' is %r: %s; such a checkpoint does not convert to a %s" %
                               (index, k, m[k], why, model))
    out["pre_softmax"] = "moe_router_pre_softmax" in m
    try:
        out["moe_aux_loss_coeff"] = float(m.get("moe_aux_loss_coeff", "0"))
    except ValueError:
        raise ConvertError("%s: metadata field 'moe_aux_loss_coeff' is %r: not a number" % (index, m["moe_aux_loss_coeff"]))
    if any(k.endswith(".moe.router.expert_bias") or ".moe.shared." in k for k in ck.where):
        k = next(k for k in sorted(ck.where) if k.endswith(".moe.router.expert_bias") or ".moe.shared." in k)
        raise ConvertError("%s: tensor '%s': HF %s's layer has no such parameter" % (index, k, model))
    return out


def _export_rope_scaling(index, m):
    """config.json's rope_scaling of a PPS checkpoint's metadata (None: no scaling)."""
    t = m.get("rope_scaling", "none")
    if t == "none":
        return None
    if t not in ROPE_TAKES:
        raise ConvertError("%s: metadata field 'rope_scaling' is %r, expected none, linear or llama3" % (index, t))
    vals = {}
    for k, field, _ in ROPE_PARAMS:
        if k in ROPE_TAKES[t]:
            try:
                vals[k] = float(m[field])
            except KeyError:
                raise ConvertError("%s: rope_scaling %s without metadata field '%s'" % (index, t, field))
            except (TypeError, ValueError):
                vals[k] = m[field]

    def refuse(where, why):
        raise ConvertError("%s: metadata field '%s': %s" % (index, where, why))
    return dict({"rope_type": t}, **rope_scaling_check(t, vals, "rope_scaling", refuse))


def _export_eps(index, m):
    """The norms' epsilon of a PPS checkpoint's metadata (norm_epsilon; absent: the
    runtime's default, which a checkpoint saved before the field had)."""
    v = m.get("norm_epsilon")
    if v is None:
        return EPS
    try:
        x = float(v)
    except ValueError:
        x = float("nan")
    if not (x > 0 and math.isfinite(x)):
        raise ConvertError("%s: metadata field 'norm_epsilon' is %r: not a number above 0" % (index, v))
    return x


def _eps_flag(eps):
    """The --norm-epsilon flag of `eps` (none at the runtime's default)."""
    return "" if eps == EPS else " --norm-epsilon " + _num(eps)


def _write_hf(outdir, out, config, st):
    """OUTDIR/model.safetensors (the tensors `out`: (name, shape, thunk)) and config.json."""
    try:
        os.makedirs(outdir, exist_ok=True)
    except OSError as e:
        raise WriteError("%s: cannot make the directory: %s" % (outdir, e.strerror or e))
    if not os.path.isdir(outdir):
        raise WriteError("%s: not a directory" % outdir)
    st_path, cf_path = os.path.join(outdir, "model.safetensors"), os.path.join(outdir, "config.json")
    t1 = write_safetensors(st_path, out, {"format": "pt"}, st)
    try:
        t2 = _write_text(cf_path, json.dumps(config, indent=2) + "\n")
    except BaseException:
        os.unlink(t1)
        raise
    _commit([(t1, st_path), (t2, cf_path)])
    return config


# GPT-2's layer (the gpt model's default) is Hugging Face's GPT-2 (GPT2LMHeadModel): the
# same pre-LN block, tanh GeLU (gelu_new), learned positions, biases, eps (--norm-epsilon), and its
# Conv1D weights are [in, out] like PPS's, so no transposes: c_attn = qkv.w (columns
# q | k | v), c_proj = proj.w, c_fc = fc.w, mlp.c_proj = fc2.w; wte = vocab.tok, wpe =
# vocab.pos [seq, h]; lm_head = vocab.out, or tied (GPT-2's own are).
GPT2_NAMES = (("ln1.g", "ln_1.weight"), ("ln1.b", "ln_1.bias"), ("qkv.w", "attn.c_attn.weight"),
              ("qkv.b", "attn.c_attn.bias"), ("proj.w", "attn.c_proj.weight"), ("proj.b", "attn.c_proj.bias"),
              ("ln2.g", "ln_2.weight"), ("ln2.b", "ln_2.bias"), ("fc.w", "mlp.c_fc.weight"), ("fc.b", "mlp.c_fc.bias"),
              ("fc2.w", "mlp.c_proj.weight"), ("fc2.b", "mlp.c_proj.bias"))


def _gpt2_shapes(h, f):
    """PPS layer tensor -> its HF shape, for GPT-2 of hidden h, MLP width f."""
    return {"ln1.g": [h], "ln1.b": [h], "qkv.w": [h, 3 * h], "qkv.b": [3 * h], "proj.w": [h, h], "proj.b": [h],
            "ln2.g": [h], "ln2.b": [h], "fc.w": [h, f], "fc.b": [f], "fc2.w": [f, h], "fc2.b": [h]}


def _export_gpt2(ck, outdir, st):
    m, index = ck.meta, ck.path
    tied = m.get("embeddings", "untied")
    if tied not in ("tied", "untied"):
        raise ConvertError("%s: metadata field 'embeddings' is %r, not tied or untied" % (index, tied))
    tied = tied == "tied"
    h, hq, hkv, V, L, seq = (ck.int_field(k) for k in ("hidden", "heads", "query_groups", "vocab", "layers", "seq"))
    f = ck.int_field("ffn_hidden") if "ffn_hidden" in m else 4 * h
    if hkv != hq:
        raise ConvertError("%s: metadata field 'query_groups' is %d: Hugging Face's GPT-2 has as many key/value heads as "
                           "heads (%d)" % (index, hkv, hq))
    if h % hq:
        raise ConvertError("%s: hidden %d is not a multiple of heads %d" % (index, h, hq))
    if "kv_channels" in m and ck.int_field("kv_channels") != h // hq:
        raise ConvertError("%s: metadata field 'kv_channels' is %d: Hugging Face's GPT-2 has heads of n_embd / n_head = %d "
                           "(no head_dim)" % (index, ck.int_field("kv_channels"), h // hq))
    shapes = _gpt2_shapes(h, f)
    known = {"vocab.tok", "vocab.pos", "lnf.g", "lnf.b"} | (set() if tied else {"vocab.out"})
    known |= {"layer%d.%s" % (i, n) for i in range(L) for n, _ in GPT2_NAMES}
    extra = sorted(k for k in ck.where if k not in known and not k.startswith("optim."))
    if extra:
        raise ConvertError("%s: tensor '%s' is not a parameter of a gpt with GPT-2's layer and these sizes" % (index, extra[0]))

    def T(key, shape):
        n = 1
        for x in shape:
            n *= x
        return lambda: ck.tensor(key, n)

    out = [("transformer.wte.weight", [V, h], T("vocab.tok", [V, h])),
           ("transformer.wpe.weight", [seq, h], T("vocab.pos", [seq, h]))]
    for i in range(L):
        out += [("transformer.h.%d.%s" % (i, hn), shapes[pn], T("layer%d.%s" % (i, pn), shapes[pn])) for pn, hn in GPT2_NAMES]
    out += [("transformer.ln_f.weight", [h], T("lnf.g", [h])), ("transformer.ln_f.bias", [h], T("lnf.b", [h]))]
    if not tied:
        out.append(("lm_head.weight", [V, h], T("vocab.out", [V, h])))
    config = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": h, "n_head": hq, "n_layer": L,
        "n_positions": seq, "n_ctx": seq, "n_inner": None if f == 4 * h else f, "vocab_size": V,
        "activation_function": "gelu_new", "layer_norm_epsilon": _export_eps(index, m), "tie_word_embeddings": tied,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "torch_dtype": "float32" if st == "F32" else "bfloat16",
    }
    return _write_hf(outdir, out, config, st)


# ---- Hugging Face checkpoints ----

class HFCheckpoint:
    """config.json and the tensors of a HF directory (one file or a sharded index)."""

    def __init__(self, d):
        if not os.path.isdir(d):
            raise ConvertError("%s: not a directory (a Hugging Face model directory with config.json)" % d)
        self.dir = d
        self.config = _load_json(os.path.join(d, "config.json"), "config.json")
        if not isinstance(self.config, dict):
            raise ConvertError("%s: not a JSON object" % os.path.join(d, "config.json"))
        idx, one = os.path.join(d, "model.safetensors.index.json"), os.path.join(d, "model.safetensors")
        self.where = {}
        if os.path.exists(idx):
            j = _load_json(idx, "safetensors index (JSON)")
            wm = j.get("weight_map") if isinstance(j, dict) else None
            if not isinstance(wm, dict):
                raise ConvertError("%s: no weight_map object" % idx)
            files = {}
            for k, fn in wm.items():
                if not isinstance(fn, str) or not fn or "/" in fn:
                    raise ConvertError("%s: weight_map['%s'] is %r: not a file name beside the index" % (idx, k, fn))
                if fn not in files:
                    files[fn] = SafeFile(os.path.join(d, fn))
                if k not in files[fn].entries:
                    raise ConvertError("%s: weight_map names '%s' in %s, which does not hold it" % (idx, k, fn))
                self.where[k] = files[fn]
        elif os.path.exists(one):
            sf = SafeFile(one)
            self.where = {k: sf for k in sf.entries}
        else:
            raise ConvertError("%s: neither model.safetensors nor model.safetensors.index.json (PyTorch .bin files: "
                               "convert them to safetensors first)" % d)

    def get(self, key, shape):
        sf = self.where.get(key)
        if sf is None:
            raise ConvertError("%s: no tensor '%s'" % (self.dir, key))
        have = sf.entries[key][1]
        if have != list(shape):
            raise ConvertError("%s: tensor '%s' has shape %s, the config's model needs %s" % (sf.path, key, have, list(shape)))
        return sf.read(key)


def _cfg_int(cfg, path, k, default=None):
    v = cfg.get(k)
    if v is None:               # absent or null: transformers' LlamaConfig default
        v = default
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ConvertError("%s: field '%s' is %r: not a positive integer" % (path, k, v))
    return v


def _cfg_num(cfg, k, default, refuse):
    """Field k of a config (default when absent or null): a finite number from 0."""
    v = cfg.get(k)
    if v is None:
        v = default
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        refuse(k, "not a number from 0")
    return v


def mixtral_experts(cfg, path, refuse):
    """The experts of a HF Mixtral config (MixtralSparseMoeBlock): num_local_experts E
    -> --num-experts, num_experts_per_tok K -> --moe-topk, intermediate_size -> an
    expert's width (--moe-ffn-hidden). HF's router (softmax over all E logits, the top
    K, renormalised) is the runtime's default (softmax over the K largest logits): the
    same weights. Not refused, noted: router_jitter_noise > 0 (HF scales the router's
    input by noise in training only; the forward is the same) and the load-balancing
    loss (output_router_logits with router_aux_loss_coef > 0: HF's
    load_balancing_loss_func pools f and P over all layers' tokens and counts f per token
    (K x the runtime's share of slots), not the runtime's sum over layers of a E sum f_e
    P_e, so no --moe-aux-loss-coeff is printed and the runtime's default 0 applies).
    sliding_window: HF attends to the last W positions; PPS's attention is not windowed,
    the same for sequences of at most W tokens, so --seq is printed at most W (noted when
    W is below max_position_embeddings)."""
    E = _cfg_int(cfg, path, "num_local_experts", 8)
    K = _cfg_int(cfg, path, "num_experts_per_tok", 2)
    if not 2 <= E <= 1024:
        refuse("num_local_experts", "the runtime's --num-experts is 2 to 1024")
    if K > E:
        refuse("num_experts_per_tok", "more than num_local_experts %d (--moe-topk is 1 to --num-experts)" % E)
    notes = _aux_loss_note(cfg, refuse)
    w = cfg.get("sliding_window")
    if w is not None:
        if not isinstance(w, int) or isinstance(w, bool) or w < 1:
            refuse("sliding_window", "not null or a positive integer")
    if w is not None and w < _cfg_int(cfg, path, "max_position_embeddings", 4096 * 32):
        notes.append("field 'sliding_window' is %d: HF attends to the last %d positions, PPS's attention to all of them: "
                     "the same for --seq at most %d (printed so)" % (w, w, w))
    if _cfg_num(cfg, "router_jitter_noise", 0.0, refuse) > 0:
        notes.append("field 'router_jitter_noise' is %s: HF scales the router's input by uniform noise in training; PPS's "
                     "router has none (the forward, which has no noise, is the same)" % json.dumps(cfg["router_jitter_noise"]))
    return {"experts": E, "topk": K, "window": w, "notes": notes}


def _aux_loss_note(cfg, refuse):
    """[the note on the load-balancing loss] of a HF MoE config (Mixtral's and Qwen3-MoE's
    load_balancing_loss_func alike: not mapped, see mixtral_experts), or []."""
    notes = []
    lb = cfg.get("output_router_logits", False)
    if lb is None:
        lb = False
    if not isinstance(lb, bool):
        refuse("output_router_logits", "not true or false")
    coef = _cfg_num(cfg, "router_aux_loss_coef", 0.001, refuse)
    if lb and coef > 0:
        notes.append("field 'router_aux_loss_coef' is %s (output_router_logits true): not mapped to --moe-aux-loss-coeff. "
                     "HF's load_balancing_loss_func pools the routed shares and mean probabilities over all layers' "
                     "tokens (f counted per token: K times PPS's share of slots); the runtime sums a E sum_e f_e P_e "
                     "over the layers: another loss. The run has none unless you give --moe-aux-loss-coeff"
                     % json.dumps(cfg["router_aux_loss_coef"]))
    return notes


def qwen3_experts(cfg, path, refuse, layers):
    """The experts of a HF Qwen3-MoE config (Qwen3MoeSparseMoeBlock; transformers'
    Qwen3MoeConfig defaults for absent fields): num_experts E (128; newer transformers
    also write it num_local_experts) -> --num-experts, num_experts_per_tok K (8) ->
    --moe-topk, moe_intermediate_size (768) -> --moe-ffn-hidden. HF's router takes the
    softmax over all E logits and the top K; norm_topk_prob true renormalises them (the
    runtime's default router: the softmax over the K largest logits, the same weights),
    false (the default) keeps them as they are (--moe-router-pre-softmax: softmax over all
    E, top K, not renormalised). PPS makes every layer an MoE layer: decoder_sparse_step
    other than 1 and an mlp_only_layers entry naming one of the layers (HF gives those a
    dense MLP) are refused. The load-balancing loss is noted as Mixtral's; Qwen3-MoE has no
    shared expert (Qwen2-MoE's, model_type qwen2_moe, is refused as a model_type)."""
    ek = "num_experts" if "num_experts" in cfg or "num_local_experts" not in cfg else "num_local_experts"
    E = _cfg_int(cfg, path, ek, 128)
    K = _cfg_int(cfg, path, "num_experts_per_tok", 8)
    F = _cfg_int(cfg, path, "moe_intermediate_size", 768)
    if not 2 <= E <= 1024:
        refuse(ek, "the runtime's --num-experts is 2 to 1024")
    if K > E:
        refuse("num_experts_per_tok", "more than %s %d (--moe-topk is 1 to --num-experts)" % (ek, E))
    norm = cfg.get("norm_topk_prob", False)
    if norm is None:
        norm = False
    if not isinstance(norm, bool):
        refuse("norm_topk_prob", "not true or false")
    step = cfg.get("decoder_sparse_step", 1)
    if step is None:
        step = 1
    if step != 1 or isinstance(step, bool):
        refuse("decoder_sparse_step", "PPS makes every layer an MoE layer: only 1 (HF's layer i is sparse when "
               "(i + 1) %% decoder_sparse_step is 0)")
    dense = cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or any(not isinstance(i, int) or isinstance(i, bool) for i in dense):
        refuse("mlp_only_layers", "not a list of layer numbers")
    if any(0 <= i < layers for i in dense):
        refuse("mlp_only_layers", "layer %d has a dense MLP in HF; PPS makes every layer an MoE layer (only [] or null)"
               % next(i for i in dense if 0 <= i < layers))
    return {"experts": E, "topk": K, "moe_ffn": F, "pre_softmax": not norm, "notes": _aux_loss_note(cfg, refuse)}


def _export_head_dim(index, ck, h, hq):
    """The checkpoint's head size D: its kv_channels (--kv-channels), else hidden / heads
    (a checkpoint saved before the field: then heads must divide hidden)."""
    if "kv_channels" in ck.meta:
        return ck.int_field("kv_channels")
    if h % hq:
        raise ConvertError("%s: hidden %d is not a multiple of heads %d, and no kv_channels gives the head size" % (index, h, hq))
    return h // hq


def llama_sizes(cfg, path):
    """The PPS model of a HF Llama, Qwen2, Qwen3, Qwen3-MoE or Mixtral config
    (transformers' defaults of that model_type for absent fields), or ConvertError naming
    the field PPS's layer cannot run. A Mixtral's also has "experts", "topk", "window"
    (sliding_window or None) and "notes" (what is not carried over, not refused: see
    mixtral_experts); a Qwen3-MoE's "experts", "topk", "moe_ffn", "pre_softmax" and
    "notes" (qwen3_experts)."""
    def refuse(k, why):
        raise ConvertError("%s: field '%s' is %s: %s" % (path, k, json.dumps(cfg.get(k)), why))
    mt = cfg.get("model_type", "llama")
    if mt not in MODEL_NAMES:
        refuse("model_type", "only Llama (LlamaForCausalLM), Mixtral (MixtralForCausalLM), Qwen2 (Qwen2ForCausalLM), "
               "Qwen3 (Qwen3ForCausalLM), Qwen3-MoE (Qwen3MoeForCausalLM) and GPT-2 convert")
    mix, qwen2, q3moe = mt == "mixtral", mt == "qwen2", mt == "qwen3_moe"
    qwen3 = mt in ("qwen3", "qwen3_moe")
    h = _cfg_int(cfg, path, "hidden_size")
    hq = _cfg_int(cfg, path, "num_attention_heads")
    # absent fields: transformers' defaults (Mixtral 8 key/value heads, Qwen3 32, Qwen3-MoE 4; Llama's and Qwen2's None: heads)
    hkv = _cfg_int(cfg, path, "num_key_value_heads", 8 if mix else 4 if q3moe else 32 if qwen3 else hq)
    s = {"hidden": h, "heads": hq, "query_groups": hkv,
         "ffn_hidden": _cfg_int(cfg, path, "intermediate_size", 6144 if q3moe else 22016 if qwen3 else None),
         "layers": _cfg_int(cfg, path, "num_hidden_layers"), "vocab": _cfg_int(cfg, path, "vocab_size"),
         "max_seq": _cfg_int(cfg, path, "max_position_embeddings", 4096 * 32 if mix else 32768 if qwen2 or qwen3 else 2048),
         "qkv_bias": qwen2, "qk_norm": qwen3, "name": MODEL_NAMES[mt]}
    if hq % hkv:
        refuse("num_key_value_heads", "does not divide num_attention_heads %d" % hq)
    if mt == "qwen3" and "head_dim" not in cfg:   # Qwen3Config's default (Qwen3-MoE's: hidden_size / heads)
        s["head_dim"] = 128
    elif cfg.get("head_dim") is not None:   # (Qwen3, Gemma: num_attention_heads x head_dim need not be hidden_size)
        s["head_dim"] = _cfg_int(cfg, path, "head_dim")
        if s["head_dim"] % 2:
            refuse("head_dim", "odd (RoPE rotates pairs of a head's columns)")
    else:
        if h % hq:
            refuse("num_attention_heads", "does not divide hidden_size %d (and no head_dim gives the head size)" % h)
        if (h // hq) % 2:
            refuse("num_attention_heads", "the head size %d is odd (RoPE rotates pairs)" % (h // hq))
        s["head_dim"] = h // hq
    if cfg.get("hidden_act", "silu") != "silu":
        refuse("hidden_act", "PPS's SwiGLU MLP is silu(gate) * up")
    for k in ("attention_bias", "mlp_bias"):
        if cfg.get(k, False) is not False:
            refuse(k, "PPS's Llama layer has no biases (--bias off; a Qwen2's q/k/v biases: --add-qkv-bias)%s"
                   % ("; Qwen3's attention_bias also puts one on o_proj, which --add-qkv-bias has not"
                      if qwen3 and k == "attention_bias" else ""))
    if qwen2 or qwen3:   # Qwen2Config, Qwen3Config: sliding-window attention off (use_sliding_window false) is all PPS computes
        if cfg.get("use_sliding_window", False) is not False:
            refuse("use_sliding_window", "PPS's attention is not windowed (%s's default false)" % MODEL_NAMES[mt])
        lt = cfg.get("layer_types")
        if lt is not None and (not isinstance(lt, list) or any(t != "full_attention" for t in lt)):
            refuse("layer_types", "PPS's attention is not windowed: every entry must be \"full_attention\"")
    eps = cfg.get("rms_norm_eps", 1e-5 if mix else 1e-6)   # (transformers' defaults: Mixtral 1e-5, Llama and Qwen 1e-6)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not (eps > 0 and math.isfinite(eps)):
        refuse("rms_norm_eps", "not a number above 0 (the runtime's --norm-epsilon)")
    s["eps"] = float(eps)
    if mix:
        s.update(mixtral_experts(cfg, path, refuse))
    if q3moe:
        s.update(qwen3_experts(cfg, path, refuse, s["layers"]))
    rp = cfg.get("rope_parameters")        # newer transformers: rope_theta, rope_type and its keys here
    theta = cfg.get("rope_theta", 1e6 if mix else 10000.0)
    if rp is not None:
        if not isinstance(rp, dict):
            refuse("rope_parameters", "not an object")
        theta = rp.get("rope_theta", theta)
    s["rope_scaling"], s["rope_params"] = None, {}
    for where in ("rope_scaling", "rope_parameters"):
        rs = cfg.get(where)
        if rs is None:
            continue
        if not isinstance(rs, dict):
            refuse(where, "not an object")
        t = rs.get("rope_type", rs.get("type", "default"))      # ("type": older transformers)
        if t == "default":
            continue
        if t not in ROPE_TAKES:
            refuse(where, "rope_type %s: PPS's RoPE scales as rope_type linear or llama3 only (--rope-scaling)" % json.dumps(t))
        params = rope_scaling_check(t, rs, where, refuse)
        if s["rope_scaling"] and (t, params) != (s["rope_scaling"], s["rope_params"]):
            refuse(where, "not the scaling of rope_scaling")
        s["rope_scaling"], s["rope_params"] = t, params
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not (theta > 1 and math.isfinite(theta)):
        refuse("rope_theta", "not a number above 1")
    s["rope_base"] = float(theta)
    tied = cfg.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        refuse("tie_word_embeddings", "not true or false")
    s["tied"] = tied
    return s


def runtime_flags(s, stages=None):
    """The libppsrt flags that make the model of llama_sizes() (with --layers-per-stage
    for a schedule of `stages` stages); --seq at most max_position_embeddings."""
    f = ("--model gpt --arch llama --hidden %d --heads %d --query-groups %d --ffn-hidden %d --vocab %d --rope-base %s "
         "--embeddings %s --seq %d" % (s["hidden"], s["heads"], s["query_groups"], s["ffn_hidden"], s["vocab"],
                                       _num(s["rope_base"]), "tied" if s["tied"] else "untied",
                                       min(s["max_seq"], 2048, s.get("window") or 2048)))
    if s["head_dim"] * s["heads"] != s["hidden"]:
        f += " --kv-channels %d" % s["head_dim"]
    if s.get("qkv_bias"):
        f += " --add-qkv-bias"
    if s.get("qk_norm"):
        f += " --qk-layernorm"
    f += _eps_flag(s["eps"])
    if s.get("experts"):
        f += " --num-experts %d --moe-topk %d --moe-ffn-hidden %d" % (s["experts"], s["topk"], s.get("moe_ffn", s["ffn_hidden"]))
        if s.get("pre_softmax"):
            f += " --moe-router-pre-softmax"
    if s.get("rope_scaling"):
        f += " --rope-scaling " + s["rope_scaling"]
        f += "".join(" %s %s" % (flag, _num(s["rope_params"][k])) for k, _, flag in ROPE_PARAMS if k in s["rope_params"])
    if stages:
        f += " --layers-per-stage %d" % (s["layers"] // stages)
    return f


def import_checkpoint(hfdir, index, stages=None, optimizer="sgd", seq=None):
    """HF Llama (Qwen2, Qwen3, Qwen3-MoE, Mixtral, GPT-2) directory -> PPS checkpoint INDEX (+ one shard beside it). Returns the
    runtime flags (a string; with --layers-per-stage when `stages` is given). With
    optimizer "adam" the shard also holds Adam's moments, zero (a run at step 0 with
    zero moments is a fresh Adam; the runtime keeps a checkpoint's optimizer)."""
    if optimizer not in ("sgd", "adam"):
        raise ConvertError("--optimizer needs sgd or adam, got %r" % optimizer)
    hf = HFCheckpoint(hfdir)
    if hf.config.get("model_type") == "gpt2":
        return _import_gpt2(hf, index, stages, optimizer, seq)
    if seq is not None:
        raise ConvertError("--seq is for GPT-2 (its position table); a Llama's --seq is the run's")
    s = llama_sizes(hf.config, os.path.join(hfdir, "config.json"))
    if stages is not None and (stages < 1 or s["layers"] % stages):
        raise ConvertError("--stages %d does not divide the model's %d layers (num_hidden_layers)" % (stages, s["layers"]))
    h, hq, hkv, f, L, V = (s[k] for k in ("hidden", "heads", "query_groups", "ffn_hidden", "layers", "vocab"))
    D = s["head_dim"]
    E = s.get("experts", 0)
    fe = s.get("moe_ffn", f)          # an expert's width (Mixtral: intermediate_size)
    mpre, wg, wu, wd = MOE_NAMES.get(hf.config.get("model_type"), MOE_NAMES["mixtral"])
    get = hf.get

    tensors = [("vocab.tok", [V * h], lambda: get("model.embed_tokens.weight", [V, h]))]
    for i in range(L):
        p, q = "model.layers.%d." % i, "layer%d." % i

        def qkv(p=p):
            return hcat_t([get(p + "self_attn.q_proj.weight", [hq * D, h]), get(p + "self_attn.k_proj.weight", [hkv * D, h]),
                           get(p + "self_attn.v_proj.weight", [hkv * D, h])], h)

        def qkvb(p=p):   # Qwen2: the q, k and v biases one after the other, as qkv.w's columns
            out = array.array("f", get(p + "self_attn.q_proj.bias", [hq * D]))
            out.extend(get(p + "self_attn.k_proj.bias", [hkv * D]))
            out.extend(get(p + "self_attn.v_proj.bias", [hkv * D]))
            return out

        tensors += [(q + "ln1.g", [h], lambda p=p: get(p + "input_layernorm.weight", [h])),
                    (q + "qkv.w", [h * (hq + 2 * hkv) * D], qkv)]
        if s["qkv_bias"]:
            tensors.append((q + "qkv.b", [(hq + 2 * hkv) * D], qkvb))
        tensors += [(q + "proj.w", [hq * D * h], lambda p=p: hcat_t([get(p + "self_attn.o_proj.weight", [h, hq * D])], hq * D)),
                    (q + "ln2.g", [h], lambda p=p: get(p + "post_attention_layernorm.weight", [h]))]
        if s["qk_norm"]:   # Qwen3: the per-head RMS norms' gains [D] of the query and the key
            tensors += [(q + "qnorm.g", [D], lambda p=p: get(p + "self_attn.q_norm.weight", [D])),
                        (q + "knorm.g", [D], lambda p=p: get(p + "self_attn.k_norm.weight", [D]))]
        if E:       # Mixtral, Qwen3-MoE: the router, then each expert's SwiGLU FC1 [gate | up] and FC2 (down)
            tensors.append((q + "moe.router.w", [h * E], lambda p=p: hcat_t([get(p + mpre + "gate.weight", [E, h])], h)))
            for j in range(E):
                r = p + mpre + "experts.%d." % j
                tensors += [(q + "moe.e%d.fc.w" % j, [h * 2 * fe], lambda r=r: hcat_t([get(r + wg + ".weight", [fe, h]),
                                                                                       get(r + wu + ".weight", [fe, h])], h)),
                            (q + "moe.e%d.fc2.w" % j, [fe * h], lambda r=r: hcat_t([get(r + wd + ".weight", [h, fe])], fe))]
        else:
            tensors += [(q + "fc.w", [h * 2 * f], lambda p=p: hcat_t([get(p + "mlp.gate_proj.weight", [f, h]),
                                                                      get(p + "mlp.up_proj.weight", [f, h])], h)),
                        (q + "fc2.w", [f * h], lambda p=p: hcat_t([get(p + "mlp.down_proj.weight", [h, f])], f))]
    tensors.append(("lnf.g", [h], lambda: get("model.norm.weight", [h])))
    if not s["tied"]:
        tensors.append(("vocab.out", [V * h], lambda: get("lm_head.weight", [V, h])))
    # what PPS would not compute must not be silently dropped: check before writing
    expected = {"model.embed_tokens.weight", "model.norm.weight"} | (set() if s["tied"] else {"lm_head.weight"})
    for i in range(L):
        p = "model.layers.%d." % i
        expected |= {p + n + ".weight" for n in ("input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
                                                 "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")}
        if s["qkv_bias"]:
            expected |= {p + "self_attn.%s_proj.bias" % n for n in "qkv"}
        if s["qk_norm"]:
            expected |= {p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"}
        if E:
            expected |= {p + mpre + "gate.weight"} | {p + mpre + "experts.%d.%s.weight" % (j, w) for j in range(E)
                                                      for w in (wg, wu, wd)}
        else:
            expected |= {p + n + ".weight" for n in ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
    ignorable = ("rotary_emb.inv_freq",)
    for k in sorted(hf.where):
        if k in expected or k.endswith(ignorable) or (s["tied"] and k == "lm_head.weight"):
            continue
        raise ConvertError("%s: tensor '%s' is not part of a %s of this config (num_hidden_layers %d, %s)"
                           % (hfdir, k, s["name"], L,
                              "%s %d" % ("num_local_experts" if s["name"] == "Mixtral" else "num_experts", E) if E else
                              "q/k/v biases only" if s["qkv_bias"] else "attention_bias false" if s["qk_norm"] else
                              "attention_bias false, mlp_bias false"))
    for k in sorted(expected):
        if k not in hf.where:
            raise ConvertError("%s: no tensor '%s'" % (hfdir, k))
    meta = {"hidden": str(h), "heads": str(hq), "query_groups": str(hkv), "vocab": str(V), "layers": str(L),
            "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "bias": "off",
            "embeddings": "tied" if s["tied"] else "untied", "ffn_hidden": str(f), "kv_channels": str(D),
            "rope_base": repr(s["rope_base"]), "rope_scaling": s["rope_scaling"] or "none",
            "norm_epsilon": "%.17g" % s["eps"]}
    if s["qkv_bias"]:
        meta["qkv_bias"] = "on"
    if s["qk_norm"]:
        meta["qk_layernorm"] = "on"
    meta.update((field, repr(s["rope_params"][k]) if isinstance(s["rope_params"][k], float) else str(s["rope_params"][k]))
                for k, field, _ in ROPE_PARAMS if k in s["rope_params"])
    if E:       # the runtime's default router (softmax over the top K; Qwen3-MoE's norm_topk_prob false: pre-softmax),
        # no load-balancing loss (see mixtral_experts)
        meta.update({"num_experts": str(E), "moe_topk": str(s["topk"]), "moe_ffn_hidden": str(fe),
                     "moe_aux_loss_coeff": "0", "moe_router_score_function": "softmax"})
        if s.get("pre_softmax"):
            meta["moe_router_pre_softmax"] = "1"
    _write_pps(index, tensors, meta, optimizer)
    for n in s.get("notes", ()):
        sys.stderr.write("pps_hf: note: %s\n" % n)
    return runtime_flags(s, stages)


def _write_pps(index, tensors, sizes, optimizer):
    """A PPS checkpoint: the index INDEX and one shard beside it holding `tensors`
    ((key, [numel], thunk)), step 0, data position 0, the metadata `sizes`; with Adam
    zero moments."""
    if optimizer == "adam":
        tensors += [("optim.%s.%s" % (mv, k), shape, lambda n=shape[0]: array.array("f", bytes(4 * n)))
                    for mv in "mv" for k, shape, _ in list(tensors)
                    if not k.endswith(".router.expert_bias")]   # (a buffer, no weight: no moments)
    d = os.path.dirname(index) or "."
    if not os.path.isdir(d):
        raise WriteError("%s: no directory %s" % (index, d))
    shard_name = os.path.basename(index) + ".0-hf.0-of-1.safetensors"
    shard = os.path.join(d, shard_name)
    t1 = write_safetensors(shard, tensors, {"format": "pps-ppsrt-shard", "step": "0", "rank": "0", "ranks": "1"})
    meta = dict({"format": "pps-ppsrt-index", "model": "gpt", "optimizer": optimizer, "step": "0", "data_position": "0"},
                **sizes)
    try:
        t2 = _write_text(index, json.dumps({"__metadata__": meta, "shards": [shard_name]}, separators=(",", ":")) + "\n")
    except BaseException:
        os.unlink(t1)
        raise
    _commit([(t1, shard), (t2, index)])


def _import_gpt2(hf, index, stages, optimizer, seq):
    """HF GPT-2 directory -> PPS checkpoint of the gpt model's default layer (see
    GPT2_NAMES); the position table's first `seq` rows (default n_positions)."""
    cfg, path = hf.config, os.path.join(hf.dir, "config.json")

    def refuse(k, why):
        raise ConvertError("%s: field '%s' is %s: %s" % (path, k, json.dumps(cfg.get(k)), why))
    h, hq, L, V = (_cfg_int(cfg, path, k) for k in ("n_embd", "n_head", "n_layer", "vocab_size"))
    npos = _cfg_int(cfg, path, "n_positions", 1024)
    f = _cfg_int(cfg, path, "n_inner", 4 * h)
    if h % hq:
        refuse("n_head", "does not divide n_embd %d" % h)
    if cfg.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        refuse("activation_function", "PPS's MLP is the tanh GeLU (gelu_new)")
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not (eps > 0 and math.isfinite(eps)):
        refuse("layer_norm_epsilon", "not a number above 0 (the runtime's --norm-epsilon)")
    for k in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
        if cfg.get(k, False) is not False:
            refuse(k, "PPS's attention is GPT-2's plain causal self-attention scaled by 1/sqrt(head size)")
    if cfg.get("scale_attn_weights", True) is not True:
        refuse("scale_attn_weights", "PPS scales attention by 1/sqrt(head size)")
    tied = cfg.get("tie_word_embeddings", True)
    if not isinstance(tied, bool):
        refuse("tie_word_embeddings", "not true or false")
    if seq is None:
        seq = npos
    if not (1 <= seq <= npos):
        raise ConvertError("--seq %d: the model has %d positions (n_positions)" % (seq, npos))
    if stages is not None and (stages < 1 or L % stages):
        raise ConvertError("--stages %d does not divide the model's %d layers (n_layer)" % (stages, L))
    # GPT2LMHeadModel's keys start with "transformer."; GPT2Model's (the hub's gpt2 files) do not
    pre = "transformer." if "transformer.wte.weight" in hf.where else ""
    shapes = _gpt2_shapes(h, f)

    def get(k, shape):
        return hf.get(pre + k, shape)

    def n(shape):
        r = 1
        for x in shape:
            r *= x
        return r
    tensors = [("vocab.tok", [V * h], lambda: get("wte.weight", [V, h])),
               ("vocab.pos", [seq * h], lambda: get("wpe.weight", [npos, h])[:seq * h])]
    for i in range(L):
        tensors += [("layer%d.%s" % (i, pn), [n(shapes[pn])], lambda i=i, pn=pn, hn=hn: get("h.%d.%s" % (i, hn), shapes[pn]))
                    for pn, hn in GPT2_NAMES]
    tensors += [("lnf.g", [h], lambda: get("ln_f.weight", [h])), ("lnf.b", [h], lambda: get("ln_f.bias", [h]))]
    expected = {pre + k for k in ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")}
    expected |= {pre + "h.%d.%s" % (i, hn) for i in range(L) for _, hn in GPT2_NAMES}
    if not tied:
        tensors.append(("vocab.out", [V * h], lambda: hf.get("lm_head.weight", [V, h])))
        expected.add("lm_head.weight")
    for k in sorted(hf.where):   # (attn.bias / masked_bias: the causal mask's buffers)
        if k in expected or k.endswith((".attn.bias", ".attn.masked_bias")) or (tied and k == "lm_head.weight"):
            continue
        raise ConvertError("%s: tensor '%s' is not part of a GPT-2 of this config (n_layer %d)" % (hf.dir, k, L))
    for k in sorted(expected):
        if k not in hf.where:
            raise ConvertError("%s: no tensor '%s'" % (hf.dir, k))
    meta = {"hidden": str(h), "heads": str(hq), "query_groups": str(hq), "vocab": str(V), "layers": str(L), "seq": str(seq),
            "mlp": "gelu", "norm": "layernorm", "position": "learned", "bias": "on",
            "embeddings": "tied" if tied else "untied", "ffn_hidden": str(f), "norm_epsilon": "%.17g" % eps}
    _write_pps(index, tensors, meta, optimizer)
    flags = ("--model gpt --hidden %d --heads %d --query-groups %d --ffn-hidden %d --vocab %d --seq %d --embeddings %s"
             % (h, hq, hq, f, V, seq, "tied" if tied else "untied")) + _eps_flag(float(eps))
    if stages:
        flags += " --layers-per-stage %d" % (L // stages)
    return flags


USAGE = """usage: pps_hf.py export INDEX OUTDIR [--dtype f32|bf16]
       pps_hf.py import HFDIR INDEX [--stages S] [--optimizer sgd|adam] [--seq S (GPT-2)]
  export: a PPS gpt checkpoint of Llama's layer (with --num-experts, --add-qkv-bias or --qk-layernorm; or
          GPT-2's) -> a Hugging Face LlamaForCausalLM (MixtralForCausalLM, Qwen2ForCausalLM,
          Qwen3ForCausalLM, Qwen3MoeForCausalLM; GPT2LMHeadModel) directory
  import: a Hugging Face Llama, Qwen2, Qwen3, Qwen3-MoE, Mixtral or GPT-2 directory -> a PPS checkpoint for
          --load (prints the flags)"""


def parse_cli(argv, valued, usage):
    """The words of a command line and its options {name: value} (each option in
    `valued` takes a value: --name V or --name=V); None for -h/--help (usage printed)."""
    args, opts = [], {}
    it = iter(argv)
    for a in it:
        if a in ("-h", "--help"):
            print(usage)
            return None
        name = a.split("=", 1)[0]
        if name in valued:
            v = a.split("=", 1)[1] if "=" in a else next(it, None)
            if v is None:
                raise ConvertError("%s needs a value" % name)
            opts[name[2:]] = v
        elif a.startswith("-") and len(a) > 1:
            raise ConvertError("unknown option '%s'\n%s" % (a, usage))
        else:
            args.append(a)
    return args, opts


def main(argv):
    parsed = parse_cli(argv, ("--dtype", "--stages", "--optimizer", "--seq"), USAGE)
    if parsed is None:
        return 0
    args, opts = parsed
    if len(args) != 3 or args[0] not in ("export", "import"):
        raise ConvertError("expected a command and two paths\n" + USAGE)
    if args[0] == "export":
        if "stages" in opts or "optimizer" in opts or "seq" in opts:
            raise ConvertError("--stages, --optimizer and --seq are import's")
        c = export_checkpoint(args[1], args[2], opts.get("dtype", "f32"))
        print("pps_hf: wrote %s (%s: %d layers, hidden %d, %s)" %
              (args[2], c["architectures"][0], c.get("num_hidden_layers", c.get("n_layer")),
               c.get("hidden_size", c.get("n_embd")), c["torch_dtype"]))
    else:
        if "dtype" in opts:
            raise ConvertError("--dtype is export's (PPS checkpoints are F32)")
        st, sq = opts.get("stages"), opts.get("seq")
        for k, v in (("--stages", st), ("--seq", sq)):
            if v is not None and not v.isdigit():
                raise ConvertError("%s needs a whole number, got '%s'" % (k, v))
        flags = import_checkpoint(args[1], args[2], int(st) if st is not None else None, opts.get("optimizer", "sgd"),
                                  int(sq) if sq is not None else None)
        print("pps_hf: wrote %s; run it with (--seq at most max_position_embeddings)\n  %s --load %s"
              % (args[2], flags, args[2]))
    return 0


def run_main(main, prog):
    """sys.exit(main(argv)): a ConvertError is one line "PROG: ..." on stderr and its
    code (2 bad input, 1 an unwritable output); ^C exits 130."""
    try:
        sys.exit(main(sys.argv[1:]))
    except ConvertError as e:
        sys.stderr.write("%s: %s\n" % (prog, e))
        sys.exit(e.code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    run_main(main, "pps_hf")
