/* synth.c: schedule synthesis for `synthesize;` (see synth.h, docs/synth.md).
 *
 * The model is the simulator's (sim.c) for compute passes: each device runs its passes
 * in order, one at a time; F(i, s) needs F(i, s-1), B(i, s) (or BW) needs F(i, s) and
 * B(i, s+1), W(i, s) needs B(i, s); a dependency between two devices arrives TC after
 * the pass that produced it ended; F adds the stage's activation, B frees b_free of it,
 * W the rest, BW all. The peak is the running sum over each device's order, which is
 * what `peak_memory` reports for these passes.
 *
 * A candidate order comes from a list scheduler run on that model in time order: when a
 * device is free it takes a ready B (critical path first), else a ready F the memory
 * allows, else a pending W (filling the bubble), else it waits for the next arrival.
 * A candidate is a policy: a memory cap per device (at most the limit: this is the
 * warm-up count in memory units), how W passes fill (lazily when nothing else is
 * ready, eagerly after their B, or only when they fit before the next arrival), which
 * stage goes first among ready F's and B's on a device that holds several, whether a
 * device reserves the memory the later stages of a microbatch it admits will need
 * (which can never deadlock), and B/W fused or apart. The search tries every policy
 * with all caps at the limit, then improves the best ones by coordinate descent over
 * the per-device caps, keeping the fastest valid order (then the lowest peak). Seeds
 * are candidates too: the published generators' constructions, built here before the
 * policies run (Zero Bubble's heuristic, V-Half and V-Min repeated and squeezed,
 * ZB-V's greedy), and the stdlib schedules of the placement, compiled after them. The
 * number of candidates depends only on `effort` and the size, so the result is
 * deterministic; a time limit stops the search early with the best so far. Below
 * effort 3, while a seed's order is the best, the search ends early when a stretch of
 * model steps brings nothing better (SYNTH_STALL_DESCENT, SYNTH_STALL_MOVES).
 *
 * The lower bound (lower_bound()) is derived in docs/synth.md. */
#include "synth.h"
#include "driver.h"
#include "overlap.h"
#include "recompute.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INF 1e300

/* model steps (one device looking at one of its stages) per budget unit + 1 (effort
   0, 1, 2, 3, 4 have 0, 1, 2, 2, 4 units + 1): P = 32, m = 128 on a V-shape searches
   about 2 s at effort 3, half on policies, half on local moves (bench/README.md, "Synthesis") */
#define SYNTH_STEPS_PER_EFFORT 2e7

/* The early end of effort 0..2 (docs/synth.md, "Early end"): while the best order is
   a seed's (a published generator's construction or a standard schedule) within
   SYNTH_STALL_GAP of the lower bound, the policies' descent ends once
   SYNTH_STALL_DESCENT (effort + 1) policy runs' worth of model steps (a run: the mean
   of the first phase's) bring no better order, the local moves once SYNTH_STALL_MOVES
   (effort + 1) do. Chosen by measurement: at P = 16, vshape, limit 16, m = 32 / 64
   the default ends within the time of the published ZB-V generator (bench/README.md,
   "Synthesis"); further from the bound the search has more to find and keeps its
   whole budget. */
#define SYNTH_STALL_DESCENT 2
#define SYNTH_STALL_MOVES 30
#define SYNTH_STALL_GAP 0.05

/* a pass of the order; pair: this pass and the next run as an overlapped pair
   (overlap.c), only in seeds that write `overlap { }` (DualPipeV) */
typedef struct SOp { int32_t mb, stage; uint8_t kind, pair; } SOp;

typedef struct Model {
  int P, S, m;
  double L;                 /* memory limit (large when none) */
  const IrStage *st;        /* [S] */
  double *cf, *cb;          /* [S]: delay F(i,s) -> F(i,s+1), B(i,s) -> B(i,s-1) */
  int *nst, *first;         /* [P]: stages on device d, index of its first in dst */
  int *dst;                 /* [S]: stages grouped by device, ascending */
  double *lmin;             /* [P]: least memory device d needs */
  double *unit;             /* [P]: cap step (smallest activation of its stages) */
  int split_ok;             /* B/W apart allowed */
  int offmb;                /* offload (st[].offload) applies to microbatches 0..offmb-1 */
  double H;                 /* host memory limit per device for offloaded activations (large: none) */
  double eff;               /* overlap efficiency of an overlapped F and backward pair (overlap.c) */
  double *drop;             /* [P]: device d's limit is L - drop[d] (hardware.memory less its
                               static bytes, in activation units, when less than L; else 0) */
  int relook;               /* run_policy redoes every look (PPS_SYNTH_RELOOK: tests/synth/evaluator.sh
                               checks that the looks it keeps change nothing) */
} Model;

/* Device d's memory limit, in activation units. */
static inline double lim(const Model *M, int d) { return M->L - M->drop[d]; }

typedef struct Policy {
  double *cap;              /* [2P]: the cap per device, then per device the cut: its k-th
                               of n stages admits an F only under cap - cut (n - 1 - k) */
  int wmode;                /* 0 lazy fill, 1 eager, 2 fill when it fits before the next arrival */
  int fsel, bsel;           /* 0 oldest microbatch, 1 latest stage, 2 earliest stage */
  int reserve;              /* reserve the memory of an admitted microbatch's later stages */
  int fused;
} Policy;

typedef struct Work {
  double *endF, *endB;      /* [m*S], -1 = not run */
  int *nF, *nB, *nW;        /* [S]: next microbatch of each kind per stage */
  double *cur, *held, *resv, *peak;  /* [P] */
  int64_t *left;            /* [P] passes still to run */
  SOp *ord;                 /* [total]: per device at off[d] */
  int64_t *off, *nord;      /* [P+1], [P] */
  double *ost, *ordy;       /* [total]: eval_order's start and ready time of each op */
  double *qend, *qamt;      /* [total]: offload copies in flight per device (FIFO at off[d]) */
  int64_t *qh, *qt;         /* [P]: their head and tail */
  double *eng;              /* [P]: when the device->host copy engine is free */
  double *host;             /* [P]: offloaded activations not yet back (run_policy) */
  double *rem;              /* [P]: compute still to run (run_policy) */
  int *wq; char *inq;       /* [P]: eval_order's worklist of devices, and who is in it */
  double *cwake, *cfut;     /* [P]: run_policy's last look at a device that had to wait: the
                               earliest time one of its passes becomes ready, and its fut */
  char *cvalid;             /* [P]: that look still holds (no input of the device changed since) */
  int64_t steps;
} Work;

typedef struct Result {
  double makespan, peak; int ok;
  double sumend;            /* eval_order: sum of the devices' ends */
  int fit;                  /* every device's peak within its limit (lim) */
} Result;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* a <= b up to rounding, relative to the figures compared (never an absolute slack: a
   limit of 1e-9 activations must hold as exactly as a limit of 8) */
static inline int le(double a, double b) {
  double x = a < 0 ? -a : a, y = b < 0 ? -b : b;
  return a <= b + 1e-9 * (x > y ? x : y);
}

/* Offload copies: F's activation leaves (the offloaded fraction) when its copy ends,
 * as in sim.c; the copies of a device run one at a time in order. */
static void copies_reset(const Model *M, Work *w) {
  for (int d = 0; d < M->P; d++) { w->qh[d] = w->qt[d] = w->off[d]; w->eng[d] = 0; }
}
static void copies_done(Work *w, int d, double t) {
  while (w->qh[d] < w->qt[d] && le(w->qend[w->qh[d]], t)) { w->held[d] -= w->qamt[w->qh[d]]; w->qh[d]++; }
}
static void copy_start(Work *w, int d, const IrStage *g, double end_of_f) {
  double cs = end_of_f > w->eng[d] ? end_of_f : w->eng[d];
  double ce = cs + g->offload_time * g->offload;
  w->eng[d] = ce;
  w->qend[w->qt[d]] = ce;
  w->qamt[w->qt[d]] = g->offload * g->act;
  w->qt[d]++;
}

/* Ready time of F(i, s), INF when its input's producer has not run. */
static double readyF(const Model *M, const Work *w, int i, int s) {
  if (s == 0) return 0;
  double e = w->endF[(int64_t)i * M->S + s - 1];
  return e < 0 ? INF : e + M->cf[s - 1];
}
static double readyB(const Model *M, const Work *w, int i, int s) {
  double f = w->endF[(int64_t)i * M->S + s];
  if (f < 0) return INF;
  if (s == M->S - 1) return f;
  double b = w->endB[(int64_t)i * M->S + s + 1];
  if (b < 0) return INF;
  b += M->cb[s + 1];
  return b > f ? b : f;
}

/* better(a, b) for the stage choice: key (mb, stage) by the selection rule */
static int pick_better(int sel, int i1, int s1, int i2, int s2) {
  switch (sel) {
  case 1: return s1 > s2;
  case 2: return s1 < s2;
  default: return i1 < i2 || (i1 == i2 && s1 > s2);
  }
}

/* Runs the list scheduler for one policy. Fills w->ord; returns the figures. A run
 * whose makespan is certain to exceed bound (a device's time plus the compute it
 * still has to run) stops early, not ok. */
static Result run_policy(const Model *M, const Policy *p, Work *w, double bound) {
  int P = M->P, S = M->S, m = M->m;
  Result r = {INF, 0, 0, 0, 0};
  int64_t ms = (int64_t)m * S;
  for (int64_t k = 0; k < ms; k++) w->endF[k] = w->endB[k] = -1;
  memset(w->nF, 0, sizeof(int) * (size_t)S);
  memset(w->nB, 0, sizeof(int) * (size_t)S);
  memset(w->nW, 0, sizeof(int) * (size_t)S);
  int per = p->fused ? 2 : 3;
  int active = 0;
  /* A device that had to wait keeps waiting, with the same next arrival, until one of
     its passes becomes ready by the clock (cwake) or an input of its stages arrives (a
     pass of a neighbouring stage runs: cvalid cleared): its look is not redone, only
     counted (the step budget, and so the search, is the same). Offload copies free
     memory by the clock: then every look is redone. */
  int cache = !M->relook;
  for (int s = 0; s < S && cache; s++)
    if (M->st[s].offload > 0) cache = 0;
  memset(w->cvalid, 0, (size_t)P);
  copies_reset(M, w);
  for (int d = 0; d < P; d++) {
    w->cur[d] = w->held[d] = w->resv[d] = w->peak[d] = w->host[d] = w->rem[d] = 0;
    w->left[d] = (int64_t)m * M->nst[d] * per;
    w->nord[d] = 0;
    if (w->left[d]) active++;
    for (int k = 0; k < M->nst[d]; k++) {
      const IrStage *g = &M->st[M->dst[M->first[d] + k]];
      w->rem[d] += (double)m * (g->tf + (p->fused ? g->tbw : g->tb + g->tw));
    }
  }
  double cutoff = bound < INF ? bound + 1e-9 * bound : INF;
  double mk = 0;
  while (active) {
    double T = INF;
    for (int d = 0; d < P; d++)
      if (w->left[d] && w->cur[d] < T) T = w->cur[d];
    int progress = 0;
    double next = INF;
    for (int d = 0; d < P; d++) {
      if (!w->left[d] || w->cur[d] > T) {
        if (w->left[d] && w->cur[d] < next) next = w->cur[d];
        continue;
      }
      w->steps += M->nst[d];
      double t = w->cur[d], fut = INF, wake = INF;
      if (w->cvalid[d] && !le(w->cwake[d], t)) {   /* the same look as before: it waits */
        if (w->cfut[d] < next) next = w->cfut[d];
        continue;
      }
      copies_done(w, d, t);
      int bi = -1, bs = -1, fi = -1, fs = -1, wi = -1, ws = -1, memblock = 0;
      const int *ds = M->dst + M->first[d];
      double held = w->held[d];
      for (int k = 0; k < M->nst[d]; k++) {
        int s = ds[k];
        int i = w->nB[s];
        if (i < m && i < w->nF[s]) {
          double rb = readyB(M, w, i, s);
          /* an offloaded activation comes back before its B: that memory must fit */
          int fits = M->st[s].offload <= 0 || i >= M->offmb || le(held + M->st[s].offload * M->st[s].act, p->cap[d]);
          if (le(rb, t)) {
            if (!fits) memblock = 1;
            else if (bi < 0 || pick_better(p->bsel, i, s, bi, bs)) { bi = i; bs = s; }
          } else {
            if (fits && rb < fut) fut = rb;
            if (rb < wake) wake = rb;
          }
        }
        i = w->nF[s];
        if (i < m) {
          double act = M->st[s].act;
          int allowed;
          double capk = p->cap[d] - p->cap[P + d] * (M->nst[d] - 1 - k);
          if (p->reserve && k > 0) allowed = 1;    /* reserved at admission */
          else if (p->reserve) allowed = le(held + w->resv[d] + (M->lmin[d]), capk);
          else allowed = le(held + act, capk);
          /* an offloaded activation must fit in the host memory until its B */
          if (allowed && M->st[s].offload > 0 && i < M->offmb && !le(w->host[d] + M->st[s].offload * act, M->H)) allowed = 0;
          double rf = readyF(M, w, i, s);
          if (le(rf, t)) {
            if (!allowed) memblock = 1;
            else if (fi < 0 || pick_better(p->fsel, i, s, fi, fs)) { fi = i; fs = s; }
          } else {
            if (allowed && rf < fut) fut = rf;
            if (rf < wake) wake = rf;
          }
        }
        if (!p->fused && w->nW[s] < w->nB[s]) {
          int j = w->nW[s];
          if (wi < 0 || j < wi) { wi = j; ws = s; }
        }
      }
      int kind = -1, mb = -1, stg = -1;
      if (wi >= 0 && p->wmode == 1) { kind = IR_W; mb = wi; stg = ws; }
      else if (bi >= 0) { kind = p->fused ? IR_BW : IR_B; mb = bi; stg = bs; }
      else if (fi >= 0) { kind = IR_F; mb = fi; stg = fs; }
      else if (wi >= 0) {
        if (p->wmode == 0 || memblock || fut >= INF || le(t + M->st[ws].tw, fut)) { kind = IR_W; mb = wi; stg = ws; }
      }
      if (kind < 0) {
        if (fut < next) next = fut;
        if (cache) { w->cvalid[d] = 1; w->cwake[d] = wake; w->cfut[d] = fut; }
        continue;
      }
      /* what this pass feeds changes: the device of the next stage (F) or of the one
         before (B, BW), and this one's own state */
      w->cvalid[d] = 0;
      if (kind == IR_F && stg + 1 < S) w->cvalid[M->st[stg + 1].device] = 0;
      if ((kind == IR_B || kind == IR_BW) && stg > 0) w->cvalid[M->st[stg - 1].device] = 0;
      /* run it */
      const IrStage *g = &M->st[stg];
      int64_t slot = (int64_t)mb * S + stg;
      double c;
      switch (kind) {
      case IR_F:
        c = g->tf;
        if (p->reserve && M->nst[d] > 1) {
          if (stg == ds[0]) w->resv[d] += M->lmin[d] - g->act;
          else w->resv[d] -= g->act;
        }
        w->held[d] += g->act;
        if (w->held[d] > w->peak[d]) w->peak[d] = w->held[d];
        if (g->offload > 0 && mb < M->offmb) {
          copy_start(w, d, g, t + c);   /* leaves when its copy ends */
          w->host[d] += g->offload * g->act;
        }
        w->endF[slot] = t + c;
        w->nF[stg]++;
        break;
      case IR_B:
        c = g->tb;
        if (mb < M->offmb) { w->held[d] += g->offload * g->act; w->host[d] -= g->offload * g->act; }   /* reloaded before B */
        if (w->held[d] > w->peak[d]) w->peak[d] = w->held[d];
        w->held[d] -= g->b_free * g->act;
        w->endB[slot] = t + c;
        w->nB[stg]++;
        break;
      case IR_BW:
        c = g->tbw;
        if (mb < M->offmb) { w->held[d] += g->offload * g->act; w->host[d] -= g->offload * g->act; }
        if (w->held[d] > w->peak[d]) w->peak[d] = w->held[d];
        w->held[d] -= g->act;
        w->endB[slot] = t + c;
        w->nB[stg]++;
        break;
      default:
        c = g->tw;
        w->held[d] -= (1 - g->b_free) * g->act;
        w->nW[stg]++;
        break;
      }
      SOp *o = &w->ord[w->off[d] + w->nord[d]++];
      o->mb = mb;
      o->stage = stg;
      o->kind = (uint8_t)kind;
      o->pair = 0;
      w->cur[d] = t + c;
      if (t + c > mk) mk = t + c;
      w->rem[d] -= c;
      if (w->cur[d] + w->rem[d] > cutoff) return r;   /* cannot beat the bound */
      if (--w->left[d] == 0) active--;
      progress = 1;
    }
    if (progress) continue;
    if (next >= INF) return r; /* nobody can move: this policy deadlocks */
    for (int d = 0; d < P; d++)
      if (w->left[d] && w->cur[d] <= T) {
        w->cur[d] = next;
        if (next + w->rem[d] > cutoff) return r;
      }
  }
  r.ok = 1;
  r.makespan = mk;
  r.fit = 1;
  for (int d = 0; d < P; d++) {
    if (w->peak[d] > r.peak) r.peak = w->peak[d];
    if (!le(w->peak[d], lim(M, d))) r.fit = 0;
  }
  return r;
}

/* Times a given order (w->ord, w->nord) on the model, as soon as possible, the way
 * sim.c does; ok = 0 when it is incomplete or deadlocks. */
/* The cost of pass o alone (sim_cost's, on the model's stages). */
static double sop_cost(const Model *M, const SOp *o) {
  const IrStage *g = &M->st[o->stage];
  return o->kind == IR_F ? g->tf : o->kind == IR_B ? g->tb : o->kind == IR_W ? g->tw : g->tbw;
}

/* When pass o may start (INF: an input's producer has not run). */
static double sop_ready(const Model *M, const Work *w, const SOp *o) {
  int64_t slot = (int64_t)o->mb * M->S + o->stage;
  if (o->kind == IR_F) return readyF(M, w, o->mb, o->stage);
  if (o->kind == IR_W) return w->endB[slot] < 0 ? INF : w->endB[slot];
  return readyB(M, w, o->mb, o->stage);
}

/* Runs pass o of device d from st to en: its end, its memory. 0, or -1 when it ran
 * before (the order is not valid). */
static int sop_apply(const Model *M, Work *w, const SOp *o, int d, double st, double en, int64_t *nf, int64_t *nb,
                     int64_t *nw, int64_t *nbsplit) {
  int i = o->mb, s = o->stage;
  int64_t slot = (int64_t)i * M->S + s;
  const IrStage *g = &M->st[s];
  switch (o->kind) {
  case IR_F:
    if (w->endF[slot] >= 0) return -1;
    w->endF[slot] = en; w->held[d] += g->act; (*nf)++;
    if (w->held[d] > w->peak[d]) w->peak[d] = w->held[d];
    if (g->offload > 0 && i < M->offmb) copy_start(w, d, g, en);
    break;
  case IR_B: case IR_BW:
    if (w->endB[slot] >= 0) return -1;
    w->endB[slot] = en;
    if (i < M->offmb) w->held[d] += g->offload * g->act;
    if (w->held[d] > w->peak[d]) w->peak[d] = w->held[d];
    w->held[d] -= o->kind == IR_B ? g->b_free * g->act : g->act;
    (*nb)++;
    if (o->kind == IR_B) (*nbsplit)++;
    break;
  default:
    w->held[d] -= (1 - g->b_free) * g->act; (*nw)++;
    break;
  }
  (void)st;
  return 0;
}

/* Times a given order (w->ord, w->nord) on the model, as soon as possible, the way
 * sim.c does; ok = 0 when it is incomplete or deadlocks. An overlapped pair starts
 * when both passes may, lasts cx + cy - eff min(cx, cy), and both end together; its
 * F's activation is taken first (sim.c). */
static Result eval_order(const Model *M, Work *w) {
  int P = M->P, S = M->S, m = M->m;
  Result r = {INF, 0, 0, 0, 0};
  int64_t ms = (int64_t)m * S;
  for (int64_t k = 0; k < ms; k++) w->endF[k] = w->endB[k] = -1;
  int64_t nf = 0, nb = 0, nw = 0, nbsplit = 0;
  int64_t *pc = w->left;
  for (int d = 0; d < P; d++) { pc[d] = 0; w->cur[d] = w->held[d] = w->peak[d] = 0; }
  copies_reset(M, w);
  double mk = 0;
  /* a worklist of devices (each runs its order until an input is missing; a pass that
     ends wakes the devices of the passes that need it): every pass is looked at a
     bounded number of times, whatever P (sweeping over all devices until nothing
     moves took P times the pipeline's depth) */
  int nq = 0;
  for (int d = 0; d < P; d++) { w->wq[nq++] = d; w->inq[d] = 1; }
  int qh = 0;
  while (nq > 0) {
    int d = w->wq[qh];
    qh = qh + 1 == P ? 0 : qh + 1;
    nq--;
    w->inq[d] = 0;
    while (pc[d] < w->nord[d]) {
      int64_t at = w->off[d] + pc[d];
      const SOp *o = &w->ord[at];
      int two = o->pair && pc[d] + 1 < w->nord[d];
      double rd = sop_ready(M, w, o), c = sop_cost(M, o);
      if (rd >= INF) break;
      if (two) {
        const SOp *o2 = o + 1;
        double rd2 = sop_ready(M, w, o2), c2 = sop_cost(M, o2);
        if (rd2 >= INF) break;
        if (rd2 > rd) rd = rd2;
        c = c + c2 - M->eff * (c < c2 ? c : c2);
      }
      w->steps++;
      double st = rd > w->cur[d] ? rd : w->cur[d];
      copies_done(w, d, st);
      for (int h = 0; h <= two; h++) { w->ost[at + h] = st; w->ordy[at + h] = rd; }
      /* a pair: its F first (the pair holds both halves' memory) */
      int first = two && o[1].kind == IR_F ? 1 : 0;
      for (int h = 0; h <= two; h++) {
        const SOp *x = &o[two ? (h ? 1 - first : first) : 0];
        if (sop_apply(M, w, x, d, st, st + c, &nf, &nb, &nw, &nbsplit)) return r;
        /* wake the device of the pass that needs this one (W: this device) */
        int ns = x->kind == IR_F ? x->stage + 1 : (x->kind == IR_B || x->kind == IR_BW) ? x->stage - 1 : -1;
        if (ns >= 0 && ns < S) {
          int e = M->st[ns].device;
          if (e != d && !w->inq[e]) { w->wq[(qh + nq) % P] = e; nq++; w->inq[e] = 1; }
        }
      }
      w->cur[d] = st + c;
      if (st + c > mk) mk = st + c;
      pc[d] += 1 + two;
    }
  }
  for (int d = 0; d < P; d++)
    if (pc[d] < w->nord[d]) return r;   /* stuck: a cycle */
  if (nf != ms || nb != ms || nw != nbsplit) return r;
  r.ok = 1;
  r.makespan = mk;
  r.sumend = 0;
  for (int d = 0; d < P; d++) r.sumend += w->cur[d];
  r.fit = 1;
  for (int d = 0; d < P; d++) {
    if (w->peak[d] > r.peak) r.peak = w->peak[d];
    if (!le(w->peak[d], lim(M, d))) r.fit = 0;
  }
  return r;
}

/* ---- the lower bound (docs/synth.md, "The lower bound") ---- */

/* Fractional knapsack: most value that items (weight wt[k], value val[k], at most cnt
 * of each) fit in capacity cap. Weight 0 items count in full. */
static double knap(int n, const double *wt, const double *val, double cnt, double cap) {
  double tot = 0;
  char used[64] = {0};
  if (n > 64) n = 64;
  for (int k = 0; k < n; k++)
    if (wt[k] <= 1e-15) { tot += cnt * val[k]; used[k] = 1; }
  for (;;) {
    int best = -1;
    for (int k = 0; k < n; k++)
      if (!used[k] && (best < 0 || val[k] * wt[best] > val[best] * wt[k])) best = k;
    if (best < 0 || cap <= 0) break;
    used[best] = 1;
    double take = cap / wt[best];
    if (take > cnt) take = cnt;
    tot += take * val[best];
    cap -= take * wt[best];
  }
  return tot;
}

static void lower_bound(const Model *M, SynthInfo *in) {
  int P = M->P, S = M->S, m = M->m;
  const IrStage *st = M->st;
  double *head = calloc((size_t)S + 1, sizeof *head);   /* earliest start of F(0, s) */
  double *back = calloc((size_t)S + 1, sizeof *back);   /* the backward chain's pass at s */
  double *tailB = calloc((size_t)S + 1, sizeof *tailB); /* earliest end of B(0, s), from 0 */
  if (!head || !back || !tailB) { free(head); free(back); free(tailB); return; }
  for (int s = 0; s < S; s++) {
    double bw = st[s].tbw;
    if (M->split_ok) {
      double b = s == 0 ? st[s].tb + st[s].tw : st[s].tb;
      if (b < bw) bw = b;
    }
    back[s] = bw;
    head[s] = s == 0 ? 0 : head[s - 1] + st[s - 1].tf + M->cf[s - 1];
  }
  double fwd = head[S - 1] + st[S - 1].tf;
  /* earliest end of B(0, s): forward chain, then backward from S-1 down to s */
  for (int s = S - 1; s >= 0; s--)
    tailB[s] = (s == S - 1 ? fwd : tailB[s + 1] + M->cb[s + 1]) + back[s];
  double path = tailB[0];
  in->lb_path = path;
  in->lb_work = in->lb_ramp = in->lb_cool = in->lb_drain = in->lb_memory = 0;
  in->lb_which = "critical path of one microbatch";
  in->lb_device = -1;
  double lb = path;
  for (int d = 0; d < P; d++) {
    double L = lim(M, d);
    int n = M->nst[d];
    const int *ds = M->dst + M->first[d];
    if (n <= 0) continue;   /* no stage: no work (synth_run refuses such a placement) */
    if (n > 64) n = 64;
    double wt[64], vf[64], wb[64], vb[64];
    double work = 0, ftot = 0, hd = INF, R = INF, cool = INF, memint = 0;
    for (int k = 0; k < n; k++) {
      int s = ds[k];
      double bk = st[s].tbw;
      if (M->split_ok && st[s].tb + st[s].tw < bk) bk = st[s].tb + st[s].tw;
      work += (double)m * (st[s].tf + bk);
      ftot += (double)m * st[s].tf;
      if (head[s] < hd) hd = head[s];
      double rb = tailB[s] - back[s];          /* earliest start of B(0, s) */
      if (rb < R) R = rb;
      double c = path - head[s] - st[s].tf;     /* from F(i, s)'s end to the end */
      if (c < cool) cool = c;
      wt[k] = st[s].act;
      vf[k] = st[s].tf;
      double bf = st[s].b_free < 0 ? 0 : st[s].b_free > 1 ? 1 : st[s].b_free;
      wb[k] = (1 - bf) * st[s].act;
      double vmax = st[s].tbw;
      if (M->split_ok && st[s].tb + st[s].tw > vmax) vmax = st[s].tb + st[s].tw;
      vb[k] = vmax;
      /* activation held from F(i, s)'s start to at least B(i, s)'s end (b_free of it)
         or W's end (the rest): the round trip through the later stages */
      double bstart = tailB[s] - back[s] - head[s];   /* F(i, s) start to B(i, s) start, at least */
      double bmin = st[s].tbw, full = st[s].tbw;
      if (M->split_ok) {
        if (st[s].tb < bmin) bmin = st[s].tb;
        if (st[s].tb + st[s].tw < full) full = st[s].tb + st[s].tw;
      }
      memint += (double)m * st[s].act * (bf * (bstart + bmin) + (1 - bf) * (bstart + full));
    }
    /* overlapped pairs (overlap.c): a pair of an F and a backward pass lasts
       cx + cy - eff min(cx, cy), so a device's busy time is its passes' costs less
       what its pairs save. Each F is in at most one pair and so is each backward pass:
       the saving is at most eff times the lesser of the sum over its F's of min(tf,
       the costliest backward pass of the device) and the sum over its backward passes
       (B and W apart or BW, whichever saves more) of min(cost, the costliest F). Each
       pass of a pair still takes at least its own cost (the pair lasts at least the
       larger), so only the device-time terms (work, cool-down, warm-up) lose it. */
    double sav = 0;
    if (M->eff > 0) {
      double maxb = 0, maxf = 0, savf = 0, savb = 0;
      for (int k = 0; k < n; k++) {
        int s = ds[k];
        if (st[s].tf > maxf) maxf = st[s].tf;
        if (st[s].tbw > maxb) maxb = st[s].tbw;
        if (M->split_ok && st[s].tb > maxb) maxb = st[s].tb;
        if (M->split_ok && st[s].tw > maxb) maxb = st[s].tw;
      }
      for (int k = 0; k < n; k++) {
        int s = ds[k];
        savf += (double)m * fmin(st[s].tf, maxb);
        double sb = fmin(st[s].tbw, maxf);
        if (M->split_ok && fmin(st[s].tb, maxf) + fmin(st[s].tw, maxf) > sb) sb = fmin(st[s].tb, maxf) + fmin(st[s].tw, maxf);
        savb += (double)m * sb;
      }
      sav = M->eff * fmin(savf, savb);
    }
    work -= sav;
    double v;
    v = hd + work;
    if (v > in->lb_work) in->lb_work = v;
    if (v > lb + 1e-12) { lb = v; in->lb_which = "work of one device after its first pass can start"; in->lb_device = d; }
    /* cool-down: the device's last F or B pass is a backward of its lowest stage s0
       (every microbatch's B(i, s0) comes after its F's and B's of the device's later
       stages); after it, that microbatch's backward chain runs down to stage 0 on
       other devices (with the hops), and at stage 0 its W (when B ran without it) */
    if (n > 0) {
      int s0 = ds[0];
      double fb = 0;
      for (int k = 0; k < n; k++) {
        int s = ds[k];
        double bm = st[s].tbw;
        if (M->split_ok && st[s].tb < bm) bm = st[s].tb;
        fb += (double)m * (st[s].tf + bm);
      }
      fb -= sav;
      double bm0 = st[0].tbw;
      if (M->split_ok && st[0].tb < bm0) bm0 = st[0].tb;
      double chain = s0 > 0 ? tailB[0] - tailB[s0] : back[0] - bm0;
      if (chain < 0) chain = 0;
      v = hd + fb + chain;
      if (v > in->lb_drain) in->lb_drain = v;
      if (v > lb + 1e-12) { lb = v; in->lb_which = "cool-down: a device's forwards and backwards, then the backward chain of its last microbatch to stage 0"; in->lb_device = d; }
    }
    double fcap = knap(n, wt, vf, m, L);
    if (fcap < ftot) {
      v = R + work - fcap;
      if (v > in->lb_ramp) in->lb_ramp = v;
      if (v > lb + 1e-12) { lb = v; in->lb_which = "warm-up: forwards the memory holds before the first backward can start"; in->lb_device = d; }
      double bcap = knap(n, wb, vb, m, L);
      double mid = work - fcap - bcap;
      if (mid > 0) {
        v = R + mid + cool;
        if (v > in->lb_cool) in->lb_cool = v;
        if (v > lb + 1e-12) { lb = v; in->lb_which = "warm-up and cool-down: what the memory holds at both ends"; in->lb_device = d; }
      }
    }
    if (L < INF / 2 && L > 0) {
      v = memint / L;
      if (v > in->lb_memory) in->lb_memory = v;
      if (v > lb + 1e-12) { lb = v; in->lb_which = "memory limit: activations held for their round trip"; in->lb_device = d; }
    }
  }
  in->lower_bound = lb;
  free(head);
  free(back);
  free(tailB);
}

/* ---- search ---- */

typedef struct Search {
  const Model *M;
  SynthCheckFn check;       /* the real check of an order with offload or recomputation */
  Work w;
  SOp *best;                /* [total] the best order so far */
  int64_t *bestn;           /* [P] */
  Result br;
  Policy bp;
  double *bcap;             /* [P] */
  long evals, max_evals;
  int64_t max_steps;        /* model steps the search may take (effort) */
  double t0, tlimit;
  double tshare;            /* the share of tlimit the current phase may use up to */
  int timed_out;
  int seeded;               /* the best order is a seed's (not a policy's) */
  double lb;                /* the lower bound: reaching it ends the search */
  SynthSeedFn seed;         /* compiles a seed into IR (SynthOptions.seed) */
  long ph0, lastimp;        /* candidates at the phase's start and at the best's last improvement */
  long maxrun;              /* the most candidates of the phase before an improvement (debug) */
  int64_t stall;            /* > 0: while a seed's order is the best, the phase ends after this
                               many model steps without a better order (effort 0..2) */
  int64_t stall_from;       /* model steps at the phase's start or the best's last improvement */
  int stalled;              /* the stall rule ended a phase */
} Search;

static int better(Result a, Result b) {
  if (!a.ok) return 0;
  if (!b.ok) return 1;
  double e = 1e-9 * fmax(a.makespan, b.makespan);
  if (a.makespan < b.makespan - e) return 1;
  if (a.makespan > b.makespan + e) return 0;
  return a.peak < b.peak - 1e-9 * fmax(a.peak, b.peak);
}

static int out_of_budget(Search *z) {
  if (z->evals >= z->max_evals || z->w.steps >= z->max_steps) return 1;
  if (z->stall > 0 && z->seeded && z->br.makespan <= z->lb * (1 + SYNTH_STALL_GAP) && z->w.steps - z->stall_from >= z->stall) {
    z->stalled = 1;
    return 1;
  }
  if (z->br.ok && z->br.makespan <= z->lb * (1 + 1e-12)) return 1;   /* at the bound: optimal */
  if (z->tlimit > 0 && now_s() - z->t0 > z->tlimit * z->tshare) { z->timed_out = 1; return 1; }
  return 0;
}

/* The time limit and the bound alone (the seeds run whatever the step budget: they
   are few) */
static int out_of_budget_clock(Search *z) {
  if (z->br.ok && z->br.makespan <= z->lb * (1 + 1e-12)) return 1;   /* at the bound: optimal */
  if (z->tlimit > 0 && now_s() - z->t0 > z->tlimit * z->tshare) { z->timed_out = 1; return 1; }
  return 0;
}

/* The best order just got better: how long the phase went without (debug figures) */
static void note_improvement(Search *z) {
  long base = z->lastimp > z->ph0 ? z->lastimp : z->ph0;
  if (z->evals - base > z->maxrun) z->maxrun = z->evals - base;
  z->lastimp = z->evals;
  z->stall_from = z->w.steps;
}
static void phase_start(Search *z, const char *name) {
  if (name && getenv("PPS_SYNTH_DEBUG"))
    fprintf(stderr, "synth: stall: %s: %ld candidates, last improvement at %ld, longest run before one %ld\n", name,
            z->evals - z->ph0, z->lastimp > z->ph0 ? z->lastimp - z->ph0 : -1, z->maxrun);
  z->ph0 = z->evals;
  z->maxrun = 0;
  z->stall_from = z->w.steps;
}

/* Evaluates p; keeps it when it is the best so far. Returns its figures (not ok
 * when it deadlocks, breaks the limit, or certainly ends after bound: INF for none;
 * a run that ends at bound, with a lower peak, still counts). */
static Result try_policy(Search *z, const Policy *p, double bound) {
  const Model *M = z->M;
  z->evals++;
  Result r = run_policy(M, p, &z->w, bound);
  if (r.ok && r.fit && better(r, z->br)) {
    z->br = r;
    z->bp = *p;
    memcpy(z->bcap, p->cap, sizeof(double) * (size_t)(2 * M->P));
    z->bp.cap = z->bcap;
    z->seeded = 0;
    note_improvement(z);
    memcpy(z->best, z->w.ord, sizeof(SOp) * (size_t)z->w.off[M->P]);
    memcpy(z->bestn, z->w.nord, sizeof(int64_t) * (size_t)M->P);
  }
  if (r.ok && !r.fit) r.ok = 0;
  return r;
}

typedef struct Cand { Policy p; Result r; } Cand;

static void describe(const Model *M, const Policy *p, char *buf, size_t n) {
  static const char *const wm[] = {"W fills idle time", "W right after B", "W fills gaps it fits"};
  static const char *const sel[] = {"oldest microbatch first", "latest stage first", "earliest stage first"};
  double lo = INF, hi = 0, clo = INF, chi = 0;
  for (int d = 0; d < M->P; d++) {
    if (p->cap[d] < lo) lo = p->cap[d];
    if (p->cap[d] > hi) hi = p->cap[d];
    if (p->cap[M->P + d] < clo) clo = p->cap[M->P + d];
    if (p->cap[M->P + d] > chi) chi = p->cap[M->P + d];
  }
  char cut[64] = "";
  if (chi > 0) snprintf(cut, sizeof cut, ", earlier stages capped %g..%g lower", clo, chi);
  if (M->S > M->P)
    snprintf(buf, n, "%s, %s; F: %s, B: %s%s; device caps %g..%g%s", p->fused ? "B and W fused" : "B and W apart",
             p->fused ? "no W" : wm[p->wmode], sel[p->fsel], sel[p->bsel], p->reserve ? ", memory reserved per microbatch" : "",
             lo, hi, cut);
  else
    snprintf(buf, n, "%s, %s; device caps %g..%g", p->fused ? "B and W fused" : "B and W apart",
             p->fused ? "no W" : wm[p->wmode], lo, hi);
}

/* Adopts w's order as the best when it is. */
static void keep_if_better(Search *z, Result r, const char *label, char *policy, size_t n) {
  const Model *M = z->M;
  if (!(r.ok && r.fit && better(r, z->br))) return;
  z->br = r;
  memcpy(z->best, z->w.ord, sizeof(SOp) * (size_t)z->w.off[M->P]);
  memcpy(z->bestn, z->w.nord, sizeof(int64_t) * (size_t)M->P);
  z->seeded = 1;
  snprintf(policy, n, "%s", label);
}

/* A seed: the order of a standard schedule of the same placement (the hand-written
 * building blocks), compiled from its source embedded in ppsc (synth_seed_srcs: the
 * same whatever the environment) with this schedule's P, m and costs, timed on this
 * schedule's (possibly per-stage) costs. */
static void try_seed(Search *z, const IrSchedule *s, const char *file, const char *name,
                     const char *x1, const char *x2, const char *label, char *policy, size_t npol) {
  const Model *M = z->M;
  if (!z->seed || out_of_budget_clock(z)) return;
  SynthSeedReq rq = {file, name, x1, x2, s->ndev, s->nmb, s->tf, s->tb, s->tw, s->tc};
  Arena sa = {0};
  double tq0 = (double)clock() / CLOCKS_PER_SEC;
  IrSchedule *t = z->seed(&sa, &rq);
  if (getenv("PPS_SYNTH_DEBUG")) fprintf(stderr, "synth: %s: compiled in %.3f s cpu\n", label, (double)clock() / CLOCKS_PER_SEC - tq0);
  int ok = t && t->ndev == s->ndev && t->nstage == s->nstage && t->nmb == s->nmb && t->devs;
  for (int k = 0; ok && k < s->nstage; k++)
    if (t->stages[k].device != s->stages[k].device) ok = 0;
  for (int dv = 0; ok && dv < M->P; dv++) {
    int64_t n = 0, capd = z->w.off[dv + 1] - z->w.off[dv];
    for (int k = 0; ok && k < t->devs[dv].nops; k++) {
      const IrOp *op = &t->devs[dv].ops[k];
      if (op->kind > IR_BW || op->mb < 0 || op->mb >= M->m || op->stage < 0 || op->stage >= M->S ||
          M->st[op->stage].device != dv || n >= capd || (!M->split_ok && (op->kind == IR_B || op->kind == IR_W))) {
        ok = 0;   /* (a seed with B and W apart where the model fuses them: not this model's order) */
        break;
      }
      SOp *q = &z->w.ord[z->w.off[dv] + n++];
      q->mb = op->mb; q->stage = op->stage; q->kind = op->kind;
      /* an overlapped pair stays one where it gains (TFB given); without a gain the
         passes run one after the other, which is never slower */
      q->pair = M->eff > 0 && overlap_pair_at(&t->devs[dv], k);
    }
    z->w.nord[dv] = n;
  }
  if (ok) {
    z->evals++;
    keep_if_better(z, eval_order(M, &z->w), label, policy, npol);
  }
  arena_free(&sa);
}

/* Local improvement of the best order: where a device idles before a pass, pull one
 * of the next few passes forward into the gap; where a pass was ready before its
 * predecessor let it start, swap the two. Keeps a move when the order gets faster
 * (or as fast with a lower peak) and stays valid under the limit. */
/* The local search's order: faster, else as fast with the devices ending earlier in
 * sum (a move on a device off the critical path counts: it can make room for a later
 * move that shortens the makespan), else a lower peak. Strict, so no move cycles. */
static int imp_better(Result a, Result b) {
  if (!a.ok) return 0;
  double e = 1e-9 * fmax(a.makespan, b.makespan);
  if (a.makespan < b.makespan - e) return 1;
  if (a.makespan > b.makespan + e) return 0;
  double es = 1e-9 * fmax(a.sumend, b.sumend);
  if (a.sumend < b.sumend - es) return 1;
  if (a.sumend > b.sumend + es) return 0;
  return a.peak < b.peak - 1e-9 * fmax(a.peak, b.peak);
}

/* Local moves from the order start (startn passes per device), what label says
 * produced it; the result is kept when it is the best so far. */
static void improve(Search *z, const SOp *start, const int64_t *startn, const char *label, char *policy, size_t npol) {
  const Model *M = z->M;
  Work *w = &z->w;
  int P = M->P;
  memcpy(w->ord, start, sizeof(SOp) * (size_t)w->off[P]);
  memcpy(w->nord, startn, sizeof(int64_t) * (size_t)P);
  Result cur = eval_order(M, w);
  if (!cur.ok) return;
  /* the timing of the current order, put back after a rejected move (instead of
     timing the order again) */
  int64_t tot = w->off[P];
  double *sst = malloc(sizeof(double) * (size_t)(tot + 1)), *srd = malloc(sizeof(double) * (size_t)(tot + 1));
  if (!sst || !srd) { free(sst); free(srd); return; }
  memcpy(sst, w->ost, sizeof(double) * (size_t)tot);
  memcpy(srd, w->ordy, sizeof(double) * (size_t)tot);
  int moved = 0;
  Result gbest = z->br;
  for (int pass = 0; pass < 50 && !out_of_budget(z); pass++) {
    int improved = 0;
    for (int d = 0; d < P && !out_of_budget(z); d++) {
      for (int64_t k = 1; k < w->nord[d] && !out_of_budget(z); k++) {
        int64_t b = w->off[d];
        /* timing of the current order (eval_order of the last accepted one) */
        double prev_end = w->ost[b + k - 1];
        const SOp *pp = &w->ord[b + k - 1];
        if (k >= 2 && pp[-1].pair) {   /* the second of a pair: the pair's end */
          double c1 = sop_cost(M, pp - 1), c2 = sop_cost(M, pp);
          prev_end += c1 + c2 - M->eff * (c1 < c2 ? c1 : c2);
        } else if (pp->pair) {
          continue;                    /* between the halves of a pair */
        } else {
          prev_end += sop_cost(M, pp);
        }
        double stk = w->ost[b + k], rdk = w->ordy[b + k];
        int64_t lo = -1, hi = -1;
        if (!le(stk, prev_end)) { lo = k; hi = k + 3 < w->nord[d] - 1 ? k + 3 : w->nord[d] - 1; }  /* a gap */
        else if (!le(stk, rdk)) { lo = k - 1; hi = k; }                                             /* delayed */
        if (lo < 0) continue;
        for (int64_t j = lo + 1; j <= hi; j++) {
          /* overlapped pairs stay as they are: no pass of one moves, none comes between */
          int inpair = 0;
          for (int64_t u = lo; u <= j && !inpair; u++)
            if (w->ord[b + u].pair || (u > 0 && w->ord[b + u - 1].pair)) inpair = 1;
          if (inpair) break;
          SOp mv = w->ord[b + j];
          memmove(&w->ord[b + lo + 1], &w->ord[b + lo], sizeof(SOp) * (size_t)(j - lo));
          w->ord[b + lo] = mv;
          z->evals++;
          Result r = eval_order(M, w);
          if (r.ok && r.fit && imp_better(r, cur)) {
            if (better(r, gbest)) { gbest = r; note_improvement(z); }
            cur = r;
            improved = moved = 1;
            memcpy(sst, w->ost, sizeof(double) * (size_t)tot);
            memcpy(srd, w->ordy, sizeof(double) * (size_t)tot);
            break;
          }
          memmove(&w->ord[b + lo], &w->ord[b + lo + 1], sizeof(SOp) * (size_t)(j - lo));
          w->ord[b + j] = mv;
          memcpy(w->ost, sst, sizeof(double) * (size_t)tot);    /* the current order's timing */
          memcpy(w->ordy, srd, sizeof(double) * (size_t)tot);
          if (out_of_budget(z)) break;
        }
      }
    }
    if (!improved) break;
  }
  free(sst);
  free(srd);
  if (moved && better(cur, z->br)) {
    char lab[SYNTH_POLICY_LEN + 32];
    snprintf(lab, sizeof lab, "%s, improved by local moves", label[0] ? label : "list scheduler");
    keep_if_better(z, cur, lab, policy, npol);
  }
}

/* Which standard placement the stage -> device map is (whatever the file called it:
 * an explicit list equal to linear gets linear's seeds): bit 0 linear, bit 1 vshape,
 * bit 2 interleaved(*v). */
static int placement_kinds(const IrSchedule *s, int *v) {
  int P = s->ndev, S = s->nstage, kinds = 0;
  int lin = S == P, vs = S == 2 * P, il = P > 0 && S % P == 0 && S / P >= 2;
  for (int k = 0; k < S; k++) {
    int d = s->stages[k].device;
    if (d != k) lin = 0;
    if (d != (k < P ? k : 2 * P - 1 - k)) vs = 0;
    if (P <= 0 || d != k % P) il = 0;
  }
  *v = il ? S / P : 0;
  if (lin) kinds |= 1;
  if (vs) kinds |= 2;
  if (il) kinds |= 4;
  return kinds;
}

/* Zero Bubble's heuristic (Qi et al., ICLR 2024, section 3.1), as a seed on a
 * placement with one stage per device, B and W apart: warm-up, as many F as the
 * memory (the limit) allows before the first B arrives (the last one may delay that
 * B only with h1); then one F and one B in turn, a W filling a wait of at least its
 * length, or a shorter one that would make this device's idle time the largest of
 * all; a W recycles memory when the limit stops an F; stage s stays at least one F
 * ahead of stage s+1 (with h2 it runs a ready B instead of an F when two or more
 * ahead); when F and B run out, the remaining W. The same rules as the independent
 * reference tests/synth/ref_greedy.awk (mode zb), on this model's per-stage costs. */
static void zb_heuristic(Search *z, int h1, int h2, char *policy, size_t npol) {
  const Model *M = z->M;
  Work *w = &z->w;
  int P = M->P, S = M->S, m = M->m;
  if (S != P || !M->split_ok) return;
  for (int d = 0; d < P; d++) if (M->nst[d] != 1) return;
  double *bub = calloc((size_t)P + 1, sizeof(double));
  char *last = calloc((size_t)P + 1, 1);
  int *bdone = calloc((size_t)P + 1, sizeof(int));
  if (!bub || !last || !bdone) { free(bub); free(last); free(bdone); return; }
  for (int64_t k = 0; k < (int64_t)m * S; k++) w->endF[k] = w->endB[k] = -1;
  memset(w->nF, 0, sizeof(int) * (size_t)S);
  memset(w->nB, 0, sizeof(int) * (size_t)S);
  memset(w->nW, 0, sizeof(int) * (size_t)S);
  int active = 0;
  for (int d = 0; d < P; d++) {
    w->cur[d] = w->held[d] = 0;
    w->left[d] = 3LL * m;
    w->nord[d] = 0;
    active++;
  }
  int ok = 1;
  double worst = 0;
  while (active && ok) {
    double T = INF, next = INF;
    for (int d = 0; d < P; d++) if (w->left[d] && w->cur[d] < T) T = w->cur[d];
    int progress = 0;
    for (int d = 0; d < P; d++) {
      if (!w->left[d]) continue;
      if (w->cur[d] > T) { if (w->cur[d] < next) next = w->cur[d]; continue; }
      int s = M->dst[M->first[d]];
      const IrStage *g = &M->st[s];
      double t = w->cur[d];
      int jf = w->nF[s], jb = w->nB[s], jw = w->nW[s];
      int canF = jf < m && le(w->held[d] + g->act, lim(M, d));
      double rf = canF ? readyF(M, w, jf, s) : INF;
      double rb = jb < jf ? readyB(M, w, jb, s) : INF;
      int fready = canF && le(rf, t), bready = rb < INF && le(rb, t), wok = jw < jb;
      int ahead = s < S - 1 ? jf - w->nF[s + 1] : 1 << 30;
      int kind = -1;
      w->steps++;
      if (jf >= m && jb >= m) { if (wok) kind = IR_W; }
      else if (!bdone[d] && !bready) {
        if (fready && (rb >= INF || le(t + g->tf, rb) || h1)) kind = IR_F;
      } else {
        int pref = last[d] == 'F' ? IR_B : IR_F;
        if (jf >= m) pref = IR_B;
        if (jb >= jf) pref = IR_F;
        if (pref == IR_B && s < S - 1 && canF && ahead < 1) pref = IR_F;
        else if (pref == IR_F && h2 && ahead >= 2 && bready) pref = IR_B;
        if (pref == IR_F && fready) kind = IR_F;
        else if (pref == IR_B && bready) kind = IR_B;
        else if (pref == IR_F && jf < m && !canF && wok) kind = IR_W;
        else {
          double r = pref == IR_F ? rf : rb;
          if (wok && (r >= INF || le(g->tw, r - t) || !le(bub[d] + (r - t), worst))) kind = IR_W;
          else if (pref == IR_F && bready) kind = IR_B;
          else if (pref == IR_B && fready) kind = IR_F;
        }
      }
      if (kind < 0) {
        double f = INF;
        if (canF && rf > t && rf < f) f = rf;
        if (rb > t && rb < f) f = rb;
        if (f < next) next = f;
        continue;
      }
      int mb = kind == IR_F ? jf : kind == IR_B ? jb : jw;
      int64_t slot = (int64_t)mb * S + s;
      double c;
      if (kind == IR_F) { c = g->tf; w->endF[slot] = t + c; w->nF[s]++; w->held[d] += g->act; last[d] = 'F'; }
      else if (kind == IR_B) { c = g->tb; w->endB[slot] = t + c; w->nB[s]++; w->held[d] -= g->b_free * g->act; bdone[d] = 1; last[d] = 'B'; }
      else { c = g->tw; w->nW[s]++; w->held[d] -= (1 - g->b_free) * g->act; last[d] = 'W'; }
      SOp *o = &w->ord[w->off[d] + w->nord[d]++];
      o->mb = mb; o->stage = s; o->kind = (uint8_t)kind; o->pair = 0;
      w->cur[d] = t + c;
      if (--w->left[d] == 0) active--;
      progress = 1;
    }
    if (progress) continue;
    if (next >= INF) { ok = 0; break; }
    for (int d = 0; d < P; d++)
      if (w->left[d] && w->cur[d] <= T) {
        bub[d] += next - w->cur[d];
        if (bub[d] > worst) worst = bub[d];   /* the largest idle time so far (bub only grows) */
        w->cur[d] = next;
      }
  }
  free(bub); free(last); free(bdone);
  if (!ok) return;
  char lab[96];
  snprintf(lab, sizeof lab, "seed: Zero Bubble heuristic (h1 %d, h2 %d)", h1, h2);
  z->evals++;
  keep_if_better(z, eval_order(M, w), lab, policy, npol);
}

/* ---- V-shape building blocks, repeated and squeezed (a seed) ----
 *
 * V-Half and V-Min as the controllable-memory paper builds them (Qi et al., "Pipeline
 * Parallelism with Controllable Memory", NeurIPS 2024): the building block gives each
 * device's four passes of one microbatch a slot (F of its first stage, F of its second,
 * B of its second, B of its first), the block repeats every 6 slots, and then the
 * repeated slots are squeezed: in slot order, each pass outside the steady phase moves
 * to the earliest free slot its inputs allow (every pass one slot, no hop) that does
 * not raise its device's peak; W passes fill the free slots after their B. Squeezed
 * twice (first with the W passes placed, then without them), retimed as soon as
 * possible in unit slots after each, W placed again (those of the second stage
 * first). The order is what the slots give per device; the model times it on the
 * schedule's costs. The stdlib schedules v_half.pps and v_min.pps write the same blocks
 * with their own squeeze (docs/language.md), which at TC > 0 can be slower (P = 8,
 * m = 16, TF = TB = TW = 1, TC = 0.1, limit 5: 62.9 against this order's 61.3). */
typedef struct VBlock {
  int P, m;
  int *sl;                  /* [P][6][2m]: slots of list t of device d, microbatch order */
  int *n;                   /* [P][6]: the lists' lengths */
} VBlock;
/* lists: 0 F of the first stage (d), 1 F of the second (2P-1-d), 2 B of the second,
   3 B of the first, then W: 4 (one list, 2m, unsplit) or 4 and 5 (split: W of the
   second stage, W of the first) */
static int *vb_list(VBlock *v, int d, int t) { return v->sl + ((size_t)d * 6 + (size_t)t) * 2 * (size_t)v->m; }
static int *vb_n(VBlock *v, int d, int t) { return &v->n[d * 6 + t]; }

/* W passes into the free slots after their B (split: one list per stage, the second
   stage's first) */
static void vb_put_w(VBlock *v, int d, int split) {
  int p[4] = {0, 0, 0, 0}, wc[2] = {0, 0}, bound = 0;
  *vb_n(v, d, 4) = *vb_n(v, d, 5) = 0;
  for (int t = 0; t < 4; t++) if (*vb_n(v, d, t) && vb_list(v, d, t)[*vb_n(v, d, t) - 1] > bound) bound = vb_list(v, d, t)[*vb_n(v, d, t) - 1];
  int i;
  for (i = 0; i <= bound; i++) {
    int bt = -1, bv = 0;
    for (int t = 0; t < 4; t++)
      if (p[t] < *vb_n(v, d, t) && (bt < 0 || vb_list(v, d, t)[p[t]] < bv)) { bt = t; bv = vb_list(v, d, t)[p[t]]; }
    if (bt >= 0 && bv == i) {
      p[bt]++;
      if (bt >= 2) wc[split ? bt - 2 : 0]++;
    } else {
      for (int w = 0; w < 2; w++)
        if (wc[w]) { vb_list(v, d, 4 + w)[(*vb_n(v, d, 4 + w))++] = i; wc[w]--; break; }
    }
  }
  i = bound;
  for (int w = 0; w < 2; w++)
    while (wc[w] > 0) { vb_list(v, d, 4 + w)[(*vb_n(v, d, 4 + w))++] = ++i; wc[w]--; }
}

/* The peak of device d's slots (F +1, W -1; without W lists each B's W takes the next
   free slot) */
static int vb_mem(VBlock *v, int d, int nt) {
  static const int mem[5] = {1, 1, 0, 0, -1};
  int p[5] = {0, 0, 0, 0, 0}, bound = 0, cur = 0, res = 0, wc = 0, has_w = nt > 4;
  for (int t = 0; t < nt; t++) if (*vb_n(v, d, t) && vb_list(v, d, t)[*vb_n(v, d, t) - 1] > bound) bound = vb_list(v, d, t)[*vb_n(v, d, t) - 1];
  for (int i = 0; i <= bound; i++) {
    int bt = -1, bv = 0;
    for (int t = 0; t < nt; t++)
      if (p[t] < *vb_n(v, d, t) && (bt < 0 || vb_list(v, d, t)[p[t]] < bv)) { bt = t; bv = vb_list(v, d, t)[p[t]]; }
    if (bt >= 0 && bv == i) {
      p[bt]++;
      cur += mem[bt];
      if (bt >= 2 && bt < 4) wc++;
    } else if (!has_w && wc) { cur--; wc--; }
    if (cur > res) res = cur;
  }
  return res;
}

typedef struct VbOp { int slot, d, t, i; } VbOp;
static int vbop_cmp(const void *a, const void *b) {
  const VbOp *x = a, *y = b;
  if (x->slot != y->slot) return x->slot < y->slot ? -1 : 1;
  if (x->d != y->d) return x->d < y->d ? -1 : 1;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}
/* every pass of lists 0..nt-1, in slot order (ties: device, list, microbatch) */
static int vb_ops(VBlock *v, int nt, VbOp *ops) {
  int k = 0;
  for (int d = 0; d < v->P; d++)
    for (int t = 0; t < nt; t++)
      for (int i = 0; i < *vb_n(v, d, t); i++) { ops[k].slot = vb_list(v, d, t)[i]; ops[k].d = d; ops[k].t = t; ops[k].i = i; k++; }
  qsort(ops, (size_t)k, sizeof *ops, vbop_cmp);
  return k;
}

/* Retimes the slots as soon as possible, each pass one slot, no hop: the start of each.
   0, or -1 when a pass comes before its input (not a valid slot order). */
static int vb_eager(VBlock *v, int nt, VbOp *ops, int *end) {
  int P = v->P, m2 = 2 * v->m;
  int k = vb_ops(v, nt, ops);
  for (size_t q = 0; q < (size_t)P * 6 * (size_t)m2; q++) end[q] = -1;
#define VE(d, t, i) end[((size_t)(d) * 6 + (size_t)(t)) * (size_t)m2 + (size_t)(i)]
  int *last = calloc((size_t)P, sizeof(int));
  if (!last) return -1;
  for (int d = 0; d < P; d++) last[d] = -1;
  int bad = 0;
  for (int q = 0; q < k && !bad; q++) {
    int d = ops[q].d, t = ops[q].t, i = ops[q].i, dep = 0, x;
    if ((t == 0 || t == 2) && d > 0) { x = VE(d - 1, t, i); if (x < 0) bad = 1; else if (x > dep) dep = x; }
    if ((t == 1 || t == 3) && d < P - 1) { x = VE(d + 1, t, i); if (x < 0) bad = 1; else if (x > dep) dep = x; }
    if (t > 0 && t < 4) { x = VE(d, t - 1, i); if (x < 0) bad = 1; else if (x > dep) dep = x; }
    if (i > 0) { x = VE(d, t, i - 1); if (x < 0) bad = 1; else if (x > dep) dep = x; }
    if (last[d] >= 0 && last[d] > dep) dep = last[d];
    VE(d, t, i) = last[d] = dep + 1;
  }
  free(last);
  if (bad) return -1;
  for (int d = 0; d < P; d++)
    for (int t = 0; t < nt; t++)
      for (int i = 0; i < *vb_n(v, d, t); i++) vb_list(v, d, t)[i] = VE(d, t, i) - 1;
#undef VE
  return 0;
}

/* One squeeze (see above): with_w places the W passes first and moves them too, and
   squeezes the warm-up; without, only what follows the last warm-up F. Then the W
   passes are placed and the slots retimed. 0, or -1 when the slots are not valid. */
static int vb_squeeze(VBlock *v, int with_w, VbOp *ops, int *end, char *occ, int nslot) {
  int P = v->P, m = v->m;
  int nt = 4;
  if (with_w) { for (int d = 0; d < P; d++) vb_put_w(v, d, 0); nt = 5; }
  int cap = 0;
  for (int d = 0; d < P; d++) { int x = vb_mem(v, d, nt); if (x > cap) cap = x; }
  int k = vb_ops(v, nt, ops);
  memset(occ, 0, (size_t)P * (size_t)nslot);
  int phase = 0;
  for (int q = 0; q < k; q++) {
    int d = ops[q].d, t = ops[q].t, i = ops[q].i, nx = ops[q].slot;
    int *L = vb_list(v, d, t);
    if (nx >= nslot) return -1;
    if (t == 3 && d == 0 && phase == 0) phase = 1;
    if (phase == 1) {
      if (t == 0 && i == m - 1) phase = 2;
      occ[(size_t)d * nslot + nx] = 1;
      continue;
    }
    if (phase == 0 && !with_w) { occ[(size_t)d * nslot + nx] = 1; continue; }
    int dep = -1;
    if ((t == 0 || t == 2) && d > 0 && vb_list(v, d - 1, t)[i] > dep) dep = vb_list(v, d - 1, t)[i];
    if ((t == 1 || t == 3) && d < P - 1 && vb_list(v, d + 1, t)[i] > dep) dep = vb_list(v, d + 1, t)[i];
    if (t > 0 && t < 4 && vb_list(v, d, t - 1)[i] > dep) dep = vb_list(v, d, t - 1)[i];
    if (t == 4) {   /* the i-th B of the device, in slot order */
      const int *b2 = vb_list(v, d, 2), *b3 = vb_list(v, d, 3);
      int n2 = *vb_n(v, d, 2), n3 = *vb_n(v, d, 3), a = 0, b = 0, x = -1;
      for (int r = 0; r <= i && (a < n2 || b < n3); r++) x = (b >= n3 || (a < n2 && b2[a] <= b3[b])) ? b2[a++] : b3[b++];
      if (x > dep) dep = x;
    }
    if (i > 0 && L[i - 1] > dep) dep = L[i - 1];
    dep++;
    if (dep > nx) return -1;
    int ok = 0;
    for (int pt = dep; pt < nx && !ok; pt++) {
      if (occ[(size_t)d * nslot + pt]) continue;
      L[i] = pt;
      if (vb_mem(v, d, nt) <= cap) ok = 1;
    }
    if (!ok) L[i] = nx;
    occ[(size_t)d * nslot + L[i]] = 1;
  }
  if (!with_w) for (int d = 0; d < P; d++) vb_put_w(v, d, 0);
  return vb_eager(v, 5, ops, end);
}

/* The seed: kind 0 V-Half, 1 V-Min. Only on vshape with B and W apart. */
static void vblock_seed(Search *z, int kind, char *policy, size_t npol) {
  const Model *M = z->M;
  Work *w = &z->w;
  int P = M->P, m = M->m;
  if (M->S != 2 * P || !M->split_ok || P < 2 || m < 1) return;
  for (int d = 0; d < P; d++)
    if (M->nst[d] != 2 || M->dst[M->first[d]] != d || M->dst[M->first[d] + 1] != 2 * P - 1 - d) return;
  size_t nl = (size_t)P * 6;
  VBlock vb, *v = &vb;
  int nslot = 8 * m + 8 * P + 16;   /* past every slot: the block spans under 6P + 3, 6 slots a
                                       microbatch, W passes after the last B at worst */
  int *sl = malloc(sizeof(int) * nl * 2 * (size_t)m), *end = malloc(sizeof(int) * nl * 2 * (size_t)m);
  VbOp *ops = malloc(sizeof(VbOp) * (size_t)P * 6 * (size_t)m);
  char *occ = malloc((size_t)P * (size_t)nslot);
  int *nn = malloc(sizeof(int) * nl);
  if (!nn || !sl || !end || !ops || !occ) goto done;
  v->P = P; v->m = m; v->sl = sl; v->n = nn;
  for (int d = 0; d < P; d++) {
    int b[4];
    if (kind == 0) {
      int g = P % 2 == 0 ? 3 : 0;
      b[0] = 2 * d; b[1] = 3 * P - d - 2; b[2] = 3 * P + g + 2 * d - 1; b[3] = 6 * P + g - d - 2;
    } else {
      int g = P % 3 == 0 ? 2 : 0;
      b[0] = d; b[1] = 2 * P - d - 1; b[2] = 2 * P + g + d; b[3] = 4 * P + g - d - 1;
    }
    for (int t = 0; t < 6; t++) *vb_n(v, d, t) = t < 4 ? m : 0;
    for (int t = 0; t < 4; t++)
      for (int i = 0; i < m; i++) vb_list(v, d, t)[i] = b[t] + 6 * i;
  }
  if (vb_squeeze(v, 1, ops, end, occ, nslot)) goto done;
  for (int d = 0; d < P; d++) *vb_n(v, d, 4) = 0;
  if (vb_squeeze(v, 0, ops, end, occ, nslot)) goto done;
  for (int d = 0; d < P; d++) vb_put_w(v, d, 1);
  int k = vb_ops(v, 6, ops);
  for (int d = 0; d < P; d++) w->nord[d] = 0;
  for (int q = 0; q < k; q++) {
    int d = ops[q].d, t = ops[q].t;
    if (w->nord[d] >= w->off[d + 1] - w->off[d]) goto done;
    SOp *o = &w->ord[w->off[d] + w->nord[d]++];
    o->mb = ops[q].i;
    o->stage = (t == 0 || t == 3 || t == 5) ? d : 2 * P - 1 - d;
    o->kind = (uint8_t)(t < 2 ? IR_F : t < 4 ? IR_B : IR_W);
    o->pair = 0;
  }
  z->evals++;
  keep_if_better(z, eval_order(M, w), kind == 0 ? "seed: V-Half (the paper's block, repeated and squeezed)"
                                                 : "seed: V-Min (the paper's block, repeated and squeezed)", policy, npol);
done:
  free(nn); free(sl); free(end); free(ops); free(occ);
}

/* ---- ZB-V's greedy (a seed) ----
 *
 * The V-shape zero-bubble schedule as its authors generate it (Qi et al., "Pipeline
 * Parallelism with Controllable Memory", NeurIPS 2024, ZB-V): each device takes one
 * forward of its first stage in device order; then, from the last device back, a
 * device runs first-stage forwards (on every device up to it) while they end before
 * the second-stage forward it waits for arrives (so the warm-up follows TC) and its
 * memory keeps room for the V's second leg; the devices after it then even out their
 * forward counts, alternating the two stages. In the steady phase a round gives every
 * device a B (the second stage's first when its input is there, then the first stage's)
 * and an F (first or second stage, whichever has its input and is behind), W passes
 * filling a wait for an input when they fit in it, or when the wait would make this
 * device's idle time the largest, and whenever the memory limit stops an F or B. The
 * whole is run again with each device's idle time from the previous run as what it may
 * keep while that lowers the largest; every run is a candidate (with and without W
 * filling before the first stage's B and before an F). Memory as the model counts it
 * (F + act, B - b_free act, W the rest), on the model's per-stage costs and hops. */
typedef struct Zv {
  const Model *M;
  Work *w;
  int *cnt;                 /* [P][6]: passes run per (kind, leg): F0 F1 B0 B1 W0 W1 */
  double *bub;              /* [P] idle time after the first forward */
  const double *appr;       /* [P] the previous run's idle times (NULL: none) */
  double maxappr;
  int *wq, *wh, *wt;        /* [P][2m] pending W (leg), head, tail per device */
  int bad;
} Zv;
/* the stage of a pass: F leg 0 is the device's first stage (d), leg 1 its second;
   backward passes run the second stage first: B/W leg 0 is 2P-1-d, leg 1 is d */
static int zv_stage(const Model *M, int cat, int leg, int d) {
  int first = cat == 0 ? leg == 0 : leg == 1;
  return first ? d : 2 * M->P - 1 - d;
}
static double zv_maxbub(const Zv *v, int d) {
  double x = 0;
  for (int e = 0; e < v->M->P; e++) if (v->bub[e] > x) x = v->bub[e];
  if (d >= 0 && v->appr && v->maxappr - v->appr[d] > x) x = v->maxappr - v->appr[d];
  return x;
}
static void zv_put(Zv *v, int cat, int leg, int d) {
  const Model *M = v->M;
  Work *w = v->w;
  if (v->bad) return;
  int s = zv_stage(M, cat, leg, d), i = v->cnt[d * 6 + cat * 2 + leg];
  const IrStage *g = &M->st[s];
  if (i >= M->m) { v->bad = 1; return; }
  double c = cat == 0 ? g->tf : cat == 1 ? g->tb : g->tw, nob = w->cur[d] + c, t = nob;
  int64_t slot = (int64_t)i * M->S + s;
  if (cat < 2) {
    double r = cat == 0 ? readyF(M, w, i, s) : readyB(M, w, i, s);
    if (r >= INF) { v->bad = 1; return; }
    if (r + c > t) t = r + c;
  } else if (w->endB[slot] < 0) { v->bad = 1; return; }
  if (cat == 0 && !le(w->held[d] + g->act, lim(M, d))) { v->bad = 1; return; }
  if (v->cnt[d * 6] > 0) v->bub[d] += t - nob;
  if (cat == 0) { w->endF[slot] = t; w->held[d] += g->act; }
  else if (cat == 1) {
    w->endB[slot] = t; w->held[d] -= g->b_free * g->act;
    v->wq[(size_t)d * 2 * M->m + (size_t)v->wt[d]++] = leg;
  } else w->held[d] -= (1 - g->b_free) * g->act;
  w->cur[d] = t;
  SOp *o = &w->ord[w->off[d] + w->nord[d]++];
  o->mb = i; o->stage = s; o->kind = (uint8_t)(cat == 0 ? IR_F : cat == 1 ? IR_B : IR_W); o->pair = 0;
  v->cnt[d * 6 + cat * 2 + leg]++;
}
static int zv_pending(const Zv *v, int d) { return v->wh[d] < v->wt[d]; }
static void zv_put_w(Zv *v, int d) {
  if (!zv_pending(v, d)) { v->bad = 1; return; }
  zv_put(v, 2, v->wq[(size_t)d * 2 * v->M->m + (size_t)v->wh[d]++], d);
}
/* end of the pass a device waits for plus its hop (-1 + hop when it has not run,
   as the generator reads an unset time) */
static double zv_arrival(const Zv *v, int cat, int leg, int d) {
  const Model *M = v->M;
  const Work *w = v->w;
  int P = M->P, s, i;
  if (cat == 0) {
    if (leg == 0) { if (d == 0) return -INF; s = d - 1; i = v->cnt[d * 6]; return (w->endF[(int64_t)i * M->S + s] < 0 ? -1 : w->endF[(int64_t)i * M->S + s]) + M->cf[s]; }
    if (d == P - 1) return -INF;
    s = 2 * P - 2 - d; i = v->cnt[d * 6 + 1];
    return (w->endF[(int64_t)i * M->S + s] < 0 ? -1 : w->endF[(int64_t)i * M->S + s]) + M->cf[s];
  }
  if (leg == 1) { if (d == P - 1) return -INF; s = d + 1; i = v->cnt[d * 6 + 3]; }
  else { if (d == 0) return -INF; s = 2 * P - d; i = v->cnt[d * 6 + 2]; }
  return (w->endB[(int64_t)i * M->S + s] < 0 ? -1 : w->endB[(int64_t)i * M->S + s]) + M->cb[s];
}
/* W passes before a pass of device d that waits for arrival a (-INF: it waits for none) */
static void zv_fill(Zv *v, int d, double a, int last_rule) {
  const Model *M = v->M;
  while (zv_pending(v, d) && a > -INF && !v->bad) {
    const IrStage *g = &M->st[zv_stage(M, 2, v->wq[(size_t)d * 2 * M->m + (size_t)v->wh[d]], d)];
    if (!(a >= v->w->cur[d] + g->tw)) break;
    zv_put_w(v, d);
  }
  double x = a > -INF ? a : -1;
  if (zv_pending(v, d) && x - v->w->cur[d] > zv_maxbub(v, d) - v->bub[d] && last_rule) zv_put_w(v, d);
}
static int zv_run(Zv *v, int fill_f, int fill_b) {
  const Model *M = v->M;
  Work *w = v->w;
  int P = M->P, m = M->m;
  for (int64_t k = 0; k < (int64_t)m * M->S; k++) w->endF[k] = w->endB[k] = -1;
  memset(v->cnt, 0, sizeof(int) * 6 * (size_t)P);
  for (int d = 0; d < P; d++) { w->cur[d] = w->held[d] = 0; v->bub[d] = 0; v->wh[d] = v->wt[d] = 0; w->nord[d] = 0; }
  v->bad = 0;
  for (int d = 0; d < P; d++) zv_put(v, 0, 0, d);
  for (int d = P - 1; d >= 0 && !v->bad; d--) {
    if (d < P - 1) {
      double a = w->endF[2 * P - 2 - d] + M->cf[2 * P - 2 - d];   /* F(0) of the second stage of d + 1 */
      const IrStage *g = &M->st[d];
      for (int guard = 0; guard < m && !v->bad && le(w->held[d] + g->act * (2 + 2 * d), lim(M, d)) &&
                          le(w->cur[d] + g->tf, a) && v->cnt[d * 6] < m; guard++)
        for (int j = 0; j <= d; j++) zv_put(v, 0, 0, j);
    }
    zv_put(v, 0, 1, d);
  }
  int leg = 0;
  for (int d = 1; d < P && !v->bad; d++) {
    for (int guard = 0; guard < 4 * m && !v->bad; guard++) {
      const int *c = v->cnt + d * 6, *u = v->cnt + (d - 1) * 6;
      if (!(c[0] + c[1] < u[0] + u[1] || (c[1] <= u[1] && u[1] < m))) break;
      for (int j = P - 1; j >= d; j--) if (v->cnt[j * 6 + leg] < m) zv_put(v, 0, leg, j);
      leg = 1 - leg;
    }
  }
  int *rk = malloc(sizeof(int) * 2 * (size_t)P);   /* [P] this round's order, then [P] each device's leg */
  if (!rk) return -1;
  for (int round = 0; round < 2 * m && !v->bad; round++) {
    for (int d = 0; d < P && !v->bad; d++)
      while (!le(w->held[d], lim(M, d)) && !v->bad) zv_put_w(v, d);
    /* which B each device runs this round: its first stage's (leg 1) once the input
       is there (or the second stage's are done), else its second stage's (leg 0);
       leg-1 devices go first, from the last device, then leg-0 ones */
    int nr = 0;
    for (int d = 0; d < P; d++) {
      const int *c = v->cnt + d * 6;
      rk[P + d] = c[3] >= c[2] ? 0 : d == P - 1 ? 1 : (w->endB[(int64_t)c[3] * M->S + d + 1] >= 0 || c[2] >= m);
    }
    for (int d = P - 1; d >= 0; d--) if (rk[P + d]) rk[nr++] = d * 2 + 1;
    for (int d = 0; d < P; d++) if (!rk[P + d]) rk[nr++] = d * 2;
    for (int q = 0; q < nr && !v->bad; q++) {
      int d = rk[q] / 2, lg = rk[q] % 2;
      zv_fill(v, d, zv_arrival(v, 1, lg, d), lg == 1 || fill_b);
      zv_put(v, 1, lg, d);
    }
    for (int d = 0; d < P && !v->bad; d++) {
      const int *c = v->cnt + d * 6;
      if (c[1] >= m) continue;
      int item = -1;
      if (c[1] >= c[0]) item = 0;
      else if (d == P - 1) item = 1;
      else if (w->endF[(int64_t)c[1] * M->S + 2 * P - 2 - d] >= 0) item = 1;
      else if (c[0] < m && (d == 0 || w->endF[(int64_t)c[0] * M->S + d - 1] >= 0)) item = 0;
      if (item < 0) continue;
      const IrStage *g = &M->st[zv_stage(M, 0, item, d)];
      while (!le(w->held[d] + g->act, lim(M, d)) && !v->bad) zv_put_w(v, d);
      zv_fill(v, d, zv_arrival(v, 0, item, d), fill_f);
      zv_put(v, 0, item, d);
    }
  }
  free(rk);
  for (int d = 0; d < P && !v->bad; d++) while (zv_pending(v, d) && !v->bad) zv_put_w(v, d);
  return v->bad ? -1 : 0;
}
static void zbv_seed(Search *z, char *policy, size_t npol) {
  const Model *M = z->M;
  int P = M->P, m = M->m;
  if (M->S != 2 * P || !M->split_ok || P < 2) return;
  for (int d = 0; d < P; d++)
    if (M->nst[d] != 2 || M->dst[M->first[d]] != d || M->dst[M->first[d] + 1] != 2 * P - 1 - d) return;
  Zv v;
  memset(&v, 0, sizeof v);
  v.M = M; v.w = &z->w;
  v.cnt = calloc(6 * (size_t)P, sizeof(int));
  v.bub = calloc((size_t)P, sizeof(double));
  double *appr = calloc((size_t)P, sizeof(double));
  v.wq = calloc((size_t)P * 2 * (size_t)m + 1, sizeof(int));
  v.wh = calloc((size_t)P, sizeof(int));
  v.wt = calloc((size_t)P, sizeof(int));
  if (v.cnt && v.bub && appr && v.wq && v.wh && v.wt) {
    for (int f = 0; f < 4 && !out_of_budget_clock(z); f++) {
      v.appr = NULL;
      v.maxappr = -1;
      double prev = INF;
      for (int it = 0; it < 64; it++) {
        if (zv_run(&v, f & 1, f >> 1)) break;
        double mb = zv_maxbub(&v, -1);
        z->evals++;
        keep_if_better(z, eval_order(M, &z->w), "seed: ZB-V's greedy (TC-aware warm-up)", policy, npol);
        if (!(mb < prev) || (v.appr && !(mb < v.maxappr))) break;
        prev = mb;
        memcpy(appr, v.bub, sizeof(double) * (size_t)P);
        v.appr = appr;
        v.maxappr = mb;
      }
    }
  }
  free(v.cnt); free(v.bub); free(appr); free(v.wq); free(v.wh); free(v.wt);
}

/* The seeds the published generators give, built here (no compilation: they cost
   little, so they run before the policies, and an order at the lower bound ends the
   search there) */
static void generator_seeds(Search *z, const IrSchedule *s, char *policy, size_t n) {
  int v = 0, kinds = placement_kinds(s, &v);
  for (int h = 0; h < 4 && !out_of_budget_clock(z); h++) zb_heuristic(z, h & 1, h >> 1, policy, n);
  if (kinds & 2) {
    for (int k = 0; k < 2 && !out_of_budget_clock(z); k++) vblock_seed(z, k, policy, n);
    if (!out_of_budget_clock(z)) zbv_seed(z, policy, n);
  }
}

/* The standard schedules of the placement, compiled from the embedded stdlib */
static void seeds(Search *z, const IrSchedule *s, char *policy, size_t n) {
  const Model *M = z->M;
  char x[64], lab[96];
  int v = 0, kinds = placement_kinds(s, &v);
  if (kinds & 1) {
    try_seed(z, s, "1f1b.pps", "one_f_one_b", "checks=false", NULL, "seed: 1F1B (stdlib)", policy, n);
    try_seed(z, s, "gpipe.pps", "gpipe", "checks=false", NULL, "seed: GPipe (stdlib)", policy, n);
    /* every MEM from P to 2P up to P = 16, else 17 of them evenly spread (each seed
       is a compilation of m P passes: at P = 1024 all of them would take minutes) */
    int nmem = M->P <= 16 ? M->P + 1 : 17;
    for (int k = 0; k < nmem; k++) {
      int mem = M->P <= 16 ? M->P + k : M->P + (int)(((int64_t)k * M->P + 8) / 16);
      snprintf(x, sizeof x, "MEM=%d", mem);
      snprintf(lab, sizeof lab, "seed: ZB-H2 at MEM = %d (stdlib zb_h2; MEM = P is ZB-H1)", mem);
      try_seed(z, s, "zb_h2.pps", "zb_h2", x, "checks=false", lab, policy, n);
    }
  }
  if (kinds & 2) {
    try_seed(z, s, "zb_v.pps", "zb_v", "checks=false", NULL, "seed: ZB-V (stdlib)", policy, n);
    for (int sq = 0; sq < 2; sq++) {
      const char *q = sq ? "squeezed=false" : "squeezed=true";
      try_seed(z, s, "v_half.pps", "v_half", "checks=false", q, sq ? "seed: V-Half unsqueezed (stdlib)" : "seed: V-Half (stdlib)", policy, n);
      try_seed(z, s, "v_min.pps", "v_min", "checks=false", q, sq ? "seed: V-Min unsqueezed (stdlib)" : "seed: V-Min (stdlib)", policy, n);
      try_seed(z, s, "1f1b_v.pps", "one_f_one_b_v", "checks=false", q, sq ? "seed: 1F1B-V unsqueezed (stdlib)" : "seed: 1F1B-V (stdlib)", policy, n);
    }
    /* with a gain from the overlap (TFB), DualPipeV's pairs are kept and timed as pairs */
    if (s->tfb > 0) snprintf(x, sizeof x, "TFB=%.17g", s->tfb);
    try_seed(z, s, "dualpipe_v.pps", "dualpipe_v", "checks=false", s->tfb > 0 ? x : NULL, "seed: DualPipeV (stdlib)", policy, n);
  }
  if (kinds & 4) {
    snprintf(x, sizeof x, "v=%d", v);
    try_seed(z, s, "interleaved_1f1b.pps", "interleaved_1f1b", x, "checks=false", "seed: interleaved 1F1B (stdlib)", policy, n);
  }
}

/* The whole search for the model z->M (policies, seeds, local moves): the best order
 * into z->best, its figures in z->br (br.ok = 0: none found). Returns -1 when out of
 * memory. seedpol receives what produced the order when it was not a policy. */
static int search_all(Search *z, const IrSchedule *s, const SynthOptions *o, char *seedpol, size_t npol) {
  const Model *M = z->M;
  int P = M->P, S = M->S;
  double budget;
  long evals;
  z->br.ok = 0;
  z->br.makespan = INF;
  z->seeded = 0;
  z->ph0 = z->lastimp = z->evals;
  z->maxrun = 0;
  /* the seeds first (an order at the lower bound ends the search before any policy):
     under a time limit the generators' seeds may use up to half of it, the stdlib's
     (their guarantee) up to 80%, then the policies what is left of the first half,
     the local moves the rest */
  z->tshare = 0.5;
  generator_seeds(z, s, seedpol, npol);
  if (getenv("PPS_SYNTH_DEBUG")) fprintf(stderr, "synth: generators' seeds: %ld candidates, %.3f s, best %g\n", z->evals, now_s() - z->t0, z->br.makespan);
  z->tshare = 0.8;
  seeds(z, s, seedpol, npol);
  if (getenv("PPS_SYNTH_DEBUG")) fprintf(stderr, "synth: stdlib seeds: %ld candidates, %.3f s, best %g\n", z->evals, now_s() - z->t0, z->br.makespan);
  z->tshare = 0.5;
  /* budget: candidates, from effort and size (deterministic); effort 3 has effort 2's
     budget without the early end, 4 the most */
  double stallp = 0, stallm = 0, runsteps = 0;
  {
    int effort = o->effort < 0 ? 0 : o->effort > 4 ? 4 : o->effort;
    int units = effort == 3 ? 2 : effort;   /* 3: effort 2 without the early end */
    budget = SYNTH_STEPS_PER_EFFORT * (units + 1);
    evals = 200 + 800L * units;
    z->max_evals = z->evals + 200 + 550L * units;   /* the policies' candidates */
    z->max_steps = z->w.steps + (int64_t)budget;
    if (effort < 3 && !o->no_stall) {
      stallp = SYNTH_STALL_DESCENT * (effort + 1);
      stallm = SYNTH_STALL_MOVES * (effort + 1);
    }
  }
  z->stall = 0;
  phase_start(z, NULL);
  {
    int multi = S > P;
    int nf = (M->split_ok && !o->fused) ? 2 : 1;
    /* phase 1: every policy with all caps at the limit, on a device with several
       stages its earlier stages at the limit or one activation below it (room kept
       for the later stages of the microbatches it admitted) */
    int ncand = 0, capc = 3 * 3 * 3 * 2 * 2 * 2;
    Cand *cs = calloc((size_t)capc, sizeof *cs);
    double *capbuf = calloc((size_t)(capc + 4) * (size_t)(2 * P + 1), sizeof(double));
    if (!cs || !capbuf) { free(cs); free(capbuf); return -1; }
    for (int fu = 0; fu < nf; fu++) {
      int fused = o->fused || fu == 1;
      for (int wm = 0; wm < (fused ? 1 : 3); wm++)
        for (int rs = multi ? 1 : 0; rs >= 0; rs--)
          for (int fsel = 0; fsel < (multi ? 3 : 1); fsel++)
            for (int bsel = 0; bsel < (multi ? 3 : 1); bsel++)
              for (int fc = 0; fc < (multi ? 2 : 1); fc++) {
                if (ncand >= capc) continue;
                Cand *c = &cs[ncand];
                c->p.cap = capbuf + (size_t)ncand * (size_t)(2 * P + 1);
                for (int d = 0; d < P; d++) {
                  c->p.cap[d] = lim(M, d);
                  c->p.cap[P + d] = fc && M->nst[d] > 1 && le(M->lmin[d], lim(M, d) - M->unit[d]) ? M->unit[d] : 0;
                }
                c->p.wmode = wm; c->p.fsel = fsel; c->p.bsel = bsel; c->p.reserve = rs; c->p.fused = fused;
                ncand++;
              }
    }
    int64_t ph1steps = z->w.steps;
    for (int k = 0; k < ncand; k++) {
      if (out_of_budget(z) && z->br.ok) break;   /* a seed may have reached the bound */
      /* a cut that no admission of its uncut twin (the candidate before) came near
         changes nothing: the same order, not run again (nor kept twice) */
      int cut = 0;
      for (int d = 0; d < P; d++) if (cs[k].p.cap[P + d] > 0) cut = 1;
      if (cut && k > 0 && !cs[k].p.reserve && cs[k - 1].r.ok && !cs[k - 1].p.reserve) {
        int same = 1;
        for (int d = 0; d < P && same; d++)
          if (!le(z->w.peak[d], cs[k].p.cap[d] - cs[k].p.cap[P + d] * (M->nst[d] - 1))) same = 0;
        if (same) { cs[k].r.ok = 0; continue; }
      }
      cs[k].r = try_policy(z, &cs[k].p, INF);
    }
    /* phase 2: coordinate descent over the per-device caps from the best few policies
       and from 1F1B-like cap profiles (cap falls with the device index); below effort
       3, while a seed's order is the best, it ends when SYNTH_STALL_DESCENT (effort + 1)
       policy runs' worth of model steps bring nothing better (the local moves likewise
       after SYNTH_STALL_MOVES (effort + 1)) */
    if (ncand > 0) runsteps = (double)(z->w.steps - ph1steps) / ncand;   /* one policy run */
    if (stallp > 0) z->stall = (int64_t)(stallp * runsteps) + 1;
    z->stall_from = z->w.steps;
    /* the policies best first (ties: in order), one of each result (makespan and
       peak): the three best, then the next ones while the budget lasts */
    int keep = 0;
    int *order = calloc((size_t)ncand + 1, sizeof(int));
    if (!order) { free(cs); free(capbuf); return -1; }
    for (int k = 0; k < ncand; k++) {
      if (!cs[k].r.ok) continue;
      int dup = 0;
      for (int u = 0; u < keep && !dup; u++)
        if (!better(cs[k].r, cs[order[u]].r) && !better(cs[order[u]].r, cs[k].r)) dup = 1;
      if (dup) continue;
      int at = keep;
      while (at > 0 && better(cs[k].r, cs[order[at - 1]].r)) { order[at] = order[at - 1]; at--; }
      order[at] = k;
      keep++;
    }
    double *cap = calloc((size_t)(2 * P + 1), sizeof(double));
    double *cpk = calloc((size_t)P + 1, sizeof(double));   /* per-device peaks of cur */
    if (!cap || !cpk) { free(cap); free(cpk); free(order); free(cs); free(capbuf); return -1; }
    for (int t = 0; t < keep && !out_of_budget(z); t++) {
      if (order[t] < 0) continue;
      for (int prof = 0; prof < 3 && !out_of_budget(z); prof++) {   /* flat, falling, falling by halves */
        Policy p = cs[order[t]].p;
        p.cap = cap;
        for (int d = 0; d < P; d++) {
          double c = lim(M, d);
          if (prof == 1) c = lim(M, d) - M->unit[d] * d;
          if (prof == 2) c = lim(M, d) - M->unit[d] * (d / 2);
          c = floor(c / M->unit[d] + 1e-9) * M->unit[d];
          if (c < M->lmin[d]) c = M->lmin[d];
          if (c > lim(M, d)) c = lim(M, d);
          cap[d] = c;
          cap[P + d] = cs[order[t]].p.cap[P + d];
          if (cap[P + d] > 0 && !le(M->lmin[d], c - cap[P + d])) cap[P + d] = 0;
        }
        Result cur = try_policy(z, &p, INF);
        if (prof > 0 && !cur.ok) continue;
        if (prof == 0) cur = cs[order[t]].r;
        memcpy(cpk, z->w.peak, sizeof(double) * (size_t)P);
        int improved = 1;
        while (improved && !out_of_budget(z)) {
          improved = 0;
          for (int d = 0; d < P && !out_of_budget(z); d++) {
            /* the device's cap, then (several stages) its cut, one unit either way */
            for (int mv = 0; mv < (M->nst[d] > 1 ? 4 : 2); mv++) {
              int q = mv < 2 ? d : P + d;
              double old = cap[q], nv = old + (mv % 2 ? 1 : -1) * M->unit[d];
              if (mv < 2 && (!le(M->lmin[d], nv - cap[P + d]) || !le(nv, lim(M, d)))) continue;
              if (mv >= 2 && (nv < -1e-12 || !le(M->lmin[d], cap[d] - nv))) continue;
              if (nv < 0) nv = 0;
              /* a lower cap, or a larger cut, still above every admission of cur
                 changes nothing (without reservation, which admits by lmin) */
              if (!p.reserve && (mv == 0 || mv == 3)) {
                double lowest = mv == 0 ? nv - cap[P + d] * (M->nst[d] - 1) : cap[d] - nv * (M->nst[d] - 1);
                if (le(cpk[d], lowest)) continue;
              }
              cap[q] = nv;
              Result r = try_policy(z, &p, cur.makespan);   /* kept only when better than cur */
              if (better(r, cur)) { cur = r; improved = 1; memcpy(cpk, z->w.peak, sizeof(double) * (size_t)P); break; }
              cap[q] = old;
              if (out_of_budget(z)) break;
            }
          }
        }
      }
    }
    free(cap);
    free(cpk);
    free(order);
    free(cs);
    free(capbuf);
  }
  int dbg = getenv("PPS_SYNTH_DEBUG") != NULL;
  if (dbg) fprintf(stderr, "synth: seeds and policies: %ld candidates, %lld steps, %.3f s, best %g\n", z->evals, (long long)z->w.steps, now_s() - z->t0, z->br.makespan);
  z->tshare = 1;
  if (!z->seeded && z->br.ok) describe(M, &z->bp, seedpol, npol);
  /* the policy search had half of the budget; local moves the rest */
  z->max_steps = z->w.steps + (int64_t)budget;
  z->max_evals = z->evals + 4 * evals;
  phase_start(z, "policies");
  z->stall = stallm > 0 ? (int64_t)(stallm * runsteps) + 1 : 0;
  if (z->br.ok) {
    char lab[SYNTH_POLICY_LEN];
    snprintf(lab, sizeof lab, "%s", seedpol);
    improve(z, z->best, z->bestn, lab, seedpol, npol);   /* copies its start first */
  }
  phase_start(z, "local moves");
  z->stall = 0;
  if (dbg) fprintf(stderr, "synth: local moves: %ld candidates, %lld steps, %.3f s, best %g\n", z->evals, (long long)z->w.steps, now_s() - z->t0, z->br.makespan);
  return 0;
}

/* `offload auto`: the best order of z under the stage array st (its offload fractions
 * set), run through the real pipeline (lowering inserts the offload and reload ops,
 * verify, sim) on a scratch copy of s. Returns 1 when it is valid with its peak within
 * the limit and its host memory within the host limit; *mk = its makespan. */
static int real_check(Arena *a, const IrSchedule *s, const Search *z, IrStage *st, double ratio, int k, int q, double L,
                      double *mk) {
  const Model *M = z->M;
  IrSchedule t = *s;
  t.stages = st;
  t.offload.enabled = ratio > 0;
  t.offload.ratio = ratio > 0 ? ratio : 0;
  t.offload.stage_lo = 0;
  t.offload.stage_hi = k;
  t.offload.mb_lo = 0;
  t.offload.mb_hi = q;
  t.nexpects = 0;
  t.synth = NULL;
  t.total_ops = 0;
  t.noverlap = 0;
  t.devs = arena_alloc(a, sizeof(IrDevice) * (size_t)(M->P + 1));
  memset(t.devs, 0, sizeof(IrDevice) * (size_t)(M->P + 1));
  for (int d = 0; d < M->P; d++)
    for (int64_t x = 0; x < z->bestn[d]; x++) {
      const SOp *so = &z->best[z->w.off[d] + x];
      IrOp *op = ir_push(a, &t, d);
      op->kind = so->kind; op->mb = so->mb; op->stage = so->stage;
      if (so->pair) { op->flags |= IR_FLAG_OVERLAP; t.noverlap++; }
    }
  double fig[3] = {-1, -1, -1};
  const char *why = NULL;
  int valid = z->check && z->check(a, &t, fig, &why);
  if (getenv("PPS_SYNTH_DEBUG"))
    fprintf(stderr, "synth: offload ratio %g stages 0..%d microbatches 0..%d: %s%s%s, peak %g, makespan %g\n", ratio, k, q,
            !z->check ? "not checked (no check function)" : valid ? "valid" : "not valid", why ? ": " : "", why ? why : "",
            fig[1], fig[0]);
  if (!valid) return 0;
  if (!le(fig[1], L)) return 0;
  if (s->offload.host_limit >= 0 && !le(fig[2], s->offload.host_limit)) return 0;
  *mk = fig[0];
  return 1;
}

int synth_run(Arena *a, Diag *dg, IrSchedule *s, const SynthOptions *o) {
  double t0 = now_s();
  int P = s->ndev, S = s->nstage, m = s->nmb;
  SynthInfo *info = arena_alloc(a, sizeof *info);
  memset(info, 0, sizeof *info);
  s->synth = info;
  info->limit = s->mem_limit;
  /* one candidate costs about passes x devices model steps (every event looks at
     every device): bounded so that a search always ends */
  if ((double)m * S * 3 > 5e7 || (double)m * S * 3 * P > 2e9) {
    diag_error(dg, o->span, "synthesize: %d microbatches on %d stages and %d devices is too large to synthesise (%.3g passes, %.3g pass-devices; at most 5e7 and 2e9)",
               m, S, P, (double)m * S * 3, (double)m * S * 3 * P);
    return -1;
  }
  Model M;
  memset(&M, 0, sizeof M);
  M.P = P; M.S = S; M.m = m;
  M.st = s->stages;
  M.split_ok = !o->fused;
  M.relook = getenv("PPS_SYNTH_RELOOK") != NULL;
  M.offmb = m;
  M.H = s->offload.host_limit >= 0 ? s->offload.host_limit : INF;
  M.eff = s->overlap_eff;
  M.cf = calloc((size_t)S + 1, sizeof(double));
  M.cb = calloc((size_t)S + 1, sizeof(double));
  M.nst = calloc((size_t)P + 1, sizeof(int));
  M.first = calloc((size_t)P + 1, sizeof(int));
  M.dst = calloc((size_t)S + 1, sizeof(int));
  M.lmin = calloc((size_t)P + 1, sizeof(double));
  M.unit = calloc((size_t)P + 1, sizeof(double));
  M.drop = calloc((size_t)P + 1, sizeof(double));
  int *fill = calloc((size_t)P + 1, sizeof(int));
  /* a stated recompute policy (recompute.c), searched as the offload auto candidate
     is: F keeps act less what it drops, BW (fused: a B apart from its W would hold
     the rebuilt part until the W) lasts the forward again longer, and each device's
     limit is less the most one of its BW rebuilds (one pass at a time) */
  IrStage *rcst = NULL;
  double *rcd = NULL;
  if (!o->offload_auto && recompute_any(s)) {
    rcst = arena_alloc(a, sizeof(IrStage) * (size_t)(S + 1));
    rcd = arena_alloc(a, sizeof(double) * (size_t)(P + 1));
    memset(rcd, 0, sizeof(double) * (size_t)(P + 1));
    for (int st = 0; st < S; st++) {
      IrOp b = {.kind = IR_BW, .stage = st, .mb = 0};
      double dr = recompute_dropped(s, st), rt = recompute_time(s, &b);
      rcst[st] = s->stages[st];
      rcst[st].act -= dr;
      rcst[st].tb += rt;
      rcst[st].tbw += rt;
      rcst[st].recompute = 0;
      int d = s->stages[st].device;
      if (d >= 0 && d < P && dr > rcd[d]) rcd[d] = dr;
    }
    M.st = rcst;
    M.split_ok = 0;
  }
  Search z;
  memset(&z, 0, sizeof z);
  z.check = o->check;
  int rc = -1;
  if (!M.cf || !M.cb || !M.nst || !M.first || !M.dst || !M.lmin || !M.unit || !M.drop || !fill) goto oom;
  for (int st = 0; st < S; st++) {
    if (st + 1 < S && s->stages[st].device != s->stages[st + 1].device) M.cf[st] = s->tc;
    if (st > 0 && s->stages[st].device != s->stages[st - 1].device) M.cb[st] = s->tc;
    M.nst[s->stages[st].device]++;
  }
  {   /* a device without a stage has nothing to order: the placement is not one synthesis can use */
    int nempty = 0, firstempty = -1;
    for (int d = 0; d < P; d++)
      if (!M.nst[d]) { if (firstempty < 0) firstempty = d; nempty++; }
    if (nempty) {
      diag_error(dg, S > 0 ? s->stages[0].span : o->span,
                 "synthesize: the placement leaves %d of the %d devices without a stage (device %d is the first); every device needs one",
                 nempty, P, firstempty);
      diag_note(dg, o->span, "the order is synthesised here");
      goto done;
    }
  }
  for (int d = 1; d < P; d++) M.first[d] = M.first[d - 1] + M.nst[d - 1];
  for (int st = 0; st < S; st++) {
    int d = s->stages[st].device;
    M.dst[M.first[d] + fill[d]++] = st;
    M.lmin[d] += M.st[st].act;
    if (M.unit[d] <= 0 || (M.st[st].act > 0 && M.st[st].act < M.unit[d])) M.unit[d] = M.st[st].act;
  }
  double need = 0, allmem = 0;
  for (int d = 0; d < P; d++) {
    if (M.lmin[d] + (rcd ? rcd[d] : 0) > need) need = M.lmin[d] + (rcd ? rcd[d] : 0);
    allmem += M.lmin[d] * m;
    if (M.unit[d] <= 0) M.unit[d] = 1;
  }
  if (o->offload_auto) {   /* everything offloaded: one activation in use at a time */
    need = 0;
    for (int st = 0; st < S; st++)
      if (s->stages[st].act > need) need = s->stages[st].act;
  }
  info->min_limit = need;
  /* the limit of each device: the stated one (activation units), and, when model { }
     gives the bytes of a unit and hardware { memory } the device's bytes, what that
     memory holds beside the device's weights, gradients and optimizer state */
  {
    double Ls = s->mem_limit >= 0 ? s->mem_limit : allmem + 1, hi = -INF;
    const IrDerived *x = &s->derived;
    int bytes = x->bytes && x->memory > 0 && x->static_bytes && x->unit_bytes > 0;
    info->bytes_lo = INF;
    info->bytes_hi = -INF;
    for (int d = 0; d < P; d++) {
      double l = Ls;
      if (bytes) {
        double lb = (x->memory - x->static_bytes[d]) / x->unit_bytes;
        if (lb < info->bytes_lo) info->bytes_lo = lb;
        if (lb > info->bytes_hi) info->bytes_hi = lb;
        if (lb < l) l = lb;
      }
      M.drop[d] = l;   /* the device's limit, for now */
      if (l > hi) hi = l;
    }
    info->bytes = bytes;
    M.L = hi;
    for (int d = 0; d < P; d++) M.drop[d] = M.L - M.drop[d];
    /* the least each device needs (offload auto: one activation at a time) */
    int bad = -1;
    double badneed = 0, worst = 0;
    for (int d = 0; d < P; d++) {
      double nd = M.lmin[d] + (rcd ? rcd[d] : 0);
      if (o->offload_auto) {
        nd = 0;
        for (int k = 0; k < M.nst[d]; k++)
          if (s->stages[M.dst[M.first[d] + k]].act > nd) nd = s->stages[M.dst[M.first[d] + k]].act;
      }
      if (!le(nd, lim(&M, d)) && (bad < 0 || nd - lim(&M, d) > worst)) { bad = d; badneed = nd; worst = nd - lim(&M, d); }
    }
    if (bad >= 0) {
      char stl[128];
      size_t n = 0;
      stl[0] = 0;
      for (int k = 0; k < M.nst[bad] && n < sizeof stl - 16; k++)
        n += (size_t)snprintf(stl + n, sizeof stl - n, "%s%d", k ? (k == M.nst[bad] - 1 ? " and " : ", ") : "", M.dst[M.first[bad] + k]);
      char room[256];
      if (bytes && lim(&M, bad) < Ls)
        snprintf(room, sizeof room, "device %d has room for %.4g activation units (hardware.memory %.4g GB less %.4g GB of weights, gradients and optimizer state, at %.4g GB a unit)",
                 bad, lim(&M, bad), x->memory / 1e9, x->static_bytes[bad] / 1e9, x->unit_bytes / 1e9);
      else
        snprintf(room, sizeof room, "memory limit %g", lim(&M, bad));
      if (o->offload_auto)
        diag_error(dg, o->span,
                   "synthesize: %s is below %g, the least any order can reach even offloading everything: device %d runs a pass of a stage that keeps %g",
                   room, badneed, bad, badneed);
      else
        diag_error(dg, o->span,
                   "synthesize: %s is below %g, the least any order can reach: device %d must hold the activations of stage%s %s of one microbatch at once%s",
                   room, badneed, bad, M.nst[bad] > 1 ? "s" : "", stl, rcd ? " (recomputed: what F keeps, and the part one BW rebuilds)" : "");
      if (bytes && lim(&M, bad) < Ls) diag_note(dg, x->memory_span, "hardware.memory is set here");
      goto done;
    }
  }
  for (int d = 0; rcd && d < P; d++) M.drop[d] += rcd[d];
  {
    double keepL = M.L;
    if (o->offload_auto || s->offload.enabled) M.L = INF;   /* offload can take memory pressure away: no memory terms */
    lower_bound(&M, info);
    M.L = keepL;
  }

  /* the search */
  int64_t total = 0;
  z.M = &M;
  z.seed = o->seed;
  z.w.off = calloc((size_t)P + 1, sizeof(int64_t));
  z.w.nord = calloc((size_t)P + 1, sizeof(int64_t));
  z.bestn = calloc((size_t)P + 1, sizeof(int64_t));
  if (!z.w.off || !z.w.nord || !z.bestn) goto oom;
  for (int d = 0; d < P; d++) {
    z.w.off[d] = total;
    total += (int64_t)m * M.nst[d] * 3;
  }
  z.w.off[P] = total;
  int64_t ms = (int64_t)m * S;
  z.w.endF = malloc(sizeof(double) * (size_t)(ms + 1));
  z.w.endB = malloc(sizeof(double) * (size_t)(ms + 1));
  z.w.nF = calloc((size_t)S + 1, sizeof(int));
  z.w.nB = calloc((size_t)S + 1, sizeof(int));
  z.w.nW = calloc((size_t)S + 1, sizeof(int));
  z.w.cur = calloc((size_t)P + 1, sizeof(double));
  z.w.held = calloc((size_t)P + 1, sizeof(double));
  z.w.resv = calloc((size_t)P + 1, sizeof(double));
  z.w.peak = calloc((size_t)P + 1, sizeof(double));
  z.w.left = calloc((size_t)P + 1, sizeof(int64_t));
  z.w.ord = malloc(sizeof(SOp) * (size_t)(total + 1));
  z.w.ost = malloc(sizeof(double) * (size_t)(total + 1));
  z.w.ordy = malloc(sizeof(double) * (size_t)(total + 1));
  z.w.qend = malloc(sizeof(double) * (size_t)(total + 1));
  z.w.qamt = malloc(sizeof(double) * (size_t)(total + 1));
  z.w.qh = calloc((size_t)P + 1, sizeof(int64_t));
  z.w.qt = calloc((size_t)P + 1, sizeof(int64_t));
  z.w.eng = calloc((size_t)P + 1, sizeof(double));
  z.w.host = calloc((size_t)P + 1, sizeof(double));
  z.w.rem = calloc((size_t)P + 1, sizeof(double));
  z.w.wq = calloc((size_t)P + 1, sizeof(int));
  z.w.inq = calloc((size_t)P + 1, 1);
  z.w.cvalid = calloc((size_t)P + 1, 1);
  z.w.cwake = calloc((size_t)P + 1, sizeof(double));
  z.w.cfut = calloc((size_t)P + 1, sizeof(double));
  z.best = malloc(sizeof(SOp) * (size_t)(total + 1));
  z.bcap = calloc((size_t)(2 * P + 1), sizeof(double));
  if (!z.w.endF || !z.w.endB || !z.w.nF || !z.w.nB || !z.w.nW || !z.w.cur || !z.w.held || !z.w.resv ||
      !z.w.peak || !z.w.left || !z.w.ord || !z.w.ost || !z.w.ordy || !z.w.qend || !z.w.qamt || !z.w.qh || !z.w.qt || !z.w.eng || !z.w.host || !z.w.rem || !z.w.wq || !z.w.inq || !z.w.cvalid || !z.w.cwake || !z.w.cfut || !z.best || !z.bcap) goto oom;
  z.br.ok = 0;
  z.br.makespan = INF;
  z.t0 = t0;
  z.tlimit = o->time_limit;
  z.lb = info->lower_bound;
  char seedpol[SYNTH_POLICY_LEN] = "";
  /* a stated offload policy: the model keeps every activation on the device (an
     upper bound on what the lowered order holds, wherever lowering puts the reloads) */
  IrStage *mst = arena_alloc(a, sizeof(IrStage) * (size_t)(S + 1));
  memcpy(mst, M.st, sizeof(IrStage) * (size_t)S);
  for (int st = 0; st < S; st++) mst[st].offload = 0;
  M.st = mst;
  if (!o->offload_auto) {
    SynthOptions of = *o;
    of.fused |= rcst != NULL;   /* recomputed: BW fused (see rcst) */
    if (search_all(&z, s, &of, seedpol, sizeof seedpol)) goto oom;
  } else {
    /* offload auto: no offload, then a ratio of the activations of the first k stages
       (the ones held longest) of the first half of the microbatches or of all of them,
       each searched and run through the real pipeline; the fastest valid one wins,
       the least offloading among equals */
    SOp *keep = malloc(sizeof(SOp) * (size_t)(total + 1));
    int64_t *keepn = calloc((size_t)P + 1, sizeof(int64_t));
    double *lmin0 = calloc((size_t)P + 1, sizeof(double));
    if (!keep || !keepn || !lmin0) { free(keep); free(keepn); free(lmin0); goto oom; }
    memcpy(lmin0, M.lmin, sizeof(double) * (size_t)P);
    double bestmk = INF, bestr = 0;
    int bestk = 0, bestq = m, ks[6], nks = 0;
    Result bestres = {INF, 0, 0, 0, 0};
    char bestpol[SYNTH_POLICY_LEN] = "";
    int fracs[] = {1, 2, 3, 4};   /* k = S/4, S/2, 3S/4, S */
    for (int q = 0; q < 4; q++) {
      int k = (S * fracs[q] + 3) / 4;
      if (k < 1) k = 1;
      if (nks == 0 || ks[nks - 1] != k) ks[nks++] = k;
    }
    SynthOptions oc = *o;
    for (int cq = -1; cq < 4 * nks; cq++) {
      int c = cq < 0 ? -1 : cq / 2;
      double r = c < 0 ? 0 : (c % 2 == 0 ? 0.5 : 1);
      int k = c < 0 ? 0 : ks[c / 2];
      int qn = cq < 0 ? m : cq % 2 == 0 ? (m + 1) / 2 : m;   /* microbatches 0..qn-1 offloaded */
      if (cq >= 0 && cq % 2 == 0 && qn == m) continue;
      M.offmb = qn;
      for (int st = 0; st < S; st++) mst[st].offload = st < k ? r : 0;
      /* the least each device needs with this offload (a microbatch not offloaded
         needs what it needs without) */
      for (int d = 0; d < P; d++) {
        double keepsum = 0, back = 0;
        for (int q = 0; q < M.nst[d]; q++) {
          const IrStage *g = &mst[M.dst[M.first[d] + q]];
          keepsum += g->act * (1 - g->offload);
          if (g->act * g->offload > back) back = g->act * g->offload;
        }
        M.lmin[d] = qn < m ? lmin0[d] : keepsum + back;
      }
      /* the copies in flight (lowering issues reloads ahead of their B, and an offload
         leaves only when its copy ends) are not in the model: besides the limit itself,
         search under the limit less one and two offloaded activations, and keep what
         the real pipeline finds valid */
      double rlmax = 0, Lreal = M.L;
      for (int st = 0; st < S; st++)
        if (mst[st].offload * mst[st].act > rlmax) rlmax = mst[st].offload * mst[st].act;
      for (int mf = 0; mf < (r > 0 ? 3 : 1); mf++) {
        M.L = Lreal - mf * rlmax;
        int feasible = 1;
        for (int d = 0; d < P; d++) if (!le(M.lmin[d], lim(&M, d))) feasible = 0;
        if (!feasible) continue;
        oc.effort = c < 0 ? o->effort : 0;
        oc.no_stall = c >= 0;   /* the candidates' own searches: effort 0's whole budget */
        char pol[SYNTH_POLICY_LEN] = "";
        if (search_all(&z, s, &oc, pol, sizeof pol)) { M.L = Lreal; free(keep); free(keepn); free(lmin0); goto oom; }
        double mk;
        int ok = z.br.ok && real_check(a, s, &z, mst, r, k, qn, Lreal, &mk);
        if (!ok) continue;
        if (!le(bestmk, mk)) {
          bestmk = mk; bestr = r; bestk = k; bestq = qn; bestres = z.br;
          memcpy(keep, z.best, sizeof(SOp) * (size_t)total);
          memcpy(keepn, z.bestn, sizeof(int64_t) * (size_t)P);
          snprintf(bestpol, sizeof bestpol, "%s; offload auto: %s", pol[0] ? pol : (z.seeded ? "seed" : "policy"),
                   r > 0 ? "" : "nothing offloaded");
          if (r > 0) {
            size_t n = strlen(bestpol);
            snprintf(bestpol + n, sizeof bestpol - n, "ratio %g of stages 0..%d, microbatches 0..%d", r, k, qn);
          }
        }
      }
      M.L = Lreal;
    }
    /* recomputation as a candidate (compiler/recompute.c): stages 0..k recomputed
       whole. The search model keeps only the input after F and runs TF again in B;
       the activation a B rebuilds is not in its memory terms, so it searches under the
       limit less one and two rebuilt activations, and the real pipeline (its sim
       models the rebuild) decides: it wins only where it is strictly faster than
       every offload candidate (its cost, TF per recomputed B, against the copies').
       Searched with fused BW passes: a B apart from its W would hold the rebuilt
       activation until the W, which the model's memory terms cannot say */
    M.offmb = m;
    int bestrc = 0, split0 = M.split_ok;
    M.split_ok = 0;
    oc.fused = 1;
    IrStage *rst = arena_alloc(a, sizeof(IrStage) * (size_t)(S + 1));
    for (int c = 0; c < nks; c++) {
      int k = ks[c];
      double dmax = 0;
      for (int st = 0; st < S; st++) {
        rst[st] = s->stages[st];
        rst[st].offload = 0;
        rst[st].recompute = st < k ? 1 : 0;
        mst[st] = rst[st];
        double in = rst[st].input < 0 ? 0 : rst[st].input > 1 ? 1 : rst[st].input;
        double drop = st < k ? (1 - in) * rst[st].act : 0;
        mst[st].act -= drop;
        if (st < k) { mst[st].tb += rst[st].tf; mst[st].tbw += rst[st].tf; }
        mst[st].recompute = 0;
        if (drop > dmax) dmax = drop;
      }
      for (int d = 0; d < P; d++) {
        M.lmin[d] = 0;
        for (int q = 0; q < M.nst[d]; q++) M.lmin[d] += mst[M.dst[M.first[d] + q]].act;
      }
      double Lreal = M.L;
      for (int mf = 1; mf <= 2; mf++) {
        M.L = Lreal - mf * dmax;
        int feasible = 1;
        for (int d = 0; d < P; d++) if (!le(M.lmin[d], lim(&M, d))) feasible = 0;
        if (!feasible) continue;
        oc.effort = 0;
        oc.no_stall = 1;
        char pol[SYNTH_POLICY_LEN] = "";
        if (search_all(&z, s, &oc, pol, sizeof pol)) { M.L = Lreal; free(keep); free(keepn); free(lmin0); goto oom; }
        double mk;
        int ok = z.br.ok && real_check(a, s, &z, rst, 0, 0, m, Lreal, &mk);
        if (getenv("PPS_SYNTH_DEBUG"))
          fprintf(stderr, "synth: recompute stages 0..%d under %g: search %s, real %s, makespan %g\n", k, M.L,
                  z.br.ok ? "ok" : "none", ok ? "valid" : "not valid", ok ? mk : -1);
        if (!ok || le(bestmk, mk)) continue;
        bestmk = mk; bestr = 0; bestk = k; bestrc = 1; bestres = z.br;
        memcpy(keep, z.best, sizeof(SOp) * (size_t)total);
        memcpy(keepn, z.bestn, sizeof(int64_t) * (size_t)P);
        snprintf(bestpol, sizeof bestpol, "%s; offload auto: recompute stages 0..%d", pol[0] ? pol : (z.seeded ? "seed" : "policy"), k);
      }
      M.L = Lreal;
    }
    memcpy(mst, s->stages, sizeof(IrStage) * (size_t)S);
    memcpy(M.lmin, lmin0, sizeof(double) * (size_t)P);
    M.split_ok = split0;
    if (bestmk < INF) {
      memcpy(z.best, keep, sizeof(SOp) * (size_t)total);
      memcpy(z.bestn, keepn, sizeof(int64_t) * (size_t)P);
      z.br = bestres;
      z.br.makespan = bestmk;   /* the real pipeline's (copies included) */
      z.seeded = 1;
      snprintf(seedpol, sizeof seedpol, "%s", bestpol);
      if (bestrc) {
        s->recompute.enabled = 1;
        s->recompute.ratio = 1;
        s->recompute.stage_lo = 0;
        s->recompute.stage_hi = bestk;
        s->recompute.span = o->span;
        for (int st = 0; st < S; st++) s->stages[st].recompute = st < bestk ? 1 : 0;
      }
      if (bestr > 0) {
        s->offload.enabled = 1;
        s->offload.ratio = bestr;
        s->offload.stage_lo = 0;
        s->offload.stage_hi = bestk;
        s->offload.mb_lo = 0;
        s->offload.mb_hi = bestq;
        s->offload.span = o->span;
        for (int st = 0; st < S; st++) s->stages[st].offload = st < bestk ? bestr : 0;
      }
    } else {
      z.br.ok = 0;
    }
    free(keep); free(keepn); free(lmin0);
  }
  if (!z.br.ok) {
    diag_error(dg, o->span, "synthesize: no order found under the memory limit %g (the least any order can reach is %g)", M.L, need);
    goto done;
  }
  /* the chosen order into the IR */
  for (int d = 0; d < P; d++) {
    for (int64_t k = 0; k < z.bestn[d]; k++) {
      const SOp *q = &z.best[z.w.off[d] + k];
      IrOp *op = ir_push(a, s, d);
      op->kind = q->kind;
      op->mb = q->mb;
      op->stage = q->stage;
      op->span = o->span;
      if (q->pair) { op->flags |= IR_FLAG_OVERLAP; s->noverlap++; }
    }
  }
  info->makespan = z.br.makespan;
  info->peak = z.br.peak;
  info->fused = z.bp.fused;
  info->candidates = z.evals;
  if (getenv("PPS_SYNTH_DEBUG")) fprintf(stderr, "synth: %lld model steps\n", (long long)z.w.steps);
  info->timed_out = z.timed_out;
  info->stalled = z.stalled;
  if (z.seeded) {
    snprintf(info->policy, sizeof info->policy, "%s", seedpol);
    info->fused = 1;
    for (int d = 0; d < P; d++)
      for (int64_t k = 0; k < z.bestn[d]; k++)
        if (z.best[z.w.off[d] + k].kind == IR_W) info->fused = 0;
  } else {
    describe(&M, &z.bp, info->policy, sizeof info->policy);
  }
  info->gap = info->lower_bound > 0 ? info->makespan / info->lower_bound - 1 : 0;
  if (fabs(info->gap) < 1e-9) info->gap = 0;
  /* the bound holds for every order: one above the order found is a bug in it */
  if (info->gap < 0)
    diag_warning(dg, o->span, "synthesize: internal error: the lower bound %.17g exceeds the makespan %.17g of the order found; the bound is not a proof here (please report)",
                 info->lower_bound, info->makespan);
  rc = 0;
  goto done;
oom:
  diag_error(dg, o->span, "synthesize: out of memory");
done:
  info->seconds = now_s() - t0;
  free(M.cf); free(M.cb); free(M.nst); free(M.first); free(M.dst); free(M.lmin); free(M.unit); free(M.drop); free(fill);
  free(z.w.off); free(z.w.nord); free(z.bestn); free(z.w.endF); free(z.w.endB); free(z.w.nF); free(z.w.nB);
  free(z.w.nW); free(z.w.cur); free(z.w.held); free(z.w.resv); free(z.w.peak); free(z.w.left); free(z.w.ord); free(z.w.ost); free(z.w.ordy); free(z.w.qend); free(z.w.qamt); free(z.w.qh); free(z.w.qt); free(z.w.eng); free(z.w.host); free(z.w.rem); free(z.w.wq); free(z.w.inq); free(z.w.cvalid); free(z.w.cwake); free(z.w.cfut);
  free(z.best); free(z.bcap);
  return rc;
}
