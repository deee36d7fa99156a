/* transport_nccl.c: the GPU transport of libppsrt (transport.h) on NCCL, with an
 * NCCL-free device-copy channel for several ranks sharing one GPU.
 *
 * Modes, chosen by ppsrt_nccl_transport_create:
 *  - MPI (use_mpi = 1, built only with HAVE_MPI): one process per GPU on one or several
 *    nodes. Rank = MPI rank; the GPU is the node-local rank modulo the GPUs visible
 *    (the transport makes it current and tells the backend: see pick_device in
 *    cuda_backend.c). Rank 0 makes the ncclUniqueIds (the collectives' communicator,
 *    then one per directed pair), MPI_Bcast sends them, every rank initialises the
 *    collectives' communicator and the two-rank communicators of its own pairs, in one
 *    global order.
 *  - in process, NCCL (use_mpi = 0, at least nranks GPUs visible): every rank is a
 *    thread of this process on GPU `rank`; ncclCommInitAll makes the collectives'
 *    communicator and each pair's two-rank communicator.
 *  - in process, copy channel (use_mpi = 0, fewer GPUs than ranks, or
 *    PPSRT_NCCL_INPROC=copy): NCCL refuses two ranks of one communicator on one GPU
 *    ("Duplicate GPU detected"), so rank r runs on GPU r % ngpus and messages go through
 *    device staging buffers: a send copies into a staging buffer on its SEND stream
 *    (buffered, like the threads transport and the verifier's buffered model), the
 *    receiver waits for the staging copy's event and copies out on its RECV stream.
 *    Collectives stage each rank's buffer, meet at a host barrier, and reduce (or copy)
 *    on each rank's own stream. This is what makes any schedule runnable and checkable
 *    on a single-GPU machine.
 *
 * Communicators and streams (NCCL modes): one communicator over all ranks (C_COLL)
 * for the collectives (all-reduce, broadcast, reduce-scatter, all-gather: the
 * vocabulary's and, on a replica group, the distributed optimizer's), on a stream of
 * their own, and for the MPI mode's
 * barrier, on another (in process the barrier is a host one); and per directed pair (src -> dst) a two-rank
 * communicator (src is its rank 0) with a stream of its own on each side (pchan),
 * created at first use. NCCL sends are rendezvous (a send completes when the receiver
 * has posted its recv) and serialised per communicator and stream, so each channel is
 * FIFO, as the verifier assumes, and a send waiting for its recv blocks only its own
 * channel: the caller's SEND/RECV stream hands the buffer over by an event (`in`), and
 * a recv's data comes back to the caller's stream by another (`out`).
 * Point-to-point groups: the interpreter brackets each group of sends and recvs the
 * compiler marked (consecutive ones, ppsrt.h flag 4) with group_begin/group_end, which
 * are ncclGroupStart/ncclGroupEnd here, so the group's operations (on several channel
 * communicators) are launched together, as the verifier's rendezvous model assumes.
 * Inside a group ncclSend/ncclRecv only queue; the `out` event of a recv and the
 * buffer-use record of a send are made at group_end, after the launch. The copy channel
 * is buffered and ignores groups.
 *
 * Groups (ppsrt_nccl_transport_group, at the end of this file): --data-parallel's replica
 * groups (the gradient all-reduces) and --tensor-parallel's groups (the layers' partial
 * sums) get transports of their own over some of the ranks (collectives only, a
 * communicator and a collectives' stream of their own), watched and aborted with the run
 * transport.
 *
 * Faults: every host wait (the backend's event waits, barriers, the copy channel's
 * queue waits) polls; the backend calls our watchdog while it polls, which reads
 * ncclCommGetAsyncError of the rank's communicators and the transport's abort flag. On
 * an asynchronous error, a timeout or an abort, the rank marks the transport aborted
 * (with the reason), aborts its communicators with ncclCommAbort, and every rank's next
 * wait or call fails with PPSRT_E_COMM naming the rank, the operation and the library's
 * message. In the MPI mode the other processes learn of it through NCCL (their
 * operations fail or time out), never by hanging past --timeout.
 *
 * What it does not: no host-memory buffers (NCCL needs device memory), no reduction
 * other than F32 sum and max, no overlap between the staging copy and the transfer in
 * the copy channel, no topology tuning (NCCL's defaults and NCCL_* variables apply). */
#include "config.h"
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
/* nccl.h declares a few functions with () instead of (void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include "backend.h"
#include "transport.h"
#include "cuda_impl.h"

/* Defined only by the emulator (tests/gpu/emu): names a stream in its race reports. */
extern void pps_emu_name_stream(cudaStream_t s, const char *name) __attribute__((weak));

enum { MODE_NCCL, MODE_COPY };
enum { C_COLL, NCOMM };

/* A directed point-to-point channel of one rank toward one peer (NCCL mode): a two-rank
 * communicator of its own (the sender is its rank 0, the receiver its rank 1) and a
 * stream of its own, created at first use; `in`/`out` order it after the caller's
 * stream and the caller's stream after it. */
typedef struct pchan {
  ncclComm_t comm;
  cudaStream_t st;
  cudaEvent_t in, out;
} pchan;

/* A staging buffer of the copy channel: carries one message at a time. */
typedef struct sbuf {
  void *p;
  size_t cap;
  int dev;                 /* device p lives on */
  cudaEvent_t ready;       /* on dev: the sender's copy into p is done */
  cudaEvent_t done;        /* on done_dev: the receiver's copy out of p is done */
  int done_dev;
  int in_use, done_recorded;
} sbuf;

typedef struct msg {
  sbuf *buf;
  size_t bytes;
  int64_t tag;
  struct msg *next;
} msg;

typedef struct queue { msg *head, *tail; } queue;

/* Per-rank collective slot of the copy channel (two, alternating by round parity). */
typedef struct slot {
  void *p;
  size_t cap;
  cudaEvent_t ready, done;   /* on the owner's device */
  int done_recorded;
} slot;

typedef struct rank_state {
  ppsrt_backend *be;       /* attached backend (first call) */
  int dev;                 /* GPU this rank must use */
  ncclComm_t comm[NCOMM];
  pchan *ch;               /* [2 * nranks]: toward peer p at [p], from peer p at [nranks + p] (NCCL mode) */
  cudaStream_t coll_st;    /* collectives run here, ordered with the caller's stream by events */
  cudaEvent_t coll_in, coll_out;
  int aborted_comms;
  /* copy channel */
  uint64_t round;
  slot sl[2];
  size_t a2a[2][2 * PPSRT_CU_MAX_SRCS];   /* alltoallv, by parity: what this rank sends each peer, and from where */
  const size_t *a2a_rc, *a2a_rd;          /* alltoallv: this rank's receive sizes and places (during the call) */
  void *gather;            /* local copies of peers' slots on other devices */
  size_t gather_cap;
  /* MPI barrier through NCCL, on its own stream (not queued behind pending sends) */
  float *bar_buf;
  cudaStream_t bar_st;
  cudaEvent_t bar_ev;
  /* a point-to-point group in progress (group_begin): what waits for its launch */
  int grp;
  struct gpend { pchan *ch; cudaStream_t s; const void *buf; int send; struct pev *pe; size_t late; } *gp;
  int ngp, capgp;
  /* completion events of posted receives (tp_recv_post), pooled */
  struct pev **pe;
  int npe, cappe;
} rank_state;

/* The completion event of a posted receive (transport.h recv_post): recorded on the
 * channel's stream after the ncclRecv (at group_end inside a group); the caller's
 * stream waits for it at the consumer (recv_wait). An entry is taken again only once it
 * was waited for and the event has completed: never re-recorded while pending. */
typedef struct pev {
  cudaEvent_t ev;
  int state;               /* PEV_FREE, PEV_POSTED (handed out), PEV_WAITED (waited for, maybe pending) */
  int recorded;            /* the event is recorded (after the launch) */
} pev;
enum { PEV_FREE, PEV_POSTED, PEV_WAITED };

typedef struct nccl_tp {
  int mode, nranks, mpi, my_rank, mpi_inited_here;
  int dup;                 /* 1: the collective lane's transport (tp_dup), 2: a group of the run transport's ranks
                              (ppsrt_nccl_transport_group): collectives only, not attached */
  struct nccl_tp *lane;    /* the run transport's: its dup, whose communicators watch() also polls */
  struct nccl_tp *parent;  /* the dup's: the run transport (its `lane` is cleared when the dup goes) */
  struct nccl_tp **sub;    /* the run transport's groups (--data-parallel's replica groups, --tensor-parallel's
                              groups), whose communicators watch() also polls and abort_comms aborts; an entry is
                              NULL once its group is destroyed */
  int nsub, capsub;
  struct nccl_tp *gparent; /* a group's: the run transport (its `sub` entry cleared when it goes) */
  int *of;                 /* a group's: [the run transport's nranks] the group rank of each world rank, -1 for
                              those outside the group (over MPI: the other processes' groups are not known) */
  char gwhat[48];          /* a group's name in messages: "replica group", "tensor-parallel group" */
  rank_state *rs;          /* [nranks] (MPI: only rs[my_rank] is used) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  volatile int aborted;
  char why[768];
  /* copy channel */
  queue *q;                /* [src * nranks + dst] */
  sbuf **bufs;
  int nbufs, capbufs;
  /* host barrier */
  int bar_count;
  uint64_t bar_gen;
} nccl_tp;

static nccl_tp *TP(ppsrt_transport *t) { return (nccl_tp *)t->impl; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------------- */
/* errors and aborts                                                           */

/* Marks the transport aborted (first reason wins) and wakes every host wait. */
static void set_aborted(nccl_tp *tp, const char *why) {
  pthread_mutex_lock(&tp->mu);
  if (!tp->aborted) {
    snprintf(tp->why, sizeof tp->why, "%s", why);
    tp->aborted = 1;
  }
  pthread_cond_broadcast(&tp->cv);
  pthread_mutex_unlock(&tp->mu);
}

/* Aborts the communicators of `rank` (once), and its groups' (ppsrt_nccl_transport_group); safe
 * to call from the rank's own thread. */
static void abort_comms(nccl_tp *tp, int rank) {
  if (rank < 0 || rank >= tp->nranks) return;
  for (int k = 0; k < tp->nsub; k++)
    if (tp->sub[k] && tp->sub[k]->of[rank] >= 0) abort_comms(tp->sub[k], tp->sub[k]->of[rank]);
  rank_state *r = &tp->rs[rank];
  if (r->aborted_comms) return;
  r->aborted_comms = 1;
  for (int c = 0; c < NCOMM; c++)
    if (r->comm[c]) {
      (void)ncclCommAbort(r->comm[c]);
      r->comm[c] = NULL;
    }
  for (int i = 0; r->ch && i < 2 * tp->nranks; i++)
    if (r->ch[i].comm) {
      (void)ncclCommAbort(r->ch[i].comm);
      r->ch[i].comm = NULL;
    }
}

static const char *nccl_hint(ncclResult_t r) {
  switch (r) {
  case ncclUnhandledCudaError: return "a CUDA call inside NCCL failed: check the GPU (nvidia-smi) and rerun with NCCL_DEBUG=WARN";
  case ncclSystemError: return "a system call or the network failed: check NCCL_SOCKET_IFNAME / NCCL_IB_HCA and rerun with NCCL_DEBUG=WARN";
  case ncclInternalError: return "rerun with NCCL_DEBUG=INFO and report the log";
  case ncclInvalidArgument: return "a bad size, peer or pointer (device memory is required); rerun with NCCL_DEBUG=WARN";
  case ncclInvalidUsage: return "NCCL was used wrongly (e.g. two ranks of one communicator on one GPU): rerun with NCCL_DEBUG=WARN";
  case ncclRemoteError: return "a peer rank failed or exited: its own error message says why";
  default: return "rerun with NCCL_DEBUG=WARN";
  }
}

static int nccl_fail(nccl_tp *tp, int rank, ncclComm_t comm, ncclResult_t r, const char *call, const char *op,
                     const char *file, int line) {
  const char *last = "";
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  last = ncclGetLastError(comm);
  if (!last) last = "";
#endif
  char why[600];
  snprintf(why, sizeof why, "rank %d: nccl %s failed: %s%s%s", rank, op, ncclGetErrorString(r), *last ? ": " : "",
           last);
  set_aborted(tp, why);
  abort_comms(tp, rank);
  return ppsrt_set_error(PPSRT_E_COMM, file, line, "nccl: %s failed (host %s, GPU %d, rank %d, %s): %s%s%s\nhint: %s",
                         call, ppsrt_cuda_hostname(), rank >= 0 && rank < tp->nranks ? tp->rs[rank].dev : -1, rank,
                         op, ncclGetErrorString(r), *last ? ": " : "", last, nccl_hint(r));
}

#define NCCL_CHECK(tp, rank, comm, call, op)                                                    \
  do {                                                                                          \
    ncclResult_t r_ = (call);                                                                   \
    if (r_ != ncclSuccess && r_ != ncclInProgress)                                              \
      return nccl_fail((tp), (rank), (comm), r_, #call, (op), __FILE__, __LINE__);             \
  } while (0)

static int aborted_error(nccl_tp *tp, int rank, const char *op) {
  abort_comms(tp, rank);
  /* "stopped: " first, as the threads transport says it: the run's report (cli.c) counts
   * such a rank as stopped by another's failure and shows the failure itself first */
  return PPSRT_FAIL(PPSRT_E_COMM, "stopped: %s (nccl: rank %d: %s abandoned)", tp->why, rank, op);
}

/* Watchdog the backend calls while it polls an event (cuda_impl.h). */
static int watch(void *ctx, int rank) {
  nccl_tp *tp = ctx;
  if (tp->aborted) return aborted_error(tp, rank, "a wait");
  if (tp->mode != MODE_NCCL || rank < 0) return PPSRT_OK;
  rank_state *r = &tp->rs[rank];
  for (int c = 0; c < NCOMM + 2 * tp->nranks; c++) {
    ncclComm_t cm = c < NCOMM ? r->comm[c] : r->ch ? r->ch[c - NCOMM].comm : NULL;
    if (!cm) continue;
    ncclResult_t res = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(cm, &res);
    if (q != ncclSuccess) res = q;
    if (res != ncclSuccess && res != ncclInProgress) {
      char op[96];
      if (c < NCOMM) snprintf(op, sizeof op, "asynchronous error on the collectives' communicator");
      else if (c - NCOMM < tp->nranks) snprintf(op, sizeof op, "asynchronous error on the channel to rank %d", c - NCOMM);
      else snprintf(op, sizeof op, "asynchronous error on the channel from rank %d", c - NCOMM - tp->nranks);
      return nccl_fail(tp, rank, cm, res, "ncclCommGetAsyncError", op, __FILE__, __LINE__);
    }
  }
  /* the rank's groups' communicators (--data-parallel's all-reduces run on a stream of
   * their own; their errors surface on the device's waits) */
  for (int k = 0; k < tp->nsub; k++) {
    nccl_tp *g = tp->sub[k];
    ncclComm_t gc = g && g->rs && g->of[rank] >= 0 ? g->rs[g->of[rank]].comm[C_COLL] : NULL;
    if (!gc) continue;
    ncclResult_t res = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(gc, &res);
    if (q != ncclSuccess) res = q;
    if (res != ncclSuccess && res != ncclInProgress) {
      char op[96];
      snprintf(op, sizeof op, "asynchronous error on the %s's communicator", g->gwhat);
      return nccl_fail(tp, rank, gc, res, "ncclCommGetAsyncError", op, __FILE__, __LINE__);
    }
  }
  /* the collective lane's communicator (the lane thread never host-waits on it: its
   * errors surface here, on the device's waits; the run then aborts the lane, cli.c) */
  ncclComm_t lc = tp->lane && tp->lane->rs ? tp->lane->rs[rank].comm[C_COLL] : NULL;
  if (lc) {
    ncclResult_t res = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(lc, &res);
    if (q != ncclSuccess) res = q;
    if (res != ncclSuccess && res != ncclInProgress)
      return nccl_fail(tp, rank, lc, res, "ncclCommGetAsyncError", "asynchronous error on the collective lane's communicator",
                       __FILE__, __LINE__);
  }
  return PPSRT_OK;
}

static void on_timeout(void *ctx, int rank, const char *what) {
  nccl_tp *tp = ctx;
  char why[400];
  snprintf(why, sizeof why, "rank %d timed out waiting for %s", rank, what);
  set_aborted(tp, why);
  abort_comms(tp, rank);
}

/* ------------------------------------------------------------------------- */
/* per-call checks                                                             */

static int set_dev(ppsrt_backend *b, int dev) {
  CUDA_CHECK(b, cudaSetDevice(dev));
  return PPSRT_OK;
}

/* Validates rank and backend, attaches the transport to the backend on first use. */
static int enter(ppsrt_transport *t, int rank, ppsrt_backend *b, const char *op) {
  nccl_tp *tp = TP(t);
  if (rank < 0 || rank >= tp->nranks || (tp->mpi && rank != tp->my_rank))
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: %s by rank %d, which is not a rank of this process", op, rank);
  if (tp->aborted) return aborted_error(tp, rank, op);
  rank_state *r = &tp->rs[rank];
  if (!b || !b->name || strcmp(b->name, "cuda") != 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: %s by rank %d on the %s backend\nhint: the nccl transport needs --backend cuda",
                      op, rank, b && b->name ? b->name : "(no)");
  if (r->be != b && tp->dup) {
    /* the lane's transport: the backend's watchdog stays the run transport's (which
     * aborts this one too, see coll_lane.c) */
    if (ppsrt_cuda_device(b) != r->dev)
      return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: rank %d runs on GPU %d but the transport placed it on GPU %d", rank,
                        ppsrt_cuda_device(b), r->dev);
    r->be = b;
  } else if (r->be != b) {
    if (ppsrt_cuda_device(b) != r->dev)
      return PPSRT_FAIL(PPSRT_E_USAGE,
                        "nccl: rank %d runs on GPU %d but the transport placed it on GPU %d\n"
                        "hint: create rank r's backend with ppsrt_cuda_backend_create(r) (it maps ranks onto GPUs as this transport does)",
                        rank, ppsrt_cuda_device(b), r->dev);
    r->be = b;
    ppsrt_cuda_attach(b, rank, t->timeout_s, watch, on_timeout, tp);
  }
  return set_dev(b, r->dev);
}

static int check_peer(nccl_tp *tp, int rank, int peer, const char *op) {
  if (peer < 0 || peer >= tp->nranks || peer == rank)
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: %s by rank %d names peer %d (ranks 0..%d)", op, rank, peer, tp->nranks - 1);
  return PPSRT_OK;
}

/* Host wait on tp->cv until pred(arg) holds, the run aborts, or the timeout passes. */
static int host_wait(ppsrt_transport *t, int rank, int (*pred)(nccl_tp *, void *), void *arg, const char *what) {
  nccl_tp *tp = TP(t);
  double t0 = now_s();
  while (!pred(tp, arg)) {
    if (tp->aborted) return 1;
    if (t->timeout_s > 0 && now_s() - t0 > t->timeout_s) {
      pthread_mutex_unlock(&tp->mu);
      on_timeout(tp, rank, what);
      pthread_mutex_lock(&tp->mu);
      return 2;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&tp->cv, &tp->mu, &ts);
  }
  return 0;
}

/* ------------------------------------------------------------------------- */
/* point to point                                                              */

/* The channel of `rank` toward (send) or from (!send) `peer`, its stream and events
 * created at first use on the rank's GPU (current: enter() made it so). */
static int chan(nccl_tp *tp, int rank, ppsrt_backend *b, int peer, int send, pchan **out) {
  rank_state *r = &tp->rs[rank];
  pchan *ch = r->ch ? &r->ch[send ? peer : tp->nranks + peer] : NULL;
  if (!ch || !ch->comm)
    return PPSRT_FAIL(PPSRT_E_COMM, "nccl: rank %d has no channel %s rank %d", rank, send ? "to" : "from", peer);
  if (!ch->st) {
    int lo = 0, hi = 0;
    CUDA_CHECK(b, cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CUDA_CHECK(b, cudaStreamCreateWithPriority(&ch->st, cudaStreamNonBlocking, hi));
    CUDA_CHECK(b, cudaEventCreateWithFlags(&ch->in, cudaEventDisableTiming));
    CUDA_CHECK(b, cudaEventCreateWithFlags(&ch->out, cudaEventDisableTiming));
    if (pps_emu_name_stream) {
      char nm[64];
      snprintf(nm, sizeof nm, "nccl channel stream of rank %d %s rank %d", rank, send ? "to" : "from", peer);
      pps_emu_name_stream(ch->st, nm);
    }
  }
  *out = ch;
  return PPSRT_OK;
}

/* The stream the collectives of `rank` run on (NCCL mode), created at first use. */
static int coll_stream(nccl_tp *tp, int rank, ppsrt_backend *b, cudaStream_t *out) {
  rank_state *r = &tp->rs[rank];
  if (!r->coll_st) {
    int lo = 0, hi = 0;
    CUDA_CHECK(b, cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CUDA_CHECK(b, cudaStreamCreateWithPriority(&r->coll_st, cudaStreamNonBlocking, hi));
    CUDA_CHECK(b, cudaEventCreateWithFlags(&r->coll_in, cudaEventDisableTiming));
    CUDA_CHECK(b, cudaEventCreateWithFlags(&r->coll_out, cudaEventDisableTiming));
    if (pps_emu_name_stream) {
      char nm[96];
      snprintf(nm, sizeof nm, "nccl %s%scollectives stream of rank %d", tp->dup == 1 ? "lane " : tp->gwhat,
               tp->dup == 2 ? " " : "", rank);   /* the emulator's statistics count "nccl replica group" streams */
      pps_emu_name_stream(r->coll_st, nm);
    }
  }
  *out = r->coll_st;
  return PPSRT_OK;
}

static int q_nonempty(nccl_tp *tp, void *arg) { return ((queue *)arg)->head != NULL; }

static int copy_send(ppsrt_transport *t, int rank, ppsrt_backend *b, cudaStream_t s, const void *buf, size_t bytes,
                     int peer, int64_t tag) {
  nccl_tp *tp = TP(t);
  int dev = tp->rs[rank].dev;
  sbuf *sb = NULL;
  pthread_mutex_lock(&tp->mu);
  for (int i = 0; i < tp->nbufs && !sb; i++) {
    sbuf *c = tp->bufs[i];
    if (c->in_use || c->dev != dev || c->cap < bytes || c->cap > 4 * bytes + 4096) continue;
    if (c->done_recorded && cudaEventQuery(c->done) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    sb = c;
    sb->in_use = 1;
  }
  pthread_mutex_unlock(&tp->mu);
  if (!sb) {
    sb = calloc(1, sizeof *sb);
    if (!sb) return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl copy channel: out of host memory");
    sb->dev = dev;
    sb->done_dev = -1;
    sb->cap = bytes ? bytes : 1;
    cudaError_t e = cudaMalloc(&sb->p, sb->cap);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&sb->ready, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      if (sb->p) cudaFree(sb->p);
      free(sb);
      CUDA_CHECK(b, e);
    }
    sb->in_use = 1;
    pthread_mutex_lock(&tp->mu);
    if (tp->nbufs == tp->capbufs) {
      int cap = tp->capbufs ? 2 * tp->capbufs : 32;
      sbuf **v = realloc(tp->bufs, (size_t)cap * sizeof *v);
      if (!v) {
        pthread_mutex_unlock(&tp->mu);
        return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl copy channel: out of host memory");
      }
      tp->bufs = v;
      tp->capbufs = cap;
    }
    tp->bufs[tp->nbufs++] = sb;
    pthread_mutex_unlock(&tp->mu);
  }
  if (bytes) CUDA_CHECK(b, cudaMemcpyAsync(sb->p, buf, bytes, cudaMemcpyDefault, s));
  CUDA_CHECK(b, cudaEventRecord(sb->ready, s));
  msg *m = calloc(1, sizeof *m);
  if (!m) return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl copy channel: out of host memory");
  m->buf = sb;
  m->bytes = bytes;
  m->tag = tag;
  pthread_mutex_lock(&tp->mu);
  queue *q = &tp->q[(size_t)rank * tp->nranks + peer];
  if (q->tail) q->tail->next = m; else q->head = m;
  q->tail = m;
  pthread_cond_broadcast(&tp->cv);
  pthread_mutex_unlock(&tp->mu);
  return PPSRT_OK;
}

static int copy_recv(ppsrt_transport *t, int rank, ppsrt_backend *b, cudaStream_t s, void *buf, size_t bytes,
                     int peer, int64_t tag) {
  nccl_tp *tp = TP(t);
  queue *q = &tp->q[(size_t)peer * tp->nranks + rank];
  char what[96];
  snprintf(what, sizeof what, "a message from rank %d (tag %lld)", peer, (long long)tag);
  pthread_mutex_lock(&tp->mu);
  int w = host_wait(t, rank, q_nonempty, q, what);
  if (w) {
    pthread_mutex_unlock(&tp->mu);
    if (w == 2)
      return PPSRT_FAIL(PPSRT_E_TIMEOUT, "nccl copy channel: rank %d waited %.1f s for %s\nhint: the peer may have died; "
                        "raise --timeout if it is just slow", rank, t->timeout_s, what);
    return aborted_error(tp, rank, "recv");
  }
  msg *m = q->head;
  q->head = m->next;
  if (!q->head) q->tail = NULL;
  pthread_mutex_unlock(&tp->mu);
  sbuf *sb = m->buf;
  size_t got = m->bytes;
  int64_t gtag = m->tag;
  free(m);
  if (got != bytes || gtag != tag) {
    pthread_mutex_lock(&tp->mu);
    sb->in_use = 0;
    pthread_mutex_unlock(&tp->mu);
    char why[300];
    snprintf(why, sizeof why, "rank %d expected %zu bytes (tag %lld) from rank %d and got %zu (tag %lld)", rank,
             bytes, (long long)tag, peer, got, (long long)gtag);
    set_aborted(tp, why);
    return PPSRT_FAIL(PPSRT_E_COMM, "nccl copy channel: %s\nhint: the two ranks' op tables disagree (a compiler bug)",
                      why);
  }
  int dev = tp->rs[rank].dev;
  CUDA_CHECK(b, cudaStreamWaitEvent(s, sb->ready, 0));
  if (bytes) CUDA_CHECK(b, cudaMemcpyAsync(buf, sb->p, bytes, cudaMemcpyDefault, s));
  if (sb->done_dev != dev) {
    if (sb->done) cudaEventDestroy(sb->done);
    sb->done = NULL;
    CUDA_CHECK(b, cudaEventCreateWithFlags(&sb->done, cudaEventDisableTiming));
    sb->done_dev = dev;
  }
  CUDA_CHECK(b, cudaEventRecord(sb->done, s));
  pthread_mutex_lock(&tp->mu);
  sb->done_recorded = 1;
  sb->in_use = 0;
  pthread_mutex_unlock(&tp->mu);
  return PPSRT_OK;
}

/* Inside a group: what must follow the operation's launch, done at group_end. */
static int group_defer(nccl_tp *tp, int rank, pchan *ch, cudaStream_t s, const void *buf, int send) {
  rank_state *r = &tp->rs[rank];
  if (r->ngp == r->capgp) {
    int cap = r->capgp ? 2 * r->capgp : 8;
    struct gpend *nv = realloc(r->gp, sizeof *nv * (size_t)cap);
    if (!nv) return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
    r->gp = nv;
    r->capgp = cap;
  }
  r->gp[r->ngp++] = (struct gpend){ch, s, buf, send, NULL, 0};
  return PPSRT_OK;
}

/* A free completion event of `rank`'s pool (grown as needed). */
static int pev_get(nccl_tp *tp, int rank, ppsrt_backend *b, pev **out) {
  rank_state *r = &tp->rs[rank];
  for (int k = 0; k < r->npe; k++) {
    pev *e = r->pe[k];
    if (e->state == PEV_WAITED) {
      cudaError_t q = cudaEventQuery(e->ev);
      if (q == cudaSuccess) e->state = PEV_FREE;
      else if (q != cudaErrorNotReady) CUDA_CHECK(b, q);
    }
    if (e->state == PEV_FREE) {
      *out = e;
      return PPSRT_OK;
    }
  }
  if (r->npe == r->cappe) {
    int cap = r->cappe ? 2 * r->cappe : 8;
    pev **v = realloc(r->pe, sizeof *v * (size_t)cap);
    if (!v) return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
    r->pe = v;
    r->cappe = cap;
  }
  pev *e = calloc(1, sizeof *e);
  if (!e) return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
  cudaError_t ce = cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming);
  if (ce != cudaSuccess) {
    free(e);
    CUDA_CHECK(b, ce);
  }
  r->pe[r->npe++] = e;
  *out = e;
  return PPSRT_OK;
}

static int tp_group_begin(ppsrt_transport *t, int rank) {
  nccl_tp *tp = TP(t);
  if (tp->mode != MODE_NCCL) return PPSRT_OK;
  if (rank < 0 || rank >= tp->nranks || (tp->mpi && rank != tp->my_rank))
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: group_begin by rank %d, which is not a rank of this process", rank);
  if (tp->aborted) return aborted_error(tp, rank, "group_begin");
  rank_state *r = &tp->rs[rank];
  if (r->grp) return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: rank %d: group_begin inside a group", rank);
  NCCL_CHECK(tp, rank, NULL, ncclGroupStart(), "group_begin");
  r->grp = 1;
  r->ngp = 0;
  return PPSRT_OK;
}

static int tp_group_end(ppsrt_transport *t, int rank) {
  nccl_tp *tp = TP(t);
  if (tp->mode != MODE_NCCL) return PPSRT_OK;
  if (rank < 0 || rank >= tp->nranks || !tp->rs[rank].grp) return PPSRT_OK;
  rank_state *r = &tp->rs[rank];
  r->grp = 0;
  NCCL_CHECK(tp, rank, r->ngp ? r->gp[0].ch->comm : NULL, ncclGroupEnd(), "group_end");
  ppsrt_backend *b = r->be;
  /* 1: what followed the launch: buffer-use records of sends and posted recvs, the
   * posted recvs' completion events, the plain recvs' `out` events (waited for in 3) */
  for (int k = 0; k < r->ngp; k++) {
    struct gpend *g = &r->gp[k];
    if (g->late) continue;
    if (g->send) {
      int rc = ppsrt_cuda_record_use(b, (void *)g->buf, g->ch->st);
      if (rc) return rc;
    } else if (g->pe) {   /* posted: its own event; the caller's stream waits at the consumer */
      CUDA_CHECK(b, cudaEventRecord(g->pe->ev, g->ch->st));
      g->pe->recorded = 1;
      int rc = ppsrt_cuda_record_use(b, (void *)g->buf, g->ch->st);
      if (rc) return rc;
    } else {
      CUDA_CHECK(b, cudaEventRecord(g->ch->out, g->ch->st));
    }
  }
  /* 2: posted recvs left out of the group (after_group), each launched alone, in order,
   * before the caller's stream waits for the group's recvs: neither waits for the other */
  for (int k = 0; k < r->ngp; k++) {
    struct gpend *g = &r->gp[k];
    if (!g->late) continue;
    CUDA_CHECK(b, cudaEventRecord(g->ch->in, g->s));
    CUDA_CHECK(b, cudaStreamWaitEvent(g->ch->st, g->ch->in, 0));
    NCCL_CHECK(tp, rank, g->ch->comm, ncclRecv((void *)g->buf, g->late, ncclUint8, 0, g->ch->comm, g->ch->st),
               "posted recv after its group");
    CUDA_CHECK(b, cudaEventRecord(g->pe->ev, g->ch->st));
    g->pe->recorded = 1;
    int rc = ppsrt_cuda_record_use(b, (void *)g->buf, g->ch->st);
    if (rc) return rc;
  }
  /* 3: the caller's stream waits for the group's plain recvs */
  for (int k = 0; k < r->ngp; k++) {
    struct gpend *g = &r->gp[k];
    if (!g->send && !g->pe) CUDA_CHECK(b, cudaStreamWaitEvent(g->s, g->ch->out, 0));
  }
  r->ngp = 0;
  return PPSRT_OK;
}

static int tp_send(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, const void *buf, size_t bytes,
                   int peer, int64_t tag) {
  nccl_tp *tp = TP(t);
  int rc = enter(t, rank, b, "send");
  if (rc || (rc = check_peer(tp, rank, peer, "send"))) return rc;
  cudaStream_t s = ppsrt_cuda_stream(b, stream);
  if (!s) return PPSRT_E_USAGE;
  if (tp->mode == MODE_COPY) return copy_send(t, rank, b, s, buf, bytes, peer, tag);
  if (!bytes) return PPSRT_OK;
  pchan *ch;
  if ((rc = chan(tp, rank, b, peer, 1, &ch))) return rc;
  char op[96];
  snprintf(op, sizeof op, "send of %zu bytes to rank %d (tag %lld)", bytes, peer, (long long)tag);
  /* on the channel's own stream after the caller's stream; the buffer's reuse waits for
   * the send (record-stream); nothing else waits for it: a send blocks only its channel */
  CUDA_CHECK(b, cudaEventRecord(ch->in, s));
  CUDA_CHECK(b, cudaStreamWaitEvent(ch->st, ch->in, 0));
  NCCL_CHECK(tp, rank, ch->comm, ncclSend(buf, bytes, ncclUint8, 1, ch->comm, ch->st), op);
  if (tp->rs[rank].grp) return group_defer(tp, rank, ch, s, buf, 1);
  return ppsrt_cuda_record_use(b, (void *)buf, ch->st);
}

static int tp_recv(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, void *buf, size_t bytes, int peer,
                   int64_t tag) {
  nccl_tp *tp = TP(t);
  int rc = enter(t, rank, b, "recv");
  if (rc || (rc = check_peer(tp, rank, peer, "recv"))) return rc;
  cudaStream_t s = ppsrt_cuda_stream(b, stream);
  if (!s) return PPSRT_E_USAGE;
  if (tp->mode == MODE_COPY) return copy_recv(t, rank, b, s, buf, bytes, peer, tag);
  if (!bytes) return PPSRT_OK;
  pchan *ch;
  if ((rc = chan(tp, rank, b, peer, 0, &ch))) return rc;
  char op[96];
  snprintf(op, sizeof op, "recv of %zu bytes from rank %d (tag %lld)", bytes, peer, (long long)tag);
  /* on the channel's stream after the caller's (the buffer's allocation ordered it there);
   * the caller's stream then waits for the data */
  CUDA_CHECK(b, cudaEventRecord(ch->in, s));
  CUDA_CHECK(b, cudaStreamWaitEvent(ch->st, ch->in, 0));
  NCCL_CHECK(tp, rank, ch->comm, ncclRecv(buf, bytes, ncclUint8, 0, ch->comm, ch->st), op);
  if (tp->rs[rank].grp) return group_defer(tp, rank, ch, s, buf, 0);
  CUDA_CHECK(b, cudaEventRecord(ch->out, ch->st));
  CUDA_CHECK(b, cudaStreamWaitEvent(s, ch->out, 0));
  return PPSRT_OK;
}

/* A posted receive (transport.h recv_post, NCCL mode): the ncclRecv is enqueued on the
 * channel's stream as tp_recv's, but nothing waits for it here: its completion event
 * (pev_get) is the handle, recorded after the launch (group_end inside a group) with
 * the buffer's use on the channel stream (record-stream: the allocator hands the buffer
 * out again only after the receive); tp_recv_wait makes the consumer's stream wait. */
static int tp_recv_post(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, void *buf, size_t bytes, int peer,
                        int64_t tag, int after_group, void **handle) {
  nccl_tp *tp = TP(t);
  *handle = NULL;
  int rc = enter(t, rank, b, "recv");
  if (rc || (rc = check_peer(tp, rank, peer, "recv"))) return rc;
  cudaStream_t s = ppsrt_cuda_stream(b, stream);
  if (!s) return PPSRT_E_USAGE;
  if (tp->mode != MODE_NCCL)
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: rank %d: a posted recv on the copy channel (it has none)", rank);
  if (!bytes) return PPSRT_OK;
  pchan *ch;
  pev *e = NULL;
  if ((rc = chan(tp, rank, b, peer, 0, &ch)) || (rc = pev_get(tp, rank, b, &e))) return rc;
  char op[96];
  snprintf(op, sizeof op, "posted recv of %zu bytes from rank %d (tag %lld)", bytes, peer, (long long)tag);
  int late = tp->rs[rank].grp && after_group;   /* launched at group_end, after the group */
  if (!late) {
    CUDA_CHECK(b, cudaEventRecord(ch->in, s));
    CUDA_CHECK(b, cudaStreamWaitEvent(ch->st, ch->in, 0));
    NCCL_CHECK(tp, rank, ch->comm, ncclRecv(buf, bytes, ncclUint8, 0, ch->comm, ch->st), op);
  }
  e->recorded = 0;
  if (tp->rs[rank].grp) {
    if ((rc = group_defer(tp, rank, ch, s, buf, 0))) return rc;
    tp->rs[rank].gp[tp->rs[rank].ngp - 1].pe = e;
    tp->rs[rank].gp[tp->rs[rank].ngp - 1].late = late ? bytes : 0;
  } else {
    CUDA_CHECK(b, cudaEventRecord(e->ev, ch->st));
    e->recorded = 1;
    if ((rc = ppsrt_cuda_record_use(b, buf, ch->st))) return rc;
  }
  e->state = PEV_POSTED;
  *handle = e;
  return PPSRT_OK;
}

static int tp_recv_wait(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, void *handle) {
  pev *e = handle;
  int rc = enter(t, rank, b, "wait for a posted recv");
  if (rc) return rc;
  cudaStream_t s = ppsrt_cuda_stream(b, stream);
  if (!s) return PPSRT_E_USAGE;
  if (!e || e->state != PEV_POSTED || !e->recorded)
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: rank %d: wait for a posted recv that is %s", rank,
                      !e || e->state != PEV_POSTED ? "not pending" : "still in its open group");
  CUDA_CHECK(b, cudaStreamWaitEvent(s, e->ev, 0));
  e->state = PEV_WAITED;
  return PPSRT_OK;
}

/* ------------------------------------------------------------------------- */
/* barrier                                                                     */

typedef struct bar_arg { uint64_t gen; } bar_arg;
static int bar_passed(nccl_tp *tp, void *arg) { return tp->bar_gen != ((bar_arg *)arg)->gen; }

/* Host barrier of the in-process modes (polls the abort flag and the timeout). */
static int host_barrier(ppsrt_transport *t, int rank) {
  nccl_tp *tp = TP(t);
  pthread_mutex_lock(&tp->mu);
  if (tp->aborted) {
    pthread_mutex_unlock(&tp->mu);
    return aborted_error(tp, rank, "barrier");
  }
  bar_arg a = {tp->bar_gen};
  if (++tp->bar_count == tp->nranks) {
    tp->bar_count = 0;
    tp->bar_gen++;
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    return PPSRT_OK;
  }
  int w = host_wait(t, rank, bar_passed, &a, "the other ranks at a barrier");
  pthread_mutex_unlock(&tp->mu);
  if (w == 2)
    return PPSRT_FAIL(PPSRT_E_TIMEOUT, "nccl: rank %d waited %.1f s at a barrier\nhint: a rank died or is stuck; "
                      "raise --timeout if it is just slow", rank, t->timeout_s);
  if (w) return aborted_error(tp, rank, "barrier");
  return PPSRT_OK;
}

static int tp_barrier(ppsrt_transport *t, int rank) {
  nccl_tp *tp = TP(t);
  if (!tp->mpi) return host_barrier(t, rank);
#ifdef HAVE_MPI
  rank_state *r = &tp->rs[rank];
  if (tp->aborted) return aborted_error(tp, rank, "barrier");
  if (!r->bar_buf) return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: rank %d: no barrier on the collective lane's transport", rank);
  /* Always the same operation on every rank (a one-float all-reduce on the collectives'
   * communicator, on the barrier's own stream, set up at bootstrap), waited for by
   * polling with the transport's timeout: ranks cannot disagree on what a barrier is,
   * and a dead peer turns into an error or a timeout rather than a hang. */
  if (cudaSetDevice(r->dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return PPSRT_FAIL(PPSRT_E_BACKEND, "nccl: rank %d: cudaSetDevice(%d) failed at a barrier", rank, r->dev);
  }
  cudaStream_t s = r->bar_st;
  ncclComm_t c = r->comm[C_COLL];
  NCCL_CHECK(tp, rank, c, ncclAllReduce(r->bar_buf, r->bar_buf, 1, ncclFloat32, ncclSum, c, s), "barrier");
  if (cudaEventRecord(r->bar_ev, s) != cudaSuccess) {
    (void)cudaGetLastError();
    return PPSRT_FAIL(PPSRT_E_BACKEND, "nccl: rank %d: cudaEventRecord failed at a barrier", rank);
  }
  if (r->be) return ppsrt_cuda_wait(r->be, r->bar_ev, "the other ranks at a barrier");
  double t0 = now_s();
  for (;;) {
    cudaError_t e = cudaEventQuery(r->bar_ev);
    if (e == cudaSuccess) return PPSRT_OK;
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return PPSRT_FAIL(PPSRT_E_BACKEND, "nccl: rank %d: a barrier failed: %s", rank, cudaGetErrorString(e));
    }
    int rc = watch(tp, rank);
    if (rc) return rc;
    if (t->timeout_s > 0 && now_s() - t0 > t->timeout_s) {
      on_timeout(tp, rank, "the other ranks at a barrier");
      return PPSRT_FAIL(PPSRT_E_TIMEOUT, "nccl: rank %d waited %.1f s at a barrier\nhint: a rank died or is stuck; "
                        "raise --timeout if it is just slow", rank, now_s() - t0);
    }
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
#else
  return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: built without MPI");
#endif
}

/* ------------------------------------------------------------------------- */
/* collectives                                                                 */

/* Copy-channel collective: stage my input, meet, then combine on my stream.
 * op: CC_SUM / CC_MAX: all-reduce of F32 (in place: src == dst, sbytes); CC_BCAST: of
 * sbytes from root (src == dst); CC_RS_SUM / CC_RS_MAX: reduce-scatter (src: P blocks
 * of sbytes / P, dst: this rank's block, may be src's block `rank`); CC_AG: all-gather
 * (src: sbytes, dst: P blocks of sbytes, src may be dst's block `rank`). */
enum { CC_SUM, CC_MAX, CC_BCAST, CC_RS_SUM, CC_RS_MAX, CC_AG, CC_A2A };
/* (CC_A2A: alltoallv, src the span of sbytes holding every block sent, me->a2a[parity]
 * the sizes and places sent, me->a2a_rc / a2a_rd those received; a peer's size for
 * this rank must be the one it expects) */
static int copy_coll(ppsrt_transport *t, int rank, ppsrt_backend *b, cudaStream_t s, const void *src, void *dst,
                     size_t sbytes, int op, int root) {
  nccl_tp *tp = TP(t);
  rank_state *me = &tp->rs[rank];
  int P = tp->nranks, par = (int)(me->round++ & 1);
  slot *my = &me->sl[par];
  size_t bytes = sbytes;
  /* The slot of this parity was last read two rounds ago: wait for every reader. */
  for (int j = 0; j < P; j++) {
    slot *o = &tp->rs[j].sl[par];
    if (o->done_recorded) CUDA_CHECK(b, cudaStreamWaitEvent(s, o->done, 0));
  }
  int stage = op != CC_BCAST || rank == root;
  if (stage && my->cap < bytes) {
    for (int j = 0; j < P; j++) {   /* growing: host-wait for the readers, then replace */
      slot *o = &tp->rs[j].sl[par];
      if (o->done_recorded) {
        int rc = ppsrt_cuda_wait(b, o->done, "the previous collective's readers");
        if (rc) return rc;
      }
    }
    if (my->p) CUDA_CHECK(b, cudaFree(my->p));
    my->p = NULL;
    my->cap = 0;
    CUDA_CHECK(b, cudaMalloc(&my->p, bytes));
    my->cap = bytes;
  }
  if (!my->ready) {
    CUDA_CHECK(b, cudaEventCreateWithFlags(&my->ready, cudaEventDisableTiming));
    CUDA_CHECK(b, cudaEventCreateWithFlags(&my->done, cudaEventDisableTiming));
  }
  if (stage && bytes) CUDA_CHECK(b, cudaMemcpyAsync(my->p, src, bytes, cudaMemcpyDefault, s));
  CUDA_CHECK(b, cudaEventRecord(my->ready, s));
  int rc = host_barrier(t, rank);
  if (rc) return rc;
  if (op == CC_BCAST) {
    if (rank != root && bytes) {
      slot *o = &tp->rs[root].sl[par];
      CUDA_CHECK(b, cudaStreamWaitEvent(s, o->ready, 0));
      CUDA_CHECK(b, cudaMemcpyAsync(dst, o->p, bytes, cudaMemcpyDefault, s));
    }
  } else if (op == CC_A2A) {
    for (int j = 0; j < P; j++) {
      slot *o = &tp->rs[j].sl[par];
      size_t n = tp->rs[j].a2a[par][rank], at = tp->rs[j].a2a[par][P + rank];
      if (n != me->a2a_rc[j])
        return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: rank %d: an all-to-all: it expects %zu bytes from rank %d, which sends it %zu",
                          rank, me->a2a_rc[j], j, n);
      if (!n) continue;
      CUDA_CHECK(b, cudaStreamWaitEvent(s, o->ready, 0));
      CUDA_CHECK(b, cudaMemcpyAsync((char *)dst + me->a2a_rd[j], (const char *)o->p + at, n, cudaMemcpyDefault, s));
    }
  } else if (op == CC_AG) {
    for (int j = 0; j < P && bytes; j++) {   /* (in place, block `rank` gets its own bytes again) */
      slot *o = &tp->rs[j].sl[par];
      CUDA_CHECK(b, cudaStreamWaitEvent(s, o->ready, 0));
      CUDA_CHECK(b, cudaMemcpyAsync((char *)dst + (size_t)j * bytes, o->p, bytes, cudaMemcpyDefault, s));
    }
  } else if (bytes) {
    /* the values this rank reduces: all of each slot, or (reduce-scatter) its block of each */
    int rs = op == CC_RS_SUM || op == CC_RS_MAX;
    size_t off = rs ? (size_t)rank * (bytes / (size_t)P) : 0, len = rs ? bytes / (size_t)P : bytes;
    const float *srcs[PPSRT_CU_MAX_SRCS];
    /* Peers' slots on another GPU are copied next to us first (kernels read local memory). */
    size_t need = 0;
    for (int j = 0; j < P; j++)
      if (tp->rs[j].dev != me->dev) need += len;
    if (need > me->gather_cap) {
      if (me->gather) CUDA_CHECK(b, cudaFreeAsync(me->gather, s));
      me->gather = NULL;
      me->gather_cap = 0;
      CUDA_CHECK(b, cudaMallocAsync(&me->gather, need, s));
      me->gather_cap = need;
    }
    size_t at = 0;
    for (int j = 0; j < P; j++) {
      slot *o = &tp->rs[j].sl[par];
      CUDA_CHECK(b, cudaStreamWaitEvent(s, o->ready, 0));
      if (tp->rs[j].dev == me->dev) {
        srcs[j] = (const float *)((const char *)o->p + off);
      } else {
        void *g = (char *)me->gather + at;
        CUDA_CHECK(b, cudaMemcpyAsync(g, (const char *)o->p + off, len, cudaMemcpyDefault, s));
        srcs[j] = g;
        at += len;
      }
    }
    if (len) CUDA_CHECK(b, ppsrt_cu_reduce_f32(s, dst, srcs, P, len / sizeof(float), op == CC_MAX || op == CC_RS_MAX));
  }
  CUDA_CHECK(b, cudaEventRecord(my->done, s));
  my->done_recorded = 1;
  return PPSRT_OK;
}

static int tp_allreduce(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, float *buf, size_t n,
                        ppsrt_redop op) {
  nccl_tp *tp = TP(t);
  int rc = enter(t, rank, b, "all-reduce");
  if (rc) return rc;
  cudaStream_t s = ppsrt_cuda_stream(b, stream);
  if (!s) return PPSRT_E_USAGE;
  if (tp->mode == MODE_COPY) return copy_coll(t, rank, b, s, buf, buf, n * sizeof(float), op == PPSRT_MAX ? CC_MAX : CC_SUM, 0);
  ncclComm_t c = tp->rs[rank].comm[C_COLL];
  char what[80];
  snprintf(what, sizeof what, "all-reduce (%s) of %zu floats", op == PPSRT_MAX ? "max" : "sum", n);
  cudaStream_t cs;
  if ((rc = coll_stream(tp, rank, b, &cs))) return rc;
  rank_state *r = &tp->rs[rank];
  CUDA_CHECK(b, cudaEventRecord(r->coll_in, s));
  CUDA_CHECK(b, cudaStreamWaitEvent(cs, r->coll_in, 0));
  NCCL_CHECK(tp, rank, c, ncclAllReduce(buf, buf, n, ncclFloat32, op == PPSRT_MAX ? ncclMax : ncclSum, c, cs), what);
  CUDA_CHECK(b, cudaEventRecord(r->coll_out, cs));
  CUDA_CHECK(b, cudaStreamWaitEvent(s, r->coll_out, 0));
  return PPSRT_OK;
}

static int tp_broadcast(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, void *buf, size_t bytes,
                        int root) {
  nccl_tp *tp = TP(t);
  int rc = enter(t, rank, b, "broadcast");
  if (rc) return rc;
  if (root < 0 || root >= tp->nranks)
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: broadcast from root %d (ranks 0..%d)", root, tp->nranks - 1);
  cudaStream_t s = ppsrt_cuda_stream(b, stream);
  if (!s) return PPSRT_E_USAGE;
  if (tp->mode == MODE_COPY) return copy_coll(t, rank, b, s, buf, buf, bytes, CC_BCAST, root);
  ncclComm_t c = tp->rs[rank].comm[C_COLL];
  char what[80];
  snprintf(what, sizeof what, "broadcast of %zu bytes from rank %d", bytes, root);
  cudaStream_t cs;
  if ((rc = coll_stream(tp, rank, b, &cs))) return rc;
  rank_state *r = &tp->rs[rank];
  CUDA_CHECK(b, cudaEventRecord(r->coll_in, s));
  CUDA_CHECK(b, cudaStreamWaitEvent(cs, r->coll_in, 0));
  NCCL_CHECK(tp, rank, c, ncclBroadcast(buf, buf, bytes, ncclUint8, root, c, cs), what);
  CUDA_CHECK(b, cudaEventRecord(r->coll_out, cs));
  CUDA_CHECK(b, cudaStreamWaitEvent(s, r->coll_out, 0));
  return PPSRT_OK;
}

/* reduce_scatter_f32 (op >= 0) and allgather (op < 0, blk bytes of ncclUint8): NCCL's
 * ncclReduceScatter / ncclAllGather on the collectives' stream, ordered with the
 * caller's stream by events, as tp_allreduce; the copy channel's copy_coll on one GPU.
 * Device buffers; in place as NCCL's rule, any other overlap refused here (undefined in
 * NCCL). */
static int tp_blocks(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, const void *send, void *recv,
                     size_t blk, int op, const char *what) {
  nccl_tp *tp = TP(t);
  int rs = op >= 0, rc = enter(t, rank, b, what);
  if (rc) return rc;
  int P = tp->nranks;
  if (blk && (size_t)P > SIZE_MAX / 2 / blk) return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: rank %d: %s: too large", rank, what);
  if (ppsrt_coll_blocks(rs ? send : recv, rs ? (const void *)recv : send, blk, P, rank) < 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: rank %d: %s: %s overlaps %s other than as its block %d (in place)", rank, what,
                      rs ? "recv" : "send", rs ? "send" : "recv", rank);
  cudaStream_t s = ppsrt_cuda_stream(b, stream);
  if (!s) return PPSRT_E_USAGE;
  if (tp->mode == MODE_COPY)
    return copy_coll(t, rank, b, s, send, recv, rs ? (size_t)P * blk : blk,
                     rs ? (op == PPSRT_MAX ? CC_RS_MAX : CC_RS_SUM) : CC_AG, 0);
  ncclComm_t c = tp->rs[rank].comm[C_COLL];
  cudaStream_t cs;
  if ((rc = coll_stream(tp, rank, b, &cs))) return rc;
  rank_state *r = &tp->rs[rank];
  CUDA_CHECK(b, cudaEventRecord(r->coll_in, s));
  CUDA_CHECK(b, cudaStreamWaitEvent(cs, r->coll_in, 0));
  if (rs)
    NCCL_CHECK(tp, rank, c, ncclReduceScatter(send, recv, blk / sizeof(float), ncclFloat32, op == PPSRT_MAX ? ncclMax : ncclSum, c, cs),
               what);
  else
    NCCL_CHECK(tp, rank, c, ncclAllGather(send, recv, blk, ncclUint8, c, cs), what);
  CUDA_CHECK(b, cudaEventRecord(r->coll_out, cs));
  CUDA_CHECK(b, cudaStreamWaitEvent(s, r->coll_out, 0));
  return PPSRT_OK;
}

static int tp_reduce_scatter(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, const float *send, float *recv,
                             size_t count, ppsrt_redop op) {
  char what[80];
  ppsrt_coll_what(what, sizeof what, (int)op, count);
  if (count > SIZE_MAX / sizeof(float)) return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: rank %d: %s: too large", rank, what);
  return tp_blocks(t, rank, b, stream, send, recv, count * sizeof(float), (int)op, what);
}

static int tp_allgather(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, const void *send, void *recv,
                        size_t bytes) {
  char what[80];
  return tp_blocks(t, rank, b, stream, send, recv, bytes, -1, ppsrt_coll_what(what, sizeof what, -1, bytes));
}

/* alltoallv: NCCL has none; grouped ncclSend / ncclRecv (ncclGroupStart/End) of bytes
 * on the collectives' stream, ordered with the caller's stream by events as
 * tp_allreduce; a peer with 0 bytes gets no call, the self block is a copy on that
 * stream. The copy channel's copy_coll (CC_A2A) on one GPU, which refuses a size
 * mismatch; NCCL mode cannot see one (a real GPU hangs or reads short: the caller's
 * counts come from one exchange, ep.c). */
static int tp_alltoallv(ppsrt_transport *t, int rank, ppsrt_backend *b, int stream, const void *send,
                        const size_t *scount, const size_t *sdispl, void *recv, const size_t *rcount,
                        const size_t *rdispl) {
  nccl_tp *tp = TP(t);
  char what[96];
  size_t total = 0;
  int P = tp->nranks;
  for (int q = 0; q < P; q++) total += scount[q];
  snprintf(what, sizeof what, "all-to-all (rank %d sends %zu bytes)", rank, total);
  int rc = enter(t, rank, b, what);
  if (rc) return rc;
  if (ppsrt_a2a_overlap(send, scount, sdispl, recv, rcount, rdispl, P))
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: rank %d: %s: its send and receive bytes overlap", rank, what);
  cudaStream_t s = ppsrt_cuda_stream(b, stream);
  if (!s) return PPSRT_E_USAGE;
  rank_state *r = &tp->rs[rank];
  if (tp->mode == MODE_COPY) {
    if (P > PPSRT_CU_MAX_SRCS) return PPSRT_FAIL(PPSRT_E_USAGE, "nccl copy channel: an all-to-all over %d ranks", P);
    size_t span = 0, *mine = r->a2a[r->round & 1];
    for (int q = 0; q < P; q++) {
      mine[q] = scount[q];
      mine[P + q] = sdispl[q];
      if (scount[q] && sdispl[q] + scount[q] > span) span = sdispl[q] + scount[q];
    }
    r->a2a_rc = rcount;
    r->a2a_rd = rdispl;
    return copy_coll(t, rank, b, s, send, recv, span, CC_A2A, 0);
  }
  if (scount[rank] != rcount[rank])
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: rank %d: %s: %zu bytes to itself, %zu expected", rank, what, scount[rank],
                      rcount[rank]);
  ncclComm_t c = r->comm[C_COLL];
  cudaStream_t cs;
  if ((rc = coll_stream(tp, rank, b, &cs))) return rc;
  CUDA_CHECK(b, cudaEventRecord(r->coll_in, s));
  CUDA_CHECK(b, cudaStreamWaitEvent(cs, r->coll_in, 0));
  if (scount[rank])
    CUDA_CHECK(b, cudaMemcpyAsync((char *)recv + rdispl[rank], (const char *)send + sdispl[rank], scount[rank],
                                  cudaMemcpyDeviceToDevice, cs));
  NCCL_CHECK(tp, rank, c, ncclGroupStart(), what);
  for (int q = 0; q < P && !rc; q++) {
    if (q == rank) continue;
    if (scount[q]) {
      ncclResult_t e = ncclSend((const char *)send + sdispl[q], scount[q], ncclUint8, q, c, cs);
      if (e != ncclSuccess) rc = nccl_fail(tp, rank, c, e, "ncclSend", what, __FILE__, __LINE__);
    }
    if (!rc && rcount[q]) {
      ncclResult_t e = ncclRecv((char *)recv + rdispl[q], rcount[q], ncclUint8, q, c, cs);
      if (e != ncclSuccess) rc = nccl_fail(tp, rank, c, e, "ncclRecv", what, __FILE__, __LINE__);
    }
  }
  ncclResult_t e = ncclGroupEnd();   /* (ended even after a failed call: the group must close) */
  if (rc) return rc;
  if (e != ncclSuccess) return nccl_fail(tp, rank, c, e, "ncclGroupEnd", what, __FILE__, __LINE__);
  CUDA_CHECK(b, cudaEventRecord(r->coll_out, cs));
  CUDA_CHECK(b, cudaStreamWaitEvent(s, r->coll_out, 0));
  return PPSRT_OK;
}

/* ------------------------------------------------------------------------- */
/* abort, destroy, create                                                      */

static void tp_abort(ppsrt_transport *t, int rank, const char *why) {
  nccl_tp *tp = TP(t);
  char w[600];
  snprintf(w, sizeof w, "rank %d aborted: %s", rank, why ? why : "(no reason given)");
  set_aborted(tp, w);
  if (rank >= 0 && rank < tp->nranks && (!tp->mpi || rank == tp->my_rank)) abort_comms(tp, rank);
}

static void tp_destroy(ppsrt_transport *t) {
  if (!t) return;
  nccl_tp *tp = TP(t);
  if (tp) {
    if (tp->parent) tp->parent->lane = NULL;   /* (the device threads are gone: cli.c) */
    for (int k = 0; tp->gparent && k < tp->gparent->nsub; k++)
      if (tp->gparent->sub[k] == tp) tp->gparent->sub[k] = NULL;
    for (int k = 0; k < tp->nsub; k++)   /* groups outliving their run transport (cli.c destroys them first) */
      if (tp->sub[k]) tp->sub[k]->gparent = NULL;
    free(tp->sub);
    free(tp->of);
    for (int i = 0; i < tp->nranks && tp->rs; i++) {
      rank_state *r = &tp->rs[i];
      if (tp->mpi && i != tp->my_rank) continue;
      cudaSetDevice(r->dev);
      for (int c = 0; c < NCOMM; c++)
        if (r->comm[c]) {
          if (tp->aborted) (void)ncclCommAbort(r->comm[c]);
          else (void)ncclCommDestroy(r->comm[c]);
        }
      for (int k = 0; r->ch && k < 2 * tp->nranks; k++) {
        pchan *ch = &r->ch[k];
        if (ch->comm) {
          if (tp->aborted) (void)ncclCommAbort(ch->comm);
          else (void)ncclCommDestroy(ch->comm);
        }
        if (ch->in) cudaEventDestroy(ch->in);
        if (ch->out) cudaEventDestroy(ch->out);
        if (ch->st) cudaStreamDestroy(ch->st);
      }
      free(r->ch);
      if (r->coll_in) cudaEventDestroy(r->coll_in);
      if (r->coll_out) cudaEventDestroy(r->coll_out);
      if (r->coll_st) cudaStreamDestroy(r->coll_st);
      for (int k = 0; k < 2; k++) {
        if (r->sl[k].p) cudaFree(r->sl[k].p);
        if (r->sl[k].ready) cudaEventDestroy(r->sl[k].ready);
        if (r->sl[k].done) cudaEventDestroy(r->sl[k].done);
      }
      if (r->gather) cudaFree(r->gather);
      if (r->bar_buf) cudaFree(r->bar_buf);
      if (r->bar_ev) cudaEventDestroy(r->bar_ev);
      if (r->bar_st) cudaStreamDestroy(r->bar_st);
      free(r->gp);
      for (int k = 0; k < r->npe; k++) {
        cudaEventDestroy(r->pe[k]->ev);
        free(r->pe[k]);
      }
      free(r->pe);
    }
    for (int i = 0; i < tp->nbufs; i++) {
      sbuf *sb = tp->bufs[i];
      cudaSetDevice(sb->dev);
      cudaFree(sb->p);
      if (sb->ready) cudaEventDestroy(sb->ready);
      if (sb->done) cudaEventDestroy(sb->done);
      free(sb);
    }
    free(tp->bufs);
    if (tp->q)
      for (int i = 0; i < tp->nranks * tp->nranks; i++)
        for (msg *m = tp->q[i].head, *nx; m; m = nx) {
          nx = m->next;
          free(m);
        }
    free(tp->q);
    free(tp->rs);
#ifdef HAVE_MPI
    int fin = 0;
    if (tp->mpi_inited_here && MPI_Finalized(&fin) == MPI_SUCCESS && !fin) MPI_Finalize();
#endif
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    free(tp);
  }
  free(t);
}

static int fail_init(nccl_tp *tp, ncclResult_t r, const char *call) {
  return ppsrt_set_error(PPSRT_E_COMM, __FILE__, __LINE__, "nccl: %s failed (host %s, %d ranks): %s\nhint: %s", call,
                         ppsrt_cuda_hostname(), tp->nranks, ncclGetErrorString(r), nccl_hint(r));
}

#ifdef HAVE_MPI
/* Every rank learns whether any rank failed `step` (its own message if it did, else the
 * number of failed ranks). */
static int agree(int rank, int *bad, const char *emsg, const char *step) {
  int mine = *bad, nbad = 0;
  if (MPI_Allreduce(&mine, &nbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
    return PPSRT_FAIL(PPSRT_E_COMM, "nccl: rank %d: MPI_Allreduce failed during the NCCL bootstrap (%s)", rank, step);
  if (!nbad) return PPSRT_OK;
  if (mine) return PPSRT_FAIL(PPSRT_E_COMM, "%s", emsg);
  return PPSRT_FAIL(PPSRT_E_COMM, "nccl: rank %d: the NCCL bootstrap failed on %d other rank%s at %s (their messages "
                    "say why)", rank, nbad, nbad == 1 ? "" : "s", step);
}

static int init_mpi(ppsrt_transport *t, nccl_tp *tp, int nranks) {
  int rc;
  int inited = 0, size = 0, rank = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      return PPSRT_FAIL(PPSRT_E_COMM, "nccl: MPI_Init_thread failed\nhint: start the program with mpirun");
    tp->mpi_inited_here = 1;
  }
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (nranks > 0 && nranks != size)
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: the schedule has %d devices but mpirun started %d ranks\nhint: mpirun -np %d",
                      nranks, size, nranks);
  tp->nranks = size;
  tp->my_rank = rank;
  MPI_Comm local;
  int lrank = 0, lsize = 1;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    MPI_Comm_free(&local);
  }
  /* Every bootstrap step ends with an agreement (MPI_Allreduce of a failure flag), so a
   * rank that fails makes every rank fail with a message instead of leaving the others
   * in a collective it never reaches. */
  char emsg[512] = "";
  int bad = 0;
  int ngpu = 0;
  cudaError_t e = cudaGetDeviceCount(&ngpu);
  if (e != cudaSuccess || ngpu == 0) {
    (void)cudaGetLastError();
    snprintf(emsg, sizeof emsg, "nccl: rank %d: no CUDA device visible on host %s\nhint: check nvidia-smi and "
             "CUDA_VISIBLE_DEVICES, or use --backend cpu --transport mpi", rank, ppsrt_cuda_hostname());
    bad = 1;
  } else if (lsize > ngpu && ngpu > 1) {
    /* one GPU per process is the usual launch (CUDA_VISIBLE_DEVICES or Slurm
     * --gpus-per-task=1 show each process one GPU); several GPUs but fewer than the
     * local ranks means two ranks would share one */
    snprintf(emsg, sizeof emsg, "nccl: %d ranks on host %s share %d GPUs\nhint: one process per GPU: start at most %d "
             "ranks per node, or show each process its own GPU (CUDA_VISIBLE_DEVICES, --gpus-per-task=1)",
             lsize, ppsrt_cuda_hostname(), ngpu, ngpu);
    bad = 1;
  }
  tp->rs = calloc((size_t)size, sizeof *tp->rs);
  if (!tp->rs) return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
  rank_state *me = &tp->rs[rank];
  if (!bad) {
    me->dev = ngpu == 1 ? 0 : lrank % ngpu;
    e = cudaSetDevice(me->dev);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(emsg, sizeof emsg, "nccl: rank %d: cudaSetDevice(%d) failed on host %s: %s", rank, me->dev,
               ppsrt_cuda_hostname(), cudaGetErrorString(e));
      bad = 1;
    } else {
      ppsrt_cuda_set_process_device(me->dev);
    }
  }
  if ((rc = agree(rank, &bad, emsg, "device selection"))) return rc;
  /* ids: the collectives' communicator, then one per directed pair (src, dst), src-major */
  int nid = NCOMM + size * (size - 1);
  ncclUniqueId *id = calloc((size_t)nid, sizeof *id);
  if (!(me->ch = calloc((size_t)2 * size, sizeof(pchan))) || !id) {
    free(id);
    return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
  }
  if (rank == 0)
    for (int c = 0; c < nid && !bad; c++) {
      ncclResult_t r = ncclGetUniqueId(&id[c]);
      if (r != ncclSuccess) {
        snprintf(emsg, sizeof emsg, "nccl: ncclGetUniqueId failed on rank 0 (host %s): %s\nhint: %s",
                 ppsrt_cuda_hostname(), ncclGetErrorString(r), nccl_hint(r));
        bad = 1;
      }
    }
  if ((rc = agree(rank, &bad, emsg, "ncclGetUniqueId on rank 0"))) {
    free(id);
    return rc;
  }
  if (MPI_Bcast(id, (int)(nid * sizeof *id), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
    free(id);
    return PPSRT_FAIL(PPSRT_E_COMM, "nccl: rank %d: MPI_Bcast of the NCCL ids failed", rank);
  }
  ncclResult_t r = ncclSuccess;
  for (int c = 0; c < NCOMM && r == ncclSuccess; c++) r = ncclCommInitRank(&me->comm[c], size, id[c], rank);
  /* the pairs in one global order: each init waits only for the pair's other rank,
   * which reaches it in the same order */
  for (int src = 0, k = NCOMM; src < size && r == ncclSuccess; src++)
    for (int dst = 0; dst < size && r == ncclSuccess; dst++) {
      if (src == dst) continue;
      if (rank == src) r = ncclCommInitRank(&me->ch[dst].comm, 2, id[k], 0);
      else if (rank == dst) r = ncclCommInitRank(&me->ch[size + src].comm, 2, id[k], 1);
      k++;
    }
  free(id);
  if (r != ncclSuccess) {
    snprintf(emsg, sizeof emsg, "nccl: ncclCommInitRank failed on rank %d (host %s): %s\nhint: %s", rank,
             ppsrt_cuda_hostname(), ncclGetErrorString(r), nccl_hint(r));
    bad = 1;
  }
  if ((rc = agree(rank, &bad, emsg, "ncclCommInitRank"))) return rc;
  /* the barrier's buffer and stream, so that every barrier is the same NCCL all-reduce */
  e = cudaMalloc((void **)&me->bar_buf, sizeof(float));
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&me->bar_st, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&me->bar_ev, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(emsg, sizeof emsg, "nccl: rank %d: cannot set up the barrier on host %s: %s", rank, ppsrt_cuda_hostname(),
             cudaGetErrorString(e));
    bad = 1;
  }
  if ((rc = agree(rank, &bad, emsg, "the barrier's setup"))) return rc;
  (void)t;
  return PPSRT_OK;
}
#endif

static int init_inproc(nccl_tp *tp, int nranks) {
  if (nranks < 1) return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: %d ranks", nranks);
  int ngpu = 0;
  cudaError_t e = cudaGetDeviceCount(&ngpu);
  if (e != cudaSuccess || ngpu == 0) {
    (void)cudaGetLastError();
    return PPSRT_FAIL(PPSRT_E_BACKEND, "nccl: no CUDA device visible on host %s (cudaGetDeviceCount: %s)\n"
                      "hint: check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --backend cpu",
                      ppsrt_cuda_hostname(), e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
  }
  tp->nranks = nranks;
  tp->my_rank = 0;   /* every rank lives in this process */
  tp->rs = calloc((size_t)nranks, sizeof *tp->rs);
  tp->q = calloc((size_t)nranks * nranks, sizeof *tp->q);
  if (!tp->rs || !tp->q) return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
  for (int r = 0; r < nranks; r++) tp->rs[r].dev = r % ngpu;
  const char *force = getenv("PPSRT_NCCL_INPROC");
  int copy = ngpu < nranks || (force && strcmp(force, "copy") == 0);
  if (copy && nranks > PPSRT_CU_MAX_SRCS)
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl copy channel: at most %d ranks in one process (got %d)", PPSRT_CU_MAX_SRCS,
                      nranks);
  tp->mode = copy ? MODE_COPY : MODE_NCCL;
  if (copy) return PPSRT_OK;
  int *devs = malloc((size_t)nranks * sizeof *devs);
  ncclComm_t *tmp = calloc((size_t)nranks, sizeof *tmp);
  if (!devs || !tmp) {
    free(devs);
    free(tmp);
    return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
  }
  for (int r = 0; r < nranks; r++) devs[r] = tp->rs[r].dev;
  int rc = PPSRT_OK;
  for (int c = 0; c < NCOMM && !rc; c++) {
    ncclResult_t res = ncclCommInitAll(tmp, nranks, devs);
    if (res != ncclSuccess) rc = fail_init(tp, res, "ncclCommInitAll");
    else
      for (int r = 0; r < nranks; r++) tp->rs[r].comm[c] = tmp[r];
  }
  /* a two-rank communicator per directed pair: src -> dst */
  for (int r = 0; r < nranks && !rc; r++)
    if (!(tp->rs[r].ch = calloc((size_t)2 * nranks, sizeof(pchan)))) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
  for (int src = 0; src < nranks && !rc; src++)
    for (int dst = 0; dst < nranks && !rc; dst++) {
      if (src == dst) continue;
      int pd[2] = {devs[src], devs[dst]};
      ncclComm_t two[2];
      ncclResult_t res = ncclCommInitAll(two, 2, pd);
      if (res != ncclSuccess) {
        rc = fail_init(tp, res, "ncclCommInitAll (a point-to-point channel)");
        break;
      }
      tp->rs[src].ch[dst].comm = two[0];
      tp->rs[dst].ch[nranks + src].comm = two[1];
    }
  free(devs);
  free(tmp);
  return rc;
}

static int tp_dup(ppsrt_transport *t, ppsrt_transport **out);

int ppsrt_nccl_transport_create(int nranks, double timeout_s, int use_mpi, ppsrt_transport **out, int *my_rank) {
  *out = NULL;
  if (my_rank) *my_rank = -1;
  ppsrt_transport *t = calloc(1, sizeof *t);
  nccl_tp *tp = calloc(1, sizeof *tp);
  if (!t || !tp) {
    free(t);
    free(tp);
    return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
  }
  pthread_mutex_init(&tp->mu, NULL);
  pthread_cond_init(&tp->cv, NULL);
  t->name = "nccl";
  t->impl = tp;
  t->timeout_s = timeout_s;
  t->send = tp_send;
  t->recv = tp_recv;
  t->allreduce_f32 = tp_allreduce;
  t->broadcast = tp_broadcast;
  t->reduce_scatter_f32 = tp_reduce_scatter;
  t->allgather = tp_allgather;
  t->alltoallv = tp_alltoallv;
  t->barrier = tp_barrier;
  t->abort = tp_abort;
  t->destroy = tp_destroy;
  t->group_begin = tp_group_begin;
  t->group_end = tp_group_end;
  t->dup = tp_dup;
  int rc;
  tp->mpi = use_mpi != 0;
  if (use_mpi) {
#ifdef HAVE_MPI
    rc = init_mpi(t, tp, nranks);
#else
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "nccl: this libppsrt was built without MPI\nhint: install MPI (libopenmpi-dev) and "
                    "reconfigure, or run all ranks in one process (--transport nccl without mpirun)");
#endif
  } else {
    rc = init_inproc(tp, nranks);
  }
  if (rc) {
    tp_destroy(t);
    return rc;
  }
  t->nranks = tp->nranks;
  /* Posted receives on the GPU side (recv_post/recv_wait) only when asked for
   * (PPSRT_NCCL_POSTED=1) until a GPU run with real NCCL confirms them (in the
   * emulator every stdlib schedule at P = 4 runs with them since interp.c's posted_late
   * keeps a posted receive in its group after a plain one of its channel; before, 1f1b_v
   * deadlocked: docs/gpu.md). By default a posted receive is issued as a plain one where
   * it stands (interp.c), as before posting. */
  if (tp->mode != MODE_NCCL) {   /* the copy channel is buffered: no groups (they were no-ops) */
    t->group_begin = NULL;
    t->group_end = NULL;
  }
  const char *pe = getenv("PPSRT_NCCL_POSTED");
  if (tp->mode == MODE_NCCL && pe && !strcmp(pe, "1")) {   /* (the copy channel is buffered: the interpreter defers) */
    t->recv_post = tp_recv_post;
    t->recv_wait = tp_recv_wait;
  }
  if (my_rank) *my_rank = tp->my_rank;
  *out = t;
  return PPSRT_OK;
}

/* The collective lane's transport (transport.h dup, coll_lane.c): the same ranks on the
 * same GPUs with collectives of their own. In process, NCCL mode: a second collectives'
 * communicator (ncclCommInitAll), with a collectives' stream of its own per rank (made
 * at first use, as the run transport's); copy channel: a second set of slots and host
 * barrier. Over MPI: a second ncclUniqueId round, as the bootstrap's (rank 0
 * ncclGetUniqueId, MPI_Bcast, ncclCommInitRank on the rank's GPU, each step ended by an
 * agreement so that a failure on one rank fails dup on every rank, which then all run
 * their collectives blocking). Every rank calls it at the same point: cli.c, once, on
 * the main thread after the transport's creation and before any device thread or
 * backend exists, under a condition that depends only on the program and the command
 * line (the MPI transport's MPI_Comm_dup has the same requirement); nothing else uses
 * MPI_COMM_WORLD after the bootstrap, so the round cannot interleave with other MPI
 * traffic. No point-to-point channels and, over MPI, no barrier (the lane runs
 * collectives only). The run transport's watchdog polls the lane's communicator too. */
static int tp_dup(ppsrt_transport *t, ppsrt_transport **out) {
  nccl_tp *tp0 = TP(t);
  *out = NULL;
#ifndef HAVE_MPI
  if (tp0->mpi) return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: built without MPI");
#endif
  ppsrt_transport *d = calloc(1, sizeof *d);
  nccl_tp *tp = calloc(1, sizeof *tp);
  if (!d || !tp) {
    free(d);
    free(tp);
    return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
  }
  pthread_mutex_init(&tp->mu, NULL);
  pthread_cond_init(&tp->cv, NULL);
  *d = *t;
  d->impl = tp;
  d->dup = NULL;
  d->group_begin = NULL;
  d->group_end = NULL;
  tp->dup = 1;
  tp->mode = tp0->mode;
  tp->nranks = tp0->nranks;
  tp->mpi = tp0->mpi;
  tp->my_rank = tp0->my_rank;
  int n = tp->nranks, rc = PPSRT_OK;
  tp->rs = calloc((size_t)n, sizeof *tp->rs);
  tp->q = calloc((size_t)n * n, sizeof *tp->q);
  if (!tp->rs || !tp->q) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
  for (int r = 0; r < n && !rc; r++) tp->rs[r].dev = tp0->rs[r].dev;
  if (!rc && tp->mpi) {
#ifdef HAVE_MPI
    /* every rank reaches each agreement, also after a failure of its own (else the
     * others would wait in MPI_Allreduce) */
    int rank = tp->my_rank, bad = 0;
    char emsg[512] = "";
    rank_state *me = &tp->rs[rank];
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    cudaError_t e = cudaSetDevice(me->dev);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(emsg, sizeof emsg, "nccl: rank %d: cudaSetDevice(%d) failed on host %s for the collective lane: %s",
               rank, me->dev, ppsrt_cuda_hostname(), cudaGetErrorString(e));
      bad = 1;
    }
    if (rank == 0 && !bad) {
      ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) {
        snprintf(emsg, sizeof emsg, "nccl: ncclGetUniqueId failed on rank 0 (host %s) for the collective lane: %s\n"
                 "hint: %s", ppsrt_cuda_hostname(), ncclGetErrorString(r), nccl_hint(r));
        bad = 1;
      }
    }
    rc = agree(rank, &bad, emsg, "the collective lane's ncclGetUniqueId on rank 0");
    if (!rc && MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
      rc = PPSRT_FAIL(PPSRT_E_COMM, "nccl: rank %d: MPI_Bcast of the collective lane's NCCL id failed", rank);
    if (!rc) {
      ncclResult_t r = ncclCommInitRank(&me->comm[C_COLL], n, id, rank);
      if (r != ncclSuccess) {
        me->comm[C_COLL] = NULL;
        snprintf(emsg, sizeof emsg, "nccl: ncclCommInitRank failed on rank %d (host %s) for the collective lane: %s\n"
                 "hint: %s", rank, ppsrt_cuda_hostname(), ncclGetErrorString(r), nccl_hint(r));
        bad = 1;
      }
      rc = agree(rank, &bad, emsg, "the collective lane's ncclCommInitRank");
    }
    if (rc) set_aborted(tp, "the collective lane's bootstrap failed");   /* destroy aborts what was made */
#endif
  } else if (!rc && tp->mode == MODE_NCCL) {
    int *devs = malloc((size_t)n * sizeof *devs);
    ncclComm_t *tmp = calloc((size_t)n, sizeof *tmp);
    if (!devs || !tmp) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
    for (int r = 0; r < n && !rc; r++) devs[r] = tp->rs[r].dev;
    if (!rc) {
      ncclResult_t res = ncclCommInitAll(tmp, n, devs);
      if (res != ncclSuccess) rc = fail_init(tp, res, "ncclCommInitAll (the collective lane's communicator)");
      else
        for (int r = 0; r < n; r++) tp->rs[r].comm[C_COLL] = tmp[r];
    }
    free(devs);
    free(tmp);
  }
  if (rc) {
    tp_destroy(d);
    return rc;
  }
  tp->parent = tp0;
  tp0->lane = tp;
  *out = d;
  return PPSRT_OK;
}

/* A group of the run transport t's ranks with collectives of its own (transport.h):
 * --data-parallel's replica groups (the gradient all-reduces, runtime/replica.c) and
 * --tensor-parallel's groups (the layers' partial sums). Group g of `ngroups` has the n
 * world ranks members[0..n-1], group rank i being members[i]. Collectives only, with a
 * communicator and a collectives' stream of their own, so that they overlap the run
 * transport's traffic. Not attached to the backend: the run transport's watchdog polls
 * the group's communicator and its aborts abort it (like the lane's, tp_dup).
 *  - over MPI every rank calls it once per set of groups, for the group it is in, with
 *    the same ngroups: rank 0 makes ngroups ncclUniqueIds, MPI_Bcast sends them, each
 *    rank ncclCommInitRank(n, id[g], its group rank), each step ended by an agreement;
 *  - in process, NCCL mode (called for every g in turn): ncclCommInitAll on the n GPUs
 *    of the group's ranks;
 *  - in process, copy channel: the group's own slots and host barrier. */
int ppsrt_nccl_transport_group(ppsrt_transport *t, int ngroups, int gi, int n, const int *members, const char *what,
                               ppsrt_transport **out) {
  nccl_tp *tp0 = TP(t);
  *out = NULL;
  if (!what) what = "group";
  if (ngroups < 1 || gi < 0 || gi >= ngroups || n < 1 || n > tp0->nranks || !members)
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: %s %d of %d with %d ranks: not a group of %d ranks", what, gi, ngroups, n,
                      tp0->nranks);
  int mine = -1;
  for (int i = 0; i < n; i++) {
    if (members[i] < 0 || members[i] >= tp0->nranks)
      return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: %s %d: rank %d is not a rank of the transport (%d ranks)", what, gi,
                        members[i], tp0->nranks);
    for (int q = 0; q < i; q++)
      if (members[q] == members[i])
        return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: %s %d names rank %d twice", what, gi, members[i]);
    if (tp0->mpi && members[i] == tp0->my_rank) mine = i;
  }
  if (tp0->mpi && mine < 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "nccl: rank %d asks for %s %d, which it is not in", tp0->my_rank, what, gi);
  int D = n, rc = PPSRT_OK;
  if (tp0->nsub == tp0->capsub) {
    int cap = tp0->capsub ? 2 * tp0->capsub : 8;
    nccl_tp **ns = realloc(tp0->sub, (size_t)cap * sizeof *ns);
    if (!ns) return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
    tp0->sub = ns;
    tp0->capsub = cap;
  }
  ppsrt_transport *g = calloc(1, sizeof *g);
  nccl_tp *tp = calloc(1, sizeof *tp);
  if (!g || !tp) {
    free(g);
    free(tp);
    return PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
  }
  pthread_mutex_init(&tp->mu, NULL);
  pthread_cond_init(&tp->cv, NULL);
  *g = *t;
  g->impl = tp;
  g->nranks = D;
  g->dup = NULL;
  g->group_begin = NULL;
  g->group_end = NULL;
  g->recv_post = NULL;
  g->recv_wait = NULL;
  tp->dup = 2;
  tp->mode = tp0->mode;
  tp->nranks = D;
  tp->mpi = tp0->mpi;
  tp->my_rank = tp0->mpi ? mine : 0;
  snprintf(tp->gwhat, sizeof tp->gwhat, "%s", what);
  tp->rs = calloc((size_t)D, sizeof *tp->rs);
  tp->q = calloc((size_t)D * D, sizeof *tp->q);
  tp->of = malloc((size_t)tp0->nranks * sizeof *tp->of);
  if (!tp->rs || !tp->q || !tp->of) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
  for (int r = 0; r < tp0->nranks && !rc; r++) tp->of[r] = -1;
  for (int r = 0; r < D && !rc; r++) {
    tp->of[members[r]] = r;
    tp->rs[r].dev = tp0->rs[tp0->mpi ? tp0->my_rank : members[r]].dev;   /* over MPI only rs[my_rank] is used */
  }
  if (!rc && tp->mpi) {
#ifdef HAVE_MPI
    int rank = tp0->my_rank, bad = 0;
    char emsg[512] = "";
    rank_state *me = &tp->rs[tp->my_rank];
    ncclUniqueId *id = calloc((size_t)ngroups, sizeof *id);
    if (!id) {
      snprintf(emsg, sizeof emsg, "nccl: rank %d: out of host memory for the %ss' ids", rank, what);
      bad = 1;
    }
    cudaError_t e = bad ? cudaSuccess : cudaSetDevice(me->dev);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(emsg, sizeof emsg, "nccl: rank %d: cudaSetDevice(%d) failed on host %s for its %s: %s", rank,
               me->dev, ppsrt_cuda_hostname(), what, cudaGetErrorString(e));
      bad = 1;
    }
    for (int k = 0; rank == 0 && !bad && k < ngroups; k++) {
      ncclResult_t r = ncclGetUniqueId(&id[k]);
      if (r != ncclSuccess) {
        snprintf(emsg, sizeof emsg, "nccl: ncclGetUniqueId failed on rank 0 (host %s) for the %ss: %s\n"
                 "hint: %s", ppsrt_cuda_hostname(), what, ncclGetErrorString(r), nccl_hint(r));
        bad = 1;
      }
    }
    char step[96];
    snprintf(step, sizeof step, "the %ss' ncclGetUniqueId on rank 0", what);
    rc = agree(rank, &bad, emsg, step);
    if (!rc && MPI_Bcast(id, (int)(ngroups * sizeof *id), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
      rc = PPSRT_FAIL(PPSRT_E_COMM, "nccl: rank %d: MPI_Bcast of the %ss' NCCL ids failed", rank, what);
    if (!rc) {
      ncclResult_t r = ncclCommInitRank(&me->comm[C_COLL], D, id[gi], tp->my_rank);
      if (r != ncclSuccess) {
        me->comm[C_COLL] = NULL;
        snprintf(emsg, sizeof emsg, "nccl: ncclCommInitRank failed on rank %d (host %s) for %s %d: %s\n"
                 "hint: %s", rank, ppsrt_cuda_hostname(), what, gi, ncclGetErrorString(r), nccl_hint(r));
        bad = 1;
      }
      snprintf(step, sizeof step, "the %ss' ncclCommInitRank", what);
      rc = agree(rank, &bad, emsg, step);
    }
    free(id);
    if (rc) set_aborted(tp, "the group's bootstrap failed");   /* destroy aborts what was made */
#else
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "nccl: built without MPI");
#endif
  } else if (!rc && tp->mode == MODE_NCCL) {
    int *devs = malloc((size_t)D * sizeof *devs);
    ncclComm_t *tmp = calloc((size_t)D, sizeof *tmp);
    if (!devs || !tmp) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "nccl: out of host memory");
    for (int r = 0; r < D && !rc; r++) devs[r] = tp->rs[r].dev;
    if (!rc) {
      ncclResult_t res = ncclCommInitAll(tmp, D, devs);
      if (res != ncclSuccess) rc = fail_init(tp, res, "ncclCommInitAll (a group's communicator)");
      else
        for (int r = 0; r < D; r++) tp->rs[r].comm[C_COLL] = tmp[r];
    }
    free(devs);
    free(tmp);
  }
  if (rc) {
    tp_destroy(g);
    return rc;
  }
  tp->gparent = tp0;
  tp0->sub[tp0->nsub++] = tp;
  *out = g;
  return PPSRT_OK;
}
