/* recompute.c: activation recomputation in the runtime (`recompute ...;` in the .pps,
 * ppsrt_stage.recompute; compiler/recompute.c is the model `ppsc sim` predicts from,
 * docs/runtime.md "Activation recomputation").
 * Ratio R of a stage with L layers (--layers-per-stage) recomputes its first
 * k = ceil(R L) layers (whole layers, at least R of them; the compiler counts the same):
 *  - k = L (the whole stage): after F(mb, s) the store keeps only entry 0, the stage
 *    input (model.h: F saves or adopts it first); before B(mb, s) or BW(mb, s) the
 *    model's F runs again from that input, in recompute mode (ppsrt_recomputing):
 *    ppsrt_io_take of the input returns the kept buffer, ppsrt_io_put discards what F
 *    sends on, the model does not count the loss again;
 *  - k < L (selective): the model marks the end of each layer of F (ppsrt_layer_end);
 *    after F the store drops the entries layers 0..k-1 saved after the stage input and
 *    keeps the rest; before B/BW, F runs again in recompute mode and its saves refill
 *    exactly those entries (same indices, so the model's recorded indices stay right)
 *    until ppsrt_layer_end tells it to stop after layer k-1.
 * F is deterministic, so the rebuilt activations (and the gradients) are the ones the
 * plain run has, bit for bit. The peak is sampled after the rebuild, before B runs, as
 * the model counts it (B holds the whole activation). After the first F of a stage the
 * kept share is compared with the program's (`input`, or 1 - k `layer`) and a
 * difference noted, with the value to write. Each rebuild is timed (host clock, or
 * compute-stream events on an asynchronous backend), counted per device and shown as
 * a "recompute" span on the trace's compute track (metrics.c). Generic: any model
 * that follows model.h's rules, on every backend (the CUDA backend queues the rerun on
 * the compute stream like any F).
 * What it does not: offload a recomputed stage (refused by rt_recompute_check), or
 * recompute part of a stage for a model that does not mark its layers (an error). */
#include "config.h"
#include "rt.h"
#include <math.h>
#include <stdio.h>

int ppsrt_recomputing(const ppsrt_ctx *c) { return c && c->recomputing; }

int rt_recomputed(const ppsrt_ctx *c, int stage) {
  /* a context built by hand (a model driven outside a run, as tests/kernels/gpt_grad
   * does) has no program: nothing is recomputed */
  if (!c || !c->run || !c->run->prog) return 0;
  const ppsrt_program *p = c->run->prog;
  return stage >= 0 && stage < p->nstage && p->stages[stage].recompute > 0;
}

/* Layers recomputed of the stage (0 none); *L the layers per stage. */
static int layers_of(const ppsrt_ctx *c, int stage, int *L) {
  int n = c->model && c->model->cfg.layers_per_stage > 0 ? c->model->cfg.layers_per_stage : 1;
  if (L) *L = n;
  if (!rt_recomputed(c, stage)) return 0;
  double k = ceil(c->run->prog->stages[stage].recompute * n - 1e-9);
  return k >= n ? n : k < 1 ? 1 : (int)k;
}

static int partial(const ppsrt_ctx *c, int stage) {
  int L, k = layers_of(c, stage, &L);
  return k > 0 && k < L;
}

int rt_recompute_check(const ppsrt_program *p, const char **why, int *stage) {
  for (int s = 0; s < p->nstage; s++) {
    double r = p->stages[s].recompute;
    if (r < 0 || r > 1) { *why = "the ratio must be in (0, 1]"; *stage = s; return 1; }
    if (r > 0 && p->stages[s].offload > 0) { *why = "a recomputed stage is not offloaded"; *stage = s; return 1; }
  }
  return 0;
}

int ppsrt_layer_end(ppsrt_ctx *c, int mb, int stage, int l) {
  int L, k = layers_of(c, stage, &L);
  if (!k || k == L || l != k - 1) return 0;
  if (c->recomputing) return mb == c->rc_mb && stage == c->rc_stage;   /* the rebuild stops here */
  rt_act_mark(c, mb, stage);
  return 0;
}

int rt_recompute_drop(ppsrt_ctx *c, int mb, int stage) {
  int L, k = layers_of(c, stage, &L);
  int rc = k < L ? rt_act_keep_marked(c, mb, stage) : rt_act_keep_first(c, mb, stage);
  if (rc || c->rc_mismatch || !c->model->act_bytes) return rc;
  /* what F kept must be the program's share of the stage's act (`input`, or all but k
   * `layer` shares), for the measured units to be the predicted ones */
  const ppsrt_stage *g = &c->run->prog->stages[stage];
  size_t all = c->model->act_bytes(c->model, stage), kept = rt_store_slot_bytes(c, mb, stage);
  double got = all ? (double)kept / (double)all : 0, in = g->input < 0 ? 0 : g->input > 1 ? 1 : g->input;
  double want = k < L ? 1 - fmin(k * g->layer, 1 - in) : in;
  if (fabs(got - want) > 1e-9) {
    c->rc_mismatch = 1;
    c->rm_stage = stage; c->rm_got = got; c->rm_want = want;
    if (k < L)
      fprintf(stderr, "ppsrt: device %d: note: the recomputed F(%d, %d) kept %.17g of its stage's activation (its "
              "first %d of %d layers dropped), the program's `layer` share predicts %.17g, so the measured units differ "
              "from ppsc sim's\nhint: for this model and size write `memory stage %d: layer = %.17g;`\n", c->rank, mb,
              stage, got, k, L, want, stage, (1 - got) / k);
    else
      fprintf(stderr, "ppsrt: device %d: note: the recomputed F(%d, %d) kept %.17g of its stage's activation, the "
              "program's `input` share is %.17g, so the measured units differ from ppsc sim's\n"
              "hint: for this model and size write `memory stage %d: input = %.17g;`\n", c->rank, mb, stage, got,
              want, stage, got);
  }
  return 0;
}

int rt_recompute_rebuild(ppsrt_ctx *c, int op, int mb, int stage) {
  ppsrt_model *m = c->model;
  ppsrt_backend *be = c->be;
  void *in;
  size_t bytes;
  int part = partial(c, stage);
  if (part && !m->f) return PPSRT_FAIL(PPSRT_E_USAGE, "recompute: the model has no F");
  int rc = rt_act_detach_first(c, mb, stage, part, &in, &bytes);
  if (rc) return rc;
  ppsrt_event **ev = c->rcev ? &c->rcev[2 * op] : NULL;
  double a = ev ? 0 : rt_now();
  if (ev && (rc = be->event_record(be, ev[0], PPSRT_STREAM_COMPUTE))) return rc;
  c->recomputing = 1;
  c->rc_in = in; c->rc_bytes = bytes; c->rc_mb = mb; c->rc_stage = stage;
  rc = m->f(m, c, mb, stage);
  c->recomputing = 0;
  c->rc_fill = -1;
  if (c->rc_in) { be->free(be, c->rc_in); c->rc_in = NULL; }   /* F rebuilt its input itself (stage 0) */
  if (!rc && part) rc = rt_act_refilled(c, mb, stage);
  if (!rc && ev) rc = be->event_record(be, ev[1], PPSRT_STREAM_COMPUTE);
  if (!rc && !ev) {
    double b = rt_now();
    c->rc_time += b - a;
    if (c->run->o.trace && !c->reference)
      rc = rt_event_add(c, a - c->run->epoch, b - c->run->epoch, op, RT_TRACK_RECOMPUTE);
  }
  c->rc_count++;
  rt_store_sample(&c->store);
  return rc;
}
