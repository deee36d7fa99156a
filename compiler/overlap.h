/* overlap.h: overlapped forward and backward passes (DualPipe's F&B), written
 * `overlap { F(i, s) BW(j, t) }`: the pair's cost, the lowering step that keeps a
 * pair adjacent, and the verifier's checks. See overlap.c. */
#ifndef PPS_OVERLAP_H
#define PPS_OVERLAP_H
#include "lower.h"

/* The overlap efficiency e that makes an F and a BW of one device share cost TFB:
 * TFB = TF + TB + TW - e * min(TF, TB + TW). Returns 0 and sets *e, or -1 when TFB is
 * outside [max(TF, TB + TW), TF + TB + TW] (then *lo and *hi say the range). */
int overlap_efficiency(double tf, double tb, double tw, double tfb, double *e, double *lo, double *hi);
/* Time of an overlapped pair: cx + cy - e * min(cx, cy) (cx, cy: the passes' costs). */
double overlap_cost(const IrSchedule *s, const IrOp *x, const IrOp *y);
/* Whether op k of device d starts a pair with op k + 1 (flag set, both F/B/W/BW). */
int overlap_pair_at(const IrDevice *dv, int k);
/* Keeps every pair adjacent after a lowering step inserted ops between its halves:
 * recvs, reloads and vocabulary ops that do not depend on the first half go before
 * the pair, everything else (its sends, offloads) after it. O(ops). */
void overlap_normalize(Arena *a, IrSchedule *s);
/* Verifier checks of the pairs: each flag names an F and a backward pass (B, W or BW)
 * of different microbatches next to each other on one device. Returns errors found. */
int overlap_verify(Diag *dg, const IrSchedule *s);
#endif
