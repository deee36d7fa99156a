/* verify.h: verification of a lowered schedule (see verify.c for what is checked).
 * It does not lower (lower.h) and does not time anything beyond the one executor run
 * that finds deadlocks. */
#ifndef PPS_VERIFY_H
#define PPS_VERIFY_H
#include "sim.h"

typedef struct VerifyResult {
  int ok;            /* no error found */
  int runnable;      /* no error but memory bounds: the simulator can time it */
  AnaIndex ix;       /* the index of the verified IR (valid when ix.off != NULL) */
  SimLinks links;    /* channel / collective links, reused by the simulator */
  SimDev *mem;       /* [ndev] order-based memory figures */
  SimResult sim;     /* the executor's run (timed; no memory timeline) */
} VerifyResult;

/* Reports every problem through dg; returns the number of errors it added. ix and L:
 * the index and links of s's ops where the caller has them (lowering's: LowerIndex),
 * else NULL (computed here). */
int verify_schedule(Arena *a, Diag *dg, const IrSchedule *s, VerifyResult *out, const AnaIndex *ix,
                    const SimLinks *L);
#endif
