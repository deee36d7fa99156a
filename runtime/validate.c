/* validate.c: --val-data: the validation loss, every --val-every iterations and after
 * the last. A one-device model holding every stage (like the --check reference) takes
 * the current weights of every device (vocabulary shards assembled
 * into whole tensors), runs the forward passes of one iteration's microbatches on the
 * first nmb x micro_batch sequences of the validation file (the same ones every
 * time), and reports their mean loss. No backward, no optimizer: training is not
 * touched. The weights reach device 0 through all-reduces of the transport (each
 * tensor zero-filled, each device adding the elements it holds), so it works on every
 * transport (threads, MPI, NCCL), one process or many; device 0 needs the memory of
 * the whole model for it, as the --check reference does. Under --data-parallel and
 * --tensor-parallel every pipeline's device 0 computes the same loss (the slices of a
 * tensor-parallel group are put together by a sum over the group). */
#include "config.h"
#include "rt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NAMEF = 64 };   /* a parameter name travels as up to 63 floats, one per character */

/* Every device calls it; device 0 computes the loss. */
static int val_loss(ppsrt_run *run, ppsrt_ctx *c, double *loss) {
  ppsrt_backend *be = c->be;
  ppsrt_ctx rx;
  int rc = 0, root = c->rank == 0;
  memset(&rx, 0, sizeof rx);
  ppsrt_model_config cfg = c->model->cfg;
  cfg.ndev = 1; cfg.vocab_mode = 0; cfg.data = run->val_tokens; cfg.data0 = 0; cfg.distopt = 0;
  cfg.tp = 1; cfg.tp_rank = 0; cfg.sp = 0; cfg.cp = 1; cfg.cp_rank = 0;   /* whole layers and sequences, every row */
  cfg.hidden_dropout = cfg.attention_dropout = 0;   /* evaluation: no dropout (Megatron-LM's eval mode) */
  int *all = malloc((size_t)cfg.nstage * sizeof *all);
  float *buf = NULL, *list = NULL, hdr[2] = {0, 0};
  if (!all) return PPSRT_FAIL(PPSRT_E_NOMEM, "--val-data: out of host memory");
  for (int s = 0; s < cfg.nstage; s++) all[s] = s;
  /* device 0's model of every stage says which tensors to gather */
  if (root && !(rc = rt_ref_ctx_init(&rx, run, c))) {
    rx.model = NULL;
    rc = run->create(&cfg, be, 0, all, cfg.nstage, &rx.model);
  }
  int n = root && !rc ? rx.model->nparams : 0;
  hdr[0] = root ? (rc ? -1.0f : (float)n) : 0;
  int rc2 = rt_allreduce_host(c, hdr, 2, PPSRT_SUM);
  if (rc2 && !rc) rc = rc2;
  if (!rc && hdr[0] < 0) rc = PPSRT_FAIL(PPSRT_E_COMM, "stopped: device 0 could not build the validation model");
  n = (int)hdr[0];
  if (!rc && !(list = calloc((size_t)n * (NAMEF + 2) + 1, sizeof *list))) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--val-data: out of host memory");
  if (!rc && root)
    for (int j = 0; j < n; j++) {
      const ppsrt_param *r = &rx.model->params[j];
      float *e = list + (size_t)j * (NAMEF + 2);
      for (int k = 0; k < NAMEF - 1 && r->name[k]; k++) e[k] = (float)(unsigned char)r->name[k];
      e[NAMEF] = (float)(r->numel >> 20);
      e[NAMEF + 1] = (float)(r->numel & 0xfffff);
    }
  if (!rc) rc = rt_allreduce_host(c, list, (size_t)n * (NAMEF + 2), PPSRT_SUM);
  /* each tensor: every device adds the elements it holds (each element is held by
     one device, so the sum is exact), device 0 takes the whole; --tensor-parallel: a
     rank's slice goes to its elements of the whole tensor, a tensor every rank holds
     whole is added by tensor rank 0 only, and the sum goes on over the group */
  for (int j = 0; j < n && !rc; j++) {
    const float *e = list + (size_t)j * (NAMEF + 2);
    char name[NAMEF];
    int k = 0;
    for (; k < NAMEF - 1 && e[k] != 0; k++) name[k] = (char)(int)e[k];
    name[k] = 0;
    size_t numel = ((size_t)e[NAMEF] << 20) + (size_t)e[NAMEF + 1];
    free(buf);
    if (!(buf = calloc(numel ? numel : 1, sizeof *buf))) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--val-data: out of host memory"); break; }
    size_t got = 0;
    ppsrt_model *dm = c->model;
    for (int q = 0; q < dm->nparams && !rc; q++) {
      ppsrt_param *p = &dm->params[q];
      size_t off = p->full_numel ? p->offset : 0;
      if (strcmp(p->name, name) || off + p->numel > numel || p->shared) continue;   /* (a copy: the original's) */
      /* (a master sharded by --distributed-optimizer: the weights themselves, which the
         forward passes read) */
      ppsrt_tensor w = p->chunk && p->master != p->param.data ? p->param : (ppsrt_tensor){p->master, p->numel, PPSRT_F32};
      if (c->tp_rank && !p->tp_split) continue;
      if (!(rc = be->stream_sync(be, PPSRT_STREAM_COMPUTE)) && !p->tp_split) rc = be->download_f32(be, buf + off, w);
      else if (!rc) {
        float *s = malloc((p->numel ? p->numel : 1) * sizeof *s);
        if (!s) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--val-data: out of host memory");
        else if (!(rc = be->download_f32(be, s, w)))
          for (size_t i = 0; i < p->numel; i++) buf[ppsrt_param_full_index(p, i)] = s[i];
        free(s);
      }
      got += p->numel;
    }
    float cnt[2] = {(float)(got >> 20), (float)(got & 0xfffff)};
    if (!rc) rc = rt_allreduce_host(c, cnt, 2, PPSRT_SUM);
    if (!rc) rc = rt_allreduce_host(c, buf, numel, PPSRT_SUM);
    if (!rc && c->ttr) rc = rt_allreduce_host_on(c, c->ttr, c->tp_rank, cnt, 2, PPSRT_SUM);
    if (!rc && c->ttr) rc = rt_allreduce_host_on(c, c->ttr, c->tp_rank, buf, numel, PPSRT_SUM);
    size_t total = ((size_t)cnt[0] << 20) + (size_t)cnt[1];
    if (!rc && total != numel)
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "--val-data: parameter %s: the devices hold %zu of its %zu elements", name, total, numel);
    if (!rc && root) {
      ppsrt_param *r = &rx.model->params[j];
      rc = be->upload_f32(be, r->param, buf);
      if (!rc && r->master != r->param.data) rc = be->upload_f32(be, (ppsrt_tensor){r->master, r->numel, PPSRT_F32}, buf);
    }
  }
  /* forward passes only; each (mb, stage)'s saved activations are released at once */
  if (!rc && root) {
    ppsrt_model *m = rx.model;
    if (m->begin_iteration) rc = m->begin_iteration(m, &rx, 0);
    for (int i = 0; i < cfg.nmb && !rc; i++)
      for (int s = 0; s < cfg.nstage && !rc; s++)
        if (!(rc = m->f(m, &rx, i, s))) rc = ppsrt_act_release(&rx, i, s);
    rt_box_clear(&rx);
    *loss = 0;
    if (!rc && m->end_iteration) rc = m->end_iteration(m, &rx, loss);
  }
  free(buf);
  free(list);
  free(all);
  if (root) {
    if (rx.model) rt_store_leftover(&rx, &(int){0}, &(int){0});
    if (rx.box) rt_store_fini(&rx.store, be);
    if (rx.model) rx.model->destroy(rx.model);
    free(rx.box);
    free(rx.bcol);
  }
  return rc;
}

int rt_validate_step(ppsrt_ctx *c, int it) {
  ppsrt_run *run = c->run;
  const rt_opts *o = &run->o;
  if (!run->val_tokens || !((it + 1) % o->val_every == 0 || it + 1 == o->iterations)) return 0;
  int rc;
  /* every device has finished its optimizer step before the weights are read (and, with
   * --distributed-optimizer on a GPU, its weights' all-gathers: replica.c) */
  if ((rc = rt_replica_weights_wait(c, 0, 1)) || (rc = c->tr->barrier(c->tr, c->rank))) return rc;
  double loss = 0;
  rc = val_loss(run, c, &loss);
  if (c->rank == 0 && c->grank == 0 && c->tp_rank == 0) {
    if (!rc) {
      run->val_loss[it] = loss;
      if (!o->json) {
        pthread_mutex_lock(&run->print_lock);
        fprintf(run->out, "val  %ld/%ld  loss %.7f  (%s)\n", run->step0 + it + 1, run->step0 + o->iterations, loss,
                o->val_data);
        fflush(run->out);
        pthread_mutex_unlock(&run->print_lock);
      }
    }
  }
  int rc2 = c->tr->barrier(c->tr, c->rank);
  return rc ? rc : rc2;
}
