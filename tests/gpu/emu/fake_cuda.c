/* tests/gpu/emu/fake_cuda.c: an asynchronous host-memory emulator of the parts of the
 * CUDA runtime, cuBLAS, cuBLASLt (fake_cublaslt.inc) and NCCL that the CUDA backend (and ordinary small host
 * programs) call, with a stream race detector. It makes a machine without a GPU run the
 * backend's real code paths, and makes stream- and NCCL-ordering mistakes fail
 * deterministically.
 *
 * Two ways in: tests/gpu/cuda_kernels_emu links it into the executable (interposition
 * through --export-dynamic); tests/gpu/emu/libppsrt_emu.so is the same code as a
 * preload library (LD_PRELOAD) for whole programs.
 *
 * What it models:
 *  - devices: PPSRT_EMU_GPUS "GPUs" (default 1) sharing host memory;
 *  - streams: every stream has a worker thread that runs its queued work in issue order,
 *    after a random delay drawn from PPS_EMU_SEED (default 1; PPS_EMU_DELAY_US, default
 *    40, bounds it). The legacy default stream (0, cudaStreamLegacy) is one per device;
 *    streams created without cudaStreamNonBlocking, and cudaStreamPerThread (one per
 *    host thread and device), synchronise with it both ways and with nothing else,
 *    non-blocking ones do not; cudaStreamQuery of the legacy stream answers
 *    cudaErrorNotReady while a blocking stream of its device is busy; priorities range
 *    from 0 (least) to -5 (greatest), others are clamped; a handle of a destroyed stream,
 *    event, cuBLAS handle or NCCL communicator stops the run (exit 69: undefined in
 *    CUDA; the structs are kept, so their addresses are never reused);
 *  - events: cudaEventRecord enqueues a marker; the event completes when the stream
 *    reaches it; cudaStreamWaitEvent makes the stream's later work wait for it;
 *    cudaEventQuery/Synchronize, cudaStreamSynchronize/Query, cudaDeviceSynchronize are
 *    real host waits; elapsed times are host clock times of the markers;
 *  - copies: cudaMemcpyAsync/cudaMemsetAsync run on their stream; cudaMemcpy runs on
 *    the legacy stream: device-to-host and pinned host-to-device wait for it, a
 *    host-to-device copy from pageable memory waits for the earlier work, snapshots the
 *    source and may return before the copy lands (as CUDA allows), device-to-device
 *    never waits. cudaFree and cudaFreeHost synchronise the device first, cudaFreeAsync
 *    is stream-ordered; cudaHostRegister'ed memory counts as pinned;
 *  - argument checks with the GPU's codes (tests/gpu/conformance.expected is the
 *    record): a copy or memset whose device side is not wholly inside one allocation
 *    (wild pointer, past the end, a pageable buffer named as device memory) and an
 *    undefined cudaHostAlloc flag are cudaErrorInvalidValue, an undefined copy kind
 *    cudaErrorInvalidMemcpyDirection; cudaMalloc(0) and cudaHostAlloc(0) give NULL; a
 *    NULL cuBLAS handle is CUBLAS_STATUS_NOT_INITIALIZED; error names and strings are
 *    the libraries' own. Every error is recorded as the thread's last error;
 *  - kernels (kernels.cu through cuda_emu.h, and a program's own kernels that it hands
 *    over as host functions with pps_emu_register_kernel) and cuBLAS GEMMs run on their
 *    stream's worker; a launch with a bad configuration (empty grid, more than 1024
 *    threads per block, grid or block dimensions past CUDA's limits, more than 48 KiB
 *    of dynamic shared memory) enqueues nothing and is cudaErrorInvalidValue, reported
 *    by cudaGetLastError / cudaPeekAtLastError (per host thread, not sticky: cleared on
 *    read), as CUDA 13 does;
 *  - NCCL (with HAVE_NCCL): communicators from ncclCommInitAll or from
 *    ncclGetUniqueId + ncclCommInitRank (ranks in this process or in other processes of
 *    this machine, fake_nccl.inc says how: the call blocks until every rank joined, as
 *    NCCL's does); operations run on their stream's worker;
 *    ncclSend completes only when the matching ncclRecv runs (rendezvous), the
 *    operations of one ncclGroupStart/End progress together (their streams are joined
 *    first), a communicator runs its groups one at a time in issue order, collectives
 *    (all-reduce and reduce-scatter F32 sum/max/min/prod, all-gather, broadcast) need
 *    every rank; buffers overlapping other than in place (undefined in NCCL) and
 *    reductions it does not compute stop the run (exit 69). No progress for
 *    PPS_EMU_TIMEOUT seconds (default 60) prints every pending operation and exits 67;
 *  - the race detector: every kernel, copy, memset, GEMM and NCCL operation declares the
 *    byte ranges it reads and writes in emulated allocations (kernels: pointer
 *    parameters, `const T *` read and `T *` written, from the pointer to the end of its
 *    allocation; copies, GEMMs and NCCL: exact ranges). Happens-before is a vector clock
 *    per stream, carried by events, stream waits, the legacy stream's implicit
 *    synchronisation, NCCL groups, and host synchronisation (each host thread has its own
 *    clock: a host wait joins the clock of what it waited for, an enqueue passes the
 *    host's clock to the work). An access that conflicts (one of the two writes) with an
 *    earlier one on another stream not ordered before it prints the buffer, both
 *    streams and both operations and exits 66 (PPS_EMU_RACE=warn: print and go on).
 *
 * PPS_EMU_STATS=1 prints the number of allocation calls at exit, and how many operations
 * ran on streams a program named "COMPUTE2..." (the CUDA backend's second compute stream,
 * used by overlapped F&B pairs), and how many on streams named "LANE..." or "nccl lane..."
 * (the collective lane's: the backend's lane stream and the lane transport's NCCL stream),
 * and on streams named "DP ..." or "nccl replica group..." (--data-parallel's: the
 * backend's DP stream and the replica group's NCCL stream; in parentheses the NCCL
 * operations among them); and the NCCL operations on streams named "nccl tensor-parallel
 * group..." (--tensor-parallel's group communicators), on streams named "nccl pipeline
 * group..." or "nccl lane pipeline group..." (a pipeline's own communicators under
 * --data-parallel or --tensor-parallel, cli.c) and on "nccl collectives..." streams (the
 * run transport's collectives over every rank);
 * and how many cublasLtMatmul calls it ran (the backend's fused GEMM epilogues).
 *
 * What it does not model: host code reading or writing pinned memory (only device-side
 * accesses are tracked, so a host read of a pinned buffer before its copy finished goes
 * unseen); pointers that a kernel reads through memory (the copy channel's source
 * arrays); several machines (NCCL across processes meets in this machine's TMPDIR);
 * NCCL's internal streams and proxy threads; device-wide effects of cudaMalloc;
 * graphs; timing, bandwidth and memory capacity; errors beyond the argument checks; a
 * write-read pair on one stream is always ordered (streams are in order), so races
 * inside a kernel or between blocks are the business of cuda_emu.h, not this file. */
#include "config.h"
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "emu_api.h"

#define MAXS 512      /* stream slots (vector clock width) */
#define EXIT_RACE 66
#define EXIT_STUCK 67
#define EXIT_UNSUPPORTED 69   /* a call the emulator does not implement (unsupported.c) */
#define PRIO_LEAST 0          /* stream priorities as on an H100/H200 */
#define PRIO_GREATEST (-5)

/* ------------------------------------------------------------------------- */
/* configuration                                                               */

static unsigned long long seed_v;
static int delay_us = 40, race_warn;
static double stuck_s = 60;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static void cfg_init(void) {
  const char *v = getenv("PPS_EMU_SEED");
  seed_v = v ? strtoull(v, NULL, 10) : 1;
  if ((v = getenv("PPS_EMU_DELAY_US"))) delay_us = atoi(v) < 0 ? 0 : atoi(v);
  if ((v = getenv("PPS_EMU_TIMEOUT")) && atof(v) > 0) stuck_s = atof(v);
  v = getenv("PPS_EMU_RACE");
  race_warn = v && strcmp(v, "warn") == 0;
}
static void cfg(void) { pthread_once(&cfg_once, cfg_init); }

static int ngpus(void) {
  const char *v = getenv("PPSRT_EMU_GPUS");
  int n = v ? atoi(v) : 1;
  return n > 0 ? n : 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void deadline_in(struct timespec *dl, double s) {
  clock_gettime(CLOCK_REALTIME, dl);
  long long ns = dl->tv_nsec + (long long)(s * 1e9);
  dl->tv_sec += (time_t)(ns / 1000000000LL);
  dl->tv_nsec = (long)(ns % 1000000000LL);
}

__attribute__((noreturn)) static void emu_die(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("pps-emu: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
  _exit(code);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) emu_die(70, "out of host memory (%zu bytes)", n);
  return p;
}
static void *xcalloc(size_t a, size_t b) {
  void *p = calloc(a ? a : 1, b ? b : 1);
  if (!p) emu_die(70, "out of host memory");
  return p;
}

/* Destroyed streams, events, cuBLAS handles and NCCL communicators are kept (a later
 * use of the handle stops the run; their addresses are never reused). The graveyard
 * holds them so that they stay reachable: kept on purpose, not leaked (LeakSanitizer,
 * in the ASan build's make check, would otherwise report every one). */
static pthread_mutex_t grave_mu = PTHREAD_MUTEX_INITIALIZER;
static void **graveyard;
static size_t ngrave, capgrave;
static void keep_dead(void *p) {
  pthread_mutex_lock(&grave_mu);
  if (ngrave == capgrave) {
    size_t cap = capgrave ? 2 * capgrave : 256;
    void **g = realloc(graveyard, cap * sizeof *g);
    if (!g) emu_die(70, "out of host memory");
    graveyard = g;
    capgrave = cap;
  }
  graveyard[ngrave++] = p;
  pthread_mutex_unlock(&grave_mu);
}

/* ------------------------------------------------------------------------- */
/* global state: one mutex for queues and completions                          */

static pthread_mutex_t G = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t G_done = PTHREAD_COND_INITIALIZER;   /* something completed */

/* vector clocks: MAXS counters (one per stream slot) */
typedef struct vclock { uint32_t c[MAXS]; } vclock;
static int vc_hi;   /* slots in use are < vc_hi (under G) */
static void vc_join(uint32_t *a, const uint32_t *b, int n) {
  for (int i = 0; i < n; i++)
    if (b[i] > a[i]) a[i] = b[i];
}

static __thread uint32_t host_vc[MAXS];
static __thread int cur_dev;
static __thread cudaError_t last_err;

/* ------------------------------------------------------------------------- */
/* streams                                                                     */

typedef struct record {   /* one cudaEventRecord: completes when its stream reaches it */
  int refs, done, slot;
  double t;
  uint32_t *vc;           /* [vc_n] the stream's clock at the marker */
  int vc_n;
} record;

enum { K_OP, K_WAIT, K_RECORD, K_GROUP, K_QUIT };

struct nccl_group;
typedef struct item {
  struct item *next;
  int kind;
  uint32_t *pre;          /* the enqueuing host thread's clock */
  int pre_n;
  record *rec;            /* K_WAIT, K_RECORD */
  struct nccl_group *grp; /* K_GROUP */
  void (*fn)(void *);     /* K_OP */
  void *ctx;
  void (*del)(void *);
  emu_access acc[EMU_MAX_ACCESS];
  int nacc;
  char what[112];
} item;

typedef struct strm {
  int slot, dev, legacy, nonblocking, prio, perthread;
  char name[96];
  pthread_t th;
  pthread_cond_t cv;      /* work arrived */
  item *head, *tail;
  unsigned long long nenq, ndone;
  unsigned long long legacy_seen;   /* blocking stream: legacy nenq already waited for */
  unsigned long long seen_by_legacy;
  uint32_t vc[MAXS];      /* worker-owned */
  unsigned long long rng;
  int quit;
  int busy_wait;          /* 1 while the worker waits on something (diagnostics) */
  char waiting_on[160];
} strm;

static strm *slots[MAXS];
static uint32_t slot_last[MAXS];   /* the last epoch of a destroyed stream's slot */
static strm *legacy_of[64];
static int nstreams_made;

static unsigned long long rng_next(unsigned long long *s) {
  unsigned long long x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x ? x : 0x9E3779B97F4A7C15ULL;
}

static void rand_delay(strm *s) {
  if (!delay_us) return;
  unsigned long long r = rng_next(&s->rng);
  if (r % 16 == 0) {
    struct timespec ts = {0, (long)((r >> 8) % (unsigned)delay_us) * 1000L};
    nanosleep(&ts, NULL);
  } else if (r % 4 == 1) {
    sched_yield();
  }
}

static record *rec_new(int slot) {
  record *r = xcalloc(1, sizeof *r);
  r->refs = 1;
  r->slot = slot;
  return r;
}
static void rec_unref(record *r) {   /* under G */
  if (r && --r->refs == 0) {
    free(r->vc);
    free(r);
  }
}

static void item_free(item *it) {
  if (it->del) it->del(it->ctx);
  free(it->pre);
  free(it);
}

struct nccl_group;
static void group_exec(strm *s, struct nccl_group *g);
static void group_unref(struct nccl_group *g);
static void check_accesses(strm *s, const item *it);

/* Waits on G_done until *flag != 0 (under G); past the stuck timeout reports `what`. */
static void wait_flag(volatile int *flag, const char *what, strm *s);

static void *worker(void *arg) {
  strm *s = arg;
  pthread_mutex_lock(&G);
  for (;;) {
    while (!s->head) pthread_cond_wait(&s->cv, &G);
    item *it = s->head;
    pthread_mutex_unlock(&G);
    if (it->kind == K_QUIT) break;
    rand_delay(s);
    if (it->pre) vc_join(s->vc, it->pre, it->pre_n);
    switch (it->kind) {
    case K_WAIT:
      pthread_mutex_lock(&G);
      snprintf(s->waiting_on, sizeof s->waiting_on, "an event recorded on %s",
               it->rec->slot >= 0 && slots[it->rec->slot] ? slots[it->rec->slot]->name : "another stream");
      wait_flag(&it->rec->done, s->waiting_on, s);
      vc_join(s->vc, it->rec->vc, it->rec->vc_n);
      s->waiting_on[0] = 0;
      pthread_mutex_unlock(&G);
      break;
    case K_OP:
      s->vc[s->slot]++;
      check_accesses(s, it);
      if (it->fn) it->fn(it->ctx);
      break;
    case K_RECORD:
      pthread_mutex_lock(&G);
      {
        int n = vc_hi;
        it->rec->vc = xmalloc((size_t)n * sizeof(uint32_t));
        memcpy(it->rec->vc, s->vc, (size_t)n * sizeof(uint32_t));
        it->rec->vc_n = n;
        it->rec->t = now_s();
        it->rec->done = 1;
        pthread_cond_broadcast(&G_done);
      }
      pthread_mutex_unlock(&G);
      break;
    case K_GROUP: group_exec(s, it->grp); break;
    default: break;
    }
    pthread_mutex_lock(&G);
    s->head = it->next;
    if (!s->head) s->tail = NULL;
    s->ndone++;
    if (it->rec) rec_unref(it->rec);
    if (it->grp) group_unref(it->grp);
    pthread_cond_broadcast(&G_done);
    pthread_mutex_unlock(&G);
    item_free(it);
    pthread_mutex_lock(&G);
  }
  /* K_QUIT: the stream is destroyed; its slot becomes free */
  pthread_mutex_lock(&G);
  item *it = s->head;
  s->head = NULL;
  slot_last[s->slot] = s->vc[s->slot];
  slots[s->slot] = NULL;
  pthread_mutex_unlock(&G);
  item_free(it);
  /* the struct is kept (a few KiB per destroyed stream): its address is never reused by
   * a later stream, so S() tells a destroyed handle from a live one */
  keep_dead(s);
  return NULL;
}

#ifdef HAVE_NCCL
static void nccl_dump(void);
#endif
static void wait_flag(volatile int *flag, const char *what, strm *s) {
  double t0 = now_s();
  while (!*flag) {
    struct timespec dl;
    deadline_in(&dl, 0.5);
    pthread_cond_timedwait(&G_done, &G, &dl);
#ifdef HAVE_NCCL
    if (!*flag && now_s() - t0 > stuck_s) nccl_dump();
#endif
    if (!*flag && now_s() - t0 > stuck_s)
      emu_die(EXIT_STUCK, "%s waited %.0f s for %s, which never completed (PPS_EMU_TIMEOUT)",
              s ? s->name : "a host thread", now_s() - t0, what);
  }
}

static strm *stream_new(int dev, int legacy, int nonblocking, int prio) {   /* under G */
  cfg();
  int slot = -1;
  for (int i = 0; i < MAXS; i++)
    if (!slots[i]) {
      slot = i;
      break;
    }
  if (slot < 0) return NULL;
  strm *s = xcalloc(1, sizeof *s);
  s->slot = slot;
  s->dev = dev;
  s->legacy = legacy;
  s->nonblocking = nonblocking;
  s->prio = prio;
  s->rng = (seed_v + 1) * 0x9E3779B97F4A7C15ULL + (unsigned long long)(nstreams_made + 1) * 0xBF58476D1CE4E5B9ULL;
  nstreams_made++;
  if (legacy) snprintf(s->name, sizeof s->name, "the legacy default stream of GPU %d", dev);
  else snprintf(s->name, sizeof s->name, "stream #%d (GPU %d%s)", nstreams_made, dev, nonblocking ? ", non-blocking" : "");
  pthread_cond_init(&s->cv, NULL);
  /* a reused slot keeps counting from the old stream's clock (never moves backwards) */
  for (int i = 0; i < MAXS; i++) s->vc[i] = 0;
  s->vc[slot] = slot_last[slot] + 1;   /* past the previous owner's epochs */
  slots[slot] = s;
  if (slot + 1 > vc_hi) vc_hi = slot + 1;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&a, 1 << 20);
  if (pthread_create(&s->th, &a, worker, s)) emu_die(70, "cannot start a stream worker thread");
  pthread_attr_destroy(&a);
  return s;
}

static strm *legacy(int dev) {   /* under G */
  if (dev < 0 || dev >= 64) dev = 0;
  if (!legacy_of[dev]) legacy_of[dev] = stream_new(dev, 1, 0, 0);
  return legacy_of[dev];
}

/* cudaStreamPerThread: one blocking stream per host thread and device. Like a created
 * blocking stream it synchronises with the legacy stream both ways; its work also waits
 * for the other blocking streams' work, which does not wait for it (measured on an H200
 * by tests/gpu/conformance at commit 19595a4; an earlier H200 probe had seen no wait). */
static __thread strm *per_thread_of[64];
static strm *per_thread(int dev) {   /* under G */
  if (dev < 0 || dev >= 64) dev = 0;
  if (!per_thread_of[dev]) {
    strm *s = stream_new(dev, 0, 0, 0);
    if (!s) emu_die(70, "out of stream slots (%d)", MAXS);
    s->perthread = 1;
    snprintf(s->name, sizeof s->name, "the per-thread default stream of a host thread (GPU %d)", dev);
    per_thread_of[dev] = s;
  }
  return per_thread_of[dev];
}

/* The stream a handle names. A handle that is no live stream (destroyed, or never
 * created) is undefined behaviour in CUDA: the run stops here, loudly. Under G. */
static strm *S_call(cudaStream_t st, const char *call) {
  if (st == NULL || st == cudaStreamLegacy) return legacy(cur_dev);
  if (st == cudaStreamPerThread) return per_thread(cur_dev);
  strm *s = (strm *)st;
  for (int i = 0; i < vc_hi; i++)
    if (slots[i] == s && !s->quit) return s;
  emu_die(EXIT_UNSUPPORTED,
          "%s names stream %p, which was destroyed or never created: CUDA leaves that undefined (the emulator "
          "stops here; on a GPU it may crash, hang or use another stream)", call, (void *)st);
}
#define S(st) S_call((st), __func__)

static item *item_new(int kind, const char *what) {
  item *it = xcalloc(1, sizeof *it);
  it->kind = kind;
  if (what) snprintf(it->what, sizeof it->what, "%s", what);
  return it;
}

static unsigned long long n_compute2;   /* PPS_EMU_STATS: operations on COMPUTE2* streams */
static unsigned long long n_lane;       /* PPS_EMU_STATS: operations on LANE* and "nccl lane*" streams */
static unsigned long long n_dp;         /* PPS_EMU_STATS: operations on DP* and "nccl replica group*" streams */
static unsigned long long n_dp_nccl;    /* PPS_EMU_STATS: NCCL operations on "nccl replica group*" streams */
static unsigned long long n_tp_nccl;    /* PPS_EMU_STATS: NCCL operations on "nccl tensor-parallel group*" streams */
static unsigned long long n_pp_nccl;    /* PPS_EMU_STATS: NCCL operations on "nccl [lane ]pipeline group*" streams */
static unsigned long long n_world_nccl; /* PPS_EMU_STATS: NCCL operations on "nccl collectives*" streams */
static unsigned long long n_lt;         /* PPS_EMU_STATS: cublasLtMatmul calls (fake_cublaslt.inc) */

static void push_raw(strm *s, item *it) {   /* under G */
  if (!it->pre && it->kind != K_QUIT) {
    int n = vc_hi;
    it->pre = xmalloc((size_t)n * sizeof(uint32_t));
    memcpy(it->pre, host_vc, (size_t)n * sizeof(uint32_t));
    it->pre_n = n;
  }
  if (it->kind == K_OP && !strncmp(s->name, "COMPUTE2", 8)) n_compute2++;   /* under G */
  if (it->kind == K_OP && (!strncmp(s->name, "LANE", 4) || !strncmp(s->name, "nccl lane", 9))) n_lane++;
  if (it->kind == K_OP && (!strncmp(s->name, "DP ", 3) || !strncmp(s->name, "nccl replica group", 18))) n_dp++;
  if (it->kind == K_GROUP && !strncmp(s->name, "nccl replica group", 18)) n_dp++, n_dp_nccl++;
  if (it->kind == K_GROUP && !strncmp(s->name, "nccl tensor-parallel group", 26)) n_tp_nccl++;
  if (it->kind == K_GROUP && (!strncmp(s->name, "nccl pipeline group", 19) || !strncmp(s->name, "nccl lane pipeline group", 24)))
    n_pp_nccl++;
  if (it->kind == K_GROUP && !strncmp(s->name, "nccl collectives", 16)) n_world_nccl++;
  if (s->tail) s->tail->next = it;
  else s->head = it;
  s->tail = it;
  s->nenq++;
  pthread_cond_signal(&s->cv);
}

/* `b` waits for everything enqueued so far on `a` (an implicit event). Under G. */
static void order_after(strm *b, strm *a) {
  record *r = rec_new(a->slot);
  r->refs = 2;
  item *rit = item_new(K_RECORD, "implicit record");
  rit->rec = r;
  push_raw(a, rit);
  item *wit = item_new(K_WAIT, "implicit wait");
  wit->rec = r;
  push_raw(b, wit);
}

/* Enqueues `it` on s with the legacy stream's implicit synchronisation. Under G. */
static void push(strm *s, item *it) {
  if (s->legacy) {
    for (int i = 0; i < vc_hi; i++) {
      strm *o = slots[i];
      if (!o || o == s || o->legacy || o->nonblocking || o->quit || o->dev != s->dev) continue;
      if (o->nenq > o->seen_by_legacy) {
        order_after(s, o);
        o->seen_by_legacy = o->nenq;
      }
    }
  } else if (!s->nonblocking) {
    if (s->perthread)   /* it waits for the other blocking streams' work (H200, conformance at 19595a4) */
      for (int i = 0; i < vc_hi; i++) {
        strm *o = slots[i];
        if (!o || o == s || o->legacy || o->nonblocking || o->perthread || o->quit || o->dev != s->dev || !o->nenq)
          continue;
        order_after(s, o);
      }
    strm *l = legacy(s->dev);
    if (l->nenq > s->legacy_seen) {
      order_after(s, l);
      s->legacy_seen = l->nenq;
    }
  }
  push_raw(s, it);
}

/* Host waits for everything enqueued so far on s and joins its clock. Under G. */
static void host_sync_stream(strm *s) {
  record *r = rec_new(s->slot);
  r->refs = 2;
  item *it = item_new(K_RECORD, "synchronize");
  it->rec = r;
  push_raw(s, it);
  char what[160];
  snprintf(what, sizeof what, "the work queued on %s", s->name);
  unsigned long long target = s->nenq;
  wait_flag(&r->done, what, NULL);
  vc_join(host_vc, r->vc, r->vc_n);
  rec_unref(r);
  /* the worker marks the record done before it counts it: wait for the count, so that
   * cudaStreamQuery right after a synchronize sees an idle stream (as on a GPU) */
  while (s->ndone < target) pthread_cond_wait(&G_done, &G);
}

static void host_sync_device(int dev) {   /* under G */
  legacy(dev);
  for (int i = 0; i < vc_hi; i++)
    if (slots[i] && slots[i]->dev == dev && !slots[i]->quit) host_sync_stream(slots[i]);
}

/* ------------------------------------------------------------------------- */
/* allocations and the race detector                                           */

typedef struct entry {
  size_t lo, hi;
  int write, slot;
  uint32_t epoch;
  char what[256];
} entry;

typedef struct alloc {
  char *base;
  size_t size;
  int host, dev, id;   /* host: 0 device memory, 1 cudaHostAlloc, 2 cudaHostRegister */
  entry *e;
  int ne, cap;
} alloc;

static pthread_mutex_t D = PTHREAD_MUTEX_INITIALIZER;   /* allocations, entries */
static alloc **allocs;   /* sorted by base */
static int nallocs, capallocs, next_alloc_id;

static int find_alloc_idx(const void *p) {   /* under D: index of the allocation holding p, or -1 */
  int lo = 0, hi = nallocs - 1;
  const char *c = p;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    alloc *a = allocs[mid];
    if (c < a->base) hi = mid - 1;
    else if (c >= a->base + (a->size ? a->size : 1)) lo = mid + 1;
    else return mid;
  }
  return -1;
}

static int kind_of(const void *p) {   /* 0 pageable/unknown, 1 device, 2 pinned host */
  pthread_mutex_lock(&D);
  int i = find_alloc_idx(p), k = i < 0 ? 0 : allocs[i]->host ? 2 : 1;
  pthread_mutex_unlock(&D);
  return k;
}

/* 1 when [p, p + n) lies inside one allocation a kernel or a copy engine can address
 * (device memory, pinned or registered host memory: unified addressing) */
static int dev_range_ok(const void *p, size_t n) {
  pthread_mutex_lock(&D);
  int i = find_alloc_idx(p), ok = i >= 0 && (size_t)((const char *)p - allocs[i]->base) + n <= allocs[i]->size;
  pthread_mutex_unlock(&D);
  return ok;
}

static void alloc_add(void *p, size_t n, int host) {
  alloc *a = xcalloc(1, sizeof *a);
  a->base = p;
  a->size = n;
  a->host = host;
  a->dev = cur_dev;
  pthread_mutex_lock(&D);
  a->id = ++next_alloc_id;
  if (nallocs == capallocs) {
    capallocs = capallocs ? 2 * capallocs : 256;
    alloc **v = realloc(allocs, (size_t)capallocs * sizeof *v);
    if (!v) emu_die(70, "out of host memory");
    allocs = v;
  }
  int i = nallocs;
  while (i > 0 && allocs[i - 1]->base > (char *)p) {
    allocs[i] = allocs[i - 1];
    i--;
  }
  allocs[i] = a;
  nallocs++;
  pthread_mutex_unlock(&D);
}

static int alloc_remove(void *p, int host) {   /* 0, or -1 when p is not the base of such an allocation */
  pthread_mutex_lock(&D);
  int i = find_alloc_idx(p);
  if (i < 0 || allocs[i]->base != (char *)p || allocs[i]->host != host) {
    pthread_mutex_unlock(&D);
    return -1;
  }
  alloc *a = allocs[i];
  memmove(&allocs[i], &allocs[i + 1], (size_t)(nallocs - i - 1) * sizeof *allocs);
  nallocs--;
  pthread_mutex_unlock(&D);
  free(a->e);
  free(a);
  return 0;
}

static void describe(char *buf, size_t n, const strm *s, const item *it, int write) {
  snprintf(buf, n, "%s (%s) on %s", it->what, write ? "write" : "read", s->name);
}

/* Checks one access of `it` on stream s against the allocation's earlier accesses and
 * records it. Under D. */
static void check_one(strm *s, const item *it, const emu_access *ac) {
  if (!ac->p) return;
  int i = find_alloc_idx(ac->p);
  if (i < 0) return;   /* pageable host memory: not tracked */
  alloc *a = allocs[i];
  size_t lo = (size_t)((const char *)ac->p - a->base);
  size_t hi = ac->bytes == EMU_TO_END || lo + ac->bytes > a->size ? a->size : lo + ac->bytes;
  if (hi <= lo) return;
  int j = 0;
  for (int k = 0; k < a->ne; k++) {
    entry *e = &a->e[k];
    int overlap = e->lo < hi && lo < e->hi;
    int ordered = e->slot == s->slot ? 1 : s->vc[e->slot] >= e->epoch;
    if (overlap && (e->write || ac->write) && !ordered) {
      char me[256];
      describe(me, sizeof me, s, it, ac->write);
      fprintf(stderr,
              "pps-emu: RACE on %s buffer #%d (%zu bytes at %p, bytes %zu..%zu):\n"
              "  %s\n  is not ordered after\n  %s\n"
              "hint: record an event on the first stream after the earlier operation and make the second stream "
              "wait for it (cudaEventRecord + cudaStreamWaitEvent), or synchronise the host between them\n",
              a->host ? "pinned host" : "device", a->id, a->size, (void *)a->base, lo > e->lo ? lo : e->lo,
              hi < e->hi ? hi : e->hi, me, e->what);
      fflush(stderr);
      if (!race_warn) _exit(EXIT_RACE);
    }
    /* an entry ordered before this access and covered by it adds nothing later */
    if (ordered && e->lo >= lo && e->hi <= hi && (ac->write || !e->write)) continue;
    a->e[j++] = *e;
  }
  a->ne = j;
  if (a->ne == a->cap) {
    if (a->cap >= 256) {   /* bounded: forget the oldest */
      memmove(&a->e[0], &a->e[1], (size_t)(a->ne - 1) * sizeof *a->e);
      a->ne--;
    } else {
      a->cap = a->cap ? 2 * a->cap : 4;
      entry *v = realloc(a->e, (size_t)a->cap * sizeof *v);
      if (!v) emu_die(70, "out of host memory");
      a->e = v;
    }
  }
  entry *e = &a->e[a->ne++];
  e->lo = lo;
  e->hi = hi;
  e->write = ac->write;
  e->slot = s->slot;
  e->epoch = s->vc[s->slot];
  describe(e->what, sizeof e->what, s, it, ac->write);
}

static void check_accesses(strm *s, const item *it) {
  if (!it->nacc) return;
  pthread_mutex_lock(&D);
  for (int k = 0; k < it->nacc; k++) check_one(s, it, &it->acc[k]);
  pthread_mutex_unlock(&D);
}

/* ------------------------------------------------------------------------- */
/* devices, errors                                                             */

cudaError_t cudaGetDeviceCount(int *n) {
  *n = ngpus();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= ngpus()) return last_err = cudaErrorInvalidDevice;
  cur_dev = d;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) {
  *d = cur_dev;
  return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_err;
  last_err = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_err; }
/* The names and strings of the codes the emulator returns, as the CUDA 13 runtime
 * words them. */
static const struct { cudaError_t e; const char *name, *str; } err_text[] = {
  {cudaSuccess, "cudaSuccess", "no error"},
  {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
  {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
  {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
  {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
  {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
  {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
   "CUDA driver version is insufficient for CUDA runtime version"},
  {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
  {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
  {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
  {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
  {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
   "part or all of the requested memory range is already mapped"},
  {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
   "pointer does not correspond to a registered memory region"},
};
const char *cudaGetErrorName(cudaError_t e) {
  for (size_t i = 0; i < sizeof err_text / sizeof *err_text; i++)
    if (err_text[i].e == e) return err_text[i].name;
  return "cudaErrorUnknown";
}
const char *cudaGetErrorString(cudaError_t e) {
  for (size_t i = 0; i < sizeof err_text / sizeof *err_text; i++)
    if (err_text[i].e == e) return err_text[i].str;
  return "unknown error";
}

/* The emulated GPU: an H200's figures (compute capability 9.0, 132 SMs, 50 MiB of L2;
 * the memory is PPS_EMU_MEM_MB, default 80 GiB, as cudaMemGetInfo says). */
#define EMU_SMS 132
#define EMU_L2 (50 << 20)
#define EMU_SMEM_OPTIN 232448
#define EMU_SMEM_SM 233472
static size_t emu_mem_total(void) {
  const char *v = getenv("PPS_EMU_MEM_MB");
  return (v && atoll(v) > 0 ? (size_t)atoll(v) : (size_t)80 * 1024) << 20;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
  if (d < 0 || d >= ngpus()) return last_err = cudaErrorInvalidDevice;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "emulated on the host (tests/gpu/emu)");
  p->totalGlobalMem = emu_mem_total();
  p->sharedMemPerBlock = 49152;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = 2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = 9;
  p->minor = 0;
  p->textureAlignment = 512;
  p->texturePitchAlignment = 32;
  p->multiProcessorCount = EMU_SMS;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->pciBusID = d + 1;
  p->asyncEngineCount = 3;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = 6144;
  p->l2CacheSize = EMU_L2;
  p->persistingL2CacheMaxSize = 82837504;
  p->maxThreadsPerMultiProcessor = 2048;
  p->streamPrioritiesSupported = 1;
  p->globalL1CacheSupported = p->localL1CacheSupported = 1;
  p->sharedMemPerMultiprocessor = EMU_SMEM_SM;
  p->regsPerMultiprocessor = 65536;
  p->managedMemory = 1;
  p->concurrentManagedAccess = 1;
  p->computePreemptionSupported = 1;
  p->canUseHostPointerForRegisteredMem = 1;
  p->cooperativeLaunch = 1;
  p->sharedMemPerBlockOptin = EMU_SMEM_OPTIN;
  p->maxBlocksPerMultiProcessor = 32;
  p->accessPolicyMaxWindowSize = 134213632;
  p->reservedSharedMemPerBlock = 1024;
  p->hostRegisterSupported = 1;
  p->memoryPoolsSupported = 1;
  p->clusterLaunch = 1;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  if (least) *least = PRIO_LEAST;
  if (greatest) *greatest = PRIO_GREATEST;
  return cudaSuccess;
}
/* PPS_EMU_DRIVER_VERSION (default: the toolkit's CUDART_VERSION) plays an older driver. */
cudaError_t cudaDriverGetVersion(int *v) {
  const char *e = getenv("PPS_EMU_DRIVER_VERSION");
  *v = e ? atoi(e) : CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

/* Not CUDA: called by the weak stubs of unsupported.c, one per CUDA runtime and NCCL
 * function the emulator does not implement: a message naming the call, exit 69 (instead
 * of falling through to the real library). */
__attribute__((noreturn)) void pps_emu_unsupported(const char *call) {
  emu_die(EXIT_UNSUPPORTED,
          "%s is not emulated: this program calls a CUDA runtime or NCCL function the emulator does not implement "
          "(docs/gpu.md, \"The emulator\", lists what it does); run it on a GPU, or add the call to "
          "tests/gpu/emu/fake_cuda.c", call);
}
/* Not CUDA: a launch of the program's own kernel (unsupported.c). */
__attribute__((noreturn)) void pps_emu_launch_refused(const char *call, const void *func) {
  emu_die(EXIT_UNSUPPORTED,
          "%s: the program launches a kernel of its own (host stub %p), which exists only as GPU code; the "
          "emulator runs libppsrt's kernels only, compiled for the host from runtime/cuda/kernels.cu with "
          "tests/gpu/emu/cuda_emu.h (compile a kernel the same way to run it here, or use a GPU)", call, func);
}

/* The device attributes a host program commonly asks for (the values of
 * cudaGetDeviceProperties); any other attribute exits 69 naming it. */
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
  if (d < 0 || d >= ngpus()) return last_err = cudaErrorInvalidDevice;
  switch (a) {
  case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
  case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
  case cudaDevAttrMultiProcessorCount: *v = EMU_SMS; break;
  case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
  case cudaDevAttrWarpSize: *v = 32; break;
  case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: *v = 1024; break;
  case cudaDevAttrMaxBlockDimZ: *v = 64; break;
  case cudaDevAttrMaxGridDimX: *v = 2147483647; break;
  case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *v = 65535; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: *v = 49152; break;
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = EMU_SMEM_OPTIN; break;
  case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = EMU_SMEM_SM; break;
  case cudaDevAttrL2CacheSize: *v = EMU_L2; break;
  case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 2048; break;
  case cudaDevAttrMaxRegistersPerBlock: case cudaDevAttrMaxRegistersPerMultiprocessor: *v = 65536; break;
  case cudaDevAttrTotalConstantMemory: *v = 65536; break;
  case cudaDevAttrMaxBlocksPerMultiprocessor: *v = 32; break;
  case cudaDevAttrGlobalMemoryBusWidth: *v = 6144; break;
  case cudaDevAttrStreamPrioritiesSupported: case cudaDevAttrCanMapHostMemory: case cudaDevAttrManagedMemory:
  case cudaDevAttrHostRegisterSupported: *v = 1; break;
  case cudaDevAttrConcurrentKernels: case cudaDevAttrUnifiedAddressing: *v = 1; break;
  default: {
    char call[64];
    snprintf(call, sizeof call, "cudaDeviceGetAttribute(attribute %d)", (int)a);
    pps_emu_unsupported(call);
  }
  }
  return cudaSuccess;
}
cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  (void)flags;   /* scheduling and mapping flags change nothing here */
  return cudaSuccess;
}
cudaError_t cudaGetDeviceFlags(unsigned int *flags) {
  *flags = 0;
  return cudaSuccess;
}

/* ------------------------------------------------------------------------- */
/* memory                                                                      */

/* PPS_EMU_STATS=1: the allocation calls, printed at exit (a steady state makes none),
 * the operations queued on streams named COMPUTE2* (the second compute stream) and on
 * lane streams, and the cublasLtMatmul calls (fused GEMM epilogues) */
static unsigned long long n_malloc, n_free, n_hostalloc, n_freehost;
static void print_stats(void) {
  fprintf(stderr, "pps-emu: stats: cudaMalloc %llu, cudaFree %llu, cudaHostAlloc %llu, cudaFreeHost %llu, "
          "operations on COMPUTE2 streams %llu, operations on lane streams %llu, operations on data-parallel streams %llu (NCCL %llu), NCCL operations on tensor-parallel streams %llu, NCCL operations on pipeline-group streams %llu, NCCL operations on world collectives streams %llu, cublasLtMatmul %llu\n",
          __atomic_load_n(&n_malloc, __ATOMIC_RELAXED), __atomic_load_n(&n_free, __ATOMIC_RELAXED),
          __atomic_load_n(&n_hostalloc, __ATOMIC_RELAXED), __atomic_load_n(&n_freehost, __ATOMIC_RELAXED),
          __atomic_load_n(&n_compute2, __ATOMIC_RELAXED), __atomic_load_n(&n_lane, __ATOMIC_RELAXED),
          __atomic_load_n(&n_dp, __ATOMIC_RELAXED), __atomic_load_n(&n_dp_nccl, __ATOMIC_RELAXED),
          __atomic_load_n(&n_tp_nccl, __ATOMIC_RELAXED), __atomic_load_n(&n_pp_nccl, __ATOMIC_RELAXED),
          __atomic_load_n(&n_world_nccl, __ATOMIC_RELAXED),
          __atomic_load_n(&n_lt, __ATOMIC_RELAXED));
}
/* Not CUDA: the counts so far, for tests linked with the emulator. */
void pps_emu_alloc_counts(unsigned long long *mallocs, unsigned long long *frees) {
  *mallocs = __atomic_load_n(&n_malloc, __ATOMIC_RELAXED);
  *frees = __atomic_load_n(&n_free, __ATOMIC_RELAXED);
}
__attribute__((constructor)) static void stats_init(void) {
  const char *v = getenv("PPS_EMU_STATS");
  if (v && *v && strcmp(v, "0") != 0) atexit(print_stats);
}

static void *host_mem(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 256, n ? n : 1)) return NULL;
  memset(p, 0xA5, n);   /* garbage, as fresh device memory holds */
  return p;
}
cudaError_t cudaMalloc(void **p, size_t n) {
  cfg();
  if (!p) return last_err = cudaErrorInvalidValue;
  __atomic_add_fetch(&n_malloc, 1, __ATOMIC_RELAXED);
  if (!n) {   /* as on a GPU: success, no memory */
    *p = NULL;
    return cudaSuccess;
  }
  if (!(*p = host_mem(n))) return last_err = cudaErrorMemoryAllocation;
  alloc_add(*p, n, 0);
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
  if (!p) return cudaSuccess;
  __atomic_add_fetch(&n_free, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&G);
  host_sync_device(cur_dev);   /* cudaFree synchronises the device */
  pthread_mutex_unlock(&G);
  if (alloc_remove(p, 0)) return last_err = cudaErrorInvalidValue;
  free(p);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
  cfg();
  if (!p || (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)))
    return last_err = cudaErrorInvalidValue;
  __atomic_add_fetch(&n_hostalloc, 1, __ATOMIC_RELAXED);
  if (!n) {
    *p = NULL;
    return cudaSuccess;
  }
  if (!(*p = host_mem(n))) return last_err = cudaErrorMemoryAllocation;
  alloc_add(*p, n, 1);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }

/* Registered host memory: pinned memory the program allocated itself. Registering a
 * range that overlaps a registered one is cudaErrorHostMemoryAlreadyRegistered,
 * unregistering what is not registered cudaErrorHostMemoryNotRegistered (as on a GPU). */
cudaError_t cudaHostRegister(void *p, size_t n, unsigned int flags) {
  cfg();
  if (!p || !n || (flags & ~(unsigned)(cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory |
                                       cudaHostRegisterReadOnly)))
    return last_err = cudaErrorInvalidValue;
  pthread_mutex_lock(&D);
  int overlap = 0;
  for (int i = 0; i < nallocs && !overlap; i++)
    overlap = allocs[i]->base < (char *)p + n && (char *)p < allocs[i]->base + allocs[i]->size;
  pthread_mutex_unlock(&D);
  if (overlap) return last_err = cudaErrorHostMemoryAlreadyRegistered;
  alloc_add(p, n, 2);
  return cudaSuccess;
}
cudaError_t cudaHostUnregister(void *p) {
  pthread_mutex_lock(&G);
  host_sync_device(cur_dev);   /* no copy still reads it */
  pthread_mutex_unlock(&G);
  if (!p || alloc_remove(p, 2)) return last_err = cudaErrorHostMemoryNotRegistered;
  return cudaSuccess;
}
/* unified addressing: the device pointer of pinned or registered memory is the host's */
cudaError_t cudaHostGetDevicePointer(void **pd, void *p, unsigned int flags) {
  if (!pd || flags || kind_of(p) != 2) return last_err = cudaErrorInvalidValue;
  *pd = p;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
  if (!p) return cudaSuccess;
  __atomic_add_fetch(&n_freehost, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&G);
  host_sync_device(cur_dev);
  pthread_mutex_unlock(&G);
  if (alloc_remove(p, 1)) return last_err = cudaErrorInvalidValue;
  free(p);
  return cudaSuccess;
}

typedef struct copy_ctx { void *dst; const void *src; size_t n; void *owned; int val; } copy_ctx;
static void run_copy(void *c) {
  copy_ctx *x = c;
  if (x->n) memmove(x->dst, x->src, x->n);
}
static void run_set(void *c) {
  copy_ctx *x = c;
  if (x->n) memset(x->dst, x->val, x->n);
}
static void del_copy(void *c) {
  copy_ctx *x = c;
  free(x->owned);
  free(x);
}

static const char *kind_name(int k) { return k == 1 ? "device" : k == 2 ? "pinned" : "pageable"; }

/* Enqueues a copy; returns the record of its completion when want_rec (caller unrefs). */
static record *enqueue_copy(strm *s, void *dst, const void *src, size_t n, int snapshot, const char *call,
                            int want_rec) {
  copy_ctx *x = xcalloc(1, sizeof *x);
  x->dst = dst;
  x->src = src;
  x->n = n;
  if (snapshot) {
    x->owned = xmalloc(n);
    memcpy(x->owned, src, n);
    x->src = x->owned;
  }
  int kd = kind_of(dst), ks = kind_of(src);
  item *it = item_new(K_OP, NULL);
  snprintf(it->what, sizeof it->what, "%s of %zu bytes, %s to %s", call, n, kind_name(ks), kind_name(kd));
  it->fn = run_copy;
  it->ctx = x;
  it->del = del_copy;
  it->acc[0] = (emu_access){src, n, 0};
  it->acc[1] = (emu_access){dst, n, 1};
  it->nacc = snapshot ? 0 : 1;
  if (snapshot) it->acc[0] = it->acc[1];
  it->nacc = snapshot ? 1 : 2;
  record *r = NULL;
  push(s, it);
  if (want_rec) {
    r = rec_new(s->slot);
    r->refs = 2;
    item *ri = item_new(K_RECORD, "copy done");
    ri->rec = r;
    push_raw(s, ri);
  }
  return r;
}

static void host_wait_rec(record *r, const char *what, int join) {   /* under G; unrefs r */
  wait_flag(&r->done, what, NULL);
  if (join) vc_join(host_vc, r->vc, r->vc_n);
  rec_unref(r);
}

/* A copy's arguments as a GPU checks them: an undefined kind is
 * cudaErrorInvalidMemcpyDirection; the device side of the kind (the destination of
 * HostToDevice, the source of DeviceToHost, both of DeviceToDevice, and under Default
 * each pointer inside an allocation) must lie wholly inside one allocation the device
 * can address, else cudaErrorInvalidValue (a wild pointer, a range past the end, a
 * pageable buffer named as device memory). */
static cudaError_t copy_check(void *d, const void *s, size_t n, int k) {
  if (k < cudaMemcpyHostToHost || k > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  if (!n) return cudaSuccess;
  int dd = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice || (k == cudaMemcpyDefault && kind_of(d));
  int ds = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice || (k == cudaMemcpyDefault && kind_of(s));
  if ((dd && !dev_range_ok(d, n)) || (ds && !dev_range_ok(s, n))) return cudaErrorInvalidValue;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) {
  cfg();
  cudaError_t e = copy_check(d, s, n, (int)k);
  if (e != cudaSuccess) return last_err = e;
  if (!n) return cudaSuccess;
  int kd = kind_of(d), ks = kind_of(s);
  pthread_mutex_lock(&G);
  strm *q = S(st);
  if (kd == 0 && ks == 0) {   /* host to host: a plain synchronous copy */
    pthread_mutex_unlock(&G);
    if (n) memmove(d, s, n);
    return cudaSuccess;
  }
  /* pageable source: staged at the call; pageable destination: the call waits */
  record *r = enqueue_copy(q, d, s, n, ks == 0, "cudaMemcpyAsync", kd == 0);
  if (r) host_wait_rec(r, "a cudaMemcpyAsync into pageable memory", 1);
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) {
  cfg();
  cudaError_t e = copy_check(d, s, n, (int)k);
  if (e != cudaSuccess) return last_err = e;
  if (!n) return cudaSuccess;
  int kd = kind_of(d), ks = kind_of(s);
  if (kd == 0 && ks == 0) {
    if (n) memmove(d, s, n);
    return cudaSuccess;
  }
  pthread_mutex_lock(&G);
  strm *l = legacy(cur_dev);
  if (kd == 1 && ks == 0) {
    /* pageable to device: the call first waits for the earlier work of the legacy
     * stream (so for the blocking streams it waits for: as on an H200), then stages the
     * source; it may return before the copy lands, and the host learns nothing about its
     * completion */
    record *pre = rec_new(l->slot);
    pre->refs = 2;
    item *pi = item_new(K_RECORD, "the work before a pageable cudaMemcpy");
    pi->rec = pre;
    push(l, pi);
    host_wait_rec(pre, "the work before a pageable cudaMemcpy", 1);
    record *r = enqueue_copy(l, d, s, n, 1, "cudaMemcpy", 1);
    static unsigned long long coin;
    if (!coin) coin = seed_v * 0x2545F4914F6CDD1DULL + 7;
    if (rng_next(&coin) & 1) host_wait_rec(r, "a cudaMemcpy", 0);
    else rec_unref(r);
  } else if (kd == 1 && ks == 1) {
    enqueue_copy(l, d, s, n, 0, "cudaMemcpy", 0);   /* device to device: no host wait */
  } else {
    record *r = enqueue_copy(l, d, s, n, 0, "cudaMemcpy", 1);
    host_wait_rec(r, "a cudaMemcpy", 1);
  }
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st) {
  if (!n) return cudaSuccess;
  if (!dev_range_ok(p, n)) return last_err = cudaErrorInvalidValue;   /* wild, or past the end */
  copy_ctx *x = xcalloc(1, sizeof *x);
  x->dst = p;
  x->n = n;
  x->val = v;
  item *it = item_new(K_OP, NULL);
  snprintf(it->what, sizeof it->what, "cudaMemsetAsync of %zu bytes", n);
  it->fn = run_set;
  it->ctx = x;
  it->del = del_copy;
  it->acc[0] = (emu_access){p, n, 1};
  it->nacc = 1;
  pthread_mutex_lock(&G);
  push(S(st), it);
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, NULL); }

typedef struct malloc_ctx { void *p; } malloc_ctx;
static void run_free(void *c) {
  malloc_ctx *m = c;
  alloc_remove(m->p, 0);
  free(m->p);
}
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
  (void)s;
  return cudaMalloc(p, n);
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t st) {
  if (!p) return cudaSuccess;
  malloc_ctx *m = xcalloc(1, sizeof *m);
  m->p = p;
  item *it = item_new(K_OP, "cudaFreeAsync");
  it->fn = run_free;
  it->ctx = m;
  it->del = free;
  it->acc[0] = (emu_access){p, EMU_TO_END, 1};
  it->nacc = 1;
  pthread_mutex_lock(&G);
  push(S(st), it);
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}

/* A nominal capacity (PPS_EMU_MEM_MB, default 80 GiB) per emulated GPU, minus the bytes
 * cudaMalloc'ed on it; cudaMalloc itself is not limited by it. */
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
  size_t tot = emu_mem_total(), used = 0;
  pthread_mutex_lock(&D);
  for (int i = 0; i < nallocs; i++)
    if (!allocs[i]->host && allocs[i]->dev == cur_dev) used += allocs[i]->size;
  pthread_mutex_unlock(&D);
  *total = tot;
  *free_b = used < tot ? tot - used : 0;
  return cudaSuccess;
}

/* Device memory, pinned host memory (cudaHostAlloc/cudaMallocHost), or unregistered. */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
  memset(a, 0, sizeof *a);
  pthread_mutex_lock(&D);
  int i = find_alloc_idx(p);
  a->type = i < 0 ? cudaMemoryTypeUnregistered : allocs[i]->host ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  a->device = i < 0 ? -2 : allocs[i]->dev;
  pthread_mutex_unlock(&D);
  if (a->type == cudaMemoryTypeDevice) a->devicePointer = (void *)p;
  if (a->type == cudaMemoryTypeHost) a->hostPointer = a->devicePointer = (void *)p;   /* unified addressing */
  return cudaSuccess;
}

/* ------------------------------------------------------------------------- */
/* streams and events (API)                                                    */

/* Not CUDA: a program may name its streams for the emulator's messages (the CUDA
 * backend does through a weak reference; on a real GPU the symbol is absent). */
void pps_emu_name_stream(cudaStream_t st, const char *name) {
  pthread_mutex_lock(&G);
  strm *s = S(st);
  if (!s->legacy) snprintf(s->name, sizeof s->name, "%s", name);
  pthread_mutex_unlock(&G);
}

/* Priorities as on an H100/H200: least 0, greatest -5; a value out of the range is
 * clamped into it. */
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int prio) {
  if (!s || (flags & ~(unsigned)cudaStreamNonBlocking)) return last_err = cudaErrorInvalidValue;
  prio = prio > PRIO_LEAST ? PRIO_LEAST : prio < PRIO_GREATEST ? PRIO_GREATEST : prio;
  pthread_mutex_lock(&G);
  strm *n = stream_new(cur_dev, 0, (flags & cudaStreamNonBlocking) != 0, prio);
  pthread_mutex_unlock(&G);
  if (!n) return last_err = cudaErrorMemoryAllocation;
  *s = (cudaStream_t)n;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
  return cudaStreamCreateWithPriority(s, flags, 0);
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithPriority(s, 0, 0); }
cudaError_t cudaStreamGetPriority(cudaStream_t st, int *prio) {
  pthread_mutex_lock(&G);
  *prio = S(st)->prio;
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}
cudaError_t cudaStreamGetFlags(cudaStream_t st, unsigned int *flags) {
  pthread_mutex_lock(&G);
  *flags = S(st)->nonblocking ? cudaStreamNonBlocking : cudaStreamDefault;
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}
/* The host function runs on the stream's worker, in order after the stream's earlier
 * work (it must not call CUDA, as on a GPU). */
cudaError_t cudaLaunchHostFunc(cudaStream_t st, cudaHostFn_t fn, void *user) {
  item *it = item_new(K_OP, "cudaLaunchHostFunc");
  it->fn = fn;
  it->ctx = user;
  pthread_mutex_lock(&G);
  push(S(st), it);
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t st) {
  if (st == NULL || st == cudaStreamLegacy || st == cudaStreamPerThread) return last_err = cudaErrorInvalidResourceHandle;
  pthread_mutex_lock(&G);
  (void)S(st);   /* destroyed twice: stops the run */
  ((strm *)st)->quit = 1;   /* no more work: host syncs skip it from now on */
  push_raw((strm *)st, item_new(K_QUIT, "destroy"));   /* the worker finishes the queue, then frees */
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}
/* A synchronize of the legacy stream also waits for the blocking streams of its device
 * (whose work its next work would wait for; consistent with cudaStreamQuery below). */
static int legacy_group(const strm *l, const strm *o);
cudaError_t cudaStreamSynchronize(cudaStream_t st) {
  pthread_mutex_lock(&G);
  strm *s = S(st);
  host_sync_stream(s);
  if (s->legacy)
    for (int i = 0; i < vc_hi; i++)
      if (legacy_group(s, slots[i])) host_sync_stream(slots[i]);
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}
/* The legacy stream counts as busy while any blocking stream of its device is (as on an
 * H200: its next work would wait for them). */
static int legacy_group(const strm *l, const strm *o) {   /* under G: o synchronises with the legacy stream l */
  return o && o != l && !o->legacy && !o->nonblocking && !o->quit && o->dev == l->dev;
}
cudaError_t cudaStreamQuery(cudaStream_t st) {
  pthread_mutex_lock(&G);
  strm *s = S(st);
  int idle = s->ndone == s->nenq;
  if (s->legacy)
    for (int i = 0; i < vc_hi && idle; i++)
      if (legacy_group(s, slots[i])) idle = slots[i]->ndone == slots[i]->nenq;
  if (idle) {   /* joins the clocks at once */
    host_sync_stream(s);
    if (s->legacy)
      for (int i = 0; i < vc_hi; i++)
        if (legacy_group(s, slots[i])) host_sync_stream(slots[i]);
  }
  pthread_mutex_unlock(&G);
  return idle ? cudaSuccess : cudaErrorNotReady;   /* not recorded as the last error, as in CUDA */
}
cudaError_t cudaDeviceSynchronize(void) {
  pthread_mutex_lock(&G);
  host_sync_device(cur_dev);
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}

/* A destroyed event's struct is kept (marked dead), so that a later use of its handle,
 * undefined in CUDA, stops the run naming the call instead of reading freed memory. */
typedef struct fake_event { record *cur; unsigned flags; int dead; } fake_event;
static fake_event *EV_call(cudaEvent_t e, const char *call) {
  fake_event *f = (fake_event *)e;
  if (f && f->dead)
    emu_die(EXIT_UNSUPPORTED, "%s names event %p, which was destroyed: CUDA leaves that undefined", call, (void *)e);
  return f;
}
#define EV(e) EV_call((e), __func__)

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
  fake_event *f = xcalloc(1, sizeof *f);
  f->flags = flags;
  *e = (cudaEvent_t)f;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return last_err = cudaErrorInvalidResourceHandle;
  fake_event *f = EV(e);
  pthread_mutex_lock(&G);
  rec_unref(f->cur);
  f->cur = NULL;
  f->dead = 1;
  pthread_mutex_unlock(&G);
  keep_dead(f);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st) {
  if (!e) return last_err = cudaErrorInvalidResourceHandle;
  fake_event *f = EV(e);
  pthread_mutex_lock(&G);
  strm *s = S(st);
  record *r = rec_new(s->slot);
  r->refs = 2;
  item *it = item_new(K_RECORD, "cudaEventRecord");
  it->rec = r;
  push(s, it);
  rec_unref(f->cur);
  f->cur = r;
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t st, unsigned int flags) {
  (void)flags;
  return cudaEventRecord(e, st);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned int flags) {
  (void)flags;
  if (!e) return last_err = cudaErrorInvalidResourceHandle;
  fake_event *f = EV(e);
  pthread_mutex_lock(&G);
  if (f->cur) {   /* waiting for a never-recorded event is a no-op */
    item *it = item_new(K_WAIT, "cudaStreamWaitEvent");
    it->rec = f->cur;
    f->cur->refs++;
    push(S(st), it);
  }
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return last_err = cudaErrorInvalidResourceHandle;
  fake_event *f = EV(e);
  cudaError_t r = cudaSuccess;
  pthread_mutex_lock(&G);
  if (f->cur) {
    if (f->cur->done) vc_join(host_vc, f->cur->vc, f->cur->vc_n);
    else r = cudaErrorNotReady;
  }
  pthread_mutex_unlock(&G);
  return r;   /* cudaErrorNotReady is not recorded as the last error, as in CUDA */
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return last_err = cudaErrorInvalidResourceHandle;
  fake_event *f = EV(e);
  pthread_mutex_lock(&G);
  if (f->cur) {
    record *r = f->cur;
    r->refs++;
    host_wait_rec(r, "an event (cudaEventSynchronize)", 1);
  }
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  fake_event *x = EV(a), *y = EV(b);
  if (!x || !y || (x->flags & cudaEventDisableTiming) || (y->flags & cudaEventDisableTiming))
    return last_err = cudaErrorInvalidResourceHandle;
  cudaError_t r = cudaSuccess;
  pthread_mutex_lock(&G);
  if (!x->cur || !y->cur) r = cudaErrorInvalidResourceHandle;
  else if (!x->cur->done || !y->cur->done) r = cudaErrorNotReady;
  else *ms = (float)((y->cur->t - x->cur->t) * 1e3);
  pthread_mutex_unlock(&G);
  if (r != cudaSuccess && r != cudaErrorNotReady) last_err = r;
  return r;
}

/* ------------------------------------------------------------------------- */
/* kernel launches (cuda_emu.h)                                                */

/* A launch configuration the GPU refuses: an empty grid or block, more than 1024
 * threads per block, grid or block dimensions past the limits, more dynamic shared
 * memory than a block may use without opting in (48 KiB). CUDA 13 on an H200 answers
 * cudaErrorInvalidValue to each (not cudaErrorInvalidConfiguration), recorded as the
 * last error and cleared by cudaGetLastError (not sticky). */
static cudaError_t launch_check(dim3 g, dim3 b, size_t smem) {
  unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
  if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z || nt > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64 ||
      g.y > 65535 || g.z > 65535 || g.x > 2147483647u || smem > 49152)
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

int emu_launch(cudaStream_t st, const char *name, dim3 g, dim3 b, const emu_access *acc, int nacc,
               void (*run)(void *), void *ctx, void (*del)(void *)) {
  cudaError_t e = launch_check(g, b, 0);
  if (e != cudaSuccess) {
    last_err = e;
    del(ctx);
    return (int)e;
  }
  item *it = item_new(K_OP, NULL);
  snprintf(it->what, sizeof it->what, "kernel %s<<<(%u,%u,%u), (%u,%u,%u)>>>", name, g.x, g.y, g.z, b.x, b.y, b.z);
  it->fn = run;
  it->ctx = ctx;
  it->del = del;
  for (int i = 0; i < nacc && it->nacc < EMU_MAX_ACCESS; i++) it->acc[it->nacc++] = acc[i];
  pthread_mutex_lock(&G);
  push(S(st), it);
  pthread_mutex_unlock(&G);
  return 0;
}

/* Not CUDA: a program's own kernel, given to the emulator as a host function that does
 * what the whole grid does (tests/gpu/conformance.c, through a weak reference: the
 * symbol exists only here). `nargs` parameters of the sizes `argsize` are copied at the
 * launch, as CUDA does. */
#define MAX_UKERN 64
#define MAX_UARGS 16
typedef struct ukern {
  const void *func;
  char name[64];
  void (*host)(void **args);
  int nargs;
  size_t size[MAX_UARGS];
} ukern;
static ukern ukerns[MAX_UKERN];
static int nukerns;
void pps_emu_register_kernel(const void *func, const char *name, void (*host)(void **args), int nargs,
                             const size_t *argsize) {
  pthread_mutex_lock(&G);
  if (nukerns == MAX_UKERN || nargs < 0 || nargs > MAX_UARGS) emu_die(70, "pps_emu_register_kernel: too many kernels or parameters");
  ukern *k = &ukerns[nukerns++];
  k->func = func;
  snprintf(k->name, sizeof k->name, "%s", name);
  k->host = host;
  k->nargs = nargs;
  for (int i = 0; i < nargs; i++) k->size[i] = argsize[i];
  pthread_mutex_unlock(&G);
}
typedef struct ulaunch { void (*host)(void **); void *argv[MAX_UARGS]; char buf[]; } ulaunch;
static void run_ulaunch(void *c) {
  ulaunch *u = c;
  u->host(u->argv);
}

/* The configuration is checked as on a GPU (launch_check) before anything else; a valid
 * launch of a kernel the program did not register stops the run (exit 69, as
 * unsupported.c's launch stubs do). */
cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t st) {
  cfg();
  cudaError_t e = launch_check(g, b, smem);
  if (e != cudaSuccess) return last_err = e;
  const ukern *k = NULL;
  pthread_mutex_lock(&G);
  for (int i = 0; i < nukerns && !k; i++)
    if (ukerns[i].func == func) k = &ukerns[i];
  pthread_mutex_unlock(&G);
  if (!k) pps_emu_launch_refused("cudaLaunchKernel", func);
  size_t total = 0;
  for (int i = 0; i < k->nargs; i++) total += (k->size[i] + 15) & ~(size_t)15;
  ulaunch *u = xcalloc(1, sizeof *u + total);
  u->host = k->host;
  for (int i = 0, off = 0; i < k->nargs; i++) {
    u->argv[i] = u->buf + off;
    memcpy(u->buf + off, args[i], k->size[i]);
    off += (int)((k->size[i] + 15) & ~(size_t)15);
  }
  item *it = item_new(K_OP, NULL);
  snprintf(it->what, sizeof it->what, "kernel %s<<<(%u,%u,%u), (%u,%u,%u)>>>", k->name, g.x, g.y, g.z, b.x, b.y, b.z);
  it->fn = run_ulaunch;
  it->ctx = u;
  it->del = free;
  pthread_mutex_lock(&G);
  push(S(st), it);
  pthread_mutex_unlock(&G);
  return cudaSuccess;
}

/* ------------------------------------------------------------------------- */
/* cuBLAS                                                                      */

/* A NULL handle is CUBLAS_STATUS_NOT_INITIALIZED in every call, as in cuBLAS. */
typedef struct blas_h { cudaStream_t s; void *ws; size_t ws_bytes; int dead; } blas_h;
/* as for events: a destroyed handle is kept, and using it stops the run */
static blas_h *BH_call(cublasHandle_t h, const char *call) {
  blas_h *b = (blas_h *)h;
  if (b && b->dead)
    emu_die(EXIT_UNSUPPORTED, "%s names cuBLAS handle %p, which was destroyed: undefined in cuBLAS", call, (void *)h);
  return b;
}
#define BH(h) BH_call((h), __func__)
cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  *h = (cublasHandle_t)xcalloc(1, sizeof(blas_h));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  if (!BH(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  ((blas_h *)h)->dead = 1;
  keep_dead(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  if (!BH(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  ((blas_h *)h)->s = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t *s) {
  if (!BH(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!s) return CUBLAS_STATUS_INVALID_VALUE;
  *s = ((blas_h *)h)->s;
  return CUBLAS_STATUS_SUCCESS;
}
/* the emulated GEMMs need no workspace; the one given is only remembered */
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes) {
  if (!BH(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  ((blas_h *)h)->ws = ws;
  ((blas_h *)h)->ws_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t m) {
  if (!BH(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  return m == CUBLAS_POINTER_MODE_HOST ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}
/* the names and strings of cuBLAS 13 (the strings as libcublasLt.so.13 holds them) */
static const struct { cublasStatus_t s; const char *name, *str; } blas_text[] = {
  {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success"},
  {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"},
  {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"},
  {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "an unsupported value or parameter was passed to the function"},
  {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH",
   "the function requires an architectural feature absent from the device"},
  {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "an access to GPU memory space failed"},
  {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the function failed to launch on the GPU"},
  {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
  {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the requested functionality is not supported"},
  {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "the license check failed"},
};
const char *cublasGetStatusName(cublasStatus_t s) {
  for (size_t i = 0; i < sizeof blas_text / sizeof *blas_text; i++)
    if (blas_text[i].s == s) return blas_text[i].name;
  return "unrecognized status";
}
const char *cublasGetStatusString(cublasStatus_t s) {
  for (size_t i = 0; i < sizeof blas_text / sizeof *blas_text; i++)
    if (blas_text[i].s == s) return blas_text[i].str;
  return "unrecognized status";
}

static float ld_any(const void *p, cudaDataType t, size_t i) {
  if (t == CUDA_R_32F) return ((const float *)p)[i];
  uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static void st_any(void *p, cudaDataType t, size_t i, float v) {
  if (t == CUDA_R_32F) {
    ((float *)p)[i] = v;
    return;
  }
  uint32_t u;
  memcpy(&u, &v, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
}

typedef struct gemm_args {
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc, count;
  float al, be;
  const void *A, *B;
  void *C;
  cudaDataType at, bt, ct;
  long long sA, sB, sC;
} gemm_args;

/* Column-major C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C, batched. */
static void run_gemm(void *p) {
  const gemm_args *g = p;
  for (int b = 0; b < g->count; b++)
    for (int j = 0; j < g->n; j++)
      for (int i = 0; i < g->m; i++) {
        float acc = 0.0f;
        for (int l = 0; l < g->k; l++) {
          size_t ia = (size_t)(b * g->sA) +
                      (g->ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * g->lda : (size_t)l + (size_t)i * g->lda);
          size_t ib = (size_t)(b * g->sB) +
                      (g->tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * g->ldb : (size_t)j + (size_t)l * g->ldb);
          acc += ld_any(g->A, g->at, ia) * ld_any(g->B, g->bt, ib);
        }
        size_t ic = (size_t)(b * g->sC) + (size_t)i + (size_t)j * g->ldc;
        float v = g->al * acc + (g->be != 0.0f ? g->be * ld_any(g->C, g->ct, ic) : 0.0f);
        st_any(g->C, g->ct, ic, v);
      }
}

static size_t dsize(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }
/* bytes spanned by `count` column-major matrices rows x cols, leading dim ld, stride s */
static size_t span(int rows, int cols, int ld, long long s, int count, cudaDataType t) {
  if (rows <= 0 || cols <= 0 || count <= 0) return 0;
  size_t el = (size_t)(count - 1) * (size_t)(s > 0 ? s : 0) + (size_t)(cols - 1) * (size_t)ld + (size_t)rows;
  return el * dsize(t);
}

static cublasStatus_t gemm_enqueue(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *A, cudaDataType at, int lda, long long sA,
                                   const void *B, cudaDataType bt, int ldb, long long sB, const void *beta, void *C,
                                   cudaDataType ct, int ldc, long long sC, int count, cublasComputeType_t ctype,
                                   const char *call) {
  if (!BH_call(h, call)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (ctype != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if ((at != CUDA_R_16BF && at != CUDA_R_32F) || at != bt) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (ct != CUDA_R_16BF && ct != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (at == CUDA_R_32F && ct != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m < 0 || n < 0 || k < 0 || count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1))) return CUBLAS_STATUS_INVALID_VALUE;
  if (ldb < (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1))) return CUBLAS_STATUS_INVALID_VALUE;
  if (ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
  gemm_args *g = xcalloc(1, sizeof *g);
  *g = (gemm_args){ta, tb, m, n, k, lda, ldb, ldc, count, *(const float *)alpha, *(const float *)beta,
                   A, B, C, at, bt, ct, sA, sB, sC};
  item *it = item_new(K_OP, NULL);
  snprintf(it->what, sizeof it->what, "%s m=%d n=%d k=%d batch=%d", call, m, n, k, count);
  it->fn = run_gemm;
  it->ctx = g;
  it->del = free;
  it->acc[0] = (emu_access){A, ta == CUBLAS_OP_N ? span(m, k, lda, sA, count, at) : span(k, m, lda, sA, count, at), 0};
  it->acc[1] = (emu_access){B, tb == CUBLAS_OP_N ? span(k, n, ldb, sB, count, bt) : span(n, k, ldb, sB, count, bt), 0};
  it->acc[2] = (emu_access){C, span(m, n, ldc, sC, count, ct), 1};
  it->nacc = 3;
  pthread_mutex_lock(&G);
  push(S(((blas_h *)h)->s), it);
  pthread_mutex_unlock(&G);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t ctype,
                            cublasGemmAlgo_t algo) {
  (void)algo;
  return gemm_enqueue(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, ctype,
                      "cublasGemmEx");
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long int sA, const void *B, cudaDataType bt, int ldb, long long int sB,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long int sC,
                                          int count, cublasComputeType_t ctype, cublasGemmAlgo_t algo) {
  (void)algo;
  return gemm_enqueue(h, ta, tb, m, n, k, alpha, A, at, lda, sA, B, bt, ldb, sB, beta, C, ct, ldc, sC, count, ctype,
                      "cublasGemmStridedBatchedEx");
}

#include "fake_cublaslt.inc"

#ifdef HAVE_NCCL
#include "fake_nccl.inc"
#else
static void group_exec(strm *s, struct nccl_group *g) {
  (void)s;
  (void)g;
}
static void group_unref(struct nccl_group *g) { (void)g; }
#endif
