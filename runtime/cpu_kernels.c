/* cpu_kernels.c: the numerical kernels of the CPU backend (F32, plain C).
 *
 * Each kernel's comment states its exact math; the CUDA backend (runtime/cuda/)
 * implements the same formulas (in BF16 storage with F32 accumulation), and
 * tests/kernels/ checks every backward here against central finite differences.
 * All tensors are row-major; "row n" of a [N, C] tensor starts at n*C unless a
 * leading dimension (ld*) is given. Every kernel runs on the caller's thread (see
 * b->stream_sync). No kernel allocates per element; attention allocates one
 * scratch row per call.
 *
 * What it does not: no BF16, no vectorisation beyond what the compiler does with
 * contiguous inner loops, no threading. */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_backend.h"

#define ENTER(b, s)                                  \
  do {                                               \
    int rc_ = (b)->stream_sync((b), (s));            \
    if (rc_) return rc_;                             \
  } while (0)

/* add_bias: y[n, c] = x[n, c] + bias[c]; y may alias x. */
static int k_add_bias(ppsrt_backend *b, int stream, void *y_, const void *x_, const void *bias_, int N, int C) {
  ENTER(b, stream);
  float *y = y_;
  const float *x = x_, *bias = bias_;
  for (int n = 0; n < N; n++) {
    const float *xr = x + (size_t)n * C;
    float *yr = y + (size_t)n * C;
    for (int c = 0; c < C; c++) yr[c] = xr[c] + bias[c];
  }
  return PPSRT_OK;
}

/* bias_grad: dbias[c] += sum_n dy[n, c]. */
static int k_bias_grad(ppsrt_backend *b, int stream, float *dbias, const void *dy_, int N, int C) {
  ENTER(b, stream);
  const float *dy = dy_;
  for (int n = 0; n < N; n++) {
    const float *r = dy + (size_t)n * C;
    for (int c = 0; c < C; c++) dbias[c] += r[c];
  }
  return PPSRT_OK;
}

/* add: y[i] = a[i] + c[i]; y may alias a or c. */
static int k_add(ppsrt_backend *b, int stream, void *y_, const void *a_, const void *c_, size_t n) {
  ENTER(b, stream);
  float *y = y_;
  const float *a = a_, *c = c_;
  for (size_t i = 0; i < n; i++) y[i] = a[i] + c[i];
  return PPSRT_OK;
}

/* bias_dropout_add (dropout.h): y[n, c] = (a ? a[n, c] : 0) + (keep(base + n C + c) ?
 * (x[n, c] + (bias ? bias[c] : 0)) scale : 0); y may alias a or x (elementwise). */
static int k_bias_dropout_add(ppsrt_backend *b, int stream, void *y_, const void *a_, const void *x_, const void *bias_,
                              int N, int C, const ppsrt_dropout *d) {
  ENTER(b, stream);
  float *y = y_;
  const float *a = a_, *x = x_, *bias = bias_;
  for (size_t r = 0; r < (size_t)N; r++)
    for (size_t c = 0; c < (size_t)C; c++) {
      size_t i = r * (size_t)C + c;
      float v = ppsrt_drop_keep(d->thr, d->key, d->base + i) ? (x[i] + (bias ? bias[c] : 0.0f)) * d->scale : 0.0f;
      y[i] = (a ? a[i] : 0.0f) + v;
    }
  return PPSRT_OK;
}

/* gelu (tanh form): u = sqrt(2/pi) (x + 0.044715 x^3),
 *   gelu(x) = 0.5 x (1 + tanh u),
 *   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2). */
#define GELU_K 0.7978845608028654f   /* sqrt(2/pi) */
#define GELU_A 0.044715f

static int k_gelu_fwd(ppsrt_backend *b, int stream, void *y_, const void *x_, size_t n) {
  ENTER(b, stream);
  float *y = y_;
  const float *x = x_;
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    float u = GELU_K * (v + GELU_A * v * v * v);
    y[i] = 0.5f * v * (1.0f + tanhf(u));
  }
  return PPSRT_OK;
}

/* gelu_bwd: dx[i] = dy[i] * gelu'(x[i]); dx may alias dy or x. */
static int k_gelu_bwd(ppsrt_backend *b, int stream, void *dx_, const void *dy_, const void *x_, size_t n) {
  ENTER(b, stream);
  float *dx = dx_;
  const float *dy = dy_, *x = x_;
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    float u = GELU_K * (v + GELU_A * v * v * v);
    float t = tanhf(u);
    float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * v * v);
    dx[i] = dy[i] * d;
  }
  return PPSRT_OK;
}

/* add_bias_gelu: pre[n, c] = x[n, c] + bias[c]; y[n, c] = gelu(pre[n, c]) (the formulas
 * above, element by element); pre may alias x. Exactly add_bias then gelu_fwd. */
static int k_add_bias_gelu(ppsrt_backend *b, int stream, void *y_, void *pre_, const void *x_, const void *bias_,
                           int N, int C) {
  ENTER(b, stream);
  float *y = y_, *pre = pre_;
  const float *x = x_, *bias = bias_;
  for (int n = 0; n < N; n++) {
    const float *xr = x + (size_t)n * C;
    float *pr = pre + (size_t)n * C, *yr = y + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float v = xr[c] + bias[c];
      float u = GELU_K * (v + GELU_A * v * v * v);
      pr[c] = v;
      yr[c] = 0.5f * v * (1.0f + tanhf(u));
    }
  }
  return PPSRT_OK;
}

/* layernorm_fwd, per row n of x[N, C]:
 *   mean[n] = sum_c x / C,  var = sum_c (x - mean)^2 / C (biased),  rstd[n] = 1 / sqrt(var + eps),
 *   y[n, c] = (x[n, c] - mean[n]) * rstd[n] * gamma[c] + beta[c].
 * mean and rstd are kept (F32) for both backward halves. Sums in double.
 * mean == NULL: RMS norm, rstd[n] = 1 / sqrt(sum_c x^2 / C + eps), y = x rstd gamma.
 * eps: the model's --norm-epsilon (> 0).
 * beta == NULL: no + beta. */
static int k_layernorm_fwd(ppsrt_backend *b, int stream, void *y_, float *mean, float *rstd, const void *x_,
                           const void *gamma_, const void *beta_, int N, int C, float eps) {
  ENTER(b, stream);
  float *y = y_;
  const float *x = x_, *gamma = gamma_, *beta = beta_;
  for (int n = 0; n < N; n++) {
    const float *xr = x + (size_t)n * C;
    float *yr = y + (size_t)n * C;
    double s = 0.0;
    if (!mean) {   /* RMS norm: no centering */
      for (int c = 0; c < C; c++) s += (double)xr[c] * xr[c];
      float r = 1.0f / sqrtf((float)(s / C) + eps);
      for (int c = 0; c < C; c++) yr[c] = xr[c] * r * gamma[c] + (beta ? beta[c] : 0.0f);
      if (rstd) rstd[n] = r;
      continue;
    }
    for (int c = 0; c < C; c++) s += xr[c];
    float m = (float)(s / C);
    double v = 0.0;
    for (int c = 0; c < C; c++) {
      double d = xr[c] - m;
      v += d * d;
    }
    float r = 1.0f / sqrtf((float)(v / C) + eps);
    for (int c = 0; c < C; c++) yr[c] = (xr[c] - m) * r * gamma[c] + (beta ? beta[c] : 0.0f);
    mean[n] = m;
    if (rstd) rstd[n] = r;
  }
  return PPSRT_OK;
}

/* layernorm_bwd_input (B), per row with xhat = (x - mean) rstd and g = dy * gamma:
 *   dx[n, c] (+)= rstd * (g[c] - mean_c(g) - xhat[c] * mean_c(g * xhat)).
 * accumulate = 1 adds into dx (the residual branch's gradient is already there).
 * mean == NULL (RMS norm): xhat = x rstd and no mean_c(g) term:
 *   dx[n, c] (+)= rstd * (g[c] - xhat[c] * mean_c(g * xhat)). */
static int k_layernorm_bwd_input(ppsrt_backend *b, int stream, void *dx_, const void *dy_, const void *x_,
                                 const float *mean, const float *rstd, const void *gamma_, int N, int C,
                                 int accumulate) {
  ENTER(b, stream);
  float *dx = dx_;
  const float *dy = dy_, *x = x_, *gamma = gamma_;
  for (int n = 0; n < N; n++) {
    const float *xr = x + (size_t)n * C, *dyr = dy + (size_t)n * C;
    float *dxr = dx + (size_t)n * C;
    float m = mean ? mean[n] : 0.0f, r = rstd[n];
    double sg = 0.0, sgx = 0.0;
    for (int c = 0; c < C; c++) {
      float g = dyr[c] * gamma[c];
      sg += g;
      sgx += g * ((xr[c] - m) * r);
    }
    float mg = mean ? (float)(sg / C) : 0.0f, mgx = (float)(sgx / C);
    if (accumulate) {
      for (int c = 0; c < C; c++) dxr[c] += r * (dyr[c] * gamma[c] - mg - (xr[c] - m) * r * mgx);
    } else {
      for (int c = 0; c < C; c++) dxr[c] = r * (dyr[c] * gamma[c] - mg - (xr[c] - m) * r * mgx);
    }
  }
  return PPSRT_OK;
}

/* layernorm_bwd_weight (W): dgamma[c] += sum_n dy[n, c] * xhat[n, c]; dbeta[c] += sum_n dy[n, c]
 * (xhat = x rstd when mean == NULL: RMS norm; dbeta NULL: none). */
static int k_layernorm_bwd_weight(ppsrt_backend *b, int stream, float *dgamma, float *dbeta, const void *dy_,
                                  const void *x_, const float *mean, const float *rstd, int N, int C) {
  ENTER(b, stream);
  const float *dy = dy_, *x = x_;
  for (int n = 0; n < N; n++) {
    const float *xr = x + (size_t)n * C, *dyr = dy + (size_t)n * C;
    float m = mean ? mean[n] : 0.0f, r = rstd[n];
    for (int c = 0; c < C; c++) dgamma[c] += dyr[c] * (xr[c] - m) * r;
    if (dbeta)
      for (int c = 0; c < C; c++) dbeta[c] += dyr[c];
  }
  return PPSRT_OK;
}

/* rope: rotary position embedding in place on the first H heads (D columns each) of the
 * rows of x (row stride ld): for row n, head j, i < D/2, c/s = cs[(pos[n] D/2 + i) 2 + 0/1]
 * (s negated when inverse), a = x[jD + i], b = x[jD + i + D/2]:
 *   x[jD + i] = a c - b s,  x[jD + i + D/2] = b c + a s. */
static int k_rope(ppsrt_backend *b, int stream, void *x_, int ld, const int32_t *pos, const float *cs, int N, int H,
                  int D, int inverse) {
  ENTER(b, stream);
  float *x = x_;
  int hd = D / 2;
  for (int n = 0; n < N; n++) {
    const float *t = cs + (size_t)pos[n] * hd * 2;
    for (int j = 0; j < H; j++) {
      float *r = x + (size_t)n * ld + (size_t)j * D;
      for (int i = 0; i < hd; i++) {
        float c = t[2 * i], sn = inverse ? -t[2 * i + 1] : t[2 * i + 1], a = r[i], bb = r[i + hd];
        r[i] = a * c - bb * sn;
        r[i + hd] = bb * c + a * sn;
      }
    }
  }
  return PPSRT_OK;
}

/* swiglu_fwd: pre [N, 2C] = [gate | up] per row; y[n, c] = silu(g) u, silu(g) = g / (1 + exp(-g)). */
static float sigm(float g) { return 1.0f / (1.0f + expf(-g)); }
static int k_swiglu_fwd(ppsrt_backend *b, int stream, void *y_, const void *pre_, int N, int C) {
  ENTER(b, stream);
  float *y = y_;
  const float *pre = pre_;
  for (int n = 0; n < N; n++) {
    const float *g = pre + (size_t)n * 2 * C, *u = g + C;
    float *yr = y + (size_t)n * C;
    for (int c = 0; c < C; c++) yr[c] = g[c] * sigm(g[c]) * u[c];
  }
  return PPSRT_OK;
}

/* swiglu_bwd: dpre[n, c] = dy u silu'(g), dpre[n, C + c] = dy silu(g),
 * silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))); dpre may alias pre (each pair is read
 * before it is written). */
static int k_swiglu_bwd(ppsrt_backend *b, int stream, void *dpre_, const void *dy_, const void *pre_, int N, int C) {
  ENTER(b, stream);
  float *dpre = dpre_;
  const float *dy = dy_, *pre = pre_;
  for (int n = 0; n < N; n++) {
    const float *g = pre + (size_t)n * 2 * C, *u = g + C, *d = dy + (size_t)n * C;
    float *dg = dpre + (size_t)n * 2 * C, *du = dg + C;
    for (int c = 0; c < C; c++) {
      float gg = g[c], uu = u[c], sg = sigm(gg);
      dg[c] = d[c] * uu * sg * (1.0f + gg * (1.0f - sg));
      du[c] = d[c] * gg * sg;
    }
  }
  return PPSRT_OK;
}

/* attention_fwd: causal self-attention with grouped query heads.
 * For sequence b in [0, batch), query head h in [0, Hq), kv head g = h / (Hq / Hkv),
 * positions i, j in [0, T), rows r(b, t) = b*T + t:
 *   q_i = q[r(b,i)*ldq + h*D .. +D],  k_j = k[r(b,j)*ldk + g*D ..],  v_j = v[r(b,j)*ldv + g*D ..]
 *   s_ij = (q_i . k_j) / sqrt(D)  for j <= i (causal; j > i is masked out)
 *   lse[(b*Hq + h)*T + i] = log sum_{j<=i} exp(s_ij)       (F32, kept for backward)
 *   out[r(b,i)*(Hq*D) + h*D + d] = sum_{j<=i} P~_ij v_j[d],  P_ij = exp(s_ij - lse_i)
 * out is dense with row stride Hq*D. Hq must be a multiple of Hkv. With dropout (drop, thr
 * > 0) P~_ij = P_ij scale when keep(((b heads + base + h) T + i) T + j), else 0; without,
 * P~ = P. */
/* The forward of `batch` sequences whose queries are at positions [q0, q0 + T) and keys
 * at [0, q0 + T): query rows bb*T + i, key rows bb*(q0 + T) + j, lse [(bb*Hq + h)*T + i];
 * q0 = 0 is attention_fwd, batch 1 attention_fwd_at (runtime/cp.c). */
static int attn_fwd_core(void *out_, float *lse, const void *q_, int ldq, const void *k_, int ldk, const void *v_,
                         int ldv, int batch, int T, int q0, int Hq, int Hkv, int D, const ppsrt_dropout *drop) {
  if (Hkv <= 0 || Hq % Hkv != 0) return PPSRT_FAIL(PPSRT_E_USAGE, "attention: Hq %d not a multiple of Hkv %d", Hq, Hkv);
  if (q0 < 0 || T < 0) return PPSRT_FAIL(PPSRT_E_USAGE, "attention: bad query block [%d, %d + %d)", q0, q0, T);
  float *out = out_;
  const float *q = q_, *k = k_, *v = v_;
  const int Tk = q0 + T;
  float *s = malloc((size_t)(Tk > 0 ? Tk : 1) * sizeof *s);
  if (!s) return PPSRT_FAIL(PPSRT_E_NOMEM, "attention: no scratch memory");
  const float scale = 1.0f / sqrtf((float)D);
  const int grp = Hq / Hkv, ldo = Hq * D, dr = drop && drop->thr, Ts = dr && drop->seq ? drop->seq : Tk;
  for (int bb = 0; bb < batch; bb++)
    for (int h = 0; h < Hq; h++) {
      int g = h / grp;
      for (int i = 0; i < T; i++) {
        const int gi = q0 + i;   /* the query's global position: it sees keys 0..gi */
        const float *qi = q + (size_t)(bb * T + i) * ldq + (size_t)h * D;
        float mx = -INFINITY;
        for (int j = 0; j <= gi; j++) {
          const float *kj = k + ((size_t)bb * Tk + j) * ldk + (size_t)g * D;
          float acc = 0.0f;
          for (int d = 0; d < D; d++) acc += qi[d] * kj[d];
          s[j] = acc * scale;
          if (s[j] > mx) mx = s[j];
        }
        float l = 0.0f;
        for (int j = 0; j <= gi; j++) {
          s[j] = expf(s[j] - mx);
          l += s[j];
        }
        float inv = 1.0f / l;
        float *oi = out + (size_t)(bb * T + i) * ldo + (size_t)h * D;
        uint64_t row = dr ? (((uint64_t)bb * drop->heads + drop->base + h) * Ts + gi) * Ts : 0;
        for (int d = 0; d < D; d++) oi[d] = 0.0f;
        for (int j = 0; j <= gi; j++) {
          const float *vj = v + ((size_t)bb * Tk + j) * ldv + (size_t)g * D;
          float p = s[j] * inv;
          if (dr) p = ppsrt_drop_keep(drop->thr, drop->key, row + j) ? p * drop->scale : 0.0f;
          for (int d = 0; d < D; d++) oi[d] += p * vj[d];
        }
        lse[((size_t)bb * Hq + h) * T + i] = mx + logf(l);
      }
    }
  free(s);
  return PPSRT_OK;
}
static int k_attention_fwd(ppsrt_backend *b, int stream, void *out, float *lse, const void *q, int ldq,
                           const void *k, int ldk, const void *v, int ldv, int batch, int T, int Hq, int Hkv,
                           int D, const ppsrt_dropout *drop) {
  ENTER(b, stream);
  return attn_fwd_core(out, lse, q, ldq, k, ldk, v, ldv, batch, T, 0, Hq, Hkv, D, drop);
}
static int k_attention_fwd_at(ppsrt_backend *b, int stream, void *out, float *lse, const void *q, int ldq,
                              const void *k, int ldk, const void *v, int ldv, int Tq, int q0, int Hq, int Hkv, int D,
                              const ppsrt_dropout *drop) {
  ENTER(b, stream);
  return attn_fwd_core(out, lse, q, ldq, k, ldk, v, ldv, 1, Tq, q0, Hq, Hkv, D, drop);
}

/* attention_bwd, same indexing as attention_fwd, with P_ij = exp(s_ij - lse_i) (j <= i),
 * dout/out dense [batch*T, Hq*D]:
 *   Delta_i = dout_i . out_i,   dP_ij = dout_i . v_j,   dS_ij = P_ij (dP_ij - Delta_i)
 *   dq_i  = (1/sqrt(D)) sum_{j<=i} dS_ij k_j                     (written)
 *   dk_j  = (1/sqrt(D)) sum_{h in group g} sum_{i>=j} dS_ij q_i   (written; summed over
 *   dv_j  = sum_{h in group g} sum_{i>=j} P_ij dout_i               the group's query heads)
 * With dropout (the forward's mask, regenerated) dP_ij is that of the dropped
 * probabilities, (dout_i . v_j) scale or 0, and dv_j sums P~_ij dout_i; Delta_i =
 * dout_i . out_i is still sum_j P_ij dP_ij, since out_i = sum_j P~_ij v_j.
 * dq at column h*D, dk/dv at column g*D, all three with row stride ldd (they may be the
 * three parts of one fused [batch*T, (Hq+2Hkv)*D] gradient). dq, dk, dv are overwritten. */
/* The backward of attn_fwd_core's blocks: dq rows bb*T + i (stride lddq), dk/dv rows
 * bb*(q0 + T) + j (stride lddk), added to (accumulate) or overwritten. */
static int attn_bwd_core(void *dq_, int lddq, void *dk_, void *dv_, int lddk, int accumulate, const void *dout_,
                         const void *out_, const float *lse, const void *q_, int ldq, const void *k_, int ldk,
                         const void *v_, int ldv, int batch, int T, int q0, int Hq, int Hkv, int D,
                         const ppsrt_dropout *drop) {
  if (Hkv <= 0 || Hq % Hkv != 0) return PPSRT_FAIL(PPSRT_E_USAGE, "attention: Hq %d not a multiple of Hkv %d", Hq, Hkv);
  if (q0 < 0 || T < 0) return PPSRT_FAIL(PPSRT_E_USAGE, "attention: bad query block [%d, %d + %d)", q0, q0, T);
  float *dq = dq_, *dk = dk_, *dv = dv_;
  const float *dout = dout_, *out = out_, *q = q_, *k = k_, *v = v_;
  const float scale = 1.0f / sqrtf((float)D);
  const int grp = Hq / Hkv, ldo = Hq * D, dr = drop && drop->thr, Tk = q0 + T, Ts = dr && drop->seq ? drop->seq : Tk;
  for (int r = 0; r < batch * Tk && !accumulate; r++) {
    memset(dk + (size_t)r * lddk, 0, (size_t)Hkv * D * sizeof(float));
    memset(dv + (size_t)r * lddk, 0, (size_t)Hkv * D * sizeof(float));
  }
  for (int bb = 0; bb < batch; bb++)
    for (int h = 0; h < Hq; h++) {
      int g = h / grp;
      for (int i = 0; i < T; i++) {
        size_t ri = (size_t)(bb * T + i);
        const int gi = q0 + i;
        const float *qi = q + ri * ldq + (size_t)h * D;
        const float *doi = dout + ri * ldo + (size_t)h * D;
        const float *oi = out + ri * ldo + (size_t)h * D;
        float li = lse[((size_t)bb * Hq + h) * T + i];
        float delta = 0.0f;
        for (int d = 0; d < D; d++) delta += doi[d] * oi[d];
        float *dqi = dq + ri * lddq + (size_t)h * D;
        for (int d = 0; d < D; d++) dqi[d] = 0.0f;
        uint64_t row = dr ? (((uint64_t)bb * drop->heads + drop->base + h) * Ts + gi) * Ts : 0;
        for (int j = 0; j <= gi; j++) {
          size_t rj = (size_t)bb * Tk + j;
          const float *kj = k + rj * ldk + (size_t)g * D, *vj = v + rj * ldv + (size_t)g * D;
          float sc = 0.0f, dp = 0.0f;
          for (int d = 0; d < D; d++) {
            sc += qi[d] * kj[d];
            dp += doi[d] * vj[d];
          }
          float pij = expf(sc * scale - li), pd = pij;   /* pd: P~_ij */
          if (dr) {
            int kp = ppsrt_drop_keep(drop->thr, drop->key, row + j);
            pd = kp ? pij * drop->scale : 0.0f;
            dp = kp ? dp * drop->scale : 0.0f;
          }
          float ds = pij * (dp - delta) * scale;
          float *dkj = dk + rj * lddk + (size_t)g * D, *dvj = dv + rj * lddk + (size_t)g * D;
          for (int d = 0; d < D; d++) {
            dqi[d] += ds * kj[d];
            dkj[d] += ds * qi[d];
            dvj[d] += pd * doi[d];
          }
        }
      }
    }
  return PPSRT_OK;
}
static int k_attention_bwd(ppsrt_backend *b, int stream, void *dq, void *dk, void *dv, int ldd,
                           const void *dout, const void *out, const float *lse, const void *q, int ldq,
                           const void *k, int ldk, const void *v, int ldv, int batch, int T, int Hq,
                           int Hkv, int D, const ppsrt_dropout *drop) {
  ENTER(b, stream);
  return attn_bwd_core(dq, ldd, dk, dv, ldd, 0, dout, out, lse, q, ldq, k, ldk, v, ldv, batch, T, 0, Hq, Hkv, D, drop);
}
static int k_attention_bwd_at(ppsrt_backend *b, int stream, void *dq, int lddq, void *dk, void *dv, int lddk,
                              const void *dout, const void *out, const float *lse, const void *q, int ldq,
                              const void *k, int ldk, const void *v, int ldv, int Tq, int q0, int Hq, int Hkv, int D,
                              const ppsrt_dropout *drop) {
  ENTER(b, stream);
  return attn_bwd_core(dq, lddq, dk, dv, lddk, 0, dout, out, lse, q, ldq, k, ldk, v, ldv, 1, Tq, q0, Hq, Hkv, D, drop);
}

/* embedding_fwd over a vocabulary shard: table holds rows for ids [lo, hi), [hi-lo, C]:
 *   out[n, :] = table[ids[n] - lo, :]     if lo <= ids[n] < hi
 *             = 0                          otherwise
 * With accumulate = 1: out[n, :] += table row when in range, unchanged otherwise. */
static int k_embedding_fwd(ppsrt_backend *b, int stream, void *out_, const int32_t *ids, const void *table_,
                           int N, int C, int lo, int hi, int accumulate) {
  ENTER(b, stream);
  float *out = out_;
  const float *table = table_;
  for (int n = 0; n < N; n++) {
    float *o = out + (size_t)n * C;
    int id = ids[n];
    if (id >= lo && id < hi) {
      const float *t = table + (size_t)(id - lo) * C;
      if (accumulate) for (int c = 0; c < C; c++) o[c] += t[c];
      else memcpy(o, t, (size_t)C * sizeof(float));
    } else if (!accumulate) {
      memset(o, 0, (size_t)C * sizeof(float));
    }
  }
  return PPSRT_OK;
}

/* embedding_bwd: dtable[ids[n] - lo, :] += dout[n, :] for every n with lo <= ids[n] < hi. */
static int k_embedding_bwd(ppsrt_backend *b, int stream, float *dtable, const void *dout_, const int32_t *ids,
                           int N, int C, int lo, int hi) {
  ENTER(b, stream);
  const float *dout = dout_;
  for (int n = 0; n < N; n++) {
    int id = ids[n];
    if (id < lo || id >= hi) continue;
    float *t = dtable + (size_t)(id - lo) * C;
    const float *d = dout + (size_t)n * C;
    for (int c = 0; c < C; c++) t[c] += d[c];
  }
  return PPSRT_OK;
}

/* softmax_stats of a shard logits[N, V] covering ids [lo, lo+V), per row n:
 *   max[n] = max_v logits[n, v],   sumexp[n] = sum_v exp(logits[n, v] - max[n]),
 *   tgt[n] = logits[n, targets[n] - lo] if lo <= targets[n] < lo+V, else 0.
 * Shards merge (online softmax): gmax = max_k max_k, gsum = sum_k sumexp_k exp(max_k - gmax),
 * target logit = sum_k tgt_k; loss[n] = gmax + log(gsum) - tgt. */
static int k_softmax_stats(ppsrt_backend *b, int stream, float *max, float *sumexp, float *tgt,
                           const void *logits_, const int32_t *targets, int N, int V, int lo) {
  ENTER(b, stream);
  const float *logits = logits_;
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * V;
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) if (l[v] > mx) mx = l[v];
    double s = 0.0;
    for (int v = 0; v < V; v++) s += expf(l[v] - mx);
    max[n] = mx;
    sumexp[n] = (float)s;
    int t = targets[n] - lo;
    if (tgt) tgt[n] = (t >= 0 && t < V) ? l[t] : 0.0f;
  }
  return PPSRT_OK;
}

/* softmax_xent_bwd over a shard, given the GLOBAL gmax[n] and gsum[n]:
 *   dlogits[n, v] = (exp(logits[n, v] - gmax[n]) / gsum[n] - [v == targets[n] - lo]) * scale.
 * dlogits may alias logits. A target outside [lo, lo+V) subtracts nothing here. */
static int k_softmax_xent_bwd(ppsrt_backend *b, int stream, void *dlogits_, const void *logits_,
                              const float *gmax, const float *gsum, const int32_t *targets, int N, int V,
                              int lo, float scale) {
  ENTER(b, stream);
  float *dl = dlogits_;
  const float *logits = logits_;
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * V;
    float *o = dl + (size_t)n * V;
    float m = gmax[n], inv = scale / gsum[n];
    for (int v = 0; v < V; v++) o[v] = expf(l[v] - m) * inv;
    int t = targets[n] - lo;
    if (t >= 0 && t < V) o[t] -= scale;
  }
  return PPSRT_OK;
}

/* optimizer_step on F32 master weights w, gradient g (then zeroed), decoupled decay:
 *   SGD  (kind 0): w = w - lr*wd*w - lr*g
 *   Adam (kind 1): m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *                  mhat = m / (1 - b1^step);  vhat = v / (1 - b2^step);
 *                  w = w - lr*wd*w - lr * mhat / (sqrt(vhat) + eps)
 * then param (act_dtype copy) = w when param != master. */
static int k_optimizer_step(ppsrt_backend *b, int stream, int kind, float *w, void *param_, float *g, float *m,
                            float *v, size_t n, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int step) {
  ENTER(b, stream);
  if (kind == 0) {
    for (size_t i = 0; i < n; i++) w[i] = w[i] - lr * weight_decay * w[i] - lr * g[i];
  } else if (kind == 1) {
    if (step < 1) return PPSRT_FAIL(PPSRT_E_USAGE, "adam: step is 1-based (got %d)", step);
    float c1 = 1.0f / (1.0f - powf(beta1, (float)step)), c2 = 1.0f / (1.0f - powf(beta2, (float)step));
    for (size_t i = 0; i < n; i++) {
      m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
      v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
      float mh = m[i] * c1, vh = v[i] * c2;
      w[i] = w[i] - lr * weight_decay * w[i] - lr * mh / (sqrtf(vh) + eps);
    }
  } else {
    return PPSRT_FAIL(PPSRT_E_USAGE, "optimizer: unknown kind %d", kind);
  }
  float *param = param_;
  if (param && param != w) memcpy(param, w, n * sizeof(float));
  memset(g, 0, n * sizeof(float));
  return PPSRT_OK;
}

/* axpy_f32: y[i] += a * x[i].   scale_f32: x[i] *= a. */
static int k_axpy_f32(ppsrt_backend *b, int stream, float *y, const float *x, float a, size_t n) {
  ENTER(b, stream);
  for (size_t i = 0; i < n; i++) y[i] += a * x[i];
  return PPSRT_OK;
}

static int k_scale_f32(ppsrt_backend *b, int stream, float *x, float a, size_t n) {
  ENTER(b, stream);
  for (size_t i = 0; i < n; i++) x[i] *= a;
  return PPSRT_OK;
}

/* softmax_rescale_f32: x[n, c] *= exp(lmax[n] - gmax[n]) * (lsum ? lsum[n] : 1) / (gsum ? gsum[n] : 1). */
static int k_softmax_rescale_f32(ppsrt_backend *b, int stream, float *x, const float *lmax, const float *lsum,
                                 const float *gmax, const float *gsum, int N, int C) {
  ENTER(b, stream);
  for (int n = 0; n < N; n++) {
    float f = expf(lmax[n] - gmax[n]);
    if (lsum) f *= lsum[n];
    if (gsum) f /= gsum[n];
    float *r = x + (size_t)n * C;
    for (int c = 0; c < C; c++) r[c] *= f;
  }
  return PPSRT_OK;
}

/* convert: the CPU backend has only F32, so this is a copy (dst may equal src). */
static int k_convert(ppsrt_backend *b, int stream, void *dst, ppsrt_dtype dt, const void *src, ppsrt_dtype st,
                     size_t n) {
  ENTER(b, stream);
  if (dt != PPSRT_F32 || st != PPSRT_F32) return PPSRT_FAIL(PPSRT_E_USAGE, "cpu convert: only F32 (got %d -> %d)", st, dt);
  if (n && dst != src) memmove(dst, src, n * sizeof(float));
  return PPSRT_OK;
}

/* ---- mixture of experts (backend.h moe_*; runtime/moe.c) ---- */

/* moe_route: the routing of backend.h (r NULL: softmax over the top-K logits, no scale,
 * no bias): per token the selection scores (the logits; with pre_softmax the softmax over
 * all E; sigmoid: sigmoid(l) + bias), the K largest (ties: lower index first) in
 * descending order into idx, the weights w, and stat: slots routed to each expert (by the
 * scores without the bias: the load-balancing loss's), the load-balancing loss's scores
 * summed over tokens, and sum_n lse_n^2 (the z-loss's), in token order. With r->force
 * the forced choices replace the K largest (the weights and counts then of them). */
#define ROUTE_EPS 1e-20f   /* sigmoid: w = s / (sum of the chosen s + ROUTE_EPS), Megatron-Core's */
static void top_k(const float *sc, const float *bias, int E, int K, int32_t *ix) {
  for (int k = 0; k < K; k++) {   /* the largest score not yet taken, lowest index on ties */
    int best = -1;
    float bv = 0.0f;
    for (int e = 0; e < E; e++) {
      int taken = 0;
      for (int j = 0; j < k && !taken; j++) taken = ix[j] == e;
      float v = bias ? sc[e] + bias[e] : sc[e];
      if (!taken && (best < 0 || v > bv)) { best = e; bv = v; }
    }
    ix[k] = best;
  }
}
static int k_moe_route(ppsrt_backend *b, int stream, const float *logits, int N, int E, int K,
                       const ppsrt_moe_router *r, int32_t *idx, float *w, float *stat) {
  ENTER(b, stream);
  int sig = r && r->sigmoid, pre = r && r->pre_softmax;
  float scale = r && r->scale > 0 ? r->scale : 1.0f;
  const float *bias = r && r->sigmoid ? r->bias : NULL;
  float *sc = malloc(2 * (size_t)E * sizeof *sc), *p = sc ? sc + E : NULL;
  int32_t ub[1024];   /* the unbiased choice (E <= 1024, moe.c) */
  if (!sc) return PPSRT_FAIL(PPSRT_E_NOMEM, "moe_route: out of host memory");
  for (int e = 0; e <= 2 * E; e++) stat[e] = 0.0f;
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * E;
    float mx = l[0], s = 0.0f, ss = 0.0f;
    for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) s += (p[e] = expf(l[e] - mx));
    for (int e = 0; e < E; e++) p[e] /= s;
    float lse = mx + logf(s);
    stat[2 * E] += lse * lse;
    for (int e = 0; e < E; e++) sc[e] = sig ? 1.0f / (1.0f + expf(-l[e])) : pre ? p[e] : l[e];
    if (sig) {   /* the load-balancing loss's scores: the sigmoids normalised over all E */
      for (int e = 0; e < E; e++) ss += sc[e];
      for (int e = 0; e < E; e++) stat[E + e] += sc[e] / (ss + ROUTE_EPS);
    } else {
      for (int e = 0; e < E; e++) stat[E + e] += p[e];
    }
    int32_t *ix = idx + (size_t)n * K;
    float *wr = w + (size_t)n * K, ws = 0.0f;
    top_k(sc, bias, E, K, ix);
    if (r && r->force) memcpy(ix, r->force + (size_t)n * K, (size_t)K * sizeof *ix);   /* (a replay: moe_router.h) */
    if (bias) top_k(sc, NULL, E, K, ub);
    for (int k = 0; k < K; k++) stat[bias ? ub[k] : ix[k]] += 1.0f;
    if (sig) {
      for (int k = 0; k < K; k++) ws += (wr[k] = sc[ix[k]]);
      for (int k = 0; k < K && K > 1; k++) wr[k] /= ws + ROUTE_EPS;
    } else if (pre) {
      for (int k = 0; k < K; k++) wr[k] = p[ix[k]];
    } else {
      for (int k = 0; k < K; k++) ws += (wr[k] = expf(l[ix[k]] - l[ix[0]]));
      for (int k = 0; k < K; k++) wr[k] /= ws;
    }
    for (int k = 0; k < K; k++) wr[k] *= scale;
  }
  free(sc);
  return PPSRT_OK;
}

/* moe_route_bwd: dlogits from the logits (the forward's scores recomputed): the weights'
 * backward at the selected experts (through the scale, the top-K softmax, the full softmax
 * or the sigmoid and its renormalisation), plus with coef the load-balancing loss's
 * through its scores, plus with zcoef the z-loss's, zcoef lse_n softmax(l_n). */
static int k_moe_route_bwd(ppsrt_backend *b, int stream, void *dlogits_, const float *dw, const float *logits,
                           const int32_t *idx, const ppsrt_moe_router *r, const float *coef, int N, int E, int K) {
  ENTER(b, stream);
  int sig = r && r->sigmoid, pre = r && r->pre_softmax;
  float scale = r && r->scale > 0 ? r->scale : 1.0f, zc = r ? r->zcoef : 0.0f;
  float *dl = dlogits_, *p = malloc(2 * (size_t)E * sizeof *p), *s = p ? p + E : NULL;
  if (!p) return PPSRT_FAIL(PPSRT_E_NOMEM, "moe_route_bwd: out of host memory");
  for (int n = 0; n < N; n++) {
    float *d = dl + (size_t)n * E;
    const float *l = logits + (size_t)n * E, *dwr = dw + (size_t)n * K;
    const int32_t *ix = idx + (size_t)n * K;
    float mx = l[0], z = 0.0f, ss = 0.0f, sc = 0.0f, g[1024];
    for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) z += (p[e] = expf(l[e] - mx));
    for (int e = 0; e < E; e++) { p[e] /= z; s[e] = 1.0f / (1.0f + expf(-l[e])); ss += s[e]; }
    float lse = mx + logf(z);
    for (int e = 0; e < E; e++) d[e] = zc * lse * p[e];
    if (coef && sig) {   /* through q = s / (sum s + eps) */
      for (int e = 0; e < E; e++) sc += s[e] / (ss + ROUTE_EPS) * coef[e];
      for (int e = 0; e < E; e++) d[e] += s[e] * (1.0f - s[e]) / (ss + ROUTE_EPS) * (coef[e] - sc);
    } else if (coef) {
      for (int e = 0; e < E; e++) sc += p[e] * coef[e];
      for (int e = 0; e < E; e++) d[e] += p[e] * (coef[e] - sc);
    }
    for (int k = 0; k < K; k++) g[k] = scale * dwr[k];   /* the gradient of the unscaled weights */
    if (sig) {
      float t = 0.0f, gs = 0.0f;
      for (int k = 0; k < K; k++) t += s[ix[k]];
      t += ROUTE_EPS;
      for (int k = 0; k < K; k++) gs += g[k] * s[ix[k]];
      for (int k = 0; k < K; k++) {
        float e = s[ix[k]], ds = K > 1 ? (g[k] - gs / t) / t : g[k];
        d[ix[k]] += ds * e * (1.0f - e);
      }
    } else if (pre) {
      float gs = 0.0f;
      for (int k = 0; k < K; k++) gs += g[k] * p[ix[k]];
      for (int e = 0; e < E; e++) d[e] -= p[e] * gs;
      for (int k = 0; k < K; k++) d[ix[k]] += p[ix[k]] * g[k];
    } else {
      float ws = 0.0f, q[1024], gs = 0.0f;
      for (int k = 0; k < K; k++) ws += (q[k] = expf(l[ix[k]] - l[ix[0]]));
      for (int k = 0; k < K; k++) { q[k] /= ws; gs += q[k] * g[k]; }
      for (int k = 0; k < K; k++) d[ix[k]] += q[k] * (g[k] - gs);
    }
  }
  free(p);
  return PPSRT_OK;
}

/* moe_permute: dst[pos[n K + k]] = src[n]. In these four a slot at a position below 0 (dropped
 * over an expert's capacity, or another rank's expert's: runtime/moe.c) has no row: nothing
 * copied, summed or combined, its dw 0. */
static int k_moe_permute(ppsrt_backend *b, int stream, void *dst_, const void *src_, const int32_t *pos, int N, int K,
                         int C) {
  ENTER(b, stream);
  float *dst = dst_;
  const float *src = src_;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      if (pos[(size_t)n * K + k] >= 0) memcpy(dst + (size_t)pos[(size_t)n * K + k] * C, src + (size_t)n * C, (size_t)C * sizeof(float));
  return PPSRT_OK;
}

/* moe_permute_bwd: dx[n] (+)= sum_k dp[pos[n K + k]], k in order. */
static int k_moe_permute_bwd(ppsrt_backend *b, int stream, void *dx_, const void *dp_, const int32_t *pos, int N, int K,
                             int C, int accumulate) {
  ENTER(b, stream);
  float *dx = dx_;
  const float *dp = dp_;
  for (int n = 0; n < N; n++) {
    float *r = dx + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float s = accumulate ? r[c] : 0.0f;
      for (int k = 0; k < K; k++)
        if (pos[(size_t)n * K + k] >= 0) s += dp[(size_t)pos[(size_t)n * K + k] * C + c];
      r[c] = s;
    }
  }
  return PPSRT_OK;
}

/* moe_unpermute: y[n] = (a ? a[n] : 0) + sum_k w[n K + k] e[pos[n K + k]], k in order. */
static int k_moe_unpermute(ppsrt_backend *b, int stream, void *y_, const void *a_, const void *e_, const int32_t *pos,
                           const float *w, int N, int K, int C) {
  ENTER(b, stream);
  float *y = y_;
  const float *a = a_, *e = e_;
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      float s = a ? a[(size_t)n * C + c] : 0.0f;
      for (int k = 0; k < K; k++)
        if (pos[(size_t)n * K + k] >= 0) s += w[(size_t)n * K + k] * e[(size_t)pos[(size_t)n * K + k] * C + c];
      y[(size_t)n * C + c] = s;
    }
  return PPSRT_OK;
}

/* moe_unpermute_bwd: dw[n K + k] = dy[n] . e[pos], then de[pos] = w dy[n] (de may alias e). */
static int k_moe_unpermute_bwd(ppsrt_backend *b, int stream, void *de_, float *dw, const void *dy_, const void *e_,
                               const int32_t *pos, const float *w, int N, int K, int C) {
  ENTER(b, stream);
  float *de = de_;
  const float *dy = dy_, *e = e_;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) {
      size_t s = (size_t)n * K + k, row = (size_t)pos[s] * C;
      const float *d = dy + (size_t)n * C;
      if (pos[s] < 0) {
        if (dw) dw[s] = 0.0f;
        continue;
      }
      if (dw) {
        float acc = 0.0f;
        for (int c = 0; c < C; c++) acc += d[c] * e[row + c];
        dw[s] = acc;
      }
      for (int c = 0; c < C; c++) de[row + c] = w[s] * d[c];
    }
  return PPSRT_OK;
}

void ppsrt_cpu_install_kernels(ppsrt_backend *b) {
  b->add_bias = k_add_bias;
  b->bias_grad = k_bias_grad;
  b->add = k_add;
  b->gelu_fwd = k_gelu_fwd;
  b->gelu_bwd = k_gelu_bwd;
  b->layernorm_fwd = k_layernorm_fwd;
  b->layernorm_bwd_input = k_layernorm_bwd_input;
  b->layernorm_bwd_weight = k_layernorm_bwd_weight;
  b->attention_fwd = k_attention_fwd;
  b->attention_bwd = k_attention_bwd;
  b->attention_fwd_at = k_attention_fwd_at;
  b->attention_bwd_at = k_attention_bwd_at;
  b->embedding_fwd = k_embedding_fwd;
  b->embedding_bwd = k_embedding_bwd;
  b->softmax_stats = k_softmax_stats;
  b->softmax_xent_bwd = k_softmax_xent_bwd;
  b->optimizer_step = k_optimizer_step;
  b->axpy_f32 = k_axpy_f32;
  b->scale_f32 = k_scale_f32;
  b->softmax_rescale_f32 = k_softmax_rescale_f32;
  b->convert = k_convert;
  b->add_bias_gelu = k_add_bias_gelu;
  b->rope = k_rope;
  b->swiglu_fwd = k_swiglu_fwd;
  b->swiglu_bwd = k_swiglu_bwd;
  b->bias_dropout_add = k_bias_dropout_add;
  b->moe_route = k_moe_route;
  b->moe_route_bwd = k_moe_route_bwd;
  b->moe_permute = k_moe_permute;
  b->moe_permute_bwd = k_moe_permute_bwd;
  b->moe_unpermute = k_moe_unpermute;
  b->moe_unpermute_bwd = k_moe_unpermute_bwd;
}
