/* cuda_impl.h: internal glue of the CUDA backend (cuda_backend.c), its kernels
 * (kernels.cu) and the NCCL transport (transport_nccl.c). Not installed, not public.
 *
 * What it holds: the CUDA_CHECK / CUBLAS_CHECK / NCCL_CHECK error macros (rank, host,
 * GPU, file, line, the library's own message and a `hint:` line, then return a
 * PPSRT_E* code; never exit), the backend's private state, the accessors the
 * transport needs (streams, events, the wait watchdog), and the C prototypes of the
 * kernel launchers defined in kernels.cu.
 *
 * What it does not: no kernel code (kernels.cu), no NCCL types (only the transport
 * includes nccl.h), nothing a model or the interpreter may call directly. */
#ifndef PPSRT_CUDA_IMPL_H
#define PPSRT_CUDA_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifndef __CUDACC__
#include "backend.h"
#endif
#include "moe_router.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------- */
/* kernel launchers (kernels.cu). Every one enqueues on `s` and returns the launch  */
/* status (cudaGetLastError); activations are bf16 (passed as void *).             */

cudaError_t ppsrt_cu_add_bias(cudaStream_t s, void *y, const void *x, const void *bias, int N, int C);
cudaError_t ppsrt_cu_bias_grad(cudaStream_t s, float *dbias, const void *dy, int N, int C);
cudaError_t ppsrt_cu_add(cudaStream_t s, void *y, const void *a, const void *c, size_t n);
/* y = a + dropout(x + bias) (backend.h bias_dropout_add; a, bias may be NULL; the mask's
 * element i is dropout.h's keep(thr, key, base + i)) */
cudaError_t ppsrt_cu_bias_dropout_add(cudaStream_t s, void *y, const void *a, const void *x, const void *bias, int N,
                                      int C, uint32_t thr, float scale, uint64_t key, uint64_t base);
cudaError_t ppsrt_cu_gelu_fwd(cudaStream_t s, void *y, const void *x, size_t n);
cudaError_t ppsrt_cu_gelu_bwd(cudaStream_t s, void *dx, const void *dy, const void *x, size_t n);
/* pre = bf16(x + bias), y = bf16(gelu(pre as stored)); pre may alias x. */
cudaError_t ppsrt_cu_add_bias_gelu(cudaStream_t s, void *y, void *pre, const void *x, const void *bias, int N, int C);
/* Layer norm; mean == NULL: RMS norm (no centering), beta / dbeta == NULL: no shift;
 * eps: added to the variance (mean square) before the reciprocal square root. */
cudaError_t ppsrt_cu_layernorm_fwd(cudaStream_t s, void *y, float *mean, float *rstd, const void *x,
                                   const void *gamma, const void *beta, int N, int C, float eps);
cudaError_t ppsrt_cu_layernorm_bwd_input(cudaStream_t s, void *dx, const void *dy, const void *x,
                                         const float *mean, const float *rstd, const void *gamma,
                                         int N, int C, int accumulate);
cudaError_t ppsrt_cu_layernorm_bwd_weight(cudaStream_t s, float *dgamma, float *dbeta, const void *dy,
                                          const void *x, const float *mean, const float *rstd, int N,
                                          int C);
/* RoPE in place on the first H heads (D columns each) of rows ld apart (backend.h rope). */
cudaError_t ppsrt_cu_rope(cudaStream_t s, void *x, int ld, const int32_t *pos, const float *cs, int N, int H, int D,
                          int inverse);
/* SwiGLU over [gate | up] rows pre [N, 2C]: y [N, C]; dpre [N, 2C] (may alias pre). */
cudaError_t ppsrt_cu_swiglu_fwd(cudaStream_t s, void *y, const void *pre, int N, int C);
/* mixture of experts (backend.h moe_*): the routing, its backward, the permutation and the combine */
cudaError_t ppsrt_cu_moe_route(cudaStream_t s, const float *logits, int N, int E, int K, const ppsrt_moe_router *r,
                               int32_t *idx, float *w, float *stat);
cudaError_t ppsrt_cu_moe_route_bwd(cudaStream_t s, void *dlogits, const float *dw, const float *logits, const int32_t *idx,
                                   const ppsrt_moe_router *r, const float *coef, int N, int E, int K);
cudaError_t ppsrt_cu_moe_permute(cudaStream_t s, void *dst, const void *src, const int32_t *pos, int N, int K, int C);
cudaError_t ppsrt_cu_moe_permute_bwd(cudaStream_t s, void *dx, const void *dp, const int32_t *pos, int N, int K, int C,
                                     int accumulate);
cudaError_t ppsrt_cu_moe_unpermute(cudaStream_t s, void *y, const void *a, const void *e, const int32_t *pos,
                                   const float *w, int N, int K, int C);
cudaError_t ppsrt_cu_moe_unpermute_bwd(cudaStream_t s, void *de, float *dw, const void *dy, const void *e,
                                       const int32_t *pos, const float *w, int N, int K, int C);
cudaError_t ppsrt_cu_swiglu_bwd(cudaStream_t s, void *dpre, const void *dy, const void *pre, int N, int C);
cudaError_t ppsrt_cu_embedding_fwd(cudaStream_t s, void *out, const int32_t *ids, const void *table,
                                   int N, int C, int lo, int hi, int accumulate);
cudaError_t ppsrt_cu_embedding_bwd(cudaStream_t s, float *dtable, const void *dout, const int32_t *ids,
                                   int N, int C, int lo, int hi);
cudaError_t ppsrt_cu_softmax_stats(cudaStream_t s, float *max, float *sumexp, float *tgt,
                                   const void *logits, const int32_t *targets, int N, int V, int lo);
cudaError_t ppsrt_cu_softmax_xent_bwd(cudaStream_t s, void *dlogits, const void *logits,
                                      const float *gmax, const float *gsum, const int32_t *targets,
                                      int N, int V, int lo, float scale);
cudaError_t ppsrt_cu_softmax_rescale_f32(cudaStream_t s, float *x, const float *lmax, const float *lsum,
                                         const float *gmax, const float *gsum, int N, int C);
/* kind 0 SGD, 1 Adam; c1 = 1/(1-beta1^step), c2 = 1/(1-beta2^step) computed by the caller;
 * param (bf16) written when non-NULL. grad zeroed. */
cudaError_t ppsrt_cu_optimizer_step(cudaStream_t s, int kind, float *w, void *param, float *g, float *m,
                                    float *v, size_t n, float lr, float beta1, float beta2, float eps,
                                    float weight_decay, float c1, float c2);
cudaError_t ppsrt_cu_axpy_f32(cudaStream_t s, float *y, const float *x, float a, size_t n);
cudaError_t ppsrt_cu_scale_f32(cudaStream_t s, float *x, float a, size_t n);

/* Conversions and helpers for gemm and upload/download. */
cudaError_t ppsrt_cu_bf16_to_f32(cudaStream_t s, float *dst, const void *src, size_t n);
cudaError_t ppsrt_cu_f32_to_bf16(cudaStream_t s, void *dst, const float *src, size_t n);
/* C[M, N] (row stride ldc) *= beta, C bf16 (is_bf16) or F32; beta 0 writes zeros. */
cudaError_t ppsrt_cu_scale_matrix(cudaStream_t s, void *C, int is_bf16, int M, int N, int ldc, float beta);

/* Attention helpers (the GEMMs themselves are cuBLAS calls in cuda_backend.c). They work
 * on a chunk of query rows [r0, r0 + R) against keys [0, C), C = r0 + R: S is F32
 * [nh][R][C] (raw q.k, unscaled), P bf16 [nh][R][C]; lse and delta hold heads T apart
 * and are indexed by the global row r0 + il. Attention dropout (thr > 0; dropout.h): the
 * probabilities P stores and the dP dscores reads are the dropped ones, element (hh, i,
 * j) of mask index ((hb + hh) Td + i) Td + j, kept ones times dscale (Td: the whole
 * sequence's length, T where the call holds it all; T: lse's and delta's row stride). */
cudaError_t ppsrt_cu_attn_softmax_fwd(cudaStream_t s, void *P, float *lse, const float *S, int nh, int R, int C,
                                      int r0, int T, int Td, float scale, uint32_t thr, float dscale, uint64_t key, uint64_t hb);
/* P = exp(scale*S - lse) for j <= i (dropped), 0 above the diagonal (bf16). */
cudaError_t ppsrt_cu_attn_prob(cudaStream_t s, void *P, const float *S, const float *lse, int nh, int R, int C,
                               int r0, int T, int Td, float scale, uint32_t thr, float dscale, uint64_t key, uint64_t hb);
/* delta[hh][i] = dout[i*ldo + hh*D ..] . out[i*ldo + hh*D ..] over D, all T rows (dout/out
 * point at head h0). */
cudaError_t ppsrt_cu_attn_delta(cudaStream_t s, float *delta, const void *dout, const void *out, int ldo,
                                int nh, int T, int D);
/* dS (bf16, into P's buffer) = exp(scale*S - lse) * (dP - delta) * scale for j <= i, else 0
 * (dP dropped as above). */
cudaError_t ppsrt_cu_attn_dscores(cudaStream_t s, void *dS, const float *S, const float *dP,
                                  const float *lse, const float *delta, int nh, int R, int C, int r0, int T, int Td,
                                  float scale, uint32_t thr, float dscale, uint64_t key, uint64_t hb);
/* dst[r*ldd + c] = src[r*lds + c] (bf16) for r < rows, c < cols (backend copy_rows). */
cudaError_t ppsrt_cu_copy_rows_bf16(cudaStream_t s, void *dst, int ldd, const void *src, int lds, int rows, int cols);
/* dst[t*ldd + d] = bf16(src[t*D + d]) for t < T, d < D. */
cudaError_t ppsrt_cu_store_rows_bf16(cudaStream_t s, void *dst, int ldd, const float *src, int T, int D);
/* dst[t*ldd + hh*D + d] = bf16(src[(hh*T + t)*D + d]) for hh < nh (per-head F32
 * accumulators into the heads' columns). */
cudaError_t ppsrt_cu_store_heads_bf16(cudaStream_t s, void *dst, int ldd, const float *src, int nh, int T, int D);
/* acc[i] += sum_{j < nsum} src[j*n + i] (per-head accumulators into their kv group's). */
cudaError_t ppsrt_cu_sum_heads_f32(cudaStream_t s, float *acc, const float *src, int nsum, size_t n);

/* Fails (cudaErrorNoKernelImageForDevice, ...) when the build has no code for this GPU. */
cudaError_t ppsrt_cu_probe(struct cudaFuncAttributes *attr);

/* In-process collectives (transport_nccl.c's copy channel): dst[i] = op_k src_k[i]. */
#define PPSRT_CU_MAX_SRCS 32
cudaError_t ppsrt_cu_reduce_f32(cudaStream_t s, float *dst, const float *const *srcs, int nsrc, size_t n,
                                int op_max);

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__
/* ------------------------------------------------------------------------- */
/* error reporting                                                             */

/* Each formats "cuda|cublas|nccl: CALL failed on host H, GPU g[, rank r]: NAME: message"
 * plus "hint: ..." and records it with ppsrt_set_error; returns the PPSRT_E* code. */
int ppsrt_cuda_fail_cuda(ppsrt_backend *b, int err, const char *call, const char *file, int line);
int ppsrt_cuda_fail_cublas(ppsrt_backend *b, int status, const char *call, const char *file, int line);
const char *ppsrt_cuda_hostname(void);

#define CUDA_CHECK(b, call)                                                           \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) return ppsrt_cuda_fail_cuda((b), (int)e_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(b, call)                                                         \
  do {                                                                                \
    cublasStatus_t s_ = (call);                                                       \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                  \
      return ppsrt_cuda_fail_cublas((b), (int)s_, #call, __FILE__, __LINE__);         \
  } while (0)

/* ------------------------------------------------------------------------- */
/* services of the backend used by the transport                               */

/* The stream behind a backend stream id (NULL and a recorded error when invalid). */
cudaStream_t ppsrt_cuda_stream(ppsrt_backend *b, int stream);
/* The ordering event behind a ppsrt_event. */
cudaEvent_t ppsrt_cuda_event(ppsrt_event *e);
/* The transport attaches itself: the rank (for messages), the wait timeout, and a
 * watchdog called while a host wait polls (returns 0, or a PPSRT_E* code after
 * recording the error: an NCCL asynchronous error, an abort by another rank). On a
 * timeout the backend calls on_timeout(ctx, rank, what) before failing. */
typedef int (*ppsrt_cuda_watch_fn)(void *ctx, int rank);
typedef void (*ppsrt_cuda_timeout_fn)(void *ctx, int rank, const char *what);
void ppsrt_cuda_attach(ppsrt_backend *b, int rank, double timeout_s, ppsrt_cuda_watch_fn watch,
                       ppsrt_cuda_timeout_fn on_timeout, void *ctx);
/* Host wait for a CUDA event with polling, the watchdog and the timeout. */
int ppsrt_cuda_wait(ppsrt_backend *b, cudaEvent_t ev, const char *what);
/* Under MPI (one rank per process) the NCCL transport records its GPU here, and every
 * backend created afterwards in the process uses it. */
void ppsrt_cuda_set_process_device(int dev);
/* The device ordinal this backend runs on. */
int ppsrt_cuda_device(ppsrt_backend *b);
/* The attention path this backend runs: "cudnn" (fused, PPSRT_CUDA_ATTN) or "cublas". */
const char *ppsrt_cuda_attention_path(ppsrt_backend *b);
/* Attention calls (forward and backward) run so far fused (cuDNN) and on the cuBLAS path. */
void ppsrt_cuda_attention_calls(ppsrt_backend *b, long *fused, long *unfused);
/* Fused GEMM epilogues (gemm_ep, PPSRT_CUDA_EPILOGUE): the PPSRT_EP_* bits this backend
 * fuses, and the gemm_ep calls run fused so far and those that fell back to the unfused
 * kernels (switched off, or no cuBLASLt algorithm for the operands). */
unsigned ppsrt_cuda_epilogues(ppsrt_backend *b);
void ppsrt_cuda_epilogue_calls(ppsrt_backend *b, long *fused, long *unfused);
/* gemm_lt.c: the cuBLASLt side of gemm_ep (row-major operands, bf16 A and B, C bf16 or
 * F32 (c_f32)); 0 done, 1 nothing queued (no algorithm: run the unfused kernels), < 0
 * error. PPSRT_EP_BGRAD writes the bias gradient (F32 [N]) to dbias, not adding. */
typedef struct ppsrt_lt ppsrt_lt;
typedef int (*ppsrt_cublas_fail_fn)(ppsrt_backend *b, int status, const char *call, const char *file, int line);
int ppsrt_lt_create(ppsrt_backend *b, ppsrt_cublas_fail_fn fail, ppsrt_lt **out);   /* fail: ppsrt_cuda_fail_cublas */
void ppsrt_lt_destroy(ppsrt_lt *lt);
int ppsrt_lt_gemm(ppsrt_backend *b, ppsrt_lt *lt, cudaStream_t s, int ep, int ta, int tb, int M, int N, int K,
                  float alpha, const void *A, int lda, const void *B, int ldb, float beta, void *C, int c_f32, int ldc,
                  const void *bias, void *aux, float *dbias, void *ws, size_t ws_bytes);
/* Record-stream: device buffer p (from any CUDA backend of the process) is used by work
 * queued on stream s, which is not one of the backend's five; the allocator does not
 * hand p out again before that work is done (an event per use, at most
 * PPSRT_CUDA_NXEV in flight per buffer; past that the host waits for the oldest). */
#define PPSRT_CUDA_NXEV 4
int ppsrt_cuda_record_use(ppsrt_backend *b, void *p, cudaStream_t s);
#endif
#endif
