/* test_kernels.c: checks every kernel of the CPU backend (runtime/cpu_backend.c,
 * runtime/cpu_kernels.c) on tiny tensors.
 *
 * - forward kernels against naive references computed in double;
 * - every backward (gelu, layer norm and RMS norm input and weight halves, SwiGLU,
 *   rope, attention dq/dk/dv, softmax cross-entropy, bias and embedding gradients)
 *   against central finite differences of a scalar probe L = sum_i r_i * y_i (r fixed
 *   random weights, L summed in double), eps = 1e-2 (the kernels are F32, so the
 *   probe's rounding noise is ~1e-4 on these sizes);
 * - rope on strided rows (ld > H*D: the columns past H*D exactly untouched), its
 *   inverse undoing it and being its transpose (<rope(x), r> == <x, rope_inverse(r)>);
 *   SwiGLU's backward in place (dpre = pre) exactly as out of place;
 * - attention over a query block at an offset (attention_fwd_at/bwd_at) vs the whole
 *   sequence's rows;
 * - attention with grouped query heads and strided (fused QKV) inputs vs a naive
 *   double reference; sharded embedding and softmax (2 and 3 shards, online-softmax
 *   merge) vs unsharded; SGD and Adam vs a double reference; copy streams and events;
 * - dropout (runtime/dropout.h): bias_dropout_add's exact values, the fraction dropped
 *   over 2^20 elements within 5 standard errors of p (p = 0.1, 0.5, 0.9), a kept
 *   element scaled by exactly 1/(1-p), masks of other keys and offsets independent;
 *   attention with dropout vs a double reference with the same mask, and its backward
 *   (the regenerated mask) vs finite differences.
 * Every comparison prints its tolerance `atol + rtol*|ref|` and max difference; a
 * failure prints the first differing index and exits 1. Does not test BF16 (the CPU
 * backend has none) nor the CUDA backend. Runs in well under a second. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"

static ppsrt_backend *be;
static int failures;
static uint64_t rng_state = 88172645463325252ull;

static float frand(void) {   /* uniform [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((rng_state >> 40) / 8388608.0 - 1.0);
}
static float *vec(size_t n) {
  void *p = NULL;
  if (be->alloc(be, n * sizeof(float) + 4, &p)) {
    fprintf(stderr, "alloc: %s\n", ppsrt_last_error());
    exit(1);
  }
  return p;
}
static float *rvec(size_t n, float s) {
  float *p = vec(n);
  for (size_t i = 0; i < n; i++) p[i] = s * frand();
  return p;
}
static void OK(int rc, const char *what) {
  if (rc) {
    fprintf(stderr, "FAIL %s: rc %d: %s\n", what, rc, ppsrt_last_error());
    exit(1);
  }
}

/* |got - ref| <= atol + rtol*|ref| elementwise. */
static void check(const char *name, const float *got, const double *ref, size_t n, double atol, double rtol) {
  double maxd = 0.0;
  long first = -1;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (!(d <= atol + rtol * fabs(ref[i])) && first < 0) first = (long)i;
    if (d > maxd || d != d) maxd = d;
  }
  if (first >= 0) {
    printf("FAIL %-34s n=%-5zu max|diff| %.3e > tol %.0e + %.0e*|ref|; first at [%ld]: got %.7g ref %.7g\n",
           name, n, maxd, atol, rtol, first, (double)got[first], ref[first]);
    failures++;
  } else {
    printf("ok   %-34s n=%-5zu max|diff| %.3e  (tol %.0e + %.0e*|ref|)\n", name, n, maxd, atol, rtol);
  }
}
/* Central finite differences of probe() with respect to x[0..n): out[i] = dL/dx_i. */
typedef double (*probe_fn)(void *ctx);
static void fd_grad(probe_fn probe, void *ctx, float *x, size_t n, double *out) {
  const float eps = 1e-2f;
  for (size_t i = 0; i < n; i++) {
    float x0 = x[i];
    x[i] = x0 + eps;
    double lp = probe(ctx);
    x[i] = x0 - eps;
    double lm = probe(ctx);
    x[i] = x0;
    out[i] = (lp - lm) / (2.0 * (double)eps);
  }
}
static double dot(const float *r, const float *y, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)r[i] * y[i];
  return s;
}

/* ---------------------------------------------------------------- gemm */
static void test_gemm(void) {
  const int M = 7, N = 5, K = 6;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;
      int arows = ta ? K : M, brows = tb ? N : K;
      float *A = rvec((size_t)arows * lda, 1), *B = rvec((size_t)brows * ldb, 1), *C = rvec((size_t)M * ldc, 1);
      double *ref = malloc(sizeof(double) * M * ldc);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) {
          if (j >= N) { ref[i * ldc + j] = C[i * ldc + j]; continue; }
          double s = 0;
          for (int k = 0; k < K; k++)
            s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
          ref[i * ldc + j] = 0.5 * s + 0.25 * C[i * ldc + j];
        }
      OK(be->gemm(be, 0, ta, tb, M, N, K, 0.5f, A, PPSRT_F32, lda, B, PPSRT_F32, ldb, 0.25f, C, PPSRT_F32, ldc), "gemm");
      char name[64];
      snprintf(name, sizeof name, "gemm ta=%d tb=%d (strided, beta)", ta, tb);
      check(name, C, ref, (size_t)M * ldc, 1e-5, 1e-5);
      be->free(be, A); be->free(be, B); be->free(be, C);
      free(ref);
    }
  /* batched: 3 products, operands packed one after another */
  const int cnt = 3;
  float *A = rvec((size_t)cnt * M * K, 1), *B = rvec((size_t)cnt * K * N, 1), *C = vec((size_t)cnt * M * N);
  double *ref = malloc(sizeof(double) * cnt * M * N);
  for (int c = 0; c < cnt; c++)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)A[c * M * K + i * K + k] * B[c * K * N + k * N + j];
        ref[c * M * N + i * N + j] = s;
      }
  OK(be->gemm_strided(be, 0, 0, 0, M, N, K, 1.0f, A, PPSRT_F32, K, (long)M * K, B, PPSRT_F32, N, (long)K * N, 0.0f, C,
                      PPSRT_F32, N, (long)M * N, cnt), "gemm_strided");
  check("gemm_strided count=3", C, ref, (size_t)cnt * M * N, 1e-5, 1e-5);
  be->free(be, A); be->free(be, B); be->free(be, C);
  free(ref);
}

/* ---------------------------------------------------------------- elementwise */
typedef struct { float *x, *y, *r; size_t n; } ew_ctx;
static double probe_gelu(void *p) {
  ew_ctx *c = p;
  be->gelu_fwd(be, 0, c->y, c->x, c->n);
  return dot(c->r, c->y, c->n);
}
static void test_elementwise(void) {
  const int N = 4, C = 9;
  size_t n = (size_t)N * C;
  float *x = rvec(n, 3), *bias = rvec(C, 1), *y = vec(n), *r = rvec(n, 1), *dx = vec(n), *db = vec(C);
  double *ref = malloc(n * sizeof *ref);
  /* add_bias (in place too) */
  for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] + bias[i % C];
  OK(be->add_bias(be, 0, y, x, bias, N, C), "add_bias");
  check("add_bias", y, ref, n, 0, 1e-7);
  memcpy(y, x, n * sizeof *y);
  OK(be->add_bias(be, 0, y, y, bias, N, C), "add_bias");
  check("add_bias in place", y, ref, n, 0, 1e-7);
  /* add */
  for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] + r[i];
  OK(be->add(be, 0, y, x, r, n), "add");
  check("add", y, ref, n, 0, 1e-7);
  /* bias_grad accumulates column sums */
  for (int c = 0; c < C; c++) {
    db[c] = 1.0f;
    double s = 1.0;
    for (int k = 0; k < N; k++) s += r[k * C + c];
    ref[c] = s;
  }
  OK(be->bias_grad(be, 0, db, r, N, C), "bias_grad");
  check("bias_grad (+=)", db, ref, C, 1e-6, 1e-6);
  /* gelu forward against the formula in double, backward against FD */
  for (size_t i = 0; i < n; i++) {
    double v = x[i];
    ref[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  OK(be->gelu_fwd(be, 0, y, x, n), "gelu_fwd");
  check("gelu_fwd", y, ref, n, 1e-6, 1e-5);
  ew_ctx ctx = {x, y, r, n};
  fd_grad(probe_gelu, &ctx, x, n, ref);
  memcpy(dx, r, n * sizeof *dx);
  OK(be->gelu_bwd(be, 0, dx, dx, x, n), "gelu_bwd");   /* dx aliases dy */
  check("gelu_bwd vs FD (dx aliases dy)", dx, ref, n, 2e-4, 2e-3);
  /* fused bias + GeLU: pre = x + bias against double, y = gelu(pre) against the formula
   * in double, and bit for bit add_bias then gelu_fwd; then in place (pre aliases x) */
  {
    float *pre = vec(n), *fy = vec(n), *u = vec(n), *xc = vec(n);
    for (size_t i = 0; i < n; i++) {
      double v = (double)x[i] + bias[i % C];
      ref[i] = v;
    }
    OK(be->add_bias_gelu(be, 0, fy, pre, x, bias, N, C), "add_bias_gelu");
    check("add_bias_gelu pre", pre, ref, n, 0, 1e-7);
    for (size_t i = 0; i < n; i++) {
      double v = pre[i];
      ref[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    }
    check("add_bias_gelu y", fy, ref, n, 1e-6, 1e-5);
    OK(be->add_bias(be, 0, u, x, bias, N, C), "add_bias");
    OK(be->gelu_fwd(be, 0, u, u, n), "gelu_fwd");
    for (size_t i = 0; i < n; i++) ref[i] = u[i];
    check("add_bias_gelu y == add_bias + gelu_fwd (exactly)", fy, ref, n, 0, 0);
    memcpy(xc, x, n * sizeof *xc);
    OK(be->add_bias_gelu(be, 0, u, xc, xc, bias, N, C), "add_bias_gelu in place");
    for (size_t i = 0; i < n; i++) ref[i] = pre[i];
    check("add_bias_gelu in place: pre (exactly)", xc, ref, n, 0, 0);
    for (size_t i = 0; i < n; i++) ref[i] = fy[i];
    check("add_bias_gelu in place: y (exactly)", u, ref, n, 0, 0);
    /* gelu_bwd with dx aliasing x (the models write dhpre over hpre) */
    memcpy(xc, x, n * sizeof *xc);
    OK(be->gelu_bwd(be, 0, xc, r, xc, n), "gelu_bwd dx = x");
    for (size_t i = 0; i < n; i++) ref[i] = dx[i];
    check("gelu_bwd (dx aliases x) == gelu_bwd (exactly)", xc, ref, n, 0, 0);
    be->free(be, pre); be->free(be, fy); be->free(be, u); be->free(be, xc);
  }
  /* axpy, scale */
  for (size_t i = 0; i < n; i++) { ref[i] = (double)y[i] + 0.5 * x[i]; }
  OK(be->axpy_f32(be, 0, y, x, 0.5f, n), "axpy");
  check("axpy_f32", y, ref, n, 1e-6, 1e-6);
  for (size_t i = 0; i < n; i++) ref[i] = (double)y[i] * -3.0;
  OK(be->scale_f32(be, 0, y, -3.0f, n), "scale");
  check("scale_f32", y, ref, n, 1e-6, 1e-6);
  be->free(be, x); be->free(be, bias); be->free(be, y); be->free(be, r); be->free(be, dx); be->free(be, db);
  free(ref);
}

/* bias_grad and embedding_bwd against finite differences of their forwards */
typedef struct { float *x, *bias, *y, *r; int N, C; const int32_t *ids; int lo, hi; } lin_ctx;
static double probe_add_bias(void *p) {
  lin_ctx *c = p;
  be->add_bias(be, 0, c->y, c->x, c->bias, c->N, c->C);
  return dot(c->r, c->y, (size_t)c->N * c->C);
}
static double probe_embedding(void *p) {
  lin_ctx *c = p;
  be->embedding_fwd(be, 0, c->y, c->ids, c->x, c->N, c->C, c->lo, c->hi, 0);
  return dot(c->r, c->y, (size_t)c->N * c->C);
}
static void test_linear_fd(void) {
  const int N = 7, C = 5, lo = 3, hi = 9;
  int32_t ids[7] = {3, 8, 0, 5, 5, 11, 8};   /* two outside the shard, duplicates */
  lin_ctx c = {rvec((size_t)(hi - lo) * C, 1), rvec(C, 1), vec((size_t)N * C), rvec((size_t)N * C, 1), N, C, ids, lo, hi};
  float *x2 = rvec((size_t)N * C, 1), *g = vec((size_t)(hi - lo) * C);
  double *ref = malloc(sizeof(double) * (hi - lo) * C);
  lin_ctx cb = c;
  cb.x = x2;
  memset(g, 0, sizeof(float) * C);
  OK(be->bias_grad(be, 0, g, c.r, N, C), "bias_grad");
  fd_grad(probe_add_bias, &cb, cb.bias, C, ref);
  check("bias_grad vs FD of add_bias", g, ref, C, 2e-4, 2e-3);
  memset(g, 0, sizeof(float) * (hi - lo) * C);
  OK(be->embedding_bwd(be, 0, g, c.r, ids, N, C, lo, hi), "embedding_bwd");
  fd_grad(probe_embedding, &c, c.x, (size_t)(hi - lo) * C, ref);
  check("embedding_bwd shard vs FD of fwd", g, ref, (size_t)(hi - lo) * C, 2e-4, 2e-3);
  be->free(be, c.x); be->free(be, c.bias); be->free(be, c.y); be->free(be, c.r); be->free(be, x2); be->free(be, g);
  free(ref);
}

/* ---------------------------------------------------------------- layer norm */
typedef struct { float *x, *g, *bt, *y, *mean, *rstd, *r; int N, C; float eps; } ln_ctx;
static double probe_ln(void *p) {
  ln_ctx *c = p;
  be->layernorm_fwd(be, 0, c->y, c->mean, c->rstd, c->x, c->g, c->bt, c->N, c->C, c->eps);
  return dot(c->r, c->y, (size_t)c->N * c->C);
}
/* eps: --norm-epsilon's; a large one (the rows' variances are about 1) shows a kernel
 * that adds another */
static void test_layernorm(float eps) {
  const int N = 5, C = 12;
  size_t n = (size_t)N * C;
  ln_ctx c = {rvec(n, 2), rvec(C, 1), rvec(C, 1), vec(n), vec(N), vec(N), rvec(n, 1), N, C, eps};
  for (int i = 0; i < C; i++) c.g[i] += 1.5f;
  double *ref = malloc(n * sizeof *ref);
  for (int i = 0; i < N; i++) {
    double m = 0, v = 0;
    for (int k = 0; k < C; k++) m += c.x[i * C + k];
    m /= C;
    for (int k = 0; k < C; k++) v += (c.x[i * C + k] - m) * (c.x[i * C + k] - m);
    v /= C;
    for (int k = 0; k < C; k++) ref[i * C + k] = (c.x[i * C + k] - m) / sqrt(v + (double)eps) * c.g[k] + c.bt[k];
  }
  probe_ln(&c);
  char name[64];
  snprintf(name, sizeof name, "layernorm_fwd eps %g", eps);
  check(name, c.y, ref, n, 1e-5, 1e-5);
  float *dx = vec(n), *dg = vec(C), *dbt = vec(C);
  fd_grad(probe_ln, &c, c.x, n, ref);
  probe_ln(&c);
  OK(be->layernorm_bwd_input(be, 0, dx, c.r, c.x, c.mean, c.rstd, c.g, N, C, 0), "ln bwd input");
  check("layernorm_bwd_input vs FD", dx, ref, n, 2e-4, 2e-3);
  for (size_t i = 0; i < n; i++) ref[i] += 1.0;   /* accumulate = 1 adds */
  for (size_t i = 0; i < n; i++) dx[i] = 1.0f;
  OK(be->layernorm_bwd_input(be, 0, dx, c.r, c.x, c.mean, c.rstd, c.g, N, C, 1), "ln bwd input acc");
  check("layernorm_bwd_input accumulate", dx, ref, n, 2e-4, 2e-3);
  memset(dg, 0, C * sizeof *dg);
  memset(dbt, 0, C * sizeof *dbt);
  OK(be->layernorm_bwd_weight(be, 0, dg, dbt, c.r, c.x, c.mean, c.rstd, N, C), "ln bwd weight");
  fd_grad(probe_ln, &c, c.g, C, ref);
  check("layernorm_bwd_weight dgamma vs FD", dg, ref, C, 2e-4, 2e-3);
  fd_grad(probe_ln, &c, c.bt, C, ref);
  check("layernorm_bwd_weight dbeta vs FD", dbt, ref, C, 2e-4, 2e-3);
  be->free(be, c.x); be->free(be, c.g); be->free(be, c.bt); be->free(be, c.y); be->free(be, c.mean);
  be->free(be, c.rstd); be->free(be, c.r); be->free(be, dx); be->free(be, dg); be->free(be, dbt);
  free(ref);
}

/* ---------------------------------------------------------------- RMS norm */
/* layer norm with mean == NULL: y = x rstd gamma (+ beta), rstd = 1/sqrt(mean_c x^2 + eps);
 * with and without beta (beta == NULL, dbeta == NULL) */
static void test_rmsnorm(int with_beta, float eps) {
  const int N = 5, C = 12;
  size_t n = (size_t)N * C;
  ln_ctx c = {rvec(n, 2), rvec(C, 1), with_beta ? rvec(C, 1) : NULL, vec(n), NULL, vec(N), rvec(n, 1), N, C, eps};
  for (int i = 0; i < C; i++) c.g[i] += 1.5f;
  for (int i = 0; i < C; i++) c.x[i] += 3.0f;   /* row 0 far from zero mean: centering would show */
  double *ref = malloc(n * sizeof *ref), rr[5];
  for (int i = 0; i < N; i++) {
    double q = 0;
    for (int k = 0; k < C; k++) q += (double)c.x[i * C + k] * c.x[i * C + k];
    rr[i] = 1.0 / sqrt(q / C + (double)eps);
    for (int k = 0; k < C; k++) ref[i * C + k] = c.x[i * C + k] * rr[i] * c.g[k] + (with_beta ? c.bt[k] : 0.0);
  }
  char name[64];
  probe_ln(&c);
  snprintf(name, sizeof name, "rmsnorm_fwd %s eps %g", with_beta ? "(beta)" : "(no beta)", eps);
  check(name, c.y, ref, n, 1e-5, 1e-5);
  check("rmsnorm_fwd rstd", c.rstd, rr, N, 1e-6, 1e-5);
  float *dx = vec(n), *dg = vec(C), *dbt = vec(C);
  fd_grad(probe_ln, &c, c.x, n, ref);
  probe_ln(&c);
  OK(be->layernorm_bwd_input(be, 0, dx, c.r, c.x, NULL, c.rstd, c.g, N, C, 0), "rms bwd input");
  snprintf(name, sizeof name, "rmsnorm_bwd_input vs FD %s", with_beta ? "(beta)" : "(no beta)");
  check(name, dx, ref, n, 2e-4, 2e-3);
  for (size_t i = 0; i < n; i++) ref[i] += 1.0;
  for (size_t i = 0; i < n; i++) dx[i] = 1.0f;
  OK(be->layernorm_bwd_input(be, 0, dx, c.r, c.x, NULL, c.rstd, c.g, N, C, 1), "rms bwd input acc");
  check("rmsnorm_bwd_input accumulate", dx, ref, n, 2e-4, 2e-3);
  memset(dg, 0, C * sizeof *dg);
  memset(dbt, 0, C * sizeof *dbt);
  OK(be->layernorm_bwd_weight(be, 0, dg, with_beta ? dbt : NULL, c.r, c.x, NULL, c.rstd, N, C), "rms bwd weight");
  fd_grad(probe_ln, &c, c.g, C, ref);
  snprintf(name, sizeof name, "rmsnorm_bwd_weight dgamma vs FD %s", with_beta ? "(dbeta)" : "(dbeta NULL)");
  check(name, dg, ref, C, 2e-4, 2e-3);
  if (with_beta) {
    fd_grad(probe_ln, &c, c.bt, C, ref);
    check("rmsnorm_bwd_weight dbeta vs FD", dbt, ref, C, 2e-4, 2e-3);
    be->free(be, c.bt);
  }
  be->free(be, c.x); be->free(be, c.g); be->free(be, c.y); be->free(be, c.rstd); be->free(be, c.r);
  be->free(be, dx); be->free(be, dg); be->free(be, dbt);
  free(ref);
}

/* ---------------------------------------------------------------- SwiGLU */
typedef struct { float *pre, *y, *r; int N, C; } sw_ctx;
static double probe_swiglu(void *p) {
  sw_ctx *c = p;
  be->swiglu_fwd(be, 0, c->y, c->pre, c->N, c->C);
  return dot(c->r, c->y, (size_t)c->N * c->C);
}
static void test_swiglu(void) {
  const int N = 4, C = 7;
  size_t n = (size_t)N * C;
  sw_ctx c = {rvec(2 * n, 4), vec(n), rvec(n, 1), N, C};
  double *ref = malloc(2 * n * sizeof *ref);
  for (int i = 0; i < N; i++)
    for (int k = 0; k < C; k++) {
      double g = c.pre[i * 2 * C + k], u = c.pre[i * 2 * C + C + k];
      ref[i * C + k] = g / (1.0 + exp(-g)) * u;
    }
  probe_swiglu(&c);
  check("swiglu_fwd", c.y, ref, n, 1e-6, 1e-5);
  float *dpre = vec(2 * n), *ip = vec(2 * n);
  OK(be->swiglu_bwd(be, 0, dpre, c.r, c.pre, N, C), "swiglu_bwd");
  fd_grad(probe_swiglu, &c, c.pre, 2 * n, ref);
  check("swiglu_bwd d[gate|up] vs FD", dpre, ref, 2 * n, 2e-4, 2e-3);
  memcpy(ip, c.pre, 2 * n * sizeof *ip);
  OK(be->swiglu_bwd(be, 0, ip, c.r, ip, N, C), "swiglu_bwd in place");
  for (size_t i = 0; i < 2 * n; i++) ref[i] = dpre[i];
  check("swiglu_bwd in place (dpre = pre) (exactly)", ip, ref, 2 * n, 0, 0);
  be->free(be, c.pre); be->free(be, c.y); be->free(be, c.r); be->free(be, dpre); be->free(be, ip);
  free(ref);
}

/* ---------------------------------------------------------------- rope */
/* Rows of a fused [N, ld] buffer; the first H heads (D columns each) rotated in place,
 * columns H*D .. ld - 1 untouched. cs: the cos/sin table [seq, D/2, 2] as the model builds
 * it (angle pos * 10000^(-2i/D)); positions repeat and are out of order. */
typedef struct { float *x, *y, *r, *cs; const int32_t *pos; int N, H, D, ld; } rope_ctx;
static double probe_rope(void *p) {   /* L = <r, rope(x)> */
  rope_ctx *c = p;
  size_t n = (size_t)c->N * c->ld;
  memcpy(c->y, c->x, n * sizeof *c->y);
  be->rope(be, 0, c->y, c->ld, c->pos, c->cs, c->N, c->H, c->D, 0);
  return dot(c->r, c->y, n);
}
static void test_rope(void) {
  enum { PAD = 5 };   /* columns past the H heads */
  const int N = 6, H = 3, D = 8, ld = H * D + PAD, seq = 9, hd = D / 2;
  int32_t pos[6] = {0, 3, 8, 3, 1, 7};
  size_t n = (size_t)N * ld;
  rope_ctx c = {rvec(n, 1), vec(n), rvec(n, 1), vec((size_t)seq * D), pos, N, H, D, ld};
  for (int p = 0; p < seq; p++)
    for (int i = 0; i < hd; i++) {
      double a = p * pow(10000.0, -2.0 * i / D);
      c.cs[(p * hd + i) * 2] = (float)cos(a);
      c.cs[(p * hd + i) * 2 + 1] = (float)sin(a);
    }
  /* forward against a naive evaluation in double from the same table */
  double *ref = malloc(n * sizeof *ref);
  for (int k = 0; k < N; k++)
    for (int col = 0; col < ld; col++) {
      const float *row = c.x + (size_t)k * ld;
      int j = col / D, i = col % D;
      if (j >= H || i >= 2 * hd) {
        ref[k * ld + col] = row[col];
        continue;
      }
      int ii = i % hd;
      double cc = c.cs[(pos[k] * hd + ii) * 2], ss = c.cs[(pos[k] * hd + ii) * 2 + 1];
      double a = row[j * D + ii], b = row[j * D + ii + hd];
      ref[k * ld + col] = i < hd ? a * cc - b * ss : b * cc + a * ss;
    }
  probe_rope(&c);
  check("rope fwd (ld > H*D)", c.y, ref, n, 1e-6, 1e-6);
  {   /* the columns past H*D exactly as they were */
    float got[6 * PAD];
    double want[6 * PAD];
    for (int k = 0; k < N; k++)
      for (int q = 0; q < PAD; q++) {
        got[k * PAD + q] = c.y[k * ld + H * D + q];
        want[k * PAD + q] = c.x[k * ld + H * D + q];
      }
    check("rope leaves columns past H*D (exactly)", got, want, (size_t)N * PAD, 0, 0);
  }
  /* forward then inverse gives back x */
  OK(be->rope(be, 0, c.y, ld, pos, c.cs, N, H, D, 1), "rope inverse");
  for (size_t i = 0; i < n; i++) ref[i] = c.x[i];
  check("rope inverse(rope(x)) == x", c.y, ref, n, 1e-6, 1e-6);
  /* the inverse is the transpose: <rope(x), r> == <x, rope_inverse(r)> */
  float *ri = vec(n);
  memcpy(ri, c.r, n * sizeof *ri);
  OK(be->rope(be, 0, ri, ld, pos, c.cs, N, H, D, 1), "rope inverse");
  float lhs = (float)probe_rope(&c);
  double rhs = dot(c.x, ri, n);
  check("rope <rope(x), r> == <x, rope_inverse(r)>", &lhs, &rhs, 1, 1e-6, 1e-6);
  /* and so the input gradient of L = <r, rope(x)>: rope_inverse(r) vs FD */
  fd_grad(probe_rope, &c, c.x, n, ref);
  check("rope inverse(r) == dL/dx vs FD", ri, ref, n, 2e-4, 2e-3);
  be->free(be, c.x); be->free(be, c.y); be->free(be, c.r); be->free(be, c.cs); be->free(be, ri);
  free(ref);
}

/* ---------------------------------------------------------------- attention */
/* q, k, v are column blocks of one fused [batch*T, (Hq + 2 Hkv) D] buffer. */
typedef struct { float *qkv, *out, *lse, *r; int batch, T, Hq, Hkv, D, ld; const ppsrt_dropout *dr; } at_ctx;
static double probe_att(void *p) {
  at_ctx *c = p;
  int qd = c->Hq * c->D, kd = c->Hkv * c->D;
  be->attention_fwd(be, 0, c->out, c->lse, c->qkv, c->ld, c->qkv + qd, c->ld, c->qkv + qd + kd, c->ld, c->batch,
                    c->T, c->Hq, c->Hkv, c->D, c->dr);
  return dot(c->r, c->out, (size_t)c->batch * c->T * qd);
}
/* dr: NULL, or attention dropout (the reference drops P_ij where dropout.h says, with the
 * head index (b heads + base + h)) */
static void test_attention_dr(int batch, int T, int Hq, int Hkv, int D, const ppsrt_dropout *dr) {
  int qd = Hq * D, kd = Hkv * D, ld = qd + 2 * kd;
  size_t rows = (size_t)batch * T, nqkv = rows * ld, nout = rows * qd;
  at_ctx c = {rvec(nqkv, 1.5), vec(nout), vec((size_t)batch * Hq * T), rvec(nout, 1), batch, T, Hq, Hkv, D, ld, dr};
  double *ref = malloc(nqkv * sizeof *ref), *lref = malloc(sizeof(double) * batch * Hq * T), *s = malloc(sizeof(double) * T);
  /* naive reference in double */
  for (int b = 0; b < batch; b++)
    for (int h = 0; h < Hq; h++) {
      int g = h / (Hq / Hkv);
      for (int i = 0; i < T; i++) {
        double mx = -1e300, l = 0;
        for (int j = 0; j <= i; j++) {
          double a = 0;
          for (int d = 0; d < D; d++)
            a += (double)c.qkv[(b * T + i) * ld + h * D + d] * c.qkv[(b * T + j) * ld + qd + g * D + d];
          s[j] = a / sqrt((double)D);
          if (s[j] > mx) mx = s[j];
        }
        for (int j = 0; j <= i; j++) l += exp(s[j] - mx);
        for (int d = 0; d < D; d++) {
          double o = 0;
          for (int j = 0; j <= i; j++) {
            double pm = 1;   /* the dropout mask times 1/(1-p) */
            if (dr) pm = ppsrt_drop_keep(dr->thr, dr->key, (((uint64_t)b * dr->heads + dr->base + h) * T + i) * T + j) ? dr->scale : 0;
            o += pm * exp(s[j] - mx) / l * c.qkv[(b * T + j) * ld + qd + kd + g * D + d];
          }
          ref[(b * T + i) * qd + h * D + d] = o;
        }
        lref[(b * Hq + h) * T + i] = mx + log(l);
      }
    }
  char name[96];
  probe_att(&c);
  snprintf(name, sizeof name, "attention_fwd b%d T%d Hq%d Hkv%d D%d%s", batch, T, Hq, Hkv, D, dr ? " drop" : "");
  check(name, c.out, ref, nout, 1e-5, 1e-4);
  check("attention_fwd lse", c.lse, lref, (size_t)batch * Hq * T, 1e-5, 1e-5);
  float *dqkv = vec(nqkv);
  for (size_t i = 0; i < nqkv; i++) dqkv[i] = 777.0f;   /* must be overwritten */
  OK(be->attention_bwd(be, 0, dqkv, dqkv + qd, dqkv + qd + kd, ld, c.r, c.out, c.lse, c.qkv, ld, c.qkv + qd, ld,
                       c.qkv + qd + kd, ld, batch, T, Hq, Hkv, D, dr), "attention_bwd");
  fd_grad(probe_att, &c, c.qkv, nqkv, ref);
  snprintf(name, sizeof name, "attention_bwd dq|dk|dv vs FD (Hq%d Hkv%d%s)", Hq, Hkv, dr ? " drop" : "");
  check(name, dqkv, ref, nqkv, 2e-4, 2e-3);
  be->free(be, c.qkv); be->free(be, c.out); be->free(be, c.lse); be->free(be, c.r); be->free(be, dqkv);
  free(ref); free(lref); free(s);
}

static void test_attention(int batch, int T, int Hq, int Hkv, int D) { test_attention_dr(batch, T, Hq, Hkv, D, NULL); }

/* attention_fwd_at / attention_bwd_at (--context-parallel, runtime/cp.c): the block of
 * queries [q0, q0 + Tq) of one sequence of T against the keys [0, q0 + Tq) gives the
 * whole sequence's attention rows of the block (out, lse), and its backward the whole
 * backward's dq rows of the block and dk, dv rows [0, q0 + Tq) when the output gradient
 * is zero outside the block (the rows after it then get none); with dropout the block
 * carries the sequence's length (seq) and drops what the whole sequence drops. */
static void test_attention_at(int T, int q0, int Tq, int Hq, int Hkv, int D, const ppsrt_dropout *dr) {
  int qd = Hq * D, kd = Hkv * D, ld = qd + 2 * kd, Tk = q0 + Tq;
  float *qkv = rvec((size_t)T * ld, 1.5), *out = vec((size_t)T * qd), *lse = vec((size_t)Hq * T);
  float *dout = vec((size_t)T * qd), *dqkv = vec((size_t)T * ld), *bout = vec((size_t)Tq * qd), *blse = vec((size_t)Hq * Tq);
  float *bdq = vec((size_t)Tq * ld), *bdkv = vec((size_t)Tk * 2 * kd);
  double *ref = malloc(sizeof(double) * (size_t)T * ld * 2);
  ppsrt_dropout d = dr ? *dr : (ppsrt_dropout){0, 1.0f, 0, 0, 0, 0};
  d.seq = T;
  char name[128];
  OK(be->attention_fwd(be, 0, out, lse, qkv, ld, qkv + qd, ld, qkv + qd + kd, ld, 1, T, Hq, Hkv, D, dr), "attention_fwd");
  OK(be->attention_fwd_at(be, 0, bout, blse, qkv + (size_t)q0 * ld, ld, qkv + qd, ld, qkv + qd + kd, ld, Tq, q0, Hq, Hkv, D,
                          dr ? &d : NULL), "attention_fwd_at");
  for (size_t i = 0; i < (size_t)Tq * qd; i++) ref[i] = out[(size_t)q0 * qd + i];
  snprintf(name, sizeof name, "attention_fwd_at T%d block [%d, %d) Hq%d Hkv%d%s = attention_fwd's rows", T, q0, Tk, Hq, Hkv,
           dr ? " drop" : "");
  check(name, bout, ref, (size_t)Tq * qd, 1e-6, 1e-5);
  for (int h = 0; h < Hq; h++)
    for (int i = 0; i < Tq; i++) ref[(size_t)h * Tq + i] = lse[(size_t)h * T + q0 + i];
  check("attention_fwd_at lse", blse, ref, (size_t)Hq * Tq, 1e-6, 1e-6);
  for (int i = 0; i < T; i++)
    for (int c = 0; c < qd; c++) dout[(size_t)i * qd + c] = i >= q0 && i < Tk ? frand() : 0.0f;
  OK(be->attention_bwd(be, 0, dqkv, dqkv + qd, dqkv + qd + kd, ld, dout, out, lse, qkv, ld, qkv + qd, ld, qkv + qd + kd, ld,
                       1, T, Hq, Hkv, D, dr), "attention_bwd");
  for (size_t i = 0; i < (size_t)Tq * ld; i++) bdq[i] = 777.0f;   /* dq (its columns) must be written */
  for (size_t i = 0; i < (size_t)Tk * 2 * kd; i++) bdkv[i] = 777.0f;
  OK(be->attention_bwd_at(be, 0, bdq, ld, bdkv, bdkv + kd, 2 * kd, dout + (size_t)q0 * qd, bout, blse, qkv + (size_t)q0 * ld,
                          ld, qkv + qd, ld, qkv + qd + kd, ld, Tq, q0, Hq, Hkv, D, dr ? &d : NULL), "attention_bwd_at");
  float *got = vec((size_t)Tq * qd);
  for (int i = 0; i < Tq; i++)
    for (int c = 0; c < qd; c++) {
      got[(size_t)i * qd + c] = bdq[(size_t)i * ld + c];
      ref[(size_t)i * qd + c] = dqkv[(size_t)(q0 + i) * ld + c];
    }
  snprintf(name, sizeof name, "attention_bwd_at dq (block [%d, %d)%s)", q0, Tk, dr ? " drop" : "");
  check(name, got, ref, (size_t)Tq * qd, 1e-6, 1e-5);
  for (int j = 0; j < Tk; j++)
    for (int c = 0; c < 2 * kd; c++) ref[(size_t)j * 2 * kd + c] = dqkv[(size_t)j * ld + qd + c];
  snprintf(name, sizeof name, "attention_bwd_at dk|dv (keys [0, %d)%s)", Tk, dr ? " drop" : "");
  check(name, bdkv, ref, (size_t)Tk * 2 * kd, 1e-6, 1e-5);
  float *fs[] = {qkv, out, lse, dout, dqkv, bout, blse, bdq, bdkv, got};
  for (size_t k = 0; k < sizeof fs / sizeof *fs; k++) be->free(be, fs[k]);
  free(ref);
}

/* ---------------------------------------------------------------- dropout */
static void test_dropout(void) {
  /* the fraction dropped over n elements: p within 5 standard errors sqrt(p (1-p) / n);
   * every kept element exactly x * 1/(1-p) */
  const size_t n = (size_t)1 << 20;
  float *x = vec(n), *y = vec(n);
  for (size_t i = 0; i < n; i++) x[i] = 1.0f + (float)(i % 7);
  const double ps[3] = {0.1, 0.5, 0.9};
  for (int k = 0; k < 3; k++) {
    double p = ps[k];
    ppsrt_dropout d = {ppsrt_drop_thr(p), (float)(1.0 / (1.0 - p)), ppsrt_drop_key(7, 3, 1, 2, PPSRT_DROP_FC2), 0, 0, 0};
    OK(be->bias_dropout_add(be, 0, y, NULL, x, NULL, (int)(n / 1024), 1024, &d), "bias_dropout_add");
    size_t dropped = 0, badscale = 0;
    for (size_t i = 0; i < n; i++) {
      if (y[i] == 0.0f) dropped++;
      else if (y[i] != x[i] * d.scale) badscale++;
    }
    double frac = (double)dropped / n, se = sqrt(p * (1 - p) / n);
    int ok = fabs(frac - p) <= 5 * se && !badscale;
    printf("%s dropout p=%.1f: fraction dropped %.6f over %zu (|diff| %.2g, 5 s.e. %.2g); kept scaled by 1/(1-p): %zu wrong\n",
           ok ? "ok  " : "FAIL", p, frac, n, fabs(frac - p), 5 * se, badscale);
    if (!ok) failures++;
  }
  /* masks of another key or another offset agree with this one as independent masks
   * do: on a share p^2 + (1-p)^2 of the elements (p = 0.5: 1/2), within 5 s.e. */
  {
    ppsrt_dropout a = {ppsrt_drop_thr(0.5), 2.0f, ppsrt_drop_key(7, 3, 1, 2, PPSRT_DROP_FC2), 0, 0, 0};
    const char *what[3] = {"another step", "another site", "offset by one element"};
    for (int k = 0; k < 3; k++) {
      ppsrt_dropout b = a;
      if (k == 0) b.key = ppsrt_drop_key(7, 4, 1, 2, PPSRT_DROP_FC2);
      if (k == 1) b.key = ppsrt_drop_key(7, 3, 1, 2, PPSRT_DROP_PROJ);
      if (k == 2) b.base = 1;
      size_t same = 0;
      for (size_t i = 0; i < n; i++)
        same += ppsrt_drop_keep(a.thr, a.key, a.base + i) == ppsrt_drop_keep(b.thr, b.key, b.base + i);
      double frac = (double)same / n, se = sqrt(0.25 / n);
      int ok = fabs(frac - 0.5) <= 5 * se;
      printf("%s dropout masks independent (%s): agree on %.6f (1/2 within %.2g)\n", ok ? "ok  " : "FAIL", what[k], frac,
             5 * se);
      if (!ok) failures++;
    }
  }
  /* bias-dropout-add's values: y = a + keep (x + bias) scale, with base 3, in place (y = a) */
  {
    int N = 7, C = 5;
    float *xa = rvec((size_t)N * C, 1), *ya = rvec((size_t)N * C, 1), *bias = rvec((size_t)C, 1);
    double *ref = malloc(sizeof(double) * N * C);
    ppsrt_dropout d = {ppsrt_drop_thr(0.4), (float)(1.0 / 0.6), ppsrt_drop_key(1, 1, 0, 0, PPSRT_DROP_PROJ), 3, 0, 0};
    for (int i = 0; i < N * C; i++)
      ref[i] = ya[i] + (ppsrt_drop_keep(d.thr, d.key, 3 + (uint64_t)i) ? (float)((xa[i] + bias[i % C]) * d.scale) : 0.0);
    OK(be->bias_dropout_add(be, 0, ya, ya, xa, bias, N, C, &d), "bias_dropout_add");
    check("bias_dropout_add (y = a)", ya, ref, (size_t)N * C, 0, 1e-6);
    be->free(be, xa); be->free(be, ya); be->free(be, bias);
    free(ref);
  }
  /* attention with dropout (p = 0.3; a rank's heads from 2 of 6: base 2) and its backward */
  {
    ppsrt_dropout d = {ppsrt_drop_thr(0.3), (float)(1.0 / 0.7), ppsrt_drop_key(5, 1, 0, 1, PPSRT_DROP_ATTN), 2, 6, 0};
    test_attention_dr(2, 5, 4, 2, 3, &d);
    test_attention_dr(1, 6, 2, 2, 4, &d);
  }
  be->free(be, x); be->free(be, y);
}

/* ---------------------------------------------------------------- embedding */
static void test_embedding(void) {
  const int V = 11, C = 6, N = 9;
  int32_t ids[9] = {0, 3, 10, 5, 5, 7, 2, 9, 4};
  float *table = rvec((size_t)V * C, 1), *out = vec((size_t)N * C), *acc = vec((size_t)N * C);
  double *ref = malloc(sizeof(double) * V * C);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) ref[n * C + c] = table[ids[n] * C + c];
  /* three shards [0,4) [4,8) [8,11): the sum of the shards' outputs is the full lookup */
  int cut[4] = {0, 4, 8, 11};
  memset(acc, 0, sizeof(float) * N * C);
  for (int k = 0; k < 3; k++) {
    OK(be->embedding_fwd(be, 0, out, ids, table + cut[k] * C, N, C, cut[k], cut[k + 1], 0), "emb fwd");
    OK(be->add(be, 0, acc, acc, out, (size_t)N * C), "add");
  }
  check("embedding_fwd 3 shards summed", acc, ref, (size_t)N * C, 0, 1e-7);
  for (int k = 0; k < 3; k++) OK(be->embedding_fwd(be, 0, acc, ids, table + cut[k] * C, N, C, cut[k], cut[k + 1], 1), "emb");
  for (int i = 0; i < N * C; i++) ref[i] *= 2;
  check("embedding_fwd accumulate", acc, ref, (size_t)N * C, 0, 1e-6);
  /* backward: dL/dtable of L = sum r*out is the scatter-add of r (exact) */
  float *r = rvec((size_t)N * C, 1), *dt = vec((size_t)V * C);
  memset(dt, 0, sizeof(float) * V * C);
  for (int i = 0; i < V * C; i++) ref[i] = 0;
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) ref[ids[n] * C + c] += r[n * C + c];
  for (int k = 0; k < 3; k++) OK(be->embedding_bwd(be, 0, dt + cut[k] * C, r, ids, N, C, cut[k], cut[k + 1]), "emb bwd");
  check("embedding_bwd 3 shards (dup ids)", dt, ref, (size_t)V * C, 1e-6, 1e-6);
  be->free(be, table); be->free(be, out); be->free(be, acc); be->free(be, r); be->free(be, dt);
  free(ref);
}

/* ---------------------------------------------------------------- softmax */
typedef struct { float *logits, *mx, *se, *tg; int32_t *t; int N, V; } sm_ctx;
static double probe_xent(void *p) {   /* sum_n loss_n, unsharded, in double */
  sm_ctx *c = p;
  be->softmax_stats(be, 0, c->mx, c->se, c->tg, c->logits, c->t, c->N, c->V, 0);
  double L = 0;
  for (int n = 0; n < c->N; n++) L += c->mx[n] + log((double)c->se[n]) - c->tg[n];
  return L;
}
static void test_softmax(void) {
  const int N = 6, V = 13;
  int32_t t[6] = {0, 12, 5, 4, 7, 8};
  sm_ctx c = {rvec((size_t)N * V, 4), vec(N), vec(N), vec(N), t, N, V};
  /* reference loss in double */
  double *ref = malloc(sizeof(double) * N * V);
  double Lref = 0;
  for (int n = 0; n < N; n++) {
    double m = -1e300, s = 0;
    for (int v = 0; v < V; v++) if (c.logits[n * V + v] > m) m = c.logits[n * V + v];
    for (int v = 0; v < V; v++) s += exp(c.logits[n * V + v] - m);
    Lref += m + log(s) - c.logits[n * V + t[n]];
  }
  /* sharded: 3 shards [0,5) [5,9) [9,13), merged by online softmax, with
   * softmax_rescale_f32 bringing each shard's sum to the global max */
  int cut[4] = {0, 5, 9, 13};
  float gmax[6], gsum[6], gtgt[6], lm[3][6], ls[3][6], lt[3][6];
  float *shard = vec((size_t)N * V);
  for (int k = 0; k < 3; k++) {
    int w = cut[k + 1] - cut[k];
    for (int n = 0; n < N; n++) memcpy(shard + n * w, c.logits + n * V + cut[k], sizeof(float) * w);
    OK(be->softmax_stats(be, 0, lm[k], ls[k], lt[k], shard, t, N, w, cut[k]), "stats");
  }
  for (int n = 0; n < N; n++) {
    gmax[n] = fmaxf(fmaxf(lm[0][n], lm[1][n]), lm[2][n]);
    gsum[n] = 0;
    gtgt[n] = lt[0][n] + lt[1][n] + lt[2][n];
  }
  for (int k = 0; k < 3; k++) {
    float tmp[6];
    memcpy(tmp, ls[k], sizeof tmp);
    OK(be->softmax_rescale_f32(be, 0, tmp, lm[k], NULL, gmax, NULL, N, 1), "rescale");
    for (int n = 0; n < N; n++) gsum[n] += tmp[n];
  }
  double Ls = 0;
  for (int n = 0; n < N; n++) Ls += gmax[n] + log((double)gsum[n]) - gtgt[n];
  float Lsf = (float)Ls;
  check("softmax_stats 3 shards: loss", &Lsf, &Lref, 1, 1e-5, 1e-5);
  float Luf = (float)probe_xent(&c);
  check("softmax_stats unsharded: loss", &Luf, &Lref, 1, 1e-5, 1e-5);
  /* unsharded backward vs FD, then each shard's backward vs the unsharded slice */
  float *dl = vec((size_t)N * V), *dls = vec((size_t)N * V);
  OK(be->softmax_xent_bwd(be, 0, dl, c.logits, c.mx, c.se, t, N, V, 0, 1.0f), "xent bwd");
  fd_grad(probe_xent, &c, c.logits, (size_t)N * V, ref);
  check("softmax_xent_bwd vs FD", dl, ref, (size_t)N * V, 2e-4, 2e-3);
  for (int k = 0; k < 3; k++) {
    int w = cut[k + 1] - cut[k];
    for (int n = 0; n < N; n++) memcpy(shard + n * w, c.logits + n * V + cut[k], sizeof(float) * w);
    OK(be->softmax_xent_bwd(be, 0, shard, shard, gmax, gsum, t, N, w, cut[k], 0.5f), "xent bwd shard");
    for (int n = 0; n < N; n++) memcpy(dls + n * V + cut[k], shard + n * w, sizeof(float) * w);
  }
  for (int i = 0; i < N * V; i++) ref[i] = 0.5 * dl[i];
  check("softmax_xent_bwd 3 shards (scale .5)", dls, ref, (size_t)N * V, 1e-6, 1e-5);
  /* rescale with lsum and gsum over rows of C columns */
  float x[6 * 3];
  for (int i = 0; i < 18; i++) x[i] = frand();
  for (int i = 0; i < 18; i++) ref[i] = x[i] * exp((double)lm[1][i / 3] - gmax[i / 3]) * ls[1][i / 3] / gsum[i / 3];
  OK(be->softmax_rescale_f32(be, 0, x, lm[1], ls[1], gmax, gsum, N, 3), "rescale");
  check("softmax_rescale_f32 (lsum, gsum)", x, ref, 18, 1e-6, 1e-5);
  be->free(be, c.logits); be->free(be, c.mx); be->free(be, c.se); be->free(be, c.tg);
  be->free(be, shard); be->free(be, dl); be->free(be, dls);
  free(ref);
}

/* ---------------------------------------------------------------- optimizer */
static void test_optimizer(void) {
  const size_t n = 10;
  for (int kind = 0; kind < 2; kind++) {
    float *w = rvec(n, 1), *g = vec(n), *m = vec(n), *v = vec(n), *p = vec(n);
    double rw[10], rm[10] = {0}, rv[10] = {0};
    memset(m, 0, n * 4);
    memset(v, 0, n * 4);
    for (size_t i = 0; i < n; i++) rw[i] = w[i];
    const double lr = 0.1, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.01;
    for (int step = 1; step <= 3; step++) {
      for (size_t i = 0; i < n; i++) g[i] = frand();
      for (size_t i = 0; i < n; i++) {
        double gi = g[i];
        if (kind == 0) {
          rw[i] = rw[i] - lr * wd * rw[i] - lr * gi;
        } else {
          rm[i] = b1 * rm[i] + (1 - b1) * gi;
          rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
          double mh = rm[i] / (1 - pow(b1, step)), vh = rv[i] / (1 - pow(b2, step));
          rw[i] = rw[i] - lr * wd * rw[i] - lr * mh / (sqrt(vh) + eps);
        }
      }
      OK(be->optimizer_step(be, 0, kind, w, p, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, step),
         "optimizer");
    }
    check(kind ? "optimizer Adam 3 steps" : "optimizer SGD 3 steps", w, rw, n, 1e-5, 1e-5);
    check("optimizer writes param copy", p, rw, n, 1e-5, 1e-5);
    double z[10] = {0};
    check("optimizer zeroes grad", g, z, n, 0, 0);
    be->free(be, w); be->free(be, g); be->free(be, m); be->free(be, v); be->free(be, p);
  }
}

/* ---------------------------------------------------------------- streams */
static void test_streams(void) {
  size_t cur0, peak0, cur, peak;
  OK(be->mem_stats(be, &cur0, &peak0, 0), "mem_stats");
  const size_t n = 1 << 20;
  float *d = vec(n), *d2 = vec(n), *h = NULL;
  OK(be->mem_stats(be, &cur, &peak, 0), "mem_stats");
  int memok = cur == cur0 + 2 * (n * 4 + 4) && peak >= cur;
  OK(be->host_alloc(be, n * 4, (void **)&h), "host_alloc");
  for (size_t i = 0; i < n; i++) d[i] = (float)i;
  ppsrt_event *e0, *e1, *e2;
  OK(be->event_create(be, &e0), "ev");
  OK(be->event_create(be, &e1), "ev");
  OK(be->event_create(be, &e2), "ev");
  int q0 = be->event_query(be, e2);   /* never recorded: complete */
  /* offload on D2H after the compute stream's event; reload on H2D after the offload */
  OK(be->event_record(be, e0, PPSRT_STREAM_COMPUTE), "record");
  OK(be->stream_wait_event(be, PPSRT_STREAM_D2H, e0), "wait");
  OK(be->memcpy_async(be, PPSRT_STREAM_D2H, h, d, n * 4, 2), "d2h");
  OK(be->event_record(be, e1, PPSRT_STREAM_D2H), "record");
  OK(be->stream_wait_event(be, PPSRT_STREAM_H2D, e1), "wait");
  OK(be->memcpy_async(be, PPSRT_STREAM_H2D, d2, h, n * 4, 1), "h2d");
  OK(be->event_record(be, e2, PPSRT_STREAM_H2D), "record");
  OK(be->stream_wait_event(be, PPSRT_STREAM_COMPUTE, e2), "wait");   /* compute blocks until reloaded */
  int same = memcmp(d, d2, n * 4) == 0;
  int q1 = be->event_query(be, e2);
  double el = be->event_elapsed(be, e0, e2);
  OK(be->memset0(be, PPSRT_STREAM_D2H, h, n * 4), "memset0");
  OK(be->stream_sync(be, PPSRT_STREAM_D2H), "sync");
  int zero = h[n - 1] == 0.0f && h[0] == 0.0f;
  be->free(be, d);
  be->free(be, d2);
  OK(be->mem_stats(be, &cur, &peak, 1), "mem_stats");
  int memok2 = cur == cur0 && peak >= cur0 + 2 * n * 4;
  OK(be->mem_stats(be, &cur, &peak, 0), "mem_stats");
  memok2 = memok2 && peak == cur;
  printf("%s streams: d2h->h2d ordered by events %s, query %d/%d, elapsed %.2e s, memset0 %s, mem_stats %s\n",
         same && q0 == 1 && q1 == 1 && el >= 0 && zero && memok && memok2 ? "ok  " : "FAIL", same ? "yes" : "NO", q0, q1,
         el, zero ? "yes" : "NO", memok && memok2 ? "yes" : "NO");
  if (!(same && q0 == 1 && q1 == 1 && el >= 0 && zero && memok && memok2)) failures++;
  be->event_destroy(be, e0);
  be->event_destroy(be, e1);
  be->event_destroy(be, e2);
  /* destroying events that pending copy-stream jobs still use (as cudaEventDestroy
   * allows): the jobs keep them alive; ASan would catch a use after free */
  for (int k = 0; k < 50; k++) {
    ppsrt_event *a, *c2;
    OK(be->event_create(be, &a), "ev");
    OK(be->event_create(be, &c2), "ev");
    OK(be->event_record(be, a, PPSRT_STREAM_COMPUTE), "record");
    OK(be->stream_wait_event(be, PPSRT_STREAM_D2H, a), "wait");
    be->event_destroy(be, a);
    OK(be->memcpy_async(be, PPSRT_STREAM_D2H, h, h + n / 2, n * 2, 2), "d2h");
    OK(be->event_record(be, c2, PPSRT_STREAM_D2H), "record");
    OK(be->stream_wait_event(be, PPSRT_STREAM_H2D, c2), "wait");
    be->event_destroy(be, c2);
  }
  OK(be->stream_sync(be, PPSRT_STREAM_D2H), "sync");
  OK(be->stream_sync(be, PPSRT_STREAM_H2D), "sync");
  printf("ok   streams: 50 events destroyed while copy-stream jobs still used them\n");
  be->host_free(be, h);
}

/* Mixture of experts (backend.h moe_*): the routing against double formulas (a tie: the
 * lower expert first) for each router (softmax over the top-K, --moe-router-pre-softmax,
 * sigmoid with K > 1 and K = 1, a scaling factor, the expert bias, the z-loss), its
 * backward against finite differences of L = sum r_w w + sum_e c_e stat[E + e] +
 * zcoef / 2 stat[2E] (logits spaced 0.3 apart, the bias 0.5 on some experts: eps moves
 * no token to another expert), the permutation's backward as its adjoint, the combine
 * against a double sum and its backward against finite differences of L = sum r y, and
 * de written over e exactly as out of place. */
typedef struct moe_ctx {
  int N, E, K, C;
  float *lg, *w, *stat, *rw, *coef, *e, *ww, *r, *y;
  int32_t *idx, *pos;
  const ppsrt_moe_router *rt;
} moe_ctx;
static double moe_route_probe(void *p) {
  moe_ctx *m = p;
  OK(be->moe_route(be, 0, m->lg, m->N, m->E, m->K, m->rt, m->idx, m->w, m->stat), "moe_route");
  double L = 0;
  for (int i = 0; i < m->N * m->K; i++) L += (double)m->rw[i] * m->w[i];
  for (int e = 0; e < m->E; e++) L += (double)m->coef[e] * m->stat[m->E + e];
  return L + (m->rt ? 0.5 * m->rt->zcoef * m->stat[2 * m->E] : 0.0);
}
static double moe_comb_probe(void *p) {
  moe_ctx *m = p;
  OK(be->moe_unpermute(be, 0, m->y, NULL, m->e, m->pos, m->ww, m->N, m->K, m->C), "moe_unpermute");
  double L = 0;
  for (int i = 0; i < m->N * m->C; i++) L += (double)m->r[i] * m->y[i];
  return L;
}
/* the descending order of v (+ bias) over E, the lower index first on ties */
static void ref_order(const double *v, const float *bias, int E, int *ord) {
  for (int e = 0; e < E; e++) ord[e] = e;
  for (int a = 0; a < E; a++)
    for (int b = a + 1; b < E; b++) {
      double x = v[ord[b]] + (bias ? bias[ord[b]] : 0), y = v[ord[a]] + (bias ? bias[ord[a]] : 0);
      if (x > y) { int t = ord[a]; ord[a] = ord[b]; ord[b] = t; }
    }
}
/* one router on the logits of m (K of m->K): the reference's experts, weights and stat in
 * double, then the backward against finite differences */
static void test_route_case(moe_ctx *m, const char *name, const ppsrt_moe_router *rt) {
  int N = m->N, E = m->E, K = m->K, NK = N * K, bad = 0;
  char what[96];
  m->rt = rt;
  OK(be->moe_route(be, 0, m->lg, N, E, K, rt, m->idx, m->w, m->stat), "moe_route");
  double *rw = malloc((size_t)NK * sizeof *rw), rs[64] = {0}, p[16], s[16], sc[16];
  int sig = rt && rt->sigmoid, pre = rt && rt->pre_softmax;
  double scale = rt && rt->scale > 0 ? rt->scale : 1.0;
  for (int n = 0; n < N; n++) {
    const float *l = m->lg + n * E;
    double mx = l[0], z = 0, ss = 0;
    for (int e = 1; e < E; e++) mx = fmax(mx, l[e]);
    for (int e = 0; e < E; e++) z += exp(l[e] - mx);
    for (int e = 0; e < E; e++) { p[e] = exp(l[e] - mx) / z; s[e] = 1 / (1 + exp(-(double)l[e])); ss += s[e]; }
    rs[2 * E] += (mx + log(z)) * (mx + log(z));
    for (int e = 0; e < E; e++) { sc[e] = sig ? s[e] : pre ? p[e] : l[e]; rs[E + e] += sig ? s[e] / (ss + 1e-20) : p[e]; }
    int ord[16], uord[16];
    ref_order(sc, sig && rt ? rt->bias : NULL, E, ord);
    ref_order(sc, NULL, E, uord);
    double ws = 0;
    for (int k = 0; k < K; k++) ws += sig ? s[ord[k]] : exp(l[ord[k]] - l[ord[0]]);
    for (int k = 0; k < K; k++) {
      bad += m->idx[n * K + k] != ord[k];
      double v = sig ? (K > 1 ? s[ord[k]] / (ws + 1e-20) : s[ord[k]]) : pre ? p[ord[k]] : exp(l[ord[k]] - l[ord[0]]) / ws;
      rw[n * K + k] = scale * v;
      rs[uord[k]] += 1;
    }
  }
  if (!rt) bad += m->idx[1 * K] != 2 || m->idx[1 * K + 1] != 5;
  snprintf(what, sizeof what, "moe_route %s top-K", name);
  if (bad) { printf("FAIL %s: %d experts chosen otherwise than the descending, lower-first order\n", what, bad); failures++; }
  else printf("ok   %-34s n=%-5d the reference's experts\n", what, NK);
  snprintf(what, sizeof what, "moe_route %s weights", name);
  check(what, m->w, rw, NK, 1e-6, 1e-5);
  snprintf(what, sizeof what, "moe_route %s stat", name);
  check(what, m->stat, rs, 2 * (size_t)E + 1, 1e-5, 1e-5);
  /* backward: the tie of row 1 moved apart first (a tie has no derivative) */
  float t = m->lg[1 * E + 5];
  m->lg[1 * E + 5] = 1.6f;
  float *dl = vec((size_t)N * E);
  double *fd = malloc((size_t)N * E * sizeof *fd);
  OK(be->moe_route(be, 0, m->lg, N, E, K, rt, m->idx, m->w, m->stat), "moe_route");
  OK(be->moe_route_bwd(be, 0, dl, m->rw, m->lg, m->idx, rt, m->coef, N, E, K), "moe_route_bwd");
  fd_grad(moe_route_probe, m, m->lg, (size_t)N * E, fd);
  snprintf(what, sizeof what, "moe_route_bwd %s (FD, aux coef)", name);
  check(what, dl, fd, (size_t)N * E, 2e-4, 2e-3);
  m->lg[1 * E + 5] = t;
  free(rw); free(fd); be->free(be, dl);
}
static void test_moe(void) {
  moe_ctx m;
  memset(&m, 0, sizeof m);
  m.N = 5; m.E = 6; m.K = 3; m.C = 4;
  int N = m.N, E = m.E, K = m.K, C = m.C, NK = N * K;
  m.lg = vec((size_t)N * E); m.w = vec(NK); m.stat = vec(2 * (size_t)E + 1);
  m.idx = (int32_t *)vec(NK); m.pos = (int32_t *)vec(NK);
  for (int n = 0; n < N; n++)   /* distinct logits 0.3 apart, shuffled per row */
    for (int e = 0; e < E; e++) m.lg[n * E + e] = 0.3f * (float)((e * 5 + n * 2) % E) - 0.7f;
  m.lg[1 * E + 2] = m.lg[1 * E + 5] = 2.0f;   /* row 1: a tie at the top: expert 2, then 5 */
  m.rw = rvec(NK, 1.0f); m.coef = rvec(E, 1.0f);
  float *bias = vec(E);
  for (int e = 0; e < E; e++) bias[e] = e % 3 == 0 ? 0.5f : 0.0f;   /* (the sigmoids span < 0.5: above the others) */
  ppsrt_moe_router pre = {0, 1, 0.0f, NULL, 0.0f, NULL}, sg = {1, 0, 0.0f, NULL, 0.0f, NULL}, sgb = {1, 0, 2.5f, bias, 0.0f, NULL},
                   zl = {0, 0, 1.5f, NULL, 0.7f, NULL}, sgz = {1, 0, 0.0f, NULL, 0.3f, NULL};
  test_route_case(&m, "softmax", NULL);
  test_route_case(&m, "pre-softmax", &pre);
  test_route_case(&m, "sigmoid", &sg);
  test_route_case(&m, "sigmoid bias scale", &sgb);
  test_route_case(&m, "softmax scale z-loss", &zl);
  test_route_case(&m, "sigmoid z-loss", &sgz);
  m.K = 1;
  test_route_case(&m, "sigmoid K=1", &sg);
  test_route_case(&m, "pre-softmax K=1", &pre);
  m.K = K;
  /* the permutation: <permute(x), r> = <x, permute_bwd(r)>; accumulate adds */
  for (int i = 0; i < NK; i++) m.pos[i] = (int32_t)((i * 7 + 3) % NK);   /* 7 and 15: coprime */
  float *x = rvec((size_t)N * C, 1.0f), *px = vec((size_t)NK * C), *r2 = rvec((size_t)NK * C, 1.0f);
  float *dx = rvec((size_t)N * C, 1.0f), *dx0 = vec((size_t)N * C);
  memcpy(dx0, dx, (size_t)N * C * sizeof *dx);
  OK(be->moe_permute(be, 0, px, x, m.pos, N, K, C), "moe_permute");
  OK(be->moe_permute_bwd(be, 0, dx, r2, m.pos, N, K, C, 1), "moe_permute_bwd");
  double lhs = 0, rhs = 0;
  for (int i = 0; i < NK * C; i++) lhs += (double)px[i] * r2[i];
  for (int i = 0; i < N * C; i++) rhs += (double)x[i] * ((double)dx[i] - dx0[i]);
  check("moe_permute_bwd: adjoint (+accumulate)", (float[]){(float)rhs}, &lhs, 1, 1e-5, 1e-5);
  /* the combine and its backward */
  m.e = rvec((size_t)NK * C, 1.0f); m.ww = rvec(NK, 1.0f); m.r = rvec((size_t)N * C, 1.0f); m.y = vec((size_t)N * C);
  float *a = rvec((size_t)N * C, 1.0f), *ya = vec((size_t)N * C), *de = vec((size_t)NK * C), *dw = vec(NK);
  double *ry = malloc((size_t)N * C * sizeof *ry);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      double v = a[n * C + c];
      for (int k = 0; k < K; k++) v += (double)m.ww[n * K + k] * m.e[(size_t)m.pos[n * K + k] * C + c];
      ry[n * C + c] = v;
    }
  OK(be->moe_unpermute(be, 0, ya, a, m.e, m.pos, m.ww, N, K, C), "moe_unpermute");
  check("moe_unpermute (+ residual)", ya, ry, (size_t)N * C, 1e-6, 1e-5);
  OK(be->moe_unpermute_bwd(be, 0, de, dw, m.r, m.e, m.pos, m.ww, N, K, C), "moe_unpermute_bwd");
  double *fde = malloc((size_t)NK * C * sizeof *fde), *fdw = malloc((size_t)NK * sizeof *fdw);
  fd_grad(moe_comb_probe, &m, m.e, (size_t)NK * C, fde);
  fd_grad(moe_comb_probe, &m, m.ww, NK, fdw);
  check("moe_unpermute_bwd de (FD)", de, fde, (size_t)NK * C, 2e-4, 2e-3);
  check("moe_unpermute_bwd dw (FD)", dw, fdw, NK, 2e-4, 2e-3);
  float *e2 = vec((size_t)NK * C), *dw2 = vec(NK);
  memcpy(e2, m.e, (size_t)NK * C * sizeof *e2);
  OK(be->moe_unpermute_bwd(be, 0, e2, dw2, m.r, e2, m.pos, m.ww, N, K, C), "moe_unpermute_bwd in place");
  int same = !memcmp(e2, de, (size_t)NK * C * sizeof *e2) && !memcmp(dw2, dw, (size_t)NK * sizeof *dw);
  if (!same) { printf("FAIL moe_unpermute_bwd: de over e differs from out of place\n"); failures++; }
  else printf("ok   %-34s n=%-5d exact\n", "moe_unpermute_bwd de over e", NK * C);
  free(ry); free(fde); free(fdw);
  float *fr[] = {m.lg, m.w, m.stat, (float *)m.idx, (float *)m.pos, m.rw, m.coef, bias, x, px, r2, dx, dx0,
                 m.e, m.ww, m.r, m.y, a, ya, de, dw, e2, dw2};
  for (size_t i = 0; i < sizeof fr / sizeof *fr; i++) be->free(be, fr[i]);
}


int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (ppsrt_cpu_backend_create(0, &be)) {
    fprintf(stderr, "FAIL cpu backend: %s\n", ppsrt_last_error());
    return 1;
  }
  test_gemm();
  test_elementwise();
  test_linear_fd();
  test_layernorm(1e-5f);   /* the default --norm-epsilon */
  test_layernorm(0.5f);    /* one far from it (a kernel adding a fixed eps shows) */
  test_rmsnorm(1, 1e-5f);
  test_rmsnorm(0, 1e-5f);
  test_rmsnorm(0, 0.5f);
  test_swiglu();
  test_rope();
  test_attention(2, 5, 4, 2, 3);   /* GQA: two query heads per kv head */
  test_attention(1, 4, 2, 2, 4);   /* plain multi-head */
  test_attention(1, 3, 3, 1, 2);   /* multi-query */
  test_attention_at(8, 4, 2, 4, 2, 3, NULL);   /* a late block (keys 0..5) of GQA */
  test_attention_at(8, 0, 2, 2, 2, 4, NULL);   /* the first block */
  test_attention_at(12, 9, 3, 3, 1, 2, NULL);  /* the last block, multi-query */
  {
    ppsrt_dropout d = {ppsrt_drop_thr(0.3), (float)(1.0 / 0.7), ppsrt_drop_key(5, 1, 0, 1, PPSRT_DROP_ATTN), 2, 6, 0};
    test_attention_at(8, 2, 4, 4, 2, 3, &d);   /* dropout: the whole sequence's mask */
  }
  test_dropout();
  test_embedding();
  test_softmax();
  test_moe();
  test_optimizer();
  test_streams();
  be->destroy(be);
  if (failures) {
    printf("FAIL: %d kernel check(s) failed\n", failures);
    return 1;
  }
  printf("all kernel checks passed\n");
  return 0;
}
