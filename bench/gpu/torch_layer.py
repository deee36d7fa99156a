#!/usr/bin/env python3
"""bench/gpu/torch_layer.py: the PyTorch eager baseline for bench/gpu/layer_bench.

The same GPT layer as runtime/model_gpt.c and layer_bench.c (pre-norm, grouped query
causal attention, tanh-GeLU MLP, bf16 weights and activations), timed forward and
forward+backward with CUDA events after warm-up; median and min/max over --iters.
Attention uses F.scaled_dot_product_attention (what an eager user calls: FlashAttention
or memory-efficient kernels when available); --attn math forces the unfused path.
FLOPs are counted exactly as layer_bench counts them, so the two MFU figures compare.
--arch llama times Llama's layer as layer_bench --arch llama does (RMS norms, RoPE on q
and k in the rotate-half layout with base 10000, a SwiGLU MLP of width --ffn with the
gate and up projections one [h, 2 ffn] matrix, no biases), written as an eager user
writes it (F.rms_norm where torch has it, F.silu).

--breakdown then runs --iters more iterations under torch.profiler and sums the CUDA
kernels' time by class (gemm, attention, norm, elementwise, copy: the classes of
layer_bench --breakdown), per iteration, with the kernel count of each class and the
slowest kernels by name, so the gap to PPS shows kernel class by kernel class.

Not part of any test; needs a GPU and torch. Exit 77 when no GPU is visible.
"""
import argparse
import json
import re
import statistics
import sys

CLASSES = ("gemm", "attention", "norm", "elementwise", "copy")


def kernel_class(name):
    n = name.lower()
    if re.search(r"flash|fmha|attention|sdpa|softmax|cudnn", n):
        return "attention"
    if re.search(r"gemm|nvjet|cutlass|xmma|cublas|matmul|sm\d+_", n):
        return "gemm"
    if "norm" in n:
        return "norm"
    if re.search(r"copy|memcpy|memset", n):
        return "copy"
    return "elementwise"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    ap.add_argument("--attn", choices=["sdpa", "math"], default="sdpa")
    ap.add_argument("--arch", choices=["gpt", "llama"], default="gpt")
    ap.add_argument("--ffn", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--breakdown", action="store_true")
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("SKIP: no CUDA device visible")
        return 77
    dev, dt = "cuda", torch.bfloat16
    h, s, H, G, B = a.hidden, a.seq, a.heads, a.groups, a.batch
    D = h // H
    q_out = (H + 2 * G) * D
    llama = a.arch == "llama"
    f = a.ffn or ((8 * h // 3 // 64 * 64 or max(8, 8 * h // 3 // 8 * 8)) if llama else 4 * h)
    torch.manual_seed(0)

    def w(*shape, scale=0.02):
        return (torch.randn(*shape, device=dev, dtype=torch.float32) * scale).to(dt).requires_grad_()

    g1, b1, g2, b2 = (w(h, scale=0.1) for _ in range(4))
    wqkv, wproj, wfc, wfc2 = w(h, q_out), w(h, h), w(h, (2 if llama else 1) * f), w(f, h)
    params = (g1, g2, wqkv, wproj, wfc, wfc2) + (() if llama else (b1, b2))
    if llama:   # RoPE's cosines and sines of each position (F32), as layer_bench's table
        inv = 10000.0 ** (-torch.arange(0, D // 2, device=dev, dtype=torch.float64) * 2 / D)
        ang = torch.arange(s, device=dev, dtype=torch.float64)[:, None] * inv[None, :]
        cos, sin = ang.cos().float(), ang.sin().float()

    def rope(t):   # t [B, heads, s, D]: pairs (i, i + D/2) rotated by their position's angle
        t1, t2 = t[..., : D // 2].float(), t[..., D // 2:].float()
        return torch.cat((t1 * cos - t2 * sin, t2 * cos + t1 * sin), -1).to(dt)

    def norm(v, g, b):
        if not llama:
            return F.layer_norm(v, (h,), g, b, 1e-5)
        if hasattr(F, "rms_norm"):
            return F.rms_norm(v, (h,), g, 1e-5)
        vf = v.float()
        return (vf * torch.rsqrt(vf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dt) * g
    x = torch.randn(B * s, h, device=dev, dtype=dt, requires_grad=True)
    dy = torch.randn(B * s, h, device=dev, dtype=dt)

    def attention(qkv):
        q = qkv[:, : H * D].view(B, s, H, D).transpose(1, 2)
        k = qkv[:, H * D: (H + G) * D].view(B, s, G, D).transpose(1, 2)
        v = qkv[:, (H + G) * D:].view(B, s, G, D).transpose(1, 2)
        if llama:
            q, k = rope(q), rope(k)
        if a.attn == "math" or not hasattr(F, "scaled_dot_product_attention"):
            k = k.repeat_interleave(H // G, dim=1)
            v = v.repeat_interleave(H // G, dim=1)
            sc = (q.float() @ k.float().transpose(-1, -2)) / D ** 0.5
            mask = torch.ones(s, s, device=dev, dtype=torch.bool).triu(1)
            p = sc.masked_fill(mask, float("-inf")).softmax(-1).to(dt)
            o = p @ v
        else:
            try:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            except TypeError:   # torch < 2.5: no enable_gqa
                o = F.scaled_dot_product_attention(q, k.repeat_interleave(H // G, 1),
                                                   v.repeat_interleave(H // G, 1), is_causal=True)
        return o.transpose(1, 2).reshape(B * s, h)

    def layer(inp):
        ln1 = norm(inp, g1, b1)
        att = attention(ln1 @ wqkv)
        x1 = inp + att @ wproj
        ln2 = norm(x1, g2, b2)
        if llama:
            gate, up = (ln2 @ wfc).split(f, -1)
            return x1 + (F.silu(gate) * up) @ wfc2
        return x1 + F.gelu(ln2 @ wfc, approximate="tanh") @ wfc2

    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    tf, tbw = [], []
    for it in range(-a.warmup, a.iters):
        for p in (x,) + params:
            p.grad = None
        ev[0].record()
        y = layer(x)
        ev[1].record()
        y.backward(dy)
        ev[2].record()
        torch.cuda.synchronize()
        if it >= 0:
            tf.append(ev[0].elapsed_time(ev[1]))
            tbw.append(ev[1].elapsed_time(ev[2]))

    breakdown, counts, top = None, None, []
    if a.breakdown:
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(a.iters):
                for p in (x,) + params:
                    p.grad = None
                layer(x).backward(dy)
            torch.cuda.synchronize()
        breakdown = {c: 0.0 for c in CLASSES}
        counts = {c: 0 for c in CLASSES}
        for e in prof.key_averages():
            us = getattr(e, "self_device_time_total", None)
            if us is None:
                us = getattr(e, "self_cuda_time_total", 0)
            if not us or e.count == 0:
                continue
            c = kernel_class(e.key)
            breakdown[c] += us / 1e3 / a.iters
            counts[c] += e.count // a.iters
            top.append((us / 1e3 / a.iters, e.key, c))
        top.sort(reverse=True)

    fwd_tok = 2.0 * h * (h + 2.0 * h * G / H) + 2.0 * h * h + 2.0 * (3 if llama else 2) * h * f + 4.0 * s * h
    flops = 3 * fwd_tok * B * s
    f_ms, bw_ms = statistics.median(tf), statistics.median(tbw)
    total = f_ms + bw_ms
    tflops = flops / (total * 1e-3) / 1e12
    name = torch.cuda.get_device_name(0)
    print("# torch_layer: one %s layer, PyTorch %s eager (attention: %s)" % ("Llama" if llama else "GPT", torch.__version__, a.attn))
    print("# GPU: %s; hidden %d, seq %d, heads %d, query groups %d, batch %d, MLP width %d; bf16" % (name, h, s, H, G, B, f))
    print("# iterations %d after %d warm-up; median (min..max) ms" % (a.iters, a.warmup))
    print("%-6s %12s %22s" % ("pass", "median_ms", "min..max_ms"))
    print("%-6s %12.3f %10.3f..%-10.3f" % ("F", f_ms, min(tf), max(tf)))
    print("%-6s %12.3f %10.3f..%-10.3f" % ("B+W", bw_ms, min(tbw), max(tbw)))
    print("%-6s %12.3f" % ("total", total))
    line = "# model FLOPs per iteration %.4g; %.1f TFLOP/s" % (flops, tflops)
    if a.peak_tflops > 0:
        line += "; MFU %.1f%% of %.0f TFLOP/s" % (100 * tflops / a.peak_tflops, a.peak_tflops)
    print(line)
    if breakdown is not None:
        print("# breakdown: ms per iteration of CUDA kernel time by class (torch.profiler, %d iterations)" % a.iters)
        print("%-12s %9s %9s" % ("class", "F+B+W", "kernels"))
        for c in CLASSES:
            print("%-12s %9.3f %9d" % (c, breakdown[c], counts[c]))
        print("%-12s %9.3f %9d" % ("total", sum(breakdown.values()), sum(counts.values())))
        for ms, name, c in top[:8]:
            print("#   %8.3f ms  %-11s %s" % (ms, c, name[:90]))
    if a.json:
        print(json.dumps({"bench": "torch_layer", "gpu": name, "torch": torch.__version__, "attn": a.attn,
                          "arch": a.arch, "hidden": h, "seq": s, "heads": H, "groups": G, "batch": B, "ffn": f,
                          "iters": a.iters,
                          "f_ms": f_ms, "bw_ms": bw_ms, "total_ms": total, "flops": flops, "tflops": tflops,
                          "peak_tflops": a.peak_tflops,
                          "mfu": tflops / a.peak_tflops if a.peak_tflops > 0 else 0.0,
                          **({"breakdown_ms": breakdown, "breakdown_kernels": counts} if breakdown else {})}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
