/* model_mlp.c: the `mlp` model: each stage is a stack of `layers_per_stage` blocks
 * y = gelu(x W + b) of width `hidden` over N = micro_batch * seq rows; after the last
 * stage the loss is the mean squared error to a synthetic target. Data and initial
 * weights are deterministic (seeded, independent of placement), so the --check
 * reference on one device sees the same numbers.
 *
 * Passes (written once against backend.h, so they run on CPU and CUDA):
 *   F   saves, per layer l, its input x_l and pre-activation h_l (2L tensors of N*H);
 *       the last stage also computes the loss and the loss gradient (on the host);
 *       layer l's entries are 2l+1 (h_l) and 2l+2 (its output, the next x), so the
 *       first k layers (a partial recompute) drop entries 1..2k: k/L of act;
 *   B   per layer from the top: dh_l = dy * gelu'(h_l), kept in h_l's buffer for W;
 *       dx = dh_l W^T. Frees nothing (b_free = 0): W needs x_l and dh_l;
 *   W   dW_l += x_l^T dh_l, db_l += colsum(dh_l); releases the stage's entries;
 *   BW  = B then W (the runtime's default).
 * What it does not: no vocabulary passes (the gpt model has them), no dropout, no
 * residuals, no normalisation. Also holds the seeded random numbers shared by models. */
#include "config.h"
#include "rt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- deterministic numbers shared by the models ---- */
static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

float ppsrt_rand_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t h = splitmix64(seed ^ splitmix64(stream ^ splitmix64(index)));
  return (float)((double)(h >> 40) / (double)(1ULL << 24) * 2.0 - 1.0);
}

/* a uniform in (0, 1): the hash's top 52 bits plus half a step, exact in a double
 * (never 0, never 1) */
static double rand_open01(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t h = splitmix64(seed ^ splitmix64(stream ^ splitmix64(index)));
  return ((double)(h >> 12) + 0.5) / (double)(1ULL << 52);
}

/* Box-Muller: sqrt(-2 ln u1) cos(2 pi u2), u1 and u2 independent uniforms in (0, 1) */
float ppsrt_rand_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const double two_pi = 6.283185307179586;
  double u1 = rand_open01(seed, stream, 2 * index), u2 = rand_open01(seed, stream, 2 * index + 1);
  return (float)(sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
}

uint64_t ppsrt_hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

/* ---- the model ---- */
typedef struct mlp_layer { ppsrt_param *w, *b; } mlp_layer;

typedef struct mlp {
  int H, N, L;
  size_t es;                 /* bytes of one activation element */
  int *local;                /* [nstage]: index of the stage among the held ones, -1 */
  mlp_layer *layers;         /* [nheld * L] */
  char **names;
  float *host;               /* N*H scratch for data and the loss */
  float *host2;
  double loss;               /* sum over this iteration's microbatches (already / nmb) */
} mlp;

static size_t mlp_xfer_bytes(ppsrt_model *m, int xfer, int mb, int stage) {
  mlp *p = m->impl;
  return (size_t)p->N * p->H * p->es;
}

static size_t mlp_act_bytes(ppsrt_model *m, int stage) {
  mlp *p = m->impl;
  return stage < 0 ? 0 : (size_t)2 * p->L * p->N * p->H * p->es;
}

static ppsrt_tensor T(void *data, size_t n, ppsrt_dtype t) { return (ppsrt_tensor){data, n, t}; }

/* Fills host[N*H] with the synthetic input (kind 0) or target (kind 1) of mb. */
static void synth(ppsrt_model *m, int kind, int mb, float *host) {
  mlp *p = m->impl;
  uint64_t stream = 0x5eed0000ULL + (uint64_t)kind * 0x100000ULL + (uint64_t)(mb + m->cfg.mb0);
  size_t n = (size_t)p->N * p->H;
  for (size_t i = 0; i < n; i++)
    host[i] = (kind ? 0.5f : 1.0f) * ppsrt_rand_uniform(m->cfg.seed, stream, i);
}

static int mlp_f(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage) {
  mlp *p = m->impl;
  ppsrt_backend *be = m->be;
  int nc = m->cfg.no_compute, rc, H = p->H, N = p->N;
  size_t n = (size_t)N * H, bytes = n * p->es;
  if (stage < 0 || stage >= m->cfg.nstage || p->local[stage] < 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "mlp: F(%d, %d): this device does not hold stage %d", mb, stage, stage);
  mlp_layer *ly = &p->layers[(size_t)p->local[stage] * p->L];
  void *x = NULL;
  size_t got = 0;
  if (stage == 0) {
    if ((rc = be->alloc(be, bytes, &x))) return rc;
    if (!nc) {
      synth(m, 0, mb, p->host);
      if ((rc = be->upload_f32(be, T(x, n, be->act_dtype), p->host))) { be->free(be, x); return rc; }
    }
  } else {
    if ((rc = ppsrt_io_take(c, PPSRT_XFER_ACT, mb, stage - 1, &x, &got))) return rc;
    if (got != bytes) {
      be->free(be, x);
      return PPSRT_FAIL(PPSRT_E_USAGE, "mlp: input of F(%d, %d) has %zu bytes, expected %zu", mb, stage, got, bytes);
    }
  }
  if ((rc = ppsrt_act_adopt(c, mb, stage, x, bytes, NULL))) { be->free(be, x); return rc; }
  for (int l = 0; l < p->L; l++) {
    void *h, *y;
    if ((rc = ppsrt_act_save(c, mb, stage, bytes, &h, NULL))) return rc;
    if (!nc) {
      if ((rc = be->gemm(be, PPSRT_STREAM_COMPUTE, 0, 0, N, H, H, 1.0f, x, be->act_dtype, H, ly[l].w->param.data,
                         be->act_dtype, H, 0.0f, h, be->act_dtype, H)))
        return rc;
    }
    if (l + 1 < p->L) {
      if ((rc = ppsrt_act_save(c, mb, stage, bytes, &y, NULL))) return rc;
    } else if ((rc = be->alloc(be, bytes, &y))) {
      return rc;
    }
    /* h += b and y = gelu(h) in one kernel (h is kept for gelu') */
    if (!nc && (rc = be->add_bias_gelu(be, PPSRT_STREAM_COMPUTE, y, h, h, ly[l].b->param.data, N, H))) {
      if (l + 1 == p->L) be->free(be, y);
      return rc;
    }
    x = y;
    if (ppsrt_layer_end(c, mb, stage, l)) return 0;   /* a partial rebuild ends here (model.h) */
  }
  if (stage + 1 < m->cfg.nstage) {
    if ((rc = ppsrt_io_put(c, PPSRT_XFER_ACT, mb, stage, x, bytes))) be->free(be, x);
    return rc;
  }
  /* last stage: loss = mean((y - t)^2) / nmb, gradient 2 (y - t) / (n * nmb), on the host */
  if (!nc) {
    float *y = p->host, *t = p->host2;
    if ((rc = be->download_f32(be, y, T(x, n, be->act_dtype)))) { be->free(be, x); return rc; }
    synth(m, 1, mb, t);
    double s = 0, scale = 2.0 / ((double)n * m->cfg.nmb);
    for (size_t i = 0; i < n; i++) {
      double d = (double)y[i] - t[i];
      s += d * d;
      y[i] = (float)(d * scale);
    }
    if (!ppsrt_recomputing(c)) p->loss += s / ((double)n * m->cfg.nmb);   /* counted by the first F only */
    if ((rc = be->upload_f32(be, T(x, n, be->act_dtype), y))) { be->free(be, x); return rc; }
  }
  if ((rc = ppsrt_io_put(c, PPSRT_XFER_GRAD, mb, m->cfg.nstage, x, bytes))) be->free(be, x);
  return rc;
}

static int mlp_b(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage) {
  mlp *p = m->impl;
  ppsrt_backend *be = m->be;
  int nc = m->cfg.no_compute, rc, H = p->H, N = p->N;
  size_t n = (size_t)N * H, bytes = n * p->es, got;
  if (stage < 0 || stage >= m->cfg.nstage || p->local[stage] < 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "mlp: B(%d, %d): this device does not hold stage %d", mb, stage, stage);
  mlp_layer *ly = &p->layers[(size_t)p->local[stage] * p->L];
  void *dy;
  if ((rc = ppsrt_io_take(c, PPSRT_XFER_GRAD, mb, stage + 1, &dy, &got))) return rc;
  for (int l = p->L - 1; l >= 0; l--) {
    void *h, *dx;
    if ((rc = ppsrt_act_get(c, mb, stage, 2 * l + 1, &h))) { be->free(be, dy); return rc; }
    if ((rc = be->alloc(be, bytes, &dx))) { be->free(be, dy); return rc; }
    if (!nc) {
      /* dh_l = dy * gelu'(h_l), written over h_l (kept for W): no copy */
      if ((rc = be->gelu_bwd(be, PPSRT_STREAM_COMPUTE, h, dy, h, n)) ||
          (rc = be->gemm(be, PPSRT_STREAM_COMPUTE, 0, 1, N, H, H, 1.0f, h, be->act_dtype, H, ly[l].w->param.data,
                         be->act_dtype, H, 0.0f, dx, be->act_dtype, H))) {
        be->free(be, dy); be->free(be, dx);
        return rc;
      }
    }
    be->free(be, dy);
    dy = dx;
  }
  if (stage == 0) { be->free(be, dy); return 0; }
  if ((rc = ppsrt_io_put(c, PPSRT_XFER_GRAD, mb, stage, dy, bytes))) be->free(be, dy);
  return rc;
}

static int mlp_w(ppsrt_model *m, ppsrt_ctx *c, int mb, int stage) {
  mlp *p = m->impl;
  ppsrt_backend *be = m->be;
  int rc, H = p->H, N = p->N;
  if (stage < 0 || stage >= m->cfg.nstage || p->local[stage] < 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "mlp: W(%d, %d): this device does not hold stage %d", mb, stage, stage);
  mlp_layer *ly = &p->layers[(size_t)p->local[stage] * p->L];
  for (int l = 0; l < p->L && !m->cfg.no_compute; l++) {
    void *x, *dh;
    if ((rc = ppsrt_act_get(c, mb, stage, 2 * l, &x)) || (rc = ppsrt_act_get(c, mb, stage, 2 * l + 1, &dh)))
      return rc;
    if ((rc = be->gemm(be, PPSRT_STREAM_COMPUTE, 1, 0, H, H, N, 1.0f, x, be->act_dtype, H, dh, be->act_dtype, H,
                       1.0f, ly[l].w->grad, PPSRT_F32, H)) ||
        (rc = be->bias_grad(be, PPSRT_STREAM_COMPUTE, ly[l].b->grad, dh, N, H)))
      return rc;
  }
  return ppsrt_act_release(c, mb, stage);
}

static int mlp_begin(ppsrt_model *m, ppsrt_ctx *c, int it) {
  ((mlp *)m->impl)->loss = 0;
  return 0;
}

static int mlp_end(ppsrt_model *m, ppsrt_ctx *c, double *loss) {
  *loss = ((mlp *)m->impl)->loss;
  return 0;
}

static void mlp_destroy(ppsrt_model *m) {
  if (!m) return;
  mlp *p = m->impl;
  ppsrt_backend *be = m->be;
  for (int k = 0; k < m->nparams; k++) ppsrt_param_free(be, &m->params[k]);
  free(m->params);
  if (p) { free(p->local); free(p->layers); free(p->host); free(p->host2); free(p); }
  free(m);
}

static int param_init(ppsrt_model *m, ppsrt_param *q, const char *name, int stage, size_t n, float scale) {
  ppsrt_backend *be = m->be;
  int rc;
  q->name = strdup(name);
  q->stage = stage; q->numel = n; q->offset = 0; q->full_numel = n;
  if (!q->name) return PPSRT_FAIL(PPSRT_E_NOMEM, "mlp: out of host memory");
  if ((rc = ppsrt_param_alloc(be, &m->cfg, q))) return rc;
  float *h = malloc(n * sizeof *h);
  if (!h) return PPSRT_FAIL(PPSRT_E_NOMEM, "mlp: out of host memory");
  uint64_t stream = ppsrt_hash_str(name);
  for (size_t i = 0; i < n; i++) h[i] = scale * ppsrt_rand_uniform(m->cfg.seed, stream, i);
  rc = ppsrt_param_set(be, q, h);
  free(h);
  return rc;
}

double ppsrt_mlp_pass_flops(const ppsrt_model_config *cfg, int kind, int stage) {
  (void)stage;   /* every stage has the same layers */
  double f1 = 2.0 * cfg->seq * cfg->micro_batch * cfg->hidden * cfg->hidden * cfg->layers_per_stage;
  switch (kind) {
  case PPSRT_OP_F: case PPSRT_OP_B: case PPSRT_OP_W: return f1;
  case PPSRT_OP_BW: return 2 * f1;
  default: return 0;
  }
}

int ppsrt_mlp_check_config(const ppsrt_model_config *cfg) {
  if (cfg->hidden <= 0 || cfg->seq <= 0 || cfg->micro_batch <= 0 || cfg->layers_per_stage <= 0 || cfg->nstage <= 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "mlp: sizes must be positive (hidden %d, seq %d, micro-batch %d, "
                      "layers-per-stage %d)", cfg->hidden, cfg->seq, cfg->micro_batch, cfg->layers_per_stage);
  if ((int64_t)cfg->seq * cfg->micro_batch > INT32_MAX / cfg->hidden)   /* by division: the product could overflow int64 */
    return PPSRT_FAIL(PPSRT_E_USAGE, "mlp: --seq %d x --micro-batch %d tokens x --hidden %d is over %d elements per tensor",
                      cfg->seq, cfg->micro_batch, cfg->hidden, INT32_MAX);
  return PPSRT_OK;
}

int ppsrt_mlp_create(const ppsrt_model_config *cfg, ppsrt_backend *be, int device, const int *stages,
                     int nstages, ppsrt_model **out) {
  *out = NULL;
  int bad = ppsrt_mlp_check_config(cfg);
  if (bad) return bad;
  ppsrt_model *m = calloc(1, sizeof *m);
  mlp *p = calloc(1, sizeof *p);
  if (!m || !p) { free(m); free(p); return PPSRT_FAIL(PPSRT_E_NOMEM, "mlp: out of host memory"); }
  m->name = "mlp"; m->be = be; m->cfg = *cfg; m->impl = p;
  m->xfer_bytes = mlp_xfer_bytes; m->act_bytes = mlp_act_bytes;
  m->f = mlp_f; m->b = mlp_b; m->w = mlp_w; m->bw = NULL;
  m->begin_iteration = mlp_begin; m->end_iteration = mlp_end; m->destroy = mlp_destroy;
  p->H = cfg->hidden; p->N = cfg->seq * cfg->micro_batch; p->L = cfg->layers_per_stage;
  p->es = ppsrt_dtype_size(be->act_dtype);
  m->flops_f = ppsrt_mlp_pass_flops(cfg, PPSRT_OP_F, 0);
  m->flops_b = ppsrt_mlp_pass_flops(cfg, PPSRT_OP_B, 0);
  m->flops_w = ppsrt_mlp_pass_flops(cfg, PPSRT_OP_W, 0);
  size_t n = (size_t)p->N * p->H;
  p->local = malloc((size_t)cfg->nstage * sizeof *p->local);
  p->layers = calloc((size_t)(nstages ? nstages : 1) * p->L, sizeof *p->layers);
  m->params = calloc((size_t)(nstages ? nstages : 1) * p->L * 2, sizeof *m->params);
  p->host = malloc(n * sizeof(float));
  p->host2 = malloc(n * sizeof(float));
  int rc = 0;
  if (!p->local || !p->layers || !m->params || !p->host || !p->host2) {
    rc = PPSRT_FAIL(PPSRT_E_NOMEM, "mlp: out of host memory");
    goto fail;
  }
  for (int s = 0; s < cfg->nstage; s++) p->local[s] = -1;
  float scale = sqrtf(3.0f / (float)p->H);
  for (int k = 0; k < nstages; k++) {
    int s = stages[k];
    if (s < 0 || s >= cfg->nstage) { rc = PPSRT_FAIL(PPSRT_E_USAGE, "mlp: stage %d out of range", s); goto fail; }
    p->local[s] = k;
    for (int l = 0; l < p->L; l++) {
      char name[64];
      ppsrt_param *w = &m->params[m->nparams++];
      snprintf(name, sizeof name, "s%d.l%d.w", s, l);
      if ((rc = param_init(m, w, name, s, (size_t)p->H * p->H, scale))) goto fail;
      ppsrt_param *b = &m->params[m->nparams++];
      snprintf(name, sizeof name, "s%d.l%d.b", s, l);
      if ((rc = param_init(m, b, name, s, (size_t)p->H, 0.1f))) goto fail;
      b->no_decay = 1;   /* a bias: --weight-decay leaves it (model.h) */
      p->layers[(size_t)k * p->L + l] = (mlp_layer){w, b};
    }
  }
  *out = m;
  return 0;
fail:
  mlp_destroy(m);
  return rc;
}
