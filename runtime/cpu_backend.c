/* cpu_backend.c: the CPU compute backend of libppsrt (backend.h on host memory, F32).
 *
 * What it does:
 *  - memory: aligned host allocations, with the bytes in use and the peak counted per
 *    backend (mem_stats, in the bytes asked for); freed blocks are kept for reuse in a
 *    small per-backend cache of exact block sizes (a few sizes, bounded in bytes; under
 *    AddressSanitizer cached blocks are poisoned), so the steady state of a pipeline,
 *    which frees and allocates the same sizes over and over, does not go to malloc;
 *    "pinned" host memory is ordinary host memory here;
 *  - streams: COMPUTE, SEND and RECV run synchronously on the calling thread; D2H and
 *    H2D each have their own copy thread with a FIFO job queue (memcpy, memset, event
 *    record, event wait), so an offload overlaps the compute that follows it. Events are
 *    completion flags with a generation count (mutex + condvar); re-recording an event
 *    makes later waits wait for the newest record, as on CUDA. A never-recorded event
 *    counts as complete; destroying an event that copy-stream jobs still refer to is
 *    allowed (freed after the last of them, as cudaEventDestroy). event_elapsed uses CLOCK_MONOTONIC taken when the event
 *    completed;
 *  - matrix products through OpenBLAS cblas_sgemm (row-major), or a plain blocked C
 *    loop when configure found no OpenBLAS;
 *  - the kernels themselves live in cpu_kernels.c (plain C, F32; see the exact math
 *    documented there, which the CUDA backend mirrors).
 *
 * What it does not: no BF16 (act_dtype is F32; a BF16 operand is a usage error), no
 * multithreading of kernels beyond what OpenBLAS does itself, no device->device
 * transfer between backends (transports copy host buffers themselves). A kernel called
 * on a copy stream first drains that stream, then runs on the caller's thread. */
#include "config.h"
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cpu_backend.h"

#ifdef HAVE_OPENBLAS
#include <cblas.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* ------------------------------------------------------------------------- */
/* events                                                                      */

struct ppsrt_event {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t recorded;   /* generation of the newest record */
  uint64_t completed;  /* newest generation that has completed */
  double t;            /* monotonic seconds at the completion of `completed` */
  int refs;            /* copy-stream jobs (record, wait) still referring to it */
  int destroyed;       /* event_destroy was called: the last job frees it (as on CUDA) */
};

static void event_free(ppsrt_event *e) {
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}

/* A copy-stream job is done with e; frees it when it was destroyed meanwhile. */
static void event_unref(ppsrt_event *e) {
  pthread_mutex_lock(&e->mu);
  int last = --e->refs == 0 && e->destroyed;
  pthread_mutex_unlock(&e->mu);
  if (last) event_free(e);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void event_complete(ppsrt_event *e, uint64_t gen) {
  pthread_mutex_lock(&e->mu);
  if (gen > e->completed) {
    e->completed = gen;
    e->t = now_s();
  }
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

static void event_wait_gen(ppsrt_event *e, uint64_t gen) {
  pthread_mutex_lock(&e->mu);
  while (e->completed < gen) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

/* ------------------------------------------------------------------------- */
/* copy streams: one thread and one FIFO per stream (D2H, H2D)                 */

enum { JOB_COPY, JOB_SET0, JOB_RECORD, JOB_WAIT, JOB_QUIT };

typedef struct job {
  int kind;
  void *dst;
  const void *src;
  size_t bytes;
  ppsrt_event *ev;
  uint64_t gen;
  struct job *next;
} job;

typedef struct copyq {
  pthread_t th;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t cv;       /* signalled on enqueue and on completion */
  job *head, *tail;
  uint64_t enq, done;      /* jobs enqueued and finished */
} copyq;

/* A block: this header, then the caller's bytes rounded up to 64. */
typedef struct alloc_hdr {
  size_t bytes;              /* asked for (what mem_stats counts) */
  size_t total;              /* header included: the block's size, its cache class */
  struct alloc_hdr *next;    /* in the cache */
  size_t pad[5];
} alloc_hdr;  /* 64 bytes */

/* The cache of freed blocks: up to CACHE_CLASSES exact block sizes, CACHE_BYTES in all
 * per backend; a block of another size, or past the bound, goes back to free(). */
enum { CACHE_CLASSES = 8 };
#define CACHE_BYTES ((size_t)64 << 20)

typedef struct cpu_impl {
  copyq q[2];                /* [0] = D2H, [1] = H2D */
  size_t cur_bytes, peak_bytes;
  struct { size_t total; alloc_hdr *head; } cache[CACHE_CLASSES];
  size_t cached;             /* bytes in the cache */
  int shared;                /* a collective lane thread allocates too (coll_lane.c): lock */
  pthread_mutex_t amu;
} cpu_impl;

static void *copy_thread(void *arg) {
  copyq *q = arg;
  for (;;) {
    pthread_mutex_lock(&q->mu);
    while (!q->head) pthread_cond_wait(&q->cv, &q->mu);
    job *j = q->head;
    pthread_mutex_unlock(&q->mu);
    int quit = 0;
    switch (j->kind) {
    case JOB_COPY: memmove(j->dst, j->src, j->bytes); break;
    case JOB_SET0: memset(j->dst, 0, j->bytes); break;
    case JOB_RECORD: event_complete(j->ev, j->gen); event_unref(j->ev); break;
    case JOB_WAIT: event_wait_gen(j->ev, j->gen); event_unref(j->ev); break;
    case JOB_QUIT: quit = 1; break;
    }
    pthread_mutex_lock(&q->mu);
    q->head = j->next;
    if (!q->head) q->tail = NULL;
    q->done++;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    free(j);
    if (quit) return NULL;
  }
}

static int is_copy_stream(int s) { return s == PPSRT_STREAM_D2H || s == PPSRT_STREAM_H2D; }

static copyq *qof(ppsrt_backend *b, int s) {
  cpu_impl *im = b->impl;
  return &im->q[s == PPSRT_STREAM_D2H ? 0 : 1];
}

/* Appends a copy of tmpl to queue q and wakes its thread; -1 when out of memory. */
static int queue_push(copyq *q, job tmpl) {
  job *j = malloc(sizeof *j);
  if (!j) return -1;
  *j = tmpl;
  j->next = NULL;
  pthread_mutex_lock(&q->mu);
  if (q->tail) q->tail->next = j; else q->head = j;
  q->tail = j;
  q->enq++;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
  return 0;
}

static int enqueue(ppsrt_backend *b, int stream, job tmpl) {
  if (queue_push(qof(b, stream), tmpl)) return PPSRT_FAIL(PPSRT_E_NOMEM, "cpu: out of host memory for a copy job");
  return PPSRT_OK;
}

static void drain(ppsrt_backend *b, int stream) {
  copyq *q = qof(b, stream);
  pthread_mutex_lock(&q->mu);
  uint64_t target = q->enq;
  while (q->done < target) pthread_cond_wait(&q->cv, &q->mu);
  pthread_mutex_unlock(&q->mu);
}

static int check_stream(int s) {
  if (s < 0 || s >= PPSRT_NSTREAMS) return PPSRT_FAIL(PPSRT_E_USAGE, "cpu: bad stream %d", s);
  return PPSRT_OK;
}


/* ------------------------------------------------------------------------- */
/* memory                                                                      */

/* A backend is used by one thread at a time (its device's: created and destroyed by
 * the main thread, used in between by the device thread; the copy threads never
 * allocate), so the counts and the cache take no lock: a lock pair per allocation
 * was half of the runtime's own cost per op (bench/runtime_overhead 1 8192 with
 * --no-compute: 0.16 us per op with the lock, 0.075 without). */
static int cpu_alloc_nolock(ppsrt_backend *b, size_t bytes, void **out) {
  cpu_impl *im = b->impl;
  size_t total = sizeof(alloc_hdr) + ((bytes + 63) & ~(size_t)63);
  alloc_hdr *h = NULL;
  for (int k = 0; k < CACHE_CLASSES && im->cache[k].total; k++)
    if (im->cache[k].total == total) {
      if ((h = im->cache[k].head)) {
        UNPOISON(h + 1, total - sizeof *h);
        im->cache[k].head = h->next;
        im->cached -= total;
      }
      break;
    }
  if (!h && (posix_memalign((void **)&h, 64, total) != 0 || !h)) {
    *out = NULL;
    return PPSRT_FAIL(PPSRT_E_NOMEM, "cpu device %d: cannot allocate %zu bytes", b->device_index, bytes);
  }
  h->bytes = bytes;
  h->total = total;
  im->cur_bytes += bytes;
  if (im->cur_bytes > im->peak_bytes) im->peak_bytes = im->cur_bytes;
  *out = h + 1;
  return PPSRT_OK;
}

static void cpu_free_nolock(ppsrt_backend *b, void *p) {
  if (!p) return;
  cpu_impl *im = b->impl;
  alloc_hdr *h = (alloc_hdr *)p - 1;
  im->cur_bytes -= h->bytes;
  if (im->cached + h->total <= CACHE_BYTES)
    for (int k = 0; k < CACHE_CLASSES; k++)
      if (im->cache[k].total == h->total || !im->cache[k].total) {
        im->cache[k].total = h->total;
        h->next = im->cache[k].head;
        im->cache[k].head = h;
        im->cached += h->total;
        POISON(p, h->total - sizeof *h);
        return;
      }
  free(h);
}

/* ...except with a collective lane (ppsrt_cpu_backend_share): then two threads of the
 * device allocate and free, and the counts and the cache are taken under a lock. */
static int cpu_alloc(ppsrt_backend *b, size_t bytes, void **out) {
  cpu_impl *im = b->impl;
  if (!im->shared) return cpu_alloc_nolock(b, bytes, out);
  pthread_mutex_lock(&im->amu);
  int rc = cpu_alloc_nolock(b, bytes, out);
  pthread_mutex_unlock(&im->amu);
  return rc;
}

static void cpu_free(ppsrt_backend *b, void *p) {
  cpu_impl *im = b->impl;
  if (!im->shared) { cpu_free_nolock(b, p); return; }
  pthread_mutex_lock(&im->amu);
  cpu_free_nolock(b, p);
  pthread_mutex_unlock(&im->amu);
}

void ppsrt_cpu_backend_share(ppsrt_backend *b) {
  cpu_impl *im = b->impl;
  if (!im->shared) { pthread_mutex_init(&im->amu, NULL); im->shared = 1; }
}

static int cpu_host_alloc(ppsrt_backend *b, size_t bytes, void **out) {
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0 || !p) {
    *out = NULL;
    return PPSRT_FAIL(PPSRT_E_NOMEM, "cpu device %d: cannot allocate %zu bytes of host memory",
                      b->device_index, bytes);
  }
  *out = p;
  return PPSRT_OK;
}

static void cpu_host_free(ppsrt_backend *b, void *p) { free(p); }

static int cpu_mem_stats(ppsrt_backend *b, size_t *current, size_t *peak, int reset_peak) {
  cpu_impl *im = b->impl;
  if (im->shared) {
    pthread_mutex_lock(&im->amu);
    if (current) *current = im->cur_bytes;
    if (peak) *peak = im->peak_bytes;
    if (reset_peak) im->peak_bytes = im->cur_bytes;
    pthread_mutex_unlock(&im->amu);
    return PPSRT_OK;
  }
  if (current) *current = im->cur_bytes;
  if (peak) *peak = im->peak_bytes;
  if (reset_peak) im->peak_bytes = im->cur_bytes;
  return PPSRT_OK;
}

static int cpu_memset0(ppsrt_backend *b, int stream, void *p, size_t bytes) {
  int rc = check_stream(stream);
  if (rc) return rc;
  if (is_copy_stream(stream)) return enqueue(b, stream, (job){.kind = JOB_SET0, .dst = p, .bytes = bytes});
  if (bytes) memset(p, 0, bytes);
  return PPSRT_OK;
}

static int cpu_memcpy_async(ppsrt_backend *b, int stream, void *dst, const void *src, size_t bytes,
                            int kind) {
  int rc = check_stream(stream);
  if (rc) return rc;
  if (kind < 0 || kind > 2) return PPSRT_FAIL(PPSRT_E_USAGE, "cpu: bad memcpy kind %d", kind);
  if (is_copy_stream(stream))
    return enqueue(b, stream, (job){.kind = JOB_COPY, .dst = dst, .src = src, .bytes = bytes});
  if (bytes && dst != src) memmove(dst, src, bytes);
  return PPSRT_OK;
}

static int cpu_upload_f32(ppsrt_backend *b, ppsrt_tensor dst, const float *src) {
  if (dst.dtype != PPSRT_F32) return PPSRT_FAIL(PPSRT_E_USAGE, "cpu: only F32 tensors");
  if (dst.numel) memcpy(dst.data, src, dst.numel * sizeof(float));
  return PPSRT_OK;
}

static int cpu_download_f32(ppsrt_backend *b, float *dst, ppsrt_tensor src) {
  if (src.dtype != PPSRT_F32) return PPSRT_FAIL(PPSRT_E_USAGE, "cpu: only F32 tensors");
  if (src.numel) memcpy(dst, src.data, src.numel * sizeof(float));
  return PPSRT_OK;
}

/* ------------------------------------------------------------------------- */
/* streams and events                                                          */

static int cpu_event_create(ppsrt_backend *b, ppsrt_event **out) {
  ppsrt_event *e = calloc(1, sizeof *e);
  if (!e) return PPSRT_FAIL(PPSRT_E_NOMEM, "cpu: cannot allocate an event");
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  *out = e;
  return PPSRT_OK;
}

/* As cudaEventDestroy: returns at once; jobs of the copy streams that still refer to
 * the event (a pending record or wait) keep it alive until they are done. */
static void cpu_event_destroy(ppsrt_backend *b, ppsrt_event *e) {
  if (!e) return;
  pthread_mutex_lock(&e->mu);
  e->destroyed = 1;
  int now = e->refs == 0;
  pthread_mutex_unlock(&e->mu);
  if (now) event_free(e);
}

/* Synchronous streams: everything issued before has completed, so the event completes
 * now. Copy streams: the copy thread completes it after the jobs queued before it. */
static int cpu_event_record(ppsrt_backend *b, ppsrt_event *e, int stream) {
  int rc = check_stream(stream);
  if (rc) return rc;
  int copy = is_copy_stream(stream);
  pthread_mutex_lock(&e->mu);
  uint64_t gen = ++e->recorded;
  if (copy) e->refs++;
  pthread_mutex_unlock(&e->mu);
  if (copy) {
    rc = enqueue(b, stream, (job){.kind = JOB_RECORD, .ev = e, .gen = gen});
    if (rc) { event_complete(e, gen); event_unref(e); }
    return rc;
  }
  event_complete(e, gen);
  return PPSRT_OK;
}

static uint64_t event_target(ppsrt_event *e, int ref) {
  pthread_mutex_lock(&e->mu);
  uint64_t g = e->recorded;
  if (ref) e->refs++;
  pthread_mutex_unlock(&e->mu);
  return g;
}

/* The wait keeps the generation recorded at the time of the call. */
static int cpu_stream_wait_event(ppsrt_backend *b, int stream, ppsrt_event *e) {
  int rc = check_stream(stream);
  if (rc) return rc;
  int copy = is_copy_stream(stream);
  uint64_t gen = event_target(e, copy);
  if (copy) {
    rc = enqueue(b, stream, (job){.kind = JOB_WAIT, .ev = e, .gen = gen});
    if (rc) event_unref(e);
    return rc;
  }
  event_wait_gen(e, gen);
  return PPSRT_OK;
}

static int cpu_event_sync(ppsrt_backend *b, ppsrt_event *e) {
  event_wait_gen(e, event_target(e, 0));
  return PPSRT_OK;
}

static int cpu_event_query(ppsrt_backend *b, ppsrt_event *e) {
  pthread_mutex_lock(&e->mu);
  int done = e->completed >= e->recorded;
  pthread_mutex_unlock(&e->mu);
  return done;
}

/* Kernels run on the caller's thread; on a copy stream they first wait for it (the
   kernels, cpu_kernels.c, call this through b->stream_sync). */
static int cpu_stream_sync(ppsrt_backend *b, int stream) {
  int rc = check_stream(stream);
  if (rc) return rc;
  if (is_copy_stream(stream)) drain(b, stream);
  return PPSRT_OK;
}

static double cpu_event_elapsed(ppsrt_backend *b, ppsrt_event *start, ppsrt_event *end) {
  double t0, t1;
  int ok;
  pthread_mutex_lock(&start->mu);
  ok = start->recorded > 0 && start->completed >= start->recorded;
  t0 = start->t;
  pthread_mutex_unlock(&start->mu);
  if (!ok) return -1.0;
  pthread_mutex_lock(&end->mu);
  ok = end->recorded > 0 && end->completed >= end->recorded;
  t1 = end->t;
  pthread_mutex_unlock(&end->mu);
  if (!ok) return -1.0;
  return t1 - t0;
}

/* ------------------------------------------------------------------------- */
/* matrix products                                                             */

#ifndef HAVE_OPENBLAS
/* Reference product, C = alpha op(A) op(B) + beta C, i-k-j order so the innermost
 * loop runs along rows of B and C when B is not transposed. */
static void ref_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
  for (int i = 0; i < M; i++) {
    float *c = C + (size_t)i * ldc;
    if (beta == 0.0f) for (int j = 0; j < N; j++) c[j] = 0.0f;
    else if (beta != 1.0f) for (int j = 0; j < N; j++) c[j] *= beta;
    if (!tb) {
      for (int k = 0; k < K; k++) {
        float a = alpha * (ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
        if (a == 0.0f) continue;
        const float *bk = B + (size_t)k * ldb;
        for (int j = 0; j < N; j++) c[j] += a * bk[j];
      }
    } else {
      for (int j = 0; j < N; j++) {
        const float *bj = B + (size_t)j * ldb;
        float s = 0.0f;
        if (!ta) {
          const float *ai = A + (size_t)i * lda;
          for (int k = 0; k < K; k++) s += ai[k] * bj[k];
        } else {
          for (int k = 0; k < K; k++) s += A[(size_t)k * lda + i] * bj[k];
        }
        c[j] += alpha * s;
      }
    }
  }
}
#endif

static void sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {   /* C = beta C */
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
    return;
  }
#ifdef HAVE_OPENBLAS
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, lda, B, ldb, beta, C, ldc);
#else
  ref_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

static int gemm_check(int ta, int tb, int M, int N, int K, ppsrt_dtype at, int lda, ppsrt_dtype bt,
                      int ldb, ppsrt_dtype ct, int ldc) {
  if (at != PPSRT_F32 || bt != PPSRT_F32 || ct != PPSRT_F32)
    return PPSRT_FAIL(PPSRT_E_USAGE, "cpu gemm: only F32 operands (got %d %d %d)", at, bt, ct);
  if (M < 0 || N < 0 || K < 0) return PPSRT_FAIL(PPSRT_E_USAGE, "cpu gemm: negative size");
  int acols = ta ? M : K, bcols = tb ? K : N;
  if (lda < (acols > 1 ? acols : 1) || ldb < (bcols > 1 ? bcols : 1) || ldc < (N > 1 ? N : 1))
    return PPSRT_FAIL(PPSRT_E_USAGE, "cpu gemm: leading dimension too small (lda %d ldb %d ldc %d for M %d N %d K %d ta %d tb %d)",
                      lda, ldb, ldc, M, N, K, ta, tb);
  return PPSRT_OK;
}

static int cpu_gemm(ppsrt_backend *b, int stream, int ta, int tb, int M, int N, int K, float alpha,
                    const void *A, ppsrt_dtype at, int lda, const void *B, ppsrt_dtype bt, int ldb,
                    float beta, void *C, ppsrt_dtype ct, int ldc) {
  int rc = cpu_stream_sync(b, stream);
  if (rc) return rc;
  if ((rc = gemm_check(ta, tb, M, N, K, at, lda, bt, ldb, ct, ldc))) return rc;
  sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  return PPSRT_OK;
}

static int cpu_gemm_strided(ppsrt_backend *b, int stream, int ta, int tb, int M, int N, int K,
                            float alpha, const void *A, ppsrt_dtype at, int lda, long sA, const void *B,
                            ppsrt_dtype bt, int ldb, long sB, float beta, void *C, ppsrt_dtype ct,
                            int ldc, long sC, int count) {
  int rc = cpu_stream_sync(b, stream);
  if (rc) return rc;
  if ((rc = gemm_check(ta, tb, M, N, K, at, lda, bt, ldb, ct, ldc))) return rc;
  for (int i = 0; i < count; i++)
    sgemm(ta, tb, M, N, K, alpha, (const float *)A + (ptrdiff_t)i * sA, lda,
          (const float *)B + (ptrdiff_t)i * sB, ldb, beta, (float *)C + (ptrdiff_t)i * sC, ldc);
  return PPSRT_OK;
}

/* ------------------------------------------------------------------------- */
/* creation                                                                    */

static void cpu_destroy(ppsrt_backend *b) {
  if (!b) return;
  cpu_impl *im = b->impl;
  if (im) {
    for (int i = 0; i < 2; i++) {
      copyq *q = &im->q[i];
      if (!q->started) continue;
      if (queue_push(q, (job){.kind = JOB_QUIT}) == 0) {
        pthread_join(q->th, NULL);
      } else {
        pthread_cancel(q->th);
        pthread_join(q->th, NULL);
      }
      pthread_mutex_destroy(&q->mu);
      pthread_cond_destroy(&q->cv);
    }
    for (int k = 0; k < CACHE_CLASSES; k++)
      for (alloc_hdr *h = im->cache[k].head, *nx; h; h = nx) {
        nx = h->next;
        free(h);
      }
    if (im->shared) pthread_mutex_destroy(&im->amu);
    free(im);
  }
  free(b);
}

int ppsrt_cpu_backend_create(int device_index, ppsrt_backend **out) {
  *out = NULL;
  ppsrt_backend *b = calloc(1, sizeof *b);
  cpu_impl *im = calloc(1, sizeof *im);
  if (!b || !im) {
    free(b);
    free(im);
    return PPSRT_FAIL(PPSRT_E_NOMEM, "cpu: cannot allocate the backend");
  }
  b->name = "cpu";
  b->act_dtype = PPSRT_F32;
  b->device_index = device_index;
  b->impl = im;
  b->destroy = cpu_destroy;
  for (int i = 0; i < 2; i++) {
    copyq *q = &im->q[i];
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    int err = pthread_create(&q->th, NULL, copy_thread, q);
    if (err) {
      pthread_mutex_destroy(&q->mu);
      pthread_cond_destroy(&q->cv);
      cpu_destroy(b);
      return PPSRT_FAIL(PPSRT_E_BACKEND, "cpu device %d: cannot start a copy thread: %s", device_index,
                        strerror(err));
    }
    q->started = 1;
  }
  b->alloc = cpu_alloc;
  b->free = cpu_free;
  b->host_alloc = cpu_host_alloc;
  b->host_free = cpu_host_free;
  b->memset0 = cpu_memset0;
  b->memcpy_async = cpu_memcpy_async;
  b->upload_f32 = cpu_upload_f32;
  b->download_f32 = cpu_download_f32;
  b->event_create = cpu_event_create;
  b->event_destroy = cpu_event_destroy;
  b->event_record = cpu_event_record;
  b->stream_wait_event = cpu_stream_wait_event;
  b->event_sync = cpu_event_sync;
  b->event_query = cpu_event_query;
  b->stream_sync = cpu_stream_sync;
  b->event_elapsed = cpu_event_elapsed;
  b->gemm = cpu_gemm;
  b->gemm_strided = cpu_gemm_strided;
  b->mem_stats = cpu_mem_stats;
  ppsrt_cpu_install_kernels(b);
  *out = b;
  return PPSRT_OK;
}
