/* tests/gpu/conformance_kern.cu: the two kernels of the conformance program
 * (tests/gpu/conformance.c), compiled by nvcc. The program launches them with
 * cudaLaunchKernel through the addresses returned here, so its launch-configuration
 * checks reach the runtime's own validation. Under the emulator (LD_PRELOAD
 * libppsrt_emu.so) the program hands host versions of the same kernels to
 * pps_emu_register_kernel (conformance.c). */
#include <cuda_runtime_api.h>

/* holds its stream for `ns` nanoseconds of the GPU's global timer: a gate that earlier
 * work is busy (one thread) */
__global__ void conf_spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

/* does nothing: a launch whose only outcome is its configuration check */
__global__ void conf_nop(int x) { (void)x; }

extern "C" const void *conf_spin_kernel(void) { return (const void *)conf_spin; }
extern "C" const void *conf_nop_kernel(void) { return (const void *)conf_nop; }
