/* lower.h: lowering (insert send/recv, offload/reload, vocabulary passes and
 * collectives) and the op index every later phase (verify, sim, report) shares.
 *
 * An op is named by a global id: off[d] + its index in devs[d].ops. The index maps
 * (microbatch, stage) to the global id of its F, B/BW, W, offload and reload. It is
 * rebuilt after each change to the op arrays (lowering replaces them). */
#ifndef PPS_LOWER_H
#define PPS_LOWER_H
#include "driver.h"
#include "ir.h"

typedef struct AnaIndex {
  int32_t ndev, nstage, nmb;
  int64_t total;       /* ops over all devices */
  int32_t *off;        /* [ndev + 1]: global id of device d's first op */
  int32_t *devof;      /* [total]: the device of each op */
  /* [nmb * nstage], slot mb * nstage + stage; -1 when absent (the first one wins) */
  int32_t *posF, *posB /* B or BW */, *posW, *posOff, *posRel;
  int ncomm, noffload, nvocab;  /* ops of each category the IR holds */
} AnaIndex;

#define ANA_SLOT(ix, mb, st) ((int64_t)(mb) * (ix)->nstage + (st))
/* A complete schedule has at least two ops per (mb, stage) (F and BW); the index is
 * not built for more (mb, stage) pairs than ANA_MAX_SLOTS(ops), and verify then says
 * passes are missing without building one. */
#define ANA_MAX_SLOTS(total) (2 * (int64_t)(total) + 4096)

/* Builds the index. Returns 0, or -1 when the schedule is too large to index
 * (total ops >= 2^31, or nmb * nstage > ANA_MAX_SLOTS(total ops)). */
int ana_index(Arena *a, const IrSchedule *s, AnaIndex *ix);
static inline const IrOp *ana_op(const IrSchedule *s, const AnaIndex *ix, int32_t g) {
  int d = ix->devof[g];
  return &s->devs[d].ops[g - ix->off[d]];
}
/* True when the op names a valid (mb, stage) of a compute pass. */
int ana_valid_pass(const IrSchedule *s, const IrOp *op);
/* Fraction of F(mb, stage)'s activation an offload of it moves. */
double ana_offload_fraction(const IrSchedule *s, int stage);

/* Lowers s in place: replaces devs[d].ops with the lowered orders (inserted ops
 * flagged IR_FLAG_INSERTED, spanned at their cause). Categories the file wrote
 * itself (any send/recv; any offload/reload; any vocabulary pass or collective) are
 * left for verify to check. Returns the number of ops inserted. Never reports
 * errors except for policies it cannot apply (a warning). */
int64_t lower_schedule(Arena *a, Diag *dg, IrSchedule *s);

struct SimLinks;
struct SimResult;
/* The rendezvous point-to-point model (lower.c): runs the lowered schedule with a
 * send that completes only once its recv is posted, the ops of one group
 * (IR_FLAG_GROUP) posted together. Returns 1 when every device finishes; else fills
 * r->stuck_at / r->wait_op (the matching op a stuck send or recv waits for) as
 * sim_run does. moved: NULL to check; else [total] of -1, and the run repairs
 * instead of stopping, guided by the buffered timing (sim_run into *timed, zeroed by
 * the caller, at the first repair), and returns -1 when it ran to the end but a
 * move joined a group it did not model (lowering's use; see lower.c). */
int rdv_run(Arena *a, const IrSchedule *s, const AnaIndex *ix, const struct SimLinks *L, struct SimResult *r,
            int32_t *moved, struct SimResult *timed);
#endif
