"""tests/runtime/hf_ref.py: what the tests' Hugging Face reference forwards share (hf.sh's
hf_llama_ref.py and hf_gpt2_ref.py, hf_moe.sh's hf_mixtral_ref.py; each test copies this
file beside them): the arguments (HFDIR DATA SEQS [FIRST [S]]), a safetensors reader
(F32 and BF16; a 2-D tensor as rows; GPT2LMHeadModel's "transformer." prefix dropped),
the token windows, causal attention with grouped heads, the cross-entropy. Written from
HF's definitions, in double. llama_ops: Llama's linear layer, RMS norm, RoPE and SiLU, for
the Llama, Qwen2, Qwen3 and Mixtral references."""
import json, math, struct, sys
d, data, nseq = sys.argv[1], open(sys.argv[2], "rb").read(), int(sys.argv[3])
first = int(sys.argv[4]) if len(sys.argv) > 4 else 0   # the first sequence (a resumed run's data position)
slen = int(sys.argv[5]) if len(sys.argv) > 5 else 0    # the window (default: the config's positions)
c = json.load(open(d + "/config.json"))
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
W = {}
for k, v in json.loads(raw[8:8 + n]).items():
    if k == "__metadata__": continue
    a, b = v["data_offsets"]; body = raw[8 + n + a:8 + n + b]
    if v["dtype"] == "F32": vals = struct.unpack("<%df" % (len(body) // 4), body)
    else: vals = [struct.unpack("<f", b"\0\0" + body[i:i + 2])[0] for i in range(0, len(body), 2)]
    rows = v["shape"][0]; cols = len(vals) // rows
    W[k.replace("transformer.", "")] = [list(vals[r * cols:(r + 1) * cols]) for r in range(rows)] if len(v["shape"]) == 2 else list(vals)
def windows(s):   # (ids, targets) of sequences first.. (sequence k: the s + 1 tokens from (k mod W) s)
    s = slen or s
    nwin = (len(data) - 1) // s
    for k in range(first, first + nseq):
        win = data[(k % nwin) * s:(k % nwin) * s + s + 1]
        yield list(win[:s]), list(win[1:])
def llama_ops(D, eps, inv):
    """modeling_llama's pieces for head size D, RMS norm eps and RoPE inverse frequencies
    inv: lin(x, w[, b]) = x W^T (+ b), W [out, in]; rms(x, g) = x rsqrt(mean x^2 + eps) g;
    rope(x, t): per head x cos + rotate_half(x) sin, cos/sin = cat(freqs, freqs); silu."""
    def lin(x, w, b=None):
        y = [sum(xi * wi for xi, wi in zip(x, row)) for row in w]
        return [u + v for u, v in zip(y, b)] if b is not None else y
    def rms(x, g):
        r = 1 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
        return [v * r * gi for v, gi in zip(x, g)]
    def rope(x, t):
        out = []
        for j in range(len(x) // D):
            hv = x[j * D:(j + 1) * D]
            rh = [-v for v in hv[D // 2:]] + hv[:D // 2]
            f = [t * w for w in inv] * 2
            out += [a * math.cos(u) + b * math.sin(u) for a, b, u in zip(hv, rh, f)]
        return out
    def silu(g): return g / (1 + math.exp(-g))
    return lin, rms, rope, silu
def attention(q, k, v, H, G, D):   # rows of q [H D], k and v [G D]; query head j reads kv head j // (H/G)
    out = []
    for t in range(len(q)):
        o = []
        for j in range(H):
            g = j // (H // G); qs = q[t][j * D:(j + 1) * D]
            sc = [sum(a * b for a, b in zip(qs, k[u][g * D:(g + 1) * D])) / math.sqrt(D) for u in range(t + 1)]
            m = max(sc); e = [math.exp(z - m) for z in sc]; z = sum(e)
            o += [sum(e[u] / z * v[u][g * D + i] for u in range(t + 1)) for i in range(D)]
        out.append(o)
    return out
losses = []
def xent(lg, t):
    m = max(lg); losses.append(m + math.log(sum(math.exp(z - m) for z in lg)) - lg[t])
def report(): print("%.10g" % (sum(losses) / len(losses)))
