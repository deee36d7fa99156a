/* transport_threads.c: the in-process transport: every device is a thread of one
 * process. Point-to-point channels are FIFO queues per ordered pair of ranks; a send
 * copies its buffer into a message and returns (buffered, never blocks), a receive
 * waits for the next message of its channel. Collectives meet in a shared
 * accumulator between two barriers. Every wait is a timed wait on a condition
 * variable that also watches the abort flag, so a rank that fails (or times out)
 * makes every other rank's call fail with PPSRT_E_COMM instead of hanging.
 * What it does not: no device-to-device copies for CUDA beyond memcpy_async through
 * the backend (kind 0), no ordering across processes (that is MPI). */
#include "config.h"
#include "rt.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

typedef struct th_msg {
  struct th_msg *next;
  size_t bytes;
  int64_t tag;
  int host;               /* data is host memory (malloc) */
  char *data;
} th_msg;

typedef struct th_chan { th_msg *head, *tail; } th_chan;

typedef struct th_impl {
  int n;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  th_chan *chan;          /* [n * n], src * n + dst */
  int aborted;
  char why[512];
  /* barrier */
  int bar_count;
  unsigned long bar_gen;
  /* collectives */
  void *acc; size_t acc_cap; int cc;
  int spin;               /* yields before sleeping in recv */
} th_impl;

static void deadline_after(struct timespec *ts, double s) {
  clock_gettime(CLOCK_REALTIME, ts);
  double whole = floor(s);
  ts->tv_sec += (time_t)whole;
  ts->tv_nsec += (long)((s - whole) * 1e9);
  if (ts->tv_nsec >= 1000000000L) { ts->tv_sec++; ts->tv_nsec -= 1000000000L; }
}

/* Waits on the condition with the lock held; 0 woken, PPSRT_E_TIMEOUT past the deadline. */
static int timed_wait(th_impl *t, const struct timespec *dl) {
  int r = pthread_cond_timedwait(&t->cv, &t->mu, dl);
  return r == ETIMEDOUT ? PPSRT_E_TIMEOUT : 0;
}

static int aborted_error(th_impl *t, int rank) {
  return PPSRT_FAIL(PPSRT_E_COMM, "stopped: %s", t->why[0] ? t->why : "another rank aborted");
}

static int is_host_backend(ppsrt_backend *b) { return !b || !strcmp(b->name, "cpu"); }

static int th_send(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, const void *buf,
                   size_t bytes, int peer, int64_t tag) {
  th_impl *t = tr->impl;
  if (peer < 0 || peer >= t->n)
    return PPSRT_FAIL(PPSRT_E_COMM, "send to rank %d: no such rank (ranks 0..%d)", peer, t->n - 1);
  th_msg *m = malloc(sizeof *m);
  if (!m) return PPSRT_FAIL(PPSRT_E_NOMEM, "send: out of host memory");
  m->next = NULL; m->bytes = bytes; m->tag = tag;
  m->host = is_host_backend(b);
  if (m->host) {
    m->data = malloc(bytes ? bytes : 1);
    if (!m->data) { free(m); return PPSRT_FAIL(PPSRT_E_NOMEM, "send: out of host memory (%zu bytes)", bytes); }
    if (bytes) memcpy(m->data, buf, bytes);
  } else {
    void *p;
    int rc = b->alloc(b, bytes ? bytes : 1, &p);
    if (rc) { free(m); return rc; }
    if ((rc = b->memcpy_async(b, stream, p, buf, bytes, 0)) || (rc = b->stream_sync(b, stream))) {
      b->free(b, p); free(m); return rc;
    }
    m->data = p;
  }
  pthread_mutex_lock(&t->mu);
  if (t->aborted) {
    pthread_mutex_unlock(&t->mu);
    if (m->host) free(m->data); else b->free(b, m->data);
    free(m);
    return aborted_error(t, rank);
  }
  th_chan *c = &t->chan[rank * t->n + peer];
  if (c->tail) c->tail->next = m; else c->head = m;
  c->tail = m;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  return 0;
}

static int th_recv(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, void *buf,
                   size_t bytes, int peer, int64_t tag) {
  th_impl *t = tr->impl;
  if (peer < 0 || peer >= t->n)
    return PPSRT_FAIL(PPSRT_E_COMM, "recv from rank %d: no such rank (ranks 0..%d)", peer, t->n - 1);
  th_chan *c = &t->chan[peer * t->n + rank];
  struct timespec dl;
  deadline_after(&dl, tr->timeout_s);
  pthread_mutex_lock(&t->mu);
  /* a short spin of yields first: the sender is usually just behind, and a yield hands
   * it the core (measured: without it a wake-up costs 2-15x more per op, even with 4
   * ranks per core; bench/runtime_overhead) */
  for (int spin = 0; !c->head && !t->aborted && spin < t->spin; spin++) {
    pthread_mutex_unlock(&t->mu);
    sched_yield();
    pthread_mutex_lock(&t->mu);
  }
  while (!c->head && !t->aborted) {
    if (timed_wait(t, &dl)) {
      pthread_mutex_unlock(&t->mu);
      return PPSRT_FAIL(PPSRT_E_TIMEOUT, "waited %.3g s for a message from rank %d\n"
                        "hint: rank %d is stuck or slow; a schedule checked by `ppsc check` does not deadlock, "
                        "so raise --timeout if its passes are slow", tr->timeout_s, peer, peer);
    }
  }
  if (t->aborted) { pthread_mutex_unlock(&t->mu); return aborted_error(t, rank); }
  th_msg *m = c->head;
  c->head = m->next;
  if (!c->head) c->tail = NULL;
  pthread_mutex_unlock(&t->mu);
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
    if (!(rc = b->memcpy_async(b, stream, buf, m->data, bytes, 0))) rc = b->stream_sync(b, stream);
  }
  if (m->host) free(m->data); else b->free(b, m->data);
  free(m);
  return rc;
}

static int th_barrier_locked(th_impl *t, int rank, double timeout_s) {
  struct timespec dl;
  deadline_after(&dl, timeout_s);
  unsigned long gen = t->bar_gen;
  if (++t->bar_count == t->n) {
    t->bar_count = 0;
    t->bar_gen++;
    pthread_cond_broadcast(&t->cv);
    return 0;
  }
  while (gen == t->bar_gen && !t->aborted) {
    if (timed_wait(t, &dl))
      return PPSRT_FAIL(PPSRT_E_TIMEOUT, "waited %.3g s at a collective for the other ranks", timeout_s);
  }
  if (t->aborted) return aborted_error(t, rank);
  return 0;
}

static int th_barrier(ppsrt_transport *tr, int rank) {
  th_impl *t = tr->impl;
  pthread_mutex_lock(&t->mu);
  int rc = t->aborted ? aborted_error(t, rank) : th_barrier_locked(t, rank, tr->timeout_s);
  pthread_mutex_unlock(&t->mu);
  return rc;
}

/* Contributes buf (combine: 0 copy if root/first, 1 sum, 2 max) then two barriers. */
static int th_collective(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, void *buf,
                         size_t bytes, int redop, int root) {
  th_impl *t = tr->impl;
  int host = is_host_backend(b);
  void *hbuf = buf;
  int rc = 0;
  if (!host) {   /* stage through host memory: simple, only for correctness on GPU threads */
    if (!(hbuf = malloc(bytes ? bytes : 1))) return PPSRT_FAIL(PPSRT_E_NOMEM, "collective: out of host memory");
    if ((rc = b->memcpy_async(b, stream, hbuf, buf, bytes, 2)) || (rc = b->stream_sync(b, stream))) { free(hbuf); return rc; }
  }
  pthread_mutex_lock(&t->mu);
  if (t->aborted) { rc = aborted_error(t, rank); goto out; }
  if (t->cc == 0 && t->acc_cap < bytes) {
    void *p = realloc(t->acc, bytes);
    if (!p) { rc = PPSRT_FAIL(PPSRT_E_NOMEM, "collective: out of host memory"); goto out; }
    t->acc = p; t->acc_cap = bytes;
  }
  if (root >= 0) {
    if (rank == root) memcpy(t->acc, hbuf, bytes);
  } else if (t->cc == 0) {
    memcpy(t->acc, hbuf, bytes);
  } else {
    float *a = t->acc; const float *x = hbuf;
    size_t n = bytes / sizeof(float);
    if (redop == PPSRT_SUM) for (size_t i = 0; i < n; i++) a[i] += x[i];
    else for (size_t i = 0; i < n; i++) a[i] = x[i] > a[i] ? x[i] : a[i];
  }
  if (++t->cc == t->n) t->cc = 0;
  if ((rc = th_barrier_locked(t, rank, tr->timeout_s))) goto out;
  memcpy(hbuf, t->acc, bytes);
  rc = th_barrier_locked(t, rank, tr->timeout_s);
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
  return th_collective(tr, rank, b, stream, buf, n * sizeof(float), (int)op, -1);
}

static int th_broadcast(ppsrt_transport *tr, int rank, ppsrt_backend *b, int stream, void *buf,
                        size_t bytes, int root) {
  return th_collective(tr, rank, b, stream, buf, bytes, 0, root);
}

static void th_abort(ppsrt_transport *tr, int rank, const char *why) {
  th_impl *t = tr->impl;
  pthread_mutex_lock(&t->mu);
  if (!t->aborted) {
    t->aborted = 1;
    snprintf(t->why, sizeof t->why, "rank %d failed: %s", rank, why ? why : "(no message)");
  }
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
}

static void th_destroy(ppsrt_transport *tr) {
  if (!tr) return;
  th_impl *t = tr->impl;
  for (int i = 0; i < t->n * t->n; i++)
    for (th_msg *m = t->chan[i].head, *nx; m; m = nx) {
      nx = m->next;
      if (m->host) free(m->data);   /* device messages left behind: backend already gone */
      free(m);
    }
  free(t->chan);
  free(t->acc);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cv);
  free(t);
  free(tr);
}

int ppsrt_threads_transport_create(int nranks, double timeout_s, ppsrt_transport **out) {
  ppsrt_transport *tr = calloc(1, sizeof *tr);
  th_impl *t = calloc(1, sizeof *t);
  if (!tr || !t || !(t->chan = calloc((size_t)nranks * nranks, sizeof *t->chan))) {
    free(tr); if (t) free(t->chan); free(t);
    return PPSRT_FAIL(PPSRT_E_NOMEM, "threads transport: out of memory");
  }
  t->n = nranks;
  t->spin = 200;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  tr->name = "threads";
  tr->nranks = nranks;
  tr->impl = t;
  tr->send = th_send;
  tr->recv = th_recv;
  tr->allreduce_f32 = th_allreduce;
  tr->broadcast = th_broadcast;
  tr->barrier = th_barrier;
  tr->abort = th_abort;
  tr->destroy = th_destroy;
  tr->timeout_s = timeout_s;
  *out = tr;
  return 0;
}
