/* validate.c: --val-data (or --split's validation part): the validation loss, every
 * --val-every iterations and after the last, as Megatron-LM's evaluate() computes it:
 * forward passes only, through the same pipeline, tensor- and data-parallel groups as
 * training (interp.c rt_eval_forward: each device walks its own op table restricted to
 * the forward passes, sends and receives; every weight stays where it is), over
 * --eval-iters K batches. Batch k is the global batch k of the validation data from its
 * start (the same sequences every time): replica r evaluates its share, microbatches
 * k D nmb + r nmb .. + nmb - 1, as training's iteration k would; the loss is the mean
 * over the K batches of the batch loss that training reports (summed over the
 * pipeline, averaged over the replicas and, with --context-parallel, over the context
 * ranks' halves of each sequence): the mean token loss over all K D nmb x micro_batch
 * sequences (each has seq tokens). No dropout, no backward, no optimizer:
 * training is not touched, and the time is not an iteration's (rt_run_device has
 * taken its figures before this runs; --json shows it apart: val_time_s). */
#include "config.h"
#include "rt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The validation loss through the pipeline: this device's forward passes over the
 * validation data (its replica's share of each batch), the loss summed over the
 * pipeline's devices and averaged over the replicas exactly as training's loss is (the
 * same float sums: a batch evaluated here and the same sequences trained on at --lr 0
 * report the same number); each device's activation and memory peaks of the evaluation. */
static int val_forward(ppsrt_ctx *c, double *loss, size_t *peak, size_t *dmem) {
  ppsrt_run *run = c->run;
  ppsrt_model *m = c->model;
  int ndev = run->prog->ndev, rc;
  const ppsrt_tokens *data = m->cfg.data;
  long data0 = m->cfg.data0;
  m->cfg.data = run->val_tokens;   /* batch k: global microbatches k nrep nmb + mb0 + mb of the file */
  m->cfg.data0 = 0;
  double mine = 0;
  rc = rt_eval_forward(c, run->o.eval_iters, &mine, peak, dmem);
  m->cfg.data = data;
  m->cfg.data0 = data0;
  if (rc) return rc;
  float *st = calloc((size_t)4 * ndev + 2, sizeof *st);
  if (!st) return PPSRT_FAIL(PPSRT_E_NOMEM, "--val-data: out of host memory");
  float *row = st + 2 + (size_t)4 * c->rank;
  st[0] = (float)mine;
  row[0] = (float)(*peak >> 20); row[1] = (float)(*peak & 0xfffff);
  row[2] = (float)(*dmem >> 20); row[3] = (float)(*dmem & 0xfffff);
  if (!(rc = rt_allreduce_host(c, st, (size_t)4 * ndev + 2, PPSRT_SUM))) {
    *loss = st[0];
    if (run->ngrad > 1) rc = rt_replica_loss(c, loss);   /* the replicas' and context ranks' tokens */
  }
  if (!rc && ((c->rank == 0 && c->grank == 0 && c->tp_rank == 0) || run->nlocal == 1))
    for (int d = 0; d < ndev; d++) {
      const float *r = st + 2 + (size_t)4 * d;
      size_t pk = ((size_t)r[0] << 20) + (size_t)r[1], dm = ((size_t)r[2] << 20) + (size_t)r[3];
      if (pk > run->dev_val_peak[d]) run->dev_val_peak[d] = pk;
      if (dm > run->dev_val_mem[d]) run->dev_val_mem[d] = dm;
    }
  free(st);
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
  double t0 = rt_now(), loss = 0;
  size_t pk = 0, dm = 0;
  rc = val_forward(c, &loss, &pk, &dm);
  double secs = rt_now() - t0;
  if (c->rank == 0 && c->grank == 0 && c->tp_rank == 0) {   /* (replica 0's context rank 0) */
    if (!rc) {
      run->val_loss[it] = loss;
      run->val_time[it] = secs;
      if (!o->json) {
        pthread_mutex_lock(&run->print_lock);
        fprintf(run->out, "val  %ld/%ld  loss %.7f  (%s)  %ld sequences\n", run->step0 + it + 1,
                run->step0 + o->iterations, loss, o->val_data ? o->val_data : "--split's validation part of --data",
                run->val_seqs);
        fflush(run->out);
        pthread_mutex_unlock(&run->print_lock);
      }
    }
  }
  int rc2 = c->tr->barrier(c->tr, c->rank);
  return rc ? rc : rc2;
}
