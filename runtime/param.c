/* param.c: a parameter tensor's buffers, as the models allocate them: the weights in the
 * activation dtype (param), the F32 master weights (param itself when that is F32), the
 * F32 gradient and Adam's two moments.
 *
 * With --distributed-optimizer over D replicas (cfg->distopt, cfg->nrep = D > 1) the
 * optimizer state is sharded as Megatron-LM's distributed optimizer (ZeRO stage 1) does:
 * replica r keeps m, v and a separate F32 master only for its shard, the elements
 * [r chunk, min(numel, (r + 1) chunk)) with chunk = ceil(numel / D). The weights and the
 * gradient stay whole on every replica (the passes need them), padded to D x chunk
 * elements so that the gradient's reduce-scatter and the weights' all-gather move equal
 * blocks (replica.c). Per parameter that saves (1 - 1/D) of 8 bytes (F32 weights, where
 * the master is the weights) or of 12 bytes (BF16 weights: master, m, v). */
#include "config.h"
#include "rt.h"
#include <stdlib.h>
#include <string.h>

int ppsrt_param_alloc(ppsrt_backend *be, const ppsrt_model_config *cfg, ppsrt_param *q) {
  size_t n = q->numel, es = ppsrt_dtype_size(be->act_dtype);
  int D = cfg->distopt && cfg->nrep > 1 ? cfg->nrep : 1, r = D > 1 ? cfg->replica : 0, rc;
  q->chunk = D > 1 ? (n + (size_t)D - 1) / (size_t)D : 0;
  size_t whole = D > 1 ? q->chunk * (size_t)D : n;   /* param and grad */
  q->sh_lo = D > 1 ? (size_t)r * q->chunk : 0;
  if (q->sh_lo > n) q->sh_lo = n;
  q->sh_n = D > 1 ? (n - q->sh_lo < q->chunk ? n - q->sh_lo : q->chunk) : n;
  size_t nw = whole ? whole : 1, ns = q->sh_n ? q->sh_n : 1;
  if ((rc = be->alloc(be, nw * es, &q->param.data))) return rc;
  q->param.numel = n; q->param.dtype = be->act_dtype;
  if (be->act_dtype == PPSRT_F32) q->master = q->param.data;
  else if ((rc = be->alloc(be, ns * sizeof(float), (void **)&q->master))) return rc;
  if ((rc = be->alloc(be, nw * sizeof(float), (void **)&q->grad)) ||
      (rc = be->alloc(be, ns * sizeof(float), (void **)&q->m)) ||
      (rc = be->alloc(be, ns * sizeof(float), (void **)&q->v)) ||
      (rc = be->memset0(be, PPSRT_STREAM_COMPUTE, q->grad, nw * sizeof(float))) ||
      (rc = be->memset0(be, PPSRT_STREAM_COMPUTE, q->m, ns * sizeof(float))) ||
      (rc = be->memset0(be, PPSRT_STREAM_COMPUTE, q->v, ns * sizeof(float))))
    return rc;
  /* the padding of the weights is never read by a pass, but is moved by the all-gather */
  if (whole > n) rc = be->memset0(be, PPSRT_STREAM_COMPUTE, (char *)q->param.data + n * es, (whole - n) * es);
  return rc;
}

int ppsrt_param_set(ppsrt_backend *be, ppsrt_param *q, const float *h) {
  int rc = be->upload_f32(be, q->param, h);
  if (!rc && q->master != q->param.data)
    rc = be->upload_f32(be, (ppsrt_tensor){q->master, q->sh_n, PPSRT_F32}, h + q->sh_lo);
  return rc;
}

void ppsrt_param_free(ppsrt_backend *be, ppsrt_param *q) {
  if (q->master && q->master != q->param.data) be->free(be, q->master);
  if (q->param.data) be->free(be, q->param.data);
  if (q->grad && !q->grad_view) be->free(be, q->grad);
  if (q->m) be->free(be, q->m);
  if (q->v) be->free(be, q->v);
  q->master = q->grad = q->m = q->v = NULL;
  q->param.data = NULL;
  free((char *)q->name);
  q->name = NULL;
}
