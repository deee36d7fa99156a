/* lower.c: lowering of the schedule IR. Inserts, where the file did not write them:
 *   - send/recv for every cross-device dependency;
 *   - the vocabulary passes and collectives of `vocab parallel 1|2`;
 *   - offload/reload ops of the offload policy.
 * It also builds the op index (AnaIndex) the later phases share.
 *
 * It does not check anything (verify.c does), and never reorders what the file
 * wrote: inserted ops go between the written ones.
 *
 * Placement rules (docs/json.md and bench/README.md refer here):
 *  - send: right after the pass that produced the data, so sends on a channel are in
 *    producer order.
 *  - recv: right before the consuming pass, except that the recvs of one channel
 *    (ordered device pair, FIFO) must come in the order of its sends; a recv that
 *    would come after a later message's recv is moved up to just before that one
 *    (q_k = min(p_k, q_k+1) over the channel, backwards). Receiving a message early
 *    never adds waiting: the later message it precedes cannot arrive before it.
 *    Where that order would deadlock with rendezvous sends, lower_rendezvous moves
 *    recvs up into the group where their device stands and flags them
 *    IR_FLAG_POSTED: posted there, waited for by their consumer (no time lost).
 *  - vocabulary (every device, per microbatch i), placed by a simulation of the
 *    schedule without them, as groups at instants t, on every device in the same order:
 *      IF(i) coll input_fwd(i)             in [start of F(i-1, 0), start of F(i, 0)]
 *      S(i) coll output_fwd(i) T(i) [coll output_bwd(i) in Vocab-1]
 *                                          in [end of F(i, S-1), start of B(i, S-1)]
 *      coll input_bwd(i) IB(i)             in [end of B(i, 0), start of B(i+1, 0)]
 *    Collectives block the device that issues them (the runtime's do), so a group
 *    costs only its own passes where no device is inside a compute pass at t (a clean
 *    instant): every device reaches each barrier at the same time, and what follows is
 *    the simulation without the group shifted by its cost on every device. Each group
 *    takes the instant of its window that keeps the devices still inside a pass least
 *    (their remaining time, max over devices; candidates: the window's ends and the
 *    pass starts and ends inside it); the S groups first, then IF and IB, for which
 *    an instant an S group already took costs nothing (its wait is paid once).
 *    Among equals: the earliest, the latest for IF. With 1F1B and B, W apart at equal
 *    costs every unit is clean: no device waits, makespan = base + m (vocabulary share).
 *    "At t" = before the first op of the device whose key is >= t (key: start of a
 *    compute pass, end of a send/recv/collective), after the sends that follow it.
 *    Every op before a barrier then ran before t in the base simulation, on every
 *    device, so barriers in one global order cannot deadlock. The file's compute order
 *    is kept: the paper's memory (P + 2 / P + 1 on 1F1B) is that of a file with its
 *    longer warm-up (stdlib/vocab_1f1b.pps).
 *    Under `vocab async` (collectives on their own lane, exec.c) the consumers go in
 *    groups of their own, TCOLL after the collective's instant where the window
 *    allows: T(i) [coll output_bwd(i)] in [t_S + TCOLL, start of B(i, S-1)] (Vocab-2:
 *    of B(i+1, S-1), T(i) feeding nothing), IB(i) in
 *    [t_IB + TCOLL, start of B(i+1, 0)]; IF(i)'s window ends TCOLL before F(i, 0).
 *    A consumer that feeds nothing (IB(i); T(i) in Vocab-2) takes the latest clean
 *    instant of its window: the real timeline runs behind the base one by the
 *    vocabulary passes inserted, and the latest leaves its collective the most time.
 *    A `squeeze`d building block leaves Vocab-1's chain room before the last stage's
 *    B(i) in its warm-up too (block.c), so these windows are not empty there.
 *  - offload(i, s): right after F(i, s), but only where the activation lives long
 *    enough: some compute pass Q must run on the device between F(i, s) and B(i, s)
 *    (Q: the last one before B), and the time from F's simulated end to Q's
 *    simulated start must be positive and hold its round trip (offload then reload
 *    copy: TOFF + TRELOAD of the stage, times its offloaded fraction), so that the
 *    reload can end one pass before B. Otherwise (the last stage of 1F1B, whose F(i)
 *    is followed by B(i); an activation that lives less than its round trip and a
 *    pass) the activation stays on the device.
 *    reload(i, s): the device's reloads are planned backwards, each copy ending by the
 *    simulated start of Q (one pass before its B: the copy has that pass as a margin,
 *    also when the file gives no copy cost) and by the start of the next planned
 *    reload, and the reload is put before the last op whose simulated start is <= the
 *    planned copy start (never before its offload). The simulation then times the real
 *    copies. */
#include "lower.h"
#include "exec.h"
#include "overlap.h"
#include <stdlib.h>
#include <string.h>

/* ---- insertion batches: ops to put before position `slot` of a device's order ----
 * Within one slot, inserted ops keep the order they were added in. */
typedef struct Ins { int32_t slot; IrOp op; } Ins;
typedef struct InsDev { Ins *v; int n, cap; } InsDev;
typedef struct Batch { InsDev *dev; int ndev; int64_t n; Arena tmp; } Batch;

/* The batch lives in its own arena (tmp), freed when batch_apply merges it. */
static void batch_init(Batch *b, int ndev) {
  memset(&b->tmp, 0, sizeof b->tmp);
  b->dev = arena_alloc(&b->tmp, sizeof(InsDev) * (size_t)(ndev + 1));
  b->ndev = ndev;
  b->n = 0;
}

/* span and frame: those of the op the insert serves (its frame only where that op is
 * on device d: loop bindings describe the device that wrote them) */
static IrOp *batch_add(Batch *b, int d, int slot, IrKind kind, int mb, int stage,
                       Span span, uint32_t frame) {
  Ins *in = VEC_PUSH(&b->tmp, b->dev[d].v, b->dev[d].n, b->dev[d].cap);
  in->slot = slot;
  in->op.kind = (uint8_t)kind;
  in->op.flags = IR_FLAG_INSERTED;
  in->op.mb = mb;
  in->op.stage = stage;
  in->op.peer = -1;
  in->op.span = span;
  ir_op_set_frame(&in->op, frame);
  b->n++;
  return &in->op;
}

/* Merges a batch into the orders (new op arrays in a): a counting sort of each
 * device's inserts by slot (stable), then one pass. O(ops + inserts). Frees the batch. */
static void batch_apply(Arena *a, Batch *b, IrSchedule *s) {
  for (int d = 0; d < s->ndev; d++) {
    InsDev *id = &b->dev[d];
    if (!id->n) continue;
    IrDevice *dev = &s->devs[d];
    int n = dev->nops;
    int32_t *cnt = arena_alloc(&b->tmp, sizeof(int32_t) * (size_t)(n + 2));
    for (int k = 0; k < id->n; k++) {
      if (id->v[k].slot < 0) id->v[k].slot = 0;
      if (id->v[k].slot > n) id->v[k].slot = n;
      cnt[id->v[k].slot + 1]++;
    }
    for (int k = 0; k < n + 1; k++) cnt[k + 1] += cnt[k];
    int32_t *order = arena_alloc(&b->tmp, sizeof(int32_t) * (size_t)id->n);
    for (int k = 0; k < id->n; k++) order[cnt[id->v[k].slot]++] = k;
    /* cnt[slot] is now the end of that slot's run; rebuild starts on the fly */
    IrOp *out = arena_alloc(a, sizeof(IrOp) * (size_t)(n + id->n));
    int o = 0, j = 0;
    for (int k = 0; k <= n; k++) {
      while (j < id->n && id->v[order[j]].slot == k) out[o++] = id->v[order[j++]].op;
      if (k < n) out[o++] = dev->ops[k];
    }
    dev->ops = out;
    dev->nops = dev->capops = o;
    s->total_ops += id->n;
  }
  arena_free(&b->tmp);
}

/* ---- send / recv ----
 * A send goes right after its pass; its recv before the consumer on the other device
 * (or at the end, when that is missing or misplaced), no later than the channel's next
 * recv (FIFO). Within one position the send comes first, then the recvs by channel
 * and send order. The new orders are written directly (no insertion batch: the
 * sends and recvs are built from their passes when merged). */
typedef struct PendRecv { int32_t chan, dst, slot, src, cons; } PendRecv;   /* src, cons: global ids (cons -1: none) */

static int32_t chan_id(int64_t *hkeys, int32_t *hvals, size_t hcap, int64_t key, int *nchan) {
  uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
  size_t i = (size_t)(h >> 20) & (hcap - 1);
  for (;;) {
    if (hkeys[i] < 0) { hkeys[i] = key; hvals[i] = (*nchan)++; return hvals[i]; }
    if (hkeys[i] == key) return hvals[i];
    i = (i + 1) & (hcap - 1);
  }
}

/* The device the output of pass op (on device d) goes to, and its kind (xfer); -1 when
 * it goes to no other device. */
static int comm_to(const IrSchedule *s, int d, const IrOp *op, int *xfer) {
  if (!ana_valid_pass(s, op) || s->stages[op->stage].device != d) return -1;
  int to;
  if (op->kind == IR_F && op->stage + 1 < s->nstage) {
    to = s->stages[op->stage + 1].device, *xfer = IR_XFER_ACT;
  } else if ((op->kind == IR_B || op->kind == IR_BW) && op->stage > 0) {
    to = s->stages[op->stage - 1].device, *xfer = IR_XFER_GRAD;
  } else {
    return -1;
  }
  return to == d || to < 0 || to >= s->ndev ? -1 : to;
}

/* The send op k of device d needs, given comm_to's to and xfer (to >= 0): its
 * consumer (cons, a global id, -1 when missing). Returns 0 when it sends nothing (a
 * duplicate pass: the first one wins). */
typedef struct CommOf { int to, xfer; int32_t cons; } CommOf;
static int comm_of(const IrSchedule *s, const AnaIndex *ix, int d, int k, CommOf *c) {
  const IrOp *op = &s->devs[d].ops[k];
  int64_t me = ANA_SLOT(ix, op->mb, op->stage);
  c->cons = c->xfer == IR_XFER_ACT ? ix->posF[ANA_SLOT(ix, op->mb, op->stage + 1)]
                                   : ix->posB[ANA_SLOT(ix, op->mb, op->stage - 1)];
  return ix->posF[me] == ix->off[d] + k || ix->posB[me] == ix->off[d] + k;
}

static int64_t lower_comm(Arena *a, IrSchedule *s, const AnaIndex *ix) {
  int P = s->ndev;
  Arena tmp = {0};   /* freed once the new orders are written */
  /* first each written op's send: to * 4 + xfer, -1 for none (comm_to; a duplicate
   * pass, counted too, is dropped below), and their count, so that every array is
   * allocated once */
  int32_t *sendto = arena_alloc(&tmp, sizeof(int32_t) * (size_t)(ix->total + 1));
  int npr = 0;
  for (int d = 0; d < P; d++) {
    const IrOp *ops = s->devs[d].ops;
    int32_t *st = sendto + ix->off[d];
    for (int k = 0; k < s->devs[d].nops; k++) {
      int xfer, to = comm_to(s, d, &ops[k], &xfer);
      st[k] = to >= 0 ? to * 4 + xfer : -1;
      npr += to >= 0;
    }
  }
  PendRecv *pr = arena_alloc(&tmp, sizeof(PendRecv) * (size_t)(npr + 1));
  int32_t *nsend = arena_alloc(&tmp, sizeof(int32_t) * (size_t)(P + 1));
  int32_t *nrecv = arena_alloc(&tmp, sizeof(int32_t) * (size_t)(P + 1));
  npr = 0;
  int64_t maxch = (int64_t)P * P < ix->total ? (int64_t)P * P : ix->total;
  /* channel keys d * P + to are 64-bit: P * P passes INT32_MAX above 46340 devices */
  size_t hcap = 64;
  while ((int64_t)hcap < 2 * maxch + 64) hcap *= 2;
  int64_t *hk = arena_alloc_fill(&tmp, sizeof(int64_t) * hcap, 0xff);
  int32_t *hv = arena_alloc(&tmp, sizeof(int32_t) * hcap);
  int nchan = 0;
  for (int d = 0; d < P; d++) {
    const IrDevice *dev = &s->devs[d];
    int32_t *st = sendto + ix->off[d];
    for (int k = 0; k < dev->nops; k++) {
      CommOf c;
      if (st[k] < 0) continue;
      c.to = st[k] >> 2;
      c.xfer = st[k] & 3;
      if (!comm_of(s, ix, d, k, &c)) { st[k] = -1; continue; }
      int to = c.to;
      int32_t cons = c.cons;
      nsend[d]++;
      nrecv[to]++;
      PendRecv *r = &pr[npr++];
      r->chan = chan_id(hk, hv, hcap, (int64_t)d * P + to, &nchan);
      r->dst = to;
      r->src = ix->off[d] + k;
      /* the consumer's position on `to`, or the end when it is missing/misplaced */
      int ok = cons >= 0 && ix->devof[cons] == to;
      r->slot = ok ? cons - ix->off[to] : s->devs[to].nops;
      r->cons = ok ? cons : -1;
    }
  }
  /* group the recvs by channel, keeping send order (counting sort) */
  int32_t *cc = arena_alloc(&tmp, sizeof(int32_t) * (size_t)(nchan + 1));
  for (int k = 0; k < npr; k++) cc[pr[k].chan + 1]++;
  for (int c = 0; c < nchan; c++) cc[c + 1] += cc[c];
  int32_t *byc = arena_alloc(&tmp, sizeof(int32_t) * (size_t)(npr + 1));
  int32_t *fill = arena_alloc(&tmp, sizeof(int32_t) * (size_t)(nchan + 1));
  memcpy(fill, cc, sizeof(int32_t) * (size_t)(nchan + 1));
  for (int k = 0; k < npr; k++) byc[fill[pr[k].chan]++] = k;
  for (int c = 0; c < nchan; c++) {
    int32_t q = INT32_MAX;
    for (int j = cc[c + 1] - 1; j >= cc[c]; j--) {
      PendRecv *r = &pr[byc[j]];
      if (r->slot > q) r->slot = q;
      q = r->slot;
    }
  }
  /* each device's recvs by channel and send order, then (stable) by slot */
  int32_t *rstart = arena_alloc(&tmp, sizeof(int32_t) * (size_t)(P + 2));
  for (int d = 0; d < P; d++) rstart[d + 1] = rstart[d] + nrecv[d];
  int32_t *rfill = arena_alloc(&tmp, sizeof(int32_t) * (size_t)(P + 1));
  memcpy(rfill, rstart, sizeof(int32_t) * (size_t)(P + 1));
  int32_t *byd = arena_alloc(&tmp, sizeof(int32_t) * (size_t)(npr + 1));
  for (int j = 0; j < npr; j++) byd[rfill[pr[byc[j]].dst]++] = byc[j];
  IrOp **out = arena_alloc(&tmp, sizeof(IrOp *) * (size_t)(P + 1));
  int64_t nins = 0;
  for (int d = 0; d < P; d++) {
    const IrDevice *dev = &s->devs[d];
    int n = dev->nops, nr = nrecv[d];
    if (!nsend[d] && !nr) continue;
    const int32_t *rv = byd + rstart[d];
    int32_t *cnt = arena_alloc(&tmp, sizeof(int32_t) * (size_t)(n + 2));
    for (int j = 0; j < nr; j++) cnt[pr[rv[j]].slot + 1]++;
    for (int k = 0; k < n + 1; k++) cnt[k + 1] += cnt[k];
    int32_t *order = arena_alloc(&tmp, sizeof(int32_t) * (size_t)(nr + 1));
    for (int j = 0; j < nr; j++) order[cnt[pr[rv[j]].slot]++] = rv[j];
    IrOp *o = out[d] = arena_alloc_raw(a, sizeof(IrOp) * (size_t)(n + nsend[d] + nr));   /* (written whole) */
    const int32_t *st = sendto + ix->off[d];
    int j = 0;
    for (int k = 0; k <= n; k++) {
      /* the ops inserted at one position are one group (lower_groups' flags: the op
       * before them is a written one, and the file wrote no send or recv) */
      uint8_t fl = IR_FLAG_INSERTED;
      if (k > 0 && st[k - 1] >= 0) {   /* the send of the pass before */
        const IrOp *x = &dev->ops[k - 1];
        IrOp op;
        memset(&op, 0, sizeof op);
        op.kind = IR_SEND;
        op.flags = fl;
        fl = IR_FLAG_INSERTED | IR_FLAG_GROUP;
        op.xfer = (uint16_t)(st[k - 1] & 3);
        op.peer = st[k - 1] >> 2;
        op.mb = x->mb;
        op.stage = x->stage;
        op.span = x->span;
        ir_op_set_frame(&op, ir_op_frame(x));
        *o++ = op;
      }
      for (; j < nr && pr[order[j]].slot == k; j++) {
        const PendRecv *r = &pr[order[j]];
        const IrOp *x = ana_op(s, ix, r->src), *cn = r->cons >= 0 ? ana_op(s, ix, r->cons) : NULL;
        IrOp op;
        memset(&op, 0, sizeof op);
        op.kind = IR_RECV;
        op.flags = fl;
        fl = IR_FLAG_INSERTED | IR_FLAG_GROUP;
        op.xfer = (uint16_t)(sendto[r->src] & 3);
        op.peer = ix->devof[r->src];
        op.mb = x->mb;
        op.stage = x->stage;
        op.span = cn ? cn->span : x->span;
        ir_op_set_frame(&op, cn ? ir_op_frame(cn) : 0);
        *o++ = op;
      }
      if (k < n) *o++ = dev->ops[k];
    }
    nins += nsend[d] + nr;
  }
  /* (every recv is built from the written orders: replaced only now) */
  for (int d = 0; d < P; d++) {
    if (!nsend[d] && !nrecv[d]) continue;
    IrDevice *dev = &s->devs[d];
    dev->nops = dev->capops = dev->nops + nsend[d] + nrecv[d];
    dev->ops = out[d];
  }
  s->total_ops += nins;
  arena_free(&tmp);
  return nins;
}

/* Key of an op for "at time t" placement: start of compute, end of waits. */
static double op_key(const IrOp *op, const SimResult *r, int32_t g) {
  switch ((IrKind)op->kind) {
  case IR_SEND: case IR_RECV: case IR_COLL: return r->end[g];
  default: return r->start[g];
  }
}

/* First position k in [lo, n] of device d with key >= t (keys are nondecreasing
 * along a device's order for everything but copies, which are skipped by the scan
 * being a binary search over monotone keys; copies never appear before lowering
 * them). */
static int lower_bound_key(const IrSchedule *s, const AnaIndex *ix, const SimResult *r, int d,
                           int lo, double t) {
  int hi = s->devs[d].nops;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    int32_t g = ix->off[d] + mid;
    if (op_key(&s->devs[d].ops[mid], r, g) >= t) hi = mid; else lo = mid + 1;
  }
  return lo;
}

/* The same where the device's keys are known to be nondecreasing (then the answer is
 * unique): galloping from lo, O(log distance) instead of O(log n) scattered reads
 * (the vocabulary groups come in time order, each a few ops after the last). */
static int lower_bound_key_from(const IrSchedule *s, const AnaIndex *ix, const SimResult *r, int d,
                                int lo, double t) {
  int n = s->devs[d].nops, hi = lo, step = 1;
  const IrOp *ops = s->devs[d].ops;
  int32_t off = ix->off[d];
  while (hi < n && op_key(&ops[hi], r, off + hi) < t) { lo = hi + 1; hi += step; step *= 2; }
  if (hi > n) hi = n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (op_key(&ops[mid], r, off + mid) >= t) hi = mid; else lo = mid + 1;
  }
  return lo;
}

/* ---- vocabulary passes: clean instants ----
 * A vocabulary group (its passes and its barrier) runs on every device. Put at an
 * instant t of the base simulation where no device is inside a compute pass, every
 * device reaches the barrier at t + the group's passes, so nobody waits: the rest of
 * the schedule is the base one shifted by the group's own cost on every device. The
 * disruption of t is how long the devices still inside a pass at t keep the others
 * waiting; each group takes the instant of least disruption in its window (the
 * earliest, or for IF the latest, among equals). */
typedef struct VWin {
  const IrSchedule *s; const AnaIndex *ix; const SimResult *r;
  const double *used; int nused;   /* sorted instants already taken: their wait is paid */
  double *cand; int cap;           /* clean_instant's candidates (one buffer for every call) */
  int *run;                        /* [ndev + 3] where each sorted run of candidates begins */
  const uint8_t *smono;            /* [ndev] 1: the device's starts are nondecreasing (checked) */
  int *k0;                         /* [ndev] clean_instant: last_start_before(d, lo), -2 unknown */
  int *hint;                       /* [ndev] the last clean_instant's first position at or after lo */
  int *at;                         /* [ndev + 3] clean_instant: the next candidate of each run */
} VWin;

static int is_used(const VWin *w, double t) {
  int lo = 0, hi = w->nused;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (w->used[mid] < t) lo = mid + 1; else hi = mid;
  }
  return lo < w->nused && w->used[lo] == t;
}

/* Last position of device d whose op starts before t (-1: none). Starts are
 * nondecreasing along a device's order before offload is lowered. */
static int last_start_before(const VWin *w, int d, double t) {
  int lo = 0, hi = w->s->devs[d].nops;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (w->r->start[w->ix->off[d] + mid] < t) lo = mid + 1; else hi = mid;
  }
  return lo - 1;
}

/* last_start_before(w, d, t) where the device's starts are known to be nondecreasing
 * (the answer is then unique), galloping from the position the last call found, up or
 * down: successive windows are close in time, so this reads a few neighbouring starts
 * instead of a binary search's scattered ones. */
static int last_start_near(const VWin *w, int d, double t) {
  if (!w->smono[d]) return last_start_before(w, d, t);
  const double *st = w->r->start + w->ix->off[d];
  int n = w->s->devs[d].nops, p = w->hint[d], lo, hi, step = 1;
  if (p < 0) p = 0;
  if (p > n) p = n;
  if (p < n && st[p] < t) {   /* the first start >= t is after p */
    lo = p + 1;
    hi = lo;
    while (hi < n && st[hi] < t) { lo = hi + 1; hi += step; step *= 2; }
    if (hi > n) hi = n;
  } else {                    /* at or before p: st[hi] >= t, or hi = n */
    hi = p;
    int b = p - 1;
    while (b >= 0 && st[b] >= t) { hi = b; b -= step; step *= 2; }
    lo = b < 0 ? 0 : b + 1;   /* st[b] < t */
  }
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (st[mid] < t) lo = mid + 1; else hi = mid;
  }
  w->hint[d] = lo;
  return lo - 1;
}

/* last_start_before(w, d, t) for t >= lo of the current clean_instant: galloping up
 * from its last start before lo where the starts are known to be nondecreasing */
static int last_start_from(const VWin *w, int d, double t) {
  int k0 = w->k0[d];
  if (k0 < -1 || !w->smono[d]) return last_start_before(w, d, t);
  const double *st = w->r->start + w->ix->off[d];
  int n = w->s->devs[d].nops, lo = k0 + 1, hi = lo, step = 1;
  while (hi < n && st[hi] < t) { lo = hi + 1; hi += step; step *= 2; }
  if (hi > n) hi = n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (st[mid] < t) lo = mid + 1; else hi = mid;
  }
  return lo - 1;
}

static double disruption(const VWin *w, double t) {
  double worst = 0;
  for (int d = 0; d < w->s->ndev; d++) {
    int k = last_start_from(w, d, t);
    if (k < 0) continue;
    int32_t g = w->ix->off[d] + k;
    const IrOp *op = &w->s->devs[d].ops[k];
    if (op->kind <= IR_T && w->r->end[g] - t > worst) worst = w->r->end[g] - t;
  }
  return worst;
}

static int dbl_cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

#define VCAND_MAX 4096

/* Whether each of the nr runs of candidates w->cand that begin at w->run[k]
 * (w->run[nr] = n) is in order: it is when a device's passes do not overlap. */
static int runs_sorted(const VWin *w, int nr) {
  const double *c = w->cand;
  for (int k = 0; k < nr; k++)
    for (int j = w->run[k] + 1; j < w->run[k + 1]; j++)
      if (c[j] < c[j - 1]) return 0;
  return 1;
}

/* The instant of least disruption in [lo, hi]: candidates are lo, hi, the pass
 * starts and ends inside and the instants already taken (which cost nothing more).
 * latest: prefer the latest among equals. */
static double clean_instant(const VWin *w, double lo, double hi, int latest) {
  if (hi < lo) hi = lo;
  int cap = w->cap, n = 0, nr = 0, *run = w->run;
  double *c = w->cand;
  run[nr++] = n;
  c[n++] = lo;
  c[n++] = hi;
  run[nr++] = n;
  int j0 = 0, j1 = w->nused;
  while (j0 < j1) { int mid = j0 + (j1 - j0) / 2; if (w->used[mid] < lo) j0 = mid + 1; else j1 = mid; }
  for (int j = j0; j < w->nused && w->used[j] <= hi && n < cap; j++) c[n++] = w->used[j];
  for (int d = 0; d < w->s->ndev; d++) w->k0[d] = -2;
  for (int d = 0; d < w->s->ndev && n < cap; d++) {
    run[nr++] = n;
    int k = last_start_near(w, d, lo) + 1;
    w->k0[d] = k - 1;
    for (; k < w->s->devs[d].nops && n < cap; k++) {
      int32_t g = w->ix->off[d] + k;
      if (w->r->start[g] > hi) break;
      if (w->s->devs[d].ops[k].kind > IR_T) continue;
      c[n++] = w->r->start[g];
      if (w->r->end[g] <= hi && n < cap) c[n++] = w->r->end[g];
    }
  }
  run[nr] = n;
  /* the candidates in sorted order (backwards for latest), merged from the runs as
   * they are taken, since the scan mostly ends at one of the first: the order of
   * a stable merge of the runs (among equals the lower run first, backwards the higher),
   * where a run out of order has them all sorted first */
  if (!runs_sorted(w, nr)) {
    qsort(c, (size_t)n, sizeof *c, dbl_cmp);
    nr = 1;
    run[1] = n;
  }
  int *at = w->at;
  for (int k = 0; k < nr; k++) at[k] = latest ? run[k + 1] - 1 : run[k];
  double best = latest ? hi : lo, bd = 1e300, prev = 0;
  for (int j = 0;; j++) {
    int bk = -1;
    if (!latest) {
      for (int k = 0; k < nr; k++)
        if (at[k] < run[k + 1] && (bk < 0 || c[at[k]] < c[at[bk]])) bk = k;
    } else {
      for (int k = 0; k < nr; k++)
        if (at[k] >= run[k] && (bk < 0 || c[at[k]] >= c[at[bk]])) bk = k;
    }
    if (bk < 0) break;
    double t = c[at[bk]];
    at[bk] += latest ? -1 : 1;
    if (j && t == prev) continue;
    prev = t;
    double x = is_used(w, t) ? 0 : disruption(w, t);
    if (x < bd - 1e-12) { bd = x; best = t; if (x <= 1e-12) break; }
  }
  return best;
}

typedef struct VGroup { double t; int kind; int mb; } VGroup;
static int vgroup_cmp(const void *x, const void *y) {
  const VGroup *a = x, *b = y;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  if (a->kind != b->kind) return a->kind - b->kind;
  return a->mb - b->mb;
}

static int base_sim(Arena *a, IrSchedule *s, AnaIndex *ix, SimResult *r) {
  if (ana_index(a, s, ix)) return -1;
  SimLinks L;
  sim_links(a, s, ix, &L);
  if (exec_timed(a, s, ix, &L, r, exec_async(s)) != 1) return -1;
  r->makespan = 0;   /* (the one figure the placement reads) */
  for (int64_t g = 0; g < ix->total; g++) if (r->end[g] > r->makespan) r->makespan = r->end[g];
  return 0;
}

static int64_t lower_vocab(Arena *a0, Diag *dg, IrSchedule *s) {
  AnaIndex ix;
  SimResult r;
  int P = s->ndev, S = s->nstage, m = s->nmb, mode = s->vocab.mode;
  /* the base simulation lives in its own arena, freed before the new orders are
     written (they take its memory), the groups' placement in another */
  Arena tmp = {0}, *a = &tmp, pl = {0};
  if (base_sim(a, s, &ix, &r)) {
    arena_free(&tmp);
    diag_warning(dg, s->vocab.span, "vocabulary passes not inserted: the schedule does not run to the end (see the errors below)");
    return 0;
  }
  VGroup *g = arena_alloc(&pl, sizeof(VGroup) * (size_t)(5 * (int64_t)m + 1));
  int async = s->vocab.async;
  double tcoll = s->vocab.t_coll;
  /* at most VCAND_MAX instants per choice, fewer on many devices (each costs a scan of them) */
  int cap = VCAND_MAX;
  if ((int64_t)cap * P > ((int64_t)1 << 22)) cap = (int)(((int64_t)1 << 22) / P);
  if (cap < 64) cap = 64;
  VWin w = {s, &ix, &r, NULL, 0, arena_alloc(a, sizeof(double) * (size_t)(cap + 2)), cap, arena_alloc(a, sizeof(int) * (size_t)(P + 4)),
            NULL, arena_alloc(a, sizeof(int) * (size_t)(P + 1)), arena_alloc(a, sizeof(int) * (size_t)(P + 1)),
            arena_alloc(a, sizeof(int) * (size_t)(P + 4))};
  /* which devices' starts and placement keys are nondecreasing (before offload is
     lowered all are; the searches gallop there and stay binary elsewhere) */
  uint8_t *smono = arena_alloc(a, (size_t)P + 1), *kmono = arena_alloc(a, (size_t)P + 1);
  for (int d = 0; d < P; d++) {
    const double *st = r.start + ix.off[d];
    const IrOp *ops = s->devs[d].ops;
    int n = s->devs[d].nops, sm = 1, km = 1;
    double kp = n ? op_key(&ops[0], &r, ix.off[d]) : 0;
    for (int k = 1; k < n; k++) {
      double kk = op_key(&ops[k], &r, ix.off[d] + k);
      sm &= st[k] >= st[k - 1];
      km &= kk >= kp;
      kp = kk;
    }
    smono[d] = (uint8_t)sm;
    kmono[d] = (uint8_t)km;
  }
  w.smono = smono;
  double *ts = arena_alloc(a, sizeof(double) * (size_t)(m + 1));
  int nts = 0;
  int ng = 0;
  /* S(i) and its barrier(s) first, the most constrained: between F(i, S-1) and
   * B(i, S-1), as early as clean */
  for (int i = 0; i < m; i++) {
    int32_t f0 = ix.posF[ANA_SLOT(&ix, i, 0)], fl = ix.posF[ANA_SLOT(&ix, i, S - 1)];
    int32_t b0 = ix.posB[ANA_SLOT(&ix, i, 0)], bl = ix.posB[ANA_SLOT(&ix, i, S - 1)];
    if (f0 < 0 || fl < 0 || b0 < 0 || bl < 0) continue; /* incomplete: verify reports it */
    double t = clean_instant(&w, r.end[fl], r.start[bl], 0);
    g[ng++] = (VGroup){t, 1, i};
    ts[nts++] = t;
    if (async) { /* T(i) [coll output_bwd(i)]: TCOLL later, while output_fwd(i) runs */
      /* Vocab-1: before B(i, S-1), which needs output_bwd(i); Vocab-2: T(i) feeds
       * nothing, so before B(i+1, S-1) (or the end) */
      double hi = r.start[bl];
      if (mode == 2) {
        int32_t bn = i + 1 < m ? ix.posB[ANA_SLOT(&ix, i + 1, S - 1)] : -1;
        hi = bn >= 0 ? r.start[bn] : r.makespan;
        if (hi < t) hi = t;
      }
      double lo = t + tcoll < hi ? t + tcoll : hi;
      g[ng++] = (VGroup){clean_instant(&w, lo, hi, mode == 2), 3, i};
    }
  }
  qsort(ts, (size_t)nts, sizeof *ts, dbl_cmp);
  w.used = ts;
  w.nused = nts;
  for (int i = 0; i < m; i++) {
    int32_t f0 = ix.posF[ANA_SLOT(&ix, i, 0)], fl = ix.posF[ANA_SLOT(&ix, i, S - 1)];
    int32_t b0 = ix.posB[ANA_SLOT(&ix, i, 0)], bl = ix.posB[ANA_SLOT(&ix, i, S - 1)];
    if (f0 < 0 || fl < 0 || b0 < 0 || bl < 0) continue;
    int32_t fp = i > 0 ? ix.posF[ANA_SLOT(&ix, i - 1, 0)] : -1;
    int32_t bn = i + 1 < m ? ix.posB[ANA_SLOT(&ix, i + 1, 0)] : -1;
    /* IF(i): between F(i-1, 0) and F(i, 0), as late as clean (async: TCOLL before) */
    double flo = fp >= 0 ? r.start[fp] : 0, fhi = r.start[f0];
    if (async) fhi = fhi - tcoll > flo ? fhi - tcoll : flo;
    g[ng++] = (VGroup){clean_instant(&w, flo, fhi, 1), 0, i};
    /* IB(i): after B(i, 0), before B(i+1, 0) (or the end), as early as clean */
    double bhi = bn >= 0 ? r.start[bn] : r.makespan;
    double tib = clean_instant(&w, r.end[b0], bhi, 0);
    g[ng++] = (VGroup){tib, 2, i};
    if (async) { /* IB(i) once coll input_bwd(i) has run on the lane */
      double lo = tib + tcoll < bhi ? tib + tcoll : bhi;
      g[ng++] = (VGroup){clean_instant(&w, lo > tib ? lo : tib, bhi > tib ? bhi : tib, 1), 4, i};
    }
  }
  qsort(g, (size_t)ng, sizeof *g, vgroup_cmp);
  /* Each group's position on every device (slot[k * P + d]: before that op of the
   * order as it is now). The groups come in time order and a device's positions
   * never go back, so each device's inserts are already in order: the new orders
   * are merged from the slots, the group's ops built as they are written. */
  int *last = arena_alloc(a, sizeof(int) * (size_t)P);
  int32_t *slots = arena_alloc(&pl, sizeof(int32_t) * (size_t)ng * (size_t)P);
  int32_t *cdev = arena_alloc(&pl, sizeof(int32_t) * (size_t)ng);
  Span *csp = arena_alloc(&pl, sizeof(Span) * (size_t)ng);
  uint32_t *cfr = arena_alloc(&pl, sizeof(uint32_t) * (size_t)ng);
  int nper[5];   /* ops a group of each kind puts on every device */
  nper[0] = 2;
  nper[1] = 2 + (async ? 0 : 1 + (mode == 1));
  nper[2] = 1 + !async;
  nper[3] = 1 + (mode == 1);
  nper[4] = 1;
  int64_t per_dev = 0;
  for (int k = 0; k < ng; k++) {
    int i = g[k].mb;
    int kind = g[k].kind;
    int32_t cause = kind == 0 ? ix.posF[ANA_SLOT(&ix, i, 0)]
                  : kind == 1 || kind == 3 ? ix.posF[ANA_SLOT(&ix, i, S - 1)] : ix.posB[ANA_SLOT(&ix, i, 0)];
    int cd = ix.devof[cause];
    cdev[k] = cd;
    csp[k] = s->devs[cd].ops[cause - ix.off[cd]].span;
    cfr[k] = ir_op_frame(&s->devs[cd].ops[cause - ix.off[cd]]);
    per_dev += nper[kind];
    for (int d = 0; d < P; d++) {
      int slot = (kmono[d] ? lower_bound_key_from : lower_bound_key)(s, &ix, &r, d, last[d], g[k].t);
      /* a pass's sends stay with it: the group goes after them (they cost nothing) */
      while (slot < s->devs[d].nops && s->devs[d].ops[slot].kind == IR_SEND) slot++;
      /* never before the pass the group needs, on its own device */
      if (g[k].kind != 0 && d == cd && slot <= cause - ix.off[d]) slot = cause - ix.off[d] + 1;
      if (g[k].kind == 0 && d == cd && slot > cause - ix.off[d]) slot = cause - ix.off[d];
      if (slot < last[d]) slot = last[d];
      last[d] = slot;
      slots[(int64_t)k * P + d] = slot;
    }
  }
  arena_free(&tmp);
  for (int d = 0; d < P && ng; d++) {
    IrDevice *dev = &s->devs[d];
    int n = dev->nops;
    IrOp *out = arena_alloc_raw(a0, sizeof(IrOp) * (size_t)(n + per_dev)), *o = out;   /* (written whole) */
    int j = 0;
    for (int k = 0; k < ng; k++) {
      int slot = slots[(int64_t)k * P + d];
      if (slot > n) slot = n;
      while (j < slot) *o++ = dev->ops[j++];
      int kind = g[k].kind, i = g[k].mb;
      IrOp op = {0};
      op.flags = IR_FLAG_INSERTED;
      op.mb = i;
      op.stage = -1;
      op.peer = -1;
      op.span = csp[k];
      ir_op_set_frame(&op, d == cdev[k] ? cfr[k] : 0);
#define VOCAB_OP(K, C) (op.kind = (uint8_t)(K), op.coll = (C), *o++ = op)
      if (kind == 0) {
        VOCAB_OP(IR_IF, 0);
        VOCAB_OP(IR_COLL, IR_COLL_INPUT_FWD);
      } else if (kind == 1) {
        VOCAB_OP(IR_S, 0);
        VOCAB_OP(IR_COLL, IR_COLL_OUTPUT_FWD);
      }
      if ((kind == 1 && !async) || kind == 3) {
        VOCAB_OP(IR_T, 0);
        if (mode == 1) VOCAB_OP(IR_COLL, IR_COLL_OUTPUT_BWD);
      } else if (kind == 2) {
        VOCAB_OP(IR_COLL, IR_COLL_INPUT_BWD);
      }
      if ((kind == 2 && !async) || kind == 4) VOCAB_OP(IR_IB, 0);
#undef VOCAB_OP
    }
    while (j < n) *o++ = dev->ops[j++];
    dev->ops = out;
    dev->nops = dev->capops = (int)(o - out);
  }
  s->total_ops += per_dev * P;
  arena_free(&pl);
  return per_dev * P;
}

typedef struct RPlan { double bstart; int32_t b, f; int mb, stage; double qstart; } RPlan;
static int rplan_cmp(const void *x, const void *y) {
  const RPlan *a = x, *b = y;
  if (a->bstart != b->bstart) return a->bstart < b->bstart ? -1 : 1;
  return a->b < b->b ? -1 : a->b > b->b;
}

static int offload_chosen(const IrSchedule *s, int mb, int st) {
  const IrOffload *o = &s->offload;
  if (!o->enabled) return 0;
  if (!(s->stages[st].offload > 0) && !(o->ratio > 0)) return 0;
  if (o->stage_hi > o->stage_lo && (st < o->stage_lo || st >= o->stage_hi)) return 0;
  if (o->mb_hi > o->mb_lo && (mb < o->mb_lo || mb >= o->mb_hi)) return 0;
  if (s->stages[st].offload <= 0 && o->ratio <= 0) return 0;
  return 1;
}

static int64_t lower_offload(Arena *a, Diag *dg, IrSchedule *s) {
  AnaIndex ix;
  SimResult r;
  int P = s->ndev, S = s->nstage, m = s->nmb;
  if (base_sim(a, s, &ix, &r)) {
    diag_warning(dg, s->offload.span, "offload not inserted: the schedule does not run to the end (see the errors below)");
    return 0;
  }
  Batch b;
  batch_init(&b, P);
  /* offloads right after their F */
  RPlan **plan = arena_alloc(a, sizeof(RPlan *) * (size_t)P);
  int *np = arena_alloc(a, sizeof(int) * (size_t)P), *cp = arena_alloc(a, sizeof(int) * (size_t)P);
  for (int i = 0; i < m; i++)
    for (int st = 0; st < S; st++) {
      if (!offload_chosen(s, i, st)) continue;
      int32_t f = ix.posF[ANA_SLOT(&ix, i, st)], bb = ix.posB[ANA_SLOT(&ix, i, st)];
      if (f < 0 || bb < 0 || ix.devof[f] != ix.devof[bb] || bb < f) continue;
      int d = ix.devof[f];
      /* Q: the last compute pass before B; none, or a round trip that does not fit
       * before it: not offloaded */
      int32_t q = bb - 1;
      while (q > f && s->devs[d].ops[q - ix.off[d]].kind > IR_T) q--;   /* IR_F..IR_T: passes */
      if (q <= f) continue;
      const IrStage *ps = &s->stages[st];
      double frac = ana_offload_fraction(s, st);
      double trip = (ps->offload_time + (ps->reload_time > 0 ? ps->reload_time : ps->offload_time)) * frac;
      if (r.start[q] - r.end[f] < trip || !(r.start[q] > r.end[f])) continue;
      RPlan *p = VEC_PUSH(a, plan[d], np[d], cp[d]);
      *p = (RPlan){r.start[bb], bb, f, i, st, r.start[q]};
    }
  for (int d = 0; d < P; d++) {
    if (!np[d]) continue;
    /* offloads in F order */
    RPlan *byf = arena_alloc(a, sizeof(RPlan) * (size_t)np[d]);
    memcpy(byf, plan[d], sizeof(RPlan) * (size_t)np[d]);
    for (int k = 0; k < np[d]; k++) byf[k].bstart = byf[k].f;
    qsort(byf, (size_t)np[d], sizeof *byf, rplan_cmp);
    for (int k = 0; k < np[d]; k++) {
      int fk = byf[k].f - ix.off[d];
      batch_add(&b, d, fk + 1, IR_OFFLOAD, byf[k].mb, byf[k].stage, s->devs[d].ops[fk].span, ir_op_frame(&s->devs[d].ops[fk]));
    }
    /* reloads planned backwards from their B on the host->device engine */
    qsort(plan[d], (size_t)np[d], sizeof(RPlan), rplan_cmp);
    double *pstart = arena_alloc(a, sizeof(double) * (size_t)np[d]);
    double nextstart = 1e300;
    for (int k = np[d] - 1; k >= 0; k--) {
      RPlan *p = &plan[d][k];
      const IrStage *ps = &s->stages[p->stage];
      double c = (ps->reload_time > 0 ? ps->reload_time : ps->offload_time) * ana_offload_fraction(s, p->stage);
      double fin = p->qstart < nextstart ? p->qstart : nextstart;
      pstart[k] = fin - c;
      nextstart = pstart[k];
    }
    for (int k = 0; k < np[d]; k++) {
      RPlan *p = &plan[d][k];
      int lo = p->f - ix.off[d] + 1, hi = p->b - ix.off[d];
      /* last position in [lo, hi] whose start <= planned copy start */
      int l = lo, h = hi + 1;
      while (l < h) {
        int mid = l + (h - l) / 2;
        if (r.start[ix.off[d] + mid] <= pstart[k]) l = mid + 1; else h = mid;
      }
      int slot = l - 1;
      if (slot < lo) slot = lo;
      if (slot > hi) slot = hi;
      batch_add(&b, d, slot, IR_RELOAD, p->mb, p->stage, s->devs[d].ops[hi].span, ir_op_frame(&s->devs[d].ops[hi]));
    }
  }
  batch_apply(a, &b, s);
  return b.n;
}

/* ---- point-to-point groups ----
 * Every maximal run of consecutive sends and recvs of a device is one group (the
 * ops after the first flagged IR_FLAG_GROUP). Copies (offload/reload) inside such a
 * run the compiler inserted would split it: they move to its front, in their order
 * (a copy is local and changes no memory a send or recv sees; a reload only starts
 * earlier), and its sends go before its recvs. Written sends and recvs are grouped
 * the same way, never reordered, so a file's order alone says its groups. */
static int is_comm(int k) { return k == IR_SEND || k == IR_RECV; }
static int is_copy(int k) { return k == IR_OFFLOAD || k == IR_RELOAD; }

/* The run of sends, recvs and copies that starts at ops[k] (of n): its sends and recvs,
 * whether any op up to its last send/recv was written, and whether that part is
 * already in order (copies, sends, recvs: ranks 0, 1, 2). Copies after the run's last
 * send/recv stay where they are; a run the compiler inserted also gets its sends first
 * (their data is ready, and the buffered model then never waits at a recv for a send
 * of its own group); lowering's own runs mostly are in order already. Then the flags:
 * a send/recv right after another is in its group (the op before the run is neither).
 * Returns the run's end; *reordered counts a run put in order. */
static inline __attribute__((always_inline)) int group_run(Arena *a, IrOp *ops, int n, int k, IrOp **tmp, int *captmp,
                                                            int *reordered) {
  int e = k, ncomm = 0, lastcomm = -1, wr = 0, so = 1, prev = 0, written = 0, sorted = 1;
  for (; e < n; e++) {
    int ke = ops[e].kind;
    int r = ke == IR_SEND ? 1 : ke == IR_RECV ? 2 : is_copy(ke) ? 0 : -1;
    if (r < 0) break;
    wr |= !(ops[e].flags & IR_FLAG_INSERTED);
    so &= prev <= r;
    prev = r;
    if (r) { ncomm++; lastcomm = e; written = wr; sorted = so; }
  }
  if (ncomm > 1 && !written && !sorted) {
    int len = lastcomm + 1 - k;
    if (len > *captmp) { *captmp = 2 * len; *tmp = arena_alloc(a, sizeof(IrOp) * (size_t)*captmp); }
    IrOp *tp = *tmp;
    int o = 0;
    for (int j = k; j <= lastcomm; j++) if (is_copy(ops[j].kind)) tp[o++] = ops[j];
    for (int j = k; j <= lastcomm; j++) if (ops[j].kind == IR_SEND) tp[o++] = ops[j];
    for (int j = k; j <= lastcomm; j++) if (ops[j].kind == IR_RECV) tp[o++] = ops[j];
    memcpy(&ops[k], tp, sizeof(IrOp) * (size_t)len);
    (*reordered)++;
  }
  int pc = 0;
  for (int j = k; j < e; j++) {
    int c = is_comm(ops[j].kind);
    uint8_t f = (uint8_t)((ops[j].flags & ~IR_FLAG_GROUP) | (c && pc ? IR_FLAG_GROUP : 0));
    if (f != ops[j].flags) ops[j].flags = f;
    pc = c;
  }
  return e;
}

/* Every run of every device (group_run). Returns the number of runs it reordered (0:
 * only flags changed, if anything). */
static int lower_groups(Arena *a, IrSchedule *s) {
  int reordered = 0, captmp = 0;
  IrOp *tmp = NULL;
  for (int d = 0; d < s->ndev; d++) {
    IrOp *ops = s->devs[d].ops;
    int n = s->devs[d].nops;
    for (int k = 0; k < n;) {
      int kind = ops[k].kind;
      if (!is_comm(kind) && !is_copy(kind)) { k++; continue; }
      k = group_run(a, ops, n, k, &tmp, &captmp, &reordered);
    }
  }
  return reordered;
}

/* lower_groups where the repair's moves changed the runs: the runs holding the ops at
 * dirty[0, nd) (global ids, apply_moves': each moved recv, and the op after the place
 * it left), the others being as lower_groups left them. The index (ana_remap'ed to
 * the new orders) gets those runs' kinds and flags, read while they are at hand.
 * Returns the number of runs it reordered (then the index is stale). */
static int lower_groups_at(Arena *a, IrSchedule *s, AnaIndex *ix, const int32_t *dirty, int64_t nd) {
  int reordered = 0, captmp = 0;
  IrOp *tmp = NULL;
  for (int64_t i = 0; i < nd; i++) {
    int d = ix->devof[dirty[i]];
    IrOp *ops = s->devs[d].ops;
    int k = dirty[i] - ix->off[d];
    if (!is_comm(ops[k].kind) && !is_copy(ops[k].kind)) continue;
    while (k > 0 && (is_comm(ops[k - 1].kind) || is_copy(ops[k - 1].kind))) k--;
    int e = group_run(a, ops, s->devs[d].nops, k, &tmp, &captmp, &reordered);
    uint8_t *kf = ix->kf + ix->off[d];
    for (int j = k; j < e; j++) kf[j] = (uint8_t)((ops[j].kind & 15) | (ops[j].flags & 15) << 4);
  }
  return reordered;
}

/* ---- rendezvous repair: the policy (the executor, exec.c, runs the model) ----
 * NCCL (for all but small messages), PyTorch's per-pair streams and Megatron's
 * blocking p2p complete a send only when the receiver has posted the matching recv,
 * except that the ops issued in one group (IR_FLAG_GROUP) are posted together
 * (exec.c, the rendezvous model). Lowering runs that model with this hook: where the
 * run is stuck, a cycle of devices waiting on each other at sends and recvs (the
 * first one found following the waits from the lowest stuck device; else every stuck
 * device); its first stuck send whose recv can move has it moved to where its device
 * stands (into the group it is at, else before the op it waits at), posted there
 * (IR_FLAG_POSTED, set by apply_moves: the consumer still waits for the data, so the
 * move costs nothing in the buffered timing); then the run goes on. A run that stays
 * stuck keeps its moves: verify then reports the deadlock from its buffered run, and a
 * moved recv, waited for at its consumer, leaves that run's waits as they were (the
 * recvs of lowering's groups come last, right before their consumer). Measured on 400
 * random two- to four-device orders (218 deadlocking): `ppsc check` prints the same
 * whether the moves of a stuck run are kept or undone by a buffered run. */
static int kf_p2p(uint8_t kf) { return ANA_KIND(kf) == IR_SEND || ANA_KIND(kf) == IR_RECV; }

typedef struct Repair {
  int32_t *mark, stamp;       /* the cycle search's visit marks */
  /* the last search's first walk, when it found the cycle: its devices in walk order
   * (path[0] the lowest waiting device), and each device's index there (-1: not on
   * it). The next search walks the same way up to the first device that has run
   * since (ExecStall.ran), and goes on from there. */
  int32_t *path, *onpath, plen;
} Repair;

static int repair_pick(void *ctx, const ExecStall *x, int *bposp) {
  Repair *rp = ctx;
  const IrSchedule *s = x->s;
  const AnaIndex *ix = x->ix;
  const int32_t *pc = x->pc, *stuck = x->stuck, *waitdev = x->waitdev;
  int P = ix->ndev;
  int32_t *mark = rp->mark, stamp = rp->stamp;
  int best = -1, bpos = 0;
  for (int pass = 0; pass < 2 && best < 0; pass++) {
    int cyc = -1;
    if (pass == 0) {   /* find a cycle of p2p waits (a finished device waits on none) */
      int32_t base = stamp + 1;   /* a device an earlier walk of this search saw leads to no cycle */
      int32_t *path = rp->path, *onpath = rp->onpath;
      int keep = 0, d0 = 0;   /* the last first walk's devices kept: path[0, keep) */
      if (!x->first && rp->plen) {
        keep = rp->plen;
        for (int q = 0; q < x->nran && keep; q++) {
          int v = x->ran[q];
          if (v < path[0]) keep = 0;   /* may wait now: the first walk starts lower */
          else if (onpath[v] >= 0 && onpath[v] < keep) keep = onpath[v];
        }
      }
      for (int q = keep; q < rp->plen; q++) onpath[path[q]] = -1;
      rp->plen = 0;
      if (keep) {   /* the first walk again, as far as nothing on it ran */
        /* (a device on the walk is one on the path: onpath >= 0; the kept ones are
         * marked only where the walk finds no cycle and the search goes on) */
        stamp++;
        int d = waitdev[path[keep - 1]];
        while (d >= 0 && onpath[d] < 0) { mark[d] = stamp; onpath[d] = keep; path[keep++] = d; d = waitdev[d]; }
        if (d >= 0) {
          cyc = d;
          rp->plen = keep;
        } else {
          for (int q = 0; q < keep; q++) {
            mark[path[q]] = stamp;
            onpath[path[q]] = -1;
          }
        }
        d0 = path[0] + 1;
      }
      for (; d0 < P && cyc < 0; d0++) {
        if (waitdev[d0] < 0 || mark[d0] >= base) continue;
        int firstwalk = stamp + 1 == base, n = 0;
        stamp++;
        int d = d0;
        while (d >= 0 && mark[d] < base) {
          mark[d] = stamp;
          if (firstwalk) { onpath[d] = n; path[n++] = d; }
          d = waitdev[d];
        }
        if (d >= 0 && mark[d] == stamp) {
          cyc = d;
          if (firstwalk) rp->plen = n;
        }
        if (firstwalk && !rp->plen) for (int q = 0; q < n; q++) onpath[path[q]] = -1;
      }
      if (cyc < 0) continue;
    }
    for (int k = 0, d = pass ? 0 : cyc; pass ? d < P : (k == 0 || d != cyc) && d >= 0 && k < P; k++, d = pass ? d + 1 : waitdev[d]) {
      if (pc[d] >= s->devs[d].nops || stuck[d] < 0) continue;
      /* its recv: matched (so on a channel: sim_links links a recv to the k-th send
       * of its channel), unmoved (need -1 once moved), not yet posted (its device
       * before the recv's group); read from the run's peer entry of the send, one
       * place, where the recv's own entries lie elsewhere in memory */
      int32_t o = stuck[d];
      const ExecPeer *po = &x->peer[o];
      if (ANA_KIND(ix->kf[o]) != IR_SEND || po->dev < 0 || po->need < 0) continue;
      int pe = po->dev;
      if (pc[pe] >= po->need) continue;
      const uint8_t *pk = ix->kf + ix->off[pe];   /* pe's kinds and flags (opindex.h) */
      int pos = pc[pe], pn = s->devs[pe].nops;
      if (kf_p2p(pk[pos]))
        for (pos++; pos < pn && kf_p2p(pk[pos]) && (ANA_FLAGS(pk[pos]) & IR_FLAG_GROUP); pos++) {}
      best = d;
      bpos = pos;
      break;
    }
  }
  rp->stamp = stamp;
  *bposp = bpos;
  return best;
}

/* Applies the repair's moves: each moved recv goes before position moved[g] of its
 * device (moves to one position keep their channel order: ids grow along a device).
 * Then rewrites moved into the moves' permutation (ana_remap's newid): each op's new
 * global id on a device with moves, -1 on the others (their ops stay where they are). */
static int64_t apply_moves(Arena *tmp, IrSchedule *s, const AnaIndex *ix, int32_t *moved, int32_t **dirty, int64_t *ndirty) {
  int64_t nm = 0, nd = 0;
  /* each device's moves: how many, all up, targets rising with the op order */
  int32_t *dcnt = arena_alloc(tmp, sizeof(int32_t) * (size_t)(s->ndev + 1));
  uint8_t *dup = arena_alloc(tmp, (size_t)s->ndev + 1), *dsorted = arena_alloc(tmp, (size_t)s->ndev + 1);
  for (int d = 0; d < s->ndev; d++) {
    const int32_t *mv = moved + ix->off[d];
    int cnt = 0, up = 1, sorted = 1;
    int32_t last = -1;
    for (int k = 0; k < s->devs[d].nops; k++)
      if (mv[k] >= 0) {
        cnt++;
        up &= mv[k] <= k;
        sorted &= mv[k] >= last;
        last = mv[k];
      }
    dcnt[d] = cnt;
    dup[d] = (uint8_t)up;
    dsorted[d] = (uint8_t)sorted;
    nm += cnt;
  }
  int32_t *np = NULL;   /* a device's new positions, by old position */
  int32_t *dl = arena_alloc(tmp, sizeof(int32_t) * (size_t)(2 * nm + 1));   /* the dirty list (lower_groups_at) */
  for (int d = 0; d < s->ndev; d++) {
    IrDevice *dv = &s->devs[d];
    int32_t *mv = moved + ix->off[d];
    int cnt = dcnt[d], up = dup[d], sorted = dsorted[d];
    if (!cnt) continue;
    if (!np) {
      int maxn = 0;
      for (int e = 0; e < s->ndev; e++) if (s->devs[e].nops > maxn) maxn = s->devs[e].nops;
      np = arena_alloc(tmp, sizeof(int32_t) * (size_t)(maxn + 1));
    }
    /* the moved ops by target position, stable: in op order when their targets rise
     * with it (the repair's moves mostly do), else by a counting sort */
    int32_t *order = arena_alloc(tmp, sizeof(int32_t) * (size_t)cnt);
    if (sorted) {
      for (int k = 0, j = 0; k < dv->nops; k++)
        if (mv[k] >= 0) order[j++] = k;
    } else {
      int32_t *start = arena_alloc(tmp, sizeof(int32_t) * (size_t)(dv->nops + 2));
      for (int k = 0; k < dv->nops; k++)
        if (mv[k] >= 0) start[mv[k] + 1]++;
      for (int k = 0; k <= dv->nops; k++) start[k + 1] += start[k];
      for (int k = 0; k < dv->nops; k++)
        if (mv[k] >= 0) order[start[mv[k]]++] = k;
    }
    /* the moved ops, copied out; a recv moved up is posted where it now stands,
     * waited for at its consumer */
    IrOp *mo = arena_alloc(tmp, sizeof(IrOp) * (size_t)cnt), *ops = dv->ops;
    for (int j = 0; j < cnt; j++) {
      mo[j] = ops[order[j]];
      if (mo[j].kind == IR_RECV && mv[order[j]] < order[j]) mo[j].flags |= IR_FLAG_POSTED;
    }
    if (up) {
      /* every move goes up (the repair's do): merged in place from the end, each op
       * before the moved ops bound for its position; what is written never passes
       * what is still to read */
      int o = dv->nops - 1, j = cnt - 1;
      for (int k = dv->nops - 1; k >= 0; k--) {
        if (mv[k] < 0) np[k] = o, ops[o--] = ops[k];
        while (j >= 0 && mv[order[j]] == k) np[order[j]] = o, ops[o--] = mo[j--];
      }
    } else {
      IrOp *in = arena_alloc(tmp, sizeof(IrOp) * (size_t)(dv->nops + 1));
      memcpy(in, ops, sizeof(IrOp) * (size_t)dv->nops);
      int o = 0, j = 0;
      for (int k = 0; k < dv->nops; k++) {
        while (j < cnt && mv[order[j]] == k) np[order[j]] = o, ops[o++] = mo[j++];
        if (mv[k] < 0) np[k] = o, ops[o++] = in[k];
      }
      while (j < cnt) np[order[j]] = o, ops[o++] = mo[j++];
    }
    for (int j = 0; j < cnt; j++) {   /* each moved op, and the op after the place it left */
      dl[nd++] = ix->off[d] + np[order[j]];
      if (order[j] + 1 < dv->nops) dl[nd++] = ix->off[d] + np[order[j] + 1];
    }
    for (int k = 0; k < dv->nops; k++) mv[k] = ix->off[d] + np[k];
  }
  *dirty = dl;
  *ndirty = nd;
  return nm;
}

/* Makes inserted communication rendezvous-safe: runs the rendezvous model, moving
 * the recvs that a stuck send waits for up to where their device stands, until it
 * runs (a few rounds: a move next to an earlier group merges with it). The index and
 * links of the ops as they are (kix, kL: valid while have) are carried from round to
 * round: a round's moves permute them (ana_remap) unless normalize or the regrouping
 * then reorders ops too (they are built again). At the end they go to kept. */
static void lower_rendezvous(Arena *a, IrSchedule *s, LowerIndex *kept) {
  Arena ti = {0};   /* the index and links of the ops as they are */
  int have = 0;
  AnaIndex kix;
  SimLinks kL;
  /* under `vocab async`, first for blocking collectives (the runtime's fallback:
   * --blocking-collectives, no lane), then for the lane: a recv moved up stays
   * posted where it was moved, so the second repair keeps what the first made */
  for (int pass = s->vocab.mode && s->vocab.async ? 0 : 1; pass < 2; pass++) {
    for (int round = 0; round < 4; round++) {
      if (!have) {   /* (the ops changed in a way ana_remap does not follow) */
        arena_free(&ti);
        if (ana_index(&ti, s, &kix)) { arena_free(&ti); return; }
        sim_links(&ti, s, &kix, &kL);
        have = 1;
      }
      Arena t0 = {0};   /* the round's run: freed after it */
      Arena tm = {0};   /* the moves and what follows them: freed at the end of the round */
      AnaIndex ix = kix;
      SimLinks L = kL;
      int32_t *moved = arena_alloc_fill(&tm, sizeof(int32_t) * (size_t)(ix.total + 1), 0xff);
      SimResult r;
      IrSchedule m = *s;   /* the model this pass proves (the ops are s's) */
      if (!pass) m.vocab.async = 0;
      Repair rp = {arena_alloc(&t0, sizeof(int32_t) * (size_t)(ix.ndev + 1)), 0,
                   arena_alloc(&t0, sizeof(int32_t) * (size_t)(ix.ndev + 1)),
                   arena_alloc(&t0, sizeof(int32_t) * (size_t)(ix.ndev + 1)), 0};
      memset(rp.onpath, 0xff, sizeof(int32_t) * (size_t)(ix.ndev + 1));
      ExecModel em = {0};
      em.rendezvous = 1;
      em.async = exec_async(&m);
      em.repair = repair_pick;
      em.repair_ctx = &rp;
      em.moved = moved;
      int ok = exec_run(&t0, &m, &ix, &L, &em, &r);
      arena_free(&t0);   /* (its memory serves what follows) */
      int32_t *dirty;
      int64_t ndirty;
      int64_t nmv = apply_moves(&tm, s, &ix, moved, &dirty, &ndirty);
      /* a run that ran to the end (its moves joining the groups it modelled: exec.c)
       * is the proof of the op arrays as they are after its moves: verify need not
       * run it again (a later move voids every earlier proof) */
      if (nmv) s->rdv_proved = 0;
      if (ok == 1) s->rdv_proved |= pass ? IR_PROVED_RDV : IR_PROVED_RDV_BLOCKING;
      if (!nmv) {   /* the ops are as indexed */
        arena_free(&tm);
        break;
      }
      /* the groups again where the moves changed them (everywhere after normalize
         moved ops: a run it changed is not in the dirty list), the index and links
         permuted with the moves when nothing else moved */
      if (overlap_normalize(a, s)) {
        lower_groups(a, s);
        have = 0;
      } else {
        ana_remap(&tm, s, &kix, &kL, moved);
        if (lower_groups_at(&tm, s, &kix, dirty, ndirty)) have = 0;
        else ana_link_posted(&ti, s, &kix, &kL);
      }
      arena_free(&tm);
      if (ok == 1) break;  /* ran to the end as moved: proved */
    }
  }
  if (have && kept) {
    arena_adopt(a, &ti);
    kept->valid = 1;
    kept->ix = kix;
    kept->links = kL;
  }
  arena_free(&ti);
}

int64_t lower_schedule(Arena *a, Diag *dg, IrSchedule *s, LowerIndex *kept) {
  AnaIndex ix;
  if (kept) memset(kept, 0, sizeof *kept);
  s->rdv_proved = 0;
  if (s->ndev <= 0 || s->nstage <= 0 || s->nmb <= 0 || !s->devs || !s->stages) return 0;
  Arena t0 = {0};   /* the index of the written ops: freed once the sends and recvs are in */
  if (ana_index(&t0, s, &ix)) { arena_free(&t0); return 0; }
  int64_t n = 0;
  int had_vocab = ix.nvocab > 0, had_off = ix.noffload > 0, had_comm = ix.ncomm > 0;
  int vocab = s->vocab.mode && !had_vocab;
  /* orders the vocabulary lowering writes again (every device's, where it inserts
     anything) are freed then: its new orders and what follows take their memory */
  Arena t1 = {0}, *oa = vocab ? &t1 : a;
  if (!had_comm) n += lower_comm(oa, s, &ix);
  arena_free(&t0);
  /* overlapped pairs stay adjacent (overlap.c; again after each phase that inserts:
   * a pass over the orders that changes nothing where none did) */
  overlap_normalize(oa, s);
  if (vocab) {
    int64_t nv = lower_vocab(a, dg, s);
    if (nv) arena_free(&t1);
    else arena_adopt(a, &t1);
    n += nv;
    overlap_normalize(a, s);
  }
  if (s->offload.enabled && !had_off) {
    n += lower_offload(a, dg, s);
    overlap_normalize(a, s);
  }
  /* the groups: lower_comm's sends and recvs are grouped and in order as it wrote
   * them, unless the file wrote copies (a run may hold them), overlapped passes
   * (normalize moves sends) or another phase inserted ops */
  if (had_comm || had_off || s->noverlap || (s->vocab.mode && !had_vocab) || s->offload.enabled) lower_groups(a, s);
  if (!had_comm && !s->p2p_buffered) lower_rendezvous(a, s, kept);
  return n;
}
