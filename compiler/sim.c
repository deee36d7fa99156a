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

/* mem_delta and recompute_rebuild depend on an op's kind and stage only: their values
 * for each (stage, kind), computed once per walk (the ops are millions, the stages a
 * few hundred), by the same functions, so the figures are the same to the bit. */
enum { MEM_NK = 16 };
typedef struct MemFx { double dv, dh, rb; } MemFx;
typedef struct MemTab { int nst; MemFx *fx; /* [nst * MEM_NK] */ } MemTab;

static void __attribute__((noinline)) memfx_of(const IrSchedule *s, const IrOp *op, MemFx *f) {
  f->dv = mem_delta(s, op, &f->dh);
  f->rb = recompute_rebuild(s, op);
}

static void memtab_init(Arena *a, const IrSchedule *s, MemTab *t) {
  t->nst = s->nstage > 0 ? s->nstage : 0;
  t->fx = arena_alloc(a, sizeof(MemFx) * (size_t)t->nst * MEM_NK + 1);
  for (int st = 0; st < t->nst; st++)
    for (int k = 0; k < MEM_NK; k++) {
      IrOp op = {0};
      op.kind = (uint8_t)k;
      op.stage = st;
      memfx_of(s, &op, &t->fx[(size_t)st * MEM_NK + k]);
    }
}

/* The kinds that hold no memory (mem_delta 0, nothing to rebuild): a walk skips them
 * without reading the op (a zero delta changes no running sum and no peak). */
static int holds_nothing(int kind) {
  return kind == IR_SEND || kind == IR_RECV || kind == IR_COLL || kind == IR_IF || kind == IR_IB;
}

static inline const MemFx *memfx(const IrSchedule *s, const MemTab *t, const IrOp *op, MemFx *tmp) {
  if (op->stage >= 0 && op->stage < t->nst && op->kind < MEM_NK) return &t->fx[(size_t)op->stage * MEM_NK + op->kind];
  memfx_of(s, op, tmp);   /* (a stage out of range: not in the table) */
  return tmp;
}

/* ---- the executor ---- */
typedef struct MemEv { double t; double dv; int32_t op; } MemEv;
static int memev_cmp(const void *x, const void *y) {
  const MemEv *a = x, *b = y;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  if ((a->dv < 0) != (b->dv < 0)) return a->dv < 0 ? -1 : 1; /* frees first */
  return a->op < b->op ? -1 : a->op > b->op;
}

/* The events of memory over time, collected by mem_walk (the buffer is reused across
 * devices). */
typedef struct MemEvs { MemEv *ev; int n, cap, sorted; double lastt; } MemEvs;

/* Op g's events over time: the rebuild at B's start; B's frees at its end (F, S and
 * a reload take their memory at their start, the rest free it at their end). */
static inline void mem_events(Arena *a, MemEvs *evs, const SimResult *r, int32_t g, int kind, const MemFx *fx) {
  double dvm = fx->dv;
  if (fx->rb > 0) {
    MemEv *e = VEC_PUSH(a, evs->ev, evs->n, evs->cap);
    *e = (MemEv){r->start[g], fx->rb, g};
    evs->sorted = evs->sorted && r->start[g] >= evs->lastt;
    evs->lastt = r->start[g];
    dvm -= fx->rb;
  }
  if (dvm == 0 || (r->cancelled && r->cancelled[g])) return;
  double at;
  switch ((IrKind)kind) {
  case IR_F: case IR_S: case IR_RELOAD: at = r->start[g]; break;
  default: at = r->end[g]; break;
  }
  if (at < evs->lastt) evs->sorted = 0;
  evs->lastt = at;
  MemEv *e = VEC_PUSH(a, evs->ev, evs->n, evs->cap);
  *e = (MemEv){at, dvm, g};
}

/* One walk over device d's ops: memory over program order (sd's peak_order,
 * host_peak, end_memory, nops) and, with r (a finished timed run), the device's
 * first (compute or copy) start and last end, and its memory events over time into
 * evs (the ops that hold nothing are not read). */
static void mem_walk(Arena *a, const IrSchedule *s, const AnaIndex *ix, const MemTab *t, int d, SimDev *sd,
                     const SimResult *r, MemEvs *evs) {
  double m = 0, h = 0, pk = 0, hp = 0;
  double last = 0, first = -1;
  int32_t pko = -1, hpo = -1;
  const IrDevice *dv = &s->devs[d];
  const uint8_t *kf = ix->kf;
  int32_t off = ix->off[d];
  MemFx t1, t2;
  if (r) {
    evs->n = 0;
    evs->sorted = 1;
    evs->lastt = -1e300;
  }
#define MEM_TIMES(g, kind)                                                                                   \
  do {                                                                                                       \
    if (r->end[g] > last) last = r->end[g];                                                                  \
    if ((is_compute(kind) || (kind) == IR_OFFLOAD || (kind) == IR_RELOAD) && (first < 0 || r->start[g] < first)) \
      first = r->start[g];                                                                                   \
  } while (0)
  for (int k = 0; k < dv->nops; k++) {
    int32_t g = off + k;
    int kind = ANA_KIND(kf[g]);
    if (r) MEM_TIMES(g, kind);
    if (holds_nothing(kind)) continue;
    const MemFx *fx = memfx(s, t, &dv->ops[k], &t1);
    if (r) mem_events(a, evs, r, g, kind, fx);
    if (overlap_pair_kf(kf, g, k, dv->nops)) { /* a pair holds both: its allocation first */
      const MemFx *fy = memfx(s, t, &dv->ops[k + 1], &t2);
      double x = fx->dv, y = fy->dv, rx = fx->rb, ry = fy->rb;
      m += (x - rx > 0 ? x - rx : 0) + (y - ry > 0 ? y - ry : 0) + rx + ry;
      if (m > pk + 1e-9 * fabs(pk)) { pk = m; pko = g; }
      m += (x - rx < 0 ? x - rx : 0) + (y - ry < 0 ? y - ry : 0);
      h += fx->dh + fy->dh;
      k++;
      g++;
      if (r) {
        int kind2 = ANA_KIND(kf[g]);
        MEM_TIMES(g, kind2);
        mem_events(a, evs, r, g, kind2, fy);
      }
      continue;
    }
    if (fx->rb > 0 && m + fx->rb > pk + 1e-9 * fabs(pk)) { pk = m + fx->rb; pko = g; }   /* B holds the rebuilt part before it frees */
    m += fx->dv;
    h += fx->dh;
    if (m > pk + 1e-9 * fabs(pk)) { pk = m; pko = g; }
    if (h > hp + 1e-9 * fabs(hp)) { hp = h; hpo = g; }
  }
#undef MEM_TIMES
  sd->peak_order = pk;
  sd->peak_order_op = pko;
  sd->host_peak = hp;
  sd->host_peak_op = hpo;
  sd->end_memory = m;
  sd->nops = dv->nops;
  if (r) {
    sd->last = last;
    sd->first = first < 0 ? 0 : first;
  }
}

void sim_memory_order(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimDev *dev) {
  MemTab t;
  memtab_init(a, s, &t);
  for (int d = 0; d < ix->ndev; d++) mem_walk(a, s, ix, &t, d, &dev[d], NULL, NULL);
}


/* The figures of a finished timed run: makespan, span, ideal, bubble, and memory
 * over program order and over time (one walk over each device's ops: mem_walk). */
static void sim_figures(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimResult *r, int want_timeline) {
  int P = ix->ndev;
  MemTab t;
  memtab_init(a, s, &t);
  MemEvs evs = {0};
  double mk = 0, span = 0;
  for (int d = 0; d < P; d++) {
    SimDev *sd = &r->dev[d];
    mem_walk(a, s, ix, &t, d, sd, r, &evs);
    if (sd->last > mk) mk = sd->last;
    if (sd->last - sd->first > span) span = sd->last - sd->first;
    /* memory over time */
    MemEv *ev = evs.ev;
    int nev = evs.n;
    if (!evs.sorted) qsort(ev, (size_t)nev, sizeof *ev, memev_cmp);
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
}

void sim_timeline(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimResult *r) {
  SimDev *dev = arena_alloc(a, sizeof(SimDev) * (size_t)(ix->ndev + 1));   /* (exec_run's size) */
  memcpy(dev, r->dev, sizeof(SimDev) * (size_t)(ix->ndev + 1));
  r->dev = dev;
  r->peak_memory = 0;   /* the figures again, from where the executor leaves them */
  r->peak_device = -1;
  r->host_memory = 0;
  sim_figures(a, s, ix, r, 1);
}

int sim_run(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, SimResult *r) {
  if (exec_timed(a, s, ix, L, r, exec_async(s)) != 1) return 0;
  sim_figures(a, s, ix, r, 0);   /* the memory timeline, when asked for: sim_timeline */
  return 1;
}
