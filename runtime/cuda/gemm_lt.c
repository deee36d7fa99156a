/* gemm_lt.c: GEMMs with fused epilogues through cuBLASLt, for the CUDA backend's
 * gemm_ep (backend.h): bias, bias + GeLU (keeping the GeLU input), the GeLU gradient,
 * and the bias gradient of a weight-gradient GEMM. cuda_backend.c decides whether to
 * call it (PPSRT_CUDA_EPILOGUE, docs/gpu.md) and gives it a workspace; this file maps
 * the row-major call onto cublasLtMatmul and remembers one algorithm per shape.
 *
 * Row-major C[M, N] = op(A) op(B) is computed, as cuda_backend.c's cuBLAS calls do, as
 * the column-major C^T[N, M] = op(B)^T op(A)^T: cuBLASLt's "A" is our B and its "B" our A,
 * its m = N, n = M, k = K. So, in cuBLASLt's terms:
 *   - a bias over our columns is a vector over D's rows (length m): CUBLASLT_EPILOGUE_BIAS
 *     and GELU_AUX_BIAS broadcast it along D's columns, as we need;
 *   - the GeLU input (aux) has D's layout: rows m = N, leading dimension ldc (cuBLASLt asks
 *     for a multiple of 8, at least m);
 *   - the bias gradient of dW = X^T dY (our B = dY, [K, N], tb = 0) sums dY over K for each
 *     of our columns: a sum over k of cuBLASLt's A, of length m: CUBLASLT_EPILOGUE_BGRADA
 *     (not BGRADB, which sums cuBLASLt's B, our A). BGRADA takes a non-transposed A only,
 *     our tb = 0. The gradient is written, not accumulated, in D's type (F32 here): the
 *     caller adds it into the gradient.
 * Pointer alignment matters to the heuristic (it assumes 256-byte aligned matrices unless
 * told): the alignment of every pointer is passed as a preference and is part of the key
 * of the algorithm cache.
 *
 * Returns 0 when the product ran, 1 when cuBLASLt offers no algorithm for it (or the
 * operands are outside what this file maps: batched, mixed types) and nothing was
 * queued, so the caller runs the unfused kernels; < 0 on an error (message recorded). */
#include "config.h"
/* cublasLt.h declares cublasLtLoggerForceDisable() without a prototype */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_impl.h"

#define LT_CACHE 128

typedef struct lt_key {
  int ep, ta, tb, M, N, K, lda, ldb, ldc, ct;
  int al[5];   /* alignment (bytes, <= 256) of A, B, C, bias, aux */
} lt_key;

typedef struct lt_entry {
  lt_key key;
  int used, ok;   /* ok 0: cuBLASLt has no algorithm (remembered so it is asked once) */
  cublasLtMatmulAlgo_t algo;
} lt_entry;

struct ppsrt_lt {
  cublasLtHandle_t h;
  ppsrt_cublas_fail_fn fail;   /* the backend's error report (cuda_backend.c; a callback, so
                                  that this file does not call back into it) */
  pthread_mutex_t mu;
  lt_entry cache[LT_CACHE];
  int next;   /* round-robin replacement */
};

int ppsrt_lt_create(ppsrt_backend *b, ppsrt_cublas_fail_fn fail, ppsrt_lt **out) {
  *out = NULL;
  ppsrt_lt *lt = calloc(1, sizeof *lt);
  if (!lt) return PPSRT_FAIL(PPSRT_E_NOMEM, "cuda: cannot allocate the cuBLASLt state");
  cublasStatus_t s = cublasLtCreate(&lt->h);
  if (s != CUBLAS_STATUS_SUCCESS) {
    free(lt);
    return fail(b, (int)s, "cublasLtCreate", __FILE__, __LINE__);
  }
  lt->fail = fail;
  pthread_mutex_init(&lt->mu, NULL);
  *out = lt;
  return PPSRT_OK;
}

void ppsrt_lt_destroy(ppsrt_lt *lt) {
  if (!lt) return;
  cublasLtDestroy(lt->h);
  pthread_mutex_destroy(&lt->mu);
  free(lt);
}

static int align_of(const void *p) {
  uintptr_t u = (uintptr_t)p;
  if (!u) return 256;
  int a = 1;
  while (a < 256 && !(u & (uintptr_t)a)) a <<= 1;
  return a;
}

static cublasLtEpilogue_t lt_epilogue(int ep) {
  switch (ep) {
  case PPSRT_EP_BIAS: return CUBLASLT_EPILOGUE_BIAS;
  case PPSRT_EP_BIAS_GELU: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  case PPSRT_EP_DGELU: return CUBLASLT_EPILOGUE_DGELU;
  default: return CUBLASLT_EPILOGUE_BGRADA;   /* PPSRT_EP_BGRAD: see the header */
  }
}

/* descriptors of one call, destroyed by lt_free */
typedef struct lt_descs {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulPreference_t pref;
} lt_descs;

static void lt_free(lt_descs *d) {
  if (d->pref) cublasLtMatmulPreferenceDestroy(d->pref);
  if (d->c) cublasLtMatrixLayoutDestroy(d->c);
  if (d->b) cublasLtMatrixLayoutDestroy(d->b);
  if (d->a) cublasLtMatrixLayoutDestroy(d->a);
  if (d->op) cublasLtMatmulDescDestroy(d->op);
}

#define LT_CHECK(b, d, call)                                                        \
  do {                                                                              \
    cublasStatus_t s_ = (call);                                                     \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                              \
      lt_free(d);                                                                   \
      return lt->fail((b), (int)s_, #call, __FILE__, __LINE__);                     \
    }                                                                               \
  } while (0)

int ppsrt_lt_gemm(ppsrt_backend *b, ppsrt_lt *lt, cudaStream_t s, int ep, int ta, int tb, int M, int N, int K,
                  float alpha, const void *A, int lda, const void *B, int ldb, float beta, void *C, int c_f32, int ldc,
                  const void *bias, void *aux, float *dbias, void *ws, size_t ws_bytes) {
  if (!lt || M <= 0 || N <= 0 || K <= 0) return 1;
  if (ep == PPSRT_EP_BGRAD && (tb || !c_f32 || !dbias)) return 1;
  if ((ep == PPSRT_EP_BIAS || ep == PPSRT_EP_BIAS_GELU) && !bias) return 1;
  if ((ep == PPSRT_EP_BIAS_GELU || ep == PPSRT_EP_DGELU) && (!aux || c_f32 || ldc % 8)) return 1;
  const void *epi_bias = ep == PPSRT_EP_BGRAD ? (const void *)dbias : bias;
  lt_key key = {ep, ta, tb, M, N, K, lda, ldb, ldc, c_f32,
                {align_of(A), align_of(B), align_of(C), align_of(epi_bias), align_of(aux)}};
  cudaDataType_t ab = CUDA_R_16BF, ct = c_f32 ? CUDA_R_32F : CUDA_R_16BF;
  cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t epi = lt_epilogue(ep);
  int64_t aux_ld = ldc;
  uint64_t ws_max = ws_bytes;
  lt_descs d = {0};
  LT_CHECK(b, &d, cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LT_CHECK(b, &d, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  LT_CHECK(b, &d, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  LT_CHECK(b, &d, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  LT_CHECK(b, &d, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epi_bias, sizeof epi_bias));
  if (ep == PPSRT_EP_BIAS_GELU || ep == PPSRT_EP_DGELU) {
    LT_CHECK(b, &d, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    LT_CHECK(b, &d, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
  }
  /* cuBLASLt's A = our B, its B = our A (see the header); stored column-major */
  LT_CHECK(b, &d, cublasLtMatrixLayoutCreate(&d.a, ab, tb ? K : N, tb ? N : K, ldb));
  LT_CHECK(b, &d, cublasLtMatrixLayoutCreate(&d.b, ab, ta ? M : K, ta ? K : M, lda));
  LT_CHECK(b, &d, cublasLtMatrixLayoutCreate(&d.c, ct, N, M, ldc));
  pthread_mutex_lock(&lt->mu);
  lt_entry *e = NULL;
  for (int i = 0; i < LT_CACHE && !e; i++)
    if (lt->cache[i].used && !memcmp(&lt->cache[i].key, &key, sizeof key)) e = &lt->cache[i];
  lt_entry found = e ? *e : (lt_entry){0};
  pthread_mutex_unlock(&lt->mu);
  if (!e) {
    LT_CHECK(b, &d, cublasLtMatmulPreferenceCreate(&d.pref));
    LT_CHECK(b, &d, cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_max,
                                                         sizeof ws_max));
    static const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    /* cuBLASLt's A is our B (key.al[1]), its B our A (key.al[0]); C and D are our C */
    uint32_t al_val[4] = {(uint32_t)key.al[1], (uint32_t)key.al[0], (uint32_t)key.al[2], (uint32_t)key.al[2]};
    for (int i = 0; i < 4; i++)
      LT_CHECK(b, &d, cublasLtMatmulPreferenceSetAttribute(d.pref, al_attr[i], &al_val[i], sizeof al_val[i]));
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    memset(&res, 0, sizeof res);
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt->h, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &res, &nres);
    /* NOT_SUPPORTED or no result: no fused kernel for this case (remembered); anything
     * else is an error */
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
      lt_free(&d);
      return lt->fail(b, (int)st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    }
    found.key = key;
    found.used = 1;
    found.ok = st == CUBLAS_STATUS_SUCCESS && nres > 0 && res.state == CUBLAS_STATUS_SUCCESS &&
               res.workspaceSize <= ws_bytes;
    if (found.ok) found.algo = res.algo;
    pthread_mutex_lock(&lt->mu);
    lt->cache[lt->next] = found;
    lt->next = (lt->next + 1) % LT_CACHE;
    pthread_mutex_unlock(&lt->mu);
  }
  if (!found.ok) {
    lt_free(&d);
    return 1;
  }
  LT_CHECK(b, &d, cublasLtMatmul(lt->h, d.op, &alpha, B, d.a, A, d.b, &beta, C, d.c, C, d.c, &found.algo, ws, ws_bytes,
                                 s));
  lt_free(&d);
  return PPSRT_OK;
}
