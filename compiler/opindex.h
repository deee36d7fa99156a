/* opindex.h: the op index and links every phase after elaboration shares (lowering,
 * the executor, verification, simulation, reports), and the passes' device time.
 * The bottom of the analysis modules: it calls none of them.
 *
 * An op is named by a global id: off[d] + its index in devs[d].ops. The index maps
 * (microbatch, stage) to the global id of its F, B/BW, W, offload and reload. It is
 * rebuilt after each change to the op arrays (lowering replaces them). */
#ifndef PPS_OPINDEX_H
#define PPS_OPINDEX_H
#include "driver.h"
#include "ir.h"

typedef struct AnaIndex {
  int32_t ndev, nstage, nmb;
  int64_t total;       /* ops over all devices */
  int32_t *off;        /* [ndev + 1]: global id of device d's first op */
  int32_t *devof;      /* [total]: the device of each op */
  uint8_t *kf;         /* [total]: each op's kind and flags in one byte (ANA_KIND, ANA_FLAGS):
                          what the executor's runs read instead of the 32-byte op */
  /* [nslots], slot stage * mbstride + mb (ANA_SLOT: a device's ops, a few stages
     and rising microbatches, read and write neighbouring entries); -1 when absent
     (the first one wins). mbstride: nmb padded to an odd number of 64-byte lines, so
     that the stages of one microbatch (verify's loop over (mb, stage)) do not all
     fall in the same cache set. */
  int32_t *posF, *posB /* B or BW */, *posW, *posOff, *posRel;
  int32_t mbstride;
  int64_t nslots;      /* nstage * mbstride: the size of a table indexed by ANA_SLOT */
  int ncomm, noffload, nvocab;  /* ops of each category the IR holds */
} AnaIndex;

#define ANA_KIND(kf) ((kf) & 15)        /* IrKind */
#define ANA_FLAGS(kf) ((kf) >> 4)       /* IR_FLAG_* */
_Static_assert(IR_COLL < 16 && (IR_FLAG_INSERTED | IR_FLAG_OVERLAP | IR_FLAG_GROUP | IR_FLAG_POSTED) < 16,
               "AnaIndex.kf holds a kind and the flags in 4 bits each");

#define ANA_SLOT(ix, mb, st) ((int64_t)(st) * (ix)->mbstride + (mb))
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
static inline int ana_valid_pass(const IrSchedule *s, const IrOp *op) {
  return op->mb >= 0 && op->mb < s->nmb && op->stage >= 0 && op->stage < s->nstage;
}
/* Fraction of F(mb, stage)'s activation an offload of it moves. */
double ana_offload_fraction(const IrSchedule *s, int stage);

/* Links between ops that the executor and verify follow (by global id, -1 = none):
 * recv -> its send (the k-th send of the channel for the k-th recv); coll and S (a
 * broadcast) -> its sequence number among the device's collectives and S passes;
 * B/BW -> reload of (mb, stage); reload -> offload of (mb, stage). */
typedef struct SimLinks {
  int32_t *link;       /* [total] */
  int32_t *chan;       /* [total]: channel id of a send/recv, else -1 */
  int32_t *seq;        /* [total]: position of a send/recv in its channel */
  int nchan;
  int32_t *chan_src, *chan_dst;   /* [nchan] */
  int32_t *chan_nsend, *chan_nrecv; /* [nchan] */
  int32_t *ncoll;      /* [ndev] collectives and S passes on each device */
  /* posted recvs (IR_FLAG_POSTED; NULL when the schedule has none): the recv a
   * consumer waits for at its start, and each posted recv's consumer ([total], -1) */
  int32_t *postwait, *postcons;
  /* recvs whose linked send may carry another message (another microbatch, stage or
   * transfer; or one whose fields are out of range): 0 = every recv gets its own
   * message, and verify's FIFO check need not read the ops */
  int64_t nmisfit;
} SimLinks;
void sim_links(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimLinks *L);
/* The index and links after the ops moved within their devices, keeping each
 * channel's sends and recvs in order (the rendezvous repair's moves: lower.c):
 * newid[g] is op g's new global id, -1 where it did not move (the whole device).
 * Permutes ix and L in place to what ana_index and sim_links build from the new
 * orders, except for what the caller does after it: the kinds and flags of the ops
 * whose flags changed (ix->kf), and the posted recvs' consumers (ana_link_posted;
 * L->postwait is NULL until then). tmp: scratch. */
void ana_remap(Arena *tmp, const IrSchedule *s, AnaIndex *ix, SimLinks *L, const int32_t *newid);
/* sim_links' postwait and postcons, from the index's kinds and flags (new arrays in a). */
void ana_link_posted(Arena *a, const IrSchedule *s, const AnaIndex *ix, SimLinks *L);

/* Device time of one op (compute cost; 0 for send/recv/offload/reload issue). */
double sim_cost(const IrSchedule *s, const IrOp *op);
/* Under `vocab async`: how many collectives op waits for, their kinds in need[] (the
 * simulator's and the rendezvous model's one list): F(i, 0) input_fwd(i); T(i)
 * output_fwd(i); the last stage's B/BW(i) output_bwd(i) (Vocab-1) or output_fwd(i)
 * (Vocab-2); IB(i) input_bwd(i). */
int sim_coll_needs(const IrSchedule *s, const IrOp *op, int *need);
#endif
