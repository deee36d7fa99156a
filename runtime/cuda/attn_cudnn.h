/* attn_cudnn.h: the C interface of attn_cudnn.cpp (cuDNN fused attention) for the CUDA
 * backend. Built only when configure finds the cuDNN frontend headers (HAVE_CUDNN_FE);
 * libcudnn itself is opened at run time. Not installed, not public. */
#ifndef PPSRT_ATTN_CUDNN_H
#define PPSRT_ATTN_CUDNN_H
#include <stddef.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PPSRT_CUDNN_SLOTS 3   /* one handle per scratch slot of the backend */

typedef struct ppsrt_cudnn ppsrt_cudnn;

/* One attention call's shape and layout (elements, row strides): see attention_fwd /
 * attention_bwd in backend.h. ldo is out's (and dout's) row stride, ldd the gradients'. */
typedef struct {
  int backward;
  int batch, T, Hq, Hkv, D;
  int ldq, ldk, ldv, ldo, ldd;
} ppsrt_cudnn_attn_shape;

typedef struct {
  const void *q, *k, *v;
  void *out;         /* written forward, read backward */
  void *lse;         /* F32 [batch][Hq][T], likewise */
  const void *dout;  /* backward */
  void *dq, *dk, *dv;
} ppsrt_cudnn_attn_ptrs;

/* The version of the cuDNN library that would be used (e.g. 91900), 0 when none loads. */
int ppsrt_cudnn_version(void);
/* 0, or -1 with the reason in msg (cuDNN not found, too old). */
int ppsrt_cudnn_create(ppsrt_cudnn **out, char *msg, size_t n);
void ppsrt_cudnn_destroy(ppsrt_cudnn *c);
/* Builds (once) the plan for this shape on handle `slot`; *ws_bytes: the scratch it needs.
 * -1 with the reason when cuDNN has no engine for the shape. */
int ppsrt_cudnn_attn_prepare(ppsrt_cudnn *c, int slot, const ppsrt_cudnn_attn_shape *sh, size_t *ws_bytes,
                             char *msg, size_t n);
/* Enqueues the prepared plan on stream s with scratch ws. */
int ppsrt_cudnn_attn_run(ppsrt_cudnn *c, int slot, cudaStream_t s, const ppsrt_cudnn_attn_shape *sh, void *ws,
                         const ppsrt_cudnn_attn_ptrs *p, char *msg, size_t n);

#ifdef __cplusplus
}
#endif
#endif
