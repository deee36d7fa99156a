/* transport_threads.c: the in-process transport: every device is a thread of one
 * process. Point-to-point channels are FIFO queues per ordered pair of ranks, each a
 * lock-free single-producer single-consumer list whose nodes (and their host
 * buffers) are reused, so a steady stream of messages takes no lock and allocates
 * nothing; a send copies its buffer into a message and returns (buffered, never
 * blocks), a receive takes the next message of its channel, or waits for it: a short
 * spin of sched_yield (on a machine with more device threads than cores that hands
 * the core to the sender), then a timed wait on the channel's condition variable that
 * also watches the abort flag, so a rank that fails (or times out) makes every other
 * rank's call fail with PPSRT_E_COMM instead of hanging. Collectives meet in a shared
 * accumulator between two barriers (one lock and condition variable for the run); the
 * last rank to arrive combines every rank's buffer in rank order, so a sum is the same
 * bits whichever thread comes first (((x0 + x1) + x2) + ..., run after run).
 * What it does not: no device-to-device copies for CUDA beyond memcpy_async through
 * the backend (kind 0), no ordering across processes (that is MPI). */
#include "config.h"
#include "rt.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

/* A message. The node and its host buffer are reused: the sender takes nodes the
 * receiver is done with (below), so a steady stream of messages allocates nothing. */
typedef struct th_msg {
  _Atomic(struct th_msg *) next;
  size_t bytes;
  int64_t tag;
  int host;               /* data is host memory (hbuf) */
  char *data;             /* hbuf, or a device buffer of the sender's backend (freed by the receiver) */
  char *hbuf;             /* the node's host buffer, kept across reuse */
  size_t hcap;
  ppsrt_event *ev;        /* device data: the sender's copy is done (destroyed by the receiver) */
} th_msg;

/* One channel (src -> dst): a single-producer single-consumer FIFO without locks,
 * a linked list with a dummy head (the message taken last). The receiver owns
 * `tail` and moves it forward; the sender owns `head` and recycles the nodes before
 * `tail` ([first, tail_copy) are free). The lock and condition variable are only for
 * a receiver that has to sleep: it sets `waiting` under the lock, re-checks, and
 * sleeps; a sender that sees `waiting` after publishing takes the lock and signals. */
typedef struct th_chan {
  /* receiver's side */
  _Alignas(64) _Atomic(th_msg *) tail;
  atomic_int waiting;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* sender's side */
  _Alignas(64) th_msg *head;   /* the last message put */
  th_msg *first, *tail_copy;
  th_msg *spare;               /* a node taken for a send that then failed */
} th_chan;

typedef struct th_impl {
  int n;
  pthread_mutex_t mu;     /* barrier and collectives */
  pthread_cond_t cv;
  th_chan *chan;          /* [n * n], src * n + dst */
  atomic_int aborted;
  char why[512];          /* written once, before `aborted` is set (under mu) */
  /* barrier */
  int bar_count;
  unsigned long bar_gen;
  /* collectives */
  void *acc; size_t acc_cap; int cc;
  const void **slot;      /* each rank's buffer while a collective gathers */
  int spin;               /* yields before sleeping in recv */
} th_impl;

static void deadline_after(struct timespec *ts, double s) {
  clock_gettime(CLOCK_REALTIME, ts);
  if (!(s < 1e9)) s = 1e9; /* the sum must fit a time_t (--timeout 1e19 was already past) */
  double whole = floor(s);
  ts->tv_sec += (time_t)whole;
  ts->tv_nsec += (long)((s - whole) * 1e9);
  if (ts->tv_nsec >= 1000000000L) { ts->tv_sec++; ts->tv_nsec -= 1000000000L; }
}

/* Waits on the condition with the lock held; 0 woken, PPSRT_E_TIMEOUT past the deadline. */
static int timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, const struct timespec *dl) {
  int r = pthread_cond_timedwait(cv, mu, dl);
  return r == ETIMEDOUT ? PPSRT_E_TIMEOUT : 0;
}

static int is_aborted(th_impl *t) { return atomic_load_explicit(&t->aborted, memory_order_acquire); }

/* a call that finds the run aborted; what: the collective, or NULL */
/* "stopped: " first: the report (cli.c) counts such a rank as stopped by another's
 * abort, not as a root cause */
static int stopped_at(th_impl *t, const char *what) {
  return PPSRT_FAIL(PPSRT_E_COMM, "stopped: %s%s%s%s", t->why[0] ? t->why : "another rank aborted", what ? " (at " : "",
                    what ? what : "", what ? ")" : "");
}
static int aborted_error(th_impl *t, int rank) { return stopped_at(t, NULL); }

static int is_host_backend(ppsrt_backend *b) { return !b || !strcmp(b->name, "cpu"); }

/* The sender's next node: a spare, a node the receiver is done with, or a new one. */
static th_msg *node_get(th_chan *c) {
  th_msg *m = c->spare;
  if (m) { c->spare = NULL; return m; }
  if (c->first == c->tail_copy) c->tail_copy = atomic_load_explicit(&c->tail, memory_order_acquire);
  if (c->first != c->tail_copy) {
    m = c->first;
    c->first = atomic_load_explicit(&m->next, memory_order_relaxed);
    return m;
  }
  return calloc(1, sizeof *m);
}

static int th_send(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, const void *buf,
                   size_t bytes, int peer, int64_t tag) {
  th_impl *t = tr->impl;
  if (peer < 0 || peer >= t->n)
    return PPSRT_FAIL(PPSRT_E_COMM, "send to rank %d: no such rank (ranks 0..%d)", peer, t->n - 1);
  if (is_aborted(t)) return aborted_error(t, rank);
  th_chan *c = &t->chan[rank * t->n + peer];
  th_msg *m = node_get(c);
  if (!m) return PPSRT_FAIL(PPSRT_E_NOMEM, "send: out of host memory");
  atomic_store_explicit(&m->next, NULL, memory_order_relaxed);
  m->bytes = bytes; m->tag = tag;
  m->host = is_host_backend(b);
  if (m->host) {
    if (m->hcap < bytes || !m->hbuf) {
      free(m->hbuf);
      m->hcap = 0;
      if (!(m->hbuf = malloc(bytes ? bytes : 1))) {
        c->spare = m;
        return PPSRT_FAIL(PPSRT_E_NOMEM, "send: out of host memory (%zu bytes)", bytes);
      }
      m->hcap = bytes;
    }
    if (bytes) memcpy(m->hbuf, buf, bytes);
    m->data = m->hbuf;
  } else {
    void *p;
    int rc = b->alloc(b, bytes ? bytes : 1, &p);
    if (rc) { c->spare = m; return rc; }
    /* the receiver's stream waits for this event (a host wait here would order the copy
     * for this thread only: the receiver's device work must itself be ordered after it) */
    ppsrt_event *ev = NULL;
    if ((rc = b->memcpy_async(b, stream, p, buf, bytes, 0)) || (rc = b->event_create(b, &ev)) ||
        (rc = b->event_record(b, ev, stream))) {
      if (ev) b->event_destroy(b, ev);
      b->free(b, p); c->spare = m; return rc;
    }
    m->data = p;
    m->ev = ev;
  }
  /* publish, then wake the receiver if it sleeps (the fence orders the publication
   * before the read of `waiting`, as the receiver's orders its `waiting` before its
   * re-check: one of the two sees the other) */
  atomic_store_explicit(&c->head->next, m, memory_order_release);
  c->head = m;
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&c->waiting, memory_order_relaxed)) {
    pthread_mutex_lock(&c->mu);
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
  }
  return 0;
}

static int th_recv(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, void *buf,
                   size_t bytes, int peer, int64_t tag) {
  th_impl *t = tr->impl;
  if (peer < 0 || peer >= t->n)
    return PPSRT_FAIL(PPSRT_E_COMM, "recv from rank %d: no such rank (ranks 0..%d)", peer, t->n - 1);
  th_chan *c = &t->chan[peer * t->n + rank];
  th_msg *tl = atomic_load_explicit(&c->tail, memory_order_relaxed);
  th_msg *m = atomic_load_explicit(&tl->next, memory_order_acquire);
  if (!m && !is_aborted(t)) {
    /* the deadline counts from the first look that found nothing (no clock read when
     * the message is already there) */
    struct timespec dl;
    deadline_after(&dl, tr->timeout_s);
    /* a short spin of yields first: the sender is usually just behind, and a yield hands
     * it the core (bench/runtime_overhead; bench/README.md) */
    for (int spin = 0; !m && spin < t->spin; spin++) {
      sched_yield();
      if ((m = atomic_load_explicit(&tl->next, memory_order_acquire)) || is_aborted(t)) break;
    }
    if (!m && !is_aborted(t)) {
      pthread_mutex_lock(&c->mu);
      atomic_store(&c->waiting, 1);
      while (!(m = atomic_load(&tl->next)) && !is_aborted(t)) {
        if (timed_wait(&c->cv, &c->mu, &dl)) {
          atomic_store(&c->waiting, 0);
          pthread_mutex_unlock(&c->mu);
          return PPSRT_FAIL(PPSRT_E_TIMEOUT, "waited %.3g s for a message from rank %d\n"
                            "hint: rank %d is stuck or slow; a schedule checked by `ppsc check` does not deadlock, "
                            "so raise --timeout if its passes are slow", tr->timeout_s, peer, peer);
        }
      }
      atomic_store(&c->waiting, 0);
      pthread_mutex_unlock(&c->mu);
    }
  }
  if (is_aborted(t)) return aborted_error(t, rank);
  /* m becomes the dummy: the sender recycles nodes only before it, so its data stays
   * valid until the next receive on this channel */
  atomic_store_explicit(&c->tail, m, memory_order_release);
  int rc = 0;
  char want[48], got[48];
  if (m->bytes != bytes || m->tag != tag)
    rc = PPSRT_FAIL(PPSRT_E_COMM,
                    "message from rank %d does not match: got %s (%zu bytes), expected %s (%zu bytes)\n"
                    "hint: sends and receives of a pair of devices must be in the same order (FIFO); "
                    "run `ppsc check` on the schedule", peer, ppsrt_tag_format(m->tag, got, sizeof got), m->bytes,
                    ppsrt_tag_format(tag, want, sizeof want), bytes);
  else if (m->host && is_host_backend(b)) memcpy(buf, m->data, bytes);
  else if (!m->host) {
    if (!(rc = b->stream_wait_event(b, stream, m->ev)) && !(rc = b->memcpy_async(b, stream, buf, m->data, bytes, 0)))
      rc = b->stream_sync(b, stream);
  }
  if (!m->host) {
    if (rc) (void)b->stream_sync(b, stream);   /* nothing may still read the staging buffer */
    b->free(b, m->data);
    m->data = NULL;
    if (m->ev) b->event_destroy(b, m->ev);
    m->ev = NULL;
  }
  return rc;
}

/* what: the collective, for the messages ("an all-reduce of 4 floats"), or NULL. */
static int th_barrier_locked(th_impl *t, int rank, double timeout_s, const char *what) {
  struct timespec dl;
  deadline_after(&dl, timeout_s);
  unsigned long gen = t->bar_gen;
  if (++t->bar_count == t->n) {
    t->bar_count = 0;
    t->bar_gen++;
    pthread_cond_broadcast(&t->cv);
    return 0;
  }
  while (gen == t->bar_gen && !is_aborted(t)) {
    if (timed_wait(&t->cv, &t->mu, &dl) && gen == t->bar_gen) {
      t->bar_count--;   /* not arrived after all: a later barrier counts the ranks it has */
      return PPSRT_FAIL(PPSRT_E_TIMEOUT, "waited %.3g s at a collective%s%s%s for the other ranks", timeout_s,
                        what ? " (" : "", what ? what : "", what ? ")" : "");
    }
  }
  return is_aborted(t) ? stopped_at(t, what) : 0;
}

static int th_barrier(ppsrt_transport *tr, int rank) {
  th_impl *t = tr->impl;
  pthread_mutex_lock(&t->mu);
  int rc = is_aborted(t) ? aborted_error(t, rank) : th_barrier_locked(t, rank, tr->timeout_s, NULL);
  pthread_mutex_unlock(&t->mu);
  return rc;
}

static void th_abort(ppsrt_transport *tr, int rank, const char *why);

/* a = the reduction of every rank's slot, values [off, off + n), in rank order:
 * ((x0 op x1) op x2) op ..., the same bits whichever thread runs it. The one place the
 * threads transport reduces: reduce_scatter_f32's blocks are allreduce_f32's values. */
static void reduce_slots(th_impl *t, float *a, size_t off, size_t n, int redop) {
  memcpy(a, (const float *)t->slot[0] + off, n * sizeof(float));
  for (int r = 1; r < t->n; r++) {
    const float *x = (const float *)t->slot[r] + off;
    if (redop == PPSRT_SUM) for (size_t i = 0; i < n; i++) a[i] += x[i];
    else for (size_t i = 0; i < n; i++) a[i] = x[i] > a[i] ? x[i] : a[i];
  }
}

/* Contributes buf (a sum or max of every rank's buffer, or root's copy), then two
 * barriers: after the first every rank copies the result out, after the second the
 * accumulator may be reused. */
static int th_collective(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, void *buf,
                         size_t bytes, int redop, int root, const char *what) {
  th_impl *t = tr->impl;
  int host = is_host_backend(b);
  void *hbuf = buf;
  int rc = 0;
  if (!host) {   /* stage through host memory: simple, only for correctness on GPU threads */
    if (!(hbuf = malloc(bytes ? bytes : 1))) return PPSRT_FAIL(PPSRT_E_NOMEM, "collective: out of host memory");
    if ((rc = b->memcpy_async(b, stream, hbuf, buf, bytes, 2)) || (rc = b->stream_sync(b, stream))) { free(hbuf); return rc; }
  }
  pthread_mutex_lock(&t->mu);
  if (is_aborted(t)) { rc = aborted_error(t, rank); goto out; }
  t->slot[rank] = hbuf;
  if (++t->cc == t->n) {   /* the last to arrive combines, in rank order; the rest wait */
    t->cc = 0;
    if (t->acc_cap < bytes) {
      void *p = realloc(t->acc, bytes);
      if (!p) {   /* every rank must leave: fail the run rather than strand them */
        rc = PPSRT_FAIL(PPSRT_E_NOMEM, "collective: out of host memory");
        pthread_mutex_unlock(&t->mu);
        th_abort(tr, rank, "collective: out of host memory");
        pthread_mutex_lock(&t->mu);
        goto out;
      }
      t->acc = p; t->acc_cap = bytes;
    }
    if (root >= 0) memcpy(t->acc, t->slot[root], bytes);
    else reduce_slots(t, t->acc, 0, bytes / sizeof(float), redop);
  }
  if ((rc = th_barrier_locked(t, rank, tr->timeout_s, what))) {
    if (rc == PPSRT_E_TIMEOUT) t->cc--;   /* (not all arrived: the last one resets cc) */
    goto out;
  }
  memcpy(hbuf, t->acc, bytes);
  rc = th_barrier_locked(t, rank, tr->timeout_s, what);
out:
  pthread_mutex_unlock(&t->mu);
  if (!host) {
    if (!rc && !(rc = b->memcpy_async(b, stream, buf, hbuf, bytes, 1))) rc = b->stream_sync(b, stream);
    free(hbuf);
  }
  return rc;
}

static int th_allreduce(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, float *buf,
                        size_t n, ppsrt_redop op) {
  char what[80];
  snprintf(what, sizeof what, "an all-reduce (%s) of %zu floats", op == PPSRT_MAX ? "max" : "sum", n);
  return th_collective(tr, rank, b, stream, buf, n * sizeof(float), (int)op, -1, what);
}

static int th_broadcast(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, void *buf,
                        size_t bytes, int root) {
  char what[80];
  snprintf(what, sizeof what, "a broadcast of %zu bytes from rank %d", bytes, root);
  return th_collective(tr, rank, b, stream, buf, bytes, 0, root, what);
}

/* reduce_scatter_f32 (redop >= 0: send is n blocks of blk bytes, recv one) and allgather
 * (redop < 0: send is one block, recv n): every rank publishes its send buffer, then
 * between two barriers reads what it needs of the others' straight from them (its own
 * block of each, reduced in rank order by reduce_slots; every block, copied) into recv,
 * so the ranks work in parallel and no accumulator is shared. A GPU backend's buffers
 * are staged through host memory on `stream`, as th_collective's. */
static int th_blocks(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, const void *send, void *recv,
                     size_t blk, int redop, const char *what) {
  th_impl *t = tr->impl;
  int n = t->n, host = is_host_backend(b), rs = redop >= 0, rc = 0;
  if (blk && (size_t)n > SIZE_MAX / 2 / blk)
    return PPSRT_FAIL(PPSRT_E_USAGE, "%s: %d blocks of %zu bytes do not fit in memory", what, n, blk);
  size_t sbytes = rs ? n * blk : blk, rbytes = rs ? blk : n * blk;
  const void *whole = rs ? send : recv, *part = rs ? (const void *)recv : send;
  int inplace = ppsrt_coll_blocks(whole, part, blk, n, rank);
  if (inplace < 0)
    return PPSRT_FAIL(PPSRT_E_USAGE, "%s by rank %d: %s overlaps %s other than as its block %d (in place)", what, rank,
                      rs ? "recv" : "send", rs ? "send" : "recv", rank);
  const char *hs = send;
  char *hr = recv, *stage = NULL;
  if (!host || (rs && inplace)) {   /* (in place: the block is read by this rank while it is written) */
    size_t sz = (host ? 0 : sbytes) + rbytes;
    if (!(stage = malloc(sz ? sz : 1))) return PPSRT_FAIL(PPSRT_E_NOMEM, "%s: out of host memory", what);
    hr = stage;
    if (!host) {
      hs = stage + rbytes;
      if ((rc = b->memcpy_async(b, stream, stage + rbytes, send, sbytes, 2)) || (rc = b->stream_sync(b, stream))) {
        free(stage);
        return rc;
      }
    }
  }
  pthread_mutex_lock(&t->mu);
  if (is_aborted(t)) rc = stopped_at(t, what);
  else {
    t->slot[rank] = hs;
    rc = th_barrier_locked(t, rank, tr->timeout_s, what);
  }
  pthread_mutex_unlock(&t->mu);
  if (!rc && rs) {
    if (blk) reduce_slots(t, (float *)hr, (size_t)rank * (blk / sizeof(float)), blk / sizeof(float), redop);
  } else if (!rc) {
    for (int q = 0; q < n; q++)
      if (blk && hr + (size_t)q * blk != (const char *)t->slot[q]) memcpy(hr + (size_t)q * blk, t->slot[q], blk);
  }
  if (!rc) {   /* nobody reads a send buffer past here */
    pthread_mutex_lock(&t->mu);
    rc = th_barrier_locked(t, rank, tr->timeout_s, what);
    pthread_mutex_unlock(&t->mu);
  }
  if (!rc && stage) {
    if (host) memcpy(recv, hr, rbytes);
    else if (!(rc = b->memcpy_async(b, stream, recv, hr, rbytes, 1))) rc = b->stream_sync(b, stream);
  }
  free(stage);
  return rc;
}

static int th_reduce_scatter(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, const float *send,
                             float *recv, size_t count, ppsrt_redop op) {
  char what[80];
  ppsrt_coll_what(what, sizeof what, (int)op, count);
  if (count > SIZE_MAX / sizeof(float))
    return PPSRT_FAIL(PPSRT_E_USAGE, "%s: too large", what);
  return th_blocks(tr, rank, b, stream, send, recv, count * sizeof(float), (int)op, what);
}

static int th_allgather(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, const void *send, void *recv,
                        size_t bytes) {
  char what[80];
  return th_blocks(tr, rank, b, stream, send, recv, bytes, -1, ppsrt_coll_what(what, sizeof what, -1, bytes));
}

/* alltoallv: every rank publishes its send buffer and sizes (th_a2a_pub in its slot),
 * then between two barriers copies each peer's block for it straight into recv, checking
 * that the peer sends what this rank expects. A GPU backend's buffers are staged through
 * host memory on `stream` (the used span of each), as th_blocks'. */
typedef struct th_a2a_pub { const char *send; const size_t *scount, *sdispl; } th_a2a_pub;

static size_t a2a_span(const size_t *count, const size_t *displ, int n) {   /* bytes up to the last used one */
  size_t end = 0;
  for (int q = 0; q < n; q++)
    if (count[q] && displ[q] + count[q] > end) end = displ[q] + count[q];
  return end;
}

static int th_alltoallv(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, const void *send,
                        const size_t *scount, const size_t *sdispl, void *recv, const size_t *rcount,
                        const size_t *rdispl) {
  th_impl *t = tr->impl;
  int n = t->n, host = is_host_backend(b), rc = 0;
  size_t sb = a2a_span(scount, sdispl, n), rb = a2a_span(rcount, rdispl, n), total = 0;
  for (int q = 0; q < n; q++) total += scount[q];
  char what[96];
  snprintf(what, sizeof what, "an all-to-all (rank %d sends %zu bytes)", rank, total);
  if (ppsrt_a2a_overlap(send, scount, sdispl, recv, rcount, rdispl, n))
    return PPSRT_FAIL(PPSRT_E_USAGE, "%s: its send and receive bytes overlap", what);
  th_a2a_pub pub = {send, scount, sdispl};
  char *hr = recv, *stage = NULL;
  if (!host) {
    if (!(stage = malloc(sb + rb ? sb + rb : 1))) return PPSRT_FAIL(PPSRT_E_NOMEM, "%s: out of host memory", what);
    pub.send = stage + rb;
    hr = stage;
    if (sb && ((rc = b->memcpy_async(b, stream, stage + rb, send, sb, 2)) || (rc = b->stream_sync(b, stream)))) {
      free(stage);
      return rc;
    }
    if (rb && ((rc = b->memcpy_async(b, stream, stage, recv, rb, 2)) || (rc = b->stream_sync(b, stream)))) {
      free(stage);   /* (the gaps between the blocks keep recv's bytes) */
      return rc;
    }
  }
  pthread_mutex_lock(&t->mu);
  if (is_aborted(t)) rc = stopped_at(t, what);
  else {
    t->slot[rank] = &pub;
    rc = th_barrier_locked(t, rank, tr->timeout_s, what);
  }
  pthread_mutex_unlock(&t->mu);
  int bad = -1;
  size_t got = 0;
  for (int q = 0; q < n && !rc; q++) {
    const th_a2a_pub *o = t->slot[q];
    if (o->scount[rank] != rcount[q]) { bad = q; got = o->scount[rank]; break; }
    if (rcount[q]) memcpy(hr + rdispl[q], o->send + o->sdispl[rank], rcount[q]);
  }
  if (!rc) {   /* nobody reads a send buffer past here (a mismatch still meets the others here) */
    pthread_mutex_lock(&t->mu);
    rc = th_barrier_locked(t, rank, tr->timeout_s, what);
    pthread_mutex_unlock(&t->mu);
  }
  if (!rc && bad >= 0)
    rc = PPSRT_FAIL(PPSRT_E_USAGE, "%s: rank %d expects %zu bytes from rank %d, which sends it %zu", what, rank,
                    rcount[bad], bad, got);
  if (!rc && stage && rb && !(rc = b->memcpy_async(b, stream, recv, stage, rb, 1))) rc = b->stream_sync(b, stream);
  free(stage);
  return rc;
}

static void th_abort(ppsrt_transport *tr, int rank, const char *why) {
  th_impl *t = tr->impl;
  pthread_mutex_lock(&t->mu);
  if (!is_aborted(t)) {
    snprintf(t->why, sizeof t->why, "rank %d failed: %s", rank, why ? why : "(no message)");
    atomic_store(&t->aborted, 1);
  }
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  /* receivers asleep on a channel check the flag under the channel's lock */
  for (int i = 0; i < t->n * t->n; i++) {
    pthread_mutex_lock(&t->chan[i].mu);
    pthread_cond_broadcast(&t->chan[i].cv);
    pthread_mutex_unlock(&t->chan[i].mu);
  }
}

static void th_destroy(ppsrt_transport *tr) {
  if (!tr) return;
  th_impl *t = tr->impl;
  for (int i = 0; i < t->n * t->n; i++) {
    th_chan *c = &t->chan[i];
    /* every node is on the list from `first` (free ones, the dummy, messages not taken) */
    for (th_msg *m = c->first, *nx; m; m = nx) {
      nx = atomic_load(&m->next);
      free(m->hbuf);   /* device messages left behind: backend already gone */
      free(m);
    }
    if (c->spare) { free(c->spare->hbuf); free(c->spare); }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
  }
  free(t->chan);
  free(t->acc);
  free(t->slot);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  free(t);
  free(tr);
}

/* The collective lane's transport: another in-process transport of the same ranks
 * (its own accumulator, barrier and channels). */
static int th_dup(ppsrt_transport *tr, ppsrt_transport **out) {
  return ppsrt_threads_transport_create(tr->nranks, tr->timeout_s, out);
}

int ppsrt_threads_transport_create(int nranks, double timeout_s, ppsrt_transport **out) {
  ppsrt_transport *tr = calloc(1, sizeof *tr);
  th_impl *t = calloc(1, sizeof *t);
  int ok = tr && t && (t->slot = calloc((size_t)nranks, sizeof *t->slot)) &&
           (t->chan = aligned_alloc(64, (size_t)nranks * nranks * sizeof *t->chan));
  for (int i = 0; ok && i < nranks * nranks; i++) {
    th_chan *c = &t->chan[i];
    memset(c, 0, sizeof *c);
    th_msg *dummy = calloc(1, sizeof *dummy);
    if (!dummy) {
      for (int k = 0; k < i; k++) {
        free(t->chan[k].first);
        pthread_mutex_destroy(&t->chan[k].mu);
        pthread_cond_destroy(&t->chan[k].cv);
      }
      ok = 0;
      break;
    }
    atomic_init(&c->tail, dummy);
    atomic_init(&c->waiting, 0);
    c->head = c->first = c->tail_copy = dummy;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
  }
  if (!ok) {
    free(tr); if (t) { free(t->chan); free(t->slot); } free(t);
    return PPSRT_FAIL(PPSRT_E_NOMEM, "threads transport: out of memory");
  }
  t->n = nranks;
  t->spin = 200;
  atomic_init(&t->aborted, 0);
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  tr->name = "threads";
  tr->nranks = nranks;
  tr->impl = t;
  tr->send = th_send;
  tr->recv = th_recv;
  tr->allreduce_f32 = th_allreduce;
  tr->broadcast = th_broadcast;
  tr->reduce_scatter_f32 = th_reduce_scatter;
  tr->allgather = th_allgather;
  tr->alltoallv = th_alltoallv;
  tr->barrier = th_barrier;
  tr->abort = th_abort;
  tr->destroy = th_destroy;
  tr->timeout_s = timeout_s;
  tr->dup = th_dup;
  *out = tr;
  return 0;
}
