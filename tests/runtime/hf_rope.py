"""tests/runtime/hf_rope.py: HF transformers' RoPE inverse frequencies of a Llama-style
config.json (modeling_rope_utils: the default parameters, and rope_scaling's rope_type
linear or llama3), in double, written from that definition; and each pair's band. For
the tests' reference forwards (hf.sh, hf_moe.sh)."""
import math
def inv_freq(c):
    D = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]   # (head_dim: Qwen3's, --kv-channels)
    inv = [1 / c["rope_theta"] ** (j / D) for j in range(0, D, 2)]
    rs = c.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default": return inv, ["none"] * len(inv)
    if kind == "linear": return [f / rs["factor"] for f in inv], ["linear"] * len(inv)
    assert kind == "llama3", kind
    factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    out, band = [], []
    for f in inv:
        wavelen = 2 * math.pi / f
        if wavelen < old / hi: out.append(f); band.append("high")
        elif wavelen > old / lo: out.append(f / factor); band.append("low")
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append((1 - smooth) * f / factor + smooth * f); band.append("medium")
    return out, band
