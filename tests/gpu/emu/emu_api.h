/* tests/gpu/emu/emu_api.h: the interface between the emulated device side (cuda_emu.h,
 * compiled into kernels_emu.o) and the emulated runtime (fake_cuda.c): a kernel launch
 * is handed over as a closure plus the buffers it reads and writes, which the runtime
 * queues on the launch's stream and checks with its race detector. Test-only. */
#ifndef PPS_EMU_API_H
#define PPS_EMU_API_H
#include <stddef.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMU_MAX_ACCESS 16
#define EMU_TO_END ((size_t)-1)   /* from the pointer to the end of its allocation */

typedef struct emu_access {
  const void *p;
  size_t bytes;    /* EMU_TO_END: unknown extent */
  int write;
} emu_access;

/* Validates the launch configuration (a bad one: cudaGetLastError reports
 * cudaErrorInvalidValue, as CUDA 13 does; del(ctx) runs, nothing is queued, returns
 * non-zero),
 * else queues run(ctx) on stream s; del(ctx) frees it after it ran. */
int emu_launch(cudaStream_t s, const char *name, dim3 grid, dim3 block, const emu_access *acc, int nacc,
               void (*run)(void *), void *ctx, void (*del)(void *));

#ifdef __cplusplus
}
#endif
#endif
