/* sim.c: the figures of a lowered schedule's timed run (makespan, span, ideal,
 * bubble) and the memory accounting, over program order and over simulated time.
 * The run itself is the executor's (exec.c, which states the timing model): sim_run
 * runs it buffered and timed, with the schedule's collective mode, then adds the
 * figures here.
 *
 * Memory: F adds the stage's act (at its start), B frees b_free * act, W the rest,
 * BW all of it (at their ends); S adds act_s, T frees it; a finished offload frees
 * its fraction, a reload takes it back at its copy's start. Over program order the
 * same deltas are applied op by op (offload frees at the op). Host memory is the
 * offloaded amount, held from the offload until its reload. A recomputed stage
 * (compiler/recompute.c): F keeps only what recompute_dropped leaves, and B/BW add it
 * back at their start and last recompute_time longer.
 * Does not: check anything (verify.c), or print (report.c). */
#include "sim.h"
#include "overlap.h"
#include "recompute.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>


static int is_compute(int k) { return k <= IR_T; }

/* ---- memory deltas ---- */
static double act_of(const IrSchedule *s, int st) {
  return (st >= 0 && st < s->nstage) ? s->stages[st].act : 0;
}

/* Device-memory delta of an op, and host delta through *host. */
static double mem_delta(const IrSchedule *s, const IrOp *op, double *host) {
  *host = 0;
  switch ((IrKind)op->kind) {   /* (the kinds that hold nothing, about half the ops: no stage lookups) */
  case IR_SEND: case IR_RECV: case IR_COLL: case IR_IF: case IR_IB: return 0;
  default: break;
  }
  double act = act_of(s, op->stage), bf = 0;
  if (op->stage >= 0 && op->stage < s->nstage) {
    bf = s->stages[op->stage].b_free;
    if (bf < 0) bf = 0;
    if (bf > 1) bf = 1;
  }
  *host = 0;
  switch ((IrKind)op->kind) {
  case IR_F: return act - recompute_dropped(s, op->stage);   /* recompute.c */
  case IR_B: return recompute_rebuild(s, op) - bf * act;
  case IR_W: return -(1 - bf) * act;
  case IR_BW: return recompute_rebuild(s, op) - act;
  case IR_S: return s->vocab.act_s;
  case IR_T: return -s->vocab.act_s;
  case IR_OFFLOAD: {
    double x = ana_offload_fraction(s, op->stage) * act;
    *host = x;
    return -x;
  }
  case IR_RELOAD: {
    double x = ana_offload_fraction(s, op->stage) * act;
    *host = -x;
    return x;
  }
  default: return 0;
  }
}

void sim_memory_order(const IrSchedule *s, const AnaIndex *ix, SimDev *dev) {
  for (int d = 0; d < ix->ndev; d++) {
    double m = 0, h = 0, pk = 0, hp = 0;
    int32_t pko = -1, hpo = -1;
    const IrDevice *dv = &s->devs[d];
    for (int k = 0; k < dv->nops; k++) {
      double dh;
      if (overlap_pair_at(dv, k)) { /* a pair holds both: its allocation first */
        double dh2, x = mem_delta(s, &dv->ops[k], &dh), y = mem_delta(s, &dv->ops[k + 1], &dh2);
        double rx = recompute_rebuild(s, &dv->ops[k]), ry = recompute_rebuild(s, &dv->ops[k + 1]);
        m += (x - rx > 0 ? x - rx : 0) + (y - ry > 0 ? y - ry : 0) + rx + ry;
        if (m > pk + 1e-9 * fabs(pk)) { pk = m; pko = ix->off[d] + k; }
        m += (x - rx < 0 ? x - rx : 0) + (y - ry < 0 ? y - ry : 0);
        h += dh + dh2;
        k++;
        continue;
      }
      double rb = recompute_rebuild(s, &dv->ops[k]);   /* B holds the rebuilt part before it frees */
      if (rb > 0 && m + rb > pk + 1e-9 * fabs(pk)) { pk = m + rb; pko = ix->off[d] + k; }
      m += mem_delta(s, &dv->ops[k], &dh);
      h += dh;
      if (m > pk + 1e-9 * fabs(pk)) { pk = m; pko = ix->off[d] + k; }
      if (h > hp + 1e-9 * fabs(hp)) { hp = h; hpo = ix->off[d] + k; }
    }
    dev[d].peak_order = pk;
    dev[d].peak_order_op = pko;
    dev[d].host_peak = hp;
    dev[d].host_peak_op = hpo;
    dev[d].end_memory = m;
    dev[d].nops = dv->nops;
  }
}

/* ---- the executor ---- */
typedef struct MemEv { double t; double dv; int32_t op; } MemEv;
static int memev_cmp(const void *x, const void *y) {
  const MemEv *a = x, *b = y;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  if ((a->dv < 0) != (b->dv < 0)) return a->dv < 0 ? -1 : 1; /* frees first */
  return a->op < b->op ? -1 : a->op > b->op;
}


int sim_run(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L,
            SimResult *r, int want_timeline) {
  return sim_run_mode(a, s, ix, L, r, want_timeline, exec_async(s));
}

/* The figures of a finished timed run: makespan, span, ideal, bubble, and memory
 * over program order and over simulated time. */
static void sim_figures(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimResult *r, int want_timeline) {
  int P = ix->ndev;
  /* figures */
  double mk = 0, span = 0;
  for (int d = 0; d < P; d++) {
    SimDev *sd = &r->dev[d];
    double last = 0, first = -1;
    for (int32_t g = ix->off[d]; g < ix->off[d + 1]; g++) {
      if (r->end[g] > last) last = r->end[g];
      const IrOp *op = ana_op(s, ix, g);
      if ((is_compute(op->kind) || op->kind == IR_OFFLOAD || op->kind == IR_RELOAD) &&
          (first < 0 || r->start[g] < first)) first = r->start[g];
    }
    sd->last = last;
    sd->first = first < 0 ? 0 : first;
    if (last > mk) mk = last;
    if (last - sd->first > span) span = last - sd->first;
  }
  for (int d = 0; d < P; d++) r->dev[d].idle = mk - r->dev[d].busy;
  r->makespan = mk;
  r->span = span;
  /* the ideal: the compute of the busiest device, with the costs the passes actually
     have (per-stage or profiled costs, vocabulary passes, overlapped pairs): no order
     of these passes ends before that device has run them, so the bubble is never
     negative and is the bottleneck device's. With schedule-wide costs and nothing else
     it is m (TF + TB + TW), which is then what is reported, to the bit. */
  double work = 0;
  for (int d = 0; d < P; d++)
    if (r->dev[d].busy > work) work = r->dev[d].busy;
  double wide = (double)s->nmb * (s->tf + s->tb + s->tw);
  r->ideal = fabs(work - wide) <= 1e-9 * (fabs(work) + fabs(wide)) ? wide : work;
  r->bubble_rate = mk > 0 ? 1 - r->ideal / mk : 0;
  r->bubble_rate_span = span > 0 ? 1 - r->ideal / span : 0;
  if (r->bubble_rate < 0) r->bubble_rate = 0;        /* rounding only: ideal <= makespan */
  if (r->bubble_rate_span < 0) r->bubble_rate_span = 0;

  /* memory over program order, then over time */
  sim_memory_order(s, ix, r->dev);
  MemEv *ev = NULL;
  int nev = 0, capev = 0;
  for (int d = 0; d < P; d++) {
    SimDev *sd = &r->dev[d];
    nev = 0;
    int sorted = 1;
    double lastt = -1e300;
    for (int32_t g = ix->off[d]; g < ix->off[d + 1]; g++) {
      const IrOp *op = ana_op(s, ix, g);
      double dh, dvm = mem_delta(s, op, &dh), rb = recompute_rebuild(s, op);
      if (rb > 0) {   /* the rebuild at B's start; B's frees at its end */
        MemEv *e = VEC_PUSH(a, ev, nev, capev);
        *e = (MemEv){r->start[g], rb, g};
        sorted = sorted && r->start[g] >= lastt;
        lastt = r->start[g];
        dvm -= rb;
      }
      if (dvm == 0 || (r->cancelled && r->cancelled[g])) continue;
      double at;
      switch ((IrKind)op->kind) {
      case IR_F: case IR_S: case IR_RELOAD: at = r->start[g]; break;
      default: at = r->end[g]; break;
      }
      if (at < lastt) sorted = 0;
      lastt = at;
      MemEv *e = VEC_PUSH(a, ev, nev, capev);
      *e = (MemEv){at, dvm, g};
    }
    if (!sorted) qsort(ev, (size_t)nev, sizeof *ev, memev_cmp);
    double m = 0, pk = 0;
    int32_t pko = -1;
    if (want_timeline) {
      sd->mt = arena_alloc(a, sizeof(double) * (size_t)(nev + 2));
      sd->mv = arena_alloc(a, sizeof(double) * (size_t)(nev + 2));
      sd->mt[0] = 0;
      sd->mv[0] = 0;
      sd->nmem = 1;
    }
    for (int k = 0; k < nev; k++) {
      m += ev[k].dv;
      if (m > pk + 1e-9 * fabs(pk)) { pk = m; pko = ev[k].op; }
      if (want_timeline) {
        if (sd->mt[sd->nmem - 1] == ev[k].t) sd->mv[sd->nmem - 1] = m;
        else { sd->mt[sd->nmem] = ev[k].t; sd->mv[sd->nmem] = m; sd->nmem++; }
      }
    }
    sd->peak_time = pk;
    sd->peak_time_op = pko;
    sd->peak = sd->peak_order > pk ? sd->peak_order : pk;
    if (r->peak_device < 0 || sd->peak > r->peak_memory + 1e-9 * fabs(r->peak_memory)) {
      r->peak_memory = sd->peak;
      r->peak_device = d;
    }
    if (sd->host_peak > r->host_memory) r->host_memory = sd->host_peak;
  }
}

int sim_run_mode(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L,
                 SimResult *r, int want_timeline, int async) {
  if (exec_timed(a, s, ix, L, r, async) != 1) return 0;
  sim_figures(a, s, ix, r, want_timeline);
  return 1;
}
