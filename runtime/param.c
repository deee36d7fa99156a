/* param.c: a parameter tensor's buffers, as the models allocate them: the weights in the
 * activation dtype (param), the F32 master weights (param itself when that is F32), the
 * F32 gradient and Adam's two moments.
 *
 * With --distributed-optimizer over D replicas (cfg->distopt, cfg->nrep = D > 1) the
 * optimizer state is sharded as Megatron-LM's distributed optimizer (ZeRO stage 1) does.
 * The model allocates every tensor's weights (and F32 master) whole here, and no
 * gradient or moments; once the model exists, replica.c lays
 * each stage's tensors out in two contiguous buffers of the stage (weights and
 * gradients, the same element offsets, padded to a multiple of D), and
 * ppsrt_param_shard moves each tensor into them: its weights and gradient become views
 * of the buffers, and its F32 master (when it is not the weights) and m and v shrink to
 * the replica's shard, the intersection of the tensor's elements with the replica's
 * 1/D of the buffer (model.h). The weights and the gradient stay whole on every replica
 * (the passes need them). Per parameter that saves (1 - 1/D) of 8 bytes (F32 weights,
 * where the master is the weights) or of 12 bytes (BF16 weights: master, m, v). */
#include "config.h"
#include "rt.h"
#include <stdlib.h>
#include <string.h>

int ppsrt_param_alloc(ppsrt_backend *be, const ppsrt_model_config *cfg, ppsrt_param *q) {
  size_t n = q->numel, es = ppsrt_dtype_size(be->act_dtype), nw = n ? n : 1;
  int rc;
  q->chunk = 0; q->sh_lo = 0; q->sh_n = n;
  if ((rc = be->alloc(be, nw * es, &q->param.data))) return rc;
  q->param.numel = n; q->param.dtype = be->act_dtype;
  if (be->act_dtype == PPSRT_F32) q->master = q->param.data;
  else if ((rc = be->alloc(be, nw * sizeof(float), (void **)&q->master))) return rc;
  /* --distributed-optimizer: the gradient and the moments come with the shard
   * (ppsrt_param_shard), never whole */
  if (cfg->distopt && cfg->nrep * (cfg->cp > 1 ? cfg->cp : 1) > 1) return 0;   /* (--context-parallel: D x C shards) */
  if ((rc = be->alloc(be, nw * sizeof(float), (void **)&q->grad)) ||
      (rc = be->alloc(be, nw * sizeof(float), (void **)&q->m)) ||
      (rc = be->alloc(be, nw * sizeof(float), (void **)&q->v)) ||
      (rc = be->memset0(be, PPSRT_STREAM_COMPUTE, q->grad, nw * sizeof(float))) ||
      (rc = be->memset0(be, PPSRT_STREAM_COMPUTE, q->m, nw * sizeof(float))))
    return rc;
  return be->memset0(be, PPSRT_STREAM_COMPUTE, q->v, nw * sizeof(float));
}

int ppsrt_param_shard(ppsrt_backend *be, ppsrt_param *q, void *w, float *grad, size_t off, size_t C, int r) {
  size_t n = q->numel, es = ppsrt_dtype_size(q->param.dtype);
  size_t lo = (size_t)r * C > off ? (size_t)r * C : off, hi = (size_t)(r + 1) * C < off + n ? (size_t)(r + 1) * C : off + n;
  size_t sh_lo = hi > lo ? lo - off : 0, sh_n = hi > lo ? hi - lo : 0, ns = sh_n ? sh_n : 1;
  void *pw = (char *)w + off * es;
  float *master = NULL, *m = NULL, *v = NULL;
  int alias = q->master == q->param.data, rc = 0;
  if ((!alias && (rc = be->alloc(be, ns * sizeof(float), (void **)&master))) ||
      (rc = be->alloc(be, ns * sizeof(float), (void **)&m)) || (rc = be->alloc(be, ns * sizeof(float), (void **)&v)) ||
      (rc = be->memcpy_async(be, PPSRT_STREAM_COMPUTE, pw, q->param.data, n * es, 0)) ||
      (!alias && sh_n && (rc = be->memcpy_async(be, PPSRT_STREAM_COMPUTE, master, q->master + sh_lo, sh_n * sizeof(float), 0))) ||
      (rc = be->memset0(be, PPSRT_STREAM_COMPUTE, m, ns * sizeof(float))) ||
      (rc = be->memset0(be, PPSRT_STREAM_COMPUTE, v, ns * sizeof(float))) ||
      (rc = be->stream_sync(be, PPSRT_STREAM_COMPUTE))) {
    if (master) be->free(be, master);
    if (m) be->free(be, m);
    if (v) be->free(be, v);
    return rc;
  }
  if (!alias) be->free(be, q->master);
  if (!q->param_view) be->free(be, q->param.data);
  if (q->grad && !q->grad_view) be->free(be, q->grad);
  if (q->m) be->free(be, q->m);
  if (q->v) be->free(be, q->v);
  q->param.data = pw; q->param_view = 1;
  q->master = alias ? pw : master;
  q->grad = grad + off; q->grad_view = 1;
  q->m = m; q->v = v;
  q->chunk = C; q->sh_lo = sh_lo; q->sh_n = sh_n; q->flat_off = off;
  return 0;
}

int ppsrt_param_set(ppsrt_backend *be, ppsrt_param *q, const float *h) {
  int rc = be->upload_f32(be, q->param, h);
  if (!rc && q->master != q->param.data)
    rc = be->upload_f32(be, (ppsrt_tensor){q->master, q->sh_n, PPSRT_F32}, h + q->sh_lo);
  return rc;
}

void ppsrt_param_free(ppsrt_backend *be, ppsrt_param *q) {
  if (q->master && q->master != q->param.data) be->free(be, q->master);
  if (q->param.data && !q->param_view) be->free(be, q->param.data);
  if (q->grad && !q->grad_view) be->free(be, q->grad);
  if (q->m) be->free(be, q->m);
  if (q->v) be->free(be, q->v);
  q->master = q->grad = q->m = q->v = NULL;
  q->param.data = NULL;
  free((char *)q->name);
  q->name = NULL;
}
