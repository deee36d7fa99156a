/* tests/gpu/emu/api_demo.c: a small CUDA + NCCL host program written against the
 * public APIs only (no libppsrt), run on the emulator by tests/gpu/emu_api.sh with
 * LD_PRELOAD=libppsrt_emu.so. Each mode is one ordering pattern, in a broken and a fixed
 * form: the broken ones must make the emulator fail the run (race: exit 66, NCCL
 * deadlock: exit 67), the fixed ones must pass and compute the right numbers (exit 0;
 * a wrong value exits 1). Also the runtime queries an ordinary program makes (queries),
 * and a call the emulator does not implement, a launch of the program's own kernel and
 * work queued on a destroyed stream (unsupported, launch, destroyed-stream: the
 * emulator must stop them, exit 69, naming the call); ncclReduceScatter and ncclAllGather
 * (nccl_blocks: values, a race on an all-gather's result, overlapping buffers).
 * Usage: api_demo MODE (see main). */
#include "config.h"
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef HAVE_NCCL
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#endif

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
      exit(2);                                                                              \
    }                                                                                       \
  } while (0)

#define N 4096

static int check_bytes(const unsigned char *p, size_t n, unsigned char v, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) {
      fprintf(stderr, "%s: byte %zu is %u, expected %u\n", what, i, p[i], v);
      return 1;
    }
  return 0;
}

/* a producer stream writes, a consumer stream reads; fixed: an event orders them */
static int two_streams(int fixed) {
  cudaStream_t a, b;
  CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  unsigned char *x, *y, *h;
  CK(cudaMalloc((void **)&x, N));
  CK(cudaMalloc((void **)&y, N));
  CK(cudaMallocHost((void **)&h, N));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaMemsetAsync(x, 7, N, a));
  if (fixed) {
    CK(cudaEventRecord(ev, a));
    CK(cudaStreamWaitEvent(b, ev, 0));
  }
  CK(cudaMemcpyAsync(y, x, N, cudaMemcpyDeviceToDevice, b));
  CK(cudaMemcpyAsync(h, y, N, cudaMemcpyDeviceToHost, b));
  CK(cudaStreamSynchronize(b));
  int rc = check_bytes(h, N, 7, "two streams");
  CK(cudaEventDestroy(ev));
  CK(cudaFreeHost(h));
  CK(cudaFree(x));
  CK(cudaFree(y));
  CK(cudaStreamDestroy(a));
  CK(cudaStreamDestroy(b));
  return rc;
}

/* an upload with cudaMemcpy from pageable memory, then a read on a non-blocking stream;
 * fixed: pinned staging and cudaMemcpyAsync on the consuming stream */
static int upload(int fixed) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned char *d, *out, *src = malloc(N), *pin;
  memset(src, 9, N);
  CK(cudaMalloc((void **)&d, N));
  CK(cudaMallocHost((void **)&out, N));
  CK(cudaMallocHost((void **)&pin, N));
  if (fixed) {
    memcpy(pin, src, N);
    CK(cudaMemcpyAsync(d, pin, N, cudaMemcpyHostToDevice, s));
  } else {
    CK(cudaMemcpy(d, src, N, cudaMemcpyHostToDevice));
  }
  CK(cudaMemcpyAsync(out, d, N, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  int rc = check_bytes(out, N, 9, "upload");
  free(src);
  CK(cudaFreeHost(out));
  CK(cudaFreeHost(pin));
  CK(cudaFree(d));
  CK(cudaStreamDestroy(s));
  return rc;
}

/* a blocking stream (cudaStreamCreate) is ordered after the legacy stream's cudaMemcpy:
 * no race even without an event */
static int legacy(void) {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  unsigned char *d, *out, *src = malloc(N);
  memset(src, 5, N);
  CK(cudaMalloc((void **)&d, N));
  CK(cudaMallocHost((void **)&out, N));
  CK(cudaMemcpy(d, src, N, cudaMemcpyHostToDevice));
  CK(cudaMemcpyAsync(out, d, N, cudaMemcpyDeviceToHost, s));
  CK(cudaDeviceSynchronize());
  int rc = check_bytes(out, N, 5, "legacy");
  /* the host reused a buffer a stream still writes: only a host sync orders it */
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  CK(cudaEventRecord(t0, s));
  CK(cudaMemsetAsync(d, 1, N, s));
  CK(cudaEventRecord(t1, s));
  CK(cudaEventSynchronize(t1));
  float ms = -1;
  CK(cudaEventElapsedTime(&ms, t0, t1));
  if (!(ms >= 0)) {
    fprintf(stderr, "elapsed time %g\n", ms);
    rc = 1;
  }
  CK(cudaMemcpy(out, d, N, cudaMemcpyDeviceToHost));
  rc |= check_bytes(out, N, 1, "memset after a host sync");
  if (cudaGetLastError() != cudaSuccess) rc = 1;
  CK(cudaEventDestroy(t0));
  CK(cudaEventDestroy(t1));
  free(src);
  CK(cudaFreeHost(out));
  CK(cudaFree(d));
  CK(cudaStreamDestroy(s));
  return rc;
}

#ifdef HAVE_NCCL
#define NR 3
typedef struct rk {
  int r, grouped, coll;
  ncclUniqueId id;
  int rc;
} rk;

static void *rank_main(void *arg) {
  rk *me = arg;
  int r = me->r;
  ncclComm_t c;
  if (ncclCommInitRank(&c, NR, me->id, r) != ncclSuccess) {
    me->rc = 3;
    return NULL;
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *sb, *rb, h[64];
  CK(cudaMalloc((void **)&sb, sizeof h));
  CK(cudaMalloc((void **)&rb, sizeof h));
  for (int i = 0; i < 64; i++) h[i] = (float)(r * 100 + i);
  CK(cudaMemcpyAsync(sb, h, sizeof h, cudaMemcpyHostToDevice, s));
  if (me->coll) {
    if (ncclAllReduce(sb, rb, 64, ncclFloat32, ncclSum, c, s) != ncclSuccess) me->rc = 4;
  } else {
    /* a ring: send to the right, receive from the left */
    int right = (r + 1) % NR, left = (r + NR - 1) % NR;
    if (me->grouped) ncclGroupStart();
    if (ncclSend(sb, 64, ncclFloat32, right, c, s) != ncclSuccess) me->rc = 4;
    if (ncclRecv(rb, 64, ncclFloat32, left, c, s) != ncclSuccess) me->rc = 4;
    if (me->grouped) ncclGroupEnd();
  }
  CK(cudaMemcpyAsync(h, rb, sizeof h, cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  for (int i = 0; i < 64 && !me->rc; i++) {
    float want = me->coll ? (float)(100 * (0 + 1 + 2) + NR * i) : (float)(((r + NR - 1) % NR) * 100 + i);
    if (h[i] != want) {
      fprintf(stderr, "rank %d: value %d is %g, expected %g\n", r, i, h[i], want);
      me->rc = 1;
    }
  }
  ncclCommDestroy(c);
  CK(cudaFree(sb));
  CK(cudaFree(rb));
  CK(cudaStreamDestroy(s));
  return NULL;
}

static int nccl_ring(int grouped, int coll) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 3;
  pthread_t th[NR];
  rk a[NR];
  for (int r = 0; r < NR; r++) {
    a[r] = (rk){r, grouped, coll, id, 0};
    pthread_create(&th[r], NULL, rank_main, &a[r]);
  }
  int rc = 0;
  for (int r = 0; r < NR; r++) {
    pthread_join(th[r], NULL);
    rc |= a[r].rc;
  }
  return rc;
}

/* The same ring (and, grouped, an all-reduce on a second communicator) with each rank a
 * process of `mpirun -np 3` (Open MPI's OMPI_COMM_WORLD_RANK): rank 0 makes each
 * ncclUniqueId and leaves it in TMPDIR/api_demo.MODE.PHASE.id for the others (a fresh
 * TMPDIR per run: the files stay). */
static int nccl_mpi(const char *mode, int grouped) {
  const char *rs = getenv("OMPI_COMM_WORLD_RANK"), *ns = getenv("OMPI_COMM_WORLD_SIZE"), *dir = getenv("TMPDIR");
  if (!rs || !ns || atoi(ns) != NR || !dir) {
    fprintf(stderr, "%s: run under mpirun -np %d with TMPDIR set\n", mode, NR);
    return 2;
  }
  int r = atoi(rs), rc = 0;
  for (int phase = 0; phase < (grouped ? 2 : 1) && !rc; phase++) {
    rk a = {r, grouped, phase, {{0}}, 0};
    char path[512], tmp[600];
    snprintf(path, sizeof path, "%s/api_demo.%s.%d.id", dir, mode, phase);
    if (r == 0) {
      snprintf(tmp, sizeof tmp, "%s.tmp", path);
      FILE *f = fopen(tmp, "wb");
      if (ncclGetUniqueId(&a.id) != ncclSuccess || !f || fwrite(&a.id, sizeof a.id, 1, f) != 1 || fclose(f) ||
          rename(tmp, path))
        return 3;
    } else {
      FILE *f = NULL;
      for (int t = 0; t < 10000 && !(f = fopen(path, "rb")); t++) usleep(1000);
      if (!f || fread(&a.id, sizeof a.id, 1, f) != 1) return 3;
      fclose(f);
    }
    rank_main(&a);
    rc |= a.rc;
  }
  return rc;
}
#endif

#ifdef HAVE_NCCL
/* ncclReduceScatter and ncclAllGather on two communicators of one thread
 * (ncclCommInitAll on GPUs 0 and 1, each call a group of both ranks): out of place and in
 * place (recvbuff = sendbuff + rank x recvcount; sendbuff = recvbuff + rank x sendcount),
 * values checked; then rank 0's all-gather result, block 1 (rank 1's), read on another
 * stream: after an event (nccl-blocks-event) or without one (nccl-blocks-race: a race
 * on the bytes the all-gather wrote). nccl-rs-overlap / nccl-ag-overlap: buffers that
 * overlap other than in place (undefined in NCCL: the emulator stops, exit 69). */
#define NB 3   /* floats a block */
static int blocks_check(const float *d, int n, float (*want)(int), const char *what) {
  float h[2 * NB];
  CK(cudaMemcpy(h, d, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++)
    if (h[i] != want(i)) {
      fprintf(stderr, "%s: value %d is %g, expected %g\n", what, i, h[i], want(i));
      return 1;
    }
  return 0;
}
static float rs_r0(int i) { return (float)(0 * 10 + 0 * 3 + i + 1 * 10 + 0 * 3 + i); }   /* rank p's block q: 10 p + 3 q + i */
static float rs_r1(int i) { return (float)(0 * 10 + 1 * 3 + i + 1 * 10 + 1 * 3 + i); }
static float ag_all(int i) { return i < NB ? rs_r0(i) : rs_r1(i - NB); }
static int nccl_blocks(const char *mode) {
  ncclComm_t c[2];
  if (ncclCommInitAll(c, 2, NULL) != ncclSuccess) return 3;
  cudaStream_t s[2], other;
  float *sb[2], *rb[2], *ag[2], *ag2[2], h[2 * NB];
  for (int r = 0; r < 2; r++) {
    CK(cudaSetDevice(r));
    CK(cudaStreamCreateWithFlags(&s[r], cudaStreamNonBlocking));
    CK(cudaMalloc((void **)&sb[r], sizeof h));
    CK(cudaMalloc((void **)&rb[r], NB * sizeof *h));
    CK(cudaMalloc((void **)&ag[r], sizeof h));
    CK(cudaMalloc((void **)&ag2[r], sizeof h));
    for (int q = 0; q < 2; q++)
      for (int i = 0; i < NB; i++) h[q * NB + i] = (float)(10 * r + 3 * q + i);
    CK(cudaMemcpy(sb[r], h, sizeof h, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());   /* (a pageable upload may return before it lands) */
  }
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  if (!strcmp(mode, "nccl-rs-overlap")) {
    (void)ncclReduceScatter(sb[0], sb[0] + 1, NB, ncclFloat32, ncclSum, c[0], s[0]);
    fprintf(stderr, "the emulator took a reduce-scatter whose recvbuff overlaps sendbuff other than in place\n");
    return 1;
  }
  if (!strcmp(mode, "nccl-ag-overlap")) {
    (void)ncclAllGather(ag[0] + 1, ag[0], NB, ncclFloat32, c[0], s[0]);
    fprintf(stderr, "the emulator took an all-gather whose sendbuff overlaps recvbuff other than in place\n");
    return 1;
  }
  int rc = 0;
  ncclGroupStart();   /* out of place */
  for (int r = 0; r < 2; r++)
    if (ncclReduceScatter(sb[r], rb[r], NB, ncclFloat32, ncclSum, c[r], s[r]) != ncclSuccess) rc = 4;
  ncclGroupEnd();
  ncclGroupStart();
  for (int r = 0; r < 2; r++)
    if (ncclAllGather(rb[r], ag[r], NB, ncclFloat32, c[r], s[r]) != ncclSuccess) rc = 4;
  ncclGroupEnd();
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  if (strcmp(mode, "nccl-blocks-race") != 0) {
    CK(cudaEventRecord(ev, s[0]));
    CK(cudaStreamWaitEvent(other, ev, 0));
  }
  CK(cudaMemcpyAsync(h, ag[0] + NB, NB * sizeof *h, cudaMemcpyDeviceToHost, other));   /* rank 1's block */
  CK(cudaStreamSynchronize(other));
  for (int i = 0; i < NB && !rc; i++)
    if (h[i] != rs_r1(i)) {
      fprintf(stderr, "all-gather block 1, read on another stream: value %d is %g, expected %g\n", i, h[i], rs_r1(i));
      rc = 1;
    }
  for (int r = 0; r < 2; r++) CK(cudaStreamSynchronize(s[r]));
  rc = rc ? rc : blocks_check(rb[0], NB, rs_r0, "reduce-scatter, rank 0") || blocks_check(rb[1], NB, rs_r1, "reduce-scatter, rank 1") ||
       blocks_check(ag[0], 2 * NB, ag_all, "all-gather, rank 0") || blocks_check(ag[1], 2 * NB, ag_all, "all-gather, rank 1");
  /* in place: the reduce-scatter into sendbuff's own block, the all-gather from recvbuff's */
  for (int r = 0; r < 2; r++) {
    CK(cudaSetDevice(r));
    CK(cudaMemcpy(ag2[r] + r * NB, rb[r], NB * sizeof *h, cudaMemcpyDeviceToDevice));
    CK(cudaDeviceSynchronize());   /* (device to device does not wait) */
  }
  ncclGroupStart();
  for (int r = 0; r < 2; r++)
    if (ncclReduceScatter(sb[r], sb[r] + r * NB, NB, ncclFloat32, ncclSum, c[r], s[r]) != ncclSuccess) rc = 4;
  ncclGroupEnd();
  ncclGroupStart();
  for (int r = 0; r < 2; r++)
    if (ncclAllGather(ag2[r] + r * NB, ag2[r], NB, ncclFloat32, c[r], s[r]) != ncclSuccess) rc = 4;
  ncclGroupEnd();
  for (int r = 0; r < 2; r++) CK(cudaStreamSynchronize(s[r]));
  rc = rc ? rc : blocks_check(sb[0], NB, rs_r0, "reduce-scatter in place, rank 0") ||
       blocks_check(sb[1] + NB, NB, rs_r1, "reduce-scatter in place, rank 1") ||
       blocks_check(ag2[0], 2 * NB, ag_all, "all-gather in place, rank 0") || blocks_check(ag2[1], 2 * NB, ag_all, "all-gather in place, rank 1");
  for (int r = 0; r < 2; r++) ncclCommDestroy(c[r]);
  CK(cudaEventDestroy(ev));   /* (the ASan build's leak check) */
  return rc;
}
#endif

/* Runtime calls an ordinary host program makes besides streams and copies: memory
 * info, pointer attributes, device attributes, stream queries, a host function queued
 * on a stream. Exit 1 on a wrong answer. */
static int hostfn_ran;
static void CUDART_CB hostfn(void *p) { *(int *)p = 1; }
static int queries(void) {
  size_t fr0, tot, fr1;
  void *d, *h;
  int bad = 0, major = 0, sms = 0, prio = 7;
  unsigned flags = 7;
  CK(cudaMemGetInfo(&fr0, &tot));
  CK(cudaMalloc(&d, 1 << 20));
  CK(cudaMemGetInfo(&fr1, &tot));
  if (!(tot > 0 && fr0 <= tot && fr0 - fr1 >= (1 << 20))) { fprintf(stderr, "cudaMemGetInfo: free %zu -> %zu of %zu\n", fr0, fr1, tot); bad = 1; }
  CK(cudaMallocHost(&h, 4096));
  struct cudaPointerAttributes a;
  int x = 0;
  CK(cudaPointerGetAttributes(&a, (char *)d + 100));
  if (a.type != cudaMemoryTypeDevice) { fprintf(stderr, "device pointer: type %d\n", (int)a.type); bad = 1; }
  CK(cudaPointerGetAttributes(&a, h));
  if (a.type != cudaMemoryTypeHost) { fprintf(stderr, "pinned pointer: type %d\n", (int)a.type); bad = 1; }
  CK(cudaPointerGetAttributes(&a, &x));
  if (a.type != cudaMemoryTypeUnregistered) { fprintf(stderr, "stack pointer: type %d\n", (int)a.type); bad = 1; }
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (major < 8 || sms < 1) { fprintf(stderr, "attributes: major %d, SMs %d\n", major, sms); bad = 1; }
  cudaStream_t s;
  CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -1));
  CK(cudaStreamGetPriority(s, &prio));
  CK(cudaStreamGetFlags(s, &flags));
  if (prio != -1 || flags != cudaStreamNonBlocking) { fprintf(stderr, "stream: priority %d, flags %u\n", prio, flags); bad = 1; }
  CK(cudaMemsetAsync(d, 0, 1 << 20, s));
  CK(cudaLaunchHostFunc(s, hostfn, &hostfn_ran));
  CK(cudaStreamSynchronize(s));
  if (!hostfn_ran) { fprintf(stderr, "cudaLaunchHostFunc: the function did not run before the stream drained\n"); bad = 1; }
  CK(cudaStreamDestroy(s));
  CK(cudaFree(d));
  CK(cudaFreeHost(h));
  return bad;
}

/* A call the emulator does not implement, and a launch of a kernel of the program's
 * own: both must stop the run (exit 69) naming the call. */
static int unsupported(int launch) {
  void *d;
  CK(cudaMalloc(&d, 4096));
  if (launch) {
    void *args[1] = {&d};
    dim3 one = {1, 1, 1};
    CK(cudaLaunchKernel((const void *)unsupported, one, one, args, 0, 0));
  } else {
    CK(cudaMemcpy2D(d, 64, d, 64, 64, 4, cudaMemcpyDeviceToDevice));
  }
  fprintf(stderr, "the emulator ran what it cannot\n");
  return 1;
}

/* Work queued on a stream after cudaStreamDestroy: undefined in CUDA, so the emulator
 * must stop the run (exit 69) naming the call and the stream. */
static int destroyed_stream(void) {
  cudaStream_t s;
  void *d;
  CK(cudaMalloc(&d, 4096));
  CK(cudaStreamCreate(&s));
  CK(cudaStreamDestroy(s));
  CK(cudaMemsetAsync(d, 0, 4096, s));
  CK(cudaStreamSynchronize(s));
  fprintf(stderr, "the emulator used a destroyed stream\n");
  return 1;
}

/* The same for an event recorded after cudaEventDestroy. */
static int destroyed_event(void) {
  cudaEvent_t e;
  CK(cudaEventCreate(&e));
  CK(cudaEventDestroy(e));
  CK(cudaEventRecord(e, 0));
  fprintf(stderr, "the emulator used a destroyed event\n");
  return 1;
}

#ifdef HAVE_NCCL
/* ncclCommAbort ends the rank's operations (NCCL's kernels): an all-reduce of 2 ranks
 * that rank 1 never joins, then rank 0 aborts its communicator; its stream must finish
 * (the emulator exits 67 if the all-reduce stays pending: PPS_EMU_TIMEOUT). */
static int abort_coll(void) {
  ncclComm_t c[2];
  int devs[2] = {0, 1};
  float *d;
  cudaStream_t s;
  if (ncclCommInitAll(c, 2, devs) != ncclSuccess) return 3;
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaMalloc((void **)&d, 64));
  if (ncclAllReduce(d, d, 16, ncclFloat32, ncclSum, c[0], s) != ncclSuccess) return 4;
  if (ncclCommAbort(c[0]) != ncclSuccess) return 5;
  CK(cudaStreamSynchronize(s));
  (void)ncclCommAbort(c[1]);
  CK(cudaStreamDestroy(s));
  CK(cudaFree(d));
  return 0;
}

/* The same for an NCCL communicator used after ncclCommDestroy. */
static int destroyed_comm(void) {
  ncclComm_t c;
  float *d;
  CK(cudaMalloc((void **)&d, 64));
  if (ncclCommInitAll(&c, 1, NULL) != ncclSuccess || ncclCommDestroy(c) != ncclSuccess) return 3;
  (void)ncclAllReduce(d, d, 16, ncclFloat32, ncclSum, c, 0);
  fprintf(stderr, "the emulator used a destroyed communicator\n");
  return 1;
}
#endif

int main(int argc, char **argv) {
  const char *m = argc > 1 ? argv[1] : "";
  int rc;
  if (!strcmp(m, "streams-race")) rc = two_streams(0);
  else if (!strcmp(m, "streams-event")) rc = two_streams(1);
  else if (!strcmp(m, "upload-race")) rc = upload(0);
  else if (!strcmp(m, "upload-pinned")) rc = upload(1);
  else if (!strcmp(m, "legacy")) rc = legacy();
  else if (!strcmp(m, "queries")) rc = queries();
  else if (!strcmp(m, "unsupported")) rc = unsupported(0);
  else if (!strcmp(m, "launch")) rc = unsupported(1);
  else if (!strcmp(m, "destroyed-stream")) rc = destroyed_stream();
  else if (!strcmp(m, "destroyed-event")) rc = destroyed_event();
#ifdef HAVE_NCCL
  else if (!strcmp(m, "nccl-ungrouped")) rc = nccl_ring(0, 0);
  else if (!strcmp(m, "nccl-grouped")) rc = nccl_ring(1, 0);
  else if (!strcmp(m, "nccl-allreduce")) rc = nccl_ring(0, 1);
  else if (!strcmp(m, "nccl-mpi-grouped")) rc = nccl_mpi(m, 1);
  else if (!strcmp(m, "destroyed-comm")) rc = destroyed_comm();
  else if (!strcmp(m, "nccl-abort-coll")) rc = abort_coll();
  else if (!strcmp(m, "nccl-mpi-ungrouped")) rc = nccl_mpi(m, 0);
  else if (!strncmp(m, "nccl-blocks-", 12) || !strcmp(m, "nccl-rs-overlap") || !strcmp(m, "nccl-ag-overlap"))
    rc = nccl_blocks(m);
#endif
  else {
    fprintf(stderr, "usage: api_demo streams-race|streams-event|upload-race|upload-pinned|legacy|queries"
                    "|unsupported|launch|destroyed-stream|destroyed-event|destroyed-comm|nccl-abort-coll|nccl-ungrouped|nccl-grouped|nccl-allreduce|nccl-mpi-grouped"
                    "|nccl-mpi-ungrouped|nccl-blocks-event|nccl-blocks-race|nccl-rs-overlap|nccl-ag-overlap\n");
    return 2;
  }
  if (!rc) printf("%s: ok\n", m);
  return rc;
}
