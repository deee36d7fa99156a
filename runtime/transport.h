/* transport.h: how the devices of one pipeline exchange data, internal to libppsrt.
 *
 * Implementations: threads (transport_threads.c: every device a thread of one
 * process, the default), MPI (transport_mpi.c: one process per device, host
 * buffers), NCCL (cuda/transport_nccl.c: one GPU per rank, bootstrapped over MPI or,
 * on one GPU, ranks as threads sharing an ncclUniqueId).
 *
 * Point-to-point channels are FIFO per ordered pair of devices, as the verifier
 * assumes (its buffered model: threads and MPI buffer every send; its rendezvous
 * model: NCCL completes a send only when the recv is posted, the ops of one group
 * together, see group_begin). Every call is made by the device's own thread with that device's rank.
 * Buffers live in the memory of the backend the transport was created for (host for
 * threads/MPI with the CPU backend; GPU for NCCL and for threads with CUDA, where
 * the threads transport copies device to device). Operations are enqueued on the
 * backend stream given, ordered after the work queued on it before the call; a
 * receive's data is ready in stream order on that stream. A send may complete on a
 * stream of the transport's own (NCCL: a stream per channel, so that one blocked
 * rendezvous does not hold up the others): its buffer is written again only through
 * the backend's allocator (free, then alloc), which waits for it. `timeout_s` bounds every wait:
 * past it the call fails with PPSRT_E_TIMEOUT and a message naming the peer. A failed
 * peer (crash, abort) makes the others' waits fail with PPSRT_E_COMM, never hang. */
#ifndef PPSRT_TRANSPORT_H
#define PPSRT_TRANSPORT_H
#include <stddef.h>
#include <stdint.h>
#include "backend.h"

typedef enum ppsrt_redop { PPSRT_SUM, PPSRT_MAX } ppsrt_redop;

typedef struct ppsrt_transport ppsrt_transport;
struct ppsrt_transport {
  const char *name;       /* "threads", "mpi", "nccl" */
  int nranks;
  void *impl;
  /* Per-rank operations (rank = the caller's device). tag distinguishes messages of
   * the same pair for checking (kind, mb, stage folded), not for matching: order does. */
  int (*send)(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, const void *buf,
              size_t bytes, int peer, int64_t tag);
  int (*recv)(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, void *buf,
              size_t bytes, int peer, int64_t tag);
  /* Collective over all ranks, in place, F32; every rank calls in the same order. */
  int (*allreduce_f32)(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, float *buf,
                       size_t n, ppsrt_redop op);
  /* Collective: buf of `bytes` from root to every rank, in place. */
  int (*broadcast)(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, void *buf,
                   size_t bytes, int root);
  int (*barrier)(ppsrt_transport *t, int rank);
  /* Makes every rank's pending and future calls fail (a rank hit an error). */
  void (*abort)(ppsrt_transport *t, int rank, const char *why);
  void (*destroy)(ppsrt_transport *t);
  double timeout_s;
  /* Optional (NULL: the transport has none): a second transport over the same ranks
   * whose collectives and channels are independent of this one's (threads: its own
   * accumulator and channels; MPI: MPI_Comm_dup; NCCL in one process: a second
   * collectives' communicator set, collectives only), for the collective lane
   * (coll_lane.c), whose thread calls it while the device thread calls this one.
   * Called once per process; an error means the lane is not possible (MPI without
   * MPI_THREAD_MULTIPLE) and collectives block. */
  int (*dup)(ppsrt_transport *t, ppsrt_transport **out);
  /* Optional (NULL: sends are buffered, nothing to group): a point-to-point group. The
   * interpreter calls group_begin before the first send/recv of a group the compiler
   * marked (ppsrt.h, op flag 4: consecutive sends and recvs of a device) and
   * group_end after its last; the transport issues the group's operations together
   * (NCCL: ncclGroupStart/End), so that a rendezvous send and the recv its peer posts
   * in the same group progress together. Between the two, send/recv may defer work
   * that must follow the operation's launch (events, buffer-use records) to
   * group_end; the caller orders its streams after the received data only once
   * group_end returned. */
  int (*group_begin)(ppsrt_transport *t, int rank);
  int (*group_end)(ppsrt_transport *t, int rank);
  /* Optional, both or neither (NULL: the interpreter performs a posted receive, ppsrt.h
   * op flag 8, whole with recv where its data is first read, which buffered transports
   * allow; it keeps the channel FIFO by completing a channel's pending posted receives,
   * in posting order, before any later receive of that channel). recv_post enqueues a
   * receive where it stands (inside the open group, if any; with after_group, right
   * after the open group's launch instead, before the group's receives order `stream`
   * after their data) without ordering `stream` or anything else after it, and returns
   * a handle (NULL: nothing to wait for);
   * recv_wait, called once per handle after the group's end, makes `stream` wait for
   * the data (no host wait) and releases the handle. Receives of one channel still
   * match in the order they are posted or issued. */
  int (*recv_post)(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, void *buf, size_t bytes, int peer,
                   int64_t tag, int after_group, void **handle);
  int (*recv_wait)(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, void *handle);
  /* Optional, both or neither (NULL: the transport has neither; --distributed-optimizer
   * needs them on the replica groups' transport). Collectives over all ranks, called by
   * every rank in the same order with the same count/bytes, with allreduce_f32's
   * conventions for b, stream and where the buffers live.
   * reduce_scatter_f32: send holds nranks x count F32 values, block q (values
   * [q count, (q + 1) count)) meant for rank q; rank r receives in recv (count values)
   * the reduction over every rank of its block r. recv may be send + r x count (in
   * place, as NCCL allows); any other overlap of send and recv is an error.
   * allgather: each rank's `bytes` at send land in recv (nranks x bytes) at block
   * `rank` on every rank; send may be recv + rank x bytes (in place); any other overlap
   * is an error. */
  int (*reduce_scatter_f32)(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, const float *send, float *recv,
                            size_t count, ppsrt_redop op);
  int (*allgather)(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, const void *send, void *recv,
                   size_t bytes);
  /* Optional (NULL: the transport has none; --moe-token-dispatcher alltoall needs it on the
   * expert-parallel groups' transport): an all-to-all with per-peer sizes, in bytes. Rank r
   * sends scount[q] bytes at send + sdispl[q] to every rank q (itself included: a copy)
   * and receives rcount[q] bytes from every q at recv + rdispl[q]; rank r's scount[q]
   * must equal rank q's rcount[r] (a transport that sees both refuses a mismatch). A pair
   * with 0 bytes exchanges nothing (no message, no call). Every rank calls it in the same
   * order; the arrays are read during the call only; send's and recv's used bytes must not
   * overlap (ppsrt_a2a_overlap). With allreduce_f32's conventions for b and stream:
   * recv's data is ready, and both buffers free again, in stream order after the call. */
  int (*alltoallv)(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, const void *send, const size_t *scount,
                   const size_t *sdispl, void *recv, const size_t *rcount, const size_t *rdispl);
};

/* alltoallv's buffer rule, for the transports to check: 1 when the bytes send uses
 * (scount[q] at sdispl[q], n peers) overlap those recv uses, else 0. */
static inline int ppsrt_a2a_overlap(const void *send, const size_t *scount, const size_t *sdispl, const void *recv,
                                    const size_t *rcount, const size_t *rdispl, int n) {
  uintptr_t slo = UINTPTR_MAX, shi = 0, rlo = UINTPTR_MAX, rhi = 0;   /* the spans first: apart, no pair can meet */
  for (int q = 0; q < n; q++) {
    uintptr_t s0 = (uintptr_t)send + sdispl[q], r0 = (uintptr_t)recv + rdispl[q];
    if (scount[q] && s0 < slo) slo = s0;
    if (scount[q] && s0 + scount[q] > shi) shi = s0 + scount[q];
    if (rcount[q] && r0 < rlo) rlo = r0;
    if (rcount[q] && r0 + rcount[q] > rhi) rhi = r0 + rcount[q];
  }
  if (shi <= rlo || rhi <= slo) return 0;
  for (int q = 0; q < n; q++)
    for (int p = 0; p < n; p++) {
      if (!scount[q] || !rcount[p]) continue;
      uintptr_t s0 = (uintptr_t)send + sdispl[q], r0 = (uintptr_t)recv + rdispl[p];
      if (s0 < r0 + rcount[p] && r0 < s0 + scount[q]) return 1;
    }
  return 0;
}

/* The tag the interpreter gives a SEND/RECV: xfer << 48 | mb << 20 | (stage + 1), and
 * how messages name it ("F(3,1)": the output of F(3,1); "B(3,2)": B(3,2)'s input
 * gradient); xfer 3 (PPSRT_TIE_TAG) is the gpt model's exchange of the tied embeddings'
 * gradients after an iteration. Added for mismatch messages; transports compare tags, never match on them. */
#include <stdio.h>
#define PPSRT_TIE_TAG ((int64_t)3 << 48)
static inline const char *ppsrt_tag_format(int64_t tag, char *buf, size_t n) {
  int xfer = (int)(tag >> 48), mb = (int)((tag >> 20) & 0xffffff), stage = (int)(tag & 0xfffff) - 1;
  if (xfer == 3) snprintf(buf, n, "the tied embeddings' gradient");
  else snprintf(buf, n, "%s(%d,%d)", xfer == 2 ? "B" : xfer == 1 ? "F" : "?", mb, stage);
  return buf;
}

/* reduce_scatter_f32's and allgather's buffer rule, for the transports to check: `whole`
 * holds nranks blocks of `blk` bytes, `part` one block. 1: part is whole's block `rank`
 * (in place), 0: the two do not overlap (or blk is 0), -1: any other overlap (an error). */
static inline int ppsrt_coll_blocks(const void *whole, const void *part, size_t blk, int nranks, int rank) {
  uintptr_t w = (uintptr_t)whole, p = (uintptr_t)part;
  if (!blk) return 0;
  if (p == w + (uintptr_t)rank * blk) return 1;
  return p < w + (uintptr_t)nranks * blk && w < p + blk ? -1 : 0;
}

/* How the transports name the two calls in their messages: op >= 0 a reduce-scatter of
 * `n` floats a rank (ppsrt_redop op), -1 an all-gather of `n` bytes a rank. */
static inline const char *ppsrt_coll_what(char *buf, size_t size, int op, size_t n) {
  if (op < 0) snprintf(buf, size, "an all-gather of %zu bytes a rank", n);
  else snprintf(buf, size, "a reduce-scatter (%s) of %zu floats a rank", op == PPSRT_MAX ? "max" : "sum", n);
  return buf;
}

int ppsrt_threads_transport_create(int nranks, double timeout_s, ppsrt_transport **out);
int ppsrt_mpi_transport_create(double timeout_s, ppsrt_transport **out, int *my_rank); /* MPI_Init inside */
/* The ranks of an MPI transport with the same color, ranked by key (MPI_Comm_split;
 * every rank calls it): --data-parallel's replica groups. */
int ppsrt_mpi_transport_split(ppsrt_transport *t, int color, int key, ppsrt_transport **out);
int ppsrt_nccl_transport_create(int nranks, double timeout_s, int use_mpi, ppsrt_transport **out,
                                int *my_rank);                                       /* cuda/ */
/* A transport over some of an NCCL transport's ranks, collectives only (--data-parallel's
 * replica groups, --tensor-parallel's groups): group g of ngroups, whose rank i is world
 * rank members[i] (n of them); `what` names it in messages. In process it is called for
 * every g; over MPI every rank calls it once, for the group it is in, with the same
 * ngroups (rank 0 makes the groups' NCCL ids). */
int ppsrt_nccl_transport_group(ppsrt_transport *t, int ngroups, int g, int n, const int *members, const char *what,
                               ppsrt_transport **out);                                   /* cuda/ */
#endif
