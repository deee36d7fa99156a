/* tests/gpu/emu/cuda_emu.h: just enough of CUDA's device side to compile
 * runtime/cuda/kernels.cu as host C++20 and run its kernels on host threads.
 *
 * What it does: every CUDA thread of a block is a fiber (ucontext) on the host thread
 * that runs the launch (the stream's worker thread in fake_cuda.c); blocks run one
 * after another, so `__shared__` becomes `static` storage shared by the block's
 * threads. __syncthreads waits until every live thread of the block waits there,
 * __shfl_xor_sync exchanges through a buffer at a warp-wide wait; a thread that returns
 * early no longer counts (as exited CUDA threads). The schedule inside a launch is
 * deterministic; launches are serialised by one mutex (several streams run at once).
 * A launch is queued on its stream with the buffers its pointer parameters name (see
 * launcher below); ordering and races between streams are fake_cuda.c's business.
 * What it does not: no concurrency between blocks of one launch (races between blocks go
 * unseen), no memory model beyond that, no timing. It checks indexing, reductions, masks
 * and the formulas, not performance. */
#ifndef PPSRT_CUDA_EMU_H
#define PPSRT_CUDA_EMU_H
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <type_traits>
#include <vector>

#include "emu_api.h"

#include <cuda_runtime_api.h>   /* types only: cudaError_t, cudaStream_t, dim3, uint3 */

#undef __global__
#undef __device__
#undef __forceinline__
#undef __shared__
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct __nv_bfloat16 { unsigned short x; };

inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t u = (uint32_t)h.x << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  __nv_bfloat16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    h.x = (unsigned short)((u >> 16) | 0x40u);
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    h.x = (unsigned short)(u >> 16);
  }
  return h;
}

inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

inline int min(int a, int b) { return a < b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

namespace emu {
/* Each CUDA thread of the running block is a fiber (ucontext) on the running host
 * thread; a scheduler runs every runnable fiber until it waits at a barrier or ends,
 * then releases the block barrier (every live fiber waits there) or a warp barrier
 * (every live fiber of that warp waits there). Nothing runs concurrently. */
enum { F_RUN, F_BLOCK, F_WARP, F_DONE };
#if defined(__x86_64__)
/* x86-64: a fiber switch saves the callee-saved registers on the old stack and swaps
 * stack pointers (swapcontext also saves the signal mask: two system calls per switch,
 * most of the emulator's time). */
#define EMU_FAST_SWITCH 1
extern "C" void pps_emu_fswitch(void **save_sp, void *to_sp);
asm(".text\n.globl pps_emu_fswitch\n.hidden pps_emu_fswitch\n.type pps_emu_fswitch,@function\n"
    "pps_emu_fswitch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
    ".size pps_emu_fswitch, .-pps_emu_fswitch\n");
#endif
struct fiber {
  ucontext_t ctx;
  void *sp;
  int state;
};
inline std::mutex launch_mu;
inline ucontext_t sched;
inline void *sched_sp;
inline std::vector<fiber> fib;
inline std::vector<char> stacks;
inline constexpr size_t STACK = 64 * 1024;
inline unsigned cur;
inline std::function<void()> body;
inline std::vector<float> shfl;

inline unsigned tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline void wait_at(int st) {
  unsigned me = cur;
  fib[me].state = st;
#ifdef EMU_FAST_SWITCH
  pps_emu_fswitch(&fib[me].sp, sched_sp);
#else
  swapcontext(&fib[me].ctx, &sched);
#endif
}
inline void entry() {
  body();
  fib[cur].state = F_DONE;   /* returning resumes uc_link, the scheduler */
}
#ifdef EMU_FAST_SWITCH
inline void fast_entry() {
  entry();
  void *dead;
  pps_emu_fswitch(&dead, sched_sp);   /* never resumed */
  std::abort();
}
#endif

inline void run_block(unsigned nt, const dim3 &b, const ucontext_t &tmpl) {
  for (unsigned t = 0; t < nt; t++) {
#ifdef EMU_FAST_SWITCH
    (void)tmpl;
    /* the first switch pops six zero registers and returns into fast_entry with the
     * stack aligned as at a call */
    uintptr_t top = ((uintptr_t)&stacks[(size_t)(t + 1) * STACK] & ~(uintptr_t)15) - 64;
    void **sp = (void **)top;
    for (int k = 0; k < 6; k++) sp[k] = nullptr;
    sp[6] = (void *)&fast_entry;
    sp[7] = nullptr;
    fib[t].sp = sp;
#else
    fib[t].ctx = tmpl;
    fib[t].ctx.uc_stack.ss_sp = &stacks[(size_t)t * STACK];
    fib[t].ctx.uc_stack.ss_size = STACK;
    fib[t].ctx.uc_link = &sched;
    makecontext(&fib[t].ctx, entry, 0);
#endif
    fib[t].state = F_RUN;
  }
  for (;;) {
    for (unsigned t = 0; t < nt; t++)
      if (fib[t].state == F_RUN) {
        cur = t;
        threadIdx = uint3{t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
#ifdef EMU_FAST_SWITCH
        pps_emu_fswitch(&sched_sp, fib[t].sp);
#else
        swapcontext(&sched, &fib[t].ctx);
#endif
      }
    unsigned live = 0, at_block = 0;
    for (unsigned t = 0; t < nt; t++) {
      live += fib[t].state != F_DONE;
      at_block += fib[t].state == F_BLOCK;
    }
    if (!live) return;
    bool released = false;
    if (at_block == live) {
      for (unsigned t = 0; t < nt; t++)
        if (fib[t].state == F_BLOCK) fib[t].state = F_RUN;
      released = true;
    }
    for (unsigned w = 0; w * 32 < nt; w++) {
      unsigned lo = w * 32, hi = std::min(nt, lo + 32), wl = 0, ww = 0;
      for (unsigned t = lo; t < hi; t++) {
        wl += fib[t].state != F_DONE;
        ww += fib[t].state == F_WARP;
      }
      if (wl && ww == wl) {
        for (unsigned t = lo; t < hi; t++) fib[t].state = F_RUN;
        released = true;
      }
    }
    if (!released) {
      std::fprintf(stderr, "cuda_emu: deadlock: threads wait at different barriers in one block\n");
      std::abort();
    }
  }
}

/* Runs a grid (every block in turn) on the calling thread; launches are serialised. */
template <class F> void run_grid(dim3 g, dim3 b, F call) {
  std::lock_guard<std::mutex> lock(launch_mu);
  const unsigned nt = b.x * b.y * b.z;
  const size_t nb = (size_t)g.x * g.y * g.z;
  if (nt == 0 || nb == 0) return;
  fib.assign(nt, fiber{});
  if (stacks.size() < (size_t)nt * STACK) stacks.resize((size_t)nt * STACK);
  shfl.assign(nt, 0.0f);
  body = call;
  ucontext_t tmpl;
  getcontext(&tmpl);
  blockDim = b;
  gridDim = g;
  for (size_t blk = 0; blk < nb; blk++) {
    blockIdx = uint3{(unsigned)(blk % g.x), (unsigned)((blk / g.x) % g.y), (unsigned)(blk / ((size_t)g.x * g.y))};
    run_block(nt, b, tmpl);
  }
  body = nullptr;
}

/* A launch becomes a closure queued on its stream (fake_cuda.c's emu_launch): the
 * arguments are copied, and each pointer parameter is declared to the race detector,
 * read for `const T *`, written for `T *`, from the pointer to the end of its
 * allocation. The stream's worker thread runs the blocks one after another. */
template <class T> void declare(std::vector<emu_access> &v, T x) {
  if constexpr (std::is_pointer_v<T>)
    v.push_back(emu_access{(const void *)x, EMU_TO_END, !std::is_const_v<std::remove_pointer_t<T>>});
}

template <class... P> struct launcher {
  void (*k)(P...);
  const char *name;
  cudaStream_t s;
  dim3 g, b;
  template <class... A> void operator()(A... a) const {
    std::vector<emu_access> acc;
    (declare<P>(acc, (P)a), ...);
    auto *fn = new std::function<void()>([k = k, g = g, b = b, a...]() { run_grid(g, b, [&] { k(a...); }); });
    emu_launch(s, name, g, b, acc.data(), (int)acc.size(),
               [](void *c) { (*(std::function<void()> *)c)(); },
               fn, [](void *c) { delete (std::function<void()> *)c; });
  }
};

template <class... P> launcher<P...> launch(void (*k)(P...), const char *name, cudaStream_t s, dim3 g, dim3 b) {
  return launcher<P...>{k, name, s, g, b};
}
}  // namespace emu

#define LAUNCH(k, s, ...) emu::launch(k, #k, s, __VA_ARGS__)

inline void __syncthreads() { emu::wait_at(emu::F_BLOCK); }

inline float __shfl_xor_sync(unsigned, float v, int o) {
  unsigned t = emu::tid(), w = t / 32, lane = t & 31;
  emu::shfl[t] = v;
  emu::wait_at(emu::F_WARP);
  float r = emu::shfl[w * 32 + (lane ^ (unsigned)o)];
  emu::wait_at(emu::F_WARP);
  return r;
}

inline float atomicAdd(float *p, float v) {
  float old = *p;   /* fibers never run concurrently */
  *p = old + v;
  return old;
}

/* Kernels exist for every "GPU" here. */
template <class F> cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, F *) {
  std::memset(attr, 0, sizeof *attr);
  return cudaSuccess;
}

/* Launch configuration errors are reported by the emulated runtime's cudaGetLastError. */
#endif
