/* bench/gpu/layer_bench.c: times one GPT transformer layer (pre-norm, grouped query
 * attention, GeLU MLP) built directly from the CUDA backend's operations, forward (F),
 * input backward (B) and weight backward (W), and reports model FLOP utilisation.
 *
 * It isolates the backend from the runtime: no schedule, no transport, no activation
 * store; the same passes as runtime/model_gpt.c's layer (LN1, QKV GEMM, attention,
 * projection + residual, LN2, FC GEMM, GeLU, FC2 GEMM + residual, and their backward
 * halves), on bf16 activations and weights with F32 weight gradients.
 *
 * FLOPs counted (Megatron convention, attention counted without the causal half):
 *   per token, forward: 2h(h + 2h G/H) (QKV) + 2h^2 (proj) + 16h^2 (MLP) + 4 s h (attention)
 *   and F + B + W = 3 x forward.
 * Prints '#' header lines (GPU, sizes, settings), one row per measured part, a footer,
 * and with --json one JSON object. Warm-up iterations are not timed; the median and
 * the min/max over --iters are reported.
 *
 * --breakdown also records an event after every backend call and reports the time per
 * kernel class (GEMMs, attention, norms, elementwise, copies) and pass, as the mean over
 * the timed iterations; torch_layer.py --breakdown gives PyTorch's, from its profiler.
 * (The events themselves cost a little: compare the breakdown's total with a run without.)
 * --attn cudnn|cublas|auto sets PPSRT_CUDA_ATTN (the attention path) for this run.
 * --epilogue none|lt|LIST sets PPSRT_CUDA_EPILOGUE (the GEMM epilogues fused through
 * cuBLASLt, docs/gpu.md) and adds the model's biases to the layer, as model_gpt.c runs
 * it: QKV, projection and FC2 biases, bias + GeLU after FC, the GeLU gradient, the bias
 * gradients in W; each as one fused GEMM where LIST says, else the GEMM and its
 * kernel(s). Without --epilogue the layer has no biases (as torch_layer.py's). The JSON
 * gains "epilogue" and the calls run fused and fallen back ("ep_fused", "ep_unfused"),
 * so a run that asked for fusion and got none shows it (bench/gpu/epilogue.sh).
 *
 * --arch llama times Llama's layer instead (model_gpt.c's --arch llama, docs/models.md):
 * RMS norms, RoPE on q and k (and back on their gradients in B), a SwiGLU MLP of width
 * --ffn (default Megatron's floor(8h/3 / 64) * 64; FC1 [h, 2 ffn]), no biases (so no
 * --epilogue); FLOPs count the MLP's three matrices: 6h ffn a token instead of 16h^2.
 * torch_layer.py --arch llama is the same layer in PyTorch.
 * Usage: layer_bench [--hidden 4096] [--seq 4096] [--heads 32] [--groups 8]
 *                    [--batch 1] [--iters 20] [--warmup 3] [--peak-tflops X] [--arch gpt|llama] [--ffn N]
 *                    [--attn cudnn|cublas|auto] [--epilogue none|lt|LIST] [--breakdown] [--json]
 * Exit: 0 done, 77 no GPU visible, 1 an error, 2 bad usage. Not part of make check. */
#include "config.h"
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda/cuda_impl.h"
#include "gpt.h"

static ppsrt_backend *be;
#define CS PPSRT_STREAM_COMPUTE
#define BF PPSRT_BF16
#define F32 PPSRT_F32
#define K(call)                                                                  \
  do {                                                                           \
    int rc_ = (call);                                                            \
    if (rc_) {                                                                   \
      fprintf(stderr, "layer_bench: %s: %s\n", #call, ppsrt_last_error());       \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

static void *dalloc(size_t bytes) {
  void *p;
  K(be->alloc(be, bytes, &p));
  K(be->memset0(be, CS, p, bytes));
  return p;
}

static void *drand_bf16(size_t n, float scale) {
  float *h = malloc(n * sizeof *h);
  uint64_t s = 88172645463325252ull ^ n;
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    h[i] = scale * ((float)(s >> 40) / 16777216.0f - 0.5f);
  }
  void *p = dalloc(n * 2);
  K(be->upload_f32(be, (ppsrt_tensor){p, n, BF}, h));
  free(h);
  return p;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int h = 4096, s = 4096, H = 32, G = 8, B = 1, iters = 20, warm = 3, json = 0, bd = 0, llama = 0, ffn = 0;
  double peak = 0;
  const char *epi = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) { json = 1; continue; }
    if (!strcmp(a, "--breakdown")) { bd = 1; continue; }
    if (!v) { fprintf(stderr, "layer_bench: %s needs a value\n", a); return 2; }
    if (!strcmp(a, "--hidden")) h = atoi(v);
    else if (!strcmp(a, "--seq")) s = atoi(v);
    else if (!strcmp(a, "--heads")) H = atoi(v);
    else if (!strcmp(a, "--groups")) G = atoi(v);
    else if (!strcmp(a, "--batch")) B = atoi(v);
    else if (!strcmp(a, "--iters")) iters = atoi(v);
    else if (!strcmp(a, "--warmup")) warm = atoi(v);
    else if (!strcmp(a, "--peak-tflops")) peak = atof(v);
    else if (!strcmp(a, "--ffn")) ffn = atoi(v);
    else if (!strcmp(a, "--arch")) {
      if (strcmp(v, "gpt") && strcmp(v, "llama")) {
        fprintf(stderr, "layer_bench: --arch %s: expected gpt or llama\n", v);
        return 2;
      }
      llama = !strcmp(v, "llama");
    }
    else if (!strcmp(a, "--attn")) {
      if (strcmp(v, "cudnn") && strcmp(v, "cublas") && strcmp(v, "auto")) {
        fprintf(stderr, "layer_bench: --attn %s: expected cudnn, cublas or auto\n", v);
        return 2;
      }
      setenv("PPSRT_CUDA_ATTN", v, 1);
    }
    else if (!strcmp(a, "--epilogue")) {   /* the backend checks the value */
      epi = v;
      setenv("PPSRT_CUDA_EPILOGUE", v, 1);
    }
    else { fprintf(stderr, "layer_bench: unknown flag %s\n", a); return 2; }
    i++;
  }
  if (!ffn) {   /* the runtime's default: 4h, with SwiGLU Megatron's */
    ppsrt_model_config mc = {0};
    mc.hidden = h;
    mc.swiglu = llama;
    ffn = ppsrt_gpt_ffn(&mc);
  }
  if (h <= 0 || s <= 0 || H <= 0 || G <= 0 || H % G || h % H || B <= 0 || iters <= 0 || ffn <= 0 ||
      (llama && (h / H) % 2)) {
    fprintf(stderr, "layer_bench: bad sizes\n");
    return 2;
  }
  if (llama && epi) {
    fprintf(stderr, "layer_bench: --arch llama has no biases: no --epilogue\n");
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("SKIP: no CUDA device visible\n");
    return 77;
  }
  K(ppsrt_cuda_backend_create(0, &be));
  struct cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const int D = h / H, q = (H + 2 * G) * D, N = B * s;
  const int f = ffn, fw = llama ? 2 * ffn : ffn;   /* MLP width; FC1's output width (SwiGLU: gate | up) */
  const size_t Nh = (size_t)N * h;
  /* weights (bf16) and their F32 gradients (Llama: the norms have no beta) */
  void *g1 = drand_bf16(h, 0.1f), *b1 = llama ? NULL : drand_bf16(h, 0.1f), *g2 = drand_bf16(h, 0.1f);
  void *b2 = llama ? NULL : drand_bf16(h, 0.1f);
  void *wqkv = drand_bf16((size_t)h * q, 0.02f), *wproj = drand_bf16((size_t)h * h, 0.02f);
  void *wfc = drand_bf16((size_t)h * fw, 0.02f), *wfc2 = drand_bf16((size_t)f * h, 0.02f);
  float *dwqkv = dalloc((size_t)h * q * 4), *dwproj = dalloc((size_t)h * h * 4);
  float *dwfc = dalloc((size_t)h * fw * 4), *dwfc2 = dalloc((size_t)f * h * 4);
  float *dg1 = dalloc((size_t)h * 4), *db1 = llama ? NULL : dalloc((size_t)h * 4), *dg2 = dalloc((size_t)h * 4);
  float *db2 = llama ? NULL : dalloc((size_t)h * 4);
  /* activations kept by F (Llama: RMS norms keep no mean) */
  void *x = drand_bf16(Nh, 1.0f), *ln1 = dalloc(Nh * 2), *qkv = dalloc((size_t)N * q * 2), *att = dalloc(Nh * 2);
  void *x1 = dalloc(Nh * 2), *ln2 = dalloc(Nh * 2), *hpre = dalloc((size_t)N * fw * 2), *hact = dalloc((size_t)N * f * 2);
  void *y = dalloc(Nh * 2);
  float *m1 = llama ? NULL : dalloc((size_t)N * 4), *r1 = dalloc((size_t)N * 4), *m2 = llama ? NULL : dalloc((size_t)N * 4);
  float *r2 = dalloc((size_t)N * 4);
  float *lse = dalloc((size_t)B * H * s * 4);
  /* Llama: each token's position and the RoPE table (base 10000), as model_gpt.c's */
  int32_t *pos = NULL;
  float *rcs = NULL;
  if (llama) {
    int32_t *hp = malloc((size_t)N * sizeof *hp);
    float *ht = malloc((size_t)s * D * sizeof *ht);
    if (!hp || !ht) { fprintf(stderr, "layer_bench: out of host memory\n"); return 1; }
    for (int i = 0; i < N; i++) hp[i] = i % s;
    for (int t = 0; t < s; t++)
      for (int i = 0; i < D / 2; i++) {
        double ang = t * pow(10000.0, -2.0 * i / D);
        ht[((size_t)t * (D / 2) + i) * 2] = (float)cos(ang);
        ht[((size_t)t * (D / 2) + i) * 2 + 1] = (float)sin(ang);
      }
    pos = dalloc((size_t)N * 4);
    rcs = dalloc((size_t)s * D * 4);
    K(be->memcpy_async(be, CS, pos, hp, (size_t)N * 4, 1));
    K(be->upload_f32(be, (ppsrt_tensor){rcs, (size_t)s * D, F32}, ht));
    K(be->stream_sync(be, CS));
    free(hp);
    free(ht);
  }
  /* backward buffers (dh: the MLP's input gradient, then written over hpre with SwiGLU) */
  void *dy = drand_bf16(Nh, 1.0f), *dh = dalloc((size_t)N * fw * 2), *dln2 = dalloc(Nh * 2), *dx1 = dalloc(Nh * 2);
  void *datt = dalloc(Nh * 2), *dqkv = dalloc((size_t)N * q * 2), *dln1 = dalloc(Nh * 2), *dx = dalloc(Nh * 2);
  /* --epilogue: the biases (bf16), their F32 gradients, and B's copy of hpre (the fused
   * GeLU gradient's input, which its output must not overlap: model_gpt.c's layer_b) */
  void *bqkv = NULL, *bproj = NULL, *bfc = NULL, *bfc2 = NULL, *hcopy = NULL;
  float *dbqkv = NULL, *dbproj = NULL, *dbfc = NULL, *dbfc2 = NULL;
  if (epi) {
    bqkv = drand_bf16(q, 0.1f), bproj = drand_bf16(h, 0.1f), bfc = drand_bf16((size_t)f, 0.1f);
    bfc2 = drand_bf16(h, 0.1f);
    dbqkv = dalloc((size_t)q * 4), dbproj = dalloc((size_t)h * 4), dbfc = dalloc((size_t)f * 4), dbfc2 = dalloc((size_t)h * 4);
    if (be->epilogues & PPSRT_EP_DGELU) hcopy = dalloc((size_t)N * f * 2);
  }
  const size_t qo = 0, ko = (size_t)H * D, vo = (size_t)(H + G) * D;
#define AT(p, off) ((void *)((uint16_t *)(p) + (off)))

  ppsrt_event *ev[4];
  for (int i = 0; i < 4; i++) K(be->event_create(be, &ev[i]));
  /* --breakdown: an event after each call; op i's time is bev[i-1] (ev[0] for the first)
   * to bev[i], added to its class in its pass */
  enum { C_GEMM, C_ATTN, C_NORM, C_ELEM, C_COPY, NCLS };
  static const char *cls_name[NCLS] = {"gemm", "attention", "norm", "elementwise", "copy"};
  enum { MAXOP = 40 };
  ppsrt_event *bev[MAXOP];
  int bcls[MAXOP], bpass[MAXOP], nop = 0, pass = 0;
  double bsum[3][NCLS] = {{0}};
  for (int i = 0; bd && i < MAXOP; i++) K(be->event_create(be, &bev[i]));
#define OP(cls, call)                                   \
  do {                                                  \
    K(call);                                            \
    if (bd) {                                           \
      K(be->event_record(be, bev[nop], CS));            \
      bcls[nop] = (cls);                                \
      bpass[nop++] = pass;                              \
    }                                                   \
  } while (0)
/* --epilogue: a GEMM and its epilogue, fused (gemm_ep) when the backend fuses `ep`, else
 * the GEMM then the `unfused` kernels (each its own OP in the breakdown) */
#define EPOP(ep, fused_call, gemm_call, unfused)                      \
  do {                                                                \
    int r_ = (be->epilogues & (ep)) ? (fused_call) : 1;               \
    if (r_ < 0) K(r_);                                                \
    if (r_) {                                                         \
      OP(C_GEMM, gemm_call);                                          \
      unfused;                                                        \
    } else if (bd) {                                                  \
      K(be->event_record(be, bev[nop], CS));                          \
      bcls[nop] = C_GEMM;                                             \
      bpass[nop++] = pass;                                            \
    }                                                                 \
  } while (0)
  (void)be->event_elapsed(be, ev[0], ev[1]);   /* switch on timed events */
  double *tf = malloc(sizeof(double) * iters), *tb = malloc(sizeof(double) * iters), *tw = malloc(sizeof(double) * iters);
  for (int it = -warm; it < iters; it++) {
    K(be->event_record(be, ev[0], CS));
    nop = 0;
    pass = 0;
    /* ---- F ---- */
    OP(C_NORM, be->layernorm_fwd(be, CS, ln1, m1, r1, x, g1, b1, N, h, (float)PPSRT_NORM_EPS));
    if (!epi) OP(C_GEMM, be->gemm(be, CS, 0, 0, N, q, h, 1.0f, ln1, BF, h, wqkv, BF, q, 0.0f, qkv, BF, q));
    else EPOP(PPSRT_EP_BIAS,
              be->gemm_ep(be, CS, PPSRT_EP_BIAS, 0, 0, N, q, h, 1.0f, ln1, BF, h, wqkv, BF, q, 0.0f, qkv, BF, q, bqkv,
                          NULL, NULL),
              be->gemm(be, CS, 0, 0, N, q, h, 1.0f, ln1, BF, h, wqkv, BF, q, 0.0f, qkv, BF, q),
              OP(C_ELEM, be->add_bias(be, CS, qkv, qkv, bqkv, N, q)));
    if (llama) OP(C_ELEM, be->rope(be, CS, qkv, q, pos, rcs, N, H + G, D, 0));
    OP(C_ATTN, be->attention_fwd(be, CS, att, lse, AT(qkv, qo), q, AT(qkv, ko), q, AT(qkv, vo), q, B, s, H, G, D, NULL));
    OP(C_COPY, be->memcpy_async(be, CS, x1, x, Nh * 2, 0));
    if (!epi) OP(C_GEMM, be->gemm(be, CS, 0, 0, N, h, h, 1.0f, att, BF, h, wproj, BF, h, 1.0f, x1, BF, h));
    else EPOP(PPSRT_EP_BIAS,
              be->gemm_ep(be, CS, PPSRT_EP_BIAS, 0, 0, N, h, h, 1.0f, att, BF, h, wproj, BF, h, 1.0f, x1, BF, h, bproj,
                          NULL, NULL),
              be->gemm(be, CS, 0, 0, N, h, h, 1.0f, att, BF, h, wproj, BF, h, 1.0f, x1, BF, h),
              OP(C_ELEM, be->add_bias(be, CS, x1, x1, bproj, N, h)));
    OP(C_NORM, be->layernorm_fwd(be, CS, ln2, m2, r2, x1, g2, b2, N, h, (float)PPSRT_NORM_EPS));
    if (llama) {
      OP(C_GEMM, be->gemm(be, CS, 0, 0, N, fw, h, 1.0f, ln2, BF, h, wfc, BF, fw, 0.0f, hpre, BF, fw));
      OP(C_ELEM, be->swiglu_fwd(be, CS, hact, hpre, N, f));
    } else if (!epi) {
      OP(C_GEMM, be->gemm(be, CS, 0, 0, N, f, h, 1.0f, ln2, BF, h, wfc, BF, f, 0.0f, hpre, BF, f));
      OP(C_ELEM, be->gelu_fwd(be, CS, hact, hpre, (size_t)N * f));
    } else {
      EPOP(PPSRT_EP_BIAS_GELU,
           be->gemm_ep(be, CS, PPSRT_EP_BIAS_GELU, 0, 0, N, f, h, 1.0f, ln2, BF, h, wfc, BF, f, 0.0f, hact, BF,
                       f, bfc, hpre, NULL),
           be->gemm(be, CS, 0, 0, N, f, h, 1.0f, ln2, BF, h, wfc, BF, f, 0.0f, hpre, BF, f),
           OP(C_ELEM, be->add_bias_gelu(be, CS, hact, hpre, hpre, bfc, N, f)));
    }
    OP(C_COPY, be->memcpy_async(be, CS, y, x1, Nh * 2, 0));
    if (!epi) OP(C_GEMM, be->gemm(be, CS, 0, 0, N, h, f, 1.0f, hact, BF, f, wfc2, BF, h, 1.0f, y, BF, h));
    else EPOP(PPSRT_EP_BIAS,
              be->gemm_ep(be, CS, PPSRT_EP_BIAS, 0, 0, N, h, f, 1.0f, hact, BF, f, wfc2, BF, h, 1.0f, y, BF, h,
                          bfc2, NULL, NULL),
              be->gemm(be, CS, 0, 0, N, h, f, 1.0f, hact, BF, f, wfc2, BF, h, 1.0f, y, BF, h),
              OP(C_ELEM, be->add_bias(be, CS, y, y, bfc2, N, h)));
    K(be->event_record(be, ev[1], CS));
    pass = 1;
    /* ---- B: input gradients only ---- */
    if (llama) {   /* model_gpt.c: [dgate | dup] written over [gate | up] (here into dh, from hpre) */
      OP(C_GEMM, be->gemm(be, CS, 0, 1, N, f, h, 1.0f, dy, BF, h, wfc2, BF, h, 0.0f, dh, BF, f));
      OP(C_ELEM, be->swiglu_bwd(be, CS, hpre, dh, hpre, N, f));
    } else if (!hcopy) {
      OP(C_GEMM, be->gemm(be, CS, 0, 1, N, f, h, 1.0f, dy, BF, h, wfc2, BF, h, 0.0f, dh, BF, f));
      OP(C_ELEM, be->gelu_bwd(be, CS, dh, dh, hpre, (size_t)N * f));
    } else {   /* model_gpt.c: hpre copied, then dh = (dy Wfc2^T) * gelu'(copy) in one GEMM */
      OP(C_COPY, be->memcpy_async(be, CS, hcopy, hpre, (size_t)N * f * 2, 0));
      EPOP(PPSRT_EP_DGELU,
           be->gemm_ep(be, CS, PPSRT_EP_DGELU, 0, 1, N, f, h, 1.0f, dy, BF, h, wfc2, BF, h, 0.0f, dh, BF, f,
                       NULL, hcopy, NULL),
           be->gemm(be, CS, 0, 1, N, f, h, 1.0f, dy, BF, h, wfc2, BF, h, 0.0f, dh, BF, f),
           OP(C_ELEM, be->gelu_bwd(be, CS, dh, dh, hpre, (size_t)N * f)));
    }
    void *dpre = llama ? hpre : dh;   /* FC1's output gradient */
    OP(C_GEMM, be->gemm(be, CS, 0, 1, N, h, fw, 1.0f, dpre, BF, fw, wfc, BF, fw, 0.0f, dln2, BF, h));
    OP(C_COPY, be->memcpy_async(be, CS, dx1, dy, Nh * 2, 0));
    OP(C_NORM, be->layernorm_bwd_input(be, CS, dx1, dln2, x1, m2, r2, g2, N, h, 1));
    OP(C_GEMM, be->gemm(be, CS, 0, 1, N, h, h, 1.0f, dx1, BF, h, wproj, BF, h, 0.0f, datt, BF, h));
    OP(C_ATTN, be->attention_bwd(be, CS, AT(dqkv, qo), AT(dqkv, ko), AT(dqkv, vo), q, datt, att, lse, AT(qkv, qo), q,
                        AT(qkv, ko), q, AT(qkv, vo), q, B, s, H, G, D, NULL));
    if (llama) OP(C_ELEM, be->rope(be, CS, dqkv, q, pos, rcs, N, H + G, D, 1));
    OP(C_GEMM, be->gemm(be, CS, 0, 1, N, h, q, 1.0f, dqkv, BF, q, wqkv, BF, q, 0.0f, dln1, BF, h));
    OP(C_COPY, be->memcpy_async(be, CS, dx, dx1, Nh * 2, 0));
    OP(C_NORM, be->layernorm_bwd_input(be, CS, dx, dln1, x, m1, r1, g1, N, h, 1));
    K(be->event_record(be, ev[2], CS));
    pass = 2;
    /* ---- W: weight gradients ---- */
/* a weight gradient dW += X^T dY, with (--epilogue) the bias gradient db += colsum(dY) */
#define WGRAD(M_, N_, X_, ldx_, DY_, dw_, db_)                                                                       \
  do {                                                                                                               \
    if (!epi) OP(C_GEMM, be->gemm(be, CS, 1, 0, M_, N_, N, 1.0f, X_, BF, ldx_, DY_, BF, N_, 1.0f, dw_, F32, N_));   \
    else EPOP(PPSRT_EP_BGRAD,                                                                                        \
              be->gemm_ep(be, CS, PPSRT_EP_BGRAD, 1, 0, M_, N_, N, 1.0f, X_, BF, ldx_, DY_, BF, N_, 1.0f, dw_, F32,  \
                          N_, NULL, NULL, db_),                                                                      \
              be->gemm(be, CS, 1, 0, M_, N_, N, 1.0f, X_, BF, ldx_, DY_, BF, N_, 1.0f, dw_, F32, N_),               \
              OP(C_ELEM, be->bias_grad(be, CS, db_, DY_, N, N_)));                                                   \
  } while (0)
    WGRAD(f, h, hact, f, dy, dwfc2, dbfc2);
    WGRAD(h, fw, ln2, h, dpre, dwfc, dbfc);
    OP(C_NORM, be->layernorm_bwd_weight(be, CS, dg2, db2, dln2, x1, m2, r2, N, h));
    WGRAD(h, h, att, h, dx1, dwproj, dbproj);
    WGRAD(h, q, ln1, h, dqkv, dwqkv, dbqkv);
    OP(C_NORM, be->layernorm_bwd_weight(be, CS, dg1, db1, dln1, x, m1, r1, N, h));
    K(be->event_record(be, ev[3], CS));
    K(be->event_sync(be, ev[3]));
    if (it >= 0) {
      tf[it] = be->event_elapsed(be, ev[0], ev[1]);
      tb[it] = be->event_elapsed(be, ev[1], ev[2]);
      tw[it] = be->event_elapsed(be, ev[2], ev[3]);
      for (int k = 0; k < nop; k++) bsum[bpass[k]][bcls[k]] += be->event_elapsed(be, k ? bev[k - 1] : ev[0], bev[k]);
    }
  }
  double fwd_tok = 2.0 * h * (h + 2.0 * h * G / H) + 2.0 * h * h + 2.0 * (llama ? 3 : 2) * h * f + 4.0 * s * h;
  double flops_f = fwd_tok * N, flops_total = 3 * flops_f;
  double t[3][3];   /* part x (median, min, max) */
  double *arr[3] = {tf, tb, tw};
  for (int k = 0; k < 3; k++) {
    qsort(arr[k], iters, sizeof(double), cmp_double);
    t[k][0] = arr[k][iters / 2];
    t[k][1] = arr[k][0];
    t[k][2] = arr[k][iters - 1];
  }
  double total = t[0][0] + t[1][0] + t[2][0];
  double tflops = flops_total / total / 1e12;
  size_t cur, pk;
  be->mem_stats(be, &cur, &pk, 0);
  printf("# layer_bench: one %s layer on the PPS CUDA backend (F, B, W passes)\n", llama ? "Llama (RMS norm, RoPE, SwiGLU, no bias)" : "GPT");
  printf("# GPU: %s (compute capability %d.%d), %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  long epf = 0, epu = 0;
  ppsrt_cuda_epilogue_calls(be, &epf, &epu);
  if (epi)
    printf("# biases in the layer; epilogues PPSRT_CUDA_EPILOGUE=%s: %ld GEMM calls fused, %ld fell back to the unfused "
           "kernels\n", epi, epf, epu);
  printf("# hidden %d, seq %d, heads %d, query groups %d, head dim %d, batch %d, MLP width %d; bf16, F32 accumulate; "
         "attention: %s\n", h, s, H, G, D, B, f, ppsrt_cuda_attention_path(be));
  printf("# iterations %d after %d warm-up; times: median (min..max) in ms; device memory counted %.2f GiB\n", iters, warm,
         pk / 1073741824.0);
  printf("%-6s %12s %22s\n", "pass", "median_ms", "min..max_ms");
  const char *names[3] = {"F", "B", "W"};
  for (int k = 0; k < 3; k++)
    printf("%-6s %12.3f %10.3f..%-10.3f\n", names[k], t[k][0] * 1e3, t[k][1] * 1e3, t[k][2] * 1e3);
  printf("%-6s %12.3f\n", "F+B+W", total * 1e3);
  printf("# model FLOPs per iteration %.4g (attention counted without the causal half); %.1f TFLOP/s", flops_total,
         tflops);
  if (peak > 0) printf("; MFU %.1f%% of %.0f TFLOP/s", 100.0 * tflops / peak, peak);
  printf("\n");
  double cls_ms[NCLS] = {0}, bd_total = 0;
  if (bd) {
    printf("# breakdown: mean ms per iteration by kernel class (an event after every call)\n");
    printf("%-12s %9s %9s %9s %9s\n", "class", "F", "B", "W", "F+B+W");
    for (int c = 0; c < NCLS; c++) {
      for (int k = 0; k < 3; k++) cls_ms[c] += bsum[k][c] / iters * 1e3;
      bd_total += cls_ms[c];
      printf("%-12s %9.3f %9.3f %9.3f %9.3f\n", cls_name[c], bsum[0][c] / iters * 1e3, bsum[1][c] / iters * 1e3,
             bsum[2][c] / iters * 1e3, cls_ms[c]);
    }
    printf("%-12s %39.3f\n", "total", bd_total);
  }
  int rtv = 0, drv = 0;
  cudaRuntimeGetVersion(&rtv);
  cudaDriverGetVersion(&drv);
  if (json) {
    printf("{\"bench\":\"layer_bench\",\"gpu\":\"%s\",\"cuda_runtime\":%d,\"cuda_driver\":%d,\"attn\":\"%s\","
           "\"arch\":\"%s\",\"hidden\":%d,\"seq\":%d,\"heads\":%d,\"groups\":%d,\"batch\":%d,\"ffn\":%d,"
           "\"iters\":%d,\"f_ms\":%.6g,\"b_ms\":%.6g,\"w_ms\":%.6g,\"total_ms\":%.6g,\"flops\":%.6g,\"tflops\":%.6g,"
           "\"peak_tflops\":%.6g,\"mfu\":%.6g",
           prop.name, rtv, drv, ppsrt_cuda_attention_path(be), llama ? "llama" : "gpt", h, s, H, G, B, f, iters, t[0][0] * 1e3, t[1][0] * 1e3,
           t[2][0] * 1e3, total * 1e3, flops_total, tflops, peak, peak > 0 ? tflops / peak : 0.0);
    if (epi) printf(",\"epilogue\":\"%s\",\"ep_fused\":%ld,\"ep_unfused\":%ld", epi, epf, epu);
    if (bd) {
      printf(",\"breakdown_ms\":{");
      for (int c = 0; c < NCLS; c++) printf("%s\"%s\":%.6g", c ? "," : "", cls_name[c], cls_ms[c]);
      printf("}");
    }
    printf("}\n");
  }
  for (int i = 0; bd && i < MAXOP; i++) be->event_destroy(be, bev[i]);
  for (int i = 0; i < 4; i++) be->event_destroy(be, ev[i]);
  be->destroy(be);   /* releases every pool block */
  free(tf);
  free(tb);
  free(tw);
  return 0;
}
