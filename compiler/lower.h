/* lower.h: lowering (insert send/recv, offload/reload, vocabulary passes and
 * collectives, and the rendezvous repair of the recvs' placement). The op index the
 * later phases share is opindex.h's. */
#ifndef PPS_LOWER_H
#define PPS_LOWER_H
#include "opindex.h"

/* Lowers s in place: replaces devs[d].ops with the lowered orders (inserted ops
 * flagged IR_FLAG_INSERTED, spanned at their cause). Categories the file wrote
 * itself (any send/recv; any offload/reload; any vocabulary pass or collective) are
 * left for verify to check. Returns the number of ops inserted. Never reports
 * errors except for policies it cannot apply (a warning). */
typedef struct LowerIndex {
  int valid;      /* 1: ix and links are those of s's ops as lowered, in a's memory */
  AnaIndex ix;
  SimLinks links;
} LowerIndex;
/* kept (may be NULL): the index and links of the lowered ops where lowering's
 * rendezvous repair has them for the final ops (else valid = 0), so that
 * verification need not compute them again. */
int64_t lower_schedule(Arena *a, Diag *dg, IrSchedule *s, LowerIndex *kept);

#endif
