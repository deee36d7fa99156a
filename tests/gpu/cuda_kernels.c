/* tests/gpu/cuda_kernels.c: checks every kernel of the CUDA backend against the CPU
 * backend (the numerical reference, runtime/cpu_kernels.c) on random inputs, then the
 * CUDA backend's memory, streams and events, then the NCCL transport's point-to-point
 * and collective calls with ranks as threads of this process.
 *
 * Inputs are drawn in F32, rounded to bf16 (so both backends see the very same
 * numbers), uploaded to both; outputs are compared element by element with
 *     |gpu - cpu| <= abs * rms(cpu) + rel * |cpu|
 * where (abs, rel) is stated per check:
 *   TOL_BF16 = (1/64, 1/64): bf16 outputs (about 4 bf16 ulps, F32 math inside);
 *   TOL_MM   = (2e-2, 2e-2): products with bf16 intermediates (GEMMs with bf16 C,
 *              attention forward: P enters the tensor-core GEMM in bf16);
 *   TOL_ATTN_BWD = (5e-2 r, 2e-2): attention backward: dS enters the GEMMs in bf16 and its
 *              rows sum to zero, so dQ and dK are sums with cancellation; dK and dV of a
 *              key sum up to T x (Hq/Hkv) terms each rounded to bf16, whose errors grow as
 *              the square root of that count: r = max(1, sqrt(T Hq/Hkv / 1024)) (1 up to
 *              T = 256 with 4 heads a group; 1.41 at T = 512; a zeroed or 10% scaled
 *              gradient stays far outside). Attention outputs also get a per-tensor
 *              check, ||gpu - cpu|| <= 2^-5 ||cpu|| (8 bf16 unit roundoffs), which an
 *              elementwise bound that small values pass cannot replace;
 *   TOL_F32  = (1e-4, 1e-4): F32 outputs of F32 arithmetic on identical inputs (only
 *              the order of the additions differs).
 * Dropout (runtime/dropout.h): the two backends must drop the very same elements, bit
 * for bit (bias_dropout_add's zeros; attention with dropout in one chunk, in row
 * chunks and in split head units), and agree on the values at the tolerances above.
 * A failure prints the check, the first differing element and the largest error.
 *
 * Usage: cuda_kernels            run the checks (exit 77 when no GPU is visible)
 *        cuda_kernels --count    print the number of visible GPUs (0 when none: no device,
 *                                or no driver); exit 1 on any other CUDA error
 *        cuda_kernels --no-device  on a machine WITHOUT a GPU, check that creating the
 *                                CUDA backend fails cleanly with "no CUDA device visible"
 *                                and a hint (exit 77 when a GPU is visible). */
#include "config.h"
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "transport.h"
#include "cuda/cuda_impl.h"
#ifdef HAVE_CUDNN_FE
#include "cuda/attn_cudnn.h"
#endif

typedef struct tol { double abs, rel; } tol;
static const tol TOL_BF16 = {1.0 / 64, 1.0 / 64}, TOL_MM = {2e-2, 2e-2}, TOL_ATTN_BWD = {5e-2, 2e-2},
                 TOL_F32 = {1e-4, 1e-4};

static ppsrt_backend *cpu, *gpu;
static int failures, checks;

static void die(const char *what, int rc) {
  fprintf(stderr, "FAIL: %s returned %d: %s\n", what, rc, ppsrt_last_error());
  exit(1);
}
#define OK(call)                    \
  do {                              \
    int rc_ = (call);               \
    if (rc_) die(#call, rc_);       \
  } while (0)

/* ---- random numbers (xorshift, fixed seed) ---- */
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}
static float nrand(void) {
  double u = urand() + 1e-12, v = urand();
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static float round_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

/* A tensor living on both backends with the same values. */
typedef struct pair {
  size_t n;
  ppsrt_dtype gdt;
  float *h;        /* the values (bf16-rounded when gdt is BF16) */
  void *c, *g;     /* CPU (F32) and GPU (gdt) copies */
} pair;

static pair mk(size_t n, ppsrt_dtype gdt, float scale, float shift) {
  pair p = {n, gdt, malloc((n ? n : 1) * sizeof(float)), NULL, NULL};
  for (size_t i = 0; i < n; i++) {
    float v = scale == 0.0f ? shift : nrand() * scale + shift;
    p.h[i] = gdt == PPSRT_BF16 ? round_bf16(v) : v;
  }
  OK(cpu->alloc(cpu, (n ? n : 1) * 4, &p.c));
  OK(gpu->alloc(gpu, (n ? n : 1) * ppsrt_dtype_size(gdt), &p.g));
  OK(cpu->upload_f32(cpu, (ppsrt_tensor){p.c, n, PPSRT_F32}, p.h));
  OK(gpu->upload_f32(gpu, (ppsrt_tensor){p.g, n, gdt}, p.h));
  return p;
}

static void drop(pair *p) {
  cpu->free(cpu, p->c);
  gpu->free(gpu, p->g);
  free(p->h);
}

/* int32 ids on both backends */
typedef struct ipair { int32_t *c, *g; } ipair;
static ipair mk_ids(int n, int lo, int hi) {
  ipair p;
  OK(cpu->alloc(cpu, (size_t)n * 4, (void **)&p.c));
  OK(gpu->alloc(gpu, (size_t)n * 4, (void **)&p.g));
  for (int i = 0; i < n; i++) p.c[i] = lo + (int)(urand() * (hi - lo));
  /* on the stream that reads them (a pageable cudaMemcpy would run on the legacy stream,
   * unordered with the backend's non-blocking streams) */
  OK(gpu->memcpy_async(gpu, PPSRT_STREAM_COMPUTE, p.g, p.c, (size_t)n * 4, 1));
  return p;
}

static double norm_bound;   /* > 0: compare() also requires ||gpu - cpu|| <= norm_bound ||cpu|| */

static void compare(const char *what, pair *p, tol t) {
  size_t n = p->n;
  float *a = malloc((n ? n : 1) * 4), *b = malloc((n ? n : 1) * 4);
  OK(cpu->download_f32(cpu, a, (ppsrt_tensor){p->c, n, PPSRT_F32}));
  OK(gpu->download_f32(gpu, b, (ppsrt_tensor){p->g, n, p->gdt}));
  double ss = 0;
  for (size_t i = 0; i < n; i++) ss += (double)a[i] * a[i];
  double rms = n ? sqrt(ss / n) : 0, worst = 0;
  size_t first = n, wi = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)b[i] - a[i]), lim = t.abs * rms + t.rel * fabs(a[i]);
    if (!(d <= lim) && first == n) first = i;
    double r = lim > 0 ? d / lim : (d > 0 ? INFINITY : 0);
    if (!(r <= worst)) { worst = r; wi = i; }
  }
  double se = 0;
  for (size_t i = 0; i < n; i++) se += ((double)b[i] - a[i]) * ((double)b[i] - a[i]);
  double nrel = ss > 0 ? sqrt(se / ss) : (se > 0 ? INFINITY : 0);
  checks++;
  if (first < n) {
    failures++;
    fprintf(stderr, "FAIL: %s: element %zu: gpu %.6g cpu %.6g; worst at %zu: gpu %.6g cpu %.6g (%.3g x the tolerance "
            "%g*rms(%.3g) + %g*|cpu|)\n", what, first, b[first], a[first], wi, b[wi], a[wi], worst, t.abs, rms, t.rel);
  } else if (norm_bound > 0 && !(nrel <= norm_bound)) {
    failures++;
    fprintf(stderr, "FAIL: %s: ||gpu - cpu|| / ||cpu|| = %.3g, over %.3g\n", what, nrel, norm_bound);
  } else {
    printf("ok   %-44s n=%-8zu worst %.3f of the tolerance, norm error %.2g\n", what, n, worst, nrel);
  }
  free(a);
  free(b);
}

/* Two GPU tensors of the same dtype hold the very same values (a fused kernel against
 * the unfused sequence it replaces). */
static void same_gpu(const char *what, pair *p, pair *q) {
  size_t n = p->n;
  float *a = malloc((n ? n : 1) * 4), *b = malloc((n ? n : 1) * 4);
  OK(gpu->download_f32(gpu, a, (ppsrt_tensor){p->g, n, p->gdt}));
  OK(gpu->download_f32(gpu, b, (ppsrt_tensor){q->g, n, q->gdt}));
  size_t i = 0;
  while (i < n && memcmp(&a[i], &b[i], 4) == 0) i++;
  checks++;
  if (q->n != n || i < n) {
    failures++;
    fprintf(stderr, "FAIL: %s: element %zu differs: %.9g vs %.9g\n", what, i, i < n ? a[i] : 0.0, i < n ? b[i] : 0.0);
  } else {
    printf("ok   %-44s n=%-8zu bit for bit\n", what, n);
  }
  free(a);
  free(b);
}

/* ---- the checks ---- */

static void t_gemm(void) {
  const int M = 37, N = 29, K = 45, pad = 3;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int cf = 0; cf < 2; cf++) {
        int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
        pair A = mk((size_t)(ta ? K : M) * lda, PPSRT_BF16, 1, 0), B = mk((size_t)(tb ? N : K) * ldb, PPSRT_BF16, 1, 0);
        pair C = mk((size_t)M * ldc, cf ? PPSRT_F32 : PPSRT_BF16, 1, 0);
        float beta = cf ? 1.0f : 0.0f;
        OK(cpu->gemm(cpu, 0, ta, tb, M, N, K, 0.5f, A.c, PPSRT_F32, lda, B.c, PPSRT_F32, ldb, beta, C.c, PPSRT_F32, ldc));
        OK(gpu->gemm(gpu, 0, ta, tb, M, N, K, 0.5f, A.g, PPSRT_BF16, lda, B.g, PPSRT_BF16, ldb, beta, C.g, C.gdt, ldc));
        char w[64];
        snprintf(w, sizeof w, "gemm ta=%d tb=%d C=%s beta=%g", ta, tb, cf ? "f32" : "bf16", beta);
        compare(w, &C, cf ? TOL_F32 : TOL_MM);
        drop(&A); drop(&B); drop(&C);
      }
  /* F32 x F32 -> F32, and the mixed slow path (bf16 x F32 -> bf16) */
  pair A = mk((size_t)M * K, PPSRT_F32, 1, 0), B = mk((size_t)K * N, PPSRT_F32, 1, 0), C = mk((size_t)M * N, PPSRT_F32, 1, 0);
  OK(cpu->gemm(cpu, 0, 0, 0, M, N, K, 1.0f, A.c, PPSRT_F32, K, B.c, PPSRT_F32, N, 0.25f, C.c, PPSRT_F32, N));
  OK(gpu->gemm(gpu, 0, 0, 0, M, N, K, 1.0f, A.g, PPSRT_F32, K, B.g, PPSRT_F32, N, 0.25f, C.g, PPSRT_F32, N));
  compare("gemm f32 x f32 -> f32", &C, TOL_F32);
  pair A2 = mk((size_t)M * K, PPSRT_BF16, 1, 0), C2 = mk((size_t)M * N, PPSRT_BF16, 1, 0);
  OK(cpu->gemm(cpu, 0, 0, 0, M, N, K, 1.0f, A2.c, PPSRT_F32, K, B.c, PPSRT_F32, N, 1.0f, C2.c, PPSRT_F32, N));
  OK(gpu->gemm(gpu, 0, 0, 0, M, N, K, 1.0f, A2.g, PPSRT_BF16, K, B.g, PPSRT_F32, N, 1.0f, C2.g, PPSRT_BF16, N));
  compare("gemm bf16 x f32 -> bf16 (slow path)", &C2, TOL_MM);
  /* K = 0: C = beta C */
  OK(cpu->gemm(cpu, 0, 0, 0, M, N, 0, 1.0f, A.c, PPSRT_F32, 1, B.c, PPSRT_F32, N, 0.5f, C.c, PPSRT_F32, N));
  OK(gpu->gemm(gpu, 0, 0, 0, M, N, 0, 1.0f, A.g, PPSRT_F32, 1, B.g, PPSRT_F32, N, 0.5f, C.g, PPSRT_F32, N));
  compare("gemm K=0 (C = beta C)", &C, TOL_F32);
  drop(&A); drop(&B); drop(&C); drop(&A2); drop(&C2);
  /* strided batched */
  const int cnt = 3;
  long sA = (long)M * K + 7, sB = (long)K * N + 5, sC = (long)M * N + 11;
  pair Ab = mk((size_t)sA * cnt, PPSRT_BF16, 1, 0), Bb = mk((size_t)sB * cnt, PPSRT_BF16, 1, 0);
  pair Cb = mk((size_t)sC * cnt, PPSRT_F32, 1, 0);
  OK(cpu->gemm_strided(cpu, 0, 0, 1, M, N, K, 1.0f, Ab.c, PPSRT_F32, K, sA, Bb.c, PPSRT_F32, K, sB, 1.0f, Cb.c,
                       PPSRT_F32, N, sC, cnt));
  OK(gpu->gemm_strided(gpu, 0, 0, 1, M, N, K, 1.0f, Ab.g, PPSRT_BF16, K, sA, Bb.g, PPSRT_BF16, K, sB, 1.0f, Cb.g,
                       PPSRT_F32, N, sC, cnt));
  compare("gemm_strided x3 tb=1 C=f32", &Cb, TOL_F32);
  drop(&Ab); drop(&Bb); drop(&Cb);
}

static void t_elementwise(void) {
  const int N = 67, C = 301;
  size_t n = (size_t)N * C;
  pair x = mk(n, PPSRT_BF16, 1, 0), bias = mk(C, PPSRT_BF16, 1, 0), y = mk(n, PPSRT_BF16, 0, 0);
  OK(cpu->add_bias(cpu, 0, y.c, x.c, bias.c, N, C));
  OK(gpu->add_bias(gpu, 0, y.g, x.g, bias.g, N, C));
  compare("add_bias", &y, TOL_BF16);
  OK(cpu->add_bias(cpu, 0, x.c, x.c, bias.c, N, C));   /* in place */
  OK(gpu->add_bias(gpu, 0, x.g, x.g, bias.g, N, C));
  compare("add_bias in place", &x, TOL_BF16);
  {   /* C % 8 == 0: the vectorised kernel */
    const int N2 = 33, C2 = 256;
    pair x2 = mk((size_t)N2 * C2, PPSRT_BF16, 1, 0), b2 = mk(C2, PPSRT_BF16, 1, 0), y2 = mk((size_t)N2 * C2, PPSRT_BF16, 0, 0);
    OK(cpu->add_bias(cpu, 0, y2.c, x2.c, b2.c, N2, C2));
    OK(gpu->add_bias(gpu, 0, y2.g, x2.g, b2.g, N2, C2));
    compare("add_bias C=256 (8 per load)", &y2, TOL_BF16);
    drop(&x2); drop(&b2); drop(&y2);
  }
  pair db = mk(C, PPSRT_F32, 1, 0);
  OK(cpu->bias_grad(cpu, 0, db.c, y.c, N, C));
  OK(gpu->bias_grad(gpu, 0, db.g, y.g, N, C));
  /* inputs differ by the bf16 rounding of y above; compare at the bf16 tolerance */
  compare("bias_grad (+=)", &db, TOL_BF16);
  pair a = mk(n, PPSRT_BF16, 1, 0), c = mk(n, PPSRT_BF16, 1, 0), z = mk(n, PPSRT_BF16, 0, 0);
  OK(cpu->add(cpu, 0, z.c, a.c, c.c, n));
  OK(gpu->add(gpu, 0, z.g, a.g, c.g, n));
  compare("add", &z, TOL_BF16);
  pair g = mk(n, PPSRT_BF16, 0, 0);
  OK(cpu->gelu_fwd(cpu, 0, g.c, a.c, n));
  OK(gpu->gelu_fwd(gpu, 0, g.g, a.g, n));
  compare("gelu_fwd", &g, TOL_BF16);
  pair dx = mk(n, PPSRT_BF16, 0, 0);
  OK(cpu->gelu_bwd(cpu, 0, dx.c, c.c, a.c, n));
  OK(gpu->gelu_bwd(gpu, 0, dx.g, c.g, a.g, n));
  compare("gelu_bwd", &dx, TOL_BF16);
  {   /* dx aliasing x (the models write dhpre over hpre), the vectorised and tail paths */
    pair xa = mk(n, PPSRT_BF16, 1, 0);
    OK(gpu->memcpy_async(gpu, 0, xa.g, a.g, n * 2, 0));
    OK(gpu->gelu_bwd(gpu, 0, xa.g, c.g, xa.g, n));
    same_gpu("gelu_bwd dx aliasing x == gelu_bwd", &xa, &dx);
    drop(&xa);
  }
  /* fused bias + GeLU: pre and y against the CPU, and on the GPU bit for bit add_bias then
   * gelu_fwd; the scalar (C = 301) and vectorised (C = 256) kernels; in place (pre = x) */
  for (int k = 0; k < 2; k++) {
    const int Ck = k ? 256 : C;
    size_t nk = (size_t)N * Ck;
    pair xx = mk(nk, PPSRT_BF16, 1, 0), bb = mk(Ck, PPSRT_BF16, 1, 0), pre = mk(nk, PPSRT_BF16, 0, 0);
    pair yy = mk(nk, PPSRT_BF16, 0, 0), u1 = mk(nk, PPSRT_BF16, 0, 0), u2 = mk(nk, PPSRT_BF16, 0, 0);
    char w[96];
    OK(cpu->add_bias_gelu(cpu, 0, yy.c, pre.c, xx.c, bb.c, N, Ck));
    OK(gpu->add_bias_gelu(gpu, 0, yy.g, pre.g, xx.g, bb.g, N, Ck));
    snprintf(w, sizeof w, "add_bias_gelu C=%d pre", Ck);
    compare(w, &pre, TOL_BF16);
    snprintf(w, sizeof w, "add_bias_gelu C=%d y", Ck);
    compare(w, &yy, TOL_BF16);
    OK(gpu->add_bias(gpu, 0, u1.g, xx.g, bb.g, N, Ck));
    OK(gpu->gelu_fwd(gpu, 0, u2.g, u1.g, nk));
    snprintf(w, sizeof w, "add_bias_gelu C=%d on the GPU == add_bias, gelu_fwd", Ck);
    same_gpu(w, &pre, &u1);
    same_gpu(w, &yy, &u2);
    OK(cpu->add_bias_gelu(cpu, 0, yy.c, xx.c, xx.c, bb.c, N, Ck));
    OK(gpu->add_bias_gelu(gpu, 0, yy.g, xx.g, xx.g, bb.g, N, Ck));
    snprintf(w, sizeof w, "add_bias_gelu C=%d in place: pre", Ck);
    compare(w, &xx, TOL_BF16);
    snprintf(w, sizeof w, "add_bias_gelu C=%d in place: y", Ck);
    compare(w, &yy, TOL_BF16);
    same_gpu(w, &yy, &u2);
    drop(&xx); drop(&bb); drop(&pre); drop(&yy); drop(&u1); drop(&u2);
  }
  pair fy = mk(n, PPSRT_F32, 1, 0), fx = mk(n, PPSRT_F32, 1, 0);
  OK(cpu->axpy_f32(cpu, 0, fy.c, fx.c, -0.75f, n));
  OK(gpu->axpy_f32(gpu, 0, fy.g, fx.g, -0.75f, n));
  compare("axpy_f32", &fy, TOL_F32);
  OK(cpu->scale_f32(cpu, 0, fy.c, 3.5f, n));
  OK(gpu->scale_f32(gpu, 0, fy.g, 3.5f, n));
  compare("scale_f32", &fy, TOL_F32);
  /* convert: bf16 -> F32 on the GPU equals the F32 copy on the CPU */
  OK(cpu->convert(cpu, 0, fx.c, PPSRT_F32, a.c, PPSRT_F32, n));
  OK(gpu->convert(gpu, 0, fx.g, PPSRT_F32, a.g, PPSRT_BF16, n));
  compare("convert bf16 -> f32", &fx, TOL_F32);
  OK(cpu->convert(cpu, 0, z.c, PPSRT_F32, fy.c, PPSRT_F32, n));
  OK(gpu->convert(gpu, 0, z.g, PPSRT_BF16, fy.g, PPSRT_F32, n));
  compare("convert f32 -> bf16", &z, TOL_BF16);
  drop(&x); drop(&bias); drop(&y); drop(&db); drop(&a); drop(&c); drop(&z); drop(&g); drop(&dx); drop(&fy); drop(&fx);
}

/* C = 1000: the scalar row kernels; C = 1024: the vectorised ones (C % 256 == 0).
 * rms: RMS norm (mean == NULL in all three calls); with_beta 0: beta and dbeta NULL;
 * eps: --norm-epsilon's (1e-3, near the variance: a kernel adding another shows). */
static void t_layernorm_at(int N, int C, int rms, int with_beta, float eps) {
  size_t n = (size_t)N * C;
  char w[128], nm[64];
  snprintf(nm, sizeof nm, "%s%s C=%d eps %g", rms ? "rmsnorm" : "layernorm", with_beta ? "" : " (no beta)", C, eps);
  /* small variance (about 4e-3), so that the epsilon matters to layer norm's result;
   * mean 0.5, so that centering would show in RMS norm's */
  pair x = mk(n, PPSRT_BF16, 0.06f, 0.5f), gm = mk(C, PPSRT_BF16, 0.5f, 1), bt = mk(C, PPSRT_BF16, 0.5f, 0);
  pair y = mk(n, PPSRT_BF16, 0, 0), mean = mk(N, PPSRT_F32, 0, 0), rstd = mk(N, PPSRT_F32, 0, 0);
  void *bc = with_beta ? bt.c : NULL, *bg = with_beta ? bt.g : NULL;
  OK(cpu->layernorm_fwd(cpu, 0, y.c, rms ? NULL : mean.c, rstd.c, x.c, gm.c, bc, N, C, eps));
  OK(gpu->layernorm_fwd(gpu, 0, y.g, rms ? NULL : mean.g, rstd.g, x.g, gm.g, bg, N, C, eps));
  snprintf(w, sizeof w, "%s fwd y", nm);
  compare(w, &y, TOL_BF16);
  if (!rms) {
    snprintf(w, sizeof w, "%s fwd mean", nm);
    compare(w, &mean, TOL_F32);
  }
  snprintf(w, sizeof w, "%s fwd rstd", nm);
  compare(w, &rstd, TOL_F32);
  /* backward from the CPU's statistics on both sides */
  pair st_m = mk(N, PPSRT_F32, 0, 0), st_r = mk(N, PPSRT_F32, 0, 0);
  float *hm = malloc(N * 4), *hr = malloc(N * 4);
  OK(cpu->download_f32(cpu, hm, (ppsrt_tensor){mean.c, N, PPSRT_F32}));
  OK(cpu->download_f32(cpu, hr, (ppsrt_tensor){rstd.c, N, PPSRT_F32}));
  OK(cpu->upload_f32(cpu, (ppsrt_tensor){st_m.c, N, PPSRT_F32}, hm));
  OK(gpu->upload_f32(gpu, (ppsrt_tensor){st_m.g, N, PPSRT_F32}, hm));
  OK(cpu->upload_f32(cpu, (ppsrt_tensor){st_r.c, N, PPSRT_F32}, hr));
  OK(gpu->upload_f32(gpu, (ppsrt_tensor){st_r.g, N, PPSRT_F32}, hr));
  free(hm);
  free(hr);
  const float *mc = rms ? NULL : st_m.c, *mg = rms ? NULL : st_m.g;
  pair dy = mk(n, PPSRT_BF16, 1, 0), dx = mk(n, PPSRT_BF16, 0, 0);
  OK(cpu->layernorm_bwd_input(cpu, 0, dx.c, dy.c, x.c, mc, st_r.c, gm.c, N, C, 0));
  OK(gpu->layernorm_bwd_input(gpu, 0, dx.g, dy.g, x.g, mg, st_r.g, gm.g, N, C, 0));
  snprintf(w, sizeof w, "%s bwd_input", nm);
  compare(w, &dx, TOL_BF16);
  pair dx2 = mk(n, PPSRT_BF16, 1, 0);
  OK(cpu->layernorm_bwd_input(cpu, 0, dx2.c, dy.c, x.c, mc, st_r.c, gm.c, N, C, 1));
  OK(gpu->layernorm_bwd_input(gpu, 0, dx2.g, dy.g, x.g, mg, st_r.g, gm.g, N, C, 1));
  snprintf(w, sizeof w, "%s bwd_input accumulate", nm);
  compare(w, &dx2, TOL_BF16);
  pair dg = mk(C, PPSRT_F32, 1, 0), dbt = mk(C, PPSRT_F32, 1, 0);
  OK(cpu->layernorm_bwd_weight(cpu, 0, dg.c, with_beta ? dbt.c : NULL, dy.c, x.c, mc, st_r.c, N, C));
  OK(gpu->layernorm_bwd_weight(gpu, 0, dg.g, with_beta ? dbt.g : NULL, dy.g, x.g, mg, st_r.g, N, C));
  snprintf(w, sizeof w, "%s bwd_weight dgamma (+=)", nm);
  compare(w, &dg, TOL_F32);
  snprintf(w, sizeof w, "%s bwd_weight dbeta (+=%s)", nm, with_beta ? "" : "; NULL: unchanged");
  compare(w, &dbt, TOL_F32);
  drop(&x); drop(&gm); drop(&bt); drop(&y); drop(&mean); drop(&rstd); drop(&st_m); drop(&st_r);
  drop(&dy); drop(&dx); drop(&dx2); drop(&dg); drop(&dbt);
}

static void t_layernorm(void) {
  for (int rms = 0; rms < 2; rms++)
    for (int with_beta = 1; with_beta >= 0; with_beta--) {
      for (int e = 0; e < 2; e++) {   /* the default epsilon, then one of 1e-3 */
        t_layernorm_at(45, 1000, rms, with_beta, e ? 1e-3f : 1e-5f);
        t_layernorm_at(37, 1024, rms, with_beta, e ? 1e-3f : 1e-5f);
      }
    }
}

/* p's values set to v (bf16-rounded when p is bf16) on both backends */
static void set_pair(pair *p, const float *v) {
  for (size_t i = 0; i < p->n; i++) p->h[i] = p->gdt == PPSRT_BF16 ? round_bf16(v[i]) : v[i];
  OK(cpu->upload_f32(cpu, (ppsrt_tensor){p->c, p->n, PPSRT_F32}, p->h));
  OK(gpu->upload_f32(gpu, (ppsrt_tensor){p->g, p->n, p->gdt}, p->h));
}

/* Columns [lo, hi) of the rows (ld apart) of p on the GPU still hold p->h, bit for bit. */
static void untouched(const char *what, pair *p, int ld, int lo, int hi) {
  float *b = malloc(p->n * 4);
  OK(gpu->download_f32(gpu, b, (ppsrt_tensor){p->g, p->n, p->gdt}));
  size_t bad = p->n, cnt = 0;
  for (size_t r = 0; r * ld < p->n; r++)
    for (int c = lo; c < hi; c++, cnt++)
      if (memcmp(&b[r * ld + c], &p->h[r * ld + c], 4) && bad == p->n) bad = r * ld + c;
  checks++;
  if (bad < p->n) {
    failures++;
    fprintf(stderr, "FAIL: %s: element %zu (column %d) changed: %.9g, was %.9g\n", what, bad, (int)(bad % ld), b[bad],
            p->h[bad]);
  } else {
    printf("ok   %-44s n=%-8zu bit for bit\n", what, cnt);
  }
  free(b);
}

/* rope on rows of a fused buffer [N, ld]: the q heads (H1 of them from column 0) and the
 * k heads (H2 from column H1 D) rotated forward, then both back (inverse); the columns
 * past (H1 + H2) D (the v heads and any padding) untouched on the GPU. D % 16 == 0 with
 * ld % 8 == 0: the vectorised kernel, else one thread per pair. */
static void t_rope_at(int N, int H1, int H2, int D, int ld, int seq) {
  int hd = D / 2;
  char w[128], nm[64];
  snprintf(nm, sizeof nm, "rope N=%d H=%d+%d D=%d ld=%d", N, H1, H2, D, ld);
  pair x = mk((size_t)N * ld, PPSRT_BF16, 1, 0), cs = mk((size_t)seq * hd * 2, PPSRT_F32, 0, 0);
  float *t = malloc((size_t)seq * hd * 2 * 4);
  for (int p = 0; p < seq; p++)
    for (int i = 0; i < hd; i++) {
      double a = p * pow(10000.0, -2.0 * i / D);
      t[(p * hd + i) * 2] = (float)cos(a);
      t[(p * hd + i) * 2 + 1] = (float)sin(a);
    }
  set_pair(&cs, t);
  free(t);
  ipair pos = mk_ids(N, 0, seq);
  size_t ko = (size_t)H1 * D;
  for (int inv = 0; inv < 2; inv++) {
    OK(cpu->rope(cpu, 0, x.c, ld, pos.c, cs.c, N, H1, D, inv));
    OK(gpu->rope(gpu, 0, x.g, ld, pos.g, cs.g, N, H1, D, inv));
    OK(cpu->rope(cpu, 0, (float *)x.c + ko, ld, pos.c, cs.c, N, H2, D, inv));
    OK(gpu->rope(gpu, 0, (uint16_t *)x.g + ko, ld, pos.g, cs.g, N, H2, D, inv));
    snprintf(w, sizeof w, "%s %s", nm, inv ? "then inverse" : "forward");
    compare(w, &x, TOL_BF16);
    snprintf(w, sizeof w, "%s %s: columns past the heads", nm, inv ? "inverse" : "forward");
    untouched(w, &x, ld, (H1 + H2) * D, ld);
  }
  /* inverse(rope(x)) gives back x: the CPU's F32 round trip is exact to about 1e-7, so
   * the comparison above holds the GPU's result to x itself at the bf16 tolerance */
  drop(&x); drop(&cs);
  cpu->free(cpu, pos.c);
  gpu->free(gpu, pos.g);
}

static void t_rope(void) {
  t_rope_at(37, 4, 2, 64, (4 + 2 * 2) * 64, 50);   /* fused q|k|v, GQA: 8 pairs per thread */
  t_rope_at(29, 3, 1, 24, 4 * 24 + 7, 40);          /* D % 16 != 0, odd ld: one pair per thread */
  t_rope_at(5, 2, 2, 16, 4 * 16 + 8, 8);            /* smallest vectorised head, padded rows */
}

/* SwiGLU over [gate | up] rows; C = 301: the scalar kernels; C = 256: 8 per load. The
 * backward out of place and in place (dpre = pre, as the models write it over the saved
 * pre-activation): the two bit for bit on the GPU, both against the CPU. */
static void t_swiglu_at(int N, int C) {
  size_t n = (size_t)N * C;
  char w[96];
  pair pre = mk(2 * n, PPSRT_BF16, 2, 0), y = mk(n, PPSRT_BF16, 0, 0), dy = mk(n, PPSRT_BF16, 1, 0);
  pair dpre = mk(2 * n, PPSRT_BF16, 0, 0), ip = mk(2 * n, PPSRT_BF16, 0, 0);
  OK(cpu->swiglu_fwd(cpu, 0, y.c, pre.c, N, C));
  OK(gpu->swiglu_fwd(gpu, 0, y.g, pre.g, N, C));
  snprintf(w, sizeof w, "swiglu_fwd C=%d", C);
  compare(w, &y, TOL_BF16);
  OK(cpu->swiglu_bwd(cpu, 0, dpre.c, dy.c, pre.c, N, C));
  OK(gpu->swiglu_bwd(gpu, 0, dpre.g, dy.g, pre.g, N, C));
  snprintf(w, sizeof w, "swiglu_bwd C=%d", C);
  compare(w, &dpre, TOL_BF16);
  set_pair(&ip, pre.h);
  OK(cpu->swiglu_bwd(cpu, 0, ip.c, dy.c, ip.c, N, C));
  OK(gpu->swiglu_bwd(gpu, 0, ip.g, dy.g, ip.g, N, C));
  snprintf(w, sizeof w, "swiglu_bwd C=%d in place", C);
  compare(w, &ip, TOL_BF16);
  snprintf(w, sizeof w, "swiglu_bwd C=%d in place == out of place", C);
  same_gpu(w, &ip, &dpre);
  drop(&pre); drop(&y); drop(&dy); drop(&dpre); drop(&ip);
}

/* Mixture of experts (backend.h moe_*): the routing from the same F32 logits (the very
 * same experts chosen: the indices compared exactly), the weights and the per-expert
 * statistics, for each router (softmax over the top-K, pre-softmax, sigmoid, sigmoid with
 * the expert bias and a scaling factor, the z-loss); its backward with and without the
 * load-balancing coefficients;
 * the permutation (a shuffled pos) and its backward; the weighted combine and its
 * backward (dw, de, and de written over e in place); then with every 5th slot dropped
 * (position -1: --moe-expert-capacity-factor), a dropped slot's dw 0. */
static void t_moe(void) {
  int N = 37, E = 6, K = 2, C = 40, NK = N * K;
  pair lg = mk((size_t)N * E, PPSRT_F32, 2, 0), w = mk(NK, PPSRT_F32, 0, 0), stat = mk(2 * (size_t)E + 1, PPSRT_F32, 0, 0);
  pair bias = mk(E, PPSRT_F32, 0.3f, 0);
  ipair idx = mk_ids(NK, 0, 1), pos = mk_ids(NK, 0, 1);
  int32_t *gi = malloc((size_t)NK * 4);
  pair dw = mk(NK, PPSRT_F32, 1, 0), coef = mk(E, PPSRT_F32, 1, 0), dl = mk((size_t)N * E, PPSRT_BF16, 0, 0);
  static const char *const rn[5] = {"softmax", "pre-softmax", "sigmoid", "sigmoid bias scale", "softmax z-loss"};
  for (int v = 0; v < 5; v++) {
    ppsrt_moe_router rc = {v == 2 || v == 3, v == 1, v == 3 ? 2.5f : 0.0f, NULL, v == 4 ? 0.4f : 0.0f, NULL}, rg = rc;
    if (v == 3) { rc.bias = bias.c; rg.bias = bias.g; }
    char what[96];
    OK(cpu->moe_route(cpu, 0, lg.c, N, E, K, v ? &rc : NULL, idx.c, w.c, stat.c));
    OK(gpu->moe_route(gpu, 0, lg.g, N, E, K, v ? &rg : NULL, idx.g, w.g, stat.g));
    OK(gpu->memcpy_async(gpu, PPSRT_STREAM_COMPUTE, gi, idx.g, (size_t)NK * 4, 2));
    OK(gpu->stream_sync(gpu, PPSRT_STREAM_COMPUTE));
    int same = !memcmp(gi, idx.c, (size_t)NK * 4);
    checks++;
    if (!same) { failures++; fprintf(stderr, "FAIL: moe_route %s: the GPU chose other experts than the CPU\n", rn[v]); }
    else { snprintf(what, sizeof what, "moe_route %s indices", rn[v]); printf("ok   %-44s n=%-8d the same experts\n", what, NK); }
    snprintf(what, sizeof what, "moe_route %s weights", rn[v]);
    compare(what, &w, TOL_F32);
    snprintf(what, sizeof what, "moe_route %s counts, score sums, z", rn[v]);
    compare(what, &stat, TOL_F32);
    for (int aux = 0; aux < 2; aux++) {
      OK(cpu->moe_route_bwd(cpu, 0, dl.c, dw.c, lg.c, idx.c, v ? &rc : NULL, aux ? coef.c : NULL, N, E, K));
      OK(gpu->moe_route_bwd(gpu, 0, dl.g, dw.g, lg.g, idx.g, v ? &rg : NULL, aux ? coef.g : NULL, N, E, K));
      snprintf(what, sizeof what, "moe_route_bwd %s%s", rn[v], aux ? " with the aux coefficients" : "");
      compare(what, &dl, TOL_BF16);
    }
  }
  for (int i = 0; i < NK; i++) pos.c[i] = (int32_t)(((int64_t)i * 7 + 3) % NK);   /* 7 and 74: coprime */
  OK(gpu->memcpy_async(gpu, PPSRT_STREAM_COMPUTE, pos.g, pos.c, (size_t)NK * 4, 1));
  pair src = mk((size_t)N * C, PPSRT_BF16, 1, 0), dst = mk((size_t)NK * C, PPSRT_BF16, 0, 0);
  OK(cpu->moe_permute(cpu, 0, dst.c, src.c, pos.c, N, K, C));
  OK(gpu->moe_permute(gpu, 0, dst.g, src.g, pos.g, N, K, C));
  compare("moe_permute", &dst, TOL_BF16);
  pair dp = mk((size_t)NK * C, PPSRT_BF16, 1, 0), dx = mk((size_t)N * C, PPSRT_BF16, 1, 0);
  OK(cpu->moe_permute_bwd(cpu, 0, dx.c, dp.c, pos.c, N, K, C, 1));
  OK(gpu->moe_permute_bwd(gpu, 0, dx.g, dp.g, pos.g, N, K, C, 1));
  compare("moe_permute_bwd (accumulate)", &dx, TOL_BF16);
  pair e = mk((size_t)NK * C, PPSRT_BF16, 1, 0), a = mk((size_t)N * C, PPSRT_BF16, 1, 0), y = mk((size_t)N * C, PPSRT_BF16, 0, 0);
  pair ww = mk(NK, PPSRT_F32, 1, 0);
  OK(cpu->moe_unpermute(cpu, 0, y.c, a.c, e.c, pos.c, ww.c, N, K, C));
  OK(gpu->moe_unpermute(gpu, 0, y.g, a.g, e.g, pos.g, ww.g, N, K, C));
  compare("moe_unpermute (+ residual)", &y, TOL_BF16);
  pair dy = mk((size_t)N * C, PPSRT_BF16, 1, 0), de = mk((size_t)NK * C, PPSRT_BF16, 0, 0), dwo = mk(NK, PPSRT_F32, 0, 0);
  OK(cpu->moe_unpermute_bwd(cpu, 0, de.c, dwo.c, dy.c, e.c, pos.c, ww.c, N, K, C));
  OK(gpu->moe_unpermute_bwd(gpu, 0, de.g, dwo.g, dy.g, e.g, pos.g, ww.g, N, K, C));
  compare("moe_unpermute_bwd de", &de, TOL_BF16);
  compare("moe_unpermute_bwd dw", &dwo, TOL_F32);
  OK(cpu->moe_unpermute_bwd(cpu, 0, e.c, dwo.c, dy.c, e.c, pos.c, ww.c, N, K, C));   /* de over e */
  OK(gpu->moe_unpermute_bwd(gpu, 0, e.g, dwo.g, dy.g, e.g, pos.g, ww.g, N, K, C));
  compare("moe_unpermute_bwd de over e", &e, TOL_BF16);
  compare("moe_unpermute_bwd dw (in place)", &dwo, TOL_F32);
  /* dropped slots (--moe-expert-capacity-factor, runtime/moe.c: position -1), every 5th:
   * nothing copied, summed or combined, dw 0 (dwo holds the nonzero values above) */
  for (int i = 0; i < NK; i += 5) pos.c[i] = -1;
  pair e2 = mk((size_t)NK * C, PPSRT_BF16, 1, 0);   /* (e above was rewritten in place: CPU and GPU apart) */
  OK(gpu->memcpy_async(gpu, PPSRT_STREAM_COMPUTE, pos.g, pos.c, (size_t)NK * 4, 1));
  OK(cpu->moe_permute(cpu, 0, dst.c, src.c, pos.c, N, K, C));
  OK(gpu->moe_permute(gpu, 0, dst.g, src.g, pos.g, N, K, C));
  compare("moe_permute, slots dropped", &dst, TOL_BF16);
  OK(cpu->moe_permute_bwd(cpu, 0, dx.c, dp.c, pos.c, N, K, C, 0));
  OK(gpu->moe_permute_bwd(gpu, 0, dx.g, dp.g, pos.g, N, K, C, 0));
  compare("moe_permute_bwd, slots dropped", &dx, TOL_BF16);
  OK(cpu->moe_unpermute(cpu, 0, y.c, NULL, e2.c, pos.c, ww.c, N, K, C));
  OK(gpu->moe_unpermute(gpu, 0, y.g, NULL, e2.g, pos.g, ww.g, N, K, C));
  compare("moe_unpermute, slots dropped", &y, TOL_BF16);
  OK(cpu->moe_unpermute_bwd(cpu, 0, de.c, dwo.c, dy.c, e2.c, pos.c, ww.c, N, K, C));
  OK(gpu->moe_unpermute_bwd(gpu, 0, de.g, dwo.g, dy.g, e2.g, pos.g, ww.g, N, K, C));
  compare("moe_unpermute_bwd de, slots dropped", &de, TOL_BF16);
  compare("moe_unpermute_bwd dw, slots dropped", &dwo, TOL_F32);
  int zero = 1;
  for (int i = 0; i < NK; i += 5) zero &= ((const float *)dwo.c)[i] == 0.0f;
  checks++;
  if (!zero) { failures++; fprintf(stderr, "FAIL: moe_unpermute_bwd: a dropped slot's dw is not 0 on the CPU\n"); }
  else printf("ok   %-44s n=%-8d 0\n", "moe_unpermute_bwd dw of the dropped slots", (NK + 4) / 5);
  drop(&e2);
  free(gi);
  cpu->free(cpu, idx.c); gpu->free(gpu, idx.g); cpu->free(cpu, pos.c); gpu->free(gpu, pos.g);
  drop(&lg); drop(&w); drop(&bias); drop(&stat); drop(&dw); drop(&coef); drop(&dl); drop(&src); drop(&dst);
  drop(&dp); drop(&dx); drop(&e); drop(&a); drop(&y); drop(&ww); drop(&dy); drop(&de); drop(&dwo);
}

/* Dropout: bias_dropout_add (y = a + drop(x + bias), in place y = a, and the dropout
 * alone) against the CPU, with the mask compared exactly: on x = 2 everywhere the
 * zeros of the two backends' outputs are the same elements (runtime/dropout.h's hash on
 * both), and the share dropped is p within 5 standard errors. */
static void t_dropout(void) {
  const int N = 67, C = 301;
  size_t n = (size_t)N * C;
  ppsrt_dropout d = {ppsrt_drop_thr(0.3), (float)(1.0 / 0.7), ppsrt_drop_key(9, 2, 1, 3, PPSRT_DROP_FC2), 5, 0, 0};
  pair x = mk(n, PPSRT_BF16, 1, 0), bias = mk(C, PPSRT_BF16, 1, 0), a = mk(n, PPSRT_BF16, 1, 0);
  OK(cpu->bias_dropout_add(cpu, 0, a.c, a.c, x.c, bias.c, N, C, &d));
  OK(gpu->bias_dropout_add(gpu, 0, a.g, a.g, x.g, bias.g, N, C, &d));
  compare("bias_dropout_add (y = a, in place)", &a, TOL_BF16);
  pair two = mk(n, PPSRT_BF16, 0, 2), y = mk(n, PPSRT_BF16, 0, 0);
  OK(cpu->bias_dropout_add(cpu, 0, y.c, NULL, two.c, NULL, N, C, &d));
  OK(gpu->bias_dropout_add(gpu, 0, y.g, NULL, two.g, NULL, N, C, &d));
  compare("dropout alone", &y, TOL_BF16);
  float *hc = malloc(n * 4), *hg = malloc(n * 4);
  OK(cpu->download_f32(cpu, hc, (ppsrt_tensor){y.c, n, PPSRT_F32}));
  OK(gpu->download_f32(gpu, hg, (ppsrt_tensor){y.g, n, PPSRT_BF16}));
  size_t differ = 0, zeros = 0;
  for (size_t i = 0; i < n; i++) {
    differ += (hc[i] == 0.0f) != (hg[i] == 0.0f);
    zeros += hg[i] == 0.0f;
  }
  double frac = (double)zeros / n, se = sqrt(0.3 * 0.7 / n);
  checks++;
  if (differ || !(fabs(frac - 0.3) <= 5 * se)) {
    failures++;
    fprintf(stderr, "FAIL: dropout mask: %zu of %zu elements dropped on one backend only; share dropped %.4f (0.3 within "
            "%.3g)\n", differ, n, frac, 5 * se);
  } else {
    printf("ok   %-44s n=%-8zu the same elements dropped on both; share %.4f\n", "dropout mask CPU == GPU", n, frac);
  }
  free(hc); free(hg);
  drop(&x); drop(&bias); drop(&a); drop(&two); drop(&y);
}

static void t_swiglu(void) {
  t_swiglu_at(67, 301);
  t_swiglu_at(33, 256);
}

/* Fused q|k|v rows [batch*T, (Hq + 2 Hkv) D] and fused gradients, as the gpt model. */
static void t_attention_on(ppsrt_backend *g_be, const char *label, int batch, int T, int Hq, int Hkv, int D,
                           const ppsrt_dropout *dr) {
  ppsrt_backend *keep = gpu;
  gpu = g_be;
  int W = (Hq + 2 * Hkv) * D, rows = batch * T, ldo = Hq * D;
  pair qkv = mk((size_t)rows * W, PPSRT_BF16, 1, 0);
  pair out = mk((size_t)rows * ldo, PPSRT_BF16, 0, 0), lse = mk((size_t)batch * Hq * T, PPSRT_F32, 0, 0);
  size_t ko = (size_t)Hq * D, vo = (size_t)(Hq + Hkv) * D;
  OK(cpu->attention_fwd(cpu, 0, out.c, lse.c, qkv.c, W, (float *)qkv.c + ko, W, (float *)qkv.c + vo, W, batch, T, Hq,
                        Hkv, D, dr));
  OK(gpu->attention_fwd(gpu, 0, out.g, lse.g, qkv.g, W, (uint16_t *)qkv.g + ko, W, (uint16_t *)qkv.g + vo, W, batch,
                        T, Hq, Hkv, D, dr));
  char w[96];
  norm_bound = 1.0 / 32;
  snprintf(w, sizeof w, "attention_fwd out %s", label);
  compare(w, &out, TOL_MM);
  snprintf(w, sizeof w, "attention_fwd lse %s", label);
  norm_bound = 0;
  compare(w, &lse, (tol){1e-3, 1e-3});
  norm_bound = 1.0 / 32;
  /* backward from the CPU's forward results on both sides */
  float *ho = malloc((size_t)rows * ldo * 4), *hl = malloc((size_t)batch * Hq * T * 4);
  OK(cpu->download_f32(cpu, ho, (ppsrt_tensor){out.c, (size_t)rows * ldo, PPSRT_F32}));
  OK(cpu->download_f32(cpu, hl, (ppsrt_tensor){lse.c, (size_t)batch * Hq * T, PPSRT_F32}));
  for (size_t i = 0; i < (size_t)rows * ldo; i++) ho[i] = round_bf16(ho[i]);
  OK(cpu->upload_f32(cpu, (ppsrt_tensor){out.c, (size_t)rows * ldo, PPSRT_F32}, ho));
  OK(gpu->upload_f32(gpu, (ppsrt_tensor){out.g, (size_t)rows * ldo, PPSRT_BF16}, ho));
  OK(gpu->upload_f32(gpu, (ppsrt_tensor){lse.g, (size_t)batch * Hq * T, PPSRT_F32}, hl));
  free(ho);
  free(hl);
  pair dout = mk((size_t)rows * ldo, PPSRT_BF16, 1, 0), dqkv = mk((size_t)rows * W, PPSRT_BF16, 3, 0);
  OK(cpu->attention_bwd(cpu, 0, dqkv.c, (float *)dqkv.c + ko, (float *)dqkv.c + vo, W, dout.c, out.c, lse.c, qkv.c, W,
                        (float *)qkv.c + ko, W, (float *)qkv.c + vo, W, batch, T, Hq, Hkv, D, dr));
  OK(gpu->attention_bwd(gpu, 0, dqkv.g, (uint16_t *)dqkv.g + ko, (uint16_t *)dqkv.g + vo, W, dout.g, out.g, lse.g,
                        qkv.g, W, (uint16_t *)qkv.g + ko, W, (uint16_t *)qkv.g + vo, W, batch, T, Hq, Hkv, D, dr));
  snprintf(w, sizeof w, "attention_bwd dq|dk|dv %s", label);
  double r = sqrt((double)T * (Hq / Hkv) / 1024.0);
  compare(w, &dqkv, (tol){TOL_ATTN_BWD.abs * (r > 1 ? r : 1), TOL_ATTN_BWD.rel});
  norm_bound = 0;
  drop(&qkv); drop(&out); drop(&lse); drop(&dout); drop(&dqkv);
  gpu = keep;
}

/* attention_fwd_at / attention_bwd_at (--context-parallel): one sequence's query block
 * [q0, q0 + Tq) against keys [0, q0 + Tq), the CPU's against the GPU's (the cuBLAS path's
 * chunks start at q0, lse and delta indexed from it); dq [Tq, W], dk|dv [Tk, 2 Hkv D]. */
static void t_attention_at_on(ppsrt_backend *g_be, const char *label, int T, int q0, int Tq, int Hq, int Hkv, int D) {
  ppsrt_backend *keep = gpu;
  gpu = g_be;
  int W = (Hq + 2 * Hkv) * D, ldo = Hq * D, Tk = q0 + Tq, kw = 2 * Hkv * D;
  pair qkv = mk((size_t)T * W, PPSRT_BF16, 1, 0);
  pair out = mk((size_t)Tq * ldo, PPSRT_BF16, 0, 0), lse = mk((size_t)Hq * Tq, PPSRT_F32, 0, 0);
  size_t ko = (size_t)Hq * D, vo = (size_t)(Hq + Hkv) * D, qo = (size_t)q0 * W;
  OK(cpu->attention_fwd_at(cpu, 0, out.c, lse.c, (float *)qkv.c + qo, W, (float *)qkv.c + ko, W, (float *)qkv.c + vo, W,
                           Tq, q0, Hq, Hkv, D, NULL));
  OK(gpu->attention_fwd_at(gpu, 0, out.g, lse.g, (uint16_t *)qkv.g + qo, W, (uint16_t *)qkv.g + ko, W,
                           (uint16_t *)qkv.g + vo, W, Tq, q0, Hq, Hkv, D, NULL));
  char w[96];
  norm_bound = 1.0 / 32;
  snprintf(w, sizeof w, "attention_fwd_at out %s", label);
  compare(w, &out, TOL_MM);
  snprintf(w, sizeof w, "attention_fwd_at lse %s", label);
  norm_bound = 0;
  compare(w, &lse, (tol){1e-3, 1e-3});
  norm_bound = 1.0 / 32;
  float *ho = malloc((size_t)Tq * ldo * 4), *hl = malloc((size_t)Hq * Tq * 4);
  OK(cpu->download_f32(cpu, ho, (ppsrt_tensor){out.c, (size_t)Tq * ldo, PPSRT_F32}));
  OK(cpu->download_f32(cpu, hl, (ppsrt_tensor){lse.c, (size_t)Hq * Tq, PPSRT_F32}));
  for (size_t i = 0; i < (size_t)Tq * ldo; i++) ho[i] = round_bf16(ho[i]);
  OK(cpu->upload_f32(cpu, (ppsrt_tensor){out.c, (size_t)Tq * ldo, PPSRT_F32}, ho));
  OK(gpu->upload_f32(gpu, (ppsrt_tensor){out.g, (size_t)Tq * ldo, PPSRT_BF16}, ho));
  OK(gpu->upload_f32(gpu, (ppsrt_tensor){lse.g, (size_t)Hq * Tq, PPSRT_F32}, hl));
  free(ho);
  free(hl);
  pair dout = mk((size_t)Tq * ldo, PPSRT_BF16, 1, 0), dq = mk((size_t)Tq * W, PPSRT_BF16, 3, 0);
  pair dkv = mk((size_t)Tk * kw, PPSRT_BF16, 3, 0);
  OK(cpu->attention_bwd_at(cpu, 0, dq.c, W, dkv.c, (float *)dkv.c + Hkv * D, kw, dout.c, out.c, lse.c,
                           (float *)qkv.c + qo, W, (float *)qkv.c + ko, W, (float *)qkv.c + vo, W, Tq, q0, Hq, Hkv, D, NULL));
  OK(gpu->attention_bwd_at(gpu, 0, dq.g, W, dkv.g, (uint16_t *)dkv.g + Hkv * D, kw, dout.g, out.g, lse.g,
                           (uint16_t *)qkv.g + qo, W, (uint16_t *)qkv.g + ko, W, (uint16_t *)qkv.g + vo, W, Tq, q0, Hq, Hkv,
                           D, NULL));
  double r = sqrt((double)Tk * (Hq / Hkv) / 1024.0);
  tol tb = {TOL_ATTN_BWD.abs * (r > 1 ? r : 1), TOL_ATTN_BWD.rel};
  /* dq: only its Hq D columns are written (the rest of the rows keep what mk put there on both) */
  snprintf(w, sizeof w, "attention_bwd_at dq %s", label);
  compare(w, &dq, tb);
  snprintf(w, sizeof w, "attention_bwd_at dk|dv %s", label);
  compare(w, &dkv, tb);
  norm_bound = 0;
  drop(&qkv); drop(&out); drop(&lse); drop(&dout); drop(&dq); drop(&dkv);
  gpu = keep;
}

static void t_attention(void) {
  t_attention_on(gpu, "b2 T33 Hq4 Hkv2 D16", 2, 33, 4, 2, 16, NULL);
  t_attention_on(gpu, "b1 T70 Hq6 Hkv6 D32", 1, 70, 6, 6, 32, NULL);
  /* Longer sequences run in chunks of query rows (T = 200: 4 chunks of 64 rows). With a
   * 1 MiB workspace cap, T = 600 (5 chunks of 128 rows, the last partial) also splits
   * the group of 4 query heads: 2 heads per unit forward (460 KB of scratch per head),
   * 1 backward (768 KB). */
  setenv("PPSRT_CUDA_ATTN_WS_MB", "1", 1);
  ppsrt_backend *small = NULL;
  OK(ppsrt_cuda_backend_create(0, &small));
  unsetenv("PPSRT_CUDA_ATTN_WS_MB");
  t_attention_on(small, "b2 T200 Hq4 Hkv2 D16 row chunks", 2, 200, 4, 2, 16, NULL);
  t_attention_on(small, "b1 T600 Hq4 Hkv1 D16 chunks, split group", 1, 600, 4, 1, 16, NULL);
  /* T = 300 (5 chunks of 64 rows): backward units of 4 heads (230 KB each), so 6 heads
   * make a unit of 4 and one of 2: multi-head (per-head dK/dV written to their columns)
   * and one kv group of 6 split over the two units (summed into the group's) */
  t_attention_on(small, "b1 T300 Hq6 Hkv6 D16 MHA, units of 4+2", 1, 300, 6, 6, 16, NULL);
  t_attention_on(small, "b2 T300 Hq6 Hkv1 D16 GQA, group split 4+2", 2, 300, 6, 1, 16, NULL);
  /* attention dropout: the masks of the cuBLAS path's kernels (a unit's heads, a chunk's
   * rows) are the CPU's; p = 0.2, a tensor rank's heads from 3 of 12 (base 3) */
  ppsrt_dropout d = {ppsrt_drop_thr(0.2), (float)(1.0 / 0.8), ppsrt_drop_key(3, 1, 2, 0, PPSRT_DROP_ATTN), 3, 12, 0};
  t_attention_on(gpu, "b2 T33 Hq4 Hkv2 D16 dropout 0.2", 2, 33, 4, 2, 16, &d);
  t_attention_on(small, "b2 T200 Hq4 Hkv2 D16 row chunks, dropout", 2, 200, 4, 2, 16, &d);
  t_attention_on(small, "b2 T300 Hq6 Hkv1 D16 group split 4+2, dropout", 2, 300, 6, 1, 16, &d);
  /* a query block at an offset (--context-parallel): short, and in row chunks from q0
   * (T = 600, block [300, 450): 3 chunks of 64 rows, keys up to 450) */
  t_attention_at_on(gpu, "T40 block [20, 30) Hq4 Hkv2 D16", 40, 20, 10, 4, 2, 16);
  t_attention_at_on(gpu, "T40 block [0, 10) Hq6 Hkv6 D16", 40, 0, 10, 6, 6, 16);
  t_attention_at_on(small, "T600 block [300, 450) Hq4 Hkv1 D16 row chunks", 600, 300, 150, 4, 1, 16);
  small->destroy(small);
}

/* The fused attention path (cuDNN SDPA, runtime/cuda/attn_cudnn.cpp) against the same
 * CPU reference as the cuBLAS path above, so the two paths are held to one standard:
 *  - model-sized heads (D 64, 128; T a multiple of 64 and not) must run fused, forward
 *    and backward (the backend's call counters say which path ran);
 *  - the small shapes of t_attention run fused where cuDNN takes them, else on the cuBLAS
 *    path (PPSRT_CUDA_ATTN=auto), and say which;
 *  - the forward's lse and the backward reading the CPU's lse show that cuDNN keeps the
 *    same log-sum-exp as the cuBLAS path (either backward can follow either forward);
 *  - the backward twice on the same inputs: bit for bit (deterministic algorithm).
 * On the emulator (no cuDNN) and in a build without the frontend: PPSRT_CUDA_ATTN=cudnn
 * is refused with the reason, auto runs the cuBLAS path, a bad value is a usage error.
 * With a GPU and PPS_REQUIRE_CUDNN=1, a cuDNN that does not load is a failure, not a skip. */
#if !defined(PPSRT_CUDA_EMULATE) && defined(HAVE_CUDNN_FE)
static void attn_det(ppsrt_backend *be, const char *label, int batch, int T, int Hq, int Hkv, int D) {
  ppsrt_backend *keep = gpu;
  gpu = be;
  int W = (Hq + 2 * Hkv) * D, rows = batch * T, ldo = Hq * D;
  size_t ko = (size_t)Hq * D, vo = (size_t)(Hq + Hkv) * D;
  pair qkv = mk((size_t)rows * W, PPSRT_BF16, 1, 0), out = mk((size_t)rows * ldo, PPSRT_BF16, 0, 0);
  pair lse = mk((size_t)batch * Hq * T, PPSRT_F32, 0, 0), dout = mk((size_t)rows * ldo, PPSRT_BF16, 1, 0);
  pair d1 = mk((size_t)rows * W, PPSRT_BF16, 0, 0), d2 = mk((size_t)rows * W, PPSRT_BF16, 0, 0);
  uint16_t *q = qkv.g;
  OK(be->attention_fwd(be, 0, out.g, lse.g, q, W, q + ko, W, q + vo, W, batch, T, Hq, Hkv, D, NULL));
  pair *d[2] = {&d1, &d2};
  for (int i = 0; i < 2; i++) {
    uint16_t *g = d[i]->g;
    OK(be->attention_bwd(be, 0, g, g + ko, g + vo, W, dout.g, out.g, lse.g, q, W, q + ko, W, q + vo, W, batch, T, Hq,
                         Hkv, D, NULL));
  }
  char w[96];
  snprintf(w, sizeof w, "attention_bwd deterministic %s", label);
  same_gpu(w, &d1, &d2);
  drop(&qkv); drop(&out); drop(&lse); drop(&dout); drop(&d1); drop(&d2);
  gpu = keep;
}

static void attn_fused_case(ppsrt_backend *be, int must, const char *label, int batch, int T, int Hq, int Hkv, int D) {
  long f0, u0, f1, u1;
  ppsrt_cuda_attention_calls(be, &f0, &u0);
  char w[96];
  snprintf(w, sizeof w, "cudnn %s", label);
  t_attention_on(be, w, batch, T, Hq, Hkv, D, NULL);
  ppsrt_cuda_attention_calls(be, &f1, &u1);
  checks++;
  if (f1 - f0 == 2 && u1 == u0) {
    printf("ok   %-44s fused forward and backward\n", w);
  } else if (must) {
    failures++;
    fprintf(stderr, "FAIL: %s: %ld fused and %ld cuBLAS-path calls, expected 2 fused\n", w, f1 - f0, u1 - u0);
  } else {
    printf("ok   %-44s cuDNN refused it: %ld fused, %ld on the cuBLAS path\n", w, f1 - f0, u1 - u0);
  }
}

#endif

static void t_attention_cudnn(void) {
  ppsrt_backend *be = (ppsrt_backend *)1;
  setenv("PPSRT_CUDA_ATTN", "bogus", 1);
  int rc = ppsrt_cuda_backend_create(0, &be);
  checks++;
  if (rc != PPSRT_E_USAGE || be || !strstr(ppsrt_last_error(), "bogus")) {
    failures++;
    fprintf(stderr, "FAIL: PPSRT_CUDA_ATTN=bogus: rc %d, message: %s\n", rc, ppsrt_last_error());
  } else {
    printf("ok   PPSRT_CUDA_ATTN=bogus refused: %s\n", ppsrt_last_error());
  }
  setenv("PPSRT_CUDA_ATTN", "cudnn", 1);
  rc = ppsrt_cuda_backend_create(0, &be);
  char why[1024];
  snprintf(why, sizeof why, "%s", rc ? ppsrt_last_error() : "");
  unsetenv("PPSRT_CUDA_ATTN");
#if defined(PPSRT_CUDA_EMULATE) || !defined(HAVE_CUDNN_FE)
  checks++;
#ifdef HAVE_CUDNN_FE
  const char *want = "emulator has no cuDNN";
#else
  const char *want = "built without the cuDNN frontend";
#endif
  if (rc != PPSRT_E_BACKEND || be || !strstr(why, want) || !strstr(why, "hint:")) {
    failures++;
    fprintf(stderr, "FAIL: PPSRT_CUDA_ATTN=cudnn without cuDNN: rc %d, message: %s\n", rc, why);
    if (!rc) be->destroy(be);
  } else {
    printf("ok   PPSRT_CUDA_ATTN=cudnn refused here: %.60s...\n", why);
  }
  setenv("PPSRT_CUDA_ATTN", "auto", 1);
  OK(ppsrt_cuda_backend_create(0, &be));
  unsetenv("PPSRT_CUDA_ATTN");
  checks++;
  if (strcmp(ppsrt_cuda_attention_path(be), "cublas")) {
    failures++;
    fprintf(stderr, "FAIL: PPSRT_CUDA_ATTN=auto without cuDNN runs %s\n", ppsrt_cuda_attention_path(be));
  } else {
    printf("ok   PPSRT_CUDA_ATTN=auto without cuDNN: the cuBLAS path\n");
  }
  be->destroy(be);
#else
  if (rc) {
    const char *req = getenv("PPS_REQUIRE_CUDNN");
    checks++;
    if (req && !strcmp(req, "1")) {
      failures++;
      fprintf(stderr, "FAIL: PPSRT_CUDA_ATTN=cudnn (PPS_REQUIRE_CUDNN=1): %s\n", why);
    } else {
      printf("skip cuDNN attention: not usable here: %s\n", why);
    }
    return;
  }
  printf("# cuDNN %d for the fused attention path\n", ppsrt_cudnn_version());
  be->destroy(be);
  setenv("PPSRT_CUDA_ATTN", "auto", 1);
  OK(ppsrt_cuda_backend_create(0, &be));
  unsetenv("PPSRT_CUDA_ATTN");
  attn_fused_case(be, 1, "b1 T512 Hq8 Hkv2 D128", 1, 512, 8, 2, 128);
  attn_fused_case(be, 1, "b2 T256 Hq4 Hkv4 D64 MHA", 2, 256, 4, 4, 64);
  attn_fused_case(be, 1, "b1 T200 Hq4 Hkv1 D64", 1, 200, 4, 1, 64);
  attn_fused_case(be, 1, "b1 T384 Hq16 Hkv4 D128", 1, 384, 16, 4, 128);
  attn_fused_case(be, 0, "b2 T33 Hq4 Hkv2 D16", 2, 33, 4, 2, 16);
  attn_fused_case(be, 0, "b1 T70 Hq6 Hkv6 D32", 1, 70, 6, 6, 32);
  attn_fused_case(be, 0, "b2 T300 Hq6 Hkv1 D16", 2, 300, 6, 1, 16);
  attn_det(be, "cudnn b1 T512 Hq8 Hkv2 D128", 1, 512, 8, 2, 128);
  be->destroy(be);
#endif
}

/* Fused GEMM epilogues (backend.h gemm_ep, cuBLASLt: runtime/cuda/gemm_lt.c) on a backend
 * made with PPSRT_CUDA_EPILOGUE=lt, each against the CPU reference of the unfused
 * sequence it replaces, and the same inputs through that unfused sequence on the GPU at
 * the same tolerance; each fused call must have run fused (the calls counted), not
 * fallen back. The layer's shapes: T tokens, hidden h, 4h wide MLP; pad > 0 strides the
 * rows. A call that falls back (cuBLASLt has no algorithm for it) is a failure on the
 * emulator, which takes every one; on a GPU it is reported (that epilogue cannot be
 * turned on for such shapes) and the unfused sequence computes what is compared. */
static unsigned ep_fell;   /* PPSRT_EP_* bits of the calls of ep_case that fell back */
static int ep_run(int ep, int rc) {
  if (rc < 0) die("gemm_ep", rc);
  if (rc) ep_fell |= (unsigned)ep;
  return rc;
}
static void ep_case(const char *label, int T, int h, int pad) {
  const int F = 4 * h, ldx = h + pad, ldf = F + 8 * pad;   /* the GeLU input's stride: a multiple of 8 */
  char w[128];
  long f0, u0, f1, u1;
  ppsrt_cuda_epilogue_calls(gpu, &f0, &u0);
  ep_fell = 0;
  for (int fz = 1; fz >= 0; fz--) {
    const char *path = fz ? "fused" : "unfused";
    /* F: pre = x Wfc + b, y = gelu(pre) */
    pair x = mk((size_t)T * ldx, PPSRT_BF16, 1, 0), wfc = mk((size_t)h * ldf, PPSRT_BF16, 0.2f, 0),
         b = mk((size_t)F, PPSRT_BF16, 0.5f, 0), pre = mk((size_t)T * ldf, PPSRT_BF16, 0, 0),
         y = mk((size_t)T * ldf, PPSRT_BF16, 0, 0);
    OK(cpu->gemm(cpu, 0, 0, 0, T, F, h, 1.0f, x.c, PPSRT_F32, ldx, wfc.c, PPSRT_F32, ldf, 0.0f, pre.c, PPSRT_F32, ldf));
    for (int r = 0; r < T; r++)
      OK(cpu->add_bias_gelu(cpu, 0, (float *)y.c + (size_t)r * ldf, (float *)pre.c + (size_t)r * ldf,
                            (float *)pre.c + (size_t)r * ldf, b.c, 1, F));
    if (!fz || ep_run(PPSRT_EP_BIAS_GELU, gpu->gemm_ep(gpu, 0, PPSRT_EP_BIAS_GELU, 0, 0, T, F, h, 1.0f, x.g, PPSRT_BF16,
                                                       ldx, wfc.g, PPSRT_BF16, ldf, 0.0f, y.g, PPSRT_BF16, ldf, b.g,
                                                       pre.g, NULL))) {
      OK(gpu->gemm(gpu, 0, 0, 0, T, F, h, 1.0f, x.g, PPSRT_BF16, ldx, wfc.g, PPSRT_BF16, ldf, 0.0f, pre.g, PPSRT_BF16, ldf));
      for (int r = 0; r < T; r++)
        OK(gpu->add_bias_gelu(gpu, 0, (uint16_t *)y.g + (size_t)r * ldf, (uint16_t *)pre.g + (size_t)r * ldf,
                              (uint16_t *)pre.g + (size_t)r * ldf, b.g, 1, F));
    }
    snprintf(w, sizeof w, "epilogue bias+gelu %s %s: GeLU input", label, path);
    compare(w, &pre, TOL_MM);
    snprintf(w, sizeof w, "epilogue bias+gelu %s %s: output", label, path);
    compare(w, &y, TOL_MM);
    /* F: out = res + y Wfc2 + b2 (beta 1: the residual already in out) */
    pair wfc2 = mk((size_t)F * ldx, PPSRT_BF16, 0.2f, 0), b2 = mk((size_t)h, PPSRT_BF16, 0.5f, 0),
         out = mk((size_t)T * ldx, PPSRT_BF16, 1, 0);
    OK(cpu->gemm(cpu, 0, 0, 0, T, h, F, 1.0f, y.c, PPSRT_F32, ldf, wfc2.c, PPSRT_F32, ldx, 1.0f, out.c, PPSRT_F32, ldx));
    for (int r = 0; r < T; r++)
      OK(cpu->add_bias(cpu, 0, (float *)out.c + (size_t)r * ldx, (float *)out.c + (size_t)r * ldx, b2.c, 1, h));
    if (!fz || ep_run(PPSRT_EP_BIAS, gpu->gemm_ep(gpu, 0, PPSRT_EP_BIAS, 0, 0, T, h, F, 1.0f, y.g, PPSRT_BF16, ldf,
                                                 wfc2.g, PPSRT_BF16, ldx, 1.0f, out.g, PPSRT_BF16, ldx, b2.g, NULL,
                                                 NULL))) {
      OK(gpu->gemm(gpu, 0, 0, 0, T, h, F, 1.0f, y.g, PPSRT_BF16, ldf, wfc2.g, PPSRT_BF16, ldx, 1.0f, out.g, PPSRT_BF16, ldx));
      for (int r = 0; r < T; r++)
        OK(gpu->add_bias(gpu, 0, (uint16_t *)out.g + (size_t)r * ldx, (uint16_t *)out.g + (size_t)r * ldx, b2.g, 1, h));
    }
    snprintf(w, sizeof w, "epilogue bias (beta 1) %s %s", label, path);
    compare(w, &out, TOL_MM);
    /* B: dpre = (dy Wfc2^T) * gelu'(pre), the GeLU input a copy (the output must not overlap it) */
    pair dy = mk((size_t)T * ldx, PPSRT_BF16, 1, 0), dpre = mk((size_t)T * ldf, PPSRT_BF16, 0, 0),
         tmp = mk((size_t)T * ldf, PPSRT_BF16, 0, 0);
    OK(cpu->gemm(cpu, 0, 0, 1, T, F, h, 1.0f, dy.c, PPSRT_F32, ldx, wfc2.c, PPSRT_F32, ldx, 0.0f, tmp.c, PPSRT_F32, ldf));
    OK(cpu->gelu_bwd(cpu, 0, dpre.c, tmp.c, pre.c, (size_t)T * ldf));
    if (fz) OK(gpu->memcpy_async(gpu, 0, tmp.g, pre.g, (size_t)T * ldf * 2, 0));
    if (!fz || ep_run(PPSRT_EP_DGELU, gpu->gemm_ep(gpu, 0, PPSRT_EP_DGELU, 0, 1, T, F, h, 1.0f, dy.g, PPSRT_BF16, ldx,
                                                  wfc2.g, PPSRT_BF16, ldx, 0.0f, dpre.g, PPSRT_BF16, ldf, NULL, tmp.g,
                                                  NULL))) {
      OK(gpu->gemm(gpu, 0, 0, 1, T, F, h, 1.0f, dy.g, PPSRT_BF16, ldx, wfc2.g, PPSRT_BF16, ldx, 0.0f, tmp.g, PPSRT_BF16, ldf));
      OK(gpu->gelu_bwd(gpu, 0, dpre.g, tmp.g, pre.g, (size_t)T * ldf));
    }
    snprintf(w, sizeof w, "epilogue dgelu %s %s", label, path);
    compare(w, &dpre, TOL_MM);
    /* W, on fresh inputs (both sides the same bf16 values, as F32 arithmetic is compared):
     * dW2 += a^T dy, db2 += colsum(dy); dW += x^T g, db += colsum(g), F32 */
    pair a = mk((size_t)T * ldf, PPSRT_BF16, 1, 0), gg = mk((size_t)T * F, PPSRT_BF16, 1, 0);
    pair dw2 = mk((size_t)F * h, PPSRT_F32, 1, 0), db2 = mk((size_t)h, PPSRT_F32, 1, 0),
         dw = mk((size_t)h * F, PPSRT_F32, 1, 0), db = mk((size_t)F, PPSRT_F32, 1, 0);
    OK(cpu->gemm(cpu, 0, 1, 0, F, h, T, 1.0f, a.c, PPSRT_F32, ldf, dy.c, PPSRT_F32, ldx, 1.0f, dw2.c, PPSRT_F32, h));
    OK(cpu->gemm(cpu, 0, 1, 0, h, F, T, 1.0f, x.c, PPSRT_F32, ldx, gg.c, PPSRT_F32, F, 1.0f, dw.c, PPSRT_F32, F));
    for (int r = 0; r < T; r++) OK(cpu->bias_grad(cpu, 0, db2.c, (float *)dy.c + (size_t)r * ldx, 1, h));
    OK(cpu->bias_grad(cpu, 0, db.c, gg.c, T, F));
    if (!fz || ep_run(PPSRT_EP_BGRAD, gpu->gemm_ep(gpu, 0, PPSRT_EP_BGRAD, 1, 0, F, h, T, 1.0f, a.g, PPSRT_BF16, ldf,
                                                  dy.g, PPSRT_BF16, ldx, 1.0f, dw2.g, PPSRT_F32, h, NULL, NULL,
                                                  db2.g))) {
      OK(gpu->gemm(gpu, 0, 1, 0, F, h, T, 1.0f, a.g, PPSRT_BF16, ldf, dy.g, PPSRT_BF16, ldx, 1.0f, dw2.g, PPSRT_F32, h));
      for (int r = 0; r < T; r++) OK(gpu->bias_grad(gpu, 0, db2.g, (uint16_t *)dy.g + (size_t)r * ldx, 1, h));
    }
    if (!fz || ep_run(PPSRT_EP_BGRAD, gpu->gemm_ep(gpu, 0, PPSRT_EP_BGRAD, 1, 0, h, F, T, 1.0f, x.g, PPSRT_BF16, ldx,
                                                  gg.g, PPSRT_BF16, F, 1.0f, dw.g, PPSRT_F32, F, NULL, NULL, db.g))) {
      OK(gpu->gemm(gpu, 0, 1, 0, h, F, T, 1.0f, x.g, PPSRT_BF16, ldx, gg.g, PPSRT_BF16, F, 1.0f, dw.g, PPSRT_F32, F));
      OK(gpu->bias_grad(gpu, 0, db.g, gg.g, T, F));
    }
    snprintf(w, sizeof w, "epilogue bgrad %s %s: dW2", label, path);
    compare(w, &dw2, TOL_F32);
    snprintf(w, sizeof w, "epilogue bgrad %s %s: db2 (+=)", label, path);
    compare(w, &db2, TOL_F32);
    snprintf(w, sizeof w, "epilogue bgrad %s %s: dW", label, path);
    compare(w, &dw, TOL_F32);
    snprintf(w, sizeof w, "epilogue bgrad %s %s: db (+=)", label, path);
    compare(w, &db, TOL_F32);
    pair *all[] = {&x, &wfc, &b, &pre, &y, &wfc2, &b2, &out, &dy, &dpre, &tmp, &a, &gg, &dw2, &db2, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) drop(all[i]);
  }
  ppsrt_cuda_epilogue_calls(gpu, &f1, &u1);
  checks++;
  if (f1 - f0 + u1 - u0 != 5 || (f1 - f0 == 5) != !ep_fell) {
    failures++;
    fprintf(stderr, "FAIL: epilogues %s: %ld calls counted fused, %ld fallen back, the test saw 0x%x fall back "
            "(expected 5 calls)\n", label, f1 - f0, u1 - u0, ep_fell);
  } else if (ep_fell) {
#ifdef PPSRT_CUDA_EMULATE
    failures++;
    fprintf(stderr, "FAIL: epilogues %s: %ld of the 5 calls fell back (epilogues 0x%x) on the emulator\n", label,
            u1 - u0, ep_fell);
#else
    printf("note epilogues %s: %ld of the 5 calls fell back (epilogues 0x%x: no cuBLASLt algorithm; compared "
           "unfused)\n", label, u1 - u0, ep_fell);
#endif
  } else {
    printf("ok   epilogues %s: the 5 calls ran fused\n", label);
  }
}

static void t_epilogue(void) {
  ppsrt_backend *be = (ppsrt_backend *)1;
  setenv("PPSRT_CUDA_EPILOGUE", "bias,bogus", 1);
  int rc = ppsrt_cuda_backend_create(0, &be);
  checks++;
  if (rc != PPSRT_E_USAGE || be || !strstr(ppsrt_last_error(), "PPSRT_CUDA_EPILOGUE=bias,bogus")) {
    failures++;
    fprintf(stderr, "FAIL: PPSRT_CUDA_EPILOGUE=bias,bogus: rc %d, message: %s\n", rc, ppsrt_last_error());
  } else {
    printf("ok   PPSRT_CUDA_EPILOGUE=bias,bogus refused: %s\n", ppsrt_last_error());
  }
  /* the default backend fuses nothing (off until measured on a GPU); a list picks some */
  checks++;
  if (gpu->epilogues || gpu->gemm_ep || ppsrt_cuda_epilogues(gpu)) {
    failures++;
    fprintf(stderr, "FAIL: the default CUDA backend fuses epilogues 0x%x\n", ppsrt_cuda_epilogues(gpu));
  } else {
    printf("ok   PPSRT_CUDA_EPILOGUE unset: nothing fused\n");
  }
  setenv("PPSRT_CUDA_EPILOGUE", "bgrad,bias", 1);
  OK(ppsrt_cuda_backend_create(0, &be));
  checks++;
  if (be->epilogues != (PPSRT_EP_BGRAD | PPSRT_EP_BIAS)) {
    failures++;
    fprintf(stderr, "FAIL: PPSRT_CUDA_EPILOGUE=bgrad,bias fuses 0x%x\n", be->epilogues);
  } else {
    printf("ok   PPSRT_CUDA_EPILOGUE=bgrad,bias: those two\n");
  }
  /* an epilogue switched off: nothing queued, 1 (the caller runs the unfused kernels) */
  checks++;
  rc = be->gemm_ep(be, 0, PPSRT_EP_DGELU, 0, 0, 8, 8, 8, 1.0f, NULL, PPSRT_BF16, 8, NULL, PPSRT_BF16, 8, 0.0f, NULL,
                   PPSRT_BF16, 8, NULL, NULL, NULL);
  if (rc != 1) {
    failures++;
    fprintf(stderr, "FAIL: gemm_ep of an epilogue switched off returned %d, not 1\n", rc);
  } else {
    printf("ok   gemm_ep of an epilogue switched off: 1 (run unfused)\n");
  }
  be->destroy(be);
  setenv("PPSRT_CUDA_EPILOGUE", "lt", 1);
  OK(ppsrt_cuda_backend_create(0, &be));
  unsetenv("PPSRT_CUDA_EPILOGUE");
  ppsrt_backend *keep = gpu;
  gpu = be;
  ep_case("T37 h24", 37, 24, 0);
  ep_case("T33 h40 strided rows", 33, 40, 3);
  {   /* a GeLU input stride cuBLASLt does not take (not a multiple of 8): falls back */
    long f0, u0, f1, u1;
    pair a = mk(16 * 16, PPSRT_BF16, 1, 0), c = mk(16 * 20, PPSRT_BF16, 0, 0), x = mk(16 * 20, PPSRT_BF16, 0, 0);
    ppsrt_cuda_epilogue_calls(gpu, &f0, &u0);
    rc = gpu->gemm_ep(gpu, 0, PPSRT_EP_DGELU, 0, 0, 16, 16, 16, 1.0f, a.g, PPSRT_BF16, 16, a.g, PPSRT_BF16, 16, 0.0f,
                      c.g, PPSRT_BF16, 20, NULL, x.g, NULL);
    ppsrt_cuda_epilogue_calls(gpu, &f1, &u1);
    checks++;
    if (rc != 1 || f1 != f0 || u1 != u0 + 1) {
      failures++;
      fprintf(stderr, "FAIL: gemm_ep DGELU with ldc 20: rc %d, fused %ld, fell back %ld\n", rc, f1 - f0, u1 - u0);
    } else {
      printf("ok   gemm_ep DGELU with ldc 20 (not a multiple of 8): falls back\n");
    }
    drop(&a); drop(&c); drop(&x);
  }
  gpu = keep;
  be->destroy(be);
}

static void t_embedding(void) {
  const int N = 50, C = 96, lo = 100, hi = 164, V = hi - lo;
  pair table = mk((size_t)V * C, PPSRT_BF16, 1, 0);
  ipair ids = mk_ids(N, 80, 180);   /* some outside [lo, hi) */
  pair out = mk((size_t)N * C, PPSRT_BF16, 1, 0);
  OK(cpu->embedding_fwd(cpu, 0, out.c, ids.c, table.c, N, C, lo, hi, 0));
  OK(gpu->embedding_fwd(gpu, 0, out.g, ids.g, table.g, N, C, lo, hi, 0));
  compare("embedding_fwd", &out, TOL_BF16);
  OK(cpu->embedding_fwd(cpu, 0, out.c, ids.c, table.c, N, C, lo, hi, 1));
  OK(gpu->embedding_fwd(gpu, 0, out.g, ids.g, table.g, N, C, lo, hi, 1));
  compare("embedding_fwd accumulate", &out, TOL_BF16);
  pair dout = mk((size_t)N * C, PPSRT_BF16, 1, 0), dt = mk((size_t)V * C, PPSRT_F32, 1, 0);
  OK(cpu->embedding_bwd(cpu, 0, dt.c, dout.c, ids.c, N, C, lo, hi));
  OK(gpu->embedding_bwd(gpu, 0, dt.g, dout.g, ids.g, N, C, lo, hi));
  compare("embedding_bwd (+=)", &dt, TOL_F32);
  drop(&table); drop(&out); drop(&dout); drop(&dt);
  cpu->free(cpu, ids.c);
  gpu->free(gpu, ids.g);
}

static void t_softmax(void) {
  const int N = 40, V = 3001, lo = 5000;
  pair lg = mk((size_t)N * V, PPSRT_BF16, 3, 0);
  ipair tg = mk_ids(N, lo - 500, lo + V + 500);
  pair mx = mk(N, PPSRT_F32, 0, 0), se = mk(N, PPSRT_F32, 0, 0), tt = mk(N, PPSRT_F32, 0, 0);
  OK(cpu->softmax_stats(cpu, 0, mx.c, se.c, tt.c, lg.c, tg.c, N, V, lo));
  OK(gpu->softmax_stats(gpu, 0, mx.g, se.g, tt.g, lg.g, tg.g, N, V, lo));
  compare("softmax_stats max", &mx, TOL_F32);
  compare("softmax_stats sumexp", &se, TOL_F32);
  compare("softmax_stats target logit", &tt, TOL_F32);
  /* global statistics a little above the shard's, as after the merge */
  pair gm = mk(N, PPSRT_F32, 0.5f, 12), gs = mk(N, PPSRT_F32, 10, 2000);
  pair dl = mk((size_t)N * V, PPSRT_BF16, 0, 0);
  OK(cpu->softmax_xent_bwd(cpu, 0, dl.c, lg.c, gm.c, gs.c, tg.c, N, V, lo, 0.125f));
  OK(gpu->softmax_xent_bwd(gpu, 0, dl.g, lg.g, gm.g, gs.g, tg.g, N, V, lo, 0.125f));
  compare("softmax_xent_bwd", &dl, TOL_BF16);
  OK(cpu->softmax_xent_bwd(cpu, 0, lg.c, lg.c, gm.c, gs.c, tg.c, N, V, lo, 1.0f));
  OK(gpu->softmax_xent_bwd(gpu, 0, lg.g, lg.g, gm.g, gs.g, tg.g, N, V, lo, 1.0f));
  compare("softmax_xent_bwd in place", &lg, TOL_BF16);
  const int Cr = 33;
  pair x = mk((size_t)N * Cr, PPSRT_F32, 1, 0), lm = mk(N, PPSRT_F32, 1, 10), ls = mk(N, PPSRT_F32, 5, 50);
  OK(cpu->softmax_rescale_f32(cpu, 0, x.c, lm.c, ls.c, gm.c, gs.c, N, Cr));
  OK(gpu->softmax_rescale_f32(gpu, 0, x.g, lm.g, ls.g, gm.g, gs.g, N, Cr));
  compare("softmax_rescale_f32 (lsum, gsum)", &x, TOL_F32);
  OK(cpu->softmax_rescale_f32(cpu, 0, x.c, lm.c, NULL, gm.c, NULL, N, Cr));
  OK(gpu->softmax_rescale_f32(gpu, 0, x.g, lm.g, NULL, gm.g, NULL, N, Cr));
  compare("softmax_rescale_f32 (no sums)", &x, TOL_F32);
  drop(&lg); drop(&mx); drop(&se); drop(&tt); drop(&gm); drop(&gs); drop(&dl); drop(&x); drop(&lm); drop(&ls);
  cpu->free(cpu, tg.c);
  gpu->free(gpu, tg.g);
}

static void t_optimizer(void) {
  const size_t n = 5000;
  for (int kind = 0; kind < 2; kind++) {
    pair w = mk(n, PPSRT_F32, 1, 0), grad = mk(n, PPSRT_F32, 0.1f, 0), m = mk(n, PPSRT_F32, 0.01f, 0);
    pair v = mk(n, PPSRT_F32, 0, 1e-4f), param = mk(n, PPSRT_BF16, 0, 0);
    OK(cpu->optimizer_step(cpu, 0, kind, w.c, param.c, grad.c, m.c, v.c, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3));
    OK(gpu->optimizer_step(gpu, 0, kind, w.g, param.g, grad.g, m.g, v.g, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3));
    compare(kind ? "adam master" : "sgd master", &w, TOL_F32);
    compare(kind ? "adam param (bf16 copy)" : "sgd param (bf16 copy)", &param, TOL_BF16);
    compare(kind ? "adam grad zeroed" : "sgd grad zeroed", &grad, TOL_F32);
    if (kind) {
      compare("adam m", &m, TOL_F32);
      compare("adam v", &v, TOL_F32);
    }
    drop(&w); drop(&grad); drop(&m); drop(&v); drop(&param);
  }
}

/* Offload round trip through pinned memory on the copy streams, ordered by events;
 * memory accounting; timing events. */
static void t_streams_memory(void) {
#ifdef PPSRT_CUDA_EMULATE
  const size_t n = 1 << 16;   /* emulated kernels are slow */
#else
  const size_t n = 1 << 20;
#endif
  size_t cur0, peak0, cur1, peak1;
  OK(gpu->mem_stats(gpu, &cur0, &peak0, 1));
  pair a = mk(n, PPSRT_F32, 1, 0);
  void *host = NULL, *back = NULL;
  OK(gpu->host_alloc(gpu, n * 4, &host));
  OK(gpu->alloc(gpu, n * 4, &back));
  OK(gpu->mem_stats(gpu, &cur1, &peak1, 0));
  checks++;
  if (cur1 != cur0 + 2 * n * 4 || peak1 < cur1) {
    failures++;
    fprintf(stderr, "FAIL: mem_stats: current %zu (expected %zu), peak %zu\n", cur1, cur0 + 2 * n * 4, peak1);
  } else {
    printf("ok   %-44s %zu bytes counted\n", "mem_stats after alloc", cur1 - cur0);
  }
  ppsrt_event *e0, *e1, *e2, *t0, *t1;
  OK(gpu->event_create(gpu, &e0));
  OK(gpu->event_create(gpu, &e1));
  OK(gpu->event_create(gpu, &e2));
  OK(gpu->event_create(gpu, &t0));
  OK(gpu->event_create(gpu, &t1));
  (void)gpu->event_elapsed(gpu, t0, t1);   /* switches timing on for later records */
  OK(gpu->event_record(gpu, t0, PPSRT_STREAM_COMPUTE));
  OK(gpu->scale_f32(gpu, PPSRT_STREAM_COMPUTE, a.g, 2.0f, n));
  OK(gpu->event_record(gpu, e0, PPSRT_STREAM_COMPUTE));
  OK(gpu->stream_wait_event(gpu, PPSRT_STREAM_D2H, e0));
  OK(gpu->memcpy_async(gpu, PPSRT_STREAM_D2H, host, a.g, n * 4, 2));
  OK(gpu->event_record(gpu, e1, PPSRT_STREAM_D2H));
  OK(gpu->stream_wait_event(gpu, PPSRT_STREAM_H2D, e1));
  OK(gpu->memcpy_async(gpu, PPSRT_STREAM_H2D, back, host, n * 4, 1));
  OK(gpu->event_record(gpu, e2, PPSRT_STREAM_H2D));
  OK(gpu->stream_wait_event(gpu, PPSRT_STREAM_COMPUTE, e2));
  OK(gpu->scale_f32(gpu, PPSRT_STREAM_COMPUTE, back, 0.5f, n));
  OK(gpu->event_record(gpu, t1, PPSRT_STREAM_COMPUTE));
  OK(gpu->event_sync(gpu, t1));
  checks++;
  int q = gpu->event_query(gpu, e2);
  double el = gpu->event_elapsed(gpu, t0, t1);
  if (q != 1 || !(el >= 0)) {
    failures++;
    fprintf(stderr, "FAIL: events: query %d (expected 1), elapsed %g (expected >= 0)\n", q, el);
  } else {
    printf("ok   %-44s elapsed %.3f ms\n", "events: query, elapsed", el * 1e3);
  }
  OK(cpu->scale_f32(cpu, 0, a.c, 2.0f, n));
  OK(cpu->scale_f32(cpu, 0, a.c, 0.5f, n));
  void *keep = a.g;
  a.g = back;
  compare("offload round trip D2H -> pinned -> H2D", &a, TOL_F32);
  a.g = keep;
  gpu->free(gpu, back);
  gpu->host_free(gpu, host);
  drop(&a);
  /* a freed block comes back for the same size without new device memory */
  void *p1, *p2;
  OK(gpu->alloc(gpu, (7 << 20) + 12345, &p1));   /* a size no other block fits */
  OK(gpu->stream_sync(gpu, PPSRT_STREAM_COMPUTE));
  gpu->free(gpu, p1);
  for (int s = 0; s < PPSRT_NSTREAMS; s++) OK(gpu->stream_sync(gpu, s));
  OK(gpu->alloc(gpu, (7 << 20) + 12345, &p2));
  checks++;
  if (p2 != p1) {
    failures++;
    fprintf(stderr, "FAIL: allocator: a freed, idle block was not reused (%p then %p)\n", p1, p2);
  } else {
    printf("ok   %-44s\n", "allocator reuses an idle block");
  }
  gpu->free(gpu, p2);
  OK(gpu->mem_stats(gpu, &cur1, &peak1, 0));
  checks++;
  if (cur1 != cur0) {
    failures++;
    fprintf(stderr, "FAIL: mem_stats: %zu bytes counted after freeing everything (expected %zu)\n", cur1, cur0);
  }
  /* a buffer allocated by one rank's backend and freed through another's (a transport
   * handing a message buffer from sender to receiver) returns to its owner */
  ppsrt_backend *other = NULL;
  void *msg = NULL;
  size_t oc0, oc1, opk;
  OK(ppsrt_cuda_backend_create(0, &other));
  OK(other->mem_stats(other, &oc0, &opk, 0));
  OK(other->alloc(other, 4096, &msg));
  gpu->free(gpu, msg);
  OK(other->mem_stats(other, &oc1, &opk, 0));
  checks++;
  if (oc1 != oc0 || opk < 4096) {
    failures++;
    fprintf(stderr, "FAIL: free through another backend: owner counts %zu bytes (expected %zu), peak %zu\n", oc1, oc0,
            opk);
  } else {
    printf("ok   %-44s\n", "free through another rank's backend");
  }
  other->destroy(other);
  gpu->event_destroy(gpu, e0);
  gpu->event_destroy(gpu, e1);
  gpu->event_destroy(gpu, e2);
  gpu->event_destroy(gpu, t0);
  gpu->event_destroy(gpu, t1);
}

#ifdef HAVE_NCCL
/* ---- transport: P ranks as threads, each with its own backend ---- */
#define TP_RANKS 3
typedef struct tp_arg { ppsrt_transport *t; int rank, rc; char err[512]; } tp_arg;

static void *tp_rank(void *v) {
  tp_arg *a = v;
  ppsrt_transport *t = a->t;
  int r = a->rank, P = t->nranks, rc;
  ppsrt_backend *b = NULL;
  ppsrt_event *xev = NULL;
  const size_t n = 4099;
  float *h = malloc(n * 4), *buf = NULL, *in = NULL;
#define TRY(call)                                                        \
  do {                                                                   \
    if ((rc = (call))) {                                                 \
      snprintf(a->err, sizeof a->err, "%s: %s", #call, ppsrt_last_error()); \
      goto out;                                                          \
    }                                                                    \
  } while (0)
#define EXPECT(cond, ...)                                                \
  do {                                                                   \
    if (!(cond)) {                                                       \
      snprintf(a->err, sizeof a->err, __VA_ARGS__);                      \
      rc = 1;                                                            \
      goto out;                                                          \
    }                                                                    \
  } while (0)
  TRY(ppsrt_cuda_backend_create(r, &b));
  TRY(b->event_create(b, &xev));
  TRY(b->alloc(b, n * 4, (void **)&buf));
  TRY(b->alloc(b, n * 4, (void **)&in));
  /* ring: send to r+1 and receive from r-1, twice (FIFO order), then the reverse */
  for (int k = 0; k < 2; k++) {
    /* a sent buffer is written again only through the allocator, which waits for the
     * send (the NCCL transport's sends complete on their channel's stream: transport.h) */
    b->free(b, buf);
    buf = NULL;
    TRY(b->alloc(b, n * 4, (void **)&buf));
    for (size_t i = 0; i < n; i++) h[i] = (float)(r * 1000 + k) + (float)i * 1e-3f;
    TRY(b->upload_f32(b, (ppsrt_tensor){buf, n, PPSRT_F32}, h));
    /* the upload runs on COMPUTE: the send stream waits for it, as the interpreter does */
    TRY(b->event_record(b, xev, PPSRT_STREAM_COMPUTE));
    TRY(b->stream_wait_event(b, PPSRT_STREAM_SEND, xev));
    TRY(t->send(t, r, b, PPSRT_STREAM_SEND, buf, n * 4, (r + 1) % P, k));
    TRY(t->recv(t, r, b, PPSRT_STREAM_RECV, in, n * 4, (r + P - 1) % P, k));
    TRY(b->stream_sync(b, PPSRT_STREAM_RECV));
    TRY(b->stream_sync(b, PPSRT_STREAM_SEND));
    TRY(b->download_f32(b, h, (ppsrt_tensor){in, n, PPSRT_F32}));
    int from = (r + P - 1) % P;
    EXPECT(h[7] == (float)(from * 1000 + k) + 7e-3f, "rank %d: message %d from %d: got %g", r, k, from, h[7]);
  }
  /* all-reduce sum and max, broadcast */
  b->free(b, buf);
  buf = NULL;
  TRY(b->alloc(b, n * 4, (void **)&buf));
  for (size_t i = 0; i < n; i++) h[i] = (float)(r + 1) * (float)(i % 7);
  TRY(b->upload_f32(b, (ppsrt_tensor){buf, n, PPSRT_F32}, h));
  TRY(t->allreduce_f32(t, r, b, PPSRT_STREAM_COMPUTE, buf, n, PPSRT_SUM));
  TRY(b->download_f32(b, h, (ppsrt_tensor){buf, n, PPSRT_F32}));
  EXPECT(h[5] == 5.0f * (float)(P * (P + 1) / 2), "rank %d: all-reduce sum gave %g", r, h[5]);
  for (size_t i = 0; i < n; i++) h[i] = (float)r - (float)(i % 3);
  TRY(b->upload_f32(b, (ppsrt_tensor){buf, n, PPSRT_F32}, h));
  TRY(t->allreduce_f32(t, r, b, PPSRT_STREAM_COMPUTE, buf, n, PPSRT_MAX));
  TRY(b->download_f32(b, h, (ppsrt_tensor){buf, n, PPSRT_F32}));
  EXPECT(h[4] == (float)(P - 1) - 1.0f, "rank %d: all-reduce max gave %g", r, h[4]);
  for (size_t i = 0; i < n; i++) h[i] = (float)(r * 10);
  TRY(b->upload_f32(b, (ppsrt_tensor){buf, n, PPSRT_F32}, h));
  TRY(t->broadcast(t, r, b, PPSRT_STREAM_COMPUTE, buf, n * 4, 1));
  TRY(b->download_f32(b, h, (ppsrt_tensor){buf, n, PPSRT_F32}));
  EXPECT(h[n - 1] == 10.0f, "rank %d: broadcast from 1 gave %g", r, h[n - 1]);
  TRY(t->barrier(t, r));
  rc = 0;
out:
  if (rc) t->abort(t, r, a->err);
  if (b) {
    if (xev) b->event_destroy(b, xev);
    if (buf) b->free(b, buf);
    b->free(b, in);
    b->destroy(b);
  }
  free(h);
  a->rc = rc;
  return NULL;
}

static void t_transport(const char *mode) {
  if (mode) setenv("PPSRT_NCCL_INPROC", mode, 1);
  ppsrt_transport *t = NULL;
  int my = -1;
  OK(ppsrt_nccl_transport_create(TP_RANKS, 60.0, 0, &t, &my));
  if (mode) unsetenv("PPSRT_NCCL_INPROC");
  pthread_t th[TP_RANKS];
  tp_arg args[TP_RANKS];
  for (int r = 0; r < TP_RANKS; r++) {
    args[r] = (tp_arg){t, r, 0, ""};
    pthread_create(&th[r], NULL, tp_rank, &args[r]);
  }
  int bad = 0;
  for (int r = 0; r < TP_RANKS; r++) {
    pthread_join(th[r], NULL);
    if (args[r].rc) {
      bad = 1;
      fprintf(stderr, "FAIL: transport (%s) rank %d: %s\n", mode ? mode : "default", r, args[r].err);
    }
  }
  t->destroy(t);
  checks++;
  if (bad) failures++;
  else printf("ok   transport %-34s %d ranks: ring send/recv, all-reduce sum/max, broadcast, barrier\n",
              mode ? mode : "(default mode)", TP_RANKS);
}
#endif

#ifdef HAVE_NCCL
/* Faults in the copy channel: a rank that aborts wakes the others' waits (recv, barrier)
 * with PPSRT_E_COMM well before the timeout; a recv whose peer never sends fails with
 * PPSRT_E_TIMEOUT naming both ranks, and the timeout aborts the run for the others. */
typedef struct fault_arg {
  ppsrt_transport *t;
  int rank, role, rc;
  double secs;
  char msg[600];
} fault_arg;

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void *fault_rank(void *v) {
  fault_arg *a = v;
  ppsrt_backend *b = NULL;
  void *buf = NULL;
  a->rc = ppsrt_cuda_backend_create(a->rank, &b);
  if (!a->rc) a->rc = b->alloc(b, 256, &buf);
  double t0 = mono_s();
  if (!a->rc) switch (a->role) {
    case 0: a->rc = a->t->recv(a->t, a->rank, b, PPSRT_STREAM_RECV, buf, 256, (a->rank + 1) % a->t->nranks, 7); break;
    case 1: {
      struct timespec ts = {0, 200 * 1000 * 1000};
      nanosleep(&ts, NULL);
      a->t->abort(a->t, a->rank, "injected fault");
      a->rc = PPSRT_E_COMM;
      break;
    }
    case 2: a->rc = a->t->barrier(a->t, a->rank); break;
    case 3: {   /* stays silent past the peer's timeout, then meets a barrier */
      struct timespec ts = {0, 700 * 1000 * 1000};
      nanosleep(&ts, NULL);
      a->rc = a->t->barrier(a->t, a->rank);
      break;
    }
    }
  a->secs = mono_s() - t0;
  snprintf(a->msg, sizeof a->msg, "%s", a->rc ? ppsrt_last_error() : "");
  if (b) {
    b->free(b, buf);
    b->destroy(b);
  }
  return NULL;
}

static void run_faults(int n, double timeout, const int *roles, fault_arg *args) {
  setenv("PPSRT_NCCL_INPROC", "copy", 1);
  ppsrt_transport *t = NULL;
  int my;
  OK(ppsrt_nccl_transport_create(n, timeout, 0, &t, &my));
  unsetenv("PPSRT_NCCL_INPROC");
  pthread_t th[4];
  for (int r = 0; r < n; r++) {
    args[r] = (fault_arg){t, r, roles[r], 0, 0, ""};
    pthread_create(&th[r], NULL, fault_rank, &args[r]);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  t->destroy(t);
}

static void t_transport_faults(void) {
  fault_arg a[3];
  /* rank 0 waits for rank 1, rank 1 aborts, rank 2 waits at a barrier; timeout 20 s */
  run_faults(3, 20.0, (const int[]){0, 1, 2}, a);
  checks++;
  if (a[0].rc != PPSRT_E_COMM || a[2].rc != PPSRT_E_COMM || a[0].secs > 5 || a[2].secs > 5 ||
      !strstr(a[0].msg, "injected fault") || !strstr(a[2].msg, "injected fault")) {
    failures++;
    fprintf(stderr, "FAIL: abort: rank 0 rc %d after %.2f s (%s); rank 2 rc %d after %.2f s (%s)\n", a[0].rc, a[0].secs,
            a[0].msg, a[2].rc, a[2].secs, a[2].msg);
  } else {
    printf("ok   %-44s recv and barrier fail with the reason in %.2f / %.2f s\n", "transport abort reaches every rank",
           a[0].secs, a[2].secs);
  }
  /* rank 0 waits for a message rank 1 never sends; timeout 0.3 s */
  run_faults(2, 0.3, (const int[]){0, 3}, a);
  checks++;
  if (a[0].rc != PPSRT_E_TIMEOUT || !strstr(a[0].msg, "rank 0") || !strstr(a[0].msg, "rank 1") || a[1].rc != PPSRT_E_COMM ||
      !strstr(a[1].msg, "timed out")) {
    failures++;
    fprintf(stderr, "FAIL: timeout: rank 0 rc %d (%s); rank 1 rc %d (%s)\n", a[0].rc, a[0].msg, a[1].rc, a[1].msg);
  } else {
    printf("ok   %-44s after %.2f s; the silent rank then fails at its barrier\n", "transport recv timeout", a[0].secs);
  }
}
#endif

/* trim (between iterations) releases a free block only after three trims in which no
 * allocation took it; counted with the emulator's cudaFree counter when it is there */
extern void pps_emu_alloc_counts(unsigned long long *mallocs, unsigned long long *frees) __attribute__((weak));
static void t_trim(void) {
  if (!pps_emu_alloc_counts || !gpu->trim) return;
  unsigned long long m0, f0, m1, f1, m2, f2;
  void *p;
  OK(gpu->alloc(gpu, (size_t)3 << 20, &p));   /* a size nothing else uses */
  gpu->free(gpu, p);
  OK(gpu->stream_sync(gpu, PPSRT_STREAM_COMPUTE));
  pps_emu_alloc_counts(&m0, &f0);
  OK(gpu->trim(gpu));
  OK(gpu->trim(gpu));
  pps_emu_alloc_counts(&m1, &f1);
  OK(gpu->trim(gpu));
  pps_emu_alloc_counts(&m2, &f2);
  checks++;
  if (f1 != f0 || f2 < f0 + 1) {
    failures++;
    fprintf(stderr, "FAIL: trim: cudaFree calls %llu -> %llu after two trims, %llu after three (expected +0, then +1 or more)\n",
            f0, f1, f2);
  } else {
    printf("ok   trim between iterations                  a block idle for three trims released (%llu cudaFree)\n",
           f2 - f0);
  }
}

/* A launch the GPU rejects (grid.y past 65535) is reported by the launcher's
 * cudaGetLastError, and a launch error is not sticky: the next cudaGetLastError and the
 * next launch succeed (real CUDA 13 answers cudaErrorInvalidValue here; the exact codes
 * are tests/gpu/conformance's business). */
static void t_launch_config(void) {
  void *P = NULL;
  float *S = NULL, *lse = NULL;
  OK(gpu->alloc(gpu, 1024, &P));
  OK(gpu->alloc(gpu, 1024, (void **)&S));
  OK(gpu->alloc(gpu, 1024, (void **)&lse));
  cudaStream_t s = ppsrt_cuda_stream(gpu, PPSRT_STREAM_COMPUTE);
  cudaError_t bad = ppsrt_cu_attn_softmax_fwd(s, P, lse, S, 70000, 1, 1, 0, 1, 1, 1.0f, 0, 1.0f, 0, 0);
  cudaError_t after = cudaGetLastError();
  cudaError_t good = ppsrt_cu_attn_softmax_fwd(s, P, lse, S, 1, 1, 1, 0, 1, 1, 1.0f, 0, 1.0f, 0, 0);
  OK(gpu->stream_sync(gpu, PPSRT_STREAM_COMPUTE));
  checks++;
  if ((bad != cudaErrorInvalidValue && bad != cudaErrorInvalidConfiguration) || after != cudaSuccess ||
      good != cudaSuccess) {
    failures++;
    fprintf(stderr, "FAIL: launch configuration: grid.y 70000 gave %s, then %s; a valid launch gave %s "
            "(expected an invalid-value or invalid-configuration error, then cudaSuccess twice)\n",
            cudaGetErrorName(bad), cudaGetErrorName(after), cudaGetErrorName(good));
  } else {
    printf("ok   launch configuration                     grid.y 70000 -> %s, not sticky\n", cudaGetErrorName(bad));
  }
  gpu->free(gpu, P);
  gpu->free(gpu, S);
  gpu->free(gpu, lse);
}

/* No GPU: no device, or no driver at all (cudart then says the driver is insufficient;
 * with a driver library present that is a broken installation, not an absent GPU). */
static int no_gpu(cudaError_t e) {
  if (e == cudaErrorNoDevice) return 1;
  if (e != cudaErrorInsufficientDriver) return 0;
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return !h;
}

int main(int argc, char **argv) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) ndev = 0;
  if (argc > 1 && !strcmp(argv[1], "--count")) {
    /* an error other than "no GPU" is an error: the GPU tests must not read it as zero */
    if (e != cudaSuccess && !no_gpu(e)) {
      fprintf(stderr, "cuda_kernels: error: cudaGetDeviceCount: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
      return 1;
    }
    printf("%d\n", ndev);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--no-device")) {
    if (ndev > 0) {
      printf("SKIP: a GPU is visible; this checks the error without one\n");
      return 77;
    }
    ppsrt_backend *b = (ppsrt_backend *)1;
    int rc = ppsrt_cuda_backend_create(0, &b);
    const char *msg = ppsrt_last_error();
    if (rc != PPSRT_E_BACKEND || b != NULL || !strstr(msg, "no CUDA device visible") || !strstr(msg, "hint:")) {
      fprintf(stderr, "FAIL: ppsrt_cuda_backend_create without a GPU: rc %d (expected %d), out %p, message: %s\n", rc,
              PPSRT_E_BACKEND, (void *)b, msg);
      return 1;
    }
    printf("ok   no GPU: rc %d, message: %s\n", rc, msg);
    return 0;
  }
#ifdef PPSRT_CUDA_EMULATE
  {   /* fibers under valgrind take many minutes; the plain build runs this test */
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "vgpreload")) {
      printf("SKIP: the emulated kernel test does not run under valgrind\n");
      return 77;
    }
  }
#endif
  if (e != cudaSuccess && !no_gpu(e)) {
    fprintf(stderr, "FAIL: cudaGetDeviceCount: %s (%s): a CUDA error, not an absent GPU\n", cudaGetErrorName(e),
            cudaGetErrorString(e));
    return 1;
  }
  if (ndev == 0) {
    printf("SKIP: no CUDA device visible (%s)\n", e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return 77;
  }
  OK(ppsrt_cpu_backend_create(0, &cpu));
  OK(ppsrt_cuda_backend_create(0, &gpu));
  struct cudaDeviceProp prop;
#ifdef PPSRT_CUDA_EMULATE
  printf("# EMULATED: kernels.cu on host threads, fake cudart/cuBLAS (tests/gpu/emu); no GPU involved\n");
#endif
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    printf("# GPU 0: %s, compute capability %d.%d\n", prop.name, prop.major, prop.minor);
  t_gemm();
  t_elementwise();
  t_layernorm();
  t_rope();
  t_swiglu();
  t_moe();
  t_dropout();
  t_attention();
  t_attention_cudnn();
  t_epilogue();
  t_embedding();
  t_softmax();
  t_optimizer();
  t_streams_memory();
  t_launch_config();
  t_trim();
#ifdef HAVE_NCCL
  t_transport("copy");
  t_transport_faults();
#ifdef PPSRT_CUDA_EMULATE
  setenv("PPSRT_EMU_GPUS", "3", 1);   /* the NCCL mode against the fake in-process NCCL */
  t_transport(NULL);
  unsetenv("PPSRT_EMU_GPUS");
#else
  if (ndev >= TP_RANKS) t_transport(NULL);
  else printf("skip transport NCCL mode: %d GPU(s), %d ranks need one each\n", ndev, TP_RANKS);
#endif
#endif
  gpu->destroy(gpu);
  cpu->destroy(cpu);
  printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
