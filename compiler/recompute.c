/* recompute.c: the model of activation recomputation (`recompute all | ratio R |
 * stages LO..HI;`, docs/language.md "Policies"), one place for every phase that
 * times or counts memory (sim.c, and through it verify.c and the reports).
 *
 * A stage's activation act (units) is its input (share `input`, the boundary
 * activation F received), what its L layers keep (share `layer` each, the layer's
 * output included; default 1/L) and whatever else F keeps (the output layer, the
 * runtime's gradient area). L is the layers per stage of model { layers } (floor of
 * layers / stages, at least 1; runtime/cli.c derives --layers-per-stage the same way).
 * Ratio R recomputes the first k = ceil(R L) layers (whole layers, at least R of them):
 *  - k = L, the whole stage: F(i, s) keeps only its input, D = (1 - input) act is
 *    dropped, and B reruns all of F (TF);
 *  - k < L: F drops what layers 0..k-1 keep beyond the stage input, D = k layer act,
 *    and B reruns those layers, (k / L) TF;
 *  (D over program order and over time, added at F's start like act, taken at its end);
 *  - B(i, s) (or BW) first runs that part of the forward again: it lasts that much
 *    longer and adds D back at its start, so it holds the whole activation while it
 *    runs; then it frees b_free act at its end, W the rest (BW all of it), as without
 *    recomputation. Over program order the rebuild counts before B's frees.
 * The runtime (runtime/recompute.c) does the same, layer by layer: the measured peak
 * is ppsc sim's when `input` and `layer` are the model's shares (it names them when not).
 * What it does not: offload and recomputation of the same stage (elab.c refuses it);
 * the transient of F itself (F holds its whole activation until it ends, as the
 * runtime's F does, but only the kept part is counted at its end: units are sampled at
 * op boundaries, docs/runtime.md). */
#include "recompute.h"
#include <math.h>
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

int recompute_stage_layers(const IrSchedule *s) {
  for (int i = 0; i < s->nmodel; i++)
    if (!strcmp(s->model[i].key, "layers") && s->nstage > 0 && s->model[i].value >= s->nstage)
      return (int)fmin(floor(s->model[i].value / s->nstage), 1e6);
  return 1;
}

int recompute_layers(const IrSchedule *s, int stage) {
  if (stage < 0 || stage >= s->nstage || !(s->stages[stage].recompute > 0)) return 0;
  int L = recompute_stage_layers(s);
  double k = ceil(s->stages[stage].recompute * L - 1e-9);
  return k >= L ? L : k < 1 ? 1 : (int)k;
}

double recompute_dropped(const IrSchedule *s, int stage) {
  int k = recompute_layers(s, stage);
  if (!k) return 0;
  const IrStage *g = &s->stages[stage];
  double in = g->input < 0 ? 0 : g->input > 1 ? 1 : g->input;
  double whole = (1 - in) * g->act;
  if (k == recompute_stage_layers(s)) return whole;
  double d = k * (g->layer > 0 ? g->layer : 0) * g->act;
  return d < whole ? d : whole;
}

static int recomputed_b(const IrSchedule *s, const IrOp *op) {
  return (op->kind == IR_B || op->kind == IR_BW) && op->stage >= 0 && op->stage < s->nstage &&
         s->stages[op->stage].recompute > 0;
}

double recompute_time(const IrSchedule *s, const IrOp *op) {
  return recomputed_b(s, op) ? (double)recompute_layers(s, op->stage) / recompute_stage_layers(s) * s->stages[op->stage].tf : 0;
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
