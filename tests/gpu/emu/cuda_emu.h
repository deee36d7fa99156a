/* tests/gpu/emu/cuda_emu.h: just enough of CUDA's device side to compile
 * runtime/cuda/kernels.cu as host C++20 and run its kernels on host threads.
 *
 * What it does: every CUDA thread of a block is a host thread (one std::thread per
 * thread index, reused for every block of a launch); blocks run one after another, so
 * `__shared__` becomes `static` storage shared by the block's threads. __syncthreads is
 * a block-wide std::barrier, __shfl_xor_sync a warp-wide exchange through a buffer and
 * a warp barrier; a thread that returns early drops out of both (as exited CUDA threads
 * do). atomicAdd on floats is a compare-exchange loop. Launches are serialised by one
 * mutex (several host threads may launch at once in the transport test).
 *
 * What it does not: no concurrency between blocks or launches (races between blocks go
 * unseen), no memory model beyond that, no timing, no streams (the fake runtime in
 * fake_cuda.c runs everything synchronously). It checks indexing, reductions, masks and
 * the formulas, not performance or stream ordering. */
#ifndef PPSRT_CUDA_EMU_H
#define PPSRT_CUDA_EMU_H
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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
inline std::mutex launch_mu;
inline std::barrier<> *block_bar;
inline std::vector<std::barrier<> *> warp_bar;
inline std::vector<float> shfl;

inline unsigned tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

inline void make_barriers(unsigned nt) {
  block_bar = new std::barrier<>(nt);
  unsigned nw = (nt + 31) / 32;
  warp_bar.assign(nw, nullptr);
  for (unsigned w = 0; w < nw; w++) warp_bar[w] = new std::barrier<>(std::min(32u, nt - 32 * w));
}

inline void free_barriers() {
  delete block_bar;
  block_bar = nullptr;
  for (auto *b : warp_bar) delete b;
  warp_bar.clear();
}

struct end_of_block {
  size_t *cur;
  unsigned nt;
  void operator()() noexcept {
    free_barriers();
    make_barriers(nt);
    ++*cur;
  }
};

template <class... P> struct launcher {
  void (*k)(P...);
  dim3 g, b;
  template <class... A> void operator()(A... a) const {
    std::lock_guard<std::mutex> lock(launch_mu);
    const unsigned nt = b.x * b.y * b.z;
    const size_t nb = (size_t)g.x * g.y * g.z;
    if (nt == 0 || nb == 0) return;
    size_t cur = 0;
    shfl.assign(nt, 0.0f);
    make_barriers(nt);
    std::barrier<end_of_block> end(nt, end_of_block{&cur, nt});
    std::vector<std::thread> th;
    th.reserve(nt);
    for (unsigned t = 0; t < nt; t++)
      th.emplace_back([&, t] {
        for (;;) {
          size_t blk = cur;
          if (blk >= nb) return;
          blockDim = b;
          gridDim = g;
          threadIdx = uint3{t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
          blockIdx = uint3{(unsigned)(blk % g.x), (unsigned)((blk / g.x) % g.y), (unsigned)(blk / ((size_t)g.x * g.y))};
          k(a...);
          block_bar->arrive_and_drop();
          warp_bar[t / 32]->arrive_and_drop();
          end.arrive_and_wait();
        }
      });
    for (auto &x : th) x.join();
    free_barriers();
  }
};

template <class... P> launcher<P...> launch(void (*k)(P...), dim3 g, dim3 b) { return launcher<P...>{k, g, b}; }
}  // namespace emu

#define LAUNCH(k, s, ...) ((void)(s), emu::launch(k, __VA_ARGS__))

inline void __syncthreads() { emu::block_bar->arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned, float v, int o) {
  unsigned t = emu::tid(), w = t / 32, lane = t & 31;
  emu::shfl[t] = v;
  emu::warp_bar[w]->arrive_and_wait();
  float r = emu::shfl[w * 32 + (lane ^ (unsigned)o)];
  emu::warp_bar[w]->arrive_and_wait();
  return r;
}

inline float atomicAdd(float *p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }

/* Kernels exist for every "GPU" here. */
template <class F> cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, F *) {
  std::memset(attr, 0, sizeof *attr);
  return cudaSuccess;
}

/* Launch errors would be reported by the fake runtime's cudaGetLastError (always success). */
#endif
