/* exec.c: the one executor of a lowered schedule (exec.h). Everything that runs a
 * schedule runs it here, under an explicit model (ExecModel):
 *
 * Buffered point-to-point (timed or not):
 *  - each device runs its ops in program order; an op starts when the previous one
 *    ended and its inputs are there;
 *  - F, B, W, BW cost the stage's tf, tb, tw, tbw (already scaled by the front end);
 *    an overlapped pair (IR_FLAG_OVERLAP, overlap.c) starts when both halves may and
 *    both end together, after overlap_cost; IF, IB, S, T cost the vocabulary t_if,
 *    t_ib, t_s, t_t (sim_cost, opindex.c);
 *  - send costs nothing on the sender; the k-th recv of a channel (ordered device
 *    pair, FIFO) completes at max(now, end of the k-th send + TC); a posted recv
 *    (IR_FLAG_POSTED) costs nothing where it stands, and its consumer starts no
 *    earlier than that arrival (waiting for the send like a recv, if it has not run);
 *  - coll is a barrier over all devices: it starts when the last device reaches its
 *    k-th collective and lasts t_coll on every device; under `vocab async` it is
 *    issued at no cost instead, runs on the collective lane (one per schedule, the
 *    collectives in sequence order) from the time the last device issued it and the
 *    lane is free, for t_coll, and only its consumers wait for its end (F(i, 0),
 *    T(i), the last stage's B(i), IB(i): sim_coll_needs; an overlapped pair, one of
 *    whose halves consumes it, as a whole); S stays a barrier;
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
 *    activation never left the device, and the offload's copy still runs to its end;
 *  - host links (hardware { devices_per_host_link k; duplex_bandwidth }, costmodel.c):
 *    the copies of devices d with the same d / k share one link. A copy's time alone
 *    is its work; while copies run on the link, each direction's speed (1, or the
 *    duplex fraction while the other direction runs too) is split evenly between its
 *    running copies (a fluid model: the copies' ends follow from their starts). The
 *    copies' starts depend on their durations (engine order, reload after offload,
 *    B waiting for its reload), so the run is repeated with the durations the link
 *    gives until they no longer change (exec_timed; at most 64 runs).
 *
 * Rendezvous point-to-point within groups (untimed: the proof that a schedule runs
 * with sends that complete only once their recv is posted, NCCL's and PyTorch's
 * model; docs/runtime.md "The communication model"). The ops of one group
 * (ncclGroupStart/End; IR_FLAG_GROUP) are posted together: a device that reaches a
 * group posts all its ops and waits there until each of them is matched, i.e. the
 * peer is at or past the group holding the matching op (a recv also needs its send
 * posted: the same condition); other ops run as in the buffered model (collectives
 * as barriers, or on their lane; copies and compute never block on a peer, except
 * the consumer of a posted recv, which waits for its send's group). A device resumes
 * a group's check where it stopped, every condition being monotone.
 * With a repair hook (ExecModel.repair, lowering's), a stuck run is repaired instead
 * of stopping: the hook names a device stuck at a send whose recv its peer has not
 * posted, and the place where that peer stands; that recv (and the channel's earlier
 * unposted recvs, FIFO) is moved there (moved[recv] = that local position), posted
 * (lowering then flags it IR_FLAG_POSTED: waited for at its consumer), and the run
 * goes on.
 *
 * The executor is a worklist over devices: a device runs until it blocks (a recv
 * whose send has not run, a group whose peers are not there, a barrier or an S others
 * have not reached), and is woken when the device it waits on moves. O(ops + wakeups).
 * A stuck run says, after the loop, where each device stopped and what it waits for
 * (SimResult.stuck_at, wait_op): a recv's send, a posted recv's send at its consumer,
 * and for a pass waiting for a lane collective, that collective on the first other
 * device that has not issued it (lane_wait; a barrier's missing devices verify reads
 * from stuck_at). Nothing of this is kept while running.
 * It computes no figure beyond the run's own (sim.c does) and reports nothing
 * (verify.c turns a stuck run into a deadlock error). */
#include "exec.h"
#include "overlap.h"
#include <math.h>
#include <string.h>

static int is_compute(int k) { return k <= IR_T; }
static int is_p2p(const IrOp *op) { return op->kind == IR_SEND || op->kind == IR_RECV; }
static int kf_p2p(uint8_t kf) { return ANA_KIND(kf) == IR_SEND || ANA_KIND(kf) == IR_RECV; }

/* A copy's time alone (its work on the link). */
double exec_copy_work(const IrSchedule *s, const IrOp *op) {
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
    for (int32_t i = 0; i < n; i++) rem[i] = exec_copy_work(s, ana_op(s, ix, cp[i]));
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

/* A stuck run's report of a pass waiting for a lane collective (`vocab async`; cold:
 * only a stuck run's end calls it): the collective on the first device other than d
 * that has not issued it, or -1 (none waits: d waits for nothing on the lane, or for
 * one that only d lacks, or one that device never issues, which verify reports as an
 * order or count error). ck: each (mb, collective)'s sequence number; carr: the
 * devices that issued each. A device's collectives and S passes are its sequence in
 * program order (L->link), so it has issued k when the first at or after its position
 * is numbered above k; the k-th follows from there. */
static __attribute__((noinline, cold)) int32_t lane_wait(const IrSchedule *s, const AnaIndex *ix, const SimLinks *L,
                                                         const int32_t *pc, const int32_t *ck, const int32_t *carr,
                                                         int d, int32_t g) {
  int P = ix->ndev, pair = overlap_pair_at(&s->devs[d], (int)(g - ix->off[d]));
  for (int y = 0; y <= pair; y++) {   /* the op, and its overlapped partner (timed runs wait for both at the first) */
    const IrOp *op = ana_op(s, ix, g + y);
    int need[2], nn = sim_coll_needs(s, op, need);
    for (int q = 0; q < nn; q++) {
      int32_t k = ck[op->mb * 4 + need[q] - 1];
      if (k < 0 || carr[k] >= P) continue;   /* (never issued anywhere: verify's order check) */
      for (int e = 0; e < P; e++) {
        if (e == d) continue;
        for (int32_t h = ix->off[e] + pc[e]; h < ix->off[e + 1]; h++) {
          int kk = ANA_KIND(ix->kf[h]);
          if (kk != IR_COLL && kk != IR_S) continue;
          if (L->link[h] > k) break;   /* issued k already */
          if (L->link[h] == k) return kk == IR_COLL ? h : -1;
        }
        if (L->ncoll[e] <= k) return -1;   /* never issues it (else issued it already) */
      }
    }
  }
  return -1;
}

/* Under `vocab async`: whether pass x waits for a collective of its own that has not
 * run on the lane yet (a device has not issued it); else, timed, moves *ready to the
 * end of those it consumes, the wait counted in dv's comm_wait. ck: each (mb,
 * collective)'s sequence number (-1: never issued, which verify reports as an order
 * error); carr: the devices that issued each; ce: its end on the lane. */
static inline __attribute__((always_inline)) int lane_blocked(const IrSchedule *s, const IrOp *x, const int32_t *ck,
                                                              const int32_t *carr, int P, const double *ce,
                                                              const int timed, double *ready, SimDev *dv) {
  int need[2], nn = sim_coll_needs(s, x, need);
  for (int q = 0; q < nn; q++) {
    int k = ck[x->mb * 4 + need[q] - 1];
    if (k < 0) continue;
    if (carr[k] < P) return 1;
    if (timed && ce[k] > *ready) { dv->comm_wait += ce[k] - *ready; *ready = ce[k]; }
  }
  return 0;
}

/* The run, compiled once per model kind (rdv, timed: constants in each copy below), so
 * that each copy carries only its own model's tests. */
static inline __attribute__((always_inline)) int exec_model(Arena *a, const IrSchedule *s, const AnaIndex *ix,
                                                             const SimLinks *L, const ExecModel *m, SimResult *r,
                                                             const int rdv, const int timed) {
  int P = ix->ndev;
  int64_t n = ix->total;
  int async = m->async;
  /* posted recvs: waited for at their consumers, except in the buffered runs under
   * `ppsc --transport nccl` (IrSchedule.recv_wait_posted: the nccl transport's default
   * waits right after the recv's group), where each is a plain recv */
  const int32_t *postwait = L->postwait, *postcons = L->postcons;
  if (!rdv && s->recv_wait_posted) postwait = postcons = NULL;
  const double *dur = m->dur;
  int32_t *moved = rdv && m->repair ? m->moved : NULL;
  memset(r, 0, sizeof *r);
  r->stuck_at = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  r->wait_op = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  r->peak_device = -1;
  double *t = NULL, *eng = NULL;
  if (timed) {
    r->start = arena_alloc(a, sizeof(double) * (size_t)(n + 1));
    r->end = arena_alloc(a, sizeof(double) * (size_t)(n + 1));
    r->dev = arena_alloc(a, sizeof(SimDev) * (size_t)(P + 1));
    t = arena_alloc(a, sizeof(double) * (size_t)(P + 1));
    eng = arena_alloc(a, sizeof(double) * (size_t)(2 * P + 2));
  }
  /* rendezvous: the matching op of each send/recv, and the local index of its
   * group's first op */
  const uint8_t *kf = ix->kf;   /* the ops' kinds and flags (the loop reads an op only to time it) */
  ExecPeer *peer = NULL;
  int32_t *match = NULL, *gfirst = NULL, *gk = NULL, *gat = NULL, *gend = NULL, *stuck = NULL, **crecv = NULL;
  if (rdv) {
    match = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
    gfirst = arena_alloc(a, sizeof(int32_t) * (size_t)(n + 1));
    memset(match, 0xff, sizeof(int32_t) * (size_t)(n + 1));
    for (int d = 0; d < P; d++) {
      int32_t first = 0, o = ix->off[d], nk = ix->off[d + 1] - o;
      for (int k = 0; k < nk; k++) {
        int32_t g = o + k;
        if (!kf_p2p(kf[g])) continue;
        if (!(k > 0 && (ANA_FLAGS(kf[g]) & IR_FLAG_GROUP) && kf_p2p(kf[g - 1]))) first = k;
        gfirst[g] = first;
        if (ANA_KIND(kf[g]) == IR_RECV && L->link[g] >= 0) {
          match[g] = L->link[g];
          match[L->link[g]] = g;
        }
      }
    }
    /* each send/recv's peer: its match's device (-1: never matched) and the local index
     * of its match's group (-1: its match was moved, so posted); the group check reads
     * these along the device instead of the match's entries all over the arrays */
    peer = arena_alloc(a, sizeof(ExecPeer) * (size_t)(n + 1));
    for (int64_t g = 0; g < n; g++) {
      if (!kf_p2p(kf[g])) continue;
      int32_t mo = match[g];
      peer[g].dev = mo < 0 ? -1 : ix->devof[mo];
      peer[g].need = mo < 0 ? 0 : moved && moved[mo] >= 0 ? -1 : gfirst[mo];
    }
    gk = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));      /* a group's check resumes here */
    gat = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));     /* the group each device is at, */
    gend = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));    /* and its end (local indices) */
    memset(gat, 0xff, sizeof(int32_t) * (size_t)(P + 1));
    stuck = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
    if (moved) {   /* repair: each channel's recvs in order */
      crecv = arena_alloc(a, sizeof(int32_t *) * (size_t)(L->nchan + 1));
      for (int c = 0; c < L->nchan; c++) crecv[c] = arena_alloc(a, sizeof(int32_t) * (size_t)(L->chan_nrecv[c] + 1));
      for (int64_t g = 0; g < n; g++)
        if (L->chan[g] >= 0 && ANA_KIND(kf[g]) == IR_RECV) crecv[L->chan[g]][L->seq[g]] = (int32_t)g;
    }
  }
  int32_t *pc = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  int32_t *waitdev = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));  /* the device a p2p wait is on, -1 */
  int32_t *wait_thr = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1)); /* woken when its pc reaches this */
  int32_t *whead = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  int32_t *wnext = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  int32_t *stack = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  /* repair: the devices that ran since the last repair (the hook's ExecStall.ran) */
  int32_t *ran = moved ? arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1)) : NULL;
  char *ranf = moved ? arena_alloc(a, (size_t)P + 1) : NULL;
  int nran = 0, nrepair = 0;
  char *inq = arena_alloc(a, (size_t)P + 1), *arrived = arena_alloc(a, (size_t)P + 1);
  int ncmax = 0;
  for (int d = 0; d < P; d++) if (L->ncoll[d] > ncmax) ncmax = L->ncoll[d];
  int32_t *carr = arena_alloc(a, sizeof(int32_t) * (size_t)(ncmax + 1));
  int32_t *cwait = arena_alloc(a, sizeof(int32_t) * (size_t)(P + 1));
  int ncwait = 0;
  double *ct = timed ? arena_alloc(a, sizeof(double) * (size_t)(ncmax + 1)) : NULL;
  /* async collectives: the lane's start and end of each sequence number (timed), and
   * the sequence number of each (mb, collective) */
  double *cs = NULL, *ce = NULL, lane = 0;
  int32_t *ck = NULL;
  if (async) {
    if (timed) {
      cs = arena_alloc(a, sizeof(double) * (size_t)(ncmax + 1));
      ce = arena_alloc(a, sizeof(double) * (size_t)(ncmax + 1));
    }
    ck = arena_alloc(a, sizeof(int32_t) * (size_t)(4 * (int64_t)s->nmb + 4));
    memset(ck, 0xff, sizeof(int32_t) * (size_t)(4 * (int64_t)s->nmb + 4));
  }
  double tc = s->tc, tcoll = s->vocab.t_coll;
  int sp = 0, merged = 0;
  for (int d = 0; d < P; d++) {
    whead[d] = -1;
    waitdev[d] = -1;
    if (rdv) { gk[d] = -1; stuck[d] = -1; }
    if (timed) r->dev[d].first = -1;
    stack[sp++] = P - 1 - d;
    inq[P - 1 - d] = 1;
  }
#define WAKE_COLL()                                                  \
  do {                                                               \
    for (int w = 0; w < ncwait; w++)                                 \
      if (!inq[cwait[w]]) { inq[cwait[w]] = 1; stack[sp++] = cwait[w]; } \
    ncwait = 0;                                                      \
  } while (0)
  /* untimed: the kinds whose ops never wait under the model (copies; compute without
   * posted recvs or lane collectives to wait for; buffered sends), passed over in one
   * scan of the kind bytes (the run's result is the same: nothing there can block) */
  unsigned skip = 0;
  if (!timed) {
    skip = 1u << IR_OFFLOAD | 1u << IR_RELOAD;
    if (!postwait && !async) skip |= 1u << IR_F | 1u << IR_B | 1u << IR_W | 1u << IR_BW | 1u << IR_IF | 1u << IR_IB | 1u << IR_T;
    if (!rdv) skip |= 1u << IR_SEND;
  }
  for (;;) {
    while (sp) {
      int d = stack[--sp];
      inq[d] = 0;
      if (ran && !ranf[d]) { ranf[d] = 1; ran[nran++] = d; }
      const IrDevice *dv = &s->devs[d];
      while (pc[d] < dv->nops) {
        if (skip) {
          const uint8_t *kd = kf + ix->off[d];
          int32_t k = pc[d], nk = dv->nops;
          if ((skip >> ANA_KIND(kd[k])) & 1) {
            while (k < nk && ((skip >> ANA_KIND(kd[k])) & 1)) k++;
            pc[d] = k;
            waitdev[d] = -1;
            if (rdv) stuck[d] = -1;
            if (k >= nk) break;
          }
        }
        const IrOp *op = &dv->ops[pc[d]];
        int32_t g = ix->off[d] + pc[d];
        int kind = ANA_KIND(kf[g]);
        double st = timed ? t[d] : 0;
        int32_t wd = -1, thr = 0;   /* (each case reads its op's link, L->link[g], if it needs it) */
        int block = 0;
        switch ((IrKind)kind) {
        case IR_SEND: case IR_RECV: {
          if (rdv) {   /* the group [pc, e): every op matched by a posted peer op */
            int e;
            if (gat[d] == pc[d]) {
              e = gend[d];   /* a device woken again at the same group: its end is known */
            } else {
              e = pc[d] + 1;
              while (e < dv->nops && kf_p2p(kf[ix->off[d] + e]) && (ANA_FLAGS(kf[ix->off[d] + e]) & IR_FLAG_GROUP)) e++;
              gat[d] = pc[d];
              gend[d] = e;
            }
            int k = gk[d] >= pc[d] && gk[d] < e ? gk[d] : pc[d];
            for (; k < e; k++) {
              int32_t o = ix->off[d] + k;
              /* a posted recv is matched at its group too: NCCL completes a group as a
               * whole (one posted where it was moved waits for nothing: need -1) */
              const ExecPeer *pe = &peer[o];
              if (pe->dev < 0) { block = 2; stuck[d] = o; break; }  /* never matched: verify reports it */
              if (pc[pe->dev] < pe->need) {   /* (need -1: its match was moved, posted) */
                block = 1;
                stuck[d] = o;
                wd = pe->dev;
                thr = pe->need;
                break;
              }
            }
            gk[d] = k;
            if (!block) pc[d] = e - 1; /* the group is done; pc[d]++ below */
            break;
          }
          if (kind == IR_SEND) {
            if (timed) r->start[g] = r->end[g] = st;
            break;
          }
          int32_t ln = L->link[g];
          if (ln < 0) { block = 2; break; }
          if (postcons && postcons[g] >= 0) {   /* posted: its consumer waits for the data */
            if (timed) r->start[g] = r->end[g] = st;
            break;
          }
          int sd = ix->devof[ln];
          if (pc[sd] <= ln - ix->off[sd]) { block = 1; wd = sd; thr = ln - ix->off[sd] + 1; break; }
          if (timed) {
            double arr = r->end[ln] + tc, en = arr > st ? arr : st;
            r->dev[d].comm_wait += en - st;
            r->start[g] = st;
            r->end[g] = en;
            t[d] = en;
          }
          break;
        }
        case IR_COLL: case IR_S: {
          int k = L->link[g];
          if (k < 0 || k >= ncmax) { block = 2; break; }
          if (async && kind == IR_COLL) { /* issue on the lane, go on */
            if (timed && t[d] > ct[k]) ct[k] = t[d];
            int ty = (int)op->coll - 1;
            if (op->mb >= 0 && op->mb < s->nmb && ty >= 0 && ty < 4 && ck[op->mb * 4 + ty] < 0) ck[op->mb * 4 + ty] = k;
            if (++carr[k] == P) {
              if (timed) {
                cs[k] = ct[k] > lane ? ct[k] : lane;
                ce[k] = cs[k] + tcoll;
                lane = ce[k];
              }
              WAKE_COLL();
            }
            if (timed) r->start[g] = r->end[g] = st; /* the lane's interval is filled in at the end */
            break;
          }
          if (!arrived[d]) {
            arrived[d] = 1;
            if (timed && t[d] > ct[k]) ct[k] = t[d];
            if (++carr[k] == P) WAKE_COLL();
          }
          if (carr[k] < P) { block = 3; cwait[ncwait++] = d; break; }
          arrived[d] = 0;
          if (!timed) break;
          if (kind == IR_S) {   /* the broadcast, then the pass */
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
          if (!timed) break;   /* copies never block on a peer */
          int dir = kind == IR_RELOAD;
          int32_t ln = L->link[g];
          if (dir && ln >= 0 && ln < g && r->end[ln] > st) {   /* its offload is still copying */
            r->start[g] = r->end[g] = st;
            if (!r->cancelled) r->cancelled = arena_alloc(a, (size_t)n + 1);
            r->cancelled[g] = r->cancelled[ln] = 1;
            r->ncancelled++;
            break;
          }
          double c0 = st > eng[2 * d + dir] ? st : eng[2 * d + dir];
          double c = dur ? dur[g] : exec_copy_work(s, op);
          r->start[g] = c0;
          r->end[g] = c0 + c;
          eng[2 * d + dir] = c0 + c;
          r->dev[d].copy_busy[dir] += c;
          break;
        }
        default: {
          double ready = st;
          /* timed: an overlapped pair (overlap.c) starts once both halves may, one interval */
          const int pair = timed ? overlap_pair_kf(kf, g, pc[d], dv->nops) : 0;
          if (postwait) { /* the data of the posted recvs it (or its overlapped partner) reads */
            int pair2 = timed ? pair : overlap_pair_kf(kf, g, pc[d], dv->nops);
            for (int h = 0; h <= pair2 && !block; h++) {
              int32_t pr = postwait[g + h], sn = pr >= 0 ? L->link[pr] : -1;
              if (pr < 0) continue;
              if (sn < 0) { block = 2; if (rdv) stuck[d] = g; break; }
              int sd = ix->devof[sn];
              /* buffered: the send has run; rendezvous: its group is reached */
              int32_t need = rdv ? gfirst[sn] : sn - ix->off[sd] + 1;
              if (pc[sd] < need) { block = 1; if (rdv) stuck[d] = g; wd = sd; thr = need; break; }
              if (timed) {
                double arr = r->end[sn] + tc;
                r->end[pr] = arr;   /* a recv's end is its data's arrival */
                if (arr > ready) { r->dev[d].comm_wait += arr - ready; ready = arr; }
              }
            }
            if (block) break;
          }
          if (async) { /* wait for the collectives this op consumes (timed: and its
                          overlapped partner's; untimed runs check the partner on its own) */
            if (lane_blocked(s, op, ck, carr, P, ce, timed, &ready, &r->dev[d]) ||
                (pair && lane_blocked(s, op + 1, ck, carr, P, ce, timed, &ready, &r->dev[d]))) {
              block = 3;
              cwait[ncwait++] = d;
              break;
            }
          }
          if (!timed) break;   /* (untimed: an overlapped pair's second half is checked on its own) */
          int32_t ln = kind == IR_B || kind == IR_BW ? L->link[g] : -1;
          if (ln >= 0 && ln < g) {
            if (r->end[ln] > ready) {
              r->dev[d].copy_stall += r->end[ln] - ready;
              ready = r->end[ln];
            }
          }
          if (pair) { /* overlapped F&B (overlap.c): both halves start and end together */
            const IrOp *y = &dv->ops[pc[d] + 1];
            int32_t ly = L->link[g + 1];
            if ((y->kind == IR_B || y->kind == IR_BW) && ly >= 0 && ly < g && r->end[ly] > ready) {
              r->dev[d].copy_stall += r->end[ly] - ready;
              ready = r->end[ly];
            }
          }
          if (m->release && is_compute(kind)) {   /* the weights it needs (dp.c) */
            double rl = m->release_dev ? m->release_dev[d] : 0;
            if (op->stage >= 0 && op->stage < s->nstage && m->release[op->stage] > rl) rl = m->release[op->stage];
            if (rl > ready) ready = rl;
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
          if (is_compute(kind)) {
            r->dev[d].busy += c;
            if (r->dev[d].first < 0) r->dev[d].first = ready;
          }
          break;
        }
        }
        if (block != 1) waitdev[d] = -1;
        if (block) {
          if (block == 1) {
            waitdev[d] = wd;
            wait_thr[d] = thr;
            wnext[d] = whead[wd];
            whead[wd] = d;
          }
          break;
        }
        if (rdv) stuck[d] = -1;
        pc[d]++;
      }
      /* wake the devices waiting on d that can now go on */
      int32_t *pp = &whead[d];
      while (*pp >= 0) {
        int w = *pp;
        if (pc[d] >= wait_thr[w]) {
          *pp = wnext[w];
          if (!inq[w]) { inq[w] = 1; stack[sp++] = w; }
        } else {
          pp = &wnext[w];
        }
      }
    }
    if (!moved) break;
    /* repair: the hook picks the device to release and where its recv goes */
    ExecStall stall = {s, ix, L, pc, stuck, waitdev, peer, ran, nran, !nrepair++};
    int bpos = 0, best = m->repair(m->repair_ctx, &stall, &bpos);
    for (int q = 0; q < nran; q++) ranf[ran[q]] = 0;
    nran = 0;
    if (best < 0) break;
    {
      /* the stuck send's recv is its channel's recv of the same sequence number (the
       * hook checked that it is unmoved and unposted); the earlier ones follow until
       * one is moved (need -1) or posted. Read from the send's entries, which the run
       * just touched, not the recv's */
      int d = best;
      int32_t so = stuck[d];
      int pe = peer[so].dev, j0 = L->seq[so];
      const int32_t *cr = crecv[L->chan[so]];
      for (int j = j0; j >= 0; j--) {
        int32_t q = cr[j];
        if (j < j0 && (peer[q].need < 0 || pc[pe] >= gfirst[q])) break;
        moved[q] = bpos;
        peer[q].dev = peer[q].dev < 0 ? 0 : peer[q].dev;   /* posted where it now stands */
        peer[q].need = -1;
        int32_t sq = j == j0 ? so : match[q];
        if (sq >= 0) peer[sq].need = -1;
      }
      /* before an op that is not a send/recv, after one (or after copies that follow
       * one: lowering's grouping moves the copies of an inserted run to its front):
       * the moved recvs may join the group before, which this run did not model (the
       * caller runs again). Else each moved recv joins the group its device stood at,
       * or forms a group at the op it stood at, whose condition (its send's group
       * reached) held when it moved: the run is the proof of the moved schedule */
      if (bpos == pc[pe]) {
        const uint8_t *pk = kf + ix->off[pe];
        int q = bpos - 1;
        while (q >= 0 && (ANA_KIND(pk[q]) == IR_OFFLOAD || ANA_KIND(pk[q]) == IR_RELOAD)) q--;
        if (q >= 0 && kf_p2p(pk[q])) merged = 1;
      }
      /* d's waits are rechecked from the start of its group */
      gk[d] = -1;
      int32_t *pp = &whead[pe];
      while (*pp >= 0 && *pp != d) pp = &wnext[*pp];
      if (*pp == d) *pp = wnext[d];
      if (!inq[d]) { inq[d] = 1; stack[sp++] = d; }
    }
  }
#undef WAKE_COLL
  r->ok = 1;
  for (int d = 0; d < P; d++) {
    const IrDevice *dv = &s->devs[d];
    r->stuck_at[d] = r->wait_op[d] = -1;
    if (pc[d] >= dv->nops) continue;
    r->ok = 0;
    if (rdv) {
      int32_t g = stuck[d] >= 0 ? stuck[d] : ix->off[d] + pc[d];
      r->stuck_at[d] = g;
      const IrOp *op = ana_op(s, ix, g);
      if (is_p2p(op)) r->wait_op[d] = match[g];
      else if (postwait && waitdev[d] >= 0)   /* a consumer waiting for a posted recv's send */
        for (int h = 0; h <= overlap_pair_at(dv, (int)(g - ix->off[d])) && r->wait_op[d] < 0; h++)
          if (postwait[g + h] >= 0) r->wait_op[d] = match[postwait[g + h]];
    } else {
      int32_t g = ix->off[d] + pc[d];
      const IrOp *op = &dv->ops[pc[d]];
      r->stuck_at[d] = g;
      r->wait_op[d] = op->kind == IR_RECV ? L->link[g] : -1;
      if (postwait && waitdev[d] >= 0)   /* a consumer waiting for a posted recv's send */
        for (int h = 0; h <= overlap_pair_at(dv, pc[d]) && r->wait_op[d] < 0; h++)
          if (postwait[g + h] >= 0) r->wait_op[d] = L->link[postwait[g + h]];
    }
  }
  if (!r->ok && async)   /* a pass waiting for a lane collective: the collective another device has not issued */
    for (int d = 0; d < P; d++)
      if (r->stuck_at[d] >= 0 && r->wait_op[d] < 0 && waitdev[d] < 0 && !is_p2p(ana_op(s, ix, r->stuck_at[d])))
        r->wait_op[d] = lane_wait(s, ix, L, pc, ck, carr, d, r->stuck_at[d]);
  if (merged && r->ok) r->ok = -1;
  if (r->ok == 1 && timed && async)
    for (int64_t g = 0; g < n; g++) {
      const IrOp *op = ana_op(s, ix, (int32_t)g);
      int32_t k = L->link[g];
      if (op->kind == IR_COLL && k >= 0 && k < ncmax) { r->start[g] = cs[k]; r->end[g] = ce[k]; }
    }
  return r->ok;
}

static int exec_rdv(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, const ExecModel *m,
                    SimResult *r) {
  return exec_model(a, s, ix, L, m, r, 1, 0);
}
static int exec_untimed(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, const ExecModel *m,
                        SimResult *r) {
  return exec_model(a, s, ix, L, m, r, 0, 0);
}
static int exec_buffered_timed(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L,
                               const ExecModel *m, SimResult *r) {
  return exec_model(a, s, ix, L, m, r, 0, 1);
}

int exec_run(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, const ExecModel *m,
             SimResult *r) {
  if (m->rendezvous) return exec_rdv(a, s, ix, L, m, r);
  return m->timed ? exec_buffered_timed(a, s, ix, L, m, r) : exec_untimed(a, s, ix, L, m, r);
}

int exec_timed(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, SimResult *r, int async) {
  return exec_timed_release(a, s, ix, L, r, async, NULL, NULL);
}

int exec_timed_release(Arena *a, const IrSchedule *s, const AnaIndex *ix, const SimLinks *L, SimResult *r, int async,
                       const double *release, const double *release_dev) {
  ExecModel m = {0};
  m.async = async;
  m.timed = 1;
  m.release = release;
  m.release_dev = release_dev;
  int share = s->derived.link_devs > 1 || (s->derived.duplex > 0 && s->derived.duplex < 1);
  int64_t n = ix->total;
  int has_copy = 0;
  if (share)
    for (int64_t g = 0; g < n && !has_copy; g++) {
      int kind = ana_op(s, ix, (int32_t)g)->kind;
      has_copy = kind == IR_OFFLOAD || kind == IR_RELOAD;
    }
  if (!share || !has_copy) return exec_run(a, s, ix, L, &m, r);
  /* link sharing: run with every copy alone, then with the durations the links give,
   * until they settle */
  double *dur = arena_alloc(a, sizeof(double) * (size_t)(n + 1));
  for (int64_t g = 0; g < n; g++) {
    const IrOp *op = ana_op(s, ix, (int32_t)g);
    dur[g] = op->kind == IR_OFFLOAD || op->kind == IR_RELOAD ? exec_copy_work(s, op) : 0;
  }
  double scale = 0;
  for (int64_t g = 0; g < n; g++) if (dur[g] > scale) scale = dur[g];
  m.dur = dur;
  for (int it = 0; it < 64; it++) {
    if (exec_run(a, s, ix, L, &m, r) != 1) return 0;
    if (!(link_durations(a, s, ix, r, dur) > 1e-9 * scale)) break;
  }
  return exec_run(a, s, ix, L, &m, r);
}
