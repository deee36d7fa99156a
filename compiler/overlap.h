/* overlap.h: overlapped forward and backward passes (DualPipe's F&B), written
 * `overlap { F(i, s) BW(j, t) }`: the pair's cost, the lowering step that keeps a
 * pair adjacent, and the verifier's checks. See overlap.c. */
#ifndef PPS_OVERLAP_H
#define PPS_OVERLAP_H
#include "lower.h"
#include "opindex.h"

/* The overlap efficiency e that makes an F and a BW of one device share cost TFB:
 * TFB = TF + TB + TW - e * min(TF, TB + TW). Returns 0 and sets *e, or -1 when TFB is
 * outside [max(TF, TB + TW), TF + TB + TW] (then *lo and *hi say the range). */
int overlap_efficiency(double tf, double tb, double tw, double tfb, double *e, double *lo, double *hi);
/* Time of an overlapped pair: cx + cy - e * min(cx, cy) (cx, cy: the passes' costs). */
double overlap_cost(const IrSchedule *s, const IrOp *x, const IrOp *y);
/* Whether op k of device d starts a pair with op k + 1 (flag set, both F/B/W/BW). */
int overlap_pair_at(const IrDevice *dv, int k);
/* The same from the index's kind bytes (opindex.h: AnaIndex.kf): g = the global id of
 * op k of a device with nops ops (the executor's runs read these, not the ops). */
_Static_assert(IR_F == 0 && IR_B == 1 && IR_W == 2 && IR_BW == 3, "the passes are kinds 0 to 3");
static inline int overlap_pair_kf(const uint8_t *kf, int32_t g, int k, int nops) {
  return k + 1 < nops && (ANA_FLAGS(kf[g]) & IR_FLAG_OVERLAP) && ANA_KIND(kf[g]) <= IR_BW &&
         ANA_KIND(kf[g + 1]) <= IR_BW;
}
/* Keeps every pair adjacent after a lowering step inserted ops between its halves:
 * recvs, reloads and vocabulary ops that do not depend on the first half go before
 * the pair, everything else (its sends, offloads) after it. O(ops). Returns the
 * number of pairs it moved ops around (0: the orders are as they were). */
int overlap_normalize(Arena *a, IrSchedule *s);
/* Verifier checks of the pairs: each flag names an F and a backward pass (B, W or BW)
 * of different microbatches next to each other on one device. Returns errors found. */
int overlap_verify(Diag *dg, const IrSchedule *s);
#endif
