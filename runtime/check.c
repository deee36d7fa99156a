/* check.c: the --check reference harness. After the first pipelined iteration (before
 * the optimizer step) each rank builds the same model unpipelined on one device (every
 * stage, no vocabulary partitioning, the same seed: the same initial weights and
 * data; after --load, the checkpoint's weights), runs every microbatch in order (F over all stages, then BW from the last
 * stage down), and compares the loss and every weight gradient this rank holds with
 * the reference's (a vocabulary shard against its slice of the full tensor):
 *
 *     |a - b| <= atol + rtol * |ref|,   atol = 1e-5, rtol = 1e-3 (F32 on CPU)
 *                                       atol = 1e-2, rtol = 5e-2 (BF16 activations)
 *
 * printing the tolerance, the first differing values and the max difference. What it
 * does not: it does not check timing or memory (cli.c compares measured and predicted
 * memory), and it never exits; the caller turns mismatches into exit status 1. */
#include "config.h"
#include "rt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Runs one reference iteration of model `ref` in context `rc_`; returns its loss. */
static int run_reference(ppsrt_ctx *rx, double *loss) {
  ppsrt_model *m = rx->model;
  int S = m->cfg.nstage, rc;
  if (m->begin_iteration && (rc = m->begin_iteration(m, rx, 0))) return rc;
  for (int i = 0; i < m->cfg.nmb; i++) {
    for (int s = 0; s < S; s++)
      if ((rc = m->f(m, rx, i, s))) return rc;
    for (int s = S - 1; s >= 0; s--) {
      if (m->bw) rc = m->bw(m, rx, i, s);
      else if (!(rc = m->b(m, rx, i, s))) rc = m->w(m, rx, i, s);
      if (rc) return rc;
    }
  }
  rt_box_clear(rx);
  *loss = 0;
  if (m->end_iteration && (rc = m->end_iteration(m, rx, loss))) return rc;
  return 0;
}

static int download(ppsrt_backend *be, float *dst, float *src, size_t n) {
  return be->download_f32(be, dst, (ppsrt_tensor){src, n, PPSRT_F32});
}

int rt_check_gradients(ppsrt_ctx *c, double pipeline_loss, int *mismatch) {
  ppsrt_run *run = c->run;
  ppsrt_model *pm = c->model;
  ppsrt_backend *be = c->be;
  int bf16 = be->act_dtype != PPSRT_F32;
  double atol = bf16 ? 1e-2 : 1e-5, rtol = bf16 ? 5e-2 : 1e-3;
  if (c->rank == run->first_rank) { run->check_atol = atol; run->check_rtol = rtol; } /* one writer: the run is shared */
  *mismatch = 0;

  ppsrt_ctx rx;
  int rc;
  if ((rc = rt_ref_ctx_init(&rx, run, c))) return rc;
  ppsrt_model_config cfg = pm->cfg;
  cfg.ndev = 1; cfg.vocab_mode = 0;
  cfg.nmb *= run->nrep > 1 ? run->nrep : 1;   /* --data-parallel: one device at the global batch */
  cfg.mb0 = 0; cfg.nrep = 1;
  int *all = malloc((size_t)cfg.nstage * sizeof *all);
  float *a = NULL, *b = NULL;
  FILE *f = NULL;
  double ref_loss = 0;
  if (!all) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--check: out of host memory"); goto out; }
  for (int s = 0; s < cfg.nstage; s++) all[s] = s;
  if ((rc = run->create(&cfg, be, 0, all, cfg.nstage, &rx.model))) goto out;
  if (run->ck && (rc = rt_ckpt_load(&rx, run->ck))) goto out;   /* --load: the same weights */
  if ((rc = run_reference(&rx, &ref_loss))) goto out;

  /* this rank's lines go to its own buffer; interp.c prints every rank's in order */
  size_t textlen = 0;
  free(c->check_text);
  c->check_text = NULL;
  f = open_memstream(&c->check_text, &textlen);
  if (!f) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--check: out of host memory"); goto out; }
  pthread_mutex_lock(&run->print_lock);
  int loss_bad = 0;
  if (c->rank == 0) {
    double d = fabs(pipeline_loss - ref_loss);
    /* the loss is summed over ranks in F32: a slightly looser bound */
    loss_bad = !(d <= 10 * atol + rtol * fabs(ref_loss));
    if (!run->o.json)
      fprintf(f, "check: loss %.9g, reference %.9g, |diff| %.3g (tolerance |a-b| <= %g + %g*|ref|): %s\n",
              pipeline_loss, ref_loss, d, 10 * atol, rtol, loss_bad ? "DIFFERS" : "ok");
    run->check_loss_bad = loss_bad;
  }
  long nbad = loss_bad, ncmp = 0;
  double maxdiff = 0;
  const char *maxname = "all equal";
  for (int k = 0; k < pm->nparams; k++) {
    ppsrt_param *p = &pm->params[k];
    ppsrt_param *r = NULL;
    for (int j = 0; j < rx.model->nparams; j++)
      if (!strcmp(rx.model->params[j].name, p->name)) { r = &rx.model->params[j]; break; }
    if (!r || p->offset + p->numel > r->numel) {
      if (!run->o.json)
        fprintf(f, "check: device %d: parameter %s has no counterpart in the reference\n", c->rank, p->name);
      nbad++;
      continue;
    }
    free(a); free(b);
    a = malloc(p->numel * sizeof *a);
    b = malloc(r->numel * sizeof *b);
    if (!a || !b) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "--check: out of host memory"); pthread_mutex_unlock(&run->print_lock); goto out; }
    if ((rc = download(be, a, p->grad, p->numel)) || (rc = download(be, b, r->grad, r->numel))) {
      pthread_mutex_unlock(&run->print_lock);
      goto out;
    }
    int shown = 0;
    for (size_t i = 0; i < p->numel; i++) {
      double x = a[i], y = b[p->offset + i], d = fabs(x - y);
      ncmp++;
      if (d > maxdiff || isnan(d)) { maxdiff = isnan(d) ? INFINITY : d; maxname = p->name; }
      if (!(d <= atol + rtol * fabs(y))) {
        nbad++;
        if (shown < 3 && !run->o.json)
          fprintf(f, "check: device %d: grad %s[%zu] = %.9g, reference %.9g, |diff| %.3g\n", c->rank, p->name,
                  p->offset + i, x, y, d);
        shown++;
      }
    }
  }
  if (!run->o.json)
    fprintf(f, "check: device %d: %ld gradient values of %d tensors compared, max |diff| %.3g (%s), "
            "tolerance |a-b| <= %g + %g*|ref|: %s\n", c->rank, ncmp, pm->nparams, maxdiff, maxname, atol, rtol,
            nbad ? "MISMATCH" : "match");
  if (maxdiff > run->check_maxdiff) run->check_maxdiff = maxdiff;
  pthread_mutex_unlock(&run->print_lock);
  *mismatch = nbad > 0x7fffffff ? 0x7fffffff : (int)nbad;
out:
  if (f) fclose(f);
  free(a); free(b); free(all);
  if (rx.model) {
    /* the reference's gradients must not leak into anything: it is destroyed here */
    rt_box_clear(&rx);
    rt_store_leftover(&rx, &(int){0}, &(int){0});
  }
  rt_store_fini(&rx.store, be);
  if (rx.model) rx.model->destroy(rx.model);
  free(rx.box);
  free(rx.bcol);
  return rc;
}
