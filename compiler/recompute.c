/* recompute.c: the model of activation recomputation (`recompute all | ratio R |
 * stages LO..HI;`, docs/language.md "Policies"), one place for every phase that
 * times or counts memory (sim.c, and through it verify.c and the reports).
 *
 * A stage's activation act (units) is its input (share `input`, the boundary
 * activation F received) plus what its layers keep. With ratio R, the first R of
 * the stage's layers are recomputed as one block that keeps the stage input:
 *  - F(i, s) keeps act - D, D = R (1 - input) act (over program order and over time,
 *    added at F's start like act);
 *  - B(i, s) (or BW) first runs that part of the forward again: it lasts R TF(s)
 *    longer and adds D back at its start, so it holds the whole activation while it
 *    runs; then it frees b_free act at its end, W the rest (BW all of it), as without
 *    recomputation. Over program order the rebuild counts before B's frees.
 * The runtime (runtime/interp.c) does the same at stage granularity: F keeps only its
 * stage input, and B reruns F to rebuild the saved activations first.
 * What it does not: offload and recomputation of the same stage (elab.c refuses it);
 * the transient of F itself (F holds its whole activation until it ends, as the
 * runtime's F does, but only the kept part is counted at its end: units are sampled at
 * op boundaries, docs/runtime.md). */
#include "recompute.h"
#include <string.h>

double recompute_input_default(const IrSchedule *s, const IrStage *g) {
  if (!s->derived.bytes || !(s->derived.unit_bytes > 0) || !(g->act > 0)) return 0;
  double v[4] = {0, 0, 0, 2};
  static const char *const key[4] = {"seq", "micro_batch", "hidden", "dtype_bytes"};
  for (int i = 0; i < s->nmodel; i++)
    for (int k = 0; k < 4; k++)
      if (!strcmp(s->model[i].key, key[k])) v[k] = s->model[i].value;
  double x = v[0] * v[1] * v[2] * v[3] / (g->act * s->derived.unit_bytes);
  return x > 1 ? 1 : x > 0 ? x : 0;
}

double recompute_dropped(const IrSchedule *s, int stage) {
  if (stage < 0 || stage >= s->nstage) return 0;
  const IrStage *g = &s->stages[stage];
  if (!(g->recompute > 0)) return 0;
  double k = g->input < 0 ? 0 : g->input > 1 ? 1 : g->input;
  return g->recompute * (1 - k) * g->act;
}

static int recomputed_b(const IrSchedule *s, const IrOp *op) {
  return (op->kind == IR_B || op->kind == IR_BW) && op->stage >= 0 && op->stage < s->nstage &&
         s->stages[op->stage].recompute > 0;
}

double recompute_time(const IrSchedule *s, const IrOp *op) {
  return recomputed_b(s, op) ? s->stages[op->stage].recompute * s->stages[op->stage].tf : 0;
}

double recompute_rebuild(const IrSchedule *s, const IrOp *op) {
  return recomputed_b(s, op) ? recompute_dropped(s, op->stage) : 0;
}

int recompute_any(const IrSchedule *s) {
  for (int st = 0; st < s->nstage; st++)
    if (s->stages[st].recompute > 0) return 1;
  return 0;
}

double recompute_device_time(const IrSchedule *s, int d) {
  double t = 0;
  if (d < 0 || d >= s->ndev) return 0;
  for (int k = 0; k < s->devs[d].nops; k++) t += recompute_time(s, &s->devs[d].ops[k]);
  return t;
}
