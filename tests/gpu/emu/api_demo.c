/* tests/gpu/emu/api_demo.c: a small CUDA + NCCL host program written against the
 * public APIs only (no libppsrt), run on the emulator by tests/gpu/emu_api.sh with
 * LD_PRELOAD=libppsrt_emu.so. Each mode is one ordering pattern, in a broken and a fixed
 * form: the broken ones must make the emulator fail the run (race: exit 66, NCCL
 * deadlock: exit 67), the fixed ones must pass and compute the right numbers (exit 0;
 * a wrong value exits 1). Usage: api_demo MODE (see main). */
#include "config.h"
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
#endif

int main(int argc, char **argv) {
  const char *m = argc > 1 ? argv[1] : "";
  int rc;
  if (!strcmp(m, "streams-race")) rc = two_streams(0);
  else if (!strcmp(m, "streams-event")) rc = two_streams(1);
  else if (!strcmp(m, "upload-race")) rc = upload(0);
  else if (!strcmp(m, "upload-pinned")) rc = upload(1);
  else if (!strcmp(m, "legacy")) rc = legacy();
#ifdef HAVE_NCCL
  else if (!strcmp(m, "nccl-ungrouped")) rc = nccl_ring(0, 0);
  else if (!strcmp(m, "nccl-grouped")) rc = nccl_ring(1, 0);
  else if (!strcmp(m, "nccl-allreduce")) rc = nccl_ring(0, 1);
#endif
  else {
    fprintf(stderr, "usage: api_demo streams-race|streams-event|upload-race|upload-pinned|legacy"
                    "|nccl-ungrouped|nccl-grouped|nccl-allreduce\n");
    return 2;
  }
  if (!rc) printf("%s: ok\n", m);
  return rc;
}
