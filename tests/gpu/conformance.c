/* tests/gpu/conformance.c: the CUDA runtime, cuBLAS and NCCL answers that the emulator
 * (tests/gpu/emu) must give as a GPU does. It makes the API calls behind each row of
 * ../shared/gpu/emulator-vs-h200.md (and a few neighbours) and prints one line per
 * answer, "name: value"; lines starting with '#' describe the machine and are not
 * compared. The same binary (linked against the real cudart, cuBLAS and NCCL) runs
 *  - on a GPU: tests/gpu/conformance_gpu.sh compares its output with the record in
 *    tests/gpu/conformance.expected and prints every disagreement (a GPU session
 *    refreshes the record: conformance > conformance.expected);
 *  - on the emulator (LD_PRELOAD=tests/gpu/emu/libppsrt_emu.so, seeds 1-3):
 *    tests/gpu/conformance_emu.sh compares it with the same record.
 * Its two kernels (conformance_kern.cu) are launched with cudaLaunchKernel; under the
 * emulator the program hands it their host versions through pps_emu_register_kernel
 * (a weak reference: absent on a GPU). Gates are 200 ms spin kernels; the whole run
 * takes a few seconds on a GPU (NCCL's start-up included). Each section (launch,
 * streams, memory, device, cublas, cublaslt, nccl, errors) runs in a process of its own.
 * Usage: conformance [--gate-ms N] [--section NAME] */
#include "config.h"
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#ifdef HAVE_NCCL
#include <nccl.h>
#endif
#pragma GCC diagnostic pop

extern const void *conf_spin_kernel(void);
extern const void *conf_nop_kernel(void);
/* Not CUDA: the emulator's hook (fake_cuda.c) for a program's own kernels */
extern void pps_emu_register_kernel(const void *func, const char *name, void (*host)(void **args), int nargs,
                                    const size_t *argsize) __attribute__((weak));

static double gate_s = 0.2;


static void spin_host(void **args) {   /* conf_spin on the host: sleeps */
  unsigned long long ns = *(const unsigned long long *)args[0];
  struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
  nanosleep(&ts, NULL);
}
static void nop_host(void **args) { (void)args; }

static const char *en(cudaError_t e) {
  static char buf[8][96];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s (%d)", cudaGetErrorName(e), (int)e);
  return buf[k];
}

#define OUT(name, ...) (printf("%s: ", name), printf(__VA_ARGS__), putchar('\n'), fflush(stdout))

/* a call the program relies on: failing it is not an answer but a broken run */
#define NEED(x)                                                                               \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "conformance: %s:%d: %s: %s\n", __FILE__, __LINE__, #x, en(e_));        \
      exit(2);                                                                                \
    }                                                                                         \
  } while (0)

static cudaError_t spin(cudaStream_t s) {
  unsigned long long ns = (unsigned long long)(gate_s * 1e9);
  void *args[] = {&ns};
  return cudaLaunchKernel(conf_spin_kernel(), (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, s);
}

static cudaError_t nop(dim3 g, dim3 b, size_t smem, cudaStream_t s) {
  int x = 0;
  void *args[] = {&x};
  return cudaLaunchKernel(conf_nop_kernel(), g, b, args, smem, s);
}

/* A gate on `busy`, then a nop on `probe`: "waits" when the probe's work completed only
 * after the gate, "does not wait" when it completed while the gate still held (polled:
 * no timing threshold). */
static const char *order(cudaStream_t busy, cudaStream_t probe) {
  cudaEvent_t e;
  NEED(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  NEED(spin(busy));
  NEED(cudaEventRecord(e, busy));
  NEED(nop((dim3){1, 1, 1}, (dim3){1, 1, 1}, 0, probe));
  const char *ans = "no answer";
  for (;;) {
    cudaError_t q = cudaStreamQuery(probe);
    if (q == cudaSuccess) {
      ans = cudaEventQuery(e) == cudaSuccess ? "waits" : "does not wait";
      break;
    }
    if (q != cudaErrorNotReady) {
      ans = en(q);
      break;
    }
    usleep(500);
  }
  NEED(cudaDeviceSynchronize());
  NEED(cudaEventDestroy(e));
  return ans;
}

/* A gate on `busy`, then cudaStreamSynchronize of the legacy stream: "waits" when the
 * gate had finished when the call returned. */
static const char *sync_legacy_waits(cudaStream_t busy) {
  cudaEvent_t e;
  NEED(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  NEED(spin(busy));
  NEED(cudaEventRecord(e, busy));
  cudaError_t r = cudaStreamSynchronize(0), q = cudaEventQuery(e);
  NEED(cudaDeviceSynchronize());
  NEED(cudaEventDestroy(e));
  return r != cudaSuccess ? "error" : q == cudaSuccess ? "waits" : "does not wait";
}

/* A gate on `busy`, then a pageable cudaMemcpy to the device: "waits" when the gate had
 * finished when the call returned. */
static const char *copy_waits(cudaStream_t busy, void *d, const void *page, size_t n) {
  cudaEvent_t e;
  NEED(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  NEED(spin(busy));
  NEED(cudaEventRecord(e, busy));
  cudaError_t r = cudaMemcpy(d, page, n, cudaMemcpyHostToDevice);
  cudaError_t q = cudaEventQuery(e);
  NEED(cudaDeviceSynchronize());
  NEED(cudaEventDestroy(e));
  static char buf[2][128];
  static int k;
  k ^= 1;
  snprintf(buf[k], sizeof buf[k], "%s, %s", en(r),
           q == cudaSuccess ? "returns after the earlier work" : "returns before the earlier work finished");
  return buf[k];
}

/* ---- launches ---- */
static void t_launch(void) {
  static const struct { const char *name; dim3 g, b; } bad[] = {
    {"launch grid.y 70000", {1, 70000, 1}, {1, 1, 1}},
    {"launch block 2048", {1, 1, 1}, {2048, 1, 1}},
    {"launch empty grid", {0, 1, 1}, {1, 1, 1}},
    {"launch block.z 128", {1, 1, 1}, {1, 1, 128}},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    (void)cudaGetLastError();
    cudaError_t r = nop(bad[i].g, bad[i].b, 0, 0);
    cudaError_t p1 = cudaPeekAtLastError(), p2 = cudaPeekAtLastError(), g1 = cudaGetLastError(), g2 = cudaGetLastError();
    OUT(bad[i].name, "returns %s; peek %s, peek %s, get %s, then get %s", en(r), en(p1), en(p2), en(g1), en(g2));
  }
  (void)cudaGetLastError();
  cudaError_t r = nop((dim3){1, 1, 1}, (dim3){1, 1, 1}, (size_t)1 << 30, 0);
  cudaError_t g1 = cudaGetLastError(), g2 = cudaGetLastError();
  OUT("launch with 1 GiB of dynamic shared memory", "returns %s; get %s, then get %s", en(r), en(g1), en(g2));
  r = nop((dim3){2, 2, 1}, (dim3){32, 32, 1}, 0, 0);
  cudaError_t s = cudaDeviceSynchronize();
  OUT("a valid launch after them", "returns %s; synchronize %s, get %s", en(r), en(s), en(cudaGetLastError()));
}

/* ---- blocking and stream semantics ---- */
static void t_streams(void) {
  cudaStream_t S, NB;
  NEED(cudaStreamCreate(&S));
  NEED(cudaStreamCreateWithFlags(&NB, cudaStreamNonBlocking));
  size_t n = 4096;
  char *page = malloc(n), *d;
  memset(page, 3, n);
  NEED(cudaMalloc((void **)&d, n));

  cudaError_t r = cudaMemcpy(d, page, n, cudaMemcpyHostToDevice);   /* the staging path is warm */
  NEED(cudaDeviceSynchronize());
  OUT("cudaMemcpy pageable to device while the legacy stream is busy", "%s", copy_waits(0, d, page, n));
  OUT("cudaMemcpy pageable to device while a blocking stream is busy", "%s", copy_waits(S, d, page, n));
  OUT("cudaStreamPerThread after a busy blocking stream", "%s", order(S, cudaStreamPerThread));
  OUT("a blocking stream after a busy cudaStreamPerThread", "%s", order(cudaStreamPerThread, S));
  OUT("cudaStreamPerThread after a busy legacy stream", "%s", order(0, cudaStreamPerThread));
  OUT("a non-blocking stream after a busy legacy stream", "%s", order(0, NB));

  NEED(spin(S));
  r = cudaSuccess;
  cudaError_t ql = cudaStreamQuery(0), qs = cudaStreamQuery(S), qn = cudaStreamQuery(NB);
  OUT("cudaStreamQuery while a blocking stream is busy", "legacy %s, that stream %s, a non-blocking stream %s", en(ql),
      en(qs), en(qn));
  NEED(cudaDeviceSynchronize());
  (void)cudaGetLastError();
  OUT("cudaStreamSynchronize(legacy) while a blocking stream is busy", "%s", sync_legacy_waits(S));
  OUT("cudaStreamSynchronize(legacy) while a non-blocking stream is busy", "%s", sync_legacy_waits(NB));

  int ok = 0, tries = 20;
  for (int i = 0; i < tries; i++) {
    NEED(cudaMemsetAsync(d, i, n, S));
    NEED(nop((dim3){1, 1, 1}, (dim3){1, 1, 1}, 0, S));
    NEED(cudaStreamSynchronize(S));
    ok += cudaStreamQuery(S) == cudaSuccess;
  }
  OUT("cudaStreamQuery right after cudaStreamSynchronize", "cudaSuccess %d of %d times", ok, tries);
  ok = 0;
  for (int i = 0; i < tries; i++) {
    NEED(cudaMemsetAsync(d, i, n, 0));
    NEED(cudaDeviceSynchronize());
    ok += cudaStreamQuery(0) == cudaSuccess && cudaStreamQuery(S) == cudaSuccess;
  }
  OUT("cudaStreamQuery right after cudaDeviceSynchronize", "cudaSuccess %d of %d times", ok, tries);

  int least = 1, greatest = 1;
  r = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  OUT("cudaDeviceGetStreamPriorityRange", "%s, least %d, greatest %d", en(r), least, greatest);
  static const int asked[] = {-100, -3, 0, 100};
  for (int i = 0; i < 4; i++) {
    cudaStream_t p;
    int got = 12345;
    r = cudaStreamCreateWithPriority(&p, cudaStreamNonBlocking, asked[i]);
    if (r == cudaSuccess) {
      NEED(cudaStreamGetPriority(p, &got));
      NEED(cudaStreamDestroy(p));
    }
    char name[64];
    snprintf(name, sizeof name, "stream created with priority %d", asked[i]);
    OUT(name, "%s, priority %d", en(r), got);
  }
  NEED(cudaFree(d));
  free(page);
  NEED(cudaStreamDestroy(S));
  NEED(cudaStreamDestroy(NB));
}

/* ---- memory: argument validation ---- */
static void t_memory(void) {
  size_t n = 4096;
  char *d, *d2, *pin, *page = malloc(n), *page2 = malloc(n);
  memset(page, 1, n);
  NEED(cudaMalloc((void **)&d, n));
  NEED(cudaMalloc((void **)&d2, n));
  NEED(cudaMallocHost((void **)&pin, n));
  void *wild = (void *)(uintptr_t)0x7e5a00000000ULL;
  (void)cudaGetLastError();

  cudaError_t r = cudaMemcpy(wild, page, 64, cudaMemcpyHostToDevice);
  OUT("cudaMemcpy host to device into a wild device pointer", "%s; get %s", en(r), en(cudaGetLastError()));
  r = cudaMemcpy(page2, wild, 64, cudaMemcpyDeviceToHost);
  OUT("cudaMemcpy device to host from a wild device pointer", "%s", en(r));
  r = cudaMemcpy(d, wild, 64, cudaMemcpyDeviceToDevice);
  OUT("cudaMemcpy device to device from a wild device pointer", "%s", en(r));
  r = cudaMemset(d + n - 100, 0, 200);
  OUT("cudaMemset past the end of an allocation", "%s; get %s", en(r), en(cudaGetLastError()));
  r = cudaMemsetAsync(d + n - 100, 0, 200, 0);
  OUT("cudaMemsetAsync past the end of an allocation", "%s", en(r));
  r = cudaMemset(wild, 0, 64);
  OUT("cudaMemset of a wild device pointer", "%s", en(r));
  r = cudaMemcpy(d + n - 100, page, 200, cudaMemcpyHostToDevice);
  OUT("cudaMemcpy host to device past the end of an allocation", "%s", en(r));
  r = cudaMemset(d, 0, n);
  OUT("cudaMemset of a whole allocation", "%s", en(r));
  NEED(cudaDeviceSynchronize());

  r = cudaMemcpy(page2, page, 64, cudaMemcpyHostToDevice);
  OUT("cudaMemcpy kind host to device between pageable buffers", "%s", en(r));
  r = cudaMemcpy(page2, page, 64, cudaMemcpyDeviceToHost);
  OUT("cudaMemcpy kind device to host between pageable buffers", "%s", en(r));
  r = cudaMemcpy(d, page, 64, (enum cudaMemcpyKind)7);
  OUT("cudaMemcpy kind 7", "%s", en(r));
  r = cudaMemcpyAsync(d, page, 64, (enum cudaMemcpyKind)7, 0);
  OUT("cudaMemcpyAsync kind 7", "%s", en(r));
  r = cudaMemcpy(d, page, 64, cudaMemcpyDefault);
  OUT("cudaMemcpy kind default pageable to device", "%s", en(r));
  r = cudaMemcpy(pin, d, 64, cudaMemcpyDeviceToHost);
  OUT("cudaMemcpy device to pinned host", "%s", en(r));
  r = cudaMemcpy(d2, d, 64, cudaMemcpyDeviceToDevice);
  OUT("cudaMemcpy device to device", "%s", en(r));
  NEED(cudaDeviceSynchronize());
  (void)cudaGetLastError();

  void *z = (void *)1;
  r = cudaMalloc(&z, 0);
  OUT("cudaMalloc(0)", "%s, pointer %s", en(r), z ? "non-NULL" : "NULL");
  if (r == cudaSuccess) NEED(cudaFree(z));
  z = (void *)1;
  r = cudaHostAlloc(&z, 0, cudaHostAllocDefault);
  OUT("cudaHostAlloc(0)", "%s, pointer %s", en(r), z ? "non-NULL" : "NULL");
  if (r == cudaSuccess) NEED(cudaFreeHost(z));
  z = (void *)1;
  r = cudaMallocHost(&z, 0);
  OUT("cudaMallocHost(0)", "%s, pointer %s", en(r), z ? "non-NULL" : "NULL");
  if (r == cudaSuccess) NEED(cudaFreeHost(z));
  z = NULL;
  r = cudaHostAlloc(&z, 64, 256);
  OUT("cudaHostAlloc with flag 256", "%s", en(r));
  if (r == cudaSuccess) NEED(cudaFreeHost(z));
  r = cudaFree(d + 64);
  OUT("cudaFree inside an allocation", "%s", en(r));
  r = cudaFree(wild);
  OUT("cudaFree of a wild pointer", "%s", en(r));
  r = cudaFree(NULL);
  OUT("cudaFree(NULL)", "%s", en(r));
  (void)cudaGetLastError();

  size_t rn = 1 << 16;
  char *reg = NULL;
  if (posix_memalign((void **)&reg, 4096, rn)) exit(2);
  memset(reg, 5, rn);
  r = cudaHostRegister(reg, rn, cudaHostRegisterDefault);
  OUT("cudaHostRegister", "%s", en(r));
  r = cudaHostRegister(reg, rn, cudaHostRegisterDefault);
  OUT("cudaHostRegister again", "%s", en(r));
  void *dp = NULL;
  r = cudaHostGetDevicePointer(&dp, reg, 0);
  OUT("cudaHostGetDevicePointer of registered memory", "%s, %s the host pointer", en(r),
      dp == reg ? "equal to" : "not equal to");
  struct cudaPointerAttributes pa;
  r = cudaPointerGetAttributes(&pa, reg);
  OUT("cudaPointerGetAttributes of registered memory", "%s, type %d", en(r), (int)pa.type);
  r = cudaMemcpyAsync(d, reg, n, cudaMemcpyHostToDevice, 0);
  OUT("cudaMemcpyAsync from registered memory", "%s", en(r));
  NEED(cudaDeviceSynchronize());
  r = cudaHostUnregister(reg);
  OUT("cudaHostUnregister", "%s", en(r));
  r = cudaHostUnregister(reg);
  OUT("cudaHostUnregister again", "%s", en(r));
  r = cudaHostGetDevicePointer(&dp, page, 0);
  OUT("cudaHostGetDevicePointer of pageable memory", "%s", en(r));
  r = cudaPointerGetAttributes(&pa, page);
  OUT("cudaPointerGetAttributes of pageable memory", "%s, type %d", en(r), (int)pa.type);
  r = cudaPointerGetAttributes(&pa, d);
  OUT("cudaPointerGetAttributes of device memory", "%s, type %d", en(r), (int)pa.type);
  r = cudaPointerGetAttributes(&pa, pin);
  OUT("cudaPointerGetAttributes of pinned memory", "%s, type %d", en(r), (int)pa.type);
  (void)cudaGetLastError();
  free(reg);
  NEED(cudaFree(d));
  NEED(cudaFree(d2));
  NEED(cudaFreeHost(pin));
  free(page);
  free(page2);
}

/* ---- the device ---- */
static void t_device(void) {
  static const struct { const char *name; enum cudaDeviceAttr a; } at[] = {
    {"cudaDevAttrComputeCapabilityMajor", cudaDevAttrComputeCapabilityMajor},
    {"cudaDevAttrComputeCapabilityMinor", cudaDevAttrComputeCapabilityMinor},
    {"cudaDevAttrMaxThreadsPerBlock", cudaDevAttrMaxThreadsPerBlock},
    {"cudaDevAttrMaxBlockDimZ", cudaDevAttrMaxBlockDimZ},
    {"cudaDevAttrMaxGridDimY", cudaDevAttrMaxGridDimY},
    {"cudaDevAttrMaxSharedMemoryPerBlock", cudaDevAttrMaxSharedMemoryPerBlock},
    {"cudaDevAttrMaxSharedMemoryPerBlockOptin", cudaDevAttrMaxSharedMemoryPerBlockOptin},
    {"cudaDevAttrMaxSharedMemoryPerMultiprocessor", cudaDevAttrMaxSharedMemoryPerMultiprocessor},
    {"cudaDevAttrWarpSize", cudaDevAttrWarpSize},
  };
  for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
    int v = -1;
    cudaError_t r = cudaDeviceGetAttribute(&v, at[i].a, 0);
    OUT(at[i].name, "%s, %d", en(r), v);
  }
  int v = -1;
  cudaError_t r = cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, 0);
  OUT("cudaDevAttrL2CacheSize", "%s, %s", en(r), v >= (32 << 20) ? "32 MiB or more" : "less than 32 MiB");
  r = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0);
  OUT("cudaDevAttrMultiProcessorCount", "%s, %s", en(r), v >= 100 ? "100 or more" : "fewer than 100");
  r = cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 99);
  OUT("cudaDeviceGetAttribute of device 99", "%s", en(r));
  (void)cudaGetLastError();

  struct cudaDeviceProp p;
  memset(&p, 0, sizeof p);
  r = cudaGetDeviceProperties(&p, 0);
  printf("# device 0: %s, %d SMs, %zu MiB, L2 %d KiB\n", p.name, p.multiProcessorCount, p.totalGlobalMem >> 20,
         p.l2CacheSize >> 10);
  OUT("cudaGetDeviceProperties", "%s", en(r));
  OUT("prop compute capability", "%d.%d", p.major, p.minor);
  OUT("prop maxGridSize", "%d %d %d", p.maxGridSize[0], p.maxGridSize[1], p.maxGridSize[2]);
  OUT("prop maxThreadsDim", "%d %d %d", p.maxThreadsDim[0], p.maxThreadsDim[1], p.maxThreadsDim[2]);
  OUT("prop maxThreadsPerBlock", "%d", p.maxThreadsPerBlock);
  OUT("prop maxThreadsPerMultiProcessor", "%d", p.maxThreadsPerMultiProcessor);
  OUT("prop maxBlocksPerMultiProcessor", "%d", p.maxBlocksPerMultiProcessor);
  OUT("prop warpSize", "%d", p.warpSize);
  OUT("prop sharedMemPerBlock", "%zu", p.sharedMemPerBlock);
  OUT("prop sharedMemPerBlockOptin", "%zu", p.sharedMemPerBlockOptin);
  OUT("prop sharedMemPerMultiprocessor", "%zu", p.sharedMemPerMultiprocessor);
  OUT("prop reservedSharedMemPerBlock", "%zu", p.reservedSharedMemPerBlock);
  OUT("prop regsPerBlock", "%d", p.regsPerBlock);
  OUT("prop regsPerMultiprocessor", "%d", p.regsPerMultiprocessor);
  OUT("prop totalConstMem", "%zu", p.totalConstMem);
  OUT("prop multiProcessorCount", "%s", p.multiProcessorCount >= 100 ? "100 or more" : "fewer than 100");
  OUT("prop totalGlobalMem", "%s", p.totalGlobalMem >= ((size_t)64 << 30) ? "64 GiB or more" : "less than 64 GiB");
  OUT("prop l2CacheSize", "%s", p.l2CacheSize >= (32 << 20) ? "32 MiB or more" : "less than 32 MiB");
  OUT("prop memoryBusWidth", "%s", p.memoryBusWidth >= 4096 ? "4096 bits or more" : "less than 4096 bits");
  OUT("prop concurrentKernels unifiedAddressing canMapHostMemory managedMemory", "%d %d %d %d", p.concurrentKernels,
      p.unifiedAddressing, p.canMapHostMemory, p.managedMemory);
  OUT("prop streamPrioritiesSupported hostRegisterSupported integrated", "%d %d %d", p.streamPrioritiesSupported,
      p.hostRegisterSupported, p.integrated);
  r = cudaGetDeviceProperties(&p, 99);
  OUT("cudaGetDeviceProperties of device 99", "%s", en(r));
  r = cudaSetDevice(99);
  OUT("cudaSetDevice(99)", "%s", en(r));
  (void)cudaGetLastError();
}

/* ---- cuBLAS ---- */
static void bo(const char *name, cublasStatus_t s) {
  OUT(name, "%s (%d): %s", cublasGetStatusName(s), (int)s, cublasGetStatusString(s));
}
static void t_cublas(void) {
  cublasHandle_t h;
  cublasStatus_t st = cublasCreate(&h);
  bo("cublasCreate", st);
  if (st != CUBLAS_STATUS_SUCCESS) return;
  float *A, *B, *C, al = 1, be = 0;
  NEED(cudaMalloc((void **)&A, 1024));
  NEED(cudaMalloc((void **)&B, 1024));
  NEED(cudaMalloc((void **)&C, 1024));
  NEED(cudaMemset(A, 0, 1024));
  NEED(cudaMemset(B, 0, 1024));
  NEED(cudaDeviceSynchronize());   /* cudaMemset may return before it ran */
  bo("cublasGemmEx valid", cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &al, A, CUDA_R_32F, 4, B, CUDA_R_32F, 4,
                                        &be, C, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  NEED(cudaDeviceSynchronize());
  bo("cublasGemmEx m = -1", cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &al, A, CUDA_R_32F, 4, B, CUDA_R_32F,
                                         4, &be, C, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  bo("cublasGemmEx lda < m", cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &al, A, CUDA_R_32F, 2, B, CUDA_R_32F,
                                          4, &be, C, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  bo("cublasGemmEx A bf16, B f32", cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &al, A, CUDA_R_16BF, 4, B,
                                                CUDA_R_32F, 4, &be, C, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT));
  bo("cublasGemmEx NULL handle", cublasGemmEx(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &al, A, CUDA_R_32F, 4, B,
                                              CUDA_R_32F, 4, &be, C, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                                              CUBLAS_GEMM_DEFAULT));
  void *ws;
  NEED(cudaMalloc(&ws, 1 << 20));
  bo("cublasSetWorkspace", cublasSetWorkspace(h, ws, 1 << 20));
  cudaStream_t s, got = NULL;
  NEED(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  bo("cublasSetStream", cublasSetStream(h, s));
  st = cublasGetStream(h, &got);
  OUT("cublasGetStream", "%s (%d), %s", cublasGetStatusName(st), (int)st,
      got == s ? "the stream set" : "another stream");
  bo("cublasGemmEx on that stream", cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &al, A, CUDA_R_32F, 4, B,
                                                 CUDA_R_32F, 4, &be, C, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                                                 CUBLAS_GEMM_DEFAULT));
  NEED(cudaStreamSynchronize(s));
  bo("cublasDestroy", cublasDestroy(h));
  NEED(cudaStreamDestroy(s));
  NEED(cudaFree(ws));
  NEED(cudaFree(A));
  NEED(cudaFree(B));
  NEED(cudaFree(C));
  static const cublasStatus_t codes[] = {CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_ALLOC_FAILED,
                                         CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_ARCH_MISMATCH,
                                         CUBLAS_STATUS_EXECUTION_FAILED, CUBLAS_STATUS_INTERNAL_ERROR,
                                         CUBLAS_STATUS_NOT_SUPPORTED};
  for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
    char name[64];
    snprintf(name, sizeof name, "cuBLAS status %d", (int)codes[i]);
    bo(name, codes[i]);
  }
}

/* ---- NCCL ---- */
#ifdef HAVE_NCCL
static const char *nr(ncclResult_t r) {
  static char buf[4][160];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%d", (int)r);
  return buf[k];
}
static void t_nccl(void) {
  int v = 0;
  ncclResult_t r = ncclGetVersion(&v);
  OUT("ncclGetVersion", "%s, %d", nr(r), v);
  for (int c = 0; c <= 7; c++) {
    char name[64];
    snprintf(name, sizeof name, "ncclGetErrorString(%d)", c);
    OUT(name, "%s", ncclGetErrorString((ncclResult_t)c));
  }
  ncclComm_t comms[2] = {NULL, NULL};
  int dev99 = 99;
  r = ncclCommInitAll(comms, 1, &dev99);
  OUT("ncclCommInitAll on device 99", "%s", nr(r));
  r = ncclCommInitAll(comms, 1, NULL);
  OUT("ncclCommInitAll of 1 rank", "%s", nr(r));
  if (r != ncclSuccess) return;
  size_t n = 1024;
  float *a, *b, *h = malloc(n * sizeof(float));
  NEED(cudaMalloc((void **)&a, n * sizeof(float)));
  NEED(cudaMalloc((void **)&b, n * sizeof(float)));
  for (size_t i = 0; i < n; i++) h[i] = (float)i;
  NEED(cudaMemcpy(a, h, n * sizeof(float), cudaMemcpyHostToDevice));
  NEED(cudaMemset(b, 0, n * sizeof(float)));
  NEED(cudaDeviceSynchronize());   /* neither may have landed yet */
  cudaStream_t s;
  NEED(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ncclResult_t g0 = ncclGroupStart();
  ncclResult_t s1 = ncclSend(a, n, ncclFloat32, 0, comms[0], s);
  ncclResult_t r1 = ncclRecv(b, n, ncclFloat32, 0, comms[0], s);
  ncclResult_t g1 = ncclGroupEnd();
  NEED(cudaStreamSynchronize(s));
  memset(h, 0, n * sizeof(float));
  NEED(cudaMemcpy(h, b, n * sizeof(float), cudaMemcpyDeviceToHost));
  int same = 1;
  for (size_t i = 0; i < n; i++) same &= h[i] == (float)i;
  OUT("ncclSend and ncclRecv to self in a group", "%s %s %s %s, data %s", nr(g0), nr(s1), nr(r1), nr(g1),
      same ? "arrived" : "wrong");
  r = ncclBroadcast(a, b, n, ncclFloat32, 1, comms[0], s);
  OUT("ncclBroadcast with root 1 of 1 rank", "%s", nr(r));
  r = ncclAllReduce(a, b, n, ncclFloat32, ncclSum, comms[0], s);
  NEED(cudaStreamSynchronize(s));
  OUT("ncclAllReduce of 1 rank", "%s", nr(r));
  r = ncclAllReduce(NULL, b, n, ncclFloat32, ncclSum, comms[0], s);
  OUT("ncclAllReduce with a NULL send buffer", "%s", nr(r));
  NEED(cudaStreamSynchronize(s));
  /* reduce-scatter and all-gather (one rank: NCCL copies, nothing in place); argument
   * errors as NCCL's ArgsCheck answers them, a NULL buffer as the all-reduce's */
  static const char *const blk_names[] = {"ncclReduceScatter of 1 rank", "ncclAllGather of 1 rank"};
  for (int k = 0; k < 2; k++) {
    NEED(cudaMemsetAsync(b, 0, n * sizeof(float), s));
    r = k ? ncclAllGather(a, b, n, ncclFloat32, comms[0], s) : ncclReduceScatter(a, b, n, ncclFloat32, ncclSum, comms[0], s);
    NEED(cudaStreamSynchronize(s));
    memset(h, 0, n * sizeof(float));
    NEED(cudaMemcpy(h, b, n * sizeof(float), cudaMemcpyDeviceToHost));
    same = 1;
    for (size_t i = 0; i < n; i++) same &= h[i] == (float)i;
    OUT(blk_names[k], "%s, data %s", nr(r), same ? "arrived" : "wrong");
  }
  r = ncclReduceScatter(a, a, n, ncclFloat32, ncclMax, comms[0], s);
  OUT("ncclReduceScatter in place", "%s", nr(r));
  r = ncclAllGather(b, b, n, ncclFloat32, comms[0], s);
  OUT("ncclAllGather in place", "%s", nr(r));
  NEED(cudaStreamSynchronize(s));
  r = ncclReduceScatter(a, b, n, (ncclDataType_t)99, ncclSum, comms[0], s);
  OUT("ncclReduceScatter with data type 99", "%s", nr(r));
  r = ncclReduceScatter(a, b, n, ncclFloat32, (ncclRedOp_t)99, comms[0], s);
  OUT("ncclReduceScatter with reduction 99", "%s", nr(r));
  r = ncclAllGather(a, b, n, (ncclDataType_t)99, comms[0], s);
  OUT("ncclAllGather with data type 99", "%s", nr(r));
  r = ncclReduceScatter(NULL, NULL, 0, ncclFloat32, ncclSum, comms[0], s);
  OUT("ncclReduceScatter of 0 elements with NULL buffers", "%s", nr(r));
  r = ncclReduceScatter(NULL, b, n, ncclFloat32, ncclSum, comms[0], s);
  OUT("ncclReduceScatter with a NULL send buffer", "%s", nr(r));
  NEED(cudaStreamSynchronize(s));
  r = ncclAllGather(a, NULL, n, ncclFloat32, comms[0], s);
  OUT("ncclAllGather with a NULL receive buffer", "%s", nr(r));
  NEED(cudaStreamSynchronize(s));
  int cnt = -1, rk = -1;
  ncclResult_t rc = ncclCommCount(comms[0], &cnt), rr = ncclCommUserRank(comms[0], &rk);
  OUT("ncclCommCount ncclCommUserRank", "%s %s, %d ranks, rank %d", nr(rc), nr(rr), cnt, rk);
  r = ncclCommDestroy(comms[0]);
  OUT("ncclCommDestroy", "%s", nr(r));
  NEED(cudaStreamDestroy(s));
  NEED(cudaFree(a));
  NEED(cudaFree(b));
  free(h);
}

/* Its own section: NCCL 2.28.3 crashed here on an H200 (the record says how). */
static void t_nccl_init0(void) {
  ncclComm_t comms[2] = {NULL, NULL};
  ncclResult_t r = ncclCommInitAll(comms, 0, NULL);
  OUT("ncclCommInitAll of 0 ranks", "%s", nr(r));
}
#endif

/* ---- cuBLASLt: the calls of the fused GEMM epilogues (runtime/cuda/gemm_lt.c) ---- */
static uint16_t c_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float c_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* the heuristic's answer for a bf16 64 x 64 x 64 product with epilogue epi (transa ta, aux
 * leading dimension aux_ld, 0: no aux pointer) */
static void lt_heur(cublasLtHandle_t h, const char *name, uint32_t epi, int32_t ta, int64_t aux_ld, void *aux,
                    void *bias) {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulPreference_t pref;
  int32_t tb = CUBLAS_OP_N;
  uint64_t ws = 1 << 20;
  if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) || cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, 64, 64, 64) ||
      cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, 64, 64, 64) || cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, 64, 64, 64) ||
      cublasLtMatmulPreferenceCreate(&pref) ||
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ||
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ||
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) ||
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) ||
      (aux_ld && (cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux) ||
                  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld)))) {
    OUT(name, "the descriptors could not be made");
    return;
  }
  cublasLtMatmulHeuristicResult_t r;
  int n = 0;
  memset(&r, 0, sizeof r);
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, op, a, b, c, c, pref, 1, &r, &n);
  OUT(name, "%s (%d), %s", cublasGetStatusName(st), (int)st, n > 0 ? "a result" : "no result");
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(c);
  cublasLtMatmulDescDestroy(op);
}
/* D = epilogue(A B) on m = n = k = 64 (column-major bf16, A and B as given), checked on the
 * host: GELU_AUX_BIAS (aux = A B + bias[row], D = tanh-form GeLU of it) or BGRADA (bias =
 * the row sums of A, F32 D); prints whether the device agrees within 3 bf16 roundings */
static void lt_value(cublasLtHandle_t h, const char *name, uint32_t epi) {
  enum { M = 64 };
  int f32 = epi == CUBLASLT_EPILOGUE_BGRADA;
  cudaDataType_t dt = f32 ? CUDA_R_32F : CUDA_R_16BF;
  size_t es = f32 ? 4 : 2;
  static uint16_t ha[M * M], hb[M * M], hbias[M], haux[M * M];
  static float fa[M * M], fb[M * M], fbias[M], hg[M];
  static unsigned char dbuf[M * M * 4];
  for (int i = 0; i < M * M; i++) {
    ha[i] = c_bf16((float)((i * 37 % 17) - 8) / 16.0f);
    hb[i] = c_bf16((float)((i * 11 % 13) - 6) / 16.0f);
    fa[i] = c_f32(ha[i]);
    fb[i] = c_f32(hb[i]);
  }
  for (int i = 0; i < M; i++) {
    hbias[i] = c_bf16((float)(i % 7 - 3) / 4.0f);
    fbias[i] = c_f32(hbias[i]);
  }
  void *A, *B, *D, *aux, *bias;
  NEED(cudaMalloc(&A, sizeof ha));
  NEED(cudaMalloc(&B, sizeof hb));
  NEED(cudaMalloc(&D, (size_t)M * M * es));
  NEED(cudaMalloc(&aux, sizeof haux));
  NEED(cudaMalloc(&bias, M * 4));
  NEED(cudaMemcpy(A, ha, sizeof ha, cudaMemcpyHostToDevice));
  NEED(cudaMemcpy(B, hb, sizeof hb, cudaMemcpyHostToDevice));
  NEED(cudaMemcpy(bias, hbias, sizeof hbias, cudaMemcpyHostToDevice));
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  int64_t aux_ld = M;
  float al = 1, be = 0;
  cublasStatus_t st = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (!st) st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (!st) st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  if (!st && !f32) st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
  if (!st && !f32) st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
  if (!st) st = cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, M, M, M);
  if (!st) st = cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, M, M, M);
  if (!st) st = cublasLtMatrixLayoutCreate(&lc, dt, M, M, M);
  if (!st) st = cublasLtMatmul(h, op, &al, A, la, B, lb, &be, D, lc, D, lc, NULL, NULL, 0, NULL);
  if (st) {
    OUT(name, "%s (%d)", cublasGetStatusName(st), (int)st);
    return;
  }
  NEED(cudaDeviceSynchronize());
  NEED(cudaMemcpy(dbuf, D, (size_t)M * M * es, cudaMemcpyDeviceToHost));
  NEED(cudaMemcpy(haux, aux, sizeof haux, cudaMemcpyDeviceToHost));
  NEED(cudaMemcpy(hg, bias, M * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int j = 0; j < M; j++)
    for (int i = 0; i < M; i++) {
      float acc = 0;
      for (int l = 0; l < M; l++) acc += fa[i + l * M] * fb[l + j * M];
      if (f32) {
        float got;
        memcpy(&got, dbuf + 4 * (i + j * M), 4);
        bad += !(fabsf(got - acc) <= 1e-3f * (1 + fabsf(acc)));
      } else {
        float pre = acc + fbias[i], u = 0.7978845608028654f * (pre + 0.044715f * pre * pre * pre);
        float g = 0.5f * pre * (1 + tanhf(u)), ga = c_f32(haux[i + j * M]);
        uint16_t dv;
        memcpy(&dv, dbuf + 2 * (i + j * M), 2);
        bad += !(fabsf(ga - pre) <= 3 * 0.0078125f * (fabsf(pre) + 1e-2f));
        bad += !(fabsf(c_f32(dv) - g) <= 3 * 0.0078125f * (fabsf(g) + 1e-2f));
      }
    }
  if (f32)
    for (int i = 0; i < M; i++) {
      float s = 0;
      for (int l = 0; l < M; l++) s += fa[i + l * M];
      bad += !(fabsf(hg[i] - s) <= 1e-3f * (1 + fabsf(s)));
    }
  OUT(name, "%s", bad ? "differs from the host's" : (f32 ? "D = A B, bias gradient = row sums of A" :
                                                          "aux = A B + bias over D's rows, D = tanh GeLU of aux"));
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  NEED(cudaFree(A));
  NEED(cudaFree(B));
  NEED(cudaFree(D));
  NEED(cudaFree(aux));
  NEED(cudaFree(bias));
}
static void t_cublaslt(void) {
  cublasLtHandle_t h;
  cublasStatus_t st = cublasLtCreate(&h);
  bo("cublasLtCreate", st);
  if (st != CUBLAS_STATUS_SUCCESS) return;
  cublasLtMatmulDesc_t op;
  NEED(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ? cudaErrorUnknown : cudaSuccess);
  uint64_t epi8 = CUBLASLT_EPILOGUE_BIAS;
  bo("cublasLtMatmulDescSetAttribute EPILOGUE of 8 bytes",
     cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi8, sizeof epi8));
  bo("cublasLtMatmulDescSetAttribute NULL buffer", cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                                                  NULL, 4));
  cublasLtMatmulDescDestroy(op);
  cublasLtMatmulPreference_t pref;
  NEED(cublasLtMatmulPreferenceCreate(&pref) ? cudaErrorUnknown : cudaSuccess);
  uint32_t ws4 = 1 << 20;
  bo("cublasLtMatmulPreferenceSetAttribute MAX_WORKSPACE_BYTES of 4 bytes",
     cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws4, sizeof ws4));
  cublasLtMatmulPreferenceDestroy(pref);
  void *aux, *bias;
  NEED(cudaMalloc(&aux, 64 * 64 * 2));
  NEED(cudaMalloc(&bias, 64 * 4));
  {   /* requestedAlgoCount 0 */
    cublasLtMatrixLayout_t a;
    cublasLtMatmulHeuristicResult_t r;
    int n = 0;
    NEED(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ? cudaErrorUnknown : cudaSuccess);
    NEED(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, 64, 64, 64) ? cudaErrorUnknown : cudaSuccess);
    NEED(cublasLtMatmulPreferenceCreate(&pref) ? cudaErrorUnknown : cudaSuccess);
    bo("cublasLtMatmulAlgoGetHeuristic requestedAlgoCount 0",
       cublasLtMatmulAlgoGetHeuristic(h, op, a, a, a, a, pref, 0, &r, &n));
    float al = 1, be = 0;
    bo("cublasLtMatmul NULL handle", cublasLtMatmul(NULL, op, &al, aux, a, aux, a, &be, aux, a, aux, a, NULL, NULL, 0,
                                                    NULL));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
  }
  lt_heur(h, "cublasLtMatmulAlgoGetHeuristic GELU_AUX_BIAS bf16 64x64x64", CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
          CUBLAS_OP_N, 64, aux, bias);
  lt_heur(h, "cublasLtMatmulAlgoGetHeuristic GELU_AUX_BIAS without the aux pointer", CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
          CUBLAS_OP_N, 0, NULL, bias);
  lt_heur(h, "cublasLtMatmulAlgoGetHeuristic GELU_AUX_BIAS aux leading dimension 68", CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
          CUBLAS_OP_N, 68, aux, bias);
  lt_heur(h, "cublasLtMatmulAlgoGetHeuristic DGELU bf16 64x64x64", CUBLASLT_EPILOGUE_DGELU, CUBLAS_OP_N, 64, aux, NULL);
  lt_heur(h, "cublasLtMatmulAlgoGetHeuristic BGRADA, A transposed", CUBLASLT_EPILOGUE_BGRADA, CUBLAS_OP_T, 0, NULL,
          bias);
  lt_value(h, "cublasLtMatmul GELU_AUX_BIAS bf16 64x64x64", CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  lt_value(h, "cublasLtMatmul BGRADA bf16 -> f32 64x64x64", CUBLASLT_EPILOGUE_BGRADA);
  NEED(cudaFree(aux));
  NEED(cudaFree(bias));
  bo("cublasLtDestroy", cublasLtDestroy(h));
}

/* ---- error names and strings ---- */
static void t_errors(void) {
  static const cudaError_t codes[] = {cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation,
                                      cudaErrorInvalidConfiguration, cudaErrorInvalidMemcpyDirection,
                                      cudaErrorInvalidDevice, cudaErrorInvalidResourceHandle, cudaErrorNotReady,
                                      cudaErrorHostMemoryAlreadyRegistered, cudaErrorHostMemoryNotRegistered};
  for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
    char name[64];
    snprintf(name, sizeof name, "cudaGetErrorString(%d)", (int)codes[i]);
    OUT(name, "%s: %s", cudaGetErrorName(codes[i]), cudaGetErrorString(codes[i]));
  }
}

static const struct { const char *name; void (*run)(void); } sections[] = {
  {"launch", t_launch}, {"streams", t_streams}, {"memory", t_memory}, {"device", t_device},
  {"cublas", t_cublas}, {"cublaslt", t_cublaslt},
#ifdef HAVE_NCCL
  {"nccl", t_nccl}, {"nccl_init0", t_nccl_init0},
#endif
  {"errors", t_errors},
};

/* One section in this process: 77 without a device. */
static int run_section(int k) {
  if (pps_emu_register_kernel) {
    static const size_t spin_args[] = {sizeof(unsigned long long)}, nop_args[] = {sizeof(int)};
    pps_emu_register_kernel(conf_spin_kernel(), "conf_spin", spin_host, 1, spin_args);
    pps_emu_register_kernel(conf_nop_kernel(), "conf_nop", nop_host, 1, nop_args);
  }
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev < 1) {
    printf("SKIP: no CUDA device visible (%s)\n", en(e));
    fflush(stdout);   /* the child ends with _exit */
    return 77;
  }
  if (k == 0) {
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    printf("# %s; CUDA driver %d, runtime %d\n", pps_emu_register_kernel ? "EMULATED (tests/gpu/emu)" : "a GPU", drv, rt);
  }
  NEED(cudaSetDevice(0));
  NEED(cudaFree(NULL));   /* the context */
  sections[k].run();
  fflush(stdout);
  return 0;
}

/* Each section runs in a child process of its own (forked before this process touches
 * CUDA), so that a call that crashes costs its section only: the parent prints
 * "section NAME: ..." for a child that did not exit 0. */
int main(int argc, char **argv) {
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--gate-ms") && i + 1 < argc) gate_s = atof(argv[++i]) / 1e3;
    else if (!strcmp(argv[i], "--section") && i + 1 < argc) only = argv[++i];
    else {
      fprintf(stderr, "usage: conformance [--gate-ms N] [--section NAME]\n");
      return 2;
    }
  }
  int nsec = (int)(sizeof sections / sizeof *sections), ran = 0;
  fflush(stdout);
  for (int k = 0; k < nsec; k++) {
    if (only && strcmp(only, sections[k].name)) continue;
    ran++;
    pid_t pid = fork();
    if (pid < 0) {
      perror("conformance: fork");
      return 2;
    }
    if (pid == 0) _exit(run_section(k));
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {}
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) return 77;
    if (WIFSIGNALED(st)) printf("section %s: killed by signal %d\n", sections[k].name, WTERMSIG(st));
    else if (WEXITSTATUS(st) != 0) printf("section %s: exit %d\n", sections[k].name, WEXITSTATUS(st));
    fflush(stdout);
  }
  if (!ran) {
    fprintf(stderr, "conformance: no section named %s\n", only);
    return 2;
  }
  printf("# done\n");
  return 0;
}
