/* kernels.cu: the CUDA kernels of the CUDA backend and their C launchers.
 *
 * What it does: every non-GEMM kernel of backend.h on bf16 activations with F32
 * arithmetic and F32 accumulation, mirroring the exact formulas documented in
 * runtime/cpu_kernels.c (the numerical reference; read each CPU kernel's comment
 * for the math); the softmax/probability pieces of attention (the attention GEMMs are
 * cuBLAS calls made by cuda_backend.c); bf16 <-> F32 conversions; the F32 reduction
 * the in-process NCCL-less channel uses for its collectives.
 *
 * What it does not: no GEMMs (cuBLAS), no allocation, no synchronisation, no error
 * formatting: each launcher enqueues on the stream it is given and returns
 * cudaGetLastError(); the caller (cuda_backend.c) turns a failure into a PPSRT_E* code
 * with CUDA_CHECK. Launches go through LAUNCH so that tests/gpu/emu can compile this
 * very file for the host and run it there. Reductions use F32 tree sums (the CPU sums some rows in double);
 * the difference is far below the bf16 tolerance the GPU tests state. */
#include <math.h>
#include <stdint.h>
#ifdef PPSRT_CUDA_EMULATE
/* tests/gpu/emu: the same kernels compiled as host C++ and run on host threads */
#include "cuda_emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_runtime.h>
/* LAUNCH(kernel, stream, grid, block)(args): kernel<<<grid, block, 0, stream>>>(args) */
#define LAUNCH(k, s, ...) k<<<__VA_ARGS__, 0, s>>>
#endif

#include "cuda_impl.h"
#include "../dropout.h"

typedef __nv_bfloat16 bf16;

#define GELU_K 0.7978845608028654f
#define GELU_A 0.044715f

static __device__ __forceinline__ float ld(const bf16 *p, size_t i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ void st(bf16 *p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

/* Grid for an elementwise kernel over n items: 256 threads, at most 65535*4 blocks,
 * grid-stride loops cover the rest. */
static unsigned grid_for(size_t n, int threads) {
  size_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 262140) b = 262140;
  return (unsigned)b;
}

#define GRID_STRIDE(i, n) for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
                               i += (size_t)gridDim.x * blockDim.x)

/* ---- block reductions (blockDim.x a multiple of 32, at most 1024) ---- */
static __device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
static __device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/* Sum over the block; every thread gets the result. sh: 32 floats of shared memory. */
static __device__ float block_sum(float v, float *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();   /* sh may still be read by a previous reduction */
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  return warp_sum(v);
}
static __device__ float block_max(float v, float *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -INFINITY;
  return warp_max(v);
}

/* Threads per row for row-wise kernels: a multiple of 32 up to 1024, about C/4. */
static int row_threads(int C) {
  int t = 32;
  while (t < 1024 && t * 4 < C) t <<= 1;
  return t;
}

/* ------------------------------------------------------------------------- */
/* elementwise                                                                  */

/* add_bias: y[n, c] = x[n, c] + bias[c]; y may alias x. */
static __global__ void k_add_bias(bf16 *y, const bf16 *x, const bf16 *bias, size_t total, int C) {
  GRID_STRIDE(i, total) st(y, i, ld(x, i) + ld(bias, i % (size_t)C));
}

/* add: y[i] = a[i] + c[i]. */
static __global__ void k_add(bf16 *y, const bf16 *a, const bf16 *c, size_t n) {
  GRID_STRIDE(i, n) st(y, i, ld(a, i) + ld(c, i));
}

/* bias-dropout-add (backend.h bias_dropout_add, dropout.h's mask; a and bias may be NULL):
 * y = a + keep(base + i) (x + bias[c]) scale, else a; in F32, one bf16 rounding */
static __global__ void k_bias_dropout_add(bf16 *y, const bf16 *a, const bf16 *x, const bf16 *bias, size_t n, int C,
                                          uint32_t thr, float scale, uint64_t key, uint64_t base) {
  GRID_STRIDE(i, n) {
    float v = ppsrt_drop_keep(thr, key, base + i) ? (ld(x, i) + (bias ? ld(bias, i % C) : 0.0f)) * scale : 0.0f;
    st(y, i, (a ? ld(a, i) : 0.0f) + v);
  }
}

static __global__ void k_gelu_fwd(bf16 *y, const bf16 *x, size_t n) {
  GRID_STRIDE(i, n) {
    float v = ld(x, i);
    float u = GELU_K * (v + GELU_A * v * v * v);
    st(y, i, 0.5f * v * (1.0f + tanhf(u)));
  }
}

static __global__ void k_gelu_bwd(bf16 *dx, const bf16 *dy, const bf16 *x, size_t n) {
  GRID_STRIDE(i, n) {
    float v = ld(x, i);
    float u = GELU_K * (v + GELU_A * v * v * v);
    float t = tanhf(u);
    float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * v * v);
    st(dx, i, ld(dy, i) * d);
  }
}

/* Vectorised forms: 8 bf16 (16 bytes) per load and store and 32-bit index arithmetic
 * (add_bias: one modulo per 8 elements); the launchers use them when every pointer is
 * 16-byte aligned (and C % 8 == 0 for add_bias), the scalar kernels above take the
 * n % 8 tail and unaligned pointers. Same formulas, element by element. */
#define VGRID(i, n8) for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (n8); i += gridDim.x * blockDim.x)
static __device__ __forceinline__ void ld8(float *f, const bf16 *p, unsigned i) {
  alignas(16) bf16 h[8];
  *reinterpret_cast<uint4 *>(h) = reinterpret_cast<const uint4 *>(p)[i];
  for (int k = 0; k < 8; k++) f[k] = __bfloat162float(h[k]);
}
static __device__ __forceinline__ void st8(bf16 *p, unsigned i, const float *f) {
  alignas(16) bf16 h[8];
  for (int k = 0; k < 8; k++) h[k] = __float2bfloat16_rn(f[k]);
  reinterpret_cast<uint4 *>(p)[i] = *reinterpret_cast<const uint4 *>(h);
}
static __device__ __forceinline__ float gelu_f(float v) {
  float u = GELU_K * (v + GELU_A * v * v * v);
  return 0.5f * v * (1.0f + tanhf(u));
}
static __device__ __forceinline__ float gelu_d(float v) {
  float u = GELU_K * (v + GELU_A * v * v * v);
  float t = tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * v * v);
}
static __global__ void k_add_bias8(bf16 *y, const bf16 *x, const bf16 *bias, unsigned n8, unsigned C8) {
  VGRID(i, n8) {
    float a[8], b[8];
    ld8(a, x, i);
    ld8(b, bias, i % C8);
    for (int k = 0; k < 8; k++) a[k] += b[k];
    st8(y, i, a);
  }
}
static __global__ void k_add8(bf16 *y, const bf16 *a, const bf16 *c, unsigned n8) {
  VGRID(i, n8) {
    float u[8], v[8];
    ld8(u, a, i);
    ld8(v, c, i);
    for (int k = 0; k < 8; k++) u[k] += v[k];
    st8(y, i, u);
  }
}
static __global__ void k_gelu_fwd8(bf16 *y, const bf16 *x, unsigned n8) {
  VGRID(i, n8) {
    float v[8];
    ld8(v, x, i);
    for (int k = 0; k < 8; k++) v[k] = gelu_f(v[k]);
    st8(y, i, v);
  }
}
static __global__ void k_gelu_bwd8(bf16 *dx, const bf16 *dy, const bf16 *x, unsigned n8) {
  VGRID(i, n8) {
    float v[8], g[8];
    ld8(v, x, i);
    ld8(g, dy, i);
    for (int k = 0; k < 8; k++) g[k] *= gelu_d(v[k]);
    st8(dx, i, g);
  }
}

/* add_bias_gelu: pre = x + bias rounded to bf16 as stored, y = gelu(pre): bit for bit
 * add_bias then gelu_fwd, one read of x and bias, one write of pre and y. pre may alias
 * x (each element is read before it is written, by the same thread). */
static __global__ void k_add_bias_gelu(bf16 *y, bf16 *pre, const bf16 *x, const bf16 *bias, size_t total, int C) {
  GRID_STRIDE(i, total) {
    bf16 p = __float2bfloat16_rn(ld(x, i) + ld(bias, i % (size_t)C));
    pre[i] = p;
    st(y, i, gelu_f(__bfloat162float(p)));
  }
}
static __global__ void k_add_bias_gelu8(bf16 *y, bf16 *pre, const bf16 *x, const bf16 *bias, unsigned n8,
                                        unsigned C8) {
  VGRID(i, n8) {
    float a[8], b[8];
    ld8(a, x, i);
    ld8(b, bias, i % C8);
    alignas(16) bf16 h[8];
    for (int k = 0; k < 8; k++) {
      h[k] = __float2bfloat16_rn(a[k] + b[k]);
      a[k] = gelu_f(__bfloat162float(h[k]));
    }
    reinterpret_cast<uint4 *>(pre)[i] = *reinterpret_cast<const uint4 *>(h);
    st8(y, i, a);
  }
}

/* ------------------------------------------------------------------------- */
/* column reductions: bias_grad and layernorm_bwd_weight                        */

/* Block (32, 8) covers 32 columns; blockIdx.y takes a slice of rows; partial sums
 * are added with atomicAdd (order of the F32 additions is not fixed).
 * dsum[c] += sum_n dy (bias_grad, dbeta; skipped when NULL), dxhat[c] += sum_n dy xhat
 * (dgamma; skipped when NULL), xhat = (x - mean) rstd, or x rstd when mean is NULL (RMS
 * norm). */
#define COL_ROWS_PER_BLOCK 256
static __global__ void k_colsum(float *dsum, float *dxhat, const bf16 *dy, const bf16 *x, const float *mean,
                                const float *rstd, int N, int C) {
  __shared__ float s1[8][33], s2[8][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  int r0 = blockIdx.y * COL_ROWS_PER_BLOCK, r1 = min(N, r0 + COL_ROWS_PER_BLOCK);
  float a = 0.0f, g = 0.0f;
  if (c < C)
    for (int n = r0 + threadIdx.y; n < r1; n += 8) {
      float d = ld(dy, (size_t)n * C + c);
      a += d;
      if (dxhat) g += d * (ld(x, (size_t)n * C + c) - (mean ? mean[n] : 0.0f)) * rstd[n];
    }
  s1[threadIdx.y][threadIdx.x] = a;
  s2[threadIdx.y][threadIdx.x] = g;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < 8; k++) {
      a += s1[k][threadIdx.x];
      g += s2[k][threadIdx.x];
    }
    if (dsum) atomicAdd(&dsum[c], a);
    if (dxhat) atomicAdd(&dxhat[c], g);
  }
}

static cudaError_t launch_colsum(cudaStream_t s, float *dsum, float *dxhat, const bf16 *dy, const bf16 *x,
                                 const float *mean, const float *rstd, int N, int C) {
  if (N <= 0 || C <= 0 || (!dsum && !dxhat)) return cudaSuccess;
  dim3 block(32, 8), grid((C + 31) / 32, (N + COL_ROWS_PER_BLOCK - 1) / COL_ROWS_PER_BLOCK);
  LAUNCH(k_colsum, s, grid, block)(dsum, dxhat, dy, x, mean, rstd, N, C);
  return cudaGetLastError();
}

/* ------------------------------------------------------------------------- */
/* layer norm and RMS norm: one block per row                                  */

/* mean == NULL selects RMS norm (as the CPU): no centering (m = 0) and no mean_c(g) term
 * in the input gradient, one block reduction fewer in each; beta == NULL: no shift. The
 * branches are uniform over the launch. */
static __global__ void k_layernorm_fwd(bf16 *y, float *mean, float *rstd, const bf16 *x, const bf16 *gamma,
                                       const bf16 *beta, int C, float eps) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  const bf16 *xr = x + row * C;
  float m = 0.0f, v = 0.0f;
  if (mean) {
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += ld(xr, c);
    m = block_sum(s, sh) / C;
  }
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float d = ld(xr, c) - m;
    v += d * d;
  }
  float r = rsqrtf(block_sum(v, sh) / C + eps);
  bf16 *yr = y + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    st(yr, c, (ld(xr, c) - m) * r * ld(gamma, c) + (beta ? ld(beta, c) : 0.0f));
  if (threadIdx.x == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = r;
  }
}

static __global__ void k_layernorm_bwd_input(bf16 *dx, const bf16 *dy, const bf16 *x, const float *mean,
                                             const float *rstd, const bf16 *gamma, int C, int accumulate) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  const bf16 *xr = x + row * C, *dyr = dy + row * C;
  bf16 *dxr = dx + row * C;
  float m = mean ? mean[row] : 0.0f, r = rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float g = ld(dyr, c) * ld(gamma, c);
    sg += g;
    sgx += g * ((ld(xr, c) - m) * r);
  }
  float mg = mean ? block_sum(sg, sh) / C : 0.0f;
  float mgx = block_sum(sgx, sh) / C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float d = r * (ld(dyr, c) * ld(gamma, c) - mg - (ld(xr, c) - m) * r * mgx);
    st(dxr, c, accumulate ? ld(dxr, c) + d : d);
  }
}

/* Vectorised row kernels (C % 256 == 0, C <= 8192, every row pointer 16-byte aligned):
 * C/8 threads per row, each holding its 8 contiguous elements in registers, so x (and
 * dy) are read from memory once instead of three times and loads are 16 bytes. Same
 * formulas as the kernels above; only the order of the F32 additions differs. */
static __global__ void k_layernorm_fwd8(bf16 *y, float *mean, float *rstd, const bf16 *x, const bf16 *gamma,
                                        const bf16 *beta, int C, float eps) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  unsigned t = threadIdx.x;
  float v[8], g[8], b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  ld8(v, x + row * C, t);
  float m = 0.0f;
  if (mean) {
    float s = 0.0f;
    for (int k = 0; k < 8; k++) s += v[k];
    m = block_sum(s, sh) / C;
  }
  float q = 0.0f;
  for (int k = 0; k < 8; k++) q += (v[k] - m) * (v[k] - m);
  float r = rsqrtf(block_sum(q, sh) / C + eps);
  ld8(g, gamma, t);
  if (beta) ld8(b, beta, t);
  for (int k = 0; k < 8; k++) v[k] = (v[k] - m) * r * g[k] + b[k];
  st8(y + row * C, t, v);
  if (t == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = r;
  }
}

static __global__ void k_layernorm_bwd_input8(bf16 *dx, const bf16 *dy, const bf16 *x, const float *mean,
                                              const float *rstd, const bf16 *gamma, int C, int accumulate) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  unsigned t = threadIdx.x;
  float m = mean ? mean[row] : 0.0f, r = rstd[row];
  float xv[8], gv[8], dv[8];
  ld8(xv, x + row * C, t);
  ld8(dv, dy + row * C, t);
  ld8(gv, gamma, t);
  float sg = 0.0f, sgx = 0.0f;
  for (int k = 0; k < 8; k++) {
    xv[k] = (xv[k] - m) * r;   /* x hat */
    gv[k] *= dv[k];            /* dy * gamma */
    sg += gv[k];
    sgx += gv[k] * xv[k];
  }
  float mg = mean ? block_sum(sg, sh) / C : 0.0f;
  float mgx = block_sum(sgx, sh) / C;
  if (accumulate) ld8(dv, dx + row * C, t);
  for (int k = 0; k < 8; k++) {
    float d = r * (gv[k] - mg - xv[k] * mgx);
    dv[k] = accumulate ? dv[k] + d : d;
  }
  st8(dx + row * C, t, dv);
}

/* beta (forward) may be NULL: a NULL pointer is aligned */
static int ln_vec(int C, const void *a, const void *b, const void *c, const void *d) {
  uintptr_t al = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d;
  return C % 256 == 0 && C <= 8192 && (al & 15) == 0;
}

/* ------------------------------------------------------------------------- */
/* rotary position embedding (rope) and SwiGLU                                  */

/* rope, per row n, head j < H, pair i < D/2 (cpu_kernels.c k_rope): c, s from
 * cs[(pos[n] D/2 + i) 2 + 0/1], s negated for the inverse; a = x[jD + i],
 * b = x[jD + i + D/2]: x[jD + i] = a c - b s, x[jD + i + D/2] = b c + a s. In place on
 * strided rows (ldx); columns past H*D are never touched. One thread per pair. */
static __global__ void k_rope(bf16 *x, int ldx, const int32_t *pos, const float *cs, int N, int H, int D,
                              int inverse) {
  int hd = D / 2;
  size_t per_row = (size_t)H * hd, total = (size_t)N * per_row;
  GRID_STRIDE(k, total) {
    size_t n = k / per_row, r = k % per_row;
    int j = (int)(r / hd), i = (int)(r % hd);
    const float *t = cs + ((size_t)pos[n] * hd + i) * 2;
    float c = t[0], sn = inverse ? -t[1] : t[1];
    bf16 *p = x + n * ldx + (size_t)j * D + i;
    float a = ld(p, 0), b = ld(p, hd);
    st(p, 0, a * c - b * sn);
    st(p, hd, b * c + a * sn);
  }
}

/* Vectorised rope (D % 16 == 0, ldx % 8 == 0, x and cs 16-byte aligned): one thread per 8
 * consecutive pairs of a head: a 16-byte load and store of each half and 64 bytes of the
 * table (four float4). Same formula, pair by pair. */
static __global__ void k_rope8(bf16 *x, int ldx, const int32_t *pos, const float *cs, unsigned N, unsigned H,
                               unsigned D, int inverse) {
  unsigned hd8 = D / 16, per_row = H * hd8;
  VGRID(k, N * per_row) {
    unsigned n = k / per_row, r = k % per_row, j = r / hd8, i8 = r % hd8;
    const float4 *t = reinterpret_cast<const float4 *>(cs + ((size_t)pos[n] * (D / 2) + i8 * 8) * 2);
    bf16 *p = x + (size_t)n * ldx + (size_t)j * D;   /* head j; first half at unit i8, second at hd8 + i8 */
    float a[8], b[8], c[8], sn[8];
    ld8(a, p, i8);
    ld8(b, p, hd8 + i8);
    for (int q = 0; q < 4; q++) {
      float4 f = t[q];
      c[2 * q] = f.x;
      sn[2 * q] = inverse ? -f.y : f.y;
      c[2 * q + 1] = f.z;
      sn[2 * q + 1] = inverse ? -f.w : f.w;
    }
    float o1[8], o2[8];
    for (int q = 0; q < 8; q++) {
      o1[q] = a[q] * c[q] - b[q] * sn[q];
      o2[q] = b[q] * c[q] + a[q] * sn[q];
    }
    st8(p, i8, o1);
    st8(p, hd8 + i8, o2);
  }
}

/* SwiGLU (cpu_kernels.c k_swiglu_fwd/bwd): pre [N, 2C] = [gate | up] per row,
 * y[n, c] = g sigmoid(g) u; dpre[n, c] = dy u sigmoid(g) (1 + g (1 - sigmoid(g))),
 * dpre[n, C + c] = dy g sigmoid(g). The backward may run in place (dpre == pre): each
 * thread reads its g and u before it writes their gradients (no __restrict__ here). */
static __device__ __forceinline__ float sigm(float g) { return 1.0f / (1.0f + expf(-g)); }

static __global__ void k_swiglu_fwd(bf16 *y, const bf16 *pre, int N, int C) {
  size_t total = (size_t)N * C;
  GRID_STRIDE(k, total) {
    size_t n = k / C, c = k % C;
    const bf16 *g = pre + n * 2 * C;
    float gg = ld(g, c);
    st(y, k, gg * sigm(gg) * ld(g, C + c));
  }
}

static __global__ void k_swiglu_bwd(bf16 *dpre, const bf16 *dy, const bf16 *pre, int N, int C) {
  size_t total = (size_t)N * C;
  GRID_STRIDE(k, total) {
    size_t n = k / C, c = k % C, o = n * 2 * C + c;
    float gg = ld(pre, o), uu = ld(pre, o + C), d = ld(dy, k), sg = sigm(gg);
    st(dpre, o, d * uu * sg * (1.0f + gg * (1.0f - sg)));
    st(dpre, o + C, d * gg * sg);
  }
}

/* Vectorised (C % 8 == 0, every pointer 16-byte aligned): 8 consecutive columns of a row
 * per thread, in units of 8 bf16: gate at n 2C8 + c8, up at n 2C8 + C8 + c8. */
static __global__ void k_swiglu_fwd8(bf16 *y, const bf16 *pre, unsigned n8, unsigned C8) {
  VGRID(k, n8) {
    unsigned n = k / C8, c8 = k % C8, o = 2 * n * C8 + c8;
    float g[8], u[8];
    ld8(g, pre, o);
    ld8(u, pre, o + C8);
    for (int q = 0; q < 8; q++) g[q] = g[q] * sigm(g[q]) * u[q];
    st8(y, k, g);
  }
}

static __global__ void k_swiglu_bwd8(bf16 *dpre, const bf16 *dy, const bf16 *pre, unsigned n8, unsigned C8) {
  VGRID(k, n8) {
    unsigned n = k / C8, c8 = k % C8, o = 2 * n * C8 + c8;
    float g[8], u[8], d[8];
    ld8(g, pre, o);
    ld8(u, pre, o + C8);
    ld8(d, dy, k);
    for (int q = 0; q < 8; q++) {
      float gg = g[q], sg = sigm(gg);
      g[q] = d[q] * u[q] * sg * (1.0f + gg * (1.0f - sg));
      u[q] = d[q] * gg * sg;
    }
    st8(dpre, o, g);
    st8(dpre, o + C8, u);
  }
}

/* ------------------------------------------------------------------------- */
/* embedding over a vocabulary shard                                           */

static __global__ void k_embedding_fwd(bf16 *out, const int32_t *ids, const bf16 *table, int N, int C, int lo,
                                       int hi, int accumulate) {
  size_t total = (size_t)N * C;
  GRID_STRIDE(i, total) {
    int n = (int)(i / C), c = (int)(i % C);
    int id = ids[n];
    if (id >= lo && id < hi) {
      float t = ld(table, (size_t)(id - lo) * C + c);
      st(out, i, accumulate ? ld(out, i) + t : t);
    } else if (!accumulate) {
      st(out, i, 0.0f);
    }
  }
}

static __global__ void k_embedding_bwd(float *dtable, const bf16 *dout, const int32_t *ids, int N, int C,
                                       int lo, int hi) {
  size_t total = (size_t)N * C;
  GRID_STRIDE(i, total) {
    int n = (int)(i / C), c = (int)(i % C);
    int id = ids[n];
    if (id >= lo && id < hi) atomicAdd(&dtable[(size_t)(id - lo) * C + c], ld(dout, i));
  }
}

/* ------------------------------------------------------------------------- */
/* softmax over a vocabulary shard                                             */

/* One block per row: max, then sum exp(l - max) (two passes over the row, as the CPU). */
static __global__ void k_softmax_stats(float *max, float *sumexp, float *tgt, const bf16 *logits,
                                       const int32_t *targets, int V, int lo) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  const bf16 *l = logits + row * V;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, ld(l, v));
  mx = block_max(mx, sh);
  float s = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(ld(l, v) - mx);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) {
    max[row] = mx;
    sumexp[row] = s;
    int t = targets[row] - lo;
    if (tgt) tgt[row] = (t >= 0 && t < V) ? ld(l, t) : 0.0f;
  }
}

/* dlogits may alias logits: each element is read then written by one thread. */
static __global__ void k_softmax_xent_bwd(bf16 *dl, const bf16 *logits, const float *gmax, const float *gsum,
                                          const int32_t *targets, int N, int V, int lo, float scale) {
  size_t total = (size_t)N * V;
  GRID_STRIDE(i, total) {
    int n = (int)(i / V), v = (int)(i % V);
    float o = expf(ld(logits, i) - gmax[n]) * (scale / gsum[n]);
    if (v == targets[n] - lo) o -= scale;
    st(dl, i, o);
  }
}

static __global__ void k_softmax_rescale_f32(float *x, const float *lmax, const float *lsum, const float *gmax,
                                             const float *gsum, int N, int C) {
  size_t total = (size_t)N * C;
  GRID_STRIDE(i, total) {
    int n = (int)(i / C);
    float f = expf(lmax[n] - gmax[n]);
    if (lsum) f *= lsum[n];
    if (gsum) f /= gsum[n];
    x[i] *= f;
  }
}

/* ------------------------------------------------------------------------- */
/* optimizer and F32 helpers                                                   */

static __global__ void k_optimizer(int kind, float *w, bf16 *param, float *g, float *m, float *v, size_t n,
                                   float lr, float beta1, float beta2, float eps, float wd, float c1, float c2) {
  GRID_STRIDE(i, n) {
    float wi = w[i], gi = g[i];
    if (kind == 0) {
      wi = wi - lr * wd * wi - lr * gi;
    } else {
      float mi = beta1 * m[i] + (1.0f - beta1) * gi;
      float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      float mh = mi * c1, vh = vi * c2;
      wi = wi - lr * wd * wi - lr * mh / (sqrtf(vh) + eps);
    }
    w[i] = wi;
    if (param) st(param, i, wi);
    g[i] = 0.0f;
  }
}

static __global__ void k_axpy(float *y, const float *x, float a, size_t n) { GRID_STRIDE(i, n) y[i] += a * x[i]; }
static __global__ void k_scale(float *x, float a, size_t n) { GRID_STRIDE(i, n) x[i] *= a; }
static __global__ void k_bf16_to_f32(float *d, const bf16 *s, size_t n) { GRID_STRIDE(i, n) d[i] = ld(s, i); }
static __global__ void k_f32_to_bf16(bf16 *d, const float *s, size_t n) { GRID_STRIDE(i, n) st(d, i, s[i]); }

static __global__ void k_scale_matrix(void *C, int is_bf16, int M, int N, int ldc, float beta) {
  size_t total = (size_t)M * N;
  GRID_STRIDE(i, total) {
    size_t r = i / N, c = i % N, o = r * ldc + c;
    if (is_bf16) {
      bf16 *p = (bf16 *)C;
      st(p, o, beta == 0.0f ? 0.0f : beta * ld(p, o));
    } else {
      float *p = (float *)C;
      p[o] = beta == 0.0f ? 0.0f : beta * p[o];
    }
  }
}

/* ------------------------------------------------------------------------- */
/* attention pieces (cpu_kernels.c k_attention_fwd/bwd give the math)          */

/* Attention works on a chunk of query rows [r0, r0 + R) against keys [0, C), C = r0 + R
 * (keys past the chunk's last row are masked for all its rows, so they are never
 * computed). S, P, dP: [nh][R][C]; lse and delta: heads T apart, row r0 + il.
 *
 * One block per (chunk row il, head hh), query i = r0 + il: s_j = scale * S[j] for j <= i,
 * lse_i = max + log sum exp(s_j - max), P_ij = exp(s_j - max) / sum (as the CPU, which
 * normalises by the sum), 0 for j > i. */
/* Attention dropout (dropout.h): P~_ij = keep(((hb + hh) T + i) T + j) P_ij dscale, else 0
 * (T: the kernels' Td, the whole sequence's length; their T is lse's and delta's stride),
 * hb = b heads + base + h0 (the unit's first head in the whole layer); thr 0: none. */
static __device__ __forceinline__ float attn_drop(float p, uint32_t thr, float dscale, uint64_t key, uint64_t hb,
                                                  int hh, int T, int i, int j) {
  if (!thr) return p;
  return ppsrt_drop_keep(thr, key, ((hb + (uint64_t)hh) * T + (uint64_t)i) * T + (uint64_t)j) ? p * dscale : 0.0f;
}

static __global__ void k_attn_softmax_fwd(bf16 *P, float *lse, const float *S, int R, int C, int r0, int T, int Td,
                                          float scale, uint32_t thr, float dscale, uint64_t key, uint64_t hb) {
  __shared__ float sh[32];
  int il = blockIdx.x, hh = blockIdx.y, i = r0 + il;
  size_t off = ((size_t)hh * R + il) * C;
  const float *s = S + off;
  bf16 *p = P + off;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, s[j] * scale);
  mx = block_max(mx, sh);
  float l = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) l += expf(s[j] * scale - mx);
  l = block_sum(l, sh);
  float inv = 1.0f / l;
  for (int j = threadIdx.x; j < C; j += blockDim.x)
    st(p, j, j <= i ? attn_drop(expf(s[j] * scale - mx) * inv, thr, dscale, key, hb, hh, Td, i, j) : 0.0f);
  if (threadIdx.x == 0) lse[(size_t)hh * T + i] = mx + logf(l);
}

static __global__ void k_attn_prob(bf16 *P, const float *S, const float *lse, int R, int C, int r0, int T, int Td,
                                   float scale, uint32_t thr, float dscale, uint64_t key, uint64_t hb) {
  int il = blockIdx.x, hh = blockIdx.y, i = r0 + il;
  size_t off = ((size_t)hh * R + il) * C;
  float li = lse[(size_t)hh * T + i];
  for (int j = threadIdx.x; j < C; j += blockDim.x)
    st(P + off, j, j <= i ? attn_drop(expf(S[off + j] * scale - li), thr, dscale, key, hb, hh, Td, i, j) : 0.0f);
}

/* One warp per (hh, i). */
static __global__ void k_attn_delta(float *delta, const bf16 *dout, const bf16 *out, int ldo, int nh, int T,
                                    int D) {
  int wid = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (wid >= nh * T) return;
  int hh = wid / T, i = wid % T;
  const bf16 *a = dout + (size_t)i * ldo + (size_t)hh * D, *b = out + (size_t)i * ldo + (size_t)hh * D;
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) s += ld(a, d) * ld(b, d);
  s = warp_sum(s);
  if (lane == 0) delta[(size_t)hh * T + i] = s;
}

static __global__ void k_attn_dscores(bf16 *dS, const float *S, const float *dP, const float *lse,
                                      const float *delta, int R, int C, int r0, int T, int Td, float scale, uint32_t thr,
                                      float dscale, uint64_t key, uint64_t hb) {
  int il = blockIdx.x, hh = blockIdx.y, i = r0 + il;
  size_t off = ((size_t)hh * R + il) * C;
  float li = lse[(size_t)hh * T + i], de = delta[(size_t)hh * T + i];
  for (int j = threadIdx.x; j < C; j += blockDim.x) {
    float v = 0.0f;   /* with dropout dP is that of the dropped probabilities (cpu_kernels.c) */
    if (j <= i) v = expf(S[off + j] * scale - li) * (attn_drop(dP[off + j], thr, dscale, key, hb, hh, Td, i, j) - de) * scale;
    st(dS + off, j, v);
  }
}

/* src F32 [nh][T][D] -> dst[t * ldd + hh * D + d] (bf16): per-head accumulators into the
 * heads' columns of a fused gradient */
static __global__ void k_store_heads(bf16 *dst, int ldd, const float *src, int nh, int T, int D) {
  size_t TD = (size_t)T * D, total = (size_t)nh * TD;
  GRID_STRIDE(i, total) {
    size_t hh = i / TD, r = i % TD, t = r / D, d = r % D;
    st(dst, t * ldd + hh * D + d, src[i]);
  }
}

/* acc[i] += sum_j src[j * n + i], j < nsum: per-head accumulators summed into their kv
 * group's */
static __global__ void k_sum_heads(float *acc, const float *src, int nsum, size_t n) {
  GRID_STRIDE(i, n) {
    float v = acc[i];
    for (int j = 0; j < nsum; j++) v += src[(size_t)j * n + i];
    acc[i] = v;
  }
}

/* ------------------------------------------------------------------------- */
/* in-process collective reduction                                             */

struct srcs_arg { const float *p[PPSRT_CU_MAX_SRCS]; };

static __global__ void k_reduce(float *dst, srcs_arg a, int nsrc, size_t n, int op_max) {
  GRID_STRIDE(i, n) {
    float r = a.p[0][i];
    for (int k = 1; k < nsrc; k++) r = op_max ? fmaxf(r, a.p[k][i]) : r + a.p[k][i];
    dst[i] = r;
  }
}

/* ------------------------------------------------------------------------- */
/* launchers                                                                    */


/* ------------------------------------------------------------------------- */
/* mixture of experts (backend.h moe_*; runtime/moe.c): one thread a token for the
 * routing (E <= 1024 logits a row, read a few times), grid-stride loops over
 * (token, slot, column) for the rest; no atomics: every output element has one writer,
 * sums over a token's K slots run in k order, so results are deterministic. */

/* the routing (backend.h moe_route): a token's selection score of expert e (mx, z: the
 * row's largest logit and sum of exp(l - mx)); the bias (sigmoid only) for the choice */
static __device__ float route_score(const float *l, int e, const ppsrt_moe_router r, float mx, float z) {
  if (r.sigmoid) return 1.0f / (1.0f + expf(-l[e]));
  return r.pre_softmax ? expf(l[e] - mx) / z : l[e];
}
/* the k-th choice (the K earlier ones in ix): the largest score not yet taken, ties the lower index */
static __device__ int route_pick(const float *l, int E, int k, const int32_t *ix, const ppsrt_moe_router r,
                                 const float *bias, float mx, float z) {
  int best = -1;
  float bv = 0.0f;
  for (int e = 0; e < E; e++) {
    int taken = 0;
    for (int j = 0; j < k && !taken; j++) taken = ix[j] == e;
    float v = route_score(l, e, r, mx, z) + (bias ? bias[e] : 0.0f);
    if (!taken && (best < 0 || v > bv)) { best = e; bv = v; }
  }
  return best;
}

static __global__ void k_moe_route(const float *logits, int N, int E, int K, ppsrt_moe_router r, int32_t *idx,
                                   float *w) {
  GRID_STRIDE(n, (size_t)N) {
    const float *l = logits + n * E;
    float mx = l[0], z = 0.0f, scale = r.scale > 0.0f ? r.scale : 1.0f;
    for (int e = 1; e < E; e++) mx = fmaxf(mx, l[e]);
    for (int e = 0; e < E; e++) z += expf(l[e] - mx);
    int32_t *ix = idx + n * K;
    float *wr = w + n * K, ws = 0.0f;
    for (int k = 0; k < K; k++)   /* (r.force: --check's replay, moe_router.h) */
      ix[k] = r.force ? r.force[n * K + k] : route_pick(l, E, k, ix, r, r.sigmoid ? r.bias : NULL, mx, z);
    if (r.sigmoid) {
      for (int k = 0; k < K; k++) ws += (wr[k] = route_score(l, ix[k], r, mx, z));
      for (int k = 0; k < K && K > 1; k++) wr[k] /= ws + 1e-20f;
    } else if (r.pre_softmax) {
      for (int k = 0; k < K; k++) wr[k] = route_score(l, ix[k], r, mx, z);
    } else {
      for (int k = 0; k < K; k++) ws += (wr[k] = expf(l[ix[k]] - l[ix[0]]));
      for (int k = 0; k < K; k++) wr[k] /= ws;
    }
    for (int k = 0; k < K; k++) wr[k] *= scale;
  }
}

/* stat (backend.h moe_route): a block an expert e, its threads over the tokens, then the
 * block's sums (a fixed tree for a fixed block size: deterministic, no atomics): the slots
 * the unbiased scores route to e (with a bias the choice again without it), the
 * load-balancing loss's scores summed; expert 0's block also sum_n lse_n^2. (One thread an
 * expert, as before the router options, left E threads each walking all N tokens and their
 * E logits: O(N E) serial work a thread.) */
static __global__ void k_moe_stat(const float *logits, const int32_t *idx, int N, int E, int K, ppsrt_moe_router r,
                                  float *stat) {
  __shared__ float sh[32];
  for (int e = blockIdx.x; e < E; e += gridDim.x) {
    float c = 0.0f, ps = 0.0f, zs = 0.0f;
    for (size_t n = threadIdx.x; n < (size_t)N; n += blockDim.x) {
      const float *l = logits + n * E;
      float mx = l[0], z = 0.0f, ss = 0.0f;
      for (int j = 1; j < E; j++) mx = fmaxf(mx, l[j]);
      for (int j = 0; j < E; j++) z += expf(l[j] - mx);
      if (r.sigmoid) {
        for (int j = 0; j < E; j++) ss += 1.0f / (1.0f + expf(-l[j]));
        ps += 1.0f / (1.0f + expf(-l[e])) / (ss + 1e-20f);
      } else {
        ps += expf(l[e] - mx) / z;
      }
      if (e == 0) { float lse = mx + logf(z); zs += lse * lse; }
      if (r.sigmoid && r.bias) {   /* the unbiased choice: is e among the K largest sigmoids? */
        float se = 1.0f / (1.0f + expf(-l[e]));
        int above = 0;
        for (int j = 0; j < E; j++) {
          float sj = 1.0f / (1.0f + expf(-l[j]));
          above += sj > se || (sj == se && j < e);
        }
        c += above < K ? 1.0f : 0.0f;
      } else {
        for (int k = 0; k < K; k++) c += idx[n * K + k] == (int32_t)e ? 1.0f : 0.0f;
      }
    }
    c = block_sum(c, sh);   /* (counts: exact integers in F32 up to 2^24 slots) */
    ps = block_sum(ps, sh);
    if (e == 0) zs = block_sum(zs, sh);   /* (e is the block's: every thread or none) */
    if (threadIdx.x == 0) {
      stat[e] = c;
      stat[E + e] = ps;
      if (e == 0) stat[2 * E] = zs;
    }
  }
}

/* the routing's backward (backend.h moe_route_bwd): one thread a token, F32, rounded once */
static __global__ void k_moe_route_bwd(bf16 *dl, const float *dw, const float *logits, const int32_t *idx,
                                       ppsrt_moe_router r, const float *coef, int N, int E, int K) {
  GRID_STRIDE(n, (size_t)N) {
    const float *l = logits + n * E, *dwr = dw + n * K;
    const int32_t *ix = idx + n * K;
    float mx = l[0], z = 0.0f, ss = 0.0f, sc = 0.0f, scale = r.scale > 0.0f ? r.scale : 1.0f;
    for (int e = 1; e < E; e++) mx = fmaxf(mx, l[e]);
    for (int e = 0; e < E; e++) { z += expf(l[e] - mx); ss += 1.0f / (1.0f + expf(-l[e])); }
    float lse = mx + logf(z), t = 1e-20f, gs = 0.0f, qs = 0.0f;
    if (coef)
      for (int e = 0; e < E; e++)
        sc += (r.sigmoid ? 1.0f / (1.0f + expf(-l[e])) / (ss + 1e-20f) : expf(l[e] - mx) / z) * coef[e];
    /* the sums of the selected: sigmoid t = sum s, gs = sum g s; pre gs = sum g p; softmax qs, gs */
    for (int k = 0; k < K; k++) {
      float g = scale * dwr[k], v = r.sigmoid ? 1.0f / (1.0f + expf(-l[ix[k]])) : expf(l[ix[k]] - mx) / z;
      if (r.sigmoid) t += v;
      if (!r.sigmoid && !r.pre_softmax) { v = expf(l[ix[k]] - l[ix[0]]); qs += v; }
      gs += g * v;
    }
    for (int e = 0; e < E; e++) {
      float p = expf(l[e] - mx) / z, s = 1.0f / (1.0f + expf(-l[e])), v = r.zcoef * lse * p;
      if (coef) v += r.sigmoid ? s * (1.0f - s) / (ss + 1e-20f) * (coef[e] - sc) : p * (coef[e] - sc);
      if (r.pre_softmax && !r.sigmoid) v -= p * gs;
      for (int k = 0; k < K; k++) {
        if (ix[k] != e) continue;
        float g = scale * dwr[k];
        if (r.sigmoid) v += (K > 1 ? (g - gs / t) / t : g) * s * (1.0f - s);
        else if (r.pre_softmax) v += p * g;
        else { float q = expf(l[e] - l[ix[0]]) / qs; v += q * (g - gs / qs); }
      }
      st(dl, n * E + e, v);
    }
  }
}

/* the moe_* kernels: a slot at a position below 0 (dropped over an expert's capacity, or
 * another rank's expert's: runtime/moe.c) has no row: nothing copied, summed or combined,
 * its dw 0 (as cpu_kernels.c's) */
static __global__ void k_moe_permute(bf16 *dst, const bf16 *src, const int32_t *pos, int N, int K, int C) {
  GRID_STRIDE(i, (size_t)N * K * C) {
    size_t s = i / C, c = i % C, n = s / K;
    if (pos[s] >= 0) dst[(size_t)pos[s] * C + c] = src[n * C + c];
  }
}

static __global__ void k_moe_permute_bwd(bf16 *dx, const bf16 *dp, const int32_t *pos, int N, int K, int C,
                                         int accumulate) {
  GRID_STRIDE(i, (size_t)N * C) {
    size_t n = i / C, c = i % C;
    float v = accumulate ? ld(dx, i) : 0.0f;
    for (int k = 0; k < K; k++)
      if (pos[n * K + k] >= 0) v += ld(dp, (size_t)pos[n * K + k] * C + c);
    st(dx, i, v);
  }
}

static __global__ void k_moe_unpermute(bf16 *y, const bf16 *a, const bf16 *e, const int32_t *pos, const float *w, int N,
                                       int K, int C) {
  GRID_STRIDE(i, (size_t)N * C) {
    size_t n = i / C, c = i % C;
    float v = a ? ld(a, i) : 0.0f;
    for (int k = 0; k < K; k++)
      if (pos[n * K + k] >= 0) v += w[n * K + k] * ld(e, (size_t)pos[n * K + k] * C + c);
    st(y, i, v);
  }
}

/* dw: one warp a slot (the dot product over C, reduced with shuffles) */
static __global__ void k_moe_unpermute_dw(float *dw, const bf16 *dy, const bf16 *e, const int32_t *pos, int N, int K,
                                          int C) {
  size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32, nw = (size_t)gridDim.x * blockDim.x / 32;
  int lane = threadIdx.x % 32;
  for (size_t s = warp; s < (size_t)N * K; s += nw) {
    if (pos[s] < 0) {   /* (the whole warp's slot: no lane reaches the shuffles) */
      if (!lane) dw[s] = 0.0f;
      continue;
    }
    size_t n = s / K, row = (size_t)pos[s] * C;
    float acc = 0.0f;
    for (int c = lane; c < C; c += 32) acc += ld(dy, n * C + c) * ld(e, row + c);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);   /* (every lane: the sum) */
    if (!lane) dw[s] = acc;
  }
}

static __global__ void k_moe_unpermute_de(bf16 *de, const bf16 *dy, const int32_t *pos, const float *w, int N, int K,
                                          int C) {
  GRID_STRIDE(i, (size_t)N * K * C) {
    size_t s = i / C, c = i % C, n = s / K;
    if (pos[s] >= 0) st(de, (size_t)pos[s] * C + c, w[s] * ld(dy, n * C + c));
  }
}

#define EW(kernel, n, ...)                                                  \
  do {                                                                      \
    if ((n) == 0) return cudaSuccess;                                       \
    LAUNCH(kernel, s, grid_for((n), 256), 256)(__VA_ARGS__);                 \
    return cudaGetLastError();                                              \
  } while (0)

extern "C" {

/* the number of elements the vectorised kernel covers: 0 unless all pointers are 16-byte
 * aligned and n / 8 fits 32 bits */
static size_t vec_part(size_t n, const void *a, const void *b, const void *c) {
  uintptr_t m = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c;
  return (m & 15) || n / 8 > 0xffffffffu ? 0 : n / 8 * 8;
}

cudaError_t ppsrt_cu_add_bias(cudaStream_t s, void *y, const void *x, const void *bias, int N, int C) {
  size_t n = (size_t)N * C;
  if (n && C % 8 == 0 && vec_part(n, y, x, bias) == n) {
    LAUNCH(k_add_bias8, s, grid_for(n / 8, 256), 256)((bf16 *)y, (const bf16 *)x, (const bf16 *)bias,
                                                      (unsigned)(n / 8), (unsigned)(C / 8));
    return cudaGetLastError();
  }
  EW(k_add_bias, n, (bf16 *)y, (const bf16 *)x, (const bf16 *)bias, n, C);
}

cudaError_t ppsrt_cu_add_bias_gelu(cudaStream_t s, void *y, void *pre, const void *x, const void *bias, int N, int C) {
  size_t n = (size_t)N * C;
  if (n && C % 8 == 0 && vec_part(n, y, pre, x) == n && vec_part(n, bias, bias, bias) == n) {
    LAUNCH(k_add_bias_gelu8, s, grid_for(n / 8, 256), 256)((bf16 *)y, (bf16 *)pre, (const bf16 *)x,
                                                           (const bf16 *)bias, (unsigned)(n / 8), (unsigned)(C / 8));
    return cudaGetLastError();
  }
  EW(k_add_bias_gelu, n, (bf16 *)y, (bf16 *)pre, (const bf16 *)x, (const bf16 *)bias, n, C);
}

cudaError_t ppsrt_cu_bias_grad(cudaStream_t s, float *dbias, const void *dy, int N, int C) {
  return launch_colsum(s, dbias, NULL, (const bf16 *)dy, NULL, NULL, NULL, N, C);
}

cudaError_t ppsrt_cu_add(cudaStream_t s, void *y, const void *a, const void *c, size_t n) {
  size_t v = vec_part(n, y, a, c);
  if (v) {
    LAUNCH(k_add8, s, grid_for(v / 8, 256), 256)((bf16 *)y, (const bf16 *)a, (const bf16 *)c, (unsigned)(v / 8));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  n -= v;
  EW(k_add, n, (bf16 *)y + v, (const bf16 *)a + v, (const bf16 *)c + v, n);
}

cudaError_t ppsrt_cu_bias_dropout_add(cudaStream_t s, void *y, const void *a, const void *x, const void *bias, int N,
                                      int C, uint32_t thr, float scale, uint64_t key, uint64_t base) {
  size_t n = (size_t)N * C;
  EW(k_bias_dropout_add, n, (bf16 *)y, (const bf16 *)a, (const bf16 *)x, (const bf16 *)bias, n, C, thr, scale, key,
     base);
}

cudaError_t ppsrt_cu_gelu_fwd(cudaStream_t s, void *y, const void *x, size_t n) {
  size_t v = vec_part(n, y, x, x);
  if (v) {
    LAUNCH(k_gelu_fwd8, s, grid_for(v / 8, 256), 256)((bf16 *)y, (const bf16 *)x, (unsigned)(v / 8));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  n -= v;
  EW(k_gelu_fwd, n, (bf16 *)y + v, (const bf16 *)x + v, n);
}

cudaError_t ppsrt_cu_gelu_bwd(cudaStream_t s, void *dx, const void *dy, const void *x, size_t n) {
  size_t v = vec_part(n, dx, dy, x);
  if (v) {
    LAUNCH(k_gelu_bwd8, s, grid_for(v / 8, 256), 256)((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x,
                                                      (unsigned)(v / 8));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  n -= v;
  EW(k_gelu_bwd, n, (bf16 *)dx + v, (const bf16 *)dy + v, (const bf16 *)x + v, n);
}

cudaError_t ppsrt_cu_layernorm_fwd(cudaStream_t s, void *y, float *mean, float *rstd, const void *x,
                                   const void *gamma, const void *beta, int N, int C, float eps) {
  if (N <= 0 || C <= 0) return cudaSuccess;
  if (ln_vec(C, y, x, gamma, beta)) {
    LAUNCH(k_layernorm_fwd8, s, N, C / 8)((bf16 *)y, mean, rstd, (const bf16 *)x, (const bf16 *)gamma,
                                          (const bf16 *)beta, C, eps);
    return cudaGetLastError();
  }
  LAUNCH(k_layernorm_fwd, s, N, row_threads(C))((bf16 *)y, mean, rstd, (const bf16 *)x, (const bf16 *)gamma,
                                               (const bf16 *)beta, C, eps);
  return cudaGetLastError();
}

cudaError_t ppsrt_cu_layernorm_bwd_input(cudaStream_t s, void *dx, const void *dy, const void *x,
                                         const float *mean, const float *rstd, const void *gamma, int N, int C,
                                         int accumulate) {
  if (N <= 0 || C <= 0) return cudaSuccess;
  if (ln_vec(C, dx, dy, x, gamma)) {
    LAUNCH(k_layernorm_bwd_input8, s, N, C / 8)((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, mean, rstd,
                                                (const bf16 *)gamma, C, accumulate);
    return cudaGetLastError();
  }
  LAUNCH(k_layernorm_bwd_input, s, N, row_threads(C))((bf16 *)dx, (const bf16 *)dy, (const bf16 *)x, mean, rstd,
                                                     (const bf16 *)gamma, C, accumulate);
  return cudaGetLastError();
}

cudaError_t ppsrt_cu_layernorm_bwd_weight(cudaStream_t s, float *dgamma, float *dbeta, const void *dy,
                                          const void *x, const float *mean, const float *rstd, int N, int C) {
  return launch_colsum(s, dbeta, dgamma, (const bf16 *)dy, (const bf16 *)x, mean, rstd, N, C);
}

/* rope: the vectorised kernel when D % 16 == 0, ld % 8 == 0, x and cs 16-byte aligned
 * and the thread count fits 32 bits; else one thread per pair. */
cudaError_t ppsrt_cu_rope(cudaStream_t s, void *x, int ld, const int32_t *pos, const float *cs, int N, int H, int D,
                          int inverse) {
  if (N <= 0 || H <= 0 || D < 2) return cudaSuccess;
  size_t n8 = (size_t)N * H * (D / 16);
  if (D % 16 == 0 && ld % 8 == 0 && (((uintptr_t)x | (uintptr_t)cs) & 15) == 0 && n8 <= 0xffffffffu) {
    LAUNCH(k_rope8, s, grid_for(n8, 256), 256)((bf16 *)x, ld, pos, cs, (unsigned)N, (unsigned)H, (unsigned)D, inverse);
    return cudaGetLastError();
  }
  size_t n = (size_t)N * H * (D / 2);
  EW(k_rope, n, (bf16 *)x, ld, pos, cs, N, H, D, inverse);
}

/* swiglu: the vectorised kernels when C % 8 == 0, every pointer 16-byte aligned and
 * 2 N C / 8 fits 32 bits (the unit index of the up half) */
static int swiglu_vec(int N, int C, const void *a, const void *b, const void *c) {
  uintptr_t al = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c;
  return C % 8 == 0 && (al & 15) == 0 && (size_t)N * C / 4 <= 0xffffffffu;
}

cudaError_t ppsrt_cu_moe_route(cudaStream_t s, const float *logits, int N, int E, int K, const ppsrt_moe_router *r,
                               int32_t *idx, float *w, float *stat) {
  ppsrt_moe_router rv = {0, 0, 1.0f, NULL, 0.0f, NULL};
  if (r) rv = *r;
  if (N > 0) LAUNCH(k_moe_route, s, grid_for((size_t)N, 128), 128)(logits, N, E, K, rv, idx, w);
  LAUNCH(k_moe_stat, s, (unsigned)(E < 65535 ? E : 65535), 256)(logits, idx, N, E, K, rv, stat);
  return cudaGetLastError();
}

cudaError_t ppsrt_cu_moe_route_bwd(cudaStream_t s, void *dlogits, const float *dw, const float *logits, const int32_t *idx,
                                   const ppsrt_moe_router *r, const float *coef, int N, int E, int K) {
  ppsrt_moe_router rv = {0, 0, 1.0f, NULL, 0.0f, NULL};
  if (r) rv = *r;
  if (N <= 0) return cudaSuccess;
  LAUNCH(k_moe_route_bwd, s, grid_for((size_t)N, 128), 128)((bf16 *)dlogits, dw, logits, idx, rv, coef, N, E, K);
  return cudaGetLastError();
}

cudaError_t ppsrt_cu_moe_permute(cudaStream_t s, void *dst, const void *src, const int32_t *pos, int N, int K, int C) {
  EW(k_moe_permute, (size_t)N * K * C, (bf16 *)dst, (const bf16 *)src, pos, N, K, C);
}

cudaError_t ppsrt_cu_moe_permute_bwd(cudaStream_t s, void *dx, const void *dp, const int32_t *pos, int N, int K, int C,
                                     int accumulate) {
  EW(k_moe_permute_bwd, (size_t)N * C, (bf16 *)dx, (const bf16 *)dp, pos, N, K, C, accumulate);
}

cudaError_t ppsrt_cu_moe_unpermute(cudaStream_t s, void *y, const void *a, const void *e, const int32_t *pos,
                                   const float *w, int N, int K, int C) {
  EW(k_moe_unpermute, (size_t)N * C, (bf16 *)y, (const bf16 *)a, (const bf16 *)e, pos, w, N, K, C);
}

cudaError_t ppsrt_cu_moe_unpermute_bwd(cudaStream_t s, void *de, float *dw, const void *dy, const void *e,
                                       const int32_t *pos, const float *w, int N, int K, int C) {
  size_t slots = (size_t)N * K;
  if (!slots || C <= 0) return cudaSuccess;
  if (dw) LAUNCH(k_moe_unpermute_dw, s, grid_for(slots * 32, 256), 256)(dw, (const bf16 *)dy, (const bf16 *)e, pos, N, K, C);
  EW(k_moe_unpermute_de, slots * C, (bf16 *)de, (const bf16 *)dy, pos, w, N, K, C);
}

cudaError_t ppsrt_cu_swiglu_fwd(cudaStream_t s, void *y, const void *pre, int N, int C) {
  if (N <= 0 || C <= 0) return cudaSuccess;
  size_t n = (size_t)N * C;
  if (swiglu_vec(N, C, y, pre, pre)) {
    LAUNCH(k_swiglu_fwd8, s, grid_for(n / 8, 256), 256)((bf16 *)y, (const bf16 *)pre, (unsigned)(n / 8),
                                                        (unsigned)(C / 8));
    return cudaGetLastError();
  }
  EW(k_swiglu_fwd, n, (bf16 *)y, (const bf16 *)pre, N, C);
}

cudaError_t ppsrt_cu_swiglu_bwd(cudaStream_t s, void *dpre, const void *dy, const void *pre, int N, int C) {
  if (N <= 0 || C <= 0) return cudaSuccess;
  size_t n = (size_t)N * C;
  if (swiglu_vec(N, C, dpre, dy, pre)) {
    LAUNCH(k_swiglu_bwd8, s, grid_for(n / 8, 256), 256)((bf16 *)dpre, (const bf16 *)dy, (const bf16 *)pre,
                                                        (unsigned)(n / 8), (unsigned)(C / 8));
    return cudaGetLastError();
  }
  EW(k_swiglu_bwd, n, (bf16 *)dpre, (const bf16 *)dy, (const bf16 *)pre, N, C);
}

cudaError_t ppsrt_cu_embedding_fwd(cudaStream_t s, void *out, const int32_t *ids, const void *table, int N,
                                   int C, int lo, int hi, int accumulate) {
  size_t n = (size_t)N * C;
  EW(k_embedding_fwd, n, (bf16 *)out, ids, (const bf16 *)table, N, C, lo, hi, accumulate);
}

cudaError_t ppsrt_cu_embedding_bwd(cudaStream_t s, float *dtable, const void *dout, const int32_t *ids, int N,
                                   int C, int lo, int hi) {
  size_t n = (size_t)N * C;
  EW(k_embedding_bwd, n, dtable, (const bf16 *)dout, ids, N, C, lo, hi);
}

cudaError_t ppsrt_cu_softmax_stats(cudaStream_t s, float *max, float *sumexp, float *tgt, const void *logits,
                                   const int32_t *targets, int N, int V, int lo) {
  if (N <= 0) return cudaSuccess;
  LAUNCH(k_softmax_stats, s, N, row_threads(V))(max, sumexp, tgt, (const bf16 *)logits, targets, V, lo);
  return cudaGetLastError();
}

cudaError_t ppsrt_cu_softmax_xent_bwd(cudaStream_t s, void *dlogits, const void *logits, const float *gmax,
                                      const float *gsum, const int32_t *targets, int N, int V, int lo,
                                      float scale) {
  size_t n = (size_t)N * V;
  EW(k_softmax_xent_bwd, n, (bf16 *)dlogits, (const bf16 *)logits, gmax, gsum, targets, N, V, lo, scale);
}

cudaError_t ppsrt_cu_softmax_rescale_f32(cudaStream_t s, float *x, const float *lmax, const float *lsum,
                                         const float *gmax, const float *gsum, int N, int C) {
  size_t n = (size_t)N * C;
  EW(k_softmax_rescale_f32, n, x, lmax, lsum, gmax, gsum, N, C);
}

cudaError_t ppsrt_cu_optimizer_step(cudaStream_t s, int kind, float *w, void *param, float *g, float *m,
                                    float *v, size_t n, float lr, float beta1, float beta2, float eps,
                                    float weight_decay, float c1, float c2) {
  EW(k_optimizer, n, kind, w, (bf16 *)param, g, m, v, n, lr, beta1, beta2, eps, weight_decay, c1, c2);
}

cudaError_t ppsrt_cu_axpy_f32(cudaStream_t s, float *y, const float *x, float a, size_t n) {
  EW(k_axpy, n, y, x, a, n);
}

cudaError_t ppsrt_cu_scale_f32(cudaStream_t s, float *x, float a, size_t n) { EW(k_scale, n, x, a, n); }

cudaError_t ppsrt_cu_bf16_to_f32(cudaStream_t s, float *dst, const void *src, size_t n) {
  EW(k_bf16_to_f32, n, dst, (const bf16 *)src, n);
}

cudaError_t ppsrt_cu_f32_to_bf16(cudaStream_t s, void *dst, const float *src, size_t n) {
  EW(k_f32_to_bf16, n, (bf16 *)dst, src, n);
}

cudaError_t ppsrt_cu_scale_matrix(cudaStream_t s, void *C, int is_bf16, int M, int N, int ldc, float beta) {
  size_t n = (size_t)M * N;
  EW(k_scale_matrix, n, C, is_bf16, M, N, ldc, beta);
}

cudaError_t ppsrt_cu_attn_softmax_fwd(cudaStream_t s, void *P, float *lse, const float *S, int nh, int R, int C,
                                      int r0, int T, int Td, float scale, uint32_t thr, float dscale, uint64_t key,
                                      uint64_t hb) {
  if (nh <= 0 || R <= 0) return cudaSuccess;
  LAUNCH(k_attn_softmax_fwd, s, dim3(R, nh), row_threads(C))((bf16 *)P, lse, S, R, C, r0, T, Td, scale, thr, dscale, key,
                                                              hb);
  return cudaGetLastError();
}

cudaError_t ppsrt_cu_attn_prob(cudaStream_t s, void *P, const float *S, const float *lse, int nh, int R, int C,
                               int r0, int T, int Td, float scale, uint32_t thr, float dscale, uint64_t key, uint64_t hb) {
  if (nh <= 0 || R <= 0) return cudaSuccess;
  LAUNCH(k_attn_prob, s, dim3(R, nh), row_threads(C))((bf16 *)P, S, lse, R, C, r0, T, Td, scale, thr, dscale, key, hb);
  return cudaGetLastError();
}

cudaError_t ppsrt_cu_attn_delta(cudaStream_t s, float *delta, const void *dout, const void *out, int ldo, int nh,
                                int T, int D) {
  size_t warps = (size_t)nh * T;
  if (warps == 0) return cudaSuccess;
  LAUNCH(k_attn_delta, s, (unsigned)((warps * 32 + 255) / 256), 256)(delta, (const bf16 *)dout,
                                                                    (const bf16 *)out, ldo, nh, T, D);
  return cudaGetLastError();
}

cudaError_t ppsrt_cu_attn_dscores(cudaStream_t s, void *dS, const float *S, const float *dP, const float *lse,
                                  const float *delta, int nh, int R, int C, int r0, int T, int Td, float scale,
                                  uint32_t thr, float dscale, uint64_t key, uint64_t hb) {
  if (nh <= 0 || R <= 0) return cudaSuccess;
  LAUNCH(k_attn_dscores, s, dim3(R, nh), row_threads(C))((bf16 *)dS, S, dP, lse, delta, R, C, r0, T, Td, scale, thr,
                                                          dscale, key, hb);
  return cudaGetLastError();
}

static __global__ void k_copy_rows(bf16 *dst, int ldd, const bf16 *src, int lds, int rows, int cols) {
  size_t total = (size_t)rows * cols;
  GRID_STRIDE(i, total) {
    size_t r = i / cols, c = i % cols;
    dst[r * ldd + c] = src[r * lds + c];
  }
}
cudaError_t ppsrt_cu_copy_rows_bf16(cudaStream_t s, void *dst, int ldd, const void *src, int lds, int rows, int cols) {
  size_t n = (size_t)rows * cols;
  EW(k_copy_rows, n, (bf16 *)dst, ldd, (const bf16 *)src, lds, rows, cols);
}

cudaError_t ppsrt_cu_store_rows_bf16(cudaStream_t s, void *dst, int ldd, const float *src, int T, int D) {
  return ppsrt_cu_store_heads_bf16(s, dst, ldd, src, 1, T, D);
}

cudaError_t ppsrt_cu_store_heads_bf16(cudaStream_t s, void *dst, int ldd, const float *src, int nh, int T, int D) {
  size_t n = (size_t)nh * T * D;
  EW(k_store_heads, n, (bf16 *)dst, ldd, src, nh, T, D);
}

cudaError_t ppsrt_cu_sum_heads_f32(cudaStream_t s, float *acc, const float *src, int nsum, size_t n) {
  EW(k_sum_heads, n, acc, src, nsum, n);
}

cudaError_t ppsrt_cu_probe(struct cudaFuncAttributes *attr) { return cudaFuncGetAttributes(attr, k_layernorm_fwd); }

cudaError_t ppsrt_cu_reduce_f32(cudaStream_t s, float *dst, const float *const *srcs, int nsrc, size_t n,
                                int op_max) {
  if (nsrc < 1 || nsrc > PPSRT_CU_MAX_SRCS) return cudaErrorInvalidValue;
  srcs_arg a;
  for (int k = 0; k < PPSRT_CU_MAX_SRCS; k++) a.p[k] = k < nsrc ? srcs[k] : NULL;
  EW(k_reduce, n, dst, a, nsrc, n, op_max);
}

}  /* extern "C" */
