/* recompute.c: activation recomputation in the runtime (`recompute ...;` in the .pps,
 * ppsrt_stage.recompute; compiler/recompute.c is the model `ppsc sim` predicts from).
 * For a recomputed stage, after F(mb, s) the store keeps only entry 0, the stage input
 * (model.h: F saves or adopts it first); before B(mb, s) or BW(mb, s) the model's F
 * runs again from that input, in recompute mode (ppsrt_recomputing): ppsrt_io_take of
 * the input returns the kept buffer, ppsrt_io_put discards what F sends on, the model
 * does not count the loss again. F is deterministic, so the rebuilt activations (and
 * the gradients) are the ones the plain run has, bit for bit. The peak is sampled
 * after the rebuild, before B runs, as the model counts it (B holds the whole
 * activation). Generic: any model that follows model.h's rules, on every backend
 * (the CUDA backend queues the rerun on the compute stream like any F).
 * What it does not: recompute part of a stage's layers (a ratio below 1 is refused
 * by rt_recompute_check), or offload a recomputed stage. */
#include "config.h"
#include "rt.h"
#include <math.h>
#include <stdio.h>

int ppsrt_recomputing(const ppsrt_ctx *c) { return c && c->recomputing; }

int rt_recomputed(const ppsrt_ctx *c, int stage) {
  const ppsrt_program *p = c->run->prog;
  return stage >= 0 && stage < p->nstage && p->stages[stage].recompute > 0;
}

int rt_recompute_check(const ppsrt_program *p, const char **why, int *stage) {
  for (int s = 0; s < p->nstage; s++) {
    double r = p->stages[s].recompute;
    if (r != 0 && r != 1) { *why = "the runtime recomputes whole stages (ratio 1)"; *stage = s; return 1; }
    if (r > 0 && p->stages[s].offload > 0) { *why = "a recomputed stage is not offloaded"; *stage = s; return 1; }
  }
  return 0;
}

int rt_recompute_drop(ppsrt_ctx *c, int mb, int stage) {
  int rc = rt_act_keep_first(c, mb, stage);
  if (rc || c->rc_mismatch || !c->model->act_bytes) return rc;
  /* what F kept must be the program's `input` share of the stage's act, for the
   * measured units to be the predicted ones */
  size_t all = c->model->act_bytes(c->model, stage), kept = rt_store_slot_bytes(c, mb, stage);
  double got = all ? (double)kept / (double)all : 0, want = c->run->prog->stages[stage].input;
  if (fabs(got - want) > 1e-9) {
    c->rc_mismatch = 1;
    c->rm_stage = stage; c->rm_got = got; c->rm_want = want;
    fprintf(stderr, "ppsrt: device %d: note: the recomputed F(%d, %d) kept %.17g of its stage's activation, the "
            "program's `input` share is %.17g, so the measured units differ from ppsc sim's\n"
            "hint: for this model and size write `memory stage %d: input = %.17g;`\n", c->rank, mb, stage, got, want,
            stage, got);
  }
  return 0;
}

int rt_recompute_rebuild(ppsrt_ctx *c, int mb, int stage) {
  ppsrt_model *m = c->model;
  void *in;
  size_t bytes;
  int rc = rt_act_detach_first(c, mb, stage, &in, &bytes);
  if (rc) return rc;
  c->recomputing = 1;
  c->rc_in = in; c->rc_bytes = bytes; c->rc_mb = mb; c->rc_stage = stage;
  rc = m->f(m, c, mb, stage);
  c->recomputing = 0;
  if (c->rc_in) { c->be->free(c->be, c->rc_in); c->rc_in = NULL; }   /* F rebuilt its input itself (stage 0) */
  rt_store_sample(&c->store);
  return rc;
}
