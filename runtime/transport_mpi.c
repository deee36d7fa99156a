/* transport_mpi.c: the MPI transport: one process per device (mpirun -np P ./prog),
 * host buffers. A send copies its payload (with an 8-byte check tag in front) into a
 * staging buffer (reused from a small pool) and posts MPI_Isend; completed sends are
 * reaped later, so a send never blocks (FIFO order per pair is MPI's non-overtaking
 * rule on one communicator and one tag). A receive posts MPI_Irecv into one staging
 * buffer (reused) and polls MPI_Test until the message arrives or --timeout passes
 * (counted from the first test that found nothing); collectives use MPI_Iallreduce /
 * MPI_Ibcast / MPI_Ibarrier polled the same way, so no wait is unbounded. abort()
 * prints the reason and calls MPI_Abort, which stops every rank (mpirun exits
 * non-zero). GPU buffers are staged through host memory (the NCCL transport is the
 * fast path there).
 * MPI is initialised with MPI_THREAD_MULTIPLE: the collective lane (coll_lane.c) runs
 * the vocabulary collectives from a second thread on a duplicate communicator (dup).
 * What it does not: no MPI_Init when MPI is already initialised by the caller (it then
 * also leaves MPI_Finalize to the caller), one device per rank. */
#include "config.h"
#include "rt.h"
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct mpi_pend { MPI_Request req; char *buf; size_t cap; } mpi_pend;

/* Staging buffers are reused: completed sends give theirs back to a small pool (a
 * buffer and its capacity), receives stage through one buffer grown as needed, so a
 * steady stream of messages does not go to malloc. */
enum { POOL_MAX = 64 };
typedef struct mpi_buf { char *p; size_t cap; } mpi_buf;

typedef struct mpi_impl {
  int rank, size, we_init;
  MPI_Comm comm;             /* MPI_COMM_WORLD, or its duplicate for the collective lane */
  int provided;              /* thread level MPI gave */
  mpi_pend *pend; int npend, cappend;
  mpi_buf pool[POOL_MAX]; int npool;
  char *rbuf; size_t rcap;   /* the receive staging buffer */
  char host[256];
} mpi_impl;

/* A send staging buffer of at least n bytes (*cap: its capacity), or NULL. */
static char *buf_get(mpi_impl *t, size_t n, size_t *cap) {
  for (int i = t->npool - 1; i >= 0; i--)
    if (t->pool[i].cap >= n) {
      char *p = t->pool[i].p;
      *cap = t->pool[i].cap;
      t->pool[i] = t->pool[--t->npool];
      return p;
    }
  *cap = n;
  return malloc(n);
}

static void buf_put(mpi_impl *t, char *p, size_t cap) {
  if (t->npool < POOL_MAX) t->pool[t->npool++] = (mpi_buf){p, cap};
  else free(p);
}

static int mpi_fail(mpi_impl *t, int code, const char *file, int line, int err, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(err, msg, &len);
  return ppsrt_set_error(code, file, line, "%s on %s: MPI error: %s", what, t->host, msg);
}
#define MPI_CHECK(t, call, what)                                                     \
  do {                                                                               \
    int e_ = (call);                                                                 \
    if (e_ != MPI_SUCCESS) return mpi_fail((t), PPSRT_E_COMM, __FILE__, __LINE__, e_, (what)); \
  } while (0)

static void pause_us(int us) {
  struct timespec ts = {0, (long)us * 1000L};
  nanosleep(&ts, NULL);
}

/* Polls req until done; PPSRT_E_TIMEOUT after timeout_s. */
static int poll_wait(mpi_impl *t, MPI_Request *req, MPI_Status *st, double timeout_s, const char *what, int peer) {
  double t0 = -1;   /* the deadline counts from the first test that found nothing */
  for (long k = 0;; k++) {
    int done = 0;
    MPI_CHECK(t, MPI_Test(req, &done, st), what);
    if (done) return 0;
    if (t0 < 0) t0 = rt_now();
    if (k > 2000) pause_us(k > 20000 ? 200 : 20);
    if ((k & 63) == 0 && rt_now() - t0 > timeout_s) {
      MPI_Cancel(req);
      if (peer >= 0)
        return PPSRT_FAIL(PPSRT_E_TIMEOUT, "waited %.3g s for %s from rank %d\n"
                          "hint: rank %d is stuck or slow; a schedule checked by `ppsc check` does not deadlock, "
                          "so raise --timeout if its passes are slow", timeout_s, what, peer, peer);
      return PPSRT_FAIL(PPSRT_E_TIMEOUT, "waited %.3g s at %s for the other ranks", timeout_s, what);
    }
  }
}

static int reap(mpi_impl *t, int wait_all, double timeout_s) {
  for (int i = 0; i < t->npend;) {
    int done = 0;
    if (wait_all) {
      int rc = poll_wait(t, &t->pend[i].req, MPI_STATUS_IGNORE, timeout_s, "a send to complete", -1);
      if (rc) return rc;
      done = 1;
    } else {
      MPI_CHECK(t, MPI_Test(&t->pend[i].req, &done, MPI_STATUS_IGNORE), "send completion");
    }
    if (done) { buf_put(t, t->pend[i].buf, t->pend[i].cap); t->pend[i] = t->pend[--t->npend]; }
    else i++;
  }
  return 0;
}

static int is_host(ppsrt_backend *b) { return !b || !strcmp(b->name, "cpu"); }

static int to_host(ppsrt_backend *b, int stream, void *dst, const void *src, size_t bytes) {
  if (is_host(b)) { memcpy(dst, src, bytes); return 0; }
  int rc = b->memcpy_async(b, stream, dst, src, bytes, 2);
  return rc ? rc : b->stream_sync(b, stream);
}

static int from_host(ppsrt_backend *b, int stream, void *dst, const void *src, size_t bytes) {
  if (is_host(b)) { memcpy(dst, src, bytes); return 0; }
  int rc = b->memcpy_async(b, stream, dst, src, bytes, 1);
  return rc ? rc : b->stream_sync(b, stream);
}

static int m_send(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, const void *buf, size_t bytes,
                  int peer, int64_t tag) {
  mpi_impl *t = tr->impl;
  int rc = reap(t, 0, tr->timeout_s);
  if (rc) return rc;
  if (bytes > (size_t)0x7fffffff - 8) return PPSRT_FAIL(PPSRT_E_COMM, "send of %zu bytes: too large for one MPI message", bytes);
  size_t scap;
  char *s = buf_get(t, bytes + 8, &scap);
  if (!s) return PPSRT_FAIL(PPSRT_E_NOMEM, "send: out of host memory");
  memcpy(s, &tag, 8);
  if ((rc = to_host(b, stream, s + 8, buf, bytes))) { buf_put(t, s, scap); return rc; }
  if (t->npend == t->cappend) {
    int cap = t->cappend ? 2 * t->cappend : 16;
    mpi_pend *p = realloc(t->pend, (size_t)cap * sizeof *p);
    if (!p) { buf_put(t, s, scap); return PPSRT_FAIL(PPSRT_E_NOMEM, "send: out of host memory"); }
    t->pend = p; t->cappend = cap;
  }
  mpi_pend *p = &t->pend[t->npend];
  int e = MPI_Isend(s, (int)(bytes + 8), MPI_BYTE, peer, 0, t->comm, &p->req);
  if (e != MPI_SUCCESS) { buf_put(t, s, scap); return mpi_fail(t, PPSRT_E_COMM, __FILE__, __LINE__, e, "MPI_Isend"); }
  p->buf = s;
  p->cap = scap;
  t->npend++;
  return 0;
}

static int m_recv(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, void *buf, size_t bytes, int peer,
                  int64_t tag) {
  mpi_impl *t = tr->impl;
  if (t->rcap < bytes + 8) {
    free(t->rbuf);
    t->rcap = 0;
    if (!(t->rbuf = malloc(bytes + 8))) return PPSRT_FAIL(PPSRT_E_NOMEM, "recv: out of host memory");
    t->rcap = bytes + 8;
  }
  char *s = t->rbuf;
  MPI_Request req;
  MPI_Status st;
  int e = MPI_Irecv(s, (int)(bytes + 8), MPI_BYTE, peer, 0, t->comm, &req);
  if (e != MPI_SUCCESS) return mpi_fail(t, PPSRT_E_COMM, __FILE__, __LINE__, e, "MPI_Irecv");
  int rc = poll_wait(t, &req, &st, tr->timeout_s, "a message", peer);
  if (rc) return rc;
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  int64_t got;
  memcpy(&got, s, 8);
  char gs[48], ws[48];
  if ((size_t)count != bytes + 8 || got != tag)
    rc = PPSRT_FAIL(PPSRT_E_COMM,
                    "message from rank %d does not match: got %s (%d bytes), expected %s (%zu bytes)\n"
                    "hint: sends and receives of a pair of devices must be in the same order (FIFO); "
                    "run `ppsc check` on the schedule", peer, ppsrt_tag_format(got, gs, sizeof gs), count - 8,
                    ppsrt_tag_format(tag, ws, sizeof ws), bytes);
  else rc = from_host(b, stream, buf, s + 8, bytes);
  if (!rc) rc = reap(t, 0, tr->timeout_s);
  return rc;
}

static int m_allreduce(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, float *buf, size_t n,
                       ppsrt_redop op) {
  mpi_impl *t = tr->impl;
  size_t bytes = n * sizeof(float);
  float *h = is_host(b) ? buf : malloc(bytes ? bytes : 1);
  if (!h) return PPSRT_FAIL(PPSRT_E_NOMEM, "allreduce: out of host memory");
  int rc = 0;
  if (h != buf) rc = to_host(b, stream, h, buf, bytes);
  MPI_Request req;
  if (!rc) {
    int e = MPI_Iallreduce(MPI_IN_PLACE, h, (int)n, MPI_FLOAT, op == PPSRT_MAX ? MPI_MAX : MPI_SUM, t->comm, &req);
    if (e != MPI_SUCCESS) rc = mpi_fail(t, PPSRT_E_COMM, __FILE__, __LINE__, e, "MPI_Iallreduce");
    else rc = poll_wait(t, &req, MPI_STATUS_IGNORE, tr->timeout_s, "an all-reduce", -1);
  }
  if (!rc && h != buf) rc = from_host(b, stream, buf, h, bytes);
  if (h != buf) free(h);
  return rc;
}

static int m_broadcast(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, void *buf, size_t bytes, int root) {
  mpi_impl *t = tr->impl;
  void *h = is_host(b) ? buf : malloc(bytes ? bytes : 1);
  if (!h) return PPSRT_FAIL(PPSRT_E_NOMEM, "broadcast: out of host memory");
  int rc = 0;
  if (h != buf && rank == root) rc = to_host(b, stream, h, buf, bytes);
  MPI_Request req;
  if (!rc) {
    int e = MPI_Ibcast(h, (int)bytes, MPI_BYTE, root, t->comm, &req);
    if (e != MPI_SUCCESS) rc = mpi_fail(t, PPSRT_E_COMM, __FILE__, __LINE__, e, "MPI_Ibcast");
    else rc = poll_wait(t, &req, MPI_STATUS_IGNORE, tr->timeout_s, "a broadcast", -1);
  }
  if (!rc && h != buf) rc = from_host(b, stream, buf, h, bytes);
  if (h != buf) free(h);
  return rc;
}

/* reduce_scatter_f32 (redop >= 0: send is nranks blocks of blk bytes, recv one) and
 * allgather (redop < 0: send one block, recv nranks): MPI_Ireduce_scatter_block /
 * MPI_Iallgather polled as m_allreduce's. Not MPI_IN_PLACE: MPI wants it at all ranks or
 * none, and here each rank may choose; a rank in place goes through a host copy of its
 * block instead (the only buffer that aliases). A GPU backend's buffers are staged
 * through host memory, as m_allreduce's. */
static int m_blocks(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, const void *send, void *recv,
                    size_t blk, int redop, const char *what) {
  mpi_impl *t = tr->impl;
  int n = t->size, rs = redop >= 0, rc = 0;
  if (blk > 0x7fffffff || (blk && (size_t)n > SIZE_MAX / 2 / blk))
    return PPSRT_FAIL(PPSRT_E_COMM, "%s: too large for one MPI call", what);
  size_t sbytes = rs ? n * blk : blk, rbytes = rs ? blk : n * blk;
  int inplace = ppsrt_coll_blocks(rs ? send : recv, rs ? (const void *)recv : send, blk, n, rank);
  if (inplace < 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "%s by rank %d: %s overlaps %s other than as its block %d (in place)", what, rank,
                      rs ? "recv" : "send", rs ? "send" : "recv", rank);
  int host = is_host(b);
  /* host views: hs (sbytes) and hr (rbytes); staged where not the caller's own */
  const char *hs = send;
  char *hr = recv, *st = NULL;
  size_t stage = host ? (inplace ? (rs ? rbytes : sbytes) : 0) : sbytes + rbytes;
  if ((stage || !host) && !(st = malloc(stage ? stage : 1))) return PPSRT_FAIL(PPSRT_E_NOMEM, "%s: out of host memory", what);
  if (!host) {
    hs = st;
    hr = st + sbytes;
    rc = to_host(b, stream, st, send, sbytes);
  } else if (inplace && rs) {
    hr = st;
  } else if (inplace) {
    memcpy(st, send, sbytes);
    hs = st;
  }
  MPI_Request req;
  if (!rc) {
    int e = rs ? MPI_Ireduce_scatter_block(hs, hr, (int)(blk / sizeof(float)), MPI_FLOAT, redop == PPSRT_MAX ? MPI_MAX : MPI_SUM,
                                           t->comm, &req)
               : MPI_Iallgather(hs, (int)blk, MPI_BYTE, hr, (int)blk, MPI_BYTE, t->comm, &req);
    if (e != MPI_SUCCESS) rc = mpi_fail(t, PPSRT_E_COMM, __FILE__, __LINE__, e, rs ? "MPI_Ireduce_scatter_block" : "MPI_Iallgather");
    else rc = poll_wait(t, &req, MPI_STATUS_IGNORE, tr->timeout_s, what, -1);
  }
  if (!rc && hr != (char *)recv) rc = from_host(b, stream, recv, hr, rbytes);
  free(st);
  return rc;
}

static int m_reduce_scatter(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, const float *send,
                            float *recv, size_t count, ppsrt_redop op) {
  char what[80];
  ppsrt_coll_what(what, sizeof what, (int)op, count);
  if (count > 0x7fffffff / sizeof(float)) return PPSRT_FAIL(PPSRT_E_COMM, "%s: too large for one MPI call", what);
  return m_blocks(tr, rank, b, stream, send, recv, count * sizeof(float), (int)op, what);
}

static int m_allgather(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, const void *send, void *recv,
                       size_t bytes) {
  char what[80];
  return m_blocks(tr, rank, b, stream, send, recv, bytes, -1, ppsrt_coll_what(what, sizeof what, -1, bytes));
}

/* alltoallv: MPI_Ialltoallv of bytes, polled as m_allreduce's (MPI sees a receive smaller
 * than its message, not a larger one). A GPU backend's buffers are staged through host
 * memory (the used span of each, recv's first: the gaps between its blocks kept). */
static size_t m_span(const size_t *count, const size_t *displ, int n) {
  size_t end = 0;
  for (int q = 0; q < n; q++)
    if (count[q] && displ[q] + count[q] > end) end = displ[q] + count[q];
  return end;
}

static int m_alltoallv(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, const void *send,
                       const size_t *scount, const size_t *sdispl, void *recv, const size_t *rcount,
                       const size_t *rdispl) {
  mpi_impl *t = tr->impl;
  int n = t->size, host = is_host(b), rc = 0;
  char what[96];
  size_t total = 0;
  for (int q = 0; q < n; q++) total += scount[q];
  snprintf(what, sizeof what, "an all-to-all (rank %d sends %zu bytes)", rank, total);
  if (ppsrt_a2a_overlap(send, scount, sdispl, recv, rcount, rdispl, n))
    return PPSRT_FAIL(PPSRT_E_USAGE, "%s: its send and receive bytes overlap", what);
  int *iv = malloc(4 * (size_t)n * sizeof *iv);
  if (!iv) return PPSRT_FAIL(PPSRT_E_NOMEM, "%s: out of host memory", what);
  for (int q = 0; q < n && !rc; q++) {
    if (scount[q] > 0x7fffffff || sdispl[q] > 0x7fffffff || rcount[q] > 0x7fffffff || rdispl[q] > 0x7fffffff)
      rc = PPSRT_FAIL(PPSRT_E_COMM, "%s: too large for one MPI call", what);
    iv[q] = (int)scount[q]; iv[n + q] = scount[q] ? (int)sdispl[q] : 0;
    iv[2 * n + q] = (int)rcount[q]; iv[3 * n + q] = rcount[q] ? (int)rdispl[q] : 0;
  }
  size_t sb = m_span(scount, sdispl, n), rb = m_span(rcount, rdispl, n);
  const char *hs = send;
  char *hr = recv, *st = NULL;
  if (!rc && !host) {
    if (!(st = malloc(sb + rb ? sb + rb : 1))) rc = PPSRT_FAIL(PPSRT_E_NOMEM, "%s: out of host memory", what);
    else {
      hr = st;
      hs = st + rb;
      if (rb) rc = to_host(b, stream, st, recv, rb);
      if (!rc && sb) rc = to_host(b, stream, st + rb, send, sb);
    }
  }
  MPI_Request req;
  if (!rc) {
    int e = MPI_Ialltoallv(hs, iv, iv + n, MPI_BYTE, hr, iv + 2 * n, iv + 3 * n, MPI_BYTE, t->comm, &req);
    if (e != MPI_SUCCESS) rc = mpi_fail(t, PPSRT_E_COMM, __FILE__, __LINE__, e, "MPI_Ialltoallv");
    else rc = poll_wait(t, &req, MPI_STATUS_IGNORE, tr->timeout_s, what, -1);
  }
  if (!rc && st && rb) rc = from_host(b, stream, recv, st, rb);
  free(st);
  free(iv);
  return rc;
}

static int m_barrier(ppsrt_transport *tr, int rank) {
  mpi_impl *t = tr->impl;
  MPI_Request req;
  MPI_CHECK(t, MPI_Ibarrier(t->comm, &req), "MPI_Ibarrier");
  return poll_wait(t, &req, MPI_STATUS_IGNORE, tr->timeout_s, "a barrier", -1);
}

static void m_abort(ppsrt_transport *tr, int rank, const char *why) {
  mpi_impl *t = tr->impl;
  fprintf(stderr, "ppsrt: rank %d (%s): error: %s\nppsrt: rank %d: aborting every rank (MPI_Abort)\n", rank, t->host,
          why ? why : "(no message)", rank);
  fflush(stderr);
  fflush(stdout);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static void m_destroy(ppsrt_transport *tr) {
  if (!tr) return;
  mpi_impl *t = tr->impl;
  reap(t, 1, tr->timeout_s);
  for (int i = 0; i < t->npend; i++) free(t->pend[i].buf);
  free(t->pend);
  for (int i = 0; i < t->npool; i++) free(t->pool[i].p);
  free(t->rbuf);
  if (t->comm != MPI_COMM_WORLD) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&t->comm);
  }
  if (t->we_init) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
  free(t);
  free(tr);
}

/* The collective lane's transport: the same ranks on a duplicate of the communicator,
 * used by a second thread of the process, so MPI must give MPI_THREAD_MULTIPLE. */
static int m_dup(ppsrt_transport *tr, ppsrt_transport **out) {
  mpi_impl *t = tr->impl;
  if (t->provided < MPI_THREAD_MULTIPLE)
    return PPSRT_FAIL(PPSRT_E_COMM, "this MPI gives thread level %d, not MPI_THREAD_MULTIPLE (%d)", t->provided,
                      MPI_THREAD_MULTIPLE);
  ppsrt_transport *d = calloc(1, sizeof *d);
  mpi_impl *u = calloc(1, sizeof *u);
  if (!d || !u) { free(d); free(u); return PPSRT_FAIL(PPSRT_E_NOMEM, "mpi transport: out of memory"); }
  *d = *tr;
  memcpy(u->host, t->host, sizeof u->host);
  u->rank = t->rank; u->size = t->size; u->provided = t->provided;
  int e = MPI_Comm_dup(t->comm, &u->comm);
  if (e != MPI_SUCCESS) { free(d); free(u); return mpi_fail(t, PPSRT_E_COMM, __FILE__, __LINE__, e, "MPI_Comm_dup"); }
  MPI_Comm_set_errhandler(u->comm, MPI_ERRORS_RETURN);
  d->impl = u;
  *out = d;
  return 0;
}

int ppsrt_mpi_transport_split(ppsrt_transport *tr, int color, int key, ppsrt_transport **out) {
  mpi_impl *t = tr->impl;
  ppsrt_transport *d = calloc(1, sizeof *d);
  mpi_impl *u = calloc(1, sizeof *u);
  if (!d || !u) { free(d); free(u); return PPSRT_FAIL(PPSRT_E_NOMEM, "mpi transport: out of memory"); }
  *d = *tr;
  d->dup = NULL;
  memcpy(u->host, t->host, sizeof u->host);
  u->provided = t->provided;
  int e = MPI_Comm_split(t->comm, color, key, &u->comm);
  if (e != MPI_SUCCESS) { free(d); free(u); return mpi_fail(t, PPSRT_E_COMM, __FILE__, __LINE__, e, "MPI_Comm_split"); }
  MPI_Comm_set_errhandler(u->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(u->comm, &u->rank);
  MPI_Comm_size(u->comm, &u->size);
  d->nranks = u->size;
  d->impl = u;
  *out = d;
  return 0;
}

int ppsrt_mpi_transport_create(double timeout_s, ppsrt_transport **out, int *my_rank) {
  ppsrt_transport *tr = calloc(1, sizeof *tr);
  mpi_impl *t = calloc(1, sizeof *t);
  if (!tr || !t) { free(tr); free(t); return PPSRT_FAIL(PPSRT_E_NOMEM, "mpi transport: out of memory"); }
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      free(tr); free(t);
      return PPSRT_FAIL(PPSRT_E_COMM, "MPI_Init_thread failed\nhint: start the program with mpirun -np P");
    }
    t->we_init = 1;
  } else {
    MPI_Query_thread(&provided);
  }
  t->provided = provided;
  t->comm = MPI_COMM_WORLD;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &t->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &t->size);
  if (gethostname(t->host, sizeof t->host - 1)) strcpy(t->host, "?");
  tr->name = "mpi";
  tr->nranks = t->size;
  tr->impl = t;
  tr->send = m_send;
  tr->recv = m_recv;
  tr->allreduce_f32 = m_allreduce;
  tr->broadcast = m_broadcast;
  tr->reduce_scatter_f32 = m_reduce_scatter;
  tr->allgather = m_allgather;
  tr->alltoallv = m_alltoallv;
  tr->barrier = m_barrier;
  tr->abort = m_abort;
  tr->destroy = m_destroy;
  tr->timeout_s = timeout_s;
  tr->dup = m_dup;
  *out = tr;
  *my_rank = t->rank;
  return 0;
}
