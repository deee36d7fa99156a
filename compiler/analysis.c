/* analysis.c: the analysis pipeline on an elaborated (ordered) schedule:
 * lower -> verify -> simulate -> expectations. It does no analysis itself: it
 * sequences the phases and checks the figures against the file's limits and
 * `expect`s. The `check` and `sim` commands that run it after the front end and print
 * the reports are cmd_check.c's. */
#include "analysis.h"
#include "costmodel.h"
#include "dp.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

int analysis_metric(const IrSchedule *s, const SimResult *r, int metric, int device, double *out) {
  switch ((IrMetric)metric) {
  case IR_METRIC_MAKESPAN: *out = r->makespan; return 1;
  case IR_METRIC_BUBBLE_RATE: *out = r->bubble_rate; return 1;
  case IR_METRIC_BUBBLE_RATE_SPAN: *out = r->bubble_rate_span; return 1;
  case IR_METRIC_PEAK_MEMORY:
    if (device < 0) { *out = r->peak_memory; return 1; }
    if (device >= s->ndev) return 0;
    *out = r->dev[device].peak;
    return 1;
  case IR_METRIC_HOST_MEMORY:
    if (device < 0) { *out = r->host_memory; return 1; }
    if (device >= s->ndev) return 0;
    *out = r->dev[device].host_peak;
    return 1;
  case IR_METRIC_OPS: *out = (double)s->total_ops; return 1;
  case IR_METRIC_IDLE:
    if (device >= s->ndev) return 0;
    if (device >= 0) { *out = r->dev[device].idle; return 1; }
    *out = 0;
    for (int d = 0; d < s->ndev; d++) if (r->dev[d].idle > *out) *out = r->dev[d].idle;
    return 1;
  default: return 0;
  }
}

static const char *cmp_text(int c) {
  static const char *t[] = {"<", "<=", "==", "!=", ">=", ">"};
  return c >= 0 && c <= IR_CMP_GT ? t[c] : "?";
}

/* Comparisons allow a relative tolerance of 1e-9 (|x| >= 1) or absolute 1e-9:
 * simulated times are sums of the file's costs and carry rounding. */
static int cmp_holds(double x, int cmp, double y) {
  double tol = 1e-9 * fmax(1.0, fmax(fabs(x), fabs(y)));
  switch ((IrCmp)cmp) {
  case IR_CMP_LT: return x < y - tol;
  case IR_CMP_LE: return x <= y + tol;
  case IR_CMP_EQ: return fabs(x - y) <= tol;
  case IR_CMP_NE: return fabs(x - y) > tol;
  case IR_CMP_GE: return x >= y - tol;
  case IR_CMP_GT: return x > y + tol;
  }
  return 0;
}

/* The sends and receives lowering will insert (lower.c, lower_comm): two for each pass
 * whose consumer's stage is on another device; an upper bound (a duplicate pass is
 * counted, lowering skips it). 0 when the file writes its own (lowering adds none). */
static int64_t comm_to_insert(const IrSchedule *s) {
  int64_t n = 0;
  for (int d = 0; d < s->ndev; d++) {
    const IrDevice *dv = &s->devs[d];
    for (int k = 0; k < dv->nops; k++) {
      const IrOp *op = &dv->ops[k];
      if (op->kind == IR_SEND || op->kind == IR_RECV) return 0;
      if (op->stage < 0 || op->stage >= s->nstage || op->mb < 0 || op->mb >= s->nmb || s->stages[op->stage].device != d) continue;
      if (op->kind == IR_F && op->stage + 1 < s->nstage && s->stages[op->stage + 1].device != d) n += 2;
      else if ((op->kind == IR_B || op->kind == IR_BW) && op->stage > 0 && s->stages[op->stage - 1].device != d) n += 2;
    }
  }
  return n;
}

/* --max-ops counts the ops lowering inserts: an error before they are allocated (the
 * sends and receives, known in advance), or right after lowering (vocabulary passes,
 * collectives, copies). Returns 1 when over. */
static int over_max_ops(Diag *dg, const IrSchedule *s, int64_t inserting, int64_t inserted) {
  if (s->max_ops <= 0 || s->total_ops + inserting <= s->max_ops) return 0;
  if (inserting)
    diag_error(dg, s->span, "the schedule has more than %ld ops after lowering: %lld written and %lld sends and receives to insert (limit: --max-ops)",
               s->max_ops, (long long)s->total_ops, (long long)inserting);
  else
    diag_error(dg, s->span, "the schedule has more than %ld ops after lowering: %lld, %lld of them inserted (limit: --max-ops)",
               s->max_ops, (long long)s->total_ops, (long long)inserted);
  return 1;
}

int analysis_run(Arena *a, Diag *dg, IrSchedule *s, Analysis *out, int want_timeline) {
  memset(out, 0, sizeof *out);
  LowerIndex kept = {0};   /* lowering's index of the lowered ops, when it has one */
  out->expects = arena_alloc(a, sizeof(ExpectResult) * (size_t)(s->nexpects + 1));
  if (s->ndev > 0 && s->nstage > 0 && s->nmb > 0 && s->devs && s->stages) {
    int placed = 1;
    for (int st = 0; st < s->nstage; st++)
      if (s->stages[st].device < 0 || s->stages[st].device >= s->ndev) placed = 0;
    /* (counted only where they could pass the limit: at most two per op) */
    if (placed && s->max_ops > 0 && s->total_ops > s->max_ops / 3 && over_max_ops(dg, s, comm_to_insert(s), 0)) return 0;
    if (placed) out->inserted_ops = lower_schedule(a, dg, s, &kept);
    if (placed && over_max_ops(dg, s, 0, out->inserted_ops)) return 0;
  }
  verify_schedule(a, dg, s, &out->vr, kept.valid ? &kept.ix : NULL, kept.valid ? &kept.links : NULL);
  out->verified = 1;
  if (out->vr.runnable && out->vr.sim.ok) {
    out->sim = out->vr.sim;   /* verification's timed run (sim.c), with the memory points when wanted */
    if (want_timeline) sim_timeline(a, s, &out->vr.ix, &out->sim);
    out->simulated = 1;
    out->sim.dp = dp_run(a, s, &out->vr.ix, &out->vr.links, &out->sim);   /* hardware data_parallel (dp.c) */
    /* elaboration bounds the costs; a non-finite time here must still not pass as valid */
    if (!isfinite(out->sim.makespan) || !isfinite(out->sim.peak_memory)) {
      diag_error(dg, s->span, "the simulated %s is not a finite number: lower the costs or activations",
                 isfinite(out->sim.makespan) ? "peak memory" : "makespan");
      out->simulated = 0;
    }
    /* the memory bound over simulated time (offload copies overlap compute) */
    for (int d = 0; d < s->ndev; d++) {
      const SimDev *sd = &out->sim.dev[d];
      if (s->mem_limit >= 0 && sd->peak_time > s->mem_limit * (1 + 1e-9) && sd->peak_order <= s->mem_limit * (1 + 1e-9) &&
          sd->peak_time_op >= 0) {
        const IrOp *op = ana_op(s, &out->vr.ix, sd->peak_time_op);
        char b[96];
        ir_format_op(s, op, b, sizeof b);
        diag_error(dg, op->span, "device %d holds %g activations at time %g, when %s %s, over the limit of %g (offload copies still in flight)",
                   d, sd->peak_time, out->sim.start[sd->peak_time_op], b,
                   op->kind == IR_RELOAD ? "starts copying back" : "starts", s->mem_limit);
        ir_note_op(dg, s, d, op, 1);   /* the loop bindings that wrote it, if any */
      }
    }
    /* hardware.memory against weights, gradients, optimizer state and activations */
    costmodel_check_memory(dg, s, &out->sim);
    /* copies the compute had to wait for: one warning, at the worst device */
    int worst = -1;
    for (int d = 0; d < s->ndev; d++)
      if (out->sim.dev[d].copy_stall > 1e-9 && (worst < 0 || out->sim.dev[d].copy_stall > out->sim.dev[worst].copy_stall)) worst = d;
    if (worst >= 0) {
      const SimDev *sd = &out->sim.dev[worst];
      diag_warning(dg, s->offload.span.file ? s->offload.span : s->span,
                   "offload is not free: device %d's backward passes wait %g for reloads (copy engines busy %g to host, %g back, of %g)",
                   worst, sd->copy_stall, sd->copy_busy[0], sd->copy_busy[1], out->sim.makespan);
    }
  }
  for (int k = 0; k < s->nexpects; k++) {
    const IrExpect *e = &s->expects[k];
    ExpectResult *r = &out->expects[k];
    if (!out->simulated) continue;
    if (!analysis_metric(s, &out->sim, e->metric, e->device, &r->actual)) {
      diag_error(dg, e->span, "expect: no device %d (there are %d)", e->device, s->ndev);
      continue;
    }
    r->evaluated = 1;
    r->ok = cmp_holds(r->actual, e->cmp, e->value);
    if (!r->ok) {
      char name[64];
      if (e->device >= 0) snprintf(name, sizeof name, "%s[%d]", ir_metric_name(e->metric), e->device);
      else snprintf(name, sizeof name, "%s", ir_metric_name(e->metric));
      diag_error(dg, e->span, "expectation failed: %s is %.6g, expected %s %.6g", name, r->actual, cmp_text(e->cmp), e->value);
    }
  }
  out->valid = dg->errors == 0;
  return out->valid;
}

int analysis_candidate(Arena *a, IrSchedule *t, double fig[3], const char **why) {
  Diag dg;
  diag_init(&dg, a);
  dg.out = NULL;
  Analysis an;
  analysis_run(a, &dg, t, &an, 0);
  *why = dg.nrecs ? dg.recs[0].message : NULL;
  fig[0] = an.simulated ? an.sim.makespan : -1;
  fig[1] = an.simulated ? an.sim.peak_memory : -1;
  fig[2] = an.simulated ? an.sim.host_memory : -1;
  return !dg.errors && an.simulated;
}
