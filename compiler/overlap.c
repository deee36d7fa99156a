/* overlap.c: overlapped forward and backward passes (DualPipe, DualPipeV; PyTorch's
 * OVERLAP_F_B). A file writes `overlap { F(i, s) BW(j, t) }` on a device: the two
 * passes, of different microbatches, run at the same time on that device (on a GPU
 * on two streams, each hiding the other's communication); the IR keeps them as two
 * ops, the first flagged IR_FLAG_OVERLAP, adjacent in program order.
 *
 * Cost: a pair whose passes cost cx and cy lasts cx + cy - e * min(cx, cy), where the
 * overlap efficiency e in [0, 1] comes from `cost TFB = x`, the time of an overlapped
 * F and full backward of one device share: x = TF + TB + TW - e * min(TF, TB + TW).
 * Without TFB, e = 0: a pair costs the sum of its passes (PPS does not know how much
 * communication the overlap hides; the file says it with TFB).
 * Memory: the pair holds both passes' activations: F's is allocated at the pair's
 * start, what the backward frees is freed at its end (sim.c).
 * Timing (exec.c): the pair starts when the device is free and both passes' inputs
 * are there (its recvs come before it), and both passes end together at its end (its
 * sends come after it). The CPU runtime runs the two halves one after the other. */
#include "overlap.h"
#include "sim.h"
#include <string.h>

int overlap_efficiency(double tf, double tb, double tw, double tfb, double *e, double *lo, double *hi) {
  double bw = tb + tw, mn = tf < bw ? tf : bw;
  *lo = tf > bw ? tf : bw;
  *hi = tf + bw;
  if (tfb < *lo - 1e-12 * (1 + *hi) || tfb > *hi + 1e-12 * (1 + *hi)) return -1;
  *e = mn > 0 ? (*hi - tfb) / mn : 0;
  if (*e < 0) *e = 0;
  if (*e > 1) *e = 1;
  return 0;
}

double overlap_cost(const IrSchedule *s, const IrOp *x, const IrOp *y) {
  double cx = sim_cost(s, x), cy = sim_cost(s, y);
  return cx + cy - s->overlap_eff * (cx < cy ? cx : cy);
}

static int is_pass(int k) { return k == IR_F || k == IR_B || k == IR_W || k == IR_BW; }

int overlap_pair_at(const IrDevice *dv, int k) {
  return k + 1 < dv->nops && (dv->ops[k].flags & IR_FLAG_OVERLAP) && is_pass(dv->ops[k].kind) &&
         is_pass(dv->ops[k + 1].kind);
}

/* Whether op o (between the halves) needs the first half x to have run. */
static int needs_first(const IrSchedule *s, const IrOp *o, const IrOp *x) {
  switch ((IrKind)o->kind) {
  case IR_RECV: return 0;
  case IR_RELOAD: /* after its offload, which follows its F */
    return x->kind == IR_F && x->mb == o->mb && x->stage == o->stage;
  case IR_IF: return 0;
  case IR_S: case IR_T: return x->kind == IR_F && x->stage == s->nstage - 1 && x->mb == o->mb;
  case IR_IB: return (x->kind == IR_B || x->kind == IR_BW) && x->stage == 0 && x->mb == o->mb;
  case IR_COLL:
    if (o->mb != x->mb) return 0;
    if (o->coll == IR_COLL_INPUT_BWD) return (x->kind == IR_B || x->kind == IR_BW) && x->stage == 0;
    if (o->coll == IR_COLL_OUTPUT_FWD || o->coll == IR_COLL_OUTPUT_BWD) return x->kind == IR_F && x->stage == s->nstage - 1;
    return 0;
  default: return 1; /* sends, offloads, anything else: after the pair */
  }
}

int overlap_normalize(Arena *a, IrSchedule *s) {
  int moved = 0;
  if (!s->noverlap) return 0;
  for (int d = 0; d < s->ndev; d++) {
    IrDevice *dv = &s->devs[d];
    IrOp *tmp = NULL;
    for (int k = 0; k < dv->nops; k++) {
      IrOp *x = &dv->ops[k];
      if (!(x->flags & IR_FLAG_OVERLAP) || !is_pass(x->kind)) continue;
      int j = k + 1;
      while (j < dv->nops && !is_pass(dv->ops[j].kind)) j++;
      if (j >= dv->nops || j == k + 1) continue;
      /* ops k+1..j-1 lie between the halves: [before...] X Y [after...] */
      int n = j - k - 1;
      if (!tmp) tmp = arena_alloc(a, sizeof(IrOp) * (size_t)(dv->nops + 1));
      IrOp xo = *x, yo = dv->ops[j];
      int nb = 0, na = 0;
      for (int i = k + 1; i < j; i++)
        if (!needs_first(s, &dv->ops[i], &xo)) dv->ops[k + nb++] = dv->ops[i];
        else tmp[na++] = dv->ops[i];
      dv->ops[k + nb] = xo;
      dv->ops[k + nb + 1] = yo;
      if (na) memcpy(&dv->ops[k + nb + 2], tmp, sizeof(IrOp) * (size_t)na);
      (void)n;
      moved++;
      k = k + nb + 1; /* continue after Y */
    }
  }
  return moved;
}

int overlap_verify(Diag *dg, const IrSchedule *s) {
  int errors = 0;
  char b1[64], b2[64];
  for (int d = 0; d < s->ndev && errors < 100; d++) {
    const IrDevice *dv = &s->devs[d];
    for (int k = 0; k < dv->nops && errors < 100; k++) {
      const IrOp *x = &dv->ops[k];
      if (!(x->flags & IR_FLAG_OVERLAP)) continue;
      /* (the ops' names are formatted only for an error: dualpipe_v at P = 64, m = 1024
         has 64,000 pairs, and formatting them all took 13% of `ppsc sim`) */
      if (!is_pass(x->kind)) {
        ir_format_op(s, x, b1, sizeof b1);
        diag_error(dg, x->span, "%s cannot be overlapped: only F, B, W and BW passes can", b1);
        ir_note_op(dg, s, d, x, 1);
        errors++;
        continue;
      }
      if (k + 1 >= dv->nops || !is_pass(dv->ops[k + 1].kind)) {
        ir_format_op(s, x, b1, sizeof b1);
        diag_error(dg, x->span, "overlapped %s has no partner pass right after it on device %d", b1, d);
        ir_note_op(dg, s, d, x, 1);
        errors++;
        continue;
      }
      const IrOp *y = &dv->ops[k + 1];
      int same_dir = (x->kind == IR_F) == (y->kind == IR_F);
      if (same_dir || x->mb == y->mb) {
        ir_format_op(s, x, b1, sizeof b1);
        ir_format_op(s, y, b2, sizeof b2);
      }
      if (same_dir) {
        diag_error(dg, x->span, "overlap pairs a forward with a backward pass (B, W or BW), not %s with %s", b1, b2);
        ir_note_op(dg, s, d, x, 1);
        errors++;
      } else if (x->mb == y->mb) {
        diag_error(dg, x->span, "overlapped %s and %s belong to the same microbatch: the backward needs the forward", b1, b2);
        ir_note_op(dg, s, d, x, 1);
        errors++;
      }
      k++; /* y is the second half */
    }
  }
  return errors;
}
