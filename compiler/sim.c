/* sim.c: the as-soon-as-possible simulator of a lowered schedule, and the memory
 * accounting over program order. verify.c uses the same executor to find deadlocks.
 *
 * Timing model (every time in the file's cost unit):
 *  - each device runs its ops in program order; an op starts when the previous one
 *    ended and its inputs are there;
 *  - F, B, W, BW cost the stage's tf, tb, tw, tbw (already scaled by the front end);
 *    an overlapped pair (IR_FLAG_OVERLAP, overlap.c) starts when both halves may and
 *    both end together, after overlap_cost; the pair holds both halves' memory;
 *    IF, IB, S, T cost the vocabulary t_if, t_ib, t_s, t_t;
 *  - send costs nothing on the sender; the k-th recv of a channel (ordered device
 *    pair, FIFO) completes at max(now, end of the k-th send + TC); a posted recv
 *    (IR_FLAG_POSTED) costs nothing where it stands, and its consumer starts no
 *    earlier than that arrival (waiting for the send like a recv, if it has not run);
 *  - coll is a barrier over all devices: it starts when the last device reaches its
 *    k-th collective and lasts t_coll on every device; under `vocab async` it is
 *    issued at no cost instead, runs on the collective lane (one per schedule, the
 *    collectives in sequence order) from the time the last device issued it and the
 *    lane is free, for t_coll, and only its consumers wait for its end (F(i, 0),
 *    T(i), the last stage's B(i), IB(i): sim_coll_needs); S stays a barrier;
 *  - S(i) begins with a broadcast of the last stage's output from that stage's device
 *    (the root, where it follows F(i, S-1) in program order), a collective like coll
 *    (the runtime's broadcast blocks every device, root included, until all have
 *    reached it; S and coll share one sequence): S(i) starts TC after the last device
 *    reaches it and lasts t_s on every device;
 *  - offload/reload are issued at no cost and run on the device's copy engine of
 *    their direction (device-to-host, host-to-device: two engines, each with its own
 *    time, offload_time and reload_time), one copy at a time in issue order, taking
 *    that time times the offloaded fraction; B/BW wait for their reload's copy to end.
 *    A reload issued before its offload's copy ended cancels it, as the runtime does
 *    (docs/runtime.md): no copy back (the reload ends where it is issued), the
 *    activation never left the device (neither the offload's free nor the reload's
 *    take-back counts over time; over program order both do), and the offload's
 *    copy still runs to its end;
 *  - host links (hardware { devices_per_host_link k; duplex_bandwidth }, costmodel.c):
 *    the copies of devices d with the same d / k share one link. A copy's time alone
 *    is its work; while copies run on the link, each direction's speed (1, or the
 *    duplex fraction while the other direction runs too) is split evenly between its
 *    running copies (a fluid model: the copies' ends follow from their starts). The
 *    copies' starts depend on their durations (engine order, reload after offload,
 *    B waiting for its reload), so the run is repeated with the durations the link
 *    gives until they no longer change (link_iterate; at most 64 runs).
 * The executor is a worklist over devices: a device runs until it blocks (a recv
 * whose send has not run, a barrier or an S others have not reached), and is woken
 * when the device it waits on moves. O(ops + wakeups).
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

double sim_cost(const IrSchedule *s, const IrOp *op) {
  const IrStage *st = (op->stage >= 0 && op->stage < s->nstage) ? &s->stages[op->stage] : NULL;
  switch ((IrKind)op->kind) {
  case IR_F: return st ? st->tf : 0;
  case IR_B: return st ? st->tb + recompute_time(s, op) : 0;   /* recompute.c */
  case IR_W: return st ? st->tw : 0;
  case IR_BW: return st ? st->tbw + recompute_time(s, op) : 0;
  case IR_IF: return s->vocab.t_if;
  case IR_IB: return s->vocab.t_ib;
  case IR_S: return s->vocab.t_s;
  case IR_T: return s->vocab.t_t;
  default: return 0;
  }
}

static int is_compute(int k) { return k <= IR_T; }

void sim_links(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimLinks *L) {
  memset(L, 0, sizeof *L);
  int64_t n = ix->total;
  int P = ix->ndev;
  L->link = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
  L->chan = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
  L->seq = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
  L->ncoll = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  memset(L->link, 0xff, sizeof(int32_t) * (size_t)(n + 1));
  memset(L->chan, 0xff, sizeof(int32_t) * (size_t)(n + 1));
  int64_t maxch = (int64_t)P * P < ix->ncomm ? (int64_t)P * P : ix->ncomm;
  int hcap = 64;
  while (hcap < 2 * maxch + 64) hcap *= 2;
  int64_t *hk = arena_alloc(a, sizeof(int64_t) * (size_t)hcap);
  int32_t *hv = arena_alloc(a, sizeof(int32_t) * (size_t)hcap);
  memset(hk, 0xff, sizeof(int64_t) * (size_t)hcap);
  size_t chcap = sizeof(int32_t) * (size_t)(hcap / 2 + 1);
  int32_t *nsend = arena_alloc(a, chcap), *nrecv = arena_alloc(a, chcap);
  int32_t *src = arena_alloc(a, chcap), *dst = arena_alloc(a, chcap);
  int nc = 0;
  for (int d = 0; d < P; d++) {
    const IrDevice *dev = &s->devs[d];
    for (int k = 0; k < dev->nops; k++) {
      const IrOp *op = &dev->ops[k];
      int32_t g = ix->off[d] + k;
      switch ((IrKind)op->kind) {
      case IR_SEND: case IR_RECV: {
        if (op->peer < 0 || op->peer >= P) break;
        int sd = op->kind == IR_SEND ? d : op->peer, rd = op->kind == IR_SEND ? op->peer : d;
        int64_t key = (int64_t)sd * P + rd;
        uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
        int i = (int)(h >> 40) & (hcap - 1);
        while (hk[i] >= 0 && hk[i] != key) i = (i + 1) & (hcap - 1);
        if (hk[i] < 0) {
          if (nc >= (hcap >> 1)) break; /* absurd number of channels: leave unlinked */
          hk[i] = key;
          hv[i] = nc;
          src[nc] = sd;
          dst[nc] = rd;
          nc++;
        }
        int c = hv[i];
        L->chan[g] = c;
        L->seq[g] = op->kind == IR_SEND ? nsend[c]++ : nrecv[c]++;
        break;
      }
      case IR_COLL: case IR_S: L->link[g] = L->ncoll[d]++; break;
      case IR_B: case IR_BW:
        if (ana_valid_pass(s, op)) {
          int32_t r = ix->posRel[ANA_SLOT(ix, op->mb, op->stage)];
          if (r >= 0 && ix->devof[r] == d) L->link[g] = r;
        }
        break;
      case IR_RELOAD:
        if (ana_valid_pass(s, op)) {
          int32_t o = ix->posOff[ANA_SLOT(ix, op->mb, op->stage)];
          if (o >= 0 && ix->devof[o] == d) L->link[g] = o;
        }
        break;
      default: break;
      }
    }
  }
  L->nchan = nc;
  L->chan_nsend = nsend;
  L->chan_nrecv = nrecv;
  L->chan_src = src;
  L->chan_dst = dst;
  L->chan_sends = arena_alloc(a, sizeof(int32_t *) * (size_t)(nc + 1));
  for (int c = 0; c < nc; c++) L->chan_sends[c] = arena_alloc(a, sizeof(int32_t) * (size_t)(nsend[c] + 1));
  for (int64_t g = 0; g < n; g++) {
    if (L->chan[g] < 0) continue;
    const IrOp *op = ana_op(s, ix, (int32_t)g);
    if (op->kind == IR_SEND) L->chan_sends[L->chan[g]][L->seq[g]] = (int32_t)g;
  }
  int nposted = 0;
  for (int64_t g = 0; g < n; g++) {
    if (L->chan[g] < 0) continue;
    const IrOp *op = ana_op(s, ix, (int32_t)g);
    if (op->kind == IR_RECV) {
      int c = L->chan[g];
      L->link[g] = L->seq[g] < nsend[c] ? L->chan_sends[c][L->seq[g]] : -1;
      nposted += (op->flags & IR_FLAG_POSTED) != 0;
    }
  }
  if (nposted) sim_link_posted(s, ix, L, a);
}

/* Each posted recv's consumer: the pass that reads its data, later on its device
 * (else it stays a plain recv, waited for where it stands). */
void sim_link_posted(const IrSchedule *s, const AnaIndex *ix, SimLinks *L, Arena *a) {
  int64_t n = ix->total;
  L->postwait = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
  L->postcons = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
  memset(L->postwait, 0xff, sizeof(int32_t) * (size_t)(n + 1));
  memset(L->postcons, 0xff, sizeof(int32_t) * (size_t)(n + 1));
  for (int64_t g = 0; g < n; g++) {
    const IrOp *op = ana_op(s, ix, (int32_t)g);
    if (op->kind != IR_RECV || !(op->flags & IR_FLAG_POSTED) || op->mb < 0 || op->mb >= s->nmb) continue;
    int st = op->xfer == IR_XFER_ACT ? op->stage + 1 : op->xfer == IR_XFER_GRAD ? op->stage - 1 : -1;
    if (st < 0 || st >= s->nstage) continue;
    int32_t c = op->xfer == IR_XFER_ACT ? ix->posF[ANA_SLOT(ix, op->mb, st)] : ix->posB[ANA_SLOT(ix, op->mb, st)];
    if (c <= g || ix->devof[c] != ix->devof[g] || L->postwait[c] >= 0) continue;
    L->postwait[c] = (int32_t)g;
    L->postcons[g] = c;
  }
}

/* ---- memory deltas ---- */
static double act_of(const IrSchedule *s, int st) {
  return (st >= 0 && st < s->nstage) ? s->stages[st].act : 0;
}

/* Device-memory delta of an op, and host delta through *host. */
static double mem_delta(const IrSchedule *s, const IrOp *op, double *host) {
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

/* Under `vocab async`: how many collectives op waits for (their (mb, coll) in need[]):
 * F(i, 0) input_fwd(i); T(i) output_fwd(i); the last stage's B/BW(i) output_bwd(i)
 * (Vocab-1) or output_fwd(i) (Vocab-2); IB(i) input_bwd(i). */
int sim_coll_needs(const IrSchedule *s, const IrOp *op, int *need) {
  if (op->mb < 0 || op->mb >= s->nmb) return 0;
  switch ((IrKind)op->kind) {
  case IR_F: if (op->stage != 0) return 0; need[0] = IR_COLL_INPUT_FWD; return 1;
  case IR_T: need[0] = IR_COLL_OUTPUT_FWD; return 1;
  case IR_IB: need[0] = IR_COLL_INPUT_BWD; return 1;
  case IR_B: case IR_BW:
    if (op->stage != s->nstage - 1) return 0;
    need[0] = s->vocab.mode == 1 ? IR_COLL_OUTPUT_BWD : IR_COLL_OUTPUT_FWD;
    return 1;
  default: return 0;
  }
}

int sim_run(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L,
            SimResult *r, int want_timeline) {
  return sim_run_mode(a, s, ix, L, r, want_timeline, s->vocab.mode && s->vocab.async);
}

static int sim_exec(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L,
                    SimResult *r, int want_timeline, int async, const double *dur);

/* A copy's time alone (its work on the link). */
static double copy_work(const IrSchedule *s, const IrOp *op) {
  int dir = op->kind == IR_RELOAD;
  const IrStage *cs_ = op->stage >= 0 && op->stage < s->nstage ? &s->stages[op->stage] : NULL;
  return (cs_ ? (dir && cs_->reload_time > 0 ? cs_->reload_time : cs_->offload_time) : 0) *
         ana_offload_fraction(s, op->stage);
}

/* The durations of the copies of one run under link sharing: per link, the copies
 * (start r->start[g], work copy_work) progress at their direction's speed split between
 * the running copies of that direction; an event loop over starts and ends. Writes
 * dur[g] for every copy; returns the largest change from the previous dur. */
static double link_durations(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimResult *r, double *dur) {
  int P = ix->ndev, k = s->derived.link_devs > 1 ? s->derived.link_devs : 1;
  double duplex = s->derived.duplex > 0 && s->derived.duplex < 1 ? s->derived.duplex : 1, change = 0;
  for (int l0 = 0; l0 < P; l0 += k) {
    int l1 = l0 + k < P ? l0 + k : P;
    int32_t n = 0;
    for (int d = l0; d < l1; d++)
      for (int32_t g = ix->off[d]; g < ix->off[d + 1]; g++) {
        int kind = ana_op(s, ix, g)->kind;
        n += kind == IR_OFFLOAD || (kind == IR_RELOAD && !(r->cancelled && r->cancelled[g]));
      }
    if (!n) continue;
    int32_t *cp = arena_alloc(a, sizeof(int32_t) * (size_t)n);
    double *rem = arena_alloc(a, sizeof(double) * (size_t)n);
    int32_t m = 0;
    for (int d = l0; d < l1; d++)
      for (int32_t g = ix->off[d]; g < ix->off[d + 1]; g++) {
        const IrOp *op = ana_op(s, ix, g);   /* (a cancelled reload copies nothing) */
        if (op->kind == IR_OFFLOAD || (op->kind == IR_RELOAD && !(r->cancelled && r->cancelled[g]))) cp[m++] = g;
      }
    /* by start (then op id): a shell sort, the starts being sorted per device */
    for (int32_t gap = n / 2; gap > 0; gap /= 2)
      for (int32_t i = gap; i < n; i++) {
        int32_t v = cp[i];
        int32_t j = i;
        while (j >= gap && (r->start[cp[j - gap]] > r->start[v] || (r->start[cp[j - gap]] == r->start[v] && cp[j - gap] > v))) {
          cp[j] = cp[j - gap];
          j -= gap;
        }
        cp[j] = v;
      }
    for (int32_t i = 0; i < n; i++) rem[i] = copy_work(s, ana_op(s, ix, cp[i]));
    /* active copies: indices into cp, in a small array (at most 2k run at once) */
    int32_t *act = arena_alloc(a, sizeof(int32_t) * (size_t)n);
    int32_t na = 0, next = 0;
    double now = n ? r->start[cp[0]] : 0;
    while (next < n || na) {
      int cnt[2] = {0, 0};
      for (int32_t q = 0; q < na; q++) cnt[ana_op(s, ix, cp[act[q]])->kind == IR_RELOAD]++;
      double sp[2];
      for (int dir = 0; dir < 2; dir++)
        sp[dir] = cnt[dir] ? (cnt[1 - dir] ? duplex : 1) / cnt[dir] : 0;
      /* the next event: a start, or the first end at the current speeds */
      double tnext = next < n ? r->start[cp[next]] : 1e300;
      for (int32_t q = 0; q < na; q++) {
        int dir = ana_op(s, ix, cp[act[q]])->kind == IR_RELOAD;
        double te = now + rem[act[q]] / sp[dir];
        if (te < tnext) tnext = te;
      }
      if (tnext < now) tnext = now;
      for (int32_t q = 0; q < na;) {   /* progress, then the copies that ended leave */
        int32_t i = act[q];
        int dir = ana_op(s, ix, cp[i])->kind == IR_RELOAD;
        rem[i] -= (tnext - now) * sp[dir];
        if (rem[i] <= 1e-12 * (1 + fabs(tnext))) {
          double nd = tnext - r->start[cp[i]];
          if (fabs(nd - dur[cp[i]]) > change) change = fabs(nd - dur[cp[i]]);
          dur[cp[i]] = nd;
          act[q] = act[--na];
        } else {
          q++;
        }
      }
      now = tnext;
      while (next < n && r->start[cp[next]] <= now) {
        if (rem[next] <= 0) {   /* a copy of no work ends where it starts */
          if (fabs(dur[cp[next]]) > change) change = fabs(dur[cp[next]]);
          dur[cp[next]] = 0;
        } else {
          act[na++] = next;
        }
        next++;
      }
    }
  }
  return change;
}

int sim_run_mode(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L,
                 SimResult *r, int want_timeline, int async) {
  int share = s->derived.link_devs > 1 || (s->derived.duplex > 0 && s->derived.duplex < 1);
  int64_t n = ix->total;
  int has_copy = 0;
  if (share)
    for (int64_t g = 0; g < n && !has_copy; g++) {
      int kind = ana_op(s, ix, (int32_t)g)->kind;
      has_copy = kind == IR_OFFLOAD || kind == IR_RELOAD;
    }
  if (!share || !has_copy) return sim_exec(a, s, ix, L, r, want_timeline, async, NULL);
  /* link sharing: run with every copy alone, then with the durations the links give,
   * until they settle */
  double *dur = arena_alloc(a, sizeof(double) * (size_t)(n + 1));
  for (int64_t g = 0; g < n; g++) {
    const IrOp *op = ana_op(s, ix, (int32_t)g);
    dur[g] = op->kind == IR_OFFLOAD || op->kind == IR_RELOAD ? copy_work(s, op) : 0;
  }
  double scale = 0;
  for (int64_t g = 0; g < n; g++) if (dur[g] > scale) scale = dur[g];
  for (int it = 0; it < 64; it++) {
    if (!sim_exec(a, s, ix, L, r, 0, async, dur)) return 0;
    if (!(link_durations(a, s, ix, r, dur) > 1e-9 * scale)) break;
  }
  return sim_exec(a, s, ix, L, r, want_timeline, async, dur);
}

static int sim_exec(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L,
                    SimResult *r, int want_timeline, int async, const double *dur) {
  int P = ix->ndev;
  int64_t n = ix->total;
  memset(r, 0, sizeof *r);
  r->start = arena_alloc(a, sizeof(double) * (size_t)(n + 1));
  r->end = arena_alloc(a, sizeof(double) * (size_t)(n + 1));
  r->dev = arena_alloc(a, sizeof(SimDev) * (size_t)(P + 1));
  r->stuck_at = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  r->wait_op = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  r->peak_device = -1;
  int32_t *pc = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  double *t = arena_alloc(a, sizeof(double) * (size_t)(P + 1));
  double *eng = arena_alloc(a, sizeof(double) * (size_t)(2 * P + 2));
  int32_t *wait_dev = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  int32_t *wait_idx = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  int32_t *whead = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  int32_t *wnext = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  int32_t *stack = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  char *inq = arena_alloc(a, (size_t)P + 1), *arrived = arena_alloc(a, (size_t)P + 1);
  int ncmax = 0;
  for (int d = 0; d < P; d++) if (L->ncoll[d] > ncmax) ncmax = L->ncoll[d];
  int32_t *carr = arena_alloc(a, sizeof(int32_t) * (size_t)(ncmax + 1));
  double *ct = arena_alloc(a, sizeof(double) * (size_t)(ncmax + 1));
  int32_t *cwait = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  int ncwait = 0;
  /* async collectives: the lane's start and end of each sequence number, and the
   * sequence number of each (mb, collective) */
  double *cs = NULL, *ce = NULL, lane = 0;
  int32_t *ck = NULL;
  if (async) {
    cs = arena_alloc(a, sizeof(double) * (size_t)(ncmax + 1));
    ce = arena_alloc(a, sizeof(double) * (size_t)(ncmax + 1));
    ck = arena_alloc(a, sizeof(int32_t) * (size_t)(4 * (int64_t)s->nmb + 4));
    memset(ck, 0xff, sizeof(int32_t) * (size_t)(4 * (int64_t)s->nmb + 4));
  }
  double tc = s->tc, tcoll = s->vocab.t_coll;
  int sp = 0;
  for (int d = 0; d < P; d++) {
    whead[d] = -1;
    wait_dev[d] = -1;
    r->dev[d].first = -1;
    stack[sp++] = P - 1 - d;
    inq[P - 1 - d] = 1;
  }
  while (sp) {
    int d = stack[--sp];
    inq[d] = 0;
    const IrDevice *dv = &s->devs[d];
    wait_dev[d] = -1;
    while (pc[d] < dv->nops) {
      const IrOp *op = &dv->ops[pc[d]];
      int32_t g = ix->off[d] + pc[d];
      double st = t[d], en;
      int32_t ln = L->link[g];
      int block = 0;
      switch ((IrKind)op->kind) {
      case IR_RECV: {
        if (ln < 0) { block = 2; break; }
        if (L->postcons && L->postcons[g] >= 0) {   /* posted: its consumer waits for the data */
          r->start[g] = r->end[g] = st;
          break;
        }
        int sd = ix->devof[ln];
        if (pc[sd] <= ln - ix->off[sd]) { block = 1; wait_dev[d] = sd; wait_idx[d] = ln - ix->off[sd]; break; }
        double arr = r->end[ln] + tc;
        en = arr > st ? arr : st;
        r->dev[d].comm_wait += en - st;
        r->start[g] = st;
        r->end[g] = en;
        t[d] = en;
        break;
      }
      case IR_COLL: case IR_S: {
        int k = ln;
        if (k < 0 || k >= ncmax) { block = 2; break; }
        if (async && op->kind == IR_COLL) { /* issue on the lane, go on */
          if (t[d] > ct[k]) ct[k] = t[d];
          int ty = (int)op->coll - 1;
          if (op->mb >= 0 && op->mb < s->nmb && ty >= 0 && ty < 4 && ck[op->mb * 4 + ty] < 0) ck[op->mb * 4 + ty] = k;
          if (++carr[k] == P) {
            cs[k] = ct[k] > lane ? ct[k] : lane;
            ce[k] = cs[k] + tcoll;
            lane = ce[k];
            for (int w = 0; w < ncwait; w++)
              if (!inq[cwait[w]]) { inq[cwait[w]] = 1; stack[sp++] = cwait[w]; }
            ncwait = 0;
          }
          r->start[g] = r->end[g] = st; /* the lane's interval is filled in at the end */
          break;
        }
        if (!arrived[d]) {
          arrived[d] = 1;
          if (t[d] > ct[k]) ct[k] = t[d];
          if (++carr[k] == P) {
            for (int w = 0; w < ncwait; w++)
              if (!inq[cwait[w]]) { inq[cwait[w]] = 1; stack[sp++] = cwait[w]; }
            ncwait = 0;
          }
        }
        if (carr[k] < P) { block = 3; cwait[ncwait++] = d; break; }
        arrived[d] = 0;
        if (op->kind == IR_S) {   /* the broadcast, then the pass */
          double c = s->vocab.t_s;
          r->start[g] = ct[k] + tc;
          r->end[g] = ct[k] + tc + c;
          r->dev[d].comm_wait += ct[k] + tc - st;
          r->dev[d].busy += c;
          if (r->dev[d].first < 0) r->dev[d].first = r->start[g];
        } else {
          r->start[g] = ct[k];
          r->end[g] = ct[k] + tcoll;
          r->dev[d].comm_wait += ct[k] - st;
        }
        t[d] = r->end[g];
        break;
      }
      case IR_OFFLOAD: case IR_RELOAD: {
        int dir = op->kind == IR_RELOAD;
        if (dir && ln >= 0 && ln < g && r->end[ln] > st) {   /* its offload is still copying */
          r->start[g] = r->end[g] = st;
          if (!r->cancelled) r->cancelled = arena_alloc(a, (size_t)n + 1);
          r->cancelled[g] = r->cancelled[ln] = 1;
          r->ncancelled++;
          break;
        }
        double c0 = st > eng[2 * d + dir] ? st : eng[2 * d + dir];
        double c = dur ? dur[g] : copy_work(s, op);
        r->start[g] = c0;
        r->end[g] = c0 + c;
        eng[2 * d + dir] = c0 + c;
        r->dev[d].copy_busy[dir] += c;
        break;
      }
      case IR_SEND:
        r->start[g] = r->end[g] = st;
        break;
      default: {
        double ready = st;
        if (L->postwait) { /* the data of the posted recvs it (or its overlapped partner) reads */
          int pair2 = overlap_pair_at(dv, pc[d]);
          for (int h = 0; h <= pair2 && !block; h++) {
            int32_t pr = L->postwait[g + h], sn = pr >= 0 ? L->link[pr] : -1;
            if (pr < 0) continue;
            if (sn < 0) { block = 2; break; }
            int sd = ix->devof[sn];
            if (pc[sd] <= sn - ix->off[sd]) { block = 1; wait_dev[d] = sd; wait_idx[d] = sn - ix->off[sd]; break; }
            double arr = r->end[sn] + tc;
            r->end[pr] = arr;   /* a recv's end is its data's arrival */
            if (arr > ready) { r->dev[d].comm_wait += arr - ready; ready = arr; }
          }
          if (block) break;
        }
        if (async) { /* wait for the collectives this op consumes */
          int need[2], nn = sim_coll_needs(s, op, need);
          for (int q = 0; q < nn && !block; q++) {
            int k = ck[op->mb * 4 + need[q] - 1];
            if (k < 0) continue; /* never issued: verify reports the order */
            if (carr[k] < P) { block = 3; cwait[ncwait++] = d; break; }
            if (ce[k] > ready) { r->dev[d].comm_wait += ce[k] - ready; ready = ce[k]; }
          }
          if (block) break;
        }
        if ((op->kind == IR_B || op->kind == IR_BW) && ln >= 0 && ln < g) {
          if (r->end[ln] > ready) {
            r->dev[d].copy_stall += r->end[ln] - ready;
            ready = r->end[ln];
          }
        }
        int pair = overlap_pair_at(dv, pc[d]);
        if (pair) { /* overlapped F&B (overlap.c): both halves start and end together */
          const IrOp *y = &dv->ops[pc[d] + 1];
          int32_t ly = L->link[g + 1];
          if ((y->kind == IR_B || y->kind == IR_BW) && ly >= 0 && ly < g && r->end[ly] > ready) {
            r->dev[d].copy_stall += r->end[ly] - ready;
            ready = r->end[ly];
          }
        }
        double c = pair ? overlap_cost(s, op, &dv->ops[pc[d] + 1]) : sim_cost(s, op);
        r->start[g] = ready;
        r->end[g] = ready + c;
        t[d] = ready + c;
        if (pair) {
          r->start[g + 1] = ready;
          r->end[g + 1] = ready + c;
          pc[d]++;
        }
        if (is_compute(op->kind)) {
          r->dev[d].busy += c;
          if (r->dev[d].first < 0) r->dev[d].first = ready;
        }
        break;
      }
      }
      if (block) {
        if (block == 1) { wnext[d] = whead[wait_dev[d]]; whead[wait_dev[d]] = d; }
        break;
      }
      pc[d]++;
    }
    /* wake the devices waiting on d that can now go on */
    int32_t *pp = &whead[d];
    while (*pp >= 0) {
      int w = *pp;
      if (pc[d] > wait_idx[w]) {
        *pp = wnext[w];
        if (!inq[w]) { inq[w] = 1; stack[sp++] = w; }
      } else {
        pp = &wnext[w];
      }
    }
  }
  r->ok = 1;
  for (int d = 0; d < P; d++) {
    const IrDevice *dv = &s->devs[d];
    if (pc[d] < dv->nops) {
      r->ok = 0;
      r->stuck_at[d] = ix->off[d] + pc[d];
      int32_t g = r->stuck_at[d];
      const IrOp *op = &dv->ops[pc[d]];
      r->wait_op[d] = op->kind == IR_RECV ? L->link[g] : -1;
      if (L->postwait)   /* a consumer waiting for a posted recv's send */
        for (int h = 0; h <= overlap_pair_at(dv, pc[d]) && r->wait_op[d] < 0; h++)
          if (L->postwait[g + h] >= 0) r->wait_op[d] = L->link[L->postwait[g + h]];
    } else {
      r->stuck_at[d] = -1;
      r->wait_op[d] = -1;
    }
  }
  if (!r->ok) return 0;
  if (async)
    for (int64_t g = 0; g < n; g++) {
      const IrOp *op = ana_op(s, ix, (int32_t)g);
      int32_t k = L->link[g];
      if (op->kind == IR_COLL && k >= 0 && k < ncmax) { r->start[g] = cs[k]; r->end[g] = ce[k]; }
    }

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
  return 1;
}
