/* cuda_backend.c: the CUDA compute backend of libppsrt (backend.h on one GPU).
 *
 * What it does:
 *  - memory: a caching device allocator and a pinned host pool (cudaHostAlloc). A freed
 *    block is not handed out again until the work queued before its free has finished:
 *    free records an ordering event on each of the backend's six streams; a block whose
 *    events are all complete is reused at once; one still busy on some of them is
 *    reused after every other stream is made to wait for those events
 *    (cudaStreamWaitEvent: no host wait); a block an outside stream still uses
 *    (record-stream: the NCCL transport's sends) is passed over; otherwise cudaMalloc.
 *    When cudaMalloc fails the allocation fails with the bytes in use, reserved and
 *    cached (the cache is NOT drained there: cudaFree synchronises the device, which can
 *    wait for an NCCL operation whose peer waits for this rank); free blocks are
 *    released with cudaFree only between iterations (trim), once every rank is past
 *    the iteration's communication. The bytes requested through alloc, and the scratch
 *    workspaces, are counted (mem_stats: current and peak; the runtime reports the peak
 *    as the device's whole memory, docs/runtime.md);
 *  - streams: COMPUTE, SEND, RECV, D2H, H2D are non-blocking CUDA streams (SEND/RECV at
 *    the highest priority so communication kernels are scheduled promptly), plus a
 *    second compute stream for the second pass of an overlapped F&B pair (overlap),
 *    and a collective-lane stream on which the lane thread's kernels run (coll_lane.c:
 *    after PPSRT_OVERLAP_LANE, COMPUTE names it on that thread);
 *    ordering goes through cudaEvents created with cudaEventDisableTiming. Timing events are
 *    added lazily: the first event_elapsed call switches the backend to recording a
 *    second, timed event at each event_record (that call and calls on events recorded
 *    before return -1, "unknown", as backend.h allows);
 *  - host waits (event_sync, stream_sync, downloads) poll cudaEventQuery, calling the
 *    transport's watchdog (NCCL asynchronous errors, aborts) and honouring its timeout:
 *    nothing in the steady state blocks in cudaEventSynchronize or syncs the device;
 *  - matrix products on tensor cores: cublasGemmEx / cublasGemmStridedBatchedEx with
 *    CUBLAS_COMPUTE_32F, bf16 operands and a bf16 or F32 result, row-major through the
 *    transpose identity C^T = op(B)^T op(A)^T. Mixed operand types go through an F32
 *    copy (slow path, for completeness); with PPSRT_CUDA_EPILOGUE, gemm_ep runs a GEMM
 *    and its bias / bias + GeLU / GeLU-gradient / bias-gradient epilogue as one
 *    cublasLtMatmul (gemm_lt.c; off by default until measured on a GPU, docs/gpu.md);
 *  - attention (grouped query heads, causal): cuBLAS batched GEMMs for Q K^T, P V and
 *    the backward products, with the softmax, probability and dS pieces as kernels
 *    (kernels.cu). Chosen over a hand-written FlashAttention-2 kernel because it is
 *    right the first time on tensor cores without a GPU at hand to validate a tiled
 *    kernel. Query rows go in chunks that skip most of the masked triangle; the F32
 *    score workspace is O(T x chunk) per head, heads grouped to fit
 *    PPSRT_CUDA_ATTN_WS_MB (default 2048). See docs/gpu.md;
 *  - every other kernel of backend.h in kernels.cu, mirroring cpu_kernels.c.
 *
 * What it does not: no multi-GPU work (one backend = one GPU; transports move data),
 * no CUDA graphs, no FP8, no device-wide synchronisation outside creation, destroy and
 * the between-iterations trim. Errors are returned as PPSRT_E* codes with a message (rank,
 * host, GPU, file, line, the library's message, a hint); nothing here exits. */
#include "config.h"
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "cuda_impl.h"
#ifdef HAVE_CUDNN_FE
#include "attn_cudnn.h"
#endif

/* ------------------------------------------------------------------------- */
/* state                                                                       */

/* The backend's CUDA streams: the five of backend.h plus a second compute stream on
 * which the second pass of an overlapped F&B pair runs (cu_overlap). Only the backend
 * sees it: a public stream id is mapped by sid(). */
#define NST (PPSRT_NSTREAMS + 2)
#define ST_COMPUTE2 PPSRT_NSTREAMS
#define ST_LANE (PPSRT_NSTREAMS + 1)   /* the collective lane's (coll_lane.c, PPSRT_OVERLAP_LANE) */

struct ppsrt_event {
  cudaEvent_t ev;    /* ordering (timing disabled) */
  cudaEvent_t tev;   /* timed twin, created when the backend starts timing */
  int timed;         /* the last record also recorded tev */
};

typedef struct block {
  void *p;
  size_t size;        /* bytes reserved */
  size_t req;         /* bytes requested by the current owner (counted when counted) */
  int in_use, counted;
  unsigned pending;   /* bit s: ev[s] recorded at free time, not yet seen complete */
  /* bit s (k): ev[s] (xev[k]) seen complete since it was recorded, by whichever thread
   * looked (refresh); handing the block out queries them again on the taking thread,
   * complete at once on a GPU, and how the emulator's per-thread clocks learn the
   * ordering that another thread's query (the collective lane's allocations) gave */
  unsigned seen, xseen;
  cudaEvent_t ev[NST];
  /* uses on streams other than the backend's five (the NCCL transport's per-peer
   * streams), recorded when the use is queued, as PyTorch's record_stream */
  unsigned xpending;
  cudaEvent_t xev[PPSRT_CUDA_NXEV];
  int idle_trims;     /* trims (iteration ends) since it was last handed out */
} block;

typedef struct pool {
  block *v;
  int n, cap;
  int host;           /* 1: pinned host memory */
  size_t reserved;
} pool;

typedef struct cuda_impl {
  int dev, rank;
  cudaStream_t st[NST];
  cudaEvent_t sync_ev[NST];
  cublasHandle_t blas, blas2, blas3;  /* blas2: the second compute stream's, blas3: the lane's (own workspaces) */
  cudaEvent_t pair_ev;         /* fork and join of an overlapped pair */
  pthread_mutex_t mu;          /* pools and counters (the transport may free from another thread) */
  pool dpool, hpool;
  size_t cur, peak;            /* counted device bytes */
  /* scratch for attention and the gemm slow path, used by one stream at a time: [0]
   * for the backend's streams, [1] for the second compute stream, so the two passes of
   * an overlapped pair do not wait for each other's scratch */
  void *ws[3];            /* [2]: the collective lane's */
  size_t ws_bytes[3];
  int ws_stream[3];
  cudaEvent_t ws_ev[3];
  size_t attn_ws_cap;
  /* attention path: ATTN_CUBLAS, or ATTN_CUDNN (fused, attn_cudnn.cpp) when dnn loaded;
   * attn_strict: PPSRT_CUDA_ATTN=cudnn asked for it (a shape cuDNN refuses is an error,
   * not a fallback) */
  int attn_path, attn_strict;
  long attn_fused, attn_unfused;   /* calls run fused / on the cuBLAS path (tests, benches) */
  void *dnn;             /* ppsrt_cudnn * when built with the cuDNN frontend */
  /* fused GEMM epilogues (PPSRT_CUDA_EPILOGUE, gemm_lt.c): PPSRT_EP_* bits, calls run
   * fused / fallen back to the unfused kernels */
  unsigned ep_mask;
  ppsrt_lt *lt;
  long ep_fused, ep_unfused;
  int timing;
  /* set by the transport (ppsrt_cuda_attach) */
  double timeout_s;
  ppsrt_cuda_watch_fn watch;
  ppsrt_cuda_timeout_fn on_timeout;
  void *watch_ctx;
} cuda_impl;

static cuda_impl *IM(ppsrt_backend *b) { return (cuda_impl *)b->impl; }

/* ------------------------------------------------------------------------- */
/* errors                                                                      */

static char host_name[256];
static void host_init(void) {
  if (gethostname(host_name, sizeof host_name - 1) != 0) snprintf(host_name, sizeof host_name, "unknown-host");
}

const char *ppsrt_cuda_hostname(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, host_init);
  return host_name;
}

static void where(ppsrt_backend *b, char *buf, size_t n) {
  if (b && b->impl && IM(b)->rank >= 0)
    snprintf(buf, n, "host %s, GPU %d, rank %d", ppsrt_cuda_hostname(), IM(b)->dev, IM(b)->rank);
  else if (b && b->impl)
    snprintf(buf, n, "host %s, GPU %d", ppsrt_cuda_hostname(), IM(b)->dev);
  else
    snprintf(buf, n, "host %s", ppsrt_cuda_hostname());
}

int ppsrt_cuda_fail_cuda(ppsrt_backend *b, int err, const char *call, const char *file, int line) {
  cudaError_t e = (cudaError_t)err;
  char w[320];
  where(b, w, sizeof w);
  const char *hint = "rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing call";
  int code = PPSRT_E_BACKEND;
  switch (e) {
  case cudaErrorMemoryAllocation:
    hint = "the GPU is out of memory: lower --micro-batch or --seq, offload more activations, or put fewer ranks on this GPU";
    code = PPSRT_E_NOMEM;
    break;
  case cudaErrorNoKernelImageForDevice:
  case cudaErrorInvalidDeviceFunction:
    hint = "this GPU's architecture is not in the build: reconfigure with NVCCFLAGS='-O3 -gencode arch=compute_XY,code=sm_XY' for your GPU (nvidia-smi --query-gpu=compute_cap --format=csv) and rebuild";
    break;
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
  case cudaErrorInvalidDevice:
    hint = "check nvidia-smi, the driver version and CUDA_VISIBLE_DEVICES; or run with --backend cpu";
    break;
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorMisalignedAddress:
    hint = "a kernel faulted and the CUDA context is lost: rerun under compute-sanitizer to find it";
    break;
  default: break;
  }
  /* Clear a non-sticky error so the next call does not report it again. */
  (void)cudaGetLastError();
  return ppsrt_set_error(code, file, line, "cuda: %s failed (%s): %s: %s\nhint: %s", call, w,
                         cudaGetErrorName(e), cudaGetErrorString(e), hint);
}

int ppsrt_cuda_fail_cublas(ppsrt_backend *b, int status, const char *call, const char *file, int line) {
  cublasStatus_t s = (cublasStatus_t)status;
  char w[320];
  where(b, w, sizeof w);
  const char *hint = "check the matrix sizes and leading dimensions passed to gemm";
  int code = PPSRT_E_BACKEND;
  switch (s) {
  case CUBLAS_STATUS_ALLOC_FAILED:
    hint = "cuBLAS could not allocate its workspace: the GPU is out of memory";
    code = PPSRT_E_NOMEM;
    break;
  case CUBLAS_STATUS_ARCH_MISMATCH:
  case CUBLAS_STATUS_NOT_SUPPORTED:
    hint = "bf16 tensor-core GEMMs need compute capability 8.0 (A100) or newer";
    break;
  case CUBLAS_STATUS_EXECUTION_FAILED:
    hint = "a GEMM kernel failed: an earlier kernel may have faulted; rerun under compute-sanitizer";
    break;
  case CUBLAS_STATUS_NOT_INITIALIZED:
    hint = "cuBLAS could not initialise: check the driver and the GPU (nvidia-smi)";
    break;
  default: break;
  }
  return ppsrt_set_error(code, file, line, "cublas: %s failed (%s): %s: %s\nhint: %s", call, w,
                         cublasGetStatusName(s), cublasGetStatusString(s), hint);
}

/* Makes the backend's GPU current on the calling thread. cudaGetDevice reads the
 * runtime's thread state (no driver call); the transport and NCCL may switch devices
 * behind our back, so nothing is cached here. */
static int use_dev(ppsrt_backend *b) {
  int d = IM(b)->dev, cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == d) return PPSRT_OK;
  CUDA_CHECK(b, cudaSetDevice(d));
  return PPSRT_OK;
}

#define USE(b)                      \
  do {                              \
    int rc_ = use_dev(b);           \
    if (rc_) return rc_;            \
  } while (0)

static int bad_stream(int s) { return s < 0 || s >= PPSRT_NSTREAMS; }

/* The backend whose COMPUTE means the second compute stream on this thread (between
 * PPSRT_OVERLAP_SECOND and PPSRT_OVERLAP_JOIN), or NULL. Per thread: another thread
 * using the same backend (a transport's helper) keeps the compute stream. */
static __thread cuda_impl *tl_second;
/* The backend whose COMPUTE means the collective lane's stream on this thread (the lane
 * thread of coll_lane.c, after PPSRT_OVERLAP_LANE), or NULL. */
static __thread cuda_impl *tl_lane;

/* The internal stream index of public stream id s (valid). */
static int sid(ppsrt_backend *b, int s) {
  if (s != PPSRT_STREAM_COMPUTE) return s;
  return tl_second == IM(b) ? ST_COMPUTE2 : tl_lane == IM(b) ? ST_LANE : s;
}

#define STREAM(b, s, var)                                                             \
  cudaStream_t var;                                                                   \
  do {                                                                                \
    if (bad_stream(s)) return PPSRT_FAIL(PPSRT_E_USAGE, "cuda: bad stream id %d", (s)); \
    var = IM(b)->st[sid(b, s)];                                                       \
  } while (0)

cudaStream_t ppsrt_cuda_stream(ppsrt_backend *b, int stream) {
  if (bad_stream(stream)) {
    PPSRT_FAIL(PPSRT_E_USAGE, "cuda: bad stream id %d", stream);
    return NULL;
  }
  return IM(b)->st[sid(b, stream)];
}

cudaEvent_t ppsrt_cuda_event(ppsrt_event *e) { return e->ev; }
int ppsrt_cuda_device(ppsrt_backend *b) { return IM(b)->dev; }

/* Defined only by the emulator (tests/gpu/emu): names a stream in its race reports. */
extern void pps_emu_name_stream(cudaStream_t s, const char *name) __attribute__((weak));

static void name_streams(ppsrt_backend *b) {
  static const char *names[NST] = {"COMPUTE", "SEND", "RECV", "D2H", "H2D", "DP", "COMPUTE2", "LANE"};
  cuda_impl *im = IM(b);
  if (!pps_emu_name_stream) return;
  for (int s = 0; s < NST; s++) {
    char nm[64];
    if (im->rank >= 0) snprintf(nm, sizeof nm, "%s stream of rank %d (GPU %d)", names[s], im->rank, im->dev);
    else snprintf(nm, sizeof nm, "%s stream (GPU %d)", names[s], im->dev);
    if (im->st[s]) pps_emu_name_stream(im->st[s], nm);
  }
}

void ppsrt_cuda_attach(ppsrt_backend *b, int rank, double timeout_s, ppsrt_cuda_watch_fn watch,
                       ppsrt_cuda_timeout_fn on_timeout, void *ctx) {
  cuda_impl *im = IM(b);
  im->rank = rank;
  im->timeout_s = timeout_s;
  im->watch = watch;
  im->on_timeout = on_timeout;
  im->watch_ctx = ctx;
  name_streams(b);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Polls ev until complete: yields for the first ~50 us, then sleeps 20 us between
 * queries; every millisecond asks the watchdog; past the timeout reports `what`. */
int ppsrt_cuda_wait(ppsrt_backend *b, cudaEvent_t ev, const char *what) {
  cudaError_t e = cudaEventQuery(ev);
  if (e == cudaSuccess) return PPSRT_OK;
  if (e != cudaErrorNotReady) CUDA_CHECK(b, e);
  cuda_impl *im = IM(b);
  double t0 = now_s(), last_watch = t0;
  for (int spins = 0;; spins++) {
    e = cudaEventQuery(ev);
    if (e == cudaSuccess) return PPSRT_OK;
    if (e != cudaErrorNotReady) CUDA_CHECK(b, e);
    double t = now_s();
    if (im->watch && t - last_watch > 1e-3) {
      last_watch = t;
      int rc = im->watch(im->watch_ctx, im->rank);
      if (rc) return rc;
    }
    if (im->timeout_s > 0 && t - t0 > im->timeout_s) {
      char w[320];
      where(b, w, sizeof w);
      if (im->on_timeout) im->on_timeout(im->watch_ctx, im->rank, what);
      return PPSRT_FAIL(PPSRT_E_TIMEOUT,
                        "cuda: waited %.1f s for %s (%s) without completion\n"
                        "hint: a peer rank may have died or the schedule may deadlock under NCCL's rendezvous "
                        "sends; raise --timeout if the step is just slow",
                        t - t0, what, w);
    }
    if (spins < 200) {
      sched_yield();
    } else {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    }
  }
}

/* ------------------------------------------------------------------------- */
/* memory pools                                                                */

static size_t round_size(size_t bytes) {
  if (bytes < 512) return 512;
  if (bytes < ((size_t)1 << 20)) return (bytes + 511) & ~(size_t)511;
  return (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);   /* 1 MiB granules */
}

#define ALL_STREAMS ((1u << NST) - 1u)

/* Refreshes blk->pending / xpending by querying its events (no waiting). */
static void refresh(block *blk) {
  for (int k = 0; k < PPSRT_CUDA_NXEV; k++)
    if ((blk->xpending >> k) & 1u) {
      cudaError_t e = cudaEventQuery(blk->xev[k]);
      if (e == cudaSuccess) { blk->xpending &= ~(1u << k); blk->xseen |= 1u << k; }
      else if (e != cudaErrorNotReady) (void)cudaGetLastError();
    }
  for (int s = 0; s < NST; s++)
    if ((blk->pending >> s) & 1u) {
      cudaError_t e = cudaEventQuery(blk->ev[s]);
      if (e == cudaSuccess) { blk->pending &= ~(1u << s); blk->seen |= 1u << s; }
      else if (e != cudaErrorNotReady) (void)cudaGetLastError();   /* reported by the next checked call */
    }
}

static int raw_alloc(pool *pl, size_t size, void **p) {
  cudaError_t e = pl->host ? cudaHostAlloc(p, size, cudaHostAllocPortable) : cudaMalloc(p, size);
  return (int)e;
}

static void raw_free(pool *pl, void *p) {
  if (pl->host) (void)cudaFreeHost(p);
  else (void)cudaFree(p);
}

/* Hands out a block of at least `bytes`. stream >= 0: the caller uses it only on that
 * stream, which is made to wait for the block's pending events; stream < 0: any stream
 * of the backend may use it (see the file comment). Called with im->mu held. */
static int pool_get(ppsrt_backend *b, pool *pl, size_t bytes, int counted, int stream, void **out) {
  cuda_impl *im = IM(b);
  size_t want = round_size(bytes);
  int best = -1, best_busy = -1;
  for (int i = 0; i < pl->n; i++) {
    block *blk = &pl->v[i];
    if (blk->in_use || blk->size < want || blk->size > 2 * want) continue;
    refresh(blk);
    if (stream >= 0 || (blk->pending == 0 && blk->xpending == 0)) {
      if (best < 0 || blk->size < pl->v[best].size) best = i;
    } else if (!blk->xpending && !pl->host && tl_lane != im) {   /* busy on the backend's streams only: they wait */
      if (best_busy < 0 || blk->size < pl->v[best_busy].size) best_busy = i;
    }
  }
  if (best < 0 && best_busy >= 0) best = best_busy;
  if (best >= 0) {
    block *blk = &pl->v[best];
    for (int k = 0; k < PPSRT_CUDA_NXEV; k++)   /* stream >= 0 only: others need xpending == 0 */
      if ((blk->xpending >> k) & 1u) CUDA_CHECK(b, cudaStreamWaitEvent(im->st[stream], blk->xev[k], 0));
    blk->xpending = 0;
    for (int s = 0; s < NST; s++) {
      if (!((blk->pending >> s) & 1u)) continue;
      if (stream >= 0) {
        CUDA_CHECK(b, cudaStreamWaitEvent(im->st[stream], blk->ev[s], 0));
      } else {
        for (int t = 0; t < NST; t++)   /* (not the lane stream: see free_any) */
          if (t != s && t != ST_LANE) CUDA_CHECK(b, cudaStreamWaitEvent(im->st[t], blk->ev[s], 0));
      }
    }
    for (int s = 0; s < NST; s++)   /* complete: the taking thread's own query (see seen) */
      if ((blk->seen >> s) & 1u) (void)cudaEventQuery(blk->ev[s]);
    for (int k = 0; k < PPSRT_CUDA_NXEV; k++)
      if ((blk->xseen >> k) & 1u) (void)cudaEventQuery(blk->xev[k]);
    blk->seen = blk->xseen = 0;
    blk->pending = 0;
    blk->in_use = 1;
    blk->idle_trims = 0;
    blk->req = bytes;
    blk->counted = counted;
    *out = blk->p;
    return PPSRT_OK;
  }
  if (pl->n == pl->cap) {
    int cap = pl->cap ? 2 * pl->cap : 64;
    block *v = realloc(pl->v, (size_t)cap * sizeof *v);
    if (!v) return PPSRT_FAIL(PPSRT_E_NOMEM, "cuda: out of host memory for the allocator's table");
    pl->v = v;
    pl->cap = cap;
  }
  void *p = NULL;
  /* Out of memory is not recovered here by draining the cache: cudaFree synchronises
   * the device, which in the middle of an iteration can wait for an NCCL operation
   * whose peer waits for this rank (a hang). The cache is trimmed between iterations
   * (cu_trim), so what it holds is about one iteration's working set. */
  int e = raw_alloc(pl, want, &p);
  if (e != cudaSuccess) {
    char w[320];
    where(b, w, sizeof w);
    (void)cudaGetLastError();
    size_t cached = 0;
    for (int i = 0; i < pl->n; i++)
      if (!pl->v[i].in_use) cached += pl->v[i].size;
    return ppsrt_set_error(e == cudaErrorMemoryAllocation ? PPSRT_E_NOMEM : PPSRT_E_BACKEND, __FILE__, __LINE__,
                           "cuda: cannot allocate %zu bytes of %s memory (%s): %s; %zu bytes counted in use, "
                           "%zu reserved, %zu of them cached in free blocks (released between iterations only)\n"
                           "hint: lower --micro-batch or --seq, or offload more activations",
                           bytes, pl->host ? "pinned host" : "device", w, cudaGetErrorString((cudaError_t)e),
                           im->cur, pl->reserved, cached);
  }
  block *blk = &pl->v[pl->n++];
  memset(blk, 0, sizeof *blk);
  blk->p = p;
  blk->size = want;
  blk->req = bytes;
  blk->in_use = 1;
  blk->counted = counted;
  pl->reserved += want;
  *out = p;
  return PPSRT_OK;
}

/* Returns a block; its reuse waits for the work queued so far on the streams named in
 * `mask` (all five for user memory, the one scratch stream for the workspace).
 * Returns 1, recording nothing, when p is not a block of this pool. */
static int pool_put(ppsrt_backend *b, pool *pl, void *p, unsigned mask) {
  cuda_impl *im = IM(b);
  for (int i = 0; i < pl->n; i++) {
    block *blk = &pl->v[i];
    if (blk->p != p) continue;
    if (!blk->in_use) return PPSRT_FAIL(PPSRT_E_USAGE, "cuda: double free of %p", p);
    for (int s = 0; s < NST; s++) {
      if (!((mask >> s) & 1u)) continue;
      if (!blk->ev[s]) CUDA_CHECK(b, cudaEventCreateWithFlags(&blk->ev[s], cudaEventDisableTiming));
      CUDA_CHECK(b, cudaEventRecord(blk->ev[s], im->st[s]));
      blk->pending |= 1u << s;
      blk->seen &= ~(1u << s);
    }
    if (blk->counted) im->cur -= blk->req;
    blk->in_use = 0;
    return PPSRT_OK;
  }
  return 1;
}

/* Live CUDA backends of the process. A buffer may be freed through another rank's
 * backend than the one that allocated it (a transport passing a message buffer from
 * sender to receiver); free then returns it to its owner, whose count it was in. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static ppsrt_backend **reg;
static int nreg, capreg;

static void reg_add(ppsrt_backend *b) {
  pthread_mutex_lock(&reg_mu);
  if (nreg == capreg) {
    int cap = capreg ? 2 * capreg : 16;
    ppsrt_backend **v = realloc(reg, (size_t)cap * sizeof *v);
    if (v) {
      reg = v;
      capreg = cap;
    }
  }
  if (nreg < capreg) reg[nreg++] = b;
  pthread_mutex_unlock(&reg_mu);
}

static void reg_remove(ppsrt_backend *b) {
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < nreg; i++)
    if (reg[i] == b) {
      reg[i] = reg[--nreg];
      break;
    }
  if (!nreg) {
    free(reg);
    reg = NULL;
    capreg = 0;
  }
  pthread_mutex_unlock(&reg_mu);
}

/* Frees p into b's pool of the given kind (0 device, 1 host), or into the pool of the
 * backend that allocated it. */
static int record_use_in(ppsrt_backend *o, void *p, cudaStream_t s, int *found);
/* The collective lane's stream (coll_lane.c) never waits for the allocator and the
 * allocator never makes a stream wait for it: such a wait would tie the lane's NCCL
 * collectives to unrelated point-to-point traffic through stream order (a cycle across
 * ranks). So a free by the device's thread records no event on the lane stream (what
 * the lane did with a block the device frees is ordered into the compute stream by the
 * consumer's or the drain's wait for the lane), a free by the lane's thread records the
 * lane stream's use as an outside use (as the NCCL transport's sends: the block is
 * passed over until that work is done, never waited for), an allocation on the lane's
 * thread takes only an idle block, and a block handed out makes every stream but the
 * lane's wait (the lane gets it only through the compute stream, after event in). */
static void free_any(ppsrt_backend *b, void *p, int host) {
  cuda_impl *im = IM(b);
  unsigned mask = ALL_STREAMS & ~(1u << ST_LANE);
  pthread_mutex_lock(&im->mu);
  if (tl_lane == im && !host) {
    int found = 0;
    if (record_use_in(b, p, im->st[ST_LANE], &found)) (void)0;   /* an error is recorded */
    if (found) mask = 0;
  }
  int rc = pool_put(b, host ? &im->hpool : &im->dpool, p, mask);
  pthread_mutex_unlock(&im->mu);
  if (rc <= 0) return;   /* freed, or an error already recorded */
  int found = 0;
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < nreg && !found; i++) {
    ppsrt_backend *o = reg[i];
    if (o == b || use_dev(o)) continue;
    cuda_impl *oi = IM(o);
    pthread_mutex_lock(&oi->mu);
    found = pool_put(o, host ? &oi->hpool : &oi->dpool, p, ALL_STREAMS) <= 0;
    pthread_mutex_unlock(&oi->mu);
  }
  pthread_mutex_unlock(&reg_mu);
  (void)use_dev(b);
  if (!found) PPSRT_FAIL(PPSRT_E_USAGE, "cuda: free of %p, which no CUDA backend of this process allocated", p);
}

/* Records a use of block p (of b's device pool, or another live backend's) queued on
 * stream s, which is not one of the backend's: its reuse waits for that work too. */
static int record_use_in(ppsrt_backend *o, void *p, cudaStream_t s, int *found) {
  cuda_impl *im = IM(o);
  pool *pl = &im->dpool;
  for (int i = 0; i < pl->n; i++) {
    block *blk = &pl->v[i];
    if (blk->p != p) continue;
    *found = 1;
    refresh(blk);
    int k = 0;
    while (k < PPSRT_CUDA_NXEV && ((blk->xpending >> k) & 1u)) k++;
    if (k == PPSRT_CUDA_NXEV) {   /* every slot busy: wait for the oldest (rare) */
      int rc = ppsrt_cuda_wait(o, blk->xev[0], "an earlier use of a buffer");
      if (rc) return rc;
      k = 0;
    }
    if (!blk->xev[k]) CUDA_CHECK(o, cudaEventCreateWithFlags(&blk->xev[k], cudaEventDisableTiming));
    CUDA_CHECK(o, cudaEventRecord(blk->xev[k], s));
    blk->xpending |= 1u << k;
    blk->xseen &= ~(1u << k);
    return PPSRT_OK;
  }
  return PPSRT_OK;
}

int ppsrt_cuda_record_use(ppsrt_backend *b, void *p, cudaStream_t s) {
  int found = 0;
  cuda_impl *im = IM(b);
  pthread_mutex_lock(&im->mu);
  int rc = record_use_in(b, p, s, &found);
  pthread_mutex_unlock(&im->mu);
  if (rc || found) return rc;
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < nreg && !found && !rc; i++) {
    ppsrt_backend *o = reg[i];
    if (o == b) continue;
    cuda_impl *oi = IM(o);
    pthread_mutex_lock(&oi->mu);
    rc = record_use_in(o, p, s, &found);
    pthread_mutex_unlock(&oi->mu);
  }
  pthread_mutex_unlock(&reg_mu);
  if (!rc && !found)
    return PPSRT_FAIL(PPSRT_E_USAGE, "cuda: %p is not a buffer of any CUDA backend of this process", p);
  return rc;
}

/* Between iterations (backend.h): releases free blocks that no allocation took in the
 * last PPSRT_CUDA_TRIM_AFTER iterations and whose last uses are complete. */
#define PPSRT_CUDA_TRIM_AFTER 3
static int cu_trim(ppsrt_backend *b) {
  USE(b);
  cuda_impl *im = IM(b);
  pthread_mutex_lock(&im->mu);
  pool *pools[2] = {&im->dpool, &im->hpool};
  for (int k = 0; k < 2; k++) {
    pool *pl = pools[k];
    int j = 0;
    for (int i = 0; i < pl->n; i++) {
      block *blk = &pl->v[i];
      if (!blk->in_use) {
        refresh(blk);
        if (++blk->idle_trims >= PPSRT_CUDA_TRIM_AFTER && !blk->pending && !blk->xpending && im->ws[0] != blk->p &&
            im->ws[1] != blk->p && im->ws[2] != blk->p) {
          raw_free(pl, blk->p);
          pl->reserved -= blk->size;
          for (int s = 0; s < NST; s++)
            if (blk->ev[s]) cudaEventDestroy(blk->ev[s]);
          for (int x = 0; x < PPSRT_CUDA_NXEV; x++)
            if (blk->xev[x]) cudaEventDestroy(blk->xev[x]);
          continue;
        }
      }
      pl->v[j++] = *blk;
    }
    pl->n = j;
  }
  pthread_mutex_unlock(&im->mu);
  return PPSRT_OK;
}

static int cu_alloc(ppsrt_backend *b, size_t bytes, void **out) {
  USE(b);
  cuda_impl *im = IM(b);
  *out = NULL;
  pthread_mutex_lock(&im->mu);
  int rc = pool_get(b, &im->dpool, bytes, 1, -1, out);
  if (!rc) {
    im->cur += bytes;
    if (im->cur > im->peak) im->peak = im->cur;
  }
  pthread_mutex_unlock(&im->mu);
  return rc;
}

static void cu_free(ppsrt_backend *b, void *p) {
  if (p && !use_dev(b)) free_any(b, p, 0);   /* an error is recorded; free returns void */
}

static int cu_host_alloc(ppsrt_backend *b, size_t bytes, void **out) {
  USE(b);
  cuda_impl *im = IM(b);
  *out = NULL;
  pthread_mutex_lock(&im->mu);
  int rc = pool_get(b, &im->hpool, bytes, 0, -1, out);
  pthread_mutex_unlock(&im->mu);
  return rc;
}

static void cu_host_free(ppsrt_backend *b, void *p) {
  if (p && !use_dev(b)) free_any(b, p, 1);
}

static int cu_mem_stats(ppsrt_backend *b, size_t *current, size_t *peak, int reset_peak) {
  cuda_impl *im = IM(b);
  pthread_mutex_lock(&im->mu);
  if (current) *current = im->cur;
  if (peak) *peak = im->peak;
  if (reset_peak) im->peak = im->cur;
  pthread_mutex_unlock(&im->mu);
  return PPSRT_OK;
}

/* Scratch of at least `bytes` for use on `stream` only; ordered after its previous
 * user (another stream waits on ws_ev). ws_done records the end of this use. The second
 * compute stream has a scratch of its own. */
static int ws_get(ppsrt_backend *b, int stream, size_t bytes, void **out) {
  cuda_impl *im = IM(b);
  int is = sid(b, stream), k = is == ST_COMPUTE2 ? 1 : is == ST_LANE ? 2 : 0;
  if (im->ws[k] && is != im->ws_stream[k]) CUDA_CHECK(b, cudaStreamWaitEvent(im->st[is], im->ws_ev[k], 0));
  im->ws_stream[k] = is;
  if (bytes > im->ws_bytes[k]) {
    pthread_mutex_lock(&im->mu);
    int rc = PPSRT_OK;
    if (im->ws[k]) {
      rc = pool_put(b, &im->dpool, im->ws[k], 1u << is);
      if (rc > 0) rc = PPSRT_FAIL(PPSRT_E_BACKEND, "cuda: the scratch workspace is not in the pool");
    }
    im->ws[k] = NULL;
    im->ws_bytes[k] = 0;
    /* counted (mem_stats: the device's whole memory includes its workspaces) */
    if (!rc) rc = pool_get(b, &im->dpool, bytes, 1, is, &im->ws[k]);
    if (!rc) {
      im->cur += bytes;
      if (im->cur > im->peak) im->peak = im->cur;
    }
    pthread_mutex_unlock(&im->mu);
    if (rc) return rc;
    im->ws_bytes[k] = bytes;
  }
  *out = im->ws[k];
  return PPSRT_OK;
}

static int ws_done(ppsrt_backend *b, int stream) {
  int is = sid(b, stream);
  CUDA_CHECK(b, cudaEventRecord(IM(b)->ws_ev[is == ST_COMPUTE2 ? 1 : is == ST_LANE ? 2 : 0], IM(b)->st[is]));
  return PPSRT_OK;
}

/* ------------------------------------------------------------------------- */
/* copies                                                                      */

static int cu_memset0(ppsrt_backend *b, int stream, void *p, size_t bytes) {
  USE(b);
  STREAM(b, stream, s);
  if (bytes) CUDA_CHECK(b, cudaMemsetAsync(p, 0, bytes, s));
  return PPSRT_OK;
}

static int cu_memcpy_async(ppsrt_backend *b, int stream, void *dst, const void *src, size_t bytes, int kind) {
  USE(b);
  STREAM(b, stream, s);
  if (kind < 0 || kind > 2) return PPSRT_FAIL(PPSRT_E_USAGE, "cuda: bad memcpy kind %d", kind);
  /* cudaMemcpyDefault: unified addressing tells host from device (and one GPU from
   * another), so the copy is right whatever `kind` says; asynchronous with pinned memory. */
  if (bytes && dst != src) CUDA_CHECK(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  return PPSRT_OK;
}

/* Waits (polling) until the compute and copy streams have drained. The send and receive
 * streams are left alone: under NCCL a send completes only when the peer receives, and a
 * host blocked on its own send while the peer blocks on its own would deadlock where the
 * schedule's buffered-send model says it cannot. Data a transport received is ordered
 * onto the compute stream (stream_wait_event) before anyone reads it, so waiting for
 * compute covers it. */
static int sync_all(ppsrt_backend *b, const char *what) {
  static const int streams[] = {PPSRT_STREAM_COMPUTE, ST_COMPUTE2, ST_LANE, PPSRT_STREAM_D2H, PPSRT_STREAM_H2D};
  cuda_impl *im = IM(b);
  for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++) {
    int s = streams[i];
    CUDA_CHECK(b, cudaEventRecord(im->sync_ev[s], im->st[s]));
    int rc = ppsrt_cuda_wait(b, im->sync_ev[s], what);
    if (rc) return rc;
  }
  return PPSRT_OK;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);   /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);                                                 /* round to nearest even */
  return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Asynchronous, on the COMPUTE stream, which every consumer of an uploaded tensor uses
 * (or orders itself after): the values (converted on the host) go through a pinned
 * staging block and cudaMemcpyAsync. A pageable cudaMemcpy would run on the legacy
 * stream, which the backend's non-blocking streams do not wait for, and may return
 * before the copy lands. The copy is ordered after the offload streams' queued work (an
 * event, no host wait); the staging block goes back to the pool with an event on
 * COMPUTE, so it is not rewritten before the copy has read it. */
static int cu_upload_f32(ppsrt_backend *b, ppsrt_tensor dst, const float *src) {
  USE(b);
  if (!dst.numel) return PPSRT_OK;
  cuda_impl *im = IM(b);
  const int cs = sid(b, PPSRT_STREAM_COMPUTE);   /* the second compute stream inside a pair's second pass */
  static const int others[] = {PPSRT_STREAM_D2H, PPSRT_STREAM_H2D};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    CUDA_CHECK(b, cudaEventRecord(im->sync_ev[others[i]], im->st[others[i]]));
    CUDA_CHECK(b, cudaStreamWaitEvent(im->st[cs], im->sync_ev[others[i]], 0));
  }
  size_t bytes = dst.numel * (dst.dtype == PPSRT_F32 ? sizeof(float) : sizeof(uint16_t));
  void *stage = NULL;
  pthread_mutex_lock(&im->mu);
  int rc = pool_get(b, &im->hpool, bytes, 0, -1, &stage);
  pthread_mutex_unlock(&im->mu);
  if (rc) return rc;
  if (dst.dtype == PPSRT_F32) {
    memcpy(stage, src, bytes);
  } else {
    uint16_t *h = stage;
    for (size_t i = 0; i < dst.numel; i++) h[i] = f32_to_bf16(src[i]);
  }
  cudaError_t e = cudaMemcpyAsync(dst.data, stage, bytes, cudaMemcpyHostToDevice, im->st[cs]);
  pthread_mutex_lock(&im->mu);
  rc = pool_put(b, &im->hpool, stage, 1u << cs);
  pthread_mutex_unlock(&im->mu);
  CUDA_CHECK(b, e);
  return rc > 0 ? PPSRT_FAIL(PPSRT_E_BACKEND, "cuda: an upload's staging block is not in the pool") : rc;
}

static int cu_download_f32(ppsrt_backend *b, float *dst, ppsrt_tensor src) {
  USE(b);
  if (!src.numel) return PPSRT_OK;
  int rc = sync_all(b, "streams before a download");
  if (rc) return rc;
  if (src.dtype == PPSRT_F32) {
    CUDA_CHECK(b, cudaMemcpy(dst, src.data, src.numel * sizeof(float), cudaMemcpyDeviceToHost));
    return PPSRT_OK;
  }
  uint16_t *tmp = malloc(src.numel * sizeof *tmp);
  if (!tmp) return PPSRT_FAIL(PPSRT_E_NOMEM, "cuda: no host memory to convert %zu values", src.numel);
  cudaError_t e = cudaMemcpy(tmp, src.data, src.numel * sizeof *tmp, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess)
    for (size_t i = 0; i < src.numel; i++) dst[i] = bf16_to_f32(tmp[i]);
  free(tmp);
  CUDA_CHECK(b, e);
  return PPSRT_OK;
}

/* ------------------------------------------------------------------------- */
/* events                                                                      */

static int cu_event_create(ppsrt_backend *b, ppsrt_event **out) {
  USE(b);
  *out = NULL;
  ppsrt_event *e = calloc(1, sizeof *e);
  if (!e) return PPSRT_FAIL(PPSRT_E_NOMEM, "cuda: cannot allocate an event");
  cudaError_t err = cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    free(e);
    CUDA_CHECK(b, err);
  }
  *out = e;
  return PPSRT_OK;
}

static void cu_event_destroy(ppsrt_backend *b, ppsrt_event *e) {
  if (!e) return;
  if (!use_dev(b)) {
    cudaEventDestroy(e->ev);
    if (e->tev) cudaEventDestroy(e->tev);
  }
  free(e);
}

static int cu_event_record(ppsrt_backend *b, ppsrt_event *e, int stream) {
  USE(b);
  STREAM(b, stream, s);
  /* the timed twin first: when e->ev has completed (what event_sync and event_query
   * wait for) the twin before it on the same stream has too, so event_elapsed right
   * after a sync never finds it not ready */
  e->timed = 0;
  if (IM(b)->timing) {
    if (!e->tev) CUDA_CHECK(b, cudaEventCreate(&e->tev));
    CUDA_CHECK(b, cudaEventRecord(e->tev, s));
    e->timed = 1;
  }
  CUDA_CHECK(b, cudaEventRecord(e->ev, s));
  return PPSRT_OK;
}

static int cu_stream_wait_event(ppsrt_backend *b, int stream, ppsrt_event *e) {
  USE(b);
  STREAM(b, stream, s);
  CUDA_CHECK(b, cudaStreamWaitEvent(s, e->ev, 0));
  return PPSRT_OK;
}

static int cu_event_sync(ppsrt_backend *b, ppsrt_event *e) {
  USE(b);
  return ppsrt_cuda_wait(b, e->ev, "an event");
}

static int cu_event_query(ppsrt_backend *b, ppsrt_event *e) {
  USE(b);
  cudaError_t err = cudaEventQuery(e->ev);
  if (err == cudaSuccess) return 1;
  if (err == cudaErrorNotReady) return 0;
  CUDA_CHECK(b, err);
  return 0;
}

static int cu_stream_sync(ppsrt_backend *b, int stream) {
  USE(b);
  STREAM(b, stream, s);
  CUDA_CHECK(b, cudaEventRecord(IM(b)->sync_ev[sid(b, stream)], s));
  return ppsrt_cuda_wait(b, IM(b)->sync_ev[sid(b, stream)], "a stream to drain");
}

static double cu_event_elapsed(ppsrt_backend *b, ppsrt_event *start, ppsrt_event *end) {
  if (use_dev(b)) return -1.0;
  if (!start->timed || !end->timed) {
    IM(b)->timing = 1;   /* records from now on carry a timed event */
    return -1.0;
  }
  float ms = 0.0f;
  cudaError_t e = cudaEventElapsedTime(&ms, start->tev, end->tev);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return -1.0;
  }
  return ms * 1e-3;
}

/* ------------------------------------------------------------------------- */
/* matrix products                                                             */

static cudaDataType_t cdt(ppsrt_dtype t) { return t == PPSRT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* Elements spanned by `count` row-major matrices rows x cols (row stride ld, batch stride s). */
static size_t span(int rows, int cols, int ld, long s, int count) {
  if (rows <= 0 || cols <= 0 || count <= 0) return 0;
  return (size_t)(count - 1) * (size_t)(s > 0 ? s : 0) + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

static int gemm_any(ppsrt_backend *b, int stream, int ta, int tb, int M, int N, int K, float alpha, const void *A,
                    ppsrt_dtype at, int lda, long sA, const void *B, ppsrt_dtype bt, int ldb, long sB, float beta,
                    void *C, ppsrt_dtype ct, int ldc, long sC, int count);

/* The cuBLAS call for supported type triples: (bf16, bf16, bf16|F32) and (F32, F32, F32). */
static int gemm_fast(ppsrt_backend *b, cudaStream_t s, int ta, int tb, int M, int N, int K, float alpha,
                     const void *A, ppsrt_dtype at, int lda, long sA, const void *B, ppsrt_dtype bt, int ldb,
                     long sB, float beta, void *C, ppsrt_dtype ct, int ldc, long sC, int count, int batched) {
  cublasHandle_t h = s == IM(b)->st[ST_COMPUTE2] ? IM(b)->blas2 : s == IM(b)->st[ST_LANE] ? IM(b)->blas3 : IM(b)->blas;
  CUBLAS_CHECK(b, cublasSetStream(h, s));
  cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  /* Row-major C[M,N] = op(A) op(B)  <=>  column-major C^T[N,M] = op(B)^T op(A)^T. */
  if (!batched) {
    CUBLAS_CHECK(b, cublasGemmEx(h, opB, opA, N, M, K, &alpha, B, cdt(bt), ldb, A, cdt(at), lda, &beta, C,
                                 cdt(ct), ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    CUBLAS_CHECK(b, cublasGemmStridedBatchedEx(h, opB, opA, N, M, K, &alpha, B, cdt(bt), ldb, (long long)sB, A,
                                               cdt(at), lda, (long long)sA, &beta, C, cdt(ct), ldc, (long long)sC,
                                               count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  return PPSRT_OK;
}

static int gemm_any(ppsrt_backend *b, int stream, int ta, int tb, int M, int N, int K, float alpha, const void *A,
                    ppsrt_dtype at, int lda, long sA, const void *B, ppsrt_dtype bt, int ldb, long sB, float beta,
                    void *C, ppsrt_dtype ct, int ldc, long sC, int count) {
  USE(b);
  STREAM(b, stream, s);
  if (M < 0 || N < 0 || K < 0 || count < 0) return PPSRT_FAIL(PPSRT_E_USAGE, "cuda gemm: negative size");
  int acols = ta ? M : K, bcols = tb ? K : N;
  if (lda < (acols > 1 ? acols : 1) || ldb < (bcols > 1 ? bcols : 1) || ldc < (N > 1 ? N : 1))
    return PPSRT_FAIL(PPSRT_E_USAGE,
                      "cuda gemm: leading dimension too small (lda %d ldb %d ldc %d for M %d N %d K %d ta %d tb %d)",
                      lda, ldb, ldc, M, N, K, ta, tb);
  if (M == 0 || N == 0 || count == 0) return PPSRT_OK;
  if (K == 0) {   /* C = beta C, as the CPU backend */
    for (int i = 0; i < count; i++) {
      char *c = (char *)C + (size_t)i * (size_t)sC * ppsrt_dtype_size(ct);
      CUDA_CHECK(b, ppsrt_cu_scale_matrix(s, c, ct == PPSRT_BF16, M, N, ldc, beta));
    }
    return PPSRT_OK;
  }
  int batched = count > 1;
  if (at == bt && (at == PPSRT_BF16 || ct == PPSRT_F32))
    return gemm_fast(b, s, ta, tb, M, N, K, alpha, A, at, lda, sA, B, bt, ldb, sB, beta, C, ct, ldc, sC, count,
                     batched);
  /* Slow path: every bf16 operand into an F32 copy, F32 GEMM, the result back. */
  size_t na = at == PPSRT_BF16 ? span(ta ? K : M, acols, lda, sA, count) : 0;
  size_t nb = bt == PPSRT_BF16 ? span(tb ? N : K, bcols, ldb, sB, count) : 0;
  size_t nc = ct == PPSRT_BF16 ? span(M, N, ldc, sC, count) : 0;
  size_t a_off = 0, b_off = (na + 63) & ~(size_t)63, c_off = b_off + ((nb + 63) & ~(size_t)63);
  void *ws;
  int rc = ws_get(b, stream, (c_off + nc) * sizeof(float) + 256, &ws);
  if (rc) return rc;
  float *fa = (float *)ws + a_off, *fb = (float *)ws + b_off, *fc = (float *)ws + c_off;
  if (na) CUDA_CHECK(b, ppsrt_cu_bf16_to_f32(s, fa, A, na));
  if (nb) CUDA_CHECK(b, ppsrt_cu_bf16_to_f32(s, fb, B, nb));
  if (nc) CUDA_CHECK(b, ppsrt_cu_bf16_to_f32(s, fc, C, nc));
  rc = gemm_fast(b, s, ta, tb, M, N, K, alpha, na ? fa : A, PPSRT_F32, lda, sA, nb ? fb : B, PPSRT_F32, ldb, sB,
                 beta, nc ? (void *)fc : C, PPSRT_F32, ldc, sC, count, batched);
  if (rc) return rc;
  if (nc) CUDA_CHECK(b, ppsrt_cu_f32_to_bf16(s, C, fc, nc));
  return ws_done(b, stream);
}

static int cu_gemm(ppsrt_backend *b, int stream, int ta, int tb, int M, int N, int K, float alpha, const void *A,
                   ppsrt_dtype at, int lda, const void *B, ppsrt_dtype bt, int ldb, float beta, void *C,
                   ppsrt_dtype ct, int ldc) {
  return gemm_any(b, stream, ta, tb, M, N, K, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1);
}

static int cu_gemm_strided(ppsrt_backend *b, int stream, int ta, int tb, int M, int N, int K, float alpha,
                           const void *A, ppsrt_dtype at, int lda, long sA, const void *B, ppsrt_dtype bt, int ldb,
                           long sB, float beta, void *C, ppsrt_dtype ct, int ldc, long sC, int count) {
  return gemm_any(b, stream, ta, tb, M, N, K, alpha, A, at, lda, sA, B, bt, ldb, sB, beta, C, ct, ldc, sC, count);
}

/* A GEMM with a fused epilogue (backend.h gemm_ep) through cuBLASLt (gemm_lt.c), on the
 * stream's scratch: LT_WS bytes of cuBLASLt workspace, then the F32 bias gradient that
 * is added into dbias after the product. */
#define LT_WS ((size_t)32 << 20)
static int cu_gemm_ep(ppsrt_backend *b, int stream, int ep, int ta, int tb, int M, int N, int K, float alpha,
                      const void *A, ppsrt_dtype at, int lda, const void *B, ppsrt_dtype bt, int ldb, float beta,
                      void *C, ppsrt_dtype ct, int ldc, const void *bias, void *aux, float *dbias) {
  cuda_impl *im = IM(b);
  USE(b);
  STREAM(b, stream, s);
  int rc = 1;
  if ((im->ep_mask & (unsigned)ep) && at == PPSRT_BF16 && bt == PPSRT_BF16 && (ta ? M : K) <= lda &&
      (tb ? K : N) <= ldb && N <= ldc) {
    void *ws;
    size_t nb = ep == PPSRT_EP_BGRAD ? (size_t)N * sizeof(float) : 0;
    rc = ws_get(b, stream, LT_WS + nb, &ws);
    if (rc) return rc;
    float *db = nb ? (float *)((char *)ws + LT_WS) : NULL;
    rc = ppsrt_lt_gemm(b, im->lt, s, ep, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ct == PPSRT_F32, ldc, bias,
                       aux, db, ws, LT_WS);
    if (rc == 0 && db) CUDA_CHECK(b, ppsrt_cu_axpy_f32(s, dbias, db, 1.0f, (size_t)N));
    if (rc >= 0) {
      int rc2 = ws_done(b, stream);
      if (rc2) return rc2;
    }
  }
  if (rc >= 0) __atomic_add_fetch(rc ? &im->ep_unfused : &im->ep_fused, 1, __ATOMIC_RELAXED);
  return rc;
}

unsigned ppsrt_cuda_epilogues(ppsrt_backend *b) { return IM(b)->ep_mask; }
void ppsrt_cuda_epilogue_calls(ppsrt_backend *b, long *fused, long *unfused) {
  *fused = __atomic_load_n(&IM(b)->ep_fused, __ATOMIC_RELAXED);
  *unfused = __atomic_load_n(&IM(b)->ep_unfused, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------- */
/* attention: cuBLAS GEMMs + kernels (math: cpu_kernels.c k_attention_fwd/bwd)    */

#define BF(p, off) ((const void *)((const uint16_t *)(p) + (off)))
#define BFW(p, off) ((void *)((uint16_t *)(p) + (off)))

static size_t al256(size_t x) { return (x + 255) & ~(size_t)255; }

/* Query rows are processed in chunks [r0, r0 + R): a chunk needs keys [0, r0 + R) only
 * (later keys are masked for all its rows), so the masked upper triangle is mostly
 * never computed: with 8 chunks the GEMMs, the softmax traffic and the scratch shrink to
 * about 56% of the full T x T. Short sequences are one chunk. */
static int attn_chunk(int T) {
  if (T <= 128) return T;
  int r = (T + 7) / 8;
  return (r + 63) / 64 * 64;
}

/* Query heads processed together (within one kv group) so their scratch fits the cap. */
static int heads_per_unit(cuda_impl *im, int grp, size_t rows, int T, size_t bytes_per_elem) {
  size_t per_head = rows * (size_t)T * bytes_per_elem;
  size_t nh = per_head ? im->attn_ws_cap / per_head : (size_t)grp;
  if (nh < 1) nh = 1;
  if (nh > (size_t)grp) nh = (size_t)grp;
  return (int)nh;
}

static int attn_check(int batch, int T, int Hq, int Hkv, int D) {
  if (Hkv <= 0 || Hq % Hkv != 0) return PPSRT_FAIL(PPSRT_E_USAGE, "attention: Hq %d not a multiple of Hkv %d", Hq, Hkv);
  if (batch < 0 || T < 0 || D <= 0) return PPSRT_FAIL(PPSRT_E_USAGE, "attention: bad sizes batch %d T %d D %d", batch, T, D);
  return PPSRT_OK;
}

/* The fused path (cuDNN SDPA, attn_cudnn.cpp). Returns 1 when the call was not taken
 * (cuBLAS path chosen, or cuDNN has no engine for this shape and PPSRT_CUDA_ATTN is not
 * `cudnn`: the shape is then remembered and the cuBLAS path runs it), else a PPSRT code. */
enum { ATTN_CUBLAS = 0, ATTN_CUDNN = 1 };
#ifdef HAVE_CUDNN_FE
static int attn_fused(ppsrt_backend *b, int stream, cudaStream_t s, const ppsrt_cudnn_attn_shape *sh,
                      const ppsrt_cudnn_attn_ptrs *p) {
  cuda_impl *im = IM(b);
  if (im->attn_path != ATTN_CUDNN || !im->dnn) return 1;
  int is = sid(b, stream), slot = is == ST_COMPUTE2 ? 1 : is == ST_LANE ? 2 : 0;
  char msg[768];
  size_t need = 0;
  if (ppsrt_cudnn_attn_prepare(im->dnn, slot, sh, &need, msg, sizeof msg)) {
    if (!im->attn_strict) return 1;
    return PPSRT_FAIL(PPSRT_E_BACKEND, "cuda: GPU %d on host %s: %s\nhint: unset PPSRT_CUDA_ATTN (or set it to "
                      "cublas) to run this shape on the cuBLAS attention", im->dev, ppsrt_cuda_hostname(), msg);
  }
  void *ws = NULL;
  int rc = ws_get(b, stream, need ? need : 256, &ws);
  if (rc) return rc;
  if (ppsrt_cudnn_attn_run(im->dnn, slot, s, sh, ws, p, msg, sizeof msg))
    return PPSRT_FAIL(PPSRT_E_BACKEND, "cuda: GPU %d on host %s: %s", im->dev, ppsrt_cuda_hostname(), msg);
  __atomic_add_fetch(&im->attn_fused, 1, __ATOMIC_RELAXED);
  return ws_done(b, stream);
}
#endif

const char *ppsrt_cuda_attention_path(ppsrt_backend *b) {
  return IM(b)->attn_path == ATTN_CUDNN ? "cudnn" : "cublas";
}

void ppsrt_cuda_attention_calls(ppsrt_backend *b, long *fused, long *unfused) {
  *fused = __atomic_load_n(&IM(b)->attn_fused, __ATOMIC_RELAXED);
  *unfused = __atomic_load_n(&IM(b)->attn_unfused, __ATOMIC_RELAXED);
}

/* --attention-dropout (drop->thr > 0) runs on the cuBLAS path: the fused cuDNN path has
 * no dropout here. PPSRT_CUDA_ATTN=cudnn (strict) then is an error naming the flag; auto
 * falls back to cuBLAS. Returns 1 when the fused path may be tried. */
static int attn_drop_ok(ppsrt_backend *b, const ppsrt_dropout *drop, ppsrt_dropout *eff, int *rc) {
  *rc = 0;
  *eff = drop && drop->thr ? *drop : (ppsrt_dropout){0, 1.0f, 0, 0, 0, 0};   /* what the cuBLAS path applies */
  if (!eff->thr) return 1;
  cuda_impl *im = IM(b);
  if (im->attn_path == ATTN_CUDNN && im->attn_strict)
    *rc = PPSRT_FAIL(PPSRT_E_USAGE, "cuda: GPU %d: --attention-dropout is not supported by the fused cuDNN attention "
                     "(PPSRT_CUDA_ATTN=cudnn)\nhint: unset PPSRT_CUDA_ATTN (auto runs dropout on the cuBLAS attention) "
                     "or set it to cublas", im->dev);
  return 0;
}

/* The forward of `batch` sequences whose T queries are at positions [q0, q0 + T) and
 * keys at [0, Tk = q0 + T) (q0 = 0: attention_fwd; batch 1: attention_fwd_at, the query
 * block of --context-parallel): query rows bb T + i, key rows bb Tk + j, lse [bb][h][T].
 * The kernels index a chunk's rows by their global position i (mask j <= i) and lse and
 * delta by h T + i: they get those pointers moved back by q0. */
static int attn_fwd_core(ppsrt_backend *b, int stream, void *out, float *lse, const void *q, int ldq,
                         const void *k, int ldk, const void *v, int ldv, int batch, int T, int q0, int Hq, int Hkv,
                         int D, const ppsrt_dropout *drop) {
  USE(b);
  STREAM(b, stream, s);
  int rc = attn_check(batch, T, Hq, Hkv, D);
  if (!rc && q0 < 0) rc = PPSRT_FAIL(PPSRT_E_USAGE, "attention: query block at %d", q0);
  if (rc || batch == 0 || T == 0) return rc;
  const int Tk = q0 + T;
  ppsrt_dropout dr;
  int fuse = attn_drop_ok(b, drop, &dr, &rc);
  (void)fuse;   /* (no fused path without the cuDNN frontend) */
  if (rc) return rc;
  const int Td = dr.seq ? dr.seq : Tk;   /* the dropout index's sequence length (the whole one for a block) */
#ifdef HAVE_CUDNN_FE
  if (fuse && !q0) {
    ppsrt_cudnn_attn_shape sh = {0, batch, T, Hq, Hkv, D, ldq, ldk, ldv, Hq * D, 0};
    ppsrt_cudnn_attn_ptrs p = {q, k, v, out, lse, NULL, NULL, NULL, NULL};
    if ((rc = attn_fused(b, stream, s, &sh, &p)) != 1) return rc;
  }
#endif
  cuda_impl *im = IM(b);
  __atomic_add_fetch(&im->attn_unfused, 1, __ATOMIC_RELAXED);
  const int grp = Hq / Hkv, ldo = Hq * D, Tr = attn_chunk(T);
  const float scale = 1.0f / sqrtf((float)D);
  /* Heads go to the batched GEMMs together when their K/V rows are a constant stride
   * apart: all Hq heads for standard multi-head attention (K/V stride D), the heads of
   * one kv group otherwise (stride 0), as many as the scratch cap allows. */
  const int span = grp == 1 ? Hq : grp;
  const long kvs = grp == 1 ? D : 0;
  const int nh = heads_per_unit(im, span, (size_t)Tr, Tk, 6);
  const size_t cap = (size_t)Tr * Tk;   /* scratch elements per head */
  void *ws;
  if ((rc = ws_get(b, stream, al256((size_t)nh * cap * 4) + al256((size_t)nh * cap * 2), &ws))) return rc;
  float *S = ws;
  void *P = (char *)ws + al256((size_t)nh * cap * 4);
  for (int bb = 0; bb < batch; bb++)
    for (int g0 = 0; g0 < Hq; g0 += span)
      for (int h0 = g0; h0 < g0 + span; h0 += nh) {
        int n = g0 + span - h0 < nh ? g0 + span - h0 : nh, g = h0 / grp;
        size_t row0 = (size_t)bb * T - (size_t)q0, krow0 = (size_t)bb * Tk;   /* (row0 + r0: the query row of r0) */
        const void *kg = BF(k, krow0 * ldk + (size_t)g * D), *vg = BF(v, krow0 * ldv + (size_t)g * D);
        float *lh = lse + ((size_t)bb * Hq + h0) * T - q0;
        for (int r0 = q0; r0 < Tk; r0 += Tr) {
          const int R = Tk - r0 < Tr ? Tk - r0 : Tr, C = r0 + R;
          const long RC = (long)R * C;
          const void *qc = BF(q, (row0 + r0) * ldq + (size_t)h0 * D);
          /* S_hh = Q_hh[r0 : r0+R] K_g[0 : C]^T (raw, F32) */
          rc = gemm_fast(b, s, 0, 1, R, C, D, 1.0f, qc, PPSRT_BF16, ldq, D, kg, PPSRT_BF16, ldk, kvs, 0.0f, S,
                         PPSRT_F32, C, RC, n, 1);
          if (rc) return rc;
          CUDA_CHECK(b, ppsrt_cu_attn_softmax_fwd(s, P, lh, S, n, R, C, r0, T, Td, scale, dr.thr, dr.scale, dr.key,
                                                  dr.thr ? (uint64_t)bb * dr.heads + dr.base + h0 : 0));
          /* out_hh[r0 : r0+R] = P_hh V_g[0 : C] (bf16, row stride Hq*D) */
          rc = gemm_fast(b, s, 0, 0, R, D, C, 1.0f, P, PPSRT_BF16, C, RC, vg, PPSRT_BF16, ldv, kvs, 0.0f,
                         BFW(out, (row0 + r0) * ldo + (size_t)h0 * D), PPSRT_BF16, ldo, D, n, 1);
          if (rc) return rc;
        }
      }
  return ws_done(b, stream);
}
static int cu_attention_fwd(ppsrt_backend *b, int stream, void *out, float *lse, const void *q, int ldq,
                            const void *k, int ldk, const void *v, int ldv, int batch, int T, int Hq, int Hkv,
                            int D, const ppsrt_dropout *drop) {
  return attn_fwd_core(b, stream, out, lse, q, ldq, k, ldk, v, ldv, batch, T, 0, Hq, Hkv, D, drop);
}
static int cu_attention_fwd_at(ppsrt_backend *b, int stream, void *out, float *lse, const void *q, int ldq,
                               const void *k, int ldk, const void *v, int ldv, int Tq, int q0, int Hq, int Hkv, int D,
                               const ppsrt_dropout *drop) {
  return attn_fwd_core(b, stream, out, lse, q, ldq, k, ldk, v, ldv, 1, Tq, q0, Hq, Hkv, D, drop);
}

/* Backward, batched over heads like the forward: a unit is up to nh query heads whose
 * K/V rows are a constant stride apart (all Hq heads for standard multi-head attention,
 * K/V stride D; the heads of one kv group otherwise, stride 0). Every GEMM of a chunk is
 * one strided-batched call over the unit's heads, dV and dK included: each head
 * accumulates its own F32 dK/dV ([nh][T][D] in the scratch), which are then written to
 * the heads' columns of the fused gradient (multi-head) or summed into the kv group's F32
 * accumulator and written once per group (grouped query heads). */
static int attn_bwd_core(ppsrt_backend *b, int stream, void *dq, int lddq, void *dk, void *dv, int ldd,
                         const void *dout, const void *out, const float *lse, const void *q, int ldq, const void *k,
                         int ldk, const void *v, int ldv, int batch, int T, int q0, int Hq, int Hkv, int D,
                         const ppsrt_dropout *drop) {
  USE(b);
  STREAM(b, stream, s);
  int rc = attn_check(batch, T, Hq, Hkv, D);
  if (!rc && q0 < 0) rc = PPSRT_FAIL(PPSRT_E_USAGE, "attention: query block at %d", q0);
  if (rc || batch == 0 || T == 0) return rc;
  const int Tk = q0 + T;
  ppsrt_dropout dr;
  int fuse = attn_drop_ok(b, drop, &dr, &rc);
  (void)fuse;   /* (no fused path without the cuDNN frontend) */
  if (rc) return rc;
  const int Td = dr.seq ? dr.seq : Tk;   /* the dropout index's sequence length (the whole one for a block) */
#ifdef HAVE_CUDNN_FE
  if (fuse && !q0 && lddq == ldd) {
    ppsrt_cudnn_attn_shape sh = {1, batch, T, Hq, Hkv, D, ldq, ldk, ldv, Hq * D, ldd};
    ppsrt_cudnn_attn_ptrs p = {q, k, v, (void *)out, (void *)lse, dout, dq, dk, dv};
    if ((rc = attn_fused(b, stream, s, &sh, &p)) != 1) return rc;
  }
#endif
  cuda_impl *im = IM(b);
  __atomic_add_fetch(&im->attn_unfused, 1, __ATOMIC_RELAXED);
  const int grp = Hq / Hkv, ldo = Hq * D, Tr = attn_chunk(T);
  const float scale = 1.0f / sqrtf((float)D);
  const int span = grp == 1 ? Hq : grp;
  const long kvs = grp == 1 ? D : 0;
  const size_t cap = (size_t)Tr * Tk, TD = (size_t)Tk * D;
  /* scratch per head: S (F32), P/dS (bf16), dP (F32), delta, dK and dV (F32) */
  size_t per_head = cap * 10 + (size_t)T * 4 + TD * 8;
  size_t nhz = per_head ? im->attn_ws_cap / per_head : (size_t)span;
  const int nh = nhz < 1 ? 1 : nhz > (size_t)span ? span : (int)nhz;
  size_t oS = 0, oP = oS + al256((size_t)nh * cap * 4), odP = oP + al256((size_t)nh * cap * 2);
  size_t odel = odP + al256((size_t)nh * cap * 4), odk = odel + al256((size_t)nh * T * 4);
  size_t odv = odk + al256((size_t)nh * TD * 4), ogk = odv + al256((size_t)nh * TD * 4);
  size_t ogv = ogk + (grp > 1 ? al256(TD * 4) : 0), total = ogv + (grp > 1 ? al256(TD * 4) : 0);
  void *ws;
  if ((rc = ws_get(b, stream, total, &ws))) return rc;
  float *S = (float *)((char *)ws + oS), *dP = (float *)((char *)ws + odP), *delta = (float *)((char *)ws + odel);
  float *dk32 = (float *)((char *)ws + odk), *dv32 = (float *)((char *)ws + odv);   /* [nh][T][D] */
  float *dkg = (float *)((char *)ws + ogk), *dvg = (float *)((char *)ws + ogv);    /* kv group's, GQA */
  void *P = (char *)ws + oP;   /* P, then dS in place */
  for (int bb = 0; bb < batch; bb++)
    for (int g0 = 0; g0 < Hq; g0 += span) {
      size_t row0 = (size_t)bb * T - (size_t)q0, krow0 = (size_t)bb * Tk;   /* (row0 + r0: the query row of r0) */
      if (grp > 1) {
        CUDA_CHECK(b, cudaMemsetAsync(dkg, 0, TD * 4, s));
        CUDA_CHECK(b, cudaMemsetAsync(dvg, 0, TD * 4, s));
      }
      for (int h0 = g0; h0 < g0 + span; h0 += nh) {
        int n = g0 + span - h0 < nh ? g0 + span - h0 : nh, g = h0 / grp;
        const void *kg = BF(k, krow0 * ldk + (size_t)g * D), *vg = BF(v, krow0 * ldv + (size_t)g * D);
        const float *lh = lse + ((size_t)bb * Hq + h0) * T - q0;
        CUDA_CHECK(b, cudaMemsetAsync(dk32, 0, (size_t)n * TD * 4, s));
        CUDA_CHECK(b, cudaMemsetAsync(dv32, 0, (size_t)n * TD * 4, s));
        CUDA_CHECK(b, ppsrt_cu_attn_delta(s, delta, BF(dout, (row0 + q0) * ldo + (size_t)h0 * D),
                                          BF(out, (row0 + q0) * ldo + (size_t)h0 * D), ldo, n, T, D));
        for (int r0 = q0; r0 < Tk; r0 += Tr) {
          const int R = Tk - r0 < Tr ? Tk - r0 : Tr, C = r0 + R;
          const long RC = (long)R * C;
          const void *qc = BF(q, (row0 + r0) * ldq + (size_t)h0 * D);
          const void *doc = BF(dout, (row0 + r0) * ldo + (size_t)h0 * D);
          /* recompute S and P from the saved log-sum-exp */
          rc = gemm_fast(b, s, 0, 1, R, C, D, 1.0f, qc, PPSRT_BF16, ldq, D, kg, PPSRT_BF16, ldk, kvs, 0.0f, S,
                         PPSRT_F32, C, RC, n, 1);
          if (rc) return rc;
          const uint64_t hb = dr.thr ? (uint64_t)bb * dr.heads + dr.base + h0 : 0;
          CUDA_CHECK(b, ppsrt_cu_attn_prob(s, P, S, lh, n, R, C, r0, T, Td, scale, dr.thr, dr.scale, dr.key, hb));
          /* dV_hh[0 : C] += P_hh^T dout_hh[r0 : r0+R], per head (F32) */
          rc = gemm_fast(b, s, 1, 0, C, D, R, 1.0f, P, PPSRT_BF16, C, RC, doc, PPSRT_BF16, ldo, D, 1.0f, dv32,
                         PPSRT_F32, D, (long)TD, n, 1);
          if (rc) return rc;
          /* dP_hh = dout_hh[r0 : r0+R] V_g[0 : C]^T (F32) */
          rc = gemm_fast(b, s, 0, 1, R, C, D, 1.0f, doc, PPSRT_BF16, ldo, D, vg, PPSRT_BF16, ldv, kvs, 0.0f, dP,
                         PPSRT_F32, C, RC, n, 1);
          if (rc) return rc;
          /* dS = P (dP - delta) / sqrt(D), bf16, over P */
          CUDA_CHECK(b, ppsrt_cu_attn_dscores(s, P, S, dP, lh, delta - q0, n, R, C, r0, T, Td, scale, dr.thr, dr.scale, dr.key, hb));
          /* dq_hh[r0 : r0+R] = dS_hh K_g[0 : C] (written, bf16, row stride ldd) */
          rc = gemm_fast(b, s, 0, 0, R, D, C, 1.0f, P, PPSRT_BF16, C, RC, kg, PPSRT_BF16, ldk, kvs, 0.0f,
                         BFW(dq, (row0 + r0) * lddq + (size_t)h0 * D), PPSRT_BF16, lddq, D, n, 1);
          if (rc) return rc;
          /* dK_hh[0 : C] += dS_hh^T q_hh[r0 : r0+R], per head (F32) */
          rc = gemm_fast(b, s, 1, 0, C, D, R, 1.0f, P, PPSRT_BF16, C, RC, qc, PPSRT_BF16, ldq, D, 1.0f, dk32,
                         PPSRT_F32, D, (long)TD, n, 1);
          if (rc) return rc;
        }
        if (grp == 1) {   /* head h0 + hh is kv head h0 + hh: its own columns */
          CUDA_CHECK(b, ppsrt_cu_store_heads_bf16(s, BFW(dk, krow0 * ldd + (size_t)h0 * D), ldd, dk32, n, Tk, D));
          CUDA_CHECK(b, ppsrt_cu_store_heads_bf16(s, BFW(dv, krow0 * ldd + (size_t)h0 * D), ldd, dv32, n, Tk, D));
        } else {          /* the group's heads summed */
          CUDA_CHECK(b, ppsrt_cu_sum_heads_f32(s, dkg, dk32, n, TD));
          CUDA_CHECK(b, ppsrt_cu_sum_heads_f32(s, dvg, dv32, n, TD));
        }
      }
      if (grp > 1) {
        int g = g0 / grp;
        CUDA_CHECK(b, ppsrt_cu_store_rows_bf16(s, BFW(dk, krow0 * ldd + (size_t)g * D), ldd, dkg, Tk, D));
        CUDA_CHECK(b, ppsrt_cu_store_rows_bf16(s, BFW(dv, krow0 * ldd + (size_t)g * D), ldd, dvg, Tk, D));
      }
    }
  return ws_done(b, stream);
}
static int cu_attention_bwd(ppsrt_backend *b, int stream, void *dq, void *dk, void *dv, int ldd, const void *dout,
                            const void *out, const float *lse, const void *q, int ldq, const void *k, int ldk,
                            const void *v, int ldv, int batch, int T, int Hq, int Hkv, int D,
                            const ppsrt_dropout *drop) {
  return attn_bwd_core(b, stream, dq, ldd, dk, dv, ldd, dout, out, lse, q, ldq, k, ldk, v, ldv, batch, T, 0, Hq, Hkv, D,
                       drop);
}
static int cu_attention_bwd_at(ppsrt_backend *b, int stream, void *dq, int lddq, void *dk, void *dv, int lddk,
                               const void *dout, const void *out, const float *lse, const void *q, int ldq,
                               const void *k, int ldk, const void *v, int ldv, int Tq, int q0, int Hq, int Hkv, int D,
                               const ppsrt_dropout *drop) {
  return attn_bwd_core(b, stream, dq, lddq, dk, dv, lddk, dout, out, lse, q, ldq, k, ldk, v, ldv, 1, Tq, q0, Hq, Hkv, D,
                       drop);
}

/* ------------------------------------------------------------------------- */
/* the other kernels: thin wrappers over kernels.cu                            */

#define KERNEL(b, stream, call)       \
  do {                                \
    USE(b);                           \
    STREAM(b, stream, s);             \
    CUDA_CHECK(b, call);              \
    return PPSRT_OK;                  \
  } while (0)

static int cu_add_bias(ppsrt_backend *b, int stream, void *y, const void *x, const void *bias, int N, int C) {
  KERNEL(b, stream, ppsrt_cu_add_bias(s, y, x, bias, N, C));
}
static int cu_add_bias_gelu(ppsrt_backend *b, int stream, void *y, void *pre, const void *x, const void *bias, int N,
                            int C) {
  KERNEL(b, stream, ppsrt_cu_add_bias_gelu(s, y, pre, x, bias, N, C));
}
static int cu_bias_grad(ppsrt_backend *b, int stream, float *dbias, const void *dy, int N, int C) {
  KERNEL(b, stream, ppsrt_cu_bias_grad(s, dbias, dy, N, C));
}
static int cu_copy_rows(ppsrt_backend *b, int stream, void *dst, int ldd, const void *src, int lds, int rows, int cols) {
  KERNEL(b, stream, ppsrt_cu_copy_rows_bf16(s, dst, ldd, src, lds, rows, cols));
}
static int cu_add(ppsrt_backend *b, int stream, void *y, const void *a, const void *c, size_t n) {
  KERNEL(b, stream, ppsrt_cu_add(s, y, a, c, n));
}
static int cu_bias_dropout_add(ppsrt_backend *b, int stream, void *y, const void *a, const void *x, const void *bias,
                               int N, int C, const ppsrt_dropout *d) {
  KERNEL(b, stream, ppsrt_cu_bias_dropout_add(s, y, a, x, bias, N, C, d->thr, d->scale, d->key, d->base));
}
static int cu_gelu_fwd(ppsrt_backend *b, int stream, void *y, const void *x, size_t n) {
  KERNEL(b, stream, ppsrt_cu_gelu_fwd(s, y, x, n));
}
static int cu_gelu_bwd(ppsrt_backend *b, int stream, void *dx, const void *dy, const void *x, size_t n) {
  KERNEL(b, stream, ppsrt_cu_gelu_bwd(s, dx, dy, x, n));
}
static int cu_layernorm_fwd(ppsrt_backend *b, int stream, void *y, float *mean, float *rstd, const void *x,
                            const void *gamma, const void *beta, int N, int C, float eps) {
  KERNEL(b, stream, ppsrt_cu_layernorm_fwd(s, y, mean, rstd, x, gamma, beta, N, C, eps));
}
static int cu_layernorm_bwd_input(ppsrt_backend *b, int stream, void *dx, const void *dy, const void *x,
                                  const float *mean, const float *rstd, const void *gamma, int N, int C,
                                  int accumulate) {
  KERNEL(b, stream, ppsrt_cu_layernorm_bwd_input(s, dx, dy, x, mean, rstd, gamma, N, C, accumulate));
}
static int cu_layernorm_bwd_weight(ppsrt_backend *b, int stream, float *dgamma, float *dbeta, const void *dy,
                                   const void *x, const float *mean, const float *rstd, int N, int C) {
  KERNEL(b, stream, ppsrt_cu_layernorm_bwd_weight(s, dgamma, dbeta, dy, x, mean, rstd, N, C));
}
static int cu_rope(ppsrt_backend *b, int stream, void *x, int ld, const int32_t *pos, const float *cs, int N, int H,
                   int D, int inverse) {
  KERNEL(b, stream, ppsrt_cu_rope(s, x, ld, pos, cs, N, H, D, inverse));
}
static int cu_moe_route(ppsrt_backend *b, int stream, const float *logits, int N, int E, int K, const ppsrt_moe_router *r,
                        int32_t *idx, float *w, float *stat) {
  KERNEL(b, stream, ppsrt_cu_moe_route(s, logits, N, E, K, r, idx, w, stat));
}
static int cu_moe_route_bwd(ppsrt_backend *b, int stream, void *dlogits, const float *dw, const float *logits,
                            const int32_t *idx, const ppsrt_moe_router *r, const float *coef, int N, int E, int K) {
  KERNEL(b, stream, ppsrt_cu_moe_route_bwd(s, dlogits, dw, logits, idx, r, coef, N, E, K));
}
static int cu_moe_permute(ppsrt_backend *b, int stream, void *dst, const void *src, const int32_t *pos, int N, int K,
                          int C) {
  KERNEL(b, stream, ppsrt_cu_moe_permute(s, dst, src, pos, N, K, C));
}
static int cu_moe_permute_bwd(ppsrt_backend *b, int stream, void *dx, const void *dp, const int32_t *pos, int N, int K,
                              int C, int accumulate) {
  KERNEL(b, stream, ppsrt_cu_moe_permute_bwd(s, dx, dp, pos, N, K, C, accumulate));
}
static int cu_moe_unpermute(ppsrt_backend *b, int stream, void *y, const void *a, const void *e, const int32_t *pos,
                            const float *w, int N, int K, int C) {
  KERNEL(b, stream, ppsrt_cu_moe_unpermute(s, y, a, e, pos, w, N, K, C));
}
static int cu_moe_unpermute_bwd(ppsrt_backend *b, int stream, void *de, float *dw, const void *dy, const void *e,
                                const int32_t *pos, const float *w, int N, int K, int C) {
  KERNEL(b, stream, ppsrt_cu_moe_unpermute_bwd(s, de, dw, dy, e, pos, w, N, K, C));
}
static int cu_swiglu_fwd(ppsrt_backend *b, int stream, void *y, const void *pre, int N, int C) {
  KERNEL(b, stream, ppsrt_cu_swiglu_fwd(s, y, pre, N, C));
}
static int cu_swiglu_bwd(ppsrt_backend *b, int stream, void *dpre, const void *dy, const void *pre, int N, int C) {
  KERNEL(b, stream, ppsrt_cu_swiglu_bwd(s, dpre, dy, pre, N, C));
}
static int cu_embedding_fwd(ppsrt_backend *b, int stream, void *out, const int32_t *ids, const void *table, int N,
                            int C, int lo, int hi, int accumulate) {
  KERNEL(b, stream, ppsrt_cu_embedding_fwd(s, out, ids, table, N, C, lo, hi, accumulate));
}
static int cu_embedding_bwd(ppsrt_backend *b, int stream, float *dtable, const void *dout, const int32_t *ids,
                            int N, int C, int lo, int hi) {
  KERNEL(b, stream, ppsrt_cu_embedding_bwd(s, dtable, dout, ids, N, C, lo, hi));
}
static int cu_softmax_stats(ppsrt_backend *b, int stream, float *max, float *sumexp, float *tgt,
                            const void *logits, const int32_t *targets, int N, int V, int lo) {
  KERNEL(b, stream, ppsrt_cu_softmax_stats(s, max, sumexp, tgt, logits, targets, N, V, lo));
}
static int cu_softmax_xent_bwd(ppsrt_backend *b, int stream, void *dlogits, const void *logits, const float *gmax,
                               const float *gsum, const int32_t *targets, int N, int V, int lo, float scale) {
  KERNEL(b, stream, ppsrt_cu_softmax_xent_bwd(s, dlogits, logits, gmax, gsum, targets, N, V, lo, scale));
}
static int cu_softmax_rescale_f32(ppsrt_backend *b, int stream, float *x, const float *lmax, const float *lsum,
                                  const float *gmax, const float *gsum, int N, int C) {
  KERNEL(b, stream, ppsrt_cu_softmax_rescale_f32(s, x, lmax, lsum, gmax, gsum, N, C));
}
static int cu_axpy_f32(ppsrt_backend *b, int stream, float *y, const float *x, float a, size_t n) {
  KERNEL(b, stream, ppsrt_cu_axpy_f32(s, y, x, a, n));
}
static int cu_scale_f32(ppsrt_backend *b, int stream, float *x, float a, size_t n) {
  KERNEL(b, stream, ppsrt_cu_scale_f32(s, x, a, n));
}

/* convert: F32 <-> BF16 elementwise, or a copy when the dtypes match (dst may equal src
 * only then; a converting call in place would race). */
static int cu_convert(ppsrt_backend *b, int stream, void *dst, ppsrt_dtype dt, const void *src, ppsrt_dtype st,
                      size_t n) {
  USE(b);
  STREAM(b, stream, s);
  if (!n) return PPSRT_OK;
  if (dt == st) {
    if (dst != src) CUDA_CHECK(b, cudaMemcpyAsync(dst, src, n * ppsrt_dtype_size(dt), cudaMemcpyDeviceToDevice, s));
    return PPSRT_OK;
  }
  if (dst == src) return PPSRT_FAIL(PPSRT_E_USAGE, "cuda convert: in place between dtypes %d -> %d", st, dt);
  if (st == PPSRT_BF16) CUDA_CHECK(b, ppsrt_cu_bf16_to_f32(s, dst, src, n));
  else CUDA_CHECK(b, ppsrt_cu_f32_to_bf16(s, dst, src, n));
  return PPSRT_OK;
}

/* Bias corrections computed on the host in float with powf, exactly as the CPU. */
static int cu_optimizer_step(ppsrt_backend *b, int stream, int kind, float *master, void *param, float *grad,
                             float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
                             float weight_decay, int step) {
  if (kind != 0 && kind != 1) return PPSRT_FAIL(PPSRT_E_USAGE, "optimizer: unknown kind %d", kind);
  if (kind == 1 && step < 1) return PPSRT_FAIL(PPSRT_E_USAGE, "adam: step is 1-based (got %d)", step);
  float c1 = 1.0f, c2 = 1.0f;
  if (kind == 1) {
    c1 = 1.0f / (1.0f - powf(beta1, (float)step));
    c2 = 1.0f / (1.0f - powf(beta2, (float)step));
  }
  void *p = param == (void *)master ? NULL : param;
  KERNEL(b, stream, ppsrt_cu_optimizer_step(s, kind, master, p, grad, m, v, n, lr, beta1, beta2, eps, weight_decay,
                                            c1, c2));
}

/* ------------------------------------------------------------------------- */
/* creation                                                                    */

/* Overlapped F&B pairs (backend.h overlap): the first pass runs on COMPUTE, the second
 * on the second compute stream, forked from COMPUTE before the first pass and joined
 * into it after the second, so the GPU runs the two passes concurrently (DualPipe's
 * F&B overlap) and everything queued afterwards sees both. The allocator records frees
 * on both compute streams (ALL_STREAMS), each stream has its own scratch and cuBLAS
 * handle. */
static int cu_overlap(ppsrt_backend *b, int phase) {
  USE(b);
  cuda_impl *im = IM(b);
  switch (phase) {
  case PPSRT_OVERLAP_FORK:
    CUDA_CHECK(b, cudaEventRecord(im->pair_ev, im->st[PPSRT_STREAM_COMPUTE]));
    CUDA_CHECK(b, cudaStreamWaitEvent(im->st[ST_COMPUTE2], im->pair_ev, 0));
    return PPSRT_OK;
  case PPSRT_OVERLAP_SECOND:
    tl_second = im;
    return PPSRT_OK;
  case PPSRT_OVERLAP_JOIN:
    tl_second = NULL;
    CUDA_CHECK(b, cudaEventRecord(im->pair_ev, im->st[ST_COMPUTE2]));
    CUDA_CHECK(b, cudaStreamWaitEvent(im->st[PPSRT_STREAM_COMPUTE], im->pair_ev, 0));
    return PPSRT_OK;
  case PPSRT_OVERLAP_LANE:
    tl_lane = im;
    return PPSRT_OK;
  default:
    return PPSRT_FAIL(PPSRT_E_USAGE, "cuda: bad overlap phase %d", phase);
  }
}

static void cu_destroy(ppsrt_backend *b) {
  if (!b) return;
  cuda_impl *im = IM(b);
  reg_remove(b);
  if (im) {
    if (!use_dev(b)) {
      /* Drain the streams with a bounded wait (a dead peer must not hang teardown). */
      double keep = im->timeout_s;
      if (im->timeout_s <= 0 || im->timeout_s > 10) im->timeout_s = 10;
      im->watch = NULL;
      for (int s = 0; s < NST; s++)
        if (im->st[s] && im->sync_ev[s] && cudaEventRecord(im->sync_ev[s], im->st[s]) == cudaSuccess)
          (void)ppsrt_cuda_wait(b, im->sync_ev[s], "teardown");
      im->timeout_s = keep;
      if (im->blas) cublasDestroy(im->blas);
      if (im->blas2) cublasDestroy(im->blas2);
      if (im->blas3) cublasDestroy(im->blas3);
      ppsrt_lt_destroy(im->lt);
#ifdef HAVE_CUDNN_FE
      ppsrt_cudnn_destroy(im->dnn);
#endif
      pool *pools[2] = {&im->dpool, &im->hpool};
      for (int k = 0; k < 2; k++) {
        for (int i = 0; i < pools[k]->n; i++) {
          block *blk = &pools[k]->v[i];
          raw_free(pools[k], blk->p);
          for (int s = 0; s < NST; s++)
            if (blk->ev[s]) cudaEventDestroy(blk->ev[s]);
          for (int x = 0; x < PPSRT_CUDA_NXEV; x++)
            if (blk->xev[x]) cudaEventDestroy(blk->xev[x]);
        }
        free(pools[k]->v);
      }
      for (int k = 0; k < 3; k++)
        if (im->ws_ev[k]) cudaEventDestroy(im->ws_ev[k]);
      if (im->pair_ev) cudaEventDestroy(im->pair_ev);
      for (int s = 0; s < NST; s++) {
        if (im->sync_ev[s]) cudaEventDestroy(im->sync_ev[s]);
        if (im->st[s]) cudaStreamDestroy(im->st[s]);
      }
    }
    pthread_mutex_destroy(&im->mu);
    free(im);
  }
  free(b);
}

static size_t env_mb(const char *name, size_t dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  unsigned long long x = strtoull(v, &end, 10);
  return (*end || x == 0) ? dflt : (size_t)x;
}


/* PPSRT_CUDA_ATTN: `cublas`, `cudnn` (fused; an error when cuDNN cannot be used), or
 * `auto` (fused where cuDNN loads and supports the shape, cuBLAS otherwise). The default
 * is PPSRT_CUDA_ATTN_DEFAULT: auto since the first GPU run compared the two paths
 * (NVIDIA H200, cuDNN 9.14: both within the kernel test's tolerances of the CPU
 * reference; the fused path 1.1-3.3x faster per layer; docs/gpu.md). The emulator
 * (tests/gpu/emu) has no cuDNN: there `auto` is the cuBLAS path and `cudnn` an error. */
#ifndef PPSRT_CUDA_ATTN_DEFAULT
#define PPSRT_CUDA_ATTN_DEFAULT "auto"
#endif
static int attn_setup(ppsrt_backend *b) {
  cuda_impl *im = IM(b);
  const char *v = getenv("PPSRT_CUDA_ATTN");
  if (!v || !*v) v = PPSRT_CUDA_ATTN_DEFAULT;
  im->attn_path = ATTN_CUBLAS;
  if (!strcmp(v, "cublas")) return PPSRT_OK;
  if (strcmp(v, "cudnn") && strcmp(v, "auto"))
    return PPSRT_FAIL(PPSRT_E_USAGE, "cuda: PPSRT_CUDA_ATTN=%s: expected cudnn, cublas or auto", v);
  im->attn_strict = !strcmp(v, "cudnn");
  char msg[600] = "";
#ifdef HAVE_CUDNN_FE
  if (pps_emu_name_stream) {
    snprintf(msg, sizeof msg, "the CUDA emulator has no cuDNN");
  } else {
    ppsrt_cudnn *c = NULL;
    if (ppsrt_cudnn_create(&c, msg, sizeof msg) == 0) {
      im->dnn = c;
      im->attn_path = ATTN_CUDNN;
      return PPSRT_OK;
    }
  }
#else
  snprintf(msg, sizeof msg, "this libppsrt was built without the cuDNN frontend headers");
#endif
  if (!im->attn_strict) return PPSRT_OK;
  return PPSRT_FAIL(PPSRT_E_BACKEND, "cuda: PPSRT_CUDA_ATTN=cudnn: %s\nhint: install cuDNN 9 (libcudnn.so.9 on the "
                    "library path, or PPSRT_CUDNN_LIB=PATH), rebuild with the frontend headers (./setup fetches them), or "
                    "set PPSRT_CUDA_ATTN=cublas", msg);
}

/* PPSRT_CUDA_EPILOGUE: which GEMM epilogues run fused through cuBLASLt (gemm_ep):
 * `none`, `lt` (all), or a comma-separated list of bias, bias_gelu, dgelu, bgrad. The
 * default is PPSRT_CUDA_EPILOGUE_DEFAULT: none until a GPU run has measured each against
 * the unfused kernels (bench/gpu/epilogue.sh; docs/gpu.md). */
#ifndef PPSRT_CUDA_EPILOGUE_DEFAULT
#define PPSRT_CUDA_EPILOGUE_DEFAULT "none"
#endif
static int epilogue_setup(ppsrt_backend *b) {
  static const struct { const char *name; unsigned bits; } names[] = {
      {"none", 0}, {"lt", PPSRT_EP_BIAS | PPSRT_EP_BIAS_GELU | PPSRT_EP_DGELU | PPSRT_EP_BGRAD},
      {"bias", PPSRT_EP_BIAS}, {"bias_gelu", PPSRT_EP_BIAS_GELU}, {"dgelu", PPSRT_EP_DGELU},
      {"bgrad", PPSRT_EP_BGRAD}};
  cuda_impl *im = IM(b);
  const char *v = getenv("PPSRT_CUDA_EPILOGUE");
  if (!v || !*v) v = PPSRT_CUDA_EPILOGUE_DEFAULT;
  unsigned mask = 0;
  for (const char *p = v; *p;) {
    size_t n = strcspn(p, ",");
    size_t i = 0;
    while (i < sizeof names / sizeof *names && (strlen(names[i].name) != n || strncmp(p, names[i].name, n))) i++;
    if (i == sizeof names / sizeof *names)
      return PPSRT_FAIL(PPSRT_E_USAGE, "cuda: PPSRT_CUDA_EPILOGUE=%s: expected none, lt, or a comma-separated list of "
                        "bias, bias_gelu, dgelu, bgrad", v);
    mask |= names[i].bits;
    p += n + (p[n] == ',');
  }
  if (!mask) return PPSRT_OK;
  int rc = ppsrt_lt_create(b, ppsrt_cuda_fail_cublas, &im->lt);
  if (rc) return rc;
  im->ep_mask = mask;
  b->epilogues = mask;
  b->gemm_ep = cu_gemm_ep;
  return PPSRT_OK;
}

static int setup(ppsrt_backend *b) {
  cuda_impl *im = IM(b);
  USE(b);
  /* The kernels must exist for this GPU: fail here, with the hint, rather than at the
   * first kernel of the first pass. */
  struct cudaFuncAttributes fa;
  CUDA_CHECK(b, ppsrt_cu_probe(&fa));
  int lo = 0, hi = 0;
  CUDA_CHECK(b, cudaDeviceGetStreamPriorityRange(&lo, &hi));   /* lo: least, hi: greatest priority */
  for (int s = 0; s < NST; s++) {
    int prio = (s == PPSRT_STREAM_SEND || s == PPSRT_STREAM_RECV) ? hi : lo;
    CUDA_CHECK(b, cudaStreamCreateWithPriority(&im->st[s], cudaStreamNonBlocking, prio));
    CUDA_CHECK(b, cudaEventCreateWithFlags(&im->sync_ev[s], cudaEventDisableTiming));
  }
  name_streams(b);
  for (int k = 0; k < 3; k++) CUDA_CHECK(b, cudaEventCreateWithFlags(&im->ws_ev[k], cudaEventDisableTiming));
  CUDA_CHECK(b, cudaEventCreateWithFlags(&im->pair_ev, cudaEventDisableTiming));
  /* one cuBLAS handle per compute stream: a handle's workspace must not be shared by
   * GEMMs running at the same time on two streams */
  CUBLAS_CHECK(b, cublasCreate(&im->blas));
  CUBLAS_CHECK(b, cublasSetPointerMode(im->blas, CUBLAS_POINTER_MODE_HOST));
  CUBLAS_CHECK(b, cublasCreate(&im->blas2));
  CUBLAS_CHECK(b, cublasSetPointerMode(im->blas2, CUBLAS_POINTER_MODE_HOST));
  CUBLAS_CHECK(b, cublasCreate(&im->blas3));
  CUBLAS_CHECK(b, cublasSetPointerMode(im->blas3, CUBLAS_POINTER_MODE_HOST));
  int rc = epilogue_setup(b);
  return rc ? rc : attn_setup(b);
}

/* The GPU a rank runs on. The runtime passes the device rank; ranks map onto the GPUs
 * visible as the NCCL transport places them:
 *  - device_index < 0: the current device;
 *  - one MPI rank per process (the NCCL transport called ppsrt_cuda_set_process_device,
 *    or the launcher exported a node-local rank): that process's GPU, local rank % ngpu;
 *  - otherwise (ranks as threads of one process): device_index % ngpu, so P ranks share
 *    one GPU on a single-GPU machine. */
static int process_device = -1;
void ppsrt_cuda_set_process_device(int dev) { process_device = dev; }

static int pick_device(int device_index, int ngpu) {
  if (device_index < 0) return -1;
  if (process_device >= 0) return process_device % ngpu;
  static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                               "PMI_LOCAL_RANK", "PMIX_LOCAL_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) {
      char *end;
      long r = strtol(v, &end, 10);
      if (!*end && r >= 0) return (int)(r % ngpu);
    }
  }
  return device_index % ngpu;
}

/* The CUDA runtime this library was built with needs a driver of at least its major
 * version (minor-version compatibility covers the rest); an older one makes every call
 * fail with cudaErrorInsufficientDriver, so say what it means here. No driver at all
 * (version 0) is left to the device check below. */
static int check_driver(void) {
  int drv = 0;
  if (cudaDriverGetVersion(&drv) != cudaSuccess) {
    (void)cudaGetLastError();
    return PPSRT_OK;
  }
  if (drv <= 0 || drv / 1000 >= CUDART_VERSION / 1000) return PPSRT_OK;
  return PPSRT_FAIL(PPSRT_E_BACKEND,
                    "cuda: the NVIDIA driver on host %s supports CUDA %d.%d, but this libppsrt was built with the CUDA "
                    "%d.%d toolkit, which needs a driver for CUDA %d.x or newer\n"
                    "hint: update the NVIDIA driver, or rebuild PPS with a toolkit the driver supports "
                    "(nvidia-smi shows its CUDA version): ../configure --with-cuda=/usr/local/cuda-%d.x",
                    ppsrt_cuda_hostname(), drv / 1000, drv % 1000 / 10, CUDART_VERSION / 1000,
                    CUDART_VERSION % 1000 / 10, CUDART_VERSION / 1000, drv / 1000);
}

int ppsrt_cuda_backend_create(int device_index, ppsrt_backend **out) {
  *out = NULL;
  int rc0 = check_driver();
  if (rc0) return rc0;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return PPSRT_FAIL(PPSRT_E_BACKEND,
                      "cuda: no CUDA device visible on host %s (cudaGetDeviceCount: %s)\n"
                      "hint: check nvidia-smi, the driver and CUDA_VISIBLE_DEVICES, or run with --backend cpu",
                      ppsrt_cuda_hostname(), e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
  }
  device_index = pick_device(device_index, n);
  if (device_index < 0) {
    e = cudaGetDevice(&device_index);
    if (e != cudaSuccess) return ppsrt_cuda_fail_cuda(NULL, (int)e, "cudaGetDevice", __FILE__, __LINE__);
  }
  ppsrt_backend *b = calloc(1, sizeof *b);
  cuda_impl *im = calloc(1, sizeof *im);
  if (!b || !im) {
    free(b);
    free(im);
    return PPSRT_FAIL(PPSRT_E_NOMEM, "cuda: cannot allocate the backend");
  }
  b->name = "cuda";
  b->act_dtype = PPSRT_BF16;
  b->device_index = device_index;
  b->impl = im;
  im->dev = device_index;
  im->rank = -1;
  im->hpool.host = 1;
  im->attn_ws_cap = env_mb("PPSRT_CUDA_ATTN_WS_MB", 2048) << 20;
  pthread_mutex_init(&im->mu, NULL);
  b->destroy = cu_destroy;
  int rc = setup(b);
  if (rc) {
    cu_destroy(b);
    return rc;
  }
  b->alloc = cu_alloc;
  b->trim = cu_trim;
  b->free = cu_free;
  b->host_alloc = cu_host_alloc;
  b->host_free = cu_host_free;
  b->memset0 = cu_memset0;
  b->memcpy_async = cu_memcpy_async;
  b->upload_f32 = cu_upload_f32;
  b->download_f32 = cu_download_f32;
  b->event_create = cu_event_create;
  b->event_destroy = cu_event_destroy;
  b->event_record = cu_event_record;
  b->stream_wait_event = cu_stream_wait_event;
  b->event_sync = cu_event_sync;
  b->event_query = cu_event_query;
  b->stream_sync = cu_stream_sync;
  b->event_elapsed = cu_event_elapsed;
  b->gemm = cu_gemm;
  b->gemm_strided = cu_gemm_strided;
  b->add_bias = cu_add_bias;
  b->bias_grad = cu_bias_grad;
  b->add = cu_add;
  b->gelu_fwd = cu_gelu_fwd;
  b->gelu_bwd = cu_gelu_bwd;
  b->layernorm_fwd = cu_layernorm_fwd;
  b->layernorm_bwd_input = cu_layernorm_bwd_input;
  b->layernorm_bwd_weight = cu_layernorm_bwd_weight;
  b->attention_fwd = cu_attention_fwd;
  b->attention_bwd = cu_attention_bwd;
  b->attention_fwd_at = cu_attention_fwd_at;
  b->copy_rows = cu_copy_rows;
  b->attention_bwd_at = cu_attention_bwd_at;
  b->bias_dropout_add = cu_bias_dropout_add;
  b->embedding_fwd = cu_embedding_fwd;
  b->embedding_bwd = cu_embedding_bwd;
  b->softmax_stats = cu_softmax_stats;
  b->softmax_xent_bwd = cu_softmax_xent_bwd;
  b->optimizer_step = cu_optimizer_step;
  b->axpy_f32 = cu_axpy_f32;
  b->scale_f32 = cu_scale_f32;
  b->mem_stats = cu_mem_stats;
  b->softmax_rescale_f32 = cu_softmax_rescale_f32;
  b->add_bias_gelu = cu_add_bias_gelu;
  b->rope = cu_rope;
  b->swiglu_fwd = cu_swiglu_fwd;
  b->moe_route = cu_moe_route;
  b->moe_route_bwd = cu_moe_route_bwd;
  b->moe_permute = cu_moe_permute;
  b->moe_permute_bwd = cu_moe_permute_bwd;
  b->moe_unpermute = cu_moe_unpermute;
  b->moe_unpermute_bwd = cu_moe_unpermute_bwd;
  b->swiglu_bwd = cu_swiglu_bwd;
  b->overlap = cu_overlap;
  b->convert = cu_convert;
  reg_add(b);
  *out = b;
  return PPSRT_OK;
}
