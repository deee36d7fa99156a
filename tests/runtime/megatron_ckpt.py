#!/usr/bin/env python3
"""megatron_ckpt.py: writes Megatron-LM checkpoints (Megatron-Core GPTModel, the `torch`
format) for tests/runtime/megatron.sh, from a PPS checkpoint, without torch.

  megatron_ckpt.py write PPS_INDEX OUTDIR --tp T --pp P [--vp V] [--names te|local]
                   [--dtype f32|bf16] [--buffer] [--iteration N] [--arg KEY=PYVALUE ...]
                   [--extra NAME] [--expect EXPECT_INDEX] [--torch]
                   [--corrupt int|outside|short|bigendian]
      OUTDIR/latest_checkpointed_iteration.txt and OUTDIR/iter_NNNNNNN/mp_rank_TT[_PPP]/
      model_optim_rng.pt for every tensor- and pipeline-parallel rank, split the way
      Megatron-Core's layers split their weights (written here from Megatron-Core's
      definitions, independently of python/pps_megatron.py):
        - linear_qkv [out, in]: query groups in order, each [its Hq/G query heads | its
          key head | its value head] x D rows; TP rank t holds groups [t G/T, (t+1) G/T);
        - linear_proj, linear_fc2 (row-parallel): [h, in], TP rank t the columns t in/T..;
        - linear_fc1 (column-parallel): [f/T, h] rows of rank t; SwiGLU: [gate rows of t |
          up rows of t];
        - word embeddings and output_layer: vocabulary rows split over TP;
        - layers: virtual chunk v of pipeline rank p holds layers (v P + p) L/(P V) .. as
          decoder.layers.0 ..; the first chunk the embeddings, the last the final norm
          and the output layer (tied: a copy of the embedding when P V > 1).
      --names te: Transformer Engine's fused norm names (linear_qkv.layer_norm_weight)
      and an _extra_state tensor per linear layer; local: input_layernorm /
      pre_mlp_layernorm. --buffer: each rank's parameters are views into one storage
      (Megatron's contiguous parameter buffer). --dtype bf16 rounds to bfloat16 (nearest,
      ties to even); --expect writes the PPS checkpoint of exactly the stored values.
      --arg overrides Megatron's saved arguments (Python literals); --extra NAME adds a
      tensor the model lacks. --torch: written by the real torch.save (needs torch).
      --corrupt plants a defect in rank 0's first tensor: an integer storage, a view
      past its storage's end, a storage record shorter than its size, or the archive's
      byteorder record saying big-endian.
  megatron_ckpt.py evil OUT MARKER
      a torch.save-shaped file whose pickle calls os.system('touch MARKER').
"""
import argparse
import array
import ast
import collections
import io
import os
import pickle
import sys
import types
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import pps_hf  # noqa: E402


# ---- a torch.save writer without torch: fake modules for pickle's globals ----

def _fake_torch():
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*a):
        raise RuntimeError("never called")

    def _rebuild_parameter(*a):
        raise RuntimeError("never called")
    for fn in (_rebuild_tensor_v2, _rebuild_parameter):
        fn.__module__, fn.__qualname__ = "torch._utils", fn.__name__
        setattr(utils, fn.__name__, fn)
    for n in ("FloatStorage", "BFloat16Storage", "ByteStorage", "IntStorage"):
        setattr(torch, n, type(n, (), {"__module__": "torch"}))

    class dtype:
        __module__ = "torch"

        def __init__(self, n):
            self.n = n

        def __reduce__(self):
            return self.n
    torch.bfloat16, torch.float32 = dtype("bfloat16"), dtype("float32")
    torch._utils = utils
    sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
    return torch


class Store:
    """One storage: its element type and bytes."""

    def __init__(self, kind, data):
        self.kind, self.data = kind, data     # kind: Float, BFloat16, Byte


class T:
    """A tensor to pickle: a view (offset, shape) of a Store, row-major."""

    def __init__(self, store, offset, shape, param=False):
        self.store, self.offset, self.shape, self.param = store, offset, list(shape), param

    def __reduce_ex__(self, proto):
        torch = sys.modules["torch"]
        stride, s = [], 1
        for d in reversed(self.shape):
            stride.insert(0, s)
            s *= d
        t = (torch._utils._rebuild_tensor_v2, (self.store, self.offset, tuple(self.shape), tuple(stride), False,
                                               collections.OrderedDict()))
        if self.param:
            return (torch._utils._rebuild_parameter, (_Wrapped(t), False, collections.OrderedDict()))
        return t


class _Wrapped:
    def __init__(self, r):
        self.r = r

    def __reduce_ex__(self, proto):
        return self.r


def save_fake(obj, path, byteorder="little"):
    torch = sys.modules["torch"]
    stores = []

    class P(pickle.Pickler):
        def persistent_id(self, o):
            if isinstance(o, Store):
                if o not in stores:
                    stores.append(o)
                size = {"Float": 4, "BFloat16": 2, "Byte": 1, "Int": 4}[o.kind]
                return ("storage", getattr(torch, o.kind + "Storage"), str(stores.index(o)), "cpu", len(o.data) // size)
            return None
    buf = io.BytesIO()
    P(buf, protocol=2).dump(obj)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/byteorder", byteorder)
        for i, s in enumerate(stores):
            z.writestr("archive/data/%d" % i, bytes(s.data)[:len(s.data) // 2] if getattr(s, "short", False) else bytes(s.data))
        z.writestr("archive/version", "3\n")


def save_torch(obj, path):
    import torch

    def conv(o):
        if isinstance(o, T):
            st = o.store
            if st.kind == "Byte":
                base = torch.frombuffer(bytearray(st.data), dtype=torch.uint8)
            elif st.kind == "Float":
                base = torch.frombuffer(bytearray(st.data), dtype=torch.float32)
            else:
                base = torch.frombuffer(bytearray(st.data), dtype=torch.bfloat16)
            key = id(st)
            base = shared.setdefault(key, base)
            n = 1
            for d in o.shape:
                n *= d
            t = base[o.offset:o.offset + n].view(o.shape)
            return torch.nn.Parameter(t, requires_grad=False) if o.param else t
        if isinstance(o, dict):
            return type(o)((k, conv(v)) for k, v in o.items())
        if isinstance(o, argparse.Namespace):
            return argparse.Namespace(**{k: conv(v) for k, v in vars(o).items()})
        if isinstance(o, list):
            return [conv(v) for v in o]
        return o
    shared = {}
    torch.save(conv(obj), path)


# ---- Megatron's layout, from the PPS checkpoint's full tensors ----

def bf16_round(a):
    bits = pps_hf.bf16_bits(a)
    wide = bytearray(4 * len(bits))
    raw = bits.tobytes()
    wide[2::4], wide[3::4] = raw[0::2], raw[1::2]
    return array.array("f", bytes(wide))


def rows_of(a, cols):
    return [a[r * cols:(r + 1) * cols] for r in range(len(a) // cols)]


def col(a, rows, cols, c):
    return a[c::cols][:rows]


def transpose(a, rows, cols):
    """[rows, cols] -> [cols, rows] as a list of rows."""
    return [col(a, rows, cols, c) for c in range(cols)]


def flat(rowlist):
    out = array.array("f")
    for r in rowlist:
        out.extend(r)
    return out


def mlp_of(get, q, h, f, sw, bias):
    """An MLP's Megatron pieces from PPS's fc.w [h, fw] ([gate | up] columns), fc2.w [f, h]:
    gate / up rows [f, h] each, fc2 [h, f], their biases."""
    nf = 2 * f if sw else f
    t = {}
    fcT = transpose(get(q + "fc.w", h * nf), h, nf)                           # [nf, h]
    t["gate"], t["up"] = fcT[:f], fcT[f:] if sw else []
    if bias:
        fb = list(get(q + "fc.b", nf))
        t["gate.b"], t["up.b"] = fb[:f], fb[f:] if sw else []
        t["fc2.b"] = get(q + "fc2.b", h)
    t["fc2"] = transpose(get(q + "fc2.w", f * h), f, h)                       # [h, f]
    return t


def add_mlp(add, t, name1, name2, w, b, tp, Tp, f, h, sw, bias):
    """A column-parallel FC1 (rank tp's [gate rows | up rows]) and a row-parallel FC2."""
    r0, r1 = tp * f // Tp, (tp + 1) * f // Tp
    add(name1 + w, flat(t["gate"][r0:r1] + (t["up"][r0:r1] if sw else [])), [(2 if sw else 1) * (r1 - r0), h])
    if bias:
        add(name1 + b, t["gate.b"][r0:r1] + (t["up.b"][r0:r1] if sw else []), [(2 if sw else 1) * (r1 - r0)])
    add(name2 + w, flat([r[r0:r1] for r in t["fc2"]]), [h, r1 - r0])
    if bias:
        add(name2 + b, t["fc2.b"], [h])


def main():
    if sys.argv[1:2] == ["evil"]:
        _fake_torch()
        out, marker = sys.argv[2], sys.argv[3]

        class Evil:
            def __reduce__(self):
                return (os.system, ("touch %s" % marker,))
        buf = io.BytesIO()
        pickle.Pickler(buf, protocol=2).dump({"args": Evil(), "model": {}})
        with zipfile.ZipFile(out, "w") as z:
            z.writestr("archive/data.pkl", buf.getvalue())
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd")
    ap.add_argument("index")
    ap.add_argument("outdir")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--vp", type=int, default=1)
    ap.add_argument("--names", default="te")
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--buffer", action="store_true")
    ap.add_argument("--iteration", type=int, default=100)
    ap.add_argument("--arg", action="append", default=[])
    ap.add_argument("--extra", action="append", default=[])
    ap.add_argument("--expect")
    ap.add_argument("--ep", type=int, default=1)
    ap.add_argument("--experts", choices=("seq", "te", "legacy"), default="seq")
    ap.add_argument("--torch", action="store_true")
    # a defect planted in tensor-parallel rank 0's first tensor (the importer must refuse
    # it): int (an integer storage), outside (its view past the storage's end), short (the
    # storage record shorter than its element count says), bigendian (the byteorder record)
    # (epcopy: expert-parallel rank 1's copy of that tensor one bit off rank 0's)
    ap.add_argument("--corrupt", choices=("int", "outside", "short", "bigendian", "epcopy"))
    o = ap.parse_args()
    if not o.torch:
        _fake_torch()
    ck = pps_hf.PPSCheckpoint(o.index)
    m = ck.meta
    h, hq, G, V, L = (int(m[k]) for k in ("hidden", "heads", "query_groups", "vocab", "layers"))
    f = int(m["ffn_hidden"])
    E = int(m.get("num_experts", "0"))     # MoE (runtime/moe.c): the router and E experts per layer
    if E:
        K, F, aux = int(m["moe_topk"]), int(m["moe_ffn_hidden"]), float(m.get("moe_aux_loss_coeff", "0"))
    S = int(m.get("moe_shared_ffn_hidden", "0")) if E else 0   # a shared expert's width (0: none)
    SG = bool(S) and m.get("moe_shared_expert_gate") == "1"   # and its gate (SharedExpertMLP.gate_weight [1, h])
    D = int(m.get("kv_channels", h // hq))   # the head size (--kv-channels; Megatron's kv_channels)
    sw, rms, rope, bias = m["mlp"] == "swiglu", m["norm"] == "rmsnorm", m["position"] == "rope", m["bias"] == "on"
    tied = m["embeddings"] == "tied"
    qkn = m.get("qk_layernorm") == "on"
    qb = bias or m.get("qkv_bias") == "on"   # the QKV's bias (--add-qkv-bias: it alone)
    eps = float(m.get("norm_epsilon", "1e-5"))
    Tp, P, VP = o.tp, o.pp, o.vp
    nf = 2 * f if sw else f
    store = {}

    def get(k, n):
        a = ck.tensor(k, n)
        if o.dtype == "bf16":
            a = bf16_round(a)
        store[k] = a
        return a

    # full Megatron tensors, as lists of rows ([out, in])
    full = {}
    full["tok"] = rows_of(get("vocab.tok", V * h), h)
    if not rope:
        full["pos"] = rows_of(get("vocab.pos", int(m["seq"]) * h), h)
    if not tied:
        full["out"] = rows_of(get("vocab.out", V * h), h)
    full["lnf.g"] = get("lnf.g", h)
    if not rms:
        full["lnf.b"] = get("lnf.b", h)
    npg = hq // G
    layer = []
    for i in range(L):
        q = "layer%d." % i
        t = {}
        t["ln1.g"] = get(q + "ln1.g", h)
        t["ln2.g"] = get(q + "ln2.g", h)
        if not rms:
            t["ln1.b"], t["ln2.b"] = get(q + "ln1.b", h), get(q + "ln2.b", h)
        W = transpose(get(q + "qkv.w", h * (hq + 2 * G) * D), h, (hq + 2 * G) * D)   # rows = output columns
        bq = list(get(q + "qkv.b", (hq + 2 * G) * D)) if qb else None
        groups, gb = [], []
        for g in range(G):
            idx = [(g * npg + j) * D + d for j in range(npg) for d in range(D)]
            idx += [hq * D + g * D + d for d in range(D)] + [(hq + G) * D + g * D + d for d in range(D)]
            groups.append([W[c] for c in idx])
            if qb:
                gb.append([bq[c] for c in idx])
        t["qkv"], t["qkv.b"] = groups, gb
        for k in ("qnorm", "knorm") if qkn else ():   # --qk-layernorm: q_layernorm / k_layernorm [D]
            t[k + ".g"] = get(q + k + ".g", D)
            if not rms:
                t[k + ".b"] = get(q + k + ".b", D)
        t["proj"] = transpose(get(q + "proj.w", hq * D * h), hq * D, h)            # [h, hq D]
        if bias:
            t["proj.b"] = get(q + "proj.b", h)
        if E:   # Megatron's router.weight [E, h] (PPS's [h, E]); each expert an MLP of width F
            t["router"] = transpose(get(q + "moe.router.w", h * E), h, E)
            if q + "moe.router.expert_bias" in ck.where:   # the router's expert bias (a buffer, kept in F32)
                t["ebias"] = store[q + "moe.router.expert_bias"] = ck.tensor(q + "moe.router.expert_bias", E)
            t["experts"] = [mlp_of(get, q + "moe.e%d." % g, h, F, sw, bias) for g in range(E)]
            if S:   # Megatron-Core's SharedExpertMLP: an MLP of width S (mlp.shared_experts.*)
                t["shared"] = mlp_of(get, q + "moe.shared.", h, S, sw, bias)
                if SG:
                    t["sgate"] = get(q + "moe.shared.gate.w", h)
        else:
            t.update(mlp_of(get, q, h, f, sw, bias))
        layer.append(t)

    args = argparse.Namespace(
        num_layers=L, hidden_size=h, num_attention_heads=hq, num_query_groups=G, group_query_attention=G != hq,
        ffn_hidden_size=f, kv_channels=D, tensor_model_parallel_size=Tp, pipeline_model_parallel_size=P,
        virtual_pipeline_model_parallel_size=VP if VP > 1 else None, normalization="RMSNorm" if rms else "LayerNorm",
        norm_epsilon=eps, init_method_std=0.02, swiglu=sw, openai_gelu=False, bias_gelu_fusion=True, add_bias_linear=bias,
        add_qkv_bias=qb,
        position_embedding_type="rope" if rope else "learned_absolute", rotary_percent=1.0, rotary_interleaved=False,
        rotary_base=int(float(m.get("rope_base", "10000"))), use_rope_scaling=False, rope_scaling_factor=8.0,
        untie_embeddings_and_output_weights=not tied, hidden_dropout=0.0, attention_dropout=0.0, seq_length=int(m.get("seq", 16)),
        max_position_embeddings=int(m.get("seq", 16)), padded_vocab_size=V, params_dtype=sys.modules["torch"].bfloat16,
        num_experts=None, qk_layernorm=qkn, apply_residual_connection_post_layernorm=False,
        decoder_first_pipeline_num_layers=None, decoder_last_pipeline_num_layers=None,
        num_layers_per_virtual_pipeline_stage=None, transformer_impl="transformer_engine" if o.names == "te" else "local",
        expert_model_parallel_size=o.ep)
    if E:   # Megatron-Core's MoE arguments (its defaults for the rest)
        for k, x in dict(num_experts=E, moe_router_topk=K, moe_ffn_hidden_size=F, moe_aux_loss_coeff=aux,
                         moe_router_load_balancing_type="aux_loss", moe_layer_freq=1, moe_router_pre_softmax=False,
                         moe_router_score_function="softmax", moe_router_topk_scaling_factor=None,
                         moe_shared_expert_intermediate_size=S or None, moe_shared_expert_gate=SG,
                         moe_router_enable_expert_bias=False,
                         moe_router_num_groups=None, moe_expert_capacity_factor=None, moe_z_loss_coeff=None,
                         moe_grouped_gemm=o.experts != "seq", moe_use_legacy_grouped_gemm=o.experts == "legacy",
                         expert_tensor_parallel_size=Tp, moe_token_dispatcher_type="allgather").items():
            setattr(args, k, x)
    for kv in o.arg:
        k, v = kv.split("=", 1)
        setattr(args, k, ast.literal_eval(v))
    per = L // (P * VP)
    kind = "BFloat16" if o.dtype == "bf16" else "Float"

    def pack(a):
        if o.dtype == "bf16":
            return pps_hf.bf16_bits(a).tobytes()
        return array.array("f", a).tobytes()

    it = "iter_%07d" % o.iteration
    for tp, p, ep in ((a, b, c) for a in range(Tp) for b in range(P) for c in range(o.ep)):
        if True:
            tensors = []          # (name, flat values, shape) per chunk

            def chunk_sd(v):
                sd = []
                first, last = p == 0 and v == 0, p == P - 1 and v == VP - 1

                def add(n, vals, shape):
                    sd.append((n, array.array("f", vals), shape))
                if first:
                    vr = V // Tp
                    add("embedding.word_embeddings.weight", flat(full["tok"][tp * vr:(tp + 1) * vr]), [vr, h])
                    if not rope:
                        add("embedding.position_embeddings.weight", flat(full["pos"]), [len(full["pos"]), h])
                for k in range(per):
                    i = (v * P + p) * per + k
                    t, pre = layer[i], "decoder.layers.%d." % k
                    n1 = pre + ("self_attention.linear_qkv.layer_norm_" if o.names == "te" else "input_layernorm.")
                    # (a MoE layer's pre-MLP norm is its own module under both names)
                    n2 = pre + ("mlp.linear_fc1.layer_norm_" if o.names == "te" and not E else "pre_mlp_layernorm.")
                    add(n1 + "weight", t["ln1.g"], [h])
                    if not rms:
                        add(n1 + "bias", t["ln1.b"], [h])
                    gs = t["qkv"][tp * G // Tp:(tp + 1) * G // Tp]
                    add(pre + "self_attention.linear_qkv.weight", flat([r for g in gs for r in g]),
                        [G // Tp * (npg + 2) * D, h])
                    if qb:
                        add(pre + "self_attention.linear_qkv.bias",
                            [x for g in t["qkv.b"][tp * G // Tp:(tp + 1) * G // Tp] for x in g], [G // Tp * (npg + 2) * D])
                    for k, mk in (("qnorm", "q_layernorm"), ("knorm", "k_layernorm")) if qkn else ():
                        add(pre + "self_attention." + mk + ".weight", t[k + ".g"], [D])   # (whole on every rank)
                        if not rms:
                            add(pre + "self_attention." + mk + ".bias", t[k + ".b"], [D])
                    c0, c1 = tp * hq * D // Tp, (tp + 1) * hq * D // Tp
                    add(pre + "self_attention.linear_proj.weight", flat([r[c0:c1] for r in t["proj"]]), [h, c1 - c0])
                    if bias:
                        add(pre + "self_attention.linear_proj.bias", t["proj.b"], [h])
                    add(n2 + "weight", t["ln2.g"], [h])
                    if not rms:
                        add(n2 + "bias", t["ln2.b"], [h])
                    if not E:
                        add_mlp(add, t, pre + "mlp.linear_fc1.", pre + "mlp.linear_fc2.", "weight", "bias", tp, Tp, f, h,
                                sw, bias)
                        continue
                    add(pre + "mlp.router.weight", flat(t["router"]), [E, h])
                    if "ebias" in t:
                        add(pre + "mlp.router.expert_bias", list(t["ebias"]), [E])
                    if S:   # the shared expert: on every EP rank, split over TP as the dense MLP
                        add_mlp(add, t["shared"], pre + "mlp.shared_experts.linear_fc1.", pre + "mlp.shared_experts.linear_fc2.",
                                "weight", "bias", tp, Tp, S, h, sw, bias)
                        if SG:   # its gate: replicated on every TP (and EP) rank
                            add(pre + "mlp.shared_experts.gate_weight", list(t["sgate"]), [1, h])
                    El = E // o.ep
                    for j in range(El):      # local expert j of EP rank ep: global expert ep E/EP + j
                        x = pre + "mlp.experts."
                        if o.experts == "legacy":   # GroupedMLP (TP 1, no biases): below, all experts at once
                            break
                        if o.experts == "te":     # TEGroupedMLP: one GroupedLinear, weightJ / biasJ
                            add_mlp(add, t["experts"][ep * El + j], x + "linear_fc1.", x + "linear_fc2.", "weight%d" % j,
                                    "bias%d" % j, tp, Tp, F, h, sw, bias)
                        else:                     # SequentialMLP: local_experts.J, an MLP each
                            add_mlp(add, t["experts"][ep * El + j], x + "local_experts.%d.linear_fc1." % j,
                                    x + "local_experts.%d.linear_fc2." % j, "weight", "bias", tp, Tp, F, h, sw, bias)
                    if o.experts == "legacy":   # weight1 [h, El fw] holding [El, h, fw] (PPS's fc.w blocks), weight2
                        fw = 2 * F if sw else F   # [El F, h] holding [El, F, h] (fc2.w blocks), as its forward views them
                        gs = range(ep * El, (ep + 1) * El)
                        add(pre + "mlp.experts.weight1", [y for g in gs for y in store["layer%d.moe.e%d.fc.w" % (i, g)]],
                            [h, El * fw])
                        add(pre + "mlp.experts.weight2", [y for g in gs for y in store["layer%d.moe.e%d.fc2.w" % (i, g)]],
                            [El * F, h])
                if last:
                    add("decoder.final_layernorm.weight", full["lnf.g"], [h])
                    if not rms:
                        add("decoder.final_layernorm.bias", full["lnf.b"], [h])
                    vr = V // Tp
                    if not tied:
                        add("output_layer.weight", flat(full["out"][tp * vr:(tp + 1) * vr]), [vr, h])
                    elif P * VP > 1:
                        add("output_layer.weight", flat(full["tok"][tp * vr:(tp + 1) * vr]), [vr, h])
                for n in o.extra:
                    if first:
                        add(n, [1.0] * h, [h])
                return sd

            obj = {"args": args, "checkpoint_version": 3.0, "iteration": o.iteration,
                   "num_floating_point_operations_so_far": 0, "rng_state": [{"random_rng_state": (3, (1, 2, 3), None)}]}
            for v in range(VP):
                sd = chunk_sd(v)
                if o.buffer:     # one storage per chunk, every tensor a view into it (in reverse order)
                    blob = bytearray()
                    offs = []
                    for n, vals, shape in reversed(sd):
                        offs.append(len(blob) // (2 if o.dtype == "bf16" else 4))
                        blob += pack(vals)
                    st = Store(kind, blob)
                    entries = [(n, T(st, off, shape)) for (n, _, shape), off in zip(reversed(sd), offs)][::-1]
                else:
                    entries = [(n, T(Store(kind, pack(vals)), 0, shape, param=(j == 0))) for j, (n, vals, shape) in enumerate(sd)]
                if o.corrupt in ("int", "outside", "short") and tp == 0 and p == 0 and v == 0 and ep == 0:
                    n0, t0 = entries[0]
                    if o.corrupt == "int":
                        t0.store.kind = "Int"
                    elif o.corrupt == "outside":
                        t0.offset += 1
                    else:
                        t0.store.short = True
                    t0.param = False
                if o.corrupt == "epcopy" and tp == 0 and p == 0 and v == 0 and ep == 1:
                    st = entries[0][1].store
                    st.data = bytes([st.data[0] ^ 1]) + bytes(st.data[1:])
                msd = collections.OrderedDict(entries)
                if o.names == "te":       # Transformer Engine's FP8 metadata beside each layer
                    for k in range(per):
                        msd["decoder.layers.%d.self_attention.linear_qkv._extra_state" % k] = T(Store("Byte", b"\x01\x02"), 0, [2])
                        msd["decoder.layers.%d.mlp.%s._extra_state" % (k, "experts.linear_fc2" if E else "linear_fc2")] = None
                obj["model" if VP == 1 else "model%d" % v] = msd
            # an optimizer state the importer must ignore
            obj["optimizer"] = {"optimizer": {"state": {0: {"exp_avg": T(Store("Float", b"\0" * 16), 0, [4])}}}}
            # Megatron's get_checkpoint_name: mp_rank_TT, _PPP when PP > 1, then _EEE when EP > 1
            d = os.path.join(o.outdir, it, "mp_rank_%02d" % tp + ("_%03d" % p if P > 1 else "") +
                             ("_%03d" % ep if o.ep > 1 else ""))
            os.makedirs(d, exist_ok=True)
            if o.torch:
                save_torch(obj, os.path.join(d, "model_optim_rng.pt"))
            else:
                save_fake(obj, os.path.join(d, "model_optim_rng.pt"), "big" if o.corrupt == "bigendian" else "little")
    with open(os.path.join(o.outdir, "latest_checkpointed_iteration.txt"), "w") as fh:
        fh.write(str(o.iteration))
    if o.expect:
        tens = [(k, [len(a)], lambda a=a: a) for k, a in store.items()]
        meta = {k: v for k, v in m.items() if k in ("hidden", "heads", "query_groups", "vocab", "layers", "mlp", "norm",
                                                     "position", "bias", "embeddings", "ffn_hidden", "kv_channels", "seq", "rope_base",
                                                     "rope_scaling", "num_experts", "moe_topk", "moe_ffn_hidden",
                                                     "moe_aux_loss_coeff", "moe_router_score_function",
                                                     "moe_router_pre_softmax", "moe_shared_ffn_hidden",
                                                     "moe_shared_expert_gate")}
        if qkn:
            meta["qk_layernorm"] = "on"
        if qb and not bias:   # --add-qkv-bias
            meta["qkv_bias"] = "on"
        meta["norm_epsilon"] = "%.17g" % eps
        pps_hf._write_pps(o.expect, tens, meta, "sgd")
    return 0


if __name__ == "__main__":
    sys.exit(main())
