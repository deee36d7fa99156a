/* backend.h: the interface every compute backend of libppsrt implements (CPU in
 * cpu_backend.c, CUDA in cuda/), internal to the library.
 *
 * The models (model_mlp.c, model_gpt.c) are written ONCE against this table: they
 * never touch tensor data themselves, so the same model code runs on the CPU and on
 * the GPU. A backend owns the memory of its device (host RAM for CPU, one GPU for
 * CUDA), its streams, and the numerical kernels.
 *
 * Data types: activations and weights are stored in the backend's `act_dtype`
 * (CPU: F32; CUDA: BF16); weight gradients, optimizer state, layer-norm statistics,
 * softmax statistics and losses are always F32. gemm takes each operand's dtype and
 * accumulates in F32.
 *
 * Streams: every call takes a stream. Stream 0 (PPSRT_STREAM_COMPUTE) is compute;
 * the others order copies and communication. Ordering across streams goes through
 * events only (event_record on one, stream_wait_event on another); nothing in the
 * steady state synchronises the whole device. On the CPU backend every stream is
 * synchronous on the calling thread except the copy streams, which run on a copy
 * thread so offload overlaps compute; events are then real completion flags.
 *
 * Errors: functions return 0 or a negative PPSRT_E* code after recording a message
 * (rank, file, line, library message, hint) retrievable with ppsrt_last_error(). */
#ifndef PPSRT_BACKEND_H
#define PPSRT_BACKEND_H
#include <stddef.h>
#include <stdint.h>
#include "dropout.h"

typedef enum ppsrt_dtype { PPSRT_F32, PPSRT_BF16 } ppsrt_dtype;

static inline size_t ppsrt_dtype_size(ppsrt_dtype t) { return t == PPSRT_F32 ? 4 : 2; }

enum {
  PPSRT_STREAM_COMPUTE = 0,
  PPSRT_STREAM_SEND = 1,
  PPSRT_STREAM_RECV = 2,
  PPSRT_STREAM_D2H = 3,   /* offload */
  PPSRT_STREAM_H2D = 4,   /* reload */
  PPSRT_STREAM_DP = 5,    /* --data-parallel gradient all-reduces (runtime/replica.c) */
  PPSRT_NSTREAMS = 6
};

enum {
  PPSRT_OK = 0,
  PPSRT_E_NOMEM = -1,     /* device or host allocation failed */
  PPSRT_E_BACKEND = -2,   /* library error (cuBLAS, CUDA, BLAS) */
  PPSRT_E_COMM = -3,      /* transport error (MPI, NCCL, a peer died) */
  PPSRT_E_TIMEOUT = -4,   /* waited longer than --timeout */
  PPSRT_E_USAGE = -5,     /* bad flags or sizes */
  PPSRT_E_CHECK = -6      /* --check found a mismatch */
};

typedef struct ppsrt_event ppsrt_event;       /* opaque, backend specific */
typedef struct ppsrt_backend ppsrt_backend;

/* A tensor is a pointer into backend memory plus what the model knows of it. */
typedef struct ppsrt_tensor {
  void *data;
  size_t numel;
  ppsrt_dtype dtype;
} ppsrt_tensor;

#include "moe_router.h"   /* ppsrt_moe_router (moe_route below) */

struct ppsrt_backend {
  const char *name;          /* "cpu", "cuda" */
  ppsrt_dtype act_dtype;     /* dtype of activations and weights */
  int device_index;          /* GPU ordinal, or the device rank on CPU */
  void *impl;                /* backend private state */

  /* ---- memory: device memory (counted by the activation store) and pinned host ---- */
  int (*alloc)(ppsrt_backend *b, size_t bytes, void **out);
  void (*free)(ppsrt_backend *b, void *p);
  int (*host_alloc)(ppsrt_backend *b, size_t bytes, void **out);   /* pinned on CUDA */
  void (*host_free)(ppsrt_backend *b, void *p);
  int (*memset0)(ppsrt_backend *b, int stream, void *p, size_t bytes);
  /* Copies: kind 0 = device->device, 1 = host->device, 2 = device->host; async on `stream`. */
  int (*memcpy_async)(ppsrt_backend *b, int stream, void *dst, const void *src, size_t bytes, int kind);
  /* Converts between F32 host arrays and tensors of any dtype (init, --check). Synchronous. */
  int (*upload_f32)(ppsrt_backend *b, ppsrt_tensor dst, const float *src);
  int (*download_f32)(ppsrt_backend *b, float *dst, ppsrt_tensor src);

  /* ---- streams and events ---- */
  int (*event_create)(ppsrt_backend *b, ppsrt_event **out);
  void (*event_destroy)(ppsrt_backend *b, ppsrt_event *e);
  int (*event_record)(ppsrt_backend *b, ppsrt_event *e, int stream);
  int (*stream_wait_event)(ppsrt_backend *b, int stream, ppsrt_event *e);
  int (*event_sync)(ppsrt_backend *b, ppsrt_event *e);        /* host waits */
  int (*event_query)(ppsrt_backend *b, ppsrt_event *e);       /* 1 done, 0 not yet, <0 error */
  int (*stream_sync)(ppsrt_backend *b, int stream);
  /* Seconds between two recorded events (for measured timelines), or < 0 if unknown. */
  double (*event_elapsed)(ppsrt_backend *b, ppsrt_event *start, ppsrt_event *end);

  /* ---- kernels, all on `stream`; row-major; sizes in elements ---- */
  /* C[M,N] = alpha * op(A) op(B) + beta * C, op(X) = X or X^T (ta/tb), F32 accumulate.
   * A is M x K after op, B is K x N after op; lda/ldb/ldc are row strides as stored. */
  int (*gemm)(ppsrt_backend *b, int stream, int ta, int tb, int M, int N, int K, float alpha,
              const void *A, ppsrt_dtype at, int lda, const void *B, ppsrt_dtype bt, int ldb,
              float beta, void *C, ppsrt_dtype ct, int ldc);
  /* Batched: count independent gemms, operands strided by sA/sB/sC elements. */
  int (*gemm_strided)(ppsrt_backend *b, int stream, int ta, int tb, int M, int N, int K, float alpha,
                      const void *A, ppsrt_dtype at, int lda, long sA, const void *B, ppsrt_dtype bt,
                      int ldb, long sB, float beta, void *C, ppsrt_dtype ct, int ldc, long sC, int count);
  /* y = x + bias (bias over the last dim C, rows N); y may alias x. */
  int (*add_bias)(ppsrt_backend *b, int stream, void *y, const void *x, const void *bias, int N, int C);
  /* dbias (F32) += column sums of dy[N, C]. */
  int (*bias_grad)(ppsrt_backend *b, int stream, float *dbias, const void *dy, int N, int C);
  /* y = a + b elementwise (residual); y may alias a. */
  int (*add)(ppsrt_backend *b, int stream, void *y, const void *a, const void *c, size_t n);
  /* y = gelu(x) (tanh form); dx = dy * gelu'(x) (dx may alias dy or x: elementwise). */
  int (*gelu_fwd)(ppsrt_backend *b, int stream, void *y, const void *x, size_t n);
  int (*gelu_bwd)(ppsrt_backend *b, int stream, void *dx, const void *dy, const void *x, size_t n);
  /* Layer norm over the last dim C of x[N, C]: y, and F32 mean[N], rstd[N].
   * mean == NULL: RMS norm (Zhang & Sennrich 2019; --rmsnorm) in all three calls: no
   * centering, rstd = 1 / sqrt(mean_c x^2 + eps), y = x rstd gamma (layer norm:
   * rstd = 1 / sqrt(var + eps), var biased). eps > 0: the caller's model's
   * --norm-epsilon (a parameter, not a backend global, so models may differ). The
   * backward halves read rstd, so take no eps. beta == NULL (and dbeta == NULL in the
   * weight gradient): no shift. */
  int (*layernorm_fwd)(ppsrt_backend *b, int stream, void *y, float *mean, float *rstd,
                       const void *x, const void *gamma, const void *beta, int N, int C, float eps);
  /* Input gradient only (B): dx (+)= ... ; accumulate = 1 adds into dx (residual paths). */
  int (*layernorm_bwd_input)(ppsrt_backend *b, int stream, void *dx, const void *dy, const void *x,
                             const float *mean, const float *rstd, const void *gamma, int N, int C,
                             int accumulate);
  /* Weight gradient only (W): dgamma, dbeta (F32) += ... */
  int (*layernorm_bwd_weight)(ppsrt_backend *b, int stream, float *dgamma, float *dbeta,
                              const void *dy, const void *x, const float *mean, const float *rstd,
                              int N, int C);
  /* Rotary position embedding (RoPE, Su et al. 2021; --rope), in the rotate-half layout
   * of GPT-NeoX, Llama and Megatron-LM's default, in place on the first H heads (D
   * columns each) of every row of x (act_dtype, row stride ld): for row n, head j and
   * i < D/2, with c = cs[(pos[n] D/2 + i) 2], s = cs[(pos[n] D/2 + i) 2 + 1],
   *   a = x[n, jD + i], b = x[n, jD + i + D/2]:
   *   x[n, jD + i] = a c - b s,   x[n, jD + i + D/2] = b c + a s     (in F32);
   * inverse = 1 rotates the other way (s negated): the input gradient of the forward.
   * pos: int32 device [N] (each token's position); cs: F32 device [seq, D/2, 2], the
   * cosines and sines the model computes once (model_gpt.c rope_table). */
  int (*rope)(ppsrt_backend *b, int stream, void *x, int ld, const int32_t *pos, const float *cs, int N, int H, int D,
              int inverse);
  /* SwiGLU (Shazeer 2020; --swiglu): pre [N, 2C] holds [gate | up] per row;
   *   y[n, c] = silu(g) u,  g = pre[n, c], u = pre[n, C + c], silu(g) = g sigmoid(g),
   * in F32 from pre as stored; y [N, C]. Backward (B), from dy [N, C]:
   *   dpre[n, c] = dy u silu'(g),  dpre[n, C + c] = dy silu(g),
   *   silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g)));  dpre may alias pre. */
  int (*swiglu_fwd)(ppsrt_backend *b, int stream, void *y, const void *pre, int N, int C);
  int (*swiglu_bwd)(ppsrt_backend *b, int stream, void *dpre, const void *dy, const void *pre, int N, int C);
  /* Causal self-attention with grouped query heads on one microbatch.
   * q [T, Hq*D], k and v [T, Hkv*D] (rows of the fused projections may be strided:
   * ldq/ldk/ldv), out [T, Hq*D]; lse [Hq, T] F32 log-sum-exp kept for backward.
   * batch > 1 repeats over independent sequences laid out one after another.
   * drop (NULL or thr 0: none; --attention-dropout, dropout.h): the probabilities that
   * multiply v are dropped, P~_ij = keep(((b heads + base + h) T + i) T + j) P_ij scale
   * (lse stays that of P); the backward regenerates the same mask. */
  int (*attention_fwd)(ppsrt_backend *b, int stream, void *out, float *lse, const void *q, int ldq,
                       const void *k, int ldk, const void *v, int ldv, int batch, int T, int Hq,
                       int Hkv, int D, const ppsrt_dropout *drop);
  int (*attention_bwd)(ppsrt_backend *b, int stream, void *dq, void *dk, void *dv, int ldd,
                       const void *dout, const void *out, const float *lse, const void *q, int ldq,
                       const void *k, int ldk, const void *v, int ldv, int batch, int T, int Hq,
                       int Hkv, int D, const ppsrt_dropout *drop);
  /* Embedding rows [lo, hi) of a table [hi-lo, C]: out[n] (+)= table[ids[n]-lo] for ids in
   * range, 0 (or unchanged when accumulate) otherwise. ids are int32 in device memory. */
  int (*embedding_fwd)(ppsrt_backend *b, int stream, void *out, const int32_t *ids, const void *table,
                       int N, int C, int lo, int hi, int accumulate);
  /* dtable (F32) += scatter of dout rows whose ids fall in [lo, hi). */
  int (*embedding_bwd)(ppsrt_backend *b, int stream, float *dtable, const void *dout, const int32_t *ids,
                       int N, int C, int lo, int hi);
  /* Softmax statistics of logits [N, V] (a vocabulary shard covering ids [lo, lo+V)):
   * F32 max[N], sumexp[N] (relative to max) and target logit tgt[N] (0 when the target
   * is outside the shard). Merging shards: see model_gpt.c (online softmax). */
  int (*softmax_stats)(ppsrt_backend *b, int stream, float *max, float *sumexp, float *tgt,
                       const void *logits, const int32_t *targets, int N, int V, int lo);
  /* dlogits = (softmax(logits) - onehot(target)) * scale, given the GLOBAL max and sumexp. */
  int (*softmax_xent_bwd)(ppsrt_backend *b, int stream, void *dlogits, const void *logits,
                          const float *gmax, const float *gsum, const int32_t *targets, int N, int V,
                          int lo, float scale);
  /* Optimizer on F32 master weights, then writes the act_dtype copy (may alias master on CPU).
   * kind 0 = SGD (m, v unused), 1 = Adam (step is 1-based). grad is zeroed afterwards. */
  int (*optimizer_step)(ppsrt_backend *b, int stream, int kind, float *master, void *param,
                        float *grad, float *m, float *v, size_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, int step);
  /* Elementwise F32 helpers on device memory: y = a*x + y, and x *= a. */
  int (*axpy_f32)(ppsrt_backend *b, int stream, float *y, const float *x, float a, size_t n);
  int (*scale_f32)(ppsrt_backend *b, int stream, float *x, float a, size_t n);

  void (*destroy)(ppsrt_backend *b);

  /* ---- added for the activation store and the GPT model (every backend implements) ---- */
  /* Bytes allocated through alloc now and at the peak since creation or the last reset
   * (reset_peak = 1 sets the peak to the current value after reading). */
  int (*mem_stats)(ppsrt_backend *b, size_t *current, size_t *peak, int reset_peak);
  /* Online-softmax merge of vocabulary shards, in place on F32 x[N, C]:
   *   x[n, c] *= exp(lmax[n] - gmax[n]) * (lsum ? lsum[n] : 1) / (gsum ? gsum[n] : 1).
   * With C = 1, x = a shard's sumexp, lsum = gsum = NULL it rescales the shard's sum to
   * the global max before the sum all-reduce; Vocab-2 uses it on the partial input
   * gradient (see model_gpt.c). */
  int (*softmax_rescale_f32)(ppsrt_backend *b, int stream, float *x, const float *lmax,
                             const float *lsum, const float *gmax, const float *gsum, int N, int C);
  /* dst[i] = src[i] converted from dtype st to dt (n elements; F32 <-> BF16, or a copy
   * when st == dt). The vocabulary all-reduces run in F32 on act_dtype tensors. */
  int (*convert)(ppsrt_backend *b, int stream, void *dst, ppsrt_dtype dt, const void *src, ppsrt_dtype st,
                 size_t n);
  /* Optional (NULL: nothing to do). Called by the interpreter between iterations, once
   * every rank finished the iteration's communication: a caching allocator releases
   * blocks the last iterations did not use (CUDA: the only place it calls cudaFree). */
  int (*trim)(ppsrt_backend *b);
  /* Fused bias + GeLU over rows N of width C (the MLP's first product's epilogue):
   *   pre[n, c] = x[n, c] + bias[c]   (stored in act_dtype; pre may alias x),
   *   y[n, c]   = gelu(pre[n, c])     from pre as stored (rounded to act_dtype),
   * so the result is exactly add_bias then gelu_fwd, in one pass over memory. pre is
   * kept because gelu_bwd needs it. (There is no fused backward: B takes gelu' and W
   * the bias gradient, in different passes.) */
  int (*add_bias_gelu)(ppsrt_backend *b, int stream, void *y, void *pre, const void *x, const void *bias, int N,
                       int C);
  /* Optional (NULL: the interpreter runs an overlapped pair's two passes one after the
   * other on the compute stream, as the CPU backend does). An overlapped F&B pair
   * (`overlap { }`, ppsrt.h flag 2) on two compute streams, called by the interpreter:
   *   PPSRT_OVERLAP_FORK   before the first pass: the second compute stream waits for
   *                        the work queued so far on COMPUTE (both passes' inputs);
   *   PPSRT_OVERLAP_SECOND before the second pass: on the calling thread, stream
   *                        PPSRT_STREAM_COMPUTE now names the second compute stream;
   *   PPSRT_OVERLAP_JOIN   after it (also after a failure): COMPUTE is the compute
   *                        stream again and waits for the second stream's work, so
   *                        everything queued later sees both passes' outputs.
   * The allocator orders block reuse against both compute streams. */
  int (*overlap)(ppsrt_backend *b, int phase);
  /* Optional (NULL, and epilogues 0: nothing fused; the CUDA backend sets them when
   * PPSRT_CUDA_EPILOGUE asks, docs/gpu.md). gemm (bf16 operands, no batch) with a fused
   * epilogue ep, one of the PPSRT_EP_* bits set in `epilogues`, row-major as gemm:
   *   PPSRT_EP_BIAS       C = alpha op(A) op(B) + beta C + bias[n]        (bias act_dtype [N])
   *   PPSRT_EP_BIAS_GELU  aux = alpha op(A) op(B) + beta C + bias[n];  C = gelu(aux), from
   *                       the F32 value (aux act_dtype, [M, N] with row stride ldc)
   *   PPSRT_EP_DGELU      C = (alpha op(A) op(B) + beta C) * gelu'(aux)  (aux as above, read;
   *                       C must not overlap aux)
   *   PPSRT_EP_BGRAD      C = alpha op(A) op(B) + beta C (F32) and dbias[n] += sum_k op(B)[k, n]
   *                       (F32 [N]; tb = 0: B is the output gradient of dW = X^T dY)
   * Returns 1 when it fused nothing and queued nothing (ep switched off, or no fused
   * kernel for these operands): the caller runs the unfused kernels; 0 done; < 0 error. */
  unsigned epilogues;
  int (*gemm_ep)(ppsrt_backend *b, int stream, int ep, int ta, int tb, int M, int N, int K, float alpha,
                 const void *A, ppsrt_dtype at, int lda, const void *B, ppsrt_dtype bt, int ldb, float beta, void *C,
                 ppsrt_dtype ct, int ldc, const void *bias, void *aux, float *dbias);
  /* Dropout on rows N of width C (d->thr > 0; dropout.h), Megatron-LM's bias-dropout-add:
   *   y[n, c] = (a ? a[n, c] : 0) + (keep(d->base + n C + c) ? (x[n, c] + (bias ? bias[c] : 0)) d->scale : 0)
   * in F32 from the stored values, rounded once to act_dtype; y may alias a or x. With a
   * and bias NULL it is the dropout alone (the backward's: the same mask on a gradient). */
  int (*bias_dropout_add)(ppsrt_backend *b, int stream, void *y, const void *a, const void *x, const void *bias,
                          int N, int C, const ppsrt_dropout *d);
  /* ---- mixture of experts (runtime/moe.c; docs/models.md "Mixture of experts"). Optional:
   * NULL on a backend without them, which then refuses --num-experts. Token n's K slots
   * are n K + k; pos[n K + k] is the slot's row in the permuted (expert-sorted) buffer. ----
   * Routing of N tokens over E experts, top K, from F32 logits l [N, E], with the router's
   * options r (NULL: Megatron-Core's default, softmax over the top-K logits):
   *   selection scores  softmax (r->sigmoid 0): l, or with r->pre_softmax p = softmax(l) over
   *                     all E; sigmoid (1): s = 1 / (1 + exp(-l)), plus r->bias[e] when r->bias
   *                     (F32 [E], the backend's memory; for the choice only)
   *   idx[n K + k] = the expert of the k-th largest score of row n (descending; ties: the
   *                  lower expert index first)                          (int32 [N, K])
   *   w[n K + k]  = r->scale x (softmax: softmax over the K selected logits, exp(l_k - l_0) /
   *                 sum_j exp(l_j - l_0); pre_softmax: p at the expert; sigmoid: s at the
   *                 expert, with K > 1 divided by (the K selected s summed + 1e-20))
   *                 (scale 0 means 1)
   *   stat[e] = slots routed to e by the scores without the bias (a count, in F32),
   *   stat[E + e] = sum_n a[n, e], the load-balancing loss's scores: a = p (softmax), or
   *                 s / (sum over all E of s + 1e-20) (sigmoid),
   *   stat[2 E] = sum_n lse_n^2, lse_n = log sum_e exp(l[n, e]) (the z-loss)   (F32 [2E + 1]) */
  int (*moe_route)(ppsrt_backend *b, int stream, const float *logits, int N, int E, int K,
                   const ppsrt_moe_router *r, int32_t *idx, float *w, float *stat);
  /* Its backward into dlogits (act_dtype [N, E]), from dw (F32 [N, K], the gradient of w) and
   * the same logits, idx and r (every score recomputed from the logits):
   *   the weights' chain rule at the selected experts (through the scale, and the top-K
   *   softmax, the full softmax or the sigmoid and its renormalisation), 0 elsewhere but
   *   for pre_softmax (whose softmax spans all E)
   *   + with coef (F32 [E]; NULL: none; the load-balancing loss's dL/da[n, e] = coef[e])
   *     softmax: p[n, e] (coef[e] - sum_j p[n, j] coef[j]); sigmoid: s (1 - s) / (sum s +
   *     1e-20) (coef[e] - sum_j a[n, j] coef[j])
   *   + r->zcoef lse_n p[n, e] (the z-loss's; zcoef 0: none);  in F32, rounded once. */
  int (*moe_route_bwd)(ppsrt_backend *b, int stream, void *dlogits, const float *dw, const float *logits,
                       const int32_t *idx, const ppsrt_moe_router *r, const float *coef, int N, int E, int K);
  /* The four moe_* below: a slot whose pos is below 0 (dropped over an expert's capacity, or
   * another expert-parallel rank's) has no row: not copied, summed or combined, its dw 0. */
  /* Permute: dst[pos[n K + k]] = src[n] (act_dtype; src [N, C], dst [N K, C]). */
  int (*moe_permute)(ppsrt_backend *b, int stream, void *dst, const void *src, const int32_t *pos, int N, int K, int C);
  /* Its backward: dx[n] = (accumulate ? dx[n] : 0) + sum_k dp[pos[n K + k]], in F32 in k order. */
  int (*moe_permute_bwd)(ppsrt_backend *b, int stream, void *dx, const void *dp, const int32_t *pos, int N, int K,
                         int C, int accumulate);
  /* Unpermute (the weighted combine): y[n] = (a ? a[n] : 0) + sum_k w[n K + k] e[pos[n K + k]], in F32
   * in k order, rounded once (y may alias a; y, a [N, C], e [rows, C]). */
  int (*moe_unpermute)(ppsrt_backend *b, int stream, void *y, const void *a, const void *e, const int32_t *pos,
                       const float *w, int N, int K, int C);
  /* Its backward: dw[n K + k] = sum_c dy[n, c] e[pos[n K + k], c] (F32; dw NULL: not computed), then
   * de[pos[n K + k]] = w[n K + k] dy[n] (act_dtype); de may alias e (each row read before written). */
  int (*moe_unpermute_bwd)(ppsrt_backend *b, int stream, void *de, float *dw, const void *dy, const void *e,
                           const int32_t *pos, const float *w, int N, int K, int C);
  /* Optional (NULL: the backend cannot run --context-parallel, which then refuses it). A
   * block of queries of ONE sequence at global positions [q0, q0 + Tq) attending causally
   * to the keys at positions [0, q0 + Tq) (--context-parallel, runtime/cp.c): q [Tq rows],
   * k and v [Tk = q0 + Tq rows], out [Tq, Hq*D] dense, lse [Hq, Tq]; query i sees key j
   * when j <= q0 + i; otherwise attention_fwd's math, drop (NULL or thr 0: none) indexed
   * ((heads b' + base + h) seq + q0 + i) seq + j (b' = 0: the caller folds the sequence
   * into base; seq the whole sequence's length, drop->seq). With q0 = 0 it is
   * attention_fwd of one sequence. The backward writes dq (Tq rows, row stride lddq), dk
   * and dv (Tk rows, row stride lddk): the gradients of this block's scores alone (the
   * caller adds up a sequence's blocks). */
  int (*attention_fwd_at)(ppsrt_backend *b, int stream, void *out, float *lse, const void *q, int ldq, const void *k,
                          int ldk, const void *v, int ldv, int Tq, int q0, int Hq, int Hkv, int D,
                          const ppsrt_dropout *drop);
  int (*attention_bwd_at)(ppsrt_backend *b, int stream, void *dq, int lddq, void *dk, void *dv, int lddk,
                          const void *dout, const void *out, const float *lse, const void *q, int ldq, const void *k,
                          int ldk, const void *v, int ldv, int Tq, int q0, int Hq, int Hkv, int D,
                          const ppsrt_dropout *drop);
  /* Optional (NULL: the caller copies row by row with memcpy_async). A strided copy of
   * act_dtype elements: dst[r ldd + c] = src[r lds + c] for r < rows, c < cols (one
   * kernel: --context-parallel's keys and values out of and back into the fused QKV rows). */
  int (*copy_rows)(ppsrt_backend *b, int stream, void *dst, int ldd, const void *src, int lds, int rows, int cols);
};

enum { PPSRT_EP_BIAS = 1, PPSRT_EP_BIAS_GELU = 2, PPSRT_EP_DGELU = 4, PPSRT_EP_BGRAD = 8 };

/* PPSRT_OVERLAP_LANE: called once on the collective lane's thread (coll_lane.c): from
 * then on COMPUTE names the backend's lane stream on that thread (CUDA). */
enum { PPSRT_OVERLAP_JOIN = 0, PPSRT_OVERLAP_FORK = 1, PPSRT_OVERLAP_SECOND = 2, PPSRT_OVERLAP_LANE = 3 };

/* Backends the library was built with. Each returns 0 and fills *out, or an error
 * (e.g. no GPU visible: PPSRT_E_BACKEND with a message). */
int ppsrt_cpu_backend_create(int device_index, ppsrt_backend **out);
int ppsrt_cuda_backend_create(int device_index, ppsrt_backend **out);   /* cuda/ */

/* Error reporting shared by backends and transports (runtime/error.c). */
int ppsrt_set_error(int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *ppsrt_last_error(void);
#define PPSRT_FAIL(code, ...) ppsrt_set_error((code), __FILE__, __LINE__, __VA_ARGS__)
#endif
