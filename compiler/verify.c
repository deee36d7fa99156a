/* verify.c: proves a lowered schedule executable, or says why not, each error at the
 * span of the op concerned:
 *   - structure: every op on the right device, in range, not written twice; sends
 *     and receives name a real cross-device dependency;
 *   - completeness: every (mb, stage) has one F and one BW or one B and one W
 *     (a missing pass is reported at the device block, else the schedule header);
 *   - dependencies: F chain, B chain, W after B, send after its producer and recv
 *     before its consumer, offload after F, reload after offload and before B,
 *     vocabulary passes around their collectives;
 *   - channels: the k-th recv of a channel (ordered device pair) is the k-th send's
 *     message (FIFO); collectives are issued in the same order on every device;
 *   - deadlock: runs the simulator's executor; when it gets stuck, the cycle of
 *     devices waiting on each other is reported op by op;
 *   - memory: each device's peak over program order against `limit`, host memory
 *     against `host_limit`, at the op where the peak is reached.
 * All checks are O(ops) (plus O(m * S) tables). It does not time the schedule (the
 * simulator does, and analysis.c checks the memory peak over time). */
#include "recompute.h"
#include "verify.h"
#include "overlap.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_MISSING = 20 };   /* individual "missing pass" errors before a summary */
enum { MAX_ERRORS = 1000 };  /* verify stops looking after this many errors */

typedef struct V {
  Arena *a;
  Diag *dg;
  const IrSchedule *s;
  AnaIndex *ix;
  int errors0;
  int first;      /* errors before verify started */
  int64_t misplaced;   /* passes check_structure found on another device than their stage's */
  int comm_written;    /* check_structure met a send or recv the file wrote (not inserted) */
} V;

/* A schedule wrong everywhere would report millions of errors: stop at MAX_ERRORS. */
static int enough(const V *v) { return v->dg->errors - v->first >= MAX_ERRORS; }

static const char *opname(const V *v, const IrOp *op, char *buf, int n) {
  ir_format_op(v->s, op, buf, n);
  return buf;
}

/* The op's name, marked when the compiler inserted it (its span is its cause's). */
static const char *opname_ins(const V *v, const IrOp *op, char *buf, int n) {
  int k = ir_format_op(v->s, op, buf, n);
  if ((op->flags & IR_FLAG_INSERTED) && k > 0 && k + 12 < n) strcat(buf, " (inserted)");
  return buf;
}

static const IrOp *OP(const V *v, int32_t g) { return ana_op(v->s, v->ix, g); }

static Span dev_span(const V *v, int d) {
  if (d >= 0 && d < v->s->ndev && v->s->devs[d].span.file) return v->s->devs[d].span;
  return v->s->span;
}

/* The note under an error at an op whose message does not name its device (issue 12:
 * a schedule written with loops gives the same message for every device and
 * iteration otherwise): "in device 3, i = 7" at the innermost loop that wrote the op,
 * "in device 3" at the device's block when no loop did (ir_note_op). */
static void in_dev(V *v, int d, const IrOp *op) { ir_note_op(v->dg, v->s, d, op, 0); }
/* The same under an error whose message names the device: only the loop bindings. */
static void in_loop(V *v, int d, const IrOp *op) { ir_note_op(v->dg, v->s, d, op, 1); }

/* ---- structure ---- */
static void check_structure(V *v, int32_t *sendtab[2], int32_t *recvtab[2]) {
  const IrSchedule *s = v->s;
  AnaIndex *ix = v->ix;
  char b1[96];
  int S = s->nstage;
  for (int d = 0; d < s->ndev && !enough(v); d++) {
    const IrDevice *dv = &s->devs[d];
    for (int k = 0; k < dv->nops && !enough(v); k++) {
      const IrOp *op = &dv->ops[k];
      int32_t g = ix->off[d] + k;
      switch ((IrKind)op->kind) {
      case IR_F: case IR_B: case IR_W: case IR_BW: case IR_OFFLOAD: case IR_RELOAD: {
        if (!ana_valid_pass(s, op)) {
          diag_error(v->dg, op->span, "%s is out of range (%d microbatches, %d stages)", opname(v, op, b1, sizeof b1), s->nmb, S);
          in_dev(v, d, op);
          break;
        }
        int home = s->stages[op->stage].device;
        if (home != d) {
          diag_error(v->dg, op->span, "%s runs on device %d, but stage %d is on device %d", opname(v, op, b1, sizeof b1), d, op->stage, home);
          v->misplaced++;
          in_loop(v, d, op);
          break;
        }
        int64_t sl = ANA_SLOT(ix, op->mb, op->stage);
        int32_t first = op->kind == IR_F ? ix->posF[sl] : op->kind == IR_W ? ix->posW[sl]
                      : op->kind == IR_OFFLOAD ? ix->posOff[sl] : op->kind == IR_RELOAD ? ix->posRel[sl] : ix->posB[sl];
        if (first != g) {
          const IrOp *f = OP(v, first);
          if (f->kind != op->kind && (op->kind == IR_B || op->kind == IR_BW))
            diag_error(v->dg, op->span, "%s: this (microbatch, stage) already has a %s", opname(v, op, b1, sizeof b1), ir_kind_name(f->kind));
          else
            diag_error(v->dg, op->span, "%s is written twice", opname(v, op, b1, sizeof b1));
          in_dev(v, d, op);
          diag_note(v->dg, f->span, "first written here");
        }
        break;
      }
      case IR_IF: case IR_IB: case IR_S: case IR_T: case IR_COLL:
        if (op->mb < 0 || op->mb >= s->nmb) {
          diag_error(v->dg, op->span, "%s: microbatch out of range (%d microbatches)", opname(v, op, b1, sizeof b1), s->nmb);
          in_dev(v, d, op);
        } else if (!s->vocab.mode) {
          diag_error(v->dg, op->span, "%s needs `vocab parallel 1` or `vocab parallel 2`", opname(v, op, b1, sizeof b1));
          in_loop(v, d, op);
        } else if (op->kind == IR_COLL && op->coll == IR_COLL_OUTPUT_BWD && s->vocab.mode == 2) {
          diag_error(v->dg, op->span, "coll output_bwd is Vocab-1 only (this schedule is `vocab parallel 2`)");
          in_loop(v, d, op);
        }
        break;
      case IR_SEND: case IR_RECV: {
        int snd = op->kind == IR_SEND;
        if (!(op->flags & IR_FLAG_INSERTED)) v->comm_written = 1;
        if (!ana_valid_pass(s, op) || (op->xfer != IR_XFER_ACT && op->xfer != IR_XFER_GRAD)) {
          diag_error(v->dg, op->span, "%s is out of range (%d microbatches, %d stages)", opname(v, op, b1, sizeof b1), s->nmb, S);
          in_dev(v, d, op);
          break;
        }
        int act = op->xfer == IR_XFER_ACT;
        int other = act ? op->stage + 1 : op->stage - 1;
        if (other < 0 || other >= S) {
          diag_error(v->dg, op->span, "%s: stage %d has no %s stage to %s", opname(v, op, b1, sizeof b1), op->stage,
                     act ? "next" : "previous", snd ? "send to" : "receive from");
          in_dev(v, d, op);
          break;
        }
        int from = s->stages[op->stage].device, to = s->stages[other].device;
        int me = snd ? from : to, peer = snd ? to : from;
        if (from == to) {
          diag_error(v->dg, op->span, "%s: stages %d and %d are both on device %d, nothing to %s", opname(v, op, b1, sizeof b1),
                     op->stage, other, from, snd ? "send" : "receive");
          in_loop(v, d, op);
          break;
        }
        if (d != me || op->peer != peer) {
          diag_error(v->dg, op->span, "%s belongs on device %d %s device %d (it is on device %d, peer %d)", opname(v, op, b1, sizeof b1),
                     me, snd ? "to" : "from", peer, d, op->peer);
          in_loop(v, d, op);
          break;
        }
        int32_t *tab = snd ? sendtab[!act] : recvtab[!act];
        int64_t sl = ANA_SLOT(ix, op->mb, op->stage);
        if (tab[sl] >= 0) {
          diag_error(v->dg, op->span, "%s is written twice", opname(v, op, b1, sizeof b1));
          in_dev(v, d, op);
          diag_note(v->dg, OP(v, tab[sl])->span, "first written here");
        } else {
          tab[sl] = g;
        }
        break;
      }
      default:
        diag_error(v->dg, op->span, "unknown op kind %d", op->kind);
      }
    }
  }
}

/* ---- completeness and dependencies ---- */
/* Missing passes are collected, then reported one error per (device, pass kind,
 * stage) with the microbatches as half-open ranges, "device 0 never runs W(i) for i
 * in 0..8": a schedule that forgets the W of every B reads as one line per device. */
typedef struct Miss { int d, kind, st, mb; } Miss;
typedef struct Missing { Miss *v; int64_t n, cap; } Missing;

static void missing(V *v, Missing *ms, int d, int kind, int mb, int st) {
  if (ms->n == ms->cap) {
    int64_t cap = ms->cap ? 2 * ms->cap : 64;
    Miss *nv = arena_alloc(v->a, sizeof(Miss) * (size_t)cap);
    if (ms->n) memcpy(nv, ms->v, sizeof(Miss) * (size_t)ms->n);
    ms->v = nv;
    ms->cap = cap;
  }
  ms->v[ms->n++] = (Miss){d, kind, st, mb};
}

static int miss_cmp(const void *x, const void *y) {
  const Miss *a = x, *b = y;
  if (a->d != b->d) return a->d - b->d;
  if (a->st != b->st) return a->st - b->st;
  if (a->kind != b->kind) return a->kind - b->kind;
  return a->mb - b->mb;
}

static void report_missing(V *v, Missing *ms) {
  const IrSchedule *s = v->s;
  if (ms->n == 0) return;
  qsort(ms->v, (size_t)ms->n, sizeof *ms->v, miss_cmp);
  int groups = 0;
  for (int64_t k = 0; k < ms->n;) {
    int64_t e = k;
    while (e < ms->n && ms->v[e].d == ms->v[k].d && ms->v[e].st == ms->v[k].st && ms->v[e].kind == ms->v[k].kind) e++;
    if (groups++ == MAX_MISSING) {
      int64_t rest = ms->n - k;
      diag_error(v->dg, s->span, "%lld more passes are missing", (long long)rest);
      return;
    }
    const Miss *m0 = &ms->v[k];
    IrOp op = {0};
    op.kind = (uint8_t)m0->kind;
    op.mb = m0->mb;
    op.stage = m0->st;
    char name[96];
    ir_format_op(s, &op, name, sizeof name);
    if (e - k == 1) {
      diag_error(v->dg, dev_span(v, m0->d), "device %d never runs %s", m0->d, name);
    } else {
      /* the pass with i for its microbatch, then the runs of consecutive microbatches */
      char *paren = strchr(name, '(');
      char *rest = paren ? strpbrk(paren, ",)") : NULL;
      char pat[96];
      snprintf(pat, sizeof pat, "%.*s(i%s", paren ? (int)(paren - name) : 0, name, rest ? rest : ")");
      /* the microbatches as runs in the language's notation: 0..8, 1..8 step 2, 5 */
      char list[160];
      int len = 0, runs = 0;
      list[0] = 0;
      for (int64_t j = k; j < e;) {
        int64_t r = j;
        int step = j + 1 < e ? ms->v[j + 1].mb - ms->v[j].mb : 1;
        while (r + 1 < e && ms->v[r + 1].mb - ms->v[r].mb == step) r++;
        if (r - j < (step == 1 ? 1 : 2)) r = j; /* too short to be a run: one value */
        char one[64];
        if (r == j) snprintf(one, sizeof one, "%d", ms->v[j].mb);
        else if (step == 1) snprintf(one, sizeof one, "%d..%d", ms->v[j].mb, ms->v[r].mb + 1);
        else snprintf(one, sizeof one, "%d..%d step %d", ms->v[j].mb, ms->v[r].mb + 1, step);
        if (len + strlen(one) + 8 < sizeof list)
          len += snprintf(list + len, sizeof list - (size_t)len, "%s%s", runs ? ", " : "", one);
        else if (len + 6 < (int)sizeof list && list[len - 1] != '.')
          len += snprintf(list + len, sizeof list - (size_t)len, ", ...");
        runs++;
        j = r + 1;
      }
      diag_error(v->dg, dev_span(v, m0->d), "device %d never runs %s for i in %s (%lld passes)", m0->d, pat, list,
                 (long long)(e - k));
    }
    if (m0->kind == IR_W) {
      int32_t b = v->ix->posB[ANA_SLOT(v->ix, m0->mb, m0->st)];
      if (b >= 0)
        diag_note(v->dg, OP(v, b)->span,
                  "B is the input-gradient half of the backward: each B needs its W later on the same device; write BW for the fused backward");
    }
    k = e;
  }
}

/* Reports what need() found wrong (it decided there is something; cold). */
static void __attribute__((noinline, cold)) need_report(V *v, int32_t prod, int32_t cons, int xfer, int pd, int cd,
                                                        int32_t sd, int32_t rv, int comm_written) {
  char b1[96], b2[96];
  if (pd == cd) {
    const IrOp *p = OP(v, prod), *c = OP(v, cons);
    diag_error(v->dg, c->span, "%s runs before %s, which it needs", opname(v, c, b1, sizeof b1), opname(v, p, b2, sizeof b2));
    in_dev(v, cd, c);
    diag_note(v->dg, p->span, "%s is here", b2);
    return;
  }
  const IrOp *p = OP(v, prod), *c = OP(v, cons);
  IrOp tmp = *p;
  tmp.kind = IR_SEND;
  tmp.xfer = (uint8_t)xfer;
  if (sd < 0) {
    if (comm_written) {
      diag_error(v->dg, p->span, "%s: its output is never sent to device %d (no %s)", opname(v, p, b1, sizeof b1), cd, opname(v, &tmp, b2, sizeof b2));
      in_dev(v, pd, p);
    }
  } else if (sd < prod) {
    diag_error(v->dg, OP(v, sd)->span, "%s comes before %s, which produces what it sends", opname(v, OP(v, sd), b1, sizeof b1), opname(v, p, b2, sizeof b2));
    in_dev(v, pd, OP(v, sd));
    diag_note(v->dg, p->span, "%s is here", b2);
  }
  tmp.kind = IR_RECV;
  if (rv < 0) {
    if (comm_written) {
      diag_error(v->dg, c->span, "%s needs %s from device %d first", opname(v, c, b1, sizeof b1), opname(v, &tmp, b2, sizeof b2), pd);
      in_dev(v, cd, c);
    }
  } else if (rv > cons) {
    diag_error(v->dg, c->span, "%s runs before %s, which brings its input", opname(v, c, b1, sizeof b1), opname(v, OP(v, rv), b2, sizeof b2));
    in_dev(v, cd, c);
    diag_note(v->dg, OP(v, rv)->span, "%s is here", b2);
  }
}

/* producer must precede consumer: same device -> order; else through send/recv.
 * psl: the producer's (microbatch, stage) slot (used for a transfer); pst, cst: the
 * producer's and consumer's stages. The ops are looked at only when something is
 * wrong (the index alone decides the rest; need_report reads them). */
static inline void need(V *v, int32_t prod, int32_t cons, int xfer, int64_t psl, int32_t *sendtab[2],
                        int32_t *recvtab[2], int comm_written, int pst, int cst) {
  if (prod < 0 || cons < 0) return;
  /* their devices: their stages' when every pass is on its stage's device (the index
     then need not be read at two random places) */
  int pd = v->misplaced ? v->ix->devof[prod] : v->s->stages[pst].device;
  int cd = v->misplaced ? v->ix->devof[cons] : v->s->stages[cst].device;
  if (pd == cd) {
    if (prod > cons) need_report(v, prod, cons, xfer, pd, cd, -1, -1, comm_written);
    return;
  }
  if (xfer == IR_XFER_NONE) return;
  int32_t sd = sendtab[xfer == IR_XFER_GRAD][psl], rv = recvtab[xfer == IR_XFER_GRAD][psl];
  if ((sd >= 0 || !comm_written) && (sd < 0 || sd >= prod) && (rv >= 0 || !comm_written) && (rv < 0 || rv <= cons))
    return;   /* nothing to report */
  need_report(v, prod, cons, xfer, pd, cd, sd, rv, comm_written);
}

static void check_passes(V *v, int32_t *sendtab[2], int32_t *recvtab[2]) {
  const IrSchedule *s = v->s;
  AnaIndex *ix = v->ix;
  int S = s->nstage, m = s->nmb;
  Missing ms = {0};
  char b1[96], b2[96];
  int comm_written = v->comm_written;
  for (int i = 0; i < m && !enough(v); i++)
    for (int st = 0; st < S; st++) {
      int64_t sl = ANA_SLOT(ix, i, st);
      int d = s->stages[st].device;
      int32_t f = ix->posF[sl], b = ix->posB[sl], w = ix->posW[sl];
      if (f < 0) missing(v, &ms, d, IR_F, i, st);
      if (b < 0) missing(v, &ms, d, w >= 0 ? IR_B : IR_BW, i, st);
      else if (ANA_KIND(ix->kf[b]) == IR_B && w < 0) missing(v, &ms, d, IR_W, i, st);
      else if (ANA_KIND(ix->kf[b]) == IR_BW && w >= 0) {
        diag_error(v->dg, OP(v, w)->span, "%s: this (microbatch, stage) has a fused BW already", opname(v, OP(v, w), b1, sizeof b1));
        in_dev(v, ix->devof[w], OP(v, w));
        diag_note(v->dg, OP(v, b)->span, "%s is here", opname(v, OP(v, b), b2, sizeof b2));
      }
      if (b < 0 && w >= 0) {} /* reported as missing B */
      /* dependencies */
      if (st > 0) need(v, ix->posF[ANA_SLOT(ix, i, st - 1)], f, IR_XFER_ACT, ANA_SLOT(ix, i, st - 1), sendtab, recvtab, comm_written, st - 1, st);
      need(v, f, b, IR_XFER_NONE, sl, sendtab, recvtab, comm_written, st, st);
      if (st + 1 < S) need(v, ix->posB[ANA_SLOT(ix, i, st + 1)], b, IR_XFER_GRAD, ANA_SLOT(ix, i, st + 1), sendtab, recvtab, comm_written, st + 1, st);
      if (b >= 0 && ANA_KIND(ix->kf[b]) == IR_B) need(v, b, w, IR_XFER_NONE, sl, sendtab, recvtab, comm_written, st, st);
      /* offload / reload */
      int32_t of = ix->posOff[sl], rl = ix->posRel[sl];
      if (of >= 0) {
        need(v, f, of, IR_XFER_NONE, sl, sendtab, recvtab, comm_written, st, st);
        if (rl < 0) {
          diag_error(v->dg, OP(v, of)->span, "%s is never reloaded (no reload(%d,%d) before its backward)", opname(v, OP(v, of), b1, sizeof b1), i, st);
          in_dev(v, ix->devof[of], OP(v, of));
        } else {
          need(v, of, rl, IR_XFER_NONE, sl, sendtab, recvtab, comm_written, st, st);
          need(v, rl, b, IR_XFER_NONE, sl, sendtab, recvtab, comm_written, st, st);
        }
      } else if (rl >= 0) {
        diag_error(v->dg, OP(v, rl)->span, "%s reloads an activation that was never offloaded", opname(v, OP(v, rl), b1, sizeof b1));
        in_dev(v, ix->devof[rl], OP(v, rl));
      }
    }
  report_missing(v, &ms);
  /* sends/recvs that no dependency uses: both ends exist, but the other side is absent */
  for (int x = 0; x < 2; x++)
    for (int i = 0; i < m; i++)
      for (int st = 0; st < S && !enough(v); st++) {
        int64_t sl = ANA_SLOT(ix, i, st);
        int32_t sd = sendtab[x][sl], rv = recvtab[x][sl];
        if ((sd >= 0) == (rv >= 0)) continue;
        const IrOp *op = OP(v, sd >= 0 ? sd : rv);
        if (sd >= 0) diag_error(v->dg, op->span, "%s is never received (no matching recv on device %d)", opname(v, op, b1, sizeof b1), op->peer);
        else diag_error(v->dg, op->span, "%s has no matching send on device %d", opname(v, op, b1, sizeof b1), op->peer);
        in_dev(v, v->ix->devof[sd >= 0 ? sd : rv], op);
      }
}

/* ---- channels (FIFO) ---- */
static void check_channels(V *v, const SimLinks *L) {
  if (!L->nmisfit) return;   /* sim_links compared the messages' keys: every recv gets its own */
  char b1[96], b2[96];
  int64_t n = v->ix->total;
  int reported = 0;
  for (int64_t g = 0; g < n && reported < MAX_MISSING; g++) {
    if (ANA_KIND(v->ix->kf[g]) != IR_RECV || L->chan[g] < 0 || L->link[g] < 0) continue;
    const IrOp *op = OP(v, (int32_t)g);
    const IrOp *sd = OP(v, L->link[g]);
    if (sd->xfer != op->xfer || sd->mb != op->mb || sd->stage != op->stage) {
      diag_error(v->dg, op->span, "%s would receive the message of %s: messages between two devices arrive in the order they were sent",
                 opname(v, op, b1, sizeof b1), opname(v, sd, b2, sizeof b2));
      in_dev(v, v->ix->devof[g], op);
      diag_note(v->dg, sd->span, "%s is sent here", b2);
      reported++;
    }
  }
}

/* ---- collectives: same order everywhere ---- */
static void check_colls(V *v, const SimLinks *L) {
  const IrSchedule *s = v->s;
  int P = s->ndev;
  if (P <= 1) return;
  /* collectives and S passes (a broadcast) per device; the device with most is the reference */
  int ref = 0, best = -1;
  for (int d = 0; d < P; d++) {
    int c = L->ncoll[d];   /* (sim_links counted them) */
    if (c > best) { best = c; ref = d; }
  }
  if (best <= 0) return;
  int32_t *seq = arena_alloc(v->a, sizeof(int32_t) * (size_t)best);
  int n = 0;
  for (int32_t g = v->ix->off[ref]; g < v->ix->off[ref + 1]; g++)
    if (ANA_KIND(v->ix->kf[g]) == IR_COLL || ANA_KIND(v->ix->kf[g]) == IR_S) seq[n++] = g;
  char b1[96], b2[96];
  for (int d = 0; d < P; d++) {
    if (d == ref) continue;
    int k = 0;
    int32_t last = -1;
    for (int32_t g = v->ix->off[d]; g < v->ix->off[d + 1]; g++) {
      if (ANA_KIND(v->ix->kf[g]) != IR_COLL && ANA_KIND(v->ix->kf[g]) != IR_S) continue;   /* (kind bytes first) */
      const IrOp *op = OP(v, g);
      last = g;
      if (k >= n) {
        diag_error(v->dg, op->span, "device %d issues %s, but device %d has no more collectives", d, opname(v, op, b1, sizeof b1), ref);
        in_loop(v, d, op);
        goto next;
      }
      const IrOp *r = OP(v, seq[k]);
      if (r->kind != op->kind || r->coll != op->coll || r->mb != op->mb) {
        diag_error(v->dg, op->span, "collective order differs: device %d issues %s where device %d issues %s",
                   d, opname(v, op, b1, sizeof b1), ref, opname(v, r, b2, sizeof b2));
        in_loop(v, d, op);
        diag_note(v->dg, r->span, "device %d's %s is here", ref, b2);
        goto next;
      }
      k++;
    }
    if (k < n) {
      const IrOp *r = OP(v, seq[k]);
      diag_error(v->dg, last >= 0 ? OP(v, last)->span : dev_span(v, d), "device %d issues %d collectives, device %d issues %d (the first it lacks is %s)",
                 d, k, ref, n, opname(v, r, b2, sizeof b2));
      if (last >= 0) in_loop(v, d, OP(v, last));
    }
  next:;
  }
}

/* ---- vocabulary passes around their collectives ---- */
static void check_vocab(V *v) {
  const IrSchedule *s = v->s;
  int P = s->ndev, m = s->nmb, S = s->nstage, mode = s->vocab.mode;
  if (!mode || !v->ix->nvocab) {
    if (mode && !v->ix->nvocab) diag_error(v->dg, s->vocab.span, "vocabulary parallelism: no vocabulary passes in the schedule");
    return;
  }
  /* per device, per microbatch, the position of IF IB S T and the 4 collectives */
  enum { K_IF, K_IB, K_S, K_T, K_CIF, K_COF, K_COB, K_CIB, NK };
  int32_t *pos = arena_alloc(v->a, sizeof(int32_t) * (size_t)m * NK);
  char b1[96], b2[96];
  int reported = 0;
  for (int d = 0; d < P && reported < MAX_MISSING; d++) {
    memset(pos, 0xff, sizeof(int32_t) * (size_t)m * NK);
    for (int32_t g = v->ix->off[d]; g < v->ix->off[d + 1]; g++) {
      int kk = ANA_KIND(v->ix->kf[g]);   /* (the other kinds' ops are not read) */
      if (kk != IR_IF && kk != IR_IB && kk != IR_S && kk != IR_T && kk != IR_COLL) continue;
      const IrOp *op = OP(v, g);
      int k = -1;
      switch ((IrKind)op->kind) {
      case IR_IF: k = K_IF; break;
      case IR_IB: k = K_IB; break;
      case IR_S: k = K_S; break;
      case IR_T: k = K_T; break;
      case IR_COLL: k = op->coll == IR_COLL_INPUT_FWD ? K_CIF : op->coll == IR_COLL_OUTPUT_FWD ? K_COF
                      : op->coll == IR_COLL_OUTPUT_BWD ? K_COB : op->coll == IR_COLL_INPUT_BWD ? K_CIB : -1; break;
      default: break;
      }
      if (k < 0 || op->mb < 0 || op->mb >= m) continue;
      if (pos[op->mb * NK + k] >= 0) {
        diag_error(v->dg, op->span, "%s is written twice on device %d", opname(v, op, b1, sizeof b1), d);
        in_loop(v, d, op);
        reported++;
      }
      else pos[op->mb * NK + k] = g;
    }
    static const char *kn[NK] = {"IF", "IB", "S", "T", "coll input_fwd", "coll output_fwd", "coll output_bwd", "coll input_bwd"};
    for (int i = 0; i < m && reported < MAX_MISSING; i++) {
      int32_t *p = &pos[i * NK];
      for (int k = 0; k < NK; k++)
        if (p[k] < 0 && (k != K_COB || mode == 1)) {
          diag_error(v->dg, dev_span(v, d), "device %d never runs %s(%d) (vocab parallel %d)", d, kn[k], i, mode);
          reported++;
        }
      /* order on this device: X must come before Y */
      static const int before[][2] = {{K_IF, K_CIF}, {K_S, K_COF}, {K_COF, K_T}, {K_CIB, K_IB}};
      for (size_t e = 0; e < sizeof before / sizeof *before; e++) {
        int32_t x = p[before[e][0]], y = p[before[e][1]];
        if (x >= 0 && y >= 0 && x > y) {
          diag_error(v->dg, OP(v, y)->span, "%s runs before %s, which it needs", opname(v, OP(v, y), b1, sizeof b1), opname(v, OP(v, x), b2, sizeof b2));
          in_dev(v, d, OP(v, y));
          reported++;
        }
      }
      if (mode == 1 && p[K_T] >= 0 && p[K_COB] >= 0 && p[K_T] > p[K_COB]) {
        diag_error(v->dg, OP(v, p[K_COB])->span, "coll output_bwd(%d) runs before T(%d), which produces the input gradient it reduces", i, i);
        in_dev(v, d, OP(v, p[K_COB]));
        reported++;
      }
      /* the pipeline's own passes */
      if (d == s->stages[0].device) {
        int32_t f0 = v->ix->posF[ANA_SLOT(v->ix, i, 0)], b0 = v->ix->posB[ANA_SLOT(v->ix, i, 0)];
        if (f0 >= 0 && p[K_CIF] >= 0 && p[K_CIF] > f0) {
          diag_error(v->dg, OP(v, f0)->span, "%s runs before coll input_fwd(%d), which gives it its input", opname(v, OP(v, f0), b1, sizeof b1), i);
          in_dev(v, d, OP(v, f0));
          reported++;
        }
        if (b0 >= 0 && p[K_CIB] >= 0 && p[K_CIB] < b0) {
          diag_error(v->dg, OP(v, p[K_CIB])->span, "coll input_bwd(%d) runs before %s, whose input gradient it broadcasts", i, opname(v, OP(v, b0), b1, sizeof b1));
          in_dev(v, d, OP(v, p[K_CIB]));
          reported++;
        }
      }
      if (d == s->stages[S - 1].device) {
        int32_t fl = v->ix->posF[ANA_SLOT(v->ix, i, S - 1)];
        if (fl >= 0 && p[K_S] >= 0 && p[K_S] < fl) {
          diag_error(v->dg, OP(v, p[K_S])->span, "S(%d) runs before %s, whose output it broadcasts", i, opname(v, OP(v, fl), b1, sizeof b1));
          in_dev(v, d, OP(v, p[K_S]));
          reported++;
        }
        int32_t bl = v->ix->posB[ANA_SLOT(v->ix, i, S - 1)];
        int32_t need = mode == 1 ? p[K_COB] : p[K_COF];
        if (bl >= 0 && need >= 0 && need > bl) {
          diag_error(v->dg, OP(v, bl)->span, "%s runs before %s, which gives it the loss gradient", opname(v, OP(v, bl), b1, sizeof b1), opname(v, OP(v, need), b2, sizeof b2));
          in_dev(v, d, OP(v, bl));
          reported++;
        }
      }
    }
  }
}

/* ---- deadlock: follow who waits on whom from a stuck device ---- */
/* An op's name in a deadlock note with the loop bindings that wrote it:
 * "F(3) (with d = 1, i = 2)", "recv F(3) (inserted, with d = 1, i = 2)". */
static const char *opname_loops(const V *v, const IrOp *op, char *buf, int n) {
  char b[128];
  opname_ins(v, op, buf, n);
  if (ir_format_frame(v->s, ir_op_frame(op), b, sizeof b) > 0) {
    size_t len = strlen(buf);
    if (op->flags & IR_FLAG_INSERTED && len && buf[len - 1] == ')' && strstr(buf, " (inserted)"))
      snprintf(buf + len - 1, (size_t)n - (len - 1), ", with %s)", b);
    else
      snprintf(buf + len, (size_t)n - len, " (with %s)", b);
  }
  return buf;
}

static int waits_on(const V *v, const SimLinks *L, const SimResult *r, int d) {
  int32_t h = r->stuck_at[d];
  if (h < 0) return -1;
  const IrOp *op = OP(v, h);
  if (op->kind == IR_COLL || op->kind == IR_S) {   /* S: a broadcast, a collective too */
    int k = L->link[h];
    for (int e = 0; e < v->s->ndev; e++) {
      if (e == d) continue;
      int32_t he = r->stuck_at[e];
      if (he < 0) return e; /* finished without reaching it */
      if ((OP(v, he)->kind != IR_COLL && OP(v, he)->kind != IR_S) || L->link[he] != k) return e;
    }
    return -1;
  }
  if (r->wait_op[d] < 0) return -1;
  return v->ix->devof[r->wait_op[d]];
}

/* A lane collective's wait (`vocab async`: a pass waits for a collective that some
 * device has not issued; exec.c's wait_op is that collective on the first such device
 * other than the waiting one): the devices other than e that have not issued sequence
 * number k (L->link), as "device 1", "devices 0 and 2", "devices 0, 1, 2, 3 and 5
 * more" (at most five named); returns how many. Cold: a deadlock report only. */
static int lane_missing(const V *v, const SimLinks *L, const SimResult *r, int e, int32_t k, char *buf, int n) {
  int P = v->s->ndev, cnt = 0, len;
  enum { SHOW = 5 };   /* all when at most SHOW, else SHOW - 1 and a count */
  int ids[SHOW];
  for (int x = 0; x < P; x++) {
    if (x == e || r->stuck_at[x] < 0) continue;
    /* its collectives are numbered in its order: the first at or after where it stops
     * is the first it has not issued (none: it issued all it has, L->ncoll) */
    int32_t next = L->ncoll[x];
    for (int32_t h = r->stuck_at[x]; h < v->ix->off[x + 1]; h++)
      if (ANA_KIND(v->ix->kf[h]) == IR_COLL || ANA_KIND(v->ix->kf[h]) == IR_S) { next = L->link[h]; break; }
    if (next > k) continue;   /* issued it */
    if (cnt < SHOW) ids[cnt] = x;
    cnt++;
  }
  int shown = cnt <= SHOW ? cnt : SHOW - 1;
  len = snprintf(buf, (size_t)n, "device%s", cnt == 1 ? "" : "s");
  for (int i = 0; i < shown && len < n; i++)
    len += snprintf(buf + len, (size_t)(n - len), "%s%d", i == 0 ? " " : i + 1 == cnt ? " and " : ", ", ids[i]);
  if (cnt > shown && len < n) snprintf(buf + len, (size_t)(n - len), " and %d more", cnt - shown);
  return cnt;
}

/* rdv: the run is the rendezvous model's (rendezvous_run), after the buffered one passed */
static void report_deadlock(V *v, const SimLinks *L, const SimResult *r, int rdv) {
  const IrSchedule *s = v->s;
  int P = s->ndev;
  int *mark = arena_alloc(v->a, sizeof(int) * (size_t)P);
  int *path = arena_alloc(v->a, sizeof(int) * (size_t)(P + 1));
  char b1[256], b2[256], b3[96];
  int first_stuck = -1;
  for (int d0 = 0; d0 < P; d0++) {
    if (r->stuck_at[d0] < 0 || mark[d0]) continue;
    if (first_stuck < 0) first_stuck = d0;
    int np = 0, d = d0;
    while (d >= 0 && !mark[d] && r->stuck_at[d] >= 0) {
      mark[d] = d0 + 1;
      path[np++] = d;
      d = waits_on(v, L, r, d);
    }
    if (d < 0 || r->stuck_at[d] < 0 || mark[d] != d0 + 1) continue;
    /* the cycle is path[j..np) where path[j] == d */
    int j = 0;
    while (path[j] != d) j++;
    int len = np - j;
    const IrOp *h0 = OP(v, r->stuck_at[path[j]]);
    diag_error(v->dg, h0->span, "deadlock%s: %d device%s wait on each other in a cycle, starting at %s on device %d",
               rdv ? " with rendezvous sends" : "", len, len == 1 ? "" : "s", opname_ins(v, h0, b1, sizeof b1), path[j]);
    for (int k = 0; k < len; k++) {
      int e = path[j + k], f = path[j + (k + 1) % len];
      const IrOp *he = OP(v, r->stuck_at[e]), *hf = OP(v, r->stuck_at[f]);
      opname_loops(v, he, b1, sizeof b1);
      opname_ins(v, hf, b3, sizeof b3);
      if (he->kind == IR_COLL || he->kind == IR_S) {
        diag_note(v->dg, he->span, "device %d waits at %s for device %d, which has not reached it", e, b1, f);
      } else {
        const IrOp *w = OP(v, r->wait_op[e]);
        opname_ins(v, w, b2, sizeof b2);
        int32_t pr = -1;   /* a pass waiting for the data of a posted recv (IR_FLAG_POSTED) */
        if (L->postwait && he->kind != IR_SEND && he->kind != IR_RECV) {
          int32_t h = r->stuck_at[e];
          for (int k2 = 0; k2 <= overlap_pair_at(&v->s->devs[e], h - v->ix->off[e]) && pr < 0; k2++)
            pr = L->postwait[h + k2];
        }
        if (rdv && he->kind == IR_SEND)
          diag_note(v->dg, he->span, "device %d waits at %s until device %d posts %s", e, b1, f, b2);
        else if (w->kind == IR_COLL) {   /* a pass waiting for a lane collective (`vocab async`) */
          char b4[96], b5[128] = "";
          int nm = lane_missing(v, L, r, e, L->link[r->wait_op[e]], b4, sizeof b4);
          /* the pass that consumes it: this one, or its overlapped partner (a timed run
           * waits for both at the first) */
          int need[2], nn = sim_coll_needs(v->s, he, need), own = 0;
          for (int q = 0; q < nn; q++) own |= need[q] == w->coll && he->mb == w->mb;
          int32_t h = r->stuck_at[e];
          if (!own && overlap_pair_at(&v->s->devs[e], h - v->ix->off[e])) {
            char b6[96];
            snprintf(b5, sizeof b5, ", overlapped with %s,", opname_ins(v, OP(v, h + 1), b6, sizeof b6));
          }
          diag_note(v->dg, he->span, "device %d waits at %s%s for %s on the collective lane, which %s %s not issued",
                    e, b1, b5, b2, b4, nm == 1 ? "has" : "have");
        }
        else if (pr >= 0) {
          char b4[128];
          opname_ins(v, OP(v, pr), b4, sizeof b4);
          size_t l4 = strlen(b4);
          int ins = l4 > 11 && !strcmp(b4 + l4 - 11, " (inserted)");
          if (ins) b4[l4 - 11] = 0;
          diag_note(v->dg, he->span, "device %d waits at %s for the data of %s (%sposted earlier), from %s on device %d",
                    e, b1, b4, ins ? "inserted, " : "", b2, f);
        } else
          diag_note(v->dg, he->span, "device %d waits at %s for %s on device %d", e, b1, b2, f);
        opname_loops(v, w, b2, sizeof b2);
        diag_note(v->dg, w->span, "%s on device %d comes after %s, where device %d waits", b2, f, b3, f);
      }
    }
    if (rdv)
      diag_note(v->dg, h0->span, "with buffered sends it runs, but NCCL, PyTorch and Megatron complete a send only once "
                "its recv is posted; sends and recvs next to each other in a device's order are posted together "
                "(one group): put each device's matching send and recv in one group, without a pass between them");
    return;
  }
  /* no cycle: some wait can never be satisfied (reported already, or say it) */
  if (v->dg->errors == v->errors0 && first_stuck >= 0) {
    const IrOp *h = OP(v, r->stuck_at[first_stuck]);
    diag_error(v->dg, h->span, "%sdevice %d stops at %s: what it waits for never happens", rdv ? "with rendezvous sends, " : "",
               first_stuck, opname_ins(v, h, b1, sizeof b1));
    in_loop(v, first_stuck, h);
  }
}

/* ---- memory ---- */
/* have: the order-based figures when the timed run computed them already (sim.c's
 * figures include them), else NULL */
static void check_memory(V *v, SimDev *mem, const SimDev *have) {
  const IrSchedule *s = v->s;
  char b1[96];
  if (have)
    for (int d = 0; d < s->ndev; d++) {
      mem[d].peak_order = have[d].peak_order;
      mem[d].peak_order_op = have[d].peak_order_op;
      mem[d].host_peak = have[d].host_peak;
      mem[d].host_peak_op = have[d].host_peak_op;
      mem[d].end_memory = have[d].end_memory;
      mem[d].nops = have[d].nops;
    }
  else
    sim_memory_order(v->a, s, v->ix, mem);
  for (int d = 0; d < s->ndev; d++) {
    if (s->mem_limit >= 0 && mem[d].peak_order > s->mem_limit * (1 + 1e-9) && mem[d].peak_order_op >= 0) {
      const IrOp *op = OP(v, mem[d].peak_order_op);
      diag_error(v->dg, op->span, "device %d holds %g activations %s %s%s, over the limit of %g", d, mem[d].peak_order,
                 recompute_rebuild(s, op) > 0 ? "while" : "after", opname(v, op, b1, sizeof b1),
                 recompute_rebuild(s, op) > 0 ? " runs its forward again (recompute)" : "", s->mem_limit);
      in_loop(v, d, op);
      /* where the limit was set, when not where the pass was written (a used schedule) */
      if (s->mem_limit_span.file && s->mem_limit_span.file != op->span.file)
        diag_note(v->dg, s->mem_limit_span, "the limit of %g is set here", s->mem_limit);
    }
    if (s->offload.host_limit >= 0 && s->offload.enabled && mem[d].host_peak > s->offload.host_limit * (1 + 1e-9) &&
        mem[d].host_peak_op >= 0) {
      const IrOp *op = OP(v, mem[d].host_peak_op);
      diag_error(v->dg, op->span, "device %d keeps %g activations in host memory after %s, over the host limit of %g",
                 d, mem[d].host_peak, opname(v, op, b1, sizeof b1), s->offload.host_limit);
      in_loop(v, d, op);
    }
  }
}

int verify_schedule(Arena *a, Diag *dg, const IrSchedule *s, VerifyResult *out, const AnaIndex *ix,
                    const SimLinks *L) {
  memset(out, 0, sizeof *out);
  int e0 = dg->errors;
  if (s->ndev <= 0 || s->nstage <= 0 || s->nmb <= 0 || !s->devs || !s->stages) {
    diag_error(dg, s->span, "schedule needs devices, stages and microbatches (got %d, %d, %d)", s->ndev, s->nstage, s->nmb);
    return dg->errors - e0;
  }
  for (int st = 0; st < s->nstage; st++)
    if (s->stages[st].device < 0 || s->stages[st].device >= s->ndev) {
      diag_error(dg, s->stages[st].span.file ? s->stages[st].span : s->span, "stage %d is placed on device %d (there are %d)", st, s->stages[st].device, s->ndev);
      return dg->errors - e0;
    }
  if (ix ? (out->ix = *ix, 0) : ana_index(a, s, &out->ix)) {
    int64_t ops = 0;
    for (int d = 0; d < s->ndev; d++) ops += s->devs[d].nops;
    if (ops >= INT32_MAX)
      diag_error(dg, s->span, "schedule too large to verify: %lld ops (at most %d)", (long long)ops, INT32_MAX - 1);
    else
      diag_error(dg, s->span, "passes are missing: %d microbatches x %d stages need at least %lld passes, the schedule has %lld ops",
                 s->nmb, s->nstage, 2 * (long long)s->nmb * s->nstage, (long long)ops);
    return dg->errors - e0;
  }
  V v = {a, dg, s, &out->ix, e0, e0, 0, 0};
  int64_t slots = out->ix.nslots;
  int32_t *sendtab[2], *recvtab[2];
  for (int x = 0; x < 2; x++) {
    sendtab[x] = arena_alloc(a, sizeof(int32_t) * (size_t)(slots + 1));
    recvtab[x] = arena_alloc(a, sizeof(int32_t) * (size_t)(slots + 1));
    memset(sendtab[x], 0xff, sizeof(int32_t) * (size_t)(slots + 1));
    memset(recvtab[x], 0xff, sizeof(int32_t) * (size_t)(slots + 1));
  }
  check_structure(&v, sendtab, recvtab);
  if (!enough(&v)) check_passes(&v, sendtab, recvtab);
  if (ix && L) out->links = *L;
  else sim_links(a, s, &out->ix, &out->links);
  if (!enough(&v)) check_channels(&v, &out->links);
  if (!enough(&v)) check_colls(&v, &out->links);
  if (!enough(&v)) check_vocab(&v);
  if (!enough(&v)) overlap_verify(dg, s);
  if (enough(&v)) {
    diag_warning(dg, s->span, "verification stopped after %d errors", MAX_ERRORS);
    out->mem = arena_alloc(a, sizeof(SimDev) * (size_t)s->ndev);
    return dg->errors - e0;
  }
  /* deadlock: the executor either runs every op or stops where devices wait */
  if (!sim_run(a, s, &out->ix, &out->links, &out->sim)) {
    v.errors0 = dg->errors == e0 ? dg->errors : -1;
    report_deadlock(&v, &out->links, &out->sim, 0);
    goto memory;
  }
  /* rendezvous point-to-point within the groups the runtime issues (the nccl
   * transport's GPU side, and what PyTorch and Megatron do) */
  if (dg->errors == e0 && out->ix.ncomm && !s->p2p_buffered && !(s->rdv_proved & IR_PROVED_RDV)) {
    SimResult rv;
    ExecModel rm = {0};
    rm.rendezvous = 1;
    rm.async = exec_async(s);
    Arena t0 = {0};   /* the run's arrays: freed after it (the memory serves what follows) */
    if (!exec_run(&t0, s, &out->ix, &out->links, &rm, &rv)) {
      v.errors0 = dg->errors;
      report_deadlock(&v, &out->links, &rv, 1);
      if (dg->errors == e0) diag_error(dg, s->span, "deadlock with rendezvous sends");
    }
    arena_free(&t0);
  }
  if (s->vocab.mode && s->vocab.async) {
    /* The runtime runs the collectives on a lane per device (runtime/coll_lane.c), as
     * simulated; where it cannot (--blocking-collectives, an MPI without
     * MPI_THREAD_MULTIPLE) they block: warn when that would deadlock, with buffered
     * sends and, unless the file proves buffered only, with rendezvous sends (NCCL's) */
    SimResult blk;
    ExecModel bm = {0};   /* the same schedule, its collectives blocking: buffered, then rendezvous */
    Arena t0 = {0};       /* the runs' arrays: freed after them */
    if (exec_run(&t0, s, &out->ix, &out->links, &bm, &blk) != 1 ||
        (out->ix.ncomm && !s->p2p_buffered && !(s->rdv_proved & IR_PROVED_RDV_BLOCKING) && (bm.rendezvous = 1, exec_run(&t0, s, &out->ix, &out->links, &bm, &blk)) != 1)) {
      int d = 0;
      while (d < s->ndev - 1 && blk.stuck_at[d] < 0) d++;
      char nb[96];
      if (blk.stuck_at[d] >= 0) {
        const IrOp *h = OP(&v, blk.stuck_at[d]);
        diag_warning(dg, h->span, "with blocking collectives this schedule deadlocks (device %d stops at %s)", d,
                     opname_ins(&v, h, nb, sizeof nb));
      } else {
        diag_warning(dg, s->vocab.span, "with blocking collectives this schedule deadlocks");
      }
      diag_note(dg, s->vocab.span, "the runtime runs `vocab async` collectives on their own lane (every backend and "
                "transport); with --blocking-collectives (or an mpi without MPI_THREAD_MULTIPLE) they block, and "
                "there it stops at --timeout");
    }
    arena_free(&t0);
  }
memory:
  out->runnable = dg->errors == e0;
  out->mem = arena_alloc(a, sizeof(SimDev) * (size_t)s->ndev);
  check_memory(&v, out->mem, out->sim.ok == 1 && out->sim.dev ? out->sim.dev : NULL);
  out->ok = dg->errors == e0;
  return dg->errors - e0;
}
