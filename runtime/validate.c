/* validate.c: --val-data: the validation loss, every --val-every iterations and after
 * the last. A one-device model holding every stage (like the --check reference) takes
 * the current weights of every device of this process (vocabulary shards assembled
 * into whole tensors), runs the forward passes of one iteration's microbatches on the
 * first nmb x micro_batch sequences of the validation file (the same ones every
 * time), and reports their mean loss. No backward, no optimizer: training is not
 * touched. One process must hold every device (the threads transport). */
#include "config.h"
#include "rt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int val_loss(ppsrt_run *run, ppsrt_ctx *c, double *loss) {
  ppsrt_backend *be = c->be;
  ppsrt_ctx rx;
  int rc;
  if ((rc = rt_ref_ctx_init(&rx, run, c))) return rc;
  ppsrt_model_config cfg = c->model->cfg;
  cfg.ndev = 1; cfg.vocab_mode = 0; cfg.data = run->val_tokens; cfg.step0 = 0;
  int *all = malloc((size_t)cfg.nstage * sizeof *all);
  float *buf = NULL;
  if (!all) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--val-data: out of host memory"); goto out; }
  for (int s = 0; s < cfg.nstage; s++) all[s] = s;
  if ((rc = run->create(&cfg, be, 0, all, cfg.nstage, &rx.model))) goto out;
  ppsrt_model *m = rx.model;
  /* the current weights, from every device of this process */
  for (int j = 0; j < m->nparams && !rc; j++) {
    ppsrt_param *r = &m->params[j];
    free(buf);
    if (!(buf = malloc((r->numel ? r->numel : 1) * sizeof *buf))) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--val-data: out of host memory"); break; }
    size_t got = 0;
    for (int l = 0; l < run->nlocal && !rc; l++) {
      ppsrt_ctx *d = &run->ctx[l];
      for (int k = 0; k < d->model->nparams && !rc; k++) {
        ppsrt_param *p = &d->model->params[k];
        size_t off = p->full_numel ? p->offset : 0;
        if (strcmp(p->name, r->name) || off + p->numel > r->numel) continue;
        if (!(rc = d->be->stream_sync(d->be, PPSRT_STREAM_COMPUTE)))
          rc = d->be->download_f32(d->be, buf + off, (ppsrt_tensor){p->master, p->numel, PPSRT_F32});
        got += p->numel;
      }
    }
    if (!rc && got != r->numel)
      rc = PPSRT_FAIL(PPSRT_E_USAGE, "--val-data: parameter %s: %zu of %zu elements found on this process's devices",
                      r->name, got, r->numel);
    if (!rc) rc = be->upload_f32(be, r->param, buf);
    if (!rc && r->master != r->param.data) rc = be->upload_f32(be, (ppsrt_tensor){r->master, r->numel, PPSRT_F32}, buf);
  }
  /* forward passes only; each (mb, stage)'s saved activations are released at once */
  if (!rc && m->begin_iteration) rc = m->begin_iteration(m, &rx, 0);
  for (int i = 0; i < cfg.nmb && !rc; i++)
    for (int s = 0; s < cfg.nstage && !rc; s++)
      if (!(rc = m->f(m, &rx, i, s))) rc = ppsrt_act_release(&rx, i, s);
  rt_box_clear(&rx);
  *loss = 0;
  if (!rc && m->end_iteration) rc = m->end_iteration(m, &rx, loss);
out:
  free(buf);
  free(all);
  if (rx.model) rt_store_leftover(&rx, &(int){0}, &(int){0});
  rt_store_fini(&rx.store, be);
  if (rx.model) rx.model->destroy(rx.model);
  free(rx.box);
  free(rx.bcol);
  return rc;
}

int rt_validate_step(ppsrt_ctx *c, int it) {
  ppsrt_run *run = c->run;
  const rt_opts *o = &run->o;
  if (!run->val_tokens || !((it + 1) % o->val_every == 0 || it + 1 == o->iterations)) return 0;
  int rc;
  /* every device has finished its optimizer step before the weights are read */
  if ((rc = c->tr->barrier(c->tr, c->rank))) return rc;
  if (c == &run->ctx[0]) {
    double loss = 0;
    rc = val_loss(run, c, &loss);
    if (!rc) {
      run->val_loss[it] = loss;
      if (!o->json) {
        pthread_mutex_lock(&run->print_lock);
        fprintf(run->out, "val  %d/%d  loss %.7f  (%s)\n", it + 1, o->iterations, loss, o->val_data);
        fflush(run->out);
        pthread_mutex_unlock(&run->print_lock);
      }
    }
  }
  int rc2 = c->tr->barrier(c->tr, c->rank);
  return rc ? rc : rc2;
}
